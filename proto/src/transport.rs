//! How a client of a coordinator (`weft`, the client library, a worker)
//! reaches it: a tonic endpoint for an `http://` or `https://` URL, with
//! the CA to trust and the certificate to present when it speaks TLS
//! (SPEC 11), and what a failed connection means in words a user can act
//! on: a plaintext client at a TLS port, or the reverse, is told so rather
//! than shown a transport error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// What a client presents and trusts when the URL is `https://`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA (PEM) that signed the coordinator's certificate; without it,
    /// the system's roots.
    pub ca: Option<PathBuf>,
    /// A certificate (PEM chain) and its key, for mutual TLS.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name the coordinator's certificate must carry, when it is not
    /// the URL's host (a coordinator reached by an address its
    /// certificate does not name).
    pub server_name: Option<String>,
}

/// Why an endpoint cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The URL is not one.
    #[error("'{url}' is not a coordinator URL: {reason}")]
    BadUrl {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
    /// A TLS file cannot be read.
    #[error("TLS {what} '{}': {source}", path.display())]
    File {
        /// `--ca`, `--cert` or `--key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TLS files were given for a plaintext URL.
    #[error("--ca, --cert and --key are for https:// URLs; '{url}' is plaintext")]
    TlsForPlaintext {
        /// The URL given.
        url: String,
    },
    /// tonic refused the TLS settings.
    #[error("TLS settings for '{url}': {reason}")]
    Tls {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
}

impl ClientTls {
    /// Whether anything is set.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.identity.is_none() && self.server_name.is_none()
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, EndpointError> {
    std::fs::read(path).map_err(|source| EndpointError::File {
        what,
        path: path.to_owned(),
        source,
    })
}

/// How much one stream may send before the receiver acknowledges it
/// (HTTP/2 flow control): room for a big state in a few round trips
/// rather than one per 64 KiB. A receiver's window is memory it agrees to
/// buffer for a sender, so it is bounded.
pub const STREAM_WINDOW: u32 = 4 << 20;

/// The flow-control window of a whole connection, shared by its streams.
pub const CONNECTION_WINDOW: u32 = 8 << 20;

/// The largest HTTP/2 frame accepted: a big message crosses in fewer
/// frames, each handled once.
pub const MAX_FRAME: u32 = 1 << 20;

/// An endpoint for `url`, with TLS when it is `https://` (trusting `tls.ca`,
/// or the system's roots, and presenting `tls.identity` if set).
pub fn endpoint(url: &str, tls: &ClientTls) -> Result<Endpoint, EndpointError> {
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| EndpointError::BadUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME);
    if !url.starts_with("https://") {
        if !tls.is_empty() {
            return Err(EndpointError::TlsForPlaintext {
                url: url.to_owned(),
            });
        }
        return Ok(endpoint);
    }
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read("--ca", ca)?)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.identity {
        let identity = Identity::from_pem(read("--cert", cert)?, read("--key", key)?);
        config = config.identity(identity);
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    endpoint.tls_config(config).map_err(|e| EndpointError::Tls {
        url: url.to_owned(),
        reason: source_chain(&e),
    })
}

/// An error and its sources, as one line.
pub fn source_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// Whether a failed connection's text (its source chain) names a TLS
/// mismatch or a certificate the client does not accept: asking again
/// would end the same way.
pub fn is_tls_failure(failure: &str) -> bool {
    explain_tls_failure("https://", failure).is_some()
}

/// How a program's user gives the TLS settings, as the hints of
/// [`explain_tls_failure_in`] name them.
#[derive(Debug, Clone, Copy)]
pub struct TlsSettingNames {
    /// Where the CA goes, with its environment variable.
    pub ca: &'static str,
    /// Where the CA goes, short.
    pub ca_short: &'static str,
    /// What to do when the coordinator asks for a client certificate.
    pub identity: &'static str,
}

/// The command line's names: `--ca`, `--cert`, `--key`.
pub const COMMAND_LINE_TLS: TlsSettingNames = TlsSettingNames {
    ca: "--ca (WEFT_CA)",
    ca_short: "--ca",
    identity: "give --cert and --key",
};

/// What a failed connection to `url` means, when it is a TLS mismatch or
/// a certificate problem: a sentence saying what to change, in the
/// command line's terms; `None` for other failures.
pub fn explain_tls_failure(url: &str, failure: &str) -> Option<String> {
    explain_tls_failure_in(url, failure, &COMMAND_LINE_TLS)
}

/// [`explain_tls_failure`], naming the settings as `names` does.
pub fn explain_tls_failure_in(url: &str, failure: &str, names: &TlsSettingNames) -> Option<String> {
    let https = url.starts_with("https://");
    let lower = failure.to_ascii_lowercase();
    if https
        && (lower.contains("invalidcontenttype")
            || lower.contains("corrupt message")
            || lower.contains("wrong version number")
            || lower.contains("received an unexpected message"))
    {
        return Some(format!(
            "the coordinator at {url} does not speak TLS: use an http:// URL (or turn TLS on at the coordinator)"
        ));
    }
    if https && (lower.contains("unknownissuer") || lower.contains("unknown issuer")) {
        return Some(format!(
            "the certificate of the coordinator at {url} is not signed by a CA this client trusts: give the CA that signed it with {}",
            names.ca
        ));
    }
    if https && (lower.contains("notvalidforname") || lower.contains("not valid for name")) {
        return Some(format!(
            "the certificate of the coordinator at {url} does not name that host: connect by a name or address the certificate holds"
        ));
    }
    if https && lower.contains("certificaterequired") {
        return Some(format!(
            "the coordinator at {url} requires a client certificate: {}",
            names.identity
        ));
    }
    if !https
        && !lower.contains("connect error")
        && !lower.contains("refused")
        && (lower.contains("connection reset")
            || lower.contains("transport error")
            || lower.contains("h2 protocol error")
            || lower.contains("http2 error")
            || lower.contains("frame with invalid size")
            || lower.contains("broken pipe")
            || lower.contains("connection closed")
            || lower.contains("operation was canceled")
            || lower.contains("unexpected end of file"))
    {
        return Some(format!(
            "the coordinator at {url} dropped the connection; if it speaks TLS, use an https:// URL (with {} for its CA): {failure}",
            names.ca_short
        ));
    }
    None
}

/// Adds `authorization: Bearer TOKEN` to every request of a client
/// (SPEC 11): `weft --token`, the client library, a worker's `--token`.
/// Without a token it adds nothing. The value is marked sensitive, so
/// tonic's and hyper's logs do not show it, and `Debug` hides it.
#[derive(Clone, Default)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

/// A token that cannot travel in a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the token holds characters a header cannot carry (it must be visible ASCII)")]
pub struct InvalidToken;

impl Bearer {
    /// Sends `token`, or nothing.
    pub fn new(token: Option<&str>) -> Result<Self, InvalidToken> {
        let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(Self(None));
        };
        let mut value: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
            format!("Bearer {token}")
                .parse()
                .map_err(|_| InvalidToken)?;
        value.set_sensitive(true);
        Ok(Self(Some(value)))
    }

    /// Whether a token is sent.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(***)"
        } else {
            "Bearer(none)"
        })
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A channel whose requests carry a [`Bearer`] token.
pub type Authorized =
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_files_for_a_plaintext_url_are_refused() {
        let tls = ClientTls {
            ca: Some("ca.pem".into()),
            identity: None,
            server_name: None,
        };
        let error = endpoint("http://127.0.0.1:7700", &tls).unwrap_err();
        assert!(
            error.to_string().contains("are for https:// URLs"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let tls = ClientTls {
            ca: Some("/nonexistent/ca.pem".into()),
            identity: None,
            server_name: None,
        };
        let error = endpoint("https://127.0.0.1:7700", &tls).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("TLS --ca '/nonexistent/ca.pem'"),
            "{error}"
        );
    }

    #[test]
    fn mismatches_are_explained() {
        let plain_at_tls =
            explain_tls_failure("https://h:1", "invalid peer certificate: UnknownIssuer");
        assert!(plain_at_tls.unwrap().contains("--ca"));
        let tls_at_plain = explain_tls_failure(
            "https://h:1",
            "received corrupt message of type InvalidContentType",
        );
        assert!(tls_at_plain.unwrap().contains("does not speak TLS"));
        assert_eq!(
            explain_tls_failure("http://h:1", "tcp connect error: Connection refused"),
            None
        );
    }
}
