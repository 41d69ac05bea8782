//! SPEC section 3 and the seed 000 examples, asserted on effects and states.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{Value, json};

use super::*;

const REVIEW: &str = r#"
state:
  approved: { type: boolean, default: false }
nodes:
  write:   { kind: task, handler: write, start: true, next: review }
  review:  { kind: task, handler: review }
  publish: { kind: task, handler: publish, end: true }
  revise:  { kind: task, handler: revise }
  notify:  { kind: task, handler: notify, depends_on: [revise] }
edges:
  - { from: review, to: publish, when: "state.approved" }
  - { from: review, to: revise, when: "!state.approved" }
"#;

#[test]
fn conditional_edges_run_one_branch_and_skip_the_other() {
    let h = Harness::new(REVIEW, json!({}))
        .on("write", write("draft", json!("text")))
        .on("review", write("approved", json!(true)))
        .on("publish", write("published", json!(true)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.runs_of("publish"), 1);
    assert_eq!(h.runs_of("revise"), 0);
    // What hangs only below the untaken branch is skipped, not left hanging.
    assert_eq!(h.skipped(), ["revise", "notify"]);
    assert_eq!(h.state()["published"], json!(true));
}

#[test]
fn conditional_edges_take_the_other_branch() {
    let h = Harness::new(REVIEW, json!({}))
        .on("write", noop())
        .on("review", write("approved", json!(false)))
        .on("revise", write("revised", json!(1)))
        .on("notify", write("notified", json!(true)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.skipped(), ["publish"]);
    assert_eq!(
        h.waves(),
        [
            vec!["write"],
            vec!["review"],
            vec!["revise"],
            vec!["notify"]
        ]
    );
}

const FINDINGS: &str = r#"
state:
  topic:    { type: string, default: "" }
  findings: { type: array, default: [], reducer: concat }
nodes:
  plan:   { kind: task, handler: plan, start: true, next: [web, papers] }
  web:    { kind: task, handler: web }
  papers: { kind: task, handler: papers }
  join:   { kind: task, handler: join, depends_on: [web, papers] }
"#;

fn append(
    item: &'static str,
) -> impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String> {
    move |state, _, _| {
        let mut findings = state["findings"].as_array().cloned().unwrap();
        findings.push(json!(item));
        Ok(json!({ "findings": findings }))
    }
}

#[test]
fn parallel_writes_combine_with_concat_in_declaration_order() {
    for order in [Order::Fifo, Order::Lifo] {
        let seen_by_join = Rc::new(RefCell::new(Value::Null));
        let seen = seen_by_join.clone();
        let h = Harness::new(FINDINGS, json!({"topic": "rust"}))
            .order(order)
            .on("plan", |_, _, _| Ok(json!({"findings": ["seed"]})))
            .on("web", append("web"))
            .on("papers", append("paper"))
            .on("join", move |state, _, _| {
                *seen.borrow_mut() = state["findings"].clone();
                Ok(json!({}))
            })
            .run();
        assert_eq!(h.status(), RunStatus::Completed);
        assert_eq!(h.state()["findings"], json!(["seed", "web", "paper"]));
        assert_eq!(*seen_by_join.borrow(), json!(["seed", "web", "paper"]));
        assert_eq!(
            h.waves(),
            [vec!["plan"], vec!["web", "papers"], vec!["join"]]
        );
    }
}

#[test]
fn concurrent_nodes_see_the_wave_start_state_not_each_other() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let (a, b) = (seen.clone(), seen.clone());
    let h = Harness::new(
        "nodes:\n  x: {kind: task, handler: x, start: true}\n  y: {kind: task, handler: y, start: true}\n",
        json!({"n": 0}),
    )
    .on("x", move |state, _, _| {
        a.borrow_mut().push(state["n"].clone());
        Ok(json!({"x": 1}))
    })
    .on("y", move |state, _, _| {
        b.borrow_mut().push(state.get("x").cloned().unwrap_or(Value::Null));
        Ok(json!({"y": 2}))
    })
    .run();
    assert_eq!(*seen.borrow(), [json!(0), Value::Null]);
    assert_eq!(h.state(), json!({"n": 0, "x": 1, "y": 2}));
}

#[test]
fn conflicting_writes_without_reducer_fail_and_keep_the_previous_state() {
    let h = Harness::new(
        "nodes:\n  a: {kind: task, handler: a, start: true}\n  b: {kind: task, handler: b, start: true}\n",
        json!({"score": 1}),
    )
    .on("a", write("score", json!(2)))
    .on("b", write("score", json!(3)))
    .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.machine.error(),
        Some(&RunError::ConcurrentUpdateError {
            field: "score".into(),
            nodes: vec!["a".into(), "b".into()]
        })
    );
    assert_eq!(h.machine.error().unwrap().kind(), "ConcurrentUpdateError");
    // All-or-nothing: neither write landed.
    assert_eq!(h.state(), json!({"score": 1}));
}

#[test]
fn whole_state_returns_only_count_their_changes() {
    let h = Harness::new(
        "nodes:\n  a: {kind: task, handler: a, start: true}\n  b: {kind: task, handler: b, start: true}\n",
        json!({"shared": "x", "n": 0}),
    )
    .on("a", |state, _, _| {
        let mut s = state.clone();
        s.insert("a".into(), json!(1));
        Ok(Value::Object(s))
    })
    .on("b", |state, _, _| {
        let mut s = state.clone();
        s.insert("n".into(), json!(5));
        Ok(Value::Object(s))
    })
    .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state(), json!({"shared": "x", "n": 5, "a": 1}));
}

const CRITIQUE: &str = r#"
state:
  score: { type: number, default: 0 }
  drafts: { type: integer, default: 0 }
conditions:
  needs_work: "state.score < 0.8"
nodes:
  load_rubric: { kind: task, handler: load_rubric, start: true }
  draft:       { kind: task, handler: draft, start: true }
  critique:    { kind: task, handler: critique }
  publish:     { kind: task, handler: publish, end: true }
edges:
  - { from: load_rubric, to: critique }
  - { from: draft, to: critique }
  - { from: critique, to: publish, when: "state.score >= 0.8" }
  - { from: critique, to: draft, loop: true, when: needs_work }
"#;

#[test]
fn critique_loop_reruns_draft_and_critique_but_not_the_rubric() {
    let h = Harness::new(CRITIQUE, json!({}))
        .on("load_rubric", write("rubric", json!("be brief")))
        .on("draft", |state, _, _| {
            Ok(json!({"drafts": state["drafts"].as_i64().unwrap() + 1}))
        })
        .on("critique", |state, _, _| {
            let drafts = state["drafts"].as_i64().unwrap();
            Ok(json!({"score": if drafts >= 3 { 0.9 } else { 0.5 }}))
        })
        .on("publish", write("published", json!(true)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.runs_of("load_rubric"), 1);
    assert_eq!(h.runs_of("draft"), 3);
    assert_eq!(h.runs_of("critique"), 3);
    assert_eq!(h.runs_of("publish"), 1);
    assert_eq!(h.state()["published"], json!(true));
    assert_eq!(
        h.waves(),
        [
            vec!["load_rubric", "draft"],
            vec!["critique"],
            vec!["draft"],
            vec!["critique"],
            vec!["draft"],
            vec!["critique"],
            vec!["publish"],
        ]
    );
    let resets = h
        .events
        .iter()
        .filter(|e| matches!(e, RunEvent::LoopReset { .. }))
        .count();
    assert_eq!(resets, 2);
}

#[test]
fn runaway_loop_raises_step_limit_with_the_partial_state() {
    let yaml = r#"
settings: { max_steps: 5 }
nodes:
  tick: { kind: task, handler: tick, start: true }
edges:
  - { from: tick, to: tick, loop: true }
"#;
    let h = Harness::new(yaml, json!({"n": 0}))
        .on("tick", |state, _, _| {
            Ok(json!({"n": state["n"].as_i64().unwrap() + 1}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.machine.error(),
        Some(&RunError::StepLimitExceeded { max_steps: 5 })
    );
    assert_eq!(h.runs_of("tick"), 5);
    assert_eq!(h.state(), json!({"n": 5}));
}

#[test]
fn end_node_ends_the_run_and_leaves_pending_nodes_unrun() {
    let yaml = r#"
nodes:
  a:    { kind: task, handler: a, start: true, next: [stop, slow] }
  stop: { kind: end }
  slow: { kind: task, handler: slow, next: after }
  after: { kind: task, handler: after }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("a", noop())
        .on("slow", write("slow", json!(1)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    // The end node's wave merges (slow ran alongside it); `after` never runs.
    assert_eq!(h.state(), json!({"slow": 1}));
    assert_eq!(h.runs_of("after"), 0);
    assert_eq!(h.machine.node_status("after"), Some(NodeStatus::Pending));
}

#[test]
fn failed_end_node_fails_the_run_with_its_message() {
    let yaml = "nodes:\n  a: {kind: task, handler: a, start: true, next: bad}\n  bad: {kind: end, status: failed, message: no sources found}\n";
    let h = Harness::new(yaml, json!({}))
        .on("a", write("x", json!(1)))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.error_text(),
        "end node 'bad' ended the run as failed: no sources found"
    );
    assert_eq!(h.state(), json!({"x": 1}));
}

const ROUTED: &str = r#"
nodes:
  triage:
    kind: task
    handler: triage
    start: true
    routes:
      router: "state.kinds"
      map: { bug: fix, docs: write_docs, none: END }
  fix:        { kind: task, handler: fix }
  write_docs: { kind: task, handler: write_docs }
  other:      { kind: task, handler: other }
edges:
  - { from: triage, to: other, when: "true" }
"#;

#[test]
fn router_list_fans_out_and_outranks_plain_and_when_edges() {
    let h = Harness::new(ROUTED, json!({}))
        .on("triage", write("kinds", json!(["bug", "docs"])))
        .on("fix", write("fixed", json!(true)))
        .on("write_docs", write("documented", json!(true)))
        .on("other", noop())
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    // `other`'s edge says `when: "true"`, but the router decides alone.
    assert_eq!(h.waves(), [vec!["triage"], vec!["fix", "write_docs"]]);
    assert_eq!(h.skipped(), ["other"]);
}

#[test]
fn router_key_missing_from_map_fails_naming_the_key_and_the_keys() {
    let h = Harness::new(ROUTED, json!({}))
        .on("triage", write("kinds", "feature".into()))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    let text = h.error_text();
    assert!(text.contains("node 'triage'"), "{text}");
    assert!(
        text.contains(
            "router returned key 'feature', which `map` does not have (keys: bug, docs, none)"
        ),
        "{text}"
    );
    // The wave's writes are dropped with it.
    assert_eq!(h.state(), json!({}));
}

#[test]
fn next_in_output_overrides_routes_and_when() {
    let h = Harness::new(ROUTED, json!({}))
        .on("triage", |_, _, _| {
            Ok(json!({"kinds": "bug", "_next": "write_docs"}))
        })
        .on("write_docs", noop())
        .run();
    assert_eq!(h.waves(), [vec!["triage"], vec!["write_docs"]]);
    assert_eq!(h.skipped(), ["fix", "other"]);
}

#[test]
fn next_naming_an_unknown_node_fails_the_node() {
    let h = Harness::new(ROUTED, json!({}))
        .on("triage", |_, _, _| Ok(json!({"_next": "nowhere"})))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text()
            .contains("`_next` names unknown node 'nowhere'"),
        "{}",
        h.error_text()
    );
}

#[test]
fn and_join_runs_when_one_input_is_taken_and_the_rest_resolved() {
    let yaml = r#"
nodes:
  a: { kind: task, handler: a, start: true, next: [b, c] }
  b: { kind: task, handler: b }
  c: { kind: task, handler: c }
  d: { kind: task, handler: d, depends_on: [b, c] }
edges:
  - { from: a, to: x, when: "false" }
  - { from: x2, to: d }
"#;
    // `x` and `x2` do not exist: the graph is rejected, naming both.
    let (_, findings) = crate::graph::parse_graph(yaml, Format::Yaml, "t");
    let text: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|t| t.contains("edge to unknown node 'x'")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("edge from unknown node 'x2'")),
        "{text:?}"
    );

    let yaml = r#"
nodes:
  a: { kind: task, handler: a, start: true }
  b: { kind: task, handler: b }
  c: { kind: task, handler: c }
  d: { kind: task, handler: d, depends_on: [b, c] }
edges:
  - { from: a, to: b }
  - { from: a, to: c, when: "false" }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("a", noop())
        .on("b", noop())
        .on("d", write("d", json!(1)))
        .run();
    assert_eq!(h.waves(), [vec!["a"], vec!["b"], vec!["d"]]);
    assert_eq!(h.skipped(), ["c"]);
}

#[test]
fn events_and_checkpoints_follow_each_wave() {
    let h = Harness::new("nodes:\n  a: {kind: task, handler: a, start: true, next: b}\n  b: {kind: task, handler: b}\n", json!({}))
        .on("a", write("a", json!(1)))
        .on("b", write("b", json!(2)))
        .run();
    let kinds: Vec<&str> = h
        .events
        .iter()
        .map(|e| match e {
            RunEvent::WaveStarted { .. } => "wave",
            RunEvent::NodeStarted { .. } => "started",
            RunEvent::NodeFinished { .. } => "finished",
            RunEvent::StateChanged { .. } => "changed",
            RunEvent::RunFinished { .. } => "run_finished",
            RunEvent::RunSubmitted { .. } => "submitted",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "submitted",
            "wave",
            "started",
            "finished",
            "changed",
            "wave",
            "started",
            "finished",
            "changed",
            "run_finished"
        ]
    );
    // One checkpoint per merged wave, one at the end.
    assert_eq!(h.checkpoints, 3);
}

#[test]
fn merging_a_wave_updates_the_state_in_place_without_copying_it() {
    let yaml = "nodes:\n  a: {kind: task, handler: a, start: true, next: b}\n  b: {kind: task, handler: b}\n";
    let blob = "x".repeat(1 << 20);
    let mut machine =
        RunMachine::new(plan(yaml), obj(json!({"blob": blob, "counter": 0}))).unwrap();
    let before = Arc::as_ptr(machine.state());
    let mut effects = machine.start();
    for expected in 1..=2 {
        let key = effects
            .into_iter()
            .find_map(|e| match e {
                Effect::Dispatch(spec) => Some(spec.key),
                _ => None,
            })
            .expect("a task was dispatched");
        // The task's copy of the state is gone, as a worker's would be.
        let output = NodeOutput::from_json(json!({"counter": expected})).unwrap();
        effects = machine.apply(Input::TaskSucceeded { key, output }).unwrap();
        assert_eq!(machine.state()["counter"], json!(expected));
        assert_eq!(Arc::as_ptr(machine.state()), before, "the state was copied");
    }
    assert_eq!(machine.status(), RunStatus::Completed);
}

#[test]
fn next_end_ends_that_path_and_the_run_completes() {
    let yaml = r#"
nodes:
  gate:   { kind: task, handler: gate, start: true, next: work }
  side:   { kind: task, handler: side, start: true, next: after }
  work:   { kind: task, handler: work }
  after:  { kind: task, handler: after }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("gate", |_, _, _| Ok(json!({"gated": true, "_next": "END"})))
        .on("side", write("side", json!(1)))
        .on("after", write("after", json!(2)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state(), json!({"gated": true, "side": 1, "after": 2}));
    assert_eq!(h.skipped(), ["work"]);
}

#[test]
fn a_router_fanning_out_to_an_approval_fails_the_node() {
    let yaml = r#"
nodes:
  triage:
    kind: task
    handler: triage
    start: true
    routes:
      router: "state.kinds"
      map: { bug: fix, review: check }
  fix:   { kind: task, handler: fix }
  check: { kind: approval, prompt: "Ok?" }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("triage", write("kinds", json!(["bug", "review"])))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text().contains(
            "approval node 'check' is a fan-out target of 'triage' (its router returned [bug, review]); put approval and input nodes after the join"
        ),
        "{}",
        h.error_text()
    );
    // One key alone may lead to the approval.
    let h = Harness::new(yaml, json!({}))
        .on("triage", write("kinds", json!("review")))
        .run();
    assert_eq!(h.status(), RunStatus::Waiting);
}

#[test]
fn when_on_start_edges_is_evaluated_on_the_input() {
    let yaml = r#"
nodes:
  quick:    { kind: task, handler: quick }
  thorough: { kind: task, handler: thorough }
  report:   { kind: task, handler: report, depends_on: [quick, thorough] }
edges:
  - { from: START, to: quick, when: "state.mode == 'quick'" }
  - { from: START, to: thorough, when: "state.mode != 'quick'" }
"#;
    let h = Harness::new(yaml, json!({"mode": "quick"}))
        .on("quick", write("quick", json!(true)))
        .on("report", write("reported", json!(true)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.skipped(), ["thorough"]);
    assert_eq!(h.waves(), [vec!["quick"], vec!["report"]]);
    // A condition that cannot be evaluated on the input refuses the run.
    let error = RunMachine::new(plan(yaml), obj(json!({}))).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the condition on START → quick cannot be evaluated on the input"),
        "{error}"
    );
}

#[test]
fn a_router_error_with_a_fallback_takes_the_fallback_and_drops_the_nodes_writes() {
    let yaml = r#"
nodes:
  triage:
    kind: task
    handler: triage
    start: true
    fallback: rescue
    routes:
      router: "state.kind"
      map: { bug: fix }
  side:   { kind: task, handler: side, start: true }
  fix:    { kind: task, handler: fix }
  rescue: { kind: task, handler: rescue }
"#;
    let h = Harness::new(yaml, json!({}))
        .on("triage", write("kind", json!("feature")))
        .on("side", write("side", json!(1)))
        .on("rescue", write("rescued", json!(true)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(
        h.state(),
        json!({"side": 1, "rescued": true}),
        "the failed router's node wrote nothing; its wave-mate's write stands"
    );
    assert_eq!(h.runs_of("fix"), 0);
    assert!(h.events.iter().any(|e| matches!(
        e,
        RunEvent::NodeFailed { node, fallback: Some(f), error, .. }
            if node == "triage" && f == "rescue" && error.contains("router returned key 'feature'")
    )));
}

#[test]
fn initial_state_seeds_fields_over_their_defaults_and_under_the_input() {
    let yaml = r#"
state:
  mode: { type: string, default: thorough }
  retries: { type: integer, default: 0 }
initial_state:
  mode: quick
  retries: 2
  feedback: ""
  limits: { depth: 3 }
nodes:
  quick:    { kind: task, handler: quick }
  thorough: { kind: task, handler: thorough }
edges:
  - { from: START, to: quick, when: "state.mode == 'quick'" }
  - { from: START, to: thorough, when: "state.mode != 'quick'" }
"#;
    // The seeds decide the first wave's conditions; a seeded field that
    // `state:` does not declare is there too.
    let h = Harness::new(yaml, json!({}))
        .on("quick", write("ran", json!("quick")))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(
        h.state(),
        json!({"mode": "quick", "retries": 2, "feedback": "", "limits": {"depth": 3}, "ran": "quick"})
    );
    // The run's input wins over a seed.
    let h = Harness::new(yaml, json!({"mode": "full", "feedback": "more"}))
        .on("thorough", write("ran", json!("thorough")))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["ran"], json!("thorough"));
    assert_eq!(h.state()["feedback"], json!("more"));
    assert_eq!(h.state()["retries"], json!(2));
}

#[test]
fn a_field_initial_state_declares_is_declared_under_strict_state() {
    let yaml = r#"
settings: { strict_state: true }
initial_state:
  notes: []
nodes:
  a: { kind: task, handler: a, start: true }
"#;
    let h = Harness::new(yaml, json!({"notes": ["from the input"]}))
        .on("a", write("notes", json!(["written"])))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["notes"], json!(["written"]));
    // A field neither declared nor seeded is still refused.
    let error = RunMachine::new(plan(yaml), obj(json!({"other": 1}))).unwrap_err();
    assert!(error.to_string().contains("other"), "{error}");
}

/// A wave's planning looks only at the nodes whose in-edges changed: a
/// join whose first input is skipped in one wave and whose second is
/// taken two waves later still runs, and a skip still carries down a
/// branch within one planning.
#[test]
fn a_join_looked_at_again_when_its_last_input_resolves_runs() {
    const JOIN: &str = r#"
nodes:
  a: { kind: task, handler: a, start: true, next: b }
  b: { kind: task, handler: b, next: e }
  c: { kind: task, handler: c, next: d }
  d: { kind: task, handler: d }
  e: { kind: task, handler: e }
  j: { kind: task, handler: j, depends_on: [d, e] }
edges:
  - { from: a, to: c, when: "false" }
"#;
    let h = Harness::new(JOIN, json!({}))
        .on("a", noop())
        .on("b", noop())
        .on("e", noop())
        .on("j", write("joined", json!(true)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.skipped(), ["c", "d"]);
    assert_eq!(
        h.waves(),
        [vec!["a"], vec!["b"], vec!["e"], vec!["j"]],
        "j waits for e although d was skipped two waves before"
    );
    assert_eq!(h.state()["joined"], json!(true));
}
