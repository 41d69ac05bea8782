//! The compose file's three coordinators as a partitioned group
//! (`WEFT_PARTITIONS=6`: each leads two partitions, every worker serves
//! all three): one leaving under load and joining again, one killed while
//! partitions move to a coordinator that joins, and W6 — many short runs
//! at once — submitted through all three. Every run completes with each
//! step merged exactly once, and the group ends balanced.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;
use weft_client::Client;
use weft_tests::PATIENCE;
use weft_tests::compose::{COORDINATORS, Compose};

use crate::ledger::{RUN_PATIENCE, Workload, chain, check_chain, finish};

/// The group's partition count: two for each of the three coordinators.
const PARTITIONS: u32 = 6;

/// A client of each coordinator, in `COORDINATORS`' order.
async fn clients(cluster: &Compose, services: &[&str]) -> Result<Vec<Client>> {
    let mut clients = Vec::new();
    for service in services {
        clients.push(cluster.client(service).await?);
    }
    Ok(clients)
}

/// The sum of a metric's samples on `service` (a labelled gauge's every
/// series), 0 when it reports none.
fn total(cluster: &Compose, service: &str, name: &str) -> f64 {
    let Ok(metrics) = cluster.http(service, "/metrics") else {
        return 0.0;
    };
    metrics
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// How many of `service`'s log lines say `message` (`docker logs`, which
/// answers faster than compose's).
fn said(cluster: &Compose, service: &str, message: &str) -> Result<usize> {
    let container = cluster.container(service)?;
    let out = Command::new("docker").args(["logs", &container]).output()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok(text.lines().filter(|line| line.contains(message)).count())
}

/// Fails unless every run of `ids` is listed through `client`, page by
/// page.
async fn listed_whole(client: &Client, ids: &[String], through: &str) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) = client.list_page(25, after.as_deref()).await?;
        seen.extend(page.into_iter().map(|run| run.run_id.to_string()));
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    for id in ids {
        ensure!(seen.contains(id), "{through} does not list {id}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_leaving_and_joining_again_under_load_loses_no_run() -> Result<()> {
    let cluster = Compose::up_partitioned("partleave", 3, PARTITIONS).await?;
    let [a, b, c] = COORDINATORS;
    let clients = clients(&cluster, &COORDINATORS).await?;
    // Runs in the partitions of all three; the map in c's.
    let before = Workload::spread(&clients, 3).await?;

    // c leaves (SIGTERM): it hands each of its partitions over, run actors
    // drained and checkpointed, before it exits.
    let (led, drained) = (
        cluster.led(c)?,
        said(&cluster, c, "handing over: draining")?,
    );
    let leaving = Instant::now();
    cluster.compose(&["stop", c])?;
    let left = leaving.elapsed();
    let logs = cluster.logs(c);
    ensure!(
        logs.contains("every partition handed over"),
        "{c} did not hand its partitions over: {logs}"
    );
    let handed = said(&cluster, c, "handing over: draining")? - drained;
    ensure!(
        handed == led as usize,
        "{c} led {led} partitions and handed {handed} over"
    );
    cluster.wait_for_balance(&[a, b]).await?;

    // More runs while it is away, then it joins again under load: a and b
    // each hand it a partition back.
    let during = Workload::spread(&clients[..2], 2).await?;
    let handed_over = || {
        total(&cluster, a, "weft_partition_hand_overs_total")
            + total(&cluster, b, "weft_partition_hand_overs_total")
    };
    let handed_before = handed_over();
    let joining = Instant::now();
    cluster.compose(&["start", c])?;
    cluster.wait_for_balance(&COORDINATORS).await?;
    cluster.wait_for_workers_on(&COORDINATORS, 3).await?;
    let joined = joining.elapsed();
    let given_back = handed_over() - handed_before;
    ensure!(
        given_back >= 2.0,
        "a and b handed {given_back} partitions to the joining {c}"
    );

    // Every run completes, each step merged once, asked through c.
    let rejoined = cluster.client(c).await?;
    let again =
        before.check(&rejoined, &cluster).await? + during.check(&clients[0], &cluster).await?;
    let ids: Vec<String> = [&before, &during]
        .iter()
        .flat_map(|work| work.chains.iter().chain([&work.map]))
        .map(|id| id.to_string())
        .collect();
    for (service, client) in COORDINATORS
        .iter()
        .zip([&clients[0], &clients[1], &rejoined])
    {
        listed_whole(client, &ids, service).await?;
    }
    eprintln!(
        "a coordinator left under load in {left:?} ({handed} partitions handed over) and joined \
         again, balanced {joined:?} after its start ({given_back} handed back); {} runs complete; \
         steps executed again: {again}",
        ids.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_while_partitions_move_loses_no_run() -> Result<()> {
    let cluster = Compose::up_partitioned("partkill", 3, PARTITIONS).await?;
    let [a, b, c] = COORDINATORS;
    // c away, a and b lead three partitions each and run the load.
    cluster.compose(&["stop", c])?;
    cluster.wait_for_balance(&[a, b]).await?;
    let clients = clients(&cluster, &[a, b]).await?;
    let work = Workload::spread(&clients, 4).await?;

    // c joins: a and b each hand it a partition. The first of them seen
    // draining one is killed there and then (SIGKILL): its partitions,
    // the one it was handing over among them, are taken once its lease
    // runs out.
    let drained = |service| said(&cluster, service, "handing over: draining");
    let (from_a, from_b) = (drained(a)?, drained(b)?);
    cluster.compose(&["start", c])?;
    let deadline = Instant::now() + PATIENCE;
    let victim = loop {
        if drained(a)? > from_a {
            break a;
        }
        if drained(b)? > from_b {
            break b;
        }
        if Instant::now() > deadline {
            bail!("neither {a} nor {b} handed a partition to {c}");
        }
    };
    cluster.kill(&cluster.container(victim)?)?;
    let killed = Instant::now();
    let survivor = if victim == a { b } else { a };
    cluster.wait_for_balance(&[survivor, c]).await?;
    let settled = killed.elapsed();

    let client = cluster.client(survivor).await?;
    let again = work.check(&client, &cluster).await?;
    let ids: Vec<String> = work
        .chains
        .iter()
        .chain([&work.map])
        .map(|id| id.to_string())
        .collect();
    listed_whole(&cluster.client(c).await?, &ids, c).await?;
    let abandoned = said(&cluster, survivor, "another coordinator leads it now")?;
    eprintln!(
        "{victim} killed while handing a partition to the joining {c}: {survivor} and {c} lead all \
         {PARTITIONS} partitions {settled:?} after the kill; {} runs complete; steps executed \
         again: {again}; partitions {survivor} found led elsewhere: {abandoned}",
        ids.len()
    );
    Ok(())
}

/// W6 on three coordinators: `RUNS` runs of a 10-step chain submitted at
/// once, a third through each coordinator, each waited for through
/// another. On this machine's two cores the figure measures correctness
/// (nothing lost, nothing merged twice, every coordinator holding runs),
/// not scaling: the three coordinators, three etcd members and three
/// workers share the two cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w6_on_three_coordinators_completes_every_run_once() -> Result<()> {
    const RUNS: usize = 60;
    let cluster = Compose::up_partitioned("partw6", 3, PARTITIONS).await?;
    let clients = clients(&cluster, &COORDINATORS).await?;
    let bundle = chain(10, 0.0);

    let started = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for i in 0..RUNS {
        let through = clients[i % 3].clone();
        let waited = clients[(i + 1) % 3].clone();
        let bundle = bundle.clone();
        runs.spawn(async move {
            let run = through.submit_bundle(bundle, &json!({})).await?;
            finish(&waited, &run.run_id, RUN_PATIENCE).await
        });
    }
    let mut finished = Vec::new();
    while let Some(done) = runs.join_next().await {
        finished.push(done.context("a run's task")??);
    }
    let elapsed = started.elapsed();

    let mut again = 0;
    for run in &finished {
        again += check_chain(&clients[0], cluster.shared(), run, 10)
            .await?
            .executed_again;
    }
    // Each coordinator holds a share of them, every run once (the gauge
    // is refreshed every heartbeat).
    let holding = || -> Vec<f64> {
        COORDINATORS
            .iter()
            .map(|service| total(&cluster, service, "weft_partition_runs"))
            .collect()
    };
    let deadline = Instant::now() + PATIENCE;
    let held = loop {
        let held = holding();
        if held.iter().all(|n| *n > 0.0) && held.iter().sum::<f64>() == RUNS as f64 {
            break held;
        }
        ensure!(
            Instant::now() < deadline,
            "the coordinators hold {held:?} of {RUNS} runs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let ids: Vec<String> = finished.iter().map(|run| run.run_id.to_string()).collect();
    for (service, client) in COORDINATORS.iter().zip(&clients) {
        listed_whole(client, &ids, service).await?;
    }
    eprintln!(
        "W6 on three coordinators ({PARTITIONS} partitions, 3 workers x 4 slots): {RUNS} runs of \
         10 steps in {elapsed:.2?}, {:.1} runs/s, held {held:?}; steps executed again: {again} \
         (on two cores this measures correctness, not scaling)",
        RUNS as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
