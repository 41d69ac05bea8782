//! Knowledge indexes kept for the workers (SPEC 17): built once per content
//! by one worker, kept by the coordinator, fetched by the others.
//!
//! An index is named by its namespace and its key (a hash of the sources,
//! the chunking and the embedding model, `weft_retrieval::pack::index_key`).
//! A worker whose `rag` step needs one it lacks [`SharedIndexes::claim`]s
//! it: the coordinator hands over the index when it keeps one; when nobody
//! builds it, the worker gets a [`BuildLease`] — the key is its to build
//! for as long as it holds the lease (its stream stays open, within the
//! step's time) — and a worker that claims it meanwhile waits for that
//! build. A builder that dies, fails or runs out of time drops its lease,
//! and the next waiting worker builds instead: nothing waits for a build
//! that can never come.
//!
//! What is kept lives in the store (`index-info/<namespace>/<key>`, the
//! figures as JSON, and `index-blobs/<namespace>/<key>`, the packed index,
//! split across keys like any large value), so it outlives the leader's
//! term; at most `max_index_bytes` over every namespace, the least
//! recently used dropped first. The most recently used are also held in
//! memory, up to [`HELD_BYTES`]. A namespace's indexes are only ever given
//! to the workers of that namespace's runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use weft_store::{Store, StoreError, chunks};

use crate::durable::Keeper;

/// Bytes of packed indexes held in memory at once, the most recently used.
pub const HELD_BYTES: usize = 256 << 20;

const INFO_PREFIX: &str = "index-info/";
const BLOB_PREFIX: &str = "index-blobs/";

/// What the coordinator records of an index it keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexInfo {
    /// The namespace whose runs use it.
    pub namespace: String,
    /// Its key.
    pub key: String,
    /// The knowledge base's name in the graph that built it.
    pub knowledge: String,
    /// Its source files, and their bytes.
    pub files: u64,
    /// The source files' bytes.
    pub bytes: u64,
    /// Its chunks.
    pub chunks: u64,
    /// The packed index's bytes.
    pub index_bytes: u64,
    /// The packed index's SHA-256 (hex).
    pub sha256: String,
    /// The embedding model (empty: none).
    pub model: String,
    /// Embedding requests the build made.
    pub embedding_calls: u64,
    /// How its vectors are searched (`exact`, `approximate`; empty
    /// without embeddings).
    #[serde(default)]
    pub vector_search: String,
    /// How long the build took.
    pub build_ms: u64,
    /// The worker that built it.
    pub built_by: String,
    /// The run whose step built it.
    pub run_id: String,
    /// When it was built (Unix milliseconds).
    pub built_at_ms: u64,
    /// When a worker last claimed it (Unix milliseconds; kept in memory,
    /// the build's time after a restart).
    #[serde(default)]
    pub used_at_ms: u64,
}

/// Why an index was not kept.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// Larger than the coordinator keeps.
    #[error(
        "the index of knowledge '{knowledge}' packs to {bytes} bytes, more than the {max} kept (max_index_bytes)"
    )]
    TooLarge {
        /// The knowledge base.
        knowledge: String,
        /// Its packed size.
        bytes: u64,
        /// The most kept.
        max: u64,
    },
    /// The store refused it.
    #[error("the store did not take the index: {0}")]
    Store(#[from] StoreError),
}

/// What a claim of an index gets.
pub enum Claim {
    /// The packed index.
    Ready(Arc<Vec<u8>>),
    /// Nobody builds it: the claimant does, under this lease.
    Build(BuildLease),
    /// Another worker (named) builds it: wait for a change and claim again.
    Wait(String),
}

/// The indexes kept by a leader for its workers.
#[derive(Clone)]
pub struct SharedIndexes {
    inner: Arc<Inner>,
}

struct Inner {
    keeper: Keeper,
    max_bytes: u64,
    shelf: Mutex<Shelf>,
    /// Bumped whenever a build ends (kept or abandoned).
    changed: watch::Sender<u64>,
    /// Held while the store's record of kept indexes is first read.
    loading: tokio::sync::Mutex<()>,
}

type Id = (String, String);

#[derive(Default)]
struct Shelf {
    loaded: bool,
    known: HashMap<Id, IndexInfo>,
    /// Packed indexes in memory, and when each was last used (a counter).
    held: HashMap<Id, (Arc<Vec<u8>>, u64)>,
    used: u64,
    /// Keys being built: the builder's name and its lease's number.
    building: HashMap<Id, (String, u64)>,
    leases: u64,
}

impl Shelf {
    /// Sets the gauges of what is kept.
    fn record(&self) {
        let bytes: u64 = self.known.values().map(|info| info.index_bytes).sum();
        metrics::gauge!(crate::metrics::INDEXES_KEPT).set(self.known.len() as f64);
        metrics::gauge!(crate::metrics::INDEX_BYTES).set(bytes as f64);
    }

    fn held_bytes(&self) -> usize {
        self.held.values().map(|(blob, _)| blob.len()).sum()
    }

    /// Holds `blob` as `id`'s, dropping the least recently used until
    /// what is held fits [`HELD_BYTES`].
    fn hold(&mut self, id: Id, blob: Arc<Vec<u8>>) {
        self.used += 1;
        self.held.insert(id, (blob, self.used));
        while self.held_bytes() > HELD_BYTES && self.held.len() > 1 {
            let oldest = self
                .held
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                self.held.remove(&oldest);
            }
        }
    }
}

/// A worker's right to build an index; dropping it gives the key back.
pub struct BuildLease {
    shared: SharedIndexes,
    id: Id,
    number: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn info_key(namespace: &str, key: &str) -> String {
    format!("{INFO_PREFIX}{namespace}/{key}")
}

fn blob_key(namespace: &str, key: &str) -> String {
    format!("{BLOB_PREFIX}{namespace}/{key}")
}

impl SharedIndexes {
    /// Indexes kept through `keeper`, at most `max_bytes` of them.
    pub fn new(keeper: Keeper, max_bytes: u64) -> Self {
        Self {
            inner: Arc::new(Inner {
                keeper,
                max_bytes,
                shelf: Mutex::default(),
                changed: watch::Sender::new(0),
                loading: tokio::sync::Mutex::const_new(()),
            }),
        }
    }

    fn shelf(&self) -> std::sync::MutexGuard<'_, Shelf> {
        self.inner.shelf.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most bytes one index may pack to and be kept.
    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes.min(chunks::MAX_TOTAL_BYTES as u64)
    }

    /// Told whenever a build ends; mark it seen before a claim, and a
    /// claim that must wait misses no change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Reads which indexes the store keeps, once per term.
    async fn load(&self) -> Result<(), StoreError> {
        if self.shelf().loaded {
            return Ok(());
        }
        let _one = self.inner.loading.lock().await;
        if self.shelf().loaded {
            return Ok(());
        }
        let entries = self.inner.keeper.store().scan(INFO_PREFIX).await?;
        let mut shelf = self.shelf();
        for entry in entries {
            match serde_json::from_slice::<IndexInfo>(&entry.value) {
                Ok(mut info) => {
                    info.used_at_ms = info.built_at_ms;
                    shelf
                        .known
                        .insert((info.namespace.clone(), info.key.clone()), info);
                }
                Err(error) => {
                    tracing::warn!(key = %entry.key, %error, "an index's record does not read; ignored");
                }
            }
        }
        shelf.loaded = true;
        shelf.record();
        Ok(())
    }

    /// Claims `namespace`'s index `key` for `worker`: the index when it is
    /// kept, else the right to build it, else the name of who builds it.
    pub async fn claim(
        &self,
        namespace: &str,
        key: &str,
        worker: &str,
    ) -> Result<Claim, StoreError> {
        let claim = self.claim_once(namespace, key, worker).await?;
        let outcome = match &claim {
            Claim::Ready(_) => "fetched",
            Claim::Build(_) => "build",
            Claim::Wait(_) => "wait",
        };
        metrics::counter!(crate::metrics::INDEX_CLAIMS, "outcome" => outcome).increment(1);
        Ok(claim)
    }

    async fn claim_once(
        &self,
        namespace: &str,
        key: &str,
        worker: &str,
    ) -> Result<Claim, StoreError> {
        self.load().await?;
        let id: Id = (namespace.to_owned(), key.to_owned());
        let stored = {
            let mut shelf = self.shelf();
            if let Some(info) = shelf.known.get_mut(&id) {
                info.used_at_ms = now_ms();
            }
            shelf.used += 1;
            let used = shelf.used;
            if let Some((blob, last)) = shelf.held.get_mut(&id) {
                *last = used;
                return Ok(Claim::Ready(blob.clone()));
            }
            shelf.known.contains_key(&id)
        };
        if stored {
            let blob = chunks::get(self.inner.keeper.store(), &blob_key(namespace, key)).await?;
            let mut shelf = self.shelf();
            match blob {
                Some(blob) if shelf.known.contains_key(&id) => {
                    let blob = Arc::new(blob);
                    shelf.hold(id, blob.clone());
                    return Ok(Claim::Ready(blob));
                }
                // Dropped meanwhile, or its record outlived it.
                _ => {
                    shelf.known.remove(&id);
                }
            }
        }
        let mut shelf = self.shelf();
        if let Some((builder, _)) = shelf.building.get(&id) {
            return Ok(Claim::Wait(builder.clone()));
        }
        shelf.leases += 1;
        let number = shelf.leases;
        shelf
            .building
            .insert(id.clone(), (worker.to_owned(), number));
        Ok(Claim::Build(BuildLease {
            shared: self.clone(),
            id,
            number,
        }))
    }

    /// `namespace`'s index `key`, packed, when it is kept.
    pub async fn fetch(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<Option<Arc<Vec<u8>>>, StoreError> {
        self.load().await?;
        let id: Id = (namespace.to_owned(), key.to_owned());
        {
            let shelf = self.shelf();
            if let Some((blob, _)) = shelf.held.get(&id) {
                return Ok(Some(blob.clone()));
            }
            if !shelf.known.contains_key(&id) {
                return Ok(None);
            }
        }
        let blob = chunks::get(self.inner.keeper.store(), &blob_key(namespace, key)).await?;
        Ok(blob.map(Arc::new))
    }

    /// The indexes kept for the namespaces `visible` lets through, most
    /// recently used first.
    pub async fn list(&self, visible: impl Fn(&str) -> bool) -> Result<Vec<IndexInfo>, StoreError> {
        self.load().await?;
        let shelf = self.shelf();
        let mut infos: Vec<IndexInfo> = shelf
            .known
            .values()
            .filter(|info| visible(&info.namespace))
            .cloned()
            .collect();
        infos.sort_by(|a, b| {
            (b.used_at_ms, &a.namespace, &a.key).cmp(&(a.used_at_ms, &b.namespace, &b.key))
        });
        Ok(infos)
    }

    /// Drops the least recently used kept indexes until `incoming` more
    /// bytes fit.
    async fn make_room(&self, incoming: u64) -> Result<(), StoreError> {
        loop {
            let victim = {
                let shelf = self.shelf();
                let kept: u64 = shelf.known.values().map(|i| i.index_bytes).sum();
                if kept + incoming <= self.inner.max_bytes {
                    return Ok(());
                }
                shelf
                    .known
                    .values()
                    .min_by_key(|info| info.used_at_ms)
                    .map(|info| (info.namespace.clone(), info.key.clone()))
            };
            let Some((namespace, key)) = victim else {
                return Ok(());
            };
            let keeper = &self.inner.keeper;
            keeper.checked(
                keeper
                    .store()
                    .delete_prefix(&info_key(&namespace, &key), keeper.fence())
                    .await,
            )?;
            keeper.checked(
                keeper
                    .store()
                    .delete_prefix(&blob_key(&namespace, &key), keeper.fence())
                    .await,
            )?;
            tracing::info!(%namespace, %key, "a knowledge index is dropped to make room (max_index_bytes)");
            let mut shelf = self.shelf();
            let id = (namespace, key);
            shelf.known.remove(&id);
            shelf.held.remove(&id);
            shelf.record();
        }
    }
}

impl BuildLease {
    /// The most bytes the index may pack to and be kept.
    pub fn max_bytes(&self) -> u64 {
        self.shared.max_bytes()
    }

    /// Keeps the built index `blob`, described by `info`, and gives the
    /// key up: the workers waiting for it get it.
    pub async fn keep(self, blob: Vec<u8>, mut info: IndexInfo) -> Result<(), KeepError> {
        let shared = &self.shared;
        let bytes = blob.len() as u64;
        if bytes > shared.max_bytes() {
            return Err(KeepError::TooLarge {
                knowledge: info.knowledge,
                bytes,
                max: shared.max_bytes(),
            });
        }
        let (namespace, key) = self.id.clone();
        info.namespace = namespace.clone();
        info.key = key.clone();
        info.index_bytes = bytes;
        info.built_at_ms = now_ms();
        info.used_at_ms = info.built_at_ms;
        shared.make_room(bytes).await?;
        let keeper = &shared.inner.keeper;
        keeper.checked(
            chunks::put(
                keeper.store(),
                &blob_key(&namespace, &key),
                &blob,
                keeper.fence(),
            )
            .await,
        )?;
        let record = serde_json::to_vec(&info).expect("an index's record serializes");
        // The record last: one that is there names a blob that is.
        keeper.checked(
            keeper
                .store()
                .put(&info_key(&namespace, &key), record, keeper.fence())
                .await,
        )?;
        let mut shelf = shared.shelf();
        shelf.known.insert(self.id.clone(), info);
        shelf.hold(self.id.clone(), Arc::new(blob));
        shelf.record();
        Ok(())
    }
}

impl Drop for BuildLease {
    fn drop(&mut self) {
        let mut shelf = self.shared.shelf();
        if shelf
            .building
            .get(&self.id)
            .is_some_and(|(_, number)| *number == self.number)
        {
            shelf.building.remove(&self.id);
        }
        drop(shelf);
        self.shared.inner.changed.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;
    use weft_store::{AnyStore, EmbeddedStore};

    use super::*;

    fn store(name: &str) -> (AnyStore, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("weft-indexes-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = AnyStore::Embedded(EmbeddedStore::open(&dir.join("s.redb")).unwrap());
        (store, dir)
    }

    fn shared(store: &AnyStore, max_bytes: u64) -> SharedIndexes {
        let keeper = Keeper::new(store.clone(), None, CancellationToken::new());
        SharedIndexes::new(keeper, max_bytes)
    }

    fn info(knowledge: &str) -> IndexInfo {
        IndexInfo {
            namespace: String::new(),
            key: String::new(),
            knowledge: knowledge.into(),
            files: 1,
            bytes: 10,
            chunks: 2,
            index_bytes: 0,
            sha256: String::new(),
            model: String::new(),
            embedding_calls: 0,
            vector_search: String::new(),
            build_ms: 1,
            built_by: "w1".into(),
            run_id: "r".into(),
            built_at_ms: 0,
            used_at_ms: 0,
        }
    }

    async fn lease(
        indexes: &SharedIndexes,
        namespace: &str,
        key: &str,
        worker: &str,
    ) -> BuildLease {
        match indexes.claim(namespace, key, worker).await.unwrap() {
            Claim::Build(lease) => lease,
            Claim::Ready(_) => panic!("{key} is kept already"),
            Claim::Wait(builder) => panic!("{builder} builds {key}"),
        }
    }

    #[tokio::test]
    async fn one_worker_builds_the_others_wait_then_all_get_it() {
        let (store, dir) = store("once");
        let indexes = shared(&store, 1 << 20);
        let build = lease(&indexes, "team", "k", "w1").await;
        let mut changes = indexes.changes();
        changes.borrow_and_update();
        assert!(matches!(
            indexes.claim("team", "k", "w2").await.unwrap(),
            Claim::Wait(builder) if builder == "w1"
        ));
        build
            .keep(b"packed".to_vec(), info("handbook"))
            .await
            .unwrap();
        assert!(changes.has_changed().unwrap(), "waiters are told");
        assert!(matches!(
            indexes.claim("team", "k", "w2").await.unwrap(),
            Claim::Ready(blob) if blob.as_slice() == b"packed"
        ));
        // Another namespace's index of the same files is its own.
        assert!(matches!(
            indexes.claim("other", "k", "w3").await.unwrap(),
            Claim::Build(_)
        ));
        // A new term reads what the store keeps.
        let next = shared(&store, 1 << 20);
        assert_eq!(
            next.fetch("team", "k")
                .await
                .unwrap()
                .as_deref()
                .map(Vec::as_slice),
            Some(&b"packed"[..])
        );
        assert!(next.fetch("other", "k").await.unwrap().is_none());
        assert!(matches!(
            next.claim("team", "k", "w2").await.unwrap(),
            Claim::Ready(blob) if blob.as_slice() == b"packed"
        ));
        let listed = next.list(|namespace| namespace == "team").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].knowledge.as_str(), listed[0].index_bytes),
            ("handbook", 6)
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn a_build_given_up_passes_to_the_next_worker() {
        let (store, dir) = store("abandoned");
        let indexes = shared(&store, 1 << 20);
        let build = lease(&indexes, "team", "k", "w1").await;
        drop(build);
        let again = lease(&indexes, "team", "k", "w2").await;
        // A stale lease's drop leaves the new build alone.
        assert!(matches!(
            indexes.claim("team", "k", "w3").await.unwrap(),
            Claim::Wait(builder) if builder == "w2"
        ));
        drop(again);
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn what_is_kept_stays_within_max_index_bytes() {
        let (store, dir) = store("bounded");
        let indexes = shared(&store, 10);
        let first = lease(&indexes, "team", "a", "w1").await;
        first.keep(vec![1; 6], info("a")).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let second = lease(&indexes, "team", "b", "w1").await;
        second.keep(vec![2; 6], info("b")).await.unwrap();
        let kept = indexes.list(|_| true).await.unwrap();
        assert_eq!(
            kept.iter()
                .map(|i| i.knowledge.as_str())
                .collect::<Vec<_>>(),
            ["b"],
            "the least recently used is dropped"
        );
        assert!(
            store.scan(BLOB_PREFIX).await.unwrap().len() == 1,
            "and leaves the store"
        );
        let large = lease(&indexes, "team", "c", "w1").await;
        let refused = large.keep(vec![3; 11], info("c")).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the index of knowledge 'c' packs to 11 bytes, more than the 10 kept (max_index_bytes)"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
