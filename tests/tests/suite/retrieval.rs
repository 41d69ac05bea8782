//! `rag` nodes (SPEC 17, issue 39) on `worker` processes against the
//! local OpenAI-compatible test server, over real HTTP: knowledge bases
//! bundled from their `sources` globs, indexed once per content on a
//! worker and reused, retrieval by keyword, vectors and both, graph search
//! over the pages' links, a model's rerank, the completion over the
//! passages, a map of `rag` items — and what is refused, named.

use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_tests::TestCluster;
use weft_tests::llm_server::{EmbeddingReply, Reply, TestLlm, last_message};

const KEY: &str = "sk-test-rag-k3y";

/// A cluster whose worker `w` (with `slots`) has the test server as its
/// provider.
async fn cluster(llm: &TestLlm, slots: u32) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    let config = cluster.dir().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.local]\nbase_url = \"{}\"\napi_key = \"{KEY}\"\nmodel = \"tiny\"\n",
            llm.url
        ),
    )?;
    let args = ["--config".to_owned(), config.display().to_string()];
    cluster.add_worker_with("w", slots, &args)?;
    cluster.wait_for_workers(&["w"]).await?;
    Ok(cluster)
}

/// The handbook example's folder, copied beside a graph written in `dir`.
fn graph_beside_handbook(dir: &std::path::Path, yaml: &str) -> anyhow::Result<std::path::PathBuf> {
    let handbook = weft_tests::repo().join("examples/handbook");
    std::fs::create_dir_all(dir.join("handbook"))?;
    for entry in std::fs::read_dir(handbook)? {
        let entry = entry?;
        std::fs::copy(entry.path(), dir.join("handbook").join(entry.file_name()))?;
    }
    let path = dir.join("graph.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// A fresh directory for one test's graph.
fn scratch(name: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("weft-rag-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A cluster as [`cluster`] makes it, its client, and the graph `yaml`
/// written beside a copy of the handbook in a directory of its own.
async fn beside_handbook(
    llm: &TestLlm,
    slots: u32,
    test: &str,
    yaml: &str,
) -> anyhow::Result<(TestCluster, Client, std::path::PathBuf)> {
    let cluster = cluster(llm, slots).await?;
    let client = cluster.client().await?;
    let graph = graph_beside_handbook(&scratch(test)?, yaml)?;
    Ok((cluster, client, graph))
}

async fn run_file(
    client: &Client,
    path: &std::path::Path,
    input: Value,
) -> anyhow::Result<RunInfo> {
    let run = client.submit_file(path, &input).await?;
    Ok(client.wait(&run.run_id).await?)
}

/// The sources of a run's `retrieved` events, in order, per event.
async fn retrieved(client: &Client, run_id: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let events = weft_tests::events_of(client, run_id, "retrieved").await?;
    Ok(events
        .iter()
        .map(|event| {
            event.body["hits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|hit| hit["source"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .collect())
}

#[tokio::test]
async fn a_rag_node_answers_from_a_folder_of_markdown_and_indexes_it_once() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, _| {
        Reply::Text(format!("<{}>", last_message(request)))
    })
    .await?;
    let cluster = cluster(&llm, 2).await?;
    let client = cluster.client().await?;
    let example = weft_tests::repo().join("examples/handbook-qa.yaml");
    let question = json!({"question": "What happens when the leader stops?"});
    let done = run_file(&client, &example, question).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // The best passage is the cluster page's failover section; graph search
    // brings in the durability page it links to with [[durability]].
    let cited: Vec<&str> = done.state["cited"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(cited.first(), Some(&"handbook/cluster.md"), "{cited:?}");
    assert!(
        cited.contains(&"handbook/durability.md"),
        "graph search: {cited:?}"
    );
    let answer = done.state["answer"].as_str().unwrap();
    assert!(
        answer.contains("[1] handbook/cluster.md § Running a cluster › Failover\n"),
        "{answer}"
    );
    assert!(
        answer.contains("Three coordinators sharing an etcd cluster"),
        "{answer}"
    );
    assert!(
        answer.ends_with("Question: What happens when the leader stops?>"),
        "{answer}"
    );
    let request = &llm.requests()[0];
    assert_eq!(request["messages"][0]["role"], "system");
    let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
    assert_eq!(built.len(), 1, "{built:?}");
    assert_eq!(built[0].body["knowledge"], "handbook");
    assert_eq!(built[0].body["files"], 4);
    assert!(built[0].body["chunks"].as_u64().unwrap() >= 8, "{built:?}");
    assert_eq!(built[0].body["embedding_calls"], 0);
    let hits = retrieved(&client, &done.run_id).await?;
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].first().map(String::as_str),
        Some("handbook/cluster.md")
    );

    // A second run over the same files reuses the index.
    let again = json!({"question": "When are invoices sent?"});
    let done = run_file(&client, &example, again).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["cited"][0], "handbook/billing.md");
    let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
    assert!(built.is_empty(), "the index is built once: {built:?}");

    // Without a model the search example only retrieves: `output` is the
    // sources.
    let example = weft_tests::repo().join("examples/handbook-search.yaml");
    let question = json!({"question": "how long are finished runs kept?"});
    let done = run_file(&client, &example, question).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["passages"][0], "Durability › Retention");
    assert_eq!(
        done.state["pages"],
        json!(["handbook/durability.md", "handbook/cluster.md"])
    );
    Ok(())
}

#[tokio::test]
async fn a_restarted_worker_opens_the_index_it_kept_on_disk() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let (mut cluster, client, graph) = beside_handbook(&llm, 1, "restart", HYBRID).await?;
    let done = run_file(&client, &graph, json!({"question": "refund to the card"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        weft_tests::events_of(&client, &done.run_id, "index_built")
            .await?
            .len(),
        1
    );
    assert_eq!(llm.embedding_requests().len(), 2);

    // The same worker, started again on its work directory.
    cluster.kill_worker("w")?;
    let config = cluster.dir().join("worker.toml");
    cluster.add_worker_with(
        "w",
        1,
        &["--config".to_owned(), config.display().to_string()],
    )?;
    cluster.wait_for_workers(&["w"]).await?;
    let done = run_file(&client, &graph, json!({"question": "invoices by email"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["found"][0]["source"], "handbook/billing.md");
    let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
    assert!(built.is_empty(), "opened from disk, not built: {built:?}");
    assert_eq!(
        llm.embedding_requests().len(),
        3,
        "only the query is embedded"
    );
    Ok(())
}

/// `weft run graph.yaml` in the graph's own directory, on the local
/// cluster: the sources are found beside it and bundled, and the search
/// example answers with no model.
#[test]
fn weft_run_bundles_the_sources_beside_a_graph_named_without_a_directory() -> anyhow::Result<()> {
    let dir = scratch("here")?;
    std::fs::copy(
        weft_tests::repo().join("examples/handbook-search.yaml"),
        dir.join("search.yaml"),
    )?;
    graph_beside_handbook(&dir, "unused: {}\n")?;
    let out = std::process::Command::new(weft_tests::binary("weft"))
        .current_dir(&dir)
        .env("WEFT_EPHEMERAL", "1")
        .env_remove("WEFT_COORDINATOR")
        .args(["run", "search.yaml", "--json", "--input"])
        .arg(r#"{"question": "how long are finished runs kept?"}"#)
        .stdin(std::process::Stdio::null())
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let run: Value = serde_json::from_str(stdout.trim())?;
    assert_eq!(
        run["state"]["pages"][0], "handbook/durability.md",
        "{stdout}"
    );
    Ok(())
}

/// A knowledge base over `max_knowledge_bytes`, and a source too big for
/// the coordinator's `max_bundle_bytes`, are refused at submission naming
/// the knowledge base, the file and the key.
#[tokio::test]
async fn a_knowledge_base_too_big_is_refused_naming_it() -> anyhow::Result<()> {
    let cluster = TestCluster::start_with_env(&[
        ("WEFT_MAX_KNOWLEDGE_BYTES", "1000"),
        ("WEFT_MAX_BUNDLE_BYTES", "1048576"),
    ])?;
    let client = cluster.client().await?;
    let dir = scratch("big")?;
    let graph = graph_beside_handbook(&dir, HYBRID)?;
    let error = client
        .submit_file(&graph, &json!({"question": "q"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("knowledge 'handbook': its sources hold ")
            && error.contains("over the limit of 1000 (max_knowledge_bytes)"),
        "{error}"
    );
    std::fs::write(dir.join("handbook/huge.md"), "word ".repeat(600_000))?;
    let error = client
        .submit_file(&graph, &json!({"question": "q"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("more than the limit of 1048576 (max_bundle_bytes)"),
        "{error}"
    );
    assert!(
        error.contains("largest files: handbook/huge.md (2.9 MiB)"),
        "{error}"
    );
    Ok(())
}

const HYBRID: &str = r#"
state:
  question: { type: string }
  found: { type: array, default: [] }
knowledge:
  handbook:
    sources: "handbook/*.md"
    chunk: { size: 300, overlap: 40 }
    embeddings: { model: embed-small }
nodes:
  search:
    kind: rag
    start: true
    knowledge: handbook
    query: "{{ question }}"
    top_k: 2
    state_updates: { found: "{{ sources }}" }
"#;

#[tokio::test]
async fn a_hybrid_retrieval_embeds_the_chunks_once_and_each_query() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let (_cluster, client, graph) = beside_handbook(&llm, 2, "hybrid", HYBRID).await?;
    let done = run_file(&client, &graph, json!({"question": "refund to the card"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["found"][0]["source"], "handbook/billing.md");
    assert_eq!(done.state["found"][0]["heading"], "Billing › Refunds");
    let calls = llm.embedding_requests();
    assert_eq!(calls.len(), 2, "one batch of chunks, one query: {calls:?}");
    assert_eq!(calls[1]["input"], json!(["refund to the card"]));
    assert!(
        calls[0]["input"].as_array().unwrap().len() >= 8,
        "every section"
    );
    let events = weft_tests::events_of(&client, &done.run_id, "retrieved").await?;
    assert_eq!(
        events[0].body["mode"], "hybrid",
        "the default with embeddings"
    );
    assert_eq!(
        weft_tests::events_of(&client, &done.run_id, "index_built").await?[0].body["embedding_calls"],
        1
    );

    let done = run_file(&client, &graph, json!({"question": "invoices by email"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        llm.embedding_requests().len(),
        3,
        "only the query is embedded again"
    );
    Ok(())
}

#[tokio::test]
async fn a_wrong_embedding_fails_the_step_naming_it() -> anyhow::Result<()> {
    // The chunks' vectors are the endpoint's; the query's has 3 dimensions.
    let llm = TestLlm::start_with_embeddings(
        KEY,
        |_, _| Reply::Text("unused".into()),
        |_, n| {
            if n == 0 {
                EmbeddingReply::Vectors
            } else {
                EmbeddingReply::Dimensions(3)
            }
        },
    )
    .await?;
    let (_first, client, graph) = beside_handbook(&llm, 1, "wrong", HYBRID).await?;
    let done = run_file(&client, &graph, json!({"question": "refunds"})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.unwrap().message;
    assert!(error.contains("dimensions"), "{error}");
    assert!(error.contains("knowledge 'handbook'"), "{error}");

    let garbage = TestLlm::start_with_embeddings(
        KEY,
        |_, _| Reply::Text("unused".into()),
        |_, _| EmbeddingReply::Malformed("<html>busy</html>".into()),
    )
    .await?;
    let second = cluster(&garbage, 1).await?;
    let client = second.client().await?;
    let done = run_file(&client, &graph, json!({"question": "refunds"})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.unwrap().message;
    assert!(
        error.contains("knowledge 'handbook': embeddings:"),
        "{error}"
    );
    assert!(error.contains("<html>busy"), "{error}");
    Ok(())
}

const RERANKED: &str = r#"
state:
  question: { type: string }
  order: { type: array, default: [] }
knowledge:
  handbook:
    sources: ["handbook/*.md"]
    chunk: { size: 300, overlap: 40 }
nodes:
  search:
    kind: rag
    start: true
    knowledge: handbook
    query: "{{ question }}"
    top_k: 2
    mode: keyword
    rerank: { model: ranker }
    state_updates: { order: "{{ sources | map(attribute='text') | list }}" }
"#;

#[tokio::test]
async fn a_rerank_model_orders_the_candidates() -> anyhow::Result<()> {
    // The ranker reverses the candidates.
    let llm = TestLlm::start(KEY, |request, _| {
        let prompt = last_message(request);
        let count = (1..)
            .take_while(|k| prompt.contains(&format!("[{k}] ")))
            .count();
        Reply::Json(json!({"order": (1..=count).rev().collect::<Vec<usize>>()}))
    })
    .await?;
    let (_cluster, client, graph) = beside_handbook(&llm, 1, "rerank", RERANKED).await?;
    let done = run_file(&client, &graph, json!({"question": "coordinator runs"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let request = &llm.requests()[0];
    assert_eq!(request["model"], "ranker");
    let prompt = last_message(request);
    let count = (1..)
        .take_while(|k| prompt.contains(&format!("[{k}] ")))
        .count();
    assert!(
        count > 2,
        "4 x top_k candidates at most, more than top_k here: {prompt}"
    );
    let text_of = |k: usize, end: &str| {
        let start = prompt.find(&format!("[{k}] ")).unwrap() + format!("[{k}] ").len();
        let rest = &prompt[start..];
        rest[..rest.find(end).unwrap()].to_owned()
    };
    let last = text_of(count, "\n\nOrder the passages");
    let before = text_of(count - 1, &format!("\n\n[{count}] "));
    assert_eq!(done.state["order"], json!([last, before]), "{prompt}");
    assert_eq!(
        done.state["order"].as_array().unwrap().len(),
        2,
        "top_k after rerank"
    );
    let calls = weft_tests::events_of(&client, &done.run_id, "model_called").await?;
    assert_eq!(calls.len(), 1);
    Ok(())
}

const MAP: &str = r#"
state:
  questions: { type: array }
  answers: { type: array, default: [] }
knowledge:
  handbook:
    sources: ["handbook/*.md"]
nodes:
  each:
    kind: map
    start: true
    over: "{{ questions }}"
    as: question
    branch: search
    output_key: best
    collect_into: answers
    max_concurrency: 6
  search:
    kind: rag
    knowledge: handbook
    query: "{{ question }}"
    top_k: 1
    graph: { hops: 0 }
    state_updates: { best: "{{ sources[0].source }}" }
"#;

#[tokio::test]
async fn a_map_of_20_rag_items_shares_one_index() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let (_cluster, client, graph) = beside_handbook(&llm, 4, "map", MAP).await?;
    let asked = [
        "refunds card",
        "leader failover",
        "checkpoint wave",
        "cargo build release",
    ];
    let questions: Vec<&str> = asked.iter().cycle().take(20).copied().collect();
    let done = run_file(&client, &graph, json!({"questions": questions})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let expected = [
        "handbook/billing.md",
        "handbook/cluster.md",
        "handbook/durability.md",
        "handbook/install.md",
    ];
    let answers = done.state["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 20);
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer, expected[i % 4], "item {i}");
    }
    let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
    assert_eq!(built.len(), 1, "{built:?}");
    let hits = retrieved(&client, &done.run_id).await?;
    assert_eq!(hits.len(), 20);
    let events = weft_tests::events_of(&client, &done.run_id, "retrieved").await?;
    let mut items: Vec<u64> = events
        .iter()
        .filter_map(|e| e.body["item"].as_u64())
        .collect();
    items.sort_unstable();
    assert_eq!(
        items,
        (0..20).collect::<Vec<u64>>(),
        "one retrieval per item"
    );
    assert!(llm.requests().is_empty(), "no model is called");
    Ok(())
}

#[tokio::test]
async fn what_the_format_refuses_is_named_before_a_run_starts() -> anyhow::Result<()> {
    let dir = scratch("refused")?;
    let cases = [
        (
            "knowledge: { kb: { sources: 'nothing/*.md' } }\nnodes:\n  r: { kind: rag, start: true, knowledge: kb, query: q }\n",
            "knowledge 'kb': source 'nothing/*.md' matches no file beside the graph",
        ),
        (
            "knowledge: { handbook: { sources: 'handbook/*.md' } }\nnodes:\n  r: { kind: rag, start: true, knowledge: handbok, query: q }\n",
            "node 'r': no knowledge base 'handbok' (did you mean 'handbook'?)",
        ),
        (
            "knowledge: { handbook: { sources: 'handbook/*.md' } }\nnodes:\n  r: { kind: rag, start: true, knowledge: handbook, query: q, mode: vector }\n",
            "mode 'vector' ranks by embeddings, and knowledge base 'handbook' has no `embeddings:`",
        ),
        (
            "knowledge: { handbook: { sources: 'handbook/*.md' } }\nnodes:\n  r: { kind: rag, start: true, knowledge: handbook, query: q, top_k: 0 }\n",
            "node 'r': top_k must be between 1 and 100, got 0",
        ),
        (
            "knowledge: { handbook: { sources: 'handbook/*.md' } }\nnodes:\n  r: { kind: rag, start: true, knowledge: handbook, query: q, teammates: true }\n",
            "a rag step never gets a teammate identity",
        ),
    ];
    for (yaml, expected) in cases {
        let graph = graph_beside_handbook(&dir, yaml)?;
        let error = GraphBundle::from_file(&graph).unwrap_err().to_string();
        assert!(error.contains(expected), "{yaml}\n{error}");
    }
    // A bundle made by hand, without its sources, is refused by the
    // coordinator the same way.
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    let client = cluster.client().await?;
    let yaml = "knowledge: { handbook: { sources: 'handbook/*.md' } }\nnodes:\n  r: { kind: rag, start: true, knowledge: handbook, query: q }\n";
    let error = client
        .submit_bundle(GraphBundle::from_text("graph.yaml", yaml), &json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(
            "knowledge 'handbook': source 'handbook/*.md' matches no file beside the graph"
        ),
        "{error}"
    );
    Ok(())
}

/// Starts worker `name` (1 slot) with the test server at `url` as its
/// provider, and `extra` arguments.
fn add_rag_worker_with(
    cluster: &mut TestCluster,
    name: &str,
    url: &str,
    extra: &[String],
) -> anyhow::Result<()> {
    let config = cluster.dir().join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!("[providers.local]\nbase_url = \"{url}\"\napi_key = \"{KEY}\"\nmodel = \"tiny\"\n"),
    )?;
    let mut args = vec!["--config".to_owned(), config.display().to_string()];
    args.extend_from_slice(extra);
    cluster.add_worker_with(name, 1, &args)
}

/// Starts worker `name` with the test server at `url` as its provider.
fn add_rag_worker(cluster: &mut TestCluster, name: &str, url: &str) -> anyhow::Result<()> {
    add_rag_worker_with(cluster, name, url, &[])
}

/// A cluster whose worker `w` has the test server as its provider and the
/// PostgreSQL server's URL as its secret `HANDBOOK_DSN`.
async fn cluster_with_table(
    llm: &TestLlm,
    postgres: &weft_tests::postgres::TestPostgres,
) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    let secrets = cluster.dir().join("secrets.env");
    std::fs::write(&secrets, format!("HANDBOOK_DSN={}\n", postgres.url))?;
    let secrets = ["--secrets-file".to_owned(), secrets.display().to_string()];
    add_rag_worker_with(&mut cluster, "w", &llm.url, &secrets)?;
    cluster.wait_for_workers(&["w"]).await?;
    Ok(cluster)
}

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
    // The test server answers on this test's runtime: the command must
    // not block it.
    let url = cluster.url().to_owned();
    let weft = |args: &[&str]| {
        let mut command = tokio::process::Command::new(weft_tests::binary("weft"));
        command
            .env("WEFT_COORDINATOR", &url)
            .args(args)
            .stdin(std::process::Stdio::null());
        async move {
            let out = command.output().await?;
            anyhow::Ok((
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
    };
    let path = graph.display().to_string();
    let (ok, stdout, stderr) = weft(&["index", "build", &path]).await?;
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
    let (ok, stdout, stderr) = weft(&["index", "build", &path, "--json"]).await?;
    assert!(ok, "{stdout}\n{stderr}");
    let again: Value = serde_json::from_str(stdout.trim())?;
    assert_eq!(
        again["indexes"],
        json!([{"knowledge": "handbook", "built": false}])
    );

    let (ok, stdout, stderr) = weft(&["index", "list"]).await?;
    assert!(ok, "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one index: {stdout}");
    assert!(
        lines[1].contains(" handbook ") && lines[1].contains("embed-small"),
        "{stdout}"
    );
    let (ok, stdout, _) = weft(&["index", "list", "--json"]).await?;
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
    let (ok, _, stderr) = weft(&["index", "build", &plain.display().to_string()]).await?;
    assert!(!ok);
    assert!(
        stderr.contains("declares no knowledge base with `sources`"),
        "{stderr}"
    );
    Ok(())
}

/// Rows of a handbook kept in a table: (source, heading, text, links).
const ROWS: [(&str, &str, &str, &[&str]); 4] = [
    (
        "billing.md",
        "Billing › Refunds",
        "Refunds go back to the card that paid, within five days.",
        &[],
    ),
    (
        "cluster.md",
        "Cluster › Failover",
        "When the leader stops, a standby coordinator takes its lease and continues the runs.",
        &["durability.md"],
    ),
    (
        "durability.md",
        "Durability › Checkpoints",
        "Each wave is checkpointed to the store before the next one starts.",
        &[],
    ),
    (
        "install.md",
        "Install",
        "Build the binaries with cargo build --release.",
        &[],
    ),
];

const PGVECTOR: &str = r#"
name: table-search
state:
  question: { type: string }
  found: { type: array, default: [] }
knowledge:
  handbook:
    store: { kind: pgvector, url: "${HANDBOOK_DSN}", table: rag.handbook_chunks }
    embeddings: { model: embed-small }
nodes:
  search:
    kind: rag
    start: true
    knowledge: handbook
    query: "{{ question }}"
    top_k: 1
    graph: { hops: 1 }
    state_updates: { found: "{{ sources }}" }
"#;

/// A knowledge base kept in PostgreSQL with pgvector (a real server):
/// hybrid retrieval over the table's rows, graph search over its `links`,
/// keyword alone; its URL a worker secret, never shown; a table that is
/// not there fails the step naming it.
#[tokio::test]
async fn a_knowledge_base_in_a_pgvector_table_is_searched() -> anyhow::Result<()> {
    use weft_tests::postgres::TestPostgres;
    let postgres = TestPostgres::start("rag")?;
    let db = postgres.connect().await?;
    db.batch_execute(
        "CREATE SCHEMA rag; CREATE TABLE rag.handbook_chunks (id bigserial PRIMARY KEY, \
         source text NOT NULL, heading text, text text NOT NULL, links text[], embedding vector(64))",
    )
    .await?;
    for (source, heading, text, links) in ROWS {
        let vector = weft_tests::llm_server::embedding_of(text);
        let literal = format!(
            "[{}]",
            vector
                .iter()
                .map(f32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let links: Vec<String> = links.iter().map(|l| (*l).to_owned()).collect();
        db.execute(
            "INSERT INTO rag.handbook_chunks (source, heading, text, links, embedding) \
             VALUES ($1, $2, $3, $4, $5::text::vector)",
            &[&source, &heading, &text, &links, &literal],
        )
        .await?;
    }
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let cluster = cluster_with_table(&llm, &postgres).await?;
    let client = cluster.client().await?;
    let run = |yaml: String, question: &'static str| {
        let client = client.clone();
        async move {
            let bundle = GraphBundle::from_text("table.yaml", &yaml);
            let run = client
                .submit_bundle(bundle, &json!({ "question": question }))
                .await?;
            anyhow::Ok(client.wait(&run.run_id).await?)
        }
    };

    let done = run(PGVECTOR.into(), "refund to the card").await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["found"][0]["source"], "billing.md",
        "{}",
        done.state
    );
    assert_eq!(done.state["found"][0]["heading"], "Billing › Refunds");
    assert_eq!(
        done.state["found"].as_array().unwrap().len(),
        1,
        "billing links nowhere"
    );
    // The leader's failover, and the page it links to by graph search.
    let done = run(PGVECTOR.into(), "what happens when the leader stops").await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let found: Vec<&str> = done.state["found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(found, ["cluster.md", "durability.md"]);
    let events = weft_tests::events_of(&client, &done.run_id, "retrieved").await?;
    assert_eq!(events[0].body["mode"], "hybrid");
    assert!(
        weft_tests::events_of(&client, &done.run_id, "index_built")
            .await?
            .is_empty(),
        "a table is not indexed by Weft"
    );
    // Keyword alone: PostgreSQL's full-text search, any word matching.
    let keyword = PGVECTOR.replace("top_k: 1", "top_k: 1\n    mode: keyword");
    let done = run(keyword, "binaries cargo").await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["found"][0]["source"], "install.md");
    assert_eq!(llm.embedding_requests().len(), 2, "the hybrid queries only");

    // A table that is not there fails the step naming it; the URL (a
    // secret) is not shown.
    let missing = PGVECTOR.replace("rag.handbook_chunks", "rag.nowhere");
    let failed = run(missing, "refunds").await?;
    assert_eq!(failed.status, RunStatus::Failed);
    let message = failed
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("knowledge 'handbook': PostgreSQL table 'rag.nowhere': query: relation \"rag.nowhere\" does not exist"),
        "{message}"
    );
    assert!(!message.contains(&postgres.url), "{message}");
    Ok(())
}

const PUSHED: &str = r#"
name: pushed
state:
  question: { type: string }
  found: { type: array, default: [] }
knowledge:
  handbook:
    sources: "handbook/*.md"
    chunk: { size: 300, overlap: 40 }
    embeddings: { model: embed-small }
  tables:
    store: { kind: pgvector, url: "${HANDBOOK_DSN}", table: handbook_chunks }
    embeddings: { model: embed-small }
nodes:
  search:
    kind: rag
    start: true
    knowledge: tables
    query: "{{ question }}"
    top_k: 2
    state_updates: { found: "{{ sources }}" }
"#;

/// `weft index push` builds a knowledge base's index on the cluster and
/// loads its chunks, links and embeddings into the table another one
/// names (made if missing; pushed again, its rows are replaced); a `rag`
/// node then answers from the table.
#[tokio::test]
async fn weft_index_push_loads_a_knowledge_base_into_a_table() -> anyhow::Result<()> {
    use weft_tests::postgres::TestPostgres;
    let postgres = TestPostgres::start("push")?;
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let cluster = cluster_with_table(&llm, &postgres).await?;
    let graph = graph_beside_handbook(&scratch("push")?, PUSHED)?;
    let push = |dsn: Option<&str>| {
        let mut command = tokio::process::Command::new(weft_tests::binary("weft"));
        command
            .env("WEFT_COORDINATOR", cluster.url())
            .env_remove("HANDBOOK_DSN")
            .args(["index", "push"])
            .arg(&graph)
            .args(["handbook", "--to", "tables"])
            .stdin(std::process::Stdio::null());
        if let Some(dsn) = dsn {
            command.env("HANDBOOK_DSN", dsn);
        }
        async move {
            let out = command.output().await?;
            anyhow::Ok((
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
    };
    let (ok, stdout, stderr) = push(None).await?;
    assert!(!ok);
    assert!(
        stderr.contains("knowledge 'tables': store url: ${HANDBOOK_DSN} is not set in this command's environment"),
        "{stderr}"
    );
    let (ok, stdout_first, stderr) = push(Some(&postgres.url)).await?;
    assert!(ok, "{stdout}\n{stdout_first}\n{stderr}");
    assert!(
        stdout_first.starts_with("handbook -> handbook_chunks: ")
            && stdout_first.contains(" rows from 4 sources, embeddings of 64 dimensions"),
        "{stdout_first}"
    );
    let db = postgres.connect().await?;
    async fn count(db: &tokio_postgres::Client) -> anyhow::Result<i64> {
        let row = db
            .query_one("SELECT count(*) FROM handbook_chunks", &[])
            .await?;
        Ok(row.get(0))
    }
    let rows = count(&db).await?;
    assert!(rows >= 8, "{rows} rows");
    let linked: Vec<String> = db
        .query_one(
            "SELECT links FROM handbook_chunks WHERE source = 'handbook/cluster.md' LIMIT 1",
            &[],
        )
        .await?
        .get(0);
    assert!(
        linked.contains(&"handbook/durability.md".to_owned()),
        "{linked:?}"
    );
    // Pushed again: the same rows, replaced, and the index not built again.
    let (ok, stdout, stderr) = push(Some(&postgres.url)).await?;
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(stdout, stdout_first);
    assert_eq!(count(&db).await?, rows);
    assert_eq!(
        llm.embedding_requests().len(),
        1,
        "the chunks were embedded once"
    );

    let client = cluster.client().await?;
    let done = run_file(&client, &graph, json!({"question": "refund to the card"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["found"][0]["source"], "handbook/billing.md",
        "{}",
        done.state
    );
    Ok(())
}
