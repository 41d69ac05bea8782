//! How retrieval's parts scale, measured (run in release):
//! `cargo run --release -p weft-retrieval --example scale`.
//!
//! Exact vector search over N embeddings of D dimensions (the median of
//! several queries), and building and querying the keyword index of N
//! chunks of about 100 words. The figures decide where exact search stops
//! being fine for a knowledge base carried in a bundle.

use std::time::{Duration, Instant};

use weft_retrieval::Chunk;
use weft_retrieval::keyword::KeywordIndex;
use weft_retrieval::vectors::nearest;

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

fn main() {
    let mut stream = Stream(0x9e37_79b9_7f4a_7c15);
    println!("| embeddings | dimensions | exact search, median of 9 |");
    println!("|---|---|---|");
    for &(count, dimensions) in &[
        (10_000, 256),
        (100_000, 256),
        (10_000, 1536),
        (100_000, 1536),
    ] {
        let vectors: Vec<Vec<f32>> = (0..count)
            .map(|_| (0..dimensions).map(|_| stream.unit()).collect())
            .collect();
        let samples = (0..9)
            .map(|_| {
                let query: Vec<f32> = (0..dimensions).map(|_| stream.unit()).collect();
                let started = Instant::now();
                let best = nearest(&query, &vectors, 20).expect("one length");
                assert_eq!(best.len(), 20);
                started.elapsed()
            })
            .collect();
        println!(
            "| {count} | {dimensions} | {:.1} ms |",
            median(samples).as_secs_f64() * 1e3
        );
    }
    let words: Vec<String> = (0..5_000).map(|i| format!("w{i}")).collect();
    println!();
    println!("| chunks | keyword index build | query, median of 9 |");
    println!("|---|---|---|");
    for &count in &[10_000usize, 100_000] {
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
