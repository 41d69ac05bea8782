//! What a caller may see and do with a leader's runs: the one domain
//! facade under both front doors.
//!
//! The gRPC run service (`grpc::run_service`) and the HTTP API (`http`)
//! both come here, with the caller their own edge admitted and requests
//! in domain terms: a run is found only if the caller's namespace sees it
//! (another namespace's run is as unknown as one that does not exist, and
//! counted alike), and answers come back as [`RunReport`]s and
//! [`StoredEvent`]s, which each door converts once, to protobuf or to
//! JSON. A standby coordinator has no runs: its doors forward to the
//! leader (`grpc::serve_or_forward`), whose facade this is.

mod report;
mod watch;

pub use report::{RunReport, Shown, WaitingNode};
pub use watch::{EventFeed, EventTypes};
pub use weft_proto::events::StoredEvent;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::Identity;
use crate::bundle::Bundle;
use crate::graph::{Finding, Priority};
use crate::run_actor::{Caller, HumanAnswer, Owner, RunHandle, RunRequestError};
use crate::runs::{DeleteError, Runs, SubmitError};
use crate::term::Services;

/// Why a caller's request of a run was not done.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// No run of that id that the caller may see.
    #[error("unknown run '{0}'")]
    UnknownRun(String),
    /// The run refused the request, or could not answer it.
    #[error(transparent)]
    Request(#[from] RunRequestError),
    /// The run has not ended, so it cannot be deleted.
    #[error(transparent)]
    NotEnded(DeleteError),
    /// The run's history cannot be read, or has no such wave.
    #[error(transparent)]
    History(#[from] crate::durable::history::HistoryError),
    /// The coordinator keeps no history: it has no store.
    #[error("this coordinator keeps no run history: it runs without a store")]
    NoHistory,
    /// A fork was refused.
    #[error(transparent)]
    Fork(#[from] SubmitError),
}

impl From<DeleteError> for AccessError {
    fn from(error: DeleteError) -> Self {
        match error {
            DeleteError::Unknown(id) => Self::UnknownRun(id),
            not_ended @ DeleteError::NotEnded(_) => Self::NotEnded(not_ended),
        }
    }
}

/// A leader's runs as its callers reach them.
#[derive(Clone)]
pub struct RunAccess {
    runs: Runs,
    max_bundle_bytes: usize,
    /// Where watches' feeds run; they end with the term.
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl RunAccess {
    /// A term's runs; watches end with the term (the caller then asks
    /// again, of the next leader).
    pub fn new(term: &Services) -> Self {
        Self {
            runs: term.runs.clone(),
            max_bundle_bytes: term.max_bundle_bytes,
            tracker: term.tracker.clone(),
            stop: term.ended.clone(),
        }
    }

    /// Access to `runs`; watches' feeds run on `tracker` and end with
    /// `stop` (a partition's, in a partitioned group).
    pub fn over(
        runs: Runs,
        max_bundle_bytes: usize,
        tracker: TaskTracker,
        stop: CancellationToken,
    ) -> Self {
        Self {
            runs,
            max_bundle_bytes,
            tracker,
            stop,
        }
    }

    /// The largest bundle a submission may carry.
    pub fn max_bundle_bytes(&self) -> usize {
        self.max_bundle_bytes
    }

    /// Run `id`, if `caller` may see it.
    fn run(&self, caller: &Identity, id: &str) -> Result<RunHandle, AccessError> {
        // Counted alike whether the run is another namespace's or none at
        // all: the metric must not tell which.
        match self.runs.get(id) {
            Some(handle) if caller.sees(handle.namespace()) => Ok(handle),
            _ => {
                crate::auth::layer::refused("unknown_run");
                Err(AccessError::UnknownRun(id.to_owned()))
            }
        }
    }

    /// Starts a run of `bundle` with `input_json` in `caller`'s namespace;
    /// its id and the warnings to show.
    pub async fn submit(
        &self,
        caller: &Identity,
        bundle: Bundle,
        input_json: &str,
        references: &[crate::runs::InputReference],
        priority: Option<Priority>,
        no_cache: bool,
    ) -> Result<crate::runs::Accepted, SubmitError> {
        let owner = Owner {
            namespace: caller.namespace.clone(),
            submitted_by: caller.name.clone(),
            priority,
            budgets: Vec::new(),
            no_cache,
        };
        self.runs
            .submit_with(bundle, input_json, references, owner)
            .await
    }

    /// Starts a fork of run `id` after its wave `at` (the last kept when
    /// `None`) with `set` replacing fields of its state, as `caller`, in
    /// the original's namespace; the fork and the wave it was taken after.
    pub async fn fork(
        &self,
        caller: &Identity,
        id: &str,
        at: Option<weft_proto::events::HistoryPoint>,
        set: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(crate::runs::Accepted, weft_proto::events::HistoryPoint), AccessError> {
        let original = self.run(caller, id)?;
        let owner = Owner {
            namespace: original.namespace().to_owned(),
            submitted_by: caller.name.clone(),
            priority: None,
            budgets: Vec::new(),
            no_cache: false,
        };
        Ok(self
            .runs
            .fork(original.id(), at, set, owner, self.max_bundle_bytes)
            .await?)
    }

    /// What validation finds in `bundle`'s graph.
    pub fn validate(&self, bundle: &Bundle) -> Result<Vec<Finding>, SubmitError> {
        Ok(bundle.findings()?)
    }

    /// Run `id` as `caller` sees it, showing `shown`.
    pub async fn report(
        &self,
        caller: &Identity,
        id: &str,
        shown: Shown,
    ) -> Result<RunReport, AccessError> {
        self.report_to_keeper(caller, id, shown, &[]).await
    }

    /// As [`Self::report`], for a caller that kept the fields `kept` of the
    /// run's input: those the run still has exactly as its input gave them
    /// are `null` in the state and named in the report's `input_fields`,
    /// not written (nor read from the store) to be sent back.
    pub async fn report_to_keeper(
        &self,
        caller: &Identity,
        id: &str,
        shown: Shown,
        kept: &[String],
    ) -> Result<RunReport, AccessError> {
        let run = self.run(caller, id)?;
        // An ended run's large fields are shown as the store holds them,
        // not parsed back into its view to be written again.
        if let Some(record) = run
            .finished()
            .filter(|r| shown.state && r.leaves_out_fields())
        {
            let input_fields = record.view.input_fields(kept);
            let state_json = record.state_json(&input_fields).await?;
            let summary = Shown {
                state: false,
                ..shown
            };
            let mut report = RunReport::of(record.view.clone(), summary);
            report.state_json = Some(state_json);
            report.input_fields = input_fields;
            return Ok(report);
        }
        let view = match shown.state {
            true => run.get().await?,
            false => run.summary().await?,
        };
        Ok(RunReport::leaving_out(view, shown, kept))
    }

    /// Up to `limit` of the runs `caller` sees, newest first, after run
    /// `after` (or from the newest), without their state; and the `after`
    /// of the next page when there is one.
    pub async fn page(
        &self,
        caller: &Identity,
        limit: usize,
        after: Option<&str>,
    ) -> Result<(Vec<RunReport>, Option<String>), AccessError> {
        let visible = |handle: &RunHandle| caller.sees(handle.namespace());
        let (handles, more) = self.runs.page(limit, after, visible).await;
        let mut runs = Vec::with_capacity(handles.len());
        for handle in &handles {
            runs.push(RunReport::of(handle.summary().await?, Shown::SUMMARY));
        }
        let next = more
            .then(|| runs.last().map(|last| last.run_id.to_string()))
            .flatten();
        Ok((runs, next))
    }

    /// Run `id`'s events from position `from`, live until the run ends.
    pub async fn watch(
        &self,
        caller: &Identity,
        id: &str,
        from: u64,
    ) -> Result<EventFeed, AccessError> {
        let handle = self.run(caller, id)?;
        Ok(watch::feed(handle, from, &self.tracker, self.stop.clone()).await?)
    }

    /// The waves run `id`'s history keeps, and its state after wave `at`
    /// (the last kept when `None`).
    pub async fn history(
        &self,
        caller: &Identity,
        id: &str,
        at: Option<weft_proto::events::HistoryPoint>,
    ) -> Result<crate::durable::history::AtWave, AccessError> {
        let handle = self.run(caller, id)?;
        let keeper = self.runs.keeper().ok_or(AccessError::NoHistory)?;
        Ok(crate::durable::history::at(keeper.store(), handle.id(), at).await?)
    }

    /// The model output of run `id`'s steps from offset `from`, live
    /// until the run ends (SPEC 19).
    pub fn stream(
        &self,
        caller: &Identity,
        id: &str,
        from: u64,
    ) -> Result<watch::PieceFeed, AccessError> {
        let handle = self.run(caller, id)?;
        Ok(watch::pieces(
            handle.streams().clone(),
            from,
            self.stop.clone(),
        ))
    }

    /// Answers the waiting approval or input `node` of run `id` with
    /// `value` (and `comment`), as `caller`; the run after.
    pub async fn answer(
        &self,
        caller: &Identity,
        id: &str,
        node: String,
        value: Value,
        comment: Option<String>,
    ) -> Result<RunReport, AccessError> {
        let by = Some(Caller {
            name: caller.name.clone(),
            role: caller.role.as_str().to_owned(),
        });
        let answer = HumanAnswer { value, comment, by };
        let handle = self.run(caller, id)?;
        let view = self.runs.answer(&handle, node, answer).await?;
        Ok(RunReport::of(view, Shown::STATE))
    }

    /// Cancels run `id`, as `caller`; the run after.
    pub async fn cancel(&self, caller: &Identity, id: &str) -> Result<RunReport, AccessError> {
        let view = self
            .run(caller, id)?
            .cancel(Some(caller.name.clone()))
            .await?;
        Ok(RunReport::of(view, Shown::STATE))
    }

    /// Retries failed run `id`, as `caller`; the run after.
    pub async fn retry(&self, caller: &Identity, id: &str) -> Result<RunReport, AccessError> {
        let run = self.run(caller, id)?;
        let view = self.runs.retry(&run, Some(caller.name.clone())).await?;
        Ok(RunReport::of(view, Shown::STATE))
    }

    /// Removes ended run `id`, its record and events.
    pub async fn delete(&self, caller: &Identity, id: &str) -> Result<(), AccessError> {
        self.run(caller, id)?;
        Ok(self.runs.delete(id).await?)
    }
}
