//! Teammate inboxes across processes (SPEC 5, issue #10): map items on
//! different workers message each other through the coordinator.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use weft_client::{GraphBundle, RunStatus};
use weft_tests::{TestCluster, repo};

/// `talk` greets every other member with `_send` and reports the worker
/// process it ran in; `listen` gathers its inbox, looping with `_next`
/// until both others were heard.
const CHATTER: &str = r#"
settings: { max_loop_iterations: 1000 }
state:
  names: { type: array, default: [] }
nodes:
  fan:
    kind: map
    start: true
    over: "{{ names }}"
    as: name
    branch: talk
    output_key: heard
    collect_into: all_heard
  talk: { kind: script, run: [python3, chatter.py, talk], teammates: true, next: listen }
  listen: { kind: script, run: [python3, chatter.py, listen], teammates: true, next: plain }
  plain: { kind: script, run: [python3, chatter.py, plain] }
"#;

const CHATTER_PY: &str = r#"import json, os, sys, time
step = sys.argv[1]
task = json.load(sys.stdin)
team, state = task["team"], task["state"]
if step == "talk":
    others = [m for m in team["members"] if m != team["me"]]
    print(json.dumps({"heard_so_far": [], "talk_worker": os.getcwd().split(os.sep)[-3],
                      "_send": [{"to": m, "content": {"hi": state["name"]}} for m in others]}))
elif step == "listen":
    heard = state["heard_so_far"] + [m["content"]["hi"] for m in task["inbox"]]
    if len(heard) < len(team["members"]) - 1:
        time.sleep(0.02)
        print(json.dumps({"heard_so_far": heard, "_next": "listen"}))
    else:
        print(json.dumps({"heard_so_far": sorted(heard)}))
else:
    print(json.dumps({"heard": {"names": state["heard_so_far"], "worker": state["talk_worker"],
                                "plain_team": team, "plain_inbox": task["inbox"]}}))
"#;

/// A map `fan` over `names`, one item at a time, whose branch is one
/// flagged script step running `step_py`; items write `got`.
fn one_at_a_time(step_py: &str) -> GraphBundle {
    let yaml = r#"
state:
  names: { type: array, default: [] }
nodes:
  fan:
    kind: map
    start: true
    over: "{{ names }}"
    as: name
    branch: step
    output_key: got
    collect_into: got_all
    max_concurrency: 1
  step: { kind: script, run: [python3, step.py], teammates: true }
"#;
    GraphBundle::from_text("one.yaml", yaml).with_file("step.py", step_py.as_bytes(), 0o644)
}

#[tokio::test]
async fn three_items_on_three_workers_each_hear_the_two_others() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    for name in ["w1", "w2", "w3"] {
        cluster.add_worker(name, 1)?;
    }
    cluster.wait_for_workers(&["w1", "w2", "w3"]).await?;
    let client = cluster.client().await?;
    let bundle = GraphBundle::from_text("chatter.yaml", CHATTER).with_file(
        "chatter.py",
        CHATTER_PY.as_bytes(),
        0o644,
    );
    let run = client
        .submit_bundle(bundle, &json!({"names": ["ann", "bob", "cy"]}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let heard = done.state["all_heard"].as_array().unwrap();
    let names: Vec<&Value> = heard.iter().map(|h| &h["names"]).collect();
    assert_eq!(
        names,
        [
            &json!(["bob", "cy"]),
            &json!(["ann", "cy"]),
            &json!(["ann", "bob"])
        ]
    );
    // The three `talk` steps ran at once on three one-slot workers.
    // A script's scratch directory is in its worker's work directory.
    let workers: BTreeSet<&str> = heard
        .iter()
        .map(|h| h["worker"].as_str().unwrap())
        .collect();
    assert_eq!(workers.len(), 3, "{heard:?}");
    // An unflagged step sees no team and an empty inbox.
    for item in heard {
        assert_eq!(item["plain_team"], Value::Null);
        assert_eq!(item["plain_inbox"], json!([]));
    }
    let sent = weft_tests::events_of(&client, &run.run_id, "message_sent").await?;
    assert_eq!(sent.len(), 6);
    assert_eq!(sent[0].body["node"], "fan");
    let metrics = cluster.metrics()?;
    assert!(
        metrics.contains("weft_inbox_messages_total 6"),
        "the metric counts the messages:\n{metrics}"
    );
    Ok(())
}

#[tokio::test]
async fn rust_handlers_send_and_receive_through_their_context() -> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["a", "b", "c"], 1).await?;
    let client = cluster.client().await?;
    let yaml = r#"
state:
  items: { type: array, default: [] }
nodes:
  team:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: converse
    output_key: said
    collect_into: all_said
  converse:
    kind: task
    handler: converse
    teammates: true
    state_updates: { said: "{{ output }}" }
"#;
    let run = client
        .submit_bundle(
            GraphBundle::from_text("converse.yaml", yaml),
            &json!({"items": [1, 2, 3]}),
        )
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let said = done.state["all_said"].as_array().unwrap();
    assert_eq!(said[0]["me"], "team/0");
    assert_eq!(said[0]["heard"], json!(["team/1", "team/2"]));
    assert_eq!(said[2]["heard"], json!(["team/0", "team/1"]));
    // Each item waited for the others while holding its worker's only
    // slot: the three ran on three workers at once.
    let workers: BTreeSet<&str> = said.iter().map(|s| s["worker"].as_str().unwrap()).collect();
    assert_eq!(workers.len(), 3, "{said:?}");
    assert_eq!(
        said[1]["stranger"],
        "'nobody/0' is not a member of this team (members: team/0, team/1, team/2)"
    );
    Ok(())
}

#[tokio::test]
async fn a_message_to_a_handler_waiting_for_a_worker_slot_reaches_it() -> anyhow::Result<()> {
    // One slot in the cluster: item 1's step waits in the dispatcher's
    // queue while item 0 sends to it, and finds the message on starting.
    let cluster = TestCluster::with_test_workers(&["a"], 1).await?;
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
    branch: relay
    output_key: got
    collect_into: all_got
  relay: { kind: task, handler: relay, teammates: true }
"#;
    let run = client
        .submit_bundle(
            GraphBundle::from_text("relay.yaml", yaml),
            &json!({"items": [0, 1]}),
        )
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["all_got"], json!([null, "passed on"]));
    Ok(())
}

#[tokio::test]
async fn a_message_to_an_item_that_has_not_started_waits_in_its_inbox() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let mut cluster = cluster;
    cluster.add_worker("w1", 2)?;
    cluster.wait_for_workers(&["w1"]).await?;
    let client = cluster.client().await?;
    let step = r#"import json, sys
task = json.load(sys.stdin)
sends = [{"to": "fan/1", "content": "early"}, {"to": "fan/2", "content": "early"}]
print(json.dumps({"got": task["inbox"], "_send": sends if task["team"]["me"] == "fan/0" else []}))
"#;
    let bundle = one_at_a_time(step);
    let run = client
        .submit_bundle(bundle, &json!({"names": [0, 1, 2]}))
        .await?;
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let early = json!([{"from": "fan/0", "content": "early"}]);
    assert_eq!(done.state["got_all"], json!([[], early, early]));
    Ok(())
}

#[tokio::test]
async fn the_team_review_example_runs() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w1", 2)?;
    cluster.add_worker("w2", 2)?;
    cluster.wait_for_workers(&["w1", "w2"]).await?;
    let client = cluster.client().await?;
    let files = json!({"files": ["src/main.rs", "src/lib.rs", "README.md"]});
    let run = client
        .submit_file(&repo().join("examples/team-review.yaml"), &files)
        .await?;
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let reviews = done.state["reviews"].as_array().unwrap();
    assert_eq!(reviews.len(), 3);
    assert_eq!(
        reviews[2]["heard"],
        json!([
            "src/lib.rs: code, reviewed by review_each_file/1",
            "src/main.rs: code, reviewed by review_each_file/0"
        ])
    );
    Ok(())
}

#[tokio::test]
async fn an_inbox_survives_kill_9_of_the_coordinator() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w1", 2)?;
    cluster.wait_for_workers(&["w1"]).await?;
    let client = cluster.client().await?;
    // One item at a time: item 0 writes to item 1 and finishes (a
    // checkpoint), then item 1 starts and dawdles while the coordinator is
    // killed; after the restart its step runs again with the message.
    let step = r#"import json, sys, time
task = json.load(sys.stdin)
if task["team"]["me"] == "fan/0":
    print(json.dumps({"got": [], "_send": [{"to": "fan/1", "content": "before the crash"}]}))
else:
    time.sleep(1.0)
    print(json.dumps({"got": [m["content"] for m in task["inbox"]]}))
"#;
    let bundle = one_at_a_time(step);
    let run = client
        .submit_bundle(bundle, &json!({"names": [0, 1]}))
        .await?;
    weft_tests::until_event(&client, &run.run_id, "item 1 started", |event| {
        event.kind == "node_started" && event.body["item"] == 1
    })
    .await?;
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let done = tokio::time::timeout(std::time::Duration::from_secs(60), client.wait(&run.run_id))
        .await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["got_all"], json!([[], ["before the crash"]]));
    Ok(())
}
