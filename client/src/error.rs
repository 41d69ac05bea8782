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
    /// The coordinator refused the request for a reason none of the
    /// other variants names.
    #[error("{0}")]
    Refused(String),
    /// No such run, or one of a namespace the caller does not see
    /// (`NOT_FOUND`).
    #[error("{0}")]
    NotFound(String),
    /// The run's state does not allow the request: answering a node that
    /// does not wait, retrying a run that has not failed
    /// (`FAILED_PRECONDITION`).
    #[error("{0}")]
    Rejected(String),
    /// The request is invalid (graph, input or answer).
    #[error("{0}")]
    Invalid(String),
    /// A graph, input or answer is over one of the coordinator's limits
    /// (`RESOURCE_EXHAUSTED`).
    #[error("{0}")]
    TooLarge(String),
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
            // A certificate the client does not accept (or a peer that
            // does not speak TLS) is not waited out.
            tonic::Code::Unavailable
                if weft_proto::transport::is_tls_failure(&weft_proto::transport::source_chain(
                    &status,
                )) =>
            {
                Self::Closed(weft_proto::transport::source_chain(&status))
            }
            tonic::Code::Unavailable => Self::Unreachable {
                url: String::new(),
                reason: status.message().to_owned(),
            },
            // The connection closed under the call: over TLS, the
            // coordinator refused the handshake (a client certificate it
            // does not accept) or went away.
            // A peer that speaks TLS to a plaintext client breaks its
            // HTTP/2 the same way.
            tonic::Code::Cancelled | tonic::Code::Unknown | tonic::Code::Internal
                if matches!(
                    status.message(),
                    "operation was canceled" | "transport error"
                ) || status.message().starts_with("h2 protocol error") =>
            {
                Self::Closed(format!(
                    "the connection was closed before an answer ({}; over TLS: the coordinator did not accept the handshake, e.g. a client certificate it does not trust)",
                    status.message()
                ))
            }
            tonic::Code::InvalidArgument => Self::Invalid(status.message().to_owned()),
            tonic::Code::ResourceExhausted => Self::TooLarge(status.message().to_owned()),
            tonic::Code::NotFound => Self::NotFound(status.message().to_owned()),
            tonic::Code::FailedPrecondition => Self::Rejected(status.message().to_owned()),
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
