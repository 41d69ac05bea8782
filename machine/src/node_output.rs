//! What a task returned, as the machine takes it: the fields it wrote,
//! its `_next`, and the teammate messages it sends (`_send`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use weft_proto::events::RunEvent;

use crate::RunInput;

/// A message a step asks to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The recipient's identity.
    pub to: String,
    /// The content.
    pub content: Value,
}

/// A cached step's answer as its worker sent it: the writes' JSON text
/// and the transient output (boxed: most outputs have none).
pub type Cacheable = Box<(String, Option<Value>)>;

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
    /// What the attempt noted on the way (`model_called`, `tool_called`).
    pub notes: Vec<Value>,
    /// The worker that ran it (for `node_finished`).
    pub worker: Option<String>,
    /// The fields written that are held as their JSON text
    /// ([`crate::held`]): their value in `writes` is a placeholder.
    pub held: BTreeMap<String, Arc<str>>,
    /// What the worker sent, kept for a step with a `cache:` until its
    /// output is accepted ([`crate::Effect::Cache`]).
    pub cacheable: Option<Cacheable>,
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
    /// Not JSON at all.
    #[error("the worker sent invalid JSON: {0}")]
    NotJson(String),
    /// More fields than a task may write.
    #[error(
        "the task wrote {count} fields; a task writes at most {max} (configuration key max_output_fields)"
    )]
    TooManyFields {
        /// The fields written.
        count: usize,
        /// The limit.
        max: usize,
    },
}

impl NodeOutput {
    /// A task's output as its worker sent it (nothing: no writes), with at
    /// most `max_fields` fields: the one place a task's output is found
    /// invalid for what it is (`invalid_output`).
    pub fn accept(json: &str, max_fields: usize) -> Result<Self, OutputError> {
        let value = if json.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str(json).map_err(|error| OutputError::NotJson(error.to_string()))?
        };
        Self::from_json(value)?.at_most(max_fields)
    }

    /// As [`NodeOutput::accept`], for an output read with its large
    /// strings held as their text ([`RunInput::read_writes`]).
    pub fn accept_read(read: RunInput, max_fields: usize) -> Result<Self, OutputError> {
        let mut output = Self::from_json(Value::Object(read.values))?;
        output.held = read.held;
        output.at_most(max_fields)
    }

    fn at_most(self, max_fields: usize) -> Result<Self, OutputError> {
        let output = self;
        if output.writes.len() > max_fields {
            return Err(OutputError::TooManyFields {
                count: output.writes.len(),
                max: max_fields,
            });
        }
        Ok(output)
    }

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
            notes: Vec::new(),
            worker: None,
            held: BTreeMap::new(),
            cacheable: None,
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

/// The run event of a note a worker sent with a step's result; `None` for
/// a note this version does not know.
pub(crate) fn note_event(node: &str, item: Option<usize>, note: &Value) -> Option<RunEvent> {
    let number = |key: &str| note.get(key).and_then(Value::as_u64);
    let text = |key: &str| note.get(key).and_then(Value::as_str).map(str::to_owned);
    let node = node.to_owned();
    let latency_ms = number("latency_ms").unwrap_or(0);
    match note.get("type").and_then(Value::as_str)? {
        "model_called" => Some(RunEvent::ModelCalled {
            node: node.into(),
            item,
            model: text("model").unwrap_or_default(),
            prompt_tokens: number("prompt_tokens"),
            completion_tokens: number("completion_tokens"),
            latency_ms,
            provider: text("provider"),
            cached_tokens: number("cached_tokens"),
            cost: None,
        }),
        "retrieved" => Some(RunEvent::Retrieved {
            node: node.into(),
            item,
            knowledge: note
                .get("knowledge")
                .and_then(Value::as_array)
                .map(|names| {
                    names
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            mode: text("mode").unwrap_or_default(),
            hits: note
                .get("hits")
                .and_then(Value::as_array)
                .map(|hits| {
                    hits.iter()
                        .map(|hit| weft_proto::events::RetrievedHit {
                            source: hit["source"].as_str().unwrap_or_default().to_owned(),
                            heading: hit["heading"].as_str().unwrap_or_default().to_owned(),
                            score: hit["score"].as_f64().unwrap_or(0.0),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            latency_ms,
        }),
        "index_built" => Some(RunEvent::IndexBuilt {
            node: node.into(),
            item,
            knowledge: text("knowledge").unwrap_or_default(),
            key: text("key").unwrap_or_default(),
            files: number("files").unwrap_or(0),
            bytes: number("bytes").unwrap_or(0),
            chunks: number("chunks").unwrap_or(0),
            index_bytes: number("index_bytes").unwrap_or(0),
            embedding_calls: number("embedding_calls").unwrap_or(0),
            vector_search: text("vector_search"),
            latency_ms,
        }),
        "tool_called" => Some(RunEvent::ToolCalled {
            node: node.into(),
            item,
            tool: text("tool").unwrap_or_default(),
            error: text("error"),
            latency_ms,
        }),
        _ => None,
    }
}
