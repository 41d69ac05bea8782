//! The coordinator's end of what a worker keeps by number for its
//! session: node definitions, and runs' bundle lists.
//!
//! A task's node definition (its id, kind and configuration) is the same
//! for every task of that node, and its run's bundle list (the files it
//! may fetch) for every task of the run. A worker that says it keeps them
//! (`keeps_nodes`, `keeps_bundles` in its hello) is sent each one once per
//! session, under a number, and after that only the number (`KeptRef`).
//! The worker's end is `weft_proto::worker_protocol::wire::Kept`. The
//! stream to a worker delivers in order, so a mirror is exact, as the state
//! fields' one is (`super::state_sync`).
//!
//! Each series of numbers runs from 1 to its limit (`MAX_KEPT_NODES`,
//! `MAX_KEPT_BUNDLES`) and is reused round the clock: a thing sent under a
//! number replaces what the worker kept under it, here and there, so
//! neither side keeps more than that many. The mirror holds each kept
//! thing, so the address it is known by cannot be reused by another while
//! it is kept.

use std::collections::HashMap;
use std::sync::Arc;

use weft_proto::worker_protocol::KeptRef;

/// What one worker keeps of one kind (`T`), by number.
#[derive(Debug)]
pub struct KeptMirror<T> {
    /// The worker keeps these; without it, every task carries its own.
    keeps: bool,
    /// The highest number, after which they are reused.
    limit: u64,
    /// Each kept thing's number, by its address.
    numbers: HashMap<usize, u64>,
    /// The thing kept under each number (index `number - 1`).
    kept: Vec<Option<Arc<T>>>,
    /// The number the next thing is kept under.
    hand: u64,
}

impl<T> KeptMirror<T> {
    /// The mirror of a worker that keeps things of this kind (`keeps`) or
    /// not, under the numbers 1 to `limit`.
    pub fn new(keeps: bool, limit: u64) -> Self {
        Self {
            keeps,
            limit,
            numbers: HashMap::new(),
            kept: Vec::new(),
            hand: 1,
        }
    }

    /// How a task carries `thing` to this worker. Call
    /// [`KeptMirror::sent`] once the message is on its way.
    pub fn prepare(&self, thing: &Arc<T>) -> KeptRef {
        if !self.keeps {
            return KeptRef::Carried;
        }
        match self.numbers.get(&address(thing)) {
            Some(&number) => KeptRef::Held(number),
            None => KeptRef::Keep(self.hand),
        }
    }

    /// A task that carries `thing` as `how` reached the worker's stream:
    /// it keeps what the task carried.
    pub fn sent(&mut self, thing: &Arc<T>, how: KeptRef) {
        let KeptRef::Keep(number) = how else {
            return;
        };
        let slot = (number - 1) as usize;
        if self.kept.len() <= slot {
            self.kept.resize_with(slot + 1, || None);
        }
        if let Some(replaced) = self.kept[slot].replace(thing.clone()) {
            self.numbers.remove(&address(&replaced));
        }
        self.numbers.insert(address(thing), number);
        self.hand = number % self.limit + 1;
    }
}

/// What a kept thing is known by: its address, which the mirror's hold on
/// it keeps from being reused.
fn address<T>(thing: &Arc<T>) -> usize {
    Arc::as_ptr(thing) as usize
}

#[cfg(test)]
pub(crate) mod tests {
    use weft_proto::types::WorkerKind;
    use weft_proto::worker_protocol::NodeDefinition;
    use weft_proto::worker_protocol::wire::MAX_KEPT_NODES;

    use super::*;

    /// A handler node's definition, of a plan of its own.
    pub(crate) fn definition(node: &str) -> Arc<NodeDefinition> {
        let config = format!(r#"{{"handler":"{node}"}}"#);
        Arc::new(NodeDefinition::new(
            node.into(),
            WorkerKind::Task,
            config.into(),
        ))
    }

    fn send(mirror: &mut KeptMirror<NodeDefinition>, definition: &Arc<NodeDefinition>) -> KeptRef {
        let how = mirror.prepare(definition);
        mirror.sent(definition, how);
        how
    }

    #[test]
    fn a_definition_crosses_once_then_goes_by_number() {
        let mut mirror = KeptMirror::new(true, MAX_KEPT_NODES);
        let (a, b) = (definition("a"), definition("b"));
        assert_eq!(send(&mut mirror, &a), KeptRef::Keep(1));
        assert_eq!(send(&mut mirror, &b), KeptRef::Keep(2));
        assert_eq!(send(&mut mirror, &a), KeptRef::Held(1));
        assert_eq!(send(&mut mirror, &b), KeptRef::Held(2));
        // An equal definition of another plan is another definition.
        assert_eq!(send(&mut mirror, &definition("a")), KeptRef::Keep(3));
    }

    #[test]
    fn a_task_not_sent_teaches_nothing() {
        let mirror = KeptMirror::new(true, MAX_KEPT_NODES);
        let a = definition("a");
        assert_eq!(mirror.prepare(&a), KeptRef::Keep(1));
        assert_eq!(mirror.prepare(&a), KeptRef::Keep(1));
    }

    #[test]
    fn a_worker_that_keeps_none_is_sent_each_definition_whole() {
        let mut mirror = KeptMirror::new(false, MAX_KEPT_NODES);
        let a = definition("a");
        assert_eq!(send(&mut mirror, &a), KeptRef::Carried);
        assert_eq!(send(&mut mirror, &a), KeptRef::Carried);
    }

    #[test]
    fn numbers_are_reused_round_the_clock_and_replace_what_they_held() {
        let mut mirror = KeptMirror::new(true, MAX_KEPT_NODES);
        let all: Vec<_> = (0..MAX_KEPT_NODES + 1)
            .map(|n| definition(&n.to_string()))
            .collect();
        for (n, each) in all.iter().enumerate() {
            let how = send(&mut mirror, each);
            let expected = n as u64 % MAX_KEPT_NODES + 1;
            assert_eq!(how, KeptRef::Keep(expected));
        }
        // The first was replaced under number 1 by the last.
        assert_eq!(mirror.prepare(&all[0]), KeptRef::Keep(2));
        assert_eq!(mirror.prepare(&all[1]), KeptRef::Held(2));
        assert_eq!(
            mirror.prepare(&all[MAX_KEPT_NODES as usize]),
            KeptRef::Held(1)
        );
        assert_eq!(mirror.numbers.len(), MAX_KEPT_NODES as usize);
    }
}
