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
