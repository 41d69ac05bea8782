//! The worker-facing service: one long-lived stream per worker.

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use weft_proto::PROTOCOL_VERSION;
use weft_proto::v1 as pb;
use weft_proto::v1::worker_service_server::WorkerService;

use super::convert;
use crate::bundle::BlobStore;
use crate::dispatch::DispatcherHandle;

/// Messages queued for one worker's stream.
const OUTBOX: usize = 1024;

/// The worker service over the dispatcher.
#[derive(Clone)]
pub struct WorkerApi {
    dispatcher: DispatcherHandle,
    blobs: BlobStore,
    heartbeat: Duration,
}

impl WorkerApi {
    /// Serves workers for `dispatcher`.
    pub fn new(dispatcher: DispatcherHandle, blobs: BlobStore, heartbeat: Duration) -> Self {
        Self {
            dispatcher,
            blobs,
            heartbeat,
        }
    }
}

type OutStream = Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, Status>> + Send>>;

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    type JoinStream = OutStream;

    async fn join(
        &self,
        request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<OutStream>, Status> {
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
        let (outbox, mut outgoing) = mpsc::channel(OUTBOX);
        let worker = self
            .dispatcher
            .join(convert::worker_info(hello), outbox)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let dispatcher = self.dispatcher.clone();
        tokio::spawn(async move {
            while let Some(message) = inbound.next().await {
                let Ok(message) = message else { break };
                if let Some(message) = convert::from_worker(message) {
                    dispatcher.message(worker, message);
                }
            }
            dispatcher.leave(worker);
        });
        let heartbeat = self.heartbeat;
        let welcome = pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Welcome(pb::Welcome {
                worker_id: worker.to_string(),
                heartbeat_interval_ms: heartbeat.as_millis() as u64,
            })),
        };
        let (tx, rx) = mpsc::channel(OUTBOX);
        tokio::spawn(async move {
            if tx.send(Ok(welcome)).await.is_err() {
                return;
            }
            while let Some(message) = outgoing.recv().await {
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
