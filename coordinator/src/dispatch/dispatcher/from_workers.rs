//! What workers say, as the dispatcher takes it: heartbeats, draining,
//! shares of their slots, refusals, results (merged once; a late or duplicate one is discarded
//! and counted) and teammate messages.

use tracing::{debug, info};
use weft_proto::RunId;

use super::{Dispatcher, Ended, Order, Work, now};
use crate::dispatch::registry::{Decision, JobId, JobKey, JobSpec};
use crate::dispatch::*;
use crate::task::TaskFailure;
use weft_proto::worker_protocol::{CallResult, TaskResult};

impl Dispatcher {
    /// What `worker` sent, turned into the registry's decisions.
    pub(super) fn message(
        &mut self,
        worker: WorkerId,
        message: FromWorker,
    ) -> Vec<Decision<Order>> {
        if !self.registry.heard(worker, now()) {
            // A lost worker's late messages are ignored.
            if let FromWorker::Result(result) = &message {
                discarded(
                    worker,
                    &result.run_id,
                    result.key,
                    "from a worker given up as lost",
                );
            }
            return Vec::new();
        }
        match message {
            FromWorker::Heartbeat => Vec::new(),
            FromWorker::Draining => {
                info!(%worker, "worker draining");
                self.registry.drain(worker)
            }
            FromWorker::Slots(slots) => {
                debug!(%worker, slots, "a worker that shares its slots changed this coordinator's share");
                self.registry.set_slots(worker, slots);
                Vec::new()
            }
            FromWorker::Refused { run_id, key } => {
                let job = JobId {
                    run: run_id.clone(),
                    key: JobKey::Task(key),
                };
                debug!(%worker, %run_id, %key, "a worker handed a task back");
                self.registry.refuse(worker, &job)
            }
            FromWorker::Result(TaskResult {
                run_id,
                key,
                outcome,
                read,
            }) => {
                let job = JobId {
                    run: run_id.clone(),
                    key: JobKey::Task(key),
                };
                let Some(done) = self.registry.finish(worker, &job, now()) else {
                    discarded(
                        worker,
                        &run_id,
                        key,
                        "for a task this worker no longer holds",
                    );
                    return Vec::new();
                };
                metrics::histogram!(crate::metrics::TASK_SECONDS)
                    .record(done.elapsed.as_secs_f64());
                self.tell_ended(
                    done.payload,
                    Ended::Task {
                        worker: done.worker,
                        outcome: {
                            let mut noted = Vec::new();
                            let result = outcome.map_err(|error| {
                                noted = error.notes;
                                TaskFailure {
                                    kind: error.kind,
                                    message: error.message,
                                    worker: None,
                                }
                            });
                            TaskOutcome {
                                result,
                                read,
                                noted,
                            }
                        },
                    },
                );
                Vec::new()
            }
            FromWorker::TeamSend { run_id, key, send } => {
                self.team_send(worker, &run_id, key, send);
                Vec::new()
            }
            FromWorker::ToolCall { run_id, key, call } => self.tool_call(worker, run_id, key, call),
            FromWorker::Stream { run_id, key, piece } => {
                // Only the worker that holds the attempt speaks for it; a
                // piece of an attempt given away is dropped.
                let job = JobId {
                    run: run_id,
                    key: JobKey::Task(key),
                };
                if self.registry.held_by(&job) == Some(worker)
                    && let Some(order) = self.registry.payload(&job)
                {
                    let _ = order.sink.send(DispatchEvent::TaskStream { key, piece });
                }
                Vec::new()
            }
            FromWorker::CallPermit {
                run_id,
                key,
                permit,
            } => {
                let job = JobId {
                    run: run_id,
                    key: JobKey::Task(key),
                };
                self.registry.permit(worker, &job, permit, now())
            }
            FromWorker::CallUsage { run_id, key, usage } => {
                let job = JobId {
                    run: run_id,
                    key: JobKey::Task(key),
                };
                self.registry.usage(worker, &job, &usage, now());
                Vec::new()
            }
            FromWorker::CallResult(CallResult {
                run_id,
                call_id,
                result,
                tool,
            }) => {
                let job = JobId {
                    run: run_id,
                    key: if tool {
                        JobKey::Tool(call_id)
                    } else {
                        JobKey::Call(call_id)
                    },
                };
                if let Some(done) = self.registry.finish(worker, &job, now()) {
                    self.tell_ended(done.payload, Ended::Call(result));
                }
                Vec::new()
            }
        }
    }

    /// Passes a running agent step's call of a tool it does not host to a
    /// worker that does; answers at once when the step no longer runs on
    /// `worker` or no worker hosts the tool.
    pub(super) fn tool_call(
        &mut self,
        worker: WorkerId,
        run_id: RunId,
        key: TaskKey,
        call: ToolCall,
    ) -> Vec<Decision<Order>> {
        let job = JobId {
            run: run_id.clone(),
            key: JobKey::Task(key),
        };
        let refuse = |why: String| ToWorker::ToolResult {
            run_id: run_id.clone(),
            key,
            call_id: call.call_id,
            result: Err(why),
        };
        let caller = match self.registry.payload(&job) {
            Some(Order {
                work: Work::Task(held),
                sink,
            }) if self.registry.held_by(&job) == Some(worker) => {
                let TaskJob {
                    namespace, task, ..
                } = &**held;
                let context = ToolContext {
                    node: task.definition.node.clone(),
                    attempt: task.attempt,
                    key,
                    item: task.item.as_ref().map(|item| item.index as u64),
                    scope_json: String::from_utf8_lossy(task.scope_json.as_bytes()).into_owned(),
                };
                (namespace.clone(), context, sink.clone())
            }
            _ => {
                self.control(
                    worker,
                    refuse("the calling task is no longer running".into()),
                );
                return Vec::new();
            }
        };
        let (namespace, context, sink) = caller;
        if self.registry.tool(&namespace, &call.tool).is_none() {
            let why = format!("no connected worker hosts the tool '{}'", call.tool);
            self.control(worker, refuse(why));
            return Vec::new();
        }
        self.tool_calls += 1;
        // A caller that sets no time gets a function's.
        let timeout = if call.timeout.is_zero() {
            self.call_timeout
        } else {
            call.timeout
        };
        let function = FunctionCall {
            call_id: self.tool_calls,
            run_id: run_id.clone(),
            name: call.tool.clone(),
            args: vec![call.arguments],
            timeout,
            target: CallTarget::Tool(context),
            bundle: Default::default(),
        };
        debug!(%worker, %run_id, %key, tool = %call.tool, "passing on a tool call");
        self.registry.submit(JobSpec {
            id: JobId {
                run: run_id,
                key: JobKey::Tool(self.tool_calls),
            },
            label: format!("tool '{}'", call.tool).into(),
            requirement: Requirement::Tool(call.tool),
            namespace,
            timeout,
            lineage: None,
            flow: None,
            priority: crate::graph::Priority::Normal,
            concurrency: None,
            budgets: std::sync::Arc::from([]),
            payload: Order {
                work: Work::Tool {
                    call: function,
                    caller: worker,
                    key,
                    call_id: call.call_id,
                },
                sink,
            },
        })
    }

    /// Passes a task's teammate message to its run, if the task still runs
    /// on that worker; else answers the worker at once.
    pub(super) fn team_send(&self, worker: WorkerId, run_id: &str, key: TaskKey, send: TeamSend) {
        let job = JobId {
            run: RunId::from(run_id),
            key: JobKey::Task(key),
        };
        match self.registry.payload(&job) {
            Some(order) if self.registry.held_by(&job) == Some(worker) => {
                let _ = order.sink.send(DispatchEvent::TeamSend { key, send });
            }
            _ => self.control(
                worker,
                ToWorker::SendAck {
                    run_id: job.run,
                    send_id: send.send_id,
                    error: Some("the sending task is no longer running".into()),
                },
            ),
        }
    }
}

/// Notes a result that is not merged: late (its attempt was given to
/// another worker) or from a worker already given up.
/// Every one is counted; the log says so at most once a second (with how
/// many were left unsaid), so a worker sending forged or stale results in
/// a loop cannot flood it.
fn discarded(worker: WorkerId, run_id: &impl std::fmt::Display, key: TaskKey, why: &str) {
    metrics::counter!(crate::metrics::RESULTS_DISCARDED).increment(1);
    static SAID: std::sync::Mutex<(Option<std::time::Instant>, u64)> =
        std::sync::Mutex::new((None, 0));
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    let (at, unsaid) = &mut *said;
    if at.is_some_and(|at| at.elapsed() < std::time::Duration::from_secs(1)) {
        *unsaid += 1;
        return;
    }
    let also = std::mem::take(unsaid);
    *at = Some(std::time::Instant::now());
    drop(said);
    if also > 0 {
        info!(%worker, %run_id, %key, also_discarded = also, "discarded a result {why} (and {also} more since the last line)");
    } else {
        info!(%worker, %run_id, %key, "discarded a result {why}");
    }
}
