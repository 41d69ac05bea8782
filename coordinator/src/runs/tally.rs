//! Each namespace's runs held, as going and ended: what a retention sweep
//! and a namespace's `max_running_runs` count, without walking every run
//! held.
//!
//! A run ends in its actor, which does not tell the registry; so each
//! namespace keeps the runs it has not yet seen ended, and a count of those
//! it has. Looking (`settle`) moves the runs that have ended since to the
//! count: a walk of the runs still going, not of the ten thousand ended
//! ones a coordinator keeps by default. A run that comes back to life (a
//! retry) is put back among the going as it does. Every run held is in
//! exactly one of the two, which is what keeps the counts exact: a run
//! leaves through [`Tallies::remove`], from whichever holds it.

use std::collections::HashMap;

use weft_proto::RunId;

use crate::run_actor::RunHandle;

/// The runs of every namespace, as going and ended.
#[derive(Default)]
pub(super) struct Tallies {
    by_namespace: HashMap<String, Tally>,
}

#[derive(Default)]
struct Tally {
    /// Runs held that were going when last looked at.
    going: HashMap<RunId, RunHandle>,
    /// How many runs held had ended when last looked at.
    ended: usize,
}

impl Tally {
    /// The runs that have ended since last looked at, counted as ended.
    fn settle(&mut self) {
        let before = self.going.len();
        self.going.retain(|_, run| run.ended_unix_ms().is_none());
        self.ended += before - self.going.len();
    }
}

impl Tallies {
    /// A run newly held (submitted, or restored: a restored run that had
    /// ended is seen ended once its actor has said so).
    pub(super) fn add(&mut self, id: RunId, run: RunHandle) {
        self.by_namespace
            .entry(run.namespace().to_owned())
            .or_default()
            .going
            .insert(id, run);
    }

    /// A run no longer held (forgotten, deleted, or refused at its start).
    pub(super) fn remove(&mut self, id: &str, namespace: &str) {
        let Some(tally) = self.by_namespace.get_mut(namespace) else {
            return;
        };
        if tally.going.remove(id).is_none() {
            tally.ended = tally.ended.saturating_sub(1);
        }
        if tally.going.is_empty() && tally.ended == 0 {
            self.by_namespace.remove(namespace);
        }
    }

    /// A held run that has come back to life (a retry): going again. The
    /// registry's lock is held from before it came back, so no look in
    /// between saw it ended.
    pub(super) fn revived(&mut self, id: &RunId, run: &RunHandle) {
        let Some(tally) = self.by_namespace.get_mut(run.namespace()) else {
            return;
        };
        if !tally.going.contains_key(id) {
            tally.ended = tally.ended.saturating_sub(1);
            tally.going.insert(id.clone(), run.clone());
        }
    }

    /// How many of `namespace`'s runs are going now.
    pub(super) fn going(&mut self, namespace: &str) -> usize {
        self.by_namespace.get_mut(namespace).map_or(0, |tally| {
            tally.settle();
            tally.going.len()
        })
    }

    /// How many runs of each namespace have ended, as of now.
    pub(super) fn ended(&mut self) -> HashMap<&str, usize> {
        self.by_namespace
            .iter_mut()
            .map(|(namespace, tally)| {
                tally.settle();
                (namespace.as_str(), tally.ended)
            })
            .collect()
    }
}
