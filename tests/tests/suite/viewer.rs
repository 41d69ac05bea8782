//! The run viewer on a real coordinator with real workers: its JSON API
//! over HTTP (roles, errors, filters, events as server-sent events) and
//! the page itself in Debian's chromium, driven by Playwright
//! (`tests/browser/viewer.py`; `tests/browser/setup.sh` installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use weft_client::{Client, GraphBundle, RunStatus};
use weft_tests::{TestCluster, repo};

const OPS: &str = "ops-secret-5d1c9e7a3b";
const VIEWER: &str = "viewer-secret-8e2f6a4c1d";
const NODE: &str = "node-secret-3a7b9c1e5f";

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-viewer-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A coordinator that wants identities (`ops` operates, `viewer` reads,
/// both in `default`), links traces, and has two test-workers.
async fn viewer_cluster(dir: &Path) -> anyhow::Result<TestCluster> {
    let config = dir.join("coordinator.toml");
    std::fs::write(
        &config,
        r#"
[http]
trace_url = "http://traces.example/trace/{trace_id}"

[[tokens]]
name = "ops"
secret = "${OPS_TOKEN}"
role = "operator"

[[tokens]]
name = "viewer"
secret = "${VIEWER_TOKEN}"
role = "reader"

[[tokens]]
name = "node"
secret = "${NODE_TOKEN}"
role = "worker"
"#,
    )?;
    let mut cluster = TestCluster::start_with_env(&[
        ("WEFT_CONFIG", config.to_str().unwrap()),
        ("OPS_TOKEN", OPS),
        ("VIEWER_TOKEN", VIEWER),
        ("NODE_TOKEN", NODE),
        // Read by the workers, which share this environment.
        ("WEFT_WORKER_TOKEN", NODE),
    ])?;
    cluster.add_test_worker("a", 4, None)?;
    cluster.add_test_worker("b", 4, None)?;
    cluster.wait_for_workers(&["a", "b"]).await?;
    Ok(cluster)
}

/// `http://HOST:PORT` of the cluster's HTTP listener.
fn base(cluster: &TestCluster) -> String {
    cluster
        .metrics_url()
        .trim_end_matches("/metrics")
        .to_owned()
}

async fn as_identity(cluster: &TestCluster, token: &str) -> anyhow::Result<Client> {
    Ok(Client::connect(cluster.url().to_owned())
        .await?
        .with_token(token)?)
}

const APPROVAL: &str = r#"
name: publish
nodes:
  write: { kind: script, start: true, run: [sh, -c, 'echo "{\"draft\": \"hello\"}"'], next: approve }
  approve: { kind: approval, prompt: "Publish {{ draft }}?", next: publish }
  publish: { kind: script, run: [sh, -c, 'echo "{\"published\": true}"'], end: true }
state:
  draft: { type: string, default: "" }
  published: { type: boolean, default: false }
"#;

const INPUT: &str = r#"
name: ask
nodes:
  ask: { kind: input, start: true, prompt: "How many?", output_key: count, end: true }
state:
  count: { type: integer, default: 0 }
"#;

const LOOP: &str = r#"
name: counting
state:
  counter: { type: integer, default: 0 }
conditions:
  enough: "state.counter >= 3"
nodes:
  repeat: { kind: loop, start: true, body: inc, until: enough, max_iterations: 5, end: true }
  inc: { kind: task, handler: increment }
"#;

const PARENT: &str = r#"
name: parent
nodes:
  research: { kind: subgraph, start: true, graph: child.yaml, output_map: { found: found }, end: true }
state:
  found: { type: string, default: "" }
"#;

const CHILD: &str = r#"
name: child
nodes:
  look: { kind: script, start: true, run: [sh, -c, 'echo "{\"found\": \"it\"}"'] }
state:
  found: { type: string, default: "" }
"#;

/// A map of 60 items over the test-worker's `double`, three at a time,
/// that starts once the file `go` exists (so the browser sees it from
/// its first item).
fn gated_map(go: &Path) -> String {
    format!(
        r#"
name: doubling
settings: {{ max_loop_iterations: 3 }}
state:
  items: {{ type: array, default: [] }}
  delay_ms: {{ type: integer, default: 250 }}
nodes:
  gate: {{ kind: script, start: true, run: [sh, -c, 'while [ ! -e {go} ]; do sleep 0.05; done; echo "{{}}"'], next: fan }}
  fan:
    kind: map
    over: "{{{{ items }}}}"
    as: item
    branch: double
    output_key: doubled_item
    collect_into: results
    max_concurrency: 3
  double: {{ kind: task, handler: double, state_updates: {{ doubled_item: "{{{{ output }}}}" }} }}
"#,
        go = go.display()
    )
}

fn submit_text(name: &str, yaml: &str) -> GraphBundle {
    GraphBundle::from_text(name, yaml)
}

/// The API of one coordinator, called as one identity (or none).
struct Api {
    http: reqwest::Client,
    base: String,
    token: Option<&'static str>,
}

impl Api {
    fn new(base: &str, token: Option<&'static str>) -> Self {
        let (http, base) = (reqwest::Client::new(), base.to_owned());
        Self { http, base, token }
    }

    /// `GET /api/v1PATH`: the status and the JSON body.
    async fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST /api/v1PATH` with `body`.
    async fn post(&self, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, body))
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .http
            .request(method, format!("{}/api/v1{path}", self.base));
        match self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }
}

#[tokio::test]
async fn the_api_names_callers_checks_roles_and_answers_in_json() -> anyhow::Result<()> {
    let dir = scratch("api");
    let cluster = viewer_cluster(&dir).await?;
    let base = base(&cluster);
    let (viewer, operator) = (Api::new(&base, Some(VIEWER)), Api::new(&base, Some(OPS)));
    let ops = as_identity(&cluster, OPS).await?;
    let waiting = ops
        .submit_bundle(submit_text("publish.yaml", APPROVAL), &json!({}))
        .await?;
    weft_tests::wait_for_event(&ops, &waiting.run_id, "waiting_for_input").await?;

    // No token, an unknown one: 401, in the API's error form.
    let (status, body) = Api::new(&base, None).get("/runs").await?;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthenticated", "{body}");
    assert_eq!(Api::new(&base, Some("nope")).get("/runs").await?.0, 401);

    // The reader looks, and may not act.
    let (status, me) = viewer.get("/whoami").await?;
    assert_eq!((status, me["role"].as_str()), (200, Some("reader")), "{me}");
    assert_eq!(me["may_act"], false);
    let path = format!("/runs/{}", waiting.run_id);
    let (status, run) = viewer.get(&path).await?;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "waiting");
    assert_eq!(run["graph"], "publish");
    assert_eq!(run["state"]["draft"], "hello");
    assert_eq!(run["waiting"][0]["prompt"], "Publish hello?");
    let trace = run["trace_id"].as_str().unwrap();
    assert_eq!(
        run["trace_url"],
        format!("http://traces.example/trace/{trace}")
    );
    let (status, body) = viewer.post(&format!("{path}/cancel"), json!({})).await?;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "'viewer' has the role reader; Cancel needs the role operator or admin"
    );

    // Filters, and a status that does not exist.
    let listed = |page: &Value| page["runs"].as_array().map_or(0, Vec::len);
    assert_eq!(listed(&viewer.get("/runs?status=waiting").await?.1), 1);
    assert_eq!(listed(&viewer.get("/runs?status=completed").await?.1), 0);
    assert_eq!(listed(&viewer.get("/runs?graph=other").await?.1), 0);
    assert_eq!(listed(&viewer.get("/runs?graph=publish").await?.1), 1);
    let (status, body) = viewer.get("/runs?status=done").await?;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("unknown status 'done'"), "{body}");
    let (status, body) = viewer.get("/runs?limit=many").await?;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("limit"), "{body}");

    // Unknown runs, malformed and wrong answers: clear errors, nothing changed.
    let (status, body) = operator.get("/runs/run-nope").await?;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["message"], "unknown run 'run-nope'");
    let resume = format!("{path}/resume");
    let (status, body) = operator.post(&resume, json!({"value": "approve"})).await?;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("node"),
        "{body}"
    );
    let wrong_node = json!({"node": "write", "value": "approve"});
    let (status, body) = operator.post(&resume, wrong_node).await?;
    assert_eq!(status, 409, "{body}");
    assert_eq!(ops.get(&waiting.run_id).await?.status, RunStatus::Waiting);

    // The operator approves with a comment: the run completes, and says who.
    let answer = json!({"node": "approve", "value": "approve", "comment": "fine"});
    let (status, body) = operator.post(&resume, answer).await?;
    assert_eq!(status, 200, "{body}");
    let done = ops.wait(&waiting.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.answers[0].describe(), "approved by ops");
    assert_eq!(done.state["approved_comment"], "fine", "{:?}", done.state);

    // The diagram: SVG, one group per node.
    let response = viewer
        .request(reqwest::Method::GET, &format!("{path}/diagram.svg"))
        .send()
        .await?;
    assert_eq!(response.headers()["content-type"], "image/svg+xml");
    let svg = response.text().await?;
    for node in ["write", "approve", "publish"] {
        assert!(svg.contains(&format!(r#"data-node="{node}""#)), "{svg}");
    }

    // The page and its files are served without a token (they hold no
    // data), under a policy that loads nothing from elsewhere.
    let page = reqwest::get(format!("{base}/runs/{}", waiting.run_id)).await?;
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()?
        .to_owned();
    assert!(policy.contains("default-src 'self'"), "{policy}");
    assert!(
        page.text()
            .await?
            .contains(r#"<script src="/assets/start.js">"#)
    );
    // Every script the page loads (its loader, the modules it imports) is
    // served as JavaScript; no other.
    for module in [
        "start.js",
        "main.js",
        "run.js",
        "run_model.js",
        "panels/events.js",
    ] {
        let script = reqwest::get(format!("{base}/assets/{module}")).await?;
        assert_eq!(script.status(), 200, "{module}");
        assert_eq!(
            script.headers()["content-type"],
            "text/javascript; charset=utf-8",
            "{module}"
        );
    }
    let missing = reqwest::get(format!("{base}/assets/panels/../../secrets.js")).await?;
    assert_eq!(missing.status(), 404);
    Ok(())
}

/// The `data:` lines of a server-sent event stream, read until one holds
/// `until` or the stream ends, with the `id:` each came with.
async fn read_stream(
    response: reqwest::Response,
    until: &str,
) -> anyhow::Result<Vec<(u64, Value)>> {
    let mut response = response;
    let mut text = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Some(chunk) = tokio::time::timeout_at(deadline, response.chunk()).await?? {
        text.push_str(std::str::from_utf8(&chunk)?);
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(str::parse);
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(id), Some(data)) = (id, data) {
                let event: Value = serde_json::from_str(data)?;
                let last = event["type"] == until;
                events.push((id?, event));
                if last {
                    return Ok(events);
                }
            }
        }
    }
    Ok(events)
}

#[tokio::test]
async fn events_stream_as_server_sent_events_from_any_position() -> anyhow::Result<()> {
    let dir = scratch("sse");
    let cluster = viewer_cluster(&dir).await?;
    let base = base(&cluster);
    let http = reqwest::Client::new();
    let ops = as_identity(&cluster, OPS).await?;
    let run = ops
        .submit_bundle(submit_text("publish.yaml", APPROVAL), &json!({}))
        .await?;
    let url = format!("{base}/api/v1/runs/{}/events", run.run_id);

    // Live: the stream is open before the run is answered, and carries the
    // answer and the end as they happen.
    let live = http.get(&url).bearer_auth(VIEWER).send().await?;
    assert_eq!(live.headers()["content-type"], "text/event-stream");
    weft_tests::wait_for_event(&ops, &run.run_id, "waiting_for_input").await?;
    ops.resume(&run.run_id, "approve", &json!("approve"), None)
        .await?;
    let events = read_stream(live, "run_finished").await?;
    let ids: Vec<u64> = events.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        (0..ids.len() as u64).collect::<Vec<_>>(),
        "in order, none missed"
    );
    assert!(
        events
            .iter()
            .all(|(id, e)| e["seq"] == *id && e["at_unix_ms"].is_i64())
    );
    let kinds: Vec<&str> = events
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_submitted"));
    assert!(kinds.contains(&"input_received"), "{kinds:?}");
    let changed = events
        .iter()
        .find(|(_, e)| e["type"] == "state_changed")
        .unwrap();
    assert_eq!(
        changed.1["values"]["draft"], "hello",
        "the new value travels with the change"
    );

    // From a position, and after the last event a reconnecting browser saw.
    let from = http
        .get(format!("{url}?from=3"))
        .bearer_auth(VIEWER)
        .send()
        .await?;
    let tail = read_stream(from, "run_finished").await?;
    assert_eq!(tail.first().map(|(id, _)| *id), Some(3));
    assert_eq!(tail.len(), events.len() - 3);
    let resumed = http
        .get(&url)
        .bearer_auth(VIEWER)
        .header("last-event-id", "4")
        .send()
        .await?;
    let tail = read_stream(resumed, "run_finished").await?;
    assert_eq!(tail.first().map(|(id, _)| *id), Some(5));

    // Some types only, each at its place in the log; an unknown type is
    // refused before any stream.
    let some = http
        .get(format!("{url}?types=input_received,run_finished"))
        .bearer_auth(VIEWER)
        .send()
        .await?;
    let picked = read_stream(some, "run_finished").await?;
    let expected: Vec<(u64, &str)> = events
        .iter()
        .filter(|(_, e)| e["type"] == "input_received" || e["type"] == "run_finished")
        .map(|(id, e)| (*id, e["type"].as_str().unwrap()))
        .collect();
    let got: Vec<(u64, &str)> = picked
        .iter()
        .map(|(id, e)| (*id, e["type"].as_str().unwrap()))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(got.len(), 2, "{got:?}");
    let unknown = http
        .get(format!("{url}?types=run_ended"))
        .bearer_auth(VIEWER)
        .send()
        .await?;
    assert_eq!(unknown.status(), 400);
    let body = unknown.text().await?;
    assert!(body.contains("'run_ended' is not an event type"), "{body}");

    // Another namespace's run, or none: not found, before any stream.
    let missing = http
        .get(format!("{base}/api/v1/runs/run-nope/events"))
        .bearer_auth(VIEWER)
        .send()
        .await?;
    assert_eq!(missing.status(), 404);
    Ok(())
}

/// The python of the browser tests' venv (`tests/browser/setup.sh`).
pub(crate) fn browser_python() -> PathBuf {
    let python = std::env::var_os("WEFT_BROWSER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/browser-venv/bin/python"));
    assert!(
        python.exists(),
        "the browser tests need Playwright and chromium: run tests/browser/setup.sh (it installs them; .ci/run does) or set WEFT_BROWSER_PYTHON"
    );
    python
}

/// A `rag` node over two bundled pages, by keyword, without a model.
const RAG: &str = r#"
name: search
state:
  question: { type: string }
knowledge:
  notes: { sources: "docs/*.md" }
nodes:
  search: { kind: rag, start: true, knowledge: notes, query: "{{ question }}", mode: keyword }
"#;

/// Holds the concurrency key `shared` for a minute.
const HOLDER: &str = r#"
name: holder
nodes:
  hold:
    kind: script
    start: true
    run: [sleep, "60"]
    concurrency: { key: "shared", max: 1 }
"#;

/// A map whose items take the key `shared` one at a time.
const KEYED: &str = r#"
name: keyed
state:
  items: { type: array, default: [1, 2, 3] }
  outs: { type: array, default: [] }
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: work
    output_key: out
    collect_into: outs
  work:
    kind: script
    run: [sh, -c, 'echo "{\"out\": 1}"']
    concurrency: { key: "shared", max: 1 }
"#;

const LLM_KEY: &str = "sk-viewer-flow";

/// An agent that would call its tool forever, under a budget.
const SPENDER: &str = r#"
name: spender
settings:
  budget: { tokens: 1500 }
nodes:
  ask: { kind: agent, start: true, prompt: "Look it up, again and again.", tools: [lookup], max_turns: 40 }
"#;

const RESTART: &str = "# Restarting\n\n## After a crash\n\nA crash loses no finished work: runs resume from their checkpoint.\n";

#[tokio::test]
async fn the_page_works_in_chromium() -> anyhow::Result<()> {
    let python = browser_python();
    let dir = scratch("browser");
    let cluster = viewer_cluster(&dir).await?;
    let ops = as_identity(&cluster, OPS).await?;
    let go = dir.join("go");
    let items: Vec<i64> = (0..60).collect();
    let map = ops
        .submit_bundle(
            submit_text("doubling.yaml", &gated_map(&go)),
            &json!({"items": items}),
        )
        .await?;
    let approval = ops
        .submit_bundle(submit_text("publish.yaml", APPROVAL), &json!({}))
        .await?;
    let input = ops
        .submit_bundle(submit_text("ask.yaml", INPUT), &json!({}))
        .await?;
    let long = r#"
name: long
nodes:
  wait: { kind: script, start: true, run: [sleep, "60"], end: true }
"#;
    let cancel = ops
        .submit_bundle(submit_text("long.yaml", long), &json!({}))
        .await?;
    let mark = dir.join("tried");
    let flaky = format!(
        r#"
name: flaky
nodes:
  once:
    kind: script
    start: true
    end: true
    run: [sh, -c, 'if [ -e {mark} ]; then echo "{{\"ok\": true}}"; else touch {mark}; echo "first attempt fails" >&2; exit 1; fi']
"#,
        mark = mark.display()
    );
    let retry = ops
        .submit_bundle(submit_text("flaky.yaml", &flaky), &json!({}))
        .await?;
    let looped = ops
        .submit_bundle(submit_text("counting.yaml", LOOP), &json!({}))
        .await?;
    assert_eq!(ops.wait(&looped.run_id).await?.state["counter"], 3);
    let parent = GraphBundle::from_text("parent.yaml", PARENT).with_file(
        "child.yaml",
        CHILD.as_bytes(),
        0o644,
    );
    let parent = ops.submit_bundle(parent, &json!({})).await?;
    let finished = ops.wait(&parent.run_id).await?;
    assert_eq!(finished.state["found"], "it", "{:?}", finished.error);
    let rag = GraphBundle::from_text("search.yaml", RAG)
        .with_file("docs/restart.md", RESTART.as_bytes(), 0o644)
        .with_file(
            "docs/billing.md",
            b"# Billing\n\nInvoices go out monthly.\n",
            0o644,
        );
    let rag = ops
        .submit_bundle(rag, &json!({"question": "what happens after a crash?"}))
        .await?;
    let searched = ops.wait(&rag.run_id).await?;
    assert_eq!(
        searched.status,
        RunStatus::Completed,
        "{:?}",
        searched.error
    );
    // The node cache: a second run of a cached step takes the first's
    // answer (its key this test's own, so no earlier entry answers).
    let cached_graph = format!(
        r#"
name: cached
nodes:
  draft:
    kind: script
    start: true
    end: true
    run: [sh, -c, 'echo "{{\"text\": \"kept\"}}"']
    cache: {{ key: "viewer-{}", ttl: 1h }}
"#,
        std::process::id()
    );
    let stored = ops
        .submit_bundle(submit_text("cached.yaml", &cached_graph), &json!({}))
        .await?;
    ops.wait(&stored.run_id).await?;
    let cached = ops
        .submit_bundle(submit_text("cached.yaml", &cached_graph), &json!({}))
        .await?;
    assert_eq!(ops.wait(&cached.run_id).await?.state["text"], "kept");
    // Flow control: a run holds the concurrency key `shared` with a long
    // step, so the keyed map's items wait, throttled, while the page looks
    // (it cancels the holder, and they go); an agent loop spends its run's
    // budget.
    let holder = ops
        .submit_bundle(submit_text("holder.yaml", HOLDER), &json!({}))
        .await?;
    weft_tests::wait_for_event(&ops, &holder.run_id, "node_started").await?;
    let keyed = ops
        .submit_bundle(submit_text("keyed.yaml", KEYED), &json!({}))
        .await?;
    weft_tests::wait_for_event(&ops, &keyed.run_id, "task_throttled").await?;
    // The agent's model calls its tool; the storyteller's writes for
    // half a minute, a word every half second, while the page watches.
    let llm = weft_tests::llm_server::TestLlm::start(LLM_KEY, |request, _| {
        use weft_tests::llm_server::{Reply, last_message};
        if last_message(request).contains("long story") {
            let words = (0..60).map(|i| format!("word{i} ")).collect();
            return Reply::Streamed(words, Duration::from_millis(500));
        }
        Reply::ToolCalls(vec![("lookup".into(), json!({"key": "a"}))])
    })
    .await?;
    let mut cluster = cluster;
    // Hosting only the agent's tool, so the map's items stay on a and b.
    cluster.add_llm_test_worker_hosting("m", 2, &llm.url, LLM_KEY, Some("lookup"))?;
    cluster.wait_for_workers(&["a", "b", "m"]).await?;
    let spent = ops
        .submit_bundle(submit_text("spender.yaml", SPENDER), &json!({}))
        .await?;
    let storyteller = r#"
name: storyteller
nodes:
  tell: { kind: llm, start: true, end: true, prompt: "Tell a long story." }
"#;
    let story = ops
        .submit_bundle(submit_text("storyteller.yaml", storyteller), &json!({}))
        .await?;
    {
        // The page looks once the story has begun.
        use tokio_stream::StreamExt;
        let mut pieces = ops.stream(&story.run_id, 0).await?;
        tokio::time::timeout(Duration::from_secs(30), pieces.next())
            .await?
            .expect("the story begins")?;
    }
    let forkable = r#"
name: forkable
state:
  word: { type: string, default: "hello" }
  first: { type: integer, default: 0 }
  said: { type: string, default: "" }
nodes:
  first: { kind: script, start: true, next: say, run: [sh, -c, 'echo "{\"first\": 1}"'] }
  say: { kind: script, run: [python3, -c, "import json, sys; s = json.load(sys.stdin)['state']; print(json.dumps({'said': s['word']}))"] }
"#;
    let forkable = ops
        .submit_bundle(submit_text("forkable.yaml", forkable), &json!({}))
        .await?;
    let forkable_done = ops.wait(&forkable.run_id).await?;
    assert_eq!(forkable_done.state["said"], "hello", "{forkable_done:?}");
    let over = ops.wait(&spent.run_id).await?;
    assert_eq!(
        over.error.as_ref().map(|e| e.kind.as_str()),
        Some("BudgetExceeded")
    );
    for (run, kind) in [
        (&approval, "waiting_for_input"),
        (&input, "waiting_for_input"),
    ] {
        weft_tests::wait_for_event(&ops, &run.run_id, kind).await?;
    }
    weft_tests::wait_for_event(&ops, &cancel.run_id, "node_started").await?;
    assert_eq!(ops.wait(&retry.run_id).await?.status, RunStatus::Failed);

    // The map starts once the page is on it: the script creates `go`.
    let runs = json!({
        "map": map.run_id, "approval": approval.run_id, "input": input.run_id,
        "cancel": cancel.run_id, "retry": retry.run_id, "loop": looped.run_id,
        "parent": parent.run_id, "rag": rag.run_id,
        "holder": holder.run_id, "keyed": keyed.run_id, "spent": spent.run_id,
        "stored": stored.run_id, "cached": cached.run_id, "story": story.run_id,
        "forkable": forkable.run_id,
    });
    let shots = repo().join("target/viewer-screenshots");
    // On a thread of its own: the test endpoint streams on this test's
    // runtime while the page watches.
    let mut browser = Command::new(python);
    browser
        .arg(repo().join("tests/browser/viewer.py"))
        .args([
            "--base",
            &base(&cluster),
            "--operator",
            OPS,
            "--reader",
            VIEWER,
        ])
        .args(["--runs", &runs.to_string(), "--go", go.to_str().unwrap()])
        .arg("--shots")
        .arg(&shots);
    let output = tokio::task::spawn_blocking(move || browser.output()).await??;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");

    // What the page did, as the coordinator saw it.
    let done = ops.get(&approval.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.answers[0].describe(), "approved by ops");
    assert_eq!(done.state["approved_comment"], "ship it");
    assert_eq!(ops.get(&input.run_id).await?.state["count"], 3);
    assert_eq!(ops.get(&cancel.run_id).await?.status, RunStatus::Cancelled);
    assert_eq!(ops.get(&retry.run_id).await?.status, RunStatus::Completed);
    let map = ops.get(&map.run_id).await?;
    assert_eq!(map.state["results"].as_array().map(Vec::len), Some(60));
    assert_eq!(ops.get(&holder.run_id).await?.status, RunStatus::Cancelled);
    let keyed = ops.wait(&keyed.run_id).await?;
    assert_eq!(keyed.status, RunStatus::Completed, "{:?}", keyed.error);
    let told = ops.wait(&story.run_id).await?;
    assert_eq!(told.status, RunStatus::Completed, "{:?}", told.error);
    for shot in [
        "viewer-map.png",
        "viewer-approval.png",
        "viewer-rag.png",
        "viewer-throttled.png",
        "viewer-spent.png",
        "viewer-stream.png",
    ] {
        assert!(
            shots.join(shot).metadata()?.len() > 10_000,
            "{shot} was not taken"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_serves_the_viewer_and_forwards_actions_to_the_leader() -> anyhow::Result<()> {
    let mut group = weft_tests::group::TestGroup::start(2, 2).await?;
    let leader = group.wait_for_leader(None).await?;
    let standby = 1 - leader;
    group.add_worker("w", 2)?;
    group.wait_for_log("w", "joined the coordinator", 1).await?;
    let client = group.client(leader).await?;
    let run = client
        .submit_bundle(submit_text("publish.yaml", APPROVAL), &json!({}))
        .await?;
    weft_tests::wait_for_event(&client, &run.run_id, "waiting_for_input").await?;

    // Everything through the standby's HTTP listener.
    let api = Api::new(group.http_base(standby), None);
    let path = format!("/runs/{}", run.run_id);
    let (status, info) = api.get(&path).await?;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["status"], "waiting", "{info}");
    let events = api
        .request(reqwest::Method::GET, &format!("{path}/events"))
        .send()
        .await?;
    let events = read_stream(events, "waiting_for_input").await?;
    let last = events.last().map(|(_, event)| event["node"].clone());
    assert_eq!(last, Some(json!("approve")));
    // The leader answers from its runs, the standby reads the leader's
    // answer into the same domain form: both doors say the same, byte for
    // byte once parsed.
    let at_leader = Api::new(group.http_base(leader), None);
    for shown in [path.clone(), format!("{path}?state=false"), "/runs".into()] {
        let (_, here) = api.get(&shown).await?;
        let (_, there) = at_leader.get(&shown).await?;
        assert_eq!(
            here, there,
            "GET {shown} differs between standby and leader"
        );
    }
    let leaders_events = at_leader
        .request(reqwest::Method::GET, &format!("{path}/events"))
        .send()
        .await?;
    let leaders_events = read_stream(leaders_events, "waiting_for_input").await?;
    assert_eq!(events, leaders_events, "the event streams differ");
    let answer = json!({"node": "approve", "value": "approve"});
    let (status, body) = api.post(&format!("{path}/resume"), answer).await?;
    assert_eq!(status, 200, "{body}");
    let done = client.wait(&run.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed);
    let page = reqwest::get(format!("{}/", api.base)).await?;
    assert_eq!(page.status(), 200);
    Ok(())
}

#[tokio::test]
async fn a_coordinator_without_identities_refuses_other_sites_and_other_names() -> anyhow::Result<()>
{
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 1)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let go = cluster.dir().join("go");
    let run = client
        .submit_bundle(
            submit_text(
                "waits.yaml",
                &format!(
                    "nodes:\n  a: {{ kind: script, start: true, run: [sh, -c, 'while [ ! -e {} ]; do sleep 0.05; done; echo \"{{}}\"'] }}\n",
                    go.display()
                ),
            ),
            &json!({}),
        )
        .await?;
    let base = base(&cluster);
    let cancel = format!("{base}/api/v1/runs/{}/cancel", run.run_id);
    let http = reqwest::Client::new();
    // A page of another site posts a "simple" request (no preflight).
    let foreign = http
        .post(&cancel)
        .header("Origin", "https://evil.example")
        .header("Content-Type", "text/plain")
        .body("{}")
        .send()
        .await?;
    assert_eq!(foreign.status().as_u16(), 403);
    let said: Value = foreign.json().await?;
    assert_eq!(said["error"]["code"], "cross_origin", "{said}");
    // A name pointed at this machine (DNS rebinding) is refused too.
    let rebound = http
        .get(format!("{base}/api/v1/runs"))
        .header("Host", "evil.example")
        .send()
        .await?;
    assert_eq!(rebound.status().as_u16(), 421);
    assert_eq!(
        client.status(&run.run_id).await?.status,
        weft_client::RunStatus::Running,
        "the run was not cancelled"
    );
    // The viewer's own page (same origin), and a client with no Origin,
    // act as before.
    let host = base.trim_start_matches("http://");
    let own = http
        .post(&cancel)
        .header("Origin", format!("http://{host}"))
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(own.status().as_u16(), 200, "{}", own.text().await?);
    assert_eq!(
        client.wait(&run.run_id).await?.status,
        weft_client::RunStatus::Cancelled
    );
    Ok(())
}
