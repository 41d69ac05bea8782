//! The worker protocol's messages in the session's terms, and back.
//!
//! The protocol (`weft_proto::worker_protocol`) reads and writes the wire;
//! this only says what each message means to this worker: a task is read
//! into an attempt it can run (or fail with why), a call it cannot read is
//! answered with why, and a report is checked against the coordinator's
//! result limit as it goes out.

use std::collections::VecDeque;

use weft_proto::v1 as pb;
use weft_proto::worker_protocol::wire::{self, Kept, Unreadable};
use weft_proto::worker_protocol::{CallError as Unanswered, CallResult, FromWorker, ToWorker};

use super::{Inbound, Outbound};
use crate::execute::{CallAnswer, CallError};
use crate::state_sync::Assignment;
use crate::task::{Failure, FailureKind};

/// The coordinator's message in the worker's terms, added to `into`: a
/// batch of tasks as its tasks in order, a message that carries nothing as
/// nothing.
pub(super) fn from_coordinator(
    message: pb::CoordinatorMessage,
    kept: &mut Kept,
    into: &mut VecDeque<Inbound>,
) {
    wire::read_coordinator_message(message, kept, &mut Unread(into));
}

/// The connection's unread messages, taking the protocol's as the
/// worker's as they are read (no list between them).
struct Unread<'a>(&'a mut VecDeque<Inbound>);

impl Extend<Result<ToWorker, Unreadable>> for Unread<'_> {
    fn extend<I: IntoIterator<Item = Result<ToWorker, Unreadable>>>(&mut self, read: I) {
        self.0.extend(read.into_iter().map(inbound));
    }
}

/// One message in the worker's terms.
fn inbound(message: Result<ToWorker, Unreadable>) -> Inbound {
    match message {
        Ok(ToWorker::Task(task)) => Inbound::Task(Box::new(Assignment::read(task))),
        Ok(ToWorker::Cancel { run_id, key }) => Inbound::Cancel { run_id, key },
        Ok(ToWorker::Deliver {
            run_id,
            key,
            message,
        }) => Inbound::Deliver {
            run_id,
            key,
            message,
        },
        Ok(ToWorker::SendAck { send_id, error, .. }) => Inbound::SendAnswered {
            send_id,
            refusal: error,
        },
        Ok(ToWorker::Call(call)) => Inbound::Call(call),
        Ok(ToWorker::Forget { run_id }) => Inbound::Forget { run_id },
        Ok(ToWorker::ToolResult {
            call_id, result, ..
        }) => Inbound::ToolAnswered {
            call_id,
            answer: result,
        },
        Ok(ToWorker::Permit {
            request_id,
            outcome,
            ..
        }) => Inbound::PermitAnswered {
            request_id,
            answer: outcome,
        },
        Ok(ToWorker::Heartbeat) => Inbound::Alive,
        Ok(ToWorker::Demand { queued }) => Inbound::Demand(queued),
        Err(Unreadable::Task {
            run_id,
            key,
            state,
            error,
        }) => Inbound::Task(Box::new(Assignment::unrunnable(
            run_id,
            key,
            state,
            Failure::new(FailureKind::UnsupportedKind, error),
        ))),
        Err(Unreadable::Call {
            run_id,
            call_id,
            tool,
            error,
        }) => Inbound::Unreadable(Box::new(CallAnswer {
            id: call_id,
            run_id,
            result: Err(CallError::Unreadable(error)),
            tool,
        })),
    }
}

/// The worker's message as the protocol carries it; a report is checked
/// against the coordinator's `max_result_bytes`.
pub(super) fn to_coordinator(message: Outbound, max_result_bytes: usize) -> FromWorker {
    match message {
        Outbound::Drain => FromWorker::Draining,
        Outbound::Heartbeat => FromWorker::Heartbeat,
        Outbound::Refused { run_id, key } => FromWorker::Refused { run_id, key },
        Outbound::Report(report) => FromWorker::Result(report.into_result(max_result_bytes)),
        Outbound::Piece { run_id, key, piece } => FromWorker::Stream { run_id, key, piece },
        Outbound::Answer(answer) => FromWorker::CallResult(CallResult {
            run_id: answer.run_id,
            call_id: answer.id,
            result: answer.result.map_err(|error| Unanswered(error.to_string())),
            tool: answer.tool,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;
    use weft_proto::TaskKey;
    use weft_proto::types::WorkerKind;
    use weft_proto::worker_protocol::TaskOutput;

    use super::*;
    use crate::state_sync::Sent;
    use crate::task::{Completed, TaskReport};

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

    fn read(body: pb::coordinator_message::Body) -> Inbound {
        read_keeping(&mut Kept::default(), body)
    }

    fn read_keeping(kept: &mut Kept, body: pb::coordinator_message::Body) -> Inbound {
        let mut read = VecDeque::new();
        from_coordinator(pb::CoordinatorMessage { body: Some(body) }, kept, &mut read);
        assert_eq!(read.len(), 1, "{read:?}");
        read.pop_front().unwrap()
    }

    #[test]
    fn an_assignment_arrives_parsed() {
        let Inbound::Task(assignment) =
            read(pb::coordinator_message::Body::Task(assignment("task")))
        else {
            panic!("not a task");
        };
        let task = assignment.task.unwrap();
        assert_eq!(task.kind, WorkerKind::Task);
        assert_eq!(*task.config, json!({"handler": "h"}));
        assert_eq!(task.scope["topic"], json!("rust"));
        assert_eq!(task.prompts, Value::Null);
        assert!(matches!(&assignment.fields[0].value, Sent::Value(v) if v.json() == "[1]"));
        assert!(matches!(assignment.fields[1].value, Sent::Held));
    }

    #[test]
    fn a_kept_configuration_is_read_once_and_a_bad_one_fails_each_task_that_names_it() {
        let mut kept = Kept::default();
        let mut first = assignment("task");
        first.node_ref = 1;
        let named = pb::TaskAssignment {
            node: String::new(),
            kind: String::new(),
            config_json: String::new(),
            ..first.clone()
        };
        let tasks: Vec<_> = [first.clone(), named.clone()]
            .into_iter()
            .map(|wire| {
                let Inbound::Task(assignment) =
                    read_keeping(&mut kept, pb::coordinator_message::Body::Task(wire))
                else {
                    panic!("not a task");
                };
                assignment.task.unwrap()
            })
            .collect();
        assert_eq!(tasks[1].node, "n");
        assert!(Arc::ptr_eq(&tasks[0].config, &tasks[1].config), "read once");
        // The number is given to a configuration that is not JSON.
        first.config_json = "{not json".into();
        for wire in [first, named] {
            let Inbound::Task(assignment) =
                read_keeping(&mut kept, pb::coordinator_message::Body::Task(wire))
            else {
                panic!("not a task");
            };
            let failure = assignment.task.unwrap_err();
            assert_eq!(failure.kind, FailureKind::InvalidTask);
            assert!(
                failure
                    .message
                    .starts_with("task configuration: key must be a string"),
                "{}",
                failure.message
            );
        }
    }

    #[test]
    fn a_scope_that_is_not_an_object_fails_the_attempt_with_why() {
        let mut wire = assignment("task");
        wire.scope_json = "[1]".into();
        let Inbound::Task(assignment) = read(pb::coordinator_message::Body::Task(wire)) else {
            panic!("not a task");
        };
        let failure = assignment.task.unwrap_err();
        assert_eq!(failure.kind, FailureKind::InvalidTask);
        assert_eq!(failure.message, "the step's scope is not an object: [1]");
        assert_eq!(assignment.fields.len(), 2, "its fields are still cached");
    }

    #[test]
    fn an_unknown_kind_fails_but_keeps_its_fields() {
        let Inbound::Task(assignment) =
            read(pb::coordinator_message::Body::Task(assignment("teleport")))
        else {
            panic!("not a task");
        };
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
        let Inbound::Unreadable(answer) = read(pb::coordinator_message::Body::Call(call)) else {
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
        let small = to_coordinator(Outbound::Report(report(json!({"a": 1}))), 100);
        let FromWorker::Result(small) = small else {
            panic!("not a result: {small:?}");
        };
        assert_eq!(
            small.outcome,
            Ok(TaskOutput {
                writes_json: r#"{"a":1}"#.into(),
                ..TaskOutput::default()
            })
        );
        assert_eq!(small.read, [2]);
        let big = to_coordinator(Outbound::Report(report(json!({"a": "x".repeat(200)}))), 100);
        let FromWorker::Result(big) = big else {
            panic!("not a result: {big:?}");
        };
        let error = big.outcome.unwrap_err();
        assert_eq!(error.kind, FailureKind::InvalidOutput);
        assert!(error.message.contains("at most 100"), "{}", error.message);
    }
}
