//! The viewer's partitions panel in chromium, on a partitioned group
//! (`tests/browser/partitions.py`, beside the viewer's own browser test).

use serde_json::{Value, json};
use weft_client::{GraphBundle, RunStatus};
use weft_tests::repo;

use super::*;

/// The partitions panel on a partitioned group (two coordinators sharing
/// four partitions on a real etcd, one worker serving both) in chromium:
/// every run listed with its partition, each coordinator with the
/// partitions it leads and the runs each holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partitions_panel_shows_who_leads_what_in_chromium() -> anyhow::Result<()> {
    let python = crate::viewer::browser_python();
    let etcd = weft_tests::etcd::TestEtcd::start().await?;
    let mut group = weft_tests::group::TestGroup::start_on(
        etcd,
        2,
        3,
        &[("WEFT_PARTITIONS", "4")],
        weft_store::EtcdTls::default(),
    )
    .await?;
    group.add_worker("w", 4)?;
    group.wait_for_log("w", "joined the coordinator", 2).await?;
    let base = group.http_base(0).to_owned();
    let http = reqwest::Client::new();
    // Settled: both lead two partitions.
    let deadline = std::time::Instant::now() + weft_tests::PATIENCE;
    loop {
        let described: Value = http
            .get(format!("{base}/api/v1/group"))
            .send()
            .await?
            .json()
            .await?;
        let led: Vec<usize> = described["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| m["partitions"].as_array().map_or(0, Vec::len))
            .collect();
        if led == [2, 2] {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the group never settled: {described}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let clients = [group.client(0).await?, group.client(1).await?];
    let graph = GraphBundle::from_text(
        "one.yaml",
        "nodes:\n  a: { kind: script, start: true, run: [sh, -c, 'echo {}'] }\n",
    );
    let mut runs = serde_json::Map::new();
    for i in 0..6 {
        let run = clients[i % 2]
            .submit_bundle(graph.clone(), &json!({}))
            .await?;
        let done = clients[(i + 1) % 2].wait(&run.run_id).await?;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        let shown: Value = http
            .get(format!("{base}/api/v1/runs/{}", run.run_id))
            .send()
            .await?
            .json()
            .await?;
        runs.insert(run.run_id.to_string(), shown["partition"].clone());
    }
    let shots = repo().join("target/viewer-screenshots");
    let mut browser = std::process::Command::new(python);
    browser
        .arg(repo().join("tests/browser/partitions.py"))
        .args(["--base", &base, "--runs", &Value::Object(runs).to_string()])
        .args(["--members", "2", "--partitions", "4"])
        .arg("--shots")
        .arg(&shots);
    let output = tokio::task::spawn_blocking(move || browser.output()).await??;
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(shots.join("viewer-partitions.png").exists());
    Ok(())
}
