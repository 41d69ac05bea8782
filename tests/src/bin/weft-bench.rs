//! Weft's benchmark harness for SPEC section 14's W1–W6 and W8 (the peers'
//! workloads in `../shared/bench/peers/WORKLOADS.md`), W7 (teammate
//! message latency) and W9–W11 (retrieval, flow control, streaming), run
//! against an embedded cluster whose workers host Rust handlers, over gRPC
//! on loopback.
//!
//! Protocol, as for the peers: setup is not timed; one warmup iteration,
//! then `--iterations` timed ones; every result is verified; the figure is
//! the median. W5 spawns this binary `--reps` times as a fresh process and
//! times process start to the first result.
//!
//! `cargo run --release -p weft-tests --bin weft-bench` prints a table and
//! one JSON line per workload.

/// The allocator the binaries use, so the figures are theirs (the
/// system's without the `jemalloc` feature, for heap profilers).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weft_client::{Client, EmbeddedCluster, GraphBuilder, GraphBundle, NodeBuilder};
use weft_worker::{TaskContext, Worker};

#[path = "weft_bench/big_state.rs"]
mod big_state;
#[path = "weft_bench/chat.rs"]
mod chat;
#[path = "weft_bench/flow.rs"]
mod flow;
#[path = "weft_bench/many_runs.rs"]
mod many_runs;
#[path = "weft_bench/python.rs"]
mod python;
#[path = "weft_bench/report.rs"]
mod report;
#[path = "weft_bench/retrieval.rs"]
mod retrieval;
#[path = "weft_bench/streams.rs"]
mod streams;

use report::{Figure, median};

#[derive(Parser)]
struct Args {
    /// Workloads to run (w1, w2, w1py, w2py, w3, w4, w5, w6, w7, w8, w9, w10, w11);
    /// default: all (w9 with --w9-corpus).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Timed iterations per workload (after one warmup).
    #[arg(long, default_value_t = 5)]
    iterations: usize,
    /// The chain lengths W4 runs its 10 MB state through.
    #[arg(long, value_delimiter = ',', default_values_t = [20usize, 1])]
    w4_chains: Vec<usize>,
    /// Processes for W5.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Embedded workers.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 32)]
    slots: u32,
    /// The graphs' `settings.durability`: sync (the default), async or exit.
    #[arg(long, default_value = "sync")]
    durability: String,
    /// Keep runs in etcd instead of the embedded store: `start` runs a
    /// local etcd (Debian's `etcd`) in a temporary directory for the
    /// benchmark; a URL uses that etcd.
    #[arg(long)]
    etcd: Option<String>,
    /// The embedded store's flush interval (0: an fsync on every write).
    #[arg(long, default_value_t = 20)]
    flush_interval_ms: u64,
    /// Messages W7 times.
    #[arg(long, default_value_t = 1_000)]
    pings: u64,
    /// Concurrent runs W6 submits in a batch.
    #[arg(long, default_value_t = 1_000)]
    runs: usize,
    /// Batches W6 runs, one after another on one coordinator (a soak: each
    /// batch's rate and the process's resident memory after it).
    #[arg(long, default_value_t = 3)]
    batches: usize,
    /// The embedded coordinator's `retain_finished_runs`: past it, each
    /// new run forgets an old one (a soak of 20,000 runs crosses the
    /// default of 10,000 halfway).
    #[arg(long)]
    retain_finished_runs: Option<usize>,
    /// Run the workloads against this coordinator instead of an embedded
    /// cluster; its workers must be `weft-bench --serve` processes.
    #[arg(long)]
    coordinator: Option<String>,
    /// Be a worker of the coordinator at this URL, hosting the benchmark's
    /// handlers, until stopped (SIGINT or SIGTERM).
    #[arg(long)]
    serve: Option<String>,
    /// The CA of an https:// coordinator's certificate (with --coordinator
    /// or --serve).
    #[arg(long)]
    ca: Option<std::path::PathBuf>,
    /// The token to present (an operator's for the workloads, a worker's
    /// with --serve); default: WEFT_TOKEN.
    #[arg(long, env = "WEFT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Receive OTLP traces on this address (`127.0.0.1:4317`) until
    /// stopped, printing how many spans arrived: a sink for measuring what
    /// exporting costs.
    #[arg(long)]
    otlp_sink: Option<String>,
    /// W9's corpus (`bench/peers/w9_corpus.py` writes it); W9 runs only
    /// with one.
    #[arg(long)]
    w9_corpus: Option<std::path::PathBuf>,
    /// Internal: run W5's one-node graph and exit.
    #[arg(long, hide = true)]
    w5_child: bool,
}

#[derive(Deserialize)]
struct Counter {
    counter: i64,
}

#[derive(Serialize)]
struct CounterUpdate {
    counter: i64,
}

/// Numbers the embedded workers, so W7 can tell where its items ran.
static WORKERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn register(worker: &mut Worker, slots: u32) {
    worker.slots(slots).scripts(false);
    let number = WORKERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let me = format!("{}/{number}", std::process::id());
    worker.handler("ping", move |state: Pings, ctx| {
        ping(me.clone(), state, ctx)
    });
    worker.handler("increment", |s: Counter, _| async move {
        Ok::<_, String>(CounterUpdate {
            counter: s.counter + 1,
        })
    });
    worker.handler(
        "double",
        |_: serde::de::IgnoredAny, ctx: TaskContext| async move {
            let item: i64 = ctx.scope("item")?;
            Ok::<_, String>(json!({"doubled": item * 2}))
        },
    );
    worker.handler("report", |_: serde::de::IgnoredAny, _| async move {
        Ok::<_, String>(json!({"report": "x".repeat(10_000_000)}))
    });
    worker.handler("sleep50", |_: serde::de::IgnoredAny, _| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok::<_, String>(json!({}))
    });
    worker.handler("noop", |_: serde::de::IgnoredAny, _| async move {
        Ok::<_, String>(json!({}))
    });
}

#[derive(Deserialize)]
struct Pings {
    pings: u64,
}

/// W7's two teammates: item 0 sends `pings` messages to item 1 one at a
/// time, each stamped with the wall clock, and waits for item 1's answer
/// before the next, so no message waits behind another; item 1 records how
/// long each took to reach it, in microseconds. Both report their worker.
async fn ping(worker: String, state: Pings, ctx: TaskContext) -> Result<Value, String> {
    let team = ctx.team.clone().ok_or("ping needs a team")?;
    let (first, second) = (&team.members()[0], &team.members()[1]);
    let patience = Duration::from_secs(30);
    let now_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    };
    let mut latencies = Vec::new();
    for n in 0..state.pings {
        if team.me() == first {
            let ping = json!({"n": n, "sent_us": now_us()});
            ctx.send(second, ping).await.map_err(|e| e.to_string())?;
            ctx.recv(patience).await.ok_or("no answer")?;
        } else {
            let message = ctx.recv(patience).await.ok_or("no ping")?;
            let sent = message.content["sent_us"].as_u64().unwrap_or(0);
            latencies.push(now_us().saturating_sub(sent));
            ctx.send(first, json!(n)).await.map_err(|e| e.to_string())?;
        }
    }
    Ok(json!({"latency": {"worker": worker, "us": latencies}}))
}

fn chain(name: &str, length: usize) -> GraphBuilder {
    let mut graph = GraphBuilder::new(name)
        .setting("max_steps", 10_000)
        .field("counter", "integer", 0);
    for i in 0..length {
        let mut node = NodeBuilder::task("increment");
        if i == 0 {
            node = node.start();
        }
        if i + 1 < length {
            node = node.next(&[&format!("n{}", i + 1)]);
        }
        graph = graph.node(&format!("n{i}"), node);
    }
    graph
}

fn map(n: usize, concurrency: u32) -> GraphBuilder {
    GraphBuilder::new("w2")
        .setting("max_concurrency", concurrency)
        .field(
            "items",
            "array",
            Value::Array((0..n as i64).map(Value::from).collect()),
        )
        .node(
            "fan",
            NodeBuilder::map("state.items", "item", "double", "results")
                .start()
                .set("output_key", "doubled"),
        )
        .node("double", NodeBuilder::task("double"))
}

fn waves() -> GraphBuilder {
    let branches: Vec<String> = (0..8).map(|b| format!("b{b}")).collect();
    let names: Vec<&str> = branches.iter().map(String::as_str).collect();
    let mut graph = GraphBuilder::new("w3")
        .setting("max_steps", 100)
        .field("counter", "integer", 0)
        .node("start", NodeBuilder::task("increment").start().next(&names))
        .node("join", NodeBuilder::task("noop").depends_on(&names))
        .loop_edge("join", "start", Some("state.counter < 10"));
    for name in &names {
        graph = graph.node(name, NodeBuilder::task("sleep50"));
    }
    graph
}

async fn timed(
    client: &Client,
    graph: &GraphBuilder,
    input: &Value,
    iterations: usize,
    check: impl Fn(&Value) -> Result<()>,
) -> Result<Vec<Duration>> {
    timed_bundle(client, &graph.bundle(), input, iterations, check).await
}

async fn timed_bundle(
    client: &Client,
    bundle: &GraphBundle,
    input: &Value,
    iterations: usize,
    check: impl Fn(&Value) -> Result<()>,
) -> Result<Vec<Duration>> {
    timed_inputs(client, bundle, |_| input.clone(), iterations, check).await
}

/// As [`timed_bundle`], with the input of each run (the first, untimed,
/// is 0) made by `input` before its clock starts.
async fn timed_inputs(
    client: &Client,
    bundle: &GraphBundle,
    mut input: impl FnMut(usize) -> Value,
    iterations: usize,
    check: impl Fn(&Value) -> Result<()>,
) -> Result<Vec<Duration>> {
    let mut samples = Vec::new();
    for i in 0..=iterations {
        let input = input(i);
        let started = Instant::now();
        let run = client.submit_bundle(bundle.clone(), &input).await?;
        let done = client.wait(&run.run_id).await?;
        let elapsed = started.elapsed();
        ensure!(done.error.is_none(), "run failed: {:?}", done.error);
        check(&done.state)?;
        if i > 0 {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

async fn run_all(args: &Args) -> Result<Vec<Figure>> {
    let wanted = |id: &str| args.only.is_empty() || args.only.iter().any(|o| o == id);
    let slots = args.slots;
    let local_etcd = match args.etcd.as_deref() {
        Some("start") => Some(weft_tests::etcd::TestEtcd::start().await?),
        _ => None,
    };
    let etcd: Vec<String> = match (&local_etcd, &args.etcd) {
        (Some(started), _) => vec![started.url.clone()],
        (None, Some(url)) => vec![url.clone()],
        (None, None) => Vec::new(),
    };
    let flush = match args.flush_interval_ms {
        0 => weft_store::Flush::EachWrite,
        ms => weft_store::Flush::Every(Duration::from_millis(ms)),
    };
    let retain = args.retain_finished_runs;
    let configure = move |config: &mut weft_client::CoordinatorConfig| {
        config.store.etcd = etcd;
        config.store.flush = flush;
        if let Some(count) = retain {
            config.retention.count = count;
        }
    };
    let cluster = match &args.coordinator {
        Some(_) => None,
        None => {
            let cluster = EmbeddedCluster::start_configured(args.workers, configure, move |w| {
                register(w, slots)
            })
            .await?;
            cluster.ready().await?;
            Some(cluster)
        }
    };
    let url = match (&args.coordinator, &cluster) {
        (Some(url), _) => url.clone(),
        (None, Some(cluster)) => cluster.url.clone(),
        (None, None) => unreachable!("started above"),
    };
    let tls = weft_client::ClientTls {
        ca: args.ca.clone(),
        ..Default::default()
    };
    let mut client = Client::connect_with(url, &tls).await?;
    if let Some(token) = &args.token {
        client = client.with_token(token)?;
    }
    let mut figures = Vec::new();
    if wanted("w1") {
        figures.push(w1(&client, args).await?);
    }
    if wanted("w2") {
        for n in [1_000usize, 10_000] {
            figures.push(w2(&client, args, n).await?);
        }
    }
    if wanted("w1py") {
        figures.push(python::w1_py(&client, args).await?);
    }
    if wanted("w2py") {
        for n in [1_000usize, 10_000] {
            figures.push(python::w2_py(&client, args, n).await?);
        }
    }
    if wanted("w3") {
        figures.push(w3(&client, args).await?);
    }
    if wanted("w4") {
        figures.extend(big_state::w4(&client, args).await?);
    }
    if wanted("w4w") {
        figures.push(big_state::w4_written(&client, args).await?);
    }
    if wanted("w6") {
        figures.extend(many_runs::w6(&client, args).await?);
    }
    if wanted("w7") {
        figures.push(w7(&client, args).await?);
    }
    if let Some(cluster) = cluster {
        cluster.stop().await;
    }
    if wanted("w5") {
        figures.push(w5(args).await?);
    }
    if wanted("w8") {
        figures.extend(chat::w8(args).await?);
    }
    if wanted("w10") {
        figures.extend(flow::w10(args).await?);
    }
    if wanted("w11") {
        figures.extend(streams::w11(args).await?);
    }
    if let Some(corpus) = args.w9_corpus.as_deref().filter(|_| wanted("w9")) {
        figures.extend(retrieval::w9(corpus, args.iterations)?);
    }
    Ok(figures)
}

/// W1: a chain of 200 increments.
async fn w1(client: &Client, args: &Args) -> Result<Figure> {
    let samples = timed(
        client,
        &chain("w1", 200).setting("durability", args.durability.as_str()),
        &json!({}),
        args.iterations,
        |s| {
            ensure!(s["counter"] == json!(200), "counter is {}", s["counter"]);
            Ok(())
        },
    )
    .await?;
    let per = median(&samples).as_secs_f64() * 1e6 / 200.0;
    Ok(Figure {
        id: "w1".into(),
        label: "W1 chain, 200 nodes".into(),
        samples,
        per: Some((per, "µs/node")),
    })
}

/// W2: a map of `n` doublings over every slot.
async fn w2(client: &Client, args: &Args, n: usize) -> Result<Figure> {
    let graph = map(n, args.slots * args.workers).setting("durability", args.durability.as_str());
    let samples = timed(client, &graph, &json!({}), args.iterations.min(3), |s| {
        doubled(s, n)
    })
    .await?;
    Ok(map_figure(
        format!("w2_{n}"),
        format!("W2 map, N = {n}"),
        samples,
        n,
    ))
}

/// W2's check: `results` holds each item doubled, in input order.
fn doubled(state: &Value, n: usize) -> Result<()> {
    let results = state["results"].as_array().context("results")?;
    ensure!(results.len() == n, "{} results", results.len());
    for (i, r) in results.iter().enumerate() {
        ensure!(*r == json!(2 * i), "item {i} is {r}");
    }
    Ok(())
}

/// A map's figure: items per second at the median.
fn map_figure(id: String, label: String, samples: Vec<Duration>, n: usize) -> Figure {
    let rate = n as f64 / median(&samples).as_secs_f64();
    Figure {
        id,
        label,
        samples,
        per: Some((rate, "items/s")),
    }
}

/// W3: ten waves of eight 50 ms sleeps.
async fn w3(client: &Client, args: &Args) -> Result<Figure> {
    let graph = waves().setting("durability", args.durability.as_str());
    let samples = timed(client, &graph, &json!({}), args.iterations.min(3), |s| {
        ensure!(s["counter"] == json!(10), "rounds {}", s["counter"]);
        Ok(())
    })
    .await?;
    let over = (median(&samples).as_secs_f64() - 0.5) * 1e3;
    Ok(Figure {
        id: "w3".into(),
        label: "W3 waves, 10 × (8 × 50 ms)".into(),
        samples,
        per: Some((over, "ms over 0.5 s")),
    })
}

/// W7: one-way delivery of a teammate message between two map items on
/// two workers, each message alone in flight. The samples are the
/// messages' latencies; the figure is their 99th percentile.
async fn w7(client: &Client, args: &Args) -> Result<Figure> {
    let graph = GraphBuilder::new("w7")
        .setting("durability", args.durability.as_str())
        .field("pings", "integer", 0)
        .field("pair", "array", json!([0, 1]))
        .node(
            "pair_up",
            NodeBuilder::map("state.pair", "item", "ping", "latencies")
                .start()
                .set("output_key", "latency"),
        )
        .node("ping", NodeBuilder::task("ping").set("teammates", true));
    let mut latencies = Vec::new();
    for pings in [args.pings / 10, args.pings] {
        let run = client
            .submit_graph(&graph, &json!({"pings": pings}))
            .await?;
        let done = client.wait(&run.run_id).await?;
        ensure!(done.error.is_none(), "run failed: {:?}", done.error);
        let pair = done.state["latencies"].as_array().context("latencies")?;
        ensure!(pair.len() == 2, "{} items", pair.len());
        ensure!(
            pair[0]["worker"] != pair[1]["worker"],
            "both items ran on worker {}",
            pair[0]["worker"]
        );
        latencies = pair[1]["us"].as_array().context("samples")?.clone();
        ensure!(
            latencies.len() as u64 == pings,
            "{} samples",
            latencies.len()
        );
    }
    let mut samples: Vec<Duration> = latencies
        .iter()
        .filter_map(Value::as_u64)
        .map(Duration::from_micros)
        .collect();
    samples.sort();
    let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)];
    Ok(Figure {
        id: "w7".into(),
        label: format!(
            "W7 teammate message, {} messages (median = p50)",
            samples.len()
        ),
        samples,
        per: Some((p99.as_secs_f64() * 1e6, "µs p99")),
    })
}

/// W5: a fresh process per sample, from start to the first result.
async fn w5(args: &Args) -> Result<Figure> {
    let exe = std::env::current_exe()?;
    let mut samples = Vec::new();
    for _ in 0..args.reps {
        // Process start to the result, as the workload counts it: the clock
        // stops when the child prints the result, not when it has shut
        // its cluster down.
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&exe)
            .arg("--w5-child")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("the W5 child's stdout")?;
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        let result = lines.next_line().await?;
        samples.push(started.elapsed());
        let out = child.wait_with_output().await?;
        ensure!(
            out.status.success(),
            "W5 child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            result.as_deref().map(str::trim) == Some("1"),
            "W5 child printed {result:?}"
        );
    }
    Ok(Figure {
        id: "w5".into(),
        label: "W5 cold start, one-node graph".into(),
        samples,
        per: None,
    })
}

/// An OTLP receiver on `address` that reports the spans it has received
/// every second, until stopped.
async fn otlp_sink(address: &str) -> Result<()> {
    let sink = weft_tests::otlp::TestOtlp::start_on(address).await?;
    println!("receiving OTLP on {}", sink.url);
    let stop = weft_process::shutdown_on_signal();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                println!("{} spans", sink.spans().len());
            }
        }
    }
}

/// W5's child: process start → embedded cluster → one-node graph → result.
async fn w5_child() -> Result<()> {
    let cluster = EmbeddedCluster::start_with(1, |w| register(w, 4)).await?;
    cluster.ready().await?;
    let client = Client::connect(cluster.url.clone()).await?;
    let graph = GraphBuilder::new("w5")
        .field("counter", "integer", 0)
        .node("one", NodeBuilder::task("increment").start());
    let run = client.submit_graph(&graph, &json!({})).await?;
    let done = client.wait(&run.run_id).await?;
    println!("{}", done.state["counter"]);
    cluster.stop().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.w5_child {
        return w5_child().await;
    }
    if let Some(address) = &args.otlp_sink {
        return otlp_sink(address).await;
    }
    if let Some(url) = &args.serve {
        // A served worker exports traces as OTEL_* says.
        let telemetry = weft_process::TelemetryConfig::resolve(
            Default::default(),
            |key| std::env::var(key).ok(),
            "weft-worker",
        );
        let _telemetry = weft_process::init(weft_process::LogFormat::Text, &telemetry)?;
        let env = weft_worker::Environment::of_process();
        let mut config = weft_worker::WorkerConfig::new(url.clone(), &env);
        config.tls.ca = args.ca.clone();
        config.bearer = weft_proto::transport::Bearer::new(args.token.as_deref())?;
        let mut worker = Worker::from_config(config);
        register(&mut worker, args.slots);
        worker.run(weft_process::shutdown_on_signal()).await?;
        return Ok(());
    }
    let figures = run_all(&args).await?;
    report::print(&figures);
    Ok(())
}
