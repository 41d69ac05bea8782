//! Runs stored by an earlier coordinator, continued under new actors: a
//! restart of a lone coordinator, or a failover to a new leader.

use std::sync::Arc;

use super::admission::bundle_refs;
use super::{Runs, quarantine};
use crate::bundle::BundleError;
use crate::durable::journal::Journal;
use crate::durable::stream_copy::{self, CopySetup};
use crate::durable::{Keeper, restore};
use crate::run_actor::streams::RunStreams;
use crate::run_actor::{
    History, Progress, ProgressMismatch, RunMachine, RunPlan, RunSetup, Start, spawn_run,
};

/// Why a stored run cannot continue (it is reported and left alone).
#[derive(Debug, thiserror::Error)]
enum NotContinued {
    /// Its bundle or graph no longer loads.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// Its progress does not fit its graph.
    #[error(transparent)]
    Progress(#[from] ProgressMismatch),
}

impl Runs {
    /// Restores every run stored by an earlier coordinator: unfinished ones
    /// continue (what was in flight is sent again), ended ones answer as
    /// before. Returns how many. A run held already is left as it is, so a
    /// restore that failed part-way is tried again without adopting a
    /// run twice.
    pub async fn recover(&self, max_bundle_bytes: usize) -> Result<usize, weft_store::StoreError> {
        let Some(keeper) = self.store.clone() else {
            return Ok(0);
        };
        let wanted = |id: &str| self.serves(id) && self.get(id).is_none();
        let stored = restore::stored_runs(&keeper, max_bundle_bytes, wanted).await?;
        let count = stored.len();
        for run in stored {
            let id = run.id.clone();
            let crashes = quarantine::crashes(keeper.store(), &id).await?;
            if let Err(error) = self.adopt(&keeper, run, crashes) {
                tracing::error!(run = %id, %error, "a stored run cannot continue");
            }
        }
        Ok(count)
    }

    /// Continues one stored run under a new actor.
    fn adopt(
        &self,
        keeper: &Keeper,
        run: restore::StoredRun<Progress>,
        crashes: u32,
    ) -> Result<(), NotContinued> {
        let (graph, _) = run.bundle.load_graph()?;
        let durability = graph.settings.durability;
        let plan = RunPlan::new(Arc::new(graph), self.limits.clone());
        let machine = RunMachine::restore(plan.clone(), run.progress)?;
        // Its history holds the wave it was in (a point within the next one
        // comes after it).
        let kept = Some(machine.waves_merged());
        let family = run.bundle.check_family(plan.graph())?;
        let owner = machine.owner().clone();
        let namespace = owner.namespace.clone();
        let children = self.children_of(&run.id, &plan, &run.bundle, Arc::new(family), owner);
        let journal = Journal::start(
            keeper.clone(),
            run.id.clone(),
            run.head.clone(),
            durability,
            (run.log.len() as u64, kept),
            &self.tracker,
        );
        let files = run.head.files.iter().map(|f| f.sha256.clone()).collect();
        self.stored_files.hold(&run.id, files);
        // Known before what was out is sent again: a worker's calls about
        // the run must find it.
        spawn_run(
            RunSetup {
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
                start: if crashes >= quarantine::QUARANTINE_AFTER {
                    Start::Quarantine { crashes }
                } else {
                    Start::Recover
                },
                journal: Some(journal),
                admitted: None,
                lease: self.blobs.add_bundle(&run.bundle, &namespace),
                children,
                marks: self.marks.clone(),
                prices: self.prices.clone(),
                spend: self.spend.clone(),
                cache: self.cache.clone(),
                streams: RunStreams::taken_over(
                    CopySetup::new(keeper.clone(), run.id.clone(), self.tracker.clone()),
                    stream_copy::restore(&run.id, &run.stream),
                ),
                suspect: crashes > 0,
            },
            |handle| self.register(run.id.clone(), handle.clone()),
        );
        Ok(())
    }
}
