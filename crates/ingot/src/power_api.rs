//! Harvester's node power actions over HTTPS, as Harvester's API serves them:
//! `POST /v1/harvester/nodes/<node>?action=powerActionPossible` and
//! `POST /v1/harvester/nodes/<node>?action=powerAction` with `{"operation": "reboot"}`.
//!
//! Callers present a Kubernetes bearer token; the API server says who they are (TokenReview)
//! and whether they may update the Node (SubjectAccessReview, in `node_api`). Every replica
//! serves it: a request is two writes on the Inventory, not a reconciliation.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ingot_controllers::seeder::node_api::{self, Caller, Refusal};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde::Deserialize;
use tokio::task::JoinSet;

/// Where the server's certificate comes from.
pub enum Certificate {
    /// PEM files (a Secret mounted by the chart).
    Files { cert: PathBuf, key: PathBuf },
    /// A self-signed certificate made at start, for the names given.
    SelfSigned(Vec<String>),
}

#[derive(Clone)]
struct PowerApi {
    client: Client,
    namespace: String,
}

#[derive(Deserialize)]
struct ActionQuery {
    action: Option<String>,
}

#[derive(Deserialize)]
struct PowerActionInput {
    operation: Option<String>,
}

/// Starts serving on `addr`; the task ends with `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    certificate: Certificate,
    client: Client,
    namespace: String,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let config = Arc::new(server_config(certificate)?);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the power action API address {addr}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving Harvester's node power actions over HTTPS");
    let app = Router::new()
        .route("/v1/harvester/nodes/{node}", post(node_action))
        .with_state(PowerApi { client, namespace });
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    Ok(tokio::spawn(async move {
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let service = TowerToHyperService::new(app.clone());
                    let acceptor = acceptor.clone();
                    connections.spawn(async move {
                        let Ok(tls) = acceptor.accept(stream).await else { return };
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = &mut shutdown => break,
            }
        }
    }))
}

fn server_config(certificate: Certificate) -> anyhow::Result<rustls::ServerConfig> {
    let (chain, key) = match certificate {
        Certificate::Files { cert, key } => {
            let chain = CertificateDer::pem_file_iter(&cert)
                .with_context(|| format!("reading the certificate {}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("parsing the certificate {}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&key)
                .with_context(|| format!("reading the private key {}", key.display()))?;
            (chain, key)
        }
        Certificate::SelfSigned(names) => {
            let made = rcgen::generate_simple_self_signed(names)
                .context("making a self-signed certificate")?;
            let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
                .map_err(|e| anyhow::anyhow!("the generated key: {e}"))?;
            (vec![made.cert.der().clone()], key)
        }
    };
    rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS versions")?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .context("the power action API's certificate and key do not match")
}

async fn node_action(
    State(api): State<PowerApi>,
    Path(node): Path<String>,
    Query(query): Query<ActionQuery>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let caller = match authenticate(&api.client, &headers).await {
        Ok(caller) => caller,
        Err(refusal) => return error(&refusal),
    };
    let result = match query.action.as_deref() {
        Some("powerActionPossible") => {
            node_api::power_action_possible(&api.client, &api.namespace, &node).await
        }
        Some("powerAction") => {
            let operation = serde_json::from_slice::<PowerActionInput>(&body)
                .ok()
                .and_then(|input| input.operation)
                .unwrap_or_default();
            let result = node_api::request_power_action(
                &api.client,
                &api.namespace,
                &node,
                &operation,
                &caller,
            )
            .await;
            if result.is_ok()
                && let Caller::User { name, .. } = &caller
            {
                tracing::info!(%node, %operation, user = %name, "power action requested");
            }
            result
        }
        other => Err(Refusal {
            status: 400,
            message: format!(
                "unknown action {:?}: use ?action=powerActionPossible or ?action=powerAction",
                other.unwrap_or_default()
            ),
        }),
    };
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(refusal) => error(&refusal),
    }
}

/// The caller named by the bearer token, as the API server knows it.
async fn authenticate(client: &Client, headers: &HeaderMap) -> Result<Caller, Refusal> {
    let unauthorized = |message: &str| Refusal {
        status: 401,
        message: message.to_owned(),
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| unauthorized("a bearer token is required (Authorization: Bearer ...)"))?;
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| Refusal {
            status: 500,
            message: format!("asking the API server who the caller is: {e}"),
        })?;
    let status = answer.status.unwrap_or_default();
    let user = status.user.filter(|_| status.authenticated == Some(true));
    let Some(user) = user else {
        return Err(unauthorized("the token was not accepted by the API server"));
    };
    Ok(Caller::User {
        name: user.username.unwrap_or_default(),
        uid: user.uid,
        groups: user.groups.unwrap_or_default(),
        extra: user.extra.unwrap_or_default(),
    })
}

/// An error as Kubernetes-style JSON.
fn error(refusal: &Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        axum::Json(serde_json::json!({
            "type": "error",
            "status": refusal.status,
            "message": refusal.message,
        })),
    )
        .into_response()
}
