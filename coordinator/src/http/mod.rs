//! The coordinator's HTTP listener (the metrics and health port): probes
//! and Prometheus metrics, the run viewer's page, and the JSON API under
//! `/api/v1/` that the page uses.
//!
//! The API goes through the same front as gRPC ([`FrontRuns`]), asked in
//! domain terms: a leader answers from its runs (`access::RunAccess`, as
//! its gRPC service does), a standby forwards to the leader with the
//! caller's token and reads the answer back once, so the viewer works on
//! any coordinator of a group and says the same on each. Callers are named and checked as gRPC callers
//! are (`caller`): `reader` to look, `operator` to act. The page itself
//! (`viewer`) is static files built into the binary; it asks for a token
//! when the coordinator wants one.

mod api;
mod caller;
mod events;
mod origin;
mod run_json;
mod viewer;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::Identities;
use crate::config::HttpConfig;
use crate::grpc::FrontRuns;
use crate::tls::ServerTls;

/// The HTTP listener a coordinator binary serves beside its gRPC port.
pub struct HttpEndpoint {
    /// Where it listens.
    pub listener: TcpListener,
    /// Its TLS, when the coordinator has TLS.
    pub tls: Option<ServerTls>,
    /// The metrics recorder's handle; `None`: `/metrics` is not served.
    pub metrics: Option<PrometheusHandle>,
}

/// What the API's handlers share.
#[derive(Clone)]
pub(crate) struct Api {
    front: FrontRuns,
    identities: Arc<Identities>,
    settings: Arc<HttpConfig>,
}

impl Api {
    pub(crate) fn new(front: FrontRuns, identities: Identities, settings: HttpConfig) -> Self {
        Self {
            front,
            identities: Arc::new(identities),
            settings: Arc::new(settings),
        }
    }
}

/// Every route of the listener.
fn router(api: Api, metrics: Option<PrometheusHandle>) -> Router {
    let mut probes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready));
    if let Some(handle) = metrics {
        // Metrics describe every namespace's activity: where identities
        // are required, a reader's (or better) is needed to read them.
        let identities = api.identities.clone();
        probes = probes.route(
            "/metrics",
            get(move |headers: axum::http::HeaderMap| {
                let (handle, identities) = (handle.clone(), identities.clone());
                async move {
                    use axum::response::IntoResponse;
                    if let Err(refused) = caller::Caller::admit(
                        &identities,
                        &headers,
                        ("Metrics", crate::auth::Role::Reader),
                    ) {
                        return refused.into_response();
                    }
                    handle.run_upkeep();
                    handle.render().into_response()
                }
            }),
        );
    }
    let hosts = origin::Hosts::new(api.identities.required(), &api.settings.hosts);
    probes
        .merge(viewer::routes())
        .nest("/api/v1", api::routes().with_state(api))
        .layer(axum::middleware::from_fn_with_state(hosts, origin::guard))
}

/// `/readyz`: `ok` once the coordinator serves its API (a leader's runs
/// are restored, a standby forwards), 503 before.
async fn ready() -> (axum::http::StatusCode, &'static str) {
    if crate::metrics::READY.load(std::sync::atomic::Ordering::Relaxed) {
        (axum::http::StatusCode::OK, "ok\n")
    } else {
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

/// Serves `endpoint` until `shutdown` is cancelled, under `limits`.
pub(crate) async fn serve(
    endpoint: HttpEndpoint,
    api: Api,
    limits: crate::connections::ConnectionLimits,
    shutdown: CancellationToken,
) {
    let app = router(api, endpoint.metrics);
    let stop = shutdown.clone().cancelled_owned();
    let gate = crate::connections::Gate::new("http", limits);
    let served = match endpoint.tls {
        Some(tls) => {
            let incoming = crate::tls::accept(endpoint.listener, tls, gate, shutdown);
            axum::serve(incoming, app)
                .with_graceful_shutdown(stop)
                .await
        }
        None => {
            let incoming = crate::connections::accept(endpoint.listener, gate, shutdown);
            axum::serve(incoming, app)
                .with_graceful_shutdown(stop)
                .await
        }
    };
    if let Err(error) = served {
        tracing::warn!(%error, "the HTTP listener stopped");
    }
}
