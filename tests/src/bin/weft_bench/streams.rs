//! W11 (SPEC 14, 19): model output streamed to watchers — how long a
//! piece takes from the model endpoint's send to a watcher's receive, with
//! 100 streams at once, and what the coordinator spends on a piece.
//!
//! 100 runs of one `llm` step each, on two embedded workers, against the
//! local test endpoint, which streams 50 pieces to each request, 20 ms
//! apart (the first 300 ms after it, while the watchers connect), each
//! piece the wall clock when it was sent. One watcher per run reads its
//! stream (`Client::stream`) and takes, for each piece, its arrival less
//! its stamp. Figures: the latency's p50 and p99 over every piece of the
//! iterations (goal: 2 ms and 10 ms on loopback), and the CPU a piece
//! costs: this process's CPU time (coordinator, workers, endpoint and
//! watchers, all embedded) over the same 100 runs streaming 50 pieces
//! less streaming one, over the pieces more — an upper bound of the
//! coordinator's share, which is one piece received, appended, written
//! to the store in its chunk and sent to one watcher.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde_json::json;
use tokio_stream::StreamExt;
use weft_client::{Client, EmbeddedCluster, GraphBundle, RunStatus};
use weft_tests::llm_server::{Reply, TestLlm};

use super::flow::{cpu, use_provider};
use super::{Args, Figure, median};

const STREAMS: usize = 100;
const PIECES: usize = 50;
const KEY: &str = "sk-w11";

const GRAPH: &str = r#"
name: w11
state:
  said: { type: string, default: "" }
nodes:
  say:
    kind: llm
    start: true
    prompt: "Say something."
    state_updates: { said: "{{ output }}" }
"#;

/// What one round of 100 streams came to.
struct Round {
    /// Each piece's latency.
    latencies: Vec<Duration>,
    /// Pieces read, over every watcher.
    pieces: usize,
    /// This process's CPU time from the first submission to the last
    /// watcher's end.
    cpu: Duration,
    took: Duration,
}

fn now_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// Watches run `run_id`'s stream to its end: each text piece's latency
/// (a piece may carry several stamps when the worker read several events
/// at once) and how many pieces came.
async fn watch(client: Client, run_id: String) -> Result<(Vec<Duration>, usize)> {
    let mut stream = client.stream(&run_id, 0).await?;
    let (mut latencies, mut pieces) = (Vec::new(), 0);
    while let Some(piece) = stream.next().await {
        let piece = piece?;
        let arrived = now_us();
        pieces += 1;
        if piece.kind != "text" {
            continue;
        }
        for stamp in piece.text.split_terminator(';') {
            let sent: u128 = stamp.parse()?;
            let micros = u64::try_from(arrived.saturating_sub(sent)).unwrap_or(u64::MAX);
            latencies.push(Duration::from_micros(micros));
        }
    }
    Ok((latencies, pieces))
}

/// The pieces the endpoint streams to each request.
static COUNT: AtomicUsize = AtomicUsize::new(PIECES);

async fn round(client: &Client, count: usize) -> Result<Round> {
    COUNT.store(count, Ordering::Relaxed);
    let (start, before) = (Instant::now(), cpu());
    let mut runs = Vec::with_capacity(STREAMS);
    let mut watchers = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let run = client
            .submit_bundle(GraphBundle::from_text("w11.yaml", GRAPH), &json!({}))
            .await?;
        let run_id = run.run_id.to_string();
        watchers.push(tokio::spawn(watch(client.clone(), run_id.clone())));
        runs.push(run_id);
    }
    let (mut latencies, mut pieces) = (Vec::new(), 0);
    for watcher in watchers {
        let (read, count) = watcher.await??;
        latencies.extend(read);
        pieces += count;
    }
    let (took, spent) = (start.elapsed(), cpu().saturating_sub(before));
    for run_id in &runs {
        let done = client.wait(run_id).await?;
        ensure!(
            done.status == RunStatus::Completed,
            "run {run_id}: {:?}",
            done.error
        );
        let said = done.state["said"].as_str().unwrap_or_default();
        ensure!(
            said.split_terminator(';').count() == count,
            "run {run_id} said {said:?}"
        );
    }
    ensure!(
        latencies.len() == STREAMS * count,
        "{} stamps read of {}",
        latencies.len(),
        STREAMS * count
    );
    Ok(Round {
        latencies,
        pieces,
        cpu: spent,
        took,
    })
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// W11, `args.iterations` rounds (at most 5), each a streaming round and
/// a one-piece round on the same cluster.
pub(crate) async fn w11(args: &Args) -> Result<Vec<Figure>> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Stamped {
        count: COUNT.load(Ordering::Relaxed),
        first: Duration::from_millis(300),
        gap: Duration::from_millis(20),
    })
    .await?;
    let url = llm.url.clone();
    let cluster = EmbeddedCluster::start_configured(
        2,
        |_| {},
        move |worker| {
            worker.slots(64);
            use_provider(worker, &url, KEY);
        },
    )
    .await?;
    cluster.ready().await?;
    let client = Client::connect(cluster.url.clone()).await?;
    // A warmup of each kind, not counted.
    round(&client, PIECES).await?;
    round(&client, 1).await?;
    let rounds = args.iterations.clamp(1, 5);
    let (mut streamed, mut single) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        streamed.push(round(&client, PIECES).await?);
        single.push(round(&client, 1).await?);
    }
    cluster.stop().await;
    let mut latencies: Vec<Duration> = streamed
        .iter()
        .flat_map(|r| r.latencies.iter().copied())
        .collect();
    latencies.sort();
    let (p50, p99) = (percentile(&latencies, 50), percentile(&latencies, 99));
    let more_pieces = median_usize(streamed.iter().map(|r| r.pieces))
        .saturating_sub(median_usize(single.iter().map(|r| r.pieces)));
    let extra = median(&streamed.iter().map(|r| r.cpu).collect::<Vec<_>>())
        .saturating_sub(median(&single.iter().map(|r| r.cpu).collect::<Vec<_>>()));
    let per_piece = extra.as_secs_f64() / more_pieces.max(1) as f64 * 1e6;
    let took: Vec<Duration> = streamed.iter().map(|r| r.took).collect();
    let label = format!(
        "W11 {STREAMS} streams of {PIECES} pieces at once, endpoint's send to watcher's receive"
    );
    Ok(vec![
        Figure {
            id: "w11".into(),
            label: format!("{label} ({} pieces; median = p50)", latencies.len()),
            samples: latencies,
            per: Some((p99.as_secs_f64() * 1e6, "µs p99")),
        },
        Figure {
            id: "w11_cpu".into(),
            label: format!(
                "W11 CPU a piece (the whole harness: {PIECES} pieces a stream less 1, over {more_pieces} pieces; p50 {:.0} µs)",
                p50.as_secs_f64() * 1e6
            ),
            samples: took,
            per: Some((per_piece, "µs a piece")),
        },
    ])
}

fn median_usize(values: impl Iterator<Item = usize>) -> usize {
    let mut values: Vec<usize> = values.collect();
    values.sort_unstable();
    values[values.len() / 2]
}
