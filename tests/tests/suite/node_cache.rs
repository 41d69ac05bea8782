//! The node cache (SPEC 20, issue #41) through real processes: `llm`
//! steps on `test-worker` processes against the local test endpoint,
//! which counts the requests that reach it. A hit is a step that never
//! reached a worker or the endpoint; the tests count both.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunInfo, RunStatus, SubmitOptions};
use weft_tests::TestCluster;
use weft_tests::llm_server::{Reply, TestLlm, last_message};

const KEY: &str = "sk-cache-test";

/// An `llm` step cached on its topic for `ttl`, with `extra` added to the
/// node (another field, another definition) and `settings` to the graph.
fn summary(ttl: &str, extra: &str, settings: &str) -> String {
    format!(
        r#"
name: summaries
settings: {{ {settings} }}
state:
  topic: {{ type: string }}
  summary: {{ type: string, default: "" }}
nodes:
  ask:
    kind: llm
    start: true
    prompt: "Summarise {{{{ topic }}}}."
    cache: {{ key: "{{{{ topic }}}}", ttl: {ttl} }}
    state_updates: {{ summary: "{{{{ output }}}}" }}
    {extra}
"#
    )
}

/// A test endpoint that echoes the prompt, numbered by request.
async fn echo() -> anyhow::Result<TestLlm> {
    TestLlm::start(KEY, |request, n| {
        Reply::Text(format!("{} #{n}", last_message(request)))
    })
    .await
}

async fn cluster(llm: &TestLlm, workers: &[&str]) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    for name in workers {
        cluster.add_llm_test_worker(name, 2, &llm.url, KEY)?;
    }
    cluster.wait_for_workers(workers).await?;
    Ok(cluster)
}

async fn run_with(
    client: &Client,
    yaml: &str,
    input: Value,
    options: SubmitOptions,
) -> anyhow::Result<RunInfo> {
    let bundle = GraphBundle::from_text("summaries.yaml", yaml);
    let run = client.submit_bundle_with(bundle, &input, options).await?;
    let done = client.wait(&run.run_id).await?;
    Ok(done)
}

async fn run(client: &Client, yaml: &str, input: Value) -> anyhow::Result<RunInfo> {
    run_with(client, yaml, input, SubmitOptions::default()).await
}

/// The bodies of the run's events of `kind`.
async fn bodies(client: &Client, run: &RunInfo, kind: &str) -> anyhow::Result<Vec<Value>> {
    let events = weft_tests::events_of(client, &run.run_id, kind).await?;
    Ok(events.into_iter().map(|event| event.body).collect())
}

#[tokio::test]
async fn a_cached_step_answers_later_runs_on_any_worker_without_reaching_the_model()
-> anyhow::Result<()> {
    let llm = echo().await?;
    let mut cluster = cluster(&llm, &["w1"]).await?;
    let client = cluster.client().await?;
    let graph = summary("1h", "", "");
    let first = run(&client, &graph, json!({"topic": "tides"})).await?;
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    assert_eq!(first.state["summary"], "Summarise tides. #0");
    assert_eq!(llm.requests().len(), 1);
    assert!(bodies(&client, &first, "node_cached").await?.is_empty());

    // The worker that ran it leaves; another takes its place.
    cluster.kill_worker("w1")?;
    cluster.add_llm_test_worker("w2", 2, &llm.url, KEY)?;
    cluster.wait_for_workers(&["w2"]).await?;
    let second = run(&client, &graph, json!({"topic": "tides"})).await?;
    assert_eq!(second.status, RunStatus::Completed, "{:?}", second.error);
    assert_eq!(
        second.state["summary"], "Summarise tides. #0",
        "the first run's answer"
    );
    assert_eq!(llm.requests().len(), 1, "the model was not asked again");
    let cached = bodies(&client, &second, "node_cached").await?;
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert_eq!(cached[0]["node"], "ask");
    assert_eq!(cached[0]["stored_by"], first.run_id.to_string());
    // It finished without a worker, and used no model.
    let finished = bodies(&client, &second, "node_finished").await?;
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert!(finished[0].get("worker").is_none(), "{finished:?}");
    assert!(bodies(&client, &second, "model_called").await?.is_empty());

    // Another key is another entry: w2 runs it.
    let third = run(&client, &graph, json!({"topic": "winds"})).await?;
    assert_eq!(third.state["summary"], "Summarise winds. #1");
    assert_eq!(llm.requests().len(), 2);
    let finished = bodies(&client, &third, "node_finished").await?;
    assert_eq!(finished[0]["worker"], "w2");
    Ok(())
}

#[tokio::test]
async fn a_changed_definition_misses_and_no_cache_or_settings_turn_it_off() -> anyhow::Result<()> {
    let llm = echo().await?;
    let cluster = cluster(&llm, &["w"]).await?;
    let client = cluster.client().await?;
    let topic = json!({"topic": "tides"});
    let graph = summary("1h", "", "");
    let stored = run(&client, &graph, topic.clone()).await?;
    assert_eq!(llm.requests().len(), 1);

    // `--no-cache`: it runs, and keeps nothing.
    let no_cache = SubmitOptions {
        no_cache: true,
        ..SubmitOptions::default()
    };
    let fresh = run_with(&client, &graph, topic.clone(), no_cache).await?;
    assert_eq!(fresh.state["summary"], "Summarise tides. #1");
    assert_eq!(llm.requests().len(), 2);
    assert!(bodies(&client, &fresh, "node_cached").await?.is_empty());
    let again = run(&client, &graph, topic.clone()).await?;
    assert_eq!(
        again.state["summary"], "Summarise tides. #0",
        "still the first run's entry: the uncached run kept nothing"
    );
    assert_eq!(
        bodies(&client, &again, "node_cached").await?[0]["stored_by"],
        stored.run_id.to_string()
    );
    assert_eq!(llm.requests().len(), 2);

    // `settings.cache: false`: the same.
    let off = summary("1h", "", "cache: false");
    let unsettled = run(&client, &off, topic.clone()).await?;
    assert_eq!(unsettled.state["summary"], "Summarise tides. #2");
    assert!(bodies(&client, &unsettled, "node_cached").await?.is_empty());
    assert_eq!(llm.requests().len(), 3);

    // Another definition (a field added) is another entry.
    let changed = summary("1h", "max_tokens: 40", "");
    let missed = run(&client, &changed, topic.clone()).await?;
    assert_eq!(missed.state["summary"], "Summarise tides. #3");
    assert!(bodies(&client, &missed, "node_cached").await?.is_empty());
    assert_eq!(llm.requests().len(), 4);
    // A ttl changed, or the node rewired, is the same definition.
    let rewired = format!("{}    description: the same step\n", summary("2h", "", ""));
    let hit = run(&client, &rewired, topic).await?;
    assert_eq!(hit.state["summary"], "Summarise tides. #0");
    assert_eq!(llm.requests().len(), 4);
    Ok(())
}

#[tokio::test]
async fn an_entry_answers_for_its_ttl_and_then_the_step_runs_again() -> anyhow::Result<()> {
    let llm = echo().await?;
    let cluster = cluster(&llm, &["w"]).await?;
    let client = cluster.client().await?;
    let ttl = Duration::from_secs(3);
    let graph = summary("3s", "", "");
    let topic = json!({"topic": "tides"});
    let before = Instant::now();
    run(&client, &graph, topic.clone()).await?;
    assert_eq!(llm.requests().len(), 1);
    // Runs again until one runs the step: each before it is a hit, and the
    // first miss comes no sooner than the ttl after the entry was kept.
    let mut hits = 0;
    let missed_at = loop {
        let again = run(&client, &graph, topic.clone()).await?;
        if bodies(&client, &again, "node_cached").await?.is_empty() {
            assert_eq!(again.state["summary"], "Summarise tides. #1");
            break before.elapsed();
        }
        hits += 1;
        assert_eq!(llm.requests().len(), 1);
        anyhow::ensure!(before.elapsed() < ttl * 10, "the entry never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(hits >= 1, "the entry answered while it was fresh");
    assert!(
        missed_at >= ttl,
        "expired after {missed_at:?}, before its {ttl:?}"
    );
    assert_eq!(llm.requests().len(), 2);
    // The new answer is kept in turn.
    let kept = run(&client, &graph, topic).await?;
    assert_eq!(kept.state["summary"], "Summarise tides. #1");
    assert_eq!(llm.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_failed_attempt_is_never_cached_and_its_retry_is() -> anyhow::Result<()> {
    // The first answer fails the step's output schema; the retry's passes.
    let llm = TestLlm::start(KEY, |_, n| match n {
        0 => Reply::Text("not json".into()),
        _ => Reply::Text(format!(r#"{{"score": {n}}}"#)),
    })
    .await?;
    let cluster = cluster(&llm, &["w"]).await?;
    let client = cluster.client().await?;
    let graph = r#"
state:
  topic: { type: string }
  score: { type: integer, default: 0 }
nodes:
  rate:
    kind: llm
    start: true
    prompt: "Rate {{ topic }}."
    retry: 2
    output_schema:
      type: object
      properties: { score: { type: integer } }
      required: [score]
    cache: { key: "{{ topic }}", ttl: 1h }
"#;
    let topic = json!({"topic": "tides"});
    let first = run(&client, graph, topic.clone()).await?;
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    assert_eq!(first.state["score"], 1);
    assert_eq!(bodies(&client, &first, "node_retrying").await?.len(), 1);
    assert_eq!(llm.requests().len(), 2);
    let second = run(&client, graph, topic).await?;
    assert_eq!(
        second.state["score"], 1,
        "the accepted answer, not the failed one"
    );
    assert_eq!(bodies(&client, &second, "node_cached").await?.len(), 1);
    assert_eq!(llm.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_cache_key_that_does_not_render_fails_the_step_naming_it() -> anyhow::Result<()> {
    let llm = echo().await?;
    let cluster = cluster(&llm, &["w"]).await?;
    let client = cluster.client().await?;
    let graph = summary("1h", "", "").replace(
        r#"cache: { key: "{{ topic }}""#,
        r#"cache: { key: "{{ topic }}/{{ audience }}""#,
    );
    let failed = run(&client, &graph, json!({"topic": "tides"})).await?;
    assert_eq!(failed.status, RunStatus::Failed);
    let error = failed.error.expect("an error");
    assert_eq!(error.node, "ask");
    assert!(error.message.contains("cache.key"), "{}", error.message);
    assert!(error.message.contains("audience"), "{}", error.message);
    assert!(llm.requests().is_empty(), "nothing was asked");
    Ok(())
}

#[tokio::test]
async fn map_items_share_a_cache_and_entries_outlive_a_coordinator_restart() -> anyhow::Result<()> {
    let llm = echo().await?;
    let mut cluster = cluster(&llm, &["w"]).await?;
    let client = cluster.client().await?;
    // One item at a time: the third item's key is the first's.
    let graph = r#"
state:
  topics: { type: array }
  summary: { type: string, default: "" }
  summaries: { type: array, default: [] }
nodes:
  each:
    kind: map
    start: true
    over: "{{ topics }}"
    as: topic
    branch: ask
    collect_into: summaries
    output_key: summary
    max_concurrency: 1
  ask:
    kind: llm
    prompt: "Summarise {{ topic }}."
    cache: { key: "{{ topic }}", ttl: 1h }
    state_updates: { summary: "{{ output }}" }
"#;
    let topics = json!({"topics": ["tides", "winds", "tides"]});
    let first = run(&client, graph, topics.clone()).await?;
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    assert_eq!(
        first.state["summaries"],
        json!([
            "Summarise tides. #0",
            "Summarise winds. #1",
            "Summarise tides. #0"
        ])
    );
    assert_eq!(llm.requests().len(), 2);
    let cached = bodies(&client, &first, "node_cached").await?;
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert_eq!(cached[0]["item"], 2);
    assert_eq!(cached[0]["stored_by"], first.run_id.to_string());

    cluster.restart_coordinator()?;
    cluster
        .wait_for_log_count("w", "joined the coordinator", 2)
        .await?;
    let client = cluster.client().await?;
    let second = run(&client, graph, topics).await?;
    assert_eq!(second.status, RunStatus::Completed, "{:?}", second.error);
    assert_eq!(second.state["summaries"], first.state["summaries"]);
    assert_eq!(
        llm.requests().len(),
        2,
        "every item answered from the store"
    );
    assert_eq!(bodies(&client, &second, "node_cached").await?.len(), 3);
    Ok(())
}

#[tokio::test]
async fn an_answer_too_large_to_keep_is_said_and_the_run_goes_on() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, n| {
        let long = "x".repeat(if last_message(request).contains("long") {
            4000
        } else {
            10
        });
        Reply::Text(format!("{long} #{n}"))
    })
    .await?;
    let mut cluster = TestCluster::start_with_config("max_cache_entry_bytes = 2000\n", &[])?;
    cluster.add_llm_test_worker("w", 2, &llm.url, KEY)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let graph = summary("1h", "", "");
    let long = json!({"topic": "long"});
    let first = run(&client, &graph, long.clone()).await?;
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    let refused = bodies(&client, &first, "node_not_cached").await?;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["node"], "ask");
    let reason = refused[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("max_cache_entry_bytes"), "{reason}");
    assert!(reason.contains("more than the 2000"), "{reason}");
    // Not kept: the next run asks again; a small answer is kept.
    run(&client, &graph, long).await?;
    assert_eq!(llm.requests().len(), 2);
    let short = json!({"topic": "short"});
    run(&client, &graph, short.clone()).await?;
    let hit = run(&client, &graph, short).await?;
    assert_eq!(bodies(&client, &hit, "node_cached").await?.len(), 1);
    assert_eq!(llm.requests().len(), 3);
    Ok(())
}
