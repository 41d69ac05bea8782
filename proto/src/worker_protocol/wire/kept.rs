//! What a worker keeps for its session by number ([`Kept`]): node
//! definitions and runs' bundle lists, which a coordinator sends once per
//! worker and then names, and the last run id read. A task's message is
//! read against it in stream order, so it is what the coordinator's
//! mirror of it says (`weft_coordinator`'s `dispatch::kept_sync`).

use std::collections::HashMap;
use std::sync::Arc;

use super::super::{BlobRef, KeptRef, NodeDefinition};
use crate::types::WorkerKind;
use crate::v1 as pb;
use crate::{NodeId, RunId, SharedText};

/// The most node definitions a worker keeps for a session: the numbers a
/// coordinator gives them run from 1 to this, and a worker refuses a
/// larger one.
pub const MAX_KEPT_NODES: u64 = 1024;

/// The most runs' bundle lists a worker keeps for a session, numbered as
/// node definitions are (in a series of their own).
pub const MAX_KEPT_BUNDLES: u64 = 1024;

/// What a worker keeps for its session by the number its coordinator gave
/// each: node definitions, and runs' bundle lists. A definition whose kind
/// the worker cannot run is kept as why, so that a later task naming it
/// fails the same way instead of running what the number held before.
#[derive(Debug, Default)]
pub struct Kept {
    nodes: HashMap<u64, Result<Arc<NodeDefinition>, String>>,
    bundles: HashMap<u64, Arc<Vec<BlobRef>>>,
    /// The run of the last task read: the next task of the same run (a
    /// map's items come one after another) shares its id.
    last_run: Option<RunId>,
    /// The map of the last map item's task read, shared the same way.
    last_map: Option<NodeId>,
}

impl Kept {
    /// How many node definitions are kept.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// How many bundle lists are kept.
    pub fn bundles(&self) -> usize {
        self.bundles.len()
    }

    /// The run id `text`, shared with the last task's when it is the same.
    pub(super) fn run_id(&mut self, text: &SharedText) -> RunId {
        shared_with_last(&mut self.last_run, text)
    }

    /// The map id `text`, shared with the last item's when it is the same.
    pub(super) fn map_id(&mut self, text: &SharedText) -> NodeId {
        shared_with_last(&mut self.last_map, text)
    }

    /// A task's node definition: the one it carries (kept under its number,
    /// if it has one), or the one kept under the number it names.
    pub(super) fn definition(
        &mut self,
        wire: &mut pb::TaskAssignment,
    ) -> Result<(Arc<NodeDefinition>, KeptRef), String> {
        let number = wire.node_ref;
        if number > MAX_KEPT_NODES {
            return Err(format!(
                "node definition {number} is above the {MAX_KEPT_NODES} a worker keeps"
            ));
        }
        if number != 0 && wire.kind.is_empty() {
            return match self.nodes.get(&number) {
                Some(Ok(definition)) => Ok((definition.clone(), KeptRef::Held(number))),
                Some(Err(error)) => Err(error.clone()),
                None => Err(format!(
                    "node definition {number} is not kept by this worker"
                )),
            };
        }
        let read = match wire.kind.parse::<WorkerKind>() {
            Ok(kind) => Ok(Arc::new(NodeDefinition::new(
                std::mem::take(&mut wire.node).into(),
                kind,
                std::mem::take(&mut wire.config_json).into(),
            ))),
            Err(_) => Err(format!("this worker cannot run kind '{}'", wire.kind)),
        };
        if number == 0 {
            return read.map(|definition| (definition, KeptRef::Carried));
        }
        self.nodes.insert(number, read.clone());
        read.map(|definition| (definition, KeptRef::Keep(number)))
    }

    /// A task's bundle list: the one it carries (kept under its number, if it
    /// has one), or the one kept under the number it names.
    pub(super) fn bundle(
        &mut self,
        wire: &mut pb::TaskAssignment,
    ) -> Result<(Arc<Vec<BlobRef>>, KeptRef), String> {
        let (keep, held) = (wire.bundle_keep, wire.bundle_held);
        if let Some(number) = [keep, held].into_iter().find(|&n| n > MAX_KEPT_BUNDLES) {
            return Err(format!(
                "bundle list {number} is above the {MAX_KEPT_BUNDLES} a worker keeps"
            ));
        }
        if keep != 0 && held != 0 {
            return Err(format!(
                "the task both carries bundle list {keep} and names bundle list {held}"
            ));
        }
        if held != 0 {
            if !wire.bundle.is_empty() {
                return Err(format!(
                    "the task names bundle list {held} and also carries one"
                ));
            }
            return match self.bundles.get(&held) {
                Some(bundle) => Ok((bundle.clone(), KeptRef::Held(held))),
                None => Err(format!("bundle list {held} is not kept by this worker")),
            };
        }
        let bundle: Arc<Vec<BlobRef>> = Arc::new(
            std::mem::take(&mut wire.bundle)
                .into_iter()
                .map(BlobRef::from)
                .collect(),
        );
        if keep == 0 {
            return Ok((bundle, KeptRef::Carried));
        }
        self.bundles.insert(keep, bundle.clone());
        Ok((bundle, KeptRef::Keep(keep)))
    }
}

/// How a message carries a kept thing, as the two numbers it writes: the
/// number, and whether the thing itself is carried.
pub(super) fn numbered(how: KeptRef) -> (u64, bool) {
    match how {
        KeptRef::Carried => (0, true),
        KeptRef::Keep(number) => (number, true),
        KeptRef::Held(number) => (number, false),
    }
}

/// `text` as an id, `last`'s when they are the same, else made and kept
/// in `last` for the next. An id that is not UTF-8 is read with its bad
/// bytes replaced: it names nothing the coordinator has, and the answer
/// to its task is ignored there.
pub(super) fn shared_with_last<Id>(last: &mut Option<Id>, text: &SharedText) -> Id
where
    Id: Clone + std::ops::Deref<Target = str> + From<Arc<str>>,
{
    match last {
        Some(id) if id.as_bytes() == text.as_bytes() => id.clone(),
        _ => {
            let made = text
                .to_shared()
                .unwrap_or_else(|_| Arc::from(String::from_utf8_lossy(text.as_bytes()).as_ref()));
            last.insert(Id::from(made)).clone()
        }
    }
}
