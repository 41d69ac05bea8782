//! The connections a listener takes: at most so many at once, and so many
//! from one peer; none kept once silent; an accept loop that backs off.
//!
//! Without these, a slowloris (connections opened and fed a byte now and
//! then, or half a header and nothing more) held the coordinator's
//! descriptors until `weft runs` and `/healthz` timed out, and a 1 MB
//! header hung for eleven minutes. So:
//!
//! - each listener admits at most `max_connections` at once, and at most
//!   `max_connections_per_peer` from one address; one over is closed at
//!   once (counted in `weft_connections_refused_total{reason}`);
//! - a connection with nothing read or written for `idle_timeout_ms`
//!   ([`IDLE_TIMEOUT`] by default) is closed: a healthy one is never that quiet (gRPC's keepalive pings
//!   every 20 s, the viewer's event streams every 15 s), a half-sent
//!   request is;
//! - an accept that fails (descriptors spent) waits before the next, up to
//!   a second, and says so once per burst rather than once per failure.
//!
//! The gate is in front of the TLS handshake, which a connection counts
//! against its caps too.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

/// How long a connection may stay silent both ways before it is closed,
/// by default.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How many connections a listener takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// At once, from everyone.
    pub per_listener: usize,
    /// At once, from one address.
    pub per_peer: usize,
    /// Silence, both ways, after which a connection is closed.
    pub idle: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            per_listener: 4096,
            per_peer: 256,
            idle: IDLE_TIMEOUT,
        }
    }
}

/// The caps of one listener, shared by its connections.
#[derive(Clone)]
pub struct Gate {
    limits: ConnectionLimits,
    open: Arc<Mutex<Open>>,
    name: &'static str,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
    /// Refusals since the last log line about them.
    refused_unsaid: u64,
    said_at: Option<Instant>,
}

/// A connection's place under its listener's caps, given back on drop.
pub struct Admitted {
    gate: Gate,
    peer: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.by_peer.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.by_peer.remove(&self.peer);
            }
        }
    }
}

impl Gate {
    /// The caps of the listener `name` (`grpc`, `http`).
    pub fn new(name: &'static str, limits: ConnectionLimits) -> Self {
        Self {
            limits,
            open: Arc::default(),
            name,
        }
    }

    /// A place for a connection from `peer`, or `None` when a cap is
    /// reached.
    pub fn admit(&self, peer: IpAddr) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let from_peer = open.by_peer.get(&peer).copied().unwrap_or(0);
        let reason = if open.total >= self.limits.per_listener {
            Some("listener")
        } else if from_peer >= self.limits.per_peer {
            Some("peer")
        } else {
            None
        };
        if let Some(reason) = reason {
            metrics::counter!(crate::metrics::CONNECTIONS_REFUSED, "listener" => self.name, "reason" => reason)
                .increment(1);
            open.refused_unsaid += 1;
            let due = open
                .said_at
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
            if due {
                tracing::warn!(
                    listener = self.name,
                    refused = open.refused_unsaid,
                    limit = if reason == "peer" {
                        self.limits.per_peer
                    } else {
                        self.limits.per_listener
                    },
                    "connections refused: {} (max_connections{})",
                    if reason == "peer" {
                        "one address holds as many as it may"
                    } else {
                        "the listener holds as many as it may"
                    },
                    if reason == "peer" { "_per_peer" } else { "" }
                );
                open.refused_unsaid = 0;
                open.said_at = Some(Instant::now());
            }
            return None;
        }
        open.total += 1;
        *open.by_peer.entry(peer).or_default() += 1;
        Some(Admitted {
            gate: self.clone(),
            peer,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// A connection under its listener's caps, closed once idle.
pub struct Gated<IO> {
    inner: IO,
    _admitted: Admitted,
    idle: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl<IO> Gated<IO> {
    fn new(inner: IO, admitted: Admitted, timeout: Duration) -> Self {
        Self {
            inner,
            _admitted: admitted,
            idle: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }

    /// The connection itself.
    pub fn get_ref(&self) -> &IO {
        &self.inner
    }

    fn active(&mut self) {
        self.idle.as_mut().reset(Instant::now() + self.timeout);
    }

    /// An error once the connection has been silent too long.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        match self.idle.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the connection was idle too long",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Gated<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => self.poll_idle(cx).map(Err),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Gated<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.active();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            // A peer that reads nothing is as idle as one that says nothing.
            Poll::Pending => self.poll_idle(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Gated<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts on `listener` until `shutdown`, under `gate`'s caps: the
/// admitted connections, with their peers. Nagle's algorithm is off
/// (tasks, results and heartbeats are small messages).
pub fn accept(
    listener: TcpListener,
    gate: Gate,
    shutdown: CancellationToken,
) -> Accepted<Gated<TcpStream>> {
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut backoff = Duration::ZERO;
        let mut failed_unsaid = 0u64;
        let mut said_at: Option<Instant> = None;
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => {
                    backoff = Duration::ZERO;
                    accepted
                }
                Err(error) => {
                    // Descriptors spent, most likely: wait for some to come
                    // back, longer each time, and say so once a burst.
                    failed_unsaid += 1;
                    if said_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!(listener = gate.name, %error, failures = failed_unsaid, "accepting connections fails; backing off");
                        failed_unsaid = 0;
                        said_at = Some(Instant::now());
                    }
                    backoff =
                        (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    continue;
                }
            };
            let Some(admitted) = gate.admit(peer.ip()) else {
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let gated = Gated::new(stream, admitted, gate.limits.idle);
            if tx.send((gated, peer)).await.is_err() {
                return;
            }
        }
    });
    Accepted { streams: rx, local }
}

/// Connections a listener admitted (and, over TLS, that completed their
/// handshake), with their peers: for tonic as a stream, for axum as a
/// listener.
pub struct Accepted<IO> {
    streams: mpsc::Receiver<(IO, SocketAddr)>,
    local: SocketAddr,
}

impl<IO> Accepted<IO> {
    /// Connections sent on `streams`, accepted at `local`.
    pub fn new(streams: mpsc::Receiver<(IO, SocketAddr)>, local: SocketAddr) -> Self {
        Self { streams, local }
    }

    /// The next connection, or `None` once accepting has stopped.
    pub async fn next(&mut self) -> Option<(IO, SocketAddr)> {
        self.streams.recv().await
    }

    /// Where they were accepted.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The connections, for tonic's `serve_with_incoming`.
    pub fn into_stream(self) -> impl tokio_stream::Stream<Item = std::io::Result<IO>> {
        use tokio_stream::StreamExt;
        tokio_stream::wrappers::ReceiverStream::new(self.streams).map(|(stream, _)| Ok(stream))
    }
}

impl<IO> axum::serve::Listener for Accepted<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = IO;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.streams.recv().await {
            Some(accepted) => accepted,
            // Accepting has stopped (shutdown): the server's own graceful
            // shutdown ends it.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_per_peer_and_per_listener_and_places_come_back() {
        let gate = Gate::new(
            "test",
            ConnectionLimits {
                per_listener: 3,
                per_peer: 2,
                idle: IDLE_TIMEOUT,
            },
        );
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = gate.admit(a).expect("first");
        let _second = gate.admit(a).expect("second");
        assert!(gate.admit(a).is_none(), "a third from one peer");
        let _other = gate.admit(b).expect("another peer");
        assert!(gate.admit(b).is_none(), "the listener is full");
        drop(first);
        assert_eq!(gate.open(), 2);
        assert!(gate.admit(a).is_some(), "a place came back");
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_and_a_talking_one_is_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let gate = Gate::new("test", ConnectionLimits::default());
        let (tx, mut rx) = mpsc::channel(4);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let admitted = gate.admit("127.0.0.1".parse().unwrap()).unwrap();
                let _ = tx
                    .send(Gated::new(stream, admitted, Duration::from_millis(300)))
                    .await;
            }
        });
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut client = TcpStream::connect(address).await.unwrap();
        let mut server = rx.recv().await.unwrap();
        // Talking keeps it open past the timeout.
        let mut byte = [0u8; 1];
        for _ in 0..4 {
            client.write_all(b"x").await.unwrap();
            server.read_exact(&mut byte).await.unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        // Silence closes it.
        let error = server.read(&mut byte).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
    }
}
