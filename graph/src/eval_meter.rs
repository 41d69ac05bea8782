//! What one run may spend on evaluating its expressions and templates, all
//! evaluations together.
//!
//! Each evaluation is already bounded on its own ([`super::cel_cost`]'s
//! budgets, a template's fuel), but a loop of ten thousand iterations, each
//! evaluating an `until` just under those budgets, would still keep the
//! coordinator busy for hours on one run. A [`Meter`] is the run's
//! allowance: every evaluation is charged what it was estimated to cost
//! (a CEL expression) or what it read and made (a template), and one that
//! would take the run past its allowance is refused before it runs, with
//! `ExpressionTooCostly` naming the run's figures. The meter's spending is
//! part of the run's checkpoint, so a restart does not refill it.
//!
//! The meter also knows how the process that evaluates wants a heavy
//! evaluation run (one estimated at a mebibyte or a hundred thousand steps
//! and more, up to the per-evaluation budgets): the coordinator hands it
//! a [`HeavyRunner`] that moves the work off its async threads, so a
//! second-long evaluation holds up its own run only, while the many small
//! ones cost nothing extra.

use std::cell::Cell;

use serde::{Deserialize, Serialize};

use super::cel_cost::{Cost, bytes_text};

/// An evaluation refused because it would overdraw its run's allowance:
/// which figure, and by how much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overdrawn(pub(crate) String);

/// Runs the work it is handed, where a heavy evaluation should run.
pub type HeavyRunner = fn(&mut dyn FnMut());

/// An evaluation estimated at this many bytes or more is heavy.
const HEAVY_BYTES: u64 = 1 << 20;
/// An evaluation estimated at this many steps or more is heavy.
const HEAVY_STEPS: u64 = 100_000;

/// A run's allowance for evaluations and what it has spent of it. It is
/// charged through a shared reference, so the run's pure functions that
/// evaluate can be handed it beside the state they borrow.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meter {
    /// Steps and bytes spent so far.
    spent: Cell<Cost>,
    /// The run's allowance; `None`: unmetered (each evaluation still has
    /// its own budget).
    #[serde(skip)]
    limit: Option<Cost>,
    /// Where heavy evaluations run; `None`: in place.
    #[serde(skip)]
    heavy: Option<HeavyRunner>,
}

impl Meter {
    /// A meter that allows `limit` in all and has spent nothing.
    pub fn new(limit: Cost) -> Self {
        Self {
            spent: Cell::new(Cost::default()),
            limit: Some(limit),
            heavy: None,
        }
    }

    /// A meter that charges nothing against a run's allowance.
    pub fn unmetered() -> Self {
        Self::default()
    }

    /// Sets the allowance (a meter restored from a checkpoint has none).
    pub fn set_limit(&mut self, limit: Cost) {
        self.limit = Some(limit);
    }

    /// What has been spent so far.
    pub fn spent(&self) -> Cost {
        self.spent.get()
    }

    /// Sets where heavy evaluations run.
    pub fn set_heavy_runner(&mut self, runner: HeavyRunner) {
        self.heavy = Some(runner);
    }

    /// Runs `work`, an evaluation estimated at `cost`: through the heavy
    /// runner when it is heavy, else in place.
    pub(crate) fn run<T>(&self, cost: Cost, work: impl FnOnce() -> T) -> T {
        let heavy = cost.bytes >= HEAVY_BYTES || cost.steps >= HEAVY_STEPS;
        match self.heavy.filter(|_| heavy) {
            Some(runner) => {
                let mut work = Some(work);
                let mut done = None;
                runner(&mut || done = work.take().map(|work| work()));
                done.expect("the heavy runner runs the work it is handed")
            }
            None => work(),
        }
    }

    /// Charges `cost`, or refuses it when it would take the run past its
    /// allowance (nothing is charged then), saying by how much.
    pub(crate) fn charge(&self, cost: Cost) -> Result<(), Overdrawn> {
        let spent = self.spent.get();
        let after = Cost {
            steps: spent.steps.saturating_add(cost.steps),
            bytes: spent.bytes.saturating_add(cost.bytes),
        };
        if let Some(limit) = self.limit {
            let detail = if after.bytes > limit.bytes {
                Some(format!(
                    "this run's expressions and templates have allocated or read about {} in all, and this one could take about {} more; a run may use at most {} (configuration key max_run_eval_bytes)",
                    bytes_text(spent.bytes),
                    bytes_text(cost.bytes),
                    bytes_text(limit.bytes)
                ))
            } else if after.steps > limit.steps {
                Some(format!(
                    "this run's expressions and templates have taken about {} steps in all, and this one could take about {} more; a run may take at most {} (configuration key max_run_eval_steps)",
                    spent.steps, cost.steps, limit.steps
                ))
            } else {
                None
            };
            if let Some(detail) = detail {
                return Err(Overdrawn(detail));
            }
        }
        self.spent.set(after);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_past_the_allowance_is_refused_and_not_counted() {
        let meter = Meter::new(Cost {
            steps: 100,
            bytes: 1000,
        });
        let cost = Cost {
            steps: 40,
            bytes: 400,
        };
        meter.charge(cost).unwrap();
        meter.charge(cost).unwrap();
        let Overdrawn(text) = meter.charge(cost).unwrap_err();
        assert!(text.contains("a run may use at most 1000 bytes"), "{text}");
        assert!(text.contains("max_run_eval_bytes"), "{text}");
        assert_eq!(
            meter.spent(),
            Cost {
                steps: 80,
                bytes: 800
            },
            "a refused evaluation costs nothing"
        );
        // What remains can still be spent.
        meter
            .charge(Cost {
                steps: 20,
                bytes: 200,
            })
            .unwrap();
    }

    #[test]
    fn steps_have_their_own_allowance() {
        let meter = Meter::new(Cost {
            steps: 10,
            bytes: u64::MAX,
        });
        let refused = meter
            .charge(Cost {
                steps: 11,
                bytes: 0,
            })
            .unwrap_err();
        assert!(refused.0.contains("max_run_eval_steps"), "{refused:?}");
    }

    #[test]
    fn spending_survives_a_checkpoint_and_the_limit_is_set_again() {
        let meter = Meter::new(Cost {
            steps: 10,
            bytes: 10,
        });
        meter.charge(Cost { steps: 6, bytes: 6 }).unwrap();
        let json = serde_json::to_string(&meter).unwrap();
        let mut restored: Meter = serde_json::from_str(&json).unwrap();
        restored.set_limit(Cost {
            steps: 10,
            bytes: 10,
        });
        assert_eq!(restored.spent(), meter.spent());
        assert!(restored.charge(Cost { steps: 6, bytes: 6 }).is_err());
        let unmetered = Meter::unmetered();
        unmetered
            .charge(Cost {
                steps: u64::MAX,
                bytes: u64::MAX,
            })
            .unwrap();
    }

    #[test]
    fn heavy_evaluations_go_through_the_runner_and_light_ones_stay() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static HANDED: AtomicUsize = AtomicUsize::new(0);
        fn runner(work: &mut dyn FnMut()) {
            HANDED.fetch_add(1, Ordering::SeqCst);
            work();
        }
        let mut meter = Meter::unmetered();
        let light = Cost {
            steps: 10,
            bytes: 100,
        };
        let heavy = Cost {
            steps: 10,
            bytes: HEAVY_BYTES,
        };
        assert_eq!(meter.run(heavy, || 1), 1, "no runner: in place");
        meter.set_heavy_runner(runner);
        assert_eq!(meter.run(light, || 2), 2);
        assert_eq!(HANDED.load(Ordering::SeqCst), 0, "light work stays");
        assert_eq!(meter.run(heavy, || 3), 3);
        assert_eq!(
            HANDED.load(Ordering::SeqCst),
            1,
            "heavy work is handed over"
        );
    }
}
