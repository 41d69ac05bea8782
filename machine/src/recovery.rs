//! Continuing a restored run in a new process (SPEC 9): whatever the old
//! process had sent out is gone with its dispatcher and timers, so it is
//! sent again — tasks in flight under their own keys and attempts (a late
//! result of the first sending is the same attempt, accepted once), retries
//! that were waiting for their timer at once, and the worker-hosted calls
//! a merge, a routing or a loop's `until` was waiting for.

use std::time::Duration;

use super::events::*;
use super::wave::{Member, Phase};
use super::*;

impl RunMachine {
    /// The effects that pick a restored run up where it stopped: its next
    /// wave if none was running, else what was out; nothing for a run that
    /// has ended or waits only for a person.
    pub fn resume(&mut self) -> Vec<Effect> {
        self.pick_up(Vec::new(), true)
    }

    /// After `fx`, the effects that pick the run up where its progress
    /// stands (see [`RunMachine::resume`]); each task sent again is told
    /// as such when `told`.
    pub(crate) fn pick_up(&mut self, mut fx: Vec<Effect>, told: bool) -> Vec<Effect> {
        if self.run.status.is_terminal() {
            return fx;
        }
        if self.run.wave.is_none() {
            // Stored before its first wave (or between waves): start the
            // next one.
            self.advance(&mut fx);
            return fx;
        }
        let (in_flight, parked) = self.run.tasks.outstanding();
        for mut spec in in_flight {
            // A flagged step gets every message handed to it so far, those
            // delivered while it ran included.
            if spec.team.is_some()
                && let Some(item) = spec.item.clone()
            {
                Arc::make_mut(&mut spec).team = self.reseat(&item, spec.key);
            }
            if told {
                fx.push(Effect::Emit(RunEvent::TaskRedispatched {
                    node: spec.node.clone(),
                    attempt: spec.attempt,
                    item: self.run.tasks.get(spec.key).and_then(|t| t.item),
                    reason: Redispatch::CoordinatorRestarted,
                    worker: None,
                }));
            }
            fx.push(Effect::Dispatch(spec));
        }
        fx.extend(parked.into_iter().map(|key| Effect::ScheduleRetry {
            key,
            delay: Duration::ZERO,
        }));
        self.pump(&mut fx);
        self.reissue_calls(&mut fx);
        self.resume_children(&mut fx);
        fx
    }

    /// The worker-hosted reducers and predicates the wave still waits for.
    fn reissue_calls(&self, fx: &mut Vec<Effect>) {
        let Some(wave) = &self.run.wave else { return };
        // Loops whose body ended, waiting for their `until`.
        for (_, slot) in wave.iter() {
            if let Member::Mapping(run) = slot
                && let Some((call, judge, iteration)) = run.pending_judgement(&self.plan)
            {
                fx.push(Effect::CallUntil {
                    call,
                    judge,
                    iteration,
                });
            }
        }
        match &wave.phase {
            Phase::Running => {}
            Phase::Merging { outcome, pending } => {
                let mut calls: Vec<_> = pending.iter().collect();
                calls.sort_unstable_by_key(|(call, _)| **call);
                for (&call, field) in calls {
                    let Some(reduction) = outcome.hosted.iter().find(|r| &r.field == field) else {
                        continue;
                    };
                    fx.push(Effect::CallReducer {
                        call,
                        code: self.plan.hosted_reducer(reduction),
                        field: field.clone(),
                        s0_value: reduction.s0_value.clone(),
                        branch_values: reduction.branch_values.clone(),
                    });
                }
            }
            Phase::Routing { view, pending, .. } => {
                let mut calls: Vec<_> = pending.iter().collect();
                calls.sort_unstable_by_key(|(call, _)| **call);
                for (&call, &query) in calls {
                    fx.push(Effect::CallPredicate {
                        call,
                        code: self.plan.query_function(query),
                        state: view.clone(),
                    });
                }
            }
        }
    }
}
