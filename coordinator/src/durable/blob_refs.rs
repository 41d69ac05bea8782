//! Which runs use which stored bundle files (`blobs/<sha256>`), so a file
//! leaves the store with the last run that uses it — and never while a
//! submission that uses it too is being stored.
//!
//! A submission counts its files before it stores them, under the same
//! gate as deletions; a deletion looks again under the gate, so a file
//! counted meanwhile stays. (A submission that fails after storing a new
//! file leaves it behind, uncounted: the rare leak is preferred over a
//! run whose bundle could vanish.)

use std::collections::HashMap;
use std::sync::Mutex;
use weft_proto::RunId;

use weft_store::{Store, StoreError};

use super::Keeper;
use super::keys::blob_key;
use super::records::RecordHead;
use super::restore;
use crate::bundle::Bundle;

/// Counts of stored bundle files by the runs that use them.
#[derive(Default)]
pub struct BlobRefs {
    counts: Mutex<Counts>,
    gate: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Counts {
    users: HashMap<String, usize>,
    by_run: HashMap<RunId, Vec<String>>,
}

impl BlobRefs {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts run `id`'s use of files `sha256s`.
    pub fn hold(&self, id: &RunId, sha256s: Vec<String>) {
        let mut counts = self.counts();
        for sha in &sha256s {
            *counts.users.entry(sha.clone()).or_default() += 1;
        }
        counts.by_run.insert(id.clone(), sha256s);
    }

    /// Ends run `id`'s use; returns the files nobody uses any more.
    pub fn release(&self, id: &str) -> Vec<String> {
        let mut counts = self.counts();
        let Some(sha256s) = counts.by_run.remove(id) else {
            return Vec::new();
        };
        let mut unused = Vec::new();
        for sha in sha256s {
            if let Some(users) = counts.users.get_mut(&sha) {
                *users -= 1;
                if *users == 0 {
                    counts.users.remove(&sha);
                    unused.push(sha);
                }
            }
        }
        unused
    }

    /// Stores a new run's bundle files (already counted by
    /// [`hold`](Self::hold)).
    pub async fn store(
        &self,
        keeper: &Keeper,
        bundle: &Bundle,
        created_unix_ms: i64,
    ) -> Result<RecordHead, StoreError> {
        let _gate = self.gate.lock().await;
        restore::store_bundle(keeper, bundle, created_unix_ms).await
    }

    /// Deletes the files of `sha256s` that are still unused.
    pub async fn delete_unused(&self, keeper: &Keeper, sha256s: Vec<String>) {
        let _gate = self.gate.lock().await;
        for sha in sha256s {
            if self.counts().users.contains_key(&sha) {
                continue;
            }
            // The file and its chunks; a hash is never a prefix of another.
            let deleted = keeper
                .store()
                .delete_prefix(&blob_key(&sha), keeper.fence())
                .await;
            if let Err(error) = keeper.checked(deleted) {
                tracing::warn!(%sha, %error, "an unused bundle file stays in the store");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_unused_when_its_last_run_lets_go() {
        let refs = BlobRefs::default();
        let (a, b) = (RunId::from("a"), RunId::from("b"));
        refs.hold(&a, vec!["x".into(), "y".into()]);
        refs.hold(&b, vec!["y".into()]);
        assert_eq!(refs.release("a"), vec!["x".to_owned()]);
        assert_eq!(refs.release("a"), Vec::<String>::new(), "once");
        assert_eq!(refs.release("b"), vec!["y".to_owned()]);
    }
}
