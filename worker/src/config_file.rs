//! `worker --config worker.toml`: the worker's configuration file: the
//! model providers (`[providers.NAME]` tables, SPEC 4), `[telemetry]`,
//! `[python]` (SPEC 4.3) and `[tls]` (SPEC 11); an unknown table or key is
//! an error naming it, never ignored.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::llm::ProviderConfig;

/// A worker configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerFile {
    /// `[providers.NAME]` tables.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[telemetry]`: where traces go.
    #[serde(default)]
    pub telemetry: TelemetryTable,
    /// `[python]`: how Python functions run.
    #[serde(default)]
    pub python: PythonTable,
    /// `[tls]`: what to trust and present at an `https://` coordinator.
    #[serde(default)]
    pub tls: TlsTable,
    /// `[sandbox]`: how graphs' code is confined, and its limits.
    #[serde(default)]
    pub sandbox: SandboxTable,
}

/// `[sandbox]` of a worker's file (SPEC 11): the mechanism, and the limits
/// of every script and Python process, which a node's `sandbox:` may only
/// lower. `0` (or `"none"`) for a limit is no limit.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxTable {
    /// `bwrap` (the default: refuse to start without it), `auto` or `off`.
    pub confine: Option<crate::confinement::Confine>,
    /// Memory: bytes, or `"512MiB"`, `"1GiB"` (default 1 GiB).
    pub memory: Option<toml::Value>,
    /// CPU time: seconds, or `"30s"`, `"5m"` (default 5 minutes).
    pub cpu: Option<toml::Value>,
    /// Processes and threads at once (default 64).
    pub processes: Option<u32>,
    /// Open files (default 256).
    pub open_files: Option<u32>,
    /// Whether scripts reach the network (default true).
    pub network: Option<bool>,
    /// Each script gets a `/tmp` of its own instead of the host's shared
    /// one (default false).
    pub private_tmp: Option<bool>,
    /// `private` (default: a `/proc` of the script's own PID namespace) or
    /// `host` (the host's, read-only: for a container whose `/proc` is
    /// masked).
    pub proc: Option<String>,
    /// Directories of the host scripts may write (default none: the file
    /// system is read-only but for their scratch directory and `/tmp`).
    #[serde(default)]
    pub writable: Vec<std::path::PathBuf>,
}

impl SandboxTable {
    /// The limits this table sets over the defaults.
    pub fn limits(&self) -> Result<crate::confinement::Limits, String> {
        let defaults = crate::confinement::Limits::default();
        let none_if_zero = |n: u64| (n > 0).then_some(n);
        let memory = match &self.memory {
            None => defaults.memory,
            Some(value) => none_if_zero(
                crate::confinement::bytes_of(value).map_err(|e| format!("memory: {e}"))?,
            ),
        };
        let cpu = match &self.cpu {
            None => defaults.cpu,
            Some(value) => none_if_zero(
                crate::confinement::seconds_of(value).map_err(|e| format!("cpu: {e}"))?,
            )
            .map(std::time::Duration::from_secs),
        };
        Ok(crate::confinement::Limits {
            memory,
            cpu,
            processes: self
                .processes
                .map_or(defaults.processes, |n| (n > 0).then_some(n)),
            open_files: self
                .open_files
                .map_or(defaults.open_files, |n| (n > 0).then_some(n)),
            network: self.network.unwrap_or(defaults.network),
        })
    }
}

/// `[tls]` of a worker's file; relative paths are the file's directory's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsTable {
    /// The CA (PEM) that signed the coordinator's certificate.
    pub ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) for mutual TLS, with `key`.
    pub cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    pub key: Option<std::path::PathBuf>,
}

/// `[python]` of a worker's file (SPEC 4.3).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonTable {
    /// The interpreter, e.g. a virtualenv's `bin/python` (default
    /// `python3`).
    pub interpreter: Option<String>,
    /// Long-lived processes per bundle (default: one per two slots).
    pub pool_size: Option<usize>,
    /// `false` to host no Python even where it runs.
    pub enabled: Option<bool>,
}

impl PythonTable {
    /// The settings this table asks for.
    pub fn settings(&self) -> crate::python::PythonSettings {
        let mut settings = crate::python::PythonSettings::default();
        if let Some(interpreter) = &self.interpreter {
            settings.interpreter = interpreter.clone();
        }
        settings.pool_size = self.pool_size.filter(|&n| n > 0);
        settings.enabled = self.enabled.unwrap_or(true);
        settings
    }
}

/// `[telemetry]` of a worker's file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryTable {
    /// The OTLP/gRPC endpoint.
    pub endpoint: Option<String>,
    /// The service name (default `weft-worker`).
    pub service_name: Option<String>,
}

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkerFileError {
    /// It cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a worker configuration.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and where.
        message: String,
    },
}

impl WorkerFile {
    /// Reads and checks `path`.
    pub fn read(path: &Path) -> Result<Self, WorkerFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| WorkerFileError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut file: Self = toml::from_str(&text).map_err(|error| WorkerFileError::Invalid {
            path: shown.clone(),
            message: error.to_string().trim().to_owned(),
        })?;
        if file.tls.cert.is_some() != file.tls.key.is_some() {
            return Err(WorkerFileError::Invalid {
                path: shown,
                message: "[tls]: cert and key come together".to_owned(),
            });
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        for path in [&mut file.tls.ca, &mut file.tls.cert, &mut file.tls.key]
            .into_iter()
            .flatten()
        {
            *path = dir.join(&*path);
        }
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_are_read_and_unknown_keys_refused() {
        let dir = std::env::temp_dir().join(format!("weft-worker-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "[providers.local]\nbase_url = \"http://127.0.0.1:8080/v1\"\napi_key = \"${KEY}\"\nmodel = \"small\"\n",
        )
        .unwrap();
        let file = WorkerFile::read(&good).unwrap();
        assert_eq!(file.providers["local"].model.as_deref(), Some("small"));
        let bad = dir.join("bad.toml");
        std::fs::write(
            &bad,
            "[providers.local]\nbase_url = \"http://x\"\nmodle = \"x\"\n",
        )
        .unwrap();
        let error = WorkerFile::read(&bad).unwrap_err().to_string();
        assert!(error.contains("unknown field `modle`"), "{error}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn tls_paths_are_the_files_directorys_and_come_in_pairs() {
        let dir = std::env::temp_dir().join(format!("weft-worker-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "[tls]\nca = \"ca.pem\"\ncert = \"/etc/weft/w.pem\"\nkey = \"w.key\"\n",
        )
        .unwrap();
        let file = WorkerFile::read(&good).unwrap();
        assert_eq!(file.tls.ca, Some(dir.join("ca.pem")));
        assert_eq!(file.tls.cert, Some("/etc/weft/w.pem".into()));
        assert_eq!(file.tls.key, Some(dir.join("w.key")));
        let half = dir.join("half.toml");
        std::fs::write(&half, "[tls]\ncert = \"w.pem\"\n").unwrap();
        let error = WorkerFile::read(&half).unwrap_err().to_string();
        assert!(error.contains("cert and key come together"), "{error}");
        std::fs::remove_dir_all(dir).ok();
    }
}
