//! A high-availability group for tests: a real etcd, several `coordinator`
//! processes sharing it (each on its own fixed loopback port, so it
//! advertises that address), and `worker`s that find the leader through
//! etcd. Everything is killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use weft_client::Client;
use weft_store::{EtcdStore, EtcdTls, LEADER_KEY, Store};

use crate::etcd::{TestEtcd, free_port};
use crate::{PATIENCE, binary, spawn_named_coordinator};

/// Coordinators on one etcd, and workers following the leader.
pub struct TestGroup {
    /// The etcd they share.
    pub etcd: TestEtcd,
    dir: PathBuf,
    coordinators: Vec<Option<Child>>,
    urls: Vec<String>,
    /// Each coordinator's HTTP listener (`http://HOST:PORT/metrics`).
    metrics_urls: Vec<String>,
    workers: Vec<Child>,
    /// Environment every process of the group gets (etcd's TLS files).
    env: Vec<(String, String)>,
    /// What the test's own store client presents to etcd.
    etcd_tls: EtcdTls,
}

impl TestGroup {
    /// Starts etcd and `count` coordinators on it, with a leader lease of
    /// `lease_seconds`.
    pub async fn start(count: usize, lease_seconds: u64) -> Result<Self> {
        let etcd = TestEtcd::start().await?;
        Self::start_on(etcd, count, lease_seconds, &[], EtcdTls::default()).await
    }

    /// Starts `count` coordinators on `etcd`; every coordinator and worker
    /// of the group gets `env` too (`WEFT_ETCD_CA`, …), and the test's
    /// own reads of etcd present `etcd_tls`.
    pub async fn start_on(
        etcd: TestEtcd,
        count: usize,
        lease_seconds: u64,
        env: &[(&str, &str)],
        etcd_tls: EtcdTls,
    ) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "weft-group-{}-{}",
            std::process::id(),
            crate::rand_seed() ^ u64::from(free_port()?)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut group = Self {
            etcd,
            dir,
            coordinators: Vec::new(),
            urls: Vec::new(),
            metrics_urls: Vec::new(),
            workers: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            etcd_tls,
        };
        for index in 0..count {
            let mut env = vec![
                ("WEFT_ETCD".to_owned(), group.etcd.url.clone()),
                ("WEFT_LEASE_SECONDS".to_owned(), lease_seconds.to_string()),
            ];
            env.extend(group.env.iter().cloned());
            let name = format!("coordinator-{index}");
            // A fixed port, since the coordinator advertises its address;
            // picked free, it may be taken before the coordinator binds
            // it: the coordinator then exits without reporting an
            // address, and is started again on another.
            let mut attempts = 0;
            let (child, url, metrics_url) = loop {
                let address = format!("127.0.0.1:{}", free_port()?);
                match spawn_named_coordinator(&group.dir, &name, &address, &env) {
                    Ok(started) => break started,
                    Err(error) if attempts >= 4 => return Err(error),
                    Err(_) => attempts += 1,
                }
            };
            group.coordinators.push(Some(child));
            group.urls.push(url);
            group.metrics_urls.push(metrics_url);
        }
        Ok(group)
    }

    /// Coordinator `index`'s URL.
    pub fn url(&self, index: usize) -> &str {
        &self.urls[index]
    }

    /// Coordinator `index`'s HTTP listener: `http://HOST:PORT` (probes,
    /// metrics, the run viewer and its API).
    pub fn http_base(&self, index: usize) -> &str {
        self.metrics_urls[index].trim_end_matches("/metrics")
    }

    /// A client of coordinator `index`.
    pub async fn client(&self, index: usize) -> Result<Client> {
        Ok(Client::connect(self.urls[index].clone()).await?)
    }

    /// Starts a `worker` that finds the leader through etcd.
    pub fn add_worker(&mut self, name: &str, slots: u32) -> Result<()> {
        let etcd = self.etcd.url.clone();
        self.spawn_worker(name, slots, &["--etcd", &etcd])
    }

    /// Starts a `worker` pointed at coordinator `index` (`--coordinator`).
    pub fn add_worker_at(&mut self, name: &str, slots: u32, index: usize) -> Result<()> {
        let url = self.urls[index].clone();
        self.spawn_worker(name, slots, &["--coordinator", &url])
    }

    /// Starts a `test-worker` that finds the coordinators through etcd
    /// and calls the model endpoint at `llm_url` with `key`.
    pub fn add_llm_worker(
        &mut self,
        name: &str,
        slots: u32,
        llm_url: &str,
        key: &str,
    ) -> Result<()> {
        let etcd = self.etcd.url.clone();
        let coordinator = self.urls[0].clone();
        let at = [
            "--coordinator",
            &coordinator,
            "--etcd",
            &etcd,
            "--llm-url",
            llm_url,
            "--llm-key",
            key,
        ];
        self.spawn_binary("test-worker", name, slots, &at)
    }

    fn spawn_worker(&mut self, name: &str, slots: u32, at: &[&str]) -> Result<()> {
        self.spawn_binary("worker", name, slots, at)
    }

    fn spawn_binary(&mut self, program: &str, name: &str, slots: u32, at: &[&str]) -> Result<()> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let child = Command::new(binary(program))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(at)
            .args(["--name", name])
            .args(["--slots", &slots.to_string()])
            .arg("--work-dir")
            .arg(self.dir.join(name))
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting worker {name}"))?;
        self.workers.push(child);
        Ok(())
    }

    /// The index of the coordinator that holds the leader key, if any.
    pub async fn leader(&self) -> Result<Option<usize>> {
        let store = EtcdStore::connect_with(std::slice::from_ref(&self.etcd.url), &self.etcd_tls)?;
        let held = store.get(LEADER_KEY).await?;
        Ok(held.and_then(|entry| {
            let url = String::from_utf8_lossy(&entry.value).into_owned();
            self.urls.iter().position(|u| *u == url)
        }))
    }

    /// Waits until some coordinator (other than `not`) leads, says so in
    /// its log, and every running coordinator answers through it; returns
    /// its index.
    pub async fn wait_for_leader(&self, not: Option<usize>) -> Result<usize> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(index) = self.leader().await?
                && Some(index) != not
                && self.log(index).contains("leading the group")
                && self.all_answer(not).await
            {
                return Ok(index);
            }
            if Instant::now() > deadline {
                bail!("no coordinator took the lead within {PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether every running coordinator but `not` answers a request (the
    /// standbys by forwarding it to a leader they know).
    async fn all_answer(&self, not: Option<usize>) -> bool {
        for (index, child) in self.coordinators.iter().enumerate() {
            if child.is_none() || Some(index) == not {
                continue;
            }
            let Ok(client) = self.client(index).await else {
                return false;
            };
            if client.list().await.is_err() {
                return false;
            }
        }
        true
    }

    /// Kills coordinator `index` with SIGKILL.
    pub fn kill(&mut self, index: usize) -> Result<()> {
        if let Some(mut child) = self.coordinators[index].take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Sends a signal (`STOP`, `CONT`, …) to coordinator `index`.
    pub fn signal(&self, index: usize, signal: &str) -> Result<()> {
        let pid = self.coordinators[index]
            .as_ref()
            .map(Child::id)
            .with_context(|| format!("coordinator {index} is not running"))?;
        crate::send_signal(pid, signal)
    }

    /// Coordinator `index`'s log so far.
    pub fn log(&self, index: usize) -> String {
        self.named_log(&format!("coordinator-{index}"))
    }

    /// The log of a process of the group (`coordinator-0`, a worker's name).
    pub fn named_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits until `name`'s log contains `text` at least `count` times.
    pub async fn wait_for_log(&self, name: &str, text: &str, count: usize) -> Result<()> {
        crate::wait_until(PATIENCE, || {
            self.named_log(name).matches(text).count() >= count
        })
        .await
        .with_context(|| {
            format!(
                "{name}'s log never said {text:?} {count} times:\n{}",
                self.named_log(name)
            )
        })
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        for child in self
            .workers
            .iter_mut()
            .chain(self.coordinators.iter_mut().flatten())
        {
            // A stopped process is woken so it can die.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() && std::env::var_os("WEFT_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("group logs kept in {}", self.dir.display());
        }
    }
}
