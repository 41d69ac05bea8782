//! The current wave: its members, what each came to, and the phase it is
//! in (running, merging with worker-hosted reducers, routing with
//! worker-hosted predicates). A wave holds S0, the committed state when it
//! started, which every member sees.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::events::{CallKey, RunId, State, TaskKey};
use super::map_run::MapRun;
use super::merge::MergeOutcome;
use super::routing::Query;
use crate::graph::NodeIdx;

/// What a member of the wave came to so far.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Member {
    Running,
    /// Waits for a person; its prompt is rendered once, when it starts.
    Waiting {
        prompt: String,
    },
    Succeeded {
        changes: Map<String, Value>,
        next: Option<String>,
    },
    FellBack,
    Mapping(Box<MapRun>),
    /// A subgraph node's child run; its id once started.
    Child {
        run_id: Option<RunId>,
        /// 1 for the first child; a failed child is retried per the
        /// node's `retry` with a new one.
        #[serde(default = "first_attempt")]
        attempt: u32,
        /// Set while the next attempt waits for its delay: the timer's key.
        #[serde(default)]
        retry_due: Option<TaskKey>,
        /// What the child waits for people to answer, while it does.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        waiting: Vec<PersonWait>,
    },
}

/// A request for a person inside a child run, as its parent lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PersonWait {
    /// Its path from the parent: `bar/ask` for node `ask` of subgraph node
    /// `bar`'s child.
    pub path: String,
    /// `approval` or `input`.
    pub kind: String,
    /// Its rendered prompt.
    pub prompt: String,
    /// Whether the parent told its watchers already.
    #[serde(default)]
    pub announced: bool,
}

fn first_attempt() -> u32 {
    1
}

/// Where the wave stands once its members have finished.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Phase {
    Running,
    /// Waiting for worker-hosted reducers.
    Merging {
        outcome: MergeOutcome,
        pending: HashMap<CallKey, String>,
    },
    /// Waiting for worker-hosted predicates and routers.
    Routing {
        overlay: Map<String, Value>,
        view: State,
        changed: Vec<String>,
        pending: HashMap<CallKey, Query>,
        #[serde(with = "pairs")]
        answers: HashMap<Query, Value>,
    },
}

/// The wave in progress; see the module docs.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Wave {
    step: u32,
    /// The committed state when the wave started (the run's state until
    /// the wave commits); not stored, relinked on restore.
    #[serde(skip)]
    s0: State,
    members: Vec<NodeIdx>,
    outcomes: Vec<Member>,
    /// The wave's phase.
    pub(super) phase: Phase,
    /// Members whose wait for a human has been announced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    announced: Vec<NodeIdx>,
    /// The writes of succeeded members held as their text
    /// ([`crate::held`]), whose value in the member's changes is a
    /// placeholder: stored with the wave, so a restored run still has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    held: Vec<HeldWrite>,
}

/// A member's write of `field`, held as its JSON text.
#[derive(Debug, Serialize, Deserialize)]
struct HeldWrite {
    node: NodeIdx,
    field: String,
    #[serde(with = "raw_text")]
    text: Arc<str>,
}

/// A held text stored as the JSON it is, not as a string of it.
mod raw_text {
    use std::sync::Arc;

    use serde::de::Error as _;
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::value::RawValue;

    pub(super) fn serialize<S: Serializer>(text: &Arc<str>, to: S) -> Result<S::Ok, S::Error> {
        // Borrowed: checked, not copied.
        let raw: &RawValue = serde_json::from_str(text).map_err(S::Error::custom)?;
        raw.serialize(to)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Arc<str>, D::Error> {
        let raw = Box::<RawValue>::deserialize(from).map_err(D::Error::custom)?;
        Ok(Arc::from(raw.get()))
    }
}

impl Wave {
    /// Wave `step` over `members`, all running, on S0.
    pub(super) fn new(step: u32, s0: State, members: Vec<NodeIdx>) -> Self {
        Self {
            step,
            s0,
            outcomes: members.iter().map(|_| Member::Running).collect(),
            members,
            phase: Phase::Running,
            announced: Vec::new(),
            held: Vec::new(),
        }
    }

    /// Keeps member `node`'s writes held as their text, by field.
    pub(super) fn hold(&mut self, node: NodeIdx, held: BTreeMap<String, Arc<str>>) {
        self.held.retain(|write| write.node != node);
        self.held.extend(
            held.into_iter()
                .map(|(field, text)| HeldWrite { node, field, text }),
        );
    }

    /// The held writes the wave commits: those of members that succeeded
    /// (not of one that fell back after its routing failed) whose field
    /// is among `committed`.
    pub(super) fn take_held(
        &mut self,
        committed: &Map<String, Value>,
    ) -> impl Iterator<Item = (String, Arc<str>)> + use<> {
        let succeeded: Vec<NodeIdx> = self
            .iter()
            .filter(|(_, member)| matches!(member, Member::Succeeded { .. }))
            .map(|(node, _)| node)
            .collect();
        let mut held = std::mem::take(&mut self.held);
        held.retain(|write| {
            succeeded.contains(&write.node) && committed.contains_key(&write.field)
        });
        held.into_iter().map(|write| (write.field, write.text))
    }

    /// The wave's step number.
    pub(super) fn step(&self) -> u32 {
        self.step
    }

    /// The state every member sees.
    pub(super) fn s0(&self) -> &State {
        &self.s0
    }

    /// Lets go of S0, so the commit can update the state in place.
    pub(super) fn release_s0(&mut self) {
        self.s0 = State::default();
    }

    /// The members, in declaration order.
    pub(super) fn members(&self) -> &[NodeIdx] {
        &self.members
    }

    /// The members (the wave is over).
    pub(super) fn into_members(self) -> Vec<NodeIdx> {
        self.members
    }

    /// Each member with what it came to.
    pub(super) fn iter(&self) -> impl Iterator<Item = (NodeIdx, &Member)> {
        self.members.iter().copied().zip(&self.outcomes)
    }

    /// What a member came to, to change it.
    pub(super) fn member_mut(&mut self, node: NodeIdx) -> Option<&mut Member> {
        let position = self.members.iter().position(|&m| m == node)?;
        self.outcomes.get_mut(position)
    }

    /// Whether no member still runs (tasks or map items).
    pub(super) fn settled(&self) -> bool {
        !self.outcomes.iter().any(|s| {
            matches!(
                s,
                Member::Running | Member::Mapping(_) | Member::Child { .. }
            )
        })
    }

    /// Whether some member waits for a human.
    pub(super) fn has_waiting(&self) -> bool {
        self.outcomes
            .iter()
            .any(|s| matches!(s, Member::Waiting { .. }))
    }

    /// Whether what still runs is only child runs that wait for people:
    /// nothing moves until someone answers.
    pub(super) fn held_by_children(&self) -> bool {
        let mut children = self.outcomes.iter().filter_map(|s| match s {
            Member::Running | Member::Mapping(_) => Some(false),
            Member::Child { waiting, .. } => Some(!waiting.is_empty()),
            _ => None,
        });
        let first = children.next();
        first == Some(true) && children.all(|held| held)
    }

    /// The waiting members not announced yet, with their prompts, now
    /// marked announced: each wait is announced once, whatever is answered
    /// around it.
    pub(super) fn announce_waiting(&mut self) -> Vec<(NodeIdx, String)> {
        let fresh: Vec<(NodeIdx, String)> = self
            .iter()
            .filter_map(|(idx, slot)| match slot {
                Member::Waiting { prompt } if !self.announced.contains(&idx) => {
                    Some((idx, prompt.clone()))
                }
                _ => None,
            })
            .collect();
        self.announced.extend(fresh.iter().map(|(idx, _)| *idx));
        fresh
    }

    /// The requests of waiting child runs not announced yet, now marked
    /// announced.
    pub(super) fn announce_child_waits(&mut self) -> Vec<PersonWait> {
        let mut fresh = Vec::new();
        for slot in &mut self.outcomes {
            if let Member::Child { waiting, .. } = slot {
                for wait in waiting.iter_mut().filter(|w| !w.announced) {
                    wait.announced = true;
                    fresh.push(wait.clone());
                }
            }
        }
        fresh
    }

    /// Readies the wave of a fork's progress: `set`'s fields replace what
    /// map items and loops in progress wrote of them (their next steps read
    /// the fork's values); child runs in progress are the original's, so
    /// they are started afresh — except `adopt.0`, whose fork `adopt.1`
    /// the fork's subgraph node takes on.
    pub(super) fn fork_members(
        &mut self,
        set: &Map<String, Value>,
        adopt: Option<(&RunId, &RunId)>,
    ) {
        // The fork's log is its own: the waits for people its first wave
        // inherits are announced in it again.
        self.announced.clear();
        for slot in &mut self.outcomes {
            match slot {
                Member::Mapping(map) => map.replace_in_items(set),
                Member::Child {
                    run_id, waiting, ..
                } if run_id.is_some() => {
                    *run_id = match adopt {
                        Some((original, fork)) if run_id.as_ref() == Some(original) => {
                            Some(fork.clone())
                        }
                        _ => None,
                    };
                    waiting.clear();
                }
                _ => {}
            }
        }
    }

    /// The child runs started by the wave's subgraph members.
    pub(super) fn children(&self) -> Vec<RunId> {
        self.outcomes
            .iter()
            .filter_map(|slot| match slot {
                Member::Child { run_id, .. } => run_id.clone(),
                _ => None,
            })
            .collect()
    }

    /// The loop member waiting for call `call`'s judgement, if any.
    pub(super) fn loop_awaiting(&self, call: CallKey) -> Option<NodeIdx> {
        self.iter().find_map(|(idx, slot)| match slot {
            Member::Mapping(run) if run.awaits(call) => Some(idx),
            _ => None,
        })
    }

    /// What item `index` of map (or loop) `map` has written so far, while
    /// it runs.
    pub(super) fn item_writes(&self, map: &str, index: usize) -> Option<&State> {
        self.outcomes.iter().find_map(|slot| match slot {
            Member::Mapping(run) => run.item_writes(map, index),
            _ => None,
        })
    }

    /// Points the wave's S0, and its maps', at the restored state.
    pub(super) fn relink(&mut self, state: &State) {
        self.s0 = state.clone();
        for slot in &mut self.outcomes {
            if let Member::Mapping(map) = slot {
                map.relink(state);
            }
        }
    }
}

/// Maps with keys JSON cannot name, stored as lists of pairs.
mod pairs {
    use std::collections::HashMap;
    use std::hash::Hash;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &HashMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(map.iter())
    }

    pub fn deserialize<'de, K, V, D>(deserializer: D) -> Result<HashMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}
