//! TLS on the coordinator's listeners (SPEC 11, `[tls]`): the gRPC port
//! (clients and workers, HTTP/2) and the HTTP port (metrics and health,
//! HTTP/1.1), with rustls.
//!
//! Each listener's connections are accepted here and their handshakes run
//! concurrently (bounded by [`HANDSHAKE_TIMEOUT`]), so a slow or plaintext
//! peer holds up nobody; the streams that complete a handshake go on to
//! the server. The certificate, its key and the client CA are read again
//! on [`ServerTls::reload`] (the binary calls it on SIGHUP): connections
//! made after it use the new files, connections already open keep theirs,
//! and a reload that fails keeps the old files in use.
//!
//! With `client_ca`, a client may present a certificate signed by it
//! (mutual TLS); one signed by anything else is refused in the handshake.
//! A client without one is let through, since it may carry a token
//! instead.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::connections::{Accepted, Gate, Gated};

/// How long a peer may take to complete its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `[tls]`: the files of the coordinator's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), the coordinator's own first.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA (PEM) whose certificates clients and workers may present.
    pub client_ca: Option<PathBuf>,
    /// The CA (PEM) of the other coordinators' certificates, trusted when
    /// a standby forwards to the leader; default: `client_ca`, else the
    /// system's roots.
    pub peer_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// What a standby trusts at the leader's `https://` URL.
    pub fn for_peers(&self) -> weft_proto::transport::ClientTls {
        weft_proto::transport::ClientTls {
            ca: self.peer_ca.clone().or_else(|| self.client_ca.clone()),
            ..Default::default()
        }
    }
}

/// Why the TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("TLS {what} '{}': {source}", path.display())]
    Read {
        /// `cert`, `key` or `client_ca`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds nothing of what it should.
    #[error("TLS {what} '{}' holds no {expected}: {reason}", path.display())]
    Pem {
        /// `cert`, `key` or `client_ca`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What it should hold.
        expected: &'static str,
        /// What the parser said.
        reason: String,
    },
    /// rustls refused the certificate and key (or the CA).
    #[error("TLS: {0}")]
    Refused(String),
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let pem_error = |reason: String| TlsError::Pem {
        what,
        path: path.to_owned(),
        expected: "PEM certificate",
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(e.to_string()))?;
    if chain.is_empty() {
        return Err(pem_error("no CERTIFICATE block".into()));
    }
    Ok(chain)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("key", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        what: "key",
        path: path.to_owned(),
        expected: "PEM private key",
        reason: e.to_string(),
    })
}

/// A rustls server configuration for `files`, offering `alpn`.
fn server_config(files: &TlsFiles, alpn: &[&[u8]]) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Refused(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in certificates("client_ca", path)? {
                roots.add(ca).map_err(|e| {
                    TlsError::Refused(format!("client_ca '{}': {e}", path.display()))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Refused(format!("client_ca '{}': {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certificates("cert", &files.cert)?, private_key(&files.key)?)
        .map_err(|e| TlsError::Refused(format!("cert and key: {e}")))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// One listener's TLS, reloadable.
#[derive(Clone)]
pub struct ServerTls {
    files: TlsFiles,
    alpn: Vec<Vec<u8>>,
    current: Arc<RwLock<Arc<rustls::ServerConfig>>>,
}

impl ServerTls {
    /// TLS for the gRPC listener (HTTP/2).
    pub fn for_grpc(files: &TlsFiles) -> Result<Self, TlsError> {
        Self::load(files, &[b"h2"])
    }

    /// TLS for the HTTP listener (HTTP/1.1).
    pub fn for_http(files: &TlsFiles) -> Result<Self, TlsError> {
        Self::load(files, &[b"http/1.1"])
    }

    fn load(files: &TlsFiles, alpn: &[&[u8]]) -> Result<Self, TlsError> {
        let config = server_config(files, alpn)?;
        Ok(Self {
            files: files.clone(),
            alpn: alpn.iter().map(|p| p.to_vec()).collect(),
            current: Arc::new(RwLock::new(Arc::new(config))),
        })
    }

    /// Reads the files again; new connections use them. On failure the
    /// old ones stay in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let alpn: Vec<&[u8]> = self.alpn.iter().map(Vec::as_slice).collect();
        let config = server_config(&self.files, &alpn)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        Ok(())
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        tokio_rustls::TlsAcceptor::from(config)
    }
}

/// Accepts on `listener` until `shutdown`, under `gate`'s caps (a
/// connection counts from before its handshake), handshaking each
/// connection on its own task.
pub fn accept(
    listener: TcpListener,
    tls: ServerTls,
    gate: Gate,
    shutdown: CancellationToken,
) -> Accepted<TlsStream<Gated<TcpStream>>> {
    let accepted = crate::connections::accept(listener, gate, shutdown);
    let local = accepted.local();
    let (tx, streams) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut accepted = accepted;
        while let Some((stream, peer)) = accepted.next().await {
            let (acceptor, tx) = (tls.acceptor(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send((stream, peer)).await;
                    }
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "a TLS handshake failed");
                    }
                    Err(_) => tracing::debug!(%peer, "a TLS handshake timed out"),
                }
            });
        }
    });
    Accepted::new(streams, local)
}
