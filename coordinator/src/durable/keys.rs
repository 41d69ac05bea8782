//! Where a run's records live in the store: the one place that spells
//! a key.
//!
//! `runs/<id>/record` holds the run's record (the machine's progress
//! without its state, the names of the state's fields, and where the log
//! stands); `runs/<id>/fields/<name>` each field of the state;
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
