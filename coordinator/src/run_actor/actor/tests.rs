//! Tests of the run actor on an in-process launcher: the actor's effects
//! (dispatch, retry timers, cancellation, the event log, the record it
//! leaves) carried out for real, with handlers run in this process and no
//! network. Retry delays run on tokio's paused clock.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::bundle::{BlobStore, Bundle};
use crate::dispatch::in_process::{InProcessLauncher, Launched};
use crate::graph::{Format, load_str};
use crate::run_actor::RunLimits;

/// The bundle of a graph file alone.
fn bundle_of(yaml: &str) -> Bundle {
    Bundle::new(
        "g.yaml".into(),
        [("g.yaml".into(), yaml.as_bytes().to_vec(), 0o644)],
        1 << 20,
    )
    .unwrap()
}

/// Starts a run of `yaml` on `input` whose tasks `launcher` runs.
fn start(yaml: &str, input: Value, launcher: &InProcessLauncher) -> RunHandle {
    start_kept(yaml, input, launcher, None, |_| {})
}

/// [`start`], the run kept by `journal`.
fn start_kept(
    yaml: &str,
    input: Value,
    launcher: &InProcessLauncher,
    journal: Option<Journal>,
    known: impl FnOnce(&RunHandle),
) -> RunHandle {
    let (graph, _) = load_str(yaml, Format::Yaml, "g").expect("the graph is valid");
    let plan = RunPlan::new(Arc::new(graph), RunLimits::default());
    let Value::Object(input) = input else {
        panic!("the input is an object")
    };
    let machine = RunMachine::new(plan.clone(), input).expect("the input fits");
    let bundle = bundle_of(yaml);
    spawn_run(
        RunSetup {
            prices: Arc::default(),
            spend: Arc::default(),
            cache: crate::node_cache::NodeCache::default(),
            streams: Arc::default(),
            id: RunId::from("run-test"),
            plan,
            machine,
            bundle: Arc::default(),
            launcher: Arc::new(launcher.clone()),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
            history: None,
            start: Start::New,
            journal,
            admitted: None,
            lease: BlobStore::default().add_bundle(&bundle, "default"),
            children: None,
            marks: Arc::new(crate::run_actor::StepMarks::none()),
            suspect: false,
        },
        known,
    )
}

fn number(state: &Map<String, Value>, field: &str) -> i64 {
    state[field].as_i64().unwrap_or_default()
}

fn tasks_of(launcher: &InProcessLauncher, node: &str) -> Vec<u32> {
    launcher
        .launched()
        .into_iter()
        .filter_map(|launched| match launched {
            Launched::Task {
                node: n, attempt, ..
            } if n == node => Some(attempt),
            _ => None,
        })
        .collect()
}

/// Whatever finds runs by id is given the handle before the actor can
/// dispatch: on a runtime with threads to spare, nothing is launched
/// however long the registration takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_known_before_its_first_task_is_launched() {
    let yaml = "
name: one
nodes:
  a: { kind: task, handler: first, start: true, end: true }
";
    let launcher =
        InProcessLauncher::new().with_handler("first", |_| async move { Ok(json!({ "x": 1 })) });
    let watching = launcher.clone();
    let mut launched_while_known = None;
    let run = start_kept(yaml, json!({}), &launcher, None, |handle| {
        assert_eq!(&**handle.id(), "run-test");
        // Were the actor started first, its first wave would be launched
        // while this waits.
        let until = std::time::Instant::now() + Duration::from_millis(300);
        while watching.launched().is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        launched_while_known = Some(watching.launched().len());
    });
    assert_eq!(launched_while_known, Some(0));
    let view = run.ended().await.unwrap();
    assert_eq!(view.status, RunStatus::Completed, "{:?}", view.error);
    assert_eq!(tasks_of(&launcher, "a"), [1]);
}

#[tokio::test]
async fn a_chain_runs_through_the_launcher_and_leaves_its_record() {
    let yaml = "
name: chain
nodes:
  a: { kind: task, handler: first, start: true, next: b }
  b: { kind: task, handler: second, end: true }
";
    let launcher = InProcessLauncher::new()
        .with_handler("first", |task| async move {
            Ok(json!({ "x": number(&task.state, "seed") + 1 }))
        })
        .with_handler("second", |task| async move {
            Ok(json!({ "y": number(&task.state, "x") * 10 }))
        });
    let run = start(yaml, json!({ "seed": 4 }), &launcher);
    let view = run.ended().await.unwrap();
    assert_eq!(view.status, RunStatus::Completed, "{:?}", view.error);
    assert_eq!(view.state["x"], 5);
    assert_eq!(view.state["y"], 50, "b saw what a wrote");
    assert_eq!(tasks_of(&launcher, "a"), [1]);
    assert_eq!(tasks_of(&launcher, "b"), [1]);
    assert_eq!(
        launcher.launched().last(),
        Some(&Launched::Forget),
        "the workers are told the run is over"
    );
    let record = run.finished().expect("an ended run keeps its record");
    assert_eq!(record.log.count(), view.event_count);
    let log = record
        .log
        .held()
        .expect("without a store the log stays in memory");
    let kinds: Vec<&str> = log.iter().map(|e| e.event.kind()).collect();
    let wave = [
        "wave_started",
        "node_started",
        "node_finished",
        "state_changed",
    ];
    let submitted = ["run_submitted"];
    assert_eq!(
        kinds,
        [&submitted[..], &wave[..], &wave[..], &["run_finished"]].concat()
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_is_retried_after_its_delay() {
    let yaml = "
nodes:
  a: { kind: task, handler: flaky, start: true, end: true, retry: { max_attempts: 3, initial_interval: 30s } }
";
    let launcher = InProcessLauncher::new().with_handler("flaky", |task| async move {
        match task.assignment.attempt {
            1 => Err("not yet".into()),
            _ => Ok(json!({ "done": true })),
        }
    });
    let before = tokio::time::Instant::now();
    let run = start(yaml, json!({}), &launcher);
    let view = run.ended().await.unwrap();
    assert_eq!(view.status, RunStatus::Completed, "{:?}", view.error);
    assert_eq!(tasks_of(&launcher, "a"), [1, 2], "one retry, then success");
    assert!(
        before.elapsed() >= std::time::Duration::from_secs(30),
        "the retry waited its interval on the actor's timer"
    );
    let (log, _) = run.watch(0).await.unwrap();
    assert!(
        log.iter().any(|e| matches!(
            &*e.event,
            RunEvent::NodeRetrying {
                next_attempt: 2,
                ..
            }
        )),
        "watchers were told of the retry"
    );
}

#[tokio::test]
async fn cancelling_a_run_stops_its_running_task() {
    let yaml = "
nodes:
  a: { kind: task, handler: forever, start: true, end: true }
";
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let launcher = InProcessLauncher::new().with_handler("forever", move |task| {
        let _ = started_tx.send(task.assignment.key);
        std::future::pending()
    });
    let run = start(yaml, json!({}), &launcher);
    let key = started.recv().await.expect("the task started");
    let view = run.cancel(None).await.unwrap();
    assert_eq!(view.status, RunStatus::Cancelled);
    assert!(
        launcher.launched().contains(&Launched::Cancel(vec![key])),
        "{:?}",
        launcher.launched()
    );
    // The handler never returns by itself: only the cancel stops it.
    launcher.idle().await;
    assert_eq!(run.ended().await.unwrap().status, RunStatus::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn a_task_no_one_hosts_waits_and_says_what_it_needs() {
    let yaml = "
nodes:
  a: { kind: task, handler: missing, start: true, end: true }
";
    let launcher = InProcessLauncher::new();
    let run = start(yaml, json!({}), &launcher);
    let mut view = run.get().await.unwrap();
    for _ in 0..100 {
        if !view.unhosted.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        view = run.get().await.unwrap();
    }
    assert_eq!(view.status, RunStatus::Running);
    assert_eq!(
        view.unhosted,
        [UnhostedWait {
            node: "a".into(),
            needs: "handler 'missing'".into(),
            tasks: 1,
        }]
    );
    run.cancel(None).await.unwrap();
}

/// Two task nodes in a row, both served by handler `step`.
const CHAIN_OF_TWO: &str = "
name: chain
nodes:
  a: { kind: task, handler: step, start: true, next: b }
  b: { kind: task, handler: step, end: true }
";

/// The journal of a run of `yaml` (`sync`), in a new embedded store in
/// `dir`, its bundle stored.
async fn journal_in(dir: &std::path::Path, yaml: &str) -> Journal {
    let _ = std::fs::remove_dir_all(dir);
    let store = weft_store::EmbeddedStore::open(&dir.join("weft.redb")).expect("opens");
    let keeper = crate::durable::Keeper::new(
        weft_store::AnyStore::Embedded(store),
        None,
        CancellationToken::new(),
    );
    let bundle = bundle_of(yaml);
    let head = crate::durable::restore::store_bundle(&keeper, &bundle, 0, &mut Default::default())
        .await
        .expect("stored");
    Journal::start(
        keeper,
        RunId::from("run-test"),
        head,
        crate::graph::Durability::Sync,
        (0, None),
        &TaskTracker::new(),
    )
}

/// With a store, an ended run holds no event log in memory: watching it
/// reads the same events back from the store.
#[tokio::test]
async fn an_ended_runs_log_is_read_back_from_the_store() {
    let yaml = CHAIN_OF_TWO;
    let dir = std::env::temp_dir().join(format!("weft-ended-log-{}", std::process::id()));
    let journal = journal_in(&dir, yaml).await;
    let launcher = InProcessLauncher::new().with_handler("step", |task| async move {
        Ok(json!({ "x": number(&task.state, "x") + 1 }))
    });
    let run = start_kept(yaml, json!({ "x": 0 }), &launcher, Some(journal), |_| {});
    let view = run.ended().await.unwrap();
    assert_eq!(view.status, RunStatus::Completed, "{:?}", view.error);
    let record = run.finished().expect("an ended run keeps its record");
    assert!(
        record.log.held().is_none(),
        "the store holds the whole log, so memory does not"
    );
    assert_eq!(record.log.count(), view.event_count);
    let (events, live) = run.watch(0).await.expect("read back");
    assert!(live.is_none(), "an ended run has no live feed");
    let kinds: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    assert_eq!(kinds.len() as u64, view.event_count);
    assert_eq!(kinds.first(), Some(&"run_submitted"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..view.event_count).collect::<Vec<_>>());
    let (later, _) = run.watch(view.event_count - 2).await.expect("read back");
    assert_eq!(later.len(), 2, "from a position, the events after it");
    assert_eq!(later[1].seq, view.event_count - 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With a store, an ended run's record keeps its small fields and leaves
/// its large ones (an input's and one a node wrote, a delta on top) in the
/// store: its whole state, and its state's text as the run wrote it, are
/// read back when asked for.
#[tokio::test]
async fn an_ended_runs_large_fields_stay_in_the_store() {
    let yaml = CHAIN_OF_TWO;
    let dir = std::env::temp_dir().join(format!("weft-ended-fields-{}", std::process::id()));
    let journal = journal_in(&dir, yaml).await;
    let launcher = InProcessLauncher::new().with_handler("step", |task| async move {
        let made = task.state.get("made").and_then(Value::as_str).unwrap_or("");
        Ok(json!({
            "x": number(&task.state, "x") + 1,
            "made": format!("{made}{}", "y".repeat(40_000)),
        }))
    });
    let big = "b\"ig\n".repeat(20_000);
    let input = json!({ "big": big, "small": [1, 2], "x": 0 });
    let run = start_kept(yaml, input, &launcher, Some(journal), |_| {});
    let view = run.ended().await.unwrap();
    assert_eq!(view.status, RunStatus::Completed, "{:?}", view.error);
    let record = run.finished().expect("an ended run keeps its record");
    let kept: Vec<&str> = record.view.state.keys().map(String::as_str).collect();
    assert_eq!(kept, ["small", "x"], "the large fields stay in the store");

    let whole = run.get().await.expect("read back");
    let names: Vec<&str> = whole.state.keys().map(String::as_str).collect();
    assert_eq!(names, ["big", "small", "x", "made"], "in the state's order");
    assert_eq!(whole.state["big"], json!(big));
    assert_eq!(whole.state["made"], json!("y".repeat(80_000)));
    assert_eq!(whole.state["x"], json!(2));
    assert_eq!(whole.state["small"], json!([1, 2]));
    assert_eq!(
        record.state_json(&[]).await.expect("read back"),
        weft_proto::json::object_to_string(&whole.state),
        "the state's text is what the run wrote"
    );
    let summary = run.summary().await.unwrap();
    assert_eq!(summary.state.len(), 2, "a summary reads nothing back");
    let _ = std::fs::remove_dir_all(&dir);
}
