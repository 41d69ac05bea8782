//! Small types every crate shares: a run's status and why a task attempt
//! failed. They are domain types, not generated ones; on the wire they
//! travel as the protobuf enum `RunStatus` and as the `snake_case` name of a
//! [`FailureKind`] in `TaskError.kind`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Tasks are running or about to.
    Running,
    /// Nothing runs until a human answers.
    Waiting,
    /// Ended normally.
    Completed,
    /// Ended by an error.
    Failed,
    /// Stopped by a request.
    Cancelled,
}

impl RunStatus {
    /// Reports whether the run has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// Every status, in the order a run may pass through them.
    pub const ALL: [Self; 5] = [
        Self::Running,
        Self::Waiting,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The status named `name` (as [`RunStatus::name`] writes it).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.name() == name)
    }

    /// The status as written in `--json` output and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The node kinds a worker runs. A task carries its node's kind; a worker
/// announces the built-in kinds it hosts (`task` nodes need a handler
/// instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerKind {
    /// A handler registered by name.
    Task,
    /// An executable (SPEC 4.1).
    Script,
    /// One chat completion.
    Llm,
    /// A tool-calling loop.
    Agent,
    /// A Python function on the worker's Python host (SPEC 4.3).
    Function,
    /// Retrieval over knowledge bases, then an optional completion
    /// (SPEC 17).
    Rag,
}

impl WorkerKind {
    /// Every kind.
    pub const ALL: [Self; 6] = [
        Self::Task,
        Self::Script,
        Self::Llm,
        Self::Agent,
        Self::Function,
        Self::Rag,
    ];

    /// The kind's name, as in a graph file and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Script => "script",
            Self::Llm => "llm",
            Self::Agent => "agent",
            Self::Function => "function",
            Self::Rag => "rag",
        }
    }
}

impl fmt::Display for WorkerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkerKind {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| format!("unknown worker kind '{name}'"))
    }
}

/// Why a task attempt failed. Each is an attempt like any other: the node's
/// retry policy and then its fallback apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A script exited non-zero, was killed by a signal or could not start.
    ScriptFailed,
    /// A handler returned an error.
    HandlerError,
    /// A handler panicked.
    HandlerPanicked,
    /// The attempt ran past its timeout (on the worker, or on the
    /// coordinator when the worker did not answer).
    Timeout,
    /// The attempt was cancelled.
    Cancelled,
    /// What the attempt returned is not what the node may write: not a JSON
    /// object, an `output_schema` mismatch, a wrong type.
    InvalidOutput,
    /// The task's configuration is malformed.
    InvalidTask,
    /// The worker has no handler of that name.
    UnknownHandler,
    /// The worker cannot run the node's kind.
    UnsupportedKind,
    /// The worker lacked a state field version the coordinator counted on.
    StateCacheMiss,
    /// The worker failed around the attempt (fetching files, I/O); also
    /// what a failure kind this version does not know is read as.
    WorkerError,
    /// The attempt lost its worker too many times.
    WorkerLost,
    /// A template of the node failed to render.
    TemplateError,
    /// A map node could not start its items.
    MapError,
    /// The node's routing failed (unknown `_next`, router error).
    RoutingError,
    /// The engine cannot run this yet.
    Unsupported,
    /// A subgraph node's child run did not complete.
    SubgraphFailed,
    /// The model endpoint failed: an HTTP error after its retries, a
    /// reply that is not a chat completion, or structured output that is
    /// not JSON.
    ModelError,
    /// A condition, router, `over` or template of the node could take more
    /// steps or bytes than one evaluation may; evaluating it again would
    /// not help, so this failure is final.
    ExpressionTooCostly,
    /// The step's next model call would have taken its run past the run's
    /// `settings.budget` (SPEC 18): final, and it fails the run.
    BudgetExceeded,
}

impl FailureKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 20] = [
        Self::ScriptFailed,
        Self::HandlerError,
        Self::HandlerPanicked,
        Self::Timeout,
        Self::Cancelled,
        Self::InvalidOutput,
        Self::InvalidTask,
        Self::UnknownHandler,
        Self::UnsupportedKind,
        Self::StateCacheMiss,
        Self::WorkerError,
        Self::WorkerLost,
        Self::TemplateError,
        Self::MapError,
        Self::RoutingError,
        Self::Unsupported,
        Self::SubgraphFailed,
        Self::ModelError,
        Self::ExpressionTooCostly,
        Self::BudgetExceeded,
    ];

    /// The `snake_case` name, as on the wire and in `--json` output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScriptFailed => "script_failed",
            Self::HandlerError => "handler_error",
            Self::HandlerPanicked => "handler_panicked",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::InvalidOutput => "invalid_output",
            Self::InvalidTask => "invalid_task",
            Self::UnknownHandler => "unknown_handler",
            Self::UnsupportedKind => "unsupported_kind",
            Self::StateCacheMiss => "state_cache_miss",
            Self::WorkerError => "worker_error",
            Self::WorkerLost => "worker_lost",
            Self::TemplateError => "template_error",
            Self::MapError => "map_error",
            Self::RoutingError => "routing_error",
            Self::Unsupported => "unsupported",
            Self::SubgraphFailed => "subgraph_failed",
            Self::ModelError => "model_error",
            Self::ExpressionTooCostly => "expression_too_costly",
            Self::BudgetExceeded => "budget_exceeded",
        }
    }

    /// Reads a kind from the wire; a name this version does not know (a
    /// newer or foreign worker's) is a [`FailureKind::WorkerError`].
    pub fn from_wire(name: &str) -> Self {
        name.parse().unwrap_or(Self::WorkerError)
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What model calls used: how many, their tokens as the providers
/// reported them, and their cost from the coordinator's `[prices]`
/// (`None` when no model called has a price).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Model calls made.
    pub calls: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's cache (counted in
    /// `prompt_tokens` too).
    pub cached_tokens: u64,
    /// In the currency of `[prices]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl Usage {
    /// Adds `other` to this (a cost known on either side is kept).
    pub fn add(&mut self, other: &Usage) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_tokens += other.cached_tokens;
        self.cost = match (self.cost, other.cost) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }

    /// Whether no call is counted.
    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }
}

/// The name is not a failure kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFailureKind(pub String);

impl fmt::Display for UnknownFailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown failure kind '{}'", self.0)
    }
}

impl std::error::Error for UnknownFailureKind {}

impl FromStr for FailureKind {
    type Err = UnknownFailureKind;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| UnknownFailureKind(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use serde::de::value::{Error, StrDeserializer};

    use super::*;

    #[test]
    fn names_round_trip_and_agree_with_serde() {
        for kind in FailureKind::ALL {
            assert_eq!(kind.as_str().parse::<FailureKind>(), Ok(kind));
            let by_serde = FailureKind::deserialize(StrDeserializer::<Error>::new(kind.as_str()));
            assert_eq!(by_serde, Ok(kind), "serde's name for {kind:?}");
        }
        assert_eq!(FailureKind::from_wire("gremlins"), FailureKind::WorkerError);
    }
}
