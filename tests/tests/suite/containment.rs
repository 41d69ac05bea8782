//! Containment (issue 36): a graph's scripts run confined. They cannot
//! stop, signal or read their worker, see other runs' files or the
//! worker's credentials, and run under limits named when hit; a worker
//! refuses to start where it cannot confine them, unless told to.

use std::time::Duration;

use serde_json::{Value, json};
use weft_client::{GraphBundle, RunStatus};
use weft_tests::TestCluster;

const PATIENCE: Duration = Duration::from_secs(60);

fn graph(yaml: &str) -> GraphBundle {
    GraphBundle::from_text("contained.yaml", yaml)
}

/// Whether process `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test]
async fn a_script_that_signals_its_parent_stops_no_worker_and_a_run_after_completes()
-> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    let names = ["w1", "w2", "w3"];
    for name in names {
        cluster.add_worker(name, 1)?;
    }
    cluster.wait_for_workers(&names).await?;
    let client = cluster.client().await?;
    // SIGTERM made every worker drain and exit 0, one attempt each; under
    // `init: true`, SIGKILL killed them.
    for signal in ["TERM", "KILL"] {
        let yaml = format!(
            "nodes:\n  pill: {{ kind: script, start: true, run: [sh, -c, 'kill -{signal} $PPID; sleep 2; exit 3'], retry: {{ max_attempts: 3, initial_interval: 0.1 }} }}\n"
        );
        let run = client.submit_bundle(graph(&yaml), &json!({})).await?;
        let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
        assert_eq!(done.status, RunStatus::Failed, "{signal}");
        let error = done.error.expect("an error");
        assert!(
            error.message.contains("script_failed"),
            "{signal}: {}",
            error.message
        );
        for name in names {
            let pid = cluster.worker_pid(name).expect("a worker");
            assert!(running(pid), "{signal}: worker {name} is gone");
        }
    }
    let ok = client
        .submit_bundle(
            graph("nodes:\n  a: { kind: script, start: true, run: [sh, -c, 'echo \"{\\\"ok\\\": true}\"'] }\n"),
            &json!({}),
        )
        .await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&ok.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    Ok(())
}

#[tokio::test]
async fn a_script_sees_neither_its_worker_nor_its_credentials_nor_other_runs_files()
-> anyhow::Result<()> {
    // A variable only the worker's (and the coordinator's) environment
    // holds, as its token would be.
    let mut cluster = TestCluster::start_with_env(&[("WEFT_PROBE_SECRET", "hush-123")])?;
    let secrets = cluster.dir().join("worker.secrets");
    std::fs::write(&secrets, "API_KEY=s3cret-value\n")?;
    cluster.add_worker_with(
        "w",
        1,
        &["--secrets-file".to_owned(), secrets.display().to_string()],
    )?;
    cluster.wait_for_workers(&["w"]).await?;
    let worker_pid = cluster.worker_pid("w").expect("a worker");
    let work_dir = cluster.dir().join("w");
    let client = cluster.client().await?;
    // What a script can find of its worker: the processes it sees, its
    // parent's environment and command line, the secrets file, the work
    // directory with every run's scratch, and whether it can write.
    let probe = format!(
        r#"
import json, os
def read(path):
    try:
        with open(path, 'rb') as f:
            return f.read().decode(errors='replace')
    except OSError as e:
        return 'error: ' + e.__class__.__name__
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
cmdlines = [read('/proc/%d/cmdline' % p) for p in pids]
try:
    scratch = os.listdir('{work}/scratch')
except OSError as e:
    scratch = 'error: ' + e.__class__.__name__
try:
    open('/etc/weft-probe', 'w')
    wrote = True
except OSError:
    wrote = False
print(json.dumps({{
    'pids': pids,
    'cmdlines': cmdlines,
    'parent_environ': read('/proc/%d/environ' % os.getppid()),
    'worker_visible': 'hush-123' in read('/proc/{worker_pid}/environ'),
    'secrets': read('{secrets}'),
    'scratch': scratch,
    'own': os.path.basename(os.getcwd()),
    'wrote_etc': wrote,
    'writable': [os.access('/tmp', os.W_OK), os.access(os.getcwd(), os.W_OK)],
}}))
"#,
        work = work_dir.display(),
        secrets = secrets.display(),
    );
    std::fs::create_dir_all(cluster.dir().join("bundle"))?;
    let yaml = "nodes:\n  probe: { kind: script, start: true, run: [python3, probe.py] }\n";
    let bundle = GraphBundle {
        graph_path: "probe.yaml".to_owned(),
        files: vec![
            ("probe.yaml".to_owned(), yaml.as_bytes().to_vec(), 0o644),
            ("probe.py".to_owned(), probe.into_bytes(), 0o644),
        ],
    };
    let run = client.submit_bundle(bundle, &json!({})).await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let seen = &done.state;
    let pids: Vec<u64> = seen["pids"]
        .as_array()
        .expect("pids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(
        pids.len() <= 4,
        "the script sees only its own sandbox: {pids:?}"
    );
    let cmdlines = seen["cmdlines"].to_string();
    assert!(
        !cmdlines.contains("--coordinator"),
        "the worker is visible: {cmdlines}"
    );
    assert!(
        !seen.to_string().contains("hush-123"),
        "the worker's environment leaked: {seen}"
    );
    assert!(
        std::fs::read(format!("/proc/{worker_pid}/environ"))
            .is_ok_and(|e| String::from_utf8_lossy(&e).contains("hush-123")),
        "the probe's variable is in the worker's environment, so its absence above means something"
    );
    assert_eq!(seen["worker_visible"], json!(false));
    // Empty, or not readable at all (a device node bound in a user
    // namespace): either way not the secret.
    let secrets_seen = seen["secrets"].as_str().unwrap_or_default();
    assert!(
        secrets_seen.is_empty() || secrets_seen.starts_with("error: "),
        "the secrets file was read: {secrets_seen}"
    );
    assert_eq!(
        seen["scratch"],
        json!([seen["own"]]),
        "no other run's scratch directory is there, only its own"
    );
    assert_eq!(
        seen["wrote_etc"],
        json!(false),
        "the file system is read-only"
    );
    assert_eq!(
        seen["writable"],
        json!([true, true]),
        "/tmp and its scratch directory"
    );
    assert!(running(worker_pid));
    Ok(())
}

#[tokio::test]
async fn a_script_past_its_sandbox_limits_fails_naming_the_limit() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let cases = [
        (
            "{ cpu: 1s }",
            "python3, -c, 'while True: pass'",
            "the script hit its CPU time limit (sandbox cpu: 1s)",
        ),
        (
            "{ memory: 64MiB }",
            "python3, -c, 'x = bytearray(200 * 1024 * 1024)'",
            "the script hit its memory limit (sandbox memory: 64MiB)",
        ),
        (
            "{ open_files: 16 }",
            "python3, -c, 'fs = [open(\"/dev/null\") for _ in range(100)]'",
            "the script hit its open files limit (sandbox open_files: 16)",
        ),
        (
            "{ network: false }",
            "python3, -c, 'import socket; socket.create_connection((\"127.0.0.1\", PORT), 5)'",
            "ConnectionRefusedError",
        ),
    ];
    let port = cluster.url().rsplit(':').next().expect("a port").to_owned();
    for (sandbox, run, expected) in cases {
        let run = run.replace("PORT", &port);
        let yaml = format!(
            "nodes:\n  limited: {{ kind: script, start: true, sandbox: {sandbox}, run: [{run}] }}\n"
        );
        let submitted = client.submit_bundle(graph(&yaml), &json!({})).await?;
        let done = tokio::time::timeout(PATIENCE, client.wait(&submitted.run_id)).await??;
        assert_eq!(done.status, RunStatus::Failed, "{sandbox}");
        let message = done.error.map(|e| e.message).unwrap_or_default();
        assert!(message.contains(expected), "{sandbox}: {message}");
    }
    // The same connection with the network open reaches the coordinator.
    let yaml = format!(
        "nodes:\n  open: {{ kind: script, start: true, run: [python3, -c, 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"{{}}\")'] }}\n"
    );
    let submitted = client.submit_bundle(graph(&yaml), &json!({})).await?;
    let done = tokio::time::timeout(PATIENCE, client.wait(&submitted.run_id)).await??;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    Ok(())
}

#[tokio::test]
async fn a_function_nodes_sandbox_confines_the_python_that_serves_it() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 2)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let port = cluster.url().rsplit(':').next().expect("a port").to_owned();
    let functions = format!(
        "import socket\n\ndef reach():\n    socket.create_connection((\"127.0.0.1\", {port}), 5).close()\n    return {{\"reached\": True}}\n\ndef hoard():\n    blob = bytearray(200 * 1024 * 1024)\n    return {{\"held\": len(blob)}}\n"
    );
    let run = |node: &str| {
        let yaml = format!("functions: helpers.py\nnodes:\n{node}\n");
        GraphBundle::from_text("contained.yaml", &yaml).with_file(
            "helpers.py",
            functions.as_bytes(),
            0o644,
        )
    };
    let cases = [
        (
            "  cut: { kind: function, callable: reach, start: true, sandbox: { network: false } }",
            "ConnectionRefusedError",
        ),
        (
            "  small: { kind: function, callable: hoard, start: true, sandbox: { memory: 64MiB } }",
            "MemoryError",
        ),
    ];
    for (node, expected) in cases {
        let submitted = client.submit_bundle(run(node), &json!({})).await?;
        let done = tokio::time::timeout(PATIENCE, client.wait(&submitted.run_id)).await??;
        assert_eq!(done.status, RunStatus::Failed, "{node}");
        let message = done.error.map(|e| e.message).unwrap_or_default();
        assert!(message.contains(expected), "{node}: {message}");
    }
    // The same functions without a sandbox, on the same worker (its other
    // pool): the network is open and 200 MiB fit the worker's limits.
    for node in [
        "  open: { kind: function, callable: reach, start: true }",
        "  big: { kind: function, callable: hoard, start: true }",
    ] {
        let submitted = client.submit_bundle(run(node), &json!({})).await?;
        let done = tokio::time::timeout(PATIENCE, client.wait(&submitted.run_id)).await??;
        assert_eq!(
            done.status,
            RunStatus::Completed,
            "{node}: {:?}",
            done.error
        );
    }
    // A limit a long-lived process cannot keep per call is refused.
    let refused = client
        .submit_bundle(
            run("  slow: { kind: function, callable: reach, start: true, sandbox: { cpu: 5s } }"),
            &json!({}),
        )
        .await
        .expect_err("refused by validation");
    assert!(
        refused
            .to_string()
            .contains("sandbox.cpu does not apply to a function node"),
        "{refused}"
    );
    Ok(())
}

#[tokio::test]
async fn a_worker_that_cannot_confine_refuses_to_start_unless_told() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("weft-unconfinable-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let refused = std::process::Command::new(weft_tests::binary("worker"))
        .args(["--coordinator", "http://127.0.0.1:9", "--work-dir"])
        .arg(&dir)
        .env("PATH", &dir)
        .env_remove("WEFT_SANDBOX")
        .output()?;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("scripts cannot be confined here: bwrap and prlimit are not found on PATH"),
        "{said}"
    );
    assert!(said.contains("--sandbox off"), "{said}");
    // Told, it starts (and keeps retrying the unreachable coordinator).
    let mut told = std::process::Command::new(weft_tests::binary("worker"))
        .args([
            "--coordinator",
            "http://127.0.0.1:9",
            "--sandbox",
            "off",
            "--work-dir",
        ])
        .arg(&dir)
        .env("PATH", &dir)
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stderr = told.stderr.take().expect("stderr");
    let warned = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("run unconfined (--sandbox off)"))
    });
    let warned = tokio::time::timeout(PATIENCE, warned).await??;
    let _ = told.kill();
    let _ = told.wait();
    assert!(warned, "the worker warns that its scripts run unconfined");
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// A mount churned under a shared mount point of the host's, as a
/// container engine does under `/var/lib/docker` while it starts
/// containers: a `mount --bind` and its `umount` again and again, until
/// dropped (then the churn stops and the mounts go).
struct MountChurn {
    churn: std::process::Child,
    shared: std::path::PathBuf,
}

impl MountChurn {
    fn start(dir: &std::path::Path) -> anyhow::Result<Self> {
        use std::os::unix::process::CommandExt;
        let shared = dir.join("shared");
        let from = dir.join("from");
        std::fs::create_dir_all(shared.join("x"))?;
        std::fs::create_dir_all(&from)?;
        let run = |argv: &[&str]| -> anyhow::Result<()> {
            let status = std::process::Command::new(argv[0])
                .args(&argv[1..])
                .status()?;
            anyhow::ensure!(status.success(), "{argv:?}: {status}");
            Ok(())
        };
        let shared_text = shared.to_str().expect("a UTF-8 path");
        run(&["mount", "--bind", shared_text, shared_text])?;
        run(&["mount", "--make-shared", shared_text])?;
        let churn = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while :; do mount --bind '{}' '{shared_text}/x' && umount '{shared_text}/x'; done",
                from.display()
            ))
            .process_group(0)
            .spawn()?;
        Ok(Self { churn, shared })
    }
}

impl Drop for MountChurn {
    fn drop(&mut self) {
        // The group: a `mount` under way would otherwise end after the
        // unmount below, and stay.
        let group = nix::unistd::Pid::from_raw(self.churn.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.churn.wait();
        for _ in 0..400 {
            if nix::sys::signal::killpg(group, None).is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = std::process::Command::new("umount")
            .args(["--recursive", "--lazy"])
            .arg(&self.shared)
            .status();
    }
}

/// bubblewrap makes each mount of the host read-only in a script's
/// sandbox; one the host adds or removes meanwhile failed the script
/// before it started ("Can't bind mount /oldroot/ on /newroot/: Unable to
/// apply mount flags"), which a script node took as its own failure. Now
/// a script that never started is started again, and every item of a map
/// completes while the host's mounts change under it.
#[tokio::test]
async fn scripts_start_while_the_hosts_mounts_change() -> anyhow::Result<()> {
    const MOST_ROUNDS: usize = 5;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: changing the host's mounts takes root");
        return Ok(());
    }
    let mut cluster = TestCluster::start()?;
    cluster.add_worker("w", 4)?;
    cluster.wait_for_workers(&["w"]).await?;
    let client = cluster.client().await?;
    let churn = MountChurn::start(&cluster.dir().join("mounts"))?;
    let items = 200;
    let yaml = r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: echo
    output_key: out
    collect_into: results
  echo: { kind: script, run: [sh, -c, 'echo "{\"out\": 1}"'] }
"#;
    let items: Vec<u32> = (0..items).collect();
    // One start in twenty fails here on a quiet machine, fewer when the
    // churn gets little of a busy one: maps run until the race has been
    // run into (and won) at least once, each completing whole.
    let raced = "the script's sandbox could not be set up; starting it again";
    for round in 1..=MOST_ROUNDS {
        let run = client
            .submit_bundle(graph(yaml), &json!({ "items": items }))
            .await?;
        let done = tokio::time::timeout(PATIENCE, client.wait(&run.run_id)).await??;
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        assert_eq!(
            done.state["results"].as_array().map(Vec::len),
            Some(items.len())
        );
        let log = cluster.log("w");
        if log.contains(raced) {
            break;
        }
        assert!(
            round < MOST_ROUNDS,
            "the churn never got in a sandbox's way in {MOST_ROUNDS} maps: {}",
            log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
    }
    drop(churn);
    Ok(())
}

/// A Python function process whose sandbox bubblewrap could not set up
/// ran nothing: it is started again, and the call answers. Each call here
/// starts a fresh confined process while a mount is churned (one start in
/// twenty fails).
#[tokio::test]
async fn a_python_process_whose_sandbox_could_not_be_set_up_is_started_again() -> anyhow::Result<()>
{
    use weft_worker::confinement::{Confine, Confinement, Limits, NodeSandbox, Places};
    use weft_worker::python::PythonPool;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: changing the host's mounts takes root");
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("weft-setup-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("helpers.py"),
        "def inc(counter):\n    return {'counter': counter + 1}\n",
    )?;
    let confinement = std::sync::Arc::new(Confinement::set_up(
        Confine::Bwrap,
        Limits::default(),
        Places::default(),
        (Vec::new(), Vec::new()),
    )?);
    let churn = MountChurn::start(&dir.join("mounts"))?;
    let call = |n: u64| {
        let pool = PythonPool::new("python3", &dir, 1).confined(
            confinement.clone(),
            dir.clone(),
            NodeSandbox::default(),
        );
        async move {
            let mut kwargs = serde_json::Map::new();
            kwargs.insert("counter".into(), json!(n));
            let answer = pool
                .call("helpers.py", "inc", vec![], kwargs, Duration::from_secs(10))
                .await;
            assert_eq!(answer, Ok(json!({"counter": n + 1})), "call {n}");
        }
    };
    // Four at a time, 100 in all.
    for round in 0..25u64 {
        let n = round * 4;
        tokio::join!(call(n), call(n + 1), call(n + 2), call(n + 3));
    }
    drop(churn);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
