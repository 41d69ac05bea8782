//! The coordinator's queue under flow control (SPEC 18, issue #40),
//! through real processes: concurrency keys held across runs and workers,
//! and namespaces served fairly, by priority within one. Every figure is
//! counted from what the steps themselves recorded (their start and end
//! times on this machine), never timed against a deadline.

use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, Priority, RunStatus, SubmitOptions};
use weft_tests::{TestCluster, wait_for_event};

/// A map whose items each run a script that sleeps `sleep` seconds and
/// writes when it ran; its branch node carries `extra` (YAML, indented for
/// a node's fields).
fn spans_graph(sleep: &str, max_concurrency: u32, extra: &str) -> GraphBundle {
    GraphBundle::from_text(
        "spans.yaml",
        &format!(
            r#"
state:
  customer: {{ type: string, default: "" }}
  items: {{ type: array, default: [] }}
  spans: {{ type: array, default: [] }}
nodes:
  fan:
    kind: map
    start: true
    over: "{{{{ items }}}}"
    as: item
    branch: work
    output_key: span
    collect_into: spans
    max_concurrency: {max_concurrency}
  work:
    kind: script
    run: [sh, -c, 'start=$(date +%s.%N); sleep {sleep}; echo "{{\"span\": [$start, $(date +%s.%N)]}}"']
{extra}
"#
        ),
    )
}

/// The (start, end) of each item of a finished run.
fn spans(state: &Value) -> Vec<(f64, f64)> {
    state["spans"]
        .as_array()
        .expect("spans")
        .iter()
        .map(|span| {
            let pair = span.as_array().expect("a span");
            (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap())
        })
        .collect()
}

/// Three runs at once, over three workers with slots to spare: their
/// steps under one key never run more than its `max` at once, whatever
/// run or worker they are on; the key is full at times (it limits), and
/// another customer's key is not held by it.
#[tokio::test]
async fn a_concurrency_key_holds_across_three_runs_on_three_workers() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    for name in ["w1", "w2", "w3"] {
        cluster.add_worker(name, 4)?;
    }
    cluster.wait_for_workers(&["w1", "w2", "w3"]).await?;
    let client = cluster.client().await?;
    let graph = spans_graph(
        "0.3",
        6,
        r#"    concurrency: { key: "{{ customer }}", max: 2 }"#,
    );
    let mut runs = Vec::new();
    for customer in ["acme", "acme", "acme", "globex"] {
        let input = json!({ "customer": customer, "items": [1, 2, 3, 4] });
        runs.push(client.submit_bundle(graph.clone(), &input).await?.run_id);
    }
    let mut acme = Vec::new();
    let mut globex = Vec::new();
    for (index, run_id) in runs.iter().enumerate() {
        let done = client.wait(run_id).await?;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        if index < 3 {
            acme.extend(spans(&done.state));
        } else {
            globex.extend(spans(&done.state));
        }
    }
    assert_eq!(acme.len(), 12);
    let most = weft_tests::peak_overlap(&acme);
    assert!(
        most <= 2,
        "{most} of acme's steps ran at once, its key allows 2"
    );
    assert_eq!(most, 2, "the key never filled: {acme:?}");
    // Globex's items overlapped acme's: its key is its own.
    let beside = globex
        .iter()
        .any(|&(start, end)| acme.iter().any(|&(s, e)| s < end && start < e));
    assert!(beside, "globex waited for acme's key");
    // The runs that waited were told why.
    let mut told = 0;
    for run_id in &runs[..3] {
        told += weft_tests::events_of(&client, run_id, "task_throttled")
            .await?
            .iter()
            .filter(|e| e.body["limit"] == "concurrency key 'acme' (max 2)")
            .count();
    }
    assert!(told >= 1, "no step was told it waited for its key");
    let metrics = cluster.metrics()?;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("weft_tasks_throttled_total{limit=\"concurrency_key\"}")),
        "{metrics}"
    );
    Ok(())
}

const TEAM_A: &str = "team-a-secret-3c5e7a9b1d2f4e68";
const TEAM_B: &str = "team-b-secret-8d6f4b2a9c1e3a57";
const NODE: &str = "node-secret-4b6d8f1a3c5e7a92";

/// A coordinator with operators for team-a and team-b and a worker
/// identity for both, and one worker of one slot: the order its steps run
/// in is the order they were dispatched in.
async fn two_tenants() -> anyhow::Result<(TestCluster, Client, Client)> {
    let sha256 = |text: &str| -> String {
        use sha2::Digest;
        sha2::Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let config = format!(
        r#"
[[tokens]]
name = "a-ops"
sha256 = "{}"
role = "operator"
namespace = "team-a"

[[tokens]]
name = "b-ops"
sha256 = "{}"
role = "operator"
namespace = "team-b"

[[tokens]]
name = "node"
sha256 = "{}"
role = "worker"
"#,
        sha256(TEAM_A),
        sha256(TEAM_B),
        sha256(NODE)
    );
    let mut cluster = TestCluster::start_with_config(&config, &[])?;
    cluster.add_worker_with("w", 1, &["--token".into(), NODE.into()])?;
    cluster.wait_for_workers(&["w"]).await?;
    let url = cluster.url().to_owned();
    let a = Client::connect(url.clone()).await?.with_token(TEAM_A)?;
    let b = Client::connect(url).await?.with_token(TEAM_B)?;
    Ok((cluster, a, b))
}

/// Team A floods the one slot with a low-priority map of 40 items; then
/// team B submits a run, and team A a high-priority one. B's step goes
/// within a turn of A's (namespaces alternate), and A's high-priority step
/// goes before A's flood: counted in the flood's items that started in
/// between, from the steps' own records.
#[tokio::test]
async fn a_tenants_flood_does_not_starve_another_and_priority_goes_first() -> anyhow::Result<()> {
    let (_cluster, a, b) = two_tenants().await?;
    let flood = spans_graph("0.1", 40, "");
    let items: Vec<u32> = (0..40).collect();
    let low = SubmitOptions {
        priority: Some(Priority::Low),
        ..SubmitOptions::default()
    };
    let flooded = a
        .submit_bundle_with(flood.clone(), &json!({ "items": items }), low)
        .await?
        .run_id;
    // Once the flood is under way, the others arrive.
    {
        use tokio_stream::StreamExt;
        let mut events = a.watch(&flooded, 0).await?;
        let mut started = 0;
        while started < 2 {
            let event = events.next().await.expect("the flood goes on")?;
            started += usize::from(event.kind == "node_started");
        }
    }
    let arrived = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let one = json!({ "items": [0] });
    let other = b.submit_bundle(flood.clone(), &one).await?.run_id;
    let high = SubmitOptions {
        priority: Some(Priority::High),
        ..SubmitOptions::default()
    };
    let urgent = a.submit_bundle_with(flood, &one, high).await?.run_id;
    let started_at = |state: &Value| spans(state)[0].0;
    let other_done = b.wait(&other).await?;
    let urgent_done = a.wait(&urgent).await?;
    let flood_done = a.wait(&flooded).await?;
    for done in [&other_done, &urgent_done, &flood_done] {
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    }
    let flood_spans = spans(&flood_done.state);
    let before = |at: f64| {
        flood_spans
            .iter()
            .filter(|&&(start, _)| start > arrived && start < at)
            .count()
    };
    let (b_at, urgent_at) = (
        started_at(&other_done.state),
        started_at(&urgent_done.state),
    );
    // At most the turn the flood had when B arrived (and the step then in
    // flight, which started before).
    assert!(
        before(b_at) <= 1,
        "{} of the flood's items went before team B's step",
        before(b_at)
    );
    assert!(
        before(urgent_at) <= 2,
        "{} of the flood's items went before team A's high-priority step",
        before(urgent_at)
    );
    // The flood still had plenty waiting when they arrived: without
    // fairness and priority, all of it would have gone first.
    let waiting = flood_spans.iter().filter(|&&(s, _)| s > arrived).count();
    assert!(
        waiting >= 10,
        "only {waiting} of the flood's items were left"
    );
    eprintln!(
        "{waiting} flood items left at their arrival; before B's step {}, before A's urgent one {}",
        before(b_at),
        before(urgent_at)
    );
    Ok(())
}

/// A coordinator whose default namespace may have one run going, with a
/// worker, and a client of it.
async fn capped_at_one() -> anyhow::Result<(TestCluster, Client)> {
    let config = r#"
[[namespaces]]
name = "default"
max_running_runs = 1
"#;
    let mut cluster = TestCluster::start_with_config(config, &[])?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    Ok((cluster, client))
}

/// `[[namespaces]] max_running_runs` refuses the next run of a namespace
/// that has as many going, with RESOURCE_EXHAUSTED and the figures; one
/// ended frees its place.
#[tokio::test]
async fn a_namespace_at_its_running_runs_cap_refuses_the_next() -> anyhow::Result<()> {
    let (cluster, client) = capped_at_one().await?;
    let waits = GraphBundle::from_text(
        "waits.yaml",
        r#"
nodes:
  ok: { kind: approval, start: true, prompt: "Go on?" }
"#,
    );
    let first = client
        .submit_bundle(waits.clone(), &json!({}))
        .await?
        .run_id;
    // Over the wire: RESOURCE_EXHAUSTED, with the figures.
    let mut raw =
        weft_proto::v1::run_service_client::RunServiceClient::connect(cluster.url().to_owned())
            .await?;
    let request = weft_proto::v1::SubmitRequest {
        bundle: Some(weft_proto::v1::GraphBundle {
            graph_path: "waits.yaml".into(),
            files: vec![weft_proto::v1::BundleFile {
                path: "waits.yaml".into(),
                content: b"nodes:\n  ok: { kind: approval, start: true }\n".to_vec(),
                mode: 0o644,
            }],
        }),
        ..Default::default()
    };
    let status = raw
        .submit(request)
        .await
        .expect_err("a second run over the cap");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("namespace 'default' has 1 runs going, its max_running_runs is 1"),
        "{status:?}"
    );
    // And through the client.
    let refused = client
        .submit_bundle(waits.clone(), &json!({}))
        .await
        .expect_err("a second run over the cap");
    assert!(
        refused.to_string().contains("max_running_runs is 1"),
        "{refused}"
    );
    client.cancel(&first).await?;
    client.wait(&first).await?;
    let second = client.submit_bundle(waits, &json!({})).await?.run_id;
    client.cancel(&second).await?;
    Ok(())
}

/// A failed run that is retried is going again: under a cap of one, a run
/// submitted while it runs is refused, as while it first ran, and one
/// submitted once it has ended is taken. (The registry counts a
/// namespace's runs as they end, not by walking every run it holds; a
/// retry brings an ended run back, and must be counted.)
#[tokio::test]
async fn a_retried_run_counts_against_its_namespaces_cap_again() -> anyhow::Result<()> {
    let (cluster, client) = capped_at_one().await?;
    let mark = cluster.dir().join("tried");
    let flaky = GraphBundle::from_text(
        "flaky.yaml",
        &format!(
            r#"
nodes:
  once:
    kind: script
    start: true
    next: ok
    run: [sh, -c, 'if [ -e {mark} ]; then echo "{{\"tried\": true}}"; else touch {mark}; echo "first attempt fails" >&2; exit 1; fi']
  ok: {{ kind: approval, prompt: "Go on?" }}
"#,
            mark = mark.display()
        ),
    );
    let waits = GraphBundle::from_text(
        "waits.yaml",
        "nodes:\n  ok: { kind: approval, start: true }\n",
    );
    let failed = client.submit_bundle(flaky, &json!({})).await?.run_id;
    assert_eq!(client.wait(&failed).await?.status, RunStatus::Failed);
    // Ended, it holds no place: another run is taken, and ends.
    let other = client
        .submit_bundle(waits.clone(), &json!({}))
        .await?
        .run_id;
    client.cancel(&other).await?;
    client.wait(&other).await?;
    // Retried, it holds the place again, until it ends.
    client.retry(&failed).await?;
    wait_for_event(&client, &failed, "waiting_for_input").await?;
    let refused = client
        .submit_bundle(waits.clone(), &json!({}))
        .await
        .expect_err("a run over the cap while the retried one goes");
    assert!(
        refused
            .to_string()
            .contains("has 1 runs going, its max_running_runs is 1"),
        "{refused}"
    );
    client.cancel(&failed).await?;
    assert_eq!(client.wait(&failed).await?.status, RunStatus::Cancelled);
    let taken = client.submit_bundle(waits, &json!({})).await?.run_id;
    client.cancel(&taken).await?;
    Ok(())
}

/// A priority that is not one, sent over the wire by a client that does
/// not check it (the Rust and Python clients both do), is refused by the
/// coordinator, naming it.
#[tokio::test]
async fn a_submission_with_a_priority_that_is_not_one_is_refused() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let mut raw =
        weft_proto::v1::run_service_client::RunServiceClient::connect(cluster.url().to_owned())
            .await?;
    let request = weft_proto::v1::SubmitRequest {
        bundle: Some(weft_proto::v1::GraphBundle {
            graph_path: "g.yaml".into(),
            files: vec![weft_proto::v1::BundleFile {
                path: "g.yaml".into(),
                content: b"nodes:\n  ok: { kind: approval, start: true }\n".to_vec(),
                mode: 0o644,
            }],
        }),
        input_json: "{}".into(),
        priority: "urgent".into(),
        ..Default::default()
    };
    let status = raw.submit(request).await.expect_err("not a priority");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains("priority 'urgent' is not one of high, normal, low"),
        "{status:?}"
    );
    Ok(())
}
