//! `--watch` and `weft watch`: waves, nodes, loop iterations and a
//! progress bar for map items, drawn on stderr as the run's events arrive,
//! with the model output of its steps as it streams
//! ([`super::stream_text`]).

use super::terminal::{err, out};

use indicatif::{ProgressBar, ProgressStyle};
use tokio_stream::StreamExt;
use weft_client::{Client, ClientError, Event, READ_PATIENCE, RunEvent, RunInfo};
use weft_proto::events::Redispatch;

/// Follows a run from event `from` until it ends or waits for a human,
/// drawing its progress (or, with `json`, printing each event's JSON form
/// on its own line of stdout). A feed that breaks off (a coordinator
/// restarting, a leader changing) is picked up again where it stopped,
/// for up to [`READ_PATIENCE`].
pub async fn follow(
    client: &Client,
    run_id: &str,
    from: u64,
    json: bool,
) -> Result<RunInfo, ClientError> {
    // The stream from its start when the events are (a run watched
    // again after a pause has shown its stream so far).
    let stream = (from == 0).then(|| {
        tokio::spawn(super::stream_text::show(
            client.clone(),
            run_id.to_owned(),
            json,
        ))
    });
    let followed = follow_events(client, run_id, from, json).await;
    if let Some(stream) = stream {
        match &followed {
            // An ended run's stream ends by itself once it is all shown.
            Ok(info) if info.status.is_terminal() => {
                let _ = tokio::time::timeout(READ_PATIENCE, stream).await;
            }
            _ => stream.abort(),
        }
    }
    followed
}

async fn follow_events(
    client: &Client,
    run_id: &str,
    from: u64,
    json: bool,
) -> Result<RunInfo, ClientError> {
    let mut bar: Option<ProgressBar> = None;
    let mut next = from;
    let mut broken: Option<std::time::Instant> = None;
    'feed: loop {
        let mut events = match client.watch(run_id, next).await {
            Ok(events) => events,
            Err(error) => {
                wait_out(error, &mut broken).await?;
                continue;
            }
        };
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    wait_out(error, &mut broken).await?;
                    continue 'feed;
                }
            };
            broken = None;
            next = event.seq + 1;
            // A pause long answered, or an end a retry undid (a log read
            // from its start), is passed: the follow stops where the run
            // waits or ends now.
            let stop = event.ends_or_pauses() && rests_at(client, run_id, event.seq).await;
            if json {
                out!("{}", event.body);
            } else {
                show(&event, &mut bar);
            }
            if stop {
                break 'feed;
            }
        }
        // The stream ended: at the run's end, or at an end a retry has
        // undone since (watch again from there).
        if next == 0 || rests_at(client, run_id, next - 1).await {
            break;
        }
    }
    if let Some(bar) = bar.take() {
        bar.finish_and_clear();
    }
    client.get(run_id).await
}

/// Whether the run waits for a person or has ended now, with nothing
/// logged after event `seq` (the pause or end at `seq` is the current one).
async fn rests_at(client: &Client, run_id: &str, seq: u64) -> bool {
    use weft_client::RunStatus;
    match client.status(run_id).await {
        Ok(info) => {
            let resting = info.status == RunStatus::Waiting || info.status.is_terminal();
            resting && info.event_count <= seq + 1
        }
        // Unknown: stop, as at a pause or an end.
        Err(_) => true,
    }
}

/// Waits a moment after a broken feed, or gives the error back when it is
/// not one to wait out (or has lasted past the patience).
async fn wait_out(
    error: ClientError,
    broken: &mut Option<std::time::Instant>,
) -> Result<(), ClientError> {
    let since = *broken.get_or_insert_with(std::time::Instant::now);
    match error {
        ClientError::Unreachable { .. } | ClientError::Unavailable(_)
            if since.elapsed() < READ_PATIENCE =>
        {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            Ok(())
        }
        other => Err(other),
    }
}

fn show(event: &Event, bar: &mut Option<ProgressBar>) {
    let line = match &event.event {
        RunEvent::WaveStarted { step, nodes } => Some(format!("wave {step}: {}", nodes.join(", "))),
        RunEvent::NodeFinished {
            node, item: None, ..
        } => Some(format!("  ✓ {node}")),
        RunEvent::NodeCached {
            node,
            item: None,
            stored_by,
            age_ms,
        } => Some(format!(
            "  ≡ {node} answered from the cache (kept {} s ago by {stored_by})",
            age_ms / 1000
        )),
        RunEvent::NodeNotCached { node, reason, .. } => {
            Some(format!("  ≠ {node} not cached: {reason}"))
        }
        RunEvent::NodeFailed { node, error, .. } => Some(format!("  ✗ {node}: {error}")),
        RunEvent::NodeRetrying {
            node,
            next_attempt,
            error,
            ..
        } => Some(format!("  ↻ {node} (attempt {next_attempt}): {error}")),
        RunEvent::NodeSkipped { node } => Some(format!("  – {node} skipped")),
        RunEvent::RunRetried { by } => {
            Some(format!("  ↻ retried by {by}: the failed wave runs again"))
        }
        RunEvent::CancelRequested { by } => Some(format!("  ⊘ cancelled by {by}")),
        RunEvent::TaskUnhosted { node, needs } => Some(format!(
            "  … {node} waits: no connected worker hosts {needs}"
        )),
        RunEvent::TaskRedispatched {
            node,
            attempt,
            item,
            reason,
            worker,
        } => {
            let why = match (reason, worker) {
                (Redispatch::WorkerLost, Some(worker)) => format!("its worker {worker} was lost"),
                (Redispatch::WorkerLost, None) => "its worker was lost".to_owned(),
                (Redispatch::CoordinatorRestarted, _) => {
                    "the coordinator that sent it stopped".to_owned()
                }
                (Redispatch::Other, _) => "the coordinator says so".to_owned(),
            };
            let item = item.map(|i| format!(" of item {i}")).unwrap_or_default();
            Some(format!(
                "  ⇄ {node}{item} (attempt {attempt}) sent again: {why}"
            ))
        }
        // A map's items wait in its progress bar, not a line each.
        RunEvent::TaskThrottled {
            node,
            item: None,
            limit,
            wait_ms,
        } => Some(match wait_ms {
            Some(ms) => format!("  ⧗ {node} waits for limit '{limit}' (about {ms} ms)"),
            None => format!("  ⧗ {node} waits for limit '{limit}' (a call in flight to end)"),
        }),
        RunEvent::WaitingForInput { node, prompt, .. } => {
            Some(format!("  ? {node} waits for input: {prompt}"))
        }
        RunEvent::LoopReset { from, head } => Some(format!("  ↺ {from} → {head}")),
        RunEvent::MessageSent { from, to, .. } => Some(format!("  ✉ {from} → {to}")),
        RunEvent::LoopIteration {
            node,
            iteration,
            max_iterations,
            done,
            reason,
        } => {
            let verdict = if *done { "done" } else { "again" };
            let said = reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            Some(format!(
                "  ↻ {node} iteration {iteration}/{max_iterations} {verdict}{said}"
            ))
        }
        RunEvent::MapItemFinished {
            node, done, total, ..
        } => {
            let (done, total) = (*done as u64, *total as u64);
            let progress = bar.get_or_insert_with(|| {
                let progress = ProgressBar::new(total);
                let style = ProgressStyle::with_template("  {msg} [{bar:30}] {pos}/{len} items")
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                progress.set_style(style.progress_chars("=> "));
                progress.set_message(node.to_string());
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
            Some(progress) if !progress.is_hidden() => {
                progress.println(super::terminal::for_terminal(&line))
            }
            _ => err!("{line}"),
        }
    }
}
