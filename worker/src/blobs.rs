//! Bundle files on a worker: fetched once by content hash from the
//! coordinator, checked, cached on disk, and copied into each task's scratch
//! directory.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tonic::transport::Channel;
use weft_proto::v1::FetchBlobRequest;
use weft_proto::v1::worker_service_client::WorkerServiceClient;

use crate::task::{BlobFile, Failure, FailureKind};

/// The worker's file cache.
#[derive(Clone)]
pub struct BlobCache {
    dir: PathBuf,
    client: WorkerServiceClient<Channel>,
    /// One fetch at a time per cache: concurrent tasks of one run need the
    /// same files, and the second waits for the first rather than fetching
    /// again.
    fetching: Arc<Mutex<()>>,
}

impl BlobCache {
    /// A cache in `dir`, fetching through `client`.
    pub fn new(dir: PathBuf, client: WorkerServiceClient<Channel>) -> Self {
        Self {
            dir,
            client,
            fetching: Arc::default(),
        }
    }

    /// Puts `file` at its path under `dest`.
    pub async fn materialize(&self, file: &BlobFile, dest: &Path) -> Result<(), Failure> {
        let relative = Path::new(&file.path);
        let safe = relative
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !safe || file.path.is_empty() {
            return Err(Failure::new(
                FailureKind::InvalidTask,
                format!("bundle path '{}' escapes the scratch directory", file.path),
            ));
        }
        let cached = self.ensure(&file.sha256).await?;
        let target = dest.join(relative);
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| failure("cannot create a bundle directory", e))?;
        }
        tokio::fs::copy(&cached, &target)
            .await
            .map_err(|e| failure("cannot copy a bundle file", e))?;
        let mode = if file.mode == 0 {
            0o644
        } else {
            file.mode & 0o7777
        };
        set_mode(&target, mode).await
    }

    async fn ensure(&self, sha256: &str) -> Result<PathBuf, Failure> {
        if !sha256.chars().all(|c| c.is_ascii_hexdigit()) || sha256.len() != 64 {
            return Err(Failure::new(
                FailureKind::InvalidTask,
                format!("'{sha256}' is not a SHA-256"),
            ));
        }
        let path = self.dir.join(sha256);
        if tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return Ok(path);
        }
        let _one_at_a_time = self.fetching.lock().await;
        if tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return Ok(path);
        }
        let mut client = self.client.clone();
        let content = client
            .fetch_blob(FetchBlobRequest {
                sha256: sha256.to_owned(),
            })
            .await
            .map_err(|status| {
                Failure::new(
                    FailureKind::WorkerError,
                    format!("cannot fetch bundle file {sha256}: {}", status.message()),
                )
            })?
            .into_inner()
            .content;
        let actual: String = Sha256::digest(&content)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if actual != sha256 {
            return Err(Failure::new(
                FailureKind::WorkerError,
                format!("bundle file {sha256} arrived with hash {actual}"),
            ));
        }
        tokio::fs::create_dir_all(&self.dir)
            .await
            .map_err(|e| failure("cannot create the file cache", e))?;
        let partial = self.dir.join(format!("{sha256}.partial"));
        tokio::fs::write(&partial, &content)
            .await
            .map_err(|e| failure("cannot write the file cache", e))?;
        tokio::fs::rename(&partial, &path)
            .await
            .map_err(|e| failure("cannot write the file cache", e))?;
        Ok(path)
    }
}

async fn set_mode(path: &Path, mode: u32) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(|e| failure("cannot set a bundle file's mode", e))
}

fn failure(what: &str, error: std::io::Error) -> Failure {
    Failure::new(FailureKind::WorkerError, format!("{what}: {error}"))
}
