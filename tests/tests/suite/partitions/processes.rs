//! A partitioned group through the binaries: three `coordinator`
//! processes with `WEFT_PARTITIONS=4` on one real etcd, one `worker`
//! that finds them there and serves them all. Runs submitted through
//! each coordinator finish, are waited for and listed through any
//! other; a coordinator stopped cleanly hands its partitions over and
//! its runs stay reachable; each describes the group alike (the viewer's
//! panel: who leads which partition, the runs each holds); a coordinator
//! with another partition count is refused, naming both.

use std::collections::BTreeMap;

use super::*;
use weft_client::{GraphBundle, RunStatus};
use weft_store::EtcdTls;
use weft_tests::group::TestGroup;

/// Two script steps, the second reading what the first wrote.
fn two_steps() -> GraphBundle {
    GraphBundle::from_text(
        "two.yaml",
        "state:\n  n: { type: integer, default: 0 }\nnodes:\n  a: { kind: script, run: [sh, -c, 'echo \"{\\\"n\\\": 20}\"'], start: true, next: b }\n  b: { kind: script, run: [sh, -c, 'echo \"{\\\"n\\\": 22}\"'], end: true }\n",
    )
}

/// `GET /api/v1/group` of the coordinator at `base`.
async fn group_of(base: &str) -> anyhow::Result<serde_json::Value> {
    Ok(reqwest::get(format!("{base}/api/v1/group"))
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// The runs each partition holds by a group's description (every
/// partition some member leads, each once).
fn held_by_partition(group: &serde_json::Value) -> BTreeMap<u64, u64> {
    let mut held = BTreeMap::new();
    for member in group["members"].as_array().into_iter().flatten() {
        for led in member["partitions"].as_array().into_iter().flatten() {
            let partition = led["partition"].as_u64().expect("a partition");
            let runs = led["runs"].as_u64().expect("counted runs");
            assert!(
                held.insert(partition, runs).is_none(),
                "partition {partition} led twice: {group}"
            );
        }
    }
    held
}

/// The URL of the coordinator that leads run `id`'s partition, by the
/// group's description through coordinator 0.
async fn group_partition_leader(group: &TestGroup, id: &str) -> anyhow::Result<String> {
    let base = group.http_base(0);
    let run: serde_json::Value = reqwest::get(format!("{base}/api/v1/runs/{id}"))
        .await?
        .json()
        .await?;
    let partition = run["partition"].clone();
    let described = group_of(base).await?;
    described["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|member| {
            member["partitions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|led| led["partition"] == partition)
        })
        .and_then(|member| member["url"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("nobody leads partition {partition}: {described}"))
}

#[tokio::test]
async fn three_coordinators_share_the_runs_of_a_partitioned_group() -> anyhow::Result<()> {
    let etcd = TestEtcd::start().await?;
    let env = [("WEFT_PARTITIONS", "4")];
    let mut group = TestGroup::start_on(etcd, 3, 3, &env, EtcdTls::default()).await?;
    for index in 0..3 {
        group
            .wait_for_log(
                &format!("coordinator-{index}"),
                "taking part in the group",
                1,
            )
            .await?;
    }
    group.add_worker("w", 4)?;
    group
        .wait_for_log("w", "serving every coordinator of the group", 1)
        .await?;
    group.wait_for_log("w", "joined the coordinator", 3).await?;
    let clients = [
        group.client(0).await?,
        group.client(1).await?,
        group.client(2).await?,
    ];
    let mut made = Vec::new();
    for round in 0..3 {
        for (index, client) in clients.iter().enumerate() {
            let run = client
                .submit_bundle(two_steps(), &serde_json::json!({}))
                .await?;
            made.push((run.run_id.to_string(), (index + round + 1) % 3));
        }
    }
    // Each waited for through another coordinator than its own.
    for (id, other) in &made {
        let done =
            tokio::time::timeout(Duration::from_secs(60), clients[*other].wait(id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{id}: {:?}", done.error);
        assert_eq!(done.state["n"], 22, "{id}");
    }
    // Listed whole through each.
    let mut ids: Vec<String> = made.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    ids.reverse();
    for client in &clients {
        let listed: Vec<String> = client
            .list()
            .await?
            .iter()
            .map(|run| run.run_id.to_string())
            .collect();
        assert_eq!(listed, ids);
    }
    // The HTTP API (the viewer's) likewise, and a run through it.
    for (index, (id, _)) in made.iter().enumerate().take(3) {
        let base = group.http_base(index);
        let page: serde_json::Value = reqwest::get(format!("{base}/api/v1/runs?limit=100"))
            .await?
            .json()
            .await?;
        let listed: Vec<&str> = page["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|run| run["run_id"].as_str().expect("an id"))
            .collect();
        assert_eq!(listed, ids, "through coordinator {index}");
        let run: serde_json::Value = reqwest::get(format!("{base}/api/v1/runs/{id}"))
            .await?
            .json()
            .await?;
        assert_eq!(run["status"], "completed", "{run}");
    }
    // Each coordinator's metrics count the runs of the partitions it
    // leads: all of them, once each.
    let counted = || -> Option<f64> {
        let mut total = 0.0;
        for index in 0..3 {
            let base = group.http_base(index).trim_start_matches("http://");
            let metrics = weft_tests::http_get(base, "/metrics").ok()?;
            total += metrics
                .lines()
                .filter(|line| line.starts_with("weft_partition_runs{"))
                .filter_map(|line| line.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
                .sum::<f64>();
        }
        Some(total)
    };
    weft_tests::wait_until(weft_tests::PATIENCE, || {
        counted() == Some(made.len() as f64)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}: counted {:?}", counted()))?;
    // Each describes the group the same way (the viewer's panel): every
    // partition led by one member, each member answering for itself, the
    // runs each partition holds adding up to every run, and each listed
    // run in a partition its member leads.
    for index in 0..3 {
        let described = group_of(group.http_base(index)).await?;
        assert_eq!(described["partitions"], 4, "{described}");
        let members = described["members"].as_array().expect("members");
        assert_eq!(members.len(), 3, "{described}");
        assert_eq!(
            members.iter().filter(|m| m["this"] == true).count(),
            1,
            "{described}"
        );
        assert!(members.iter().all(|m| m["answered"] == true), "{described}");
        let held = held_by_partition(&described);
        assert_eq!(
            held.keys().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3],
            "{described}"
        );
        assert_eq!(held.values().sum::<u64>(), made.len() as u64, "{described}");
        assert_eq!(described["unled"], serde_json::json!([]), "{described}");
        let page: serde_json::Value =
            reqwest::get(format!("{}/api/v1/runs?limit=100", group.http_base(index)))
                .await?
                .json()
                .await?;
        let mut listed: BTreeMap<u64, u64> = BTreeMap::new();
        for run in page["runs"].as_array().expect("runs") {
            *listed
                .entry(run["partition"].as_u64().expect("a partition"))
                .or_default() += 1;
        }
        assert_eq!(
            listed,
            held.into_iter().filter(|(_, n)| *n > 0).collect(),
            "through coordinator {index}"
        );
    }
    // `weft group` says the same.
    let said = weft_tests::output_within(
        std::process::Command::new(weft_tests::binary("weft")).args([
            "--coordinator",
            group.url(1),
            "group",
        ]),
        weft_tests::PATIENCE,
    );
    let text = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&said.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "4 partitions, 4 led by 3 coordinators", "{text}");
    assert!(
        lines[1].starts_with(&format!("{} (this coordinator)  leads ", group.url(1))),
        "{text}"
    );
    assert_eq!(lines.len(), 4, "{text}");
    let runs_said: usize = text
        .split(" run")
        .filter_map(|piece| piece.rsplit('(').next()?.trim().parse::<usize>().ok())
        .sum();
    assert_eq!(runs_said, made.len(), "{text}");
    // The node cache is the group's: a step kept for a run of one
    // coordinator's partition answers a run of another's.
    let cached = GraphBundle::from_text(
        "cached.yaml",
        "state:\n  n: { type: integer, default: 0 }\nnodes:\n  a: { kind: script, start: true, cache: { key: \"k\", ttl: 1h }, run: [sh, -c, 'echo \"{\\\"n\\\": 7}\"'] }\n",
    );
    let first = clients[0]
        .submit_bundle(cached.clone(), &serde_json::json!({}))
        .await?;
    let first =
        tokio::time::timeout(Duration::from_secs(60), clients[0].wait(&first.run_id)).await??;
    assert_eq!(first.state["n"], 7, "{:?}", first.error);
    let second = clients[1]
        .submit_bundle(cached, &serde_json::json!({}))
        .await?;
    assert_ne!(
        group_partition_leader(&group, &first.run_id).await?,
        group_partition_leader(&group, &second.run_id).await?,
        "the two runs live in partitions two coordinators lead"
    );
    let second =
        tokio::time::timeout(Duration::from_secs(60), clients[1].wait(&second.run_id)).await??;
    assert_eq!(second.state["n"], 7, "{:?}", second.error);
    let hits = weft_tests::events_of(&clients[1], &second.run_id, "node_cached").await?;
    assert_eq!(hits.len(), 1, "the second run took the first's answer");
    // One stops cleanly: its partitions are handed over, and every run
    // is still found, through either of the others.
    group.signal(2, "TERM")?;
    group
        .wait_for_log(
            "coordinator-2",
            "left the group, every partition handed over",
            1,
        )
        .await?;
    for (id, _) in &made {
        for client in &clients[..2] {
            let info = tokio::time::timeout(Duration::from_secs(30), client.get(id)).await??;
            assert_eq!(info.status, RunStatus::Completed, "{id}");
        }
    }
    // The two left lead all four partitions between them.
    let base = group.http_base(0);
    let deadline = std::time::Instant::now() + weft_tests::PATIENCE;
    loop {
        let described = group_of(base).await?;
        let members = described["members"].as_array().expect("members").len();
        if members == 2 && held_by_partition(&described).len() == 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the group after a leave: {described}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // New runs go on with two.
    let run = clients[1]
        .submit_bundle(two_steps(), &serde_json::json!({}))
        .await?;
    let done =
        tokio::time::timeout(Duration::from_secs(60), clients[0].wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // A coordinator given another count is refused, naming both.
    let dir = std::env::temp_dir().join(format!("weft-recount-{}", std::process::id()));
    let output = weft_tests::output_within(
        std::process::Command::new(weft_tests::binary("coordinator"))
            .env("WEFT_ETCD", &group.etcd.url)
            .env("WEFT_PARTITIONS", "8")
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&dir),
        weft_tests::PATIENCE,
    );
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains(
            "[cluster] partitions = 8, but this group's store was created with 4 partitions"
        ),
        "{said}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
