//! Indexes built once for the cluster: by one worker, kept by the
//! coordinator, fetched by the others (after a restart too), a build
//! passed on when its worker dies, and `weft index build|list`.

use serde_json::{Value, json};
use weft_client::RunStatus;
use weft_tests::llm_server::{EmbeddingReply, Reply, TestLlm};

use super::*;

/// An index is built once for the cluster: a second worker, with nothing
/// on its disk, fetches it from the coordinator instead of embedding the
/// chunks again — after the coordinator restarts too (it keeps indexes in
/// its store) — and `ListIndexes` shows it.
#[tokio::test]
async fn an_index_built_on_one_worker_is_fetched_by_the_others() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let (mut cluster, client, graph) = beside_handbook(&llm, 1, "shared", HYBRID).await?;
    let done = run_file(&client, &graph, json!({"question": "refund to the card"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
    assert_eq!(built.len(), 1, "{built:?}");
    assert_eq!(llm.embedding_requests().len(), 2, "the chunks, the query");

    // Another worker, with an empty work directory, serves the next runs.
    for (next, question, expected) in [
        ("w2", "invoices by email", "handbook/billing.md"),
        ("w3", "leader failover", "handbook/cluster.md"),
    ] {
        let before = llm.embedding_requests().len();
        let gone = if next == "w2" { "w" } else { "w2" };
        cluster.kill_worker(gone)?;
        if next == "w3" {
            cluster.restart_coordinator()?;
        }
        add_rag_worker(&mut cluster, next, &llm.url)?;
        cluster.wait_for_workers(&[next]).await?;
        let client = cluster.client().await?;
        let done = run_file(&client, &graph, json!({ "question": question })).await?;
        assert_eq!(
            done.status,
            RunStatus::Completed,
            "{next}: {:?}",
            done.error
        );
        assert_eq!(done.state["found"][0]["source"], expected, "{next}");
        let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
        assert!(built.is_empty(), "{next} fetched it, not built: {built:?}");
        assert_eq!(
            llm.embedding_requests().len(),
            before + 1,
            "{next}: only the query is embedded"
        );
        assert!(
            cluster
                .dir()
                .join(next)
                .join("knowledge")
                .read_dir()?
                .any(|entry| entry.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".kb"))),
            "{next} keeps the fetched index on its disk"
        );
        if next == "w2" {
            let metrics = cluster.metrics()?;
            assert_eq!(
                weft_tests::gauge(&metrics, "weft_knowledge_indexes"),
                Some(1.0)
            );
            assert!(
                metrics.contains("weft_knowledge_index_claims_total{outcome=\"build\"} 1")
                    && metrics.contains("weft_knowledge_index_claims_total{outcome=\"fetched\"} 1"),
                "{metrics}"
            );
        }
    }
    let client = cluster.client().await?;
    let kept = client.indexes(None).await?;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].knowledge, "handbook");
    assert_eq!(kept[0].built_by, "w");
    assert_eq!(kept[0].files, 4);
    assert_eq!(kept[0].model.as_deref(), Some("embed-small"));
    assert_eq!(kept[0].embedding_calls, 1);
    assert_eq!(kept[0].key, built[0].body["key"].as_str().unwrap());
    assert!(kept[0].index_bytes > 0 && kept[0].chunks >= 8, "{kept:?}");
    Ok(())
}

const MAP_OF_TWO: &str = r#"
name: two-builders
state:
  questions: { type: array }
  answers: { type: array, default: [] }
knowledge:
  handbook:
    sources: "handbook/*.md"
    chunk: { size: 300, overlap: 40 }
    embeddings: { model: embed-small }
nodes:
  each:
    kind: map
    start: true
    over: "{{ questions }}"
    as: question
    branch: search
    output_key: best
    collect_into: answers
    max_concurrency: 2
  search:
    kind: rag
    knowledge: handbook
    query: "{{ question }}"
    top_k: 1
    timeout: 60s
    graph: { hops: 0 }
    state_updates: { best: "{{ sources[0].source }}" }
"#;

/// Two workers need one index at once: one builds it while the other
/// waits for it. The builder is killed mid-build (its provider never
/// answers); the coordinator gives the build to the worker that waited,
/// which builds it with its own provider, and the run completes — nothing
/// waits for a build that can never come.
#[tokio::test]
async fn a_worker_killed_mid_build_passes_the_build_to_the_one_waiting() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The first embedding request, whichever server gets it, hangs.
    let asked = Arc::new(AtomicUsize::new(0));
    let hang = |asked: Arc<AtomicUsize>| {
        move |_: &Value, _: usize| {
            if asked.fetch_add(1, Ordering::SeqCst) == 0 {
                EmbeddingReply::After(std::time::Duration::from_secs(600))
            } else {
                EmbeddingReply::Vectors
            }
        }
    };
    let unused = |_: &Value, _: usize| Reply::Text("unused".into());
    let first = TestLlm::start_with_embeddings(KEY, unused, hang(asked.clone())).await?;
    let second = TestLlm::start_with_embeddings(KEY, unused, hang(asked.clone())).await?;
    let mut cluster = TestCluster::start()?;
    add_rag_worker(&mut cluster, "w1", &first.url)?;
    add_rag_worker(&mut cluster, "w2", &second.url)?;
    cluster.wait_for_workers(&["w1", "w2"]).await?;
    let client = cluster.client().await?;
    let graph = graph_beside_handbook(&scratch("killed-builder")?, MAP_OF_TWO)?;
    let questions = json!({"questions": ["refunds card", "leader failover"]});
    let run = client.submit_file(&graph, &questions).await?;
    weft_tests::wait_until(std::time::Duration::from_secs(30), || {
        asked.load(Ordering::SeqCst) > 0
    })
    .await?;
    let (builder, survivor, survivors_llm) = if first.embedding_requests().is_empty() {
        ("w2", "w1", &first)
    } else {
        ("w1", "w2", &second)
    };
    assert!(
        survivors_llm.embedding_requests().is_empty(),
        "one builder at a time"
    );
    cluster.kill_worker(builder)?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["answers"],
        json!(["handbook/billing.md", "handbook/cluster.md"])
    );
    let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
    assert_eq!(built.len(), 1, "built once, by {survivor}: {built:?}");
    assert!(
        survivors_llm.embedding_requests()[0]["input"]
            .as_array()
            .unwrap()
            .len()
            >= 8,
        "{survivor} embedded the chunks"
    );
    let kept = client.indexes(None).await?;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].built_by, survivor);
    Ok(())
}

/// `weft index build GRAPH` builds a graph's indexes on the cluster
/// before any of its runs (once: again, it says they are built), `weft
/// index list` shows them, and the graph's first run reuses them.
#[tokio::test]
async fn weft_index_builds_ahead_and_lists_what_is_kept() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let (cluster, client, graph) = beside_handbook(&llm, 1, "index-cli", HYBRID).await?;
    let url = cluster.url();
    let path = graph.display().to_string();
    let (ok, stdout, stderr) = weft(url, &["index", "build", &path], &[]).await?;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("handbook: built (4 files, ")
            && stdout.contains(", 1 embedding calls, "),
        "{stdout}"
    );
    assert_eq!(
        llm.embedding_requests().len(),
        1,
        "the chunks, in one batch"
    );
    let (ok, stdout, stderr) = weft(url, &["index", "build", &path, "--json"], &[]).await?;
    assert!(ok, "{stdout}\n{stderr}");
    let again: Value = serde_json::from_str(stdout.trim())?;
    assert_eq!(
        again["indexes"],
        json!([{"knowledge": "handbook", "built": false}])
    );

    let (ok, stdout, stderr) = weft(url, &["index", "list"], &[]).await?;
    assert!(ok, "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one index: {stdout}");
    assert!(
        lines[1].contains(" handbook ") && lines[1].contains("embed-small"),
        "{stdout}"
    );
    let (ok, stdout, _) = weft(url, &["index", "list", "--json"], &[]).await?;
    assert!(ok);
    let listed: Value = serde_json::from_str(stdout.trim())?;
    assert_eq!(listed["indexes"][0]["knowledge"], "handbook");
    assert_eq!(listed["indexes"][0]["built_by"], "w");

    // The graph's own first run finds its index built.
    let done = run_file(&client, &graph, json!({"question": "refund to the card"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert!(
        weft_tests::events_of(&client, &done.run_id, "index_built")
            .await?
            .is_empty()
    );
    assert_eq!(llm.embedding_requests().len(), 2, "only the query now");

    // A graph without knowledge bases has nothing to build.
    let plain = graph.with_file_name("plain.yaml");
    std::fs::write(&plain, "nodes:\n  a: { kind: end, start: true }\n")?;
    let (ok, _, stderr) = weft(url, &["index", "build", &plain.display().to_string()], &[]).await?;
    assert!(!ok);
    assert!(
        stderr.contains("declares no knowledge base with `sources`"),
        "{stderr}"
    );
    Ok(())
}
