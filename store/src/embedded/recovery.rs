//! Opening the embedded store: the data directory made private, the
//! database file opened (waiting out a close in progress), the log's
//! frames from before a crash replayed into it, keys left under a lease by
//! the process before dropped, and the value files no key refers to
//! deleted — the files on disk brought to one consistent state before the
//! store takes its first write.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::records::{external_of, lease_of};
use super::values::Values;
use super::{APPLIED, COUNTERS, ENTRIES, backend};
use crate::StoreError;
use crate::wal::{Change, Wal};

/// A store's files, consistent and ready for writes.
pub(super) struct Recovered {
    pub(super) db: Database,
    pub(super) values: Values,
    /// The log, emptied into the database.
    pub(super) wal: Wal,
    /// The counters, as the database holds them now.
    pub(super) counters: BTreeMap<String, i64>,
    /// The last log frame, all of it in the database.
    pub(super) synced: u64,
}

/// Opens (or creates) the store's files at `path` and replays what its
/// log holds from before a crash.
pub(super) fn recover(path: &Path) -> Result<Recovered, StoreError> {
    // The data directory is the owner's alone (0700), and so are its
    // files (0600): runs hold states, inputs and bundles.
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(backend)?;
        // A directory this user does not own (a mounted volume whose
        // group it writes through, as Kubernetes' fsGroup makes) is
        // left as it is: its files are still private.
        if let Err(error) = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))
        {
            tracing::warn!(
                dir = %parent.display(),
                %error,
                "the data directory could not be made private (0700)"
            );
        }
    }
    let db = create_database(path)?;
    private(path).map_err(backend)?;
    let applied = match db.begin_read().map_err(backend)?.open_table(COUNTERS) {
        Ok(counters) => counters
            .get(APPLIED)
            .map_err(backend)?
            .map_or(0, |v| v.value()),
        Err(redb::TableError::TableDoesNotExist(_)) => 0,
        Err(other) => return Err(backend(other)),
    };
    let values = Values::open(path)?;
    let (mut wal, replay) = Wal::open(path, applied as u64, |changes| {
        changes.iter().all(|change| match change {
            Change::Put { record, .. } => {
                external_of(record).is_none_or(|reference| values.holds(&reference))
            }
            _ => true,
        })
    })
    .map_err(backend)?;
    let txn = db.begin_write().map_err(backend)?;
    let mut counters = BTreeMap::new();
    let mut referred = std::collections::HashSet::new();
    {
        let mut entries = txn.open_table(ENTRIES).map_err(backend)?;
        let mut stored = txn.open_table(COUNTERS).map_err(backend)?;
        for change in replay.changes {
            match change {
                Change::Put { key, record } => {
                    entries
                        .insert(key.as_str(), record.as_slice())
                        .map_err(backend)?;
                }
                Change::Remove { key } => {
                    entries.remove(key.as_str()).map_err(backend)?;
                }
                Change::Counter { name, value } => {
                    stored.insert(name.as_str(), value).map_err(backend)?;
                }
            }
        }
        stored
            .insert(APPLIED, replay.last as i64)
            .map_err(backend)?;
        for item in stored.iter().map_err(backend)? {
            let (name, value) = item.map_err(backend)?;
            counters.insert(name.value().to_owned(), value.value());
        }
        // Keys under a lease go (their owner is gone); the value files
        // the others refer to stay.
        let mut leased = Vec::new();
        for item in entries.iter().map_err(backend)? {
            let (key, record) = item.map_err(backend)?;
            if lease_of(record.value()) != 0 {
                leased.push(key.value().to_owned());
            } else if let Some(reference) = external_of(record.value()) {
                referred.insert(reference.id);
            }
        }
        for key in leased {
            entries.remove(key.as_str()).map_err(backend)?;
        }
    }
    txn.commit().map_err(backend)?;
    wal.clear().map_err(backend)?;
    // What failed writes, lost frames and replaced values left.
    let unused = values.keep_only(&referred)?;
    if unused > 0 {
        tracing::info!(files = unused, "deleted value files no key refers to");
    }
    Ok(Recovered {
        db,
        values,
        wal,
        counters,
        synced: replay.last,
    })
}

/// The database's page cache. redb's own default is a ceiling of 1 GiB,
/// which a coordinator filled a little more with every run it stored (the
/// pages a write touches stay cached): after 8,000 ten-node runs its
/// resident memory was 307 MB, against 264 MB with this cache. The store
/// is mostly written, and read back on recovery; this holds its B-tree's
/// inner pages many times over, and its tenth for writes holds what a
/// flush interval dirties.
const CACHE_BYTES: usize = 32 << 20;

/// How long opening waits for a store that is still closing: one just
/// dropped in this process can be held a moment longer by its flusher or a
/// watch finishing a pass.
const CLOSING_PATIENCE: Duration = Duration::from_secs(2);

/// Opens the database file, waiting out a close in progress; a file held
/// beyond that belongs to another owner.
fn create_database(path: &Path) -> Result<Database, StoreError> {
    let deadline = std::time::Instant::now() + CLOSING_PATIENCE;
    loop {
        match Database::builder().set_cache_size(CACHE_BYTES).create(path) {
            Ok(db) => return Ok(db),
            Err(redb::DatabaseError::DatabaseAlreadyOpen)
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::InUse(path.display().to_string()));
            }
            Err(other) => return Err(backend(other)),
        }
    }
}

/// Makes `path` readable and writable by its owner only.
fn private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}
