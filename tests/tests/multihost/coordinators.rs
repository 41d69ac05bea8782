//! The leading coordinator's container killed, cut off from etcd, paused
//! past its lease; and a rolling restart of every container. The runs in
//! flight finish, each step merged exactly once, and a deposed leader
//! writes nothing: its fence is refused by etcd itself.

use std::time::{Duration, Instant};

use serde_json::json;
use weft_client::Client;
use weft_store::{Fence, LEADER_KEY, Store, StoreError};
use weft_tests::PATIENCE;
use weft_tests::compose::{COORDINATORS, Compose};

use crate::ledger::{RUN_PATIENCE, Workload, check_chain, finish};

/// The group's lease (`deploy/config/coordinator-ha.toml`).
const LEASE: Duration = Duration::from_secs(3);

/// A coordinator other than `service` (the compose file runs three).
fn other(service: &str) -> &'static str {
    COORDINATORS
        .into_iter()
        .find(|s| *s != service)
        .expect("more than one coordinator")
}

/// A group under load: the leader, a standby a client talks through,
/// three chains and a map in flight, and the fence the leader holds.
struct Scene {
    cluster: Compose,
    leader: &'static str,
    client: Client,
    work: Workload,
    deposed: Fence,
}

impl Scene {
    async fn under_load(name: &str) -> anyhow::Result<Self> {
        let cluster = Compose::up(name, 3).await?;
        let leader = cluster.wait_for_leader(None).await?;
        let standby = other(leader);
        let client = cluster.client(standby).await?;
        let work = Workload::submit(&client, 3).await?;
        let deposed = fence_of(&cluster, leader)?;
        Ok(Self {
            cluster,
            leader,
            client,
            work,
            deposed,
        })
    }
}

/// The fence of the term `service` leads under, from its log.
fn fence_of(cluster: &Compose, service: &str) -> anyhow::Result<Fence> {
    let entry = last_log(cluster, service, "leading the group")?;
    let revision = entry["fields"]["fence"]
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("no fence in {entry}"))?;
    Ok(Fence {
        key: LEADER_KEY.to_owned(),
        revision,
    })
}

/// A write under a deposed leader's fence, as its keeper would send it, is
/// refused by etcd; the successor's fence is accepted.
async fn deposed_write_is_refused(
    cluster: &Compose,
    deposed: &Fence,
    current: &Fence,
) -> anyhow::Result<()> {
    let store = cluster.store()?;
    let stale = store
        .put("runs/fence-probe", b"stale".to_vec(), Some(deposed))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Fenced { .. })),
        "a write under the deposed fence {} was not refused: {stale:?}",
        deposed.revision
    );
    store
        .put("runs/fence-probe", b"current".to_vec(), Some(current))
        .await?;
    assert_eq!(
        store.get("runs/fence-probe").await?.map(|e| e.value),
        Some(b"current".to_vec())
    );
    store
        .delete_prefix("runs/fence-probe", Some(current))
        .await?;
    Ok(())
}

/// The value of a counter on `service`'s metrics (0 before it counts).
fn counter(cluster: &Compose, service: &str, name: &str) -> f64 {
    cluster
        .http(service, "/metrics")
        .ok()
        .and_then(|text| weft_tests::gauge(&text, name))
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_container_killed_a_standby_leads_within_five_seconds() -> anyhow::Result<()> {
    let cluster = Compose::up("killed", 3).await?;
    let leader = cluster.wait_for_leader(None).await?;
    let standby = other(leader);
    let client = cluster.client(standby).await?;
    let work = Workload::submit(&client, 4).await?;

    let container = cluster.container(leader)?;
    let killed_at = now_unix();
    let killed = Instant::now();
    cluster.kill(&container)?;
    // One of the two standbys (the one the client talks through, or the
    // third coordinator) takes over.
    let new_leader = cluster.wait_for_leader(Some(leader)).await?;
    let served = killed.elapsed();
    // From the kill to the new leader's "leading the group" (its log, on
    // the host's clock), and to the first request it answered as leader.
    let led = log_time(&cluster, new_leader, "leading the group")? - killed_at;
    assert!(
        led < 5.0 && served < Duration::from_secs(5),
        "the standby led {led:.2} s (served {served:?}) after the leader was killed"
    );
    let again = work.check(&client, &cluster).await?;
    eprintln!(
        "failover: led {led:.2} s after the kill, answered as leader after {served:?}; steps executed again: {again}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_stops_within_its_lease_and_its_workers_move()
-> anyhow::Result<()> {
    let Scene {
        cluster,
        leader,
        client,
        work,
        deposed,
    } = Scene::under_load("cutoff").await?;

    // Its workers still reach it over `cluster`; etcd is on `store` only.
    let container = cluster.container(leader)?;
    let cut = Instant::now();
    cluster.disconnect(&container, "store")?;
    let successor = cluster.wait_for_leader(Some(leader)).await?;
    let failover = cut.elapsed();
    // It stood down by itself, within its lease of the cut, before the
    // standby took over (the logs of both, on the host's one clock).
    let stood_down = log_time(&cluster, leader, "no longer leading")?;
    let took_over = log_time(&cluster, successor, "leading the group")?;
    let cut_at = now_unix() - cut.elapsed().as_secs_f64();
    assert!(
        stood_down - cut_at <= LEASE.as_secs_f64() + 0.2,
        "the cut-off leader kept leading {:.2} s",
        stood_down - cut_at
    );
    assert!(
        stood_down <= took_over,
        "the cut-off leader stood down {:.3} s after its successor led",
        stood_down - took_over
    );
    // Its workers moved to the new leader while it was still cut off.
    cluster.wait_for_workers(3).await?;
    let again = work.check(&client, &cluster).await?;

    // Healed, it stands by and forwards to the new leader.
    cluster.connect(&container, "store", leader)?;
    let current = fence_of(&cluster, successor)?;
    deposed_write_is_refused(&cluster, &deposed, &current).await?;
    let deadline = Instant::now() + PATIENCE;
    let listed = loop {
        match cluster.client(leader).await?.list().await {
            Ok(listed) => break listed,
            Err(error) if Instant::now() >= deadline => return Err(error.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    for run_id in work.chains.iter().chain([&work.map]) {
        assert!(listed.iter().any(|run| &run.run_id == run_id));
    }
    eprintln!(
        "failover {failover:?}; the cut-off leader stood down {:.3} s after the cut, {:.3} s before its successor led; steps executed again: {again}",
        stood_down - cut_at,
        took_over - stood_down
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_agrees_with_its_successor_and_writes_nothing_stale()
-> anyhow::Result<()> {
    let Scene {
        cluster,
        leader,
        client,
        work,
        deposed,
    } = Scene::under_load("paused").await?;

    let container = cluster.container(leader)?;
    cluster.pause(&container)?;
    let paused = Instant::now();
    let successor = cluster.wait_for_leader(Some(leader)).await?;
    let failover = paused.elapsed();
    // Past its lease twice over, then woken.
    tokio::time::sleep((2 * LEASE).saturating_sub(paused.elapsed())).await;
    cluster.unpause(&container)?;

    // It agrees: it stands by, and answers with its successor's runs.
    let woken = cluster.client(leader).await?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let leads = counter(&cluster, leader, "weft_leader");
        if leads == 0.0 && woken.list().await.is_ok() {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the woken leader never stood by");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let current = fence_of(&cluster, successor)?;
    deposed_write_is_refused(&cluster, &deposed, &current).await?;
    let again = work.check(&client, &cluster).await?;
    // Both see the same runs, the same way.
    let (mine, theirs) = (woken.list().await?, client.list().await?);
    let key = |runs: &[weft_client::RunInfo]| {
        let mut seen: Vec<(String, String)> = runs
            .iter()
            .map(|r| (r.run_id.to_string(), format!("{:?}", r.status)))
            .collect();
        seen.sort();
        seen
    };
    assert_eq!(key(&mine), key(&theirs));
    eprintln!(
        "failover {failover:?}; fenced writes refused on the woken leader: {}; steps executed again: {again}",
        counter(&cluster, leader, "weft_store_writes_fenced_total")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_container_completes_fifty_runs() -> anyhow::Result<()> {
    let cluster = Compose::up("rolling", 3).await?;
    let leader = cluster.wait_for_leader(None).await?;
    let client = cluster.client(other(leader)).await?;
    let mut runs = Vec::new();
    for _ in 0..50 {
        let bundle = crate::ledger::chain(4, 0.5);
        runs.push(client.submit_bundle(bundle, &json!({})).await?.run_id);
    }
    // One at a time: the standbys first, then the leader, then each
    // worker, each back (healthy, or joined) before the next goes.
    let leader = cluster.wait_for_leader(None).await?;
    let mut order: Vec<String> = COORDINATORS
        .into_iter()
        .filter(|service| *service != leader)
        .chain([leader])
        .map(|service| cluster.container(service))
        .collect::<anyhow::Result<_>>()?;
    order.extend(cluster.containers("worker")?);
    for container in order {
        weft_tests::compose::docker(&["restart", "-t", "30", &container])?;
        cluster.wait_for_leader(None).await?;
        cluster.wait_for_workers(3).await?;
    }
    // A client of whichever coordinator leads now.
    let client = cluster.client(cluster.wait_for_leader(None).await?).await?;
    let mut again = 0;
    for run_id in &runs {
        let run = finish(&client, run_id, RUN_PATIENCE).await?;
        again += check_chain(&client, cluster.shared(), &run, 4)
            .await?
            .executed_again;
    }
    eprintln!("50 runs through a rolling restart; steps executed again: {again}");
    Ok(())
}

/// Seconds since the epoch now.
fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The last JSON log line of `service` that says `message`.
fn last_log(cluster: &Compose, service: &str, message: &str) -> anyhow::Result<serde_json::Value> {
    let logs = cluster.logs(service);
    let line = logs
        .lines()
        .rev()
        .find(|line| line.contains(message))
        .ok_or_else(|| anyhow::anyhow!("{service} never logged {message:?}: {logs}"))?;
    // Compose puts `service_1  | ` before each line.
    let json = line.split_once('{').map(|(_, rest)| format!("{{{rest}"));
    serde_json::from_str(json.as_deref().unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("not a JSON log line ({e}): {line}"))
}

/// When `service` last logged `message` (its log's timestamp), in seconds
/// since the epoch.
fn log_time(cluster: &Compose, service: &str, message: &str) -> anyhow::Result<f64> {
    let entry = last_log(cluster, service, message)?;
    let stamp = entry["timestamp"].as_str().unwrap_or_default();
    let at = chrono::DateTime::parse_from_rfc3339(stamp)
        .map_err(|e| anyhow::anyhow!("cannot read the time {stamp:?}: {e}"))?;
    Ok(at.timestamp_micros() as f64 / 1e6)
}
