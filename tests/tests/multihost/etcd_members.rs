//! etcd members lost: one of three (the one leading etcd itself) changes nothing (the same coordinator
//! leads, runs go on and new ones are taken); two of three (quorum gone)
//! make the coordinators refuse new runs with a clear error, and everything
//! continues once quorum is back.

use std::time::Instant;

use serde_json::json;
use weft_tests::compose::{COORDINATORS, Compose, ETCD, docker};

use crate::ledger::{RUN_PATIENCE, check_chain, finish};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_etcd_member_of_three_lost_interrupts_nothing() -> anyhow::Result<()> {
    let cluster = Compose::up("etcdone", 3).await?;
    let leader = cluster.wait_for_leader(None).await?;
    let client = cluster.client(leader).await?;
    let mut runs = Vec::new();
    for _ in 0..3 {
        let bundle = crate::ledger::chain(6, 0.5);
        runs.push(client.submit_bundle(bundle, &json!({})).await?.run_id);
    }
    weft_tests::until_event(&client, &runs[0], "n2 started", |e| {
        e.kind == "node_started" && e.body["node"] == "n2"
    })
    .await?;
    // The member etcd's own raft group follows: the harder loss, since
    // the other two elect a new one while requests wait.
    let lost = cluster.etcd_leader()?;
    cluster.kill(&cluster.container(lost)?)?;
    // New runs are taken at once, by the same leader.
    for _ in 0..3 {
        let bundle = crate::ledger::chain(2, 0.2);
        runs.push(client.submit_bundle(bundle, &json!({})).await?.run_id);
    }
    for (i, run_id) in runs.iter().enumerate() {
        let run = finish(&client, run_id, RUN_PATIENCE).await?;
        check_chain(&client, cluster.shared(), &run, if i < 3 { 6 } else { 2 }).await?;
    }
    assert_eq!(
        cluster.leader().await?,
        Some(leader),
        "the lead changed hands"
    );
    let logs = cluster.logs(leader);
    assert!(
        !logs.contains("no longer leading"),
        "the leader stood down: {logs}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_quorum_lost_new_runs_are_refused_clearly_and_all_continues_after()
-> anyhow::Result<()> {
    let cluster = Compose::up("quorum", 3).await?;
    let leader = cluster.wait_for_leader(None).await?;
    let client = cluster.client(leader).await?;
    let before = client
        .submit_bundle(crate::ledger::chain(6, 0.5), &json!({}))
        .await?
        .run_id;
    weft_tests::until_event(&client, &before, "n2 started", |e| {
        e.kind == "node_started" && e.body["node"] == "n2"
    })
    .await?;
    let (first, second) = (cluster.container(ETCD[0])?, cluster.container(ETCD[1])?);
    cluster.kill(&first)?;
    cluster.kill(&second)?;
    let lost = Instant::now();

    // A submission now is refused, and says why, through the leader and
    // through the standby alike (asked at once, each timed).
    let standby = COORDINATORS
        .into_iter()
        .find(|c| *c != leader)
        .expect("more than one coordinator");
    let mut asks = Vec::new();
    for door in [leader, standby] {
        let url = cluster.published(door, 7700)?;
        let mut weft = cluster.weft();
        weft.args([
            "--coordinator",
            &url,
            "run",
            "--detach",
            "examples/critique-loop.yaml",
        ]);
        asks.push(tokio::task::spawn_blocking(move || {
            let asked = Instant::now();
            weft.output().map(|output| (output, asked.elapsed()))
        }));
    }
    let mut said = Vec::new();
    for (door, ask) in [leader, standby].into_iter().zip(asks) {
        let (refused, took) = ask.await??;
        let text = String::from_utf8_lossy(&refused.stderr).into_owned();
        assert!(
            !refused.status.success(),
            "a run was taken without quorum through {door}"
        );
        assert!(
            text.contains("leads") || text.contains("lease") || text.contains("store"),
            "the refusal through {door} does not say why: {text}"
        );
        said.push(format!("through {door} after {took:.1?}: {}", text.trim()));
    }
    let said = said.join("; ");

    docker(&["start", &first])?;
    docker(&["start", &second])?;
    cluster.wait_for_leader(None).await?;
    let back = lost.elapsed();
    let client = cluster.client(cluster.wait_for_leader(None).await?).await?;
    let after = client
        .submit_bundle(crate::ledger::chain(2, 0.2), &json!({}))
        .await?
        .run_id;
    for (run_id, nodes) in [(&before, 6), (&after, 2)] {
        let run = finish(&client, run_id, RUN_PATIENCE).await?;
        check_chain(&client, cluster.shared(), &run, nodes).await?;
    }
    eprintln!("quorum lost and restored; leading again {back:?} after the loss; refused {said}");
    Ok(())
}
