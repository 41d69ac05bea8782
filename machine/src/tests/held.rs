//! A run whose input holds a large string as its text (`crate::held`): a
//! write of the field is compared with the held value, not with the
//! placeholder the state carries, and releases it once committed.

use serde_json::{Value, json};

use super::*;
use crate::held::HELD_FIELD_BYTES;

const TWO_THEN_ONE: &str = r#"
nodes:
  a: {kind: task, handler: a, start: true, next: c}
  b: {kind: task, handler: b, start: true, next: c}
  c: {kind: task, handler: c, end: true}
"#;

fn blob() -> String {
    "x".repeat(HELD_FIELD_BYTES)
}

fn input() -> String {
    json!({"blob": blob(), "n": 0}).to_string()
}

#[test]
fn a_held_string_written_back_unchanged_is_no_change_and_stays_held() {
    let h = Harness::with_input_text(TWO_THEN_ONE, &input())
        // Both echo the field as it is (a script returning the whole
        // state): no change, so no conflict.
        .on("a", write("blob", json!(blob())))
        .on("b", write("blob", json!(blob())))
        .on("c", write("n", json!(1)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.changed_fields(), ["n"]);
    let held = h.machine.held_text("blob").expect("still held");
    assert_eq!(serde_json::from_str::<Value>(held).unwrap(), json!(blob()));
    assert_eq!(h.machine.state()["blob"], json!(""), "the placeholder");
}

#[test]
fn a_held_string_written_anew_is_a_change_and_a_value_from_then_on() {
    let h = Harness::with_input_text(TWO_THEN_ONE, &input())
        .on("a", write("blob", json!("short")))
        .on("b", noop())
        .on("c", write("n", json!(1)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.changed_fields(), ["blob", "n"]);
    assert!(h.machine.held_text("blob").is_none(), "released");
    assert_eq!(h.machine.state()["blob"], json!("short"));
    // Written as the empty string its placeholder is: a change all the same.
    let h = Harness::with_input_text(TWO_THEN_ONE, &input())
        .on("a", write("blob", json!("")))
        .on("b", noop())
        .on("c", noop())
        .run();
    assert_eq!(h.changed_fields(), ["blob"]);
    assert!(h.machine.held_text("blob").is_none());
}

#[test]
fn two_steps_changing_a_held_string_conflict_as_for_any_field() {
    let h = Harness::with_input_text(TWO_THEN_ONE, &input())
        .on("a", write("blob", json!("same")))
        .on("b", write("blob", json!("same")))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(
        h.machine.error(),
        Some(&RunError::ConcurrentUpdateError {
            field: "blob".into(),
            nodes: vec!["a".into(), "b".into()]
        })
    );
    assert!(
        h.machine.held_text("blob").is_some(),
        "the wave left nothing"
    );
}

// ----- a step's writes held as their text -----------------------------

/// A run driven by hand with the text each step returns, as a worker
/// sends it ([`Input::TaskReturned`]).
struct Returns {
    machine: RunMachine,
    in_flight: Vec<TaskSpec>,
    events: Vec<RunEvent>,
}

impl Returns {
    fn start(yaml: &str, input: &str) -> Self {
        let plan = plan(yaml);
        let input = RunInput::read(&plan, input)
            .unwrap_or_else(|| RunInput::parsed(serde_json::from_str(input).unwrap()));
        let mut machine = RunMachine::with_input(plan, input).expect("valid input");
        let effects = machine.start();
        let mut run = Self {
            machine,
            in_flight: Vec::new(),
            events: Vec::new(),
        };
        run.absorb(effects);
        run
    }

    fn absorb(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Dispatch(spec) => self.in_flight.push((*spec).clone()),
                Effect::Emit(event) => self.events.push(event),
                _ => {}
            }
        }
    }

    /// Node `node`'s step in flight returns `text`.
    fn returns(&mut self, node: &str, text: &str) {
        let at = self
            .in_flight
            .iter()
            .position(|spec| spec.node == node)
            .unwrap_or_else(|| panic!("no step of '{node}' in flight"));
        let spec = self.in_flight.remove(at);
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

    fn changed(&self) -> Vec<String> {
        changed_fields(&self.events)
    }

    /// The state as a checkpoint stores it and a restored run reads it:
    /// each held field's text in place of its placeholder.
    fn stored_state(&self) -> Map<String, Value> {
        let mut state = (**self.machine.state()).clone();
        for (name, text) in self.machine.held() {
            state.insert(name.clone(), serde_json::from_str(text).unwrap());
        }
        state
    }
}

/// A large string with escapes and characters outside ASCII, as a worker
/// writing UTF-8 spells it.
fn report() -> String {
    "é \"quoted\" back\\slash\nline 😀 \u{1}\t".repeat(HELD_FIELD_BYTES / 20)
}

/// The same string as a writer that escapes everything outside ASCII
/// spells it (Python's `json.dumps`): other bytes, the same string.
fn ascii_escaped(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

const WRITE_THEN_READ: &str = r#"
nodes:
  write: {kind: task, handler: write, start: true, next: read}
  read: {kind: task, handler: read, end: true}
"#;

#[test]
fn a_large_string_a_step_returns_is_held_as_its_worker_sent_it() {
    let mut run = Returns::start(WRITE_THEN_READ, r#"{"n": 0}"#);
    let text = json!({"report": report(), "n": 1}).to_string();
    run.returns("write", &text);
    let held = run.machine.held_text("report").expect("held");
    let sent = serde_json::to_string(&report()).unwrap();
    assert_eq!(&**held, sent, "the worker's text, not written again");
    assert_eq!(run.machine.state()["report"], json!(""), "the placeholder");
    assert_eq!(run.machine.state()["n"], json!(1));
    assert_eq!(run.changed(), ["report", "n"], "in the order written");
    assert_eq!(
        run.machine.held_as_input().count(),
        0,
        "a step's write is not the input a client kept"
    );
    // The next step is sent it (its task's state carries the placeholder,
    // and the actor sends the held text); it writes something else.
    run.returns("read", r#"{"report": "done"}"#);
    assert_eq!(run.machine.status(), RunStatus::Completed);
    assert!(run.machine.held_text("report").is_none(), "a value again");
    assert_eq!(run.machine.state()["report"], json!("done"));
}

#[test]
fn a_step_echoing_a_held_string_with_other_escapes_changes_nothing() {
    let doc = report();
    let input = json!({"doc": doc, "n": 0}).to_string();
    let mut run = Returns::start(WRITE_THEN_READ, &input);
    let echoed = format!(r#"{{"doc": {}, "n": 1}}"#, ascii_escaped(&doc));
    assert!(
        !echoed.contains(&serde_json::to_string(&doc).unwrap()),
        "other bytes"
    );
    run.returns("write", &echoed);
    assert_eq!(run.changed(), ["n"], "the same string: no change");
    assert_eq!(
        run.machine.held_as_input().collect::<Vec<_>>(),
        ["doc"],
        "still as the input gave it"
    );
    // A real change, one character from the end, is one.
    let mut changed = doc.clone();
    changed.pop();
    changed.push('!');
    run.returns(
        "read",
        &format!(r#"{{"doc": {}}}"#, ascii_escaped(&changed)),
    );
    assert_eq!(run.changed(), ["n", "doc"]);
    let held = run.machine.held_text("doc").expect("held, from the step");
    assert_eq!(serde_json::from_str::<String>(held).unwrap(), changed);
    assert_eq!(run.machine.held_as_input().count(), 0);
}

#[test]
fn a_step_write_the_coordinator_reads_is_parsed() {
    let text = json!({"report": report()}).to_string();
    // A condition reads it, an update takes the step's output, a schema
    // checks it, the field is declared a list: parsed, as before.
    let graphs = [
        r#"
nodes:
  write: {kind: task, handler: write, start: true}
  read: {kind: task, handler: read, end: true}
edges:
  - {from: write, to: read, when: "state.report != ''"}
"#,
        r#"
nodes:
  write:
    kind: task
    handler: write
    start: true
    end: true
    state_updates: {copy: "{{ output.report }}"}
"#,
        r#"
nodes:
  write:
    kind: task
    handler: write
    start: true
    end: true
    output_schema: {type: object}
"#,
        r#"
state:
  report: {type: any}
  other: {type: integer, reducer: add}
nodes:
  write: {kind: task, handler: write, start: true, end: true}
"#,
    ];
    for (i, yaml) in graphs.into_iter().enumerate() {
        let mut run = Returns::start(yaml, "{}");
        run.returns("write", &text);
        let held = run.machine.held_text("report").is_some();
        // The last graph reads nothing of `report`: held.
        assert_eq!(held, i == 3, "graph {i}");
        if !held {
            assert_eq!(run.machine.state()["report"], json!(report()), "graph {i}");
        }
    }
}

const TWO_BRANCHES: &str = r#"
nodes:
  a: {kind: task, handler: a, start: true, next: c}
  b: {kind: task, handler: b, start: true, next: c}
  c: {kind: task, handler: c, end: true}
"#;

#[test]
fn a_held_write_waiting_for_its_wave_is_stored_with_it_and_restored() {
    let mut run = Returns::start(TWO_BRANCHES, "{}");
    let text = json!({"report": report()}).to_string();
    run.returns("a", &text);
    assert!(run.machine.held_text("report").is_none(), "b still runs");
    // Stored as a checkpoint stores it, restored as a restarted
    // coordinator restores it.
    let stored = run.machine.progress_json_without_state().unwrap();
    assert!(
        stored.contains(&serde_json::to_string(&report()).unwrap()),
        "the held text stored as the JSON it is"
    );
    let mut progress: Progress = serde_json::from_str(&stored).unwrap();
    progress.set_state(run.stored_state());
    let plan = plan(TWO_BRANCHES);
    let mut restored = Returns {
        machine: RunMachine::restore(plan, progress).unwrap(),
        in_flight: Vec::new(),
        events: Vec::new(),
    };
    let effects = restored.machine.resume();
    restored.absorb(effects);
    restored.returns("b", r#"{"n": 1}"#);
    let held = restored.machine.held_text("report").expect("held");
    assert_eq!(serde_json::from_str::<String>(held).unwrap(), report());
    assert_eq!(restored.changed(), ["report", "n"], "a's, then b's");
    restored.returns("c", "{}");
    assert_eq!(restored.machine.status(), RunStatus::Completed);
    assert_eq!(restored.stored_state()["report"], json!(report()));
}

#[test]
fn two_steps_writing_a_held_string_conflict_as_for_any_field() {
    let mut run = Returns::start(TWO_BRANCHES, "{}");
    let text = json!({"report": report()}).to_string();
    run.returns("a", &text);
    run.returns("b", &json!({"report": report() + "2"}).to_string());
    assert_eq!(run.machine.status(), RunStatus::Failed);
    assert!(
        matches!(run.machine.error(), Some(RunError::ConcurrentUpdateError { field, .. }) if field == "report")
    );
    assert!(
        run.machine.held_text("report").is_none(),
        "nothing committed"
    );
}

#[test]
fn same_string_reads_escapes_as_a_parse_does() {
    use crate::held::same_string;
    let cases = [("é😀\u{1}\"\\/x", true), ("abc", true), ("", true)];
    for (text, _) in cases {
        let ours = serde_json::to_string(text).unwrap();
        let theirs = ascii_escaped(text);
        assert!(same_string(&ours, &theirs), "{ours} {theirs}");
        assert!(same_string(&theirs, &ours));
        assert!(same_string(r#""a\/b""#, r#""a/b""#));
    }
    assert!(!same_string(r#""abc""#, r#""abd""#));
    assert!(
        !same_string(r#""é""#, r#""è""#),
        "parted inside a character"
    );
    assert!(!same_string(r#""\u00e9""#, r#""è""#));
    assert!(!same_string(r#""ab""#, r#""abc""#));
    assert!(!same_string(r#""\ud83d\ude00""#, r#""😁""#));
    assert!(same_string(r#""\ud83d\ude00""#, r#""😀""#));
}

#[test]
fn a_list_a_step_returns_is_held_and_an_echo_spaced_otherwise_changes_nothing() {
    let items: Vec<Value> = (0..HELD_FIELD_BYTES / 16)
        .map(|i| json!({"i": i, "s": "é"}))
        .collect();
    let mut run = Returns::start(WRITE_THEN_READ, r#"{"n": 0}"#);
    run.returns("write", &json!({"items": items}).to_string());
    let held = run.machine.held_text("items").expect("held");
    assert_eq!(serde_json::from_str::<Value>(held).unwrap(), json!(items));
    assert_eq!(
        run.machine.state()["items"],
        json!([]),
        "a list's placeholder"
    );
    // The next step returns the whole state, spaced and escaped otherwise.
    let echoed = serde_json::to_string_pretty(&json!({"items": items, "n": 1})).unwrap();
    run.returns("read", &echoed.replace('é', "\\u00e9"));
    assert_eq!(run.changed(), ["items", "n"], "the echo changed only n");
    assert_eq!(run.machine.status(), RunStatus::Completed);
}
