//! Why a client call failed ([`ClientError`]), read from what the
//! transport or the coordinator said: one conversion from a gRPC status.

use crate::bundle::BundleError;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The coordinator could not be reached, or could not serve the request
    /// now (a standby with no leader to forward to, a coordinator stopping).
    #[error("cannot reach the coordinator{}: {reason}", if url.is_empty() { String::new() } else { format!(" at {url}") })]
    Unreachable {
        /// Its URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The coordinator was reached and said it cannot serve the request
    /// now (its store is out of reach, it is stopping, it has no leader to
    /// forward to).
    #[error("the coordinator cannot serve this now: {0}")]
    Unavailable(String),
    /// The connection closed before an answer, as when a coordinator
    /// refuses a TLS handshake: not waited out, as asking again would end
    /// the same way.
    #[error("cannot reach the coordinator: {0}")]
    Closed(String),
    /// The coordinator refused the request (invalid graph, unknown run, …).
    #[error("{0}")]
    Refused(String),
    /// The request is invalid (graph, input or answer).
    #[error("{0}")]
    Invalid(String),
    /// The graph could not be bundled.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// A response could not be read.
    #[error("{0}")]
    Decode(String),
    /// The coordinator requires an identity and the request had none, or
    /// one it does not know (`UNAUTHENTICATED`).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The identity's role may not do this (`PERMISSION_DENIED`), or it is
    /// not among a node's approvers.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        match status.code() {
            // Said by the coordinator itself (its store is out of reach, it
            // is stopping): it was reached, and says why it cannot serve.
            tonic::Code::Unavailable if said_by_the_server(&status) => {
                Self::Unavailable(status.message().to_owned())
            }
            tonic::Code::Unavailable => Self::Unreachable {
                url: String::new(),
                reason: status.message().to_owned(),
            },
            // The connection closed under the call: over TLS, the
            // coordinator refused the handshake (a client certificate it
            // does not accept) or went away.
            tonic::Code::Cancelled | tonic::Code::Unknown
                if matches!(
                    status.message(),
                    "operation was canceled" | "transport error"
                ) =>
            {
                Self::Closed(format!(
                    "the connection was closed before an answer ({}; over TLS: the coordinator did not accept the handshake, e.g. a client certificate it does not trust)",
                    status.message()
                ))
            }
            tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted => {
                Self::Invalid(status.message().to_owned())
            }
            tonic::Code::Unauthenticated => Self::Unauthenticated(status.message().to_owned()),
            tonic::Code::PermissionDenied => Self::PermissionDenied(status.message().to_owned()),
            _ => Self::Refused(status.message().to_owned()),
        }
    }
}

/// Whether an `UNAVAILABLE` status came from the coordinator (a reply
/// with its own message) rather than from the connection to it.
fn said_by_the_server(status: &tonic::Status) -> bool {
    const TRANSPORT: [&str; 5] = [
        "error trying to connect",
        "transport error",
        "tcp connect error",
        "connection error",
        "Service was not ready",
    ];
    status.metadata().contains_key("content-type")
        && !TRANSPORT.iter().any(|t| status.message().starts_with(t))
}
