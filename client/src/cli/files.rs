//! `weft validate` and `weft diagram`: commands on graph files alone.

use std::path::Path;

use weft_graph::{self as graph, GraphError};

use super::exit;

/// Prints `ok` (after any warnings) or one line per finding.
pub fn validate(path: &Path) -> u8 {
    match graph::load_file(path) {
        Ok((_, warnings)) => {
            for warning in warnings {
                println!("{warning}");
            }
            println!("ok");
            exit::OK
        }
        Err(GraphError::Invalid(findings)) => {
            for finding in findings {
                println!("{finding}");
            }
            exit::INVALID
        }
        Err(error) => {
            println!("error: {error}");
            exit::INVALID
        }
    }
}

/// Prints the diagram; findings of an invalid graph go to stderr.
pub fn diagram(path: &Path) -> u8 {
    match graph::load_file(path) {
        Ok((graph, _)) => {
            print!("{}", graph::diagram::diagram(&graph));
            exit::OK
        }
        Err(GraphError::Invalid(findings)) => {
            for finding in findings {
                eprintln!("{finding}");
            }
            exit::INVALID
        }
        Err(error) => {
            eprintln!("error: {error}");
            exit::INVALID
        }
    }
}
