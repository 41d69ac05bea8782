//! Retries, fallbacks, failures and retry-from-failure, human input,
//! cancellation and deadlines, worker-hosted reducers and predicates, and the
//! run-wide concurrency cap.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::json;

use super::*;

pub(super) const FALLBACK: &str = r#"
nodes:
  fetch:   { kind: task, handler: fetch, start: true, fallback: cached, next: parse, retry: { max_attempts: 3, initial_interval: 0.5s, backoff: 2 } }
  cached:  { kind: task, handler: cached }
  parse:   { kind: task, handler: parse }
"#;

#[test]
fn retries_back_off_then_fallback_routes_alone() {
    let h = Harness::new(FALLBACK, json!({}))
        .on("fetch", |_, _, attempt| {
            Err(format!("timeout on attempt {attempt}"))
        })
        .on("cached", write("source", json!("cache")))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.runs_of("fetch"), 3);
    assert_eq!(
        h.retries,
        [
            std::time::Duration::from_millis(500),
            std::time::Duration::from_secs(1)
        ]
    );
    assert_eq!(h.runs_of("parse"), 0);
    assert_eq!(h.skipped(), ["parse"]);
    assert_eq!(h.state(), json!({"source": "cache"}));
}

#[test]
fn a_task_that_keeps_losing_its_workers_is_not_retried() {
    let yaml = "nodes:\n  pill: {kind: task, handler: pill, start: true, end: true, retry: {max_attempts: 3}}\n";
    let h = Harness::new(yaml, json!({}))
        .on("pill", |_, _, _| {
            Err("'pill' lost its worker 3 times (w1, w2, w3); it may be what kills them".into())
        })
        .fails_as("pill", FailureKind::WorkerLost)
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(h.runs_of("pill"), 1, "the pill went to no further worker");
    assert!(h.retries.is_empty(), "no retry was scheduled");
    assert!(
        h.error_text().contains("lost its worker 3 times"),
        "{}",
        h.error_text()
    );
}

#[test]
fn failure_without_fallback_fails_the_run_with_an_execution_error() {
    let yaml = "nodes:\n  a: {kind: task, handler: a, start: true}\n  b: {kind: task, handler: b, start: true}\n";
    let h = Harness::new(yaml, json!({"kept": 1}))
        .order(Order::Lifo)
        .on("a", |_, _, _| Err("disk full".into()))
        .on("b", write("b", json!(2)))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    let error = h.machine.error().unwrap();
    assert_eq!(error.kind(), "ExecutionError");
    assert_eq!(error.node(), Some("a"));
    assert_eq!(
        h.error_text(),
        "node 'a' failed (attempt 1, worker w1): handler_error: disk full"
    );
    assert_eq!(h.state(), json!({"kept": 1}));
}

#[test]
fn failed_run_retries_from_the_wave_that_failed() {
    let fail_once = Rc::new(RefCell::new(true));
    let flag = fail_once.clone();
    let yaml = "nodes:\n  a: {kind: task, handler: a, start: true, next: b}\n  b: {kind: task, handler: b}\n";
    let mut h = Harness::new(yaml, json!({}))
        .on("a", write("a", json!(1)))
        .on("b", move |_, _, _| {
            if flag.replace(false) {
                Err("boom".into())
            } else {
                Ok(json!({"b": 2}))
            }
        })
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(h.state(), json!({"a": 1}));
    h.send(Input::RetryRun { by: None }).unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state(), json!({"a": 1, "b": 2}));
    assert_eq!(h.runs_of("a"), 1);
    assert_eq!(h.machine.steps(), 2);
}

#[test]
fn state_updates_render_with_the_output_and_the_state() {
    let yaml = r#"
nodes:
  ask:
    kind: task
    handler: ask
    start: true
    state_updates:
      summary: "{{ topic }}: {{ output.answer }}"
      answers: "{{ [output.answer] }}"
      tries: 1
"#;
    let h = Harness::new(yaml, json!({"topic": "rust"}))
        .on("ask", write("answer", json!("fast")))
        .run();
    assert_eq!(
        h.state(),
        json!({"topic": "rust", "answer": "fast", "summary": "rust: fast", "answers": ["fast"], "tries": 1})
    );
}

#[test]
fn strict_state_rejects_undeclared_writes_and_input() {
    let yaml = "settings: {strict_state: true}\nstate:\n  n: {type: integer, default: 0}\nnodes:\n  a: {kind: task, handler: a, start: true}\n";
    let error = RunMachine::new(plan(yaml), obj(json!({"m": 1}))).unwrap_err();
    assert_eq!(error.kind(), "InvalidInput");
    assert!(error.to_string().contains("'m'"), "{error}");
    let h = Harness::new(yaml, json!({"n": 1}))
        .on("a", write("other", json!(1)))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text()
            .contains("wrote field 'other', which `state:` does not declare"),
        "{}",
        h.error_text()
    );
}

#[test]
fn declared_types_are_enforced_on_writes() {
    let yaml = "state:\n  score: {type: number, default: 0}\nnodes:\n  a: {kind: task, handler: a, start: true}\n";
    let h = Harness::new(yaml, json!({}))
        .on("a", write("score", json!("high")))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text()
            .contains("wrote field 'score' as string, but it is declared number"),
        "{}",
        h.error_text()
    );
}

const APPROVAL: &str = r#"
nodes:
  write:   { kind: task, handler: write, start: true, next: [approve] }
  side:    { kind: task, handler: side, start: true }
  approve: { kind: approval, prompt: "Publish {{ title }}?", depends_on: [side] }
  publish: { kind: task, handler: publish }
  discard: { kind: task, handler: discard }
edges:
  - { from: approve, to: publish, when: "state.approved" }
  - { from: approve, to: discard, when: "!state.approved" }
"#;

fn approval_run() -> Harness {
    Harness::new(APPROVAL, json!({"title": "Weft"}))
        .on("write", write("draft", json!("d")))
        .on("side", write("side", json!(1)))
        .on("publish", write("published", json!(true)))
        .on("discard", write("discarded", json!(true)))
        .run()
}

#[test]
fn approval_pauses_then_resumes_on_approve() {
    let mut h = approval_run();
    assert_eq!(h.status(), RunStatus::Waiting);
    assert_eq!(
        h.machine.waiting(),
        [(
            "approve".to_owned(),
            "approval".to_owned(),
            "Publish Weft?".to_owned()
        )]
    );
    assert!(h.events.contains(&RunEvent::WaitingForInput {
        node: "approve".into(),
        kind: "approval".into(),
        prompt: "Publish Weft?".into()
    }));
    let answer = HumanAnswer {
        value: json!("approve"),
        comment: Some("ship it".into()),
        by: None,
    };
    h.send(Input::Answered {
        node: "approve".into(),
        answer,
    })
    .unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state()["approved"], json!(true));
    assert_eq!(h.state()["approved_comment"], json!("ship it"));
    assert_eq!(h.state()["published"], json!(true));
    assert_eq!(h.runs_of("discard"), 0);
}

#[test]
fn approval_reject_takes_the_other_edge_and_bad_answers_change_nothing() {
    let mut h = approval_run();
    let bad = HumanAnswer {
        value: json!("maybe"),
        comment: None,
        by: None,
    };
    let error = h
        .send(Input::Answered {
            node: "approve".into(),
            answer: bad,
        })
        .unwrap_err();
    assert!(matches!(error, Rejected::BadAnswer { .. }), "{error}");
    assert_eq!(h.status(), RunStatus::Waiting);
    let error = h.send(Input::Answered {
        node: "publish".into(),
        answer: HumanAnswer {
            value: json!(1),
            comment: None,
            by: None,
        },
    });
    assert_eq!(
        error,
        Err(Rejected::NotWaiting {
            node: "publish".into(),
            waiting: vec!["approve".into()],
        })
    );
    assert_eq!(
        error.unwrap_err().to_string(),
        "node 'publish' is not waiting for input (the node waiting is 'approve')"
    );
    h.send(Input::Answered {
        node: "approve".into(),
        answer: HumanAnswer {
            value: json!("reject"),
            comment: None,
            by: None,
        },
    })
    .unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state()["approved"], json!(false));
    assert_eq!(h.state()["discarded"], json!(true));
}

#[test]
fn input_node_checks_its_schema() {
    let yaml = r#"
nodes:
  ask: { kind: input, start: true, output_key: budget, prompt: "Budget?", schema: { type: integer, minimum: 1 } }
"#;
    let mut h = Harness::new(yaml, json!({})).run();
    assert_eq!(h.status(), RunStatus::Waiting);
    let error = h.send(Input::Answered {
        node: "ask".into(),
        answer: HumanAnswer {
            value: json!("lots"),
            comment: None,
            by: None,
        },
    });
    assert!(matches!(error, Err(Rejected::BadAnswer { .. })));
    h.send(Input::Answered {
        node: "ask".into(),
        answer: HumanAnswer {
            value: json!(3),
            comment: None,
            by: None,
        },
    })
    .unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state(), json!({"budget": 3}));
}

#[test]
fn cancel_stops_in_flight_tasks_and_keeps_the_state() {
    let yaml = "nodes:\n  a: {kind: task, handler: a, start: true}\n  b: {kind: task, handler: b, start: true}\n";
    let mut machine = RunMachine::new(plan(yaml), obj(json!({"x": 1}))).unwrap();
    let effects = machine.start();
    let keys: Vec<TaskKey> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Dispatch(spec) => Some(spec.key),
            _ => None,
        })
        .collect();
    assert_eq!(keys.len(), 2);
    let effects = machine.apply(Input::Cancel { by: None }).unwrap();
    assert!(effects.contains(&Effect::CancelTasks(keys.clone())));
    assert_eq!(machine.status(), RunStatus::Cancelled);
    assert_eq!(machine.error(), Some(&RunError::Cancelled));
    assert_eq!(**machine.state(), obj(json!({"x": 1})));
    // Results arriving after the cancel are ignored.
    let effects = machine
        .apply(Input::TaskSucceeded {
            key: keys[0],
            output: NodeOutput::default(),
        })
        .unwrap();
    assert!(effects.is_empty());
}

#[test]
fn deadline_fails_the_run_as_a_timeout() {
    let mut machine = RunMachine::new(
        plan("nodes:\n  a: {kind: task, handler: a, start: true}\n"),
        Map::new(),
    )
    .unwrap();
    machine.start();
    machine
        .apply(Input::DeadlinePassed { waiting: None })
        .unwrap();
    assert_eq!(machine.status(), RunStatus::Failed);
    assert_eq!(machine.error().map(RunError::kind), Some("RunTimeout"));
}

#[test]
fn hosted_reducer_receives_s0_and_branch_values() {
    let yaml = r#"
state:
  best: { type: string, default: "none", reducer: "fn:longest" }
nodes:
  a: { kind: task, handler: a, start: true }
  b: { kind: task, handler: b, start: true }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("a", write("best", json!("ab")))
        .on("b", write("best", json!("abcd")))
        .hosted("longest", |args| {
            let branches = args[1].as_array().unwrap();
            Ok(branches
                .iter()
                .max_by_key(|v| v.as_str().unwrap().len())
                .unwrap()
                .clone())
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state(), json!({"best": "abcd"}));
    assert!(matches!(
        &h.calls[0],
        Effect::CallReducer { field, s0_value, branch_values, .. }
            if field == "best" && s0_value == &json!("none") && branch_values == &vec![json!("ab"), json!("abcd")]
    ));
}

#[test]
fn hosted_predicate_decides_an_edge() {
    let yaml = r#"
nodes:
  a: { kind: task, handler: a, start: true }
  yes: { kind: task, handler: yes }
  no: { kind: task, handler: no }
edges:
  - { from: a, to: yes, when: "fn:is_big" }
  - { from: a, to: no, when: "!(state.n > 10)" }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("a", write("n", json!(42)))
        .on("yes", noop())
        .hosted("is_big", |args| {
            Ok(json!(args[0]["n"].as_i64().unwrap() > 10))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.runs_of("yes"), 1);
    assert_eq!(h.skipped(), ["no"]);
}

#[test]
fn run_concurrency_cap_bounds_tasks_in_flight() {
    let yaml = r#"
settings: { max_node_concurrency: 2 }
nodes:
  a: { kind: task, handler: t, start: true }
  b: { kind: task, handler: t, start: true }
  c: { kind: task, handler: t, start: true }
  d: { kind: task, handler: t, start: true }
  e: { kind: task, handler: t, start: true }
"#;
    let mut h = Harness::new(yaml, json!({}));
    for id in ["a", "b", "c", "d", "e"] {
        h = h.on(id, noop());
    }
    let h = h.run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.dispatched.len(), 5);
    assert_eq!(h.max_in_flight, 2);
}

#[test]
fn output_schema_is_checked_against_what_the_node_wrote() {
    let yaml = r#"
nodes:
  judge:
    kind: task
    handler: judge
    start: true
    output_schema:
      type: object
      properties: { pass: { type: boolean }, feedback: { type: string } }
      required: [pass]
"#;
    let good = Harness::new(yaml, json!({}))
        .on("judge", |_, _, _| {
            Ok(json!({"pass": true, "feedback": "fine"}))
        })
        .run();
    assert_eq!(good.status(), RunStatus::Completed);
    assert_eq!(good.state(), json!({"pass": true, "feedback": "fine"}));
    let bad = Harness::new(yaml, json!({}))
        .on("judge", |_, _, _| Ok(json!({"pass": "yes"})))
        .run();
    assert_eq!(bad.status(), RunStatus::Failed);
    assert!(
        bad.error_text()
            .contains("output does not match the schema at /pass"),
        "{}",
        bad.error_text()
    );
}

#[test]
fn answering_one_of_two_waiting_nodes_does_not_announce_the_other_again() {
    let yaml = r#"
nodes:
  legal:   { kind: approval, prompt: "Legal ok?", output_key: legal_ok }
  brand:   { kind: approval, prompt: "Brand ok?", output_key: brand_ok }
  publish: { kind: task, handler: publish, depends_on: [legal, brand] }
# Two waits at once come from conditional edges (a static fan-out to
# approvals, START's included, is refused by validation).
edges:
  - { from: START, to: legal, when: "true" }
  - { from: START, to: brand, when: "true" }
"#;
    let mut h = Harness::new(yaml, json!({}))
        .on("publish", write("published", json!(true)))
        .run();
    let announced = |h: &Harness| {
        h.events
            .iter()
            .filter(|e| matches!(e, RunEvent::WaitingForInput { .. }))
            .count()
    };
    assert_eq!(h.status(), RunStatus::Waiting);
    assert_eq!(announced(&h), 2, "each wait is announced once");
    let approve = || HumanAnswer {
        value: json!("approve"),
        comment: None,
        by: None,
    };
    h.send(Input::Answered {
        node: "legal".into(),
        answer: approve(),
    })
    .unwrap();
    assert_eq!(h.status(), RunStatus::Waiting, "brand still waits");
    assert_eq!(announced(&h), 2, "brand's wait is not announced again");
    h.send(Input::Answered {
        node: "brand".into(),
        answer: approve(),
    })
    .unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state()["published"], json!(true));
}

#[test]
fn fallback_end_ends_that_path_as_a_success() {
    let yaml = r#"
nodes:
  fetch:  { kind: task, handler: fetch, start: true, fallback: END, next: use_it }
  use_it: { kind: task, handler: use_it }
  side:   { kind: task, handler: side, start: true }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("fetch", |_, _, _| Err("the source is down".into()))
        .on("side", write("side", json!(1)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(
        h.state(),
        json!({"side": 1}),
        "the failed node wrote nothing"
    );
    assert_eq!(h.skipped(), ["use_it"]);
    assert!(h.events.iter().any(|e| matches!(
        e,
        RunEvent::NodeFailed { node, fallback: Some(f), .. } if node == "fetch" && f == "END"
    )));
}

#[test]
fn a_result_the_coordinator_refuses_is_a_failed_attempt_that_retries() {
    let yaml = r#"
state:
  score: { type: number }
nodes:
  grade:
    kind: task
    handler: grade
    start: true
    retry: { max_attempts: 2 }
    fallback: rescue
  rescue: { kind: task, handler: rescue }
"#;
    // The first attempt writes the wrong type, the second a number.
    let h = Harness::new(yaml, json!({}))
        .on("grade", |_, _, attempt| {
            Ok(if attempt == 1 {
                json!({"score": "high"})
            } else {
                json!({"score": 0.9})
            })
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["score"], json!(0.9));
    assert_eq!(h.runs_of("grade"), 2);
    assert!(h.events.iter().any(|e| matches!(
        e,
        RunEvent::NodeRetrying { node, error, .. } if node == "grade" && error.contains("declared number")
    )));
    // Always wrong: the retries run out and the fallback takes over.
    let h = Harness::new(yaml, json!({}))
        .on("grade", |_, _, _| Ok(json!({"score": "high"})))
        .on("rescue", write("rescued", json!(true)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state(), json!({"score": null, "rescued": true}));
}

#[test]
fn a_state_that_would_outgrow_its_limit_fails_the_run_naming_the_key() {
    let limits = RunLimits {
        max_state_fields: 3,
        ..RunLimits::default()
    };
    let yaml = "nodes:\n  grow: { kind: task, handler: grow, start: true }\n";
    let h = Harness::with_limits(yaml, json!({"a": 1}), limits)
        .on("grow", |_, _, _| Ok(json!({"b": 1, "c": 2, "d": 3})))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.error_text(),
        "the state would hold 4 fields; a run's state holds at most 3 (configuration key max_state_fields)"
    );
    assert_eq!(h.state(), json!({"a": 1}), "the wave's writes are dropped");
}

#[test]
fn a_map_over_more_items_than_allowed_fails_before_any_item_runs() {
    let limits = RunLimits {
        max_map_items: 2,
        ..RunLimits::default()
    };
    let yaml = r#"
nodes:
  fan: { kind: map, start: true, over: "{{ items }}", as: item, branch: each, output_key: out, collect_into: results }
  each: { kind: task, handler: each }
"#;
    let h = Harness::with_limits(yaml, json!({"items": [1, 2, 3]}), limits)
        .on("each", |_, _, _| Ok(json!({"out": 1})))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text().contains("`over` resolved to 3 items; a map fans out over at most 2 (configuration key max_map_items)"),
        "{}",
        h.error_text()
    );
    assert_eq!(h.runs_of("each"), 0);
}
