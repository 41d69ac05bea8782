//! A run's JSON form in the API: the keys `weft status --json` prints
//! (`run_id`, `status`, `state`, and `error`, `waiting`, `unhosted`,
//! `children` when they apply), with what a page shows besides: the
//! graph's name, namespace, who submitted and answered, when it started
//! and ended, how many events it has, and its trace.

use serde_json::{Map, Value, json};
use weft_proto::events::{error_from_wire, status_from_wire};
use weft_proto::v1 as pb;

use crate::config::HttpConfig;

/// `info` as the API shows it; `state` only when it was asked for.
pub(super) fn run_json(info: pb::RunInfo, settings: &HttpConfig) -> Value {
    let mut object = Map::new();
    let status = status_from_wire(info.status);
    object.insert("run_id".into(), info.run_id.into());
    object.insert("status".into(), status.name().into());
    object.insert("graph".into(), info.graph_name.into());
    object.insert("namespace".into(), info.namespace.into());
    object.insert("submitted_by".into(), info.submitted_by.into());
    object.insert("created_unix_ms".into(), info.created_unix_ms.into());
    if let Some(ended) = info.ended_unix_ms {
        object.insert("ended_unix_ms".into(), ended.into());
    }
    object.insert("event_count".into(), info.event_count.into());
    if !info.state_json.is_empty() {
        // The coordinator wrote it: it parses. Were it not to, the text
        // is shown rather than nothing.
        let state = serde_json::from_str(&info.state_json)
            .unwrap_or_else(|_| Value::String(info.state_json));
        object.insert("state".into(), state);
    }
    if let Some(error) = info.error {
        let error = error_from_wire(error);
        object.insert("error".into(), json!(error));
    }
    let list = |items: Vec<Value>| (!items.is_empty()).then_some(Value::Array(items));
    let waiting = info
        .waiting
        .into_iter()
        .map(|w| json!({"node": w.node, "kind": w.kind, "prompt": w.prompt}))
        .collect();
    let unhosted = info
        .unhosted
        .into_iter()
        .map(|w| json!({"node": w.node, "needs": w.needs, "tasks": w.tasks}))
        .collect();
    let children = info
        .children
        .into_iter()
        .map(|c| json!({"node": c.node, "run_id": c.run_id}))
        .collect();
    let answers = info
        .answers
        .into_iter()
        .map(|a| {
            let mut answer = json!({"node": a.node, "by": a.by});
            if let Some(approved) = a.approved {
                answer["approved"] = approved.into();
            }
            answer
        })
        .collect();
    for (key, items) in [
        ("waiting", waiting),
        ("unhosted", unhosted),
        ("children", children),
        ("answers", answers),
    ] {
        if let Some(items) = list(items) {
            object.insert(key.into(), items);
        }
    }
    if !info.trace_id.is_empty() {
        if let Some(link) = settings.trace_link(&info.trace_id) {
            object.insert("trace_url".into(), link.into());
        }
        object.insert("trace_id".into(), info.trace_id.into());
    }
    Value::Object(object)
}

/// One event as the API streams it: its `weft watch --json` form with its
/// position (`seq`) and time (`at_unix_ms`) added; `None` for an event
/// of a kind this coordinator does not know.
pub(super) fn event_json(event: pb::RunEvent) -> Option<Value> {
    let (seq, at) = (event.seq, event.at_unix_ms);
    let typed = weft_proto::events::event_from_wire(event)?;
    let mut body = serde_json::to_value(&typed).ok()?;
    if let Value::Object(fields) = &mut body {
        fields.insert("seq".into(), seq.into());
        fields.insert("at_unix_ms".into(), at.into());
    }
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_run_shows_its_question_and_trace_link() {
        let info = pb::RunInfo {
            run_id: "run-1".into(),
            graph_name: "review".into(),
            status: pb::RunStatus::Waiting as i32,
            state_json: r#"{"draft":"hi"}"#.into(),
            waiting: vec![pb::WaitingNode {
                node: "approve".into(),
                kind: "approval".into(),
                prompt: "Ship it?".into(),
            }],
            trace_id: "abc".into(),
            ..Default::default()
        };
        let settings = HttpConfig {
            hosts: Vec::new(),
            trace_url: Some("http://jaeger/trace/{trace_id}".into()),
        };
        let json = run_json(info, &settings);
        assert_eq!(json["status"], "waiting");
        assert_eq!(json["state"]["draft"], "hi");
        assert_eq!(json["waiting"][0]["prompt"], "Ship it?");
        assert_eq!(json["trace_url"], "http://jaeger/trace/abc");
        assert!(json.get("error").is_none() && json.get("children").is_none());
    }

    #[test]
    fn an_event_keeps_its_watch_form_with_its_position() {
        let event = pb::RunEvent {
            seq: 7,
            at_unix_ms: 1000,
            event: Some(pb::run_event::Event::NodeSkipped(pb::NodeSkipped {
                node: "b".into(),
            })),
        };
        let json = event_json(event).unwrap();
        assert_eq!(
            json,
            json!({"type": "node_skipped", "node": "b", "seq": 7, "at_unix_ms": 1000})
        );
    }
}
