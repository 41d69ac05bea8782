//! The protocol's contract: every message either side writes reads back
//! as itself on the other side, through encoded bytes as on a stream, and
//! what cannot be read is named.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::wire::{
    Kept, MAX_KEPT_BUNDLES, MAX_KEPT_NODES, Unreadable, is_large, read_coordinator_message,
    read_worker_message, task_batch, unbatched,
};
use super::*;
use crate::v1 as pb;

/// A worker's message read on its own (no result read before it).
fn read_alone(message: pb::WorkerMessage) -> Option<FromWorker> {
    read_worker_message(message, &mut super::wire::LastRun::default())
}

/// `message` as the other side decodes it off the stream.
fn through_bytes<M: prost::Message + Default>(message: M) -> M {
    M::decode(message.encode_to_vec().as_slice()).expect("decodes")
}

/// What a worker reads of the coordinator's `message`.
fn worker_reads(message: ToWorker) -> Vec<Result<ToWorker, Unreadable>> {
    let mut read = Vec::new();
    read_coordinator_message(
        through_bytes(pb::CoordinatorMessage::from(message)),
        &mut Kept::default(),
        &mut read,
    );
    read
}

/// What the coordinator reads of the worker's `message`.
fn coordinator_reads(message: FromWorker) -> Option<FromWorker> {
    read_alone(through_bytes(pb::WorkerMessage::from(message)))
}

fn seat() -> TeamSeat {
    TeamSeat {
        me: "team/0".into(),
        members: vec!["team/0".to_owned(), "team/1".to_owned()].into(),
        inbox: vec![TeamMessage {
            seq: 4,
            from: "team/1".into(),
            content: json!({"note": "hi", "n": [1, 2]}),
        }],
    }
}

fn tool_info() -> ToolInfo {
    ToolInfo {
        name: "search".into(),
        description: "Searches the web".into(),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }
}

fn task(key: u64) -> TaskAssignment {
    TaskAssignment {
        run_id: "r1".into(),
        key: TaskKey(key),
        attempt: 2,
        definition: Arc::new(NodeDefinition::new(
            "draft".into(),
            WorkerKind::Agent,
            r#"{"provider":"p"}"#.into(),
        )),
        node_ref: KeptRef::Carried,
        bundle_ref: KeptRef::Carried,
        state: vec![
            StateField {
                name: "topic".into(),
                version: 3,
                json: Some(r#""rust""#.into()),
            },
            StateField {
                name: "notes".into(),
                version: 9,
                json: None,
            },
        ],
        scope_json: r#"{"item":1}"#.into(),
        item: Some(ItemRef {
            map: "fan".into(),
            index: 7,
            step: 2,
        }),
        timeout: Duration::from_millis(1500),
        bundle: Arc::new(vec![BlobRef {
            path: "tools/run.sh".into(),
            sha256: "ab12".into(),
            mode: 0o755,
        }]),
        team: Some(seat()),
        prompts_json: r#"{"system":"s","prompt":"p"}"#.into(),
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        remote_tools: vec![tool_info()],
        flow: Some(CallFlow {
            grant: Some(12),
            ask: true,
        }),
    }
}

fn call(target: CallTarget) -> FunctionCall {
    FunctionCall {
        call_id: 11,
        run_id: "r1".into(),
        name: "merge".into(),
        args: vec![json!([1]), json!({"a": null})],
        timeout: Duration::from_secs(30),
        bundle: Arc::new(match target {
            // Only a Python function's call carries the bundle.
            CallTarget::Python(_) => task(1).bundle.to_vec(),
            _ => Vec::new(),
        }),
        target,
    }
}

#[test]
fn every_message_to_a_worker_reads_back_as_itself() {
    let messages = [
        ToWorker::Task(task(5)),
        ToWorker::Task(TaskAssignment {
            item: None,
            team: None,
            remote_tools: Vec::new(),
            bundle: Arc::default(),
            flow: None,
            ..task(6)
        }),
        ToWorker::Task(TaskAssignment {
            flow: Some(CallFlow {
                grant: None,
                ask: true,
            }),
            ..task(7)
        }),
        ToWorker::Permit {
            run_id: "r1".into(),
            key: TaskKey(5),
            request_id: 3,
            outcome: Ok(41),
        },
        ToWorker::Permit {
            run_id: "r1".into(),
            key: TaskKey(5),
            request_id: 4,
            outcome: Err("the run's budget of 100 tokens is spent".into()),
        },
        ToWorker::Cancel {
            run_id: "r1".into(),
            key: TaskKey(5),
        },
        ToWorker::Call(call(CallTarget::Registered)),
        ToWorker::Call(call(CallTarget::Judge)),
        ToWorker::Call(call(CallTarget::Python(PythonCall {
            module: "helpers.py".into(),
            function: "pick".into(),
            dir: "graphs".into(),
            form: CallForm::LoopIteration,
        }))),
        ToWorker::Call(call(CallTarget::Tool(ToolContext {
            node: "agent".into(),
            attempt: 1,
            key: TaskKey(8),
            item: Some(3),
            scope_json: r#"{"x":1}"#.into(),
        }))),
        ToWorker::Forget {
            run_id: "r1".into(),
        },
        ToWorker::Heartbeat,
        ToWorker::Demand { queued: 7 },
        ToWorker::Deliver {
            run_id: "r1".into(),
            key: TaskKey(5),
            message: seat().inbox[0].clone(),
        },
        ToWorker::ToolResult {
            run_id: "r1".into(),
            key: TaskKey(5),
            call_id: 2,
            result: Ok(json!({"hits": 3})),
        },
        ToWorker::ToolResult {
            run_id: "r1".into(),
            key: TaskKey(5),
            call_id: 3,
            result: Err("no worker hosts tool 'search'".into()),
        },
        ToWorker::SendAck {
            run_id: "r1".into(),
            send_id: 4,
            error: None,
        },
        ToWorker::SendAck {
            run_id: "r1".into(),
            send_id: 5,
            error: Some("'team/9' is not a member".into()),
        },
    ];
    for message in messages {
        assert_eq!(worker_reads(message.clone()), [Ok(message)]);
    }
}

#[test]
fn every_message_from_a_worker_reads_back_as_itself() {
    let messages = [
        FromWorker::Result(TaskResult {
            run_id: "r1".into(),
            key: TaskKey(5),
            outcome: Ok(TaskOutput {
                writes_json: r#"{"draft":"text","_next":"review"}"#.into(),
                output: Some(json!({"answer": 42})),
                notes: vec![json!({"type": "model_called", "tokens": 10})],
            }),
            read: vec![1, 4],
        }),
        FromWorker::Result(TaskResult {
            run_id: "r1".into(),
            key: TaskKey(6),
            outcome: Ok(TaskOutput::default()),
            read: Vec::new(),
        }),
        FromWorker::Result(TaskResult {
            run_id: "r1".into(),
            key: TaskKey(7),
            outcome: Err(TaskError {
                kind: FailureKind::Timeout,
                message: "no result within 1.5s".into(),
                notes: vec![serde_json::json!({"type": "model_called", "model": "m"})],
            }),
            read: Vec::new(),
        }),
        FromWorker::CallResult(CallResult {
            run_id: "r1".into(),
            call_id: 11,
            result: Ok(json!([1, 2])),
            tool: false,
        }),
        FromWorker::CallResult(CallResult {
            run_id: "r1".into(),
            call_id: 12,
            result: Err(CallError("this worker has no function 'f'".into())),
            tool: true,
        }),
        FromWorker::Heartbeat,
        FromWorker::Draining,
        FromWorker::Slots(3),
        FromWorker::Refused {
            run_id: "r1".into(),
            key: TaskKey(5),
        },
        FromWorker::TeamSend {
            run_id: "r1".into(),
            key: TaskKey(5),
            send: TeamSend {
                send_id: 1,
                to: "team/1".into(),
                content: Ok(json!({"finding": "x"})),
            },
        },
        FromWorker::ToolCall {
            run_id: "r1".into(),
            key: TaskKey(5),
            call: ToolCall {
                call_id: 2,
                tool: "search".into(),
                arguments: json!({"q": "weft"}),
                timeout: Duration::from_millis(900),
            },
        },
        FromWorker::CallPermit {
            run_id: "r1".into(),
            key: TaskKey(5),
            permit: PermitRequest {
                request_id: 3,
                provider: "default".into(),
                model: "gpt-4o".into(),
                tokens: 812,
            },
        },
        FromWorker::CallUsage {
            run_id: "r1".into(),
            key: TaskKey(5),
            usage: CallUsage {
                grant: 41,
                provider: "default".into(),
                model: "gpt-4o".into(),
                prompt_tokens: 700,
                completion_tokens: 90,
                cached_tokens: 512,
                rate_limited: None,
            },
        },
        FromWorker::CallUsage {
            run_id: "r1".into(),
            key: TaskKey(5),
            usage: CallUsage {
                grant: 42,
                rate_limited: Some(Some(Duration::from_millis(2_000))),
                ..CallUsage::default()
            },
        },
        FromWorker::CallUsage {
            run_id: "r1".into(),
            key: TaskKey(5),
            usage: CallUsage {
                grant: 43,
                rate_limited: Some(None),
                ..CallUsage::default()
            },
        },
    ];
    for message in messages {
        assert_eq!(coordinator_reads(message.clone()), Some(message));
    }
}

#[test]
fn a_hello_reads_back_as_itself_and_names_this_protocol_version() {
    let hello = Hello {
        name: "w1".into(),
        slots: 4,
        labels: vec![("zone".into(), "a".into())],
        kinds: vec![WorkerKind::Script, WorkerKind::Llm],
        handlers: vec!["summarise".into()],
        functions: vec!["merge".into()],
        tools: vec![tool_info()],
        keeps_nodes: true,
        keeps_bundles: true,
        handler_reads: [("summarise".to_owned(), vec!["text".to_owned()])].into(),
        shared_slots: 8,
    };
    let wire = through_bytes(pb::Hello::from(hello.clone()));
    assert_eq!(wire.protocol_version, crate::PROTOCOL_VERSION);
    assert!(wire.takes_batches);
    assert!(wire.keeps_nodes);
    assert!(wire.keeps_bundles);
    assert_eq!(Hello::from(wire), hello);
}

#[test]
fn a_hello_from_an_older_or_newer_worker_reads_as_what_this_version_knows() {
    let wire = pb::Hello {
        name: "w".into(),
        kinds: vec!["script".into(), "teleport".into()],
        tools: vec!["plain".into(), "described".into()],
        tool_infos: vec![
            pb::ToolInfo {
                name: "described".into(),
                description: "d".into(),
                parameters_json: "{not json".into(),
            },
            pb::ToolInfo {
                name: "unannounced".into(),
                ..pb::ToolInfo::default()
            },
        ],
        ..pb::Hello::default()
    };
    let hello = Hello::from(wire);
    assert_eq!(hello.kinds, [WorkerKind::Script]);
    let any = ToolInfo::any_arguments();
    assert_eq!(
        hello.tools,
        [
            ToolInfo {
                name: "plain".into(),
                description: String::new(),
                parameters: any.clone(),
            },
            ToolInfo {
                name: "described".into(),
                description: "d".into(),
                parameters: any,
            },
        ]
    );
    // A worker that says nothing of what its handlers read: they read all.
    assert!(hello.handler_reads.is_empty());
}

#[test]
fn a_batch_of_tasks_reads_as_its_tasks_in_order() {
    let mut read = Vec::new();
    read_coordinator_message(
        through_bytes(task_batch(vec![task(1), task(2), task(3)])),
        &mut Kept::default(),
        &mut read,
    );
    assert_eq!(read, [1, 2, 3].map(|key| Ok(ToWorker::Task(task(key)))));
    // Tasks of one run in a row share its id as read.
    let ids: Vec<*const u8> = read
        .iter()
        .map(|read| match read {
            Ok(ToWorker::Task(task)) => task.run_id.as_str().as_ptr(),
            other => panic!("not a task: {other:?}"),
        })
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one id read once");
}

#[test]
fn a_batch_of_results_reads_as_its_results_in_order() {
    let result = |key| {
        pb::TaskResult::from(TaskResult {
            run_id: "r".into(),
            key: TaskKey(key),
            outcome: Ok(TaskOutput::default()),
            read: Vec::new(),
        })
    };
    let batch = pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Results(pb::ResultBatch {
            results: vec![result(1), result(2)],
        })),
    };
    let mut last = super::wire::LastRun::default();
    let read: Vec<_> = unbatched(through_bytes(batch))
        .map(|message| match read_worker_message(message, &mut last) {
            Some(FromWorker::Result(result)) => (result.key, result.run_id),
            other => panic!("not a result: {other:?}"),
        })
        .collect();
    let keys: Vec<_> = read.iter().map(|(key, _)| *key).collect();
    assert_eq!(keys, [TaskKey(1), TaskKey(2)]);
    // One run's results share the id read first.
    assert_eq!(read[0].1, "r");
    assert_eq!(read[0].1.as_ptr(), read[1].1.as_ptr(), "one id read once");
}

/// What a worker that keeps `kept` reads of a message holding `wire`.
fn wire_task_reads(kept: &mut Kept, wire: pb::TaskAssignment) -> Vec<Result<ToWorker, Unreadable>> {
    let message = pb::CoordinatorMessage {
        body: Some(pb::coordinator_message::Body::Task(wire)),
    };
    let mut read = Vec::new();
    read_coordinator_message(message, kept, &mut read);
    read
}

#[test]
fn a_task_of_an_unknown_kind_is_named_with_the_fields_it_carried() {
    let mut wire = pb::TaskAssignment::from(task(3));
    wire.kind = "teleport".into();
    let read = wire_task_reads(&mut Kept::default(), wire);
    assert_eq!(
        read,
        [Err(Unreadable::Task {
            run_id: "r1".into(),
            key: TaskKey(3),
            state: task(3).state,
            error: "this worker cannot run kind 'teleport'".into(),
        })]
    );
}

/// What a worker that keeps `kept` reads of `tasks`, sent as one batch.
fn kept_reads(kept: &mut Kept, tasks: Vec<TaskAssignment>) -> Vec<Result<ToWorker, Unreadable>> {
    let mut read = Vec::new();
    read_coordinator_message(through_bytes(task_batch(tasks)), kept, &mut read);
    read
}

fn numbered(key: u64, node_ref: KeptRef) -> TaskAssignment {
    TaskAssignment {
        node_ref,
        ..task(key)
    }
}

#[test]
fn a_node_definition_kept_by_number_is_sent_once() {
    let mut kept = Kept::default();
    let first = numbered(1, KeptRef::Keep(7));
    let later = numbered(2, KeptRef::Held(7));
    // The later task's message leaves the definition out.
    let wire = pb::TaskAssignment::from(later.clone());
    assert_eq!(
        (
            wire.node.as_str(),
            wire.kind.as_str(),
            wire.config_json.as_str()
        ),
        ("", "", "")
    );
    assert_eq!(wire.node_ref, 7);
    let read = kept_reads(&mut kept, vec![first.clone(), later.clone()]);
    assert_eq!(read, [Ok(ToWorker::Task(first)), Ok(ToWorker::Task(later))]);
    // Both tasks share the one definition read, and its configuration.
    let [Ok(ToWorker::Task(a)), Ok(ToWorker::Task(b))] = &read[..] else {
        panic!("two tasks");
    };
    assert!(Arc::ptr_eq(&a.definition, &b.definition));
    assert!(std::ptr::eq(
        a.definition.config().unwrap(),
        b.definition.config().unwrap()
    ));
    assert_eq!(**a.definition.config().unwrap(), json!({"provider": "p"}));
    assert_eq!(kept.nodes(), 1);
}

#[test]
fn a_definition_sent_under_a_number_replaces_what_it_held() {
    let mut kept = Kept::default();
    let mut other = numbered(2, KeptRef::Keep(1));
    other.definition = Arc::new(NodeDefinition::new(
        "review".into(),
        WorkerKind::Script,
        r#"{"argv":["true"]}"#.into(),
    ));
    let read = kept_reads(
        &mut kept,
        vec![
            numbered(1, KeptRef::Keep(1)),
            other.clone(),
            numbered(3, KeptRef::Held(1)),
        ],
    );
    let Ok(ToWorker::Task(last)) = &read[2] else {
        panic!("a task: {read:?}");
    };
    assert_eq!(last.definition, other.definition);
}

#[test]
fn a_definition_not_kept_fails_its_task_by_name_and_keeps_its_fields() {
    let mut kept = Kept::default();
    let read = kept_reads(&mut kept, vec![numbered(4, KeptRef::Held(3))]);
    assert_eq!(
        read,
        [Err(Unreadable::Task {
            run_id: "r1".into(),
            key: TaskKey(4),
            state: task(4).state,
            error: "node definition 3 is not kept by this worker".into(),
        })]
    );
    let beyond = numbered(5, KeptRef::Keep(MAX_KEPT_NODES + 1));
    let Err(Unreadable::Task { error, .. }) = &kept_reads(&mut kept, vec![beyond])[0] else {
        panic!("refused");
    };
    assert_eq!(
        error,
        "node definition 1025 is above the 1024 a worker keeps"
    );
    assert_eq!(kept.nodes(), 0);
}

#[test]
fn a_kept_definition_of_an_unknown_kind_fails_each_task_that_names_it() {
    let mut kept = Kept::default();
    // Number 2 held a definition this worker can run; the coordinator
    // replaced it with one of a kind it cannot.
    kept_reads(&mut kept, vec![numbered(1, KeptRef::Keep(2))]);
    let mut unknown = pb::TaskAssignment::from(numbered(2, KeptRef::Keep(2)));
    unknown.kind = "teleport".into();
    let mut read = wire_task_reads(&mut kept, unknown);
    read.extend(kept_reads(&mut kept, vec![numbered(3, KeptRef::Held(2))]));
    let errors: Vec<_> = read
        .iter()
        .map(|read| match read {
            Err(Unreadable::Task { error, .. }) => error.as_str(),
            other => panic!("not refused: {other:?}"),
        })
        .collect();
    assert_eq!(errors, ["this worker cannot run kind 'teleport'"; 2]);
}

fn bundled(key: u64, bundle_ref: KeptRef) -> TaskAssignment {
    TaskAssignment {
        bundle_ref,
        ..task(key)
    }
}

#[test]
fn a_runs_bundle_list_kept_by_number_is_sent_once() {
    let mut kept = Kept::default();
    let first = bundled(1, KeptRef::Keep(5));
    let later = bundled(2, KeptRef::Held(5));
    let wire = pb::TaskAssignment::from(first.clone());
    assert_eq!(
        (wire.bundle.len(), wire.bundle_keep, wire.bundle_held),
        (1, 5, 0)
    );
    // The later task's message leaves the list out.
    let wire = pb::TaskAssignment::from(later.clone());
    assert_eq!(
        (wire.bundle.len(), wire.bundle_keep, wire.bundle_held),
        (0, 0, 5)
    );
    let read = kept_reads(&mut kept, vec![first.clone(), later.clone()]);
    assert_eq!(read, [Ok(ToWorker::Task(first)), Ok(ToWorker::Task(later))]);
    let [Ok(ToWorker::Task(a)), Ok(ToWorker::Task(b))] = &read[..] else {
        panic!("two tasks");
    };
    assert!(Arc::ptr_eq(&a.bundle, &b.bundle), "one list, read once");
    assert_eq!((kept.bundles(), kept.nodes()), (1, 0));
}

#[test]
fn a_bundle_list_not_kept_or_named_ambiguously_fails_its_task_by_name() {
    let mut kept = Kept::default();
    let error = |read: Vec<Result<ToWorker, Unreadable>>| match &read[..] {
        [Err(Unreadable::Task { error, state, .. })] => {
            assert_eq!(*state, task(1).state, "its fields are still cached");
            error.clone()
        }
        other => panic!("not refused: {other:?}"),
    };
    let unknown = kept_reads(&mut kept, vec![bundled(1, KeptRef::Held(3))]);
    assert_eq!(error(unknown), "bundle list 3 is not kept by this worker");
    let beyond = kept_reads(
        &mut kept,
        vec![bundled(1, KeptRef::Keep(MAX_KEPT_BUNDLES + 1))],
    );
    assert_eq!(
        error(beyond),
        "bundle list 1025 is above the 1024 a worker keeps"
    );
    let mut both = pb::TaskAssignment::from(bundled(1, KeptRef::Keep(2)));
    both.bundle_held = 4;
    assert_eq!(
        error(wire_task_reads(&mut kept, both)),
        "the task both carries bundle list 2 and names bundle list 4"
    );
    let mut named_and_carried = pb::TaskAssignment::from(bundled(1, KeptRef::Carried));
    named_and_carried.bundle_held = 4;
    assert_eq!(
        error(wire_task_reads(&mut kept, named_and_carried)),
        "the task names bundle list 4 and also carries one"
    );
    assert_eq!(kept.bundles(), 0);
}

#[test]
fn a_task_that_cannot_run_still_keeps_the_bundle_list_it_carries() {
    let mut kept = Kept::default();
    let mut unknown = pb::TaskAssignment::from(bundled(1, KeptRef::Keep(2)));
    unknown.kind = "teleport".into();
    let read = wire_task_reads(&mut kept, unknown);
    assert!(
        matches!(read[..], [Err(Unreadable::Task { .. })]),
        "{read:?}"
    );
    // The coordinator counts it as kept, so a later task names it.
    let later = bundled(2, KeptRef::Held(2));
    let read = kept_reads(&mut kept, vec![later.clone()]);
    assert_eq!(read, [Ok(ToWorker::Task(later))]);
}

#[test]
fn a_call_that_cannot_be_read_is_named_for_its_answer() {
    let read = |wire: pb::FunctionCall| {
        let mut read = Vec::new();
        read_coordinator_message(
            pb::CoordinatorMessage {
                body: Some(pb::coordinator_message::Body::Call(wire)),
            },
            &mut Kept::default(),
            &mut read,
        );
        read
    };
    let bad_arguments = read(pb::FunctionCall {
        call_id: 9,
        run_id: "r".into(),
        args_json: "[1,".into(),
        tool: Some(pb::ToolContext::default()),
        ..pb::FunctionCall::default()
    });
    let [
        Err(Unreadable::Call {
            run_id,
            call_id: 9,
            tool: true,
            error,
        }),
    ] = bad_arguments.as_slice()
    else {
        panic!("read as {bad_arguments:?}");
    };
    assert_eq!(run_id, "r");
    assert!(error.starts_with("bad arguments:"), "{error}");

    let bad_form = read(pb::FunctionCall {
        call_id: 10,
        args_json: "[]".into(),
        python: Some(pb::PythonCall {
            form: "sideways".into(),
            ..pb::PythonCall::default()
        }),
        ..pb::FunctionCall::default()
    });
    assert!(
        matches!(bad_form.as_slice(), [Err(Unreadable::Call { call_id: 10, tool: false, error, .. })]
            if error.contains("'sideways'")),
        "{bad_form:?}"
    );
}

#[test]
fn what_a_worker_sends_that_is_not_json_is_named_not_dropped() {
    let message = |body| pb::WorkerMessage { body: Some(body) };
    let send = read_alone(message(pb::worker_message::Body::Send(pb::TeamSend {
        content_json: "{oops".into(),
        ..pb::TeamSend::default()
    })));
    assert!(
        matches!(
            &send,
            Some(FromWorker::TeamSend {
                send: TeamSend {
                    content: Err(NotJson(_)),
                    ..
                },
                ..
            })
        ),
        "{send:?}"
    );
    let answer = read_alone(message(pb::worker_message::Body::CallResult(
        pb::CallResult {
            outcome: Some(pb::call_result::Outcome::ValueJson("[1,".into())),
            ..pb::CallResult::default()
        },
    )));
    let Some(FromWorker::CallResult(CallResult {
        result: Err(error), ..
    })) = answer
    else {
        panic!("read as {answer:?}");
    };
    assert!(
        error.0.starts_with("the worker sent invalid JSON"),
        "{error}"
    );
    let call = read_alone(message(pb::worker_message::Body::ToolCall(pb::ToolCall {
        arguments_json: "q=weft".into(),
        ..pb::ToolCall::default()
    })));
    assert!(
        matches!(&call, Some(FromWorker::ToolCall { call, .. }) if call.arguments == Value::String("q=weft".into())),
        "{call:?}"
    );
}

#[test]
fn a_message_with_nothing_usable_reads_as_nothing() {
    let message = |body| pb::WorkerMessage { body };
    assert_eq!(read_alone(message(None)), None);
    assert_eq!(
        read_alone(message(Some(pb::worker_message::Body::Result(
            pb::TaskResult::default()
        )))),
        None
    );
    assert_eq!(
        read_alone(message(Some(pb::worker_message::Body::Hello(
            pb::Hello::default()
        )))),
        None
    );
}

#[test]
fn a_large_result_is_known_before_it_is_parsed() {
    let result = |json: String| pb::WorkerMessage {
        body: Some(pb::worker_message::Body::Result(pb::TaskResult {
            outcome: Some(pb::task_result::Outcome::Output(pb::TaskOutput {
                json,
                ..pb::TaskOutput::default()
            })),
            ..pb::TaskResult::default()
        })),
    };
    assert!(!is_large(&result("{}".into())));
    assert!(is_large(&result("x".repeat(100 * 1024))));
}
