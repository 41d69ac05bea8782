//! W8: a long conversation, and what keeping it durable writes to disk.
//!
//! A loop of `TURNS` turns over `{messages: [], turns: 0}`; each turn
//! appends one 1,000-character message and counts the turn, returning the
//! whole new list (one node's write is its new value: a `concat` reducer
//! is for several nodes of one wave, so Weft has no second form, unlike
//! the peer's `operator.add`). The figure is what
//! this process wrote to disk during the run (`/proc/self/io`
//! `write_bytes` less `cancelled_write_bytes`: the embedded coordinator's
//! store, its log and its database, and the worker's files that outlived
//! their step long enough to be written back), beside the final state's
//! size and the store's size after.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde::Deserialize;
use serde_json::{Value, json};
use weft_client::{Client, EmbeddedCluster, GraphBuilder, GraphBundle, NodeBuilder};
use weft_worker::Worker;

use super::{Args, Figure};

/// Turns per conversation.
const TURNS: u64 = 200;

/// The message each turn adds.
fn message() -> String {
    "x".repeat(1_000)
}

#[derive(Deserialize)]
struct Whole {
    messages: Vec<Value>,
    turns: u64,
}

fn register(worker: &mut Worker) {
    worker.slots(4);
    worker.handler("chat", |s: Whole, _| async move {
        let mut messages = s.messages;
        messages.push(Value::String(message()));
        Ok::<_, String>(json!({"messages": messages, "turns": s.turns + 1}))
    });
}

/// The conversation looped by an edge back to its node: each turn is a
/// wave, and its state is committed to the fields.
fn by_edge(durability: &str) -> GraphBundle {
    GraphBuilder::new("w8")
        .setting("max_steps", 10 * TURNS)
        .setting("durability", durability)
        .field("messages", "array", json!([]))
        .field("turns", "integer", 0)
        .node("turn", NodeBuilder::task("chat").start())
        .loop_edge("turn", "turn", Some(&format!("state.turns < {TURNS}")))
        .bundle()
}

/// The same by a `loop` node: the turns run inside one wave, their state
/// in the run's progress until the loop ends.
fn by_loop_node(durability: &str) -> GraphBundle {
    let yaml = format!(
        "settings: {{ durability: {durability} }}\n\
         state:\n  messages: {{ type: array, default: [] }}\n  turns: {{ type: integer, default: 0 }}\n\
         conditions:\n  enough: \"state.turns >= {TURNS}\"\n\
         nodes:\n  talk: {{ kind: loop, start: true, body: turn, until: enough, max_iterations: {} }}\n\
         \x20 turn: {{ kind: task, handler: chat }}\n",
        2 * TURNS
    );
    GraphBundle::from_text("w8-loop.yaml", &yaml)
}

/// W8 on a cluster of its own (so its store holds nothing else), looped
/// by an edge, by a `loop` node, and by a `loop` node over a script with
/// repetitive and with unique text: bytes written per run, as MiB.
pub(crate) async fn w8(args: &Args) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for (key, shape, bundle) in [
        ("edge", "a loop edge", by_edge(&args.durability)),
        ("loop", "a loop node", by_loop_node(&args.durability)),
        (
            "script_repetitive",
            "a loop node over a script, repetitive text",
            weft_tests::script_chat(TURNS, true, &args.durability),
        ),
        (
            "script_unique",
            "a loop node over a script, unique text",
            weft_tests::script_chat(TURNS, false, &args.durability),
        ),
    ] {
        figures.push(one(args, key, shape, bundle).await?);
    }
    Ok(figures)
}

async fn one(args: &Args, key: &str, shape: &str, bundle: GraphBundle) -> Result<Figure> {
    let data = Scratch::new()?;
    let dir = data.0.clone();
    let cluster =
        EmbeddedCluster::start_configured(1, move |config| config.data_dir = dir, register).await?;
    cluster.ready().await?;
    let client = Client::connect(cluster.url.clone()).await?;
    let (mut samples, mut written) = (Vec::new(), Vec::new());
    for _ in 0..args.iterations.clamp(1, 3) {
        let before = written_bytes()?;
        let started = Instant::now();
        let run = client.submit_bundle(bundle.clone(), &json!({})).await?;
        let done = client.wait(&run.run_id).await?;
        samples.push(started.elapsed());
        ensure!(done.error.is_none(), "W8 failed: {:?}", done.error);
        let messages = done.state["messages"].as_array().context("messages")?;
        ensure!(
            messages.len() as u64 == TURNS && done.state["turns"] == json!(TURNS),
            "W8 kept {} messages over {} turns",
            messages.len(),
            done.state["turns"]
        );
        // The embedded store's durable commit follows within its flush
        // interval: let it land before counting.
        tokio::time::sleep(Duration::from_millis(4 * args.flush_interval_ms.max(10))).await;
        written.push(written_bytes()? - before);
        let state_kb = done.state.to_string().len() / 1_000;
        eprintln!(
            "W8 by {shape}: {:.2} MiB written for a {state_kb} KB state; store {:.2} MiB",
            mib(*written.last().expect("pushed")),
            mib(size_of_dir(&data.0)),
        );
    }
    cluster.stop().await;
    written.sort_unstable();
    Ok(Figure {
        id: format!("w8_{key}"),
        label: format!("W8 {TURNS}-turn chat by {shape}, bytes written per run"),
        samples,
        per: Some((mib(written[written.len() / 2]), "MiB written")),
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// What this process has caused to be written to storage so far.
fn written_bytes() -> Result<u64> {
    weft_tests::written_to_storage("self")
}

fn size_of_dir(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => size_of_dir(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// A store directory of the benchmark's own, removed after.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("weft-bench-w8-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
