//! A key's stored record (its revisions, lease and value) and how a
//! transaction writes one: revisions counted as etcd counts them, fences
//! checked inside the transaction, every change noted for the log, the
//! batch in memory and watchers. A transaction reads what it wrote itself,
//! then the writes kept in memory, then the database.

use std::collections::BTreeMap;

use redb::{Database, ReadOnlyTable, ReadableDatabase};

use super::super::{Entry, Fence, LeaseId, Revision, StoreError, WatchEvent};
use super::pending::{Changes, Log, Record, under};
use super::values::{EXTERNAL_BYTES, Missing, Reference, Values};
use super::{ENTRIES, REVISION, backend};

/// A record's header: create revision, change revision, lease (8 bytes
/// each, little-endian); the value follows, or a [`Reference`] to it.
const HEADER: usize = 24;

/// The lease word's top bit: the record holds a [`Reference`] to a value
/// kept in a file of its own ([`super::values`]), not the value. Leases are
/// counted up from 1 and never reach it, so records written before values
/// were kept apart read as they did.
const EXTERNAL: i64 = i64::MIN;

/// The database's table of records, opened for reading.
pub(super) type Table = ReadOnlyTable<&'static str, &'static [u8]>;

/// Opens the database's table of records at its last commit.
pub(super) fn read_table(db: &Database) -> Result<Table, StoreError> {
    db.begin_read()
        .map_err(backend)?
        .open_table(ENTRIES)
        .map_err(backend)
}

/// The key prefixes that live watches follow, each as many times as it is
/// watched.
#[derive(Default)]
pub(super) struct Watched(std::sync::Mutex<Vec<String>>);

impl Watched {
    /// Whether a change to `key` is for some watch.
    pub(super) fn covers(&self, key: &str) -> bool {
        self.lock()
            .iter()
            .any(|prefix| key.starts_with(prefix.as_str()))
    }

    /// Follows `prefix` until the guard is dropped.
    pub(super) fn follow(self: &std::sync::Arc<Self>, prefix: &str) -> Following {
        self.lock().push(prefix.to_owned());
        Following {
            watched: std::sync::Arc::downgrade(self),
            prefix: prefix.to_owned(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A watch's prefix, followed while this lives.
pub(super) struct Following {
    watched: std::sync::Weak<Watched>,
    prefix: String,
}

impl Drop for Following {
    fn drop(&mut self) {
        if let Some(watched) = self.watched.upgrade() {
            let mut prefixes = watched.lock();
            if let Some(at) = prefixes.iter().position(|p| *p == self.prefix) {
                prefixes.swap_remove(at);
            }
        }
    }
}

/// One write transaction, made while the log is held.
pub(super) struct Tx<'a> {
    log: &'a Log,
    values: &'a Values,
    /// The prefixes being watched: a change to a key under none of them
    /// makes no event (and a big value is not copied into one).
    watched: &'a Watched,
    pub(super) changes: Changes,
}

impl<'a> Tx<'a> {
    pub(super) fn new(log: &'a Log, values: &'a Values, watched: &'a Watched) -> Self {
        Self {
            log,
            values,
            watched,
            changes: Changes::default(),
        }
    }

    /// The database's table as of its last commit (the log keeps it open).
    fn table(&self) -> &Table {
        &self.log.snapshot
    }

    /// What `read` makes of a key's current record, if it has one.
    pub(super) fn record<T>(
        &mut self,
        key: &str,
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        let kept = match self.changes.entries.get(key) {
            Some(record) => Some(record.as_ref()),
            None => self.log.lookup(key),
        };
        if let Some(record) = kept {
            return Ok(record.map(|r| read(r)));
        }
        let stored = self.table().get(key).map_err(backend)?;
        Ok(stored.map(|record| read(record.value())))
    }

    /// The keys under `prefix` whose current record `keep` takes, in key
    /// order.
    pub(super) fn keys(
        &mut self,
        prefix: &str,
        keep: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<String>, StoreError> {
        let mut overlay = self.log.overlay(prefix);
        for (key, record) in under(&self.changes.entries, prefix) {
            overlay.insert(key.clone(), record.clone());
        }
        merged(self.table(), overlay, prefix, |key, record| {
            keep(record).then(|| key.to_owned())
        })
    }

    fn put(&mut self, key: &str, record: Vec<u8>) {
        self.changes.frame.put(key, &record);
        self.changes
            .entries
            .insert(key.to_owned(), Some(Record::new(record)));
    }

    /// Removes a key (noted for watchers).
    pub(super) fn remove(&mut self, key: String) -> Result<(), StoreError> {
        // A value kept in a file of its own: the file goes once the
        // database has taken the removal.
        if let Some(Some(old)) = self.record(&key, external_of)? {
            self.changes.superseded.push(old.id);
        }
        self.changes.frame.remove(&key);
        self.changes.entries.insert(key.clone(), None);
        if self.watched.covers(&key) {
            self.changes.events.push(WatchEvent::Delete { key });
        }
        Ok(())
    }

    /// Counter `name` plus one.
    pub(super) fn next_count(&mut self, name: &str) -> i64 {
        // A transaction counts on in its own copy, named once.
        let next = match self.changes.counters.get_mut(name) {
            Some(value) => {
                *value += 1;
                *value
            }
            None => {
                let next = self.log.counter(name) + 1;
                self.changes.counters.insert(name.to_owned(), next);
                next
            }
        };
        self.changes.frame.counter(name, next);
        next
    }

    /// The next revision.
    pub(super) fn next_revision(&mut self) -> Revision {
        self.next_count(REVISION)
    }

    /// Whether the fence holds now.
    pub(super) fn check_fence(&mut self, fence: Option<&Fence>) -> Result<(), StoreError> {
        let Some(fence) = fence else { return Ok(()) };
        let held = self.record(&fence.key, create_of)? == Some(fence.revision);
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
        &mut self,
        key: &str,
        value: &[u8],
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        let revision = self.next_revision();
        let (created, replaced) = self
            .record(key, |record| (create_of(record), external_of(record)))?
            .unwrap_or((revision, None));
        if let Some(old) = replaced {
            self.changes.superseded.push(old.id);
        }
        let record = if value.len() >= EXTERNAL_BYTES {
            let (reference, file) = self.values.write(value)?;
            self.changes.written.push((reference.id, file));
            header(created, revision, lease | EXTERNAL, &reference.encode())
        } else {
            header(created, revision, lease, value)
        };
        self.put(key, record);
        if self.watched.covers(key) {
            self.changes.events.push(WatchEvent::Put(Entry {
                key: key.to_owned(),
                value: value.to_vec(),
                create_revision: created,
                mod_revision: revision,
            }));
        }
        Ok(revision)
    }
}

/// The records under `prefix` that `each` makes something of, in key
/// order: the database's table read through what is kept in memory
/// (`overlay`).
pub(super) fn merged<T>(
    table: &Table,
    overlay: BTreeMap<String, Option<Record>>,
    prefix: &str,
    each: impl Fn(&str, &[u8]) -> Option<T>,
) -> Result<Vec<T>, StoreError> {
    let mut found = Vec::new();
    for item in table.range(prefix..).map_err(backend)? {
        let (key, record) = item.map_err(backend)?;
        let key = key.value();
        if !key.starts_with(prefix) {
            break;
        }
        if !overlay.contains_key(key)
            && let Some(made) = each(key, record.value())
        {
            found.push((key.to_owned(), made));
        }
    }
    let stored = found.len();
    for (key, record) in overlay {
        if let Some(made) = record.and_then(|record| each(&key, &record)) {
            found.push((key, made));
        }
    }
    if found.len() > stored {
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
    Ok(found.into_iter().map(|(_, made)| made).collect())
}

/// A record: its header, then `body` (the value, or a reference to it).
fn header(created: Revision, revision: Revision, lease: i64, body: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER + body.len());
    record.extend_from_slice(&created.to_le_bytes());
    record.extend_from_slice(&revision.to_le_bytes());
    record.extend_from_slice(&lease.to_le_bytes());
    record.extend_from_slice(body);
    record
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

/// A record's last-change revision.
pub(super) fn mod_of(record: &[u8]) -> Revision {
    field(record, 8)
}

pub(super) fn lease_of(record: &[u8]) -> LeaseId {
    field(record, 16) & !EXTERNAL
}

/// Where a record's value is kept, if it is kept in a file of its own.
pub(super) fn external_of(record: &[u8]) -> Option<Reference> {
    (field(record, 16) & EXTERNAL != 0)
        .then(|| Reference::decode(record.get(HEADER..)?))
        .flatten()
}

/// The entry a record stands for, its value read from its file if it is
/// kept in one ([`Missing`] if that file was deleted meanwhile).
pub(super) fn entry(
    values: &Values,
    key: &str,
    record: &[u8],
) -> Result<Result<Entry, Missing>, StoreError> {
    let value = match external_of(record) {
        Some(reference) => match values.read(key, &reference)? {
            Ok(value) => value,
            Err(missing) => return Ok(Err(missing)),
        },
        None => record.get(HEADER..).unwrap_or_default().to_vec(),
    };
    Ok(Ok(Entry {
        key: key.to_owned(),
        value,
        create_revision: create_of(record),
        mod_revision: mod_of(record),
    }))
}
