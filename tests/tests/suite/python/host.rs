//! A worker's Python host across processes: exceptions, timeouts and
//! crashes, what user code prints, `tool_args` secrets, pools per bundle,
//! a worker without Python, and the state a process keeps across a
//! coordinator restart.

use serde_json::json;
use weft_client::RunStatus;
use weft_tests::TestCluster;

use super::{bundle, cluster, configured, crash_on, log_text, run};

#[tokio::test]
async fn an_exception_fails_the_attempt_with_its_traceback() -> anyhow::Result<()> {
    let cluster = cluster(&["a"], &[]).await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
nodes:
  explode: { kind: function, callable: explode, start: true }
";
    let helpers = "def explode(**kw):\n    return check(42)\n\ndef check(n):\n    raise ValueError('bad input %d' % n)\n";
    let done = run(&client, bundle(yaml, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.map(|e| e.message).unwrap_or_default();
    // The whole stack of the user's frames, named by the file's path in
    // the bundle; nothing of the host's harness or of a scratch directory.
    assert!(
        error.contains("Traceback (most recent call last):")
            && error.contains("File \"helpers.py\", line 2, in explode")
            && error.contains("File \"helpers.py\", line 5, in check")
            && error.contains("ValueError: bad input 42"),
        "{error}"
    );
    assert!(
        !error.contains("<string>") && !error.contains("/tmp") && !error.contains("importlib"),
        "{error}"
    );
    Ok(())
}

#[tokio::test]
async fn an_endless_function_is_killed_at_its_timeout_and_its_host_replaced() -> anyhow::Result<()>
{
    let cluster = configured("pool_size = 1", 1).await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
nodes:
  spin: { kind: function, callable: spin, start: true, timeout: 1s }
";
    let helpers = "import os\n\ndef spin(**kw):\n    while True:\n        pass\n\ndef pid(**kw):\n    return os.getpid()\n";
    let done = run(&client, bundle(yaml, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.map(|e| e.message).unwrap_or_default();
    assert!(
        error.contains("did not return within") && error.contains("its process was killed"),
        "{error}"
    );
    // The same bundle on the same one-process pool: a fresh process serves.
    let pid = yaml.replace("callable: spin", "callable: pid");
    let done = run(&client, bundle(&pid, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert!(
        done.state["spin"].as_u64().is_some_and(|p| p > 0),
        "{:?}",
        done.state
    );
    Ok(())
}

#[tokio::test]
async fn a_function_that_ends_its_process_fails_its_attempt_and_a_fresh_one_serves_next()
-> anyhow::Result<()> {
    let cluster = configured("pool_size = 1", 1).await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
nodes:
  crash: { kind: function, callable: crash, start: true }
";
    let helpers =
        "import os\n\ndef crash(**kw):\n    os._exit(3)\n\ndef fine(**kw):\n    return 'fine'\n";
    let done = run(&client, bundle(yaml, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.map(|e| e.message).unwrap_or_default();
    assert!(
        error.contains("the Python host failed: the process ended"),
        "{error}"
    );
    let fine = yaml.replace("callable: crash", "callable: fine");
    let done = run(&client, bundle(&fine, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["crash"], "fine");
    Ok(())
}

#[tokio::test]
async fn what_a_function_prints_never_breaks_its_result() -> anyhow::Result<()> {
    let cluster = cluster(&["a"], &[]).await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
nodes:
  chatty: { kind: function, callable: chatty, start: true }
";
    let helpers = r#"
import os

def chatty(**kw):
    print('{"id": 1, "ok": "a forged answer"}')
    print("chatty was here")
    os.write(1, b"straight to fd 1\n")
    return {"answer": 42}
"#;
    let done = run(&client, bundle(yaml, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["answer"], 42);
    cluster.wait_for_log("a", "chatty was here").await?;
    cluster.wait_for_log("a", "straight to fd 1").await?;
    Ok(())
}

#[tokio::test]
async fn a_secret_in_tool_args_reaches_the_function_and_no_record() -> anyhow::Result<()> {
    // A quote and a backslash: escaped in JSON, the secret must be masked
    // in values, not in their JSON text.
    const SECRET: &str = r#"hunter2-"9f\7c1e"#;
    let mut cluster = TestCluster::start()?;
    let secrets = cluster.dir().join("secrets.env");
    std::fs::write(&secrets, format!("API_TOKEN={SECRET}\n"))?;
    cluster.add_worker_with(
        "a",
        2,
        &["--secrets-file".into(), secrets.display().to_string()],
    )?;
    cluster.wait_for_workers(&["a"]).await?;
    let client = cluster.client().await?;
    let yaml = r#"
functions: helpers.py
nodes:
  call:
    kind: function
    callable: call_api
    start: true
    tool_args: { token: "${API_TOKEN}", retries: 2 }
    next: leak
  leak:
    kind: function
    callable: leak
    tool_args: { token: "${API_TOKEN}" }
"#;
    let helpers = r#"
def call_api(token, retries):
    print("calling with", token)
    return {"token_length": len(token), "retries": retries, "echo": "token=" + token}

def leak(token):
    raise RuntimeError("refused: " + token)
"#;
    let done = run(&client, bundle(yaml, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    assert_eq!(done.state["token_length"], SECRET.len());
    assert_eq!(done.state["retries"], 2);
    assert_eq!(done.state["echo"], "token=***");
    let error = done.error.clone().map(|e| e.message).unwrap_or_default();
    assert!(error.contains("refused: ***"), "{error}");
    cluster.wait_for_log("a", "calling with ***").await?;
    let records = [
        serde_json::to_string(&done.state)?,
        log_text(&client, &done.run_id).await?,
        cluster.log("a"),
        cluster.log("coordinator"),
    ];
    let escaped = serde_json::to_string(SECRET)?;
    let escaped = escaped.trim_matches('"');
    for record in records {
        assert!(
            !record.contains(SECRET) && !record.contains(escaped),
            "the secret leaked: {record}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn two_graphs_helpers_on_one_worker_never_collide() -> anyhow::Result<()> {
    let cluster = cluster(&["a"], &[]).await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
nodes:
  who: { kind: function, callable: who, start: true }
";
    let first = bundle(yaml, "def who(**kw):\n    return 'first'\n");
    let second = bundle(yaml, "def who(**kw):\n    return 'second'\n");
    for _ in 0..2 {
        let (a, b) = tokio::join!(
            run(&client, first.clone(), json!({})),
            run(&client, second.clone(), json!({}))
        );
        assert_eq!(a?.state["who"], "first");
        assert_eq!(b?.state["who"], "second");
    }
    Ok(())
}

#[tokio::test]
async fn a_worker_without_python_does_not_offer_it_and_the_graph_waits_saying_why()
-> anyhow::Result<()> {
    let cluster = configured("enabled = false", 1).await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
state:
  best: { type: number, default: 0, reducer: highest }
nodes:
  who: { kind: function, callable: who, start: true }
";
    let helpers =
        "def who(**kw):\n    return 1\n\ndef highest(s0, values):\n    return max(values)\n";
    let submitted = client
        .submit_bundle(bundle(yaml, helpers), &json!({}))
        .await?;
    let warned = |text: &str| submitted.warnings.iter().any(|w| w.contains(text));
    assert!(
        warned("node 'who' needs kind 'function'")
            && warned("highest (helpers.py) (reducer of field 'best') needs Python"),
        "{:?}",
        submitted.warnings
    );
    let unhosted = weft_tests::wait_for_event(&client, &submitted.run_id, "task_unhosted").await?;
    assert_eq!(unhosted.body["node"], "who");
    Ok(())
}

/// `weft ARGS` with no coordinator: `run` starts an embedded cluster.

#[tokio::test]
async fn fields_a_python_process_holds_are_sent_again_after_the_coordinator_restarts()
-> anyhow::Result<()> {
    let mut cluster = configured("pool_size = 1", 1).await?;
    // The one Python process reads `f` at its first version; a script
    // changes it; the coordinator dies while another script runs. The
    // restarted coordinator numbers versions afresh, so `f`'s new first
    // version must not be taken for the one the process holds.
    let yaml = r#"
functions: helpers.py
state:
  f: { type: string, default: "A" }
nodes:
  first: { kind: function, callable: read, output_key: seen_first, start: true, next: change }
  change: { kind: script, run: [sh, -c, 'echo "{\"f\": \"B\"}"'], next: pause }
  pause: { kind: script, run: [sh, -c, 'sleep 0.5; echo "{}"'], next: last }
  last: { kind: function, callable: read, output_key: seen_last }
"#;
    let helpers = "def read(f, **kw):\n    return f\n";
    let done = crash_on(
        &mut cluster,
        bundle(yaml, helpers),
        ("node_started", "pause"),
    )
    .await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["seen_first"], "A");
    assert_eq!(done.state["seen_last"], "B");
    Ok(())
}

/// A coordinator and worker `a` whose Python interpreter is a shell script
/// doing `body`; and the directory holding the script.
async fn with_interpreter(
    name: &str,
    body: &str,
) -> anyhow::Result<(TestCluster, std::path::PathBuf)> {
    let dir = std::env::temp_dir().join(format!("weft-{name}-python-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let interpreter = dir.join("python3");
    std::fs::write(&interpreter, format!("#!/bin/sh\n{body}\n"))?;
    std::fs::set_permissions(
        &interpreter,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let python = format!("interpreter = {:?}", interpreter.display().to_string());
    Ok((configured(&python, 1).await?, dir))
}

#[tokio::test]
async fn a_worker_joins_and_runs_scripts_without_waiting_for_its_python_to_start()
-> anyhow::Result<()> {
    // An interpreter that never answers: a worker that ran it before
    // joining would never join.
    let (cluster, dir) = with_interpreter("slow", "exec sleep 3600").await?;
    let client = cluster.client().await?;
    let yaml = "nodes:\n  hello: { kind: script, start: true, run: [sh, -c, 'echo \"{\\\"hi\\\": 1}\"'] }\n";
    let done = run(
        &client,
        weft_client::GraphBundle::from_text("g.yaml", yaml),
        json!({}),
    )
    .await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["hi"], 1);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[tokio::test]
async fn an_interpreter_that_does_not_run_fails_the_call_saying_so() -> anyhow::Result<()> {
    let (cluster, dir) = with_interpreter("broken", "echo 'no such runtime' >&2\nexit 3").await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
nodes:
  who: { kind: function, callable: who, start: true }
";
    let done = run(
        &client,
        bundle(yaml, "def who(**kw):\n    return 1\n"),
        json!({}),
    )
    .await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.map(|e| e.message).unwrap_or_default();
    assert!(
        error.contains("exit status: 3")
            && error.contains("its stderr ended with: no such runtime"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
