//! The one tower layer in front of every gRPC service: it names each
//! request's caller ([`Identities::authenticate`]), checks that the
//! caller's role may call the method, and either answers at once
//! (`UNAUTHENTICATED`, `PERMISSION_DENIED`) or passes the request on with
//! its [`Principal`] in the request's extensions. The group service's
//! requests pass to it unchecked: it takes only the group's members, by
//! the group's key (`crate::grpc::group_flow`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use super::{Identities, Principal, Role};

/// The role each method needs; `None` for a method this server does not
/// have (any identity may learn that it is unimplemented).
fn needed(path: &str) -> Option<(&str, Role)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let role = match (service, method) {
        (
            "weft.v1.RunService",
            "GetRun" | "ListRuns" | "WatchRun" | "StreamRun" | "Validate" | "ListIndexes"
            | "GetHistory" | "DescribeGroup",
        ) => Role::Reader,
        (
            "weft.v1.RunService",
            "Submit" | "Resume" | "Cancel" | "Retry" | "FetchIndex" | "Fork",
        ) => Role::Operator,
        ("weft.v1.RunService", "DeleteRun") => Role::Admin,
        ("weft.v1.WorkerService", "Join" | "FetchBlob" | "ShareIndex") => Role::Worker,
        _ => return None,
    };
    Some((method, role))
}

/// What a role needs to be, in words.
fn wanted(role: Role) -> &'static str {
    match role {
        Role::Reader => "the role reader, operator or admin",
        Role::Operator => "the role operator or admin",
        Role::Admin => "the role admin",
        Role::Worker => "the role worker (a worker token, or a client certificate)",
    }
}

/// The subject common name of the client certificate the handshake
/// verified, if the request came over TLS with one.
fn certificate_subject<B>(request: &http::Request<B>) -> Option<String> {
    let info = request
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()?;
    let chain = info.peer_certs()?;
    let leaf = chain.first()?;
    let (_, certificate) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let name = certificate.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_owned)
}

/// The caller of `request`, allowed to call its method; or the refusal.
pub fn admit<B>(identities: &Identities, request: &http::Request<B>) -> Result<Principal, Status> {
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(http::HeaderValue::as_bytes);
    let subject = if identities.required() {
        certificate_subject(request)
    } else {
        None
    };
    admit_to(
        identities,
        authorization,
        subject.as_deref(),
        needed(request.uri().path()),
    )
}

/// The caller named by `authorization` (a bearer header) or `subject` (a
/// verified client certificate's), allowed to do `action` (what it is
/// called, and the role it needs); or the refusal. The run viewer's HTTP
/// routes are checked here too.
pub fn admit_to(
    identities: &Identities,
    authorization: Option<&[u8]>,
    subject: Option<&str>,
    action: Option<(&str, Role)>,
) -> Result<Principal, Status> {
    let principal = identities
        .authenticate(authorization, subject)
        .map_err(|error| {
            refused(error.reason());
            Status::unauthenticated(error.to_string())
        })?;
    if !identities.required() {
        return Ok(principal);
    }
    if let Some((action, role)) = action
        && !principal.role.covers(role)
    {
        refused("role");
        return Err(Status::permission_denied(format!(
            "'{}' has the role {}; {action} needs {}",
            principal.name,
            principal.role.as_str(),
            wanted(role)
        )));
    }
    Ok(principal)
}

/// Counts a refused request.
pub fn refused(reason: &'static str) {
    metrics::counter!(crate::metrics::REQUESTS_REFUSED, "reason" => reason).increment(1);
}

/// The layer: [`Identities`] in front of a service.
#[derive(Clone)]
pub struct AuthLayer {
    identities: Arc<Identities>,
}

impl AuthLayer {
    /// Checks requests against `identities`.
    pub fn new(identities: Identities) -> Self {
        Self {
            identities: Arc::new(identities),
        }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = Authenticated<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticated {
            inner,
            identities: self.identities.clone(),
        }
    }
}

/// A service whose requests carry an admitted [`Principal`].
#[derive(Clone)]
pub struct Authenticated<S> {
    inner: S,
    identities: Arc<Identities>,
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B, R> tower_service::Service<http::Request<B>> for Authenticated<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Answer<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        // The group service takes members only, by the group's key, which
        // it checks itself: identities name clients and workers.
        if request
            .uri()
            .path()
            .starts_with(crate::grpc::group_flow::SERVICE_PREFIX)
        {
            return Box::pin(self.inner.call(request));
        }
        match admit(&self.identities, &request) {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                Box::pin(self.inner.call(request))
            }
            Err(status) => Box::pin(std::future::ready(Ok(status.into_http()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Identity;
    use sha2::Digest;

    fn request(path: &str, token: Option<&str>) -> http::Request<()> {
        let mut builder = http::Request::builder().uri(format!("http://x{path}"));
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn each_method_needs_its_role() {
        let mut identities = Identities::new(false);
        for (name, role) in [
            ("viewer", Role::Reader),
            ("ops", Role::Operator),
            ("node", Role::Worker),
        ] {
            let digest: [u8; 32] = sha2::Sha256::digest(format!("{name}-token").as_bytes()).into();
            identities.add_token(
                digest,
                Identity::new(name.into(), role, "default".into(), None),
            );
        }
        let submit = "/weft.v1.RunService/Submit";
        let join = "/weft.v1.WorkerService/Join";
        assert!(
            admit(
                &identities,
                &request("/weft.v1.RunService/ListRuns", Some("viewer-token"))
            )
            .is_ok()
        );
        let denied = admit(&identities, &request(submit, Some("viewer-token"))).unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            denied.message(),
            "'viewer' has the role reader; Submit needs the role operator or admin"
        );
        assert!(admit(&identities, &request(submit, Some("ops-token"))).is_ok());
        assert_eq!(
            admit(&identities, &request(join, Some("ops-token")))
                .unwrap_err()
                .code(),
            tonic::Code::PermissionDenied
        );
        assert!(admit(&identities, &request(join, Some("node-token"))).is_ok());
        assert_eq!(
            admit(&identities, &request(submit, Some("node-token")))
                .unwrap_err()
                .code(),
            tonic::Code::PermissionDenied
        );
        for token in [None, Some("nobody")] {
            let status = admit(&identities, &request(submit, token)).unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{token:?}");
        }
    }
}
