//! Dispatch: which worker runs which task.
//!
//! The rules live in [`registry`], a pure core with no channels, metrics or
//! clock: the workers (what they host, slots, load, draining, jams,
//! liveness) and the jobs (queued or running, their deadlines and the
//! workers they lost). The dispatcher actor ([`dispatcher`]) is a thin loop
//! that feeds it commands and carries out its decisions; [`state_sync`]
//! mirrors each worker's cache of state fields so a task carries only the
//! values its worker lacks, and [`kept_sync`] the node definitions and
//! runs' bundle lists each worker keeps, so each crosses once per worker.
//!
//! Runs reach the dispatcher through the [`TaskLauncher`] trait, so the run
//! actor can be driven by a virtual launcher in tests.

pub use weft_machine::binding;
mod budgets;
mod dispatcher;
mod flow;
pub mod group_flow;
pub mod group_gate;
mod hosting;
pub mod in_process;
pub mod jobs;
pub mod kept_sync;
pub mod limits;
mod queue;
pub mod registry;
pub mod state_sync;
pub mod step_reads;

use std::sync::Arc;
use weft_proto::RunId;

use serde_json::Value;
use tokio::sync::mpsc;
pub use weft_proto::types::WorkerKind;

pub use dispatcher::{
    DispatcherConfig, DispatcherHandle, Fleet, JoinRefused, ShuttingDown, Windows, WorkerLink,
    spawn_dispatcher,
};
pub use hosting::Hosting;
pub use registry::{Limits, WorkerStatus};

use crate::task::{TaskFailure, TaskKey};
/// The worker protocol's messages, as the dispatcher sends and reads them.
pub use weft_proto::worker_protocol::{
    BlobRef, CallError, CallFlow, CallForm, CallTarget, CallUsage, FromWorker, FunctionCall, Hello,
    KeptRef, NodeDefinition, NotJson, PermitRequest, PythonCall, StateField, TaskAssignment,
    TaskOutput, TeamSend, ToWorker, ToolCall, ToolContext, ToolInfo,
};

/// A worker's id, unique for the coordinator's lifetime.
pub use weft_proto::{NodeId, WorkerId};

pub use weft_machine::binding::Requirement;

/// Whether each registered tool `requirement` calls is hosted by one of
/// `hosts` (the fleet's half of an agent's requirement).
pub fn tools_hosted_among<'a>(
    requirement: &Requirement,
    hosts: impl Iterator<Item = &'a WorkerInfo> + Clone,
) -> bool {
    requirement
        .tools()
        .iter()
        .all(|tool| hosts.clone().any(|host| host.hosts_tool(tool)))
}

/// A connected worker: what it announced in its hello, and what its
/// identity allows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerInfo {
    /// What it announced: its name, slots and what it hosts.
    pub hello: Hello,
    /// The namespaces whose tasks it may run (its identity's `namespaces`);
    /// `None`: every namespace's.
    pub namespaces: Option<Vec<String>>,
}

impl WorkerInfo {
    /// Reports whether it hosts what `requirement` names.
    pub fn hosts(&self, requirement: &Requirement) -> bool {
        match requirement {
            Requirement::Kind(kind) => self.hello.kinds.contains(kind),
            Requirement::Handler(name) => self.hello.handlers.iter().any(|h| **h == **name),
            Requirement::Function(name) => self.hello.functions.iter().any(|f| f == name),
            Requirement::Python => self.hello.kinds.contains(&WorkerKind::Function),
            // Whether some worker hosts each tool is the fleet's question
            // (`Registry::pick`).
            Requirement::Agent(_) => self.hello.kinds.contains(&WorkerKind::Agent),
            Requirement::Tool(name) => self.hosts_tool(name),
        }
    }

    /// Whether it registered the tool `name`.
    pub fn hosts_tool(&self, name: &str) -> bool {
        self.hello.tools.iter().any(|tool| tool.name == name)
    }

    /// Whether it may run the tasks of runs of `namespace`.
    pub fn serves(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|list| list.iter().any(|n| n == namespace))
    }
}

/// A task attempt as the dispatcher holds it: the assignment a worker is
/// sent, with what decides where it may go.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskJob {
    /// The run's namespace: only workers that serve it take the task.
    pub namespace: Arc<str>,
    /// The key of the task's first attempt (this one's, for a first
    /// attempt): the workers its attempts lose are counted together.
    pub first_key: TaskKey,
    /// The attempt as sent (its state fields' values left out where the
    /// worker holds them, its remote tools set, when it is sent).
    pub task: TaskAssignment,
    /// Its run's priority in its namespace's queue.
    pub priority: crate::graph::Priority,
    /// Its step's concurrency key (SPEC 18).
    pub concurrency: Option<weft_machine::events::KeyedConcurrency>,
    /// The runs whose budgets its model calls count against.
    pub budgets: Arc<[RunId]>,
}

/// A call of a worker-hosted function as the dispatcher holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallJob {
    /// The run's namespace: only workers that serve it take the call.
    pub namespace: Arc<str>,
    /// The call as sent (its timeout set by the dispatcher).
    pub call: FunctionCall,
}

/// What a task attempt came to, as a worker reports it (or the dispatcher,
/// for an attempt it gave up on).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOutcome {
    /// What the worker sent, its written fields unread (the run decides
    /// whether they are a valid output), or why the attempt failed.
    pub result: Result<TaskOutput, TaskFailure>,
    /// The numbers of the teammate messages handed to the task it read.
    pub read: Vec<u64>,
    /// What a failed attempt noted before it failed (its model calls).
    pub noted: Vec<Value>,
}

/// What the dispatcher tells a run.
#[derive(Debug, Clone, PartialEq)]
pub enum DispatchEvent {
    /// A task finished on a worker.
    TaskFinished {
        /// The task.
        key: TaskKey,
        /// The worker's name.
        worker: String,
        /// What it returned.
        outcome: TaskOutcome,
    },
    /// No connected worker hosts what the task (or call) needs; it waits.
    TaskUnhosted {
        /// The task or call.
        job: jobs::JobKey,
        /// The node.
        node: NodeId,
        /// What nobody hosts.
        requirement: Requirement,
        /// Set when workers host it but none may run this namespace's
        /// tasks.
        namespace: Option<Arc<str>>,
    },
    /// A task's worker was lost; the task is queued to be sent again.
    TaskRequeued {
        /// The task.
        key: TaskKey,
        /// The lost worker's name.
        worker: String,
    },
    /// A task, or a running step's model call, waits for a rate limit.
    TaskThrottled {
        /// The task.
        key: TaskKey,
        /// The limit that holds it.
        limit: Arc<str>,
        /// How long it is expected to wait; `None`: until a call in
        /// flight ends.
        wait: Option<std::time::Duration>,
    },
    /// A task or call reported unhosted found a worker.
    TaskHosted {
        /// The task or call.
        job: jobs::JobKey,
    },
    /// A worker-hosted function returned.
    CallReturned {
        /// The call.
        call: u64,
        /// Its value, or error.
        result: Result<Value, CallError>,
    },
    /// A running task sent a teammate message.
    TeamSend {
        /// The sending task.
        key: TaskKey,
        /// The message.
        send: TeamSend,
    },
    /// A piece of a running task's model output.
    TaskStream {
        /// The task.
        key: TaskKey,
        /// The piece.
        piece: weft_proto::worker_protocol::StreamPiece,
    },
}

/// Where the dispatcher sends a run's events.
pub type EventSink = mpsc::UnboundedSender<DispatchEvent>;

/// How runs hand tasks to workers.
pub trait TaskLauncher: Send + Sync + 'static {
    /// Queues a task; its outcome arrives on `sink`.
    fn launch(&self, task: TaskJob, requirement: Requirement, sink: EventSink);
    /// Stops tasks of a run; results that still arrive are ignored.
    fn cancel(&self, run_id: RunId, keys: Vec<TaskKey>);
    /// Calls a worker-hosted function; the result arrives on `sink`.
    fn call(&self, call: CallJob, sink: EventSink);
    /// The run has ended: workers may drop what they cached for it.
    fn forget(&self, run_id: RunId);
    /// Sends `message` (a teammate delivery or a send's answer) to the
    /// worker running task `key`; dropped when no worker runs it.
    fn tell(&self, run_id: RunId, key: TaskKey, message: ToWorker);
    /// A run whose model calls count against budgets started (or was
    /// restored): its own budget, if it has one, and what it spent before.
    fn budget(&self, budget: BudgetStart) {
        let _ = budget;
    }
}

/// A run's registration with the budgets it counts against (SPEC 18).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetStart {
    /// The run.
    pub run: RunId,
    /// Its own `settings.budget`, if it has one.
    pub own: Option<crate::graph::RunBudget>,
    /// Every budget its calls count against (its ancestors' and its own),
    /// which what it spent before is added to.
    pub chain: Arc<[RunId]>,
    /// Prompt and completion tokens it spent before (a restored run's).
    pub tokens: u64,
    /// Their cost.
    pub cost: f64,
}
