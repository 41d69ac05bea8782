//! A worker's life: connect to the coordinator (retrying with backoff while
//! it is away) — or, in a group whose runs are split into partitions, to
//! every member of the group, sharing its slots between them by their
//! demand — announce itself, run the tasks it is given, and on shutdown
//! take no more tasks, finish the ones in flight, then leave.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::WorkerConfig;
use crate::connection::{self, Connection, Ending, Finder, Lost, Welcome};
use crate::error::WorkerError;
use crate::handler::Registry;
use crate::hosting::{HostResources, hello};
use crate::session::{self, SessionEnd};
use crate::slot_share::{Seat, SharedSlots};
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
    let slots = Arc::new(Semaphore::new(config.slots as usize));
    let serving = Serving {
        config: &config,
        local: &local,
        registry: Arc::new(registry),
        tracker: &tracker,
        slots: &slots,
    };
    let ended = serving.connect_and_serve(&finder, &shutdown).await;
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

/// What every session of the worker shares.
struct Serving<'a> {
    config: &'a WorkerConfig,
    local: &'a HostResources,
    registry: Arc<Registry>,
    tracker: &'a TaskTracker,
    /// The worker's slots, whichever coordinators its tasks come from.
    slots: &'a Arc<Semaphore>,
}

impl Serving<'_> {
    /// Sessions with the coordinator, one after another, until shutdown;
    /// in a group whose runs are split into partitions, sessions with
    /// every member at once ([`Serving::serve_members`]).
    async fn connect_and_serve(
        &self,
        finder: &Finder,
        shutdown: &CancellationToken,
    ) -> Result<(), WorkerError> {
        let config = self.config;
        let mut backoff = FIRST_BACKOFF;
        let mut redirect: Option<String> = None;
        let mut followed = false;
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            let started = Instant::now();
            // A redirect is followed once; after that the finder decides again.
            let hello = hello(config, &self.registry, self.local.python.is_some());
            let opened = connection::open(config, finder, redirect.take(), hello, None).await?;
            let ended = self.serve(finder, opened, None, shutdown).await;
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
                SessionEnd::Lost(Lost::Partitioned) => {
                    // Only etcd's leader key says so; the members are in
                    // the same etcd.
                    if let Some(members) = finder.for_members() {
                        info!(worker = %config.name, "the group's runs are split into partitions: serving every coordinator of the group");
                        return self.serve_members(&members, shutdown).await;
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

    /// One session on what `open` brought, until it ends.
    async fn serve(
        &self,
        finder: &Finder,
        opened: Result<(Connection, Welcome), Ending>,
        seat: Option<Arc<Seat>>,
        shutdown: &CancellationToken,
    ) -> SessionEnd {
        match opened {
            Ok((connection, welcome)) => {
                if let Some(joined) = &self.config.joined {
                    joined.add_permits(1);
                }
                let setup = session::Setup {
                    config: self.config,
                    finder,
                    local: self.local,
                    registry: &self.registry,
                    tracker: self.tracker,
                    slots: self.slots,
                    seat,
                };
                session::serve(setup, connection, welcome, shutdown).await
            }
            Err(Ending::Lost(why)) => SessionEnd::Lost(why),
            Err(Ending::Redirected(url)) => SessionEnd::Redirected(url),
        }
    }

    /// Serves every member of a partitioned group at once, each member's
    /// runs in a session of its own, the worker's slots shared between
    /// them by their demand; members that join are found in etcd within
    /// [`MEMBERS_POLL`], and a member that leaves the list is left.
    async fn serve_members(
        &self,
        finder: &Finder,
        shutdown: &CancellationToken,
    ) -> Result<(), WorkerError> {
        let shares = SharedSlots::new(self.config.slots);
        let mut served = BTreeSet::new();
        let mut sessions = FuturesUnordered::new();
        let mut poll = tokio::time::interval(MEMBERS_POLL);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some((url, ended)) = sessions.next() => {
                    served.remove(&url);
                    ended?;
                }
                _ = poll.tick() => match finder.members().await {
                    Ok(urls) => {
                        for url in urls {
                            if served.insert(url.clone()) {
                                let session = self.serve_member(finder, &shares, url.clone(), shutdown);
                                sessions.push(session.map(move |ended| (url, ended)));
                            }
                        }
                    }
                    Err(why) => warn!(worker = %self.config.name, reason = %why, "cannot list the group's coordinators"),
                },
            }
        }
        // Each session drains on its own.
        while let Some((_, ended)) = sessions.next().await {
            ended?;
        }
        Ok(())
    }

    /// Sessions with the member at `url`, one after another, until it is
    /// no longer listed or the worker shuts down.
    async fn serve_member(
        &self,
        finder: &Finder,
        shares: &Arc<SharedSlots>,
        url: String,
        shutdown: &CancellationToken,
    ) -> Result<(), WorkerError> {
        let config = self.config;
        let mut backoff = FIRST_BACKOFF;
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            let started = Instant::now();
            let seat = Arc::new(shares.seat());
            let mut hello = hello(config, &self.registry, self.local.python.is_some());
            (hello.slots, hello.shared_slots) = (seat.first, seat.total());
            let grants = Some(seat.shares.clone());
            let opened = connection::open(config, finder, Some(url.clone()), hello, grants).await?;
            let ended = self.serve(finder, opened, Some(seat), shutdown).await;
            match ended {
                SessionEnd::Drained => return Ok(()),
                SessionEnd::Redirected(to) => {
                    warn!(worker = %config.name, coordinator = %url, redirected_to = %to, "a member of a partitioned group sent this worker elsewhere; trying it again");
                }
                SessionEnd::Lost(why) => {
                    warn!(worker = %config.name, coordinator = %url, reason = %why, "lost a coordinator of the group; reconnecting while it is listed");
                }
            }
            if started.elapsed() > MAX_BACKOFF {
                backoff = FIRST_BACKOFF;
            }
            if let Ok(members) = finder.members().await
                && !members.contains(&url)
            {
                info!(worker = %config.name, coordinator = %url, "a coordinator left the group");
                return Ok(());
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(finder.max_backoff());
        }
    }
}

/// How often a worker serving a partitioned group looks for members that
/// joined.
const MEMBERS_POLL: Duration = Duration::from_millis(500);
