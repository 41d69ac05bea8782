//! Task bookkeeping of a run: creating attempts, the run-wide concurrency
//! cap, results and failures (with retries and fallbacks), and the glue
//! between a map node's items and the tasks of their chains.

use serde_json::{Map, Value};

use super::events::*;
use super::map_run::{ItemStep, MapRun, StepWrites};
use super::node_output::note_event;
use super::output::finish_output;
use super::prompts::{render_cache_key, render_concurrency, render_prompts};
use super::routing::RouteError;
use super::team_messages::seat_for;
use super::*;
use crate::graph::NodeIdx;

impl RunMachine {
    /// What a returned attempt is: its output, when it is valid JSON of
    /// at most `max_output_fields` fields, or a failed attempt (the
    /// worker's own failure, its message clipped to `max_message_bytes`).
    ///
    /// The writes of a step of `holding` (a node of the main flow, not a
    /// map item's step) keep their large strings that the coordinator
    /// never reads as their text ([`crate::held`]).
    pub(super) fn returned(
        &self,
        worker: Option<String>,
        result: Result<(String, Option<Value>), TaskFailure>,
        read: Vec<u64>,
        notes: Vec<Value>,
        holding: Option<NodeIdx>,
    ) -> Result<NodeOutput, TaskFailure> {
        let limits = self.plan.limits();
        match result {
            Ok((writes, output)) => match holding
                .and_then(|node| RunInput::read_writes(&self.plan, node, &writes))
                .map_or_else(
                    || NodeOutput::accept(&writes, limits.max_output_fields),
                    |held| NodeOutput::accept_read(held, limits.max_output_fields),
                ) {
                Ok(mut parsed) => {
                    parsed.output = output;
                    parsed.read = read;
                    parsed.notes = notes;
                    parsed.worker = worker;
                    Ok(parsed)
                }
                Err(error) => Err(TaskFailure {
                    kind: FailureKind::InvalidOutput,
                    message: error.to_string(),
                    worker,
                }),
            },
            Err(mut failure) => {
                if failure.worker.is_none() {
                    failure.worker = worker;
                }
                failure.message = limits.clip(failure.message);
                Err(failure)
            }
        }
    }

    // ----- tasks -------------------------------------------------------

    /// Creates attempt `attempt` of a task and queues it for dispatch.
    pub(super) fn launch(
        &mut self,
        node: NodeIdx,
        attempt: u32,
        item: Option<ItemRef>,
        state: TaskState,
        scope: State,
        fx: &mut Vec<Effect>,
    ) {
        let key = self.run.tasks.new_key();
        let graph_node = self.graph().node(node);
        let rendered =
            render_prompts(graph_node, &state, &scope, &self.run.meter).and_then(|prompts| {
                let concurrency = render_concurrency(graph_node, &state, &scope, &self.run.meter)?;
                let cache = if self.owner().no_cache {
                    None
                } else {
                    render_cache_key(self.graph(), graph_node, &state, &scope, &self.run.meter)?
                };
                Ok((prompts, concurrency, cache))
            });
        let (prompts, concurrency, cache) = match rendered {
            Ok(rendered) => rendered,
            Err(error) => {
                // Rendering again would fail again: no retry.
                let failure =
                    TaskFailure::found_by_coordinator(error.failure_kind(), error.to_string());
                match item {
                    Some(item) => self.item_step_done(node, item, Err(failure), fx),
                    None => self.member_failed(node, attempt, failure, fx),
                }
                return;
            }
        };
        let spec = TaskSpec {
            key,
            node: self.plan.node_id(node).clone(),
            attempt,
            item,
            state,
            scope,
            timeout: graph_node
                .timeout
                .unwrap_or(self.graph().settings.node_timeout),
            team: None,
            prompts,
            first_key: None,
            concurrency,
            cache,
        };
        let item_index = spec.item.as_ref().map(|i| i.index);
        let task = TaskRef {
            node,
            item: item_index,
            spec: Arc::new(spec),
            in_flight: false,
        };
        self.run.tasks.add(key, task, true);
        self.pump(fx);
    }

    /// Dispatches queued tasks while the run's cap allows.
    pub(super) fn pump(&mut self, fx: &mut Vec<Effect>) {
        let cap = self.plan.graph().settings.max_node_concurrency as usize;
        let plan = self.plan.clone();
        while let Some(task) = self.run.tasks.start_next(cap) {
            let seat = seat_for(&mut self.run.wave, &plan, task);
            // Not yet shared (a queued spec is the table's alone): no copy.
            Arc::make_mut(&mut task.spec).team = seat;
            fx.push(Effect::Emit(RunEvent::NodeStarted {
                node: task.spec.node.clone(),
                attempt: task.spec.attempt,
                item: task.item,
            }));
            fx.push(Effect::Dispatch(task.spec.clone()));
        }
    }

    pub(super) fn task_succeeded(
        &mut self,
        key: TaskKey,
        output: NodeOutput,
        fx: &mut Vec<Effect>,
    ) {
        // Unknown keys are late or duplicate results: ignored.
        let Some(task) = self.run.tasks.take(key) else {
            return;
        };
        let mut output = output;
        let notes = std::mem::take(&mut output.notes);
        let held = std::mem::take(&mut output.held);
        let cacheable = output.cacheable.take();
        self.emit_notes(&task.spec, notes, fx);
        if let Some(item) = task.spec.item.clone() {
            self.item_output(task, item, output, cacheable, fx);
            self.pump(fx);
            self.maybe_finish_wave(fx);
            return;
        }
        let node = task.node;
        let plan = self.plan.clone();
        let worker = output.worker.take();
        let result = {
            let empty = Map::new();
            let s0 = self.run.wave.as_ref().map_or(&empty, |w| &**w.s0());
            finish_output(
                plan.graph(),
                plan.graph().node(node),
                || fields_of(s0, plan.update_reads(node)),
                &empty,
                output,
                true,
                &self.run.meter,
            )
            .map_err(|error| (error.failure_kind(), error.to_string()))
            .and_then(|(writes, next)| {
                self.check_next(next.as_deref())
                    .map_err(|error| (FailureKind::InvalidOutput, error.to_string()))?;
                let (changes, held) = self.changes_holding(s0, writes, held);
                Ok((changes, held, next))
            })
        };
        match result {
            Ok((changes, held, next)) => {
                self.cache(&task.spec, cacheable, fx);
                // Dropping the task's state here matters: the merge updates
                // the run's state in place only when nothing else holds it.
                drop(task);
                fx.push(Effect::Emit(RunEvent::NodeFinished {
                    node: plan.node_id(node).clone(),
                    item: None,
                    worker,
                    usage: None,
                }));
                self.set_member(node, Member::Succeeded { changes, next });
                if let Some(wave) = self.run.wave.as_mut() {
                    wave.hold(node, held);
                }
            }
            // What the coordinator finds wrong with a result is a failed
            // attempt like any other: the retry policy, then the fallback.
            Err((kind, message)) => {
                let failure = TaskFailure::found_by_coordinator(kind, message);
                self.attempt_failed(task, failure, fx);
            }
        }
        self.pump(fx);
        self.maybe_finish_wave(fx);
    }

    /// Keeps an accepted output of a step with a `cache:` (SPEC 20); an
    /// output taken from the cache comes without `cacheable`.
    fn cache(
        &self,
        spec: &TaskSpec,
        cacheable: Option<crate::node_output::Cacheable>,
        fx: &mut Vec<Effect>,
    ) {
        let (Some(entry), Some(answer)) = (spec.cache.clone(), cacheable) else {
            return;
        };
        let (writes, output) = *answer;
        let graph = self.graph();
        let Some(ttl) = graph
            .node_index(&spec.node)
            .and_then(|idx| graph.node(idx).cache.as_ref())
            .map(|cache| cache.ttl)
        else {
            return;
        };
        fx.push(Effect::Cache {
            entry,
            ttl,
            node: spec.node.clone(),
            item: spec.item.as_ref().map(|item| item.index),
            writes,
            output,
        });
    }

    /// What task `key` noted as it ran (its model and tool calls), as
    /// events; its model calls' usage is added to the run's.
    pub(super) fn noted(&mut self, key: TaskKey, notes: Vec<Value>, fx: &mut Vec<Effect>) {
        if notes.is_empty() {
            return;
        }
        let Some(spec) = self.run.tasks.get(key).map(|task| task.spec.clone()) else {
            return;
        };
        self.emit_notes(&spec, notes, fx);
    }

    fn emit_notes(&mut self, spec: &TaskSpec, notes: Vec<Value>, fx: &mut Vec<Effect>) {
        let item = spec.item.as_ref().map(|i| i.index);
        for note in notes {
            let Some(event) = note_event(&spec.node, item, &note) else {
                continue;
            };
            if let RunEvent::ModelCalled {
                model,
                prompt_tokens,
                completion_tokens,
                cached_tokens,
                ..
            } = &event
            {
                let spent = self.run.usage.entry(model.clone()).or_default();
                spent.calls += 1;
                spent.prompt_tokens += prompt_tokens.unwrap_or(0);
                spent.completion_tokens += completion_tokens.unwrap_or(0);
                spent.cached_tokens += cached_tokens.unwrap_or(0);
            }
            fx.push(Effect::Emit(event));
        }
    }

    pub(super) fn task_failed(&mut self, key: TaskKey, failure: TaskFailure, fx: &mut Vec<Effect>) {
        let Some(task) = self.run.tasks.take(key) else {
            return;
        };
        self.attempt_failed(task, failure, fx);
        self.pump(fx);
        self.maybe_finish_wave(fx);
    }

    /// An attempt failed: retry it per the node's policy, or give up (the
    /// node's fallback, or the item's or wave's failure).
    fn attempt_failed(&mut self, task: TaskRef, failure: TaskFailure, fx: &mut Vec<Effect>) {
        if let Some(item) = &task.spec.item {
            self.team_step_returned(item, task.spec.key, None);
        }
        let plan = self.plan.clone();
        let node = plan.graph().node(task.node);
        // A task that kept losing its workers is a poison pill: its retry
        // would only send it to kill another (SPEC 11). An expression too
        // costly on this state would be as costly again.
        let retried = !matches!(
            failure.kind,
            FailureKind::WorkerLost
                | FailureKind::ExpressionTooCostly
                | FailureKind::BudgetExceeded
        );
        if retried && task.spec.attempt < node.retry.max_attempts {
            let next_attempt = task.spec.attempt + 1;
            let delay = node.retry.delay_before(next_attempt);
            fx.push(Effect::Emit(RunEvent::NodeRetrying {
                node: node.id.clone().into(),
                next_attempt,
                delay_ms: delay.as_millis() as u64,
                error: failure.message.clone(),
            }));
            let key = self.run.tasks.new_key();
            let mut spec = Arc::unwrap_or_clone(task.spec);
            spec.first_key = Some(spec.first_key.unwrap_or(spec.key));
            spec.key = key;
            spec.attempt = next_attempt;
            spec.team = None;
            let retry = TaskRef {
                spec: Arc::new(spec),
                in_flight: false,
                ..task
            };
            // Parked until its timer fires (`Input::RetryDue`).
            self.run.tasks.add(key, retry, false);
            fx.push(Effect::ScheduleRetry { key, delay });
        } else if failure.kind == FailureKind::BudgetExceeded {
            let TaskRef { node, spec, .. } = task;
            let (attempt, item) = Arc::unwrap_or_clone(spec).release();
            self.spent(node, attempt, item.map(|item| item.index), failure, fx);
        } else {
            let TaskRef { node, spec, .. } = task;
            let (attempt, item) = Arc::unwrap_or_clone(spec).release();
            match item {
                Some(item) => self.item_step_done(node, item, Err(failure), fx),
                None => self.member_failed(node, attempt, failure, fx),
            }
        }
    }

    /// Checks a main-flow `_next` target: it must name a main-flow node.
    pub(super) fn check_next(&self, next: Option<&str>) -> Result<(), RouteError> {
        let Some(id) = next else { return Ok(()) };
        if id == crate::graph::END {
            return Ok(());
        }
        match self.graph().node_index(id) {
            None => Err(RouteError::UnknownNext(id.to_owned())),
            Some(idx) if !self.plan.in_main_flow(idx) => {
                Err(RouteError::NextIntoBranch(id.to_owned()))
            }
            Some(_) => Ok(()),
        }
    }

    // ----- wave members ------------------------------------------------

    /// The current wave's S0 (empty between waves).
    pub(super) fn wave_s0(&self) -> State {
        self.run
            .wave
            .as_ref()
            .map(|w| w.s0().clone())
            .unwrap_or_default()
    }

    pub(super) fn member_mut(&mut self, node: NodeIdx) -> Option<&mut Member> {
        let wave = self.run.wave.as_mut()?;
        wave.member_mut(node)
    }

    pub(super) fn set_member(&mut self, node: NodeIdx, member: Member) {
        self.run.nodes[node] = match member {
            Member::Waiting { .. } => NodeStatus::Waiting,
            Member::Running | Member::Mapping(_) | Member::Child { .. } => NodeStatus::Running,
            Member::Succeeded { .. } | Member::FellBack => NodeStatus::Done,
        };
        if let Some(slot) = self.member_mut(node) {
            *slot = member;
        }
    }

    /// Step `node` (of item `item`) would have crossed the run's budget:
    /// the run may spend no more, so it fails whatever the node's
    /// fallback, and no other item goes on.
    pub(super) fn spent(
        &mut self,
        node: NodeIdx,
        attempt: u32,
        item: Option<usize>,
        failure: TaskFailure,
        fx: &mut Vec<Effect>,
    ) {
        let error = self.execution_error(node, attempt, failure);
        fx.push(Effect::Emit(RunEvent::NodeFailed {
            node: self.graph().node(node).id.clone().into(),
            item,
            error: error.to_string(),
            fallback: None,
        }));
        self.run.nodes[node] = NodeStatus::Failed;
        self.fail_wave(error, fx);
    }

    fn execution_error(&self, node: NodeIdx, attempt: u32, failure: TaskFailure) -> RunError {
        RunError::ExecutionError {
            node: self.graph().node(node).id.clone(),
            attempt,
            worker: failure.worker,
            kind: failure.kind,
            message: failure.message,
        }
    }

    /// A member failed for good: take its fallback, or fail the wave.
    pub(super) fn member_failed(
        &mut self,
        node: NodeIdx,
        attempt: u32,
        failure: TaskFailure,
        fx: &mut Vec<Effect>,
    ) {
        let error = self.execution_error(node, attempt, failure);
        self.member_failed_with(node, error, fx);
    }

    pub(super) fn member_failed_with(
        &mut self,
        node: NodeIdx,
        error: RunError,
        fx: &mut Vec<Effect>,
    ) {
        let fallback = self.plan.fallback_of(node);
        let id = self.graph().node(node).id.clone();
        fx.push(Effect::Emit(RunEvent::NodeFailed {
            node: id.into(),
            item: None,
            error: error.to_string(),
            fallback: fallback.map(|f| self.graph().target_name(f)),
        }));
        if fallback.is_some() {
            self.set_member(node, Member::FellBack);
        } else {
            self.run.nodes[node] = NodeStatus::Failed;
            self.fail_wave(error, fx);
        }
    }

    /// Ends the run as failed; the wave's writes are dropped.
    pub(super) fn fail_wave(&mut self, error: RunError, fx: &mut Vec<Effect>) {
        if let Some(wave) = self.drop_wave(fx) {
            self.run.failed_wave = wave.into_members();
        }
        self.cancel_all(fx);
        self.finish(RunStatus::Failed, Some(error), fx);
    }

    /// Ends the current wave, cancelling the child runs it started.
    pub(super) fn drop_wave(&mut self, fx: &mut Vec<Effect>) -> Option<Wave> {
        let wave = self.run.wave.take()?;
        let children = wave.children();
        if !children.is_empty() {
            fx.push(Effect::CancelChildren(children));
        }
        Some(wave)
    }

    pub(super) fn cancel_all(&mut self, fx: &mut Vec<Effect>) {
        let keys = self.run.tasks.clear();
        if !keys.is_empty() {
            fx.push(Effect::CancelTasks(keys));
        }
    }

    // ----- map items ---------------------------------------------------

    pub(super) fn map_mut(&mut self, map: NodeIdx) -> Option<&mut MapRun> {
        match self.member_mut(map)? {
            Member::Mapping(run) => Some(run),
            _ => None,
        }
    }

    /// Starts items while the map has free slots.
    pub(super) fn pump_items(&mut self, map: NodeIdx, fx: &mut Vec<Effect>) {
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
                ItemStep::Judge { judge, iteration } => {
                    let call = self.run.next_call;
                    self.run.next_call += 1;
                    if let Some(run) = self.map_mut(map) {
                        run.note_call(call);
                    }
                    fx.push(Effect::CallUntil {
                        call,
                        judge,
                        iteration,
                    });
                }
                ItemStep::Idle => return,
                ItemStep::Finished(changes) => {
                    self.container_finished(map, changes, fx);
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

    /// A node whose output the coordinator makes has finished — a map (its
    /// collected list), a loop (its body's writes), a subgraph (its child's
    /// mapped state): the writes go through like any node's,
    /// `state_updates` (which see a map's list under `collect_into` and as
    /// `output`), `output_schema`, declared types and strict state.
    pub(super) fn container_finished(
        &mut self,
        map: NodeIdx,
        collected: Map<String, Value>,
        fx: &mut Vec<Effect>,
    ) {
        let plan = self.plan.clone();
        let graph = plan.graph();
        let node = graph.node(map);
        let s0 = self.wave_s0();
        // A map's output is its collected list; a loop's, its `output_key`.
        let output = match &node.kind {
            crate::graph::NodeKind::Loop(config) => collected.get(&config.output_key).cloned(),
            crate::graph::NodeKind::Subgraph(_) => Some(Value::Object(collected.clone())),
            _ => collected.values().next().cloned(),
        };
        let output = NodeOutput {
            output,
            writes: collected,
            ..NodeOutput::default()
        };
        let writes = match finish_output(
            graph,
            node,
            || fields_of(&s0, plan.update_reads(map)),
            &Map::new(),
            output,
            true,
            &self.run.meter,
        ) {
            Ok((writes, _)) => writes,
            Err(error) => {
                let failure =
                    TaskFailure::found_by_coordinator(error.failure_kind(), error.to_string());
                self.member_failed(map, 1, failure, fx);
                return;
            }
        };
        fx.push(Effect::Emit(RunEvent::NodeFinished {
            node: node.id.clone().into(),
            item: None,
            worker: None,
            usage: None,
        }));
        self.set_member(
            map,
            Member::Succeeded {
                changes: self.changes(&s0, writes),
                next: None,
            },
        );
    }

    pub(super) fn cancel_map_tasks(&mut self, map: NodeIdx, fx: &mut Vec<Effect>) {
        let map_id = self.graph().node(map).id.clone();
        let keys = self.run.tasks.of_map(&map_id);
        let mut in_flight = Vec::new();
        for key in keys {
            if let Some(task) = self.run.tasks.take(key)
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

    /// A map item's step returned: checked first, so a result the
    /// coordinator refuses is a failed attempt (retried per the policy).
    fn item_output(
        &mut self,
        task: TaskRef,
        item: ItemRef,
        mut output: NodeOutput,
        cacheable: Option<crate::node_output::Cacheable>,
        fx: &mut Vec<Effect>,
    ) {
        let plan = self.plan.clone();
        let Some(map) = plan.graph().node_index(&item.map) else {
            return;
        };
        // The wave and the meter are borrowed apart.
        let Some(Member::Mapping(run)) = self.run.wave.as_mut().and_then(|w| w.member_mut(map))
        else {
            return;
        };
        let read = std::mem::take(&mut output.read);
        match run.check_step(&plan, &self.run.meter, item.index, task.node, output) {
            Ok(step) => {
                self.cache(&task.spec, cacheable, fx);
                let (node, key) = (task.node, task.spec.key);
                drop(task);
                self.team_step_returned(&item, key, Some(&read));
                self.item_step_done(node, item, Ok(step), fx);
            }
            Err(error) => {
                let failure = TaskFailure::found_by_coordinator(
                    FailureKind::InvalidOutput,
                    error.to_string(),
                );
                self.attempt_failed(task, failure, fx);
            }
        }
    }

    pub(super) fn item_step_done(
        &mut self,
        node: NodeIdx,
        item: ItemRef,
        result: Result<StepWrites, TaskFailure>,
        fx: &mut Vec<Effect>,
    ) {
        let plan = self.plan.clone();
        let Some(map) = plan.graph().node_index(&item.map) else {
            return;
        };
        let mut result = result;
        if let Ok(step) = &mut result {
            let sends = step.take_sends();
            if !sends.is_empty() {
                self.send_all(node, &item, sends, fx);
            }
        }
        let Some(Member::Mapping(run)) = self.run.wave.as_mut().and_then(|w| w.member_mut(map))
        else {
            return;
        };
        for event in run.step_done(&plan, &self.run.meter, item.index, node, result) {
            fx.push(Effect::Emit(event));
        }
        self.pump_items(map, fx);
    }
}
