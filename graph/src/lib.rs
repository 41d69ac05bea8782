//! Weft's graph model: reading a graph file, validating it, and drawing it.
//!
//! Everything here is pure: text in, a typed [`Graph`] or a list of
//! [`Finding`]s out. Reading the file from disk is the one exception, kept to
//! [`load_file`].

#![warn(missing_docs)]

mod agents;
mod approvers;
mod builder;
mod builder_kinds;
mod cel;
mod cel_cost;
mod coordinator_reads;
mod declarations;
pub mod diagram;
mod document;
mod eval_meter;
mod expr;
mod finding;
pub mod knowledge;
pub mod limits;
mod lines;
mod load;
mod model;
mod python;
mod python_names;
mod raw_node;
mod schema;
mod script_files;
mod state_names;
mod tools;
pub mod topology;
mod validate;

use std::path::Path;

pub use approvers::{Approver, ROLES};
pub use builder::{END, START};
pub use cel::CelExpr;
pub use cel_cost::{BYTE_BUDGET, Cost, STEP_BUDGET};
pub use coordinator_reads::coordinator_reads;
pub use declarations::*;
pub use document::{Format, did_you_mean};
pub use eval_meter::{HeavyRunner, Meter};
pub use expr::{ExprError, Strictness, Template, TemplateContext, truthy};
pub use finding::{Finding, GraphError, Severity};
pub use knowledge::{KnowledgeDecl, missing_knowledge_sources, oversized_knowledge};
pub use load::TOP_LEVEL_KEYS;
pub use model::kinds::*;
pub use model::*;
pub use python::{
    Code, PyDef, PyFunction, PyModule, PyParam, SourceFiles, import_path, is_identifier, no_files,
};
pub use raw_node::{KINDS, node_fields};
pub use schema::{Schema, SchemaError};
pub use script_files::missing_script_files;
pub use tools::{TEAMMATE_TOOLS, ToolDecl, ToolRun, is_tool_name};

/// Parses and validates graph text. Returns the graph (possibly partial when
/// there are errors) and every finding, errors and warnings alike.
pub fn parse_graph(text: &str, format: Format, fallback_name: &str) -> (Graph, Vec<Finding>) {
    parse_graph_with(text, format, fallback_name, &no_files)
}

/// As [`parse_graph`], reading the Python files the graph names (its
/// `functions:` sidecar, import-path modules, `nodes/<id>.py`) through
/// `files`, by path relative to the graph's directory.
pub fn parse_graph_with(
    text: &str,
    format: Format,
    fallback_name: &str,
    files: SourceFiles<'_>,
) -> (Graph, Vec<Finding>) {
    if let Some(too_big) = limits::check_text(text) {
        return refused(format, fallback_name, vec![too_big]);
    }
    let mut findings = Vec::new();
    let mut duplicates = Vec::new();
    let document = match document::parse_text_with_duplicates(text, format) {
        Ok((document, repeated)) => {
            duplicates = repeated;
            document
        }
        Err(finding) => {
            findings.push(finding);
            serde_json::Value::Null
        }
    };
    let over_limits = limits::check_document(&document);
    if !over_limits.is_empty() {
        return refused(format, fallback_name, over_limits);
    }
    let syntax_failed = !findings.is_empty();
    findings.extend(duplicates);
    let graph = load::build(&document, text, format, fallback_name, files, &mut findings);
    if syntax_failed {
        // The empty-document finding adds nothing to a syntax error.
        findings.truncate(1);
    } else {
        findings.extend(validate::validate(&graph));
    }
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    (graph, findings)
}

/// An empty graph with the findings that refused the text.
fn refused(format: Format, fallback_name: &str, findings: Vec<Finding>) -> (Graph, Vec<Finding>) {
    let graph = load::build(
        &serde_json::Value::Null,
        "",
        format,
        fallback_name,
        &no_files,
        &mut Vec::new(),
    );
    (graph, findings)
}

/// Parses graph text; fails with every finding when any is an error.
pub fn load_str(
    text: &str,
    format: Format,
    fallback_name: &str,
) -> Result<(Graph, Vec<Finding>), GraphError> {
    load_str_with(text, format, fallback_name, &no_files)
}

/// As [`load_str`], reading the Python files it names through `files`.
pub fn load_str_with(
    text: &str,
    format: Format,
    fallback_name: &str,
    files: SourceFiles<'_>,
) -> Result<(Graph, Vec<Finding>), GraphError> {
    let (graph, findings) = parse_graph_with(text, format, fallback_name, files);
    if findings.iter().any(Finding::is_error) {
        return Err(GraphError::Invalid(findings));
    }
    Ok((graph, findings))
}

/// Reads and parses a graph file (YAML, or JSON for `.json`).
pub fn load_file(path: &Path) -> Result<(Graph, Vec<Finding>), GraphError> {
    let text = std::fs::read_to_string(path).map_err(|source| GraphError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("graph");
    let dir = path.parent().unwrap_or(Path::new(""));
    let beside = |relative: &str| std::fs::read_to_string(dir.join(relative)).ok();
    let (graph, mut findings) = load_str_with(&text, Format::from_path(path), stem, &beside)?;
    let mut missing = missing_script_files(&graph, &|relative| dir.join(relative).is_file());
    if !graph.knowledge.is_empty() {
        let listed = knowledge::files_under(dir);
        let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
        missing.extend(missing_knowledge_sources(&graph, &listed));
    }
    if !missing.is_empty() {
        findings.splice(0..0, missing);
        return Err(GraphError::Invalid(findings));
    }
    Ok((graph, findings))
}
