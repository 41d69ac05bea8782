//! SPEC 4.2: `loop` nodes whose body repeats on the run's state until a
//! condition holds.

use serde_json::{Value, json};

use super::*;

const REFINE: &str = r#"
state:
  score: { type: number, default: 0 }
  drafts: { type: integer, default: 0 }
conditions:
  good_enough: "state.score >= 0.8"
nodes:
  setup: { kind: task, handler: setup, start: true, next: refine }
  refine:
    kind: loop
    body: draft
    until: good_enough
    max_iterations: 5
    output_key: score
    next: publish
  draft: { kind: task, handler: draft, next: critique }
  critique: { kind: task, handler: critique }
  publish: { kind: task, handler: publish }
"#;

/// Each critique raises the score by 0.3.
fn critic() -> impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String> {
    |state, _, _| {
        let score = state["score"].as_f64().unwrap_or(0.0);
        Ok(json!({"score": ((score + 0.3) * 10.0).round() / 10.0}))
    }
}

fn drafter() -> impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String> {
    |state, scope, _| {
        // Every body step sees the iteration in its scope, and the state
        // as the earlier iterations left it.
        let iteration = scope["loop"]["iteration"].as_i64().unwrap();
        assert_eq!(scope["loop"]["max_iterations"], json!(5));
        assert_eq!(state["drafts"].as_i64().unwrap(), iteration - 1);
        Ok(json!({"drafts": iteration}))
    }
}

fn iterations(h: &Harness) -> Vec<(u32, bool)> {
    h.events
        .iter()
        .filter_map(|e| match e {
            RunEvent::LoopIteration {
                iteration, done, ..
            } => Some((*iteration, *done)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_body_repeats_on_the_state_until_the_condition_holds() {
    let h = Harness::new(REFINE, json!({}))
        .on("setup", noop())
        .on("draft", drafter())
        .on("critique", critic())
        .on("publish", |state, _, _| {
            Ok(json!({"published": state["score"]}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    // 0.3, 0.6, 0.9: the condition holds after the third iteration.
    assert_eq!(iterations(&h), [(1, false), (2, false), (3, true)]);
    assert_eq!(h.runs_of("draft"), 3);
    assert_eq!(h.runs_of("critique"), 3);
    // The body's writes stay after the loop, and the next node sees them.
    assert_eq!(h.state()["drafts"], json!(3));
    assert_eq!(h.state()["published"], json!(0.9));
}

#[test]
fn reaching_max_iterations_ends_the_loop_without_failing_it() {
    let yaml = REFINE.replace("max_iterations: 5", "max_iterations: 2");
    let h = Harness::new(&yaml, json!({}))
        .on("setup", noop())
        .on("draft", |_, scope, _| {
            Ok(json!({"drafts": scope["loop"]["iteration"]}))
        })
        .on("critique", critic())
        .on("publish", noop())
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(iterations(&h), [(1, false), (2, true)]);
    assert_eq!(h.state()["score"], json!(0.6));
    assert_eq!(h.runs_of("publish"), 1);
}

#[test]
fn a_failing_body_fails_the_loop_and_its_fallback_applies() {
    let failing = |_: &Map<String, Value>, scope: &Map<String, Value>, _| {
        if scope["loop"]["iteration"] == json!(2) {
            Err("the critic quit".to_owned())
        } else {
            Ok(json!({"score": 0.1}))
        }
    };
    let h = Harness::new(REFINE, json!({}))
        .on("setup", noop())
        .on("draft", |_, scope, _| {
            Ok(json!({"drafts": scope["loop"]["iteration"]}))
        })
        .on("critique", failing)
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(h.machine.error().unwrap().kind(), "LoopBodyError");
    assert!(
        h.error_text()
            .starts_with("loop node 'refine': iteration 2 failed at node 'critique'"),
        "{}",
        h.error_text()
    );
    // With a fallback on the loop node, the run goes on there, without
    // the loop's writes.
    let yaml = REFINE.replace(
        "    next: publish\n",
        "    next: publish\n    fallback: rescue\n",
    ) + "  rescue: { kind: task, handler: rescue }\n";
    let h = Harness::new(&yaml, json!({}))
        .on("setup", noop())
        .on("draft", |_, scope, _| {
            Ok(json!({"drafts": scope["loop"]["iteration"]}))
        })
        .on("critique", failing)
        .on("rescue", |state, _, _| {
            Ok(json!({"rescued": state["drafts"]}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(
        h.state()["rescued"],
        json!(0),
        "the failed loop wrote nothing"
    );
    assert_eq!(h.runs_of("publish"), 0);
}

#[test]
fn a_loop_runs_beside_the_rest_of_its_wave() {
    let yaml = r#"
state:
  n: { type: integer, default: 0 }
conditions:
  three: "state.n >= 3"
nodes:
  count:
    kind: loop
    start: true
    body: bump
    until: three
  side: { kind: task, handler: side, start: true }
  bump: { kind: task, handler: bump }
"#;
    let h = Harness::new(yaml, json!({}))
        .order(Order::Lifo)
        .on("side", |_, _, _| Ok(json!({"side": true})))
        .on("bump", |state, _, _| {
            Ok(json!({"n": state["n"].as_i64().unwrap() + 1}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["n"], json!(3));
    assert_eq!(h.state()["side"], json!(true));
    assert_eq!(h.waves(), [vec!["count".to_owned(), "side".to_owned()]]);
}

#[test]
fn a_worker_hosted_until_judges_each_iteration_and_its_reason_is_the_next_feedback() {
    let yaml = r#"
state:
  text: { type: string, default: "" }
nodes:
  polish:
    kind: loop
    start: true
    body: write
    until: "fn:short_enough"
    max_iterations: 4
    output_key: text
  write: { kind: task, handler: write }
"#;
    let mut seen = Vec::new();
    let h = Harness::new(yaml, json!({}))
        .on("write", |_, scope, _| {
            let feedback = scope["loop"]["feedback"].clone();
            let iteration = scope["loop"]["iteration"].as_i64().unwrap();
            Ok(json!({"text": format!("draft {iteration} after {feedback}")}))
        })
        .hosted("short_enough", move |args| {
            let it = &args[0];
            seen.push(it.clone());
            assert_eq!(it["max_iterations"], json!(4));
            assert_eq!(
                it["output"], it["state"]["text"],
                "output is the output_key"
            );
            match it["iteration"].as_i64().unwrap() {
                1 => Ok(json!([false, "too long"])),
                2 => {
                    assert_eq!(it["history"][0]["reason"], json!("too long"));
                    Ok(json!(false))
                }
                _ => Ok(json!(true)),
            }
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(iterations(&h), [(1, false), (2, false), (3, true)]);
    // The reason of iteration 1 was the feedback of iteration 2; iteration
    // 2's judgement said nothing.
    assert_eq!(h.state()["text"], json!("draft 3 after null"));
    let reasons: Vec<Option<String>> = h
        .events
        .iter()
        .filter_map(|e| match e {
            RunEvent::LoopIteration { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, [Some("too long".to_owned()), None, None]);
}

#[test]
fn a_hosted_until_that_answers_nonsense_fails_the_loop() {
    let yaml = r#"
nodes:
  spin: { kind: loop, start: true, body: step, until: "fn:judge" }
  step: { kind: task, handler: step }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("step", noop())
        .hosted("judge", |_| Ok(json!("maybe")))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text().contains(
            "until fn:judge: returned \"maybe\", expected true, false or [bool, \"reason\"]"
        ),
        "{}",
        h.error_text()
    );
}
