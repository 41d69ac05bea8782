//! Whether the connected workers host what a graph needs: answered at
//! submission, in one place. On a cluster that workers may still join, a
//! gap is a warning (the run waits for such a worker); on an embedded
//! cluster, whose workers are all there will be, it is a refusal. A loop's
//! worker-hosted `until` must be hosted when the run is submitted, on any
//! cluster (SPEC 4.2).

use super::binding::NodeBinding;
use super::{Fleet, Requirement, WorkerKind, WorkerStatus};
use crate::graph::Graph;

/// What a graph needs that the fleet does not host now.
#[derive(Debug, Default)]
pub struct Hosting {
    gaps: Vec<Gap>,
    untils: Vec<String>,
}

impl Fleet {
    /// What `graph` (its nodes bound as `bindings`) needs that no connected
    /// worker that may run `namespace`'s tasks hosts.
    pub fn hosting(
        &self,
        graph: &Graph,
        bindings: &[Option<NodeBinding>],
        namespace: &str,
    ) -> Hosting {
        let serving = Fleet {
            workers: self
                .workers
                .iter()
                .filter(|w| w.info.serves(namespace))
                .cloned()
                .collect(),
            functions_ever: self.functions_ever.clone(),
        };
        Hosting {
            gaps: unhosted(graph, bindings, &serving),
            untils: unhosted_untils(graph, &serving),
        }
    }
}

impl Hosting {
    /// The warnings a run is admitted with, or why it is refused: every
    /// gap when the workers are `fixed` (none will join), any unhosted
    /// `until`.
    pub fn admit(self, fixed: bool) -> Result<Vec<String>, Vec<String>> {
        if fixed && !self.gaps.is_empty() {
            return Err(self
                .gaps
                .into_iter()
                .map(|gap| {
                    format!(
                        "{}: no worker of this cluster hosts it and none will join; run it on a cluster with a worker that does",
                        gap.what
                    )
                })
                .collect());
        }
        if !self.untils.is_empty() {
            return Err(self.untils);
        }
        Ok(self.gaps.into_iter().map(|gap| gap.warning).collect())
    }
}

/// Where a worker gets Python from.
const PYTHON_HINT: &str = " (a worker hosts it when python3 runs there, or the interpreter \
     named by [python] interpreter in its --config)";

/// What the graph needs that no connected worker hosts now.
fn unhosted(graph: &Graph, bindings: &[Option<NodeBinding>], fleet: &Fleet) -> Vec<Gap> {
    let workers = &fleet.workers;
    let mut warnings = Vec::new();
    for (idx, node) in graph.nodes.iter().enumerate() {
        let Some(binding) = bindings.get(idx).and_then(Option::as_ref) else {
            continue;
        };
        let requirement = &binding.requirement;
        let up = workers.iter().filter(|w| !w.draining).map(|w| &w.info);
        // An agent's registered tools may be hosted by other workers.
        if !up.clone().any(|info| info.hosts(requirement))
            || !super::tools_hosted_among(requirement, up)
        {
            let hint = match requirement {
                Requirement::Kind(WorkerKind::Llm | WorkerKind::Agent) => {
                    " (a worker hosts it with a model provider: OPENAI_BASE_URL, or \
                     [providers.NAME] in its --config)"
                }
                Requirement::Kind(WorkerKind::Function) => PYTHON_HINT,
                _ => "",
            };
            let what = format!("node '{}' needs {requirement}{hint}", node.id);
            warnings.push(Gap {
                warning: format!(
                    "warning: {what}, which no connected worker hosts yet; it will wait for one"
                ),
                what,
            });
        }
    }
    python_gaps(graph, workers, &mut warnings);
    // A loop's `until` sentence is judged by a worker's model.
    let judge = Requirement::Kind(WorkerKind::Llm);
    if !workers.iter().any(|w| !w.draining && w.info.hosts(&judge)) {
        for node in &graph.nodes {
            if let crate::graph::NodeKind::Loop(config) = &node.kind
                && let crate::graph::Until::Sentence(sentence) = &config.until
            {
                let what = format!(
                    "loop node '{}' needs a worker with a model provider to judge until '{sentence}'",
                    node.id
                );
                warnings.push(Gap {
                    warning: format!("warning: {what}; none is connected yet, so it will wait"),
                    what,
                });
            }
        }
    }
    let ever: Vec<&str> = fleet.functions_ever.iter().map(String::as_str).collect();
    for (name, used_by) in graph.hosted_functions() {
        if workers
            .iter()
            .any(|w| w.info.hello.functions.contains(&name))
        {
            continue;
        }
        // A name no worker has ever announced may be a typo.
        let hint = (!ever.contains(&name.as_str()))
            .then(|| crate::graph::did_you_mean(&name, &ever))
            .flatten()
            .map(|close| format!(" (did you mean fn:{close}?)"))
            .unwrap_or_default();
        warnings.push(Gap {
            warning: format!(
                "warning: fn:{name} ({used_by}) is not hosted by any connected worker yet{hint}; the run will wait for one"
            ),
            what: format!("fn:{name} ({used_by}) needs a worker-hosted function{hint}"),
        });
    }
    warnings
}

/// Python reducers, conditions, routers and `until`s (function nodes are
/// tasks, checked with the other nodes) need a worker with Python.
fn python_gaps(graph: &Graph, workers: &[WorkerStatus], gaps: &mut Vec<Gap>) {
    if workers
        .iter()
        .any(|w| !w.draining && w.info.hosts(&Requirement::Python))
    {
        return;
    }
    for (function, used_by) in graph.python_calls() {
        let what = format!("{} ({used_by}) needs Python{PYTHON_HINT}", function.label());
        gaps.push(Gap {
            warning: format!("warning: {what}; no connected worker has it yet, so it will wait"),
            what,
        });
    }
}

/// The loops whose `until: fn:NAME` no connected worker hosts, as
/// refusals.
fn unhosted_untils(graph: &Graph, fleet: &Fleet) -> Vec<String> {
    graph
        .nodes
        .iter()
        .filter_map(|node| match &node.kind {
            crate::graph::NodeKind::Loop(config) => match &config.until {
                crate::graph::Until::Hosted(crate::graph::Code::Rust(name)) => Some((node, name)),
                _ => None,
            },
            _ => None,
        })
        .filter(|(_, name)| {
            !fleet
                .workers
                .iter()
                .any(|w| !w.draining && w.info.hello.functions.contains(*name))
        })
        .map(|(node, name)| {
            format!(
                "loop node '{}': until fn:{name} is hosted by no connected worker; a loop's worker-hosted \
                 until must be hosted when the run is submitted (start a worker that registers '{name}')",
                node.id
            )
        })
        .collect()
}

/// Something a graph needs that no connected worker hosts.
#[derive(Debug)]
struct Gap {
    /// What is needed, e.g. "node 'draft' needs handler 'draft'".
    what: String,
    /// The submission warning on a cluster workers may still join.
    warning: String,
}
