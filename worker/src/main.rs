//! The `worker` binary: hosts the built-in `script` kind. Workers with Rust
//! handlers are ordinary programs built on the `weft-worker` library.

/// jemalloc, where the crate's `jemalloc` feature is on (the default): it
/// serves the many small, short-lived allocations of runs and tasks
/// faster than the system's (docs/benchmarks.md).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(name = "worker", version, about = "A Weft worker")]
struct Args {
    /// The coordinator, e.g. http://127.0.0.1:7700.
    #[arg(
        long,
        env = "WEFT_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    coordinator: String,
    /// etcd endpoints of a group of coordinators (comma-separated, e.g.
    /// http://10.0.0.1:2379,http://10.0.0.2:2379): join whichever leads,
    /// instead of --coordinator.
    #[arg(
        long,
        env = "WEFT_ETCD",
        value_delimiter = ',',
        conflicts_with = "coordinator"
    )]
    etcd: Vec<String>,
    /// The CA (PEM) of https:// etcd endpoints' certificates (default: the
    /// system's roots).
    #[arg(long, env = "WEFT_ETCD_CA")]
    etcd_ca: Option<PathBuf>,
    /// A client certificate (PEM) for etcd, with --etcd-key.
    #[arg(long, env = "WEFT_ETCD_CERT", requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// The etcd client certificate's private key (PEM).
    #[arg(long, env = "WEFT_ETCD_KEY", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// Tasks run at once (default: number of CPUs).
    #[arg(long)]
    slots: Option<u32>,
    /// The worker's name (default: HOST-PID, the host's name and this process's id).
    #[arg(long)]
    name: Option<String>,
    /// Scratch and cache directory.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// A file of `NAME=value` lines: secrets for `${NAME}` in node
    /// configuration, taking precedence over the worker's environment
    /// (default: $WEFT_SECRETS_FILE).
    #[arg(long)]
    secrets_file: Option<PathBuf>,
    /// Configuration file (TOML): `[providers.NAME]` tables of model
    /// providers for `llm` and `agent` steps, `[telemetry]`, and
    /// `[python]` (interpreter, pool_size, enabled) (default:
    /// $WEFT_WORKER_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit 0, or the refusal and
    /// exit 2.
    #[arg(long)]
    check_config: bool,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: weft_process::LogFormat,
    /// The CA (PEM) that signed an https:// coordinator's certificate
    /// (default: the system's roots).
    #[arg(long, env = "WEFT_CA")]
    ca: Option<PathBuf>,
    /// A client certificate (PEM) for mutual TLS, with --key.
    #[arg(long, env = "WEFT_CERT", requires = "key")]
    cert: Option<PathBuf>,
    /// The `worker` token to join with, for a coordinator that requires
    /// identities (prefer WEFT_WORKER_TOKEN: a flag is visible to other
    /// users in the process list).
    #[arg(long, env = "WEFT_WORKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "WEFT_KEY", requires = "cert")]
    key: Option<PathBuf>,
    /// How graphs' scripts and Python functions are confined: `bwrap`
    /// (the default: refuse to start where it cannot be had), `auto`
    /// (confined where possible), or `off` (unconfined; say so only
    /// where every graph is trusted) (default: $WEFT_SANDBOX, else the
    /// file's `[sandbox] confine`).
    #[arg(long)]
    sandbox: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let options = weft_worker::WorkerOptions {
        coordinator: Some(args.coordinator),
        etcd: args.etcd,
        slots: args.slots,
        name: args.name,
        work_dir: args.work_dir,
        secrets_file: args.secrets_file,
        config_file: args.config,
        tls: weft_proto::transport::ClientTls {
            ca: args.ca,
            identity: args.cert.zip(args.key),
            server_name: None,
        },
        token: args.token,
        sandbox: args.sandbox,
        etcd_tls: weft_store::EtcdTls {
            ca: args.etcd_ca,
            identity: args.etcd_cert.zip(args.etcd_key),
        },
    };
    let env = weft_worker::Environment::of_process();
    let config = match weft_worker::WorkerConfig::load(options, &env) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("worker: {error}");
            return ExitCode::from(2);
        }
    };
    // Held to the end: dropping it sends the last spans.
    let _telemetry = match weft_process::init(args.log_format, &config.telemetry) {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("worker: {error}");
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        println!("{config:#?}");
        return ExitCode::SUCCESS;
    }
    let worker = weft_worker::Worker::from_config(config);
    // Its own scripts' signals do not stop it (they are confined where
    // they cannot reach it; this holds with `--sandbox off` too).
    let shutdown = weft_worker::signals::shutdown_on_signal();
    match worker.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("worker: {error}");
            ExitCode::from(1)
        }
    }
}
