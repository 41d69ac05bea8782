//! One session with a coordinator, once joined: run the tasks it sends,
//! answer its calls, pass teammate messages, send heartbeats, and on
//! shutdown take no more tasks, finish the ones in flight, then leave.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;
use weft_proto::TaskKey;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info};
use weft_proto::RunId;
use weft_proto::types::WorkerKind;

use crate::config::WorkerConfig;
use crate::connection::{Connection, Finder, Inbound, Lost, Outbound, Welcome};
use crate::execute::{Toolbox, call_function, execute};
use crate::handler::Registry;
use crate::hosting::{HostResources, toolbox};
use crate::remote_tools::RemoteTools;
use crate::slot_share::Seat;
use crate::state_sync::{Assignment, StateCache};
use crate::task::{Completed, Failure, FailureKind, Task, TaskReport};
use crate::team::{self, Acks, Team, TeamEnd, TeamMessage};

/// How a session ended.
pub(crate) enum SessionEnd {
    /// Shut down cleanly after draining.
    Drained,
    /// The coordinator went away; connect again.
    Lost(Lost),
    /// A standby coordinator named the leader: join it.
    Redirected(String),
}

/// What a session is run with, beyond its connection.
pub(crate) struct Setup<'a> {
    pub config: &'a WorkerConfig,
    /// Where the coordinator was found: the session ends once etcd names
    /// another leader.
    pub finder: &'a Finder,
    pub local: &'a HostResources,
    pub registry: &'a Arc<Registry>,
    /// Where its tasks are spawned; the worker waits on it before exiting.
    pub tracker: &'a TaskTracker,
    /// The worker's slots: no more of its tasks run at once, whichever
    /// coordinators sent them (one the coordinator timed out may still
    /// be stopping here).
    pub slots: &'a Arc<Semaphore>,
    /// This coordinator's seat, when the worker shares its slots between
    /// several: tasks past its share are handed back.
    pub seat: Option<Arc<Seat>>,
}

/// An attempt's key: its run and its key within the run.
type AttemptId = (RunId, TaskKey);

/// Serves the coordinator on `connection` until it goes away or
/// `shutdown` is cancelled and the tasks in flight are done.
pub(crate) async fn serve(
    setup: Setup<'_>,
    mut connection: Connection,
    welcome: Welcome,
    shutdown: &CancellationToken,
) -> SessionEnd {
    let Setup {
        config,
        finder,
        local,
        registry,
        tracker,
        slots,
        seat,
    } = setup;
    let moved = finder.moved_from_every(&welcome.url, std::time::Duration::from_secs(1));
    tokio::pin!(moved);
    let outbound = connection.outbound();
    let mut session = Session {
        team_sends: connection.team_sends(),
        kinds: Arc::new(toolbox(
            config,
            local,
            registry,
            connection.blobs(),
            Arc::new(RemoteTools::new(connection.tool_calls())),
            Arc::new(crate::llm::Permits::new(
                connection.tool_calls(),
                outbound.clone(),
            )),
            connection.index_shelf(&config.name),
        )),
        worker: config.name.clone(),
        slots: slots.clone(),
        seat,
        outbound: outbound.clone(),
        tracker: tracker.clone(),
        running: HashMap::new(),
        acks: Arc::new(Acks::default()),
        cache: StateCache::default(),
    };
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let (heartbeat, patience) = (welcome.heartbeat, welcome.patience);
    let mut draining = false;
    let mut last_heard = Instant::now();
    let mut ticker = tokio::time::interval(heartbeat);
    loop {
        tokio::select! {
            _ = shutdown.cancelled(), if !draining => {
                info!(worker = %config.name, in_flight = session.running.len(), "draining: finishing tasks in flight");
                draining = true;
                let _ = outbound.send(Outbound::Drain).await;
                if session.running.is_empty() {
                    return leave(session, outbound, connection).await;
                }
            }
            incoming = connection.next() => {
                let message = match incoming {
                    Ok(message) => message,
                    Err(why) => return lost(session.running, why),
                };
                last_heard = Instant::now();
                session.handle(message, draining, &done_tx).await;
            }
            Some(done) = done_rx.recv() => {
                session.running.remove(&done.attempt);
                session.ended_one();
                debug!(run = %done.attempt.0, key = %done.attempt.1, "task done");
                if !done.reported {
                    return lost(session.running, Lost::Unsendable);
                }
                if draining && session.running.is_empty() {
                    return leave(session, outbound, connection).await;
                }
            }
            () = &mut moved => {
                return lost(session.running, Lost::Deposed(welcome.url.clone()));
            }
            _ = ticker.tick() => {
                if last_heard.elapsed() > patience {
                    return lost(session.running, Lost::Silent);
                }
                let _ = outbound.send(Outbound::Heartbeat).await;
            }
        }
    }
}

/// What one connection to the coordinator runs.
struct Session {
    /// Shared by every attempt (one clone per attempt is one count).
    kinds: Arc<Toolbox>,
    /// The worker's name, for its spans.
    worker: String,
    slots: Arc<Semaphore>,
    /// Its seat, when the worker shares its slots between coordinators.
    seat: Option<Arc<Seat>>,
    outbound: mpsc::Sender<Outbound>,
    /// Where its tasks' teammate messages go.
    team_sends: mpsc::Sender<weft_proto::worker_protocol::FromWorker>,
    tracker: TaskTracker,
    /// Tasks started and not yet reported.
    running: HashMap<AttemptId, Running>,
    /// Answers to the teammate messages its tasks send.
    acks: Arc<Acks>,
    cache: StateCache,
}

/// An attempt that ended, its report on its way to the coordinator
/// (queued by the attempt itself, so that it does not wait for this loop
/// to pass it on), unless the connection had closed (`reported` false).
struct Done {
    attempt: AttemptId,
    reported: bool,
}

type DoneSender = mpsc::UnboundedSender<Done>;

/// A task started and not yet reported.
struct Running {
    cancel: CancellationToken,
    /// Where the teammate messages sent to it while it runs go (a handler
    /// with a team).
    deliveries: Option<mpsc::UnboundedSender<TeamMessage>>,
}

impl Session {
    async fn handle(&mut self, message: Inbound, draining: bool, done: &DoneSender) {
        match message {
            Inbound::Task(assignment) if draining => {
                // Sent before the coordinator heard we are leaving: hand it
                // back rather than start what we would not finish.
                info!(worker = %self.worker, run = %assignment.run_id, key = %assignment.key, "draining: handed back a task sent meanwhile");
                self.hand_back(*assignment).await;
            }
            Inbound::Task(assignment) if !self.seat.as_ref().is_none_or(|seat| seat.admit()) => {
                // Sent before the coordinator heard its share was lowered:
                // hand it back for a worker with room.
                debug!(worker = %self.worker, run = %assignment.run_id, key = %assignment.key, "handed back a task past this coordinator's share");
                self.hand_back(*assignment).await;
            }
            Inbound::Task(assignment) => self.start(assignment, done).await,
            Inbound::Demand(queued) => {
                if let Some(seat) = &self.seat {
                    seat.demand(queued);
                }
            }
            Inbound::Cancel { run_id, key } => {
                if let Some(running) = self.running.get(&(run_id, key)) {
                    running.cancel.cancel();
                }
            }
            Inbound::Deliver {
                run_id,
                key,
                message,
            } => {
                if let Some(running) = self.running.get(&(run_id, key))
                    && let Some(deliveries) = &running.deliveries
                {
                    let _ = deliveries.send(message);
                }
            }
            Inbound::SendAnswered { send_id, refusal } => self.acks.answered(send_id, refusal),
            Inbound::ToolAnswered { call_id, answer } => {
                self.kinds.remote_tools.answered(call_id, answer);
            }
            Inbound::PermitAnswered { request_id, answer } => {
                self.kinds.permits.answered(request_id, answer);
            }
            Inbound::Call(call) => {
                // Off the session loop, so a slow function never delays
                // heartbeats or results.
                let (kinds, outbound) = (self.kinds.clone(), self.outbound.clone());
                self.tracker.spawn(async move {
                    let answer = call_function(&kinds, call).await;
                    let _ = outbound.send(Outbound::Answer(answer)).await;
                });
            }
            Inbound::Unreadable(answer) => {
                let _ = self.outbound.send(Outbound::Answer(*answer)).await;
            }
            Inbound::Forget { run_id } => {
                if let Some(python) = &self.kinds.python {
                    python.forget(&run_id);
                }
                self.cache.forget(&run_id);
            }
            Inbound::Alive => {}
        }
    }

    async fn start(&mut self, assignment: Box<Assignment>, done: &DoneSender) {
        let (run_id, key) = (assignment.run_id.clone(), assignment.key);
        let mut task = match self.cache.task(*assignment) {
            Ok(task) => task,
            Err(failure) => {
                let report = TaskReport {
                    run_id,
                    key,
                    outcome: Err(failure),
                    read: Vec::new(),
                };
                let _ = self.outbound.send(Outbound::Report(report)).await;
                self.ended_one();
                return;
            }
        };
        let cancel = CancellationToken::new();
        let span = attempt_span(&task, &self.worker);
        task.traceparent = weft_process::telemetry::traceparent(&span);
        let (team, end) = self.open_team(&task);
        let running = Running {
            cancel: cancel.clone(),
            deliveries: end.as_ref().map(|end| end.deliveries.clone()),
        };
        self.running.insert((run_id, key), running);
        let (kinds, slots, done) = (self.kinds.clone(), self.slots.clone(), done.clone());
        let outbound = self.outbound.clone();
        self.tracker.spawn(async move {
            let attempt = async {
                let _slot = match slots.try_acquire() {
                    Ok(slot) => Some(slot),
                    Err(_) => {
                        // Only when more was sent than the worker has:
                        // a task a coordinator gave up on still stopping.
                        info!("a task waits for a free slot");
                        slots.acquire().await.ok()
                    }
                };
                execute(&kinds, &mut task, team).await
            };
            let outcome = tokio::select! {
                outcome = attempt => outcome,
                _ = cancel.cancelled() => Err(Failure::new(FailureKind::Cancelled, "the coordinator cancelled the task")),
            };
            record_outcome(&tracing::Span::current(), &outcome);
            // A handler says what it read; a script read its whole inbox.
            let read = match end {
                Some(end) => end.read(),
                None => task.team.as_ref().map_or_else(Vec::new, |seat| {
                    seat.inbox.iter().map(|m| m.seq).collect()
                }),
            };
            let attempt = (task.run_id.clone(), task.key);
            let report = TaskReport {
                run_id: task.run_id,
                key: task.key,
                outcome,
                read,
            };
            // Straight to the connection; the session is told after.
            let reported = outbound.send(Outbound::Report(report)).await.is_ok();
            let _ = done.send(Done { attempt, reported });
        }.instrument(span));
    }

    /// Hands a task back unstarted. The state it carried is kept all the
    /// same: the coordinator counts what it sent as held here, and the
    /// run's next task here names those fields' versions only.
    async fn hand_back(&mut self, assignment: Assignment) {
        let (run_id, key) = (assignment.run_id.clone(), assignment.key);
        let _ = self.cache.task(assignment);
        let _ = self.outbound.send(Outbound::Refused { run_id, key }).await;
    }

    /// One of this coordinator's tasks ended here: its slot may go to
    /// another coordinator.
    fn ended_one(&self) {
        if let Some(seat) = &self.seat {
            seat.finished();
        }
    }

    /// A handler's team, opened on the seat its assignment brought; scripts
    /// read their seat on stdin and need none.
    fn open_team(&self, task: &Task) -> (Option<Team>, Option<TeamEnd>) {
        let Some(seat) = task.team.clone() else {
            return (None, None);
        };
        // Handlers and agents take messages as they run.
        if !matches!(task.kind, WorkerKind::Task | WorkerKind::Agent) {
            return (None, None);
        }
        let sender = team::Sender {
            run_id: task.run_id.clone(),
            task_key: task.key,
            outbound: self.team_sends.clone(),
            acks: self.acks.clone(),
        };
        let (team, end) = Team::open(seat, sender);
        (Some(team), Some(end))
    }
}

/// The worker's span of one attempt: a child of the coordinator's node
/// span, whose context the task carries.
fn attempt_span(task: &Task, worker: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "execute",
        run_id = task.run_id.as_str(),
        node = task.node.as_str(),
        kind = task.kind.as_str(),
        attempt = task.attempt,
        item = task.item,
        worker,
        // `00-TRACE-SPAN-FLAGS`: log lines of the attempt carry the trace.
        trace_id = task.traceparent.split('-').nth(1).unwrap_or_default(),
        outcome = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    weft_process::telemetry::set_parent(&span, &task.traceparent);
    span
}

fn record_outcome(span: &tracing::Span, outcome: &Result<Completed, Failure>) {
    match outcome {
        Ok(_) => {
            span.record("outcome", "ok");
        }
        Err(failure) => {
            span.record("outcome", failure.kind.as_str());
            span.record("otel.status_description", failure.message.as_str());
        }
    }
}

/// Leaves after draining. The session's own senders go first: the stream
/// to the coordinator ends only when every sender is gone, and the
/// coordinator closes its side when it sees that end.
async fn leave(
    session: Session,
    outbound: mpsc::Sender<Outbound>,
    connection: Connection,
) -> SessionEnd {
    info!(worker = %session.worker, "drained: leaving the coordinator");
    drop((session, outbound));
    connection.leave().await;
    SessionEnd::Drained
}

/// The coordinator is gone: stop what runs (it will be dispatched again).
fn lost(running: HashMap<AttemptId, Running>, why: Lost) -> SessionEnd {
    for task in running.values() {
        task.cancel.cancel();
    }
    SessionEnd::Lost(why)
}
