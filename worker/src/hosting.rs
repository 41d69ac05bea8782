//! What a worker hosts and runs it with: the hello it announces (its
//! kinds, handlers, functions and tools), what it keeps across sessions
//! (its work directory, its Python pools) and what each session runs
//! tasks with.

use std::sync::Arc;

use tracing::info;
use weft_proto::types::WorkerKind;

use crate::blobs::BlobCache;
use crate::blobs::BlobSource;
use crate::config::WorkerConfig;
use crate::execute::Toolbox;
use crate::handler::Registry;
use crate::python::PythonHosts;
use crate::remote_tools::RemoteTools;
use crate::script::ScriptRunner;
use crate::task::ToolInfo;
use crate::work_dir::WorkDir;
use weft_proto::worker_protocol::Hello;

/// What a worker keeps across its sessions with coordinators: its work
/// directory, its Python pools and its open knowledge bases.
pub(crate) struct HostResources {
    pub(crate) work: WorkDir,
    /// How scripts and Python processes are confined.
    pub(crate) confinement: Arc<crate::confinement::Confinement>,
    /// Python pools, when the worker hosts Python.
    pub(crate) python: Option<Arc<PythonHosts>>,
    /// The knowledge bases `rag` steps opened, kept across sessions.
    pub(crate) indexes: Arc<crate::rag::Indexes>,
}

impl HostResources {
    /// The work directory and, when Python is enabled and its
    /// interpreter is there, the Python pools; otherwise the worker does
    /// not announce `function`.
    ///
    /// Finding the interpreter is a look along `PATH`, not a run of it: a
    /// worker's start (and so a graph without Python) neither waits for an
    /// interpreter to start nor shares the processor with one, which takes
    /// tens of milliseconds, more behind a version manager's shim. An
    /// interpreter that is there but does not run is found by the first
    /// call, which fails saying so.
    pub(crate) async fn new(
        config: &WorkerConfig,
        work: WorkDir,
        confinement: Arc<crate::confinement::Confinement>,
    ) -> Self {
        let settings = &config.python;
        let python = if !settings.enabled {
            None
        } else if find_program(&settings.interpreter).is_some() {
            let root = work.python();
            Some(Arc::new(PythonHosts::new(
                settings.clone(),
                config.slots,
                root,
                confinement.clone(),
            )))
        } else {
            info!(worker = %config.name, interpreter = %settings.interpreter, "no Python: function nodes and Python names are not hosted");
            None
        };
        let indexes = Arc::new(crate::rag::Indexes::new(work.knowledge()));
        Self {
            work,
            python,
            confinement,
            indexes,
        }
    }
}

/// Where `program` is: itself when it names a path, else the first
/// executable of that name along `PATH`.
fn find_program(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &std::path::Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = std::path::PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|path| executable(path))
}

/// The worker's hello: what it hosts.
pub(crate) fn hello(config: &WorkerConfig, registry: &Registry, python: bool) -> Hello {
    Hello {
        name: config.name.clone(),
        slots: config.slots,
        labels: config.labels.clone(),
        kinds: hosted_kinds(config, python),
        handlers: registry.handlers.keys().cloned().collect(),
        functions: registry.functions.keys().cloned().collect(),
        tools: registry
            .tools
            .iter()
            .map(|(name, tool)| ToolInfo {
                name: name.clone(),
                description: tool.description.clone(),
                parameters: tool.parameters.clone(),
            })
            .collect(),
        // The connection keeps them (`Kept`).
        keeps_nodes: true,
        keeps_bundles: true,
        handler_reads: registry.reads.clone(),
        // Set when the worker serves several coordinators (`runtime`).
        shared_slots: 0,
    }
}

/// What a session runs tasks with, fetching bundle files from `source`
/// and sharing knowledge indexes through `shelf`.
pub(crate) fn toolbox(
    config: &WorkerConfig,
    local: &HostResources,
    registry: &Arc<Registry>,
    source: Arc<dyn BlobSource>,
    remote_tools: Arc<RemoteTools>,
    permits: Arc<crate::llm::Permits>,
    shelf: crate::connection::IndexShelf,
) -> Toolbox {
    let blobs = BlobCache::new(local.work.files(), source);
    // Field versions are the coordinator's numbering on this connection.
    if let Some(python) = &local.python {
        python.new_session();
    }
    Toolbox {
        registry: registry.clone(),
        scripts: ScriptRunner::new(
            local.work.scratch(),
            blobs.clone(),
            config.secrets.clone(),
            config.inherited_env.clone().into(),
            local.confinement.clone(),
        ),
        providers: config.providers.clone(),
        python: local.python.clone(),
        blobs,
        secrets: config.secrets.clone(),
        remote_tools,
        permits,
        indexes: local.indexes.clone(),
        shelf,
    }
}

/// The built-in kinds a worker hosts: scripts unless turned off, `rag`
/// (a step that calls a model is sent to a worker with `llm`), `llm`
/// with a model provider, `function` with Python.
fn hosted_kinds(config: &WorkerConfig, python: bool) -> Vec<WorkerKind> {
    let mut kinds = Vec::new();
    if config.scripts {
        kinds.push(WorkerKind::Script);
    }
    if config.rag {
        kinds.push(WorkerKind::Rag);
    }
    if !config.providers.is_empty() {
        kinds.push(WorkerKind::Llm);
        kinds.push(WorkerKind::Agent);
    }
    if python {
        kinds.push(WorkerKind::Function);
    }
    kinds
}
