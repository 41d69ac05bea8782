//! Where a run's records live in the store: the one place that spells
//! a key.
//!
//! `runs/<id>/record` holds the run's record (the machine's progress
//! without its state, the names of the state's fields, and where the log
//! stands); `runs/<id>/fields/<name>` each field of the state;
//! `runs/<id>/progress/base` and `…/progress/d/<seq>` a large progress;
//! `runs/<id>/deltas/<name in hex>/<seq>` each delta of a field stored as what changed;
//! `runs/<id>/events/<first>` each stretch of events; `blobs/<sha256>`
//! every bundle file once, whichever runs share it.

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

/// Where delta `seq` of a run's field `name` lives (`super::deltas`).
pub fn delta_key(id: &str, name: &str, seq: u64) -> String {
    format!("{}{seq:020}", field_deltas_prefix(id, name))
}

/// Where the deltas of a run's field begin: the name in hex, so no field's
/// prefix begins another's.
pub fn field_deltas_prefix(id: &str, name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{}{hex}/", deltas_prefix(id))
}

/// Where all of a run's deltas begin.
pub fn deltas_prefix(id: &str) -> String {
    format!("runs/{id}/deltas/")
}

/// Where the base of a run's progress lives when it is kept apart from
/// the record as a chain (`super::deltas`).
pub fn progress_base_key(id: &str) -> String {
    format!("runs/{id}/progress/base")
}

/// Where delta `seq` of a run's chained progress lives.
pub fn progress_delta_key(id: &str, seq: u64) -> String {
    format!("{}{seq:020}", progress_deltas_prefix(id))
}

/// Where the deltas of a run's chained progress begin.
pub fn progress_deltas_prefix(id: &str) -> String {
    format!("runs/{id}/progress/d/")
}

/// Where a run's chained progress begins, base and deltas (never a
/// `progress@<n>` key).
pub fn progress_chain_prefix(id: &str) -> String {
    format!("runs/{id}/progress/")
}

/// Where a stretch of a run's events lives.
pub fn events_key(id: &str, first: u64) -> String {
    format!("runs/{id}/events/{first:020}")
}

/// Where a bundle file lives.
pub fn blob_key(sha256: &str) -> String {
    format!("blobs/{sha256}")
}

/// Where every run's keys begin.
pub const RUNS: &str = "runs/";

/// Where all of one run's keys begin.
pub fn run_prefix(id: &str) -> String {
    format!("runs/{id}/")
}

/// Where a run's stretches of events begin.
pub fn events_prefix(id: &str) -> String {
    format!("runs/{id}/events/")
}

/// Whether `key` is a run's record (rather than one of its fields, events
/// or a chunk of a large value).
pub fn is_record_key(key: &str) -> bool {
    key.starts_with(RUNS) && key.ends_with("/record") && !weft_store::chunks::is_chunk_key(key)
}
