//! Python functions across processes (SPEC 4.3, issue 13): graphs that
//! name a `functions:` sidecar, import paths and `function` nodes, run by
//! real `worker` processes' Python hosts with the system's python3. This
//! file holds what the graph means (names, arguments, examples); `host.rs`
//! how a worker's Python host behaves (failures, prints, secrets, pools).

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use weft_client::{Client, GraphBundle, RunInfo, RunStatus};
use weft_tests::TestCluster;

mod host;

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
    weft_tests::until_event(&client, &submitted.run_id, kind, |event| {
        event.kind == kind && event.body["node"] == node
    })
    .await?;
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

fn weft(args: &[&str]) -> std::process::Output {
    std::process::Command::new(weft_tests::binary("weft"))
        // Hermetic: no test shares (or leaves) a local cluster.
        .env("WEFT_EPHEMERAL", "1")
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
