//! W9: a knowledge base's index built and searched, beside LangChain's
//! `EnsembleRetriever` (BM25 and an in-memory vector store, fused by RRF)
//! on the same labelled corpus (`bench/peers/w9_corpus.py`).
//!
//! Both sides run in process and take the corpus's precomputed
//! embeddings, so neither times an embedding endpoint: the build is the
//! chunks, the BM25 index and the vectors (`Knowledge::build` and
//! `with_vectors`, in memory, as a worker builds one before it packs it);
//! a query is a hybrid retrieval of the top 5 without graph search (the
//! peer has none). Recall@5 counts the questions whose labelled source is
//! among the five.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde::Deserialize;
use weft_retrieval::{Chunking, Knowledge, Mode, Request};

use crate::report::Figure;

const TOP_K: usize = 5;

#[derive(Deserialize)]
struct Labelled {
    dim: usize,
    queries: Vec<Question>,
}

#[derive(Deserialize)]
struct Question {
    query: String,
    source: String,
}

fn vectors(path: &Path, dim: usize) -> Result<Vec<Vec<f32>>> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    ensure!(
        bytes.len() % (4 * dim) == 0,
        "{} is not {dim}-float vectors",
        path.display()
    );
    Ok(bytes
        .chunks_exact(4 * dim)
        .map(|vector| {
            vector
                .chunks_exact(4)
                .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
                .collect()
        })
        .collect())
}

/// W9 over the corpus in `dir`: `iterations` builds (after one warmup),
/// every question after the last.
pub(crate) fn w9(dir: &Path, iterations: usize) -> Result<Vec<Figure>> {
    let labelled: Labelled = serde_json::from_slice(&std::fs::read(dir.join("queries.json"))?)?;
    let corpus = std::fs::read(dir.join("corpus.jsonl"))?;
    let documents = weft_retrieval::document::read("corpus.jsonl", &corpus)?;
    let doc_vectors = vectors(&dir.join("vectors.f32"), labelled.dim)?;
    let query_vectors = vectors(&dir.join("query_vectors.f32"), labelled.dim)?;
    ensure!(
        query_vectors.len() == labelled.queries.len(),
        "a vector per question"
    );
    let mut builds = Vec::new();
    let mut knowledge = None;
    for i in 0..=iterations {
        let started = Instant::now();
        let built = Knowledge::build(&documents, &Chunking::default(), None)?
            .with_vectors(doc_vectors.clone(), None)?;
        let elapsed = started.elapsed();
        ensure!(
            built.chunks().len() == documents.len(),
            "one chunk per document"
        );
        if i > 0 {
            builds.push(elapsed);
        }
        knowledge = Some(built);
    }
    let knowledge = knowledge.context("built")?;
    // What a worker keeps on disk for it: the same build in a directory,
    // packed.
    let dir = std::env::temp_dir().join(format!("weft-bench-w9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let packed = Knowledge::build(&documents, &Chunking::default(), Some(&dir))?
        .with_vectors(doc_vectors.clone(), None)?
        .pack(&dir)?
        .len();
    let _ = std::fs::remove_dir_all(&dir);
    let mut latencies = Vec::with_capacity(labelled.queries.len());
    let mut found = 0;
    for (question, vector) in labelled.queries.iter().zip(&query_vectors) {
        let started = Instant::now();
        let passages = knowledge.retrieve(&Request {
            query: &question.query,
            query_vector: Some(vector),
            mode: Mode::Hybrid,
            top_k: TOP_K,
            hops: 0,
        })?;
        latencies.push(started.elapsed());
        let chunks = knowledge.chunks();
        found += usize::from(
            passages
                .iter()
                .take(TOP_K)
                .any(|p| chunks[p.chunk].source == question.source),
        );
    }
    let recall = found as f64 / labelled.queries.len() as f64;
    let mut sorted = latencies.clone();
    sorted.sort();
    let p99 = sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
    let docs = documents.len();
    Ok(vec![
        Figure {
            id: "w9_build".into(),
            label: format!(
                "W9 index build, {docs} chunks ({:.1} MiB packed, {:.1} MiB of it vectors)",
                packed as f64 / (1 << 20) as f64,
                (docs * labelled.dim * 4) as f64 / (1 << 20) as f64
            ),
            samples: builds,
            per: None,
        },
        Figure {
            id: "w9_query".into(),
            label: format!(
                "W9 hybrid query, top {TOP_K} (p99 {:.0} µs)",
                p99.as_secs_f64() * 1e6
            ),
            samples: latencies,
            per: Some((p99.as_secs_f64() * 1e6, "µs p99")),
        },
        Figure {
            id: "w9_recall".into(),
            label: format!("W9 recall@{TOP_K}, {} questions", labelled.queries.len()),
            samples: vec![Duration::ZERO],
            per: Some((recall, "recall@5")),
        },
    ])
}
