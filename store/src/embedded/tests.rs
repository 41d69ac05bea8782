//! The embedded store's files are private, and its writers never hold up
//! the async runtime they are called from.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use crate::Store;

#[tokio::test]
async fn the_data_directory_and_its_files_are_the_owners_alone() {
    let dir = std::env::temp_dir().join(format!("weft-private-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    let file = data.join("weft.redb");
    drop(super::EmbeddedStore::open(&file).unwrap());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "the data directory");
    assert_eq!(mode(&file), 0o600, "the store file");
    assert_eq!(mode(&data.join("weft.redb.wal")), 0o600, "its log");
    // An existing directory and store are made private too.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(super::EmbeddedStore::open(&file).unwrap());
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&file), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A quick write finds the log's lock held (by a big write on a slow disk,
/// say): it awaits it without blocking the runtime's thread, so the
/// runtime's other tasks go on. On a runtime of one thread, the task that
/// lets the lock go can only run if the write did not take the thread.
#[tokio::test(flavor = "current_thread")]
async fn a_write_that_finds_the_log_busy_leaves_the_runtime_free() {
    let dir = std::env::temp_dir().join(format!("weft-busy-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = super::EmbeddedStore::open(&dir.join("weft.redb")).unwrap();
    let (held, is_held) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let inner = store.inner.clone();
    let holder = std::thread::spawn(move || {
        let _log = inner.log.blocking_lock();
        held.send(()).unwrap();
        // Let go when told, or on its own after a while: a write that took
        // the runtime's thread would otherwise wait here forever.
        released.recv_timeout(Duration::from_secs(10)).is_ok()
    });
    is_held.recv().unwrap();
    let writer = tokio::spawn({
        let store = store.clone();
        async move { store.put("k", b"v".to_vec(), None).await }
    });
    // The writer runs first and must give the thread back.
    tokio::task::yield_now().await;
    // (Gone already if the holder gave up waiting.)
    let _ = release.send(());
    let revision = writer.await.unwrap().unwrap();
    assert!(
        holder.join().unwrap(),
        "the write held the runtime's only thread until the lock was let go"
    );
    assert_eq!(store.get("k").await.unwrap().unwrap().value, b"v");
    assert!(revision > 0);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A write makes watch events only for keys some watch follows: a big
/// value under no watched prefix is not copied into an event nobody
/// reads. A watch's prefix stops being followed once the watch is gone.
#[tokio::test]
async fn writes_make_events_only_for_watched_prefixes() {
    let dir = std::env::temp_dir().join(format!("weft-watched-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = super::EmbeddedStore::open(&dir.join("weft.redb")).unwrap();
    let watched = store.inner.watched.clone();
    assert!(!watched.covers("runs/1"));
    let mut events = store.watch("leader/").await.unwrap();
    let mut kept = store.inner.changes.subscribe();
    assert!(watched.covers("leader/now") && !watched.covers("runs/1"));
    store.put("runs/1", vec![7; 1 << 20], None).await.unwrap();
    store.put("leader/now", b"me".to_vec(), None).await.unwrap();
    // The only event made is the watched key's.
    match kept.recv().await.unwrap() {
        crate::WatchEvent::Put(entry) => assert_eq!(entry.key, "leader/now"),
        other => panic!("{other:?}"),
    }
    assert!(kept.try_recv().is_err());
    match events.recv().await.unwrap() {
        crate::WatchEvent::Put(entry) => assert_eq!(entry.value, b"me"),
        other => panic!("{other:?}"),
    }
    drop(events);
    // The watch notices its reader gone at its next look (every 100 ms).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while watched.covers("leader/now") {
        assert!(
            std::time::Instant::now() < deadline,
            "the prefix is still followed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Forgetting many runs at once (retention) costs a write of the log per
/// batch of prefixes, not one per prefix: 200 prefixes, 4 writes.
#[tokio::test]
async fn many_prefixes_are_deleted_in_a_few_writes() {
    let (dir, store) = quiet_store("delete-prefixes");
    let prefixes: Vec<String> = (0..200).map(|i| format!("runs/{i}/")).collect();
    for prefix in &prefixes {
        let writes = vec![
            (format!("{prefix}record"), b"r".to_vec()),
            (format!("{prefix}events/1"), b"e".to_vec()),
        ];
        store.put_all(writes, None).await.unwrap();
    }
    let before = store.stats().writes;
    store.delete_prefixes(&prefixes, None).await.unwrap();
    let writes = store.stats().writes - before;
    assert!(writes <= 4, "{writes} writes for 200 prefixes");
    assert_eq!(
        writes,
        prefixes.len().div_ceil(super::PREFIXES_PER_DELETION) as u64,
        "one write per batch of {} prefixes",
        super::PREFIXES_PER_DELETION
    );
    assert!(store.scan_keys("runs/").await.unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh store in a directory of its own, whose database takes nothing
/// until it is flushed or closed.
fn quiet_store(name: &str) -> (std::path::PathBuf, super::EmbeddedStore) {
    let dir = std::env::temp_dir().join(format!("weft-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = super::EmbeddedStore::open_configured(
        &dir.join("weft.redb"),
        super::Flush::Every(Duration::from_secs(3600)),
        super::CommitPolicy {
            after: Duration::from_secs(3600),
            bytes: usize::MAX,
        },
    )
    .unwrap();
    (dir, store)
}

/// The files in the store's values directory, by name, with their sizes.
fn value_files(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir.join("weft.redb.values"))
        .unwrap()
        .map(|item| {
            let item = item.unwrap();
            let name = item.file_name().into_string().unwrap();
            (name, item.metadata().unwrap().len())
        })
        .collect();
    files.sort();
    files
}

/// Bytes this process has dirtied for storage so far (`/proc/self/io`).
fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes: "))
        .unwrap()
        .parse()
        .unwrap()
}

/// The smallest value kept in a file of its own.
const BIG: usize = super::values::EXTERNAL_BYTES;

/// A value of some size whose bytes do not repeat in a short period.
fn big_value(size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|i| ((i as u64 * 2_654_435_761) >> 7) as u8 ^ seed)
        .collect()
}

/// A big value is written once: into a file of its own, while the log
/// and the database hold a few bytes that refer to it. Before, a 4 MiB
/// value was appended to the log and written again into the database's
/// pages at its commit (more than twice its size dirtied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_value_is_written_once_into_a_file_of_its_own() {
    let (dir, store) = quiet_store("value-once");
    let value = big_value(4 << 20, 1);
    store.put("small", b"s".to_vec(), None).await.unwrap();
    store.flush().await.unwrap();
    let log = dir.join("weft.redb.wal");
    let (log_before, db_before) = (
        std::fs::metadata(&log).unwrap().len()
            + std::fs::metadata(dir.join("weft.redb.wal-2"))
                .unwrap()
                .len(),
        std::fs::metadata(dir.join("weft.redb")).unwrap().len(),
    );
    let before = written_bytes();
    store.put("runs/big", value.clone(), None).await.unwrap();
    let files = value_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].1, value.len() as u64);
    let log_after = std::fs::metadata(&log).unwrap().len()
        + std::fs::metadata(dir.join("weft.redb.wal-2"))
            .unwrap()
            .len();
    assert!(
        log_after - log_before < 1024,
        "the log took {} bytes for a reference",
        log_after - log_before
    );
    // Read back from memory, then from the database after its commit.
    assert_eq!(store.get("runs/big").await.unwrap().unwrap().value, value);
    store.flush().await.unwrap();
    let dirtied = written_bytes() - before;
    let db_grew = std::fs::metadata(dir.join("weft.redb")).unwrap().len() - db_before;
    assert!(
        db_grew < 1 << 20,
        "the database grew by {db_grew} bytes for a 4 MiB value kept apart"
    );
    assert!(
        dirtied < value.len() as u64 + (1 << 20),
        "{dirtied} bytes written for a value of {}",
        value.len()
    );
    assert_eq!(store.get("runs/big").await.unwrap().unwrap().value, value);
    let scanned = store.scan("runs/").await.unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].value, value);
    // And after the store is opened again.
    drop(store);
    let store = super::EmbeddedStore::open(&dir.join("weft.redb")).unwrap();
    assert_eq!(store.get("runs/big").await.unwrap().unwrap().value, value);
    assert_eq!(store.get("small").await.unwrap().unwrap().value, b"s");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A big value's file goes once the database has taken what replaced or
/// removed its key, not before (a crash before that commit replays the
/// log over the database, which may still refer to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_or_removed_value_s_file_goes_once_the_database_has_the_change() {
    let (dir, store) = quiet_store("value-replaced");
    store.put("k", big_value(BIG, 1), None).await.unwrap();
    store.flush().await.unwrap();
    let first = value_files(&dir);
    assert_eq!(first.len(), 1);
    let second = big_value(BIG + 1000, 2);
    store.put("k", second.clone(), None).await.unwrap();
    assert_eq!(
        value_files(&dir).len(),
        2,
        "the old file stays until the commit"
    );
    assert_eq!(store.get("k").await.unwrap().unwrap().value, second);
    store.flush().await.unwrap();
    let now = value_files(&dir);
    assert_eq!(now.len(), 1);
    assert_ne!(now[0].0, first[0].0, "the first value's file went");
    assert_eq!(now[0].1, BIG as u64 + 1000);
    // A small value over a big one: the big one's file goes too.
    store.put("k", b"small".to_vec(), None).await.unwrap();
    store.flush().await.unwrap();
    assert!(value_files(&dir).is_empty());
    // Written and removed between two commits: gone at the next.
    store.put("a/1", big_value(BIG, 3), None).await.unwrap();
    store.put("a/2", big_value(BIG, 4), None).await.unwrap();
    store.delete_prefix("a/", None).await.unwrap();
    assert_eq!(value_files(&dir).len(), 2);
    store.flush().await.unwrap();
    assert!(value_files(&dir).is_empty());
    // A create that finds its key writes no file.
    store.put("c", b"here".to_vec(), None).await.unwrap();
    assert_eq!(
        store.create("c", big_value(BIG, 5), None).await.unwrap(),
        None
    );
    assert!(value_files(&dir).is_empty());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The log holds writes the database has not taken (as after `kill -9`);
/// a frame whose value's file the machine lost ends the replay there, as
/// a torn frame does, and files no key refers to are deleted on open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_whose_value_file_was_lost_ends_the_replay() {
    let (dir, store) = quiet_store("value-lost");
    let kept = big_value(BIG, 1);
    store.put("1", kept.clone(), None).await.unwrap();
    store.put("2", b"small".to_vec(), None).await.unwrap();
    store.put("3", big_value(BIG, 2), None).await.unwrap();
    store.put("4", b"after".to_vec(), None).await.unwrap();
    let files = value_files(&dir);
    assert_eq!(files.len(), 2);
    // The process ends with its writes in the log alone: what it kept in
    // memory for the database is dropped, not committed.
    {
        let mut log = store.inner.log.lock().await;
        log.pending = Default::default();
    }
    drop(store);
    // The machine lost the second value's file (it was never synced).
    std::fs::write(dir.join("weft.redb.values").join(&files[1].0), b"torn").unwrap();
    // And a file that no frame refers to (a write that failed).
    std::fs::write(dir.join("weft.redb.values").join("00000000000000ff"), b"x").unwrap();
    let store = super::EmbeddedStore::open(&dir.join("weft.redb")).unwrap();
    assert_eq!(store.get("1").await.unwrap().unwrap().value, kept);
    assert_eq!(store.get("2").await.unwrap().unwrap().value, b"small");
    assert!(store.get("3").await.unwrap().is_none(), "its file was lost");
    assert!(
        store.get("4").await.unwrap().is_none(),
        "what follows a lost frame was never promised"
    );
    assert_eq!(value_files(&dir), vec![files[0].clone()]);
    // New writes go on after it, and their files do not reuse a number.
    store.put("5", big_value(BIG, 3), None).await.unwrap();
    let names: Vec<String> = value_files(&dir).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 2);
    assert!(names[1].as_str() > "00000000000000ff", "{names:?}");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A value's file deleted outside the store: a read says which key and
/// which file, and the process goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_file_deleted_outside_the_store_is_named_when_read() {
    let (dir, store) = quiet_store("value-deleted");
    store
        .put("runs/big", big_value(BIG, 1), None)
        .await
        .unwrap();
    let files = value_files(&dir);
    let file = dir.join("weft.redb.values").join(&files[0].0);
    std::fs::remove_file(&file).unwrap();
    let error = store.get("runs/big").await.unwrap_err().to_string();
    assert!(
        error.contains("'runs/big'") && error.contains(&file.display().to_string()),
        "{error}"
    );
    let error = store.scan("runs/").await.unwrap_err().to_string();
    assert!(
        error.contains("'runs/big'") && error.contains("is missing"),
        "{error}"
    );
    store.put("after", b"fine".to_vec(), None).await.unwrap();
    assert_eq!(store.get("after").await.unwrap().unwrap().value, b"fine");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The database's snapshot is kept open between commits (reads do not
/// open one each): the pages a commit frees are reused a commit later,
/// so a key rewritten across many commits keeps the file small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rewritten_across_many_commits_keeps_the_database_small() {
    let (dir, store) = quiet_store("snapshot-pages");
    for round in 0..300u32 {
        let value = big_value(20_000, round as u8);
        store.put("runs/k", value.clone(), None).await.unwrap();
        store
            .put(&format!("runs/small/{}", round % 10), b"x".to_vec(), None)
            .await
            .unwrap();
        store.flush().await.unwrap();
        assert_eq!(store.get("runs/k").await.unwrap().unwrap().value, value);
        assert_eq!(
            store.scan("runs/small/").await.unwrap().len(),
            10.min(round as usize + 1)
        );
    }
    let size = std::fs::metadata(dir.join("weft.redb")).unwrap().len();
    assert!(
        size < 1 << 20,
        "the database grew to {size} bytes for 20 KB rewritten 300 times"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
