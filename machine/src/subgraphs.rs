//! `subgraph` nodes (SPEC 3): each runs its graph as a child run with its
//! own id, events and checkpoints. The child receives the parent's S0
//! restricted by `input_map` (`{parent_field: child_field}`; without one,
//! the whole state, of which the child keeps what it declares), and its
//! final state comes back through `output_map` (`{child_field:
//! parent_field}`; without one, the child's fields the parent declares or
//! already has) as the node's update. A child that does not complete is an
//! attempt that failed: the node's `retry` starts a new child after its
//! delay, then its `fallback` applies; stopping the parent cancels the
//! child.

use serde_json::{Map, Value};

use std::time::Duration;

use super::events::*;
use super::wave::{Member, PersonWait};
use super::*;
use crate::graph::{NodeIdx, NodeKind, SubgraphConfig};

impl RunMachine {
    /// Starts subgraph member `idx` on S0: asks for its child run.
    pub(super) fn start_child(&mut self, idx: NodeIdx, s0: &State, fx: &mut Vec<Effect>) {
        let node = self.graph().node(idx);
        let NodeKind::Subgraph(config) = &node.kind else {
            return;
        };
        let effect = Effect::StartChild {
            node: node.id.clone(),
            graph: config.graph.clone(),
            input: child_input(config, s0),
        };
        self.set_member(
            idx,
            Member::Child {
                run_id: None,
                attempt: 1,
                retry_due: None,
                waiting: Vec::new(),
            },
        );
        fx.push(effect);
    }

    /// A retry's delay passed: if it was a subgraph member's, its next
    /// child starts. Reports whether the key was one.
    pub(super) fn child_retry_due(&mut self, key: TaskKey, fx: &mut Vec<Effect>) -> bool {
        let Some(wave) = &mut self.run.wave else {
            return false;
        };
        let Some(idx) = wave.iter().find_map(|(idx, slot)| match slot {
            Member::Child { retry_due, .. } if *retry_due == Some(key) => Some(idx),
            _ => None,
        }) else {
            return false;
        };
        let s0 = wave.s0().clone();
        if let Some(Member::Child { retry_due, .. }) = wave.member_mut(idx) {
            *retry_due = None;
        }
        let node = self.plan.graph().node(idx);
        if let NodeKind::Subgraph(config) = &node.kind {
            fx.push(Effect::StartChild {
                node: node.id.clone(),
                graph: config.graph.clone(),
                input: child_input(config, &s0),
            });
        }
        true
    }

    /// The child of subgraph node `node` started as run `run_id`.
    pub(super) fn child_started(&mut self, node: &str, run_id: RunId, fx: &mut Vec<Effect>) {
        let Some(idx) = self.graph().node_index(node) else {
            return;
        };
        let Some(Member::Child { run_id: slot, .. }) = self.member_mut(idx) else {
            return;
        };
        if slot.is_some() {
            return;
        }
        *slot = Some(run_id.clone());
        fx.push(Effect::Emit(RunEvent::SubgraphStarted {
            node: node.to_owned().into(),
            run_id,
        }));
        // Stored at once: a restart finds the child rather than starting
        // another.
        fx.push(Effect::Checkpoint);
    }

    /// The child of subgraph node `node` ended.
    pub(super) fn child_ended(
        &mut self,
        node: &str,
        result: Result<Map<String, Value>, ChildError>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(idx) = self.graph().node_index(node) else {
            return;
        };
        let (attempt, asked) = match self.member_mut(idx) {
            Some(Member::Child {
                run_id: Some(_),
                attempt,
                waiting,
                ..
            }) => (*attempt, std::mem::take(waiting)),
            _ => return,
        };
        // A child that completed had its last requests answered.
        if result.is_ok() {
            for wait in asked.into_iter().filter(|w| w.announced) {
                fx.push(Effect::Emit(RunEvent::InputReceived {
                    node: wait.path.into(),
                    by: None,
                }));
            }
        }
        // A child that waited for people and ended anyway (cancelled, out
        // of time) holds the parent no longer.
        if self.run.status == RunStatus::Waiting {
            self.run.status = RunStatus::Running;
        }
        match result {
            Ok(state) => {
                let writes = self.child_output(idx, state);
                self.container_finished(idx, writes, fx);
            }
            Err(error @ ChildError::OverBudget { .. }) => {
                // Final, whatever the node's retry and fallback say.
                let failure = TaskFailure::found_by_coordinator(
                    FailureKind::BudgetExceeded,
                    error.to_string(),
                );
                self.spent(idx, attempt, None, failure, fx);
            }
            Err(error) if attempt < self.graph().node(idx).retry.max_attempts => {
                self.retry_child(idx, attempt + 1, error.to_string(), fx);
            }
            Err(error) => {
                let failure = TaskFailure::found_by_coordinator(
                    FailureKind::SubgraphFailed,
                    error.to_string(),
                );
                self.member_failed(idx, attempt, failure, fx);
            }
        }
        self.pump(fx);
        self.maybe_finish_wave(fx);
    }

    /// The child of subgraph node `node` waits for people (`asks`, by node
    /// or path within the child), or goes on (`asks` empty). The parent
    /// lists the requests by their path from it, and waits itself when
    /// nothing else of its wave can move.
    pub(super) fn child_waiting(
        &mut self,
        node: &str,
        child: &RunId,
        asks: Vec<(String, String, String)>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(idx) = self.graph().node_index(node) else {
            return;
        };
        let Some(Member::Child {
            run_id: Some(run_id),
            waiting,
            ..
        }) = self.member_mut(idx)
        else {
            return;
        };
        // A report from an earlier attempt's child is stale.
        if run_id != child {
            return;
        }
        let now: Vec<PersonWait> = asks
            .into_iter()
            .map(|(inner, kind, prompt)| {
                let path = format!("{node}/{inner}");
                let announced = waiting.iter().any(|w| w.path == path && w.announced);
                PersonWait {
                    path,
                    kind,
                    prompt,
                    announced,
                }
            })
            .collect();
        let answered: Vec<String> = waiting
            .iter()
            .filter(|w| w.announced && !now.iter().any(|n| n.path == w.path))
            .map(|w| w.path.clone())
            .collect();
        *waiting = now;
        // The child records who answered; the parent's watchers learn that
        // the request is gone.
        for path in answered {
            fx.push(Effect::Emit(RunEvent::InputReceived {
                node: path.into(),
                by: None,
            }));
        }
        if self.run.status == RunStatus::Waiting {
            self.run.status = RunStatus::Running;
        }
        self.maybe_finish_wave(fx);
    }

    /// Subgraph member `idx`'s child failed: its attempt `next` starts
    /// after the node's retry delay.
    fn retry_child(&mut self, idx: NodeIdx, next: u32, error: String, fx: &mut Vec<Effect>) {
        let node = self.graph().node(idx);
        let delay = node.retry.delay_before(next);
        fx.push(Effect::Emit(RunEvent::NodeRetrying {
            node: node.id.clone().into(),
            next_attempt: next,
            delay_ms: delay.as_millis() as u64,
            error,
        }));
        let key = self.run.tasks.new_key();
        self.set_member(
            idx,
            Member::Child {
                run_id: None,
                attempt: next,
                retry_due: Some(key),
                waiting: Vec::new(),
            },
        );
        fx.push(Effect::ScheduleRetry { key, delay });
    }

    /// The child's final state, as the parent's update.
    fn child_output(&self, idx: NodeIdx, state: Map<String, Value>) -> Map<String, Value> {
        let graph = self.graph();
        let NodeKind::Subgraph(config) = &graph.node(idx).kind else {
            return Map::new();
        };
        if !config.output_map.is_empty() {
            return config
                .output_map
                .iter()
                .filter_map(|(child, parent)| Some((parent.clone(), state.get(child)?.clone())))
                .collect();
        }
        let s0 = self.wave_s0();
        state
            .into_iter()
            .filter(|(name, _)| {
                graph.fields.iter().any(|f| &f.name == name) || s0.contains_key(name)
            })
            .collect()
    }

    /// What a restored run asks again for its subgraph members: the child
    /// it started, or to start one.
    pub(super) fn resume_children(&self, fx: &mut Vec<Effect>) {
        let Some(wave) = &self.run.wave else { return };
        for (idx, slot) in wave.iter() {
            let Member::Child {
                run_id, retry_due, ..
            } = slot
            else {
                continue;
            };
            let node = self.graph().node(idx);
            match (run_id, retry_due, &node.kind) {
                (Some(run_id), _, _) => fx.push(Effect::AwaitChild {
                    node: node.id.clone(),
                    run_id: run_id.clone(),
                }),
                // Its timer went with the old process: the retry is due.
                (None, Some(key), _) => fx.push(Effect::ScheduleRetry {
                    key: *key,
                    delay: Duration::ZERO,
                }),
                (None, None, NodeKind::Subgraph(config)) => fx.push(Effect::StartChild {
                    node: node.id.clone(),
                    graph: config.graph.clone(),
                    input: child_input(config, wave.s0()),
                }),
                _ => {}
            }
        }
    }
}

/// The parent's S0 as the child's input.
fn child_input(config: &SubgraphConfig, s0: &State) -> Map<String, Value> {
    if config.input_map.is_empty() {
        return (**s0).clone();
    }
    config
        .input_map
        .iter()
        .filter_map(|(parent, child)| Some((child.clone(), s0.get(parent)?.clone())))
        .collect()
}
