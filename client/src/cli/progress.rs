//! `--watch` and `weft watch`: waves, nodes and a progress bar for map
//! items, drawn on stderr as the run's events arrive.

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use tokio_stream::StreamExt;
use weft_client::{Client, ClientError, Event, RunInfo};

/// Follows a run from event `from` until it ends or waits for a human.
pub async fn follow(client: &Client, run_id: &str, from: u64) -> Result<RunInfo, ClientError> {
    let mut events = client.watch(run_id, from).await?;
    let mut bar: Option<ProgressBar> = None;
    while let Some(event) = events.next().await {
        let event = event?;
        let stop = matches!(event.kind.as_str(), "run_finished" | "waiting_for_input");
        show(&event, &mut bar);
        if stop {
            break;
        }
    }
    if let Some(bar) = bar.take() {
        bar.finish_and_clear();
    }
    client.get(run_id).await
}

fn show(event: &Event, bar: &mut Option<ProgressBar>) {
    let text = |key: &str| {
        event
            .body
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let line = match event.kind.as_str() {
        "wave_started" => {
            let nodes: Vec<String> = event.body["nodes"]
                .as_array()
                .map(|n| {
                    n.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Some(format!("wave {}: {}", event.body["step"], nodes.join(", ")))
        }
        "node_finished" if event.body["item"].is_null() => Some(format!("  ✓ {}", text("node"))),
        "node_failed" => Some(format!("  ✗ {}: {}", text("node"), text("error"))),
        "node_retrying" => Some(format!(
            "  ↻ {} (attempt {}): {}",
            text("node"),
            event.body["next_attempt"],
            text("error")
        )),
        "node_skipped" => Some(format!("  – {} skipped", text("node"))),
        "task_unhosted" => Some(format!(
            "  … {} waits: no connected worker hosts {}",
            text("node"),
            text("needs")
        )),
        "waiting_for_input" => Some(format!(
            "  ? {} waits for input: {}",
            text("node"),
            text("prompt")
        )),
        "loop_reset" => Some(format!("  ↺ {} → {}", text("from"), text("head"))),
        "map_item_finished" => {
            let total = event.body["total"].as_u64().unwrap_or(0);
            let done = event.body["done"].as_u64().unwrap_or(0);
            let progress = bar.get_or_insert_with(|| {
                let progress = ProgressBar::new(total);
                let style = ProgressStyle::with_template("  {msg} [{bar:30}] {pos}/{len} items")
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                progress.set_style(style.progress_chars("=> "));
                progress.set_message(text("node"));
                progress
            });
            progress.set_position(done);
            if done >= total {
                progress.finish_and_clear();
                *bar = None;
            }
            None
        }
        _ => None,
    };
    if let Some(line) = line {
        // A hidden bar (stderr is not a terminal) would swallow the line.
        match bar {
            Some(progress) if !progress.is_hidden() => progress.println(line),
            _ => eprintln!("{line}"),
        }
    }
}
