//! Partitioned leadership's membership on a real store (issue 43): three
//! members in this process take part in one group through
//! `ha::membership`, on the embedded store and on a real etcd. Each
//! member's runtime proves its fence with a write fenced on it, and a
//! shared ledger records who serves which partition. Checked: the group
//! settles with every partition led once and each member within one of
//! even; a member that leaves drains and hands over every partition it
//! led; a member that dies without a word has its partitions taken
//! within its lease; a returning member gets its share back by
//! hand-overs; a hand-over's old fence writes nothing; a changed
//! partition count is refused with both figures.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_coordinator::ha::membership::{
    self, GroupSettings, GroupView, PartitionId, Partitioning, Runtime, holder_key, read_group,
};
use weft_store::{AnyStore, EmbeddedStore, EtcdStore, Fence, Store, StoreError};
use weft_tests::etcd::TestEtcd;

const PARTITIONS: u32 = 16;
/// Short, so a death is seen soon; long enough that a loaded machine's
/// late renewals do not end a session.
const TTL: Duration = Duration::from_secs(3);

/// Who serves what, across the members of one test.
#[derive(Default)]
struct Ledger {
    /// Each partition's server and fence.
    serving: Mutex<BTreeMap<u32, (String, i64)>>,
    /// Every fence a partition was served under, in order.
    fences: Mutex<BTreeMap<u32, Vec<i64>>>,
    /// A partition served by two members at once, or a fence that did not
    /// let its holder write.
    broken: Mutex<Vec<String>>,
    /// Partitions drained, by member.
    drained: Mutex<BTreeMap<String, u32>>,
    /// Partitions dropped without a drain (abandoned), by member.
    abandoned: Mutex<BTreeMap<String, u32>>,
    /// The (partition, fence) pairs drained.
    drained_fences: Mutex<std::collections::BTreeSet<(u32, i64)>>,
}

impl Ledger {
    fn led_by(&self) -> BTreeMap<String, u32> {
        let mut led = BTreeMap::new();
        for (url, _) in self.serving.lock().unwrap().values() {
            *led.entry(url.clone()).or_default() += 1;
        }
        led
    }
}

/// One member's runtime: a fenced write when it starts serving and when it
/// drains, as a partition's checkpoints are.
struct Node {
    url: String,
    store: AnyStore,
    ledger: Arc<Ledger>,
}

impl Node {
    async fn write(&self, partition: PartitionId, fence: &Fence, what: &str) {
        let key = format!("test/runs/{}", partition.0);
        let value = format!("{what} by {}", self.url).into_bytes();
        if let Err(error) = self.store.put(&key, value, Some(fence)).await {
            self.ledger.broken.lock().unwrap().push(format!(
                "{} could not write {partition} under its fence {}: {error}",
                self.url, fence.revision
            ));
        }
    }
}

impl Runtime for Node {
    async fn serve(&self, partition: PartitionId, fence: Fence, abandoned: CancellationToken) {
        if abandoned.is_cancelled() {
            return;
        }
        self.write(partition, &fence, "restored").await;
        let before = {
            let mut serving = self.ledger.serving.lock().unwrap();
            serving.insert(partition.0, (self.url.clone(), fence.revision))
        };
        // Another still serving it may only be a deposed leader that has
        // not heard yet: its fence must write nothing.
        if let Some((other, old)) = before {
            let stale = Fence {
                key: holder_key(partition),
                revision: old,
            };
            let written = self
                .store
                .put("test/stale", b"x".to_vec(), Some(&stale))
                .await;
            if !matches!(written, Err(StoreError::Fenced { .. })) {
                self.ledger.broken.lock().unwrap().push(format!(
                    "{partition} served by {} while {other}'s fence {old} still writes: {written:?}",
                    self.url
                ));
            }
        }
        self.ledger
            .fences
            .lock()
            .unwrap()
            .entry(partition.0)
            .or_default()
            .push(fence.revision);
        // Abandoned (or released after a drain): no longer served here.
        let (ledger, url) = (self.ledger.clone(), self.url.clone());
        tokio::spawn(async move {
            abandoned.cancelled().await;
            let drained = ledger
                .drained_fences
                .lock()
                .unwrap()
                .contains(&(partition.0, fence.revision));
            if !drained {
                *ledger
                    .abandoned
                    .lock()
                    .unwrap()
                    .entry(url.clone())
                    .or_default() += 1;
            }
            let mut serving = ledger.serving.lock().unwrap();
            if serving.get(&partition.0) == Some(&(url, fence.revision)) {
                serving.remove(&partition.0);
            }
        });
    }

    async fn drain(&self, partition: PartitionId) {
        let fence = {
            let serving = self.ledger.serving.lock().unwrap();
            serving.get(&partition.0).cloned()
        };
        let Some((url, fence)) = fence.filter(|(url, _)| *url == self.url) else {
            return;
        };
        let fence = Fence {
            key: holder_key(partition),
            revision: fence,
        };
        self.write(partition, &fence, "checkpointed").await;
        self.ledger
            .drained_fences
            .lock()
            .unwrap()
            .insert((partition.0, fence.revision));
        let mut serving = self.ledger.serving.lock().unwrap();
        if serving.get(&partition.0).is_some_and(|(u, _)| *u == url) {
            serving.remove(&partition.0);
        }
        *self.ledger.drained.lock().unwrap().entry(url).or_default() += 1;
    }
}

struct Joined {
    leave: CancellationToken,
    task: JoinHandle<Result<(), membership::GroupError>>,
    /// The group as this member last read it.
    seen: tokio::sync::watch::Receiver<GroupView>,
}

fn join(store: &AnyStore, ledger: &Arc<Ledger>, url: &str) -> Joined {
    let settings = GroupSettings {
        partitioning: Partitioning::new(PARTITIONS).unwrap(),
        url: url.to_owned(),
        ttl: TTL,
    };
    let node = Arc::new(Node {
        url: url.to_owned(),
        store: store.clone(),
        ledger: ledger.clone(),
    });
    let leave = CancellationToken::new();
    let (tell, seen) = tokio::sync::watch::channel(GroupView::default());
    let task = tokio::spawn(membership::take_part(
        store.clone(),
        settings,
        node,
        leave.clone(),
        tell,
    ));
    Joined { leave, task, seen }
}

fn partitioning() -> Partitioning {
    Partitioning::new(PARTITIONS).unwrap()
}

/// Waits until `members` lead every partition between them, each within
/// one of even, as the store and the ledger both say; returns how long
/// that took.
async fn settled(store: &AnyStore, ledger: &Ledger, members: &[&str]) -> Duration {
    let started = Instant::now();
    let (low, high) = (
        PARTITIONS / members.len() as u32,
        PARTITIONS.div_ceil(members.len() as u32),
    );
    loop {
        let group = read_group(store, partitioning()).await.unwrap().led_by();
        let stored: BTreeMap<String, u32> = group
            .iter()
            .map(|(url, led)| (url.clone(), led.len() as u32))
            .collect();
        let served = ledger.led_by();
        let expected: Vec<&str> = members.to_vec();
        let even = stored
            .keys()
            .map(String::as_str)
            .eq(expected.iter().copied())
            && stored.values().all(|n| (low..=high).contains(n))
            && stored.values().sum::<u32>() == PARTITIONS
            && served == stored;
        if even {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not settled over {members:?}: the store says {stored:?}, the runtimes serve {served:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A metric's value as `metrics` renders it now (0 when absent): the
/// members of a test are one process, so their figures add up.
fn metric(metrics: &Option<PrometheusHandle>, name: &str) -> f64 {
    let Some(handle) = metrics else { return 0.0 };
    handle
        .render()
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

async fn a_group_of_three_hands_partitions_over(store: AnyStore) {
    // One recorder per process: nextest runs each test in its own (under
    // `cargo test` the second test's figures go unchecked).
    let metrics = weft_coordinator::metrics::install().ok();
    let counted = metrics.is_some();
    let led = |expected: f64| {
        let now = metric(&metrics, "weft_partitions_led");
        assert!(
            !counted || now == expected,
            "weft_partitions_led {now}, expected {expected}"
        );
    };
    let ledger = Arc::new(Ledger::default());
    let (a, b, c) = ("http://a:1", "http://b:1", "http://c:1");
    let first = join(&store, &ledger, a);
    let second = join(&store, &ledger, b);
    let third = join(&store, &ledger, c);
    let took = settled(&store, &ledger, &[a, b, c]).await;
    eprintln!("three members settled in {took:?}");
    // Each member's own reading of the group comes to what the store says.
    let now = read_group(&store, partitioning()).await.unwrap();
    for member in [&first, &second, &third] {
        let mut seen = member.seen.clone();
        let agreed =
            seen.wait_for(|view| view.leaders == now.leaders && view.members == now.members);
        tokio::time::timeout(Duration::from_secs(10), agreed)
            .await
            .expect("the member reads the group as it stands")
            .unwrap();
    }
    assert_eq!(now.leaders.len(), PARTITIONS as usize);

    // A clean leave: every partition the member led is drained before it
    // goes, and the two others take them.
    // (Members that joined first handed some over while the group settled.)
    let drained = |url: &str| {
        ledger
            .drained
            .lock()
            .unwrap()
            .get(url)
            .copied()
            .unwrap_or(0)
    };
    led(f64::from(PARTITIONS));
    let (c_led, c_drained) = (ledger.led_by()[c], drained(c));
    let hand_overs = metric(&metrics, "weft_partition_hand_overs_total");
    let timed = metric(&metrics, "weft_partition_hand_over_seconds_count");
    third.leave.cancel();
    third.task.await.unwrap().unwrap();
    if counted {
        // c's, at least (the figures are the whole process's).
        let handed = metric(&metrics, "weft_partition_hand_overs_total") - hand_overs;
        assert!(
            handed >= f64::from(c_led),
            "{handed} hand-overs counted, c led {c_led}"
        );
        // Each timed: the count and the timings agree once no hand-over
        // is being recorded (the others may be moving partitions too).
        let deadline = Instant::now() + weft_tests::PATIENCE;
        loop {
            let handed = metric(&metrics, "weft_partition_hand_overs_total") - hand_overs;
            let timed = metric(&metrics, "weft_partition_hand_over_seconds_count") - timed;
            if timed == handed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{handed} hand-overs, {timed} timed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(
        drained(c) - c_drained,
        c_led,
        "each partition it led drained"
    );
    assert_eq!(
        ledger.abandoned.lock().unwrap().get(c),
        None,
        "none dropped"
    );
    let took = settled(&store, &ledger, &[a, b]).await;
    eprintln!("after a leave, settled in {took:?}");

    // A death without a word: its session's lease lapses, its partitions
    // are taken within it.
    second.task.abort();
    let _ = second.task.await;
    let took = settled(&store, &ledger, &[a]).await;
    eprintln!("after a death, the survivor led everything in {took:?}");
    assert!(
        took < TTL * 3,
        "took {took:?}, the lease's time to live is {TTL:?}"
    );

    // A member back: it gets its share through hand-overs.
    let again = join(&store, &ledger, b);
    let drained_before = drained(a);
    settled(&store, &ledger, &[a, b]).await;
    let handed = drained(a) - drained_before;
    assert_eq!(handed, PARTITIONS / 2, "each partition b took, a drained");

    // A session revoked under a live member (as etcd does to a lease it
    // stops hearing about): it abandons what it led, its old fences write
    // nothing, and it joins again as a new member.
    let abandoned = |url: &str| ledger.abandoned.lock().unwrap().get(url).copied();
    let before = abandoned(b).unwrap_or(0);
    let lease = revoke_session_of(&store, b).await;
    let took = settled(&store, &ledger, &[a, b]).await;
    eprintln!("after session {lease:x} was revoked, settled again in {took:?}");
    assert_eq!(
        abandoned(b).unwrap_or(0) - before,
        PARTITIONS / 2,
        "every partition of the revoked session abandoned"
    );

    // One partition's lease key gone while its leader's session lives on
    // (deleted by hand): the leader abandons that partition alone, at
    // once, and it is led again under a new fence.
    let (partition, holder) = {
        let serving = ledger.serving.lock().unwrap();
        let (partition, (url, _)) = serving.iter().next().expect("served");
        (*partition, url.clone())
    };
    let before = abandoned(&holder).unwrap_or(0);
    let dropped = metric(&metrics, "weft_partitions_abandoned_total");
    store
        .delete_prefix(&holder_key(PartitionId(partition)), None)
        .await
        .unwrap();
    settled(&store, &ledger, &[a, b]).await;
    let started = Instant::now();
    while abandoned(&holder).unwrap_or(0) == before {
        assert!(started.elapsed() < TTL, "{holder} still serves {partition}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        abandoned(&holder).unwrap(),
        before + 1,
        "that partition alone"
    );
    let dropped = metric(&metrics, "weft_partitions_abandoned_total") - dropped;
    assert!(
        !counted || dropped == 1.0,
        "one abandoned partition counted: {dropped}"
    );
    led(f64::from(PARTITIONS));
    let fences = ledger.fences.lock().unwrap()[&partition].clone();
    assert!(fences.len() >= 2, "led again under a new fence: {fences:?}");

    // A partition that moved: its old fence writes nothing.
    let (partition, old) = {
        let fences = ledger.fences.lock().unwrap();
        let (partition, seen) = fences
            .iter()
            .find(|(_, seen)| seen.len() > 1)
            .expect("some partition moved");
        (*partition, seen[0])
    };
    let stale = Fence {
        key: holder_key(PartitionId(partition)),
        revision: old,
    };
    let refused = store
        .put("test/stale", b"x".to_vec(), Some(&stale))
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Fenced { .. }), "{refused}");

    let broken = ledger.broken.lock().unwrap().clone();
    assert!(broken.is_empty(), "{broken:#?}");

    // Another count on the same store is refused, with both figures.
    let refused = membership::fix_count(&store, Partitioning::new(8).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("partitions = 8") && refused.contains("created with 16 partitions"),
        "{refused}"
    );

    for member in [first, again] {
        member.leave.cancel();
        member.task.await.unwrap().unwrap();
    }
    let group = read_group(&store, partitioning()).await.unwrap();
    assert!(
        group.members.is_empty() && group.leaders.is_empty(),
        "everyone left: {group:?}"
    );
    led(0.0);
}

/// Revokes the session of the member at `url`; its lease id.
async fn revoke_session_of(store: &AnyStore, url: &str) -> i64 {
    let members = store.scan("group/members/").await.unwrap();
    let member = members
        .iter()
        .find(|m| m.value == url.as_bytes())
        .expect("the member is in the group");
    let id = member.key.trim_start_matches("group/members/");
    let lease = i64::from_str_radix(id, 16).expect("a member's id is its lease's");
    store.revoke(lease).await.unwrap();
    lease
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_partitions_on_the_embedded_store() {
    let dir = std::env::temp_dir().join(format!("weft-partitions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = AnyStore::Embedded(EmbeddedStore::open(&dir.join("s.redb")).unwrap());
    a_group_of_three_hands_partitions_over(store).await;
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_partitions_on_etcd() {
    let etcd = TestEtcd::start().await.expect("etcd runs");
    let store = AnyStore::Etcd(EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap());
    a_group_of_three_hands_partitions_over(store).await;
}

mod flow;
mod front;
mod node_cache;
mod processes;
mod runs_move;
mod viewer;
