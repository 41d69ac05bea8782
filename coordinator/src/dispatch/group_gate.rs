//! A member's side of the group's flow authority
//! ([`super::group_flow`]): what the registry of a coordinator in a
//! partitioned group asks for before a task that a concurrency key or a
//! `[[limits]]` entry counts may start, and before each later model call
//! of a running step.
//!
//! Each ask has a ticket; the registry asks again at each placing pass
//! and is told whether the ticket was granted, waits (and for what), or is
//! still unanswered. What goes to the authority collects in an outbox the
//! dispatcher sends on. A ticket is released when its job ends or goes
//! back to its queue, and a call's ticket is settled with the provider's
//! usage; a granted ticket's number is the grant the worker reports the
//! usage under.
//!
//! When the connection to the authority is made again (a new leader of
//! partition 0, or the same after a cut), [`GroupGate::declare`] gives
//! everything granted as held — the new authority's recount — and
//! everything unanswered as asked again. While there is no connection
//! nothing is sent; asks wait.
//!
//! Pure: no clock, no channel.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::group_flow::{Answer, Ask, Keyed, Ticket};
use super::jobs::JobId;
use super::limits::{Settlement, Subject};

/// What the member sends the authority.
#[derive(Debug, Clone, PartialEq)]
pub enum ToAuthority {
    /// An ask, or a holding declared.
    Ask(Ask),
    /// A call's usage.
    Settle {
        /// The call's ticket.
        ticket: Ticket,
        /// What the call was.
        call: Settlement,
    },
    /// A ticket no longer needed.
    Release(Ticket),
    /// Everything held was declared (after a connection is made).
    Declared,
    /// May a new run of this namespace start?
    AdmitRun {
        /// The ask's number.
        ticket: Ticket,
        /// The run's namespace.
        namespace: String,
    },
    /// The runs going in a partition led here, by namespace.
    Going {
        /// The partition.
        partition: u32,
        /// Its lease's revision here.
        revision: i64,
        /// Runs going, by namespace.
        counts: BTreeMap<String, u32>,
    },
    /// A model call spent this of a namespace's day.
    Spent {
        /// The namespace.
        namespace: String,
        /// Prompt and completion tokens.
        tokens: u64,
        /// Its cost.
        cost: f64,
    },
}

/// What the registry may do with a job or call that asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Gated {
    /// It goes: `grant` is its ticket when a limit counts it (0 when none).
    Go {
        /// The grant to settle its call under; 0: none.
        grant: u64,
    },
    /// The authority holds it.
    Waits {
        /// What holds it.
        limit: std::sync::Arc<str>,
        /// How long by time alone, as the authority said.
        wait: Option<Duration>,
        /// A concurrency key holds it.
        keyed: bool,
    },
    /// Not answered yet.
    Asking,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Asking,
    Waits {
        limit: std::sync::Arc<str>,
        wait: Option<Duration>,
        keyed: bool,
    },
    Granted {
        limited: bool,
    },
}

#[derive(Debug)]
struct Asked {
    job: JobId,
    /// The ask as sent (declared again as held once granted).
    ask: Ask,
    state: State,
    /// A task's start (not a later call).
    start: bool,
}

/// The member's tickets; see the module docs.
#[derive(Debug, Default)]
pub struct GroupGate {
    last: Ticket,
    tickets: HashMap<Ticket, Asked>,
    /// Each job's start ticket.
    starts: HashMap<JobId, Ticket>,
    /// Running steps' calls not yet granted, by job and request.
    calls: HashMap<(JobId, u64), Ticket>,
    /// Every ticket of a job.
    by_job: HashMap<JobId, Vec<Ticket>>,
    outbox: Vec<ToAuthority>,
    connected: bool,
    /// New runs' admissions not answered yet, by ticket.
    runs_asked: BTreeMap<Ticket, String>,
    /// The runs going in each partition led here, as last reported.
    going: BTreeMap<u32, (i64, BTreeMap<String, u32>)>,
}

impl GroupGate {
    /// Asks for job `job`'s start: its key, and its first call's place
    /// under the limits that count `subject`.
    pub fn start(
        &mut self,
        job: &JobId,
        keyed: Option<Keyed>,
        subject: Option<Subject>,
        tokens: u64,
    ) -> Gated {
        if let Some(ticket) = self.starts.get(job) {
            return self.gated(*ticket);
        }
        let ticket = self.ask(job, keyed, subject, tokens, true);
        self.starts.insert(job.clone(), ticket);
        Gated::Asking
    }

    /// How job `job`'s start ask stands, if it asked.
    pub fn start_asked(&self, job: &JobId) -> Option<Gated> {
        self.starts.get(job).map(|ticket| self.gated(*ticket))
    }

    /// Asks for a running step's call `request`.
    pub fn call(&mut self, job: &JobId, request: u64, subject: Subject, tokens: u64) -> Gated {
        let asked = (job.clone(), request);
        if let Some(&ticket) = self.calls.get(&asked) {
            let gated = self.gated(ticket);
            if matches!(gated, Gated::Go { .. }) {
                self.calls.remove(&asked);
            }
            return gated;
        }
        let ticket = self.ask(job, None, Some(subject), tokens, false);
        self.calls.insert(asked, ticket);
        Gated::Asking
    }

    /// Asks whether a new run of `namespace` may start; the answer comes
    /// as [`Answer::RunAdmitted`] or [`Answer::RunRefused`] for the ticket.
    pub fn admit_run(&mut self, namespace: String) -> Ticket {
        self.last += 1;
        let ticket = self.last;
        if self.connected {
            self.outbox.push(ToAuthority::AdmitRun {
                ticket,
                namespace: namespace.clone(),
            });
        }
        self.runs_asked.insert(ticket, namespace);
        ticket
    }

    /// A run admission was answered; whether it was still asked.
    pub fn run_answered(&mut self, ticket: Ticket) -> bool {
        self.runs_asked.remove(&ticket).is_some()
    }

    /// An admitted run is counted by its partition's report now (or was
    /// never started): its ticket is released.
    pub fn release_run(&mut self, ticket: Ticket) {
        self.runs_asked.remove(&ticket);
        if self.connected {
            self.outbox.push(ToAuthority::Release(ticket));
        }
    }

    /// The runs going in `partition` (led here under `revision`), sent
    /// when they changed.
    pub fn report_going(&mut self, partition: u32, revision: i64, counts: BTreeMap<String, u32>) {
        let report = (revision, counts);
        if self.going.get(&partition) == Some(&report) {
            return;
        }
        if self.connected {
            self.outbox.push(ToAuthority::Going {
                partition,
                revision,
                counts: report.1.clone(),
            });
        }
        self.going.insert(partition, report);
    }

    /// `partition` is no longer led here: its counts are not declared
    /// again (its next leader reports them).
    pub fn forget_partition(&mut self, partition: u32) {
        self.going.remove(&partition);
    }

    /// A model call spent this of `namespace`'s day (lost while no
    /// authority is connected).
    pub fn spent(&mut self, namespace: String, tokens: u64, cost: f64) {
        if self.connected {
            self.outbox.push(ToAuthority::Spent {
                namespace,
                tokens,
                cost,
            });
        }
    }

    /// Start asks not answered yet: the registry has no more out at once
    /// than its free slots. (One the authority said waits is parked there,
    /// and does not keep others from being asked: a task behind a full
    /// key must not hold back one whose key is free.)
    pub fn unanswered_starts(&self) -> usize {
        self.starts
            .values()
            .filter(|t| {
                self.tickets
                    .get(t)
                    .is_some_and(|a| matches!(a.state, State::Asking))
            })
            .count()
    }

    /// A call of `job`'s ended: its ticket `grant` is settled with what it
    /// was. A grant this member does not know is ignored.
    pub fn settle(&mut self, job: &JobId, grant: u64, call: Settlement) {
        let Some(asked) = self.tickets.get_mut(&grant) else {
            return;
        };
        if asked.job != *job || !matches!(asked.state, State::Granted { limited: true }) {
            return;
        }
        asked.state = State::Granted { limited: false };
        let start = asked.start;
        // Declared again, it holds no call.
        asked.ask.subject = None;
        if self.connected {
            self.outbox.push(ToAuthority::Settle {
                ticket: grant,
                call,
            });
        }
        if !start {
            self.tickets.remove(&grant);
            if let Some(tickets) = self.by_job.get_mut(job) {
                tickets.retain(|t| *t != grant);
            }
        }
    }

    /// Job `job` ended or went back to its queue: every ticket of its is
    /// released.
    pub fn release(&mut self, job: &JobId) {
        self.starts.remove(job);
        let Some(tickets) = self.by_job.remove(job) else {
            return;
        };
        if !self.calls.is_empty() {
            self.calls.retain(|(j, _), _| j != job);
        }
        for ticket in tickets {
            if self.tickets.remove(&ticket).is_some() && self.connected {
                self.outbox.push(ToAuthority::Release(ticket));
            }
        }
    }

    /// The authority answered; whether the registry should place again.
    pub fn answer(&mut self, answer: Answer) -> bool {
        let (ticket, state) = match answer {
            Answer::Granted { ticket, limited } => (ticket, State::Granted { limited }),
            Answer::Waits {
                ticket,
                limit,
                wait,
                keyed,
            } => (ticket, State::Waits { limit, wait, keyed }),
            Answer::RunAdmitted { .. } | Answer::RunRefused { .. } => return false,
        };
        match self.tickets.get_mut(&ticket) {
            Some(asked) if !matches!(asked.state, State::Granted { .. }) => {
                asked.state = state;
                true
            }
            _ => false,
        }
    }

    /// Connected to an authority (again): everything granted is declared
    /// held, everything else asked again, in ticket order.
    pub fn declare(&mut self) {
        self.connected = true;
        self.outbox.clear();
        let mut tickets: Vec<Ticket> = self.tickets.keys().copied().collect();
        tickets.sort_unstable();
        let mut held = Vec::new();
        let mut asked = Vec::new();
        for ticket in tickets {
            let entry = self.tickets.get_mut(&ticket).expect("listed");
            let mut ask = entry.ask.clone();
            if matches!(entry.state, State::Granted { .. }) {
                ask.held = true;
                held.push(ToAuthority::Ask(ask));
            } else {
                entry.state = State::Asking;
                asked.push(ToAuthority::Ask(ask));
            }
        }
        self.outbox.extend(held);
        for (&partition, (revision, counts)) in &self.going {
            self.outbox.push(ToAuthority::Going {
                partition,
                revision: *revision,
                counts: counts.clone(),
            });
        }
        self.outbox.push(ToAuthority::Declared);
        self.outbox.extend(asked);
        for (&ticket, namespace) in &self.runs_asked {
            self.outbox.push(ToAuthority::AdmitRun {
                ticket,
                namespace: namespace.clone(),
            });
        }
    }

    /// The connection ended: nothing is sent until [`Self::declare`].
    pub fn disconnected(&mut self) {
        self.connected = false;
        self.outbox.clear();
    }

    /// What is to be sent, in order.
    pub fn take_outbox(&mut self) -> Vec<ToAuthority> {
        std::mem::take(&mut self.outbox)
    }

    fn ask(
        &mut self,
        job: &JobId,
        keyed: Option<Keyed>,
        subject: Option<Subject>,
        tokens: u64,
        start: bool,
    ) -> Ticket {
        self.last += 1;
        let ticket = self.last;
        let ask = Ask {
            ticket,
            keyed,
            subject,
            tokens,
            held: false,
        };
        if self.connected {
            self.outbox.push(ToAuthority::Ask(ask.clone()));
        }
        self.tickets.insert(
            ticket,
            Asked {
                job: job.clone(),
                ask,
                state: State::Asking,
                start,
            },
        );
        self.by_job.entry(job.clone()).or_default().push(ticket);
        ticket
    }

    fn gated(&self, ticket: Ticket) -> Gated {
        match self.tickets.get(&ticket).map(|asked| &asked.state) {
            Some(State::Granted { limited }) => Gated::Go {
                grant: if *limited { ticket } else { 0 },
            },
            Some(State::Waits { limit, wait, keyed }) => Gated::Waits {
                limit: limit.clone(),
                wait: *wait,
                keyed: *keyed,
            },
            Some(State::Asking) | None => Gated::Asking,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::jobs::JobKey;
    use crate::dispatch::limits::Target;
    use crate::task::TaskKey;

    fn job(n: u64) -> JobId {
        JobId {
            run: "run".into(),
            key: JobKey::Task(TaskKey(n)),
        }
    }

    fn keyed() -> Option<Keyed> {
        Some(Keyed {
            namespace: "default".into(),
            key: "acme".into(),
            max: 1,
        })
    }

    fn call() -> Subject {
        Subject {
            namespace: "default".into(),
            kind: "llm".into(),
            handler: None,
            model_call: Some(Target::default()),
        }
    }

    fn asks(outbox: &[ToAuthority]) -> Vec<(Ticket, bool)> {
        outbox
            .iter()
            .filter_map(|m| match m {
                ToAuthority::Ask(ask) => Some((ask.ticket, ask.held)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_start_is_asked_once_and_goes_when_granted() {
        let mut gate = GroupGate::default();
        gate.declare();
        assert_eq!(
            gate.start(&job(1), keyed(), Some(call()), 10),
            Gated::Asking
        );
        assert_eq!(
            gate.start(&job(1), keyed(), Some(call()), 10),
            Gated::Asking
        );
        assert_eq!(asks(&gate.take_outbox()), vec![(1, false)]);
        assert_eq!(gate.unanswered_starts(), 1);
        assert!(gate.answer(Answer::Waits {
            ticket: 1,
            limit: "k".into(),
            wait: None,
            keyed: true
        }));
        assert!(matches!(
            gate.start(&job(1), keyed(), None, 0),
            Gated::Waits { keyed: true, .. }
        ));
        // Parked at the authority: no longer unanswered.
        assert_eq!(gate.unanswered_starts(), 0);
        assert!(gate.answer(Answer::Granted {
            ticket: 1,
            limited: true
        }));
        assert_eq!(
            gate.start(&job(1), keyed(), None, 0),
            Gated::Go { grant: 1 }
        );
        assert_eq!(gate.unanswered_starts(), 0);
        // A late answer changes nothing.
        assert!(!gate.answer(Answer::Waits {
            ticket: 1,
            limit: "k".into(),
            wait: None,
            keyed: true
        }));
    }

    #[test]
    fn settling_and_releasing_tell_the_authority() {
        let mut gate = GroupGate::default();
        gate.declare();
        gate.start(&job(1), keyed(), Some(call()), 10);
        gate.answer(Answer::Granted {
            ticket: 1,
            limited: true,
        });
        assert_eq!(gate.call(&job(1), 5, call(), 10), Gated::Asking);
        gate.answer(Answer::Granted {
            ticket: 2,
            limited: true,
        });
        assert_eq!(gate.call(&job(1), 5, call(), 10), Gated::Go { grant: 2 });
        gate.take_outbox();
        gate.settle(&job(1), 2, Settlement::default());
        // Another job's grant, or one settled already, is not settled.
        gate.settle(&job(9), 1, Settlement::default());
        gate.settle(&job(1), 2, Settlement::default());
        gate.release(&job(1));
        assert_eq!(
            gate.take_outbox(),
            vec![
                ToAuthority::Settle {
                    ticket: 2,
                    call: Settlement::default()
                },
                ToAuthority::Release(1)
            ]
        );
    }

    #[test]
    fn a_new_connection_declares_the_granted_as_held_and_asks_the_rest_again() {
        let mut gate = GroupGate::default();
        // Asked before any connection: nothing sent.
        gate.start(&job(1), keyed(), None, 0);
        gate.start(&job(2), keyed(), None, 0);
        assert!(gate.take_outbox().is_empty());
        gate.declare();
        assert_eq!(asks(&gate.take_outbox()), vec![(1, false), (2, false)]);
        gate.answer(Answer::Granted {
            ticket: 1,
            limited: false,
        });
        gate.answer(Answer::Waits {
            ticket: 2,
            limit: "k".into(),
            wait: None,
            keyed: true,
        });
        gate.disconnected();
        // Released while cut off: nothing to send, and not declared.
        gate.start(&job(3), keyed(), None, 0);
        gate.release(&job(3));
        assert!(gate.take_outbox().is_empty());
        gate.declare();
        assert_eq!(asks(&gate.take_outbox()), vec![(1, true), (2, false)]);
        assert_eq!(gate.start(&job(2), keyed(), None, 0), Gated::Asking);
    }
}
