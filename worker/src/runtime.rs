//! A worker's life: connect to the coordinator (retrying with backoff while
//! it is away), announce itself, run the tasks it is given, and on shutdown
//! take no more tasks, finish the ones in flight, then leave.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::{Channel, Endpoint};
use tracing::{Instrument, debug, info, warn};
use weft_proto::v1 as pb;
use weft_proto::v1::worker_service_client::WorkerServiceClient;

use crate::discovery::{self, Finder};
use crate::execute::{Toolbox, call_function, execute, task_result};
use crate::handler::Registry;
use crate::hosting::{HostResources, hello, kinds};
use crate::state_sync::StateCache;
use crate::task::{Failure, FailureKind, Task};
use crate::team::{self, Acks, Message, Team, TeamEnd};
use crate::work_dir::WorkDir;
use weft_proto::types::WorkerKind;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a coordinator may take to welcome a joining worker.
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);
/// The work directory's folder of per-attempt scratch directories.
/// How long a stopping worker waits for its tasks to wind down.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The coordinator's URL, e.g. `http://127.0.0.1:7700`.
    pub coordinator: String,
    /// etcd endpoints of a group of coordinators: when given, the worker
    /// joins whichever of them leads (and `coordinator` is not used).
    pub etcd: Vec<String>,
    /// The worker's name.
    pub name: String,
    /// Tasks run at once.
    pub slots: u32,
    /// Free-form labels.
    pub labels: Vec<(String, String)>,
    /// Whether this worker runs `script` nodes.
    pub scripts: bool,
    /// Where scratch directories and the file cache live; `None` for a
    /// fresh private directory removed on exit.
    pub work_dir: Option<PathBuf>,
    /// The worker's secrets, for `${NAME}` in node configuration.
    pub secrets: Arc<crate::Secrets>,
    /// Gains a permit each time the worker joins a coordinator.
    pub joined: Option<std::sync::Arc<tokio::sync::Semaphore>>,
    /// Model providers for `llm` and `agent` steps (none: not hosted).
    pub providers: Arc<crate::llm::Providers>,
    /// How Python is run (`function` nodes, Python names).
    pub python: crate::python::PythonSettings,
}

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The coordinator refused this worker (e.g. protocol version).
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    /// The coordinator URL is malformed.
    #[error("invalid coordinator URL '{url}': {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The work directory cannot be prepared.
    #[error("cannot prepare the work directory: {0}")]
    WorkDir(#[from] std::io::Error),
}

enum SessionEnd {
    /// Shut down cleanly after draining.
    Drained,
    /// The coordinator went away; connect again.
    Lost(String),
    /// A standby coordinator named the leader: join it.
    Redirected(String),
}

/// Runs the worker until `shutdown` is cancelled and its tasks are done.
pub async fn run(
    config: WorkerConfig,
    registry: Registry,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    let finder = Finder::new(&config)?;
    let work = WorkDir::prepare(config.work_dir.as_deref())?;
    // Scratch left by an earlier worker that died is nobody's.
    let _ = tokio::fs::remove_dir_all(work.scratch()).await;
    let _ = tokio::fs::remove_dir_all(work.python()).await;
    let local = HostResources::new(&config, work).await;
    let tracker = TaskTracker::new();
    let ended = connect_and_serve(
        &config,
        &local,
        &finder,
        Arc::new(registry),
        &shutdown,
        &tracker,
    )
    .await;
    tracker.close();
    if tokio::time::timeout(STOP_TIMEOUT, tracker.wait())
        .await
        .is_err()
    {
        warn!(worker = %config.name, left = tracker.len(), "some tasks did not stop in time");
    }
    // Dropping the pools kills their Python processes.
    drop(local.python);
    local.work.clean_up();
    ended
}

/// Sessions with the coordinator, one after another, until shutdown.
async fn connect_and_serve(
    config: &WorkerConfig,
    local: &HostResources,
    finder: &Finder,
    registry: Arc<Registry>,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<(), WorkerError> {
    let mut backoff = FIRST_BACKOFF;
    let mut redirect: Option<String> = None;
    let mut followed = false;
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let started = Instant::now();
        // A redirect is followed once; after that the finder decides again.
        let target = match redirect.take() {
            Some(url) => discovery::endpoint(&url).map_err(|e| e.to_string()),
            None => finder.find().await,
        };
        let ended = match target {
            Ok(endpoint) => {
                let place = Place {
                    finder,
                    endpoint: &endpoint,
                };
                session(config, local, place, &registry, shutdown, tracker).await?
            }
            Err(why) => SessionEnd::Lost(why),
        };
        match ended {
            SessionEnd::Drained => return Ok(()),
            // Followed at once, unless the last session was a redirect
            // too (coordinators that disagree on who leads, mid-election).
            SessionEnd::Redirected(url) => {
                info!(worker = %config.name, leader = %url, "sent to the leading coordinator");
                let again = std::mem::replace(&mut followed, true);
                redirect = Some(url);
                if !again {
                    continue;
                }
            }
            SessionEnd::Lost(why) => {
                warn!(worker = %config.name, reason = %why, "lost the coordinator; reconnecting");
                followed = false;
                if started.elapsed() > MAX_BACKOFF {
                    backoff = FIRST_BACKOFF;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(finder.max_backoff());
    }
}

/// Where a session connects, and how the worker found it.
struct Place<'a> {
    finder: &'a Finder,
    endpoint: &'a Endpoint,
}

async fn session(
    config: &WorkerConfig,
    local: &HostResources,
    Place { finder, endpoint }: Place<'_>,
    registry: &Arc<Registry>,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<SessionEnd, WorkerError> {
    let channel = match endpoint.connect().await {
        Ok(channel) => channel,
        Err(error) => return Ok(SessionEnd::Lost(format!("cannot connect: {error}"))),
    };
    let mut client = client(channel);
    let (outbound, rx) = mpsc::channel::<pb::WorkerMessage>(1024);
    let hello = hello(config, registry, local.python.is_some());
    let _ = outbound
        .send(message(pb::worker_message::Body::Hello(hello)))
        .await;
    let url = endpoint.uri().to_string();
    let (mut inbound, heartbeat, max_result_bytes) =
        match join(config, &mut client, rx, finder, &url).await? {
            Ok(joined) => joined,
            Err(end) => return Ok(end),
        };
    let mut session = Session {
        kinds: kinds(config, local, registry, &client),
        worker: config.name.clone(),
        // A task the coordinator timed out may still stop here: wait for it.
        slots: Arc::new(Semaphore::new(config.slots as usize)),
        outbound: outbound.clone(),
        tracker: tracker.clone(),
        running: HashMap::new(),
        acks: Arc::new(Acks::default()),
        cache: StateCache::default(),
        max_result_bytes,
    };
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<((String, u64), pb::TaskResult)>();
    let mut draining = false;
    let mut last_heard = Instant::now();
    let mut ticker = tokio::time::interval(heartbeat);
    loop {
        tokio::select! {
            _ = shutdown.cancelled(), if !draining => {
                info!(worker = %config.name, in_flight = session.running.len(), "draining: finishing tasks in flight");
                draining = true;
                let _ = outbound.send(message(pb::worker_message::Body::Drain(pb::Drain {}))).await;
                if session.running.is_empty() {
                    return Ok(leave(outbound, inbound).await);
                }
            }
            incoming = inbound.message() => {
                let body = match incoming {
                    Ok(Some(pb::CoordinatorMessage { body: Some(body) })) => body,
                    Ok(Some(_)) => continue,
                    Ok(None) => return lost(session.running, "the coordinator closed the stream"),
                    Err(status) => return lost(session.running, status.message()),
                };
                last_heard = Instant::now();
                session.handle(body, draining, &done_tx).await;
            }
            Some((id, result)) = done_rx.recv() => {
                session.running.remove(&id);
                debug!(run = %id.0, key = id.1, "task done");
                if outbound.send(message(pb::worker_message::Body::Result(result))).await.is_err() {
                    return lost(session.running, "the stream to the coordinator closed");
                }
                if draining && session.running.is_empty() {
                    return Ok(leave(outbound, inbound).await);
                }
            }
            _ = ticker.tick() => {
                if last_heard.elapsed() > heartbeat * 5 {
                    return lost(session.running, "the coordinator stopped sending heartbeats");
                }
                let beat = pb::Heartbeat { at_unix_ms: 0 };
                let _ = outbound.send(message(pb::worker_message::Body::Heartbeat(beat))).await;
            }
        }
    }
}

/// Joins the coordinator at `url`: the handshake, bounded. A coordinator
/// that accepts connections but does not answer (a stopped process) is
/// given up on like one that refuses, and so is one that etcd stops naming
/// as the leader meanwhile.
async fn join(
    config: &WorkerConfig,
    client: &mut WorkerServiceClient<Channel>,
    rx: mpsc::Receiver<pb::WorkerMessage>,
    finder: &Finder,
    url: &str,
) -> Result<Result<Joined, SessionEnd>, WorkerError> {
    let handshake = tokio::time::timeout(JOIN_TIMEOUT, handshake(config, client, rx));
    tokio::select! {
        joined = handshake => joined.unwrap_or_else(|_| {
            Ok(Err(SessionEnd::Lost(format!(
                "the coordinator did not welcome this worker within {JOIN_TIMEOUT:?}"
            ))))
        }),
        () = finder.moved_from(url) => {
            Ok(Err(SessionEnd::Lost(format!("{url} no longer leads its group"))))
        }
    }
}

/// A joined session: the stream, the heartbeat interval, and the largest
/// result the coordinator takes.
type Joined = (tonic::Streaming<pb::CoordinatorMessage>, Duration, usize);

/// Opens the stream (the hello is already queued) and waits for the
/// welcome: the stream and the heartbeat interval, or why the session ends.
async fn handshake(
    config: &WorkerConfig,
    client: &mut WorkerServiceClient<Channel>,
    rx: mpsc::Receiver<pb::WorkerMessage>,
) -> Result<Result<Joined, SessionEnd>, WorkerError> {
    let mut inbound = match client.join(ReceiverStream::new(rx)).await {
        Ok(response) => response.into_inner(),
        Err(status)
            if status.code() == tonic::Code::FailedPrecondition
                || status.code() == tonic::Code::InvalidArgument =>
        {
            return Err(WorkerError::Refused(status.message().to_owned()));
        }
        Err(status) => {
            return Ok(Err(match discovery::redirect(&status) {
                Some(leader) => SessionEnd::Redirected(leader),
                None => SessionEnd::Lost(status.message().to_owned()),
            }));
        }
    };
    match inbound.message().await {
        Ok(Some(pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Welcome(welcome)),
        })) => {
            info!(worker = %config.name, id = %welcome.worker_id, "joined the coordinator");
            if let Some(joined) = &config.joined {
                joined.add_permits(1);
            }
            let heartbeat = Duration::from_millis(welcome.heartbeat_interval_ms.max(50));
            let max_result_bytes = match welcome.max_result_bytes {
                0 => usize::MAX,
                n => usize::try_from(n).unwrap_or(usize::MAX),
            };
            Ok(Ok((inbound, heartbeat, max_result_bytes)))
        }
        Ok(_) => Ok(Err(SessionEnd::Lost(
            "the coordinator sent no welcome".into(),
        ))),
        Err(status) => Ok(Err(SessionEnd::Lost(status.message().to_owned()))),
    }
}

/// What one connection to the coordinator runs.
struct Session {
    kinds: Toolbox,
    /// The worker's name, for its spans.
    worker: String,
    slots: Arc<Semaphore>,
    outbound: mpsc::Sender<pb::WorkerMessage>,
    tracker: TaskTracker,
    /// Tasks started and not yet reported.
    running: HashMap<(String, u64), Running>,
    /// Answers to the teammate messages its tasks send.
    acks: Arc<Acks>,
    cache: StateCache,
    /// Largest result the coordinator takes (`usize::MAX`: not said).
    max_result_bytes: usize,
}

type Done = mpsc::UnboundedSender<((String, u64), pb::TaskResult)>;

/// A task started and not yet reported.
struct Running {
    cancel: CancellationToken,
    /// Where the teammate messages sent to it while it runs go (a handler
    /// with a team).
    deliveries: Option<mpsc::UnboundedSender<Message>>,
}

impl Session {
    async fn handle(&mut self, body: pb::coordinator_message::Body, draining: bool, done: &Done) {
        use pb::coordinator_message::Body;
        match body {
            Body::Task(assignment) if draining => {
                // Sent before the coordinator heard we are leaving: hand it
                // back rather than start what we would not finish.
                let refused = pb::TaskRefused {
                    run_id: assignment.run_id,
                    task_key: assignment.task_key,
                };
                let _ = self
                    .outbound
                    .send(message(pb::worker_message::Body::Refused(refused)))
                    .await;
            }
            Body::Task(assignment) => self.start(assignment, done).await,
            Body::Cancel(cancel) => {
                if let Some(running) = self.running.get(&(cancel.run_id, cancel.task_key)) {
                    running.cancel.cancel();
                }
            }
            Body::Deliver(delivery) => {
                let id = (delivery.run_id, delivery.task_key);
                if let (Some(running), Some(message)) = (self.running.get(&id), delivery.message)
                    && let Some(deliveries) = &running.deliveries
                {
                    let _ = deliveries.send(Message::from_wire(message));
                }
            }
            Body::SendAck(ack) => self.acks.answered(ack.send_id, ack.error),
            Body::Call(call) => {
                // Off the session loop, so a slow function never delays
                // heartbeats or results.
                let (kinds, outbound) = (self.kinds.clone(), self.outbound.clone());
                self.tracker.spawn(async move {
                    let result = call_function(&kinds, call).await;
                    let _ = outbound
                        .send(message(pb::worker_message::Body::CallResult(result)))
                        .await;
                });
            }
            Body::Forget(forget) => {
                if let Some(python) = &self.kinds.python {
                    python.forget(&forget.run_id);
                }
                self.cache.forget(&forget.run_id);
            }
            Body::Heartbeat(_) | Body::Welcome(_) => {}
        }
    }

    async fn start(&mut self, assignment: pb::TaskAssignment, done: &Done) {
        let (run_id, key) = (assignment.run_id.clone(), assignment.task_key);
        let mut task = match self.cache.task(assignment) {
            Ok(task) => task,
            Err(failure) => {
                let result = task_result(
                    &run_id,
                    key,
                    (Err(failure), Vec::new()),
                    self.max_result_bytes,
                );
                let _ = self
                    .outbound
                    .send(message(pb::worker_message::Body::Result(result)))
                    .await;
                return;
            }
        };
        let id = (run_id, key);
        let cancel = CancellationToken::new();
        let span = attempt_span(&task, &self.worker);
        task.traceparent = weft_process::telemetry::traceparent(&span);
        let (team, end) = self.open_team(&task);
        let running = Running {
            cancel: cancel.clone(),
            deliveries: end.as_ref().map(|end| end.deliveries.clone()),
        };
        self.running.insert(id.clone(), running);
        let (kinds, slots, done) = (self.kinds.clone(), self.slots.clone(), done.clone());
        let limit = self.max_result_bytes;
        self.tracker.spawn(async move {
            let attempt = async {
                let _slot = slots.acquire().await;
                execute(&kinds, &mut task, team).await
            };
            let result = tokio::select! {
                result = attempt => result,
                _ = cancel.cancelled() => Err(Failure::new(FailureKind::Cancelled, "the coordinator cancelled the task")),
            };
            record_outcome(&tracing::Span::current(), &result);
            // A handler says what it read; a script read its whole inbox.
            let read = match end {
                Some(end) => end.read(),
                None => task.team.as_ref().map_or_else(Vec::new, |seat| {
                    seat.inbox.iter().map(|m| m.seq).collect()
                }),
            };
            let result = task_result(&task.run_id, task.key, (result, read), limit);
            let _ = done.send((id, result));
        }.instrument(span));
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

fn record_outcome(span: &tracing::Span, result: &Result<crate::task::Completed, Failure>) {
    match result {
        Ok(_) => {
            span.record("outcome", "ok");
        }
        Err(failure) => {
            span.record("outcome", failure.kind.as_str());
            span.record("otel.status_description", failure.message.as_str());
        }
    }
}

impl Session {
    /// A handler's team, opened on the seat its assignment brought; scripts
    /// read their seat on stdin and need none.
    fn open_team(&self, task: &Task) -> (Option<Team>, Option<TeamEnd>) {
        let Some(seat) = task.team.clone() else {
            return (None, None);
        };
        // Handlers and agents take messages as they run.
        if task.kind != WorkerKind::Task.as_str() && task.kind != WorkerKind::Agent.as_str() {
            return (None, None);
        }
        let sender = team::Sender {
            run_id: task.run_id.clone(),
            task_key: task.key,
            outbound: self.outbound.clone(),
            acks: self.acks.clone(),
        };
        let (team, end) = Team::open(seat, sender);
        (Some(team), Some(end))
    }
}

/// Leaves after draining: closing our side of the stream and waiting for
/// the coordinator to close its side guarantees the last results arrived
/// before the worker counts as gone.
async fn leave(
    outbound: mpsc::Sender<pb::WorkerMessage>,
    mut inbound: tonic::Streaming<pb::CoordinatorMessage>,
) -> SessionEnd {
    drop(outbound);
    let closed = async { while let Ok(Some(_)) = inbound.message().await {} };
    let _ = tokio::time::timeout(Duration::from_secs(10), closed).await;
    SessionEnd::Drained
}

/// The coordinator is gone: stop what runs (it will be dispatched again).
fn lost(running: HashMap<(String, u64), Running>, why: &str) -> Result<SessionEnd, WorkerError> {
    for task in running.values() {
        task.cancel.cancel();
    }
    Ok(SessionEnd::Lost(why.to_owned()))
}

fn client(channel: Channel) -> WorkerServiceClient<Channel> {
    WorkerServiceClient::new(channel)
        .max_decoding_message_size(weft_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(weft_proto::MAX_MESSAGE_BYTES)
}

fn message(body: pb::worker_message::Body) -> pb::WorkerMessage {
    pb::WorkerMessage { body: Some(body) }
}
