//! A node's `cache:` (SPEC 20) in the run machine: a step's entry key is
//! rendered when it is created; an accepted answer is handed to the actor
//! to keep ([`Effect::Cache`]) and a refused one is not; an answer taken
//! from the cache ([`Input::TaskCached`]) is merged like a worker's, says
//! so (`node_cached`), and is not kept again.

use serde_json::{Value, json};

use super::*;

const CACHED: &str = r#"
name: cached
state:
  q: { type: string }
  n: { type: integer, default: 0 }
nodes:
  ask: { kind: task, handler: ask, start: true, next: after, cache: { key: "{{ q }}", ttl: 1h } }
  after: { kind: task, handler: after }
"#;

/// A run of `yaml` driven by hand.
struct Driven {
    machine: RunMachine,
    in_flight: Vec<TaskSpec>,
    events: Vec<RunEvent>,
    kept: Vec<(String, String, Option<usize>)>,
}

impl Driven {
    fn start(yaml: &str, owner: Option<Owner>) -> Self {
        let input = json!({"q": "tides"});
        let Value::Object(input) = input else {
            unreachable!()
        };
        let mut machine = RunMachine::new(plan(yaml), input).expect("valid input");
        if let Some(owner) = owner {
            machine.set_owner(owner);
        }
        let effects = machine.start();
        let mut run = Self {
            machine,
            in_flight: Vec::new(),
            events: Vec::new(),
            kept: Vec::new(),
        };
        run.absorb(effects);
        run
    }

    fn absorb(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Dispatch(spec) => self.in_flight.push((*spec).clone()),
                Effect::Emit(event) => self.events.push(event),
                Effect::Cache {
                    entry,
                    writes,
                    item,
                    ..
                } => self.kept.push((entry, writes, item)),
                _ => {}
            }
        }
    }

    fn take(&mut self, node: &str) -> TaskSpec {
        let at = self
            .in_flight
            .iter()
            .position(|spec| spec.node == node)
            .unwrap_or_else(|| panic!("no step of '{node}' in flight"));
        self.in_flight.remove(at)
    }

    fn returns(&mut self, node: &str, text: &str) {
        let spec = self.take(node);
        let effects = self
            .machine
            .apply(Input::TaskReturned {
                key: spec.key,
                worker: "w".into(),
                result: Ok((text.to_owned(), None)),
                read: Vec::new(),
                notes: Vec::new(),
            })
            .expect("taken");
        self.absorb(effects);
    }

    fn kinds(&self) -> Vec<&'static str> {
        self.events.iter().map(RunEvent::kind).collect()
    }
}

#[test]
fn an_accepted_answer_is_kept_under_the_rendered_entry_key() {
    let mut run = Driven::start(CACHED, None);
    let spec = run.in_flight[0].clone();
    let graph = plan(CACHED).shared_graph();
    let cache = graph.node(0).cache.clone().unwrap();
    assert_eq!(
        spec.cache.as_deref(),
        Some(cache.entry_key("cached", "ask", "tides").as_str())
    );
    run.returns("ask", r#"{"n": 1}"#);
    assert_eq!(
        run.kept,
        [(spec.cache.clone().unwrap(), r#"{"n": 1}"#.to_owned(), None)]
    );
    // A node without `cache:` is never kept.
    assert_eq!(run.in_flight[0].cache, None);
    run.returns("after", r#"{"n": 2}"#);
    assert_eq!(run.kept.len(), 1);
    assert_eq!(run.machine.status(), RunStatus::Completed);
}

#[test]
fn a_refused_answer_is_not_kept() {
    let mut run = Driven::start(CACHED, None);
    run.returns("ask", "[1, 2]");
    assert!(run.kept.is_empty(), "{:?}", run.kept);
    assert_eq!(run.machine.status(), RunStatus::Failed);
}

#[test]
fn an_answer_from_the_cache_is_merged_said_and_not_kept_again() {
    let mut run = Driven::start(CACHED, None);
    let spec = run.take("ask");
    let effects = run
        .machine
        .apply(Input::TaskCached {
            key: spec.key,
            writes: r#"{"n": 7}"#.into(),
            output: None,
            stored_by: "r-0".into(),
            age_ms: 42,
        })
        .expect("taken");
    run.absorb(effects);
    assert!(run.kept.is_empty());
    assert_eq!(run.machine.state()["n"], json!(7));
    let cached = run
        .events
        .iter()
        .find(|e| e.kind() == "node_cached")
        .expect("node_cached");
    assert_eq!(
        cached,
        &RunEvent::NodeCached {
            node: "ask".into(),
            item: None,
            stored_by: "r-0".into(),
            age_ms: 42,
        }
    );
    let kinds = run.kinds();
    let at = |kind| kinds.iter().position(|k| *k == kind).unwrap();
    assert!(at("node_started") < at("node_cached"));
    assert!(at("node_cached") < at("node_finished"));
    let finished = run
        .events
        .iter()
        .find(|e| e.kind() == "node_finished")
        .unwrap();
    assert!(
        matches!(finished, RunEvent::NodeFinished { worker: None, .. }),
        "{finished:?}"
    );
}

#[test]
fn no_cache_and_settings_cache_false_leave_steps_without_an_entry_key() {
    let owner = Owner {
        no_cache: true,
        ..Owner::default()
    };
    let run = Driven::start(CACHED, Some(owner));
    assert_eq!(run.in_flight[0].cache, None);
    let off = CACHED.replace("name: cached", "name: cached\nsettings: { cache: false }");
    let run = Driven::start(&off, None);
    assert_eq!(run.in_flight[0].cache, None);
}

#[test]
fn a_key_that_does_not_render_fails_the_step_naming_it() {
    let yaml = CACHED.replace(r#"key: "{{ q }}""#, r#"key: "{{ q }}-{{ lang }}""#);
    let run = Driven::start(&yaml, None);
    assert!(run.in_flight.is_empty(), "nothing was dispatched");
    assert_eq!(run.machine.status(), RunStatus::Failed);
    let error = run.machine.error().expect("an error").to_string();
    assert!(error.contains("cache.key"), "{error}");
    assert!(error.contains("lang"), "{error}");
}
