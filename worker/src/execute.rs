//! Running one task attempt or one function call, and turning what came of
//! it into the message the coordinator receives.
//!
//! Handlers run as their own tokio tasks, aborted (never left detached)
//! when they time out or their attempt is cancelled; a panic fails the
//! attempt, not the worker. Functions are synchronous, so they run on the
//! blocking pool under a timeout, with panics caught the same way.

use futures_util::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tracing::Instrument;
use weft_proto::RunId;
use weft_proto::types::WorkerKind;

use crate::blobs::BlobCache;
use crate::handler::{Registry, TaskContext};
use crate::llm::Providers;
use crate::python::PythonHosts;
use crate::remote_tools::RemoteTools;
use crate::script::ScriptRunner;
use crate::secrets::Secrets;
use crate::task::{CallTarget, Completed, Failure, FailureKind, FunctionCall, Task, ToolContext};
use crate::team::Team;

/// What a worker runs tasks with: its handlers, its script runner, its
/// model providers and its Python pools.
#[derive(Clone)]
pub struct Toolbox {
    /// Handlers and functions.
    pub registry: Arc<Registry>,
    /// The script kind.
    pub scripts: ScriptRunner,
    /// The `llm` and `agent` kinds' providers.
    pub providers: Arc<Providers>,
    /// Python, when the worker hosts it.
    pub python: Option<Arc<PythonHosts>>,
    /// The bundle file cache.
    pub blobs: BlobCache,
    /// Secrets for `${NAME}`.
    pub secrets: Arc<Secrets>,
    /// Where an agent calls the registered tools other workers host.
    pub(crate) remote_tools: Arc<RemoteTools>,
    /// Where steps ask the coordinator to let their model calls go.
    pub(crate) permits: Arc<crate::llm::Permits>,
    /// The knowledge bases `rag` steps have opened.
    pub indexes: Arc<crate::rag::Indexes>,
    /// Where indexes are shared with the other workers.
    pub shelf: crate::connection::IndexShelf,
}

/// The answer to a [`FunctionCall`]: its value, or why there is none.
#[derive(Debug)]
pub(crate) struct CallAnswer {
    /// The call's number.
    pub id: u64,
    /// The run it was for.
    pub run_id: RunId,
    /// What it returned.
    pub result: Result<Value, CallError>,
    /// It answers a tool's call (for an agent step elsewhere).
    pub tool: bool,
}

/// Why a [`FunctionCall`] has no value; the coordinator is told the text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// The call cannot be read (its arguments are not a JSON array, say):
    /// what the protocol said.
    #[error("{0}")]
    Unreadable(String),
    /// No function of that name is registered.
    #[error("this worker has no function '{0}'")]
    NoFunction(String),
    /// No tool of that name is registered.
    #[error("this worker has no tool '{0}'")]
    NoTool(String),
    /// The function returned an error.
    #[error(transparent)]
    Failed(#[from] crate::HandlerError),
    /// The function panicked.
    #[error("function '{name}' panicked: {message}")]
    Panicked {
        /// The function.
        name: String,
        /// The panic's message.
        message: String,
    },
    /// The function outlived the call's timeout.
    #[error("function '{name}' did not return within {timeout:?}")]
    TimedOut {
        /// The function.
        name: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The blocking task that ran it was stopped.
    #[error(transparent)]
    Stopped(#[from] tokio::task::JoinError),
    /// A Python function, on a worker without Python.
    #[error("this worker does not host Python")]
    NoPython,
    /// A Python function has no answer.
    #[error(transparent)]
    Python(#[from] crate::python::PythonCallError),
    /// The model could not judge an `until` sentence.
    #[error(transparent)]
    Judge(#[from] crate::llm::JudgeError),
}

/// Aborts the task it holds when dropped, so a handler whose attempt timed
/// out or was cancelled stops instead of running on unseen.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one attempt of a handler or script.
/// A handler with `teammates: true` gets `team`.
pub async fn execute(
    kinds: &Toolbox,
    task: &mut Task,
    team: Option<Team>,
) -> Result<Completed, Failure> {
    // Every kind but a handler's runs boxed: the future of an attempt is
    // as large as its largest kind's, and it is moved whole into the task
    // spawned for each attempt, so an agent's or a script's future inline
    // would be copied for every handler call too.
    let gate = crate::llm::CallGate::of(&kinds.permits, &task.run_id, task.key, task.flow);
    match (task.kind, &kinds.python) {
        (WorkerKind::Script, _) => Box::pin(kinds.scripts.run(task))
            .await
            .map(Completed::writes),
        (WorkerKind::Task, _) => run_handler(&kinds.registry, task, team)
            .await
            .map(Completed::writes),
        (WorkerKind::Llm, _) if !kinds.providers.is_empty() => {
            Box::pin(crate::llm::run_llm(&kinds.providers, task, &gate)).await
        }
        (WorkerKind::Agent, _) if !kinds.providers.is_empty() => {
            let agent = crate::llm::Agent {
                providers: &kinds.providers,
                registry: &kinds.registry,
                scripts: &kinds.scripts,
                remote: &kinds.remote_tools,
                gate: &gate,
                task,
                team,
            };
            Box::pin(agent.run()).await
        }
        (WorkerKind::Function, Some(hosts)) => {
            Box::pin(crate::python::run_function(
                hosts,
                &kinds.blobs,
                &kinds.secrets,
                task,
            ))
            .await
        }
        (WorkerKind::Rag, _) => {
            let kit = crate::rag::RagKit {
                providers: &kinds.providers,
                blobs: &kinds.blobs,
                indexes: &kinds.indexes,
                shelf: &kinds.shelf,
                secrets: &kinds.secrets,
                gate: &gate,
            };
            Box::pin(crate::rag::run_rag(kit, task)).await
        }
        (WorkerKind::Llm | WorkerKind::Agent | WorkerKind::Function, _) => Err(Failure::new(
            FailureKind::UnsupportedKind,
            format!("this worker cannot run kind '{}'", task.kind),
        )),
    }
}

async fn run_handler(
    registry: &Arc<Registry>,
    task: &mut Task,
    team: Option<Team>,
) -> Result<Value, Failure> {
    let name = task
        .config
        .get("handler")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let handler = registry.handlers.get(name).cloned().ok_or_else(|| {
        Failure::new(
            FailureKind::UnknownHandler,
            format!("this worker has no handler '{name}'"),
        )
    })?;
    let state = std::mem::take(&mut task.state);
    // The handler is the scope's last reader: its context takes it.
    let scope = std::mem::take(&mut task.scope);
    let context = TaskContext::of(task, scope, team);
    let future = handler(&state, context)
        .map_err(|message| Failure::new(FailureKind::HandlerError, message))?;
    drop(state);
    // Polled within the attempt's own task (not spawned into one more): a
    // panic is caught here, and a timeout or a cancellation drops it. The
    // handler's own spans nest under the attempt's.
    let call = AssertUnwindSafe(future.instrument(tracing::Span::current())).catch_unwind();
    match tokio::time::timeout(task.timeout, call).await {
        Ok(Ok(result)) => {
            result.map_err(|message| Failure::new(FailureKind::HandlerError, message))
        }
        Ok(Err(panic)) => Err(Failure::new(
            FailureKind::HandlerPanicked,
            format!("handler '{name}' panicked: {}", panic_message(&*panic)),
        )),
        Err(_) => Err(Failure::new(
            FailureKind::Timeout,
            format!("handler '{name}' timed out after {:?}", task.timeout),
        )),
    }
}

fn panic_text(join: tokio::task::JoinError) -> String {
    panic_message(&*join.into_panic())
}

/// What a panic said (its `&str` or `String` payload).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Calls a registered function on the blocking pool. A function that
/// outlives its timeout cannot be stopped (it is synchronous code); its
/// result is then dropped and the call fails.
/// A call with `judge` set is a loop's `until` sentence for the model of
/// the worker's providers instead; one with `python` a Python function.
pub(crate) async fn call_function(kinds: &Toolbox, call: FunctionCall) -> CallAnswer {
    let result = match (&call.target, &kinds.python) {
        (CallTarget::Python(python), Some(hosts)) => {
            crate::python::call_python(hosts, &kinds.blobs, &call, python)
                .await
                .map_err(CallError::from)
        }
        (CallTarget::Python(_), None) => Err(CallError::NoPython),
        (CallTarget::Judge, _) => {
            let iteration = call.args.first().unwrap_or(&Value::Null);
            crate::llm::judge(&kinds.providers, &call.name, iteration, call.timeout)
                .await
                .map_err(CallError::from)
        }
        (CallTarget::Registered, _) => call_registered(kinds.registry.clone(), &call).await,
        (CallTarget::Tool(caller), _) => call_tool(&kinds.registry, &call, caller).await,
    };
    CallAnswer {
        tool: matches!(call.target, CallTarget::Tool(_)),
        id: call.call_id,
        run_id: call.run_id,
        result,
    }
}

/// A registered tool's call for an agent step on another worker, as its
/// own tokio task under the call's timeout (aborted when it outlives it).
async fn call_tool(
    registry: &Registry,
    call: &FunctionCall,
    caller: &ToolContext,
) -> Result<Value, CallError> {
    let tool = registry
        .tools
        .get(&call.name)
        .ok_or_else(|| CallError::NoTool(call.name.clone()))?;
    let context = TaskContext {
        run_id: call.run_id.clone(),
        node: caller.node.clone(),
        attempt: caller.attempt,
        key: caller.key,
        item: caller.item,
        place: None,
        config: Arc::default(),
        // A scope that is not an object (a coordinator sends none) is
        // empty.
        scope: match weft_proto::json::parse_or_null(&caller.scope_json) {
            Ok(Value::Object(scope)) => scope.into(),
            _ => crate::Scope::default(),
        },
        team: None,
    };
    let arguments = call.args.first().cloned().unwrap_or(Value::Null);
    let future = (tool.call)(arguments, context);
    let work = async move { future.await.map_err(CallError::Failed) };
    let mut run = AbortOnDrop(tokio::spawn(work.instrument(tracing::Span::current())));
    within(call, &mut run.0).await
}

/// A registered function's call, on the blocking pool.
async fn call_registered(registry: Arc<Registry>, call: &FunctionCall) -> Result<Value, CallError> {
    let (name, args) = (call.name.clone(), call.args.clone());
    let mut work = tokio::task::spawn_blocking(move || {
        let function = registry
            .functions
            .get(&name)
            .ok_or(CallError::NoFunction(name))?;
        function(args).map_err(CallError::Failed)
    });
    within(call, &mut work).await
}

/// What the task running `call` came to within the call's timeout.
async fn within(
    call: &FunctionCall,
    work: &mut JoinHandle<Result<Value, CallError>>,
) -> Result<Value, CallError> {
    match tokio::time::timeout(call.timeout, work).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) if join.is_panic() => Err(CallError::Panicked {
            name: call.name.clone(),
            message: panic_text(join),
        }),
        Ok(Err(join)) => Err(CallError::Stopped(join)),
        Err(_) => Err(CallError::TimedOut {
            name: call.name.clone(),
            timeout: call.timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, timeout: Duration) -> FunctionCall {
        FunctionCall {
            call_id: 7,
            run_id: "r".into(),
            name: name.into(),
            args: vec![serde_json::json!(1)],
            timeout,
            target: CallTarget::Registered,
            bundle: Arc::default(),
        }
    }

    fn registry() -> Arc<Registry> {
        let mut registry = Registry::default();
        registry.function("echo", |args| Ok(args[0].clone()));
        registry.function("boom", |_| panic!("no good"));
        registry.function("slow", |_| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(Value::Null)
        });
        Arc::new(registry)
    }

    #[tokio::test]
    async fn functions_return_fail_and_time_out_without_harm() {
        let registry = registry();
        // Time enough for a call that returns at once on a loaded machine:
        // only the slow function's own limit is meant to run out.
        let patient = Duration::from_secs(30);
        let ok = call_registered(registry.clone(), &call("echo", patient)).await;
        assert_eq!(ok.unwrap(), serde_json::json!(1));
        let panicked = call_registered(registry.clone(), &call("boom", patient)).await;
        assert!(
            panicked
                .as_ref()
                .is_err_and(|e| e.to_string().contains("panicked: no good")),
            "{panicked:?}"
        );
        let slow =
            call_registered(registry.clone(), &call("slow", Duration::from_millis(20))).await;
        assert!(
            slow.as_ref()
                .is_err_and(|e| e.to_string().contains("did not return")),
            "{slow:?}"
        );
        let missing = call_registered(registry, &call("nope", patient)).await;
        assert!(
            missing
                .as_ref()
                .is_err_and(|e| e.to_string().contains("this worker has no function 'nope'")),
            "{missing:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_out_handler_is_aborted() {
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut registry = Registry::default();
        let flag = finished.clone();
        registry.handler("sleepy", move |_: serde::de::IgnoredAny, _ctx| {
            let flag = flag.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, String>(serde_json::json!({}))
            }
        });
        let registry = Arc::new(registry);
        let mut task = Task {
            timeout: Duration::from_millis(20),
            ..Task::example(WorkerKind::Task, serde_json::json!({"handler": "sleepy"}))
        };
        let error = run_handler(&registry, &mut task, None).await.unwrap_err();
        assert_eq!(error.kind, FailureKind::Timeout);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            !finished.load(std::sync::atomic::Ordering::SeqCst),
            "the handler went on after its timeout"
        );
    }
}
