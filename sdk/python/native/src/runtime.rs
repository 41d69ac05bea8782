//! The one tokio runtime the module's work runs on, made on first use.
//!
//! A Python program may hold several workers (and, later, clients); they
//! share these threads. Sync Python calls run on threads of their own
//! (`crate::lanes`), so a handler that takes its time never holds up the
//! worker's connection.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The runtime's handle.
pub(crate) fn handle() -> &'static Handle {
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .enable_all()
                .thread_name("weft-core")
                .build()
                .expect("a tokio runtime for weft._native")
        })
        .handle()
}

/// Turns on the Rust core's warnings (a lost coordinator, a refused
/// name) on stderr, once per process; `WEFT_LOG` filters them as
/// `RUST_LOG` would (default `warn`).
pub(crate) fn log_to_stderr() {
    static LOGGING: OnceLock<()> = OnceLock::new();
    LOGGING.get_or_init(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        // Another library of the program may have set one already.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    });
}
