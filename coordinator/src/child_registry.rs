//! Subgraph nodes' child runs, kept by the coordinator's run registry like
//! any run (their own ids, events and checkpoints; listed by `weft runs`),
//! and started from the parent's bundle.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::bundle::Bundle;
use crate::run::{ChildRuns, Pending, RunStatus};
use crate::runs::Runs;

/// How long a restored parent waits for its child to be restored too.
const FIND_CHILD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// One parent run's access to the registry.
pub struct RunChildren {
    runs: Runs,
    bundle: Arc<Bundle>,
}

impl RunChildren {
    /// Children of a run of `bundle`, kept in `runs`.
    pub fn new(runs: Runs, bundle: Bundle) -> Self {
        Self {
            runs,
            bundle: Arc::new(bundle),
        }
    }
}

impl ChildRuns for RunChildren {
    fn start(
        &self,
        graph: String,
        input: Map<String, Value>,
        traceparent: String,
    ) -> Pending<Result<String, String>> {
        let (runs, bundle) = (self.runs.clone(), self.bundle.clone());
        Box::pin(async move {
            let path = bundle
                .resolve(&graph)
                .ok_or_else(|| format!("graph '{graph}' is not a path inside the bundle"))?;
            let child = bundle.with_graph(&path).map_err(|e| e.to_string())?;
            // Without `input_map` the child gets the whole state and keeps
            // the fields it declares (all, if it declares none).
            let (child_graph, _) = child.load_graph().map_err(|e| e.to_string())?;
            let input: Map<String, Value> = if child_graph.fields.is_empty() {
                input
            } else {
                input
                    .into_iter()
                    .filter(|(name, _)| child_graph.fields.iter().any(|f| &f.name == name))
                    .collect()
            };
            let input_json = serde_json::to_string(&input).map_err(|e| e.to_string())?;
            let (run_id, _) = runs
                .submit_traced(child, &input_json, Some(traceparent))
                .await
                .map_err(|e| format!("the child run of {path} was not started: {e}"))?;
            Ok(run_id.to_string())
        })
    }

    fn outcome(&self, run_id: String) -> Pending<Result<Map<String, Value>, String>> {
        let runs = self.runs.clone();
        Box::pin(async move {
            // A restored parent may start before its child is restored.
            let since = std::time::Instant::now();
            let handle = loop {
                if let Some(handle) = runs.get(&run_id) {
                    break handle;
                }
                if since.elapsed() > FIND_CHILD_PATIENCE {
                    return Err(format!(
                        "child run {run_id} is not known to this coordinator"
                    ));
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            };
            let view = handle.ended().await.map_err(|e| e.to_string())?;
            match view.status {
                RunStatus::Completed => Ok((*view.state).clone()),
                RunStatus::Cancelled => Err(format!("child run {run_id} was cancelled")),
                _ => Err(format!(
                    "child run {run_id} failed: {}",
                    view.error.map(|e| e.to_string()).unwrap_or_default()
                )),
            }
        })
    }

    fn cancel(&self, run_ids: Vec<String>) {
        for run_id in run_ids {
            if let Some(handle) = self.runs.get(&run_id) {
                tokio::spawn(async move {
                    let _ = handle.cancel().await;
                });
            }
        }
    }
}
