//! `weft validate` and `weft diagram`: commands on graph files alone.

use super::terminal::{err, out};

use std::path::Path;

use weft_graph::{self as graph, GraphError};

use super::exit;

/// Prints `ok` (after any warnings) or one line per finding.
pub fn validate(path: &Path) -> u8 {
    match graph::load_file(path) {
        Ok((_, warnings)) => {
            for warning in warnings {
                out!("{warning}");
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
