//! Graphs already parsed, by their bundle's digest: submitting a graph
//! that has been seen (the same files, byte for byte) skips parsing,
//! validating and checking the graphs it embeds, which is most of what a
//! submission costs. Bounded: the oldest entry goes when a new one comes.
//! Only valid graphs are kept, each with its run plan made once (the
//! coordinator's run limits do not change while it lives); the limits are
//! still checked per run.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use weft_machine::RunPlan;

use crate::bundle::{Bundle, BundleError, Family};
use crate::graph::Finding;
use crate::run_actor::RunLimits;

/// Bundles kept parsed at most.
const KEPT: usize = 64;

/// A bundle's graph, parsed and validated.
#[derive(Clone)]
pub(super) struct Parsed {
    /// The top graph, planned: shared by its runs.
    pub plan: Arc<RunPlan>,
    pub family: Arc<Family>,
    /// Its findings (warnings only: it is valid), as shown to submitters.
    pub warnings: Vec<String>,
}

/// The parsed graphs of recent bundles, planned under `limits`.
pub(super) struct ParsedGraphs {
    inner: Mutex<Kept>,
    limits: RunLimits,
}

#[derive(Default)]
struct Kept {
    by_digest: HashMap<String, Parsed>,
    order: VecDeque<String>,
}

impl ParsedGraphs {
    /// None kept yet; plans made under `limits`.
    pub(super) fn new(limits: RunLimits) -> Self {
        Self {
            inner: Mutex::default(),
            limits,
        }
    }

    /// `bundle`'s graph: kept, or parsed now (and kept if valid).
    pub(super) fn parse(&self, bundle: &Bundle) -> Result<Parsed, BundleError> {
        let digest = bundle.digest();
        if let Some(hit) = self.lock().by_digest.get(&digest) {
            return Ok(hit.clone());
        }
        let (graph, findings) = bundle.load_graph()?;
        let family = Arc::new(bundle.check_family(&graph)?);
        let parsed = Parsed {
            plan: RunPlan::new(Arc::new(graph), self.limits.clone()),
            family,
            warnings: findings.iter().map(Finding::to_string).collect(),
        };
        let mut kept = self.lock();
        if !kept.by_digest.contains_key(&digest) {
            if kept.order.len() == KEPT
                && let Some(oldest) = kept.order.pop_front()
            {
                kept.by_digest.remove(&oldest);
            }
            kept.order.push_back(digest.clone());
            kept.by_digest.insert(digest, parsed.clone());
        }
        Ok(parsed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(text: &str) -> Bundle {
        Bundle::new(
            "g.yaml".into(),
            [("g.yaml".to_owned(), text.as_bytes().to_vec(), 0o644)],
            1 << 20,
        )
        .unwrap()
    }

    const GRAPH: &str = "nodes:\n  a: { kind: task, handler: h, start: true }\n";

    #[test]
    fn a_bundle_seen_before_is_not_parsed_again_and_another_is() {
        let parsed = ParsedGraphs::new(RunLimits::default());
        let first = parsed.parse(&bundle(GRAPH)).unwrap();
        let again = parsed.parse(&bundle(GRAPH)).unwrap();
        assert!(Arc::ptr_eq(&first.plan, &again.plan));
        assert!(std::ptr::eq(first.plan.graph(), again.plan.graph()));
        let other = parsed.parse(&bundle(&GRAPH.replace("h,", "g,"))).unwrap();
        assert!(!std::ptr::eq(first.plan.graph(), other.plan.graph()));
    }

    #[test]
    fn an_invalid_bundle_is_refused_each_time_and_not_kept() {
        let parsed = ParsedGraphs::new(RunLimits::default());
        for _ in 0..2 {
            assert!(
                parsed
                    .parse(&bundle("nodes:\n  a: { kind: nope }\n"))
                    .is_err()
            );
        }
        assert!(parsed.lock().by_digest.is_empty());
    }

    #[test]
    fn the_oldest_goes_when_more_are_kept_than_the_bound() {
        let parsed = ParsedGraphs::new(RunLimits::default());
        for i in 0..=KEPT {
            parsed
                .parse(&bundle(&GRAPH.replace("h,", &format!("h{i},"))))
                .unwrap();
        }
        let kept = parsed.lock();
        assert_eq!(kept.by_digest.len(), KEPT);
        assert_eq!(kept.order.len(), KEPT);
    }
}
