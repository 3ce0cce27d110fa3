//! The operator's HTTP endpoints: `/healthz` (the process and its lease task are alive),
//! `/readyz` (the API server answered and the replica leads or stands by), `/metrics`, and
//! `/ipxe/instances/<name>.ipxe`, the script a server chain-loads to install Harvester, answered
//! from a watched store of the Instances (a request costs the API server nothing: these paths
//! are unauthenticated).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::FutureExt;
use ingot_api::equinix::Instance;
use ingot_controllers::Metrics;
use ingot_controllers::pools::PoolsShared;
use ingot_controllers::pools::instance::install_script as install_script_for;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::serve::Limits;

#[derive(Clone)]
pub struct Health {
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    pub pools: Arc<PoolsShared>,
    /// The Instances, watched (with the pools controllers); `None`: no scripts are served.
    pub instances: Option<Store<Instance>>,
}

pub async fn serve(
    addr: SocketAddr,
    health: Health,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the health and metrics address {addr}: {e}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving /healthz, /readyz and /metrics");
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/ipxe/instances/{file}", get(install_script))
        .with_state(health);
    Ok(crate::serve::spawn(listener, None, app, limits, shutdown))
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    if health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(health): State<Health>) -> impl IntoResponse {
    match health.metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn install_script(
    State(health): State<Health>,
    Path(file): Path<String>,
) -> impl IntoResponse {
    let Some(name) = file.strip_suffix(".ipxe") else {
        return (
            StatusCode::NOT_FOUND,
            "scripts are served as <instance>.ipxe".to_owned(),
        )
            .into_response();
    };
    let Some(instances) = &health.instances else {
        return (
            StatusCode::NOT_FOUND,
            "install scripts are served with --controllers pools".to_owned(),
        )
            .into_response();
    };
    // Until the first list is in, a missing Instance may only be not yet seen.
    if !matches!(instances.wait_until_ready().now_or_never(), Some(Ok(()))) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the Instances are not read yet".to_owned(),
        )
            .into_response();
    }
    let Some(instance) = instances.get(&ObjectRef::new(name)) else {
        return (StatusCode::NOT_FOUND, format!("no Instance {name}")).into_response();
    };
    match install_script_for(&health.pools.settings, &instance) {
        Ok(script) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            script,
        )
            .into_response(),
        Err(error) => (StatusCode::UNPROCESSABLE_ENTITY, error.to_string()).into_response(),
    }
}
