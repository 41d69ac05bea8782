//! A run's task attempts: every attempt not yet returned, the queue of those
//! waiting for the run-wide concurrency cap, and how many are in flight.
//!
//! The table keeps its own invariants: a key is either queued or in flight,
//! never both; the in-flight count is the number of tasks flagged in flight;
//! keys are never reused, so a late result of an earlier attempt is known
//! for what it is.

use std::collections::VecDeque;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};
use serde::{Deserialize, Serialize};

use super::events::{ItemRef, State, TaskKey, TaskSpec, empty_state};
use crate::graph::NodeIdx;

/// One attempt the run waits for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TaskRef {
    /// The node it runs.
    pub(super) node: NodeIdx,
    /// The map item, for a chain step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) item: Option<usize>,
    /// What the worker receives. Shared with the dispatch effect, so a
    /// dispatch copies nothing; changed in place (`Arc::make_mut`) while
    /// the table alone holds it.
    pub(super) spec: Arc<TaskSpec>,
    /// Dispatched (rather than queued or waiting for a retry timer).
    pub(super) in_flight: bool,
}

/// The run's attempts; see the module docs.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct TaskTable {
    tasks: HashMap<TaskKey, TaskRef>,
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    queue: VecDeque<TaskKey>,
    in_flight: usize,
    next_key: TaskKey,
}

impl Default for TaskTable {
    fn default() -> Self {
        Self {
            tasks: HashMap::new(),
            queue: VecDeque::new(),
            in_flight: 0,
            next_key: TaskKey(1),
        }
    }
}

impl TaskTable {
    /// A key no attempt of this run has had.
    pub(super) fn new_key(&mut self) -> TaskKey {
        let key = self.next_key;
        self.next_key = key.next();
        key
    }

    /// Adds an attempt: queued for dispatch, or (a retry) parked until its
    /// timer fires and [`TaskTable::requeue`] queues it.
    pub(super) fn add(&mut self, key: TaskKey, task: TaskRef, queued: bool) {
        debug_assert!(!task.in_flight, "a new attempt is not in flight yet");
        debug_assert!(key < self.next_key, "keys come from new_key");
        if queued {
            self.queue.push_back(key);
        }
        self.tasks.insert(key, task);
        self.check();
    }

    /// Queues a parked attempt (its retry is due); false if it is unknown,
    /// already queued or in flight.
    pub(super) fn requeue(&mut self, key: TaskKey) -> bool {
        let parked = self.tasks.get(&key).is_some_and(|t| !t.in_flight);
        if !parked || self.queue.contains(&key) {
            return false;
        }
        self.queue.push_back(key);
        true
    }

    /// Takes the next queued attempt in flight, if `cap` (0: none) allows.
    pub(super) fn start_next(&mut self, cap: usize) -> Option<&mut TaskRef> {
        if cap != 0 && self.in_flight >= cap {
            return None;
        }
        while let Some(key) = self.queue.pop_front() {
            if self.tasks.contains_key(&key) {
                self.in_flight += 1;
                let task = self.tasks.get_mut(&key)?;
                task.in_flight = true;
                return Some(task);
            }
        }
        None
    }

    /// An attempt, queued, parked or in flight.
    pub(super) fn get(&self, key: TaskKey) -> Option<&TaskRef> {
        self.tasks.get(&key)
    }

    /// Removes an attempt (it returned, or is given up on).
    pub(super) fn take(&mut self, key: TaskKey) -> Option<TaskRef> {
        let task = self.tasks.remove(&key)?;
        if task.in_flight {
            self.in_flight -= 1;
        } else {
            self.queue.retain(|&k| k != key);
        }
        self.check();
        Some(task)
    }

    /// Removes every attempt; returns the keys that were in flight, sorted.
    pub(super) fn clear(&mut self) -> Vec<TaskKey> {
        let mut in_flight: Vec<TaskKey> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.in_flight)
            .map(|(&k, _)| k)
            .collect();
        in_flight.sort_unstable();
        self.tasks.clear();
        self.queue.clear();
        self.in_flight = 0;
        in_flight
    }

    /// The keys of the attempts of one map's items.
    pub(super) fn of_map(&self, map_id: &str) -> Vec<TaskKey> {
        let mut keys: Vec<TaskKey> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.spec.item.as_ref().is_some_and(|i| i.map == map_id))
            .map(|(&k, _)| k)
            .collect();
        keys.sort_unstable();
        keys
    }

    /// Attempts dispatched and not yet returned.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Points every attempt's state at `s0` again after a restore (the
    /// shared base is not stored with each attempt).
    pub(super) fn relink(&mut self, s0: &State) {
        for task in self.tasks.values_mut() {
            Arc::make_mut(&mut task.spec).state.base = s0.clone();
        }
    }

    /// Takes out the overlays that are their map item's writes (checked
    /// against `writes_of`), to store the progress without them; an
    /// overlay that differs stays and loses its mark. [`Self::put_back`]
    /// returns them.
    pub(super) fn lend_item_overlays<'a>(
        &mut self,
        writes_of: impl Fn(&ItemRef) -> Option<&'a State>,
    ) -> Vec<(TaskKey, State)> {
        let mut lent = Vec::new();
        for (&key, task) in &mut self.tasks {
            if !task.spec.state.item_writes {
                continue;
            }
            let item = task.spec.item.as_ref().and_then(&writes_of);
            let same = item.is_some_and(|w| {
                Arc::ptr_eq(w, &task.spec.state.overlay) || **w == *task.spec.state.overlay
            });
            let state = &mut Arc::make_mut(&mut task.spec).state;
            if same {
                lent.push((key, std::mem::replace(&mut state.overlay, empty_state())));
            } else {
                state.item_writes = false;
            }
        }
        lent
    }

    /// Returns what [`Self::lend_item_overlays`] took.
    pub(super) fn put_back(&mut self, lent: Vec<(TaskKey, State)>) {
        for (key, overlay) in lent {
            if let Some(task) = self.tasks.get_mut(&key) {
                Arc::make_mut(&mut task.spec).state.overlay = overlay;
            }
        }
    }

    /// Lays each restored attempt's item writes back as its overlay; the
    /// key of one whose item is not in the wave.
    pub(super) fn relay_item_overlays<'a>(
        &mut self,
        writes_of: impl Fn(&ItemRef) -> Option<&'a State>,
    ) -> Result<(), TaskKey> {
        for (&key, task) in &mut self.tasks {
            if !task.spec.state.item_writes {
                continue;
            }
            let writes = task.spec.item.as_ref().and_then(&writes_of).ok_or(key)?;
            Arc::make_mut(&mut task.spec).state.overlay = Arc::clone(writes);
        }
        Ok(())
    }

    /// What a new process must do for the attempts it restored: the specs
    /// in flight (sorted by key), and the keys parked for a retry timer.
    pub(super) fn outstanding(&self) -> (Vec<Arc<TaskSpec>>, Vec<TaskKey>) {
        let mut in_flight: Vec<(TaskKey, Arc<TaskSpec>)> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.in_flight)
            .map(|(&k, t)| (k, t.spec.clone()))
            .collect();
        in_flight.sort_unstable_by_key(|(k, _)| *k);
        let mut parked: Vec<TaskKey> = self
            .tasks
            .iter()
            .filter(|(k, t)| !t.in_flight && !self.queue.contains(k))
            .map(|(&k, _)| k)
            .collect();
        parked.sort_unstable();
        (
            in_flight.into_iter().map(|(_, spec)| spec).collect(),
            parked,
        )
    }

    /// In debug builds: the in-flight count matches the flags, and no key
    /// is both queued and in flight.
    fn check(&self) {
        if cfg!(debug_assertions) && self.tasks.len() <= 64 {
            let flagged = self.tasks.values().filter(|t| t.in_flight).count();
            debug_assert_eq!(flagged, self.in_flight, "in-flight count");
            debug_assert!(
                self.queue
                    .iter()
                    .all(|k| self.tasks.get(k).is_none_or(|t| !t.in_flight)),
                "a queued task is in flight"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::events::TaskState;

    fn task(key: TaskKey) -> TaskRef {
        TaskRef {
            node: 0,
            item: None,
            spec: Arc::new(TaskSpec {
                key,
                node: "n".into(),
                attempt: 1,
                item: None,
                state: TaskState::whole(State::default()),
                scope: crate::events::empty_state(),
                timeout: Duration::from_secs(1),
                team: None,
                prompts: None,
                first_key: None,
                concurrency: None,
                cache: None,
            }),
            in_flight: false,
        }
    }

    #[test]
    fn the_cap_bounds_what_is_in_flight_and_keys_are_never_reused() {
        let mut table = TaskTable::default();
        let keys: Vec<TaskKey> = (0..3).map(|_| table.new_key()).collect();
        assert_eq!(keys, [1, 2, 3].map(TaskKey));
        for &key in &keys {
            table.add(key, task(key), true);
        }
        assert_eq!(table.start_next(2).map(|t| t.spec.key), Some(TaskKey(1)));
        assert_eq!(table.start_next(2).map(|t| t.spec.key), Some(TaskKey(2)));
        assert!(table.start_next(2).is_none(), "the cap is reached");
        assert!(table.take(TaskKey(1)).is_some());
        assert_eq!(table.in_flight(), 1);
        assert_eq!(table.start_next(2).map(|t| t.spec.key), Some(TaskKey(3)));
        assert_eq!(table.new_key(), TaskKey(4));
        assert_eq!(table.clear(), [2, 3].map(TaskKey));
        assert_eq!(table.in_flight(), 0);
    }

    #[test]
    fn a_parked_retry_is_queued_once() {
        let mut table = TaskTable::default();
        let key = table.new_key();
        table.add(key, task(key), false);
        assert!(table.start_next(0).is_none(), "parked until due");
        assert!(table.requeue(key));
        assert!(!table.requeue(key), "already queued");
        assert!(table.start_next(0).is_some());
        assert!(!table.requeue(key), "in flight");
        assert!(!table.requeue(TaskKey(99)), "unknown");
    }
}
