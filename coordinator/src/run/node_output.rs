//! What a task returned, as the machine takes it: the fields it wrote,
//! its `_next`, and the teammate messages it sends (`_send`).

use serde_json::{Map, Value};

/// A message a step asks to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The recipient's identity.
    pub to: String,
    /// The content.
    pub content: Value,
}

/// What a task returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeOutput {
    /// The fields written: a whole state or a partial update.
    pub writes: Map<String, Value>,
    /// `_next`: route to this node alone.
    pub next: Option<String>,
    /// The transient completion of an llm/agent step, for `state_updates`.
    pub output: Option<Value>,
    /// `_send`: teammate messages to send once the step is accepted.
    pub sends: Vec<Outgoing>,
    /// The numbers of the messages handed to the step that it read (a
    /// script reads its whole inbox; a handler, what it took from its
    /// context).
    pub read: Vec<u64>,
}

/// Why what a task returned is not a node's output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// Not a JSON object.
    #[error("expected one JSON object, got {0}")]
    NotAnObject(&'static str),
    /// `_next` is not a node id.
    #[error("`_next` must be a node id, got {0}")]
    BadNext(Value),
    /// `_send` is not a list of `{"to", "content"}` objects.
    #[error("`_send` must be a list of {{\"to\": ID, \"content\": JSON}} objects; {0}")]
    BadSend(String),
}

impl NodeOutput {
    /// Reads a JSON object as returned by a script or handler: its fields,
    /// plus the optional `_next` (a node id).
    pub fn from_json(value: Value) -> Result<Self, OutputError> {
        let mut writes = match value {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(OutputError::NotAnObject(crate::graph::json_type_name(
                    &other,
                )));
            }
        };
        let next = match writes.remove("_next") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id),
            Some(other) => return Err(OutputError::BadNext(other)),
        };
        let sends = match writes.remove("_send") {
            None | Some(Value::Null) => Vec::new(),
            Some(value) => read_sends(value)?,
        };
        Ok(Self {
            writes,
            next,
            output: None,
            sends,
            read: Vec::new(),
        })
    }
}

/// Reads `_send`: `[{"to": ID, "content": JSON}, ...]`.
fn read_sends(value: Value) -> Result<Vec<Outgoing>, OutputError> {
    let Value::Array(entries) = value else {
        return Err(OutputError::BadSend(format!(
            "got {}",
            crate::graph::json_type_name(&value)
        )));
    };
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let Value::Object(mut entry) = entry else {
                return Err(OutputError::BadSend(format!("entry {i} is not an object")));
            };
            let to = match entry.remove("to") {
                Some(Value::String(to)) => to,
                _ => {
                    return Err(OutputError::BadSend(format!(
                        "entry {i} has no string `to`"
                    )));
                }
            };
            let content = entry.remove("content").ok_or_else(|| {
                OutputError::BadSend(format!("entry {i} (to '{to}') has no `content`"))
            })?;
            if let Some(extra) = entry.keys().next() {
                return Err(OutputError::BadSend(format!(
                    "entry {i} (to '{to}') has an unknown key '{extra}'"
                )));
            }
            Ok(Outgoing { to, content })
        })
        .collect()
}
