//! The embedded backend: one redb file, written in ACID transactions that
//! are on disk when they commit, so `kill -9` loses nothing acknowledged.
//!
//! Each key's record holds its create and last-change revisions, its lease
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

use super::{Entry, Fence, LeaseId, Revision, Store, StoreError, WatchEvent};

/// key → record: create revision, change revision, lease (8 bytes each,
/// little-endian), then the value.
const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// Counters: the last revision and the last lease id.
const COUNTERS: TableDefinition<&str, i64> = TableDefinition::new("counters");
const HEADER: usize = 24;

/// A store in one file.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    /// Live leases: their time to live and when they expire.
    leases: Mutex<HashMap<LeaseId, (Duration, Instant)>>,
    changes: broadcast::Sender<WatchEvent>,
}

fn backend(error: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(error.to_string())
}

impl EmbeddedStore {
    /// Opens (or creates) the store at `path`. Keys left under a lease by
    /// an earlier process are deleted: their owner is gone.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(backend)?;
        }
        let db = Database::create(path).map_err(|error| match error {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Backend(format!(
                "{} is in use by another process (one coordinator per data directory)",
                path.display()
            )),
            other => backend(other),
        })?;
        let (changes, _) = broadcast::channel(1024);
        let inner = Inner {
            db,
            leases: Mutex::default(),
            changes,
        };
        let txn = inner.db.begin_write().map_err(backend)?;
        {
            txn.open_table(COUNTERS).map_err(backend)?;
            let mut entries = txn.open_table(ENTRIES).map_err(backend)?;
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
        Ok(Self {
            inner: Arc::new(inner),
        })
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
    /// once it has committed.
    fn write<T>(
        &self,
        work: impl FnOnce(&WriteTransaction, &mut Vec<WatchEvent>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let txn = self.db.begin_write().map_err(backend)?;
        let mut events = Vec::new();
        let result = work(&txn, &mut events)?;
        txn.commit().map_err(backend)?;
        for event in events {
            let _ = self.changes.send(event);
        }
        Ok(result)
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
        self.write(|txn, events| {
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
                events.push(WatchEvent::Delete { key });
            }
            Ok(())
        })
    }
}

/// The next revision, counted in the transaction.
fn next_revision(txn: &WriteTransaction) -> Result<Revision, StoreError> {
    next_count(txn, "revision")
}

/// Counter `name` plus one, kept in the transaction.
fn next_count(txn: &WriteTransaction, name: &str) -> Result<i64, StoreError> {
    let mut counters = txn.open_table(COUNTERS).map_err(backend)?;
    let next = counters
        .get(name)
        .map_err(backend)?
        .map_or(0, |v| v.value())
        + 1;
    counters.insert(name, next).map_err(backend)?;
    Ok(next)
}

/// Whether the fence holds in this transaction.
fn check_fence(txn: &WriteTransaction, fence: Option<&Fence>) -> Result<(), StoreError> {
    let Some(fence) = fence else { return Ok(()) };
    let entries = txn.open_table(ENTRIES).map_err(backend)?;
    let held = entries
        .get(fence.key.as_str())
        .map_err(backend)?
        .is_some_and(|record| create_of(record.value()) == fence.revision);
    if held {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            key: fence.key.clone(),
            revision: fence.revision,
        })
    }
}

/// Writes `key` at a new revision (keeping its create revision).
fn write_key(
    txn: &WriteTransaction,
    key: &str,
    value: &[u8],
    lease: LeaseId,
    events: &mut Vec<WatchEvent>,
) -> Result<Revision, StoreError> {
    let revision = next_revision(txn)?;
    let mut entries = txn.open_table(ENTRIES).map_err(backend)?;
    let created = entries
        .get(key)
        .map_err(backend)?
        .map_or(revision, |record| create_of(record.value()));
    let mut record = Vec::with_capacity(HEADER + value.len());
    record.extend_from_slice(&created.to_le_bytes());
    record.extend_from_slice(&revision.to_le_bytes());
    record.extend_from_slice(&lease.to_le_bytes());
    record.extend_from_slice(value);
    entries.insert(key, record.as_slice()).map_err(backend)?;
    events.push(WatchEvent::Put(Entry {
        key: key.to_owned(),
        value: value.to_vec(),
        create_revision: created,
        mod_revision: revision,
    }));
    Ok(revision)
}

fn field(record: &[u8], at: usize) -> i64 {
    record
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i64::from_le_bytes)
}

fn create_of(record: &[u8]) -> Revision {
    field(record, 0)
}

fn lease_of(record: &[u8]) -> LeaseId {
    field(record, 16)
}

fn entry(key: &str, record: &[u8]) -> Entry {
    Entry {
        key: key.to_owned(),
        value: record.get(HEADER..).unwrap_or_default().to_vec(),
        create_revision: create_of(record),
        mod_revision: field(record, 8),
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
                found.push(entry(key.value(), record.value()));
            }
            Ok(found)
        })
        .await
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let (key, fence) = (key.to_owned(), fence.cloned());
        self.blocking(move |inner| {
            inner.write(|txn, events| {
                check_fence(txn, fence.as_ref())?;
                write_key(txn, &key, &value, 0, events)
            })
        })
        .await
    }

    async fn put_all(
        &self,
        writes: Vec<(String, Vec<u8>)>,
        fence: Option<&Fence>,
    ) -> Result<Revision, StoreError> {
        let fence = fence.cloned();
        self.blocking(move |inner| {
            inner.write(|txn, events| {
                check_fence(txn, fence.as_ref())?;
                let mut last = 0;
                for (key, value) in &writes {
                    last = write_key(txn, key, value, 0, events)?;
                }
                Ok(last)
            })
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
                    return Err(StoreError::Backend(format!("lease {lease} not found")));
                }
            }
            inner.write(|txn, events| {
                let exists = txn
                    .open_table(ENTRIES)
                    .map_err(backend)?
                    .get(key.as_str())
                    .map_err(backend)?
                    .is_some();
                if exists {
                    return Ok(None);
                }
                write_key(txn, &key, &value, lease.unwrap_or(0), events).map(Some)
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
            inner.write(|txn, events| {
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
                write_key(txn, &key, &value, 0, events).map(|_| true)
            })
        })
        .await
    }

    async fn delete_prefix(&self, prefix: &str, fence: Option<&Fence>) -> Result<(), StoreError> {
        let (prefix, fence) = (prefix.to_owned(), fence.cloned());
        self.blocking(move |inner| {
            inner.write(|txn, events| {
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
                    next_revision(txn)?;
                }
                for key in keys {
                    entries.remove(key.as_str()).map_err(backend)?;
                    events.push(WatchEvent::Delete { key });
                }
                Ok(())
            })
        })
        .await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        self.blocking(move |inner| {
            let id = inner.write(|txn, _| next_count(txn, "lease"))?;
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
