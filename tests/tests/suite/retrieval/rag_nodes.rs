//! `rag` nodes over a graph's files: knowledge bases bundled from their
//! `sources` globs, indexed once per content on a worker and reused,
//! retrieval by keyword, vectors and both, graph search over the pages'
//! links, a model's rerank, the completion over the passages, a map of
//! `rag` items — and what is refused, named.

use serde_json::{Value, json};
use weft_client::{GraphBundle, RunStatus};
use weft_tests::llm_server::{EmbeddingReply, Reply, TestLlm, last_message};

use super::*;

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
    let done = run_file(&client, &example, question.clone()).await?;
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
    // The step's worker was sent the one field its templates read (the
    // question), not `answer` nor `cited`.
    let question_json = serde_json::to_string(&question["question"])?;
    let sent = cluster.metrics()?.lines().find_map(|l| {
        l.strip_prefix("weft_state_bytes_sent_total ")?
            .parse::<usize>()
            .ok()
    });
    assert_eq!(sent, Some(question_json.len()));
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
    add_rag_worker(&mut cluster, "w", &llm.url)?;
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
    let built = weft_tests::events_of(&client, &done.run_id, "index_built").await?;
    assert_eq!(built[0].body["embedding_calls"], 1);
    assert_eq!(
        built[0].body["vector_search"], "exact",
        "a small knowledge base is searched exactly"
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

/// `embeddings: {search: approximate}` builds an HNSW graph into the
/// index: the event and the coordinator's list say so, and vector
/// retrieval through it finds what exact search finds.
#[tokio::test]
async fn an_approximate_vector_index_is_built_when_asked_and_finds_the_same() -> anyhow::Result<()>
{
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let exact = HYBRID.replace("top_k: 2", "top_k: 2\n    mode: vector");
    let approximate = exact.replace(
        "embeddings: { model: embed-small }",
        "embeddings: { model: embed-small, search: approximate }",
    );
    let (_cluster, client, graph) = beside_handbook(&llm, 1, "approximate", &approximate).await?;
    let exact_graph = graph_beside_handbook(&scratch("approximate-exact")?, &exact)?;
    let mut first = None;
    for question in ["refund to the card", "invoices by email", "leader stops"] {
        let input = json!({ "question": question });
        let done = run_file(&client, &graph, input.clone()).await?;
        first.get_or_insert(done.run_id.clone());
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        let truth = run_file(&client, &exact_graph, input).await?;
        assert_eq!(truth.status, RunStatus::Completed, "{:?}", truth.error);
        assert_eq!(done.state["found"], truth.state["found"], "{question}");
    }
    let first = first.expect("a run");
    let built = weft_tests::events_of(&client, &first, "index_built").await?;
    assert_eq!(built[0].body["vector_search"], "approximate", "{built:?}");
    // A worker hands its built index to the coordinator after the step's
    // result, so the list may lag the run by a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let kept = client.indexes(None).await?;
        let searches: Vec<Option<&str>> = kept.iter().map(|i| i.vector_search.as_deref()).collect();
        if searches.contains(&Some("approximate")) && searches.contains(&Some("exact")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the coordinator keeps {searches:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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
        (
            "knowledge: { handbook: { sources: 'handbook/*.md', embeddings: { model: m, search: hnsw } } }\nnodes:\n  r: { kind: rag, start: true, knowledge: handbook, query: q }\n",
            "knowledge 'handbook': embeddings: search 'hnsw' is not one of exact, approximate",
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
