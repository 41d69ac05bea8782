//! What one run may use of the coordinator, so that no graph, input or
//! worker result can exhaust it: the graph's own bounds (attempts, steps,
//! loop iterations) are capped at submission, and what grows while it runs
//! (fields per output and in the state, map items, events, stored
//! messages) is capped as it grows. Each limit is a configuration key of the
//! same name, and every refusal names it.

use serde::{Deserialize, Serialize};

use crate::graph::{BYTE_BUDGET, Cost, Graph, STEP_BUDGET};

/// The caps on one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLimits {
    /// Most fields one task result may write.
    pub max_output_fields: usize,
    /// Most fields the run's state may hold.
    pub max_state_fields: usize,
    /// Highest `retry.max_attempts` a node may ask for.
    pub max_attempts: u32,
    /// Highest `settings.max_steps` a graph may ask for.
    pub max_steps: u32,
    /// Highest `settings.max_loop_iterations` a graph may ask for.
    pub max_loop_iterations: u32,
    /// Most items one map node may fan out over.
    pub max_map_items: usize,
    /// Most events one run may record.
    pub max_events: usize,
    /// Longest error message kept (longer ones are cut, with a marker).
    pub max_message_bytes: usize,
    /// Most teammate messages one item's inbox holds (unread, or handed to
    /// the step in flight); a send beyond it fails.
    #[serde(default = "default_inbox_messages")]
    pub max_inbox_messages: usize,
    /// What all the run's expression and template evaluations together
    /// may take (steps) and allocate or read (bytes); each one alone is
    /// bounded by the graph crate's per-evaluation budgets.
    #[serde(default = "default_eval_allowance")]
    pub max_run_eval: Cost,
    /// Most bytes the files of one knowledge base may hold (SPEC 17).
    #[serde(default = "default_knowledge_bytes")]
    pub max_knowledge_bytes: u64,
}

fn default_knowledge_bytes() -> u64 {
    crate::graph::knowledge::DEFAULT_MAX_KNOWLEDGE_BYTES
}

/// 100 times one evaluation's steps (about 100 s of work), 1024 times its
/// bytes.
fn default_eval_allowance() -> Cost {
    Cost {
        steps: 100 * STEP_BUDGET,
        bytes: 1024 * BYTE_BUDGET,
    }
}

fn default_inbox_messages() -> usize {
    1_000
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_output_fields: 10_000,
            max_state_fields: 10_000,
            max_attempts: 100,
            max_steps: 100_000,
            max_loop_iterations: 10_000,
            max_map_items: 100_000,
            max_events: 1_000_000,
            max_message_bytes: 4_096,
            max_inbox_messages: default_inbox_messages(),
            max_run_eval: default_eval_allowance(),
            max_knowledge_bytes: default_knowledge_bytes(),
        }
    }
}

impl RunLimits {
    /// What in `graph` asks for more than these limits allow; empty when
    /// nothing does.
    pub fn check_graph(&self, graph: &Graph) -> Vec<String> {
        let mut over = Vec::new();
        let settings = &graph.settings;
        let mut check = |what: String, value: u64, limit: u64, key: &str| {
            if value > limit {
                over.push(format!(
                    "{what} is {value}; this coordinator allows at most {limit} (configuration key {key})"
                ));
            }
        };
        check(
            "settings.max_steps".into(),
            settings.max_steps.into(),
            self.max_steps.into(),
            "max_steps",
        );
        check(
            "settings.max_loop_iterations".into(),
            settings.max_loop_iterations.into(),
            self.max_loop_iterations.into(),
            "max_loop_iterations",
        );
        for node in &graph.nodes {
            check(
                format!("node '{}': retry.max_attempts", node.id),
                node.retry.max_attempts.into(),
                self.max_attempts.into(),
                "max_attempts",
            );
        }
        over
    }

    /// `message`, cut to `max_message_bytes` (on a character boundary) with
    /// a marker saying how much was left out.
    pub fn clip(&self, message: String) -> String {
        if message.len() <= self.max_message_bytes {
            return message;
        }
        let mut end = self.max_message_bytes;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        format!(
            "{}… [{} more bytes cut]",
            &message[..end],
            message.len() - end
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_asking_for_more_is_refused_naming_the_key() {
        let yaml = "settings: { max_steps: 1000000 }\nnodes:\n  a: { kind: script, run: [x], start: true, retry: 5000 }\n";
        let (graph, _) = crate::graph::parse_graph(yaml, crate::graph::Format::Yaml, "g");
        let over = RunLimits::default().check_graph(&graph);
        assert_eq!(
            over,
            [
                "settings.max_steps is 1000000; this coordinator allows at most 100000 (configuration key max_steps)",
                "node 'a': retry.max_attempts is 5000; this coordinator allows at most 100 (configuration key max_attempts)",
            ]
        );
    }

    #[test]
    fn long_messages_are_cut_with_a_marker() {
        let limits = RunLimits {
            max_message_bytes: 10,
            ..RunLimits::default()
        };
        assert_eq!(limits.clip("short".into()), "short");
        assert_eq!(
            limits.clip("é".repeat(8)),
            "ééééé… [6 more bytes cut]",
            "cut on a character boundary"
        );
    }
}
