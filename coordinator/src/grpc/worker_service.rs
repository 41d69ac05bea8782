//! The worker-facing service: one long-lived stream per worker.
//!
//! What goes down a worker's stream comes from two paths of the dispatcher:
//! control messages (cancel, forget, heartbeat) are forwarded before queued
//! work, so a backlog of tasks never holds back a cancellation.

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};
use weft_proto::PROTOCOL_VERSION;
use weft_proto::v1 as pb;
use weft_proto::v1::worker_service_server::WorkerService;

use super::convert;
use crate::bundle::BlobStore;
use crate::dispatch::{DispatcherHandle, WorkerLink};
use crate::term::Services;

/// Tasks and calls queued for one worker's stream; a full queue marks the
/// worker jammed.
const WORK_QUEUE: usize = 1024;
/// Control messages queued for one worker; a full queue means the worker
/// does not read its stream at all, and it is dropped.
const CONTROL_QUEUE: usize = 4096;
/// Messages between the merge of the two paths and the gRPC stream.
const STREAM_BUFFER: usize = 16;

/// The worker service over the dispatcher.
#[derive(Clone)]
pub struct WorkerApi {
    dispatcher: DispatcherHandle,
    blobs: BlobStore,
    heartbeat: Duration,
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
            heartbeat: term.heartbeat,
            tracker: term.tracker.clone(),
            max_result_bytes: term.max_result_bytes,
        }
    }
}

pub(crate) type OutStream =
    Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, Status>> + Send>>;

/// Hands a worker's messages to the dispatcher until its stream ends, then
/// reports the worker gone.
async fn read_worker(
    mut inbound: Streaming<pb::WorkerMessage>,
    dispatcher: DispatcherHandle,
    worker: crate::dispatch::WorkerId,
) {
    while let Some(Ok(message)) = inbound.next().await {
        // A large result is parsed off the async threads (in order: the
        // next message waits for it).
        let parsed = if convert::is_large(&message) {
            tokio::task::spawn_blocking(move || convert::from_worker(message))
                .await
                .ok()
                .flatten()
        } else {
            convert::from_worker(message)
        };
        if let Some(message) = parsed {
            dispatcher.message(worker, message);
        }
    }
    dispatcher.leave(worker);
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
            _ => {
                return Err(Status::invalid_argument(
                    "a worker's first message must be its hello",
                ));
            }
        };
        if hello.protocol_version != PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "worker '{}' speaks protocol version {}, but this coordinator speaks version {PROTOCOL_VERSION}; upgrade the worker or the coordinator so they match",
                hello.name, hello.protocol_version
            )));
        }
        if hello.slots == 0 {
            return Err(Status::invalid_argument(format!(
                "worker '{}' announced 0 slots",
                hello.name
            )));
        }
        let (work, mut work_rx) = mpsc::channel(WORK_QUEUE);
        let (control, mut control_rx) = mpsc::channel(CONTROL_QUEUE);
        let mut info = convert::worker_info(hello);
        // A worker's identity may restrict it to some namespaces' tasks.
        info.namespaces = caller.worker_namespaces.clone();
        let worker = self
            .dispatcher
            .join(info, WorkerLink { work, control })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        self.tracker
            .spawn(read_worker(inbound, self.dispatcher.clone(), worker));
        let heartbeat = self.heartbeat;
        let max_result_bytes = self.max_result_bytes;
        let welcome = pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Welcome(pb::Welcome {
                worker_id: worker.to_string(),
                heartbeat_interval_ms: heartbeat.as_millis() as u64,
                max_result_bytes: max_result_bytes as u64,
            })),
        };
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        self.tracker.spawn(async move {
            if tx.send(Ok(welcome)).await.is_err() {
                return;
            }
            loop {
                // Control first; the stream ends when the dispatcher drops
                // the worker (both paths closed).
                let message = tokio::select! {
                    biased;
                    Some(message) = control_rx.recv() => message,
                    Some(message) = work_rx.recv() => message,
                    else => break,
                };
                if tx.send(Ok(convert::to_worker(message))).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn fetch_blob(
        &self,
        request: Request<pb::FetchBlobRequest>,
    ) -> Result<Response<pb::FetchBlobResponse>, Status> {
        let sha256 = request.into_inner().sha256;
        let content = self
            .blobs
            .get(&sha256)
            .ok_or_else(|| Status::not_found(format!("no bundle file with sha256 {sha256}")))?;
        Ok(Response::new(pb::FetchBlobResponse {
            content: content.to_vec(),
        }))
    }
}
