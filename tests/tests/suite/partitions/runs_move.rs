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
