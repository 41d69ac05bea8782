//! The embedded store's write-ahead log: what a write changed, appended to
//! a file before the write returns, so it survives `kill -9` of the process
//! without an fsync of its own; one fsync of the log per flush interval
//! (or per write, grouped) makes it survive the machine going down too.
//!
//! The log is the store's only durable record of a write until the
//! database takes a batch of them in one commit
//! ([`crate::EmbeddedStore`]), so the log has two segments,
//! `weft.redb.wal` and `weft.redb.wal-2`: writes append to one while the
//! other's frames are committed to the database, after which it is emptied
//! and becomes the next to fill. Every frame has a sequence number, and
//! the database records the last one it took in the same commit; on open,
//! the frames after it are replayed in order, as far as they run without a
//! gap, so a segment emptied or not, or a frame the machine lost, never
//! replays an old change over a newer one.
//!
//! A segment starts with [`MAGIC`]; a frame is `[length u32][crc32
//! u32][sequence u64][changes]` (the checksum covers the sequence and the
//! changes). A torn last frame (the process died mid-append) is the end of
//! its segment. A log left by a version before segments (no magic: frames
//! without sequence numbers) is replayed first, in order.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a segment starts with.
const MAGIC: &[u8; 8] = b"weftlog2";

/// One change, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// A key's whole stored record.
    Put { key: String, record: Vec<u8> },
    /// A key removed.
    Remove { key: String },
    /// A counter's new value.
    Counter { name: String, value: i64 },
}

const PUT: u8 = 1;
const REMOVE: u8 = 2;
const COUNTER: u8 = 3;

/// The largest frame appended with its header in one write.
const ONE_WRITE: usize = 64 << 10;

/// Bytes kept free after a put for the changes that follow it.
const FOLLOWING: usize = 256;

/// The changes of one transaction, encoded for the log.
#[derive(Default)]
pub(crate) struct Frame {
    bytes: Vec<u8>,
}

impl Frame {
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn text(&mut self, text: &str) {
        self.bytes
            .extend_from_slice(&(text.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(text.as_bytes());
    }

    pub(crate) fn put(&mut self, key: &str, record: &[u8]) {
        // Room for this change and the short ones that usually follow it
        // (a counter, a removal), so that a frame holding a big record is
        // not grown, and the record copied, again after it.
        self.bytes
            .reserve(1 + 4 + key.len() + 4 + record.len() + FOLLOWING);
        self.bytes.push(PUT);
        self.text(key);
        self.bytes
            .extend_from_slice(&(record.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(record);
    }

    pub(crate) fn remove(&mut self, key: &str) {
        self.bytes.push(REMOVE);
        self.text(key);
    }

    pub(crate) fn counter(&mut self, name: &str, value: i64) {
        self.bytes.push(COUNTER);
        self.text(name);
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
}

/// What the log holds that the database does not: the changes to replay,
/// in order, and the sequence number of the last frame among them.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    pub(crate) changes: Vec<Change>,
    pub(crate) last: u64,
}

struct Segment {
    file: Arc<File>,
    path: PathBuf,
    /// Bytes in the segment, its magic included.
    len: u64,
}

impl Segment {
    fn open(path: PathBuf) -> std::io::Result<(Self, Vec<u8>)> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let segment = Self {
            file: Arc::new(file),
            path,
            len: bytes.len() as u64,
        };
        Ok((segment, bytes))
    }

    /// Empties the segment (its magic stays). No fsync: what it held is
    /// in the database, and its frames' sequence numbers say so.
    fn clear(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)?;
        (&*self.file).write_all(MAGIC)?;
        self.len = MAGIC.len() as u64;
        Ok(())
    }
}

/// The log: two segments, one of them taking appends.
pub(crate) struct Wal {
    segments: [Segment; 2],
    active: usize,
    /// The sequence number of the last frame appended.
    last: u64,
}

impl Wal {
    /// The log beside the database at `db_path`, and what it holds after
    /// `applied`, the last frame the database took, as far as `whole`
    /// takes its frames: a frame it refuses (one whose big value's file
    /// the machine lost with it) ends the replay, as a gap does.
    pub(crate) fn open(
        db_path: &Path,
        applied: u64,
        whole: impl Fn(&[Change]) -> bool,
    ) -> std::io::Result<(Self, Replay)> {
        let name = |suffix: &str| {
            let mut name = db_path.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        let (first, first_bytes) = Segment::open(name(".wal"))?;
        let (second, second_bytes) = Segment::open(name(".wal-2"))?;
        // A new segment's name is made durable before anything relies on it.
        if let Some(dir) = db_path.parent().filter(|p| !p.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        let mut legacy = Vec::new();
        let mut frames = Vec::new();
        for bytes in [&first_bytes, &second_bytes] {
            match bytes.strip_prefix(MAGIC.as_slice()) {
                Some(body) => frames.extend(decode_segment(body)),
                None => legacy.extend(decode_legacy(bytes)),
            }
        }
        frames.sort_by_key(|(seq, _)| *seq);
        let mut replay = Replay {
            changes: legacy,
            last: applied,
        };
        for (seq, changes) in frames {
            if seq <= replay.last {
                continue;
            }
            if seq != replay.last + 1 || !whole(&changes) {
                // A gap, or a value's file lost: what follows was never
                // synced before what it follows, so it was never promised
                // to outlive the machine.
                break;
            }
            replay.changes.extend(changes);
            replay.last = seq;
        }
        let wal = Self {
            segments: [first, second],
            active: 0,
            last: replay.last,
        };
        Ok((wal, replay))
    }

    /// Empties both segments, once the database holds all they had.
    pub(crate) fn clear(&mut self) -> std::io::Result<()> {
        for segment in &mut self.segments {
            segment.clear()?;
        }
        self.active = 0;
        Ok(())
    }

    /// Appends one transaction's changes; when this returns they survive
    /// the process. Returns the frame's sequence number. A failed append
    /// is cut off again, so a segment never holds a torn frame before good
    /// ones.
    pub(crate) fn append(&mut self, frame: &Frame) -> std::io::Result<u64> {
        let seq = self.last + 1;
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(&(frame.bytes.len() as u32 + 8).to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(&frame.bytes);
        header[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
        header[8..].copy_from_slice(&seq.to_le_bytes());
        let segment = &mut self.segments[self.active];
        // A small frame goes in one write with its header; a big one is
        // written from where it is, after its header, not copied first.
        let written = if frame.bytes.len() <= ONE_WRITE {
            let mut out = Vec::with_capacity(frame.bytes.len() + header.len());
            out.extend_from_slice(&header);
            out.extend_from_slice(&frame.bytes);
            (&*segment.file).write_all(&out)
        } else {
            (&*segment.file)
                .write_all(&header)
                .and_then(|()| (&*segment.file).write_all(&frame.bytes))
        };
        if let Err(error) = written {
            let _ = segment.file.set_len(segment.len);
            return Err(error);
        }
        segment.len += (header.len() + frame.bytes.len()) as u64;
        self.last = seq;
        Ok(seq)
    }

    /// The sequence number of the last frame appended.
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// Both segments' files, to sync without holding the log: the sealed
    /// one first.
    pub(crate) fn files(&self) -> [Arc<File>; 2] {
        [
            self.segments[1 - self.active].file.clone(),
            self.segments[self.active].file.clone(),
        ]
    }

    /// Seals the segment taking appends (its frames are about to be
    /// committed to the database) and switches to the other, which the
    /// last commit emptied.
    pub(crate) fn rotate(&mut self) {
        self.active = 1 - self.active;
    }

    /// Empties the sealed segment, once the database holds its frames.
    pub(crate) fn clear_sealed(&mut self) -> std::io::Result<()> {
        self.segments[1 - self.active].clear()
    }

    /// Where the segment taking appends is.
    pub(crate) fn path(&self) -> &Path {
        &self.segments[self.active].path
    }
}

/// Every whole frame of a segment (after its magic), with its sequence
/// number; stops at the first frame that is torn or does not check.
fn decode_segment(mut bytes: &[u8]) -> Vec<(u64, Vec<Change>)> {
    let mut frames = Vec::new();
    while let Some((body, rest)) = checked_frame(bytes) {
        let Some((seq, changes)) = body.split_first_chunk::<8>() else {
            break;
        };
        let Some(changes) = decode_frame(changes) else {
            break;
        };
        frames.push((u64::from_le_bytes(*seq), changes));
        bytes = rest;
    }
    frames
}

/// Every change of a log written before segments, in order.
fn decode_legacy(mut bytes: &[u8]) -> Vec<Change> {
    let mut changes = Vec::new();
    while let Some((body, rest)) = checked_frame(bytes) {
        let Some(frame) = decode_frame(body) else {
            break;
        };
        changes.extend(frame);
        bytes = rest;
    }
    changes
}

/// The body of the frame `bytes` starts with, if it is whole and checks,
/// and what follows it.
fn checked_frame(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let body = bytes.get(8..8 + len)?;
    (crc32fast::hash(body) == crc).then(|| (body, &bytes[8 + len..]))
}

fn decode_frame(mut body: &[u8]) -> Option<Vec<Change>> {
    fn take<'a>(body: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (body.get(..n)?, body.get(n..)?);
        *body = rest;
        Some(head)
    }
    fn sized<'a>(body: &mut &'a [u8]) -> Option<&'a [u8]> {
        let len = u32::from_le_bytes(take(body, 4)?.try_into().ok()?) as usize;
        take(body, len)
    }
    fn text(body: &mut &[u8]) -> Option<String> {
        String::from_utf8(sized(body)?.to_vec()).ok()
    }
    let mut changes = Vec::new();
    while let Some((&tag, rest)) = body.split_first() {
        body = rest;
        changes.push(match tag {
            PUT => Change::Put {
                key: text(&mut body)?,
                record: sized(&mut body)?.to_vec(),
            },
            REMOVE => Change::Remove {
                key: text(&mut body)?,
            },
            COUNTER => Change::Counter {
                name: text(&mut body)?,
                value: i64::from_le_bytes(take(&mut body, 8)?.try_into().ok()?),
            },
            _ => return None,
        });
    }
    Some(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-wal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn all(_: &[Change]) -> bool {
        true
    }

    fn put(key: &str, record: &[u8]) -> Frame {
        let mut frame = Frame::default();
        frame.put(key, record);
        frame
    }

    fn keys(replay: &Replay) -> Vec<&str> {
        replay
            .changes
            .iter()
            .map(|change| match change {
                Change::Put { key, .. } | Change::Remove { key } => key.as_str(),
                Change::Counter { name, .. } => name.as_str(),
            })
            .collect()
    }

    #[test]
    fn frames_read_back_in_order_and_a_torn_tail_ends_the_log() {
        let dir = dir("torn");
        let db = dir.join("s.redb");
        let (mut wal, replay) = Wal::open(&db, 0, all).unwrap();
        assert!(replay.changes.is_empty());
        wal.clear().unwrap();
        let mut first = put("a", b"one");
        first.counter("revision", 7);
        assert_eq!(wal.append(&first).unwrap(), 1);
        let mut second = Frame::default();
        second.remove("a");
        assert_eq!(wal.append(&second).unwrap(), 2);
        drop(wal);
        // A third frame, torn by a crash mid-append.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join("s.redb.wal"))
            .unwrap();
        file.write_all(&[200, 0, 0, 0, 1, 2]).unwrap();
        drop(file);
        let (mut wal, replay) = Wal::open(&db, 0, all).unwrap();
        assert_eq!(
            replay.changes,
            vec![
                Change::Put {
                    key: "a".into(),
                    record: b"one".to_vec()
                },
                Change::Counter {
                    name: "revision".into(),
                    value: 7
                },
                Change::Remove { key: "a".into() },
            ]
        );
        assert_eq!(replay.last, 2);
        // What the database already took is not replayed again.
        assert_eq!(keys(&Wal::open(&db, 1, all).unwrap().1), ["a"]);
        wal.clear().unwrap();
        assert!(Wal::open(&db, 2, all).unwrap().1.changes.is_empty());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_big_frame_written_apart_from_its_header_reads_back_and_its_torn_copy_ends_the_log() {
        let dir = dir("big");
        let db = dir.join("s.redb");
        let (mut wal, _) = Wal::open(&db, 0, all).unwrap();
        wal.clear().unwrap();
        let record: Vec<u8> = (0..3 * ONE_WRITE).map(|i| (i % 251) as u8).collect();
        let mut big = put("big", &record);
        big.counter("revision", 9);
        // Room made once: the counter after the record did not grow it.
        assert!(big.bytes.capacity() <= big.bytes.len() + FOLLOWING);
        assert_eq!(wal.append(&big).unwrap(), 1);
        let mut small = Frame::default();
        small.remove("big");
        assert_eq!(wal.append(&small).unwrap(), 2);
        drop(wal);
        let log = dir.join("s.redb.wal");
        let whole = std::fs::read(&log).unwrap();
        let expected = vec![
            Change::Put {
                key: "big".into(),
                record: record.clone(),
            },
            Change::Counter {
                name: "revision".into(),
                value: 9,
            },
            Change::Remove { key: "big".into() },
        ];
        assert_eq!(Wal::open(&db, 0, all).unwrap().1.changes, expected);
        // The big frame cut after its header and part of its body (the
        // process died between the two writes): the log ends before it.
        let first_frame = MAGIC.len();
        std::fs::write(&log, &whole[..first_frame + 16 + ONE_WRITE]).unwrap();
        let replay = Wal::open(&db, 0, all).unwrap().1;
        assert!(replay.changes.is_empty(), "{:?}", replay.changes.len());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn segments_replay_by_sequence_and_stop_at_a_gap() {
        let dir = dir("segments");
        let db = dir.join("s.redb");
        let (mut wal, _) = Wal::open(&db, 0, all).unwrap();
        wal.clear().unwrap();
        wal.append(&put("one", b"1")).unwrap();
        wal.append(&put("two", b"2")).unwrap();
        wal.rotate();
        wal.append(&put("three", b"3")).unwrap();
        drop(wal);
        // The newer segment is read first and the order still holds.
        let (mut wal, replay) = Wal::open(&db, 0, all).unwrap();
        assert_eq!(keys(&replay), ["one", "two", "three"]);
        assert_eq!(replay.last, 3);
        // A sealed segment emptied after its commit: only the newer frames.
        wal.rotate();
        wal.clear_sealed().unwrap();
        drop(wal);
        let (_, replay) = Wal::open(&db, 2, all).unwrap();
        assert_eq!(keys(&replay), ["three"]);
        // A sealed segment whose emptying was lost replays nothing the
        // database took.
        let (_, replay) = Wal::open(&db, 3, all).unwrap();
        assert!(replay.changes.is_empty());
        // A frame missing before others (never synced): they are dropped.
        let (_, replay) = Wal::open(&db, 1, all).unwrap();
        assert!(replay.changes.is_empty(), "{:?}", replay.changes);
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_log_from_before_segments_is_replayed_first() {
        let dir = dir("legacy");
        let db = dir.join("s.redb");
        // The old format: frames of [length][crc][changes], no magic.
        let mut body = put("old", b"x").bytes;
        body.extend(put("older", b"y").bytes);
        let mut old = (body.len() as u32).to_le_bytes().to_vec();
        old.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        old.extend_from_slice(&body);
        std::fs::write(dir.join("s.redb.wal"), old).unwrap();
        let (_, replay) = Wal::open(&db, 0, all).unwrap();
        assert_eq!(keys(&replay), ["old", "older"]);
        std::fs::remove_dir_all(dir).ok();
    }
}
