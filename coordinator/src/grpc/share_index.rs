//! `ShareIndex`: one worker's conversation about one knowledge index
//! (`crate::indexes`). The worker says which index its step wants; the
//! coordinator sends it in pieces when it keeps one, says who builds it
//! while another worker does (and waits), or tells this worker to build it
//! and takes the packed index back on the same stream. The build is the
//! stream's: when the worker fails, goes, or outlasts its step's time,
//! the stream ends and the next worker waiting is told to build.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};
use weft_proto::index_pieces::{self, Joined, PieceError};
use weft_proto::v1 as pb;

use crate::indexes::{BuildLease, Claim, IndexInfo, SharedIndexes};

/// The shortest time a claim is given, whatever the step says is left.
const LEAST_TIME: Duration = Duration::from_secs(5);

pub(super) type Reply = Result<pb::IndexDownload, Status>;

/// What a claim is about.
pub(super) struct Wanted {
    pub namespace: String,
    pub run_id: String,
    pub key: String,
    pub knowledge: String,
    pub worker: String,
    pub time: Duration,
}

/// Checks a `want`'s fields.
pub(super) fn check(want: &pb::IndexWanted) -> Result<(), Status> {
    if want.key.len() != 64 || !want.key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Status::invalid_argument(format!(
            "IndexWanted.key: '{}' is not an index key (64 hex digits)",
            want.key
        )));
    }
    Ok(())
}

fn reply(body: pb::index_download::Body) -> Reply {
    Ok(pb::IndexDownload { body: Some(body) })
}

/// Serves one claim until the worker has the index, has given up, or has
/// built it.
pub(super) async fn serve(
    indexes: SharedIndexes,
    wanted: Wanted,
    mut inbound: Streaming<pb::IndexUpload>,
    out: mpsc::Sender<Reply>,
) {
    let deadline = Instant::now() + wanted.time.max(LEAST_TIME);
    let mut changes = indexes.changes();
    let mut told_waiting = None;
    loop {
        changes.borrow_and_update();
        let claim = match indexes
            .claim(&wanted.namespace, &wanted.key, &wanted.worker)
            .await
        {
            Ok(claim) => claim,
            Err(error) => {
                let _ = out
                    .send(Err(Status::unavailable(format!(
                        "the coordinator cannot read its knowledge indexes: {error}"
                    ))))
                    .await;
                return;
            }
        };
        match claim {
            Claim::Ready(blob) => {
                send_pieces(&blob, &out).await;
                return;
            }
            Claim::Build(lease) => {
                build(lease, &wanted, &mut inbound, &out, deadline).await;
                return;
            }
            Claim::Wait(builder) => {
                if told_waiting.as_ref() != Some(&builder) {
                    let body = pb::index_download::Body::Waiting(builder.clone());
                    if out.send(reply(body)).await.is_err() {
                        return;
                    }
                    told_waiting = Some(builder);
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    () = out.closed() => return,
                    () = tokio::time::sleep_until(deadline) => {
                        let _ = out.send(Err(Status::deadline_exceeded(format!(
                            "knowledge '{}': another worker's build of its index did not end within the step's time",
                            wanted.knowledge
                        )))).await;
                        return;
                    }
                }
            }
        }
    }
}

/// Sends `blob` in pieces, the last one with its hash.
async fn send_pieces(blob: &[u8], out: &mpsc::Sender<Reply>) {
    for piece in index_pieces::pieces(blob, "") {
        if out
            .send(reply(pb::index_download::Body::Piece(piece)))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Has the worker build the index, takes it back and keeps it; the lease
/// goes with this function, however it ends.
async fn build(
    lease: BuildLease,
    wanted: &Wanted,
    inbound: &mut Streaming<pb::IndexUpload>,
    out: &mpsc::Sender<Reply>,
    deadline: Instant,
) {
    let max_bytes = lease.max_bytes();
    let body = pb::index_download::Body::Build(pb::IndexBuild { max_bytes });
    if out.send(reply(body)).await.is_err() {
        return;
    }
    let received = tokio::time::timeout_at(deadline, receive(inbound, max_bytes)).await;
    let (blob, built) = match received {
        Ok(Ok(Some(upload))) => upload,
        // The worker failed, left or sent something else: the next one builds.
        Ok(Ok(None)) => return,
        Ok(Err(refusal)) => {
            let _ = out.send(Err(refusal)).await;
            return;
        }
        Err(_) => {
            tracing::warn!(knowledge = %wanted.knowledge, worker = %wanted.worker, "a knowledge index's build outlasted its step's time; another worker may build it");
            return;
        }
    };
    let info = IndexInfo {
        namespace: wanted.namespace.clone(),
        key: wanted.key.clone(),
        knowledge: wanted.knowledge.clone(),
        files: figure(&built, "files"),
        bytes: figure(&built, "bytes"),
        chunks: figure(&built, "chunks"),
        index_bytes: blob.len() as u64,
        sha256: index_pieces::sha256_hex(&blob),
        model: built["model"].as_str().unwrap_or_default().to_owned(),
        embedding_calls: figure(&built, "embedding_calls"),
        vector_search: built["vector_search"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        build_ms: figure(&built, "latency_ms"),
        built_by: wanted.worker.clone(),
        run_id: wanted.run_id.clone(),
        built_at_ms: 0,
        used_at_ms: 0,
    };
    let error = match lease.keep(blob, info).await {
        Ok(()) => String::new(),
        Err(error) => {
            tracing::warn!(knowledge = %wanted.knowledge, %error, "a knowledge index is not kept");
            error.to_string()
        }
    };
    let _ = out
        .send(reply(pb::index_download::Body::Kept(pb::IndexKept {
            error,
        })))
        .await;
}

fn figure(built: &serde_json::Value, name: &str) -> u64 {
    built[name].as_u64().unwrap_or(0)
}

/// The packed index a builder uploads and its figures; `None` when it
/// failed or left instead.
async fn receive(
    inbound: &mut Streaming<pb::IndexUpload>,
    max_bytes: u64,
) -> Result<Option<(Vec<u8>, serde_json::Value)>, Status> {
    let mut joined = Joined::new(max_bytes);
    loop {
        let body = match inbound.next().await {
            Some(Ok(pb::IndexUpload { body: Some(body) })) => body,
            _ => return Ok(None),
        };
        let piece = match body {
            pb::index_upload::Body::Piece(piece) => piece,
            pb::index_upload::Body::Failed(_) => return Ok(None),
            pb::index_upload::Body::Want(_) => {
                return Err(Status::invalid_argument(
                    "ShareIndex: one index per stream; a second `want` came",
                ));
            }
        };
        match joined.add(piece) {
            Ok(None) => {}
            Ok(Some((blob, built))) => {
                let built = serde_json::from_str(&built).unwrap_or_default();
                return Ok(Some((blob, built)));
            }
            Err(error @ PieceError::TooLarge { .. }) => {
                return Err(Status::resource_exhausted(error.to_string()));
            }
            Err(error) => return Err(Status::data_loss(error.to_string())),
        }
    }
}
