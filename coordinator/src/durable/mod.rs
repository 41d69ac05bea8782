//! Durable runs: what the coordinator keeps in its store so a run outlives
//! the process that started it (SPEC 9). [`records`] is the stored format;
//! every write goes through a [`Keeper`], which fences it on the leader key
//! when the store is shared by a group of coordinators.

use tokio_util::sync::CancellationToken;
use weft_store::{AnyStore, Fence, Store, StoreError};

pub mod blob_refs;
pub mod deltas;
pub mod history;
pub mod journal;
pub mod keys;
pub mod records;
pub mod restore;
pub mod stream_copy;
mod writer;

/// The store runs are kept in, and the fence every write carries.
#[derive(Clone)]
pub struct Keeper {
    store: AnyStore,
    fence: Option<Fence>,
    deposed: CancellationToken,
    /// Where its runs' bundle files are kept ([`keys::BLOBS`], or a
    /// partition's own place).
    blobs: std::sync::Arc<str>,
}

impl Keeper {
    /// Writes to `store`, each conditional on `fence` when there is one (a
    /// leader's term); `deposed` is cancelled when a write finds the fence
    /// gone, which means another coordinator leads now.
    pub fn new(store: AnyStore, fence: Option<Fence>, deposed: CancellationToken) -> Self {
        Self {
            store,
            fence,
            deposed,
            blobs: keys::BLOBS.into(),
        }
    }

    /// Keeps its runs' bundle files under `prefix`: a partition's runs
    /// keep their own copies, so a file leaves the store with the last of
    /// the partition's runs that use it, whatever other partitions'
    /// leaders (which do not count this one's runs) do with theirs.
    pub fn with_blobs_under(mut self, prefix: String) -> Self {
        self.blobs = prefix.into();
        self
    }

    /// Where bundle file `sha256` of its runs is kept.
    pub fn blob_key(&self, sha256: &str) -> String {
        [&*self.blobs, sha256].concat()
    }

    /// The store, for reads.
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// The fence writes carry.
    pub fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    /// Passes a write's result on, noting a lost fence.
    pub fn checked<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Fenced { .. }) = &result {
            metrics::counter!(crate::metrics::WRITES_FENCED).increment(1);
            if !self.deposed.is_cancelled() {
                tracing::warn!("a write was refused: another coordinator leads now (fenced)");
            }
            self.deposed.cancel();
        }
        result
    }

    /// Deletes every key under each of `prefixes`, fenced and
    /// [`checked`](Keeper::checked).
    pub async fn delete_prefixes(&self, prefixes: &[String]) -> Result<(), StoreError> {
        self.checked(self.store.delete_prefixes(prefixes, self.fence()).await)
    }
}

#[cfg(test)]
mod tests {
    use weft_store::{EmbeddedStore, Store};

    use super::*;

    #[tokio::test]
    async fn a_write_of_a_deposed_leader_is_refused_and_ends_its_term() {
        let dir = std::env::temp_dir().join(format!("weft-keeper-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = AnyStore::Embedded(EmbeddedStore::open(&dir.join("s.redb")).unwrap());
        let won = store.create("leader", b"a".to_vec(), None).await.unwrap();
        let fence = Fence {
            key: "leader".into(),
            revision: won.unwrap(),
        };
        let deposed = CancellationToken::new();
        let keeper = Keeper::new(store.clone(), Some(fence), deposed.clone());
        let put = store
            .put("runs/r/record", b"1".to_vec(), keeper.fence())
            .await;
        keeper.checked(put).unwrap();
        assert!(!deposed.is_cancelled());
        // Another coordinator wins the key.
        store.delete_prefix("leader", None).await.unwrap();
        store.create("leader", b"b".to_vec(), None).await.unwrap();
        store
            .put("runs/r/record", b"2".to_vec(), None)
            .await
            .unwrap();
        let late = store
            .put("runs/r/record", b"stale".to_vec(), keeper.fence())
            .await;
        assert!(matches!(
            keeper.checked(late),
            Err(StoreError::Fenced { .. })
        ));
        assert!(deposed.is_cancelled(), "the term ends");
        let kept = store.get("runs/r/record").await.unwrap().unwrap();
        assert_eq!(kept.value, b"2".to_vec(), "the successor's write stands");
        std::fs::remove_dir_all(dir).ok();
    }
}
