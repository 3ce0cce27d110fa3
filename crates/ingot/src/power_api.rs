//! Harvester's node power actions over HTTPS, as Harvester's API serves them:
//! `POST /v1/harvester/nodes/<node>?action=powerActionPossible` and
//! `POST /v1/harvester/nodes/<node>?action=powerAction` with `{"operation": "reboot"}`.
//!
//! Callers present a Kubernetes bearer token; the API server says who they are (TokenReview)
//! and whether they hold the power permission on the Node (SubjectAccessReview, in `node_api`),
//! both answers cached for a while. The body is read only for a permitted caller, and is small.
//! Every replica serves it: a request is two writes on the Inventory, not a reconciliation.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use ingot_controllers::seeder::node_api::{self, Caller, Refusal};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::serve::Limits;

/// Where the server's certificate comes from.
pub enum Certificate {
    /// PEM files (a Secret mounted by the chart).
    Files { cert: PathBuf, key: PathBuf },
    /// The `kubernetes.io/tls` Secret `namespace/name`: made (self-signed for `names`, the
    /// Service's) by the first replica that finds it missing, then read by every replica and
    /// every start, so that all present one certificate a caller can pin.
    Secret {
        namespace: String,
        name: String,
        names: Vec<String>,
    },
    /// A self-signed certificate made at start, for the names given.
    SelfSigned(Vec<String>),
}

#[derive(Clone)]
struct PowerApi {
    reviews: Arc<Reviews>,
    namespace: String,
    /// Time a permitted caller has to send its (small) body.
    body_timeout: Duration,
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
    reviews: Reviews,
    namespace: String,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let config = Arc::new(server_config(certificate, &reviews.client).await?);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the power action API address {addr}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving Harvester's node power actions over HTTPS");
    let app = Router::new()
        .route("/v1/harvester/nodes/{node}", post(node_action))
        .with_state(PowerApi {
            reviews: Arc::new(reviews),
            namespace,
            body_timeout: limits.header_timeout,
        });
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    Ok(crate::serve::spawn(
        listener,
        Some(acceptor),
        app,
        limits,
        shutdown,
    ))
}

pub(crate) async fn server_config(
    certificate: Certificate,
    client: &Client,
) -> anyhow::Result<rustls::ServerConfig> {
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
        Certificate::Secret {
            namespace,
            name,
            names,
        } => secret_certificate(client, &namespace, &name, names).await?,
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

/// The certificate and key of the Secret `namespace/name`, made first if it is missing.
async fn secret_certificate(
    client: &Client,
    namespace: &str,
    name: &str,
    names: Vec<String>,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let reading =
        || format!("reading the power action API's certificate Secret {namespace}/{name}");
    let secret = match secrets.get_opt(name).await.with_context(reading)? {
        Some(secret) => secret,
        None => {
            let made = rcgen::generate_simple_self_signed(names)
                .context("making a self-signed certificate")?;
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/tls".to_owned()),
                data: Some(BTreeMap::from([
                    (
                        "tls.crt".to_owned(),
                        ByteString(made.cert.pem().into_bytes()),
                    ),
                    (
                        "tls.key".to_owned(),
                        ByteString(made.signing_key.serialize_pem().into_bytes()),
                    ),
                ])),
                ..Secret::default()
            };
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(created) => {
                    tracing::info!(secret = %format!("{namespace}/{name}"), "made the power action API's certificate");
                    created
                }
                // Another replica made it first: theirs is the one.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    secrets.get(name).await.with_context(reading)?
                }
                Err(error) => {
                    return Err(error).with_context(|| {
                        format!(
                            "creating the power action API's certificate Secret {namespace}/{name}"
                        )
                    });
                }
            }
        }
    };
    let data = secret.data.unwrap_or_default();
    let field = |key: &str| {
        data.get(key).map(|v| v.0.as_slice()).with_context(|| {
            format!(
                "the Secret {namespace}/{name} has no {key}: a kubernetes.io/tls Secret is expected"
            )
        })
    };
    let chain = CertificateDer::pem_slice_iter(field("tls.crt")?)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing tls.crt of the Secret {namespace}/{name}"))?;
    let key = PrivateKeyDer::from_pem_slice(field("tls.key")?)
        .with_context(|| format!("parsing tls.key of the Secret {namespace}/{name}"))?;
    Ok((chain, key))
}

async fn node_action(
    State(api): State<PowerApi>,
    Path(node): Path<String>,
    Query(query): Query<ActionQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Who asks, before a byte of the body is read: a caller without a token accepted by the API
    // server costs one cached review, never a buffered body.
    let caller = match api.reviews.authenticate(&headers).await {
        Ok(caller) => caller,
        Err(refusal) => return error(&refusal),
    };
    let result = match query.action.as_deref() {
        Some("powerActionPossible") => {
            node_api::power_action_possible(&api.reviews.client, &api.namespace, &node).await
        }
        Some("powerAction") => power_action(&api, &node, &caller, &headers, body).await,
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

/// `powerAction`: the caller's power permission (cached), then its body (bounded), then the
/// request.
async fn power_action(
    api: &PowerApi,
    node: &str,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<(), Refusal> {
    api.reviews.may_power(node, caller).await?;
    let too_large = || Refusal {
        status: 413,
        message: format!("the request body is limited to {MAX_BODY_BYTES} bytes"),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES) {
        return Err(too_large());
    }
    let body =
        match tokio::time::timeout(api.body_timeout, axum::body::to_bytes(body, MAX_BODY_BYTES))
            .await
        {
            Ok(Ok(body)) => body,
            Ok(Err(_)) => return Err(too_large()),
            Err(_) => {
                return Err(Refusal {
                    status: 408,
                    message: "the request body was not sent in time".to_owned(),
                });
            }
        };
    let operation = serde_json::from_slice::<PowerActionInput>(&body)
        .ok()
        .and_then(|input| input.operation)
        .unwrap_or_default();
    let permitted = Caller::Permitted {
        name: caller.name().to_owned(),
    };
    node_api::request_power_action(
        &api.reviews.client,
        &api.namespace,
        node,
        &operation,
        &permitted,
    )
    .await?;
    tracing::info!(%node, %operation, user = %caller.name(), "power action requested");
    Ok(())
}

/// The largest `powerAction` body read: `{"operation": "shutdown"}` is 25 bytes.
pub const MAX_BODY_BYTES: usize = 4096;

/// How long an answer of the API server about a caller is kept: a token accepted, a permission
/// granted. Refusals are kept shorter, so that a fixed binding takes effect soon.
const ACCEPTED_FOR: Duration = Duration::from_secs(60);
const REFUSED_FOR: Duration = Duration::from_secs(10);

/// How long an answer is kept: [`ACCEPTED_FOR`] when it lets the caller in, else
/// [`REFUSED_FOR`].
fn kept_for(accepted: bool) -> Duration {
    if accepted { ACCEPTED_FOR } else { REFUSED_FOR }
}
/// Callers (and caller-Node pairs) remembered at most; a full cache drops its expired entries,
/// then everything.
const CACHE_ENTRIES: usize = 4096;

/// The API server's answers about callers (TokenReview, SubjectAccessReview), cached so that a
/// caller repeating a request, or a crowd repeating one token, costs no more requests to it.
pub struct Reviews {
    client: Client,
    audiences: Vec<String>,
    tokens: Mutex<Expiring<[u8; 32], Option<Caller>>>,
    permissions: Mutex<Expiring<String, bool>>,
}

impl Reviews {
    /// `audiences`: the audiences a token must carry (TokenReview `spec.audiences`); empty: the
    /// API server's own.
    pub fn new(client: Client, audiences: Vec<String>) -> Self {
        Self {
            client,
            audiences,
            tokens: Mutex::new(Expiring::default()),
            permissions: Mutex::new(Expiring::default()),
        }
    }

    /// The caller named by the bearer token, as the API server knows it.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let unauthorized = |message: &str| Refusal {
            status: 401,
            message: message.to_owned(),
        };
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                unauthorized("a bearer token is required (Authorization: Bearer ...)")
            })?;
        // The cache holds digests, never the tokens themselves.
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = self.lock_tokens().get(&key);
        let caller = match cached {
            Some(caller) => caller,
            None => {
                let caller = self.review_token(token).await?;
                self.lock_tokens()
                    .insert(key, caller.clone(), kept_for(caller.is_some()));
                caller
            }
        };
        caller.ok_or_else(|| {
            unauthorized(if self.audiences.is_empty() {
                "the token was not accepted by the API server"
            } else {
                "the token was not accepted by the API server for this service's audience"
            })
        })
    }

    async fn review_token(&self, token: &str) -> Result<Option<Caller>, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Refusal {
                status: 500,
                message: format!("asking the API server who the caller is: {e}"),
            })?;
        let status = answer.status.unwrap_or_default();
        // With audiences asked for, the API server answers those the token carries: one of ours
        // is required.
        let audience_matches = self.audiences.is_empty()
            || status
                .audiences
                .as_ref()
                .is_some_and(|found| found.iter().any(|a| self.audiences.contains(a)));
        let user = status
            .user
            .filter(|_| status.authenticated == Some(true) && audience_matches);
        Ok(user.map(|user| Caller::User {
            name: user.username.unwrap_or_default(),
            uid: user.uid,
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }

    /// Whether `caller` holds the power permission on `node` (`node_api::POWER_PERMISSION`).
    async fn may_power(&self, node: &str, caller: &Caller) -> Result<(), Refusal> {
        // Debug spells every field of the caller out, quoted: one key per caller and Node.
        let key = format!("{caller:?} {node:?}");
        let cached = self.lock_permissions().get(&key);
        let allowed = match cached {
            Some(allowed) => allowed,
            None => {
                let allowed = node_api::may_power(&self.client, node, caller).await?;
                self.lock_permissions()
                    .insert(key, allowed, kept_for(allowed));
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(node_api::power_refused(caller, node))
        }
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, Expiring<[u8; 32], Option<Caller>>> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_permissions(&self) -> std::sync::MutexGuard<'_, Expiring<String, bool>> {
        self.permissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A map whose entries expire, of at most `CACHE_ENTRIES`.
struct Expiring<K, V> {
    entries: HashMap<K, (Instant, V)>,
}

impl<K, V> Default for Expiring<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
}

impl<K: Eq + std::hash::Hash, V: Clone> Expiring<K, V> {
    fn get(&self, key: &K) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, value)| value.clone())
    }

    fn insert(&mut self, key: K, value: V, keep: Duration) {
        let now = Instant::now();
        if self.entries.len() >= CACHE_ENTRIES {
            self.entries.retain(|_, (until, _)| now < *until);
        }
        if self.entries.len() >= CACHE_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, (now + keep, value));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/install.md: answers kept for 60 s, a refusal for 10 s.
    #[test]
    fn an_accepted_answer_is_kept_a_minute_a_refusal_ten_seconds() {
        assert_eq!(kept_for(true), Duration::from_secs(60));
        assert_eq!(kept_for(false), Duration::from_secs(10));
    }

    #[test]
    fn an_answer_is_given_until_it_expires_and_the_cache_stays_bounded() {
        let mut cache = Expiring::default();
        cache.insert(1, "kept", kept_for(false));
        cache.insert(2, "expired", Duration::ZERO);
        assert_eq!(cache.get(&1), Some("kept"));
        assert_eq!(cache.get(&2), None);
        for key in 3..(CACHE_ENTRIES as u32 * 2) {
            cache.insert(key, "more", kept_for(true));
        }
        assert!(cache.entries.len() <= CACHE_ENTRIES);
    }
}
