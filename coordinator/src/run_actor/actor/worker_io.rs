//! The run actor's traffic with workers, through the dispatcher: tasks
//! and function calls out, their results (and teammate sends) back in as
//! the machine's inputs, as the workers sent them (the machine judges
//! them).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::RunActor;
use crate::dispatch::jobs::JobKey;
use crate::dispatch::{
    CallForm, CallJob, CallTarget, DispatchEvent, FunctionCall, KeptRef, PythonCall,
    TaskAssignment, TaskJob,
};
use crate::run_actor::streams::{PieceKind, StepRef};
use crate::run_actor::{Code, Effect, Input, Outgoing, TaskSpec};

impl RunActor {
    /// Asks a worker's model whether `sentence` holds of a loop's
    /// `iteration` (SPEC 4.2); the answer comes back like a function's.
    pub(super) fn judge(&self, call: u64, sentence: String, iteration: Value) {
        let call = FunctionCall {
            call_id: call,
            run_id: self.id.clone(),
            name: sentence,
            args: vec![iteration],
            timeout: Duration::ZERO,
            target: CallTarget::Judge,
            bundle: Arc::default(),
        };
        self.call_worker(call);
    }

    /// Tells the task `key` whether its teammate message `send_id` was
    /// accepted.
    pub(super) fn acknowledge(
        &self,
        key: crate::run_actor::TaskKey,
        send_id: u64,
        error: Option<String>,
    ) {
        let ack = crate::dispatch::ToWorker::SendAck {
            run_id: self.id.clone(),
            send_id,
            error,
        };
        self.tell(key, ack);
    }

    /// Sends `message` to the worker running task `key`.
    pub(super) fn tell(&self, key: crate::run_actor::TaskKey, message: crate::dispatch::ToWorker) {
        self.launcher.tell(self.id.clone(), key, message);
    }

    pub(super) fn dispatch_event(&mut self, event: DispatchEvent) {
        match event {
            DispatchEvent::TaskFinished {
                key,
                worker,
                outcome,
            } => {
                self.unhosted.remove(&JobKey::Task(key));
                let kind = match outcome.result {
                    Ok(_) => PieceKind::End,
                    Err(_) => PieceKind::Abandoned,
                };
                self.stream_ended(key, kind);
                self.spans.task_finished(key, &worker, &outcome);
                // The machine decides whether the output is acceptable.
                let (result, notes) = match outcome.result {
                    Ok(done) => (Ok((done.writes_json, done.output)), done.notes),
                    Err(failure) => (Err(failure), outcome.noted),
                };
                self.input(Input::TaskReturned {
                    key,
                    worker,
                    result,
                    read: outcome.read,
                    notes,
                });
                let held = self.machine.take_held_write_bytes();
                if held > 0 {
                    metrics::counter!(crate::metrics::OUTPUT_BYTES_HELD).increment(held);
                }
            }
            DispatchEvent::TaskUnhosted {
                job,
                node,
                requirement,
                namespace,
            } => {
                let needs = match namespace {
                    Some(namespace) => {
                        format!("{requirement} on a worker allowed to run namespace '{namespace}'")
                    }
                    None => requirement.to_string(),
                };
                self.unhosted.insert(job, (node.clone(), needs.clone()));
                self.input(Input::TaskUnhosted { node, needs });
            }
            DispatchEvent::TaskRequeued { key, worker } => {
                self.input(Input::TaskRequeued { key, worker });
            }
            DispatchEvent::TaskThrottled { key, limit, wait } => {
                self.input(Input::TaskThrottled {
                    key,
                    limit: limit.to_string(),
                    wait_ms: wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
                });
            }
            DispatchEvent::TaskStream { key, piece } => {
                if let Some((step, any)) = self.streaming.get_mut(&key) {
                    *any = true;
                    use weft_proto::worker_protocol::StreamKind;
                    let kind = match piece.kind {
                        StreamKind::Text => PieceKind::Text,
                        StreamKind::ToolCall => PieceKind::ToolCall,
                        StreamKind::ToolResult => PieceKind::ToolResult,
                        StreamKind::Message => PieceKind::Message,
                    };
                    self.streams.push(step, kind, piece.text);
                }
            }
            DispatchEvent::TaskHosted { job } => {
                self.unhosted.remove(&job);
            }
            DispatchEvent::CallReturned { call, result } => {
                self.unhosted.remove(&JobKey::Call(call));
                self.input(Input::CallReturned { call, result })
            }
            DispatchEvent::TeamSend { key, send } => match send.content {
                Ok(content) => self.input(Input::TeamSend {
                    key,
                    send_id: send.send_id,
                    message: Outgoing {
                        to: send.to,
                        content,
                    },
                }),
                Err(error) => self.perform(vec![Effect::SendAck {
                    key,
                    send_id: send.send_id,
                    error: Some(error.to_string()),
                }]),
            },
        }
    }

    /// Attempt `key`'s stream ends (`end`, or `abandoned`), if it streams
    /// and anything of it came.
    pub(super) fn stream_ended(&mut self, key: crate::run_actor::TaskKey, kind: PieceKind) {
        if let Some((step, true)) = self.streaming.remove(&key) {
            self.streams.push(&step, kind, String::new());
        }
    }

    /// Sends the task `spec` describes to a worker. The spec stays the
    /// machine's: what the assignment needs is copied out of it.
    pub(super) fn dispatch(&mut self, spec: &TaskSpec) {
        let Some(idx) = self.plan.graph().node_index(&spec.node) else {
            return;
        };
        let (Some(binding), Some(definition)) = (self.plan.binding(idx), self.plan.definition(idx))
        else {
            return;
        };
        if let Some(entry) = &spec.cache {
            match self.cache.lookup(&self.namespace, entry) {
                Some(hit) => {
                    self.cache_hits.push_back(Input::TaskCached {
                        key: spec.key,
                        writes: hit.writes,
                        output: hit.output,
                        stored_by: hit.stored_by.into(),
                        age_ms: hit.age_ms,
                    });
                    return;
                }
                None => self.cache.missed(),
            }
        }
        if matches!(
            binding.kind,
            weft_proto::types::WorkerKind::Llm
                | weft_proto::types::WorkerKind::Agent
                | weft_proto::types::WorkerKind::Rag
        ) {
            let step = StepRef {
                node: spec.node.clone(),
                item: spec.item.as_ref().map(|item| item.index),
                attempt: spec.attempt,
            };
            self.streaming.insert(spec.key, (step, false));
        }
        let state = self.fields.task_fields(&spec.state);
        let traceparent = self.spans.task_started(spec, binding.kind.as_str());
        let scope_json = self.fields.scope_text(&spec.scope);
        let task = TaskAssignment {
            run_id: self.id.clone(),
            key: spec.key,
            attempt: spec.attempt,
            definition: definition.clone(),
            node_ref: KeptRef::Carried,
            bundle_ref: KeptRef::Carried,
            state,
            scope_json,
            item: spec.item.clone(),
            timeout: spec.timeout,
            bundle: self.bundle.clone(),
            team: spec.team.clone(),
            prompts_json: spec
                .prompts
                .as_ref()
                .map(weft_proto::json::object_to_string)
                .unwrap_or_default(),
            traceparent,
            remote_tools: Vec::new(),
            flow: None,
        };
        let job = TaskJob {
            namespace: self.namespace.clone(),
            first_key: spec.first_key.unwrap_or(spec.key),
            task,
            priority: self.priority,
            concurrency: spec.concurrency.clone(),
            budgets: self.budgets.clone(),
        };
        self.launcher
            .launch(job, binding.requirement.clone(), self.sink.clone());
    }

    /// Calls a worker-hosted function (a reducer, predicate or `until`);
    /// a Python function gets its arguments in `form`.
    pub(super) fn call(&self, call: u64, code: Code, args: Vec<Value>, form: CallForm) {
        let name = code.key();
        let (target, bundle) = match code {
            Code::Python(function) => (
                CallTarget::Python(PythonCall {
                    module: function.module,
                    function: function.function,
                    dir: self.plan.graph().dir.clone(),
                    form,
                }),
                // Only a Python function's module needs the bundle.
                self.bundle.clone(),
            ),
            Code::Rust(_) => (CallTarget::Registered, Arc::default()),
        };
        let call = FunctionCall {
            call_id: call,
            run_id: self.id.clone(),
            name,
            args,
            timeout: Duration::ZERO,
            target,
            bundle,
        };
        self.call_worker(call);
    }

    /// Hands `call` to the dispatcher, for a worker that serves the run's
    /// namespace; its timeout is the dispatcher's to set.
    fn call_worker(&self, call: FunctionCall) {
        let job = CallJob {
            namespace: self.namespace.clone(),
            call,
        };
        self.launcher.call(job, self.sink.clone());
    }
}
