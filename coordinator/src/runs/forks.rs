//! Forks (SPEC 20): a new run from another's state after one of its
//! waves, read from the original's history, with fields replaced, on the
//! original's bundle. The original is untouched.

use serde_json::{Map, Value};
use weft_proto::events::ForkedFrom;

use super::admission::{Accepted, Admitted};
use super::{Runs, SubmitError};
use crate::durable::{history, restore};
use crate::run_actor::{Owner, Progress, RunMachine, Start};

impl Runs {
    /// Starts a fork of run `original` after its wave `at` (the last kept
    /// when `None`) with `set` replacing fields of its state, for `owner`.
    /// Each refusal names what is wrong; nothing is started then.
    pub async fn fork(
        &self,
        original: &str,
        at: Option<u32>,
        set: Map<String, Value>,
        owner: Owner,
        max_bundle_bytes: usize,
    ) -> Result<(Accepted, u32), SubmitError> {
        let keeper = self.store.as_ref().ok_or_else(|| {
            SubmitError::Fork(
                "this coordinator keeps no run history: it runs without a store".into(),
            )
        })?;
        self.check_running(&owner.namespace)?;
        self.check_day(&owner.namespace)?;
        let store = keeper.store();
        let wave = history::at(store, original, at)
            .await
            .map_err(|error| match error {
                history::HistoryError::Store(error) => SubmitError::Store(error.into()),
                // The store holds something unreadable: not the caller's
                // mistake.
                history::HistoryError::Corrupt { key, reason, .. } => {
                    SubmitError::Store(weft_store::StoreError::Corrupt { key, reason }.into())
                }
                unknown @ history::HistoryError::UnknownStep { .. } => {
                    SubmitError::Fork(unknown.to_string())
                }
            })?;
        let bundle = restore::stored_bundle(store, original, max_bundle_bytes)
            .await
            .map_err(|error| SubmitError::Store(error.into()))?;
        let parsed = self.parsed.parse(&bundle)?;
        let mut progress: Progress =
            serde_json::from_str(&wave.progress_json).map_err(|error| {
                SubmitError::Fork(format!(
                    "the progress of run {original} after wave {} does not read: {error}",
                    wave.wave.step
                ))
            })?;
        progress.set_state(wave.state);
        let from = ForkedFrom {
            run: original.into(),
            step: wave.wave.step,
        };
        let machine = RunMachine::fork(parsed.plan.clone(), progress, set, owner.clone(), from)
            .map_err(|error| SubmitError::Fork(error.to_string()))?;
        let admitted = Admitted {
            bundle,
            family: parsed.family,
            plan: parsed.plan,
            machine,
            owner,
            warnings: parsed.warnings,
            top_level: true,
        };
        let accepted = self.start_as(admitted, Start::Fork).await?;
        Ok((accepted, wave.wave.step))
    }
}
