//! Poison runs: a run whose steps keep killing the coordinator is failed
//! with `Quarantined` instead of being evaluated again (SPEC 11).
//!
//! Expressions are bounded, but a run may still meet a crash nobody has
//! found yet; after a restart it is recovered, stepped again, and takes
//! the coordinator down again, in a loop that stops every other run with
//! it. So each step of a run is marked while it runs (the run actor's
//! [`StepMarks`](crate::run_actor::StepMarks)). A coordinator that finds
//! marks at its start died while stepping those runs: each is charged one
//! crash in the store (`runs/<id>/crashes`, shared by a group of
//! coordinators), and recovery fails a run with two. A run charged once is
//! a suspect, whose steps run alone.

use weft_proto::RunId;
use weft_store::{AnyStore, Store, StoreError};

/// Crashes after which a run is quarantined.
pub const QUARANTINE_AFTER: u32 = 2;

/// Where a run's crash count lives.
pub fn crashes_key(id: &str) -> String {
    format!("runs/{id}/crashes")
}

/// Charges each of `runs` one crash in the store; returns the new counts.
pub async fn charge(store: &AnyStore, runs: &[RunId]) -> Result<Vec<(RunId, u32)>, StoreError> {
    let mut charged = Vec::with_capacity(runs.len());
    for run in runs {
        // A run deleted since has no record left to charge.
        let record = crate::durable::keys::record_key(run.as_str());
        if store.get(&record).await?.is_none() {
            continue;
        }
        let count = crashes(store, run).await? + 1;
        store
            .put(
                &crashes_key(run.as_str()),
                count.to_string().into_bytes(),
                None,
            )
            .await?;
        tracing::error!(
            run = %run,
            crashes = count,
            "the coordinator stopped while stepping this run{}",
            if count >= QUARANTINE_AFTER {
                "; it is quarantined"
            } else {
                "; its steps now run alone, and it is quarantined if it happens again"
            }
        );
        charged.push((run.clone(), count));
    }
    Ok(charged)
}

/// How many crashes a run is charged with.
pub async fn crashes(store: &AnyStore, run: &RunId) -> Result<u32, StoreError> {
    Ok(store
        .get(&crashes_key(run.as_str()))
        .await?
        .and_then(|entry| std::str::from_utf8(&entry.value).ok()?.trim().parse().ok())
        .unwrap_or(0))
}
