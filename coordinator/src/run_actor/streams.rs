//! A run's model output as it streams (SPEC 19): the pieces its `llm`,
//! `agent` and `rag` steps' workers send as the model writes, in the order
//! they arrived, each at an offset (its place in the run's stream, from
//! 0), for every watcher.
//!
//! The run's actor appends; watchers read from the offset they want, at
//! their own pace, and wait on [`RunStreams::changed`] for more. Appending
//! never waits for a reader, so a slow watcher never slows the step or the
//! coordinator: it reads what it missed from the list when it gets to it.
//! A watcher that reconnects gives the offset it reached and continues
//! with nothing lost and nothing repeated.
//!
//! An attempt's pieces end with an `end` piece when it succeeds, or an
//! `abandoned` one when it fails or is cancelled (a retried attempt's
//! stream starts fresh under its own attempt number).
//!
//! The pieces are kept in memory while the run's handle lives, at most
//! [`MAX_STREAM_BYTES`] of text a run; past it the run's later pieces are
//! dropped and one `truncated` piece says so.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::watch;

use weft_proto::NodeId;

/// Text a run's stream keeps at most.
pub const MAX_STREAM_BYTES: usize = 16 << 20;

/// What a piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PieceKind {
    /// Text of the model's reply.
    Text,
    /// The model called a tool: `text` is its name.
    ToolCall,
    /// A tool's result: `text` is `NAME: RESULT` (cut to 1 KiB).
    ToolResult,
    /// A teammate message the step sent: `text` is `to ID: CONTENT`.
    Message,
    /// The attempt succeeded: its stream is whole.
    End,
    /// The attempt failed or was cancelled: its stream stops here.
    Abandoned,
    /// The run's stream reached [`MAX_STREAM_BYTES`]: nothing more is kept.
    Truncated,
}

/// One piece of a run's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Piece {
    /// Its place in the run's stream, from 0.
    pub offset: u64,
    /// The step's node.
    pub node: NodeId,
    /// Its map item, for a chain step.
    pub item: Option<usize>,
    /// Its attempt.
    pub attempt: u32,
    /// What it is.
    pub kind: PieceKind,
    /// Its text (empty for `end`, `abandoned`, `truncated`).
    pub text: String,
}

/// Where a run's stream stands: pieces so far, and whether the run has
/// ended (no piece will come until a retry revives it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    /// Pieces so far.
    pub len: u64,
    /// The run has ended.
    pub ended: bool,
}

/// A run's stream: see the module docs.
#[derive(Debug)]
pub struct RunStreams {
    pieces: Mutex<Kept>,
    mark: watch::Sender<Mark>,
}

#[derive(Debug, Default)]
struct Kept {
    pieces: Vec<Arc<Piece>>,
    bytes: usize,
    truncated: bool,
}

impl Default for RunStreams {
    fn default() -> Self {
        Self {
            pieces: Mutex::default(),
            mark: watch::Sender::new(Mark::default()),
        }
    }
}

/// The step a piece belongs to: its node, map item and attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRef {
    /// The node.
    pub node: NodeId,
    /// The map item.
    pub item: Option<usize>,
    /// The attempt.
    pub attempt: u32,
}

impl RunStreams {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.pieces.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a piece of `step`'s stream.
    pub fn push(&self, step: &StepRef, kind: PieceKind, text: String) {
        let len = {
            let mut kept = self.kept();
            if kept.truncated {
                return;
            }
            let (kind, text) = if kept.bytes + text.len() > MAX_STREAM_BYTES {
                kept.truncated = true;
                (PieceKind::Truncated, String::new())
            } else {
                (kind, text)
            };
            kept.bytes += text.len();
            let offset = kept.pieces.len() as u64;
            kept.pieces.push(Arc::new(Piece {
                offset,
                node: step.node.clone(),
                item: step.item,
                attempt: step.attempt,
                kind,
                text,
            }));
            kept.pieces.len() as u64
        };
        self.mark.send_modify(|mark| mark.len = len);
    }

    /// Up to `max` pieces from offset `from`.
    pub fn read(&self, from: u64, max: usize) -> Vec<Arc<Piece>> {
        let kept = self.kept();
        let from = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(kept.pieces.len());
        kept.pieces[from..].iter().take(max).cloned().collect()
    }

    /// Where the stream stands, and changes to it from now on.
    pub fn changed(&self) -> watch::Receiver<Mark> {
        self.mark.subscribe()
    }

    /// The run ended (or, `false`, a retry revived it).
    pub fn set_ended(&self, ended: bool) {
        self.mark.send_modify(|mark| mark.ended = ended);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(node: &str) -> StepRef {
        StepRef {
            node: node.into(),
            item: None,
            attempt: 1,
        }
    }

    #[test]
    fn pieces_are_read_from_any_offset_in_order() {
        let streams = RunStreams::default();
        let changed = streams.changed();
        for text in ["a", "b", "c"] {
            streams.push(&step("ask"), PieceKind::Text, text.into());
        }
        streams.push(&step("ask"), PieceKind::End, String::new());
        assert_eq!(changed.borrow().len, 4);
        let read: Vec<(u64, String)> = streams
            .read(1, 2)
            .iter()
            .map(|p| (p.offset, p.text.clone()))
            .collect();
        assert_eq!(read, [(1, "b".to_owned()), (2, "c".to_owned())]);
        assert!(streams.read(9, 10).is_empty());
        streams.set_ended(true);
        assert!(changed.borrow().ended);
    }

    #[test]
    fn a_stream_past_its_limit_says_so_once_and_keeps_nothing_more() {
        let streams = RunStreams::default();
        let big = "x".repeat(MAX_STREAM_BYTES - 1);
        streams.push(&step("ask"), PieceKind::Text, big);
        streams.push(&step("ask"), PieceKind::Text, "yy".into());
        streams.push(&step("ask"), PieceKind::Text, "z".into());
        let kinds: Vec<PieceKind> = streams.read(0, 10).iter().map(|p| p.kind).collect();
        assert_eq!(kinds, [PieceKind::Text, PieceKind::Truncated]);
    }
}
