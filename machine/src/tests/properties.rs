//! Property tests on random DAGs: readiness, determinism of waves, every
//! node ending done or skipped, and order-independent merges.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::merge::merge_wave;

/// A random DAG: `edges[j]` lists `(i, conditional)` for edges i → j, i < j.
#[derive(Debug, Clone)]
struct Dag {
    nodes: usize,
    edges: Vec<Vec<(usize, bool)>>,
    /// The truth value node i writes to `flag_i`.
    flags: Vec<bool>,
}

fn dag() -> impl Strategy<Value = Dag> {
    (2usize..12).prop_flat_map(|n| {
        let edges = (0..n)
            .map(|j| {
                proptest::collection::vec((0..n.max(1), any::<bool>(), any::<bool>()), 0..3)
                    .prop_map(move |raw| {
                        let mut list: Vec<(usize, bool)> = raw
                            .into_iter()
                            .filter(|&(i, keep, _)| i < j && keep)
                            .map(|(i, _, conditional)| (i, conditional))
                            .collect();
                        list.sort_unstable();
                        list.dedup_by_key(|(i, _)| *i);
                        list
                    })
            })
            .collect::<Vec<_>>();
        (Just(n), edges, proptest::collection::vec(any::<bool>(), n)).prop_map(
            |(nodes, edges, flags)| Dag {
                nodes,
                edges,
                flags,
            },
        )
    })
}

impl Dag {
    fn yaml(&self) -> String {
        let mut text = String::from("settings: { max_steps: 100 }\nnodes:\n");
        for j in 0..self.nodes {
            let start = if self.edges[j].is_empty() {
                ", start: true"
            } else {
                ""
            };
            text.push_str(&format!("  n{j}: {{ kind: task, handler: h{start} }}\n"));
        }
        text.push_str("edges:\n");
        let mut any = false;
        for (j, incoming) in self.edges.iter().enumerate() {
            for &(i, conditional) in incoming {
                any = true;
                let when = if conditional {
                    format!(", when: \"state.flag_{i}\"")
                } else {
                    String::new()
                };
                text.push_str(&format!("  - {{ from: n{i}, to: n{j}{when} }}\n"));
            }
        }
        if !any {
            text.push_str("  []\n");
            text = text.replace("edges:\n  []\n", "edges: []\n");
        }
        text
    }

    fn run(&self, order: Order) -> Harness {
        let mut h = Harness::new(&self.yaml(), json!({})).order(order);
        for j in 0..self.nodes {
            let flag = self.flags[j];
            h = h.on(&format!("n{j}"), move |_, _, _| {
                Ok(json!({ format!("flag_{j}"): flag, format!("out_{j}"): j }))
            });
        }
        h.run()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_dags_respect_readiness_and_end_settled(dag in dag()) {
        let h = dag.run(Order::Fifo);
        prop_assert_eq!(h.status(), RunStatus::Completed);
        let waves = h.waves();
        let mut wave_of: HashMap<String, usize> = HashMap::new();
        for (w, nodes) in waves.iter().enumerate() {
            for node in nodes {
                prop_assert!(wave_of.insert(node.clone(), w).is_none(), "{} ran twice", node);
            }
        }
        let skipped = h.skipped();
        for j in 0..dag.nodes {
            let id = format!("n{j}");
            let ran = wave_of.contains_key(&id);
            // Every node ends done or skipped, never both, never neither.
            prop_assert!(ran ^ skipped.contains(&id), "{} ran={} skipped={}", id, ran, skipped.contains(&id));
            prop_assert_eq!(h.machine.node_status(&id), Some(if ran { NodeStatus::Done } else { NodeStatus::Skipped }));
            if let Some(&w) = wave_of.get(&id) {
                // No node runs before its predecessors, and it runs only
                // when at least one incoming edge was taken.
                let mut any_taken = dag.edges[j].is_empty();
                for &(i, conditional) in &dag.edges[j] {
                    let pred = format!("n{i}");
                    if let Some(&pw) = wave_of.get(&pred) {
                        prop_assert!(pw < w, "{} (wave {}) ran before its predecessor {} (wave {})", id, w, pred, pw);
                        any_taken |= !conditional || dag.flags[i];
                    }
                }
                prop_assert!(any_taken, "{} ran with no incoming edge taken", id);
            }
        }
    }

    #[test]
    fn waves_and_final_state_do_not_depend_on_completion_order(dag in dag()) {
        let a = dag.run(Order::Fifo);
        let b = dag.run(Order::Lifo);
        prop_assert_eq!(a.waves(), b.waves());
        prop_assert_eq!(a.state(), b.state());
    }

    #[test]
    fn merge_of_disjoint_writes_is_order_independent(writes in proptest::collection::vec(proptest::collection::btree_map("[a-f]", 0i64..5, 0..4), 1..6)) {
        // Give each node its own fields: prefix them with the node index.
        let changes: Vec<(String, Map<String, Value>)> = writes
            .iter()
            .enumerate()
            .map(|(i, fields)| (format!("n{i}"), fields.iter().map(|(k, v)| (format!("{i}{k}"), json!(v))).collect()))
            .collect();
        let graph = plan("nodes:\n  n0: {kind: end, start: true}\n");
        let s0 = Map::new();
        let forward: Vec<(&str, &Map<String, Value>)> = changes.iter().map(|(n, c)| (n.as_str(), c)).collect();
        let backward: Vec<(&str, &Map<String, Value>)> = forward.iter().rev().copied().collect();
        let one = merge_wave(plan_graph(&graph), &s0, &forward).unwrap().overlay;
        let two = merge_wave(plan_graph(&graph), &s0, &backward).unwrap().overlay;
        let mut one_sorted: Vec<_> = one.into_iter().collect();
        let mut two_sorted: Vec<_> = two.into_iter().collect();
        one_sorted.sort_by(|x, y| x.0.cmp(&y.0));
        two_sorted.sort_by(|x, y| x.0.cmp(&y.0));
        prop_assert_eq!(one_sorted, two_sorted);
    }

    #[test]
    fn add_and_union_reducers_ignore_branch_order(s0 in -50i64..50, branches in proptest::collection::vec(-50i64..50, 2..5)) {
        use crate::graph::Reducer;
        use crate::merge::reduce;
        let values: Vec<Value> = branches.iter().map(|b| json!(b)).collect();
        let mut reversed = values.clone();
        reversed.reverse();
        prop_assert_eq!(reduce(&Reducer::Add, &json!(s0), &values), reduce(&Reducer::Add, &json!(s0), &reversed));
        let sets: Vec<Value> = branches.iter().map(|b| json!([b % 3, b % 5])).collect();
        let union = reduce(&Reducer::Union, &json!([]), &sets).unwrap();
        let mut as_set: Vec<i64> = union.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        as_set.sort_unstable();
        let mut expected: Vec<i64> = branches.iter().flat_map(|b| [b % 3, b % 5]).collect();
        expected.sort_unstable();
        expected.dedup();
        prop_assert_eq!(as_set, expected);
    }
}

fn plan_graph(plan: &RunPlan) -> &crate::graph::Graph {
    plan.graph()
}
