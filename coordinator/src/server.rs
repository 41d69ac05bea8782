//! Assembling a coordinator: dispatcher, runs, blob store and the gRPC
//! services on one listener, with the HTTP listener (probes, metrics, the
//! run viewer and its API) beside it, all stopped by one cancellation
//! token; every task they spawn is tracked, and `serve` returns once they
//! have stopped.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_proto::v1::group_service_server::GroupServiceServer;
use weft_proto::v1::run_service_server::RunServiceServer;
use weft_proto::v1::worker_service_server::WorkerServiceServer;
use weft_store::AnyStore;

use crate::config::CoordinatorConfig;
use crate::durable::Keeper;
use crate::grpc::{FrontRuns, FrontWorkers};
pub use crate::http::HttpEndpoint;
use crate::term::{Role, start_term};

/// A client's or worker's connection, as the gRPC server takes it.
trait Connection:
    tokio::io::AsyncRead
    + tokio::io::AsyncWrite
    + tonic::transport::server::Connected
    + Unpin
    + Send
    + 'static
{
}

impl<T> Connection for T where
    T: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static
{
}

/// How long `serve` waits for its tasks to stop after the server has.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The embedded store's file in the data directory.
const STORE_FILE: &str = "weft.redb";

/// Why the coordinator stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened or read (its errors name it).
    #[error("{0}")]
    Store(#[from] weft_store::StoreError),
    /// The gRPC server failed.
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The group refused this coordinator (a partition count other than
    /// the group's).
    #[error("{0}")]
    Group(String),
}

impl ServeError {
    /// Whether another process holds the embedded store's file.
    pub fn store_in_use(&self) -> bool {
        matches!(self, Self::Store(weft_store::StoreError::InUse(_)))
    }
}

/// Accepted connections under the gRPC listener's caps (see
/// [`crate::connections`]), with Nagle's algorithm off.
fn incoming(
    listener: TcpListener,
    limits: crate::connections::ConnectionLimits,
    shutdown: CancellationToken,
) -> impl tokio_stream::Stream<Item = std::io::Result<crate::connections::Gated<tokio::net::TcpStream>>>
{
    let gate = crate::connections::Gate::new("grpc", limits);
    crate::connections::accept(listener, gate, shutdown).into_stream()
}

/// Serves clients and workers on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    config: CoordinatorConfig,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let incoming = incoming(listener, config.connections, shutdown.clone());
    serve_incoming(incoming, None, config, shutdown, Box::new(|| {})).await
}

/// Serves clients and workers over TLS on `listener` until `shutdown` is
/// cancelled (`tls` may be reloaded meanwhile).
pub async fn serve_tls(
    listener: TcpListener,
    tls: crate::tls::ServerTls,
    config: CoordinatorConfig,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_announced(listener, Some(tls), None, config, shutdown, Box::new(|| {})).await
}

/// Serves on `listener` (over TLS with `tls`), and probes, metrics and
/// the run viewer on `http`, calling `ready` once the store is open and
/// the coordinator has its role: a coordinator that cannot open its store
/// (another holds it) fails before it says it serves.
pub async fn serve_announced(
    listener: TcpListener,
    tls: Option<crate::tls::ServerTls>,
    http: Option<HttpEndpoint>,
    config: CoordinatorConfig,
    shutdown: CancellationToken,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<(), ServeError> {
    match tls {
        Some(tls) => {
            let gate = crate::connections::Gate::new("grpc", config.connections);
            let incoming = crate::tls::accept(listener, tls, gate, shutdown.clone()).into_stream();
            serve_incoming(incoming, http, config, shutdown, ready).await
        }
        None => {
            let incoming = incoming(listener, config.connections, shutdown.clone());
            serve_incoming(incoming, http, config, shutdown, ready).await
        }
    }
}

/// Serves on a Unix socket: only processes that may open its path connect
/// (an embedded cluster puts it in a directory only its user can enter).
pub async fn serve_unix(
    listener: tokio::net::UnixListener,
    config: CoordinatorConfig,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_unix_announced(listener, config, shutdown, Box::new(|| {})).await
}

/// Like [`serve_unix`], calling `ready` once the store is open.
pub async fn serve_unix_announced(
    listener: tokio::net::UnixListener,
    config: CoordinatorConfig,
    shutdown: CancellationToken,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<(), ServeError> {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    serve_incoming(incoming, None, config, shutdown, ready).await
}

/// Starts serving as the lone coordinator of its data directory, or
/// campaigns in the group of its etcd (leading when elected).
async fn take_role(
    config: &CoordinatorConfig,
    role: watch::Sender<Role>,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<(), ServeError> {
    if config.store.etcd.is_empty() {
        let file = config.data_dir.join(STORE_FILE);
        let store = weft_store::EmbeddedStore::open_with(&file, config.store.flush)?;
        let keeper = Keeper::new(AnyStore::Embedded(store), None, CancellationToken::new());
        let services = start_term(config, keeper, None, shutdown.child_token(), tracker).await?;
        role.send_replace(Role::Leader(Arc::new(services)));
        metrics::gauge!(crate::metrics::LEADER).set(1.0);
        // Lone coordinators lead for as long as they run.
        tracker.spawn(async move {
            role.closed().await;
        });
        return Ok(());
    }
    let store = weft_store::EtcdStore::connect_with(&config.store.etcd, &config.store.tls)?;
    if config.partitions > 1 {
        // Checked by the configuration already.
        let partitioning = crate::ha::membership::Partitioning::new(config.partitions)
            .map_err(|e| ServeError::Group(e.to_string()))?;
        let store = AnyStore::Etcd(store);
        // A count other than the group's is refused now, with both; a
        // store that does not answer yet is waited for.
        let mut pause = Duration::from_millis(100);
        loop {
            match crate::ha::membership::fix_count(&store, partitioning).await {
                Ok(()) => break,
                Err(crate::ha::membership::GroupError::Store(error)) => {
                    tracing::warn!(%error, "the group's partition count cannot be read yet; trying again");
                }
                Err(refused) => return Err(ServeError::Group(refused.to_string())),
            }
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(config.store.lease_ttl);
        }
        let (config, shutdown) = (config.clone(), shutdown.clone());
        tracker.spawn(async move {
            let served =
                crate::ha::serve_as_member(store, config, partitioning, role, shutdown.clone())
                    .await;
            if let Err(error) = served {
                tracing::error!(%error, "cannot take part in the group; stopping");
                shutdown.cancel();
            }
        });
        return Ok(());
    }
    tracker.spawn(crate::ha::lead_when_elected(
        AnyStore::Etcd(store),
        config.clone(),
        role,
        shutdown.clone(),
    ));
    Ok(())
}

async fn serve_incoming<IO>(
    incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    http: Option<HttpEndpoint>,
    config: CoordinatorConfig,
    shutdown: CancellationToken,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<(), ServeError>
where
    IO: Connection,
{
    let tracker = TaskTracker::new();
    let (role_tx, role) = watch::channel(Role::Standby(None));
    let required = config.identities.required();
    let peers = config
        .tls
        .as_ref()
        .map(crate::tls::TlsFiles::for_peers)
        .unwrap_or_default();
    let front = FrontRuns::new(role.clone(), tracker.clone(), required, peers);
    // Probes answer (`/readyz` with 503) while the store opens.
    if let Some(endpoint) = http {
        let api = crate::http::Api::new(
            front.clone(),
            config.identities.clone(),
            config.http.clone(),
        );
        tracker.spawn(crate::http::serve(
            endpoint,
            api,
            config.connections,
            shutdown.clone(),
        ));
    }
    take_role(&config, role_tx, &shutdown, &tracker).await?;
    ready();
    crate::metrics::READY.store(true, std::sync::atomic::Ordering::Relaxed);
    let served = serve_front(incoming, &config, front, role, &shutdown).await;
    crate::metrics::READY.store(false, std::sync::atomic::Ordering::Relaxed);
    // The server may also stop on its own (a transport error): stop the
    // rest, then wait for it.
    shutdown.cancel();
    crate::term::wind_down(&tracker, DRAIN_TIMEOUT, "coordinator").await;
    served?;
    Ok(())
}

/// Serves the run and worker services on `listener` by `role` until
/// `shutdown` (what a coordinator's gRPC listener serves, without the
/// HTTP listener or taking a role of its own: for tests that set the role
/// themselves).
pub async fn serve_role(
    listener: TcpListener,
    config: &CoordinatorConfig,
    role: watch::Receiver<Role>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let tracker = TaskTracker::new();
    let front = FrontRuns::new(
        role.clone(),
        tracker.clone(),
        config.identities.required(),
        weft_proto::transport::ClientTls::default(),
    );
    let incoming = incoming(listener, config.connections, shutdown.clone());
    let served = serve_front(incoming, config, front, role, &shutdown).await;
    tracker.close();
    tracker.wait().await;
    Ok(served?)
}

/// The gRPC server: the run service through `front`, the worker service
/// by `role`, behind the auth layer.
async fn serve_front<IO>(
    incoming: impl tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    config: &CoordinatorConfig,
    front: FrontRuns,
    role: watch::Receiver<Role>,
    shutdown: &CancellationToken,
) -> Result<(), tonic::transport::Error>
where
    IO: Connection,
{
    // Each service decodes no more than its largest legitimate message: a
    // submission (bundle and input), a worker's result; framing aside.
    const FRAMING: usize = 1 << 20;
    let run_api = RunServiceServer::new(front)
        .max_decoding_message_size(config.max_bundle_bytes + config.max_input_bytes + FRAMING)
        .max_encoding_message_size(weft_proto::MAX_MESSAGE_BYTES);
    let group_api = GroupServiceServer::new(crate::grpc::group_flow::GroupFlow::new(role.clone()));
    let worker_api = WorkerServiceServer::new(FrontWorkers::new(role))
        .max_decoding_message_size(config.max_result_bytes.saturating_add(FRAMING))
        .max_encoding_message_size(weft_proto::MAX_MESSAGE_BYTES);
    tonic::transport::Server::builder()
        .initial_stream_window_size(weft_proto::transport::STREAM_WINDOW)
        .initial_connection_window_size(weft_proto::transport::CONNECTION_WINDOW)
        .max_frame_size(weft_proto::transport::MAX_FRAME)
        // Pings keep a quiet stream (a watch, a wait) from looking idle.
        .http2_keepalive_interval(Some(
            Duration::from_secs(20).min(config.connections.idle / 3),
        ))
        .concurrency_limit_per_connection(config.max_concurrent_requests)
        .layer(crate::auth::layer::AuthLayer::new(
            config.identities.clone(),
        ))
        .add_service(run_api)
        .add_service(worker_api)
        .add_service(group_api)
        .serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned())
        .await
}
