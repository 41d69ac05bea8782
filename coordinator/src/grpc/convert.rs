//! The run service's conversions between generated protobuf types and the
//! domain: bundles in; runs, events and findings out. (The worker
//! protocol's are its own, in `weft_proto::worker_protocol::wire`.)

use weft_proto::v1 as pb;

use crate::bundle::{Bundle, BundleError};
use crate::graph::{Finding, Severity};
use weft_proto::events::{error_to_wire, event_to_wire, status_to_wire};

use crate::run_actor::{RunEvent, RunView, StoredEvent};

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

/// A run's info; `with_state: false` leaves the (possibly large) state out.
pub fn run_info(view: RunView, with_state: bool) -> pb::RunInfo {
    run_info_drawn(view, with_state, false)
}

/// [`run_info`], with the graph drawn when `with_diagram`.
pub fn run_info_drawn(view: RunView, with_state: bool, with_diagram: bool) -> pb::RunInfo {
    pb::RunInfo {
        diagram_svg: if with_diagram {
            crate::graph::diagram::svg(&view.graph)
        } else {
            String::new()
        },
        trace_id: view.trace_id.to_string(),
        run_id: view.id.to_string(),
        graph_name: view.graph_name,
        status: status_to_wire(view.status) as i32,
        state_json: if with_state {
            weft_proto::json::object_to_string(&view.state)
        } else {
            String::new()
        },
        error: view.error.map(|error| error_to_wire(error.info())),
        waiting: view
            .waiting
            .into_iter()
            .map(|(node, kind, prompt)| pb::WaitingNode { node, kind, prompt })
            .collect(),
        event_count: view.event_count,
        created_unix_ms: view.created_unix_ms,
        unhosted: view
            .unhosted
            .into_iter()
            .map(|w| pb::UnhostedWait {
                node: w.node,
                needs: w.needs,
                tasks: w.tasks,
            })
            .collect(),
        children: view
            .children
            .into_iter()
            .map(|(node, run_id)| pb::ChildRun {
                node: node.into(),
                run_id: run_id.into(),
            })
            .collect(),
        ended_unix_ms: view.ended_unix_ms,
        namespace: view.owner.namespace,
        submitted_by: view.owner.submitted_by,
        answers: view
            .answers
            .into_iter()
            .map(|a| pb::Answer {
                node: a.node,
                by: a.by,
                approved: a.approved,
            })
            .collect(),
    }
}

pub fn event(stored: &StoredEvent) -> pb::RunEvent {
    event_to_wire(stored.seq, stored.at_unix_ms, &stored.event)
}

/// Reports whether an event ends the run's stream.
pub fn is_final(stored: &StoredEvent) -> bool {
    matches!(&*stored.event, RunEvent::RunFinished { .. })
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
