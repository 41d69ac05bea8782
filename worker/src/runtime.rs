//! A worker's life: connect to the coordinator (retrying with backoff while
//! it is away), announce itself, run the tasks it is given, and on shutdown
//! take no more tasks, finish the ones in flight, then leave.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::WorkerConfig;
use crate::connection::{self, Ending, Finder, Lost};
use crate::error::WorkerError;
use crate::handler::Registry;
use crate::hosting::{HostResources, hello};
use crate::session::{self, SessionEnd};
use crate::work_dir::WorkDir;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a stopping worker waits for its tasks to wind down.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the worker until `shutdown` is cancelled and its tasks are done.
pub async fn run(
    config: WorkerConfig,
    registry: Registry,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    let finder = Finder::new(&config)?;
    let work = WorkDir::prepare(config.work_dir.as_deref())?;
    // Scratch left by an earlier worker that died is nobody's.
    let _ = tokio::fs::remove_dir_all(work.scratch()).await;
    let _ = tokio::fs::remove_dir_all(work.python()).await;
    // Confinement keeps graphs' code (scripts, Python functions) from the
    // worker and each other; a worker that runs none of it (one that
    // hosts only its own handlers, as the Python SDK's does) leaves its
    // process as it is.
    let confinement = if config.scripts || config.python.enabled {
        crate::confinement::make_undumpable();
        let hidden_dirs = vec![work.root().to_path_buf()];
        crate::confinement::Confinement::set_up(
            config.sandbox,
            config.limits,
            config.places.clone(),
            (config.credential_files.clone(), hidden_dirs),
        )?
    } else {
        crate::confinement::Confinement::off(config.limits)
    };
    let local = HostResources::new(&config, work, Arc::new(confinement)).await;
    let tracker = TaskTracker::new();
    let ended = connect_and_serve(
        &config,
        &local,
        &finder,
        Arc::new(registry),
        &shutdown,
        &tracker,
    )
    .await;
    tracker.close();
    if tokio::time::timeout(STOP_TIMEOUT, tracker.wait())
        .await
        .is_err()
    {
        warn!(worker = %config.name, left = tracker.len(), "some tasks did not stop in time");
    }
    // Dropping the pools kills their Python processes.
    drop(local.python);
    local.work.clean_up();
    ended
}

/// Sessions with the coordinator, one after another, until shutdown.
async fn connect_and_serve(
    config: &WorkerConfig,
    local: &HostResources,
    finder: &Finder,
    registry: Arc<Registry>,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<(), WorkerError> {
    let mut backoff = FIRST_BACKOFF;
    let mut redirect: Option<String> = None;
    let mut followed = false;
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let started = Instant::now();
        // A redirect is followed once; after that the finder decides again.
        let hello = hello(config, &registry, local.python.is_some());
        let ended = match connection::open(config, finder, redirect.take(), hello).await? {
            Ok((connection, welcome)) => {
                if let Some(joined) = &config.joined {
                    joined.add_permits(1);
                }
                let setup = session::Setup {
                    config,
                    finder,
                    local,
                    registry: &registry,
                    tracker,
                };
                session::serve(setup, connection, welcome, shutdown).await
            }
            Err(Ending::Lost(why)) => SessionEnd::Lost(why),
            Err(Ending::Redirected(url)) => SessionEnd::Redirected(url),
        };
        match ended {
            SessionEnd::Drained => return Ok(()),
            // Followed at once, unless the last session was a redirect
            // too (coordinators that disagree on who leads, mid-election).
            SessionEnd::Redirected(url) => {
                info!(worker = %config.name, leader = %url, "sent to the leading coordinator");
                let again = std::mem::replace(&mut followed, true);
                redirect = Some(url);
                if !again {
                    continue;
                }
            }
            SessionEnd::Lost(why) => {
                if matches!(why, Lost::NameTaken(_)) {
                    warn!(worker = %config.name, reason = %why, "the coordinator refused this worker's name for now; trying again");
                } else {
                    warn!(worker = %config.name, reason = %why, "lost the coordinator; reconnecting");
                }
                followed = false;
                if started.elapsed() > MAX_BACKOFF {
                    backoff = FIRST_BACKOFF;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(finder.max_backoff());
    }
}
