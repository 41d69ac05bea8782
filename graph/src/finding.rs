//! Problems found in a graph: every loader and validation rule reports into
//! one list, so a user sees all of them at once.

use std::fmt;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The graph runs, but probably not as meant.
    Warning,
    /// The graph cannot run.
    Error,
}

/// One problem, naming the nodes involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, naming nodes, fields and keys.
    pub message: String,
    /// Ids of the nodes involved.
    pub nodes: Vec<String>,
    /// Line in the graph file, where known.
    pub line: Option<u32>,
}

impl Finding {
    /// An error about the given nodes.
    pub fn error(message: impl Into<String>, nodes: &[&str]) -> Self {
        Self {
            severity: Severity::Error,
            message: message.into(),
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            line: None,
        }
    }

    /// A warning about the given nodes.
    pub fn warning(message: impl Into<String>, nodes: &[&str]) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(message, nodes)
        }
    }

    /// Attaches a file line.
    pub fn at_line(mut self, line: Option<u32>) -> Self {
        self.line = self.line.or(line);
        self
    }

    /// Reports whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{label}: {}", self.message)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// Why a graph could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// The file could not be read.
    #[error("cannot read graph file '{path}': {source}")]
    Read {
        /// The path as given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The graph is malformed; every finding is listed (warnings too).
    #[error("{}", render_findings(.0))]
    Invalid(Vec<Finding>),
}

impl GraphError {
    /// Every finding (errors and warnings) of an invalid graph.
    pub fn findings(&self) -> &[Finding] {
        match self {
            Self::Invalid(findings) => findings,
            Self::Read { .. } => &[],
        }
    }
}

fn render_findings(findings: &[Finding]) -> String {
    let errors = findings.iter().filter(|f| f.is_error()).count();
    let mut text = format!(
        "invalid graph ({errors} error{})",
        if errors == 1 { "" } else { "s" }
    );
    for finding in findings {
        text.push_str("\n  ");
        text.push_str(&finding.to_string());
    }
    text
}

/// Findings from `before` on, where they have no line yet, get `line`.
pub(crate) fn at_line(findings: &mut [Finding], before: usize, line: Option<u32>) {
    for finding in &mut findings[before..] {
        finding.line = finding.line.or(line);
    }
}
