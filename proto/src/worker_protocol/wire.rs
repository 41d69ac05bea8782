//! The worker protocol's one conversion to and from the generated `v1`
//! messages, for both sides of a worker's stream.
//!
//! Writing never fails. Reading names what it cannot read: a worker's
//! message that carries nothing usable reads as `None` (the coordinator
//! ignores it), and a task or call the worker cannot read reads as
//! [`Unreadable`], for the worker to answer with why.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::{
    BlobRef, CallError, CallFlow, CallForm, CallResult, CallTarget, CallUsage, FromWorker,
    FunctionCall, Hello, ItemRef, NotJson, PermitRequest, PythonCall, StateField, StreamKind,
    StreamPiece, TaskAssignment, TaskError, TaskOutput, TaskResult, TeamMessage, TeamSeat,
    TeamSend, ToWorker, ToolCall, ToolContext, ToolInfo,
};
use crate::types::FailureKind;
use crate::v1 as pb;
use crate::{PROTOCOL_VERSION, TaskKey};

pub mod batch;
mod kept;
pub mod result;

use batch::{BatchItem, BatchTask, TaskBatch};
use kept::numbered;
pub use kept::{Kept, MAX_KEPT_BUNDLES, MAX_KEPT_NODES};
pub use result::LastRun;
use result::Outcome;

/// A message a worker received that it cannot act on, with what it must
/// answer so that nobody waits for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Unreadable {
    /// A task of a kind this worker does not know: it fails the attempt,
    /// and still caches the state fields the task carried (the
    /// coordinator counts on it holding them).
    Task {
        /// The run.
        run_id: crate::RunId,
        /// The attempt.
        key: TaskKey,
        /// The fields the task carried.
        state: Vec<StateField>,
        /// Why it cannot run.
        error: String,
    },
    /// A call whose arguments or form cannot be read: it is answered with
    /// the error.
    Call {
        /// The run.
        run_id: crate::RunId,
        /// The call.
        call_id: u64,
        /// The call was a tool's.
        tool: bool,
        /// What cannot be read.
        error: String,
    },
}

// ---- the worker's hello ---------------------------------------------------

impl From<Hello> for pb::Hello {
    fn from(hello: Hello) -> Self {
        Self {
            protocol_version: PROTOCOL_VERSION,
            name: hello.name,
            slots: hello.slots,
            labels: hello.labels.into_iter().collect(),
            kinds: hello
                .kinds
                .iter()
                .map(|kind| kind.as_str().to_owned())
                .collect(),
            handlers: hello.handlers,
            functions: hello.functions,
            tools: hello.tools.iter().map(|tool| tool.name.clone()).collect(),
            tool_infos: hello.tools.into_iter().map(pb::ToolInfo::from).collect(),
            takes_batches: true,
            keeps_nodes: hello.keeps_nodes,
            keeps_bundles: hello.keeps_bundles,
            handler_reads: hello
                .handler_reads
                .into_iter()
                .map(|(handler, fields)| pb::HandlerReads { handler, fields })
                .collect(),
            shared_slots: hello.shared_slots,
        }
    }
}

impl From<pb::Hello> for Hello {
    /// A hello's terms. Kinds this version does not know are not hosted as
    /// far as it is concerned; a tool named in `tools` is described by its
    /// entry in `tool_infos` (one a worker does not describe takes an
    /// object of any arguments).
    fn from(hello: pb::Hello) -> Self {
        let mut infos = hello.tool_infos;
        let tools = hello
            .tools
            .into_iter()
            .map(
                |name| match infos.iter().position(|info| info.name == name) {
                    Some(at) => ToolInfo::from(infos.swap_remove(at)),
                    None => ToolInfo {
                        name,
                        description: String::new(),
                        parameters: ToolInfo::any_arguments(),
                    },
                },
            )
            .collect();
        Self {
            name: hello.name,
            slots: hello.slots,
            labels: hello.labels.into_iter().collect(),
            kinds: hello.kinds.iter().filter_map(|k| k.parse().ok()).collect(),
            handlers: hello.handlers,
            functions: hello.functions,
            tools,
            keeps_nodes: hello.keeps_nodes,
            keeps_bundles: hello.keeps_bundles,
            handler_reads: hello
                .handler_reads
                .into_iter()
                .map(|reads| (reads.handler, reads.fields))
                .collect(),
            shared_slots: hello.shared_slots,
        }
    }
}

impl From<ToolInfo> for pb::ToolInfo {
    fn from(tool: ToolInfo) -> Self {
        Self {
            name: tool.name,
            description: tool.description,
            parameters_json: tool.parameters.to_string(),
        }
    }
}

impl From<pb::ToolInfo> for ToolInfo {
    fn from(tool: pb::ToolInfo) -> Self {
        Self {
            parameters: serde_json::from_str(&tool.parameters_json)
                .unwrap_or_else(|_| ToolInfo::any_arguments()),
            name: tool.name,
            description: tool.description,
        }
    }
}

// ---- coordinator to worker ----------------------------------------------

impl From<ToWorker> for pb::CoordinatorMessage {
    fn from(message: ToWorker) -> Self {
        use pb::coordinator_message::Body;
        let body = match message {
            ToWorker::Task(task) => Body::Task(task.into()),
            ToWorker::Cancel { run_id, key } => Body::Cancel(pb::CancelTask {
                run_id: run_id.into(),
                task_key: key.0,
            }),
            ToWorker::Call(call) => Body::Call(call.into()),
            ToWorker::ToolResult {
                run_id,
                key,
                call_id,
                result,
            } => Body::ToolResult(pb::ToolResult {
                run_id: run_id.into(),
                task_key: key.0,
                call_id,
                outcome: Some(match result {
                    Ok(value) => pb::tool_result::Outcome::ValueJson(value.to_string()),
                    Err(error) => pb::tool_result::Outcome::Error(error),
                }),
            }),
            ToWorker::Forget { run_id } => Body::Forget(pb::ForgetRun {
                run_id: run_id.into(),
            }),
            ToWorker::Deliver {
                run_id,
                key,
                message,
            } => Body::Deliver(pb::TeamDelivery {
                run_id: run_id.into(),
                task_key: key.0,
                message: Some(message.into()),
            }),
            ToWorker::Permit {
                run_id,
                key,
                request_id,
                outcome,
            } => Body::Permit(pb::PermitAnswer {
                run_id: run_id.into(),
                task_key: key.0,
                request_id,
                outcome: Some(match outcome {
                    Ok(grant) => pb::permit_answer::Outcome::Grant(grant),
                    Err(why) => pb::permit_answer::Outcome::Refused(why),
                }),
            }),
            ToWorker::SendAck {
                run_id,
                send_id,
                error,
            } => Body::SendAck(pb::SendAck {
                run_id: run_id.into(),
                send_id,
                error: error.unwrap_or_default(),
            }),
            ToWorker::Demand { queued } => Body::Demand(pb::Demand { queued }),
            ToWorker::Heartbeat => Body::Heartbeat(pb::Heartbeat {
                at_unix_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            }),
        };
        Self { body: Some(body) }
    }
}

/// Tasks as one message, in order (for a worker that takes batches),
/// their ids and scopes written from the text they share.
pub fn task_batch(tasks: Vec<TaskAssignment>) -> pb::CoordinatorMessage {
    let tasks = tasks.into_iter().map(BatchTask::from).collect();
    pb::coordinator_message::Body::Tasks(TaskBatch { tasks }).into()
}

impl From<pb::coordinator_message::Body> for pb::CoordinatorMessage {
    fn from(body: pb::coordinator_message::Body) -> Self {
        Self { body: Some(body) }
    }
}

/// The coordinator's message in domain terms, added to `into`: a batch of
/// tasks as its tasks in order, a welcome as a heartbeat (the handshake
/// reads the first welcome itself), a message that carries nothing as
/// nothing.
///
/// `kept` is the node definitions this session's messages asked the
/// worker to keep: a task that carries one with a number is kept in it,
/// and a task that names one by its number alone reads it from there.
pub fn read_coordinator_message(
    message: pb::CoordinatorMessage,
    kept: &mut Kept,
    into: &mut impl Extend<Result<ToWorker, Unreadable>>,
) {
    use pb::coordinator_message::Body;
    let Some(body) = message.body else { return };
    match body {
        Body::Tasks(batch) => into.extend(batch.tasks.into_iter().map(|task| task_of(task, kept))),
        Body::Task(task) => into.extend([task_of(task.into(), kept)]),
        Body::Call(call) => into.extend([call_of(call).map(ToWorker::Call)]),
        Body::Cancel(cancel) => into.extend([Ok(ToWorker::Cancel {
            run_id: cancel.run_id.into(),
            key: TaskKey(cancel.task_key),
        })]),
        Body::Deliver(delivery) => into.extend(delivery.message.map(|message| {
            Ok(ToWorker::Deliver {
                run_id: delivery.run_id.into(),
                key: TaskKey(delivery.task_key),
                message: message.into(),
            })
        })),
        Body::SendAck(ack) => into.extend([Ok(ToWorker::SendAck {
            run_id: ack.run_id.into(),
            send_id: ack.send_id,
            error: (!ack.error.is_empty()).then_some(ack.error),
        })]),
        Body::Forget(forget) => into.extend([Ok(ToWorker::Forget {
            run_id: forget.run_id.into(),
        })]),
        Body::ToolResult(result) => into.extend([Ok(ToWorker::ToolResult {
            run_id: result.run_id.into(),
            key: TaskKey(result.task_key),
            call_id: result.call_id,
            result: match result.outcome {
                Some(pb::tool_result::Outcome::ValueJson(json)) => serde_json::from_str(&json)
                    .map_err(|error| format!("the tool's answer is not JSON: {error}")),
                Some(pb::tool_result::Outcome::Error(error)) => Err(error),
                None => Err("the coordinator sent an empty answer".to_owned()),
            },
        })]),
        Body::Permit(answer) => into.extend([Ok(ToWorker::Permit {
            run_id: answer.run_id.into(),
            key: TaskKey(answer.task_key),
            request_id: answer.request_id,
            outcome: match answer.outcome {
                Some(pb::permit_answer::Outcome::Grant(grant)) => Ok(grant),
                Some(pb::permit_answer::Outcome::Refused(why)) => Err(why),
                None => Err("the coordinator sent an empty answer to a call permit".to_owned()),
            },
        })]),
        Body::Demand(demand) => into.extend([Ok(ToWorker::Demand {
            queued: demand.queued,
        })]),
        Body::Heartbeat(_) | Body::Welcome(_) => into.extend([Ok(ToWorker::Heartbeat)]),
    }
}

impl From<TaskAssignment> for BatchTask {
    fn from(task: TaskAssignment) -> Self {
        let (run_id, scope_json, item) = (
            Arc::<str>::from(task.run_id.clone()),
            task.scope_json.clone(),
            task.item.clone(),
        );
        Self {
            rest: wire_rest(task),
            run_id: run_id.into(),
            scope_json,
            item: item.map(|item| BatchItem {
                map: Arc::<str>::from(item.map).into(),
                index: item.index as u64,
                step: item.step,
            }),
        }
    }
}

impl From<TaskAssignment> for pb::TaskAssignment {
    fn from(task: TaskAssignment) -> Self {
        let (run_id, scope_json, item) = (
            String::from(task.run_id.clone()),
            String::from_utf8_lossy(task.scope_json.as_bytes()).into_owned(),
            task.item.clone(),
        );
        Self {
            run_id,
            scope_json,
            item: item.map(|item| pb::ItemRef {
                map: item.map.to_string(),
                index: item.index as u64,
                step: item.step,
            }),
            ..wire_rest(task)
        }
    }
}

impl From<pb::TaskAssignment> for BatchTask {
    /// A task sent alone, read as a batch's (its strings' buffers taken).
    fn from(mut task: pb::TaskAssignment) -> Self {
        Self {
            run_id: std::mem::take(&mut task.run_id).into(),
            scope_json: std::mem::take(&mut task.scope_json).into(),
            item: task.item.take().map(|item| BatchItem {
                map: item.map.into(),
                index: item.index,
                step: item.step,
            }),
            rest: task,
        }
    }
}

/// Every field of `task`'s message but its run id, scope and item.
fn wire_rest(task: TaskAssignment) -> pb::TaskAssignment {
    let (node_ref, carried) = numbered(task.node_ref);
    let (bundle_number, bundle_carried) = numbered(task.bundle_ref);
    let (bundle_keep, bundle_held) = if bundle_carried {
        (bundle_number, 0)
    } else {
        (0, bundle_number)
    };
    let definition = &task.definition;
    let text = |value: &str| {
        if carried {
            value.to_owned()
        } else {
            String::new()
        }
    };
    pb::TaskAssignment {
        run_id: String::new(),
        task_key: task.key.0,
        node: text(&definition.node),
        attempt: task.attempt,
        kind: text(definition.kind.as_str()),
        config_json: text(&definition.config_json),
        node_ref,
        state: task
            .state
            .into_iter()
            .map(|field| pb::StateField {
                name: field.name.to_string(),
                version: field.version,
                json: field.json.as_deref().unwrap_or_default().to_owned(),
            })
            .collect(),
        scope_json: String::new(),
        item: None,
        timeout_ms: millis(task.timeout),
        bundle: if bundle_carried {
            blob_refs(&task.bundle)
        } else {
            Vec::new()
        },
        bundle_keep,
        bundle_held,
        traceparent: task.traceparent,
        prompts_json: task.prompts_json,
        team: task.team.map(pb::Team::from),
        remote_tools: task
            .remote_tools
            .into_iter()
            .map(pb::ToolInfo::from)
            .collect(),
        flow_grant: task.flow.and_then(|flow| flow.grant).unwrap_or(0),
        flow_ask: task.flow.is_some_and(|flow| flow.ask),
    }
}

/// A task in domain terms, its node's definition carried or read from
/// `kept`; or, for a kind this version does not know or a definition it
/// does not keep, what the worker must answer and cache.
fn task_of(task: BatchTask, kept: &mut Kept) -> Result<ToWorker, Unreadable> {
    let BatchTask {
        rest: mut wire,
        run_id,
        scope_json,
        item,
    } = task;
    let state = std::mem::take(&mut wire.state)
        .into_iter()
        .map(|field| StateField {
            name: field.name.into(),
            version: field.version,
            json: (!field.json.is_empty()).then(|| field.json.into()),
        })
        .collect();
    let run_id = kept.run_id(&run_id);
    // Both are read whatever the other holds: what the message asks to
    // keep is kept even when the task cannot run, as the coordinator counts.
    let definition = kept.definition(&mut wire);
    let bundle = kept.bundle(&mut wire);
    let read = definition.and_then(|definition| Ok((definition, bundle?)));
    let ((definition, node_ref), (bundle, bundle_ref)) = match read {
        Ok(read) => read,
        Err(error) => {
            return Err(Unreadable::Task {
                run_id,
                key: TaskKey(wire.task_key),
                state,
                error,
            });
        }
    };
    Ok(ToWorker::Task(TaskAssignment {
        run_id,
        key: TaskKey(wire.task_key),
        attempt: wire.attempt,
        definition,
        node_ref,
        state,
        scope_json,
        item: item.map(|item| ItemRef {
            map: kept.map_id(&item.map),
            index: usize::try_from(item.index).unwrap_or(usize::MAX),
            step: item.step,
        }),
        timeout: Duration::from_millis(wire.timeout_ms.max(1)),
        bundle,
        bundle_ref,
        team: wire.team.map(TeamSeat::from),
        prompts_json: wire.prompts_json,
        traceparent: wire.traceparent,
        remote_tools: wire.remote_tools.into_iter().map(ToolInfo::from).collect(),
        flow: (wire.flow_grant != 0 || wire.flow_ask).then_some(CallFlow {
            grant: (wire.flow_grant != 0).then_some(wire.flow_grant),
            ask: wire.flow_ask,
        }),
    }))
}

impl From<TeamSeat> for pb::Team {
    fn from(seat: TeamSeat) -> Self {
        Self {
            me: seat.me,
            members: seat.members.to_vec(),
            inbox: seat.inbox.into_iter().map(pb::TeamMessage::from).collect(),
        }
    }
}

impl From<pb::Team> for TeamSeat {
    fn from(wire: pb::Team) -> Self {
        Self {
            me: wire.me,
            members: wire.members.into(),
            inbox: wire.inbox.into_iter().map(TeamMessage::from).collect(),
        }
    }
}

impl From<TeamMessage> for pb::TeamMessage {
    fn from(message: TeamMessage) -> Self {
        Self {
            seq: message.seq,
            from: message.from,
            content_json: message.content.to_string(),
        }
    }
}

impl From<pb::TeamMessage> for TeamMessage {
    /// A message whose content is not JSON (a coordinator never sends one)
    /// reads as `null`.
    fn from(wire: pb::TeamMessage) -> Self {
        Self {
            seq: wire.seq,
            from: wire.from,
            content: serde_json::from_str(&wire.content_json).unwrap_or(Value::Null),
        }
    }
}

impl From<BlobRef> for pb::BlobRef {
    fn from(blob: BlobRef) -> Self {
        Self {
            path: blob.path,
            sha256: blob.sha256,
            mode: blob.mode,
        }
    }
}

impl From<pb::BlobRef> for BlobRef {
    fn from(wire: pb::BlobRef) -> Self {
        Self {
            path: wire.path,
            sha256: wire.sha256,
            mode: wire.mode,
        }
    }
}

fn blob_refs(bundle: &[BlobRef]) -> Vec<pb::BlobRef> {
    bundle.iter().cloned().map(pb::BlobRef::from).collect()
}

impl From<FunctionCall> for pb::FunctionCall {
    fn from(call: FunctionCall) -> Self {
        let mut wire = Self {
            call_id: call.call_id,
            run_id: call.run_id.into(),
            name: call.name,
            args_json: Value::Array(call.args).to_string(),
            timeout_ms: millis(call.timeout),
            ..Self::default()
        };
        match call.target {
            CallTarget::Registered => {}
            CallTarget::Judge => wire.judge = true,
            CallTarget::Python(python) => {
                // Only a Python function needs the bundle's files.
                wire.bundle = blob_refs(&call.bundle);
                wire.python = Some(pb::PythonCall {
                    module: python.module,
                    function: python.function,
                    dir: python.dir,
                    form: python.form.as_str().to_owned(),
                });
            }
            CallTarget::Tool(tool) => {
                wire.tool = Some(pb::ToolContext {
                    node: tool.node.into(),
                    attempt: tool.attempt,
                    task_key: tool.key.0,
                    scope_json: tool.scope_json,
                    item: tool.item,
                });
            }
        }
        wire
    }
}

/// A call in domain terms, or its answer when its arguments or form
/// cannot be read.
fn call_of(wire: pb::FunctionCall) -> Result<FunctionCall, Unreadable> {
    let (run_id, call_id, tool) = (wire.run_id.clone(), wire.call_id, wire.tool.is_some());
    let unreadable = |error: String| Unreadable::Call {
        run_id: run_id.clone().into(),
        call_id,
        tool,
        error,
    };
    let args = serde_json::from_str::<Vec<Value>>(&wire.args_json)
        .map_err(|error| unreadable(format!("bad arguments: {error}")))?;
    let target = match (wire.tool, wire.python) {
        (Some(tool), _) => CallTarget::Tool(ToolContext {
            node: tool.node.into(),
            attempt: tool.attempt,
            key: TaskKey(tool.task_key),
            item: tool.item,
            scope_json: tool.scope_json,
        }),
        (None, Some(python)) => CallTarget::Python(PythonCall {
            form: CallForm::from_name(&python.form).ok_or_else(|| {
                unreadable(format!(
                    "unknown argument form '{}' for a Python function",
                    python.form
                ))
            })?,
            module: python.module,
            function: python.function,
            dir: python.dir,
        }),
        (None, None) if wire.judge => CallTarget::Judge,
        (None, None) => CallTarget::Registered,
    };
    Ok(FunctionCall {
        call_id: wire.call_id,
        run_id: wire.run_id.into(),
        name: wire.name,
        args,
        timeout: Duration::from_millis(wire.timeout_ms.max(1)),
        target,
        bundle: Arc::new(wire.bundle.into_iter().map(BlobRef::from).collect()),
    })
}

// ---- worker to coordinator ----------------------------------------------

impl From<FromWorker> for pb::WorkerMessage {
    fn from(message: FromWorker) -> Self {
        use pb::worker_message::Body;
        let body = match message {
            FromWorker::Result(result) => Body::Result(result.into()),
            FromWorker::CallResult(result) => Body::CallResult(pb::CallResult {
                call_id: result.call_id,
                run_id: result.run_id.into(),
                outcome: Some(match result.result {
                    Ok(value) => pb::call_result::Outcome::ValueJson(value.to_string()),
                    Err(error) => pb::call_result::Outcome::Error(error.0),
                }),
                tool: result.tool,
            }),
            FromWorker::Heartbeat => Body::Heartbeat(pb::Heartbeat { at_unix_ms: 0 }),
            FromWorker::Draining => Body::Drain(pb::Drain {}),
            FromWorker::Slots(slots) => Body::Slots(pb::Slots { slots }),
            FromWorker::Refused { run_id, key } => Body::Refused(pb::TaskRefused {
                run_id: run_id.into(),
                task_key: key.0,
            }),
            FromWorker::TeamSend { run_id, key, send } => Body::Send(pb::TeamSend {
                run_id: run_id.into(),
                task_key: key.0,
                send_id: send.send_id,
                to: send.to,
                // A worker sends values; text it could not read goes as
                // it came, for the coordinator to refuse.
                content_json: match send.content {
                    Ok(value) => value.to_string(),
                    Err(NotJson(text)) => text,
                },
            }),
            FromWorker::ToolCall { run_id, key, call } => Body::ToolCall(pb::ToolCall {
                run_id: run_id.into(),
                task_key: key.0,
                call_id: call.call_id,
                tool: call.tool,
                arguments_json: call.arguments.to_string(),
                timeout_ms: millis(call.timeout).max(1),
            }),
            FromWorker::CallPermit {
                run_id,
                key,
                permit,
            } => Body::Permit(pb::CallPermit {
                run_id: run_id.into(),
                task_key: key.0,
                request_id: permit.request_id,
                provider: permit.provider,
                model: permit.model,
                tokens: permit.tokens,
            }),
            FromWorker::Stream { run_id, key, piece } => Body::Stream(pb::TaskStream {
                run_id: run_id.into(),
                task_key: key.0,
                text: piece.text,
                kind: piece.kind.as_str().to_owned(),
            }),
            FromWorker::CallUsage { run_id, key, usage } => Body::Usage(pb::CallUsage {
                run_id: run_id.into(),
                task_key: key.0,
                grant: usage.grant,
                provider: usage.provider,
                model: usage.model,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cached_tokens: usage.cached_tokens,
                rate_limited: usage.rate_limited.is_some(),
                retry_after_ms: usage.rate_limited.flatten().map(millis),
            }),
        };
        Self { body: Some(body) }
    }
}

impl From<TaskResult> for pb::TaskResult {
    fn from(result: TaskResult) -> Self {
        let outcome = match result.outcome {
            Ok(output) => Outcome::Output(pb::TaskOutput {
                json: output.writes_json,
                output_json: output.output.map(|o| o.to_string()).unwrap_or_default(),
                notes_json: output.notes.iter().map(Value::to_string).collect(),
            }),
            Err(error) => Outcome::Error(pb::TaskError {
                kind: error.kind.as_str().to_owned(),
                message: error.message,
                notes_json: error.notes.iter().map(Value::to_string).collect(),
            }),
        };
        Self {
            run_id: Arc::<str>::from(result.run_id).into(),
            task_key: result.key.0,
            outcome: Some(outcome),
            messages_read: result.read,
        }
    }
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
            Some(Outcome::Output(output)) => output.json.len() + output.output_json.len() > LARGE,
            _ => false,
        },
        Some(Body::CallResult(result)) => {
            matches!(&result.outcome, Some(pb::call_result::Outcome::ValueJson(json)) if json.len() > LARGE)
        }
        _ => false,
    }
}

/// A worker's message (one result: see [`unbatched`]) in domain terms, or
/// `None` for one that carries nothing usable: a result or answer with no
/// outcome, a second hello, a batch. A result's run id is shared with the
/// last one read from the same worker (`last`) when it is the same.
pub fn read_worker_message(message: pb::WorkerMessage, last: &mut LastRun) -> Option<FromWorker> {
    use pb::worker_message::Body;
    Some(match message.body? {
        Body::Hello(_) | Body::Results(_) => return None,
        Body::Heartbeat(_) => FromWorker::Heartbeat,
        Body::Drain(_) => FromWorker::Draining,
        Body::Slots(slots) => FromWorker::Slots(slots.slots),
        Body::Refused(refused) => FromWorker::Refused {
            run_id: refused.run_id.into(),
            key: TaskKey(refused.task_key),
        },
        Body::Result(result) => FromWorker::Result(TaskResult {
            run_id: last.run_id(&result.run_id),
            key: TaskKey(result.task_key),
            outcome: match result.outcome? {
                Outcome::Output(output) => Ok(TaskOutput {
                    output: (!output.output_json.is_empty())
                        .then(|| serde_json::from_str(&output.output_json).unwrap_or(Value::Null)),
                    notes: output
                        .notes_json
                        .iter()
                        .filter_map(|note| serde_json::from_str(note).ok())
                        .collect(),
                    writes_json: output.json,
                }),
                Outcome::Error(error) => Err(TaskError {
                    kind: FailureKind::from_wire(&error.kind),
                    message: error.message,
                    notes: error
                        .notes_json
                        .iter()
                        .filter_map(|note| serde_json::from_str(note).ok())
                        .collect(),
                }),
            },
            read: result.messages_read,
        }),
        Body::Send(send) => FromWorker::TeamSend {
            run_id: send.run_id.into(),
            key: TaskKey(send.task_key),
            send: TeamSend {
                send_id: send.send_id,
                to: send.to,
                content: serde_json::from_str(&send.content_json)
                    .map_err(|error| NotJson(error.to_string())),
            },
        },
        Body::CallResult(result) => FromWorker::CallResult(CallResult {
            run_id: result.run_id.into(),
            call_id: result.call_id,
            result: match result.outcome? {
                pb::call_result::Outcome::ValueJson(json) => object_or_value(&json)
                    .map_err(|error| CallError(format!("the worker sent invalid JSON: {error}"))),
                pb::call_result::Outcome::Error(error) => Err(CallError(error)),
            },
            tool: result.tool,
        }),
        Body::ToolCall(call) => FromWorker::ToolCall {
            run_id: call.run_id.into(),
            key: TaskKey(call.task_key),
            call: ToolCall {
                call_id: call.call_id,
                tool: call.tool,
                // Checked against the tool's schema where it runs; text
                // that is not JSON reaches the tool as a string, and fails
                // there.
                arguments: if call.arguments_json.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    serde_json::from_str(&call.arguments_json)
                        .unwrap_or(Value::String(call.arguments_json))
                },
                timeout: Duration::from_millis(call.timeout_ms),
            },
        },
        Body::Permit(permit) => FromWorker::CallPermit {
            run_id: permit.run_id.into(),
            key: TaskKey(permit.task_key),
            permit: PermitRequest {
                request_id: permit.request_id,
                provider: permit.provider,
                model: permit.model,
                tokens: permit.tokens,
            },
        },
        Body::Stream(stream) => FromWorker::Stream {
            run_id: stream.run_id.into(),
            key: TaskKey(stream.task_key),
            piece: StreamPiece {
                kind: StreamKind::from_name(&stream.kind),
                text: stream.text,
            },
        },
        Body::Usage(usage) => FromWorker::CallUsage {
            run_id: usage.run_id.into(),
            key: TaskKey(usage.task_key),
            usage: CallUsage {
                grant: usage.grant,
                provider: usage.provider,
                model: usage.model,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cached_tokens: usage.cached_tokens,
                rate_limited: usage
                    .rate_limited
                    .then(|| usage.retry_after_ms.map(Duration::from_millis)),
            },
        },
    })
}

/// A worker's JSON value (nothing: an empty object).
fn object_or_value(text: &str) -> Result<Value, serde_json::Error> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text)
}

/// A duration in whole milliseconds on the wire.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
