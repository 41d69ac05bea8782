//! The command line's rough edges (issue 22, item 5): usage mistakes are
//! exit status 2 with one line saying what is wrong, status words are
//! lowercase, `resume` names the node that does wait and reads `@FILE`,
//! and `watch` exits 0 for any run that exists.

use std::process::{Command, Output, Stdio};

use weft_tests::{TestCluster, binary, repo};

fn weft(cluster: Option<&TestCluster>, args: &[&str]) -> Output {
    let mut command = Command::new(binary("weft"));
    // Hermetic: no test shares (or leaves) a local cluster.
    command.env("WEFT_EPHEMERAL", "1");
    if let Some(cluster) = cluster {
        command.args(["--coordinator", cluster.url()]);
    }
    command
        .args(args)
        .stdin(Stdio::null())
        .env_remove("WEFT_COORDINATOR")
        .env_remove("WEFT_TOKEN")
        .output()
        .expect("weft runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

/// A coordinator with one script worker, joined.
async fn cluster_with_a_worker() -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    Ok(cluster)
}

/// The `run_id` of a `--json` output.
fn run_id(out: &Output) -> String {
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("one JSON object")["run_id"]
        .as_str()
        .expect("a run id")
        .to_owned()
}

#[test]
fn usage_mistakes_exit_two_saying_what_is_wrong() {
    let no_scheme = weft(None, &["--coordinator", "127.0.0.1:7700", "runs"]);
    assert_eq!(no_scheme.status.code(), Some(2), "{}", stderr(&no_scheme));
    assert_eq!(
        stderr(&no_scheme),
        "error: '127.0.0.1:7700' is not a coordinator URL: it has no scheme (write http://127.0.0.1:7700, or https://127.0.0.1:7700 for TLS)"
    );
    let graph = repo().join("examples/critique-loop.yaml");
    let no_workers = weft(None, &["run", graph.to_str().unwrap(), "--workers", "0"]);
    assert_eq!(no_workers.status.code(), Some(2));
    assert!(
        stderr(&no_workers).contains("--workers"),
        "{}",
        stderr(&no_workers)
    );
    let no_limit = weft(
        None,
        &[
            "--coordinator",
            "http://127.0.0.1:1",
            "runs",
            "--limit",
            "0",
        ],
    );
    assert_eq!(no_limit.status.code(), Some(2));
    assert!(
        stderr(&no_limit).contains("--limit"),
        "{}",
        stderr(&no_limit)
    );
    let graph = graph.to_str().unwrap();
    for command in ["validate", "diagram"] {
        let out = weft(
            None,
            &[command, graph, "--coordinator", "http://127.0.0.1:7700"],
        );
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert_eq!(
            stderr(&out),
            "error: validate and diagram read the graph file alone: leave out --coordinator"
        );
        // WEFT_COORDINATOR, set for every command, is no mistake.
        let quiet = Command::new(binary("weft"))
            // Hermetic: no test shares (or leaves) a local cluster.
            .env("WEFT_EPHEMERAL", "1")
            .args([command, graph])
            .env("WEFT_COORDINATOR", "http://127.0.0.1:7700")
            .output()
            .unwrap();
        assert_eq!(
            quiet.status.code(),
            Some(0),
            "{command}: {}",
            stderr(&quiet)
        );
    }
}

#[tokio::test]
async fn resume_names_the_waiting_node_reads_files_and_speaks_lowercase() -> anyhow::Result<()> {
    let cluster = cluster_with_a_worker().await?;
    let dir = std::env::temp_dir().join(format!("weft-cli-edges-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let graph = dir.join("ask.yaml");
    std::fs::write(
        &graph,
        "state:\n  note: { type: object }\nnodes:\n  ask: { kind: input, output_key: note, start: true, end: true }\n",
    )?;
    let run = weft(Some(&cluster), &["run", graph.to_str().unwrap(), "--json"]);
    assert_eq!(run.status.code(), Some(3), "{}", stderr(&run));
    let run_id = run_id(&run);

    // `weft watch` of a waiting run shows it and exits 0.
    let watched = weft(Some(&cluster), &["watch", &run_id]);
    assert_eq!(watched.status.code(), Some(0), "{}", stderr(&watched));

    let wrong = weft(Some(&cluster), &["resume", &run_id, "aks", "{}"]);
    assert_eq!(wrong.status.code(), Some(1), "{}", stderr(&wrong));
    assert!(
        stderr(&wrong).ends_with("node 'aks' is not waiting for input (the node waiting is 'ask')"),
        "{}",
        stderr(&wrong)
    );

    let answer = dir.join("answer.json");
    std::fs::write(&answer, "{\"from\": \"a file\"}\n")?;
    let at = format!("@{}", answer.display());
    let resumed = weft(Some(&cluster), &["resume", &run_id, "ask", &at]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).starts_with(&format!("resumed ask; run {run_id} is ")),
        "{}",
        stderr(&resumed)
    );
    let status = stderr(&resumed);
    let word = status.rsplit(' ').next().unwrap_or_default();
    assert_eq!(word, word.to_lowercase(), "{status}");
    let info = cluster.client().await?.wait(&run_id).await?;
    assert_eq!(info.state["note"], serde_json::json!({"from": "a file"}));

    let missing = weft(
        Some(&cluster),
        &["resume", &run_id, "ask", "@/nonexistent/answer.json"],
    );
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).starts_with("error: cannot read answer file '/nonexistent/answer.json'")
    );
    // Retrying a completed run says so in lowercase.
    let retry = weft(Some(&cluster), &["retry", &run_id]);
    assert!(
        stderr(&retry).contains("(this one is completed)"),
        "{}",
        stderr(&retry)
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[tokio::test]
async fn logs_say_each_run_and_carry_no_colour_codes_in_a_file() -> anyhow::Result<()> {
    let cluster = cluster_with_a_worker().await?;
    let graph = repo().join("examples/critique-loop.yaml");
    let run = weft(
        Some(&cluster),
        &[
            "run",
            graph.to_str().unwrap(),
            "--input",
            r#"{"topic": "logs"}"#,
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    cluster.wait_for_log("coordinator", "run completed").await?;
    let coordinator = cluster.log("coordinator");
    assert!(coordinator.contains("run started"), "{coordinator}");
    for (name, log) in [("coordinator", coordinator), ("w", cluster.log("w"))] {
        assert!(!log.is_empty(), "{name} logged nothing");
        assert!(
            !log.contains('\u{1b}'),
            "{name}'s log has colour codes:\n{log}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_worker_that_cannot_reach_its_coordinator_names_the_url() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = std::env::temp_dir().join(format!("weft-unreachable-{}.log", std::process::id()));
    let mut worker = Command::new(binary("worker"))
        .args([
            "--coordinator",
            &format!("http://127.0.0.1:{port}"),
            "--name",
            "lost",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let wanted = format!("cannot connect to http://127.0.0.1:{port}/");
    let found = weft_tests::wait_until(weft_tests::PATIENCE, || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains(&wanted))
    })
    .await;
    worker.kill()?;
    worker.wait()?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    std::fs::remove_file(&log).ok();
    assert!(
        found.is_ok(),
        "the worker's log does not name the URL:\n{text}"
    );
    Ok(())
}

#[test]
fn a_second_coordinator_on_a_held_data_directory_fails_before_it_says_it_listens() {
    let cluster = TestCluster::start().unwrap();
    let second = Command::new(binary("coordinator"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(cluster.data_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let said = String::from_utf8_lossy(&second.stdout);
    assert!(!said.contains("listening"), "it said it listens: {said}");
    let error = stderr(&second);
    assert!(error.contains("in use"), "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");
}

#[tokio::test]
async fn a_script_file_that_is_not_there_is_refused_before_anything_runs() -> anyhow::Result<()> {
    let cluster = cluster_with_a_worker().await?;
    let dir = std::env::temp_dir().join(format!("weft-missing-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let graph = dir.join("hello.yaml");
    std::fs::write(
        &graph,
        "nodes:\n  hello: { kind: script, start: true, run: [python3, scripts/hello.py] }\n",
    )?;
    let wanted =
        "node 'hello': `run` names the file 'scripts/hello.py', which is not beside the graph";
    let validated = weft(None, &["validate", graph.to_str().unwrap()]);
    assert_eq!(validated.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&validated.stdout).contains(wanted),
        "{}",
        String::from_utf8_lossy(&validated.stdout)
    );
    let run = weft(Some(&cluster), &["run", graph.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains(wanted), "{}", stderr(&run));
    // Once the file is there, the same graph runs.
    std::fs::create_dir_all(dir.join("scripts"))?;
    std::fs::write(
        dir.join("scripts/hello.py"),
        "print('{\"greeting\": \"hi\"}')\n",
    )?;
    let run = weft(Some(&cluster), &["run", graph.to_str().unwrap(), "--json"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// The `type`s of `weft watch RUN --json`'s lines.
fn watched_kinds(cluster: &TestCluster, run_id: &str) -> Vec<String> {
    let out = weft(Some(cluster), &["watch", run_id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            event["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn runs_filter_and_time_and_watch_replays_a_retry() -> anyhow::Result<()> {
    let cluster = cluster_with_a_worker().await?;
    let dir = std::env::temp_dir().join(format!("weft-runs-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let marker = dir.join("failed-once");
    let flaky = dir.join("flaky.yaml");
    std::fs::write(
        &flaky,
        format!(
            "name: flaky\nnodes:\n  second:\n    kind: script\n    start: true\n    run: [sh, -c, 'if [ -e {m} ]; then echo {{}}; else touch {m}; exit 1; fi']\n",
            m = marker.display()
        ),
    )?;
    let steady = dir.join("steady.yaml");
    std::fs::write(
        &steady,
        "name: steady\nnodes:\n  one: { kind: script, start: true, run: [sh, -c, 'echo {}'] }\n",
    )?;
    for _ in 0..2 {
        let out = weft(Some(&cluster), &["run", steady.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let failed = weft(Some(&cluster), &["run", flaky.to_str().unwrap(), "--json"]);
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    let flaky_id = run_id(&failed);

    let listed = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["runs", "--json"];
        all.extend_from_slice(args);
        let out = weft(Some(&cluster), &all);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let only_failed = listed(&["--status", "failed"]);
    let runs = only_failed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{only_failed}");
    assert_eq!(runs[0]["run_id"], flaky_id.as_str());
    assert!(runs[0]["started"].as_str().unwrap().ends_with('Z'));
    assert!(runs[0]["duration_ms"].as_i64().unwrap() >= 0);
    let steady_runs = listed(&["--graph", "steady"]);
    assert_eq!(
        steady_runs["runs"].as_array().unwrap().len(),
        2,
        "{steady_runs}"
    );
    let first_page = listed(&["--graph", "steady", "--limit", "1"]);
    assert_eq!(first_page["runs"].as_array().unwrap().len(), 1);
    assert!(first_page["next"].is_string(), "{first_page}");
    let table = weft(Some(&cluster), &["runs", "--status", "completed"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.lines()
            .all(|l| l.contains("completed") && l.contains("steady")),
        "{text}"
    );
    let bad = weft(Some(&cluster), &["runs", "--status", "done"]);
    assert_eq!(bad.status.code(), Some(2));

    // Retried, the run completes; watching it from the start shows the
    // failure, the retry and the end, not just the first failure.
    let retry = weft(Some(&cluster), &["retry", &flaky_id]);
    assert_eq!(retry.status.code(), Some(0), "{}", stderr(&retry));
    cluster.client().await?.wait(&flaky_id).await?;
    let kinds = watched_kinds(&cluster, &flaky_id);
    let finished: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == "run_finished")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(finished.len(), 2, "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("run_finished"));
    assert!(kinds.contains(&"run_retried".to_owned()), "{kinds:?}");
    let human = weft(Some(&cluster), &["watch", &flaky_id]);
    assert!(
        stderr(&human).contains("retried by anonymous"),
        "{}",
        stderr(&human)
    );
    assert!(stderr(&human).contains("completed"), "{}", stderr(&human));
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[tokio::test]
async fn delete_removes_an_ended_run_for_good_and_refuses_a_live_one() -> anyhow::Result<()> {
    let mut cluster = cluster_with_a_worker().await?;
    let dir = std::env::temp_dir().join(format!("weft-delete-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let quick = dir.join("quick.yaml");
    std::fs::write(
        &quick,
        "nodes:\n  one: { kind: script, start: true, run: [sh, -c, 'echo {}'] }\n",
    )?;
    let ask = dir.join("ask.yaml");
    std::fs::write(&ask, "nodes:\n  ok: { kind: approval, start: true }\n")?;
    let id_of = |out: &Output| -> String {
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let done = id_of(&weft(
        Some(&cluster),
        &["run", quick.to_str().unwrap(), "--json"],
    ));
    let waiting = id_of(&weft(
        Some(&cluster),
        &["run", ask.to_str().unwrap(), "--json"],
    ));

    let refused = weft(Some(&cluster), &["delete", &waiting]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("has not ended"),
        "{}",
        stderr(&refused)
    );
    let deleted = weft(Some(&cluster), &["delete", &done]);
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    assert_eq!(stderr(&deleted), format!("deleted run {done}"));
    let gone = weft(Some(&cluster), &["status", &done]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(stderr(&gone).contains(&format!("unknown run '{done}'")));

    // Gone from the store too: a restarted coordinator does not bring it back.
    cluster.restart_coordinator()?;
    let after = weft(Some(&cluster), &["status", &done]);
    assert_eq!(after.status.code(), Some(1), "{}", stderr(&after));
    let still = weft(Some(&cluster), &["status", &waiting]);
    assert_eq!(still.status.code(), Some(0), "{}", stderr(&still));
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[test]
fn a_misspelt_input_key_is_warned_about() {
    let dir = std::env::temp_dir().join(format!("weft-input-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("count.yaml");
    std::fs::write(
        &graph,
        "state:\n  n: { type: integer, default: 1 }\nnodes:\n  one: { kind: script, start: true, run: [sh, -c, 'echo {}'] }\n",
    )
    .unwrap();
    let out = weft(
        None,
        &["run", graph.to_str().unwrap(), "--input", r#"{"nn": 3}"#],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "warning: input key 'nn' is not a field `state:` declares (did you mean 'n'?); it is kept in the state as given"
        ),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn validate_compiles_the_python_files_a_graph_names() {
    let dir = std::env::temp_dir().join(format!("weft-py-compile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("fn.yaml");
    std::fs::write(
        &graph,
        "functions: helpers.py\nnodes:\n  a: { kind: function, start: true, end: true, callable: go }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("helpers.py"),
        "import json\n\ndef go(state:\n    return {}\n",
    )
    .unwrap();
    let out = weft(None, &["validate", graph.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(out.status.code(), Some(2), "{shown}");
    // The syntax error, with its file and line, and no cascade: `go` is
    // still a function of the file.
    assert_eq!(
        shown,
        "error: helpers.py, line 3: the Python file does not compile: '(' was never closed: def go(state:"
    );

    // Without a python3 to compile with, validate says so.
    let empty = dir.join("no-python");
    std::fs::create_dir_all(&empty).unwrap();
    let mut command = Command::new(binary("weft"));
    let out = command
        .args(["validate", graph.to_str().unwrap()])
        .env("PATH", &empty)
        .env("WEFT_EPHEMERAL", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("there is no python3 on this machine's PATH, so the Python files (helpers.py) were not compiled"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn diagram_draws_svg_for_the_viewer_with_every_node_once() {
    let graph = repo().join("examples/critique-loop.yaml");
    let out = weft(None, &["diagram", "--svg", graph.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg}"
    );
    for node in ["load_rubric", "draft", "critique", "publish"] {
        assert_eq!(
            svg.matches(&format!("data-node=\"{node}\"")).count(),
            1,
            "{node}: {svg}"
        );
    }
    assert!(svg.contains("↺ critique → draft when needs_work"), "{svg}");
}
