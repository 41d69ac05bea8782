//! The worker's wire edge: one gRPC stream to a coordinator, spoken in the
//! worker's own terms.
//!
//! Everything the generated `weft_proto::v1` types touch lives here: where
//! the coordinator is (`discovery`), the handshake, the stream in both
//! directions, the fetch of bundle files and the sharing of knowledge
//! indexes (`shared_indexes`). The rest of the worker sends
//! [`Outbound`] and receives [`Inbound`]; `convert` says what each of the
//! worker protocol's messages (`weft_proto::worker_protocol`, which alone
//! reads and writes the wire) means to this worker.

mod convert;
mod discovery;
mod outgoing;
mod shared_indexes;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::RunId;
use weft_proto::TaskKey;

use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{ReceiverStream, WatchStream};
use tracing::info;
use weft_proto::transport::Authorized;
use weft_proto::v1 as pb;
use weft_proto::v1::worker_service_client::WorkerServiceClient;
use weft_proto::worker_protocol::wire::Kept;

pub(crate) use discovery::Finder;
pub use shared_indexes::IndexShelf;
pub(crate) use shared_indexes::{Builder, ShareError, Shared};

use crate::blobs::{BlobSource, FetchError};
use crate::config::WorkerConfig;
use crate::error::WorkerError;
use crate::execute::CallAnswer;
use crate::state_sync::Assignment;
use crate::task::{FunctionCall, TaskReport, TeamMessage};
use weft_proto::worker_protocol::{FromWorker, Hello};

/// How long a coordinator may take to welcome a joining worker.
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a leaving worker waits for the coordinator to close its side.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages queued for the coordinator before senders wait.
const OUTBOUND_QUEUE: usize = 1024;

/// What a coordinator tells a worker.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// Run a task attempt.
    Task(Box<Assignment>),
    /// Stop the attempt `key` of `run_id`.
    Cancel { run_id: RunId, key: TaskKey },
    /// A teammate message for the running attempt `key` of `run_id`.
    Deliver {
        run_id: RunId,
        key: TaskKey,
        message: TeamMessage,
    },
    /// The coordinator took the teammate send `send_id`, or refused it
    /// with why.
    SendAnswered {
        send_id: u64,
        refusal: Option<String>,
    },
    /// Call a function.
    Call(FunctionCall),
    /// The answer to a running agent's tool call `call_id`.
    ToolAnswered {
        call_id: u64,
        answer: crate::remote_tools::ToolAnswer,
    },
    /// The coordinator's answer to a step's permit request `request_id`:
    /// the grant, or why its model call may not go.
    PermitAnswered {
        request_id: u64,
        answer: Result<u64, String>,
    },
    /// A call the worker cannot read, answered with why.
    Unreadable(Box<CallAnswer>),
    /// The run has ended: drop what is kept for it.
    Forget { run_id: RunId },
    /// The coordinator is there (a heartbeat).
    Alive,
    /// How many queued tasks the coordinator has that this worker could
    /// run (to a worker that shares its slots between coordinators).
    Demand(u64),
}

/// What a worker tells its coordinator.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// This worker takes no more tasks; it leaves once its tasks are done.
    Drain,
    /// The worker is there.
    Heartbeat,
    /// A task sent after the worker began to drain, handed back unstarted.
    Refused { run_id: RunId, key: TaskKey },
    /// How an attempt ended.
    Report(TaskReport),
    /// A function call's answer.
    Answer(CallAnswer),
    /// A piece of a running attempt's model output: in the queue of its
    /// report, so it never trails the attempt's result.
    Piece {
        run_id: RunId,
        key: TaskKey,
        piece: weft_proto::worker_protocol::StreamPiece,
    },
}

/// Why a session with a coordinator did not start, or ended.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The coordinator went away or could not be reached: connect again.
    Lost(Lost),
    /// A standby coordinator named the leader: join it.
    Redirected(String),
}

/// Why there is no coordinator to talk to now; the worker tries again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Lost {
    /// etcd names no leader.
    #[error("no coordinator leads the group yet (etcd has no leader key)")]
    NoLeader,
    /// etcd names no leader but holds a partition count: the group's runs
    /// are split into partitions, and every member is to be served.
    #[error("the group's runs are split into partitions: serving every coordinator")]
    Partitioned,
    /// etcd cannot be read.
    #[error("cannot read the leader from etcd: {0}")]
    Etcd(#[source] weft_store::StoreError),
    /// The leader's URL is malformed.
    #[error(transparent)]
    BadUrl(WorkerError),
    /// Nothing answers at the URL.
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// Where the worker tried.
        url: String,
        /// Why, with the transport's causes in one line.
        reason: String,
    },
    /// The coordinator took the connection and said nothing.
    #[error("the coordinator did not welcome this worker within {0:?}")]
    NoWelcome(Duration),
    /// Another coordinator took the lead (while the worker joined, or
    /// served: a leader killed without closing its connections).
    #[error("{0} no longer leads its group")]
    Deposed(String),
    /// The coordinator's first message was not a welcome.
    #[error("the coordinator sent no welcome")]
    Unwelcomed,
    /// The coordinator closed its side.
    #[error("the coordinator closed the stream")]
    Closed,
    /// The worker's side of the stream closed.
    #[error("the stream to the coordinator closed")]
    Unsendable,
    /// Nothing came for the session's patience (see [`Welcome`]).
    #[error("the coordinator stopped sending heartbeats")]
    Silent,
    /// The stream failed.
    #[error("{}", .0.message())]
    Stream(#[source] tonic::Status),
    /// A connected worker holds this worker's name (another worker
    /// misnamed, or this one's old connection not yet seen lost).
    #[error("{0}")]
    NameTaken(String),
}

/// What the coordinator said on welcoming the worker.
#[derive(Debug, Clone)]
pub(crate) struct Welcome {
    /// How often both sides send heartbeats.
    pub heartbeat: Duration,
    /// How long a silent coordinator is waited for before the session is
    /// given up: five heartbeats, and never less than twice the
    /// coordinator's own patience with a silent worker. Giving up first
    /// would cancel tasks whose results the coordinator still waits for;
    /// twice, because a connection stalled by a partition resends on TCP's
    /// doubling backoff, so after a heal just past the coordinator's
    /// timeout its next try comes within about as long again. (A leader
    /// that etcd stops naming is left at once: [`Finder::moved_from`].)
    pub patience: Duration,
    /// The coordinator's URL.
    pub url: String,
}

impl Welcome {
    fn new(welcome: &pb::Welcome) -> Self {
        let heartbeat = Duration::from_millis(welcome.heartbeat_interval_ms.max(50));
        let coordinator = Duration::from_millis(welcome.worker_timeout_ms);
        Self {
            heartbeat,
            patience: (heartbeat * 5).max(coordinator * 2),
            url: String::new(),
        }
    }
}

/// A joined session's stream.
pub(crate) struct Connection {
    inbound: tonic::Streaming<pb::CoordinatorMessage>,
    /// The rest of a batch of tasks whose first was returned.
    unread: VecDeque<Inbound>,
    /// The node definitions this session's coordinator asked it to keep.
    kept: Kept,
    outbound: mpsc::Sender<Outbound>,
    /// Running attempts' teammate messages, merged into the same stream.
    team_sends: mpsc::Sender<FromWorker>,
    /// Running agents' calls of tools other workers host, likewise.
    tool_calls: mpsc::Sender<FromWorker>,
    client: WorkerServiceClient<Authorized>,
}

/// Connects to the coordinator — at `redirect` when a standby named it,
/// else wherever `finder` says — announces `hello` and waits for the
/// welcome, bounded. A coordinator that accepts connections but does not
/// answer (a stopped process) is given up on like one that refuses, and
/// so is one that etcd stops naming as the leader meanwhile.
pub(crate) async fn open(
    config: &WorkerConfig,
    finder: &Finder,
    redirect: Option<String>,
    hello: Hello,
    shares: Option<watch::Receiver<u32>>,
) -> Result<Result<(Connection, Welcome), Ending>, WorkerError> {
    let target = match redirect {
        Some(url) => discovery::endpoint(&url, &config.tls).map_err(Lost::BadUrl),
        None => finder.find().await,
    };
    let endpoint = match target {
        Ok(endpoint) => endpoint,
        Err(why) => return Ok(Err(Ending::Lost(why))),
    };
    let channel = match endpoint.connect().await {
        Ok(channel) => channel,
        Err(error) => {
            let url = endpoint.uri().to_string();
            let chain = weft_proto::transport::source_chain(&error);
            let reason = weft_proto::transport::explain_tls_failure(&url, &chain).unwrap_or(chain);
            return Ok(Err(Ending::Lost(Lost::Connect { url, reason })));
        }
    };
    let client = WorkerServiceClient::with_interceptor(channel, config.bearer.clone())
        .max_decoding_message_size(weft_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(weft_proto::MAX_MESSAGE_BYTES);
    let url = endpoint.uri().to_string();
    let handshake = tokio::time::timeout(JOIN_TIMEOUT, handshake(config, client, hello, shares));
    tokio::select! {
        joined = handshake => {
            let joined = joined.unwrap_or_else(|_| {
                Ok(Err(Ending::Lost(Lost::NoWelcome(JOIN_TIMEOUT))))
            });
            joined.map(|joined| {
                joined.map(|(connection, mut welcome)| {
                    welcome.url = url.clone();
                    (connection, welcome)
                })
            })
        }
        () = finder.moved_from(&url) => Ok(Err(Ending::Lost(Lost::Deposed(url)))),
    }
}

/// Opens the stream with the hello first and waits for the welcome.
async fn handshake(
    config: &WorkerConfig,
    mut client: WorkerServiceClient<Authorized>,
    hello: Hello,
    shares: Option<watch::Receiver<u32>>,
) -> Result<Result<(Connection, Welcome), Ending>, WorkerError> {
    let (outbound, rx) = mpsc::channel::<Outbound>(OUTBOUND_QUEUE);
    let (team_sends, sends) = mpsc::channel::<FromWorker>(OUTBOUND_QUEUE);
    let (tool_calls, calls) = mpsc::channel::<FromWorker>(OUTBOUND_QUEUE);
    // Known once welcomed: results are checked against its limit and
    // batched as it allows as they go out.
    let told = Arc::new(outgoing::Told::unwelcomed());
    let first = tokio_stream::once(pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Hello(hello.into())),
    });
    let rest = outgoing::Outgoing::new(rx, told.clone());
    // A send is answered before its step goes on, so it never trails the
    // step's result.
    let sends = ReceiverStream::new(sends).map(pb::WorkerMessage::from);
    let calls = ReceiverStream::new(calls).map(pb::WorkerMessage::from);
    // A worker that shares its slots sends this coordinator's share each
    // time it changes; only the latest counts, so none queues behind work.
    // (Without one, a channel whose sender is gone: a stream that ends.)
    let shares = shares.unwrap_or_else(|| watch::channel(0).1);
    let shares = WatchStream::from_changes(shares)
        .map(|slots| pb::WorkerMessage::from(FromWorker::Slots(slots)));
    let mut inbound = match client
        .join(first.chain(rest.merge(sends).merge(calls).merge(shares)))
        .await
    {
        Ok(response) => response.into_inner(),
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::FailedPrecondition
                    | tonic::Code::InvalidArgument
                    | tonic::Code::Unauthenticated
                    | tonic::Code::PermissionDenied
            ) =>
        {
            return Err(WorkerError::Refused(Box::new(status)));
        }
        Err(status) if status.code() == tonic::Code::AlreadyExists => {
            return Ok(Err(Ending::Lost(Lost::NameTaken(
                status.message().to_owned(),
            ))));
        }
        Err(status) => {
            return Ok(Err(match discovery::redirect(&status) {
                Some(leader) => Ending::Redirected(leader),
                None => Ending::Lost(Lost::Stream(status)),
            }));
        }
    };
    match inbound.message().await {
        Ok(Some(pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Welcome(welcome)),
        })) => {
            info!(worker = %config.name, id = %welcome.worker_id, "joined the coordinator");
            told.welcomed(&welcome);
            let welcome = Welcome::new(&welcome);
            let connection = Connection {
                inbound,
                unread: VecDeque::new(),
                kept: Kept::default(),
                outbound,
                team_sends,
                tool_calls,
                client,
            };
            Ok(Ok((connection, welcome)))
        }
        Ok(_) => Ok(Err(Ending::Lost(Lost::Unwelcomed))),
        Err(status) => Ok(Err(Ending::Lost(Lost::Stream(status)))),
    }
}

impl Connection {
    /// Where to send messages to the coordinator.
    pub(crate) fn outbound(&self) -> mpsc::Sender<Outbound> {
        self.outbound.clone()
    }

    /// Where running attempts send their teammate messages
    /// ([`FromWorker::TeamSend`]).
    pub(crate) fn team_sends(&self) -> mpsc::Sender<FromWorker> {
        self.team_sends.clone()
    }

    /// Where a running agent's calls of tools other workers host go
    /// ([`FromWorker::ToolCall`]).
    pub(crate) fn tool_calls(&self) -> mpsc::Sender<FromWorker> {
        self.tool_calls.clone()
    }

    /// Where bundle files come from.
    pub(crate) fn blobs(&self) -> Arc<dyn BlobSource> {
        Arc::new(CoordinatorBlobs {
            client: self.client.clone(),
        })
    }

    /// Where knowledge indexes are shared, as worker `worker`.
    pub(crate) fn index_shelf(&self, worker: &str) -> IndexShelf {
        IndexShelf::new(self.client.clone(), worker.to_owned())
    }

    /// The coordinator's next message, or why the stream ended. Cancel
    /// safe: a message is either returned or still unread.
    pub(crate) async fn next(&mut self) -> Result<Inbound, Lost> {
        loop {
            if let Some(inbound) = self.unread.pop_front() {
                return Ok(inbound);
            }
            match self.inbound.message().await {
                Ok(Some(message)) => {
                    convert::from_coordinator(message, &mut self.kept, &mut self.unread)
                }
                Ok(None) => return Err(Lost::Closed),
                Err(status) => return Err(Lost::Stream(status)),
            }
        }
    }

    /// Leaves after draining: closing this side of the stream and waiting
    /// for the coordinator to close its side guarantees the last results
    /// arrived before the worker counts as gone. Every other sender of the
    /// session must be dropped first.
    pub(crate) async fn leave(self) {
        let Self {
            mut inbound,
            outbound,
            team_sends,
            tool_calls,
            ..
        } = self;
        drop((outbound, team_sends, tool_calls));
        let closed = async { while let Ok(Some(_)) = inbound.message().await {} };
        let _ = tokio::time::timeout(LEAVE_TIMEOUT, closed).await;
    }
}

/// The coordinator's store of bundle files, fetched by content hash.
struct CoordinatorBlobs {
    client: WorkerServiceClient<Authorized>,
}

/// The coordinator's answer to a failed fetch.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.message())]
struct Refused(#[source] tonic::Status);

impl BlobSource for CoordinatorBlobs {
    fn fetch<'a>(
        &'a self,
        sha256: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, FetchError>> + Send + 'a>> {
        Box::pin(async move {
            let request = pb::FetchBlobRequest {
                sha256: sha256.to_owned(),
            };
            let mut client = self.client.clone();
            let response = client
                .fetch_blob(request)
                .await
                .map_err(|status| FetchError(Box::new(Refused(status))))?;
            Ok(response.into_inner().content)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_outwaits_the_coordinator_it_joined() {
        let told = |heartbeat_interval_ms, worker_timeout_ms| {
            Welcome::new(&pb::Welcome {
                heartbeat_interval_ms,
                worker_timeout_ms,
                ..pb::Welcome::default()
            })
            .patience
        };
        // Twice the coordinator's patience with it …
        assert_eq!(told(2_000, 10_000), Duration::from_secs(20));
        // … and never less than five heartbeats (an older coordinator
        // does not say its timeout).
        assert_eq!(told(2_000, 0), Duration::from_secs(10));
        assert_eq!(told(2_000, 3_000), Duration::from_secs(10));
    }
}
