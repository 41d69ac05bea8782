//! `weft` against a real cluster: `--json` output and exit statuses
//! (SPEC section 12).

use std::process::{Command, Output, Stdio};

use serde_json::Value;
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
        .output()
        .expect("weft runs")
}

fn json_of(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().count(),
        1,
        "exactly one JSON object on stdout: {text}"
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn example(name: &str) -> String {
    repo().join("examples").join(name).display().to_string()
}

#[tokio::test]
async fn waiting_run_exits_three_then_resume_completes_it() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let out = weft(
        Some(&cluster),
        &[
            "run",
            &example("review-approval.yaml"),
            "--json",
            "--input",
            r#"{"title": "Weft"}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waiting = json_of(&out);
    assert_eq!(waiting["status"], "waiting");
    assert_eq!(waiting["waiting"][0]["node"], "approve");
    assert_eq!(waiting["waiting"][0]["kind"], "approval");
    assert!(waiting.get("error").is_none());
    let run_id = waiting["run_id"].as_str().unwrap().to_owned();

    let out = weft(
        Some(&cluster),
        &["resume", &run_id, "approve", "approve", "--comment", "fine"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = cluster.client().await?;
    client.wait(&run_id).await?;
    let out = weft(Some(&cluster), &["status", &run_id, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let status = json_of(&out);
    assert_eq!(status["status"], "completed");
    assert_eq!(status["state"]["approved_comment"], "fine");
    let keys: Vec<&str> = status
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["run_id", "status", "state"]);
    Ok(())
}

#[tokio::test]
async fn failed_run_exits_one_with_the_error_object() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let dir = std::env::temp_dir().join(format!("weft-cli-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let graph = dir.join("fails.yaml");
    std::fs::write(
        &graph,
        "nodes:\n  boom:\n    kind: script\n    start: true\n    run: [python3, -c, \"import sys; print('bad', file=sys.stderr); sys.exit(2)\"]\n",
    )?;
    let out = weft(Some(&cluster), &["run", graph.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let result = json_of(&out);
    assert_eq!(result["status"], "failed");
    assert_eq!(result["error"]["kind"], "ExecutionError");
    assert_eq!(result["error"]["node"], "boom");
    assert!(
        result["error"]["message"].as_str().unwrap().contains("bad"),
        "{result}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test]
async fn detach_prints_the_run_id_and_returns() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let out = weft(
        Some(&cluster),
        &[
            "run",
            &example("parallel-findings.yaml"),
            "--detach",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let detached = json_of(&out);
    let run_id = detached["run_id"].as_str().expect("a run id");
    assert_eq!(detached.as_object().unwrap().len(), 1);
    let done = cluster.client().await?.wait(run_id).await?;
    assert_eq!(
        done.state["report"],
        "plan: everything; web: three blog posts; papers: two surveys"
    );
    Ok(())
}

#[test]
fn unreachable_coordinator_exits_four_and_invalid_graph_exits_two() {
    let out = Command::new(binary("weft"))
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
        .args([
            "--coordinator",
            "http://127.0.0.1:1",
            "run",
            &example("parallel-findings.yaml"),
            "--json",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("weft runs");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the coordinator"));
    let invalid = repo().join("graph/tests/fixtures/invalid/cycle.yaml");
    let out = weft(None, &["run", invalid.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cycle through forward edges"));
    let out = weft(
        None,
        &["run", &example("parallel-findings.yaml"), "--detach"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "--detach without a coordinator is a usage error"
    );
}

#[test]
fn embedded_cluster_runs_an_example_with_json_output() {
    let out = weft(
        None,
        &[
            "run",
            &example("research-map.yaml"),
            "--json",
            "--workers",
            "3",
            "--input",
            r#"{"subjects": ["a", "b"]}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = json_of(&out);
    assert_eq!(result["status"], "completed");
    assert_eq!(
        result["state"]["research_results"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// On a terminal, `weft run` asks approval questions at the prompt. The
/// terminal is a real pseudo-terminal from `script` (util-linux).
#[test]
fn interactive_run_asks_at_the_prompt() {
    let command = format!(
        "{} run {} --input '{{\"title\": \"T\"}}'",
        binary("weft").display(),
        example("review-approval.yaml")
    );
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("WEFT_COORDINATOR")
        .env("WEFT_EPHEMERAL", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) runs");
    // Reject once (the graph revises and asks again), then approve.
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"r\ntoo short\na\n\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        text.matches("approve asks: Publish 'T'?").count(),
        2,
        "{text}"
    );
    assert!(text.contains("\"approved\": true"), "{text}");
    assert!(text.contains("\"revisions\": 1"), "{text}");
    assert!(text.contains("revised: too short"), "{text}");
}

#[test]
fn watch_shows_waves_nodes_and_skips() {
    let out = weft(None, &["run", &example("critique-loop.yaml"), "--watch"]);
    assert_eq!(out.status.code(), Some(0));
    let progress = String::from_utf8_lossy(&out.stderr);
    for line in [
        "wave 1: load_rubric, draft",
        "  ✓ load_rubric",
        "wave 2: critique",
        "  ↺ critique → draft",
        "wave 7: publish",
    ] {
        assert!(
            progress.contains(line),
            "{line:?} missing from:\n{progress}"
        );
    }
}

#[test]
fn the_writer_critic_loop_example_runs_until_the_critic_approves() {
    let out = weft(
        None,
        &[
            "run",
            &example("writer-critic.yaml"),
            "--watch",
            "--input",
            r#"{"topic": "Weft"}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"verdict\": \"approved\""), "{text}");
    assert!(text.contains("\"rounds\": 3"), "{text}");
    let progress = String::from_utf8_lossy(&out.stderr);
    for line in [
        "wave 1: refine",
        "  ↻ refine iteration 1/5 again",
        "  ↻ refine iteration 3/5 done",
        "wave 2: publish",
    ] {
        assert!(
            progress.contains(line),
            "{line:?} missing from:\n{progress}"
        );
    }
}

#[tokio::test]
async fn retry_reruns_the_failed_wave_and_runs_lists_the_run() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let marker = std::env::temp_dir().join(format!("weft-retry-{}", std::process::id()));
    std::fs::remove_file(&marker).ok();
    let dir = std::env::temp_dir().join(format!("weft-cli-retry-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let graph = dir.join("flaky.yaml");
    // Fails until the marker exists; the first attempt creates it.
    std::fs::write(
        &graph,
        format!(
            "nodes:\n  first:\n    kind: script\n    start: true\n    next: flaky\n    run: [python3, -c, \"print('{{\\\"first\\\": 1}}')\"]\n  flaky:\n    kind: script\n    run: [python3, -c, \"import os, sys; p = sys.argv[1]; ok = os.path.exists(p); open(p, 'w').close(); print('{{\\\"flaky\\\": \\\"fixed\\\"}}') if ok else sys.exit(5)\", {}]\n",
            marker.display()
        ),
    )?;
    let out = weft(Some(&cluster), &["run", graph.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let failed = json_of(&out);
    assert_eq!(failed["error"]["node"], "flaky");
    let run_id = failed["run_id"].as_str().unwrap().to_owned();

    let out = weft(Some(&cluster), &["retry", &run_id]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = cluster.client().await?.wait(&run_id).await?;
    assert_eq!(done.state["first"], 1);
    assert_eq!(done.state["flaky"], "fixed");

    let out = weft(Some(&cluster), &["runs"]);
    assert_eq!(out.status.code(), Some(0));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains(&run_id) && listing.contains("completed"),
        "{listing}"
    );
    std::fs::remove_dir_all(dir).ok();
    std::fs::remove_file(marker).ok();
    Ok(())
}

/// Writes `yaml` to a fresh file and returns its path.
fn graph_file(name: &str, yaml: &str) -> String {
    let path = std::env::temp_dir().join(format!("weft-cli-{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("graph written");
    path.display().to_string()
}

#[tokio::test]
async fn status_shows_what_a_run_waits_for_until_a_worker_hosts_it() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    let graph = graph_file(
        "unhosted",
        "nodes:\n  bump: { kind: task, handler: increment, start: true }\n",
    );
    let out = weft(
        Some(&cluster),
        &[
            "run",
            &graph,
            "--input",
            r#"{"counter": 1}"#,
            "--detach",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = json_of(&out)["run_id"]
        .as_str()
        .expect("a run id")
        .to_owned();

    let client = cluster.client().await?;
    weft_tests::wait_for_event(&client, &run_id, "task_unhosted").await?;
    let status = json_of(&weft(Some(&cluster), &["status", &run_id, "--json"]));
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(
        status["unhosted"],
        serde_json::json!([{"node": "bump", "needs": "handler 'increment'", "tasks": 1}]),
        "{status}"
    );
    let text = weft(Some(&cluster), &["status", &run_id]);
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(
        stderr.contains("waits for a worker: node 'bump' needs handler 'increment'"),
        "{stderr}"
    );

    cluster.add_test_worker("w", 1, None)?;
    let done = client.wait(&run_id).await?;
    assert_eq!(done.state["counter"], 2);
    let status = json_of(&weft(Some(&cluster), &["status", &run_id, "--json"]));
    assert_eq!(status["status"], "completed", "{status}");
    assert!(status.get("unhosted").is_none(), "{status}");
    std::fs::remove_file(graph).ok();
    Ok(())
}

#[tokio::test]
async fn the_run_timeout_bounds_a_wait_for_a_worker() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let graph = graph_file(
        "unhosted-timeout",
        "settings: { timeout: 1s }\nnodes:\n  bump: { kind: task, handler: increment, start: true }\n",
    );
    let out = weft(Some(&cluster), &["run", &graph, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = json_of(&out);
    assert_eq!(result["status"], "failed", "{result}");
    assert_eq!(result["error"]["kind"], "RunTimeout", "{result}");
    assert_eq!(
        result["error"]["message"],
        "the run's deadline passed while it waited for a worker: node 'bump' needs handler 'increment'",
        "{result}"
    );
    std::fs::remove_file(graph).ok();
    Ok(())
}

#[test]
fn a_closed_stdout_ends_the_output_quietly_with_the_commands_own_status() {
    let mut child = Command::new(binary("weft"))
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
        .args(["run", &example("parallel-findings.yaml"), "--json"])
        .env_remove("WEFT_COORDINATOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weft runs");
    // The reader goes away before weft writes its result (`weft … | head -0`).
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("weft ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_bundled_link_out_of_the_graph_directory_is_refused() {
    let root = std::env::temp_dir().join(format!("weft-cli-links-{}", std::process::id()));
    let dir = root.join("graph");
    std::fs::create_dir_all(dir.join("scripts")).expect("dirs");
    std::fs::write(root.join("credentials"), "aws_secret_access_key = hunter2").expect("file");
    std::os::unix::fs::symlink(root.join("credentials"), dir.join("scripts/x.py")).expect("link");
    let graph = dir.join("g.yaml");
    std::fs::write(
        &graph,
        "nodes:\n  a: { kind: script, run: [python3, scripts/x.py], start: true }\n",
    )
    .expect("graph");
    let out = weft(None, &["run", graph.to_str().expect("utf-8"), "--json"]);
    std::fs::remove_dir_all(&root).ok();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'scripts/x.py' resolves to") && stderr.contains("--allow-outside-links"),
        "{stderr}"
    );
}

#[tokio::test]
async fn run_watch_says_a_step_was_cached_and_no_cache_runs_it() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let graph = cluster.dir().join("cached.yaml");
    std::fs::write(
        &graph,
        r#"
name: cached
state:
  topic: { type: string }
nodes:
  draft:
    kind: script
    start: true
    end: true
    run: [sh, -c, 'echo "{\"text\": \"drafted\"}"']
    cache: { key: "{{ topic }}", ttl: 10m }
"#,
    )?;
    let graph = graph.display().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            graph.as_str(),
            "--watch",
            "--input",
            r#"{"topic": "t"}"#,
        ];
        args.extend_from_slice(extra);
        let out = weft(Some(&cluster), &args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let first = run(&[]);
    assert!(first.contains("  ✓ draft"), "{first}");
    assert!(!first.contains("answered from the cache"), "{first}");
    let second = run(&[]);
    assert!(
        second.contains("  ≡ draft answered from the cache (kept "),
        "{second}"
    );
    let fresh = run(&["--no-cache"]);
    assert!(!fresh.contains("answered from the cache"), "{fresh}");
    assert!(fresh.contains("  ✓ draft"), "{fresh}");
    Ok(())
}

#[test]
fn weft_group_on_a_lone_coordinator_says_one_partition() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
    let said = weft(Some(&cluster), &["group"]);
    assert!(said.status.success(), "{said:?}");
    assert_eq!(
        String::from_utf8_lossy(&said.stdout),
        "1 partition: one coordinator leads every run (a lone coordinator, or a leader and its standbys)\n"
    );
    let json = weft(Some(&cluster), &["group", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    assert_eq!(
        shown,
        serde_json::json!({"partitions": 1, "members": [], "unled": []})
    );
    Ok(())
}
