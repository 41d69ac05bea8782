//! A run's JSON form in the API: the keys `weft status --json` prints
//! (`run_id`, `status`, `state`, and `error`, `waiting`, `unhosted`,
//! `children` when they apply), with what a page shows besides: the
//! graph's name, namespace, who submitted and answered, when it started
//! and ended, how many events it has, and its trace.

use serde_json::{Map, Value, json};

use crate::access::{RunReport, StoredEvent};
use crate::config::HttpConfig;

/// `report` as the API shows it; `state` only when it was asked for.
pub(super) fn run_json(report: RunReport, settings: &HttpConfig) -> Value {
    let mut object = Map::new();
    object.insert("run_id".into(), report.run_id.to_string().into());
    object.insert("status".into(), report.status.name().into());
    object.insert("graph".into(), report.graph_name.into());
    object.insert("namespace".into(), report.namespace.into());
    object.insert("submitted_by".into(), report.submitted_by.into());
    if let Some(from) = &report.forked_from {
        object.insert(
            "forked_from".into(),
            json!({"run": from.run, "step": from.step, "point": from.point, "at": from.at().to_string()}),
        );
    }
    object.insert("created_unix_ms".into(), report.created_unix_ms.into());
    if let Some(ended) = report.ended_unix_ms {
        object.insert("ended_unix_ms".into(), ended.into());
    }
    object.insert("event_count".into(), report.event_count.into());
    if !report.usage.is_empty() {
        object.insert("usage".into(), json!(report.usage));
    }
    if let Some(state) = report.state_json {
        // The coordinator wrote it: it parses. Were it not to, the text
        // is shown rather than nothing.
        let state = serde_json::from_str(&state).unwrap_or(Value::String(state));
        object.insert("state".into(), state);
    }
    if let Some(error) = report.error {
        object.insert("error".into(), json!(error));
    }
    let list = |items: Vec<Value>| (!items.is_empty()).then_some(Value::Array(items));
    let waiting = report
        .waiting
        .into_iter()
        .map(|w| json!({"node": w.node, "kind": w.kind, "prompt": w.prompt}))
        .collect();
    let unhosted = report
        .unhosted
        .into_iter()
        .map(|w| json!({"node": w.node, "needs": w.needs, "tasks": w.tasks}))
        .collect();
    let children = report
        .children
        .into_iter()
        .map(|(node, run_id)| json!({"node": node.as_str(), "run_id": run_id.as_str()}))
        .collect();
    let answers = report
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
    if !report.trace_id.is_empty() {
        if let Some(link) = settings.trace_link(&report.trace_id) {
            object.insert("trace_url".into(), link.into());
        }
        object.insert("trace_id".into(), report.trace_id.into());
    }
    Value::Object(object)
}

/// One event as the API streams it: its `weft watch --json` form with its
/// position (`seq`) and time (`at_unix_ms`) added.
pub(super) fn event_json(stored: &StoredEvent) -> Value {
    let mut body = serde_json::to_value(&*stored.event).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut body {
        fields.insert("seq".into(), stored.seq.into());
        fields.insert("at_unix_ms".into(), stored.at_unix_ms.into());
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_run_shows_its_question_and_trace_link() {
        let info = RunReport {
            usage: weft_proto::types::Usage::default(),
            run_id: "run-1".into(),
            graph_name: "review".into(),
            status: weft_proto::types::RunStatus::Waiting,
            state_json: Some(r#"{"draft":"hi"}"#.into()),
            input_fields: Vec::new(),
            error: None,
            waiting: vec![crate::access::WaitingNode {
                node: "approve".into(),
                kind: "approval".into(),
                prompt: "Ship it?".into(),
            }],
            event_count: 3,
            created_unix_ms: 1,
            ended_unix_ms: None,
            unhosted: Vec::new(),
            children: Vec::new(),
            namespace: "default".into(),
            submitted_by: "alice".into(),
            forked_from: None,
            answers: Vec::new(),
            trace_id: "abc".into(),
            diagram_svg: None,
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
        let event = StoredEvent {
            seq: 7,
            at_unix_ms: 1000,
            event: std::sync::Arc::new(weft_proto::events::RunEvent::NodeSkipped {
                node: "b".into(),
            }),
        };
        let json = event_json(&event);
        assert_eq!(
            json,
            json!({"type": "node_skipped", "node": "b", "seq": 7, "at_unix_ms": 1000})
        );
    }
}
