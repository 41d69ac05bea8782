//! The dispatcher actor and its handle.
//!
//! Its channel is unbounded on purpose: the dispatcher and the run actors
//! send to each other, and two actors that wait on each other's full
//! channels deadlock. The load is bounded elsewhere: tasks in flight never
//! exceed the workers' slots, and a run queues at most its ready tasks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::*;

/// A worker as the registry sees it, for status and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSnapshot {
    /// Its id.
    pub id: WorkerId,
    /// What it announced.
    pub info: WorkerInfo,
    /// Tasks it has in flight.
    pub in_flight: usize,
}

enum Command {
    Join {
        info: WorkerInfo,
        outbox: mpsc::Sender<ToWorker>,
        reply: oneshot::Sender<WorkerId>,
    },
    Message {
        worker: WorkerId,
        message: FromWorker,
    },
    Leave {
        worker: WorkerId,
    },
    Launch {
        task: Assignment,
        requirement: Requirement,
        sink: EventSink,
    },
    Cancel {
        run_id: Arc<str>,
        keys: Vec<TaskKey>,
    },
    Call {
        call: FunctionCall,
        sink: EventSink,
    },
    Forget {
        run_id: Arc<str>,
    },
    Snapshot {
        reply: oneshot::Sender<Vec<WorkerSnapshot>>,
    },
}

/// The dispatcher is gone (the coordinator is shutting down).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the coordinator is shutting down")]
pub struct ShuttingDown;

/// A cloneable handle to the dispatcher.
#[derive(Debug, Clone)]
pub struct DispatcherHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl DispatcherHandle {
    /// Registers a worker; tasks start flowing into `outbox`.
    pub async fn join(
        &self,
        info: WorkerInfo,
        outbox: mpsc::Sender<ToWorker>,
    ) -> Result<WorkerId, ShuttingDown> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Join {
                info,
                outbox,
                reply,
            })
            .map_err(|_| ShuttingDown)?;
        answer.await.map_err(|_| ShuttingDown)
    }

    /// Passes on a message from a worker.
    pub fn message(&self, worker: WorkerId, message: FromWorker) {
        let _ = self.tx.send(Command::Message { worker, message });
    }

    /// A worker's stream closed.
    pub fn leave(&self, worker: WorkerId) {
        let _ = self.tx.send(Command::Leave { worker });
    }

    /// The connected workers.
    pub async fn snapshot(&self) -> Vec<WorkerSnapshot> {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Command::Snapshot { reply }).is_err() {
            return Vec::new();
        }
        answer.await.unwrap_or_default()
    }
}

impl TaskLauncher for DispatcherHandle {
    fn launch(&self, task: Assignment, requirement: Requirement, sink: EventSink) {
        let _ = self.tx.send(Command::Launch {
            task,
            requirement,
            sink,
        });
    }

    fn cancel(&self, run_id: Arc<str>, keys: Vec<TaskKey>) {
        let _ = self.tx.send(Command::Cancel { run_id, keys });
    }

    fn call(&self, call: FunctionCall, sink: EventSink) {
        let _ = self.tx.send(Command::Call { call, sink });
    }

    fn forget(&self, run_id: Arc<str>) {
        let _ = self.tx.send(Command::Forget { run_id });
    }
}

/// Starts the dispatcher; it stops when `shutdown` is cancelled.
pub fn spawn_dispatcher(
    heartbeat_interval: Duration,
    worker_timeout: Duration,
    shutdown: CancellationToken,
) -> DispatcherHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let dispatcher = Dispatcher {
        workers: BTreeMap::new(),
        next_id: 1,
        pending: VecDeque::new(),
        in_flight: HashMap::new(),
        calls: VecDeque::new(),
        calls_in_flight: HashMap::new(),
        worker_timeout,
    };
    tokio::spawn(dispatcher.run(rx, heartbeat_interval, shutdown));
    DispatcherHandle { tx }
}

struct WorkerState {
    info: WorkerInfo,
    draining: bool,
    /// The field versions this worker holds, per run: a mirror of its cache,
    /// exact because the stream delivers in order.
    known: HashMap<Arc<str>, HashMap<Arc<str>, u64>>,
    outbox: mpsc::Sender<ToWorker>,
    in_flight: usize,
    last_seen: Instant,
}

struct Pending {
    task: Assignment,
    requirement: Requirement,
    sink: EventSink,
    reported_unhosted: bool,
}

struct InFlight {
    pending: Pending,
    worker: WorkerId,
    since: Instant,
}

struct PendingCall {
    call: FunctionCall,
    sink: EventSink,
}

type TaskId = (Arc<str>, TaskKey);

struct Dispatcher {
    workers: BTreeMap<WorkerId, WorkerState>,
    next_id: WorkerId,
    pending: VecDeque<Pending>,
    in_flight: HashMap<TaskId, InFlight>,
    calls: VecDeque<PendingCall>,
    calls_in_flight: HashMap<TaskId, (WorkerId, PendingCall)>,
    worker_timeout: Duration,
}

impl Dispatcher {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        heartbeat: Duration,
        shutdown: CancellationToken,
    ) {
        let mut ticker = tokio::time::interval(heartbeat);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                command = rx.recv() => match command {
                    Some(command) => self.handle(command),
                    None => break,
                },
                _ = ticker.tick() => self.tick(),
            }
        }
        debug!("dispatcher stopped");
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Join {
                info,
                outbox,
                reply,
            } => {
                let id = self.next_id;
                self.next_id += 1;
                info!(worker = id, name = %info.name, slots = info.slots, "worker joined");
                self.workers.insert(
                    id,
                    WorkerState {
                        info,
                        draining: false,
                        known: HashMap::new(),
                        outbox,
                        in_flight: 0,
                        last_seen: Instant::now(),
                    },
                );
                let _ = reply.send(id);
            }
            Command::Message { worker, message } => self.message(worker, message),
            Command::Leave { worker } => self.lose(worker, "stream closed"),
            Command::Launch {
                task,
                requirement,
                sink,
            } => {
                self.pending.push_back(Pending {
                    task,
                    requirement,
                    sink,
                    reported_unhosted: false,
                });
            }
            Command::Cancel { run_id, keys } => self.cancel(&run_id, &keys),
            Command::Call { call, sink } => self.calls.push_back(PendingCall { call, sink }),
            Command::Forget { run_id } => {
                for worker in self.workers.values_mut() {
                    if worker.known.remove(&run_id).is_some() {
                        let _ = worker.outbox.try_send(ToWorker::Forget {
                            run_id: run_id.clone(),
                        });
                    }
                }
                return;
            }
            Command::Snapshot { reply } => {
                let snapshot = self
                    .workers
                    .iter()
                    .map(|(&id, w)| WorkerSnapshot {
                        id,
                        info: w.info.clone(),
                        in_flight: w.in_flight,
                    })
                    .collect();
                let _ = reply.send(snapshot);
                return;
            }
        }
        self.assign();
    }

    fn message(&mut self, worker: WorkerId, message: FromWorker) {
        let Some(state) = self.workers.get_mut(&worker) else {
            // A lost worker's late messages are ignored.
            return;
        };
        state.last_seen = Instant::now();
        match message {
            FromWorker::Heartbeat => {}
            FromWorker::Draining => {
                info!(worker, name = %state.info.name, "worker draining");
                state.draining = true;
            }
            FromWorker::Result {
                run_id,
                key,
                outcome,
            } => {
                let id: TaskId = (Arc::from(run_id.as_str()), key);
                match self.in_flight.get(&id) {
                    Some(flight) if flight.worker == worker => {}
                    _ => {
                        debug!(worker, %run_id, key, "ignored a result for a task this worker no longer holds");
                        return;
                    }
                }
                let flight = self.in_flight.remove(&id).expect("checked above");
                metrics::histogram!(crate::metrics::TASK_SECONDS)
                    .record(flight.since.elapsed().as_secs_f64());
                state.in_flight = state.in_flight.saturating_sub(1);
                let event = DispatchEvent::TaskFinished {
                    key,
                    worker: state.info.name.clone(),
                    outcome,
                };
                let _ = flight.pending.sink.send(event);
            }
            FromWorker::CallResult {
                run_id,
                call,
                result,
            } => {
                let id: TaskId = (Arc::from(run_id.as_str()), call);
                if let Some((holder, pending)) = self.calls_in_flight.remove(&id) {
                    if holder == worker {
                        let _ = pending
                            .sink
                            .send(DispatchEvent::CallReturned { call, result });
                    } else {
                        self.calls_in_flight.insert(id, (holder, pending));
                    }
                }
            }
        }
    }

    fn cancel(&mut self, run_id: &Arc<str>, keys: &[TaskKey]) {
        self.pending
            .retain(|p| !(p.task.run_id == *run_id && keys.contains(&p.task.key)));
        for &key in keys {
            let id: TaskId = (run_id.clone(), key);
            if let Some(flight) = self.in_flight.remove(&id)
                && let Some(state) = self.workers.get_mut(&flight.worker)
            {
                state.in_flight = state.in_flight.saturating_sub(1);
                let _ = state.outbox.try_send(ToWorker::Cancel {
                    run_id: run_id.clone(),
                    key,
                });
            }
        }
    }

    /// A worker is gone: its tasks and calls are dispatched again, and
    /// re-dispatch does not count as an attempt.
    fn lose(&mut self, worker: WorkerId, why: &str) {
        let Some(state) = self.workers.remove(&worker) else {
            return;
        };
        warn!(worker, name = %state.info.name, reason = why, "worker lost");
        let mut orphans: Vec<(TaskId, InFlight)> = self
            .in_flight
            .extract_if(|_, flight| flight.worker == worker)
            .collect();
        orphans.sort_by_key(|((run, key), _)| (run.clone(), *key));
        for (_, flight) in orphans.into_iter().rev() {
            self.pending.push_front(flight.pending);
        }
        let calls: Vec<(TaskId, (WorkerId, PendingCall))> = self
            .calls_in_flight
            .extract_if(|_, (holder, _)| *holder == worker)
            .collect();
        for (_, (_, call)) in calls {
            self.calls.push_front(call);
        }
    }

    fn tick(&mut self) {
        let now = Instant::now();
        let silent: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, w)| now.duration_since(w.last_seen) > self.worker_timeout)
            .map(|(&id, _)| id)
            .collect();
        for worker in silent {
            self.lose(worker, "heartbeats missed");
        }
        let closed: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, w)| {
                w.outbox.try_send(ToWorker::Heartbeat).is_err() && w.outbox.is_closed()
            })
            .map(|(&id, _)| id)
            .collect();
        for worker in closed {
            self.lose(worker, "stream closed");
        }
        self.assign();
    }

    /// The least loaded worker that hosts `requirement` and has a free slot.
    fn pick(&self, requirement: &Requirement) -> Option<WorkerId> {
        self.workers
            .iter()
            .filter(|(_, w)| {
                (w.in_flight as u64) < u64::from(w.info.slots) && requirement.hosted_by(&w.info)
            })
            .min_by(|(ia, a), (ib, b)| {
                let load_a = a.in_flight as u64 * u64::from(b.info.slots.max(1));
                let load_b = b.in_flight as u64 * u64::from(a.info.slots.max(1));
                load_a.cmp(&load_b).then(ia.cmp(ib))
            })
            .map(|(&id, _)| id)
    }

    /// Places pending tasks and calls on workers.
    fn assign(&mut self) {
        let mut waiting = VecDeque::with_capacity(self.pending.len());
        while let Some(mut pending) = self.pending.pop_front() {
            let any_free = self
                .workers
                .values()
                .any(|w| (w.in_flight as u64) < u64::from(w.info.slots));
            if !any_free {
                waiting.push_back(pending);
                continue;
            }
            let Some(worker) = self.pick(&pending.requirement) else {
                let hosted = self
                    .workers
                    .values()
                    .any(|w| pending.requirement.hosted_by(&w.info));
                if !hosted && !pending.reported_unhosted {
                    pending.reported_unhosted = true;
                    let _ = pending.sink.send(DispatchEvent::TaskUnhosted {
                        key: pending.task.key,
                        node: pending.task.node.clone(),
                        requirement: pending.requirement.clone(),
                    });
                }
                waiting.push_back(pending);
                continue;
            };
            let state = self
                .workers
                .get_mut(&worker)
                .expect("picked from the registry");
            let (wire, sent) = for_worker(&pending.task, state.known.get(&pending.task.run_id));
            if state.outbox.try_send(ToWorker::Task(wire)).is_err() {
                // The stream is gone or jammed; the reaper will lose it.
                waiting.push_back(pending);
                continue;
            }
            let known = state.known.entry(pending.task.run_id.clone()).or_default();
            for (name, version) in sent {
                known.insert(name, version);
            }
            state.in_flight += 1;
            let id: TaskId = (pending.task.run_id.clone(), pending.task.key);
            metrics::counter!(crate::metrics::TASKS_DISPATCHED).increment(1);
            self.in_flight.insert(
                id,
                InFlight {
                    pending,
                    worker,
                    since: Instant::now(),
                },
            );
        }
        self.pending = waiting;

        let mut waiting_calls = VecDeque::new();
        while let Some(call) = self.calls.pop_front() {
            let host = self
                .workers
                .iter()
                .filter(|(_, w)| w.info.functions.contains(&call.call.name))
                .min_by_key(|(_, w)| w.in_flight)
                .map(|(&id, _)| id);
            let Some(worker) = host else {
                waiting_calls.push_back(call);
                continue;
            };
            let state = self
                .workers
                .get_mut(&worker)
                .expect("picked from the registry");
            if state
                .outbox
                .try_send(ToWorker::Call(call.call.clone()))
                .is_err()
            {
                waiting_calls.push_back(call);
                continue;
            }
            let id: TaskId = (call.call.run_id.clone(), call.call.call);
            self.calls_in_flight.insert(id, (worker, call));
        }
        self.calls = waiting_calls;
        self.report();
    }

    /// Publishes the registry's gauges.
    fn report(&self) {
        use crate::metrics as m;
        let free: u64 = self
            .workers
            .values()
            .filter(|w| !w.draining)
            .map(|w| u64::from(w.info.slots).saturating_sub(w.in_flight as u64))
            .sum();
        let unhosted = self
            .pending
            .iter()
            .filter(|p| {
                !self
                    .workers
                    .values()
                    .any(|w| p.requirement.hosted_by(&w.info))
            })
            .count();
        metrics::gauge!(m::WORKERS).set(self.workers.len() as f64);
        metrics::gauge!(m::FREE_SLOTS).set(free as f64);
        metrics::gauge!(m::QUEUE_DEPTH).set(self.pending.len() as f64);
        metrics::gauge!(m::TASKS_UNHOSTED).set(unhosted as f64);
    }
}

/// The task as this worker needs it: fields it already holds go without
/// their value. Returns the fields sent with a value, to record once the
/// message is on its way.
fn for_worker(
    task: &Assignment,
    known: Option<&HashMap<Arc<str>, u64>>,
) -> (Assignment, Vec<(Arc<str>, u64)>) {
    let mut wire = task.clone();
    let mut sent = Vec::new();
    for field in &mut wire.state {
        if known.and_then(|k| k.get(&field.name)) == Some(&field.version) {
            field.json = None;
        } else {
            sent.push((field.name.clone(), field.version));
        }
    }
    (wire, sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, version: u64) -> StateField {
        StateField {
            name: Arc::from(name),
            version,
            json: Some(Arc::from(format!("\"{name}{version}\""))),
        }
    }

    fn task(fields: Vec<StateField>) -> Assignment {
        Assignment {
            run_id: Arc::from("r"),
            key: 1,
            node: "n".into(),
            attempt: 1,
            kind: "task".into(),
            config_json: Arc::from("{}"),
            state: fields,
            scope_json: "{}".into(),
            item: None,
            timeout: Duration::from_secs(1),
            bundle: Arc::new(Vec::new()),
        }
    }

    #[test]
    fn a_worker_gets_each_field_version_once() {
        let first = task(vec![field("blob", 1), field("counter", 2)]);
        let (wire, sent) = for_worker(&first, None);
        assert!(wire.state.iter().all(|f| f.json.is_some()));
        let known: HashMap<Arc<str>, u64> = sent.into_iter().collect();
        // Next wave: the counter changed, the blob did not.
        let second = task(vec![field("blob", 1), field("counter", 3)]);
        let (wire, sent) = for_worker(&second, Some(&known));
        assert_eq!(wire.state[0].json, None, "the blob is not sent again");
        assert_eq!(wire.state[1].json.as_deref(), Some("\"counter3\""));
        assert_eq!(sent, vec![(Arc::from("counter"), 3)]);
    }
}
