//! The push events receiver (`--events-addr`): BMCs POST their Redfish events here, each with
//! the secret header of the Inventory's subscription; the Seeder controller checks it and wakes
//! the Inventory's hardware read ([`ingot_controllers::seeder::push`]). Bounded like the other
//! servers (connections, header time, connection life), a body of at most 64 KiB read within
//! the header timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ingot_controllers::seeder::push::{MAX_EVENT_BYTES, Receiver, Refused, SECRET_HEADER};

use crate::serve::Limits;

#[derive(Clone)]
struct Events {
    receiver: Arc<Receiver>,
    body_timeout: Duration,
}

/// Starts serving on `addr` (over TLS with `tls`); the task ends with `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    receiver: Arc<Receiver>,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the events receiver address {addr}"))?;
    tracing::info!(address = %listener.local_addr()?, tls = tls.is_some(), url = %receiver.settings.url, "receiving the BMCs' pushed events");
    let app = Router::new().fallback(receive).with_state(Events {
        receiver,
        body_timeout: limits.header_timeout,
    });
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    Ok(crate::serve::spawn(
        listener, acceptor, app, limits, shutdown,
    ))
}

async fn receive(State(events): State<Events>, request: Request) -> Response {
    if request.method() != Method::POST {
        return (StatusCode::METHOD_NOT_ALLOWED, "events are POSTed\n").into_response();
    }
    let secret = request
        .headers()
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes().to_vec());
    let body = request.into_body();
    let read = tokio::time::timeout(events.body_timeout, read_bounded(body)).await;
    let result = match read {
        Ok(Some(bytes)) => events.receiver.receive(secret.as_deref(), &bytes),
        Ok(None) => {
            let refused = Refused::TooLarge;
            events.receiver.count_refused(&refused);
            Err(refused)
        }
        Err(_) => {
            return (StatusCode::REQUEST_TIMEOUT, "the body came too slowly\n").into_response();
        }
    };
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(refused) => (
            StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::BAD_REQUEST),
            format!("{}\n", refused.message()),
        )
            .into_response(),
    }
}

/// The body, or `None` when it is longer than [`MAX_EVENT_BYTES`] (not read further).
async fn read_bounded(body: Body) -> Option<axum::body::Bytes> {
    axum::body::to_bytes(body, MAX_EVENT_BYTES).await.ok()
}
