//! Flow control for model calls (SPEC 18, issue #40), through real
//! processes: a coordinator with `[[limits]]`, `test-worker`s whose
//! provider is the local test server, and that server enforcing a rate
//! limit of its own as a provider does (429 with `Retry-After` beyond it).
//! Every figure asserted here is counted — requests, 429s, arrivals within
//! a window — never timed against a deadline.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_tests::TestCluster;
use weft_tests::llm_server::{Reply, TestLlm};

const KEY: &str = "sk-flow-test";

/// A coordinator configured with `limits` (TOML), and `workers` test
/// workers of `slots` slots each whose provider is `llm`.
async fn cluster(
    llm: &TestLlm,
    limits: &str,
    workers: &[&str],
    slots: u32,
) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start_with_config(limits, &[])?;
    for name in workers {
        cluster.add_llm_test_worker(name, slots, &llm.url, KEY)?;
    }
    cluster.wait_for_workers(workers).await?;
    Ok(cluster)
}

async fn run(client: &Client, yaml: &str, input: Value) -> anyhow::Result<RunInfo> {
    let run = client
        .submit_bundle(GraphBundle::from_text("flow.yaml", yaml), &input)
        .await?;
    Ok(client.wait(&run.run_id).await?)
}

/// A map of `llm` items, 64 at a time.
const ASK_EACH: &str = weft_tests::llm_server::ASK_EACH;

/// The most arrivals within any `window` (sliding over the arrivals).
fn busiest(arrivals: &[Instant], window: Duration) -> usize {
    let mut most = 0;
    let mut start = 0;
    for (end, at) in arrivals.iter().enumerate() {
        while *at - arrivals[start] >= window {
            start += 1;
        }
        most = most.max(end + 1 - start);
    }
    most
}

/// W10 of SPEC 14 as a test: 500 `llm` items against an endpoint that
/// answers 429 above 6,000 requests a minute, under a limit of 5,500: no
/// 429, no item failed, and the endpoint's observed rate within the limit
/// in every second.
#[tokio::test]
async fn a_map_of_500_llm_items_under_a_limit_draws_no_429() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("ok".into())).await?;
    llm.limit_rate(6_000);
    let limits = r#"
[[limits]]
name = "test-endpoint"
match = { provider = "default" }
requests_per_minute = 5500
"#;
    let cluster = cluster(&llm, limits, &["w1", "w2"], 16).await?;
    let client = cluster.client().await?;
    let items: Vec<u64> = (0..500).collect();
    let done = run(&client, ASK_EACH, json!({ "items": items })).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["answers"].as_array().map(Vec::len), Some(500));
    assert_eq!(llm.throttled(), 0, "the endpoint answered 429");
    let arrivals = llm.arrivals();
    assert_eq!(arrivals.len(), 500, "one request per item");
    // 5,500 a minute: 91.7 a second, with a burst of one second's share;
    // so no second can see more than two seconds' share (183.3), give or
    // take how long a request takes from its grant to the endpoint: those
    // granted over 1.05 s may arrive within one on a busy machine (one
    // CI run saw 185).
    let most = busiest(&arrivals, Duration::from_secs(1));
    assert!(
        most <= 188,
        "{most} requests reached the endpoint within one second"
    );
    // And it was paced: 500 requests at 91.7 a second after a burst of
    // 92 take more than 4 s.
    let span = *arrivals.last().expect("arrivals") - arrivals[0];
    assert!(span >= Duration::from_secs(4), "500 requests in {span:?}");
    // Items that waited said so, naming the limit.
    let throttled = weft_tests::events_of(&client, &done.run_id, "task_throttled").await?;
    assert!(!throttled.is_empty(), "no item waited");
    assert_eq!(throttled[0].body["limit"], "test-endpoint");
    let failed = weft_tests::events_of(&client, &done.run_id, "node_failed").await?;
    assert!(failed.is_empty(), "{failed:?}");
    let metrics = cluster.metrics()?;
    assert!(
        metrics.contains("weft_tasks_throttled_total{limit=\"test-endpoint\"}"),
        "{metrics}"
    );
    Ok(())
}

/// A 429 from the provider (another client of the same key, say) holds
/// every worker's calls back until its `Retry-After`, and the call is
/// tried again rather than failed.
#[tokio::test]
async fn a_429_that_reaches_a_worker_holds_every_worker_back() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, n| match n {
        20 => Reply::Status(429, Some(2)),
        _ => Reply::Text("ok".into()),
    })
    .await?;
    let limits = r#"
[[limits]]
name = "shared-key"
match = { provider = "default", model = "tin*" }
requests_per_minute = 600
"#;
    let cluster = cluster(&llm, limits, &["w1", "w2"], 4).await?;
    let client = cluster.client().await?;
    let items: Vec<u64> = (0..60).collect();
    let done = run(&client, ASK_EACH, json!({ "items": items })).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["answers"].as_array().map(Vec::len), Some(60));
    let arrivals = llm.arrivals();
    // Every item answered, the throttled one on a second request.
    assert_eq!(arrivals.len(), 61);
    let throttled_at = arrivals[20];
    // Calls already out when the 429 came may land just after it; then
    // nothing until the provider's two seconds are over.
    let quiet = arrivals
        .iter()
        .filter(|at| {
            **at > throttled_at + Duration::from_millis(300)
                && **at < throttled_at + Duration::from_millis(1_900)
        })
        .count();
    assert_eq!(
        quiet, 0,
        "requests went out during the provider's Retry-After"
    );
    let events = weft_tests::events_of(&client, &done.run_id, "task_throttled").await?;
    assert!(
        events.iter().any(|e| e.body["limit"] == "shared-key"),
        "{events:?}"
    );
    Ok(())
}

/// An agent's later turns ask the coordinator for their grants: a limit of
/// two requests a second spaces its six calls out, so an endpoint that
/// allows 2.5 a second never throttles it.
#[tokio::test]
async fn an_agents_later_calls_wait_for_the_limit_too() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, n| match n {
        0..=4 => Reply::ToolCalls(vec![("lookup".into(), json!({"key": "a"}))]),
        _ => Reply::Text("done".into()),
    })
    .await?;
    llm.limit_rate(150);
    let limits = r#"
[[limits]]
name = "slow-model"
match = { kind = "agent" }
requests_per_minute = 120
"#;
    let cluster = cluster(&llm, limits, &["w"], 1).await?;
    let client = cluster.client().await?;
    let yaml = r#"
state:
  answer: { type: string, default: "" }
nodes:
  ask:
    kind: agent
    start: true
    prompt: "Look it up."
    tools: [lookup]
    max_turns: 8
    state_updates: { answer: "{{ output }}" }
"#;
    let done = run(&client, yaml, json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["answer"], "done");
    assert_eq!(llm.throttled(), 0, "the endpoint answered 429");
    let arrivals = llm.arrivals();
    assert_eq!(arrivals.len(), 6);
    // Two at once (the burst), then one every half second.
    let span = arrivals[5] - arrivals[0];
    assert!(
        span >= Duration::from_millis(1_900),
        "six calls in {span:?}"
    );
    let calls = weft_tests::events_of(&client, &done.run_id, "model_called").await?;
    assert_eq!(calls.len(), 6);
    Ok(())
}

/// Every model call's tokens (prompt, completion, cached) and its cost by
/// `[prices]` are on its `model_called` event, summed on each step's
/// `node_finished` and on the run, and counted in the metrics by
/// namespace, provider and model.
#[tokio::test]
async fn usage_and_cost_are_summed_on_steps_and_on_the_run() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("ok".into())).await?;
    let config = r#"
[prices."tiny"]
input = 2.0
output = 10.0
cached_input = 1.0
"#;
    let cluster = cluster(&llm, config, &["w"], 2).await?;
    let client = cluster.client().await?;
    let done = run(&client, ASK_EACH, json!({ "items": [1, 2, 3] })).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let calls = weft_tests::events_of(&client, &done.run_id, "model_called").await?;
    assert_eq!(calls.len(), 3);
    let (mut prompt, mut cached, mut cost) = (0, 0, 0.0);
    for call in &calls {
        let (p, c) = (
            call.body["prompt_tokens"].as_u64().expect("prompt tokens"),
            call.body["cached_tokens"].as_u64().expect("cached tokens"),
        );
        // The test server serves half of each prompt from its cache.
        assert_eq!(c, p / 2);
        assert_eq!(call.body["completion_tokens"], 7);
        assert_eq!(call.body["provider"], "default");
        let priced = ((p - c) as f64 * 2.0 + c as f64 * 1.0 + 7.0 * 10.0) / 1e6;
        let shown = call.body["cost"].as_f64().expect("a cost");
        assert!((shown - priced).abs() < 1e-12, "{shown} against {priced}");
        (prompt, cached, cost) = (prompt + p, cached + c, cost + priced);
    }
    // Each item's step carries its own call's usage.
    let finished = weft_tests::events_of(&client, &done.run_id, "node_finished").await?;
    let steps: Vec<&Value> = finished
        .iter()
        .filter(|e| e.body["node"] == "ask")
        .map(|e| &e.body["usage"])
        .collect();
    assert_eq!(steps.len(), 3);
    for usage in &steps {
        assert_eq!(usage["calls"], 1);
        assert_eq!(usage["completion_tokens"], 7);
    }
    // The run sums them.
    let usage = &done.usage;
    assert_eq!(
        (
            usage.calls,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens
        ),
        (3, prompt, 21, cached)
    );
    assert!((usage.cost.expect("priced") - cost).abs() < 1e-12);
    let metrics = cluster.metrics()?;
    let completion = metrics.lines().find(|line| {
        line.starts_with("weft_llm_tokens_total{")
            && line.contains("model=\"tiny\"")
            && line.contains("provider=\"default\"")
            && line.contains("namespace=\"default\"")
            && line.contains("type=\"completion\"")
    });
    assert!(completion.is_some_and(|l| l.ends_with(" 21")), "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("weft_llm_cost_total{") && l.contains("model=\"tiny\"")),
        "{metrics}"
    );
    Ok(())
}

/// A malformed `[[limits]]` entry refuses the start naming it; one that
/// matches nothing is a warning `--check-config` prints.
#[test]
fn limits_are_checked_when_the_coordinator_starts() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("weft-limits-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let check = |text: &str| -> anyhow::Result<std::process::Output> {
        let path = dir.join("coordinator.toml");
        std::fs::write(&path, text)?;
        Ok(
            std::process::Command::new(weft_tests::binary("coordinator"))
                .arg("--check-config")
                .arg("--config")
                .arg(&path)
                .output()?,
        )
    };
    let refused = check("[[limits]]\nname = \"api\"\nrequests_per_minute = 0\n")?;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("limits[0] ('api').requests_per_minute"),
        "{said}"
    );
    let warned = check(
        "[[limits]]\nname = \"scripts\"\nmatch = { kind = \"script\", model = \"gpt-*\" }\nconcurrency = 2\n",
    )?;
    assert!(warned.status.success());
    let said = String::from_utf8_lossy(&warned.stderr);
    assert!(
        said.contains("warning: limit 'scripts' matches nothing"),
        "{said}"
    );
    let priced = check("[prices.\"gpt-4o\"]\ninput = -2.5\noutput = 10.0\n")?;
    assert!(!priced.status.success());
    let said = String::from_utf8_lossy(&priced.stderr);
    assert!(said.contains("prices.\"gpt-4o\".input"), "{said}");
    std::fs::remove_dir_all(dir)?;
    Ok(())
}
