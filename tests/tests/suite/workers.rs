//! Workers joining, refused and leaving.

use std::process::Command;

use serde_json::json;
use tokio_stream::StreamExt;
use weft_client::{GraphBuilder, NodeBuilder, RunStatus};
use weft_proto::v1 as pb;
use weft_tests::{PATIENCE, TestCluster, doubling_map, wait_for_event};

#[tokio::test]
async fn a_worker_with_another_protocol_version_is_refused_clearly() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let mut client =
        pb::worker_service_client::WorkerServiceClient::connect(cluster.url().to_owned()).await?;
    let hello = pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Hello(pb::Hello {
            protocol_version: 99,
            name: "from-the-future".into(),
            slots: 1,
            ..Default::default()
        })),
    };
    let status = client
        .join(tokio_stream::iter(vec![hello]))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(
        status
            .message()
            .contains("worker 'from-the-future' speaks protocol version 99"),
        "{}",
        status.message()
    );
    assert!(
        status
            .message()
            .contains("this coordinator speaks version 1"),
        "{}",
        status.message()
    );
    Ok(())
}

#[tokio::test]
async fn sigterm_drains_a_worker_its_task_finishes_and_it_exits_cleanly() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_test_worker("drainer", 2, None)?;
    cluster.wait_for_workers(&["drainer"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("nap")
        .field("delay_ms", "integer", 1500)
        .node("nap", NodeBuilder::task("sleep").start());
    let run = client.submit_graph(&graph, &json!({})).await?;
    wait_for_event(&client, &run.run_id, "node_started").await?;
    let pid = cluster.worker_pid("drainer").expect("running");
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?
            .success()
    );
    cluster
        .wait_for_log("coordinator", "worker draining")
        .await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(
        done.status,
        RunStatus::Completed,
        "the task in flight finished: {:?}",
        done.error
    );
    assert_eq!(done.state["slept"], json!(1500));
    // Holding nothing, it leaves promptly: well within the 10 s a worker
    // gives a coordinator to close the stream.
    let finished = std::time::Instant::now();
    assert_eq!(cluster.wait_for_exit("drainer").await?, Some(0));
    assert!(
        finished.elapsed() < std::time::Duration::from_secs(5),
        "the drained worker lingered {:?} after its last task",
        finished.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn a_frozen_worker_is_lost_its_task_runs_elsewhere_once_and_it_joins_again_when_thawed()
-> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_test_worker("frozen", 1, None)?;
    cluster.wait_for_workers(&["frozen"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("nap")
        .field("delay_ms", "integer", 400)
        .node("nap", NodeBuilder::task("sleep").start());
    let run = client.submit_graph(&graph, &json!({})).await?;
    wait_for_event(&client, &run.run_id, "node_started").await?;
    // Freeze the worker holding the task: its stream stays open, but its
    // heartbeats stop, and the reaper must notice.
    cluster.signal_worker("frozen", "STOP")?;
    cluster.add_test_worker("spare", 1, None)?;
    cluster
        .wait_for_log("coordinator", "heartbeats missed")
        .await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    cluster.signal_worker("frozen", "CONT")?;
    // The thawed worker finds its stream gone and joins again; its copy of
    // the task is of the old session and never reported. (A late result
    // that does reach the coordinator while the wave is live, from a
    // worker cut off by the network, is discarded and counted: the
    // multi-host suite's `workers.rs`.)
    cluster
        .wait_for_log_count("frozen", "joined the coordinator", 2)
        .await?;
    let mut finished = 0;
    let mut attempts = Vec::new();
    let mut resent = Vec::new();
    let mut events = client.watch(&run.run_id, 0).await?;
    while let Some(event) = tokio::time::timeout(PATIENCE, events.next()).await? {
        let event = event?;
        match event.kind.as_str() {
            "node_finished" => finished += 1,
            "node_started" => attempts.push(event.body["attempt"].as_u64().unwrap()),
            "task_redispatched" => resent.push(event.body),
            _ => {}
        }
    }
    assert_eq!(finished, 1, "one result merged");
    assert_eq!(
        resent,
        [json!({
            "type": "task_redispatched",
            "node": "nap",
            "attempt": 1,
            "item": null,
            "reason": "worker_lost",
            "worker": "frozen",
        })],
        "the second sending is counted, with its reason"
    );
    assert_eq!(
        attempts,
        [1],
        "re-dispatch after a loss is not a new attempt"
    );
    assert_eq!(client.get(&run.run_id).await?.state["slept"], json!(400));
    Ok(())
}

#[tokio::test]
async fn workers_reconnect_when_the_coordinator_comes_back() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_test_worker("loyal", 2, None)?;
    cluster.wait_for_workers(&["loyal"]).await?;
    cluster.restart_coordinator()?;
    cluster
        .wait_for_log_count("loyal", "joined the coordinator", 2)
        .await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("count")
        .field("counter", "integer", 41)
        .node("inc", NodeBuilder::task("increment").start());
    let run = client.submit_graph(&graph, &json!({})).await?;
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.state["counter"], json!(42));
    Ok(())
}

#[tokio::test]
async fn worker_hosted_reducers_merge_over_grpc_and_unhosted_ones_are_warned_about()
-> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("plain", 2)?;
    cluster.wait_for_workers(&["plain"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("longest")
        .field_with_reducer("best", "string", "", "fn:longest")
        .node(
            "short",
            NodeBuilder::script(&["python3", "-c", "print('{\"best\": \"ab\"}')"]).start(),
        )
        .node(
            "long",
            NodeBuilder::script(&["python3", "-c", "print('{\"best\": \"abcd\"}')"]).start(),
        );
    let run = client.submit_graph(&graph, &json!({})).await?;
    assert!(
        run.warnings
            .iter()
            .any(|w| w.contains("fn:longest (reducer of field 'best') is not hosted")),
        "{:?}",
        run.warnings
    );
    // The merge waits for a worker that hosts the reducer, then uses it.
    cluster.add_test_worker("reducer", 1, Some("none"))?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["best"], json!("abcd"));
    Ok(())
}

#[tokio::test]
async fn a_draining_worker_starts_nothing_new_during_a_map() -> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["leaving", "staying"], 2).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_graph(&doubling_map(12, 300, 4), &json!({}))
        .await?;
    cluster.wait_for_log("leaving", "started item").await?;
    cluster.signal_worker("leaving", "TERM")?;
    cluster
        .wait_for_log("coordinator", "worker draining")
        .await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let results = done.state["results"].as_array().unwrap();
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["doubled"], json!(i * 2), "item {i}");
    }
    // Every item the leaving worker started, it had taken before it
    // drained: those it started after saying so were in flight then (taken,
    // their handler not yet running), never one sent after.
    let log = cluster.log("leaving");
    let drained_at = log
        .find("draining: finishing tasks in flight")
        .expect("the worker logged its drain");
    let in_flight: usize = log[drained_at..]
        .split("in_flight=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .expect("the drain names the tasks in flight");
    assert!(
        log[drained_at..].matches("started item").count() <= in_flight,
        "an item started on a draining worker that was not in flight:\n{log}"
    );
    let on_leaving = results
        .iter()
        .filter(|r| r["worker"] == json!("leaving"))
        .count();
    assert_eq!(
        on_leaving,
        log.matches("started item").count(),
        "the leaving worker finished what it started"
    );
    assert!(on_leaving < 12, "the staying worker took the rest");
    Ok(())
}

/// The flag that lets a worker's scripts reach it.
fn unconfined() -> Vec<String> {
    vec!["--sandbox".to_owned(), "off".to_owned()]
}

#[tokio::test]
async fn a_task_that_kills_its_workers_fails_the_run_and_later_workers_survive()
-> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    // Unconfined workers: a confined script cannot reach its worker (the
    // containment tests show it); this is what stands when a worker dies
    // all the same (its machine's OOM killer, a crash).
    for name in ["w1", "w2", "w3"] {
        cluster.add_worker_with(name, 1, &unconfined())?;
    }
    cluster.wait_for_workers(&["w1", "w2", "w3"]).await?;
    let client = cluster.client().await?;
    // `sh -c` runs as the worker's child, so $PPID is the worker.
    let graph = GraphBuilder::new("assassin").node(
        "assassin",
        NodeBuilder::script(&["sh", "-c", "kill -9 $PPID; sleep 5"]).start(),
    );
    let run = client.submit_graph(&graph, &json!({})).await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.expect("a failed run has an error");
    assert_eq!(error.node, "assassin");
    assert!(
        error.message.contains("lost its worker 2 times"),
        "{}",
        error.message
    );
    // Two of the three were spent (max_task_losses, 2 by default); the
    // third survives.
    let named = ["w1", "w2", "w3"]
        .into_iter()
        .filter(|name| error.message.contains(name))
        .count();
    assert_eq!(named, 2, "{}", error.message);
    // A worker that joins afterwards is not sent the task again.
    cluster.add_worker("w4", 1)?;
    cluster.wait_for_workers(&["w4"]).await?;
    let graph = GraphBuilder::new("harmless").node(
        "hello",
        NodeBuilder::script(&["sh", "-c", "echo '{\"greeting\": \"hi\"}'"]).start(),
    );
    let run = client.submit_graph(&graph, &json!({})).await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["greeting"], json!("hi"));
    assert!(cluster.worker_pid("w4").is_some());
    assert!(
        !cluster.log("coordinator").contains("name=w4 reason"),
        "w4 was never lost"
    );
    Ok(())
}

#[tokio::test]
async fn a_poison_pill_with_retry_kills_no_more_workers_than_its_budget() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    let names = ["w1", "w2", "w3", "w4"];
    for name in names {
        cluster.add_worker_with(name, 1, &unconfined())?;
    }
    cluster.wait_for_workers(&names).await?;
    let client = cluster.client().await?;
    // Its retry must not send it on to a third worker: `worker_lost`
    // after max_task_losses (2 by default, short of the fleet) is final.
    let yaml = "nodes:\n  pill: { kind: script, run: [sh, -c, 'kill -9 $PPID; sleep 5'], start: true, retry: { max_attempts: 2 } }\n";
    let run = client
        .submit_bundle(
            weft_client::GraphBundle::from_text("pill.yaml", yaml),
            &json!({}),
        )
        .await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.expect("a failed run has an error");
    assert!(
        error.message.contains("lost its worker 2 times"),
        "{}",
        error.message
    );
    // A killed worker is a zombie until reaped: alive means running.
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    };
    let alive: Vec<&str> = names
        .into_iter()
        .filter(|name| cluster.worker_pid(name).is_some_and(running))
        .collect();
    assert_eq!(alive.len(), 2, "two workers survive: {alive:?}");
    let retried = weft_tests::events_of(&client, &run.run_id, "node_retrying").await?;
    assert!(retried.is_empty(), "the pill was retried: {retried:?}");
    Ok(())
}

#[tokio::test]
async fn a_name_a_connected_worker_holds_is_refused_until_it_is_free() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w1", 1)?;
    cluster.wait_for_workers(&["w1"]).await?;
    let hello = || pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Hello(pb::Hello {
            protocol_version: weft_proto::PROTOCOL_VERSION,
            name: "w1".into(),
            slots: 1,
            ..Default::default()
        })),
    };
    let mut client =
        pb::worker_service_client::WorkerServiceClient::connect(cluster.url().to_owned()).await?;
    let status = client
        .join(tokio_stream::iter(vec![hello()]))
        .await
        .expect_err("a second 'w1' is refused");
    assert_eq!(status.code(), tonic::Code::AlreadyExists, "{status:?}");
    assert!(
        status
            .message()
            .contains("a worker named 'w1' is already connected"),
        "{}",
        status.message()
    );
    cluster
        .wait_for_log("coordinator", "its name is taken")
        .await?;
    // The real w1 kept its place: a run is credited to it.
    let graph = GraphBuilder::new("hello").node(
        "say",
        NodeBuilder::script(&["sh", "-c", "echo '{\"said\": 1}'"]).start(),
    );
    let client_api = cluster.client().await?;
    let run = client_api.submit_graph(&graph, &json!({})).await?;
    let done = tokio::time::timeout(PATIENCE, client_api.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let finished = weft_tests::events_of(&client_api, &run.run_id, "node_finished").await?;
    assert_eq!(finished[0].body["worker"], "w1");
    // A real worker misnamed 'w1' says why it waits, and keeps trying...
    let twin_log = cluster.dir().join("twin.log");
    let twin_err = cluster.dir().join("twin.err");
    let mut twin = Command::new(weft_tests::binary("worker"))
        .args([
            "--coordinator",
            cluster.url(),
            "--name",
            "w1",
            "--slots",
            "1",
        ])
        .arg("--work-dir")
        .arg(cluster.dir().join("twin"))
        .stdout(std::fs::File::create(&twin_log)?)
        .stderr(std::fs::File::create(&twin_err)?)
        .spawn()?;
    let said = |text: &'static str| {
        let (out, err) = (twin_log.clone(), twin_err.clone());
        move || {
            [&out, &err]
                .iter()
                .any(|path| std::fs::read_to_string(path).is_ok_and(|log| log.contains(text)))
        }
    };
    let waited = weft_tests::wait_until(
        PATIENCE,
        said("the coordinator refused this worker's name for now; trying again"),
    )
    .await;
    // ...and once the holder is gone, the name is free again: the twin
    // joins (as a worker that reconnects after its loss was noticed).
    cluster.kill_worker("w1")?;
    cluster.wait_for_log("coordinator", "worker lost").await?;
    let joined = weft_tests::wait_until(PATIENCE, said("joined the coordinator")).await;
    let _ = twin.kill();
    let _ = twin.wait();
    waited?;
    joined?;
    Ok(())
}

/// Joins as a worker hosting `handler` that heartbeats but never answers a
/// task; returns what the coordinator sends it.
async fn join_as_a_silent_worker(
    cluster: &TestCluster,
    handler: &str,
) -> anyhow::Result<(
    tokio::sync::mpsc::Sender<pb::WorkerMessage>,
    tonic::Streaming<pb::CoordinatorMessage>,
)> {
    let mut client =
        pb::worker_service_client::WorkerServiceClient::connect(cluster.url().to_owned()).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Hello(pb::Hello {
            protocol_version: weft_proto::PROTOCOL_VERSION,
            name: "mute".into(),
            slots: 1,
            handlers: vec![handler.into()],
            ..Default::default()
        })),
    })
    .await?;
    let inbound = client
        .join(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let beats = tx.clone();
    tokio::spawn(async move {
        let beat = pb::WorkerMessage {
            body: Some(pb::worker_message::Body::Heartbeat(pb::Heartbeat {
                at_unix_ms: 0,
            })),
        };
        while beats.send(beat.clone()).await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    Ok((tx, inbound))
}

#[tokio::test]
async fn a_worker_that_heartbeats_but_never_answers_times_the_task_out() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let (_keep, mut inbound) = join_as_a_silent_worker(&cluster, "late").await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("mute").node(
        "never",
        NodeBuilder::task("late").start().set("timeout", "1s"),
    );
    let run = client.submit_graph(&graph, &json!({})).await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.expect("a failed run has an error");
    assert_eq!(error.node, "never");
    assert!(
        error.message.contains("did not answer within its timeout"),
        "{}",
        error.message
    );
    // The worker was told to stop the task it never answered.
    let mut got_task = false;
    loop {
        let message = tokio::time::timeout(PATIENCE, inbound.message())
            .await??
            .expect("the stream stays open");
        match message.body {
            Some(pb::coordinator_message::Body::Task(task)) => {
                assert_eq!(task.node, "never");
                got_task = true;
            }
            Some(pb::coordinator_message::Body::Cancel(cancel)) => {
                assert!(got_task, "the cancel follows the task");
                assert_eq!(cancel.run_id, run.run_id);
                break;
            }
            _ => {}
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_misspelt_function_gets_a_did_you_mean_from_what_workers_announced() -> anyhow::Result<()>
{
    let mut cluster = TestCluster::start()?;
    cluster.add_test_worker("hosts", 1, Some("none"))?;
    cluster.wait_for_workers(&["hosts"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("typo")
        .field_with_reducer("best", "string", "", "fn:longets")
        .node(
            "one",
            NodeBuilder::script(&["python3", "-c", "print('{\"best\": \"ab\"}')"]).start(),
        );
    let run = client.submit_graph(&graph, &json!({})).await?;
    assert!(
        run.warnings.iter().any(|w| w
            .contains("fn:longets (reducer of field 'best') is not hosted")
            && w.contains("(did you mean fn:longest?)")),
        "{:?}",
        run.warnings
    );
    client.cancel(&run.run_id).await?;
    Ok(())
}

/// A `Worker::run` future dropped (the task awaiting it aborted) stops the
/// worker as a shutdown does: the task in flight finishes, its result
/// reaches the run, then the worker leaves. (The worker's life is a task
/// of its own on the runtime's pool; before, it went with the future, and
/// the task's result was lost with the connection.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_run_is_dropped_finishes_its_task_then_leaves() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let connected = |count: u32| {
        let line = format!("weft_workers_connected {count}");
        let cluster = &cluster;
        move || cluster.metrics().is_ok_and(|m| m.contains(&line))
    };
    let (started, mut start) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut worker = weft_worker::Worker::new(cluster.url());
    worker.name("dropped").slots(1).scripts(false);
    worker.handler("slow", move |_: serde_json::Value, _| {
        let started = started.clone();
        async move {
            let _ = started.send(());
            tokio::time::sleep(std::time::Duration::from_millis(800)).await;
            Ok::<_, String>(json!({"done": true}))
        }
    });
    let running =
        tokio::spawn(async move { worker.run(tokio_util::sync::CancellationToken::new()).await });
    weft_tests::wait_until(PATIENCE, connected(1)).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("slow")
        .field("done", "boolean", false)
        .node("slow", NodeBuilder::task("slow").start());
    let run = client.submit_graph(&graph, &json!({})).await?;
    tokio::time::timeout(PATIENCE, start.recv()).await?;
    running.abort();
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["done"], json!(true));
    weft_tests::wait_until(PATIENCE, connected(0)).await?;
    Ok(())
}

#[tokio::test]
async fn a_worker_that_shares_its_slots_may_start_with_none_but_not_with_more_than_it_has()
-> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let hello = |name: &str, slots, shared_slots| pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Hello(pb::Hello {
            protocol_version: weft_proto::PROTOCOL_VERSION,
            name: name.into(),
            slots,
            shared_slots,
            ..Default::default()
        })),
    };
    let mut client =
        pb::worker_service_client::WorkerServiceClient::connect(cluster.url().to_owned()).await?;
    let status = client
        .join(tokio_stream::iter(vec![hello("greedy", 3, 2)]))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "worker 'greedy' gave this coordinator a share of 3 slots, more than its 2 in all (shared_slots)"
    );
    let status = client
        .join(tokio_stream::iter(vec![hello("idle", 0, 0)]))
        .await
        .expect_err("refused");
    assert_eq!(status.message(), "worker 'idle' announced 0 slots");
    // No share yet, slots to share: welcomed.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(hello("patient", 0, 2)).await?;
    let mut inbound = client
        .join(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let first = inbound.message().await?.expect("a first message");
    assert!(
        matches!(first.body, Some(pb::coordinator_message::Body::Welcome(_))),
        "{first:?}"
    );
    // … and told the coordinator's demand: nothing queued.
    let told = tokio::time::timeout(PATIENCE, async {
        loop {
            match inbound.message().await? {
                Some(pb::CoordinatorMessage {
                    body: Some(pb::coordinator_message::Body::Demand(demand)),
                }) => return anyhow::Ok(demand.queued),
                Some(_) => {}
                None => anyhow::bail!("the stream ended"),
            }
        }
    })
    .await??;
    assert_eq!(told, 0);
    drop(tx);
    Ok(())
}
