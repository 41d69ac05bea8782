//! Leader election on the shared store: a lease-guarded key.
//!
//! A coordinator leads while it holds [`LEADER_KEY`], created only if absent
//! and under a lease it keeps alive; the key's value is its advertised URL.
//! The key's create revision is the term's [`Fence`]: every write of the
//! leader is conditional on it, so a leader that was paused past its lease
//! (and replaced) cannot overwrite its successor's writes when it wakes up.
//! This is etcd's documented election recipe minus the queue of candidates:
//! candidates watch the key and race to create it when it goes.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use weft_store::{AnyStore, Fence, LEADER_KEY, LeaseId, Store, StoreError, WatchEvent};

use crate::term::LeaseClock;

/// Who leads, as a standby sees it.
pub type LeaderUrl = Option<String>;

/// A won election: the fence of the term and the lease that holds it.
#[derive(Debug, Clone)]
pub struct Term {
    /// What every write of this term is conditional on.
    pub fence: Fence,
    /// The lease the leader key lives under.
    pub lease: LeaseId,
}

/// Campaigns until this coordinator leads (`Some`) or `stop` is cancelled
/// (`None`). Meanwhile `announce` is told who leads; never this coordinator
/// itself (`me`), whose old key from before a restart is waited out.
pub async fn campaign(
    store: &AnyStore,
    me: &str,
    ttl: Duration,
    announce: &(impl Fn(LeaderUrl) + Sync),
    stop: &CancellationToken,
) -> Option<Term> {
    let mut pause = Duration::from_millis(100);
    loop {
        match try_to_lead(store, me, ttl, announce, stop).await {
            Ok(Some(term)) => return Some(term),
            Ok(None) => return None,
            Err(error) => {
                tracing::warn!(%error, "the election cannot reach the store; trying again");
                announce(None);
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(ttl);
            }
        }
    }
}

/// One round of campaigning: waits while somebody holds the key, creates
/// it when it is gone. `Ok(None)`: stopped.
async fn try_to_lead(
    store: &AnyStore,
    me: &str,
    ttl: Duration,
    announce: &(impl Fn(LeaderUrl) + Sync),
    stop: &CancellationToken,
) -> Result<Option<Term>, StoreError> {
    // Watching before reading: a deletion between the two is not missed.
    let mut changes = store.watch(LEADER_KEY).await?;
    loop {
        if stop.is_cancelled() {
            return Ok(None);
        }
        match store.get(LEADER_KEY).await? {
            Some(held) => {
                let url = String::from_utf8_lossy(&held.value).into_owned();
                announce((url != me).then_some(url));
                // Also look again now and then, in case the watch broke.
                tokio::select! {
                    () = stop.cancelled() => return Ok(None),
                    () = changed(&mut changes) => {}
                    () = tokio::time::sleep(ttl) => {}
                }
            }
            None => {
                let lease = store.grant_lease(ttl).await?;
                match store
                    .create(LEADER_KEY, me.as_bytes().to_vec(), Some(lease))
                    .await
                {
                    Ok(Some(revision)) => {
                        let fence = Fence {
                            key: LEADER_KEY.to_owned(),
                            revision,
                        };
                        return Ok(Some(Term { fence, lease }));
                    }
                    // Another candidate was quicker.
                    Ok(None) => {
                        let _ = store.revoke(lease).await;
                    }
                    Err(error) => {
                        let _ = store.revoke(lease).await;
                        return Err(error);
                    }
                }
            }
        }
    }
}

/// Returns when the leader key changes; never, once the watch has ended.
async fn changed(changes: &mut mpsc::Receiver<WatchEvent>) {
    match changes.recv().await {
        Some(_) => {}
        None => std::future::pending().await,
    }
}

/// Keeps the term's lease alive until `stop` is cancelled (then gives the
/// key up at once, so a standby takes over without waiting for the lease)
/// or the lease is lost: etcd says it expired, or no renewal went through
/// before the lease may have lapsed ([`LeaseClock::lapses_at`]). Renewals
/// go every sixth of the TTL, so one sent just after etcd lost its own
/// leader still gets through once etcd has elected another (1.6 s for a
/// three-member cluster with a 500 ms election timeout) before a 3 s lease
/// may lapse. Returns whether the term was lost.
pub async fn hold(store: AnyStore, term: Term, clock: LeaseClock, stop: CancellationToken) -> bool {
    let ttl = clock.ttl;
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                if let Err(error) = store.revoke(term.lease).await {
                    tracing::warn!(%error, "the leader lease was not given up; it expires by itself");
                }
                return false;
            }
            () = tokio::time::sleep(ttl / 6) => {}
        }
        // A renewal that hangs (etcd cut off) is given up when the lease
        // may have lapsed: the term ends within its TTL, not when the
        // request's own bound is reached.
        let sent = Instant::now();
        let renewal =
            tokio::time::timeout_at(clock.lapses_at(), store.keep_alive(term.lease)).await;
        match renewal {
            Ok(Ok(true)) => clock.renewed_at(sent),
            Ok(Ok(false)) => {
                tracing::error!("the leader lease expired: another coordinator may lead now");
                return true;
            }
            Err(_elapsed) => {
                tracing::error!(
                    "the leader lease could not be renewed for a whole TTL: no answer from the store"
                );
                return true;
            }
            Ok(Err(error)) if !clock.current() => {
                tracing::error!(%error, "the leader lease could not be renewed for a whole TTL");
                return true;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "renewing the leader lease failed; trying again");
            }
        }
    }
}
