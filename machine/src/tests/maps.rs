//! SPEC section 5 and the seed 003 map examples.

use serde_json::{Value, json};

use super::*;

const DOUBLE: &str = r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: double
    output_key: doubled
    collect_into: results
    max_concurrency: 3
    next: total
  double: { kind: task, handler: double }
  total:  { kind: task, handler: total }
"#;

fn double() -> impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String> {
    |state, scope, _| {
        // The item is bound both in the fork's state and in the scope.
        assert_eq!(state["item"], scope["item"]);
        Ok(json!({"doubled": scope["item"].as_i64().unwrap() * 2}))
    }
}

#[test]
fn results_are_collected_in_input_order_whatever_order_items_finish() {
    for order in [Order::Fifo, Order::Lifo] {
        let h = Harness::new(DOUBLE, json!({"items": [1, 2, 3, 4, 5, 6, 7]}))
            .order(order)
            .on("double", double())
            .on("total", |state, _, _| {
                let sum: i64 = state["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_i64().unwrap())
                    .sum();
                Ok(json!({"sum": sum}))
            })
            .run();
        assert_eq!(h.status(), RunStatus::Completed);
        assert_eq!(h.state()["results"], json!([2, 4, 6, 8, 10, 12, 14]));
        assert_eq!(h.state()["sum"], json!(56));
        // Fork writes are discarded: neither the item binding nor the
        // output key reach the parent state.
        assert!(h.state().get("item").is_none());
        assert!(h.state().get("doubled").is_none());
        assert_eq!(h.max_items_in_flight, 3);
    }
}

#[test]
fn empty_list_collects_an_empty_array_and_runs_nothing() {
    let h = Harness::new(DOUBLE, json!({"items": []}))
        .on("total", noop())
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state()["results"], json!([]));
    assert_eq!(h.runs_of("double"), 0);
}

#[test]
fn over_must_resolve_to_an_array() {
    let h = Harness::new(DOUBLE, json!({"items": "abc"})).run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text()
            .contains("`over` resolved to string, expected a JSON array"),
        "{}",
        h.error_text()
    );
}

#[test]
fn chain_that_never_writes_output_key_fails_with_the_seed_text() {
    let yaml = r#"
nodes:
  fan_out_subjects:
    kind: map
    start: true
    over: "{{ subjects }}"
    as: subject
    branch: research_subject
    output_key: finding
    collect_into: research_results
  research_subject: { kind: task, handler: research }
"#;
    // The parent already holds `finding`: it is removed from each fork, so
    // it is never collected as if the item produced it.
    let h = Harness::new(yaml, json!({"subjects": ["a", "b"], "finding": "stale"}))
        .on("research_subject", |_, scope, _| {
            if scope["subject"] == json!("b") {
                Ok(json!({"notes": "x"}))
            } else {
                Ok(json!({"finding": "ok"}))
            }
        })
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.error_text(),
        "map node 'fan_out_subjects': sub-branch [1] did not write output_key 'finding'; write it via \
         state_updates, output_schema, or a script's JSON output (the parent's value is not inherited inside a map branch)"
    );
    assert_eq!(h.machine.error().unwrap().kind(), "MapItemError");
    assert_eq!(h.state()["finding"], json!("stale"));
}

const REVIEW_EACH: &str = r#"
settings: { max_loop_iterations: 4 }
nodes:
  review_each_file:
    kind: map
    start: true
    over: "{{ files }}"
    as: file
    branch: review_file
    output_key: verdict
    collect_into: file_verdicts
    max_concurrency: "{{ review_budget }}"
    next: aggregate
  review_file:  { kind: task, handler: review_file, next: check_review }
  check_review: { kind: task, handler: check_review, next: check_gate }
  check_gate:   { kind: task, handler: check_gate }
  aggregate:    { kind: task, handler: aggregate }
"#;

#[test]
fn next_retry_loop_runs_per_item_and_discards_fork_scratch() {
    let h = Harness::new(REVIEW_EACH, json!({"files": ["a.rs", "b.rs", "c.rs"], "review_budget": "2", "retry_feedback": ""}))
        .on("review_file", |state, scope, _| {
            Ok(json!({"draft": format!("review of {} ({})", scope["file"].as_str().unwrap(), state["retry_feedback"].as_str().unwrap())}))
        })
        .on("check_review", |state, _, _| {
            let retries = state.get("retry_count").and_then(Value::as_i64).unwrap_or(0);
            // b.rs passes on its second try; the others at once.
            let pass = state["file"] != json!("b.rs") || retries >= 1;
            Ok(json!({"pass": pass, "feedback": "be specific"}))
        })
        .on("check_gate", |state, _, _| {
            if state["pass"] == json!(true) {
                Ok(json!({"verdict": state["draft"]}))
            } else {
                let retries = state.get("retry_count").and_then(Value::as_i64).unwrap_or(0);
                Ok(json!({"_next": "review_file", "retry_feedback": state["feedback"], "retry_count": retries + 1}))
            }
        })
        .on("aggregate", |state, _, _| Ok(json!({"count": state["file_verdicts"].as_array().unwrap().len()})))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(
        h.state()["file_verdicts"],
        json!([
            "review of a.rs ()",
            "review of b.rs (be specific)",
            "review of c.rs ()"
        ])
    );
    assert_eq!(h.runs_of("review_file"), 4);
    // Fork-local scratch never reaches the parent.
    for scratch in [
        "draft",
        "pass",
        "feedback",
        "retry_count",
        "verdict",
        "file",
    ] {
        assert!(
            h.state().get(scratch).is_none(),
            "{scratch} leaked into the parent state"
        );
    }
    assert_eq!(h.state()["retry_feedback"], json!(""));
    assert_eq!(h.max_items_in_flight, 2);
    let steps: Vec<u32> = h
        .dispatched
        .iter()
        .filter(|s| s.item.as_ref().is_some_and(|i| i.index == 1))
        .map(|s| s.item.as_ref().unwrap().step)
        .collect();
    assert_eq!(steps, [1, 2, 3, 4, 5, 6]);
}

#[test]
fn per_item_visit_bound_fails_the_item_naming_node_and_count() {
    let h = Harness::new(
        REVIEW_EACH,
        json!({"files": ["a.rs"], "review_budget": 1, "retry_feedback": ""}),
    )
    .on("review_file", write("draft", json!("d")))
    .on("check_review", write("pass", json!(false)))
    .on("check_gate", |_, _, _| Ok(json!({"_next": "review_file"})))
    .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.error_text(),
        "map node 'review_each_file': sub-branch [0] failed at node 'review_file' (step 13): \
         visited node 'review_file' 5 times, more than settings.max_loop_iterations (4)"
    );
}

#[test]
fn failing_item_fails_the_map_with_its_chain_position_and_cancels_the_rest() {
    let h = Harness::new(
        REVIEW_EACH,
        json!({"files": ["a.rs", "b.rs", "c.rs"], "review_budget": 3, "retry_feedback": ""}),
    )
    .on("review_file", write("draft", json!("d")))
    .on("check_review", |state, _, _| {
        if state["file"] == json!("c.rs") {
            Err("model refused".into())
        } else {
            Ok(json!({"pass": true}))
        }
    })
    .on("check_gate", |state, _, _| {
        Ok(json!({"verdict": state["draft"]}))
    })
    .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.error_text(),
        "map node 'review_each_file': sub-branch [2] failed at node 'check_review' (step 2): model refused"
    );
    assert_eq!(h.machine.in_flight(), 0);
    assert_eq!(h.runs_of("aggregate"), 0);
}

#[test]
fn fail_fast_cancels_items_still_in_flight() {
    let yaml = DOUBLE.replace("max_concurrency: 3", "max_concurrency: 4");
    let mut machine = RunMachine::new(plan(&yaml), obj(json!({"items": [1, 2, 3, 4]}))).unwrap();
    let effects = machine.start();
    let specs: Vec<TaskSpec> = effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Dispatch(spec) => Some((*spec).clone()),
            _ => None,
        })
        .collect();
    assert_eq!(specs.len(), 4);
    let failure = TaskFailure {
        kind: FailureKind::HandlerError,
        message: "bad".into(),
        worker: None,
    };
    let effects = machine
        .apply(Input::TaskFailed {
            key: specs[1].key,
            failure,
        })
        .unwrap();
    let others: Vec<TaskKey> = [0, 2, 3].iter().map(|&i| specs[i].key).collect();
    assert!(
        effects.contains(&Effect::CancelTasks(others)),
        "{effects:?}"
    );
    assert_eq!(machine.status(), RunStatus::Failed);
}

#[test]
fn next_outside_the_branch_fails_with_the_seed_text() {
    let h = Harness::new(REVIEW_EACH, json!({"files": ["a.rs"], "review_budget": 1}))
        .on("review_file", write("draft", json!("d")))
        .on("check_review", write("pass", json!(true)))
        .on("check_gate", |_, _, _| Ok(json!({"_next": "aggregate"})))
        .run();
    assert_eq!(
        h.error_text(),
        "map node 'review_each_file': sub-branch [0] failed at node 'check_gate' (step 3): routed to 'aggregate' \
         which is outside the branch subgraph rooted at 'review_file' (branch nodes: check_gate, check_review, \
         review_file). Script `_next` targets inside a map branch must stay within the branch."
    );
}

#[test]
fn bad_concurrency_template_fails_the_map_naming_template_and_value() {
    let h = Harness::new(
        REVIEW_EACH,
        json!({"files": ["a.rs"], "review_budget": "high"}),
    )
    .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text().contains("max_concurrency '{{ review_budget }}' resolved to \"high\"; expected a positive integer"),
        "{}",
        h.error_text()
    );
    let h = Harness::new(REVIEW_EACH, json!({"files": ["a.rs"], "review_budget": 0})).run();
    assert!(
        h.error_text().contains("resolved to 0"),
        "{}",
        h.error_text()
    );
}

#[test]
fn branch_fallback_recovers_per_item() {
    let yaml = r#"
nodes:
  fan: { kind: map, start: true, over: "state.urls", as: url, branch: fetch, output_key: page, collect_into: pages }
  fetch:   { kind: task, handler: fetch, fallback: offline }
  offline: { kind: task, handler: offline }
"#;
    let h = Harness::new(yaml, json!({"urls": ["ok", "down", "ok2"]}))
        .on("fetch", |_, scope, _| {
            if scope["url"] == json!("down") {
                Err("503".into())
            } else {
                Ok(json!({"page": scope["url"]}))
            }
        })
        .on("offline", |_, scope, _| {
            Ok(json!({"page": format!("cached {}", scope["url"].as_str().unwrap())}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["pages"], json!(["ok", "cached down", "ok2"]));
    assert!(h.events.iter().any(|e| matches!(e, RunEvent::NodeFailed { node, item: Some(1), fallback: Some(f), .. } if node == "fetch" && f == "offline")));
}

#[test]
fn chain_steps_retry_per_item() {
    let yaml = r#"
nodes:
  fan: { kind: map, start: true, over: "{{ xs }}", as: x, branch: flaky, collect_into: out }
  flaky: { kind: task, handler: flaky, retry: 2, state_updates: { output: "{{ x }}" } }
"#;
    let h = Harness::new(yaml, json!({"xs": ["p", "q"]}))
        .on("flaky", |_, _, attempt| {
            if attempt == 1 {
                Err("flake".into())
            } else {
                Ok(json!({}))
            }
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["out"], json!(["p", "q"]));
    assert_eq!(h.runs_of("flaky"), 4);
}

#[test]
fn progress_events_count_items() {
    let h = Harness::new(DOUBLE, json!({"items": [1, 2]}))
        .on("double", double())
        .on("total", noop())
        .run();
    let progress: Vec<(usize, usize)> = h
        .events
        .iter()
        .filter_map(|e| match e {
            RunEvent::MapItemFinished { done, total, .. } => Some((*done, *total)),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [(1, 2), (2, 2)]);
}

#[test]
fn next_end_ends_an_items_chain() {
    let yaml = r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: first
    output_key: out
    collect_into: results
  first:  { kind: task, handler: first, next: second }
  second: { kind: task, handler: second }
"#;
    let h = Harness::new(yaml, json!({"items": [1, 2, 3]}))
        .on("first", |_, scope, _| {
            let item = scope["item"].as_i64().unwrap();
            // Odd items are done after the first step.
            if item % 2 == 1 {
                Ok(json!({"out": item, "_next": "END"}))
            } else {
                Ok(json!({}))
            }
        })
        .on("second", |_, scope, _| {
            Ok(json!({"out": scope["item"].as_i64().unwrap() * 100}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["results"], json!([1, 200, 3]));
    assert_eq!(h.runs_of("second"), 1);
}

#[test]
fn collect_into_is_checked_against_its_declared_type() {
    let yaml = r#"
state:
  results: { type: string }
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: double
    output_key: doubled
    collect_into: results
  double: { kind: task, handler: double }
"#;
    let h = Harness::new(yaml, json!({"items": [1, 2]}))
        .on("double", double())
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text()
            .contains("wrote field 'results' as array, but it is declared string"),
        "{}",
        h.error_text()
    );
}

#[test]
fn a_chain_step_the_coordinator_refuses_is_retried() {
    let yaml = r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: double
    output_key: doubled
    collect_into: results
  double:
    kind: task
    handler: double
    retry: { max_attempts: 2 }
    output_schema:
      type: object
      properties: { doubled: { type: integer } }
      required: [doubled]
"#;
    // Item 1's first attempt writes a string; its retry gets it right.
    let h = Harness::new(yaml, json!({"items": [1, 2]}))
        .on("double", |_, scope, attempt| {
            let item = scope["item"].as_i64().unwrap();
            Ok(if item == 1 && attempt == 1 {
                json!({"doubled": "two"})
            } else {
                json!({"doubled": item * 2})
            })
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["results"], json!([2, 4]));
    assert_eq!(h.runs_of("double"), 3);
}

/// An item's step copies nothing it does not change: the dispatch shares
/// the spec the run keeps, and the step's view and scope share the item's
/// binding. The first write of the step's result copies the binding once,
/// leaving the finished step's view as it was.
#[test]
fn an_item_s_step_shares_its_spec_and_binding_instead_of_copying_them() {
    use std::sync::Arc;

    let mut machine = RunMachine::new(plan(DOUBLE), obj(json!({"items": [1, 2]}))).unwrap();
    let specs: Vec<Arc<TaskSpec>> = machine
        .start()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Dispatch(spec) => Some(spec),
            _ => None,
        })
        .collect();
    assert_eq!(specs.len(), 2);
    for spec in &specs {
        let kept = &machine.run.tasks.get(spec.key).expect("in flight").spec;
        assert!(Arc::ptr_eq(kept, spec), "the dispatch is the kept spec");
        assert!(
            Arc::ptr_eq(&spec.state.overlay, &spec.scope),
            "the view's overlay and the scope are one binding"
        );
        assert!(spec.state.item_writes);
    }
    assert_eq!(*specs[1].scope, obj(json!({"item": 2})));
    let first = specs[0].clone();
    let binding = first.scope.clone();
    drop(specs);
    machine
        .apply(Input::TaskReturned {
            key: first.key,
            worker: "w1".into(),
            result: Ok((r#"{"doubled": 2}"#.to_owned(), None)),
            read: Vec::new(),
            notes: Vec::new(),
        })
        .unwrap();
    assert_eq!(
        *binding,
        obj(json!({"item": 1})),
        "the step's view is unchanged"
    );
}

/// A chain whose edge reads what its first step wrote, and whose last
/// step writes `output_key` again: routing sees the step's writes, the
/// next step sees every earlier write, and the result is the last write.
#[test]
fn a_chain_routes_on_its_writes_and_collects_its_last_write() {
    const CHAIN: &str = r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: first
    output_key: out
    collect_into: results
  first: { kind: task, handler: first }
  big: { kind: task, handler: big }
  small: { kind: task, handler: small }
edges:
  - { from: first, to: big, when: "state.out > 10" }
  - { from: first, to: small, when: "state.out <= 10" }
"#;
    let h = Harness::new(CHAIN, json!({"items": [3, 30]}))
        .on("first", |_, scope, _| {
            let item = scope["item"].as_i64().unwrap();
            Ok(json!({"out": item, "seen": item}))
        })
        .on("big", |state, _, _| {
            assert_eq!(state["seen"], state["out"], "an earlier write is seen");
            Ok(json!({"out": format!("big {}", state["out"])}))
        })
        .on("small", |state, _, _| {
            assert_eq!(state["seen"], state["out"], "an earlier write is seen");
            Ok(json!({"out": format!("small {}", state["out"])}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["results"], json!(["small 3", "big 30"]));
}
