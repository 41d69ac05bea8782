//! The large input strings this client sent, by the run and field that
//! carried them, so that a later submission of the same string names it
//! (`SubmitRequest.input_refs`) rather than send it again: the same
//! 10 MB document given to run after run crosses once.
//!
//! Only values the coordinator said it keeps are remembered
//! (`SubmitResponse.referable`); a submission names one when its string
//! is the same, byte for byte (its length first). A coordinator that no
//! longer keeps it (it restarted, failed over, let it go) refuses the
//! submission with `input reference not held:`, and the client forgets
//! what it remembered and sends the input whole. Bounded: the newest
//! [`MOST_VALUES`] values and [`MOST_BYTES`] in all.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::kept::KEPT_STRING_BYTES;

/// At most this many values are remembered.
const MOST_VALUES: usize = 16;
/// At most this many bytes of values are remembered.
const MOST_BYTES: usize = 256 << 20;

/// What a refusal for a value no longer kept begins with.
pub(crate) const NOT_HELD: &str = "input reference not held:";

/// A value sent, and where the coordinator keeps it.
struct Sent {
    value: Arc<str>,
    run: String,
    field: String,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct SentValues {
    sent: Mutex<VecDeque<Sent>>,
}

impl std::fmt::Debug for SentValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let values = self.sent.lock().map_or(0, |sent| sent.len());
        f.debug_struct("SentValues")
            .field("values", &values)
            .finish()
    }
}

/// A field of an input to name rather than send: (field, run, its field).
pub(crate) type Reference = (String, String, String);

impl SentValues {
    /// The top-level strings of `input` sent before, each with the run
    /// and field it was sent in.
    pub(crate) fn references(&self, input: &Map<String, Value>) -> Vec<Reference> {
        let Ok(sent) = self.sent.lock() else {
            return Vec::new();
        };
        if sent.is_empty() {
            return Vec::new();
        }
        input
            .iter()
            .filter_map(|(field, value)| {
                let text = value.as_str().filter(|s| s.len() >= KEPT_STRING_BYTES)?;
                let found = sent.iter().rev().find(|sent| *sent.value == *text)?;
                Some((field.clone(), found.run.clone(), found.field.clone()))
            })
            .collect()
    }

    /// Remembers the `referable` fields of run `run`'s `input` (a value
    /// remembered already now names this run, the newest).
    pub(crate) fn remember(&self, run: &str, input: &Map<String, Value>, referable: &[String]) {
        let Ok(mut sent) = self.sent.lock() else {
            return;
        };
        for field in referable {
            let Some(text) = input.get(field).and_then(Value::as_str) else {
                continue;
            };
            let value = match sent.iter().position(|sent| *sent.value == *text) {
                Some(at) => sent.remove(at).map(|old| old.value),
                None => None,
            };
            sent.push_back(Sent {
                value: value.unwrap_or_else(|| Arc::from(text)),
                run: run.to_owned(),
                field: field.clone(),
            });
        }
        let mut bytes: usize = sent.iter().map(|sent| sent.value.len()).sum();
        while sent.len() > MOST_VALUES || bytes > MOST_BYTES {
            let Some(oldest) = sent.pop_front() else {
                break;
            };
            bytes -= oldest.value.len();
        }
    }

    /// Forgets every value (the coordinator no longer keeps one of them).
    pub(crate) fn forget(&self) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.clear();
        }
    }
}

/// `input` as JSON, with `null` in the place of each field `named` (the
/// values are moved out while it is written, then put back: no copy).
pub(crate) fn write_without(input: &mut Map<String, Value>, named: &[Reference]) -> String {
    let taken: Vec<(&String, Value)> = named
        .iter()
        .filter_map(|(field, _, _)| Some((field, input.get_mut(field)?.take())))
        .collect();
    let text = weft_proto::json::object_to_string(input);
    for (field, value) in taken {
        if let Some(slot) = input.get_mut(field) {
            *slot = value;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn big(c: char) -> String {
        std::iter::repeat_n(c, KEPT_STRING_BYTES).collect()
    }

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn a_string_sent_and_kept_is_named_the_next_time() {
        let sent = SentValues::default();
        let first = map(json!({"doc": big('a'), "other": big('b'), "n": 1}));
        assert!(sent.references(&first).is_empty(), "nothing sent yet");
        // The coordinator keeps `doc` only.
        sent.remember("run-1", &first, &["doc".to_owned()]);
        let second = map(json!({"text": big('a'), "other": big('b'), "n": 2}));
        assert_eq!(
            sent.references(&second),
            [("text".to_owned(), "run-1".to_owned(), "doc".to_owned())]
        );
        // Named again, it now names the newer run.
        sent.remember("run-2", &second, &["text".to_owned()]);
        assert_eq!(
            sent.references(&second),
            [("text".to_owned(), "run-2".to_owned(), "text".to_owned())]
        );
        let mut differs = big('a');
        differs.pop();
        differs.push('!');
        assert!(sent.references(&map(json!({"doc": differs}))).is_empty());
        sent.forget();
        assert!(sent.references(&second).is_empty());
    }

    #[test]
    fn the_oldest_values_are_let_go() {
        let sent = SentValues::default();
        for n in 0..MOST_VALUES + 1 {
            let input = map(json!({ "doc": format!("{n}{}", big('x')) }));
            sent.remember(&format!("run-{n}"), &input, &["doc".to_owned()]);
        }
        let first = map(json!({ "doc": format!("0{}", big('x')) }));
        assert!(sent.references(&first).is_empty());
        let last = map(json!({ "doc": format!("{MOST_VALUES}{}", big('x')) }));
        assert_eq!(sent.references(&last).len(), 1);
    }

    #[test]
    fn a_named_field_is_written_as_null() {
        let mut input = map(json!({"doc": big('a'), "n": 1}));
        let named = [("doc".to_owned(), "run-1".to_owned(), "doc".to_owned())];
        assert_eq!(write_without(&mut input, &named), r#"{"doc":null,"n":1}"#);
        assert_eq!(input["doc"], json!(big('a')), "put back");
        let whole = write_without(&mut input, &[]);
        assert_eq!(
            serde_json::from_str::<Value>(&whole).unwrap(),
            Value::Object(input)
        );
    }
}
