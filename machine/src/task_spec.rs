//! What a task is given: its [`TaskSpec`] (node, attempt, item, timeout,
//! team seat, prompts) and the [`TaskState`] it sees, a view over the
//! wave's shared S0 that costs only what a map item changed.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use weft_proto::NodeId;

use super::task::{ItemRef, TaskKey, TeamSeat};

/// A state object, shared between the tasks of a wave without copying.
pub type State = Arc<Map<String, Value>>;

/// An empty [`State`], shared: a task with no overlay or scope allocates
/// none.
pub fn empty_state() -> State {
    static EMPTY: std::sync::LazyLock<State> = std::sync::LazyLock::new(State::default);
    EMPTY.clone()
}

/// Whether a stored state would be written as `{}` (left out of a task's
/// progress, read back as [`empty_state`]).
pub(crate) fn is_empty(state: &State) -> bool {
    state.is_empty()
}

/// A task for a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// This attempt's key.
    pub key: TaskKey,
    /// The node id.
    pub node: NodeId,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The map item, when the task is a step of a map item's chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<ItemRef>,
    /// The state the task sees.
    pub state: TaskState,
    /// The step's scope (a map item's `as` binding), shared with the item.
    #[serde(default = "empty_state", skip_serializing_if = "is_empty")]
    pub scope: State,
    /// Per-attempt deadline.
    pub timeout: Duration,
    /// For a `teammates: true` step of a map item with a team: its
    /// identity, its team and the messages handed to it. Set when the task
    /// is dispatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<TeamSeat>,
    /// For an `llm` or `agent` step: its prompts, rendered
    /// (`{"system", "prompt"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Map<String, Value>>,
    /// The key of the task's first attempt, for a retry (`None`: this is
    /// the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_key: Option<TaskKey>,
    /// Its node's `concurrency:`, its key rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<KeyedConcurrency>,
    /// The entry key of its node's `cache:` (SPEC 20), its key rendered;
    /// `None` when the node is not cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
}

/// A step's concurrency key, rendered (SPEC 18): at most `max` steps with
/// the same `key` run at once across the runs of a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedConcurrency {
    /// The rendered key.
    pub key: String,
    /// The most that run at once.
    pub max: u32,
}

/// The state a task sees: `base` (the wave's S0, shared by every task of
/// the wave) with `overlay` laid over it and `hidden` fields removed. A map
/// item's fork costs only what it changed, never a copy of the state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    /// The shared base. Not stored with the task: a restored run points it
    /// at the wave's S0 again.
    #[serde(skip)]
    pub base: State,
    /// Fields that differ from `base` (a map item's binding and writes).
    /// Not stored when it is its map item's writes ([`Self::item_writes`]).
    /// Shared with the item, so a step's fork copies nothing.
    #[serde(default = "empty_state", skip_serializing_if = "is_empty")]
    pub overlay: State,
    /// The overlay is the writes of the task's map item (or loop
    /// iteration), as they stand while the task is out: a checkpoint stores
    /// them once, with the item, and a restore lays them back here. A
    /// run's progress would otherwise hold a long loop's state twice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub item_writes: bool,
    /// The field of `base` the task must not see (a map's `output_key`),
    /// shared with its map. Stored as a list of at most one name.
    #[serde(default, with = "hidden_list", skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Arc<str>>,
}

/// [`TaskState::hidden`] as it is stored: a list of names (never more
/// than one is made; a stored list of several keeps the first).
mod hidden_list {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(hidden: &Option<Arc<str>>, to: S) -> Result<S::Ok, S::Error> {
        hidden.as_slice().serialize(to)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Option<Arc<str>>, D::Error> {
        let names = Vec::<Arc<str>>::deserialize(from)?;
        Ok(names.into_iter().next())
    }
}

/// The named fields of `state` (`None`: all of them), copied.
pub fn fields_of(
    state: &Map<String, Value>,
    names: Option<&std::collections::BTreeSet<String>>,
) -> Map<String, Value> {
    match names {
        None => state.clone(),
        Some(names) => names
            .iter()
            .filter_map(|name| state.get_key_value(name))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

impl TaskState {
    /// The whole of `base`, unchanged.
    pub fn whole(base: State) -> Self {
        Self {
            base,
            overlay: empty_state(),
            item_writes: false,
            hidden: None,
        }
    }

    /// Whether `name` is the field of `base` the task must not see.
    fn hides(&self, name: &str) -> bool {
        self.hidden.as_deref() == Some(name)
    }

    /// The fields, in order: the base's (minus hidden and overlaid ones),
    /// then the overlay's.
    pub fn fields(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.base
            .iter()
            .filter(|(name, _)| !self.overlay.contains_key(*name) && !self.hides(name))
            .chain(self.overlay.iter())
    }

    /// The state as one object (a copy).
    pub fn view(&self) -> Map<String, Value> {
        self.fields().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// The named fields only (`None`: all of them), copied: what an
    /// expression that reads those fields needs, whatever the state's size.
    pub fn view_of(
        &self,
        names: Option<&std::collections::BTreeSet<String>>,
    ) -> Map<String, Value> {
        let Some(names) = names else {
            return self.view();
        };
        names
            .iter()
            .filter(|name| !self.hides(name) || self.overlay.contains_key(*name))
            .filter_map(|name| {
                self.overlay
                    .get_key_value(name)
                    .or_else(|| self.base.get_key_value(name))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

impl TaskSpec {
    /// Drops the task's state at once and keeps its attempt and item. A
    /// partially moved spec would keep the state alive to the end of the
    /// caller's scope, and the merge updates the run's state in place only
    /// when nothing else holds it.
    pub(crate) fn release(self) -> (u32, Option<ItemRef>) {
        (self.attempt, self.item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn a_partial_view_holds_the_named_fields_as_the_task_sees_them() {
        let base: State = Arc::new(
            json!({"a": 1, "big": "x", "out": "from s0"})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let state = TaskState {
            base,
            overlay: Arc::new(json!({"a": 2, "item": "i"}).as_object().cloned().unwrap()),
            item_writes: false,
            hidden: Some("out".into()),
        };
        let names: std::collections::BTreeSet<String> = ["a", "item", "out", "missing"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(
            Value::Object(state.view_of(Some(&names))),
            json!({"a": 2, "item": "i"}),
            "the overlay wins, hidden and missing fields are absent"
        );
        assert_eq!(state.view_of(None), state.view());
    }

    #[test]
    fn a_hidden_field_is_stored_as_a_list_of_names() {
        let state = TaskState {
            hidden: Some("out".into()),
            ..TaskState::whole(empty_state())
        };
        let stored = serde_json::to_value(&state).unwrap();
        assert_eq!(stored["hidden"], json!(["out"]));
        let read: TaskState = serde_json::from_value(stored).unwrap();
        assert_eq!(read.hidden.as_deref(), Some("out"));
        let none: TaskState = serde_json::from_value(json!({"overlay": {}, "hidden": []})).unwrap();
        assert_eq!(none.hidden, None);
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            json!({}),
            "nothing hidden (and no overlay) is left out"
        );
        let bare: TaskState = serde_json::from_value(json!({})).unwrap();
        assert_eq!((bare.hidden, bare.overlay.len()), (None, 0));
    }
}
