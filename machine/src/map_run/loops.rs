//! `loop` nodes (SPEC 4.2): a map of one item whose chain — the loop's
//! `body` — repeats until `until` holds.
//!
//! The body works on the run's state itself: every step sees S0 with what
//! the body wrote so far over it (in every iteration before this one too),
//! and when the loop ends those writes are the loop node's update, merged
//! with its wave like any node's. After each iteration `until` is judged
//! (the body runs at least once); reaching `max_iterations` ends the loop
//! without failing it. Every body step's scope holds `loop: {iteration,
//! max_iterations, feedback}`, `feedback` being what the last judgement
//! said. Each iteration is told to watchers as a `loop_iteration` event.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use std::sync::Arc;

use super::super::events::{RunEvent, State, UntilJudge, empty_state};
use super::super::plan::RunPlan;
use super::{ItemRun, MapNames, MapRun, MapStartError, fork_state};
use crate::graph::Meter;
use crate::graph::{NodeIdx, NodeKind, Until};
use crate::task::CallError;

/// A loop's iterations so far.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Looping {
    /// The iteration running (1-based).
    pub(super) iteration: u32,
    max_iterations: u32,
    /// What the last judgement said, for the next iteration.
    feedback: Option<String>,
    /// Earlier iterations: their output and what was said of them.
    history: Vec<Value>,
    /// The body's writes, once the loop has ended.
    writes: Option<Map<String, Value>>,
    /// A worker-hosted `until` judging the iteration that ended.
    #[serde(default)]
    judging: Option<Judging>,
}

/// A judgement asked of a worker-hosted `until`.
#[derive(Debug, Serialize, Deserialize)]
struct Judging {
    /// The function, or the sentence.
    name: String,
    /// A worker's model judges the sentence `name`.
    #[serde(default)]
    by_model: bool,
    /// The `LoopIteration` object it judges.
    iteration: Value,
    /// The call's key, once the machine has made it; `None`: to ask.
    call: Option<u64>,
}

impl MapRun {
    /// Starts loop node `node`'s first iteration on S0.
    pub fn start_loop(plan: &RunPlan, node: NodeIdx, s0: &State) -> Result<Self, MapStartError> {
        let graph_node = plan.graph().node(node);
        let NodeKind::Loop(config) = &graph_node.kind else {
            return Err(MapStartError::NotALoop(graph_node.id.clone()));
        };
        Ok(Self {
            map: node,
            id: plan.node_id(node).clone(),
            names: MapNames {
                item_name: String::new(),
                branch: config.body,
                output_key: Arc::from(config.output_key.as_str()),
                collect_into: String::new(),
            },
            s0: s0.clone(),
            items: vec![Value::Null],
            results: vec![None],
            runs: vec![None],
            ready: VecDeque::new(),
            started: 0,
            active: 0,
            done: 0,
            limit: 1,
            failed: None,
            reported: false,
            looping: Some(Looping {
                iteration: 1,
                max_iterations: config.max_iterations.max(1), // validation refuses 0
                feedback: None,
                history: Vec::new(),
                writes: None,
                judging: None,
            }),
            team: None,
        })
    }

    /// The body's first step, with nothing written yet.
    pub(super) fn loop_fork(&self, looping: &Looping) -> ItemRun {
        ItemRun {
            writes: empty_state(),
            scope: loop_scope(looping),
            at: self.names.branch.unwrap_or(self.map),
            step: 1,
            visits: Default::default(),
        }
    }

    /// Asks a worker to judge the iteration that just ended: function
    /// `name` (a [`crate::graph::Code`] key), or the sentence `name` by a
    /// model.
    fn ask_judgement(&mut self, name: String, by_model: bool) {
        let Some(run) = self.runs[0].as_ref() else {
            return;
        };
        let iteration = self.loop_iteration(run);
        if let Some(looping) = self.looping.as_mut() {
            looping.judging = Some(Judging {
                name,
                by_model,
                iteration,
                call: None,
            });
        }
    }

    /// The body's chain ended: judges `until`.
    pub(super) fn iteration_ended(
        &mut self,
        plan: &RunPlan,
        meter: &Meter,
        events: &mut Vec<RunEvent>,
    ) {
        let node = plan.graph().node(self.map);
        let NodeKind::Loop(config) = &node.kind else {
            return;
        };
        let Some(run) = self.runs[0].as_ref() else {
            return;
        };
        let step = run.step;
        let judged = match &config.until {
            Until::Condition(name, expr) => {
                let view = fork_state(&self.s0, run, None).view_of(expr.state_reads());
                expr.is_true(&view, &run.scope, meter)
                    .map_err(|error| format!("until '{name}': {error}"))
            }
            // A worker judges: its function, or its model the sentence.
            Until::Hosted(code) => return self.ask_judgement(code.key(), false),
            Until::Sentence(sentence) => return self.ask_judgement(sentence.clone(), true),
        };
        match judged {
            Ok(holds) => self.judged(holds, None, events),
            Err(message) => self.fail_item(0, node.id.clone(), step, message),
        }
    }

    /// SPEC 4.2's `LoopIteration`: what a worker-hosted `until` judges.
    fn loop_iteration(&self, run: &ItemRun) -> Value {
        let looping = self.looping.as_ref().expect("a loop");
        let state = fork_state(&self.s0, run, None).view_of(None);
        json!({
            "iteration": looping.iteration,
            "max_iterations": looping.max_iterations,
            "is_last": looping.iteration >= looping.max_iterations,
            "output": run.writes.get(&*self.names.output_key)
                .or_else(|| self.s0.get(&*self.names.output_key)),
            "state": state,
            "history": looping.history,
        })
    }

    /// A judgement to ask for, once: the machine makes the call and tells
    /// [`note_call`](Self::note_call) its key.
    pub(super) fn judge_request(&mut self, plan: &RunPlan) -> Option<super::ItemStep> {
        let judge = self.until_judge(plan)?;
        let judging = self.looping.as_mut()?.judging.as_mut()?;
        if judging.call.is_some() {
            return None;
        }
        // Marked asked at once; the key follows.
        judging.call = Some(0);
        Some(super::ItemStep::Judge {
            judge,
            iteration: judging.iteration.clone(),
        })
    }

    /// Who judges this loop's iterations, as its graph says (`None`: a CEL
    /// condition, judged here).
    fn until_judge(&self, plan: &RunPlan) -> Option<UntilJudge> {
        let NodeKind::Loop(config) = &plan.graph().node(self.map).kind else {
            return None;
        };
        match &config.until {
            Until::Hosted(code) => Some(UntilJudge::Code(code.clone())),
            Until::Sentence(sentence) => Some(UntilJudge::Sentence(sentence.clone())),
            Until::Condition(..) => None,
        }
    }

    /// The key of the call that asks the pending judgement.
    pub fn note_call(&mut self, call: u64) {
        if let Some(judging) = self.looping.as_mut().and_then(|l| l.judging.as_mut()) {
            judging.call = Some(call);
        }
    }

    /// The judgement waiting for call `call`'s answer, to ask again after
    /// a restart: its key, function and argument.
    pub fn pending_judgement(&self, plan: &RunPlan) -> Option<(u64, UntilJudge, Value)> {
        let judging = self.looping.as_ref()?.judging.as_ref()?;
        Some((
            judging.call?,
            self.until_judge(plan)?,
            judging.iteration.clone(),
        ))
    }

    /// Whether this loop waits for call `call`'s answer.
    pub fn awaits(&self, call: u64) -> bool {
        self.looping
            .as_ref()
            .and_then(|looping| looping.judging.as_ref())
            .is_some_and(|judging| judging.call == Some(call))
    }

    /// A worker-hosted `until` answered: `true`/`false`, or `[bool,
    /// "reason"]`; anything else (or a failed call) fails the loop.
    pub fn until_answered(&mut self, result: Result<Value, CallError>, events: &mut Vec<RunEvent>) {
        let Some(judging) = self.looping.as_mut().and_then(|l| l.judging.take()) else {
            return;
        };
        let step = self.runs[0].as_ref().map_or(0, |run| run.step);
        let answer = result.and_then(|value| match value {
            Value::Bool(holds) => Ok((holds, None)),
            Value::Array(pair) => match pair.as_slice() {
                [Value::Bool(holds), Value::String(reason)] => Ok((*holds, Some(reason.clone()))),
                [Value::Bool(holds), Value::Null] => Ok((*holds, None)),
                _ => Err(CallError(format!(
                    "returned {}, expected true, false or [bool, \"reason\"]",
                    Value::Array(pair)
                ))),
            },
            other => Err(CallError(format!(
                "returned {other}, expected true, false or [bool, \"reason\"]"
            ))),
        });
        match answer {
            Ok((holds, reason)) => self.judged(holds, reason, events),
            Err(message) => {
                let message = format!("until fn:{}: {message}", judging.name);
                self.fail_item(0, self.id.to_string(), step, message);
            }
        }
    }

    /// `until` said `holds` (and `reason`): the loop ends, or the body runs
    /// again with the reason as its feedback.
    fn judged(&mut self, holds: bool, reason: Option<String>, events: &mut Vec<RunEvent>) {
        let (Some(looping), Some(run)) = (self.looping.as_mut(), self.runs[0].as_mut()) else {
            return;
        };
        let done = holds || looping.iteration >= looping.max_iterations;
        events.push(RunEvent::LoopIteration {
            node: self.id.clone(),
            iteration: looping.iteration,
            max_iterations: looping.max_iterations,
            done,
            reason: reason.clone(),
        });
        looping.history.push(json!({
            "iteration": looping.iteration,
            "output": run.writes.get(&*self.names.output_key),
            "reason": reason,
        }));
        if done {
            let writes = std::mem::replace(&mut run.writes, empty_state());
            looping.writes = Some(Arc::unwrap_or_clone(writes));
            self.runs[0] = None;
            self.done = 1;
            self.active = 0;
            return;
        }
        looping.iteration += 1;
        looping.feedback = reason;
        run.at = self.names.branch.unwrap_or(self.map);
        run.step += 1;
        // The per-node visit bound counts within an iteration.
        run.visits.clear();
        run.scope = loop_scope(looping);
        self.ready.push_back(0);
    }

    /// What the loop wrote, once it has ended (taken once).
    pub(super) fn loop_writes(&mut self) -> Map<String, Value> {
        self.looping
            .as_mut()
            .and_then(|looping| looping.writes.take())
            .unwrap_or_default()
    }
}

/// The scope every body step of this iteration sees.
fn loop_scope(looping: &Looping) -> State {
    let mut scope = Map::new();
    scope.insert(
        "loop".into(),
        json!({
            "iteration": looping.iteration,
            "max_iterations": looping.max_iterations,
            "feedback": looping.feedback,
        }),
    );
    Arc::new(scope)
}
