//! The simulated etcd: sessions with a time to live, one lease key per
//! partition created only where none is (its create revision the fence),
//! and the runs' checkpoints, every write fenced.
//!
//! It also keeps the checks that must hold whatever the faults: no write is
//! accepted under a fence that is not the partition's current one, each
//! accepted fence belongs to one member, and a run's waves are merged once
//! each, in order.

use std::collections::BTreeMap;

use weft_partitions::{Holder, Holding, MemberId, PartitionId};

/// A run of the simulation: its partition and its number there.
pub type RunKey = (PartitionId, u32);

/// A request to the store.
#[derive(Debug, Clone)]
pub enum Request {
    /// Open the member's session.
    Register,
    /// Renew it.
    KeepAlive,
    /// Create the partition's lease key on the member's session.
    Acquire(PartitionId),
    /// Delete the lease key if it still has `fence`.
    Release(PartitionId, u64),
    /// Read the partition's runs, for a new leader.
    Restore(PartitionId, u64),
    /// Merge wave `wave` of a run, fenced.
    Write { run: RunKey, fence: u64, wave: u32 },
}

/// The store's answer.
#[derive(Debug, Clone)]
pub enum Reply {
    KeptAlive { sent: u64 },
    SessionGone,
    Acquired(PartitionId, u64),
    Refused(PartitionId),
    Released(PartitionId),
    Restored(PartitionId, u64, Vec<(RunKey, u32)>),
    Written(RunKey, u64, u32),
    Fenced(PartitionId),
}

/// An invariant broken: the simulation fails with it and its seed.
#[derive(Debug)]
pub struct Violation(pub String);

#[derive(Default)]
pub struct Store {
    pub revision: u64,
    sessions: BTreeMap<MemberId, u64>,
    holders: BTreeMap<PartitionId, Holder>,
    /// Each run's last merged wave, and the fence it was merged under.
    pub waves: BTreeMap<RunKey, (u32, u64)>,
    /// Which member each fence was given to.
    fences: BTreeMap<u64, MemberId>,
    /// Writes refused for a stale fence (deposed leaders caught).
    pub fenced: u64,
    /// Sessions the store expired.
    pub expired: u64,
    pub violations: Vec<Violation>,
}

impl Store {
    pub fn new(runs: impl Iterator<Item = RunKey>) -> Self {
        Self {
            waves: runs.map(|r| (r, (0, 0))).collect(),
            ..Self::default()
        }
    }

    /// What a watch would show now.
    pub fn holding(&self) -> Holding {
        Holding {
            revision: self.revision,
            members: self.sessions.keys().cloned().collect(),
            holders: self.holders.clone(),
        }
    }

    /// Expires sessions whose time ran out at `now`, with their leases;
    /// the partitions left without a leader.
    pub fn expire(&mut self, now: u64) -> Vec<PartitionId> {
        let gone: Vec<MemberId> = self
            .sessions
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(m, _)| m.clone())
            .collect();
        let mut freed = Vec::new();
        for member in gone {
            freed.extend(
                self.holders
                    .iter()
                    .filter(|(_, h)| h.member == member)
                    .map(|(p, _)| *p),
            );
            self.revoke(&member);
        }
        freed
    }

    /// Deletes one partition's lease (its own lease expired, or an
    /// operator removed it) while its holder's session lives on.
    pub fn drop_lease(&mut self, partition: PartitionId) -> bool {
        let dropped = self.holders.remove(&partition).is_some();
        if dropped {
            self.revision += 1;
        }
        dropped
    }

    /// Ends `member`'s session at once (a lease revoked or expired).
    pub fn revoke(&mut self, member: &MemberId) {
        if self.sessions.remove(member).is_some() {
            self.holders.retain(|_, h| &h.member != member);
            self.revision += 1;
            self.expired += 1;
        }
    }

    pub fn handle(
        &mut self,
        now: u64,
        ttl: u64,
        from: &MemberId,
        sent: u64,
        request: Request,
    ) -> Reply {
        let alive = self.sessions.contains_key(from);
        match request {
            Request::Register => {
                if !alive {
                    self.revision += 1;
                }
                self.sessions.insert(from.clone(), now + ttl);
                Reply::KeptAlive { sent }
            }
            Request::KeepAlive if !alive => Reply::SessionGone,
            Request::KeepAlive => {
                self.sessions.insert(from.clone(), now + ttl);
                Reply::KeptAlive { sent }
            }
            Request::Acquire(partition) => {
                if !alive {
                    return Reply::SessionGone;
                }
                if self.holders.contains_key(&partition) {
                    return Reply::Refused(partition);
                }
                self.revision += 1;
                let fence = self.revision;
                self.fences.insert(fence, from.clone());
                self.holders.insert(
                    partition,
                    Holder {
                        member: from.clone(),
                        fence,
                    },
                );
                Reply::Acquired(partition, fence)
            }
            Request::Release(partition, fence) => {
                if self
                    .holders
                    .get(&partition)
                    .is_some_and(|h| h.fence == fence)
                {
                    self.holders.remove(&partition);
                    self.revision += 1;
                }
                Reply::Released(partition)
            }
            Request::Restore(partition, fence) => {
                if !self.current(partition, fence, from) {
                    return Reply::Fenced(partition);
                }
                let runs = self
                    .waves
                    .range((partition, 0)..=(partition, u32::MAX))
                    .map(|(r, (w, _))| (*r, *w))
                    .collect();
                Reply::Restored(partition, fence, runs)
            }
            Request::Write { run, fence, wave } => {
                if !self.current(run.0, fence, from) {
                    self.fenced += 1;
                    return Reply::Fenced(run.0);
                }
                let (last, by) = self.waves.get_mut(&run).expect("a known run");
                // The same leader's write sent again (its answer was
                // late) puts the same checkpoint: nothing merges twice.
                let again = wave == *last && fence == *by;
                if wave != *last + 1 && !again {
                    self.violations.push(Violation(format!(
                        "run {run:?}: wave {wave} merged by {from} (fence {fence}) after wave {last} (fence {by}): {}",
                        if wave <= *last { "merged twice" } else { "a wave lost" }
                    )));
                }
                if wave > *last {
                    (*last, *by) = (wave, fence);
                }
                Reply::Written(run, fence, wave)
            }
        }
    }

    /// Whether `fence` is the partition's current fence, held by `from`.
    fn current(&mut self, partition: PartitionId, fence: u64, from: &MemberId) -> bool {
        let current = self
            .holders
            .get(&partition)
            .is_some_and(|h| h.fence == fence);
        if current && self.fences.get(&fence) != Some(from) {
            self.violations.push(Violation(format!(
                "{partition}: fence {fence} used by {from}, given to {:?}",
                self.fences.get(&fence)
            )));
        }
        current
    }
}
