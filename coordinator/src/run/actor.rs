//! One actor per run: it owns the run's [`RunMachine`], performs its
//! effects (dispatch through a [`TaskLauncher`], retry timers, calls of
//! worker-hosted functions, the event log) and feeds what happens back into
//! the machine as inputs. Everything else reaches the run through a
//! [`RunHandle`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;

use super::{
    Effect, FailureKind, HumanAnswer, Input, NodeOutput, Rejected, RunError, RunEvent, RunMachine,
    RunPlan, RunStatus, State, TaskFailure, TaskKey, TaskSpec, TaskState,
};
use crate::dispatch::jobs::JobKey;
use crate::dispatch::{
    Assignment, BlobRef, DispatchEvent, EventSink, FunctionCall, StateField, TaskLauncher,
};

/// Commands a run actor takes.
const COMMAND_BUFFER: usize = 64;
/// Events kept for late watchers beyond the log (the log itself is whole).
const LIVE_BUFFER: usize = 4096;

/// One entry of a run's event log.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Position in the log.
    pub seq: u64,
    /// When it happened (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The event.
    pub event: Arc<RunEvent>,
}

/// A run as clients see it.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The run id.
    pub id: Arc<str>,
    /// The graph's name.
    pub graph_name: String,
    /// Status.
    pub status: RunStatus,
    /// The state as of the last merge.
    pub state: State,
    /// The error of a failed or cancelled run.
    pub error: Option<RunError>,
    /// Nodes waiting for a human: (node, kind, prompt).
    pub waiting: Vec<(String, String, String)>,
    /// Events so far.
    pub event_count: u64,
    /// When the run was submitted (Unix milliseconds).
    pub created_unix_ms: i64,
    /// Work no connected worker hosts, which the run waits for.
    pub unhosted: Vec<UnhostedWait>,
}

/// Tasks of one node waiting for a worker that hosts what they need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnhostedWait {
    /// The node (or the function, for a call).
    pub node: String,
    /// What nobody connected hosts (`handler 'summarize'`, `kind 'llm'`, …).
    pub needs: String,
    /// How many of its tasks wait.
    pub tasks: u32,
}

/// Why a request to a run failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunRequestError {
    /// The run refused the request; it is unchanged.
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// The run's actor is gone (the coordinator is shutting down).
    #[error("the coordinator is shutting down")]
    ShuttingDown,
}

enum Command {
    Get(oneshot::Sender<RunView>),
    Watch {
        from: u64,
        reply: oneshot::Sender<(Vec<StoredEvent>, broadcast::Receiver<StoredEvent>)>,
    },
    Act {
        input: Input,
        reply: oneshot::Sender<Result<RunView, Rejected>>,
    },
}

/// A cloneable handle to a run's actor.
#[derive(Debug, Clone)]
pub struct RunHandle {
    id: Arc<str>,
    tx: mpsc::Sender<Command>,
}

impl RunHandle {
    /// The run id.
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// The run's current view.
    pub async fn get(&self) -> Result<RunView, RunRequestError> {
        self.request(Command::Get).await
    }

    /// Events from position `from`, and a receiver for the ones to come.
    pub async fn watch(
        &self,
        from: u64,
    ) -> Result<(Vec<StoredEvent>, broadcast::Receiver<StoredEvent>), RunRequestError> {
        self.request(|reply| Command::Watch { from, reply }).await
    }

    /// Answers a waiting node.
    pub async fn resume(
        &self,
        node: String,
        answer: HumanAnswer,
    ) -> Result<RunView, RunRequestError> {
        self.act(Input::Answered { node, answer }).await
    }

    /// Cancels the run.
    pub async fn cancel(&self) -> Result<RunView, RunRequestError> {
        self.act(Input::Cancel).await
    }

    /// Retries a failed run from the wave that failed.
    pub async fn retry(&self) -> Result<RunView, RunRequestError> {
        self.act(Input::RetryRun).await
    }

    async fn act(&self, input: Input) -> Result<RunView, RunRequestError> {
        Ok(self
            .request(|reply| Command::Act { input, reply })
            .await??)
    }

    /// Sends a command carrying a reply channel and waits for the reply; a
    /// closed channel means the actor is gone.
    async fn request<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, RunRequestError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(command(reply))
            .await
            .map_err(|_| RunRequestError::ShuttingDown)?;
        answer.await.map_err(|_| RunRequestError::ShuttingDown)
    }
}

/// What a run needs besides its machine.
pub struct RunSetup {
    /// The run id.
    pub id: Arc<str>,
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
}

/// Starts a run's actor and its first wave.
pub fn spawn_run(setup: RunSetup) -> RunHandle {
    let (tx, rx) = mpsc::channel(COMMAND_BUFFER);
    let (sink, dispatch_rx) = mpsc::unbounded_channel();
    let (timers, timer_rx) = mpsc::unbounded_channel();
    let (live, _) = broadcast::channel(LIVE_BUFFER);
    let mut fields = FieldTable::default();
    fields.refresh(setup.machine.state(), setup.machine.state().keys());
    let handle = RunHandle {
        id: setup.id.clone(),
        tx,
    };
    let actor = RunActor {
        id: setup.id,
        plan: setup.plan,
        machine: setup.machine,
        bundle: setup.bundle,
        launcher: setup.launcher,
        sink,
        timers,
        log: Vec::new(),
        live,
        fields,
        created_unix_ms: now_ms(),
        unhosted: BTreeMap::new(),
        events_full: false,
    };
    setup
        .tracker
        .spawn(actor.run(rx, dispatch_rx, timer_rx, setup.shutdown));
    handle
}

struct RunActor {
    id: Arc<str>,
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
    unhosted: BTreeMap<JobKey, (String, String)>,
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
    }

    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut dispatch: mpsc::UnboundedReceiver<DispatchEvent>,
        mut timers: mpsc::UnboundedReceiver<(TaskKey, Duration)>,
        shutdown: CancellationToken,
    ) {
        // Retry timers live in the actor, so nothing outlives the run.
        let mut retries: DelayQueue<TaskKey> = DelayQueue::new();
        let effects = self.machine.start();
        self.perform(effects);
        self.count_status(None);
        let deadline = self.plan.graph().settings.timeout;
        let deadline = tokio::time::sleep(deadline.unwrap_or(Duration::from_secs(u64::MAX / 4)));
        tokio::pin!(deadline);
        let mut deadline_armed = self.plan.graph().settings.timeout.is_some();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                command = commands.recv() => match command {
                    Some(command) => self.command(command),
                    None => break,
                },
                Some(event) = dispatch.recv() => self.dispatch_event(event),
                Some((key, delay)) = timers.recv() => {
                    retries.insert(key, delay);
                }
                Some(due) = retries.next(), if !retries.is_empty() => {
                    self.input(Input::RetryDue { key: due.into_inner() });
                }
                _ = &mut deadline, if deadline_armed => {
                    deadline_armed = false;
                    if !self.machine.status().is_terminal() {
                        let waiting = self.waits_for().iter().map(|w| format!("node '{}' needs {}", w.node, w.needs)).collect::<Vec<_>>();
                        let waiting = (!waiting.is_empty()).then(|| waiting.join(", "));
                        self.input(Input::DeadlinePassed { waiting });
                    }
                }
            }
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Get(reply) => {
                let _ = reply.send(self.view());
            }
            Command::Watch { from, reply } => {
                let past = self.log.iter().skip(from as usize).cloned().collect();
                let _ = reply.send((past, self.live.subscribe()));
            }
            Command::Act { input, reply } => {
                let result = self.apply(input).map(|()| self.view());
                let _ = reply.send(result);
            }
        }
    }

    fn input(&mut self, input: Input) {
        if let Err(rejected) = self.apply(input) {
            tracing::debug!(run = %self.id, %rejected, "input ignored");
        }
    }

    fn dispatch_event(&mut self, event: DispatchEvent) {
        match event {
            DispatchEvent::TaskFinished {
                key,
                worker,
                outcome,
            } => {
                self.unhosted.remove(&JobKey::Task(key));
                let limits = self.plan.limits();
                let input = match outcome.result {
                    Ok((writes, output)) => match NodeOutput::from_json(writes) {
                        Ok(parsed) if parsed.writes.len() > limits.max_output_fields => {
                            Input::TaskFailed {
                                key,
                                failure: TaskFailure {
                                    kind: FailureKind::InvalidOutput,
                                    message: format!(
                                        "the task wrote {} fields; a task writes at most {} (configuration key max_output_fields)",
                                        parsed.writes.len(),
                                        limits.max_output_fields
                                    ),
                                    worker: Some(worker),
                                },
                            }
                        }
                        Ok(mut parsed) => {
                            parsed.output = output;
                            Input::TaskSucceeded {
                                key,
                                output: parsed,
                            }
                        }
                        Err(error) => Input::TaskFailed {
                            key,
                            failure: TaskFailure {
                                kind: FailureKind::InvalidOutput,
                                message: error.to_string(),
                                worker: Some(worker),
                            },
                        },
                    },
                    Err(mut failure) => {
                        failure.worker.get_or_insert(worker);
                        failure.message = limits.clip(failure.message);
                        Input::TaskFailed { key, failure }
                    }
                };
                self.input(input);
            }
            DispatchEvent::TaskUnhosted {
                job,
                node,
                requirement,
            } => {
                let needs = requirement.to_string();
                self.unhosted.insert(job, (node.clone(), needs.clone()));
                self.record(RunEvent::TaskUnhosted { node, needs });
            }
            DispatchEvent::TaskHosted { job } => {
                self.unhosted.remove(&job);
            }
            DispatchEvent::CallReturned { call, result } => {
                self.unhosted.remove(&JobKey::Call(call));
                self.input(Input::CallReturned { call, result })
            }
        }
    }

    /// Applies an input, performs its effects, and keeps the status gauge.
    fn apply(&mut self, input: Input) -> Result<(), Rejected> {
        let before = self.machine.status();
        let effects = if self.plan.iterates() {
            off_the_runtime(|| self.machine.apply(input))?
        } else {
            self.machine.apply(input)?
        };
        self.perform(effects);
        self.count_status(Some(before));
        Ok(())
    }

    fn perform(&mut self, effects: Vec<Effect>) {
        self.perform_each(effects);
        // A run that filled its event log stops here (its last events, up
        // to `run_finished`, are still recorded).
        if std::mem::take(&mut self.events_full) && !self.machine.status().is_terminal() {
            let limit = self.plan.limits().max_events;
            if let Ok(effects) = self.machine.apply(Input::EventLimit { limit }) {
                self.perform_each(effects);
            }
        }
    }

    fn perform_each(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Dispatch(spec) => self.dispatch(spec),
                Effect::ScheduleRetry { key, delay } => {
                    let _ = self.timers.send((key, delay));
                }
                Effect::CancelTasks(keys) => {
                    for key in &keys {
                        self.unhosted.remove(&JobKey::Task(*key));
                    }
                    self.launcher.cancel(self.id.clone(), keys);
                }
                Effect::CallReducer {
                    call,
                    name,
                    s0_value,
                    branch_values,
                    ..
                } => {
                    let args = vec![s0_value, Value::Array(branch_values)];
                    self.launcher.call(
                        FunctionCall {
                            run_id: self.id.clone(),
                            call,
                            name,
                            args,
                            timeout: Duration::ZERO,
                        },
                        self.sink.clone(),
                    );
                }
                Effect::CallPredicate { call, name, state } => {
                    let args = vec![Value::Object((*state).clone())];
                    self.launcher.call(
                        FunctionCall {
                            run_id: self.id.clone(),
                            call,
                            name,
                            args,
                            timeout: Duration::ZERO,
                        },
                        self.sink.clone(),
                    );
                }
                Effect::Emit(event) => {
                    match &event {
                        RunEvent::StateChanged { fields, .. } => {
                            self.fields.refresh(self.machine.state(), fields.iter());
                        }
                        RunEvent::RunFinished { .. } => self.launcher.forget(self.id.clone()),
                        _ => {}
                    }
                    self.record(event);
                }
                // Runs live in memory until the durable store lands; the
                // machine is the one record a checkpoint will persist.
                Effect::Checkpoint => {}
            }
        }
    }

    fn dispatch(&mut self, spec: TaskSpec) {
        let Some(idx) = self.plan.graph().node_index(&spec.node) else {
            return;
        };
        let Some(binding) = self.plan.binding(idx) else {
            return;
        };
        let state = self.fields.task_fields(&spec.state);
        let scope_json = Value::Object(spec.scope).to_string();
        let task = Assignment {
            run_id: self.id.clone(),
            key: spec.key,
            node: spec.node,
            attempt: spec.attempt,
            kind: binding.kind,
            config_json: binding.config.clone(),
            state,
            scope_json,
            item: spec.item,
            timeout: spec.timeout,
            bundle: self.bundle.clone(),
        };
        self.launcher
            .launch(task, binding.requirement.clone(), self.sink.clone());
    }

    fn record(&mut self, event: RunEvent) {
        let stored = StoredEvent {
            seq: self.log.len() as u64,
            at_unix_ms: now_ms(),
            event: Arc::new(event),
        };
        self.log.push(stored.clone());
        let _ = self.live.send(stored);
        if self.log.len() == self.plan.limits().max_events {
            self.events_full = true;
        }
    }

    fn view(&self) -> RunView {
        RunView {
            id: self.id.clone(),
            graph_name: self.plan.graph().name.clone(),
            status: self.machine.status(),
            state: self.machine.state().clone(),
            error: self.machine.error().cloned(),
            waiting: self.machine.waiting(),
            event_count: self.log.len() as u64,
            created_unix_ms: self.created_unix_ms,
            unhosted: self.waits_for(),
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

/// Runs `work`, which may take a while (an expression iterating over long
/// lists), without holding up the other tasks of a multi-threaded runtime.
fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// The committed state's fields, each serialized once per version.
///
/// Every task of a wave sees the same committed state (S0), so a field is
/// turned into JSON when it changes, not once per task; a map item's own
/// fields (its binding and writes) are versioned per task. Versions let the
/// dispatcher send a worker only the values it does not hold yet.
#[derive(Default)]
struct FieldTable {
    fields: std::collections::HashMap<String, StateField>,
    next_version: u64,
}

impl FieldTable {
    /// Re-serializes the named fields of the committed state.
    fn refresh<'a>(&mut self, state: &State, names: impl Iterator<Item = &'a String>) {
        for name in names {
            if let Some(value) = state.get(name) {
                let field = self.fresh(name, value);
                self.fields.insert(name.clone(), field);
            }
        }
    }

    fn fresh(&mut self, name: &str, value: &Value) -> StateField {
        self.next_version += 1;
        StateField {
            name: Arc::from(name),
            version: self.next_version,
            json: Some(Arc::from(value.to_string())),
        }
    }

    /// A task's fields: committed ones from the table, its own overlay
    /// fields versioned anew.
    fn task_fields(&mut self, state: &TaskState) -> Vec<StateField> {
        let mut out = Vec::with_capacity(state.base.len() + state.overlay.len());
        for (name, value) in state.fields() {
            let committed = (!state.overlay.contains_key(name))
                .then(|| self.fields.get(name))
                .flatten();
            match committed {
                Some(field) => out.push(field.clone()),
                None => out.push(self.fresh(name, value)),
            }
        }
        out
    }
}

/// What workers need to know about each worker-run node.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
