//! Runs' budgets (`settings.budget`, SPEC 18): what a run's model calls,
//! its map items' and its subgraph children's included, may spend, checked
//! before each call.
//!
//! A run with a budget registers it when its actor starts; every run
//! registers what it spent before (a restored run's own usage) against the
//! budgets it counts against — its own and its ancestors' (the list its
//! [`crate::run_actor::Owner`] carries). Before a call, its expected tokens
//! (the same estimate the rate limits reserve) and their cost, priced as
//! completion tokens (erring on the side of stopping), are held against
//! each of those budgets: a call that would take one past its figure is
//! refused, and the step fails with `budget_exceeded`, which fails the
//! run. After the call the hold is replaced by what the provider reported.
//! A step that ends with a hold (its call never reported) gives it back.
//!
//! Pure: no clock, no channel.

use foldhash::HashMap;
use std::sync::Arc;

use weft_proto::RunId;
use weft_proto::types::Usage;

use super::BudgetStart;
use super::jobs::JobId;
use crate::graph::RunBudget;
use crate::prices::Prices;

/// Every registered budget and the calls' holds.
#[derive(Debug, Default)]
pub struct Budgets {
    runs: HashMap<RunId, Spend>,
    holds: HashMap<JobId, Hold>,
    prices: Arc<Prices>,
}

/// One budget: its figures and what counts against it.
#[derive(Debug, Default)]
struct Spend {
    /// `None` until its run registers it (a restored child may report
    /// what it spent first).
    limit: Option<RunBudget>,
    tokens: u64,
    cost: f64,
    held_tokens: u64,
    held_cost: f64,
}

/// What a call in flight holds, and against which budgets.
#[derive(Debug)]
struct Hold {
    chain: Arc<[RunId]>,
    tokens: u64,
    cost: f64,
}

impl Budgets {
    /// Budgets whose costs are priced by `prices`.
    pub fn new(prices: Arc<Prices>) -> Self {
        Self {
            prices,
            ..Self::default()
        }
    }

    /// Registers `start`: its own budget, and what it spent before against
    /// each budget of its chain.
    pub fn start(&mut self, start: &BudgetStart) {
        if let Some(own) = start.own {
            self.runs.entry(start.run.clone()).or_default().limit = Some(own);
        }
        for run in start.chain.iter() {
            let spend = self.runs.entry(run.clone()).or_default();
            spend.tokens += start.tokens;
            spend.cost += start.cost;
        }
    }

    /// Drops `run`'s budget (it ended).
    pub fn forget(&mut self, run: &RunId) {
        self.runs.remove(run);
    }

    /// Why a step of `chain` may make no call at all: a budget already
    /// spent.
    pub fn exhausted(&self, chain: &[RunId], step: &str) -> Option<String> {
        chain.iter().find_map(|run| {
            let spend = self.runs.get(run)?;
            let limit = spend.limit?;
            let over_tokens = limit
                .tokens
                .is_some_and(|max| spend.tokens + spend.held_tokens >= max);
            let over_cost = limit
                .cost
                .is_some_and(|max| spend.cost + spend.held_cost >= max);
            (over_tokens || over_cost).then(|| refusal(run, &limit, spend, step, None))
        })
    }

    /// Holds a call of about `tokens` to `model` by `job` (step `step` of
    /// `chain`) against its budgets, or says which it would exceed.
    pub fn hold(
        &mut self,
        job: &JobId,
        chain: &Arc<[RunId]>,
        step: &str,
        tokens: u64,
        model: Option<&str>,
    ) -> Result<(), String> {
        if chain.is_empty() {
            return Ok(());
        }
        let cost = model
            .and_then(|model| {
                self.prices.cost(
                    model,
                    &Usage {
                        completion_tokens: tokens,
                        ..Usage::default()
                    },
                )
            })
            .unwrap_or(0.0);
        for run in chain.iter() {
            let Some(spend) = self.runs.get(run) else {
                continue;
            };
            let Some(limit) = spend.limit else {
                continue;
            };
            let over_tokens = limit
                .tokens
                .is_some_and(|max| spend.tokens + spend.held_tokens + tokens > max);
            let over_cost = limit
                .cost
                .is_some_and(|max| spend.cost + spend.held_cost + cost > max);
            if over_tokens || over_cost {
                return Err(refusal(run, &limit, spend, step, Some((tokens, cost))));
            }
        }
        self.release(job);
        for run in chain.iter() {
            let spend = self.runs.entry(run.clone()).or_default();
            spend.held_tokens += tokens;
            spend.held_cost += cost;
        }
        self.holds.insert(
            job.clone(),
            Hold {
                chain: chain.clone(),
                tokens,
                cost,
            },
        );
        Ok(())
    }

    /// `job`'s call reported `usage` of `model`: its hold is replaced by
    /// what it spent, against every budget of `chain`.
    pub fn settle(&mut self, job: &JobId, chain: &[RunId], model: &str, usage: &Usage) {
        self.release(job);
        let tokens = usage.prompt_tokens + usage.completion_tokens;
        let cost = self.prices.cost(model, usage).unwrap_or(0.0);
        for run in chain {
            if let Some(spend) = self.runs.get_mut(run) {
                spend.tokens += tokens;
                spend.cost += cost;
            }
        }
    }

    /// `job` ended or went back to the queue: its hold is given back.
    pub fn release(&mut self, job: &JobId) {
        let Some(hold) = self.holds.remove(job) else {
            return;
        };
        for run in hold.chain.iter() {
            if let Some(spend) = self.runs.get_mut(run) {
                spend.held_tokens = spend.held_tokens.saturating_sub(hold.tokens);
                spend.held_cost = (spend.held_cost - hold.cost).max(0.0);
            }
        }
    }
}

/// The refusal's text: the budget, what was spent, and by which step.
fn refusal(
    run: &RunId,
    limit: &RunBudget,
    spend: &Spend,
    step: &str,
    next: Option<(u64, f64)>,
) -> String {
    let mut figures = Vec::new();
    if let Some(tokens) = limit.tokens {
        figures.push(format!(
            "{tokens} tokens ({} spent{})",
            spend.tokens,
            held(spend.held_tokens as f64, |n| format!("{n:.0}"))
        ));
    }
    if let Some(cost) = limit.cost {
        figures.push(format!(
            "a cost of {cost} ({:.4} spent{})",
            spend.cost,
            held(spend.held_cost, |n| format!("{n:.4}"))
        ));
    }
    let next = match next {
        Some((tokens, cost)) if cost > 0.0 => {
            format!(
                "its next model call, of about {tokens} tokens costing up to {cost:.4}, would exceed it"
            )
        }
        Some((tokens, _)) => {
            format!("its next model call, of about {tokens} tokens, would exceed it")
        }
        None => "it is spent".to_owned(),
    };
    format!(
        "step '{step}' may not call its model: run {run}'s budget is {}; {next}",
        figures.join(" and ")
    )
}

fn held(amount: f64, show: impl Fn(f64) -> String) -> String {
    if amount > 0.0 {
        format!(", {} held by calls in flight", show(amount))
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::jobs::JobKey;
    use crate::task::TaskKey;

    fn job(key: u64) -> JobId {
        JobId {
            run: RunId::from("child"),
            key: JobKey::Task(TaskKey(key)),
        }
    }

    fn used(prompt: u64, completion: u64) -> Usage {
        Usage {
            calls: 1,
            prompt_tokens: prompt,
            completion_tokens: completion,
            ..Usage::default()
        }
    }

    fn tokens(max: u64) -> Option<RunBudget> {
        Some(RunBudget {
            tokens: Some(max),
            cost: None,
        })
    }

    #[test]
    fn a_childs_calls_count_against_its_ancestors_budget_and_the_crossing_call_is_refused() {
        let mut budgets = Budgets::default();
        let chain: Arc<[RunId]> = vec![RunId::from("root")].into();
        budgets.start(&BudgetStart {
            run: RunId::from("root"),
            own: tokens(1_000),
            chain: chain.clone(),
            tokens: 100,
            cost: 0.0,
        });
        // A child (no budget of its own) counts against the root's.
        budgets.hold(&job(1), &chain, "ask", 400, None).unwrap();
        budgets.settle(&job(1), &chain, "m", &used(300, 200));
        // 600 spent: 400 more just fit …
        budgets.hold(&job(2), &chain, "ask", 400, None).unwrap();
        // … and with those 400 held, another 100 would cross 1,000.
        let refused = budgets.hold(&job(3), &chain, "ask", 100, None).unwrap_err();
        assert!(
            refused.contains("run root's budget is 1000 tokens (600 spent, 400 held"),
            "{refused}"
        );
        assert!(refused.contains("step 'ask'"), "{refused}");
        // A step that ends without reporting gives its hold back.
        budgets.release(&job(2));
        budgets.hold(&job(3), &chain, "ask", 100, None).unwrap();
        budgets.settle(&job(3), &chain, "m", &used(300, 100));
        assert!(
            budgets
                .exhausted(&chain, "ask")
                .unwrap()
                .contains("it is spent")
        );
    }

    #[test]
    fn a_cost_budget_prices_the_next_call_as_completion_tokens() {
        let prices = Prices::new(
            [(
                "gpt".to_owned(),
                crate::prices::Price {
                    input: 1.0,
                    output: 4.0,
                    cached_input: None,
                },
            )]
            .into(),
        )
        .unwrap();
        let mut budgets = Budgets::new(Arc::new(prices));
        let chain: Arc<[RunId]> = vec![RunId::from("root")].into();
        budgets.start(&BudgetStart {
            run: RunId::from("root"),
            own: Some(RunBudget {
                tokens: None,
                cost: Some(0.01),
            }),
            chain: chain.clone(),
            tokens: 0,
            cost: 0.0,
        });
        // 2,000 tokens at 4 per million: 0.008.
        budgets
            .hold(&job(1), &chain, "ask", 2_000, Some("gpt"))
            .unwrap();
        budgets.settle(&job(1), &chain, "gpt", &used(1_000, 1_000));
        // 0.005 spent; 2,000 more would be 0.013.
        let refused = budgets
            .hold(&job(2), &chain, "ask", 2_000, Some("gpt"))
            .unwrap_err();
        assert!(
            refused.contains("a cost of 0.01 (0.0050 spent)"),
            "{refused}"
        );
        // An unpriced model costs nothing the budget can count.
        budgets
            .hold(&job(2), &chain, "ask", 2_000, Some("local"))
            .unwrap();
    }
}
