//! What Weft's binaries (`coordinator`, `worker` and custom workers) share
//! as processes: logging to stderr in text or JSON, filtered by `RUST_LOG`,
//! and one cancellation token that SIGINT or SIGTERM cancels, so shutdown
//! follows the same path whatever stops the process.

#![warn(missing_docs)]

mod secrets_file;
pub mod telemetry;

use tokio_util::sync::CancellationToken;
use tracing_subscriber::prelude::*;

pub use secrets_file::{SecretsFileError, is_secret_name, read_secrets_file};
pub use telemetry::{Telemetry, TelemetryConfig, TelemetryError};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format '{other}'; use text or json")),
        }
    }
}

/// Logs to stderr at `info` (or as `RUST_LOG` says) in `format`; exports
/// no traces.
pub fn init_logging(format: LogFormat) {
    let _ = init(format, &TelemetryConfig::default());
}

/// Logs to stderr at `info` (or as `RUST_LOG` says) in `format`, and
/// exports traces as `telemetry` says. Keep the returned guard until the
/// process ends: dropping it sends the last spans.
pub fn init(format: LogFormat, telemetry: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
    let provider = telemetry::provider(telemetry)?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let traces = provider.as_ref().map(telemetry::layer);
    let registry = tracing_subscriber::registry().with(traces).with(filter);
    // Colour only for a person at a terminal: a log redirected to a file or
    // a collector gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let _ = match format {
        LogFormat::Text => registry.with(lines).try_init(),
        LogFormat::Json => registry.with(lines.json()).try_init(),
    };
    Ok(telemetry::guard(provider))
}

/// A token cancelled by the first SIGINT or SIGTERM. Must be called inside
/// a tokio runtime.
pub fn shutdown_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match terminate.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminated => {}
        }
        token.cancel();
    });
    shutdown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_formats_parse() {
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert!(
            "xml"
                .parse::<LogFormat>()
                .unwrap_err()
                .contains("text or json")
        );
    }
}
