//! A fork (SPEC 20) in the run machine: the progress a checkpoint stores
//! after a wave, with a field replaced, goes on as a new run — its first
//! wave the one the original had begun, its steps sent again reading the
//! replaced field — and says where it came from; a field that does not
//! fit the state is refused naming it.

use serde_json::{Value, json};
use weft_proto::events::ForkedFrom;

use super::*;

const CHAIN: &str = r#"
name: chain
settings: { strict_state: true }
state:
  topic: { type: string, default: "tides" }
  log: { type: string, default: "" }
nodes:
  one: { kind: task, handler: step, start: true, next: two }
  two: { kind: task, handler: step, next: three }
  three: { kind: task, handler: step }
"#;

/// The progress a checkpoint would store now, restored with its state.
fn checkpointed(machine: &mut RunMachine) -> Progress {
    let stored = machine.progress_json_without_state().expect("serializes");
    let mut progress: Progress = serde_json::from_str(&stored).expect("deserializes");
    progress.set_state((**machine.state()).clone());
    progress
}

/// Answers every task of `effects` (and of the effects that follow) by
/// appending its node and the topic it read to the log, until none is
/// out; the events emitted on the way.
fn drive(machine: &mut RunMachine, mut effects: Vec<Effect>) -> Vec<RunEvent> {
    let mut events = Vec::new();
    while !effects.is_empty() {
        let mut next = Vec::new();
        for effect in effects {
            match effect {
                Effect::Dispatch(spec) => {
                    let state = machine.state().clone();
                    let log = format!(
                        "{}{}:{};",
                        state["log"].as_str().unwrap_or_default(),
                        spec.node,
                        state["topic"].as_str().unwrap_or_default()
                    );
                    let result = json!({ "log": log }).to_string();
                    next.extend(
                        machine
                            .apply(Input::TaskReturned {
                                key: spec.key,
                                worker: "w".into(),
                                result: Ok((result, None)),
                                read: Vec::new(),
                                notes: Vec::new(),
                            })
                            .expect("taken"),
                    );
                }
                Effect::Emit(event) => events.push(event),
                _ => {}
            }
        }
        effects = next;
    }
    events
}

/// Answers the first task `effects` send with `writes`; the effects that
/// follow.
fn answer_first(machine: &mut RunMachine, effects: &[Effect], writes: Value) -> Vec<Effect> {
    let spec = effects
        .iter()
        .find_map(|e| match e {
            Effect::Dispatch(spec) => Some(spec.clone()),
            _ => None,
        })
        .expect("a task is sent");
    machine
        .apply(Input::TaskReturned {
            key: spec.key,
            worker: "w".into(),
            result: Ok((writes.to_string(), None)),
            read: Vec::new(),
            notes: Vec::new(),
        })
        .expect("taken")
}

fn owner() -> Owner {
    Owner {
        namespace: "team-a".into(),
        submitted_by: "forker".into(),
        ..Owner::default()
    }
}

#[test]
fn a_fork_goes_on_from_the_wave_begun_reading_the_replaced_field() {
    let plan = plan(CHAIN);
    let mut original = RunMachine::new(plan.clone(), Map::new()).expect("valid input");
    let first = original.start();
    // Answer `one` only: the checkpoint after wave 1 has `two` begun.
    let after_one = answer_first(&mut original, &first, json!({"log": "one:tides;"}));
    assert_eq!(original.waves_merged(), 1);
    let progress = checkpointed(&mut original);

    let from = ForkedFrom {
        run: "run-original".into(),
        step: 1,
        point: 0,
    };
    let mut set = Map::new();
    set.insert("topic".into(), json!("seas"));
    let mut fork = RunMachine::fork(plan.clone(), progress, set, owner(), from.clone(), None)
        .expect("a fork that fits");
    let started = fork.start_fork();
    let events = drive(&mut fork, started);
    assert_eq!(fork.status(), RunStatus::Completed, "{:?}", fork.error());
    assert_eq!(fork.state()["log"], "one:tides;two:seas;three:seas;");
    assert_eq!(fork.forked_from(), Some(&from));
    assert_eq!(fork.owner().submitted_by, "forker");
    // Its log: who and where from, then the wave begun told as started;
    // nothing said of a coordinator restarting.
    assert_eq!(
        events[0],
        RunEvent::RunSubmitted {
            by: "forker".into(),
            namespace: "team-a".into(),
            forked_from: Some(from),
        }
    );
    assert!(matches!(&events[1], RunEvent::WaveStarted { step: 2, nodes } if nodes == &["two"]));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, RunEvent::TaskRedispatched { .. }))
    );

    // The original, untouched, goes on as it would have.
    drive(&mut original, after_one);
    assert_eq!(original.state()["log"], "one:tides;two:tides;three:tides;");
    assert_eq!(original.forked_from(), None);
}

#[test]
fn a_field_that_does_not_fit_the_state_is_refused_naming_it() {
    let plan = plan(CHAIN);
    let mut machine = RunMachine::new(plan.clone(), Map::new()).expect("valid input");
    let mut with = |field: &str, value: Value| {
        let mut set = Map::new();
        set.insert(field.into(), value);
        let from = ForkedFrom {
            run: "run-original".into(),
            step: 0,
            point: 0,
        };
        RunMachine::fork(
            plan.clone(),
            checkpointed(&mut machine),
            set,
            owner(),
            from,
            None,
        )
        .expect_err("refused")
        .to_string()
    };
    let undeclared = with("topik", json!("seas"));
    assert!(
        undeclared.contains("'topik'") && undeclared.contains("strict_state"),
        "{undeclared}"
    );
    let wrong = with("topic", json!(3));
    assert!(
        wrong.contains("'topic'") && wrong.contains("declared string"),
        "{wrong}"
    );
}

const REFINE: &str = r#"
name: refine
settings: { strict_state: true }
state:
  tone: { type: string, default: "dry" }
  draft: { type: string, default: "" }
  rounds: { type: integer, default: 0 }
conditions:
  enough: "state.rounds >= 3"
nodes:
  refine:
    kind: loop
    start: true
    body: write
    until: enough
    max_iterations: 5
    output_key: draft
  write: { kind: task, handler: write }
"#;

/// Each iteration appends the tone to the draft.
fn writer() -> impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String> {
    |state, _, _| {
        let draft = state["draft"].as_str().unwrap_or_default();
        let tone = state["tone"].as_str().unwrap_or_default();
        let rounds = state["rounds"].as_i64().unwrap_or_default();
        Ok(json!({"draft": format!("{draft}{tone};"), "rounds": rounds + 1}))
    }
}

fn from(step: u32, point: u64) -> ForkedFrom {
    ForkedFrom {
        run: "run-original".into(),
        step,
        point,
    }
}

#[test]
fn a_loop_forked_after_an_iteration_keeps_it_and_its_next_iterations_read_the_replaced_fields() {
    let original = Harness::new(REFINE, json!({}))
        .on("write", writer())
        .run_until(|events| {
            events
                .iter()
                .any(|e| matches!(e, RunEvent::LoopIteration { iteration: 1, .. }))
        });
    let mut original = original;
    assert_eq!(
        original.machine.waves_merged(),
        0,
        "the loop's wave is at work"
    );
    let progress = checkpointed(&mut original.machine);
    // The draft the body wrote is the loop's, not yet the run's: setting
    // it replaces what the loop wrote, as setting the tone replaces S0's.
    let mut set = Map::new();
    set.insert("draft".into(), json!("edited;"));
    set.insert("tone".into(), json!("bold"));
    let fork = RunMachine::fork(plan(REFINE), progress, set, owner(), from(0, 9), None)
        .expect("a fork that fits");
    let mut fork = Harness::of(fork).on("write", writer());
    let started = fork.machine.start_fork();
    fork.absorb(started);
    fork.drive();
    assert_eq!(fork.status(), RunStatus::Completed, "{}", fork.error_text());
    // Iteration 1 is kept (not run again); 2 and 3 read the fork's fields.
    assert_eq!(fork.state()["draft"], "edited;bold;bold;");
    assert_eq!(fork.state()["rounds"], 3);
    assert_eq!(fork.runs_of("write"), 2);

    // The original goes on as it would have.
    original.drive();
    assert_eq!(original.state()["draft"], "dry;dry;dry;");
}

const MAPPED: &str = r#"
name: mapped
state:
  factor: { type: integer, default: 2 }
  numbers: { type: list, default: [1, 2, 3, 4] }
  products: { type: list, default: [] }
nodes:
  times:
    kind: map
    start: true
    over: "{{ numbers }}"
    as: n
    max_concurrency: 1
    branch: multiply
    output_key: product
    collect_into: products
  multiply: { kind: task, handler: multiply }
"#;

#[test]
fn a_map_forked_mid_way_keeps_its_finished_items_and_runs_the_rest_on_the_fork_state() {
    let multiply = || {
        |state: &Map<String, Value>, scope: &Map<String, Value>, _: u32| -> Result<Value, String> {
            let n = scope["n"].as_i64().unwrap_or_default();
            Ok(json!({"product": n * state["factor"].as_i64().unwrap_or_default()}))
        }
    };
    let mut original = Harness::new(MAPPED, json!({}))
        .on("multiply", multiply())
        .run_until(|events| {
            events
                .iter()
                .filter(|e| matches!(e, RunEvent::MapItemFinished { .. }))
                .count()
                == 2
        });
    let progress = checkpointed(&mut original.machine);
    let mut set = Map::new();
    set.insert("factor".into(), json!(10));
    let fork = RunMachine::fork(plan(MAPPED), progress, set, owner(), from(0, 7), None)
        .expect("a fork that fits");
    let mut fork = Harness::of(fork).on("multiply", multiply());
    let started = fork.machine.start_fork();
    fork.absorb(started);
    fork.drive();
    assert_eq!(fork.status(), RunStatus::Completed, "{}", fork.error_text());
    // Two items finished before the fork: kept; the other two read 10.
    assert_eq!(fork.state()["products"], json!([2, 4, 30, 40]));
    assert_eq!(fork.runs_of("multiply"), 2);
    original.drive();
    assert_eq!(original.state()["products"], json!([2, 4, 6, 8]));
}

const PARENT: &str = r#"
name: parent
state:
  topic: { type: string, default: "tides" }
  notes: { type: string, default: "" }
nodes:
  research: { kind: subgraph, start: true, graph: research.yaml }
  other: { kind: subgraph, start: true, graph: other.yaml }
"#;

#[test]
fn a_parents_fork_takes_on_its_childs_fork_and_starts_the_originals_other_children_afresh() {
    let echo = |input: Map<String, Value>| Ok(input);
    let mut original = Harness::new(PARENT, json!({}))
        .child("research.yaml", echo)
        .child("other.yaml", echo)
        .run_until(|events| {
            events
                .iter()
                .any(|e| matches!(e, RunEvent::SubgraphStarted { .. }))
        });
    let progress = checkpointed(&mut original.machine);
    let children = progress.children();
    assert_eq!(
        children.len(),
        1,
        "research's child in progress, other's not started"
    );
    let research = children[0].clone();
    let research_fork = weft_proto::RunId::from("run-research-fork");
    let mut fork_with = |adopt: Option<(&weft_proto::RunId, &weft_proto::RunId)>| {
        let progress = checkpointed(&mut original.machine);
        RunMachine::fork(
            plan(PARENT),
            progress,
            Map::new(),
            owner(),
            from(0, 5),
            adopt,
        )
        .expect("a fork that fits")
        .start_fork()
    };
    // A child's fork is the research node's, told as started; `other`'s
    // child had not started, so the fork starts it.
    let started = fork_with(Some((&research, &research_fork)));
    assert!(started.iter().any(|e| matches!(e,
        Effect::Emit(RunEvent::SubgraphStarted { node, run_id })
            if node.as_str() == "research" && run_id == &research_fork)));
    assert!(started.iter().any(|e| matches!(e,
        Effect::AwaitChild { node, run_id } if node == "research" && run_id == &research_fork)));
    assert!(started.iter().any(|e| matches!(e,
        Effect::StartChild { node, .. } if node == "other")));
    // A fork of the parent itself: the child in progress is the
    // original's, never awaited by the fork: it starts its own.
    let started = fork_with(None);
    assert!(
        !started
            .iter()
            .any(|e| matches!(e, Effect::AwaitChild { .. }))
    );
    let fresh: Vec<&str> = started
        .iter()
        .filter_map(|e| match e {
            Effect::StartChild { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fresh.len(), 2, "{fresh:?}");
}

#[test]
fn a_fork_of_a_runs_end_ends_at_once_as_the_original_did() {
    let h = Harness::new(CHAIN, json!({})).on("one", |_, _, _| Ok(json!({})));
    let mut h = h
        .on("two", |_, _, _| Ok(json!({})))
        .on("three", |_, _, _| Ok(json!({"log": "done"})))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    let progress = checkpointed(&mut h.machine);
    let mut set = Map::new();
    set.insert("topic".into(), json!("seas"));
    let mut fork = RunMachine::fork(plan(CHAIN), progress, set, owner(), from(3, 0), None)
        .expect("a fork that fits");
    let started = fork.start_fork();
    assert_eq!(fork.status(), RunStatus::Completed);
    assert_eq!(fork.state()["topic"], "seas");
    assert!(started.iter().any(|e| matches!(
        e,
        Effect::Emit(RunEvent::RunFinished {
            status: RunStatus::Completed,
            error: None
        })
    )));
    assert!(started.iter().any(|e| matches!(e, Effect::Checkpoint)));
    assert!(!started.iter().any(|e| matches!(e, Effect::Dispatch(_))));
}

#[test]
fn a_fork_of_a_wave_waiting_for_a_person_asks_again_in_its_own_log() {
    let plan = plan(
        r#"
name: ask
state:
  draft: { type: string, default: "" }
nodes:
  write: { kind: task, handler: step, start: true, next: approve }
  approve: { kind: approval, prompt: "Publish?", next: publish }
  publish: { kind: task, handler: step }
"#,
    );
    let mut original = RunMachine::new(plan.clone(), Map::new()).expect("valid input");
    let first = original.start();
    let after_write = answer_first(&mut original, &first, json!({"draft": "d"}));
    let asked = |events: &[Effect]| {
        events
            .iter()
            .filter(|e| {
                matches!(e, Effect::Emit(RunEvent::WaitingForInput { node, kind, .. })
                    if node.as_str() == "approve" && kind == "approval")
            })
            .count()
    };
    assert_eq!(asked(&after_write), 1, "{after_write:?}");
    assert_eq!(original.status(), RunStatus::Waiting);
    let progress = checkpointed(&mut original);

    let from = ForkedFrom {
        run: "run-original".into(),
        step: 1,
        point: 0,
    };
    let mut fork = RunMachine::fork(plan, progress, Map::new(), owner(), from, None)
        .expect("a fork that fits");
    let started = fork.start_fork();
    // Its watchers learn it waits, as the original's did.
    assert_eq!(asked(&started), 1, "{started:?}");
    assert_eq!(fork.status(), RunStatus::Waiting);
}
