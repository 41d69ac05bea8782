//! A run's checkpoints: its record, its state field by field, and its event
//! log, written to the store in order by one writer task per run.
//!
//! Keys: `runs/<id>/record` holds the [`RunRecord`](super::records::RunRecord) (the machine's progress
//! without its state, the names of the state's fields, and where the log
//! stands); `runs/<id>/fields/<name>` each field of the state, written again
//! only when its version moved (a 10 MB input is stored once, not once per
//! wave); `runs/<id>/events/<first>` each stretch of events; `blobs/<sha256>`
//! every bundle file once. A checkpoint's writes go in one transaction.
//!
//! The run's actor hands over a snapshot when the machine asks for a
//! checkpoint; with `durability: sync` it waits until the snapshot is on
//! disk before taking its next input, with `async` it goes on at once, and
//! with `exit` snapshots are taken only when the run pauses or ends. The
//! first checkpoint, taken before the run's submission is acknowledged, is
//! always waited for.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::Keeper;
use super::writer::Writer;

use super::records::FileRecord;
use crate::graph::Durability;
use crate::run::{RunStatus, StoredEvent};

/// Where a run's record lives.
pub fn record_key(id: &str) -> String {
    format!("runs/{id}/record")
}

/// Where a field of a run's state lives.
pub fn field_key(id: &str, name: &str) -> String {
    format!("runs/{id}/fields/{name}")
}

/// Where a field too large for a checkpoint's transaction lives, at one
/// version (written once, before the record that names it).
pub fn spilled_key(id: &str, name: &str, version: u64) -> String {
    format!("runs/{id}/fields/{name}@{version:020}")
}

/// Where a progress too large for a checkpoint's transaction lives.
pub fn progress_key(id: &str, at: u64) -> String {
    format!("runs/{id}/progress@{at:020}")
}

/// Where a stretch of a run's events lives.
pub fn events_key(id: &str, first: u64) -> String {
    format!("runs/{id}/events/{first:020}")
}

/// Where a bundle file lives.
pub fn blob_key(sha256: &str) -> String {
    format!("blobs/{sha256}")
}

/// What a run's record says besides its progress.
#[derive(Debug, Clone)]
pub struct RecordHead {
    /// The graph file's path within the bundle.
    pub graph_path: String,
    /// The bundle's files.
    pub files: Vec<FileRecord>,
    /// When the run was submitted.
    pub created_unix_ms: i64,
    /// Fields the stored record keeps under versioned keys, and where it
    /// keeps its progress if apart (both empty for a new run).
    pub spilled: Vec<(String, u64)>,
    /// See [`RunRecord::progress_at`](super::records::RunRecord::progress_at).
    pub progress_at: Option<u64>,
}

/// What a checkpoint stores: the progress without its state, and the
/// state's fields with their versions and JSON (as workers get them).
pub struct Checkpoint {
    /// The machine's progress, its state left out.
    pub progress_json: String,
    /// Every field of the state: name, version, JSON.
    pub fields: Vec<(String, u64, Arc<str>)>,
}

/// One checkpoint, taken by the actor.
pub(super) struct Snapshot {
    pub(super) progress_json: String,
    /// Fields whose version moved since the last checkpoint: version, JSON.
    pub(super) changed: BTreeMap<String, (u64, Arc<str>)>,
    /// Every field's name, sorted.
    pub(super) names: Vec<String>,
    /// The events since the last checkpoint, and the position of the first.
    pub(super) first: u64,
    pub(super) events: Vec<(i64, String)>,
    done: Option<oneshot::Sender<()>>,
}

/// The actor's end of a run's journal.
pub struct Journal {
    tx: mpsc::UnboundedSender<Snapshot>,
    mode: Durability,
    /// Events already handed over.
    handed: u64,
    /// The version of each field handed over.
    versions: HashMap<String, u64>,
}

impl Journal {
    /// Starts the writer of run `id`'s checkpoints; `stored` events are in
    /// the store already.
    pub fn start(
        keeper: Keeper,
        id: Arc<str>,
        head: RecordHead,
        mode: Durability,
        stored: u64,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tracker.spawn(write_snapshots(keeper, id, head, rx));
        Self {
            tx,
            mode,
            handed: stored,
            versions: HashMap::new(),
        }
    }

    /// Whether watchers may see only events already stored (`sync`).
    pub fn holds_back_events(&self) -> bool {
        self.mode == Durability::Sync
    }

    /// Whether a run in `status` is checkpointed now (`exit` keeps only
    /// pauses and ends).
    pub fn wants(&self, status: RunStatus) -> bool {
        self.mode != Durability::Exit || settled(status)
    }

    /// Takes a checkpoint of a run in `status`; returns once it is stored
    /// when the durability mode (or `wait`) says so.
    pub async fn checkpoint(
        &mut self,
        status: RunStatus,
        checkpoint: Checkpoint,
        log: &[StoredEvent],
        wait: bool,
    ) {
        let first = self.handed;
        let events = log
            .iter()
            .skip(usize::try_from(first).unwrap_or(usize::MAX))
            .map(|e| {
                let json = serde_json::to_string(&*e.event).unwrap_or_default();
                (e.at_unix_ms, json)
            })
            .collect::<Vec<_>>();
        self.handed = log.len() as u64;
        let mut changed = BTreeMap::new();
        let mut names = Vec::with_capacity(checkpoint.fields.len());
        for (name, version, json) in checkpoint.fields {
            if self.versions.get(&name) != Some(&version) {
                self.versions.insert(name.clone(), version);
                changed.insert(name.clone(), (version, json));
            }
            names.push(name);
        }
        names.sort_unstable();
        let wait = wait || self.mode == Durability::Sync || settled(status);
        let (done, stored) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let snapshot = Snapshot {
            progress_json: checkpoint.progress_json,
            changed,
            names,
            first,
            events,
            done,
        };
        if self.tx.send(snapshot).is_ok()
            && let Some(stored) = stored
        {
            let _ = stored.await;
        }
    }
}

fn settled(status: RunStatus) -> bool {
    status.is_terminal() || status == RunStatus::Waiting
}

/// Writes snapshots in the order they were taken, newest first when several
/// are waiting.
async fn write_snapshots(
    keeper: Keeper,
    id: Arc<str>,
    head: RecordHead,
    mut rx: mpsc::UnboundedReceiver<Snapshot>,
) {
    let mut writer = Writer::new(keeper, id.clone(), head);
    while let Some(mut snapshot) = rx.recv().await {
        // Snapshots that queued up while the last write ran are folded
        // into one: the newest progress and fields, every event since the
        // first.
        let mut waiting = Vec::new();
        while let Ok(next) = rx.try_recv() {
            waiting.extend(snapshot.done.take());
            snapshot.events.extend(next.events);
            snapshot.changed.extend(next.changed);
            snapshot.names = next.names;
            snapshot.progress_json = next.progress_json;
            snapshot.done = next.done;
        }
        if let Err(error) = writer.write(&snapshot).await {
            tracing::error!(run = %id, %error, "checkpoint not stored");
        }
        for done in waiting.into_iter().chain(snapshot.done) {
            let _ = done.send(());
        }
    }
}
