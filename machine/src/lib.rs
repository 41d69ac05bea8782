//! The run state machine: `apply(input) -> effects`, with no I/O, clock or
//! channel (SPEC section 3).
//!
//! A run advances in waves. A wave starts with every ready node, gives each
//! the state as it was when the wave started (S0), waits for all of them,
//! merges their changes field by field, routes on the merged state, applies
//! loop resets, and computes the next wave. A wave is all-or-nothing: a node
//! that fails for good (without `fallback`), a conflicting write or a
//! routing error leaves the state as it was before the wave.
//!
//! This crate is the coordinator's pure core, kept apart so that the
//! compiler, not a convention, keeps it pure: it depends on the graph model
//! and the protocol's domain types, and on no async runtime, network or
//! clock. [`RunMachine::apply`] takes an [`events::Input`] and returns
//! [`events::Effect`]s; the coordinator's run actor performs them and feeds
//! back what happens. Besides the machine it holds what a run and the
//! dispatcher share ([`task`]: task keys, failures, items, teammate seats)
//! and what each node kind needs from a worker ([`binding`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use weft_graph as graph;

mod attempts;
pub mod binding;
mod end_nodes;
pub mod events;
pub mod fork;
pub mod held;
mod human;
pub mod limits;
mod map_run;
pub mod merge;
mod node_output;
mod output;
pub mod plan;
mod prompts;
mod recovery;
pub mod routing;
mod status_letters;
mod subgraphs;
pub mod task;
mod task_spec;
mod task_table;
mod team_messages;
mod wave;
mod wave_cycle;
mod who;

#[cfg(test)]
mod tests;

use self::events::*;
pub use self::held::RunInput;
pub use self::limits::RunLimits;
use self::output::initial_state;
pub use self::plan::RunPlan;
pub use self::routing::Query;
use self::task_table::{TaskRef, TaskTable};
use self::wave::{Member, Phase, Wave};
pub use self::who::{Answered, Caller, DEFAULT_NAMESPACE, Owner};
use crate::graph::{Condition, Graph, Guard, Meter, NodeIdx};

/// Where a node stands in the current iteration of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum EdgeStatus {
    Unresolved,
    Taken,
    NotTaken,
}

/// One run's semantics, driven by inputs: the graph's [`RunPlan`] and the
/// run's [`Progress`].
#[derive(Debug)]
pub struct RunMachine {
    plan: Arc<RunPlan>,
    run: Progress,
    /// The length of the last progress serialized: the next one is
    /// written into that much room (and a little more), not grown into.
    progress_room: usize,
    /// The fields held as their JSON text ([`held`]), whose value in the
    /// state is a placeholder: kept apart from the progress, since a
    /// checkpoint stores every field's text and a restored run parses them.
    held: BTreeMap<String, Arc<str>>,
    /// Those of `held` that a step wrote (the others are as the input
    /// gave them).
    held_from_steps: BTreeSet<String>,
    /// Bytes of steps' writes held as their text since the actor last
    /// took the count (for its metric).
    held_write_bytes: u64,
    /// The pending nodes the next wave's planning looks at: those whose
    /// edges or status changed since the last (a long chain's wave looks
    /// at one node, not all). Not stored: a restored run looks at all.
    touched: wave_cycle::Touched,
}

/// Everything a run has done so far, without its graph: what a checkpoint
/// stores. Serialize it with serde; [`RunMachine::restore`] continues a run
/// from it. The committed state is stored once: the wave's S0 and every
/// task's view of it are relinked to it on restore.
#[derive(Debug, Serialize, Deserialize)]
pub struct Progress {
    /// Left out while the machine writes its progress: a checkpoint stores
    /// the state apart.
    #[serde(default, skip_serializing_if = "task_spec::is_empty")]
    state: State,
    status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<RunError>,
    steps: u32,
    #[serde(with = "status_letters")]
    nodes: Vec<NodeStatus>,
    #[serde(with = "status_letters")]
    edges: Vec<EdgeStatus>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    forced: BTreeSet<NodeIdx>,
    wave: Option<Wave>,
    tasks: TaskTable,
    next_call: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    failed_wave: Vec<NodeIdx>,
    /// The span a child run's trace hangs under (its parent's subgraph
    /// node, W3C `traceparent`); `None` for a run of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace_parent: Option<String>,
    /// For a subgraph node's child run, the parent run (runs stored before
    /// it was kept lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<RunId>,
    /// The run's namespace and submitter.
    #[serde(default)]
    owner: Owner,
    /// Who answered each human node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    answers: Vec<Answered>,
    /// What the run's evaluations have spent of its allowance.
    #[serde(default)]
    meter: Meter,
    /// What its steps' model calls used, by model (their costs are the
    /// coordinator's to price).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    usage: BTreeMap<String, weft_proto::types::Usage>,
    /// For a fork, the run and wave it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forked_from: Option<weft_proto::events::ForkedFrom>,
}

impl Progress {
    /// Puts back the state a checkpoint stores apart from the progress.
    pub fn set_state(&mut self, state: Map<String, Value>) {
        self.state = Arc::new(state);
    }

    /// For a child run, its parent run.
    pub fn parent(&self) -> Option<&RunId> {
        self.parent.as_ref()
    }

    /// The child runs its wave's subgraph nodes had started and not seen
    /// end.
    pub fn children(&self) -> Vec<RunId> {
        self.wave.as_ref().map(Wave::children).unwrap_or_default()
    }
}

/// Every edge's first status: START edges resolve on the input state (a
/// `when` on one is evaluated there), all others wait for their source.
fn start_edges(
    graph: &Graph,
    state: &Map<String, Value>,
    meter: &Meter,
) -> Result<Vec<EdgeStatus>, RunError> {
    let empty = Map::new();
    graph
        .edges
        .iter()
        .map(|edge| {
            if edge.from != crate::graph::Endpoint::Start {
                return Ok(EdgeStatus::Unresolved);
            }
            let taken = match &edge.guard {
                Guard::When(Condition::Inline(expr) | Condition::Named(_, expr)) => expr
                    .is_true(state, &empty, meter)
                    .map_err(|error| RunError::InvalidInput {
                        message: format!(
                            "the condition on START → {} cannot be evaluated on the input: {error}",
                            graph.target_name(edge.to)
                        ),
                    })?,
                // Validation refuses `fn:` conditions on START edges.
                _ => true,
            };
            Ok(if taken {
                EdgeStatus::Taken
            } else {
                EdgeStatus::NotTaken
            })
        })
        .collect()
}

/// A [`Progress`] that does not fit the graph it was restored with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the stored run does not fit its graph: {0}")]
pub struct ProgressMismatch(String);

impl RunMachine {
    /// Creates a run over `plan` with the caller's input; nothing runs until
    /// [`RunMachine::start`]. Fails when the input does not fit the declared state.
    pub fn new(plan: Arc<RunPlan>, input: Map<String, Value>) -> Result<Self, RunError> {
        let graph = plan.graph();
        let state = initial_state(graph, input).map_err(|error| RunError::InvalidInput {
            message: error.to_string(),
        })?;
        let limit = plan.limits().max_state_fields;
        if state.len() > limit {
            return Err(RunError::InvalidInput {
                message: format!(
                    "the input makes a state of {} fields; a run's state holds at most {limit} (configuration key max_state_fields)",
                    state.len()
                ),
            });
        }
        let meter = Meter::new(plan.limits().max_run_eval);
        let edges = start_edges(graph, &state, &meter)?;
        // A start node runs first unless every START edge into it was not
        // taken (its `when` was false on the input).
        let forced = graph
            .edges
            .iter()
            .zip(&edges)
            .filter(|(edge, status)| {
                edge.from == crate::graph::Endpoint::Start && **status == EdgeStatus::Taken
            })
            .filter_map(|(edge, _)| edge.to.node())
            .collect();
        let run = Progress {
            state: Arc::new(state),
            status: RunStatus::Running,
            error: None,
            steps: 0,
            nodes: vec![NodeStatus::Pending; graph.nodes.len()],
            edges,
            forced,
            wave: None,
            tasks: TaskTable::default(),
            next_call: 1,
            failed_wave: Vec::new(),
            trace_parent: None,
            parent: None,
            owner: Owner::default(),
            answers: Vec::new(),
            meter,
            usage: BTreeMap::new(),
            forked_from: None,
        };
        Ok(Self {
            plan,
            run,
            progress_room: 0,
            held: BTreeMap::new(),
            held_from_steps: BTreeSet::new(),
            held_write_bytes: 0,
            touched: wave_cycle::Touched::All,
        })
    }

    /// As [`RunMachine::new`], from an input whose large strings are held
    /// as their text ([`RunInput::read`]).
    pub fn with_input(plan: Arc<RunPlan>, input: RunInput) -> Result<Self, RunError> {
        let mut machine = Self::new(plan, input.values)?;
        machine.held = input.held;
        Ok(machine)
    }

    /// The JSON text of field `name` when the run holds it unparsed (its
    /// value in [`RunMachine::state`] is then a placeholder).
    pub fn held_text(&self, name: &str) -> Option<&Arc<str>> {
        self.held.get(name)
    }

    /// Every field held unparsed, with its JSON text.
    pub fn held(&self) -> impl Iterator<Item = (&String, &Arc<str>)> {
        self.held.iter()
    }

    /// The bytes of steps' writes held as their text ([`held`]) since the
    /// last call.
    pub fn take_held_write_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.held_write_bytes)
    }

    /// The fields that were held as the run's input gave them and that no
    /// step has written since: a client that kept its input need not be
    /// sent them back.
    pub fn held_as_input(&self) -> impl Iterator<Item = &String> {
        self.held
            .keys()
            .filter(|name| !self.held_from_steps.contains(*name))
    }

    /// The fields of a step's `writes` that change the committed state
    /// `s0`: a held field's value is its text's, not the placeholder.
    fn changes(&self, s0: &Map<String, Value>, writes: Map<String, Value>) -> Map<String, Value> {
        merge::changed_fields_held(s0, writes, &self.held)
    }

    /// As [`RunMachine::changes`], for writes of which `held` are held as
    /// their text: the changes, and the held texts of those that change
    /// their field ([`held::changes_field`]).
    fn changes_holding(
        &self,
        s0: &Map<String, Value>,
        mut writes: Map<String, Value>,
        mut held: BTreeMap<String, Arc<str>>,
    ) -> (Map<String, Value>, BTreeMap<String, Arc<str>>) {
        if held.is_empty() {
            return (self.changes(s0, writes), held);
        }
        // The order the step wrote its fields in, which the changes keep.
        let order: Vec<String> = writes.keys().cloned().collect();
        let mut placeholders = Vec::with_capacity(held.len());
        held.retain(|name, text| {
            let placeholder = writes.remove(name);
            let changes = held::changes_field(text, s0.get(name), self.held.get(name));
            if let (Some(placeholder), true) = (placeholder, changes) {
                placeholders.push((name.clone(), placeholder));
                return true;
            }
            false
        });
        let mut changes = self.changes(s0, writes);
        changes.extend(placeholders);
        let in_order = order
            .into_iter()
            .filter_map(|name| changes.remove(&name).map(|value| (name, value)))
            .collect();
        (in_order, held)
    }

    /// The progress as JSON without the state, which checkpoints store
    /// field by field.
    pub fn progress_json_without_state(&mut self) -> serde_json::Result<String> {
        let state = std::mem::take(&mut self.run.state);
        let run = &mut self.run;
        let lent = match &run.wave {
            Some(wave) => run
                .tasks
                .lend_item_overlays(|item| wave.item_writes(&item.map, item.index)),
            None => Vec::new(),
        };
        let mut json = Vec::with_capacity(self.progress_room + self.progress_room / 8 + 128);
        let written = serde_json::to_writer(&mut json, &self.run);
        self.run.tasks.put_back(lent);
        self.run.state = state;
        written?;
        self.progress_room = json.len();
        // serde_json writes only valid UTF-8 (its strings come from `str`s).
        Ok(String::from_utf8(json).expect("serde_json writes UTF-8"))
    }

    /// What the run has done so far, to store.
    pub fn progress(&self) -> &Progress {
        &self.run
    }

    /// Continues a stored run over the same graph's plan.
    pub fn restore(plan: Arc<RunPlan>, mut run: Progress) -> Result<Self, ProgressMismatch> {
        let graph = plan.graph();
        let fits = |what: &str, stored: usize, graph: usize| {
            if stored == graph {
                Ok(())
            } else {
                Err(ProgressMismatch(format!(
                    "{stored} {what} stored, the graph has {graph}"
                )))
            }
        };
        fits("nodes", run.nodes.len(), graph.nodes.len())?;
        fits("edges", run.edges.len(), graph.edges.len())?;
        let out_of_range = run
            .forced
            .iter()
            .chain(&run.failed_wave)
            .chain(run.wave.iter().flat_map(|w| w.members()))
            .any(|&idx| idx >= graph.nodes.len());
        if out_of_range {
            return Err(ProgressMismatch(
                "a stored node index is out of range".into(),
            ));
        }
        if let Some(wave) = &mut run.wave {
            wave.relink(&run.state);
            run.tasks.relink(&run.state);
        }
        let wave = run.wave.as_ref();
        run.tasks
            .relay_item_overlays(|item| wave?.item_writes(&item.map, item.index))
            .map_err(|key| {
                ProgressMismatch(format!(
                    "task {} is a step of a map item the run does not hold",
                    key.0
                ))
            })?;
        run.meter.set_limit(plan.limits().max_run_eval);
        Ok(Self {
            plan,
            run,
            progress_room: 0,
            held: BTreeMap::new(),
            held_from_steps: BTreeSet::new(),
            held_write_bytes: 0,
            touched: wave_cycle::Touched::All,
        })
    }

    /// Sets where the run's heavy evaluations run (see [`Meter`]).
    pub fn set_heavy_runner(&mut self, runner: crate::graph::HeavyRunner) {
        self.run.meter.set_heavy_runner(runner);
    }

    /// Records who submitted the run, then starts the first wave.
    pub fn start(&mut self) -> Vec<Effect> {
        let owner = &self.run.owner;
        let mut fx = vec![Effect::Emit(RunEvent::RunSubmitted {
            by: owner.submitted_by.clone(),
            namespace: owner.namespace.clone(),
            forked_from: None,
        })];
        self.advance(&mut fx);
        fx
    }

    /// Puts the run's trace under `traceparent` (a child run's, under its
    /// parent's subgraph node); kept with the run.
    pub fn set_trace_parent(&mut self, traceparent: Option<String>) {
        self.run.trace_parent = traceparent.filter(|t| !t.is_empty());
    }

    /// The span the run's trace hangs under, if any.
    pub fn trace_parent(&self) -> Option<&str> {
        self.run.trace_parent.as_deref()
    }

    /// Makes the run the child of run `parent` (a subgraph node's).
    pub fn set_parent(&mut self, parent: Option<RunId>) {
        self.run.parent = parent;
    }

    /// The state as of the last merge.
    pub fn state(&self) -> &State {
        &self.run.state
    }

    /// The run's status.
    pub fn status(&self) -> RunStatus {
        self.run.status
    }

    /// Why the run failed, was cancelled or timed out.
    pub fn error(&self) -> Option<&RunError> {
        self.run.error.as_ref()
    }

    /// Waves started so far.
    pub fn steps(&self) -> u32 {
        self.run.steps
    }

    /// Waves merged so far: those started, less one still running.
    pub fn waves_merged(&self) -> u32 {
        self.run.steps - u32::from(self.run.wave.is_some())
    }

    /// A node's status.
    pub fn node_status(&self, id: &str) -> Option<NodeStatus> {
        self.graph().node_index(id).map(|idx| self.run.nodes[idx])
    }

    /// Tasks dispatched and not yet returned.
    pub fn in_flight(&self) -> usize {
        self.run.tasks.in_flight()
    }

    /// The nodes waiting for a human, with their kind and rendered prompt;
    /// a waiting child run's by their path (`bar/ask`).
    pub fn waiting(&self) -> Vec<(String, String, String)> {
        let Some(wave) = &self.run.wave else {
            return Vec::new();
        };
        let mut waiting = Vec::new();
        for (idx, slot) in wave.iter() {
            match slot {
                Member::Waiting { prompt } => {
                    let node = self.graph().node(idx);
                    waiting.push((node.id.clone(), node.kind.name().to_owned(), prompt.clone()));
                }
                Member::Child { waiting: asks, .. } => waiting.extend(
                    asks.iter()
                        .map(|w| (w.path.clone(), w.kind.clone(), w.prompt.clone())),
                ),
                _ => {}
            }
        }
        waiting
    }

    pub(crate) fn graph(&self) -> &Graph {
        self.plan.graph()
    }

    /// Applies one input and returns what the actor must do.
    pub fn apply(&mut self, input: Input) -> Result<Vec<Effect>, Rejected> {
        let mut fx = Vec::new();
        self.apply_into(input, &mut fx)?;
        Ok(fx)
    }

    /// Applies one input and adds what the actor must do to `effects`,
    /// which an actor keeps from one input to the next rather than making
    /// a list for each. A rejected input adds nothing.
    pub fn apply_into(&mut self, input: Input, effects: &mut Vec<Effect>) -> Result<(), Rejected> {
        let before = effects.len();
        let applied = self.apply_each(input, effects);
        if applied.is_err() {
            effects.truncate(before);
        }
        applied
    }

    fn apply_each(&mut self, input: Input, fx: &mut Vec<Effect>) -> Result<(), Rejected> {
        match input {
            Input::TaskSucceeded { key, output } => self.task_succeeded(key, output, fx),
            Input::TaskFailed { key, failure } => self.task_failed(key, failure, fx),
            Input::TaskReturned {
                key,
                worker,
                result,
                read,
                notes,
            } => {
                // Its calls were spent whether or not its output is taken.
                self.noted(key, notes, fx);
                let task = self.run.tasks.get(key);
                let holding = task
                    .filter(|task| task.item.is_none())
                    .map(|task| task.node);
                let cached = task.is_some_and(|task| task.spec.cache.is_some());
                // A cached step's answer is kept once it is accepted.
                let cacheable = match &result {
                    Ok((writes, output)) if cached => {
                        Some(Box::new((writes.clone(), output.clone())))
                    }
                    _ => None,
                };
                match self.returned(Some(worker), result, read, Vec::new(), holding) {
                    Ok(mut output) => {
                        output.cacheable = cacheable;
                        let held = output.held.values().map(|text| text.len() as u64);
                        self.held_write_bytes += held.sum::<u64>();
                        self.task_succeeded(key, output, fx)
                    }
                    Err(failure) => self.task_failed(key, failure, fx),
                }
            }
            Input::TaskCached {
                key,
                writes,
                output,
                stored_by,
                age_ms,
            } => {
                let Some(task) = self.run.tasks.get(key) else {
                    return Ok(());
                };
                fx.push(Effect::Emit(RunEvent::NodeCached {
                    node: task.spec.node.clone(),
                    item: task.item,
                    stored_by,
                    age_ms,
                }));
                let holding = task.item.is_none().then_some(task.node);
                match self.returned(None, Ok((writes, output)), Vec::new(), Vec::new(), holding) {
                    Ok(output) => self.task_succeeded(key, output, fx),
                    Err(failure) => self.task_failed(key, failure, fx),
                }
            }
            Input::RetryDue { key } => {
                if self.run.tasks.requeue(key) {
                    self.pump(fx);
                } else {
                    self.child_retry_due(key, fx);
                }
            }
            Input::Answered { node, answer } => self.answered(&node, answer, fx)?,
            Input::CallReturned { call, result } => self.call_returned(call, result, fx),
            Input::ChildStarted { node, run_id } => self.child_started(&node, run_id, fx),
            Input::ChildWaiting {
                node,
                run_id,
                waiting,
            } => self.child_waiting(&node, &run_id, waiting, fx),
            Input::ChildEnded {
                node,
                result,
                usage,
            } => {
                self.add_usage(&usage);
                self.child_ended(&node, result, fx)
            }
            Input::Cancel { by } => {
                if self.run.status.is_terminal() {
                    return Err(Rejected::Ended);
                }
                if let Some(by) = by {
                    fx.push(Effect::Emit(RunEvent::CancelRequested { by }));
                }
                self.stop(RunStatus::Cancelled, RunError::Cancelled, fx)?;
            }
            Input::DeadlinePassed { waiting } => {
                self.stop(RunStatus::Failed, RunError::RunTimeout { waiting }, fx)?
            }
            Input::RetryRun { by } => self.retry_run(by, fx)?,
            Input::TeamSend {
                key,
                send_id,
                message,
            } => self.team_send(key, send_id, message, fx),
            Input::EventLimit { limit } => {
                self.stop(RunStatus::Failed, RunError::EventLimit { limit }, fx)?
            }
            Input::Quarantine { crashes } => {
                self.stop(RunStatus::Failed, RunError::Quarantined { crashes }, fx)?
            }
            // Watchers see why the run waits; the run goes on waiting.
            Input::TaskUnhosted { node, needs } => {
                fx.push(Effect::Emit(RunEvent::TaskUnhosted { node, needs }));
            }
            Input::TaskThrottled {
                key,
                limit,
                wait_ms,
            } => {
                if let Some(task) = self.run.tasks.get(key).filter(|t| t.in_flight) {
                    fx.push(Effect::Emit(RunEvent::TaskThrottled {
                        node: task.spec.node.clone(),
                        item: task.item,
                        limit: limit.clone(),
                        wait_ms,
                    }));
                }
            }
            // Watchers can count the extra sendings of at-least-once.
            Input::TaskRequeued { key, worker } => {
                if let Some(task) = self.run.tasks.get(key).filter(|t| t.in_flight) {
                    fx.push(Effect::Emit(RunEvent::TaskRedispatched {
                        node: task.spec.node.clone(),
                        attempt: task.spec.attempt,
                        item: task.item,
                        reason: Redispatch::WorkerLost,
                        worker: Some(worker),
                    }));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn finish(
        &mut self,
        status: RunStatus,
        error: Option<RunError>,
        fx: &mut Vec<Effect>,
    ) {
        self.run.status = status;
        self.run.error = error.clone();
        fx.push(Effect::Emit(RunEvent::RunFinished {
            status,
            error: error.as_ref().map(RunError::info),
        }));
        fx.push(Effect::Checkpoint);
    }

    fn stop(
        &mut self,
        status: RunStatus,
        error: RunError,
        fx: &mut Vec<Effect>,
    ) -> Result<(), Rejected> {
        if self.run.status.is_terminal() {
            return Err(Rejected::Ended);
        }
        self.drop_wave(fx);
        self.cancel_all(fx);
        self.finish(status, Some(error), fx);
        Ok(())
    }

    /// What the run's steps' model calls used so far, by model (its
    /// ended children's included).
    pub fn usage(&self) -> &BTreeMap<String, weft_proto::types::Usage> {
        &self.run.usage
    }

    /// Adds a child run's usage to the run's.
    fn add_usage(&mut self, usage: &BTreeMap<String, weft_proto::types::Usage>) {
        for (model, used) in usage {
            self.run.usage.entry(model.clone()).or_default().add(used);
        }
    }

    /// Whether `retry` can run this run again: it failed in a wave.
    pub fn retryable(&self) -> bool {
        self.run.status == RunStatus::Failed && !self.run.failed_wave.is_empty()
    }

    fn retry_run(&mut self, by: Option<String>, fx: &mut Vec<Effect>) -> Result<(), Rejected> {
        if self.run.status != RunStatus::Failed || self.run.failed_wave.is_empty() {
            return Err(Rejected::NotRetryable(self.run.status));
        }
        if let Some(by) = by {
            fx.push(Effect::Emit(RunEvent::RunRetried { by }));
        }
        self.run.status = RunStatus::Running;
        self.run.error = None;
        // The failed wave runs again as the same step.
        self.run.steps = self.run.steps.saturating_sub(1);
        for idx in std::mem::take(&mut self.run.failed_wave) {
            self.run.nodes[idx] = NodeStatus::Pending;
            self.run.forced.insert(idx);
        }
        self.touched = wave_cycle::Touched::All;
        self.advance(fx);
        Ok(())
    }
}
