//! W10 (SPEC 14, 18): a map of 500 `llm` items against a provider that
//! answers 429 above 6,000 requests a minute, under a cluster-wide limit
//! of 5,500 — what the limit achieves and what it costs.
//!
//! Figures, each a median over the iterations: the rate the provider saw
//! once the first second's burst was spent (the calls over the span from
//! the first after it to the last) as a share of the limit (goal ≥ 0.95); the 429s the provider answered (goal
//! 0) and the items that failed (goal 0); and the cost of a throttled
//! task: this process's CPU time (coordinator, workers and the provider,
//! all embedded) with the limit, less the same map's without a limit
//! against a provider without one, over the `task_throttled` events the
//! limited run told.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde_json::json;
use weft_client::{Client, EmbeddedCluster, GraphBundle, RunStatus};
use weft_coordinator::dispatch::limits::{LimitSpec, Matcher};
use weft_tests::llm_server::{Reply, TestLlm};

use super::{Args, Figure, median};

const ITEMS: usize = 500;
const LIMIT: u64 = 5_500;
const PROVIDER: u64 = 6_000;
const KEY: &str = "sk-w10";

const MAP: &str = weft_tests::llm_server::ASK_EACH;

/// What one run of the map came to.
struct Outcome {
    took: Duration,
    /// The provider's requests per minute over the items' span.
    rate: f64,
    throttled_429: u64,
    failed: usize,
    told: usize,
    cpu: Duration,
}

/// This process's CPU time (user and system, every thread).
pub(crate) fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command's closing parenthesis: state is field 3, utime 14.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    // /proc counts in USER_HZ, 100 a second on Linux.
    Duration::from_millis(fields.iter().sum::<u64>() * 10)
}

/// Gives `worker` the endpoint at `url` (key `key`) as its `default`
/// model provider.
pub(crate) fn use_provider(worker: &mut weft_worker::Worker, url: &str, key: &str) {
    let table = weft_worker::llm::ProviderConfig {
        base_url: url.to_owned(),
        api_key: Some(key.into()),
        model: Some("tiny".into()),
        ..Default::default()
    };
    let tables = std::collections::BTreeMap::from([("default".to_owned(), table)]);
    if let Ok(providers) =
        weft_worker::llm::Providers::new(tables, |_| None, &weft_worker::Secrets::default())
    {
        worker.providers(providers);
    }
}

async fn one(limited: bool) -> Result<Outcome> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("ok".into())).await?;
    if limited {
        llm.limit_rate(PROVIDER);
    }
    let url = llm.url.clone();
    let cluster = EmbeddedCluster::start_configured(
        2,
        move |config| {
            if limited {
                config.rate_limits = vec![LimitSpec {
                    name: "w10".into(),
                    matcher: Matcher {
                        kind: Some("llm".into()),
                        ..Matcher::default()
                    },
                    requests_per_minute: Some(LIMIT),
                    tokens_per_minute: None,
                    concurrency: None,
                }];
            }
        },
        move |worker| {
            worker.slots(32);
            use_provider(worker, &url, KEY);
        },
    )
    .await?;
    cluster.ready().await?;
    let client = Client::connect(cluster.url.clone()).await?;
    let items: Vec<usize> = (0..ITEMS).collect();
    let (start, before) = (Instant::now(), cpu());
    let run = client
        .submit_bundle(
            GraphBundle::from_text("w10.yaml", MAP),
            &json!({ "items": items }),
        )
        .await?;
    let done = client.wait(&run.run_id).await?;
    let (took, spent) = (start.elapsed(), cpu().saturating_sub(before));
    let failed = match done.status {
        RunStatus::Completed => 0,
        _ => done.state["answers"]
            .as_array()
            .map_or(ITEMS, |answers| ITEMS - answers.len()),
    };
    let told = weft_tests::events_of(&client, &run.run_id, "task_throttled")
        .await?
        .len();
    // The steady rate: after the first second, whose burst (a second's
    // share, as the provider allows too) would flatter it.
    let arrivals = llm.arrivals();
    ensure!(
        arrivals.len() >= 2,
        "the provider saw {} calls",
        arrivals.len()
    );
    let settled = arrivals[0] + Duration::from_secs(1);
    let after: Vec<&Instant> = arrivals.iter().filter(|at| **at >= settled).collect();
    let rate = match (after.first(), after.last()) {
        (Some(first), Some(last)) if last > first => {
            (after.len() - 1) as f64 / (**last - **first).as_secs_f64() * 60.0
        }
        _ => 0.0,
    };
    cluster.stop().await;
    Ok(Outcome {
        took,
        rate,
        throttled_429: llm.throttled(),
        failed,
        told,
        cpu: spent,
    })
}

fn middle(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// W10, `args.iterations` times (at most 3: each takes the limit's 5.5 s).
pub(crate) async fn w10(args: &Args) -> Result<Vec<Figure>> {
    let rounds = args.iterations.clamp(1, 3);
    let (mut limited, mut free) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        limited.push(one(true).await?);
        free.push(one(false).await?);
    }
    let samples: Vec<Duration> = limited.iter().map(|o| o.took).collect();
    let share = middle(
        &mut limited
            .iter()
            .map(|o| o.rate / LIMIT as f64)
            .collect::<Vec<_>>(),
    );
    let errors = middle(
        &mut limited
            .iter()
            .map(|o| o.throttled_429 as f64)
            .collect::<Vec<_>>(),
    );
    let failed = middle(&mut limited.iter().map(|o| o.failed as f64).collect::<Vec<_>>());
    let told = middle(&mut limited.iter().map(|o| o.told as f64).collect::<Vec<_>>());
    let extra = median(&limited.iter().map(|o| o.cpu).collect::<Vec<_>>()).as_secs_f64()
        - median(&free.iter().map(|o| o.cpu).collect::<Vec<_>>()).as_secs_f64();
    let per_throttled = if told > 0.0 { extra / told * 1e6 } else { 0.0 };
    let label = |what: &str| {
        format!("W10 500 llm items under {LIMIT}/min (provider {PROVIDER}/min): {what}")
    };
    Ok(vec![
        Figure {
            id: "w10".into(),
            label: label("rate as a share of the limit"),
            samples: samples.clone(),
            per: Some((share * 100.0, "% of the limit")),
        },
        Figure {
            id: "w10_429".into(),
            label: label("429s from the provider"),
            samples: samples.clone(),
            per: Some((errors, "429s")),
        },
        Figure {
            id: "w10_failed".into(),
            label: label("items failed"),
            samples: samples.clone(),
            per: Some((failed, "items")),
        },
        Figure {
            id: "w10_cost".into(),
            label: label(&format!("CPU per throttled task ({told:.0} told)")),
            samples,
            per: Some((per_throttled, "µs")),
        },
    ])
}
