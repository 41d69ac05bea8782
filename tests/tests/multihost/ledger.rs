//! The suite's graphs and what they leave behind: every step is one script,
//! `step.sh`, that appends a line to `/shared/executions` (a folder of the
//! test's, mounted into every worker) when it starts and when it ends,
//! with the host and the time; and the checks run on a finished run: its
//! state is right, each step was merged exactly once (the run's events),
//! and each step ran to its end somewhere (the ledger).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_proto::RunId;
use weft_tests::compose::Compose;
use weft_tests::{events_of, until_event};

/// How long a run of the suite may take, faults included.
pub const RUN_PATIENCE: Duration = Duration::from_secs(120);

/// Runs in flight: `chains` chains of 6 steps and a map of 24 items.
pub struct Workload {
    pub chains: Vec<RunId>,
    pub map: RunId,
}

impl Workload {
    /// Submits the workload through `client` and waits until the map has
    /// items running.
    pub async fn submit(client: &Client, chains: usize) -> Result<Self> {
        Self::spread(std::slice::from_ref(client), chains).await
    }

    /// Submits chain `i` through `clients[i % len]` and the map through
    /// the last client (in a partitioned group, a run is made in a
    /// partition the coordinator it was submitted through leads), then
    /// waits until the map has items running.
    pub async fn spread(clients: &[Client], chains: usize) -> Result<Self> {
        let last = clients.last().context("no client to submit through")?;
        let mut ids = Vec::new();
        for i in 0..chains {
            ids.push(
                clients[i % clients.len()]
                    .submit_bundle(chain(6, 0.5), &json!({}))
                    .await?
                    .run_id,
            );
        }
        let map = last
            .submit_bundle(map(24, 4, 0.5), &json!({}))
            .await?
            .run_id;
        until_event(last, &map, "an item started", |e| e.kind == "node_started").await?;
        Ok(Self { chains: ids, map })
    }

    /// Waits for every run and checks it; returns how many steps ran again.
    pub async fn check(&self, client: &Client, cluster: &Compose) -> Result<usize> {
        let mut again = 0;
        for run_id in &self.chains {
            let run = finish(client, run_id, RUN_PATIENCE).await?;
            again += check_chain(client, cluster.shared(), &run, 6)
                .await?
                .executed_again;
        }
        let run = finish(client, &self.map, RUN_PATIENCE).await?;
        again += check_map(client, cluster.shared(), &run, 24)
            .await?
            .executed_again;
        Ok(again)
    }
}

/// Sleeps `STEP_SLEEP` seconds between its two ledger lines, then writes
/// `n = $1` (a chain step) or, with `$1 = item`, `doubled = 2 × item`.
const STEP: &str = r#"#!/bin/sh
host=$(cat /etc/hostname)
line() { echo "$1 $WEFT_RUN_ID $WEFT_NODE ${WEFT_ITEM:--} $WEFT_ATTEMPT $host $(date +%s.%N)" >> /shared/executions; }
line start
sleep "${STEP_SLEEP:-0.3}"
line end
if [ "$1" = item ]; then echo "{\"doubled\": $((WEFT_ITEM * 2))}"; else echo "{\"n\": $1}"; fi
"#;

/// A chain of `nodes` steps, each `sleep` seconds long, setting `n` to its
/// position.
pub fn chain(nodes: usize, sleep: f64) -> GraphBundle {
    let mut text = String::from("state:\n  n: { type: integer, default: 0 }\nnodes:\n");
    for i in 1..=nodes {
        let start = if i == 1 { ", start: true" } else { "" };
        let next = if i < nodes {
            format!(", next: n{}", i + 1)
        } else {
            String::new()
        };
        text.push_str(&format!(
            "  n{i}: {{ kind: script, run: [sh, step.sh, \"{i}\"], env: {{ STEP_SLEEP: \"{sleep}\" }}{start}{next} }}\n"
        ));
    }
    GraphBundle::from_text("chain.yaml", &text).with_file("step.sh", STEP.as_bytes(), 0o755)
}

/// A map over `0..items`, `concurrency` at a time, each item one step of
/// `sleep` seconds doubling it into `results`.
pub fn map(items: usize, concurrency: u32, sleep: f64) -> GraphBundle {
    let list: Vec<usize> = (0..items).collect();
    let text = format!(
        "state:\n  items: {{ type: array, default: {list:?} }}\n  results: {{ type: array, default: [] }}\n\
         nodes:\n  fan: {{ kind: map, start: true, over: \"{{{{ items }}}}\", as: item, branch: double, \
         output_key: doubled, collect_into: results, max_concurrency: {concurrency} }}\n  \
         double: {{ kind: script, run: [sh, step.sh, item], env: {{ STEP_SLEEP: \"{sleep}\" }} }}\n"
    );
    GraphBundle::from_text("map.yaml", &text).with_file("step.sh", STEP.as_bytes(), 0o755)
}

/// One line of the ledger.
#[derive(Debug, Clone)]
pub struct Execution {
    /// `start` or `end`.
    pub phase: String,
    pub run: String,
    pub node: String,
    /// The map item, `-` outside a map.
    pub item: String,
    pub attempt: u32,
    /// The container's host name.
    pub host: String,
    /// Seconds since the epoch (the host's clock, which containers share).
    pub at: f64,
}

/// Every line of the ledger in `shared`.
pub fn ledger(shared: &Path) -> Result<Vec<Execution>> {
    let text = std::fs::read_to_string(shared.join("executions")).unwrap_or_default();
    let mut lines = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        ensure!(words.len() == 7, "a torn ledger line: {line:?}");
        lines.push(Execution {
            phase: words[0].to_owned(),
            run: words[1].to_owned(),
            node: words[2].to_owned(),
            item: words[3].to_owned(),
            attempt: words[4].parse()?,
            host: words[5].to_owned(),
            at: words[6].parse()?,
        });
    }
    Ok(lines)
}

/// Waits for `run_id` to end (at most `patience`) and returns it.
pub async fn finish(client: &Client, run_id: &str, patience: Duration) -> Result<RunInfo> {
    tokio::time::timeout(patience, client.wait(run_id))
        .await
        .with_context(|| format!("{run_id} did not end within {patience:?}"))?
        .with_context(|| format!("waiting for {run_id}"))
}

/// How many times each step (`node`, item) of the run was merged, from its
/// `node_finished` events.
pub async fn merges(client: &Client, run_id: &str) -> Result<BTreeMap<(String, String), usize>> {
    let mut counted = BTreeMap::new();
    for event in events_of(client, run_id, "node_finished").await? {
        let node = event.body["node"].as_str().unwrap_or_default().to_owned();
        let item = match &event.body["item"] {
            Value::Number(n) => n.to_string(),
            _ => "-".to_owned(),
        };
        *counted.entry((node, item)).or_insert(0) += 1;
    }
    Ok(counted)
}

/// What a run's checks found.
#[derive(Debug, Default)]
pub struct Tally {
    /// Steps executed more than once (an attempt started again elsewhere).
    pub executed_again: usize,
}

/// Fails unless `run` completed, saying how it ended.
fn ensure_completed(run: &RunInfo) -> Result<()> {
    ensure!(
        run.status == RunStatus::Completed,
        "{} ended {:?}: {:?}",
        run.run_id,
        run.status,
        run.error
    );
    Ok(())
}

/// Checks a completed chain run of `nodes` steps: `n` is `nodes`, each
/// step merged exactly once and run to its end at least once.
pub async fn check_chain(
    client: &Client,
    shared: &Path,
    run: &RunInfo,
    nodes: usize,
) -> Result<Tally> {
    ensure_completed(run)?;
    ensure!(
        run.state["n"] == json!(nodes),
        "{}: {}",
        run.run_id,
        run.state
    );
    let expected = (1..=nodes).map(|i| (format!("n{i}"), "-".to_owned()));
    check_steps(client, shared, &run.run_id, expected, None).await
}

/// Checks a completed map run of `items` items: `results` holds every
/// item doubled, in order, each merged exactly once.
pub async fn check_map(
    client: &Client,
    shared: &Path,
    run: &RunInfo,
    items: usize,
) -> Result<Tally> {
    ensure_completed(run)?;
    let doubled: Vec<Value> = (0..items).map(|i| json!(2 * i)).collect();
    ensure!(
        run.state["results"] == Value::Array(doubled),
        "{}",
        run.state
    );
    let expected = (0..items).map(|i| ("double".to_owned(), i.to_string()));
    check_steps(client, shared, &run.run_id, expected, Some("fan")).await
}

async fn check_steps(
    client: &Client,
    shared: &Path,
    run_id: &str,
    expected: impl Iterator<Item = (String, String)>,
    container: Option<&str>,
) -> Result<Tally> {
    let mut merged = merges(client, run_id).await?;
    // The map node itself is the coordinator's bookkeeping: merged once,
    // run by no worker.
    if let Some(node) = container {
        let times = merged
            .remove(&(node.to_owned(), "-".to_owned()))
            .unwrap_or(0);
        ensure!(times == 1, "{run_id}: {node} was merged {times} times");
    }
    let ledger = ledger(shared)?;
    let mut tally = Tally::default();
    let mut steps = 0;
    for step in expected {
        steps += 1;
        let times = merged.get(&step).copied().unwrap_or(0);
        ensure!(
            times == 1,
            "{run_id}: step {step:?} was merged {times} times"
        );
        let runs = |phase: &str| {
            ledger
                .iter()
                .filter(|e| e.run == run_id && e.phase == phase)
                .filter(|e| {
                    (e.node.as_str(), e.item.as_str()) == (step.0.as_str(), step.1.as_str())
                })
                .count()
        };
        ensure!(
            runs("end") >= 1,
            "{run_id}: step {step:?} was merged but never ran to its end"
        );
        if runs("start") > 1 {
            tally.executed_again += 1;
        }
    }
    ensure!(
        merged.len() == steps,
        "{run_id}: merged steps that are not the graph's: {merged:?}"
    );
    Ok(tally)
}

/// The most executions of `run_id` that overlapped in time, from the
/// ledger; an execution that never ended (its container was killed) is
/// taken to last until `killed_at`.
pub fn peak_overlap(ledger: &[Execution], run_id: &str, killed_at: f64) -> usize {
    let mut open: BTreeMap<(String, String, u32, String), f64> = BTreeMap::new();
    let mut spans = Vec::new();
    for e in ledger.iter().filter(|e| e.run == run_id) {
        let key = (e.node.clone(), e.item.clone(), e.attempt, e.host.clone());
        if e.phase == "start" {
            open.insert(key, e.at);
        } else if let Some(start) = open.remove(&key) {
            spans.push((start, e.at));
        }
    }
    spans.extend(
        open.into_values()
            .map(|start| (start, killed_at.max(start))),
    );
    let mut edges: Vec<(f64, i32)> = spans
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // Ends before starts at the same instant: touching is not overlapping.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut peak) = (0, 0);
    for (_, delta) in edges {
        now += delta;
        peak = peak.max(now);
    }
    peak as usize
}
