//! One coordinator's share of the partitions, as a state machine.
//!
//! The coordinator feeds it what happens — the store's latest holding, the
//! answers to its requests, its runtime having drained a partition, its
//! session lease lost — and carries out the [`Command`]s it returns:
//! acquire a free partition's lease, serve a partition (restore its runs
//! and take work for them, every write fenced), drain one (stop its run
//! actors and checkpoint them), release its lease, or abandon it (drop what
//! is in memory without writing: another leads it now).
//!
//! A partition goes `acquiring → leading → draining → releasing` and is
//! gone; a view that shows it held by another, or not at all, while this
//! member leads it means the member was deposed (its lease expired while
//! it was paused or cut off), and it abandons the partition at once. A
//! member drains one partition at a time, so a hand-over never takes more
//! than one partition's runs off the group's hands.

use std::collections::BTreeMap;

use crate::partition::PartitionId;
use crate::placement::{MemberId, View};

/// Where one of the member's partitions stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// Its lease asked for.
    Acquiring,
    /// Led, writes fenced on `fence`.
    Leading {
        /// The lease key's create revision.
        fence: u64,
    },
    /// Its run actors stopping and checkpointing before the release.
    Draining {
        /// The lease key's create revision.
        fence: u64,
    },
    /// Its lease being given up.
    Releasing {
        /// The lease key's create revision.
        fence: u64,
    },
}

/// What happened.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// The store's holding at a newer revision.
    Viewed(&'a View),
    /// A lease asked for was created: the partition is this member's.
    Acquired {
        /// The partition.
        partition: PartitionId,
        /// The lease key's create revision.
        fence: u64,
    },
    /// A lease asked for was held already.
    Refused(PartitionId),
    /// The runtime stopped and checkpointed the partition's run actors.
    Drained(PartitionId),
    /// The lease was given up.
    Released(PartitionId),
    /// This member's session lease expired (or could not be renewed for
    /// its whole time to live): it leads nothing.
    Lost,
    /// The coordinator is shutting down: hand every partition over first.
    Leave,
}

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Create the partition's lease key, if absent, on this member's
    /// session; answer [`Input::Acquired`] or [`Input::Refused`].
    Acquire(PartitionId),
    /// Restore the partition's runs and serve them, fencing every write on
    /// `fence`.
    Serve {
        /// The partition.
        partition: PartitionId,
        /// Its fence.
        fence: u64,
    },
    /// Stop taking work for the partition, stop its run actors and
    /// checkpoint them; answer [`Input::Drained`].
    Drain(PartitionId),
    /// Delete the partition's lease key if it still has `fence`; answer
    /// [`Input::Released`].
    Release {
        /// The partition.
        partition: PartitionId,
        /// Its fence.
        fence: u64,
    },
    /// Drop the partition's runs from memory without writing: another
    /// member leads it, or will.
    Abandon(PartitionId),
    /// Every partition is handed over: the coordinator may stop.
    Left,
}

/// One coordinator's share.
#[derive(Debug)]
pub struct Member {
    id: MemberId,
    shares: BTreeMap<PartitionId, Share>,
    leaving: bool,
    left: bool,
}

impl Member {
    /// The member `id`, leading nothing yet.
    pub fn new(id: MemberId) -> Self {
        Self {
            id,
            shares: BTreeMap::new(),
            leaving: false,
            left: false,
        }
    }

    /// Its id.
    pub fn id(&self) -> &MemberId {
        &self.id
    }

    /// Where each of its partitions stands.
    pub fn shares(&self) -> &BTreeMap<PartitionId, Share> {
        &self.shares
    }

    /// The partitions it leads (drained ones included until released).
    pub fn leading(&self) -> impl Iterator<Item = (PartitionId, u64)> + '_ {
        self.shares.iter().filter_map(|(p, s)| match s {
            Share::Leading { fence } | Share::Draining { fence } => Some((*p, *fence)),
            _ => None,
        })
    }

    /// Whether it is handing a partition over now.
    fn handing_over(&self) -> bool {
        self.shares
            .values()
            .any(|s| matches!(s, Share::Draining { .. } | Share::Releasing { .. }))
    }

    /// Takes in what happened; returns what to do, in order.
    pub fn step(&mut self, input: Input<'_>) -> Vec<Command> {
        let mut commands = Vec::new();
        match input {
            Input::Viewed(view) => self.viewed(view, &mut commands),
            Input::Acquired { partition, fence } => match self.shares.get(&partition) {
                Some(Share::Acquiring) if !self.leaving => {
                    self.shares.insert(partition, Share::Leading { fence });
                    commands.push(Command::Serve { partition, fence });
                }
                // Asked for before the member began to leave, or answered
                // after it gave up waiting: given straight back.
                _ => {
                    self.shares.insert(partition, Share::Releasing { fence });
                    commands.push(Command::Release { partition, fence });
                }
            },
            Input::Refused(partition) => {
                if self.shares.get(&partition) == Some(&Share::Acquiring) {
                    self.shares.remove(&partition);
                }
            }
            Input::Drained(partition) => {
                if let Some(Share::Draining { fence }) = self.shares.get(&partition).copied() {
                    self.shares.insert(partition, Share::Releasing { fence });
                    commands.push(Command::Release { partition, fence });
                }
            }
            Input::Released(partition) => {
                if matches!(self.shares.get(&partition), Some(Share::Releasing { .. })) {
                    self.shares.remove(&partition);
                }
            }
            Input::Lost => {
                for (partition, share) in std::mem::take(&mut self.shares) {
                    if share != Share::Acquiring {
                        commands.push(Command::Abandon(partition));
                    }
                }
            }
            Input::Leave => self.leaving = true,
        }
        if self.leaving {
            self.leave_next(&mut commands);
        }
        commands
    }

    fn viewed(&mut self, view: &View, commands: &mut Vec<Command>) {
        let holding = view.holding();
        let member = holding.members.contains(&self.id);
        // Deposed: a partition this member leads is another's, or nobody's.
        let mut deposed = Vec::new();
        for (partition, share) in &self.shares {
            let fence = match share {
                Share::Acquiring => continue,
                Share::Leading { fence }
                | Share::Draining { fence }
                | Share::Releasing { fence } => *fence,
            };
            let ours = holding
                .holders
                .get(partition)
                .is_some_and(|h| h.member == self.id && h.fence == fence);
            if !ours || !member {
                deposed.push((*partition, *share));
            }
        }
        for (partition, share) in deposed {
            self.shares.remove(&partition);
            // A release seen through is simply done.
            if !matches!(share, Share::Releasing { .. }) {
                commands.push(Command::Abandon(partition));
            }
        }
        // Held in this member's name without its knowing: an acquire whose
        // answer was lost on the way. Given back, or nobody would ever take
        // it while the member lives.
        for (partition, holder) in &holding.holders {
            if holder.member == self.id && !self.shares.contains_key(partition) {
                let fence = holder.fence;
                self.shares.insert(*partition, Share::Releasing { fence });
                commands.push(Command::Release {
                    partition: *partition,
                    fence,
                });
            }
        }
        if !member || self.leaving {
            return;
        }
        let plan = view.plan();
        for (partition, taker) in &plan.take {
            if *taker == self.id && !self.shares.contains_key(partition) {
                self.shares.insert(*partition, Share::Acquiring);
                commands.push(Command::Acquire(*partition));
            }
        }
        if self.handing_over() {
            return;
        }
        let mine = plan.hand_over.iter().find(|m| m.from == self.id);
        if let Some(partition) = mine.map(|m| m.partition)
            && let Some(Share::Leading { fence }) = self.shares.get(&partition).copied()
        {
            self.shares.insert(partition, Share::Draining { fence });
            commands.push(Command::Drain(partition));
        }
    }

    /// Leaving: drains the next partition once none is being handed over,
    /// and says so once nothing is left.
    fn leave_next(&mut self, commands: &mut Vec<Command>) {
        if self.handing_over() {
            return;
        }
        let next = self.shares.iter().find_map(|(p, s)| match s {
            Share::Leading { fence } => Some((*p, *fence)),
            _ => None,
        });
        match next {
            Some((partition, fence)) => {
                self.shares.insert(partition, Share::Draining { fence });
                commands.push(Command::Drain(partition));
            }
            None if !self.shares.values().any(|s| *s == Share::Acquiring) && !self.left => {
                self.left = true;
                commands.push(Command::Left);
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Partitioning;
    use crate::placement::{Holder, Holding};

    fn view(p: u32, members: &[&str], holders: &[(u32, &str, u64)]) -> View {
        View::new(
            Partitioning::new(p).unwrap(),
            Holding {
                revision: 1,
                members: members.iter().map(|m| MemberId::from(*m)).collect(),
                holders: holders
                    .iter()
                    .map(|(p, m, fence)| {
                        (
                            PartitionId(*p),
                            Holder {
                                member: MemberId::from(*m),
                                fence: *fence,
                            },
                        )
                    })
                    .collect(),
            },
        )
    }

    /// A member alone in a group of two partitions, leading both (fences
    /// 3 and 4).
    fn leading_two() -> Member {
        let mut a = Member::new("a".into());
        a.step(Input::Viewed(&view(2, &["a"], &[])));
        for (partition, fence) in [(0, 3), (1, 4)] {
            a.step(Input::Acquired {
                partition: PartitionId(partition),
                fence,
            });
        }
        a
    }

    #[test]
    fn a_member_takes_its_free_partitions_and_serves_each_once_acquired() {
        let mut a = Member::new("a".into());
        let commands = a.step(Input::Viewed(&view(2, &["a"], &[])));
        assert_eq!(
            commands,
            [
                Command::Acquire(PartitionId(0)),
                Command::Acquire(PartitionId(1))
            ]
        );
        // The same view again asks for nothing twice.
        assert!(a.step(Input::Viewed(&view(2, &["a"], &[]))).is_empty());
        let served = a.step(Input::Acquired {
            partition: PartitionId(0),
            fence: 7,
        });
        assert_eq!(
            served,
            [Command::Serve {
                partition: PartitionId(0),
                fence: 7
            }]
        );
        assert!(a.step(Input::Refused(PartitionId(1))).is_empty());
        assert_eq!(a.leading().collect::<Vec<_>>(), [(PartitionId(0), 7)]);
    }

    #[test]
    fn a_hand_over_drains_then_releases_and_only_one_at_a_time() {
        let mut a = leading_two();
        // "b" joins: "a" is one above quota.
        let joined = view(2, &["a", "b"], &[(0, "a", 3), (1, "a", 4)]);
        assert_eq!(
            a.step(Input::Viewed(&joined)),
            [Command::Drain(PartitionId(1))]
        );
        assert!(a.step(Input::Viewed(&joined)).is_empty(), "drains once");
        assert_eq!(
            a.step(Input::Drained(PartitionId(1))),
            [Command::Release {
                partition: PartitionId(1),
                fence: 4
            }]
        );
        a.step(Input::Released(PartitionId(1)));
        assert_eq!(a.leading().collect::<Vec<_>>(), [(PartitionId(0), 3)]);
    }

    #[test]
    fn a_deposed_member_abandons_what_another_holds() {
        let mut a = Member::new("a".into());
        a.step(Input::Viewed(&view(1, &["a"], &[])));
        a.step(Input::Acquired {
            partition: PartitionId(0),
            fence: 3,
        });
        // Paused past its lease: "b" holds the partition now.
        let taken = view(1, &["a", "b"], &[(0, "b", 9)]);
        assert_eq!(
            a.step(Input::Viewed(&taken)),
            [Command::Abandon(PartitionId(0))]
        );
        assert_eq!(a.leading().count(), 0);
    }

    #[test]
    fn a_partition_held_in_its_name_unknown_to_it_is_given_back() {
        let mut a = Member::new("a".into());
        a.step(Input::Viewed(&view(2, &["a"], &[])));
        // The answer to partition 1's acquire was lost; it was refused as
        // far as the member knows, yet the store shows it held.
        a.step(Input::Refused(PartitionId(1)));
        let held = view(2, &["a"], &[(1, "a", 5)]);
        assert_eq!(
            a.step(Input::Viewed(&held)),
            [Command::Release {
                partition: PartitionId(1),
                fence: 5
            }]
        );
        assert!(a.step(Input::Viewed(&held)).is_empty(), "released once");
        a.step(Input::Released(PartitionId(1)));
        // Free again: taken as any free partition is.
        assert_eq!(
            a.step(Input::Viewed(&view(2, &["a"], &[]))),
            [Command::Acquire(PartitionId(1))]
        );
    }

    #[test]
    fn a_lost_session_abandons_everything() {
        let mut a = Member::new("a".into());
        a.step(Input::Viewed(&view(2, &["a"], &[])));
        a.step(Input::Acquired {
            partition: PartitionId(0),
            fence: 3,
        });
        assert_eq!(a.step(Input::Lost), [Command::Abandon(PartitionId(0))]);
        assert!(a.shares().is_empty());
    }

    #[test]
    fn a_leaving_member_hands_over_one_partition_after_another_then_says_so() {
        let mut a = leading_two();
        assert_eq!(a.step(Input::Leave), [Command::Drain(PartitionId(0))]);
        assert_eq!(
            a.step(Input::Drained(PartitionId(0))),
            [Command::Release {
                partition: PartitionId(0),
                fence: 3
            }]
        );
        assert_eq!(
            a.step(Input::Released(PartitionId(0))),
            [Command::Drain(PartitionId(1))]
        );
        a.step(Input::Drained(PartitionId(1)));
        assert_eq!(a.step(Input::Released(PartitionId(1))), [Command::Left]);
    }
}
