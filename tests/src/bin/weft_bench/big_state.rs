//! W4: a 10 MB field beside a counter that a chain of nodes increments,
//! and the same state through chains of other lengths, so what a node
//! costs is told apart from taking the input and returning the result.

use std::time::Duration;

use anyhow::{Result, ensure};
use serde_json::json;
use weft_client::Client;

use weft_client::{GraphBuilder, NodeBuilder};

use super::{Args, Figure, chain, median, timed, timed_inputs};

/// Runs W4 has made, so each run's 10 MB differs from every earlier one's.
static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// W4: a chain of 20 next to a 10 MB field, and the same state through one
/// node (`--w4-chains`); each run's 10 MB differs from the last's (in its
/// first bytes), so it crosses whole every time. Then the same 10 MB
/// again, which the client names rather than sends after the first run.
pub(crate) async fn w4(client: &Client, args: &Args) -> Result<Vec<Figure>> {
    let mut blob = "x".repeat(10_000_000);
    let mut fresh = |_| {
        // (The digits of a counter no earlier run of this process had.)
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        blob.replace_range(0..20, &format!("{n:020}"));
        json!({"blob": blob, "counter": 0})
    };
    let mut medians = Vec::new();
    let mut figures = Vec::new();
    // The same state through one node and through twenty: the difference
    // is what a node costs; the one node's time is mostly taking the input
    // and returning the result.
    for &nodes in &args.w4_chains {
        let graph = chain("w4", nodes).setting("durability", args.durability.as_str());
        let samples = timed_inputs(client, &graph.bundle(), &mut fresh, args.iterations, |s| {
            ensure!(s["counter"] == json!(nodes), "counter is {}", s["counter"]);
            ensure!(
                s["blob"].as_str().map(str::len) == Some(10_000_000),
                "blob changed"
            );
            Ok(())
        })
        .await?;
        let median = median(&samples).as_secs_f64();
        medians.push((nodes, median));
        let (id, label) = match nodes {
            20 => ("w4".to_owned(), "W4 big state (10 MB), 20 nodes".to_owned()),
            1 => (
                "w4_one".to_owned(),
                "W4 the same, 1 node (input and result)".to_owned(),
            ),
            n => (format!("w4_{n}"), format!("W4 the same, {n} nodes")),
        };
        figures.push(Figure {
            id,
            label,
            per: Some((median * 1e6 / nodes as f64, "µs/node")),
            samples,
        });
    }
    // What a node costs beyond taking the input and returning the result:
    // the longest chain minus the shortest, over the nodes between.
    // The same input again and again: named after the first run.
    let again = fresh(0);
    let graph = chain("w4", 1).setting("durability", args.durability.as_str());
    let samples = timed(client, &graph, &again, args.iterations, |s| {
        ensure!(s["counter"] == json!(1), "counter is {}", s["counter"]);
        ensure!(s["blob"] == again["blob"], "blob changed");
        Ok(())
    })
    .await?;
    figures.push(Figure {
        id: "w4_again".into(),
        label: "W4 the same 10 MB again, named (1 node)".into(),
        per: Some((median(&samples).as_secs_f64() * 1e6, "µs/run")),
        samples,
    });
    let longest = medians.iter().max_by_key(|(n, _)| *n);
    let shortest = medians.iter().min_by_key(|(n, _)| *n);
    if let (Some(&(long, a)), Some(&(short, b))) = (longest, shortest)
        && long > short
    {
        let beyond = (a - b) * 1e6 / (long - short) as f64;
        figures.push(Figure {
            id: "w4_beyond".into(),
            label: format!("W4 per node beyond the transfer ({long} minus {short} nodes)"),
            per: Some((beyond, "µs/node")),
            samples: vec![Duration::from_secs_f64((a - b).max(0.0))],
        });
    }
    Ok(figures)
}

/// W4 written (`--only w4w`, not in `bench/compare.sh`): one step returns
/// a 10 MB string that nothing on the coordinator reads, which the run
/// holds as the text its worker sent, and the client reads back.
pub(crate) async fn w4_written(client: &Client, args: &Args) -> Result<Figure> {
    let graph = GraphBuilder::new("w4w")
        .setting("durability", args.durability.as_str())
        .node("write", NodeBuilder::task("report").start());
    let samples = timed(client, &graph, &json!({}), args.iterations, |s| {
        ensure!(
            s["report"].as_str().map(str::len) == Some(10_000_000),
            "no report"
        );
        Ok(())
    })
    .await?;
    let median = median(&samples).as_secs_f64();
    Ok(Figure {
        id: "w4_written".into(),
        label: "W4 a step writes 10 MB (1 node)".into(),
        per: Some((median * 1e6, "µs/run")),
        samples,
    })
}
