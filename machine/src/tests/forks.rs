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
    let spec = first
        .iter()
        .find_map(|e| match e {
            Effect::Dispatch(spec) => Some(spec.clone()),
            _ => None,
        })
        .expect("one is sent");
    let after_one = original
        .apply(Input::TaskReturned {
            key: spec.key,
            worker: "w".into(),
            result: Ok((json!({"log": "one:tides;"}).to_string(), None)),
            read: Vec::new(),
            notes: Vec::new(),
        })
        .expect("taken");
    assert_eq!(original.waves_merged(), 1);
    let progress = checkpointed(&mut original);

    let from = ForkedFrom {
        run: "run-original".into(),
        step: 1,
    };
    let mut set = Map::new();
    set.insert("topic".into(), json!("seas"));
    let mut fork = RunMachine::fork(plan.clone(), progress, set, owner(), from.clone())
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
        };
        RunMachine::fork(plan.clone(), checkpointed(&mut machine), set, owner(), from)
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
