//! Who should lead each partition: a pure function of what the store says.
//!
//! Every coordinator of a group reads the same holding from etcd (the live
//! members and each partition's holder) and plans from it with [`plan`];
//! each then does its own part ([`crate::member`]). Since the plan is a
//! function of the holding alone, coordinators that have seen the same
//! revision agree without talking to each other, and ones that have not
//! are kept apart by the store (a partition's lease is created only where
//! none is, and released only by its holder's fence).
//!
//! Each member's quota is P / N, and the P % N members that hold the most
//! (ties by id) may lead one more: a member already at P / N + 1 keeps
//! its extra partition, so a change moves as few partitions as it can.
//! Partitions that no live member holds (a new group, a crashed leader)
//! are given out at once, to the members furthest below quota. Beyond
//! that, a member above its quota hands one partition over to one below:
//! one hand-over at a time per member, each drained and released before
//! it is taken.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::OnceLock;

use crate::partition::{PartitionId, Partitioning};

/// A coordinator of the group, by the id it registers under.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub String);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for MemberId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

/// A partition's lease as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The coordinator that holds it.
    pub member: MemberId,
    /// The lease key's create revision: every write for the partition
    /// carries it, and the store refuses one whose fence is not current.
    pub fence: u64,
}

/// What the store says at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    /// The store's revision this was read at.
    pub revision: u64,
    /// The members whose session leases are alive.
    pub members: BTreeSet<MemberId>,
    /// Each held partition's holder (a partition absent is free).
    pub holders: BTreeMap<PartitionId, Holder>,
}

/// A hand-over to start: `from` drains `partition` and releases it, then
/// `to` (the member furthest below quota when it is free) takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The partition.
    pub partition: PartitionId,
    /// The member leading it, above its quota.
    pub from: MemberId,
    /// The member below its quota meant to take it.
    pub to: MemberId,
}

/// What the group should do next, from one holding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each partition no live member holds, with the member that should
    /// take it.
    pub take: BTreeMap<PartitionId, MemberId>,
    /// Hand-overs to start: at most one per giving and per taking member.
    pub hand_over: Vec<Move>,
    /// Each member's quota.
    pub quotas: BTreeMap<MemberId, u32>,
}

/// A holding with its plan, made once and shared by whoever reads it.
#[derive(Debug)]
pub struct View {
    holding: Holding,
    partitioning: Partitioning,
    plan: OnceLock<Plan>,
}

impl View {
    /// The view of `holding` in a group of `partitioning`.
    pub fn new(partitioning: Partitioning, holding: Holding) -> Self {
        Self {
            holding,
            partitioning,
            plan: OnceLock::new(),
        }
    }

    /// What the store says.
    pub fn holding(&self) -> &Holding {
        &self.holding
    }

    /// The plan for it, made on first use.
    pub fn plan(&self) -> &Plan {
        self.plan
            .get_or_init(|| plan(self.partitioning, &self.holding))
    }
}

/// How many partitions each live member holds.
pub fn led_counts(holding: &Holding) -> BTreeMap<&MemberId, u32> {
    let mut counts: BTreeMap<&MemberId, u32> = holding.members.iter().map(|m| (m, 0)).collect();
    for holder in holding.holders.values() {
        if let Some(count) = counts.get_mut(&holder.member) {
            *count += 1;
        }
    }
    counts
}

/// The plan for `holding`.
pub fn plan(partitioning: Partitioning, holding: &Holding) -> Plan {
    let members = &holding.members;
    if members.is_empty() {
        return Plan::default();
    }
    let counts = led_counts(holding);
    let n = members.len() as u32;
    let (base, extra) = (partitioning.count() / n, partitioning.count() % n);
    // The extra partitions go to those that hold the most already.
    let mut by_load: Vec<(&MemberId, u32)> = counts.iter().map(|(m, c)| (*m, *c)).collect();
    by_load.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let quotas: BTreeMap<MemberId, u32> = by_load
        .iter()
        .enumerate()
        .map(|(rank, (m, _))| ((*m).clone(), base + u32::from((rank as u32) < extra)))
        .collect();
    let mut load: BTreeMap<&MemberId, i64> = counts
        .iter()
        .map(|(m, c)| (*m, i64::from(*c) - i64::from(quotas[*m])))
        .collect();

    // Free partitions, each to the member furthest below its quota.
    let mut take = BTreeMap::new();
    for partition in partitioning.all() {
        let held = holding
            .holders
            .get(&partition)
            .is_some_and(|h| members.contains(&h.member));
        if held {
            continue;
        }
        let (member, deficit) = load
            .iter_mut()
            .min_by(|a, b| (*a.1).cmp(&*b.1).then_with(|| a.0.cmp(b.0)))
            .expect("a group with members");
        *deficit += 1;
        take.insert(partition, (*member).clone());
    }

    // Then one hand-over from each member above quota to one below.
    let mut givers: Vec<(&MemberId, i64)> = load
        .iter()
        .filter(|(_, l)| **l > 0)
        .map(|(m, l)| (*m, *l))
        .collect();
    let mut takers: Vec<(&MemberId, i64)> = load
        .iter()
        .filter(|(_, l)| **l < 0)
        .map(|(m, l)| (*m, *l))
        .collect();
    givers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    takers.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    let hand_over = givers
        .iter()
        .zip(&takers)
        .filter_map(|((from, _), (to, _))| {
            // The giver's highest partition: the same one from every view
            // until it has gone.
            let partition = holding
                .holders
                .iter()
                .rev()
                .find(|(_, h)| &h.member == *from)
                .map(|(p, _)| *p)?;
            Some(Move {
                partition,
                from: (*from).clone(),
                to: (*to).clone(),
            })
        })
        .collect();
    Plan {
        take,
        hand_over,
        quotas,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(members: &[&str], holders: &[(u32, &str)]) -> Holding {
        Holding {
            revision: 1,
            members: members.iter().map(|m| MemberId::from(*m)).collect(),
            holders: holders
                .iter()
                .enumerate()
                .map(|(fence, (p, m))| {
                    (
                        PartitionId(*p),
                        Holder {
                            member: MemberId::from(*m),
                            fence: fence as u64 + 1,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_new_group_gives_every_partition_out_within_one_of_even() {
        let p = Partitioning::new(10).unwrap();
        let plan = plan(p, &holding(&["a", "b", "c"], &[]));
        assert_eq!(plan.take.len(), 10);
        let mut given: BTreeMap<&MemberId, u32> = BTreeMap::new();
        for member in plan.take.values() {
            *given.entry(member).or_default() += 1;
        }
        let counts: Vec<u32> = given.values().copied().collect();
        assert_eq!(counts.iter().sum::<u32>(), 10);
        assert!(counts.iter().all(|c| (3..=4).contains(c)), "{given:?}");
        assert!(plan.hand_over.is_empty());
    }

    #[test]
    fn a_joiner_takes_partitions_one_hand_over_at_a_time_per_member() {
        let p = Partitioning::new(6).unwrap();
        let held = [(0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b")];
        let plan = plan(p, &holding(&["a", "b", "c"], &held));
        assert!(plan.take.is_empty());
        // Both givers are above quota (2 each), the joiner below by 2: one
        // hand-over to it now, the other when it is done.
        assert_eq!(
            plan.hand_over,
            vec![Move {
                partition: PartitionId(2),
                from: "a".into(),
                to: "c".into()
            }]
        );
    }

    #[test]
    fn a_dead_members_partitions_go_to_those_below_quota_at_once() {
        let p = Partitioning::new(4).unwrap();
        // "b" has left the members (its session expired): its partitions
        // are free though its keys are still read.
        let plan = plan(
            p,
            &holding(&["a", "c"], &[(0, "a"), (1, "b"), (2, "b"), (3, "c")]),
        );
        let takers: Vec<&str> = plan.take.values().map(|m| m.0.as_str()).collect();
        assert_eq!(
            plan.take.keys().copied().collect::<Vec<_>>(),
            [PartitionId(1), PartitionId(2)]
        );
        assert_eq!(takers, ["a", "c"]);
        assert!(plan.hand_over.is_empty());
    }

    #[test]
    fn a_member_at_one_above_even_keeps_its_extra_partition() {
        let p = Partitioning::new(7).unwrap();
        // 7 over 3: quotas 3, 2, 2. "b" holds 3 and keeps them.
        let held = [
            (0, "a"),
            (1, "a"),
            (2, "b"),
            (3, "b"),
            (4, "b"),
            (5, "c"),
            (6, "c"),
        ];
        let plan = plan(p, &holding(&["a", "b", "c"], &held));
        assert_eq!(plan.quotas[&MemberId::from("b")], 3);
        assert!(
            plan.take.is_empty() && plan.hand_over.is_empty(),
            "{plan:?}"
        );
    }
}
