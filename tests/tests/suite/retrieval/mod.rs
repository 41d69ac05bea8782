//! `rag` nodes (SPEC 17, issue 39) on `worker` processes against the
//! local OpenAI-compatible test server, over real HTTP, one module per
//! concern: the nodes over a graph's files (`rag_nodes`), indexes shared
//! by the workers through the coordinator and `weft index build|list`
//! (`shared_indexes`), and knowledge bases kept in a real PostgreSQL with
//! pgvector, with `weft index push` (`tables`). What they share is here.

mod rag_nodes;
mod shared_indexes;
mod tables;

use serde_json::Value;
use weft_client::{Client, RunInfo};
use weft_tests::TestCluster;
use weft_tests::llm_server::TestLlm;

const KEY: &str = "sk-test-rag-k3y";

/// A cluster whose worker `w` (with `slots`) has the test server as its
/// provider.
async fn cluster(llm: &TestLlm, slots: u32) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    add_rag_worker_with(&mut cluster, "w", slots, &llm.url, &[])?;
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

/// Starts worker `name` with `slots` and the test server at `url` as its
/// provider, and `extra` arguments.
fn add_rag_worker_with(
    cluster: &mut TestCluster,
    name: &str,
    slots: u32,
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
    cluster.add_worker_with(name, slots, &args)
}

/// Starts worker `name` with the test server at `url` as its provider.
fn add_rag_worker(cluster: &mut TestCluster, name: &str, url: &str) -> anyhow::Result<()> {
    add_rag_worker_with(cluster, name, 1, url, &[])
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
    add_rag_worker_with(&mut cluster, "w", 1, &llm.url, &secrets)?;
    cluster.wait_for_workers(&["w"]).await?;
    Ok(cluster)
}

/// Runs `weft ARGS` against `coordinator` with `env` (a `None` value
/// removes the variable), without blocking this test's runtime (the test
/// server answers on it): whether it succeeded, its stdout, its stderr.
async fn weft(
    coordinator: &str,
    args: &[&str],
    env: &[(&str, Option<&str>)],
) -> anyhow::Result<(bool, String, String)> {
    let mut command = tokio::process::Command::new(weft_tests::binary("weft"));
    command
        .env("WEFT_COORDINATOR", coordinator)
        .args(args)
        .stdin(std::process::Stdio::null());
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let out = command.output().await?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}
