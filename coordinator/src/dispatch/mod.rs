//! Dispatch: which worker runs which task.
//!
//! The rules live in [`registry`], a pure core with no channels, metrics or
//! clock: the workers (what they host, slots, load, draining, jams,
//! liveness) and the jobs (queued or running, their deadlines and the
//! workers they lost). The dispatcher actor ([`dispatcher`]) is a thin loop
//! that feeds it commands and carries out its decisions; [`state_sync`]
//! mirrors each worker's cache of state fields so a task carries only the
//! values its worker lacks.
//!
//! Runs reach the dispatcher through the [`TaskLauncher`] trait, so the run
//! actor can be driven by a virtual launcher in tests.

pub use weft_machine::binding;
mod dispatcher;
mod hosting;
pub mod in_process;
pub mod jobs;
pub mod registry;
pub mod state_sync;

use std::sync::Arc;
use std::time::Duration;
use weft_proto::RunId;

use serde_json::Value;
use tokio::sync::mpsc;
pub use weft_proto::types::WorkerKind;

pub use dispatcher::{
    DispatcherConfig, DispatcherHandle, Fleet, JoinRefused, ShuttingDown, WorkerLink,
    spawn_dispatcher,
};
pub use hosting::Hosting;
pub use registry::{Limits, WorkerStatus};

pub use crate::task::{CallError, NotJson};
use crate::task::{ItemRef, TaskFailure, TaskKey, TeamMessage, TeamSeat};

/// A worker's id, unique for the coordinator's lifetime.
pub use weft_proto::{NodeId, WorkerId};

pub use weft_machine::binding::Requirement;

/// Whether each registered tool `requirement` calls is hosted by one of
/// `hosts` (the fleet's half of an agent's requirement).
pub fn tools_hosted_among<'a>(
    requirement: &Requirement,
    hosts: impl Iterator<Item = &'a WorkerInfo> + Clone,
) -> bool {
    requirement
        .tools()
        .iter()
        .all(|tool| hosts.clone().any(|host| host.hosts_tool(tool)))
}

/// What a worker announced in its hello.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerInfo {
    /// The worker's name (for logs and errors).
    pub name: String,
    /// Tasks it runs at once.
    pub slots: u32,
    /// Free-form labels.
    pub labels: Vec<(String, String)>,
    /// Built-in kinds hosted (`script`, `llm`, `agent`).
    pub kinds: Vec<WorkerKind>,
    /// Registered task handlers.
    pub handlers: Vec<String>,
    /// Registered functions (reducers, predicates, routers).
    pub functions: Vec<String>,
    /// Registered tools agents may call, as the model is told of them.
    pub tools: Vec<ToolInfo>,
    /// The namespaces whose tasks it may run (its identity's `namespaces`);
    /// `None`: every namespace's.
    pub namespaces: Option<Vec<String>>,
}

/// A registered tool, as a model is told of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolInfo {
    /// Its registered name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// A JSON Schema of its arguments, as JSON text.
    pub parameters_json: String,
}

impl WorkerInfo {
    /// Reports whether it hosts what `requirement` names.
    pub fn hosts(&self, requirement: &Requirement) -> bool {
        match requirement {
            Requirement::Kind(kind) => self.kinds.contains(kind),
            Requirement::Handler(name) => self.handlers.iter().any(|h| h == name),
            Requirement::Function(name) => self.functions.iter().any(|f| f == name),
            Requirement::Python => self.kinds.contains(&WorkerKind::Function),
            // Whether some worker hosts each tool is the fleet's question
            // (`Registry::pick`).
            Requirement::Agent(_) => self.kinds.contains(&WorkerKind::Agent),
            Requirement::Tool(name) => self.hosts_tool(name),
        }
    }

    /// Whether it registered the tool `name`.
    pub fn hosts_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|tool| tool.name == name)
    }

    /// Whether it may run the tasks of runs of `namespace`.
    pub fn serves(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|list| list.iter().any(|n| n == namespace))
    }
}

/// A file of the run's bundle, as a worker fetches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// Relative path in the scratch directory.
    pub path: String,
    /// Content hash.
    pub sha256: String,
    /// Unix permission bits.
    pub mode: u32,
}

/// A task as sent to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The run.
    pub run_id: RunId,
    /// The run's namespace: only workers that serve it take the task.
    pub namespace: Arc<str>,
    /// The attempt's key within the run.
    pub key: TaskKey,
    /// The key of the task's first attempt (this one's, for a first
    /// attempt): the workers its attempts lose are counted together.
    pub first_key: TaskKey,
    /// The node id.
    pub node: NodeId,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The node's kind.
    pub kind: WorkerKind,
    /// The kind's fields, as JSON.
    pub config_json: Arc<str>,
    /// The state, field by field.
    pub state: Vec<StateField>,
    /// The scope, as JSON.
    pub scope_json: String,
    /// The map item, for a chain step.
    pub item: Option<ItemRef>,
    /// Per-attempt deadline.
    pub timeout: Duration,
    /// The run's bundle files.
    pub bundle: Arc<Vec<BlobRef>>,
    /// A `teammates: true` step's team and inbox.
    pub team: Option<TeamSeat>,
    /// An `llm` or `agent` step's rendered prompts, as JSON (empty for
    /// other kinds).
    pub prompts_json: String,
    /// The W3C trace context of the task's span (empty: not traced).
    pub traceparent: String,
    /// An agent step's registered tools that other workers host, as the
    /// worker it is sent to must offer them (set when it is sent).
    pub remote_tools: Vec<ToolInfo>,
}

/// One field of a task's state. A worker caches the latest version of each
/// field of a run, so the dispatcher leaves `json` out when the worker it
/// sends to already holds that version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateField {
    /// The field's name.
    pub name: Arc<str>,
    /// Identifies this value of the field within the run.
    pub version: u64,
    /// The value as JSON; `None` once the worker holds this version.
    pub json: Option<Arc<str>>,
}

/// A call of a worker-hosted function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCall {
    /// The run.
    pub run_id: RunId,
    /// The run's namespace: only workers that serve it take the call.
    pub namespace: Arc<str>,
    /// The call's key within the run.
    pub call: u64,
    /// The function's registered name.
    pub name: String,
    /// Its arguments.
    pub args: Vec<Value>,
    /// How long the worker may take (set by the dispatcher).
    pub timeout: Duration,
    /// `name` is a loop's `until` sentence for the worker's model to judge
    /// (any worker with a model provider takes it).
    pub judge: bool,
    /// Set for a Python function (any worker with Python takes it).
    pub python: Option<PythonCall>,
    /// The run's bundle files, for a Python function's modules.
    pub bundle: Arc<Vec<BlobRef>>,
    /// Set for a registered tool's call by an agent step on another
    /// worker: the step, as the tool's context shows it.
    pub tool: Option<ToolContext>,
}

/// The agent step a tool is called for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    /// The agent's node.
    pub node: NodeId,
    /// Its attempt (1 for the first).
    pub attempt: u32,
    /// The calling attempt's key.
    pub key: TaskKey,
    /// The map item's index, for a chain step.
    pub item: Option<u64>,
    /// The step's scope, as JSON.
    pub scope_json: String,
}

/// An agent step's call of a tool its worker does not host.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The worker's number for the call, echoed in the answer.
    pub call_id: u64,
    /// The tool's registered name.
    pub tool: String,
    /// The arguments, as the model wrote them (a JSON object).
    pub arguments: Value,
    /// What is left of the step's time.
    pub timeout: Duration,
}

/// How a Python function is called (SPEC 4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonCall {
    /// The function.
    pub function: crate::graph::PyFunction,
    /// The graph's directory within the bundle.
    pub dir: String,
    /// How the arguments are passed.
    pub form: CallForm,
}

/// How a call's arguments reach a Python function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallForm {
    /// As they are: a reducer's `(s0_value, branch_values)`.
    Positional,
    /// The one argument, an object, as keyword arguments: a condition's or
    /// router's state.
    Keywords,
    /// The one argument as a `LoopIteration` with attributes: an `until`.
    LoopIteration,
}

impl CallForm {
    /// The form's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Positional => "positional",
            Self::Keywords => "keywords",
            Self::LoopIteration => "loop_iteration",
        }
    }
}

/// What a task attempt came to, as a worker reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOutcome {
    /// The written fields (with `_next` and `_send`) as the worker sent
    /// them, unread: the run decides whether they are a valid output. Then
    /// the transient output.
    pub result: Result<(String, Option<Value>), TaskFailure>,
    /// The numbers of the teammate messages handed to the task it read.
    pub read: Vec<u64>,
    /// What the attempt noted on the way (model and tool calls).
    pub notes: Vec<Value>,
}

/// What the dispatcher tells a run.
#[derive(Debug, Clone, PartialEq)]
pub enum DispatchEvent {
    /// A task finished on a worker.
    TaskFinished {
        /// The task.
        key: TaskKey,
        /// The worker's name.
        worker: String,
        /// What it returned.
        outcome: TaskOutcome,
    },
    /// No connected worker hosts what the task (or call) needs; it waits.
    TaskUnhosted {
        /// The task or call.
        job: jobs::JobKey,
        /// The node.
        node: NodeId,
        /// What nobody hosts.
        requirement: Requirement,
        /// Set when workers host it but none may run this namespace's
        /// tasks.
        namespace: Option<Arc<str>>,
    },
    /// A task's worker was lost; the task is queued to be sent again.
    TaskRequeued {
        /// The task.
        key: TaskKey,
        /// The lost worker's name.
        worker: String,
    },
    /// A task or call reported unhosted found a worker.
    TaskHosted {
        /// The task or call.
        job: jobs::JobKey,
    },
    /// A worker-hosted function returned.
    CallReturned {
        /// The call.
        call: u64,
        /// Its value, or error.
        result: Result<Value, CallError>,
    },
    /// A running task sent a teammate message.
    TeamSend {
        /// The sending task.
        key: TaskKey,
        /// The message.
        send: TeamSend,
    },
}

/// A teammate message a running task sends.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamSend {
    /// The worker's name for the send, echoed in the answer.
    pub send_id: u64,
    /// The recipient's identity.
    pub to: String,
    /// The content, or why it could not be read.
    pub content: Result<Value, NotJson>,
}

/// Where the dispatcher sends a run's events.
pub type EventSink = mpsc::UnboundedSender<DispatchEvent>;

/// How runs hand tasks to workers.
pub trait TaskLauncher: Send + Sync + 'static {
    /// Queues a task; its outcome arrives on `sink`.
    fn launch(&self, task: Assignment, requirement: Requirement, sink: EventSink);
    /// Stops tasks of a run; results that still arrive are ignored.
    fn cancel(&self, run_id: RunId, keys: Vec<TaskKey>);
    /// Calls a worker-hosted function; the result arrives on `sink`.
    fn call(&self, call: FunctionCall, sink: EventSink);
    /// The run has ended: workers may drop what they cached for it.
    fn forget(&self, run_id: RunId);
    /// Sends `message` (a teammate delivery or a send's answer) to the
    /// worker running task `key`; dropped when no worker runs it.
    fn tell(&self, run_id: RunId, key: TaskKey, message: ToWorker);
}

/// Messages the coordinator sends down a worker's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ToWorker {
    /// Run this.
    Task(Assignment),
    /// Stop this.
    Cancel {
        /// The run.
        run_id: RunId,
        /// The task.
        key: TaskKey,
    },
    /// Call this function.
    Call(FunctionCall),
    /// Drop what you cached for this run.
    Forget {
        /// The run.
        run_id: RunId,
    },
    /// I am alive.
    Heartbeat,
    /// A teammate message for a running task.
    Deliver {
        /// The run.
        run_id: RunId,
        /// The recipient's task.
        key: TaskKey,
        /// The message.
        message: TeamMessage,
    },
    /// The answer to a running task's tool call.
    ToolResult {
        /// The run.
        run_id: RunId,
        /// The calling task.
        key: TaskKey,
        /// The worker's number for the call.
        call_id: u64,
        /// The tool's value, or why there is none.
        result: Result<Value, String>,
    },
    /// Whether a task's teammate message was accepted.
    SendAck {
        /// The run.
        run_id: RunId,
        /// The send it answers.
        send_id: u64,
        /// Why it was refused; `None` when accepted.
        error: Option<String>,
    },
}

/// Messages a worker sends up its stream (after its hello).
#[derive(Debug, Clone, PartialEq)]
pub enum FromWorker {
    /// A task finished.
    Result {
        /// The run.
        run_id: RunId,
        /// The task.
        key: TaskKey,
        /// What it came to.
        outcome: TaskOutcome,
    },
    /// A function call returned.
    CallResult {
        /// The run.
        run_id: RunId,
        /// The call.
        call: u64,
        /// Its value, or error.
        result: Result<Value, CallError>,
        /// The call was a tool's, for an agent step elsewhere.
        tool: bool,
    },
    /// I am alive.
    Heartbeat,
    /// Send me no more tasks; I finish what I hold, then leave.
    Draining,
    /// I am leaving and did not start this task: give it to another worker.
    Refused {
        /// The run.
        run_id: RunId,
        /// The task.
        key: TaskKey,
    },
    /// A running task sends a teammate message.
    TeamSend {
        /// The run.
        run_id: RunId,
        /// The sending task.
        key: TaskKey,
        /// The message.
        send: TeamSend,
    },
    /// A running agent step calls a tool another worker hosts.
    ToolCall {
        /// The run.
        run_id: RunId,
        /// The calling task.
        key: TaskKey,
        /// The call.
        call: ToolCall,
    },
}
