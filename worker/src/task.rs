//! What a coordinator asks of a worker, in the worker's own terms: a task
//! attempt and how it ends, and a function call and its answer. The
//! connection (`crate::connection`) turns wire messages into these and
//! back; nothing else sees the wire.

use std::sync::Arc;
use std::time::Duration;
pub use weft_proto::TaskKey;
use weft_proto::{NodeId, RunId};

use serde_json::{Map, Value};
pub use weft_proto::types::FailureKind;
use weft_proto::types::WorkerKind;

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
    pub run_id: RunId,
    /// The attempt's key within the run.
    pub key: TaskKey,
    /// The node.
    pub node: NodeId,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The node's kind.
    pub kind: WorkerKind,
    /// The kind's fields (`handler`, `argv`, `provider`, …).
    pub config: Value,
    /// The state the task sees, field by field. Values are shared with the
    /// worker's cache, so a task never copies a field it does not read.
    pub state: Vec<(String, Arc<Value>)>,
    /// The version of each field of `state`, in its order (empty when not
    /// known): a Python process is sent a value once per version.
    pub state_versions: Vec<u64>,
    /// The step's scope: a map item's bindings (empty outside a map).
    pub scope: Map<String, Value>,
    /// The map item's index, for a chain step.
    pub item: Option<u64>,
    /// Per-attempt deadline.
    pub timeout: Duration,
    /// Bundle files.
    pub bundle: Vec<BlobFile>,
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
}

/// A registered tool as a model is told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// Its registered name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// A JSON Schema of its arguments.
    pub parameters: Value,
}

/// A teammate message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The sender's identity (`MAP/INDEX`).
    pub from: String,
    /// The content.
    pub content: Value,
    /// Its number in this item's inbox.
    pub seq: u64,
}

/// What a flagged step is dispatched with: its identity, every member's,
/// and its unread messages in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamSeat {
    /// This item's identity.
    pub me: String,
    /// Every member's identity, this item's included.
    pub members: Vec<String>,
    /// The messages handed to the step.
    pub inbox: Vec<Message>,
}

impl TeamSeat {
    /// The seat as a script reads it on stdin: `(team, inbox)`.
    pub(crate) fn stdin_parts(&self) -> (Value, Value) {
        let team = serde_json::json!({"me": self.me, "members": self.members});
        let inbox = self
            .inbox
            .iter()
            .map(|m| serde_json::json!({"from": m.from, "content": m.content}))
            .collect();
        (team, Value::Array(inbox))
    }
}

/// A running step's message to a teammate, on its way to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TeamSend {
    /// The run.
    pub run_id: RunId,
    /// The sending attempt.
    pub key: TaskKey,
    /// The number its answer will name.
    pub send_id: u64,
    /// The recipient's identity.
    pub to: String,
    /// The content, as JSON.
    pub content_json: String,
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
        let mut text = vec![b'{'];
        for (i, (name, value)) in self.state.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            weft_proto::json::write_str(&mut text, name);
            text.push(b':');
            weft_proto::json::write(&mut text, value);
        }
        text.push(b'}');
        String::from_utf8(text).expect("JSON text is UTF-8")
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
            config,
            state: Vec::new(),
            state_versions: Vec::new(),
            scope: Map::new(),
            item: None,
            timeout: Duration::from_secs(1),
            bundle: Vec::new(),
            team: None,
            prompts: Value::Null,
            traceparent: String::new(),
            remote_tools: Vec::new(),
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
}

impl Failure {
    /// A failure of class `kind`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
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

/// A call the coordinator makes of a worker: a reducer, predicate or router
/// (`fn:NAME`, or a Python name), or a loop's `until` sentence for a model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FunctionCall {
    /// The call's number, echoed in its answer.
    pub id: u64,
    /// The run it is for.
    pub run_id: RunId,
    /// The function's name, or the sentence a judge weighs.
    pub name: String,
    /// The arguments.
    pub args: Vec<Value>,
    /// How long the call may take.
    pub timeout: Duration,
    /// What answers it.
    pub target: CallTarget,
    /// The bundle files a Python function's module needs.
    pub bundle: Vec<BlobFile>,
}

/// What answers a [`FunctionCall`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallTarget {
    /// A function registered with the worker.
    Registered,
    /// A tool registered with the worker, called for an agent step on
    /// another worker: `args` is `[arguments]`.
    Tool(ToolCaller),
    /// The model of the worker's providers, weighing a sentence.
    Judge,
    /// A function of a bundle's Python module.
    Python(PythonTarget),
}

/// A Python function of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PythonTarget {
    /// The module, e.g. `reducers`.
    pub module: String,
    /// The function in it.
    pub function: String,
    /// How the arguments are passed (`positional`, …).
    pub form: String,
    /// The bundle directory the module lives in.
    pub dir: String,
}

/// The agent step a tool is called for, as the tool's context shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCaller {
    /// The agent's node.
    pub node: NodeId,
    /// Its attempt.
    pub attempt: u32,
    /// The calling attempt's key.
    pub key: TaskKey,
    /// The map item's index, for a chain step.
    pub item: Option<u64>,
    /// The step's scope.
    pub scope: Map<String, Value>,
}

/// An agent step's call of a tool another worker hosts, as it goes up the
/// stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCall {
    /// The run.
    pub run_id: RunId,
    /// The calling attempt.
    pub key: TaskKey,
    /// The worker's number for the call, echoed in the answer.
    pub call_id: u64,
    /// The tool's registered name.
    pub tool: String,
    /// The arguments object.
    pub arguments: Value,
    /// What is left of the step's time.
    pub timeout: Duration,
}
