//! The embedded store's write-ahead log: what a write changed, appended to
//! a file before the write returns, so it survives `kill -9` of the process
//! without an fsync of its own.
//!
//! redb commits such writes in memory only (`Durability::None`); every
//! flush interval one durable commit (one fsync) takes everything since the
//! last, and the log is emptied. On open, redb is at its last durable
//! commit and the log holds what came after: replaying it — absolute
//! values, in order, so replaying twice changes nothing — restores every
//! write that returned. A frame is `[length u32][crc32 u32][changes]`; a
//! torn last frame (the process died mid-append) is the end of the log.
//! What the operating system had not written to disk when the machine
//! itself went down (not just the process) is lost, up to one interval.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

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

/// The log file.
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    /// Bytes in the log (appended since it was last emptied).
    len: u64,
}

impl Wal {
    /// The log beside the database at `db_path`, and the changes it holds
    /// (to replay, in order).
    pub(crate) fn open(db_path: &Path) -> std::io::Result<(Self, Vec<Change>)> {
        let mut name = db_path.as_os_str().to_owned();
        name.push(".wal");
        let path = PathBuf::from(name);
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .append(true)
                .mode(0o600)
                .open(&path)?
        };
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (changes, whole) = decode_log(&bytes);
        // A torn tail is cut off: appends go after the last whole frame.
        if whole < bytes.len() {
            file.set_len(whole as u64)?;
        }
        let len = whole as u64;
        Ok((Self { file, path, len }, changes))
    }

    /// Appends one transaction's changes; when this returns they survive
    /// the process. A failed append is cut off again, so the log never
    /// holds a torn frame before good ones.
    pub(crate) fn append(&mut self, frame: &Frame) -> std::io::Result<()> {
        let mut out = Vec::with_capacity(frame.bytes.len() + 8);
        out.extend_from_slice(&(frame.bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&frame.bytes).to_le_bytes());
        out.extend_from_slice(&frame.bytes);
        if let Err(error) = self.file.write_all(&out) {
            let _ = self.file.set_len(self.len);
            return Err(error);
        }
        self.len += out.len() as u64;
        Ok(())
    }

    /// Whether anything was appended since the log was last emptied.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the log, once the database holds everything durably.
    pub(crate) fn clear(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)?;
        self.file.sync_data()?;
        self.len = 0;
        Ok(())
    }

    /// Where the log is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Every change of every whole frame, in order, and the length of those
/// frames; stops at the first frame that is torn or does not check.
fn decode_log(log: &[u8]) -> (Vec<Change>, usize) {
    let mut changes = Vec::new();
    let mut bytes = log;
    while bytes.len() >= 8 {
        let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        let Some(body) = bytes.get(8..8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let Some(frame) = decode_frame(body) else {
            break;
        };
        changes.extend(frame);
        bytes = &bytes[8 + len..];
    }
    (changes, log.len() - bytes.len())
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

    #[test]
    fn frames_read_back_and_a_torn_tail_ends_the_log() {
        let dir = std::env::temp_dir().join(format!("weft-wal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("s.redb");
        let (mut wal, replay) = Wal::open(&db).unwrap();
        assert!(replay.is_empty() && wal.is_empty());
        let mut first = Frame::default();
        first.put("a", b"one");
        first.counter("revision", 7);
        wal.append(&first).unwrap();
        let mut second = Frame::default();
        second.remove("a");
        wal.append(&second).unwrap();
        drop(wal);
        // A third frame, torn by a crash mid-append.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join("s.redb.wal"))
            .unwrap();
        file.write_all(&[200, 0, 0, 0, 1, 2]).unwrap();
        drop(file);
        let (mut wal, replay) = Wal::open(&db).unwrap();
        assert_eq!(
            replay,
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
        wal.clear().unwrap();
        assert!(Wal::open(&db).unwrap().1.is_empty());
        std::fs::remove_dir_all(dir).ok();
    }
}
