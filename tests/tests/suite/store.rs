//! One test suite for both store backends (issue #9): the embedded redb
//! file and a real etcd server started for the test.

use std::time::Duration;

use weft_store::{
    CommitPolicy, EmbeddedStore, EtcdStore, Fence, Flush, Store, StoreError, WatchEvent, chunks,
};
use weft_tests::etcd::TestEtcd;

/// Keys of one run of the suite, so runs never meet.
fn key(prefix: &str, name: &str) -> String {
    format!("{prefix}/{name}")
}

async fn reads_and_writes(store: &impl Store, p: &str) {
    assert_eq!(store.get(&key(p, "a")).await.unwrap(), None);
    let first = store.put(&key(p, "a"), b"1".to_vec(), None).await.unwrap();
    let second = store.put(&key(p, "a"), b"2".to_vec(), None).await.unwrap();
    assert!(second > first, "revisions increase");
    let entry = store.get(&key(p, "a")).await.unwrap().expect("present");
    assert_eq!(entry.value, b"2");
    assert_eq!(entry.create_revision, first, "created once");
    assert_eq!(entry.mod_revision, second);
    store
        .put(&key(p, "b/1"), b"x".to_vec(), None)
        .await
        .unwrap();
    store
        .put(&key(p, "b/2"), b"y".to_vec(), None)
        .await
        .unwrap();
    store.put(&key(p, "c"), b"z".to_vec(), None).await.unwrap();
    let under_b: Vec<String> = store
        .scan(&key(p, "b/"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        under_b,
        [key(p, "b/1"), key(p, "b/2")],
        "a prefix, in key order"
    );
    assert_eq!(
        store.scan_keys(&key(p, "b/")).await.unwrap(),
        under_b,
        "the same keys, without their values"
    );
    let together = store
        .put_all(
            vec![(key(p, "t1"), b"1".to_vec()), (key(p, "t2"), b"2".to_vec())],
            None,
        )
        .await
        .unwrap();
    let t1 = store.get(&key(p, "t1")).await.unwrap().unwrap();
    let t2 = store.get(&key(p, "t2")).await.unwrap().unwrap();
    assert_eq!((t1.value, t2.value), (b"1".to_vec(), b"2".to_vec()));
    assert_eq!(t2.mod_revision, together);
    store.delete_prefix(&key(p, "b/"), None).await.unwrap();
    assert!(store.scan(&key(p, "b/")).await.unwrap().is_empty());
    assert!(
        store.get(&key(p, "c")).await.unwrap().is_some(),
        "other keys stay"
    );
}

async fn conditional_writes(store: &impl Store, p: &str) {
    let k = key(p, "cas");
    assert!(
        store
            .compare_and_put(&k, b"1".to_vec(), 0, None)
            .await
            .unwrap(),
        "absent: written"
    );
    assert!(
        !store
            .compare_and_put(&k, b"2".to_vec(), 0, None)
            .await
            .unwrap(),
        "present now"
    );
    let at = store.get(&k).await.unwrap().unwrap().mod_revision;
    assert!(
        store
            .compare_and_put(&k, b"3".to_vec(), at, None)
            .await
            .unwrap()
    );
    assert!(
        !store
            .compare_and_put(&k, b"4".to_vec(), at, None)
            .await
            .unwrap(),
        "stale"
    );
    assert_eq!(store.get(&k).await.unwrap().unwrap().value, b"3");

    let created = store
        .create(&key(p, "once"), b"a".to_vec(), None)
        .await
        .unwrap();
    assert!(created.is_some());
    assert_eq!(
        store
            .create(&key(p, "once"), b"b".to_vec(), None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.get(&key(p, "once")).await.unwrap().unwrap().value,
        b"a"
    );
}

/// This coordinator's leadership: its key (`<p>/leader`), created now,
/// and the fence of its term.
async fn lead(store: &impl Store, p: &str) -> (String, Fence) {
    let leader = key(p, "leader");
    let won = store
        .create(&leader, b"me".to_vec(), None)
        .await
        .unwrap()
        .unwrap();
    let fence = Fence {
        key: leader.clone(),
        revision: won,
    };
    (leader, fence)
}

async fn fences(store: &impl Store, p: &str) {
    let (leader, fence) = lead(store, p).await;
    store
        .put(&key(p, "state"), b"1".to_vec(), Some(&fence))
        .await
        .unwrap();
    // Another coordinator wins after this one lost the key.
    store.delete_prefix(&leader, None).await.unwrap();
    let theirs = store
        .create(&leader, b"them".to_vec(), None)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(theirs, fence.revision);
    let late = store
        .put(&key(p, "state"), b"stale".to_vec(), Some(&fence))
        .await;
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    let late = store
        .compare_and_put(&key(p, "state"), b"stale".to_vec(), 0, Some(&fence))
        .await;
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    let late = store
        .put_all(vec![(key(p, "state"), b"stale".to_vec())], Some(&fence))
        .await;
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    let late = store.delete_prefix(&key(p, "state"), Some(&fence)).await;
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    assert_eq!(
        store.get(&key(p, "state")).await.unwrap().unwrap().value,
        b"1"
    );
    let current = Fence {
        key: leader,
        revision: theirs,
    };
    store
        .put(&key(p, "state"), b"2".to_vec(), Some(&current))
        .await
        .unwrap();
}

async fn leases_and_watches(store: &impl Store, p: &str) {
    let mut changes = store.watch(&key(p, "w/")).await.unwrap();
    let lease = store.grant_lease(Duration::from_secs(2)).await.unwrap();
    let leader = key(p, "w/leader");
    store
        .create(&leader, b"me".to_vec(), Some(lease))
        .await
        .unwrap()
        .unwrap();
    store
        .put(&key(p, "other"), b"not watched".to_vec(), None)
        .await
        .unwrap();
    match next(&mut changes).await {
        WatchEvent::Put(entry) => assert_eq!(entry.key, leader),
        other => panic!("{other:?}"),
    }
    assert!(store.keep_alive(lease).await.unwrap());
    // Not kept alive any more: the key goes, and the watch says so.
    assert_eq!(
        next(&mut changes).await,
        WatchEvent::Delete {
            key: leader.clone()
        }
    );
    assert_eq!(store.get(&leader).await.unwrap(), None);
    assert!(!store.keep_alive(lease).await.unwrap(), "the lease is gone");
    let lease = store.grant_lease(Duration::from_secs(30)).await.unwrap();
    store
        .create(&leader, b"again".to_vec(), Some(lease))
        .await
        .unwrap()
        .unwrap();
    let _ = next(&mut changes).await;
    store.revoke(lease).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        WatchEvent::Delete {
            key: leader.clone()
        }
    );
}

/// The next change a watch reports (waiting for it, within reason).
async fn next(changes: &mut tokio::sync::mpsc::Receiver<WatchEvent>) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(20), changes.recv())
        .await
        .expect("a change arrives")
        .expect("the watch is open")
}

async fn large_values(store: &impl Store, p: &str) {
    // Split across keys where one key holds less (etcd); a few MiB in one
    // value where the store takes more (redb).
    let size = (store.max_value_bytes() * 2 + 12_345).min(3 << 20);
    let big: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    chunks::put(store, &key(p, "big"), &big, None)
        .await
        .unwrap();
    chunks::put(store, &key(p, "small"), b"s", None)
        .await
        .unwrap();
    assert_eq!(
        chunks::get(store, &key(p, "big")).await.unwrap().as_deref(),
        Some(&big[..])
    );
    let all = chunks::scan(store, &key(p, "")).await.unwrap();
    let names: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains(&key(p, "big").as_str()) && names.contains(&key(p, "small").as_str()));
    assert!(names.iter().all(|k| !chunks::is_chunk_key(k)), "{names:?}");
    let huge = vec![0u8; chunks::MAX_TOTAL_BYTES + 1];
    let refused = chunks::put(store, &key(p, "huge"), &huge, None).await;
    assert!(
        matches!(refused, Err(StoreError::TooLarge { .. })),
        "never truncated"
    );
}

/// Many runs forgotten at once: every key under each prefix goes, in
/// more transactions than one (300 prefixes: etcd takes 128 operations a
/// transaction, the embedded store 64 prefixes), and nothing else does; a
/// fence no longer held refuses them all.
async fn many_prefixes(store: &impl Store, p: &str) {
    let runs: Vec<String> = (0..300).map(|i| key(p, &format!("runs/{i:03}/"))).collect();
    for (i, run) in runs.iter().enumerate() {
        let writes = ["record", "events/1", "fields/a"]
            .iter()
            .map(|name| (format!("{run}{name}"), i.to_string().into_bytes()))
            .collect();
        store.put_all(writes, None).await.unwrap();
    }
    // A run whose id extends another's (`runs/0010`) is not under its
    // prefix (`runs/001/`).
    let kept = key(p, "runs/0010/record");
    store.put(&kept, b"kept".to_vec(), None).await.unwrap();
    let (leader, fence) = lead(store, p).await;
    let (gone, stay) = runs.split_at(250);
    store.delete_prefixes(gone, Some(&fence)).await.unwrap();
    assert_eq!(
        store.scan_keys(&key(p, "runs/")).await.unwrap().len(),
        stay.len() * 3 + 1,
        "every key of the 250 runs went; the other 50 and the look-alike stay"
    );
    assert!(
        store
            .get(&key(p, "runs/299/fields/a"))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(store.get(&kept).await.unwrap().unwrap().value, b"kept");
    store.delete_prefix(&leader, None).await.unwrap();
    let late = store.delete_prefixes(stay, Some(&fence)).await;
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    assert_eq!(
        store.scan_keys(&key(p, "runs/")).await.unwrap().len(),
        stay.len() * 3 + 1,
        "a refused deletion deletes nothing"
    );
    store.delete_prefixes(&[], None).await.unwrap();
}

/// A scan says the revision it read at: every write acknowledged before
/// it is at or below that revision, every write after it above; a write
/// under another prefix moves it too (one revision for the whole store).
async fn scans_at_a_revision(store: &impl Store, p: &str) {
    let (empty, at_first) = store.scan_at(&key(p, "group/")).await.unwrap();
    assert!(empty.is_empty());
    let member = store
        .put(&key(p, "group/m1"), b"1".to_vec(), None)
        .await
        .unwrap();
    assert!(member > at_first, "{member} after {at_first}");
    let (seen, at) = store.scan_at(&key(p, "group/")).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].create_revision, member);
    assert!(at >= member, "read at {at}, the write was {member}");
    let elsewhere = store
        .put(&key(p, "other"), b"x".to_vec(), None)
        .await
        .unwrap();
    assert!(elsewhere > at);
    let (again, later) = store.scan_at(&key(p, "group/")).await.unwrap();
    assert_eq!(again, seen, "nothing changed under the prefix");
    assert!(
        later >= elsewhere,
        "read at {later}, after a write at {elsewhere}"
    );
    // A lease's keys going is a change of its own: a read without them is
    // newer than one with them.
    let lease = store.grant_lease(Duration::from_secs(30)).await.unwrap();
    store
        .create(&key(p, "group/m2"), b"2".to_vec(), Some(lease))
        .await
        .unwrap()
        .expect("absent");
    let (with, at_with) = store.scan_at(&key(p, "group/")).await.unwrap();
    assert_eq!(with.len(), 2);
    store.revoke(lease).await.unwrap();
    let (without, at_without) = store.scan_at(&key(p, "group/")).await.unwrap();
    assert_eq!(without, seen, "the lease's key went with it");
    assert!(
        at_without > at_with,
        "read at {at_without} without the lease's key, at {at_with} with it"
    );
}

async fn suite(store: &impl Store, p: &str) {
    reads_and_writes(store, &key(p, "rw")).await;
    scans_at_a_revision(store, &key(p, "at")).await;
    many_prefixes(store, &key(p, "many")).await;
    conditional_writes(store, &key(p, "cond")).await;
    fences(store, &key(p, "fence")).await;
    large_values(store, &key(p, "large")).await;
    leases_and_watches(store, &key(p, "lease")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_passes_the_suite_and_keeps_what_it_wrote() {
    let dir = std::env::temp_dir().join(format!("weft-store-{}", std::process::id()));
    let path = dir.join("store.redb");
    {
        let store = EmbeddedStore::open(&path).unwrap();
        let second = EmbeddedStore::open(&path)
            .err()
            .expect("one owner at a time");
        assert!(
            second.to_string().contains("is in use by another process"),
            "{second}"
        );
        suite(&store, "t").await;
        store
            .put("kept", b"across opens".to_vec(), None)
            .await
            .unwrap();
        let lease = store.grant_lease(Duration::from_secs(60)).await.unwrap();
        store
            .create("leased", b"owner dies".to_vec(), Some(lease))
            .await
            .unwrap();
    }
    // Reopened, as by a restarted coordinator: writes are there, and keys
    // of the dead owner's leases are gone.
    let store = EmbeddedStore::open(&path).unwrap();
    assert_eq!(
        store.get("kept").await.unwrap().unwrap().value,
        b"across opens"
    );
    assert_eq!(store.get("leased").await.unwrap(), None);
    let next = store.put("kept", b"later".to_vec(), None).await.unwrap();
    assert!(next > 1, "revisions continue");
    std::fs::remove_dir_all(dir).ok();
}

/// The suite again with the database taking a batch at every flush (every
/// millisecond), so reads and conditional writes meet keys in the batch
/// being written, in the database and in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_passes_the_suite_while_it_commits_all_the_time() {
    let dir = std::env::temp_dir().join(format!("weft-store-busy-{}", std::process::id()));
    let path = dir.join("store.redb");
    let policy = CommitPolicy {
        after: Duration::ZERO,
        ..CommitPolicy::default()
    };
    {
        let flush = Flush::Every(Duration::from_millis(1));
        let store = EmbeddedStore::open_configured(&path, flush, policy).unwrap();
        suite(&store, "t").await;
        store
            .put("kept", b"committed".to_vec(), None)
            .await
            .unwrap();
        assert!(store.stats().commits > 0, "{:?}", store.stats());
    }
    let store = EmbeddedStore::open(&path).unwrap();
    assert_eq!(
        store.get("kept").await.unwrap().unwrap().value,
        b"committed"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Many runs checkpointing their waves at once cost a log append each, and
/// together one sync of the log and one database commit: none of them
/// waits on the disk, every read sees every write meanwhile (from memory),
/// and the store opened again has them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_of_many_runs_costs_one_sync_and_one_commit() {
    let dir = std::env::temp_dir().join(format!("weft-store-group-{}", std::process::id()));
    let path = dir.join("store.redb");
    let (runs, waves) = (40, 25);
    {
        // No flush round during the test: the flush is asked for below.
        let flush = Flush::Every(Duration::from_secs(3600));
        let store = EmbeddedStore::open_configured(&path, flush, CommitPolicy::default()).unwrap();
        let mut checkpoints = tokio::task::JoinSet::new();
        for run in 0..runs {
            let store = store.clone();
            checkpoints.spawn(async move {
                for wave in 0..waves {
                    let writes = vec![
                        (
                            format!("runs/{run:02}/record"),
                            format!("wave {wave}").into_bytes(),
                        ),
                        (format!("runs/{run:02}/fields/f"), vec![b'x'; 100 * wave]),
                    ];
                    store.put_all(writes, None).await.unwrap();
                }
            });
        }
        while let Some(done) = checkpoints.join_next().await {
            done.unwrap();
        }
        let stats = store.stats();
        assert_eq!(stats.writes, (runs * waves) as u64);
        assert_eq!(
            (stats.log_syncs, stats.commits),
            (0, 0),
            "nothing waited on the disk"
        );
        // Reads see the writes kept in memory, removals included.
        let run = store.scan("runs/07/").await.unwrap();
        assert_eq!(run.len(), 2);
        assert_eq!(run[1].value, b"wave 24");
        store.delete_prefix("runs/07/", None).await.unwrap();
        assert!(store.scan("runs/07/").await.unwrap().is_empty());
        assert_eq!(store.get("runs/07/record").await.unwrap(), None);
        store.flush().await.unwrap();
        let stats = store.stats();
        assert_eq!((stats.log_syncs, stats.commits), (1, 1), "{stats:?}");
        // Read from the database now, the same.
        assert!(store.scan("runs/07/").await.unwrap().is_empty());
        assert_eq!(
            store
                .get("runs/08/fields/f")
                .await
                .unwrap()
                .unwrap()
                .value
                .len(),
            100 * (waves - 1)
        );
    }
    let store = EmbeddedStore::open(&path).unwrap();
    let records = store.scan("runs/").await.unwrap();
    assert_eq!(records.len(), 2 * (runs - 1));
    assert!(
        records
            .iter()
            .filter(|e| e.key.ends_with("/record"))
            .all(|e| e.value == b"wave 24")
    );
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_store_passes_the_suite() {
    let etcd = TestEtcd::start().await.expect("etcd runs");
    let store = EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap();
    suite(&store, "t").await;
}

/// Many runs checkpointing at once under the leader's fence share etcd
/// transactions, and each write still gets its own answer: its revision,
/// or, once the fence is gone, the refusal — for every write of the
/// batch, none of which lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_store_sends_many_runs_writes_in_shared_transactions() {
    let etcd = TestEtcd::start().await.expect("etcd runs");
    let store = EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap();
    let lease = store.grant_lease(Duration::from_secs(60)).await.unwrap();
    let won = store
        .create("leader", b"me".to_vec(), Some(lease))
        .await
        .unwrap();
    let fence = Fence {
        key: "leader".into(),
        revision: won.expect("the key was free"),
    };
    let (runs, waves) = (40, 10);
    let write_all = |prefix: &'static str, fence: Fence| {
        let mut writers = tokio::task::JoinSet::new();
        for run in 0..runs {
            let (store, fence) = (store.clone(), fence.clone());
            writers.spawn(async move {
                let mut answers = Vec::new();
                for wave in 0..waves {
                    let writes = vec![
                        (
                            format!("{prefix}/{run:02}/record"),
                            format!("wave {wave}").into_bytes(),
                        ),
                        (format!("{prefix}/{run:02}/fields/f"), vec![b'x'; 10 * wave]),
                    ];
                    answers.push(store.put_all(writes, Some(&fence)).await);
                }
                answers
            });
        }
        writers.join_all()
    };
    let answers: Vec<_> = write_all("runs", fence.clone())
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let stats = store.stats();
    eprintln!(
        "{} writes took {} transactions",
        stats.writes, stats.transactions
    );
    assert_eq!(stats.writes, (runs * waves) as u64);
    assert!(
        stats.transactions < stats.writes,
        "{} writes took {} transactions",
        stats.writes,
        stats.transactions
    );
    let records = store.scan("runs/").await.unwrap();
    assert_eq!(records.len(), 2 * runs);
    assert!(
        records
            .iter()
            .filter(|e| e.key.ends_with("/record"))
            .all(|e| e.value == b"wave 9")
    );
    // Deposed: every write is refused as fenced, and none lands.
    store.revoke(lease).await.unwrap();
    let answers: Vec<_> = write_all("stale", fence.clone())
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, Err(StoreError::Fenced { .. }))),
        "{answers:?}"
    );
    assert!(store.scan("stale/").await.unwrap().is_empty());
}

/// A request made while the only etcd member is down (restarting) waits
/// for it within the request's time, instead of failing at the first
/// refusal: members that cannot answer yet are asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_out_an_etcd_that_is_restarting() {
    let mut etcd = TestEtcd::start().await.expect("etcd runs");
    let store = EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap();
    store.put("kept", b"before".to_vec(), None).await.unwrap();
    etcd.kill().expect("etcd killed");
    // Asked while nothing listens; etcd comes back meanwhile.
    let reader = store.clone();
    let read = tokio::spawn(async move { reader.get("kept").await });
    etcd.start_again().await.expect("etcd starts again");
    let entry = read
        .await
        .unwrap()
        .expect("the read waited")
        .expect("the key");
    assert_eq!(entry.value, b"before");
}

/// Runs the `store-writer` helper (`mode`: `log`, `each` or `flushing`), kills it with
/// SIGKILL after some 300 acknowledged writes, and checks them all.
async fn acknowledged_writes_survive_kill_9(mode: &str) {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("weft-store-kill-{mode}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.redb");
    let mut child = std::process::Command::new(weft_tests::binary("store-writer"))
        .arg(&file)
        .arg(mode)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the helper starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = None;
    for line in lines.by_ref() {
        let n: u64 = line.unwrap().trim_start_matches("acked ").parse().unwrap();
        acked = Some(n);
        if n >= 300 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Acks printed before the kill landed count too.
    for line in lines {
        if let Ok(line) = line
            && let Ok(n) = line.trim_start_matches("acked ").parse::<u64>()
        {
            acked = Some(n);
        }
    }
    let acked = acked.expect("some writes were acknowledged");
    let store = EmbeddedStore::open(&file).unwrap();
    let kept = store.scan("k").await.unwrap();
    assert!(
        kept.len() as u64 > acked,
        "{} kept, {acked} acknowledged",
        kept.len()
    );
    for (n, entry) in kept.iter().enumerate().take(acked as usize + 1) {
        assert_eq!(entry.key, format!("k{n:06}"));
        // Every sixteenth value is big (over 1 MiB), as the helper writes it.
        let value = format!("value {n}");
        let value = if n % 16 == 0 {
            value.repeat(160_000)
        } else {
            value
        };
        assert_eq!(entry.value, value.into_bytes(), "k{n:06}");
    }
    assert!(
        kept.windows(2)
            .all(|w| w[0].mod_revision < w[1].mod_revision),
        "revisions replayed in order"
    );
    drop(store);
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn every_acknowledged_write_survives_kill_9_through_the_log() {
    acknowledged_writes_survive_kill_9("log").await;
}

#[tokio::test]
async fn every_acknowledged_write_survives_kill_9_with_an_fsync_per_write() {
    acknowledged_writes_survive_kill_9("each").await;
}

#[tokio::test]
async fn every_acknowledged_write_survives_kill_9_while_the_log_is_flushed() {
    acknowledged_writes_survive_kill_9("flushing").await;
}
