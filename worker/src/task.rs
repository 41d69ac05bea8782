//! A task as the worker receives it, and how an attempt fails.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
pub use weft_proto::types::FailureKind;

/// A bundle file a task needs in its scratch directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobFile {
    /// Relative path.
    pub path: String,
    /// Content hash.
    pub sha256: String,
    /// Unix permission bits.
    pub mode: u32,
}

/// One task attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The run.
    pub run_id: String,
    /// The attempt's key within the run.
    pub key: u64,
    /// The node.
    pub node: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The node's kind.
    pub kind: String,
    /// The kind's fields, as JSON.
    pub config_json: String,
    /// The state the task sees, field by field. Values are shared with the
    /// worker's cache, so a task never copies a field it does not read.
    pub state: Vec<(String, Arc<Value>)>,
    /// The version of each field of `state`, in its order (empty when not
    /// known): a Python process is sent a value once per version.
    pub state_versions: Vec<u64>,
    /// The scope, as JSON.
    pub scope_json: String,
    /// The map item's index, for a chain step.
    pub item: Option<u64>,
    /// Per-attempt deadline.
    pub timeout: Duration,
    /// Bundle files.
    pub bundle: Vec<BlobFile>,
    /// For a `teammates: true` step of a map item with a team: its seat.
    pub team: Option<crate::TeamSeat>,
    /// An `llm` or `agent` step's rendered prompts, as JSON.
    pub prompts_json: String,
    /// W3C trace context of the attempt's span (empty: not traced); a
    /// script gets it as `TRACEPARENT`.
    pub traceparent: String,
}

/// What a finished attempt produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completed {
    /// The fields written (a JSON object, with `_next` or `_send`).
    pub writes: Value,
    /// The transient `output` of an `llm` or `agent` step.
    pub output: Option<Value>,
    /// What happened along the way, for the run's events
    /// (`{"type": "model_called", …}`, `{"type": "tool_called", …}`).
    pub notes: Vec<Value>,
}

impl Completed {
    /// An attempt that wrote `writes` and nothing else.
    pub fn writes(writes: Value) -> Self {
        Self {
            writes,
            ..Self::default()
        }
    }
}

impl Task {
    /// The state as JSON text (scripts receive the whole state).
    pub fn state_json(&self) -> String {
        let mut text = String::from("{");
        for (i, (name, value)) in self.state.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&Value::from(name.as_str()).to_string());
            text.push(':');
            text.push_str(&value.to_string());
        }
        text.push('}');
        text
    }
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Its class.
    pub kind: FailureKind,
    /// What happened.
    pub message: String,
}

impl Failure {
    /// A failure of class `kind`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}
