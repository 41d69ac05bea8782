//! `weft.Worker` on the Rust worker: its session with the coordinator
//! (hello, field caches, batches, heartbeats, reconnection, teammates,
//! remote tools, drain) is `weft_worker`'s; the handlers, tools and
//! functions it hosts are Python callables.
//!
//! A sync callable runs on a Python lane (`crate::lanes`: a pool of
//! threads that keep their Python thread state); an `async def`
//! is handed to the SDK's event loop (`submit`, which returns a
//! `concurrent.futures.Future`), and the task waits for its done callback
//! without holding a thread. The interpreter is attached only while
//! Python code runs: to build the call's arguments, to call, and to read
//! its result.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use weft_worker::python::PythonSettings;
use weft_worker::{HandlerError, TaskContext, WorkerError};

use crate::bridge::{bridge, raise};
use crate::lanes;
use crate::runtime;
use crate::state::state_dict;
use crate::team::TeamSeat;
use crate::values::{from_python, to_python};

/// What a callable is to the worker, for the words of its failures.
#[derive(Clone, Copy)]
enum Role {
    Handler,
    Tool,
    Function,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Self::Handler => "handler",
            Self::Tool => "tool",
            Self::Function => "function",
        }
    }
}

/// A registered Python callable and, for an `async def`, how its
/// coroutine reaches the event loop.
#[derive(Clone)]
struct Callable {
    function: Arc<Py<PyAny>>,
    /// `submit(coroutine) -> concurrent.futures.Future`; `None` for a
    /// plain function.
    submit: Option<Arc<Py<PyAny>>>,
    role: Role,
}

/// Builds a call's arguments once the interpreter is attached.
type Arguments = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyTuple>> + Send>;

impl Callable {
    /// Calls it with the arguments `arguments` builds: its result as JSON,
    /// or what its failure reports.
    async fn call(&self, arguments: Arguments) -> Result<Value, String> {
        match &self.submit {
            None => {
                let (function, role) = (self.function.clone(), self.role);
                lanes::run(move || {
                    Python::attach(|py| {
                        let result = arguments(py).and_then(|args| function.bind(py).call1(args));
                        outcome(py, result, role)
                    })
                })
                .await
            }
            Some(submit) => self.call_async(submit.clone(), arguments).await,
        }
    }

    /// An `async def`: its coroutine is submitted to the event loop, and
    /// the task awaits the future's done callback. Dropped (a cancelled
    /// or timed-out task), it cancels the future.
    async fn call_async(
        &self,
        submit: Arc<Py<PyAny>>,
        arguments: Arguments,
    ) -> Result<Value, String> {
        let (function, role) = (self.function.clone(), self.role);
        let (done, finished) = oneshot::channel();
        let submitted = lanes::run(move || {
            Python::attach(|py| {
                let started = arguments(py)
                    .and_then(|args| function.bind(py).call1(args))
                    .and_then(|coroutine| submit.bind(py).call1((coroutine,)))
                    .and_then(|future| {
                        let callback = Done {
                            sender: Mutex::new(Some(done)),
                        };
                        future.call_method1("add_done_callback", (callback,))?;
                        Ok(future.unbind())
                    });
                started.map_err(|error| failure(py, &error, role))
            })
        })
        .await?;
        let mut pending = CancelOnDrop(Some(submitted));
        if finished.await.is_err() {
            // The callback was dropped uncalled: the event loop is gone.
            return Err(format!(
                "the {}'s coroutine was dropped by its event loop",
                role.name()
            ));
        }
        let future = pending.0.take().expect("the future is held until read");
        lanes::run(move || {
            Python::attach(|py| {
                let result = future.bind(py).call_method0("result");
                outcome(py, result, role)
            })
        })
        .await
    }
}

/// A call's result as JSON, or its exception as the SDK reports it.
fn outcome(
    py: Python<'_>,
    result: PyResult<Bound<'_, PyAny>>,
    role: Role,
) -> Result<Value, String> {
    match result {
        Ok(value) => from_python(&value)
            .map_err(|why| format!("the {} returned what is not JSON: {why}", role.name())),
        Err(error) => Err(failure(py, &error, role)),
    }
}

/// What an exception reports: `weft.worker._failure` says (the message
/// of a `HandlerFailed`, the traceback of the handler's frames, …).
fn failure(py: Python<'_>, error: &PyErr, role: Role) -> String {
    let described = bridge(py).and_then(|classes| {
        classes
            .failure
            .bind(py)
            // The value with its traceback set (which Python before 3.12
            // keeps beside it).
            .call1((error.clone_ref(py).into_value(py), role.name()))?
            .extract::<String>()
    });
    described.unwrap_or_else(|_| error.to_string())
}

/// Cancels a submitted coroutine's future when the task waiting for it
/// is dropped before it is read.
struct CancelOnDrop(Option<Py<PyAny>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(future) = self.0.take() {
            lanes::spawn(move || {
                Python::attach(|py| {
                    let _ = future.bind(py).call_method0("cancel");
                })
            });
        }
    }
}

/// A `concurrent.futures.Future`'s done callback: wakes the task that
/// waits for it.
#[pyclass(module = "weft._native", frozen)]
pub(crate) struct Done {
    sender: Mutex<Option<oneshot::Sender<()>>>,
}

#[pymethods]
impl Done {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        let sender = self.sender.lock().ok().and_then(|mut sender| sender.take());
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }
}

/// A handler's context as `weft.TaskContext`.
fn task_context(py: Python<'_>, context: TaskContext) -> PyResult<Bound<'_, PyAny>> {
    let classes = bridge(py)?;
    let scope = to_python(py, &Value::Object(context.scope.into_map()))?;
    let item = match &context.place {
        Some(place) => {
            classes
                .item
                .bind(py)
                .call1((place.map.as_str(), place.index, place.step))?
        }
        None => py.None().into_bound(py),
    };
    let config = to_python(py, &context.config)?;
    let team = match context.team {
        Some(team) => classes.team.bind(py).call1((TeamSeat::new(team),))?,
        None => py.None().into_bound(py),
    };
    classes.task_context.bind(py).call1((
        context.run_id.as_str(),
        context.node.as_str(),
        context.attempt,
        context.key.0,
        scope,
        item,
        config,
        team,
    ))
}

/// A tool's context as `weft.ToolContext`.
fn tool_context(py: Python<'_>, context: TaskContext) -> PyResult<Bound<'_, PyAny>> {
    let scope = to_python(py, &Value::Object(context.scope.into_map()))?;
    bridge(py)?.tool_context.bind(py).call1((
        context.run_id.as_str(),
        context.node.as_str(),
        context.attempt,
        context.key.0,
        scope,
        context.item,
    ))
}

/// A worker being set up, then running.
#[pyclass(module = "weft._native", frozen)]
pub(crate) struct Worker {
    /// Taken by `run`.
    setup: Mutex<Option<weft_worker::Worker>>,
    name: String,
    shutdown: CancellationToken,
}

impl Worker {
    fn setup<T>(&self, change: impl FnOnce(&mut weft_worker::Worker) -> T) -> PyResult<T> {
        let mut setup = self.setup.lock().map_err(|_| already_ran())?;
        let worker = setup.as_mut().ok_or_else(already_ran)?;
        Ok(change(worker))
    }
}

fn already_ran() -> PyErr {
    PyRuntimeError::new_err("this worker has run already: make a new one")
}

#[pymethods]
impl Worker {
    /// A worker for the coordinator at `url`, hosting only what is
    /// registered (no scripts, Python function nodes or `rag` steps).
    #[new]
    #[pyo3(signature = (url, name, slots, labels, token = None, ca = None))]
    fn new(
        url: String,
        name: String,
        slots: u32,
        labels: Vec<(String, String)>,
        token: Option<String>,
        ca: Option<PathBuf>,
    ) -> PyResult<Self> {
        let mut worker = weft_worker::Worker::new(url);
        worker
            .name(name.clone())
            .slots(slots)
            .scripts(false)
            .rag(false)
            .python(PythonSettings {
                enabled: false,
                ..PythonSettings::default()
            });
        for (key, value) in labels {
            worker.label(key, value);
        }
        if let Some(token) = token {
            worker
                .token(&token)
                .map_err(|error| PyValueError::new_err(format!("token: {error}")))?;
        }
        if let Some(ca) = ca {
            worker.tls(weft_proto::transport::ClientTls {
                ca: Some(ca),
                ..Default::default()
            });
        }
        Ok(Self {
            setup: Mutex::new(Some(worker)),
            name,
            shutdown: CancellationToken::new(),
        })
    }

    /// Hosts `function(state, ctx)` as the handler `name`; `submit`
    /// is given for an `async def`.
    #[pyo3(signature = (name, function, submit = None))]
    fn handler(&self, name: &str, function: Py<PyAny>, submit: Option<Py<PyAny>>) -> PyResult<()> {
        let callable = Callable {
            function: Arc::new(function),
            submit: submit.map(Arc::new),
            role: Role::Handler,
        };
        self.setup(|worker| {
            worker.field_handler(name, move |fields, context: TaskContext| {
                let callable = callable.clone();
                async move {
                    let arguments: Arguments = Box::new(move |py| {
                        let state = state_dict(py, &fields)?.into_any();
                        let context = task_context(py, context)?;
                        PyTuple::new(py, [state, context])
                    });
                    callable.call(arguments).await.map_err(HandlerError::Failed)
                }
            });
        })
    }

    /// Hosts `function(arguments, ctx)` as the agent tool `name`, told to
    /// models with `description` and `parameters` (a JSON Schema).
    #[pyo3(signature = (name, description, parameters, function, submit = None))]
    fn tool(
        &self,
        name: &str,
        description: &str,
        parameters: &Bound<'_, PyAny>,
        function: Py<PyAny>,
        submit: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let parameters = from_python(parameters).map_err(|why| {
            PyValueError::new_err(format!("tool '{name}': the schema is not JSON: {why}"))
        })?;
        let callable = Callable {
            function: Arc::new(function),
            submit: submit.map(Arc::new),
            role: Role::Tool,
        };
        self.setup(|worker| {
            worker.tool(
                name,
                description,
                parameters,
                move |arguments: Value, context| {
                    let callable = callable.clone();
                    async move {
                        let arguments: Arguments = Box::new(move |py| {
                            let arguments = to_python(py, &arguments)?;
                            let context = tool_context(py, context)?;
                            PyTuple::new(py, [arguments, context])
                        });
                        callable.call(arguments).await.map_err(HandlerError::Failed)
                    }
                },
            );
        })
    }

    /// Hosts `function(*args)` as `fn:NAME` for reducers, predicates and
    /// routers (called on a Python lane).
    fn function(&self, name: &str, function: Py<PyAny>) -> PyResult<()> {
        let function = Arc::new(function);
        let called = name.to_owned();
        self.setup(|worker| {
            worker.function(name, move |args: Vec<Value>| {
                Python::attach(|py| {
                    let result = args
                        .iter()
                        .map(|arg| to_python(py, arg))
                        .collect::<PyResult<Vec<_>>>()
                        .and_then(|args| PyTuple::new(py, args))
                        .and_then(|args| function.bind(py).call1(args));
                    outcome(py, result, Role::Function)
                })
                .map_err(|why| HandlerError::Failed(format!("fn:{called} failed: {why}")))
            });
        })
    }

    /// Asks the worker to drain: it takes no more tasks, finishes those it
    /// runs, and leaves. Safe from any thread or a signal handler.
    fn stop(&self) {
        self.shutdown.cancel();
    }

    /// Serves until `stop()`, reconnecting when the coordinator goes away;
    /// then drains. Python's signal handlers run meanwhile (every 50 ms).
    fn run(&self, py: Python<'_>) -> PyResult<()> {
        let mut worker = self
            .setup
            .lock()
            .map_err(|_| already_ran())?
            .take()
            .ok_or_else(already_ran)?;
        runtime::log_to_stderr();
        let handle = runtime::handle();
        let joined = Arc::new(Semaphore::new(0));
        worker.joined_signal(joined.clone());
        let name = self.name.clone();
        let announcer = handle.spawn(async move {
            while let Ok(permit) = joined.acquire().await {
                permit.forget();
                let name = name.clone();
                let _ = lanes::run(move || {
                    Python::attach(|py| {
                        let classes = bridge(py).map_err(|e| e.to_string())?;
                        classes
                            .joined
                            .bind(py)
                            .call1((name,))
                            .map_err(|e| e.to_string())?;
                        Ok(())
                    })
                })
                .await;
            }
        });
        let shutdown = self.shutdown.clone();
        let (ended_tx, mut ended) = std::sync::mpsc::channel();
        handle.spawn(async move {
            let _ = ended_tx.send(worker.run(shutdown).await);
        });
        let mut interrupted = None;
        let ended = loop {
            let waiting = &mut ended;
            match py.detach(move || waiting.recv_timeout(Duration::from_millis(50))) {
                Ok(ended) => break ended,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    break Ok(());
                }
            }
            // A signal handler that raises (Ctrl-C without the SDK's
            // handler) drains the worker, then raises once it is done.
            if let Err(error) = py.check_signals() {
                self.shutdown.cancel();
                interrupted.get_or_insert(error);
            }
        };
        announcer.abort();
        if let Some(error) = interrupted {
            return Err(error);
        }
        ended.map_err(|error| refused(py, error))
    }
}

/// The SDK's exception for a worker that stopped with an error: the
/// coordinator's refusal as its status says (`weft.Unauthenticated`, …).
fn refused(py: Python<'_>, error: WorkerError) -> PyErr {
    let classes = match bridge(py) {
        Ok(classes) => classes,
        Err(error) => return error,
    };
    let message = error.to_string();
    if let WorkerError::Refused(status) = &error {
        let by_code = PyModule::import(py, "weft.errors")
            .and_then(|errors| errors.getattr("of_status"))
            .and_then(|of_status| of_status.call1((status.code() as i32, status.message())));
        return match by_code {
            Ok(exception) => PyErr::from_value(exception),
            Err(error) => error,
        };
    }
    raise(py, &classes.weft_error, (message, "worker"))
}
