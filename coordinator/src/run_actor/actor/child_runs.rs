//! How a run's actor carries out its subgraph nodes' effects: the child
//! runs are started and followed by the coordinator's run registry (a
//! [`ChildRuns`]), and what becomes of them is fed back to the parent's
//! actor as inputs, through its own command channel.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use weft_proto::events::StoredEvent;

use super::liveness::Command;
use crate::run_actor::{ChildError, Input, NodeId, RunEvent, RunId};

/// A future the registry returns.
pub type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How a child run ended: its final state or why it did not complete, and
/// what its model calls used, by model.
pub type ChildOutcome = (
    Result<Map<String, Value>, ChildError>,
    BTreeMap<String, weft_proto::types::Usage>,
);

/// Where the registry reports what a child run waits for people to answer
/// (node or path, kind, prompt), each time that changes: the list while it
/// is `waiting`, empty once it goes on.
pub type WaitReports = mpsc::UnboundedSender<Vec<(String, String, String)>>;

/// What a run needs of the registry for its subgraph nodes.
pub trait ChildRuns: Send + Sync {
    /// Starts the graph `graph` (named relative to the parent's graph) of
    /// the parent's bundle as a child run on `input`, its trace under the
    /// span `traceparent` names; its run id.
    fn start(
        &self,
        graph: String,
        input: Map<String, Value>,
        traceparent: String,
    ) -> Pending<Result<RunId, ChildError>>;

    /// Waits for run `run_id` to end: its final state if it completed, else
    /// why not; and what its model calls used, by model, either way.
    /// Meanwhile reports to `waits` what it waits for people to answer.
    fn outcome(&self, run_id: RunId, waits: WaitReports) -> Pending<ChildOutcome>;

    /// Cancels these runs.
    fn cancel(&self, run_ids: Vec<RunId>);
}

/// The parent's end: its registry, and a way to tell its actor.
#[derive(Clone)]
pub struct ChildLink {
    /// The registry; `None` where runs have no registry (tests of the
    /// actor), so a subgraph node fails saying so.
    pub runs: Option<Arc<dyn ChildRuns>>,
    /// The parent's actor (weak: it does not keep the actor alive).
    pub actor: mpsc::WeakSender<Command>,
}

impl ChildLink {
    /// Starts the child of subgraph node `node`, then follows it.
    pub fn start(
        &self,
        tracker: &tokio_util::task::TaskTracker,
        node: String,
        graph: String,
        input: Map<String, Value>,
        traceparent: String,
    ) {
        let link = self.clone();
        tracker.spawn(async move {
            let Some(runs) = link.runs.clone() else {
                let result = Err(ChildError::NoRegistry);
                link.tell(Input::ChildEnded {
                    node,
                    result,
                    usage: BTreeMap::new(),
                })
                .await;
                return;
            };
            match runs.start(graph, input, traceparent).await {
                Ok(run_id) => {
                    let started = Input::ChildStarted {
                        node: node.clone(),
                        run_id: run_id.clone(),
                    };
                    link.tell(started).await;
                    link.follow_to_end(&*runs, node, run_id).await;
                }
                Err(error) => {
                    link.tell(Input::ChildEnded {
                        node,
                        result: Err(error),
                        usage: BTreeMap::new(),
                    })
                    .await
                }
            }
        });
    }

    /// Follows the already started child `run_id` of subgraph node `node`.
    pub fn follow(&self, tracker: &tokio_util::task::TaskTracker, node: String, run_id: RunId) {
        let link = self.clone();
        tracker.spawn(async move {
            match link.runs.clone() {
                Some(runs) => link.follow_to_end(&*runs, node, run_id).await,
                None => {
                    let result = Err(ChildError::NoRegistry);
                    link.tell(Input::ChildEnded {
                        node,
                        result,
                        usage: BTreeMap::new(),
                    })
                    .await;
                }
            }
        });
    }

    /// Tells the parent what child `run_id` waits for people to answer, in
    /// order, then how it ended.
    async fn follow_to_end(&self, runs: &dyn ChildRuns, node: String, run_id: RunId) {
        let (waits, mut reports) = mpsc::unbounded_channel();
        let outcome = runs.outcome(run_id.clone(), waits);
        tokio::pin!(outcome);
        let (result, usage) = loop {
            tokio::select! {
                biased;
                Some(waiting) = reports.recv() => {
                    let (node, run_id) = (node.clone(), run_id.clone());
                    self.tell(Input::ChildWaiting { node, run_id, waiting }).await;
                }
                outcome = &mut outcome => break outcome,
            }
        };
        self.tell(Input::ChildEnded {
            node,
            result,
            usage,
        })
        .await;
    }

    /// Cancels child runs.
    pub fn cancel(&self, run_ids: Vec<RunId>) {
        if let Some(runs) = &self.runs {
            runs.cancel(run_ids);
        }
    }

    /// Feeds `input` to the parent's actor, if it still runs.
    async fn tell(&self, input: Input) {
        let Some(actor) = self.actor.upgrade() else {
            return;
        };
        let (reply, _) = oneshot::channel();
        let input = Box::new(input);
        let _ = actor.send(Command::Act { input, reply }).await;
    }
}

/// The child runs a log says were started: (node, run id).
pub(super) fn children_in(log: &[StoredEvent]) -> Vec<(NodeId, RunId)> {
    log.iter()
        .filter_map(|stored| match &*stored.event {
            RunEvent::SubgraphStarted { node, run_id } => Some((node.clone(), run_id.clone())),
            _ => None,
        })
        .collect()
}
