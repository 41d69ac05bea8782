//! The order queued tasks are offered to workers in (SPEC 18): fair across
//! namespaces, by priority within one.
//!
//! Each namespace has a lane per priority; a namespace's next task is the
//! oldest of its highest non-empty lane. Namespaces take turns by smooth
//! weighted round robin over those with something queued: each turn every
//! waiting namespace earns its weight (`[[namespaces]] weight`, 1 unless
//! configured), the richest goes and pays the sum of the weights. So a
//! namespace of weight 2 beside one of weight 1 gets two turns in three,
//! interleaved rather than in bursts, whatever either has queued, and one
//! tenant's flood of ten thousand tasks delays another's next task by at
//! most a turn. A namespace that empties its lanes leaves the rotation and
//! comes back with no credit, so idling banks nothing. Its emptied lanes
//! are kept (up to [`IDLE_KEPT`] namespaces' worth) for its next task, so
//! a namespace whose tasks are taken as soon as they come does not make
//! its lanes again for each one.
//!
//! A task offered and not taken (nobody hosts it, a limit or concurrency
//! key holds it) is put back at the front of its lane, so lanes keep their
//! order; its turn is spent.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use weft_graph::Priority;

use super::jobs::JobId;

/// How many namespaces' emptied lanes are kept for their next task.
const IDLE_KEPT: usize = 64;

/// Queued tasks; see the module docs.
#[derive(Debug, Default)]
pub struct FairQueue {
    namespaces: BTreeMap<Arc<str>, Lanes>,
    /// Configured weights; a namespace not named weighs 1.
    weights: HashMap<String, u32>,
}

/// A namespace's queued tasks.
#[derive(Debug, Default)]
struct Lanes {
    /// By [`Priority::rank`].
    lanes: [VecDeque<JobId>; 3],
    /// Its smooth round robin credit.
    credit: i64,
}

impl Lanes {
    fn is_empty(&self) -> bool {
        self.lanes.iter().all(VecDeque::is_empty)
    }
}

impl FairQueue {
    /// A queue whose namespaces weigh as `weights` say (1 otherwise).
    pub fn with_weights(weights: HashMap<String, u32>) -> Self {
        Self {
            weights,
            ..Self::default()
        }
    }

    /// Queues `id` behind its lane's tasks.
    pub fn push_back(&mut self, id: JobId, namespace: &Arc<str>, priority: Priority) {
        self.lane(namespace, priority).push_back(id);
    }

    /// Puts `id` back at the front of its lane (a requeued task, or one
    /// offered and not taken).
    pub fn push_front(&mut self, id: JobId, namespace: &Arc<str>, priority: Priority) {
        self.lane(namespace, priority).push_front(id);
    }

    fn lane(&mut self, namespace: &Arc<str>, priority: Priority) -> &mut VecDeque<JobId> {
        let lanes = self.namespaces.entry(namespace.clone()).or_default();
        &mut lanes.lanes[priority.rank()]
    }

    /// The next task to offer, with its namespace and priority: the
    /// namespace whose turn it is, its highest priority's oldest task.
    pub fn pop(&mut self) -> Option<(JobId, Arc<str>, Priority)> {
        let mut total = 0i64;
        let mut richest: Option<(&Arc<str>, i64)> = None;
        for (namespace, lanes) in &mut self.namespaces {
            if lanes.is_empty() {
                continue;
            }
            let weight = i64::from(self.weights.get(&**namespace).copied().unwrap_or(1));
            lanes.credit += weight;
            total += weight;
            if richest.is_none_or(|(_, credit)| lanes.credit > credit) {
                richest = Some((namespace, lanes.credit));
            }
        }
        let namespace = richest?.0.clone();
        let lanes = self.namespaces.get_mut(&namespace)?;
        lanes.credit -= total;
        let (rank, id) = lanes
            .lanes
            .iter_mut()
            .enumerate()
            .find_map(|(rank, lane)| lane.pop_front().map(|id| (rank, id)))?;
        if lanes.is_empty() {
            lanes.credit = 0;
            if self.namespaces.len() > IDLE_KEPT {
                self.namespaces.remove(&namespace);
            }
        }
        Some((id, namespace, Priority::ALL[rank]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::jobs::JobKey;
    use crate::task::TaskKey;

    fn job(run: &str, key: u64) -> JobId {
        JobId {
            run: weft_proto::RunId::from(run),
            key: JobKey::Task(TaskKey(key)),
        }
    }

    fn drain(queue: &mut FairQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.pop())
            .map(|(id, _, _)| match id.key {
                JobKey::Task(key) => format!("{}{}", id.run, key.0),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_namespace_flood_waits_its_turn_behind_another_namespace() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut queue = FairQueue::default();
        for key in 0..6 {
            queue.push_back(job("a", key), &a, Priority::Normal);
        }
        queue.push_back(job("b", 0), &b, Priority::Normal);
        queue.push_back(job("b", 1), &b, Priority::Normal);
        assert_eq!(
            drain(&mut queue),
            ["a0", "b0", "a1", "b1", "a2", "a3", "a4", "a5"]
        );
        assert!(queue.pop().is_none());
    }

    #[test]
    fn a_namespace_that_emptied_its_lanes_comes_back_with_no_credit() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut queue = FairQueue::default();
        queue.push_back(job("b", 0), &b, Priority::Normal);
        assert_eq!(drain(&mut queue), ["b0"]);
        // `a` takes turns alone: `b`, idle, earns nothing meanwhile.
        for key in 0..4 {
            queue.push_back(job("a", key), &a, Priority::Normal);
        }
        assert_eq!(drain(&mut queue).len(), 4);
        queue.push_back(job("a", 4), &a, Priority::Normal);
        queue.push_back(job("a", 5), &a, Priority::Normal);
        queue.push_back(job("b", 1), &b, Priority::Normal);
        queue.push_back(job("b", 2), &b, Priority::Normal);
        // Even turns, as for two namespaces that just came.
        assert_eq!(drain(&mut queue), ["a4", "b1", "a5", "b2"]);
        assert!(queue.pop().is_none());
    }

    #[test]
    fn weights_share_turns_and_priorities_order_a_namespace() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut queue = FairQueue::with_weights([("b".to_owned(), 2)].into());
        for key in 0..4 {
            queue.push_back(job("a", key), &a, Priority::Low);
        }
        queue.push_back(job("a", 9), &a, Priority::High);
        for key in 0..6 {
            queue.push_back(job("b", key), &b, Priority::Normal);
        }
        // b twice for a's once, interleaved; a's high first.
        assert_eq!(
            drain(&mut queue),
            [
                "b0", "a9", "b1", "b2", "a0", "b3", "b4", "a1", "b5", "a2", "a3"
            ]
        );
    }

    #[test]
    fn a_task_put_back_keeps_its_place_in_its_lane() {
        let a: Arc<str> = "a".into();
        let mut queue = FairQueue::default();
        for key in 0..3 {
            queue.push_back(job("a", key), &a, Priority::Normal);
        }
        let (first, namespace, priority) = queue.pop().unwrap();
        let (second, ..) = queue.pop().unwrap();
        queue.push_front(second, &namespace, priority);
        queue.push_front(first, &namespace, priority);
        assert_eq!(drain(&mut queue), ["a0", "a1", "a2"]);
    }
}
