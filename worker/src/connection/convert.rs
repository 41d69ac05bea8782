//! Wire messages to the worker's terms and back: the one place that reads
//! and writes `weft_proto::v1`.
//!
//! What arrives as JSON text is parsed here, once: a task's kind, its
//! configuration, scope and prompts, a call's arguments, state values and
//! teammate messages. A task the worker cannot read fails with why; a
//! call it cannot read is answered with why.

use std::collections::VecDeque;
use std::time::Duration;
use weft_proto::TaskKey;

use serde_json::{Map, Value};
use weft_proto::PROTOCOL_VERSION;
use weft_proto::types::WorkerKind;
use weft_proto::v1 as pb;

use super::{Hello, Inbound, Outbound};
use crate::execute::{CallAnswer, CallError};
use crate::state_sync::{Assignment, Sent, SentField};
use crate::task::{
    BlobFile, CallTarget, Failure, FailureKind, FunctionCall, PythonTarget, Task, TaskReport,
};
use crate::task::{Message, TeamSeat, TeamSend, ToolCall, ToolCaller, ToolInfo};

/// The coordinator's message in the worker's terms, added to `into`: a
/// batch of tasks as its tasks in order, a message that carries nothing as
/// nothing.
pub(super) fn from_coordinator(message: pb::CoordinatorMessage, into: &mut VecDeque<Inbound>) {
    use pb::coordinator_message::Body;
    match message.body {
        Some(Body::Tasks(batch)) => into.extend(
            batch
                .tasks
                .into_iter()
                .map(|task| Inbound::Task(Box::new(assignment_of(task)))),
        ),
        Some(body) => into.extend(inbound(body)),
        None => {}
    }
}

/// One message (not a batch) in the worker's terms.
fn inbound(body: pb::coordinator_message::Body) -> Option<Inbound> {
    use pb::coordinator_message::Body;
    Some(match body {
        Body::Tasks(_) => return None,
        Body::Task(assignment) => Inbound::Task(Box::new(assignment_of(assignment))),
        Body::Cancel(cancel) => Inbound::Cancel {
            run_id: cancel.run_id.into(),
            key: TaskKey(cancel.task_key),
        },
        Body::Deliver(delivery) => Inbound::Deliver {
            run_id: delivery.run_id.into(),
            key: TaskKey(delivery.task_key),
            message: message_of(delivery.message?),
        },
        Body::SendAck(ack) => Inbound::SendAnswered {
            send_id: ack.send_id,
            refusal: (!ack.error.is_empty()).then_some(ack.error),
        },
        Body::Call(call) => match call_of(call) {
            Ok(call) => Inbound::Call(call),
            Err(answer) => Inbound::Unreadable(answer),
        },
        Body::Forget(forget) => Inbound::Forget {
            run_id: forget.run_id.into(),
        },
        Body::ToolResult(result) => Inbound::ToolAnswered {
            call_id: result.call_id,
            answer: match result.outcome {
                Some(pb::tool_result::Outcome::ValueJson(json)) => serde_json::from_str(&json)
                    .map_err(|error| format!("the tool's answer is not JSON: {error}")),
                Some(pb::tool_result::Outcome::Error(error)) => Err(error),
                None => Err("the coordinator sent an empty answer".to_owned()),
            },
        },
        Body::Heartbeat(_) | Body::Welcome(_) => Inbound::Alive,
    })
}

/// The worker's message on the wire. A task's result larger than the
/// coordinator takes (`max_result_bytes`) goes as a failed attempt saying
/// so: the coordinator would refuse the message itself.
pub(super) fn to_coordinator(message: Outbound, max_result_bytes: usize) -> pb::WorkerMessage {
    use pb::worker_message::Body;
    let body = match message {
        Outbound::Drain => Body::Drain(pb::Drain {}),
        Outbound::Heartbeat => Body::Heartbeat(pb::Heartbeat { at_unix_ms: 0 }),
        Outbound::Refused { run_id, key } => Body::Refused(pb::TaskRefused {
            run_id: run_id.into(),
            task_key: key.0,
        }),
        Outbound::Report(report) => Body::Result(task_result(report, max_result_bytes)),
        Outbound::Answer(answer) => Body::CallResult(pb::CallResult {
            call_id: answer.id,
            run_id: answer.run_id.into(),
            outcome: Some(match answer.result {
                Ok(value) => pb::call_result::Outcome::ValueJson(value.to_string()),
                Err(error) => pb::call_result::Outcome::Error(error.to_string()),
            }),
            tool: answer.tool,
        }),
    };
    pb::WorkerMessage { body: Some(body) }
}

/// A running attempt's teammate message on the wire.
pub(super) fn team_send(send: TeamSend) -> pb::WorkerMessage {
    let send = pb::TeamSend {
        run_id: send.run_id.into(),
        task_key: send.key.0,
        send_id: send.send_id,
        to: send.to,
        content_json: send.content_json,
    };
    pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Send(send)),
    }
}

/// A running agent's call of a tool elsewhere, on the wire.
pub(super) fn tool_call(call: ToolCall) -> pb::WorkerMessage {
    let call = pb::ToolCall {
        run_id: call.run_id.into(),
        task_key: call.key.0,
        call_id: call.call_id,
        tool: call.tool,
        arguments_json: call.arguments.to_string(),
        timeout_ms: u64::try_from(call.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
    };
    pb::WorkerMessage {
        body: Some(pb::worker_message::Body::ToolCall(call)),
    }
}

/// The hello that opens a session.
pub(super) fn hello(hello: Hello) -> pb::WorkerMessage {
    let hello = pb::Hello {
        protocol_version: PROTOCOL_VERSION,
        name: hello.name,
        slots: hello.slots,
        labels: hello.labels.into_iter().collect(),
        kinds: hello
            .kinds
            .into_iter()
            .map(|kind| kind.as_str().to_owned())
            .collect(),
        handlers: hello.handlers,
        functions: hello.functions,
        tool_infos: hello
            .tools
            .iter()
            .map(|tool| pb::ToolInfo {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters_json: tool.parameters.to_string(),
            })
            .collect(),
        tools: hello.tools.into_iter().map(|tool| tool.name).collect(),
        takes_batches: true,
    };
    pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Hello(hello)),
    }
}

/// A task assignment in the worker's terms.
pub fn assignment_of(mut wire: pb::TaskAssignment) -> Assignment {
    let fields = std::mem::take(&mut wire.state)
        .into_iter()
        .map(|field| SentField {
            value: match field.json.as_str() {
                "" => Sent::Held,
                json => serde_json::from_str(json)
                    .map_or_else(|error| Sent::Malformed(error.to_string()), Sent::Value),
            },
            name: field.name,
            version: field.version,
        })
        .collect();
    let (run_id, key) = (wire.run_id.clone(), TaskKey(wire.task_key));
    Assignment {
        run_id: run_id.into(),
        key,
        task: task_of(wire),
        fields,
    }
}

/// The task of an assignment, its state left to the cache.
fn task_of(wire: pb::TaskAssignment) -> Result<Task, Failure> {
    let kind = wire.kind.parse::<WorkerKind>().map_err(|_| {
        Failure::new(
            FailureKind::UnsupportedKind,
            format!("this worker cannot run kind '{}'", wire.kind),
        )
    })?;
    let config = json_or_null(&wire.config_json)
        .map_err(|e| Failure::new(FailureKind::InvalidTask, format!("task configuration: {e}")))?;
    let scope = match json_or_null(&wire.scope_json) {
        Ok(Value::Object(scope)) => scope,
        Ok(Value::Null) => Map::new(),
        Ok(other) => {
            return Err(Failure::new(
                FailureKind::InvalidTask,
                format!("the step's scope is not an object: {other}"),
            ));
        }
        Err(e) => {
            return Err(Failure::new(
                FailureKind::InvalidTask,
                format!("the step's scope: {e}"),
            ));
        }
    };
    let prompts = json_or_null(&wire.prompts_json)
        .map_err(|e| Failure::new(FailureKind::InvalidTask, format!("the step's prompts: {e}")))?;
    Ok(Task {
        run_id: wire.run_id.into(),
        key: TaskKey(wire.task_key),
        node: wire.node.into(),
        attempt: wire.attempt,
        kind,
        config,
        state: Vec::new(),
        state_versions: Vec::new(),
        scope,
        item: wire.item.map(|item| item.index),
        timeout: Duration::from_millis(wire.timeout_ms.max(1)),
        bundle: wire.bundle.into_iter().map(blob_of).collect(),
        team: wire.team.map(seat_of),
        prompts,
        traceparent: wire.traceparent,
        remote_tools: wire
            .remote_tools
            .into_iter()
            .map(|tool| ToolInfo {
                // A description that is not JSON is an object of any
                // arguments (a schema the model can still be offered).
                parameters: serde_json::from_str(&tool.parameters_json)
                    .unwrap_or_else(|_| serde_json::json!({"type": "object"})),
                name: tool.name,
                description: tool.description,
            })
            .collect(),
    })
}

/// JSON text, or `Null` for none.
fn json_or_null(text: &str) -> Result<Value, serde_json::Error> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text)
}

fn blob_of(wire: pb::BlobRef) -> BlobFile {
    BlobFile {
        path: wire.path,
        sha256: wire.sha256,
        mode: wire.mode,
    }
}

fn seat_of(wire: pb::Team) -> TeamSeat {
    TeamSeat {
        me: wire.me,
        members: wire.members,
        inbox: wire.inbox.into_iter().map(message_of).collect(),
    }
}

fn message_of(wire: pb::TeamMessage) -> Message {
    Message {
        from: wire.from,
        content: serde_json::from_str(&wire.content_json).unwrap_or(Value::Null),
        seq: wire.seq,
    }
}

/// A function call, or its answer when its arguments cannot be read.
fn call_of(wire: pb::FunctionCall) -> Result<FunctionCall, Box<CallAnswer>> {
    let args = match serde_json::from_str::<Vec<Value>>(&wire.args_json) {
        Ok(args) => args,
        Err(error) => {
            return Err(Box::new(CallAnswer {
                id: wire.call_id,
                run_id: wire.run_id.into(),
                result: Err(CallError::BadArguments(error)),
                tool: wire.tool.is_some(),
            }));
        }
    };
    let target = match (wire.tool, wire.python) {
        (Some(caller), _) => CallTarget::Tool(ToolCaller {
            node: caller.node.into(),
            attempt: caller.attempt,
            key: TaskKey(caller.task_key),
            item: caller.item,
            scope: match json_or_null(&caller.scope_json) {
                Ok(Value::Object(scope)) => scope,
                _ => Map::new(),
            },
        }),
        (None, Some(python)) => CallTarget::Python(PythonTarget {
            module: python.module,
            function: python.function,
            form: python.form,
            dir: python.dir,
        }),
        (None, None) if wire.judge => CallTarget::Judge,
        (None, None) => CallTarget::Registered,
    };
    Ok(FunctionCall {
        id: wire.call_id,
        run_id: wire.run_id.into(),
        name: wire.name,
        args,
        timeout: Duration::from_millis(wire.timeout_ms.max(1)),
        target,
        bundle: wire.bundle.into_iter().map(blob_of).collect(),
    })
}

fn task_result(report: TaskReport, max_bytes: usize) -> pb::TaskResult {
    let outcome = match report.outcome {
        Ok(done) => {
            let json = weft_proto::json::to_string(&done.writes);
            if json.len() > max_bytes {
                pb::task_result::Outcome::Error(pb::TaskError {
                    kind: FailureKind::InvalidOutput.as_str().to_owned(),
                    message: format!(
                        "the task's result is {} bytes; the coordinator takes at most {max_bytes} (its max_result_bytes)",
                        json.len()
                    ),
                })
            } else {
                pb::task_result::Outcome::Output(pb::TaskOutput {
                    json,
                    output_json: done.output.map(|o| o.to_string()).unwrap_or_default(),
                    notes_json: done.notes.iter().map(Value::to_string).collect(),
                })
            }
        }
        Err(failure) => pb::task_result::Outcome::Error(pb::TaskError {
            kind: failure.kind.as_str().to_owned(),
            message: failure.message,
        }),
    };
    pb::TaskResult {
        run_id: report.run_id.into(),
        task_key: report.key.0,
        outcome: Some(outcome),
        messages_read: report.read,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::task::Completed;

    fn assignment(kind: &str) -> pb::TaskAssignment {
        pb::TaskAssignment {
            run_id: "r".into(),
            task_key: 3,
            node: "n".into(),
            attempt: 1,
            kind: kind.into(),
            config_json: r#"{"handler":"h"}"#.into(),
            scope_json: r#"{"topic":"rust"}"#.into(),
            state: vec![
                pb::StateField {
                    name: "a".into(),
                    version: 1,
                    json: "[1]".into(),
                },
                pb::StateField {
                    name: "b".into(),
                    version: 4,
                    json: String::new(),
                },
            ],
            ..pb::TaskAssignment::default()
        }
    }

    #[test]
    fn an_assignment_arrives_parsed() {
        let assignment = assignment_of(assignment("task"));
        let task = assignment.task.unwrap();
        assert_eq!(task.kind, WorkerKind::Task);
        assert_eq!(task.config, json!({"handler": "h"}));
        assert_eq!(task.scope["topic"], json!("rust"));
        assert_eq!(task.prompts, Value::Null);
        assert!(matches!(&assignment.fields[0].value, Sent::Value(v) if *v == json!([1])));
        assert!(matches!(assignment.fields[1].value, Sent::Held));
    }

    #[test]
    fn a_batch_of_tasks_arrives_as_its_tasks_in_order() {
        let tasks = (1..=3)
            .map(|key| pb::TaskAssignment {
                task_key: key,
                ..assignment("task")
            })
            .collect();
        let message = pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Tasks(pb::TaskBatch {
                tasks,
            })),
        };
        let mut read = VecDeque::new();
        from_coordinator(message, &mut read);
        let keys: Vec<_> = read
            .iter()
            .map(|inbound| match inbound {
                Inbound::Task(assignment) => assignment.key,
                other => panic!("not a task: {other:?}"),
            })
            .collect();
        assert_eq!(keys, [1, 2, 3].map(TaskKey));
    }

    #[test]
    fn an_unknown_kind_fails_but_keeps_its_fields() {
        let assignment = assignment_of(assignment("teleport"));
        let failure = assignment.task.unwrap_err();
        assert_eq!(failure.kind, FailureKind::UnsupportedKind);
        assert_eq!(failure.message, "this worker cannot run kind 'teleport'");
        assert_eq!(
            (assignment.run_id.as_str(), assignment.key),
            ("r", TaskKey(3))
        );
        assert_eq!(assignment.fields.len(), 2);
    }

    #[test]
    fn a_call_with_unreadable_arguments_is_answered_with_why() {
        let call = pb::FunctionCall {
            call_id: 9,
            run_id: "r".into(),
            name: "f".into(),
            args_json: "[1,".into(),
            ..pb::FunctionCall::default()
        };
        let mut read = VecDeque::new();
        let message = pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Call(call)),
        };
        from_coordinator(message, &mut read);
        let Some(Inbound::Unreadable(answer)) = read.pop_front() else {
            panic!("the call was not answered");
        };
        assert_eq!(answer.id, 9);
        let error = answer.result.unwrap_err().to_string();
        assert!(error.starts_with("bad arguments:"), "{error}");
    }

    #[test]
    fn a_result_past_the_coordinators_limit_fails_the_attempt() {
        let report = |writes| TaskReport {
            run_id: "r".into(),
            key: TaskKey(1),
            outcome: Ok(Completed::writes(writes)),
            read: vec![2],
        };
        let small = task_result(report(json!({"a": 1})), 100);
        assert!(matches!(
            small.outcome,
            Some(pb::task_result::Outcome::Output(ref output)) if output.json == r#"{"a":1}"#
        ));
        assert_eq!(small.messages_read, [2]);
        let big = task_result(report(json!({"a": "x".repeat(200)})), 100);
        let Some(pb::task_result::Outcome::Error(error)) = big.outcome else {
            panic!("a result past the limit went out");
        };
        assert_eq!(error.kind, "invalid_output");
        assert!(error.message.contains("at most 100"), "{}", error.message);
    }
}
