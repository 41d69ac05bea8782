//! W1-py and W2-py (issue 13): W1 and W2 with Python functions from a
//! `functions:` sidecar, run by the workers' Python hosts.

use anyhow::{Result, ensure};
use serde_json::json;
use weft_client::{Client, GraphBundle};

use super::{Args, Figure, doubled, map_figure, median, timed_bundle};

/// The functions of W1-py and W2-py: LangGraph's nodes are the same
/// Python functions, run in its own process. `double` names the one
/// argument it takes, as LangGraph's `Send` hands its node only the item; a
/// `**kw` function would be handed the whole state on every call.
const PY_HELPERS: &str = "\
def inc(counter, **kw):
    return {\"counter\": counter + 1}

def double(item):
    return item * 2
";

/// W1-py: W1's chain with each node a sidecar function.
pub(crate) async fn w1_py(client: &Client, args: &Args) -> Result<Figure> {
    let mut yaml = format!(
        "name: w1py\nfunctions: helpers.py\nsettings: {{ max_steps: 10000, durability: {} }}\n\
         state:\n  counter: {{ type: integer, default: 0 }}\nnodes:\n",
        args.durability
    );
    for i in 0..200 {
        let next = if i + 1 < 200 {
            format!(", next: n{}", i + 1)
        } else {
            String::new()
        };
        let start = if i == 0 { ", start: true" } else { "" };
        yaml.push_str(&format!(
            "  n{i}: {{ kind: function, callable: inc{start}{next} }}\n"
        ));
    }
    let bundle = GraphBundle::from_text("w1py.yaml", &yaml).with_file(
        "helpers.py",
        PY_HELPERS.as_bytes(),
        0o644,
    );
    let samples = timed_bundle(client, &bundle, &json!({}), args.iterations, |s| {
        ensure!(s["counter"] == json!(200), "counter is {}", s["counter"]);
        Ok(())
    })
    .await?;
    let per = median(&samples).as_secs_f64() * 1e6 / 200.0;
    Ok(Figure {
        id: "w1py".into(),
        label: "W1-py chain, 200 Python nodes".into(),
        samples,
        per: Some((per, "µs/node")),
    })
}

/// W2-py: W2's map with a Python function as its branch.
pub(crate) async fn w2_py(client: &Client, args: &Args, n: usize) -> Result<Figure> {
    let items: Vec<usize> = (0..n).collect();
    let yaml = format!(
        "name: w2py\nfunctions: helpers.py\nsettings: {{ durability: {}, max_concurrency: {} }}\n\
         state:\n  items: {{ type: array, default: {} }}\n\
         nodes:\n  fan: {{ kind: map, start: true, over: state.items, as: item, branch: double, \
         output_key: doubled, collect_into: results }}\n  \
         double: {{ kind: function, callable: double, output_key: doubled }}\n",
        args.durability,
        args.slots * args.workers,
        serde_json::to_string(&items)?
    );
    let bundle = GraphBundle::from_text("w2py.yaml", &yaml).with_file(
        "helpers.py",
        PY_HELPERS.as_bytes(),
        0o644,
    );
    let iterations = args.iterations.min(3);
    let samples = timed_bundle(client, &bundle, &json!({}), iterations, |s| doubled(s, n)).await?;
    Ok(map_figure(
        format!("w2py_{n}"),
        format!("W2-py map, N = {n}"),
        samples,
        n,
    ))
}
