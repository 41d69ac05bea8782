//! The simulated group: coordinators driving the pure core
//! ([`weft_partitions::Member`]) against the simulated store, over a
//! virtual network, in virtual time, with seeded faults.
//!
//! Every coordinator renews its session every second (time to live 3 s),
//! reads the store's holding at most every 50 ms (a watch's batches), and
//! advances each run of the partitions it serves by one wave every 500 ms,
//! each wave a fenced write. A hand-over drains a partition (its writes in
//! flight answered, then a checkpoint on its disk) before the release, and
//! the next leader restores the partition's runs before it writes.
//!
//! Faults, drawn from the seed: a coordinator killed (and restarted a
//! little later), one leaving cleanly (and coming back), one paused past
//! or within its lease, one cut off from the store (what it sends and is
//! sent waits until the cut heals), one whose network is
//! slow (its messages seconds late), one whose disk is slow, a session
//! revoked by the store, one partition's lease lost while its leader's
//! session lives on. After each (sometimes two at once) the group must
//! settle — every partition led, every member within one of even, no
//! hand-over left — within two minutes of virtual time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::hash::Hasher;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use weft_partitions::{Command, Input, Member, MemberId, PartitionId, Partitioning, Share, View};

use crate::store::{Reply, Request, RunKey, Store};

const TTL: u64 = 3_000;
const KEEP_ALIVE: u64 = 1_000;
const VIEW_EVERY: u64 = 50;
const WAVE_EVERY: u64 = 500;
const SETTLE_WITHIN: u64 = 120_000;
const RESEND_AFTER: u64 = 2_000;

/// The group's shape.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub partitions: u32,
    pub coordinators: usize,
    pub runs_per_partition: u32,
    /// Faults injected, one after another.
    pub changes: usize,
}

/// What a seed's simulation did.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub seed: u64,
    pub events: u64,
    pub virtual_ms: u64,
    /// Hand-overs completed: drained, released, taken and restored.
    pub hand_overs: Vec<u64>,
    /// Partitions taken over from a member that died or was deposed,
    /// from the fault to the new leader's restore.
    pub take_overs: Vec<u64>,
    /// The take-overs of a killed coordinator's partitions, from the kill
    /// (a kill with no other fault at once).
    pub after_kills: Vec<u64>,
    pub faults: BTreeMap<&'static str, u32>,
    /// Writes refused for a stale fence: deposed leaders caught.
    pub fenced_writes: u64,
    pub waves_merged: u64,
    /// A digest of every event in order: equal for equal seeds.
    pub digest: u64,
}

#[derive(Debug)]
enum Event {
    ToStore {
        slot: usize,
        life: u32,
        from: MemberId,
        sent: u64,
        request: Request,
    },
    ToCoordinator {
        slot: usize,
        life: u32,
        reply: Reply,
    },
    Viewed {
        slot: usize,
        life: u32,
        view: Arc<View>,
    },
    KeepAlive {
        slot: usize,
        life: u32,
    },
    Waves {
        slot: usize,
        life: u32,
    },
    Drained {
        slot: usize,
        life: u32,
        partition: PartitionId,
    },
    Restart {
        slot: usize,
    },
    StoreTick,
}

impl Event {
    fn tag(&self) -> (u64, usize) {
        match self {
            Self::ToStore { slot, .. } => (1, *slot),
            Self::ToCoordinator { slot, .. } => (2, *slot),
            Self::Viewed { slot, .. } => (3, *slot),
            Self::KeepAlive { slot, .. } => (4, *slot),
            Self::Waves { slot, .. } => (5, *slot),
            Self::Drained { slot, .. } => (6, *slot),
            Self::Restart { slot } => (7, *slot),
            Self::StoreTick => (8, 0),
        }
    }
}

/// Why a partition's leadership moves.
#[derive(Debug, Clone, Copy)]
enum Cause {
    /// A hand-over: drained, released, taken.
    HandOver,
    /// Its leader was killed.
    Kill,
    /// Its lease or its leader's session ended.
    Fault,
}

#[derive(Debug, Default)]
struct Served {
    fence: u64,
    restored: bool,
    draining: bool,
    checkpointing: bool,
    /// Each run's last merged wave, and since when a write of the next
    /// has been in flight.
    runs: BTreeMap<RunKey, (u32, Option<u64>)>,
}

struct Coordinator {
    slot: usize,
    life: u32,
    /// Sessions opened in this life: each is a new member, as each etcd
    /// lease is (the partitions held under a lost one expire with it).
    sessions: u32,
    member: Member,
    alive: bool,
    /// The session's end as this coordinator reckons it (from the sending
    /// of the last renewal the store answered); `None` before one.
    session_until: Option<u64>,
    paused_until: u64,
    cut_until: u64,
    slow_network_until: u64,
    slow_disk_until: u64,
    seen_revision: u64,
    served: BTreeMap<PartitionId, Served>,
}

impl Coordinator {
    fn new(slot: usize, life: u32) -> Self {
        Self {
            slot,
            life,
            sessions: 0,
            member: Member::new(MemberId(format!("c{slot}.{life}.0"))),
            alive: true,
            session_until: None,
            paused_until: 0,
            cut_until: 0,
            slow_network_until: 0,
            slow_disk_until: 0,
            seen_revision: 0,
            served: BTreeMap::new(),
        }
    }
}

pub struct World {
    settings: Settings,
    partitioning: Partitioning,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    rng: ChaCha8Rng,
    store: Store,
    coordinators: Vec<Coordinator>,
    published: u64,
    /// The last arrival scheduled on each coordinator's link, each way.
    links: BTreeMap<(usize, bool), u64>,
    /// Partitions whose leadership is moving: since when, and whether it
    /// is a take-over (a fault) rather than a hand-over.
    moving: BTreeMap<PartitionId, (u64, Cause)>,
    report: Report,
    digest: fnv::FnvHasher,
}

impl World {
    pub fn new(seed: u64, settings: Settings) -> Self {
        let partitioning = Partitioning::new(settings.partitions).expect("a partition count");
        let runs = partitioning
            .all()
            .flat_map(|p| (0..settings.runs_per_partition).map(move |r| (p, r)));
        Self {
            settings,
            partitioning,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            store: Store::new(runs),
            coordinators: Vec::new(),
            published: 0,
            links: BTreeMap::new(),
            moving: BTreeMap::new(),
            report: Report {
                seed,
                events: 0,
                virtual_ms: 0,
                hand_overs: Vec::new(),
                take_overs: Vec::new(),
                after_kills: Vec::new(),
                faults: BTreeMap::new(),
                fenced_writes: 0,
                waves_merged: 0,
                digest: 0,
            },
            digest: fnv::FnvHasher::default(),
        }
    }

    fn at(&mut self, time: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq)));
        self.events.insert(self.seq, event);
    }

    /// The whole scenario: start, settle, then each fault and settle again,
    /// then check that every run still moves.
    pub fn run(mut self) -> Result<Report, String> {
        for slot in 0..self.settings.coordinators {
            self.coordinators.push(Coordinator::new(slot, 0));
            let start = self.rng.random_range(0..500);
            self.at(start, Event::KeepAlive { slot, life: 0 });
            let waves = start + self.rng.random_range(0..WAVE_EVERY);
            self.at(waves, Event::Waves { slot, life: 0 });
        }
        self.at(0, Event::StoreTick);
        self.settle("the group's start")?;
        for change in 0..self.settings.changes {
            let mut what = self.fault();
            if self.rng.random_bool(0.3) {
                what = format!("{what}, then at once {}", self.fault());
                // A kill's take-over is timed alone only when it is alone.
                for (_, cause) in self.moving.values_mut() {
                    if matches!(cause, Cause::Kill) {
                        *cause = Cause::Fault;
                    }
                }
            }
            self.settle(&format!("change {} ({what})", change + 1))?;
        }
        // Every run of every partition still advances.
        let before = self.store.waves.clone();
        let until = self.now + 4 * WAVE_EVERY;
        self.run_until(until, |_| false)?;
        for (run, (wave, _)) in &self.store.waves {
            if *wave <= before[run].0 {
                return Err(format!(
                    "run {run:?} did not advance after the last change: lost"
                ));
            }
        }
        self.check()?;
        self.report.virtual_ms = self.now;
        self.report.fenced_writes = self.store.fenced;
        self.report.waves_merged = self.store.waves.values().map(|(w, _)| u64::from(*w)).sum();
        self.report.digest = self.digest.finish();
        Ok(self.report)
    }

    fn check(&self) -> Result<(), String> {
        match self.store.violations.first() {
            Some(violation) => Err(violation.0.clone()),
            None => Ok(()),
        }
    }

    /// Runs until the group settles, or fails after `SETTLE_WITHIN`.
    fn settle(&mut self, after: &str) -> Result<(), String> {
        let deadline = self.now + SETTLE_WITHIN;
        if self.run_until(deadline, |world| world.settled())? {
            return Ok(());
        }
        Err(format!(
            "the group did not settle within {} s of virtual time after {after}: {}",
            SETTLE_WITHIN / 1000,
            self.unsettled()
        ))
    }

    /// Processes events until `done` (checked at each store tick) or
    /// `deadline`; whether `done` came.
    fn run_until(&mut self, deadline: u64, done: impl Fn(&Self) -> bool) -> Result<bool, String> {
        while let Some(Reverse((time, seq))) = self.queue.pop() {
            if time > deadline {
                self.queue.push(Reverse((time, seq)));
                self.now = deadline;
                return Ok(false);
            }
            self.now = time;
            let event = self.events.remove(&seq).expect("a queued event");
            let (kind, slot) = event.tag();
            self.digest.write_u64(time);
            self.digest.write_u64(kind);
            self.digest.write_usize(slot);
            self.report.events += 1;
            let tick = matches!(event, Event::StoreTick);
            self.handle(event);
            self.check()?;
            if tick && done(self) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::StoreTick => {
                for partition in self.store.expire(self.now) {
                    self.moving
                        .entry(partition)
                        .or_insert((self.now, Cause::Fault));
                }
                if self.store.revision > self.published {
                    self.published = self.store.revision;
                    let view = Arc::new(View::new(self.partitioning, self.store.holding()));
                    for slot in 0..self.coordinators.len() {
                        let c = &self.coordinators[slot];
                        if c.alive {
                            let life = c.life;
                            self.answer(slot, |_| Event::Viewed {
                                slot,
                                life,
                                view: view.clone(),
                            });
                        }
                    }
                }
                self.at(self.now + VIEW_EVERY, Event::StoreTick);
            }
            Event::ToStore {
                slot,
                life,
                from,
                sent,
                request,
            } => {
                let reply = self.store.handle(self.now, TTL, &from, sent, request);
                if self.coordinators[slot].life == life {
                    self.answer(slot, |life| Event::ToCoordinator { slot, life, reply });
                }
            }
            Event::Restart { slot } => {
                let life = self.coordinators[slot].life + 1;
                self.coordinators[slot] = Coordinator::new(slot, life);
                self.at(self.now, Event::KeepAlive { slot, life });
                self.at(self.now + WAVE_EVERY, Event::Waves { slot, life });
            }
            other => self.deliver(other),
        }
    }

    /// Sends from the store to `slot`'s current life, over its network.
    fn answer(&mut self, slot: usize, event: impl FnOnce(u32) -> Event) {
        let c = &self.coordinators[slot];
        if !c.alive {
            return;
        }
        let life = c.life;
        let arrival = self.arrival(slot, false);
        self.at(arrival, event(life));
    }

    /// When a message sent now over `slot`'s link (`to_store` or back)
    /// arrives: after a random delay, and never before one sent earlier
    /// the same way (a connection keeps its order).
    fn arrival(&mut self, slot: usize, to_store: bool) -> u64 {
        let delay = if self.coordinators[slot].slow_network_until > self.now {
            self.rng.random_range(500..4_000)
        } else {
            self.rng.random_range(1..=5)
        };
        // Cut off, a connection holds what it carries until it heals.
        let from = self.now.max(self.coordinators[slot].cut_until);
        let last = self.links.entry((slot, to_store)).or_insert(0);
        *last = (*last).max(from + delay);
        *last
    }

    /// Sends a request from `slot` to the store.
    fn send(&mut self, slot: usize, request: Request) {
        let c = &self.coordinators[slot];
        let (life, from) = (c.life, c.member.id().clone());
        let arrival = self.arrival(slot, true);
        let sent = self.now;
        self.at(
            arrival,
            Event::ToStore {
                slot,
                life,
                from,
                sent,
                request,
            },
        );
    }

    fn deliver(&mut self, event: Event) {
        let (slot, life) = match &event {
            Event::ToCoordinator { slot, life, .. }
            | Event::Viewed { slot, life, .. }
            | Event::KeepAlive { slot, life }
            | Event::Waves { slot, life }
            | Event::Drained { slot, life, .. } => (*slot, *life),
            _ => unreachable!("a coordinator's event"),
        };
        let c = &self.coordinators[slot];
        if !c.alive || c.life != life {
            return;
        }
        if c.paused_until > self.now {
            // A paused process takes its events up when it resumes.
            let resume = c.paused_until;
            self.at(resume, event);
            return;
        }
        match event {
            Event::KeepAlive { .. } => {
                let request = match self.coordinators[slot].session_until {
                    Some(until) if until <= self.now => {
                        // Not renewed for its whole time to live: it
                        // leads nothing, and opens a new session.
                        self.lost(slot);
                        Request::Register
                    }
                    Some(_) => Request::KeepAlive,
                    None => Request::Register,
                };
                self.send(slot, request);
                self.at(self.now + KEEP_ALIVE, Event::KeepAlive { slot, life });
            }
            Event::Waves { .. } => {
                self.waves(slot);
                self.at(self.now + WAVE_EVERY, Event::Waves { slot, life });
            }
            Event::Viewed { view, .. } => {
                let c = &mut self.coordinators[slot];
                if view.holding().revision > c.seen_revision {
                    c.seen_revision = view.holding().revision;
                    self.input(slot, Input::Viewed(&view));
                }
            }
            Event::Drained { partition, .. } => {
                self.coordinators[slot].served.remove(&partition);
                self.input(slot, Input::Drained(partition));
            }
            Event::ToCoordinator { reply, .. } => self.reply(slot, reply),
            _ => unreachable!(),
        }
    }

    /// One wave for each run of the partitions `slot` serves, unless its
    /// session has run out.
    fn waves(&mut self, slot: usize) {
        let now = self.now;
        let c = &mut self.coordinators[slot];
        if c.session_until.is_none_or(|until| until <= now) {
            return;
        }
        let mut writes = Vec::new();
        for served in c.served.values_mut() {
            if !served.restored || served.draining {
                continue;
            }
            for (run, (wave, in_flight)) in &mut served.runs {
                // A write unanswered for two seconds is sent again.
                if in_flight.is_none_or(|since| now - since >= RESEND_AFTER) {
                    *in_flight = Some(now);
                    writes.push(Request::Write {
                        run: *run,
                        fence: served.fence,
                        wave: *wave + 1,
                    });
                }
            }
        }
        for write in writes {
            self.send(slot, write);
        }
    }

    fn reply(&mut self, slot: usize, reply: Reply) {
        match reply {
            Reply::KeptAlive { sent } => {
                self.coordinators[slot].session_until = Some(sent + TTL);
            }
            Reply::SessionGone => {
                if self.coordinators[slot].session_until.is_some() {
                    self.lost(slot);
                }
            }
            Reply::Acquired(partition, fence) => {
                self.input(slot, Input::Acquired { partition, fence })
            }
            Reply::Refused(partition) => self.input(slot, Input::Refused(partition)),
            Reply::Released(partition) => self.input(slot, Input::Released(partition)),
            Reply::Restored(partition, fence, runs) => {
                let Some(served) = self.coordinators[slot].served.get_mut(&partition) else {
                    return;
                };
                if served.fence != fence || served.restored {
                    return;
                }
                served.restored = true;
                served.runs = runs.into_iter().map(|(r, w)| (r, (w, None))).collect();
                if let Some((since, cause)) = self.moving.remove(&partition) {
                    let took = self.now - since;
                    match cause {
                        Cause::HandOver => self.report.hand_overs.push(took),
                        Cause::Fault => self.report.take_overs.push(took),
                        Cause::Kill => {
                            self.report.take_overs.push(took);
                            self.report.after_kills.push(took);
                        }
                    }
                }
            }
            Reply::Written(run, fence, wave) => {
                // An answer to another term's write is not this one's.
                let Some(served) = self.coordinators[slot]
                    .served
                    .get_mut(&run.0)
                    .filter(|s| s.fence == fence)
                else {
                    return;
                };
                if let Some(state) = served.runs.get_mut(&run).filter(|(w, _)| *w < wave) {
                    *state = (wave, None);
                }
                self.checkpoint_if_drained(slot, run.0);
            }
            Reply::Fenced(partition) => {
                // Deposed: the partition's term is over here. A drain
                // under way ends with it.
                self.coordinators[slot].served.remove(&partition);
                let draining = matches!(
                    self.coordinators[slot].member.shares().get(&partition),
                    Some(Share::Draining { .. })
                );
                if draining {
                    self.input(slot, Input::Drained(partition));
                }
            }
        }
    }

    /// A draining partition whose writes are all answered checkpoints its
    /// run actors on the coordinator's disk, then says it is drained.
    fn checkpoint_if_drained(&mut self, slot: usize, partition: PartitionId) {
        let now = self.now;
        let c = &mut self.coordinators[slot];
        let life = c.life;
        let slow = c.slow_disk_until > now;
        let Some(served) = c.served.get_mut(&partition) else {
            return;
        };
        if !served.draining
            || served.checkpointing
            || served.runs.values().any(|(_, f)| f.is_some())
        {
            return;
        }
        served.checkpointing = true;
        let disk = if slow {
            self.rng.random_range(300..1_500)
        } else {
            self.rng.random_range(2..10)
        };
        self.at(
            now + disk,
            Event::Drained {
                slot,
                life,
                partition,
            },
        );
    }

    /// The session is gone: the member leads nothing, and the next session
    /// is a new member.
    fn lost(&mut self, slot: usize) {
        self.input(slot, Input::Lost);
        let c = &mut self.coordinators[slot];
        c.session_until = None;
        c.sessions += 1;
        c.member = Member::new(MemberId(format!("c{}.{}.{}", c.slot, c.life, c.sessions)));
    }

    /// Feeds the slot's member and carries out what it says.
    fn input(&mut self, slot: usize, input: Input<'_>) {
        let commands = self.coordinators[slot].member.step(input);
        for command in commands {
            match command {
                Command::Acquire(partition) => self.send(slot, Request::Acquire(partition)),
                Command::Serve { partition, fence } => {
                    let served = Served {
                        fence,
                        ..Served::default()
                    };
                    self.coordinators[slot].served.insert(partition, served);
                    self.send(slot, Request::Restore(partition, fence));
                }
                Command::Drain(partition) => {
                    self.moving
                        .entry(partition)
                        .or_insert((self.now, Cause::HandOver));
                    match self.coordinators[slot].served.get_mut(&partition) {
                        Some(served) => {
                            served.draining = true;
                            self.checkpoint_if_drained(slot, partition);
                        }
                        None => {
                            let life = self.coordinators[slot].life;
                            self.at(
                                self.now,
                                Event::Drained {
                                    slot,
                                    life,
                                    partition,
                                },
                            );
                        }
                    }
                }
                Command::Release { partition, fence } => {
                    self.coordinators[slot].served.remove(&partition);
                    self.send(slot, Request::Release(partition, fence));
                }
                Command::Abandon(partition) => {
                    self.coordinators[slot].served.remove(&partition);
                }
                Command::Left => {
                    self.coordinators[slot].alive = false;
                    let back = self.now + self.rng.random_range(1_000..5_000);
                    self.at(back, Event::Restart { slot });
                }
            }
        }
    }

    /// Injects one fault drawn from the seed; says which.
    fn fault(&mut self) -> String {
        let live: Vec<usize> = (0..self.coordinators.len())
            .filter(|s| self.coordinators[*s].alive)
            .collect();
        let slot = live[self.rng.random_range(0..live.len())];
        let now = self.now;
        let kinds = [
            "kill",
            "leave",
            "pause",
            "cut",
            "slow network",
            "slow disk",
            "revoke",
            "partition lease",
        ];
        let mut kind = kinds[self.rng.random_range(0..kinds.len())];
        // The last coordinator standing is never stopped.
        if live.len() == 1 && matches!(kind, "kill" | "leave") {
            kind = "pause";
        }
        *self.report.faults.entry(kind).or_default() += 1;
        let held: Vec<PartitionId> = self.coordinators[slot]
            .member
            .leading()
            .map(|(p, _)| p)
            .collect();
        let id = self.coordinators[slot].member.id().clone();
        let what = match kind {
            "kill" => {
                self.coordinators[slot].alive = false;
                for partition in held {
                    self.moving.insert(partition, (now, Cause::Kill));
                }
                let back = now + self.rng.random_range(1_000..5_000);
                self.at(back, Event::Restart { slot });
                format!("{id} killed")
            }
            "leave" => {
                self.input(slot, Input::Leave);
                format!("{id} leaving")
            }
            "pause" => {
                let d = self.rng.random_range(500..6_000);
                self.coordinators[slot].paused_until = now + d;
                format!("{id} paused {d} ms")
            }
            "cut" => {
                let d = self.rng.random_range(1_000..6_000);
                self.coordinators[slot].cut_until = now + d;
                format!("{id} cut off from the store {d} ms")
            }
            "slow network" => {
                let d = self.rng.random_range(2_000..8_000);
                self.coordinators[slot].slow_network_until = now + d;
                format!("{id}'s network slow for {d} ms")
            }
            "slow disk" => {
                self.coordinators[slot].slow_disk_until = now + 5_000;
                format!("{id}'s disk slow")
            }
            "revoke" => {
                for partition in held {
                    self.moving.insert(partition, (now, Cause::Fault));
                }
                self.store.revoke(&id);
                format!("{id}'s session revoked")
            }
            _ => match held.get(self.rng.random_range(0..held.len().max(1))) {
                Some(&partition) if self.store.drop_lease(partition) => {
                    self.moving.insert(partition, (now, Cause::Fault));
                    format!("{id}'s lease of {partition} lost")
                }
                _ => format!("{id} held no lease to lose"),
            },
        };
        let time = self.now;
        format!("{what} at {time} ms")
    }

    /// Every partition led by a live member that serves it, each member
    /// within one of even, nothing being handed over, no fault in force.
    fn settled(&self) -> bool {
        self.unsettled().is_empty()
    }

    fn unsettled(&self) -> String {
        let now = self.now;
        let live: Vec<&Coordinator> = self.coordinators.iter().filter(|c| c.alive).collect();
        let faulty = live.iter().any(|c| {
            c.paused_until > now
                || c.cut_until > now
                || c.slow_network_until > now
                || c.slow_disk_until > now
        });
        if faulty {
            return "a fault is in force".into();
        }
        let holding = self.store.holding();
        if holding.members.len() != live.len() {
            return format!(
                "{} members in the store, {} coordinators alive",
                holding.members.len(),
                live.len()
            );
        }
        let n = live.len() as u32;
        let (base, extra) = (self.partitioning.count() / n, self.partitioning.count() % n);
        let mut at_most_one_more = 0;
        for c in &live {
            let served = c.served.values().filter(|s| s.restored).count() as u32;
            let busy = c
                .member
                .shares()
                .values()
                .any(|s| !matches!(s, Share::Leading { .. }));
            if busy {
                return format!("{} is handing over or acquiring", c.member.id());
            }
            if served != c.member.shares().len() as u32 {
                return format!("{} has partitions it does not serve yet", c.member.id());
            }
            if served < base || served > base + 1 {
                return format!(
                    "{} leads {served}, not {base} or {}",
                    c.member.id(),
                    base + 1
                );
            }
            at_most_one_more += u32::from(served == base + 1);
        }
        if at_most_one_more != extra || holding.holders.len() as u32 != self.partitioning.count() {
            return format!(
                "{} of {} partitions held",
                holding.holders.len(),
                self.partitioning.count()
            );
        }
        String::new()
    }
}
