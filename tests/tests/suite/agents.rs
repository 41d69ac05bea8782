//! `agent` nodes (SPEC 4, issue #11) on `test-worker` processes against
//! the local OpenAI-compatible test server: a tool loop over a bundled
//! script tool and a worker-registered tool, arguments checked before a
//! tool runs, `max_turns`, and teammate tools between map items on two
//! workers.

use std::time::Duration;

use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_tests::TestCluster;
use weft_tests::llm_server::{Reply, TestLlm, last_message};

const KEY: &str = "sk-agent-test";

async fn cluster(llm: &TestLlm, workers: &[&str]) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    for name in workers {
        cluster.add_llm_test_worker(name, 1, &llm.url, KEY)?;
    }
    cluster.wait_for_workers(workers).await?;
    Ok(cluster)
}

async fn run(client: &Client, bundle: GraphBundle, input: Value) -> anyhow::Result<RunInfo> {
    let run = client.submit_bundle(bundle, &input).await?;
    Ok(client.wait(&run.run_id).await?)
}

const RESEARCH: &str = r#"
tools:
  search:
    description: Search the notes for a phrase.
    parameters:
      type: object
      properties: { query: { type: string } }
      required: [query]
    run: [python3, search.py]
state:
  topic: { type: string }
  answer: { type: string, default: "" }
nodes:
  research:
    kind: agent
    start: true
    instructions: "Use the tools, then answer."
    prompt: "What do the notes say about {{ topic }}?"
    tools: [search, lookup]
    max_turns: 4
    state_updates: { answer: "{{ output }}" }
"#;

/// The script tool: reads its arguments on stdin and the run's state from
/// its file, answers on stdout.
const SEARCH: &str = r#"import json, os, sys
arguments = json.load(sys.stdin)
state = json.load(open(os.environ["GRAPH_STATE"]))
print(json.dumps({"hits": ["notes on " + arguments["query"] + " for " + state["topic"]]}))
"#;

fn research() -> GraphBundle {
    GraphBundle::from_text("research.yaml", RESEARCH).with_file(
        "search.py",
        SEARCH.as_bytes(),
        0o644,
    )
}

/// The names of the tools a request offers the model.
fn offered(request: &Value) -> Vec<&str> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

/// The tool messages of a request, in order.
fn tool_results(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn an_agent_calls_a_script_tool_and_a_registered_tool_then_answers() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, n| match n {
        0 => Reply::ToolCalls(vec![
            ("search".into(), json!({"query": "weft"})),
            ("lookup".into(), json!({"key": "a"})),
        ]),
        _ => Reply::Text(format!("found: {}", tool_results(request).join(" | "))),
    })
    .await?;
    let cluster = cluster(&llm, &["a"]).await?;
    let client = cluster.client().await?;
    let done = run(&client, research(), json!({"topic": "Weft"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // The script tool read the state (an agent with one gets it).
    assert_eq!(
        done.state["answer"],
        r#"found: {"hits": ["notes on weft for Weft"]} | alpha"#
    );
    let first = &llm.requests()[0];
    assert_eq!(
        first["messages"][0]["content"],
        "Use the tools, then answer."
    );
    assert_eq!(
        first["messages"][1]["content"],
        "What do the notes say about Weft?"
    );
    let offered = offered(first);
    assert_eq!(offered, ["search", "lookup"]);
    assert_eq!(
        first["tools"][1]["function"]["description"], "Look a key up in the reference table.",
        "a registered tool's own description"
    );
    let calls = weft_tests::events_of(&client, &done.run_id, "tool_called").await?;
    let tools: Vec<&str> = calls
        .iter()
        .map(|c| c.body["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["search", "lookup"]);
    assert_eq!(
        weft_tests::events_of(&client, &done.run_id, "model_called")
            .await?
            .len(),
        2
    );
    Ok(())
}

#[tokio::test]
async fn bad_arguments_and_failing_tools_go_back_to_the_model() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, n| match n {
        0 => Reply::ToolCalls(vec![
            ("search".into(), json!({"q": "wrong key"})),
            ("lookup".into(), json!({"key": "zzz"})),
            ("nosuch".into(), json!({})),
        ]),
        _ => Reply::Text(tool_results(request).join("\n")),
    })
    .await?;
    let cluster = cluster(&llm, &["a"]).await?;
    let client = cluster.client().await?;
    let done = run(&client, research(), json!({"topic": "x"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let told: Vec<&str> = done.state["answer"].as_str().unwrap().lines().collect();
    assert!(told[0].starts_with("error: invalid arguments"), "{told:?}");
    assert!(told[0].contains("query"), "{told:?}");
    assert_eq!(told[1], r#"error: no entry for Some("zzz")"#);
    assert_eq!(told[2], "error: there is no tool 'nosuch'");
    let calls = weft_tests::events_of(&client, &done.run_id, "tool_called").await?;
    assert!(
        calls.iter().all(|c| c.body["error"].is_string()),
        "{calls:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_agent_that_never_answers_fails_after_max_turns() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |_, _| {
        Reply::ToolCalls(vec![("lookup".into(), json!({"key": "a"}))])
    })
    .await?;
    let cluster = cluster(&llm, &["a"]).await?;
    let client = cluster.client().await?;
    let done = run(&client, research(), json!({"topic": "x"})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.unwrap();
    assert!(
        error.message.contains("used its 4 turns"),
        "{}",
        error.message
    );
    assert_eq!(llm.requests().len(), 4);
    Ok(())
}

/// Each agent greets the other, then reads until it has heard back.
fn teammate(request: &Value) -> Reply {
    let system = request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    let me = if system.contains("You are pair/0") {
        "pair/0"
    } else {
        "pair/1"
    };
    let other = if me == "pair/0" { "pair/1" } else { "pair/0" };
    let last = last_message(request);
    let has_tools = request["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    if !has_tools {
        return Reply::ToolCalls(vec![(
            "send_message".into(),
            json!({"to": other, "content": format!("hi from {me}")}),
        )]);
    }
    match serde_json::from_str::<Value>(&last) {
        Ok(Value::Array(heard)) if !heard.is_empty() => Reply::Text(format!(
            "{me} heard: {}",
            heard[0]["content"].as_str().unwrap_or("?")
        )),
        // Delivered, or nothing yet: look again shortly.
        _ => Reply::Slow(
            Duration::from_millis(100),
            Box::new(Reply::ToolCalls(vec![("read_messages".into(), json!({}))])),
        ),
    }
}

#[tokio::test]
async fn agents_in_a_map_talk_through_their_teammate_tools() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, _| teammate(request)).await?;
    let cluster = cluster(&llm, &["a", "b"]).await?;
    let client = cluster.client().await?;
    let yaml = r#"
state:
  items: { type: array, default: [] }
nodes:
  pair:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: talk
    output_key: said
    collect_into: all_said
  talk:
    kind: agent
    teammates: true
    prompt: "Greet your teammate, then report what it said."
    max_turns: 200
    state_updates: { said: "{{ output }}" }
"#;
    let done = run(
        &client,
        GraphBundle::from_text("pair.yaml", yaml),
        json!({"items": [0, 1]}),
    )
    .await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["all_said"],
        json!([
            "pair/0 heard: hi from pair/1",
            "pair/1 heard: hi from pair/0"
        ])
    );
    let first = &llm.requests()[0];
    let offered = offered(first);
    assert_eq!(offered, ["send_message", "read_messages"]);
    let sent = weft_tests::events_of(&client, &done.run_id, "message_sent").await?;
    assert_eq!(sent.len(), 2);
    Ok(())
}

/// An agent whose one tool is registered by some worker, not declared.
const ASK: &str = r#"
state:
  answer: { type: string, default: "" }
nodes:
  ask:
    kind: agent
    start: true
    prompt: "Look things up."
    tools: [lookup]
    max_turns: 3
    state_updates: { answer: "{{ output }}" }
"#;

#[tokio::test]
async fn an_agent_calls_a_tool_that_another_worker_hosts() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, n| match n {
        0 => Reply::ToolCalls(vec![
            ("lookup".into(), json!({"key": "a"})),
            ("lookup".into(), json!({"key": "ctx"})),
            ("lookup".into(), json!({"key": "zzz"})),
            ("lookup".into(), json!({"nokey": 1})),
        ]),
        _ => Reply::Text(tool_results(request).join(" | ")),
    })
    .await?;
    let mut cluster = TestCluster::start()?;
    // The model's worker registers no tool; the tool's worker has no model.
    cluster.add_llm_test_worker_hosting("brain", 1, &llm.url, KEY, Some("none"))?;
    cluster.add_test_worker("hands", 1, Some("lookup"))?;
    cluster.wait_for_workers(&["brain", "hands"]).await?;
    let client = cluster.client().await?;
    let done = run(&client, GraphBundle::from_text("ask.yaml", ASK), json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let answer = done.state["answer"].as_str().unwrap_or_default();
    let results: Vec<&str> = answer.split(" | ").collect();
    assert_eq!(results.len(), 4, "{answer}");
    assert_eq!(results[0], "alpha");
    let context: Value = serde_json::from_str(results[1])?;
    assert_eq!(context["node"], "ask");
    assert_eq!(context["attempt"], 1);
    assert_eq!(context["task_key"], format!("{}/ask/-/1", done.run_id));
    assert_eq!(results[2], r#"error: no entry for Some("zzz")"#);
    // Checked on the agent's side, against the schema the tool's worker
    // announced, before any call goes out.
    assert!(
        results[3].starts_with("error: invalid arguments at ''"),
        "{}",
        results[3]
    );
    let offered = &llm.requests()[0]["tools"][0]["function"];
    assert_eq!(offered["name"], "lookup");
    assert_eq!(
        offered["description"],
        "Look a key up in the reference table."
    );
    assert_eq!(offered["parameters"]["required"], json!(["key"]));
    let finished = weft_tests::events_of(&client, &done.run_id, "node_finished").await?;
    assert_eq!(finished[0].body["worker"], "brain");
    let calls = weft_tests::events_of(&client, &done.run_id, "tool_called").await?;
    let errors: Vec<bool> = calls.iter().map(|c| !c.body["error"].is_null()).collect();
    assert_eq!(errors, [false, false, true, true]);
    // An agent without script tools reads no state on its worker: none
    // crossed.
    let metrics = cluster.metrics()?;
    assert!(
        metrics
            .lines()
            .any(|l| l == "weft_state_bytes_sent_total 0"),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test]
async fn an_agent_waits_for_a_worker_that_hosts_its_tool() -> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, n| match n {
        0 => Reply::ToolCalls(vec![("lookup".into(), json!({"key": "b"}))]),
        _ => Reply::Text(tool_results(request).join(" | ")),
    })
    .await?;
    let mut cluster = TestCluster::start()?;
    cluster.add_llm_test_worker_hosting("brain", 1, &llm.url, KEY, Some("none"))?;
    cluster.wait_for_workers(&["brain"]).await?;
    let client = cluster.client().await?;
    let bundle = GraphBundle::from_text("ask.yaml", ASK);
    let submitted = client.submit_bundle(bundle, &json!({})).await?;
    let unhosted = weft_tests::wait_for_event(&client, &submitted.run_id, "task_unhosted").await?;
    assert!(
        unhosted.body["needs"]
            .as_str()
            .is_some_and(|needs| needs.contains("lookup")),
        "{}",
        unhosted.body
    );
    assert!(
        llm.requests().is_empty(),
        "the agent started without its tool"
    );
    cluster.add_test_worker("hands", 1, Some("lookup"))?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["answer"], "beta");
    Ok(())
}

/// Named agents (SPEC 2): one defined under `agents:`, one in
/// `agents/NAME.md` beside the graph (front matter and instructions),
/// each used by `agent: NAME` with the node's own fields winning; the
/// file travels in the bundle the client makes from the graph's directory.
#[tokio::test]
async fn named_agents_from_the_graph_and_from_agents_files_run_with_their_definitions()
-> anyhow::Result<()> {
    let llm = TestLlm::start(KEY, |request, _| {
        let system = request["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        Reply::Text(format!("as told: {system}"))
    })
    .await?;
    let dir = std::env::temp_dir().join(format!("weft-named-agents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("agents"))?;
    std::fs::write(
        dir.join("agents/file-reviewer.md"),
        "---\nname: file-reviewer\ndescription: reviews one file\nmax_turns: 2\n---\n\nReview strictly; cite lines.\n",
    )?;
    std::fs::write(
        dir.join("team.yaml"),
        r#"
agents:
  researcher:
    instructions: "Research carefully."
    max_turns: 3
state:
  notes: { type: string, default: "" }
  review: { type: string, default: "" }
nodes:
  research:
    kind: agent
    start: true
    agent: researcher
    prompt: "Find notes on {{ topic }}."
    state_updates: { notes: "{{ output }}" }
    next: review
  review:
    kind: agent
    agent: file-reviewer
    prompt: "Review the notes: {{ notes }}"
    state_updates: { review: "{{ output }}" }
  override:
    kind: agent
    start: true
    agent: researcher
    instructions: "The node's own instructions."
    prompt: "Go."
"#,
    )?;
    let bundle = GraphBundle::from_file(&dir.join("team.yaml"))?;
    let cluster = cluster(&llm, &["a"]).await?;
    let client = cluster.client().await?;
    let done = run(&client, bundle, json!({"topic": "weft"})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["notes"], "as told: Research carefully.");
    assert_eq!(
        done.state["review"],
        "as told: Review strictly; cite lines."
    );
    let systems: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| {
            r["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(
        systems.iter().any(|s| s == "The node's own instructions."),
        "{systems:?}"
    );
    assert!(!systems.iter().any(|s| s.contains("---")), "{systems:?}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
