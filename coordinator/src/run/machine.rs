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
use super::map_run::{ItemStep, MapRun};
use super::merge::{MergeError, MergeOutcome, changed_fields, merge_wave};
use super::output::{answer_writes, finish_output, initial_state};
use super::plan::RunPlan;
use super::routing::{Decision, Query, decide};
use crate::graph::{Graph, NodeIdx, NodeKind, Strictness, TemplateContext};

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
pub(crate) enum EdgeStatus {
    Unresolved,
    Taken,
    NotTaken,
}

/// A member of the current wave.
#[derive(Debug)]
pub(crate) enum Member {
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
enum Phase {
    Running,
    /// Waiting for worker-hosted reducers.
    Merging {
        outcome: MergeOutcome,
        pending: HashMap<CallKey, String>,
    },
    /// Waiting for worker-hosted predicates and routers.
    Routing {
        merged: State,
        changed: Vec<String>,
        pending: HashMap<CallKey, Query>,
        answers: HashMap<Query, Value>,
    },
}

#[derive(Debug)]
struct Wave {
    step: u32,
    s0: State,
    members: Vec<NodeIdx>,
    slots: Vec<Member>,
    phase: Phase,
    announced_waiting: bool,
}

#[derive(Debug, Clone)]
struct TaskRef {
    node: NodeIdx,
    item: Option<usize>,
    spec: TaskSpec,
    in_flight: bool,
}

/// One run's semantics, driven by inputs.
#[derive(Debug)]
pub struct RunMachine {
    plan: Arc<RunPlan>,
    state: State,
    status: RunStatus,
    error: Option<RunError>,
    steps: u32,
    nodes: Vec<NodeStatus>,
    pub(crate) edges: Vec<EdgeStatus>,
    forced: BTreeSet<NodeIdx>,
    wave: Option<Wave>,
    tasks: HashMap<TaskKey, TaskRef>,
    queue: VecDeque<TaskKey>,
    in_flight: usize,
    next_key: u64,
    next_call: u64,
    failed_wave: Vec<NodeIdx>,
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

    fn graph(&self) -> &Graph {
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

    // ----- tasks -------------------------------------------------------

    /// Creates attempt `attempt` of a task and queues it for dispatch.
    pub(crate) fn launch(
        &mut self,
        node: NodeIdx,
        attempt: u32,
        item: Option<ItemRef>,
        state: State,
        scope: Map<String, Value>,
        fx: &mut Vec<Effect>,
    ) {
        let key = self.next_key;
        self.next_key += 1;
        let graph_node = self.graph().node(node);
        let spec = TaskSpec {
            key,
            node: graph_node.id.clone(),
            attempt,
            item,
            state,
            scope,
            timeout: graph_node
                .timeout
                .unwrap_or(self.graph().settings.node_timeout),
        };
        let item_index = spec.item.as_ref().map(|i| i.index);
        self.tasks.insert(
            key,
            TaskRef {
                node,
                item: item_index,
                spec,
                in_flight: false,
            },
        );
        self.queue.push_back(key);
        self.pump(fx);
    }

    /// Dispatches queued tasks while the run's cap allows.
    fn pump(&mut self, fx: &mut Vec<Effect>) {
        let cap = self.graph().settings.max_node_concurrency as usize;
        while cap == 0 || self.in_flight < cap {
            let Some(key) = self.queue.pop_front() else {
                break;
            };
            let Some(task) = self.tasks.get_mut(&key) else {
                continue;
            };
            task.in_flight = true;
            self.in_flight += 1;
            fx.push(Effect::Emit(RunEvent::NodeStarted {
                node: task.spec.node.clone(),
                attempt: task.spec.attempt,
                item: task.item,
            }));
            fx.push(Effect::Dispatch(task.spec.clone()));
        }
    }

    fn take_task(&mut self, key: TaskKey) -> Option<TaskRef> {
        let task = self.tasks.remove(&key)?;
        if task.in_flight {
            self.in_flight -= 1;
        } else {
            self.queue.retain(|&k| k != key);
        }
        Some(task)
    }

    fn task_succeeded(&mut self, key: TaskKey, output: NodeOutput, fx: &mut Vec<Effect>) {
        // Unknown keys are late or duplicate results: ignored.
        let Some(task) = self.take_task(key) else {
            return;
        };
        if let Some(index) = task.item {
            self.item_step_done(task, index, Ok(output), fx);
        } else {
            let node = self.graph().node(task.node).clone();
            let s0 = self.wave.as_ref().map(|w| w.s0.clone()).unwrap_or_default();
            let result = finish_output(self.graph(), &node, &s0, &Map::new(), output, true)
                .and_then(|(writes, next)| {
                    self.check_next(next.as_deref()).map(|()| (writes, next))
                });
            match result {
                Ok((writes, next)) => {
                    let changes = changed_fields(&s0, writes);
                    fx.push(Effect::Emit(RunEvent::NodeFinished {
                        node: node.id.clone(),
                        item: None,
                    }));
                    self.set_member(task.node, Member::Succeeded { changes, next });
                }
                Err(message) => {
                    let failure = TaskFailure {
                        kind: "invalid_output".into(),
                        message,
                        worker: None,
                    };
                    self.member_failed(task.node, task.spec.attempt, failure, fx);
                }
            }
        }
        self.pump(fx);
        self.maybe_finish_wave(fx);
    }

    fn task_failed(&mut self, key: TaskKey, failure: TaskFailure, fx: &mut Vec<Effect>) {
        let Some(task) = self.take_task(key) else {
            return;
        };
        let node = self.graph().node(task.node);
        if task.spec.attempt < node.retry.max_attempts {
            let next_attempt = task.spec.attempt + 1;
            let delay = node.retry.delay_before(next_attempt);
            fx.push(Effect::Emit(RunEvent::NodeRetrying {
                node: node.id.clone(),
                next_attempt,
                delay_ms: delay.as_millis() as u64,
                error: failure.message.clone(),
            }));
            let key = self.next_key;
            self.next_key += 1;
            let mut spec = task.spec.clone();
            spec.key = key;
            spec.attempt = next_attempt;
            self.tasks.insert(
                key,
                TaskRef {
                    spec,
                    in_flight: false,
                    ..task
                },
            );
            fx.push(Effect::ScheduleRetry { key, delay });
        } else if let Some(index) = task.item {
            self.item_step_done(task, index, Err(failure), fx);
        } else {
            self.member_failed(task.node, task.spec.attempt, failure, fx);
        }
        self.pump(fx);
        self.maybe_finish_wave(fx);
    }

    /// Checks a main-flow `_next` target: it must name a main-flow node.
    fn check_next(&self, next: Option<&str>) -> Result<(), String> {
        let Some(id) = next else { return Ok(()) };
        match self.graph().node_index(id) {
            None => Err(format!("`_next` names unknown node '{id}'")),
            Some(idx) if !self.plan.in_main_flow(idx) => Err(format!(
                "`_next` names node '{id}', which belongs to a map branch"
            )),
            Some(_) => Ok(()),
        }
    }

    // ----- wave members ------------------------------------------------

    fn slot_mut(&mut self, node: NodeIdx) -> Option<&mut Member> {
        let wave = self.wave.as_mut()?;
        let position = wave.members.iter().position(|&m| m == node)?;
        Some(&mut wave.slots[position])
    }

    pub(crate) fn set_member(&mut self, node: NodeIdx, member: Member) {
        self.nodes[node] = match member {
            Member::Waiting => NodeStatus::Waiting,
            Member::Running | Member::Mapping(_) => NodeStatus::Running,
            Member::Succeeded { .. } | Member::FellBack => NodeStatus::Done,
        };
        if let Some(slot) = self.slot_mut(node) {
            *slot = member;
        }
    }

    /// A member failed for good: take its fallback, or fail the wave.
    pub(crate) fn member_failed(
        &mut self,
        node: NodeIdx,
        attempt: u32,
        failure: TaskFailure,
        fx: &mut Vec<Effect>,
    ) {
        let error = RunError::ExecutionError {
            node: self.graph().node(node).id.clone(),
            attempt,
            worker: failure.worker.clone(),
            kind: failure.kind.clone(),
            message: failure.message.clone(),
        };
        self.member_failed_with(node, error, fx);
    }

    pub(crate) fn member_failed_with(
        &mut self,
        node: NodeIdx,
        error: RunError,
        fx: &mut Vec<Effect>,
    ) {
        let fallback = self.plan.fallback_of(node);
        let id = self.graph().node(node).id.clone();
        fx.push(Effect::Emit(RunEvent::NodeFailed {
            node: id,
            item: None,
            error: error.to_string(),
            fallback: fallback.map(|f| self.graph().node(f).id.clone()),
        }));
        if fallback.is_some() {
            self.set_member(node, Member::FellBack);
        } else {
            self.nodes[node] = NodeStatus::Failed;
            self.fail_wave(error, fx);
        }
    }

    /// Ends the run as failed; the wave's writes are dropped.
    pub(crate) fn fail_wave(&mut self, error: RunError, fx: &mut Vec<Effect>) {
        if let Some(wave) = self.wave.take() {
            self.failed_wave = wave.members;
        }
        self.cancel_all(fx);
        self.finish(RunStatus::Failed, Some(error), fx);
    }

    fn cancel_all(&mut self, fx: &mut Vec<Effect>) {
        let mut keys: Vec<TaskKey> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.in_flight)
            .map(|(&k, _)| k)
            .collect();
        keys.sort_unstable();
        self.tasks.clear();
        self.queue.clear();
        self.in_flight = 0;
        if !keys.is_empty() {
            fx.push(Effect::CancelTasks(keys));
        }
    }

    fn finish(&mut self, status: RunStatus, error: Option<RunError>, fx: &mut Vec<Effect>) {
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

    // ----- human input -------------------------------------------------

    fn prompt_of(&self, idx: NodeIdx, s0: &State) -> String {
        let prompt = match &self.graph().node(idx).kind {
            NodeKind::Approval { prompt, .. } | NodeKind::Input { prompt, .. } => prompt.as_ref(),
            _ => None,
        };
        let context = TemplateContext {
            state: Some(s0),
            ..Default::default()
        };
        prompt
            .and_then(|p| p.render(&context, Strictness::Lenient).ok())
            .unwrap_or_else(|| format!("{}?", self.graph().node(idx).id))
    }

    fn answered(
        &mut self,
        node_id: &str,
        answer: HumanAnswer,
        fx: &mut Vec<Effect>,
    ) -> Result<(), Rejected> {
        let idx = self
            .graph()
            .node_index(node_id)
            .ok_or_else(|| Rejected::NotWaiting(node_id.to_owned()))?;
        if self.nodes[idx] != NodeStatus::Waiting || self.status.is_terminal() {
            return Err(Rejected::NotWaiting(node_id.to_owned()));
        }
        let node = self.graph().node(idx).clone();
        let s0 = self.wave.as_ref().map(|w| w.s0.clone()).unwrap_or_default();
        let bad = |reason: String| Rejected::BadAnswer {
            node: node_id.to_owned(),
            reason,
        };
        let writes = answer_writes(&node, &answer).map_err(bad)?;
        let output = NodeOutput {
            writes,
            next: None,
            output: Some(answer.value.clone()),
        };
        let (writes, _) =
            finish_output(self.graph(), &node, &s0, &Map::new(), output, true).map_err(bad)?;
        fx.push(Effect::Emit(RunEvent::InputReceived {
            node: node_id.to_owned(),
        }));
        self.set_member(
            idx,
            Member::Succeeded {
                changes: changed_fields(&s0, writes),
                next: None,
            },
        );
        if let Some(wave) = self.wave.as_mut() {
            wave.announced_waiting = false;
        }
        self.status = RunStatus::Running;
        self.maybe_finish_wave(fx);
        Ok(())
    }

    // ----- waves -------------------------------------------------------

    /// Computes the next wave and starts it, or ends the run.
    fn advance(&mut self, fx: &mut Vec<Effect>) {
        let ready = self.ready_nodes(fx);
        if ready.is_empty() {
            self.wave = None;
            self.finish(RunStatus::Completed, None, fx);
            return;
        }
        if self.steps >= self.graph().settings.max_steps {
            self.failed_wave = ready;
            let error = RunError::StepLimitExceeded {
                max_steps: self.graph().settings.max_steps,
            };
            self.finish(RunStatus::Failed, Some(error), fx);
            return;
        }
        self.steps += 1;
        let s0 = self.state.clone();
        fx.push(Effect::Emit(RunEvent::WaveStarted {
            step: self.steps,
            nodes: ready
                .iter()
                .map(|&i| self.graph().node(i).id.clone())
                .collect(),
        }));
        self.wave = Some(Wave {
            step: self.steps,
            s0: s0.clone(),
            members: ready.clone(),
            slots: ready.iter().map(|_| Member::Running).collect(),
            phase: Phase::Running,
            announced_waiting: false,
        });
        for idx in ready {
            self.forced.remove(&idx);
            self.nodes[idx] = NodeStatus::Running;
            if self.status.is_terminal() {
                break;
            }
            self.start_member(idx, &s0, fx);
        }
        if !self.status.is_terminal() {
            self.maybe_finish_wave(fx);
        }
    }

    fn start_member(&mut self, idx: NodeIdx, s0: &State, fx: &mut Vec<Effect>) {
        let node = self.graph().node(idx);
        if node.is_worker_task() {
            self.launch(idx, 1, None, s0.clone(), Map::new(), fx);
            return;
        }
        match &node.kind {
            NodeKind::Approval { .. } | NodeKind::Input { .. } => {
                let prompt = match &node.kind {
                    NodeKind::Approval { prompt, .. } | NodeKind::Input { prompt, .. } => {
                        prompt.clone()
                    }
                    _ => None,
                };
                let context = TemplateContext {
                    state: Some(s0),
                    ..Default::default()
                };
                if let Some(Err(message)) = prompt.map(|p| p.render(&context, Strictness::Strict)) {
                    let failure = TaskFailure {
                        kind: "template_error".into(),
                        message,
                        worker: None,
                    };
                    self.member_failed(idx, 1, failure, fx);
                    return;
                }
                self.set_member(idx, Member::Waiting);
            }
            NodeKind::End(_) => {
                self.set_member(
                    idx,
                    Member::Succeeded {
                        changes: Map::new(),
                        next: None,
                    },
                );
            }
            NodeKind::Map(_) => match MapRun::start(&self.plan, idx, s0) {
                Ok(map) => {
                    self.set_member(idx, Member::Mapping(Box::new(map)));
                    self.pump_items(idx, fx);
                }
                Err(message) => {
                    let failure = TaskFailure {
                        kind: "map_error".into(),
                        message,
                        worker: None,
                    };
                    self.member_failed(idx, 1, failure, fx);
                }
            },
            other => {
                let message = format!("kind '{}' cannot run in this version of Weft", other.name());
                let failure = TaskFailure {
                    kind: "unsupported".into(),
                    message,
                    worker: None,
                };
                self.member_failed(idx, 1, failure, fx);
            }
        }
    }

    /// Ready nodes, in declaration order; skips propagate on the way.
    fn ready_nodes(&mut self, fx: &mut Vec<Effect>) -> Vec<NodeIdx> {
        let mut ready: BTreeSet<NodeIdx> = self.forced.iter().copied().collect();
        let plan = self.plan.clone();
        for &idx in plan.main_order() {
            if self.nodes[idx] != NodeStatus::Pending || ready.contains(&idx) {
                continue;
            }
            let graph = plan.graph();
            let incoming: Vec<EdgeStatus> = graph
                .in_edges(idx)
                .iter()
                .filter(|&&e| graph.edges[e].is_forward())
                .map(|&e| self.edges[e])
                .collect();
            if incoming.is_empty() || incoming.contains(&EdgeStatus::Unresolved) {
                continue;
            }
            if incoming.contains(&EdgeStatus::Taken) {
                ready.insert(idx);
            } else {
                self.nodes[idx] = NodeStatus::Skipped;
                for &e in graph.out_edges(idx) {
                    if graph.edges[e].is_forward() {
                        self.edges[e] = EdgeStatus::NotTaken;
                    }
                }
                fx.push(Effect::Emit(RunEvent::NodeSkipped {
                    node: graph.node(idx).id.clone(),
                }));
            }
        }
        ready.into_iter().collect()
    }

    /// Merges once every member has finished; reports a pause when only
    /// human input is missing.
    pub(crate) fn maybe_finish_wave(&mut self, fx: &mut Vec<Effect>) {
        let Some(wave) = self.wave.as_mut() else {
            return;
        };
        if !matches!(wave.phase, Phase::Running) {
            return;
        }
        if wave
            .slots
            .iter()
            .any(|s| matches!(s, Member::Running | Member::Mapping(_)))
        {
            return;
        }
        if wave.slots.iter().any(|s| matches!(s, Member::Waiting)) {
            if !wave.announced_waiting {
                wave.announced_waiting = true;
                self.status = RunStatus::Waiting;
                for (node, kind, prompt) in self.waiting() {
                    fx.push(Effect::Emit(RunEvent::WaitingForInput {
                        node,
                        kind,
                        prompt,
                    }));
                }
                fx.push(Effect::Checkpoint);
            }
            return;
        }
        self.merge(fx);
    }

    fn merge(&mut self, fx: &mut Vec<Effect>) {
        let Some(wave) = self.wave.as_ref() else {
            return;
        };
        let graph = self.plan.graph();
        let changes: Vec<(&str, &Map<String, Value>)> = wave
            .members
            .iter()
            .zip(&wave.slots)
            .filter_map(|(&idx, slot)| match slot {
                Member::Succeeded { changes, .. } => Some((graph.node(idx).id.as_str(), changes)),
                _ => None,
            })
            .collect();
        let outcome = match merge_wave(graph, &wave.s0, &changes) {
            Ok(outcome) => outcome,
            Err(MergeError::Conflict(conflict)) => {
                let error = RunError::ConcurrentUpdateError {
                    field: conflict.field,
                    nodes: conflict.nodes,
                };
                self.fail_wave(error, fx);
                return;
            }
            Err(MergeError::Reducer { field, message }) => {
                self.fail_wave(RunError::ReducerError { field, message }, fx);
                return;
            }
        };
        if outcome.hosted.is_empty() {
            self.route(outcome.state, outcome.changed, HashMap::new(), fx);
            return;
        }
        let mut pending = HashMap::new();
        for reduction in &outcome.hosted {
            let call = self.next_call;
            self.next_call += 1;
            pending.insert(call, reduction.field.clone());
            fx.push(Effect::CallReducer {
                call,
                name: reduction.reducer.clone(),
                field: reduction.field.clone(),
                s0_value: reduction.s0_value.clone(),
                branch_values: reduction.branch_values.clone(),
            });
        }
        if let Some(wave) = self.wave.as_mut() {
            wave.phase = Phase::Merging { outcome, pending };
        }
    }

    fn call_returned(
        &mut self,
        call: CallKey,
        result: Result<Value, String>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(wave) = self.wave.as_mut() else {
            return;
        };
        match &mut wave.phase {
            Phase::Merging { outcome, pending } => {
                let Some(field) = pending.remove(&call) else {
                    return;
                };
                match result {
                    Ok(value) => {
                        outcome.state.insert(field, value);
                    }
                    Err(message) => {
                        self.fail_wave(RunError::ReducerError { field, message }, fx);
                        return;
                    }
                }
                if pending.is_empty() {
                    let Phase::Merging { outcome, .. } =
                        std::mem::replace(&mut wave.phase, Phase::Running)
                    else {
                        return;
                    };
                    self.route(outcome.state, outcome.changed, HashMap::new(), fx);
                }
            }
            Phase::Routing {
                pending, answers, ..
            } => {
                let Some(query) = pending.remove(&call) else {
                    return;
                };
                match result {
                    Ok(value) => {
                        answers.insert(query, value);
                    }
                    Err(message) => {
                        let node = self.plan.query_owner(query);
                        let error = self.routing_error(node, message);
                        self.fail_wave(error, fx);
                        return;
                    }
                }
                if pending.is_empty() {
                    let Phase::Routing {
                        merged,
                        changed,
                        answers,
                        ..
                    } = std::mem::replace(&mut wave.phase, Phase::Running)
                    else {
                        return;
                    };
                    self.route(Arc::unwrap_or_clone(merged), changed, answers, fx);
                }
            }
            Phase::Running => {}
        }
    }

    fn routing_error(&self, node: NodeIdx, message: String) -> RunError {
        RunError::ExecutionError {
            node: self.graph().node(node).id.clone(),
            attempt: 1,
            worker: None,
            kind: "routing_error".into(),
            message,
        }
    }

    /// Resolves every member's outgoing edges on the merged state, commits
    /// the merge, and moves on.
    fn route(
        &mut self,
        merged: Map<String, Value>,
        changed: Vec<String>,
        answers: HashMap<Query, Value>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(wave) = self.wave.as_ref() else {
            return;
        };
        let merged: State = Arc::new(merged);
        let plan = self.plan.clone();
        let mut decisions = Vec::with_capacity(wave.members.len());
        let mut missing: Vec<Query> = Vec::new();
        for (&idx, slot) in wave.members.iter().zip(&wave.slots) {
            let (next, fell_back) = match slot {
                Member::Succeeded { next, .. } => (next.as_deref(), false),
                _ => (None, true),
            };
            match decide(&plan, idx, next, fell_back, &merged, &Map::new(), &answers) {
                Ok(Decision::NeedsCalls(queries)) => missing.extend(queries),
                Ok(decision) => decisions.push((idx, decision)),
                Err(message) => {
                    let error = self.routing_error(idx, message);
                    self.fail_wave(error, fx);
                    return;
                }
            }
        }
        if !missing.is_empty() {
            let mut pending = HashMap::new();
            for query in missing {
                let call = self.next_call;
                self.next_call += 1;
                pending.insert(call, query);
                fx.push(Effect::CallPredicate {
                    call,
                    name: plan.query_function(query),
                    state: merged.clone(),
                });
            }
            if let Some(wave) = self.wave.as_mut() {
                wave.phase = Phase::Routing {
                    merged,
                    changed,
                    pending,
                    answers,
                };
            }
            return;
        }

        // Commit: the wave's writes become the state.
        let wave = self.wave.take().expect("routing runs inside a wave");
        if !changed.is_empty() {
            fx.push(Effect::Emit(RunEvent::StateChanged {
                step: wave.step,
                fields: changed,
            }));
        }
        self.state = merged;
        fx.push(Effect::Checkpoint);

        let graph = plan.graph();
        if let Some(end) = wave
            .members
            .iter()
            .copied()
            .find(|&i| matches!(graph.node(i).kind, NodeKind::End(_)))
        {
            let NodeKind::End(config) = &graph.node(end).kind else {
                unreachable!()
            };
            let error = config.failed.then(|| RunError::EndFailed {
                node: graph.node(end).id.clone(),
                message: config.message.clone(),
            });
            let status = if config.failed {
                RunStatus::Failed
            } else {
                RunStatus::Completed
            };
            self.finish(status, error, fx);
            return;
        }
        let mut heads = Vec::new();
        for (idx, decision) in decisions {
            let Decision::Resolved { taken, loops, jump } = decision else {
                continue;
            };
            for &e in graph.out_edges(idx) {
                if graph.edges[e].is_forward() {
                    self.edges[e] = if taken.contains(&e) {
                        EdgeStatus::Taken
                    } else {
                        EdgeStatus::NotTaken
                    };
                }
            }
            for head in loops {
                heads.push((idx, head));
            }
            if let Some(target) = jump {
                if self.nodes[target] == NodeStatus::Pending {
                    self.forced.insert(target);
                } else {
                    heads.push((idx, target));
                }
            }
        }
        for (from, head) in heads {
            self.reset_region(from, head, fx);
        }
        self.advance(fx);
    }

    /// A loop edge `from → head` was taken: `head` and everything downstream
    /// of it return to pending with their edges unresolved.
    fn reset_region(&mut self, from: NodeIdx, head: NodeIdx, fx: &mut Vec<Effect>) {
        let plan = self.plan.clone();
        let graph = plan.graph();
        let region = crate::graph::topology::forward_region(graph, head);
        for (idx, inside) in region.iter().enumerate() {
            if !inside || !plan.in_main_flow(idx) {
                continue;
            }
            self.nodes[idx] = NodeStatus::Pending;
            for &e in graph.out_edges(idx) {
                self.edges[e] = EdgeStatus::Unresolved;
            }
        }
        self.forced.insert(head);
        fx.push(Effect::Emit(RunEvent::LoopReset {
            from: graph.node(from).id.clone(),
            head: graph.node(head).id.clone(),
        }));
    }

    // ----- map items ---------------------------------------------------

    fn map_mut(&mut self, map: NodeIdx) -> Option<&mut MapRun> {
        match self.slot_mut(map)? {
            Member::Mapping(run) => Some(run),
            _ => None,
        }
    }

    /// Starts items while the map has free slots.
    fn pump_items(&mut self, map: NodeIdx, fx: &mut Vec<Effect>) {
        let plan = self.plan.clone();
        loop {
            let Some(run) = self.map_mut(map) else { return };
            match run.next_step(&plan) {
                ItemStep::Dispatch {
                    node,
                    item,
                    state,
                    scope,
                } => self.launch(node, 1, Some(item), state, scope, fx),
                ItemStep::Idle => return,
                ItemStep::Finished(changes) => {
                    let id = plan.graph().node(map).id.clone();
                    fx.push(Effect::Emit(RunEvent::NodeFinished {
                        node: id,
                        item: None,
                    }));
                    let s0 = self.wave.as_ref().map(|w| w.s0.clone()).unwrap_or_default();
                    self.set_member(
                        map,
                        Member::Succeeded {
                            changes: changed_fields(&s0, changes),
                            next: None,
                        },
                    );
                    return;
                }
                ItemStep::Failed(error) => {
                    self.cancel_map_tasks(map, fx);
                    self.member_failed_with(map, error, fx);
                    return;
                }
            }
        }
    }

    fn cancel_map_tasks(&mut self, map: NodeIdx, fx: &mut Vec<Effect>) {
        let map_id = self.graph().node(map).id.clone();
        let keys: Vec<TaskKey> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.spec.item.as_ref().is_some_and(|i| i.map == map_id))
            .map(|(&k, _)| k)
            .collect();
        let mut in_flight = Vec::new();
        for key in keys {
            if let Some(task) = self.take_task(key)
                && task.in_flight
            {
                in_flight.push(key);
            }
        }
        in_flight.sort_unstable();
        if !in_flight.is_empty() {
            fx.push(Effect::CancelTasks(in_flight));
        }
    }

    fn item_step_done(
        &mut self,
        task: TaskRef,
        index: usize,
        result: Result<NodeOutput, TaskFailure>,
        fx: &mut Vec<Effect>,
    ) {
        let plan = self.plan.clone();
        let Some(item) = task.spec.item.clone() else {
            return;
        };
        let Some(map) = plan.graph().node_index(&item.map) else {
            return;
        };
        let Some(run) = self.map_mut(map) else { return };
        let event = run.step_done(&plan, index, task.node, result);
        for e in event {
            fx.push(Effect::Emit(e));
        }
        self.pump_items(map, fx);
    }
}
