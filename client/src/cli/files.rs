//! `weft validate` and `weft diagram`: commands on graph files alone.

use super::terminal::{err, out};

use std::path::{Path, PathBuf};

use weft_graph::{self as graph, GraphError};

use super::exit;

/// Prints `ok` (after any warnings, and a line for each Python function
/// the graph names) or one line per finding, the graphs its subgraph nodes
/// embed included.
pub fn validate(path: &Path) -> u8 {
    match graph::load_file(path) {
        Ok((graph, warnings)) => {
            for warning in warnings {
                out!("{warning}");
            }
            let mut errors = Vec::new();
            let top = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            embedded_errors(path, &graph, &mut vec![top], &mut errors);
            if !errors.is_empty() {
                for error in errors {
                    out!("{error}");
                }
                return exit::INVALID;
            }
            // Which names are Python (SPEC 4.3), so a name is never
            // silently taken for something else.
            for (function, used_by) in graph.python_functions() {
                out!("python: {} — {used_by}", function.label());
            }
            out!("ok");
            exit::OK
        }
        Err(GraphError::Invalid(findings)) => {
            for finding in findings {
                out!("{finding}");
            }
            exit::INVALID
        }
        Err(error) => {
            out!("error: {error}");
            exit::INVALID
        }
    }
}

/// The errors of the graphs `graph` (at `path`) embeds, transitively, each
/// naming its file; and a graph that embeds itself.
fn embedded_errors(
    path: &Path,
    graph: &graph::Graph,
    stack: &mut Vec<PathBuf>,
    errors: &mut Vec<String>,
) {
    let dir = path.parent().unwrap_or(Path::new(""));
    for node in &graph.nodes {
        let graph::NodeKind::Subgraph(config) = &node.kind else {
            continue;
        };
        let child = dir.join(&config.graph);
        let Ok(real) = std::fs::canonicalize(&child) else {
            errors.push(format!(
                "error: node '{}': embedded graph '{}' cannot be read",
                node.id,
                child.display()
            ));
            continue;
        };
        if let Some(at) = stack.iter().position(|p| *p == real) {
            let cycle: Vec<String> = stack[at..]
                .iter()
                .chain([&real])
                .map(|p| {
                    p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            errors.push(format!(
                "error: node '{}': subgraph recursion: {} (a graph cannot embed itself)",
                node.id,
                cycle.join(" → ")
            ));
            continue;
        }
        match graph::load_file(&child) {
            Ok((embedded, _)) => {
                stack.push(real);
                embedded_errors(&child, &embedded, stack, errors);
                stack.pop();
            }
            Err(GraphError::Invalid(findings)) => errors.extend(
                findings
                    .iter()
                    .filter(|f| f.is_error())
                    .map(|f| format!("{} (embedded by node '{}'): {f}", child.display(), node.id)),
            ),
            Err(error) => errors.push(format!("error: node '{}': {error}", node.id)),
        }
    }
}

/// Prints the diagram; findings of an invalid graph go to stderr.
pub fn diagram(path: &Path) -> u8 {
    match graph::load_file(path) {
        Ok((graph, _)) => {
            out!("{}", graph::diagram::diagram(&graph).trim_end());
            exit::OK
        }
        Err(GraphError::Invalid(findings)) => {
            for finding in findings {
                err!("{finding}");
            }
            exit::INVALID
        }
        Err(error) => {
            err!("error: {error}");
            exit::INVALID
        }
    }
}
