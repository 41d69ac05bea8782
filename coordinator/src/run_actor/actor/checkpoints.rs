//! A run actor's checkpoints and what watchers see: the machine asks for a
//! checkpoint at every wave, pause and end (and a finished map item, at
//! most every [`ITEM_CHECKPOINTS`]); the actor takes it once the input's
//! effects are done, and publishes events only once a crash can no longer
//! take them back.

use std::time::Instant;

use super::{ITEM_CHECKPOINTS, RunActor};
use crate::durable::journal::{Checkpoint, Journal};

impl RunActor {
    /// Takes the checkpoint the machine asked for, if any (waiting for the
    /// store when the run's durability mode says so), then publishes the
    /// new events: nobody sees what a crash could still take back.
    ///
    /// A finished map item asks for one too, taken at most every
    /// [`ITEM_CHECKPOINTS`] (a timer takes a deferred one), so a crash
    /// re-runs few finished items and a large map does not store its whole
    /// progress once per item.
    pub(super) async fn flush(&mut self) {
        let urgent = std::mem::take(&mut self.checkpoint_due);
        let item_due = self.item_checkpoint && self.last_checkpoint.elapsed() >= ITEM_CHECKPOINTS;
        let mut visible = self.log.len();
        if urgent || item_due {
            let _ = self.take_checkpoint(false).await;
            self.item_checkpoint = false;
        }
        // Events of a checkpoint still deferred wait for it; others (a task
        // waiting for a worker, …) change nothing stored.
        if self
            .journal
            .as_ref()
            .is_some_and(Journal::holds_back_events)
            && self.item_checkpoint
        {
            visible = self.durable;
        }
        self.publish(visible);
    }

    /// Checkpoints the run now (waiting for the store if `wait`, or as its
    /// durability mode says): its progress, its state's changed fields as
    /// workers get them, its new events.
    ///
    /// Returns whether the checkpoint was stored (or is on its way, when
    /// not waited for); `true` without a store.
    pub(super) async fn take_checkpoint(&mut self, wait: bool) -> bool {
        let status = self.machine.status();
        if !self.journal.as_ref().is_some_and(|j| j.wants(status)) {
            return true;
        }
        let Ok(progress_json) = self.machine.progress_json_without_state() else {
            tracing::error!(run = %self.id, "the run's progress does not serialize; no checkpoint");
            return false;
        };
        let fields = self
            .fields
            .committed()
            .map(|(name, version, json)| (name.to_owned(), version, json.clone()))
            .collect();
        let mut stored = true;
        let started = Instant::now();
        if let Some(journal) = &mut self.journal {
            let checkpoint = Checkpoint {
                progress_json,
                fields,
                merged: self.machine.waves_merged(),
            };
            stored = journal
                .checkpoint(status, checkpoint, &self.log, wait)
                .await;
        }
        metrics::histogram!(crate::metrics::CHECKPOINT_SECONDS)
            .record(started.elapsed().as_secs_f64());
        self.last_checkpoint = Instant::now();
        self.durable = self.log.len();
        stored
    }

    /// Lets watchers see the log up to `visible`.
    fn publish(&mut self, visible: usize) {
        for stored in &self.log[self.published.min(visible)..visible] {
            let _ = self.live.send(stored.clone());
        }
        self.published = self.published.max(visible);
    }
}
