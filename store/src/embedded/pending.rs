//! The writes the database has not taken yet. A write is appended to the
//! log and kept here, in memory, where every read looks first; the
//! database takes everything kept here in one durable commit once enough
//! has gathered or enough time has passed ([`CommitPolicy`]), many runs' waves at
//! once. While that commit is under way, writes go on into a new batch and
//! the log's other segment, and reads look through both batches.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::WatchEvent;
use super::super::wal::{Frame, Wal};
use super::records::Table;
use super::values::Written;

/// A key's stored record, shared between the batch and its readers (the
/// write's own buffer, not a copy of it).
pub(super) type Record = Arc<Vec<u8>>;

/// The entries of `map` whose keys start with `prefix`, in key order.
pub(super) fn under<'a, V>(
    map: &'a BTreeMap<String, V>,
    prefix: &'a str,
) -> impl Iterator<Item = (&'a String, &'a V)> {
    map.range::<str, _>((
        std::ops::Bound::Included(prefix),
        std::ops::Bound::Unbounded,
    ))
    .take_while(move |(key, _)| key.starts_with(prefix))
}

/// When the database takes the writes kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPolicy {
    /// At the latest this long after the first write kept.
    pub after: Duration,
    /// As soon as the records kept reach this many bytes.
    pub bytes: usize,
}

impl Default for CommitPolicy {
    fn default() -> Self {
        Self {
            after: Duration::from_secs(2),
            bytes: 16 << 20,
        }
    }
}

/// Writes kept in memory: each key's last record (`None`: removed) and the
/// counters' last values.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) entries: BTreeMap<String, Option<Record>>,
    pub(super) counters: BTreeMap<String, i64>,
    /// The size of the records and keys kept (a rewritten key counts its
    /// last record once).
    bytes: usize,
    /// When the first write was kept.
    since: Option<Instant>,
    /// The sequence number of the last frame in it.
    pub(super) last: u64,
}

impl Batch {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.counters.is_empty()
    }

    /// Whether the database should take it now.
    fn due(&self, policy: &CommitPolicy, now: Instant) -> bool {
        self.bytes >= policy.bytes
            || self
                .since
                .is_some_and(|since| now.duration_since(since) >= policy.after)
    }

    fn keep(&mut self, changes: Changes, seq: u64) {
        self.since.get_or_insert_with(Instant::now);
        for (key, record) in changes.entries {
            let (key_len, added) = (key.len(), record_len(record.as_ref()));
            match self.entries.insert(key, record) {
                Some(old) => {
                    self.bytes = self.bytes.saturating_sub(record_len(old.as_ref())) + added;
                }
                None => self.bytes += key_len + added,
            }
        }
        self.counters.extend(changes.counters);
        self.last = seq;
    }
}

fn record_len(record: Option<&Record>) -> usize {
    record.map_or(0, |r| r.len())
}

/// What one transaction changed: its records and counters, the log's
/// frame of them, and the events for watchers.
#[derive(Default)]
pub(super) struct Changes {
    pub(super) entries: BTreeMap<String, Option<Record>>,
    pub(super) counters: BTreeMap<String, i64>,
    pub(super) frame: Frame,
    pub(super) events: Vec<WatchEvent>,
    /// The value files it wrote ([`super::values`]), by number.
    pub(super) written: Vec<(u64, Written)>,
    /// The value files of the values it replaced or removed.
    pub(super) superseded: Vec<u64>,
}

/// The log and the writes it holds that the database has not taken.
pub(super) struct Log {
    pub(super) wal: Wal,
    /// Writes since the last batch was sealed.
    pub(super) pending: Batch,
    /// A sealed batch the database is taking.
    pub(super) committing: Option<Arc<Batch>>,
    /// Every counter's current value.
    counters: BTreeMap<String, i64>,
    /// The database's table as of its last commit, opened once per commit
    /// rather than once per read: only this store's commits change the
    /// database, and until the log swaps it for the next (in
    /// [`Log::committed`]) the batch being committed is read from memory.
    pub(super) snapshot: Arc<Table>,
    /// Value files written since the log was last synced: the next sync
    /// syncs them first.
    pub(super) unsynced: Vec<Written>,
    /// Value files replaced or removed, with the frame that did it: each
    /// goes once the database has taken that frame.
    superseded: Vec<(u64, u64)>,
}

impl Log {
    pub(super) fn new(wal: Wal, counters: BTreeMap<String, i64>, snapshot: Table) -> Self {
        Self {
            snapshot: Arc::new(snapshot),
            wal,
            pending: Batch::default(),
            committing: None,
            counters,
            unsynced: Vec::new(),
            superseded: Vec::new(),
        }
    }

    /// A key's last record kept in memory: `Some(None)` if it was removed,
    /// `None` if the database has its last record (or never had one).
    pub(super) fn lookup(&self, key: &str) -> Option<Option<&Record>> {
        self.pending
            .entries
            .get(key)
            .or_else(|| self.committing.as_ref()?.entries.get(key))
            .map(Option::as_ref)
    }

    /// Every key under `prefix` kept in memory, with its last record.
    pub(super) fn overlay(&self, prefix: &str) -> BTreeMap<String, Option<Record>> {
        let mut overlay = BTreeMap::new();
        for batch in self
            .committing
            .as_deref()
            .into_iter()
            .chain([&self.pending])
        {
            let keys = batch.entries.range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ));
            for (key, record) in keys.take_while(|(key, _)| key.starts_with(prefix)) {
                overlay.insert(key.clone(), record.clone());
            }
        }
        overlay
    }

    /// A counter's current value.
    pub(super) fn counter(&self, name: &str) -> i64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// Appends a transaction's changes to the log, then keeps them; its
    /// events are returned for watchers. Nothing is kept if the append
    /// fails (the value files it wrote are the caller's to delete).
    pub(super) fn apply(&mut self, mut changes: Changes) -> std::io::Result<Vec<WatchEvent>> {
        let events = std::mem::take(&mut changes.events);
        if changes.frame.is_empty() {
            return Ok(events);
        }
        let seq = self.wal.append(&changes.frame)?;
        self.unsynced
            .extend(changes.written.drain(..).map(|(_, file)| file));
        self.superseded
            .extend(changes.superseded.drain(..).map(|id| (seq, id)));
        for (name, value) in &changes.counters {
            self.counters.insert(name.clone(), *value);
        }
        self.pending.keep(changes, seq);
        Ok(events)
    }

    /// Seals the pending batch for the database, when it is due (or
    /// `now` is `None`: whatever it holds) and no other is being taken;
    /// appends go on in the log's other segment.
    pub(super) fn seal(
        &mut self,
        policy: &CommitPolicy,
        now: Option<Instant>,
    ) -> Option<Arc<Batch>> {
        if let Some(committing) = &self.committing {
            // An earlier commit failed: it is tried again first.
            return Some(committing.clone());
        }
        let due = match now {
            Some(now) => self.pending.due(policy, now),
            None => true,
        };
        if self.pending.is_empty() || !due {
            return None;
        }
        let batch = Arc::new(std::mem::take(&mut self.pending));
        self.committing = Some(batch.clone());
        self.wal.rotate();
        Some(batch)
    }

    /// The sealed batch is in the database, which `snapshot` shows: it and
    /// its segment go. Returns the value files no stored state refers to
    /// any more, to delete.
    pub(super) fn committed(&mut self, snapshot: Table) -> std::io::Result<Vec<u64>> {
        self.snapshot = Arc::new(snapshot);
        let last = self.committing.take().map_or(0, |batch| batch.last);
        self.wal.clear_sealed()?;
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.superseded)
            .into_iter()
            .partition(|(seq, _)| *seq <= last);
        self.superseded = kept;
        Ok(gone.into_iter().map(|(_, id)| id).collect())
    }
}
