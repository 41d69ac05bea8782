//! A task as the worker receives it, and how an attempt fails.

use std::time::Duration;

/// A bundle file a task needs in its scratch directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobFile {
    /// Relative path.
    pub path: String,
    /// Content hash.
    pub sha256: String,
    /// Unix permission bits.
    pub mode: u32,
}

/// One task attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The run.
    pub run_id: String,
    /// The attempt's key within the run.
    pub key: u64,
    /// The node.
    pub node: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The node's kind.
    pub kind: String,
    /// The kind's fields, as JSON.
    pub config_json: String,
    /// The state, as JSON.
    pub state_json: String,
    /// The scope, as JSON.
    pub scope_json: String,
    /// The map item's index, for a chain step.
    pub item: Option<u64>,
    /// Per-attempt deadline.
    pub timeout: Duration,
    /// Bundle files.
    pub bundle: Vec<BlobFile>,
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A short class: `script_failed`, `handler_error`, `timeout`, ….
    pub kind: String,
    /// What happened.
    pub message: String,
}

impl Failure {
    /// A failure of class `kind`.
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.to_owned(),
            message: message.into(),
        }
    }
}
