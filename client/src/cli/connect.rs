//! How this invocation reaches a coordinator: the TLS settings and token
//! it presents (set once from the command line), the connection, and what
//! a failure to connect or a refused call says, with its exit code.

use weft_client::{Client, ClientError};

use super::exit;
use super::terminal::err;

/// What this invocation presents and trusts at an https:// coordinator
/// (`--ca`, `--cert`, `--key`), set once from the command line.
static TLS: std::sync::OnceLock<weft_client::ClientTls> = std::sync::OnceLock::new();

/// Sets the TLS settings of every connection this invocation makes.
pub fn set_tls(tls: weft_client::ClientTls) {
    let _ = TLS.set(tls);
}

/// The token this invocation presents to coordinators (`--token`,
/// `WEFT_TOKEN`), set once from the command line.
static TOKEN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Sets the token every connection to a coordinator presents.
pub fn set_token(token: Option<String>) {
    let _ = TOKEN.set(token);
}

/// The coordinator this invocation talks to, for explaining failures.
static CONNECTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

pub(super) async fn remote(url: &str) -> Result<Client, u8> {
    if !url.contains("://") && !url.starts_with("unix:") {
        err!(
            "error: '{url}' is not a coordinator URL: it has no scheme (write http://{url}, or https://{url} for TLS)"
        );
        return Err(exit::INVALID);
    }
    let _ = CONNECTED.set(url.to_owned());
    let tls = TLS.get().cloned().unwrap_or_default();
    let client = Client::connect_with(url, &tls)
        .await
        .map_err(|error| report(&error))?;
    match TOKEN.get().and_then(Option::as_deref) {
        Some(token) => client.with_token(token).map_err(|error| report(&error)),
        None => Ok(client),
    }
}

pub(super) fn report(error: &ClientError) -> u8 {
    // A plaintext request at a TLS port fails only once it is sent: say so.
    let text = error.to_string();
    match CONNECTED
        .get()
        .and_then(|url| weft_proto::transport::explain_tls_failure(url, &text))
    {
        Some(explained) => err!("error: {explained}"),
        None => err!("error: {error}"),
    }
    match error {
        ClientError::Unreachable { .. } | ClientError::Unavailable(_) | ClientError::Closed(_) => {
            exit::UNREACHABLE
        }
        ClientError::Invalid(_) | ClientError::TooLarge(_) | ClientError::Bundle(_) => {
            exit::INVALID
        }
        ClientError::Refused(_)
        | ClientError::NotFound(_)
        | ClientError::Rejected(_)
        | ClientError::Decode(_) => exit::FAILED,
        ClientError::Unauthenticated(_) | ClientError::PermissionDenied(_) => exit::DENIED,
    }
}
