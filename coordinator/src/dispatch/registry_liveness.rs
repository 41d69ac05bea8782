//! The registry's watch over workers that go away: a lost worker's jobs
//! are queued again (or fail after too many losses), and time turns
//! silence, long jams and overdue jobs into decisions.

use std::time::Instant;

use super::*;

impl<T> Registry<T> {
    /// A worker is gone. Its jobs are queued again without counting an
    /// attempt, except those that have now lost too many workers, which
    /// fail.
    pub fn lose(&mut self, worker: WorkerId, why: &str) -> Vec<Decision<T>> {
        let Some(entry) = self.workers.remove(&worker) else {
            return Vec::new();
        };
        let mut decisions = vec![Decision::Disconnect {
            worker,
            name: entry.info.hello.name.clone(),
            reason: why.to_owned(),
        }];
        let mut orphans: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, job)| matches!(job.place, Place::Running { worker: w, .. } if w == worker))
            .map(|(id, _)| id.clone())
            .collect();
        // Back to the front of the queue, in their original order.
        orphans.sort();
        let mut requeued = Vec::new();
        for id in orphans.into_iter().rev() {
            let job = self.jobs.get_mut(&id).expect("listed above");
            job.losses.push(entry.info.hello.name.clone());
            if let Some(lineage) = &job.lineage {
                self.lineage_losses
                    .insert(lineage.clone(), job.losses.clone());
            }
            if job.losses.len() as u32 >= self.limits.max_losses {
                self.let_go(&id);
                let job = self.jobs.remove(&id).expect("listed above");
                decisions.push(Decision::Fail {
                    failure: TaskFailure {
                        kind: FailureKind::WorkerLost,
                        message: format!(
                            "'{}' lost its worker {} times ({}); it may be what kills them",
                            job.label,
                            job.losses.len(),
                            job.losses.join(", ")
                        ),
                        worker: Some(entry.info.hello.name.clone()),
                    },
                    payload: job.payload,
                });
                continue;
            }
            job.place = Place::Queued;
            self.queue_front(&id);
            self.let_go(&id);
            requeued.push(Decision::Requeued {
                job: id,
                worker: entry.info.hello.name.clone(),
            });
        }
        decisions.extend(requeued.into_iter().rev());
        decisions.extend(self.report_unhosted());
        self.check();
        decisions
    }

    /// Turns silence into lost workers, long jams into dropped workers and
    /// overdue jobs into timeouts.
    pub fn tick(&mut self, now: Instant) -> Vec<Decision<T>> {
        let mut decisions = Vec::new();
        let gone: Vec<(WorkerId, &'static str)> = self
            .workers
            .iter()
            .filter_map(|(&id, w)| {
                if now.saturating_duration_since(w.last_seen) > self.limits.worker_timeout {
                    Some((id, "heartbeats missed"))
                } else if w.jammed_since.is_some_and(|since| {
                    now.saturating_duration_since(since) > self.limits.jam_timeout
                }) {
                    Some((id, "stream jammed"))
                } else {
                    None
                }
            })
            .collect();
        for (worker, why) in gone {
            decisions.extend(self.lose(worker, why));
        }
        let mut overdue: Vec<JobId> = self
            .jobs
            .iter()
            .filter(
                |(_, job)| matches!(job.place, Place::Running { deadline, .. } if deadline < now),
            )
            .map(|(id, _)| id.clone())
            .collect();
        overdue.sort();
        for id in overdue {
            self.let_go(&id);
            let job = self.jobs.remove(&id).expect("listed above");
            let Place::Running { worker, .. } = job.place else {
                unreachable!("listed as running");
            };
            self.release(worker, &job.requirement);
            let name = self.workers.get(&worker).map(|w| w.info.hello.name.clone());
            decisions.push(Decision::Cancel {
                worker,
                job: id.clone(),
            });
            decisions.push(Decision::Fail {
                failure: TaskFailure {
                    kind: FailureKind::Timeout,
                    message: format!(
                        "'{}' did not answer within its timeout of {:?} (plus {:?} grace); the coordinator cancelled it",
                        job.label, job.timeout, self.limits.grace
                    ),
                    worker: name,
                },
                payload: job.payload,
            });
        }
        self.check();
        decisions
    }
}
