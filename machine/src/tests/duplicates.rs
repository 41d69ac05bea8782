//! Late and duplicate results: a result sent again while its wave, or its
//! map, is still live is not merged twice.

use serde_json::json;

use super::*;

#[test]
fn retry_succeeds_and_a_late_result_of_the_old_attempt_is_ignored() {
    let mut h = Harness::new(super::control::FALLBACK, json!({}))
        .on("fetch", |_, _, attempt| {
            if attempt < 2 {
                Err("flaky".into())
            } else {
                Ok(json!({"page": attempt}))
            }
        })
        .on("parse", noop())
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state(), json!({"page": 2}));
    let first_key = h.dispatched[0].key;
    let effects = h
        .machine
        .apply(Input::TaskSucceeded {
            key: first_key,
            output: NodeOutput::default(),
        })
        .unwrap();
    assert!(effects.is_empty());
    assert!(
        h.send(Input::Cancel { by: None }).is_err(),
        "a completed run cannot be cancelled"
    );
}

/// The dispatched task specs among `effects`.
fn dispatched(effects: &[Effect]) -> Vec<TaskSpec> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Dispatch(spec) => Some((**spec).clone()),
            _ => None,
        })
        .collect()
}

fn succeeded(key: TaskKey, writes: serde_json::Value) -> Input {
    Input::TaskSucceeded {
        key,
        output: NodeOutput::from_json(writes).expect("an object"),
    }
}

#[test]
fn a_duplicate_result_while_its_wave_is_live_is_not_merged_twice() {
    // Two nodes of one wave add to the same field; one's result arrives
    // twice (the second time with another value) while the other is out.
    let yaml = r#"
state:
  count: { type: integer, default: 0, reducer: add }
nodes:
  a: { kind: task, handler: a, start: true }
  b: { kind: task, handler: b, start: true }
"#;
    let mut h = Harness::new(yaml, json!({}));
    let specs = dispatched(&h.machine.start());
    let key = |node: &str| {
        specs
            .iter()
            .find(|s| s.node == node)
            .expect("dispatched")
            .key
    };
    let (a, b) = (key("a"), key("b"));

    h.machine.apply(succeeded(a, json!({"count": 1}))).unwrap();
    // Another value under the same key: merged, it would show.
    let again = h.machine.apply(succeeded(a, json!({"count": 5}))).unwrap();
    assert!(
        again.is_empty(),
        "a duplicate result had effects: {again:?}"
    );
    assert_eq!(h.status(), RunStatus::Running, "b is still out");

    h.machine.apply(succeeded(b, json!({"count": 1}))).unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state(), json!({"count": 2}), "a's result was merged once");
}

#[test]
fn a_duplicate_item_result_while_the_map_is_live_is_not_counted_twice() {
    let yaml = r#"
state:
  items: { type: array, default: [1, 2, 3] }
  results: { type: array, default: [] }
nodes:
  fan: { kind: map, start: true, over: "{{ items }}", as: item, branch: double, output_key: doubled, collect_into: results }
  double: { kind: task, handler: double }
"#;
    let mut h = Harness::new(yaml, json!({}));
    let specs = dispatched(&h.machine.start());
    assert_eq!(specs.len(), 3);
    let mut events = Vec::new();
    let mut feed = |h: &mut Harness, input: Input| {
        for effect in h.machine.apply(input).unwrap() {
            if let Effect::Emit(event) = effect {
                events.push(event);
            }
        }
    };
    feed(&mut h, succeeded(specs[0].key, json!({"doubled": 2})));
    // The same item's result again, and a different value under its key:
    // neither is merged while items 1 and 2 are out.
    feed(&mut h, succeeded(specs[0].key, json!({"doubled": 2})));
    feed(&mut h, succeeded(specs[0].key, json!({"doubled": 99})));
    feed(&mut h, succeeded(specs[1].key, json!({"doubled": 4})));
    feed(&mut h, succeeded(specs[2].key, json!({"doubled": 6})));
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state()["results"], json!([2, 4, 6]));
    let progress: Vec<(usize, usize)> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::MapItemFinished { done, total, .. } => Some((*done, *total)),
            _ => None,
        })
        .collect();
    assert_eq!(
        progress,
        [(1, 3), (2, 3), (3, 3)],
        "each item finished once"
    );
}

/// The `task_redispatched` events among `effects`.
fn redispatched(effects: &[Effect]) -> Vec<RunEvent> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Emit(event @ RunEvent::TaskRedispatched { .. }) => Some(event.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_task_sent_again_is_announced_while_it_is_out_and_not_after() {
    let yaml = r#"
nodes:
  a: { kind: task, handler: a, start: true }
"#;
    let mut h = Harness::new(yaml, json!({}));
    let key = dispatched(&h.machine.start())[0].key;
    let lost = Input::TaskRequeued {
        key,
        worker: "w2".into(),
    };
    let effects = h.machine.apply(lost.clone()).unwrap();
    assert_eq!(
        redispatched(&effects),
        [RunEvent::TaskRedispatched {
            node: "a".into(),
            attempt: 1,
            item: None,
            reason: Redispatch::WorkerLost,
            worker: Some("w2".into()),
        }]
    );
    assert!(
        dispatched(&effects).is_empty(),
        "the dispatcher sends it again, not the run"
    );
    h.machine.apply(succeeded(key, json!({}))).unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    let late = h.machine.apply(lost).unwrap();
    assert!(redispatched(&late).is_empty(), "{late:?}");
}

#[test]
fn a_returned_attempt_is_judged_by_the_machine() {
    let yaml = r#"
nodes:
  a: { kind: task, handler: a, start: true, retry: 2 }
"#;
    let limits = RunLimits {
        max_output_fields: 2,
        ..RunLimits::default()
    };
    let mut h = Harness::with_limits(yaml, json!({}), limits);
    let first = dispatched(&h.machine.start())[0].key;
    let returned = |key, writes: &str| Input::TaskReturned {
        key,
        worker: "w1".into(),
        result: Ok((writes.to_owned(), None)),
        read: Vec::new(),
        notes: Vec::new(),
    };
    // Three fields where two are allowed: the attempt fails, and is retried.
    let effects = h
        .machine
        .apply(returned(first, r#"{"x": 1, "y": 2, "z": 3}"#))
        .unwrap();
    let retried = effects.iter().any(|effect| {
        matches!(effect, Effect::Emit(RunEvent::NodeRetrying { error, .. })
            if error.contains("3 fields") || error.contains("max_output_fields"))
    });
    assert!(retried, "{effects:?}");
    let second = effects
        .iter()
        .find_map(|effect| match effect {
            Effect::ScheduleRetry { key, .. } => Some(*key),
            _ => None,
        })
        .expect("a retry");
    let again = dispatched(&h.machine.apply(Input::RetryDue { key: second }).unwrap())[0].key;
    // Text that is no JSON fails it too; the run fails after its attempts.
    h.machine.apply(returned(again, "not json")).unwrap();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text().contains("invalid_output"),
        "{}",
        h.error_text()
    );
}
