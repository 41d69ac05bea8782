//! A run's stream as the store keeps it (SPEC 19), so that a coordinator
//! that takes the run over (a restart, a failover) serves the pieces the
//! last one showed, and a watcher continues from its offset.
//!
//! While a step streams, its pieces are written in chunks, at most every
//! [`FLUSH_EVERY`] or [`FLUSH_BYTES`] of text, whichever comes first:
//! `runs/<id>/stream/c/<offset>` holds the pieces of the steps still
//! streaming that came in one such stretch. When a step's attempt ends (at
//! once: its answer is in the run's state), its whole stream is written as
//! one record, `runs/<id>/stream/s/<offset>`: its final text and where each
//! piece of it begins, so the pieces come back at their offsets; then the
//! chunks that held only ended steps are deleted. `runs/<id>/stream/block`
//! holds the block of offsets the run's current coordinator streams in
//! (`crate::run_actor::streams::TERM_BLOCK`).
//!
//! Records are JSON, read back by [`restore`]. The steps still streaming
//! when the last coordinator ended are returned as open: the new one ends
//! each with an `abandoned` piece (a step sent again streams afresh).
//!
//! One writer task per run that streams, started by its first piece;
//! every write is fenced on the leader's term like a checkpoint. A write
//! that fails is logged and the copy goes on: the stream in memory is
//! whole, and the store's copy lacks only what a failover would show.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use weft_proto::RunId;
use weft_store::{Store, StoreError, chunks};

use super::Keeper;
use super::keys::{stream_block_key, stream_chunk_key, stream_step_key};
use crate::run_actor::streams::{Piece, PieceKind, RunStreams, StepRef, TERM_BLOCK};

/// The longest a piece waits to be written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Text that is written at once, however little time has passed.
pub const FLUSH_BYTES: usize = 4 << 10;

/// One step's pieces as stored: its whole stream in an `s/` record, what
/// came in one stretch in a `c/` record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct StoredStep {
    node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    item: Option<usize>,
    attempt: u32,
    /// Each piece: its offset less the one before it (the first: its
    /// offset), its kind, and the length of its text in bytes.
    pieces: Vec<(u64, PieceKind, u32)>,
    /// The pieces' text, one after another.
    text: String,
    /// The offset of the last piece added.
    #[serde(skip)]
    last: u64,
}

impl StoredStep {
    fn of(step: &StepRef) -> Self {
        Self {
            node: step.node.to_string(),
            item: step.item,
            attempt: step.attempt,
            ..Self::default()
        }
    }

    fn add(&mut self, piece: &Piece) {
        let delta = if self.pieces.is_empty() {
            piece.offset
        } else {
            piece.offset - self.last
        };
        self.last = piece.offset;
        let len = u32::try_from(piece.text.len()).unwrap_or(u32::MAX);
        self.pieces.push((delta, piece.kind, len));
        self.text.push_str(&piece.text);
    }

    fn first(&self) -> u64 {
        self.pieces.first().map_or(0, |(offset, _, _)| *offset)
    }

    fn step(&self) -> StepRef {
        StepRef {
            node: self.node.as_str().into(),
            item: self.item,
            attempt: self.attempt,
        }
    }

    /// Its pieces, or why they cannot be read.
    fn pieces(&self) -> Result<Vec<Piece>, &'static str> {
        let mut pieces = Vec::with_capacity(self.pieces.len());
        let (mut offset, mut at) = (0u64, 0usize);
        for (index, (delta, kind, len)) in self.pieces.iter().enumerate() {
            offset = if index == 0 {
                *delta
            } else {
                offset.checked_add(*delta).ok_or("an offset overflows")?
            };
            let end = at + *len as usize;
            let text = self
                .text
                .get(at..end)
                .ok_or("a piece's text lies outside the record's text")?;
            at = end;
            pieces.push(Piece {
                offset,
                node: self.node.as_str().into(),
                item: self.item,
                attempt: self.attempt,
                kind: *kind,
                text: text.to_owned(),
            });
        }
        Ok(pieces)
    }
}

/// A step still streaming, as its writer keeps it until it ends.
#[derive(Debug, Clone)]
struct OpenStep {
    /// Its whole stream so far.
    whole: StoredStep,
    /// The chunks holding pieces of it.
    chunks: Vec<u64>,
}

/// What the writer knows of the store's copy: the steps still streaming
/// and the chunks that hold them.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    open: HashMap<StepRef, OpenStep>,
    /// Each chunk (by its first offset): how many open steps it holds.
    chunks: HashMap<u64, usize>,
    /// Chunks that hold no open step (found so on a takeover).
    stale: Vec<u64>,
}

/// What one stretch of pieces writes, in this order.
#[derive(Debug, Default, PartialEq)]
struct Writes {
    /// Steps that ended: their whole streams.
    ended: Vec<StoredStep>,
    /// The pieces of the steps still streaming, under the chunk's first
    /// offset.
    chunk: Option<(u64, Vec<StoredStep>)>,
    /// Chunks that hold no open step any more.
    delete: Vec<u64>,
}

impl Tally {
    /// Takes a stretch of pieces: what to write.
    fn add(&mut self, batch: &[Arc<Piece>]) -> Writes {
        let mut stretch: Vec<(StepRef, StoredStep)> = Vec::new();
        let mut ended: Vec<StepRef> = Vec::new();
        let mut truncated = false;
        for piece in batch {
            let step = piece.step();
            self.open
                .entry(step.clone())
                .or_insert_with(|| OpenStep {
                    whole: StoredStep::of(&step),
                    chunks: Vec::new(),
                })
                .whole
                .add(piece);
            match stretch.iter_mut().find(|(s, _)| *s == step) {
                Some((_, part)) => part.add(piece),
                None => {
                    let mut part = StoredStep::of(&step);
                    part.add(piece);
                    stretch.push((step.clone(), part));
                }
            }
            if piece.kind.ends_step() {
                ended.push(step);
            } else if piece.kind == PieceKind::Truncated {
                // Nothing more comes: every step's stream is as whole as
                // it will be.
                truncated = true;
            }
        }
        if truncated {
            ended = self.open.keys().cloned().collect();
        }
        let mut writes = Writes {
            delete: std::mem::take(&mut self.stale),
            ..Writes::default()
        };
        for step in &ended {
            let Some(open) = self.open.remove(step) else {
                continue;
            };
            for chunk in &open.chunks {
                if let Some(count) = self.chunks.get_mut(chunk) {
                    *count -= 1;
                    if *count == 0 {
                        self.chunks.remove(chunk);
                        writes.delete.push(*chunk);
                    }
                }
            }
            writes.ended.push(open.whole);
        }
        writes.ended.sort_by_key(StoredStep::first);
        let still: Vec<StoredStep> = stretch
            .into_iter()
            .filter(|(step, _)| self.open.contains_key(step))
            .map(|(_, part)| part)
            .collect();
        if let Some(first) = still.iter().map(StoredStep::first).min() {
            for part in &still {
                if let Some(open) = self.open.get_mut(&part.step()) {
                    open.chunks.push(first);
                }
            }
            self.chunks.insert(first, still.len());
            writes.chunk = Some((first, still));
        }
        writes
    }
}

/// What the store held of a run's stream, for the coordinator taking it
/// over.
#[derive(Debug, Default)]
pub struct Restored {
    /// Every piece held, in offset order.
    pub pieces: Vec<Piece>,
    /// The steps that were streaming, in the order they began.
    pub open: Vec<StepRef>,
    /// The block of offsets the new coordinator streams in.
    pub block: u64,
    /// The writer's knowledge of the copy.
    pub tally: Tally,
}

/// Reads a run's stream back from `records` (every key under its
/// `runs/<id>/stream/`, with its value). A record that cannot be read is
/// logged and left out: its pieces are lost, never misread.
pub fn restore(run: &str, records: &[(String, Vec<u8>)]) -> Restored {
    let mut block = 0;
    let mut wholes: Vec<StoredStep> = Vec::new();
    let mut parts: Vec<(u64, Vec<StoredStep>)> = Vec::new();
    for (key, value) in records {
        let read = if key.ends_with("/stream/block") {
            std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .map(|stored| block = block.max(stored))
                .ok_or_else(|| "not a number".to_owned())
        } else if key.contains("/stream/s/") {
            serde_json::from_slice::<StoredStep>(value)
                .map(|whole| wholes.push(whole))
                .map_err(|e| e.to_string())
        } else if let Some((_, first)) = key.rsplit_once("/stream/c/") {
            match (
                first.parse::<u64>(),
                serde_json::from_slice::<Vec<StoredStep>>(value),
            ) {
                (Ok(first), Ok(stretch)) => {
                    parts.push((first, stretch));
                    Ok(())
                }
                (_, Err(error)) => Err(error.to_string()),
                (Err(error), _) => Err(error.to_string()),
            }
        } else {
            Err("not a key of a run's stream".to_owned())
        };
        if let Err(error) = read {
            tracing::error!(run, %key, %error, "a record of a run's stream cannot be read: its pieces are left out");
        }
    }
    let mut pieces: BTreeMap<u64, Piece> = BTreeMap::new();
    let unreadable = |node: &str, error: &str| {
        tracing::error!(
            run,
            node,
            error,
            "a record of a run's stream cannot be read: its pieces are left out"
        );
    };
    for whole in &wholes {
        match whole.pieces() {
            Ok(read) => pieces.extend(read.into_iter().map(|p| (p.offset, p))),
            Err(error) => unreadable(&whole.node, error),
        }
    }
    // A chunk's part of a step whose whole record is stored (the chunk's
    // deletion did not happen) is that record's already.
    let whole_offsets: HashSet<u64> = pieces.keys().copied().collect();
    let mut tally = Tally::default();
    let mut open_pieces: HashMap<StepRef, BTreeMap<u64, Piece>> = HashMap::new();
    for (first, stretch) in &parts {
        let mut holds = 0;
        for part in stretch {
            if whole_offsets.contains(&part.first()) {
                continue;
            }
            let read = match part.pieces() {
                Ok(read) => read,
                Err(error) => {
                    unreadable(&part.node, error);
                    continue;
                }
            };
            let step = part.step();
            let kept = open_pieces.entry(step.clone()).or_default();
            for piece in read {
                pieces.insert(piece.offset, piece.clone());
                kept.insert(piece.offset, piece);
            }
            holds += 1;
            tally
                .open
                .entry(step)
                .or_insert_with(|| OpenStep {
                    whole: StoredStep::of(&part.step()),
                    chunks: Vec::new(),
                })
                .chunks
                .push(*first);
        }
        if holds == 0 {
            tally.stale.push(*first);
        } else {
            tally.chunks.insert(*first, holds);
        }
    }
    // The open steps' streams so far, from their chunks.
    for (step, kept) in &open_pieces {
        if let Some(open) = tally.open.get_mut(step) {
            for piece in kept.values() {
                open.whole.add(piece);
            }
        }
    }
    let mut open: Vec<(u64, StepRef)> = tally
        .open
        .iter()
        .map(|(step, o)| (o.whole.first(), step.clone()))
        .collect();
    open.sort_by_key(|(first, _)| *first);
    let last = pieces
        .keys()
        .next_back()
        .map_or(0, |last| last / TERM_BLOCK);
    Restored {
        pieces: pieces.into_values().collect(),
        open: open.into_iter().map(|(_, step)| step).collect(),
        block: block.max(last) + 1,
        tally,
    }
}

/// What a run's copy is written with.
#[derive(Clone)]
pub struct CopySetup {
    keeper: Keeper,
    run: RunId,
    tracker: TaskTracker,
    /// The block the coordinator streams in: stored before a piece of it
    /// is shown, unless it is the run's first (0).
    block: u64,
    tally: Tally,
}

impl std::fmt::Debug for CopySetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopySetup")
            .field("run", &self.run)
            .field("block", &self.block)
            .finish_non_exhaustive()
    }
}

impl CopySetup {
    /// A new run's copy, written through `keeper` by a task on `tracker`.
    pub fn new(keeper: Keeper, run: RunId, tracker: TaskTracker) -> Self {
        Self {
            keeper,
            run,
            tracker,
            block: 0,
            tally: Tally::default(),
        }
    }

    /// The copy of a run taken over, streaming in `block`.
    pub fn taken_over(self, block: u64, tally: Tally) -> Self {
        Self {
            block,
            tally,
            ..self
        }
    }
}

/// Starts the writer of a run's copy; pieces are handed to it in order.
/// It shows `streams`' pieces once the store holds the term's block, and
/// stops when the run's stream is dropped.
pub fn start(setup: CopySetup, streams: Weak<RunStreams>) -> mpsc::UnboundedSender<Arc<Piece>> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let tracker = setup.tracker.clone();
    tracker.spawn(write_copy(setup, streams, receiver));
    sender
}

async fn write_copy(
    setup: CopySetup,
    streams: Weak<RunStreams>,
    mut pieces: mpsc::UnboundedReceiver<Arc<Piece>>,
) {
    let CopySetup {
        keeper,
        run,
        block,
        mut tally,
        ..
    } = setup;
    if block > 0 {
        let key = stream_block_key(&run);
        let stored = keeper.checked(
            keeper
                .store()
                .put(&key, block.to_string().into_bytes(), keeper.fence())
                .await,
        );
        if let Err(error) = &stored {
            tracing::warn!(run = %run, %error, "the block of a run's stream was not stored");
        }
        if let Some(streams) = streams.upgrade() {
            streams.open_gate();
        }
        if matches!(stored, Err(StoreError::Fenced { .. })) {
            return;
        }
    }
    while let Some(first) = pieces.recv().await {
        let mut bytes = first.text.len();
        let mut ends = flushes_at_once(first.kind);
        let mut batch = vec![first];
        let due = tokio::time::Instant::now() + FLUSH_EVERY;
        while bytes < FLUSH_BYTES && !ends {
            tokio::select! {
                piece = pieces.recv() => match piece {
                    Some(piece) => {
                        bytes += piece.text.len();
                        ends = flushes_at_once(piece.kind);
                        batch.push(piece);
                    }
                    // The run's stream is gone (the run forgotten or
                    // deleted): nothing more is kept of it.
                    None => return,
                },
                () = tokio::time::sleep_until(due) => break,
            }
        }
        let writes = tally.add(&batch);
        if let Err(StoreError::Fenced { .. }) = write(&keeper, &run, writes).await {
            return;
        }
    }
}

/// Whether a piece is written at once: it ends its step (whose answer is
/// in the state by now), or the run's stream.
fn flushes_at_once(kind: PieceKind) -> bool {
    kind.ends_step() || kind == PieceKind::Truncated
}

/// Writes one stretch: ended steps whole, then the chunk, then the
/// chunks no longer needed. Stops at a fenced write (the term is over);
/// other failures are logged.
async fn write(keeper: &Keeper, run: &str, writes: Writes) -> Result<(), StoreError> {
    let store = keeper.store();
    let mut puts: Vec<(String, Vec<u8>)> = writes
        .ended
        .iter()
        .map(|whole| {
            let value = serde_json::to_vec(whole).unwrap_or_default();
            (stream_step_key(run, whole.first()), value)
        })
        .collect();
    if let Some((first, stretch)) = &writes.chunk {
        let value = serde_json::to_vec(stretch).unwrap_or_default();
        puts.push((stream_chunk_key(run, *first), value));
    }
    for (key, value) in puts {
        let stored = keeper.checked(chunks::put(store, &key, &value, keeper.fence()).await);
        match stored {
            Ok(_) => {}
            Err(error @ StoreError::Fenced { .. }) => return Err(error),
            Err(error) => {
                tracing::warn!(run, %key, %error, "a piece of a run's stream was not stored");
            }
        }
    }
    if !writes.delete.is_empty() {
        let keys: Vec<String> = writes
            .delete
            .iter()
            .map(|first| stream_chunk_key(run, *first))
            .collect();
        if let Err(error) = keeper.delete_prefixes(&keys).await {
            if matches!(error, StoreError::Fenced { .. }) {
                return Err(error);
            }
            tracing::warn!(run, %error, "chunks of a run's stream stay in the store");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(offset: u64, node: &str, kind: PieceKind, text: &str) -> Arc<Piece> {
        Arc::new(Piece {
            offset,
            node: node.into(),
            item: None,
            attempt: 1,
            kind,
            text: text.into(),
        })
    }

    /// The records `writes` leave, as the store would hold them.
    fn apply(store: &mut BTreeMap<String, Vec<u8>>, writes: Writes) {
        for whole in &writes.ended {
            store.insert(
                stream_step_key("r", whole.first()),
                serde_json::to_vec(whole).unwrap(),
            );
        }
        if let Some((first, stretch)) = &writes.chunk {
            store.insert(
                stream_chunk_key("r", *first),
                serde_json::to_vec(stretch).unwrap(),
            );
        }
        for first in writes.delete {
            store.remove(&stream_chunk_key("r", first));
        }
    }

    fn records(store: &BTreeMap<String, Vec<u8>>) -> Vec<(String, Vec<u8>)> {
        store.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    #[test]
    fn an_ended_step_leaves_one_record_and_its_chunks_go() {
        let mut tally = Tally::default();
        let mut store = BTreeMap::new();
        let a = |o, t| piece(o, "a", PieceKind::Text, t);
        let b = |o, t| piece(o, "b", PieceKind::Text, t);
        apply(&mut store, tally.add(&[a(0, "Hel"), b(1, "x")]));
        apply(&mut store, tally.add(&[a(2, "lo"), b(3, "y")]));
        assert_eq!(store.len(), 2, "two chunks while both stream");
        apply(
            &mut store,
            tally.add(&[a(4, "!"), piece(5, "a", PieceKind::End, "")]),
        );
        // `b` still streams: both chunks hold it.
        assert_eq!(store.len(), 3);
        apply(&mut store, tally.add(&[piece(6, "b", PieceKind::End, "")]));
        let keys: Vec<&String> = store.keys().collect();
        assert_eq!(
            keys,
            [&stream_step_key("r", 0), &stream_step_key("r", 1)],
            "only the steps' whole records stay"
        );
        let whole: StoredStep = serde_json::from_slice(&store[&stream_step_key("r", 0)]).unwrap();
        assert_eq!(whole.text, "Hello!");
        let restored = restore("r", &records(&store));
        let texts: Vec<(u64, &str)> = restored
            .pieces
            .iter()
            .map(|p| (p.offset, p.text.as_str()))
            .collect();
        assert_eq!(
            texts,
            [
                (0, "Hel"),
                (1, "x"),
                (2, "lo"),
                (3, "y"),
                (4, "!"),
                (5, ""),
                (6, "")
            ]
        );
        assert!(restored.open.is_empty());
        assert_eq!(restored.block, 1);
    }

    #[test]
    fn a_step_cut_off_comes_back_open_with_its_pieces_and_chunks() {
        let mut tally = Tally::default();
        let mut store = BTreeMap::new();
        let a = |o, t| piece(o, "a", PieceKind::Text, t);
        apply(&mut store, tally.add(&[a(0, "one "), a(1, "two ")]));
        apply(&mut store, tally.add(&[a(2, "three")]));
        store.insert("runs/r/stream/block".into(), b"2".to_vec());
        let restored = restore("r", &records(&store));
        assert_eq!(restored.pieces.len(), 3);
        assert_eq!(restored.open.len(), 1);
        assert_eq!(restored.block, 3, "past the stored block");
        // Abandoned by the new term: one whole record, no chunk left.
        let mut tally = restored.tally;
        let writes = tally.add(&[piece(3 * TERM_BLOCK, "a", PieceKind::Abandoned, "")]);
        assert_eq!(writes.delete.len(), 2);
        assert_eq!(writes.ended.len(), 1);
        assert_eq!(writes.ended[0].text, "one two three");
        let offsets: Vec<u64> = writes.ended[0]
            .pieces()
            .unwrap()
            .iter()
            .map(|p| p.offset)
            .collect();
        assert_eq!(offsets, [0, 1, 2, 3 * TERM_BLOCK]);
    }

    #[test]
    fn a_chunk_left_by_a_crash_after_its_step_ended_is_deleted() {
        let mut tally = Tally::default();
        let mut store = BTreeMap::new();
        apply(
            &mut store,
            tally.add(&[piece(0, "a", PieceKind::Text, "hi")]),
        );
        let chunk = store.clone();
        apply(&mut store, tally.add(&[piece(1, "a", PieceKind::End, "")]));
        // The whole record was written; the chunk's deletion was not.
        store.extend(chunk);
        let restored = restore("r", &records(&store));
        assert!(restored.open.is_empty());
        assert_eq!(restored.pieces.len(), 2, "nothing counted twice");
        let mut tally = restored.tally;
        assert_eq!(tally.add(&[]).delete, [0]);
    }

    #[test]
    fn a_record_that_does_not_read_is_left_out() {
        let mut whole = StoredStep::of(&StepRef {
            node: "a".into(),
            item: None,
            attempt: 1,
        });
        whole.add(&piece(0, "a", PieceKind::Text, "abc"));
        whole.text = "a".into();
        let records = vec![(stream_step_key("r", 0), serde_json::to_vec(&whole).unwrap())];
        let restored = restore("r", &records);
        assert!(restored.pieces.is_empty());
    }
}
