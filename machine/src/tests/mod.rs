//! Tests of the run state machine, driven with no network: a [`Harness`]
//! plays the run actor, answering each dispatched task with a closure named
//! after the node, and records every event and effect.

mod cache;
mod control;
mod duplicates;
mod forks;
mod held;
mod loops;
mod maps;
mod properties;
mod restore;
mod semantics;
mod subgraphs;
mod teammates;
mod who;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::*;
use crate::graph::{Format, load_str};

/// A node implementation in tests: `(state, scope, attempt) -> output`.
type Handler =
    Box<dyn FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String>>;
/// A worker-hosted reducer or predicate in tests.
type Hosted = Box<dyn FnMut(Vec<Value>) -> Result<Value, String>>;
/// A child graph in tests: its input to its final state, or its error.
type ChildGraph = Box<dyn FnMut(Map<String, Value>) -> Result<Map<String, Value>, String>>;

/// Which in-flight task the harness completes next.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    Fifo,
    /// Newest first (items finish out of order).
    Lifo,
}

pub struct Harness {
    pub machine: RunMachine,
    handlers: HashMap<String, Handler>,
    /// The failure class of a node's errors (default `handler_error`).
    fails_as: HashMap<String, FailureKind>,
    hosted: HashMap<String, Hosted>,
    children: HashMap<String, ChildGraph>,
    /// Child runs asked for: (node, graph, input); and cancelled.
    pub started_children: Vec<(String, String, Map<String, Value>)>,
    pub cancelled_children: Vec<String>,
    pub order: Order,
    pub events: Vec<RunEvent>,
    pub dispatched: Vec<TaskSpec>,
    pub cancelled: Vec<TaskKey>,
    pub retries: Vec<std::time::Duration>,
    pub checkpoints: usize,
    pub calls: Vec<Effect>,
    pub max_in_flight: usize,
    pub max_items_in_flight: usize,
    /// Teammate messages handed to running tasks, and answers to sends.
    pub deliveries: Vec<(TaskKey, TeamMessage)>,
    pub acks: Vec<(TaskKey, u64, Option<String>)>,
    in_flight: VecDeque<TaskSpec>,
    inputs: VecDeque<Input>,
}

pub fn plan(yaml: &str) -> Arc<RunPlan> {
    let (graph, _) = load_str(yaml, Format::Yaml, "test").unwrap_or_else(|error| panic!("{error}"));
    RunPlan::new(Arc::new(graph), RunLimits::default())
}

/// The fields each `state_changed` of `events` named, in order.
pub fn changed_fields(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::StateChanged { fields, .. } => Some(fields.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

pub fn obj(value: Value) -> Map<String, Value> {
    value.as_object().cloned().expect("a JSON object")
}

impl Harness {
    pub fn new(yaml: &str, input: Value) -> Self {
        Self::with_limits(yaml, input, RunLimits::default())
    }

    /// A harness whose run has these limits.
    pub fn with_limits(yaml: &str, input: Value, limits: RunLimits) -> Self {
        let (graph, _) =
            load_str(yaml, Format::Yaml, "test").unwrap_or_else(|error| panic!("{error}"));
        let plan = RunPlan::new(Arc::new(graph), limits);
        Self::of(RunMachine::new(plan, obj(input)).expect("valid input"))
    }

    /// A harness whose run's input is read from `text` as the coordinator
    /// reads it, large strings held ([`crate::held`]).
    pub fn with_input_text(yaml: &str, text: &str) -> Self {
        let plan = plan(yaml);
        let input = RunInput::read(&plan, text).expect("an object");
        Self::of(RunMachine::with_input(plan, input).expect("valid input"))
    }

    fn of(machine: RunMachine) -> Self {
        Self {
            machine,
            handlers: HashMap::new(),
            fails_as: HashMap::new(),
            hosted: HashMap::new(),
            children: HashMap::new(),
            started_children: Vec::new(),
            cancelled_children: Vec::new(),
            order: Order::Fifo,
            events: Vec::new(),
            dispatched: Vec::new(),
            cancelled: Vec::new(),
            retries: Vec::new(),
            checkpoints: 0,
            calls: Vec::new(),
            max_in_flight: 0,
            max_items_in_flight: 0,
            deliveries: Vec::new(),
            acks: Vec::new(),
            in_flight: VecDeque::new(),
            inputs: VecDeque::new(),
        }
    }

    /// Registers what child graph `graph` (as a subgraph node names it)
    /// makes of its input.
    pub fn child(
        mut self,
        graph: &str,
        f: impl FnMut(Map<String, Value>) -> Result<Map<String, Value>, String> + 'static,
    ) -> Self {
        self.children.insert(graph.to_owned(), Box::new(f));
        self
    }

    /// Registers the implementation of node `id`.
    pub fn on(
        mut self,
        id: &str,
        handler: impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String>
        + 'static,
    ) -> Self {
        self.handlers.insert(id.to_owned(), Box::new(handler));
        self
    }

    /// Node `id`'s errors are failures of class `kind`.
    pub fn fails_as(mut self, id: &str, kind: FailureKind) -> Self {
        self.fails_as.insert(id.to_owned(), kind);
        self
    }

    /// Registers a worker-hosted reducer or predicate.
    pub fn hosted(
        mut self,
        name: &str,
        f: impl FnMut(Vec<Value>) -> Result<Value, String> + 'static,
    ) -> Self {
        self.hosted.insert(name.to_owned(), Box::new(f));
        self
    }

    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Starts the run and drives it until nothing is in flight.
    pub fn run(mut self) -> Self {
        let effects = self.machine.start();
        self.absorb(effects);
        self.drive();
        self
    }

    /// Starts the run and drives it until `stop` holds of the events so
    /// far: what is in flight then stays out, as in a checkpoint taken
    /// mid-wave.
    pub fn run_until(mut self, stop: impl Fn(&[RunEvent]) -> bool) -> Self {
        let effects = self.machine.start();
        self.absorb(effects);
        self.drive_until(&stop);
        self
    }

    /// Applies an input (e.g. an answer) and drives on.
    pub fn send(&mut self, input: Input) -> Result<(), Rejected> {
        let effects = self.machine.apply(input)?;
        self.absorb(effects);
        self.drive();
        Ok(())
    }

    fn absorb(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Dispatch(spec) => {
                    self.dispatched.push((*spec).clone());
                    self.in_flight.push_back((*spec).clone());
                    self.max_in_flight = self.max_in_flight.max(self.in_flight.len());
                    let mut items: Vec<usize> = self
                        .in_flight
                        .iter()
                        .filter_map(|s| s.item.as_ref().map(|i| i.index))
                        .collect();
                    items.sort_unstable();
                    items.dedup();
                    self.max_items_in_flight = self.max_items_in_flight.max(items.len());
                }
                Effect::ScheduleRetry { key, delay } => {
                    self.retries.push(delay);
                    self.inputs.push_back(Input::RetryDue { key });
                }
                Effect::CancelTasks(keys) => {
                    self.in_flight.retain(|spec| !keys.contains(&spec.key));
                    self.cancelled.extend(keys);
                }
                Effect::Emit(event) => self.events.push(event),
                Effect::Deliver { key, message } => self.deliveries.push((key, message)),
                Effect::SendAck {
                    key,
                    send_id,
                    error,
                } => self.acks.push((key, send_id, error)),
                Effect::StartChild { node, graph, input } => {
                    self.started_children
                        .push((node.clone(), graph.clone(), input.clone()));
                    let run_id = format!("child-{}", self.started_children.len());
                    let f = self
                        .children
                        .get_mut(&graph)
                        .expect("child graph registered");
                    let result = f(input);
                    self.inputs.push_back(Input::ChildStarted {
                        node: node.clone(),
                        run_id: run_id.into(),
                    });
                    self.inputs.push_back(Input::ChildEnded {
                        node,
                        result: result.map_err(ChildError::Refused),
                        usage: Default::default(),
                    });
                }
                Effect::AwaitChild { .. } => {}
                Effect::CancelChildren(ids) => self
                    .cancelled_children
                    .extend(ids.into_iter().map(String::from)),
                Effect::Checkpoint => self.checkpoints += 1,
                Effect::Cache { .. } => {}
                Effect::CallReducer {
                    call,
                    ref code,
                    ref s0_value,
                    ref branch_values,
                    ..
                } => {
                    let f = self
                        .hosted
                        .get_mut(&code.key())
                        .expect("hosted reducer registered");
                    let result = f(vec![s0_value.clone(), Value::Array(branch_values.clone())]);
                    self.inputs.push_back(Input::CallReturned {
                        call,
                        result: result.map_err(CallError),
                    });
                    self.calls.push(effect);
                }
                Effect::CallUntil {
                    call,
                    ref judge,
                    ref iteration,
                } => {
                    let name = match judge {
                        UntilJudge::Code(code) => code.key(),
                        UntilJudge::Sentence(sentence) => sentence.clone(),
                    };
                    let f = self.hosted.get_mut(&name).expect("hosted until registered");
                    let result = f(vec![iteration.clone()]);
                    self.inputs.push_back(Input::CallReturned {
                        call,
                        result: result.map_err(CallError),
                    });
                    self.calls.push(effect);
                }
                Effect::CallPredicate {
                    call,
                    ref code,
                    ref state,
                } => {
                    let f = self
                        .hosted
                        .get_mut(&code.key())
                        .expect("hosted predicate registered");
                    let result = f(vec![Value::Object((**state).clone())]);
                    self.inputs.push_back(Input::CallReturned {
                        call,
                        result: result.map_err(CallError),
                    });
                    self.calls.push(effect);
                }
            }
        }
    }

    fn drive(&mut self) {
        self.drive_until(&|_| false);
    }

    fn drive_until(&mut self, stop: &dyn Fn(&[RunEvent]) -> bool) {
        for _ in 0..100_000 {
            if stop(&self.events) {
                return;
            }
            let input = if let Some(input) = self.inputs.pop_front() {
                input
            } else {
                let spec = match self.order {
                    Order::Fifo => self.in_flight.pop_front(),
                    Order::Lifo => self.in_flight.pop_back(),
                };
                let Some(spec) = spec else { return };
                let handler = self
                    .handlers
                    .get_mut(spec.node.as_str())
                    .unwrap_or_else(|| panic!("no handler for node '{}'", spec.node));
                // A flagged step's seat is in its scope as `_team`, and it
                // reads its whole inbox, as a script does.
                let mut scope = (*spec.scope).clone();
                let read = spec
                    .team
                    .as_ref()
                    .map_or_else(Vec::new, |seat| seat.inbox.iter().map(|m| m.seq).collect());
                if let Some(seat) = &spec.team {
                    scope.insert("_team".into(), serde_json::to_value(seat).expect("a seat"));
                }
                match handler(&spec.state.view(), &scope, spec.attempt) {
                    Ok(value) => Input::TaskSucceeded {
                        key: spec.key,
                        output: NodeOutput {
                            read,
                            ..NodeOutput::from_json(value).expect("handler returned an object")
                        },
                    },
                    Err(message) => Input::TaskFailed {
                        key: spec.key,
                        failure: TaskFailure {
                            kind: self
                                .fails_as
                                .get(spec.node.as_str())
                                .copied()
                                .unwrap_or(FailureKind::HandlerError),
                            message,
                            worker: Some("w1".into()),
                        },
                    },
                }
            };
            let effects = self.machine.apply(input).expect("input accepted");
            self.absorb(effects);
        }
        panic!("the run did not settle");
    }

    pub fn state(&self) -> Value {
        Value::Object((**self.machine.state()).clone())
    }

    pub fn status(&self) -> RunStatus {
        self.machine.status()
    }

    /// How many times node `id` was dispatched.
    pub fn runs_of(&self, id: &str) -> usize {
        self.dispatched.iter().filter(|s| s.node == id).count()
    }

    pub fn skipped(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                RunEvent::NodeSkipped { node } => Some(node.to_string()),
                _ => None,
            })
            .collect()
    }

    /// The fields each `state_changed` named, in order.
    pub fn changed_fields(&self) -> Vec<String> {
        changed_fields(&self.events)
    }

    pub fn waves(&self) -> Vec<Vec<String>> {
        self.events
            .iter()
            .filter_map(|e| match e {
                RunEvent::WaveStarted { nodes, .. } => Some(nodes.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn error_text(&self) -> String {
        self.machine
            .error()
            .map(ToString::to_string)
            .unwrap_or_default()
    }
}

/// A handler that writes `value` to `field`.
pub fn write(
    field: &'static str,
    value: Value,
) -> impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String> {
    move |_, _, _| Ok(json!({ field: value.clone() }))
}

/// A handler that writes nothing.
pub fn noop() -> impl FnMut(&Map<String, Value>, &Map<String, Value>, u32) -> Result<Value, String>
{
    |_, _, _| Ok(json!({}))
}
