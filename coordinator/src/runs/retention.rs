//! Ended runs forgotten past the retention (`[retention]`: how many, for
//! how long), in the registry and in the store alike, so a restart does
//! not bring them back.

use std::collections::HashMap;

use weft_proto::RunId;

use super::{Runs, now_ms};

/// How often a submission looks for runs past their age (which is counted
/// in hours).
const AGE_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// How long ended runs are kept: the newest `count` of them **in each
/// namespace** (one team's many quick runs never push out another's),
/// each for at most `age` after it ended.
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

/// Why a run was not deleted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    /// No such run (or not one the caller may see).
    #[error("unknown run '{0}'")]
    Unknown(String),
    /// The run has not ended.
    #[error("run '{0}' has not ended: cancel it, or let it end, before deleting it")]
    NotEnded(String),
}

impl Runs {
    /// Forgets ended runs beyond the retention: the oldest first, past
    /// `retain_finished` of them or older than `retain_finished_age`.
    /// `exact`: now, to the run (a listing); otherwise (a submission) only
    /// once the runs held pass the count by a sixty-fourth of it, and by
    /// age once a minute (or a sixty-fourth of the age, if shorter), so a
    /// submission does not walk every run kept.
    pub(super) async fn evict(&self, exact: bool) {
        let gone = self.forget_old(exact);
        self.forget_stored(gone).await;
    }

    /// Removes an ended run and its records (`weft delete`).
    pub async fn delete(&self, id: &str) -> Result<(), DeleteError> {
        {
            let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
            let handle = inner
                .by_id
                .get(id)
                .ok_or_else(|| DeleteError::Unknown(id.to_owned()))?;
            if handle.finished().is_none() {
                return Err(DeleteError::NotEnded(id.to_owned()));
            }
            inner.release(id);
            inner.order.retain(|known| &**known != id);
        }
        self.forget_stored(vec![RunId::from(id.to_owned())]).await;
        Ok(())
    }

    /// Forgotten here, forgotten in the store: a restart does not bring
    /// these runs back. The runs a sweep forgets go in as few store
    /// transactions as the store takes (a run's keys are one prefix).
    async fn forget_stored(&self, gone: Vec<RunId>) {
        let Some(keeper) = &self.store else {
            return;
        };
        if gone.is_empty() {
            return;
        }
        let prefixes: Vec<String> = gone
            .iter()
            .map(|id| crate::durable::keys::run_prefix(id))
            .collect();
        if let Err(error) = keeper.delete_prefixes(&prefixes).await {
            tracing::warn!(runs = gone.len(), %error, "forgotten runs stay in the store");
        }
        let unused: Vec<String> = gone
            .iter()
            .flat_map(|id| self.stored_files.release(id))
            .collect();
        if !unused.is_empty() {
            self.stored_files.delete_unused(keeper, unused).await;
        }
    }

    /// Drops ended runs beyond the retention from the registry; their ids.
    fn forget_old(&self, exact: bool) -> Vec<RunId> {
        let now = now_ms();
        let max_age = i64::try_from(self.retention.age.as_millis()).unwrap_or(i64::MAX);
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let slack = if exact { 0 } else { self.retention.count / 64 };
        // No namespace can be over while all of them together are not; and
        // a walk that found none over is not repeated until more arrive.
        let over = inner.order.len() > self.retention.count + slack
            && inner.order.len() > inner.counted_at + slack;
        // An age of hours is looked at once a minute; a short one (the
        // tests', or none at all) as often as it needs.
        let interval = AGE_SWEEP_INTERVAL.min(self.retention.age / 64);
        let age_due = exact || inner.aged_at.is_none_or(|at| at.elapsed() >= interval);
        if !over && !age_due {
            return Vec::new();
        }
        if age_due {
            inner.aged_at = Some(std::time::Instant::now());
        }
        let inner = &mut *inner;
        let ended = inner.tallies.ended();
        let by_id = &inner.by_id;
        let runs = inner.order.iter().map(|id| {
            let handle = by_id.get(id)?;
            Some((handle.namespace(), handle.ended_unix_ms()?))
        });
        let ended_before = now.saturating_sub(max_age);
        let gone_at = to_forget(runs, ended, self.retention.count, ended_before, age_due);
        let mut gone = Vec::with_capacity(gone_at.len());
        if !gone_at.is_empty() {
            let mut next = gone_at.iter().copied().peekable();
            let mut at = 0;
            inner.order.retain(|id| {
                let goes = next.next_if_eq(&at).is_some();
                if goes {
                    gone.push(id.clone());
                }
                at += 1;
                !goes
            });
            for id in &gone {
                inner.release(id);
            }
        }
        inner.counted_at = inner.order.len();
        gone
    }
}

/// Where in `runs` (every run held, oldest first: its namespace and when
/// it ended, `None` while it runs) are the ended runs a sweep forgets: the
/// oldest of each namespace beyond `count` of them (`ended` counts each
/// namespace's ended runs), and, when `age_due`, those that ended before
/// `ended_before`. In order. A sweep for the count alone stops as soon as
/// it has found its surplus, so it looks only at the oldest runs.
fn to_forget<'a>(
    runs: impl Iterator<Item = Option<(&'a str, i64)>>,
    mut ended: HashMap<&'a str, usize>,
    count: usize,
    ended_before: i64,
    age_due: bool,
) -> Vec<usize> {
    for runs in ended.values_mut() {
        *runs = runs.saturating_sub(count);
    }
    let mut left: usize = ended.values().sum();
    let mut gone = Vec::new();
    for (at, run) in runs.enumerate() {
        if left == 0 && !age_due {
            break;
        }
        let Some((namespace, ended_at)) = run else {
            continue;
        };
        match ended.get_mut(namespace).filter(|surplus| **surplus > 0) {
            Some(surplus) => {
                *surplus -= 1;
                left -= 1;
                gone.push(at);
            }
            None if age_due && ended_at < ended_before => gone.push(at),
            None => {}
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted<'a>(runs: &[Option<(&'a str, i64)>]) -> HashMap<&'a str, usize> {
        let mut ended = HashMap::new();
        for (namespace, _) in runs.iter().flatten() {
            *ended.entry(*namespace).or_default() += 1;
        }
        ended
    }

    #[test]
    fn the_oldest_ended_runs_beyond_the_count_go_in_each_namespace_apart() {
        let runs = [
            Some(("a", 10)),
            None, // still running: never forgotten, however old
            Some(("b", 11)),
            Some(("a", 12)),
            Some(("a", 13)),
            Some(("b", 14)),
            Some(("a", 15)),
        ];
        let gone = to_forget(runs.iter().copied(), counted(&runs), 2, 0, false);
        assert_eq!(gone, [0, 3], "a's two oldest of four; b keeps its two");
        let gone = to_forget(runs.iter().copied(), counted(&runs), 1, 0, false);
        assert_eq!(gone, [0, 2, 3, 4], "a keeps its newest, b its newest");
    }

    #[test]
    fn a_sweep_for_the_count_stops_once_it_found_the_surplus() {
        let mut looked = 0;
        let runs: Vec<_> = (0..1000).map(|i| Some(("a", i))).collect();
        let walk = runs.iter().copied().inspect(|_| looked += 1);
        let gone = to_forget(walk, counted(&runs), 990, 0, false);
        assert_eq!(gone, (0..10).collect::<Vec<_>>());
        assert_eq!(looked, 11, "the walk stopped after the tenth");
    }

    #[test]
    fn runs_past_the_age_go_only_when_the_age_is_looked_at() {
        let runs = [Some(("a", 5)), Some(("a", 50)), None, Some(("b", 7))];
        let gone = to_forget(runs.iter().copied(), counted(&runs), 10, 8, true);
        assert_eq!(gone, [0, 3], "ended before 8, in any namespace");
        let gone = to_forget(runs.iter().copied(), counted(&runs), 10, 8, false);
        assert!(gone.is_empty(), "a count sweep leaves the age alone");
        let gone = to_forget(runs.iter().copied(), counted(&runs), 1, 8, true);
        assert_eq!(gone, [0, 3], "a's surplus is its oldest, already old");
    }
}
