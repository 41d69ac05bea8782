//! The coordinator's runs, by id: the registry every service and every
//! parent run looks runs up in, and the jobs around it, each in its own
//! module: [`admission`] (a submission checked and started), [`recovery`]
//! (stored runs continued after a restart or a failover), [`retention`]
//! (ended runs forgotten, here and in the store), [`children`]
//! (subgraph nodes' child runs, kept here like any run), [`answers`]
//! (people's answers, routed to the child run that asked), [`parsed`]
//! (graphs of bundles seen before, not parsed again) and [`tally`] (each
//! namespace's runs, going and ended, counted without walking them all).

mod admission;
mod answers;
mod children;
mod forks;
mod parsed;
pub(crate) mod quarantine;
mod recent_inputs;

pub use admission::{Accepted, InputReference};
mod recovery;
pub mod retention;
mod tally;

pub use crate::run_actor::StepMarks;
pub use retention::DeleteError;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use weft_proto::RunId;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bundle::{BlobStore, BundleError};
use crate::dispatch::DispatcherHandle;
use crate::dispatch::group_flow::RunRefusal;
use crate::durable::Keeper;
use crate::durable::blob_refs::BlobRefs;
use crate::run_actor::{RunHandle, RunLimits, RunRequestError, RunView};
use retention::Retention;
use weft_partitions::{PartitionId, Partitioning};

/// Why a submission was refused. Nothing was started.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The bundle or its graph is malformed.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The input is not a JSON object, or does not fit the declared state.
    #[error("invalid input: {0}")]
    Input(String),
    /// The workers are all there will be (an embedded cluster), and none
    /// hosts what the graph needs: the run would wait forever.
    #[error("{}", .0.join("\n"))]
    Unhostable(Vec<String>),
    /// The graph asks for more than the coordinator's run limits allow.
    #[error("{}", .0.join("\n"))]
    OverLimits(Vec<String>),
    /// The run could not be stored, so it is not accepted.
    #[error("the run could not be stored: {0}")]
    Store(#[source] StoreRefusal),
    /// The namespace's day budget is spent.
    #[error("{0}")]
    DaySpent(String),
    /// The namespace has as many runs going as its `max_running_runs`.
    #[error(
        "namespace '{namespace}' has {running} runs going, its max_running_runs is {max}: submit again once one has ended"
    )]
    TooManyRuns {
        /// The namespace.
        namespace: String,
        /// Its runs going (running or waiting, subgraph children included).
        running: usize,
        /// Its cap.
        max: u32,
    },
    /// The input names a value of an earlier run's input
    /// (`SubmitRequest.input_refs`) that this coordinator does not keep:
    /// the client sends the value instead.
    #[error(
        "input reference not held: field '{field}' names the value of field '{from_field}' of run {run}'s input, which this coordinator does not keep; send the value"
    )]
    ReferenceNotHeld {
        /// The field of the new input.
        field: String,
        /// The run named.
        run: String,
        /// Its field named.
        from_field: String,
    },
    /// A fork cannot be made as asked (a wave not kept, a field that does
    /// not fit the state).
    #[error("{0}")]
    Fork(String),
    /// The group's flow authority, which counts a partitioned group's
    /// runs going and day budgets, did not answer in time.
    #[error(
        "the group's flow control (partition 0's leader) did not answer within {0:?}, so the namespace's max_running_runs and day budget cannot be checked; try again"
    )]
    FlowUnanswered(std::time::Duration),
    /// The input is larger than the configured limit.
    #[error("the input is {size} bytes, more than the limit of {limit}")]
    InputTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// Why a new run was not stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreRefusal {
    /// Its bundle's files could not be written.
    #[error(transparent)]
    Files(#[from] weft_store::StoreError),
    /// Its first checkpoint was not taken.
    #[error("the store did not take the run (see the coordinator's log); nothing was started")]
    Checkpoint,
    /// The coordinator stopped meanwhile.
    #[error("the coordinator is shutting down")]
    ShuttingDown,
}

/// How long a submission waits for a partitioned group's flow authority
/// to admit its run.
const GROUP_ADMISSION_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Every run the coordinator holds.
#[derive(Clone)]
pub struct Runs {
    inner: Arc<RwLock<Inner>>,
    dispatcher: DispatcherHandle,
    blobs: BlobStore,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    max_input_bytes: usize,
    fixed_workers: bool,
    limits: RunLimits,
    retention: Retention,
    /// Where runs are kept across restarts; `None`: in memory only.
    store: Option<Keeper>,
    /// Which stored bundle files the runs use.
    stored_files: Arc<BlobRefs>,
    /// Counts the runs registered, for whoever waits for one to be.
    registered: Arc<watch::Sender<u64>>,
    /// Graphs of bundles submitted before, parsed.
    parsed: Arc<parsed::ParsedGraphs>,
    /// Where the runs' steps are marked while they run.
    marks: Arc<StepMarks>,
    /// What model calls cost.
    prices: Arc<crate::prices::Prices>,
    /// Namespaces' caps on runs going at once.
    max_running_runs: Arc<HashMap<String, u32>>,
    /// What namespaces with a day budget spent today.
    spend: Arc<crate::day_spend::DaySpend>,
    /// What cached steps returned (SPEC 20).
    cache: crate::node_cache::NodeCache,
    /// The large input values of recent runs, for submissions that name
    /// them instead of sending them again.
    recent_inputs: Arc<recent_inputs::RecentInputs>,
    /// The one partition of a partitioned group this registry serves: its
    /// runs' ids are made to land there, and only its runs are restored.
    /// `None`: every run (a lone coordinator, or a group's one leader).
    home: Option<(Partitioning, PartitionId)>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<RunId, RunHandle>,
    order: Vec<RunId>,
    /// Each namespace's runs, going and ended.
    tallies: tally::Tallies,
    /// When ended runs were last looked at for their age.
    aged_at: Option<std::time::Instant>,
    /// How many runs were held when they were last counted by namespace.
    counted_at: usize,
}

impl Inner {
    /// Lets run `id` go from the index and its namespace's tally (its place
    /// in `order` is the caller's to drop, one run or many at once).
    fn release(&mut self, id: &str) {
        if let Some(run) = self.by_id.remove(id) {
            self.tallies.remove(id, run.namespace());
        }
    }
}

/// What the registry of runs takes from the coordinator's configuration.
#[derive(Debug, Clone)]
pub struct RunsConfig {
    /// The largest run input accepted.
    pub max_input_bytes: usize,
    /// The workers that join at start are all there will be: work none of
    /// them hosts is refused at submission.
    pub fixed_workers: bool,
    /// What one run may use.
    pub limits: RunLimits,
    /// How many ended runs are kept, and for how long.
    pub retention: retention::Retention,
    /// What model calls cost (`[prices]`).
    pub prices: Arc<crate::prices::Prices>,
    /// Namespaces' caps on runs going at once (`[[namespaces]]`).
    pub max_running_runs: HashMap<String, u32>,
    /// Namespaces' day budgets (`[[namespaces]]`).
    pub day_budgets: HashMap<String, crate::day_spend::DayBudget>,
}

impl Runs {
    /// An empty registry, with the limits and retention of `config`.
    pub fn new(
        dispatcher: DispatcherHandle,
        blobs: BlobStore,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        config: RunsConfig,
    ) -> Self {
        Self {
            inner: Arc::default(),
            dispatcher,
            blobs,
            shutdown,
            tracker,
            max_input_bytes: config.max_input_bytes,
            fixed_workers: config.fixed_workers,
            limits: config.limits.clone(),
            retention: config.retention,
            store: None,
            stored_files: Arc::default(),
            registered: Arc::new(watch::Sender::new(0)),
            parsed: Arc::new(parsed::ParsedGraphs::new(config.limits)),
            marks: Arc::new(StepMarks::none()),
            prices: config.prices,
            max_running_runs: Arc::new(config.max_running_runs),
            spend: Arc::new(crate::day_spend::DaySpend::new(config.day_budgets)),
            cache: crate::node_cache::NodeCache::default(),
            recent_inputs: Arc::default(),
            home: None,
        }
    }

    /// Serves partition `partition` of `partitioning` only.
    pub fn in_partition(mut self, partitioning: Partitioning, partition: PartitionId) -> Self {
        self.home = Some((partitioning, partition));
        // What its calls spend counts against the group's day budgets.
        let dispatcher = self.dispatcher.clone();
        self.spend
            .forward_to(Box::new(move |namespace, tokens, cost| {
                dispatcher.spent(namespace.to_owned(), tokens, cost);
            }));
        self
    }

    /// Whether run `id` is one this registry serves.
    pub fn serves(&self, id: &str) -> bool {
        self.home
            .is_none_or(|(partitioning, partition)| partitioning.of_run(id) == partition)
    }

    /// A new run's id: unique, in the order runs are made, and in this
    /// registry's partition (a child's so in its parent's).
    pub(super) fn new_id(&self) -> RunId {
        match self.home {
            None => admission::new_run_id(),
            Some((partitioning, partition)) => {
                RunId::from(partitioning.id_in(partition, || admission::new_run_id().to_string()))
            }
        }
    }

    /// What namespaces with a day budget spent today.
    pub fn day_spend(&self) -> &Arc<crate::day_spend::DaySpend> {
        &self.spend
    }

    /// Decides whether a new run of `namespace` may start under its
    /// `max_running_runs` and day budget: here for a lone coordinator, by
    /// the group's flow authority in a partitioned group (then the ticket
    /// to pass to [`Runs::admitted`] once the run started or failed).
    pub(super) async fn admit_new(&self, namespace: &str) -> Result<Option<u64>, SubmitError> {
        if self.home.is_none() {
            self.check_running(namespace)?;
            self.check_day(namespace)?;
            return Ok(None);
        }
        if !self.max_running_runs.contains_key(namespace) && !self.spend.has_budget(namespace) {
            return Ok(None);
        }
        let asked = self.dispatcher.admit_run(namespace.to_owned());
        match tokio::time::timeout(GROUP_ADMISSION_PATIENCE, asked).await {
            Ok(Ok(ticket)) => Ok(Some(ticket)),
            Ok(Err(Some(RunRefusal::TooMany { running, max }))) => Err(SubmitError::TooManyRuns {
                namespace: namespace.to_owned(),
                running,
                max,
            }),
            Ok(Err(Some(RunRefusal::DaySpent(why)))) => Err(SubmitError::DaySpent(why)),
            Ok(Err(None)) => Err(SubmitError::Store(StoreRefusal::ShuttingDown)),
            Err(_) => Err(SubmitError::FlowUnanswered(GROUP_ADMISSION_PATIENCE)),
        }
    }

    /// A run the group admitted started (or did not): the runs going in
    /// this partition are reported, the new one among them, and only then
    /// is its admission's ticket released, so the group counts it once
    /// and at every moment.
    pub(super) fn admitted(&self, ticket: Option<u64>) {
        if let Some(ticket) = ticket {
            self.report_going();
            self.dispatcher.release_run(ticket);
        }
    }

    /// Reports the runs going in this partition of a group, by namespace
    /// with a `max_running_runs`, to the group's flow authority.
    pub fn report_going(&self) {
        let Some((_, partition)) = self.home else {
            return;
        };
        if self.max_running_runs.is_empty() {
            return;
        }
        let revision = self
            .store
            .as_ref()
            .and_then(|keeper| keeper.fence())
            .map_or(0, |fence| fence.revision);
        let counts = {
            let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
            self.max_running_runs
                .keys()
                .map(|namespace| (namespace.clone(), inner.tallies.going(namespace) as u32))
                .collect()
        };
        self.dispatcher.report_going(partition.0, revision, counts);
    }

    /// Refuses a new run of `namespace` when as many of its runs are going
    /// as its `max_running_runs` allows.
    pub(super) fn check_running(&self, namespace: &str) -> Result<(), SubmitError> {
        let Some(&max) = self.max_running_runs.get(namespace) else {
            return Ok(());
        };
        let running = self
            .inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .tallies
            .going(namespace);
        if running >= max as usize {
            return Err(SubmitError::TooManyRuns {
                namespace: namespace.to_owned(),
                running,
                max,
            });
        }
        Ok(())
    }

    /// Refuses a new run of `namespace` once its day budget is spent.
    pub(super) fn check_day(&self, namespace: &str) -> Result<(), SubmitError> {
        self.spend
            .check(namespace, now_ms())
            .map_err(SubmitError::DaySpent)
    }

    /// Keeps and finds cached steps' answers in `cache` from now on.
    pub fn with_cache(mut self, cache: crate::node_cache::NodeCache) -> Self {
        self.cache = cache;
        self
    }

    /// Marks the runs' steps in `marks` from now on.
    pub fn with_marks(mut self, marks: Arc<StepMarks>) -> Self {
        self.marks = marks;
        self
    }

    /// Keeps runs through `keeper` from now on.
    pub fn with_store(mut self, keeper: Keeper) -> Self {
        self.store = Some(keeper);
        self
    }

    /// Registers a started run under its id.
    fn register(&self, id: RunId, handle: RunHandle) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.tallies.add(id.clone(), handle.clone());
        inner.by_id.insert(id.clone(), handle);
        inner.order.push(id);
        drop(inner);
        self.registered.send_modify(|count| *count += 1);
    }

    /// Forgets a run whose start was refused.
    fn unregister(&self, id: &str) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.release(id);
        inner.order.retain(|known| &**known != id);
    }

    /// The ids of the runs held, in the order they were registered.
    pub fn ids(&self) -> Vec<RunId> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.order.clone()
    }

    /// How many runs it holds.
    pub fn held(&self) -> usize {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.order.len()
    }

    /// Retries `run` (`weft retry`, asked by `by`): an ended run comes back
    /// to life under the registry's lock, and is counted going again
    /// before anyone counts; a live one is asked, and its machine answers.
    pub async fn retry(
        &self,
        run: &RunHandle,
        by: Option<String>,
    ) -> Result<RunView, RunRequestError> {
        let revived = {
            let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
            let revived = run.revive(by.clone())?;
            if revived && inner.by_id.contains_key(run.id()) {
                inner.tallies.revived(run.id(), run);
            }
            revived
        };
        if revived {
            run.get().await
        } else {
            run.ask_retry(by).await
        }
    }

    /// The store runs are kept in, if the coordinator has one.
    pub fn keeper(&self) -> Option<&Keeper> {
        self.store.as_ref()
    }

    /// A run by id.
    pub fn get(&self, id: &str) -> Option<RunHandle> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.by_id.get(id).cloned()
    }

    /// Up to `limit` runs, newest first, starting after run `after` (or
    /// with the newest), of the runs `visible` lets through; and whether
    /// older such runs remain.
    ///
    /// Run ids sort in the order runs are made (UUIDv7, by the
    /// millisecond), so `after` is a place in that order, not a run that
    /// must be held here: a page goes on from a run deleted or forgotten
    /// since the last one, or held by another partition's registry.
    pub async fn page(
        &self,
        limit: usize,
        after: Option<&str>,
        visible: impl Fn(&RunHandle) -> bool,
    ) -> (Vec<RunHandle>, bool) {
        self.evict(true).await;
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let newest_first = inner.order.iter().rev();
        let rest: Box<dyn Iterator<Item = &RunId>> = match after {
            Some(after) => Box::new(newest_first.filter(move |id| &***id < after)),
            None => Box::new(newest_first),
        };
        let mut shown = rest
            .filter_map(|id| inner.by_id.get(id))
            .filter(|handle| visible(handle));
        let page: Vec<RunHandle> = shown.by_ref().take(limit).cloned().collect();
        (page, shown.next().is_some())
    }
}

/// Now, in Unix milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
