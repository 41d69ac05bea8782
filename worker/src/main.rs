//! The `worker` binary: hosts the built-in `script` kind. Workers with Rust
//! handlers are ordinary programs built on the `weft-worker` library.

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
    /// Tasks run at once (default: number of CPUs).
    #[arg(long)]
    slots: Option<u32>,
    /// The worker's name.
    #[arg(long)]
    name: Option<String>,
    /// Scratch and cache directory.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// A file of `NAME=value` lines: secrets for `${NAME}` in node
    /// configuration, taking precedence over the worker's environment.
    #[arg(long, env = "WEFT_SECRETS_FILE")]
    secrets_file: Option<PathBuf>,
    /// Configuration file (TOML): `[providers.NAME]` tables of model
    /// providers for `llm` and `agent` steps, `[telemetry]`, and
    /// `[python]` (interpreter, pool_size, enabled).
    #[arg(long, env = "WEFT_WORKER_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit 0, or the refusal and
    /// exit 2.
    #[arg(long)]
    check_config: bool,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: weft_process::LogFormat,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let file = match &args.config {
        Some(path) => match weft_worker::WorkerFile::read(path) {
            Ok(file) => file,
            Err(error) => {
                eprintln!("worker: {error}");
                return ExitCode::from(2);
            }
        },
        None => weft_worker::WorkerFile::default(),
    };
    let telemetry = weft_process::TelemetryConfig::resolve(
        weft_process::TelemetryConfig {
            endpoint: file.telemetry.endpoint.clone(),
            service_name: file.telemetry.service_name.clone().unwrap_or_default(),
        },
        |key| std::env::var(key).ok(),
        "weft-worker",
    );
    // Held to the end: dropping it sends the last spans.
    let _telemetry = match weft_process::init(args.log_format, &telemetry) {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("worker: {error}");
            return ExitCode::from(2);
        }
    };
    let mut worker = weft_worker::Worker::new(args.coordinator);
    worker.etcd(args.etcd);
    worker.python(file.python.settings());
    if let Some(slots) = args.slots {
        worker.slots(slots);
    }
    if let Some(name) = args.name {
        worker.name(name);
    }
    if let Some(dir) = args.work_dir {
        worker.work_dir(dir);
    }
    let secrets = match secrets(args.secrets_file.as_deref()) {
        Ok(secrets) => secrets,
        Err(error) => {
            eprintln!("worker: {error}");
            return ExitCode::from(2);
        }
    };
    // Providers from the file, else from OPENAI_BASE_URL and OPENAI_API_KEY.
    match weft_worker::llm::Providers::new(
        file.providers,
        |name| std::env::var(name).ok(),
        &secrets,
    ) {
        Ok(providers) if args.check_config => {
            worker.providers(providers);
            println!("{worker:#?}\n{telemetry:#?}");
            return ExitCode::SUCCESS;
        }
        Ok(providers) => {
            worker.providers(providers);
        }
        Err(error) => {
            eprintln!("worker: {error}");
            return ExitCode::from(2);
        }
    }
    worker.secrets(secrets);
    let shutdown = weft_process::shutdown_on_signal();
    match worker.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("worker: {error}");
            ExitCode::from(1)
        }
    }
}

/// The worker's secret store for `${NAME}`: its own environment and its
/// secrets file.
fn secrets(
    file: Option<&std::path::Path>,
) -> Result<weft_worker::Secrets, weft_worker::SecretsFileError> {
    let mut secrets: Vec<(String, String)> = std::env::vars().collect();
    if let Some(path) = file {
        secrets.extend(weft_worker::Secrets::read_file(path)?);
    }
    Ok(weft_worker::Secrets::new(secrets))
}
