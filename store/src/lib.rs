//! Weft's store: the narrow key-value interface that durable runs and high
//! availability need, with two backends that pass one test suite.
//!
//! - [`EmbeddedStore`]: a redb file in the coordinator's data directory,
//!   crash-safe, no external service (the default);
//! - [`EtcdStore`]: an etcd cluster shared by several coordinators (the
//!   high-availability setup), spoken to over etcd's v3 gRPC API.
//!
//! The interface is what checkpoints, recovery and leader election use and
//! nothing more: get, scan a prefix, put (optionally fenced), create-if-
//! absent (optionally under a lease), compare-and-put, delete a prefix,
//! leases with keep-alive, and watching a prefix. A [`Fence`] makes a write
//! conditional on a key still existing with a given create revision — the
//! leader key of an election — so a deposed leader that wakes up cannot
//! overwrite what its successor wrote. Values larger than a backend takes in
//! one request are split across keys by [`chunks`].

#![warn(missing_docs)]

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

pub mod chunks;
mod embedded;
mod etcd;
mod wal;

pub use embedded::{
    COMMITS_METRIC, CommitPolicy, EmbeddedStats, EmbeddedStore, Flush, LOG_SYNCS_METRIC,
    WRITES_METRIC,
};
pub use etcd::{EtcdStats, EtcdStore, EtcdTls};

/// The key the leading coordinator of a group holds under its lease; its
/// value is the leader's URL, which is how workers (`worker --etcd`) and
/// standing-by coordinators find it.
pub const LEADER_KEY: &str = "leader";

/// The partition count of a group whose runs are split into partitions,
/// written by its first coordinator: a worker that finds it serves every
/// member rather than one leader.
pub const GROUP_COUNT_KEY: &str = "group/count";

/// Where a partitioned group's coordinators are listed, one key each (under
/// its session lease) whose value is its URL.
pub const GROUP_MEMBERS: &str = "group/members/";

/// A store revision: increases with every write.
pub type Revision = i64;
/// A lease: keys created under it vanish when it is not kept alive.
pub type LeaseId = i64;

/// A stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: Vec<u8>,
    /// The revision that created it.
    pub create_revision: Revision,
    /// The revision that last changed it.
    pub mod_revision: Revision,
}

/// A condition on writes: `key` still exists with this create revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The key (an election's leader key).
    pub key: String,
    /// Its create revision when it was won.
    pub revision: Revision,
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was written.
    Put(Entry),
    /// A key was deleted (or its lease expired).
    Delete {
        /// The key.
        key: String,
    },
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The fence no longer holds: this writer is not the leader any more.
    #[error(
        "write refused: '{key}' is no longer held at revision {revision} (another coordinator leads)"
    )]
    Fenced {
        /// The fence's key.
        key: String,
        /// The revision it was held at.
        revision: Revision,
    },
    /// A value too large for the backend, even split.
    #[error("'{key}' is {size} bytes; the store takes at most {limit}")]
    TooLarge {
        /// The key.
        key: String,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// More writes than the backend takes in one transaction.
    #[error("{count} writes in one transaction; the store takes at most {limit}")]
    TooManyWrites {
        /// The writes asked for.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A stored value is not what this version reads.
    #[error("'{key}' holds an unreadable value: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The backend failed: I/O, the database, the network, etcd.
    #[error("store: {source}")]
    Backend {
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file of the embedded store failed.
    #[error("store: {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Another process has the embedded store open.
    #[error("store: {0} is in use by another process (one coordinator per data directory)")]
    InUse(String),
    /// A lease that does not exist (expired, or revoked).
    #[error("store: lease {0} not found")]
    NoLease(LeaseId),
    /// etcd refused a request, or did not answer it.
    #[error("store: etcd: {0}")]
    Etcd(String),
}

/// The store's operations. Every write is durable when it returns.
pub trait Store: Send + Sync + 'static {
    /// The largest value one key holds (larger ones go through [`chunks`]).
    fn max_value_bytes(&self) -> usize;

    /// The most writes one transaction ([`Store::put_all`]) takes.
    fn max_writes(&self) -> usize {
        usize::MAX
    }

    /// A key, if present.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Entry>, StoreError>> + Send;

    /// Every key starting with `prefix`, in key order.
    fn scan(&self, prefix: &str) -> impl Future<Output = Result<Vec<Entry>, StoreError>> + Send {
        async move { Ok(self.scan_at(prefix).await?.0) }
    }

    /// Every key starting with `prefix`, in key order, with the store's
    /// revision they were read at: what a watcher of the prefix has seen
    /// once it has an event of that revision. Partitioned leadership reads
    /// its group this way, so a view read earlier is known as older.
    fn scan_at(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<(Vec<Entry>, Revision), StoreError>> + Send;

    /// The names of the keys starting with `prefix`, in key order, without
    /// reading their values.
    fn scan_keys(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Writes a key; with a fence, only while the fence holds
    /// ([`StoreError::Fenced`] otherwise). Returns the write's revision.
    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<Revision, StoreError>> + Send;

    /// Writes several keys in one transaction (all or none), while the
    /// fence holds; the write's revision. Their total size must stay within
    /// [`Store::max_value_bytes`].
    fn put_all(
        &self,
        writes: Vec<(String, Vec<u8>)>,
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<Revision, StoreError>> + Send;

    /// Creates a key if it is absent, optionally under a lease; its create
    /// revision, or `None` when the key exists.
    fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> impl Future<Output = Result<Option<Revision>, StoreError>> + Send;

    /// Writes a key only if its last change was at `expected` (0: only if
    /// absent), and the fence holds; whether it wrote.
    fn compare_and_put(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: Revision,
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes every key starting with `prefix` (while the fence holds).
    fn delete_prefix(
        &self,
        prefix: &str,
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let prefixes = [prefix.to_owned()];
        async move { self.delete_prefixes(&prefixes, fence).await }
    }

    /// Deletes every key under each of `prefixes` (while the fence holds),
    /// in as few transactions as the backend takes: many runs forgotten at
    /// once cost a transaction per batch of them, not one each. Each
    /// transaction is whole or nothing; one refused by the fence ends the
    /// call, and the batches before it stay deleted.
    fn delete_prefixes(
        &self,
        prefixes: &[String],
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A new lease that lives `ttl` after its last keep-alive.
    fn grant_lease(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<LeaseId, StoreError>> + Send;

    /// Keeps a lease alive for another `ttl`; false when it has expired.
    fn keep_alive(&self, lease: LeaseId) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Ends a lease now; its keys are deleted.
    fn revoke(&self, lease: LeaseId) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Changes to keys under `prefix` from now on, in order.
    fn watch(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<mpsc::Receiver<WatchEvent>, StoreError>> + Send;
}

/// Either backend, chosen by configuration.
#[derive(Clone)]
pub enum AnyStore {
    /// A redb file.
    Embedded(EmbeddedStore),
    /// An etcd cluster.
    Etcd(EtcdStore),
}

macro_rules! delegate {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            AnyStore::Embedded($store) => $call,
            AnyStore::Etcd($store) => $call,
        }
    };
}

impl Store for AnyStore {
    fn max_value_bytes(&self) -> usize {
        delegate!(self, s => s.max_value_bytes())
    }

    fn max_writes(&self) -> usize {
        delegate!(self, s => s.max_writes())
    }

    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        delegate!(self, s => s.get(key).await)
    }

    async fn scan_at(&self, prefix: &str) -> Result<(Vec<Entry>, Revision), StoreError> {
        delegate!(self, s => s.scan_at(prefix).await)
    }

    async fn scan_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        delegate!(self, s => s.scan_keys(prefix).await)
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        delegate!(self, s => s.put(key, value, fence).await)
    }

    async fn put_all(
        &self,
        writes: Vec<(String, Vec<u8>)>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        delegate!(self, s => s.put_all(writes, fence).await)
    }

    async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Option<Revision>, StoreError> {
        delegate!(self, s => s.create(key, value, lease).await)
    }

    async fn compare_and_put(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: Revision,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        delegate!(self, s => s.compare_and_put(key, value, expected, fence).await)
    }

    async fn delete_prefixes(
        &self,
        prefixes: &[String],
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.delete_prefixes(prefixes, fence).await)
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        delegate!(self, s => s.grant_lease(ttl).await)
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool, StoreError> {
        delegate!(self, s => s.keep_alive(lease).await)
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        delegate!(self, s => s.revoke(lease).await)
    }

    async fn watch(&self, prefix: &str) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        delegate!(self, s => s.watch(prefix).await)
    }
}

#[cfg(test)]
mod future_sizes {
    use super::*;

    /// Every run's checkpoint writer and watch feed awaits the store, and a
    /// spawned task's future is copied as it is spawned and moved: a store
    /// future of 11 KB (an etcd request's, inlined) made each run copy
    /// hundreds of kilobytes. Either backend's futures stay small.
    #[tokio::test]
    async fn the_stores_futures_are_small() {
        let dir = std::env::temp_dir().join(format!("weft-sizes-{}", std::process::id()));
        let embedded = EmbeddedStore::open(&dir.join("s.redb")).unwrap();
        let etcd = EtcdStore::connect(&["http://127.0.0.1:1".into()]).unwrap();
        for store in [AnyStore::Embedded(embedded), AnyStore::Etcd(etcd)] {
            let sizes = [
                ("get", std::mem::size_of_val(&store.get("x"))),
                ("scan", std::mem::size_of_val(&store.scan("x"))),
                (
                    "put_all",
                    std::mem::size_of_val(&store.put_all(vec![], None)),
                ),
                (
                    "create",
                    std::mem::size_of_val(&store.create("x", vec![], None)),
                ),
                (
                    "chunks::get",
                    std::mem::size_of_val(&chunks::get(&store, "x")),
                ),
            ];
            for (what, size) in sizes {
                assert!(size <= 2048, "{what}: {size} bytes");
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
