//! A [`TaskLauncher`] that runs handlers in this process, with no worker
//! and no network: each task runs as a tokio task on the launcher's
//! tracker, its outcome sent to the run as a worker's would be. It serves
//! tests of the run actor (as Ballista's virtual launchers serve its
//! scheduler's), and any embedding that hosts its node implementations
//! beside the coordinator.
//!
//! A task's handler is found by what the task requires (a handler's name,
//! or a built-in kind's name); no handler for it leaves the task waiting,
//! reported unhosted, as a cluster without such a worker would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_proto::RunId;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::jobs::JobKey;
use super::{
    CallJob, DispatchEvent, EventSink, Requirement, TaskAssignment, TaskJob, TaskLauncher,
    TaskOutcome, TaskOutput, ToWorker,
};
use crate::task::{CallError, FailureKind, TaskFailure, TaskKey};

/// What an in-process handler is given: the attempt, with its state and
/// scope decoded.
pub struct InProcessTask {
    /// The attempt as the run sent it.
    pub assignment: TaskAssignment,
    /// Its state, field by field decoded.
    pub state: Map<String, Value>,
    /// Its scope (a map item's `as` binding), decoded.
    pub scope: Map<String, Value>,
}

/// A handler's future, boxed so handlers of any closure type share one map.
pub type BoxedOutcome<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// A node implementation: the fields it writes, or why it failed (a
/// `handler_error`).
pub type InProcessHandler =
    Arc<dyn Fn(InProcessTask) -> BoxedOutcome<Result<Value, CallError>> + Send + Sync>;

/// A worker-hosted function (a reducer, a router, an `until`) run here.
pub type InProcessFunction = Arc<dyn Fn(Vec<Value>) -> Result<Value, CallError> + Send + Sync>;

/// Why a task's message cannot be read here.
#[derive(Debug, thiserror::Error)]
enum Undecodable {
    /// The run left out a value (only workers cache values).
    #[error("field '{0}' came without its value")]
    Missing(String),
    /// A value or the scope is not JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// A running task: its run and key.
type RunningTask = (RunId, TaskKey);

/// The name the worker would say it failed under.
const WORKER: &str = "in-process";

/// Runs tasks and calls with handlers registered by name.
#[derive(Clone, Default)]
pub struct InProcessLauncher {
    handlers: HashMap<String, InProcessHandler>,
    functions: HashMap<String, InProcessFunction>,
    tracker: TaskTracker,
    /// The tasks running, by run and key, each with its own stop.
    running: Arc<Mutex<HashMap<RunningTask, CancellationToken>>>,
    /// What the runs asked for, in order: for tests to look at.
    log: Arc<Mutex<Vec<Launched>>>,
}

/// One request a run made of the launcher.
#[derive(Debug, Clone, PartialEq)]
pub enum Launched {
    /// A task attempt was launched.
    Task {
        /// The node.
        node: String,
        /// The attempt.
        attempt: u32,
        /// Its key.
        key: TaskKey,
    },
    /// Tasks were cancelled.
    Cancel(Vec<TaskKey>),
    /// A function was called.
    Call(String),
    /// The run ended.
    Forget,
    /// A message for a running task.
    Tell(TaskKey, Box<ToWorker>),
}

impl InProcessLauncher {
    /// A launcher hosting nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hosts `handler` for tasks that require `name` (a `task` node's
    /// handler, or a built-in kind: `script`, `llm`, `agent`, `function`).
    pub fn with_handler<F, Fut>(mut self, name: &str, handler: F) -> Self
    where
        F: Fn(InProcessTask) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Value, CallError>> + Send + 'static,
    {
        self.handlers.insert(
            name.to_owned(),
            Arc::new(move |task| Box::pin(handler(task)) as BoxedOutcome<_>),
        );
        self
    }

    /// Hosts function `name` (`fn:NAME`).
    pub fn with_function(
        mut self,
        name: &str,
        function: impl Fn(Vec<Value>) -> Result<Value, CallError> + Send + Sync + 'static,
    ) -> Self {
        self.functions.insert(name.to_owned(), Arc::new(function));
        self
    }

    /// Everything the runs asked for so far, in order.
    pub fn launched(&self) -> Vec<Launched> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits for the tasks still running to stop (after their runs
    /// cancelled them or they finished).
    pub async fn idle(&self) {
        self.tracker.close();
        self.tracker.wait().await;
        self.tracker.reopen();
    }

    fn note(&self, launched: Launched) {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(launched);
    }

    fn handler_for(&self, requirement: &Requirement) -> Option<InProcessHandler> {
        let name = match requirement {
            Requirement::Handler(name) => &**name,
            Requirement::Kind(kind) => kind.as_str(),
            Requirement::Agent(_) => "agent",
            Requirement::Function(_) | Requirement::Python | Requirement::Tool(_) => return None,
        };
        self.handlers.get(name).cloned()
    }
}

/// Decodes a task's state: every field travels whole here (no worker
/// caches a version).
fn decode(task: TaskAssignment) -> Result<InProcessTask, Undecodable> {
    let mut state = Map::new();
    for field in &task.state {
        let json = field
            .json
            .as_deref()
            .ok_or_else(|| Undecodable::Missing(field.name.to_string()))?;
        state.insert(field.name.to_string(), serde_json::from_str(json)?);
    }
    let scope = match task.scope_json.as_bytes().trim_ascii() {
        [] => Map::new(),
        json => serde_json::from_slice(json)?,
    };
    Ok(InProcessTask {
        assignment: task,
        state,
        scope,
    })
}

impl TaskLauncher for InProcessLauncher {
    fn launch(&self, job: TaskJob, requirement: Requirement, sink: EventSink) {
        let task = job.task;
        self.note(Launched::Task {
            node: task.definition.node.clone().into(),
            attempt: task.attempt,
            key: task.key,
        });
        let Some(handler) = self.handler_for(&requirement) else {
            let _ = sink.send(DispatchEvent::TaskUnhosted {
                job: JobKey::Task(task.key),
                node: task.definition.node.clone(),
                requirement,
                namespace: None,
            });
            return;
        };
        let stop = CancellationToken::new();
        let slot = (task.run_id.clone(), task.key);
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(slot.clone(), stop.clone());
        let running = self.running.clone();
        self.tracker.spawn(async move {
            let key = task.key;
            let timeout = task.timeout;
            let result = match decode(task) {
                Ok(decoded) => {
                    let work = handler(decoded);
                    tokio::select! {
                        () = stop.cancelled() => None,
                        done = tokio::time::timeout(timeout.max(Duration::from_millis(1)), work) => Some(match done {
                            Ok(Ok(writes)) => Ok(TaskOutput { writes_json: writes.to_string(), ..TaskOutput::default() }),
                            Ok(Err(CallError(message))) => Err(failure(FailureKind::HandlerError, message)),
                            Err(_) => Err(failure(FailureKind::Timeout, format!("the task took longer than {timeout:?}"))),
                        }),
                    }
                }
                Err(error) => Some(Err(failure(FailureKind::InvalidTask, error.to_string()))),
            };
            running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&slot);
            // A cancelled task reports nothing, as a worker's would not.
            if let Some(result) = result {
                let _ = sink.send(DispatchEvent::TaskFinished {
                    key,
                    worker: WORKER.to_owned(),
                    outcome: TaskOutcome {
                        result,
                        read: Vec::new(),
                        noted: Vec::new(),
                    },
                });
            }
        });
    }

    fn cancel(&self, run_id: RunId, keys: Vec<TaskKey>) {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        for key in &keys {
            if let Some(stop) = running.get(&(run_id.clone(), *key)) {
                stop.cancel();
            }
        }
        drop(running);
        self.note(Launched::Cancel(keys));
    }

    fn call(&self, job: CallJob, sink: EventSink) {
        let call = job.call;
        self.note(Launched::Call(call.name.clone()));
        let result = match self.functions.get(&call.name) {
            Some(function) => function(call.args),
            None => Err(CallError(format!("no in-process function '{}'", call.name))),
        };
        let _ = sink.send(DispatchEvent::CallReturned {
            call: call.call_id,
            result,
        });
    }

    fn forget(&self, _run_id: RunId) {
        self.note(Launched::Forget);
    }

    fn tell(&self, _run_id: RunId, key: TaskKey, message: ToWorker) {
        self.note(Launched::Tell(key, Box::new(message)));
    }
}

fn failure(kind: FailureKind, message: impl Into<String>) -> TaskFailure {
    TaskFailure {
        kind,
        message: message.into(),
        worker: Some(WORKER.to_owned()),
    }
}
