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
        let timed = metric(&metrics, "weft_partition_hand_over_seconds_count") - timed;
        assert_eq!(timed, handed, "each timed");
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

mod runs_move {
    //! Real registries of runs behind the membership: runs waiting for a
    //! person in the partitions of one coordinator; a second joins, half
    //! the partitions are handed over — drained, checkpointed, released,
    //! restored — and every run is then served by exactly one of the two,
    //! with its child run beside it, and finishes when answered there.

    use super::*;
    use serde_json::json;
    use tokio_util::task::TaskTracker;
    use weft_coordinator::bundle::{BlobStore, Bundle};
    use weft_coordinator::config::CoordinatorConfig;
    use weft_coordinator::ha::partition_runs::PartitionRuns;
    use weft_coordinator::run_actor::{HumanAnswer, Owner, RunStatus};
    use weft_coordinator::runs::Runs;
    use weft_coordinator::term::start_dispatcher;

    const P: u32 = 4;

    const PARENT: &str = "state:\n  colour: { type: string, default: \"\" }\nnodes:\n  bar: { kind: subgraph, start: true, graph: asking.yaml, end: true }\n";
    const CHILD: &str = "state:\n  colour: { type: string, default: \"\" }\nnodes:\n  ask: { kind: input, start: true, output_key: colour, end: true }\n";

    fn bundle() -> Bundle {
        Bundle::new(
            "parent.yaml".into(),
            [
                ("parent.yaml".into(), PARENT.as_bytes().to_vec(), 0o644),
                ("asking.yaml".into(), CHILD.as_bytes().to_vec(), 0o644),
            ],
            1 << 20,
        )
        .unwrap()
    }

    struct Coordinator {
        runs: PartitionRuns,
        leave: CancellationToken,
        task: JoinHandle<Result<(), membership::GroupError>>,
        stop: CancellationToken,
    }

    fn start(store: &AnyStore, url: &str) -> Coordinator {
        let config = CoordinatorConfig::default();
        let (stop, tracker) = (CancellationToken::new(), TaskTracker::new());
        let dispatcher = start_dispatcher(&config, &stop, &tracker);
        let partitioning = Partitioning::new(P).unwrap();
        let runs = PartitionRuns::new(
            config,
            store.clone(),
            partitioning,
            dispatcher,
            BlobStore::default(),
        );
        let leave = CancellationToken::new();
        // Nobody dies here: a long lease keeps a loaded machine's late
        // renewals from ending a session mid-test.
        let settings = GroupSettings {
            partitioning,
            url: url.to_owned(),
            ttl: Duration::from_secs(10),
        };
        let (tell, _) = tokio::sync::watch::channel(GroupView::default());
        let task = tokio::spawn(membership::take_part(
            store.clone(),
            settings,
            Arc::new(runs.clone()),
            leave.clone(),
            tell,
        ));
        Coordinator {
            runs,
            leave,
            task,
            stop,
        }
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The status of run `id` in `runs`, once it is registered there.
    async fn status(runs: &Runs, id: &str) -> Option<RunStatus> {
        Some(runs.get(id)?.summary().await.ok()?.status)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_runs_move_with_their_partitions_and_finish_where_they_went() {
        if std::env::var_os("WEFT_TEST_LOG").is_some() {
            weft_process::init_logging(weft_process::LogFormat::Text);
        }
        let etcd = TestEtcd::start().await.expect("etcd runs");
        let store = AnyStore::Etcd(EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap());
        let partitioning = Partitioning::new(P).unwrap();
        let a = start(&store, "http://a:1");
        until("a leads every partition", || {
            a.runs.led().len() == P as usize
        })
        .await;

        let mut parents = Vec::new();
        for _ in 0..8 {
            let runs = a.runs.for_new_run().expect("a leads partitions");
            let (id, _) = runs
                .submit(bundle(), "{}", Owner::default())
                .await
                .expect("submitted");
            parents.push(id.to_string());
        }
        let mut children = BTreeMap::new();
        for id in &parents {
            let runs = a.runs.route(id).expect("a leads its partition");
            let started = Instant::now();
            let child = loop {
                let view = runs.get(id).unwrap().summary().await.unwrap();
                if view.status == RunStatus::Waiting
                    && let Some((_, child)) = view.children.first()
                {
                    break child.to_string();
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{id}: {view:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert_eq!(
                partitioning.of_run(&child),
                partitioning.of_run(id),
                "child {child} of {id} lives in its parent's partition"
            );
            children.insert(id.clone(), child);
        }
        let spread: std::collections::BTreeSet<_> =
            parents.iter().map(|id| partitioning.of_run(id)).collect();
        assert_eq!(
            spread.len(),
            P as usize,
            "new runs take the partitions in turn"
        );

        // b joins: two partitions are handed over.
        let b = start(&store, "http://b:1");
        until("two partitions each", || {
            a.runs.led().len() == 2 && b.runs.led().len() == 2
        })
        .await;

        // Each holds its partitions' runs and no others: a parent and its
        // child, twice, in each.
        let even =
            |held: BTreeMap<PartitionId, usize>| held.len() == 2 && held.values().all(|&n| n == 4);
        until("each holds its partitions' runs alone", || {
            even(a.runs.runs_held()) && even(b.runs.runs_held())
        })
        .await;
        let mut moved = 0;
        for (parent, child) in &children {
            let (on_a, on_b) = (a.runs.route(parent), b.runs.route(parent));
            assert!(on_a.is_some() != on_b.is_some(), "{parent} is served once");
            let runs = on_a.clone().or(on_b.clone()).unwrap();
            moved += usize::from(on_b.is_some());
            // Restored with its child, both still waiting.
            let started = Instant::now();
            while status(&runs, parent).await != Some(RunStatus::Waiting)
                || status(&runs, child).await != Some(RunStatus::Waiting)
            {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{parent} and {child} waiting after the hand-over"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let handle = runs.get(parent).unwrap();
            let answer = HumanAnswer {
                value: json!("blue"),
                comment: None,
                by: None,
            };
            runs.answer(&handle, "ask".into(), answer)
                .await
                .expect("answered where it is served");
            let started = Instant::now();
            while status(&runs, parent).await != Some(RunStatus::Completed) {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{parent} completes"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let state = runs.get(parent).unwrap().summary().await.unwrap().state;
            assert_eq!(state.get("colour"), Some(&json!("blue")), "{parent}");
        }
        assert_eq!(moved, 4, "the runs of the two partitions handed over moved");

        // a deletes the runs of one of its partitions, whose bundle files
        // every partition's runs share, then leaves: its other partition's
        // runs are restored by b, bundle and all.
        let (deleted, kept) = {
            let led = a.runs.led();
            (led[0], led[1])
        };
        for parent in children.keys() {
            if partitioning.of_run(parent) == deleted {
                let runs = a.runs.route(parent).unwrap();
                runs.delete(&children[parent])
                    .await
                    .expect("the child ended");
                runs.delete(parent).await.expect("the parent ended");
            }
        }
        a.leave.cancel();
        a.task.await.unwrap().unwrap();
        a.stop.cancel();
        until(
            "b holds every partition's runs but the deleted ones",
            || {
                let held = b.runs.runs_held();
                held.len() == P as usize
                    && held[&deleted] == 0
                    && held.iter().all(|(p, &n)| *p == deleted || n == 4)
            },
        )
        .await;
        for parent in children.keys() {
            if partitioning.of_run(parent) == kept {
                let runs = b.runs.route(parent).unwrap();
                assert_eq!(status(&runs, parent).await, Some(RunStatus::Completed));
            }
        }

        b.leave.cancel();
        b.task.await.unwrap().unwrap();
        b.stop.cancel();
    }
}

mod front {
    //! Any member of a partitioned group answers any request: two members
    //! on a real etcd, each serving the run service on its own loopback
    //! port by its `Role::Member`, clients of either. A run is made in a
    //! partition its member leads, found and answered through the other
    //! member (forwarded by its id to its partition's leader), waited for
    //! there, and listed — page by page — by either, with every member's
    //! runs.

    use super::*;
    use serde_json::json;
    use tokio::sync::watch;
    use tokio_util::task::TaskTracker;
    use weft_client::{Client, GraphBundle, RunStatus};
    use weft_coordinator::bundle::BlobStore;
    use weft_coordinator::config::CoordinatorConfig;
    use weft_coordinator::durable::Keeper;
    use weft_coordinator::ha::member::Member;
    use weft_coordinator::ha::partition_runs::PartitionRuns;
    use weft_coordinator::indexes::SharedIndexes;
    use weft_coordinator::term::{Role, start_dispatcher};

    const P: u32 = 4;

    /// A graph that waits for a person.
    fn asking() -> GraphBundle {
        GraphBundle::from_text(
            "asking.yaml",
            "state:\n  colour: { type: string, default: \"\" }\nnodes:\n  ask: { kind: input, start: true, output_key: colour, end: true }\n",
        )
    }

    struct Served {
        url: String,
        partitions: PartitionRuns,
        leave: CancellationToken,
        stop: CancellationToken,
        // Held: a role whose sender is gone reads as changed.
        _role: watch::Sender<Role>,
    }

    async fn serve(store: &AnyStore) -> Served {
        let config = CoordinatorConfig::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, tracker) = (CancellationToken::new(), TaskTracker::new());
        let partitioning = Partitioning::new(P).unwrap();
        let dispatcher = start_dispatcher(&config, &stop, &tracker);
        let blobs = BlobStore::default();
        let partitions = PartitionRuns::new(
            config.clone(),
            store.clone(),
            partitioning,
            dispatcher.clone(),
            blobs.clone(),
        );
        let (seen, view) = watch::channel(GroupView::default());
        let member = Member {
            partitions: partitions.clone(),
            view,
            url: url.clone(),
            dispatcher,
            blobs,
            indexes: SharedIndexes::new(
                Keeper::new(store.clone(), None, stop.clone()),
                config.max_index_bytes,
            ),
            max_bundle_bytes: config.max_bundle_bytes,
            max_result_bytes: config.max_result_bytes,
            heartbeat: config.heartbeat_interval,
            worker_timeout: config.worker_timeout,
            tracker,
            ended: stop.clone(),
        };
        let (role, watched) = watch::channel(Role::Member(Arc::new(member)));
        tokio::spawn({
            let stop = stop.clone();
            async move { weft_coordinator::server::serve_role(listener, &config, watched, stop).await }
        });
        let leave = CancellationToken::new();
        let settings = GroupSettings {
            partitioning,
            url: url.clone(),
            ttl: Duration::from_secs(10),
        };
        tokio::spawn(membership::take_part(
            store.clone(),
            settings,
            Arc::new(partitions.clone()),
            leave.clone(),
            seen,
        ));
        Served {
            url,
            partitions,
            leave,
            stop,
            _role: role,
        }
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn either_member_answers_for_every_run_of_the_group() {
        let etcd = TestEtcd::start().await.expect("etcd runs");
        let store = AnyStore::Etcd(EtcdStore::connect(std::slice::from_ref(&etcd.url)).unwrap());
        let a = serve(&store).await;
        until("a leads every partition", || {
            a.partitions.led().len() == P as usize
        })
        .await;
        let b = serve(&store).await;
        until("two partitions each", || {
            a.partitions.led().len() == 2 && b.partitions.led().len() == 2
        })
        .await;
        let (to_a, to_b) = (
            Client::connect(a.url.clone()).await.unwrap(),
            Client::connect(b.url.clone()).await.unwrap(),
        );
        // Each member makes its new runs in the partitions it leads.
        let mut made = Vec::new();
        for (client, member) in [(&to_a, &a), (&to_b, &b), (&to_a, &a), (&to_b, &b)] {
            let run = client.submit_bundle(asking(), &json!({})).await.unwrap();
            let id = run.run_id.to_string();
            assert!(
                member.partitions.route(&id).is_some(),
                "{id} is made where it was submitted"
            );
            made.push(id);
        }
        // Each is found through either member, waiting.
        for id in &made {
            for client in [&to_a, &to_b] {
                let info = client.get(id).await.unwrap();
                assert_eq!(info.status, RunStatus::Waiting, "{id}");
            }
        }
        // A run nobody made is unknown, whichever member its id leads to.
        for client in [&to_a, &to_b] {
            for n in 0..4 {
                let unknown = format!("run-nobody-{n}");
                let error = client.get(&unknown).await.expect_err("unknown");
                assert!(
                    error
                        .to_string()
                        .contains(&format!("unknown run '{unknown}'")),
                    "{error}"
                );
            }
        }
        // Listed by either member, whole, newest first, page by page.
        let mut newest_first = made.clone();
        newest_first.sort();
        newest_first.reverse();
        for client in [&to_a, &to_b] {
            let mut listed = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let (page, next) = client.list_page(3, after.as_deref()).await.unwrap();
                assert!(page.len() <= 3);
                listed.extend(page.iter().map(|run| run.run_id.to_string()));
                match next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            assert_eq!(listed, newest_first);
        }
        // Answered through the member that does not lead it, and waited
        // for there.
        for (id, client) in made.iter().zip([&to_b, &to_a, &to_b, &to_a]) {
            client
                .resume(id, "ask", &json!("teal"), None)
                .await
                .unwrap();
            let done = tokio::time::timeout(Duration::from_secs(30), client.wait(id))
                .await
                .expect("in time")
                .unwrap();
            assert_eq!(done.status, RunStatus::Completed, "{id}");
            assert_eq!(done.state["colour"], "teal");
        }
        for member in [&a, &b] {
            member.leave.cancel();
        }
        until("both left", || {
            a.partitions.led().is_empty() && b.partitions.led().is_empty()
        })
        .await;
        for member in [a, b] {
            member.stop.cancel();
        }
    }
}

mod processes {
    //! A partitioned group through the binaries: three `coordinator`
    //! processes with `WEFT_PARTITIONS=4` on one real etcd, one `worker`
    //! that finds them there and serves them all. Runs submitted through
    //! each coordinator finish, are waited for and listed through any
    //! other; a coordinator stopped cleanly hands its partitions over and
    //! its runs stay reachable; a coordinator with another partition count
    //! is refused, naming both.

    use super::*;
    use weft_client::{GraphBundle, RunStatus};
    use weft_store::EtcdTls;
    use weft_tests::group::TestGroup;

    /// Two script steps, the second reading what the first wrote.
    fn two_steps() -> GraphBundle {
        GraphBundle::from_text(
            "two.yaml",
            "state:\n  n: { type: integer, default: 0 }\nnodes:\n  a: { kind: script, run: [sh, -c, 'echo \"{\\\"n\\\": 20}\"'], start: true, next: b }\n  b: { kind: script, run: [sh, -c, 'echo \"{\\\"n\\\": 22}\"'], end: true }\n",
        )
    }

    #[tokio::test]
    async fn three_coordinators_share_the_runs_of_a_partitioned_group() -> anyhow::Result<()> {
        let etcd = TestEtcd::start().await?;
        let env = [("WEFT_PARTITIONS", "4")];
        let mut group = TestGroup::start_on(etcd, 3, 3, &env, EtcdTls::default()).await?;
        for index in 0..3 {
            group
                .wait_for_log(
                    &format!("coordinator-{index}"),
                    "taking part in the group",
                    1,
                )
                .await?;
        }
        group.add_worker("w", 4)?;
        group
            .wait_for_log("w", "serving every coordinator of the group", 1)
            .await?;
        group.wait_for_log("w", "joined the coordinator", 3).await?;
        let clients = [
            group.client(0).await?,
            group.client(1).await?,
            group.client(2).await?,
        ];
        let mut made = Vec::new();
        for round in 0..3 {
            for (index, client) in clients.iter().enumerate() {
                let run = client
                    .submit_bundle(two_steps(), &serde_json::json!({}))
                    .await?;
                made.push((run.run_id.to_string(), (index + round + 1) % 3));
            }
        }
        // Each waited for through another coordinator than its own.
        for (id, other) in &made {
            let done =
                tokio::time::timeout(Duration::from_secs(60), clients[*other].wait(id)).await??;
            assert_eq!(done.status, RunStatus::Completed, "{id}: {:?}", done.error);
            assert_eq!(done.state["n"], 22, "{id}");
        }
        // Listed whole through each.
        let mut ids: Vec<String> = made.iter().map(|(id, _)| id.clone()).collect();
        ids.sort();
        ids.reverse();
        for client in &clients {
            let listed: Vec<String> = client
                .list()
                .await?
                .iter()
                .map(|run| run.run_id.to_string())
                .collect();
            assert_eq!(listed, ids);
        }
        // The HTTP API (the viewer's) likewise, and a run through it.
        for (index, (id, _)) in made.iter().enumerate().take(3) {
            let base = group.http_base(index);
            let page: serde_json::Value = reqwest::get(format!("{base}/api/v1/runs?limit=100"))
                .await?
                .json()
                .await?;
            let listed: Vec<&str> = page["runs"]
                .as_array()
                .expect("runs")
                .iter()
                .map(|run| run["run_id"].as_str().expect("an id"))
                .collect();
            assert_eq!(listed, ids, "through coordinator {index}");
            let run: serde_json::Value = reqwest::get(format!("{base}/api/v1/runs/{id}"))
                .await?
                .json()
                .await?;
            assert_eq!(run["status"], "completed", "{run}");
        }
        // Each coordinator's metrics count the runs of the partitions it
        // leads: all of them, once each.
        let counted = || -> Option<f64> {
            let mut total = 0.0;
            for index in 0..3 {
                let base = group.http_base(index).trim_start_matches("http://");
                let metrics = weft_tests::http_get(base, "/metrics").ok()?;
                total += metrics
                    .lines()
                    .filter(|line| line.starts_with("weft_partition_runs{"))
                    .filter_map(|line| line.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
                    .sum::<f64>();
            }
            Some(total)
        };
        weft_tests::wait_until(weft_tests::PATIENCE, || {
            counted() == Some(made.len() as f64)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}: counted {:?}", counted()))?;
        // What the group does not yet hold across partitions is refused,
        // not counted by each coordinator alone.
        let keyed = GraphBundle::from_text(
            "keyed.yaml",
            "nodes:\n  a: { kind: script, run: [\"true\"], start: true, concurrency: { key: \"x\", max: 1 } }\n",
        );
        let refused = clients[0]
            .submit_bundle(keyed, &serde_json::json!({}))
            .await
            .expect_err("refused");
        assert!(
            refused.to_string().contains(
                "node 'a' has a concurrency key, which a group whose runs are split into partitions does not yet hold across them"
            ),
            "{refused}"
        );
        // One stops cleanly: its partitions are handed over, and every run
        // is still found, through either of the others.
        group.signal(2, "TERM")?;
        group
            .wait_for_log(
                "coordinator-2",
                "left the group, every partition handed over",
                1,
            )
            .await?;
        for (id, _) in &made {
            for client in &clients[..2] {
                let info = tokio::time::timeout(Duration::from_secs(30), client.get(id)).await??;
                assert_eq!(info.status, RunStatus::Completed, "{id}");
            }
        }
        // New runs go on with two.
        let run = clients[1]
            .submit_bundle(two_steps(), &serde_json::json!({}))
            .await?;
        let done =
            tokio::time::timeout(Duration::from_secs(60), clients[0].wait(&run.run_id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        // A coordinator given another count is refused, naming both.
        let dir = std::env::temp_dir().join(format!("weft-recount-{}", std::process::id()));
        let output = weft_tests::output_within(
            std::process::Command::new(weft_tests::binary("coordinator"))
                .env("WEFT_ETCD", &group.etcd.url)
                .env("WEFT_PARTITIONS", "8")
                .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
                .arg("--data-dir")
                .arg(&dir),
            weft_tests::PATIENCE,
        );
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{said}");
        assert!(
            said.contains(
                "[cluster] partitions = 8, but this group's store was created with 4 partitions"
            ),
            "{said}"
        );
        std::fs::remove_dir_all(dir).ok();
        Ok(())
    }
}
