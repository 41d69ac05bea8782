//! The embedded backend: one redb file, written in ACID transactions. A
//! write survives `kill -9` of the process when it returns: by default its
//! changes are in the write-ahead log ([`crate::wal`]) and one fsync per
//! flush interval makes everything since the last durable
//! ([`Flush::Every`]); [`Flush::EachWrite`] commits each write to disk
//! before it returns instead (an fsync per write). With the log, a small
//! write is made on the caller's thread when nobody flushes (it cannot wait
//! on the disk then); others go to the blocking pool.
//!
//! Each key's record ([`records`]) holds its create and last-change revisions, its lease
//! and its value; one counter gives revisions as etcd does. Leases live in
//! memory with the process that owns the file: keys under a lease vanish
//! when it is not kept alive, and on open (their owner is gone). Watchers
//! are fed from the writes this process makes — the only writer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use tokio::sync::{broadcast, mpsc};

mod records;

use records::{Changes, check_fence, entry, field, lease_of, next_count, next_revision, write_key};

use super::wal::{Change, Wal};
use super::{Entry, Fence, LeaseId, Revision, Store, StoreError, WatchEvent};

/// When the embedded store's writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Each write is committed to disk (an fsync) before it returns.
    EachWrite,
    /// Each write is in the write-ahead log (the operating system's hands:
    /// safe from `kill -9`) before it returns; one fsync this often makes
    /// every write since the last one durable against a machine crash too.
    Every(Duration),
}

impl Default for Flush {
    fn default() -> Self {
        Self::Every(Duration::from_millis(20))
    }
}

/// key → record: create revision, change revision, lease (8 bytes each,
/// little-endian), then the value.
pub(crate) const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// Counters: the last revision and the last lease id.
pub(crate) const COUNTERS: TableDefinition<&str, i64> = TableDefinition::new("counters");
/// The largest write made on the caller's thread rather than a blocking
/// one (see `EmbeddedStore::writing`).
const QUICK_WRITE_BYTES: usize = 64 << 10;

/// A store in one file.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    /// The log, with [`Flush::Every`]; writers append under its lock.
    wal: Mutex<Option<Wal>>,
    /// Live leases: their time to live and when they expire.
    leases: Mutex<HashMap<LeaseId, (Duration, Instant)>>,
    changes: broadcast::Sender<WatchEvent>,
}

pub(crate) fn backend(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend {
        source: Box::new(error),
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the store at `path`, flushing as [`Flush`]'s
    /// default says.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, Flush::default())
    }

    /// Opens (or creates) the store at `path`: replays what its log holds
    /// from before a crash, and deletes keys left under a lease by an
    /// earlier process (their owner is gone).
    pub fn open_with(path: &Path, flush: Flush) -> Result<Self, StoreError> {
        // The data directory is the owner's alone (0700), and so are its
        // files (0600): runs hold states, inputs and bundles.
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(backend)?;
            // A directory this user does not own (a mounted volume whose
            // group it writes through, as Kubernetes' fsGroup makes) is
            // left as it is: its files are still private.
            if let Err(error) =
                std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))
            {
                tracing::warn!(
                    dir = %parent.display(),
                    %error,
                    "the data directory could not be made private (0700)"
                );
            }
        }
        let db = create_database(path)?;
        private(path).map_err(backend)?;
        // The log is opened whatever the mode: what an earlier process left
        // in it is replayed either way.
        let (mut wal, replay) = Wal::open(path).map_err(backend)?;
        let txn = db.begin_write().map_err(backend)?;
        {
            let mut entries = txn.open_table(ENTRIES).map_err(backend)?;
            let mut counters = txn.open_table(COUNTERS).map_err(backend)?;
            for change in replay {
                match change {
                    Change::Put { key, record } => {
                        entries
                            .insert(key.as_str(), record.as_slice())
                            .map_err(backend)?;
                    }
                    Change::Remove { key } => {
                        entries.remove(key.as_str()).map_err(backend)?;
                    }
                    Change::Counter { name, value } => {
                        counters.insert(name.as_str(), value).map_err(backend)?;
                    }
                }
            }
            let leased: Vec<String> = entries
                .iter()
                .map_err(backend)?
                .filter_map(Result::ok)
                .filter(|(_, record)| lease_of(record.value()) != 0)
                .map(|(key, _)| key.value().to_owned())
                .collect();
            for key in leased {
                entries.remove(key.as_str()).map_err(backend)?;
            }
        }
        txn.commit().map_err(backend)?;
        wal.clear().map_err(backend)?;
        let (changes, _) = broadcast::channel(1024);
        let inner = Arc::new(Inner {
            db,
            wal: Mutex::new(None),
            leases: Mutex::default(),
            changes,
        });
        if let Flush::Every(interval) = flush {
            *inner.wal.lock().unwrap_or_else(|e| e.into_inner()) = Some(wal);
            spawn_flusher(Arc::downgrade(&inner), interval);
        }
        Ok(Self { inner })
    }

    /// Writes `bytes` in one transaction: here and now when that is short
    /// and cannot wait on the disk — a small write, the log's lock free (so
    /// nobody is flushing): a log append plus an in-memory commit, some
    /// tens of microseconds — else on a blocking thread. (A hop to another thread
    /// and back costs about as much as such a write; checkpoints are on
    /// every run's critical path.)
    async fn writing<T: Send + 'static>(
        &self,
        bytes: usize,
        work: impl FnOnce(&WriteTransaction, &mut Changes) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        if bytes <= QUICK_WRITE_BYTES
            && let Ok(wal) = self.inner.wal.try_lock()
            && wal.is_some()
        {
            return self.inner.write_holding(wal, work);
        }
        self.blocking(move |inner| inner.write(work)).await
    }

    /// Every key starting with `prefix`, in key order, as `each` makes of
    /// it and its record.
    async fn scan_with<T: Send + 'static>(
        &self,
        prefix: &str,
        each: fn(&str, &[u8]) -> T,
    ) -> Result<Vec<T>, StoreError> {
        let prefix = prefix.to_owned();
        self.blocking(move |inner| {
            let txn = inner.db.begin_read().map_err(backend)?;
            let entries = txn.open_table(ENTRIES).map_err(backend)?;
            let mut found = Vec::new();
            for item in entries.range(prefix.as_str()..).map_err(backend)? {
                let (key, record) = item.map_err(backend)?;
                if !key.value().starts_with(&prefix) {
                    break;
                }
                found.push(each(key.value(), record.value()));
            }
            Ok(found)
        })
        .await
    }

    /// Runs `work` on a blocking thread, after expiring leases.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            inner.expire()?;
            work(&inner)
        })
        .await
        .map_err(backend)?
    }
}

impl Inner {
    /// Writes in one transaction; the events it produced go to watchers
    /// once it has committed. With a log, the changes are appended to it
    /// first and redb commits in memory.
    fn write<T>(
        &self,
        work: impl FnOnce(&WriteTransaction, &mut Changes) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let wal = self.wal.lock().unwrap_or_else(|e| e.into_inner());
        self.write_holding(wal, work)
    }

    /// [`write`](Self::write), the log's lock already held.
    fn write_holding<T>(
        &self,
        mut wal: std::sync::MutexGuard<'_, Option<Wal>>,
        work: impl FnOnce(&WriteTransaction, &mut Changes) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut txn = self.db.begin_write().map_err(backend)?;
        if wal.is_some() {
            txn.set_durability(redb::Durability::None)
                .map_err(backend)?;
        }
        let mut changes = Changes::default();
        let result = work(&txn, &mut changes)?;
        if let Some(wal) = wal.as_mut()
            && !changes.frame.is_empty()
        {
            wal.append(&changes.frame).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        drop(wal);
        for event in changes.events {
            let _ = self.changes.send(event);
        }
        Ok(result)
    }

    /// Makes every write so far durable in the database (one fsync), then
    /// empties the log.
    fn flush(&self) -> Result<(), StoreError> {
        let mut wal = self.wal.lock().unwrap_or_else(|e| e.into_inner());
        let Some(wal) = wal.as_mut().filter(|wal| !wal.is_empty()) else {
            return Ok(());
        };
        // An empty durable commit persists the in-memory ones before it.
        self.db
            .begin_write()
            .map_err(backend)?
            .commit()
            .map_err(backend)?;
        wal.clear().map_err(|source| StoreError::Io {
            path: wal.path().display().to_string(),
            source,
        })
    }

    /// Deletes the keys of leases that were not kept alive.
    fn expire(&self) -> Result<(), StoreError> {
        let now = Instant::now();
        let expired: Vec<LeaseId> = {
            let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            let expired: Vec<LeaseId> = leases
                .iter()
                .filter(|(_, (_, deadline))| *deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in &expired {
                leases.remove(id);
            }
            expired
        };
        for lease in expired {
            self.drop_lease_keys(lease)?;
        }
        Ok(())
    }

    fn drop_lease_keys(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.write(|txn, changes| {
            let mut entries = txn.open_table(ENTRIES).map_err(backend)?;
            let keys: Vec<String> = entries
                .iter()
                .map_err(backend)?
                .filter_map(Result::ok)
                .filter(|(_, record)| lease_of(record.value()) == lease)
                .map(|(key, _)| key.value().to_owned())
                .collect();
            for key in keys {
                entries.remove(key.as_str()).map_err(backend)?;
                changes.removed(key);
            }
            Ok(())
        })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A clean close leaves nothing to replay.
        if let Err(error) = self.flush() {
            tracing::warn!(%error, "the store's last writes stay in its log, replayed on open");
        }
    }
}

/// The database's page cache. redb's own default is a ceiling of 1 GiB,
/// which a coordinator filled a little more with every run it stored (the
/// pages a write touches stay cached): after 8,000 ten-node runs its
/// resident memory was 307 MB, against 264 MB with this cache. The store
/// is mostly written, and read back on recovery; this holds its B-tree's
/// inner pages many times over, and its tenth for writes holds what a
/// flush interval dirties.
const CACHE_BYTES: usize = 32 << 20;

/// How long opening waits for a store that is still closing: one just
/// dropped in this process can be held a moment longer by its flusher or a
/// watch finishing a pass.
const CLOSING_PATIENCE: Duration = Duration::from_secs(2);

/// Opens the database file, waiting out a close in progress; a file held
/// beyond that belongs to another owner.
fn create_database(path: &Path) -> Result<Database, StoreError> {
    let deadline = std::time::Instant::now() + CLOSING_PATIENCE;
    loop {
        match Database::builder().set_cache_size(CACHE_BYTES).create(path) {
            Ok(db) => return Ok(db),
            Err(redb::DatabaseError::DatabaseAlreadyOpen)
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::InUse(path.display().to_string()));
            }
            Err(other) => return Err(backend(other)),
        }
    }
}

/// Flushes the store every `interval` until it is gone.
fn spawn_flusher(inner: std::sync::Weak<Inner>, interval: Duration) {
    let spawned = std::thread::Builder::new()
        .name("weft-store-flush".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                let Some(inner) = inner.upgrade() else { return };
                if let Err(error) = inner.flush() {
                    tracing::error!(%error, "flushing the store failed; its log keeps the writes");
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "no flush thread: writes stay in the log until the store closes");
    }
}

impl Store for EmbeddedStore {
    fn max_value_bytes(&self) -> usize {
        // redb takes large values: a checkpoint always fits one transaction.
        crate::chunks::MAX_TOTAL_BYTES
    }

    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let key = key.to_owned();
        self.blocking(move |inner| {
            let txn = inner.db.begin_read().map_err(backend)?;
            let entries = txn.open_table(ENTRIES).map_err(backend)?;
            Ok(entries
                .get(key.as_str())
                .map_err(backend)?
                .map(|record| entry(&key, record.value())))
        })
        .await
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        self.scan_with(prefix, entry).await
    }

    async fn scan_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.scan_with(prefix, |key, _| key.to_owned()).await
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let (key, fence) = (key.to_owned(), fence.cloned());
        self.writing(key.len() + value.len(), move |txn, changes| {
            check_fence(txn, fence.as_ref())?;
            write_key(txn, &key, &value, 0, changes)
        })
        .await
    }

    async fn put_all(
        &self,
        writes: Vec<(String, Vec<u8>)>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let fence = fence.cloned();
        let bytes = writes.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.writing(bytes, move |txn, changes| {
            check_fence(txn, fence.as_ref())?;
            let mut last = 0;
            for (key, value) in &writes {
                last = write_key(txn, key, value, 0, changes)?;
            }
            Ok(last)
        })
        .await
    }

    async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Option<Revision>, StoreError> {
        let key = key.to_owned();
        self.blocking(move |inner| {
            if let Some(lease) = lease {
                let leases = inner.leases.lock().unwrap_or_else(|e| e.into_inner());
                if !leases.contains_key(&lease) {
                    return Err(StoreError::NoLease(lease));
                }
            }
            inner.write(|txn, changes| {
                let exists = txn
                    .open_table(ENTRIES)
                    .map_err(backend)?
                    .get(key.as_str())
                    .map_err(backend)?
                    .is_some();
                if exists {
                    return Ok(None);
                }
                write_key(txn, &key, &value, lease.unwrap_or(0), changes).map(Some)
            })
        })
        .await
    }

    async fn compare_and_put(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: Revision,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        let (key, fence) = (key.to_owned(), fence.cloned());
        self.blocking(move |inner| {
            inner.write(|txn, changes| {
                check_fence(txn, fence.as_ref())?;
                let current = txn
                    .open_table(ENTRIES)
                    .map_err(backend)?
                    .get(key.as_str())
                    .map_err(backend)?
                    .map_or(0, |record| field(record.value(), 8));
                if current != expected {
                    return Ok(false);
                }
                write_key(txn, &key, &value, 0, changes).map(|_| true)
            })
        })
        .await
    }

    async fn delete_prefix(&self, prefix: &str, fence: Option<&Fence>) -> Result<(), StoreError> {
        let (prefix, fence) = (prefix.to_owned(), fence.cloned());
        self.blocking(move |inner| {
            inner.write(|txn, changes| {
                check_fence(txn, fence.as_ref())?;
                let mut entries = txn.open_table(ENTRIES).map_err(backend)?;
                let keys: Vec<String> = entries
                    .range(prefix.as_str()..)
                    .map_err(backend)?
                    .filter_map(Result::ok)
                    .map(|(key, _)| key.value().to_owned())
                    .take_while(|key| key.starts_with(&prefix))
                    .collect();
                if !keys.is_empty() {
                    next_revision(txn, changes)?;
                }
                for key in keys {
                    entries.remove(key.as_str()).map_err(backend)?;
                    changes.removed(key);
                }
                Ok(())
            })
        })
        .await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        self.blocking(move |inner| {
            let id = inner.write(|txn, changes| next_count(txn, changes, "lease"))?;
            let mut leases = inner.leases.lock().unwrap_or_else(|e| e.into_inner());
            leases.insert(id, (ttl, Instant::now() + ttl));
            Ok(id)
        })
        .await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool, StoreError> {
        self.blocking(move |inner| {
            let mut leases = inner.leases.lock().unwrap_or_else(|e| e.into_inner());
            Ok(match leases.get_mut(&lease) {
                Some((ttl, deadline)) => {
                    *deadline = Instant::now() + *ttl;
                    true
                }
                None => false,
            })
        })
        .await
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.blocking(move |inner| {
            inner
                .leases
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&lease);
            inner.drop_lease_keys(lease)
        })
        .await
    }

    async fn watch(&self, prefix: &str) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        let mut changes = self.inner.changes.subscribe();
        let (tx, rx) = mpsc::channel(256);
        let prefix = prefix.to_owned();
        // Weak: a watch does not keep the file open after the store is gone.
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            // Leases expire on their own: the watch looks every 100 ms.
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    change = changes.recv() => match change {
                        Ok(event) => {
                            let key = match &event {
                                WatchEvent::Put(entry) => &entry.key,
                                WatchEvent::Delete { key } => key,
                            };
                            if key.starts_with(&prefix) && tx.send(event).await.is_err() {
                                return;
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = tick.tick() => {
                        let Some(inner) = inner.upgrade().filter(|_| !tx.is_closed()) else {
                            return;
                        };
                        let _ = tokio::task::spawn_blocking(move || inner.expire()).await;
                    }
                }
            }
        });
        Ok(rx)
    }
}

/// Makes `path` readable and writable by its owner only.
fn private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests;
