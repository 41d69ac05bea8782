//! A Weft cluster on containers, for the multi-host suite:
//! `deploy/docker-compose.yml` itself, brought up under a project name of
//! its own from the images `deploy/images/build.sh` makes (`weft:dev`,
//! `weft-etcd:dev`), with a test-only override that gives every worker a
//! folder shared with the test (`/shared`), where scripts record what they
//! ran. Each container has its own address on the compose networks; the
//! faults a test applies are real: `docker kill`, `docker pause`, `docker
//! network disconnect`. The project is taken down, volumes and all, on drop.
//!
//! A cluster is one partition (one coordinator leads, the others stand
//! by) unless brought up with [`Compose::up_partitioned`], which sets the
//! compose file's `WEFT_PARTITIONS`: then all three coordinators lead
//! partitions and every worker serves all three.
//!
//! The cluster runs secured, as deploy/ ships it: `deploy/secrets.sh` makes
//! each project its CA, certificate and tokens; the host's clients trust
//! the CA and present the operator's token, the workers their own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use weft_client::Client;
use weft_store::{EtcdStore, LEADER_KEY, Store};

use crate::{PATIENCE, repo};

/// The images the suite runs; `deploy/images/build.sh` makes them.
pub const IMAGES: [&str; 2] = ["weft:dev", "weft-etcd:dev"];

/// The coordinators' compose services.
pub const COORDINATORS: [&str; 3] = ["coordinator-a", "coordinator-b", "coordinator-c"];

/// The etcd members' compose services.
pub const ETCD: [&str; 3] = ["etcd-1", "etcd-2", "etcd-3"];

/// A compose project: the whole cluster of `deploy/docker-compose.yml`.
pub struct Compose {
    project: String,
    shared: PathBuf,
    /// What `deploy/secrets.sh` made for this project.
    secrets: PathBuf,
    /// Its tokens, by variable (`WEFT_OPERATOR_TOKEN`, …).
    tokens: std::collections::BTreeMap<String, String>,
    /// Each service's containers, named once it is up (names outlive
    /// restarts; asking compose costs half a second).
    containers: std::collections::BTreeMap<String, Vec<String>>,
    /// The etcd members' client URLs, as the host reaches them.
    etcd: Vec<String>,
    /// The group's partition count (`WEFT_PARTITIONS`).
    partitions: u32,
}

/// Runs `command`, failing with its output when it fails.
fn run(command: &mut Command) -> Result<Output> {
    let shown = format!("{command:?}");
    let out = command
        .output()
        .with_context(|| format!("cannot run {shown}"))?;
    ensure!(
        out.status.success(),
        "{shown} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `docker ARGS…`, its standard output.
pub fn docker(args: &[&str]) -> Result<String> {
    Ok(text(&run(Command::new("docker").args(args))?))
}

impl Compose {
    /// Brings the cluster up with `workers` workers and waits until a
    /// coordinator leads and every worker has joined it.
    pub async fn up(name: &str, workers: usize) -> Result<Self> {
        Self::start(name, workers, 1).await
    }

    /// Brings the cluster up as a group of `partitions` partitions with
    /// `workers` workers, and waits until the three coordinators lead
    /// them all between them, balanced, and every worker serves each.
    pub async fn up_partitioned(name: &str, workers: usize, partitions: u32) -> Result<Self> {
        ensure!(
            partitions > 1,
            "a partitioned group has more than one partition"
        );
        Self::start(name, workers, partitions).await
    }

    async fn start(name: &str, workers: usize, partitions: u32) -> Result<Self> {
        for image in IMAGES {
            ensure!(
                Command::new("docker")
                    .args(["image", "inspect", image])
                    .output()?
                    .status
                    .success(),
                "the image {image} is missing: build the images with deploy/images/build.sh \
                 (after building the binaries) before running the multi-host suite"
            );
        }
        let project = format!("weft{}{}", name.replace(['-', '_'], ""), std::process::id());
        let shared = std::env::temp_dir().join(format!("{project}-shared"));
        std::fs::create_dir_all(&shared)?;
        // The workers run as the image's user; the test reads what they write.
        run(Command::new("chmod").arg("0777").arg(&shared))?;
        let secrets = std::env::temp_dir().join(format!("{project}-secrets"));
        let _ = std::fs::remove_dir_all(&secrets);
        run(Command::new(repo().join("deploy/secrets.sh")).arg(&secrets))?;
        let tokens = std::fs::read_to_string(secrets.join("tokens.env"))?
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        let mut compose = Self {
            project,
            shared,
            secrets,
            tokens,
            containers: Default::default(),
            etcd: Vec::new(),
            partitions,
        };
        compose.compose(&[
            "up",
            "-d",
            "--no-build",
            "--scale",
            &format!("worker={workers}"),
        ])?;
        for service in ETCD.into_iter().chain(COORDINATORS).chain(["worker"]) {
            let named = compose.ask_containers(service)?;
            compose.containers.insert(service.to_owned(), named);
        }
        for member in ETCD {
            let address = compose.address(&compose.container(member)?, "store")?;
            compose.etcd.push(format!("http://{address}:2379"));
        }
        if partitions == 1 {
            compose.wait_for_leader(None).await?;
            compose.wait_for_workers(workers).await?;
        } else {
            compose.wait_for_balance(&COORDINATORS).await?;
            compose.wait_for_workers_on(&COORDINATORS, workers).await?;
        }
        Ok(compose)
    }

    /// A `docker-compose` command on this project.
    fn command(&self) -> Command {
        let mut command = Command::new("docker-compose");
        command
            .arg("-f")
            .arg(repo().join("deploy/docker-compose.yml"))
            .arg("-f")
            .arg(repo().join("tests/compose/shared.yml"))
            .args(["-p", &self.project])
            .env("WEFT_IMAGE", "weft:dev")
            .env("WEFT_ETCD_IMAGE", "weft-etcd:dev")
            .env("WEFT_TEST_SHARED", &self.shared)
            .env("WEFT_PARTITIONS", self.partitions.to_string())
            .env("WEFT_SECRETS", &self.secrets)
            .env("WEFT_WORKER_TOKEN", self.token("WEFT_WORKER_TOKEN"))
            // Published on free ports of the host's loopback, so projects
            // never collide.
            .env("WEFT_PORT_A", "127.0.0.1:")
            .env("WEFT_PORT_B", "127.0.0.1:")
            .env("WEFT_PORT_C", "127.0.0.1:")
            .env("WEFT_METRICS_PORT_A", "127.0.0.1:")
            .env("WEFT_METRICS_PORT_B", "127.0.0.1:")
            .env("WEFT_METRICS_PORT_C", "127.0.0.1:")
            .env_remove("WEFT_OTLP_ENDPOINT");
        command
    }

    /// `docker-compose ARGS…` on this project, its standard output.
    pub fn compose(&self, args: &[&str]) -> Result<String> {
        Ok(text(&run(self.command().args(args))?))
    }

    /// A token `deploy/secrets.sh` made (`WEFT_OPERATOR_TOKEN`, …).
    pub fn token(&self, variable: &str) -> &str {
        self.tokens.get(variable).map_or("", String::as_str)
    }

    /// The CA that signed the coordinators' certificate.
    pub fn ca(&self) -> PathBuf {
        self.secrets.join("ca.pem")
    }

    /// `weft`, trusting the cluster's CA and presenting the operator's
    /// token (through `WEFT_CA` and `WEFT_TOKEN`).
    pub fn weft(&self) -> Command {
        let mut command = Command::new(crate::binary("weft"));
        command
            .current_dir(repo())
            .env("WEFT_CA", self.ca())
            .env("WEFT_TOKEN", self.token("WEFT_OPERATOR_TOKEN"))
            .env_remove("WEFT_COORDINATOR");
        command
    }

    /// The folder every worker sees as `/shared`.
    pub fn shared(&self) -> &Path {
        &self.shared
    }

    /// The containers of `service`, in the order compose numbers them.
    pub fn containers(&self, service: &str) -> Result<Vec<String>> {
        self.containers
            .get(service)
            .cloned()
            .with_context(|| format!("no service {service}"))
    }

    fn ask_containers(&self, service: &str) -> Result<Vec<String>> {
        let ids = self.compose(&["ps", "-q", service])?;
        let mut named = Vec::new();
        for id in ids.lines().filter(|l| !l.is_empty()) {
            let name = docker(&["inspect", "-f", "{{.Name}}", id])?;
            named.push(name.trim_start_matches('/').to_owned());
        }
        named.sort_by_key(|name| {
            name.rsplit(['_', '-'])
                .next()
                .and_then(|n| n.parse::<u32>().ok())
        });
        Ok(named)
    }

    /// The one container of `service`.
    pub fn container(&self, service: &str) -> Result<String> {
        self.containers(service)?
            .into_iter()
            .next()
            .with_context(|| format!("no container of {service}"))
    }

    /// The network `store` or `cluster` of this project.
    pub fn network(&self, which: &str) -> String {
        format!("{}_{which}", self.project)
    }

    /// The address of `container` on the network `which`.
    pub fn address(&self, container: &str, which: &str) -> Result<String> {
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            self.network(which)
        );
        let ip = docker(&["inspect", "-f", &format, container])?;
        ensure!(!ip.is_empty(), "{container} is not on {which}");
        Ok(ip)
    }

    /// The URL the host reaches coordinator `service` at (its address on
    /// the `cluster` network; its certificate names the service, which
    /// [`Compose::client`] checks).
    pub fn url(&self, service: &str) -> Result<String> {
        let container = self.container(service)?;
        Ok(format!(
            "https://{}:7700",
            self.address(&container, "cluster")?
        ))
    }

    /// The host URL that compose published `service`'s `port` on (on the
    /// host's loopback, which the certificate names).
    pub fn published(&self, service: &str, port: u16) -> Result<String> {
        let bound = self.compose(&["port", service, &port.to_string()])?;
        ensure!(!bound.is_empty(), "{service}:{port} is not published");
        Ok(format!("https://{bound}"))
    }

    /// A client of coordinator `service`, with the operator's token.
    pub async fn client(&self, service: &str) -> Result<Client> {
        let tls = weft_client::ClientTls {
            ca: Some(self.ca()),
            identity: None,
            server_name: Some(service.to_owned()),
        };
        let client = Client::connect_with(self.url(service)?, &tls).await?;
        Ok(client.with_token(self.token("WEFT_OPERATOR_TOKEN"))?)
    }

    /// The body of `path` on coordinator `service`'s HTTP listener (over
    /// TLS, by curl, trusting the cluster's CA).
    pub fn http(&self, service: &str, path: &str) -> Result<String> {
        let container = self.container(service)?;
        let address = self.address(&container, "cluster")?;
        // /metrics wants a reader's token; the probes take it too.
        let out = run(Command::new("curl")
            .args(["-sS", "--fail", "--max-time", "5", "-H"])
            .arg(format!(
                "Authorization: Bearer {}",
                self.token("WEFT_METRICS_TOKEN")
            ))
            .arg("--cacert")
            .arg(self.ca())
            .arg("--resolve")
            .arg(format!("{service}:9464:{address}"))
            .arg(format!("https://{service}:9464{path}")))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The etcd store, as the host reaches its members.
    pub fn store(&self) -> Result<EtcdStore> {
        Ok(EtcdStore::connect(&self.etcd)?)
    }

    /// The etcd member (its service) that leads etcd's own raft group, as
    /// `etcdctl endpoint status` tells from inside a running member.
    pub fn etcd_leader(&self) -> Result<&'static str> {
        let endpoints = ETCD.map(|m| format!("http://{m}:2379")).join(",");
        let mut last = None;
        for member in ETCD {
            let container = self.container(member)?;
            let status = docker(&[
                "exec",
                &container,
                "etcdctl",
                &format!("--endpoints={endpoints}"),
                "endpoint",
                "status",
                "-w",
                "json",
            ]);
            let text = match status {
                Ok(text) => text,
                Err(error) => {
                    last = Some(error);
                    continue;
                }
            };
            let members: serde_json::Value = serde_json::from_str(&text)?;
            for entry in members.as_array().into_iter().flatten() {
                let status = &entry["Status"];
                if status["header"]["member_id"] == status["leader"]
                    && let Some(url) = entry["Endpoint"].as_str()
                {
                    return ETCD
                        .into_iter()
                        .find(|m| url.contains(&format!("//{m}:")))
                        .with_context(|| format!("an endpoint of no member: {url}"));
                }
            }
            bail!("no etcd member says it leads: {text}");
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no etcd member answered")))
    }

    /// The coordinator service that holds the leader key, if any.
    pub async fn leader(&self) -> Result<Option<&'static str>> {
        let held = self.store()?.get(LEADER_KEY).await?;
        Ok(held.and_then(|entry| {
            let url = String::from_utf8_lossy(&entry.value).into_owned();
            COORDINATORS
                .into_iter()
                .find(|service| url == format!("https://{service}:7700"))
        }))
    }

    /// Waits until a coordinator other than `not` leads and every running
    /// coordinator answers through it; returns its service.
    pub async fn wait_for_leader(&self, not: Option<&str>) -> Result<&'static str> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(leader)) = self.leader().await
                && Some(leader) != not
                && self.answers(leader).await
            {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                bail!(
                    "no coordinator took the lead within {PATIENCE:?}\n{}",
                    self.logs_of_coordinators()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn answers(&self, service: &str) -> bool {
        let Ok(client) = self.client(service).await else {
            return false;
        };
        client.list().await.is_ok()
    }

    /// Waits until the leader counts `count` workers.
    pub async fn wait_for_workers(&self, count: usize) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(leader)) = self.leader().await
                && let Ok(metrics) = self.http(leader, "/metrics")
                && crate::gauge(&metrics, "weft_workers_connected") == Some(count as f64)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{count} workers did not join within {PATIENCE:?}\n{}",
                    self.logs("worker")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many partitions coordinator `service` leads (its
    /// `weft_partitions_led`).
    pub fn led(&self, service: &str) -> Result<u32> {
        let metrics = self.http(service, "/metrics")?;
        let led = crate::gauge(&metrics, "weft_partitions_led")
            .with_context(|| format!("{service} reports no weft_partitions_led"))?;
        Ok(led as u32)
    }

    /// Waits until `members` lead every partition between them, each
    /// within one of an even share, and each answers a listing (so
    /// forwards reach the others); fails naming what each leads.
    pub async fn wait_for_balance(&self, members: &[&str]) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        let share = self.partitions as usize / members.len();
        loop {
            let led: Vec<Option<u32>> = members.iter().map(|m| self.led(m).ok()).collect();
            let balanced = led
                .iter()
                .all(|n| n.is_some_and(|n| (n as usize).abs_diff(share) <= 1 && n > 0))
                && led.iter().flatten().sum::<u32>() == self.partitions;
            if balanced {
                let mut answer = true;
                for member in members {
                    answer &= self.answers(member).await;
                }
                if answer {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{members:?} did not lead the {} partitions evenly within {PATIENCE:?} \
                     (they lead {led:?})\n{}",
                    self.partitions,
                    self.logs_of_coordinators()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until each of `members` counts `count` workers.
    pub async fn wait_for_workers_on(&self, members: &[&str], count: usize) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let counted: Vec<Option<f64>> = members
                .iter()
                .map(|m| {
                    let metrics = self.http(m, "/metrics").ok()?;
                    crate::gauge(&metrics, "weft_workers_connected")
                })
                .collect();
            if counted.iter().all(|n| *n == Some(count as f64)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{count} workers did not join each of {members:?} within {PATIENCE:?} \
                     (they count {counted:?})\n{}",
                    self.logs("worker")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The logs of `service`'s containers.
    pub fn logs(&self, service: &str) -> String {
        self.command()
            .args(["logs", "--no-color", service])
            .output()
            .map(|out| {
                String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr)
            })
            .unwrap_or_default()
    }

    fn logs_of_coordinators(&self) -> String {
        COORDINATORS.map(|s| self.logs(s)).join("\n")
    }

    /// `docker kill` (SIGKILL) a container.
    pub fn kill(&self, container: &str) -> Result<()> {
        docker(&["kill", container]).map(drop)
    }

    /// Freezes a container's processes (`docker pause`, the cgroup freezer).
    pub fn pause(&self, container: &str) -> Result<()> {
        docker(&["pause", container]).map(drop)
    }

    /// Thaws a paused container.
    pub fn unpause(&self, container: &str) -> Result<()> {
        docker(&["unpause", container]).map(drop)
    }

    /// Cuts `container` off the network `which`.
    pub fn disconnect(&self, container: &str, which: &str) -> Result<()> {
        docker(&["network", "disconnect", &self.network(which), container]).map(drop)
    }

    /// Puts `container` back on the network `which`, under its service's
    /// name (so the others find it by name again).
    pub fn connect(&self, container: &str, which: &str, service: &str) -> Result<()> {
        docker(&[
            "network",
            "connect",
            "--alias",
            service,
            &self.network(which),
            container,
        ])
        .map(drop)
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self
            .command()
            .args(["down", "-v", "--remove-orphans", "-t", "2"])
            .output();
        let _ = std::fs::remove_dir_all(&self.shared);
        let _ = std::fs::remove_dir_all(&self.secrets);
    }
}
