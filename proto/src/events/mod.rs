//! A run's events as every crate sees them ([`RunEvent`]), and their wire
//! form (in `wire`): the typed `oneof` of `weft.v1.RunEvent`. The coordinator's run
//! machine emits them, the run service sends them, and the client library
//! receives them typed; their JSON form (for `weft watch --json`) is serde's
//! rendering of the same type.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::{RunStatus, Usage};
use crate::{NodeId, RunId};

#[cfg(feature = "wire")]
mod wire;

#[cfg(feature = "wire")]
pub use wire::{
    error_from_wire, error_to_wire, event_from_wire, event_to_wire, status_from_wire,
    status_to_wire,
};

/// The largest JSON of a field value that a `state_changed` event
/// carries; a larger one is folded (its size only), so an event log grows
/// with what changed, not with the state.
pub const SHOWN_VALUE_BYTES: usize = 1024;

/// One passage of a `retrieved` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievedHit {
    /// Its document's source.
    pub source: String,
    /// The heading it is under (empty: none).
    pub heading: String,
    /// Its score (BM25, cosine or RRF; for a linked passage, its leader's
    /// halved per hop).
    pub score: f64,
}

/// Where a forked run came from (SPEC 20): the run, and the place in its
/// history its state was taken at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    /// The original run.
    pub run: RunId,
    /// The wave (0: its input).
    pub step: u32,
    /// The point within the wave after `step` ([`HistoryPoint::point`]; 0:
    /// right after wave `step`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub point: u64,
}

impl ForkedFrom {
    /// The place in the original's history.
    pub fn at(&self) -> HistoryPoint {
        HistoryPoint {
            step: self.step,
            point: self.point,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A place in a run's history (SPEC 20), written `3` or `3.57`.
///
/// `point` 0 is the checkpoint taken once wave `step` merged (step 0: the
/// input, before any wave). A larger `point` is a checkpoint taken while the
/// next wave was still at work — a map's items finished, a loop's
/// iterations done, a subgraph's child started, a person asked — named by
/// the number of events the run's log held then, so points only grow and
/// a restarted coordinator never reuses one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HistoryPoint {
    /// Waves merged.
    pub step: u32,
    /// Events logged, for a point within the next wave; 0 otherwise.
    pub point: u64,
}

impl HistoryPoint {
    /// Right after wave `step`.
    pub fn wave(step: u32) -> Self {
        Self { step, point: 0 }
    }
}

impl From<u32> for HistoryPoint {
    fn from(step: u32) -> Self {
        Self::wave(step)
    }
}

impl std::fmt::Display for HistoryPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.point {
            0 => write!(f, "{}", self.step),
            point => write!(f, "{}.{point}", self.step),
        }
    }
}

/// A history point that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a place in a run's history: expected a wave (3) or a point within the next wave (3.57)"
)]
pub struct BadHistoryPoint(pub String);

impl std::str::FromStr for HistoryPoint {
    type Err = BadHistoryPoint;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadHistoryPoint(text.to_owned());
        let (step, point) = match text.trim().split_once('.') {
            Some((step, point)) => (step, point.parse::<u64>().map_err(|_| bad())?),
            None => (text.trim(), 0),
        };
        Ok(Self {
            step: step.parse().map_err(|_| bad())?,
            point,
        })
    }
}

/// How a run failed, as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// `ExecutionError`, `ConcurrentUpdateError`, `StepLimitExceeded`, ….
    pub kind: String,
    /// The node involved (may be empty).
    pub node: String,
    /// What happened.
    pub message: String,
}

/// One entry of a run's event log: an event with its position and time.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Position in the log.
    pub seq: u64,
    /// When it happened (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The event.
    pub event: std::sync::Arc<RunEvent>,
}

/// Why a task attempt was sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Redispatch {
    /// The worker that held it left, or went silent.
    WorkerLost,
    /// The coordinator that sent it stopped; this one recovered the run.
    CoordinatorRestarted,
    /// A reason this version does not know (sent by a newer coordinator).
    #[serde(other)]
    Other,
}

impl Redispatch {
    /// The reason's name, as in the event's JSON and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkerLost => "worker_lost",
            Self::CoordinatorRestarted => "coordinator_restarted",
            Self::Other => "other",
        }
    }

    /// The reason named `name`; [`Redispatch::Other`] for one unknown.
    pub fn from_name(name: &str) -> Self {
        match name {
            "worker_lost" => Self::WorkerLost,
            "coordinator_restarted" => Self::CoordinatorRestarted,
            _ => Self::Other,
        }
    }
}

impl std::fmt::Display for Redispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What watchers see, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// A wave started.
    WaveStarted {
        /// The step number (1-based).
        step: u32,
        /// The nodes that run in it.
        nodes: Vec<String>,
    },
    /// A task attempt was dispatched.
    NodeStarted {
        /// Node id.
        node: NodeId,
        /// Attempt number.
        attempt: u32,
        /// Map item index, for a chain step.
        item: Option<usize>,
    },
    /// A node (or a map item's chain step) finished.
    NodeFinished {
        /// Node id.
        node: NodeId,
        /// The worker that ran it (absent for nodes the coordinator runs,
        /// and in logs written before workers were recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// What the step's model calls used (absent when it called none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// A step's `cache:` held its answer (SPEC 20): it did not run; the
    /// stored writes are merged and `node_finished` follows.
    NodeCached {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// The run whose step stored the answer.
        stored_by: RunId,
        /// How long ago it was stored, in milliseconds.
        age_ms: u64,
    },
    /// A cached step's answer was not kept (larger than the coordinator's
    /// `max_cache_entry_bytes`); the run goes on as if the step had no
    /// `cache:`.
    NodeNotCached {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// Why, naming the limit.
        reason: String,
    },
    /// An attempt failed and another follows.
    NodeRetrying {
        /// Node id.
        node: NodeId,
        /// The attempt that will run next.
        next_attempt: u32,
        /// The delay before it, in milliseconds.
        delay_ms: u64,
        /// The failure.
        error: String,
    },
    /// A node failed after its attempts.
    NodeFailed {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// The failure.
        error: String,
        /// The fallback taken, if any.
        fallback: Option<String>,
    },
    /// A node was skipped: none of its incoming edges was taken.
    NodeSkipped {
        /// Node id.
        node: NodeId,
    },
    /// A wave merged and changed these fields.
    StateChanged {
        /// The step number.
        step: u32,
        /// The changed fields, in order of first change.
        fields: Vec<String>,
        /// The new values of the changed fields whose JSON is small (up
        /// to [`SHOWN_VALUE_BYTES`]), by name.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        values: BTreeMap<String, serde_json::Value>,
        /// The size in bytes of the JSON of each changed field too large
        /// to be in `values`. A changed field in neither was removed.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        folded: BTreeMap<String, u64>,
    },
    /// A loop edge (or `_next` to an earlier node) reset part of the graph.
    LoopReset {
        /// The node whose edge was taken.
        from: String,
        /// The loop head.
        head: String,
    },
    /// An iteration of a loop node's body ended and `until` was judged.
    LoopIteration {
        /// The loop node.
        node: NodeId,
        /// The iteration that ended (1-based).
        iteration: u32,
        /// The loop's cap.
        max_iterations: u32,
        /// Whether the loop ends here.
        done: bool,
        /// What the predicate said, if anything (the next `loop.feedback`).
        reason: Option<String>,
    },
    /// A subgraph node started its child run.
    SubgraphStarted {
        /// The subgraph node.
        node: NodeId,
        /// The child's run id.
        run_id: RunId,
    },
    /// A teammate message was accepted (SPEC 5).
    MessageSent {
        /// The map node whose team it belongs to.
        node: NodeId,
        /// The sender's identity (`MAP/INDEX`).
        from: String,
        /// The recipient's identity.
        to: String,
        /// The content's size as JSON.
        bytes: u64,
        /// The content, when its JSON is at most 1 KiB.
        content: Option<serde_json::Value>,
    },
    /// An `llm` or `agent` step asked its model (one event per request).
    ModelCalled {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// The model that answered.
        model: String,
        /// Tokens of the prompt, as the provider counted them.
        prompt_tokens: Option<u64>,
        /// Tokens of the completion.
        completion_tokens: Option<u64>,
        /// From the request to the reply, retries included.
        latency_ms: u64,
        /// The provider's name in the worker's configuration.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        /// Prompt tokens the provider served from its cache.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cached_tokens: Option<u64>,
        /// Its cost from the coordinator's `[prices]`; absent for a model
        /// without a price.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
    },
    /// A `rag` step retrieved passages (one event per retrieval).
    Retrieved {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// The knowledge bases it searched.
        knowledge: Vec<String>,
        /// How it ranked: `keyword`, `vector` or `hybrid`.
        mode: String,
        /// The passages, best first.
        hits: Vec<RetrievedHit>,
        /// How long retrieval took (the query's embedding included).
        latency_ms: u64,
    },
    /// A `rag` step built a knowledge base's index (a later step over the
    /// same files reuses it, and no event says so).
    IndexBuilt {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// The knowledge base.
        knowledge: String,
        /// The index's key (a hash of its files, chunking and model).
        key: String,
        /// Source files read.
        files: u64,
        /// Their bytes.
        bytes: u64,
        /// Chunks indexed.
        chunks: u64,
        /// The packed index's bytes.
        index_bytes: u64,
        /// Embedding requests made.
        embedding_calls: u64,
        /// How its vectors are searched (`exact`, `approximate`; `None`
        /// without embeddings).
        vector_search: Option<String>,
        /// How long the build took.
        latency_ms: u64,
    },
    /// An `agent` step called a tool.
    ToolCalled {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// The tool.
        tool: String,
        /// Why it failed (the model was told), if it did.
        error: Option<String>,
        /// How long it took.
        latency_ms: u64,
    },
    /// A map item finished its chain.
    MapItemFinished {
        /// The map node.
        node: NodeId,
        /// The item index.
        index: usize,
        /// Items finished so far.
        done: usize,
        /// Items in all.
        total: usize,
    },
    /// A task waits because no connected worker hosts what it needs.
    TaskUnhosted {
        /// Node id.
        node: NodeId,
        /// What nobody hosts, e.g. "handler 'draft'".
        needs: String,
    },
    /// A task waits in the coordinator's queue, or a running step's model
    /// call waits, for a rate limit (`[[limits]]`); it goes as soon as the
    /// limit has room, and is never failed for it.
    TaskThrottled {
        /// Node id.
        node: NodeId,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// The limit's name.
        limit: String,
        /// How long it is expected to wait, in milliseconds; absent: until
        /// a call in flight ends.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// A task attempt that was out is sent again, under the same attempt
    /// number (delivery is at least once; this counts the extra sendings).
    TaskRedispatched {
        /// Node id.
        node: NodeId,
        /// The attempt sent again.
        attempt: u32,
        /// Map item index, for a chain step.
        item: Option<usize>,
        /// Why: see [`Redispatch`].
        reason: Redispatch,
        /// The worker that was lost, for [`Redispatch::WorkerLost`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
    },
    /// A node waits for a human.
    WaitingForInput {
        /// Node id.
        node: NodeId,
        /// `approval` or `input`.
        kind: String,
        /// The rendered question.
        prompt: String,
    },
    /// A waiting node was answered.
    InputReceived {
        /// Node id.
        node: NodeId,
        /// Who answered (a token's name or a certificate's subject).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The run was accepted: its first event.
    RunSubmitted {
        /// Who submitted it (for a child run, its parent's submitter).
        by: String,
        /// The namespace it belongs to.
        namespace: String,
        /// For a fork, the run and wave it was forked from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        forked_from: Option<ForkedFrom>,
    },
    /// `retry` started the failed wave again.
    RunRetried {
        /// Who asked.
        by: String,
    },
    /// `cancel` was asked; `RunFinished` follows.
    CancelRequested {
        /// Who asked.
        by: String,
    },
    /// The run ended.
    RunFinished {
        /// Final status.
        status: RunStatus,
        /// The error, for a failed, cancelled or timed-out run.
        error: Option<ErrorInfo>,
    },
}

impl RunEvent {
    /// Every name [`Self::kind`] gives, in the order of the wire's
    /// `RunEvent.event` fields (a test holds the two lists together).
    pub const KINDS: &'static [&'static str] = &[
        "wave_started",
        "node_started",
        "node_finished",
        "node_retrying",
        "node_failed",
        "node_skipped",
        "state_changed",
        "loop_reset",
        "map_item_finished",
        "task_unhosted",
        "waiting_for_input",
        "input_received",
        "run_finished",
        "loop_iteration",
        "subgraph_started",
        "message_sent",
        "model_called",
        "tool_called",
        "run_submitted",
        "run_retried",
        "cancel_requested",
        "task_redispatched",
        "retrieved",
        "index_built",
        "task_throttled",
        "node_cached",
        "node_not_cached",
    ];

    /// The event's name, as the `type` of its JSON form.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::WaveStarted { .. } => "wave_started",
            Self::NodeStarted { .. } => "node_started",
            Self::NodeFinished { .. } => "node_finished",
            Self::NodeCached { .. } => "node_cached",
            Self::NodeNotCached { .. } => "node_not_cached",
            Self::NodeRetrying { .. } => "node_retrying",
            Self::NodeFailed { .. } => "node_failed",
            Self::NodeSkipped { .. } => "node_skipped",
            Self::StateChanged { .. } => "state_changed",
            Self::LoopReset { .. } => "loop_reset",
            Self::MapItemFinished { .. } => "map_item_finished",
            Self::LoopIteration { .. } => "loop_iteration",
            Self::SubgraphStarted { .. } => "subgraph_started",
            Self::MessageSent { .. } => "message_sent",
            Self::ModelCalled { .. } => "model_called",
            Self::ToolCalled { .. } => "tool_called",
            Self::Retrieved { .. } => "retrieved",
            Self::IndexBuilt { .. } => "index_built",
            Self::TaskUnhosted { .. } => "task_unhosted",
            Self::TaskRedispatched { .. } => "task_redispatched",
            Self::TaskThrottled { .. } => "task_throttled",
            Self::WaitingForInput { .. } => "waiting_for_input",
            Self::InputReceived { .. } => "input_received",
            Self::RunSubmitted { .. } => "run_submitted",
            Self::RunRetried { .. } => "run_retried",
            Self::CancelRequested { .. } => "cancel_requested",
            Self::RunFinished { .. } => "run_finished",
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_history_point_reads_back_as_written() {
        for (text, step, point) in [("0", 0, 0), ("3", 3, 0), ("3.57", 3, 57)] {
            let at: super::HistoryPoint = text.parse().expect(text);
            assert_eq!(at, super::HistoryPoint { step, point });
            assert_eq!(at.to_string(), text);
        }
        for bad in ["", "x", "3.", ".5", "3.x", "-1", "3.5.7"] {
            let error = bad
                .parse::<super::HistoryPoint>()
                .expect_err(bad)
                .to_string();
            assert!(error.contains("not a place in a run's history"), "{error}");
        }
    }
    use super::RunEvent;

    /// `RunEvent::KINDS` is the wire's list of event fields, in order: a
    /// new event added to the `.proto` and not to the list fails here.
    #[test]
    fn the_kinds_are_the_wire_s_event_fields() {
        let proto = include_str!("../../protos/weft/v1/runs.proto");
        let message = proto
            .split("message RunEvent {")
            .nth(1)
            .expect("the RunEvent message");
        let oneof = message
            .split("oneof event {")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .expect("its event oneof");
        let fields: Vec<&str> = oneof
            .lines()
            .filter_map(|line| line.split_whitespace().nth(1))
            .collect();
        assert_eq!(fields, RunEvent::KINDS);
    }
}
