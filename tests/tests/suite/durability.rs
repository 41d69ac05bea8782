//! Runs outlive their coordinator (issue #9): `kill -9` of the coordinator
//! and a restart on the same data directory lose no acknowledged run.

use std::time::Duration;

use serde_json::json;
use weft_client::{GraphBundle, RunStatus};
use weft_tests::{TestCluster, wait_for_event};

/// A chain of three script nodes, each taking a moment and adding to `n`.
fn slow_chain() -> GraphBundle {
    GraphBundle::from_text(
        "chain.yaml",
        r#"
state:
  n: { type: integer, default: 0 }
nodes:
  a: { kind: script, run: [sh, -c, 'sleep 0.3; echo "{\"n\": 1}"'], start: true, next: b }
  b: { kind: script, run: [sh, -c, 'sleep 0.3; echo "{\"n\": 2}"'], next: c }
  c: { kind: script, run: [sh, -c, 'sleep 0.3; echo "{\"n\": 3}"'] }
"#,
    )
}

#[tokio::test]
async fn a_run_survives_kill_9_of_the_coordinator_mid_chain() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let submitted = client.submit_bundle(slow_chain(), &json!({})).await?;
    // The first node's wave has committed: the crash comes mid-chain.
    use tokio_stream::StreamExt;
    weft_tests::until_event(&client, &submitted.run_id, "b started", |event| {
        event.kind == "node_started" && event.body["node"] == "b"
    })
    .await?;
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let done =
        tokio::time::timeout(Duration::from_secs(60), client.wait(&submitted.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["n"], 3);
    // The log runs on across the restart.
    let kinds: Vec<String> = tokio::time::timeout(
        Duration::from_secs(20),
        client
            .watch(&submitted.run_id, 0)
            .await?
            .map(|e| e.map(|e| e.kind))
            .collect::<Result<Vec<_>, _>>(),
    )
    .await??;
    assert_eq!(
        kinds.iter().take(2).map(String::as_str).collect::<Vec<_>>(),
        ["run_submitted", "wave_started"],
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run_finished"),
        "{kinds:?}"
    );
    let waves = kinds.iter().filter(|k| *k == "wave_started").count();
    assert_eq!(waves, 3, "each wave once in the log: {kinds:?}");
    // b was out when the coordinator died: the log says it went out again.
    let resent = weft_tests::events_of(&client, &submitted.run_id, "task_redispatched").await?;
    let bodies: Vec<_> = resent.iter().map(|e| &e.body).collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["node"], "b");
    assert_eq!(bodies[0]["attempt"], 1);
    assert_eq!(bodies[0]["reason"], "coordinator_restarted");
    Ok(())
}

#[tokio::test]
async fn a_waiting_run_survives_a_restart_and_is_resumed_after_it() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let graph = GraphBundle::from_text(
        "approve.yaml",
        r#"
nodes:
  draft: { kind: script, run: [sh, -c, 'echo "{\"draft\": \"v1\"}"'], start: true, next: ok }
  ok: { kind: approval, prompt: "Publish {{ draft }}?", next: publish }
  publish: { kind: script, run: [sh, -c, 'echo "{\"published\": true}"'] }
"#,
    );
    let submitted = client.submit_bundle(graph, &json!({})).await?;
    wait_for_event(&client, &submitted.run_id, "waiting_for_input").await?;
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let waiting = client.status(&submitted.run_id).await?;
    assert_eq!(waiting.status, RunStatus::Waiting);
    assert_eq!(waiting.waiting[0].prompt, "Publish v1?");
    client
        .resume(&submitted.run_id, "ok", &json!("approve"), Some("ship it"))
        .await?;
    let done =
        tokio::time::timeout(Duration::from_secs(60), client.wait(&submitted.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["published"], true);
    assert_eq!(done.state["approved_comment"], "ship it");
    Ok(())
}

#[tokio::test]
async fn ended_runs_stay_queryable_after_a_restart() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let submitted = client.submit_bundle(slow_chain(), &json!({})).await?;
    let before = client.wait(&submitted.run_id).await?;
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let after = client.get(&submitted.run_id).await?;
    assert_eq!(after.status, RunStatus::Completed);
    assert_eq!(after.state, before.state);
    assert_eq!(after.event_count, before.event_count);
    let listed = client.list().await?;
    assert!(listed.iter().any(|r| r.run_id == submitted.run_id));
    Ok(())
}

/// `slow_chain`, each step also appending `RUN NODE` to `ledger` when it
/// starts: the executions, counted.
fn counted_chain(ledger: &std::path::Path) -> GraphBundle {
    let step = |node: &str, n: u32, next: &str| {
        format!(
            "  {node}: {{ kind: script, run: [sh, -c, 'echo \"$WEFT_RUN_ID $WEFT_NODE\" >> \"$LEDGER\"; sleep 0.3; echo \"{{\\\"n\\\": {n}}}\"'], env: {{ LEDGER: \"{}\" }}{next} }}\n",
            ledger.display()
        )
    };
    let text = format!(
        "state:\n  n: {{ type: integer, default: 0 }}\nnodes:\n{}{}{}",
        step("a", 1, ", start: true, next: b"),
        step("b", 2, ", next: c"),
        step("c", 3, "")
    );
    GraphBundle::from_text("chain.yaml", &text)
}

#[tokio::test]
async fn twenty_runs_ride_through_five_restarts_in_a_row() -> anyhow::Result<()> {
    use tokio_stream::StreamExt;
    let mut cluster = TestCluster::start()?;
    let slots = 4;
    cluster.add_worker("w", slots)?;
    cluster.wait_for_workers(&["w"]).await?;
    let ledger = cluster.dir().join("executions");
    let client = cluster.client().await?;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(
            client
                .submit_bundle(counted_chain(&ledger), &json!({}))
                .await?
                .run_id,
        );
    }
    let restarts = 5;
    for round in 0..restarts {
        // Some run has moved since the last restart: the storm hits runs
        // at every stage.
        let client = cluster.client().await?;
        let run = &ids[round * 4];
        wait_for_event(&client, run, "node_started").await?;
        cluster.restart_coordinator()?;
    }
    let client = cluster.client().await?;
    for id in &ids {
        let done = tokio::time::timeout(Duration::from_secs(60), client.wait(id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{id}: {:?}", done.error);
        assert_eq!(done.state["n"], 3, "{id}");
        // Its log: one entry per position, each step merged once, one end.
        let events: Vec<weft_client::Event> = client
            .watch(id, 0)
            .await?
            .collect::<Result<Vec<_>, _>>()
            .await?;
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "{id}: the log has gaps or repeats: {seqs:?}"
        );
        for node in ["a", "b", "c"] {
            let merged = events
                .iter()
                .filter(|e| e.kind == "node_finished" && e.body["node"] == node)
                .count();
            assert_eq!(merged, 1, "{id}: {node} merged {merged} times");
        }
        let ended = events.iter().filter(|e| e.kind == "run_finished").count();
        assert_eq!(ended, 1, "{id}: {ended} run_finished events");
    }
    // Executions: every step at least once; again only for what was in
    // flight at a restart (at most a worker's slots each time).
    let text = std::fs::read_to_string(&ledger)?;
    let mut executions = std::collections::BTreeMap::<&str, usize>::new();
    for line in text.lines() {
        *executions.entry(line).or_default() += 1;
    }
    for id in &ids {
        for node in ["a", "b", "c"] {
            let key = format!("{id} {node}");
            assert!(
                executions.get(key.as_str()).is_some_and(|&n| n >= 1),
                "{key} never ran"
            );
        }
    }
    let again = text.lines().count() - ids.len() * 3;
    assert!(
        again <= restarts * slots as usize,
        "{again} steps ran again over {restarts} restarts of {slots} slots"
    );
    Ok(())
}

#[tokio::test]
async fn a_failed_run_is_retried_after_a_restart() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let marker = std::env::temp_dir().join(format!("weft-durable-retry-{}", std::process::id()));
    std::fs::remove_file(&marker).ok();
    // Fails until the marker exists; the first attempt creates it.
    let graph = GraphBundle::from_text(
        "flaky.yaml",
        &format!(
            r#"
nodes:
  first: {{ kind: script, run: [sh, -c, 'echo "{{\"first\": 1}}"'], start: true, next: flaky }}
  flaky:
    kind: script
    run: [sh, -c, 'if [ -e "$1" ]; then echo "{{\"flaky\": \"fixed\"}}"; else touch "$1"; exit 5; fi', x, "{}"]
"#,
            marker.display()
        ),
    );
    let client = cluster.client().await?;
    let submitted = client.submit_bundle(graph, &json!({})).await?;
    let failed = client.wait(&submitted.run_id).await?;
    assert_eq!(failed.status, RunStatus::Failed);
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    client.retry(&submitted.run_id).await?;
    let done =
        tokio::time::timeout(Duration::from_secs(60), client.wait(&submitted.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["first"], 1);
    assert_eq!(done.state["flaky"], "fixed");
    std::fs::remove_file(&marker).ok();
    Ok(())
}

/// A map of script items, `concurrency` at a time, each leaving a line
/// with its index in `ran` and taking `seconds`, with `durability`.
fn logged_map(
    ran: &std::path::Path,
    durability: &str,
    concurrency: u32,
    seconds: &str,
) -> GraphBundle {
    GraphBundle::from_text(
        "logged-map.yaml",
        &format!(
            r#"
settings:
  durability: {durability}
nodes:
  fan:
    kind: map
    start: true
    over: "{{{{ items }}}}"
    as: item
    branch: work
    output_key: out
    collect_into: results
    max_concurrency: {concurrency}
  work:
    kind: script
    run: [sh, -c, 'echo "$WEFT_ITEM" >> "$1"; sleep {seconds}; echo "{{\"out\": $WEFT_ITEM}}"', x, "{}"]
"#,
            ran.display()
        ),
    )
}

/// A map stopped mid-way and started again, and what it must not redo.
struct MapRestart {
    /// The worker's slots, and the map's `max_concurrency`.
    slots: u32,
    /// The graph's durability mode.
    durability: &'static str,
    /// Seconds each item takes.
    seconds: &'static str,
    items: u32,
    /// Items seen finished before the stop.
    seen: usize,
    /// SIGTERM (and wait) rather than SIGKILL.
    clean: bool,
}

impl MapRestart {
    /// Runs the map, stops the coordinator once `seen` items were seen
    /// finished, starts it again, and checks that the run completes and
    /// that no item seen finished ran twice.
    async fn check(self) -> anyhow::Result<()> {
        use tokio_stream::StreamExt;
        let mut cluster = TestCluster::start()?;
        cluster.add_worker("w", self.slots)?;
        cluster.wait_for_workers(&["w"]).await?;
        let ran = std::env::temp_dir().join(format!(
            "weft-map-restart-{}-{}",
            std::process::id(),
            self.clean
        ));
        std::fs::remove_file(&ran).ok();
        let graph = logged_map(&ran, self.durability, self.slots, self.seconds);
        let client = cluster.client().await?;
        let items: Vec<u32> = (0..self.items).collect();
        let submitted = client
            .submit_bundle(graph, &json!({ "items": items }))
            .await?;
        let mut finished = Vec::new();
        let mut events = client.watch(&submitted.run_id, 0).await?;
        while finished.len() < self.seen {
            let event = tokio::time::timeout(Duration::from_secs(30), events.next())
                .await?
                .expect("the run goes on")?;
            if event.kind == "map_item_finished" {
                finished.push(event.body["index"].as_u64().expect("an index"));
            }
        }
        drop(events);
        if self.clean {
            cluster.restart_coordinator_cleanly().await?;
        } else {
            cluster.restart_coordinator()?;
        }
        let client = cluster.client().await?;
        let done =
            tokio::time::timeout(Duration::from_secs(60), client.wait(&submitted.run_id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        assert_eq!(done.state["results"], json!(items));
        let lines = std::fs::read_to_string(&ran)?;
        for index in &finished {
            let runs = lines.lines().filter(|l| *l == index.to_string()).count();
            assert_eq!(
                runs, 1,
                "item {index} finished before the stop and ran {runs} times:\n{lines}"
            );
        }
        std::fs::remove_file(&ran).ok();
        Ok(())
    }
}

#[tokio::test]
async fn a_map_cut_by_kill_9_runs_its_finished_items_only_once() -> anyhow::Result<()> {
    // Items seen finished are stored (with `sync`, an event is published
    // only once its checkpoint is on disk).
    MapRestart {
        slots: 4,
        durability: "sync",
        seconds: "0.5",
        items: 16,
        seen: 5,
        clean: false,
    }
    .check()
    .await
}

#[tokio::test]
async fn a_map_stopped_cleanly_runs_no_item_it_had_finished_again() -> anyhow::Result<()> {
    // `async`: watchers see an item finish at once, its checkpoint taken
    // in the background, deferred while items finish within 100 ms of the
    // last one. Pairs of items finish together, so the second of a pair
    // waits for a deferred checkpoint, which a clean stop takes on the way
    // out.
    MapRestart {
        slots: 2,
        durability: "async",
        seconds: "0.4",
        items: 12,
        seen: 4,
        clean: true,
    }
    .check()
    .await
}

#[tokio::test]
async fn a_loop_cut_by_kill_9_runs_its_finished_iterations_only_once() -> anyhow::Result<()> {
    use tokio_stream::StreamExt;
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let ran = std::env::temp_dir().join(format!("weft-durable-loop-{}", std::process::id()));
    std::fs::remove_file(&ran).ok();
    // Each execution of the body leaves a line with its iteration.
    let step = format!(
        "import json, sys, time\n\
         task = json.load(sys.stdin)\n\
         n = task['scope']['loop']['iteration']\n\
         open({:?}, 'a').write(f'{{n}}\\n')\n\
         time.sleep(0.3)\n\
         print(json.dumps({{'n': n}}))\n",
        ran.display().to_string()
    );
    let graph = GraphBundle::from_text(
        "slow-loop.yaml",
        r#"
state:
  n: { type: integer, default: 0 }
conditions:
  enough: "state.n >= 5"
nodes:
  count: { kind: loop, start: true, body: step, until: enough }
  step: { kind: script, run: [python3, step.py] }
"#,
    )
    .with_file("step.py", step.as_bytes(), 0o644);
    let client = cluster.client().await?;
    let submitted = client.submit_bundle(graph, &json!({})).await?;
    // Iterations seen ended are stored (with `sync`, an event is published
    // only once its checkpoint is on disk).
    let mut events = client.watch(&submitted.run_id, 0).await?;
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await?
            .expect("the run goes on")?;
        if event.kind == "loop_iteration" && event.body["iteration"] == 2 {
            break;
        }
    }
    drop(events);
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let done =
        tokio::time::timeout(Duration::from_secs(60), client.wait(&submitted.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["n"], 5);
    let lines = std::fs::read_to_string(&ran)?;
    for iteration in ["1", "2"] {
        let runs = lines.lines().filter(|l| *l == iteration).count();
        assert_eq!(
            runs, 1,
            "iteration {iteration} ended before the crash and ran {runs} times:\n{lines}"
        );
    }
    std::fs::remove_file(&ran).ok();
    Ok(())
}

/// What `turn` in [`conversation`] appends at turn `n` (accents and a
/// check mark, so a delta's cut must fall between characters).
fn said(n: u64) -> String {
    format!("turn {n}: héllo ✓ {}", "x".repeat(300))
}

/// A loop of `turns` turns, each appending [`said`] to `messages` and
/// rewriting `summary`, then an approval that holds the run.
fn conversation(turns: u64) -> GraphBundle {
    let turn = "import json, sys\n\
         state = json.load(sys.stdin)['state']\n\
         n = state['turns'] + 1\n\
         said = f'turn {n}: héllo ✓ ' + 'x' * 300\n\
         print(json.dumps({'messages': state['messages'] + [said], 'turns': n,\n\
                           'summary': {'last': n, 'words': 7 * n}}))\n";
    GraphBundle::from_text(
        "chat.yaml",
        &format!(
            r#"
settings: {{ max_steps: 500 }}
state:
  messages: {{ type: array, default: [] }}
  turns: {{ type: integer, default: 0 }}
  summary: {{ type: object, default: {{}} }}
conditions:
  enough: "state.turns >= {turns}"
nodes:
  talk: {{ kind: loop, start: true, body: turn, until: enough, max_iterations: 100, next: keep }}
  turn: {{ kind: script, run: [python3, turn.py] }}
  keep: {{ kind: approval, prompt: "Keep {{{{ turns }}}} turns?" }}
"#
        ),
    )
    .with_file("turn.py", turn.as_bytes(), 0o644)
}

/// A conversation is stored as a base and the messages each turn added
/// (inside the loop's progress while it runs, in its field once the loop
/// ends); read back after `kill -9` — mid-loop, then while it waits — its
/// state is the one it had, exactly, and the new coordinator writes far
/// less than whole rewrites would.
#[tokio::test]
async fn a_growing_field_stored_as_deltas_is_restored_exactly() -> anyhow::Result<()> {
    let turns = 40;
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let submitted = client
        .submit_bundle(conversation(turns), &json!({}))
        .await?;
    let id = submitted.run_id.clone();
    weft_tests::until_event(&client, &id, "turn 12 ended", |event| {
        event.kind == "loop_iteration" && event.body["iteration"] == 12
    })
    .await?;
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    wait_for_event(&client, &id, "waiting_for_input").await?;
    let waiting = client.get(&id).await?;
    assert_eq!(waiting.status, RunStatus::Waiting);
    let expected: Vec<String> = (1..=turns).map(said).collect();
    assert_eq!(waiting.state["messages"], json!(expected));
    assert_eq!(
        waiting.state["summary"],
        json!({"last": turns, "words": 7 * turns})
    );
    // This coordinator stored turns 13 to 40 (at least): rewritten whole,
    // each would be its list again (twice while the loop runs: in the
    // loop's state and in the task out).
    let metrics = cluster.metrics()?;
    // Fields and progress alike, whole or as deltas.
    let bytes = |form: &str| checkpoint_bytes(&metrics, Some(form));
    let rewrites: usize = (12..=turns as usize)
        .map(|n| json!(&expected[..n]).to_string().len())
        .sum();
    assert!(bytes("delta") > 0.0, "no deltas were written:\n{metrics}");
    assert!(
        bytes("whole") + bytes("delta") < rewrites as f64 * 0.75,
        "{} bytes whole and {} as deltas, where rewrites are {rewrites}",
        bytes("whole"),
        bytes("delta")
    );
    // Read back from its base and deltas, the waiting run is the same.
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let restored = client.get(&id).await?;
    assert!(restored == waiting, "not restored exactly: {restored:?}");
    client.resume(&id, "keep", &json!("approve"), None).await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["messages"], json!(expected));
    Ok(())
}

/// A graph whose first node waits for `file` to exist, then writes `done`.
fn waits_for(file: &std::path::Path) -> weft_client::GraphBundle {
    weft_client::GraphBundle::from_text(
        "waits.yaml",
        &format!(
            "nodes:\n  a: {{ kind: script, start: true, run: [sh, -c, 'while [ ! -e {} ]; do sleep 0.05; done; echo \"{{\\\"done\\\": true}}\"'] }}\n",
            file.display()
        ),
    )
}

#[tokio::test]
async fn a_run_the_coordinator_died_stepping_twice_is_quarantined_and_the_rest_go_on()
-> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let (poison_gate, other_gate) = (cluster.dir().join("poison"), cluster.dir().join("other"));
    let poison = client
        .submit_bundle(waits_for(&poison_gate), &json!({}))
        .await?;
    let other = client
        .submit_bundle(waits_for(&other_gate), &json!({}))
        .await?;
    for run in [&poison.run_id, &other.run_id] {
        weft_tests::wait_for_event(&client, run, "node_started").await?;
    }
    // The coordinator dies while stepping the poison run: what a crash
    // inside a step leaves in the data directory (the marks' own unit
    // tests show a step leaves it until it returns).
    let died_stepping = |cluster: &mut TestCluster| -> anyhow::Result<()> {
        cluster.stop_coordinator()?;
        std::fs::write(
            cluster.data_dir().join("steps-in-flight"),
            format!("{}\n", poison.run_id),
        )?;
        cluster.restart_coordinator()
    };
    died_stepping(&mut cluster)?;
    cluster
        .wait_for_log(
            "coordinator",
            "its steps now run alone, and it is quarantined if it happens again",
        )
        .await?;
    // Once is not enough: the run goes on, recovered.
    let client = cluster.client().await?;
    let status = client.status(&poison.run_id).await?;
    assert_eq!(status.status, RunStatus::Running, "{:?}", status.error);

    died_stepping(&mut cluster)?;
    let client = cluster.client().await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&poison.run_id)).await??;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.expect("an error");
    assert_eq!(error.kind, "Quarantined");
    assert!(
        error
            .message
            .contains("the coordinator stopped 2 times while stepping this run"),
        "{}",
        error.message
    );
    // Everything else is served: the other run, and a new one.
    std::fs::write(&other_gate, "")?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&other.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    std::fs::write(&poison_gate, "")?;
    let again = client
        .submit_bundle(waits_for(&poison_gate), &json!({}))
        .await?;
    let done = tokio::time::timeout(Duration::from_secs(60), client.wait(&again.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    // A restart with no step under way charges nobody: the marks are
    // empty between steps.
    let charged = |cluster: &TestCluster| {
        cluster
            .log("coordinator")
            .matches("the coordinator stopped while stepping this run")
            .count()
    };
    assert_eq!(charged(&cluster), 2);
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let status = client.status(&other.run_id).await?;
    assert_eq!(status.status, RunStatus::Completed);
    assert_eq!(charged(&cluster), 2);
    Ok(())
}

/// What a coordinator's checkpoints have written so far, as its
/// `/metrics` say: of the form `form` (`whole`, `delta`), or all.
fn checkpoint_bytes(metrics: &str, form: Option<&str>) -> f64 {
    let form = form.map(|form| format!("form=\"{form}\""));
    metrics
        .lines()
        .filter(|l| l.starts_with("weft_checkpoint_bytes_total{"))
        .filter(|l| form.as_ref().is_none_or(|form| l.contains(form)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What the coordinator process has had written to storage so far.
fn disk_writes(cluster: &TestCluster) -> Option<u64> {
    weft_tests::written_to_storage(&cluster.coordinator_pid()?.to_string()).ok()
}

/// A 400-turn chat through real processes writes about what it adds, not
/// its whole conversation again at every checkpoint: the progress a loop
/// keeps while it runs is stored as what changed whether its text repeats
/// itself (where a byte anchor is found many times) or not. Whole
/// rewrites would come to hundreds of MiB; what it adds is 0.4 MB.
#[tokio::test]
async fn a_long_chat_writes_about_what_it_adds_whatever_its_text() -> anyhow::Result<()> {
    let turns = 400;
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    for repetitive in [true, false] {
        let before = checkpoint_bytes(&cluster.metrics()?, None);
        let on_disk = disk_writes(&cluster);
        let started = std::time::Instant::now();
        let run = client
            .submit_bundle(
                weft_tests::script_chat(turns, repetitive, "sync"),
                &json!({}),
            )
            .await?;
        let done =
            tokio::time::timeout(Duration::from_secs(240), client.wait(&run.run_id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        let messages = done.state["messages"].as_array().expect("a list");
        assert_eq!(messages.len() as u64, turns);
        let state = done.state.to_string().len() as f64;
        let written = checkpoint_bytes(&cluster.metrics()?, None) - before;
        // What reached the disk (the store's log and pages) is shown, not
        // held: it depends on the file system.
        let on_disk = disk_writes(&cluster)
            .zip(on_disk)
            .map(|(now, then)| now - then);
        eprintln!(
            "{turns} turns of {} text in {:?}: checkpoints wrote {:.2} MiB ({:.2} MiB to disk) for a state of {:.2} MiB",
            if repetitive { "repetitive" } else { "unique" },
            started.elapsed(),
            written / f64::from(1 << 20),
            on_disk.unwrap_or(0) as f64 / f64::from(1 << 20),
            state / f64::from(1 << 20),
        );
        assert!(
            written < 10.0 * state,
            "{written} bytes written for a conversation of {state} bytes ({} text)",
            if repetitive { "repetitive" } else { "unique" }
        );
    }
    Ok(())
}
