//! The accept loop of both servers (`--http-addr` and `--power-api-addr`), bounded so that no
//! client can hold the process's sockets or memory: a cap on open connections (one more is closed
//! at once), a deadline for the TLS handshake and for each request's headers, and a longest life
//! per connection (a keep-alive connection is closed after its request in flight).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The address a request came from.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub std::net::SocketAddr);

/// The bounds of one server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once; a connection beyond them is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Time a client has to finish the TLS handshake, and to send each request's headers.
    pub header_timeout: Duration,
    /// Time after which a connection is closed, once its request in flight is answered.
    pub connection_lifetime: Duration,
}

/// Serves `app` on `listener` (over TLS with `tls`) until `shutdown`.
pub fn spawn(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, peer)) = accepted else { continue };
                    // At the cap the connection is closed now rather than left in the backlog,
                    // where a crowd of idle clients would starve every other caller.
                    let Ok(permit) = open.clone().try_acquire_owned() else {
                        drop(stream);
                        continue;
                    };
                    // The client's address, for handlers that answer by it (the boot server).
                    let service = TowerToHyperService::new(app.clone().layer(axum::Extension(Peer(peer))));
                    let tls = tls.clone();
                    connections.spawn(async move {
                        let _permit = permit;
                        match tls {
                            Some(acceptor) => {
                                let handshake =
                                    tokio::time::timeout(limits.header_timeout, acceptor.accept(stream));
                                if let Ok(Ok(stream)) = handshake.await {
                                    serve_connection(stream, service, limits).await;
                                }
                            }
                            None => serve_connection(stream, service, limits).await,
                        }
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = &mut shutdown => break,
            }
        }
    })
}

async fn serve_connection<S>(stream: S, service: TowerToHyperService<Router>, limits: Limits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        () = tokio::time::sleep(limits.connection_lifetime) => {}
    }
    connection.as_mut().graceful_shutdown();
    // The request in flight gets one more header timeout to be answered.
    let _ = tokio::time::timeout(limits.header_timeout, connection).await;
}
