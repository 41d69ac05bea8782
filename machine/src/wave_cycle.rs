//! Waves: which nodes are ready (with skip propagation), starting each
//! member, the merge when all have finished, routing on the merged state,
//! commit, and loop resets.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::events::*;
use super::*;
use std::collections::BTreeSet;

use super::map_run::{MapRun, MapStartError};
use super::merge::{MergeError, merge_wave};
use super::routing::{Decision, Query, Reading, decide};
use crate::graph::{NodeIdx, NodeKind, Strictness, TemplateContext};
use crate::task::CallError;

/// Which pending nodes the next wave's planning looks at. Only a node
/// whose in-edges were resolved (or reset) since the last planning can have
/// become ready or skippable; forced nodes are looked at anyway.
#[derive(Debug)]
pub(super) enum Touched {
    /// Every main-flow node: a new or restored run, a loop's reset, a retry.
    All,
    /// The targets of the edges resolved since the last planning.
    Nodes(Vec<NodeIdx>),
}

impl Touched {
    /// Notes that `idx`'s in-edges changed.
    fn touch(&mut self, idx: NodeIdx) {
        if let Self::Nodes(nodes) = self {
            nodes.push(idx);
        }
    }
}

impl RunMachine {
    // ----- waves -------------------------------------------------------

    /// Computes the next wave and starts it, or ends the run.
    pub(super) fn advance(&mut self, fx: &mut Vec<Effect>) {
        let ready = self.ready_nodes(fx);
        if ready.is_empty() {
            self.run.wave = None;
            self.finish(RunStatus::Completed, None, fx);
            return;
        }
        if self.run.steps >= self.graph().settings.max_steps {
            self.run.failed_wave = ready;
            let error = RunError::StepLimitExceeded {
                max_steps: self.graph().settings.max_steps,
            };
            self.finish(RunStatus::Failed, Some(error), fx);
            return;
        }
        self.run.steps += 1;
        let s0 = self.run.state.clone();
        fx.push(Effect::Emit(RunEvent::WaveStarted {
            step: self.run.steps,
            nodes: ready
                .iter()
                .map(|&i| self.graph().node(i).id.clone())
                .collect(),
        }));
        self.run.wave = Some(Wave::new(self.run.steps, s0.clone(), ready.clone()));
        for idx in ready {
            self.run.forced.remove(&idx);
            self.run.nodes[idx] = NodeStatus::Running;
            if self.run.status.is_terminal() {
                break;
            }
            self.start_member(idx, &s0, fx);
        }
        if !self.run.status.is_terminal() {
            self.maybe_finish_wave(fx);
        }
    }

    pub(super) fn start_member(&mut self, idx: NodeIdx, s0: &State, fx: &mut Vec<Effect>) {
        let node = self.graph().node(idx);
        if node.is_worker_task() {
            self.launch(
                idx,
                1,
                None,
                TaskState::whole(s0.clone()),
                empty_state(),
                fx,
            );
            return;
        }
        match &node.kind {
            NodeKind::Approval { prompt, .. } | NodeKind::Input { prompt, .. } => {
                // Rendered once, here: a waiting run is asked for its
                // prompt often, and its state may be large.
                let context = TemplateContext {
                    state: Some(s0),
                    ..Default::default()
                };
                let prompt = match prompt
                    .as_ref()
                    .map(|p| p.render(&context, Strictness::Strict, &self.run.meter))
                {
                    None => format!("{}?", node.id),
                    Some(Ok(text)) => text,
                    Some(Err(error)) => {
                        let failure = TaskFailure::found_by_coordinator(
                            expr_failure(&error, FailureKind::TemplateError),
                            error.to_string(),
                        );
                        self.member_failed(idx, 1, failure, fx);
                        return;
                    }
                };
                self.set_member(idx, Member::Waiting { prompt });
            }
            NodeKind::End(_) => self.end_reached(idx, s0, fx),
            NodeKind::Subgraph(_) => self.start_child(idx, s0, fx),
            NodeKind::Map(_) | NodeKind::Loop(_) => {
                let started = if matches!(node.kind, NodeKind::Map(_)) {
                    MapRun::start(&self.plan, idx, s0, &self.run.meter)
                } else {
                    MapRun::start_loop(&self.plan, idx, s0)
                };
                match started {
                    Ok(map) => {
                        self.set_member(idx, Member::Mapping(Box::new(map)));
                        self.pump_items(idx, fx);
                    }
                    Err(error) => {
                        let kind = match &error {
                            MapStartError::Over(error) => {
                                expr_failure(error, FailureKind::MapError)
                            }
                            _ => FailureKind::MapError,
                        };
                        let failure = TaskFailure::found_by_coordinator(kind, error.to_string());
                        self.member_failed(idx, 1, failure, fx);
                    }
                }
            }
            other => {
                let message = format!("kind '{}' cannot run in this version of Weft", other.name());
                let failure = TaskFailure::found_by_coordinator(FailureKind::Unsupported, message);
                self.member_failed(idx, 1, failure, fx);
            }
        }
    }

    /// Ready nodes, in declaration order; skips propagate on the way.
    pub(super) fn ready_nodes(&mut self, fx: &mut Vec<Effect>) -> Vec<NodeIdx> {
        let mut ready: BTreeSet<NodeIdx> = self.run.forced.iter().copied().collect();
        let plan = self.plan.clone();
        let order = plan.main_order();
        // The nodes to look at, by their place in the forward order: a
        // node skipped here resolves its out-edges, so their targets
        // (later in the order) are looked at in this same pass.
        let mut places: BTreeSet<usize> =
            match std::mem::replace(&mut self.touched, Touched::Nodes(Vec::new())) {
                Touched::All => (0..order.len()).collect(),
                Touched::Nodes(nodes) => nodes
                    .into_iter()
                    .filter_map(|idx| plan.order_position(idx))
                    .collect(),
            };
        while let Some(place) = places.pop_first() {
            let idx = order[place];
            if self.run.nodes[idx] != NodeStatus::Pending || ready.contains(&idx) {
                continue;
            }
            let graph = plan.graph();
            // Read in place: every pending node is looked at in every
            // wave, so a list of its edges' statuses would be an
            // allocation per pending node per wave (a third of a long
            // chain's allocations).
            let (mut forward, mut taken) = (false, false);
            let mut unresolved = false;
            for &e in graph.in_edges(idx) {
                if !graph.edges[e].is_forward() {
                    continue;
                }
                forward = true;
                match self.run.edges[e] {
                    EdgeStatus::Unresolved => unresolved = true,
                    EdgeStatus::Taken => taken = true,
                    EdgeStatus::NotTaken => {}
                }
            }
            if !forward || unresolved {
                continue;
            }
            if taken {
                ready.insert(idx);
            } else {
                self.run.nodes[idx] = NodeStatus::Skipped;
                for &e in graph.out_edges(idx) {
                    if graph.edges[e].is_forward() {
                        self.run.edges[e] = EdgeStatus::NotTaken;
                        let target = graph.edges[e].to.node();
                        places.extend(target.and_then(|to| plan.order_position(to)));
                    }
                }
                fx.push(Effect::Emit(RunEvent::NodeSkipped {
                    node: graph.node(idx).id.clone().into(),
                }));
            }
        }
        ready.into_iter().collect()
    }

    /// Merges once every member has finished; reports a pause when only
    /// human input is missing.
    pub(super) fn maybe_finish_wave(&mut self, fx: &mut Vec<Effect>) {
        let Some(wave) = self.run.wave.as_mut() else {
            return;
        };
        if !matches!(wave.phase, Phase::Running) {
            return;
        }
        // Only people can move a wave whose members left wait for them,
        // here or in child runs.
        let held = if wave.settled() {
            wave.has_waiting()
        } else {
            wave.held_by_children()
        };
        if !held {
            if wave.settled() {
                self.merge(fx);
            }
            return;
        }
        let fresh = wave.announce_waiting();
        let fresh_children = wave.announce_child_waits();
        let paused = self.run.status != RunStatus::Waiting;
        self.run.status = RunStatus::Waiting;
        for (idx, prompt) in &fresh {
            let node = self.graph().node(*idx);
            fx.push(Effect::Emit(RunEvent::WaitingForInput {
                node: node.id.clone().into(),
                kind: node.kind.name().to_owned(),
                prompt: prompt.clone(),
            }));
        }
        for wait in &fresh_children {
            fx.push(Effect::Emit(RunEvent::WaitingForInput {
                node: wait.path.clone().into(),
                kind: wait.kind.clone(),
                prompt: wait.prompt.clone(),
            }));
        }
        if paused || !fresh.is_empty() || !fresh_children.is_empty() {
            fx.push(Effect::Checkpoint);
        }
    }

    pub(super) fn merge(&mut self, fx: &mut Vec<Effect>) {
        let Some(wave) = self.run.wave.as_ref() else {
            return;
        };
        let graph = self.plan.graph();
        let changes: Vec<(&str, &Map<String, Value>)> = wave
            .iter()
            .filter_map(|(idx, slot)| match slot {
                Member::Succeeded { changes, .. } => Some((graph.node(idx).id.as_str(), changes)),
                _ => None,
            })
            .collect();
        let outcome = match merge_wave(graph, wave.s0(), &changes) {
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
        let s0 = wave.s0();
        let added = outcome
            .changed
            .iter()
            .filter(|f| !s0.contains_key(*f))
            .count();
        let limit = self.plan.limits().max_state_fields;
        if s0.len() + added > limit {
            let fields = s0.len() + added;
            self.fail_wave(RunError::StateTooLarge { fields, limit }, fx);
            return;
        }
        if outcome.hosted.is_empty() {
            self.route(outcome.overlay, outcome.changed, None, HashMap::new(), fx);
            return;
        }
        let mut pending = HashMap::new();
        for reduction in &outcome.hosted {
            let call = self.run.next_call;
            self.run.next_call += 1;
            pending.insert(call, reduction.field.clone());
            fx.push(Effect::CallReducer {
                call,
                code: self.plan.hosted_reducer(reduction),
                field: reduction.field.clone(),
                s0_value: reduction.s0_value.clone(),
                branch_values: reduction.branch_values.clone(),
            });
        }
        if let Some(wave) = self.run.wave.as_mut() {
            wave.phase = Phase::Merging { outcome, pending };
        }
    }

    pub(super) fn call_returned(
        &mut self,
        call: CallKey,
        result: Result<Value, CallError>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(wave) = self.run.wave.as_mut() else {
            return;
        };
        // A loop's `until`, asked while its wave runs.
        if let Some(looping) = wave.loop_awaiting(call) {
            let mut events = Vec::new();
            if let Some(Member::Mapping(run)) = wave.member_mut(looping) {
                run.until_answered(result, &mut events);
            }
            fx.extend(events.into_iter().map(Effect::Emit));
            self.pump_items(looping, fx);
            self.pump(fx);
            self.maybe_finish_wave(fx);
            return;
        }
        match &mut wave.phase {
            Phase::Merging { outcome, pending } => {
                let Some(field) = pending.remove(&call) else {
                    return;
                };
                match result {
                    Ok(value) => {
                        outcome.overlay.insert(field, value);
                    }
                    Err(CallError(message)) => {
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
                    self.route(outcome.overlay, outcome.changed, None, HashMap::new(), fx);
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
                        let error = self.routing_error(node, FailureKind::RoutingError, message);
                        self.routing_failed(node, error, fx);
                        return;
                    }
                }
                if pending.is_empty() {
                    let Phase::Routing {
                        overlay,
                        view,
                        changed,
                        answers,
                        ..
                    } = std::mem::replace(&mut wave.phase, Phase::Running)
                    else {
                        return;
                    };
                    self.route(overlay, changed, Some(view), answers, fx);
                }
            }
            Phase::Running => {}
        }
    }

    pub(super) fn routing_error(
        &self,
        node: NodeIdx,
        kind: FailureKind,
        message: impl ToString,
    ) -> RunError {
        RunError::ExecutionError {
            node: self.graph().node(node).id.clone(),
            attempt: 1,
            worker: None,
            kind,
            message: message.to_string(),
        }
    }

    /// Resolves every member's outgoing edges on the merged state, commits
    /// the merge, and moves on: decide, then commit, then apply.
    ///
    /// `overlay` holds the merged values of the changed fields. The merged
    /// state itself (`view`) is built only when a condition or router must
    /// read it, so a chain of plain edges never copies the state.
    pub(super) fn route(
        &mut self,
        overlay: Map<String, Value>,
        changed: Vec<String>,
        view: Option<State>,
        answers: HashMap<Query, Value>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(wave) = self.run.wave.as_ref() else {
            return;
        };
        let view = view.or_else(|| self.merged_view_if_read(wave, &overlay));
        let decisions = match self.decide_routes(wave, view.as_deref(), &answers) {
            Routes::Decided(decisions) => decisions,
            Routes::Failed(idx, error) => return self.routing_failed(idx, error, fx),
            Routes::NeedCalls(queries) => {
                let view = view.expect("hosted conditions read the merged state");
                return self.ask_hosted(queries, overlay, view, changed, answers, fx);
            }
        };
        let wave = self.commit(overlay, changed, view, fx);
        self.apply_routes(&wave, decisions, fx);
    }

    /// The merged state, when some member's routing reads it.
    fn merged_view_if_read(&self, wave: &Wave, overlay: &Map<String, Value>) -> Option<State> {
        let reads_state = wave.iter().any(|(idx, slot)| {
            matches!(slot, Member::Succeeded { next: None, .. }) && self.plan.routes_on_state(idx)
        });
        reads_state.then(|| {
            let mut merged = (**wave.s0()).clone();
            merged.extend(overlay.clone());
            Arc::new(merged)
        })
    }

    /// Decides every member's routing; nothing changes yet.
    fn decide_routes(
        &self,
        wave: &Wave,
        view: Option<&Map<String, Value>>,
        answers: &HashMap<Query, Value>,
    ) -> Routes {
        let empty = Map::new();
        let merged = view.unwrap_or(&empty);
        let mut decisions = Vec::with_capacity(wave.members().len());
        let mut missing: Vec<Query> = Vec::new();
        for (idx, slot) in wave.iter() {
            let (next, fell_back) = match slot {
                Member::Succeeded { next, .. } => (next.as_deref(), false),
                _ => (None, true),
            };
            let reading = Reading {
                state: merged,
                scope: &empty,
                answers,
                meter: &self.run.meter,
            };
            match decide(&self.plan, idx, next, fell_back, &reading) {
                Ok(Decision::NeedsCalls(queries)) => missing.extend(queries),
                Ok(decision) => decisions.push((idx, decision)),
                Err(error) => {
                    let kind = error.failure_kind();
                    return Routes::Failed(idx, self.routing_error(idx, kind, error));
                }
            }
        }
        if missing.is_empty() {
            Routes::Decided(decisions)
        } else {
            Routes::NeedCalls(missing)
        }
    }

    /// Asks workers for hosted predicates and routers; routing resumes when
    /// they have all answered ([`RunMachine::call_returned`]).
    fn ask_hosted(
        &mut self,
        queries: Vec<Query>,
        overlay: Map<String, Value>,
        view: State,
        changed: Vec<String>,
        answers: HashMap<Query, Value>,
        fx: &mut Vec<Effect>,
    ) {
        let mut pending = HashMap::new();
        for query in queries {
            let call = self.run.next_call;
            self.run.next_call += 1;
            pending.insert(call, query);
            fx.push(Effect::CallPredicate {
                call,
                code: self.plan.query_function(query),
                state: view.clone(),
            });
        }
        if let Some(wave) = self.run.wave.as_mut() {
            wave.phase = Phase::Routing {
                overlay,
                view,
                changed,
                pending,
                answers,
            };
        }
    }

    /// A member's routing failed: the node failed. With a `fallback` it
    /// counts as done with no writes, so the wave merges again without it
    /// and routes again; without one the wave fails.
    fn routing_failed(&mut self, idx: NodeIdx, error: RunError, fx: &mut Vec<Effect>) {
        if self.plan.fallback_of(idx).is_none() {
            return self.fail_wave(error, fx);
        }
        if let Some(wave) = self.run.wave.as_mut() {
            wave.phase = Phase::Running;
        }
        self.member_failed_with(idx, error, fx);
        self.merge(fx);
    }

    /// The wave's writes become the state; returns the finished wave.
    fn commit(
        &mut self,
        overlay: Map<String, Value>,
        changed: Vec<String>,
        view: Option<State>,
        fx: &mut Vec<Effect>,
    ) -> Wave {
        let mut wave = self.run.wave.take().expect("routing runs inside a wave");
        if !changed.is_empty() {
            // The actor adds the values, as it serializes them anyway.
            fx.push(Effect::Emit(RunEvent::StateChanged {
                step: wave.step(),
                fields: changed,
                values: Default::default(),
                folded: Default::default(),
            }));
        }
        // The wave's hold on S0 goes first, so the state is updated in
        // place when nothing else holds it.
        wave.release_s0();
        // A held field written is a value from now on, or the text of the
        // step's write that is held in turn.
        if !self.held.is_empty() {
            self.held.retain(|field, _| !overlay.contains_key(field));
            self.held_from_steps
                .retain(|field| !overlay.contains_key(field));
        }
        for (field, text) in wave.take_held(&overlay) {
            self.held_from_steps.insert(field.clone());
            self.held.insert(field, text);
        }
        match view {
            Some(view) => self.run.state = view,
            None => Arc::make_mut(&mut self.run.state).extend(overlay),
        }
        fx.push(Effect::Checkpoint);
        wave
    }

    /// Takes the decided edges (or ends the run at an `end` node), resets
    /// loops, and starts the next wave.
    fn apply_routes(
        &mut self,
        wave: &Wave,
        decisions: Vec<(NodeIdx, Decision)>,
        fx: &mut Vec<Effect>,
    ) {
        let plan = self.plan.clone();
        let graph = plan.graph();
        if let Some(end) = wave
            .members()
            .iter()
            .copied()
            .find(|&i| matches!(graph.node(i).kind, NodeKind::End(_)))
        {
            return self.end_at(end, fx);
        }
        let mut heads = Vec::new();
        for (idx, decision) in decisions {
            let Decision::Resolved { taken, loops, jump } = decision else {
                continue;
            };
            for &e in graph.out_edges(idx) {
                if graph.edges[e].is_forward() {
                    self.run.edges[e] = if taken.contains(&e) {
                        EdgeStatus::Taken
                    } else {
                        EdgeStatus::NotTaken
                    };
                    if let Some(target) = graph.edges[e].to.node() {
                        self.touched.touch(target);
                    }
                }
            }
            heads.extend(loops.into_iter().map(|head| (idx, head)));
            if let Some(target) = jump {
                if self.run.nodes[target] == NodeStatus::Pending {
                    self.run.forced.insert(target);
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
    pub(super) fn reset_region(&mut self, from: NodeIdx, head: NodeIdx, fx: &mut Vec<Effect>) {
        let plan = self.plan.clone();
        let graph = plan.graph();
        let region = crate::graph::topology::forward_region(graph, head);
        for (idx, inside) in region.iter().enumerate() {
            if !inside || !plan.in_main_flow(idx) {
                continue;
            }
            self.run.nodes[idx] = NodeStatus::Pending;
            for &e in graph.out_edges(idx) {
                self.run.edges[e] = EdgeStatus::Unresolved;
            }
        }
        self.run.forced.insert(head);
        self.touched = Touched::All;
        fx.push(Effect::Emit(RunEvent::LoopReset {
            from: graph.node(from).id.clone(),
            head: graph.node(head).id.clone(),
        }));
    }
}

/// What routing a wave's members came to.
enum Routes {
    /// Every member's routing, in wave order.
    Decided(Vec<(NodeIdx, Decision)>),
    /// Worker-hosted functions must answer first.
    NeedCalls(Vec<Query>),
    /// A member's routing failed.
    Failed(NodeIdx, RunError),
}
