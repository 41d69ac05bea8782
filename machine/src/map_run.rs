//! Map bookkeeping (SPEC section 5, seed 003): per-item chains on private
//! forks of the state, item slots, per-item visit bounds, fail-fast, and
//! results collected in input order.
//!
//! A [`MapRun`] lives inside its map node's wave slot. The machine asks it
//! for the next step to dispatch ([`MapRun::next_step`]) and tells it when a
//! step returns ([`MapRun::step_done`]); chain steps are ordinary tasks.
//! A `loop` node runs as a map of one item whose chain repeats ([`loops`]).

mod chain;
mod loops;
mod team;

pub(crate) use team::{SendError, Sent};

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::events::{
    ItemRef, Outgoing, RunError, RunEvent, State, TaskFailure, TaskState, UntilJudge,
};
use super::plan::RunPlan;
use crate::graph::Meter;
use crate::graph::{
    ConcurrencyLimit, ExprError, ListSource, NodeIdx, NodeKind, Strictness, Target,
    TemplateContext, json_type_name,
};
use weft_proto::NodeId;

/// A chain step's checked result: its writes, its `_next` and its `_send`.
#[derive(Debug)]
pub struct StepWrites {
    writes: Map<String, Value>,
    next: Option<String>,
    sends: Vec<Outgoing>,
    /// The worker that ran the step, named in its `node_finished`.
    worker: Option<String>,
}

impl StepWrites {
    /// The teammate messages the step sends, taken out.
    pub fn take_sends(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.sends)
    }
}

/// What the map wants next.
#[derive(Debug)]
pub enum ItemStep {
    /// Dispatch this chain step.
    Dispatch {
        /// The chain node.
        node: NodeIdx,
        /// Which item and step.
        item: ItemRef,
        /// The item's fork.
        state: TaskState,
        /// The item's scope.
        scope: State,
    },
    /// A loop's body ended and a worker-hosted `until` must judge it: call
    /// `name` with this `LoopIteration` object, then answer through
    /// [`MapRun::until_answered`] with the call's key.
    Judge {
        /// Who judges.
        judge: UntilJudge,
        /// What it judges (SPEC 4.2's `LoopIteration`).
        iteration: Value,
    },
    /// Nothing to start until a step returns.
    Idle,
    /// Every item finished: the map's writes (`collect_into`).
    Finished(Map<String, Value>),
    /// An item failed: the map fails (fail-fast).
    Failed(RunError),
}

/// An item's fork: the parent's S0 (shared, never copied) plus what the
/// chain wrote. `output_key` stays hidden until the chain writes it.
#[derive(Debug, Serialize, Deserialize)]
struct ItemRun {
    /// What the item's steps wrote, its binding first; shared with the
    /// task of its step in flight (and, until a step writes, with
    /// `scope`), changed by `Arc::make_mut`.
    writes: State,
    scope: State,
    at: NodeIdx,
    step: u32,
    visits: Visits,
}

/// How many times an item's chain has visited each node (its per-item
/// visit bound). A chain visits few nodes: two are kept without an
/// allocation. Stored as a map from node to count.
#[derive(Debug, Default)]
struct Visits(SmallVec<[(NodeIdx, u32); 2]>);

impl Visits {
    /// Counts a visit of `node`; the visits so far, this one included.
    fn visit(&mut self, node: NodeIdx) -> u32 {
        if let Some((_, count)) = self.0.iter_mut().find(|(n, _)| *n == node) {
            *count += 1;
            return *count;
        }
        self.0.push((node, 1));
        1
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

impl Serialize for Visits {
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        to.collect_map(self.0.iter().map(|(node, count)| (node, count)))
    }
}

impl<'de> Deserialize<'de> for Visits {
    fn deserialize<D: serde::Deserializer<'de>>(from: D) -> Result<Self, D::Error> {
        let counts = std::collections::BTreeMap::<NodeIdx, u32>::deserialize(from)?;
        Ok(Self(counts.into_iter().collect()))
    }
}

/// The fields of a map's configuration its items need after the start.
#[derive(Debug, Serialize, Deserialize)]
struct MapNames {
    item_name: String,
    branch: Option<NodeIdx>,
    /// Shared with the tasks it hides from.
    output_key: Arc<str>,
    collect_into: String,
}

/// One map node's items in flight.
#[derive(Debug, Serialize, Deserialize)]
pub struct MapRun {
    map: NodeIdx,
    id: NodeId,
    names: MapNames,
    /// The wave's S0, shared by every fork; not stored, relinked on restore.
    #[serde(skip)]
    s0: State,
    items: Vec<Value>,
    results: Vec<Option<Value>>,
    runs: Vec<Option<ItemRun>>,
    ready: VecDeque<usize>,
    started: usize,
    active: usize,
    done: usize,
    limit: usize,
    failed: Option<RunError>,
    reported: bool,
    /// Set when this runs a loop node's body: its iterations.
    #[serde(default)]
    looping: Option<loops::Looping>,
    /// The items' team, when a branch step has `teammates: true` and there
    /// are at least two items.
    #[serde(default)]
    team: Option<team::Team>,
}

/// Why a map could not start its items.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MapStartError {
    /// The node is not a map.
    #[error("node '{0}' is not a map")]
    NotAMap(String),
    /// The node is not a loop.
    #[error("node '{0}' is not a loop")]
    NotALoop(String),
    /// `over` failed to evaluate.
    #[error(transparent)]
    Over(#[from] ExprError),
    /// `over` is not a list.
    #[error("`over` resolved to {0}, expected a JSON array")]
    NotAList(&'static str),
    /// More items than a map may fan out over.
    #[error(
        "`over` resolved to {items} items; a map fans out over at most {limit} (configuration key max_map_items)"
    )]
    TooManyItems {
        /// The items.
        items: usize,
        /// The limit.
        limit: usize,
    },
    /// `max_concurrency` is not a positive integer.
    #[error("max_concurrency '{template}' resolved to {value}; expected a positive integer")]
    BadConcurrency {
        /// The template.
        template: String,
        /// What it gave.
        value: Value,
    },
}

impl MapRun {
    /// Resolves `over` and `max_concurrency` against S0.
    pub fn start(
        plan: &RunPlan,
        map: NodeIdx,
        s0: &State,
        meter: &Meter,
    ) -> Result<Self, MapStartError> {
        let node = plan.graph().node(map);
        let NodeKind::Map(config) = &node.kind else {
            return Err(MapStartError::NotAMap(node.id.clone()));
        };
        let empty = Map::new();
        let context = TemplateContext {
            state: Some(s0),
            ..Default::default()
        };
        let list = match &config.over {
            ListSource::Template(template) => {
                template.evaluate(&context, Strictness::Strict, meter)?
            }
            ListSource::Cel(expr) => expr.evaluate(s0, &empty, meter)?,
        };
        let Value::Array(items) = list else {
            return Err(MapStartError::NotAList(json_type_name(&list)));
        };
        let most = plan.limits().max_map_items;
        if items.len() > most {
            return Err(MapStartError::TooManyItems {
                items: items.len(),
                limit: most,
            });
        }
        let limit = match &config.max_concurrency {
            None => plan.graph().settings.max_concurrency as usize,
            Some(ConcurrencyLimit::Fixed(n)) => *n as usize,
            Some(ConcurrencyLimit::Template(template)) => {
                let value = template
                    .evaluate(&context, Strictness::Strict, meter)
                    .unwrap_or(Value::Null);
                positive_integer(&value).ok_or_else(|| MapStartError::BadConcurrency {
                    template: template.source().to_owned(),
                    value: value.clone(),
                })?
            }
        };
        let count = items.len();
        Ok(Self {
            map,
            id: plan.node_id(map).clone(),
            names: MapNames {
                item_name: config.item_name.clone(),
                branch: config.branch,
                output_key: Arc::from(config.output_key.as_str()),
                collect_into: config.collect_into.clone(),
            },
            s0: s0.clone(),
            items,
            results: vec![None; count],
            runs: (0..count).map(|_| None).collect(),
            ready: VecDeque::new(),
            started: 0,
            active: 0,
            done: 0,
            limit,
            failed: None,
            reported: false,
            looping: None,
            team: team::Team::wanted(plan, map, count)
                .then(|| team::Team::provision(&node.id, count)),
        })
    }

    /// The field an item's steps do not see until its chain writes it.
    fn hidden_key(&self) -> Option<&Arc<str>> {
        self.looping.is_none().then_some(&self.names.output_key)
    }

    /// What item `index` has written so far while it runs, if this is
    /// map (or loop) `map`.
    pub(super) fn item_writes(&self, map: &str, index: usize) -> Option<&State> {
        if self.id != map {
            return None;
        }
        Some(&self.runs.get(index)?.as_ref()?.writes)
    }

    /// Replaces, in what each item in progress wrote (a loop's body: what
    /// its iterations wrote), the fields of `set` it holds: its next
    /// steps read `set`'s values. An item's own binding stays.
    pub(super) fn replace_in_items(&mut self, set: &Map<String, Value>) {
        let binding = self.names.item_name.as_str();
        for run in self.runs.iter_mut().flatten() {
            for (field, value) in set {
                if field != binding && run.writes.contains_key(field) {
                    Arc::make_mut(&mut run.writes).insert(field.clone(), value.clone());
                }
            }
        }
    }

    /// Points the map at the restored wave's S0.
    pub fn relink(&mut self, s0: &State) {
        self.s0 = s0.clone();
    }

    /// The next thing to do.
    pub fn next_step(&mut self, plan: &RunPlan) -> ItemStep {
        loop {
            if let Some(error) = &self.failed {
                if std::mem::replace(&mut self.reported, true) {
                    return ItemStep::Idle;
                }
                return ItemStep::Failed(error.clone());
            }
            if let Some(judge) = self.judge_request(plan) {
                return judge;
            }
            // Items already holding a slot go first: a slot is held for the
            // item's whole chain.
            if let Some(index) = self.ready.pop_front() {
                if let Some(step) = self.dispatch(plan, index) {
                    return step;
                }
                continue;
            }
            if self.active < self.limit && self.started < self.items.len() {
                let index = self.started;
                self.started += 1;
                self.active += 1;
                self.runs[index] = Some(self.fork(index));
                if let Some(step) = self.dispatch(plan, index) {
                    return step;
                }
                continue;
            }
            if self.done == self.items.len() {
                if self.looping.is_some() {
                    return ItemStep::Finished(self.loop_writes());
                }
                let results = self
                    .results
                    .iter_mut()
                    .map(|r| r.take().unwrap_or(Value::Null))
                    .collect();
                let mut writes = Map::new();
                writes.insert(self.names.collect_into.clone(), Value::Array(results));
                return ItemStep::Finished(writes);
            }
            return ItemStep::Idle;
        }
    }

    fn fork(&self, index: usize) -> ItemRun {
        if let Some(looping) = &self.looping {
            return self.loop_fork(looping);
        }
        let item = self.items[index].clone();
        let mut binding = Map::new();
        binding.insert(self.names.item_name.clone(), item);
        let binding = Arc::new(binding);
        ItemRun {
            writes: binding.clone(),
            scope: binding,
            at: self.names.branch.unwrap_or(self.map),
            step: 1,
            visits: Visits::default(),
        }
    }

    /// Builds the dispatch of item `index`'s current step, checking the
    /// per-item visit bound; `None` when the item failed instead.
    fn dispatch(&mut self, plan: &RunPlan, index: usize) -> Option<ItemStep> {
        let bound = plan.graph().settings.max_loop_iterations;
        let hidden = self.looping.is_none().then_some(&self.names.output_key);
        let run = self.runs[index].as_mut()?;
        let visits = run.visits.visit(run.at);
        if visits > bound {
            let node = plan.graph().node(run.at).id.clone();
            let message = format!(
                "visited node '{node}' {visits} times, more than settings.max_loop_iterations ({bound})"
            );
            let step = run.step;
            self.fail_item(index, node, step, message);
            return None;
        }
        Some(ItemStep::Dispatch {
            node: run.at,
            item: ItemRef {
                map: self.id.clone(),
                index,
                step: run.step,
            },
            state: fork_state(&self.s0, run, hidden),
            scope: run.scope.clone(),
        })
    }

    fn fail_item(&mut self, index: usize, node: String, step: u32, message: String) {
        if let Some(looping) = &self.looping
            && self.failed.is_none()
        {
            self.failed = Some(RunError::LoopBodyError {
                node: self.id.to_string(),
                iteration: looping.iteration,
                at: node.clone(),
                step,
                message: message.clone(),
            });
        }
        if self.failed.is_none() {
            self.failed = Some(RunError::MapItemError {
                map: self.id.to_string(),
                index,
                node,
                step,
                message,
            });
        }
        self.runs[index] = None;
        if let Some(team) = &mut self.team {
            team.item_ended(index);
        }
    }

    /// A chain step of item `index` returned (after its retries).
    pub fn step_done(
        &mut self,
        plan: &RunPlan,
        meter: &Meter,
        index: usize,
        node: NodeIdx,
        result: Result<StepWrites, TaskFailure>,
    ) -> Vec<RunEvent> {
        let graph = plan.graph();
        let node_id = plan.node_id(node);
        let mut events = Vec::new();
        let Some(run) = self.runs[index].as_mut() else {
            return events;
        };
        let step = run.step;
        let output = match result {
            Ok(output) => output,
            Err(failure) => {
                // A fallback inside the branch continues the chain there;
                // `fallback: END` ends the chain as if it had finished.
                let fallback = plan.fallback_of(node).filter(|f| match f {
                    Target::Node(f) => plan.branch_members(self.map)[*f],
                    Target::End => true,
                });
                events.push(RunEvent::NodeFailed {
                    node: node_id.clone(),
                    item: Some(index),
                    error: failure.message.clone(),
                    fallback: fallback.map(|f| graph.target_name(f)),
                });
                match fallback {
                    Some(Target::Node(target)) => {
                        run.at = target;
                        run.step += 1;
                        self.ready.push_back(index);
                    }
                    Some(Target::End) => {
                        self.item_finished(plan, meter, index, Map::new(), &mut events)
                    }
                    None => self.fail_item(index, node_id.to_string(), step, failure.message),
                }
                return events;
            }
        };
        let StepWrites {
            mut writes,
            next,
            worker,
            ..
        } = output;
        // The item's writes take the step's before its chain is routed when
        // the routing reads them (or a loop's iteration does); otherwise
        // only once the chain goes on, so that a chain's last step, whose
        // item gives only its `output_key`, copies nothing.
        if !writes.is_empty() && (self.looping.is_some() || plan.routes_on_state(node)) {
            Arc::make_mut(&mut run.writes).extend(std::mem::take(&mut writes));
        }
        events.push(RunEvent::NodeFinished {
            node: node_id.clone(),
            item: Some(index),
            worker,
            usage: None,
        });
        match self.chain_next(plan, meter, node, next.as_deref(), index) {
            Ok(Some(target)) => {
                let run = self.runs[index].as_mut().expect("item is running");
                if !writes.is_empty() {
                    Arc::make_mut(&mut run.writes).extend(writes);
                }
                run.at = target;
                run.step += 1;
                self.ready.push_back(index);
            }
            Ok(None) => self.item_finished(plan, meter, index, writes, &mut events),
            Err(error) => self.fail_item(index, node_id.to_string(), step, error.to_string()),
        }
        events
    }

    /// Item `index`'s chain ended; `last` is what its last step wrote, if
    /// not merged into its writes yet.
    fn item_finished(
        &mut self,
        plan: &RunPlan,
        meter: &Meter,
        index: usize,
        mut last: Map<String, Value>,
        events: &mut Vec<RunEvent>,
    ) {
        if self.looping.is_some() {
            debug_assert!(last.is_empty(), "a loop's writes are merged before");
            self.iteration_ended(plan, meter, events);
            return;
        }
        let run = self.runs[index].take().expect("item is running");
        if let Some(team) = &mut self.team {
            team.item_ended(index);
        }
        let output = last
            .remove(&*self.names.output_key)
            .or_else(|| run.writes.get(&*self.names.output_key).cloned());
        match output {
            Some(value) => {
                self.results[index] = Some(value);
                self.done += 1;
                self.active -= 1;
                events.push(RunEvent::MapItemFinished {
                    node: plan.node_id(self.map).clone(),
                    index,
                    done: self.done,
                    total: self.items.len(),
                });
            }
            None => {
                if self.failed.is_none() {
                    self.failed = Some(RunError::MapOutputMissing {
                        map: self.id.to_string(),
                        index,
                        output_key: self.names.output_key.to_string(),
                    });
                }
            }
        }
    }
}

/// The state an item's step sees: S0, the item's writes over it, and the
/// map's output key hidden until the chain writes it (a loop hides
/// nothing: its body works on the run's state).
fn fork_state(s0: &State, run: &ItemRun, output_key: Option<&Arc<str>>) -> TaskState {
    let hidden = output_key
        .filter(|key| !run.writes.contains_key(&***key))
        .cloned();
    TaskState {
        base: s0.clone(),
        overlay: run.writes.clone(),
        item_writes: true,
        hidden,
    }
}

/// A positive integer from a number or a numeric string.
fn positive_integer(value: &Value) -> Option<usize> {
    let n = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        })?,
        Value::String(s) => s.trim().parse::<u64>().ok()?,
        _ => return None,
    };
    (n >= 1).then_some(n as usize)
}

#[cfg(test)]
mod tests {
    use super::Visits;
    use serde_json::json;

    #[test]
    fn visits_count_per_node_and_are_stored_as_a_map() {
        let mut visits = Visits::default();
        assert_eq!(visits.visit(3), 1);
        assert_eq!(visits.visit(5), 1);
        assert_eq!(visits.visit(3), 2);
        assert_eq!(visits.visit(7), 1, "a third node spills, and still counts");
        assert_eq!(visits.visit(7), 2);
        let stored = serde_json::to_value(&visits).unwrap();
        assert_eq!(stored, json!({"3": 2, "5": 1, "7": 2}));
        let mut read: Visits = serde_json::from_value(stored).unwrap();
        assert_eq!(read.visit(3), 3, "a restored count goes on");
        read.clear();
        assert_eq!(read.visit(3), 1);
    }
}
