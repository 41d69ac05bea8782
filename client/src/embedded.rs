//! An embedded cluster: a coordinator and a pool of workers in this
//! process, talking over the same gRPC paths as a real cluster, through a
//! Unix socket in a private (0700) directory, so no other local user can
//! submit work to it. `weft run` without `--coordinator` uses one and stops
//! it when the run ends; benchmarks use one with workers that host Rust
//! handlers.

use std::path::Path;
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
    /// The workers' scratch space (and, for a temporary cluster, its store).
    _scratch: TempDir,
    /// A local cluster's socket in the Weft directory, removed on stop.
    socket: Option<std::path::PathBuf>,
    /// A local cluster's exclusive lock on `cluster.lock`, released on
    /// stop (after the socket is gone).
    owner: Option<std::fs::File>,
}

/// The local cluster of a Weft directory: started here, or another
/// process's, joined.
pub enum LocalCluster {
    /// This process started it; it stops with [`EmbeddedCluster::stop`].
    Started(EmbeddedCluster),
    /// Another process's, at this URL.
    Joined(String),
}

/// Where a cluster keeps its store.
enum Place {
    /// A temporary directory, removed on stop.
    Temporary,
    /// A Weft directory (`WEFT_HOME`): runs outlive the process.
    Home(std::path::PathBuf),
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
        Self::start_at(Place::Temporary, workers, configure, setup).await
    }

    /// The local cluster of the Weft directory `home` (SPEC 12): the one
    /// another process runs there, joined over its socket, or one started
    /// here with its store in `home`, so runs outlive this process.
    pub async fn start_local(home: &Path, workers: u32) -> Result<LocalCluster, EmbeddedError> {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(home)?;
        let socket = home.join(LOCAL_SOCKET);
        let url = format!("unix:{}", socket.display());
        // Whoever runs the cluster holds `cluster.lock` exclusively for as
        // long as it does: a lock nobody holds means no cluster, and a
        // socket left behind is stale; a held one means a cluster that
        // answers, or soon will (it is starting, or the machine is busy).
        let owner = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(home.join(OWNER_LOCK))?;
        let deadline = tokio::time::Instant::now() + LOCAL_PATIENCE;
        loop {
            match owner.try_lock() {
                Ok(()) => {
                    let _ = std::fs::remove_file(&socket);
                    let place = Place::Home(home.to_owned());
                    let mut cluster = Self::start_at(place, workers, |_| {}, |_| {}).await?;
                    cluster.owner = Some(owner);
                    return Ok(LocalCluster::Started(cluster));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    if answers(&url).await {
                        return Ok(LocalCluster::Joined(url));
                    }
                    if tokio::time::Instant::now() > deadline {
                        return Err(EmbeddedError::Coordinator(format!(
                            "the local cluster of {} does not answer at {url} (another weft command runs it)",
                            home.display()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(std::fs::TryLockError::Error(error)) => return Err(error.into()),
            }
        }
    }

    async fn start_at(
        place: Place,
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
        let (data_dir, socket) = match &place {
            Place::Temporary => (data.0.clone(), data.0.join("coordinator.sock")),
            Place::Home(home) => (home.clone(), home.join(LOCAL_SOCKET)),
        };
        let listener = match tokio::net::UnixListener::bind(&socket) {
            Ok(listener) => listener,
            // Another process bound it first: it is starting its cluster.
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(EmbeddedError::Held);
            }
            Err(error) => return Err(error.into()),
        };
        let mut config = CoordinatorConfig {
            data_dir,
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
        let (opened, store_open) = tokio::sync::oneshot::channel::<()>();
        let (failed, store_failed) =
            tokio::sync::oneshot::channel::<weft_coordinator::server::ServeError>();
        tasks.push(tokio::spawn(async move {
            let ready = Box::new(move || {
                let _ = opened.send(());
            });
            let served =
                weft_coordinator::server::serve_unix_announced(listener, config, token, ready)
                    .await;
            if let Err(error) = served {
                let _ = failed.send(error);
            }
        }));
        // The store is open (or not) before any worker starts: another
        // process holding it is told apart from a failure.
        tokio::select! {
            _ = store_open => {}
            failure = store_failed => {
                let _ = std::fs::remove_file(&socket);
                return Err(match failure {
                    Ok(error) if error.store_in_use() => EmbeddedError::Held,
                    Ok(error) => EmbeddedError::Coordinator(error.to_string()),
                    Err(_) => EmbeddedError::Coordinator("it stopped as it started".into()),
                });
            }
        }
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
        let socket = matches!(place, Place::Home(_)).then_some(socket);
        Ok(Self {
            url,
            shutdown,
            tasks,
            joined,
            workers,
            _scratch: data,
            socket,
            owner: None,
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
        if let Some(socket) = &self.socket {
            let _ = std::fs::remove_file(socket);
        }
        drop(self.owner);
    }
}

/// The socket of a Weft directory's local cluster.
const LOCAL_SOCKET: &str = "coordinator.sock";

/// The lock its owner holds.
const OWNER_LOCK: &str = "cluster.lock";

/// How long a command waits for a local cluster another runs to answer.
const LOCAL_PATIENCE: Duration = Duration::from_secs(30);

/// Whether a coordinator answers at `url` within a few seconds.
async fn answers(url: &str) -> bool {
    let probe = async {
        let client = crate::Client::connect(url.to_owned()).await.ok()?;
        client.list_page(1, None).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), probe).await,
        Ok(Some(_))
    )
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
    /// Another process holds the store, or the socket, of the Weft
    /// directory.
    #[error("another process holds the store of the Weft directory")]
    Held,
    /// The coordinator could not start.
    #[error("the embedded coordinator: {0}")]
    Coordinator(String),
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
