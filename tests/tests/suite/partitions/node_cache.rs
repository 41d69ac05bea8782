//! The node cache across a partitioned group: two members' caches over one
//! real etcd, each following the store's copy. An answer one keeps is
//! found by the other (a step of a run in another partition takes it); one
//! it drops (evicted, as when it expires) goes from the other's memory
//! too; a large answer, split across keys, arrives whole.

use weft_coordinator::durable::Keeper;
use weft_coordinator::node_cache::{Answer, CacheLimits, NodeCache};

use super::*;

async fn member_cache(
    store: &AnyStore,
    max_bytes: u64,
    ended: &CancellationToken,
    tracker: &tokio_util::task::TaskTracker,
) -> NodeCache {
    let keeper = Keeper::new(store.clone(), None, ended.clone());
    let limits = CacheLimits {
        max_bytes,
        max_entry_bytes: 8 << 20,
    };
    let cache = NodeCache::kept(limits, keeper, ended, tracker)
        .await
        .expect("the cache is read");
    cache.follow(store.clone(), ended, tracker);
    cache
}

fn answer(writes: String, ttl: Duration) -> Answer {
    Answer {
        node: "n".into(),
        writes,
        output: None,
        run: "run-a".into(),
        ttl,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_members_node_caches_follow_each_other_through_the_store() {
    let etcd = TestEtcd::start().await.expect("etcd runs");
    let store = AnyStore::Etcd(EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap());
    let (ended, tracker) = (
        CancellationToken::new(),
        tokio_util::task::TaskTracker::new(),
    );
    // a keeps at most 4 MiB, b 64.
    let (a, b) = (
        member_cache(&store, 4 << 20, &ended, &tracker).await,
        member_cache(&store, 64 << 20, &ended, &tracker).await,
    );

    // Kept by one, found by the other; in its namespace only.
    a.keep(
        "team",
        "entry-1".into(),
        answer(r#"{"x": 1}"#.into(), Duration::from_secs(60)),
    )
    .unwrap();
    weft_tests::wait_until(weft_tests::PATIENCE, || {
        b.lookup("team", "entry-1").is_some()
    })
    .await
    .expect("the other member finds the entry");
    let hit = b.lookup("team", "entry-1").unwrap();
    assert_eq!(
        (hit.writes.as_str(), hit.stored_by.as_str()),
        (r#"{"x": 1}"#, "run-a")
    );
    assert!(b.lookup("other", "entry-1").is_none());

    // An answer split across keys (over etcd's 1.5 MiB a value) arrives
    // whole.
    let large = format!(r#"{{"text": "{}"}}"#, "w".repeat(3 << 20));
    b.keep(
        "team",
        "entry-2".into(),
        answer(large.clone(), Duration::from_secs(60)),
    )
    .unwrap();
    weft_tests::wait_until(weft_tests::PATIENCE, || {
        a.lookup("team", "entry-2").is_some()
    })
    .await
    .expect("the large entry arrives");
    assert_eq!(a.lookup("team", "entry-2").unwrap().writes, large);

    // a keeps 2 MiB more: over its 4 MiB, it evicts the two others (the
    // least recently used first) and deletes them from the store; b, which
    // had room for all three, drops them too and keeps the new one.
    let filler = format!(r#"{{"text": "{}"}}"#, "f".repeat(2 << 20));
    a.keep(
        "team",
        "filler".into(),
        answer(filler, Duration::from_secs(60)),
    )
    .unwrap();
    assert_eq!(a.size().0, 1, "a evicted the two older entries");
    weft_tests::wait_until(weft_tests::PATIENCE, || {
        b.lookup("team", "entry-1").is_none()
            && b.lookup("team", "entry-2").is_none()
            && b.lookup("team", "filler").is_some()
    })
    .await
    .expect("b follows a's evictions");
    assert_eq!(b.size().0, 1);
    ended.cancel();
    tracker.close();
    tracker.wait().await;
    drop(etcd);
}
