//! How a run's result is shown: the one JSON object of `--json`, or a
//! status line and the state for people.

use super::terminal::{err, out};

use serde_json::{Map, Value};
use weft_client::{RunInfo, RunStatus};

use super::exit;

/// The `--json` object: `run_id`, `status`, `state`, and `error`,
/// `waiting`, `unhosted` and `children` only when they apply.
pub fn json_object(info: &RunInfo) -> Value {
    let mut object = Map::new();
    object.insert("run_id".into(), Value::from(info.run_id.as_str()));
    object.insert("status".into(), Value::from(info.status.name()));
    object.insert("state".into(), info.state.clone());
    if let Some(error) = &info.error {
        object.insert(
            "error".into(),
            serde_json::to_value(error).unwrap_or(Value::Null),
        );
    }
    if info.status == RunStatus::Waiting && !info.waiting.is_empty() {
        object.insert(
            "waiting".into(),
            serde_json::to_value(&info.waiting).unwrap_or(Value::Null),
        );
    }
    if !info.unhosted.is_empty() {
        object.insert(
            "unhosted".into(),
            serde_json::to_value(&info.unhosted).unwrap_or(Value::Null),
        );
    }
    if let Some(from) = &info.forked_from {
        object.insert(
            "forked_from".into(),
            serde_json::to_value(from).unwrap_or(Value::Null),
        );
    }
    if !info.children.is_empty() {
        object.insert(
            "children".into(),
            serde_json::to_value(&info.children).unwrap_or(Value::Null),
        );
    }
    if !info.usage.is_empty() {
        object.insert(
            "usage".into(),
            serde_json::to_value(&info.usage).unwrap_or(Value::Null),
        );
    }
    Value::Object(object)
}

/// Prints the result and returns the exit status.
pub fn show(info: &RunInfo, json: bool) -> u8 {
    if json {
        out!("{}", json_object(info));
    } else {
        let status = info.status.name();
        match &info.error {
            // "cancelled: Cancelled: the run was cancelled" says it thrice.
            Some(_) if info.status == RunStatus::Cancelled => err!("run {} {status}", info.run_id),
            Some(error) => err!(
                "run {} {status}: {}: {}",
                info.run_id,
                error.kind,
                error.message
            ),
            None => err!("run {} {status}", info.run_id),
        }
        for waiting in &info.waiting {
            err!(
                "  waiting: {} ({}): {}",
                waiting.node,
                waiting.kind,
                waiting.prompt
            );
        }
        for wait in &info.unhosted {
            let tasks = if wait.tasks == 1 {
                String::new()
            } else {
                format!(" ({} tasks)", wait.tasks)
            };
            err!(
                "  waits for a worker: node '{}' needs {}{tasks}",
                wait.node,
                wait.needs
            );
        }
        if let Some(from) = &info.forked_from {
            err!(
                "  forked from run {} {}",
                from.run,
                place_in_words(from.at())
            );
        }
        for child in &info.children {
            err!(
                "  child run {} (subgraph node '{}')",
                child.run_id,
                child.node
            );
        }
        for answer in &info.answers {
            err!("  {}: {}", answer.node, answer.describe());
        }
        if !info.usage.is_empty() {
            err!("  models: {}", describe_usage(&info.usage));
        }
        out!(
            "{}",
            serde_json::to_string_pretty(&info.state).unwrap_or_default()
        );
    }
    exit_status(info.status)
}

/// The exit status for a run's status.
pub fn exit_status(status: RunStatus) -> u8 {
    match status {
        RunStatus::Completed | RunStatus::Running => exit::OK,
        RunStatus::Waiting => exit::WAITING,
        RunStatus::Failed | RunStatus::Cancelled => exit::FAILED,
    }
}

/// A run's model usage in one line: "3 calls, 1,200 prompt tokens (512
/// cached) and 90 completion tokens, cost 0.0041".
pub fn describe_usage(usage: &weft_proto::types::Usage) -> String {
    let calls = if usage.calls == 1 { "call" } else { "calls" };
    let cached = if usage.cached_tokens > 0 {
        format!(" ({} cached)", usage.cached_tokens)
    } else {
        String::new()
    };
    let cost = usage
        .cost
        .map(|cost| format!(", cost {cost:.4}"))
        .unwrap_or_default();
    format!(
        "{} {calls}, {} prompt tokens{cached} and {} completion tokens{cost}",
        usage.calls, usage.prompt_tokens, usage.completion_tokens
    )
}

/// Where a place in a run's history is, in words.
pub(super) fn place_in_words(at: weft_client::HistoryPoint) -> String {
    match (at.step, at.point) {
        (0, 0) => "at its input (before any wave)".to_owned(),
        (step, 0) => format!("after wave {step}"),
        (step, _) => format!("at {at} (within wave {})", step + 1),
    }
}

/// What the wave at work had done by each point of `points` (a point
/// within a wave names the events its run's log held then), read from
/// `events`, the run's log from its start up to the last point at least:
/// `fan: 2 of 4 items done; refine: iteration 1 done`.
pub(super) fn point_notes(events: &[weft_client::Event], points: &[u64]) -> Vec<String> {
    points
        .iter()
        .map(|&point| {
            let before = events.iter().take_while(|e| e.seq < point);
            // The wave at work: its events since it started.
            let wave: Vec<&weft_client::Event> = before.collect();
            let start = wave
                .iter()
                .rposition(|e| e.kind == "wave_started")
                .map_or(0, |at| at + 1);
            let mut parts: Vec<(String, String)> = Vec::new();
            let mut set = |node: &str, what: String| match parts.iter_mut().find(|(n, _)| n == node)
            {
                Some((_, said)) => *said = what,
                None => parts.push((node.to_owned(), what)),
            };
            for event in &wave[start..] {
                let body = &event.body;
                let node = body["node"].as_str().unwrap_or_default();
                match event.kind.as_str() {
                    "map_item_finished" => set(
                        node,
                        format!("{} of {} items done", body["done"], body["total"]),
                    ),
                    "loop_iteration" => set(node, format!("iteration {} done", body["iteration"])),
                    "subgraph_started" => set(node, "child run started".to_owned()),
                    "waiting_for_input" => set(node, "waiting for an answer".to_owned()),
                    "input_received" => set(node, "answered".to_owned()),
                    _ => {}
                }
            }
            parts
                .into_iter()
                .map(|(node, what)| format!("{node}: {what}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .collect()
}
