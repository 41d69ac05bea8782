//! High availability: several coordinators on one etcd, one of them
//! leading (SPEC 9).
//!
//! Each coordinator of a group campaigns for the leader key
//! ([`election`]). The winner starts a *term*: it restores every run from
//! the shared store and serves them, every write fenced on the key's create
//! revision. The others stand by: they forward clients' requests to the
//! leader and send workers there (the gRPC front), and take over when the
//! key goes — within about one lease TTL of the leader's death, or at once
//! when it shuts down cleanly and gives the key up. A term ends when the
//! lease is lost (expired while the process was paused, or etcd unreachable
//! for a whole TTL) or a write finds the fence gone; the coordinator then
//! drops what it held in memory and stands by again, so a deposed leader
//! never acts on stale runs.
//!
//! A group configured with more than one partition (`[cluster]
//! partitions`) instead splits its runs: every coordinator is a member
//! ([`serve_as_member`]) that leads a share of the partitions
//! ([`membership`]), serves their runs ([`partition_runs`]) and answers
//! for the rest by forwarding ([`member`]).

pub mod election;
pub mod flow_authority;
pub mod flow_link;
pub mod member;
pub mod membership;
pub mod partition_runs;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_store::AnyStore;

use crate::config::CoordinatorConfig;
use crate::durable::Keeper;
use crate::term::{LeaseClock, Role, start_term};
use election::Term;

/// Takes part in a partitioned group until `shutdown`: leads a share of
/// its partitions and serves their runs, answers for the others (the role
/// is [`Role::Member`] throughout), and on shutdown hands every partition
/// over — drained, checkpointed, released — before it goes. The group's
/// partition count has been checked ([`membership::fix_count`]).
pub async fn serve_as_member(
    store: AnyStore,
    config: CoordinatorConfig,
    partitioning: membership::Partitioning,
    role: watch::Sender<Role>,
    shutdown: CancellationToken,
) -> Result<(), weft_store::StoreError> {
    let tracker = TaskTracker::new();
    let ended = CancellationToken::new();
    let unfenced = Keeper::new(store.clone(), None, ended.clone());
    // Runs an earlier process of this coordinator died stepping are
    // charged first, so that their next restore quarantines them.
    let marks = Arc::new(crate::run_actor::StepMarks::in_dir(&config.data_dir));
    let crashed = marks.take_crashed();
    if !crashed.is_empty() {
        crate::runs::quarantine::charge(&store, &crashed).await?;
    }
    let limits = crate::node_cache::CacheLimits {
        max_bytes: config.max_cache_bytes,
        max_entry_bytes: config.max_cache_entry_bytes,
    };
    let cache =
        crate::node_cache::NodeCache::kept(limits, unfenced.clone(), &ended, &tracker).await?;
    // The other members keep entries in the same store: followed, so an
    // answer kept for a run of one partition answers every partition's.
    cache.follow(store.clone(), &ended, &tracker);
    let group_key = loop {
        match membership::group_key(&store).await {
            Ok(key) => break key,
            Err(membership::GroupError::Store(error)) => {
                tracing::warn!(%error, "the group's key cannot be read yet; trying again");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
            Err(error) => {
                tracing::error!(%error, "the group's key is unusable");
                return Ok(());
            }
        }
    };
    let dispatcher = crate::term::start_dispatcher(&config, &ended, &tracker);
    let blobs = crate::bundle::BlobStore::default();
    let (seen, view) = watch::channel(membership::GroupView::default());
    let authority = flow_authority::AuthoritySlot::new(view.clone(), config.store.lease_ttl);
    let partitions = partition_runs::PartitionRuns::new(
        config.clone(),
        store.clone(),
        partitioning,
        dispatcher.clone(),
        blobs.clone(),
    )
    .with_shared(marks, cache)
    .with_authority(authority.clone());
    let url = config.advertised_url();
    tracker.spawn(flow_link::keep_linked(
        flow_link::Link {
            view: view.clone(),
            dispatcher: dispatcher.clone(),
            key: group_key.clone(),
            peers: config
                .tls
                .as_ref()
                .map(crate::tls::TlsFiles::for_peers)
                .unwrap_or_default(),
            url: url.clone(),
        },
        ended.clone(),
    ));
    role.send_replace(Role::Member(Arc::new(member::Member {
        partitions: partitions.clone(),
        view,
        url: url.clone(),
        dispatcher,
        group_key,
        authority,
        blobs,
        indexes: crate::indexes::SharedIndexes::new(unfenced, config.max_index_bytes),
        max_bundle_bytes: config.max_bundle_bytes,
        max_result_bytes: config.max_result_bytes,
        heartbeat: config.heartbeat_interval,
        worker_timeout: config.worker_timeout,
        tracker: tracker.clone(),
        ended: ended.clone(),
    })));
    tracing::info!(%url, partitions = partitioning.count(), "taking part in the group");
    tracker.spawn(report_partitions(
        partitions.clone(),
        config.heartbeat_interval,
        ended.clone(),
    ));
    let settings = membership::GroupSettings {
        partitioning,
        url,
        ttl: config.store.lease_ttl,
    };
    match membership::take_part(store, settings, Arc::new(partitions), shutdown, seen).await {
        Ok(()) => tracing::info!("left the group, every partition handed over"),
        Err(error) => tracing::error!(%error, "cannot take part in the group"),
    }
    ended.cancel();
    crate::term::wind_down(&tracker, TERM_DRAIN, "of the member's").await;
    Ok(())
}

/// Publishes the runs each partition led here holds, every `period`
/// until `ended`; a partition no longer led reads 0.
async fn report_partitions(
    partitions: partition_runs::PartitionRuns,
    period: Duration,
    ended: CancellationToken,
) {
    let mut shown = std::collections::BTreeSet::new();
    loop {
        let held = partitions.runs_held();
        let led: std::collections::BTreeSet<_> = held.keys().copied().collect();
        for gone in shown.difference(&led) {
            let label = [("partition", gone.0.to_string())];
            metrics::gauge!(crate::metrics::PARTITION_RUNS, &label).set(0.0);
        }
        for (partition, runs) in &held {
            let label = [("partition", partition.0.to_string())];
            metrics::gauge!(crate::metrics::PARTITION_RUNS, &label).set(*runs as f64);
        }
        shown = led;
        tokio::select! {
            () = ended.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

/// How long a term's tasks may take to stop when it ends.
const TERM_DRAIN: Duration = Duration::from_secs(10);

/// Campaigns, leads when elected, stands by again when a term ends; until
/// `shutdown`. `role` is what the gRPC services serve by.
pub async fn lead_when_elected(
    store: AnyStore,
    config: CoordinatorConfig,
    role: watch::Sender<Role>,
    shutdown: CancellationToken,
) {
    let me = config.advertised_url();
    let ttl = config.store.lease_ttl;
    // Only a change is announced: forwarded requests give up on a change.
    // The log says it too, so an operator reading a standby's log knows
    // what it is and whom it follows.
    let announce = |leader: election::LeaderUrl| {
        role.send_if_modified(|current| match current {
            Role::Standby(known) if *known == leader => false,
            _ => {
                match &leader {
                    Some(url) => {
                        tracing::info!(%me, leader = %url, "standing by; the leader is {url}")
                    }
                    None => tracing::info!(%me, "standing by; no coordinator leads yet"),
                }
                *current = Role::Standby(leader);
                true
            }
        });
    };
    loop {
        metrics::gauge!(crate::metrics::LEADER).set(0.0);
        let Some(term) = election::campaign(&store, &me, ttl, &announce, &shutdown).await else {
            return;
        };
        let started = lead(&store, term, &config, &role, &shutdown).await;
        if shutdown.is_cancelled() {
            return;
        }
        if !started {
            // The store failed while restoring runs: give it a moment.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(ttl) => {}
            }
        }
    }
}

/// One term: restores the runs, serves them until the term ends, then
/// drops them. Returns whether the term got as far as serving.
async fn lead(
    store: &AnyStore,
    term: Term,
    config: &CoordinatorConfig,
    role: &watch::Sender<Role>,
    shutdown: &CancellationToken,
) -> bool {
    let url = config.advertised_url();
    let ended = shutdown.child_token();
    let tracker = TaskTracker::new();
    let release = CancellationToken::new();
    let clock = LeaseClock::new(config.store.lease_ttl);
    // The lease is held apart from the term's tasks: it is given up only
    // after they have stopped.
    let holding = TaskTracker::new();
    holding.spawn({
        let (store, term, ended) = (store.clone(), term.clone(), ended.clone());
        let (clock, release) = (clock.clone(), release.clone());
        async move {
            if election::hold(store, term, clock, release).await {
                ended.cancel();
            }
        }
    });
    let keeper = Keeper::new(store.clone(), Some(term.fence.clone()), ended.clone());
    let taken_at = std::time::Instant::now();
    let services = start_term(config, keeper, Some(clock), ended.clone(), &tracker).await;
    let started = match services {
        Ok(services) => {
            tracing::info!(
                %url,
                fence = term.fence.revision,
                restore_ms = taken_at.elapsed().as_millis() as u64,
                "leading the group"
            );
            role.send_replace(Role::Leader(Arc::new(services)));
            metrics::gauge!(crate::metrics::LEADER).set(1.0);
            true
        }
        Err(error) => {
            tracing::error!(%error, "taking over failed; standing down");
            ended.cancel();
            false
        }
    };
    ended.cancelled().await;
    role.send_replace(Role::Standby(None));
    metrics::gauge!(crate::metrics::LEADER).set(0.0);
    if !shutdown.is_cancelled() {
        tracing::warn!(%url, "no longer leading: dropping the runs held, standing by");
    }
    crate::term::wind_down(&tracker, TERM_DRAIN, "of the ended term's").await;
    // Gives the key up now that nothing writes any more (a no-op when the
    // lease is lost already).
    release.cancel();
    holding.close();
    holding.wait().await;
    started
}
