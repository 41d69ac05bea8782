//! Which runs use which stored bundle files (`blobs/<sha256>`), so a file
//! leaves the store with the last run that uses it — and never while a
//! submission that uses it too is being stored.
//!
//! A submission counts its files before it stores them, under the same
//! gate as deletions; a deletion looks again under the gate, so a file
//! counted meanwhile stays. The files known to be in the store are kept
//! too, so that a submission does not read a file back only to learn that
//! it is there: a leader's term is the store's only writer, and a file
//! leaves the set when it is deleted. (A submission that fails after storing a new
//! file leaves it behind, uncounted: the rare leak is preferred over a
//! run whose bundle could vanish.)

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use weft_proto::RunId;

use weft_store::StoreError;

use super::Keeper;
use super::records::RecordHead;
use super::restore;
use crate::bundle::Bundle;

/// Counts of stored bundle files by the runs that use them.
#[derive(Default)]
pub struct BlobRefs {
    counts: Mutex<Counts>,
    /// Held while files are stored or deleted; guards the files known to
    /// be stored.
    gate: tokio::sync::Mutex<HashSet<String>>,
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
        let mut stored = self.gate.lock().await;
        restore::store_bundle(keeper, bundle, created_unix_ms, &mut stored).await
    }

    /// Deletes the files of `sha256s` that are still unused, together
    /// (a transaction per batch of them, as the store takes).
    pub async fn delete_unused(&self, keeper: &Keeper, sha256s: Vec<String>) {
        let mut stored = self.gate.lock().await;
        let mut prefixes = Vec::with_capacity(sha256s.len());
        for sha in sha256s {
            if self.counts().users.contains_key(&sha) {
                continue;
            }
            // Looked for again by its next use, whether or not it goes.
            stored.remove(&sha);
            // The file and its chunks; a hash is never a prefix of another.
            prefixes.push(keeper.blob_key(&sha));
        }
        if prefixes.is_empty() {
            return;
        }
        if let Err(error) = keeper.delete_prefixes(&prefixes).await {
            tracing::warn!(files = prefixes.len(), %error, "unused bundle files stay in the store");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_store::Store;

    /// A submission reads a file back from the store only if this term has
    /// not stored (or found) it yet: the file is deleted here behind the
    /// counts' back, so a second store that looked for it would put it
    /// back. Once deleted as unused, its next use stores it again.
    #[tokio::test]
    async fn a_stored_file_is_not_looked_for_again_until_it_is_deleted() {
        let dir = std::env::temp_dir().join(format!("weft-blob-refs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = weft_store::EmbeddedStore::open(&dir.join("weft.redb")).expect("opens");
        let keeper = Keeper::new(
            weft_store::AnyStore::Embedded(store),
            None,
            tokio_util::sync::CancellationToken::new(),
        );
        let bundle = Bundle::new(
            "g.yaml".into(),
            [("g.yaml".into(), b"nodes: {}".to_vec(), 0o644)],
            1 << 20,
        )
        .expect("a bundle");
        let sha = bundle.files["g.yaml"].sha256.clone();
        let key = keeper.blob_key(&sha);
        let there = || async { keeper.store().get(&key).await.expect("reads").is_some() };
        let refs = BlobRefs::default();
        let run = RunId::from("a");
        refs.hold(&run, vec![sha.clone()]);
        refs.store(&keeper, &bundle, 0).await.expect("stored");
        assert!(there().await, "stored by its first use");
        keeper
            .store()
            .delete_prefix(&key, None)
            .await
            .expect("deletes");
        refs.store(&keeper, &bundle, 0).await.expect("stored");
        assert!(
            !there().await,
            "known stored: not looked for, not put again"
        );
        let unused = refs.release("a");
        refs.delete_unused(&keeper, unused).await;
        refs.hold(&run, vec![sha.clone()]);
        refs.store(&keeper, &bundle, 0).await.expect("stored");
        assert!(
            there().await,
            "deleted as unused: looked for and stored again"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

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
