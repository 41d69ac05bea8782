//! The `worker` binary: hosts the built-in `script` kind. Workers with Rust
//! handlers are ordinary programs built on the `weft-worker` library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tokio_util::sync::CancellationToken;

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
    /// Tasks run at once (default: number of CPUs).
    #[arg(long)]
    slots: Option<u32>,
    /// The worker's name.
    #[arg(long)]
    name: Option<String>,
    /// Scratch and cache directory.
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let mut worker = weft_worker::Worker::new(args.coordinator);
    if let Some(slots) = args.slots {
        worker.slots(slots);
    }
    if let Some(name) = args.name {
        worker.name(name);
    }
    if let Some(dir) = args.work_dir {
        worker.work_dir(dir);
    }
    // The worker's own environment is its secret store for `${NAME}`.
    worker.secrets(std::env::vars().collect());
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    match worker.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("worker: {error}");
            ExitCode::from(1)
        }
    }
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match terminate.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
    }
    shutdown.cancel();
}
