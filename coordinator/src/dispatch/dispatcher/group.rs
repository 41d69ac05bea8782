//! What the rest of a partitioned group's member tells the dispatcher
//! about the group's flow authority (`crate::ha::flow_link`, the runs'
//! registries, partition hand-overs): the connection and its answers, run
//! admissions and the runs going, what calls spent, runs held for a
//! hand-over. The dispatcher passes them to its registry's gate.

use super::*;

impl DispatcherHandle {
    /// Connected to the group's flow authority (connection `generation`):
    /// what the registry holds is declared on `link`.
    pub fn group_connected(
        &self,
        generation: u64,
        link: mpsc::UnboundedSender<super::group_gate::ToAuthority>,
    ) {
        let _ = self.tx.send(Command::GroupConnected { generation, link });
    }

    /// The group's flow authority answered on connection `generation`.
    pub fn group_answer(&self, generation: u64, answer: super::group_flow::Answer) {
        let _ = self.tx.send(Command::GroupAnswer { generation, answer });
    }

    /// Connection `generation` to the group's flow authority ended.
    pub fn group_disconnected(&self, generation: u64) {
        let _ = self.tx.send(Command::GroupDisconnected { generation });
    }

    /// Asks the group's flow authority whether a new run of `namespace`
    /// may start: its ticket (to release once the run is counted in its
    /// partition's report), or why not. Waits while no authority is
    /// connected; `Err(None)` if the coordinator is stopping.
    pub async fn admit_run(
        &self,
        namespace: String,
    ) -> Result<u64, Option<super::group_flow::RunRefusal>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::AdmitRun { namespace, reply })
            .map_err(|_| None)?;
        answer.await.map_err(|_| None)?.map_err(Some)
    }

    /// Places none of `runs`' queued tasks until they are forgotten (their
    /// partition is being handed over).
    pub fn hold_runs(&self, runs: Vec<RunId>) {
        let _ = self.tx.send(Command::HoldRuns { runs });
    }

    /// How many of `runs`' tasks run on workers now (0 once the
    /// dispatcher is gone).
    pub async fn running_of(&self, runs: std::collections::HashSet<RunId>) -> usize {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Command::RunningOf { runs, reply }).is_err() {
            return 0;
        }
        answer.await.unwrap_or(0)
    }

    /// An admitted run is counted in its partition's report now (or did
    /// not start).
    pub fn release_run(&self, ticket: u64) {
        let _ = self.tx.send(Command::ReleaseRun { ticket });
    }

    /// The runs going in `partition` (led here under `revision`), by
    /// namespace, for the group's flow authority.
    pub fn report_going(
        &self,
        partition: u32,
        revision: i64,
        counts: std::collections::BTreeMap<String, u32>,
    ) {
        let _ = self.tx.send(Command::Going {
            partition,
            revision,
            counts,
        });
    }

    /// `partition` is no longer led here.
    pub fn partition_gone(&self, partition: u32) {
        let _ = self.tx.send(Command::PartitionGone { partition });
    }

    /// A model call spent `tokens` and `cost` of `namespace`'s day, for
    /// the group's flow authority.
    pub fn spent(&self, namespace: String, tokens: u64, cost: f64) {
        let _ = self.tx.send(Command::Spent {
            namespace,
            tokens,
            cost,
        });
    }
}

impl Dispatcher {
    /// Answers the submission that asked for run admission `ticket`.
    pub(super) fn run_answered(
        &mut self,
        ticket: u64,
        answer: Result<u64, super::group_flow::RunRefusal>,
    ) {
        let asked = self
            .registry
            .gate()
            .is_some_and(|gate| gate.run_answered(ticket));
        let Some(reply) = self.run_admissions.remove(&ticket).filter(|_| asked) else {
            return;
        };
        if let Err(Ok(_)) = reply.send(answer)
            && let Some(gate) = self.registry.gate()
        {
            // The submission gave up waiting: the admission is not used.
            gate.release_run(ticket);
        }
    }

    /// Sends what the registry has for the group's flow authority.
    pub(super) fn tell_group(&mut self) {
        if !self.registry.in_group() {
            return;
        }
        let outbox = self.registry.group_outbox();
        if let Some((_, link)) = &self.group_link {
            for request in outbox {
                let _ = link.send(request);
            }
        }
    }
}
