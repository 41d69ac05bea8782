//! `weft.Client` and `weft.aio.Client` on `weft_client::Client`: the
//! same calls as the `weft` command line makes (its bundler, its kept
//! inputs and named values, its patient reads and waits), for Python.
//!
//! Each call runs on the module's runtime. Called without `done`, it
//! blocks its thread with the interpreter let go (and the main thread
//! still answers Ctrl-C); called with `done`, it returns at once a
//! [`Pending`] and later calls `done(value, exception)` from the runtime,
//! which `weft.aio` turns into an awaitable. What a call returns is plain
//! Python data (dicts of the JSON forms `weft … --json` prints); the
//! SDK's classes are built from it in `weft.types` and `weft.events`.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use pyo3::BoundObject;
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use serde_json::{Map, Value, json};
use tokio_stream::{Stream, StreamExt};
use weft_client::{
    BundleError, ClientError, ClientTls, Event, GraphBundle, HistoryPoint, RunInfo, SubmitOptions,
};
use weft_graph::{GraphError, Priority};
use weft_proto::transport;

use crate::bridge::bridge;
use crate::bundle::refusal;
use crate::runtime;
use crate::values::{from_python, to_python};

/// Why a call failed, kept until the interpreter is attached to raise it.
enum Failure {
    /// The coordinator or the transport said no; `graph`: the request
    /// carried a graph, so an invalid argument is about the graph.
    Client { error: ClientError, graph: bool },
    /// A wait ran out of time.
    TimedOut(String),
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Self::Client {
            error,
            graph: false,
        }
    }
}

/// The refusal of a call that carried a graph.
fn about_graph(error: ClientError) -> Failure {
    Failure::Client { error, graph: true }
}

impl Failure {
    /// The SDK's exception for it: `weft.errors.of_status` by the gRPC
    /// status the error stands for; a bundle's, `GraphInvalid` or
    /// `BundleError`.
    fn into_exception(self, py: Python<'_>, url: &str) -> PyErr {
        let (error, graph) = match self {
            Self::TimedOut(message) => return PyTimeoutError::new_err(message),
            Self::Client {
                error: ClientError::Bundle(error),
                ..
            } => return refusal(py, error),
            Self::Client { error, graph } => (error, graph),
        };
        let code = status_code(&error);
        let text = error.to_string();
        // A plaintext call to a TLS port fails only once it is sent: say so.
        let message = transport::explain_tls_failure_in(url, &text, &PYTHON_TLS).unwrap_or(text);
        let made = bridge(py).and_then(|classes| {
            classes
                .of_status
                .bind(py)
                .call1((code as i32, message, graph))
        });
        match made {
            Ok(exception) => PyErr::from_value(exception),
            Err(error) => error,
        }
    }
}

/// The TLS settings as this SDK names them: the command line's `--ca` is
/// the `ca` argument here, and the SDK presents no client certificate.
const PYTHON_TLS: transport::TlsSettingNames = transport::TlsSettingNames {
    ca: "ca= (or WEFT_CA)",
    ca_short: "ca=",
    identity: "the Python SDK presents none; connect with a token (token=) to a coordinator that accepts one",
};

/// The gRPC status code an error stands for.
fn status_code(error: &ClientError) -> tonic::Code {
    match error {
        ClientError::Unreachable { .. } | ClientError::Unavailable(_) | ClientError::Closed(_) => {
            tonic::Code::Unavailable
        }
        ClientError::Invalid(_) | ClientError::Bundle(_) => tonic::Code::InvalidArgument,
        ClientError::TooLarge(_) => tonic::Code::ResourceExhausted,
        ClientError::NotFound(_) => tonic::Code::NotFound,
        ClientError::Rejected(_) => tonic::Code::FailedPrecondition,
        ClientError::Unauthenticated(_) => tonic::Code::Unauthenticated,
        ClientError::PermissionDenied(_) => tonic::Code::PermissionDenied,
        ClientError::Decode(_) => tonic::Code::Internal,
        ClientError::Refused(_) => tonic::Code::Unknown,
    }
}

/// Turns a call's result into Python data, the interpreter attached.
type Convert<T> = Box<dyn FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send>;

/// Runs `call` on the runtime: blocking (the interpreter let go) when
/// `done` is `None`, else handing its outcome to `done(value, exception)`
/// and returning a [`Pending`] at once.
fn settle<T: Send + 'static>(
    py: Python<'_>,
    url: &Arc<str>,
    done: Option<Py<PyAny>>,
    call: impl Future<Output = Result<T, Failure>> + Send + 'static,
    convert: Convert<T>,
) -> PyResult<Py<PyAny>> {
    let Some(done) = done else {
        return blocking(py, call)?
            .map_err(|failure| failure.into_exception(py, url))
            .and_then(|value| convert(py, value));
    };
    let url = url.clone();
    let task = runtime::handle().spawn(async move {
        let outcome = call.await;
        Python::attach(|py| {
            let (value, exception) = match outcome
                .map_err(|failure| failure.into_exception(py, &url))
                .and_then(|value| convert(py, value))
            {
                Ok(value) => (value, py.None()),
                Err(error) => (py.None(), error.into_value(py).into_any()),
            };
            // A loop closed meanwhile has no one left to tell.
            let _ = done.bind(py).call1((value, exception));
        });
    });
    Ok(Pending {
        task: task.abort_handle(),
    }
    .into_pyobject(py)?
    .into_any()
    .unbind())
}

/// Waits for `call` on the calling thread with the interpreter let go,
/// running Python's signal handlers every 50 ms (Ctrl-C stops the wait,
/// and the call with it).
fn blocking<T: Send + 'static>(
    py: Python<'_>,
    call: impl Future<Output = T> + Send + 'static,
) -> PyResult<T> {
    let (sender, mut answer) = std::sync::mpsc::sync_channel(1);
    let task = runtime::handle().spawn(async move {
        let _ = sender.send(call.await);
    });
    loop {
        // Moved in and out: a receiver is not shared between threads.
        let received;
        (answer, received) = py.detach(move || {
            let received = answer.recv_timeout(Duration::from_millis(50));
            (answer, received)
        });
        match received {
            Ok(value) => return Ok(value),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Err(interrupted) = py.check_signals() {
                    task.abort();
                    return Err(interrupted);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "the call stopped before it answered",
                ));
            }
        }
    }
}

/// A call `weft.aio` awaits: cancelling it stops the call.
#[pyclass(module = "weft._native", frozen)]
pub(crate) struct Pending {
    task: tokio::task::AbortHandle,
}

#[pymethods]
impl Pending {
    /// Stops the call; its `done` is not called.
    fn cancel(&self) {
        self.task.abort();
    }
}

/// What `submit` and `validate` take as a graph: a graph file's path (its
/// directory bundled by the Rust bundler) or a bundle already made
/// (`(graph_path, [(path, content, mode)])`).
enum Graph {
    File(PathBuf),
    Bundle(GraphBundle),
}

impl<'a, 'py> FromPyObject<'a, 'py> for Graph {
    type Error = PyErr;

    fn extract(object: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok((graph_path, files)) =
            object.extract::<(String, Vec<(String, Bound<'py, PyBytes>, u32)>)>()
        {
            let files = files
                .into_iter()
                .map(|(path, content, mode)| (path, content.as_bytes().to_vec(), mode))
                .collect();
            return Ok(Self::Bundle(GraphBundle { graph_path, files }));
        }
        Ok(Self::File(object.extract()?))
    }
}

impl Graph {
    /// The bundle, read off the runtime's threads for a file.
    async fn bundle(self) -> Result<GraphBundle, BundleError> {
        match self {
            Self::Bundle(bundle) => Ok(bundle),
            Self::File(path) => tokio::task::spawn_blocking(move || GraphBundle::from_file(&path))
                .await
                .unwrap_or_else(|stopped| {
                    Err(BundleError::Read {
                        path: "the graph".into(),
                        source: std::io::Error::other(stopped.to_string()),
                    })
                }),
        }
    }
}

/// A connection to a coordinator, made on the first call (and again after
/// the coordinator was away).
#[pyclass(module = "weft._native", frozen)]
pub(crate) struct Client {
    url: Arc<str>,
    /// `None` once closed.
    inner: RwLock<Option<weft_client::Client>>,
}

impl Client {
    /// The connection, or `weft.WeftError` once closed.
    fn client(&self, py: Python<'_>) -> PyResult<weft_client::Client> {
        let open = self.inner.read().ok().and_then(|inner| inner.clone());
        open.ok_or_else(|| {
            Failure::from(ClientError::Refused("the client is closed".into()))
                .into_exception(py, &self.url)
        })
    }
}

/// A run's id and its warnings.
type Submitted = (String, Vec<String>);

#[pymethods]
impl Client {
    /// A client of the coordinator at `url`, sending `token` as a bearer
    /// token and trusting the CA in the PEM file `ca` for `https://`.
    #[new]
    #[pyo3(signature = (url, token = None, ca = None))]
    fn new(url: &str, token: Option<&str>, ca: Option<PathBuf>) -> PyResult<Self> {
        let tls = ClientTls {
            ca,
            ..Default::default()
        };
        // Only a URL or a CA file that is wrong fails here: raised as
        // Python's own errors for bad arguments. The channel's task lives
        // on the module's runtime.
        let _runtime = runtime::handle().enter();
        let connected =
            weft_client::Client::connect_lazy(url, &tls).and_then(|client| match token {
                Some(token) => client.with_token(token),
                None => Ok(client),
            });
        let client = connected.map_err(|error| PyValueError::new_err(error.to_string()))?;
        Ok(Self {
            url: url.into(),
            inner: RwLock::new(Some(client)),
        })
    }

    /// Closes the connection; later calls raise `weft.WeftError`.
    fn close(&self) {
        if let Ok(mut inner) = self.inner.write() {
            inner.take();
        }
    }

    /// Submits `graph` with `input` (a dict); `(run_id, warnings)`.
    #[pyo3(signature = (graph, input, priority, no_cache, done = None))]
    fn submit(
        &self,
        py: Python<'_>,
        graph: Graph,
        input: &Bound<'_, PyAny>,
        priority: Option<&str>,
        no_cache: bool,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let input = from_python(input)
            .map_err(|why| PyTypeError::new_err(format!("the input is not JSON: {why}")))?;
        let priority = priority
            .map(|text| {
                Priority::parse(text).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "priority '{text}' is not one of high, normal, low"
                    ))
                })
            })
            .transpose()?;
        let options = SubmitOptions { priority, no_cache };
        let call = async move {
            let bundle = graph.bundle().await.map_err(ClientError::from)?;
            let submitted = client.submit_bundle_with(bundle, &input, options).await;
            submitted
                .map(|submitted| (submitted.run_id.to_string(), submitted.warnings))
                .map_err(about_graph)
        };
        settle(py, &self.url, done, call, Box::new(python::<Submitted>))
    }

    /// What the coordinator finds wrong with `graph`: `[{severity,
    /// message, nodes, line}]`. A graph file that does not validate here
    /// is answered with its findings without asking.
    #[pyo3(signature = (graph, done = None))]
    fn validate(
        &self,
        py: Python<'_>,
        graph: Graph,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move {
            let bundle = match graph.bundle().await {
                Ok(bundle) => bundle,
                Err(BundleError::Graph(GraphError::Invalid(findings))) => {
                    let findings = findings
                        .iter()
                        .map(|finding| {
                            let (severity, message) =
                                finding.to_string().split_once(": ").map_or_else(
                                    || ("error".to_owned(), finding.to_string()),
                                    |(severity, message)| (severity.to_owned(), message.to_owned()),
                                );
                            json!({"severity": severity, "message": message})
                        })
                        .collect();
                    return Ok(Value::Array(findings));
                }
                Err(error) => return Err(ClientError::from(error).into()),
            };
            let findings = client.validate(bundle).await.map_err(about_graph)?;
            Ok(serde_json::to_value(findings).unwrap_or_default())
        };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// Run `run_id` (`omit_state`: without its state), as a dict.
    #[pyo3(signature = (run_id, omit_state = false, done = None))]
    fn get(
        &self,
        py: Python<'_>,
        run_id: String,
        omit_state: bool,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move {
            let info = match omit_state {
                true => client.status(&run_id).await?,
                false => client.get(&run_id).await?,
            };
            Ok(run_json(info))
        };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// A page of runs, newest first: `([run], next)`, `next` the id to
    /// pass as `after` for the next page (`None`: the last page).
    #[pyo3(signature = (limit, after = None, done = None))]
    fn list_page(
        &self,
        py: Python<'_>,
        limit: u32,
        after: Option<String>,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move {
            let (runs, next) = client.list_page(limit, after.as_deref()).await?;
            Ok(json!([
                runs.into_iter().map(run_json).collect::<Vec<_>>(),
                next
            ]))
        };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// Run `run_id` once it has ended or waits for a person; raises
    /// `TimeoutError` after `timeout` seconds.
    #[pyo3(signature = (run_id, timeout = None, done = None))]
    fn wait(
        &self,
        py: Python<'_>,
        run_id: String,
        timeout: Option<f64>,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move {
            let waited = match timeout {
                None => client.wait(&run_id).await,
                Some(seconds) => {
                    let limit = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO);
                    tokio::time::timeout(limit, client.wait(&run_id))
                        .await
                        .map_err(|_| {
                            Failure::TimedOut(format!(
                                "run {run_id} did not end within {seconds} s"
                            ))
                        })?
                }
            };
            Ok(run_json(waited?))
        };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// Answers the waiting node `node` with `value`; the run as a dict.
    #[pyo3(signature = (run_id, node, value, comment = None, done = None))]
    fn resume(
        &self,
        py: Python<'_>,
        run_id: String,
        node: String,
        value: &Bound<'_, PyAny>,
        comment: Option<String>,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let value = from_python(value)
            .map_err(|why| PyTypeError::new_err(format!("the answer is not JSON: {why}")))?;
        let call = async move {
            let info = client
                .resume(&run_id, &node, &value, comment.as_deref())
                .await?;
            Ok(run_json(info))
        };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// Cancels run `run_id`; the run as a dict.
    #[pyo3(signature = (run_id, done = None))]
    fn cancel(
        &self,
        py: Python<'_>,
        run_id: String,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move { Ok(run_json(client.cancel(&run_id).await?)) };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// Runs failed run `run_id`'s failed wave again; the run as a dict.
    #[pyo3(signature = (run_id, done = None))]
    fn retry(
        &self,
        py: Python<'_>,
        run_id: String,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move { Ok(run_json(client.retry(&run_id).await?)) };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// Removes ended run `run_id` and its records.
    #[pyo3(signature = (run_id, done = None))]
    fn delete(
        &self,
        py: Python<'_>,
        run_id: String,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move { Ok(client.delete(&run_id).await?) };
        settle(py, &self.url, done, call, Box::new(|py, ()| Ok(py.None())))
    }

    /// A new run from run `run_id`'s state at place `at` (`(step,
    /// point)`; `None`: the last kept) with the fields of `set` replaced:
    /// `(run_id, warnings)`.
    #[pyo3(signature = (run_id, at, set, done = None))]
    fn fork(
        &self,
        py: Python<'_>,
        run_id: String,
        at: Option<(u32, u64)>,
        set: &Bound<'_, PyDict>,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let set = match from_python(set.as_any()) {
            Ok(Value::Object(fields)) => fields,
            Ok(_) => Map::new(),
            Err(why) => return Err(PyTypeError::new_err(format!("set: not JSON: {why}"))),
        };
        let call = async move {
            let at = at.map(|(step, point)| HistoryPoint { step, point });
            let forked = client.fork(&run_id, at, &set).await?;
            Ok((forked.run_id.to_string(), forked.warnings))
        };
        settle(py, &self.url, done, call, Box::new(python::<Submitted>))
    }

    /// Run `run_id`'s history and its state at place `at`, as a dict.
    #[pyo3(signature = (run_id, at, done = None))]
    fn history(
        &self,
        py: Python<'_>,
        run_id: String,
        at: Option<(u32, u64)>,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let call = async move {
            let at = at.map(|(step, point)| HistoryPoint { step, point });
            let history = client.history(&run_id, at).await?;
            Ok(serde_json::to_value(history).unwrap_or_default())
        };
        settle(py, &self.url, done, call, Box::new(json_value))
    }

    /// Run `run_id`'s events from position `start`, read with
    /// [`Feed::next`]: `(seq, at_unix_ms, body)` each, `body` the event's
    /// JSON form.
    fn events(&self, py: Python<'_>, run_id: String, start: u64) -> PyResult<Feed> {
        let client = self.client(py)?;
        let open: Opener = Box::new(move || {
            Box::pin(async move {
                let events = client.watch(&run_id, start).await?;
                let events = events.map(|event| event.map(event_json));
                Ok(Box::pin(events) as Items)
            })
        });
        Ok(Feed::new(self.url.clone(), open))
    }

    /// Run `run_id`'s model output from offset `start`, read with
    /// [`Feed::next`]: a dict per piece.
    fn stream(&self, py: Python<'_>, run_id: String, start: u64) -> PyResult<Feed> {
        let client = self.client(py)?;
        let open: Opener = Box::new(move || {
            Box::pin(async move {
                let deltas = client.stream(&run_id, start).await?;
                let deltas = deltas.map(|delta| {
                    delta.map(|delta| serde_json::to_value(delta).unwrap_or_default())
                });
                Ok(Box::pin(deltas) as Items)
            })
        });
        Ok(Feed::new(self.url.clone(), open))
    }
}

/// A feed's items as they come.
type Items = Pin<Box<dyn Stream<Item = Result<Value, ClientError>> + Send>>;

/// Opens a feed: the watch is asked for on the first read.
type Opener =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = Result<Items, ClientError>> + Send>> + Send>;

/// Where a feed is.
enum Reading {
    Unopened(Opener),
    Open(Items),
    Ended,
}

/// A run's events or model output, read one at a time: `next()` blocks,
/// `next(done)` hands the item to `done` (`None` at the end).
#[pyclass(module = "weft._native", frozen)]
pub(crate) struct Feed {
    url: Arc<str>,
    reading: Arc<tokio::sync::Mutex<Reading>>,
}

impl Feed {
    fn new(url: Arc<str>, open: Opener) -> Self {
        Self {
            url,
            reading: Arc::new(tokio::sync::Mutex::new(Reading::Unopened(open))),
        }
    }
}

#[pymethods]
impl Feed {
    /// The next item, or `None` once the feed has ended.
    #[pyo3(signature = (done = None))]
    fn next(&self, py: Python<'_>, done: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let reading = self.reading.clone();
        let call = async move {
            let mut reading = reading.lock().await;
            loop {
                match std::mem::replace(&mut *reading, Reading::Ended) {
                    Reading::Ended => return Ok(None),
                    Reading::Unopened(open) => *reading = Reading::Open(open().await?),
                    Reading::Open(mut items) => {
                        let item = items.next().await;
                        if item.is_some() {
                            *reading = Reading::Open(items);
                        }
                        return Ok(item.transpose()?);
                    }
                }
            }
        };
        let convert: Convert<Option<Value>> = Box::new(|py, item| match item {
            Some(value) => json_value(py, value),
            None => Ok(py.None()),
        });
        settle(py, &self.url, done, call, convert)
    }
}

/// An event as `[seq, at_unix_ms, body]`.
fn event_json(event: Event) -> Value {
    json!([event.seq, event.at_unix_ms, event.body])
}

/// A run as `weft.types.run_from_json` reads it.
fn run_json(info: RunInfo) -> Value {
    let mut run = Map::new();
    let mut put = |key: &str, value: Value| {
        run.insert(key.to_owned(), value);
    };
    put("run_id", Value::from(info.run_id.to_string()));
    put("graph", Value::from(info.graph_name));
    put("status", Value::from(info.status.name()));
    put("state", info.state);
    put("error", json_of(&info.error));
    put("waiting", json_of(&info.waiting));
    put("unhosted", json_of(&info.unhosted));
    put("children", json_of(&info.children));
    put("answers", json_of(&info.answers));
    put("namespace", Value::from(info.namespace));
    put("submitted_by", Value::from(info.submitted_by));
    put("forked_from", json_of(&info.forked_from));
    put("event_count", Value::from(info.event_count));
    put("created_unix_ms", Value::from(info.created_unix_ms));
    put("ended_unix_ms", json_of(&info.ended_unix_ms));
    put("trace_id", Value::from(info.trace_id));
    put("usage", json_of(&info.usage));
    Value::Object(run)
}

fn json_of(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

fn json_value(py: Python<'_>, value: Value) -> PyResult<Py<PyAny>> {
    Ok(to_python(py, &value)?.unbind())
}

fn python<T: for<'py> IntoPyObject<'py>>(py: Python<'_>, value: T) -> PyResult<Py<PyAny>> {
    match value.into_pyobject(py) {
        Ok(object) => Ok(object.into_any().unbind()),
        Err(error) => Err(error.into()),
    }
}
