//! The worker-facing service: one long-lived stream per worker.
//!
//! What goes down a worker's stream comes from two paths of the dispatcher:
//! control messages (heartbeat, forget, cancel, teammate deliveries) are
//! forwarded before queued work, so a backlog of calls never holds back a
//! heartbeat — except that one naming a task waits for the work queued
//! before it, where that task may be.
//!
//! Both ways, what is queued when a message goes goes with it: tasks
//! waiting behind the one sent travel as one `TaskBatch` to a worker that
//! says it takes them, and a worker sends the results it has as one
//! `ResultBatch` once the welcome says how many a batch may hold. Under
//! load a message then carries many tasks; idle, each goes at once.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};
use weft_proto::v1 as pb;
use weft_proto::v1::worker_service_server::WorkerService;
use weft_proto::worker_protocol::wire;
use weft_proto::{BATCH_BYTES, PROTOCOL_VERSION};

use crate::bundle::BlobStore;
use crate::dispatch::{
    DispatcherHandle, JoinRefused, TaskAssignment, ToWorker, WorkerInfo, WorkerLink,
};
use crate::ha::member::Member;
use crate::ha::partition_runs::PartitionRuns;
use crate::indexes::SharedIndexes;
use crate::runs::Runs;
use crate::term::Services;

use super::share_index;

/// Tasks and calls queued for one worker's stream; a full queue marks the
/// worker jammed.
const WORK_QUEUE: usize = 1024;
/// Control messages queued for one worker; a full queue means the worker
/// does not read its stream at all, and it is dropped.
const CONTROL_QUEUE: usize = 4096;

/// The worker service over the dispatcher.
#[derive(Clone)]
pub struct WorkerApi {
    dispatcher: DispatcherHandle,
    blobs: BlobStore,
    indexes: SharedIndexes,
    runs: RunsHeld,
    heartbeat: Duration,
    /// How long a silent worker keeps its tasks, told to each worker so
    /// that it holds on at least as long.
    worker_timeout: Duration,
    /// Largest task result taken, told to each worker in its welcome.
    max_result_bytes: usize,
    tracker: TaskTracker,
}

impl WorkerApi {
    /// Serves a term's workers; the streams' tasks run on its tracker.
    pub fn new(term: &Services) -> Self {
        Self {
            dispatcher: term.dispatcher.clone(),
            blobs: term.blobs.clone(),
            indexes: term.indexes.clone(),
            runs: RunsHeld::One(Box::new(term.runs.clone())),
            heartbeat: term.heartbeat,
            worker_timeout: term.worker_timeout,
            tracker: term.tracker.clone(),
            max_result_bytes: term.max_result_bytes,
        }
    }

    /// Serves a member of a partitioned group's workers (every member
    /// takes workers: they serve them all).
    pub fn for_member(member: &Member) -> Self {
        Self {
            dispatcher: member.dispatcher.clone(),
            blobs: member.blobs.clone(),
            indexes: member.indexes.clone(),
            runs: RunsHeld::Partitions(member.partitions.clone()),
            heartbeat: member.heartbeat,
            worker_timeout: member.worker_timeout,
            tracker: member.tracker.clone(),
            max_result_bytes: member.max_result_bytes,
        }
    }
}

/// Where the worker service finds a run (the one an index is shared for).
#[derive(Clone)]
enum RunsHeld {
    /// A leader's runs.
    One(Box<Runs>),
    /// The runs of the partitions a member leads.
    Partitions(PartitionRuns),
}

impl RunsHeld {
    fn get(&self, id: &str) -> Option<crate::run_actor::RunHandle> {
        match self {
            Self::One(runs) => runs.get(id),
            Self::Partitions(partitions) => partitions.route(id)?.get(id),
        }
    }
}

pub(crate) type IndexStream = Pin<Box<dyn Stream<Item = Result<pb::IndexDownload, Status>> + Send>>;

pub(crate) type OutStream =
    Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, Status>> + Send>>;

/// Hands a worker's messages to the dispatcher until its stream ends, then
/// reports the worker gone. A batch of results is handed over result by
/// result.
async fn read_worker(
    mut inbound: Streaming<pb::WorkerMessage>,
    dispatcher: DispatcherHandle,
    worker: crate::dispatch::WorkerId,
) {
    // The run of the last result read: the next of the same run shares
    // its id.
    let mut last = wire::LastRun::default();
    while let Some(Ok(message)) = inbound.next().await {
        for message in wire::unbatched(message) {
            // A large result is parsed off the async threads (in order:
            // the next message waits for it).
            let parsed = if wire::is_large(&message) {
                tokio::task::spawn_blocking(move || {
                    wire::read_worker_message(message, &mut wire::LastRun::default())
                })
                .await
                .ok()
                .flatten()
            } else {
                wire::read_worker_message(message, &mut last)
            };
            if let Some(message) = parsed {
                dispatcher.message(worker, message);
            }
        }
    }
    dispatcher.leave(worker);
}

/// Tasks queued behind the one being sent go with it, as one message, up
/// to this many, or until their texts come to `weft_proto::BATCH_BYTES`.
const MAX_BATCH: usize = 64;

/// A worker's stream: its welcome, then control first and work after.
/// For a worker that takes batches, a task and the tasks queued behind it
/// go as one message.
///
/// It is polled by the stream's own connection as it sends, straight
/// from the dispatcher's two queues: no task between them and the
/// connection, so a task the dispatcher queues wakes the connection that
/// sends it, not a forwarding task that wakes it in turn.
///
/// A control message that names a task (a teammate delivery, a cancel)
/// waits for the work queued before it: the dispatcher queues a task
/// before it tells it anything, so the task it names may be in that queue,
/// and a worker drops what names a task it has not been given. The queue
/// holds no more than the worker's free slots and its calls. The stream
/// ends when the dispatcher drops the worker (both queues closed).
struct Outgoing {
    welcome: Option<pb::CoordinatorMessage>,
    control: mpsc::Receiver<ToWorker>,
    work: mpsc::Receiver<ToWorker>,
    batches: bool,
    /// A message taken from the queue that did not fit the last batch.
    held: Option<ToWorker>,
    /// A control message waiting for the work queued before it.
    waiting: Option<ToWorker>,
}

impl Outgoing {
    fn new(
        welcome: Option<pb::CoordinatorMessage>,
        control: mpsc::Receiver<ToWorker>,
        work: mpsc::Receiver<ToWorker>,
        batches: bool,
    ) -> Self {
        Self {
            welcome,
            control,
            work,
            batches,
            held: None,
            waiting: None,
        }
    }

    /// The next message to send, control first; `None` once both queues
    /// are closed and read.
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<ToWorker>> {
        loop {
            if let Some(message) = self.held.take() {
                return Poll::Ready(Some(message));
            }
            if let Some(told) = self.waiting.take() {
                return Poll::Ready(Some(match self.work.try_recv() {
                    Ok(earlier) => {
                        self.waiting = Some(told);
                        earlier
                    }
                    Err(_) => told,
                }));
            }
            let control = self.control.poll_recv(cx);
            if let Poll::Ready(Some(message)) = control {
                if names_task(&message) {
                    self.waiting = Some(message);
                    continue;
                }
                return Poll::Ready(Some(message));
            }
            return match (control, self.work.poll_recv(cx)) {
                (_, Poll::Ready(Some(message))) => Poll::Ready(Some(message)),
                (Poll::Ready(None), Poll::Ready(None)) => Poll::Ready(None),
                _ => Poll::Pending,
            };
        }
    }
}

impl Stream for Outgoing {
    type Item = Result<pb::CoordinatorMessage, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(welcome) = this.welcome.take() {
            return Poll::Ready(Some(Ok(welcome)));
        }
        let Some(message) = ready!(this.poll_message(cx)) else {
            return Poll::Ready(None);
        };
        let message = match message {
            ToWorker::Task(task) if this.batches => {
                let (tasks, next) = gather(task, &mut this.work);
                this.held = next;
                wire::task_batch(tasks)
            }
            other => other.into(),
        };
        Poll::Ready(Some(Ok(message)))
    }
}

/// Whether `message` is about one task, which must reach the worker first.
fn names_task(message: &ToWorker) -> bool {
    matches!(message, ToWorker::Deliver { .. } | ToWorker::Cancel { .. })
}

/// `first` and the tasks queued behind it, as many as make a batch, and
/// the message after them when one was taken that does not belong in it.
fn gather(
    first: TaskAssignment,
    work: &mut mpsc::Receiver<ToWorker>,
) -> (Vec<TaskAssignment>, Option<ToWorker>) {
    let mut bytes = weight(&first);
    let mut tasks = vec![first];
    while tasks.len() < MAX_BATCH {
        match work.try_recv() {
            Ok(ToWorker::Task(task)) => {
                let size = weight(&task);
                if bytes + size > BATCH_BYTES {
                    return (tasks, Some(ToWorker::Task(task)));
                }
                bytes += size;
                tasks.push(task);
            }
            Ok(other) => return (tasks, Some(other)),
            Err(_) => break,
        }
    }
    (tasks, None)
}

/// About how many bytes a task takes on the wire: its texts.
fn weight(task: &TaskAssignment) -> usize {
    let values: usize = task
        .state
        .iter()
        .map(|field| field.name.len() + field.json.as_deref().map_or(0, str::len))
        .sum();
    use weft_proto::worker_protocol::KeptRef::Held;
    let definition = match task.node_ref {
        Held(_) => 0,
        _ => task.definition.config_json.len(),
    };
    let bundle = match task.bundle_ref {
        Held(_) => 0,
        _ => task
            .bundle
            .iter()
            .map(|file| file.path.len() + file.sha256.len())
            .sum(),
    };
    values + definition + bundle + task.scope_json.len() + task.prompts_json.len()
}

/// Why a worker was not let in.
#[derive(Debug, thiserror::Error)]
enum JoinError {
    /// The stream did not start with a hello.
    #[error("a worker's first message must be its hello")]
    NoHello,
    /// The worker speaks another protocol version.
    #[error(
        "worker '{name}' speaks protocol version {version}, but this coordinator speaks version {PROTOCOL_VERSION}; upgrade the worker or the coordinator so they match"
    )]
    Protocol {
        /// The worker's name.
        name: String,
        /// Its version.
        version: u32,
    },
    /// The worker announced no slot.
    #[error("worker '{0}' announced 0 slots")]
    NoSlots(String),
    /// A worker that shares its slots gave a share larger than its slots.
    #[error(
        "worker '{name}' gave this coordinator a share of {share} slots, more than its {slots} in all (shared_slots)"
    )]
    ShareAboveSlots {
        /// The worker's name.
        name: String,
        /// The share it gave.
        share: u32,
        /// Its slots in all.
        slots: u32,
    },
    /// The dispatcher refused it.
    #[error(transparent)]
    Refused(JoinRefused),
}

impl From<JoinError> for Status {
    fn from(error: JoinError) -> Self {
        let message = error.to_string();
        match error {
            JoinError::NoHello | JoinError::NoSlots(_) | JoinError::ShareAboveSlots { .. } => {
                Status::invalid_argument(message)
            }
            JoinError::Protocol { .. } => Status::failed_precondition(message),
            JoinError::Refused(JoinRefused::ShuttingDown(_)) => Status::unavailable(message),
            JoinError::Refused(JoinRefused::NameTaken(_)) => Status::already_exists(message),
        }
    }
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    type JoinStream = OutStream;

    async fn join(
        &self,
        request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<OutStream>, Status> {
        let caller = super::principal(&request)?;
        let mut inbound = request.into_inner();
        let hello = match inbound.next().await {
            Some(Ok(pb::WorkerMessage {
                body: Some(pb::worker_message::Body::Hello(hello)),
            })) => hello,
            Some(Err(status)) => return Err(status),
            _ => return Err(JoinError::NoHello.into()),
        };
        if hello.protocol_version != PROTOCOL_VERSION {
            return Err(JoinError::Protocol {
                name: hello.name,
                version: hello.protocol_version,
            }
            .into());
        }
        // A worker that shares its slots may start with no share here.
        if hello.slots == 0 && hello.shared_slots == 0 {
            return Err(JoinError::NoSlots(hello.name).into());
        }
        if hello.shared_slots > 0 && hello.slots > hello.shared_slots {
            return Err(JoinError::ShareAboveSlots {
                name: hello.name,
                share: hello.slots,
                slots: hello.shared_slots,
            }
            .into());
        }
        let (work, work_rx) = mpsc::channel(WORK_QUEUE);
        let (control, control_rx) = mpsc::channel(CONTROL_QUEUE);
        let batches = hello.takes_batches;
        let info = WorkerInfo {
            hello: hello.into(),
            // A worker's identity, not what it says, may restrict it to
            // some namespaces' tasks.
            namespaces: caller.worker_namespaces.clone(),
        };
        let worker = self
            .dispatcher
            .join(info, WorkerLink { work, control })
            .await
            .map_err(JoinError::Refused)?;
        self.tracker
            .spawn(read_worker(inbound, self.dispatcher.clone(), worker));
        let (heartbeat, worker_timeout) = (self.heartbeat, self.worker_timeout);
        let max_result_bytes = self.max_result_bytes;
        let welcome = pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Welcome(pb::Welcome {
                worker_id: worker.to_string(),
                heartbeat_interval_ms: heartbeat.as_millis() as u64,
                max_result_bytes: max_result_bytes as u64,
                max_batch: MAX_BATCH as u32,
                worker_timeout_ms: worker_timeout.as_millis() as u64,
            })),
        };
        Ok(Response::new(Box::pin(Outgoing::new(
            Some(welcome),
            control_rx,
            work_rx,
            batches,
        ))))
    }

    async fn fetch_blob(
        &self,
        request: Request<pb::FetchBlobRequest>,
    ) -> Result<Response<pb::FetchBlobResponse>, Status> {
        let caller = super::principal(&request)?;
        let sha256 = request.into_inner().sha256;
        let serves = |namespace: &str| {
            caller
                .worker_namespaces
                .as_ref()
                .is_none_or(|served| served.iter().any(|n| n == namespace))
        };
        let content = self
            .blobs
            .get(&sha256, serves)
            .ok_or_else(|| Status::not_found(format!("no bundle file with sha256 {sha256}")))?;
        Ok(Response::new(pb::FetchBlobResponse {
            content: content.to_vec(),
        }))
    }

    type ShareIndexStream = IndexStream;

    async fn share_index(
        &self,
        request: Request<Streaming<pb::IndexUpload>>,
    ) -> Result<Response<IndexStream>, Status> {
        let caller = super::principal(&request)?;
        let mut inbound = request.into_inner();
        let want = match inbound.next().await {
            Some(Ok(pb::IndexUpload {
                body: Some(pb::index_upload::Body::Want(want)),
            })) => want,
            Some(Err(status)) => return Err(status),
            _ => {
                return Err(Status::invalid_argument(
                    "ShareIndex: the first message must say which index is wanted",
                ));
            }
        };
        share_index::check(&want)?;
        // The run's namespace, not the worker's word, says whose index it is.
        let run = self
            .runs
            .get(&want.run_id)
            .ok_or_else(|| super::unknown_run(&want.run_id))?;
        let namespace = run.namespace().to_owned();
        let serves = caller
            .worker_namespaces
            .as_ref()
            .is_none_or(|served| served.contains(&namespace));
        if !serves {
            return Err(Status::permission_denied(format!(
                "worker identity '{}' does not serve namespace '{namespace}'",
                caller.name
            )));
        }
        let wanted = share_index::Wanted {
            namespace,
            run_id: want.run_id,
            key: want.key,
            knowledge: want.knowledge,
            worker: want.worker,
            time: Duration::from_millis(want.timeout_ms),
        };
        let (tx, rx) = mpsc::channel(4);
        self.tracker.spawn(share_index::serve(
            self.indexes.clone(),
            wanted,
            inbound,
            tx,
        ));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::grpc::state_sync_tests::task;

    fn queued(messages: Vec<ToWorker>) -> mpsc::Receiver<ToWorker> {
        let (tx, rx) = mpsc::channel(messages.len().max(1));
        for message in messages {
            tx.try_send(message).unwrap();
        }
        rx
    }

    /// What a worker's stream sends for the messages queued on each path
    /// before it is read: the task keys of each message, `None` for one that
    /// carries no task.
    async fn forwarded(
        control: Vec<ToWorker>,
        work: Vec<ToWorker>,
        batches: bool,
    ) -> Vec<Option<Vec<u64>>> {
        // The dispatcher is gone: the stream ends once both queues are
        // read.
        let sent: Vec<_> = Outgoing::new(None, queued(control), queued(work), batches)
            .collect()
            .await;
        let mut out = Vec::new();
        for message in sent {
            let message = message.expect("sent");
            use pb::coordinator_message::Body;
            out.push(match message.body {
                Some(Body::Task(task)) => Some(vec![task.task_key]),
                Some(Body::Tasks(batch)) => {
                    Some(batch.tasks.iter().map(|t| t.rest.task_key).collect())
                }
                _ => None,
            });
        }
        out
    }

    async fn sent(work: Vec<ToWorker>, batches: bool) -> Vec<Option<Vec<u64>>> {
        forwarded(Vec::new(), work, batches).await
    }

    fn tasks(keys: std::ops::Range<u64>) -> Vec<ToWorker> {
        keys.map(|key| ToWorker::Task(task(&BTreeMap::new(), key)))
            .collect()
    }

    #[tokio::test]
    async fn queued_tasks_go_as_one_batch_in_order_and_what_follows_after_them() {
        let mut work = tasks(1..4);
        work.push(ToWorker::Forget {
            run_id: "run".into(),
        });
        work.extend(tasks(4..6));
        assert_eq!(
            sent(work, true).await,
            [Some(vec![1, 2, 3]), None, Some(vec![4, 5])]
        );
    }

    #[tokio::test]
    async fn a_worker_that_takes_no_batches_gets_one_task_per_message() {
        assert_eq!(
            sent(tasks(1..4), false).await,
            [Some(vec![1]), Some(vec![2]), Some(vec![3])]
        );
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_its_count_and_its_bytes() {
        let many = MAX_BATCH as u64 + 3;
        let batches = sent(tasks(0..many), true).await;
        let sizes: Vec<_> = batches.iter().map(|b| b.as_ref().unwrap().len()).collect();
        assert_eq!(sizes, [MAX_BATCH, 3]);

        let big = |key| {
            let mut fields = BTreeMap::new();
            fields.insert("f".to_owned(), (1, 0));
            let mut task = task(&fields, key);
            task.state[0].json = Some(Arc::from("1".repeat(BATCH_BYTES / 2)));
            ToWorker::Task(task)
        };
        let batches = sent(vec![big(1), big(2), big(3)], true).await;
        assert_eq!(batches, [Some(vec![1]), Some(vec![2]), Some(vec![3])]);
    }

    fn delivery(key: u64) -> ToWorker {
        ToWorker::Deliver {
            run_id: "run".into(),
            key: weft_proto::TaskKey(key),
            message: crate::task::TeamMessage {
                seq: 1,
                from: "team/0".into(),
                content: serde_json::json!("hello"),
            },
        }
    }

    #[tokio::test]
    async fn a_delivery_follows_the_queued_task_it_is_for_and_a_heartbeat_does_not_wait() {
        for batches in [true, false] {
            let control = vec![ToWorker::Heartbeat, delivery(7)];
            let sent = forwarded(control, tasks(6..8), batches).await;
            let expected: Vec<_> = if batches {
                vec![None, Some(vec![6, 7]), None]
            } else {
                vec![None, Some(vec![6]), Some(vec![7]), None]
            };
            assert_eq!(sent, expected, "batches: {batches}");
        }
    }
}
