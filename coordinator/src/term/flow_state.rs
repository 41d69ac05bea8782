//! Flow control's state across a failover (SPEC 18): the rate limits'
//! windows and the namespaces' day tallies, kept in the store under
//! [`KEY`] by the leader at most a second after they change, and read by
//! the next leader when its term starts.
//!
//! A new leader starts from them erring on the side of waiting (a window
//! is never taken as fuller than kept, a pause goes on for what was left
//! of it, a day's tally is taken where it counts more). Runs' budgets need
//! nothing here: what a run spent is kept with its checkpoints. A write
//! the store refuses is retried on the next tick; one fenced ends the term
//! as every leader's write does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_store::Store;

use crate::day_spend::{DaySpend, Tally};
use crate::dispatch::{DispatcherHandle, Windows};
use crate::durable::Keeper;

/// Where the state is kept.
pub const KEY: &str = "flow/state";

/// How often the leader keeps it (when it changed).
pub const EVERY: Duration = Duration::from_secs(1);

/// The state as kept.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct FlowState {
    /// The rate limits' windows, by limit name.
    #[serde(default)]
    limits: Windows,
    /// The namespaces' day tallies.
    #[serde(default)]
    days: HashMap<String, Tally>,
}

/// Gives the dispatcher and the day tallies what the last leader kept.
/// A state that cannot be read is logged and left: limits start full.
pub async fn restore(keeper: &Keeper, dispatcher: &DispatcherHandle, days: &DaySpend) {
    let entry = match keeper.store().get(KEY).await {
        Ok(entry) => entry,
        Err(error) => {
            tracing::warn!(%error, "the flow-control state could not be read; limits start full");
            return;
        }
    };
    let Some(entry) = entry else {
        return;
    };
    match serde_json::from_slice::<FlowState>(&entry.value) {
        Ok(state) => {
            tracing::info!(
                limits = state.limits.len(),
                namespaces = state.days.len(),
                "flow control starts from the state the last leader kept"
            );
            dispatcher.restore_windows(state.limits);
            days.restore(state.days);
        }
        Err(error) => {
            tracing::warn!(%error, "the flow-control state kept is unreadable; limits start full")
        }
    }
}

/// Keeps the state every [`EVERY`] while it changes, until `ended`.
pub fn spawn_keeper(
    keeper: Keeper,
    dispatcher: DispatcherHandle,
    days: Arc<DaySpend>,
    ended: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(async move {
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut kept = FlowState::default();
        loop {
            tokio::select! {
                _ = ended.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let state = FlowState {
                limits: dispatcher.windows().await,
                days: days.snapshot(),
            };
            if state == kept {
                continue;
            }
            let Ok(bytes) = serde_json::to_vec(&state) else {
                continue;
            };
            let written = keeper.checked(keeper.store().put(KEY, bytes, keeper.fence()).await);
            match written {
                Ok(_) => kept = state,
                Err(error) => {
                    tracing::warn!(%error, "the flow-control state was not kept; trying again")
                }
            }
        }
    });
}
