//! Where a map item's chain goes: a step's output checked before it is
//! accepted (its writes, its `_send`, its `_next`), and the node the chain
//! moves to next (`_next`, then the router, then the edges).

use std::collections::HashMap;

use serde_json::Map;

use super::super::events::NodeOutput;
use super::super::output::{WriteError, finish_output};
use super::super::plan::RunPlan;
use super::super::routing::{Decision, Reading, RouteError, decide};
use super::{MapRun, SendError, StepWrites, fork_state};
use crate::graph::Meter;
use crate::graph::{END, NodeIdx};

/// Why a chain step's output is refused: the attempt fails, and nothing
/// changed, so it can be retried.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A `_send` the step's team cannot take.
    #[error("`_send`: {0}")]
    Send(SendError),
    /// The item ended meanwhile.
    #[error("the item is no longer running")]
    NotRunning,
    /// The writes break the schema, a reducer or a template.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// `_next` leads nowhere the chain can go.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

/// Why an item's chain cannot go on from a step.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// `_next` names no node.
    #[error("`_next` names unknown node '{0}'")]
    UnknownNext(String),
    /// `_next` leaves the branch.
    #[error(
        "routed to '{id}' which is outside the branch subgraph rooted at '{entry}' (branch nodes: {members}). \
         Script `_next` targets inside a map branch must stay within the branch."
    )]
    OutsideBranch {
        /// The target.
        id: String,
        /// The branch's entry node.
        entry: String,
        /// The branch's nodes, sorted, comma-separated.
        members: String,
    },
    /// A condition could not be decided.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A `fn:` condition or router, which a branch cannot call yet.
    #[error("`fn:` conditions and routers are not supported inside a map branch yet")]
    FunctionInBranch,
    /// Several edges were taken at once.
    #[error("routing took {} edges at once ({}); a map branch chain cannot fan out", .0.len(), .0.join(", "))]
    FanOut(Vec<String>),
}

impl MapRun {
    /// What a chain step of item `index` returned, as the writes it makes
    /// and its `_next`; an error (a schema or type mismatch, a template
    /// error, a `_next` out of the branch) fails the attempt. Changes
    /// nothing, so the attempt can be retried.
    pub fn check_step(
        &self,
        plan: &RunPlan,
        meter: &Meter,
        index: usize,
        node: NodeIdx,
        mut output: NodeOutput,
    ) -> Result<StepWrites, StepError> {
        let sends = std::mem::take(&mut output.sends);
        let worker = output.worker.take();
        self.check_sends(plan, node, &sends)
            .map_err(StepError::Send)?;
        let run = self.runs[index].as_ref().ok_or(StepError::NotRunning)?;
        let (s0, output_key) = (&self.s0, self.hidden_key());
        let (writes, next) = finish_output(
            plan.graph(),
            plan.graph().node(node),
            || fork_state(s0, run, output_key).view_of(plan.update_reads(node)),
            &run.scope,
            output,
            false,
            meter,
        )?;
        if let Some(id) = next.as_deref() {
            self.next_target(plan, id)?;
        }
        Ok(StepWrites {
            writes,
            next,
            sends,
            worker,
        })
    }

    /// Where a step's `_next` leads: a node of the branch, or (`END`) the
    /// end of the chain.
    fn next_target(&self, plan: &RunPlan, id: &str) -> Result<Option<NodeIdx>, ChainError> {
        // `_next: END` ends the item's chain, like an edge to END.
        if id == END {
            return Ok(None);
        }
        let graph = plan.graph();
        let members = plan.branch_members(self.map);
        let target = graph
            .node_index(id)
            .ok_or_else(|| ChainError::UnknownNext(id.to_owned()))?;
        if !members[target] {
            let entry = self.names.branch.map_or("", |b| graph.node(b).id.as_str());
            let mut names: Vec<&str> = (0..members.len())
                .filter(|&i| members[i])
                .map(|i| graph.node(i).id.as_str())
                .collect();
            names.sort_unstable();
            return Err(ChainError::OutsideBranch {
                id: id.to_owned(),
                entry: entry.to_owned(),
                members: names.join(", "),
            });
        }
        Ok(Some(target))
    }

    /// Where item `index`'s chain goes after `node`: `_next`, then the
    /// router, then edges. `None` ends the chain.
    pub(super) fn chain_next(
        &self,
        plan: &RunPlan,
        meter: &Meter,
        node: NodeIdx,
        next: Option<&str>,
        index: usize,
    ) -> Result<Option<NodeIdx>, ChainError> {
        let graph = plan.graph();
        if let Some(id) = next {
            return self.next_target(plan, id);
        }
        let run = self.runs[index].as_ref().expect("item is running");
        // The fork's view holds only the fields the conditions read, and
        // only when there are conditions.
        let view = if plan.routes_on_state(node) {
            fork_state(&self.s0, run, self.hidden_key()).view_of(plan.routing_reads(node))
        } else {
            Map::new()
        };
        let reading = Reading {
            state: &view,
            scope: &run.scope,
            answers: &HashMap::new(),
            meter,
        };
        let decision = decide(plan, node, None, false, &reading)?;
        let Decision::Resolved { taken, .. } = decision else {
            return Err(ChainError::FunctionInBranch);
        };
        let mut targets: Vec<NodeIdx> = taken
            .iter()
            .filter_map(|&e| graph.edges[e].to.node())
            .collect();
        targets.dedup();
        match targets.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            many => Err(ChainError::FanOut(
                many.iter().map(|&t| graph.node(t).id.clone()).collect(),
            )),
        }
    }
}
