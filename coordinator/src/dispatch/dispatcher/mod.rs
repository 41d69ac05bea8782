//! The dispatcher actor: a thin loop around the pure [`Registry`].
//!
//! It turns commands (a worker joined, a run launched a task, a tick) into
//! registry calls and carries out the decisions that come back: it sends
//! messages down workers' streams, reports to runs and keeps the gauges.
//! Each worker has two paths: tasks and calls on a bounded one, whose
//! fullness marks the worker jammed, and control messages (cancel, forget,
//! heartbeat) on their own, so they are never lost behind a backlog.
//!
//! Its own channel is unbounded on purpose: the dispatcher and the run
//! actors send to each other, and two actors that wait on each other's full
//! channels deadlock. The load is bounded elsewhere: tasks in flight never
//! exceed the workers' slots, and a run queues at most its ready tasks.

use std::time::Duration;
use weft_proto::RunId;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::kept_sync::KeptMirror;
use super::registry::{
    Decision, JobId, JobKey, JobSpec, Limits, NameTaken, Registry, WorkerStatus,
};
use super::state_sync::FieldMirror;
use super::*;
use weft_proto::worker_protocol::wire::{MAX_KEPT_BUNDLES, MAX_KEPT_NODES};

mod from_workers;
mod group;

/// How the dispatcher is set up.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// How often heartbeats go to workers (and the registry ticks).
    pub heartbeat_interval: Duration,
    /// The registry's limits.
    pub limits: Limits,
    /// How long a worker-hosted function may take.
    pub call_timeout: Duration,
    /// The `[[limits]]` on model calls (SPEC 18).
    pub rate_limits: Vec<super::limits::LimitSpec>,
    /// Namespaces' weights in the fair share of slots and limits.
    pub weights: std::collections::HashMap<String, u32>,
    /// What model calls cost, for runs' cost budgets.
    pub prices: std::sync::Arc<crate::prices::Prices>,
    /// A member of a partitioned group: concurrency keys and limits are
    /// asked of the group's flow authority.
    pub group: bool,
}

/// The rate limits' windows by limit name.
pub type Windows = std::collections::BTreeMap<String, super::limits::Window>;

/// The two paths down one worker's stream.
#[derive(Debug)]
pub struct WorkerLink {
    /// Tasks and calls; bounded, and a full one jams the worker.
    pub work: mpsc::Sender<ToWorker>,
    /// Cancel, forget and heartbeats, which must not wait behind work.
    pub control: mpsc::Sender<ToWorker>,
}

struct Link {
    channels: WorkerLink,
    /// The state field versions the worker holds.
    mirror: FieldMirror,
    /// The node definitions it keeps.
    nodes: KeptMirror<NodeDefinition>,
    /// The runs' bundle lists it keeps.
    bundles: KeptMirror<Vec<BlobRef>>,
    /// The worker shares its slots between coordinators.
    shares: bool,
    /// The demand last told to it, if it shares (`None`: not told yet).
    demand_told: Option<u64>,
}

/// How often a worker that shares its slots between coordinators is told
/// this one's demand, when it changed: often enough that slots follow a
/// burst within a few tasks' time, seldom enough that counting the queue
/// for each such worker costs nothing to speak of.
const DEMAND_PERIOD: Duration = Duration::from_millis(20);

/// What a task message carries that its worker may keep, and how: the
/// mirrors learn it once the message is on its way.
struct ToKeep {
    node: (Arc<NodeDefinition>, super::KeptRef),
    bundle: (Arc<Vec<BlobRef>>, super::KeptRef),
}

enum Command {
    Budget(super::BudgetStart),
    Windows {
        reply: oneshot::Sender<Windows>,
    },
    RestoreWindows(Windows),
    Join {
        info: WorkerInfo,
        link: WorkerLink,
        reply: oneshot::Sender<Result<WorkerId, NameTaken>>,
    },
    Message {
        worker: WorkerId,
        message: FromWorker,
    },
    Leave {
        worker: WorkerId,
    },
    Launch {
        task: TaskJob,
        requirement: Requirement,
        sink: EventSink,
    },
    Cancel {
        run_id: RunId,
        keys: Vec<TaskKey>,
    },
    Call {
        call: CallJob,
        sink: EventSink,
    },
    Forget {
        run_id: RunId,
    },
    Tell {
        run_id: RunId,
        key: TaskKey,
        message: ToWorker,
    },
    Snapshot {
        reply: oneshot::Sender<Fleet>,
    },
    /// Connected to the group's flow authority: what goes to it goes on
    /// `link`, until a connection of a later `generation`.
    GroupConnected {
        generation: u64,
        link: mpsc::UnboundedSender<super::group_gate::ToAuthority>,
    },
    GroupAnswer {
        generation: u64,
        answer: super::group_flow::Answer,
    },
    GroupDisconnected {
        generation: u64,
    },
    HoldRuns {
        runs: Vec<RunId>,
    },
    RunningOf {
        runs: std::collections::HashSet<RunId>,
        reply: oneshot::Sender<usize>,
    },
    AdmitRun {
        namespace: String,
        reply: oneshot::Sender<Result<u64, super::group_flow::RunRefusal>>,
    },
    ReleaseRun {
        ticket: u64,
    },
    Going {
        partition: u32,
        revision: i64,
        counts: std::collections::BTreeMap<String, u32>,
    },
    PartitionGone {
        partition: u32,
    },
    Spent {
        namespace: String,
        tokens: u64,
        cost: f64,
    },
}

/// The connected workers, and every function any worker has announced.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// The connected workers.
    pub workers: Vec<WorkerStatus>,
    /// Function names announced since the coordinator started.
    pub functions_ever: Vec<String>,
}

/// The dispatcher is gone (the coordinator is shutting down).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the coordinator is shutting down")]
pub struct ShuttingDown;

/// Why a worker was not let in.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JoinRefused {
    /// The coordinator is stopping.
    #[error(transparent)]
    ShuttingDown(#[from] ShuttingDown),
    /// A connected worker has its name.
    #[error(transparent)]
    NameTaken(#[from] NameTaken),
}

/// A cloneable handle to the dispatcher.
#[derive(Debug, Clone)]
pub struct DispatcherHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl DispatcherHandle {
    /// Registers a worker; tasks start flowing into `link`.
    pub async fn join(&self, info: WorkerInfo, link: WorkerLink) -> Result<WorkerId, JoinRefused> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Join { info, link, reply })
            .map_err(|_| JoinRefused::ShuttingDown(ShuttingDown))?;
        let joined = answer
            .await
            .map_err(|_| JoinRefused::ShuttingDown(ShuttingDown))?;
        Ok(joined?)
    }

    /// Passes on a message from a worker.
    pub fn message(&self, worker: WorkerId, message: FromWorker) {
        let _ = self.tx.send(Command::Message { worker, message });
    }

    /// A worker's stream closed.
    pub fn leave(&self, worker: WorkerId) {
        let _ = self.tx.send(Command::Leave { worker });
    }

    /// The rate limits' windows now, to keep across a failover.
    pub async fn windows(&self) -> Windows {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Command::Windows { reply }).is_err() {
            return Windows::new();
        }
        answer.await.unwrap_or_default()
    }

    /// Starts the rate limits from windows an earlier leader kept.
    pub fn restore_windows(&self, kept: Windows) {
        let _ = self.tx.send(Command::RestoreWindows(kept));
    }

    /// The connected workers, and the functions ever announced.
    pub async fn snapshot(&self) -> Fleet {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Command::Snapshot { reply }).is_err() {
            return Fleet::default();
        }
        answer.await.unwrap_or_default()
    }
}

impl TaskLauncher for DispatcherHandle {
    fn launch(&self, task: TaskJob, requirement: Requirement, sink: EventSink) {
        let _ = self.tx.send(Command::Launch {
            task,
            requirement,
            sink,
        });
    }

    fn cancel(&self, run_id: RunId, keys: Vec<TaskKey>) {
        let _ = self.tx.send(Command::Cancel { run_id, keys });
    }

    fn call(&self, call: CallJob, sink: EventSink) {
        let _ = self.tx.send(Command::Call { call, sink });
    }

    fn forget(&self, run_id: RunId) {
        let _ = self.tx.send(Command::Forget { run_id });
    }

    fn tell(&self, run_id: RunId, key: TaskKey, message: ToWorker) {
        let _ = self.tx.send(Command::Tell {
            run_id,
            key,
            message,
        });
    }

    fn budget(&self, budget: super::BudgetStart) {
        let _ = self.tx.send(Command::Budget(budget));
    }
}

/// Starts the dispatcher on `tracker`; it stops when `shutdown` is
/// cancelled.
pub fn spawn_dispatcher(
    config: DispatcherConfig,
    shutdown: CancellationToken,
    tracker: &tokio_util::task::TaskTracker,
) -> DispatcherHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let rates = super::limits::RateLimits::new(config.rate_limits.clone(), now());
    let registry = Registry::new(config.limits.clone())
        .with_rates(rates)
        .with_weights(config.weights.clone())
        .with_prices(config.prices.clone());
    let dispatcher = Dispatcher {
        registry: if config.group {
            registry.with_group()
        } else {
            registry
        },
        group_link: None,
        run_admissions: Default::default(),
        links: foldhash::HashMap::default(),
        call_timeout: config.call_timeout,
        tool_calls: 0,
        placed: Vec::new(),
        sharing: 0,
    };
    tracker.spawn(dispatcher.run(rx, config.heartbeat_interval, shutdown));
    DispatcherHandle { tx }
}

/// The answer to a tool call, and the worker it goes to; `None` for work
/// that is not a tool call.
fn tool_answer(work: &Work, result: Result<Value, String>) -> Option<(WorkerId, ToWorker)> {
    let Work::Tool {
        call,
        caller,
        key,
        call_id,
    } = work
    else {
        return None;
    };
    let answer = ToWorker::ToolResult {
        run_id: call.run_id.clone(),
        key: *key,
        call_id: *call_id,
        result,
    };
    Some((*caller, answer))
}

/// How a job ended, as its run (or the agent step that called a tool) is
/// told: the one path every result takes back.
enum Ended {
    /// A task attempt's outcome, from the worker that ran it.
    Task {
        /// The worker's name.
        worker: String,
        /// What it returned.
        outcome: TaskOutcome,
    },
    /// A function's or a tool's result.
    Call(Result<Value, CallError>),
    /// The dispatcher gave up on the job (timeout, lost workers).
    Failed(crate::task::TaskFailure),
}

/// What the registry keeps with each job: the message and where to report.
struct Order {
    work: Work,
    sink: EventSink,
}

enum Work {
    Task(Box<TaskJob>),
    Call(CallJob),
    /// A tool's call for an agent step on `caller`, whose answer goes back
    /// to it.
    Tool {
        call: FunctionCall,
        caller: WorkerId,
        key: TaskKey,
        call_id: u64,
    },
}

struct Dispatcher {
    registry: Registry<Order>,
    links: foldhash::HashMap<WorkerId, Link>,
    call_timeout: Duration,
    /// The number of the last tool call passed on.
    tool_calls: u64,
    /// Room for the registry's placements, kept from one to the next.
    placed: Vec<Decision<Order>>,
    /// How many of the workers share their slots between coordinators.
    sharing: usize,
    /// The connection to the group's flow authority, by generation.
    group_link: Option<(u64, mpsc::UnboundedSender<super::group_gate::ToAuthority>)>,
    /// Submissions waiting for the group to admit their run, by ticket.
    run_admissions:
        foldhash::HashMap<u64, oneshot::Sender<Result<u64, super::group_flow::RunRefusal>>>,
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl Dispatcher {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        heartbeat: Duration,
        shutdown: CancellationToken,
    ) {
        let mut ticker = tokio::time::interval(heartbeat);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut demand = tokio::time::interval(DEMAND_PERIOD);
        demand.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A job or call waiting for a rate limit goes when it frees.
            let wake = self.registry.wake();
            let woken = async move {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                command = rx.recv() => match command {
                    Some(command) => self.handle(command),
                    None => break,
                },
                _ = ticker.tick() => self.tick(),
                _ = demand.tick(), if self.sharing > 0 => self.tell_demand(),
                () = woken => self.place(),
            }
            self.tell_group();
        }
        debug!("dispatcher stopped");
    }

    fn handle(&mut self, command: Command) {
        let decisions = match command {
            Command::Join { info, link, reply } => {
                let (name, slots) = (info.hello.name.clone(), info.hello.slots);
                let keeps = (info.hello.keeps_nodes, info.hello.keeps_bundles);
                let mirror = FieldMirror::new(&info.hello.handler_reads);
                let shares = info.hello.shared_slots > 0;
                let id = match self.registry.join(info, now()) {
                    Ok(id) => id,
                    Err(taken) => {
                        warn!(%name, held_by = %taken.held_by, "a worker was refused: its name is taken");
                        let _ = reply.send(Err(taken));
                        return;
                    }
                };
                info!(%name, slots, shares, "worker joined");
                self.sharing += usize::from(shares);
                self.links.insert(
                    id,
                    Link {
                        channels: link,
                        mirror,
                        nodes: KeptMirror::new(keeps.0, MAX_KEPT_NODES),
                        bundles: KeptMirror::new(keeps.1, MAX_KEPT_BUNDLES),
                        shares,
                        demand_told: None,
                    },
                );
                let _ = reply.send(Ok(id));
                self.report();
                Vec::new()
            }
            Command::Message { worker, message } => self.message(worker, message),
            Command::Leave { worker } => self.registry.lose(worker, "stream closed"),
            Command::Launch {
                task: job,
                requirement,
                sink,
            } => self.registry.submit(JobSpec {
                priority: job.priority,
                concurrency: job.concurrency.clone(),
                budgets: job.budgets.clone(),
                flow: self
                    .registry
                    .counts(&job.budgets)
                    .then(|| super::flow::needs(&job))
                    .flatten(),
                id: JobId {
                    run: job.task.run_id.clone(),
                    key: JobKey::Task(job.task.key),
                },
                label: job.task.definition.node.clone().into(),
                requirement,
                namespace: job.namespace.clone(),
                timeout: job.task.timeout,
                lineage: Some(JobId {
                    run: job.task.run_id.clone(),
                    key: JobKey::Task(job.first_key),
                }),
                payload: Order {
                    work: Work::Task(Box::new(job)),
                    sink,
                },
            }),
            Command::Cancel { run_id, keys } => {
                let keys: Vec<JobKey> = keys.into_iter().map(JobKey::Task).collect();
                self.registry.cancel(&run_id, &keys)
            }
            Command::Call {
                call: mut job,
                sink,
            } => {
                let call = &mut job.call;
                call.timeout = self.call_timeout;
                let (label, requirement) = match &call.target {
                    CallTarget::Judge => (
                        format!("until '{}'", call.name),
                        Requirement::Kind(WorkerKind::Llm),
                    ),
                    CallTarget::Python(python) => {
                        let function = crate::graph::PyFunction {
                            module: python.module.clone(),
                            function: python.function.clone(),
                        };
                        (function.label(), Requirement::Python)
                    }
                    // Tools come from workers, not runs (`tool_call`).
                    CallTarget::Registered | CallTarget::Tool(_) => (
                        format!("fn:{}", call.name),
                        Requirement::Function(call.name.clone()),
                    ),
                };
                self.registry.submit(JobSpec {
                    id: JobId {
                        run: call.run_id.clone(),
                        key: JobKey::Call(call.call_id),
                    },
                    label: label.into(),
                    requirement,
                    namespace: job.namespace.clone(),
                    timeout: call.timeout,
                    lineage: None,
                    flow: None,
                    priority: crate::graph::Priority::Normal,
                    concurrency: None,
                    budgets: std::sync::Arc::from([]),
                    payload: Order {
                        work: Work::Call(job),
                        sink,
                    },
                })
            }
            Command::Forget { run_id } => self.forget(&run_id),
            Command::GroupConnected { generation, link } => {
                self.group_link = Some((generation, link));
                self.registry.group_connected();
                self.place();
                Vec::new()
            }
            Command::GroupAnswer { generation, answer } => {
                if self
                    .group_link
                    .as_ref()
                    .is_none_or(|(g, _)| *g != generation)
                {
                    return;
                }
                match answer {
                    super::group_flow::Answer::RunAdmitted { ticket } => {
                        self.run_answered(ticket, Ok(ticket));
                    }
                    super::group_flow::Answer::RunRefused { ticket, refusal } => {
                        self.run_answered(ticket, Err(refusal));
                    }
                    answer => {
                        if self.registry.group_answer(answer) {
                            self.place();
                        }
                    }
                }
                Vec::new()
            }
            Command::HoldRuns { runs } => {
                self.registry.hold_runs(runs);
                Vec::new()
            }
            Command::RunningOf { runs, reply } => {
                let _ = reply.send(self.registry.running_of(&runs));
                Vec::new()
            }
            Command::AdmitRun { namespace, reply } => {
                if let Some(gate) = self.registry.gate() {
                    let ticket = gate.admit_run(namespace);
                    self.run_admissions.insert(ticket, reply);
                } else {
                    // Not in a group: nothing counts it but the runs' own
                    // registry.
                    let _ = reply.send(Ok(0));
                }
                Vec::new()
            }
            Command::ReleaseRun { ticket } => {
                if let Some(gate) = self.registry.gate() {
                    gate.release_run(ticket);
                }
                Vec::new()
            }
            Command::Going {
                partition,
                revision,
                counts,
            } => {
                if let Some(gate) = self.registry.gate() {
                    gate.report_going(partition, revision, counts);
                }
                Vec::new()
            }
            Command::PartitionGone { partition } => {
                if let Some(gate) = self.registry.gate() {
                    gate.forget_partition(partition);
                }
                Vec::new()
            }
            Command::Spent {
                namespace,
                tokens,
                cost,
            } => {
                if let Some(gate) = self.registry.gate() {
                    gate.spent(namespace, tokens, cost);
                }
                Vec::new()
            }
            Command::GroupDisconnected { generation } => {
                if self
                    .group_link
                    .as_ref()
                    .is_some_and(|(g, _)| *g == generation)
                {
                    self.group_link = None;
                    self.registry.group_disconnected();
                }
                Vec::new()
            }
            Command::Budget(start) => {
                self.registry.budget(&start);
                Vec::new()
            }
            Command::Windows { reply } => {
                let _ = reply.send(self.registry.windows(now()));
                Vec::new()
            }
            Command::RestoreWindows(kept) => {
                self.registry.restore_windows(&kept, now());
                Vec::new()
            }
            Command::Tell {
                run_id,
                key,
                message,
            } => return self.tell(run_id, key, message),
            Command::Snapshot { reply } => {
                let _ = reply.send(Fleet {
                    workers: self.registry.workers(),
                    functions_ever: self.registry.functions_ever(),
                });
                return;
            }
        };
        self.carry_out(decisions);
        self.place();
    }

    fn forget(&mut self, run_id: &RunId) -> Vec<Decision<Order>> {
        for (&worker, link) in &mut self.links {
            if link.mirror.forget(run_id) {
                let forget = ToWorker::Forget {
                    run_id: run_id.clone(),
                };
                if link.channels.control.try_send(forget).is_err() {
                    debug!(%worker, "could not tell a worker to forget a run");
                }
            }
        }
        self.registry.forget_run(run_id)
    }

    /// Sends `message` to the worker running task `key` of `run_id`. A
    /// teammate message for a task still queued joins the inbox it will
    /// be sent with.
    fn tell(&mut self, run_id: RunId, key: TaskKey, message: ToWorker) {
        let job = JobId {
            run: run_id,
            key: JobKey::Task(key),
        };
        if let Some(worker) = self.registry.held_by(&job) {
            self.control(worker, message);
            return;
        }
        if let ToWorker::Deliver { message, .. } = message
            && let Some(Order {
                work: Work::Task(task),
                ..
            }) = self.registry.queued_payload_mut(&job)
            && let Some(seat) = &mut task.task.team
        {
            seat.inbox.push(message);
        }
    }

    /// Sends a control message to a worker; one whose control path is full
    /// is found out by the next heartbeat.
    fn control(&self, worker: WorkerId, message: ToWorker) {
        if let Some(link) = self.links.get(&worker)
            && link.channels.control.try_send(message).is_err()
        {
            warn!(
                %worker,
                "a teammate message or tool result could not be passed to its worker"
            );
        }
    }

    fn tick(&mut self) {
        let mut lost = Vec::new();
        for (&worker, link) in &self.links {
            match link.channels.control.try_send(ToWorker::Heartbeat) {
                Err(TrySendError::Closed(_)) => lost.push((worker, "stream closed")),
                Err(TrySendError::Full(_)) => lost.push((worker, "not reading its stream")),
                Ok(()) => {}
            }
            let work = &link.channels.work;
            if self.registry.is_jammed(worker) && work.capacity() * 2 >= work.max_capacity() {
                self.registry.unjam(worker);
            }
        }
        let mut decisions = Vec::new();
        for (worker, why) in lost {
            decisions.extend(self.registry.lose(worker, why));
        }
        decisions.extend(self.registry.tick(now()));
        self.carry_out(decisions);
        self.place();
        self.report();
    }

    /// Tells each worker that shares its slots this coordinator's demand,
    /// where it changed since it was last told. A control path that is
    /// full is tried again next time.
    fn tell_demand(&mut self) {
        for (&worker, link) in &mut self.links {
            let Some(queued) = self.registry.demand(worker) else {
                continue;
            };
            if link.demand_told != Some(queued)
                && link
                    .channels
                    .control
                    .try_send(ToWorker::Demand { queued })
                    .is_ok()
            {
                link.demand_told = Some(queued);
            }
        }
    }

    fn place(&mut self) {
        let mut placed = std::mem::take(&mut self.placed);
        self.registry.place_into(now(), &mut placed);
        if !placed.is_empty() {
            placed = self.carry_out(placed);
        }
        self.placed = placed;
    }

    /// Tells whoever waits for a job how it ended: its run, or (a tool
    /// call) the worker whose agent step called it.
    fn tell_ended(&mut self, payload: Order, ended: Ended) {
        let event = match (payload.work, ended) {
            (work @ Work::Tool { .. }, ended) => {
                let result = match ended {
                    Ended::Call(result) => result.map_err(|e| e.0),
                    Ended::Failed(failure) => Err(failure.message),
                    Ended::Task { .. } => return,
                };
                if let Some((caller, answer)) = tool_answer(&work, result) {
                    self.control(caller, answer);
                }
                return;
            }
            (Work::Task(job), Ended::Task { worker, outcome }) => DispatchEvent::TaskFinished {
                key: job.task.key,
                worker,
                outcome,
            },
            (Work::Task(job), Ended::Failed(failure)) => DispatchEvent::TaskFinished {
                key: job.task.key,
                worker: failure.worker.clone().unwrap_or_default(),
                outcome: TaskOutcome {
                    result: Err(failure),
                    read: Vec::new(),
                    noted: Vec::new(),
                },
            },
            (Work::Call(job), Ended::Call(result)) => DispatchEvent::CallReturned {
                call: job.call.call_id,
                result,
            },
            (Work::Call(job), Ended::Failed(failure)) => DispatchEvent::CallReturned {
                call: job.call.call_id,
                result: Err(CallError(failure.message)),
            },
            // A job ends the way its kind does.
            (Work::Task(_), Ended::Call(_)) | (Work::Call(_), Ended::Task { .. }) => return,
        };
        let _ = payload.sink.send(event);
    }

    /// Carries out `decisions` and those they lead to; gives back their
    /// list, emptied, for its room.
    fn carry_out(&mut self, decisions: Vec<Decision<Order>>) -> Vec<Decision<Order>> {
        let mut queue: std::collections::VecDeque<Decision<Order>> = decisions.into();
        while let Some(decision) = queue.pop_front() {
            match decision {
                Decision::Send { worker, job } => {
                    if let Some(closed) = self.send(worker, &job) {
                        queue.extend(self.registry.send_failed(&job, closed, now()));
                    }
                }
                Decision::Unhosted { job, .. } if matches!(job.key, JobKey::Tool(_)) => {
                    // Its host left before taking it: the agent is told at
                    // once rather than left waiting.
                    let gone = || Err("no worker that hosts the tool is connected any more".into());
                    let answer = (self.registry.payload(&job))
                        .and_then(|order| tool_answer(&order.work, gone()));
                    if let Some((caller, answer)) = answer {
                        self.control(caller, answer);
                    }
                    queue.extend(self.registry.cancel(&job.run, &[job.key]));
                }
                Decision::Unhosted {
                    job,
                    label,
                    requirement,
                    namespace,
                } => {
                    if let Some(order) = self.registry.payload(&job) {
                        let _ = order.sink.send(DispatchEvent::TaskUnhosted {
                            job: job.key,
                            node: label.into(),
                            requirement,
                            namespace,
                        });
                    }
                }
                Decision::Requeued { job, worker } => {
                    if let (JobKey::Task(key), Some(order)) = (job.key, self.registry.payload(&job))
                    {
                        let _ = order.sink.send(DispatchEvent::TaskRequeued { key, worker });
                    }
                }
                Decision::Throttled {
                    job,
                    limit,
                    wait,
                    keyed,
                } => {
                    if let (JobKey::Task(key), Some(order)) = (job.key, self.registry.payload(&job))
                    {
                        let label = if keyed {
                            "concurrency_key".to_owned()
                        } else {
                            limit.to_string()
                        };
                        metrics::counter!(crate::metrics::TASKS_THROTTLED, "limit" => label)
                            .increment(1);
                        let _ = order
                            .sink
                            .send(DispatchEvent::TaskThrottled { key, limit, wait });
                    }
                }
                Decision::Permit {
                    worker,
                    job,
                    request_id,
                    outcome,
                } => {
                    if let JobKey::Task(key) = job.key {
                        let answer = ToWorker::Permit {
                            run_id: job.run,
                            key,
                            request_id,
                            outcome,
                        };
                        self.control(worker, answer);
                    }
                }
                Decision::Hosted { job } => {
                    if let Some(order) = self.registry.payload(&job) {
                        let _ = order.sink.send(DispatchEvent::TaskHosted { job: job.key });
                    }
                }
                Decision::Fail { payload, failure } => {
                    warn!(kind = %failure.kind, "{}", failure.message);
                    self.tell_ended(payload, Ended::Failed(failure));
                }
                Decision::Cancel { worker, job } => {
                    if let (Some(link), JobKey::Task(key)) = (self.links.get(&worker), job.key) {
                        let cancel = ToWorker::Cancel {
                            run_id: job.run,
                            key,
                        };
                        if link.channels.control.try_send(cancel).is_err() {
                            debug!(%worker, "could not cancel a task on a worker");
                        }
                    }
                }
                Decision::Disconnect {
                    worker,
                    name,
                    reason,
                } => {
                    if let Some(link) = self.links.remove(&worker) {
                        self.sharing -= usize::from(link.shares);
                    }
                    warn!(%worker, %name, %reason, "worker lost");
                }
            }
        }
        queue.into()
    }

    /// Puts a job on a worker's work path; `Some(closed)` if it could not.
    fn send(&mut self, worker: WorkerId, job: &JobId) -> Option<bool> {
        let order = self.registry.payload(job)?;
        // Only an agent may call tools elsewhere.
        let remote_tools = match &order.work {
            Work::Task(task) if task.task.definition.kind == WorkerKind::Agent => {
                self.remote_tools(job, worker, &task.namespace)
            }
            _ => Vec::new(),
        };
        let flow = self.registry.flow_of(job);
        let link = self.links.get_mut(&worker)?;
        let (message, sent) = match &order.work {
            Work::Task(task) => {
                let (mut wire, sent) = link.mirror.prepare(&task.task);
                let field_bytes: usize = wire
                    .state
                    .iter()
                    .filter_map(|f| f.json.as_ref())
                    .map(|json| json.len())
                    .sum();
                wire.node_ref = link.nodes.prepare(&wire.definition);
                wire.bundle_ref = link.bundles.prepare(&wire.bundle);
                wire.remote_tools = remote_tools;
                wire.flow = flow;
                let kept = ToKeep {
                    node: (wire.definition.clone(), wire.node_ref),
                    bundle: (wire.bundle.clone(), wire.bundle_ref),
                };
                (ToWorker::Task(wire), Some((sent, kept, field_bytes)))
            }
            Work::Call(CallJob { call, .. }) | Work::Tool { call, .. } => {
                (ToWorker::Call(call.clone()), None)
            }
        };
        match link.channels.work.try_send(message) {
            Ok(()) => {
                if let Some((sent, kept, field_bytes)) = sent {
                    link.mirror.sent(&job.run, sent);
                    metrics::counter!(crate::metrics::STATE_BYTES_SENT)
                        .increment(field_bytes as u64);
                    let (definition, node_ref) = kept.node;
                    if !matches!(node_ref, super::KeptRef::Held(_)) {
                        metrics::counter!(crate::metrics::NODE_DEFINITIONS_SENT).increment(1);
                    }
                    link.nodes.sent(&definition, node_ref);
                    let (bundle, bundle_ref) = kept.bundle;
                    if !matches!(bundle_ref, super::KeptRef::Held(_)) {
                        metrics::counter!(crate::metrics::BUNDLE_LISTS_SENT).increment(1);
                    }
                    link.bundles.sent(&bundle, bundle_ref);
                    metrics::counter!(crate::metrics::TASKS_DISPATCHED).increment(1);
                }
                None
            }
            Err(TrySendError::Full(_)) => {
                warn!(
                    %worker,
                    "worker's stream is full; skipping it until it drains"
                );
                Some(false)
            }
            Err(TrySendError::Closed(_)) => Some(true),
        }
    }

    /// The registered tools an agent task calls that `worker` does not host
    /// itself, as the workers that host them describe them.
    fn remote_tools(&self, job: &JobId, worker: WorkerId, namespace: &str) -> Vec<ToolInfo> {
        let Some(requirement) = self.registry.requirement(job) else {
            return Vec::new();
        };
        let hosted = self.registry.info(worker);
        requirement
            .tools()
            .iter()
            .filter(|name| !hosted.is_some_and(|info| info.hosts_tool(name)))
            .filter_map(|name| self.registry.tool(namespace, name).cloned())
            .collect()
    }

    /// Publishes the registry's gauges.
    fn report(&self) {
        use crate::metrics as m;
        let load = self.registry.load();
        metrics::gauge!(m::WORKERS).set(load.workers as f64);
        metrics::gauge!(m::FREE_SLOTS).set(load.free_slots as f64);
        metrics::gauge!(m::QUEUE_DEPTH).set(load.queued as f64);
        metrics::gauge!(m::TASKS_UNHOSTED).set(load.unhosted as f64);
    }
}
