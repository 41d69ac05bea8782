//! Graphs run across real processes: a coordinator, `worker` binaries and
//! `test-worker`s with Rust handlers, talking gRPC on loopback.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use weft_client::{GraphBuilder, NodeBuilder, RunStatus};
use weft_tests::{PATIENCE, TestCluster, doubling_map, repo, wait_for_event};

fn example(name: &str) -> std::path::PathBuf {
    repo().join("examples").join(name)
}

#[tokio::test]
async fn seed_examples_run_end_to_end() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w1", 2)?;
    cluster.add_worker("w2", 2)?;
    cluster.wait_for_workers(&["w1", "w2"]).await?;
    let client = cluster.client().await?;

    let run = client
        .submit_file(&example("critique-loop.yaml"), &json!({"topic": "Weft"}))
        .await?;
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["drafts"], json!(3));
    assert_eq!(
        done.state["rubric"],
        json!("clear, short, with one example")
    );
    assert!(
        done.state["final"]
            .as_str()
            .unwrap()
            .contains("For example")
    );

    let run = client
        .submit_file(
            &example("parallel-findings.yaml"),
            &json!({"topic": "rust"}),
        )
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(
        done.state["findings"],
        json!(["plan: rust", "web: three blog posts", "papers: two surveys"])
    );

    let subjects = json!({"subjects": ["tokio", "tonic", "serde", "prost", "axum"]});
    let run = client
        .submit_file(&example("research-map.yaml"), &subjects)
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let results = done.state["research_results"].as_array().unwrap().clone();
    let expected: Vec<Value> = ["tokio", "tonic", "serde", "prost", "axum"]
        .iter()
        .map(|s| json!(format!("{s}: overview with details and sources")))
        .collect();
    assert_eq!(results, expected, "results are collected in input order");
    Ok(())
}

#[tokio::test]
async fn map_items_spread_over_three_workers() -> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["a", "b", "c"], 2).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_graph(&doubling_map(30, 40, 6), &json!({}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let results = done.state["results"].as_array().unwrap();
    assert_eq!(results.len(), 30);
    let mut workers = BTreeSet::new();
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["doubled"], json!(i * 2), "item {i}");
        workers.insert(result["worker"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        workers,
        BTreeSet::from(["a".to_owned(), "b".to_owned(), "c".to_owned()])
    );
    // The item node's definition and the run's bundle list crossed once to
    // each worker; the other tasks named them by number.
    let metrics = cluster.metrics()?;
    for line in [
        "weft_tasks_dispatched_total 30",
        "weft_node_definitions_sent_total 3",
        "weft_bundle_lists_sent_total 3",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    Ok(())
}

/// The bytes of state values the coordinator has sent its workers so far.
fn state_bytes_sent(cluster: &TestCluster) -> anyhow::Result<u64> {
    cluster.counter("weft_state_bytes_sent_total")
}

#[tokio::test]
async fn a_handler_receives_only_the_fields_its_state_type_names() -> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["a"], 2).await?;
    let client = cluster.client().await?;
    let blob = "x".repeat(1_000_000);
    let input = json!({"blob": blob, "counter": 0});
    let graph = |last: &str| {
        GraphBuilder::new("reads")
            .field("blob", "string", "")
            .field("counter", "integer", 0)
            .field("blob_length", "integer", 0)
            .node("one", NodeBuilder::task("increment").start().next(&["two"]))
            .node("two", NodeBuilder::task(last))
    };
    // Two handlers whose state type is `{counter}`: the megabyte beside it
    // never crosses to the worker.
    let run = client.submit_graph(&graph("increment"), &input).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["counter"], json!(2));
    assert_eq!(done.state["blob"].as_str().map(str::len), Some(1_000_000));
    let sent = state_bytes_sent(&cluster)?;
    assert!(sent < 1_000, "{sent} bytes of state sent for two counters");
    // A handler that reads the whole state, on the same worker, gets the
    // blob (which that worker never held) once.
    let run = client.submit_graph(&graph("measure"), &input).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["blob_length"], json!(1_000_000));
    let more = state_bytes_sent(&cluster)? - sent;
    assert!(
        (1_000_002..1_001_000).contains(&more),
        "{more} bytes sent for a counter and a megabyte"
    );
    Ok(())
}

#[tokio::test]
async fn killing_a_worker_mid_map_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    let mut cluster = TestCluster::with_test_workers(&["a", "b", "c"], 2).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_graph(&doubling_map(40, 150, 6), &json!({}))
        .await?;
    // Wait until several items are done, then kill one worker outright.
    let mut events = client.watch(&run.run_id, 0).await?;
    let mut finished = 0;
    while let Some(event) = tokio::time::timeout(PATIENCE, events.next()).await? {
        if event?.kind == "map_item_finished" {
            finished += 1;
            if finished == 6 {
                break;
            }
        }
    }
    cluster.kill_worker("b")?;
    cluster.wait_for_log("coordinator", "worker lost").await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let results = done.state["results"].as_array().unwrap();
    assert_eq!(results.len(), 40);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["doubled"], json!(i * 2), "item {i}");
    }
    // Each item merged exactly once (results land in slots by index, so
    // only the log shows a double merge), and counted once.
    let log = weft_tests::events_of(&client, &run.run_id, "node_finished").await?;
    let mut merged = std::collections::BTreeMap::<u64, usize>::new();
    for event in &log {
        if let Some(item) = event.body["item"].as_u64() {
            *merged.entry(item).or_default() += 1;
        }
    }
    assert_eq!(merged.len(), 40, "{merged:?}");
    assert!(merged.values().all(|&n| n == 1), "merged twice: {merged:?}");
    let progress: Vec<u64> = weft_tests::events_of(&client, &run.run_id, "map_item_finished")
        .await?
        .iter()
        .filter_map(|e| e.body["done"].as_u64())
        .collect();
    assert_eq!(
        progress,
        (1..=40).collect::<Vec<_>>(),
        "each item finished once"
    );
    // The items b held went out again, each counted by one event naming b
    // (it had its 2 slots busy, bar a result landing as it died).
    let resent = weft_tests::events_of(&client, &run.run_id, "task_redispatched").await?;
    assert!(
        (1..=2).contains(&resent.len()),
        "b's items in flight are sent again once each: {resent:?}"
    );
    for event in &resent {
        assert_eq!(event.body["reason"], "worker_lost", "{event:?}");
        assert_eq!(event.body["worker"], "b", "{event:?}");
        assert_eq!(event.body["attempt"], 1, "{event:?}");
        assert!(event.body["item"].is_u64(), "{event:?}");
    }
    // b is credited only with what it finished before it died: the 6
    // items seen finished, and at most its 2 slots' worth more that were
    // ending as it was killed.
    let on_b = results.iter().filter(|r| r["worker"] == "b").count();
    assert!(on_b <= 6 + 2, "{on_b} items credited to the killed worker");
    let credited: BTreeSet<&str> = results
        .iter()
        .filter_map(|r| r["worker"].as_str())
        .collect();
    assert!(
        credited.is_subset(&BTreeSet::from(["a", "b", "c"])),
        "{credited:?}"
    );
    Ok(())
}

#[tokio::test]
async fn failing_script_names_the_node_and_carries_stderr() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("broken").node(
        "explode",
        NodeBuilder::script(&[
            "python3",
            "-c",
            "import sys; sys.stderr.write('kaboom: disk on fire\\n'); sys.exit(3)",
        ])
        .start(),
    );
    let run = client.submit_graph(&graph, &json!({})).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.expect("a failed run has an error");
    assert_eq!(error.kind, "ExecutionError");
    assert_eq!(error.node, "explode");
    assert!(
        error.message.contains("script exited with status 3"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("kaboom: disk on fire"),
        "{}",
        error.message
    );
    Ok(())
}

#[tokio::test]
async fn unhosted_handler_waits_until_a_worker_hosts_it() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_test_worker("plain", 1, Some("increment"))?;
    cluster.wait_for_workers(&["plain"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("late").node("wait_for_me", NodeBuilder::task("late").start());
    let run = client.submit_graph(&graph, &json!({})).await?;
    assert!(
        run.warnings
            .iter()
            .any(|w| w.contains("handler 'late'") && w.contains("no connected worker hosts")),
        "{:?}",
        run.warnings
    );
    let unhosted = wait_for_event(&client, &run.run_id, "task_unhosted").await?;
    assert_eq!(unhosted.body["needs"], json!("handler 'late'"));
    // The wait is visible in the metrics too.
    weft_tests::wait_until(PATIENCE, || {
        cluster
            .metrics()
            .is_ok_and(|m| m.contains("weft_tasks_unhosted 1"))
    })
    .await?;
    let polled = client.status(&run.run_id).await?;
    assert_eq!(polled.status, RunStatus::Running);
    assert!(
        polled.state.is_null(),
        "status polling leaves the state out"
    );
    cluster.add_test_worker("latecomer", 1, Some("late"))?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state["late"], json!("done"));
    let metrics = cluster.metrics()?;
    for line in [
        "weft_tasks_unhosted 0",
        "weft_workers_connected 2",
        "weft_runs{status=\"completed\"} 1",
        "weft_tasks_dispatched_total 1",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    // A histogram with buckets: what the dashboard's p50/p99 panels read.
    assert!(
        metrics.contains("weft_task_seconds_bucket{le=\"+Inf\"} 1"),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test]
async fn approval_waits_then_resumes() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_file(&example("review-approval.yaml"), &json!({"title": "Weft"}))
        .await?;
    let waiting = client.wait(&run.run_id).await?;
    assert_eq!(waiting.status, RunStatus::Waiting);
    assert_eq!(waiting.waiting.len(), 1);
    assert_eq!(waiting.waiting[0].node, "approve");
    assert!(
        waiting.waiting[0].prompt.starts_with("Publish 'Weft'?"),
        "{}",
        waiting.waiting[0].prompt
    );
    // A bad answer is refused and changes nothing.
    assert!(
        client
            .resume(&run.run_id, "approve", &json!("maybe"), None)
            .await
            .is_err()
    );
    client
        .resume(&run.run_id, "approve", &json!("approve"), Some("ship it"))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["approved"], json!(true));
    assert_eq!(done.state["approved_comment"], json!("ship it"));
    assert_eq!(done.state["published_to"], json!("stdout"));
    Ok(())
}

#[tokio::test]
async fn cancel_stops_a_running_run() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_test_worker("w", 1, None)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBuilder::new("slow")
        .field("delay_ms", "integer", 60_000)
        .node("nap", NodeBuilder::task("sleep").start().next(&["after"]))
        .node("after", NodeBuilder::task("increment"));
    let run = client.submit_graph(&graph, &json!({})).await?;
    wait_for_event(&client, &run.run_id, "node_started").await?;
    let cancelled = client.cancel(&run.run_id).await?;
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(
        cancelled.error.map(|e| e.kind),
        Some("Cancelled".to_owned())
    );
    // The worker's slot is free again: another run completes on it.
    let quick = GraphBuilder::new("quick")
        .field("counter", "integer", 1)
        .node("inc", NodeBuilder::task("increment").start());
    let run = client.submit_graph(&quick, &json!({})).await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.state["counter"], json!(2));
    Ok(())
}

#[tokio::test]
async fn a_script_past_its_timeout_is_killed_with_its_whole_process_group() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    // The script starts a grandchild, then hangs. Scripts run in PID
    // namespaces of their own, so the grandchild is found from outside by
    // its unique argument, not by the pid it has inside.
    let marker = format!("300.{}", std::process::id());
    let code = format!("sleep {marker} & wait");
    let graph = GraphBuilder::new("hangs").node(
        "hang",
        NodeBuilder::script(&["sh", "-c", &code])
            .start()
            .set("timeout", "3s"),
    );
    let sleeping = || {
        std::fs::read_dir("/proc").is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|entry| {
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                std::fs::read(entry.path().join("cmdline"))
                    .is_ok_and(|c| c.ends_with(format!("sleep\0{marker}\0").as_bytes()))
                    && !stat.contains(") Z ")
            })
        })
    };
    let run = client.submit_graph(&graph, &json!({})).await?;
    // The grandchild runs (for the 3 s until the timeout)…
    weft_tests::wait_until(PATIENCE, sleeping).await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.expect("an error");
    assert_eq!(error.node, "hang");
    assert!(
        error
            .message
            .contains("timeout: script timed out after 3s and was killed"),
        "{}",
        error.message
    );
    // …and is gone with its script.
    weft_tests::wait_until(PATIENCE, || !sleeping()).await?;
    Ok(())
}

#[tokio::test]
async fn scripts_get_the_protocol_environment_and_their_env_map() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let code = "import json, os, sys\n\
                request = json.load(sys.stdin)\n\
                on_disk = json.load(open(os.environ['GRAPH_STATE']))\n\
                json.dump({'seen': {\n\
                  'node': os.environ['WEFT_NODE'], 'attempt': os.environ['WEFT_ATTEMPT'],\n\
                  'run_matches': os.environ['WEFT_RUN_ID'] == request['run_id'],\n\
                  'item': os.environ['WEFT_ITEM'], 'greeting': os.environ['GREETING'],\n\
                  'topic_on_disk': on_disk['topic'], 'topic_on_stdin': request['state']['topic'],\n\
                  'cwd_is_scratch': os.getcwd() != '/'}}, sys.stdout)\n";
    let graph = GraphBuilder::new("env").node(
        "probe",
        NodeBuilder::script(&["python3", "-c", code])
            .start()
            .set("env", json!({"GREETING": "hello"})),
    );
    let run = client
        .submit_graph(&graph, &json!({"topic": "weft"}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["seen"],
        json!({
            "node": "probe", "attempt": "1", "run_matches": true, "item": "", "greeting": "hello",
            "topic_on_disk": "weft", "topic_on_stdin": "weft", "cwd_is_scratch": true
        })
    );
    Ok(())
}

/// A watch that names event types gets those alone, each with its place in
/// the log; a type that no event has is refused with the list. `wait`
/// relies on it to skip a map's item events.
#[tokio::test]
async fn a_watch_that_names_types_gets_only_those() -> anyhow::Result<()> {
    use weft_proto::v1 as pb;
    use weft_proto::v1::run_event::Event as Kind;

    let cluster = TestCluster::with_test_workers(&["a"], 4).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_graph(&doubling_map(12, 0, 4), &json!({}))
        .await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let every = weft_tests::events_of(&client, &run.run_id, "node_started").await?;
    assert_eq!(every.len(), 12, "the 12 items started");

    let mut runs =
        pb::run_service_client::RunServiceClient::connect(cluster.url().to_owned()).await?;
    let watch = |types: &[&str]| pb::WatchRunRequest {
        run_id: run.run_id.to_string(),
        from: 0,
        types: types.iter().map(|t| t.to_string()).collect(),
    };
    let mut stream = runs
        .watch_run(watch(&["map_item_finished", "run_finished"]))
        .await?
        .into_inner();
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(PATIENCE, stream.message()).await?? {
        seen.push(event);
    }
    let items = seen
        .iter()
        .filter(|e| matches!(e.event, Some(Kind::MapItemFinished(_))))
        .count();
    assert_eq!(items, 12, "every item's event");
    assert!(
        matches!(
            seen.last().and_then(|e| e.event.as_ref()),
            Some(Kind::RunFinished(_))
        ),
        "the run's end comes last"
    );
    assert_eq!(seen.len(), 13, "nothing else: {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0].seq < w[1].seq) && seen[0].seq > 0,
        "each keeps its place in the log"
    );

    let Err(refused) = runs.watch_run(watch(&["run_finished", "run_ended"])).await else {
        panic!("an unknown type is refused");
    };
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused
            .message()
            .contains("'run_ended' is not an event type"),
        "{}",
        refused.message()
    );
    Ok(())
}

#[tokio::test]
async fn a_lazy_client_connects_on_its_first_call_and_its_refusals_are_typed() -> anyhow::Result<()>
{
    use weft_client::{Client, ClientError, ClientTls, GraphBundle};

    // Nothing listens there: made all the same, refused on the call.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let nowhere = Client::connect_lazy(&format!("http://127.0.0.1:{port}"), &ClientTls::default())?;
    let refused = nowhere.resume("run-x", "a", &json!("approve"), None).await;
    assert!(
        matches!(refused, Err(ClientError::Unreachable { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        Client::connect_lazy("not a url", &ClientTls::default()),
        Err(ClientError::Invalid(_))
    ));

    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w1", 1)?;
    cluster.wait_for_workers(&["w1"]).await?;
    let client = Client::connect_lazy(cluster.url(), &ClientTls::default())?;
    let valid = GraphBuilder::new("one").field("n", "integer", 1).node(
        "a",
        NodeBuilder::script(&["sh", "-c", "echo '{\"n\": 2}'"])
            .start()
            .terminal(),
    );
    assert_eq!(client.validate(valid.bundle()).await?, Vec::new());
    let invalid = GraphBundle::from_text("g.yaml", "nodes:\n  a: {kind: script, start: true}\n");
    let findings = client.validate(invalid).await?;
    assert!(
        findings
            .iter()
            .any(|f| f.severity == "error" && f.message.contains("requires `run: [argv…]`")),
        "{findings:?}"
    );
    assert!(
        findings[0].to_string().starts_with("error: "),
        "{findings:?}"
    );

    let run = client.submit_graph(&valid, &json!({})).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.state["n"], json!(2));
    match client.get("run-nope").await {
        Err(ClientError::NotFound(message)) => {
            assert!(message.contains("unknown run"), "{message}")
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    match client
        .resume(&run.run_id, "a", &json!("approve"), None)
        .await
    {
        Err(ClientError::Rejected(_)) => {}
        other => panic!("expected Rejected, got {other:?}"),
    }
    Ok(())
}
