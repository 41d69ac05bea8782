//! A key's stored record (its revisions, lease and value) and how a
//! transaction writes one: revisions counted as etcd counts them, fences
//! checked inside the transaction, every change noted for watchers and for
//! the write-ahead log.

use redb::{ReadableTable, WriteTransaction};

use super::super::wal::Frame;
use super::super::{Entry, Fence, LeaseId, Revision, StoreError, WatchEvent};
use super::{COUNTERS, ENTRIES, backend};

/// A record's header: create revision, change revision, lease (8 bytes
/// each, little-endian); the value follows.
const HEADER: usize = 24;

/// What a transaction changed: for watchers, and for the log.
#[derive(Default)]
pub(super) struct Changes {
    pub(super) events: Vec<WatchEvent>,
    pub(super) frame: Frame,
}

impl Changes {
    pub(super) fn removed(&mut self, key: String) {
        self.frame.remove(&key);
        self.events.push(WatchEvent::Delete { key });
    }
}

/// The next revision, counted in the transaction.
pub(super) fn next_revision(
    txn: &WriteTransaction,
    changes: &mut Changes,
) -> Result<Revision, StoreError> {
    next_count(txn, changes, "revision")
}

/// Counter `name` plus one, kept in the transaction.
pub(super) fn next_count(
    txn: &WriteTransaction,
    changes: &mut Changes,
    name: &str,
) -> Result<i64, StoreError> {
    let mut counters = txn.open_table(COUNTERS).map_err(backend)?;
    let next = counters
        .get(name)
        .map_err(backend)?
        .map_or(0, |v| v.value())
        + 1;
    counters.insert(name, next).map_err(backend)?;
    changes.frame.counter(name, next);
    Ok(next)
}

/// Whether the fence holds in this transaction.
pub(super) fn check_fence(txn: &WriteTransaction, fence: Option<&Fence>) -> Result<(), StoreError> {
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
pub(super) fn write_key(
    txn: &WriteTransaction,
    key: &str,
    value: &[u8],
    lease: LeaseId,
    changes: &mut Changes,
) -> Result<Revision, StoreError> {
    let revision = next_revision(txn, changes)?;
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
    changes.frame.put(key, &record);
    changes.events.push(WatchEvent::Put(Entry {
        key: key.to_owned(),
        value: value.to_vec(),
        create_revision: created,
        mod_revision: revision,
    }));
    Ok(revision)
}

pub(super) fn field(record: &[u8], at: usize) -> i64 {
    record
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i64::from_le_bytes)
}

fn create_of(record: &[u8]) -> Revision {
    field(record, 0)
}

pub(super) fn lease_of(record: &[u8]) -> LeaseId {
    field(record, 16)
}

pub(super) fn entry(key: &str, record: &[u8]) -> Entry {
    Entry {
        key: key.to_owned(),
        value: record.get(HEADER..).unwrap_or_default().to_vec(),
        create_revision: create_of(record),
        mod_revision: field(record, 8),
    }
}
