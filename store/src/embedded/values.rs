//! Big values kept beside the database, each in a file of its own, so that
//! a big value is written once.
//!
//! A value of [`EXTERNAL_BYTES`] (1 MiB) or more would otherwise be written twice
//! and churn the database: once into the log, then again into redb's
//! pages at the next commit (redb allocates pages by powers of two, so a
//! 10 MB value was a 16 MiB write, zero-filled and checksummed, after the
//! log's 10 MB). Here the value is written once, into a file of the
//! values directory beside the database (`weft.redb.values/`), and the key's
//! record — in the log, in memory, in the database — holds a
//! [`Reference`] to it: the file's number, the value's length and its
//! CRC-32.
//!
//! **Durability.** A value's file is written before its write's log frame
//! is appended, so it survives `kill -9` as the frame does. Each sync of
//! the log syncs the value files written since the last sync first (and
//! the directory, which names them), so a synced frame never refers to a
//! file the machine may lose. A frame appended after the last sync may be
//! lost with the machine, and so may its file; on open, a replayed frame
//! whose file is missing, short or does not match its checksum ends the
//! replay there, as a torn frame does: what follows was never promised to
//! outlive the machine.
//!
//! **Deletion.** A file is deleted once no stored state can refer to it:
//! after the database has durably taken the write that replaced or removed
//! its key (the log frames before it are never replayed again). A reader
//! that found the old reference just before that commit finds the file
//! gone and reads the key again ([`Missing`]). On open, files no record
//! refers to (a write that failed, or one whose frame was lost) are deleted.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::StoreError;

/// Values this large or larger are kept in files of their own. Below it
/// the log's one shared fsync per flush interval is cheaper than a file's
/// creation, fsync and deletion per value (many runs writing fields of a
/// few hundred KB would each cost the flush a sync of its own), and the
/// database's rounding of a record up to a power of two costs less than the
/// value's size again.
pub(crate) const EXTERNAL_BYTES: usize = 1 << 20;

/// A reference's size in a record: the file's number, the value's length
/// (8 bytes each, little-endian) and its CRC-32 (4 bytes).
pub(crate) const REFERENCE_BYTES: usize = 20;

/// Where a big value is: its file and what it must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reference {
    /// The file's number in the values directory.
    pub(crate) id: u64,
    /// The value's length.
    pub(crate) len: u64,
    /// The value's CRC-32.
    pub(crate) crc: u32,
}

impl Reference {
    pub(crate) fn encode(&self) -> [u8; REFERENCE_BYTES] {
        let mut out = [0u8; REFERENCE_BYTES];
        out[..8].copy_from_slice(&self.id.to_le_bytes());
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..].copy_from_slice(&self.crc.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; REFERENCE_BYTES] = bytes.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Some(Self {
            id: word(0),
            len: word(8),
            crc: u32::from_le_bytes(bytes[16..].try_into().expect("4 bytes")),
        })
    }
}

/// A big value's file was deleted while it was being read: its key was
/// rewritten and the database took the new record meanwhile. Reading the
/// key again finds the new one.
#[derive(Debug)]
pub(crate) struct Missing {
    /// The key whose value it is.
    pub(crate) key: String,
    /// The file that was not there.
    pub(crate) path: PathBuf,
}

/// A value file just written: kept until the log is synced past it.
pub(crate) type Written = Arc<File>;

/// The directory of big values.
pub(crate) struct Values {
    dir: PathBuf,
    /// The next file's number.
    next: AtomicU64,
}

impl Values {
    /// The values directory beside the database at `db_path`, made if
    /// absent (private to its owner, as the data directory is).
    pub(crate) fn open(db_path: &Path) -> Result<Self, StoreError> {
        let mut name = db_path.as_os_str().to_owned();
        name.push(".values");
        let dir = PathBuf::from(name);
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|source| io(&dir, source))?;
        }
        let mut next = 1;
        for id in Self::listed(&dir)? {
            next = next.max(id + 1);
        }
        Ok(Self {
            dir,
            next: AtomicU64::new(next),
        })
    }

    /// The numbers of the files in the directory.
    fn listed(dir: &Path) -> Result<Vec<u64>, StoreError> {
        let mut ids = Vec::new();
        for item in std::fs::read_dir(dir).map_err(|source| io(dir, source))? {
            let item = item.map_err(|source| io(dir, source))?;
            if let Some(id) = item
                .file_name()
                .to_str()
                .and_then(|name| u64::from_str_radix(name, 16).ok())
            {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:016x}"))
    }

    /// Writes `value` into a new file (in the operating system's hands
    /// when this returns: safe from `kill -9`, not yet synced).
    pub(crate) fn write(&self, value: &[u8]) -> Result<(Reference, Written), StoreError> {
        use std::os::unix::fs::OpenOptionsExt;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.path(id);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| io(&path, source))?;
        if let Err(source) = file.write_all(value) {
            let _ = std::fs::remove_file(&path);
            return Err(io(&path, source));
        }
        let reference = Reference {
            id,
            len: value.len() as u64,
            crc: crc32fast::hash(value),
        };
        Ok((reference, Arc::new(file)))
    }

    /// Syncs files written since the last sync, then the directory that
    /// names them.
    pub(crate) fn sync(&self, written: &[Written]) -> Result<(), StoreError> {
        if written.is_empty() {
            return Ok(());
        }
        for file in written {
            file.sync_data().map_err(|source| io(&self.dir, source))?;
        }
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|source| io(&self.dir, source))
    }

    /// The value `reference` names: [`Missing`] if its file is gone (its
    /// key was rewritten meanwhile), an error if it does not hold what the
    /// reference says.
    pub(crate) fn read(
        &self,
        key: &str,
        reference: &Reference,
    ) -> Result<Result<Vec<u8>, Missing>, StoreError> {
        let path = self.path(reference.id);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err(Missing {
                    key: key.to_owned(),
                    path,
                }));
            }
            Err(source) => return Err(io(&path, source)),
        };
        // Read into room made for it, not zero-filled first.
        let mut value = Vec::with_capacity(reference.len as usize);
        file.read_to_end(&mut value)
            .map_err(|source| io(&path, source))?;
        if value.len() as u64 != reference.len || crc32fast::hash(&value) != reference.crc {
            return Err(StoreError::Corrupt {
                key: key.to_owned(),
                reason: format!(
                    "its value's file {} holds {} bytes that do not match the {} it was written with",
                    path.display(),
                    value.len(),
                    reference.len
                ),
            });
        }
        Ok(Ok(value))
    }

    /// Whether `reference`'s file is there and holds what it should: a
    /// replayed frame is kept only if every value it refers to is.
    pub(crate) fn holds(&self, reference: &Reference) -> bool {
        matches!(self.read("", reference), Ok(Ok(_)))
    }

    /// Deletes the files of values no record refers to any more.
    pub(crate) fn delete(&self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            let path = self.path(id);
            if let Err(error) = std::fs::remove_file(&path)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(file = %path.display(), %error, "a replaced value's file stays");
            }
        }
    }

    /// Deletes every file not in `kept` (on open: what failed writes and
    /// lost frames left). Returns how many were deleted.
    pub(crate) fn keep_only(&self, kept: &HashSet<u64>) -> Result<usize, StoreError> {
        let unused: Vec<u64> = Self::listed(&self.dir)?
            .into_iter()
            .filter(|id| !kept.contains(id))
            .collect();
        let count = unused.len();
        self.delete(unused);
        Ok(count)
    }
}

fn io(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}
