//! Knowledge bases kept in a real PostgreSQL with pgvector (`store:`),
//! searched by `rag` nodes and loaded by `weft index push`.

use serde_json::json;
use weft_client::{GraphBundle, RunStatus};
use weft_tests::llm_server::{Reply, TestLlm};
use weft_tests::postgres::TestPostgres;

use super::*;

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
    let postgres = TestPostgres::start("push")?;
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("unused".into())).await?;
    let cluster = cluster_with_table(&llm, &postgres).await?;
    let graph = graph_beside_handbook(&scratch("push")?, PUSHED)?;
    let graph_path = graph.display().to_string();
    let push = |dsn: Option<&str>| {
        let args = [
            "index",
            "push",
            graph_path.as_str(),
            "handbook",
            "--to",
            "tables",
        ];
        let url = cluster.url().to_owned();
        let dsn = dsn.map(str::to_owned);
        async move { weft(&url, &args, &[("HANDBOOK_DSN", dsn.as_deref())]).await }
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
