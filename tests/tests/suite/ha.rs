//! High availability (issue #9): coordinators sharing one real etcd, one
//! leading; workers find the leader through etcd; clients may talk to any
//! coordinator. Killing or pausing the leader loses no run.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio_stream::StreamExt;
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_tests::group::TestGroup;

/// A chain of script nodes, each taking a moment and setting `n`.
fn slow_chain(nodes: usize) -> GraphBundle {
    let mut text = String::from("state:\n  n: { type: integer, default: 0 }\nnodes:\n");
    for i in 1..=nodes {
        let start = if i == 1 { ", start: true" } else { "" };
        let next = if i < nodes {
            format!(", next: n{}", i + 1)
        } else {
            String::new()
        };
        text.push_str(&format!(
            "  n{i}: {{ kind: script, run: [sh, -c, 'sleep 0.4; echo \"{{\\\"n\\\": {i}}}\"']{start}{next} }}\n"
        ));
    }
    GraphBundle::from_text("chain.yaml", &text)
}

/// Follows the run's events (through `client`) until node `node` starts.
async fn wait_for_node(client: &Client, run_id: &str, node: &str) -> anyhow::Result<()> {
    let mut events = client.watch(run_id, 0).await?;
    while let Some(event) = events.next().await {
        let event = event?;
        if event.kind == "node_started" && event.body["node"] == node {
            return Ok(());
        }
    }
    anyhow::bail!("the run ended before node {node} started")
}

/// Two coordinators on one etcd, one worker following the leader, and a
/// client of the standby: (group, leader, standby, client).
async fn pair_with_worker() -> anyhow::Result<(TestGroup, usize, usize, Client)> {
    let mut group = TestGroup::start(2, 2).await?;
    let leader = group.wait_for_leader(None).await?;
    let standby = 1 - leader;
    group.add_worker("w", 2)?;
    group.wait_for_log("w", "joined the coordinator", 1).await?;
    let client = group.client(standby).await?;
    Ok((group, leader, standby, client))
}

/// Two coordinators on a real etcd (configured by `coordinator`, TOML,
/// when given) and one worker whose `default` model provider is the test
/// endpoint at `url` (key `key`), their files in `dir`: (group, leader,
/// a client of the standby).
async fn llm_pair(
    dir: &std::path::Path,
    url: &str,
    key: &str,
    coordinator: Option<&str>,
) -> anyhow::Result<(TestGroup, usize, Client)> {
    std::fs::create_dir_all(dir)?;
    let worker = dir.join("worker.toml");
    std::fs::write(
        &worker,
        format!(
            "[providers.default]\nbase_url = \"{url}\"\napi_key = \"${{LLM_KEY}}\"\nmodel = \"tiny\"\n"
        ),
    )?;
    let config = dir.join("coordinator.toml");
    std::fs::write(&config, coordinator.unwrap_or_default())?;
    let env = [
        ("WEFT_CONFIG", config.to_str().unwrap_or_default()),
        ("WEFT_WORKER_CONFIG", worker.to_str().unwrap_or_default()),
        ("LLM_KEY", key),
    ];
    let etcd = weft_tests::etcd::TestEtcd::start().await?;
    let mut group = TestGroup::start_on(etcd, 2, 2, &env, Default::default()).await?;
    let leader = group.wait_for_leader(None).await?;
    group.add_worker("w", 2)?;
    group.wait_for_log("w", "joined the coordinator", 1).await?;
    let client = group.client(1 - leader).await?;
    Ok((group, leader, client))
}

async fn finish(client: &Client, run_id: &str) -> anyhow::Result<RunInfo> {
    Ok(tokio::time::timeout(Duration::from_secs(90), client.wait(run_id)).await??)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_finishes_the_run_when_the_leader_is_killed() -> anyhow::Result<()> {
    // Every request goes through the standby, which forwards it.
    let (mut group, leader, standby, client) = pair_with_worker().await?;

    let submitted = client.submit_bundle(slow_chain(5), &json!({})).await?;
    wait_for_node(&client, &submitted.run_id, "n2").await?;
    let listed = client.list().await?;
    assert!(
        listed.iter().any(|run| run.run_id == submitted.run_id),
        "the standby lists the leader's runs"
    );
    // A worker pointed at the standby is sent to the leader.
    group.add_worker_at("sent", 1, standby)?;
    group
        .wait_for_log("sent", "sent to the leading coordinator", 1)
        .await?;
    group
        .wait_for_log("sent", "joined the coordinator", 1)
        .await?;

    let killed = Instant::now();
    group.kill(leader)?;
    // A status asked of the standby at once rides through the election.
    let url = group.url(standby).to_owned();
    let run_id = submitted.run_id.clone();
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new(weft_tests::binary("weft"))
            // Hermetic: no test shares (or leaves) a local cluster.
            .env("WEFT_EPHEMERAL", "1")
            .args(["--coordinator", &url, "status", &run_id, "--json"])
            .output()
    });
    // So does a submission: the standby holds it until it leads itself.
    // (Sent once the leader's connections are seen closed — the worker
    // noticed — so it meets a refused connection, not one dying under it,
    // which the standby would not dare repeat.)
    group.wait_for_log("w", "lost the coordinator", 1).await?;
    let late = {
        let client = client.clone();
        tokio::spawn(async move { client.submit_bundle(slow_chain(1), &json!({})).await })
    };
    let new_leader = group.wait_for_leader(Some(leader)).await?;
    let failover = killed.elapsed();
    assert_eq!(new_leader, standby);
    let done = finish(&client, &submitted.run_id).await?;
    let finished = killed.elapsed();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["n"], 5);
    match late.await? {
        Ok(late) => {
            let late = finish(&client, &late.run_id).await?;
            assert_eq!(late.status, RunStatus::Completed, "{:?}", late.error);
        }
        // The one race left: the standby's connection to the dead leader
        // died under the request rather than refusing it, and a request
        // that may have reached the leader is not repeated. It says so.
        Err(error) => {
            let text = error.to_string();
            assert!(
                text.contains("forwarded the request to the leader at")
                    && text.contains("operation was canceled")
                    && text.contains("ask again"),
                "{text}"
            );
        }
    }
    let status = status.await??;
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    // The worker followed the leader through etcd.
    group.wait_for_log("w", "joined the coordinator", 2).await?;
    eprintln!(
        "failover (lease 2 s): the standby led {} ms after kill -9 of the leader; the run finished {} ms after it",
        failover.as_millis(),
        finished.as_millis()
    );
    assert!(
        failover < Duration::from_secs(15),
        "a standby takes over within a few lease TTLs ({failover:?})"
    );
    // The log runs on: every node started and finished, the run once.
    let kinds: Vec<String> = client
        .watch(&submitted.run_id, 0)
        .await?
        .map(|e| e.map(|e| e.kind))
        .collect::<Result<Vec<_>, _>>()
        .await?;
    assert_eq!(
        kinds.iter().filter(|k| *k == "run_finished").count(),
        1,
        "{kinds:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_fenced_and_then_agrees_with_its_successor() -> anyhow::Result<()> {
    let (group, leader, standby, client) = pair_with_worker().await?;

    let submitted = client.submit_bundle(slow_chain(6), &json!({})).await?;
    wait_for_node(&client, &submitted.run_id, "n2").await?;

    // The leader freezes past its lease; the standby takes over and
    // finishes the run.
    group.signal(leader, "STOP")?;
    let new_leader = group.wait_for_leader(Some(leader)).await?;
    assert_eq!(new_leader, standby);
    let done = finish(&client, &submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["n"], 6);

    // The old leader wakes up: it finds its lease gone, writes nothing,
    // and stands by.
    group.signal(leader, "CONT")?;
    group
        .wait_for_log(&format!("coordinator-{leader}"), "no longer leading", 1)
        .await?;
    assert_eq!(
        group.leader().await?,
        Some(standby),
        "the successor still leads"
    );
    let old = group.client(leader).await?;
    let through_old = old.get(&submitted.run_id).await?;
    let through_new = client.get(&submitted.run_id).await?;
    assert_eq!(through_old.status, RunStatus::Completed);
    assert_eq!(through_old.state, through_new.state);
    assert_eq!(through_old.event_count, through_new.event_count);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_etcd_stops_answering_stands_down_within_its_lease() -> anyhow::Result<()> {
    // One coordinator with a 2 s lease; its etcd is frozen (SIGSTOP), so
    // the lease renewal hangs rather than fails. The leader must not wait
    // for the request's own bound (10 s): its lease may lapse first.
    let group = TestGroup::start(1, 2).await?;
    let leader = group.wait_for_leader(None).await?;
    group.etcd.signal("STOP")?;
    let frozen = Instant::now();
    let stood_down = group
        .wait_for_log(&format!("coordinator-{leader}"), "no longer leading", 1)
        .await
        .map(|()| frozen.elapsed());
    group.etcd.signal("CONT")?;
    let stood_down = stood_down?;
    assert!(
        stood_down <= Duration::from_millis(2_300),
        "the leader went on leading {stood_down:?} with its etcd silent (lease 2 s)"
    );
    Ok(())
}

/// A state etcd cannot take in one transaction: a 2 MB input, a node
/// returning 1.5 MB, and 130 fields written at once (etcd takes 1.5 MiB
/// and 128 writes per transaction).
fn large_state() -> (GraphBundle, serde_json::Value) {
    let mut text = String::from(
        "state:\n  doc: { type: string }\n  big: { type: string, default: '' }\n  n: { type: integer, default: 0 }\n",
    );
    for i in 0..130 {
        text.push_str(&format!("  f{i}: {{ type: integer, default: {i} }}\n"));
    }
    text.push_str(concat!(
        "nodes:\n",
        "  grow: { kind: script, start: true, next: slow,\n",
        "          run: [python3, -c, 'import json; print(json.dumps({\"big\": \"y\" * 1500000}))'] }\n",
        "  slow: { kind: script, next: last, run: [sh, -c, 'sleep 1; echo \"{\\\"n\\\": 1}\"'] }\n",
        "  last: { kind: script, run: [sh, -c, 'sleep 0.3; echo \"{\\\"n\\\": 2}\"'] }\n",
    ));
    let input = json!({"doc": "x".repeat(2_000_000)});
    (GraphBundle::from_text("large.yaml", &text), input)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_too_large_for_one_etcd_transaction_is_stored_whole() -> anyhow::Result<()> {
    let (mut group, leader, standby, client) = pair_with_worker().await?;

    let (graph, input) = large_state();
    let submitted = client.submit_bundle(graph, &input).await?;
    wait_for_node(&client, &submitted.run_id, "slow").await?;
    // The standby restores the run from what the leader stored.
    group.kill(leader)?;
    group.wait_for_leader(Some(leader)).await?;
    let done = finish(&client, &submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["n"], 2);
    assert_eq!(done.state["doc"].as_str().map(str::len), Some(2_000_000));
    assert_eq!(done.state["big"].as_str().map(str::len), Some(1_500_000));
    assert!(
        done.state["big"]
            .as_str()
            .is_some_and(|s| s.bytes().all(|b| b == b'y'))
    );
    assert_eq!(done.state["f129"], 129);
    // The large fields live at versioned keys, split across etcd keys.
    let etcd = weft_store::EtcdStore::connect(std::slice::from_ref(&group.etcd.url))?;
    let keys: Vec<String> =
        weft_store::Store::scan(&etcd, &format!("runs/{}/fields/", submitted.run_id))
            .await?
            .into_iter()
            .map(|entry| entry.key)
            .collect();
    assert!(
        keys.iter()
            .any(|k| k.contains("/fields/doc@") && weft_store::chunks::is_chunk_key(k)),
        "{keys:?}"
    );
    assert!(
        group.log(standby).contains("runs restored from the store"),
        "{}",
        group.log(standby)
    );
    Ok(())
}

/// The rate limits' windows survive a leader's kill -9 (SPEC 18): a limit
/// of six requests a minute admits one call every ten seconds; the leader
/// admits one, keeps its window, and is killed; the new leader starts from
/// that window, so the next call waits out the ten seconds rather than
/// going at once on a full window. Counted in the endpoint's arrivals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limits_window_survives_the_leaders_kill() -> anyhow::Result<()> {
    use weft_store::Store;
    use weft_tests::llm_server::{Reply, TestLlm};
    const KEY: &str = "sk-ha-limits";
    let llm = TestLlm::start(KEY, |_, _| Reply::Text("ok".into())).await?;
    let dir = std::env::temp_dir().join(format!("weft-ha-limits-{}", std::process::id()));
    let limits =
        "[[limits]]\nname = \"slow\"\nmatch = { kind = \"llm\" }\nrequests_per_minute = 6\n";
    let (mut group, leader, client) = llm_pair(&dir, &llm.url, KEY, Some(limits)).await?;
    let ask = GraphBundle::from_text(
        "ask.yaml",
        "nodes:\n  ask: { kind: llm, start: true, prompt: \"Hello.\" }\n",
    );
    let first = client.submit_bundle(ask.clone(), &json!({})).await?.run_id;
    let done = finish(&client, &first).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // The leader keeps the window it spent within a second.
    let store = weft_store::EtcdStore::connect_with(
        std::slice::from_ref(&group.etcd.url),
        &Default::default(),
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kept = store.get("flow/state").await?;
        let level = kept
            .and_then(|entry| serde_json::from_slice::<serde_json::Value>(&entry.value).ok())
            .and_then(|state| state["limits"]["slow"]["requests"]["level"].as_f64());
        if level.is_some_and(|level| level < 1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "the window was never kept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    group.kill(leader)?;
    group.wait_for_leader(Some(leader)).await?;
    group.wait_for_log("w", "joined the coordinator", 2).await?;
    let second = client.submit_bundle(ask, &json!({})).await?.run_id;
    let done = finish(&client, &second).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let arrivals = llm.arrivals();
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1] - arrivals[0];
    assert!(
        gap >= Duration::from_millis(9_500),
        "the new leader let the next call go {gap:?} after the last: it started on a full window"
    );
    eprintln!("the next call went {gap:?} after the last, across the failover");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// A watcher of an `llm` step's stream through the standby; the leader is
/// killed once the store holds the first pieces the watcher read. The
/// watcher asks again from the offset after its last piece: the new leader
/// serves what the store kept at the same offsets, ends the cut-off
/// stream `abandoned`, and the step, sent again, streams afresh past it;
/// nothing the watcher read comes twice, and the text after the
/// `abandoned` piece is the step's answer exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_off_by_the_leaders_kill_resumes_from_the_watchers_offset()
-> anyhow::Result<()> {
    use weft_client::{ClientError, Delta};
    use weft_store::Store;
    use weft_tests::llm_server::{Reply, TestLlm};
    const KEY: &str = "sk-ha-stream";
    const PIECES: [&str; 8] = [
        "The ", "tide ", "came ", "in ", "and ", "went ", "out ", "again.",
    ];
    let story: String = PIECES.concat();
    let llm = TestLlm::start(KEY, |_, _| {
        Reply::Streamed(
            PIECES.iter().map(|p| (*p).to_owned()).collect(),
            Duration::from_millis(400),
        )
    })
    .await?;
    let dir = std::env::temp_dir().join(format!("weft-ha-stream-{}", std::process::id()));
    let (mut group, leader, client) = llm_pair(&dir, &llm.url, KEY, None).await?;
    let tell = GraphBundle::from_text(
        "tell.yaml",
        "state:\n  story: { type: string, default: \"\" }\nnodes:\n  tell: { kind: llm, start: true, prompt: \"Tell.\", state_updates: { story: \"{{ output }}\" } }\n",
    );
    let run_id = client.submit_bundle(tell, &json!({})).await?.run_id;
    let run_id = run_id.to_string();

    // Three pieces read, and kept in the store, before the kill.
    let mut read: Vec<Delta> = Vec::new();
    {
        let mut pieces = client.stream(&run_id, 0).await?;
        while read.len() < 3 {
            let piece = tokio::time::timeout(Duration::from_secs(30), pieces.next())
                .await?
                .expect("a piece before the kill")?;
            read.push(piece);
        }
    }
    let store = weft_store::EtcdStore::connect_with(
        std::slice::from_ref(&group.etcd.url),
        &Default::default(),
    )?;
    let next = read.last().map_or(0, |p| p.offset + 1);
    let chunks = format!("runs/{run_id}/stream/c/");
    let deadline = Instant::now() + Duration::from_secs(10);
    while stored_up_to(&store, &chunks).await? < Some(next - 1) {
        assert!(
            Instant::now() < deadline,
            "the pieces read were never stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    group.kill(leader)?;

    // The watcher asks again, from the offset after its last piece,
    // until the new leader answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    let after: Vec<Delta> = loop {
        let attempt = async {
            let pieces = client.stream(&run_id, next).await?;
            pieces.collect::<Result<Vec<_>, ClientError>>().await
        };
        match tokio::time::timeout(Duration::from_secs(60), attempt).await? {
            Ok(pieces) => break pieces,
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "the stream never came back: {error}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let done = finish(&client, &run_id).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["story"], story.as_str());

    let shape = |pieces: &[Delta]| -> Vec<(u64, String, String)> {
        pieces
            .iter()
            .map(|p| (p.offset, p.kind.clone(), p.text.clone()))
            .collect()
    };
    let mut seen = read.clone();
    seen.extend(after.iter().cloned());
    let offsets: Vec<u64> = seen.iter().map(|p| p.offset).collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "offsets only grow, none repeated: {offsets:?}"
    );
    // The new leader's whole stream: what the store kept at the offsets
    // the watcher read them at, then what the watcher read after.
    let whole: Vec<Delta> = client
        .stream(&run_id, 0)
        .await?
        .collect::<Result<_, _>>()
        .await?;
    let kept: Vec<Delta> = whole.iter().filter(|p| p.offset < next).cloned().collect();
    assert_eq!(shape(&kept), shape(&read[..kept.len()]), "kept as read");
    assert!(
        kept.len() >= 3,
        "the stored chunk holds the pieces read: {kept:?}"
    );
    let rest: Vec<Delta> = whole.iter().filter(|p| p.offset >= next).cloned().collect();
    assert_eq!(shape(&rest), shape(&after), "the watcher missed nothing");
    // The cut-off stream ends `abandoned`; the step's text after it is its
    // answer, whole.
    let abandoned = whole
        .iter()
        .rposition(|p| p.kind == "abandoned")
        .expect("the cut-off stream is marked abandoned");
    assert!(whole[abandoned].offset >= 1 << 32, "a new term's block");
    let text: String = whole[abandoned..]
        .iter()
        .filter(|p| p.kind == "text")
        .map(|p| p.text.as_str())
        .collect();
    assert_eq!(text, story);
    assert_eq!(whole.last().map(|p| p.kind.as_str()), Some("end"));
    assert_eq!(llm.requests().len(), 2, "the step was sent again once");
    // Once the step ended, its stream is kept as one record.
    let stream = format!("runs/{run_id}/stream/");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let keys = store.scan_keys(&stream).await?;
        let chunks = keys.iter().filter(|k| k.contains("/stream/c/")).count();
        let steps = keys.iter().filter(|k| k.contains("/stream/s/")).count();
        if chunks == 0 && steps == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the store keeps the stream as {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// The last offset the stream's chunks under `prefix` hold, read from
/// their stored form (each part: `pieces` of `[offset less the one
/// before, kind, length]`).
async fn stored_up_to(store: &weft_store::EtcdStore, prefix: &str) -> anyhow::Result<Option<u64>> {
    let mut last = None;
    for (_, value) in weft_store::chunks::scan(store, prefix).await? {
        let parts: Vec<serde_json::Value> = serde_json::from_slice(&value)?;
        for part in parts {
            let deltas = part["pieces"].as_array().cloned().unwrap_or_default();
            let end: u64 = deltas.iter().filter_map(|p| p[0].as_u64()).sum();
            last = last.max(Some(end));
        }
    }
    Ok(last)
}
