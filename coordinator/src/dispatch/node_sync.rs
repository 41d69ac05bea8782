//! The coordinator's end of node sync: which node definitions each worker
//! keeps.
//!
//! A task's node definition (its id, kind and configuration) is the same
//! for every task of that node, so a worker that says it keeps them
//! (`keeps_nodes` in its hello) is sent each one once per session, under a
//! number, and after that only the number (`NodeRef`). The worker's end is
//! `weft_proto::worker_protocol::wire::KeptNodes`. The stream to a worker
//! delivers in order, so this mirror is exact, as the state fields' one is
//! (`super::state_sync`).
//!
//! The numbers run from 1 to `MAX_KEPT_NODES` and are reused round the
//! clock: a definition sent under a number replaces what the worker kept
//! under it, here and there, so neither side keeps more than that many.
//! The mirror holds each kept definition, so the address it is known by
//! cannot be reused by another while it is kept.

use std::collections::HashMap;
use std::sync::Arc;

use weft_proto::worker_protocol::wire::MAX_KEPT_NODES;
use weft_proto::worker_protocol::{NodeDefinition, NodeRef};

/// The node definitions one worker keeps, by number.
#[derive(Debug)]
pub struct NodeMirror {
    /// The worker keeps definitions; without it, every task carries its own.
    keeps: bool,
    /// Each kept definition's number, by its address.
    numbers: HashMap<usize, u64>,
    /// The definition kept under each number (index `number - 1`).
    kept: Vec<Option<Arc<NodeDefinition>>>,
    /// The number the next definition is kept under.
    hand: u64,
}

impl NodeMirror {
    /// The mirror of a worker that keeps definitions (`keeps`) or not.
    pub fn new(keeps: bool) -> Self {
        Self {
            keeps,
            numbers: HashMap::new(),
            kept: Vec::new(),
            hand: 1,
        }
    }

    /// How a task of `definition` carries it to this worker. Call
    /// [`NodeMirror::sent`] once the message is on its way.
    pub fn prepare(&self, definition: &Arc<NodeDefinition>) -> NodeRef {
        if !self.keeps {
            return NodeRef::Carried;
        }
        match self.numbers.get(&address(definition)) {
            Some(&number) => NodeRef::Held(number),
            None => NodeRef::Keep(self.hand),
        }
    }

    /// A task of `definition`, prepared as `how`, reached the worker's
    /// stream: it keeps what the task carried.
    pub fn sent(&mut self, definition: &Arc<NodeDefinition>, how: NodeRef) {
        let NodeRef::Keep(number) = how else {
            return;
        };
        let slot = (number - 1) as usize;
        if self.kept.len() <= slot {
            self.kept.resize(slot + 1, None);
        }
        if let Some(replaced) = self.kept[slot].replace(definition.clone()) {
            self.numbers.remove(&address(&replaced));
        }
        self.numbers.insert(address(definition), number);
        self.hand = number % MAX_KEPT_NODES + 1;
    }
}

/// What a definition is known by: its address, which the mirror's hold on
/// it keeps from being reused.
fn address(definition: &Arc<NodeDefinition>) -> usize {
    Arc::as_ptr(definition) as usize
}

#[cfg(test)]
pub(crate) mod tests {
    use weft_proto::types::WorkerKind;

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

    fn send(mirror: &mut NodeMirror, definition: &Arc<NodeDefinition>) -> NodeRef {
        let how = mirror.prepare(definition);
        mirror.sent(definition, how);
        how
    }

    #[test]
    fn a_definition_crosses_once_then_goes_by_number() {
        let mut mirror = NodeMirror::new(true);
        let (a, b) = (definition("a"), definition("b"));
        assert_eq!(send(&mut mirror, &a), NodeRef::Keep(1));
        assert_eq!(send(&mut mirror, &b), NodeRef::Keep(2));
        assert_eq!(send(&mut mirror, &a), NodeRef::Held(1));
        assert_eq!(send(&mut mirror, &b), NodeRef::Held(2));
        // An equal definition of another plan is another definition.
        assert_eq!(send(&mut mirror, &definition("a")), NodeRef::Keep(3));
    }

    #[test]
    fn a_task_not_sent_teaches_nothing() {
        let mirror = NodeMirror::new(true);
        let a = definition("a");
        assert_eq!(mirror.prepare(&a), NodeRef::Keep(1));
        assert_eq!(mirror.prepare(&a), NodeRef::Keep(1));
    }

    #[test]
    fn a_worker_that_keeps_none_is_sent_each_definition_whole() {
        let mut mirror = NodeMirror::new(false);
        let a = definition("a");
        assert_eq!(send(&mut mirror, &a), NodeRef::Carried);
        assert_eq!(send(&mut mirror, &a), NodeRef::Carried);
    }

    #[test]
    fn numbers_are_reused_round_the_clock_and_replace_what_they_held() {
        let mut mirror = NodeMirror::new(true);
        let all: Vec<_> = (0..MAX_KEPT_NODES + 1)
            .map(|n| definition(&n.to_string()))
            .collect();
        for (n, each) in all.iter().enumerate() {
            let how = send(&mut mirror, each);
            let expected = n as u64 % MAX_KEPT_NODES + 1;
            assert_eq!(how, NodeRef::Keep(expected));
        }
        // The first was replaced under number 1 by the last.
        assert_eq!(mirror.prepare(&all[0]), NodeRef::Keep(2));
        assert_eq!(mirror.prepare(&all[1]), NodeRef::Held(2));
        assert_eq!(
            mirror.prepare(&all[MAX_KEPT_NODES as usize]),
            NodeRef::Held(1)
        );
        assert_eq!(mirror.numbers.len(), MAX_KEPT_NODES as usize);
    }
}
