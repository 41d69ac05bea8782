//! The embedded backend: one redb file and its write-ahead log. A write
//! survives `kill -9` of the process when it returns: its changes are
//! appended to the log ([`crate::wal`]) and kept in memory
//! ([`pending`]), where every read looks first. One fsync of the log every
//! flush interval ([`Flush::Every`]) — or before each write returns,
//! shared by the writes that wait for it together ([`Flush::EachWrite`]) —
//! makes the writes since the last one survive the machine going down too.
//! The database takes what is kept in memory in one durable commit every
//! [`CommitPolicy::after`] or [`CommitPolicy::bytes`], on the flush
//! thread, while writes go on: a wave of many runs costs one log append
//! each, one shared fsync, and a share of one database commit, and the
//! database's pages are written once per commit, not once per write.
//!
//! Each key's record ([`records`]) holds its create and last-change revisions, its lease
//! and its value; one counter gives revisions as etcd does. A value of
//! 1 MiB or more is kept in a file of its own beside the database
//! ([`values`]) and the record refers to it, so that it is written once:
//! not into the log and again into the database's pages. Leases live in
//! memory with the process that owns the file: keys under a lease vanish
//! when it is not kept alive, and on open (their owner is gone). Watchers
//! are fed from the writes this process makes — the only writer.
//! Opening the store ([`recovery`]) brings its files to one consistent
//! state first: the log from before a crash replayed into the database,
//! keys under a lease dropped, value files no key refers to deleted.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redb::{Database, TableDefinition};
use tokio::sync::{broadcast, mpsc};

mod pending;
mod records;
mod recovery;
mod values;

pub use pending::CommitPolicy;
use pending::Log;
use records::{Tx, Watched, entry, lease_of, merged, mod_of, read_table};
use recovery::{Recovered, recover};
use values::{EXTERNAL_BYTES, Missing, Values};

use super::{Entry, Fence, LeaseId, Revision, Store, StoreError, WatchEvent};

/// When the embedded store's writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Each write's log frame is synced to disk (an fsync, shared by the
    /// writes waiting at the same time) before it returns.
    EachWrite,
    /// Each write is in the log (the operating system's hands: safe from
    /// `kill -9`) before it returns; one fsync this often makes every
    /// write since the last one durable against a machine crash too.
    Every(Duration),
}

impl Default for Flush {
    fn default() -> Self {
        Self::Every(Duration::from_millis(20))
    }
}

/// How often the flush thread looks for a batch to commit when no flush
/// interval sets its pace ([`Flush::EachWrite`]).
const COMMIT_TICK: Duration = Duration::from_millis(100);

/// key → record: create revision, change revision, lease (8 bytes each,
/// little-endian), then the value.
pub(crate) const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// Counters: the last revision, the last lease id, and `log`, the last
/// log frame the database holds.
pub(crate) const COUNTERS: TableDefinition<&str, i64> = TableDefinition::new("counters");
/// The counter naming the last log frame the database holds.
const APPLIED: &str = "log";
/// The counter that gives revisions.
const REVISION: &str = "revision";
/// Writes smaller than this are made on the caller's thread rather than a
/// blocking one: a log append and a few map inserts, some microseconds (a
/// hop to another thread and back costs more; checkpoints are on every
/// run's critical path). Below [`EXTERNAL_BYTES`], so no such write makes
/// a value's file.
const QUICK_WRITE_BYTES: usize = 64 << 10;
const _: () = assert!(QUICK_WRITE_BYTES < EXTERNAL_BYTES);

/// How many times a read starts again when a big value's file was deleted
/// under it (its key rewritten and committed meanwhile): each try reads
/// the newer record, so a second is almost always enough.
const READ_TRIES: usize = 8;

/// The prefixes one transaction of `delete_prefixes` takes: a run has a
/// dozen keys or so, so a batch is about a thousand removals, a few
/// milliseconds of holding the log.
const PREFIXES_PER_DELETION: usize = 64;

/// Writes the embedded store made (counter).
pub const WRITES_METRIC: &str = "weft_store_writes_total";
/// Syncs of the embedded store's log to disk (counter).
pub const LOG_SYNCS_METRIC: &str = "weft_store_log_syncs_total";
/// Durable commits of the embedded store's batches to its database
/// (counter).
pub const COMMITS_METRIC: &str = "weft_store_commits_total";

/// A store in one file.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

/// What the embedded store has done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbeddedStats {
    /// Writes made (transactions that changed something).
    pub writes: u64,
    /// Syncs of the log to disk (each covers every write before it).
    pub log_syncs: u64,
    /// Durable commits of a batch of writes to the database.
    pub commits: u64,
}

struct Inner {
    db: Database,
    /// Big values, each in a file of its own.
    values: Values,
    /// The log and the writes the database has not taken; writers append
    /// under its lock. An async lock: a write on the runtime's thread
    /// awaits it ([`EmbeddedStore::writing`]), blocking threads take it
    /// with [`Inner::log`].
    log: tokio::sync::Mutex<Log>,
    flush: Flush,
    policy: CommitPolicy,
    /// The last log frame synced to disk.
    synced: AtomicU64,
    /// Held while the log is synced: writers waiting for an fsync find
    /// their frames covered by the one before them.
    syncing: Mutex<()>,
    /// Held while a batch is committed to the database.
    committing: Mutex<()>,
    /// Live leases: their time to live and when they expire.
    leases: Mutex<HashMap<LeaseId, (Duration, Instant)>>,
    changes: broadcast::Sender<WatchEvent>,
    /// The prefixes watches follow: writes make events for these only.
    watched: Arc<Watched>,
    writes: AtomicU64,
    log_syncs: AtomicU64,
    commits: AtomicU64,
}

pub(crate) fn backend(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend {
        source: Box::new(error),
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmbeddedStore {
    /// Opens (or creates) the store at `path`, flushing as [`Flush`]'s
    /// default says.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, Flush::default())
    }

    /// Opens (or creates) the store at `path`, committing as
    /// [`CommitPolicy`]'s default says.
    pub fn open_with(path: &Path, flush: Flush) -> Result<Self, StoreError> {
        Self::open_configured(path, flush, CommitPolicy::default())
    }

    /// Opens (or creates) the store at `path`: replays what its log holds
    /// from before a crash, and deletes keys left under a lease by an
    /// earlier process (their owner is gone).
    pub fn open_configured(
        path: &Path,
        flush: Flush,
        policy: CommitPolicy,
    ) -> Result<Self, StoreError> {
        let Recovered {
            db,
            values,
            wal,
            counters,
            synced,
        } = recover(path)?;
        let snapshot = read_table(&db)?;
        let (changes, _) = broadcast::channel(1024);
        let inner = Arc::new(Inner {
            db,
            values,
            log: tokio::sync::Mutex::new(Log::new(wal, counters, snapshot)),
            flush,
            policy,
            synced: AtomicU64::new(synced),
            syncing: Mutex::default(),
            committing: Mutex::default(),
            leases: Mutex::default(),
            changes,
            watched: Arc::default(),
            writes: AtomicU64::new(0),
            log_syncs: AtomicU64::new(0),
            commits: AtomicU64::new(0),
        });
        spawn_flusher(
            Arc::downgrade(&inner),
            match flush {
                Flush::Every(interval) => interval,
                Flush::EachWrite => COMMIT_TICK,
            },
        );
        Ok(Self { inner })
    }

    /// What the store has done since it was opened.
    pub fn stats(&self) -> EmbeddedStats {
        self.inner.stats()
    }

    /// Makes every write so far durable against a machine crash, and the
    /// database take everything kept in memory, now rather than at the
    /// next flush interval or commit.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.blocking(|inner| inner.commit_all()).await
    }

    /// Writes in one transaction: on the caller's thread when that is short
    /// and cannot wait on the disk — a small write, the log synced by the
    /// flush thread — else on a blocking thread. The caller's thread is an
    /// async runtime's: it awaits the log's lock, never blocks on it. A
    /// big write, a lease's expiry or the end of a commit may hold the lock
    /// while the disk is slow; the coordinator's other tasks go on
    /// meanwhile, and the waiting writes take no thread of their own.
    async fn writing<T: Send + 'static>(
        &self,
        bytes: usize,
        work: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        if bytes <= QUICK_WRITE_BYTES && matches!(self.inner.flush, Flush::Every(_)) {
            let log = self.inner.log.lock().await;
            return self.inner.write_holding(log, work);
        }
        self.blocking(move |inner| inner.write(work)).await
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
    /// Every key starting with `prefix`, in key order, as `each` makes of
    /// it and its record; with the revision they were read at (taken with
    /// the overlay and the snapshot under the log's lock, so no write falls
    /// between them).
    fn scan_with<T>(
        &self,
        prefix: &str,
        each: impl Fn(&str, &[u8]) -> T,
    ) -> Result<(Vec<T>, Revision), StoreError> {
        let (overlay, table, revision) = {
            let log = self.log();
            (
                log.overlay(prefix),
                log.snapshot.clone(),
                log.counter(REVISION),
            )
        };
        let found = merged(&table, overlay, prefix, |key, record| {
            Some(each(key, record))
        })?;
        Ok((found, revision))
    }

    /// A key's entry, if present.
    fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let mut missing = None;
        for _ in 0..READ_TRIES {
            let read = {
                let log = self.log();
                match log.lookup(key) {
                    Some(kept) => {
                        let Some(record) = kept.cloned() else {
                            return Ok(None);
                        };
                        drop(log);
                        entry(&self.values, key, &record)?
                    }
                    None => {
                        let table = log.snapshot.clone();
                        drop(log);
                        let Some(record) = table.get(key).map_err(backend)? else {
                            return Ok(None);
                        };
                        entry(&self.values, key, record.value())?
                    }
                }
            };
            match read {
                Ok(found) => return Ok(Some(found)),
                Err(gone) => missing = Some(gone),
            }
        }
        Err(lost(key, missing))
    }

    /// Every entry under `prefix`, in key order, and the revision they
    /// were read at.
    fn scan(&self, prefix: &str) -> Result<(Vec<Entry>, Revision), StoreError> {
        let mut missing = None;
        'again: for _ in 0..READ_TRIES {
            let mut found = Vec::new();
            let (reads, revision) =
                self.scan_with(prefix, |key, record| entry(&self.values, key, record))?;
            for read in reads {
                match read? {
                    Ok(entry) => found.push(entry),
                    Err(gone) => {
                        missing = Some(gone);
                        continue 'again;
                    }
                }
            }
            return Ok((found, revision));
        }
        Err(lost(prefix, missing))
    }

    fn stats(&self) -> EmbeddedStats {
        EmbeddedStats {
            writes: self.writes.load(Ordering::Relaxed),
            log_syncs: self.log_syncs.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
        }
    }

    /// Writes in one transaction: its changes are appended to the log and
    /// kept in memory (with [`Flush::EachWrite`], the log is synced before
    /// this returns); the events it produced then go to watchers.
    fn write<T>(
        &self,
        work: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_holding(self.log(), work)
    }

    /// The log, its lock taken on this thread, which must not be an async
    /// runtime's unless the lock is free (as it is when the store is
    /// dropped: nothing else holds it then).
    fn log(&self) -> tokio::sync::MutexGuard<'_, Log> {
        self.log
            .try_lock()
            .unwrap_or_else(|_| self.log.blocking_lock())
    }

    /// [`Inner::write`], with the log's lock already taken.
    fn write_holding<T>(
        &self,
        mut log: tokio::sync::MutexGuard<'_, Log>,
        work: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (result, events, last) = {
            let mut tx = Tx::new(&log, &self.values, &self.watched);
            let made = work(&mut tx);
            let changes = tx.changes;
            let written: Vec<u64> = changes.written.iter().map(|(id, _)| *id).collect();
            let applied = made.and_then(|result| {
                let events = log.apply(changes).map_err(|source| StoreError::Io {
                    path: log.wal.path().display().to_string(),
                    source,
                })?;
                Ok((result, events))
            });
            match applied {
                Ok((result, events)) => (result, events, log.wal.last()),
                Err(error) => {
                    // A write that did not happen leaves no value files.
                    self.values.delete(written);
                    return Err(error);
                }
            }
        };
        // Let go before the fsync, which takes the lock again.
        drop(log);
        self.writes.fetch_add(1, Ordering::Relaxed);
        if self.flush == Flush::EachWrite {
            self.sync_to(last)?;
        }
        for event in events {
            let _ = self.changes.send(event);
        }
        Ok(result)
    }

    /// Syncs the log to disk up to frame `seq` at least. One writer syncs
    /// at a time; those waiting meanwhile usually find their frames synced
    /// by it (group commit).
    fn sync_to(&self, seq: u64) -> Result<(), StoreError> {
        if self.synced.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let _turn = locked(&self.syncing);
        if self.synced.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let (files, last, path, values) = {
            let mut log = self.log();
            let values = std::mem::take(&mut log.unsynced);
            (
                log.wal.files(),
                log.wal.last(),
                log.wal.path().to_owned(),
                values,
            )
        };
        // The value files first: a synced frame never refers to a file the
        // machine could lose.
        if let Err(error) = self.values.sync(&values) {
            let mut log = self.log();
            let mut again = values;
            again.append(&mut log.unsynced);
            log.unsynced = again;
            return Err(error);
        }
        for file in files {
            file.sync_data().map_err(|source| StoreError::Io {
                path: path.display().to_string(),
                source,
            })?;
        }
        self.synced.fetch_max(last, Ordering::Release);
        self.log_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The flush thread's round: the log synced, and the batch in memory
    /// committed to the database if it is due.
    fn flush_round(&self) -> Result<(), StoreError> {
        // The metrics follow the counters here, off the writers' path.
        let stats = self.stats();
        metrics::counter!(WRITES_METRIC).absolute(stats.writes);
        metrics::counter!(LOG_SYNCS_METRIC).absolute(stats.log_syncs);
        metrics::counter!(COMMITS_METRIC).absolute(stats.commits);
        if matches!(self.flush, Flush::Every(_)) {
            let last = self.log().wal.last();
            self.sync_to(last)?;
        }
        self.commit(Some(Instant::now()))
    }

    /// Commits the batch in memory to the database (one durable commit)
    /// when it is due (`now`), or whatever it holds (`None`); the log's
    /// segment that held it is emptied after. Writes go on meanwhile.
    fn commit(&self, now: Option<Instant>) -> Result<(), StoreError> {
        let _one = locked(&self.committing);
        let Some(batch) = self.log().seal(&self.policy, now) else {
            return Ok(());
        };
        // Once the database holds a reference, its value's file must be on
        // disk: the batch's files are synced first (with the log, usually
        // synced already).
        self.sync_to(batch.last)?;
        let txn = self.db.begin_write().map_err(backend)?;
        {
            let mut entries = txn.open_table(ENTRIES).map_err(backend)?;
            for (key, record) in &batch.entries {
                match record {
                    Some(record) => {
                        entries
                            .insert(key.as_str(), record.as_slice())
                            .map_err(backend)?;
                    }
                    None => {
                        entries.remove(key.as_str()).map_err(backend)?;
                    }
                }
            }
            let mut counters = txn.open_table(COUNTERS).map_err(backend)?;
            for (name, value) in &batch.counters {
                counters.insert(name.as_str(), *value).map_err(backend)?;
            }
            counters
                .insert(APPLIED, batch.last as i64)
                .map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        let snapshot = read_table(&self.db)?;
        let unused = {
            let mut log = self.log();
            log.committed(snapshot).map_err(|source| StoreError::Io {
                path: log.wal.path().display().to_string(),
                source,
            })?
        };
        self.values.delete(unused);
        Ok(())
    }

    /// Everything so far synced and in the database.
    fn commit_all(&self) -> Result<(), StoreError> {
        let last = self.log().wal.last();
        self.sync_to(last)?;
        // A batch whose commit failed before is tried first, then the rest.
        self.commit(None)?;
        self.commit(None)
    }

    /// Deletes the keys of leases that were not kept alive.
    fn expire(&self) -> Result<(), StoreError> {
        let now = Instant::now();
        let expired: Vec<LeaseId> = {
            let mut leases = locked(&self.leases);
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

    /// Deletes a lease's keys, at a revision of their own as etcd does: a
    /// reader that saw them knows a later read without them is newer.
    fn drop_lease_keys(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.write(|tx| {
            let keys = tx.keys("", |record| lease_of(record) == lease)?;
            if !keys.is_empty() {
                tx.next_revision();
            }
            for key in keys {
                tx.remove(key)?;
            }
            Ok(())
        })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A clean close leaves nothing to replay.
        if let Err(error) = self.commit_all() {
            tracing::warn!(%error, "the store's last writes stay in its log, replayed on open");
        }
    }
}

/// Syncs the log and commits due batches every `interval` until the store
/// is gone.
fn spawn_flusher(inner: std::sync::Weak<Inner>, interval: Duration) {
    let spawned = std::thread::Builder::new()
        .name("weft-store-flush".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                let Some(inner) = inner.upgrade() else { return };
                if let Err(error) = inner.flush_round() {
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
        self.blocking(move |inner| inner.get(&key)).await
    }

    async fn scan_at(&self, prefix: &str) -> Result<(Vec<Entry>, Revision), StoreError> {
        let prefix = prefix.to_owned();
        self.blocking(move |inner| inner.scan(&prefix)).await
    }

    async fn scan_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let prefix = prefix.to_owned();
        self.blocking(move |inner| Ok(inner.scan_with(&prefix, |key, _| key.to_owned())?.0))
            .await
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let (key, fence) = (key.to_owned(), fence.cloned());
        self.writing(key.len() + value.len(), move |tx| {
            tx.check_fence(fence.as_ref())?;
            tx.write_key(&key, &value, 0)
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
        self.writing(bytes, move |tx| {
            tx.check_fence(fence.as_ref())?;
            let mut last = 0;
            for (key, value) in &writes {
                last = tx.write_key(key, value, 0)?;
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
        if let Some(lease) = lease
            && !locked(&self.inner.leases).contains_key(&lease)
        {
            return Err(StoreError::NoLease(lease));
        }
        let key = key.to_owned();
        self.writing(key.len() + value.len(), move |tx| {
            if tx.record(&key, |_| ())?.is_some() {
                return Ok(None);
            }
            tx.write_key(&key, &value, lease.unwrap_or(0)).map(Some)
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
        self.writing(key.len() + value.len(), move |tx| {
            tx.check_fence(fence.as_ref())?;
            if tx.record(&key, mod_of)?.unwrap_or(0) != expected {
                return Ok(false);
            }
            tx.write_key(&key, &value, 0).map(|_| true)
        })
        .await
    }

    async fn delete_prefixes(
        &self,
        prefixes: &[String],
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        let (prefixes, fence) = (prefixes.to_vec(), fence.cloned());
        self.blocking(move |inner| {
            // The log's lock is let go between batches, so that the
            // checkpoints of running runs are not held up behind a long
            // deletion.
            for batch in prefixes.chunks(PREFIXES_PER_DELETION) {
                inner.write(|tx| {
                    tx.check_fence(fence.as_ref())?;
                    let mut keys = Vec::new();
                    for prefix in batch {
                        keys.extend(tx.keys(prefix, |_| true)?);
                    }
                    if !keys.is_empty() {
                        tx.next_revision();
                    }
                    for key in keys {
                        tx.remove(key)?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        })
        .await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        self.blocking(move |inner| {
            let id = inner.write(|tx| Ok(tx.next_count("lease")))?;
            let mut leases = locked(&inner.leases);
            leases.insert(id, (ttl, Instant::now() + ttl));
            Ok(id)
        })
        .await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool, StoreError> {
        self.blocking(move |inner| {
            let mut leases = locked(&inner.leases);
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
            locked(&inner.leases).remove(&lease);
            inner.drop_lease_keys(lease)
        })
        .await
    }

    async fn watch(&self, prefix: &str) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        let following = self.inner.watched.follow(prefix);
        let mut changes = self.inner.changes.subscribe();
        let (tx, rx) = mpsc::channel(256);
        let prefix = prefix.to_owned();
        // Weak: a watch does not keep the file open after the store is gone.
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let _following = following;
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

/// A read that found its value's file missing every time it tried: not a
/// key rewritten meanwhile (the next try would read the new record) but
/// a file deleted or lost outside the store.
fn lost(key: &str, missing: Option<Missing>) -> StoreError {
    let (key, file) = missing.map_or_else(
        || (key.to_owned(), String::new()),
        |m| (m.key, format!(" {}", m.path.display())),
    );
    StoreError::Corrupt {
        key,
        reason: format!(
            "its value's file{file} is missing ({READ_TRIES} reads found it gone): deleted or lost outside the store"
        ),
    }
}

#[cfg(test)]
mod tests;
