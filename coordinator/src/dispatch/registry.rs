//! The dispatcher's pure core: which worker runs which job, and what to do
//! when workers go silent, jam, leave or kill what they run.
//!
//! [`Registry`] holds the workers (what they host, their slots, their load,
//! whether they drain or jam, when they were last heard from) and the jobs
//! (task attempts and function calls, queued or running). Its methods take
//! the time as an argument and return [`Decision`]s; they never touch a
//! channel, a metric or a clock. The dispatcher actor is a thin loop that
//! carries decisions out, so every placement rule here is tested without a
//! network (and under proptest).
//!
//! Rules it keeps:
//! - a task never goes beyond a worker's free slots, and goes to the least
//!   loaded worker that hosts what it needs; a draining or jammed worker
//!   gets nothing new;
//! - a job nobody hosts waits, and its run is told once;
//! - a lost worker's jobs are queued again without counting an attempt,
//!   but a job that has lost `max_losses` workers fails (`worker_lost`,
//!   naming them): it is likely what kills them;
//! - a running job past its timeout plus a grace period fails (`timeout`)
//!   and is cancelled on its worker, whatever the worker says;
//! - a result from a worker that no longer holds the job is ignored;
//! - a task that a `[[limits]]` entry counts goes only once the limit has
//!   room (its first model call reserved: [`super::limits`]), and waits
//!   in the queue meanwhile, its run told; a running step's later calls
//!   ask ([`Registry::permit`]) and wait the same way, ahead of the queue,
//!   as they hold slots;
//! - a step whose concurrency key is full waits likewise, and one whose
//!   run's budget is spent fails (`budget_exceeded`) — these and the
//!   limits are in `registry_flow.rs`;
//! - queued tasks are offered fair across namespaces and by priority
//!   within one ([`super::queue`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use weft_proto::RunId;

use self::flow::throttled;
use super::budgets::Budgets;
pub use super::jobs::{
    Decision, Finished, FlowNeeds, JobId, JobKey, JobSpec, Limits, Load, WorkerStatus,
};
use super::limits::{GrantId, RateLimits, Settlement, Target, Wait};
use super::queue::FairQueue;
use super::{CallFlow, CallUsage, PermitRequest, Requirement, ToolInfo, WorkerId, WorkerInfo};
use crate::task::{FailureKind, TaskFailure};
use std::sync::Arc;
use weft_graph::Priority;
use weft_machine::events::KeyedConcurrency;

#[derive(Debug)]
struct Worker {
    info: WorkerInfo,
    /// Slot-taking jobs (tasks) it holds.
    in_flight: usize,
    draining: bool,
    last_seen: Instant,
    jammed_since: Option<Instant>,
}

impl Worker {
    /// Takes new jobs at all.
    fn accepting(&self) -> bool {
        !self.draining && self.jammed_since.is_none()
    }

    fn has_free_slot(&self) -> bool {
        self.accepting() && (self.in_flight as u64) < u64::from(self.info.hello.slots)
    }
}

#[derive(Debug)]
enum Place {
    Queued,
    Running {
        worker: WorkerId,
        since: Instant,
        deadline: Instant,
    },
}

#[derive(Debug)]
struct Job<T> {
    label: std::sync::Arc<str>,
    requirement: Requirement,
    namespace: std::sync::Arc<str>,
    timeout: Duration,
    payload: T,
    place: Place,
    /// Names of the workers lost while they held this job, or an earlier
    /// attempt of its lineage.
    losses: Vec<String>,
    lineage: Option<JobId>,
    unhosted_reported: bool,
    flow: Option<FlowNeeds>,
    /// The grant its first call was reserved under when it was sent.
    grant: Option<GrantId>,
    /// Its run was told it waits for a limit (since it last went).
    throttled: bool,
    /// Its run's priority in its namespace's queue.
    priority: Priority,
    /// Its step's concurrency key.
    concurrency: Option<KeyedConcurrency>,
    /// It counts against its key (it runs).
    holds_key: bool,
    /// The runs whose budgets its model calls count against.
    budgets: Arc<[RunId]>,
}

/// A running step's request to call a model, waiting for a limit.
#[derive(Debug)]
struct WaitingPermit {
    worker: WorkerId,
    job: JobId,
    request: PermitRequest,
}

/// A worker asked to join under a name a connected worker holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a worker named '{name}' is already connected (as worker {held_by}); each worker needs a name of its own (the worker's --name); a worker that lost its connection is let in again once the coordinator has noticed the loss"
)]
pub struct NameTaken {
    /// The name.
    pub name: String,
    /// The connected worker that holds it.
    pub held_by: WorkerId,
}

/// Workers and jobs; see the module docs.
#[derive(Debug)]
pub struct Registry<T> {
    limits: Limits,
    workers: BTreeMap<WorkerId, Worker>,
    next_worker: WorkerId,
    jobs: foldhash::HashMap<JobId, Job<T>>,
    /// Queued tasks, fair across namespaces and by priority within one
    /// (ids of cancelled jobs are skipped).
    tasks: FairQueue,
    /// Running steps by namespace and concurrency key. Keyed by what runs'
    /// templates render and shared by every namespace, so hashed with
    /// std's SipHash rather than the fast hasher of the maps keyed by ids
    /// the coordinator makes.
    keys: HashMap<(Arc<str>, String), u32>,
    /// Runs' budgets and the holds of calls in flight.
    budgets: Budgets,
    /// Queued function calls, which take no slot.
    calls: VecDeque<JobId>,
    /// Every function name a worker has announced since the start.
    functions_ever: BTreeSet<String>,
    /// The workers each task lineage lost, over all its attempts (only
    /// lineages that lost one); dropped with the run.
    lineage_losses: foldhash::HashMap<JobId, Vec<String>>,
    /// The `[[limits]]` and their grants.
    rates: RateLimits,
    /// Running steps' calls waiting for a limit, in arrival order.
    permits: VecDeque<WaitingPermit>,
    /// When the earliest waiting job or call may go by time alone.
    wake: Option<Instant>,
    /// In a partitioned group: the keys and limits are the group's, asked
    /// of its flow authority (`rates` then only says what a limit counts).
    group: Option<super::group_gate::GroupGate>,
    /// Runs whose queued tasks are not placed: their partition is being
    /// handed over, and waits for their tasks in flight to end.
    held_runs: HashSet<RunId>,
}

impl<T> Registry<T> {
    /// An empty registry.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            workers: BTreeMap::new(),
            next_worker: WorkerId(1),
            jobs: foldhash::HashMap::default(),
            tasks: FairQueue::default(),
            keys: HashMap::new(),
            budgets: Budgets::default(),
            calls: VecDeque::new(),
            functions_ever: BTreeSet::new(),
            lineage_losses: foldhash::HashMap::default(),
            rates: RateLimits::default(),
            permits: VecDeque::new(),
            wake: None,
            group: None,
            held_runs: HashSet::new(),
        }
    }

    /// The registry with namespaces' weights in the fair share of slots and
    /// limits (1 for a namespace not named).
    pub fn with_weights(mut self, weights: HashMap<String, u32>) -> Self {
        self.tasks = FairQueue::with_weights(weights);
        self
    }

    /// Registers a worker, unless a connected worker has its name: names
    /// are what events, losses and logs credit work to, so two workers
    /// may not share one.
    pub fn join(&mut self, info: WorkerInfo, now: Instant) -> Result<WorkerId, NameTaken> {
        if let Some((&held_by, _)) = self
            .workers
            .iter()
            .find(|(_, w)| w.info.hello.name == info.hello.name)
        {
            return Err(NameTaken {
                name: info.hello.name,
                held_by,
            });
        }
        let id = self.next_worker;
        self.next_worker.0 += 1;
        self.functions_ever
            .extend(info.hello.functions.iter().cloned());
        self.workers.insert(
            id,
            Worker {
                info,
                in_flight: 0,
                draining: false,
                last_seen: now,
                jammed_since: None,
            },
        );
        Ok(id)
    }

    /// Notes that a worker was heard from; false for a worker not (or no
    /// longer) registered, whose messages are to be ignored.
    pub fn heard(&mut self, worker: WorkerId, now: Instant) -> bool {
        match self.workers.get_mut(&worker) {
            Some(entry) => {
                entry.last_seen = now;
                true
            }
            None => false,
        }
    }

    /// The worker is leaving: it gets nothing new.
    pub fn drain(&mut self, worker: WorkerId) -> Vec<Decision<T>> {
        if let Some(entry) = self.workers.get_mut(&worker) {
            entry.draining = true;
        }
        self.report_unhosted()
    }

    /// A worker that shares its slots between coordinators gave this one
    /// `slots` of them. Fewer than it runs stops new tasks going to it
    /// until enough end; the caller places queued tasks after more.
    pub fn set_slots(&mut self, worker: WorkerId, slots: u32) {
        if let Some(entry) = self.workers.get_mut(&worker) {
            // Never more than it has in all, whatever it says.
            let most = entry.info.hello.shared_slots;
            entry.info.hello.slots = if most > 0 { slots.min(most) } else { slots };
        }
    }

    /// What a worker that shares its slots is told of this coordinator's
    /// demand: the queued tasks it could run (it hosts them and serves
    /// their namespace), counted up to its slots in all — it never gives
    /// more. `None` for a worker that does not share its slots.
    pub fn demand(&self, worker: WorkerId) -> Option<u64> {
        let entry = self.workers.get(&worker)?;
        let most = u64::from(entry.info.hello.shared_slots);
        if most == 0 {
            return None;
        }
        let runnable = self.jobs.values().filter(|job| {
            matches!(job.place, Place::Queued)
                && job.requirement.takes_slot()
                && entry.info.hosts(&job.requirement)
                && entry.info.serves(&job.namespace)
        });
        Some(runnable.take(most as usize).count() as u64)
    }

    /// The worker's stream has room again.
    pub fn unjam(&mut self, worker: WorkerId) {
        if let Some(entry) = self.workers.get_mut(&worker) {
            entry.jammed_since = None;
        }
    }

    /// Whether the worker is jammed.
    pub fn is_jammed(&self, worker: WorkerId) -> bool {
        self.workers
            .get(&worker)
            .is_some_and(|w| w.jammed_since.is_some())
    }

    /// Queues a job. Its run is told at once if nobody hosts it.
    pub fn submit(&mut self, spec: JobSpec<T>) -> Vec<Decision<T>> {
        let JobSpec {
            id,
            label,
            requirement,
            namespace,
            timeout,
            payload,
            lineage,
            flow,
            priority,
            concurrency,
            budgets,
        } = spec;
        let losses = lineage
            .as_ref()
            .and_then(|lineage| self.lineage_losses.get(lineage).cloned())
            .unwrap_or_default();
        let mut job = Job {
            label,
            requirement,
            namespace,
            timeout,
            payload,
            place: Place::Queued,
            losses,
            lineage,
            unhosted_reported: false,
            flow,
            grant: None,
            throttled: false,
            priority,
            concurrency,
            holds_key: false,
            budgets,
        };
        let mut decisions = Vec::new();
        if !hosted_among(&self.workers, &job) {
            job.unhosted_reported = true;
            decisions.push(Decision::Unhosted {
                job: id.clone(),
                label: job.label.clone(),
                requirement: job.requirement.clone(),
                namespace: namespace_only(&self.workers, &job),
            });
        }
        if job.requirement.takes_slot() {
            self.tasks
                .push_back(id.clone(), &job.namespace, job.priority);
        } else {
            self.calls.push_back(id.clone());
        }
        self.jobs.insert(id, job);
        decisions
    }

    /// A queued or running job's payload.
    pub fn payload(&self, job: &JobId) -> Option<&T> {
        self.jobs.get(job).map(|j| &j.payload)
    }

    /// What a job needs of its worker.
    pub fn requirement(&self, job: &JobId) -> Option<&Requirement> {
        self.jobs.get(job).map(|j| &j.requirement)
    }

    /// What a connected worker announced.
    pub fn info(&self, worker: WorkerId) -> Option<&WorkerInfo> {
        self.workers.get(&worker).map(|w| &w.info)
    }

    /// A queued job's payload, to change before it is sent.
    pub fn queued_payload_mut(&mut self, job: &JobId) -> Option<&mut T> {
        self.jobs
            .get_mut(job)
            .filter(|j| matches!(j.place, Place::Queued))
            .map(|j| &mut j.payload)
    }

    /// [`Registry::place_into`], its decisions in a list of their own.
    #[cfg(test)]
    pub fn place(&mut self, now: Instant) -> Vec<Decision<T>> {
        let mut decisions = Vec::new();
        self.place_into(now, &mut decisions);
        decisions
    }

    /// Places queued jobs on workers: least loaded first, never beyond
    /// free slots, never on a draining or jammed worker. Its decisions are
    /// added to `decisions` (a list the caller keeps from one placing to
    /// the next).
    pub fn place_into(&mut self, now: Instant, decisions: &mut Vec<Decision<T>>) {
        self.wake = None;
        // Running steps' calls first: they hold slots.
        for _ in 0..self.permits.len() {
            let Some(waiting) = self.permits.pop_front() else {
                break;
            };
            if let Some(waiting) = self.try_permit(waiting, now, decisions) {
                self.permits.push_back(waiting);
            }
        }
        let mut skipped = Vec::new();
        // What a limit refused in this pass: the same again would be
        // refused too, so it waits without being looked at (a queue of
        // thousands behind one limit costs one refusal a pass, not
        // thousands).
        let mut held: Vec<(super::limits::Subject, Wait)> = Vec::new();
        // A group's authority is asked for no more starts at once than
        // there are free slots.
        let free: usize = if self.group.is_some() {
            self.workers
                .values()
                .filter(|w| w.accepting())
                .map(|w| (w.info.hello.slots as usize).saturating_sub(w.in_flight))
                .sum()
        } else {
            0
        };
        while self.workers.values().any(Worker::has_free_slot) {
            let Some((id, namespace, priority)) = self.tasks.pop() else {
                break;
            };
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            if !self.held_runs.is_empty() && self.held_runs.contains(&id.run) {
                skipped.push((id, namespace, priority));
                continue;
            }
            if let Some(needs) = &job.flow
                && let Some((_, wait)) = held.iter().find(|(subject, _)| *subject == needs.subject)
            {
                let wait = wait.clone();
                if let Some(job) = self.jobs.get_mut(&id)
                    && !std::mem::replace(&mut job.throttled, true)
                {
                    decisions.push(throttled(&id, wait, now));
                }
                skipped.push((id, namespace, priority));
                continue;
            }
            let Some(worker) = self.pick(job) else {
                skipped.push((id, namespace, priority));
                continue;
            };
            if let Some(failure) = self.spent(&id) {
                self.let_go(&id);
                if let Some(job) = self.jobs.remove(&id) {
                    decisions.push(Decision::Fail {
                        payload: job.payload,
                        failure,
                    });
                }
                continue;
            }
            if self.group.is_some() {
                if self.group_admitted(&id, free, decisions) {
                    self.start(id, worker, now, decisions);
                } else {
                    skipped.push((id, namespace, priority));
                }
            } else if !self.key_free(&id, decisions) {
                skipped.push((id, namespace, priority));
            } else {
                match self.admitted(&id, now, decisions) {
                    Ok(()) => self.start(id, worker, now, decisions),
                    Err(wait) => {
                        if let (Some(wait), Some(needs)) =
                            (wait, self.jobs.get(&id).and_then(|job| job.flow.as_ref()))
                        {
                            held.push((needs.subject.clone(), wait));
                        }
                        skipped.push((id, namespace, priority));
                    }
                }
            }
        }
        while let Some((id, namespace, priority)) = skipped.pop() {
            self.tasks.push_front(id, &namespace, priority);
        }
        let mut waiting = VecDeque::new();
        while let Some(id) = self.calls.pop_front() {
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            match self.pick(job) {
                Some(worker) => self.start(id, worker, now, decisions),
                None => waiting.push_back(id),
            }
        }
        self.calls = waiting;
        self.check();
    }

    /// A worker reported a job's result. Returns the job if the worker
    /// still held it; otherwise the result is late and to be ignored.
    pub fn finish(&mut self, worker: WorkerId, job: &JobId, now: Instant) -> Option<Finished<T>> {
        let since = match self.jobs.get(job)?.place {
            Place::Running {
                worker: holder,
                since,
                ..
            } if holder == worker => since,
            _ => return None,
        };
        self.let_go(job);
        let done = self.jobs.remove(job).expect("looked up above");
        self.release(worker, &done.requirement);
        let name = self.workers.get(&worker).map(|w| w.info.hello.name.clone());
        Some(Finished {
            payload: done.payload,
            worker: name.unwrap_or_default(),
            elapsed: now.saturating_duration_since(since),
        })
    }

    /// A worker refused a job because it is leaving, or (a worker that
    /// shares its slots) because the job came past the share it gave this
    /// coordinator: the job is queued again (no attempt counted), and a
    /// leaving worker gets nothing new.
    pub fn refuse(&mut self, worker: WorkerId, job: &JobId) -> Vec<Decision<T>> {
        if self.held_by(job) == Some(worker) {
            self.requeue(job);
        }
        // A worker that shares its slots hands back what came beyond the
        // share it had just lowered; it says so when it drains.
        let shares = self
            .workers
            .get(&worker)
            .is_some_and(|w| w.info.hello.shared_slots > 0);
        if shares {
            return Vec::new();
        }
        self.drain(worker)
    }

    /// A `Send` could not be carried out: the job is queued again, and the
    /// worker is jammed (or lost, if its stream is closed).
    pub fn send_failed(&mut self, job: &JobId, closed: bool, now: Instant) -> Vec<Decision<T>> {
        let Some(worker) = self.held_by(job) else {
            return Vec::new();
        };
        self.requeue(job);
        if closed {
            return self.lose(worker, "stream closed");
        }
        if let Some(entry) = self.workers.get_mut(&worker) {
            entry.jammed_since.get_or_insert(now);
        }
        Vec::new()
    }

    /// Drops jobs of a run: queued ones are forgotten, running ones are
    /// cancelled on their workers.
    pub fn cancel(&mut self, run: &RunId, keys: &[JobKey]) -> Vec<Decision<T>> {
        let mut decisions = Vec::new();
        for &key in keys {
            let id = JobId {
                run: run.clone(),
                key,
            };
            decisions.extend(self.remove(&id));
        }
        decisions
    }

    /// Drops every job of a run (it has ended), and its budget.
    pub fn forget_run(&mut self, run: &RunId) -> Vec<Decision<T>> {
        self.budgets.forget(run);
        self.held_runs.remove(run);
        let mut ids: Vec<JobId> = self
            .jobs
            .keys()
            .filter(|id| id.run == *run)
            .cloned()
            .collect();
        ids.sort();
        self.lineage_losses.retain(|lineage, _| lineage.run != *run);
        ids.iter().flat_map(|id| self.remove(id)).collect()
    }

    /// Places none of `runs`' queued tasks from now on (until they are
    /// forgotten): their partition is handed over once their tasks in
    /// flight end.
    pub fn hold_runs(&mut self, runs: impl IntoIterator<Item = RunId>) {
        self.held_runs.extend(runs);
    }

    /// How many of `runs`' tasks run on workers now.
    pub fn running_of(&self, runs: &HashSet<RunId>) -> usize {
        self.jobs
            .iter()
            .filter(|(id, job)| {
                runs.contains(&id.run) && matches!(job.place, Place::Running { .. })
            })
            .count()
    }

    /// The workers, in id order.
    pub fn workers(&self) -> Vec<WorkerStatus> {
        self.workers
            .iter()
            .map(|(&id, w)| WorkerStatus {
                id,
                info: w.info.clone(),
                in_flight: w.in_flight,
                draining: w.draining,
                jammed: w.jammed_since.is_some(),
            })
            .collect()
    }

    /// Every function name a worker has announced since the start, in
    /// order (for "did you mean" on a `fn:` nobody hosts).
    pub fn functions_ever(&self) -> Vec<String> {
        self.functions_ever.iter().cloned().collect()
    }

    /// Figures for the gauges.
    pub fn load(&self) -> Load {
        let mut load = Load {
            workers: self.workers.len(),
            free_slots: self
                .workers
                .values()
                .filter(|w| w.accepting())
                .map(|w| u64::from(w.info.hello.slots).saturating_sub(w.in_flight as u64))
                .sum(),
            ..Load::default()
        };
        for job in self.jobs.values() {
            if matches!(job.place, Place::Queued) {
                load.queued += 1;
                if !hosted_among(&self.workers, job) {
                    load.unhosted += 1;
                }
            }
        }
        load
    }

    /// Puts a known job back at the front of its queue.
    fn queue_front(&mut self, id: &JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if job.requirement.takes_slot() {
            self.tasks
                .push_front(id.clone(), &job.namespace, job.priority);
        } else {
            self.calls.push_front(id.clone());
        }
    }

    /// The least loaded worker that takes jobs, hosts what `job` needs,
    /// serves its namespace and, for a task, has a free slot. An agent
    /// step whose registered tools some worker hosts goes first to a worker
    /// that hosts them all itself.
    fn pick(&self, job: &Job<T>) -> Option<WorkerId> {
        let requirement = &job.requirement;
        if !tools_reachable(&self.workers, job) {
            return None;
        }
        let slot = requirement.takes_slot();
        let remote = |w: &Worker| !requirement.tools().iter().all(|t| w.info.hosts_tool(t));
        self.workers
            .iter()
            .filter(|(_, w)| {
                (if slot {
                    w.has_free_slot()
                } else {
                    w.accepting()
                }) && w.info.hosts(requirement)
                    && w.info.serves(&job.namespace)
            })
            .min_by(|(ia, a), (ib, b)| {
                // in_flight / slots, compared without division.
                let load_a = a.in_flight as u64 * u64::from(b.info.hello.slots.max(1));
                let load_b = b.in_flight as u64 * u64::from(a.info.hello.slots.max(1));
                remote(a)
                    .cmp(&remote(b))
                    .then(load_a.cmp(&load_b))
                    .then(ia.cmp(ib))
            })
            .map(|(&id, _)| id)
    }

    /// A registered tool as the worker hosting it describes it, if a worker
    /// that serves `namespace` and is not draining hosts it.
    pub fn tool(&self, namespace: &str, name: &str) -> Option<&ToolInfo> {
        self.workers
            .values()
            .filter(|w| !w.draining && w.info.serves(namespace))
            .find_map(|w| w.info.hello.tools.iter().find(|tool| tool.name == name))
    }

    /// Starts a job on a worker: a `Send`, preceded by `Hosted` when its run
    /// was told nobody hosted it.
    fn start(&mut self, id: JobId, worker: WorkerId, now: Instant, out: &mut Vec<Decision<T>>) {
        let job = self.jobs.get_mut(&id).expect("queued jobs are known");
        job.place = Place::Running {
            worker,
            since: now,
            deadline: now + job.timeout + self.limits.grace,
        };
        if std::mem::take(&mut job.unhosted_reported) {
            out.push(Decision::Hosted { job: id.clone() });
        }
        if job.requirement.takes_slot() {
            let entry = self.workers.get_mut(&worker).expect("picked");
            debug_assert!(entry.has_free_slot(), "a task goes to a free slot");
            entry.in_flight += 1;
        }
        job.throttled = false;
        if self.group.is_none()
            && let Some(keyed) = &job.concurrency
        {
            job.holds_key = true;
            *self
                .keys
                .entry((job.namespace.clone(), keyed.key.clone()))
                .or_default() += 1;
        }
        out.push(Decision::Send { worker, job: id });
    }

    /// The worker running a job, if it runs.
    pub fn held_by(&self, job: &JobId) -> Option<WorkerId> {
        match self.jobs.get(job)?.place {
            Place::Running { worker, .. } => Some(worker),
            Place::Queued => None,
        }
    }

    /// A running job goes back to the front of its queue.
    fn requeue(&mut self, id: &JobId) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let Place::Running { worker, .. } = job.place else {
            return;
        };
        job.place = Place::Queued;
        let requirement = job.requirement.clone();
        self.release(worker, &requirement);
        self.queue_front(id);
        self.let_go(id);
    }

    fn release(&mut self, worker: WorkerId, requirement: &Requirement) {
        if requirement.takes_slot()
            && let Some(entry) = self.workers.get_mut(&worker)
        {
            debug_assert!(entry.in_flight > 0, "a worker releases a slot it holds");
            entry.in_flight = entry.in_flight.saturating_sub(1);
        }
    }

    fn remove(&mut self, id: &JobId) -> Option<Decision<T>> {
        self.let_go(id);
        let job = self.jobs.remove(id)?;
        let Place::Running { worker, .. } = job.place else {
            return None;
        };
        self.release(worker, &job.requirement);
        Some(Decision::Cancel {
            worker,
            job: id.clone(),
        })
    }

    /// Tells runs about queued jobs that nobody hosts any more.
    fn report_unhosted(&mut self) -> Vec<Decision<T>> {
        let mut decisions = Vec::new();
        for (id, job) in &mut self.jobs {
            if matches!(job.place, Place::Queued)
                && !job.unhosted_reported
                && !hosted_among(&self.workers, job)
            {
                job.unhosted_reported = true;
                decisions.push(Decision::Unhosted {
                    job: id.clone(),
                    label: job.label.clone(),
                    requirement: job.requirement.clone(),
                    namespace: namespace_only(&self.workers, job),
                });
            }
        }
        decisions
    }

    /// The registry's invariant: each worker's load is the number of tasks
    /// it runs, within its slots. A full scan, so only the unit tests pay
    /// for it.
    fn check(&self) {
        if cfg!(test) {
            let mut held: HashMap<WorkerId, usize> = HashMap::new();
            for job in self.jobs.values() {
                if let Place::Running { worker, .. } = job.place
                    && job.requirement.takes_slot()
                {
                    *held.entry(worker).or_default() += 1;
                }
            }
            for (id, worker) in &self.workers {
                let count = held.get(id).copied().unwrap_or(0);
                debug_assert_eq!(worker.in_flight, count, "worker {id}'s load");
                debug_assert!(worker.in_flight as u64 <= u64::from(worker.info.hello.slots));
            }
        }
    }
}

/// Whether a worker that is not draining hosts what `job` needs and
/// serves its namespace (jammed ones count: a jam passes).
fn hosted_among<T>(workers: &BTreeMap<WorkerId, Worker>, job: &Job<T>) -> bool {
    workers
        .values()
        .any(|w| !w.draining && w.info.hosts(&job.requirement) && w.info.serves(&job.namespace))
        && tools_reachable(workers, job)
}

/// Whether every registered tool `job` calls is hosted by a worker that is
/// not draining and serves its namespace.
fn tools_reachable<T>(workers: &BTreeMap<WorkerId, Worker>, job: &Job<T>) -> bool {
    let hosts = workers
        .values()
        .filter(|w| !w.draining && w.info.serves(&job.namespace))
        .map(|w| &w.info);
    super::tools_hosted_among(&job.requirement, hosts)
}

/// The job's namespace, when workers host what it needs but none of them
/// may run that namespace's tasks: then that is why it waits.
fn namespace_only<T>(
    workers: &BTreeMap<WorkerId, Worker>,
    job: &Job<T>,
) -> Option<std::sync::Arc<str>> {
    let hosted = workers
        .values()
        .any(|w| !w.draining && w.info.hosts(&job.requirement));
    hosted.then(|| job.namespace.clone())
}

#[path = "registry_liveness.rs"]
mod liveness;

#[path = "registry_flow.rs"]
mod flow;

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
