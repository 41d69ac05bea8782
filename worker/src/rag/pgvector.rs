//! A knowledge base kept in PostgreSQL with the pgvector extension
//! (`store: {kind: pgvector, url, table}`, SPEC 17): the worker queries
//! the table instead of an index of the bundle's files.
//!
//! The table holds one chunk per row: `text`, `embedding` (a `vector`),
//! `source`, `heading` and `links` (a `text[]` of the sources the chunk's
//! document links to). `keyword` ranks rows by PostgreSQL's full-text
//! search (`ts_rank_cd` over the English configuration, any of the query's
//! words matching), `vector` by pgvector's cosine distance to the query's
//! embedding, `hybrid` fuses both by RRF, each ranking `2 × top_k` deep as
//! for an index. Graph search follows `links` both ways, `hops` deep, each
//! linked document's rows ranked below the hit that led to them (their
//! score halved per hop), at most `top_k` added in all. The URL's
//! `${NAME}`s are read from the worker's secrets and never shown.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde::Deserialize;
use tokio_postgres::{Client, NoTls, Row};
use weft_retrieval::fuse::reciprocal_rank_fusion;
use weft_retrieval::knowledge::CANDIDATES_PER_HIT;
use weft_retrieval::{Chunk, Mode, Passage};

use crate::secrets::{Redactor, Secrets};
use crate::task::{Failure, FailureKind};

/// `store: {kind: pgvector, url, table}` as the coordinator sends it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PgStore {
    /// The connection URL, `${NAME}`s unresolved.
    pub url: String,
    /// `name` or `schema.name` (checked by validation).
    pub table: String,
}

/// What one search asks of a table.
pub(crate) struct Search<'a> {
    pub knowledge: &'a str,
    pub query: &'a str,
    pub query_vector: Option<&'a [f32]>,
    pub mode: Mode,
    pub top_k: usize,
    pub hops: usize,
    pub deadline: Instant,
}

/// A row's columns.
const COLUMNS: &str = "source, coalesce(heading, ''), text, coalesce(links, '{}')";

/// The table's name quoted for SQL, each part as an identifier.
fn quoted(table: &str) -> String {
    table
        .split('.')
        .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

/// The chunks found, and the passages over them (`chunk` naming one of
/// them), best first.
pub(crate) async fn search(
    store: &PgStore,
    secrets: &Secrets,
    search: Search<'_>,
) -> Result<(Vec<Chunk>, Vec<Passage>), Failure> {
    let name = search.knowledge;
    let mut redactor = Redactor::default();
    let url = secrets.substitute(&store.url, &mut redactor).map_err(|e| {
        Failure::new(
            FailureKind::InvalidTask,
            format!("knowledge '{name}': store url: {e}"),
        )
    })?;
    let failed = |what: &str, error: tokio_postgres::Error| {
        let detail = error
            .as_db_error()
            .map_or_else(|| error.to_string(), |db| db.message().to_owned());
        Failure::new(
            FailureKind::WorkerError,
            redactor.redact(&format!(
                "knowledge '{name}': PostgreSQL table '{}': {what}: {detail}",
                store.table
            )),
        )
    };
    let work = async {
        let (client, connection) = tokio_postgres::connect(&url, NoTls)
            .await
            .map_err(|e| failed("cannot connect", e))?;
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        let found = Table {
            client: &client,
            table: quoted(&store.table),
        }
        .search(&search)
        .await;
        drop(client);
        let _ = connection.await;
        found.map_err(|e| failed("query", e))
    };
    match tokio::time::timeout_at(search.deadline.into(), work).await {
        Ok(found) => found,
        Err(_) => Err(Failure::new(
            FailureKind::Timeout,
            format!(
                "knowledge '{name}': PostgreSQL table '{}' did not answer within the step's time",
                store.table
            ),
        )),
    }
}

/// A connection to one table.
struct Table<'a> {
    client: &'a Client,
    table: String,
}

/// The chunks met so far, each once, by their place.
#[derive(Default)]
struct Found {
    chunks: Vec<Chunk>,
    links: Vec<Vec<String>>,
    places: HashMap<(String, String, String), usize>,
}

impl Found {
    fn add(&mut self, row: &Row) -> usize {
        let (source, heading, text): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        let key = (source.clone(), heading.clone(), text.clone());
        if let Some(&place) = self.places.get(&key) {
            return place;
        }
        let place = self.chunks.len();
        self.chunks.push(Chunk {
            source,
            heading,
            index: 0,
            text,
        });
        self.links.push(row.get(3));
        self.places.insert(key, place);
        place
    }
}

impl Table<'_> {
    async fn search(
        &self,
        search: &Search<'_>,
    ) -> Result<(Vec<Chunk>, Vec<Passage>), tokio_postgres::Error> {
        let depth = (search.top_k * CANDIDATES_PER_HIT) as i64;
        let mut found = Found::default();
        let mut hits: Vec<(usize, f64)> = match (search.mode, search.query_vector) {
            (Mode::Keyword, _) | (_, None) => {
                self.by_words(search.query, depth, &mut found).await?
            }
            (Mode::Vector, Some(vector)) => self.by_vector(vector, depth, &mut found).await?,
            (Mode::Hybrid, Some(vector)) => {
                let words = self.by_words(search.query, depth, &mut found).await?;
                let vectors = self.by_vector(vector, depth, &mut found).await?;
                let rankings = [words, vectors].map(|r| r.into_iter().map(|(c, _)| c).collect());
                reciprocal_rank_fusion(&rankings)
            }
        };
        hits.truncate(search.top_k);
        let mut passages = Vec::new();
        let mut placed: HashSet<usize> = hits.iter().map(|(c, _)| *c).collect();
        let mut added = 0;
        for &(hit, score) in &hits {
            passages.push(Passage {
                n: passages.len() + 1,
                chunk: hit,
                score,
                via: None,
            });
            let mut seen = HashSet::from([found.chunks[hit].source.clone()]);
            let mut frontier = vec![found.chunks[hit].source.clone()];
            let mut weight = score;
            for _ in 0..search.hops {
                if added >= search.top_k || frontier.is_empty() {
                    break;
                }
                weight /= 2.0;
                let next: Vec<String> = self
                    .neighbours(&frontier, &found)
                    .await?
                    .into_iter()
                    .filter(|source| seen.insert(source.clone()))
                    .collect();
                for chunk in self.rows_of(&next, &mut found).await? {
                    if added < search.top_k && placed.insert(chunk) {
                        added += 1;
                        passages.push(Passage {
                            n: passages.len() + 1,
                            chunk,
                            score: weight,
                            via: Some(hit),
                        });
                    }
                }
                frontier = next;
            }
        }
        Ok((found.chunks, passages))
    }

    /// Rows whose text has any of the query's words, by `ts_rank_cd`.
    async fn by_words(
        &self,
        query: &str,
        depth: i64,
        found: &mut Found,
    ) -> Result<Vec<(usize, f64)>, tokio_postgres::Error> {
        // plainto_tsquery joins the words with & (all of them); | asks for any.
        let sql = format!(
            "WITH q AS (SELECT replace(plainto_tsquery('english', $1)::text, '&', '|') AS words) \
             SELECT {COLUMNS}, ts_rank_cd(to_tsvector('english', text), q.words::tsquery)::float8 \
             FROM {}, q WHERE q.words <> '' AND to_tsvector('english', text) @@ q.words::tsquery \
             ORDER BY 5 DESC, source LIMIT $2",
            self.table
        );
        let rows = self.client.query(&sql, &[&query, &depth]).await?;
        Ok(rows
            .iter()
            .map(|row| (found.add(row), row.get::<_, f64>(4)))
            .collect())
    }

    /// Rows by the cosine similarity of their embedding and the query's.
    async fn by_vector(
        &self,
        vector: &[f32],
        depth: i64,
        found: &mut Found,
    ) -> Result<Vec<(usize, f64)>, tokio_postgres::Error> {
        let literal = format!(
            "[{}]",
            vector
                .iter()
                .map(f32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let sql = format!(
            "SELECT {COLUMNS}, (1 - (embedding <=> $1::text::vector))::float8 FROM {} \
             WHERE embedding IS NOT NULL ORDER BY embedding <=> $1::text::vector, source LIMIT $2",
            self.table
        );
        let rows = self.client.query(&sql, &[&literal, &depth]).await?;
        Ok(rows
            .iter()
            .map(|row| (found.add(row), row.get::<_, f64>(4)))
            .collect())
    }

    /// The sources `sources`' rows link to, and those whose rows link to
    /// them.
    async fn neighbours(
        &self,
        sources: &[String],
        found: &Found,
    ) -> Result<Vec<String>, tokio_postgres::Error> {
        let mut out: Vec<String> = Vec::new();
        for (chunk, links) in found.chunks.iter().zip(&found.links) {
            if sources.contains(&chunk.source) {
                out.extend(links.iter().cloned());
            }
        }
        let sql = format!(
            "SELECT DISTINCT source FROM {} WHERE links && $1::text[] ORDER BY source",
            self.table
        );
        for row in self.client.query(&sql, &[&sources]).await? {
            out.push(row.get(0));
        }
        let mut seen = HashSet::new();
        out.retain(|source| seen.insert(source.clone()));
        Ok(out)
    }

    /// The rows of `sources`, in their order.
    async fn rows_of(
        &self,
        sources: &[String],
        found: &mut Found,
    ) -> Result<Vec<usize>, tokio_postgres::Error> {
        if sources.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE source = ANY($1::text[]) ORDER BY array_position($1::text[], source), ctid",
            self.table
        );
        let rows = self.client.query(&sql, &[&sources]).await?;
        Ok(rows.iter().map(|row| found.add(row)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_name_is_quoted_part_by_part() {
        assert_eq!(quoted("chunks"), "\"chunks\"");
        assert_eq!(quoted("rag.chunks"), "\"rag\".\"chunks\"");
    }
}
