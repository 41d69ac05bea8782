//! What passes between a run and the dispatcher that runs its tasks on
//! workers: a task attempt's key, the map item it belongs to, how it
//! failed, and the teammate messages and seats of map items. Plain data,
//! shared by the run machine, the dispatcher and the gRPC edge, so none of
//! them reaches into another for it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use weft_proto::types::FailureKind;

pub use weft_proto::TaskKey;

/// Which map item a task belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRef {
    /// The map node's id.
    pub map: String,
    /// The item's position in the list (0-based).
    pub index: usize,
    /// The item's chain step (1-based).
    pub step: u32,
}

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

/// A teammate message (SPEC 5): who sent it and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamMessage {
    /// Its number in its recipient's inbox, by which a step says it read it.
    #[serde(default)]
    pub seq: u64,
    /// The sender's identity (`MAP/INDEX`).
    pub from: String,
    /// The content, any JSON.
    pub content: Value,
}

/// What a flagged step knows of its team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamSeat {
    /// Its own identity.
    pub me: String,
    /// Every member's identity, its own included.
    pub members: Arc<[String]>,
    /// Its inbox, in arrival order.
    pub inbox: Vec<TeamMessage>,
}

/// Why a call of a worker-hosted function (a reducer, condition, router or
/// `until`) failed: the worker's answer, or why no worker gave one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallError(pub String);

impl From<String> for CallError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for CallError {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

/// A teammate message whose content is not JSON: what the parser said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the message is not JSON: {0}")]
pub struct NotJson(pub String);
