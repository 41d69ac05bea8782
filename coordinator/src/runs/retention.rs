//! Ended runs forgotten past the retention (`[retention]`: how many, for
//! how long), in the registry and in the store alike, so a restart does
//! not bring them back.

use weft_proto::RunId;

use weft_store::Store;

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
            inner.by_id.remove(id);
            inner.order.retain(|known| &**known != id);
        }
        self.forget_stored(vec![RunId::from(id.to_owned())]).await;
        Ok(())
    }

    /// Forgotten here, forgotten in the store: a restart does not bring
    /// these runs back.
    async fn forget_stored(&self, gone: Vec<RunId>) {
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
        // Ended runs, oldest first, by namespace.
        let mut ended: std::collections::HashMap<&str, Vec<(RunId, i64)>> =
            std::collections::HashMap::new();
        for id in &inner.order {
            let Some(handle) = inner.by_id.get(id) else {
                continue;
            };
            if let Some(finished) = handle.finished() {
                ended
                    .entry(handle.namespace())
                    .or_default()
                    .push((id.clone(), finished.finished_unix_ms));
            }
        }
        let mut gone: std::collections::HashSet<RunId> = std::collections::HashSet::new();
        for runs in ended.values() {
            let surplus = runs.len().saturating_sub(self.retention.count);
            gone.extend(
                runs.iter()
                    .enumerate()
                    .filter(|(i, (_, at))| *i < surplus || now.saturating_sub(*at) > max_age)
                    .map(|(_, (id, _))| id.clone()),
            );
        }
        drop(ended);
        if !gone.is_empty() {
            inner.order.retain(|id| !gone.contains(id));
            inner.by_id.retain(|id, _| !gone.contains(id));
        }
        inner.counted_at = inner.order.len();
        gone.into_iter().collect()
    }
}
