//! Weft's multi-process tests: a [`TestCluster`] starts the real
//! `coordinator` and `worker` binaries (and the `test-worker`, a custom
//! worker with Rust handlers) on free ports, keeps a log per process, kills
//! its children on drop, and waits on conditions rather than sleeping.

#![warn(missing_docs)]

pub mod compose;
pub mod etcd;
pub mod group;
pub mod llm_server;
pub mod otlp;
pub mod postgres;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use weft_client::{Client, GraphBuilder, GraphBundle, NodeBuilder};

/// How long a condition may take before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A coordinator and workers as separate processes.
pub struct TestCluster {
    dir: PathBuf,
    /// Extra environment of the coordinator (its `WEFT_*` configuration).
    env: Vec<(String, String)>,
    coordinator: Option<Child>,
    url: String,
    metrics_url: String,
    workers: BTreeMap<String, Child>,
}

/// A fresh directory for one cluster's files.
fn cluster_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "weft-cluster-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ (rand_seed() as u128)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The directory holding the workspace's built binaries.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // target/debug/deps/<test binary> → target/debug
        let exe = std::env::current_exe().expect("the test binary has a path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/debug")
            .to_path_buf();
        let missing = [
            "coordinator",
            "worker",
            "weft",
            "test-worker",
            "store-writer",
        ]
        .iter()
        .any(|b| !dir.join(b).exists());
        if missing {
            // The whole workspace with every target, as the test build has
            // it: the same features, so this links binaries rather than
            // rebuilding dependencies with another feature set.
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--workspace", "--all-targets"])
                .status()
                .expect("cargo runs");
            assert!(
                status.success(),
                "building the coordinator and worker binaries failed"
            );
        }
        dir
    })
}

/// The path of a workspace binary (`coordinator`, `worker`, `test-worker`,
/// `weft`). Cargo builds the test-worker with this crate's tests.
pub fn binary(name: &str) -> PathBuf {
    bin_dir().join(name)
}

impl TestCluster {
    /// Starts a coordinator on a free loopback port.
    pub fn start() -> Result<Self> {
        Self::start_with_env(&[])
    }

    /// Starts a coordinator with extra environment (e.g. `WEFT_MAX_EVENTS`).
    pub fn start_with_env(env: &[(&str, &str)]) -> Result<Self> {
        Self::start_in(cluster_dir()?, env)
    }

    /// Starts a coordinator whose `coordinator.toml` is `config` (written
    /// into the cluster's directory), with extra environment.
    pub fn start_with_config(config: &str, env: &[(&str, &str)]) -> Result<Self> {
        let dir = cluster_dir()?;
        let file = dir.join("coordinator.toml");
        std::fs::write(&file, config)?;
        let file = file.display().to_string();
        let mut env = env.to_vec();
        env.push(("WEFT_CONFIG", &file));
        Self::start_in(dir, &env)
    }

    fn start_in(dir: PathBuf, env: &[(&str, &str)]) -> Result<Self> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (child, url, metrics_url) = spawn_coordinator(&dir, "127.0.0.1:0", &env)?;
        Ok(Self {
            dir,
            env,
            coordinator: Some(child),
            url,
            metrics_url,
            workers: BTreeMap::new(),
        })
    }

    /// Starts a coordinator and `test-worker`s with these names, and waits
    /// until they have joined.
    pub async fn with_test_workers(names: &[&str], slots: u32) -> Result<Self> {
        let mut cluster = Self::start()?;
        for name in names {
            cluster.add_test_worker(name, slots, None)?;
        }
        cluster.wait_for_workers(names).await?;
        Ok(cluster)
    }

    /// Kills the coordinator with SIGKILL and starts a new one on the same
    /// address and data directory: it restores the runs from its store, and
    /// workers reconnect.
    pub fn restart_coordinator(&mut self) -> Result<()> {
        self.stop_coordinator()?;
        let address = self.url.trim_start_matches("http://").to_owned();
        let (child, url, metrics_url) = spawn_coordinator(&self.dir, &address, &self.env)?;
        self.coordinator = Some(child);
        self.url = url;
        self.metrics_url = metrics_url;
        Ok(())
    }

    /// Stops the coordinator with SIGTERM, waits for it to exit, and
    /// starts it again at the same address.
    pub async fn restart_coordinator_cleanly(&mut self) -> Result<()> {
        self.signal_coordinator("TERM")?;
        let deadline = Instant::now() + PATIENCE;
        let child = self.coordinator.as_mut().context("no coordinator")?;
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                bail!("the coordinator did not exit within {PATIENCE:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.coordinator = None;
        self.restart_coordinator()
    }

    /// Kills the coordinator with SIGKILL (its data directory stays).
    pub fn stop_coordinator(&mut self) -> Result<()> {
        if let Some(mut child) = self.coordinator.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// The coordinator's data directory (its embedded store is
    /// `weft.redb` there).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Sends a signal (`STOP`, `CONT`, `TERM`, …) to a worker.
    pub fn signal_worker(&self, name: &str, signal: &str) -> Result<()> {
        let pid = self
            .worker_pid(name)
            .with_context(|| format!("no worker {name}"))?;
        send_signal(pid, signal)
    }

    /// Sends a signal (`HUP`, …) to the coordinator.
    pub fn signal_coordinator(&self, signal: &str) -> Result<()> {
        let pid = self
            .coordinator
            .as_ref()
            .map(Child::id)
            .context("the coordinator is not running")?;
        send_signal(pid, signal)
    }

    /// The coordinator's metrics URL, as it printed it.
    pub fn metrics_url(&self) -> &str {
        &self.metrics_url
    }

    /// The coordinator's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The coordinator's Prometheus text, fetched with a plain HTTP/1.0 GET.
    pub fn metrics(&self) -> Result<String> {
        self.metrics_endpoint("metrics")
    }

    /// The value of the unlabelled counter `name` in [`Self::metrics`];
    /// an error when the coordinator does not show it.
    pub fn counter(&self, name: &str) -> Result<u64> {
        let metrics = self.metrics()?;
        let line = metrics
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .with_context(|| format!("no {name} in:\n{metrics}"))?;
        Ok(line.trim().parse()?)
    }

    /// The Prometheus text, for a coordinator that wants an identity:
    /// with `token` (a reader's or better).
    pub fn metrics_as(&self, token: &str) -> Result<String> {
        let rest = self.metrics_url.trim_start_matches("http://");
        let (host, _) = rest.split_once('/').context("a metrics URL")?;
        http_get_as(host, "/metrics", Some(token))
    }

    /// `GET /PATH` on the coordinator's metrics listener (`healthz`,
    /// `readyz`, `metrics`): the body of a 200.
    pub fn metrics_endpoint(&self, path: &str) -> Result<String> {
        let rest = self.metrics_url.trim_start_matches("http://");
        let (host, _) = rest.split_once('/').context("a metrics URL")?;
        http_get(host, &format!("/{path}"))
    }

    /// A client connected to the coordinator.
    pub async fn client(&self) -> Result<Client> {
        Ok(Client::connect(self.url.clone()).await?)
    }

    /// Starts a `worker` binary (scripts only).
    pub fn add_worker(&mut self, name: &str, slots: u32) -> Result<()> {
        let args = self.worker_args(name, slots);
        self.spawn_worker("worker", name, &args)
    }

    /// Starts a `worker` with more arguments (`--config FILE`,
    /// `--secrets-file FILE`, …).
    pub fn add_worker_with(&mut self, name: &str, slots: u32, extra: &[String]) -> Result<()> {
        let mut args = self.worker_args(name, slots);
        args.extend(extra.iter().cloned());
        self.spawn_worker("worker", name, &args)
    }

    /// Starts a `test-worker` whose model provider is the test server at
    /// `url` (API key `key`).
    pub fn add_llm_test_worker(
        &mut self,
        name: &str,
        slots: u32,
        url: &str,
        key: &str,
    ) -> Result<()> {
        self.add_llm_test_worker_hosting(name, slots, url, key, None)
    }

    /// [`TestCluster::add_llm_test_worker`], hosting only the handlers and
    /// tools `only` names (comma-separated) when it is given.
    pub fn add_llm_test_worker_hosting(
        &mut self,
        name: &str,
        slots: u32,
        url: &str,
        key: &str,
        only: Option<&str>,
    ) -> Result<()> {
        let mut args = self.worker_args(name, slots);
        args.extend([
            "--llm-url".into(),
            url.into(),
            "--llm-key".into(),
            key.into(),
        ]);
        if let Some(only) = only {
            args.extend(["--only".into(), only.into()]);
        }
        self.spawn_worker("test-worker", name, &args)
    }

    /// Starts a `test-worker` (Rust handlers and scripts), optionally
    /// hosting only some handlers.
    pub fn add_test_worker(&mut self, name: &str, slots: u32, only: Option<&str>) -> Result<()> {
        let mut args = self.worker_args(name, slots);
        if let Some(only) = only {
            args.push("--only".into());
            args.push(only.into());
        }
        self.spawn_worker("test-worker", name, &args)
    }

    /// Starts a `test-worker` with more arguments (`--etcd URL`, which
    /// makes it look for its coordinators there rather than here).
    pub fn add_test_worker_with(&mut self, name: &str, slots: u32, extra: &[String]) -> Result<()> {
        let mut args = self.worker_args(name, slots);
        args.extend(extra.iter().cloned());
        self.spawn_worker("test-worker", name, &args)
    }

    /// What every worker is started with: this cluster, a name, slots.
    fn worker_args(&self, name: &str, slots: u32) -> Vec<String> {
        vec![
            "--coordinator".to_owned(),
            self.url.clone(),
            "--name".into(),
            name.into(),
            "--slots".into(),
            slots.to_string(),
        ]
    }

    fn spawn_worker(&mut self, binary_name: &str, name: &str, args: &[String]) -> Result<()> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        // Workers share the coordinator's extra environment (its OTEL_*
        // variables, say); `WEFT_*` keys mean nothing to them.
        let child = Command::new(binary(binary_name))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .arg("--work-dir")
            .arg(self.dir.join(name))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting worker {name}"))?;
        self.workers.insert(name.to_owned(), child);
        Ok(())
    }

    /// The process id of the coordinator, while it runs.
    pub fn coordinator_pid(&self) -> Option<u32> {
        self.coordinator.as_ref().map(Child::id)
    }

    /// The process id of a worker.
    pub fn worker_pid(&self, name: &str) -> Option<u32> {
        self.workers.get(name).map(Child::id)
    }

    /// Waits for a worker to exit and returns its exit code.
    pub async fn wait_for_exit(&mut self, name: &str) -> Result<Option<i32>> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let child = self
                .workers
                .get_mut(name)
                .with_context(|| format!("no worker {name}"))?;
            if let Some(status) = child.try_wait()? {
                self.workers.remove(name);
                return Ok(status.code());
            }
            if Instant::now() > deadline {
                bail!("worker {name} did not exit within {PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills a worker with SIGKILL.
    pub fn kill_worker(&mut self, name: &str) -> Result<()> {
        let mut child = self
            .workers
            .remove(name)
            .with_context(|| format!("no worker {name}"))?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Waits until `name`'s log contains `text`.
    pub async fn wait_for_log(&self, name: &str, text: &str) -> Result<()> {
        self.wait_for_log_count(name, text, 1).await
    }

    /// Waits until `name`'s log contains `text` at least `count` times.
    pub async fn wait_for_log_count(&self, name: &str, text: &str, count: usize) -> Result<()> {
        let path = self.dir.join(format!("{name}.log"));
        wait_until(PATIENCE, || {
            std::fs::read_to_string(&path).is_ok_and(|log| log.matches(text).count() >= count)
        })
        .await
        .with_context(|| {
            format!(
                "{name}'s log never said {text:?} {count} times:\n{}",
                self.log(name)
            )
        })
    }

    /// Waits until every named worker has joined the coordinator.
    pub async fn wait_for_workers(&self, names: &[&str]) -> Result<()> {
        for name in names {
            self.wait_for_log(name, "joined the coordinator").await?;
        }
        Ok(())
    }

    /// The cluster's private directory (logs, data, workers' files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A process's log so far.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for child in self.workers.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut child) = self.coordinator.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() && std::env::var_os("WEFT_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("cluster logs kept in {}", self.dir.display());
        }
    }
}

/// Starts a coordinator binary listening on `address`, logging to
/// `dir/coordinator.log`; returns it, its URL and its metrics URL.
fn spawn_coordinator(
    dir: &Path,
    address: &str,
    env: &[(String, String)],
) -> Result<(Child, String, String)> {
    spawn_named_coordinator(dir, "coordinator", address, env)
}

/// Starts a coordinator binary named `name` (its log `dir/NAME.log`, its
/// data directory `dir/NAME-data`) listening on `address`.
pub(crate) fn spawn_named_coordinator(
    dir: &Path,
    name: &str,
    address: &str,
    env: &[(String, String)],
) -> Result<(Child, String, String)> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))?;
    let mut child = Command::new(binary("coordinator"))
        .args([
            "--listen",
            address,
            "--metrics-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.join(if name == "coordinator" {
            "data".to_owned()
        } else {
            format!("{name}-data")
        }))
        .env("WEFT_HEARTBEAT_INTERVAL_MS", "200")
        .env("WEFT_WORKER_TIMEOUT_MS", "2000")
        .env("WEFT_TASK_GRACE_MS", "1000")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("starting the coordinator")?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    let mut reader = BufReader::new(stdout);
    reader.read_line(&mut line)?;
    let Some(bound) = line.trim().strip_prefix("coordinator listening on ") else {
        let _ = child.kill();
        bail!("the coordinator did not report its address (got {line:?})");
    };
    // With `[tls]` (here, its variables) the coordinator speaks TLS.
    let scheme = if env.iter().any(|(key, _)| key == "WEFT_TLS_CERT") {
        "https"
    } else {
        "http"
    };
    let url = format!("{scheme}://{bound}");
    let mut metrics = String::new();
    reader.read_line(&mut metrics)?;
    let metrics = metrics
        .trim()
        .strip_prefix("metrics on ")
        .unwrap_or_default()
        .to_owned();
    Ok((child, url, metrics))
}

/// Follows a run's events until one of `kind` arrives, and returns it.
pub async fn wait_for_event(
    client: &Client,
    run_id: &str,
    kind: &str,
) -> Result<weft_client::Event> {
    use tokio_stream::StreamExt;
    let mut events = client.watch(run_id, 0).await?;
    loop {
        let event = tokio::time::timeout(PATIENCE, events.next())
            .await
            .with_context(|| format!("no {kind} event within {PATIENCE:?}"))?
            .with_context(|| format!("the run ended without a {kind} event"))??;
        if event.kind == kind {
            return Ok(event);
        }
    }
}

/// Follows a run's events until one satisfies `matches`: a crash trigger.
/// Fails when none comes within [`PATIENCE`] or the run's events end
/// first, so a test never goes on as if its trigger had fired.
pub async fn until_event(
    client: &Client,
    run_id: &str,
    what: &str,
    matches: impl Fn(&weft_client::Event) -> bool,
) -> Result<weft_client::Event> {
    use tokio_stream::StreamExt;
    let mut events = client.watch(run_id, 0).await?;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .with_context(|| format!("{what}: not within {PATIENCE:?}"))?
            .with_context(|| format!("the run's events ended before {what}"))??;
        if matches(&event) {
            return Ok(event);
        }
    }
}

/// The events of `kind` in an ended run's log, in order.
pub async fn events_of(
    client: &Client,
    run_id: &str,
    kind: &str,
) -> Result<Vec<weft_client::Event>> {
    use tokio_stream::StreamExt;
    let all: Vec<weft_client::Event> = tokio::time::timeout(
        PATIENCE,
        client
            .watch(run_id, 0)
            .await?
            .collect::<Result<Vec<_>, _>>(),
    )
    .await
    .context("the run's log did not end")??;
    Ok(all.into_iter().filter(|e| e.kind == kind).collect())
}

/// Sends `signal` (`STOP`, `CONT`, `HUP`, …) to process `pid`.
pub(crate) fn send_signal(pid: u32, signal: &str) -> Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

/// `GET PATH` from `address` (`HOST:PORT`) over plain HTTP/1.1: the body
/// of a 200.
pub fn http_get(address: &str, path: &str) -> Result<String> {
    http_get_as(address, path, None)
}

/// [`http_get`] with a bearer token.
pub fn http_get_as(address: &str, path: &str, token: Option<&str>) -> Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\n{authorization}Connection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    ensure!(
        response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
        "GET {path} from {address}: {response}"
    );
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default())
}

/// The value of the unlabelled sample `name` in Prometheus text.
pub fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let (metric, value) = line.split_once(' ')?;
        (metric == name).then(|| value.trim().parse().ok())?
    })
}

/// Polls `condition` until it holds or `patience` runs out.
pub async fn wait_until(patience: Duration, mut condition: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + patience;
    loop {
        if condition() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("condition not met within {patience:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish()
}

/// A map of `items` integers over the test-worker's `double` handler,
/// `concurrency` at a time, each taking `delay_ms`. Results land in
/// `results` as `{"doubled": 2i, "worker": name}`.
pub fn doubling_map(items: usize, delay_ms: u64, concurrency: u32) -> GraphBuilder {
    GraphBuilder::new("doubling")
        .node(
            "fan",
            NodeBuilder::map("{{ items }}", "item", "double", "results")
                .start()
                .set("output_key", "doubled_item")
                .set("max_concurrency", concurrency),
        )
        .node(
            "double",
            NodeBuilder::task("double")
                .set("state_updates", json!({"doubled_item": "{{ output }}"})),
        )
        .setting("max_loop_iterations", 3)
        .field(
            "items",
            "array",
            Value::Array((0..items as i64).map(Value::from).collect()),
        )
        .field("delay_ms", "integer", delay_ms)
}

/// A chat of `turns` turns by a `loop` node over a `script` that prints
/// the whole new `messages` list, each turn adding 1,000 characters:
/// `repetitive` messages ("x" again and again, where byte anchors are
/// found many times) or unique ones (random hex). Each turn is a process,
/// as a chat through real processes is; `durability` is the graph's.
pub fn script_chat(turns: u64, repetitive: bool, durability: &str) -> GraphBundle {
    let message = if repetitive {
        "'x' * 1000"
    } else {
        "os.urandom(500).hex()"
    };
    let turn = format!(
        "import json, os, sys\n\
         state = json.load(sys.stdin)['state']\n\
         print(json.dumps({{'messages': state['messages'] + [{message}], 'turns': state['turns'] + 1}}))\n"
    );
    // Debian's interpreter where there is one: it starts in a fraction of
    // the time a version manager's shim takes, and the turns are many.
    let python = ["/usr/bin/python3"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .unwrap_or("python3");
    GraphBundle::from_text(
        "chat.yaml",
        &format!(
            r#"
settings: {{ durability: {durability} }}
state:
  messages: {{ type: array, default: [] }}
  turns: {{ type: integer, default: 0 }}
conditions:
  enough: "state.turns >= {turns}"
nodes:
  talk: {{ kind: loop, start: true, body: turn, until: enough, max_iterations: {turns} }}
  turn: {{ kind: script, run: [{python}, turn.py] }}
"#
        ),
    )
    .with_file("turn.py", turn.as_bytes(), 0o644)
}

/// What process `pid` (`self` for this one) has had written to storage so
/// far: the bytes it dirtied (`write_bytes` of `/proc/PID/io`) less those
/// whose file was truncated or removed before they were written back
/// (`cancelled_write_bytes`: a step's scratch files, say).
pub fn written_to_storage(pid: &str) -> Result<u64> {
    let path = format!("/proc/{pid}/io");
    let io = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    let field = |name: &str| -> Result<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|n| n.trim().parse().ok())
            .with_context(|| format!("no {name} in {path}"))
    };
    Ok(field("write_bytes:")?.saturating_sub(field("cancelled_write_bytes:")?))
}

/// The repository's root directory.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `command` to its end, as `Command::output` does, but for at most
/// `patience`: past it, the process is stopped and the test fails with
/// what shows where it waited — its process tree, each process's threads'
/// stacks (through `gdb`, where installed) and its output so far. A hang
/// seen once under load is then a report, not a bare timeout.
pub fn output_within(command: &mut Command, patience: Duration) -> std::process::Output {
    use std::io::Read;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                pipe.read_to_end(&mut bytes).ok();
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the command is waited for") {
            break status;
        }
        if started.elapsed() > patience {
            let report = where_it_waits(child.id());
            child.kill().ok();
            child.wait().ok();
            let stderr = stderr.join().unwrap_or_default();
            panic!(
                "{command:?} did not end within {patience:?}\n{report}\nits stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Process `pid`'s tree and its processes' threads' stacks, as far as
/// `ps` and `gdb` can tell.
fn where_it_waits(pid: u32) -> String {
    let run = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_else(|error| format!("({program}: {error})\n"))
    };
    let tree = run(
        "ps",
        &["-e", "-o", "pid,ppid,stat,wchan:24,args", "--forest"],
    );
    let mut pids = vec![pid.to_string()];
    let mut i = 0;
    while i < pids.len() {
        let parent = pids[i].clone();
        for line in tree.lines().skip(1) {
            let mut cols = line.split_whitespace();
            if let (Some(child), Some(ppid)) = (cols.next(), cols.next())
                && ppid == parent
                && !pids.iter().any(|p| p == child)
            {
                pids.push(child.to_owned());
            }
        }
        i += 1;
    }
    let mut report = String::from("process tree:\n");
    for line in tree.lines().skip(1) {
        if line
            .split_whitespace()
            .next()
            .is_some_and(|p| pids.iter().any(|q| q == p))
        {
            report.push_str(line);
            report.push('\n');
        }
    }
    for pid in &pids {
        report.push_str(&format!("stacks of {pid}:\n"));
        report.push_str(&run(
            "timeout",
            &[
                "30",
                "gdb",
                "-batch",
                "-p",
                pid,
                "-ex",
                "thread apply all bt",
            ],
        ));
    }
    report
}

/// The most of `spans` (start and end times) open at one instant: how many
/// steps that recorded when they ran overlapped at most. An end at the
/// same instant as a start closes first.
pub fn peak_overlap(spans: &[(f64, f64)]) -> usize {
    let mut edges: Vec<(f64, i32)> = spans
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut open, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        open += step;
        most = most.max(open);
    }
    most as usize
}
