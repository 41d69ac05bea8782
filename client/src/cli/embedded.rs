//! The embedded cluster behind `weft run` without `--coordinator`: a
//! coordinator and a pool of workers in this process, talking over the same
//! gRPC paths as a real cluster on loopback, stopped when the run ends.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_coordinator::config::CoordinatorConfig;

/// A running embedded cluster.
pub struct Embedded {
    /// The coordinator's URL.
    pub url: String,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    joined: std::sync::Arc<tokio::sync::Semaphore>,
    workers: u32,
    _data: TempDir,
}

impl Embedded {
    /// Starts a coordinator on a free loopback port and `workers` workers.
    pub async fn start(workers: u32) -> anyhow::Result<Self> {
        let data = TempDir::new()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let config = CoordinatorConfig {
            listen: address,
            data_dir: data.0.clone(),
            heartbeat_interval: Duration::from_millis(500),
            worker_timeout: Duration::from_secs(5),
            ..CoordinatorConfig::default()
        };
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        let token = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(error) = weft_coordinator::server::serve(listener, config, token).await {
                eprintln!("weft: embedded coordinator: {error}");
            }
        }));
        let url = format!("http://{address}");
        let joined = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let workers = workers.max(1);
        for n in 0..workers {
            let mut worker = weft_worker::Worker::new(url.clone());
            worker
                .name(format!("embedded-{n}"))
                .work_dir(data.0.join(format!("worker-{n}")))
                .secrets(std::env::vars().collect())
                .joined_signal(joined.clone());
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
    pub async fn ready(&self) -> anyhow::Result<()> {
        let all = self.joined.acquire_many(self.workers);
        match tokio::time::timeout(Duration::from_secs(10), all).await {
            Ok(Ok(permits)) => {
                permits.forget();
                Ok(())
            }
            _ => anyhow::bail!("the embedded workers did not join within 10 s"),
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
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
