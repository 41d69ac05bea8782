//! How a worker is set up, and the one loader of that setup.
//!
//! The `worker` binary and the client's embedded cluster both build their
//! workers with [`WorkerConfig::load`]: the options a command line gives,
//! the configuration file (`--config` or `WEFT_WORKER_CONFIG`), the
//! secrets (the environment, then `--secrets-file` or `WEFT_SECRETS_FILE`),
//! the model providers (the file's, else `OPENAI_BASE_URL` and
//! `OPENAI_API_KEY`), Python and telemetry. The environment arrives as an
//! [`Environment`]: the library reads no variables of its own process
//! except in [`Environment::of_process`], which the binaries and the SDK's
//! [`Worker::new`](crate::Worker::new) call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use weft_process::TelemetryConfig;

use crate::config_file::{WorkerFile, WorkerFileError};
use crate::llm::{ProviderError, Providers};
use crate::python::PythonSettings;
use crate::secrets::{Secrets, SecretsFileError};

/// The worker's variables a script inherits; nothing else leaks through.
const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// The variables a worker is set up from.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

/// Names only: the environment holds secrets.
impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl Environment {
    /// These variables.
    pub fn new(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            vars: vars.into_iter().collect(),
        }
    }

    /// This process's variables (those that are valid Unicode).
    pub fn of_process() -> Self {
        Self::new(std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }))
    }

    /// The variable `name`, when it is set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Every variable but the worker's own token, as secrets for `${NAME}`:
    /// a graph cannot have a script handed the credential the worker
    /// joins with.
    fn pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.vars
            .iter()
            .filter(|(k, _)| k.as_str() != TOKEN_VARIABLE)
            .map(|(k, v)| (k.clone(), v.clone()))
    }
}

/// What a command line says of a worker; the rest comes from its file and
/// its environment.
#[derive(Debug, Clone, Default)]
pub struct WorkerOptions {
    /// The coordinator's URL (default `http://127.0.0.1:7700`).
    pub coordinator: Option<String>,
    /// etcd endpoints of a group of coordinators, instead of one URL.
    pub etcd: Vec<String>,
    /// Tasks run at once (default: one per CPU).
    pub slots: Option<u32>,
    /// The worker's name (default `HOST-PID`: the host's name and the
    /// process's id, distinct across containers whose worker is PID 1).
    pub name: Option<String>,
    /// Scratch and cache directory (default: a fresh private one).
    pub work_dir: Option<PathBuf>,
    /// The secrets file (default: `WEFT_SECRETS_FILE`, else none).
    pub secrets_file: Option<PathBuf>,
    /// The configuration file (default: `WEFT_WORKER_CONFIG`, else none).
    pub config_file: Option<PathBuf>,
    /// What to trust and present at an `https://` coordinator.
    pub tls: weft_proto::transport::ClientTls,
    /// The token it joins with (default: `WEFT_WORKER_TOKEN`, else none).
    pub token: Option<String>,
    /// TLS to `https://` etcd endpoints.
    pub etcd_tls: weft_store::EtcdTls,
    /// How graphs' code is confined (`--sandbox bwrap|auto|off`, default
    /// `WEFT_SANDBOX`, else the file's `[sandbox] confine`, else `bwrap`).
    pub sandbox: Option<String>,
}

/// The variable a worker's token is taken from.
pub const TOKEN_VARIABLE: &str = "WEFT_WORKER_TOKEN";

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The coordinator's URL, e.g. `http://127.0.0.1:7700`.
    pub coordinator: String,
    /// etcd endpoints of a group of coordinators: when given, the worker
    /// joins whichever of them leads (and `coordinator` is not used).
    pub etcd: Vec<String>,
    /// The worker's name.
    pub name: String,
    /// Tasks run at once.
    pub slots: u32,
    /// Free-form labels.
    pub labels: Vec<(String, String)>,
    /// Whether this worker runs `script` nodes.
    pub scripts: bool,
    /// Whether this worker runs `rag` steps (default: yes).
    pub rag: bool,
    /// Where scratch directories and the file cache live; `None` for a
    /// fresh private directory removed on exit.
    pub work_dir: Option<PathBuf>,
    /// The worker's secrets, for `${NAME}` in node configuration.
    pub secrets: Arc<Secrets>,
    /// Gains a permit each time the worker joins a coordinator.
    pub joined: Option<Arc<tokio::sync::Semaphore>>,
    /// Model providers for `llm` and `agent` steps (none: not hosted).
    pub providers: Arc<Providers>,
    /// How Python is run (`function` nodes, Python names).
    pub python: PythonSettings,
    /// The variables scripts inherit (`PATH`, `HOME`, `LANG`, `TMPDIR`).
    pub inherited_env: Vec<(String, String)>,
    /// Where the worker process's traces go (the binary sets them up).
    pub telemetry: TelemetryConfig,
    /// What to trust and present at an `https://` coordinator (`--ca`,
    /// `--cert`, `--key`).
    pub tls: weft_proto::transport::ClientTls,
    /// The `worker` token it joins with (`--token`, `WEFT_WORKER_TOKEN`);
    /// its `Debug` hides it.
    pub bearer: weft_proto::transport::Bearer,
    /// TLS to `https://` etcd endpoints (`--etcd-ca`, `--etcd-cert`,
    /// `--etcd-key`).
    pub etcd_tls: weft_store::EtcdTls,
    /// How graphs' scripts and Python functions are confined, and their
    /// limits (`[sandbox]`, `--sandbox`).
    pub sandbox: crate::confinement::Confine,
    /// The limits of what they run (defaults a node may only lower).
    pub limits: crate::confinement::Limits,
    /// Files the worker read its credentials from, hidden from scripts.
    pub credential_files: Vec<PathBuf>,
    /// Where confined scripts may write besides their scratch directory.
    pub places: crate::confinement::Places,
}

/// Why a worker's setup cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file cannot be used.
    #[error(transparent)]
    File(#[from] WorkerFileError),
    /// The secrets file cannot be read.
    #[error(transparent)]
    Secrets(#[from] SecretsFileError),
    /// A model provider cannot be set up.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// `[sandbox]` or `--sandbox` is malformed.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// The token cannot travel in a header.
    #[error("--token / {TOKEN_VARIABLE}: {0}")]
    Token(#[from] weft_proto::transport::InvalidToken),
}

impl WorkerConfig {
    /// A worker for the coordinator at `coordinator` with one slot per
    /// CPU, hosting scripts, with no secrets, providers or handlers; its
    /// scripts inherit their variables from `env`.
    pub fn new(coordinator: impl Into<String>, env: &Environment) -> Self {
        let slots = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        Self {
            coordinator: coordinator.into(),
            etcd: Vec::new(),
            name: default_name(),
            slots,
            labels: Vec::new(),
            scripts: true,
            rag: true,
            work_dir: None,
            secrets: Arc::default(),
            joined: None,
            providers: Arc::default(),
            python: PythonSettings::default(),
            inherited_env: INHERITED_ENV
                .iter()
                .filter_map(|&name| Some((name.to_owned(), env.get(name)?.to_owned())))
                .collect(),
            telemetry: TelemetryConfig::resolve(TelemetryConfig::default(), |_| None, SERVICE),
            tls: weft_proto::transport::ClientTls::default(),
            bearer: weft_proto::transport::Bearer::default(),
            etcd_tls: weft_store::EtcdTls::default(),
            // An embedded worker runs its user's own graphs: confined
            // where the machine allows it. The `worker` binary insists.
            sandbox: crate::confinement::Confine::Auto,
            limits: crate::confinement::Limits::default(),
            credential_files: Vec::new(),
            places: crate::confinement::Places::default(),
        }
    }

    /// The setup `options`, their files and `env` describe.
    pub fn load(options: WorkerOptions, env: &Environment) -> Result<Self, ConfigError> {
        let path = |given: Option<PathBuf>, var: &str| {
            given.or_else(|| env.get(var).filter(|v| !v.is_empty()).map(PathBuf::from))
        };
        let mut credential_files = Vec::new();
        let config_file = path(options.config_file, "WEFT_WORKER_CONFIG");
        let file = match &config_file {
            Some(path) => WorkerFile::read(path)?,
            None => WorkerFile::default(),
        };
        credential_files.extend(config_file);
        let mut secrets: Vec<(String, String)> = env.pairs().collect();
        if let Some(path) = path(options.secrets_file, "WEFT_SECRETS_FILE") {
            secrets.extend(Secrets::read_file(&path)?);
            credential_files.push(path);
        }
        let sandbox_mode = match options
            .sandbox
            .clone()
            .or_else(|| env.get("WEFT_SANDBOX").map(str::to_owned))
        {
            Some(text) => text.parse().map_err(ConfigError::Sandbox)?,
            None => file
                .sandbox
                .confine
                .unwrap_or(crate::confinement::Confine::Bwrap),
        };
        let limits = file.sandbox.limits().map_err(ConfigError::Sandbox)?;
        let secrets = Secrets::new(secrets);
        let providers = Providers::new(
            file.providers,
            |name| env.get(name).map(str::to_owned),
            &secrets,
        )?;
        let telemetry = TelemetryConfig::resolve(
            TelemetryConfig {
                endpoint: file.telemetry.endpoint,
                service_name: file.telemetry.service_name.unwrap_or_default(),
            },
            |name| env.get(name).map(str::to_owned),
            SERVICE,
        );
        let mut config = Self::new(
            options
                .coordinator
                .unwrap_or_else(|| "http://127.0.0.1:7700".to_owned()),
            env,
        );
        config.etcd = options.etcd;
        config.etcd_tls = options.etcd_tls;
        // The flags' (or variables') TLS settings win over the file's.
        config.tls = weft_proto::transport::ClientTls {
            ca: options.tls.ca.or(file.tls.ca),
            identity: options.tls.identity.or(file.tls.cert.zip(file.tls.key)),
            server_name: None,
        };
        let token = options
            .token
            .or_else(|| env.get(TOKEN_VARIABLE).map(str::to_owned));
        config.bearer = weft_proto::transport::Bearer::new(token.as_deref())?;
        if let Some(slots) = options.slots {
            config.slots = slots.max(1);
        }
        if let Some(name) = options.name {
            config.name = name;
        }
        config.work_dir = options.work_dir;
        config.secrets = Arc::new(secrets);
        config.providers = Arc::new(providers);
        config.python = file.python.settings();
        config.telemetry = telemetry;
        config.sandbox = sandbox_mode;
        config.limits = limits;
        let mut writable = file.sandbox.writable.clone();
        // `WEFT_SANDBOX_WRITABLE`: more, colon-separated (a container's
        // volume, say).
        writable.extend(
            env.get("WEFT_SANDBOX_WRITABLE")
                .into_iter()
                .flat_map(|dirs| dirs.split(':'))
                .filter(|dir| !dir.is_empty())
                .map(PathBuf::from),
        );
        let proc = env
            .get("WEFT_SANDBOX_PROC")
            .map(str::to_owned)
            .or_else(|| file.sandbox.proc.clone());
        let host_proc = match proc.as_deref() {
            None | Some("private") => false,
            Some("host") => true,
            Some(other) => {
                return Err(ConfigError::Sandbox(format!(
                    "proc is private or host, not '{other}'"
                )));
            }
        };
        config.places = crate::confinement::Places {
            private_tmp: file.sandbox.private_tmp.unwrap_or(false),
            host_proc,
            writable,
        };
        if let Some((cert, key)) = &config.tls.identity {
            credential_files.extend([cert.clone(), key.clone()]);
        }
        credential_files.extend(config.tls.ca.clone());
        config.credential_files = credential_files;
        Ok(config)
    }
}

/// `HOST-PID`, or `worker-PID` where the host has no readable name.
fn default_name() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    format!("{host}-{}", std::process::id())
}

/// The service name of a worker's traces unless configured.
const SERVICE: &str = "weft-worker";

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::new(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
    }

    #[test]
    fn the_environment_gives_secrets_providers_files_and_script_variables() {
        let dir = std::env::temp_dir().join(format!("weft-worker-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secrets = dir.join("secrets");
        std::fs::write(&secrets, "TOKEN=from-file\n").unwrap();
        let file = dir.join("worker.toml");
        std::fs::write(
            &file,
            "[python]\nenabled = false\n[telemetry]\nservice_name = \"w\"\n",
        )
        .unwrap();
        let env = env(&[
            ("PATH", "/bin"),
            ("SECRET_HOME", "x"),
            ("TOKEN", "from-env"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
            ("WEFT_SECRETS_FILE", secrets.to_str().unwrap()),
            ("WEFT_WORKER_CONFIG", file.to_str().unwrap()),
        ]);
        let options = WorkerOptions {
            slots: Some(0),
            ..WorkerOptions::default()
        };
        let config = WorkerConfig::load(options, &env).unwrap();
        assert_eq!(config.slots, 1, "at least one slot");
        assert_eq!(config.coordinator, "http://127.0.0.1:7700");
        assert_eq!(
            config.inherited_env,
            [("PATH".to_owned(), "/bin".to_owned())]
        );
        assert!(
            !config.providers.is_empty(),
            "OPENAI_BASE_URL gives a provider"
        );
        assert!(!config.python.enabled);
        assert_eq!(config.telemetry.service_name, "w");
        let mut redactor = crate::secrets::Redactor::default();
        let token = config
            .secrets
            .substitute("${TOKEN}", &mut redactor)
            .unwrap();
        assert_eq!(token, "from-file", "the file wins");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_missing_file_is_named() {
        let env = env(&[("WEFT_WORKER_CONFIG", "/nonexistent/worker.toml")]);
        let error = WorkerConfig::load(WorkerOptions::default(), &env).unwrap_err();
        assert!(
            error.to_string().contains("/nonexistent/worker.toml"),
            "{error}"
        );
    }
}
