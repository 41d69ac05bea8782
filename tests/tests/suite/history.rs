//! A run's history (SPEC 20, issue #41) through real processes: every
//! wave's state read back from the store after the run has moved on, exact
//! field by field, across a coordinator's restart; `weft state RUN --at
//! STEP`; a wave the history does not keep refused naming it.

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use weft_client::{ClientError, GraphBundle, RunStatus};
use weft_tests::{TestCluster, binary};

/// A script step that writes `notes` one note of 2 KB longer (a list
/// that grows a little each wave) and sets `n` to the wave it runs in
/// (its argument).
const ADD: &str = r#"import json, sys
n = int(sys.argv[1])
print(json.dumps({"notes": [("note %d " % k) * 256 for k in range(1, n + 1)], "n": n}))
"#;

/// The note wave `n` adds.
fn note(n: usize) -> String {
    format!("note {n} ").repeat(256)
}

const WAVES: usize = 5;

fn graph() -> GraphBundle {
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
            "  add{i}: {{ kind: script, run: [python3, add.py, \"{i}\"]{start}{next} }}\n"
        ));
    }
    GraphBundle::from_text("notes.yaml", &yaml).with_file("add.py", ADD.as_bytes(), 0o644)
}

/// The state after wave `step`, as the run must have had it.
fn expected(step: usize) -> Value {
    let notes: Vec<String> = (1..=step).map(note).collect();
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
        let at = client.history(&run_id, Some(step)).await?;
        if let Some(n) = change.body["values"].get("n") {
            assert_eq!(&at.state["n"], n, "wave {step}");
        }
    }
    for step in 0..=WAVES {
        let at = client.history(&run_id, Some(step as u32)).await?;
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
        let at = client.history(&run_id, Some(step as u32)).await?;
        assert_eq!(at.state, expected(step), "wave {step} after a restart");
    }
    // A wave it does not keep is refused, naming it and those kept.
    match client.history(&run_id, Some(9)).await {
        Err(ClientError::Invalid(message)) => {
            assert!(message.contains("no wave 9"), "{message}");
            assert!(message.contains("0, 1, 2, 3, 4, 5"), "{message}");
        }
        other => panic!("a wave not kept: {other:?}"),
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
    let url = cluster.url().to_owned();
    let weft = move |args: Vec<String>| {
        Command::new(binary("weft"))
            .env("WEFT_EPHEMERAL", "1")
            .env_remove("WEFT_COORDINATOR")
            .args(["--coordinator", &url])
            .args(args)
            .stdin(Stdio::null())
            .output()
    };
    let args = |extra: &[&str]| -> Vec<String> {
        ["state", run_id.as_str()]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let out = tokio::task::spawn_blocking({
        let weft = weft.clone();
        let args = args(&["--at", "2", "--json"]);
        move || weft(args)
    })
    .await??;
    assert!(out.status.success(), "{out:?}");
    let shown: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(shown["step"], 2);
    assert_eq!(shown["state"], expected(2));
    assert_eq!(shown["waves"].as_array().map(Vec::len), Some(WAVES + 1));
    // Without --json: a line on stderr, the state on stdout.
    let out = tokio::task::spawn_blocking({
        let weft = weft.clone();
        let args = args(&["--at", "0"]);
        move || weft(args)
    })
    .await??;
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("after its input (before any wave)"), "{said}");
    let state: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(state, expected(0));
    // A wave not kept: a clear error and a non-zero status.
    let out = tokio::task::spawn_blocking({
        let args = args(&["--at", "42"]);
        move || weft(args)
    })
    .await??;
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no wave 42"), "{said}");
    Ok(())
}
