//! Values stored as what changed: a field whose new value shares most of
//! its last stored one (a list appended to, a transcript that grows) is
//! stored as the stretches of the old value it keeps (found by block
//! hashes, wherever they are and however often its text repeats) and the
//! bytes it adds, not rewritten whole; so is a large progress (a loop's or
//! a map's state growing inside it).
//!
//! A field at its plain key (`fields/<name>`) is a base followed by a
//! chain of deltas (`deltas/<name in hex>/<seq>`, numbered per run), each
//! applied to the value before it: `value = previous[..keep] + insert +
//! previous[len - keep_end..]`, byte for byte, so what is read back is
//! exactly what was stored. A progress of [`CHAINED_PROGRESS`] or more
//! leaves the record for `progress/base` and its deltas `progress/d/<seq>`.
//! The run's record names each chain, in the same transaction as the
//! chain's newest delta, so a record never names a delta that is not
//! there.
//!
//! Compaction: a chain ends, and its value is written whole again, once
//! what its deltas add would outweigh its base or it reaches
//! [`MAX_CHAIN`] deltas; the deltas it leaves behind are deleted once the
//! record that no longer names them stands. So a value growing by appends
//! costs about three times its final size in writes over its life (not
//! the square of it), and the store holds at most twice its size.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One delta as stored: the new value as pieces of the previous one and
/// bytes of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaRecord {
    /// The pieces, in order.
    pub ops: Vec<Op>,
}

/// A piece of a value rebuilt from a delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `len` bytes of the previous value from `from`.
    Copy {
        /// Where they start.
        from: u64,
        /// How many.
        len: u64,
    },
    /// Bytes the previous value does not have.
    Insert(Vec<u8>),
}

/// What an op costs besides the bytes it inserts.
const OP_BYTES: usize = 8;

/// The length of a block: a piece of the old value indexed by its hash,
/// and of the new one looked up in that index.
const BLOCK: usize = 32;

/// The multiplier of the blocks' rolling hash (odd, so no bit is lost).
const HASH_BASE: u64 = 0x100_0000_01b3;

impl DeltaRecord {
    /// The delta that turns `old` into `new`: what they share at the start
    /// and at the end and, between them, every stretch of the new value
    /// that the old one holds anywhere (a list grown in two places, a
    /// counter between them, text that repeats itself), found by looking
    /// each block of the new value up among the old one's; the rest is
    /// inserted. Where a stretch is found many times (repetitive text),
    /// any place will do: the bytes are the same. Linear in both sizes.
    pub fn between(old: &[u8], new: &[u8]) -> Self {
        let head = common_prefix(old, new);
        let tail = common_suffix(&old[head..], &new[head..]);
        let mut ops = Ops::default();
        ops.copy(0, head);
        let middle = &new[head..new.len() - tail];
        Matcher::new(old).encode(middle, head, &mut ops);
        ops.copy(old.len() - tail, tail);
        Self { ops: ops.0 }
    }

    /// Applies this delta to `previous`; `None` when it does not fit it
    /// (a delta of another value).
    pub fn apply(&self, previous: &[u8]) -> Option<Vec<u8>> {
        let mut value = Vec::with_capacity(previous.len() + self.size());
        for op in &self.ops {
            match op {
                Op::Copy { from, len } => {
                    let from = usize::try_from(*from).ok()?;
                    let to = from.checked_add(usize::try_from(*len).ok()?)?;
                    value.extend_from_slice(previous.get(from..to)?);
                }
                Op::Insert(bytes) => value.extend_from_slice(bytes),
            }
        }
        Some(value)
    }

    /// What it costs to store, about: the bytes it inserts and its ops.
    pub fn size(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Copy { .. } => OP_BYTES,
                Op::Insert(bytes) => OP_BYTES + bytes.len(),
            })
            .sum()
    }
}

/// Ops being gathered: neighbouring copies and inserts merge.
#[derive(Default)]
struct Ops(Vec<Op>);

impl Ops {
    fn copy(&mut self, from: usize, len: usize) {
        if len == 0 {
            return;
        }
        if let Some(Op::Copy {
            from: start,
            len: so_far,
        }) = self.0.last_mut()
            && *start + *so_far == from as u64
        {
            *so_far += len as u64;
            return;
        }
        self.0.push(Op::Copy {
            from: from as u64,
            len: len as u64,
        });
    }

    fn insert(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some(Op::Insert(so_far)) => so_far.extend_from_slice(bytes),
            _ => self.0.push(Op::Insert(bytes.to_vec())),
        }
    }
}

/// The old value's blocks by hash, to find where a stretch of the new
/// value came from.
struct Matcher<'a> {
    old: &'a [u8],
    /// Each aligned block's hash, and where the first block of that hash
    /// starts.
    blocks: HashMap<u64, usize>,
    /// `HASH_BASE` to the power `BLOCK - 1`: what a byte leaving the
    /// window weighs.
    leaving: u64,
}

impl<'a> Matcher<'a> {
    fn new(old: &'a [u8]) -> Self {
        let mut blocks = HashMap::with_capacity(old.len() / BLOCK);
        for (index, block) in old.chunks_exact(BLOCK).enumerate() {
            blocks.entry(hash(block)).or_insert(index * BLOCK);
        }
        let leaving = (1..BLOCK).fold(1u64, |power, _| power.wrapping_mul(HASH_BASE));
        Self {
            old,
            blocks,
            leaving,
        }
    }

    /// Appends the ops that make `new`, which follows the old value's
    /// first `after` bytes (copied already).
    fn encode(&self, new: &[u8], after: usize, ops: &mut Ops) {
        let old = self.old;
        // Where the last copy ended in the old value: a stretch that goes
        // on from there is taken before any lookup (repetitive text then
        // keeps to one place).
        let mut expected = after;
        // The first byte of `new` not yet copied or inserted.
        let mut pending = 0;
        let mut at = 0;
        // The hash of `new[at..at + BLOCK]`, once computed.
        let mut window: Option<u64> = None;
        while at + BLOCK <= new.len() {
            if at == pending {
                let going_on = common_prefix(&old[expected.min(old.len())..], &new[at..]);
                if going_on >= BLOCK {
                    ops.copy(expected, going_on);
                    (at, pending, expected, window) =
                        (at + going_on, at + going_on, expected + going_on, None);
                    continue;
                }
            }
            let hashed = *window.get_or_insert_with(|| hash(&new[at..at + BLOCK]));
            if let Some(&from) = self.blocks.get(&hashed)
                && old[from..from + BLOCK] == new[at..at + BLOCK]
            {
                // Grown backwards over what would be inserted, and forwards
                // as far as both go.
                let back = old[..from]
                    .iter()
                    .rev()
                    .zip(new[pending..at].iter().rev())
                    .take_while(|(o, n)| o == n)
                    .count();
                let (from, start) = (from - back, at - back);
                let len = back + common_prefix(&old[from + back..], &new[at..]);
                ops.insert(&new[pending..start]);
                ops.copy(from, len);
                (at, pending, expected, window) = (start + len, start + len, from + len, None);
                continue;
            }
            if at + BLOCK < new.len() {
                window = Some(
                    hashed
                        .wrapping_sub(u64::from(new[at]).wrapping_mul(self.leaving))
                        .wrapping_mul(HASH_BASE)
                        .wrapping_add(u64::from(new[at + BLOCK])),
                );
            }
            at += 1;
        }
        ops.insert(&new[pending..]);
    }
}

/// A block's hash, as the rolling hash computes it.
fn hash(block: &[u8]) -> u64 {
    block.iter().fold(0u64, |hash, &byte| {
        hash.wrapping_mul(HASH_BASE).wrapping_add(u64::from(byte))
    })
}

/// The length of the longest common prefix of `a` and `b`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let shorter = a.len().min(b.len());
    // Whole blocks compare as slices (a memcmp); the first that differs is
    // searched byte by byte.
    const BLOCK: usize = 4096;
    let mut same = 0;
    while same + BLOCK <= shorter && a[same..same + BLOCK] == b[same..same + BLOCK] {
        same += BLOCK;
    }
    same + a[same..shorter]
        .iter()
        .zip(&b[same..shorter])
        .take_while(|(p, q)| p == q)
        .count()
}

/// The length of the longest common suffix of `a` and `b`.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(p, q)| p == q)
        .count()
}

/// The most deltas a chain holds before its value is written whole.
pub const MAX_CHAIN: usize = 128;

/// A progress at least this large is kept apart from the record, as a
/// chain (one below half of it goes back inline).
pub const CHAINED_PROGRESS: usize = 8 << 10;

/// Each field's chain, and the progress's, as the last stored record names
/// them.
#[derive(Clone, Default)]
pub struct Chains {
    fields: HashMap<String, Chain>,
    /// The progress's chain; `None` while it is inline in the record.
    progress: Option<Chain>,
    /// The next delta number of the run.
    next: u64,
}

/// A value stored as a base and deltas.
#[derive(Clone, Default)]
struct Chain {
    /// The value last stored (`None` when not known: a restored run's
    /// first write is whole).
    last: Option<Arc<str>>,
    /// The base's size and the sum of what its deltas add.
    base: usize,
    added: usize,
    /// The deltas, oldest first.
    seqs: Vec<u64>,
}

impl Chain {
    fn named(seqs: &[u64]) -> Self {
        Self {
            seqs: seqs.to_vec(),
            ..Self::default()
        }
    }

    /// Stores `json` next, whole or as delta `next` (then counted on);
    /// says whether deltas were left behind (a chain ended).
    fn store(&mut self, json: &Arc<str>, next: &mut u64) -> (FieldWrite, bool) {
        let delta = self.last.as_deref().and_then(|old| {
            let record = DeltaRecord::between(old.as_bytes(), json.as_bytes());
            let small = record.size() * 2 < json.len();
            let room = self.added + record.size() <= self.base && self.seqs.len() < MAX_CHAIN;
            (small && room).then_some(record)
        });
        self.last = Some(json.clone());
        match delta {
            Some(record) => {
                let seq = *next;
                *next += 1;
                self.added += record.size();
                self.seqs.push(seq);
                (FieldWrite::Delta { seq, record }, false)
            }
            None => {
                self.base = json.len();
                self.added = 0;
                let ended = !self.seqs.is_empty();
                self.seqs.clear();
                (FieldWrite::Whole, ended)
            }
        }
    }
}

/// How a changed field (or a chained progress) is stored.
pub enum FieldWrite {
    /// Whole, at its plain key (the progress: its base key).
    Whole,
    /// As a delta of its chain.
    Delta {
        /// The delta's number.
        seq: u64,
        /// What it keeps and adds.
        record: DeltaRecord,
    },
}

/// Where a checkpoint's progress goes.
pub enum ProgressWrite {
    /// Inside the record.
    Inline,
    /// In its chain.
    Chained(FieldWrite),
}

/// What of the progress's chain a write leaves behind, to delete once the
/// record that no longer names it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing.
    Nothing,
    /// Its deltas (it was written whole again).
    Deltas,
    /// Its base and deltas (it is inline or apart now).
    Chain,
}

impl Chains {
    /// The chains a stored record names (their values not known).
    pub fn restored(fields: &[(String, Vec<u64>)], progress: Option<&[u64]>) -> Self {
        let next = fields
            .iter()
            .flat_map(|(_, seqs)| seqs.iter())
            .chain(progress.into_iter().flatten())
            .max()
            .map_or(0, |n| n + 1);
        Self {
            fields: fields
                .iter()
                .map(|(name, seqs)| (name.clone(), Chain::named(seqs)))
                .collect(),
            progress: progress.map(Chain::named),
            next,
        }
    }

    /// Field `name`'s new value `json`: stored whole or as a delta, and
    /// noted as stored. Says too whether a chain of deltas ended (they are
    /// stale once the record that no longer names them stands).
    pub fn store(&mut self, name: &str, json: &Arc<str>) -> (FieldWrite, bool) {
        let chain = self.fields.entry(name.to_owned()).or_default();
        chain.store(json, &mut self.next)
    }

    /// The progress `json`: inline while it is small, else in its chain.
    pub fn store_progress(&mut self, json: &str) -> (ProgressWrite, Leftover) {
        let chained = json.len() >= CHAINED_PROGRESS
            || (self.progress.is_some() && json.len() >= CHAINED_PROGRESS / 2);
        if !chained {
            return (ProgressWrite::Inline, self.forget_progress());
        }
        let chain = self.progress.get_or_insert_with(Chain::default);
        // Kept as the chain's last value only when it is chained.
        let (write, ended) = chain.store(&Arc::from(json), &mut self.next);
        let leftover = if ended {
            Leftover::Deltas
        } else {
            Leftover::Nothing
        };
        (ProgressWrite::Chained(write), leftover)
    }

    /// Forgets the progress's chain (the progress goes elsewhere now).
    pub fn forget_progress(&mut self) -> Leftover {
        match self.progress.take() {
            Some(_) => Leftover::Chain,
            None => Leftover::Nothing,
        }
    }

    /// The progress's chain as the record names it, if it has one.
    pub fn progress(&self) -> Option<Vec<u64>> {
        self.progress.as_ref().map(|chain| chain.seqs.clone())
    }

    /// Forgets field `name` (stored elsewhere now, or gone); whether it
    /// leaves deltas behind.
    pub fn forget(&mut self, name: &str) -> bool {
        self.fields.remove(name).is_some_and(|c| !c.seqs.is_empty())
    }

    /// Forgets every field not in `names` (sorted); returns those that
    /// leave deltas behind.
    pub fn keep_only(&mut self, names: &[String]) -> Vec<String> {
        let gone: Vec<String> = self
            .fields
            .keys()
            .filter(|name| names.binary_search(name).is_err())
            .cloned()
            .collect();
        gone.into_iter().filter(|name| self.forget(name)).collect()
    }

    /// What the record names: each field's chain, by name.
    pub fn named(&self) -> Vec<(String, Vec<u64>)> {
        let mut named: Vec<(String, Vec<u64>)> = self
            .fields
            .iter()
            .filter(|(_, chain)| !chain.seqs.is_empty())
            .map(|(name, chain)| (name.clone(), chain.seqs.clone()))
            .collect();
        named.sort_unstable();
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_rebuilds_the_new_value_byte_for_byte() {
        let long = "x".repeat(10_000);
        let messages = |n: usize| -> String {
            let items: Vec<String> = (0..n)
                .map(|i| format!("\"message {i}: {}\"", "é".repeat(40)))
                .collect();
            items.join(",")
        };
        let twice = |n: usize| {
            format!(
                r#"{{"writes":[{}],"next":{n},"task":[{}]}}"#,
                messages(n),
                messages(n)
            )
        };
        let cases = [
            (r#"["a","b"]"#.to_owned(), r#"["a","b","c"]"#.to_owned()),
            (r#""héllo""#.into(), r#""héllo wörld""#.into()),
            ("".into(), "anything".into()),
            ("abc".into(), "xyz".into()),
            ("ééé".into(), "ééè".into()),
            ("long".into(), "lo".into()),
            ("aaaa".into(), "aa".into()),
            ("aa".into(), "aaaa".into()),
            (long.clone(), format!("{long}y")),
            (twice(40), twice(41)),
            (messages(60), format!("[{}]", messages(30))),
        ];
        for (old, new) in &cases {
            let delta = DeltaRecord::between(old.as_bytes(), new.as_bytes());
            let rebuilt = delta.apply(old.as_bytes()).expect("fits");
            assert_eq!(
                String::from_utf8(rebuilt).as_deref(),
                Ok(new.as_str()),
                "{old} -> {new}"
            );
        }
        let appended = DeltaRecord::between(long.as_bytes(), format!("{long}y").as_bytes());
        assert_eq!(appended.size(), 2 * OP_BYTES + 1, "{appended:?}");
        // A list that grew in two places, with a counter between: about
        // the two new items, not the second list again.
        let grown = DeltaRecord::between(twice(40).as_bytes(), twice(41).as_bytes());
        let item = format!("\"message 40: {}\",", "é".repeat(40)).len();
        assert!(
            grown.size() < 2 * item + 16 * OP_BYTES,
            "{} bytes for two items of {item}",
            grown.size()
        );
    }

    /// A list grown at its tail, held twice with a counter between them
    /// (a loop's writes and its in-flight task's state): what each step
    /// adds, whatever the text.
    fn progress(messages: &[String], turn: usize) -> String {
        let list = serde_json::to_string(messages).unwrap();
        format!(
            r#"{{"runs":[{{"writes":{{"messages":{list}}}}}],"turn":{turn},"overlay":{{"messages":{list}}}}}"#
        )
    }

    #[test]
    fn a_list_grown_twice_costs_what_it_adds_even_when_its_text_repeats() {
        for (text, message) in [
            (
                "repetitive",
                &(|_: usize| "x".repeat(1_000)) as &dyn Fn(usize) -> String,
            ),
            ("unique", &|n: usize| {
                format!(
                    "{n:04}-{}",
                    (0..200)
                        .map(|k| ((n * 7 + k * 13) % 26) as u8 + b'a')
                        .map(char::from)
                        .collect::<String>()
                        .repeat(5)
                )
            }),
        ] {
            let mut messages: Vec<String> = (0..300).map(message).collect();
            let old = progress(&messages, 300);
            messages.extend((300..303).map(message));
            let new = progress(&messages, 303);
            let delta = DeltaRecord::between(old.as_bytes(), new.as_bytes());
            assert_eq!(delta.apply(old.as_bytes()).as_deref(), Some(new.as_bytes()));
            let added = 2 * (new.len() - old.len());
            // Repetitive text is found in the old value; unique text is
            // inserted, once per place it was added.
            let bound = match text {
                "repetitive" => 64 * OP_BYTES,
                _ => added + 64 * OP_BYTES,
            };
            assert!(
                delta.size() < bound,
                "{text}: a delta of {} bytes for {added} bytes added to a value of {}",
                delta.size(),
                old.len()
            );
        }
    }

    proptest::proptest! {
        /// Whatever the two values, the delta rebuilds the new one exactly;
        /// values drawn from few letters repeat themselves a lot.
        #[test]
        fn any_delta_rebuilds_its_value(
            old in proptest::collection::vec(proptest::sample::select(b"ab,\"x".to_vec()), 0..400),
            cuts in proptest::collection::vec((0usize..400, 0usize..400, proptest::collection::vec(proptest::sample::select(b"abx".to_vec()), 0..80)), 0..4),
        ) {
            let mut new = old.clone();
            for (at, removed, inserted) in cuts {
                let at = at.min(new.len());
                let end = (at + removed % 60).min(new.len());
                new.splice(at..end, inserted);
            }
            let delta = DeltaRecord::between(&old, &new);
            proptest::prop_assert_eq!(delta.apply(&old), Some(new));
        }
    }

    #[test]
    fn a_delta_of_another_value_is_refused() {
        let beyond = DeltaRecord {
            ops: vec![Op::Copy { from: 3, len: 10 }],
        };
        assert_eq!(beyond.apply(b"short"), None);
        let huge = DeltaRecord {
            ops: vec![Op::Copy {
                from: u64::MAX,
                len: 2,
            }],
        };
        assert_eq!(huge.apply(b"short"), None, "no overflow");
    }

    fn list(items: usize) -> Arc<str> {
        let items: Vec<String> = (0..items).map(|i| format!("\"message {i:04}\"")).collect();
        Arc::from(format!("[{}]", items.join(",")))
    }

    #[test]
    fn appends_go_as_deltas_until_they_outweigh_the_base() {
        let mut chains = Chains::default();
        let base = list(10);
        let (first, ended) = chains.store("messages", &base);
        assert!(matches!(first, FieldWrite::Whole) && !ended);
        // Each append adds `,"message NNNN"`: 15 bytes, and three ops.
        let fit = base.len() / (15 + 3 * OP_BYTES);
        for n in 11..11 + fit {
            let (write, ended) = chains.store("messages", &list(n));
            let FieldWrite::Delta { seq, record } = write else {
                panic!("append {n} was written whole");
            };
            assert_eq!(seq as usize, n - 11, "numbered in order");
            assert_eq!(record.size(), 15 + 3 * OP_BYTES, "only the new item");
            assert!(!ended);
        }
        let chain: Vec<u64> = (0..fit as u64).collect();
        assert_eq!(chains.named(), [("messages".to_owned(), chain.clone())]);
        let (write, ended) = chains.store("messages", &list(11 + fit));
        assert!(
            matches!(write, FieldWrite::Whole),
            "the next outweighs the base"
        );
        assert!(ended, "its chain is stale");
        assert!(chains.named().is_empty());
    }

    #[test]
    fn a_rewrite_is_whole_and_a_restored_chain_starts_over() {
        let mut chains = Chains::default();
        chains.store("draft", &Arc::from("\"first version of the text\""));
        let (write, _) = chains.store("draft", &Arc::from("\"an entirely new text\""));
        assert!(matches!(write, FieldWrite::Whole));
        let mut restored = Chains::restored(&[("messages".into(), vec![3, 7])], None);
        let (write, ended) = restored.store("messages", &list(5));
        assert!(
            matches!(write, FieldWrite::Whole),
            "its last value is not known"
        );
        assert!(ended, "the stored chain is stale");
        restored.store("messages", &list(6));
        assert_eq!(
            restored.named(),
            [("messages".to_owned(), vec![8])],
            "numbers go on"
        );
        assert_eq!(restored.keep_only(&["other".into()]), ["messages"]);
        assert!(restored.named().is_empty());
    }

    #[test]
    fn a_large_progress_goes_to_its_chain_and_a_small_one_back_inline() {
        let mut chains = Chains::restored(&[], Some(&[9]));
        let big = |n: usize| -> Arc<str> {
            Arc::from(format!("{{\"items\":[{}],\"n\":{n}}}", "1,".repeat(n)))
        };
        let (write, leftover) = chains.store_progress(&big(CHAINED_PROGRESS));
        assert!(matches!(write, ProgressWrite::Chained(FieldWrite::Whole)));
        assert_eq!(leftover, Leftover::Deltas, "the restored chain's deltas");
        let (write, _) = chains.store_progress(&big(CHAINED_PROGRESS + 1));
        let ProgressWrite::Chained(FieldWrite::Delta { seq, record }) = write else {
            panic!("a grown progress is a delta");
        };
        assert_eq!(seq, 10, "numbered after what the record named");
        assert!(record.size() < 60, "{record:?}");
        assert_eq!(chains.progress(), Some(vec![10]));
        let (write, leftover) = chains.store_progress(&Arc::from("{}"));
        assert!(matches!(write, ProgressWrite::Inline));
        assert_eq!(leftover, Leftover::Chain, "base and deltas go");
        assert_eq!(chains.progress(), None);
    }
}
