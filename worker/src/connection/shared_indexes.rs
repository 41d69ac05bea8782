//! Knowledge indexes shared through the coordinator (SPEC 17), from the
//! worker's side of `ShareIndex`: a step that needs an index this worker
//! lacks asks the coordinator for it, and either gets it, or waits while
//! another worker builds it, or is told to build it and send it back. The
//! stream stays open while this worker builds: were the worker to die, it
//! would end, and the coordinator would pass the build to the next worker.

use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use weft_proto::index_pieces::{self, Joined};
use weft_proto::transport::Authorized;
use weft_proto::v1 as pb;
use weft_proto::v1::worker_service_client::WorkerServiceClient;

/// Where this worker's session shares indexes.
#[derive(Clone)]
pub struct IndexShelf {
    client: WorkerServiceClient<Authorized>,
    worker: String,
}

/// What the coordinator answered.
pub(crate) enum Shared {
    /// The packed index, checked against its hash.
    Found(Vec<u8>),
    /// This worker builds it and gives it back through the builder.
    Build(Box<Builder>),
}

/// Why sharing did not work (the step then builds the index alone).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShareError {
    /// The step's time ran out while another worker built the index.
    #[error("another worker ({0}) was still building it when the step's time ran out")]
    Waited(String),
    /// The coordinator refused, or the stream broke.
    #[error("{0}")]
    Stream(String),
}

/// This worker's build of a shared index, on the open stream.
pub(crate) struct Builder {
    upload: mpsc::Sender<pb::IndexUpload>,
    download: Streaming<pb::IndexDownload>,
    max_bytes: u64,
}

fn status(status: &tonic::Status) -> ShareError {
    ShareError::Stream(status.message().to_owned())
}

impl IndexShelf {
    /// Shares through `client`, as worker `worker`.
    pub(crate) fn new(client: WorkerServiceClient<Authorized>, worker: String) -> Self {
        Self { client, worker }
    }

    /// Asks for `knowledge`'s index `key` for a step of `run_id` that must
    /// end by `deadline`.
    pub(crate) async fn want(
        &self,
        run_id: &str,
        key: &str,
        knowledge: &str,
        deadline: Instant,
    ) -> Result<Shared, ShareError> {
        let client = &self.client;
        let left = deadline.saturating_duration_since(Instant::now());
        let (upload, uploads) = mpsc::channel(2);
        let want = pb::IndexUpload {
            body: Some(pb::index_upload::Body::Want(pb::IndexWanted {
                run_id: run_id.to_owned(),
                key: key.to_owned(),
                knowledge: knowledge.to_owned(),
                timeout_ms: left.as_millis() as u64,
                worker: self.worker.clone(),
            })),
        };
        upload
            .send(want)
            .await
            .map_err(|_| ShareError::Stream("the index stream closed".into()))?;
        let opened = tokio::time::timeout_at(
            deadline.into(),
            client.clone().share_index(ReceiverStream::new(uploads)),
        )
        .await
        .map_err(|_| {
            ShareError::Stream("the coordinator did not answer in the step's time".into())
        })?;
        let mut download = opened.map_err(|s| status(&s))?.into_inner();
        let mut joined = Joined::new(u64::MAX);
        let mut waited_for = None;
        loop {
            let message = tokio::time::timeout_at(deadline.into(), download.message()).await;
            let body = match message {
                Ok(Ok(Some(pb::IndexDownload { body: Some(body) }))) => body,
                Ok(Ok(_)) => {
                    return Err(ShareError::Stream(
                        "the coordinator ended the index stream".into(),
                    ));
                }
                Ok(Err(s)) => return Err(status(&s)),
                Err(_) => {
                    return Err(match waited_for {
                        Some(builder) => ShareError::Waited(builder),
                        None => ShareError::Stream(
                            "the coordinator did not send the index in the step's time".into(),
                        ),
                    });
                }
            };
            match body {
                pb::index_download::Body::Waiting(builder) => {
                    tracing::debug!(%knowledge, %builder, "waiting for another worker's build of an index");
                    waited_for = Some(builder);
                }
                pb::index_download::Body::Build(build) => {
                    return Ok(Shared::Build(Box::new(Builder {
                        upload,
                        download,
                        max_bytes: build.max_bytes,
                    })));
                }
                pb::index_download::Body::Piece(piece) => match joined.add(piece) {
                    Ok(None) => {}
                    Ok(Some((blob, _))) => return Ok(Shared::Found(blob)),
                    Err(error) => return Err(ShareError::Stream(error.to_string())),
                },
                pb::index_download::Body::Kept(_) => {
                    return Err(ShareError::Stream("an answer out of turn".into()));
                }
            }
        }
    }
}

impl Builder {
    /// The largest index the coordinator keeps.
    pub(crate) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Sends the built index and its `index_built` figures; the
    /// coordinator's refusal, if it did not keep it.
    pub(crate) async fn give(mut self, blob: &[u8], built: &Value) -> Result<(), ShareError> {
        let closed = || ShareError::Stream("the index stream closed".into());
        for piece in index_pieces::pieces(blob, &built.to_string()) {
            let message = pb::IndexUpload {
                body: Some(pb::index_upload::Body::Piece(piece)),
            };
            self.upload.send(message).await.map_err(|_| closed())?;
        }
        match self.download.message().await {
            Ok(Some(pb::IndexDownload {
                body: Some(pb::index_download::Body::Kept(kept)),
            })) if kept.error.is_empty() => Ok(()),
            Ok(Some(pb::IndexDownload {
                body: Some(pb::index_download::Body::Kept(kept)),
            })) => Err(ShareError::Stream(kept.error)),
            Ok(_) => Err(closed()),
            Err(s) => Err(status(&s)),
        }
    }

    /// The build failed: another worker may try.
    pub(crate) async fn failed(self, why: &str) {
        let message = pb::IndexUpload {
            body: Some(pb::index_upload::Body::Failed(why.to_owned())),
        };
        let _ = self.upload.send(message).await;
    }
}
