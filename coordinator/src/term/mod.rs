//! A term: what a leading coordinator serves with, from the moment it
//! leads until it stops leading. A lone coordinator has one term for as
//! long as it runs; in a group, each election won starts one (`crate::ha`)
//! and a lost lease or a failed fence ends it.
//!
//! [`start_term`] restores the runs from the store and starts the
//! dispatcher, all stopped by the term's token; [`Role`] is what the gRPC
//! front serves by: a term's [`Services`] while leading, the leader's URL
//! while standing by.

pub(crate) mod flow_state;
mod lease_clock;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bundle::BlobStore;
use crate::config::CoordinatorConfig;
use crate::dispatch::{DispatcherConfig, DispatcherHandle, Limits, spawn_dispatcher};
use crate::durable::Keeper;
use crate::indexes::SharedIndexes;
use crate::run_actor::StepMarks;
use crate::runs::Runs;
use crate::runs::quarantine;
pub use lease_clock::LeaseClock;

/// What a leading coordinator serves with, for one term.
pub struct Services {
    /// Its runs.
    pub runs: Runs,
    /// Its dispatcher, which workers' streams feed.
    pub dispatcher: DispatcherHandle,
    /// The bundle files workers fetch.
    pub blobs: BlobStore,
    /// The knowledge indexes workers share.
    pub indexes: SharedIndexes,
    /// Largest bundle a submission may carry.
    pub max_bundle_bytes: usize,
    /// Largest task result taken from a worker.
    pub max_result_bytes: usize,
    /// How often workers beat.
    pub heartbeat: Duration,
    /// How long a silent worker keeps its tasks.
    pub worker_timeout: Duration,
    /// Where streams opened during the term run.
    pub tracker: TaskTracker,
    /// Cancelled when the term ends.
    pub ended: CancellationToken,
    /// Its lease in a group; `None` for a lone coordinator.
    pub lease: Option<LeaseClock>,
}

impl Services {
    /// Whether this leader may still serve: false once its lease may have
    /// lapsed (a process paused past its TTL, then woken).
    pub fn current(&self) -> bool {
        self.lease.as_ref().is_none_or(LeaseClock::current)
    }
}

/// What this coordinator is now.
#[derive(Clone)]
pub enum Role {
    /// It leads (a lone coordinator always does).
    Leader(Arc<Services>),
    /// It stands by; the URL of the coordinator that leads, when known.
    Standby(Option<String>),
    /// It is a member of a group whose runs are split into partitions: it
    /// serves the runs of the partitions it leads and forwards the rest.
    Member(Arc<crate::ha::member::Member>),
}

/// Closes `tracker` and waits up to `patience` for its tasks to stop,
/// warning about the ones left (`whose`: what they were, for the log).
pub(crate) async fn wind_down(tracker: &TaskTracker, patience: Duration, whose: &str) {
    tracker.close();
    if tokio::time::timeout(patience, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            left = tracker.len(),
            "some {whose} tasks did not stop in time"
        );
    }
}

/// Starts what a leader serves with: the dispatcher and the runs restored
/// from `keeper`'s store, all stopped by `ended`; `lease` is the term's in
/// a group (a lone coordinator has none).
pub async fn start_term(
    config: &CoordinatorConfig,
    keeper: Keeper,
    lease: Option<LeaseClock>,
    ended: CancellationToken,
    tracker: &TaskTracker,
) -> Result<Services, weft_store::StoreError> {
    // The runs an earlier coordinator died stepping are charged first, so
    // recovery quarantines those charged twice.
    let marks = Arc::new(StepMarks::in_dir(&config.data_dir));
    let crashed = marks.take_crashed();
    if !crashed.is_empty() {
        quarantine::charge(keeper.store(), &crashed).await?;
    }
    let indexes = SharedIndexes::new(keeper.clone(), config.max_index_bytes);
    let keeper_for_cache = keeper.clone();
    let (runs, dispatcher, blobs) = start_runs(config, keeper.clone(), &ended, tracker);
    // Before any run is restored: its steps meet the limits as they were.
    flow_state::restore(&keeper, &dispatcher, runs.day_spend()).await;
    flow_state::spawn_keeper(
        keeper,
        dispatcher.clone(),
        runs.day_spend().clone(),
        ended.clone(),
        tracker,
    );
    // Before any run is restored: its cached steps find what was kept.
    let limits = crate::node_cache::CacheLimits {
        max_bytes: config.max_cache_bytes,
        max_entry_bytes: config.max_cache_entry_bytes,
    };
    let cache =
        crate::node_cache::NodeCache::kept(limits, keeper_for_cache, &ended, tracker).await?;
    let runs = runs.with_marks(marks).with_cache(cache);
    let recovered = runs.recover(config.max_bundle_bytes).await?;
    if recovered > 0 {
        tracing::info!(runs = recovered, "runs restored from the store");
    }
    Ok(Services {
        runs,
        dispatcher,
        blobs,
        indexes,
        max_bundle_bytes: config.max_bundle_bytes,
        max_result_bytes: config.max_result_bytes,
        heartbeat: config.heartbeat_interval,
        worker_timeout: config.worker_timeout,
        tracker: tracker.clone(),
        ended,
        lease,
    })
}

/// The dispatcher and an empty registry of runs kept through `keeper`.
fn start_runs(
    config: &CoordinatorConfig,
    keeper: Keeper,
    ended: &CancellationToken,
    tracker: &TaskTracker,
) -> (Runs, DispatcherHandle, BlobStore) {
    let blobs = BlobStore::default();
    let dispatcher = start_dispatcher(config, ended, tracker);
    let runs = runs_over(config, &dispatcher, &blobs, keeper, ended, tracker);
    (runs, dispatcher, blobs)
}

/// An empty registry of runs kept through `keeper`, their tasks sent
/// through `dispatcher` and their bundles' files served from `blobs`; its
/// runs stop when `ended` is cancelled.
pub fn runs_over(
    config: &CoordinatorConfig,
    dispatcher: &DispatcherHandle,
    blobs: &BlobStore,
    keeper: Keeper,
    ended: &CancellationToken,
    tracker: &TaskTracker,
) -> Runs {
    Runs::new(
        dispatcher.clone(),
        blobs.clone(),
        ended.child_token(),
        tracker.clone(),
        config.runs(),
    )
    .with_store(keeper)
}

/// The dispatcher of `config`, stopped when `ended` is cancelled.
pub fn start_dispatcher(
    config: &CoordinatorConfig,
    ended: &CancellationToken,
    tracker: &TaskTracker,
) -> DispatcherHandle {
    spawn_dispatcher(
        DispatcherConfig {
            heartbeat_interval: config.heartbeat_interval,
            limits: Limits {
                worker_timeout: config.worker_timeout,
                grace: config.task_grace,
                max_losses: config.max_task_losses,
                jam_timeout: config.worker_timeout,
            },
            call_timeout: config.call_timeout,
            rate_limits: config.rate_limits.clone(),
            weights: config.weights(),
            prices: std::sync::Arc::new(config.prices.clone()),
            group: config.partitions > 1 && !config.store.etcd.is_empty(),
        },
        ended.child_token(),
        tracker,
    )
}

#[cfg(test)]
mod tests {
    use weft_store::{AnyStore, EmbeddedStore, Fence, Store, chunks};

    use super::*;
    use crate::bundle::Bundle;

    #[tokio::test]
    async fn a_run_the_store_does_not_take_is_refused_and_never_started() {
        let dir = std::env::temp_dir().join(format!("weft-refused-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = AnyStore::Embedded(EmbeddedStore::open(&dir.join("s.redb")).unwrap());
        let text = b"nodes:\n  a: { kind: script, run: [\"true\"], start: true }\n".to_vec();
        let bundle =
            Bundle::new("g.yaml".into(), [("g.yaml".into(), text, 0o644)], 1 << 20).unwrap();
        // A fence nobody holds: this coordinator was deposed.
        let fence = Fence {
            key: "leader".into(),
            revision: 7,
        };
        let deposed = CancellationToken::new();
        let keeper = Keeper::new(store.clone(), Some(fence), deposed.clone());
        // The graph file is stored already (an earlier run's), so the run's
        // own first record is the submission's only write.
        let sha = &bundle.files["g.yaml"].sha256;
        chunks::put(&store, &keeper.blob_key(sha), b"x", None)
            .await
            .unwrap();
        let (term, tracker) = (CancellationToken::new(), TaskTracker::new());
        let (runs, _, _) = start_runs(&CoordinatorConfig::default(), keeper, &term, &tracker);
        let refused = runs
            .submit(bundle, "{}", crate::run_actor::Owner::default())
            .await;
        assert!(
            matches!(refused, Err(crate::runs::SubmitError::Store(_))),
            "{refused:?}"
        );
        assert!(
            runs.page(10, None, |_| true).await.0.is_empty(),
            "nothing was started"
        );
        assert!(deposed.is_cancelled(), "the fenced write ends the term");
        assert!(store.scan("runs/").await.unwrap().is_empty());
        term.cancel();
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn a_page_goes_on_from_a_run_no_longer_held() {
        let dir = std::env::temp_dir().join(format!("weft-page-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (term, tracker) = (CancellationToken::new(), TaskTracker::new());
        let store = AnyStore::Embedded(EmbeddedStore::open(&dir.join("s.redb")).unwrap());
        let keeper = Keeper::new(store, None, term.clone());
        let (runs, _, _) = start_runs(&CoordinatorConfig::default(), keeper, &term, &tracker);
        let text = b"nodes:\n  a: { kind: script, run: [\"true\"], start: true }\n".to_vec();
        let mut ids = Vec::new();
        for _ in 0..4 {
            let bundle = Bundle::new(
                "g.yaml".into(),
                [("g.yaml".into(), text.clone(), 0o644)],
                1 << 20,
            )
            .unwrap();
            let accepted = runs
                .submit(bundle, "{}", crate::run_actor::Owner::default())
                .await
                .unwrap();
            ids.push(accepted.0.to_string());
        }
        let listed = |page: Vec<crate::run_actor::RunHandle>| -> Vec<String> {
            page.iter().map(|h| h.id().to_string()).collect()
        };
        let (first, more) = runs.page(2, None, |_| true).await;
        assert_eq!(listed(first), [ids[3].clone(), ids[2].clone()]);
        assert!(more);
        // A place between two runs that names none held here: the runs
        // made before it, newest first.
        let between = format!("{}0", ids[2]);
        let (next, more) = runs.page(2, Some(&between), |_| true).await;
        assert_eq!(listed(next), [ids[2].clone(), ids[1].clone()]);
        assert!(more);
        let (last, more) = runs.page(2, Some(&ids[1]), |_| true).await;
        assert_eq!(listed(last), [ids[0].clone()]);
        assert!(!more);
        term.cancel();
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn a_restore_tried_again_adopts_no_run_twice() {
        let dir = std::env::temp_dir().join(format!("weft-restore-twice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = AnyStore::Embedded(EmbeddedStore::open(&dir.join("s.redb")).unwrap());
        let keeper = |ended: &CancellationToken| Keeper::new(store.clone(), None, ended.clone());
        // A run that waits for a worker nobody runs: stored, unfinished.
        let text = b"nodes:\n  a: { kind: script, run: [\"true\"], start: true }\n".to_vec();
        let bundle =
            Bundle::new("g.yaml".into(), [("g.yaml".into(), text, 0o644)], 1 << 20).unwrap();
        let config = CoordinatorConfig::default();
        let (first, tracker) = (CancellationToken::new(), TaskTracker::new());
        let (runs, _, _) = start_runs(&config, keeper(&first), &first, &tracker);
        runs.submit(bundle, "{}", crate::run_actor::Owner::default())
            .await
            .unwrap();
        first.cancel();
        // The next coordinator restores it; a second try (as after a
        // restore that failed part-way) finds it held and leaves it.
        let next = CancellationToken::new();
        let (runs, _, _) = start_runs(&config, keeper(&next), &next, &tracker);
        assert_eq!(runs.recover(1 << 20).await.unwrap(), 1);
        assert_eq!(runs.recover(1 << 20).await.unwrap(), 0);
        assert_eq!(runs.held(), 1);
        next.cancel();
        std::fs::remove_dir_all(dir).ok();
    }
}
