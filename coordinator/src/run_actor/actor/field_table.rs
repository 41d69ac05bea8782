//! The committed state's fields as workers receive them: each serialized
//! once per version, so a task carries references to what its worker may
//! already hold rather than the state again.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use weft_proto::SharedText;
use weft_proto::events::SHOWN_VALUE_BYTES;

use crate::dispatch::StateField;
use crate::run_actor::{RunMachine, State, TaskState};

/// The committed state's fields, each serialized once per version.
///
/// Every task of a wave sees the same committed state (S0), so a field is
/// turned into JSON when it changes, not once per task; a map item's own
/// fields (its binding and writes) are versioned per task. Versions let the
/// dispatcher send a worker only the values it does not hold yet.
#[derive(Default)]
pub(super) struct FieldTable {
    fields: foldhash::HashMap<String, StateField>,
    next_version: u64,
    /// The names of fields written by map items' tasks (their bindings and
    /// writes), shared by every task that carries one; at most
    /// [`MOST_NAMES_KEPT`].
    names: foldhash::HashSet<Arc<str>>,
    /// Room a field's JSON is written into before it is shared.
    scratch: String,
}

/// How many names of items' fields a run's table shares; past it, a name
/// is made for each task.
const MOST_NAMES_KEPT: usize = 1024;

/// The room for JSON kept between fields; a larger value's is let go.
const SCRATCH_KEPT: usize = 64 * 1024;

impl FieldTable {
    /// Re-serializes the named fields of `machine`'s committed state; a
    /// field the run holds as its text takes that text, unparsed.
    pub(super) fn refresh<'a>(
        &mut self,
        machine: &RunMachine,
        names: impl Iterator<Item = &'a String>,
    ) {
        let state = machine.state();
        for name in names {
            let Some(value) = state.get(name) else {
                continue;
            };
            let field = match machine.held_text(name) {
                Some(text) => self.versioned(name, text.clone()),
                None => self.fresh(name, value),
            };
            self.fields.insert(name.clone(), field);
        }
    }

    /// What a `state_changed` event shows of the fields just refreshed:
    /// the values whose JSON is small, and the size of the others.
    pub(super) fn shown(
        &self,
        state: &State,
        names: &[String],
    ) -> (BTreeMap<String, Value>, BTreeMap<String, u64>) {
        let (mut values, mut folded) = (BTreeMap::new(), BTreeMap::new());
        for name in names {
            let json = self.fields.get(name.as_str()).and_then(|f| f.json.as_ref());
            let (Some(json), Some(value)) = (json, state.get(name)) else {
                continue;
            };
            if json.len() <= SHOWN_VALUE_BYTES {
                values.insert(name.clone(), value.clone());
            } else {
                folded.insert(name.clone(), json.len() as u64);
            }
        }
        (values, folded)
    }

    /// A step's scope as the text its task carries: written into the
    /// table's room, and held in place when it is short (a map item's
    /// binding mostly is), so a task's scope costs no allocation.
    pub(super) fn scope_text(&mut self, scope: &serde_json::Map<String, Value>) -> SharedText {
        self.in_room(
            |room| weft_proto::json::write_object(room, scope),
            SharedText::copied,
        )
    }

    fn fresh(&mut self, name: &str, value: &Value) -> StateField {
        let json = self.in_room(
            |room| weft_proto::json::write(room, value),
            |text| Arc::<str>::from(text),
        );
        self.versioned(name, json)
    }

    /// What `write` writes, written into the table's room and taken out by
    /// `take`; a room grown past [`SCRATCH_KEPT`] is let go.
    fn in_room<T>(&mut self, write: impl FnOnce(&mut String), take: impl FnOnce(&str) -> T) -> T {
        self.scratch.clear();
        write(&mut self.scratch);
        let taken = take(&self.scratch);
        if self.scratch.capacity() > SCRATCH_KEPT {
            self.scratch = String::new();
        }
        taken
    }

    fn versioned(&mut self, name: &str, json: Arc<str>) -> StateField {
        self.next_version += 1;
        StateField {
            name: self.name(name),
            version: self.next_version,
            json: Some(json),
        }
    }

    /// `name`, shared with the table's field or an earlier task's.
    fn name(&mut self, name: &str) -> Arc<str> {
        if let Some(field) = self.fields.get(name) {
            return field.name.clone();
        }
        if let Some(kept) = self.names.get(name) {
            return kept.clone();
        }
        let made: Arc<str> = Arc::from(name);
        if self.names.len() < MOST_NAMES_KEPT {
            self.names.insert(made.clone());
        }
        made
    }

    /// Every committed field: its name, version and JSON, for checkpoints
    /// (which store a field again only when its version moved).
    pub(super) fn committed(&self) -> impl Iterator<Item = (&str, u64, &Arc<str>)> {
        self.fields
            .values()
            .filter_map(|f| f.json.as_ref().map(|json| (&*f.name, f.version, json)))
    }

    /// The JSON text of each field of `state` (the committed state), in
    /// its order: the table's, which is the text of the field's current
    /// value (as the tasks sent to workers rely on; checked in debug
    /// builds), or written now for a field the table lacks.
    pub(super) fn texts(&self, state: &State) -> Vec<Arc<str>> {
        state
            .iter()
            .map(|(name, value)| {
                let Some(text) = self.fields.get(name.as_str()).and_then(|f| f.json.clone()) else {
                    return Arc::from(weft_proto::json::to_string(value));
                };
                // (Small ones only: a view is made for every status poll;
                // a field held as its text is 64 KiB or more, its value a
                // placeholder.)
                debug_assert!(
                    text.len() >= crate::run_actor::machine::held::HELD_FIELD_BYTES
                        || serde_json::from_str::<Value>(&text).ok().as_ref() == Some(value),
                    "the field table's text of '{name}' is not its value's"
                );
                text
            })
            .collect()
    }

    /// A task's fields: committed ones from the table, its own overlay
    /// fields versioned anew.
    pub(super) fn task_fields(&mut self, state: &TaskState) -> Vec<StateField> {
        let mut out = Vec::with_capacity(state.base.len() + state.overlay.len());
        for (name, value) in state.fields() {
            let committed = (!state.overlay.contains_key(name))
                .then(|| self.fields.get(name))
                .flatten();
            match committed {
                Some(field) => out.push(field.clone()),
                None => out.push(self.fresh(name, value)),
            }
        }
        out
    }
}
