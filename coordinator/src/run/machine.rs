//! The run state machine: `apply(input) -> effects`, with no I/O, clock or
//! channel (SPEC section 3).
//!
//! A run advances in waves. A wave starts with every ready node, gives each
//! the state as it was when the wave started (S0), waits for all of them,
//! merges their changes field by field, routes on the merged state, applies
//! loop resets, and computes the next wave. A wave is all-or-nothing: a node
//! that fails for good (without `fallback`), a conflicting write or a
//! routing error leaves the state as it was before the wave.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::events::*;
use super::map_run::MapRun;
use super::merge::MergeOutcome;
use super::output::initial_state;
use super::plan::RunPlan;
use super::routing::Query;
use crate::graph::{Graph, NodeIdx};

/// Where a node stands in the current iteration of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeStatus {
    /// Not run yet (or reset by a loop).
    Pending,
    /// In the current wave.
    Running,
    /// Waiting for a human.
    Waiting,
    /// Finished (or failed with a fallback).
    Done,
    /// None of its incoming edges was taken.
    Skipped,
    /// Failed for good; the run failed with it.
    Failed,
}

/// Resolution of a forward edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EdgeStatus {
    Unresolved,
    Taken,
    NotTaken,
}

/// A member of the current wave.
#[derive(Debug)]
pub(super) enum Member {
    Running,
    Waiting,
    Succeeded {
        changes: Map<String, Value>,
        next: Option<String>,
    },
    FellBack,
    Mapping(Box<MapRun>),
}

#[derive(Debug)]
pub(super) enum Phase {
    Running,
    /// Waiting for worker-hosted reducers.
    Merging {
        outcome: MergeOutcome,
        pending: HashMap<CallKey, String>,
    },
    /// Waiting for worker-hosted predicates and routers.
    Routing {
        overlay: Map<String, Value>,
        view: State,
        changed: Vec<String>,
        pending: HashMap<CallKey, Query>,
        answers: HashMap<Query, Value>,
    },
}

#[derive(Debug)]
pub(super) struct Wave {
    pub(super) step: u32,
    pub(super) s0: State,
    pub(super) members: Vec<NodeIdx>,
    pub(super) slots: Vec<Member>,
    pub(super) phase: Phase,
    pub(super) announced_waiting: bool,
}

#[derive(Debug, Clone)]
pub(super) struct TaskRef {
    pub(super) node: NodeIdx,
    pub(super) item: Option<usize>,
    pub(super) spec: TaskSpec,
    pub(super) in_flight: bool,
}

/// One run's semantics, driven by inputs.
#[derive(Debug)]
pub struct RunMachine {
    pub(super) plan: Arc<RunPlan>,
    pub(super) state: State,
    pub(super) status: RunStatus,
    pub(super) error: Option<RunError>,
    pub(super) steps: u32,
    pub(super) nodes: Vec<NodeStatus>,
    pub(super) edges: Vec<EdgeStatus>,
    pub(super) forced: BTreeSet<NodeIdx>,
    pub(super) wave: Option<Wave>,
    pub(super) tasks: HashMap<TaskKey, TaskRef>,
    pub(super) queue: VecDeque<TaskKey>,
    pub(super) in_flight: usize,
    pub(super) next_key: u64,
    pub(super) next_call: u64,
    pub(super) failed_wave: Vec<NodeIdx>,
}

impl RunMachine {
    /// Creates a run over `plan` with the caller's input; nothing runs until
    /// [`RunMachine::start`]. Fails when the input does not fit the declared state.
    pub fn new(plan: Arc<RunPlan>, input: Map<String, Value>) -> Result<Self, RunError> {
        let graph = plan.graph();
        let state =
            initial_state(graph, input).map_err(|message| RunError::InvalidInput { message })?;
        let edges = graph
            .edges
            .iter()
            .map(|edge| match edge.from {
                crate::graph::Endpoint::Start => EdgeStatus::Taken,
                crate::graph::Endpoint::Node(_) => EdgeStatus::Unresolved,
            })
            .collect();
        Ok(Self {
            state: Arc::new(state),
            status: RunStatus::Running,
            error: None,
            steps: 0,
            nodes: vec![NodeStatus::Pending; graph.nodes.len()],
            edges,
            forced: graph.start_nodes().into_iter().collect(),
            wave: None,
            tasks: HashMap::new(),
            queue: VecDeque::new(),
            in_flight: 0,
            next_key: 1,
            next_call: 1,
            failed_wave: Vec::new(),
            plan,
        })
    }

    /// Starts the first wave.
    pub fn start(&mut self) -> Vec<Effect> {
        let mut fx = Vec::new();
        self.advance(&mut fx);
        fx
    }

    /// The state as of the last merge.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The run's status.
    pub fn status(&self) -> RunStatus {
        self.status
    }

    /// Why the run failed, was cancelled or timed out.
    pub fn error(&self) -> Option<&RunError> {
        self.error.as_ref()
    }

    /// Waves started so far.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// A node's status.
    pub fn node_status(&self, id: &str) -> Option<NodeStatus> {
        self.graph().node_index(id).map(|idx| self.nodes[idx])
    }

    /// Tasks dispatched and not yet returned.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The nodes waiting for a human, with their kind and rendered prompt.
    pub fn waiting(&self) -> Vec<(String, String, String)> {
        let Some(wave) = &self.wave else {
            return Vec::new();
        };
        wave.members
            .iter()
            .zip(&wave.slots)
            .filter(|(_, slot)| matches!(slot, Member::Waiting))
            .map(|(&idx, _)| {
                let node = self.graph().node(idx);
                (
                    node.id.clone(),
                    node.kind.name().to_owned(),
                    self.prompt_of(idx, &wave.s0),
                )
            })
            .collect()
    }

    pub(super) fn graph(&self) -> &Graph {
        self.plan.graph()
    }

    /// Applies one input and returns what the actor must do.
    pub fn apply(&mut self, input: Input) -> Result<Vec<Effect>, Rejected> {
        let mut fx = Vec::new();
        match input {
            Input::TaskSucceeded { key, output } => self.task_succeeded(key, output, &mut fx),
            Input::TaskFailed { key, failure } => self.task_failed(key, failure, &mut fx),
            Input::RetryDue { key } => {
                if let Some(task) = self.tasks.get(&key)
                    && !task.in_flight
                    && !self.queue.contains(&key)
                {
                    self.queue.push_back(key);
                    self.pump(&mut fx);
                }
            }
            Input::Answered { node, answer } => self.answered(&node, answer, &mut fx)?,
            Input::CallReturned { call, result } => self.call_returned(call, result, &mut fx),
            Input::Cancel => self.stop(RunStatus::Cancelled, RunError::Cancelled, &mut fx)?,
            Input::DeadlinePassed => self.stop(RunStatus::Failed, RunError::RunTimeout, &mut fx)?,
            Input::RetryRun => self.retry_run(&mut fx)?,
        }
        Ok(fx)
    }

    pub(super) fn finish(
        &mut self,
        status: RunStatus,
        error: Option<RunError>,
        fx: &mut Vec<Effect>,
    ) {
        self.status = status;
        self.error = error.clone();
        fx.push(Effect::Emit(RunEvent::RunFinished { status, error }));
        fx.push(Effect::Checkpoint);
    }

    fn stop(
        &mut self,
        status: RunStatus,
        error: RunError,
        fx: &mut Vec<Effect>,
    ) -> Result<(), Rejected> {
        if self.status.is_terminal() {
            return Err(Rejected::Ended);
        }
        self.wave = None;
        self.cancel_all(fx);
        self.finish(status, Some(error), fx);
        Ok(())
    }

    fn retry_run(&mut self, fx: &mut Vec<Effect>) -> Result<(), Rejected> {
        if self.status != RunStatus::Failed || self.failed_wave.is_empty() {
            return Err(Rejected::NotRetryable(self.status));
        }
        self.status = RunStatus::Running;
        self.error = None;
        // The failed wave runs again as the same step.
        self.steps = self.steps.saturating_sub(1);
        for idx in std::mem::take(&mut self.failed_wave) {
            self.nodes[idx] = NodeStatus::Pending;
            self.forced.insert(idx);
        }
        self.advance(fx);
        Ok(())
    }
}
