//! A run's checkpoints: its record and its event log, written to the store
//! in order by one writer task per run.
//!
//! Keys: `runs/<id>/record` holds the [`RunRecord`] (the machine's progress
//! and where the log stands), `runs/<id>/events/<first>` each stretch of
//! events written with a checkpoint, `blobs/<sha256>` every bundle file
//! once. The run's actor hands over a snapshot when the machine asks for a
//! checkpoint; with `durability: sync` it waits until the snapshot is on
//! disk before taking its next input, with `async` it goes on at once, and
//! with `exit` snapshots are taken only when the run pauses or ends.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use weft_store::{AnyStore, StoreError, chunks};

use super::records::{self, EventsRecord, FileRecord, RunRecord};
use crate::graph::Durability;
use crate::run::{RunStatus, StoredEvent};

/// Where a run's record lives.
pub fn record_key(id: &str) -> String {
    format!("runs/{id}/record")
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
}

/// One checkpoint, taken by the actor.
struct Snapshot {
    progress_json: String,
    /// The events since the last checkpoint, and the position of the first.
    first: u64,
    events: Vec<(i64, String)>,
    done: Option<oneshot::Sender<()>>,
}

/// The actor's end of a run's journal.
pub struct Journal {
    tx: mpsc::UnboundedSender<Snapshot>,
    mode: Durability,
    /// Events already handed over.
    handed: u64,
}

impl Journal {
    /// Starts the writer of run `id`'s checkpoints; `stored` events are in
    /// the store already.
    pub fn start(
        store: AnyStore,
        id: Arc<str>,
        head: RecordHead,
        mode: Durability,
        stored: u64,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tracker.spawn(write_snapshots(store, id, head, rx));
        Self {
            tx,
            mode,
            handed: stored,
        }
    }

    /// Whether watchers may see only events already stored (`sync`).
    pub fn holds_back_events(&self) -> bool {
        self.mode == Durability::Sync
    }

    /// Takes a checkpoint of a run in `status`, with its progress and log;
    /// returns once it is stored when the durability mode says to wait.
    pub async fn checkpoint(
        &mut self,
        status: RunStatus,
        progress: &crate::run::Progress,
        log: &[StoredEvent],
    ) {
        let settled = status.is_terminal() || status == RunStatus::Waiting;
        if self.mode == Durability::Exit && !settled {
            return;
        }
        let Ok(progress_json) = serde_json::to_string(progress) else {
            tracing::error!("a run's progress does not serialize; checkpoint skipped");
            return;
        };
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
        let wait = self.mode == Durability::Sync || settled;
        let (done, stored) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let snapshot = Snapshot {
            progress_json,
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

/// Writes snapshots in the order they were taken, newest first when several
/// are waiting.
async fn write_snapshots(
    store: AnyStore,
    id: Arc<str>,
    head: RecordHead,
    mut rx: mpsc::UnboundedReceiver<Snapshot>,
) {
    while let Some(mut snapshot) = rx.recv().await {
        // Snapshots that queued up while the last write ran are folded
        // into one: the newest progress, every event since the first.
        let mut waiting = Vec::new();
        while let Ok(next) = rx.try_recv() {
            waiting.extend(snapshot.done.take());
            snapshot.events.extend(next.events);
            snapshot.progress_json = next.progress_json;
            snapshot.done = next.done;
        }
        if let Err(error) = write(&store, &id, &head, &snapshot).await {
            tracing::error!(run = %id, %error, "checkpoint not stored");
        }
        for done in waiting.into_iter().chain(snapshot.done) {
            let _ = done.send(());
        }
    }
}

async fn write(
    store: &AnyStore,
    id: &str,
    head: &RecordHead,
    snapshot: &Snapshot,
) -> Result<(), StoreError> {
    let record = RunRecord {
        id: id.to_owned(),
        graph_path: head.graph_path.clone(),
        files: head.files.clone(),
        created_unix_ms: head.created_unix_ms,
        progress_json: snapshot.progress_json.clone(),
        events: snapshot.first + snapshot.events.len() as u64,
    };
    let record = records::encode(&record);
    let (record_key, events_key) = (record_key(id), events_key(id, snapshot.first));
    // One transaction when they fit; else the events first, so a record
    // never points past what is stored.
    let events = (!snapshot.events.is_empty()).then(|| {
        records::encode(&EventsRecord {
            first: snapshot.first,
            events: snapshot.events.clone(),
        })
    });
    let mut values: Vec<(&str, &[u8])> = Vec::with_capacity(2);
    if let Some(events) = &events {
        values.push((&events_key, events));
    }
    values.push((&record_key, &record));
    chunks::put_together(store, &values, None).await?;
    Ok(())
}
