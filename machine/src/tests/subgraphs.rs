//! SPEC 3: `subgraph` nodes run their graph as a child run; input and
//! output mapped by name.

use serde_json::{Value, json};

use super::*;

const PARENT: &str = r#"
state:
  topic: { type: string }
  notes: { type: string, default: "" }
  summary: { type: string, default: "" }
nodes:
  research:
    kind: subgraph
    start: true
    graph: research.yaml
    input_map: { topic: subject }
    output_map: { findings: notes }
    next: after
  after: { kind: task, handler: after }
"#;

fn research(input: Map<String, Value>) -> Result<Map<String, Value>, String> {
    let subject = input["subject"].as_str().unwrap().to_owned();
    Ok(obj(
        json!({"subject": subject, "findings": format!("on {subject}"), "scratch": 1}),
    ))
}

#[test]
fn input_and_output_are_mapped_and_child_only_fields_stay_in_the_child() {
    let h = Harness::new(PARENT, json!({"topic": "weft"}))
        .child("research.yaml", research)
        .on("after", |state, _, _| {
            Ok(json!({"summary": state["notes"]}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    let (node, graph, input) = &h.started_children[0];
    assert_eq!(
        (node.as_str(), graph.as_str()),
        ("research", "research.yaml")
    );
    assert_eq!(Value::Object(input.clone()), json!({"subject": "weft"}));
    assert_eq!(h.state()["notes"], json!("on weft"));
    assert_eq!(h.state()["summary"], json!("on weft"));
    assert!(
        h.state().get("scratch").is_none(),
        "child-only fields do not leak"
    );
    assert!(h.state().get("findings").is_none());
    assert!(h.events.iter().any(|e| matches!(
        e,
        RunEvent::SubgraphStarted { node, run_id } if node == "research" && run_id == "child-1"
    )));
}

#[test]
fn without_maps_fields_of_the_same_name_go_in_and_come_back() {
    let yaml = r#"
state:
  topic: { type: string }
  summary: { type: string, default: "" }
nodes:
  inner: { kind: subgraph, start: true, graph: inner.yaml }
"#;
    let h = Harness::new(yaml, json!({"topic": "weft"}))
        .child("inner.yaml", |input| {
            Ok(obj(
                json!({"topic": input["topic"], "summary": "short", "private": true}),
            ))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["summary"], json!("short"));
    assert!(h.state().get("private").is_none());
}

#[test]
fn a_failing_child_fails_the_node_and_its_fallback_applies() {
    let failing = |_| Err("child run run-9 failed: node 'x' failed".to_owned());
    let h = Harness::new(PARENT, json!({"topic": "weft"}))
        .child("research.yaml", failing)
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert!(
        h.error_text()
            .contains("subgraph_failed: child run run-9 failed"),
        "{}",
        h.error_text()
    );
    let yaml = PARENT.replace(
        "    next: after\n",
        "    next: after\n    fallback: rescue\n",
    ) + "  rescue: { kind: task, handler: rescue }\n";
    let h = Harness::new(&yaml, json!({"topic": "weft"}))
        .child("research.yaml", failing)
        .on("rescue", |_, _, _| Ok(json!({"summary": "rescued"})))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.state()["summary"], json!("rescued"));
    assert_eq!(h.runs_of("after"), 0);
}

#[test]
fn a_failed_child_is_retried_with_a_new_child_per_the_nodes_retry() {
    let yaml = PARENT.replace("    next: after\n", "    next: after\n    retry: 3\n");
    let mut children = 0;
    let h = Harness::new(&yaml, json!({"topic": "weft"}))
        .child("research.yaml", move |input| {
            children += 1;
            if children < 3 {
                return Err(format!("child {children} failed"));
            }
            research(input)
        })
        .on("after", |state, _, _| {
            Ok(json!({"summary": state["notes"]}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{}", h.error_text());
    assert_eq!(h.started_children.len(), 3);
    assert_eq!(h.state()["summary"], json!("on weft"));
    let retries: Vec<(u32, String)> = h
        .events
        .iter()
        .filter_map(|e| match e {
            RunEvent::NodeRetrying {
                next_attempt,
                error,
                ..
            } => Some((*next_attempt, error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        retries,
        [(2, "child 1 failed".into()), (3, "child 2 failed".into())]
    );
    // Out of attempts, the failure names the last one.
    let h = Harness::new(&yaml, json!({"topic": "weft"}))
        .child("research.yaml", |_| Err("always".to_owned()))
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    assert_eq!(h.started_children.len(), 3);
    assert!(h.error_text().contains("attempt 3"), "{}", h.error_text());
}

#[test]
fn stopping_the_parent_cancels_its_running_child() {
    let yaml = r#"
nodes:
  inner: { kind: subgraph, start: true, graph: inner.yaml }
"#;
    let mut h = Harness::new(yaml, json!({}));
    let effects = h.machine.start();
    // The child starts and is still running when the parent is cancelled.
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::StartChild { .. }))
    );
    h.send(Input::ChildStarted {
        node: "inner".into(),
        run_id: "run-child".into(),
    })
    .unwrap();
    h.send(Input::Cancel { by: None }).unwrap();
    assert_eq!(h.status(), RunStatus::Cancelled);
    assert_eq!(h.cancelled_children, ["run-child".to_owned()]);
}
