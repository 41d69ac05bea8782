//! Who calls the HTTP API, and what it may do: the bearer token of the
//! `authorization` header, checked as gRPC callers are
//! ([`crate::auth::layer::admit_to`]); and the API's errors as JSON with
//! the HTTP status of their gRPC code.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::{Principal, Role};
use crate::grpc::Credentials;

/// A caller admitted to an action, and how to pass the call on.
pub(super) struct Caller {
    pub principal: Principal,
    /// Who asks, as the runs' front takes it (with the token a standby
    /// forwards to the leader).
    pub credentials: Credentials,
}

impl Caller {
    /// The caller of a request with `headers`, allowed to do `action`
    /// (named as in refusals, with the role it needs).
    pub fn admit(
        identities: &crate::auth::Identities,
        headers: &HeaderMap,
        action: (&str, Role),
    ) -> Result<Self, ApiError> {
        let authorization = headers.get(header::AUTHORIZATION);
        let principal = crate::auth::layer::admit_to(
            identities,
            authorization.map(|value| value.as_bytes()),
            None,
            Some(action),
        )?;
        let token = authorization.and_then(|value| value.to_str().ok());
        Ok(Self {
            credentials: Credentials::new(principal.clone(), token),
            principal,
        })
    }
}

/// An API error: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// A request the API cannot read.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_argument",
            message: message.into(),
        }
    }
}

impl From<tonic::Status> for ApiError {
    fn from(status: tonic::Status) -> Self {
        use tonic::Code;
        let (http, code) = match status.code() {
            Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            Code::PermissionDenied => (StatusCode::FORBIDDEN, "permission_denied"),
            Code::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            Code::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
            Code::FailedPrecondition => (StatusCode::CONFLICT, "failed_precondition"),
            Code::ResourceExhausted => (StatusCode::PAYLOAD_TOO_LARGE, "resource_exhausted"),
            Code::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        Self {
            status: http,
            code,
            message: status.message().to_owned(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "code": self.code, "message": self.message }
        });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // Browsers show no dialog of their own for a bearer challenge.
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("ascii"));
        }
        response
    }
}

/// A query string's parameters, or a 400 that says what is wrong with them.
pub(super) fn parameters<T>(
    query: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    query
        .map(|axum::extract::Query(query)| query)
        .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
}
