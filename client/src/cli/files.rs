//! `weft validate` and `weft diagram`: commands on graph files alone.

use super::terminal::{err, out};

use std::path::{Path, PathBuf};

use weft_graph::{self as graph, GraphError};

use super::exit;
use super::python_check;

/// Prints `ok` (after any warnings, and a line for each Python function
/// the graph names) or one line per finding, the graphs its subgraph nodes
/// embed included.
pub fn validate(path: &Path) -> u8 {
    let python = python_errors(path);
    if !python.is_empty() {
        // The graph's own findings, then what does not compile.
        let findings = match graph::load_file(path) {
            Ok((_, warnings)) => warnings,
            Err(GraphError::Invalid(findings)) => findings,
            Err(_) => Vec::new(),
        };
        for finding in findings {
            out!("{finding}");
        }
        for error in python {
            out!("{error}");
        }
        return exit::INVALID;
    }
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

/// The Python files the graph at `path` names that do not compile; a note
/// on stderr when there is no `python3` to compile them with.
fn python_errors(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let dir = path.parent().unwrap_or(Path::new(""));
    let beside = |relative: &str| std::fs::read_to_string(dir.join(relative)).ok();
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("graph");
    let (graph, _) = graph::parse_graph_with(&text, graph::Format::from_path(path), stem, &beside);
    match python_check::compile(dir, &graph.python_files) {
        python_check::Compiled::Clean => Vec::new(),
        python_check::Compiled::Errors(errors) => errors,
        python_check::Compiled::NoPython => {
            err!(
                "note: there is no python3 on this machine's PATH, so the Python files ({}) were not compiled; a worker reports their syntax errors when it loads them",
                graph.python_files.join(", ")
            );
            Vec::new()
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

/// Prints the diagram, as text or SVG; findings of an invalid graph go
/// to stderr.
pub fn diagram(path: &Path, svg: bool) -> u8 {
    match graph::load_file(path) {
        Ok((graph, _)) => {
            let picture = if svg {
                graph::diagram::svg(&graph)
            } else {
                graph::diagram::diagram(&graph)
            };
            out!("{}", picture.trim_end());
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
