//! Conversions between generated protobuf types and the domain.

use serde_json::Value;
use weft_proto::v1 as pb;

use crate::bundle::{Bundle, BundleError};
use crate::dispatch::{
    Assignment, FromWorker, FunctionCall, TaskOutcome, TeamSend, ToWorker, ToolCall, ToolInfo,
    WorkerInfo,
};
use crate::graph::{Finding, Severity};
use crate::task::{CallError, NotJson, TaskKey};
use weft_proto::events::{error_to_wire, event_to_wire, status_to_wire};

use crate::run_actor::{FailureKind, RunEvent, RunView, StoredEvent, TaskFailure, TeamMessage};

pub fn bundle(message: Option<pb::GraphBundle>, limit: usize) -> Result<Bundle, BundleError> {
    let message = message.unwrap_or_default();
    // Counted before anything is made of them.
    if message.files.len() > crate::bundle::MAX_BUNDLE_FILES {
        return Err(BundleError::TooManyFiles {
            limit: crate::bundle::MAX_BUNDLE_FILES,
        });
    }
    let files = message
        .files
        .into_iter()
        .map(|f| (f.path, f.content, f.mode));
    Bundle::new(message.graph_path, files, limit)
}

/// A run's info; `with_state: false` leaves the (possibly large) state out.
pub fn run_info(view: RunView, with_state: bool) -> pb::RunInfo {
    run_info_drawn(view, with_state, false)
}

/// [`run_info`], with the graph drawn when `with_diagram`.
pub fn run_info_drawn(view: RunView, with_state: bool, with_diagram: bool) -> pb::RunInfo {
    pb::RunInfo {
        diagram_svg: if with_diagram {
            crate::graph::diagram::svg(&view.graph)
        } else {
            String::new()
        },
        trace_id: view.trace_id.to_string(),
        run_id: view.id.to_string(),
        graph_name: view.graph_name,
        status: status_to_wire(view.status) as i32,
        state_json: if with_state {
            weft_proto::json::object_to_string(&view.state)
        } else {
            String::new()
        },
        error: view.error.map(|error| error_to_wire(error.info())),
        waiting: view
            .waiting
            .into_iter()
            .map(|(node, kind, prompt)| pb::WaitingNode { node, kind, prompt })
            .collect(),
        event_count: view.event_count,
        created_unix_ms: view.created_unix_ms,
        unhosted: view
            .unhosted
            .into_iter()
            .map(|w| pb::UnhostedWait {
                node: w.node,
                needs: w.needs,
                tasks: w.tasks,
            })
            .collect(),
        children: view
            .children
            .into_iter()
            .map(|(node, run_id)| pb::ChildRun {
                node: node.into(),
                run_id: run_id.into(),
            })
            .collect(),
        ended_unix_ms: view.ended_unix_ms,
        namespace: view.owner.namespace,
        submitted_by: view.owner.submitted_by,
        answers: view
            .answers
            .into_iter()
            .map(|a| pb::Answer {
                node: a.node,
                by: a.by,
                approved: a.approved,
            })
            .collect(),
    }
}

pub fn event(stored: &StoredEvent) -> pb::RunEvent {
    event_to_wire(stored.seq, stored.at_unix_ms, &stored.event)
}

/// Reports whether an event ends the run's stream.
pub fn is_final(stored: &StoredEvent) -> bool {
    matches!(&*stored.event, RunEvent::RunFinished { .. })
}

pub fn finding(finding: &Finding) -> pb::Finding {
    pb::Finding {
        severity: match finding.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
        .to_owned(),
        message: finding.message.clone(),
        nodes: finding.nodes.clone(),
        line: finding.line.unwrap_or(0),
    }
}

pub fn worker_info(hello: pb::Hello) -> WorkerInfo {
    WorkerInfo {
        name: hello.name,
        slots: hello.slots,
        labels: hello.labels.into_iter().collect(),
        // Kinds this version does not know are not hosted as far as it is
        // concerned.
        kinds: hello.kinds.iter().filter_map(|k| k.parse().ok()).collect(),
        handlers: hello.handlers,
        functions: hello.functions,
        tools: tool_infos(hello.tools, hello.tool_infos),
        // Set from the worker's identity, not from what it says.
        namespaces: None,
    }
}

/// A hello's tools: each name in `tools`, described by its entry in
/// `infos` (a worker that sends none describes its tools as nothing
/// more than an object of arguments).
fn tool_infos(names: Vec<String>, infos: Vec<pb::ToolInfo>) -> Vec<ToolInfo> {
    names
        .into_iter()
        .map(|name| {
            let info = infos.iter().find(|info| info.name == name);
            ToolInfo {
                description: info.map(|i| i.description.clone()).unwrap_or_default(),
                parameters_json: info
                    .map(|i| i.parameters_json.clone())
                    .filter(|p| !p.trim().is_empty())
                    .unwrap_or_else(|| r#"{"type":"object"}"#.to_owned()),
                name,
            }
        })
        .collect()
}

fn tool_info(tool: ToolInfo) -> pb::ToolInfo {
    pb::ToolInfo {
        name: tool.name,
        description: tool.description,
        parameters_json: tool.parameters_json,
    }
}

fn assignment(task: Assignment) -> pb::TaskAssignment {
    pb::TaskAssignment {
        run_id: task.run_id.to_string(),
        task_key: task.key.0,
        node: task.node.into(),
        attempt: task.attempt,
        kind: task.kind.as_str().to_owned(),
        config_json: task.config_json.to_string(),
        state: task
            .state
            .iter()
            .map(|f| pb::StateField {
                name: f.name.to_string(),
                version: f.version,
                json: f.json.as_deref().unwrap_or_default().to_owned(),
            })
            .collect(),
        scope_json: task.scope_json,
        item: task.item.map(|item| pb::ItemRef {
            map: item.map,
            index: item.index as u64,
            step: item.step,
        }),
        timeout_ms: u64::try_from(task.timeout.as_millis()).unwrap_or(u64::MAX),
        bundle: blob_refs(&task.bundle),
        traceparent: task.traceparent,
        prompts_json: task.prompts_json,
        team: task.team.map(|seat| pb::Team {
            me: seat.me,
            members: seat.members.to_vec(),
            inbox: seat.inbox.into_iter().map(team_message).collect(),
        }),
        remote_tools: task.remote_tools.into_iter().map(tool_info).collect(),
    }
}

fn team_message(message: TeamMessage) -> pb::TeamMessage {
    pb::TeamMessage {
        seq: message.seq,
        from: message.from,
        content_json: message.content.to_string(),
    }
}

/// Tasks as one message, in order.
pub fn task_batch(tasks: Vec<Assignment>) -> pb::CoordinatorMessage {
    let tasks = tasks.into_iter().map(assignment).collect();
    pb::CoordinatorMessage {
        body: Some(pb::coordinator_message::Body::Tasks(pb::TaskBatch {
            tasks,
        })),
    }
}

pub fn to_worker(message: ToWorker) -> pb::CoordinatorMessage {
    use pb::coordinator_message::Body;
    let body = match message {
        ToWorker::Task(task) => Body::Task(assignment(task)),
        ToWorker::Cancel { run_id, key } => Body::Cancel(pb::CancelTask {
            run_id: run_id.to_string(),
            task_key: key.0,
        }),
        ToWorker::Call(call) => Body::Call(function_call(call)),
        ToWorker::ToolResult {
            run_id,
            key,
            call_id,
            result,
        } => Body::ToolResult(pb::ToolResult {
            run_id: run_id.to_string(),
            task_key: key.0,
            call_id,
            outcome: Some(match result {
                Ok(value) => pb::tool_result::Outcome::ValueJson(value.to_string()),
                Err(error) => pb::tool_result::Outcome::Error(error),
            }),
        }),
        ToWorker::Forget { run_id } => Body::Forget(pb::ForgetRun {
            run_id: run_id.to_string(),
        }),
        ToWorker::Deliver {
            run_id,
            key,
            message,
        } => Body::Deliver(pb::TeamDelivery {
            run_id: run_id.to_string(),
            task_key: key.0,
            message: Some(team_message(message)),
        }),
        ToWorker::SendAck {
            run_id,
            send_id,
            error,
        } => Body::SendAck(pb::SendAck {
            run_id: run_id.to_string(),
            send_id,
            error: error.unwrap_or_default(),
        }),
        ToWorker::Heartbeat => Body::Heartbeat(pb::Heartbeat {
            at_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        }),
    };
    pb::CoordinatorMessage { body: Some(body) }
}

fn function_call(call: FunctionCall) -> pb::FunctionCall {
    // Only Python needs the bundle's files.
    let bundle = if call.python.is_some() {
        blob_refs(&call.bundle)
    } else {
        Vec::new()
    };
    pb::FunctionCall {
        call_id: call.call,
        run_id: call.run_id.to_string(),
        name: call.name,
        args_json: Value::Array(call.args).to_string(),
        timeout_ms: u64::try_from(call.timeout.as_millis()).unwrap_or(u64::MAX),
        judge: call.judge,
        python: call.python.map(|python| pb::PythonCall {
            module: python.function.module,
            function: python.function.function,
            dir: python.dir,
            form: python.form.as_str().to_owned(),
        }),
        bundle,
        tool: call.tool.map(|tool| pb::ToolContext {
            node: tool.node.into(),
            attempt: tool.attempt,
            task_key: tool.key.0,
            scope_json: tool.scope_json,
            item: tool.item,
        }),
    }
}

fn blob_refs(bundle: &[crate::dispatch::BlobRef]) -> Vec<pb::BlobRef> {
    bundle
        .iter()
        .map(|b| pb::BlobRef {
            path: b.path.clone(),
            sha256: b.sha256.clone(),
            mode: b.mode,
        })
        .collect()
}

/// A worker's message as messages of one result each: a batch of results
/// is taken as its results sent one after another.
pub fn unbatched(message: pb::WorkerMessage) -> impl Iterator<Item = pb::WorkerMessage> {
    use pb::worker_message::Body;
    let (single, batch) = match message.body {
        Some(Body::Results(batch)) => (None, batch.results),
        body => (Some(pb::WorkerMessage { body }), Vec::new()),
    };
    let results = batch.into_iter().map(|result| pb::WorkerMessage {
        body: Some(Body::Result(result)),
    });
    single.into_iter().chain(results)
}

/// Whether a worker's message carries a result large enough that parsing
/// it should not hold an async thread (64 KiB of JSON and more).
pub fn is_large(message: &pb::WorkerMessage) -> bool {
    use pb::worker_message::Body;
    const LARGE: usize = 64 * 1024;
    match &message.body {
        Some(Body::Result(result)) => match &result.outcome {
            Some(pb::task_result::Outcome::Output(output)) => {
                output.json.len() + output.output_json.len() > LARGE
            }
            _ => false,
        },
        Some(Body::CallResult(result)) => {
            matches!(&result.outcome, Some(pb::call_result::Outcome::ValueJson(json)) if json.len() > LARGE)
        }
        _ => false,
    }
}

/// A worker's message, or `None` for one that carries nothing usable.
pub fn from_worker(message: pb::WorkerMessage) -> Option<FromWorker> {
    use pb::worker_message::Body;
    match message.body? {
        // Split by `unbatched` before.
        Body::Hello(_) | Body::Results(_) => None,
        Body::Heartbeat(_) => Some(FromWorker::Heartbeat),
        Body::Drain(_) => Some(FromWorker::Draining),
        Body::Refused(refused) => Some(FromWorker::Refused {
            run_id: refused.run_id.into(),
            key: TaskKey(refused.task_key),
        }),
        Body::Result(result) => {
            let notes = match &result.outcome {
                Some(pb::task_result::Outcome::Output(output)) => output
                    .notes_json
                    .iter()
                    .filter_map(|note| serde_json::from_str(note).ok())
                    .collect(),
                _ => Vec::new(),
            };
            let outcome = match result.outcome? {
                pb::task_result::Outcome::Output(output) => {
                    let transient = (!output.output_json.is_empty())
                        .then(|| parse_json(&output.output_json).unwrap_or(Value::Null));
                    Ok((output.json, transient))
                }
                pb::task_result::Outcome::Error(error) => Err(TaskFailure {
                    kind: FailureKind::from_wire(&error.kind),
                    message: error.message,
                    worker: None,
                }),
            };
            Some(FromWorker::Result {
                run_id: result.run_id.into(),
                key: TaskKey(result.task_key),
                outcome: TaskOutcome {
                    result: outcome,
                    read: result.messages_read,
                    notes,
                },
            })
        }
        Body::Send(send) => Some(FromWorker::TeamSend {
            run_id: send.run_id.into(),
            key: TaskKey(send.task_key),
            send: TeamSend {
                send_id: send.send_id,
                to: send.to,
                content: serde_json::from_str(&send.content_json)
                    .map_err(|error| NotJson(error.to_string())),
            },
        }),
        Body::CallResult(result) => {
            let value = match result.outcome? {
                pb::call_result::Outcome::ValueJson(json) => {
                    parse_json(&json).map_err(|error| CallError(invalid_json(&error)))
                }
                pb::call_result::Outcome::Error(error) => Err(CallError(error)),
            };
            Some(FromWorker::CallResult {
                run_id: result.run_id.into(),
                call: result.call_id,
                result: value,
                tool: result.tool,
            })
        }
        Body::ToolCall(call) => {
            let arguments = if call.arguments_json.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                // Checked against the tool's schema where it runs; text that
                // is not JSON reaches the tool as a string, and fails there.
                serde_json::from_str(&call.arguments_json)
                    .unwrap_or(Value::String(call.arguments_json))
            };
            Some(FromWorker::ToolCall {
                run_id: call.run_id.into(),
                key: TaskKey(call.task_key),
                call: ToolCall {
                    call_id: call.call_id,
                    tool: call.tool,
                    arguments,
                    timeout: std::time::Duration::from_millis(call.timeout_ms),
                },
            })
        }
    }
}

/// A worker's JSON (nothing: an empty object).
fn parse_json(text: &str) -> Result<Value, serde_json::Error> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text)
}

fn invalid_json(error: &serde_json::Error) -> String {
    format!("the worker sent invalid JSON: {error}")
}
