//! The `weft` command line (SPEC section 12).
//!
//! This version carries the commands that need no cluster: `validate` and
//! `diagram`. `run`, `status`, `resume` and the rest arrive with the cluster.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weft_coordinator::graph::{self, GraphError};

/// Exit status for an invalid graph or a usage error (SPEC section 12).
const EXIT_INVALID: u8 = 2;

#[derive(Parser)]
#[command(
    name = "weft",
    version,
    about = "Run workflow graphs on a Weft cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a graph file; prints `ok`, or one `error:`/`warning:` line per finding.
    Validate {
        /// The graph file (YAML, or JSON for `.json`).
        graph: PathBuf,
    },
    /// Draw a graph: waves top to bottom, side-by-side nodes run concurrently.
    Diagram {
        /// The graph file (YAML, or JSON for `.json`).
        graph: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate { graph } => validate(&graph),
        Command::Diagram { graph } => diagram(&graph),
    }
}

fn validate(path: &Path) -> ExitCode {
    match graph::load_file(path) {
        Ok((_, warnings)) => {
            for warning in warnings {
                println!("{warning}");
            }
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(GraphError::Invalid(findings)) => {
            for finding in findings {
                println!("{finding}");
            }
            ExitCode::from(EXIT_INVALID)
        }
        Err(error) => {
            println!("error: {error}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn diagram(path: &Path) -> ExitCode {
    match graph::load_file(path) {
        Ok((graph, _)) => {
            print!("{}", graph::diagram::diagram(&graph));
            ExitCode::SUCCESS
        }
        Err(GraphError::Invalid(findings)) => {
            for finding in findings {
                eprintln!("{finding}");
            }
            ExitCode::from(EXIT_INVALID)
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}
