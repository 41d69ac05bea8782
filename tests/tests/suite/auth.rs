//! Identities, roles and namespaces (SPEC 11, issue #21) with real
//! processes: a coordinator configured with `[[tokens]]` (secrets from its
//! environment, its secrets file and a SHA-256 digest), `weft` with
//! `--token`/`WEFT_TOKEN`, the client library with a token, and workers
//! joining with worker tokens, one of them restricted to a namespace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use weft_client::{Client, GraphBuilder, NodeBuilder, RunStatus};
use weft_tests::{TestCluster, binary};

// Secrets long and distinctive enough to search for in everything the
// cluster wrote.
const OPS: &str = "ops-secret-7f3a9c1e5b2d4f60";
const VIEWER: &str = "viewer-secret-0c8e2a4b6d1f3e57";
const TEAM_B: &str = "teamb-secret-9d1b3f5a7c2e4a68";
const ROOT: &str = "root-secret-5e7c9a1b3d2f4c86";
const NODE: &str = "node-secret-2a4c6e8b1d3f5a79";
const NODE_B: &str = "nodeb-secret-8b6d4f2a9c1e3b57";

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-auth-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A coordinator with six identities: the operator `ops`, the reader
/// `viewer` (both of `team-a`), the operator `team-b-ops` of `team-b`,
/// the admin `root`, the worker `node` and the worker `node-b` that runs
/// only `team-b`'s tasks. `ops` and `viewer` take their secrets from the
/// environment, `team-b-ops` from the secrets file, the rest are digests.
fn secured_cluster(dir: &Path) -> anyhow::Result<TestCluster> {
    secured_cluster_with(dir, &[])
}

/// [`secured_cluster`] with more of the coordinator's environment.
fn secured_cluster_with(dir: &Path, extra: &[(&str, &str)]) -> anyhow::Result<TestCluster> {
    let secrets = dir.join("coordinator.secrets");
    std::fs::write(&secrets, format!("# team b\nTEAM_B_TOKEN={TEAM_B}\n"))?;
    let config = dir.join("coordinator.toml");
    std::fs::write(
        &config,
        format!(
            r#"
secrets_file = "coordinator.secrets"

[[tokens]]
name = "ops"
secret = "${{OPS_TOKEN}}"
role = "operator"
namespace = "team-a"

[[tokens]]
name = "viewer"
secret = "${{VIEWER_TOKEN}}"
role = "reader"
namespace = "team-a"

[[tokens]]
name = "team-b-ops"
secret = "${{TEAM_B_TOKEN}}"
role = "operator"
namespace = "team-b"

[[tokens]]
name = "root"
sha256 = "{root}"
role = "admin"

[[tokens]]
name = "node"
sha256 = "{node}"
role = "worker"

[[tokens]]
name = "node-b"
sha256 = "{node_b}"
role = "worker"
namespaces = ["team-b"]
"#,
            root = sha256_hex(ROOT),
            node = sha256_hex(NODE),
            node_b = sha256_hex(NODE_B),
        ),
    )?;
    let mut env = vec![
        ("WEFT_CONFIG", config.to_str().unwrap()),
        ("OPS_TOKEN", OPS),
        ("VIEWER_TOKEN", VIEWER),
    ];
    env.extend_from_slice(extra);
    TestCluster::start_with_env(&env)
}

/// `weft` against `cluster` with `token` (through WEFT_TOKEN).
fn weft(cluster: &TestCluster, token: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(binary("weft"));
    command
        .args(["--coordinator", cluster.url()])
        .args(args)
        .stdin(Stdio::null())
        .env_remove("WEFT_COORDINATOR")
        .env_remove("WEFT_TOKEN");
    if let Some(token) = token {
        command.env("WEFT_TOKEN", token);
    }
    command.output().expect("weft runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn script_graph(name: &str) -> GraphBuilder {
    GraphBuilder::new(name).field("n", "integer", 1).node(
        "inc",
        NodeBuilder::script(&["sh", "-c", r#"echo "{\"n\": 2}""#]).start(),
    )
}

async fn as_identity(cluster: &TestCluster, token: &str) -> anyhow::Result<Client> {
    Ok(Client::connect(cluster.url().to_owned())
        .await?
        .with_token(token)?)
}

#[tokio::test]
async fn identities_roles_and_namespaces_are_enforced() -> anyhow::Result<()> {
    let dir = scratch("roles");
    let mut cluster = secured_cluster(&dir)?;
    cluster.add_worker_with("w", 2, &["--token".into(), NODE.into()])?;
    cluster.wait_for_workers(&["w"]).await?;

    // No token, or one the coordinator does not know: unauthenticated, 5.
    let none = weft(&cluster, None, &["runs"]);
    assert_eq!(none.status.code(), Some(5), "{}", stderr(&none));
    assert!(
        stderr(&none).starts_with("error: unauthenticated: this coordinator requires an identity"),
        "{}",
        stderr(&none)
    );
    let unknown = weft(&cluster, Some("not-a-token-of-ours"), &["runs"]);
    assert_eq!(unknown.status.code(), Some(5), "{}", stderr(&unknown));
    assert_eq!(
        stderr(&unknown).trim(),
        "error: unauthenticated: the token is not one this coordinator knows"
    );

    // A reader reads but cannot submit; nor can a worker's token.
    let graph = "examples/critique-loop.yaml";
    let graph = weft_tests::repo().join(graph);
    let graph = graph.to_str().unwrap();
    let read = weft(&cluster, Some(VIEWER), &["runs"]);
    assert!(read.status.success(), "{}", stderr(&read));
    let submit = weft(
        &cluster,
        Some(VIEWER),
        &["run", graph, "--input", r#"{"topic": "x"}"#],
    );
    assert_eq!(submit.status.code(), Some(5), "{}", stderr(&submit));
    assert_eq!(
        stderr(&submit).trim(),
        "error: permission denied: 'viewer' has the role reader; Submit needs the role operator or admin"
    );
    let as_worker = weft(&cluster, Some(NODE), &["runs"]);
    assert_eq!(as_worker.status.code(), Some(5), "{}", stderr(&as_worker));

    // The operator of team-a runs the example; its run is team-a's.
    let run = weft(
        &cluster,
        Some(OPS),
        &["run", graph, "--input", r#"{"topic": "x"}"#, "--json"],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    let run_id = stdout_json(&run)["run_id"].as_str().unwrap().to_owned();

    // Another namespace's operator is told the run does not exist, and
    // does not see it listed; the team's reader and the admin do.
    let hidden = weft(&cluster, Some(TEAM_B), &["status", &run_id]);
    assert_eq!(hidden.status.code(), Some(1), "{}", stderr(&hidden));
    assert_eq!(
        stderr(&hidden).trim(),
        format!("error: unknown run '{run_id}'")
    );
    for args in [
        vec!["cancel", run_id.as_str()],
        vec!["retry", run_id.as_str()],
        vec!["resume", run_id.as_str(), "review", "approve"],
        vec!["watch", run_id.as_str()],
    ] {
        let out = weft(&cluster, Some(TEAM_B), &args);
        assert!(
            stderr(&out).contains(&format!("unknown run '{run_id}'")),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let listed = |token: &str| -> Vec<String> {
        let out = weft(&cluster, Some(token), &["runs", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let runs = stdout_json(&out);
        runs.as_array()
            .or_else(|| runs["runs"].as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|r| r["run_id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(!listed(TEAM_B).contains(&run_id));
    assert!(listed(VIEWER).contains(&run_id));
    assert!(listed(ROOT).contains(&run_id));
    let status = weft(&cluster, Some(VIEWER), &["status", &run_id]);
    assert!(status.status.success(), "{}", stderr(&status));
    // Deleting runs is the admin's alone.
    let delete = weft(&cluster, Some(OPS), &["delete", &run_id]);
    assert_eq!(delete.status.code(), Some(5), "{}", stderr(&delete));
    assert!(
        stderr(&delete).contains("DeleteRun needs the role admin"),
        "{}",
        stderr(&delete)
    );
    let deleted = weft(&cluster, Some(ROOT), &["delete", &run_id]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));

    // The library with a token; a team-b run is team-b's alone.
    let team_b = as_identity(&cluster, TEAM_B).await?;
    let submitted = team_b.submit_graph(&script_graph("b"), &json!({})).await?;
    let done = team_b.wait(&submitted.run_id).await?;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.namespace, "team-b");
    assert_eq!(done.submitted_by, "team-b-ops");
    let ops = as_identity(&cluster, OPS).await?;
    let error = ops.get(&submitted.run_id).await.unwrap_err();
    assert!(error.to_string().contains("unknown run"), "{error}");

    // Metrics want an identity here, a reader's or better.
    let anonymous = cluster.metrics();
    assert!(
        anonymous
            .as_ref()
            .is_err_and(|e| e.to_string().contains("401")),
        "{anonymous:?}"
    );
    // Refusals are counted by reason.
    let metrics = cluster.metrics_as(VIEWER)?;
    // A run of another namespace is counted as an unknown run: the metric
    // does not tell that it exists.
    assert!(!metrics.contains("reason=\"namespace\""), "{metrics}");
    for reason in ["no_identity", "unknown_identity", "role", "unknown_run"] {
        assert!(
            metrics.contains(&format!(
                "weft_requests_refused_total{{reason=\"{reason}\"}}"
            )),
            "{reason} missing from:\n{metrics}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn workers_need_an_identity_and_keep_to_their_namespaces() -> anyhow::Result<()> {
    let dir = scratch("workers");
    let mut cluster = secured_cluster(&dir)?;
    // A worker without a token is refused, and says why.
    cluster.add_worker("anonymous", 1)?;
    let code = cluster.wait_for_exit("anonymous").await?;
    assert_ne!(code, Some(0));
    assert!(
        cluster
            .log("anonymous")
            .contains("the coordinator refused this worker: this coordinator requires an identity"),
        "{}",
        cluster.log("anonymous")
    );
    // An operator's token does not make a worker.
    cluster.add_worker_with("impostor", 1, &["--token".into(), OPS.into()])?;
    cluster.wait_for_exit("impostor").await?;
    assert!(
        cluster
            .log("impostor")
            .contains("Join needs the role worker"),
        "{}",
        cluster.log("impostor")
    );

    // Only a worker restricted to team-b is connected: a team-a run waits,
    // saying for what, while a team-b run completes on it.
    cluster.add_worker_with("b-only", 1, &["--token".into(), NODE_B.into()])?;
    cluster.wait_for_workers(&["b-only"]).await?;
    let ops = as_identity(&cluster, OPS).await?;
    let team_b = as_identity(&cluster, TEAM_B).await?;
    let waiting = ops.submit_graph(&script_graph("a"), &json!({})).await?;
    let b_run = team_b.submit_graph(&script_graph("b"), &json!({})).await?;
    assert_eq!(
        team_b.wait(&b_run.run_id).await?.status,
        RunStatus::Completed
    );
    let unhosted = weft_tests::wait_for_event(&ops, &waiting.run_id, "task_unhosted").await?;
    assert_eq!(
        unhosted.body["needs"],
        "kind 'script' on a worker allowed to run namespace 'team-a'"
    );
    assert_eq!(
        ops.status(&waiting.run_id).await?.status,
        RunStatus::Running
    );
    // A bundle file of team A's is not there for team B's worker, even by
    // its hash; a worker of every namespace gets it.
    let secret_script = b"echo team-a's own script".to_vec();
    let bundle = weft_client::GraphBundle::from_text(
        "a-files.yaml",
        "nodes:\n  a: { kind: script, run: [sh, own.sh], start: true }\n",
    )
    .with_file("own.sh", &secret_script, 0o644);
    let with_file = ops.submit_bundle(bundle, &json!({})).await?;
    let sha256: String = {
        use sha2::Digest;
        sha2::Sha256::digest(&secret_script)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let fetch = |token: &'static str| {
        let url = cluster.url().to_owned();
        let sha256 = sha256.clone();
        async move {
            let mut client =
                weft_proto::v1::worker_service_client::WorkerServiceClient::connect(url).await?;
            let mut request = tonic::Request::new(weft_proto::v1::FetchBlobRequest { sha256 });
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse()?);
            anyhow::Ok(client.fetch_blob(request).await)
        }
    };
    let refused = fetch(NODE_B)
        .await?
        .expect_err("team B's worker is refused");
    assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
    let fetched = fetch(NODE)
        .await?
        .expect("a worker of every namespace fetches it");
    assert_eq!(fetched.into_inner().content, secret_script);
    // Nor are team A's knowledge indexes: team B's worker may not ask for
    // one of a team-a run's, even by its key; a worker of every namespace
    // is asked to build it (nobody has).
    let share = |token: &'static str| {
        let url = cluster.url().to_owned();
        let run_id = waiting.run_id.to_string();
        async move {
            let mut client =
                weft_proto::v1::worker_service_client::WorkerServiceClient::connect(url).await?;
            let want = weft_proto::v1::IndexUpload {
                body: Some(weft_proto::v1::index_upload::Body::Want(
                    weft_proto::v1::IndexWanted {
                        run_id,
                        key: "ab".repeat(32),
                        knowledge: "handbook".into(),
                        timeout_ms: 10_000,
                        worker: token.into(),
                    },
                )),
            };
            let mut request = tonic::Request::new(tokio_stream::iter([want]));
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse()?);
            anyhow::Ok(client.share_index(request).await)
        }
    };
    let refused = share(NODE_B)
        .await?
        .expect_err("team B's worker is refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("does not serve namespace 'team-a'"),
        "{refused:?}"
    );
    let mut answers = share(NODE)
        .await?
        .expect("a worker of every namespace asks")
        .into_inner();
    let first = answers.message().await?.and_then(|answer| answer.body);
    assert!(
        matches!(first, Some(weft_proto::v1::index_download::Body::Build(_))),
        "{first:?}"
    );
    drop(answers);

    // A worker for every namespace joins; the team-a run goes on with it.
    cluster.add_worker_with("all", 1, &["--token".into(), NODE.into()])?;
    assert_eq!(
        ops.wait(&waiting.run_id).await?.status,
        RunStatus::Completed
    );
    ops.wait(&with_file.run_id).await?;
    assert!(
        !cluster.log("b-only").contains(waiting.run_id.as_str()),
        "the team-b worker saw the team-a run"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A graph whose approval only `root` (or any admin) may answer, then an
/// input anyone who may resume answers.
const GATED: &str = "
name: gated
state:
  note: { type: string }
nodes:
  draft:
    kind: script
    run: [sh, -c, 'echo {}']
    start: true
    next: sign_off
  sign_off:
    kind: approval
    prompt: Ship it?
    approvers: [root]
    next: remark
  remark:
    kind: input
    output_key: note
    prompt: Anything to add?
    end: true
";

#[tokio::test]
async fn approvers_are_enforced_and_who_did_what_is_recorded() -> anyhow::Result<()> {
    let dir = scratch("approvers");
    let mut cluster = secured_cluster(&dir)?;
    cluster.add_worker_with("w", 1, &["--token".into(), NODE.into()])?;
    cluster.wait_for_workers(&["w"]).await?;
    let graph = dir.join("gated.yaml");
    std::fs::write(&graph, GATED)?;
    let graph = graph.to_str().unwrap();

    let run = weft(&cluster, Some(OPS), &["run", graph, "--json"]);
    assert_eq!(run.status.code(), Some(3), "{}", stderr(&run));
    let run_id = stdout_json(&run)["run_id"].as_str().unwrap().to_owned();

    // The operator may resume runs, but is not among this node's approvers.
    let refused = weft(
        &cluster,
        Some(OPS),
        &["resume", &run_id, "sign_off", "approve"],
    );
    assert_eq!(refused.status.code(), Some(5), "{}", stderr(&refused));
    assert_eq!(
        stderr(&refused).trim(),
        "error: permission denied: 'ops' is not among the approvers of node 'sign_off' (root)"
    );
    // A reader may not resume at all.
    let reader = weft(
        &cluster,
        Some(VIEWER),
        &["resume", &run_id, "sign_off", "approve"],
    );
    assert_eq!(reader.status.code(), Some(5), "{}", stderr(&reader));
    assert!(stderr(&reader).contains("Resume needs the role operator or admin"));

    let approved = weft(
        &cluster,
        Some(ROOT),
        &["resume", &run_id, "sign_off", "approve"],
    );
    assert!(approved.status.success(), "{}", stderr(&approved));
    let answered = weft(&cluster, Some(OPS), &["resume", &run_id, "remark", "lgtm"]);
    assert!(answered.status.success(), "{}", stderr(&answered));

    let status = weft(&cluster, Some(VIEWER), &["status", &run_id]);
    assert!(status.status.success(), "{}", stderr(&status));
    let shown = stderr(&status);
    assert!(shown.contains("sign_off: approved by root"), "{shown}");
    assert!(shown.contains("remark: answered by ops"), "{shown}");

    // The events name who submitted and who answered.
    let watch = weft(&cluster, Some(VIEWER), &["watch", &run_id, "--json"]);
    assert!(watch.status.success(), "{}", stderr(&watch));
    let events: Vec<Value> = String::from_utf8_lossy(&watch.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        events[0],
        json!({"type": "run_submitted", "by": "ops", "namespace": "team-a"})
    );
    let received: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "input_received")
        .map(|e| (e["node"].as_str().unwrap(), e["by"].as_str().unwrap()))
        .collect();
    assert_eq!(received, [("sign_off", "root"), ("remark", "ops")]);

    // Cancelling records who asked.
    let again = weft(&cluster, Some(OPS), &["run", graph, "--json"]);
    let again = stdout_json(&again)["run_id"].as_str().unwrap().to_owned();
    let cancel = weft(&cluster, Some(OPS), &["cancel", &again]);
    assert!(cancel.status.success(), "{}", stderr(&cancel));
    let ops = as_identity(&cluster, OPS).await?;
    let cancelled = weft_tests::events_of(&ops, &again, "cancel_requested").await?;
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0].body["by"], "ops");

    // No secret is anywhere the cluster wrote: its store, logs, metrics,
    // its configuration as printed, or what clients were shown.
    let check = Command::new(binary("coordinator"))
        .args(["--check-config", "--config"])
        .arg(dir.join("coordinator.toml"))
        .env("OPS_TOKEN", OPS)
        .env("VIEWER_TOKEN", VIEWER)
        .output()?;
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mut written = vec![
        String::from_utf8_lossy(&check.stdout).into_owned(),
        cluster.metrics_as(ROOT)?,
        stderr(&run),
        String::from_utf8_lossy(&watch.stdout).into_owned(),
    ];
    cluster.stop_coordinator()?;
    let files = files_under(cluster.dir());
    assert!(
        files.iter().any(|f| f.ends_with("weft.redb")) && files.len() > 3,
        "the store and logs are not where expected: {files:?}"
    );
    written.extend(files.iter().map(|path| {
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    }));
    for secret in [OPS, VIEWER, TEAM_B, ROOT, NODE, NODE_B] {
        for text in &written {
            assert!(!text.contains(secret), "a secret leaked: {secret}");
        }
    }
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("viewer (reader, namespace team-a)"),
        "the printed configuration names the identities"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn a_coordinator_beyond_loopback_needs_tls_and_identities_or_insecure() {
    let dir = scratch("exposed");
    let start = |extra: &[&str]| {
        Command::new(binary("coordinator"))
            .args([
                "--listen",
                "0.0.0.0:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.join("data"))
            .args(extra)
            .env_remove("WEFT_INSECURE")
            .output()
            .unwrap()
    };
    let refused = start(&["--check-config"]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim(),
        "coordinator: refusing to start: config key 'listen': 0.0.0.0:0 is not a loopback address, and this coordinator has no TLS ([tls] cert and key) and no identities ([[tokens]] or tls.client_ca): anyone who reaches it could run commands on every worker; configure them, or set insecure = true (WEFT_INSECURE=true, --insecure) to serve without"
    );
    let allowed = start(&["--check-config", "--insecure"]);
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("insecure: true"));
    // The HTTP listener serves the viewer's API, which acts on runs: beyond
    // loopback it wants identities too, not TLS alone.
    let http = Command::new(binary("coordinator"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "0.0.0.0:0",
            "--check-config",
            "--data-dir",
        ])
        .arg(dir.join("data"))
        .env_remove("WEFT_INSECURE")
        .output()
        .unwrap();
    assert_eq!(http.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&http.stderr).trim(),
        "coordinator: refusing to start: config key 'metrics_listen': 0.0.0.0:0 is not a loopback address, and this coordinator has no TLS ([tls] cert and key) and no identities ([[tokens]] or tls.client_ca): anyone who reaches it could run commands on every worker; configure them, or set insecure = true (WEFT_INSECURE=true, --insecure) to serve without"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn retention_counts_each_namespace_apart() -> anyhow::Result<()> {
    let dir = scratch("retention");
    let mut cluster = secured_cluster_with(&dir, &[("WEFT_RETAIN_FINISHED_RUNS", "2")])?;
    cluster.add_worker_with("w", 2, &["--token".into(), NODE.into()])?;
    cluster.wait_for_workers(&["w"]).await?;
    let team_b = as_identity(&cluster, TEAM_B).await?;
    let ops = as_identity(&cluster, OPS).await?;
    // Team B's one run, then team A's five quick ones: with a global
    // count of 2, team A's runs deleted team B's only run.
    let b_run = team_b.submit_graph(&script_graph("b"), &json!({})).await?;
    team_b.wait(&b_run.run_id).await?;
    let mut a_runs = Vec::new();
    for i in 0..5 {
        let run = ops
            .submit_graph(&script_graph(&format!("a{i}")), &json!({}))
            .await?;
        ops.wait(&run.run_id).await?;
        a_runs.push(run.run_id.to_string());
    }
    // A listing applies the retention exactly.
    let ids = |runs: Vec<weft_client::RunInfo>| {
        let mut ids: Vec<String> = runs.into_iter().map(|r| r.run_id.to_string()).collect();
        ids.sort();
        ids
    };
    let mut newest = a_runs[3..].to_vec();
    newest.sort();
    assert_eq!(
        ids(ops.list().await?),
        newest,
        "team A keeps its newest two"
    );
    assert_eq!(
        ids(team_b.list().await?),
        [b_run.run_id.to_string()],
        "team B keeps its only run"
    );
    let status = team_b.status(&b_run.run_id).await?;
    assert_eq!(status.status, weft_client::RunStatus::Completed);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
