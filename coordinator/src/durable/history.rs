//! A run's history (SPEC 20): the state and progress after every wave,
//! kept readable in the store after the run's checkpoints have moved on, so
//! `weft state RUN --at STEP` reads any wave's state and a fork starts
//! from any wave.
//!
//! Each checkpoint taken after a wave merged (and the first, before any
//! wave: step 0, the input) hands the run's progress and the fields that
//! changed since the last entry to the run's history writer, which stores
//! `runs/<id>/history/<step>`. So does each checkpoint taken while a wave
//! is at work — a map's finished items (at most every 100 ms), a loop's
//! iterations, a subgraph's child started, a person asked — as a point
//! within it, `runs/<id>/history/<step>.<point>` (the events logged then;
//! [`HistoryPoint`]): a fork from one keeps the finished items and
//! iterations. A run's end that merged no wave is not kept (its last wave
//! is). An entry holds the progress and each changed field, each
//! either whole or as what changed since its value in the entry before
//! (`super::deltas`), whichever is smaller; at most [`MAX_CHAIN`] deltas
//! in a row, so a wave's state is never more than that many entries of
//! work away. A field removed from the state is named. Reading wave N's
//! state folds the entries up to N.
//!
//! An entry goes with the checkpoint it was taken with, written by the
//! run's checkpoint writer (`super::writer`): in the checkpoint's own
//! transaction when it is small (a wave of a small state costs one write,
//! not two, and no task of its own), else right after the checkpoint is
//! stored and its waiter told, so a large state's wave does not wait for
//! its history (a run that pauses or ends tells its waiters only once its
//! history is stored too: whoever saw it end can read its last wave). A
//! checkpoint that could not be stored keeps its entries and goes with
//! the next; an entry written apart that fails is lost (the run is not),
//! and the next entry is stored whole. A run with `durability: exit` takes
//! checkpoints only when it pauses or ends, and so keeps only those.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_proto::events::HistoryPoint;
use weft_store::{AnyStore, StoreError, chunks};

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

/// What the actor hands over for one place.
pub struct Entry {
    /// Where it is in the run's history.
    pub at: HistoryPoint,
    /// When (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The run's status.
    pub status: String,
    /// The progress, without its state.
    pub progress_json: String,
    /// Every field of the state: name, version, JSON.
    pub fields: Vec<(String, u64, Arc<str>)>,
}

/// The actor's end of a run's history: which places are kept.
pub struct History {
    /// The last place handed over (or, for a restored run, its wave).
    last: Option<HistoryPoint>,
}

impl History {
    /// The history of a run whose store holds wave `kept` (`None` for a
    /// new run or a fork, whose first checkpoint is its first entry).
    pub fn new(kept: Option<u32>) -> Self {
        Self {
            last: kept.map(HistoryPoint::wave),
        }
    }

    /// The entry `entry` makes of a checkpoint taken with `merged` waves
    /// merged and `events` logged, if it is kept: right after a wave new
    /// to the history, or a point within the next one — unless the run
    /// has `ended` there (its last wave stands for it) or nothing was
    /// logged since the last point. `entry` is called only to keep it.
    pub fn keep(
        &mut self,
        merged: u32,
        events: u64,
        ended: bool,
        entry: impl FnOnce(HistoryPoint) -> Entry,
    ) -> Option<Entry> {
        let at = match self.last {
            Some(last) if merged <= last.step => {
                let point = HistoryPoint {
                    step: last.step,
                    point: events,
                };
                if ended || point <= last {
                    return None;
                }
                point
            }
            _ => HistoryPoint::wave(merged),
        };
        self.last = Some(at);
        Some(entry(at))
    }
}

/// The checkpoint writer's memory of the last entry stored: each value's
/// text and how many deltas in a row it has, so the next is stored as
/// what changed.
#[derive(Default)]
pub(super) struct Recorder {
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

impl Recorder {
    /// Entry `entry` of run `id` as stored: its key and record, against
    /// the entries recorded before it.
    pub(super) fn encode(&mut self, id: &str, entry: &Entry) -> (String, Vec<u8>) {
        let record = self.record(entry);
        (history_key(id, entry.at), records::encode(&record))
    }

    /// Forgets the last entry: the one recorded was not stored, so the
    /// next must not be what changed since it.
    pub(super) fn forget(&mut self) {
        *self = Self::default();
    }

    fn record(&mut self, entry: &Entry) -> EntryRecord {
        let old = self.progress.as_ref().map(|(text, n)| (text.as_str(), *n));
        let (progress, chain) = stored(old, &entry.progress_json);
        self.progress = Some((entry.progress_json.clone(), chain));
        let mut fields = BTreeMap::new();
        let mut present = std::collections::HashSet::with_capacity(entry.fields.len());
        for (name, version, json) in &entry.fields {
            present.insert(name.as_str());
            let old = self.fields.get(name);
            if old.is_some_and(|(v, _, _)| v == version) {
                continue;
            }
            let (value, chain) = stored(old.map(|(_, text, n)| (&**text, *n)), json);
            fields.insert(name.clone(), value);
            self.fields
                .insert(name.clone(), (*version, json.clone(), chain));
        }
        let mut removed: Vec<String> = self
            .fields
            .keys()
            .filter(|name| !present.contains(name.as_str()))
            .cloned()
            .collect();
        removed.sort_unstable();
        for name in &removed {
            self.fields.remove(name);
        }
        EntryRecord {
            at_unix_ms: entry.at_unix_ms,
            status: entry.status.clone(),
            progress,
            fields,
            removed,
        }
    }
}

/// One place as a run's history keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Wave {
    /// Where: waves merged (0: the input, before any), and the point
    /// within the next wave.
    pub at: HistoryPoint,
    /// When its checkpoint was taken (Unix milliseconds).
    pub at_unix_ms: i64,
    /// The run's status then.
    pub status: String,
    /// The fields that changed in it.
    pub changed: Vec<String>,
    /// The fields removed in it.
    pub removed: Vec<String>,
}

/// A place's state and progress, read back, with every place kept.
#[derive(Debug, Clone, PartialEq)]
pub struct AtWave {
    /// Every place the history keeps, in order.
    pub waves: Vec<Wave>,
    /// The place.
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
    /// No place `step` is kept.
    #[error("run {run} has no wave {step} in its history (its waves: {kept})")]
    UnknownStep {
        /// The run.
        run: String,
        /// The place asked for.
        step: HistoryPoint,
        /// The places kept, as text.
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

/// Every entry of run `id`'s history, in the order they were taken.
async fn entries(
    store: &AnyStore,
    id: &str,
) -> Result<Vec<(HistoryPoint, EntryRecord)>, HistoryError> {
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
            .and_then(|step| step.parse::<HistoryPoint>().ok())
            .ok_or_else(|| corrupt("not a place in the history".into()))?;
        let record: EntryRecord = records::decode(&value).map_err(|e| corrupt(e.to_string()))?;
        entries.push((step, record));
    }
    Ok(entries)
}

fn wave_of(at: HistoryPoint, record: &EntryRecord) -> Wave {
    Wave {
        at,
        at_unix_ms: record.at_unix_ms,
        status: record.status.clone(),
        changed: record.fields.keys().cloned().collect(),
        removed: record.removed.clone(),
    }
}

/// Run `id`'s state and progress at place `at` (`None`: the last kept),
/// and every place its history keeps: one read of the history.
pub async fn at(
    store: &AnyStore,
    id: &str,
    at: Option<HistoryPoint>,
) -> Result<AtWave, HistoryError> {
    let entries = entries(store, id).await?;
    let wanted = match at {
        Some(at) => at,
        None => entries
            .last()
            .map_or_else(HistoryPoint::default, |(at, _)| *at),
    };
    if !entries.iter().any(|(at, _)| *at == wanted) {
        let kept: Vec<String> = entries.iter().map(|(at, _)| at.to_string()).collect();
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
    fold(id, entries, wanted)
}

/// The last place in run `id`'s history whose progress (its JSON, the
/// state left out) `fits`; `None` when none does.
pub async fn last_where(
    store: &AnyStore,
    id: &str,
    fits: impl Fn(&str) -> bool,
) -> Result<Option<AtWave>, HistoryError> {
    let entries = entries(store, id).await?;
    let mut progress: Option<String> = None;
    let mut found = None;
    for (at, record) in &entries {
        let text = apply(id, *at, progress.as_ref(), record.progress.clone())?;
        if fits(&text) {
            found = Some(*at);
        }
        progress = Some(text);
    }
    match found {
        Some(at) => fold(id, entries, at).map(Some),
        None => Ok(None),
    }
}

/// `value` of the entry at `at`, read against the value before it.
fn apply(
    id: &str,
    at: HistoryPoint,
    old: Option<&String>,
    value: Stored,
) -> Result<String, HistoryError> {
    let corrupt = |reason: &str| HistoryError::Corrupt {
        run: id.to_owned(),
        key: history_key(id, at),
        reason: reason.to_owned(),
    };
    match value {
        Stored::Whole(text) => Ok(text),
        Stored::Delta(delta) => {
            let old = old.ok_or_else(|| corrupt("a delta without a value before it"))?;
            let bytes = delta
                .apply(old.as_bytes())
                .ok_or_else(|| corrupt("a delta does not fit the value before it"))?;
            String::from_utf8(bytes).map_err(|_| corrupt("a value is not UTF-8"))
        }
    }
}

/// The entries folded up to `wanted`, one of them.
fn fold(
    id: &str,
    entries: Vec<(HistoryPoint, EntryRecord)>,
    wanted: HistoryPoint,
) -> Result<AtWave, HistoryError> {
    let waves: Vec<Wave> = entries
        .iter()
        .map(|(at, record)| wave_of(*at, record))
        .collect();
    let mut progress: Option<String> = None;
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let mut wave = None;
    for (at, record) in entries.into_iter().take_while(|(at, _)| *at <= wanted) {
        wave = Some(wave_of(at, &record));
        progress = Some(apply(id, at, progress.as_ref(), record.progress)?);
        for (name, value) in record.fields {
            let text = apply(id, at, fields.get(&name), value)?;
            fields.insert(name, text);
        }
        for name in &record.removed {
            fields.remove(name);
        }
    }
    let corrupt = |reason: &str| HistoryError::Corrupt {
        run: id.to_owned(),
        key: history_key(id, wanted),
        reason: reason.to_owned(),
    };
    let mut state = Map::new();
    for (name, text) in fields {
        let value = serde_json::from_str(&text).map_err(|e| corrupt(&e.to_string()))?;
        state.insert(name, value);
    }
    Ok(AtWave {
        waves,
        wave: wave.ok_or_else(|| corrupt("no entry"))?,
        state,
        progress_json: progress.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(step: u32, fields: &[(&str, u64, &str)]) -> Entry {
        Entry {
            at: HistoryPoint::wave(step),
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
        let mut last = Recorder::default();
        let long = format!("\"{}\"", "a".repeat(DELTA_FROM));
        let longer = format!("\"{}b\"", "a".repeat(DELTA_FROM));
        let first = last.record(&entry(0, &[("text", 1, &long), ("n", 1, "1")]));
        assert!(matches!(first.fields["text"], Stored::Whole(_)));
        let second = last.record(&entry(1, &[("text", 2, &longer), ("n", 1, "1")]));
        assert!(matches!(second.fields["text"], Stored::Delta(_)));
        assert!(matches!(second.progress, Stored::Delta(_)));
        assert!(!second.fields.contains_key("n"), "unchanged: not stored");
        let small = last.record(&entry(2, &[("text", 2, &longer), ("n", 2, "2")]));
        assert_eq!(small.fields["n"], Stored::Whole("2".into()), "small: whole");
        let third = last.record(&entry(3, &[("text", 2, &longer)]));
        assert_eq!(third.removed, ["n"]);
    }

    #[test]
    fn points_within_a_wave_follow_its_entry_and_an_end_that_merged_nothing_is_not_kept() {
        let mut history = History::new(None);
        let mut keep = |merged: u32, events: u64, ended: bool| {
            let kept = history.keep(merged, events, ended, |at| Entry {
                at,
                ..entry(0, &[])
            });
            kept.map(|entry| entry.at)
        };
        let point = |step, point| Some(HistoryPoint { step, point });
        assert_eq!(keep(0, 2, false), point(0, 0), "the input");
        assert_eq!(
            keep(0, 9, false),
            point(0, 9),
            "a map's items, within wave 1"
        );
        assert_eq!(keep(0, 9, false), None, "nothing logged since");
        assert_eq!(keep(1, 12, false), point(1, 0), "wave 1 merged");
        assert_eq!(keep(1, 15, true), None, "failed within wave 2");
        assert_eq!(keep(2, 20, true), point(2, 0), "ended as wave 2 merged");

        // A restored run's history holds its wave: what follows is a
        // point within the next.
        let mut restored = History::new(Some(3));
        let kept = restored.keep(3, 40, false, |at| Entry {
            at,
            ..entry(0, &[])
        });
        assert_eq!(kept.map(|entry| entry.at), point(3, 40));
    }

    #[test]
    fn keys_sort_in_the_order_places_are_taken_and_read_back() {
        let places = [(0, 0), (0, 9), (3, 0), (3, 57), (3, 120), (4, 0), (12, 0)]
            .map(|(step, point)| HistoryPoint { step, point });
        let keys: Vec<String> = places.iter().map(|at| history_key("run-1", *at)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        let prefix = history_prefix("run-1");
        for (key, at) in keys.iter().zip(places) {
            let read: HistoryPoint = key.strip_prefix(&prefix).unwrap().parse().unwrap();
            assert_eq!(read, at);
        }
    }

    #[test]
    fn a_chain_is_cut_after_its_limit() {
        let mut last = Recorder::default();
        let mut kinds = Vec::new();
        for step in 0..=MAX_CHAIN + 1 {
            let text = format!("\"{}{}\"", "a".repeat(DELTA_FROM), step);
            let record = last.record(&entry(step, &[("text", u64::from(step), &text)]));
            kinds.push(matches!(record.fields["text"], Stored::Whole(_)));
        }
        assert!(kinds[0]);
        assert!(kinds[1..=MAX_CHAIN as usize].iter().all(|whole| !whole));
        assert!(kinds[MAX_CHAIN as usize + 1]);
    }
}
