//! The runs of the partitions a coordinator leads in a partitioned group:
//! one registry of runs per partition, each kept through a [`Keeper`]
//! fenced on that partition's lease key, all sharing the coordinator's
//! dispatcher (the workers connected to it) and bundle files.
//!
//! It is the [`Runtime`] that [`super::membership`] drives: serving a
//! partition makes its registry and restores the partition's runs from the
//! store (only theirs: a run's partition is a hash of its id); draining one
//! stops its run actors (each takes a checkpoint of the map items it
//! finished since its last one), lets their last checkpoints be written, drops
//! their tasks from the dispatcher (the next leader sends them again) and
//! forgets the registry; abandoning one (another leads it now) stops it
//! the same way, its writes refused by the fence. New runs are made in the
//! partitions led here, in turn, their ids made to land there. Each
//! partition keeps its own copies of its runs' bundle files, so that one
//! leader deleting a file its runs no longer use cannot take it from
//! another partition's runs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_store::{AnyStore, Fence, Revision};

use super::membership::{PartitionId, Partitioning, Runtime, back_off};
use crate::access::RunAccess;
use crate::bundle::BlobStore;
use crate::config::CoordinatorConfig;
use crate::dispatch::{DispatcherHandle, TaskLauncher};
use crate::durable::{Keeper, keys};
use crate::node_cache::NodeCache;
use crate::run_actor::StepMarks;
use crate::runs::Runs;
use crate::term::runs_over;

/// How long a planned hand-over waits for the tasks in flight of the
/// partition's runs to end (their results then merged here, not run again
/// by the next leader).
const TASKS_PATIENCE: Duration = Duration::from_secs(3);

/// How long a drained partition's run actors and checkpoint writers may
/// take to stop before the hand-over goes on without them.
const DRAIN_PATIENCE: Duration = Duration::from_secs(10);

/// A partition led here.
struct Served {
    runs: Runs,
    fence: Revision,
    /// Stops its runs.
    stop: CancellationToken,
    /// Where its runs' actors and writers are tracked.
    tracker: TaskTracker,
    /// Its stored runs are restored: until then a request about one of
    /// them would find nothing, so none is served from it.
    restored: bool,
}

/// A partition led here, as the group's description shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    /// The partition.
    pub partition: PartitionId,
    /// The runs its registry holds.
    pub runs: usize,
    /// Its runs are being restored (it was just taken over).
    pub restoring: bool,
}

/// The registries of the partitions led here.
#[derive(Clone)]
pub struct PartitionRuns {
    shared: Arc<Shared>,
}

struct Shared {
    config: CoordinatorConfig,
    store: AnyStore,
    partitioning: Partitioning,
    dispatcher: DispatcherHandle,
    blobs: BlobStore,
    served: Mutex<BTreeMap<PartitionId, Served>>,
    /// Turns among the partitions led, for new runs.
    turn: AtomicUsize,
    /// Bumped whenever a partition's restore completes.
    restores: watch::Sender<u64>,
    /// The coordinator's step marks and node cache, which every
    /// partition's runs share (none: each registry's own, in memory).
    marks: Option<Arc<StepMarks>>,
    cache: Option<NodeCache>,
    /// Where the group's flow authority runs while partition 0 is led
    /// here (none: no authority, a group of one partition).
    authority: Option<super::flow_authority::AuthoritySlot>,
}

impl PartitionRuns {
    /// Serves nothing yet; `dispatcher` and `blobs` are the coordinator's.
    pub fn new(
        config: CoordinatorConfig,
        store: AnyStore,
        partitioning: Partitioning,
        dispatcher: DispatcherHandle,
        blobs: BlobStore,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                config,
                store,
                partitioning,
                dispatcher,
                blobs,
                served: Mutex::default(),
                turn: AtomicUsize::new(0),
                restores: watch::channel(0).0,
                marks: None,
                cache: None,
                authority: None,
            }),
        }
    }

    /// Every partition's runs mark their steps in `marks` (a run that kills
    /// its coordinator stepping is quarantined) and find cached steps in
    /// `cache`. Before any partition is served.
    pub fn with_shared(mut self, marks: Arc<StepMarks>, cache: NodeCache) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.marks = Some(marks);
            shared.cache = Some(cache);
        }
        self
    }

    /// The group's flow authority runs in `slot` while partition 0 is led
    /// here. Before any partition is served.
    pub fn with_authority(mut self, slot: super::flow_authority::AuthoritySlot) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.authority = Some(slot);
        }
        self
    }

    /// The partitions led here whose runs are restored, in order.
    pub fn led(&self) -> Vec<PartitionId> {
        let served = self.shared.served();
        served
            .iter()
            .filter(|(_, s)| s.restored)
            .map(|(partition, _)| *partition)
            .collect()
    }

    /// Whether run `id`'s partition is led here with its runs still being
    /// restored: a request about it waits ([`PartitionRuns::restores`]).
    pub fn restoring(&self, id: &str) -> bool {
        let partition = self.shared.partitioning.of_run(id);
        self.shared
            .served()
            .get(&partition)
            .is_some_and(|s| !s.restored)
    }

    /// Resolves when a partition's restore completes after this call.
    pub fn restores(&self) -> impl std::future::Future<Output = ()> + Send + use<> {
        let mut restores = self.shared.restores.subscribe();
        async move {
            let _ = restores.changed().await;
        }
    }

    /// How many runs each partition led here holds.
    pub fn runs_held(&self) -> BTreeMap<PartitionId, usize> {
        self.holdings()
            .into_iter()
            .map(|held| (held.partition, held.runs))
            .collect()
    }

    /// Each partition led here: the runs it holds, and whether they are
    /// still being restored.
    pub fn holdings(&self) -> Vec<Holding> {
        let served = self.shared.served();
        served
            .iter()
            .map(|(partition, s)| Holding {
                partition: *partition,
                runs: s.runs.held(),
                restoring: !s.restored,
            })
            .collect()
    }

    /// The group's partition count.
    pub fn count(&self) -> u32 {
        self.shared.partitioning.count()
    }

    /// The registry of run `id`'s partition, if it is led here.
    pub fn route(&self, id: &str) -> Option<Runs> {
        let partition = self.shared.partitioning.of_run(id);
        self.shared.served().get(&partition).map(|s| s.runs.clone())
    }

    /// Run `id`'s partition.
    pub fn partition_of(&self, id: &str) -> PartitionId {
        self.shared.partitioning.of_run(id)
    }

    /// Access to run `id`'s partition, if it is led here: its watches end
    /// when the partition is handed over.
    pub fn access(&self, id: &str, max_bundle_bytes: usize) -> Option<RunAccess> {
        let partition = self.shared.partitioning.of_run(id);
        let served = self.shared.served();
        served
            .get(&partition)
            .filter(|s| s.restored)
            .map(|s| s.access(max_bundle_bytes))
    }

    /// Access to every partition led here and restored, in order.
    pub fn every_access(&self, max_bundle_bytes: usize) -> Vec<RunAccess> {
        let served = self.shared.served();
        served
            .values()
            .filter(|s| s.restored)
            .map(|s| s.access(max_bundle_bytes))
            .collect()
    }

    /// A registry for a new run: the partitions led here take turns;
    /// `None` while none is.
    pub fn for_new_run(&self) -> Option<Runs> {
        self.new_run_partition(|s| s.runs.clone())
    }

    /// Access to a partition for a new run, in turn (see
    /// [`PartitionRuns::for_new_run`]).
    pub fn access_for_new_run(&self, max_bundle_bytes: usize) -> Option<RunAccess> {
        self.new_run_partition(|s| s.access(max_bundle_bytes))
    }

    /// A partition for a new run among those restored (a restore would
    /// take a run made meanwhile for a stored one to adopt).
    fn new_run_partition<T>(&self, take: impl FnOnce(&Served) -> T) -> Option<T> {
        let served = self.shared.served();
        let ready: Vec<&Served> = served.values().filter(|s| s.restored).collect();
        if ready.is_empty() {
            return None;
        }
        let turn = self.shared.turn.fetch_add(1, Ordering::Relaxed) % ready.len();
        ready.get(turn).map(|s| take(s))
    }
}

impl Served {
    /// Access to its runs; watches end when it stops being served here.
    fn access(&self, max_bundle_bytes: usize) -> RunAccess {
        RunAccess::over(
            self.runs.clone(),
            max_bundle_bytes,
            self.tracker.clone(),
            self.stop.clone(),
        )
    }
}

impl Shared {
    fn served(&self) -> std::sync::MutexGuard<'_, BTreeMap<PartitionId, Served>> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before a planned hand-over: no new task of the partition's runs is
    /// placed, and the ones running are waited for, up to
    /// [`TASKS_PATIENCE`], so that their results are merged and
    /// checkpointed here rather than run again by the next leader.
    async fn let_tasks_end(&self, partition: PartitionId, served: &Served) {
        let runs: std::collections::HashSet<_> = served.runs.ids().into_iter().collect();
        if runs.is_empty() {
            return;
        }
        self.dispatcher.hold_runs(runs.iter().cloned().collect());
        let began = std::time::Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            let running = self.dispatcher.running_of(runs.clone()).await;
            if running == 0 {
                tracing::info!(
                    %partition,
                    ms = began.elapsed().as_millis() as u64,
                    "the partition's tasks in flight ended before its hand-over"
                );
                return;
            }
            if began.elapsed() >= TASKS_PATIENCE {
                tracing::info!(
                    %partition,
                    running,
                    "some of the partition's tasks still run; its next leader runs them again"
                );
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Stops what `served` runs and waits for it (its last checkpoints
    /// written, unless the fence refuses them); its tasks leave the
    /// dispatcher.
    async fn stop(&self, partition: PartitionId, served: Served) {
        let began = std::time::Instant::now();
        served.stop.cancel();
        served.tracker.close();
        match tokio::time::timeout(DRAIN_PATIENCE, served.tracker.wait()).await {
            Ok(()) => tracing::info!(
                %partition,
                ms = began.elapsed().as_millis() as u64,
                "the partition's runs stopped"
            ),
            Err(_) => tracing::warn!(
                %partition,
                left = served.tracker.len(),
                "some of the partition's tasks did not stop in time"
            ),
        }
        for id in served.runs.ids() {
            self.dispatcher.forget(id);
        }
        // Its next leader reports its runs going to the group.
        self.dispatcher.partition_gone(partition.0);
    }
}

impl Runtime for PartitionRuns {
    async fn serve(&self, partition: PartitionId, fence: Fence, abandoned: CancellationToken) {
        if abandoned.is_cancelled() {
            return;
        }
        let shared = &self.shared;
        let revision = fence.revision;
        // A fenced write refused stops the partition's runs: it is led
        // elsewhere now.
        let keeper = Keeper::new(shared.store.clone(), Some(fence), abandoned.clone())
            .with_blobs_under(keys::partition_blobs(partition.0));
        let stop = abandoned.child_token();
        let tracker = TaskTracker::new();
        let runs = runs_over(
            &shared.config,
            &shared.dispatcher,
            &shared.blobs,
            keeper.clone(),
            &stop,
            &tracker,
        )
        .in_partition(shared.partitioning, partition);
        let runs = match &shared.marks {
            Some(marks) => runs.with_marks(marks.clone()),
            None => runs,
        };
        let runs = match &shared.cache {
            Some(cache) => runs.with_cache(cache.clone()),
            None => runs,
        };
        shared.served().insert(
            partition,
            Served {
                runs: runs.clone(),
                fence: revision,
                stop: stop.clone(),
                tracker: tracker.clone(),
                restored: false,
            },
        );
        // Partition 0's leader holds the group's keys and limits, from
        // now until the partition is drained or abandoned.
        if partition.0 == 0
            && let Some(slot) = &shared.authority
        {
            let runs = shared.config.runs();
            slot.start(
                shared.config.rate_limits.clone(),
                runs.max_running_runs,
                crate::day_spend::DaySpend::new(runs.day_budgets),
                keeper.clone(),
                stop.clone(),
                &tracker,
            );
        }
        // Abandoned: stopped and forgotten, unless drained before.
        let abandon = self.shared.clone();
        tokio::spawn(async move {
            abandoned.cancelled().await;
            let left = {
                let mut served = abandon.served();
                match served.get(&partition) {
                    Some(s) if s.fence == revision => served.remove(&partition),
                    _ => None,
                }
            };
            if let Some(served) = left {
                abandon.stop(partition, served).await;
            }
        });
        // Restored until it works or the partition goes: a run not restored
        // would wait for a leader that does not serve it. Runs adopted by a
        // try that failed part-way are not adopted again.
        let mut pause = Duration::from_millis(100);
        loop {
            match runs.recover(shared.config.max_bundle_bytes).await {
                Ok(_) => {
                    let held = runs.held();
                    tracing::info!(%partition, runs = held, "the partition's runs restored");
                    if let Some(s) = shared.served().get_mut(&partition)
                        && s.fence == revision
                    {
                        s.restored = true;
                    }
                    shared.restores.send_modify(|count| *count += 1);
                    // The group counts the runs going in it from now on.
                    if !shared
                        .config
                        .namespaces
                        .iter()
                        .all(|ns| ns.max_running_runs.is_none())
                    {
                        tracker.spawn(report_going(runs.clone(), stop.clone()));
                    }
                    return;
                }
                Err(error) => tracing::error!(
                    %partition,
                    %error,
                    "restoring the partition's runs failed; trying again"
                ),
            }
            if back_off(&mut pause, Duration::from_secs(5), &stop).await {
                return;
            }
        }
    }

    async fn drain(&self, partition: PartitionId) {
        let served = self.shared.served().remove(&partition);
        if let Some(served) = served {
            self.shared.let_tasks_end(partition, &served).await;
            self.shared.stop(partition, served).await;
        }
    }
}

/// How often a partition's runs going are reported to the group's flow
/// authority (only a change is sent on; a new run is reported at once).
const GOING_EVERY: Duration = Duration::from_millis(250);

/// Reports the runs going in a partition led here until `stop`.
async fn report_going(runs: Runs, stop: CancellationToken) {
    let mut every = tokio::time::interval(GOING_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = every.tick() => runs.report_going(),
        }
    }
}
