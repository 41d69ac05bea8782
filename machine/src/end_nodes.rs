//! `end` nodes: their `state_updates` when their wave starts, and the run
//! ending as they say (completed, or failed with their message) once that
//! wave has merged.

use serde_json::Map;

use super::events::*;
use super::output::finish_output;
use super::*;
use crate::graph::{NodeIdx, NodeKind};

impl RunMachine {
    /// An `end` node's wave: its `state_updates` are its only writes.
    pub(super) fn end_reached(&mut self, idx: NodeIdx, s0: &State, fx: &mut Vec<Effect>) {
        let graph = self.graph();
        let output = NodeOutput::default();
        let finished = finish_output(
            graph,
            graph.node(idx),
            || fields_of(s0, self.plan.update_reads(idx)),
            &Map::new(),
            output,
            true,
            &self.run.meter,
        );
        match finished {
            Ok((writes, _)) => self.set_member(
                idx,
                Member::Succeeded {
                    changes: self.changes(s0, writes),
                    next: None,
                },
            ),
            Err(error) => {
                let failure = TaskFailure::found_by_coordinator(
                    FailureKind::InvalidOutput,
                    error.to_string(),
                );
                self.member_failed(idx, 1, failure, fx);
            }
        }
    }

    /// An `end` node finished its wave: the run ends as it says.
    pub(super) fn end_at(&mut self, end: NodeIdx, fx: &mut Vec<Effect>) {
        let node = self.graph().node(end);
        let NodeKind::End(config) = &node.kind else {
            return;
        };
        let error = config.failed.then(|| RunError::EndFailed {
            node: node.id.clone(),
            message: config.message.clone(),
        });
        let status = if config.failed {
            RunStatus::Failed
        } else {
            RunStatus::Completed
        };
        self.finish(status, error, fx);
    }
}
