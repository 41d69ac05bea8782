//! Where a run is — live behind its actor, or ended with its record kept —
//! and how a failed run's actor starts again when `weft retry` revives it
//! ([`revive`]; a new or recovered run's actor starts with `spawn_run`).
//! The commands a handle sends its actor are defined here too.

use std::sync::{Arc, RwLock};

use tokio::sync::{broadcast, mpsc, oneshot};

use super::{COMMAND_BUFFER, FinishedRun, History, RunView, StoredEvent, start_actor};
use crate::run_actor::{Input, Rejected};

/// What a run's handle asks of its actor.
pub(super) enum Command {
    Get(oneshot::Sender<RunView>),
    Watch {
        from: u64,
        reply: oneshot::Sender<(Vec<StoredEvent>, broadcast::Receiver<StoredEvent>)>,
    },
    Act {
        input: Box<Input>,
        reply: oneshot::Sender<Result<RunView, Rejected>>,
    },
}

/// Where a run is: live behind its actor, or ended (its record kept).
pub(super) enum Liveness {
    Live(mpsc::Sender<Command>),
    Finished(Arc<FinishedRun>),
}

/// Starts the actor of the failed run `record` again, from the wave that
/// failed (`weft retry`, asked by `by`); the run is live again once this
/// returns.
pub(super) fn revive(
    record: &FinishedRun,
    liveness: &Arc<RwLock<Liveness>>,
    by: Option<String>,
) -> Result<(), Rejected> {
    let mut setup = record
        .revival
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or(Rejected::NotRetryable(record.view.status))?;
    setup.start = super::Start::Retry { by };
    setup.history = Some(History {
        // A run that may be retried keeps its log in memory.
        log: record.log.held().map(<[_]>::to_vec).unwrap_or_default(),
        created_unix_ms: record.view.created_unix_ms,
    });
    let mut live = liveness.write().unwrap_or_else(|e| e.into_inner());
    let (tx, rx) = command_channel();
    let me = tx.downgrade();
    *live = Liveness::Live(tx);
    // The actor retries as it starts; it cannot leave its record before
    // this lock is released.
    start_actor(setup, (rx, me), liveness.clone());
    Ok(())
}

/// The channel a run's actor takes commands on.
pub(super) fn command_channel() -> (mpsc::Sender<Command>, mpsc::Receiver<Command>) {
    mpsc::channel(COMMAND_BUFFER)
}
