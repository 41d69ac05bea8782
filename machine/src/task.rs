//! What passes between a run and the dispatcher that runs its tasks on
//! workers: a task attempt's key, the map item it belongs to, how it
//! failed, and the teammate messages and seats of map items. Plain data,
//! shared by the run machine, the dispatcher and the gRPC edge, so none of
//! them reaches into another for it; all but the failure are the worker
//! protocol's own (`weft_proto::worker_protocol`).

use serde::{Deserialize, Serialize};
pub use weft_proto::types::FailureKind;

pub use weft_proto::TaskKey;
/// The protocol's records of a run: written once, for the machine, the
/// dispatcher and both ends of a worker's stream.
pub use weft_proto::worker_protocol::{CallError, ItemRef, NotJson, TeamMessage, TeamSeat};

/// Why a task attempt failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFailure {
    /// Its class.
    pub kind: FailureKind,
    /// The error, with the stderr tail for scripts.
    pub message: String,
    /// The worker that ran the attempt, where known.
    pub worker: Option<String>,
}

impl TaskFailure {
    /// A failure the coordinator found itself (no worker involved).
    pub fn found_by_coordinator(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            worker: None,
        }
    }
}
