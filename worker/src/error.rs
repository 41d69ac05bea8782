//! Why a worker stops with an error.

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The coordinator refused this worker (a protocol version, an
    /// identity or a role), with its status.
    #[error("the coordinator refused this worker: {}", .0.message())]
    Refused(Box<tonic::Status>),
    /// The coordinator URL is malformed.
    #[error("invalid coordinator URL '{url}': {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// Graphs' code cannot be confined as the configuration asks.
    #[error(transparent)]
    Unconfinable(#[from] crate::confinement::Unconfinable),
    /// The work directory cannot be prepared.
    #[error("cannot prepare the work directory: {0}")]
    WorkDir(#[from] std::io::Error),
}
