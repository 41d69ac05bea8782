//! The `coordinator` binary: reads its layered configuration, binds, and
//! serves until SIGINT or SIGTERM.

/// jemalloc, where the crate's `jemalloc` feature is on (the default): it
/// serves the many small, short-lived allocations of runs and tasks
/// faster than the system's (docs/benchmarks.md).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use weft_coordinator::config::{CoordinatorConfig, Overrides};
use weft_coordinator::tls::ServerTls;

#[derive(Parser)]
#[command(name = "coordinator", version, about = "The Weft coordinator")]
struct Args {
    /// TOML configuration file.
    #[arg(long, env = "WEFT_CONFIG")]
    config: Option<PathBuf>,
    /// Address for clients and workers (default 127.0.0.1:7700).
    #[arg(long)]
    listen: Option<String>,
    /// Directory of the embedded store.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address of the HTTP listener: metrics, health, the run viewer and
    /// its API (default 127.0.0.1:9464).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: weft_process::LogFormat,
    /// Serve on a non-loopback address without TLS or identities (anyone
    /// who reaches the port can run commands on every worker).
    #[arg(long)]
    insecure: bool,
    /// Print the effective configuration (file, environment and flags
    /// applied) and exit 0, or the refusal and exit 2.
    #[arg(long)]
    check_config: bool,
}

/// The metrics recorder, installed for this process; `None` when metrics
/// are off (a recorder was installed already).
fn metrics_recorder() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    match weft_coordinator::metrics::install() {
        Ok(handle) => Some(handle),
        Err(error) => {
            tracing::warn!(%error, "metrics are off");
            None
        }
    }
}

/// Reads the TLS files again on each SIGHUP: new connections use them; a
/// reload that fails keeps the files in use, and says why.
fn reload_on_sighup(listeners: Vec<ServerTls>, shutdown: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("SIGHUP cannot be caught: TLS files are not reloaded");
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                got = hangups.recv() => if got.is_none() { return },
            }
            match listeners.iter().try_for_each(ServerTls::reload) {
                Ok(()) => tracing::info!("TLS certificate and key reloaded"),
                Err(error) => {
                    tracing::error!(%error, "TLS reload failed; the previous certificate stays in use");
                }
            }
        }
    });
}

/// Logging, and traces as `[telemetry]` and the OTEL_* variables say.
fn telemetry(
    config: &CoordinatorConfig,
    format: weft_process::LogFormat,
) -> Result<weft_process::Telemetry, weft_process::TelemetryError> {
    let telemetry = weft_process::TelemetryConfig::resolve(
        config.telemetry.clone(),
        |key| std::env::var(key).ok(),
        "weft-coordinator",
    );
    weft_process::init(format, &telemetry)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let flags = Overrides {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        data_dir: args.data_dir,
        insecure: args.insecure,
    };
    let config = match CoordinatorConfig::load(
        args.config.as_deref(),
        |key| std::env::var(key).ok(),
        &flags,
    ) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("coordinator: refusing to start: {error}");
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        println!("{config:#?}");
        for warning in config.warnings() {
            eprintln!("warning: {warning}");
        }
        return ExitCode::SUCCESS;
    }
    // Held to the end: dropping it sends the last spans.
    let _telemetry = match telemetry(&config, args.log_format) {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("coordinator: refusing to start: {error}");
            return ExitCode::from(2);
        }
    };
    raise_open_files(&config);
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    if config.exposed_insecurely() {
        tracing::warn!(
            listen = %config.listen,
            metrics_listen = %config.metrics_listen,
            tls = config.tls.is_some(),
            identities = config.identities.required(),
            "serving beyond loopback without TLS or identities (insecure = true): anyone who reaches these ports can run commands on every worker"
        );
    }
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("coordinator: cannot listen on {}: {error}", config.listen);
            return ExitCode::from(1);
        }
    };
    let metrics_listener = match tokio::net::TcpListener::bind(config.metrics_listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!(
                "coordinator: cannot serve metrics on {}: {error}",
                config.metrics_listen
            );
            return ExitCode::from(1);
        }
    };
    let address = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let metrics_address = metrics_listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    // The certificate is read now, so a bad one refuses the start.
    let tls = match config.tls.as_ref().map(|files| {
        Ok::<_, weft_coordinator::tls::TlsError>((
            ServerTls::for_grpc(files)?,
            ServerTls::for_http(files)?,
        ))
    }) {
        None => None,
        Some(Ok(both)) => Some(both),
        Some(Err(error)) => {
            eprintln!("coordinator: refusing to start: {error}");
            return ExitCode::from(2);
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let shutdown = weft_process::shutdown_on_signal();
    let http = weft_coordinator::server::HttpEndpoint {
        listener: metrics_listener,
        tls: tls.as_ref().map(|(_, http)| http.clone()),
        metrics: metrics_recorder(),
    };
    // Said once the store is open: a coordinator whose data directory
    // another holds fails first, saying so. Tests and scripts read these
    // two lines to learn the bound ports.
    let ready = Box::new(move || {
        println!("coordinator listening on {address}");
        println!("metrics on {scheme}://{metrics_address}/metrics");
    });
    let grpc = match tls {
        Some((grpc, http)) => {
            reload_on_sighup(vec![grpc.clone(), http], shutdown.clone());
            Some(grpc)
        }
        None => None,
    };
    let served = weft_coordinator::server::serve_announced(
        listener,
        grpc,
        Some(http),
        config,
        shutdown.clone(),
        ready,
    )
    .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("coordinator: {error}");
            ExitCode::from(1)
        }
    }
}

/// Raises this process's soft limit of open files to its hard one: each
/// connection and each stored run's files take descriptors, and the caps
/// of `max_connections` are meant to bind before the process runs out.
fn raise_open_files(config: &weft_coordinator::config::CoordinatorConfig) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft < hard {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((soft, hard));
    // Two listeners, each up to max_connections, and room for the rest.
    let wanted = (config.connections.per_listener as u64).saturating_mul(2) + 256;
    if soft < wanted {
        tracing::warn!(
            open_files = soft,
            max_connections = config.connections.per_listener,
            "this process may open fewer files than two listeners' max_connections need: lower max_connections, or raise the limit (ulimit -n, LimitNOFILE=)"
        );
    }
}
