//! `subgraph` nodes across processes (SPEC 3, issue #10): the child runs
//! as a run of its own on the cluster's workers, linked to its parent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use weft_client::{GraphBundle, RunStatus};
use weft_tests::{TestCluster, binary, wait_for_event};

/// Writes `files` (name, text) to a fresh directory; returns it.
fn graphs(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-subgraphs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    dir
}

const PARENT: &str = r#"
state:
  topic: { type: string }
  notes: { type: string, default: "" }
nodes:
  research:
    kind: subgraph
    start: true
    graph: research.yaml
    input_map: { topic: subject }
    output_map: { findings: notes }
    next: after
  after: { kind: script, run: [sh, -c, 'echo "{\"after\": true}"'] }
"#;

const CHILD: &str = r#"
state:
  subject: { type: string }
  findings: { type: string, default: "" }
  scratch: { type: integer, default: 0 }
nodes:
  look: { kind: script, start: true, run: [python3, look.py] }
"#;

const LOOK: &str = r#"import json, sys
state = json.load(sys.stdin)["state"]
print(json.dumps({"findings": "on " + state["subject"], "scratch": 7}))
"#;

fn bundle(dir: &Path, graph: &str) -> GraphBundle {
    GraphBundle::from_file(&dir.join(graph)).expect("the graphs bundle")
}

/// A cluster with one worker, running `dir/parent.yaml` on a topic.
async fn submit_parent(
    dir: &Path,
) -> anyhow::Result<(TestCluster, weft_client::Client, weft_client::Submitted)> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let submitted = client
        .submit_bundle(bundle(dir, "parent.yaml"), &json!({"topic": "weft"}))
        .await?;
    Ok((cluster, client, submitted))
}

#[tokio::test]
async fn a_child_run_gets_mapped_input_and_returns_mapped_output() -> anyhow::Result<()> {
    let dir = graphs(
        "mapped",
        &[
            ("parent.yaml", PARENT),
            ("research.yaml", CHILD),
            ("look.py", LOOK),
        ],
    );
    let (_cluster, client, submitted) = submit_parent(&dir).await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["notes"], "on weft");
    assert_eq!(done.state["after"], true);
    assert!(
        done.state.get("scratch").is_none(),
        "child-only fields stay in the child"
    );
    // The child is a run of its own, linked by the parent's events.
    let started = weft_tests::events_of(&client, &submitted.run_id, "subgraph_started").await?;
    let child_id = started[0].body["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        done.children.len(),
        1,
        "the parent's status names its child"
    );
    assert_eq!(done.children[0].run_id, child_id);
    assert_eq!(done.children[0].node, "research");
    let child = client.get(&child_id).await?;
    assert_eq!(child.status, RunStatus::Completed);
    assert_eq!(child.state["subject"], "weft");
    assert_eq!(child.state["scratch"], 7);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test]
async fn a_failing_child_is_caught_by_the_parent_nodes_fallback() -> anyhow::Result<()> {
    let parent = PARENT.replace(
        "    next: after\n",
        "    next: after\n    fallback: rescue\n",
    ) + "  rescue: { kind: script, run: [sh, -c, 'echo \"{\\\"rescued\\\": true}\"'] }\n";
    let dir = graphs(
        "failing",
        &[
            ("parent.yaml", &parent),
            ("research.yaml", CHILD),
            ("look.py", "import sys\nsys.exit('no findings today')\n"),
        ],
    );
    let (_cluster, client, submitted) = submit_parent(&dir).await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["rescued"], true);
    assert!(done.state.get("after").is_none());
    let failed = weft_tests::events_of(&client, &submitted.run_id, "node_failed").await?;
    assert!(
        failed[0].body["error"]
            .as_str()
            .unwrap()
            .contains("subgraph_failed"),
        "{failed:?}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test]
async fn a_failed_child_is_retried_as_a_new_child_run() -> anyhow::Result<()> {
    let parent = PARENT.replace(
        "    next: after\n",
        "    next: after\n    retry: { max_attempts: 2, initial_interval: 0.1s }\n",
    );
    // The child fails the first time it runs (it leaves a mark), then
    // succeeds.
    let mark = std::env::temp_dir().join(format!("weft-retry-child-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let look = format!(
        "import json, os, sys\nmark = {mark:?}\nif not os.path.exists(mark):\n    open(mark, 'w').close()\n    sys.exit('first child fails')\n{LOOK}",
        mark = mark.display().to_string()
    );
    let dir = graphs(
        "retried",
        &[
            ("parent.yaml", &parent),
            ("research.yaml", CHILD),
            ("look.py", &look),
        ],
    );
    let (_cluster, client, submitted) = submit_parent(&dir).await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["notes"], "on weft");
    assert_eq!(done.children.len(), 2, "{:?}", done.children);
    let first = client.get(&done.children[0].run_id).await?;
    assert_eq!(first.status, RunStatus::Failed);
    let retried = weft_tests::events_of(&client, &submitted.run_id, "node_retrying").await?;
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].body["next_attempt"], 2);
    std::fs::remove_file(&mark).ok();
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test]
async fn cancelling_the_parent_cancels_its_child() -> anyhow::Result<()> {
    let child = CHILD.replace("run: [python3, look.py]", "run: [sh, -c, 'sleep 30']");
    let dir = graphs(
        "cancel",
        &[("parent.yaml", PARENT), ("research.yaml", &child)],
    );
    let (_cluster, client, submitted) = submit_parent(&dir).await?;
    let started = wait_for_event(&client, &submitted.run_id, "subgraph_started").await?;
    let child_id = started.body["run_id"].as_str().unwrap().to_owned();
    client.cancel(&submitted.run_id).await?;
    let child = tokio::time::timeout(Duration::from_secs(30), client.wait(&child_id)).await??;
    assert_eq!(child.status, RunStatus::Cancelled);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn a_graph_that_embeds_itself_is_refused_by_validation() {
    let dir = graphs(
        "recursion",
        &[
            (
                "a.yaml",
                "nodes:\n  x: { kind: subgraph, graph: b.yaml, start: true }\n",
            ),
            (
                "b.yaml",
                "nodes:\n  y: { kind: subgraph, graph: a.yaml, start: true }\n",
            ),
        ],
    );
    let out = std::process::Command::new(binary("weft"))
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
        .arg("validate")
        .arg(dir.join("a.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("subgraph recursion: a.yaml → b.yaml → a.yaml"),
        "{text}"
    );
    // The embedded cluster refuses to run it too.
    let out = std::process::Command::new(binary("weft"))
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
        .arg("run")
        .arg(dir.join("a.yaml"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("subgraph recursion"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn a_parent_and_its_running_child_survive_kill_9_of_the_coordinator() -> anyhow::Result<()> {
    let child = CHILD.replace(
        "  look: { kind: script, start: true, run: [python3, look.py] }",
        "  wait: { kind: script, start: true, run: [sh, -c, 'sleep 0.5; echo \"{}\"'], next: look }\n  look: { kind: script, run: [python3, look.py] }",
    );
    let dir = graphs(
        "restart",
        &[
            ("parent.yaml", PARENT),
            ("research.yaml", &child),
            ("look.py", LOOK),
        ],
    );
    let (mut cluster, client, submitted) = submit_parent(&dir).await?;
    // The child has started (stored, with `sync`), and runs its first step.
    let started = wait_for_event(&client, &submitted.run_id, "subgraph_started").await?;
    let child_id = started.body["run_id"].as_str().unwrap().to_owned();
    wait_for_event(&client, &child_id, "node_started").await?;
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let done =
        tokio::time::timeout(Duration::from_secs(60), client.wait(&submitted.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["notes"], "on weft");
    assert_eq!(done.children.len(), 1, "the same child, not a second one");
    assert_eq!(client.get(&child_id).await?.status, RunStatus::Completed);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

const ASKING_PARENT: &str = r#"
state:
  colour: { type: string, default: "" }
  ok: { type: boolean, default: false }
nodes:
  bar: { kind: subgraph, start: true, graph: asking.yaml, next: after }
  after: { kind: script, run: [sh, -c, 'echo "{\"after\": true}"'] }
"#;

const ASKING_CHILD: &str = r#"
state:
  colour: { type: string, default: "" }
  ok: { type: boolean, default: false }
nodes:
  ask: { kind: input, start: true, prompt: "Which colour?", output_key: colour, next: check }
  check: { kind: approval, prompt: "Paint it {{ colour }}?", output_key: ok, end: true }
"#;

/// `weft` against `cluster`, its stdin closed (no terminal to prompt on).
fn weft(cluster: &TestCluster, args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary("weft"))
        .env("WEFT_EPHEMERAL", "1")
        .env_remove("WEFT_TOKEN")
        .args(["--coordinator", cluster.url()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("weft runs")
}

#[tokio::test]
async fn a_parent_waits_for_the_people_its_child_waits_for_and_passes_their_answers()
-> anyhow::Result<()> {
    let dir = graphs(
        "people",
        &[
            ("parent.yaml", ASKING_PARENT),
            ("asking.yaml", ASKING_CHILD),
        ],
    );
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;

    // `weft run` ends with exit 3, the child's request listed by its path.
    let graph = dir.join("parent.yaml");
    let run = weft(&cluster, &["run", graph.to_str().unwrap(), "--json"]);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    let shown: serde_json::Value = serde_json::from_slice(&run.stdout)?;
    assert_eq!(shown["status"], "waiting", "{shown}");
    assert_eq!(shown["waiting"][0]["node"], "bar/ask", "{shown}");
    assert_eq!(shown["waiting"][0]["prompt"], "Which colour?", "{shown}");
    let parent = shown["run_id"].as_str().unwrap().to_owned();

    // Answered through the parent by the child's node name alone …
    let resumed = weft(&cluster, &["resume", &parent, "ask", "blue"]);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    // … then the child's next request, by its path.
    let info = client.wait(&parent).await?;
    assert_eq!(info.status, RunStatus::Waiting, "{:?}", info.error);
    let asked: Vec<(&str, &str)> = info
        .waiting
        .iter()
        .map(|w| (w.node.as_str(), w.prompt.as_str()))
        .collect();
    assert_eq!(asked, [("bar/check", "Paint it blue?")]);
    let resumed = weft(&cluster, &["resume", &parent, "bar/check", "approve"]);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let done = client.wait(&parent).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["colour"], "blue");
    assert_eq!(done.state["ok"], true);
    assert_eq!(done.state["after"], true);

    // The parent's log tells of each request and of its answer.
    let waits = weft_tests::events_of(&client, &parent, "waiting_for_input").await?;
    let asked: Vec<&serde_json::Value> = waits.iter().map(|e| &e.body["node"]).collect();
    assert_eq!(asked, ["bar/ask", "bar/check"]);
    let answered = weft_tests::events_of(&client, &parent, "input_received").await?;
    assert_eq!(answered.len(), 2, "{answered:?}");

    // The child recorded who answered; a wrong name is refused, naming
    // what waits (here nothing).
    let child = client.get(&done.children[0].run_id).await?;
    assert_eq!(child.status, RunStatus::Completed);
    let late = weft(&cluster, &["resume", &parent, "bar/check", "approve"]);
    assert_eq!(late.status.code(), Some(1));
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
