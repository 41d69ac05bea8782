//! Storing a new run before it is acknowledged, and reading every stored
//! run back when a coordinator starts.

use std::sync::Arc;
use weft_proto::RunId;

use weft_store::{AnyStore, Store, StoreError, chunks};

use super::Keeper;
use super::deltas::DeltaRecord;
use super::keys::{
    self, delta_key, events_key, field_key, progress_base_key, progress_delta_key, progress_key,
    spilled_key,
};
use super::records::{self, EventsRecord, FileRecord, RecordHead, RunRecord};
use crate::bundle::Bundle;
use weft_proto::events::{RunEvent, StoredEvent};

/// Stores a new run's bundle files (each once, by hash); returns the head
/// its records repeat. Its first record is the actor's first checkpoint.
/// `stored` holds the files known to be in the store (looked for or
/// written before), which are not looked for again; the files of this
/// bundle join it.
pub async fn store_bundle(
    keeper: &Keeper,
    bundle: &Bundle,
    created_unix_ms: i64,
    stored: &mut std::collections::HashSet<String>,
) -> Result<RecordHead, StoreError> {
    let mut files = Vec::with_capacity(bundle.files.len());
    for (path, file) in &bundle.files {
        if !stored.contains(&file.sha256) {
            let key = keeper.blob_key(&file.sha256);
            let store = keeper.store();
            if store.get(&key).await?.is_none() {
                keeper.checked(chunks::put(store, &key, &file.content, keeper.fence()).await)?;
            }
            stored.insert(file.sha256.clone());
        }
        files.push(FileRecord {
            path: path.clone(),
            sha256: file.sha256.clone(),
            mode: file.mode,
        });
    }
    Ok(RecordHead {
        graph_path: bundle.graph_path.clone(),
        files,
        created_unix_ms,
        spilled: Vec::new(),
        progress_at: None,
        deltas: Vec::new(),
        progress_chain: None,
    })
}

/// What a run's record stores of its machine: the progress, its state
/// written apart field by field and put back when it is read.
pub trait Progress: serde::de::DeserializeOwned {
    /// Puts back the state stored apart from the progress.
    fn set_state(&mut self, state: serde_json::Map<String, serde_json::Value>);
}

/// A run read back from the store.
pub struct StoredRun<P> {
    /// The run id.
    pub id: RunId,
    /// Its bundle, as submitted.
    pub bundle: Bundle,
    /// Where its machine stood at the last checkpoint.
    pub progress: P,
    /// Its event log up to that checkpoint.
    pub log: Vec<StoredEvent>,
    /// What its record says besides.
    pub head: RecordHead,
    /// The records of its stream (`super::stream_copy`), key and value.
    pub stream: Vec<(String, Vec<u8>)>,
}

fn corrupt(key: &str, reason: &str) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Every stored run whose id `in_scope` takes (a partition's runs; every
/// run, for a coordinator that leads them all), oldest first; the records
/// of the others are not read. A record that cannot be read is reported
/// and skipped, never fatal to the others.
pub async fn stored_runs<P: Progress>(
    keeper: &Keeper,
    max_bundle_bytes: usize,
    in_scope: impl Fn(&str) -> bool,
) -> Result<Vec<StoredRun<P>>, StoreError> {
    let store = keeper.store();
    let mut runs = Vec::new();
    // The records only: a run's fields and events are read once, by
    // `read_run`, not with every key under `runs/`.
    let stored_keys = store.scan_keys(keys::RUNS).await?;
    // The runs that streamed: only theirs are scanned for it.
    let streamed: std::collections::HashSet<&str> = stored_keys
        .iter()
        .filter_map(|key| key.strip_prefix(keys::RUNS)?.split_once("/stream/"))
        .map(|(id, _)| id)
        .collect();
    let records = stored_keys
        .iter()
        .filter(|key| keys::is_record_key(key) && keys::record_run(key).is_some_and(&in_scope));
    for key in records {
        let Some(bytes) = chunks::get(store, key).await? else {
            continue;
        };
        match read_run(keeper, key, &bytes, max_bundle_bytes).await {
            Ok(mut run) => {
                if streamed.contains(&*run.id) {
                    run.stream = chunks::scan(store, &keys::stream_prefix(&run.id)).await?;
                }
                runs.push(run);
            }
            Err(error) => tracing::error!(%key, %error, "a stored run cannot be restored"),
        }
    }
    runs.sort_by_key(|run| run.head.created_unix_ms);
    Ok(runs)
}

async fn read_run<P: Progress>(
    keeper: &Keeper,
    key: &str,
    bytes: &[u8],
    max_bundle_bytes: usize,
) -> Result<StoredRun<P>, StoreError> {
    let store = keeper.store();
    let record = records::decode_run(bytes).map_err(|e| corrupt(key, &e.to_string()))?;
    let mut progress: P = match (&record.progress_chain, record.progress_at) {
        (Some(seqs), _) => {
            let text = read_progress_chain(store, &record.id, seqs).await?;
            serde_json::from_str(&text)
        }
        (None, None) => serde_json::from_str(&record.progress_json),
        (None, Some(at)) => {
            let apart = progress_key(&record.id, at);
            let json = chunks::get(store, &apart)
                .await?
                .ok_or_else(|| corrupt(&apart, "the progress its record names is missing"))?;
            serde_json::from_slice(&json)
        }
    }
    .map_err(|e| corrupt(key, &e.to_string()))?;
    if !record.fields.is_empty() {
        progress.set_state(read_state(store, &record).await?);
    }
    let bundle = read_bundle(keeper, key, &record, max_bundle_bytes).await?;
    let log = read_log(store, &record).await?;
    Ok(StoredRun {
        id: RunId::from(record.id.as_str()),
        bundle,
        progress,
        log,
        head: RecordHead {
            graph_path: record.graph_path,
            files: record.files,
            created_unix_ms: record.created_unix_ms,
            spilled: record.spilled,
            progress_at: record.progress_at,
            deltas: record.deltas,
            progress_chain: record.progress_chain,
        },
        stream: Vec::new(),
    })
}

/// The bundle a run's record (at `key`) names, its files read from the
/// store.
async fn read_bundle(
    keeper: &Keeper,
    key: &str,
    record: &RunRecord,
    max_bundle_bytes: usize,
) -> Result<Bundle, StoreError> {
    let mut files = Vec::with_capacity(record.files.len());
    for file in &record.files {
        let content = chunks::get(keeper.store(), &keeper.blob_key(&file.sha256))
            .await?
            .ok_or_else(|| corrupt(key, &format!("bundle file {} is missing", file.path)))?;
        files.push((file.path.clone(), content, file.mode));
    }
    Bundle::new(record.graph_path.clone(), files, max_bundle_bytes)
        .map_err(|e| corrupt(key, &e.to_string()))
}

/// Run `id`'s bundle, as submitted, read back from the store.
pub async fn stored_bundle(
    keeper: &Keeper,
    id: &str,
    max_bundle_bytes: usize,
) -> Result<Bundle, StoreError> {
    let key = keys::record_key(id);
    let bytes = chunks::get(keeper.store(), &key)
        .await?
        .ok_or_else(|| corrupt(&key, "the run's record is missing"))?;
    let record = records::decode_run(&bytes).map_err(|e| corrupt(&key, &e.to_string()))?;
    read_bundle(keeper, &key, &record, max_bundle_bytes).await
}

/// The state a record names, field by field: each from its key, then its
/// deltas applied in order.
async fn read_state(
    store: &AnyStore,
    record: &RunRecord,
) -> Result<serde_json::Map<String, serde_json::Value>, StoreError> {
    let mut state = serde_json::Map::new();
    for (name, key, json) in read_field_texts(store, record, |_| true).await? {
        let value = serde_json::from_slice(&json).map_err(|e| corrupt(&key, &e.to_string()))?;
        state.insert(name, value);
    }
    Ok(state)
}

/// The JSON text of each of `names` in the stored state of run `id`, as
/// its last checkpoint holds it: an ended run's large fields, which its
/// record in memory leaves out. A name the state does not hold is an error.
pub async fn read_fields(
    store: &AnyStore,
    id: &str,
    names: &[String],
) -> Result<std::collections::HashMap<String, String>, StoreError> {
    let key = keys::record_key(id);
    let bytes = chunks::get(store, &key)
        .await?
        .ok_or_else(|| corrupt(&key, "the run's record is missing"))?;
    let record = records::decode_run(&bytes).map_err(|e| corrupt(&key, &e.to_string()))?;
    let wanted = |name: &str| names.iter().any(|n| n == name);
    let mut texts = std::collections::HashMap::with_capacity(names.len());
    for (name, key, json) in read_field_texts(store, &record, wanted).await? {
        let text = String::from_utf8(json).map_err(|e| corrupt(&key, &e.to_string()))?;
        texts.insert(name, text);
    }
    if let Some(missing) = names.iter().find(|name| !texts.contains_key(*name)) {
        return Err(corrupt(
            &key,
            &format!("the record names no field '{missing}'"),
        ));
    }
    Ok(texts)
}

/// The stored JSON of each field of `record` that `wanted` names, with
/// the key it was read from: each from its key, then its deltas applied
/// in order.
async fn read_field_texts(
    store: &AnyStore,
    record: &RunRecord,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String, Vec<u8>)>, StoreError> {
    let spilled: std::collections::HashMap<&str, u64> = record
        .spilled
        .iter()
        .map(|(n, v)| (n.as_str(), *v))
        .collect();
    let chains: std::collections::HashMap<&str, &[u64]> = record
        .deltas
        .iter()
        .filter(|(n, _)| wanted(n))
        .map(|(n, seqs)| (n.as_str(), seqs.as_slice()))
        .collect();
    // Every delta of the run in one read, when there are any.
    let mut deltas: std::collections::HashMap<String, Vec<u8>> = if chains.is_empty() {
        Default::default()
    } else {
        chunks::scan(store, &keys::deltas_prefix(&record.id))
            .await?
            .into_iter()
            .collect()
    };
    let mut texts = Vec::new();
    for name in record.fields.iter().filter(|name| wanted(name)) {
        let key = match spilled.get(name.as_str()) {
            Some(version) => spilled_key(&record.id, name, *version),
            None => field_key(&record.id, name),
        };
        let mut json = chunks::get(store, &key)
            .await?
            .ok_or_else(|| corrupt(&key, "the field is missing"))?;
        let chain = chains.get(name.as_str()).copied().unwrap_or_default();
        if !chain.is_empty() {
            let keys = chain.iter().map(|&seq| delta_key(&record.id, name, seq));
            json = apply_deltas(json, keys, &mut deltas)?;
        }
        texts.push((name.clone(), key, json));
    }
    Ok(texts)
}

/// A chained progress: its base, then its deltas in order.
async fn read_progress_chain(
    store: &AnyStore,
    id: &str,
    seqs: &[u64],
) -> Result<String, StoreError> {
    let key = progress_base_key(id);
    let base = chunks::get(store, &key)
        .await?
        .ok_or_else(|| corrupt(&key, "the progress its record names is missing"))?;
    let mut deltas = match seqs.is_empty() {
        true => Default::default(),
        false => chunks::scan(store, &keys::progress_deltas_prefix(id))
            .await?
            .into_iter()
            .collect(),
    };
    let keys = seqs.iter().map(|&seq| progress_delta_key(id, seq));
    let progress = apply_deltas(base, keys, &mut deltas)?;
    String::from_utf8(progress).map_err(|e| corrupt(&key, &e.to_string()))
}

/// `value` with the deltas at `keys` applied in order, taken from `stored`.
fn apply_deltas(
    mut value: Vec<u8>,
    keys: impl Iterator<Item = String>,
    stored: &mut std::collections::HashMap<String, Vec<u8>>,
) -> Result<Vec<u8>, StoreError> {
    for at in keys {
        let bytes = stored
            .remove(&at)
            .ok_or_else(|| corrupt(&at, "a delta its record names is missing"))?;
        let delta: DeltaRecord =
            records::decode(&bytes).map_err(|e| corrupt(&at, &e.to_string()))?;
        value = delta
            .apply(&value)
            .ok_or_else(|| corrupt(&at, "the delta does not fit the value before it"))?;
    }
    Ok(value)
}

/// The run's events up to its record's position, in order.
async fn read_log(store: &AnyStore, record: &RunRecord) -> Result<Vec<StoredEvent>, StoreError> {
    read_events(store, &record.id, 0..record.events).await
}

/// The events of run `id` at positions `range` (of the first `range.end`,
/// those its record counts), in order, as its stretches of events hold
/// them. Only those are parsed: a watcher that asks for the tail of a long
/// log does not pay for the rest.
pub async fn read_events(
    store: &AnyStore,
    id: &str,
    range: std::ops::Range<u64>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let prefix = keys::events_prefix(id);
    let mut log = Vec::new();
    // The position of the next event of the stored stretches.
    let mut next = 0u64;
    for (key, bytes) in chunks::scan(store, &prefix).await? {
        let batch: EventsRecord =
            records::decode(&bytes).map_err(|e| corrupt(&key, &e.to_string()))?;
        if batch.first != next {
            // A stretch written after the record was (a crash between the
            // two writes): the record's position is what counts.
            break;
        }
        for (at_unix_ms, json) in batch.events {
            let seq = next;
            next += 1;
            if !range.contains(&seq) {
                continue;
            }
            let event: RunEvent =
                serde_json::from_str(&json).map_err(|e| corrupt(&key, &e.to_string()))?;
            log.push(StoredEvent {
                seq,
                at_unix_ms,
                event: Arc::new(event),
            });
        }
        if next >= range.end {
            break;
        }
    }
    debug_assert!(events_key(id, 0).starts_with(&prefix));
    Ok(log)
}
