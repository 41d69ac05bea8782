//! What the client returns about runs: their information and their
//! events, in the client's terms, and how each is read off the wire.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use weft_proto::RunId;
use weft_proto::events::{error_from_wire, event_from_wire, status_from_wire};
use weft_proto::v1 as pb;

use weft_proto::events::{ErrorInfo as RunErrorInfo, RunEvent};
use weft_proto::types::RunStatus;

use crate::error::ClientError;

/// A node waiting for a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingNode {
    /// The node.
    pub node: String,
    /// `approval` or `input`.
    pub kind: String,
    /// The question.
    pub prompt: String,
}

/// Tasks of one node waiting for a worker that hosts what they need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnhostedWait {
    /// The node (or the function, for a worker-hosted call).
    pub node: String,
    /// What no connected worker hosts, e.g. `handler 'summarize'`.
    pub needs: String,
    /// How many of the node's tasks wait.
    pub tasks: u32,
}

/// A run's status, state, error and pending questions.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The run id.
    pub run_id: RunId,
    /// The graph's name.
    pub graph_name: String,
    /// Status.
    pub status: RunStatus,
    /// The state as of the last merge.
    pub state: Value,
    /// For failed and cancelled runs.
    pub error: Option<RunErrorInfo>,
    /// Nodes waiting for a human.
    pub waiting: Vec<WaitingNode>,
    /// Work no connected worker hosts, which the run waits for.
    pub unhosted: Vec<UnhostedWait>,
    /// The child runs its subgraph nodes started, in order.
    pub children: Vec<ChildRun>,
    /// Events recorded so far.
    pub event_count: u64,
    /// When it was submitted (Unix milliseconds).
    pub created_unix_ms: i64,
    /// When it ended (Unix milliseconds), once it has.
    pub ended_unix_ms: Option<i64>,
    /// The namespace the run belongs to.
    pub namespace: String,
    /// Who submitted it (empty when not recorded).
    pub submitted_by: String,
    /// For a fork, the run and wave it was forked from.
    pub forked_from: Option<weft_proto::events::ForkedFrom>,
    /// Who answered its approval and input nodes (the latest answer of
    /// each), in the order they were answered.
    pub answers: Vec<Answer>,
    /// What its steps' model calls used: calls, tokens, and the cost by
    /// the coordinator's `[prices]`.
    pub usage: weft_proto::types::Usage,
    /// The OpenTelemetry trace its spans belong to (hex; empty when the
    /// coordinator exports none).
    pub trace_id: String,
}

/// Who answered a human node, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// The node.
    pub node: String,
    /// Who answered (a token's name or a certificate's subject).
    pub by: String,
    /// For an approval: whether it was approved; `None` for an input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
}

impl Answer {
    /// "approved by NAME", "rejected by NAME" or "answered by NAME".
    pub fn describe(&self) -> String {
        let verb = match self.approved {
            Some(true) => "approved",
            Some(false) => "rejected",
            None => "answered",
        };
        format!("{verb} by {}", self.by)
    }
}

/// A subgraph node's child run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildRun {
    /// The subgraph node.
    pub node: String,
    /// The child's run id.
    pub run_id: RunId,
}

impl RunInfo {
    /// The state, deserialized into your type.
    pub fn output<T: DeserializeOwned>(&self) -> Result<T, ClientError> {
        T::deserialize(&self.state)
            .map_err(|e| ClientError::Decode(format!("the run's state does not fit the type: {e}")))
    }
}

/// A piece of a run's model output as its steps stream it: text of a
/// reply, a tool call's name, or the end of an attempt's stream (`end`,
/// `abandoned`), at its offset in the run's stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Delta {
    /// Its place in the run's stream, from 0: watch again from
    /// `offset + 1` to go on after it.
    pub offset: u64,
    /// The step's node.
    pub node: String,
    /// Its map item, for a chain step.
    pub item: Option<usize>,
    /// Its attempt.
    pub attempt: u32,
    /// `text`, `tool_call`, `tool_result`, `message`, `end`, `abandoned`
    /// or `truncated` (see the streaming guide).
    pub kind: String,
    /// Its text.
    pub text: String,
}

impl Delta {
    pub(crate) fn from_wire(delta: pb::StreamDelta) -> Self {
        Self {
            offset: delta.offset,
            node: delta.node,
            item: delta.item.map(|item| item as usize),
            attempt: delta.attempt,
            kind: delta.kind,
            text: delta.text,
        }
    }
}

/// One thing the coordinator found wrong with a graph it validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `error` (the graph is refused) or `warning`.
    pub severity: String,
    /// What is wrong, and where.
    pub message: String,
    /// The nodes it is about.
    pub nodes: Vec<String>,
    /// The graph file's line, when known (0: not known).
    pub line: u32,
}

impl Finding {
    pub(crate) fn from_wire(finding: pb::Finding) -> Self {
        Self {
            severity: finding.severity,
            message: finding.message,
            nodes: finding.nodes,
            line: finding.line,
        }
    }
}

impl std::fmt::Display for Finding {
    /// `error: MESSAGE` or `warning: MESSAGE`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.severity, self.message)
    }
}

/// One wave a run's history keeps (SPEC 20).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistoryWave {
    /// Waves merged (0: the input, before any).
    pub step: u32,
    /// 0 right after wave `step`; else a point within the next wave: the
    /// events the run's log held at its checkpoint (written `3.57`).
    pub point: u64,
    /// When its checkpoint was taken (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The run's status then.
    pub status: String,
    /// The fields that changed in it.
    pub changed: Vec<String>,
    /// The fields removed in it.
    pub removed: Vec<String>,
}

/// A run's history: the waves kept, and the state after one of them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunHistory {
    /// Every wave kept, in order.
    pub waves: Vec<HistoryWave>,
    /// The place `state` is the state at: after wave `step`, and at
    /// `point` within the next one (0: right after it).
    pub step: u32,
    /// See [`HistoryWave::point`].
    pub point: u64,
    /// The run's state there.
    pub state: serde_json::Value,
}

impl HistoryWave {
    /// Where it is in the run's history.
    pub fn at(&self) -> weft_proto::events::HistoryPoint {
        weft_proto::events::HistoryPoint {
            step: self.step,
            point: self.point,
        }
    }
}

impl RunHistory {
    pub(crate) fn from_wire(history: pb::RunHistory) -> Result<Self, crate::ClientError> {
        let state = serde_json::from_str(&history.state_json)
            .map_err(|e| crate::ClientError::Decode(format!("a run's state: {e}")))?;
        Ok(Self {
            waves: history
                .waves
                .into_iter()
                .map(|wave| HistoryWave {
                    step: wave.step,
                    point: wave.point,
                    at_unix_ms: wave.at_unix_ms,
                    status: wave.status,
                    changed: wave.changed,
                    removed: wave.removed,
                })
                .collect(),
            step: history.step,
            point: history.point,
            state,
        })
    }
}

/// One entry of a run's event log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Position in the log.
    pub seq: u64,
    /// When it happened (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The event, typed.
    pub event: RunEvent,
    /// Its kind: `wave_started`, `node_finished`, `map_item_finished`,
    /// `run_finished`, … (the `type` of its JSON form).
    pub kind: String,
    /// Its JSON form, `type` included (what `weft watch --json` prints).
    pub body: Value,
}

impl Event {
    pub(crate) fn from_wire(event: pb::RunEvent) -> Option<Self> {
        let (seq, at_unix_ms) = (event.seq, event.at_unix_ms);
        let event = event_from_wire(event)?;
        Some(Self {
            seq,
            at_unix_ms,
            kind: event.kind().to_owned(),
            body: serde_json::to_value(&event).unwrap_or(Value::Null),
            event,
        })
    }

    /// Whether the run's stream pauses or ends after this event.
    pub fn ends_or_pauses(&self) -> bool {
        matches!(
            self.event,
            RunEvent::RunFinished { .. } | RunEvent::WaitingForInput { .. }
        )
    }
}

/// [`Event::ends_or_pauses`] read off the wire, without decoding the event.
/// The event types that end or pause a run: all a wait asks to be sent.
pub(crate) const ENDS_OR_PAUSES: [&str; 2] = ["run_finished", "waiting_for_input"];

pub(crate) fn ends_or_pauses_on_wire(event: &pb::RunEvent) -> bool {
    use pb::run_event::Event as Kind;
    matches!(
        event.event,
        Some(Kind::RunFinished(_) | Kind::WaitingForInput(_))
    )
}

pub(crate) fn run_info(info: pb::RunInfo) -> Result<RunInfo, ClientError> {
    let status = status_from_wire(info.status);
    let state = if info.state_json.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&info.state_json)
            .map_err(|e| ClientError::Decode(format!("the run's state: {e}")))?
    };
    Ok(RunInfo {
        run_id: info.run_id.into(),
        graph_name: info.graph_name,
        status,
        state,
        error: info.error.map(error_from_wire),
        waiting: info
            .waiting
            .into_iter()
            .map(|w| WaitingNode {
                node: w.node,
                kind: w.kind,
                prompt: w.prompt,
            })
            .collect(),
        children: info
            .children
            .into_iter()
            .map(|c| ChildRun {
                node: c.node,
                run_id: c.run_id.into(),
            })
            .collect(),
        unhosted: info
            .unhosted
            .into_iter()
            .map(|w| UnhostedWait {
                node: w.node,
                needs: w.needs,
                tasks: w.tasks,
            })
            .collect(),
        event_count: info.event_count,
        created_unix_ms: info.created_unix_ms,
        ended_unix_ms: info.ended_unix_ms,
        usage: info.usage.map(Into::into).unwrap_or_default(),
        trace_id: info.trace_id,
        namespace: info.namespace,
        submitted_by: info.submitted_by,
        forked_from: (!info.forked_from_run.is_empty()).then(|| weft_proto::events::ForkedFrom {
            run: info.forked_from_run.into(),
            step: info.forked_from_step.unwrap_or_default(),
            point: info.forked_from_point,
        }),
        answers: info
            .answers
            .into_iter()
            .map(|a| Answer {
                node: a.node,
                by: a.by,
                approved: a.approved,
            })
            .collect(),
    })
}
