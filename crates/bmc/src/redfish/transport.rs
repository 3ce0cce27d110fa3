//! One HTTP exchange with a BMC: the HTTP client, URLs built from links, requests built with
//! their authentication, the answer read within bounds, and transport and HTTP errors in
//! ingot's form.

use super::options::RedfishOptions;
use super::sessions::{Auth, token_header};
use super::tls::pinned_tls;
use super::{RedfishClient, json::string};
use crate::error::BmcError;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Largest answer body read: far above any Redfish resource (a 200-entry log page is a few
/// hundred KiB), low enough that thousands of BMCs answering at once stay within memory.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Builds the HTTP client for the given TLS settings. Clients are cheap to clone and share a
/// connection pool; the session manager shares one per TLS setting across the fleet.
pub fn http_client(options: &RedfishOptions) -> Result<reqwest::Client, BmcError> {
    let mut builder = reqwest::Client::builder()
        .timeout(options.timeout)
        .connect_timeout(options.timeout)
        .pool_idle_timeout(options.idle_connection_timeout)
        .pool_max_idle_per_host(options.idle_connections_per_bmc)
        .user_agent(concat!("ingot-bmc/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(sha256) = options.tls.pinned_sha256 {
        return builder
            .tls_backend_preconfigured(pinned_tls(sha256)?)
            .build()
            .map_err(|e| BmcError::Config(format!("HTTP client: {e}")));
    }
    if let Some(pem) = &options.tls.ca_bundle_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| BmcError::Config(format!("CA bundle: {e}")))?;
        if certs.is_empty() {
            return Err(BmcError::Config("CA bundle holds no certificate".into()));
        }
        builder = builder.tls_certs_merge(certs);
    }
    if options.tls.insecure {
        tracing::warn!("BMC TLS certificates are not verified (insecure TLS requested)");
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    builder
        .build()
        .map_err(|e| BmcError::Config(format!("HTTP client: {e}")))
}

pub(super) struct Response {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Vec<u8>,
}

impl Response {
    pub(super) fn json(&self) -> Result<Value, BmcError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| BmcError::Malformed(format!("invalid JSON ({e})")))
    }
    pub(super) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

/// Whether two links name the same resource (a trailing `/` aside; `b` is a path).
pub(super) fn same_path(a: &str, b: &str) -> bool {
    join_url("", a).trim_end_matches('/') == b.trim_end_matches('/')
}

/// `base` + the path and query of `link` (a link never sends the token to another host).
pub(super) fn join_url(base: &str, link: &str) -> String {
    {
        let path = if let Some(rest) = link
            .strip_prefix("https://")
            .or_else(|| link.strip_prefix("http://"))
        {
            rest.find('/').map(|i| &rest[i..]).unwrap_or("/")
        } else {
            link
        };
        if path.starts_with('/') {
            format!("{base}{path}")
        } else {
            format!("{base}/{path}")
        }
    }
}

impl RedfishClient {
    /// Only the path and query of a link are used: a link never sends the token elsewhere.
    pub(super) fn url(&self, link: &str) -> String {
        join_url(&self.base, link)
    }

    pub(super) fn map_send_error(&self, e: reqwest::Error) -> BmcError {
        map_send_error(e, self.options.timeout)
    }

    pub(super) fn build(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .request(method, self.url(path))
            .header("Accept", "application/json")
            .header("OData-Version", "4.0");
        match auth {
            Auth::Session { token, .. } => req = req.header("X-Auth-Token", token_header(token)),
            Auth::Basic => req = req.basic_auth(&self.user, Some(self.password.expose())),
            Auth::None => {}
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        req
    }

    pub(super) async fn send_once(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        let permit = acquire(&self.gate).await?;
        self.send_permitted(permit, false, method, path, body, auth, headers)
            .await
    }

    /// Sends under a fleet permit already held (by this call, or by the read whose hedged
    /// `copy` this is).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_permitted(
        &self,
        _permit: Permit,
        copy: bool,
        method: Method,
        path: &str,
        body: Option<&Value>,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        let req = self.build(method, path, body, auth, headers);
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        if copy {
            self.stats.hedged.fetch_add(1, Ordering::Relaxed);
        }
        let started = Instant::now();
        let r = execute(req, self.options.timeout).await;
        if r.is_ok() {
            let took = started.elapsed().as_micros() as u64;
            self.answers.fold(took);
            self.stats.answers.fold(took);
        }
        r
    }
}

/// A fleet permit (`None` without a fleet limit).
pub(super) type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

pub(super) async fn acquire(
    gate: &Option<Arc<tokio::sync::Semaphore>>,
) -> Result<Permit, BmcError> {
    match gate {
        Some(g) => g
            .clone()
            .acquire_owned()
            .await
            .map(Some)
            .map_err(|_| BmcError::Config("fleet limit closed".into())),
        None => Ok(None),
    }
}

fn map_send_error(e: reqwest::Error, timeout: Duration) -> BmcError {
    map_error_of(e, timeout, &Method::GET)
}

/// A transport error in ingot's form. A connection that could not be made means the request
/// never left; one lost after connecting means a request that changes the BMC (anything but
/// GET and HEAD) may have been carried out.
fn map_error_of(e: reqwest::Error, timeout: Duration, method: &Method) -> BmcError {
    if e.is_timeout() {
        return BmcError::Timeout(timeout);
    }
    // The handshake is part of connecting; a TLS connection closed later (no close_notify)
    // is a connection lost after sending, not a handshake failure.
    if e.is_connect() {
        if is_tls_error(&e) {
            return BmcError::Tls(Box::new(e));
        }
        return BmcError::Unreachable(Box::new(e));
    }
    if e.is_decode() || e.is_body() {
        return BmcError::Malformed(format!("unreadable body ({e})"));
    }
    if *method == Method::GET || *method == Method::HEAD {
        return BmcError::Unreachable(Box::new(e));
    }
    // Reset or closed after the request was written (or while writing it).
    BmcError::MaybeSent(Box::new(e))
}

/// Sends a built request and reads the whole answer (at most [`MAX_BODY_BYTES`]), bounded by
/// `timeout`.
pub(super) async fn execute(
    req: reqwest::RequestBuilder,
    timeout: Duration,
) -> Result<Response, BmcError> {
    let call = async {
        let (http, req) = req.build_split();
        let req = req.map_err(|e| BmcError::Config(format!("invalid request: {e}")))?;
        let method = req.method().clone();
        let path = req.url().path().to_owned();
        let too_large = || {
            BmcError::TooLarge(format!(
                "{method} {path}: the body is larger than {} MiB",
                MAX_BODY_BYTES >> 20
            ))
        };
        let mut resp = http
            .execute(req)
            .await
            .map_err(|e| map_error_of(e, timeout, &method))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_BODY_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| map_error_of(e, timeout, &method))?
        {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<_, BmcError>(Response {
            status,
            headers,
            body,
        })
    };
    // reqwest's own timeout covers the request; this outer bound is a second line for
    // anything reqwest does not time (it never fires first in practice).
    match tokio::time::timeout(timeout + Duration::from_millis(500), call).await {
        Ok(r) => r,
        Err(_) => Err(BmcError::Timeout(timeout)),
    }
}

fn is_tls_error(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        let text = s.to_string().to_ascii_lowercase();
        if text.contains("certificate")
            || text.contains("tls")
            || text.contains("handshake")
            || text.contains("invalidcontenttype")
            || text.contains("received corrupt message")
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// The Redfish error message ids in an error body.
fn message_ids(body: &Value) -> Vec<String> {
    let mut ids = Vec::new();
    if let Some(e) = body.get("error") {
        if let Some(c) = string(e, "code") {
            ids.push(c);
        }
        if let Some(infos) = e.get("@Message.ExtendedInfo").and_then(Value::as_array) {
            ids.extend(infos.iter().filter_map(|i| string(i, "MessageId")));
        }
    }
    ids
}

fn error_message(body: &Value) -> Option<String> {
    let e = body.get("error")?;
    e.get("@Message.ExtendedInfo")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(|i| string(i, "Message"))
        .or_else(|| string(e, "message"))
}

pub(super) fn check_status(resp: &Response, method: &str, path: &str) -> Result<(), BmcError> {
    if resp.status.is_success() {
        return Ok(());
    }
    let body: Value = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
    let ids = message_ids(&body);
    if ids
        .iter()
        .any(|id| id.contains("SessionLimitExceeded") || id.contains("RAC0218"))
    {
        return Err(BmcError::SessionLimit);
    }
    Err(match resp.status.as_u16() {
        401 => BmcError::Unauthorized,
        403 => BmcError::Forbidden,
        429 | 503 => BmcError::Unavailable {
            status: resp.status.as_u16(),
        },
        status => BmcError::Http {
            status,
            method: method.to_owned(),
            path: path.to_owned(),
            message: error_message(&body),
        },
    })
}
