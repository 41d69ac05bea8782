//! A run's checkpoints: its record, its state field by field, and its event
//! log, written to the store in order by one writer task per run.
//!
//! A checkpoint writes the run's record, each field of the state whose
//! version moved (a 10 MB input is stored once, not once per wave), the
//! events since the last one and, when it is small, the wave's history
//! entry, in one transaction (`super::keys` says where each lives).
//!
//! The run's actor hands over a snapshot when the machine asks for a
//! checkpoint; with `durability: sync` it waits until the snapshot is on
//! disk before taking its next input, with `async` it goes on at once, and
//! with `exit` snapshots are taken only when the run pauses or ends. The
//! first checkpoint, taken before the run's submission is acknowledged, is
//! always waited for.

use std::collections::BTreeMap;
use std::sync::Arc;
use weft_proto::RunId;

use foldhash::{HashMap, HashMapExt};
use tokio::sync::{mpsc, oneshot};

use super::Keeper;
use super::history::{self, History};
use super::records::{EventTexts, RecordHead};
use super::writer::{Snapshot, Writer};
use crate::graph::Durability;
use weft_proto::events::StoredEvent;
use weft_proto::types::RunStatus;

/// What a checkpoint stores: the progress without its state, and the
/// state's fields with their versions and JSON (as workers get them).
pub struct Checkpoint {
    /// The machine's progress, its state left out.
    pub progress_json: String,
    /// Every field of the state: name, version, JSON.
    pub fields: Vec<(String, u64, Arc<str>)>,
    /// The waves merged so far: a checkpoint after a wave not yet in the
    /// run's history is kept there too, and one taken while the next wave
    /// is at work is kept as a point within it (`super::history`).
    pub merged: u32,
}

/// The actor's end of a run's journal.
pub struct Journal {
    /// The store, for reading back what was written.
    keeper: Keeper,
    tx: mpsc::UnboundedSender<Snapshot>,
    mode: Durability,
    /// Events already handed over.
    handed: u64,
    /// Events the store is known to hold: those of the last checkpoint
    /// that was waited for and stored (each includes every one before it).
    confirmed: u64,
    /// The version of each field handed over.
    versions: HashMap<String, u64>,
    /// Every wave's state and progress, kept readable.
    history: History,
}

impl Journal {
    /// Starts the writer of run `id`'s checkpoints; `stored` events are in
    /// the store already, and its history holds wave `kept` (`None`: a
    /// new run's or a fork's, which keeps its first checkpoint).
    pub fn start(
        keeper: Keeper,
        id: RunId,
        head: RecordHead,
        mode: Durability,
        (stored, kept): (u64, Option<u32>),
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let history = History::new(kept);
        tracker.spawn(write_snapshots(keeper.clone(), id, head, rx));
        Self {
            keeper,
            tx,
            mode,
            handed: stored,
            confirmed: stored,
            versions: HashMap::new(),
            history,
        }
    }

    /// The store the run is kept in.
    pub fn keeper(&self) -> &Keeper {
        &self.keeper
    }

    /// Whether the store is known to hold all `events` of the log.
    pub fn holds(&self, events: usize) -> bool {
        self.confirmed == events as u64
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
    /// when the durability mode (or `wait`) says so. Returns whether it
    /// was stored (`true` when not waited for: a failure then goes with
    /// the next checkpoint).
    pub async fn checkpoint(
        &mut self,
        status: RunStatus,
        checkpoint: Checkpoint,
        log: &[StoredEvent],
        wait: bool,
    ) -> bool {
        let ended = status.is_terminal();
        let history = self
            .history
            .keep(checkpoint.merged, log.len() as u64, ended, |at| {
                history::Entry {
                    at,
                    at_unix_ms: log.last().map_or_else(now_ms, |last| last.at_unix_ms),
                    status: status.name().to_owned(),
                    progress_json: checkpoint.progress_json.clone(),
                    fields: checkpoint.fields.clone(),
                }
            });
        let first = self.handed;
        let new = log
            .get(usize::try_from(first).unwrap_or(usize::MAX)..)
            .unwrap_or_default();
        let mut events = EventTexts::with_room(new.len());
        for stored in new {
            events.push(stored.at_unix_ms, &*stored.event);
        }
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
            history: history.into_iter().collect(),
            settled: settled(status),
            done,
        };
        if self.tx.send(snapshot).is_err() {
            return false;
        }
        match stored {
            Some(stored) => {
                let stored = stored.await.unwrap_or(false);
                if stored {
                    self.confirmed = self.handed;
                }
                stored
            }
            None => true,
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn settled(status: RunStatus) -> bool {
    status.is_terminal() || status == RunStatus::Waiting
}

impl Snapshot {
    /// Takes a later snapshot into this one: its progress and field names,
    /// its changed fields over these, its events after these. Returns this
    /// one's waiter, whom the caller tells once the two are stored.
    fn absorb(&mut self, later: Snapshot) -> Option<oneshot::Sender<bool>> {
        let waiting = self.done.take();
        self.events.extend(later.events);
        self.history.extend(later.history);
        self.settled = later.settled;
        self.changed.extend(later.changed);
        self.names = later.names;
        self.progress_json = later.progress_json;
        self.done = later.done;
        waiting
    }
}

/// Writes snapshots in the order they were taken, newest first when several
/// are waiting. A snapshot that could not be stored (the store was
/// unreachable) goes with the next one, so no event or field change is
/// skipped in the store.
async fn write_snapshots(
    keeper: Keeper,
    id: RunId,
    head: RecordHead,
    mut rx: mpsc::UnboundedReceiver<Snapshot>,
) {
    let mut writer = Writer::new(keeper, id.clone(), head);
    let mut unstored: Option<Snapshot> = None;
    while let Some(next) = rx.recv().await {
        let mut waiting = Vec::new();
        let mut snapshot = match unstored.take() {
            Some(mut earlier) => {
                waiting.extend(earlier.absorb(next));
                earlier
            }
            None => next,
        };
        // Snapshots that queued up while the last write ran are folded
        // into one.
        while let Ok(later) = rx.try_recv() {
            waiting.extend(snapshot.absorb(later));
        }
        let mut stored = writer.write(&snapshot).await;
        if snapshot.settled
            && let Ok(deferred) = &mut stored
        {
            writer.write_history(std::mem::take(deferred)).await;
        }
        waiting.extend(snapshot.done.take());
        for done in waiting {
            let _ = done.send(stored.is_ok());
        }
        match stored {
            Ok(deferred) => writer.write_history(deferred).await,
            Err(error) => {
                tracing::error!(run = %id, %error, "checkpoint not stored; it goes with the next one");
                unstored = Some(snapshot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(progress: &str, first: u64, events: &[&str], fields: &[(&str, u64)]) -> Snapshot {
        Snapshot {
            progress_json: progress.into(),
            changed: fields
                .iter()
                .map(|(name, version)| ((*name).to_owned(), (*version, Arc::from("1"))))
                .collect(),
            names: fields.iter().map(|(name, _)| (*name).to_owned()).collect(),
            first,
            events: {
                let mut texts = EventTexts::default();
                for event in events {
                    texts.push(0, event);
                }
                texts
            },
            history: Vec::new(),
            settled: false,
            done: None,
        }
    }

    #[test]
    fn a_later_snapshot_is_absorbed_whole() {
        let mut earlier = snapshot("p1", 3, &["e3", "e4"], &[("a", 1), ("b", 1)]);
        let (tx, _rx) = oneshot::channel();
        earlier.done = Some(tx);
        let later = snapshot("p2", 5, &["e5"], &[("a", 2)]);
        assert!(
            earlier.absorb(later).is_some(),
            "the earlier waiter is handed back"
        );
        assert_eq!(earlier.first, 3, "events still start where the earlier did");
        let events: Vec<&str> = (earlier.events.texts())
            .map(|(_, e)| std::str::from_utf8(e).unwrap())
            .collect();
        assert_eq!(events, [r#""e3""#, r#""e4""#, r#""e5""#]);
        assert_eq!(earlier.progress_json, "p2");
        assert_eq!(
            earlier.changed["a"].0, 2,
            "the newer version of a field wins"
        );
        assert_eq!(
            earlier.changed["b"].0, 1,
            "a field only the earlier changed stays"
        );
        assert_eq!(earlier.names, ["a"]);
    }
}
