//! SPEC 5: teammate inboxes between the items of a map, held by the run.
//! A flagged step's seat reaches the harness's handlers as `_team` in
//! their scope (`me`, `members`, `inbox`).

use serde_json::{Value, json};

use super::*;

/// Each item says hello to every other member, then listens (looping
/// with `_next`) until it has heard from all of them.
fn chatter(limit: u32) -> String {
    format!(
        r#"
settings: {{ max_concurrency: {limit} }}
state:
  names: {{ type: array, default: [] }}
nodes:
  fan:
    kind: map
    start: true
    over: "{{{{ names }}}}"
    as: name
    branch: talk
    output_key: heard
    collect_into: all_heard
  talk: {{ kind: task, handler: talk, teammates: true, next: listen }}
  listen: {{ kind: task, handler: listen, teammates: true }}
"#
    )
}

/// A map `fan` over `names`, one slot per `concurrency`, whose branch
/// starts at `step`; `nodes` are the branch's nodes (YAML lines). Items
/// write `got`, collected into `got_all`.
fn team_map(concurrency: u32, nodes: &str) -> String {
    format!(
        r#"
settings: {{ max_concurrency: {concurrency} }}
state:
  names: {{ type: array, default: [] }}
  to: {{ type: string, default: "" }}
nodes:
  fan:
    kind: map
    start: true
    over: "{{{{ names }}}}"
    as: name
    branch: step
    output_key: got
    collect_into: got_all
{nodes}"#
    )
}

fn seat(scope: &Map<String, Value>) -> Value {
    scope
        .get("_team")
        .cloned()
        .expect("a flagged step has a seat")
}

fn talk(scope: &Map<String, Value>) -> Value {
    let seat = seat(scope);
    let me = seat["me"].as_str().unwrap().to_owned();
    let sends: Vec<Value> = seat["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.as_str() != Some(&me))
        .map(|m| json!({"to": m, "content": {"hello_from": scope["name"]}}))
        .collect();
    json!({"_send": sends, "heard_so_far": []})
}

/// Adds what arrived to `heard_so_far`; ends the chain once every other
/// member was heard.
fn listen(state: &Map<String, Value>, scope: &Map<String, Value>) -> Value {
    let seat = seat(scope);
    let mut heard: Vec<Value> = state["heard_so_far"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for message in seat["inbox"].as_array().unwrap() {
        heard.push(message["content"]["hello_from"].clone());
    }
    let others = seat["members"].as_array().unwrap().len() - 1;
    if heard.len() < others {
        return json!({"heard_so_far": heard, "_next": "listen"});
    }
    let mut names: Vec<String> = heard
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    names.sort();
    json!({"heard": names})
}

fn sent(h: &Harness) -> Vec<(String, String)> {
    h.events
        .iter()
        .filter_map(|e| match e {
            RunEvent::MessageSent { from, to, .. } => Some((from.clone(), to.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn every_item_hears_exactly_the_messages_sent_to_it() {
    let h = Harness::new(&chatter(8), json!({"names": ["ann", "bob", "cy"]}))
        .on("talk", |_, scope, _| Ok(talk(scope)))
        .on("listen", |state, scope, _| Ok(listen(state, scope)))
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{:?}", h.machine.error());
    assert_eq!(
        h.state()["all_heard"],
        json!([["bob", "cy"], ["ann", "cy"], ["ann", "bob"]])
    );
    let mut pairs = sent(&h);
    pairs.sort();
    assert_eq!(pairs.len(), 6);
    assert_eq!(pairs[0], ("fan/0".to_owned(), "fan/1".to_owned()));
    let shown = h.events.iter().find_map(|e| match e {
        RunEvent::MessageSent { content, bytes, .. } => Some((content.clone(), *bytes)),
        _ => None,
    });
    assert_eq!(shown, Some((Some(json!({"hello_from": "ann"})), 20)));
}

#[test]
fn a_message_to_an_item_that_has_not_started_waits_in_its_inbox() {
    // One slot: items run one after another, so item 0's messages reach
    // items 1 and 2 before they start.
    let yaml = team_map(
        1,
        "  step: { kind: task, handler: step, teammates: true }\n",
    );
    let h = Harness::new(&yaml, json!({"names": [0, 1, 2]}))
        .on("step", |_, scope, _| {
            let seat = seat(scope);
            let got = seat["inbox"].clone();
            let sends = if seat["me"] == "fan/0" {
                json!([{"to": "fan/1", "content": "early"}, {"to": "fan/2", "content": "early"}])
            } else {
                json!([])
            };
            Ok(json!({"got": got, "_send": sends}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{:?}", h.machine.error());
    let early = json!([{"seq": 1, "from": "fan/0", "content": "early"}]);
    assert_eq!(h.state()["got_all"], json!([[], early, early]));
}

#[test]
fn unflagged_steps_and_lone_items_get_no_team() {
    let yaml = team_map(
        8,
        "  step: { kind: task, handler: step, teammates: true, next: plain }
  plain: { kind: task, handler: plain }
",
    );
    let h = Harness::new(&yaml, json!({"names": ["a", "b"]}))
        .on("step", |_, scope, _| {
            Ok(json!({"seen": scope.contains_key("_team")}))
        })
        .on("plain", |_, scope, _| {
            Ok(json!({"got": scope.contains_key("_team")}))
        })
        .run();
    assert_eq!(h.state()["got_all"], json!([false, false]));
    assert!(
        h.dispatched
            .iter()
            .filter(|s| s.node == "step")
            .all(|s| s.team.is_some())
    );
    // One item is no team.
    let h = Harness::new(&yaml, json!({"names": ["a"]}))
        .on("step", |_, scope, _| {
            Ok(json!({"seen": scope.contains_key("_team")}))
        })
        .on("plain", |_, _, _| Ok(json!({"got": 1})))
        .run();
    assert_eq!(h.status(), RunStatus::Completed);
    assert!(h.dispatched.iter().all(|s| s.team.is_none()));
}

#[test]
fn sending_without_a_team_to_a_stranger_or_to_a_full_inbox_fails_the_step() {
    let yaml = team_map(
        8,
        "  step: { kind: task, handler: send, teammates: true }\n",
    );
    let sender = |state: &Map<String, Value>, _: &Map<String, Value>, _| {
        let to = state["to"].clone();
        Ok(json!({"got": 1, "_send": [{"to": to, "content": 1}, {"to": to, "content": 2}]}))
    };
    let h = Harness::new(&yaml, json!({"names": [1, 2], "to": "fan/9"}))
        .on("step", sender)
        .run();
    assert_eq!(h.status(), RunStatus::Failed);
    let error = h.machine.error().unwrap().to_string();
    assert!(
        error.contains("`_send`: 'fan/9' is not a member of this team (members: fan/0, fan/1)"),
        "{error}"
    );
    let limits = RunLimits {
        max_inbox_messages: 1,
        ..RunLimits::default()
    };
    let h = Harness::with_limits(&yaml, json!({"names": [1, 2], "to": "fan/1"}), limits)
        .on("step", sender)
        .run();
    let error = h.machine.error().unwrap().to_string();
    assert!(
        error.contains("the inbox of 'fan/1' holds 1 messages, as many as it may (configuration key max_inbox_messages)"),
        "{error}"
    );
    let unflagged = yaml.replace(", teammates: true", "");
    let h = Harness::new(&unflagged, json!({"names": [1, 2], "to": "fan/1"}))
        .on("step", sender)
        .run();
    let error = h.machine.error().unwrap().to_string();
    assert!(
        error.contains("node 'step' has no team to send to"),
        "{error}"
    );
}

#[test]
fn a_failed_attempt_gives_its_messages_back_to_the_retry() {
    let yaml = team_map(
        1,
        "  step: { kind: task, handler: step, teammates: true, retry: 2 }\n",
    );
    let h = Harness::new(&yaml, json!({"names": [0, 1]}))
        .on("step", |_, scope, attempt| {
            let seat = seat(scope);
            if seat["me"] == "fan/0" {
                return Ok(json!({"got": 0, "_send": [{"to": "fan/1", "content": "hi"}]}));
            }
            if attempt == 1 {
                return Err("flaky".into());
            }
            Ok(json!({"got": seat["inbox"].as_array().unwrap().len()}))
        })
        .run();
    assert_eq!(h.status(), RunStatus::Completed, "{:?}", h.machine.error());
    assert_eq!(h.state()["got_all"], json!([0, 1]));
}

/// A Rust handler's step sends while it runs and takes messages as they
/// come; what it did not read waits for the item's next flagged step.
#[test]
fn a_running_handler_sends_and_receives_live() {
    let yaml = team_map(
        8,
        "  step: { kind: task, handler: chat, teammates: true, next: after }
  after: { kind: script, run: [x], teammates: true }
",
    );
    let mut machine = RunMachine::new(plan(&yaml), obj(json!({"names": [0, 1]}))).unwrap();
    let fx = machine.start();
    let keys: Vec<TaskKey> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Dispatch(spec) => Some(spec.key),
            _ => None,
        })
        .collect();
    assert_eq!(keys.len(), 2);
    let send = |key, to: &str, n| Input::TeamSend {
        key,
        send_id: n,
        message: Outgoing {
            to: to.into(),
            content: json!(n),
        },
    };
    let fx = machine.apply(send(keys[0], "fan/1", 1)).unwrap();
    assert!(fx.contains(&Effect::SendAck {
        key: keys[0],
        send_id: 1,
        error: None
    }));
    assert!(fx.contains(&Effect::Deliver {
        key: keys[1],
        message: TeamMessage {
            seq: 1,
            from: "fan/0".into(),
            content: json!(1)
        }
    }));
    let fx = machine.apply(send(keys[0], "fan/7", 2)).unwrap();
    assert!(matches!(
        &fx[..],
        [Effect::SendAck { error: Some(e), .. }] if e.contains("'fan/7' is not a member")
    ));
    machine.apply(send(keys[0], "fan/1", 3)).unwrap();
    // Item 1's handler read one of the two; the other reaches its next
    // flagged step.
    let fx = machine
        .apply(Input::TaskSucceeded {
            key: keys[1],
            output: NodeOutput {
                read: vec![1],
                ..NodeOutput::default()
            },
        })
        .unwrap();
    let after = fx
        .iter()
        .find_map(|e| match e {
            Effect::Dispatch(spec) if spec.node == "after" => spec.team.clone(),
            _ => None,
        })
        .expect("the next step is dispatched with a seat");
    assert_eq!(after.me, "fan/1");
    assert_eq!(after.inbox.len(), 1);
    assert_eq!(after.inbox[0].content, json!(3));
    // A send from a task that is not running is refused.
    let fx = machine.apply(send(keys[1], "fan/0", 4)).unwrap();
    assert!(matches!(&fx[..], [Effect::SendAck { error: Some(_), .. }]));
}

#[test]
fn inboxes_survive_a_restart() {
    let yaml = team_map(1, "  step: { kind: script, run: [x], teammates: true }\n");
    let plan = plan(&yaml);
    let mut machine = RunMachine::new(plan.clone(), obj(json!({"names": [0, 1]}))).unwrap();
    let first = match &machine.start()[..] {
        [.., Effect::Dispatch(spec)] => spec.key,
        other => panic!("{other:?}"),
    };
    let output =
        NodeOutput::from_json(json!({"got": 0, "_send": [{"to": "fan/1", "content": "kept"}]}))
            .unwrap();
    let fx = machine
        .apply(Input::TaskSucceeded { key: first, output })
        .unwrap();
    assert!(fx.iter().any(
        |e| matches!(e, Effect::Dispatch(s) if s.team.as_ref().is_some_and(|t| t.inbox.len() == 1))
    ));
    // Stored while item 1's step is in flight, then continued.
    let json = machine.progress_json_without_state().unwrap();
    let mut progress: Progress = serde_json::from_str(&json).unwrap();
    progress.set_state(machine.state().as_ref().clone());
    let mut again = RunMachine::restore(plan, progress).unwrap();
    let resent = again.resume();
    let seat = resent
        .iter()
        .find_map(|e| match e {
            Effect::Dispatch(spec) => spec.team.clone(),
            _ => None,
        })
        .expect("the step in flight is sent again with its seat");
    assert_eq!(seat.inbox[0].content, json!("kept"));
}
