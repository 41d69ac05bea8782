//! How a worker that serves several coordinators — every member of a
//! partitioned group — shares its slots between them by their demand.
//!
//! Each coordinator places tasks on the worker within the share the worker
//! gave it (the hello's `slots`, then `Slots` messages), and tells the
//! worker how many queued tasks it has that the worker could run (`Demand`
//! messages). [`SlotShare`] is the pure core of the worker's side: it
//! turns demand, tasks starting and ending, and coordinators coming and
//! going into new shares, and it keeps one rule whatever the order of
//! events — the slots given out and the slots in use, counted per
//! coordinator as the larger of its share and what it runs, never exceed
//! the worker's slots. A share is lowered at once and raised only from
//! slots nobody holds, so a task a coordinator sent before it heard of a
//! lowered share is handed back ([`SlotShare::admit`] says no), and a
//! coordinator whose share was cut keeps what it runs until it ends.
//!
//! The split: each coordinator wants what it runs plus what it has queued;
//! wants are met in turns of one slot (so a coordinator with little demand
//! gets all of it and the rest share what is left evenly); slots nobody
//! wants are spread evenly too, so a coordinator that goes from idle to
//! busy starts at once on its part without waiting for a new share.
//! [`SharedSlots`] is the core behind a lock, with each coordinator's
//! share published on a watch channel that its connection sends from: the
//! latest share always goes, and never one older than the last sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// A coordinator's seat at the worker, by the order it came.
pub(crate) type SeatId = u64;

/// One coordinator's part of the worker's slots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Part {
    /// Queued tasks it said it has that this worker could run.
    queued: u64,
    /// Its tasks running here.
    running: u32,
    /// How many it may run here.
    share: u32,
}

impl Part {
    /// The slots it holds: its share, or more while it runs more.
    fn held(self) -> u32 {
        self.share.max(self.running)
    }

    /// What it would use: what it runs and what it has waiting.
    fn wants(self, total: u32) -> u32 {
        let queued = u32::try_from(self.queued).unwrap_or(u32::MAX);
        self.running.saturating_add(queued).min(total)
    }
}

/// The worker's slots and who holds them; see the module docs.
#[derive(Debug)]
pub(crate) struct SlotShare {
    total: u32,
    parts: BTreeMap<SeatId, Part>,
    next: SeatId,
}

/// Shares that changed: each seat's new share.
pub(crate) type Changes = Vec<(SeatId, u32)>;

impl SlotShare {
    pub(crate) fn new(total: u32) -> Self {
        Self {
            total,
            parts: BTreeMap::new(),
            next: 0,
        }
    }

    /// A coordinator takes a seat: its first share (what its hello says)
    /// and the shares that changed for the others.
    pub(crate) fn seat(&mut self) -> (SeatId, u32, Changes) {
        let id = self.next;
        self.next += 1;
        self.parts.insert(id, Part::default());
        let mut changes = self.rebalance();
        let first = self.parts[&id].share;
        changes.retain(|(seat, _)| *seat != id);
        (id, first, changes)
    }

    /// A coordinator's session ended: what it ran there is stopped, and
    /// its slots go to the others.
    pub(crate) fn leave(&mut self, id: SeatId) -> Changes {
        self.parts.remove(&id);
        self.rebalance()
    }

    /// A coordinator told its demand.
    pub(crate) fn demand(&mut self, id: SeatId, queued: u64) -> Changes {
        match self.parts.get_mut(&id) {
            Some(part) if part.queued != queued => part.queued = queued,
            _ => return Vec::new(),
        }
        self.rebalance()
    }

    /// A task came from a coordinator: true when it is within its share
    /// (it now runs), false when it came past a share just lowered (the
    /// worker hands it back).
    pub(crate) fn admit(&mut self, id: SeatId) -> bool {
        let Some(part) = self.parts.get_mut(&id) else {
            return false;
        };
        if part.running >= part.share {
            return false;
        }
        part.running += 1;
        part.queued = part.queued.saturating_sub(1);
        true
    }

    /// A coordinator's task ended here.
    pub(crate) fn finished(&mut self, id: SeatId) -> Changes {
        match self.parts.get_mut(&id) {
            Some(part) => part.running = part.running.saturating_sub(1),
            None => return Vec::new(),
        }
        self.rebalance()
    }

    /// Each coordinator's share now.
    #[cfg(test)]
    fn shares(&self) -> Vec<u32> {
        self.parts.values().map(|part| part.share).collect()
    }

    /// Moves shares toward the split the demand asks for: lowered at once,
    /// raised from slots nobody holds.
    fn rebalance(&mut self) -> Changes {
        let wants: Vec<u32> = self.parts.values().map(|p| p.wants(self.total)).collect();
        let targets = split(self.total, &wants);
        let mut changes = Vec::new();
        for ((&id, part), &target) in self.parts.iter_mut().zip(&targets) {
            if target < part.share {
                part.share = target;
                changes.push((id, target));
            }
        }
        let held: u32 = self.parts.values().map(|part| part.held()).sum();
        let mut free = self.total.saturating_sub(held);
        for ((&id, part), &target) in self.parts.iter_mut().zip(&targets) {
            if target <= part.share {
                continue;
            }
            // Up to what it runs is held already and costs nothing.
            let raised = target.min(part.held() + free);
            if raised <= part.share {
                continue;
            }
            free -= raised.max(part.running) - part.held();
            part.share = raised;
            match changes.iter_mut().find(|(seat, _)| *seat == id) {
                Some(change) => change.1 = raised,
                None => changes.push((id, raised)),
            }
        }
        changes
    }
}

/// `total` slots split by `wants`: turns of one slot each to those that
/// want more, then what nobody wants spread evenly, earlier seats first.
fn split(total: u32, wants: &[u32]) -> Vec<u32> {
    let mut out = vec![0u32; wants.len()];
    if wants.is_empty() {
        return out;
    }
    let mut left = total;
    // The level every want below it is met at, found without handing out
    // one slot at a time: each round raises everyone still wanting by the
    // same step.
    loop {
        let wanting: Vec<usize> = (0..wants.len()).filter(|&i| out[i] < wants[i]).collect();
        if wanting.is_empty() || left == 0 {
            break;
        }
        let count = wanting.len() as u32;
        let smallest = wanting
            .iter()
            .map(|&i| wants[i] - out[i])
            .min()
            .unwrap_or(0);
        let step = smallest.min(left / count);
        if step == 0 {
            // Fewer slots left than those wanting: one each, in order.
            for &i in wanting.iter().take(left as usize) {
                out[i] += 1;
            }
            left = 0;
            break;
        }
        for &i in &wanting {
            out[i] += step;
        }
        left -= step * count;
    }
    let count = wants.len() as u32;
    for (i, slot) in out.iter_mut().enumerate() {
        *slot += left / count + u32::from((i as u32) < left % count);
    }
    out
}

/// The core behind a lock, each seat's share on a watch channel.
#[derive(Debug)]
pub(crate) struct SharedSlots {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    share: SlotShare,
    told: BTreeMap<SeatId, watch::Sender<u32>>,
}

impl SharedSlots {
    pub(crate) fn new(total: u32) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                share: SlotShare::new(total),
                told: BTreeMap::new(),
            }),
        })
    }

    /// The worker's slots in all.
    pub(crate) fn total(&self) -> u32 {
        self.lock().share.total
    }

    /// A seat for a coordinator the worker is about to join; it is given
    /// up when dropped.
    pub(crate) fn seat(self: &Arc<Self>) -> Seat {
        let mut inner = self.lock();
        let (id, first, changes) = inner.share.seat();
        let (tx, shares) = watch::channel(first);
        inner.told.insert(id, tx);
        inner.tell(changes);
        Seat {
            slots: self.clone(),
            id,
            first,
            shares,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The core's invariants hold between calls; a panic elsewhere
        // while the lock was held leaves nothing half-done.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn apply(&self, change: impl FnOnce(&mut SlotShare) -> Changes) {
        let mut inner = self.lock();
        let changes = change(&mut inner.share);
        inner.tell(changes);
    }
}

impl Inner {
    /// Publishes new shares, under the lock: each seat's channel always
    /// holds its latest share.
    fn tell(&self, changes: Changes) {
        for (id, share) in changes {
            if let Some(tx) = self.told.get(&id) {
                tx.send_replace(share);
            }
        }
    }
}

/// One coordinator's seat at a worker that shares its slots.
#[derive(Debug)]
pub(crate) struct Seat {
    slots: Arc<SharedSlots>,
    id: SeatId,
    /// The share its hello announces.
    pub(crate) first: u32,
    /// Its share as it changes, for its connection to send.
    pub(crate) shares: watch::Receiver<u32>,
}

impl Seat {
    /// The worker's slots in all.
    pub(crate) fn total(&self) -> u32 {
        self.slots.total()
    }

    /// A task came: whether it runs (see [`SlotShare::admit`]).
    pub(crate) fn admit(&self) -> bool {
        self.slots.lock().share.admit(self.id)
    }

    /// One of its tasks ended.
    pub(crate) fn finished(&self) {
        self.slots.apply(|share| share.finished(self.id));
    }

    /// The coordinator told its demand.
    pub(crate) fn demand(&self, queued: u64) {
        self.slots.apply(|share| share.demand(self.id, queued));
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let id = self.id;
        let mut inner = self.slots.lock();
        inner.told.remove(&id);
        let changes = inner.share.leave(id);
        inner.tell(changes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of the module: slots held never exceed the worker's.
    fn check(share: &SlotShare) {
        let held: u32 = share.parts.values().map(|part| part.held()).sum();
        assert!(
            held <= share.total,
            "{held} slots held of {}: {:?}",
            share.total,
            share.parts
        );
    }

    #[test]
    fn split_meets_small_wants_and_shares_the_rest() {
        assert_eq!(split(8, &[0, 0]), [4, 4], "nobody wants: even");
        assert_eq!(split(8, &[2, 100]), [2, 6], "a small want met whole");
        assert_eq!(split(8, &[100, 100, 100]), [3, 3, 2]);
        assert_eq!(split(8, &[1, 1]), [4, 4], "what nobody wants, spread");
        assert_eq!(split(2, &[5, 5, 5]), [1, 1, 0]);
        assert_eq!(split(0, &[5]), [0]);
        assert!(split(4, &[]).is_empty());
    }

    #[test]
    fn one_coordinator_has_every_slot_whatever_its_demand() {
        let mut share = SlotShare::new(4);
        let (a, first, _) = share.seat();
        assert_eq!(first, 4);
        assert!(share.demand(a, 100).is_empty());
        assert!(share.demand(a, 0).is_empty());
        assert_eq!(share.shares(), [4]);
    }

    #[test]
    fn a_second_coordinator_gets_slots_only_as_the_first_lets_them_go() {
        let mut share = SlotShare::new(4);
        let (a, _, _) = share.seat();
        for _ in 0..4 {
            assert!(share.admit(a));
        }
        assert!(!share.admit(a), "a fifth task is past its share");
        // b comes, with nothing to do: a keeps what it runs.
        let (b, first, changes) = share.seat();
        assert_eq!((first, changes), (0, Vec::new()));
        // b has work: a's share is cut at once, b's waits for a's tasks.
        assert_eq!(share.demand(b, 10), [(a, 2)], "a still runs four");
        check(&share);
        assert_eq!(share.finished(a), [(b, 1)]);
        assert_eq!(share.finished(a), [(b, 2)]);
        assert_eq!(share.shares(), [2, 2]);
        // a's third and fourth tasks end: both still want, so nothing moves.
        share.demand(a, 10);
        assert!(share.finished(a).is_empty());
        check(&share);
        assert!(share.admit(b) && share.admit(b));
        assert!(!share.admit(b));
    }

    #[test]
    fn slots_follow_demand_and_come_back_when_it_ends() {
        let mut share = SlotShare::new(6);
        let (a, _, _) = share.seat();
        let (b, _, _) = share.seat();
        assert_eq!(share.shares(), [3, 3], "idle: even");
        // b is idle, a is busy: a gets everything.
        assert_eq!(share.demand(a, 50), [(b, 0), (a, 6)]);
        for _ in 0..6 {
            assert!(share.admit(a));
        }
        // b gets busy too: half each, b's half as a's tasks end.
        assert_eq!(share.demand(b, 50), [(a, 3)]);
        assert!(!share.admit(b), "nothing is free yet");
        let mut b_share = 0;
        for _ in 0..3 {
            for (seat, to) in share.finished(a) {
                assert_eq!(seat, b);
                b_share = to;
            }
            check(&share);
        }
        assert_eq!(b_share, 3);
        // a's demand ends: its unused part goes to b.
        share.demand(a, 0);
        for _ in 0..3 {
            share.finished(a);
        }
        assert_eq!(share.shares(), [0, 6]);
    }

    #[test]
    fn a_coordinator_that_leaves_gives_its_slots_back() {
        let mut share = SlotShare::new(4);
        let (a, _, _) = share.seat();
        let (b, _, _) = share.seat();
        assert!(share.admit(a) && share.admit(a));
        assert_eq!(share.leave(a), [(b, 4)]);
        assert!(share.demand(b, 3).is_empty());
    }

    /// Seeded random events, the rule checked after each; every seat with
    /// demand ends up with a share once things settle.
    #[test]
    fn no_order_of_events_gives_out_more_slots_than_the_worker_has() {
        for seed in 1..200u64 {
            let mut rng = seed;
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let total = 1 + next(8) as u32;
            let mut share = SlotShare::new(total);
            let mut seats: Vec<SeatId> = Vec::new();
            let mut running: BTreeMap<SeatId, u32> = BTreeMap::new();
            for _ in 0..300 {
                match next(10) {
                    0 if seats.len() < 5 => {
                        let (id, _, _) = share.seat();
                        seats.push(id);
                    }
                    1 if !seats.is_empty() => {
                        let id = seats.remove(next(seats.len() as u64) as usize);
                        running.remove(&id);
                        share.leave(id);
                    }
                    2..=4 if !seats.is_empty() => {
                        let id = seats[next(seats.len() as u64) as usize];
                        share.demand(id, next(12));
                    }
                    5..=7 if !seats.is_empty() => {
                        let id = seats[next(seats.len() as u64) as usize];
                        if share.admit(id) {
                            *running.entry(id).or_default() += 1;
                        }
                    }
                    _ => {
                        let busy: Vec<SeatId> = running
                            .iter()
                            .filter(|(_, n)| **n > 0)
                            .map(|(id, _)| *id)
                            .collect();
                        if let Some(&id) = busy.get(next(busy.len().max(1) as u64) as usize) {
                            *running.get_mut(&id).unwrap() -= 1;
                            share.finished(id);
                        }
                    }
                }
                check(&share);
                let in_use: u32 = running.values().sum();
                assert!(in_use <= total, "seed {seed}: {in_use} run on {total}");
            }
            // Everything ends; every seat that still wants gets a share.
            for (&id, n) in &mut running {
                while *n > 0 {
                    *n -= 1;
                    share.finished(id);
                }
            }
            for &id in &seats {
                share.demand(id, 3);
            }
            let shares = share.shares();
            if seats.is_empty() {
                continue;
            }
            assert_eq!(
                shares.iter().sum::<u32>(),
                total,
                "seed {seed}: every slot given out once idle: {shares:?}"
            );
            if total as usize >= seats.len() {
                assert!(shares.iter().all(|s| *s > 0), "seed {seed}: {shares:?}");
            }
        }
    }
}
