//! Workers' containers cut off and killed: a cut-off worker's task is
//! dispatched again after the liveness timeout and the copy it finishes
//! after the network heals is not merged; a map's `max_concurrency` holds
//! across the workers through a worker's loss and its return.

use std::time::{Duration, Instant};

use serde_json::json;
use weft_tests::PATIENCE;
use weft_tests::compose::Compose;

use crate::ledger::{RUN_PATIENCE, check_chain, check_map, finish, ledger, peak_overlap};

/// The worker container whose host name is `host`.
fn worker_on(cluster: &Compose, host: &str) -> anyhow::Result<String> {
    for container in cluster.containers("worker")? {
        let name =
            weft_tests::compose::docker(&["inspect", "-f", "{{.Config.Hostname}}", &container])?;
        if name == host {
            return Ok(container);
        }
    }
    anyhow::bail!("no worker container is the host {host}")
}

/// Waits until the ledger satisfies `condition`.
async fn until_ledger(
    cluster: &Compose,
    what: &str,
    condition: impl Fn(&[crate::ledger::Execution]) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if condition(&ledger(cluster.shared())?) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_mid_task_is_replaced_and_its_late_copy_is_not_merged()
-> anyhow::Result<()> {
    let cluster = Compose::up("cutworker", 3).await?;
    let leader = cluster.wait_for_leader(None).await?;
    let client = cluster.client(leader).await?;
    // Three steps; the middle one long enough to outlast the cut.
    let run_id = client
        .submit_bundle(crate::ledger::chain(3, 4.0), &json!({}))
        .await?
        .run_id;
    let holder = {
        let id = run_id.clone();
        until_ledger(&cluster, "n2 started", |l| {
            l.iter()
                .any(|e| e.run == id && e.node == "n2" && e.phase == "start")
        })
        .await?;
        let lines = ledger(cluster.shared())?;
        let first = lines
            .iter()
            .find(|e| e.run == run_id && e.node == "n2" && e.phase == "start")
            .expect("n2 started");
        first.host.clone()
    };
    let container = worker_on(&cluster, &holder)?;
    let cut = Instant::now();
    cluster.disconnect(&container, "cluster")?;
    cluster.disconnect(&container, "store")?;

    // Given up after the liveness timeout, n2 starts again elsewhere.
    let id = run_id.clone();
    let other = holder.clone();
    until_ledger(&cluster, "n2 dispatched again", move |l| {
        l.iter()
            .any(|e| e.run == id && e.node == "n2" && e.phase == "start" && e.host != other)
    })
    .await?;
    let redispatched = cut.elapsed();
    // The cut-off copy ran to its end in its container all the same.
    let id = run_id.clone();
    let host = holder.clone();
    until_ledger(&cluster, "the cut-off copy ended", move |l| {
        l.iter()
            .any(|e| e.run == id && e.node == "n2" && e.phase == "end" && e.host == host)
    })
    .await?;
    // Healed while the wave is still live (the second copy is running):
    // the first copy's result reaches the coordinator and is discarded.
    cluster.connect(&container, "store", "worker")?;
    cluster.connect(&container, "cluster", "worker")?;
    let discarded = || {
        cluster
            .http(leader, "/metrics")
            .ok()
            .and_then(|m| weft_tests::gauge(&m, "weft_results_discarded_total"))
            .unwrap_or(0.0)
    };
    weft_tests::wait_until(PATIENCE, || discarded() >= 1.0).await?;
    let live = client.status(&run_id).await?;
    let run = finish(&client, &run_id, RUN_PATIENCE).await?;
    let tally = check_chain(&client, cluster.shared(), &run, 3).await?;
    assert!(tally.executed_again >= 1, "n2 ran once only: {tally:?}");
    cluster.wait_for_workers(3).await?;
    eprintln!(
        "dispatched again {redispatched:?} after the cut; results discarded: {} (the run was {:?} when it came)",
        discarded(),
        live.status
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_holds_across_workers_through_a_loss_and_a_return() -> anyhow::Result<()> {
    let cluster = Compose::up("concurrency", 3).await?;
    let leader = cluster.wait_for_leader(None).await?;
    let client = cluster.client(leader).await?;
    // 3 workers × 4 slots = 12 slots, for a map allowed 5 at a time.
    let (items, allowed) = (40, 5);
    let run_id = client
        .submit_bundle(crate::ledger::map(items, allowed, 0.5), &json!({}))
        .await?
        .run_id;
    let id = run_id.clone();
    until_ledger(&cluster, "ten items ended", move |l| {
        l.iter().filter(|e| e.run == id && e.phase == "end").count() >= 10
    })
    .await?;
    let workers = cluster.containers("worker")?;
    let lost = &workers[0];
    // Its items die somewhere between this instant and the kill's return;
    // none is dispatched again before they die, so they are taken to end
    // here (at the latest, to be strict).
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    cluster.kill(lost)?;
    let id = run_id.clone();
    until_ledger(&cluster, "ten more items ended", move |l| {
        l.iter().filter(|e| e.run == id && e.phase == "end").count() >= 20
    })
    .await?;
    weft_tests::compose::docker(&["start", lost])?;
    cluster.wait_for_workers(3).await?;
    let run = finish(&client, &run_id, RUN_PATIENCE).await?;
    check_map(&client, cluster.shared(), &run, items).await?;
    let peak = peak_overlap(&ledger(cluster.shared())?, &run_id, killed_at);
    assert!(
        peak <= allowed as usize,
        "{peak} items ran at once, max_concurrency is {allowed}"
    );
    assert!(peak >= 2, "the items never overlapped: peak {peak}");
    eprintln!("peak concurrency {peak} of {allowed}, through a worker's loss and return");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_signals_its_worker_with_retry_leaves_the_fleet_standing()
-> anyhow::Result<()> {
    let cluster = Compose::up("pill", 3).await?;
    let leader = cluster.wait_for_leader(None).await?;
    let client = cluster.client(leader).await?;
    cluster.wait_for_workers(3).await?;
    let workers = cluster.containers("worker")?;
    let started = |container: &str| {
        weft_tests::compose::docker(&["inspect", "-f", "{{.State.StartedAt}}", container])
    };
    let before: Vec<String> = workers
        .iter()
        .map(|c| started(c))
        .collect::<Result<_, _>>()?;
    // SIGTERM made each worker drain and exit 0, one per attempt, and with
    // no restart policy the cluster was dead; under `init: true`, SIGKILL
    // killed them.
    for signal in ["TERM", "KILL"] {
        let yaml = format!(
            "nodes:\n  pill: {{ kind: script, start: true, run: [sh, -c, 'kill -{signal} $PPID; sleep 2; exit 3'], retry: {{ max_attempts: 3, initial_interval: 0.1 }} }}\n"
        );
        let run = client
            .submit_bundle(
                weft_client::GraphBundle::from_text("pill.yaml", &yaml),
                &json!({}),
            )
            .await?;
        let done = tokio::time::timeout(RUN_PATIENCE, client.wait(&run.run_id)).await??;
        assert_eq!(done.status, weft_client::RunStatus::Failed, "{signal}");
        let error = done.error.expect("an error");
        assert!(
            error
                .message
                .contains("script_failed: script exited with status 3"),
            "{signal}: {}",
            error.message
        );
    }
    // Every worker still runs, never restarted, and a normal run completes.
    for (container, at) in workers.iter().zip(&before) {
        let state =
            weft_tests::compose::docker(&["inspect", "-f", "{{.State.Status}}", container])?;
        assert_eq!(state, "running", "{container}");
        assert_eq!(&started(container)?, at, "{container} was restarted");
    }
    let run_id = client
        .submit_bundle(crate::ledger::chain(2, 0.1), &json!({}))
        .await?
        .run_id;
    let done = tokio::time::timeout(RUN_PATIENCE, client.wait(&run_id)).await??;
    assert_eq!(
        done.status,
        weft_client::RunStatus::Completed,
        "{:?}",
        done.error
    );
    Ok(())
}
