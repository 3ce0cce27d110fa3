//! The boot server (`--boot-addr`): what servers being provisioned fetch while they install
//! Harvester, answered from watched stores by `provisioning::boot::BootService`.
//!
//! - `GET /boot/<mac>`: the server's iPXE script, or a script that boots its disk.
//! - `GET /config/<namespace>/<name>`: its Harvester install config (only to its own address).
//! - `PUT /disable/<namespace>/<name>`: the installer's SUCCEEDED webhook.
//! - `PUT /wiped/<namespace>/<name>`: a released server's wipe image reporting its wipe.
//! - `GET /nocloud/<namespace>/<name>/<file>`: a Gardener machine's cloud-init data (only to
//!   its own address).
//! - `GET /media/<namespace>/<name>.iso`: a node's boot CD, for virtual media.
//!
//! Plain HTTP, as iPXE and the installer fetch it; bounded like the other servers, and no
//! request body is read.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use ingot_controllers::provisioning::boot::{Answer, BOOT_FROM_DISK, BootService, Script};
use tracing::{info, warn};

use crate::serve::{Limits, Peer};

pub async fn serve(
    addr: SocketAddr,
    service: Arc<BootService>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the boot server address {addr}: {e}"))?;
    info!(address = %listener.local_addr()?, "serving iPXE scripts and install configs");
    let app = Router::new()
        .route("/boot/{mac}", get(script))
        .route("/config/{namespace}/{name}", get(config))
        .route("/disable/{namespace}/{name}", put(succeeded))
        .route("/wiped/{namespace}/{name}", put(wiped))
        .route("/nocloud/{namespace}/{name}/{file}", get(nocloud))
        .route("/media/{namespace}/{file}", get(media))
        .with_state(service);
    Ok(crate::serve::spawn(listener, None, app, limits, shutdown))
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn script(State(service): State<Arc<BootService>>, Path(mac): Path<String>) -> Response {
    match service.script(&mac).await {
        Script::Install(script) => {
            info!(%mac, "served an install script");
            text(StatusCode::OK, script)
        }
        Script::Disk => text(StatusCode::OK, BOOT_FROM_DISK.to_owned()),
        Script::Unknown => text(StatusCode::NOT_FOUND, BOOT_FROM_DISK.to_owned()),
        Script::Unavailable => unavailable(),
    }
}

async fn config(
    State(service): State<Arc<BootService>>,
    Extension(Peer(peer)): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match service.config(&namespace, &name, peer.ip()).await {
        Answer::Ok(config) => {
            info!(%namespace, %name, "served an install config");
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/yaml")],
                config,
            )
                .into_response()
        }
        Answer::Forbidden => refused(&namespace, &name, peer),
        Answer::NotFound => StatusCode::NOT_FOUND.into_response(),
        Answer::Unavailable => unavailable(),
    }
}

async fn nocloud(
    State(service): State<Arc<BootService>>,
    Extension(Peer(peer)): Extension<Peer>,
    Path((namespace, name, file)): Path<(String, String, String)>,
) -> Response {
    match service.nocloud(&namespace, &name, &file, peer.ip()).await {
        Answer::Ok(body) => {
            info!(%namespace, %name, %file, "served cloud-init data");
            text(StatusCode::OK, body)
        }
        Answer::Forbidden => refused(&namespace, &name, peer),
        Answer::NotFound => StatusCode::NOT_FOUND.into_response(),
        Answer::Unavailable => unavailable(),
    }
}

async fn media(
    State(service): State<Arc<BootService>>,
    Path((namespace, file)): Path<(String, String)>,
) -> Response {
    match service.media(&namespace, &file).await {
        Answer::Ok(image) => {
            info!(%namespace, %file, bytes = image.len(), "served a boot CD");
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/x-iso9660-image")],
                image,
            )
                .into_response()
        }
        Answer::Forbidden | Answer::NotFound => StatusCode::NOT_FOUND.into_response(),
        Answer::Unavailable => unavailable(),
    }
}

/// The watches have not listed within `SYNC_WAIT` of the request.
fn unavailable() -> Response {
    warn!("not answered: the boot server's watches have not listed yet");
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

fn refused(namespace: &str, name: &str, peer: SocketAddr) -> Response {
    warn!(%namespace, %name, source = %peer.ip(), "refused: not the node's address (see --boot-allow-source)");
    StatusCode::FORBIDDEN.into_response()
}

async fn succeeded(
    State(service): State<Arc<BootService>>,
    Extension(Peer(peer)): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match service.succeeded(&namespace, &name, peer.ip()).await {
        Ok(Answer::Ok(())) => StatusCode::ACCEPTED.into_response(),
        Ok(Answer::Forbidden) => refused(&namespace, &name, peer),
        Ok(Answer::NotFound) => StatusCode::NOT_FOUND.into_response(),
        Ok(Answer::Unavailable) => unavailable(),
        Err(error) => {
            warn!(%namespace, %name, %error, "could not record the install");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

async fn wiped(
    State(service): State<Arc<BootService>>,
    Extension(Peer(peer)): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match service.wiped(&namespace, &name, peer.ip()).await {
        Ok(Answer::Ok(())) => {
            info!(%namespace, %name, "a released server's wipe reported");
            StatusCode::ACCEPTED.into_response()
        }
        Ok(Answer::Forbidden) => refused(&namespace, &name, peer),
        Ok(Answer::NotFound) => StatusCode::NOT_FOUND.into_response(),
        Ok(Answer::Unavailable) => unavailable(),
        Err(error) => {
            warn!(%namespace, %name, %error, "could not record the wipe");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}
