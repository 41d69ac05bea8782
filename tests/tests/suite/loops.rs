//! `loop` nodes across processes (SPEC 4.2, issue #10): bodies of script
//! steps on real workers, `until` as a condition or a function a worker
//! hosts.

use serde_json::json;
use weft_client::{GraphBundle, RunStatus};
use weft_tests::TestCluster;

/// A script step writing `{"drafts": ITERATION, "text": ..., "heard": FEEDBACK}`
/// from its stdin's scope: the text shrinks by ten characters an iteration.
const WRITE: &str = r#"import json, sys
task = json.load(sys.stdin)
loop = task["scope"]["loop"]
n = loop["iteration"]
print(json.dumps({"drafts": n, "text": "x" * (45 - 10 * n), "heard": loop["feedback"]}))
"#;

fn graph(until: &str, max_iterations: u32) -> GraphBundle {
    let yaml = format!(
        r#"
state:
  drafts: {{ type: integer, default: 0 }}
  text: {{ type: string, default: "" }}
  heard: {{ type: string }}
  checked: {{ type: integer, default: 0 }}
conditions:
  three_drafts: "state.drafts >= 3"
nodes:
  refine:
    kind: loop
    start: true
    body: write
    until: "{until}"
    max_iterations: {max_iterations}
    output_key: text
    next: done
  write: {{ kind: script, run: [python3, write.py], next: check }}
  check: {{ kind: script, run: [sh, -c, 'echo "{{\"checked\": 1}}"'] }}
  done: {{ kind: script, run: [sh, -c, 'echo "{{\"finished\": true}}"'] }}
"#
    );
    GraphBundle::from_text("refine.yaml", &yaml).with_file("write.py", WRITE.as_bytes(), 0o644)
}

async fn cluster() -> anyhow::Result<TestCluster> {
    TestCluster::with_test_workers(&["a", "b"], 2).await
}

#[tokio::test]
async fn a_chain_body_repeats_until_its_condition_holds() -> anyhow::Result<()> {
    let cluster = cluster().await?;
    let client = cluster.client().await?;
    let submitted = client
        .submit_bundle(graph("three_drafts", 5), &json!({}))
        .await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["drafts"], 3);
    assert_eq!(done.state["text"], "x".repeat(15));
    assert_eq!(done.state["checked"], 1);
    assert_eq!(done.state["finished"], true);
    let iterations = weft_tests::events_of(&client, &submitted.run_id, "loop_iteration").await?;
    let shown: Vec<(u64, bool)> = iterations
        .iter()
        .map(|e| {
            (
                e.body["iteration"].as_u64().unwrap(),
                e.body["done"] == true,
            )
        })
        .collect();
    assert_eq!(shown, [(1, false), (2, false), (3, true)]);
    Ok(())
}

#[tokio::test]
async fn max_iterations_ends_a_loop_whose_condition_never_holds() -> anyhow::Result<()> {
    let cluster = cluster().await?;
    let client = cluster.client().await?;
    let submitted = client
        .submit_bundle(graph("three_drafts", 2), &json!({}))
        .await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["drafts"], 2);
    assert_eq!(
        done.state["finished"], true,
        "the run goes on after the loop"
    );
    Ok(())
}

#[tokio::test]
async fn a_worker_hosted_until_judges_and_its_reason_is_the_next_feedback() -> anyhow::Result<()> {
    let cluster = cluster().await?;
    let client = cluster.client().await?;
    let submitted = client
        .submit_bundle(graph("fn:short_enough", 6), &json!({}))
        .await?;
    let done = client.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // 35, 25, 15 characters: the third is short enough.
    assert_eq!(done.state["drafts"], 3);
    assert_eq!(done.state["heard"], "25 characters, over 20");
    let iterations = weft_tests::events_of(&client, &submitted.run_id, "loop_iteration").await?;
    let reasons: Vec<&str> = iterations
        .iter()
        .map(|e| e.body["reason"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        reasons,
        ["35 characters, over 20", "25 characters, over 20", ""]
    );
    Ok(())
}

#[tokio::test]
async fn an_until_no_worker_hosts_is_refused_at_submission() -> anyhow::Result<()> {
    let cluster = cluster().await?;
    let client = cluster.client().await?;
    let refused = client
        .submit_bundle(graph("fn:nobody_hosts_this", 3), &json!({}))
        .await
        .expect_err("refused");
    assert!(
        refused.to_string().contains(
            "loop node 'refine': until fn:nobody_hosts_this is hosted by no connected worker"
        ),
        "{refused}"
    );
    assert!(client.list().await?.is_empty(), "nothing was started");
    Ok(())
}
