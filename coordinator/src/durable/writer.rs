//! How a checkpoint reaches the store, two ways.
//!
//! **Together** (nearly always): the record, the new events and the fields
//! whose version moved, in one transaction — a record never meets fields or
//! events newer than itself.
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

use std::collections::BTreeMap;
use std::sync::Arc;
use weft_proto::RunId;

use tokio::sync::oneshot;
use weft_store::{Store, StoreError, chunks};

use super::Keeper;
use super::keys::{events_key, field_key, progress_key, record_key, spilled_key};
use super::records::{self, EventsRecord, RecordHead, RunRecord};

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
    /// Told whether the snapshot was stored, for a caller that waits.
    pub(super) done: Option<oneshot::Sender<bool>>,
}

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
}

impl Writer {
    pub(super) fn new(keeper: Keeper, id: RunId, head: RecordHead) -> Self {
        let spilled = head.spilled.iter().cloned().collect();
        let progress_at = head.progress_at;
        Self {
            keeper,
            id,
            head,
            spilled,
            progress_at,
            next_progress: progress_at.map_or(0, |n| n + 1),
        }
    }

    /// Stores a checkpoint: together if it fits one transaction, else
    /// apart.
    pub(super) async fn write(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        match self.write_together(snapshot).await {
            Err(StoreError::TooLarge { .. } | StoreError::TooManyWrites { .. }) => {
                self.write_apart(snapshot).await
            }
            other => other,
        }
    }

    async fn write_together(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        // Fields written now go to their plain keys.
        let mut spilled = self.spilled.clone();
        spilled.retain(|name, _| {
            !snapshot.changed.contains_key(name) && snapshot.names.binary_search(name).is_ok()
        });
        let record = self.record(snapshot, snapshot.progress_json.clone(), &spilled, None);
        let events = events_record(snapshot);
        let id = &self.id;
        let mut keyed: Vec<(String, &[u8])> = Vec::with_capacity(snapshot.changed.len() + 2);
        if let Some(events) = &events {
            keyed.push((events_key(id, snapshot.first), events));
        }
        for (name, (_, json)) in &snapshot.changed {
            keyed.push((field_key(id, name), json.as_bytes()));
        }
        keyed.push((record_key(id), &record));
        let values: Vec<(&str, &[u8])> = keyed.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let (store, fence) = (self.keeper.store(), self.keeper.fence());
        self.keeper
            .checked(chunks::put_together(store, &values, fence).await)?;
        self.settle(spilled, None).await;
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
        for (name, (version, json)) in &snapshot.changed {
            let key = spilled_key(&id, name, *version);
            keeper.checked(chunks::put(store, &key, json.as_bytes(), fence).await)?;
            spilled.insert(name.clone(), *version);
        }
        let at = self.next_progress;
        self.next_progress += 1;
        let progress = snapshot.progress_json.as_bytes();
        keeper.checked(chunks::put(store, &progress_key(&id, at), progress, fence).await)?;
        let record = self.record(snapshot, String::new(), &spilled, Some(at));
        let key = record_key(&id);
        keeper.checked(chunks::put_together(store, &[(&key, &record)], fence).await)?;
        tracing::debug!(run = %id, fields = snapshot.changed.len(), "a large checkpoint stored apart");
        self.settle(spilled, Some(at)).await;
        Ok(())
    }

    fn record(
        &self,
        snapshot: &Snapshot,
        progress_json: String,
        spilled: &BTreeMap<String, u64>,
        progress_at: Option<u64>,
    ) -> Vec<u8> {
        records::encode(&RunRecord {
            id: self.id.to_string(),
            graph_path: self.head.graph_path.clone(),
            files: self.head.files.clone(),
            created_unix_ms: self.head.created_unix_ms,
            progress_json,
            events: snapshot.first + snapshot.events.len() as u64,
            fields: snapshot.names.clone(),
            spilled: spilled.iter().map(|(n, v)| (n.clone(), *v)).collect(),
            progress_at,
        })
    }

    /// Notes where the new record put things, and deletes the versioned
    /// keys it no longer names (a key left behind by a failed delete goes
    /// with the run).
    async fn settle(&mut self, spilled: BTreeMap<String, u64>, progress_at: Option<u64>) {
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
        self.spilled = spilled;
        self.progress_at = progress_at;
        let (store, fence) = (self.keeper.store(), self.keeper.fence());
        for key in stale {
            // The key and its chunks (`KEY\u{1}N`); the zero-padded
            // version keeps other keys out of the prefix.
            let deleted = store.delete_prefix(&key, fence).await;
            if let Err(error) = self.keeper.checked(deleted) {
                tracing::warn!(run = %self.id, %key, %error, "a superseded key stays in the store");
            }
        }
    }
}

/// The snapshot's new events as a record, if there are any.
fn events_record(snapshot: &Snapshot) -> Option<Vec<u8>> {
    (!snapshot.events.is_empty()).then(|| {
        records::encode(&EventsRecord {
            first: snapshot.first,
            events: snapshot.events.clone(),
        })
    })
}
