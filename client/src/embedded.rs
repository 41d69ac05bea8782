//! An embedded cluster: a coordinator and a pool of workers in this
//! process, talking over the same gRPC paths as a real cluster, through a
//! Unix socket in a private (0700) directory, so no other local user can
//! submit work to it. `weft run` without `--coordinator` uses one and stops
//! it when the run ends; benchmarks use one with workers that host Rust
//! handlers.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_coordinator::config::CoordinatorConfig;

/// A running embedded cluster.
pub struct EmbeddedCluster {
    /// The coordinator's URL: `unix:PATH` of its private socket.
    pub url: String,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    joined: std::sync::Arc<tokio::sync::Semaphore>,
    workers: u32,
    _data: TempDir,
}

impl EmbeddedCluster {
    /// Starts a coordinator on a private Unix socket and `workers` workers
    /// that host scripts.
    pub async fn start(workers: u32) -> Result<Self, EmbeddedError> {
        Self::start_with(workers, |_| {}).await
    }

    /// Starts a coordinator and `workers` workers, each set up by `setup`
    /// (to register handlers, set slots, …).
    pub async fn start_with(
        workers: u32,
        setup: impl Fn(&mut weft_worker::Worker),
    ) -> Result<Self, EmbeddedError> {
        Self::start_configured(workers, |_| {}, setup).await
    }

    /// Like [`start_with`](Self::start_with), with the coordinator's
    /// configuration adjusted by `configure` first (benchmarks keep runs in
    /// etcd this way: `config.store.etcd`).
    pub async fn start_configured(
        workers: u32,
        configure: impl FnOnce(&mut CoordinatorConfig),
        setup: impl Fn(&mut weft_worker::Worker),
    ) -> Result<Self, EmbeddedError> {
        // Set up as a `worker` process would be: from this process's
        // environment, WEFT_WORKER_CONFIG and WEFT_SECRETS_FILE.
        let env = weft_worker::Environment::of_process();
        let base = weft_worker::WorkerConfig::load(weft_worker::WorkerOptions::default(), &env)?;
        let data = TempDir::new()?;
        // A Unix socket in a directory only this user can enter: no other
        // local user can reach the coordinator (and run scripts as us).
        let socket = data.0.join("coordinator.sock");
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let mut config = CoordinatorConfig {
            data_dir: data.0.clone(),
            heartbeat_interval: Duration::from_millis(500),
            worker_timeout: Duration::from_secs(5),
            // Its workers are all there will be.
            fixed_workers: true,
            ..CoordinatorConfig::default()
        };
        // Only this user reaches the socket: answers and submissions are
        // theirs, by their login name (which `approvers:` may list).
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "local".into());
        config.identities.name_anonymous(&user);
        configure(&mut config);
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        let token = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(error) = weft_coordinator::server::serve_unix(listener, config, token).await
            {
                eprintln!("weft: embedded coordinator: {error}");
            }
        }));
        let url = format!("unix:{}", socket.display());
        let joined = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let workers = workers.max(1);
        for n in 0..workers {
            let mut worker = weft_worker::Worker::from_config(weft_worker::WorkerConfig {
                coordinator: url.clone(),
                ..base.clone()
            });
            worker
                .name(format!("embedded-{n}"))
                .work_dir(data.0.join(format!("worker-{n}")))
                .joined_signal(joined.clone());
            setup(&mut worker);
            let token = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(error) = worker.run(token).await {
                    eprintln!("weft: embedded worker: {error}");
                }
            }));
        }
        Ok(Self {
            url,
            shutdown,
            tasks,
            joined,
            workers,
            _data: data,
        })
    }

    /// Waits until every worker has joined, so the first submission sees
    /// them (and warns only about what they really do not host).
    pub async fn ready(&self) -> Result<(), EmbeddedError> {
        let all = self.joined.acquire_many(self.workers);
        match tokio::time::timeout(Duration::from_secs(10), all).await {
            Ok(Ok(permits)) => {
                permits.forget();
                Ok(())
            }
            _ => Err(EmbeddedError::NotReady),
        }
    }

    /// Stops the workers and the coordinator.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

/// Why an embedded cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// A directory or socket could not be set up.
    #[error("cannot start the embedded cluster: {0}")]
    Io(#[from] std::io::Error),
    /// The workers' setup cannot be loaded (`WEFT_WORKER_CONFIG`,
    /// `WEFT_SECRETS_FILE`, a model provider).
    #[error(transparent)]
    Worker(#[from] weft_worker::ConfigError),
    /// The workers did not join in time.
    #[error("the embedded workers did not join within 10 s")]
    NotReady,
}

/// A temporary directory removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        let unique = format!(
            "weft-embedded-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let dir = std::env::temp_dir().join(unique);
        // Created here and now, private: never one that already exists.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_this_user_can_reach_the_embedded_coordinator() {
        use std::os::unix::fs::PermissionsExt;
        let cluster = EmbeddedCluster::start(1).await.expect("started");
        let socket = cluster
            .url
            .strip_prefix("unix:")
            .expect("a Unix socket, not TCP");
        let dir = std::path::Path::new(socket)
            .parent()
            .expect("in a directory");
        let mode = std::fs::metadata(dir).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let client = crate::Client::connect(cluster.url.clone())
            .await
            .expect("reachable here");
        assert!(client.list().await.expect("answers").is_empty());
        cluster.stop().await;
    }
}
