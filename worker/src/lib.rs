//! Weft's worker library: the SDK for custom workers.
//!
//! A worker connects to a coordinator, announces its slots and what it
//! hosts — Rust handlers registered by name, functions for `fn:NAME`
//! reducers and predicates, and the built-in `script` kind — and runs the
//! tasks it is given. It reconnects with backoff when the coordinator goes
//! away, and on shutdown takes no more tasks, finishes those in flight,
//! then exits.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(Deserialize)]
//! struct Draft { topic: String }
//! #[derive(Serialize)]
//! struct Written { draft: String }
//!
//! # async fn example() -> Result<(), weft_worker::WorkerError> {
//! let mut worker = weft_worker::Worker::new("http://127.0.0.1:7700");
//! worker.handler("draft", |state: Draft, _ctx| async move {
//!     Ok::<_, String>(Written { draft: format!("A note on {}", state.topic) })
//! });
//! worker.run(CancellationToken::new()).await
//! # }
//! ```

#![warn(missing_docs)]

mod blobs;
mod config;
mod config_file;
pub mod confinement;
mod connection;
mod error;
mod execute;
pub mod field;
mod handler;
mod handler_reads;
mod hosting;
pub mod llm;
pub mod python;
mod rag;
mod remote_tools;
mod runtime;
mod scope;
mod script;
mod script_output;
mod secrets;
mod session;
pub mod signals;
mod slot_share;
pub mod state_sync;
mod task;
mod team;
mod work_dir;

use std::future::Future;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use config::{ConfigError, Environment, WorkerConfig, WorkerOptions};
pub use config_file::{PythonTable, TelemetryTable, WorkerFile, WorkerFileError};
pub use error::WorkerError;
pub use handler::{HandlerError, IntoOutput, Output, Registry, TaskContext};
pub use scope::Scope;
pub use script_output::{StdoutError, parse_stdout};
pub use secrets::{SecretError, Secrets, SecretsFileError};
pub use task::{BlobRef, Completed, Failure, FailureKind, Task};
pub use team::{Team, TeamError, TeamMessage, TeamSeat};

/// A worker being set up.
#[derive(Debug)]
pub struct Worker {
    config: WorkerConfig,
    registry: Registry,
}

impl Worker {
    /// A worker for the coordinator at `coordinator` (an `http://` URL),
    /// with one slot per CPU, hosting scripts and no handlers yet; its
    /// scripts inherit `PATH`, `HOME`, `LANG` and `TMPDIR` from this
    /// process.
    pub fn new(coordinator: impl Into<String>) -> Self {
        Self::from_config(WorkerConfig::new(coordinator, &Environment::of_process()))
    }

    /// A worker set up as `config` says (see [`WorkerConfig::load`]), with
    /// no handlers yet.
    pub fn from_config(config: WorkerConfig) -> Self {
        Self {
            config,
            registry: Registry::default(),
        }
    }

    /// Sets the worker's name.
    pub fn name(&mut self, name: impl Into<String>) -> &mut Self {
        self.config.name = name.into();
        self
    }

    /// Sets how many tasks run at once.
    pub fn slots(&mut self, slots: u32) -> &mut Self {
        self.config.slots = slots.max(1);
        self
    }

    /// Adds a label.
    pub fn label(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.config.labels.push((key.into(), value.into()));
        self
    }

    /// Whether this worker runs `script` nodes (default: yes).
    pub fn scripts(&mut self, enabled: bool) -> &mut Self {
        self.config.scripts = enabled;
        self
    }

    /// The `worker` token it joins with, for a coordinator that wants
    /// identities (the `worker` binary takes it from `--token` or
    /// `WEFT_WORKER_TOKEN`); refused when it cannot travel in a header.
    pub fn token(&mut self, token: &str) -> Result<&mut Self, weft_proto::transport::InvalidToken> {
        self.config.bearer = weft_proto::transport::Bearer::new(Some(token))?;
        Ok(self)
    }

    /// Whether this worker runs `rag` steps (default: yes).
    pub fn rag(&mut self, enabled: bool) -> &mut Self {
        self.config.rag = enabled;
        self
    }

    /// What to trust and present at an `https://` coordinator.
    pub fn tls(&mut self, tls: weft_proto::transport::ClientTls) -> &mut Self {
        self.config.tls = tls;
        self
    }

    /// Where scratch directories and the file cache live.
    pub fn work_dir(&mut self, dir: PathBuf) -> &mut Self {
        self.config.work_dir = Some(dir);
        self
    }

    /// Secrets for `${NAME}` in node configuration (never sent anywhere).
    pub fn secrets(&mut self, secrets: Secrets) -> &mut Self {
        self.config.secrets = std::sync::Arc::new(secrets);
        self
    }

    /// Model providers for `llm` and `agent` steps; without any, the
    /// worker does not host those kinds.
    pub fn providers(&mut self, providers: llm::Providers) -> &mut Self {
        self.config.providers = std::sync::Arc::new(providers);
        self
    }

    /// How Python runs: the interpreter (default `python3`; a virtualenv's
    /// for its packages) and processes per bundle (default one per two
    /// slots). The worker hosts `function` nodes and Python names when
    /// the interpreter runs.
    pub fn python(&mut self, settings: python::PythonSettings) -> &mut Self {
        self.config.python = settings;
        self
    }

    /// Joins whichever coordinator leads the group on the etcd cluster at
    /// `endpoints` (`http://host:2379`, …), looked up before each
    /// connection, instead of the coordinator URL.
    pub fn etcd(&mut self, endpoints: Vec<String>) -> &mut Self {
        self.config.etcd = endpoints;
        self
    }

    /// Adds a permit to `signal` each time the worker joins a coordinator,
    /// so a caller can wait until its workers are connected.
    pub fn joined_signal(&mut self, signal: std::sync::Arc<tokio::sync::Semaphore>) -> &mut Self {
        self.config.joined = Some(signal);
        self
    }

    /// Registers a handler: an async function from a serde-typed state to a
    /// state or an update. See [`Registry::handler`].
    pub fn handler<S, O, E, F, Fut>(&mut self, name: &str, handler: F) -> &mut Self
    where
        S: DeserializeOwned + Send + 'static,
        O: IntoOutput + Send + 'static,
        E: std::fmt::Display + Send + 'static,
        F: Fn(S, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.registry.handler(name, handler);
        self
    }

    /// Registers a handler over the task's shared field values. See
    /// [`Registry::field_handler`].
    pub fn field_handler<F, Fut>(&mut self, name: &str, handler: F) -> &mut Self
    where
        F: Fn(Vec<(std::sync::Arc<str>, std::sync::Arc<field::FieldValue>)>, TaskContext) -> Fut
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<Value, HandlerError>> + Send + 'static,
    {
        self.registry.field_handler(name, handler);
        self
    }

    /// Registers a handler that routes with `_next`. See [`Output`].
    pub fn routing_handler<S, E, F, Fut>(&mut self, name: &str, handler: F) -> &mut Self
    where
        S: DeserializeOwned + Send + 'static,
        E: std::fmt::Display + Send + 'static,
        F: Fn(S, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Output, E>> + Send + 'static,
    {
        self.registry.routing_handler(name, handler);
        self
    }

    /// Registers a tool `agent` steps may call. See [`Registry::tool`].
    pub fn tool<F, Fut>(
        &mut self,
        name: &str,
        description: &str,
        parameters: Value,
        call: F,
    ) -> &mut Self
    where
        F: Fn(Value, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, HandlerError>> + Send + 'static,
    {
        self.registry.tool(name, description, parameters, call);
        self
    }

    /// Registers a function for `fn:NAME` reducers, predicates and routers.
    pub fn function<F>(&mut self, name: &str, function: F) -> &mut Self
    where
        F: Fn(Vec<Value>) -> Result<Value, HandlerError> + Send + Sync + 'static,
    {
        self.registry.function(name, function);
        self
    }

    /// Runs until `shutdown` is cancelled and the tasks in flight are done.
    ///
    /// The worker's life runs as a task of its own on the runtime's worker
    /// threads, whatever awaits this: awaited by a binary's `block_on`
    /// (`#[tokio::main]`), it would otherwise run on the main thread,
    /// outside the runtime's pool, and every message to or from the
    /// coordinator would cross threads twice more (a wake-up of the main
    /// thread, then one of a pool thread to write to the socket).
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let stop = shutdown.child_token();
        let life = tokio::spawn(runtime::run(
            self.config.clone(),
            self.registry.clone(),
            stop.clone(),
        ));
        // Dropped (its caller gave up on it), the worker stops as if shut
        // down, instead of living on unowned.
        let _stop = stop.drop_guard();
        match life.await {
            Ok(ended) => ended,
            Err(stopped) if stopped.is_panic() => std::panic::resume_unwind(stopped.into_panic()),
            // Only a runtime shutting down cancels it: the worker ends with it.
            Err(_) => Ok(()),
        }
    }
}
