//! The run state machine's vocabulary: what goes in ([`Input`]), what comes
//! out ([`Effect`]), what watchers see ([`RunEvent`]) and how a run fails
//! ([`RunError`]). Inputs are past-tense facts or imperative requests;
//! effects are instructions for the run actor, which performs them and feeds
//! their results back as inputs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use super::node_output::{NodeOutput, Outgoing, OutputError};
pub use crate::graph::Code;
pub use crate::task::{CallError, ItemRef, TaskFailure, TaskKey, TeamMessage, TeamSeat};
pub use weft_proto::{NodeId, RunId};

/// Identifies one call to a worker-hosted reducer or predicate.
pub type CallKey = u64;

pub use super::task_spec::{KeyedConcurrency, State, TaskSpec, TaskState, empty_state, fields_of};

/// An answer to an `approval` or `input` node.
#[derive(Debug, Clone, PartialEq)]
pub struct HumanAnswer {
    /// For approval: `"approve"`/`"reject"` (or `true`/`false`); for input:
    /// the value.
    pub value: Value,
    /// Optional comment.
    pub comment: Option<String>,
    /// Who answers; checked against the node's `approvers:` (`None`: the
    /// coordinator itself, in tests and tools, which no `approvers:`
    /// admits).
    pub by: Option<super::Caller>,
}

/// Everything that can happen to a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A task attempt returned.
    TaskSucceeded {
        /// Its key.
        key: TaskKey,
        /// What it returned.
        output: NodeOutput,
    },
    /// A task attempt came back from a worker, as the worker sent it: the
    /// machine decides whether its output is acceptable (JSON, no more
    /// fields than `max_output_fields`), so a bad one fails the attempt.
    TaskReturned {
        /// Its key.
        key: TaskKey,
        /// The worker that ran it.
        worker: String,
        /// The written fields as JSON text, unread, and the transient
        /// output; or how it failed.
        result: Result<(String, Option<Value>), TaskFailure>,
        /// The numbers of the teammate messages it read.
        read: Vec<u64>,
        /// What it noted on the way (model and tool calls).
        notes: Vec<Value>,
    },
    /// A cached step's entry was found (SPEC 20): the step did not run;
    /// its stored writes are taken as a worker's would be.
    TaskCached {
        /// Its key.
        key: TaskKey,
        /// The stored writes, as JSON text, and the transient output.
        writes: String,
        /// The stored transient output (an `llm` step's completion).
        output: Option<Value>,
        /// The run whose step stored them.
        stored_by: RunId,
        /// How long ago, in milliseconds.
        age_ms: u64,
    },
    /// A task attempt failed.
    TaskFailed {
        /// Its key.
        key: TaskKey,
        /// Why.
        failure: TaskFailure,
    },
    /// The delay of a [`Effect::ScheduleRetry`] has passed.
    RetryDue {
        /// The key named by the effect.
        key: TaskKey,
    },
    /// A human answered a waiting node.
    Answered {
        /// The node id.
        node: String,
        /// The answer.
        answer: HumanAnswer,
    },
    /// The worker of a task in flight was lost; the dispatcher sends it
    /// again.
    TaskRequeued {
        /// The task.
        key: TaskKey,
        /// The lost worker's name.
        worker: String,
    },
    /// A task, or a running step's model call, waits for a rate limit.
    TaskThrottled {
        /// The task.
        key: TaskKey,
        /// The limit that holds it.
        limit: String,
        /// How long it is expected to wait; `None`: until a call in flight
        /// ends.
        wait_ms: Option<u64>,
    },
    /// No worker hosts what a task or call of `node` needs (yet).
    TaskUnhosted {
        /// The node.
        node: NodeId,
        /// What it needs, as a watcher reads it.
        needs: String,
    },
    /// A worker-hosted reducer or predicate returned.
    CallReturned {
        /// The call's key.
        call: CallKey,
        /// Its value, or its error.
        result: Result<Value, CallError>,
    },
    /// A subgraph node's child run was started.
    ChildStarted {
        /// The subgraph node.
        node: String,
        /// The child's run id.
        run_id: RunId,
    },
    /// What a subgraph node's child run waits for people to answer: its
    /// waiting list (node or path, kind, prompt) while it is `waiting`,
    /// empty once it goes on.
    ChildWaiting {
        /// The subgraph node.
        node: String,
        /// The child's run id.
        run_id: RunId,
        /// The child's requests.
        waiting: Vec<(String, String, String)>,
    },
    /// A subgraph node's child run ended: its final state, or why it did
    /// not complete.
    ChildEnded {
        /// The subgraph node.
        node: String,
        /// The child's state, or its error.
        result: Result<Map<String, Value>, ChildError>,
        /// What the child's model calls used, by model (its own children's
        /// included): added to the run's.
        usage: BTreeMap<String, weft_proto::types::Usage>,
    },
    /// Stop the run; `by`: who asked (recorded in the events).
    Cancel {
        /// Who asked.
        by: Option<String>,
    },
    /// The run's deadline passed; `waiting` says what for, when the run
    /// was waiting for a worker that hosts some of its work.
    DeadlinePassed {
        /// E.g. "node 'bump' needs handler 'increment'".
        waiting: Option<String>,
    },
    /// Re-run a failed run from the wave that failed; `by`: who asked.
    RetryRun {
        /// Who asked.
        by: Option<String>,
    },
    /// The run recorded as many events as it may (`max_events`).
    EventLimit {
        /// The limit.
        limit: usize,
    },
    /// The run's steps killed coordinators `crashes` times: it fails
    /// without being stepped again.
    Quarantine {
        /// The crashes it is charged with.
        crashes: u32,
    },
    /// A running task sent a teammate message (SPEC 5).
    TeamSend {
        /// The sending task.
        key: TaskKey,
        /// The worker's name for the send, echoed in the answer.
        send_id: u64,
        /// What to send to whom.
        message: Outgoing,
    },
}

/// Something the run actor must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send a task to a worker: the spec the run keeps, shared.
    Dispatch(Arc<TaskSpec>),
    /// Wait, then feed back [`Input::RetryDue`] with this key.
    ScheduleRetry {
        /// The key to feed back.
        key: TaskKey,
        /// How long to wait.
        delay: Duration,
    },
    /// Stop these in-flight tasks; their results will be ignored.
    CancelTasks(Vec<TaskKey>),
    /// Hand a teammate message to a running task that takes them as it runs.
    Deliver {
        /// The recipient's task.
        key: TaskKey,
        /// The message.
        message: TeamMessage,
    },
    /// Answer a running task's [`Input::TeamSend`].
    SendAck {
        /// The sending task.
        key: TaskKey,
        /// The send it answers.
        send_id: u64,
        /// Why the message was refused; `None` when accepted.
        error: Option<String>,
    },
    /// Call a worker-hosted reducer: `(s0_value, [branch_values]) -> value`.
    CallReducer {
        /// The call's key.
        call: CallKey,
        /// The reducer: a registered function or a Python name.
        code: Code,
        /// The field.
        field: String,
        /// S0's value.
        s0_value: Value,
        /// The branch values, in node declaration order.
        branch_values: Vec<Value>,
    },
    /// Call a worker-hosted predicate or router over a state.
    CallPredicate {
        /// The call's key.
        call: CallKey,
        /// The predicate or router.
        code: Code,
        /// The state it judges.
        state: State,
    },
    /// Call a loop's worker-hosted `until` over the iteration that ended:
    /// a registered function, or (`by_model`) a sentence a worker's model
    /// judges.
    CallUntil {
        /// The call's key.
        call: CallKey,
        /// Who judges.
        judge: UntilJudge,
        /// SPEC 4.2's `LoopIteration` object.
        iteration: Value,
    },
    /// Start a subgraph node's child run: the graph `graph` of the bundle
    /// (named relative to this run's graph) on `input`; then report
    /// [`Input::ChildStarted`] and, when it ends, [`Input::ChildEnded`].
    StartChild {
        /// The subgraph node.
        node: String,
        /// The child graph, as the node names it.
        graph: String,
        /// The child's input.
        input: Map<String, Value>,
    },
    /// Report [`Input::ChildEnded`] when child run `run_id` ends (a run
    /// restored while its child ran).
    AwaitChild {
        /// The subgraph node.
        node: String,
        /// The child's run id.
        run_id: RunId,
    },
    /// Cancel these child runs.
    CancelChildren(Vec<RunId>),
    /// Keep what a cached step returned (SPEC 20): the attempt succeeded
    /// and its output was accepted. Never for an answer that came from
    /// the cache.
    Cache {
        /// The entry key ([`TaskSpec::cache`]).
        entry: String,
        /// How long it answers.
        ttl: Duration,
        /// The node, for messages.
        node: NodeId,
        /// The map item, for a chain step.
        item: Option<usize>,
        /// The writes, as the worker sent them.
        writes: String,
        /// The transient output.
        output: Option<Value>,
    },
    /// Tell watchers.
    Emit(RunEvent),
    /// Persist the run record now (a wave merged, or the run paused or ended).
    Checkpoint,
}

pub use weft_proto::events::{ErrorInfo, Redispatch, RunEvent};

/// Why a subgraph node's child run did not complete, or never started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildError {
    /// The run has no registry to start children in (an actor's tests).
    #[error("subgraphs need the coordinator's run registry")]
    NoRegistry,
    /// The node names a graph outside the bundle.
    #[error("graph '{0}' is not a path inside the bundle")]
    OutsideBundle(String),
    /// The graph was not among those checked when the top run was
    /// submitted.
    #[error("graph '{0}' was not checked at submission")]
    Unchecked(String),
    /// The child's bundle or input cannot be used: why.
    #[error("{0}")]
    Refused(String),
    /// The registry did not admit the child.
    #[error("the child run of {graph} was not started: {reason}")]
    NotStarted {
        /// The child graph's path in the bundle.
        graph: String,
        /// Why.
        reason: String,
    },
    /// A restored parent's child was never restored.
    #[error("child run {0} is not known to this coordinator")]
    Unknown(RunId),
    /// The child was cancelled.
    #[error("child run {0} was cancelled")]
    Cancelled(RunId),
    /// The child failed.
    #[error("child run {run_id} failed: {error}")]
    Failed {
        /// The child.
        run_id: RunId,
        /// Its error.
        error: String,
    },
    /// The child failed with `budget_exceeded`: a budget it counts against
    /// (maybe its parent's) is spent, so its parent fails the same way.
    #[error("child run {run_id} failed: {error}")]
    OverBudget {
        /// The child.
        run_id: RunId,
        /// Its error.
        error: String,
    },
}

/// Who judges a loop's iteration when its `until` is not a CEL condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UntilJudge {
    /// A worker-hosted function: registered, or a Python name.
    Code(Code),
    /// A worker's model, weighing this sentence.
    Sentence(String),
}
pub use weft_proto::types::{FailureKind, RunStatus};

/// The failure kind of a step whose expression or template failed with
/// `error`: `otherwise`, unless it was refused as too costly.
pub fn expr_failure(error: &crate::graph::ExprError, otherwise: FailureKind) -> FailureKind {
    if error.is_too_costly() {
        FailureKind::ExpressionTooCostly
    } else {
        otherwise
    }
}

/// How a run failed (SPEC section 7). The state as of the last merge stays
/// available from the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "type")]
pub enum RunError {
    /// A node failed after its attempts.
    #[error("node '{node}' failed (attempt {attempt}{}): {kind}: {message}", worker.as_ref().map(|w| format!(", worker {w}")).unwrap_or_default())]
    ExecutionError {
        /// Node id.
        node: String,
        /// The last attempt.
        attempt: u32,
        /// The worker that ran it, where known.
        worker: Option<String>,
        /// The failure class.
        kind: FailureKind,
        /// The original error.
        message: String,
    },
    /// Two nodes of a wave changed a field with no reducer.
    #[error("field '{field}' was changed by {} in the same wave and has no reducer", nodes.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(" and "))]
    ConcurrentUpdateError {
        /// The field.
        field: String,
        /// The nodes, in declaration order.
        nodes: Vec<String>,
    },
    /// A reducer could not combine the values of a wave.
    #[error("reducer for field '{field}' failed: {message}")]
    ReducerError {
        /// The field.
        field: String,
        /// What went wrong.
        message: String,
    },
    /// More than `max_steps` waves.
    #[error("step limit exceeded: the run would start wave {} but max_steps is {max_steps}", max_steps + 1)]
    StepLimitExceeded {
        /// The limit.
        max_steps: u32,
    },
    /// A map item failed (seed 003 text).
    #[error(
        "map node '{map}': sub-branch [{index}] failed at node '{node}' (step {step}): {message}"
    )]
    MapItemError {
        /// The map node.
        map: String,
        /// The item index.
        index: usize,
        /// The chain node that failed.
        node: String,
        /// The chain step.
        step: u32,
        /// The original error.
        message: String,
    },
    /// A map item finished its chain without writing `output_key` (seed 003 text).
    #[error(
        "map node '{map}': sub-branch [{index}] did not write output_key '{output_key}'; write it via state_updates, output_schema, or a script's JSON output (the parent's value is not inherited inside a map branch)"
    )]
    MapOutputMissing {
        /// The map node.
        map: String,
        /// The item index.
        index: usize,
        /// The key the chain had to write.
        output_key: String,
    },
    /// A step of a loop's body failed (without a fallback in the body).
    #[error(
        "loop node '{node}': iteration {iteration} failed at node '{at}' (step {step}): {message}"
    )]
    LoopBodyError {
        /// The loop node.
        node: String,
        /// The iteration (1-based).
        iteration: u32,
        /// The body node that failed.
        at: String,
        /// The body's step.
        step: u32,
        /// The original error.
        message: String,
    },
    /// An `end` node with `status: failed`.
    #[error("end node '{node}' ended the run as failed{}", message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    EndFailed {
        /// The end node.
        node: String,
        /// Its message.
        message: Option<String>,
    },
    /// The run's input does not fit the declared state.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What is wrong.
        message: String,
    },
    /// The run's deadline passed.
    #[error("the run's deadline passed{}", waiting.as_ref().map(|w| format!(" while it waited for a worker: {w}")).unwrap_or_default())]
    RunTimeout {
        /// What the run was waiting for, when no worker hosted it.
        waiting: Option<String>,
    },
    /// Cancelled by a request.
    #[error("the run was cancelled")]
    Cancelled,
    /// The run recorded as many events as a run may.
    #[error("the run recorded {limit} events, as many as a run may (configuration key max_events)")]
    EventLimit {
        /// The limit.
        limit: usize,
    },
    /// The coordinator died while stepping the run, too often.
    #[error(
        "run quarantined: the coordinator stopped {crashes} times while stepping this run, so it is failed instead of being evaluated again (its state is as of its last checkpoint)"
    )]
    Quarantined {
        /// The crashes it is charged with.
        crashes: u32,
    },
    /// The state would hold more fields than a run's state may.
    #[error(
        "the state would hold {fields} fields; a run's state holds at most {limit} (configuration key max_state_fields)"
    )]
    StateTooLarge {
        /// Fields it would hold.
        fields: usize,
        /// The limit.
        limit: usize,
    },
}

impl RunError {
    /// The error's kind, as shown in `--json` output.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ExecutionError {
                kind: FailureKind::ExpressionTooCostly,
                ..
            } => "ExpressionTooCostly",
            Self::ExecutionError {
                kind: FailureKind::BudgetExceeded,
                ..
            } => "BudgetExceeded",
            Self::ExecutionError { .. } => "ExecutionError",
            Self::ConcurrentUpdateError { .. } => "ConcurrentUpdateError",
            Self::ReducerError { .. } => "ReducerError",
            Self::StepLimitExceeded { .. } => "StepLimitExceeded",
            Self::MapItemError { .. } | Self::MapOutputMissing { .. } => "MapItemError",
            Self::LoopBodyError { .. } => "LoopBodyError",
            Self::EndFailed { .. } => "EndFailed",
            Self::InvalidInput { .. } => "InvalidInput",
            Self::RunTimeout { .. } => "RunTimeout",
            Self::Cancelled => "Cancelled",
            Self::EventLimit { .. } => "EventLimit",
            Self::StateTooLarge { .. } => "StateTooLarge",
            Self::Quarantined { .. } => "Quarantined",
        }
    }

    /// The error as clients see it: kind, node and message.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo {
            kind: self.kind().to_owned(),
            node: self.node().unwrap_or_default().to_owned(),
            message: self.to_string(),
        }
    }

    /// The node involved, where there is one.
    pub fn node(&self) -> Option<&str> {
        match self {
            Self::ExecutionError { node, .. }
            | Self::EndFailed { node, .. }
            | Self::LoopBodyError { node, .. } => Some(node),
            Self::MapItemError { map, .. } | Self::MapOutputMissing { map, .. } => Some(map),
            Self::ConcurrentUpdateError { nodes, .. } => nodes.first().map(String::as_str),
            _ => None,
        }
    }
}

/// What a refused answer is told about the nodes that do wait.
fn waiting_hint(waiting: &[String]) -> String {
    match waiting {
        [] => "no node of the run waits for input now".to_owned(),
        [one] => format!("the node waiting is '{one}'"),
        many => format!("the nodes waiting are '{}'", many.join("', '")),
    }
}

/// A request the machine refused; the run is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The node is not waiting for input; `waiting` names those that are.
    #[error("node '{node}' is not waiting for input ({})", waiting_hint(.waiting))]
    NotWaiting {
        /// The node named.
        node: String,
        /// The nodes that wait for a person now.
        waiting: Vec<String>,
    },
    /// The answer does not fit the node.
    #[error("answer for node '{node}' rejected: {reason}")]
    BadAnswer {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// Only a failed run can be retried.
    #[error("only a failed run can be retried (this one is {})", .0.name())]
    NotRetryable(RunStatus),
    /// The run has ended.
    #[error("the run has already ended")]
    Ended,
    /// The caller is not among the node's `approvers:`.
    #[error("{who} is not among the approvers of node '{node}' ({approvers})")]
    NotApprover {
        /// The node.
        node: String,
        /// Who tried, quoted (or "nobody named").
        who: String,
        /// The node's `approvers:`, as written.
        approvers: String,
    },
}
