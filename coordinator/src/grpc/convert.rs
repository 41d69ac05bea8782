//! The run service's conversions between generated protobuf types and the
//! domain: bundles in; runs ([`RunReport`]), events and findings out, and
//! back in where a standby's HTTP door reads the leader's answers. (The
//! worker protocol's are its own, in `weft_proto::worker_protocol::wire`.)

use weft_proto::v1 as pb;

use crate::bundle::{Bundle, BundleError};
use crate::graph::{Finding, Severity};
use weft_proto::events::{
    error_from_wire, error_to_wire, event_from_wire, event_to_wire, status_from_wire,
    status_to_wire,
};

use crate::access::{RunReport, StoredEvent, WaitingNode};
use crate::run_actor::{Answered, UnhostedWait};

pub fn bundle(message: Option<pb::GraphBundle>, limit: usize) -> Result<Bundle, BundleError> {
    let message = message.unwrap_or_default();
    // Counted before anything is made of them.
    if message.files.len() > crate::bundle::MAX_BUNDLE_FILES {
        return Err(BundleError::TooManyFiles {
            limit: crate::bundle::MAX_BUNDLE_FILES,
        });
    }
    let files = message
        .files
        .into_iter()
        .map(|f| (f.path, f.content, f.mode));
    Bundle::new(message.graph_path, files, limit)
}

impl From<RunReport> for pb::RunInfo {
    fn from(report: RunReport) -> Self {
        Self {
            usage: (!report.usage.is_empty()).then(|| report.usage.into()),
            run_id: report.run_id.to_string(),
            graph_name: report.graph_name,
            status: status_to_wire(report.status) as i32,
            state_json: report.state_json.unwrap_or_default(),
            input_fields: report.input_fields,
            error: report.error.map(error_to_wire),
            waiting: report
                .waiting
                .into_iter()
                .map(|w| pb::WaitingNode {
                    node: w.node,
                    kind: w.kind,
                    prompt: w.prompt,
                })
                .collect(),
            event_count: report.event_count,
            created_unix_ms: report.created_unix_ms,
            ended_unix_ms: report.ended_unix_ms,
            unhosted: report
                .unhosted
                .into_iter()
                .map(|w| pb::UnhostedWait {
                    node: w.node,
                    needs: w.needs,
                    tasks: w.tasks,
                })
                .collect(),
            children: report
                .children
                .into_iter()
                .map(|(node, run_id)| pb::ChildRun {
                    node: node.into(),
                    run_id: run_id.into(),
                })
                .collect(),
            namespace: report.namespace,
            submitted_by: report.submitted_by,
            forked_from_run: report
                .forked_from
                .as_ref()
                .map(|from| from.run.to_string())
                .unwrap_or_default(),
            forked_from_step: report.forked_from.as_ref().map(|from| from.step),
            forked_from_point: report.forked_from.as_ref().map_or(0, |from| from.point),
            answers: report
                .answers
                .into_iter()
                .map(|a| pb::Answer {
                    node: a.node,
                    by: a.by,
                    approved: a.approved,
                })
                .collect(),
            trace_id: report.trace_id,
            diagram_svg: report.diagram_svg.unwrap_or_default(),
        }
    }
}

/// A leader's answer in domain terms, as a standby's HTTP door reads it:
/// what the leader left out (the state, the diagram) is `None`.
impl From<pb::RunInfo> for RunReport {
    fn from(info: pb::RunInfo) -> Self {
        Self {
            usage: info.usage.map(Into::into).unwrap_or_default(),
            run_id: info.run_id.into(),
            graph_name: info.graph_name,
            status: status_from_wire(info.status),
            state_json: (!info.state_json.is_empty()).then_some(info.state_json),
            input_fields: info.input_fields,
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
            event_count: info.event_count,
            created_unix_ms: info.created_unix_ms,
            ended_unix_ms: info.ended_unix_ms,
            unhosted: info
                .unhosted
                .into_iter()
                .map(|w| UnhostedWait {
                    node: w.node,
                    needs: w.needs,
                    tasks: w.tasks,
                })
                .collect(),
            children: info
                .children
                .into_iter()
                .map(|c| (c.node.into(), c.run_id.into()))
                .collect(),
            namespace: info.namespace,
            submitted_by: info.submitted_by,
            forked_from: (!info.forked_from_run.is_empty()).then(|| {
                weft_proto::events::ForkedFrom {
                    run: info.forked_from_run.into(),
                    step: info.forked_from_step.unwrap_or_default(),
                    point: info.forked_from_point,
                }
            }),
            answers: info
                .answers
                .into_iter()
                .map(|a| Answered {
                    node: a.node,
                    by: a.by,
                    approved: a.approved,
                })
                .collect(),
            trace_id: info.trace_id,
            diagram_svg: (!info.diagram_svg.is_empty()).then_some(info.diagram_svg),
        }
    }
}

/// A piece of a run's model output on the wire.
pub fn delta(piece: &crate::run_actor::streams::Piece) -> pb::StreamDelta {
    use crate::run_actor::streams::PieceKind;
    let kind = match piece.kind {
        PieceKind::Text => "text",
        PieceKind::ToolCall => "tool_call",
        PieceKind::ToolResult => "tool_result",
        PieceKind::Message => "message",
        PieceKind::End => "end",
        PieceKind::Abandoned => "abandoned",
        PieceKind::Truncated => "truncated",
    };
    pb::StreamDelta {
        offset: piece.offset,
        node: piece.node.to_string(),
        item: piece.item.map(|item| item as u64),
        attempt: piece.attempt,
        kind: kind.to_owned(),
        text: piece.text.clone(),
    }
}

/// One entry of a run's event log on the wire.
pub fn event(stored: &StoredEvent) -> pb::RunEvent {
    event_to_wire(stored.seq, stored.at_unix_ms, &stored.event)
}

/// A leader's event in domain terms, as a standby's HTTP door reads it;
/// `None` for an event of a kind this coordinator does not know.
pub fn stored_event(event: pb::RunEvent) -> Option<StoredEvent> {
    let (seq, at_unix_ms) = (event.seq, event.at_unix_ms);
    Some(StoredEvent {
        seq,
        at_unix_ms,
        event: std::sync::Arc::new(event_from_wire(event)?),
    })
}

pub fn finding(finding: &Finding) -> pb::Finding {
    pb::Finding {
        severity: match finding.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
        .to_owned(),
        message: finding.message.clone(),
        nodes: finding.nodes.clone(),
        line: finding.line.unwrap_or(0),
    }
}

/// A kept knowledge index, as `ListIndexes` shows it.
pub(crate) fn index_info(info: crate::indexes::IndexInfo) -> pb::IndexInfo {
    pb::IndexInfo {
        namespace: info.namespace,
        key: info.key,
        knowledge: info.knowledge,
        files: info.files,
        bytes: info.bytes,
        chunks: info.chunks,
        index_bytes: info.index_bytes,
        model: info.model,
        embedding_calls: info.embedding_calls,
        vector_search: info.vector_search,
        build_ms: info.build_ms,
        built_by: info.built_by,
        built_at_ms: info.built_at_ms,
        used_at_ms: info.used_at_ms,
        run_id: info.run_id,
    }
}

/// A wave of a run's history, on the wire.
pub fn history_wave(wave: crate::durable::history::Wave) -> pb::HistoryWave {
    pb::HistoryWave {
        step: wave.at.step,
        point: wave.at.point,
        at_unix_ms: wave.at_unix_ms,
        status: wave.status,
        changed: wave.changed,
        removed: wave.removed,
    }
}
