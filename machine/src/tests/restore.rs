//! A run stored mid-way and restored continues exactly as the original:
//! the same effects, step for step, and the same end. Cut at every point of
//! runs with waves, a map in flight, a parked retry, worker-hosted calls and
//! a pause for a human.

use serde_json::{Value, json};

use super::*;

/// Something the run waits for, answered in order.
#[derive(Debug, Clone)]
enum Awaited {
    Task(Box<TaskSpec>),
    Retry(TaskKey),
    Call(CallKey, bool),
}

/// How the world answers a task.
type Respond = fn(&TaskSpec) -> Input;

#[derive(Debug)]
struct Driver {
    machine: RunMachine,
    awaited: VecDeque<Awaited>,
}

impl Driver {
    fn start(plan: &Arc<RunPlan>, input: Value) -> (Self, Vec<Effect>) {
        let machine = RunMachine::new(plan.clone(), obj(input)).expect("valid input");
        let mut driver = Self {
            machine,
            awaited: VecDeque::new(),
        };
        let effects = driver.machine.start();
        driver.absorb(&effects);
        (driver, effects)
    }

    /// A copy made the way a checkpoint is: the progress stored as JSON
    /// without the state (and without the overlays that are map items'
    /// writes), the state apart, then restored.
    fn stored_and_restored(&mut self, plan: &Arc<RunPlan>) -> Self {
        let stored = self
            .machine
            .progress_json_without_state()
            .expect("progress serializes");
        let mut progress: Progress = serde_json::from_str(&stored).expect("progress deserializes");
        progress.set_state((**self.machine.state()).clone());
        Self {
            machine: RunMachine::restore(plan.clone(), progress).expect("fits its graph"),
            awaited: self.awaited.clone(),
        }
    }

    /// A copy made the way a restarted coordinator makes it: restored from
    /// the checkpoint, with everything that was sent out lost and sent
    /// again by [`RunMachine::resume`].
    fn crashed_and_resumed(&mut self, plan: &Arc<RunPlan>) -> Self {
        let mut copy = self.stored_and_restored(plan);
        copy.awaited.clear();
        let effects = copy.machine.resume();
        copy.absorb(&effects);
        copy
    }

    fn absorb(&mut self, effects: &[Effect]) {
        for effect in effects {
            match effect {
                Effect::Dispatch(spec) => self
                    .awaited
                    .push_back(Awaited::Task(Box::new((**spec).clone()))),
                Effect::ScheduleRetry { key, .. } => self.awaited.push_back(Awaited::Retry(*key)),
                Effect::CallReducer { call, .. } => {
                    self.awaited.push_back(Awaited::Call(*call, false))
                }
                Effect::CallPredicate { call, .. } | Effect::CallUntil { call, .. } => {
                    self.awaited.push_back(Awaited::Call(*call, true))
                }
                Effect::CancelTasks(keys) => self
                    .awaited
                    .retain(|a| !matches!(a, Awaited::Task(spec) if keys.contains(&spec.key))),
                Effect::Emit(_)
                | Effect::Cache { .. }
                | Effect::Checkpoint
                | Effect::Deliver { .. }
                | Effect::SendAck { .. }
                | Effect::StartChild { .. }
                | Effect::AwaitChild { .. }
                | Effect::CancelChildren(_) => {}
            }
        }
    }

    /// The next input: the oldest awaited answer, or the human's answer
    /// when only that is missing; `None` once the run has ended.
    fn next_input(&mut self, respond: Respond, human: &Input) -> Option<Input> {
        if let Some(awaited) = self.awaited.pop_front() {
            return Some(match awaited {
                Awaited::Task(spec) => respond(&spec),
                Awaited::Retry(key) => Input::RetryDue { key },
                Awaited::Call(call, predicate) => Input::CallReturned {
                    call,
                    result: Ok(if predicate {
                        json!(true)
                    } else {
                        json!("hosted")
                    }),
                },
            });
        }
        (self.machine.status() == RunStatus::Waiting).then(|| human.clone())
    }

    fn step(&mut self, input: Input) -> Vec<Effect> {
        let effects = self.machine.apply(input).expect("accepted");
        self.absorb(&effects);
        effects
    }
}

/// Runs the graph once straight through, then once cut after every step:
/// the restored copy must match the original step for step.
fn restores_everywhere(yaml: &str, input: Value, respond: Respond, human: Input) {
    let plan = plan(yaml);
    let (mut reference, _) = Driver::start(&plan, input.clone());
    let mut steps = 0;
    while let Some(next) = reference.next_input(respond, &human) {
        reference.step(next);
        steps += 1;
    }
    assert_eq!(
        reference.machine.status(),
        RunStatus::Completed,
        "{:?}",
        reference.machine.error()
    );
    assert!(steps > 3, "a run long enough to cut");
    for cut in 0..=steps {
        let (mut original, _) = Driver::start(&plan, input.clone());
        for _ in 0..cut {
            let next = original
                .next_input(respond, &human)
                .expect("as many steps as before");
            original.step(next);
        }
        // After a crash at this point, the resumed copy reaches the same end.
        let mut resumed = original.crashed_and_resumed(&plan);
        while let Some(next) = resumed.next_input(respond, &human) {
            resumed.step(next);
        }
        assert_eq!(resumed.machine.status(), RunStatus::Completed, "cut {cut}");
        assert_eq!(
            resumed.machine.state(),
            reference.machine.state(),
            "cut {cut}"
        );
        let mut restored = original.stored_and_restored(&plan);
        assert_eq!(
            restored.machine.status(),
            original.machine.status(),
            "cut {cut}"
        );
        assert_eq!(
            restored.machine.waiting(),
            original.machine.waiting(),
            "cut {cut}"
        );
        while let Some(next) = original.next_input(respond, &human) {
            let also = restored
                .next_input(respond, &human)
                .expect("the copy waits too");
            assert_eq!(next, also, "cut {cut}: the same thing is awaited");
            let expected = original.step(next);
            assert_eq!(restored.step(also), expected, "cut {cut}: the same effects");
        }
        assert!(restored.next_input(respond, &human).is_none(), "cut {cut}");
        assert_eq!(
            restored.machine.state(),
            reference.machine.state(),
            "cut {cut}"
        );
        assert_eq!(
            restored.machine.steps(),
            reference.machine.steps(),
            "cut {cut}"
        );
    }
}

fn ok(spec: &TaskSpec, writes: Value) -> Input {
    Input::TaskSucceeded {
        key: spec.key,
        output: NodeOutput::from_json(writes).expect("an object"),
    }
}

#[test]
fn a_run_with_a_map_and_a_retry_restores_at_every_step() {
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
    max_concurrency: 2
    next: flaky
  double: { kind: task, handler: double }
  flaky: { kind: task, handler: flaky, retry: { max_attempts: 2 }, next: total }
  total: { kind: task, handler: total }
"#;
    restores_everywhere(
        yaml,
        json!({"items": [1, 2, 3, 4, 5]}),
        |spec| match spec.node.as_str() {
            "double" => {
                let item = spec.scope["item"].as_i64().expect("an integer item");
                ok(spec, json!({"doubled": item * 2}))
            }
            "flaky" if spec.attempt == 1 => Input::TaskFailed {
                key: spec.key,
                failure: TaskFailure {
                    kind: FailureKind::ScriptFailed,
                    message: "first time unlucky".into(),
                    worker: None,
                },
            },
            "flaky" => ok(spec, json!({"flaky": spec.attempt})),
            _ => {
                let view = spec.state.view();
                let sum: i64 = view["results"]
                    .as_array()
                    .expect("collected")
                    .iter()
                    .filter_map(Value::as_i64)
                    .sum();
                ok(spec, json!({"sum": sum}))
            }
        },
        Input::Cancel { by: None },
    );
}

#[test]
fn a_run_with_a_loop_restores_at_every_step() {
    let yaml = r#"
state:
  n: { type: integer, default: 0 }
conditions:
  done: "state.n >= 3"
nodes:
  count:
    kind: loop
    start: true
    body: bump
    until: done
    next: after
  bump: { kind: task, handler: bump, next: check }
  check: { kind: task, handler: check }
  after: { kind: task, handler: after }
"#;
    restores_everywhere(
        yaml,
        json!({}),
        |spec| {
            let view = spec.state.view();
            let n = view["n"].as_i64().expect("n");
            match spec.node.as_str() {
                "bump" => ok(spec, json!({"n": n + 1})),
                "check" => ok(spec, json!({"seen": spec.scope["loop"]["iteration"]})),
                _ => ok(spec, json!({"after": n})),
            }
        },
        Input::Cancel { by: None },
    );
}

#[test]
fn a_loop_waiting_for_its_hosted_until_restores_at_every_step() {
    let yaml = r#"
nodes:
  setup: { kind: task, handler: setup, start: true, next: polish }
  polish: { kind: loop, body: write, until: "fn:good", next: after }
  write: { kind: task, handler: write, next: check }
  check: { kind: task, handler: check }
  after: { kind: task, handler: after }
"#;
    restores_everywhere(
        yaml,
        json!({}),
        |spec| ok(spec, json!({spec.node.as_str(): true})),
        Input::Cancel { by: None },
    );
}

#[test]
fn a_paused_run_with_hosted_calls_restores_at_every_step() {
    let yaml = r#"
state:
  notes: { type: string, reducer: "fn:longest" }
nodes:
  a: { kind: task, handler: a, start: true }
  b: { kind: task, handler: b, start: true }
  check: { kind: approval, prompt: "Keep {{ notes }}?", depends_on: [a, b] }
  yes: { kind: task, handler: yes }
  no: { kind: task, handler: no }
edges:
  - { from: check, to: yes, when: "fn:is_kept" }
  - { from: check, to: no, when: "!state.approved" }
"#;
    restores_everywhere(
        yaml,
        json!({"notes": ""}),
        |spec| ok(spec, json!({"notes": format!("from {}", spec.node)})),
        Input::Answered {
            node: "check".into(),
            answer: HumanAnswer {
                value: json!("approve"),
                comment: None,
                by: None,
            },
        },
    );
}

#[test]
fn progress_for_another_graph_is_refused() {
    let small = plan("nodes:\n  a: { kind: task, handler: a, start: true }\n");
    let (driver, _) = Driver::start(&small, json!({}));
    let stored = serde_json::to_string(driver.machine.progress()).unwrap();
    let bigger = plan(
        "nodes:\n  a: { kind: task, handler: a, start: true, next: b }\n  b: { kind: task, handler: b }\n",
    );
    let progress: Progress = serde_json::from_str(&stored).unwrap();
    let error = RunMachine::restore(bigger, progress).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the stored run does not fit its graph: 1 nodes stored, the graph has 2"
    );
}

/// A loop's state grown in its body is stored once in the progress: the
/// step that is out sees it as its overlay, which the checkpoint leaves to
/// the iteration's writes and the restore lays back.
#[test]
fn a_loop_body_s_writes_are_stored_once_while_its_step_is_out() {
    let yaml = r#"
state:
  n: { type: integer, default: 0 }
  messages: { type: array, reducer: concat, default: [] }
conditions:
  done: "state.n >= 4"
nodes:
  chat:
    kind: loop
    start: true
    body: say
    until: done
  say: { kind: task, handler: say }
"#;
    let plan = plan(yaml);
    let respond: Respond = |spec| {
        let n = spec.state.view()["n"].as_i64().expect("n");
        let said = format!("turn {n}: {}", "said once ".repeat(20));
        ok(spec, json!({"n": n + 1, "messages": [said]}))
    };
    let (mut original, _) = Driver::start(&plan, json!({}));
    for _ in 0..2 {
        let next = original.next_input(respond, &Input::Cancel { by: None });
        original.step(next.expect("a turn"));
    }
    let Some(Awaited::Task(out)) = original.awaited.front().cloned() else {
        panic!("the third turn is out: {:?}", original.awaited);
    };
    assert!(
        out.state.overlay.contains_key("messages"),
        "{:?}",
        out.state
    );
    let stored = original.machine.progress_json_without_state().unwrap();
    assert_eq!(stored.matches("turn 1: said once").count(), 1, "{stored}");
    // Restored, the step that was out is sent again with what it saw.
    let resumed = original.crashed_and_resumed(&plan);
    let Some(Awaited::Task(again)) = resumed.awaited.front().cloned() else {
        panic!("the step is sent again: {:?}", resumed.awaited);
    };
    assert_eq!(again.state.view(), out.state.view());
}

/// A checkpoint's progress leaves out what is empty or unset (a task's
/// item, scope, overlay and hidden field, the run's error, answers and
/// the rest): every wave writes it, and read back it is the same run.
#[test]
fn a_progress_leaves_out_what_is_empty_and_reads_back_the_same() {
    let mut yaml =
        String::from("name: chain\nstate:\n  counter: {type: integer, default: 0}\nnodes:\n");
    for i in 0..10 {
        yaml.push_str(&format!(
            "  n{i}:\n    kind: task\n    handler: increment\n"
        ));
        if i == 0 {
            yaml.push_str("    start: true\n");
        }
        if i < 9 {
            yaml.push_str(&format!("    next: [n{}]\n", i + 1));
        }
    }
    let plan = plan(&yaml);
    let (mut driver, _) = Driver::start(&plan, json!({}));
    let json = driver.machine.progress_json_without_state().unwrap();
    let stored: Value = serde_json::from_str(&json).unwrap();
    let spec = &stored["tasks"]["tasks"]["1"]["spec"];
    assert_eq!(spec["node"], "n0", "{json}");
    for key in [
        "item",
        "scope",
        "team",
        "prompts",
        "first_key",
        "concurrency",
    ] {
        assert!(spec.get(key).is_none(), "{key} is left out: {json}");
    }
    assert_eq!(spec["state"], json!({}), "{json}");
    for key in [
        "state",
        "error",
        "forced",
        "failed_wave",
        "trace_parent",
        "answers",
    ] {
        assert!(stored.get(key).is_none(), "{key} is left out: {json}");
    }
    assert!(stored["wave"].get("announced").is_none(), "{json}");
    assert!(stored["tasks"].get("queue").is_none(), "{json}");
    assert!(json.len() < 450, "{} bytes: {json}", json.len());

    let mut restored = driver.stored_and_restored(&plan);
    assert_eq!(
        restored.machine.progress_json_without_state().unwrap(),
        json,
        "the progress read back is the same run"
    );
}
