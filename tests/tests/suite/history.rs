//! A run's history and its forks (SPEC 20, issue #41) through real
//! processes: every wave's state read back from the store after the run
//! has moved on, exact field by field, across a coordinator's restart;
//! `weft state RUN --at STEP`; a fork after a wave with a field replaced,
//! checked against a fresh run given the same state; a fork of a run
//! waiting for a person, and after a map's wave; forks at points within a
//! wave — a map mid-way (its finished items kept), a loop after an
//! iteration — and of a subgraph's child run (its parent forked with it);
//! `weft fork`; a place not kept, an undeclared field and a value of the
//! wrong type refused naming them.

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use weft_client::{ClientError, GraphBundle, RunStatus};
use weft_tests::{TestCluster, binary};

/// A script step that writes `notes` one note of 2 KB longer (a list
/// that grows a little each wave) and sets `n` to the wave it runs in
/// (its argument).
const ADD: &str = r#"import json, sys
n, repeat = int(sys.argv[1]), int(sys.argv[2])
print(json.dumps({"notes": [("note %d " % k) * repeat for k in range(1, n + 1)], "n": n}))
"#;

/// How many times a note repeats its words: about 2 KB.
const SMALL: usize = 256;

/// The note wave `n` adds, its words repeated `repeat` times.
fn note(n: usize, repeat: usize) -> String {
    format!("note {n} ").repeat(repeat)
}

const WAVES: usize = 5;

/// `weft ARGS` against `cluster`, run on a blocking thread (the test's
/// own runtime keeps serving meanwhile).
async fn weft(cluster: &TestCluster, args: &[&str]) -> anyhow::Result<Output> {
    let mut command = Command::new(binary("weft"));
    command
        .env("WEFT_EPHEMERAL", "1")
        .env_remove("WEFT_COORDINATOR")
        .args(["--coordinator", cluster.url()])
        .args(args)
        .stdin(Stdio::null());
    Ok(tokio::task::spawn_blocking(move || command.output()).await??)
}

fn graph() -> GraphBundle {
    graph_of(SMALL)
}

/// The notes graph whose notes repeat their words `repeat` times.
fn graph_of(repeat: usize) -> GraphBundle {
    let mut yaml = String::from(
        "name: notes\nstate:\n  notes: { type: array, default: [] }\n  n: { type: integer, default: 0 }\n  topic: { type: string }\nnodes:\n",
    );
    for i in 1..=WAVES {
        let start = if i == 1 { ", start: true" } else { "" };
        let next = if i < WAVES {
            format!(", next: add{}", i + 1)
        } else {
            String::new()
        };
        yaml.push_str(&format!(
            "  add{i}: {{ kind: script, run: [python3, add.py, \"{i}\", \"{repeat}\"]{start}{next} }}\n"
        ));
    }
    GraphBundle::from_text("notes.yaml", &yaml).with_file("add.py", ADD.as_bytes(), 0o644)
}

/// The state after wave `step`, as the run must have had it.
fn expected(step: usize) -> Value {
    expected_of(step, SMALL)
}

/// The state after wave `step` of `graph_of(repeat)`.
fn expected_of(step: usize, repeat: usize) -> Value {
    let notes: Vec<String> = (1..=step).map(|n| note(n, repeat)).collect();
    json!({"notes": notes, "n": step, "topic": "tides"})
}

#[tokio::test]
async fn every_waves_state_is_read_back_exactly_after_the_run_and_a_restart() -> anyhow::Result<()>
{
    let mut cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_bundle(graph(), &json!({"topic": "tides"}))
        .await?;
    let run_id = run.run_id.to_string();
    let done = client.wait(&run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state, expected(WAVES));

    let history = client.history(&run_id, None).await?;
    let steps: Vec<u32> = history.waves.iter().map(|w| w.step).collect();
    assert_eq!(steps, (0..=WAVES as u32).collect::<Vec<_>>());
    assert_eq!(history.step, WAVES as u32, "the last wave by default");
    assert_eq!(history.state, expected(WAVES));
    assert_eq!(history.waves[0].status, "running");
    assert_eq!(history.waves[WAVES].status, "completed");
    // Each wave names what it changed: the input all, each wave its two.
    assert_eq!(history.waves[2].changed, ["n", "notes"]);
    // The `state_changed` events agree with the history where they show
    // a value (a note list is too large to be shown whole).
    let changes = weft_tests::events_of(&client, &run_id, "state_changed").await?;
    for change in &changes {
        let step = change.body["step"].as_u64().unwrap_or_default() as u32;
        let at = client.history(&run_id, Some(step.into())).await?;
        if let Some(n) = change.body["values"].get("n") {
            assert_eq!(&at.state["n"], n, "wave {step}");
        }
    }
    for step in 0..=WAVES {
        let at = client.history(&run_id, Some((step as u32).into())).await?;
        assert_eq!(at.step, step as u32);
        assert_eq!(at.state, expected(step), "wave {step}");
    }

    // The same over HTTP, for the viewer.
    let base = cluster
        .metrics_url()
        .trim_end_matches("/metrics")
        .to_owned();
    let http: Value = reqwest::get(format!("{base}/api/v1/runs/{run_id}/history?at=3"))
        .await?
        .json()
        .await?;
    assert_eq!(http["step"], 3);
    assert_eq!(http["state"], expected(3));
    assert_eq!(http["waves"][3]["changed"], json!(["n", "notes"]));
    let refused = reqwest::get(format!("{base}/api/v1/runs/{run_id}/history?at=8")).await?;
    assert_eq!(refused.status(), 400);
    assert!(refused.text().await?.contains("no wave 8"));

    // The history is the store's: read back after a restart.
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    for step in [0, 2, WAVES] {
        let at = client.history(&run_id, Some((step as u32).into())).await?;
        assert_eq!(at.state, expected(step), "wave {step} after a restart");
    }
    // A wave it does not keep is refused, naming it and those kept.
    match client.history(&run_id, Some(9.into())).await {
        Err(ClientError::Invalid(message)) => {
            assert!(message.contains("no wave 9"), "{message}");
            assert!(message.contains("0, 1, 2, 3, 4, 5"), "{message}");
        }
        other => panic!("a wave not kept: {other:?}"),
    }
    Ok(())
}

/// A wave whose history entry is too large to go in its checkpoint's
/// transaction (each note here is about 90 KB) has it written right after:
/// every wave is still kept, exact, and the last is there as soon as the
/// run is seen to end.
#[tokio::test]
async fn waves_too_large_to_share_their_checkpoints_write_are_kept_too() -> anyhow::Result<()> {
    const LARGE: usize = 10_000;
    let mut cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_bundle(graph_of(LARGE), &json!({"topic": "tides"}))
        .await?;
    let run_id = run.run_id.to_string();
    let done = client.wait(&run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let last = client.history(&run_id, None).await?;
    assert_eq!(
        last.step, WAVES as u32,
        "the last wave, read as the run ends"
    );
    assert_eq!(last.state, expected_of(WAVES, LARGE));
    for step in 0..=WAVES {
        let at = client.history(&run_id, Some((step as u32).into())).await?;
        assert_eq!(at.state, expected_of(step, LARGE), "wave {step}");
    }
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    for step in 0..=WAVES {
        let at = client.history(&run_id, Some((step as u32).into())).await?;
        assert_eq!(
            at.state,
            expected_of(step, LARGE),
            "wave {step} after a restart"
        );
    }
    Ok(())
}

#[tokio::test]
async fn weft_state_prints_a_waves_state() -> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    let run = client
        .submit_bundle(graph(), &json!({"topic": "tides"}))
        .await?;
    let run_id = run.run_id.to_string();
    client.wait(&run_id).await?;
    let out = weft(&cluster, &["state", &run_id, "--at", "2", "--json"]).await?;
    assert!(out.status.success(), "{out:?}");
    let shown: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(shown["step"], 2);
    assert_eq!(shown["state"], expected(2));
    assert_eq!(shown["waves"].as_array().map(Vec::len), Some(WAVES + 1));
    // Without --json: a line on stderr, the state on stdout.
    let out = weft(&cluster, &["state", &run_id, "--at", "0"]).await?;
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("at its input (before any wave)"), "{said}");
    let state: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(state, expected(0));
    // A wave not kept: a clear error and a non-zero status.
    let out = weft(&cluster, &["state", &run_id, "--at", "42"]).await?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no wave 42"), "{said}");
    Ok(())
}

/// A script step that appends `TOPICi;` to `log` from the state it
/// reads (so its write depends on the state it is given), `i` its
/// argument.
const STEP: &str = r#"import json, sys
state = json.load(sys.stdin)["state"]
print(json.dumps({"log": state["log"] + "%s%s;" % (state["topic"], sys.argv[1])}))
"#;

/// A chain of [`STEP`]s numbered `from` to `to`, as YAML.
fn log_chain_yaml(from: usize, to: usize) -> String {
    let mut yaml = String::from(
        "name: log\nsettings: { strict_state: true }\nstate:\n  log: { type: string, default: \"\" }\n  topic: { type: string, default: \"tides\" }\nnodes:\n",
    );
    for i in from..=to {
        let start = if i == from { ", start: true" } else { "" };
        let next = if i < to {
            format!(", next: step{}", i + 1)
        } else {
            String::new()
        };
        yaml.push_str(&format!(
            "  step{i}: {{ kind: script, run: [python3, step.py, \"{i}\"]{start}{next} }}\n"
        ));
    }
    yaml
}

/// A chain of [`STEP`]s numbered `from` to `to`.
fn log_chain(from: usize, to: usize) -> GraphBundle {
    GraphBundle::from_text("log.yaml", &log_chain_yaml(from, to)).with_file(
        "step.py",
        STEP.as_bytes(),
        0o644,
    )
}

#[tokio::test]
async fn a_fork_goes_on_from_its_wave_with_a_field_replaced_as_a_fresh_run_of_that_state_would()
-> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    let original = client.submit_bundle(log_chain(1, 5), &json!({})).await?;
    let original = original.run_id.to_string();
    let done = client.wait(&original).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["log"], "tides1;tides2;tides3;tides4;tides5;");

    // Forked after wave 2, its topic changed.
    let set = json!({"topic": "seas"});
    let forked = client
        .fork(&original, Some(2.into()), set.as_object().unwrap())
        .await?;
    let fork_id = forked.run_id.to_string();
    let fork = client.wait(&fork_id).await?;
    assert_eq!(fork.status, RunStatus::Completed, "{:?}", fork.error);
    let from = fork.forked_from.clone().expect("the fork names its origin");
    assert_eq!((from.run.to_string(), from.step), (original.clone(), 2));
    // A fresh run of the rest of the graph given the same state ends as
    // the fork did, field by field.
    let after_two = client.history(&original, Some(2.into())).await?.state;
    let mut given = after_two.as_object().cloned().unwrap_or_default();
    given.insert("topic".into(), json!("seas"));
    let fresh = client
        .submit_bundle(log_chain(3, 5), &Value::Object(given))
        .await?;
    let fresh = client.wait(&fresh.run_id).await?;
    assert_eq!(fresh.status, RunStatus::Completed, "{:?}", fresh.error);
    let fields = fork.state.as_object().unwrap();
    assert_eq!(fields.len(), fresh.state.as_object().unwrap().len());
    for (field, value) in fields {
        assert_eq!(value, &fresh.state[field], "field {field}");
    }
    assert_eq!(fork.state["log"], "tides1;tides2;seas3;seas4;seas5;");
    // Its first event says where it came from; the original is untouched.
    let submitted = weft_tests::events_of(&client, &fork_id, "run_submitted").await?;
    assert_eq!(submitted[0].body["forked_from"]["run"], original.as_str());
    assert_eq!(submitted[0].body["forked_from"]["step"], 2);
    // Its first wave is the one the original had begun, told as started.
    let started = weft_tests::events_of(&client, &fork_id, "wave_started").await?;
    let steps: Vec<&Value> = started.iter().map(|e| &e.body["step"]).collect();
    assert_eq!(steps, [&json!(3), &json!(4), &json!(5)]);
    let redispatched = weft_tests::events_of(&client, &fork_id, "task_redispatched").await?;
    assert!(redispatched.is_empty(), "{redispatched:?}");
    let again = client.get(&original).await?;
    assert_eq!(again.state, done.state);
    assert_eq!(client.history(&original, None).await?.step, 5);
    // The fork's history goes on from the wave it was forked after.
    let waves: Vec<u32> = client
        .history(&fork_id, None)
        .await?
        .waves
        .iter()
        .map(|w| w.step)
        .collect();
    assert_eq!(waves, [2, 3, 4, 5]);

    // Refused, naming what is wrong: a wave not kept, an undeclared field
    // under strict_state, a value of the wrong type.
    let refusal = |result: Result<weft_client::Submitted, ClientError>| match result {
        Err(ClientError::Invalid(message)) => message,
        other => panic!("a fork that should be refused: {other:?}"),
    };
    let empty = serde_json::Map::new();
    let said = refusal(client.fork(&original, Some(7.into()), &empty).await);
    assert!(said.contains("no wave 7"), "{said}");
    let undeclared = json!({"topik": "seas"});
    let said = refusal(
        client
            .fork(&original, Some(1.into()), undeclared.as_object().unwrap())
            .await,
    );
    assert!(
        said.contains("'topik'") && said.contains("strict_state"),
        "{said}"
    );
    let wrong = json!({"topic": 3});
    let said = refusal(
        client
            .fork(&original, Some(1.into()), wrong.as_object().unwrap())
            .await,
    );
    assert!(
        said.contains("'topic'") && said.contains("string"),
        "{said}"
    );
    Ok(())
}

#[tokio::test]
async fn weft_fork_starts_a_fork_and_weft_status_names_its_origin() -> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    let original = client.submit_bundle(log_chain(1, 3), &json!({})).await?;
    let original = original.run_id.to_string();
    client.wait(&original).await?;
    let args = [
        "fork",
        &original,
        "--at",
        "1",
        "--set",
        "topic=seas",
        "--json",
    ];
    let out = weft(&cluster, &args).await?;
    assert!(out.status.success(), "{out:?}");
    let shown: Value = serde_json::from_slice(&out.stdout)?;
    let fork_id = shown["run_id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        shown["forked_from"],
        json!({"run": original, "step": 1, "point": 0, "at": "1"})
    );
    let fork = client.wait(&fork_id).await?;
    assert_eq!(fork.state["log"], "tides1;seas2;seas3;");
    let out = weft(&cluster, &["status", &fork_id]).await?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!("forked from run {original} after wave 1")),
        "{said}"
    );
    // A fork of the run's end (the last place, by default) ends at once,
    // as the original did, with its field replaced.
    let end = weft(
        &cluster,
        &["fork", &original, "--set", "topic=ends", "--json"],
    )
    .await?;
    assert!(end.status.success(), "{end:?}");
    let shown: Value = serde_json::from_slice(&end.stdout)?;
    let ended = client
        .wait(shown["run_id"].as_str().unwrap_or_default())
        .await?;
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    assert_eq!(ended.state["topic"], "ends");
    assert_eq!(ended.state["log"], "tides1;tides2;tides3;");
    assert_eq!(shown["forked_from"]["step"], 3);
    // A bad --set is refused before anything is sent.
    let out = weft(&cluster, &["fork", &original, "--set", "=1"]).await?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("FIELD=JSON"));
    Ok(())
}

#[tokio::test]
async fn a_fork_of_a_run_waiting_for_a_person_waits_too_and_a_map_wave_forks_with_its_items()
-> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;

    // Forked after the wave before an approval: the fork waits for its
    // own answer, and the original still waits for its.
    let approval = r#"
name: publish
state:
  draft: { type: string, default: "" }
  published: { type: string, default: "" }
nodes:
  write: { kind: script, start: true, run: [sh, -c, 'echo "{\"draft\": \"hello\"}"'], next: approve }
  approve: { kind: approval, prompt: "Publish {{ draft }}?", next: publish }
  publish: { kind: script, run: [python3, -c, "import json, sys; s = json.load(sys.stdin)['state']; print(json.dumps({'published': s['draft']}))"], end: true }
"#;
    let original = client
        .submit_bundle(GraphBundle::from_text("publish.yaml", approval), &json!({}))
        .await?
        .run_id
        .to_string();
    let waiting = client.wait(&original).await?;
    assert_eq!(waiting.status, RunStatus::Waiting);
    let set = json!({"draft": "edited"});
    let fork = client
        .fork(&original, Some(1.into()), set.as_object().unwrap())
        .await?
        .run_id
        .to_string();
    let fork_waits = client.wait(&fork).await?;
    assert_eq!(
        fork_waits.status,
        RunStatus::Waiting,
        "{:?}",
        fork_waits.error
    );
    assert_eq!(fork_waits.waiting[0].node, "approve");
    let answered = client
        .resume(&fork, "approve", &json!("approve"), None)
        .await?;
    assert_ne!(answered.status, RunStatus::Failed, "{:?}", answered.error);
    let published = client.wait(&fork).await?;
    assert_eq!(
        published.status,
        RunStatus::Completed,
        "{:?}",
        published.error
    );
    assert_eq!(published.state["published"], "edited");
    assert_eq!(client.status(&original).await?.status, RunStatus::Waiting);

    // Forked after a map's wave: its items' results are the fork's, and
    // the steps after it read them.
    let map = r#"
name: fan
state:
  items: { type: array, default: [1, 2, 3] }
  results: { type: array, default: [] }
  factor: { type: integer, default: 1 }
  total: { type: integer, default: 0 }
nodes:
  fan: { kind: map, start: true, over: state.items, as: item, branch: double, output_key: doubled, collect_into: results, next: sum }
  double: { kind: script, run: [python3, -c, "import json, sys; t = json.load(sys.stdin); print(json.dumps({'doubled': t['scope']['item'] * 2}))"] }
  sum: { kind: script, run: [python3, -c, "import json, sys; s = json.load(sys.stdin)['state']; print(json.dumps({'total': sum(s['results']) * s['factor']}))"], end: true }
"#;
    let mapped = client
        .submit_bundle(GraphBundle::from_text("fan.yaml", map), &json!({}))
        .await?
        .run_id
        .to_string();
    let done = client.wait(&mapped).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["total"], 12);
    let set = json!({"factor": 10});
    let fork = client
        .fork(&mapped, Some(1.into()), set.as_object().unwrap())
        .await?
        .run_id
        .to_string();
    let forked = client.wait(&fork).await?;
    assert_eq!(forked.status, RunStatus::Completed, "{:?}", forked.error);
    assert_eq!(forked.state["results"], json!([2, 4, 6]));
    assert_eq!(forked.state["total"], 120);
    let items = weft_tests::events_of(&client, &fork, "map_item_finished").await?;
    assert!(
        items.is_empty(),
        "the map's items ran in the original only: {items:?}"
    );
    Ok(())
}

/// The places run `run_id`'s history keeps within its wave after `step`,
/// each with how many of its `kind` events the log held there.
async fn points_within(
    client: &weft_client::Client,
    run_id: &str,
    step: u32,
    kind: &str,
) -> anyhow::Result<Vec<(weft_client::HistoryPoint, usize)>> {
    let events = weft_tests::events_of(client, run_id, kind).await?;
    let history = client.history(run_id, None).await?;
    Ok(history
        .waves
        .iter()
        .filter(|w| w.step == step && w.point > 0)
        .map(|w| {
            let before = events.iter().filter(|e| e.seq < w.point).count();
            (w.at(), before)
        })
        .collect())
}

#[tokio::test]
async fn a_map_forked_mid_way_keeps_its_finished_items_and_runs_the_rest_on_the_forks_state()
-> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    // One item at a time, each long enough for its end to be checkpointed
    // (at most every 100 ms) before the next ends.
    let map = r#"
name: times
state:
  numbers: { type: array, default: [1, 2, 3, 4] }
  factor: { type: integer, default: 2 }
  products: { type: array, default: [] }
nodes:
  times: { kind: map, start: true, over: state.numbers, as: n, branch: multiply, output_key: product, collect_into: products, max_concurrency: 1 }
  multiply: { kind: script, run: [python3, -c, "import json, sys, time; t = json.load(sys.stdin); time.sleep(0.3); print(json.dumps({'product': t['scope']['n'] * t['state']['factor']}))"] }
"#;
    let original = client
        .submit_bundle(GraphBundle::from_text("times.yaml", map), &json!({}))
        .await?
        .run_id
        .to_string();
    let done = client.wait(&original).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["products"], json!([2, 4, 6, 8]));

    // The history keeps points within the map's wave; the one with two
    // items finished is forked with the factor replaced.
    let points = points_within(&client, &original, 0, "map_item_finished").await?;
    let (at, _) = *points
        .iter()
        .find(|(_, finished)| *finished == 2)
        .unwrap_or_else(|| panic!("a point with two items finished: {points:?}"));
    let mid = client.history(&original, Some(at)).await?;
    assert_eq!((mid.step, mid.point), (0, at.point));
    assert_eq!(mid.state["products"], json!([]), "the map had not merged");
    let set = json!({"factor": 10});
    let fork = client
        .fork(&original, Some(at), set.as_object().unwrap())
        .await?
        .run_id
        .to_string();
    let forked = client.wait(&fork).await?;
    assert_eq!(forked.status, RunStatus::Completed, "{:?}", forked.error);
    // Items 1 and 2 kept from the original; 3 and 4 ran in the fork.
    assert_eq!(forked.state["products"], json!([2, 4, 30, 40]));
    let ran = weft_tests::events_of(&client, &fork, "map_item_finished").await?;
    let indexes: Vec<&Value> = ran.iter().map(|e| &e.body["index"]).collect();
    assert_eq!(indexes, [&json!(2), &json!(3)], "{ran:?}");
    let from = forked.forked_from.clone().expect("named");
    assert_eq!((from.step, from.point), (0, at.point));
    assert_eq!(client.get(&original).await?.state, done.state);

    // `weft state` and `weft fork` take the same place as text.
    let text = at.to_string();
    let out = weft(&cluster, &["state", &original, "--at", &text, "--json"]).await?;
    assert!(out.status.success(), "{out:?}");
    let shown: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(shown["at"], text.as_str());
    let out = weft(&cluster, &["state", &original]).await?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("points within waves: ") && said.contains(&text),
        "{said}"
    );
    // Each point is listed with what the wave had done by then.
    let line = said
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{text} ")))
        .unwrap_or_else(|| panic!("a line for point {text}: {said}"));
    assert!(line.ends_with("times: 2 of 4 items done"), "{line}");
    let out = weft(&cluster, &["state", &original, "--at", "0.x"]).await?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a place in a run's history"));
    // A point not kept is refused naming it, through HTTP as well.
    let base = cluster
        .metrics_url()
        .trim_end_matches("/metrics")
        .to_owned();
    let refused = reqwest::Client::new()
        .post(format!("{base}/api/v1/runs/{original}/fork"))
        .json(&json!({"at": "0.1"}))
        .send()
        .await?;
    let status = refused.status();
    let said = refused.text().await?;
    assert_eq!(status, 400, "{said}");
    assert!(said.contains("no wave 0.1"), "{said}");
    Ok(())
}

#[tokio::test]
async fn a_loop_forked_after_an_iteration_keeps_it_and_goes_on_reading_the_replaced_fields()
-> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    let refine = r#"
name: refine
settings: { strict_state: true }
state:
  tone: { type: string, default: "dry" }
  draft: { type: string, default: "" }
  rounds: { type: integer, default: 0 }
conditions:
  enough: "state.rounds >= 3"
nodes:
  refine: { kind: loop, start: true, body: write, until: enough, max_iterations: 5, output_key: draft }
  write: { kind: script, run: [python3, -c, "import json, sys, time; s = json.load(sys.stdin)['state']; time.sleep(0.3); print(json.dumps({'draft': s['draft'] + s['tone'] + ';', 'rounds': s['rounds'] + 1}))"] }
"#;
    let original = client
        .submit_bundle(GraphBundle::from_text("refine.yaml", refine), &json!({}))
        .await?
        .run_id
        .to_string();
    let done = client.wait(&original).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["draft"], "dry;dry;dry;");

    let points = points_within(&client, &original, 0, "loop_iteration").await?;
    let (at, _) = *points
        .iter()
        .find(|(_, iterations)| *iterations == 1)
        .unwrap_or_else(|| panic!("a point after the first iteration: {points:?}"));
    // The draft the loop wrote is the loop's until it ends: replacing it
    // replaces what the iterations wrote, as the tone replaces the run's.
    let set = json!({"tone": "bold", "draft": "edited;"});
    let fork = client
        .fork(&original, Some(at), set.as_object().unwrap())
        .await?
        .run_id
        .to_string();
    let forked = client.wait(&fork).await?;
    assert_eq!(forked.status, RunStatus::Completed, "{:?}", forked.error);
    assert_eq!(forked.state["draft"], "edited;bold;bold;");
    assert_eq!(forked.state["rounds"], 3);
    // `weft state` says what the point holds.
    let out = weft(&cluster, &["state", &original]).await?;
    let said = String::from_utf8_lossy(&out.stderr);
    let line = said
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{at} ")))
        .unwrap_or_else(|| panic!("a line for point {at}: {said}"));
    assert!(line.ends_with("refine: iteration 1 done"), "{line}");
    let iterations = weft_tests::events_of(&client, &fork, "loop_iteration").await?;
    let numbers: Vec<&Value> = iterations.iter().map(|e| &e.body["iteration"]).collect();
    assert_eq!(
        numbers,
        [&json!(2), &json!(3)],
        "iteration 1 kept, not run again"
    );
    assert_eq!(client.get(&original).await?.state, done.state);
    Ok(())
}

#[tokio::test]
async fn a_child_runs_fork_forks_its_parent_which_takes_the_childs_fork_on() -> anyhow::Result<()> {
    let cluster = TestCluster::with_test_workers(&["w"], 2).await?;
    let client = cluster.client().await?;
    let parent = r#"
name: report
state:
  topic: { type: string, default: "tides" }
  log: { type: string, default: "" }
  summary: { type: string, default: "" }
nodes:
  research: { kind: subgraph, start: true, graph: log.yaml, next: sum_up }
  sum_up: { kind: script, run: [python3, -c, "import json, sys; s = json.load(sys.stdin)['state']; print(json.dumps({'summary': s['log'].upper()}))"] }
"#;
    let bundle = GraphBundle::from_text("report.yaml", parent)
        .with_file("log.yaml", log_chain_yaml(1, 3).as_bytes(), 0o644)
        .with_file("step.py", STEP.as_bytes(), 0o644);
    let original = client
        .submit_bundle(bundle, &json!({}))
        .await?
        .run_id
        .to_string();
    let done = client.wait(&original).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["summary"], "TIDES1;TIDES2;TIDES3;");
    let child = done
        .children
        .first()
        .map(|child| child.run_id.to_string())
        .expect("the research node's child");
    let child_done = client.get(&child).await?;

    // The child forked after its wave 1 with its topic replaced: the
    // parent is forked too, and its research node takes the child's fork
    // on (no other child is started); the rest of the parent runs on it.
    let set = json!({"topic": "seas"});
    let forked = client
        .fork(&child, Some(1.into()), set.as_object().unwrap())
        .await?
        .run_id
        .to_string();
    let parent_fork = client.wait(&forked).await?;
    assert_eq!(
        parent_fork.status,
        RunStatus::Completed,
        "{:?}",
        parent_fork.error
    );
    assert_eq!(parent_fork.state["log"], "tides1;seas2;seas3;");
    assert_eq!(parent_fork.state["summary"], "TIDES1;SEAS2;SEAS3;");
    let from = parent_fork.forked_from.clone().expect("named");
    assert_eq!(from.run.to_string(), original);
    assert!(
        from.point > 0,
        "at the point its child was in progress: {from:?}"
    );
    let started = weft_tests::events_of(&client, &forked, "subgraph_started").await?;
    assert_eq!(started.len(), 1, "{started:?}");
    let child_fork = started[0].body["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let child_forked = client.get(&child_fork).await?;
    assert_eq!(child_forked.status, RunStatus::Completed);
    assert_eq!(child_forked.state["log"], "tides1;seas2;seas3;");
    let child_from = child_forked.forked_from.clone().expect("named");
    assert_eq!(
        (child_from.run.to_string(), child_from.step),
        (child.clone(), 1)
    );
    // A fresh run of the child's graph from its wave 2 on, given its
    // state after wave 1 and the new topic, ends as the child's fork did.
    let mut given = client
        .history(&child, Some(1.into()))
        .await?
        .state
        .as_object()
        .cloned()
        .unwrap_or_default();
    given.insert("topic".into(), json!("seas"));
    let fresh = client
        .submit_bundle(log_chain(2, 3), &Value::Object(given))
        .await?;
    let fresh = client.wait(&fresh.run_id).await?;
    for (field, value) in fresh.state.as_object().unwrap() {
        assert_eq!(value, &child_forked.state[field], "field {field}");
    }
    // The originals are untouched.
    assert_eq!(client.get(&original).await?.state, done.state);
    assert_eq!(client.get(&child).await?.state, child_done.state);

    // A child's fork refused (a value of the wrong type) starts nothing:
    // neither the child's fork nor its parent's.
    let runs = client.list().await?.len();
    let wrong = json!({"topic": 3});
    match client
        .fork(&child, Some(1.into()), wrong.as_object().unwrap())
        .await
    {
        Err(ClientError::Invalid(message)) => assert!(message.contains("'topic'"), "{message}"),
        other => panic!("a fork that should be refused: {other:?}"),
    }
    assert_eq!(client.list().await?.len(), runs);
    // `weft fork` of a child says whose fork it printed.
    let out = weft(&cluster, &["fork", &child, "--at", "2"]).await?;
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!("forked from {original} at "))
            && said.contains(&format!(
                "(the parent of run {child}, whose fork it takes on)"
            )),
        "{said}"
    );
    Ok(())
}
