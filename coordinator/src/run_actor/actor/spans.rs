//! A run's trace (SPEC 10): `run` → `wave` → `node` spans, kept open by
//! the run's actor for as long as what they stand for lasts. A task's
//! span goes to its worker as a W3C `traceparent`, so the worker's
//! execution span is its child; a map's or loop's items are under a span
//! of their node. The run's id is its trace id, so a run that goes on in
//! another process (a restart, a new leader) stays one trace.
//!
//! Spans are `tracing` spans: exported when the process exports traces,
//! and cheap bookkeeping when it does not.

use foldhash::{HashMap, HashMapExt};

use tracing::Span;
use tracing::field::Empty;

use crate::dispatch::TaskOutcome;
use crate::run_actor::{RunStatus, TaskKey, TaskSpec};
use weft_proto::NodeId;

pub(super) struct RunSpans {
    run: Span,
    wave: Option<Span>,
    /// Spans of the map and loop nodes whose items run in this wave.
    containers: HashMap<NodeId, Span>,
    tasks: HashMap<TaskKey, Span>,
    run_id: String,
    graph: String,
    trace_id: String,
}

impl RunSpans {
    /// The spans of run `run_id`: its own trace (its id is the trace id),
    /// or, for a child run, under the span `parent` names.
    pub(super) fn new(run_id: &str, graph: &str, parent: Option<&str>) -> Self {
        // Log lines in the run's spans carry the trace id.
        let trace_id = match parent {
            Some(parent) => parent.split('-').nth(1).unwrap_or_default(),
            None => run_id.strip_prefix("run-").unwrap_or(run_id),
        };
        let run = tracing::info_span!("run", run_id, graph, trace_id, status = Empty);
        match parent {
            Some(parent) => weft_process::telemetry::set_parent(&run, parent),
            None => weft_process::telemetry::join_run_trace(&run, run_id),
        }
        Self {
            run,
            wave: None,
            containers: HashMap::new(),
            tasks: HashMap::new(),
            run_id: run_id.to_owned(),
            graph: graph.to_owned(),
            trace_id: trace_id.to_owned(),
        }
    }

    /// The id of the run's trace.
    pub(super) fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The run's own span.
    pub(super) fn run_span(&self) -> Span {
        self.run.clone()
    }

    /// A wave started: the last one's spans end.
    pub(super) fn wave_started(&mut self, step: u32) {
        self.containers.clear();
        self.wave = Some(tracing::info_span!(parent: &self.run, "wave", step));
    }

    /// A subgraph node starts its child run: the node's span, under which
    /// the child's trace hangs; its `traceparent` for the child.
    pub(super) fn child_starting(&mut self, node: &str) -> String {
        let wave = self.wave.clone().unwrap_or_else(|| self.run.clone());
        let span = tracing::info_span!(
            parent: &wave,
            "node",
            node,
            kind = "subgraph",
            child_run_id = Empty,
        );
        let traceparent = weft_process::telemetry::traceparent(&span);
        self.containers.insert(NodeId::from(node), span);
        traceparent
    }

    /// The child of subgraph node `node` started as run `child`.
    pub(super) fn child_started(&mut self, node: &str, child: &str) {
        if let Some(span) = self.containers.get(node) {
            span.record("child_run_id", child);
        }
    }

    /// A task is sent: its span starts; its `traceparent` for the worker.
    pub(super) fn task_started(&mut self, spec: &TaskSpec, kind: &str) -> String {
        let wave = self.wave.clone().unwrap_or_else(|| self.run.clone());
        let parent = match &spec.item {
            Some(item) => self
                .containers
                .entry(item.map.clone())
                .or_insert_with(
                    || tracing::info_span!(parent: &wave, "node", node = item.map.as_str()),
                )
                .clone(),
            None => wave,
        };
        let span = tracing::info_span!(
            parent: &parent,
            "node",
            run_id = self.run_id.as_str(),
            graph = self.graph.as_str(),
            node = spec.node.as_str(),
            kind,
            attempt = spec.attempt,
            item = spec.item.as_ref().map(|i| i.index as u64),
            worker = Empty,
            outcome = Empty,
            model = Empty,
            prompt_tokens = Empty,
            completion_tokens = Empty,
            otel.status_description = Empty,
        );
        let traceparent = weft_process::telemetry::traceparent(&span);
        self.tasks.insert(spec.key, span);
        traceparent
    }

    /// A task's result arrived: its span records it and ends.
    pub(super) fn task_finished(&mut self, key: TaskKey, worker: &str, outcome: &TaskOutcome) {
        let Some(span) = self.tasks.remove(&key) else {
            return;
        };
        span.record("worker", worker);
        match &outcome.result {
            Ok(_) => {
                span.record("outcome", "ok");
            }
            Err(failure) => {
                span.record("outcome", failure.kind.as_str());
                span.record("otel.status_description", failure.message.as_str());
            }
        }
        let notes = outcome.result.as_ref().map_or(&[][..], |done| &done.notes);
        let calls = notes.iter().filter(|note| note["type"] == "model_called");
        let (mut prompt, mut completion, mut model) = (0, 0, None);
        for call in calls {
            prompt += call["prompt_tokens"].as_u64().unwrap_or(0);
            completion += call["completion_tokens"].as_u64().unwrap_or(0);
            model = call["model"].as_str().map(str::to_owned).or(model);
        }
        if let Some(model) = model {
            span.record("model", model.as_str());
            span.record("prompt_tokens", prompt);
            span.record("completion_tokens", completion);
        }
    }

    /// Tasks the run stopped: their spans end as cancelled.
    pub(super) fn tasks_cancelled(&mut self, keys: &[TaskKey]) {
        for key in keys {
            if let Some(span) = self.tasks.remove(key) {
                span.record("outcome", "cancelled");
            }
        }
    }

    /// The run ended: every span of it ends.
    pub(super) fn run_finished(&mut self, status: RunStatus) {
        self.run.record("status", status.name());
        self.tasks.clear();
        self.containers.clear();
        self.wave = None;
    }
}
