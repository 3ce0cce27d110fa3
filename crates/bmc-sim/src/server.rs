//! One listener per BMC: plain HTTP/1.1 or TLS, connections served by hyper.

use crate::{BmcState, CloseConnection};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<BmcState>,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let app = crate::redfish::router(state.clone());
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    // Dropping (aborting) this task drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let close = Arc::new(tokio::sync::Notify::new());
                let service = TowerToHyperService::new(
                    app.clone().layer(axum::Extension(CloseConnection(close.clone()))),
                );
                let acceptor = acceptor.clone();
                let open = OpenConnection::new(state.clone());
                connections.spawn(async move {
                    let _open = open;
                    let builder = hyper::server::conn::http1::Builder::new();
                    // A request that asks for it ends the connection without an answer.
                    match acceptor {
                        Some(a) => {
                            let Ok(tls) = a.accept(stream).await else { return };
                            tokio::select! {
                                _ = builder.serve_connection(TokioIo::new(tls), service) => {}
                                () = close.notified() => {}
                            }
                        }
                        None => {
                            tokio::select! {
                                _ = builder.serve_connection(TokioIo::new(stream), service) => {}
                                () = close.notified() => {}
                            }
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Counts a connection in `connections_open` for as long as it is served.
struct OpenConnection(Arc<BmcState>);

impl OpenConnection {
    fn new(state: Arc<BmcState>) -> Self {
        state
            .counters
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        OpenConnection(state)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0
            .counters
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}
