//! Whether a term's lease is surely still held, as the services see it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// When the term's lease was last renewed, shared with the services: a
/// leader that may have outlived its lease (a process paused, then woken)
/// serves nothing until it knows where it stands.
#[derive(Debug, Clone)]
pub struct LeaseClock {
    renewed: Arc<Mutex<Instant>>,
    pub(crate) ttl: Duration,
}

impl LeaseClock {
    /// A clock of a lease of `ttl`, granted just now.
    pub fn new(ttl: Duration) -> Self {
        Self {
            renewed: Arc::new(Mutex::new(Instant::now())),
            ttl,
        }
    }

    /// Records a renewal sent at `at`.
    pub(crate) fn renewed_at(&self, at: Instant) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    /// Whether the lease is surely still held: renewed less than a TTL
    /// ago, counted from before the renewal was sent.
    pub fn current(&self) -> bool {
        self.renewed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            < self.ttl
    }
}
