//! A streamed chat completion (`stream: true`), read as it arrives: the
//! server-sent events of an OpenAI-compatible endpoint (`data: {chunk}`
//! lines, `data: [DONE]` last) are put back together into the message a
//! whole reply would have held — its text, its tool calls by index, the
//! model and the usage of the last chunk (`stream_options.include_usage`)
//! — and each piece of text or tool call is told as it comes
//! ([`Delta`]), for the coordinator's watchers.
//!
//! [`Assembler`] is pure: bytes in, deltas and at the end the message out,
//! whatever the bytes' cut (an event split across reads, `\r\n` line ends,
//! comments and other fields ignored as the format says).

use serde_json::{Map, Value, json};

/// A piece of a streamed reply, as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delta {
    /// Text of the reply's content.
    Text(String),
    /// A tool call began: its name.
    ToolCall(String),
}

/// Why a stream is not a chat completion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StreamError {
    /// An event's data is not JSON.
    #[error("an event is not JSON: {0}")]
    NotJson(String),
    /// The server sent an error in the stream.
    #[error("the stream ended in an error: {0}")]
    Error(String),
    /// The stream ended with no chunk at all.
    #[error("the stream held no chunk")]
    Empty,
}

/// The message a stream's chunks make, as they come.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    /// Bytes of a line not yet ended.
    pending: Vec<u8>,
    /// The data lines of the event being read.
    data: String,
    content: String,
    /// Whether any chunk carried content (a reply of tool calls alone
    /// has `content: null`).
    has_content: bool,
    tool_calls: Vec<Map<String, Value>>,
    model: String,
    usage: Value,
    chunks: usize,
    done: bool,
}

impl Assembler {
    /// Takes the next bytes of the body, adding the deltas they complete
    /// to `deltas`; those before an error in the same bytes stay there.
    pub fn push(&mut self, bytes: &[u8], deltas: &mut Vec<Delta>) -> Result<(), StreamError> {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..line.len() - 1]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            self.line(line, deltas)?;
        }
        Ok(())
    }

    fn line(&mut self, line: &str, deltas: &mut Vec<Delta>) -> Result<(), StreamError> {
        if line.is_empty() {
            let data = std::mem::take(&mut self.data);
            return self.event(&data, deltas);
        }
        // `field: value` (one space after the colon is not part of the
        // value); a line starting with `:` is a comment.
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        if field == "data" {
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(value);
        }
        Ok(())
    }

    fn event(&mut self, data: &str, deltas: &mut Vec<Delta>) -> Result<(), StreamError> {
        let data = data.trim();
        if data.is_empty() || self.done {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|_| StreamError::NotJson(super::chat::quote(data)))?;
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(StreamError::Error(message));
        }
        self.chunks += 1;
        if let Some(model) = chunk.get("model").and_then(Value::as_str) {
            model.clone_into(&mut self.model);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = usage.clone();
        }
        let Some(delta) = chunk.pointer("/choices/0/delta") else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.has_content = true;
            if !text.is_empty() {
                self.content.push_str(text);
                deltas.push(Delta::Text(text.to_owned()));
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.tool_call(call, deltas);
        }
        Ok(())
    }

    /// A piece of tool call `index`: its id, type and name come once, its
    /// arguments in pieces to be joined.
    fn tool_call(&mut self, piece: &Value, deltas: &mut Vec<Delta>) {
        let index = piece
            .get("index")
            .and_then(Value::as_u64)
            .map_or(self.tool_calls.len().saturating_sub(1), |i| i as usize);
        // Indexes far beyond the calls seen are a broken stream's: at most
        // one new call a piece.
        let index = index.min(self.tool_calls.len());
        if index == self.tool_calls.len() {
            let mut call = Map::new();
            call.insert("type".into(), json!("function"));
            call.insert("function".into(), json!({"name": "", "arguments": ""}));
            self.tool_calls.push(call);
        }
        let call = &mut self.tool_calls[index];
        if let Some(id) = piece.get("id").and_then(Value::as_str) {
            call.insert("id".into(), json!(id));
        }
        if let Some(kind) = piece.get("type").and_then(Value::as_str) {
            call.insert("type".into(), json!(kind));
        }
        let Some(function) = piece.get("function") else {
            return;
        };
        let whole = call
            .get_mut("function")
            .and_then(Value::as_object_mut)
            .expect("made with a function");
        for field in ["name", "arguments"] {
            if let Some(text) = function.get(field).and_then(Value::as_str) {
                let joined = whole
                    .get_mut(field)
                    .and_then(|v| match v {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .expect("made with strings");
                joined.push_str(text);
                if field == "name" && !text.is_empty() {
                    deltas.push(Delta::ToolCall(text.to_owned()));
                }
            }
        }
    }

    /// The whole reply, once the body has ended: `(message, model,
    /// usage)` as a reply without streaming holds them.
    pub fn finish(mut self) -> Result<(Value, String, Value), StreamError> {
        // A last event without its blank line.
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            let rest = String::from_utf8_lossy(&rest).into_owned();
            self.line(rest.trim_end_matches('\r'), &mut Vec::new())?;
        }
        let data = std::mem::take(&mut self.data);
        self.event(&data, &mut Vec::new())?;
        if self.chunks == 0 {
            return Err(StreamError::Empty);
        }
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        let content = if self.has_content || self.tool_calls.is_empty() {
            Value::String(self.content)
        } else {
            Value::Null
        };
        message.insert("content".into(), content);
        if !self.tool_calls.is_empty() {
            let calls = self.tool_calls.into_iter().map(Value::Object).collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        Ok((Value::Object(message), self.model, self.usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(chunk: Value) -> String {
        format!("data: {chunk}\n\n")
    }

    fn text_chunk(text: &str) -> Value {
        json!({"model": "tiny", "choices": [{"index": 0, "delta": {"content": text}}]})
    }

    #[test]
    fn text_comes_as_deltas_whatever_the_cut_and_makes_the_whole_message() {
        let body = [
            ": a comment\n\n".to_owned(),
            event(json!({"model": "tiny", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})),
            event(text_chunk("Hel")),
            "data: ".to_owned() + &text_chunk("lo, ").to_string() + "\r\n\r\n",
            event(text_chunk("world")),
            event(json!({"model": "tiny", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        // Fed three bytes at a time: events split anywhere.
        let mut assembler = Assembler::default();
        let mut deltas = Vec::new();
        for piece in body.as_bytes().chunks(3) {
            assembler.push(piece, &mut deltas).unwrap();
        }
        assert_eq!(
            deltas,
            ["Hel", "lo, ", "world"].map(|t| Delta::Text(t.into()))
        );
        let (message, model, usage) = assembler.finish().unwrap();
        assert_eq!(
            message,
            json!({"role": "assistant", "content": "Hello, world"})
        );
        assert_eq!(model, "tiny");
        assert_eq!(usage["completion_tokens"], 4);
    }

    #[test]
    fn tool_calls_are_joined_by_index() {
        let pieces = [
            json!({"choices": [{"delta": {"content": null, "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "search", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"x\"}"}}]}}]}),
        ];
        let mut assembler = Assembler::default();
        let mut deltas = Vec::new();
        for piece in pieces {
            assembler
                .push(event(piece).as_bytes(), &mut deltas)
                .unwrap();
        }
        assert_eq!(
            deltas,
            [
                Delta::ToolCall("search".into()),
                Delta::ToolCall("add".into())
            ]
        );
        let (message, _, usage) = assembler.finish().unwrap();
        assert_eq!(usage, Value::Null);
        assert_eq!(message["content"], Value::Null);
        assert_eq!(
            message["tool_calls"],
            json!([
                {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"x\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "add", "arguments": "{}"}},
            ])
        );
    }

    #[test]
    fn an_error_event_or_a_bad_chunk_fails_and_nothing_is_no_reply() {
        // The text before the error in the same bytes is kept.
        let mut assembler = Assembler::default();
        let mut deltas = Vec::new();
        let bytes =
            event(text_chunk("so far")) + &event(json!({"error": {"message": "overloaded"}}));
        let error = assembler.push(bytes.as_bytes(), &mut deltas).unwrap_err();
        assert_eq!(error, StreamError::Error("overloaded".into()));
        assert_eq!(deltas, [Delta::Text("so far".into())]);
        let mut assembler = Assembler::default();
        let error = assembler
            .push(b"data: {not json\n\n", &mut Vec::new())
            .unwrap_err();
        assert!(matches!(error, StreamError::NotJson(_)), "{error:?}");
        assert_eq!(
            Assembler::default().finish().unwrap_err(),
            StreamError::Empty
        );
        // A last event without its blank line still counts.
        let mut assembler = Assembler::default();
        assembler
            .push(
                format!("data: {}", text_chunk("end")).as_bytes(),
                &mut Vec::new(),
            )
            .unwrap();
        assert_eq!(assembler.finish().unwrap().0["content"], "end");
    }
}
