//! Bundle files on a worker: fetched once by content hash from the
//! coordinator, checked, cached on disk, and copied into each task's scratch
//! directory.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::Mutex;
use weft_proto::index_pieces::sha256_hex;

use crate::task::{BlobRef, Failure, FailureKind};

/// Where the cache fetches the files it lacks: the coordinator, through
/// the worker's connection.
pub(crate) trait BlobSource: Send + Sync {
    /// The content whose SHA-256 is `sha256`.
    fn fetch<'a>(
        &'a self,
        sha256: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, FetchError>> + Send + 'a>>;
}

/// Why a file could not be fetched.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FetchError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Numbers each write's partial file in this process.
static PARTIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The worker's file cache.
#[derive(Clone)]
pub struct BlobCache {
    dir: PathBuf,
    source: Arc<dyn BlobSource>,
    /// One fetch at a time per cache: concurrent tasks of one run need the
    /// same files, and the second waits for the first rather than fetching
    /// again.
    fetching: Arc<Mutex<()>>,
    /// Cached files whose content this process has checked against their
    /// hash (written by it, or found on disk and re-hashed once).
    verified: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl BlobCache {
    /// A cache in `dir`, fetching from `source`.
    pub(crate) fn new(dir: PathBuf, source: Arc<dyn BlobSource>) -> Self {
        Self {
            dir,
            source,
            fetching: Arc::default(),
            verified: Arc::default(),
        }
    }

    /// Puts `file` at its path under `dest`.
    pub async fn materialize(&self, file: &BlobRef, dest: &Path) -> Result<(), Failure> {
        let relative = Path::new(&file.path);
        if !weft_bundle::stays_inside(&file.path) {
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
                .map_err(|e| Failure::io("cannot create a bundle directory", e))?;
        }
        tokio::fs::copy(&cached, &target)
            .await
            .map_err(|e| Failure::io("cannot copy a bundle file", e))?;
        // Never setuid, setgid, sticky or world-writable, whatever arrived.
        let mode = if file.mode == 0 {
            0o644
        } else {
            file.mode & 0o755
        };
        set_mode(&target, mode).await
    }

    /// The content of `file`, fetched if it is not cached.
    pub(crate) async fn content(&self, file: &BlobRef) -> Result<Vec<u8>, Failure> {
        let cached = self.ensure(&file.sha256).await?;
        tokio::fs::read(&cached)
            .await
            .map_err(|e| Failure::io("cannot read a cached bundle file", e))
    }

    async fn ensure(&self, sha256: &str) -> Result<PathBuf, Failure> {
        if !sha256.chars().all(|c| c.is_ascii_hexdigit()) || sha256.len() != 64 {
            return Err(Failure::new(
                FailureKind::InvalidTask,
                format!("'{sha256}' is not a SHA-256"),
            ));
        }
        let path = self.dir.join(sha256);
        if self.is_verified(sha256) {
            return Ok(path);
        }
        let _one_at_a_time = self.fetching.lock().await;
        if self.is_verified(sha256) || self.check_cached(&path, sha256).await {
            return Ok(path);
        }
        let content = self.source.fetch(sha256).await.map_err(|error| {
            Failure::new(
                FailureKind::WorkerError,
                format!("cannot fetch bundle file {sha256}: {error}"),
            )
        })?;
        let actual = sha256_hex(&content);
        if actual != sha256 {
            return Err(Failure::new(
                FailureKind::WorkerError,
                format!("bundle file {sha256} arrived with hash {actual}"),
            ));
        }
        tokio::fs::create_dir_all(&self.dir)
            .await
            .map_err(|e| Failure::io("cannot create the file cache", e))?;
        // A name of this write's own: the caches of a worker's other
        // coordinators (and other workers sharing the folder) may be
        // writing the same file now. The rename replaces whole files only.
        let partial = self.dir.join(format!(
            "{sha256}.{}-{}.partial",
            std::process::id(),
            PARTIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let written = match write_private(&partial, &content).await {
            Ok(()) => tokio::fs::rename(&partial, &path).await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(Failure::io("cannot write the file cache", error));
        }
        self.mark_verified(sha256);
        Ok(path)
    }

    fn is_verified(&self, sha256: &str) -> bool {
        self.verified
            .lock()
            .is_ok_and(|verified| verified.contains(sha256))
    }

    fn mark_verified(&self, sha256: &str) {
        if let Ok(mut verified) = self.verified.lock() {
            verified.insert(sha256.to_owned());
        }
    }

    /// Whether a file cached before this process started still holds what
    /// its name says; one that does not is removed, to be fetched again.
    async fn check_cached(&self, path: &Path, sha256: &str) -> bool {
        let Ok(content) = tokio::fs::read(path).await else {
            return false;
        };
        if sha256_hex(&content) == sha256 {
            self.mark_verified(sha256);
            return true;
        }
        let _ = tokio::fs::remove_file(path).await;
        false
    }
}

/// Writes a file only its owner can read (`0600`).
pub(crate) async fn write_private(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .await?;
    file.write_all(content).await?;
    file.flush().await
}

async fn set_mode(path: &Path, mode: u32) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(|e| Failure::io("cannot set a bundle file's mode", e))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A source that has nothing: a test sees whether a fetch was needed.
    pub(crate) struct Nowhere;

    impl BlobSource for Nowhere {
        fn fetch<'a>(
            &'a self,
            _sha256: &'a str,
        ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, FetchError>> + Send + 'a>> {
            Box::pin(async { Err(FetchError("no coordinator in this test".into())) })
        }
    }

    fn cache(dir: &Path) -> BlobCache {
        BlobCache::new(dir.to_path_buf(), Arc::new(Nowhere))
    }

    #[tokio::test]
    async fn a_cached_file_is_used_only_if_it_still_matches_its_hash() {
        let dir = std::env::temp_dir().join(format!("weft-blobs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = b"echo hi\n";
        let good_hash = sha256_hex(good);
        std::fs::write(dir.join(&good_hash), good).unwrap();
        let cache = cache(&dir);
        assert_eq!(
            cache.ensure(&good_hash).await.unwrap(),
            dir.join(&good_hash)
        );

        // Someone changed a cached file behind the worker's back.
        let wanted = sha256_hex(b"the real script");
        std::fs::write(dir.join(&wanted), b"rm -rf ~").unwrap();
        let error = cache.ensure(&wanted).await.unwrap_err();
        assert!(
            error.message.starts_with("cannot fetch bundle file"),
            "{}",
            error.message
        );
        assert!(!dir.join(&wanted).exists(), "the tampered copy is removed");
        std::fs::remove_dir_all(dir).ok();
    }

    /// A source that hands out `content` once both of two fetchers have
    /// asked, so their writes of the cache happen at the same time.
    struct Together {
        content: Vec<u8>,
        both: Arc<tokio::sync::Barrier>,
    }

    impl BlobSource for Together {
        fn fetch<'a>(
            &'a self,
            _sha256: &'a str,
        ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, FetchError>> + Send + 'a>> {
            Box::pin(async {
                self.both.wait().await;
                Ok(self.content.clone())
            })
        }
    }

    /// A worker serving several coordinators has a cache (and a fetch) per
    /// coordinator over one folder: two fetching one file at once each
    /// get it whole (before, both wrote one `.partial` file and the
    /// second's rename found it gone, failing its task).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_caches_over_one_folder_fetching_one_file_at_once_both_get_it_whole() {
        let dir = std::env::temp_dir().join(format!("weft-blobs-together-{}", std::process::id()));
        let content = vec![b'x'; 4 << 20];
        let hash = sha256_hex(&content);
        for round in 0..20 {
            let _ = std::fs::remove_dir_all(&dir);
            let both = Arc::new(tokio::sync::Barrier::new(2));
            let caches: Vec<BlobCache> = (0..2)
                .map(|_| {
                    let source = Together {
                        content: content.clone(),
                        both: both.clone(),
                    };
                    BlobCache::new(dir.clone(), Arc::new(source))
                })
                .collect();
            let file = BlobRef {
                path: "script.sh".into(),
                sha256: hash.clone(),
                mode: 0o755,
            };
            let (a, b) = tokio::join!(caches[0].content(&file), caches[1].content(&file));
            for got in [a, b] {
                let got = got.unwrap_or_else(|e| panic!("round {round}: {}", e.message));
                assert!(got == content, "round {round}: the file arrived cut");
            }
        }
        std::fs::remove_dir_all(dir).ok();
    }
}
