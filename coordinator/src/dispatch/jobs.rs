//! The registry's vocabulary: its limits, jobs (task attempts, function
//! calls and tool calls), the decisions it hands the dispatcher to carry out, and what it
//! reports about workers and load.

use std::time::Duration;
use weft_proto::RunId;

use super::{Requirement, WorkerId, WorkerInfo};
use crate::task::{TaskFailure, TaskKey};

/// Which of a run's jobs: a task attempt or a function call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKey {
    /// A task attempt, by its key.
    Task(TaskKey),
    /// A call of a worker-hosted function, by its call number.
    Call(u64),
    /// A call of a registered tool for an agent step on another worker, by
    /// the dispatcher's number for it.
    Tool(u64),
}

/// A job, unique across runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId {
    /// The run.
    pub run: RunId,
    /// The job within the run.
    pub key: JobKey,
}

/// A job to place.
#[derive(Debug)]
pub struct JobSpec<T> {
    /// Its id.
    pub id: JobId,
    /// The node (or function) it serves, for messages (a task's is its
    /// node's id, shared).
    pub label: std::sync::Arc<str>,
    /// What a worker must host to take it.
    pub requirement: Requirement,
    /// The namespace of its run: only workers that serve it take it.
    pub namespace: std::sync::Arc<str>,
    /// The job's own time budget, enforced by the worker; the coordinator
    /// gives up after this plus [`Limits::grace`].
    pub timeout: Duration,
    /// What the caller keeps with the job (the message, where to report).
    pub payload: T,
    /// The job this one tries again (a task's first attempt): the workers
    /// lost by the earlier attempts count against this one too.
    pub lineage: Option<JobId>,
    /// What the `[[limits]]` see of it (SPEC 18); `None`: nothing to
    /// count (no limit is configured, or it is not a task).
    pub flow: Option<FlowNeeds>,
    /// Its run's priority in its namespace's queue.
    pub priority: weft_graph::Priority,
    /// Its step's concurrency key, counted across the namespace's runs.
    pub concurrency: Option<weft_machine::events::KeyedConcurrency>,
    /// The runs whose `settings.budget` its model calls count against.
    pub budgets: std::sync::Arc<[RunId]>,
}

/// A task as rate limits count it: its first model call (or, for a kind
/// that calls none, the task itself), reserved before it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowNeeds {
    /// What limits match.
    pub subject: super::limits::Subject,
    /// The tokens its first call is expected to use.
    pub tokens: u64,
}

/// What the dispatcher must do.
#[derive(Debug)]
pub enum Decision<T> {
    /// Send this job to this worker; its payload is [`Registry::payload`].
    /// If the send fails, report it with [`Registry::send_failed`].
    Send {
        /// The worker.
        worker: WorkerId,
        /// The job.
        job: JobId,
    },
    /// Tell the job's run that no connected worker hosts what it needs.
    Unhosted {
        /// The job.
        job: JobId,
        /// The node (or function) it serves.
        label: std::sync::Arc<str>,
        /// What nobody hosts.
        requirement: Requirement,
        /// Set when workers host it but none serves this namespace.
        namespace: Option<std::sync::Arc<str>>,
    },
    /// A job its run was told nobody hosted is placed after all.
    Hosted {
        /// The job.
        job: JobId,
    },
    /// The job's worker was lost and it is queued to be sent again:
    /// tell its run (delivery is at least once).
    Requeued {
        /// The job.
        job: JobId,
        /// The lost worker's name.
        worker: String,
    },
    /// The job is given up on; report the failure to its run.
    Fail {
        /// The job's payload.
        payload: T,
        /// Why.
        failure: TaskFailure,
    },
    /// Tell the worker to stop the job (its result will be ignored).
    Cancel {
        /// The worker.
        worker: WorkerId,
        /// The job.
        job: JobId,
    },
    /// A job waits for a rate limit (SPEC 18): tell its run, once each
    /// time it starts waiting.
    Throttled {
        /// The job.
        job: JobId,
        /// The limit that holds it.
        limit: std::sync::Arc<str>,
        /// How long it is expected to wait; `None`: until a call in
        /// flight ends.
        wait: Option<Duration>,
        /// It waits for a concurrency key rather than a `[[limits]]`
        /// entry (metrics count keys together: there is one per customer).
        keyed: bool,
    },
    /// Answer a running step's request to call a model.
    Permit {
        /// The step's worker.
        worker: WorkerId,
        /// The step.
        job: JobId,
        /// The worker's number for the request.
        request_id: u64,
        /// The grant, or why the call may not be made.
        outcome: Result<u64, String>,
    },
    /// Close the worker's link: it is lost.
    Disconnect {
        /// The worker.
        worker: WorkerId,
        /// Its name.
        name: String,
        /// Why it is lost.
        reason: String,
    },
}

/// A job whose result was accepted.
#[derive(Debug)]
pub struct Finished<T> {
    /// The job's payload.
    pub payload: T,
    /// The worker's name.
    pub worker: String,
    /// How long it ran.
    pub elapsed: Duration,
}

/// The registry's tunables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Silence after which a worker is lost.
    pub worker_timeout: Duration,
    /// Added to a job's own timeout before the coordinator gives up on it.
    pub grace: Duration,
    /// How many workers a job may lose before it fails.
    pub max_losses: u32,
    /// How long a worker may stay jammed (its stream full) before it is
    /// dropped.
    pub jam_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            worker_timeout: Duration::from_secs(10),
            grace: Duration::from_secs(5),
            max_losses: 2,
            jam_timeout: Duration::from_secs(10),
        }
    }
}

/// A worker as the registry sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStatus {
    /// Its id.
    pub id: WorkerId,
    /// What it announced.
    pub info: WorkerInfo,
    /// Tasks it holds.
    pub in_flight: usize,
    /// Whether it announced it is leaving.
    pub draining: bool,
    /// Whether its stream is full.
    pub jammed: bool,
}

/// Figures for the gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// Connected workers.
    pub workers: usize,
    /// Free slots on workers that take tasks.
    pub free_slots: u64,
    /// Jobs waiting for a worker.
    pub queued: usize,
    /// Queued jobs that no worker taking jobs hosts.
    pub unhosted: usize,
}
