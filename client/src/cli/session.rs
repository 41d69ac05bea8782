//! Where a command's runs are (SPEC 12): the coordinator `--coordinator`
//! names, or, without one, the **local cluster** of the Weft directory
//! (`WEFT_HOME`, else `$XDG_DATA_HOME/weft`, else `~/.local/share/weft`),
//! whose store keeps runs between commands; or, with `--ephemeral`, a
//! cluster in a temporary directory that keeps nothing.
//!
//! The local cluster lives in the process of whichever command started
//! it. Another command at the same time joins it over its socket in the
//! Weft directory instead of failing on the store's lock. Every command
//! using the cluster holds a shared lock on `clients.lock` there; the
//! command that started it, when done, first lets the runs that are
//! running end (they are its to run, whoever submitted them), then takes
//! the lock exclusively, which waits for the commands that joined it to
//! finish, and only then stops. A command arriving meanwhile waits for the
//! lock, finds no cluster answering, and starts its own from the same
//! store: runs left running are recovered there.

use std::fs::File;
use std::path::PathBuf;

use weft_client::{Client, EmbeddedCluster, LocalCluster, RunStatus};

use super::exit;
use super::terminal::err;

/// Where a command's runs are.
pub enum Place {
    /// A coordinator's URL.
    Remote(String),
    /// The Weft directory's local cluster, with this many workers if it is
    /// started here.
    Local(u32),
    /// A cluster of this many workers in a temporary directory.
    Ephemeral(u32),
}

impl Place {
    /// `--coordinator`, else the local cluster (`--ephemeral`: a
    /// temporary one).
    pub fn of(coordinator: Option<String>, ephemeral: bool, workers: u32) -> Self {
        match coordinator {
            Some(url) => Self::Remote(url),
            None if ephemeral => Self::Ephemeral(workers),
            None => Self::Local(workers),
        }
    }
}

/// An open connection to where the runs are.
pub struct Session {
    /// The client.
    pub client: Client,
    /// The cluster this command started, if it did.
    started: Option<EmbeddedCluster>,
    /// The shared lock on the Weft directory's `clients.lock`.
    lock: Option<File>,
    /// The Weft directory, for a local cluster.
    home: Option<PathBuf>,
}

/// The Weft directory.
pub fn home() -> PathBuf {
    if let Some(home) = std::env::var_os("WEFT_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(data).join("weft");
    }
    let user = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    user.join(".local/share/weft")
}

/// Blocks (off the async threads) until `file` is locked as `exclusive`
/// says.
async fn lock(file: File, exclusive: bool) -> std::io::Result<File> {
    tokio::task::spawn_blocking(move || {
        if exclusive {
            file.lock()?;
        } else {
            file.lock_shared()?;
        }
        Ok(file)
    })
    .await
    .map_err(std::io::Error::other)?
}

impl Session {
    /// Connects to `place`; an error has been said, and is the exit status.
    pub async fn open(place: Place) -> Result<Self, u8> {
        match place {
            Place::Remote(url) => Ok(Self {
                client: super::connect::remote(&url).await?,
                started: None,
                lock: None,
                home: None,
            }),
            Place::Ephemeral(workers) => {
                let cluster = EmbeddedCluster::start(workers)
                    .await
                    .map_err(|error| cannot_start(&error))?;
                Self::started(cluster, None, None).await
            }
            Place::Local(workers) => {
                let home = home();
                let local = async {
                    std::os::unix::fs::DirBuilderExt::mode(
                        std::fs::DirBuilder::new().recursive(true),
                        0o700,
                    )
                    .create(&home)?;
                    let file = File::options()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(home.join("clients.lock"))?;
                    // Waits while a command that started the cluster stops it.
                    let file = lock(file, false).await?;
                    let cluster = EmbeddedCluster::start_local(&home, workers)
                        .await
                        .map_err(std::io::Error::other)?;
                    Ok::<_, std::io::Error>((file, cluster))
                };
                let (file, cluster) = local.await.map_err(|error| {
                    err!(
                        "error: cannot start the local cluster in {}: {error}",
                        home.display()
                    );
                    exit::UNREACHABLE
                })?;
                match cluster {
                    LocalCluster::Started(cluster) => {
                        Self::started(cluster, Some(file), Some(home)).await
                    }
                    LocalCluster::Joined(url) => Ok(Self {
                        client: super::connect::remote(&url).await?,
                        started: None,
                        lock: Some(file),
                        home: Some(home),
                    }),
                }
            }
        }
    }

    async fn started(
        cluster: EmbeddedCluster,
        lock: Option<File>,
        home: Option<PathBuf>,
    ) -> Result<Self, u8> {
        let client = super::connect::remote(&cluster.url).await?;
        if let Err(error) = cluster.ready().await {
            err!("error: {error}");
            return Err(exit::UNREACHABLE);
        }
        Ok(Self {
            client,
            started: Some(cluster),
            lock,
            home,
        })
    }

    /// The Weft directory, when the runs are the local cluster's.
    pub fn local_home(&self) -> Option<&std::path::Path> {
        self.home.as_deref()
    }

    /// Whether this command started the cluster it uses.
    pub fn started_here(&self) -> bool {
        self.started.is_some()
    }

    /// Whether the runs stop with this command (an ephemeral cluster).
    pub fn ephemeral(&self) -> bool {
        self.started.is_some() && self.home.is_none()
    }

    /// Ends the command. A cluster it started keeps serving, with `linger`,
    /// while any of its runs is running, then until every command that
    /// joined it is done; then it stops.
    pub async fn close(self, linger: bool) {
        let Some(cluster) = self.started else {
            return;
        };
        if linger && self.home.is_some() {
            settle(&self.client).await;
        }
        if let Some(file) = self.lock {
            // Shared → exclusive: waits for the commands that joined.
            let _ = file.unlock();
            let _ = lock(file, true).await;
            cluster.stop().await;
            return;
        }
        cluster.stop().await;
    }
}

/// Waits until no run of the cluster is running (each ended or waits for
/// a person).
async fn settle(client: &Client) {
    loop {
        let Ok((runs, _)) = client.list_page(1000, None).await else {
            return;
        };
        let running: Vec<_> = runs
            .into_iter()
            .filter(|run| run.status == RunStatus::Running)
            .collect();
        if running.is_empty() {
            return;
        }
        for run in running {
            if client.wait(&run.run_id).await.is_err() {
                return;
            }
        }
    }
}

fn cannot_start(error: &dyn std::fmt::Display) -> u8 {
    err!("error: cannot start the embedded cluster: {error}");
    exit::UNREACHABLE
}
