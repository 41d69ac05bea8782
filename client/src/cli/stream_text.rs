//! A run's model output as it streams, for `weft watch` and `weft run
//! --watch`: each step's text as it comes, on stderr beside the progress,
//! tagged with its node (and map item and attempt) whenever another step's
//! text comes in between; with `--json`, one object per piece on stdout
//! (`{"type": "stream", "offset", "node", "item", "attempt", "kind",
//! "text"}`). A stream that breaks off (a coordinator restarting, a leader
//! changing) is picked up again from the offset after the last piece
//! shown: nothing is shown twice or left out.

use serde_json::json;
use tokio_stream::StreamExt;
use weft_client::{Client, ClientError, Delta, READ_PATIENCE};

use super::terminal::{err, out, text_open, write_err_part};

/// The step a piece belongs to.
type Step = (String, Option<usize>, u32);

/// Shows run `run_id`'s stream until it ends (the run has ended) or the
/// stream cannot be had back within [`READ_PATIENCE`].
pub async fn show(client: Client, run_id: String, json: bool) {
    let mut next = 0;
    let mut broken: Option<std::time::Instant> = None;
    let mut shown = Shown::default();
    'feed: loop {
        let mut pieces = match client.stream(&run_id, next).await {
            Ok(pieces) => pieces,
            Err(error) => {
                if !wait_out(&error, &mut broken).await {
                    return;
                }
                continue;
            }
        };
        while let Some(piece) = pieces.next().await {
            let piece = match piece {
                Ok(piece) => piece,
                Err(error) => {
                    if !wait_out(&error, &mut broken).await {
                        return;
                    }
                    continue 'feed;
                }
            };
            broken = None;
            next = piece.offset + 1;
            if json {
                out!("{}", as_json(&piece));
            } else {
                shown.piece(&piece);
            }
        }
        shown.end_line();
        return;
    }
}

/// A piece as `--json` prints it: its fields, with `"type": "stream"`.
fn as_json(piece: &Delta) -> serde_json::Value {
    let mut value = serde_json::to_value(piece).unwrap_or_default();
    if let Some(fields) = value.as_object_mut() {
        fields.insert("type".into(), json!("stream"));
    }
    value
}

/// Whether to try again after `error`: a coordinator that cannot serve
/// now, for up to [`READ_PATIENCE`].
async fn wait_out(error: &ClientError, broken: &mut Option<std::time::Instant>) -> bool {
    let since = *broken.get_or_insert_with(std::time::Instant::now);
    let again = matches!(
        error,
        ClientError::Unreachable { .. } | ClientError::Unavailable(_)
    ) && since.elapsed() < READ_PATIENCE;
    if again {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    again
}

/// What the terminal shows of the stream so far.
#[derive(Default)]
struct Shown {
    /// The step whose text was shown last.
    last: Option<Step>,
}

impl Shown {
    fn piece(&mut self, piece: &Delta) {
        let step = (piece.node.clone(), piece.item, piece.attempt);
        match piece.kind.as_str() {
            "text" => {
                // Tagged again when another step's text, or a line of the
                // run's progress, came in between.
                if self.last.as_ref() != Some(&step) || !text_open() {
                    self.end_line();
                    write_err_part(&format!("  {} ", tag(&step)));
                    self.last = Some(step);
                }
                write_err_part(&piece.text);
            }
            "tool_call" => {
                self.end_line();
                err!("  {} → {}", tag(&step), piece.text);
                self.last = None;
            }
            "tool_result" => {
                self.end_line();
                err!("  {} ← {}", tag(&step), piece.text);
                self.last = None;
            }
            "message" => {
                self.end_line();
                err!("  {} ✉ {}", tag(&step), piece.text);
                self.last = None;
            }
            "abandoned" => {
                self.end_line();
                err!(
                    "  {} (abandoned: the attempt failed or was cut off)",
                    tag(&step)
                );
                self.last = None;
            }
            "truncated" => {
                self.end_line();
                err!("  (the run's stream is too long: nothing more is kept)");
                self.last = None;
            }
            _ => {
                // `end`: the attempt's text is whole.
                if self.last.as_ref() == Some(&step) {
                    self.end_line();
                    self.last = None;
                }
            }
        }
    }

    fn end_line(&mut self) {
        if text_open() {
            write_err_part("\n");
        }
    }
}

/// `[node]`, with ` item N` and ` attempt A` (after the first) when they
/// apply.
fn tag((node, item, attempt): &Step) -> String {
    let item = item.map(|i| format!(" item {i}")).unwrap_or_default();
    let attempt = if *attempt > 1 {
        format!(" attempt {attempt}")
    } else {
        String::new()
    };
    format!("[{node}{item}{attempt}]")
}
