//! The `weft` command line (SPEC section 12).
//!
//! `validate` and `diagram` work on files alone. `run` submits a graph and
//! waits; without `--coordinator` (or `WEFT_COORDINATOR`) it starts an
//! embedded cluster for the run. `status`, `watch`, `runs`, `resume`,
//! `cancel`, `retry` and `index` talk to a coordinator.

/// jemalloc, with the `cli` feature that builds this binary: it
/// serves the many small, short-lived allocations of runs and tasks
/// faster than the system's (docs/benchmarks.md).
#[cfg(feature = "cli")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod cli;

use cli::terminal::err;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "weft",
    version,
    about = "Run workflow graphs on a Weft cluster"
)]
struct Cli {
    /// The coordinator, e.g. http://127.0.0.1:7700 (run: none starts an embedded cluster).
    #[arg(long, global = true, env = "WEFT_COORDINATOR")]
    coordinator: Option<String>,
    /// The CA (PEM) that signed an https:// coordinator's certificate (default: the system's roots).
    #[arg(long, global = true, env = "WEFT_CA")]
    ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) for mutual TLS, with --key.
    #[arg(long, global = true, env = "WEFT_CERT", requires = "key")]
    cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, global = true, env = "WEFT_KEY", requires = "cert")]
    key: Option<std::path::PathBuf>,
    /// The token to present to a coordinator that requires one (prefer
    /// WEFT_TOKEN: a flag is visible to other users in the process list).
    #[arg(long, global = true, env = "WEFT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Without --coordinator: run on a cluster in a temporary directory
    /// that keeps nothing, instead of the local cluster of the Weft
    /// directory (WEFT_HOME, default ~/.local/share/weft).
    #[arg(long, global = true, env = "WEFT_EPHEMERAL", value_parser = clap::builder::BoolishValueParser::new())]
    ephemeral: bool,
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
        /// Draw it as an SVG document (the run viewer's picture) instead
        /// of text.
        #[arg(long)]
        svg: bool,
    },
    /// Submit a graph and wait for its result.
    Run {
        /// The graph file.
        graph: PathBuf,
        /// The run's input: a JSON object, or @FILE.
        #[arg(long)]
        input: Option<String>,
        /// Print exactly one JSON object.
        #[arg(long)]
        json: bool,
        /// Show waves, nodes and map progress as the run goes.
        #[arg(long)]
        watch: bool,
        /// Workers of the embedded cluster.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
        workers: u32,
        /// Print the run id and return at once (needs --coordinator).
        #[arg(long)]
        detach: bool,
        /// Send bundled files whose symbolic links lead outside the graph's
        /// directory (refused otherwise).
        #[arg(long)]
        allow_outside_links: bool,
        /// The run's priority in its namespace's queue, over the graph's
        /// settings.priority.
        #[arg(long, value_parser = ["high", "normal", "low"])]
        priority: Option<String>,
        /// Run every step: take no node cache entries and keep none.
        #[arg(long)]
        no_cache: bool,
    },
    /// A run's status and state.
    Status {
        /// The run id.
        run: String,
        /// Print exactly one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Start a new run from a run's state after one of its waves, with
    /// fields replaced; prints the new run's id.
    Fork {
        /// The run to fork.
        run: String,
        /// Where in the run's history: a wave to fork after (0: the input),
        /// or a point within the next wave (`3.57`, as `weft state`
        /// lists them); default: the last kept. A subgraph node's child
        /// run is forked with its parent: the id printed is the parent's
        /// fork.
        #[arg(long, value_name = "STEP")]
        at: Option<weft_client::HistoryPoint>,
        /// A field of the fork's state: FIELD=JSON (a value that is not
        /// JSON is taken as a string); repeatable.
        #[arg(long = "set", value_name = "FIELD=JSON")]
        set: Vec<String>,
        /// Print exactly one JSON object: `{"run_id", "forked_from": {"run",
        /// "step", "point", "at"}}`.
        #[arg(long)]
        json: bool,
    },
    /// A run's state after one of its waves (or at a point within one),
    /// read from its history.
    State {
        /// The run id.
        run: String,
        /// The wave (0: the input, before any wave), or a point within the
        /// next wave (`3.57`); default: the last kept.
        #[arg(long, value_name = "STEP")]
        at: Option<weft_client::HistoryPoint>,
        /// Print exactly one JSON object: `{"run_id", "step", "point",
        /// "at", "state", "waves": [{"step", "point", "at_unix_ms",
        /// "status", "changed", "removed"}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Follow a run's events until it ends (or waits for a person).
    Watch {
        /// The run id.
        run: String,
        /// Print each event as one JSON object per line (JSON Lines).
        #[arg(long)]
        json: bool,
    },
    /// List runs.
    Runs {
        /// Show at most this many (newest first).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
        /// Show the runs older than this run id (the next page).
        #[arg(long)]
        after: Option<String>,
        /// Only runs of this status (running, waiting, completed, failed, cancelled).
        #[arg(long, value_parser = cli::listing::parse_status)]
        status: Option<weft_client::RunStatus>,
        /// Only runs of the graph of this name.
        #[arg(long)]
        graph: Option<String>,
        /// Print exactly one JSON object: `{"runs": [...], "next": ID|null}`.
        #[arg(long)]
        json: bool,
    },
    /// The group of coordinators: its partitions, who leads each and the
    /// runs each holds.
    Group {
        /// Print exactly one JSON object (the API's `/api/v1/group`).
        #[arg(long)]
        json: bool,
    },
    /// Answer a waiting approval or input node.
    Resume {
        /// The run id.
        run: String,
        /// The waiting node.
        node: String,
        /// The answer: JSON when it parses, else a string (`approve`/`reject`).
        value: String,
        /// A comment (approvals).
        #[arg(long)]
        comment: Option<String>,
    },
    /// Cancel a run.
    Cancel {
        /// The run id.
        run: String,
    },
    /// Remove an ended run and its records.
    Delete {
        /// The run id.
        run: String,
    },
    /// Re-run a failed run from the wave that failed.
    Retry {
        /// The run id.
        run: String,
    },
    /// Knowledge indexes: build a graph's ahead of its runs, list those kept.
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
}

#[derive(Subcommand)]
enum IndexCommand {
    /// Build the indexes of a graph's knowledge bases on the cluster (each
    /// once per content; one already kept is not built again).
    Build {
        /// The graph file.
        graph: PathBuf,
        /// Print exactly one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Load a knowledge base's chunks and embeddings (built on the cluster)
    /// into the PostgreSQL table of another knowledge base's `store:`.
    Push {
        /// The graph file.
        graph: PathBuf,
        /// The knowledge base to load (one with `sources`).
        knowledge: String,
        /// The knowledge base whose `store: {kind: pgvector, url, table}`
        /// names the table (its URL's `${NAME}`s read from the environment).
        #[arg(long)]
        to: String,
        /// Print exactly one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The indexes the coordinator keeps, most recently used first.
    List {
        /// Only this namespace's (default: every namespace you may read).
        #[arg(long)]
        namespace: Option<String>,
        /// Print exactly one JSON object: `{"indexes": [...]}`.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::connect::set_tls(weft_client::ClientTls {
        ca: cli.ca.clone(),
        identity: cli.cert.clone().zip(cli.key.clone()),
        server_name: None,
    });
    cli::connect::set_token(cli.token.clone());
    cli::commands::set_ephemeral(cli.ephemeral);
    // `validate` and `diagram` read the file alone: a coordinator given on
    // their command line (not through WEFT_COORDINATOR, which is set for
    // everything) is a mistake worth saying.
    let local = matches!(
        cli.command,
        Command::Validate { .. } | Command::Diagram { .. }
    );
    if local && std::env::args().any(|a| a == "--coordinator" || a.starts_with("--coordinator=")) {
        err!("error: validate and diagram read the graph file alone: leave out --coordinator");
        return ExitCode::from(cli::exit::INVALID);
    }
    let code = match cli.command {
        Command::Validate { graph } => cli::files::validate(&graph),
        Command::Diagram { graph, svg } => cli::files::diagram(&graph, svg),
        command => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    err!("error: cannot start the async runtime: {error}");
                    return ExitCode::from(1);
                }
            };
            runtime.block_on(remote(cli.coordinator, command))
        }
    };
    ExitCode::from(code)
}

async fn remote(coordinator: Option<String>, command: Command) -> u8 {
    use cli::commands as c;
    match command {
        Command::Run {
            graph,
            input,
            json,
            watch,
            workers,
            detach,
            allow_outside_links,
            priority,
            no_cache,
        } => {
            let options = c::RunOptions {
                no_cache,
                input,
                json,
                watch,
                workers,
                detach,
                allow_outside_links,
                priority: priority.as_deref().and_then(weft_graph::Priority::parse),
            };
            c::run(coordinator, &graph, options).await
        }
        Command::Status { run, json } => c::status(coordinator, &run, json).await,
        Command::Watch { run, json } => c::watch(coordinator, &run, json).await,
        Command::State { run, at, json } => c::state(coordinator, &run, at, json).await,
        Command::Fork { run, at, set, json } => c::fork(coordinator, &run, at, &set, json).await,
        Command::Runs {
            limit,
            after,
            status,
            graph,
            json,
        } => {
            let listing = cli::listing::Listing {
                limit,
                after: after.as_deref(),
                status,
                graph: graph.as_deref(),
                json,
            };
            c::runs(coordinator, listing).await
        }
        Command::Group { json } => c::group(coordinator, json).await,
        Command::Resume {
            run,
            node,
            value,
            comment,
        } => c::resume(coordinator, &run, &node, &value, comment).await,
        Command::Cancel { run } => c::cancel(coordinator, &run).await,
        Command::Delete { run } => c::delete(coordinator, &run).await,
        Command::Retry { run } => c::retry(coordinator, &run).await,
        Command::Index {
            command: IndexCommand::Build { graph, json },
        } => c::index_build(coordinator, &graph, json).await,
        Command::Index {
            command:
                IndexCommand::Push {
                    graph,
                    knowledge,
                    to,
                    json,
                },
        } => c::index_push(coordinator, &graph, &knowledge, &to, json).await,
        Command::Index {
            command: IndexCommand::List { namespace, json },
        } => c::index_list(coordinator, namespace.as_deref(), json).await,
        Command::Validate { .. } | Command::Diagram { .. } => {
            unreachable!("handled without a runtime")
        }
    }
}
