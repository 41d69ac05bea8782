//! One run is one OpenTelemetry trace across processes (SPEC 10, issue
//! #12): a coordinator and two workers export to an in-test OTLP receiver,
//! and the spans they send make one tree.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::json;
use weft_client::{GraphBundle, RunStatus};
use weft_tests::TestCluster;
use weft_tests::otlp::{ReceivedSpan, TestOtlp};

const GRAPH: &str = r#"
state:
  items: { type: array, default: [1, 2, 3] }
nodes:
  prepare: { kind: script, start: true, run: [sh, -c, 'echo "{}"'], next: fan }
  fan:
    kind: map
    over: "{{ items }}"
    as: item
    branch: double
    output_key: doubled
    collect_into: results
    next: check
  double:
    kind: script
    run: [sh, -c, 'sleep 0.2; echo "{\"doubled\": 1}"']
  check: { kind: script, run: [sh, -c, 'echo "no good" >&2; exit 3'] }
"#;

/// Waits until the receiver's spans of trace `trace_id` satisfy `done`.
async fn trace_until(
    otlp: &TestOtlp,
    trace_id: &str,
    done: impl Fn(&[ReceivedSpan]) -> bool,
) -> anyhow::Result<Vec<ReceivedSpan>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spans: Vec<ReceivedSpan> = otlp
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect();
        if done(&spans) {
            return Ok(spans);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the trace did not arrive: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The one span of `spans` without a parent.
fn only_root(spans: &[ReceivedSpan]) -> &ReceivedSpan {
    let roots: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "one root span: {roots:#?}");
    roots[0]
}

/// Whether node `node`'s span is among `spans`.
fn has_node(spans: &[ReceivedSpan], node: &str) -> bool {
    spans
        .iter()
        .any(|s| s.attributes.get("node").map(String::as_str) == Some(node))
}

#[tokio::test]
async fn a_run_on_three_processes_is_one_trace() -> anyhow::Result<()> {
    let otlp = TestOtlp::start().await?;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    cluster.add_worker("w1", 2)?;
    cluster.add_worker("w2", 2)?;
    cluster.wait_for_workers(&["w1", "w2"]).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_bundle(GraphBundle::from_text("traced.yaml", GRAPH), &json!({}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Failed, "check fails on purpose");
    // The run's id is its trace id.
    let trace_id = run.run_id.trim_start_matches("run-").to_owned();
    // The run's own span ends last, when the run's actor stops.
    let spans = trace_until(&otlp, &trace_id, |spans| {
        let executes = spans.iter().filter(|s| s.name == "execute").count();
        spans.iter().any(|s| s.name == "run")
            && spans.iter().any(|s| s.name == "run submitted")
            && executes >= 5
    })
    .await?;
    // One root, and no span whose parent was never exported.
    let root = only_root(&spans);
    assert_eq!(root.name, "run submitted");
    assert_eq!(root.attributes["run_id"], run.run_id);
    let exported: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    for span in &spans {
        assert!(
            span.parent_span_id.is_empty() || exported.contains(span.parent_span_id.as_str()),
            "an orphan span: {span:?}"
        );
    }
    let by_id: HashMap<&str, &ReceivedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let parent = |span: &ReceivedSpan| by_id.get(span.parent_span_id.as_str()).copied();

    let services: BTreeSet<&str> = spans.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(
        services,
        BTreeSet::from(["weft-coordinator", "weft-worker"])
    );
    let run_span = spans.iter().find(|s| s.name == "run").expect("a run span");
    assert_eq!(run_span.attributes["run_id"], run.run_id);
    assert_eq!(
        run_span.parent_span_id, root.span_id,
        "the run hangs under its root"
    );
    assert_eq!(run_span.attributes["status"], "failed");

    // Each worker attempt is the child of the coordinator's node span,
    // which is under a wave of the run.
    let executes: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "execute").collect();
    assert_eq!(executes.len(), 5, "prepare, three items, check");
    let workers: BTreeSet<&str> = executes
        .iter()
        .map(|s| s.attributes["worker"].as_str())
        .collect();
    assert_eq!(workers, BTreeSet::from(["w1", "w2"]));
    for execute in &executes {
        let node = parent(execute).expect("an execute span's parent was exported");
        assert_eq!(node.name, "node");
        assert_eq!(node.service, "weft-coordinator");
        assert_eq!(node.attributes["node"], execute.attributes["node"]);
        assert_eq!(node.attributes["worker"], execute.attributes["worker"]);
        assert_eq!(node.attributes["graph"], "traced");
        assert_eq!(node.attributes["kind"], "script");
    }
    // A map's items are children of the map node's span.
    let items: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| {
            s.name == "node" && s.attributes.get("node").map(String::as_str) == Some("double")
        })
        .collect();
    assert_eq!(items.len(), 3);
    let indexes: BTreeSet<&str> = items
        .iter()
        .map(|s| s.attributes["item"].as_str())
        .collect();
    assert_eq!(indexes, BTreeSet::from(["0", "1", "2"]));
    for item in &items {
        let map = parent(item).expect("the map's span");
        assert_eq!(map.attributes["node"], "fan");
        let wave = parent(map).expect("the wave's span");
        assert_eq!(wave.name, "wave");
        assert_eq!(parent(wave).map(|r| r.name.as_str()), Some("run"));
    }
    // The failed node's spans carry the error, on both sides.
    let failed: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.attributes.get("node").map(String::as_str) == Some("check"))
        .collect();
    assert_eq!(failed.len(), 2);
    for span in failed {
        assert_eq!(span.status_code, 2, "{span:?}");
        assert!(
            span.status_message.contains("exited with status 3"),
            "{span:?}"
        );
        assert_eq!(span.attributes["outcome"], "script_failed");
    }
    Ok(())
}

#[tokio::test]
async fn an_llm_steps_span_carries_its_model_and_tokens() -> anyhow::Result<()> {
    use weft_tests::llm_server::{Reply, TestLlm};
    let otlp = TestOtlp::start().await?;
    let llm = TestLlm::start("k", |_, _| Reply::Text("hello".into())).await?;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    // A `worker` process, which exports its spans as the coordinator does.
    let config = cluster.dir().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.local]\nbase_url = \"{}\"\napi_key = \"k\"\nmodel = \"tiny\"\n",
            llm.url
        ),
    )?;
    cluster.add_worker_with(
        "a",
        1,
        &["--config".to_owned(), config.display().to_string()],
    )?;
    cluster.wait_for_workers(&["a"]).await?;
    let client = cluster.client().await?;
    let yaml = "nodes:\n  ask: { kind: llm, start: true, prompt: \"Say hello\" }\n";
    let run = client
        .submit_bundle(GraphBundle::from_text("ask.yaml", yaml), &json!({}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let trace_id = run.run_id.trim_start_matches("run-").to_owned();
    let spans = trace_until(&otlp, &trace_id, |spans| {
        spans.iter().any(|s| s.attributes.contains_key("model"))
    })
    .await?;
    let node = spans
        .iter()
        .find(|s| s.attributes.contains_key("model"))
        .expect("waited for above");
    assert_eq!(node.attributes["model"], "tiny");
    assert_eq!(node.attributes["completion_tokens"], "7");
    assert!(node.attributes["prompt_tokens"].parse::<u64>()? > 0);
    assert_eq!(node.attributes["kind"], "llm");
    // The call itself is a `chat MODEL` span with the GenAI attributes,
    // under the worker's span of the step.
    let spans = trace_until(&otlp, &trace_id, |spans| {
        spans.iter().any(|s| s.name == "chat tiny")
    })
    .await?;
    let chat = spans
        .iter()
        .find(|s| s.name == "chat tiny")
        .expect("waited for above");
    assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
    assert_eq!(chat.attributes["gen_ai.request.model"], "tiny");
    assert_eq!(chat.attributes["gen_ai.usage.output_tokens"], "7");
    assert!(chat.attributes["gen_ai.usage.input_tokens"].parse::<u64>()? > 0);
    let execute = spans
        .iter()
        .find(|s| s.name == "execute")
        .expect("the step's span");
    assert_eq!(chat.parent_span_id, execute.span_id);
    Ok(())
}

/// A `rag` step's retrieval is a `retrieve` span under the step's span on
/// the worker, naming the knowledge base, the mode, `top_k` and the hits.
#[tokio::test]
async fn a_rag_steps_retrieval_is_a_span_under_its_step() -> anyhow::Result<()> {
    let otlp = TestOtlp::start().await?;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    cluster.add_worker("a", 1)?;
    cluster.wait_for_workers(&["a"]).await?;
    let client = cluster.client().await?;
    let yaml = "knowledge:\n  notes: { sources: 'notes.md' }\nnodes:\n  find: { kind: rag, start: true, knowledge: notes, query: 'refunds', top_k: 2, graph: { hops: 0 } }\n";
    let notes = "# Billing\n\nRefunds go back to the card.\n\n# Support\n\nWrite to the desk.\n";
    let bundle =
        GraphBundle::from_text("find.yaml", yaml).with_file("notes.md", notes.as_bytes(), 0o644);
    let run = client.submit_bundle(bundle, &json!({})).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let trace_id = run.run_id.trim_start_matches("run-").to_owned();
    let spans = trace_until(&otlp, &trace_id, |spans| {
        spans.iter().any(|s| s.name == "retrieve")
    })
    .await?;
    let retrieve = spans
        .iter()
        .find(|s| s.name == "retrieve")
        .expect("waited for above");
    assert_eq!(retrieve.attributes["knowledge"], "notes");
    assert_eq!(retrieve.attributes["mode"], "keyword");
    assert_eq!(retrieve.attributes["top_k"], "2");
    assert_eq!(
        retrieve.attributes["hits"], "1",
        "only one section says refunds"
    );
    let parent = spans
        .iter()
        .find(|s| s.span_id == retrieve.parent_span_id)
        .expect("the retrieval's parent is in the trace");
    assert_eq!(
        parent.attributes.get("kind").map(String::as_str),
        Some("rag"),
        "{parent:?}"
    );
    assert_eq!(parent.pid, retrieve.pid, "both on the worker");
    Ok(())
}

#[tokio::test]
async fn a_run_continued_after_a_restart_stays_in_its_trace() -> anyhow::Result<()> {
    let otlp = TestOtlp::start().await?;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let yaml = r#"
nodes:
  a: { kind: script, run: [sh, -c, 'sleep 0.3; echo "{}"'], start: true, next: b }
  b: { kind: script, run: [sh, -c, 'sleep 0.3; echo "{}"'], next: c }
  c: { kind: script, run: [sh, -c, 'sleep 0.3; echo "{}"'] }
"#;
    let run = client
        .submit_bundle(GraphBundle::from_text("chain.yaml", yaml), &json!({}))
        .await?;
    let trace_id = run.run_id.trim_start_matches("run-").to_owned();
    // Once a's span has reached the receiver, the coordinator dies.
    let coordinator_a = |s: &ReceivedSpan| {
        s.service == "weft-coordinator" && s.attributes.get("node").map(String::as_str) == Some("a")
    };
    let before = trace_until(&otlp, &trace_id, |spans| spans.iter().any(coordinator_a)).await?;
    let first_pid = before
        .iter()
        .find(|s| coordinator_a(s))
        .map(|s| s.pid.clone())
        .expect("waited for above");
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let spans = trace_until(&otlp, &trace_id, |spans| {
        has_node(spans, "c") && spans.iter().any(|s| s.name == "run")
    })
    .await?;
    // The second coordinator's run span hangs under the root the first
    // exported when the run was submitted (the first died with its own
    // run span unexported).
    let root = only_root(&spans);
    assert_eq!(root.name, "run submitted");
    let continued = spans
        .iter()
        .find(|s| s.name == "run" && s.pid != first_pid)
        .expect("the second coordinator's run span");
    assert_eq!(continued.parent_span_id, root.span_id);
    let coordinators: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.service == "weft-coordinator")
        .map(|s| s.pid.as_str())
        .collect();
    assert!(coordinators.contains(first_pid.as_str()));
    assert_eq!(
        coordinators.len(),
        2,
        "both coordinator processes: {coordinators:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_subgraphs_child_run_is_in_its_parents_trace_under_the_node() -> anyhow::Result<()> {
    let otlp = TestOtlp::start().await?;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let parent = "nodes:\n  inner: { kind: subgraph, start: true, graph: child.yaml }\n";
    let child = "nodes:\n  step: { kind: script, start: true, run: [sh, -c, 'echo \"{}\"'] }\n";
    let bundle = GraphBundle::from_text("parent.yaml", parent).with_file(
        "child.yaml",
        child.as_bytes(),
        0o644,
    );
    let run = client.submit_bundle(bundle, &json!({})).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let child_id = done.children[0].run_id.clone();
    let trace_id = run.run_id.trim_start_matches("run-").to_owned();
    let spans = trace_until(&otlp, &trace_id, |spans| {
        spans.iter().filter(|s| s.name == "run").count() == 2 && has_node(spans, "step")
    })
    .await?;
    let child_run = spans
        .iter()
        .find(|s| s.name == "run" && s.attributes["run_id"] == child_id)
        .expect("the child's run span is in the parent's trace");
    let node = spans
        .iter()
        .find(|s| s.span_id == child_run.parent_span_id)
        .expect("the child hangs under a span of the parent");
    assert_eq!(node.attributes["node"], "inner");
    assert_eq!(node.attributes["kind"], "subgraph");
    assert_eq!(node.attributes["child_run_id"], child_id);
    Ok(())
}

#[tokio::test]
async fn a_scripts_secret_is_in_no_event_log_line_or_span() -> anyhow::Result<()> {
    let secret = "tok-9c41e7d2b8";
    let otlp = TestOtlp::start().await?;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("WEFT_TEST_TOKEN", secret),
    ];
    let mut cluster = TestCluster::start_with_env(&env)?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    // The script gets the secret, shouts it on stderr, fails its first
    // attempt with it in its message, and writes a field that is not it.
    let graph = r#"
nodes:
  call:
    kind: script
    start: true
    retry: { max_attempts: 2, initial_interval: 0.1s }
    env: { TOKEN: "${WEFT_TEST_TOKEN}" }
    run: [sh, -c, 'echo "using $TOKEN" >&2; if [ "$WEFT_ATTEMPT" = 1 ]; then echo "refused: $TOKEN"; exit 4; fi; echo "{\"called\": true}"']
"#;
    let client = cluster.client().await?;
    let run = client
        .submit_bundle(GraphBundle::from_text("secret.yaml", graph), &json!({}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["called"], true);
    // The first attempt's failure is in the log, masked.
    let events = weft_tests::events_of(&client, &run.run_id, "node_retrying").await?;
    assert_eq!(events.len(), 1, "one retry: {events:?}");
    let trace_id = run.run_id.trim_start_matches("run-").to_owned();
    let spans = trace_until(&otlp, &trace_id, |spans| {
        spans.iter().any(|s| s.name == "run")
            && spans.iter().filter(|s| s.name == "execute").count() >= 2
    })
    .await?;

    let mut searched = Vec::new();
    use tokio_stream::StreamExt;
    let all: Vec<weft_client::Event> = client
        .watch(&run.run_id, 0)
        .await?
        .collect::<Result<Vec<_>, _>>()
        .await?;
    searched.push((
        "the event log",
        serde_json::to_string(&all.iter().map(|e| &e.body).collect::<Vec<_>>())?,
    ));
    searched.push(("the run", format!("{:?}", client.get(&run.run_id).await?)));
    searched.push(("the coordinator's log", cluster.log("coordinator")));
    searched.push(("the worker's log", cluster.log("w")));
    searched.push(("the spans", format!("{spans:?}")));
    for (what, text) in &searched {
        assert!(
            !text.is_empty(),
            "{what} is empty: the search would prove nothing"
        );
        assert!(!text.contains(secret), "the secret is in {what}: {text}");
    }
    // What the script said did arrive, masked.
    assert!(
        searched[0].1.contains("refused: ***") || searched[0].1.contains("using ***"),
        "the failure's text is not in the log: {}",
        searched[0].1
    );
    Ok(())
}
