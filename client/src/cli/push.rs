//! `weft index push GRAPH KNOWLEDGE --to STORE`: a knowledge base's chunks
//! and embeddings loaded into the PostgreSQL table another knowledge base
//! of the graph names (`store: {kind: pgvector, url, table}`), for corpora
//! that outgrow a bundle or that other systems also read.
//!
//! The index is built on the cluster, as `weft index build` builds it (the
//! workers embed the chunks with their providers, so no key is needed
//! here), fetched from the coordinator, and written to the table in one
//! transaction: the rows of the knowledge base's sources are replaced, the
//! table (`id`, `source`, `heading`, `chunk`, `text`, `links`,
//! `embedding`) and its full-text index made if missing. The store's URL
//! may use `${NAME}`, read from this command's environment.

use std::path::Path;

use serde_json::json;
use weft_client::GraphBundle;
use weft_graph::KnowledgeDecl;
use weft_graph::knowledge::Store;
use weft_retrieval::Chunking;
use weft_retrieval::pack::{Rows, index_key};
use weft_retrieval::vectors::VectorSearch;

use super::connect::report;
use super::exit;
use super::indexes::{build_indexes, loaded};
use super::session::Session;
use super::terminal::{err, out};

/// `weft index push`.
pub async fn push(
    session: &Session,
    graph_path: &Path,
    knowledge: &str,
    to: &str,
    json_output: bool,
) -> u8 {
    let Some((graph, bundle)) = loaded(graph_path) else {
        return exit::INVALID;
    };
    let find = |name: &str| graph.knowledge.iter().find(|b| b.name == name);
    let (Some(base), Some(target)) = (find(knowledge), find(to)) else {
        let missing = if find(knowledge).is_none() {
            knowledge
        } else {
            to
        };
        err!(
            "error: graph '{}' has no knowledge base '{missing}'",
            graph_path.display()
        );
        return exit::INVALID;
    };
    let store = match (&base.store, &target.store) {
        (None, Some(store)) => store.clone(),
        (Some(_), _) => {
            err!(
                "error: knowledge '{knowledge}' is kept in a table itself: push one with `sources`"
            );
            return exit::INVALID;
        }
        (None, None) => {
            err!(
                "error: knowledge '{to}' has no `store: {{kind: pgvector, url, table}}` to push into"
            );
            return exit::INVALID;
        }
    };
    if let Some(wanted) = &target.embeddings {
        let have = base.embeddings.as_ref().map(|e| e.model.as_str());
        if have != Some(wanted.model.as_str()) {
            err!(
                "error: knowledge '{to}' embeds queries with '{}', and '{knowledge}' {}: its vectors would not compare",
                wanted.model,
                have.map_or_else(|| "has no embeddings".to_owned(), |m| format!("with '{m}'"))
            );
            return exit::INVALID;
        }
    }
    let url = match substitute(&store.url) {
        Ok(url) => url,
        Err(name) => {
            err!(
                "error: knowledge '{to}': store url: ${{{name}}} is not set in this command's environment"
            );
            return exit::INVALID;
        }
    };
    let key = key_of(base, &bundle);
    let client = &session.client;
    if let Err(code) = build_indexes(client, &graph, bundle, &[base]).await {
        return code;
    }
    let blob = match client.fetch_index(None, &key).await {
        Ok(blob) => blob,
        Err(error) => return report(&error),
    };
    let rows = match weft_retrieval::pack::rows(&blob) {
        Ok(rows) => rows,
        Err(error) => {
            err!("error: knowledge '{knowledge}': {error}");
            return exit::FAILED;
        }
    };
    match write(&url, &store, &rows).await {
        Ok(()) => {}
        Err(error) => {
            let detail = error
                .as_db_error()
                .map_or_else(|| error.to_string(), |db| db.message().to_owned());
            err!("error: PostgreSQL table '{}': {detail}", store.table);
            return exit::FAILED;
        }
    }
    let sources = {
        let mut sources: Vec<&str> = rows.chunks.iter().map(|c| c.source.as_str()).collect();
        sources.dedup();
        sources.len()
    };
    let dimensions = rows
        .vectors
        .as_ref()
        .and_then(|v| v.first())
        .map_or(0, Vec::len);
    if json_output {
        out!(
            "{}",
            json!({"knowledge": knowledge, "table": store.table, "rows": rows.chunks.len(), "sources": sources, "dimensions": dimensions})
        );
    } else {
        out!(
            "{knowledge} -> {}: {} rows from {sources} sources{}",
            store.table,
            rows.chunks.len(),
            if dimensions > 0 {
                format!(", embeddings of {dimensions} dimensions")
            } else {
                String::new()
            }
        );
    }
    exit::OK
}

/// The key the workers give `base`'s index over the bundle's files.
fn key_of(base: &KnowledgeDecl, bundle: &GraphBundle) -> String {
    let hashed: Vec<(String, String)> = bundle
        .files
        .iter()
        .filter(|(path, _, _)| path != &bundle.graph_path && base.matches(path))
        .map(|(path, content, _)| (path.clone(), weft_proto::index_pieces::sha256_hex(content)))
        .collect();
    let hashed: Vec<(&str, &str)> = hashed
        .iter()
        .map(|(p, s)| (p.as_str(), s.as_str()))
        .collect();
    let chunking = Chunking::new(base.chunk_size, base.chunk_overlap)
        .expect("validation checked the chunking");
    let search = base
        .embeddings
        .as_ref()
        .and_then(|e| e.search)
        .map(|search| match search {
            weft_graph::knowledge::VectorSearch::Exact => VectorSearch::Exact,
            weft_graph::knowledge::VectorSearch::Approximate => VectorSearch::Approximate,
        });
    index_key(
        &hashed,
        &chunking,
        base.embeddings.as_ref().map(|e| e.model.as_str()),
        search,
    )
}

/// `text` with each `${NAME}` read from the environment; the name of one
/// that is not set.
fn substitute(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(&std::env::var(name).map_err(|_| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The table's name quoted for SQL, and a name for its full-text index.
fn names(table: &str) -> (String, String) {
    let quoted = table
        .split('.')
        .map(|part| format!("\"{part}\""))
        .collect::<Vec<_>>()
        .join(".");
    let last = table.rsplit('.').next().unwrap_or(table);
    (quoted, format!("\"{last}_text_search\""))
}

/// Replaces the rows of `rows`' sources in the table (made if missing).
async fn write(url: &str, store: &Store, rows: &Rows) -> Result<(), tokio_postgres::Error> {
    let (mut client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let (table, text_index) = names(&store.table);
    let dimensions = rows.vectors.as_ref().and_then(|v| v.first()).map(Vec::len);
    let embedding = dimensions.map_or_else(|| "vector".to_owned(), |d| format!("vector({d})"));
    client
        .batch_execute(&format!(
            "CREATE EXTENSION IF NOT EXISTS vector; \
             CREATE TABLE IF NOT EXISTS {table} (id bigserial PRIMARY KEY, source text NOT NULL, \
             heading text NOT NULL DEFAULT '', chunk integer NOT NULL DEFAULT 0, text text NOT NULL, \
             links text[] NOT NULL DEFAULT '{{}}', embedding {embedding}); \
             CREATE INDEX IF NOT EXISTS {text_index} ON {table} USING gin (to_tsvector('english', text));"
        ))
        .await?;
    let transaction = client.transaction().await?;
    let mut sources: Vec<&str> = rows.chunks.iter().map(|c| c.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    transaction
        .execute(
            &format!("DELETE FROM {table} WHERE source = ANY($1::text[])"),
            &[&sources],
        )
        .await?;
    let insert = transaction
        .prepare(&format!(
            "INSERT INTO {table} (source, heading, chunk, text, links, embedding) \
             VALUES ($1, $2, $3, $4, $5, $6::text::vector)"
        ))
        .await?;
    for (index, chunk) in rows.chunks.iter().enumerate() {
        let vector = rows.vectors.as_ref().map(|vectors| {
            let parts: Vec<String> = vectors[index].iter().map(f32::to_string).collect();
            format!("[{}]", parts.join(","))
        });
        let place = i32::try_from(chunk.index).unwrap_or(i32::MAX);
        transaction
            .execute(
                &insert,
                &[
                    &chunk.source,
                    &chunk.heading,
                    &place,
                    &chunk.text,
                    &rows.links[index],
                    &vector,
                ],
            )
            .await?;
    }
    transaction.commit().await?;
    drop(client);
    let _ = connection.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_reads_its_names_from_the_environment() {
        // SAFETY-free: the variable is this test's own.
        assert_eq!(
            substitute("postgresql://h/db").unwrap(),
            "postgresql://h/db"
        );
        assert_eq!(
            substitute("${WEFT_PUSH_TEST_SURELY_UNSET}").unwrap_err(),
            "WEFT_PUSH_TEST_SURELY_UNSET"
        );
        assert_eq!(
            names("rag.chunks"),
            (
                "\"rag\".\"chunks\"".to_owned(),
                "\"chunks_text_search\"".to_owned()
            )
        );
    }
}
