//! Python functions across processes (SPEC 4.3, issue 13): graphs that
//! name a `functions:` sidecar, import paths and `function` nodes, run by
//! real `worker` processes' Python hosts with the system's python3.

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_tests::TestCluster;

/// A coordinator and `worker` processes with these names.
async fn cluster(names: &[&str], extra: &[String]) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    for name in names {
        cluster.add_worker_with(name, 2, extra)?;
    }
    cluster.wait_for_workers(names).await?;
    Ok(cluster)
}

fn bundle(yaml: &str, helpers: &str) -> GraphBundle {
    GraphBundle::from_text("graph.yaml", yaml).with_file("helpers.py", helpers.as_bytes(), 0o644)
}

async fn run(client: &Client, bundle: GraphBundle, input: Value) -> anyhow::Result<RunInfo> {
    let submitted = client.submit_bundle(bundle, &input).await?;
    Ok(client.wait(&submitted.run_id).await?)
}

/// A coordinator and one `worker` named `a` whose `[python]` table is
/// `python`.
async fn configured(python: &str, slots: u32) -> anyhow::Result<TestCluster> {
    let mut cluster = TestCluster::start()?;
    let config = cluster.dir().join("worker.toml");
    std::fs::write(&config, format!("[python]\n{python}\n"))?;
    cluster.add_worker_with(
        "a",
        slots,
        &["--config".into(), config.display().to_string()],
    )?;
    cluster.wait_for_workers(&["a"]).await?;
    Ok(cluster)
}

/// Submits `bundle`, kills the coordinator with SIGKILL once event `kind`
/// of node `node` is seen, starts it again, and waits for the run's end.
async fn crash_on(
    cluster: &mut TestCluster,
    bundle: GraphBundle,
    (kind, node): (&str, &str),
) -> anyhow::Result<RunInfo> {
    let client = cluster.client().await?;
    let submitted = client.submit_bundle(bundle, &json!({})).await?;
    let mut events = client.watch(&submitted.run_id, 0).await?;
    while let Some(event) = events.next().await {
        let event = event?;
        if event.kind == kind && event.body["node"] == node {
            break;
        }
    }
    cluster.restart_coordinator()?;
    let client = cluster.client().await?;
    let wait = client.wait(&submitted.run_id);
    Ok(tokio::time::timeout(std::time::Duration::from_secs(60), wait).await??)
}

/// Every event of a run, as one JSON text.
async fn log_text(client: &Client, run_id: &str) -> anyhow::Result<String> {
    let events: Vec<_> = client
        .watch(run_id, 0)
        .await?
        .collect::<Result<Vec<_>, _>>()
        .await?;
    Ok(events
        .iter()
        .map(|e| format!("{} {}", e.kind, e.body))
        .collect::<Vec<_>>()
        .join("\n"))
}

const TAGLINE: &str = r#"
functions: helpers.py
state:
  tagline: { type: string, default: "" }
  heard: { type: array, default: [] }
nodes:
  polish:
    kind: loop
    start: true
    body: write
    until: short_enough
    max_iterations: 5
    output_key: tagline
  write: { kind: function, callable: write }
"#;

const TAGLINE_HELPERS: &str = r#"
def write(tagline, heard, loop, **kwargs):
    words = tagline.split() or "one two three four five six seven eight nine".split()
    cut = words if not tagline else words[:-2]
    return {"tagline": " ".join(cut), "heard": heard + [loop["feedback"]]}

def short_enough(it):
    n = len(it.output.split())
    assert it.result == it.output and it.state["tagline"] == it.output
    if n < 6 or it.is_last:
        return True, "fine at %d words" % n
    return False, "%d words at iteration %d of %d" % (n, it.iteration, it.max_iterations)
"#;

#[tokio::test]
async fn a_sidecar_until_steers_the_next_iteration_with_its_reason() -> anyhow::Result<()> {
    let cluster = cluster(&["a", "b"], &[]).await?;
    let client = cluster.client().await?;
    let done = run(&client, bundle(TAGLINE, TAGLINE_HELPERS), json!({})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["tagline"], "one two three four five");
    assert_eq!(
        done.state["heard"],
        json!([
            null,
            "9 words at iteration 1 of 5",
            "7 words at iteration 2 of 5"
        ])
    );
    let iterations = weft_tests::events_of(&client, &done.run_id, "loop_iteration").await?;
    assert_eq!(iterations.len(), 3);
    assert_eq!(iterations[2].body["reason"], "fine at 5 words");
    Ok(())
}

#[tokio::test]
async fn a_typo_is_refused_at_submission_and_a_parameter_that_gets_nothing_is_warned_about()
-> anyhow::Result<()> {
    let cluster = cluster(&["a"], &[]).await?;
    let client = cluster.client().await?;
    let typo = TAGLINE.replace("until: short_enough", "until: short_enuogh");
    let refused = client
        .submit_bundle(bundle(&typo, TAGLINE_HELPERS), &json!({}))
        .await
        .expect_err("a typo is not a sentence when a sidecar is declared")
        .to_string();
    assert!(
        refused.contains("until 'short_enuogh' is not a function of helpers.py")
            && refused.contains("did you mean 'short_enough'?"),
        "{refused}"
    );
    let yaml = "
functions: helpers.py
nodes:
  pick: { kind: function, callable: pick, start: true }
";
    let submitted = client
        .submit_bundle(
            bundle(yaml, "def pick(topic, **kwargs):\n    return 1\n"),
            &json!({}),
        )
        .await?;
    assert!(
        submitted.warnings.iter().any(|w| w.contains(
            "function node 'pick': parameter 'topic' of pick (helpers.py) names no state field"
        )),
        "{:?}",
        submitted.warnings
    );
    Ok(())
}

#[tokio::test]
async fn import_paths_reach_a_bundled_module_and_an_installed_one() -> anyhow::Result<()> {
    let cluster = cluster(&["a"], &[]).await?;
    let client = cluster.client().await?;
    let yaml = "
state:
  obj: { type: object }
nodes:
  shout: { kind: function, callable: text.tools:shout, start: true, next: dump }
  dump: { kind: function, callable: json:dumps, output_key: dumped }
";
    let bundle = GraphBundle::from_text("graph.yaml", yaml).with_file(
        "text/tools.py",
        b"def shout(obj, **kwargs):\n    return {'obj': {k: str(v).upper() for k, v in obj.items()}}\n",
        0o644,
    );
    let done = run(&client, bundle, json!({"obj": {"a": "quiet"}})).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["obj"], json!({"a": "QUIET"}));
    // json.dumps(obj) got the one field it takes by name, not the others.
    assert_eq!(done.state["dumped"], r#"{"a": "QUIET"}"#);
    Ok(())
}

#[tokio::test]
async fn a_map_branch_function_sees_its_item_over_the_state_field() -> anyhow::Result<()> {
    let cluster = cluster(&["a", "b"], &[]).await?;
    let client = cluster.client().await?;
    let path = weft_tests::repo().join("examples/python/map.yaml");
    let done = run(
        &client,
        GraphBundle::from_file(&path)?,
        json!({"subjects": ["tokio", "serde", "clap"]}),
    )
    .await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.state["summaries"],
        json!(["tokio: 5 letters", "serde: 5 letters", "clap: 4 letters"])
    );
    assert_eq!(done.state["topic"], "the state's topic");
    Ok(())
}

const REDUCE_AND_ROUTE: &str = "
functions: helpers.py
state:
  best: { type: number, default: 0, reducer: highest }
nodes:
  a: { kind: function, callable: score_a, start: true }
  b: { kind: function, callable: score_b, start: true }
  join:
    kind: function
    callable: noted
    depends_on: [a, b]
    routes: { router: grade, map: { high: high, low: low } }
  high: { kind: function, callable: said_high }
  low: { kind: function, callable: said_low }
";

const REDUCE_AND_ROUTE_HELPERS: &str = r#"
def score_a(**kw):
    return {"best": 3}

def score_b(**kw):
    return {"best": 8}

def highest(s0, branch_values):
    return max([s0] + branch_values)

def noted(best, **kw):
    return {"seen": best}

def grade(best):
    return "high" if best > 5 else "low"

def said_high(**kw):
    return {"verdict": "high"}

def said_low(**kw):
    return {"verdict": "low"}
"#;

#[tokio::test]
async fn a_python_reducer_merges_a_wave_and_a_python_router_picks_the_way() -> anyhow::Result<()> {
    let cluster = cluster(&["a", "b"], &[]).await?;
    let client = cluster.client().await?;
    let done = run(
        &client,
        bundle(REDUCE_AND_ROUTE, REDUCE_AND_ROUTE_HELPERS),
        json!({}),
    )
    .await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["best"], 8);
    assert_eq!(done.state["seen"], 8);
    assert_eq!(done.state["verdict"], "high");
    Ok(())
}

#[tokio::test]
async fn an_exception_fails_the_attempt_with_its_traceback() -> anyhow::Result<()> {
    let cluster = cluster(&["a"], &[]).await?;
    let client = cluster.client().await?;
    let yaml = "
functions: helpers.py
nodes:
  explode: { kind: function, callable: explode, start: true }
";
    let helpers = "def explode(**kw):\n    raise ValueError('bad input 42')\n";
    let done = run(&client, bundle(yaml, helpers), json!({})).await?;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.map(|e| e.message).unwrap_or_default();
    assert!(
        error.contains("ValueError: bad input 42") && error.contains("in explode"),
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
async fn seed_002s_examples_run_on_a_cluster_of_processes() -> anyhow::Result<()> {
    let cluster = cluster(&["a", "b"], &[]).await?;
    let client = cluster.client().await?;
    let example = |name: &str| weft_tests::repo().join(format!("examples/python/{name}.yaml"));
    let tagline = run(
        &client,
        GraphBundle::from_file(&example("tagline"))?,
        json!({"topic": "Weft"}),
    )
    .await?;
    assert_eq!(tagline.status, RunStatus::Completed, "{:?}", tagline.error);
    assert_eq!(tagline.state["tagline"], "Weft runs your workflow graphs");
    let dedupe = run(
        &client,
        GraphBundle::from_file(&example("dedupe"))?,
        json!({"notes": "a; b; a; c; b"}),
    )
    .await?;
    assert_eq!(dedupe.status, RunStatus::Completed, "{:?}", dedupe.error);
    assert_eq!(dedupe.state["dedupe"], "a\nb\nc");
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
fn weft(args: &[&str]) -> std::process::Output {
    std::process::Command::new(weft_tests::binary("weft"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("WEFT_COORDINATOR")
        .output()
        .expect("weft runs")
}

#[test]
fn seed_002s_examples_run_on_the_embedded_cluster_and_validate_names_their_python() {
    let example = |name: &str| {
        weft_tests::repo()
            .join(format!("examples/python/{name}.yaml"))
            .display()
            .to_string()
    };
    for (name, input, field, expected) in [
        (
            "tagline",
            r#"{"topic": "Weft"}"#,
            "tagline",
            json!("Weft runs your workflow graphs"),
        ),
        ("dedupe", r#"{"notes": "x; y; x"}"#, "dedupe", json!("x\ny")),
        (
            "map",
            r#"{"subjects": ["ab", "abc"]}"#,
            "summaries",
            json!(["ab: 2 letters", "abc: 3 letters"]),
        ),
    ] {
        let out = weft(&["run", &example(name), "--json", "--input", input]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
        let done: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {stderr}"));
        assert_eq!(done["status"], "completed", "{name}");
        assert_eq!(done["state"][field], expected, "{name}");
    }
    let out = weft(&["validate", &example("tagline")]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "python: tagline_is_short (helpers.py) — until of loop node 'polish'\n\
         python: write_tagline (helpers.py) — function node 'write'\nok\n"
    );
}

#[tokio::test]
async fn a_python_until_in_flight_when_the_coordinator_dies_is_asked_again() -> anyhow::Result<()> {
    let mut cluster = cluster(&["a"], &[]).await?;
    // The predicate takes a while, so the crash comes while it is asked.
    let helpers = TAGLINE_HELPERS.replace(
        "def short_enough(it):\n",
        "import time\n\ndef short_enough(it):\n    time.sleep(0.5)\n",
    );
    let graph = bundle(TAGLINE, &helpers);
    let done = crash_on(&mut cluster, graph, ("node_finished", "write")).await?;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["tagline"], "one two three four five");
    assert_eq!(
        done.state["heard"],
        json!([
            null,
            "9 words at iteration 1 of 5",
            "7 words at iteration 2 of 5"
        ])
    );
    Ok(())
}

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
