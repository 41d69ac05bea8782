//! The stored form of runs: one byte of format version, then the record
//! encoded with bincode.
//!
//! A coordinator reads every format up to its own ([`FORMAT`]) and refuses a
//! newer one with an error naming it, so a rollback never misreads what a
//! newer coordinator wrote. The run machine's progress and the events hold
//! arbitrary JSON (the state), which bincode cannot describe by itself: they
//! travel inside the record as JSON text.
//!
//! `tests/fixtures/run-record-v1.bin` to `-v5.bin` are records
//! as written on the days their formats were fixed: tests decode each, and
//! check that today's encoder still writes the current one byte for byte,
//! so a change of format is a deliberate one (a new version, the old ones
//! still read).

use serde::{Deserialize, Serialize};

/// The format this coordinator writes: 5 stores the progress's node and
/// edge statuses as a string of letters (`weft_machine`'s `status_letters`;
/// the record itself is unchanged, but a coordinator of format 4 could not
/// read such a progress, so it is told the record is newer); 4 may store
/// fields as a base and deltas (`deltas`); 3 may keep large fields under
/// versioned keys (`spilled`); 2 stored the state apart, field by field; 1
/// kept it inside the progress.
pub const FORMAT: u8 = 5;

/// A run as stored: enough to restore its machine and serve it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run id.
    pub id: String,
    /// The graph file's path within the bundle.
    pub graph_path: String,
    /// Every file of the bundle, stored once by hash under `blobs/`.
    pub files: Vec<FileRecord>,
    /// When the run was submitted (Unix milliseconds).
    pub created_unix_ms: i64,
    /// The machine's progress (`Progress`), as JSON; without its state
    /// when `fields` names where the state is.
    pub progress_json: String,
    /// Events stored so far (the log position the progress belongs to).
    pub events: u64,
    /// The state's fields, each stored under `runs/<id>/fields/<name>`
    /// (format 2); empty in format 1, whose progress holds the state.
    pub fields: Vec<String>,
    /// Fields stored instead under `runs/<id>/fields/<name>@<version>`,
    /// with that version: written ahead of the record, each in requests of
    /// its own, when a checkpoint does not fit one transaction of the
    /// store (format 3; empty before).
    pub spilled: Vec<(String, u64)>,
    /// When set, the progress is stored under `runs/<id>/progress@<n>`
    /// (and `progress_json` is empty): written ahead of the record like
    /// spilled fields (format 3; `None` before).
    pub progress_at: Option<u64>,
    /// Fields stored at their plain key as a base and then deltas, with
    /// their deltas' numbers in order (`super::deltas`; format 4, empty
    /// before).
    pub deltas: Vec<(String, Vec<u64>)>,
    /// When set, the progress is stored at `runs/<id>/progress/base` and
    /// then these deltas (and `progress_json` is empty; format 4, `None`
    /// before).
    pub progress_chain: Option<Vec<u64>>,
}

/// A run record of format 3.
#[derive(Deserialize)]
struct RunRecordV3 {
    id: String,
    graph_path: String,
    files: Vec<FileRecord>,
    created_unix_ms: i64,
    progress_json: String,
    events: u64,
    fields: Vec<String>,
    spilled: Vec<(String, u64)>,
    progress_at: Option<u64>,
}

impl From<RunRecordV3> for RunRecord {
    fn from(v3: RunRecordV3) -> Self {
        Self {
            id: v3.id,
            graph_path: v3.graph_path,
            files: v3.files,
            created_unix_ms: v3.created_unix_ms,
            progress_json: v3.progress_json,
            events: v3.events,
            fields: v3.fields,
            spilled: v3.spilled,
            progress_at: v3.progress_at,
            deltas: Vec::new(),
            progress_chain: None,
        }
    }
}

/// A run record of format 2.
#[derive(Deserialize)]
struct RunRecordV2 {
    id: String,
    graph_path: String,
    files: Vec<FileRecord>,
    created_unix_ms: i64,
    progress_json: String,
    events: u64,
    fields: Vec<String>,
}

impl From<RunRecordV2> for RunRecord {
    fn from(v2: RunRecordV2) -> Self {
        Self {
            id: v2.id,
            graph_path: v2.graph_path,
            files: v2.files,
            created_unix_ms: v2.created_unix_ms,
            progress_json: v2.progress_json,
            events: v2.events,
            fields: v2.fields,
            spilled: Vec::new(),
            progress_at: None,
            deltas: Vec::new(),
            progress_chain: None,
        }
    }
}

/// A run record of format 1.
#[derive(Deserialize)]
struct RunRecordV1 {
    id: String,
    graph_path: String,
    files: Vec<FileRecord>,
    created_unix_ms: i64,
    progress_json: String,
    events: u64,
}

impl From<RunRecordV1> for RunRecord {
    fn from(v1: RunRecordV1) -> Self {
        Self {
            id: v1.id,
            graph_path: v1.graph_path,
            files: v1.files,
            created_unix_ms: v1.created_unix_ms,
            progress_json: v1.progress_json,
            events: v1.events,
            fields: Vec::new(),
            spilled: Vec::new(),
            progress_at: None,
            deltas: Vec::new(),
            progress_chain: None,
        }
    }
}

/// Reads a run record of any format up to the current one.
pub fn decode_run(bytes: &[u8]) -> Result<RunRecord, RecordError> {
    match bytes.first() {
        Some(1) => decode_body::<RunRecordV1>(&bytes[1..]).map(RunRecord::from),
        Some(2) => decode_body::<RunRecordV2>(&bytes[1..]).map(RunRecord::from),
        Some(3) => decode_body::<RunRecordV3>(&bytes[1..]).map(RunRecord::from),
        _ => decode(bytes),
    }
}

/// A bundle file of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Its path in the bundle.
    pub path: String,
    /// Its content hash.
    pub sha256: String,
    /// Its permission bits.
    pub mode: u32,
}

/// A stretch of a run's event log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsRecord {
    /// The position of the first event.
    pub first: u64,
    /// Each event: when (Unix milliseconds) and what, as JSON.
    pub events: Vec<(i64, String)>,
}

/// Why stored bytes are not a record this coordinator reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Written by a newer coordinator.
    #[error("format {0} was written by a newer coordinator (this one reads up to {FORMAT})")]
    Newer(u8),
    /// Not a record.
    #[error("not a record: {0}")]
    Corrupt(String),
}

/// Encodes a record of the current format.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    encode_within(record, 0)
}

/// Encodes a record of the current format into room made for about
/// `texts` bytes of text and a little more: written where it ends up, not
/// into a buffer grown step by step and then copied after the format byte.
fn encode_within<T: Serialize>(record: &T, texts: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + texts + RECORD_ROOM);
    bytes.push(FORMAT);
    bincode::serde::encode_into_std_write(record, &mut bytes, bincode::config::standard())
        .expect("records hold only strings, numbers and lists, and a Vec takes every write");
    bytes
}

/// Room a record gets beyond its long texts: its ids, numbers and lists.
const RECORD_ROOM: usize = 256;

/// An [`EventsRecord`] of `events`, encoded without copying them first.
pub fn encode_events(first: u64, events: &EventTexts) -> Vec<u8> {
    /// Serializes as [`EventsRecord`] does: the same fields in order.
    #[derive(Serialize)]
    struct Borrowed<'a> {
        first: u64,
        events: &'a EventTexts,
    }
    let texts = events.text.len() + 10 * events.ends.len();
    encode_within(&Borrowed { first, events }, texts)
}

/// Events as the JSON texts an [`EventsRecord`] holds, written one after
/// another into one buffer: a checkpoint makes no text of its own for
/// each event.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EventTexts {
    /// The texts, one after another (each valid UTF-8: JSON).
    text: Vec<u8>,
    /// Each event's time (Unix ms) and where its text ends in `text`.
    ends: Vec<(i64, usize)>,
}

impl EventTexts {
    /// Room for `events` events of about [`EVENT_ROOM`] bytes each.
    pub fn with_room(events: usize) -> Self {
        Self {
            text: Vec::with_capacity(events * EVENT_ROOM),
            ends: Vec::with_capacity(events),
        }
    }

    /// Writes `event` as JSON, at `at_unix_ms`.
    pub fn push(&mut self, at_unix_ms: i64, event: &impl Serialize) {
        let start = self.text.len();
        if serde_json::to_writer(&mut self.text, event).is_err() {
            // An event with no JSON form is stored as an empty text, as
            // it always was.
            self.text.truncate(start);
        }
        self.ends.push((at_unix_ms, self.text.len()));
    }

    /// How many events.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Each event's time and text (JSON, so UTF-8), in order.
    pub fn texts(&self) -> impl Iterator<Item = (i64, &[u8])> {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|&(_, end)| end));
        self.ends
            .iter()
            .zip(starts)
            .map(|(&(at, end), start)| (at, &self.text[start..end]))
    }

    /// Takes `later`'s events after these.
    pub fn extend(&mut self, later: EventTexts) {
        let offset = self.text.len();
        self.text.extend_from_slice(&later.text);
        self.ends
            .extend(later.ends.into_iter().map(|(at, end)| (at, end + offset)));
    }
}

/// The room an event's text is given before it is written (most are
/// shorter; a longer one makes more).
const EVENT_ROOM: usize = 192;

impl Serialize for EventTexts {
    /// As the `(time, text)` pairs of [`EventsRecord::events`] are in a
    /// record: bincode writes a text as it writes its bytes (its length,
    /// then them), so each goes as bytes, not checked as UTF-8 again.
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        /// A text's bytes.
        struct Text<'a>(&'a [u8]);
        impl Serialize for Text<'_> {
            fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
                to.serialize_bytes(self.0)
            }
        }
        to.collect_seq(self.texts().map(|(at, text)| (at, Text(text))))
    }
}

/// A [`RunRecord`] made of borrowed parts, encoded as the record would be
/// (the same fields in order): a checkpoint copies none of them first.
#[derive(Serialize)]
pub(super) struct RunRecordRef<'a> {
    /// [`RunRecord::id`].
    pub(super) id: &'a str,
    /// [`RunRecord::graph_path`].
    pub(super) graph_path: &'a str,
    /// [`RunRecord::files`].
    pub(super) files: &'a [FileRecord],
    /// [`RunRecord::created_unix_ms`].
    pub(super) created_unix_ms: i64,
    /// [`RunRecord::progress_json`].
    pub(super) progress_json: &'a str,
    /// [`RunRecord::events`].
    pub(super) events: u64,
    /// [`RunRecord::fields`].
    pub(super) fields: &'a [String],
    /// [`RunRecord::spilled`], in name order.
    #[serde(serialize_with = "pairs")]
    pub(super) spilled: &'a std::collections::BTreeMap<String, u64>,
    /// [`RunRecord::progress_at`].
    pub(super) progress_at: Option<u64>,
    /// [`RunRecord::deltas`].
    pub(super) deltas: &'a [(String, Vec<u64>)],
    /// [`RunRecord::progress_chain`].
    pub(super) progress_chain: Option<&'a [u64]>,
}

/// A map as the list of its pairs, as a `Vec<(K, V)>` is encoded.
fn pairs<S: serde::Serializer>(
    map: &&std::collections::BTreeMap<String, u64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(map.iter())
}

impl RunRecordRef<'_> {
    /// The record's bytes, as [`encode`] makes of the owned record.
    pub(super) fn encode(&self) -> Vec<u8> {
        encode_within(self, self.progress_json.len())
    }
}

/// Decodes a record of any format up to the current one.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, RecordError> {
    let (&version, body) = bytes
        .split_first()
        .ok_or_else(|| RecordError::Corrupt("empty".into()))?;
    match version {
        // Events records did not change between formats 1 and 5; run
        // records did (see [`decode_run`]).
        1..=FORMAT => decode_body(body),
        0 => Err(RecordError::Corrupt("format 0 does not exist".into())),
        newer => Err(RecordError::Newer(newer)),
    }
}

fn decode_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, RecordError> {
    let (record, used) = bincode::serde::decode_from_slice(body, bincode::config::standard())
        .map_err(|e| RecordError::Corrupt(e.to_string()))?;
    if used != body.len() {
        return Err(RecordError::Corrupt(format!(
            "{} bytes after the record",
            body.len() - used
        )));
    }
    Ok(record)
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
    /// Fields the stored record keeps under versioned keys, and where it
    /// keeps its progress if apart (both empty for a new run).
    pub spilled: Vec<(String, u64)>,
    /// See [`RunRecord::progress_at`](RunRecord::progress_at).
    pub progress_at: Option<u64>,
    /// See [`RunRecord::deltas`](RunRecord::deltas).
    pub deltas: Vec<(String, Vec<u64>)>,
    /// See [`RunRecord::progress_chain`](RunRecord::progress_chain).
    pub progress_chain: Option<Vec<u64>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_encoded_borrowed_read_back_as_their_record() {
        let values = [json!({"type": "a", "text": "é \" \n"}), json!({})];
        let mut events = EventTexts::default();
        events.push(5, &values[0]);
        events.push(6, &values[1]);
        let record = EventsRecord {
            first: 7,
            events: vec![
                (5, serde_json::to_string(&values[0]).unwrap()),
                (6, "{}".to_owned()),
            ],
        };
        let borrowed = encode_events(7, &events);
        assert_eq!(borrowed, encode(&record));
        assert_eq!(decode::<EventsRecord>(&borrowed).unwrap(), record);
    }

    #[test]
    fn event_texts_taken_after_others_keep_their_order_and_times() {
        let mut earlier = EventTexts::default();
        earlier.push(1, &json!({"n": 1}));
        earlier.push(2, &json!({"n": 2}));
        let mut later = EventTexts::default();
        later.push(3, &json!({"n": 3}));
        earlier.extend(later);
        earlier.extend(EventTexts::default());
        let read: Vec<(i64, &str)> = earlier
            .texts()
            .map(|(at, text)| (at, std::str::from_utf8(text).unwrap()))
            .collect();
        assert_eq!(
            read,
            [(1, r#"{"n":1}"#), (2, r#"{"n":2}"#), (3, r#"{"n":3}"#)]
        );
        assert_eq!(earlier.len(), 3);
    }

    #[test]
    fn a_run_record_encoded_borrowed_reads_back_as_the_record() {
        let record = sample();
        let borrowed = RunRecordRef {
            id: &record.id,
            graph_path: &record.graph_path,
            files: &record.files,
            created_unix_ms: record.created_unix_ms,
            progress_json: &record.progress_json,
            events: record.events,
            fields: &record.fields,
            spilled: &record.spilled.iter().cloned().collect(),
            progress_at: record.progress_at,
            deltas: &record.deltas,
            progress_chain: record.progress_chain.as_deref(),
        }
        .encode();
        assert_eq!(borrowed, encode(&record));
        assert_eq!(decode_run(&borrowed).unwrap(), record);
    }

    /// The record kept in `tests/fixtures/run-record-v4.bin` and `-v5.bin`
    /// (and, without what later formats added, in the older fixtures).
    fn sample() -> RunRecord {
        RunRecord {
            id: "run-0190f3a2b7c47d1e9f00000000000001".into(),
            graph_path: "review.yaml".into(),
            files: vec![
                FileRecord {
                    path: "review.yaml".into(),
                    sha256: "a".repeat(64),
                    mode: 0o644,
                },
                FileRecord {
                    path: "scripts/gate.sh".into(),
                    sha256: "b".repeat(64),
                    mode: 0o755,
                },
            ],
            created_unix_ms: 1_796_000_000_000,
            progress_json: r#"{"state":{"topic":"Weft"},"status":"Running","steps":2}"#.into(),
            events: 7,
            fields: vec!["draft".into(), "topic".into()],
            spilled: vec![("draft".into(), 4)],
            progress_at: None,
            deltas: vec![("notes".into(), vec![0, 1, 5])],
            progress_chain: Some(vec![2]),
        }
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    #[test]
    fn a_record_of_format_1_still_decodes() {
        // Written by the coordinator of format 1, on the day it was fixed.
        let stored = std::fs::read(fixture("run-record-v1.bin")).expect("checked in");
        assert_eq!(stored[0], 1);
        let record = decode_run(&stored).expect("decodes");
        let expected = RunRecord {
            fields: Vec::new(),
            spilled: Vec::new(),
            deltas: Vec::new(),
            progress_chain: None,
            ..sample()
        };
        assert_eq!(record, expected, "format 1 kept the state in the progress");
    }

    #[test]
    fn a_record_of_format_2_still_decodes() {
        let stored = std::fs::read(fixture("run-record-v2.bin")).expect("checked in");
        assert_eq!(stored[0], 2);
        let expected = RunRecord {
            spilled: Vec::new(),
            deltas: Vec::new(),
            progress_chain: None,
            ..sample()
        };
        assert_eq!(decode_run(&stored).expect("decodes"), expected);
    }

    #[test]
    fn a_record_of_format_3_still_decodes() {
        let stored = std::fs::read(fixture("run-record-v3.bin")).expect("checked in");
        assert_eq!(stored[0], 3);
        let expected = RunRecord {
            deltas: Vec::new(),
            progress_chain: None,
            ..sample()
        };
        assert_eq!(decode_run(&stored).expect("decodes"), expected);
    }

    #[test]
    fn a_record_of_format_4_still_decodes() {
        let stored = std::fs::read(fixture("run-record-v4.bin")).expect("checked in");
        assert_eq!(stored[0], 4);
        assert_eq!(decode_run(&stored).expect("decodes"), sample());
    }

    #[test]
    fn a_record_of_format_5_decodes_and_is_still_written_the_same() {
        let path = fixture("run-record-v5.bin");
        if std::env::var_os("WEFT_WRITE_FIXTURES").is_some() {
            std::fs::write(&path, encode(&sample())).expect("fixture written");
        }
        let stored = std::fs::read(&path).expect("the fixture is checked in");
        assert_eq!(stored[0], 5, "format 5");
        assert_eq!(decode_run(&stored).expect("decodes"), sample());
        assert_eq!(
            encode(&sample()),
            stored,
            "today's encoder writes format 5 unchanged"
        );
    }

    #[test]
    fn newer_or_broken_records_are_refused_by_name() {
        let mut bytes = encode(&sample());
        bytes[0] = 9;
        assert_eq!(
            decode_run(&bytes).unwrap_err().to_string(),
            "format 9 was written by a newer coordinator (this one reads up to 5)"
        );
        assert!(matches!(decode_run(&[]), Err(RecordError::Corrupt(_))));
        let mut long = encode(&sample());
        long.push(0);
        assert!(matches!(decode_run(&long), Err(RecordError::Corrupt(_))));
        let events = EventsRecord {
            first: 3,
            events: vec![(1, r#"{"kind":"run_started"}"#.into())],
        };
        assert_eq!(decode::<EventsRecord>(&encode(&events)).unwrap(), events);
    }
}
