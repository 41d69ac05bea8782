//! `weft index`: a graph's knowledge indexes built ahead of its runs
//! (`build`), and the indexes a coordinator keeps (`list`).
//!
//! `build` runs, on the cluster, a graph made for it: one `rag` step per
//! knowledge base of the graph, each over the same files beside the graph
//! with the same chunking and embedding model — so each index has the key
//! the graph's own runs will look for, is built by a worker (with its
//! provider, when it embeds) and kept by the coordinator for the
//! namespace, exactly as the first run would have. A knowledge base whose
//! index is kept already is not built again.

use std::path::Path;

use serde_json::{Map, Value, json};
use weft_client::{BundleOptions, Client, GraphBundle, KnowledgeIndex, RunStatus};
use weft_graph::GraphError;
use weft_graph::KnowledgeDecl;

use super::connect::report;
use super::session::Session;
use super::terminal::{err, out};
use super::{exit, output};

/// The graph that builds the indexes of `bases`, knowledge bases of
/// `graph`: JSON text.
fn index_graph(graph: &weft_graph::Graph, bases: &[&KnowledgeDecl]) -> String {
    let mut knowledge = Map::new();
    let mut nodes = Map::new();
    for base in bases {
        let mut decl = json!({
            "sources": base.sources,
            "chunk": {"size": base.chunk_size, "overlap": base.chunk_overlap},
        });
        if let Some(embeddings) = &base.embeddings {
            decl["embeddings"] = json!({"model": embeddings.model});
            if let Some(provider) = &embeddings.provider {
                decl["embeddings"]["provider"] = json!(provider);
            }
        }
        knowledge.insert(base.name.clone(), decl);
        nodes.insert(
            format!("index_{}", base.name),
            json!({
                "kind": "rag",
                "start": true,
                "knowledge": base.name,
                "query": "index",
                "mode": "keyword",
                "top_k": 1,
                "graph": {"hops": 0},
            }),
        );
    }
    json!({
        "name": format!("{}-indexes", graph.name),
        "description": format!("Builds the knowledge indexes of graph '{}' (weft index build)", graph.name),
        "knowledge": knowledge,
        "nodes": nodes,
    })
    .to_string()
}

/// The graph in `graph_path` and its bundle; findings printed when it
/// does not load.
pub(super) fn loaded(graph_path: &Path) -> Option<(weft_graph::Graph, GraphBundle)> {
    let bundle = match GraphBundle::from_file_with(graph_path, BundleOptions::default()) {
        Ok(bundle) => bundle,
        Err(weft_client::BundleError::Graph(GraphError::Invalid(findings))) => {
            for finding in findings {
                err!("{finding}");
            }
            return None;
        }
        Err(error) => {
            err!("error: {error}");
            return None;
        }
    };
    match weft_graph::load_file(graph_path) {
        Ok((graph, _)) => Some((graph, bundle)),
        Err(error) => {
            err!("error: {error}");
            None
        }
    }
}

/// Builds the indexes of `bases` (knowledge bases of `graph`, whose
/// bundle is `bundle`) on the cluster; the `index_built` events of the
/// run, or the exit status of a failure (said).
pub(super) async fn build_indexes(
    client: &Client,
    graph: &weft_graph::Graph,
    bundle: GraphBundle,
    bases: &[&KnowledgeDecl],
) -> Result<Vec<Value>, u8> {
    // The graph's own file is left out; its knowledge bases' files stay,
    // at the same paths beside the new graph, so the keys are the same.
    let own = bundle.graph_path.clone();
    let builder_path = format!(".weft-index-{}.json", graph.name);
    let mut files: Vec<_> = bundle
        .files
        .into_iter()
        .filter(|(path, _, _)| path != &own)
        .collect();
    files.push((
        builder_path.clone(),
        index_graph(graph, bases).into_bytes(),
        0o644,
    ));
    let bundle = GraphBundle {
        graph_path: builder_path,
        files,
    };
    let submitted = match client.submit_bundle(bundle, &json!({})).await {
        Ok(submitted) => submitted,
        Err(error) => return Err(report(&error)),
    };
    let run_id = submitted.run_id.to_string();
    err!(
        "run {run_id} builds the indexes of {} knowledge base(s)",
        bases.len()
    );
    let info = match client.wait(&run_id).await {
        Ok(info) => info,
        Err(error) => return Err(report(&error)),
    };
    if info.status != RunStatus::Completed {
        return Err(output::show(&info, false));
    }
    built_in(client, &run_id)
        .await
        .map_err(|error| report(&error))
}

/// `weft index build GRAPH`.
pub async fn build(session: &Session, graph_path: &Path, json_output: bool) -> u8 {
    let Some((graph, bundle)) = loaded(graph_path) else {
        return exit::INVALID;
    };
    // A knowledge base kept in a table (`store:`) has no index of Weft's.
    let indexed: Vec<&KnowledgeDecl> = graph
        .knowledge
        .iter()
        .filter(|b| b.store.is_none())
        .collect();
    if indexed.is_empty() {
        err!(
            "error: graph '{}' declares no knowledge base with `sources` (`knowledge:`): there is no index to build",
            graph_path.display()
        );
        return exit::INVALID;
    }
    let built = match build_indexes(&session.client, &graph, bundle, &indexed).await {
        Ok(built) => built,
        Err(code) => return code,
    };
    let rows: Vec<Value> = indexed
        .iter()
        .map(|base| {
            built
                .iter()
                .find(|b| b["knowledge"] == base.name.as_str())
                .map_or_else(
                    || json!({"knowledge": base.name, "built": false}),
                    |b| {
                        json!({
                            "knowledge": base.name,
                            "built": true,
                            "key": b["key"],
                            "files": b["files"],
                            "chunks": b["chunks"],
                            "index_bytes": b["index_bytes"],
                            "embedding_calls": b["embedding_calls"],
                            "vector_search": b["vector_search"],
                            "latency_ms": b["latency_ms"],
                        })
                    },
                )
        })
        .collect();
    if json_output {
        out!("{}", json!({"indexes": rows}));
        return exit::OK;
    }
    for row in &rows {
        let name = row["knowledge"].as_str().unwrap_or_default();
        if row["built"] == true {
            let search = row["vector_search"]
                .as_str()
                .map(|search| format!(", {search} vector search"))
                .unwrap_or_default();
            out!(
                "{name}: built ({} files, {} chunks, {} packed, {} embedding calls{search}, {} ms)",
                row["files"],
                row["chunks"],
                human_bytes(row["index_bytes"].as_u64().unwrap_or(0)),
                row["embedding_calls"],
                row["latency_ms"],
            );
        } else {
            out!("{name}: already built");
        }
    }
    exit::OK
}

/// The `index_built` events of run `run_id`, as JSON.
async fn built_in(client: &Client, run_id: &str) -> Result<Vec<Value>, weft_client::ClientError> {
    use tokio_stream::StreamExt;
    let mut events = client.watch(run_id, 0).await?;
    let mut built = Vec::new();
    while let Some(event) = events.next().await {
        let event = event?;
        if event.kind == "index_built" {
            built.push(event.body);
        }
    }
    Ok(built)
}

/// `weft index list`.
pub async fn list(session: &Session, namespace: Option<&str>, json_output: bool) -> u8 {
    let indexes = match session.client.indexes(namespace).await {
        Ok(indexes) => indexes,
        Err(error) => return report(&error),
    };
    if json_output {
        let rows: Vec<Value> = indexes.iter().map(row).collect();
        out!("{}", json!({ "indexes": rows }));
        return exit::OK;
    }
    if indexes.is_empty() {
        err!(
            "no knowledge index is kept (the first run of a graph with `knowledge:`, or `weft index build GRAPH`, builds them)"
        );
        return exit::OK;
    }
    out!(
        "{:<16}  {:<12}  {:<20}  {:>6}  {:>7}  {:>9}  {:<22}  BUILT BY",
        "KEY",
        "NAMESPACE",
        "KNOWLEDGE",
        "FILES",
        "CHUNKS",
        "SIZE",
        "EMBEDDINGS"
    );
    for index in &indexes {
        out!(
            "{:<16}  {:<12}  {:<20}  {:>6}  {:>7}  {:>9}  {:<22}  {}",
            &index.key[..index.key.len().min(16)],
            if index.namespace.is_empty() {
                "-"
            } else {
                &index.namespace
            },
            index.knowledge,
            index.files,
            index.chunks,
            human_bytes(index.index_bytes),
            match (&index.model, index.vector_search.as_deref()) {
                (None, _) => "-".to_owned(),
                (Some(model), Some("approximate")) => format!("{model} (approximate)"),
                (Some(model), _) => model.clone(),
            },
            index.built_by,
        );
    }
    exit::OK
}

fn row(index: &KnowledgeIndex) -> Value {
    json!({
        "namespace": index.namespace,
        "key": index.key,
        "knowledge": index.knowledge,
        "files": index.files,
        "bytes": index.bytes,
        "chunks": index.chunks,
        "index_bytes": index.index_bytes,
        "model": index.model,
        "embedding_calls": index.embedding_calls,
        "vector_search": index.vector_search,
        "build_ms": index.build_ms,
        "built_by": index.built_by,
        "run_id": index.run_id,
        "built_at_ms": index.built_at_ms,
        "used_at_ms": index.used_at_ms,
    })
}

/// `812 B`, `14.2 KiB`, `15.2 MiB`.
fn human_bytes(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_graph_keeps_each_knowledge_base_as_declared() {
        let yaml = "name: qa\nknowledge:\n  handbook:\n    sources: ['docs/*.md']\n    chunk: {size: 300, overlap: 40}\n    embeddings: {model: embed-small, provider: local}\n  faq:\n    sources: 'faq.md'\nnodes:\n  a: {kind: rag, start: true, knowledge: [handbook, faq], query: q}\n";
        let dir = std::env::temp_dir().join(format!("weft-index-graph-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("docs")).unwrap();
        std::fs::write(dir.join("docs/a.md"), "# A\nalpha").unwrap();
        std::fs::write(dir.join("faq.md"), "# F\nfaq").unwrap();
        std::fs::write(dir.join("qa.yaml"), yaml).unwrap();
        let (graph, _) = weft_graph::load_file(&dir.join("qa.yaml")).unwrap();
        let bases: Vec<&KnowledgeDecl> = graph.knowledge.iter().collect();
        let text = index_graph(&graph, &bases);
        std::fs::write(dir.join("built.json"), &text).unwrap();
        let (built, _) = weft_graph::load_file(&dir.join("built.json")).unwrap();
        assert_eq!(built.knowledge.len(), 2);
        for (a, b) in graph.knowledge.iter().zip(&built.knowledge) {
            assert_eq!(
                (
                    &a.name,
                    &a.sources,
                    a.chunk_size,
                    a.chunk_overlap,
                    &a.embeddings
                ),
                (
                    &b.name,
                    &b.sources,
                    b.chunk_size,
                    b.chunk_overlap,
                    &b.embeddings
                )
            );
        }
        assert_eq!(built.nodes.len(), 2, "one rag step per knowledge base");
        std::fs::remove_dir_all(dir).ok();
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(15_938_355), "15.2 MiB");
    }
}
