//! The path every Redfish request takes before its resource: counted, faults injected,
//! authenticated, quirks applied, the body read; then the route table answers.

use super::logs::log_page;
use super::sessions::USUAL_SESSIONS;
use super::{Bmc, Req, collection, error, not_found, ok, route, system_path, unauthorized};
use crate::{BmcState, CloseConnection, Fault};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::StreamExt;
use rand::Rng;
use serde_json::Value;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(super) async fn handle(State(b): State<Bmc>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if let Some(admin) = path.strip_prefix("/_sim/") {
        return super::admin::handle(&b, req.method().clone(), admin, req).await;
    }
    b.counters.requests.fetch_add(1, Ordering::Relaxed);
    let _in_flight = InFlightGuard::enter(&b);
    let Some(path) = sessions_moved(&b, path) else {
        return not_found();
    };
    let fault = b.fault();
    if let Some(answer) = injected(&b, fault.as_ref()).await {
        return answer;
    }
    let trimmed = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path.as_str()
    };
    if let Some(refused) = refused(&b, &req, trimmed, fault.as_ref()) {
        return refused;
    }
    let query = req.uri().query().unwrap_or_default().to_owned();
    let method = req.method().clone();
    let headers = req.headers().clone();
    let close = req.extensions().get::<CloseConnection>().cloned();
    let body = match read_body(req).await {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    if let Some(r) = log_page(&b, &method, trimmed, &query) {
        return r;
    }
    if let Some(r) = oversized(&b, fault.as_ref(), &method, trimmed) {
        return r;
    }
    // Logins and logouts are answered: the fault is about the actions on the system.
    let changes =
        method != Method::GET && method != Method::HEAD && !trimmed.starts_with(USUAL_SESSIONS);
    let answer = route(&Req {
        b: &b,
        method: &method,
        path: trimmed,
        headers: &headers,
        body: body.as_ref(),
        fault: fault.as_ref(),
    });
    if fault == Some(Fault::DropAfterAction)
        && changes
        && let Some(close) = close
    {
        // Done; the answer never leaves.
        close.0.notify_one();
        std::future::pending::<()>().await;
    }
    answer
}

/// The path as the resources know it: with quirk `sessions_elsewhere` the session collection
/// is served at [`crate::MOVED_SESSIONS`] and its usual URI is not found (`None`).
fn sessions_moved(b: &BmcState, path: String) -> Option<String> {
    if !b.lock().quirks.sessions_elsewhere {
        return Some(path);
    }
    if path.starts_with(USUAL_SESSIONS) {
        return None;
    }
    Some(match path.strip_prefix(crate::MOVED_SESSIONS) {
        Some(rest) => format!("{USUAL_SESSIONS}{rest}"),
        None => path,
    })
}

/// The injected latency and slowness, then the faults that answer every request alike: no
/// answer at all, 503, or a body that is not JSON.
async fn injected(b: &BmcState, fault: Option<&Fault>) -> Option<Response> {
    let mut delay = b.spec.latency;
    if let Some(Fault::Slow { delay_ms }) = fault {
        delay += Duration::from_millis(*delay_ms);
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let hang = fault == Some(&Fault::Timeout)
        || (b.spec.timeout_ratio > 0.0 && rand::rng().random_bool(b.spec.timeout_ratio.min(1.0)));
    if hang {
        // Never answer; the connection closes when the client gives up.
        std::future::pending::<()>().await;
    }
    match fault {
        Some(Fault::Unavailable) => Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Base.1.8.ServiceTemporarilyUnavailable",
            "The service is temporarily unavailable.",
        )),
        Some(Fault::MalformedJson) => {
            let mut r = (
                StatusCode::OK,
                "{\"@odata.id\": \"/redfish/v1/\", \"Name\": <html>",
            )
                .into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Some(r)
        }
        _ => None,
    }
}

/// A request refused before its resource: not authenticated (the root, `$metadata`, the
/// OData document and logins are public), a token refused by a quirk, or a path made to fail
/// (quirk `fail_paths`).
fn refused(b: &BmcState, req: &Request, trimmed: &str, fault: Option<&Fault>) -> Option<Response> {
    let public = matches!(
        trimmed,
        "/redfish" | "/redfish/v1" | "/redfish/v1/$metadata" | "/redfish/v1/odata"
    ) || (trimmed == USUAL_SESSIONS && req.method() == Method::POST);
    if !public && (fault == Some(&Fault::Unauthorized) || !authenticate(b, req.headers())) {
        return Some(unauthorized());
    }
    if !public && req.headers().contains_key("X-Auth-Token") {
        let mut g = b.lock();
        if g.quirks.reject_tokens {
            return Some(unauthorized());
        }
        if g.quirks.spurious_401 > 0 {
            g.quirks.spurious_401 -= 1;
            return Some(unauthorized());
        }
    }
    let failing = b
        .lock()
        .quirks
        .fail_paths
        .iter()
        .find(|(p, _)| p == trimmed)
        .map(|(_, s)| *s);
    failing.map(|status| {
        error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "Base.1.8.InternalError",
            "The request failed due to an internal service error.",
        )
    })
}

/// The request's JSON body (`None` when empty), or the 400 a body that cannot be read or
/// parsed gets.
async fn read_body(req: Request) -> Result<Option<Value>, Response> {
    let Ok(body) = axum::body::to_bytes(req.into_body(), 1 << 20).await else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.MalformedJSON",
            "The request body could not be read.",
        ));
    };
    if body.is_empty() {
        return Ok(None);
    }
    match serde_json::from_slice(&body) {
        Ok(v) => Ok(Some(v)),
        Err(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.MalformedJSON",
            "The request body submitted was malformed JSON.",
        )),
    }
}

/// The faults that make an answer too large: any GET's body (the root's aside), the event
/// stream's first event, the `Systems` collection.
fn oversized(
    b: &BmcState,
    fault: Option<&Fault>,
    method: &Method,
    trimmed: &str,
) -> Option<Response> {
    match fault {
        Some(Fault::HugeBody { bytes }) if *method == Method::GET && trimmed != "/redfish/v1" => {
            Some(huge_body(*bytes))
        }
        Some(Fault::HugeEvent { bytes }) if trimmed == "/redfish/v1/EventService/SSE" => {
            Some(huge_event(*bytes))
        }
        Some(Fault::HugeCollection { members }) if trimmed == "/redfish/v1/Systems" => {
            let sys = system_path(b);
            Some(ok(collection(
                trimmed,
                "ComputerSystemCollection",
                "Computer System Collection",
                (0..*members).map(|i| format!("{sys}-{i}")).collect(),
            )))
        }
        _ => None,
    }
}

/// Authenticated user, if any: a live session token or matching Basic credentials.
fn authenticate(b: &BmcState, headers: &HeaderMap) -> bool {
    if let Some(token) = headers.get("X-Auth-Token").and_then(|v| v.to_str().ok()) {
        let mut g = b.lock();
        let timeout = b.spec.session_timeout;
        let now = Instant::now();
        g.sessions
            .retain(|_, s| now.duration_since(s.last_used) < timeout);
        if let Some(s) = g.sessions.values_mut().find(|s| s.token == token) {
            s.last_used = now;
            return true;
        }
        return false;
    }
    if let Some(auth) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some(encoded) = auth.strip_prefix("Basic ")
        && let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(encoded.trim())
    {
        let raw = String::from_utf8_lossy(&raw);
        if let Some((u, p)) = raw.split_once(':') {
            return u == b.spec.username && p == b.spec.password;
        }
    }
    false
}

/// Counts a request in flight until it is answered or abandoned by the client.
struct InFlightGuard(Bmc);

impl InFlightGuard {
    fn enter(b: &Bmc) -> Self {
        b.counters.in_flight.enter();
        b.fleet_in_flight.enter();
        InFlightGuard(b.clone())
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.counters.in_flight.leave();
        self.0.fleet_in_flight.leave();
    }
}

/// `head`, then at least `bytes` bytes of `x` in 64 KiB chunks, generated as they are sent.
fn padded(
    head: &'static [u8],
    bytes: u64,
) -> impl futures::Stream<Item = Result<bytes::Bytes, Infallible>> + Send + 'static {
    const CHUNK: usize = 64 << 10;
    let chunks = bytes / CHUNK as u64 + 1;
    futures::stream::once(async move { Ok(bytes::Bytes::from_static(head)) })
        .chain(futures::stream::iter(0..chunks).map(|_| Ok(bytes::Bytes::from(vec![b'x'; CHUNK]))))
}

/// A JSON document of about `bytes` bytes, streamed without `Content-Length`.
fn huge_body(bytes: u64) -> Response {
    let tail = futures::stream::once(async { Ok(bytes::Bytes::from_static(b"\"}")) });
    let body = padded(b"{\"Padding\": \"", bytes).chain(tail);
    let mut r = Body::from_stream(body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// An event stream whose first event has one `data:` line of `bytes` bytes and never ends.
fn huge_event(bytes: u64) -> Response {
    let body = padded(b"data: {\"Padding\": \"", bytes).chain(futures::stream::pending());
    let mut r = Body::from_stream(body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}
