//! Forks (SPEC 20): a new run from another's state at a place in its
//! history — after one of its waves, or at a point within the next one —
//! with fields replaced, on the original's bundle. The original is
//! untouched.
//!
//! A subgraph node's child run is forked with its parent, consistently:
//! the parent is forked at the last place its history keeps with that
//! child in progress, and the parent's fork takes the child's fork on as
//! its node's child (and so on up to the run of its own). The forks start
//! innermost first, each under an id made beforehand, so every parent's
//! fork finds its child's; the fork asked for is the outermost.

use serde_json::{Map, Value};
use weft_proto::RunId;
use weft_proto::events::{ForkedFrom, HistoryPoint};

use super::admission::{Accepted, Admitted};
use super::{Runs, SubmitError};
use crate::durable::{history, restore};
use crate::run_actor::{Owner, Progress, RunMachine, Start};

/// One run of the family being forked, and where.
struct Original {
    run: RunId,
    progress: Progress,
    at: HistoryPoint,
}

impl Runs {
    /// Starts a fork of run `original` at place `at` of its history (the
    /// last kept when `None`) with `set` replacing fields of its state,
    /// for `owner`; for a child run, its parents' forks too. Each refusal
    /// names what is wrong; nothing is started then. Returns the
    /// outermost fork and the place forked at.
    pub async fn fork(
        &self,
        original: &str,
        at: Option<HistoryPoint>,
        set: Map<String, Value>,
        owner: Owner,
        max_bundle_bytes: usize,
    ) -> Result<(Accepted, HistoryPoint), SubmitError> {
        let ticket = self.admit_new(&owner.namespace).await?;
        let forked = self
            .fork_admitted(original, at, set, owner, max_bundle_bytes)
            .await;
        self.admitted(ticket);
        forked
    }

    /// [`Runs::fork`] once the fork's namespace may have another run.
    async fn fork_admitted(
        &self,
        original: &str,
        at: Option<HistoryPoint>,
        set: Map<String, Value>,
        owner: Owner,
        max_bundle_bytes: usize,
    ) -> Result<(Accepted, HistoryPoint), SubmitError> {
        let keeper = self.store.as_ref().ok_or_else(|| {
            SubmitError::Fork(
                "this coordinator keeps no run history: it runs without a store".into(),
            )
        })?;
        let store = keeper.store();
        let place = history::at(store, original, at)
            .await
            .map_err(history_error)?;
        let asked = place.wave.at;
        let mut family = vec![Original {
            run: original.into(),
            progress: progress_of(original, place)?,
            at: asked,
        }];
        while let Some((child, parent)) = family.last().and_then(|last| {
            let parent = last.progress.parent()?.clone();
            Some((last.run.clone(), parent))
        }) {
            let holds_child = |json: &str| {
                serde_json::from_str::<Progress>(json)
                    .is_ok_and(|progress| progress.children().contains(&child))
            };
            let place = history::last_where(store, &parent, holds_child)
                .await
                .map_err(history_error)?
                .ok_or_else(|| {
                    SubmitError::Fork(format!(
                        "run {child} is a child of run {parent}, whose history keeps no place with it in progress: fork run {parent} instead"
                    ))
                })?;
            let at = place.wave.at;
            family.push(Original {
                progress: progress_of(&parent, place)?,
                run: parent,
                at,
            });
        }
        // Made before any starts: each child's fork names its parent's.
        let ids: Vec<RunId> = family.iter().map(|_| self.new_id()).collect();
        // Every fork made before any starts: a refusal starts nothing.
        let mut set = Some(set);
        let mut forks = Vec::with_capacity(family.len());
        let mut child: Option<RunId> = None;
        for (depth, original) in family.into_iter().enumerate() {
            let run = original.run.clone();
            let adopt = child
                .as_ref()
                .zip(depth.checked_sub(1).map(|below| &ids[below]));
            let parent = ids.get(depth + 1).cloned();
            forks.push(
                self.make_fork(
                    keeper,
                    original,
                    set.take().unwrap_or_default(),
                    owner.clone(),
                    max_bundle_bytes,
                    (parent, adopt),
                )
                .await?,
            );
            child = Some(run);
        }
        let mut accepted = None;
        for (admitted, id) in forks.into_iter().zip(&ids) {
            match self.start_as(admitted, Start::Fork, id.clone()).await {
                Ok(started) => accepted = Some(started),
                Err(error) => {
                    // A parent's fork that cannot start leaves no child
                    // fork running alone.
                    for started in ids.iter().take_while(|started| *started != id) {
                        if let Some(handle) = self.get(started) {
                            let _ = handle.cancel(None).await;
                        }
                    }
                    return Err(error);
                }
            }
        }
        let accepted = accepted.ok_or_else(|| SubmitError::Fork("nothing to fork".into()))?;
        Ok((accepted, asked))
    }

    /// The fork of one run, made but not started: a child of `family.0`
    /// (its parent's fork) when that is set, taking on `family.1.1` as the
    /// fork of its child `family.1.0`.
    async fn make_fork(
        &self,
        keeper: &crate::durable::Keeper,
        original: Original,
        set: Map<String, Value>,
        owner: Owner,
        max_bundle_bytes: usize,
        family: (Option<RunId>, Option<(&RunId, &RunId)>),
    ) -> Result<Admitted, SubmitError> {
        let (parent, child) = family;
        let Original { run, progress, at } = original;
        let bundle = restore::stored_bundle(keeper, &run, max_bundle_bytes)
            .await
            .map_err(|error| SubmitError::Store(error.into()))?;
        let parsed = self.parsed.parse(&bundle)?;
        let from = ForkedFrom {
            run: run.clone(),
            step: at.step,
            point: at.point,
        };
        let mut machine = RunMachine::fork(
            parsed.plan.clone(),
            progress,
            set,
            owner.clone(),
            from,
            child,
        )
        .map_err(|error| SubmitError::Fork(error.to_string()))?;
        machine.set_parent(parent.clone());
        Ok(Admitted {
            bundle,
            family: parsed.family,
            plan: parsed.plan,
            machine,
            owner,
            warnings: parsed.warnings,
            top_level: parent.is_none(),
        })
    }
}

/// The progress of run `id` at a place read from its history.
fn progress_of(id: &str, place: history::AtWave) -> Result<Progress, SubmitError> {
    let mut progress: Progress = serde_json::from_str(&place.progress_json).map_err(|error| {
        SubmitError::Fork(format!(
            "the progress of run {id} at {} does not read: {error}",
            place.wave.at
        ))
    })?;
    progress.set_state(place.state);
    Ok(progress)
}

/// A history that cannot be read as a refusal: a place not kept is the
/// caller's mistake, anything else the store's.
fn history_error(error: history::HistoryError) -> SubmitError {
    match error {
        history::HistoryError::Store(error) => SubmitError::Store(error.into()),
        history::HistoryError::Corrupt { key, reason, .. } => {
            SubmitError::Store(weft_store::StoreError::Corrupt { key, reason }.into())
        }
        unknown @ history::HistoryError::UnknownStep { .. } => {
            SubmitError::Fork(unknown.to_string())
        }
    }
}
