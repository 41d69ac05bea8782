//! A run's history (SPEC 20): the state and progress after every wave,
//! kept readable in the store after the run's checkpoints have moved on, so
//! `weft state RUN --at STEP` reads any wave's state and a fork starts
//! from any wave.
//!
//! Each checkpoint taken after a wave merged (and the first, before any
//! wave: step 0, the input) hands the run's progress and the fields that
//! changed since the last entry to the run's history writer, which stores
//! `runs/<id>/history/<step>`: the progress and each changed field, each
//! either whole or as what changed since its value in the entry before
//! (`super::deltas`), whichever is smaller; at most [`MAX_CHAIN`] deltas
//! in a row, so a wave's state is never more than that many entries of
//! work away. A field removed from the state is named. Reading wave N's
//! state folds the entries up to N.
//!
//! The writer runs beside the checkpoints' writer and is not waited for:
//! a crash may lose the history of the waves whose checkpoints were not
//! yet stored, never the run. A run with `durability: exit` takes
//! checkpoints only when it pauses or ends, and so keeps only those.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use weft_proto::RunId;
use weft_store::{AnyStore, StoreError, chunks};

use super::Keeper;
use super::deltas::DeltaRecord;
use super::keys::{history_key, history_prefix};
use super::records;

/// Deltas in a row before a value is stored whole again.
pub const MAX_CHAIN: u32 = 32;

/// The smallest value stored as what changed: below it, finding what
/// changed costs more than writing it whole (a 200-node chain's progress
/// is under it).
pub const DELTA_FROM: usize = 4 << 10;

/// A value in an entry: whole, or what changed since the entry before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Stored {
    Whole(String),
    Delta(DeltaRecord),
}

/// One wave's entry as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct EntryRecord {
    /// When its checkpoint was taken (Unix milliseconds).
    at_unix_ms: i64,
    /// The run's status then.
    status: String,
    /// The machine's progress, without its state.
    progress: Stored,
    /// The fields that changed since the entry before, by name.
    fields: BTreeMap<String, Stored>,
    /// The fields removed since the entry before.
    removed: Vec<String>,
}

/// What the actor hands over for one wave.
pub struct Entry {
    /// Waves merged.
    pub step: u32,
    /// When (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The run's status.
    pub status: String,
    /// The progress, without its state.
    pub progress_json: String,
    /// Every field of the state: name, version, JSON.
    pub fields: Vec<(String, u64, Arc<str>)>,
}

/// The actor's end of a run's history.
pub struct History {
    tx: mpsc::UnboundedSender<Entry>,
    /// The last step handed over.
    last: Option<u32>,
}

impl History {
    /// Starts run `id`'s history writer on `tracker`.
    pub fn start(keeper: Keeper, id: RunId, tracker: &tokio_util::task::TaskTracker) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tracker.spawn(write_history(keeper, id, rx));
        Self { tx, last: None }
    }

    /// Keeps the entry `entry` makes of wave `step`, unless that wave is
    /// kept already (`entry` is not called then: nothing is copied).
    pub fn keep(&mut self, step: u32, entry: impl FnOnce() -> Entry) {
        if self.last.is_none_or(|last| step > last) {
            self.last = Some(step);
            let _ = self.tx.send(entry());
        }
    }
}

/// The writer's memory of the last entry: each value's text and how many
/// deltas in a row it has.
#[derive(Default)]
struct Last {
    progress: Option<(String, u32)>,
    fields: HashMap<String, (u64, Arc<str>, u32)>,
}

/// `new` stored against `old` (and its chain so far): a delta when the
/// value is not small, the delta is smaller than half of it and the chain
/// is not too long.
fn stored(old: Option<(&str, u32)>, new: &str) -> (Stored, u32) {
    if let Some((old, chain)) = old
        && chain < MAX_CHAIN
        && new.len() >= DELTA_FROM
    {
        let delta = DeltaRecord::between(old.as_bytes(), new.as_bytes());
        if delta.size() < new.len() / 2 {
            return (Stored::Delta(delta), chain + 1);
        }
    }
    (Stored::Whole(new.to_owned()), 0)
}

impl Last {
    fn record(&mut self, entry: Entry) -> EntryRecord {
        let old = self.progress.as_ref().map(|(text, n)| (text.as_str(), *n));
        let (progress, chain) = stored(old, &entry.progress_json);
        self.progress = Some((entry.progress_json, chain));
        let mut fields = BTreeMap::new();
        let mut present = std::collections::HashSet::with_capacity(entry.fields.len());
        for (name, version, json) in entry.fields {
            present.insert(name.clone());
            let old = self.fields.get(&name);
            if old.is_some_and(|(v, _, _)| *v == version) {
                continue;
            }
            let (value, chain) = stored(old.map(|(_, text, n)| (&**text, *n)), &json);
            fields.insert(name.clone(), value);
            self.fields.insert(name, (version, json, chain));
        }
        let mut removed: Vec<String> = self
            .fields
            .keys()
            .filter(|name| !present.contains(*name))
            .cloned()
            .collect();
        removed.sort_unstable();
        for name in &removed {
            self.fields.remove(name);
        }
        EntryRecord {
            at_unix_ms: entry.at_unix_ms,
            status: entry.status,
            progress,
            fields,
            removed,
        }
    }
}

async fn write_history(keeper: Keeper, id: RunId, mut rx: mpsc::UnboundedReceiver<Entry>) {
    let mut last = Last::default();
    while let Some(entry) = rx.recv().await {
        let step = entry.step;
        let record = last.record(entry);
        let key = history_key(&id, u64::from(step));
        let bytes = records::encode(&record);
        let written =
            keeper.checked(chunks::put(keeper.store(), &key, &bytes, keeper.fence()).await);
        match written {
            Ok(_) => {}
            Err(StoreError::Fenced { .. }) => return,
            Err(error) => {
                // The next entry must not be a delta of one not stored.
                last = Last::default();
                tracing::warn!(run = %id, step, %error, "a wave's history was not stored");
            }
        }
    }
}

/// One wave as its history keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Wave {
    /// Waves merged (0: the input, before any).
    pub step: u32,
    /// When its checkpoint was taken (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The run's status then.
    pub status: String,
    /// The fields that changed in it.
    pub changed: Vec<String>,
    /// The fields removed in it.
    pub removed: Vec<String>,
}

/// A wave's state and progress, read back, with every wave kept.
#[derive(Debug, Clone, PartialEq)]
pub struct AtWave {
    /// Every wave the history keeps, in order.
    pub waves: Vec<Wave>,
    /// The wave.
    pub wave: Wave,
    /// Its state.
    pub state: Map<String, Value>,
    /// Its progress, without the state.
    pub progress_json: String,
}

/// Why a run's history cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No wave `step` is kept.
    #[error("run {run} has no wave {step} in its history (its waves: {kept})")]
    UnknownStep {
        /// The run.
        run: String,
        /// The step asked for.
        step: u32,
        /// The steps kept, as text.
        kept: String,
    },
    /// An entry does not read.
    #[error("the history of run {run} cannot be read at {key}: {reason}")]
    Corrupt {
        /// The run.
        run: String,
        /// The entry's key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// Every entry of run `id`'s history, in step order.
async fn entries(store: &AnyStore, id: &str) -> Result<Vec<(u32, EntryRecord)>, HistoryError> {
    let prefix = history_prefix(id);
    let mut entries = Vec::new();
    for (key, value) in chunks::scan(store, &prefix).await? {
        let corrupt = |reason: String| HistoryError::Corrupt {
            run: id.to_owned(),
            key: key.clone(),
            reason,
        };
        let step = key
            .strip_prefix(&prefix)
            .and_then(|step| step.parse::<u32>().ok())
            .ok_or_else(|| corrupt("not a step".into()))?;
        let record: EntryRecord = records::decode(&value).map_err(|e| corrupt(e.to_string()))?;
        entries.push((step, record));
    }
    Ok(entries)
}

fn wave_of(step: u32, record: &EntryRecord) -> Wave {
    Wave {
        step,
        at_unix_ms: record.at_unix_ms,
        status: record.status.clone(),
        changed: record.fields.keys().cloned().collect(),
        removed: record.removed.clone(),
    }
}

/// Run `id`'s state and progress after wave `step` (`None`: the last
/// kept), and every wave its history keeps: one read of the history.
pub async fn at(store: &AnyStore, id: &str, step: Option<u32>) -> Result<AtWave, HistoryError> {
    let entries = entries(store, id).await?;
    let waves: Vec<Wave> = entries
        .iter()
        .map(|(step, record)| wave_of(*step, record))
        .collect();
    let wanted = match step {
        Some(step) => step,
        None => entries.last().map_or(0, |(step, _)| *step),
    };
    if !entries.iter().any(|(s, _)| *s == wanted) {
        let kept: Vec<String> = entries.iter().map(|(s, _)| s.to_string()).collect();
        return Err(HistoryError::UnknownStep {
            run: id.to_owned(),
            step: wanted,
            kept: if kept.is_empty() {
                "none".into()
            } else {
                kept.join(", ")
            },
        });
    }
    let corrupt = |step: u32, reason: &str| HistoryError::Corrupt {
        run: id.to_owned(),
        key: history_key(id, u64::from(step)),
        reason: reason.to_owned(),
    };
    let mut progress: Option<String> = None;
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let mut wave = None;
    for (step, record) in entries.into_iter().take_while(|(s, _)| *s <= wanted) {
        let apply = |old: Option<&String>, value: Stored| -> Result<String, HistoryError> {
            match value {
                Stored::Whole(text) => Ok(text),
                Stored::Delta(delta) => {
                    let old =
                        old.ok_or_else(|| corrupt(step, "a delta without a value before it"))?;
                    let bytes = delta
                        .apply(old.as_bytes())
                        .ok_or_else(|| corrupt(step, "a delta does not fit the value before it"))?;
                    String::from_utf8(bytes).map_err(|_| corrupt(step, "a value is not UTF-8"))
                }
            }
        };
        wave = Some(wave_of(step, &record));
        progress = Some(apply(progress.as_ref(), record.progress)?);
        for (name, value) in record.fields {
            let text = apply(fields.get(&name), value)?;
            fields.insert(name, text);
        }
        for name in &record.removed {
            fields.remove(name);
        }
    }
    let mut state = Map::new();
    for (name, text) in fields {
        let value = serde_json::from_str(&text).map_err(|e| corrupt(wanted, &e.to_string()))?;
        state.insert(name, value);
    }
    Ok(AtWave {
        waves,
        wave: wave.ok_or_else(|| corrupt(wanted, "no entry"))?,
        state,
        progress_json: progress.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(step: u32, fields: &[(&str, u64, &str)]) -> Entry {
        Entry {
            step,
            at_unix_ms: i64::from(step),
            status: "running".into(),
            progress_json: format!(
                "{{\"steps\":{step},\"pad\":\"{}\"}}",
                "p".repeat(DELTA_FROM)
            ),
            fields: fields
                .iter()
                .map(|(n, v, j)| ((*n).to_owned(), *v, Arc::from(*j)))
                .collect(),
        }
    }

    #[test]
    fn a_growing_field_is_kept_as_what_changed_and_removed_fields_are_named() {
        let mut last = Last::default();
        let long = format!("\"{}\"", "a".repeat(DELTA_FROM));
        let longer = format!("\"{}b\"", "a".repeat(DELTA_FROM));
        let first = last.record(entry(0, &[("text", 1, &long), ("n", 1, "1")]));
        assert!(matches!(first.fields["text"], Stored::Whole(_)));
        let second = last.record(entry(1, &[("text", 2, &longer), ("n", 1, "1")]));
        assert!(matches!(second.fields["text"], Stored::Delta(_)));
        assert!(matches!(second.progress, Stored::Delta(_)));
        assert!(!second.fields.contains_key("n"), "unchanged: not stored");
        let small = last.record(entry(2, &[("text", 2, &longer), ("n", 2, "2")]));
        assert_eq!(small.fields["n"], Stored::Whole("2".into()), "small: whole");
        let third = last.record(entry(3, &[("text", 2, &longer)]));
        assert_eq!(third.removed, ["n"]);
    }

    #[test]
    fn a_chain_is_cut_after_its_limit() {
        let mut last = Last::default();
        let mut kinds = Vec::new();
        for step in 0..=MAX_CHAIN + 1 {
            let text = format!("\"{}{}\"", "a".repeat(DELTA_FROM), step);
            let record = last.record(entry(step, &[("text", u64::from(step), &text)]));
            kinds.push(matches!(record.fields["text"], Stored::Whole(_)));
        }
        assert!(kinds[0]);
        assert!(kinds[1..=MAX_CHAIN as usize].iter().all(|whole| !whole));
        assert!(kinds[MAX_CHAIN as usize + 1]);
    }
}
