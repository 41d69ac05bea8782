//! Hostile and careless input against a real coordinator (issue #8): each
//! request must be refused (or run) with a clear answer, quickly, and leave
//! the coordinator serving everyone else.

use std::time::Duration;

use weft_proto::v1 as pb;
use weft_proto::v1::run_service_client::RunServiceClient;
use weft_tests::TestCluster;

/// How long one hostile request may take before the test calls it a freeze;
/// generous on a loaded machine, far below the minutes the bugs took.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

async fn runs(
    cluster: &TestCluster,
) -> anyhow::Result<RunServiceClient<tonic::transport::Channel>> {
    Ok(RunServiceClient::connect(cluster.url().to_owned())
        .await?
        .max_decoding_message_size(weft_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(weft_proto::MAX_MESSAGE_BYTES))
}

fn bundle(name: &str, text: String) -> pb::GraphBundle {
    pb::GraphBundle {
        graph_path: name.to_owned(),
        files: vec![pb::BundleFile {
            path: name.to_owned(),
            content: text.into_bytes(),
            mode: 0o644,
        }],
    }
}

/// Submits `text` as a graph; the refusal's message, or the run id.
async fn submit(
    client: &mut RunServiceClient<tonic::transport::Channel>,
    name: &str,
    text: String,
) -> Result<String, tonic::Status> {
    let request = pb::SubmitRequest {
        bundle: Some(bundle(name, text)),
        input_json: String::new(),
        ..Default::default()
    };
    let answer = tokio::time::timeout(ANSWER_WITHIN, client.submit(request))
        .await
        .expect("the coordinator answers instead of freezing");
    answer.map(|r| r.into_inner().run_id)
}

/// The coordinator still runs a small graph end to end.
async fn still_serves(cluster: &TestCluster) -> anyhow::Result<()> {
    let client = cluster.client().await?;
    let path = weft_tests::repo()
        .join("examples")
        .join("parallel-findings.yaml");
    let submitted = client.submit_file(&path, &serde_json::json!({})).await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, weft_client::RunStatus::Completed);
    Ok(())
}

#[tokio::test]
async fn huge_names_are_refused_without_a_quadratic_suggestion() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    let mut client = runs(&cluster).await?;
    let id = "n".repeat(30_000);
    let target = "m".repeat(30_000);
    let graph = serde_json::json!({"nodes": {id: {"kind": "end", "start": true, "next": target}}});
    let refused = submit(&mut client, "huge.json", graph.to_string())
        .await
        .expect_err("refused");
    assert!(
        refused
            .message()
            .contains("is 30000 characters long; names are at most 128"),
        "{}",
        refused.message()
    );
    assert!(refused.message().len() < 1_000, "the answer stays short");
    still_serves(&cluster).await
}

#[tokio::test]
async fn a_result_with_too_many_fields_fails_its_node_quickly() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let mut client = runs(&cluster).await?;
    // 100,000 fields took 16 s to merge, and workers were lost meanwhile.
    let graph = r#"
nodes:
  wide:
    kind: script
    start: true
    run: [python3, -c, 'import json; print(json.dumps({f"f{i}": i for i in range(100000)}))']
"#;
    let run_id = submit(&mut client, "wide.yaml", graph.to_owned())
        .await
        .expect("accepted");
    let done = cluster.client().await?.wait(&run_id).await?;
    assert_eq!(done.status, weft_client::RunStatus::Failed);
    let message = done.error.map(|e| e.message).unwrap_or_default();
    assert!(
        message.contains("the task wrote 100000 fields; a task writes at most 10000 (configuration key max_output_fields)"),
        "{message}"
    );
    still_serves(&cluster).await
}

#[tokio::test]
async fn a_graph_asking_for_more_than_the_limits_is_refused_naming_the_key() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let mut client = runs(&cluster).await?;
    let graph = "settings: { max_steps: 1000000 }\nnodes:\n  a: { kind: script, run: [\"true\"], start: true, retry: 100000 }\n";
    let refused = submit(&mut client, "greedy.yaml", graph.to_owned())
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("settings.max_steps is 1000000; this coordinator allows at most 100000 (configuration key max_steps)"),
        "{}",
        refused.message()
    );
    assert!(
        refused
            .message()
            .contains("node 'a': retry.max_attempts is 100000"),
        "{}",
        refused.message()
    );
    Ok(())
}

#[tokio::test]
async fn an_expression_too_costly_for_the_state_fails_its_node_at_once() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    // This condition over 400 items froze the coordinator for 17 s.
    let graph = r#"
nodes:
  a: { kind: script, run: [sh, -c, 'echo "{}"'], start: true }
  b: { kind: script, run: [sh, -c, 'echo "{}"'] }
edges:
  - { from: a, to: b, when: "state.l.all(x, state.l.all(y, state.l.all(z, true)))" }
"#;
    let items: Vec<u32> = (0..400).collect();
    let bundle = weft_client::GraphBundle::from_text("costly.yaml", graph);
    let submitted = client
        .submit_bundle(bundle, &serde_json::json!({ "l": items }))
        .await?;
    let done = tokio::time::timeout(ANSWER_WITHIN, client.wait(&submitted.run_id))
        .await
        .expect("the run ends instead of freezing")?;
    assert_eq!(done.status, weft_client::RunStatus::Failed);
    let error = done.error.expect("an error");
    assert_eq!(error.kind, "ExpressionTooCostly");
    assert!(
        error
            .message
            .contains("steps on this state (macros iterate over lists, nested 3 deep)"),
        "{}",
        error.message
    );
    still_serves(&cluster).await
}

#[tokio::test]
async fn a_condition_that_would_allocate_gigabytes_fails_its_node_and_the_coordinator_lives()
-> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    // A 6 KB condition of 512 `state.s + state.s` terms over an 8 MB input
    // aborted the coordinator (a failed allocation in `cel`'s string add),
    // and again at every restart as the run was recovered.
    let mut tree = "state.s".to_owned();
    for _ in 0..9 {
        tree = format!("({tree} + {tree})");
    }
    let graph = format!(
        "nodes:\n  a: {{ kind: script, run: [sh, -c, 'echo \"{{}}\"'], start: true }}\n  b: {{ kind: script, run: [sh, -c, 'echo \"{{}}\"'] }}\nedges:\n  - {{ from: a, to: b, when: \"size({tree}) > 0\" }}\n"
    );
    let bundle = weft_client::GraphBundle::from_text("bomb.yaml", &graph);
    let submitted = client
        .submit_bundle(bundle, &serde_json::json!({ "s": "x".repeat(8 << 20) }))
        .await?;
    let done = tokio::time::timeout(ANSWER_WITHIN, client.wait(&submitted.run_id))
        .await
        .expect("the run ends instead of taking the coordinator down")?;
    assert_eq!(done.status, weft_client::RunStatus::Failed);
    let error = done.error.expect("an error");
    assert_eq!(error.kind, "ExpressionTooCostly");
    assert_eq!(error.node, "a");
    assert!(
        error.message.contains("is too costly: it could allocate or read about 36.0 GiB on this state; an expression may use at most 64 MiB"),
        "{}",
        error.message
    );
    // A left-leaning chain over 1 MB would copy about 31 GB: refused too,
    // where it stalled the runtime for 20 s.
    let chain = vec!["state.s"; 250].join(" + ");
    let graph = format!(
        "nodes:\n  a: {{ kind: script, run: [sh, -c, 'echo \"{{}}\"'], start: true }}\n  b: {{ kind: script, run: [sh, -c, 'echo \"{{}}\"'] }}\nedges:\n  - {{ from: a, to: b, when: \"size({chain}) > 0\" }}\n"
    );
    let bundle = weft_client::GraphBundle::from_text("chain.yaml", &graph);
    let submitted = client
        .submit_bundle(bundle, &serde_json::json!({ "s": "x".repeat(1 << 20) }))
        .await?;
    let done = tokio::time::timeout(ANSWER_WITHIN, client.wait(&submitted.run_id))
        .await
        .expect("the run ends")?;
    assert_eq!(
        done.error.map(|e| e.kind).as_deref(),
        Some("ExpressionTooCostly")
    );
    still_serves(&cluster).await
}

#[tokio::test]
async fn a_run_whose_evaluations_spend_its_allowance_fails_naming_the_key() -> anyhow::Result<()> {
    // Each evaluation of the loop's condition reads a 1 MiB field: within
    // the per-evaluation budget, but a run of them adds up.
    let mut cluster = TestCluster::start_with_env(&[("WEFT_MAX_RUN_EVAL_BYTES", "4000000")])?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let graph = r#"
state:
  n: { type: integer, default: 0, reducer: add }
nodes:
  a: { kind: script, run: [sh, -c, 'echo "{\"n\": 1}"'], start: true, next: b }
  b: { kind: script, run: [sh, -c, 'echo "{}"'] }
edges:
  - { from: b, to: a, loop: true, when: "size(state.s) > 0" }
"#;
    let bundle = weft_client::GraphBundle::from_text("spender.yaml", graph);
    let submitted = client
        .submit_bundle(bundle, &serde_json::json!({ "s": "x".repeat(1 << 20) }))
        .await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&submitted.run_id))
        .await
        .expect("the run ends")?;
    assert_eq!(done.status, weft_client::RunStatus::Failed);
    let error = done.error.expect("an error");
    assert_eq!(error.kind, "ExpressionTooCostly");
    assert_eq!(error.node, "b");
    assert!(
        error
            .message
            .contains("a run may use at most 3.8 MiB (configuration key max_run_eval_bytes)"),
        "{}",
        error.message
    );
    // Without the allowance the loop would go on to the step limit.
    let laps = weft_tests::events_of(&client, &submitted.run_id, "loop_reset").await?;
    assert_eq!(
        laps.len(),
        3,
        "three evaluations of about 1 MiB fit in 3.8 MiB"
    );
    still_serves(&cluster).await
}

/// A graph of one script node that writes `{"done": true}`.
fn trivial() -> weft_client::GraphBundle {
    weft_client::GraphBundle::from_text(
        "trivial.yaml",
        "nodes:\n  a: { kind: script, run: [sh, -c, 'echo \"{\\\"done\\\": true}\"'], start: true }\n",
    )
}

#[tokio::test]
async fn ended_runs_are_kept_as_records_within_the_retention_and_listed_by_page()
-> anyhow::Result<()> {
    let mut cluster = TestCluster::start_with_env(&[("WEFT_RETAIN_FINISHED_RUNS", "2")])?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let submitted = client
            .submit_bundle(trivial(), &serde_json::json!({}))
            .await?;
        let done = client.wait(&submitted.run_id).await?;
        assert_eq!(done.state["done"], true);
        ids.push(submitted.run_id);
    }
    // Submitting (or listing) evicts the oldest ended run beyond two.
    let (page, next) = client.list_page(1, None).await?;
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].run_id, ids[2], "newest first");
    let (rest, last) = client.list_page(10, next.as_deref()).await?;
    assert_eq!(
        rest.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
        [ids[1].as_str()]
    );
    assert_eq!(last, None);
    assert!(
        client.get(&ids[0]).await.is_err(),
        "the oldest is forgotten"
    );
    // An ended run still answers: its view and its whole log.
    let kept = client.get(&ids[2]).await?;
    assert_eq!(kept.state["done"], true);
    // Forgotten for good: a restarted coordinator does not bring it back.
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    assert!(client.get(&ids[0]).await.is_err());
    assert_eq!(client.get(&ids[2]).await?.state["done"], true);
    Ok(())
}

#[tokio::test]
async fn ended_runs_older_than_the_retention_age_are_forgotten() -> anyhow::Result<()> {
    // An age of zero hours: any ended run is past it by the next
    // submission, however many runs are kept.
    let env = [
        ("WEFT_RETAIN_FINISHED_HOURS", "0"),
        ("WEFT_RETAIN_FINISHED_RUNS", "100"),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let old = client
        .submit_bundle(trivial(), &serde_json::json!({}))
        .await?;
    assert_eq!(client.wait(&old.run_id).await?.state["done"], true);
    // The next submission takes more than the millisecond that puts the
    // ended run past an age of zero.
    let new = client
        .submit_bundle(trivial(), &serde_json::json!({}))
        .await?;
    assert!(
        client.get(&old.run_id).await.is_err(),
        "the run past the retention age is forgotten"
    );
    assert_eq!(client.get(&new.run_id).await?.run_id, new.run_id);
    // Forgotten in the store too: a restart does not bring it back.
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    assert!(client.get(&old.run_id).await.is_err());
    Ok(())
}

#[tokio::test]
async fn watching_an_ended_run_from_its_end_returns_at_once() -> anyhow::Result<()> {
    use tokio_stream::StreamExt;
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let submitted = client
        .submit_bundle(trivial(), &serde_json::json!({}))
        .await?;
    let done = client.wait(&submitted.run_id).await?;
    for from in [done.event_count, done.event_count + 1000] {
        let events = client.watch(&submitted.run_id, from).await?;
        let seen: Vec<_> = tokio::time::timeout(ANSWER_WITHIN, events.collect::<Vec<_>>())
            .await
            .expect("the stream ends instead of waiting forever");
        assert!(seen.is_empty(), "nothing after the end: {seen:?}");
    }
    // From the start, the whole log, ending with run_finished.
    let events = client.watch(&submitted.run_id, 0).await?;
    let seen: Vec<_> = tokio::time::timeout(ANSWER_WITHIN, events.collect::<Vec<_>>()).await?;
    assert_eq!(seen.len() as u64, done.event_count);
    assert_eq!(
        seen.last()
            .and_then(|e| e.as_ref().ok())
            .map(|e| e.kind.as_str()),
        Some("run_finished")
    );
    Ok(())
}

#[tokio::test]
async fn a_run_that_fills_its_event_log_fails_naming_the_key() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start_with_env(&[("WEFT_MAX_EVENTS", "4")])?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let graph = r#"
nodes:
  a: { kind: script, run: [sh, -c, 'echo "{}"'], start: true, next: b }
  b: { kind: script, run: [sh, -c, 'echo "{}"'], next: c }
  c: { kind: script, run: [sh, -c, 'echo "{}"'] }
"#;
    let bundle = weft_client::GraphBundle::from_text("chatty.yaml", graph);
    let submitted = client.submit_bundle(bundle, &serde_json::json!({})).await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, weft_client::RunStatus::Failed);
    let error = done.error.expect("an error");
    assert_eq!(error.kind, "EventLimit");
    assert!(
        error.message.contains("configuration key max_events"),
        "{}",
        error.message
    );
    Ok(())
}

/// The value of a gauge in the coordinator's metrics.
fn gauge(cluster: &TestCluster, name: &str) -> anyhow::Result<f64> {
    let text = cluster.metrics()?;
    weft_tests::gauge(&text, name).ok_or_else(|| anyhow::anyhow!("no {name} in:\n{text}"))
}

#[tokio::test]
async fn bundle_files_are_released_with_the_runs_that_use_them() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let dir = std::env::temp_dir().join(format!("weft-hostile-blobs-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("data.bin"), vec![7u8; 1 << 20])?;
    std::fs::write(
        dir.join("g.yaml"),
        "nodes:\n  read: { kind: script, run: [sh, -c, 'wc -c < data.bin >&2; echo \"{}\"', x, data.bin], start: true, next: ok }\n  ok: { kind: approval, prompt: fine? }\n",
    )?;
    let client = cluster.client().await?;
    let submitted = client
        .submit_file(&dir.join("g.yaml"), &serde_json::json!({}))
        .await?;
    weft_tests::wait_for_event(&client, &submitted.run_id, "waiting_for_input").await?;
    assert!(gauge(&cluster, "weft_bundle_bytes")? >= f64::from(1 << 20));
    client.cancel(&submitted.run_id).await?;
    weft_tests::wait_until(Duration::from_secs(10), || {
        gauge(&cluster, "weft_bundle_bytes").is_ok_and(|bytes| bytes == 0.0)
    })
    .await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test]
async fn requests_and_results_are_bounded_by_the_configured_sizes() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start_with_env(&[
        ("WEFT_MAX_RESULT_BYTES", "1000"),
        ("WEFT_MAX_BUNDLE_BYTES", "100000"),
        ("WEFT_MAX_INPUT_BYTES", "100000"),
    ])?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    // A result over the limit is a failed attempt, reported by the worker;
    // the worker stays connected.
    let client = cluster.client().await?;
    let graph = r#"
nodes:
  big: { kind: script, run: [python3, -c, 'print("{\"x\": \"" + "y" * 5000 + "\"}")'], start: true }
"#;
    let bundle = weft_client::GraphBundle::from_text("big.yaml", graph);
    let submitted = client.submit_bundle(bundle, &serde_json::json!({})).await?;
    let done = client.wait(&submitted.run_id).await?;
    let message = done.error.map(|e| e.message).unwrap_or_default();
    assert!(
        message.contains("the coordinator takes at most 1000 (its max_result_bytes)"),
        "{message}"
    );
    // A request far over the submission size is refused before it is decoded.
    let mut runs = runs(&cluster).await?;
    let refused = submit(
        &mut runs,
        "huge.yaml",
        format!("# {}\n", "x".repeat(4 << 20)),
    )
    .await
    .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    assert!(refused.message().contains("too large"), "{refused:?}");
    still_serves(&cluster).await
}

#[tokio::test]
async fn a_bundle_file_leaves_the_store_with_the_last_run_that_uses_it() -> anyhow::Result<()> {
    use weft_store::Store;
    let mut cluster = TestCluster::start_with_env(&[("WEFT_RETAIN_FINISHED_RUNS", "1")])?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let graph = |comment: &str| {
        weft_client::GraphBundle::from_text(
            "g.yaml",
            &format!(
                "# {comment}\nnodes:\n  a: {{ kind: script, run: [sh, -c, 'echo \"{{}}\"'], start: true }}\n"
            ),
        )
    };
    // The first graph is used once; the second twice.
    for comment in ["first", "second", "second"] {
        let submitted = client
            .submit_bundle(graph(comment), &serde_json::json!({}))
            .await?;
        client.wait(&submitted.run_id).await?;
    }
    // Listing evicts the ended runs beyond one.
    let (page, _) = client.list_page(10, None).await?;
    assert_eq!(page.len(), 1);
    cluster.stop_coordinator()?;
    let store = weft_store::EmbeddedStore::open(&cluster.data_dir().join("weft.redb"))?;
    let blobs: Vec<String> = store
        .scan("blobs/")
        .await?
        .into_iter()
        .map(|entry| entry.key)
        .filter(|key| !weft_store::chunks::is_chunk_key(key))
        .collect();
    assert_eq!(blobs.len(), 1, "only the kept run's graph stays: {blobs:?}");
    Ok(())
}

#[tokio::test]
async fn half_sent_requests_are_capped_per_peer_and_closed_once_idle() -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let cluster = TestCluster::start_with_env(&[
        ("WEFT_MAX_CONNECTIONS_PER_PEER", "8"),
        ("WEFT_IDLE_TIMEOUT_MS", "1500"),
    ])?;
    let http = cluster
        .metrics_url()
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned();
    // A slowloris: connections that send half a request, then nothing.
    let mut loris = Vec::new();
    for _ in 0..8 {
        let mut stream = std::net::TcpStream::connect(&http)?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")?;
        loris.push(stream);
    }
    // One more from the same address is closed at once.
    let mut ninth = std::net::TcpStream::connect(&http)?;
    ninth.set_read_timeout(Some(ANSWER_WITHIN))?;
    let _ = ninth.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let mut answer = Vec::new();
    let read = ninth.read_to_end(&mut answer);
    assert!(
        read.is_err() || answer.is_empty(),
        "the ninth connection was answered: {}",
        String::from_utf8_lossy(&answer)
    );
    // The gRPC listener has caps of its own: clients are served meanwhile.
    let client = cluster.client().await?;
    tokio::time::timeout(ANSWER_WITHIN, client.list())
        .await
        .expect("gRPC answers while HTTP is held")?;
    // The half-sent requests are closed once silent (1.5 s here).
    for stream in &mut loris {
        stream.set_read_timeout(Some(ANSWER_WITHIN))?;
        let mut rest = Vec::new();
        let closed = stream.read_to_end(&mut rest);
        assert!(
            closed.is_ok()
                || closed
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "not closed: {closed:?}"
        );
    }
    drop(loris);
    // Then everyone is served again, and the refusal was counted.
    let mut metrics = String::new();
    weft_tests::wait_until(ANSWER_WITHIN, || {
        cluster.metrics().is_ok_and(|text| {
            metrics = text;
            true
        })
    })
    .await?;
    assert!(
        metrics.contains(r#"weft_connections_refused_total{listener="http",reason="peer"} "#),
        "{metrics}"
    );
    Ok(())
}
