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
