//! How the operator reaches the Kubernetes API server.
//!
//! kube's default client speaks HTTP/1.1 only, so every request in flight holds a TLS
//! connection of its own: with hundreds of status writes and Job reads at once, the operator
//! opened hundreds of connections, and the API server paid a handshake for each. This client
//! offers HTTP/2 as client-go does, so every request and watch shares one connection; it falls
//! back to HTTP/1.1 where the server does not offer HTTP/2.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

use crate::Metrics;

/// How a connection is checked when no frame arrives: a dead one is found by an unanswered
/// ping rather than by a watch that waits forever.
#[derive(Clone, Copy, Debug)]
pub struct Pings {
    /// A ping goes out after this long without a frame from the server.
    pub every: Duration,
    /// The connection is dropped when the ping is not answered within this.
    pub answer_within: Duration,
}

impl Default for Pings {
    /// client-go's: a ping after 30 s without a frame, answered within 15 s.
    fn default() -> Self {
        Self {
            every: Duration::from_secs(30),
            answer_within: Duration::from_secs(15),
        }
    }
}

/// A client for `config` whose every request is counted by verb and resource
/// (`ingot_kube_requests_total`).
pub fn client(config: Config, metrics: &Arc<Metrics>) -> Result<Client, kube::Error> {
    client_with_pings(config, metrics, Pings::default())
}

/// `client`, with its own ping timing.
pub fn client_with_pings(
    config: Config,
    metrics: &Arc<Metrics>,
    pings: Pings,
) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() {
        // kube's own stack handles (or clearly refuses) proxies.
        let builder = kube::client::ClientBuilder::try_from(config)?;
        return Ok(builder.with_layer(&counting(metrics)).build());
    }
    // As kube does: the TLS configuration below needs a default crypto provider.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An error only means another thread installed one first.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    // HTTP/2 writes a request as several frames: with Nagle's algorithm, the last one waited
    // for the server's delayed ACK, 40 ms on every write that followed another.
    tcp.set_nodelay(true);
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let tls = match &config.tls_server_name {
        Some(name) => tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            name.clone().try_into().map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?,
        )),
        None => tls,
    };
    let mut connector =
        hyper_timeout::TimeoutConnector::new(tls.enable_http1().enable_http2().wrap_connector(tcp));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(pings.every)
        .http2_keep_alive_timeout(pings.answer_within)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    // Counted as the controllers asked (before the cluster URL's path prefix is added, once
    // whatever the retries), as with kube's own stack.
    let service = ServiceBuilder::new()
        .layer(counting(metrics))
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

fn counting(
    metrics: &Arc<Metrics>,
) -> tower::util::MapRequestLayer<
    impl Fn(http::Request<kube::client::Body>) -> http::Request<kube::client::Body>
    + Clone
    + Send
    + Sync
    + 'static,
> {
    let metrics = metrics.clone();
    tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        let uri = request.uri();
        metrics.kube_request(request.method().as_str(), uri.path(), uri.query());
        request
    })
}
