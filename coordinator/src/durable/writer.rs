//! How a checkpoint reaches the store, two ways.
//!
//! **Together** (nearly always): the record, the new events and the fields
//! whose version moved, in one transaction — a record never meets fields or
//! events newer than itself. A field that grew from its last stored value
//! goes as a delta (`super::deltas`), the rest whole.
//!
//! **Apart**, when that transaction is larger than the store takes (etcd:
//! 1 MiB and 128 writes per transaction): the events, each changed field
//! and the progress are written first, each on its own and split across
//! keys as needed, under keys nothing names yet (fields at
//! `fields/<name>@<version>`, the progress at `progress@<n>`); then the
//! record that names them, alone. A crash in between leaves only keys no
//! record names; the superseded ones are deleted once the new record
//! stands. So a state of any size (up to the store's 256 MiB per value) is
//! stored whole, never truncated, on either backend.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use weft_proto::RunId;

use tokio::sync::oneshot;
use weft_store::{Store, StoreError, chunks};

use super::Keeper;
use super::deltas::{Chains, FieldWrite, Leftover, ProgressWrite};
use super::history;
use super::keys::{
    delta_key, events_key, field_deltas_prefix, field_key, progress_base_key,
    progress_chain_prefix, progress_delta_key, progress_deltas_prefix, progress_key, record_key,
    spilled_key,
};
use super::records::{self, RecordHead, RunRecordRef};

/// One checkpoint, taken by the actor.
pub(super) struct Snapshot {
    pub(super) progress_json: String,
    /// Fields whose version moved since the last checkpoint: version, JSON.
    pub(super) changed: BTreeMap<String, (u64, Arc<str>)>,
    /// Every field's name, sorted.
    pub(super) names: Vec<String>,
    /// The events since the last checkpoint, and the position of the first.
    pub(super) first: u64,
    pub(super) events: records::EventTexts,
    /// The run's history entries taken with it (`super::history`).
    pub(super) history: Vec<history::Entry>,
    /// Whether the run has paused or ended: its waiters are told only
    /// once its history is stored too, so a client reading the history
    /// of a run it saw end finds its last wave.
    pub(super) settled: bool,
    /// Told whether the snapshot was stored, for a caller that waits.
    pub(super) done: Option<oneshot::Sender<bool>>,
}

/// History entries stored in a checkpoint's own transaction up to this
/// many bytes in all; larger ones are written after the checkpoint, so a
/// large state's wave does not wait for its history.
const HISTORY_TOGETHER: usize = 64 << 10;

/// History entries left to write after their checkpoint was stored.
#[must_use = "the entries are written by `Writer::write_history`"]
#[derive(Default)]
pub(super) struct Deferred(Vec<(String, Vec<u8>)>);

/// Writes one run's checkpoints, knowing where its last record put things.
pub(super) struct Writer {
    keeper: Keeper,
    id: RunId,
    head: RecordHead,
    /// Fields the last stored record names at versioned keys.
    spilled: BTreeMap<String, u64>,
    /// Where the last stored record keeps its progress, if apart.
    progress_at: Option<u64>,
    /// The next `progress@<n>` to write.
    next_progress: u64,
    /// The fields the last stored record keeps as a base and deltas.
    chains: Chains,
    /// The checkpoint byte counters (of fields and the progress, whole and
    /// as deltas), taken once per run rather than named again per write.
    counted: [[metrics::Counter; 2]; 2],
    /// The history's last entry stored, for the next one's deltas.
    history: history::Recorder,
}

impl Writer {
    pub(super) fn new(keeper: Keeper, id: RunId, head: RecordHead) -> Self {
        let spilled = head.spilled.iter().cloned().collect();
        let progress_at = head.progress_at;
        let chains = Chains::restored(&head.deltas, head.progress_chain.as_deref());
        Self {
            keeper,
            id,
            head,
            spilled,
            progress_at,
            next_progress: progress_at.map_or(0, |n| n + 1),
            chains,
            history: history::Recorder::default(),
            counted: ["field", "progress"].map(|of| {
                ["whole", "delta"].map(|form| {
                    let labels = [("of", of), ("form", form)];
                    metrics::counter!(crate::metrics::CHECKPOINT_BYTES, &labels)
                })
            }),
        }
    }

    /// Stores a checkpoint: together if it fits one transaction, else
    /// apart. Its history entries go in the same transaction when they
    /// are small; the rest come back, for [`Writer::write_history`] once
    /// the checkpoint's waiters are told.
    pub(super) async fn write(&mut self, snapshot: &Snapshot) -> Result<Deferred, StoreError> {
        let history: Vec<(String, Vec<u8>)> = (snapshot.history.iter())
            .map(|entry| self.history.encode(&self.id, entry))
            .collect();
        let bytes: usize = history
            .iter()
            .map(|(key, value)| key.len() + value.len())
            .sum();
        let with = bytes <= HISTORY_TOGETHER;
        let written = match self
            .write_together(snapshot, if with { &history } else { &[] })
            .await
        {
            Err(StoreError::TooLarge { .. } | StoreError::TooManyWrites { .. }) => {
                self.write_apart(snapshot).await.map(|()| false)
            }
            other => other.map(|()| with),
        };
        match written {
            Ok(true) => Ok(Deferred(Vec::new())),
            Ok(false) => Ok(Deferred(history)),
            Err(error) => {
                // The entries stay with the snapshot and are encoded again.
                self.history.forget();
                Err(error)
            }
        }
    }

    /// Writes the history entries a stored checkpoint left; one that
    /// fails is lost (the run is not), and the next entry is stored whole.
    pub(super) async fn write_history(&mut self, deferred: Deferred) {
        let (store, fence) = (self.keeper.store(), self.keeper.fence());
        for (key, bytes) in deferred.0 {
            let written = self
                .keeper
                .checked(chunks::put(store, &key, &bytes, fence).await);
            if let Err(error) = written {
                self.history.forget();
                if !matches!(error, StoreError::Fenced { .. }) {
                    tracing::warn!(run = %self.id, %key, %error, "a wave's history was not stored");
                }
                return;
            }
        }
    }

    async fn write_together(
        &mut self,
        snapshot: &Snapshot,
        history: &[(String, Vec<u8>)],
    ) -> Result<(), StoreError> {
        // Fields written now go to their plain keys, whole or as deltas.
        let mut spilled = self.spilled.clone();
        spilled.retain(|name, _| {
            !snapshot.changed.contains_key(name) && snapshot.names.binary_search(name).is_ok()
        });
        let mut chains = self.chains.clone();
        let mut stale = Stale {
            fields: chains.keep_only(&snapshot.names),
            progress: Leftover::Nothing,
        };
        let id = &self.id;
        let mut keyed: Vec<(String, Cow<'_, [u8]>)> =
            Vec::with_capacity(snapshot.changed.len() + history.len() + 2);
        for (key, record) in history {
            keyed.push((key.clone(), Cow::Borrowed(record)));
        }
        if let Some(events) = events_record(snapshot) {
            keyed.push((events_key(id, snapshot.first), Cow::Owned(events)));
        }
        // Bytes written whole and as deltas: of fields, of the progress.
        let mut written = [[0usize; 2]; 2];
        for (name, (_, json)) in &snapshot.changed {
            let (write, ended) = chains.store(name, json);
            if ended {
                stale.fields.push(name.clone());
            }
            match write {
                FieldWrite::Whole => {
                    written[0][0] += json.len();
                    keyed.push((field_key(id, name), Cow::Borrowed(json.as_bytes())))
                }
                FieldWrite::Delta { seq, record } => {
                    written[0][1] += record.size();
                    keyed.push((
                        delta_key(id, name, seq),
                        Cow::Owned(records::encode(&record)),
                    ));
                }
            }
        }
        // The progress: inline, or (large) a base and deltas of its own.
        let progress = &snapshot.progress_json;
        let (write, leftover) = chains.store_progress(progress);
        stale.progress = leftover;
        let inline = match write {
            ProgressWrite::Inline => {
                written[1][0] += progress.len();
                progress.as_str()
            }
            ProgressWrite::Chained(FieldWrite::Whole) => {
                written[1][0] += progress.len();
                keyed.push((progress_base_key(id), Cow::Borrowed(progress.as_bytes())));
                ""
            }
            ProgressWrite::Chained(FieldWrite::Delta { seq, record }) => {
                written[1][1] += record.size();
                let delta = Cow::Owned(records::encode(&record));
                keyed.push((progress_delta_key(id, seq), delta));
                ""
            }
        };
        let record = self.record(snapshot, inline, &spilled, None, &chains);
        keyed.push((record_key(id), Cow::Owned(record)));
        let values: Vec<(&str, &[u8])> = keyed.iter().map(|(k, v)| (k.as_str(), &**v)).collect();
        let (store, fence) = (self.keeper.store(), self.keeper.fence());
        self.keeper
            .checked(chunks::put_together(store, &values, fence).await)?;
        for (counters, bytes) in self.counted.iter().zip(written) {
            for (counter, bytes) in counters.iter().zip(bytes) {
                counter.increment(bytes as u64);
            }
        }
        self.chains = chains;
        self.settle(spilled, None, stale).await;
        Ok(())
    }

    async fn write_apart(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let id = self.id.clone();
        let (store, fence) = (self.keeper.store(), self.keeper.fence());
        let keeper = &self.keeper;
        if let Some(events) = events_record(snapshot) {
            let key = events_key(&id, snapshot.first);
            keeper.checked(chunks::put(store, &key, &events, fence).await)?;
        }
        let mut spilled = self.spilled.clone();
        spilled.retain(|name, _| snapshot.names.binary_search(name).is_ok());
        // Fields spilled now are whole under their versioned keys: their
        // chains end.
        let mut chains = self.chains.clone();
        let mut stale = Stale {
            fields: chains.keep_only(&snapshot.names),
            progress: chains.forget_progress(),
        };
        for (name, (version, json)) in &snapshot.changed {
            let key = spilled_key(&id, name, *version);
            keeper.checked(chunks::put(store, &key, json.as_bytes(), fence).await)?;
            spilled.insert(name.clone(), *version);
            if chains.forget(name) {
                stale.fields.push(name.clone());
            }
        }
        let at = self.next_progress;
        self.next_progress += 1;
        let progress = snapshot.progress_json.as_bytes();
        keeper.checked(chunks::put(store, &progress_key(&id, at), progress, fence).await)?;
        let record = self.record(snapshot, "", &spilled, Some(at), &chains);
        let key = record_key(&id);
        keeper.checked(chunks::put_together(store, &[(&key, &record)], fence).await)?;
        tracing::debug!(run = %id, fields = snapshot.changed.len(), "a large checkpoint stored apart");
        self.chains = chains;
        self.settle(spilled, Some(at), stale).await;
        Ok(())
    }

    fn record(
        &self,
        snapshot: &Snapshot,
        progress_json: &str,
        spilled: &BTreeMap<String, u64>,
        progress_at: Option<u64>,
        chains: &Chains,
    ) -> Vec<u8> {
        let (deltas, progress_chain) = (chains.named(), chains.progress());
        RunRecordRef {
            id: self.id.as_str(),
            graph_path: &self.head.graph_path,
            files: &self.head.files,
            created_unix_ms: self.head.created_unix_ms,
            progress_json,
            events: snapshot.first + snapshot.events.len() as u64,
            fields: &snapshot.names,
            spilled,
            progress_at,
            deltas: &deltas,
            progress_chain: progress_chain.as_deref(),
        }
        .encode()
    }

    /// Notes where the new record put things, and deletes the versioned
    /// keys and the deltas (`stale`) it no longer names (a key left behind
    /// by a failed delete goes with the run).
    async fn settle(
        &mut self,
        spilled: BTreeMap<String, u64>,
        progress_at: Option<u64>,
        stale_chains: Stale,
    ) {
        let mut stale: Vec<String> = self
            .spilled
            .iter()
            .filter(|(name, version)| spilled.get(*name) != Some(version))
            .map(|(name, version)| spilled_key(&self.id, name, *version))
            .collect();
        if let Some(old) = self.progress_at
            && progress_at != Some(old)
        {
            stale.push(progress_key(&self.id, old));
        }
        let fields = stale_chains.fields.iter();
        stale.extend(fields.map(|name| field_deltas_prefix(&self.id, name)));
        match stale_chains.progress {
            Leftover::Nothing => {}
            Leftover::Deltas => stale.push(progress_deltas_prefix(&self.id)),
            Leftover::Chain => stale.push(progress_chain_prefix(&self.id)),
        }
        self.spilled = spilled;
        self.progress_at = progress_at;
        let (store, fence) = (self.keeper.store(), self.keeper.fence());
        for key in stale {
            // The key and its chunks (`KEY\u{1}N`; the zero-padded
            // version keeps other keys out of the prefix), or a field's
            // deltas.
            let deleted = store.delete_prefix(&key, fence).await;
            if let Err(error) = self.keeper.checked(deleted) {
                tracing::warn!(run = %self.id, %key, %error, "a superseded key stays in the store");
            }
        }
    }
}

/// What a new record no longer names of the chains: the fields whose
/// deltas it left behind, and what of the progress's chain.
struct Stale {
    fields: Vec<String>,
    progress: Leftover,
}

/// The snapshot's new events as a record, if there are any.
fn events_record(snapshot: &Snapshot) -> Option<Vec<u8>> {
    (!snapshot.events.is_empty()).then(|| records::encode_events(snapshot.first, &snapshot.events))
}
