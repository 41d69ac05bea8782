//! How retrieval's parts scale, measured (run in release):
//! `cargo run --release -p weft-retrieval --example scale [-- --quick]`.
//!
//! Vector search over N embeddings of D dimensions: exact (the median of
//! several queries), and approximate (the HNSW graph's build time, its
//! queries' median, and its recall@10 against exact search: the share of
//! its ten hits as near as exact search's tenth). The
//! embeddings are clustered as texts on a few hundred topics are; uniform
//! random vectors would be a worst case no embedding model gives. Then
//! building and querying the keyword index of N chunks of about 100 words.
//! The figures decide where exact search stops being fine for a knowledge
//! base carried in a bundle (`weft_retrieval::vectors::EXACT_UP_TO`).

use std::time::{Duration, Instant};

use weft_retrieval::Chunk;
use weft_retrieval::keyword::KeywordIndex;
use weft_retrieval::vectors::{VectorSearch, Vectors};

/// A deterministic pseudo-random stream (xorshift), so runs compare.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f32 {
        (self.next() % 2001) as f32 / 1000.0 - 1.0
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// `count` embeddings of `dimensions` around 500 topic centres.
fn clustered(stream: &mut Stream, centres: &[Vec<f32>], count: usize) -> Vec<Vec<f32>> {
    (0..count)
        .map(|_| {
            let centre = &centres[(stream.next() % centres.len() as u64) as usize];
            centre.iter().map(|c| c + stream.unit()).collect()
        })
        .collect()
}

/// `count` embeddings of `dimensions` from a W9 corpus's file
/// (`bench/peers/w9_corpus.py`), if `--corpus DIR` names one.
fn corpus_vectors(file: &std::path::Path, dimensions: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(file).expect("the corpus's vectors");
    bytes
        .chunks_exact(4 * dimensions)
        .map(|v| {
            v.chunks_exact(4)
                .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
                .collect()
        })
        .collect()
}

/// Exact and approximate search over `vectors`, asked `queries`: one row.
fn compare(vectors: Vec<Vec<f32>>, queries: &[Vec<f32>]) {
    let (count, dimensions) = (vectors.len(), vectors[0].len());
    let exact = Vectors::new(vectors.clone(), Some(VectorSearch::Exact)).expect("one length");
    let started = Instant::now();
    let approximate = Vectors::new(vectors, Some(VectorSearch::Approximate)).expect("one length");
    let build = started.elapsed();
    let (mut exact_times, mut approximate_times) = (Vec::new(), Vec::new());
    let (mut found, mut wanted) = (0, 0);
    for query in queries {
        let started = Instant::now();
        let truth = exact.nearest(query, 10).expect("one length");
        exact_times.push(started.elapsed());
        let started = Instant::now();
        let got = approximate.nearest(query, 10).expect("one length");
        approximate_times.push(started.elapsed());
        // A hit counts when it is as near as exact search's last: among
        // chunks tied at one similarity, either may be given.
        let last = truth.last().map_or(f32::MIN, |(_, similarity)| *similarity);
        found += got
            .iter()
            .filter(|(_, similarity)| *similarity >= last - 1e-6)
            .count();
        wanted += truth.len();
    }
    println!(
        "| {count} | {dimensions} | {:.1} ms | {:.1} s | {:.2} ms | {:.3} |",
        ms(median(exact_times)),
        build.as_secs_f64(),
        ms(median(approximate_times)),
        found as f64 / wanted as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let corpus = args
        .iter()
        .position(|a| a == "--corpus")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let mut stream = Stream(0x9e37_79b9_7f4a_7c15);
    let sizes: &[(usize, usize)] = if quick {
        &[(10_000, 256), (10_000, 1536)]
    } else {
        &[
            (10_000, 256),
            (100_000, 256),
            (10_000, 1536),
            (30_000, 1536),
        ]
    };
    println!(
        "| embeddings | dimensions | exact query | approximate build | approximate query | recall@10 |"
    );
    println!("|---|---|---|---|---|---|");
    if let Some(dir) = corpus {
        let labelled: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("queries.json")).expect("queries.json"))
                .expect("JSON");
        let dimensions = labelled["dim"].as_u64().expect("dim") as usize;
        compare(
            corpus_vectors(&dir.join("vectors.f32"), dimensions),
            &corpus_vectors(&dir.join("query_vectors.f32"), dimensions),
        );
        return;
    }
    for &(count, dimensions) in sizes {
        let centres: Vec<Vec<f32>> = (0..500)
            .map(|_| (0..dimensions).map(|_| stream.unit()).collect())
            .collect();
        let vectors = clustered(&mut stream, &centres, count);
        let queries = clustered(&mut stream, &centres, 50);
        compare(vectors, &queries);
    }
    let words: Vec<String> = (0..5_000).map(|i| format!("w{i}")).collect();
    println!();
    println!("| chunks | keyword index build | query, median of 9 |");
    println!("|---|---|---|");
    let counts: &[usize] = if quick { &[10_000] } else { &[10_000, 100_000] };
    for &count in counts {
        let chunks: Vec<Chunk> = (0..count)
            .map(|i| Chunk {
                source: format!("doc{}.md", i / 10),
                heading: String::new(),
                index: i % 10,
                text: (0..100)
                    .map(|_| words[(stream.next() % words.len() as u64) as usize].as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect();
        let started = Instant::now();
        let index = KeywordIndex::build(&chunks, None).expect("built");
        let build = started.elapsed();
        let samples = (0..9)
            .map(|_| {
                let query = format!(
                    "{} {} {}",
                    words[(stream.next() % 5_000) as usize],
                    words[(stream.next() % 5_000) as usize],
                    words[(stream.next() % 5_000) as usize]
                );
                let started = Instant::now();
                index.search(&query, 20).expect("searched");
                started.elapsed()
            })
            .collect();
        println!(
            "| {count} | {:.2} s | {:.2} ms |",
            build.as_secs_f64(),
            median(samples).as_secs_f64() * 1e3
        );
    }
}
