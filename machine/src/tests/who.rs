//! Who did what: the owner in the first event, answers checked against
//! `approvers:` and recorded with who gave them, and who cancelled or
//! retried.

use serde_json::json;

use super::*;

const REVIEWED: &str = "
nodes:
  draft: { kind: task, handler: draft, start: true, next: sign_off }
  sign_off:
    kind: approval
    approvers: [alice, \"role:admin\"]
    next: ask
  ask: { kind: input, output_key: note, end: true }
";

fn caller(name: &str, role: &str) -> Option<Caller> {
    Some(Caller {
        name: name.into(),
        role: role.into(),
    })
}

fn answer(node: &str, value: serde_json::Value, by: Option<Caller>) -> Input {
    Input::Answered {
        node: node.into(),
        answer: HumanAnswer {
            value,
            comment: None,
            by,
        },
    }
}

fn reviewed() -> Harness {
    let mut h = Harness::new(REVIEWED, json!({})).on("draft", |_, _, _| Ok(json!({"text": "x"})));
    h.machine.set_owner(Owner {
        namespace: "team-a".into(),
        submitted_by: "ci".into(),
        priority: None,
        budgets: Vec::new(),
        no_cache: false,
    });
    h.run()
}

#[test]
fn the_first_event_names_the_submitter_and_namespace() {
    let h = reviewed();
    assert_eq!(
        h.events.first(),
        Some(&RunEvent::RunSubmitted {
            by: "ci".into(),
            namespace: "team-a".into(),
            forked_from: None,
        })
    );
}

#[test]
fn only_the_approvers_may_answer_and_the_answer_records_who() {
    let mut h = reviewed();
    for by in [caller("bob", "operator"), None] {
        let refused = h
            .send(answer("sign_off", json!("approve"), by))
            .unwrap_err();
        assert!(matches!(refused, Rejected::NotApprover { .. }), "{refused}");
    }
    let refused = h
        .send(answer(
            "sign_off",
            json!("approve"),
            caller("bob", "operator"),
        ))
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "'bob' is not among the approvers of node 'sign_off' (alice, role:admin)"
    );
    assert_eq!(
        h.status(),
        RunStatus::Waiting,
        "a refused answer changes nothing"
    );
    h.send(answer(
        "sign_off",
        json!("approve"),
        caller("root", "admin"),
    ))
    .unwrap();
    assert!(h.events.contains(&RunEvent::InputReceived {
        node: "sign_off".into(),
        by: Some("root".into())
    }));
    // `ask` names no approvers: anyone who may resume answers it.
    h.send(answer("ask", json!("fine"), caller("bob", "operator")))
        .unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(
        h.machine.answers(),
        [
            Answered {
                node: "sign_off".into(),
                by: "root".into(),
                approved: Some(true)
            },
            Answered {
                node: "ask".into(),
                by: "bob".into(),
                approved: None
            }
        ]
    );
}

#[test]
fn cancel_and_retry_record_who_asked() {
    let mut h = reviewed();
    h.send(Input::Cancel {
        by: Some("ops".into()),
    })
    .unwrap();
    let tail: Vec<&str> = h.events.iter().rev().take(2).map(RunEvent::kind).collect();
    assert_eq!(tail, ["run_finished", "cancel_requested"]);
    assert!(
        h.events
            .contains(&RunEvent::CancelRequested { by: "ops".into() })
    );

    let yaml = "nodes:\n  a: {kind: task, handler: a, start: true, end: true}\n";
    let mut failing = Harness::new(yaml, json!({}))
        .on("a", |_, _, _| Err("boom".into()))
        .run();
    assert_eq!(failing.status(), RunStatus::Failed);
    let _ = failing.send(Input::RetryRun {
        by: Some("ops".into()),
    });
    assert!(
        failing
            .events
            .contains(&RunEvent::RunRetried { by: "ops".into() })
    );
}

#[test]
fn an_answer_without_a_comment_clears_an_earlier_one() {
    let yaml = "
state:
  rounds: { type: integer, default: 0 }
nodes:
  gate: { kind: approval, start: true }
  bump: { kind: task, handler: bump }
edges:
  - { from: gate, to: END, when: \"state.approved\" }
  - { from: gate, to: bump, when: \"!state.approved\" }
  - { from: bump, to: gate, loop: true }
";
    let mut h = Harness::new(yaml, json!({}))
        .on("bump", |_, _, _| Ok(json!({"rounds": 1})))
        .run();
    h.send(Input::Answered {
        node: "gate".into(),
        answer: HumanAnswer {
            value: json!("reject"),
            comment: Some("too long".into()),
            by: None,
        },
    })
    .unwrap();
    assert_eq!(h.state()["approved_comment"], "too long");
    assert_eq!(h.status(), RunStatus::Waiting, "asked again after the bump");
    h.send(answer("gate", json!("approve"), None)).unwrap();
    assert_eq!(h.status(), RunStatus::Completed);
    assert_eq!(h.state()["approved"], true);
    assert_eq!(
        h.state()["approved_comment"],
        "",
        "the rejection's reason is gone"
    );
}
