//! A run's model output as it streams (SPEC 19): the pieces its `llm`,
//! `agent` and `rag` steps' workers send as the model writes, in the order
//! they arrived, each at an offset (its place in the run's stream), for
//! every watcher.
//!
//! The run's actor appends; watchers read from the offset they want, at
//! their own pace, and wait on [`RunStreams::changed`] for more. Appending
//! never waits for a reader, so a slow watcher never slows the step or the
//! coordinator: it reads what it missed from the list when it gets to it.
//! A watcher that reconnects gives the offset after the last piece it read
//! and continues with nothing lost and nothing repeated.
//!
//! Offsets only grow. A run's stream starts at 0; when a new coordinator
//! takes a run over (a restart, a failover) its pieces start at the next
//! multiple of [`TERM_BLOCK`], past any offset the last one can have
//! shown, so a watcher that read pieces the store never got does not find
//! other pieces at their offsets: it reads on from the next offset held.
//!
//! An attempt's pieces end with an `end` piece when it succeeds, or an
//! `abandoned` one when it fails, is cancelled, or was cut off by its
//! coordinator's end (a retried attempt's stream starts fresh under its
//! own attempt number; a step sent again by a new coordinator streams
//! afresh under the same one, after the `abandoned` piece).
//!
//! With a store, every piece is also handed to the run's copy in the store
//! ([`crate::durable::stream_copy`]), so a new coordinator continues the
//! stream where the store has it. The pieces are kept in memory while the
//! run's handle lives, at most [`MAX_STREAM_BYTES`] of text a run; past it
//! the run's later pieces are dropped and one `truncated` piece says so.

use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use weft_proto::NodeId;

use crate::durable::stream_copy::{self, CopySetup};

/// Text a run's stream keeps at most.
pub const MAX_STREAM_BYTES: usize = 16 << 20;

/// How far apart coordinators' offsets of one run begin: a run taken over
/// by a new coordinator streams from the next multiple (2³²; no term can
/// show that many pieces, and JavaScript reads offsets exactly up to 2⁵³).
pub const TERM_BLOCK: u64 = 1 << 32;

/// What a piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The attempt failed, was cancelled or was cut off: its stream stops
    /// here.
    Abandoned,
    /// The run's stream reached [`MAX_STREAM_BYTES`]: nothing more is kept.
    Truncated,
}

impl PieceKind {
    /// Whether the piece ends its attempt's stream.
    pub fn ends_step(self) -> bool {
        matches!(self, Self::End | Self::Abandoned)
    }
}

/// One piece of a run's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Piece {
    /// Its place in the run's stream.
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

impl Piece {
    /// The step it belongs to.
    pub fn step(&self) -> StepRef {
        StepRef {
            node: self.node.clone(),
            item: self.item,
            attempt: self.attempt,
        }
    }
}

/// Where a run's stream stands: the offset after the last piece shown,
/// and whether the run has ended (no piece will come until a retry
/// revives it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    /// The offset after the last piece shown (where the next one goes).
    pub next: u64,
    /// The run has ended.
    pub ended: bool,
}

/// A run's stream: see the module docs.
#[derive(Debug)]
pub struct RunStreams {
    /// Itself, for the store's writer to show pieces once the term's
    /// block is stored.
    me: Weak<RunStreams>,
    pieces: Mutex<Kept>,
    mark: watch::Sender<Mark>,
}

#[derive(Debug, Default)]
struct Kept {
    /// In offset order.
    pieces: Vec<Arc<Piece>>,
    /// How many of `pieces` readers see: all, unless the run was taken
    /// over and the store does not hold its term's block yet.
    shown: usize,
    /// Pieces wait for the store to hold the term's block.
    gated: bool,
    /// Where the next piece goes.
    next: u64,
    bytes: usize,
    truncated: bool,
    copy: Copy,
}

/// The stream's copy in the store.
#[derive(Debug, Default)]
enum Copy {
    /// No store.
    #[default]
    None,
    /// Not started: its writer starts with the first piece.
    Idle(Box<CopySetup>),
    /// Each piece goes to the writer.
    Writing(mpsc::UnboundedSender<Arc<Piece>>),
}

impl Default for RunStreams {
    /// A stream kept in memory only.
    fn default() -> Self {
        Self {
            me: Weak::new(),
            pieces: Mutex::default(),
            mark: watch::Sender::new(Mark::default()),
        }
    }
}

/// The step a piece belongs to: its node, map item and attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepRef {
    /// The node.
    pub node: NodeId,
    /// The map item.
    pub item: Option<usize>,
    /// The attempt.
    pub attempt: u32,
}

impl RunStreams {
    fn with(kept: Kept) -> Arc<Self> {
        let mark = Mark {
            next: kept.pieces.last().map_or(0, |p| p.offset + 1),
            ended: false,
        };
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            pieces: Mutex::new(kept),
            mark: watch::Sender::new(mark),
        })
    }

    /// A new run's stream, copied to the store as `copy` says.
    pub fn stored(copy: CopySetup) -> Arc<Self> {
        Self::with(Kept {
            copy: Copy::Idle(Box::new(copy)),
            ..Kept::default()
        })
    }

    /// The stream of a run a new coordinator takes over: what the store
    /// held of it, then an `abandoned` piece for each step that was
    /// streaming (a step sent again streams afresh). Its new pieces are
    /// shown once the store holds the new term's block.
    pub fn taken_over(copy: CopySetup, restored: stream_copy::Restored) -> Arc<Self> {
        let stream_copy::Restored {
            pieces,
            open,
            block,
            tally,
        } = restored;
        let bytes = pieces.iter().map(|p| p.text.len()).sum();
        let truncated = pieces.iter().any(|p| p.kind == PieceKind::Truncated);
        let shown = pieces.len();
        let streams = Self::with(Kept {
            pieces: pieces.into_iter().map(Arc::new).collect(),
            shown,
            gated: true,
            next: block * TERM_BLOCK,
            bytes,
            truncated,
            copy: Copy::Idle(Box::new(copy.taken_over(block, tally))),
        });
        for step in open {
            streams.push(&step, PieceKind::Abandoned, String::new());
        }
        streams
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.pieces.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a piece of `step`'s stream.
    pub fn push(&self, step: &StepRef, kind: PieceKind, text: String) {
        let shown = {
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
            let offset = kept.next;
            kept.next += 1;
            let piece = Arc::new(Piece {
                offset,
                node: step.node.clone(),
                item: step.item,
                attempt: step.attempt,
                kind,
                text,
            });
            kept.pieces.push(piece.clone());
            kept.copy.hand(piece, &self.me);
            if !kept.gated {
                kept.shown = kept.pieces.len();
            }
            (!kept.gated).then_some(offset + 1)
        };
        if let Some(next) = shown {
            self.mark.send_modify(|mark| mark.next = next);
        }
    }

    /// The store holds the term's block: every piece is shown from now on.
    pub(crate) fn open_gate(&self) {
        let next = {
            let mut kept = self.kept();
            kept.gated = false;
            kept.shown = kept.pieces.len();
            kept.pieces.last().map(|p| p.offset + 1)
        };
        if let Some(next) = next {
            self.mark
                .send_modify(|mark| mark.next = mark.next.max(next));
        }
    }

    /// Up to `max` pieces shown from offset `from` (the first piece at or
    /// after it).
    pub fn read(&self, from: u64, max: usize) -> Vec<Arc<Piece>> {
        let kept = self.kept();
        let shown = &kept.pieces[..kept.shown];
        let first = shown.partition_point(|p| p.offset < from);
        shown[first..].iter().take(max).cloned().collect()
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

impl Copy {
    /// Hands `piece` to the store's writer, started by the first piece.
    fn hand(&mut self, piece: Arc<Piece>, streams: &Weak<RunStreams>) {
        if matches!(self, Copy::Idle(_))
            && let Copy::Idle(setup) = std::mem::take(self)
        {
            *self = Copy::Writing(stream_copy::start(*setup, streams.clone()));
        }
        if let Copy::Writing(writer) = self {
            // A writer that has stopped (its term ended) loses the copy,
            // never the piece: the stream in memory has it.
            let _ = writer.send(piece);
        }
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
        assert_eq!(changed.borrow().next, 4);
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
