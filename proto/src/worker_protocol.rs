//! The worker protocol in domain terms: what a coordinator and a worker
//! say to each other on a worker's stream, written once for both sides.
//!
//! The coordinator sends [`ToWorker`] and reads [`FromWorker`]; the worker
//! opens with a [`Hello`], then does the reverse. Each message's one
//! conversion to and from the generated `v1` messages lives in [`wire`]
//! (with the `wire` feature): a change to the protocol is a change to this
//! module and the `.proto` file, and its contract tests hold both sides to
//! the same reading.
//!
//! JSON the protocol carries is parsed where a side needs it, not here:
//! a task's configuration, scope, prompts and state travel as text (the
//! coordinator holds them as text, the worker reads them as it runs the
//! task), while a call's arguments, a tool's value and teammate messages
//! arrive as values. A value the wire brings that is not JSON is named as
//! such ([`NotJson`], `wire::Unreadable`) rather than dropped.
//!
//! The teammate message, the team seat, the map item and the call error are
//! also records of a run (the run machine keeps them and stores them), so
//! they live here without the wire and are serialisable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{FailureKind, WorkerKind};
use crate::{NodeId, RunId, TaskKey};

#[cfg(feature = "wire")]
pub mod wire;

#[cfg(all(test, feature = "wire"))]
mod contract_tests;

/// What a worker announces on joining: who it is and what it hosts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hello {
    /// The worker's name, unique among connected workers.
    pub name: String,
    /// Tasks it runs at once.
    pub slots: u32,
    /// Free-form labels.
    pub labels: Vec<(String, String)>,
    /// The built-in kinds it hosts (kinds this version does not know are
    /// left out when a hello is read).
    pub kinds: Vec<WorkerKind>,
    /// Its registered task handlers.
    pub handlers: Vec<String>,
    /// Its registered functions (reducers, predicates, routers).
    pub functions: Vec<String>,
    /// Its registered tools, as a model is told of them.
    pub tools: Vec<ToolInfo>,
    /// It keeps node definitions by number ([`KeptRef`]); every Rust worker
    /// does.
    pub keeps_nodes: bool,
    /// It keeps runs' bundle lists by number ([`KeptRef`]); every Rust
    /// worker does.
    pub keeps_bundles: bool,
    /// The state fields each handler reads, for the handlers whose state
    /// type names them: their tasks carry only those fields. A handler not
    /// here reads every field.
    pub handler_reads: BTreeMap<String, Vec<String>>,
    /// Nonzero: the worker has this many slots in all and shares them
    /// between several coordinators by their demand; `slots` is this
    /// coordinator's first share, changed by [`FromWorker::Slots`].
    pub shared_slots: u32,
}

/// A registered tool, as a model is told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// Its registered name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// A JSON Schema of its arguments. A tool described with none, or with
    /// text that is not JSON, takes an object of any arguments.
    pub parameters: Value,
}

impl ToolInfo {
    /// The schema of a tool that says nothing of its arguments.
    pub fn any_arguments() -> Value {
        serde_json::json!({"type": "object"})
    }
}

/// A file of a run's bundle, as a worker fetches it into a task's scratch
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// Relative path in the scratch directory.
    pub path: String,
    /// Content hash, by which the worker fetches it.
    pub sha256: String,
    /// Unix permission bits.
    pub mode: u32,
}

/// Which map item a task belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRef {
    /// The map node's id.
    pub map: crate::NodeId,
    /// The item's position in the list (0-based).
    pub index: usize,
    /// The item's chain step (1-based).
    pub step: u32,
}

/// A teammate message (SPEC 5): who sent it and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamMessage {
    /// Its number in its recipient's inbox, by which a step says it read it.
    #[serde(default)]
    pub seq: u64,
    /// The sender's identity (`MAP/INDEX`).
    pub from: String,
    /// The content, any JSON.
    pub content: Value,
}

/// What a flagged step knows of its team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamSeat {
    /// Its own identity.
    pub me: String,
    /// Every member's identity, its own included.
    pub members: Arc<[String]>,
    /// Its inbox, in arrival order.
    pub inbox: Vec<TeamMessage>,
}

impl TeamSeat {
    /// The seat as a step reads it: `({"me", "members"}, [{"from",
    /// "content"}, …])`.
    pub fn team_and_inbox(&self) -> (Value, Value) {
        let team = serde_json::json!({"me": self.me, "members": self.members});
        let inbox = self
            .inbox
            .iter()
            .map(|m| serde_json::json!({"from": m.from, "content": m.content}))
            .collect();
        (team, Value::Array(inbox))
    }
}

/// One field of a task's state. A worker caches the latest version of each
/// field of a run, so a coordinator leaves `json` out when the worker it
/// sends to already holds that version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateField {
    /// The field's name.
    pub name: Arc<str>,
    /// Identifies this value of the field within the run.
    pub version: u64,
    /// The value as JSON text; `None` when the worker holds this version.
    pub json: Option<Arc<str>>,
}

/// What a worker runs for a node: its id, its kind and the kind's fields.
/// A graph's plan makes one per node, shared by every task of it; a worker
/// keeps those it was sent for its session ([`KeptRef`]), so a node's
/// definition crosses once per worker and its configuration is parsed once
/// there ([`NodeDefinition::config`]).
#[derive(Debug)]
pub struct NodeDefinition {
    /// The node id.
    pub node: NodeId,
    /// The node's kind.
    pub kind: WorkerKind,
    /// The kind's fields (`handler`, `argv`, `provider`, …), as JSON text.
    pub config_json: Arc<str>,
    /// `config_json` read, on first use.
    config: std::sync::OnceLock<Result<Arc<Value>, String>>,
}

impl NodeDefinition {
    /// The definition of `node`, of `kind` with the fields `config_json`.
    pub fn new(node: NodeId, kind: WorkerKind, config_json: Arc<str>) -> Self {
        Self {
            node,
            kind,
            config_json,
            config: std::sync::OnceLock::new(),
        }
    }

    /// The configuration as a value (`Null` for none), read once; or why
    /// it is not JSON.
    pub fn config(&self) -> Result<&Arc<Value>, &str> {
        self.config
            .get_or_init(|| {
                crate::json::parse_or_null(&self.config_json)
                    .map(Arc::new)
                    .map_err(|error| error.to_string())
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

impl PartialEq for NodeDefinition {
    fn eq(&self, other: &Self) -> bool {
        (&self.node, self.kind, &self.config_json) == (&other.node, other.kind, &other.config_json)
    }
}

/// How a task's message carries something a worker may keep by number for
/// its session: its node's definition, or its run's bundle list. Each is
/// the same for many tasks, so it crosses once per worker session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeptRef {
    /// Carried, not kept (a worker that keeps none, or a test).
    #[default]
    Carried,
    /// Carried, and kept under this number from now on, replacing what the
    /// worker kept under it.
    Keep(u64),
    /// Left out: the worker keeps it under this number.
    Held(u64),
}

/// A task attempt as it is sent to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskAssignment {
    /// The run.
    pub run_id: RunId,
    /// The attempt's key within the run.
    pub key: TaskKey,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The node: its id, kind and configuration.
    pub definition: Arc<NodeDefinition>,
    /// How the message carries `definition` (as a worker reads one: how its
    /// message carried it).
    pub node_ref: KeptRef,
    /// The state, field by field.
    pub state: Vec<StateField>,
    /// The step's scope (a map item's bindings), as JSON text: shared
    /// where it was made, read where it was received (parse its bytes).
    pub scope_json: crate::SharedText,
    /// The map item, for a chain step.
    pub item: Option<ItemRef>,
    /// The attempt's deadline.
    pub timeout: Duration,
    /// The run's bundle files.
    pub bundle: Arc<Vec<BlobRef>>,
    /// How the message carries `bundle` (as a worker reads one: how its
    /// message carried it).
    pub bundle_ref: KeptRef,
    /// A `teammates: true` step's team and inbox.
    pub team: Option<TeamSeat>,
    /// An `llm` or `agent` step's rendered prompts as JSON text,
    /// `{"system": TEXT, "prompt": TEXT}` (empty for other kinds).
    pub prompts_json: String,
    /// The W3C trace context of the attempt's span (empty: not traced).
    pub traceparent: String,
    /// An agent step's registered tools that other workers host, as the
    /// worker must offer them to its model (their calls go through the
    /// coordinator).
    pub remote_tools: Vec<ToolInfo>,
    /// How the attempt's model calls are flow-controlled (SPEC 18); `None`:
    /// they are not (the coordinator has no limit or budget for them).
    pub flow: Option<CallFlow>,
}

impl TaskAssignment {
    /// The same attempt with `state` in place of its state (a copy of the
    /// rest, whose parts are shared or small).
    pub fn with_state(&self, state: Vec<StateField>) -> Self {
        Self {
            run_id: self.run_id.clone(),
            key: self.key,
            attempt: self.attempt,
            definition: self.definition.clone(),
            node_ref: self.node_ref,
            state,
            scope_json: self.scope_json.clone(),
            item: self.item.clone(),
            timeout: self.timeout,
            bundle: self.bundle.clone(),
            bundle_ref: self.bundle_ref,
            team: self.team.clone(),
            prompts_json: self.prompts_json.clone(),
            traceparent: self.traceparent.clone(),
            remote_tools: self.remote_tools.clone(),
            flow: self.flow,
        }
    }
}

/// The completion tokens a model call is expected to use when its request
/// sets no `max_tokens`; the provider's count corrects it after the call.
pub const DEFAULT_COMPLETION_TOKENS: u64 = 512;

/// The tokens a model call is reserved before it is made (SPEC 18): its
/// prompt's length over 4, plus its `max_tokens` (or
/// [`DEFAULT_COMPLETION_TOKENS`]). The coordinator reserves a step's first
/// call with it at dispatch, the worker each later call.
pub fn expected_tokens(prompt_bytes: usize, max_tokens: Option<u64>) -> u64 {
    prompt_bytes as u64 / 4 + max_tokens.unwrap_or(DEFAULT_COMPLETION_TOKENS)
}

/// How a step's model calls are flow-controlled: each call's usage goes
/// back to the coordinator ([`FromWorker::CallUsage`]); the first call
/// may have been reserved at dispatch, and each further one asks
/// ([`FromWorker::CallPermit`]) when `ask` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallFlow {
    /// The grant the first call was reserved under at dispatch.
    pub grant: Option<u64>,
    /// Calls without a reserved grant ask for one first.
    pub ask: bool,
}

/// A running step's request to call a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitRequest {
    /// The worker's number for the request, echoed in the answer.
    pub request_id: u64,
    /// The provider's name as the worker resolved it.
    pub provider: String,
    /// The model.
    pub model: String,
    /// The tokens the call is expected to use.
    pub tokens: u64,
}

/// What one model call used, under the grant it was made with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallUsage {
    /// The grant.
    pub grant: u64,
    /// The provider's name as the worker resolved it.
    pub provider: String,
    /// The model.
    pub model: String,
    /// Prompt tokens, as the provider reported them.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens the provider served from its cache.
    pub cached_tokens: u64,
    /// The provider answered 429, with its `Retry-After` when it gave one:
    /// the call was not made, and the matching limits slow down.
    pub rate_limited: Option<Option<Duration>>,
}

/// A call of a worker-hosted function: a reducer, predicate or router
/// (`fn:NAME`, or a Python function), a loop's `until` sentence for a
/// model, or a tool for an agent step on another worker.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCall {
    /// The call's number within the run, echoed in its answer.
    pub call_id: u64,
    /// The run it is for.
    pub run_id: RunId,
    /// The function's or tool's registered name, or the sentence a judge
    /// weighs.
    pub name: String,
    /// The arguments (a tool's: `[arguments]`).
    pub args: Vec<Value>,
    /// How long the worker may take.
    pub timeout: Duration,
    /// What answers it.
    pub target: CallTarget,
    /// The bundle files a Python function's module needs (empty for any
    /// other call).
    pub bundle: Arc<Vec<BlobRef>>,
}

/// What answers a [`FunctionCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallTarget {
    /// A function registered with the worker.
    Registered,
    /// The model of the worker's providers, weighing `name` as a sentence.
    Judge,
    /// A function of a bundle's Python module.
    Python(PythonCall),
    /// A tool registered with the worker, called for an agent step on
    /// another worker.
    Tool(ToolContext),
}

/// How a Python function of a bundle is called (SPEC 4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonCall {
    /// Its module: a file of the bundle (`helpers.py`) or an importable
    /// name.
    pub module: String,
    /// The function in it.
    pub function: String,
    /// The graph's directory within the bundle, where the module lives.
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

    /// The form named `name` on the wire.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Positional, Self::Keywords, Self::LoopIteration]
            .into_iter()
            .find(|form| form.as_str() == name)
    }
}

/// The agent step a tool is called for, as the tool's context shows it.
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
    /// The step's scope, as JSON text.
    pub scope_json: String,
}

/// An agent step's call of a tool its worker does not host.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The worker's number for the call, echoed in the answer.
    pub call_id: u64,
    /// The tool's registered name.
    pub tool: String,
    /// The arguments, as the model wrote them (a JSON object; text that is
    /// not JSON arrives as a string, for the tool to refuse).
    pub arguments: Value,
    /// What is left of the step's time.
    pub timeout: Duration,
}

/// A teammate message a running step sends.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamSend {
    /// The worker's number for the send, echoed in the answer.
    pub send_id: u64,
    /// The recipient's identity.
    pub to: String,
    /// The content, or why it could not be read.
    pub content: Result<Value, NotJson>,
}

/// A teammate message whose content is not JSON: what the parser said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the message is not JSON: {0}")]
pub struct NotJson(pub String);

/// Why a call of a worker-hosted function failed: the worker's answer, or
/// why no worker gave one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallError(pub String);

impl From<String> for CallError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for CallError {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

/// How a task attempt ended, as its worker reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    /// The run.
    pub run_id: RunId,
    /// The attempt.
    pub key: TaskKey,
    /// What it produced, or why it failed.
    pub outcome: Result<TaskOutput, TaskError>,
    /// The numbers of the teammate messages handed to the attempt that it
    /// read.
    pub read: Vec<u64>,
}

/// What a finished attempt produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskOutput {
    /// The written fields (with `_next` and `_send`) as JSON text, unread:
    /// the run decides whether they are a valid output. Empty: nothing.
    pub writes_json: String,
    /// The transient `output` of an `llm` or `agent` step (`Null` where
    /// the worker's text was not JSON).
    pub output: Option<Value>,
    /// What the attempt noted on the way (model and tool calls); notes
    /// that are not JSON are left out.
    pub notes: Vec<Value>,
}

/// Why an attempt failed, as its worker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    /// Its class (a class this version does not know reads as a worker
    /// error).
    pub kind: FailureKind,
    /// What happened.
    pub message: String,
    /// What the attempt noted before it failed (the model calls it made).
    pub notes: Vec<Value>,
}

/// A function call's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The run.
    pub run_id: RunId,
    /// The call.
    pub call_id: u64,
    /// Its value, or error (a value that is not JSON is an error).
    pub result: Result<Value, CallError>,
    /// The call was a tool's, for an agent step elsewhere.
    pub tool: bool,
}

/// What the coordinator sends down a worker's stream, after the welcome.
#[derive(Debug, Clone, PartialEq)]
pub enum ToWorker {
    /// Run this attempt.
    Task(TaskAssignment),
    /// Stop this attempt.
    Cancel {
        /// The run.
        run_id: RunId,
        /// The attempt.
        key: TaskKey,
    },
    /// Call this function.
    Call(FunctionCall),
    /// Drop what you cached for this run.
    Forget {
        /// The run.
        run_id: RunId,
    },
    /// The coordinator is there.
    Heartbeat,
    /// A teammate message for a running attempt.
    Deliver {
        /// The run.
        run_id: RunId,
        /// The recipient's attempt.
        key: TaskKey,
        /// The message.
        message: TeamMessage,
    },
    /// The answer to a running attempt's tool call.
    ToolResult {
        /// The run.
        run_id: RunId,
        /// The calling attempt.
        key: TaskKey,
        /// The worker's number for the call.
        call_id: u64,
        /// The tool's value, or why there is none.
        result: Result<Value, String>,
    },
    /// The answer to a running attempt's [`FromWorker::CallPermit`].
    Permit {
        /// The run.
        run_id: RunId,
        /// The asking attempt.
        key: TaskKey,
        /// The worker's number for the request.
        request_id: u64,
        /// The grant to report the call's usage under, or why the call
        /// may not be made (the step fails with `budget_exceeded`).
        outcome: Result<u64, String>,
    },
    /// How many queued tasks the coordinator has that the worker could
    /// run (counted up to its shared slots), for a worker that shares its
    /// slots between coordinators.
    Demand {
        /// The count.
        queued: u64,
    },
    /// Whether an attempt's teammate message was accepted.
    SendAck {
        /// The run.
        run_id: RunId,
        /// The send it answers.
        send_id: u64,
        /// Why it was refused; `None` when accepted.
        error: Option<String>,
    },
}

/// What a worker sends up its stream, after its hello.
#[derive(Debug, Clone, PartialEq)]
pub enum FromWorker {
    /// An attempt ended.
    Result(TaskResult),
    /// A function call returned.
    CallResult(CallResult),
    /// The worker is there.
    Heartbeat,
    /// Send no more tasks; the worker finishes what it holds, then leaves.
    Draining,
    /// A worker that shares its slots between coordinators: this
    /// coordinator may now keep this many of its tasks running.
    Slots(u32),
    /// The worker is leaving and did not start this attempt: give it to
    /// another worker.
    Refused {
        /// The run.
        run_id: RunId,
        /// The attempt.
        key: TaskKey,
    },
    /// A running attempt sends a teammate message.
    TeamSend {
        /// The run.
        run_id: RunId,
        /// The sending attempt.
        key: TaskKey,
        /// The message.
        send: TeamSend,
    },
    /// A running agent step calls a tool another worker hosts.
    ToolCall {
        /// The run.
        run_id: RunId,
        /// The calling attempt.
        key: TaskKey,
        /// The call.
        call: ToolCall,
    },
    /// A running attempt asks to call a model.
    CallPermit {
        /// The run.
        run_id: RunId,
        /// The asking attempt.
        key: TaskKey,
        /// The request.
        permit: PermitRequest,
    },
    /// A running attempt's model call ended.
    CallUsage {
        /// The run.
        run_id: RunId,
        /// The calling attempt.
        key: TaskKey,
        /// What it used.
        usage: CallUsage,
    },
    /// A piece of a running attempt's model output, as it arrived.
    Stream {
        /// The run.
        run_id: RunId,
        /// The attempt.
        key: TaskKey,
        /// The piece.
        piece: StreamPiece,
    },
}

/// A piece of a step's model output (SPEC 19).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamPiece {
    /// What `text` holds.
    pub kind: StreamKind,
    /// Text of the reply, a tool's name, a tool's result, a message.
    pub text: String,
}

/// What a [`StreamPiece`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    /// Text of the model's reply.
    Text,
    /// A tool call began: its name.
    ToolCall,
    /// A tool's result, as `NAME: RESULT`.
    ToolResult,
    /// A teammate message the step sent, as `to ID: CONTENT`.
    Message,
}

impl StreamKind {
    /// Its name on the wire and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::Message => "message",
        }
    }

    /// The kind named `name` (an unknown name is text).
    pub fn from_name(name: &str) -> Self {
        match name {
            "tool_call" => Self::ToolCall,
            "tool_result" => Self::ToolResult,
            "message" => Self::Message,
            _ => Self::Text,
        }
    }
}
