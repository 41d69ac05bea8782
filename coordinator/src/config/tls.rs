//! `[tls]` (SPEC 11): the coordinator's certificate, its key, the CA of
//! the certificates clients may present and the CA of the other
//! coordinators' certificates (`peer_ca`, trusted when a standby forwards
//! to the leader), from the file (relative paths are the file's
//! directory's) or `WEFT_TLS_CERT`, `WEFT_TLS_KEY`, `WEFT_TLS_CLIENT_CA`
//! and `WEFT_TLS_PEER_CA`. The files are read when the coordinator starts
//! (and on SIGHUP), not here; here `cert` and `key` must come together.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, CoordinatorConfig};
use crate::tls::TlsFiles;

/// `[tls]` as one layer gives it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsLayer {
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    pub(super) client_ca: Option<PathBuf>,
    pub(super) peer_ca: Option<PathBuf>,
}

impl TlsLayer {
    /// The same paths, relative ones taken from `dir`.
    pub(super) fn relative_to(self, dir: &Path) -> Self {
        let join = |path: Option<PathBuf>| path.map(|p| dir.join(p));
        Self {
            cert: join(self.cert),
            key: join(self.key),
            client_ca: join(self.client_ca),
            peer_ca: join(self.peer_ca),
        }
    }

    /// The variables' layer.
    pub(super) fn from_env(env: &impl Fn(&str) -> Option<String>) -> Option<Self> {
        let path = |name: &str| {
            env(name)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from)
        };
        let layer = Self {
            cert: path("WEFT_TLS_CERT"),
            key: path("WEFT_TLS_KEY"),
            client_ca: path("WEFT_TLS_CLIENT_CA"),
            peer_ca: path("WEFT_TLS_PEER_CA"),
        };
        let any = layer.cert.is_some()
            || layer.key.is_some()
            || layer.client_ca.is_some()
            || layer.peer_ca.is_some();
        any.then_some(layer)
    }
}

/// What the layers said so far; checked once they all have.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TlsParts {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    peer_ca: Option<PathBuf>,
}

impl TlsParts {
    pub(super) fn apply(&mut self, layer: TlsLayer) {
        self.cert = layer.cert.or(self.cert.take());
        self.key = layer.key.or(self.key.take());
        self.client_ca = layer.client_ca.or(self.client_ca.take());
        self.peer_ca = layer.peer_ca.or(self.peer_ca.take());
    }
}

impl CoordinatorConfig {
    /// `tls` from the parts: nothing, or a certificate with its key.
    pub(super) fn check_tls(&mut self, parts: TlsParts) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| ConfigError::Invalid {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        self.tls = match (parts.cert, parts.key) {
            (None, None) if parts.peer_ca.is_some() => {
                return Err(invalid(
                    "tls.peer_ca",
                    "needs tls.cert and tls.key: a group of coordinators speaks TLS among itself only when each serves it",
                ));
            }
            (None, None) if parts.client_ca.is_some() => {
                return Err(invalid(
                    "tls.client_ca",
                    "needs tls.cert and tls.key: clients present certificates only over TLS",
                ));
            }
            (None, None) => None,
            (Some(_), None) => return Err(invalid("tls.key", "must be set with tls.cert")),
            (None, Some(_)) => return Err(invalid("tls.cert", "must be set with tls.key")),
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca: parts.client_ca,
                peer_ca: parts.peer_ca,
            }),
        };
        Ok(())
    }
}
