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

    /// When the lease may lapse, as this leader must assume: a TTL after
    /// its last renewal was sent, less a sixth of the TTL, so that a late
    /// timer on a busy machine still stands the leader down before etcd
    /// (which counts from when the renewal arrived) lets the lease go.
    pub fn lapses_at(&self) -> Instant {
        let renewed = *self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        renewed + self.ttl - self.ttl / 6
    }

    /// Whether the lease is surely still held (see [`Self::lapses_at`]).
    pub fn current(&self) -> bool {
        Instant::now() < self.lapses_at()
    }
}
