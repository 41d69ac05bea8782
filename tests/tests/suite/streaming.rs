//! Model output streamed to watchers (SPEC 19, issue #41) through real
//! processes: `llm` steps on a `test-worker` against the local test
//! endpoint, which streams its reply a piece at a time, a gap apart; the
//! tests read the pieces through the coordinator's `StreamRun` while the
//! step still runs.

use std::time::Duration;

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use weft_client::{Client, Delta, GraphBundle, RunStatus};
use weft_tests::TestCluster;
use weft_tests::llm_server::{Reply, TestLlm};

const KEY: &str = "sk-stream-test";

const STORY: &str = r#"
name: story
state:
  topic: { type: string }
  story: { type: string, default: "" }
nodes:
  tell:
    kind: llm
    start: true
    prompt: "Tell a story about {{ topic }}."
    retry: 2
    state_updates: { story: "{{ output }}" }
"#;

/// The pieces the endpoint streams, and their text whole.
const PIECES: [&str; 6] = ["Once ", "upon ", "a ", "time ", "there ", "was a tide."];

fn story() -> String {
    PIECES.concat()
}

async fn cluster(llm: &TestLlm) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    cluster.add_llm_test_worker("w", 4, &llm.url, KEY)?;
    cluster.wait_for_workers(&["w"]).await?;
    Ok(cluster)
}

/// An endpoint that streams [`PIECES`], `gap` apart.
async fn slow_story(gap: Duration) -> anyhow::Result<TestLlm> {
    TestLlm::start(KEY, move |_, _| {
        Reply::Streamed(PIECES.iter().map(|p| (*p).to_owned()).collect(), gap)
    })
    .await
}

async fn submit(client: &Client) -> anyhow::Result<String> {
    let run = client
        .submit_bundle(
            GraphBundle::from_text("story.yaml", STORY),
            &json!({"topic": "tides"}),
        )
        .await?;
    Ok(run.run_id.to_string())
}

/// Every piece of run `run_id`'s stream from `from` to its end.
async fn read_all(client: &Client, run_id: &str, from: u64) -> anyhow::Result<Vec<Delta>> {
    let pieces = client.stream(run_id, from).await?;
    let all = tokio::time::timeout(
        Duration::from_secs(60),
        pieces.collect::<Result<Vec<_>, _>>(),
    )
    .await??;
    Ok(all)
}

fn text_of(pieces: &[Delta]) -> String {
    pieces
        .iter()
        .filter(|p| p.kind == "text")
        .map(|p| p.text.as_str())
        .collect()
}

#[tokio::test]
async fn pieces_arrive_in_order_while_the_step_runs() -> anyhow::Result<()> {
    let llm = slow_story(Duration::from_millis(300)).await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let run_id = submit(&client).await?;
    let mut pieces = client.stream(&run_id, 0).await?;
    let first = tokio::time::timeout(Duration::from_secs(30), pieces.next())
        .await?
        .expect("a first piece")?;
    // The step still runs: its answer is five gaps away.
    let now = client.status(&run_id).await?;
    assert_eq!(now.status, RunStatus::Running);
    let logged: Vec<String> = client
        .watch(&run_id, 0)
        .await?
        .take(now.event_count as usize)
        .map(|event| event.map(|e| e.kind))
        .collect::<Result<_, _>>()
        .await?;
    assert!(logged.contains(&"node_started".to_owned()), "{logged:?}");
    assert!(!logged.contains(&"node_finished".to_owned()), "{logged:?}");
    assert_eq!(
        (
            first.offset,
            first.node.as_str(),
            first.attempt,
            first.kind.as_str()
        ),
        (0, "tell", 1, "text")
    );
    assert_eq!(first.text, PIECES[0]);
    let mut all = vec![first];
    while let Some(piece) = pieces.next().await {
        all.push(piece?);
    }
    // In order, each at the next offset, ending with `end`.
    let offsets: Vec<u64> = all.iter().map(|p| p.offset).collect();
    assert_eq!(offsets, (0..all.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.last().map(|p| p.kind.as_str()), Some("end"));
    assert_eq!(text_of(&all), story());
    let done = client.wait(&run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["story"], story());
    // The endpoint was asked to stream, with its usage.
    let request = &llm.requests()[0];
    assert_eq!(request["stream"], true);
    assert_eq!(request["stream_options"]["include_usage"], true);
    Ok(())
}

#[tokio::test]
async fn a_watcher_that_reconnects_goes_on_from_its_offset() -> anyhow::Result<()> {
    let llm = slow_story(Duration::from_millis(150)).await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let run_id = submit(&client).await?;
    let mut read = Vec::new();
    {
        let mut pieces = client.stream(&run_id, 0).await?;
        for _ in 0..2 {
            read.push(pieces.next().await.expect("a piece")?);
        }
        // Dropped mid-stream: the watcher goes away.
    }
    let next = read.last().map_or(0, |p| p.offset + 1);
    let rest = read_all(&client, &run_id, next).await?;
    read.extend(rest);
    assert_eq!(text_of(&read), story(), "nothing lost or repeated");
    let offsets: Vec<u64> = read.iter().map(|p| p.offset).collect();
    assert_eq!(offsets, (0..read.len() as u64).collect::<Vec<_>>());
    // After the end, the whole stream is still there to read.
    assert_eq!(text_of(&read_all(&client, &run_id, 0).await?), story());
    Ok(())
}

#[tokio::test]
async fn a_failed_attempts_stream_is_marked_abandoned_and_the_retry_starts_fresh()
-> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, n| match n {
        // Some text, then the provider gives up mid-stream.
        0 => Reply::RawStream(vec![
            json!({"model": "tiny", "choices": [{"index": 0, "delta": {"content": "Once upon a"}}]})
                .to_string(),
            json!({"error": {"message": "overloaded"}}).to_string(),
        ]),
        _ => Reply::Streamed(
            PIECES.iter().map(|p| (*p).to_owned()).collect(),
            Duration::ZERO,
        ),
    })
    .await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let run_id = submit(&client).await?;
    let done = client.wait(&run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let all = read_all(&client, &run_id, 0).await?;
    let shape: Vec<(u32, &str)> = all.iter().map(|p| (p.attempt, p.kind.as_str())).collect();
    assert_eq!(shape[0], (1, "text"));
    assert_eq!(shape[1], (1, "abandoned"));
    assert!(
        shape[2..].iter().all(|(attempt, _)| *attempt == 2),
        "{shape:?}"
    );
    assert_eq!(shape.last(), Some(&(2, "end")));
    let second: Vec<Delta> = all.iter().filter(|p| p.attempt == 2).cloned().collect();
    assert_eq!(text_of(&second), story());
    assert_eq!(done.state["story"], story());
    Ok(())
}

#[tokio::test]
async fn an_ended_runs_stream_outlives_its_coordinators_restart() -> anyhow::Result<()> {
    let llm = slow_story(Duration::from_millis(20)).await?;
    let mut cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let run_id = submit(&client).await?;
    let done = client.wait(&run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let before = read_all(&client, &run_id, 0).await?;
    assert_eq!(text_of(&before), story());
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    // Read back from the store: the same pieces at the same offsets, and
    // the stream ends (the run has).
    let after = read_all(&client, &run_id, 0).await?;
    let shape = |pieces: &[Delta]| -> Vec<(u64, String, String)> {
        pieces
            .iter()
            .map(|p| (p.offset, p.kind.clone(), p.text.clone()))
            .collect()
    };
    assert_eq!(shape(&after), shape(&before));
    // From the middle too.
    let middle = read_all(&client, &run_id, 3).await?;
    assert_eq!(shape(&middle), shape(&before[3..]));
    Ok(())
}

#[tokio::test]
async fn a_hundred_watchers_read_one_stream_whole() -> anyhow::Result<()> {
    let llm = slow_story(Duration::from_millis(100)).await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let run_id = submit(&client).await?;
    let watchers: Vec<_> = (0..100)
        .map(|_| {
            let (client, run_id) = (client.clone(), run_id.clone());
            tokio::spawn(async move { read_all(&client, &run_id, 0).await })
        })
        .collect();
    for watcher in watchers {
        let pieces = watcher.await??;
        assert_eq!(text_of(&pieces), story());
        assert_eq!(pieces.last().map(|p| p.kind.as_str()), Some("end"));
    }
    Ok(())
}

#[tokio::test]
async fn weft_watch_prints_the_text_as_it_comes_and_json_one_object_a_piece() -> anyhow::Result<()>
{
    let llm = slow_story(Duration::from_millis(50)).await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let run_id = submit(&client).await?;
    // The endpoint answers on this test's runtime: the command waits on
    // a thread of its own.
    let watch = |json: bool| {
        let mut command = std::process::Command::new(weft_tests::binary("weft"));
        command
            .env("WEFT_EPHEMERAL", "1")
            .env_remove("WEFT_COORDINATOR")
            .args(["--coordinator", cluster.url(), "watch", &run_id]);
        if json {
            command.arg("--json");
        }
        tokio::task::spawn_blocking(move || {
            weft_tests::output_within(&mut command, Duration::from_secs(60))
        })
    };
    let shown = watch(false).await?;
    assert_eq!(shown.status.code(), Some(0));
    let progress = String::from_utf8_lossy(&shown.stderr);
    // The text on tagged lines (tagged again wherever a progress line came
    // in between), and the progress on lines of its own.
    let told: String = progress
        .lines()
        .filter_map(|line| line.strip_prefix("  [tell] "))
        .collect();
    assert_eq!(told, story(), "{progress}");
    assert!(
        progress.lines().any(|line| line == "  ✓ tell"),
        "{progress}"
    );
    let listed = watch(true).await?;
    let stdout = String::from_utf8_lossy(&listed.stdout);
    let pieces: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON lines"))
        .filter(|value| value["type"] == "stream")
        .collect();
    let text: String = pieces
        .iter()
        .filter(|p| p["kind"] == "text")
        .map(|p| p["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(text, story());
    assert_eq!(pieces[0]["node"], "tell");
    assert_eq!(pieces[0]["attempt"], 1);
    assert_eq!(pieces.last().map(|p| p["kind"].clone()), Some(json!("end")));
    // The run's events are there too.
    assert!(stdout.contains("\"type\":\"run_finished\""), "{stdout}");
    Ok(())
}

#[tokio::test]
async fn server_sent_events_carry_the_stream_with_offsets_as_ids() -> anyhow::Result<()> {
    let llm = slow_story(Duration::from_millis(100)).await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let run_id = submit(&client).await?;
    let base = cluster
        .metrics_url()
        .trim_end_matches("/metrics")
        .to_owned();
    let http = reqwest::Client::new();
    // From the start: every piece, its offset as its id, to the stream's end.
    let response = http
        .get(format!("{base}/api/v1/runs/{run_id}/stream"))
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(60), response.text()).await??;
    let pieces: Vec<(u64, Value)> = body
        .split("\n\n")
        .filter_map(|block| {
            let id = block.lines().find_map(|l| l.strip_prefix("id: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((id.parse().ok()?, serde_json::from_str(data).ok()?))
        })
        .collect();
    let ids: Vec<u64> = pieces.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (0..pieces.len() as u64).collect::<Vec<_>>());
    let text: String = pieces
        .iter()
        .filter(|(_, p)| p["kind"] == "text")
        .map(|(_, p)| p["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(text, story());
    assert_eq!(pieces[0].1["node"], "tell");
    // A browser that reconnects sends the last id it saw: it gets the rest.
    let resumed = http
        .get(format!("{base}/api/v1/runs/{run_id}/stream"))
        .header("Last-Event-ID", "2")
        .send()
        .await?
        .text()
        .await?;
    assert!(resumed.contains("id: 3\n"), "{resumed}");
    assert!(!resumed.contains("id: 2\n"), "{resumed}");
    // An unknown run is a 404.
    let unknown = http
        .get(format!("{base}/api/v1/runs/run-nope/stream"))
        .send()
        .await?;
    assert_eq!(unknown.status(), 404);
    Ok(())
}

#[tokio::test]
async fn an_agents_tool_calls_and_results_come_in_its_stream_in_order() -> anyhow::Result<()> {
    // The first turn calls `lookup`; the second answers with its result.
    let llm = TestLlm::start(KEY, |request, _| {
        let tool_said = request["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
            .and_then(|m| m["content"].as_str())
            .map(str::to_owned);
        match tool_said {
            Some(result) => Reply::Text(format!("The table says {result}.")),
            None => Reply::ToolCalls(vec![("lookup".into(), json!({"key": "a"}))]),
        }
    })
    .await?;
    let cluster = cluster(&llm).await?;
    let client = cluster.client().await?;
    let graph = r#"
nodes:
  research: { kind: agent, start: true, end: true, prompt: "Look a up.", tools: [lookup], max_turns: 3 }
"#;
    let run = client
        .submit_bundle(GraphBundle::from_text("agent.yaml", graph), &json!({}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let all = read_all(&client, &run.run_id, 0).await?;
    let shape: Vec<(&str, &str)> = all
        .iter()
        .map(|p| (p.kind.as_str(), p.text.as_str()))
        .collect();
    let at = |kind: &str| shape.iter().position(|(k, _)| *k == kind);
    let (call, result, text) = (at("tool_call"), at("tool_result"), at("text"));
    assert_eq!(shape[call.expect("a tool call")], ("tool_call", "lookup"));
    assert_eq!(
        shape[result.expect("a tool result")],
        ("tool_result", "lookup: alpha")
    );
    assert!(call < result && result < text, "{shape:?}");
    assert_eq!(text_of(&all), "The table says alpha.");
    assert_eq!(shape.last(), Some(&("end", "")));
    Ok(())
}
