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

/// The state as kept (by a lone leader, or by a partitioned group's flow
/// authority, `crate::ha::flow_authority`).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct FlowState {
    /// The rate limits' windows, by limit name.
    #[serde(default)]
    pub(crate) limits: Windows,
    /// The namespaces' day tallies.
    #[serde(default)]
    pub(crate) days: HashMap<String, Tally>,
}

/// What the last keeper kept, if anything readable.
pub(crate) async fn read(keeper: &Keeper) -> Option<FlowState> {
    match keeper.store().get(KEY).await {
        Ok(Some(entry)) => match serde_json::from_slice(&entry.value) {
            Ok(state) => Some(state),
            Err(error) => {
                tracing::warn!(%error, "the flow-control state kept is unreadable; limits start full");
                None
            }
        },
        Ok(None) => None,
        Err(error) => {
            tracing::warn!(%error, "the flow-control state could not be read; limits start full");
            None
        }
    }
}

/// Keeps `state`, fenced as `keeper`'s writes are.
pub(crate) async fn write(keeper: &Keeper, state: &FlowState) -> Result<(), String> {
    let bytes = serde_json::to_vec(state).map_err(|e| e.to_string())?;
    keeper
        .checked(keeper.store().put(KEY, bytes, keeper.fence()).await)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Gives the dispatcher and the day tallies what the last leader kept.
/// A state that cannot be read is logged and left: limits start full.
pub async fn restore(keeper: &Keeper, dispatcher: &DispatcherHandle, days: &DaySpend) {
    let Some(state) = read(keeper).await else {
        return;
    };
    tracing::info!(
        limits = state.limits.len(),
        namespaces = state.days.len(),
        "flow control starts from the state the last leader kept"
    );
    dispatcher.restore_windows(state.limits);
    days.restore(state.days);
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
            match write(&keeper, &state).await {
                Ok(()) => kept = state,
                Err(error) => {
                    tracing::warn!(%error, "the flow-control state was not kept; trying again")
                }
            }
        }
    });
}
