//! Namespaces' day budgets (`[[namespaces]] tokens_per_day, cost_per_day`,
//! SPEC 18): what each namespace's model calls spent today (UTC), and the
//! refusal of a new run once a day's figure is reached.
//!
//! Run actors add each model call's tokens and cost as they record it;
//! submissions check the tally. Only namespaces with a day budget are
//! tallied. A day's tally starts from nothing at 00:00 UTC. The tallies are
//! kept with the coordinator's store at least once a second
//! ([`DaySpend::snapshot`], [`DaySpend::restore`]), so a new leader starts
//! from what the last one counted. In a partitioned group the group's
//! flow authority counts the days (`crate::dispatch::group_flow`): each
//! member passes on what its calls spend ([`DaySpend::forward_to`]).

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// A namespace's figures for one day.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DayBudget {
    /// Prompt and completion tokens.
    pub tokens: Option<u64>,
    /// Cost by `[prices]`.
    pub cost: Option<f64>,
}

/// What a namespace spent on one day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Days since 1970-01-01 (UTC).
    pub day: i64,
    /// Prompt and completion tokens.
    pub tokens: u64,
    /// Cost.
    pub cost: f64,
}

/// Where a partitioned group's member passes on what its calls spent
/// (to the group's flow authority, which counts the group's days).
pub type Forward = Box<dyn Fn(&str, u64, f64) + Send + Sync>;

/// The tallies of the namespaces that have day budgets.
#[derive(Default)]
pub struct DaySpend {
    budgets: HashMap<String, DayBudget>,
    tallies: Mutex<HashMap<String, Tally>>,
    forward: std::sync::OnceLock<Forward>,
}

impl std::fmt::Debug for DaySpend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaySpend")
            .field("budgets", &self.budgets)
            .field("tallies", &self.tallies)
            .finish_non_exhaustive()
    }
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

impl DaySpend {
    /// Tallies for the namespaces `budgets` names.
    pub fn new(budgets: HashMap<String, DayBudget>) -> Self {
        Self {
            budgets,
            tallies: Mutex::default(),
            forward: std::sync::OnceLock::new(),
        }
    }

    /// What the calls spend is also passed to `forward` (a member of a
    /// partitioned group: the group counts the days). Set once.
    pub fn forward_to(&self, forward: Forward) {
        let _ = self.forward.set(forward);
    }

    /// Whether `namespace` has a day budget.
    pub fn has_budget(&self, namespace: &str) -> bool {
        self.budgets.contains_key(namespace)
    }

    /// Adds a call's `tokens` and `cost` to `namespace`'s day at `now_ms`.
    pub fn add(&self, namespace: &str, tokens: u64, cost: f64, now_ms: i64) {
        if !self.budgets.contains_key(namespace) {
            return;
        }
        if let Some(forward) = self.forward.get() {
            forward(namespace, tokens, cost);
        }
        let day = now_ms.div_euclid(DAY_MS);
        let mut tallies = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let tally = tallies.entry(namespace.to_owned()).or_default();
        if tally.day != day {
            *tally = Tally {
                day,
                ..Tally::default()
            };
        }
        tally.tokens += tokens;
        tally.cost += cost;
    }

    /// Why a new run of `namespace` is refused at `now_ms`: a figure of its
    /// day budget reached.
    pub fn check(&self, namespace: &str, now_ms: i64) -> Result<(), String> {
        let Some(budget) = self.budgets.get(namespace) else {
            return Ok(());
        };
        let day = now_ms.div_euclid(DAY_MS);
        let tally = self
            .tallies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(namespace)
            .copied()
            .filter(|t| t.day == day)
            .unwrap_or_default();
        let reset = "; it starts again at 00:00 UTC";
        if let Some(max) = budget.tokens
            && tally.tokens >= max
        {
            return Err(format!(
                "namespace '{namespace}' has spent {} tokens today, its tokens_per_day is {max}{reset}",
                tally.tokens
            ));
        }
        if let Some(max) = budget.cost
            && tally.cost >= max
        {
            return Err(format!(
                "namespace '{namespace}' has spent {:.4} today, its cost_per_day is {max}{reset}",
                tally.cost
            ));
        }
        Ok(())
    }

    /// The tallies, to store.
    pub fn snapshot(&self) -> HashMap<String, Tally> {
        self.tallies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes stored tallies: each is kept where it counts more than what
    /// this coordinator has counted for the same day (erring on the side
    /// of refusing).
    pub fn restore(&self, stored: HashMap<String, Tally>) {
        let mut tallies = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        for (namespace, kept) in stored {
            if !self.budgets.contains_key(&namespace) {
                continue;
            }
            let tally = tallies.entry(namespace).or_default();
            if kept.day > tally.day
                || (kept.day == tally.day && (kept.tokens > tally.tokens || kept.cost > tally.cost))
            {
                *tally = kept;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOON: i64 = 20_000 * DAY_MS + DAY_MS / 2;

    fn spend() -> DaySpend {
        DaySpend::new(
            [(
                "team-a".to_owned(),
                DayBudget {
                    tokens: Some(1_000),
                    cost: Some(0.5),
                },
            )]
            .into(),
        )
    }

    #[test]
    fn a_namespace_over_its_day_is_refused_until_the_next_day() {
        let spend = spend();
        spend.add("team-a", 600, 0.1, NOON);
        assert!(spend.check("team-a", NOON).is_ok());
        spend.add("team-a", 400, 0.1, NOON + 1);
        let refused = spend.check("team-a", NOON + 2).unwrap_err();
        assert_eq!(
            refused,
            "namespace 'team-a' has spent 1000 tokens today, its tokens_per_day is 1000; it starts again at 00:00 UTC"
        );
        // Another namespace has no budget; tomorrow starts afresh.
        assert!(spend.check("team-b", NOON).is_ok());
        assert!(spend.check("team-a", NOON + DAY_MS / 2).is_ok());
        spend.add("team-a", 10, 0.6, NOON + DAY_MS);
        assert!(
            spend
                .check("team-a", NOON + DAY_MS)
                .unwrap_err()
                .contains("cost_per_day is 0.5")
        );
    }

    #[test]
    fn a_stored_tally_is_taken_where_it_counts_more() {
        let spend = spend();
        spend.add("team-a", 100, 0.0, NOON);
        let stored = [
            (
                "team-a".to_owned(),
                Tally {
                    day: NOON / DAY_MS,
                    tokens: 900,
                    cost: 0.0,
                },
            ),
            ("nobody".to_owned(), Tally::default()),
        ]
        .into();
        spend.restore(stored);
        spend.add("team-a", 100, 0.0, NOON);
        assert!(spend.check("team-a", NOON).is_err());
        assert_eq!(spend.snapshot().len(), 1);
    }
}
