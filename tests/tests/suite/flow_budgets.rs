//! Budgets and usage across a run's family (SPEC 18, issue #40), through
//! real processes: a run's `settings.budget` stops its model calls at the
//! one that would cross it, its subgraph children's included, and a run's
//! usage sums its map items' and its children's calls.

use serde_json::{Value, json};
use weft_client::{GraphBundle, RunStatus};
use weft_tests::TestCluster;
use weft_tests::llm_server::{Reply, TestLlm};

const KEY: &str = "sk-budget-test";

async fn cluster(llm: &TestLlm, config: &str) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start_with_config(config, &[])?;
    cluster.add_llm_test_worker("w", 4, &llm.url, KEY)?;
    cluster.wait_for_workers(&["w"]).await?;
    Ok(cluster)
}

/// An agent that would call its tool forever, under a budget of 2,000
/// tokens.
const LOOPING: &str = r#"
settings:
  budget: { tokens: 2000 }
state:
  answer: { type: string, default: "" }
nodes:
  ask:
    kind: agent
    start: true
    prompt: "Look it up, again and again."
    tools: [lookup]
    max_turns: 40
    state_updates: { answer: "{{ output }}" }
"#;

/// The tokens the `model_called` events of `run_id` count.
async fn spent(client: &weft_client::Client, run_id: &str) -> anyhow::Result<(usize, u64)> {
    let calls = weft_tests::events_of(client, run_id, "model_called").await?;
    let tokens = calls
        .iter()
        .map(|c| {
            c.body["prompt_tokens"].as_u64().unwrap_or(0)
                + c.body["completion_tokens"].as_u64().unwrap_or(0)
        })
        .sum();
    Ok((calls.len(), tokens))
}

/// The error of `done`, which failed at `node` with `BudgetExceeded`
/// against the 2,000-token budget of run `run_id`.
fn over_budget(done: &weft_client::RunInfo, node: &str, run_id: &str) -> weft_client::RunErrorInfo {
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.clone().expect("an error");
    assert_eq!(error.kind, "BudgetExceeded", "{error:?}");
    assert_eq!(error.node, node);
    assert!(
        error
            .message
            .contains(&format!("run {run_id}'s budget is 2000 tokens")),
        "{}",
        error.message
    );
    error
}

/// The loop is stopped at the call that would cross the budget: the run
/// fails with `BudgetExceeded`, naming the budget, what was spent and the
/// step, having spent no more than its budget.
#[tokio::test]
async fn a_runs_budget_stops_an_agent_loop_at_the_call_that_would_cross_it() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| {
        Reply::ToolCalls(vec![("lookup".into(), json!({"key": "a"}))])
    })
    .await?;
    let cluster = cluster(&llm, "").await?;
    let client = cluster.client().await?;
    let run_id = client
        .submit_bundle(GraphBundle::from_text("loop.yaml", LOOPING), &json!({}))
        .await?
        .run_id;
    let done = client.wait(&run_id).await?;
    let error = over_budget(&done, "ask", &run_id);
    assert!(error.message.contains("step 'ask'"), "{}", error.message);
    let (calls, tokens) = spent(&client, &run_id).await?;
    assert!(calls >= 2, "stopped before it began: {calls} calls");
    assert!(calls < 40, "the loop ran to its max_turns");
    assert_eq!(llm.requests().len(), calls, "a call went out unrecorded");
    assert!(
        tokens <= 2000,
        "{tokens} tokens spent under a budget of 2000"
    );
    let failed = weft_tests::events_of(&client, &run_id, "node_failed").await?;
    assert!(
        failed.iter().any(|e| e.body["error"]
            .as_str()
            .unwrap_or("")
            .contains("budget_exceeded")),
        "{failed:?}"
    );
    Ok(())
}

/// A parent's budget covers its subgraph child: the child's loop is
/// stopped by the parent's budget, and the parent fails the same way.
#[tokio::test]
async fn a_parents_budget_stops_its_childs_calls() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| {
        Reply::ToolCalls(vec![("lookup".into(), json!({"key": "a"}))])
    })
    .await?;
    let cluster = cluster(&llm, "").await?;
    let client = cluster.client().await?;
    let parent = r#"
settings:
  budget: { tokens: 2000 }
nodes:
  inner: { kind: subgraph, start: true, graph: child.yaml }
"#;
    let child = LOOPING.replace("settings:\n  budget: { tokens: 2000 }\n", "");
    let bundle = GraphBundle::from_text("parent.yaml", parent).with_file(
        "child.yaml",
        child.as_bytes(),
        0o644,
    );
    let run_id = client.submit_bundle(bundle, &json!({})).await?.run_id;
    let done = client.wait(&run_id).await?;
    over_budget(&done, "inner", &run_id);
    let calls = llm.requests().len();
    assert!((2..40).contains(&calls), "{calls} calls");
    // The child's calls are in the parent's usage.
    assert_eq!(done.usage.calls, calls as u64);
    assert!(done.usage.prompt_tokens + done.usage.completion_tokens <= 2000);
    Ok(())
}

/// A run's usage sums its own steps', its map items' and its subgraph
/// child's calls; each step's `node_finished` has its own.
#[tokio::test]
async fn usage_is_summed_over_a_map_and_a_subgraph() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("ok".into())).await?;
    let cluster = cluster(&llm, "[prices.\"tiny\"]\ninput = 1.0\noutput = 2.0\n").await?;
    let client = cluster.client().await?;
    let parent = r#"
state:
  items: { type: array, default: [1, 2, 3] }
  answer: { type: string, default: "" }
  outs: { type: array, default: [] }
nodes:
  first: { kind: llm, start: true, prompt: "Hello.", next: fan }
  fan:
    kind: map
    over: "{{ items }}"
    as: item
    branch: each
    output_key: answer
    collect_into: outs
    next: inner
  each:
    kind: llm
    prompt: "Item {{ item }}."
    state_updates: { answer: "{{ output }}" }
  inner: { kind: subgraph, graph: child.yaml }
"#;
    let child = r#"
nodes:
  one: { kind: llm, start: true, prompt: "Child." }
"#;
    let bundle = GraphBundle::from_text("parent.yaml", parent).with_file(
        "child.yaml",
        child.as_bytes(),
        0o644,
    );
    let run_id = client.submit_bundle(bundle, &json!({})).await?.run_id;
    let done = client.wait(&run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // One call of its own, three items, one in the child.
    assert_eq!(llm.requests().len(), 5);
    assert_eq!(done.usage.calls, 5);
    assert_eq!(done.usage.completion_tokens, 5 * 7);
    let prompts: u64 = llm
        .requests()
        .iter()
        .map(|r: &Value| r["messages"].to_string().len() as u64 / 4)
        .sum();
    assert_eq!(done.usage.prompt_tokens, prompts);
    let cost = done.usage.cost.expect("priced");
    let priced = (prompts - done.usage.cached_tokens) as f64 * 1.0
        + done.usage.cached_tokens as f64 * 1.0
        + 35.0 * 2.0;
    assert!(
        (cost - priced / 1e6).abs() < 1e-12,
        "{cost} against {priced}"
    );
    Ok(())
}

/// A namespace whose day budget is spent refuses its next run with
/// RESOURCE_EXHAUSTED and the figure; the runs already going were not
/// stopped for it.
#[tokio::test]
async fn a_namespace_over_its_days_budget_refuses_the_next_run() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("ok".into())).await?;
    let config = "[[namespaces]]\nname = \"default\"\ntokens_per_day = 20\n";
    let cluster = cluster(&llm, config).await?;
    let client = cluster.client().await?;
    let ask = GraphBundle::from_text(
        "ask.yaml",
        "nodes:\n  ask: { kind: llm, start: true, prompt: \"Say something long enough.\" }\n",
    );
    let first = client.submit_bundle(ask.clone(), &json!({})).await?.run_id;
    let done = client.wait(&first).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let spent = done.usage.prompt_tokens + done.usage.completion_tokens;
    assert!(spent >= 20, "the first run spent only {spent} tokens");
    let refused = client
        .submit_bundle(ask, &json!({}))
        .await
        .expect_err("the day is spent");
    assert!(
        refused.to_string().contains(&format!(
            "namespace 'default' has spent {spent} tokens today, its tokens_per_day is 20"
        )),
        "{refused}"
    );
    Ok(())
}
