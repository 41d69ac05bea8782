//! Subgraph nodes' child runs, kept by the coordinator's run registry like
//! any run (their own ids, events and checkpoints; listed by `weft runs`),
//! and started from the parent's bundle.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::Runs;
use crate::bundle::{Bundle, Family};
use crate::run_actor::{
    ChildError, ChildOutcome, ChildRuns, Owner, Pending, RunEvent, RunHandle, RunId, RunPlan,
    RunRequestError, RunStatus, RunView, WaitReports,
};

/// How long a restored parent waits for its child to be restored too.
const FIND_CHILD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// One parent run's access to the registry.
struct RunChildren {
    /// The parent run.
    parent: RunId,
    runs: Runs,
    bundle: Arc<Bundle>,
    /// The graphs of the whole tree, parsed at the top run's submission.
    family: Arc<Family>,
    /// The parent's owner, which its children share.
    owner: Owner,
}

impl ChildRuns for RunChildren {
    fn start(
        &self,
        graph: String,
        input: Map<String, Value>,
        traceparent: String,
    ) -> Pending<Result<RunId, ChildError>> {
        let (runs, bundle, family) = (self.runs.clone(), self.bundle.clone(), self.family.clone());
        let owner = self.owner.clone();
        let parent = self.parent.clone();
        Box::pin(async move {
            let path = bundle
                .resolve(&graph)
                .ok_or_else(|| ChildError::OutsideBundle(graph.clone()))?;
            let refused = |error: &dyn std::fmt::Display| ChildError::Refused(error.to_string());
            let child = bundle.with_graph(&path).map_err(|e| refused(&e))?;
            let child_graph = family
                .graph(&path)
                .ok_or_else(|| ChildError::Unchecked(graph.clone()))?;
            // Without `input_map` the child gets the whole state and keeps
            // the fields it declares (all, if it declares none).
            let input: Map<String, Value> = if child_graph.fields.is_empty() {
                input
            } else {
                input
                    .into_iter()
                    .filter(|(name, _)| child_graph.fields.iter().any(|f| &f.name == name))
                    .collect()
            };
            let input_json = serde_json::to_string(&input).map_err(|e| refused(&e))?;
            runs.check_input_size(&input_json)
                .map_err(|e| refused(&e))?;
            let run_id = runs
                .admit(super::admission::Submission {
                    bundle: child,
                    graph: super::admission::Planned::Fresh(child_graph),
                    family,
                    input_json: &input_json,
                    referenced: Vec::new(),
                    warnings: Vec::new(),
                    owner,
                    trace_parent: Some(traceparent),
                    parent: Some(parent),
                })
                .await
                .map_err(|e| ChildError::NotStarted {
                    graph: path.clone(),
                    reason: e.to_string(),
                })?
                .id;
            Ok(run_id)
        })
    }

    fn outcome(&self, run_id: RunId, waits: WaitReports) -> Pending<ChildOutcome> {
        let runs = self.runs.clone();
        Box::pin(async move {
            // A restored parent may start before its child is restored.
            let Ok(handle) =
                tokio::time::timeout(FIND_CHILD_PATIENCE, runs.registered(&run_id)).await
            else {
                return (Err(ChildError::Unknown(run_id)), BTreeMap::new());
            };
            let view = match ended_reporting_waits(&handle, &waits).await {
                Ok(view) => view,
                Err(error) => {
                    let error = error.to_string();
                    return (Err(ChildError::Failed { run_id, error }), BTreeMap::new());
                }
            };
            let over_budget = view
                .error
                .as_ref()
                .is_some_and(|error| error.kind() == "BudgetExceeded");
            let result = match view.status {
                RunStatus::Completed => Ok((*view.state).clone()),
                RunStatus::Cancelled => Err(ChildError::Cancelled(run_id)),
                _ if over_budget => Err(ChildError::OverBudget {
                    run_id,
                    error: view.error.map(|e| e.to_string()).unwrap_or_default(),
                }),
                _ => Err(ChildError::Failed {
                    run_id,
                    error: view.error.map(|e| e.to_string()).unwrap_or_default(),
                }),
            };
            (result, view.models.as_ref().clone())
        })
    }

    fn cancel(&self, run_ids: Vec<RunId>) {
        for run_id in run_ids {
            if let Some(handle) = self.runs.get(&run_id) {
                self.runs.tracker.spawn(async move {
                    let _ = handle.cancel(None).await;
                });
            }
        }
    }
}

impl Runs {
    /// What run `parent` of `plan` (owned by `owner`) needs to run its
    /// subgraph nodes' child runs; `None` without any.
    pub(super) fn children_of(
        &self,
        parent: &RunId,
        plan: &RunPlan,
        bundle: &Bundle,
        family: Arc<Family>,
        owner: Owner,
    ) -> Option<Arc<dyn ChildRuns>> {
        let embeds = plan
            .graph()
            .nodes
            .iter()
            .any(|node| matches!(node.kind, crate::graph::NodeKind::Subgraph(_)));
        embeds.then(|| {
            let children = RunChildren {
                parent: parent.clone(),
                runs: self.clone(),
                bundle: Arc::new(bundle.clone()),
                family,
                owner,
            };
            Arc::new(children) as Arc<dyn ChildRuns>
        })
    }

    /// Run `id`, once it is registered (woken by each registration, never
    /// polled).
    async fn registered(&self, id: &str) -> RunHandle {
        let mut registered = self.registered.subscribe();
        loop {
            if let Some(handle) = self.get(id) {
                return handle;
            }
            if registered.changed().await.is_err() {
                // The registry is gone with its coordinator.
                return std::future::pending().await;
            }
        }
    }
}

/// Run `handle`'s view once it has ended, reporting to `waits` what it
/// waits for people to answer each time that changes (woken by its events,
/// never polled).
async fn ended_reporting_waits(
    handle: &RunHandle,
    waits: &WaitReports,
) -> Result<RunView, RunRequestError> {
    let mut told = Vec::new();
    loop {
        let view = handle.get().await?;
        if view.status.is_terminal() {
            return Ok(view);
        }
        let now = match view.status {
            RunStatus::Waiting => view.waiting,
            _ => Vec::new(),
        };
        if now != told {
            let _ = waits.send(now.clone());
            told = now;
        }
        let (_, live) = handle.watch(view.event_count).await?;
        let Some(mut live) = live else { continue };
        loop {
            match live.recv().await {
                Ok(stored)
                    if matches!(
                        *stored.event,
                        RunEvent::RunFinished { .. }
                            | RunEvent::WaitingForInput { .. }
                            | RunEvent::InputReceived { .. }
                    ) =>
                {
                    break;
                }
                Ok(_) => {}
                // Behind or closed: look at the run again.
                Err(_) => break,
            }
        }
    }
}
