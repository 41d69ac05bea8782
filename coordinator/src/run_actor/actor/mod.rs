//! One actor per run: it owns the run's [`RunMachine`], performs its
//! effects (dispatch through a [`TaskLauncher`], retry timers, calls of
//! worker-hosted functions, the event log) and feeds what happens back into
//! the machine as inputs. Everything else reaches the run through a
//! [`RunHandle`].

use std::collections::{BTreeMap, HashMap};

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weft_proto::RunId;
use weft_proto::types::Usage;

use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;

mod checkpoints;
mod child_runs;
mod field_table;
mod handle;
mod liveness;
mod spans;
mod worker_io;

pub use self::child_runs::{ChildOutcome, ChildRuns, Pending, WaitReports};
use self::handle::leave_out_large_fields;
pub use self::handle::{
    EndedLog, FinishedRun, RunHandle, RunRequestError, RunView, StoredEvent, UnhostedWait,
};
use self::liveness::{Command, Liveness, command_channel};

use self::child_runs::{ChildLink, children_in};
use self::field_table::FieldTable;
use crate::bundle::BlobLease;
use crate::dispatch::jobs::JobKey;
use crate::dispatch::{BlobRef, CallForm, DispatchEvent, EventSink, TaskLauncher, ToWorker};
use crate::durable::journal::Journal;
use crate::run_actor::StepMarks;
use crate::run_actor::{
    Effect, Input, NodeId, Rejected, RunEvent, RunMachine, RunPlan, RunStatus, TaskKey, UntilJudge,
};

/// How often a map's finished items are checkpointed at most.
pub(super) const ITEM_CHECKPOINTS: Duration = Duration::from_millis(100);
/// Commands a run actor takes.
const COMMAND_BUFFER: usize = 64;
/// Events kept for late watchers beyond the log (the log itself is whole).
const LIVE_BUFFER: usize = 256;
/// Results from workers taken in one turn of a run's actor, under one step
/// mark: enough to take a worker's batch at once, few enough that a
/// command (a status, a cancel) waits for no more than this many steps.
const BURST: usize = 64;

/// What a run needs besides its machine.
pub struct RunSetup {
    /// The run id.
    pub id: RunId,
    /// The prepared graph.
    pub plan: Arc<RunPlan>,
    /// The machine, created with the run's input.
    pub machine: RunMachine,
    /// The bundle's files, as workers fetch them.
    pub bundle: Arc<Vec<BlobRef>>,
    /// Where tasks go.
    pub launcher: Arc<dyn TaskLauncher>,
    /// Stops the actor.
    pub shutdown: CancellationToken,
    /// Where the actor's task is tracked, so shutdown waits for it.
    pub tracker: tokio_util::task::TaskTracker,
    /// `None` for a new run, which the actor starts; a run revived from
    /// its record (for `retry`) or recovered from the store continues its
    /// log instead.
    pub history: Option<History>,
    /// How the actor begins.
    pub start: Start,
    /// Where the run's checkpoints go; `None` keeps the run in memory only.
    pub journal: Option<Journal>,
    /// Told once a new run's first checkpoint is stored.
    pub admitted: Option<tokio::sync::oneshot::Sender<bool>>,
    /// Keeps the bundle's files for workers while the run may still need
    /// them (until it ends, or until a failed run's record is forgotten).
    pub lease: BlobLease,
    /// Starts and follows the run's subgraph nodes' child runs.
    pub children: Option<Arc<dyn ChildRuns>>,
    /// Where the run's steps are marked while they run, so a coordinator
    /// that dies in one knows which run it was stepping.
    pub marks: Arc<StepMarks>,
    /// The run was being stepped when a coordinator died: its steps run
    /// alone.
    pub suspect: bool,
    /// What model calls cost.
    pub prices: Arc<crate::prices::Prices>,
    /// Where the namespace's day spend is tallied.
    pub spend: Arc<crate::day_spend::DaySpend>,
    /// What cached steps returned, the namespace's among them.
    pub cache: crate::node_cache::NodeCache,
    /// Its steps' model output as it streams, kept with its handle.
    pub streams: Arc<crate::run_actor::streams::RunStreams>,
}

/// How a run's actor begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A new run: its first wave starts.
    New,
    /// A fork of another run (SPEC 20): it goes on from the progress it
    /// was made with.
    Fork,
    /// A failed run revived by `retry`: the failed wave runs again.
    Retry {
        /// Who asked.
        by: Option<String>,
    },
    /// A run restored from the store by a new coordinator: what was out is
    /// sent again ([`RunMachine::resume`]).
    Recover,
    /// A run restored from the store whose steps killed coordinators
    /// `crashes` times: it fails, unevaluated.
    Quarantine {
        /// The crashes it is charged with.
        crashes: u32,
    },
}

/// What a revived run carries over from its record.
pub struct History {
    /// Its event log so far.
    pub log: Vec<StoredEvent>,
    /// When it was submitted.
    pub created_unix_ms: i64,
}

/// Starts a run's actor and its first wave. `known` is given the run's
/// handle before the actor starts: whatever finds runs by id (a worker
/// asking for the run's knowledge index, the API asked about it) must
/// find it once any of its tasks can reach a worker, and a thread of the
/// runtime may dispatch the first task before this function returns.
pub fn spawn_run(setup: RunSetup, known: impl FnOnce(&RunHandle)) -> RunHandle {
    let (tx, rx) = command_channel();
    let id = setup.id.clone();
    let namespace = setup.machine.owner().namespace.clone();
    let me = tx.downgrade();
    let liveness = Arc::new(RwLock::new(Liveness::Live(tx)));
    let handle = RunHandle::new(id, &namespace, liveness.clone(), setup.streams.clone());
    known(&handle);
    start_actor(setup, (rx, me), liveness);
    handle
}

/// Spawns the actor of `setup` on `commands` (the receiver, and a weak
/// sender its child runs report through); when the run ends it leaves its
/// record in `liveness`.
fn start_actor(
    mut setup: RunSetup,
    (commands, me): (mpsc::Receiver<Command>, mpsc::WeakSender<Command>),
    liveness: Arc<RwLock<Liveness>>,
) {
    let (sink, dispatch_rx) = mpsc::unbounded_channel();
    let (timers, timer_rx) = mpsc::unbounded_channel();
    let (live, _) = broadcast::channel(LIVE_BUFFER);
    let mut fields = FieldTable::default();
    fields.refresh(&setup.machine, setup.machine.state().keys());
    // SPEC 11: a costly evaluation must not hold up other runs, heartbeats
    // or the API; the many light ones stay where they are.
    setup.machine.set_heavy_runner(off_the_runtime);
    let start = std::mem::replace(&mut setup.start, Start::New);
    let (log, created_unix_ms) = setup
        .history
        .map_or_else(|| (Vec::new(), now_ms()), |h| (h.log, h.created_unix_ms));
    let log_len = log.len();
    let children_started = children_in(&log);
    let children = ChildLink {
        runs: setup.children.clone(),
        actor: me,
    };
    let spans = spans::RunSpans::new(
        &setup.id,
        &setup.plan.graph().name,
        setup.machine.trace_parent(),
    );
    let chain = &setup.machine.owner().budgets;
    if !chain.is_empty() {
        // What it spent before (a restored run's own usage, its ended
        // children's included) counts against its budgets again.
        let spent = setup.prices.total(setup.machine.usage());
        setup.launcher.budget(crate::dispatch::BudgetStart {
            run: setup.id.clone(),
            own: setup
                .plan
                .graph()
                .settings
                .budget
                .filter(|_| chain.contains(&setup.id)),
            chain: chain.clone().into(),
            tokens: spent.prompt_tokens + spent.completion_tokens,
            cost: spent.cost.unwrap_or(0.0),
        });
    }
    let actor = RunActor {
        id: setup.id,
        namespace: setup.machine.owner().namespace.as_str().into(),
        priority: setup
            .machine
            .owner()
            .priority
            .unwrap_or(setup.plan.graph().settings.priority),
        budgets: setup.machine.owner().budgets.clone().into(),
        plan: setup.plan,
        machine: setup.machine,
        bundle: setup.bundle,
        launcher: setup.launcher,
        sink,
        timers,
        log,
        live,
        fields,
        created_unix_ms,
        unhosted: BTreeMap::new(),
        events_full: false,
        liveness,
        shutdown: setup.shutdown.clone(),
        tracker: setup.tracker.clone(),
        lease: setup.lease,
        journal: setup.journal,
        admitted: setup.admitted,
        checkpoint_due: false,
        published: log_len,
        durable: log_len,
        item_checkpoint: false,
        last_checkpoint: Instant::now(),
        children_started,
        effects: Vec::new(),
        children,
        spans,
        marks: setup.marks,
        suspect: setup.suspect,
        prices: setup.prices,
        spend: setup.spend,
        cache: setup.cache,
        streams: setup.streams,
        streaming: HashMap::new(),
        cache_hits: std::collections::VecDeque::new(),
        taking_hits: false,
        step_usage: HashMap::new(),
    };
    // The actor's own log lines are in the run's span: they carry its id
    // and trace id.
    let span = actor.spans.run_span();
    let running = actor.run(start, commands, dispatch_rx, timer_rx, setup.shutdown);
    setup
        .tracker
        .spawn(tracing::Instrument::instrument(running, span));
}

/// How many effects' room the actor keeps between inputs.
const EFFECTS_KEPT: usize = 64;

pub(super) struct RunActor {
    /// Its subgraph nodes' child runs; those started (node, run id).
    children: ChildLink,
    children_started: Vec<(NodeId, RunId)>,
    /// The effects of the input being applied, the list kept between
    /// inputs (up to [`EFFECTS_KEPT`]).
    effects: Vec<Effect>,
    id: RunId,
    /// The run's namespace, which its tasks carry to the dispatcher.
    namespace: Arc<str>,
    /// Where its tasks go in its namespace's queue.
    priority: crate::graph::Priority,
    /// The runs whose budgets its model calls count against.
    budgets: Arc<[RunId]>,
    plan: Arc<RunPlan>,
    machine: RunMachine,
    bundle: Arc<Vec<BlobRef>>,
    launcher: Arc<dyn TaskLauncher>,
    sink: EventSink,
    /// Retries to schedule: (key, delay), timed by the actor's own queue.
    timers: mpsc::UnboundedSender<(TaskKey, Duration)>,
    log: Vec<StoredEvent>,
    live: broadcast::Sender<StoredEvent>,
    fields: FieldTable,
    created_unix_ms: i64,
    /// The log reached `max_events`: the run is to be stopped.
    events_full: bool,
    /// What the run waits for: its jobs that no connected worker hosts,
    /// with their node and what they need, until placed or gone.
    unhosted: BTreeMap<JobKey, (NodeId, String)>,
    /// Where the run's record goes when it ends.
    liveness: Arc<RwLock<Liveness>>,
    /// Kept for a revival of the run.
    shutdown: CancellationToken,
    tracker: tokio_util::task::TaskTracker,
    lease: BlobLease,
    journal: Option<Journal>,
    admitted: Option<tokio::sync::oneshot::Sender<bool>>,
    /// The machine asked for a checkpoint since the last one was taken.
    checkpoint_due: bool,
    /// Events watchers may see: the log up to here.
    published: usize,
    /// Events in the store (with `sync`, watchers see no further).
    durable: usize,
    /// A map item finished since the last checkpoint.
    item_checkpoint: bool,
    last_checkpoint: Instant,
    /// The run's trace.
    spans: spans::RunSpans,
    marks: Arc<StepMarks>,
    suspect: bool,
    /// What model calls cost.
    prices: Arc<crate::prices::Prices>,
    spend: Arc<crate::day_spend::DaySpend>,
    cache: crate::node_cache::NodeCache,
    /// Its steps' model output as it streams.
    streams: Arc<crate::run_actor::streams::RunStreams>,
    /// The attempts out whose model output streams (`llm`, `agent`,
    /// `rag`), and whether any of it came.
    streaming: HashMap<TaskKey, (crate::run_actor::streams::StepRef, bool)>,
    /// Cached steps' answers found as they were dispatched, to be taken
    /// once the effects at hand are done ([`Self::after_effects`]).
    cache_hits: std::collections::VecDeque<Input>,
    /// The hits are being taken.
    taking_hits: bool,
    /// What each step's model calls used, until its `node_finished` takes
    /// it, by node and map item.
    step_usage: HashMap<(NodeId, Option<usize>), Usage>,
}

impl RunActor {
    /// Moves this run from one status to another in the `weft_runs` gauge.
    fn count_status(&self, from: Option<RunStatus>) {
        let to = self.machine.status();
        if from == Some(to) {
            return;
        }
        if let Some(from) = from {
            metrics::gauge!(crate::metrics::RUNS, "status" => from.name()).decrement(1.0);
        }
        metrics::gauge!(crate::metrics::RUNS, "status" => to.name()).increment(1.0);
        // One line per run as it starts, waits and ends, at the default level.
        let graph = self.plan.graph().name.as_str();
        match (from, to) {
            (None, _) => tracing::info!(run = %self.id, graph, status = to.name(), "run started"),
            (_, RunStatus::Waiting) => {
                tracing::info!(run = %self.id, graph, "run waiting for input")
            }
            (_, to) if to.is_terminal() => {
                tracing::info!(run = %self.id, graph, status = to.name(), "run {}", to.name())
            }
            _ => {}
        }
    }

    async fn run(
        mut self,
        start: Start,
        mut commands: mpsc::Receiver<Command>,
        mut dispatch: mpsc::UnboundedReceiver<DispatchEvent>,
        mut timers: mpsc::UnboundedReceiver<(TaskKey, Duration)>,
        shutdown: CancellationToken,
    ) {
        // Retry timers live in the actor, so nothing outlives the run.
        let mut retries: DelayQueue<TaskKey> = DelayQueue::new();
        // A revived run streams again.
        self.streams.set_ended(false);
        match start {
            Start::New | Start::Fork => {
                // Stored before the submission is acknowledged; a run the
                // store did not take is refused, never started.
                let stored = self.take_checkpoint(true).await;
                if let Some(admitted) = self.admitted.take() {
                    let _ = admitted.send(stored);
                }
                if !stored {
                    return;
                }
                let effects = match start {
                    Start::Fork => self.step(RunMachine::start_fork),
                    _ => self.step(RunMachine::start),
                };
                self.perform(effects);
                self.count_status(None);
            }
            Start::Retry { by } => self.input(Input::RetryRun { by }),
            Start::Recover => {
                let effects = self.step(RunMachine::resume);
                self.perform(effects);
                self.count_status(None);
            }
            Start::Quarantine { crashes } => {
                self.count_status(None);
                self.input(Input::Quarantine { crashes });
            }
        }
        self.flush().await;
        if self.machine.status().is_terminal() {
            // Ended already (a recovered run that had finished, a run that
            // ended in its first wave): only its record is needed.
            self.archive();
            return;
        }
        let deadline = self.plan.graph().settings.timeout;
        let deadline = tokio::time::sleep(deadline.unwrap_or(Duration::from_secs(u64::MAX / 4)));
        tokio::pin!(deadline);
        let mut deadline_armed = self.plan.graph().settings.timeout.is_some();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    // Stopped while it runs (its partition handed over,
                    // the coordinator shutting down): map items finished
                    // since the last checkpoint are stored now, so whoever
                    // serves the run next does not run them again. (After
                    // a lost lease the fence refuses the write.)
                    if self.item_checkpoint {
                        self.take_checkpoint(true).await;
                    }
                    break;
                }
                command = commands.recv() => match command {
                    Some(command) => self.command(command),
                    None => break,
                },
                Some(event) = dispatch.recv() => self.dispatch_burst(event, &mut dispatch),
                Some((key, delay)) = timers.recv() => {
                    retries.insert(key, delay);
                }
                Some(due) = retries.next(), if !retries.is_empty() => {
                    self.input(Input::RetryDue { key: due.into_inner() });
                }
                // A deferred map-item checkpoint is due (`flush` takes it).
                _ = tokio::time::sleep_until((self.last_checkpoint + ITEM_CHECKPOINTS).into()), if self.item_checkpoint => {}
                _ = &mut deadline, if deadline_armed => {
                    deadline_armed = false;
                    if !self.machine.status().is_terminal() {
                        let waiting = self.waits_for().iter().map(|w| format!("node '{}' needs {}", w.node, w.needs)).collect::<Vec<_>>();
                        let waiting = (!waiting.is_empty()).then(|| waiting.join(", "));
                        self.input(Input::DeadlinePassed { waiting });
                    }
                }
            }
            self.flush().await;
            if self.machine.status().is_terminal() {
                self.archive();
                return;
            }
        }
    }

    /// The run has ended: its record replaces the actor, which stops. A
    /// failed run that can be retried keeps what reviving it takes.
    fn archive(self) {
        // A run restored ended, or ended now: its stream is whole.
        self.streams.set_ended(true);
        let mut view = self.view();
        let liveness = self.liveness.clone();
        let retryable = self.machine.retryable();
        // The store holds the run's last checkpoint (its final state and
        // every event) unless a retry will continue it from memory.
        let stored = match &self.journal {
            Some(journal) if !retryable && journal.holds(self.log.len()) => Some(journal.keeper()),
            _ => None,
        };
        // Large fields stay in the store only; the rest is kept with its
        // values, not their texts as well: a run kept in memory costs its
        // small fields once.
        let stored_fields = stored.and_then(|keeper| leave_out_large_fields(&mut view, keeper));
        parse_held_fields(&mut view, &self.machine);
        view.state_texts = Vec::new();
        // The log stays in memory only where the store may not hold all
        // of it, or a retry will continue it.
        let log = match stored {
            Some(keeper) => EndedLog::Stored {
                keeper: keeper.clone(),
                count: self.log.len() as u64,
            },
            None => EndedLog::Held(self.log),
        };
        let children = self.children.runs.clone();
        let revival = retryable.then(|| RunSetup {
            children,
            id: self.id,
            plan: self.plan,
            machine: self.machine,
            bundle: self.bundle,
            launcher: self.launcher,
            shutdown: self.shutdown,
            tracker: self.tracker,
            history: None,
            start: Start::Retry { by: None },
            journal: self.journal,
            admitted: None,
            lease: self.lease,
            marks: self.marks,
            suspect: self.suspect,
            prices: self.prices,
            spend: self.spend,
            cache: self.cache,
            streams: self.streams,
        });
        let record = FinishedRun {
            view,
            log,
            finished_unix_ms: now_ms(),
            revival: std::sync::Mutex::new(revival),
            stored: stored_fields,
        };
        *liveness.write().unwrap_or_else(|e| e.into_inner()) = Liveness::Finished(Arc::new(record));
    }

    /// Takes `first` and the results queued behind it (up to [`BURST`]),
    /// the run marked once for all of them rather than once a result
    /// ([`StepMarks::hold`]; a suspect's steps are marked one by one). The
    /// burst ends early where a step asks for a checkpoint or ends the run,
    /// so that the checkpoint is written, and the events published, before
    /// anything after it is taken, as when results come one at a time.
    fn dispatch_burst(
        &mut self,
        first: DispatchEvent,
        queued: &mut mpsc::UnboundedReceiver<DispatchEvent>,
    ) {
        if queued.is_empty() {
            // A burst of one: its step marks itself.
            return self.dispatch_event(first);
        }
        let (marks, id) = (self.marks.clone(), self.id.clone());
        let _held = (!self.suspect).then(|| marks.hold(&id));
        self.dispatch_event(first);
        for _ in 1..BURST {
            if self.checkpoint_due || self.machine.status().is_terminal() {
                break;
            }
            let Ok(event) = queued.try_recv() else { break };
            self.dispatch_event(event);
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Get(reply) => {
                let _ = reply.send(self.view());
            }
            Command::Watch { from, reply } => {
                let published = &self.log[..self.published];
                let past = published.iter().skip(from as usize).cloned().collect();
                let _ = reply.send((past, self.live.subscribe()));
            }
            Command::Act { input, reply } => {
                let result = self.apply(*input).map(|()| self.view());
                let _ = reply.send(result);
            }
        }
    }

    fn input(&mut self, input: Input) {
        if let Err(rejected) = self.apply(input) {
            tracing::debug!(run = %self.id, %rejected, "input ignored");
        }
    }

    /// Applies an input, performs its effects, and keeps the status gauge.
    fn apply(&mut self, input: Input) -> Result<(), Rejected> {
        let before = self.machine.status();
        // The list of effects is the actor's, kept from one input to the
        // next (taken while its effects are performed: one may apply
        // another input).
        let mut effects = std::mem::take(&mut self.effects);
        let applied = self.step(|machine| machine.apply_into(input, &mut effects));
        if applied.is_ok() {
            self.perform_each(effects.drain(..));
            self.after_effects();
        }
        if effects.capacity() <= EFFECTS_KEPT {
            self.effects = effects;
        }
        applied?;
        self.count_status(Some(before));
        Ok(())
    }

    /// Steps the machine, the step marked while it runs ([`StepMarks`]).
    /// Its heavy evaluations leave the runtime's threads on their own (the
    /// machine's meter hands them to [`off_the_runtime`]).
    fn step<T>(&mut self, step: impl FnOnce(&mut RunMachine) -> T) -> T {
        let _marked = self.marks.step(&self.id, self.suspect);
        step(&mut self.machine)
    }

    fn perform(&mut self, effects: Vec<Effect>) {
        self.perform_each(effects);
        self.after_effects();
    }

    /// A run that filled its event log stops here (its last events, up to
    /// `run_finished`, are still recorded).
    fn after_effects(&mut self) {
        if std::mem::take(&mut self.events_full) && !self.machine.status().is_terminal() {
            let limit = self.plan.limits().max_events;
            if let Ok(effects) = self.machine.apply(Input::EventLimit { limit }) {
                self.perform_each(effects);
            }
        }
        // Cached steps' answers, once the effects that dispatched them are
        // all done (so their events follow those effects'), by the
        // outermost call alone: a chain of cached steps is a loop here,
        // never a deepening recursion.
        if !self.taking_hits {
            self.taking_hits = true;
            while let Some(hit) = self.cache_hits.pop_front() {
                self.input(hit);
            }
            self.taking_hits = false;
        }
    }

    fn perform_each(&mut self, effects: impl IntoIterator<Item = Effect>) {
        for effect in effects {
            match effect {
                Effect::Dispatch(spec) => self.dispatch(&spec),
                Effect::ScheduleRetry { key, delay } => {
                    let _ = self.timers.send((key, delay));
                }
                Effect::CancelTasks(keys) => {
                    self.spans.tasks_cancelled(&keys);
                    for key in &keys {
                        self.unhosted.remove(&JobKey::Task(*key));
                        self.stream_ended(*key, crate::run_actor::streams::PieceKind::Abandoned);
                    }
                    self.launcher.cancel(self.id.clone(), keys);
                }
                Effect::Deliver { key, message } => {
                    let run_id = self.id.clone();
                    let delivery = ToWorker::Deliver {
                        run_id,
                        key,
                        message,
                    };
                    self.tell(key, delivery);
                }
                Effect::SendAck {
                    key,
                    send_id,
                    error,
                } => self.acknowledge(key, send_id, error),
                Effect::CallReducer {
                    call,
                    code,
                    s0_value,
                    branch_values,
                    ..
                } => self.call(
                    call,
                    code,
                    vec![s0_value, Value::Array(branch_values)],
                    CallForm::Positional,
                ),
                Effect::CallUntil {
                    call,
                    judge: UntilJudge::Code(code),
                    iteration,
                } => self.call(call, code, vec![iteration], CallForm::LoopIteration),
                Effect::CallUntil {
                    call,
                    judge: UntilJudge::Sentence(sentence),
                    iteration,
                } => self.judge(call, sentence, iteration),
                Effect::CallPredicate { call, code, state } => {
                    let state = Value::Object((*state).clone());
                    self.call(call, code, vec![state], CallForm::Keywords);
                }
                Effect::StartChild { node, graph, input } => {
                    let traceparent = self.spans.child_starting(&node);
                    self.children
                        .start(&self.tracker, node, graph, input, traceparent);
                }
                Effect::AwaitChild { node, run_id } => {
                    self.children.follow(&self.tracker, node, run_id);
                }
                Effect::CancelChildren(run_ids) => self.children.cancel(run_ids),
                Effect::Emit(event) => self.emit(event),
                Effect::Cache {
                    entry,
                    ttl,
                    node,
                    item,
                    writes,
                    output,
                } => {
                    let answer = crate::node_cache::Answer {
                        node: node.to_string(),
                        writes,
                        output,
                        run: self.id.to_string(),
                        ttl,
                    };
                    if let Err(why) = self.cache.keep(&self.namespace, entry, answer) {
                        self.emit(RunEvent::NodeNotCached {
                            node,
                            item,
                            reason: why.to_string(),
                        });
                    }
                }
                // Taken once the input's effects are done (`flush`).
                Effect::Checkpoint => self.checkpoint_due = true,
            }
        }
    }

    /// Notes what an event means for the actor, then logs it.
    fn emit(&mut self, mut event: RunEvent) {
        match &mut event {
            // A map item or a loop iteration is progress a crash should
            // not take back.
            RunEvent::MapItemFinished { .. } | RunEvent::LoopIteration { .. } => {
                self.item_checkpoint = true;
            }
            RunEvent::StateChanged {
                fields,
                values,
                folded,
                ..
            } => {
                self.fields.refresh(&self.machine, fields.iter());
                (*values, *folded) = self.fields.shown(self.machine.state(), fields);
            }
            RunEvent::RunFinished { status, .. } => {
                self.spans.run_finished(*status);
                self.streams.set_ended(true);
                self.launcher.forget(self.id.clone());
            }
            RunEvent::WaveStarted { step, .. } => self.spans.wave_started(*step),
            RunEvent::MessageSent { .. } => {
                metrics::counter!(crate::metrics::INBOX_MESSAGES).increment(1);
            }
            RunEvent::ModelCalled {
                node,
                item,
                model,
                provider,
                prompt_tokens,
                completion_tokens,
                cached_tokens,
                cost,
                ..
            } => {
                let usage = Usage {
                    calls: 1,
                    prompt_tokens: prompt_tokens.unwrap_or(0),
                    completion_tokens: completion_tokens.unwrap_or(0),
                    cached_tokens: cached_tokens.unwrap_or(0),
                    cost: None,
                };
                *cost = self.prices.cost(model, &usage);
                self.spend.add(
                    &self.namespace,
                    usage.prompt_tokens + usage.completion_tokens,
                    cost.unwrap_or(0.0),
                    now_ms(),
                );
                crate::metrics::model_called(
                    &self.namespace,
                    provider.as_deref().unwrap_or_default(),
                    model,
                    &usage,
                    *cost,
                );
                self.step_usage
                    .entry((node.clone(), *item))
                    .or_default()
                    .add(&Usage {
                        cost: *cost,
                        ..usage
                    });
            }
            RunEvent::NodeFinished {
                node, item, usage, ..
            } => {
                *usage = self.step_usage.remove(&(node.clone(), *item));
            }
            RunEvent::SubgraphStarted { node, run_id } => {
                self.spans.child_started(node, run_id);
                self.children_started.push((node.clone(), run_id.clone()));
            }
            _ => {}
        }
        self.record(event);
    }

    /// Logs an event; watchers see it once it is published ([`Self::flush`]).
    fn record(&mut self, event: RunEvent) {
        let stored = StoredEvent {
            seq: self.log.len() as u64,
            at_unix_ms: now_ms(),
            event: Arc::new(event),
        };
        self.log.push(stored);
        if self.log.len() == self.plan.limits().max_events {
            self.events_full = true;
        }
    }

    fn view(&self) -> RunView {
        RunView {
            id: self.id.clone(),
            graph_name: self.plan.graph().name.clone(),
            graph: self.plan.shared_graph(),
            trace_id: self.spans.trace_id().into(),
            status: self.machine.status(),
            state: self.machine.state().clone(),
            state_texts: self.fields.texts(self.machine.state()),
            as_input: self.machine.held_as_input().cloned().collect(),
            error: self.machine.error().cloned(),
            waiting: self.machine.waiting(),
            event_count: self.published as u64,
            created_unix_ms: self.created_unix_ms,
            unhosted: self.waits_for(),
            children: self.children_started.clone(),
            owner: self.machine.owner().clone(),
            forked_from: self.machine.forked_from().cloned(),
            answers: self.machine.answers().to_vec(),
            usage: self.prices.total(self.machine.usage()),
            models: Arc::new(self.machine.usage().clone()),
            // An ended run ended with its last event.
            ended_unix_ms: self
                .machine
                .status()
                .is_terminal()
                .then(|| self.log.last().map(|e| e.at_unix_ms))
                .flatten(),
        }
    }

    /// What the run's unhosted jobs need, one entry per node and need with
    /// how many jobs wait for it; nothing once the run is over.
    fn waits_for(&self) -> Vec<UnhostedWait> {
        if self.machine.status().is_terminal() {
            return Vec::new();
        }
        let mut waits: BTreeMap<(&str, &str), u32> = BTreeMap::new();
        for (node, needs) in self.unhosted.values() {
            *waits.entry((node, needs)).or_default() += 1;
        }
        waits
            .into_iter()
            .map(|((node, needs), tasks)| UnhostedWait {
                node: node.to_owned(),
                needs: needs.to_owned(),
                tasks,
            })
            .collect()
    }
}

/// Puts the values of the fields the run holds as text (`weft_machine::held`)
/// into an ended run's `view` where it keeps them, in place of their
/// placeholders: its record keeps values, not texts. Where the store holds
/// the run's final state, the large fields were left out of the view
/// already and nothing is parsed here.
fn parse_held_fields(view: &mut RunView, machine: &RunMachine) {
    let held: Vec<_> = machine
        .held()
        .filter(|(name, _)| view.state.contains_key(name.as_str()))
        .collect();
    if held.is_empty() {
        return;
    }
    let state = Arc::make_mut(&mut view.state);
    for (name, text) in held {
        // Checked as a parse would check it when the input was read.
        if let Ok(value) = serde_json::from_str(text) {
            state.insert(name.clone(), value);
        }
    }
}

/// Runs `work`, which may take a while (an expression over a big state),
/// without holding up the other tasks of a multi-threaded runtime: the
/// thread hands its tasks to another before it starts.
fn off_the_runtime(work: &mut dyn FnMut()) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// Now, in Unix milliseconds.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests;
