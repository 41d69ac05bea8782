//! A worker's life: connect to the coordinator (retrying with backoff while
//! it is away), announce itself, run the tasks it is given, and on shutdown
//! take no more tasks, finish the ones in flight, then leave.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};
use weft_proto::PROTOCOL_VERSION;
use weft_proto::v1 as pb;
use weft_proto::v1::worker_service_client::WorkerServiceClient;

use crate::blobs::BlobCache;
use crate::handler::{Registry, TaskContext};
use crate::script::ScriptRunner;
use crate::task::{BlobFile, Failure, Task};

/// Largest gRPC message accepted.
const MAX_MESSAGE_BYTES: usize = 256 << 20;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The coordinator's URL, e.g. `http://127.0.0.1:7700`.
    pub coordinator: String,
    /// The worker's name.
    pub name: String,
    /// Tasks run at once.
    pub slots: u32,
    /// Free-form labels.
    pub labels: Vec<(String, String)>,
    /// Whether this worker runs `script` nodes.
    pub scripts: bool,
    /// Where scratch directories and the file cache live.
    pub work_dir: PathBuf,
    /// The worker's secrets, for `${NAME}` in node configuration.
    pub secrets: Vec<(String, String)>,
    /// Gains a permit each time the worker joins a coordinator.
    pub joined: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The coordinator refused this worker (e.g. protocol version).
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    /// The coordinator URL is malformed.
    #[error("invalid coordinator URL '{url}': {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

enum SessionEnd {
    /// Shut down cleanly after draining.
    Drained,
    /// The coordinator went away; connect again.
    Lost(String),
}

/// Runs the worker until `shutdown` is cancelled and its tasks are done.
pub async fn run(
    config: WorkerConfig,
    registry: Registry,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    let endpoint = Endpoint::from_shared(config.coordinator.clone())
        .map_err(|e| WorkerError::BadUrl {
            url: config.coordinator.clone(),
            reason: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let registry = Arc::new(registry);
    let mut backoff = FIRST_BACKOFF;
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let started = Instant::now();
        match session(&config, &endpoint, &registry, &shutdown).await {
            Ok(SessionEnd::Drained) => return Ok(()),
            Ok(SessionEnd::Lost(why)) => {
                warn!(worker = %config.name, reason = %why, "lost the coordinator; reconnecting");
                if started.elapsed() > MAX_BACKOFF {
                    backoff = FIRST_BACKOFF;
                }
            }
            Err(error @ WorkerError::Refused(_)) => return Err(error),
            Err(error) => return Err(error),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn session(
    config: &WorkerConfig,
    endpoint: &Endpoint,
    registry: &Arc<Registry>,
    shutdown: &CancellationToken,
) -> Result<SessionEnd, WorkerError> {
    let channel = match endpoint.connect().await {
        Ok(channel) => channel,
        Err(error) => return Ok(SessionEnd::Lost(format!("cannot connect: {error}"))),
    };
    let mut client = client(channel);
    let (outbound, rx) = mpsc::channel::<pb::WorkerMessage>(1024);
    let hello = pb::Hello {
        protocol_version: PROTOCOL_VERSION,
        name: config.name.clone(),
        slots: config.slots,
        labels: config.labels.iter().cloned().collect(),
        kinds: if config.scripts {
            vec!["script".into()]
        } else {
            Vec::new()
        },
        handlers: registry.handlers.keys().cloned().collect(),
        functions: registry.functions.keys().cloned().collect(),
    };
    let _ = outbound
        .send(message(pb::worker_message::Body::Hello(hello)))
        .await;
    let mut inbound = match client.join(ReceiverStream::new(rx)).await {
        Ok(response) => response.into_inner(),
        Err(status)
            if status.code() == tonic::Code::FailedPrecondition
                || status.code() == tonic::Code::InvalidArgument =>
        {
            return Err(WorkerError::Refused(status.message().to_owned()));
        }
        Err(status) => return Ok(SessionEnd::Lost(status.message().to_owned())),
    };
    let heartbeat = match inbound.message().await {
        Ok(Some(pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Welcome(welcome)),
        })) => {
            info!(worker = %config.name, id = %welcome.worker_id, "joined the coordinator");
            if let Some(joined) = &config.joined {
                joined.add_permits(1);
            }
            Duration::from_millis(welcome.heartbeat_interval_ms.max(50))
        }
        Ok(_) => return Ok(SessionEnd::Lost("the coordinator sent no welcome".into())),
        Err(status) => return Ok(SessionEnd::Lost(status.message().to_owned())),
    };
    let scripts = ScriptRunner::new(
        config.work_dir.join("scratch"),
        BlobCache::new(config.work_dir.join("files"), client.clone()),
        config.secrets.clone(),
    );
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<((String, u64), pb::TaskResult)>();
    let mut running: HashMap<(String, u64), CancellationToken> = HashMap::new();
    let mut cache = StateCache::default();
    let mut draining = false;
    let mut last_heard = Instant::now();
    let mut ticker = tokio::time::interval(heartbeat);
    loop {
        tokio::select! {
            _ = shutdown.cancelled(), if !draining => {
                info!(worker = %config.name, in_flight = running.len(), "draining: finishing tasks in flight");
                draining = true;
                let _ = outbound.send(message(pb::worker_message::Body::Drain(pb::Drain {}))).await;
                if running.is_empty() {
                    return Ok(leave(outbound, inbound).await);
                }
            }
            incoming = inbound.message() => {
                let body = match incoming {
                    Ok(Some(pb::CoordinatorMessage { body: Some(body) })) => body,
                    Ok(Some(_)) => continue,
                    Ok(None) => return lost(running, "the coordinator closed the stream"),
                    Err(status) => return lost(running, status.message()),
                };
                last_heard = Instant::now();
                match body {
                    pb::coordinator_message::Body::Task(assignment) => {
                        let mut task = match task(assignment, &mut cache) {
                            Ok(task) => task,
                            Err(result) => {
                                let _ = outbound.send(message(pb::worker_message::Body::Result(result))).await;
                                continue;
                            }
                        };
                        let id = (task.run_id.clone(), task.key);
                        let cancel = CancellationToken::new();
                        running.insert(id.clone(), cancel.clone());
                        let (registry, scripts, done) = (registry.clone(), scripts.clone(), done_tx.clone());
                        tokio::spawn(async move {
                            let result = tokio::select! {
                                result = execute(&registry, &scripts, &mut task) => result,
                                _ = cancel.cancelled() => Err(Failure::new("cancelled", "the coordinator cancelled the task")),
                            };
                            let _ = done.send((id, task_result(&task, result)));
                        });
                    }
                    pb::coordinator_message::Body::Cancel(cancel) => {
                        if let Some(token) = running.get(&(cancel.run_id, cancel.task_key)) {
                            token.cancel();
                        }
                    }
                    pb::coordinator_message::Body::Call(call) => {
                        let result = call_function(registry, &call);
                        let _ = outbound.send(message(pb::worker_message::Body::CallResult(result))).await;
                    }
                    pb::coordinator_message::Body::Forget(forget) => cache.forget(&forget.run_id),
                    pb::coordinator_message::Body::Heartbeat(_) | pb::coordinator_message::Body::Welcome(_) => {}
                }
            }
            Some((id, result)) = done_rx.recv() => {
                running.remove(&id);
                debug!(run = %id.0, key = id.1, "task done");
                if outbound.send(message(pb::worker_message::Body::Result(result))).await.is_err() {
                    return lost(running, "the stream to the coordinator closed");
                }
                if draining && running.is_empty() {
                    return Ok(leave(outbound, inbound).await);
                }
            }
            _ = ticker.tick() => {
                if last_heard.elapsed() > heartbeat * 5 {
                    return lost(running, "the coordinator stopped sending heartbeats");
                }
                let beat = pb::Heartbeat { at_unix_ms: 0 };
                let _ = outbound.send(message(pb::worker_message::Body::Heartbeat(beat))).await;
            }
        }
    }
}

/// Leaves after draining: closing our side of the stream and waiting for
/// the coordinator to close its side guarantees the last results arrived
/// before the worker counts as gone.
async fn leave(
    outbound: mpsc::Sender<pb::WorkerMessage>,
    mut inbound: tonic::Streaming<pb::CoordinatorMessage>,
) -> SessionEnd {
    drop(outbound);
    let closed = async { while let Ok(Some(_)) = inbound.message().await {} };
    let _ = tokio::time::timeout(Duration::from_secs(10), closed).await;
    SessionEnd::Drained
}

/// The coordinator is gone: stop what runs (it will be dispatched again).
fn lost(
    running: HashMap<(String, u64), CancellationToken>,
    why: &str,
) -> Result<SessionEnd, WorkerError> {
    for token in running.values() {
        token.cancel();
    }
    Ok(SessionEnd::Lost(why.to_owned()))
}

fn client(channel: Channel) -> WorkerServiceClient<Channel> {
    WorkerServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

fn message(body: pb::worker_message::Body) -> pb::WorkerMessage {
    pb::WorkerMessage { body: Some(body) }
}

/// The latest version of each state field of each run, as the coordinator
/// sent them; it leaves out values this cache already holds.
#[derive(Default)]
struct StateCache {
    runs: HashMap<String, HashMap<String, (u64, Arc<Value>)>>,
}

impl StateCache {
    fn forget(&mut self, run_id: &str) {
        self.runs.remove(run_id);
    }
}

/// Builds a task, its state assembled from the message and the cache; a
/// field the cache should hold but does not fails the task at once.
fn task(assignment: pb::TaskAssignment, cache: &mut StateCache) -> Result<Task, pb::TaskResult> {
    let fields = cache.runs.entry(assignment.run_id.clone()).or_default();
    let mut state = Vec::with_capacity(assignment.state.len());
    let mut problem = None;
    for field in assignment.state {
        if !field.json.is_empty() {
            match serde_json::from_str::<Value>(&field.json) {
                Ok(value) => {
                    let value = Arc::new(value);
                    state.push((field.name.clone(), value.clone()));
                    fields.insert(field.name, (field.version, value));
                }
                Err(error) => {
                    problem = Some(format!("field '{}' is not JSON: {error}", field.name))
                }
            }
            continue;
        }
        match fields.get(&field.name) {
            Some((version, value)) if *version == field.version => {
                state.push((field.name, value.clone()));
            }
            _ => {
                problem = Some(format!(
                    "field '{}' version {} is not in this worker's cache",
                    field.name, field.version
                ))
            }
        }
    }
    if let Some(message) = problem {
        let error = pb::TaskError {
            kind: "state_cache_miss".into(),
            message,
        };
        return Err(pb::TaskResult {
            run_id: assignment.run_id,
            task_key: assignment.task_key,
            outcome: Some(pb::task_result::Outcome::Error(error)),
        });
    }
    Ok(Task {
        run_id: assignment.run_id,
        key: assignment.task_key,
        node: assignment.node,
        attempt: assignment.attempt,
        kind: assignment.kind,
        config_json: assignment.config_json,
        state,
        scope_json: assignment.scope_json,
        item: assignment.item.map(|item| item.index),
        timeout: Duration::from_millis(assignment.timeout_ms.max(1)),
        bundle: assignment
            .bundle
            .into_iter()
            .map(|b| BlobFile {
                path: b.path,
                sha256: b.sha256,
                mode: b.mode,
            })
            .collect(),
    })
}

/// Runs one attempt of a handler or script.
async fn execute(
    registry: &Arc<Registry>,
    scripts: &ScriptRunner,
    task: &mut Task,
) -> Result<Value, Failure> {
    match task.kind.as_str() {
        "script" => scripts.run(task).await,
        "task" => {
            let config: Value = serde_json::from_str(&task.config_json)
                .map_err(|e| Failure::new("invalid_task", format!("task configuration: {e}")))?;
            let name = config
                .get("handler")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let handler = registry.handlers.get(&name).cloned().ok_or_else(|| {
                Failure::new(
                    "unknown_handler",
                    format!("this worker has no handler '{name}'"),
                )
            })?;
            let state = std::mem::take(&mut task.state);
            let scope = match serde_json::from_str::<Value>(&task.scope_json) {
                Ok(Value::Object(map)) => map,
                _ => Default::default(),
            };
            let context = TaskContext {
                run_id: task.run_id.clone(),
                node: task.node.clone(),
                attempt: task.attempt,
                item: task.item,
                scope,
            };
            // A panicking handler fails its attempt, not the worker.
            let future = handler(&state, context)
                .map_err(|message| Failure::new("handler_error", message))?;
            drop(state);
            let call = tokio::spawn(future);
            match tokio::time::timeout(task.timeout, call).await {
                Ok(Ok(result)) => result.map_err(|message| Failure::new("handler_error", message)),
                Ok(Err(join)) if join.is_panic() => Err(Failure::new(
                    "handler_panicked",
                    format!("handler '{name}' panicked: {}", panic_text(join)),
                )),
                Ok(Err(join)) => Err(Failure::new("handler_error", join.to_string())),
                Err(_) => Err(Failure::new(
                    "timeout",
                    format!("handler '{name}' timed out after {:?}", task.timeout),
                )),
            }
        }
        other => Err(Failure::new(
            "unsupported_kind",
            format!("this worker cannot run kind '{other}'"),
        )),
    }
}

fn panic_text(join: tokio::task::JoinError) -> String {
    let payload = join.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

fn task_result(task: &Task, result: Result<Value, Failure>) -> pb::TaskResult {
    let outcome = match result {
        Ok(value) => pb::task_result::Outcome::Output(pb::TaskOutput {
            json: value.to_string(),
            output_json: String::new(),
        }),
        Err(failure) => pb::task_result::Outcome::Error(pb::TaskError {
            kind: failure.kind,
            message: failure.message,
        }),
    };
    pb::TaskResult {
        run_id: task.run_id.clone(),
        task_key: task.key,
        outcome: Some(outcome),
    }
}

fn call_function(registry: &Registry, call: &pb::FunctionCall) -> pb::CallResult {
    let outcome = match registry.functions.get(&call.name) {
        None => {
            pb::call_result::Outcome::Error(format!("this worker has no function '{}'", call.name))
        }
        Some(function) => match serde_json::from_str::<Vec<Value>>(&call.args_json) {
            Err(error) => pb::call_result::Outcome::Error(format!("bad arguments: {error}")),
            Ok(args) => match function(args) {
                Ok(value) => pb::call_result::Outcome::ValueJson(value.to_string()),
                Err(error) => pb::call_result::Outcome::Error(error),
            },
        },
    };
    pb::CallResult {
        call_id: call.call_id,
        run_id: call.run_id.clone(),
        outcome: Some(outcome),
    }
}
