//! The group's flow authority (SPEC 18 and 21): the `[[limits]]` and the
//! concurrency keys of a partitioned group, held in one place — by the
//! leader of partition 0 — for every member, so that a limit of 64 calls
//! in flight or a key of `max: 2` means that across the group and not per
//! coordinator.
//!
//! Members ask for what a task needs before it starts — its concurrency
//! key, and its first model call under the limits that count it — and for
//! each later call of a running step ([`Ask`]), each ask named by the
//! member's ticket. An ask is granted at once or queued, in arrival order
//! across every member; its member is told once that it waits (the limit,
//! and how long by time alone) and again when it is granted. A member
//! settles a call with the provider's usage and releases a ticket when its
//! task ends; a member whose connection ends has everything it held given
//! back and its asks dropped (it declares them again when it reconnects,
//! to this authority or to the next).
//!
//! A new authority (partition 0 moved, or its leader died) starts with
//! nothing in flight: each member declares what it holds ([`Ask::held`]),
//! which is counted without asking — the recount — and asks again for
//! what waits. Until every member of the group has declared (or a lease's
//! time has passed: a member that never comes holds nothing the group
//! still counts) it grants nothing, so no ask is granted what an
//! undeclared holding still has.
//!
//! It also holds the namespaces' caps on runs going (`max_running_runs`)
//! and their day budgets for the group: a member asks before it starts a
//! new run ([`FlowAuthority::admit_run`]); each partition's leader reports
//! the runs going in it ([`FlowAuthority::report_going`], keyed by
//! partition, so a count outlives its leader until the next leader
//! reports); every member's calls add what they spent
//! ([`FlowAuthority::spend`]).
//!
//! Pure: no clock, no channel; the adapter is `crate::ha::flow_authority`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::limits::{GrantId, RateLimits, Settlement, Subject, Wait};

/// A member's connection, numbered by the authority.
pub type MemberId = u64;

/// A member's number for one of its asks.
pub type Ticket = u64;

/// Who holds a grant: a member's ticket.
type Owner = (MemberId, Ticket);

/// A concurrency key as a task renders it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Keyed {
    /// The run's namespace: keys are counted per namespace.
    pub namespace: Arc<str>,
    /// The rendered key.
    pub key: String,
    /// At most this many run at once.
    pub max: u32,
}

/// What a member asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Its number, the member's.
    pub ticket: Ticket,
    /// The concurrency key its task holds while it runs (a task's start
    /// only).
    pub keyed: Option<Keyed>,
    /// The model call (or task) the limits count, if any may.
    pub subject: Option<Subject>,
    /// The tokens the call is expected to use.
    pub tokens: u64,
    /// Granted by an earlier authority and declared again: counted, never
    /// refused.
    pub held: bool,
}

/// What the authority tells a member about one of its tickets.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Granted; `limited` when some limit counts it (its grant is to be
    /// settled).
    Granted {
        /// The ticket.
        ticket: Ticket,
        /// A limit counts it.
        limited: bool,
    },
    /// A new run may start.
    RunAdmitted {
        /// The ticket.
        ticket: Ticket,
    },
    /// A new run may not start.
    RunRefused {
        /// The ticket.
        ticket: Ticket,
        /// Why.
        refusal: RunRefusal,
    },
    /// It waits (told once per ask).
    Waits {
        /// The ticket.
        ticket: Ticket,
        /// The limit or key that holds it.
        limit: Arc<str>,
        /// How long by time alone; `None`: until something in flight ends.
        wait: Option<Duration>,
        /// A concurrency key holds it.
        keyed: bool,
    },
}

/// An ask in the queue.
#[derive(Debug)]
struct Queued {
    member: MemberId,
    ask: Ask,
    told: bool,
}

/// What a granted ticket holds.
#[derive(Debug, Default)]
struct Holding {
    key: Option<(Arc<str>, String)>,
    grant: Option<GrantId>,
}

/// Why the group refuses a new run of a namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum RunRefusal {
    /// As many of its runs are going as its `max_running_runs` allows.
    TooMany {
        /// Its runs going, group-wide.
        running: usize,
        /// Its cap.
        max: u32,
    },
    /// Its day budget is spent (the lone coordinator's words).
    DaySpent(String),
}

/// The namespaces' caps on runs going and their day budgets, as the
/// group counts them: each partition's runs going as its leader last
/// reported them (a report of an earlier leader, by its lease's revision,
/// is ignored), the runs admitted but not yet in a report, and what every
/// member's calls spent today.
#[derive(Debug, Default)]
struct RunCounts {
    caps: HashMap<String, u32>,
    days: crate::day_spend::DaySpend,
    /// Per partition: the reporting leader's revision and its counts.
    going: HashMap<u32, (i64, HashMap<String, u32>)>,
    reserved: HashMap<Owner, String>,
    /// Asked during a recount: answered when it ends.
    asked: Vec<(MemberId, Ticket, String, i64)>,
}

impl RunCounts {
    fn going(&self, namespace: &str) -> usize {
        let reported: u32 = self
            .going
            .values()
            .filter_map(|(_, counts)| counts.get(namespace))
            .sum();
        let reserved = self.reserved.values().filter(|ns| *ns == namespace).count();
        reported as usize + reserved
    }

    fn admit(&mut self, owner: Owner, namespace: String, now_ms: i64) -> Answer {
        let ticket = owner.1;
        if let Some(&max) = self.caps.get(&namespace) {
            let running = self.going(&namespace);
            if running >= max as usize {
                return Answer::RunRefused {
                    ticket,
                    refusal: RunRefusal::TooMany { running, max },
                };
            }
        }
        if let Err(spent) = self.days.check(&namespace, now_ms) {
            return Answer::RunRefused {
                ticket,
                refusal: RunRefusal::DaySpent(spent),
            };
        }
        self.reserved.insert(owner, namespace);
        Answer::RunAdmitted { ticket }
    }
}

/// A new authority's recount: the members it waits for to declare what
/// they hold before it grants anything, and until when at most.
#[derive(Debug)]
struct Recount {
    waiting_for: BTreeSet<String>,
    until: Instant,
}

/// The authority's state; see the module docs.
#[derive(Debug, Default)]
pub struct FlowAuthority {
    rates: RateLimits<Owner>,
    keys: HashMap<(Arc<str>, String), u32>,
    holdings: HashMap<Owner, Holding>,
    queue: VecDeque<Queued>,
    wake: Option<Instant>,
    recount: Option<Recount>,
    runs: RunCounts,
}

impl FlowAuthority {
    /// The authority over `rates` (the group's `[[limits]]`).
    pub fn new(rates: RateLimits<Owner>) -> Self {
        Self {
            rates,
            ..Self::default()
        }
    }

    /// The authority over the namespaces' `max_running_runs` (`caps`) and
    /// day budgets (`days`, started from what the last authority kept).
    pub fn with_runs(
        mut self,
        caps: HashMap<String, u32>,
        days: crate::day_spend::DaySpend,
    ) -> Self {
        self.runs.caps = caps;
        self.runs.days = days;
        self
    }

    /// What the namespaces with day budgets spent today, to keep.
    pub fn days(&self) -> &crate::day_spend::DaySpend {
        &self.runs.days
    }

    /// `member` asks whether a new run of `namespace` may start (at
    /// `now_ms`, for the day budgets): admitted (counted as going until
    /// the member releases the ticket, once its partition's report counts
    /// the run) or refused; during a recount, answered when it ends.
    pub fn admit_run(
        &mut self,
        member: MemberId,
        ticket: Ticket,
        namespace: String,
        now_ms: i64,
    ) -> Vec<(MemberId, Answer)> {
        if self.recount.is_some() {
            self.runs.asked.push((member, ticket, namespace, now_ms));
            return Vec::new();
        }
        vec![(member, self.runs.admit((member, ticket), namespace, now_ms))]
    }

    /// Partition `partition`'s leader (its lease at `revision`) reports
    /// the runs going in it, by namespace; a report of an earlier leader
    /// is ignored.
    pub fn report_going(&mut self, partition: u32, revision: i64, counts: HashMap<String, u32>) {
        let entry = self
            .runs
            .going
            .entry(partition)
            .or_insert((revision, HashMap::new()));
        if revision >= entry.0 {
            *entry = (revision, counts);
        }
    }

    /// A member's model calls spent `tokens` and `cost` of `namespace`'s
    /// day.
    pub fn spend(&mut self, namespace: &str, tokens: u64, cost: f64, now_ms: i64) {
        self.runs.days.add(namespace, tokens, cost, now_ms);
    }

    /// Runs of `namespace` going, group-wide, as counted now.
    pub fn runs_going(&self, namespace: &str) -> usize {
        self.runs.going(namespace)
    }

    /// Grants nothing until each of `members` (by name) has declared what
    /// it holds, or until `until`: a member that asked again before another
    /// declared its holding would otherwise be granted what is held.
    pub fn recounting(mut self, members: BTreeSet<String>, until: Instant) -> Self {
        if !members.is_empty() {
            self.wake = Some(until);
            self.recount = Some(Recount {
                waiting_for: members,
                until,
            });
        }
        self
    }

    /// Whether it still waits for members' declarations.
    pub fn is_recounting(&self) -> bool {
        self.recount.is_some()
    }

    /// Member `name` has declared everything it holds.
    pub fn declared(&mut self, name: &str, now: Instant) -> Vec<(MemberId, Answer)> {
        let Some(recount) = &mut self.recount else {
            return Vec::new();
        };
        recount.waiting_for.remove(name);
        if recount.waiting_for.is_empty() {
            self.recount = None;
            return self.serve(now);
        }
        Vec::new()
    }

    /// The limits, for their windows.
    pub fn rates(&mut self) -> &mut RateLimits<Owner> {
        &mut self.rates
    }

    /// When an ask waiting by time alone may go: call [`Self::tick`] then.
    pub fn wake(&self) -> Option<Instant> {
        self.wake
    }

    /// Asks waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Tasks holding `keyed`'s key now.
    pub fn holding(&self, namespace: &str, key: &str) -> u32 {
        self.keys
            .get(&(Arc::from(namespace), key.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// `member` asks: granted now (a declared holding always is), or
    /// queued behind what waits before it.
    pub fn ask(&mut self, member: MemberId, ask: Ask, now: Instant) -> Vec<(MemberId, Answer)> {
        let owner = (member, ask.ticket);
        if self.holdings.contains_key(&owner)
            || self
                .queue
                .iter()
                .any(|q| q.member == member && q.ask.ticket == ask.ticket)
        {
            // Asked twice (a member's resend): the first stands.
            return Vec::new();
        }
        if ask.held {
            let grant = ask
                .subject
                .as_ref()
                .and_then(|subject| self.rates.hold(subject, &owner));
            let key = ask.keyed.map(|keyed| {
                let held = (keyed.namespace, keyed.key);
                *self.keys.entry(held.clone()).or_default() += 1;
                held
            });
            self.holdings.insert(owner, Holding { key, grant });
            return Vec::new();
        }
        self.queue.push_back(Queued {
            member,
            ask,
            told: false,
        });
        self.serve(now)
    }

    /// `member` settles its ticket's call with what the provider reported:
    /// its limits are corrected and their places in flight given back (a
    /// task's key stays held until its release).
    pub fn settle(
        &mut self,
        member: MemberId,
        ticket: Ticket,
        call: &Settlement,
        now: Instant,
    ) -> Vec<(MemberId, Answer)> {
        let owner = (member, ticket);
        let Some(grant) = self
            .holdings
            .get_mut(&owner)
            .and_then(|holding| holding.grant.take())
        else {
            return Vec::new();
        };
        self.rates.settle(grant, &owner, call, now);
        if self
            .holdings
            .get(&owner)
            .is_some_and(|holding| holding.key.is_none())
        {
            self.holdings.remove(&owner);
        }
        self.serve(now)
    }

    /// `member` is done with its ticket (its task ended, or went back to
    /// its queue): what it held is given back, or its ask dropped.
    pub fn release(
        &mut self,
        member: MemberId,
        ticket: Ticket,
        now: Instant,
    ) -> Vec<(MemberId, Answer)> {
        self.runs.reserved.remove(&(member, ticket));
        let before = self.queue.len();
        self.queue
            .retain(|q| !(q.member == member && q.ask.ticket == ticket));
        let dropped = self.queue.len() != before;
        let freed = self.let_go((member, ticket));
        if freed || dropped {
            self.serve(now)
        } else {
            Vec::new()
        }
    }

    /// `member`'s connection ended: everything it held is given back and
    /// its asks are dropped.
    pub fn gone(&mut self, member: MemberId, now: Instant) -> Vec<(MemberId, Answer)> {
        self.queue.retain(|q| q.member != member);
        self.runs.reserved.retain(|(m, _), _| *m != member);
        self.runs.asked.retain(|(m, ..)| *m != member);
        let owners: Vec<Owner> = self
            .holdings
            .keys()
            .filter(|(m, _)| *m == member)
            .copied()
            .collect();
        for owner in owners {
            self.let_go(owner);
        }
        self.serve(now)
    }

    /// Time passed: asks a window held may go; a recount that waited its
    /// time ends (a member that never declared is taken to hold nothing).
    pub fn tick(&mut self, now: Instant) -> Vec<(MemberId, Answer)> {
        if self.recount.as_ref().is_some_and(|r| r.until <= now) {
            self.recount = None;
            return self.serve(now);
        }
        if self.wake.is_some_and(|at| at <= now) {
            self.serve(now)
        } else {
            Vec::new()
        }
    }

    /// Gives back what `owner` held; whether it held anything.
    fn let_go(&mut self, owner: Owner) -> bool {
        let Some(holding) = self.holdings.remove(&owner) else {
            return false;
        };
        if holding.grant.is_some() {
            self.rates.release(&owner);
        }
        if let Some(held) = holding.key
            && let Some(count) = self.keys.get_mut(&held)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.keys.remove(&held);
            }
        }
        true
    }

    /// Grants what waits, in order; an ask behind a limit or key that
    /// refused an earlier one in this pass waits without being tried (a
    /// queue of thousands behind one limit costs one refusal a pass).
    fn serve(&mut self, now: Instant) -> Vec<(MemberId, Answer)> {
        if let Some(recount) = &self.recount {
            self.wake = Some(recount.until);
            return Vec::new();
        }
        self.wake = None;
        let mut answers = Vec::new();
        for (member, ticket, namespace, asked_ms) in std::mem::take(&mut self.runs.asked) {
            let answer = self.runs.admit((member, ticket), namespace, asked_ms);
            answers.push((member, answer));
        }
        let mut refused_subjects: Vec<(Subject, Wait)> = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        while let Some(mut queued) = self.queue.pop_front() {
            let owner = (queued.member, queued.ask.ticket);
            let wait = self.try_grant(&queued.ask, owner, now, &mut refused_subjects);
            match wait {
                None => {
                    let limited = self
                        .holdings
                        .get(&owner)
                        .is_some_and(|holding| holding.grant.is_some());
                    if self
                        .holdings
                        .get(&owner)
                        .is_some_and(|holding| holding.grant.is_none() && holding.key.is_none())
                    {
                        // Nothing counts it: nothing to give back later.
                        self.holdings.remove(&owner);
                    }
                    answers.push((
                        queued.member,
                        Answer::Granted {
                            ticket: queued.ask.ticket,
                            limited,
                        },
                    ));
                }
                Some((wait, keyed)) => {
                    if let Some(until) = wait.until {
                        self.wake = Some(self.wake.map_or(until, |at| at.min(until)));
                    }
                    if !std::mem::replace(&mut queued.told, true) {
                        answers.push((
                            queued.member,
                            Answer::Waits {
                                ticket: queued.ask.ticket,
                                limit: wait.limit,
                                wait: wait.until.map(|until| until.saturating_duration_since(now)),
                                keyed,
                            },
                        ));
                    }
                    kept.push_back(queued);
                }
            }
        }
        self.queue = kept;
        answers
    }

    /// Grants `ask` to `owner`, or says what holds it (and whether that is
    /// a key).
    fn try_grant(
        &mut self,
        ask: &Ask,
        owner: Owner,
        now: Instant,
        refused: &mut Vec<(Subject, Wait)>,
    ) -> Option<(Wait, bool)> {
        if let Some(keyed) = &ask.keyed {
            let held = self
                .keys
                .get(&(keyed.namespace.clone(), keyed.key.clone()))
                .copied()
                .unwrap_or(0);
            if held >= keyed.max {
                let limit = format!("concurrency key '{}' (max {})", keyed.key, keyed.max);
                return Some((
                    Wait {
                        limit: limit.into(),
                        until: None,
                    },
                    true,
                ));
            }
        }
        let mut grant = None;
        if let Some(subject) = &ask.subject {
            if let Some((_, wait)) = refused.iter().find(|(s, _)| s == subject) {
                return Some((wait.clone(), false));
            }
            match self.rates.admit(subject, ask.tokens, &owner, now) {
                Ok(granted) => grant = granted,
                Err(wait) => {
                    refused.push((subject.clone(), wait.clone()));
                    return Some((wait, false));
                }
            }
        }
        let key = ask.keyed.as_ref().map(|keyed| {
            let held = (keyed.namespace.clone(), keyed.key.clone());
            *self.keys.entry(held.clone()).or_default() += 1;
            held
        });
        self.holdings.insert(owner, Holding { key, grant });
        None
    }
}

#[cfg(test)]
#[path = "group_flow_tests.rs"]
mod tests;
