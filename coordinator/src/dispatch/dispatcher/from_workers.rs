//! What workers say, as the dispatcher takes it: heartbeats, draining,
//! refusals, results (merged once; a late or duplicate one is discarded
//! and counted) and teammate messages.

use tracing::{debug, info};
use weft_proto::RunId;

use super::{Dispatcher, Order, now};
use crate::dispatch::registry::{Decision, JobId, JobKey};
use crate::dispatch::*;

impl Dispatcher {
    /// What `worker` sent, turned into the registry's decisions.
    pub(super) fn message(
        &mut self,
        worker: WorkerId,
        message: FromWorker,
    ) -> Vec<Decision<Order>> {
        if !self.registry.heard(worker, now()) {
            // A lost worker's late messages are ignored.
            if let FromWorker::Result { run_id, key, .. } = &message {
                discarded(worker, run_id, *key, "from a worker given up as lost");
            }
            return Vec::new();
        }
        match message {
            FromWorker::Heartbeat => Vec::new(),
            FromWorker::Draining => {
                info!(%worker, "worker draining");
                self.registry.drain(worker)
            }
            FromWorker::Refused { run_id, key } => {
                let job = JobId {
                    run: RunId::from(run_id.as_str()),
                    key: JobKey::Task(key),
                };
                debug!(%worker, %run_id, key, "a leaving worker refused a task");
                self.registry.refuse(worker, &job)
            }
            FromWorker::Result {
                run_id,
                key,
                outcome,
            } => {
                let job = JobId {
                    run: RunId::from(run_id.as_str()),
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
                let _ = done.payload.sink.send(DispatchEvent::TaskFinished {
                    key,
                    worker: done.worker,
                    outcome,
                });
                Vec::new()
            }
            FromWorker::TeamSend { run_id, key, send } => {
                self.team_send(worker, &run_id, key, send);
                Vec::new()
            }
            FromWorker::CallResult {
                run_id,
                call,
                result,
            } => {
                let job = JobId {
                    run: RunId::from(run_id.as_str()),
                    key: JobKey::Call(call),
                };
                if let Some(done) = self.registry.finish(worker, &job, now()) {
                    let _ = done
                        .payload
                        .sink
                        .send(DispatchEvent::CallReturned { call, result });
                }
                Vec::new()
            }
        }
    }

    /// A run ended: its workers drop its cached fields, its jobs go.
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
fn discarded(worker: WorkerId, run_id: &impl std::fmt::Display, key: TaskKey, why: &str) {
    metrics::counter!(crate::metrics::RESULTS_DISCARDED).increment(1);
    info!(%worker, %run_id, key, "discarded a result {why}");
}
