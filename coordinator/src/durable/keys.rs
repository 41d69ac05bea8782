//! Where a run's records live in the store: the one place that spells
//! a key.
//!
//! `runs/<id>/record` holds the run's record (the machine's progress
//! without its state, the names of the state's fields, and where the log
//! stands); `runs/<id>/fields/<name>` each field of the state;
//! `runs/<id>/progress/base` and `…/progress/d/<seq>` a large progress;
//! `runs/<id>/deltas/<name in hex>/<seq>` each delta of a field stored as what changed;
//! `runs/<id>/events/<first>` each stretch of events;
//! `runs/<id>/history/<step>[.<point>]` each wave's state (`super::history`);
//! `runs/<id>/stream/…` the run's stream (`super::stream_copy`); `blobs/<sha256>`
//! every bundle file once, whichever runs share it (in a partitioned group,
//! once per partition: `blobs/p<00000>/<sha256>`).

/// `runs/<id>/` followed by `parts` and, if given, a number padded to
/// 20 digits (so keys sort by it), spelled into room made once: a
/// checkpoint spells several keys, and `format!` with a padded number cost
/// a seventh of the checkpoint writer's instructions.
fn run_key(id: &str, parts: &[&str], number: Option<u64>) -> String {
    let tail: usize = parts.iter().map(|part| part.len()).sum();
    let mut key = String::with_capacity(RUNS.len() + id.len() + 1 + tail + 20);
    key.push_str(RUNS);
    key.push_str(id);
    key.push('/');
    for part in parts {
        key.push_str(part);
    }
    if let Some(number) = number {
        push_padded(&mut key, number);
    }
    key
}

/// Appends `number` in 20 decimal digits, zeros first (`{number:020}`).
fn push_padded(key: &mut String, mut number: u64) {
    let mut digits = [b'0'; 20];
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (number % 10) as u8;
        number /= 10;
    }
    key.extend(digits.iter().map(|&digit| char::from(digit)));
}

/// Where a run's record lives.
pub fn record_key(id: &str) -> String {
    run_key(id, &["record"], None)
}

/// Where a field of a run's state lives.
pub fn field_key(id: &str, name: &str) -> String {
    run_key(id, &["fields/", name], None)
}

/// Where a field too large for a checkpoint's transaction lives, at one
/// version (written once, before the record that names it).
pub fn spilled_key(id: &str, name: &str, version: u64) -> String {
    run_key(id, &["fields/", name, "@"], Some(version))
}

/// Where a progress too large for a checkpoint's transaction lives.
pub fn progress_key(id: &str, at: u64) -> String {
    run_key(id, &["progress@"], Some(at))
}

/// Where delta `seq` of a run's field `name` lives (`super::deltas`).
pub fn delta_key(id: &str, name: &str, seq: u64) -> String {
    let mut key = field_deltas_prefix(id, name);
    push_padded(&mut key, seq);
    key
}

/// Where the deltas of a run's field begin: the name in hex, so no field's
/// prefix begins another's.
pub fn field_deltas_prefix(id: &str, name: &str) -> String {
    run_key(id, &["deltas/", &hex::encode(name), "/"], None)
}

/// Where all of a run's deltas begin.
pub fn deltas_prefix(id: &str) -> String {
    run_key(id, &["deltas/"], None)
}

/// Where the base of a run's progress lives when it is kept apart from
/// the record as a chain (`super::deltas`).
pub fn progress_base_key(id: &str) -> String {
    run_key(id, &["progress/base"], None)
}

/// Where delta `seq` of a run's chained progress lives.
pub fn progress_delta_key(id: &str, seq: u64) -> String {
    run_key(id, &["progress/d/"], Some(seq))
}

/// Where the deltas of a run's chained progress begin.
pub fn progress_deltas_prefix(id: &str) -> String {
    run_key(id, &["progress/d/"], None)
}

/// Where a run's chained progress begins, base and deltas (never a
/// `progress@<n>` key).
pub fn progress_chain_prefix(id: &str) -> String {
    run_key(id, &["progress/"], None)
}

/// Where a stretch of a run's events lives.
pub fn events_key(id: &str, first: u64) -> String {
    run_key(id, &["events/"], Some(first))
}

/// Where a run's history begins (`super::history`).
pub fn history_prefix(id: &str) -> String {
    run_key(id, &["history/"], None)
}

/// Where the history entry of a run's place `at` lives: the wave's step,
/// and for a point within the next wave `.` and the point, both padded, so
/// the entries sort in the order they were taken.
pub fn history_key(id: &str, at: weft_proto::events::HistoryPoint) -> String {
    let mut key = run_key(id, &["history/"], Some(u64::from(at.step)));
    if at.point > 0 {
        key.push('.');
        push_padded(&mut key, at.point);
    }
    key
}

/// Where a run's stream is kept (`super::stream_copy`).
pub fn stream_prefix(id: &str) -> String {
    run_key(id, &["stream/"], None)
}

/// Where the block of offsets a run's coordinator streams in is kept.
pub fn stream_block_key(id: &str) -> String {
    run_key(id, &["stream/block"], None)
}

/// Where a chunk of a run's stream, beginning at offset `first`, lives.
pub fn stream_chunk_key(id: &str, first: u64) -> String {
    run_key(id, &["stream/c/"], Some(first))
}

/// Where the whole stream of one of a run's steps, beginning at offset
/// `first`, lives.
pub fn stream_step_key(id: &str, first: u64) -> String {
    run_key(id, &["stream/s/"], Some(first))
}

/// Where bundle files live, each at `blobs/<sha256>` (a run's [`Keeper`]
/// spells it: [`Keeper::blob_key`]).
///
/// [`Keeper`]: super::Keeper
/// [`Keeper::blob_key`]: super::Keeper::blob_key
pub const BLOBS: &str = "blobs/";

/// Where a partition's runs keep their own copies of their bundle files,
/// in a partitioned group: `blobs/p<00000>/` (a hash is hex: no file of
/// `blobs/` begins with `p`).
pub fn partition_blobs(partition: u32) -> String {
    format!("{BLOBS}p{partition:05}/")
}

/// Where every run's keys begin.
pub const RUNS: &str = "runs/";

/// Where all of one run's keys begin.
pub fn run_prefix(id: &str) -> String {
    run_key(id, &[], None)
}

/// Where a run's stretches of events begin.
pub fn events_prefix(id: &str) -> String {
    run_key(id, &["events/"], None)
}

/// Whether `key` is a run's record (rather than one of its fields, events
/// or a chunk of a large value).
pub fn is_record_key(key: &str) -> bool {
    key.starts_with(RUNS) && key.ends_with("/record") && !weft_store::chunks::is_chunk_key(key)
}

/// The run whose record `key` is ([`is_record_key`]).
pub fn record_run(key: &str) -> Option<&str> {
    key.strip_prefix(RUNS)?.strip_suffix("/record")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_spelled_as_stores_already_hold_them() {
        let id = "r-01";
        assert_eq!(record_key(id), "runs/r-01/record");
        assert_eq!(field_key(id, "messages"), "runs/r-01/fields/messages");
        assert_eq!(
            spilled_key(id, "doc", 7),
            "runs/r-01/fields/doc@00000000000000000007"
        );
        assert_eq!(
            progress_key(id, u64::MAX),
            "runs/r-01/progress@18446744073709551615"
        );
        assert_eq!(field_deltas_prefix(id, "a/b"), "runs/r-01/deltas/612f62/");
        assert_eq!(
            delta_key(id, "a/b", 42),
            "runs/r-01/deltas/612f62/00000000000000000042"
        );
        assert_eq!(deltas_prefix(id), "runs/r-01/deltas/");
        assert_eq!(progress_base_key(id), "runs/r-01/progress/base");
        assert_eq!(
            progress_delta_key(id, 0),
            "runs/r-01/progress/d/00000000000000000000"
        );
        assert_eq!(progress_deltas_prefix(id), "runs/r-01/progress/d/");
        assert_eq!(progress_chain_prefix(id), "runs/r-01/progress/");
        assert_eq!(
            events_key(id, 1_234_567),
            "runs/r-01/events/00000000000001234567"
        );
        assert_eq!(events_prefix(id), "runs/r-01/events/");
        assert_eq!(stream_prefix(id), "runs/r-01/stream/");
        assert_eq!(stream_block_key(id), "runs/r-01/stream/block");
        assert_eq!(
            stream_chunk_key(id, 7),
            "runs/r-01/stream/c/00000000000000000007"
        );
        assert_eq!(
            stream_step_key(id, 7),
            "runs/r-01/stream/s/00000000000000000007"
        );
        assert_eq!(run_prefix(id), "runs/r-01/");
        assert_eq!(partition_blobs(3), "blobs/p00003/");
        assert!(is_record_key(&record_key(id)));
    }
}
