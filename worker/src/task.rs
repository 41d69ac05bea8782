//! A task attempt in the worker's own terms, its JSON read: what it runs
//! with and how it ends. The rest of what crosses a worker's stream (calls,
//! teammate messages and seats, tool calls, bundle files) is the worker
//! protocol's own (`weft_proto::worker_protocol`), shared with the
//! coordinator; the connection (`crate::connection`) is the one place that
//! reads and writes it.

use std::sync::Arc;
use std::time::Duration;
pub use weft_proto::TaskKey;
use weft_proto::{NodeId, RunId};

use serde_json::Value;
pub use weft_proto::types::FailureKind;
use weft_proto::types::WorkerKind;
pub use weft_proto::worker_protocol::{
    BlobRef, CallTarget, FunctionCall, PythonCall, TeamMessage, TeamSeat, ToolContext, ToolInfo,
};
use weft_proto::worker_protocol::{ItemRef, TaskAssignment, TaskError, TaskOutput, TaskResult};

use crate::field::FieldValue;
use weft_proto::json::parse_or_null;

/// One task attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The run.
    pub run_id: RunId,
    /// The attempt's key within the run.
    pub key: TaskKey,
    /// The node.
    pub node: NodeId,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The node's kind.
    pub kind: WorkerKind,
    /// The kind's fields (`handler`, `argv`, `provider`, …), read once per
    /// node definition the worker keeps and shared by its tasks.
    pub config: Arc<Value>,
    /// The state the task sees, field by field. Values are shared with the
    /// worker's cache, so a task never copies a field it does not read, and
    /// kept as their JSON text until something reads them.
    pub state: Vec<(Arc<str>, Arc<FieldValue>)>,
    /// The version of each field of `state`, in its order (empty when not
    /// known): a Python process is sent a value once per version.
    pub state_versions: Vec<u64>,
    /// The step's scope: a map item's bindings (empty outside a map).
    pub scope: crate::Scope,
    /// The map item's index, for a chain step.
    pub item: Option<u64>,
    /// For a chain step: the map, the item and the step's place in the
    /// chain.
    pub place: Option<ItemRef>,
    /// Per-attempt deadline.
    pub timeout: Duration,
    /// Bundle files.
    pub bundle: Arc<Vec<BlobRef>>,
    /// For a `teammates: true` step of a map item with a team: its seat.
    pub team: Option<TeamSeat>,
    /// An `llm` or `agent` step's rendered prompts,
    /// `{"system": TEXT, "prompt": TEXT}` (`Null` for other kinds).
    pub prompts: Value,
    /// W3C trace context of the attempt's span (empty: not traced); a
    /// script gets it as `TRACEPARENT`.
    pub traceparent: String,
    /// An agent step's registered tools that other workers host: how to
    /// offer them to the model (their calls go through the coordinator).
    pub remote_tools: Vec<ToolInfo>,
    /// How the coordinator paces its model calls (SPEC 18).
    pub flow: Option<weft_proto::worker_protocol::CallFlow>,
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
    /// The state as JSON text (scripts receive the whole state): each
    /// field's text as it was sent, none of them parsed.
    pub fn state_json(&self) -> String {
        weft_proto::json::object_of_texts(
            self.state
                .iter()
                .map(|(name, value)| (&**name, value.json())),
        )
    }
}

#[cfg(test)]
impl Task {
    /// A first attempt of node `n` of run `r`, of `kind` with `config`,
    /// with an empty state, a second to run and nothing else.
    pub(crate) fn example(kind: WorkerKind, config: Value) -> Self {
        Self {
            run_id: "r".into(),
            key: TaskKey(1),
            node: "n".into(),
            attempt: 1,
            kind,
            config: Arc::new(config),
            state: Vec::new(),
            state_versions: Vec::new(),
            scope: crate::Scope::default(),
            item: None,
            place: None,
            timeout: Duration::from_secs(1),
            bundle: Arc::default(),
            team: None,
            prompts: Value::Null,
            traceparent: String::new(),
            remote_tools: Vec::new(),
            flow: None,
        }
    }
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Its class.
    pub kind: FailureKind,
    /// What happened.
    pub message: String,
    /// What happened before it failed: the model calls made, with their
    /// usage (they were spent all the same).
    pub notes: Vec<Value>,
}

impl Failure {
    /// A failure of class `kind`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            notes: Vec::new(),
        }
    }

    /// The same failure, with what the attempt noted before it.
    pub fn with_notes(mut self, notes: Vec<Value>) -> Self {
        self.notes = notes;
        self
    }

    /// The same failure, its message led by `prefix`.
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.message.insert_str(0, prefix);
        self
    }

    /// The worker could not do `what` with its files or processes.
    pub fn io(what: &str, error: std::io::Error) -> Self {
        Self::new(FailureKind::WorkerError, format!("{what}: {error}"))
    }
}

/// How an attempt ended, as the worker reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskReport {
    /// The run.
    pub run_id: RunId,
    /// The attempt's key within the run.
    pub key: TaskKey,
    /// What it produced, or why it failed.
    pub outcome: Result<Completed, Failure>,
    /// The numbers of the teammate messages handed to the task that it
    /// read.
    pub read: Vec<u64>,
}

impl TaskReport {
    /// The report as the protocol carries it. A result larger than the
    /// coordinator takes (`max_bytes`, its `max_result_bytes`) goes as a
    /// failed attempt saying so: the coordinator would refuse the message
    /// itself.
    pub(crate) fn into_result(self, max_bytes: usize) -> TaskResult {
        let outcome = match self.outcome {
            Ok(done) => {
                let json = weft_proto::json::to_string(&done.writes);
                if json.len() > max_bytes {
                    Err(TaskError {
                        kind: FailureKind::InvalidOutput,
                        message: format!(
                            "the task's result is {} bytes; the coordinator takes at most {max_bytes} (its max_result_bytes)",
                            json.len()
                        ),
                        notes: done.notes,
                    })
                } else {
                    Ok(TaskOutput {
                        writes_json: json,
                        output: done.output,
                        notes: done.notes,
                    })
                }
            }
            Err(failure) => Err(TaskError {
                kind: failure.kind,
                message: failure.message,
                notes: failure.notes,
            }),
        };
        TaskResult {
            run_id: self.run_id,
            key: self.key,
            outcome,
            read: self.read,
        }
    }
}

impl Task {
    /// The attempt `assignment` sends, its JSON read and its state left
    /// to the cache (`crate::state_sync`); a configuration, scope or
    /// prompts that cannot be read fail it with why.
    pub fn read(assignment: TaskAssignment) -> Result<Self, Failure> {
        let invalid = |what: &str, error: &dyn std::fmt::Display| {
            Failure::new(FailureKind::InvalidTask, format!("{what}: {error}"))
        };
        let definition = &assignment.definition;
        let config = definition
            .config()
            .map_err(|e| invalid("task configuration", &e))?
            .clone();
        let scope = crate::Scope::read(assignment.scope_json)
            .map_err(|why| Failure::new(FailureKind::InvalidTask, why))?;
        let prompts = parse_or_null(&assignment.prompts_json)
            .map_err(|e| invalid("the step's prompts", &e))?;
        Ok(Self {
            run_id: assignment.run_id,
            key: assignment.key,
            node: definition.node.clone(),
            attempt: assignment.attempt,
            kind: definition.kind,
            config,
            state: Vec::new(),
            state_versions: Vec::new(),
            scope,
            item: assignment.item.as_ref().map(|item| item.index as u64),
            place: assignment.item,
            timeout: assignment.timeout,
            bundle: assignment.bundle,
            team: assignment.team,
            prompts,
            traceparent: assignment.traceparent,
            remote_tools: assignment.remote_tools,
            flow: assignment.flow,
        })
    }
}
