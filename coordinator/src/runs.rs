//! The coordinator's runs: submission (bundle checked, graph validated,
//! input checked, actor started) and lookup by id.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bundle::{BlobStore, Bundle, BundleError};
use crate::dispatch::{BlobRef, DispatcherHandle, Requirement, TaskLauncher, WorkerKind};
use crate::graph::Finding;
use weft_store::Store;

use crate::durable::blob_refs::BlobRefs;
use crate::durable::journal::Journal;
use crate::durable::{Keeper, restore};
use crate::run::{
    History, RunError, RunHandle, RunLimits, RunMachine, RunPlan, RunSetup, Start, spawn_run,
};

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
    Store(String),
    /// The input is larger than the configured limit.
    #[error("the input is {size} bytes, more than the limit of {limit}")]
    InputTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

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
}

/// How long ended runs are kept: the newest `count` of them, each for at
/// most `age` after it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Ended runs kept at most.
    pub count: usize,
    /// How long an ended run is kept.
    pub age: std::time::Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            count: 10_000,
            age: std::time::Duration::from_secs(7 * 24 * 3600),
        }
    }
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<Arc<str>, RunHandle>,
    order: Vec<Arc<str>>,
}

impl Runs {
    /// An empty registry, with the limits and retention of `config`.
    pub fn new(
        dispatcher: DispatcherHandle,
        blobs: BlobStore,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        config: &crate::config::CoordinatorConfig,
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
        }
    }

    /// Keeps runs through `keeper` from now on.
    pub fn with_store(mut self, keeper: Keeper) -> Self {
        self.store = Some(keeper);
        self
    }

    /// Restores every run stored by an earlier coordinator: unfinished ones
    /// continue (what was in flight is sent again), ended ones answer as
    /// before. Returns how many.
    pub async fn recover(&self, max_bundle_bytes: usize) -> Result<usize, weft_store::StoreError> {
        let Some(keeper) = self.store.clone() else {
            return Ok(0);
        };
        let stored = restore::stored_runs(keeper.store(), max_bundle_bytes).await?;
        let count = stored.len();
        for run in stored {
            let id = run.id.clone();
            if let Err(error) = self.adopt(&keeper, run) {
                tracing::error!(run = %id, %error, "a stored run cannot continue");
            }
        }
        Ok(count)
    }

    /// Continues one stored run under a new actor.
    fn adopt(&self, keeper: &Keeper, run: restore::StoredRun) -> Result<(), String> {
        let (graph, _) = run.bundle.load_graph().map_err(|e| e.to_string())?;
        let durability = graph.settings.durability;
        let plan = RunPlan::new(Arc::new(graph), self.limits.clone());
        let machine = RunMachine::restore(plan.clone(), run.progress).map_err(|e| e.to_string())?;
        let children = self.children_of(&plan, &run.bundle);
        let journal = Journal::start(
            keeper.clone(),
            run.id.clone(),
            run.head.clone(),
            durability,
            run.log.len() as u64,
            &self.tracker,
        );
        let handle = spawn_run(RunSetup {
            id: run.id.clone(),
            plan,
            machine,
            bundle: Arc::new(bundle_refs(&run.bundle)),
            launcher: Arc::new(self.dispatcher.clone()),
            shutdown: self.shutdown.child_token(),
            tracker: self.tracker.clone(),
            history: Some(History {
                log: run.log,
                created_unix_ms: run.head.created_unix_ms,
            }),
            start: Start::Recover,
            journal: Some(journal),
            admitted: None,
            lease: self.blobs.add_bundle(&run.bundle),
            children,
        });
        let files = run.head.files.iter().map(|f| f.sha256.clone()).collect();
        self.stored_files.hold(&run.id, files);
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.by_id.insert(run.id.clone(), handle);
        inner.order.push(run.id);
        Ok(())
    }

    /// Starts a run; returns its id and the warnings to show the submitter.
    pub async fn submit(
        &self,
        bundle: Bundle,
        input_json: &str,
    ) -> Result<(Arc<str>, Vec<String>), SubmitError> {
        self.submit_traced(bundle, input_json, None).await
    }

    /// As [`Runs::submit`], for a run whose trace hangs under the span
    /// `trace_parent` names (a subgraph node's child run).
    pub async fn submit_traced(
        &self,
        bundle: Bundle,
        input_json: &str,
        trace_parent: Option<String>,
    ) -> Result<(Arc<str>, Vec<String>), SubmitError> {
        if input_json.len() > self.max_input_bytes {
            return Err(SubmitError::InputTooLarge {
                size: input_json.len(),
                limit: self.max_input_bytes,
            });
        }
        let input = parse_input(input_json)?;
        let (graph, findings) = bundle.load_graph()?;
        bundle.check_family(&graph)?;
        let mut warnings: Vec<String> = findings.iter().map(Finding::to_string).collect();
        let over = self.limits.check_graph(&graph);
        if !over.is_empty() {
            return Err(SubmitError::OverLimits(over));
        }
        let plan = RunPlan::new(Arc::new(graph), self.limits.clone());
        let mut machine = RunMachine::new(plan.clone(), input).map_err(|error| match error {
            RunError::InvalidInput { message } => SubmitError::Input(message),
            other => SubmitError::Input(other.to_string()),
        })?;
        machine.set_trace_parent(trace_parent);
        let fleet = self.dispatcher.snapshot().await;
        let gaps = unhosted(&plan, &fleet);
        if self.fixed_workers && !gaps.is_empty() {
            return Err(SubmitError::Unhostable(
                gaps.into_iter()
                    .map(|gap| format!("{}: no worker of this cluster hosts it and none will join; run it on a cluster with a worker that does", gap.what))
                    .collect(),
            ));
        }
        // A loop's worker-hosted `until` must be there at submission (SPEC
        // 4.2), on any cluster.
        let untils = unhosted_untils(&plan, &fleet);
        if !untils.is_empty() {
            return Err(SubmitError::Unhostable(untils));
        }
        warnings.extend(gaps.into_iter().map(|gap| gap.warning));
        let lease = self.blobs.add_bundle(&bundle);
        let children = self.children_of(&plan, &bundle);
        let refs = bundle_refs(&bundle);
        let id: Arc<str> = Arc::from(format!("run-{}", uuid::Uuid::now_v7().simple()));
        // Stored before it is acknowledged: a crash from here on loses nothing.
        let journal = self
            .journal_for(&id, &bundle, plan.graph().settings.durability)
            .await?;
        let (admitted, stored) = tokio::sync::oneshot::channel();
        let launcher: Arc<dyn TaskLauncher> = Arc::new(self.dispatcher.clone());
        let handle = spawn_run(RunSetup {
            id: id.clone(),
            plan,
            machine,
            bundle: Arc::new(refs),
            launcher,
            shutdown: self.shutdown.child_token(),
            tracker: self.tracker.clone(),
            history: None,
            start: Start::New,
            journal,
            admitted: Some(admitted),
            lease,
            children,
        });
        // The actor's first checkpoint: acknowledged means stored.
        let refused = match stored.await {
            Ok(true) => None,
            Ok(false) => Some(
                "the store did not take the run (see the coordinator's log); nothing was started",
            ),
            Err(_) => Some("the coordinator is shutting down"),
        };
        if let Some(reason) = refused {
            self.stored_files.release(&id);
            return Err(SubmitError::Store(reason.into()));
        }
        metrics::counter!(crate::metrics::RUNS_SUBMITTED).increment(1);
        self.evict().await;
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.by_id.insert(id.clone(), handle);
        inner.order.push(id.clone());
        Ok((id, warnings))
    }

    /// What a run of `plan` needs to run its subgraph nodes' child runs;
    /// `None` without any.
    fn children_of(
        &self,
        plan: &RunPlan,
        bundle: &Bundle,
    ) -> Option<Arc<dyn crate::run::ChildRuns>> {
        let embeds = plan
            .graph()
            .nodes
            .iter()
            .any(|node| matches!(node.kind, crate::graph::NodeKind::Subgraph(_)));
        embeds.then(|| {
            let children = crate::child_registry::RunChildren::new(self.clone(), bundle.clone());
            Arc::new(children) as Arc<dyn crate::run::ChildRuns>
        })
    }

    /// Stores a new run's bundle files and starts its journal (`None`
    /// without a store).
    async fn journal_for(
        &self,
        id: &Arc<str>,
        bundle: &Bundle,
        durability: crate::graph::Durability,
    ) -> Result<Option<Journal>, SubmitError> {
        let Some(keeper) = &self.store else {
            return Ok(None);
        };
        let files = bundle.files.values().map(|f| f.sha256.clone()).collect();
        self.stored_files.hold(id, files);
        let head = match self.stored_files.store(keeper, bundle, now_ms()).await {
            Ok(head) => head,
            Err(error) => {
                self.stored_files.release(id);
                return Err(SubmitError::Store(error.to_string()));
            }
        };
        let journal = Journal::start(
            keeper.clone(),
            id.clone(),
            head,
            durability,
            0,
            &self.tracker,
        );
        Ok(Some(journal))
    }

    /// A run by id.
    pub fn get(&self, id: &str) -> Option<RunHandle> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.by_id.get(id).cloned()
    }

    /// Up to `limit` runs, newest first, starting after run `after` (or
    /// with the newest); and whether older runs remain.
    pub async fn page(&self, limit: usize, after: Option<&str>) -> (Vec<RunHandle>, bool) {
        self.evict().await;
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let newest_first = inner.order.iter().rev();
        let mut rest: Box<dyn Iterator<Item = &Arc<str>>> = match after {
            Some(after) => Box::new(newest_first.skip_while(move |id| &***id != after).skip(1)),
            None => Box::new(newest_first),
        };
        let page: Vec<RunHandle> = rest
            .by_ref()
            .take(limit)
            .filter_map(|id| inner.by_id.get(id).cloned())
            .collect();
        (page, rest.next().is_some())
    }

    /// Forgets ended runs beyond the retention: the oldest first, past
    /// `retain_finished` of them or older than `retain_finished_age`.
    async fn evict(&self) {
        let gone = self.forget_old();
        // Forgotten here, forgotten in the store: a restart does not bring
        // them back.
        if let Some(keeper) = &self.store {
            let mut unused = Vec::new();
            for id in gone {
                let prefix = crate::durable::keys::run_prefix(&id);
                let deleted = keeper.store().delete_prefix(&prefix, keeper.fence()).await;
                if let Err(error) = keeper.checked(deleted) {
                    tracing::warn!(run = %id, %error, "a forgotten run stays in the store");
                }
                unused.extend(self.stored_files.release(&id));
            }
            if !unused.is_empty() {
                self.stored_files.delete_unused(keeper, unused).await;
            }
        }
    }

    /// Drops ended runs beyond the retention from the registry; their ids.
    fn forget_old(&self) -> Vec<Arc<str>> {
        let now = now_ms();
        let max_age = i64::try_from(self.retention.age.as_millis()).unwrap_or(i64::MAX);
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let ended: Vec<(Arc<str>, i64)> = inner
            .order
            .iter()
            .filter_map(|id| {
                let finished = inner.by_id.get(id)?.finished()?;
                Some((id.clone(), finished.finished_unix_ms))
            })
            .collect();
        let surplus = ended.len().saturating_sub(self.retention.count);
        let gone: std::collections::HashSet<Arc<str>> = ended
            .iter()
            .enumerate()
            .filter(|(i, (_, at))| *i < surplus || now.saturating_sub(*at) > max_age)
            .map(|(_, (id, _))| id.clone())
            .collect();
        if !gone.is_empty() {
            inner.order.retain(|id| !gone.contains(id));
            inner.by_id.retain(|id, _| !gone.contains(id));
        }
        gone.into_iter().collect()
    }
}

/// Where a worker gets Python from.
const PYTHON_HINT: &str = " (a worker hosts it when python3 runs there, or the interpreter \
     named by [python] interpreter in its --config)";

/// What the graph needs that no connected worker hosts now.
fn unhosted(plan: &RunPlan, fleet: &crate::dispatch::Fleet) -> Vec<Gap> {
    let workers = &fleet.workers;
    let mut warnings = Vec::new();
    for (idx, node) in plan.graph().nodes.iter().enumerate() {
        let Some(binding) = plan.binding(idx) else {
            continue;
        };
        let requirement = &binding.requirement;
        if !workers
            .iter()
            .any(|w| !w.draining && requirement.hosted_by(&w.info))
        {
            let hint = match requirement {
                Requirement::Kind(WorkerKind::Llm | WorkerKind::Agent) => {
                    " (a worker hosts it with a model provider: OPENAI_BASE_URL, or \
                     [providers.NAME] in its --config)"
                }
                Requirement::Kind(WorkerKind::Function) => PYTHON_HINT,
                _ => "",
            };
            let what = format!("node '{}' needs {requirement}{hint}", node.id);
            warnings.push(Gap {
                warning: format!(
                    "warning: {what}, which no connected worker hosts yet; it will wait for one"
                ),
                what,
            });
        }
    }
    python_gaps(plan, workers, &mut warnings);
    // A loop's `until` sentence is judged by a worker's model.
    let judge = Requirement::Kind(WorkerKind::Llm);
    if !workers
        .iter()
        .any(|w| !w.draining && judge.hosted_by(&w.info))
    {
        for node in &plan.graph().nodes {
            if let crate::graph::NodeKind::Loop(config) = &node.kind
                && let crate::graph::Until::Sentence(sentence) = &config.until
            {
                let what = format!(
                    "loop node '{}' needs a worker with a model provider to judge until '{sentence}'",
                    node.id
                );
                warnings.push(Gap {
                    warning: format!("warning: {what}; none is connected yet, so it will wait"),
                    what,
                });
            }
        }
    }
    let ever: Vec<&str> = fleet.functions_ever.iter().map(String::as_str).collect();
    for (name, used_by) in plan.graph().hosted_functions() {
        if workers.iter().any(|w| w.info.functions.contains(&name)) {
            continue;
        }
        // A name no worker has ever announced may be a typo.
        let hint = (!ever.contains(&name.as_str()))
            .then(|| crate::graph::did_you_mean(&name, &ever))
            .flatten()
            .map(|close| format!(" (did you mean fn:{close}?)"))
            .unwrap_or_default();
        warnings.push(Gap {
            warning: format!(
                "warning: fn:{name} ({used_by}) is not hosted by any connected worker yet{hint}; the run will wait for one"
            ),
            what: format!("fn:{name} ({used_by}) needs a worker-hosted function{hint}"),
        });
    }
    warnings
}

/// Python reducers, conditions, routers and `until`s (function nodes are
/// tasks, checked with the other nodes) need a worker with Python.
fn python_gaps(plan: &RunPlan, workers: &[crate::dispatch::WorkerStatus], gaps: &mut Vec<Gap>) {
    if workers
        .iter()
        .any(|w| !w.draining && Requirement::Python.hosted_by(&w.info))
    {
        return;
    }
    for (function, used_by) in plan.graph().python_calls() {
        let what = format!("{} ({used_by}) needs Python{PYTHON_HINT}", function.label());
        gaps.push(Gap {
            warning: format!("warning: {what}; no connected worker has it yet, so it will wait"),
            what,
        });
    }
}

/// The loops whose `until: fn:NAME` no connected worker hosts, as
/// refusals.
fn unhosted_untils(plan: &RunPlan, fleet: &crate::dispatch::Fleet) -> Vec<String> {
    plan.graph()
        .nodes
        .iter()
        .filter_map(|node| match &node.kind {
            crate::graph::NodeKind::Loop(config) => match &config.until {
                crate::graph::Until::Hosted(crate::graph::Code::Rust(name)) => Some((node, name)),
                _ => None,
            },
            _ => None,
        })
        .filter(|(_, name)| {
            !fleet
                .workers
                .iter()
                .any(|w| !w.draining && w.info.functions.contains(*name))
        })
        .map(|(node, name)| {
            format!(
                "loop node '{}': until fn:{name} is hosted by no connected worker; a loop's worker-hosted \
                 until must be hosted when the run is submitted (start a worker that registers '{name}')",
                node.id
            )
        })
        .collect()
}

/// Something a graph needs that no connected worker hosts.
struct Gap {
    /// What is needed, e.g. "node 'draft' needs handler 'draft'".
    what: String,
    /// The submission warning on a cluster workers may still join.
    warning: String,
}

fn parse_input(text: &str) -> Result<Map<String, Value>, SubmitError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(SubmitError::Input(format!(
            "the input must be a JSON object, got {}",
            crate::graph::json_type_name(&other)
        ))),
        Err(error) => Err(SubmitError::Input(format!(
            "the input is not JSON: {error} (line {}, column {})",
            error.line(),
            error.column()
        ))),
    }
}

/// The bundle's files as workers fetch them (the graph file aside).
fn bundle_refs(bundle: &Bundle) -> Vec<BlobRef> {
    bundle
        .files
        .iter()
        .filter(|(path, _)| **path != bundle.graph_path)
        .map(|(path, file)| BlobRef {
            path: path.clone(),
            sha256: file.sha256.clone(),
            mode: file.mode,
        })
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
