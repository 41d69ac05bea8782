//! A large input string that none of a graph's conditions, routers,
//! templates, reducers or subgraph nodes read is held by the coordinator as
//! the JSON text the client sent, never parsed (`weft_machine::held`): it
//! must still reach every step that reads it, come back in the run's state
//! exactly, survive a restart and a retry, and stop being held once a step
//! writes it.

use std::time::Duration;

use anyhow::Context;

use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunStatus};
use weft_proto::v1 as pb;
use weft_proto::v1::run_service_client::RunServiceClient;
use weft_tests::{TestCluster, wait_for_event};

/// A megabyte of text with escapes and characters outside ASCII, so that
/// a text passed on unparsed and a value written again would differ.
fn document() -> String {
    "é \"quoted\" back\\slash\nline 😀 \u{1}\t".repeat(30_000)
}

/// A coordinator with its store and one worker of two slots.
async fn one_worker() -> anyhow::Result<(TestCluster, Client)> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    Ok((cluster, client))
}

/// `weft_input_bytes_held_total`, which a coordinator shows from its first
/// submission on.
fn held_bytes(cluster: &TestCluster) -> anyhow::Result<u64> {
    cluster.counter("weft_input_bytes_held_total")
}

/// A graph whose conditions read `doc`'s size: `long` is `true` when it is
/// longer than 1,000 characters.
fn reads_doc() -> GraphBundle {
    GraphBundle::from_text(
        "reads.yaml",
        r#"
nodes:
  a: { kind: script, run: [sh, -c, 'echo "{\"a\": 1}"'], start: true }
  long: { kind: script, run: [sh, -c, 'echo "{\"long\": true}"'] }
  short: { kind: script, run: [sh, -c, 'echo "{\"long\": false}"'] }
edges:
  - { from: a, to: long, when: "size(state.doc) > 1000" }
  - { from: a, to: short, when: "size(state.doc) <= 1000" }
"#,
    )
}

/// A script that reads the state file and writes the whole state back,
/// with `seen` (the document's length in characters) and `n` added.
const ECHO: &str = r#"[python3, -c, 'import json, os; s = json.load(open(os.environ["GRAPH_STATE"])); s["seen"] = len(s["doc"]); s["n"] = s["n"] + 1; print(json.dumps(s))']"#;

#[tokio::test]
async fn a_large_string_nothing_reads_is_held_and_crosses_a_restart_exactly() -> anyhow::Result<()>
{
    let (mut cluster, client) = one_worker().await?;
    let doc = document();
    let graph = GraphBundle::from_text(
        "held.yaml",
        &format!(
            r#"
state:
  n: {{ type: integer, default: 0 }}
nodes:
  echo: {{ kind: script, run: {ECHO}, start: true, next: ok }}
  ok: {{ kind: approval, prompt: "Publish after {{{{ n }}}} steps?", next: last }}
  last: {{ kind: script, run: {ECHO} }}
"#
        ),
    );
    let text = serde_json::to_string(&json!({"doc": doc, "n": 0}))?;
    let run = client
        .submit_bundle(graph, &json!({"doc": doc, "n": 0}))
        .await?;
    wait_for_event(&client, &run.run_id, "waiting_for_input").await?;
    let held = held_bytes(&cluster)?;
    let doc_text = serde_json::to_string(&doc)?;
    assert_eq!(held, doc_text.len() as u64, "the document's text, held");
    assert!(text.contains(&doc_text));
    // While the run waits, its state shows the document as sent, and the
    // script that echoed it unchanged did not change it (read by another
    // client: the one that submitted it kept the document and is not sent
    // it back).
    let waiting = client.status(&run.run_id).await?;
    assert_eq!(waiting.status, RunStatus::Waiting);
    let waiting = cluster.client().await?.get(&run.run_id).await?;
    assert_eq!(waiting.state["doc"], json!(doc));
    assert_eq!(waiting.state["seen"], json!(doc.chars().count()));
    // A restart restores the run from the store, where the text is.
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    client
        .resume(&run.run_id, "ok", &json!("approve"), None)
        .await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["doc"], json!(doc));
    assert_eq!(done.state["n"], json!(2));
    // Echoed unchanged, held or parsed: never a change.
    let changed = weft_tests::events_of(&client, &run.run_id, "state_changed").await?;
    let fields: Vec<&Value> = changed
        .iter()
        .flat_map(|e| e.body["fields"].as_array().into_iter().flatten())
        .collect();
    assert!(fields.contains(&&json!("seen")), "{fields:?}");
    assert!(
        !fields.contains(&&json!("doc")),
        "an unchanged echo is no change: {fields:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_held_string_is_exact_in_a_failed_run_its_retry_and_once_written() -> anyhow::Result<()> {
    let (cluster, client) = one_worker().await?;
    let doc = document();
    let marker = std::env::temp_dir().join(format!("weft-held-retry-{}", std::process::id()));
    std::fs::remove_file(&marker).ok();
    // `flaky` fails until its marker exists; `shorten` writes the field.
    let graph = GraphBundle::from_text(
        "held-retry.yaml",
        &format!(
            r#"
nodes:
  flaky:
    kind: script
    start: true
    next: shorten
    run: [sh, -c, 'if [ -e "$1" ]; then echo "{{\"flaky\": 1}}"; else touch "$1"; exit 5; fi', x, "{}"]
  shorten:
    kind: script
    run: [python3, -c, 'import json, os; s = json.load(open(os.environ["GRAPH_STATE"])); print(json.dumps({{"doc": s["doc"][:5], "was": len(s["doc"])}}))']
"#,
            marker.display()
        ),
    );
    let run = client.submit_bundle(graph, &json!({"doc": doc})).await?;
    let failed = client.wait(&run.run_id).await?;
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.state["doc"], json!(doc), "as its submitter kept it");
    assert_eq!(
        cluster.client().await?.get(&run.run_id).await?.state["doc"],
        json!(doc),
        "a failed run's state, exact"
    );
    client.retry(&run.run_id).await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["was"], json!(doc.chars().count()));
    let short: String = doc.chars().take(5).collect();
    assert_eq!(
        done.state["doc"],
        json!(short),
        "written: a value from then on"
    );
    std::fs::remove_file(&marker).ok();
    Ok(())
}

#[tokio::test]
async fn a_large_string_a_condition_reads_is_parsed() -> anyhow::Result<()> {
    let (cluster, client) = one_worker().await?;
    let doc = document();
    let graph = reads_doc();
    let run = client.submit_bundle(graph, &json!({"doc": doc})).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["long"], json!(true));
    assert_eq!(done.state["doc"], json!(doc));
    assert_eq!(held_bytes(&cluster)?, 0, "read by a condition: parsed");
    Ok(())
}

#[tokio::test]
async fn a_string_whose_text_is_64_kib_exactly_is_held_and_reported() -> anyhow::Result<()> {
    let (cluster, client) = one_worker().await?;
    // Its JSON text: two quotes and 65,534 characters.
    let doc = "y".repeat(64 * 1024 - 2);
    let graph = GraphBundle::from_text(
        "one.yaml",
        r#"
nodes:
  a: { kind: script, run: [sh, -c, 'echo "{\"a\": 1}"'], start: true }
"#,
    );
    let run = client.submit_bundle(graph, &json!({"doc": doc})).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(held_bytes(&cluster)?, 64 * 1024);
    assert_eq!(done.state["doc"], json!(doc));
    assert_eq!(client.get(&run.run_id).await?.state["doc"], json!(doc));
    Ok(())
}

/// Run `run`'s `RunInfo` as the coordinator sends it to a client that kept
/// the input's fields `kept`.
async fn raw_info(cluster: &TestCluster, run: &str, kept: &[&str]) -> anyhow::Result<pb::RunInfo> {
    let mut runs = RunServiceClient::connect(cluster.url().to_owned())
        .await?
        .max_decoding_message_size(weft_proto::MAX_MESSAGE_BYTES);
    let request = pb::GetRunRequest {
        run_id: run.to_owned(),
        omit_state: false,
        with_diagram: false,
        kept_input: kept.iter().map(|name| name.to_string()).collect(),
    };
    Ok(runs.get_run(request).await?.into_inner())
}

#[tokio::test]
async fn a_client_is_not_sent_back_the_large_strings_it_submitted() -> anyhow::Result<()> {
    let (cluster, client) = one_worker().await?;
    let doc = document();
    let graph = |name: &str, yaml: &str| GraphBundle::from_text(name, yaml);
    // The document is echoed and passes an approval: still as sent.
    let echo = graph(
        "kept.yaml",
        &format!(
            r#"
state:
  n: {{ type: integer, default: 0 }}
nodes:
  echo: {{ kind: script, run: {ECHO}, start: true, next: ok }}
  ok: {{ kind: approval, prompt: "Publish?" }}
"#
        ),
    );
    let input = json!({"doc": doc, "n": 0, "note": "short"});
    let run = client.submit_bundle(echo, &input).await?;
    let waiting = client.wait(&run.run_id).await?;
    assert_eq!(waiting.status, RunStatus::Waiting);
    assert_eq!(waiting.state["doc"], json!(doc), "put back while it waits");
    // What the coordinator sends: `null` in its place, and its name; only
    // for the fields the caller says it kept.
    let info = raw_info(&cluster, &run.run_id, &["doc", "note", "absent"]).await?;
    assert_eq!(info.input_fields, ["doc"]);
    let state: Value = serde_json::from_str(&info.state_json)?;
    assert_eq!(
        state["doc"],
        Value::Null,
        "{}",
        &info.state_json[..200.min(info.state_json.len())]
    );
    assert_eq!(state["note"], json!("short"));
    assert_eq!(state["seen"], json!(doc.chars().count()));
    let whole = raw_info(&cluster, &run.run_id, &[]).await?;
    assert!(whole.input_fields.is_empty());
    assert_eq!(
        serde_json::from_str::<Value>(&whole.state_json)?["doc"],
        json!(doc)
    );

    client
        .resume(&run.run_id, "ok", &json!("approve"), None)
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let read_whole = cluster.client().await?.get(&run.run_id).await?;
    assert_eq!(done.state, read_whole.state);
    let keys = |state: &Value| -> Vec<String> {
        state
            .as_object()
            .into_iter()
            .flat_map(|s| s.keys().cloned())
            .collect()
    };
    assert_eq!(
        keys(&done.state),
        keys(&read_whole.state),
        "in the state's order"
    );
    assert_eq!(done.state["doc"], json!(doc));
    assert_eq!(done.state["n"], json!(1));
    // An ended run's large field stays in the store: not read for it.
    let info = raw_info(&cluster, &run.run_id, &["doc"]).await?;
    assert_eq!(info.input_fields, ["doc"]);
    assert!(info.state_json.len() < 1000, "{}", info.state_json);
    // Read again by the same client once its end was read: whole.
    assert_eq!(client.get(&run.run_id).await?.state["doc"], json!(doc));

    // A step that writes it: its new value comes back, not what was sent.
    let rewrite = graph(
        "rewrite.yaml",
        r#"
nodes:
  upper:
    kind: script
    start: true
    run: [python3, -c, 'import json, os; s = json.load(open(os.environ["GRAPH_STATE"])); print(json.dumps({"doc": s["doc"].upper()}))']
"#,
    );
    let run = client.submit_bundle(rewrite, &input).await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["doc"], json!(doc.to_uppercase()));
    let info = raw_info(&cluster, &run.run_id, &["doc"]).await?;
    assert!(info.input_fields.is_empty(), "written: sent whole");
    Ok(())
}

/// A script that prints `{"report": DOCUMENT}` — the document of
/// [`document`], built and spelled by Python (which escapes every
/// character outside ASCII).
const WRITE_REPORT: &str = r#"[python3, -c, 'import json; print(json.dumps({"report": "é \"quoted\" back\\slash\nline 😀 \u0001\t" * 30000}))']"#;

/// A script that reports the length of the report it read.
const READ_REPORT: &str = r#"[python3, -c, 'import json, os; s = json.load(open(os.environ["GRAPH_STATE"])); print(json.dumps({"length": len(s["report"])}))']"#;

#[tokio::test]
async fn a_large_string_a_step_writes_is_held_across_a_restart_mid_wave() -> anyhow::Result<()> {
    let (mut cluster, client) = one_worker().await?;
    let doc = document();
    let marker =
        |n: u32| std::env::temp_dir().join(format!("weft-held-write-{}-{n}", std::process::id()));
    for n in 0..2 {
        std::fs::remove_file(marker(n)).ok();
    }
    // `write` and the map `fan` run in one wave: the report waits in the
    // wave, held, while the map's items wait for their markers. Item 0's
    // end is checkpointed with the wave (and the report in it); item 1
    // ends after a restart.
    let graph = GraphBundle::from_text(
        "report.yaml",
        &format!(
            r#"
nodes:
  write: {{ kind: script, run: {WRITE_REPORT}, start: true, next: last }}
  fan:
    kind: map
    start: true
    next: last
    over: "{{{{ items }}}}"
    as: item
    branch: work
    output_key: out
    collect_into: results
  work:
    kind: script
    run: [sh, -c, 'while [ ! -e "$1-$WEFT_ITEM" ]; do sleep 0.05; done; echo "{{\"out\": $WEFT_ITEM}}"', x, "{}"]
  last: {{ kind: script, run: {READ_REPORT} }}
"#,
            std::env::temp_dir()
                .join(format!("weft-held-write-{}", std::process::id()))
                .display()
        ),
    );
    let run = client
        .submit_bundle(graph, &json!({"items": [0, 1]}))
        .await?;
    let mut events = Box::pin(client.watch(&run.run_id, 0).await?);
    node_finished(&mut events, "write").await?;
    let held = cluster.counter("weft_output_bytes_held_total")?;
    assert!(
        held >= doc.len() as u64 && held < 3 * doc.len() as u64,
        "the report's text held once: {held} bytes for {}",
        doc.len()
    );
    std::fs::write(marker(0), "")?;
    node_finished(&mut events, "work").await?;
    drop(events);
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    std::fs::write(marker(1), "")?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&run.run_id)).await??;
    for n in 0..2 {
        std::fs::remove_file(marker(n)).ok();
    }
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // (Compared without printing a megabyte when they differ.)
    let report = done.state["report"].as_str().unwrap_or_default();
    assert!(
        report == doc,
        "exact, as Python wrote it: {} characters",
        report.len()
    );
    assert_eq!(done.state["results"], json!([0, 1]));
    assert_eq!(
        done.state["length"],
        json!(doc.chars().count()),
        "the next step read it whole"
    );
    let read_again = cluster.client().await?.get(&run.run_id).await?;
    assert!(
        read_again.state["report"] == json!(doc),
        "read again, exact"
    );
    Ok(())
}

/// Reads `events` until node `node` has finished (a step of it, for a
/// map item's chain).
async fn node_finished(
    events: &mut (
             impl tokio_stream::Stream<Item = Result<weft_client::Event, weft_client::ClientError>>
             + Unpin
         ),
    node: &str,
) -> anyhow::Result<()> {
    use tokio_stream::StreamExt;
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await?
            .context("the watch ended")??;
        if event.kind == "node_finished" && event.body["node"] == json!(node) {
            return Ok(());
        }
    }
}

#[tokio::test]
async fn a_large_list_nothing_reads_is_held_in_the_input_and_in_a_steps_result()
-> anyhow::Result<()> {
    let (cluster, client) = one_worker().await?;
    let rows: Vec<Value> = (0..4000)
        .map(|i| json!({"id": i, "name": format!("row é {i}"), "score": i as f64 / 8.0}))
        .collect();
    // `echo` returns the whole state as Python spaces it, with `count`
    // added; `grow` writes a longer list of its own.
    let graph = GraphBundle::from_text(
        "rows.yaml",
        r#"
nodes:
  echo:
    kind: script
    start: true
    next: grow
    run: [python3, -c, 'import json, os; s = json.load(open(os.environ["GRAPH_STATE"])); s["count"] = len(s["rows"]); print(json.dumps(s))']
  grow:
    kind: script
    run: [python3, -c, 'import json, os; s = json.load(open(os.environ["GRAPH_STATE"])); print(json.dumps({"more": s["rows"] + [{"id": -1}]}))']
"#,
    );
    let text = serde_json::to_string(&rows)?;
    let run = client.submit_bundle(graph, &json!({"rows": rows})).await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        held_bytes(&cluster)?,
        text.len() as u64,
        "the input's list, held"
    );
    let output = cluster.counter("weft_output_bytes_held_total")?;
    assert!(
        output > text.len() as u64,
        "the grown list held too: {output}"
    );
    assert!(done.state["rows"] == json!(rows), "the input's list, exact");
    assert_eq!(done.state["count"], json!(4000));
    let more = done.state["more"].as_array().context("more")?;
    assert_eq!(more.len(), 4001);
    assert!(more[..4000] == rows[..], "the written list, exact");
    // The echo, spaced and escaped otherwise, changed only `count`.
    let changed = weft_tests::events_of(&client, &run.run_id, "state_changed").await?;
    let fields: Vec<&Value> = changed
        .iter()
        .flat_map(|e| e.body["fields"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(fields, [&json!("count"), &json!("more")]);
    // (A list with an integer past 64 bits is parsed: the Rust client
    // cannot send one, so `weft_machine::held`'s tests show it.)
    Ok(())
}

/// `weft_input_bytes_referenced_total`: input taken by reference to an
/// earlier run's rather than sent again.
fn referenced_bytes(cluster: &TestCluster) -> anyhow::Result<u64> {
    cluster.counter("weft_input_bytes_referenced_total")
}

#[tokio::test]
async fn a_large_string_submitted_again_is_named_not_sent_until_the_coordinator_forgets_it()
-> anyhow::Result<()> {
    let (mut cluster, client) = one_worker().await?;
    let doc = document();
    let doc_text = serde_json::to_string(&doc)?;
    let echo = || {
        GraphBundle::from_text(
            "again.yaml",
            &format!(
                "state:\n  n: {{ type: integer, default: 0 }}\nnodes:\n  echo: {{ kind: script, run: {ECHO}, start: true }}\n"
            ),
        )
    };
    let exact = |state: &Value, what: &str| {
        assert!(state["doc"] == json!(doc), "{what}: the document, exact");
        assert_eq!(
            state["seen"],
            json!(doc.chars().count()),
            "{what}: its step read it"
        );
    };
    // Sent once…
    let first = client
        .submit_bundle(echo(), &json!({"doc": doc, "n": 0}))
        .await?;
    exact(&client.wait(&first.run_id).await?.state, "first");
    assert_eq!(held_bytes(&cluster)?, doc_text.len() as u64);
    // …then named: the coordinator takes the text it kept.
    let again = client
        .submit_bundle(echo(), &json!({"doc": doc, "n": 1}))
        .await?;
    assert_eq!(
        referenced_bytes(&cluster)?,
        doc_text.len() as u64,
        "not sent again"
    );
    let done = client.wait(&again.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    exact(&done.state, "named");
    exact(
        &cluster.client().await?.get(&again.run_id).await?.state,
        "read by another client",
    );
    // A graph that reads it parses the text named.
    let reads = reads_doc();
    let read = client.submit_bundle(reads, &json!({"doc": doc})).await?;
    assert_eq!(referenced_bytes(&cluster)?, 2 * doc_text.len() as u64);
    let done = client.wait(&read.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["long"],
        json!(true),
        "the condition read it whole"
    );
    // A restarted coordinator keeps nothing: the client sends it whole.
    // (The same client, whose channel connects again: the first call on
    // the connection the restart cut fails, so it reads until one works.)
    cluster.restart_coordinator()?;
    tokio::time::timeout(Duration::from_secs(30), async {
        while client.status(&first.run_id).await.is_err() {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    let after = tokio::time::timeout(
        Duration::from_secs(60),
        client.submit_bundle(echo(), &json!({"doc": doc, "n": 2})),
    )
    .await??;
    let done = client.wait(&after.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    exact(&done.state, "after a restart");
    assert_eq!(
        held_bytes(&cluster)?,
        doc_text.len() as u64,
        "sent whole again"
    );
    assert_eq!(
        cluster
            .counter("weft_input_bytes_referenced_total")
            .unwrap_or(0),
        0,
        "nothing named found"
    );
    Ok(())
}

#[tokio::test]
async fn a_reference_the_coordinator_does_not_keep_or_that_does_not_fit_is_refused()
-> anyhow::Result<()> {
    let (cluster, client) = one_worker().await?;
    let doc = document();
    let graph = GraphBundle::from_text(
        "one.yaml",
        "nodes:\n  a: { kind: script, run: [sh, -c, 'echo \"{}\"'], start: true }\n",
    );
    let kept = client.submit_bundle(graph, &json!({"doc": doc})).await?;
    client.wait(&kept.run_id).await?;
    let mut runs = RunServiceClient::connect(cluster.url().to_owned()).await?;
    let bundle = || pb::GraphBundle {
        graph_path: "one.yaml".into(),
        files: vec![pb::BundleFile {
            path: "one.yaml".into(),
            content: b"nodes:\n  a: { kind: script, run: [sh, -c, 'echo \"{}\"'], start: true }\n"
                .to_vec(),
            mode: 0o644,
        }],
    };
    let submit = |input_json: &str, run: &str, from_field: &str| pb::SubmitRequest {
        bundle: Some(bundle()),
        input_json: input_json.to_owned(),
        input_refs: vec![pb::InputReference {
            field: "doc".into(),
            run_id: run.to_owned(),
            from_field: from_field.to_owned(),
        }],
        ..Default::default()
    };
    let unknown = runs
        .submit(submit(r#"{"doc": null}"#, "run-nobody", "doc"))
        .await
        .expect_err("an unknown run");
    assert_eq!(unknown.code(), tonic::Code::FailedPrecondition);
    assert!(
        unknown.message().starts_with("input reference not held:")
            && unknown.message().contains("field 'doc'")
            && unknown.message().contains("run-nobody"),
        "{}",
        unknown.message()
    );
    let other_field = runs
        .submit(submit(r#"{"doc": null}"#, &kept.run_id, "nothing"))
        .await
        .expect_err("a field it did not keep");
    assert_eq!(other_field.code(), tonic::Code::FailedPrecondition);
    let not_null = runs
        .submit(submit(r#"{"doc": 1}"#, &kept.run_id, "doc"))
        .await
        .expect_err("the field given as well");
    assert_eq!(not_null.code(), tonic::Code::InvalidArgument);
    assert!(
        not_null.message().contains("does not have as null"),
        "{}",
        not_null.message()
    );
    // Named as it should be: accepted, and the run has the document.
    let named = runs
        .submit(submit(r#"{"doc": null}"#, &kept.run_id, "doc"))
        .await?
        .into_inner();
    let done = client.wait(&named.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert!(done.state["doc"] == json!(doc));
    Ok(())
}
