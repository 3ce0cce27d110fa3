//! The Redfish resources of one emulated BMC, and the `/_sim/` admin endpoints.

use crate::{BmcState, CloseConnection, Fault, Inner, Session, media};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::StreamExt;
use rand::Rng;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_stream::wrappers::BroadcastStream;

type Bmc = Arc<BmcState>;

pub(crate) fn router(state: Bmc) -> Router {
    Router::new().fallback(handle).with_state(state)
}

pub(crate) fn power_state_name(g: &Inner) -> &'static str {
    match (g.power_on, g.pending) {
        (_, Some((true, _))) => "PoweringOn",
        (_, Some((false, _))) => "PoweringOff",
        (true, None) => "On",
        (false, None) => "Off",
    }
}

pub(crate) fn system_path(b: &BmcState) -> String {
    format!("/redfish/v1/Systems/{}", b.profile.system_id)
}
pub(crate) fn manager_path(b: &BmcState) -> String {
    format!("/redfish/v1/Managers/{}", b.profile.manager_id)
}
fn chassis_path(b: &BmcState) -> String {
    format!("/redfish/v1/Chassis/{}", b.profile.chassis_id)
}
fn log_service_path(b: &BmcState) -> String {
    let (kind, id) = b.profile.log;
    let owner = if kind == "Systems" {
        system_path(b)
    } else {
        manager_path(b)
    };
    format!("{owner}/LogServices/{id}")
}
pub(crate) fn log_entry_path(b: &BmcState, id: u64) -> String {
    format!("{}/Entries/{id}", log_service_path(b))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json;charset=utf-8"),
    );
    r.headers_mut()
        .insert("OData-Version", HeaderValue::from_static("4.0"));
    r
}

fn ok(body: Value) -> Response {
    json_response(StatusCode::OK, &body)
}

fn error(status: StatusCode, message_id: &str, message: &str) -> Response {
    json_response(
        status,
        &json!({
            "error": {
                "code": message_id,
                "message": message,
                "@Message.ExtendedInfo": [{
                    "@odata.type": "#Message.v1_1_1.Message",
                    "MessageId": message_id,
                    "Message": message,
                    "Severity": "Critical",
                    "MessageSeverity": "Critical",
                    "Resolution": "None."
                }]
            }
        }),
    )
}

fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "Base.1.8.ResourceMissingAtURI",
        "The resource at the URI was not found.",
    )
}

fn unauthorized() -> Response {
    let mut r = error(
        StatusCode::UNAUTHORIZED,
        "Base.1.8.NoValidSession",
        "There is no valid session established with the implementation.",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"redfish\""),
    );
    r
}

fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "Base.1.8.OperationNotAllowed",
        "The HTTP method is not allowed on this resource.",
    )
}

fn collection(path: &str, kind: &str, name: &str, members: Vec<String>) -> Value {
    json!({
        "@odata.id": path,
        "@odata.type": format!("#{kind}.{kind}"),
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members.iter().map(|m| json!({"@odata.id": m})).collect::<Vec<_>>(),
    })
}

fn status_ok() -> Value {
    json!({"State": "Enabled", "Health": "OK"})
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

async fn handle(State(b): State<Bmc>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if let Some(admin) = path.strip_prefix("/_sim/") {
        return admin_handle(&b, req.method().clone(), admin, req).await;
    }
    b.counters.requests.fetch_add(1, Ordering::Relaxed);
    let _in_flight = InFlightGuard::enter(&b);
    let path = if b.lock().quirks.sessions_elsewhere {
        if path.starts_with(USUAL_SESSIONS) {
            return not_found();
        }
        match path.strip_prefix(crate::MOVED_SESSIONS) {
            Some(rest) => format!("{USUAL_SESSIONS}{rest}"),
            None => path,
        }
    } else {
        path
    };

    let fault = b.fault();
    let mut delay = b.spec.latency;
    if let Some(Fault::Slow { delay_ms }) = fault {
        delay += Duration::from_millis(delay_ms);
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let hang = fault == Some(Fault::Timeout)
        || (b.spec.timeout_ratio > 0.0 && rand::rng().random_bool(b.spec.timeout_ratio.min(1.0)));
    if hang {
        // Never answer; the connection closes when the client gives up.
        std::future::pending::<()>().await;
    }
    match fault {
        Some(Fault::Unavailable) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "Base.1.8.ServiceTemporarilyUnavailable",
                "The service is temporarily unavailable.",
            );
        }
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
            return r;
        }
        _ => {}
    }

    let trimmed = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path.as_str()
    };
    let public = matches!(
        trimmed,
        "/redfish" | "/redfish/v1" | "/redfish/v1/$metadata" | "/redfish/v1/odata"
    ) || (trimmed == USUAL_SESSIONS && req.method() == Method::POST);
    if !public && (fault == Some(Fault::Unauthorized) || !authenticate(&b, req.headers())) {
        return unauthorized();
    }
    if !public && req.headers().contains_key("X-Auth-Token") {
        let mut g = b.lock();
        if g.quirks.reject_tokens {
            return unauthorized();
        }
        if g.quirks.spurious_401 > 0 {
            g.quirks.spurious_401 -= 1;
            return unauthorized();
        }
    }
    let failing = b
        .lock()
        .quirks
        .fail_paths
        .iter()
        .find(|(p, _)| p == trimmed)
        .map(|(_, s)| *s);
    if let Some(status) = failing {
        return error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "Base.1.8.InternalError",
            "The request failed due to an internal service error.",
        );
    }
    let query = req.uri().query().unwrap_or_default().to_owned();
    let method = req.method().clone();
    let headers = req.headers().clone();
    let close = req.extensions().get::<CloseConnection>().cloned();
    let body = match axum::body::to_bytes(req.into_body(), 1 << 20).await {
        Ok(b) => b,
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Base.1.8.MalformedJSON",
                "The request body could not be read.",
            );
        }
    };
    let body: Option<Value> = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => Some(v),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Base.1.8.MalformedJSON",
                    "The request body submitted was malformed JSON.",
                );
            }
        }
    };
    if let Some(r) = log_page(&b, &method, trimmed, &query) {
        return r;
    }
    match &fault {
        Some(Fault::HugeBody { bytes }) if method == Method::GET && trimmed != "/redfish/v1" => {
            return huge_body(*bytes);
        }
        Some(Fault::HugeEvent { bytes }) if trimmed == "/redfish/v1/EventService/SSE" => {
            return huge_event(*bytes);
        }
        Some(Fault::HugeCollection { members }) if trimmed == "/redfish/v1/Systems" => {
            let sys = system_path(&b);
            return ok(collection(
                trimmed,
                "ComputerSystemCollection",
                "Computer System Collection",
                (0..*members).map(|i| format!("{sys}-{i}")).collect(),
            ));
        }
        _ => {}
    }
    // Logins and logouts are answered: the fault is about the actions on the system.
    let changes =
        method != Method::GET && method != Method::HEAD && !trimmed.starts_with(USUAL_SESSIONS);
    let answer = route(&b, method, trimmed, &headers, body, fault.clone());
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

/// The log entries in pages (quirk `log_page_size`): `$skip` / `$top`, and a nextLink.
fn log_page(b: &Bmc, method: &Method, path: &str, query: &str) -> Option<Response> {
    let size = b.lock().quirks.log_page_size?;
    let entries_path = format!("{}/Entries", log_service_path(b));
    if *method != Method::GET || path != entries_path {
        return None;
    }
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name || k.replace("%24", "$") == name)
            .and_then(|(_, v)| v.parse::<usize>().ok())
    };
    let skip = param("$skip").unwrap_or(0);
    let top = param("$top").unwrap_or(size);
    let g = b.lock();
    let total = g.logs.len();
    let members: Vec<Value> = g
        .logs
        .iter()
        .skip(skip)
        .take(top)
        .map(|l| log_entry(b, l))
        .collect();
    drop(g);
    let mut v = json!({
        "@odata.id": entries_path,
        "@odata.type": "#LogEntryCollection.LogEntryCollection",
        "Name": "Log Entry Collection",
        "Members@odata.count": total,
        "Members": members,
    });
    if skip + top < total {
        v["Members@odata.nextLink"] =
            json!(format!("{entries_path}?$skip={}&$top={top}", skip + top));
    }
    Some(ok(v))
}

fn route(
    b: &Bmc,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: Option<Value>,
    fault: Option<Fault>,
) -> Response {
    let sys = system_path(b);
    let mgr = manager_path(b);
    let chs = chassis_path(b);
    let logsvc = log_service_path(b);
    let get = method == Method::GET || method == Method::HEAD;

    if path == "/redfish" {
        return ok(json!({"v1": "/redfish/v1/"}));
    }
    if path == "/redfish/v1" {
        return if get {
            ok(service_root(b))
        } else {
            method_not_allowed()
        };
    }
    if path == "/redfish/v1/$metadata" {
        let mut r = (StatusCode::OK, metadata()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        );
        return r;
    }
    if path == "/redfish/v1/odata" {
        return ok(odata_document());
    }
    // Sessions.
    if path == "/redfish/v1/SessionService" {
        return ok(json!({
            "@odata.id": "/redfish/v1/SessionService",
            "@odata.type": "#SessionService.v1_1_8.SessionService",
            "Id": "SessionService",
            "Name": "Session Service",
            "ServiceEnabled": true,
            "SessionTimeout": b.spec.session_timeout.as_secs().clamp(30, 86400),
            "Status": status_ok(),
            "Sessions": {"@odata.id": sessions_uri(b)},
        }));
    }
    if path == USUAL_SESSIONS {
        return match method {
            Method::POST => create_session(b, body, fault),
            Method::GET | Method::HEAD => {
                let uri = sessions_uri(b);
                let ids: Vec<String> = b
                    .lock()
                    .sessions
                    .keys()
                    .map(|id| format!("{uri}/{id}"))
                    .collect();
                ok(collection(
                    uri,
                    "SessionCollection",
                    "Session Collection",
                    ids,
                ))
            }
            _ => method_not_allowed(),
        };
    }
    if let Some(id) = path
        .strip_prefix(USUAL_SESSIONS)
        .and_then(|rest| rest.strip_prefix('/'))
    {
        let Ok(id) = id.parse::<u64>() else {
            return not_found();
        };
        let mut g = b.lock();
        let Some(s) = g.sessions.get(&id).cloned() else {
            return not_found();
        };
        return match method {
            Method::DELETE => {
                g.sessions.remove(&id);
                b.counters.sessions_deleted.fetch_add(1, Ordering::Relaxed);
                StatusCode::NO_CONTENT.into_response()
            }
            Method::GET | Method::HEAD => ok(json!({
                "@odata.id": path,
                "@odata.type": "#Session.v1_6_0.Session",
                "Id": id.to_string(),
                "Name": "User Session",
                "UserName": s.user,
            })),
            _ => method_not_allowed(),
        };
    }
    // Systems.
    if path == "/redfish/v1/Systems" {
        return ok(collection(
            path,
            "ComputerSystemCollection",
            "Computer System Collection",
            vec![sys.clone()],
        ));
    }
    if path == sys {
        return match method {
            Method::GET | Method::HEAD => {
                let (v, etag) = system(b);
                let mut r = ok(v);
                if let Ok(h) = HeaderValue::from_str(&etag) {
                    r.headers_mut().insert(header::ETAG, h);
                }
                r
            }
            Method::PATCH => patch_system(b, headers, body),
            _ => method_not_allowed(),
        };
    }
    if path == format!("{sys}/Actions/ComputerSystem.Reset") {
        return if method == Method::POST {
            reset(b, body)
        } else {
            method_not_allowed()
        };
    }
    if let Some(r) = media_route(b, &method, path, body.as_ref()) {
        return r;
    }
    if !get {
        return method_not_allowed();
    }
    if let Some(r) = system_parts(b, &sys, path) {
        return r;
    }
    // Log service (under the system or the manager, per vendor).
    if path
        == format!(
            "{}/LogServices",
            if b.profile.log.0 == "Systems" {
                &sys
            } else {
                &mgr
            }
        )
    {
        return ok(collection(
            path,
            "LogServiceCollection",
            "Log Service Collection",
            vec![logsvc.clone()],
        ));
    }
    if (b.profile.log.0 == "Systems" && path == format!("{mgr}/LogServices"))
        || (b.profile.log.0 == "Managers" && path == format!("{sys}/LogServices"))
    {
        return ok(collection(
            path,
            "LogServiceCollection",
            "Log Service Collection",
            vec![],
        ));
    }
    if path == logsvc {
        let n = b.lock().logs.len();
        return ok(json!({
            "@odata.id": logsvc,
            "@odata.type": "#LogService.v1_4_0.LogService",
            "Id": b.profile.log.1,
            "Name": "System Event Log",
            "ServiceEnabled": true,
            "MaxNumberOfRecords": 1024,
            "OverWritePolicy": "WrapsWhenFull",
            "LogEntryType": "Event",
            "DateTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "Status": status_ok(),
            "Description": format!("{n} entries"),
            "Entries": {"@odata.id": format!("{logsvc}/Entries")},
        }));
    }
    if path == format!("{logsvc}/Entries") {
        let entries: Vec<Value> = b.lock().logs.iter().map(|l| log_entry(b, l)).collect();
        return ok(json!({
            "@odata.id": path,
            "@odata.type": "#LogEntryCollection.LogEntryCollection",
            "Name": "Log Entry Collection",
            "Members@odata.count": entries.len(),
            "Members": entries,
        }));
    }
    if let Some(id) = path.strip_prefix(&format!("{logsvc}/Entries/")) {
        let g = b.lock();
        return match id
            .parse::<u64>()
            .ok()
            .and_then(|id| g.logs.iter().find(|l| l.id == id))
        {
            Some(l) => ok(log_entry(b, l)),
            None => not_found(),
        };
    }
    // Chassis and managers.
    if path == "/redfish/v1/Chassis" {
        return ok(collection(
            path,
            "ChassisCollection",
            "Chassis Collection",
            vec![chs.clone()],
        ));
    }
    if path == chs {
        return ok(chassis(b));
    }
    if path == format!("{chs}/Thermal") {
        return ok(thermal(b));
    }
    if path == "/redfish/v1/Managers" {
        return ok(collection(
            path,
            "ManagerCollection",
            "Manager Collection",
            vec![mgr.clone()],
        ));
    }
    if path == mgr {
        return ok(manager(b));
    }
    // Events.
    if path == "/redfish/v1/EventService" {
        return ok(json!({
            "@odata.id": "/redfish/v1/EventService",
            "@odata.type": "#EventService.v1_10_0.EventService",
            "Id": "EventService",
            "Name": "Event Service",
            "ServiceEnabled": true,
            "DeliveryRetryAttempts": 3,
            "DeliveryRetryIntervalSeconds": 30,
            "ServerSentEventUri": "/redfish/v1/EventService/SSE",
            "Status": status_ok(),
            "Subscriptions": {"@odata.id": "/redfish/v1/EventService/Subscriptions"},
        }));
    }
    if path == "/redfish/v1/EventService/Subscriptions" {
        return ok(collection(
            path,
            "EventDestinationCollection",
            "Event Subscriptions",
            vec![],
        ));
    }
    if path == "/redfish/v1/EventService/SSE" {
        return sse(b);
    }
    not_found()
}

/// The virtual media collection, its devices and their actions (`None`: another path).
fn media_route(b: &Bmc, method: &Method, path: &str, body: Option<&Value>) -> Option<Response> {
    let coll = media::collection_path(b);
    let rest = path.strip_prefix(coll.as_str())?;
    let get = *method == Method::GET || *method == Method::HEAD;
    if rest.is_empty() {
        if !get {
            return Some(method_not_allowed());
        }
        let members = b
            .profile
            .media
            .devices
            .iter()
            .map(|(id, _)| format!("{coll}/{id}"))
            .collect();
        return Some(ok(collection(
            &coll,
            "VirtualMediaCollection",
            "Virtual Media Services",
            members,
        )));
    }
    let rest = rest.strip_prefix('/')?;
    let (id, action) = match rest.split_once("/Actions/") {
        Some((id, action)) => (id, Some(action)),
        None => (rest, None),
    };
    let index = b.profile.media.devices.iter().position(|(d, _)| *d == id)?;
    let empty = json!({});
    let body = body.unwrap_or(&empty);
    let outcome = match (action, method.clone()) {
        (None, Method::GET | Method::HEAD) => return Some(ok(media::device(b, index))),
        (None, Method::PATCH) => media::patch(b, index, body),
        (Some(_), m) if m != Method::POST => return Some(method_not_allowed()),
        (Some("VirtualMedia.InsertMedia"), _)
            if b.profile.media.insert != media::MediaInsert::Patch =>
        {
            media::insert(b, index, body)
        }
        (Some("VirtualMedia.EjectMedia"), _)
            if b.profile.media.insert != media::MediaInsert::Patch =>
        {
            media::eject(b, index)
        }
        (Some(_), _) => return Some(not_found()),
        (None, _) => return Some(method_not_allowed()),
    };
    Some(match outcome {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err((status, id, message)) => error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            id,
            message,
        ),
    })
}

fn sse(b: &Bmc) -> Response {
    let rx = b.events.subscribe();
    let stream = BroadcastStream::new(rx).filter_map(|m| async move {
        m.ok()
            .map(|data| Ok::<Event, Infallible>(Event::default().data(data)))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn create_session(b: &Bmc, body: Option<Value>, fault: Option<Fault>) -> Response {
    let user = body
        .as_ref()
        .and_then(|v| v.get("UserName"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let pass = body
        .as_ref()
        .and_then(|v| v.get("Password"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if fault == Some(Fault::Unauthorized) || user != b.spec.username || pass != b.spec.password {
        b.counters.logins_refused.fetch_add(1, Ordering::Relaxed);
        if b.lock().quirks.echo_login_body {
            let quoted = body.as_ref().map(Value::to_string).unwrap_or_default();
            return error(
                StatusCode::BAD_REQUEST,
                "Base.1.8.PropertyValueIncorrect",
                &format!("The login request {quoted} was not accepted."),
            );
        }
        return unauthorized();
    }
    let mut g = b.lock();
    let now = Instant::now();
    let timeout = b.spec.session_timeout;
    g.sessions
        .retain(|_, s| now.duration_since(s.last_used) < timeout);
    if fault == Some(Fault::SessionFull) || g.sessions.len() >= b.spec.max_sessions {
        drop(g);
        b.counters.logins_refused.fetch_add(1, Ordering::Relaxed);
        return if b.profile.dell_session_limit_error {
            error(
                StatusCode::BAD_REQUEST,
                "IDRAC.2.9.RAC0218",
                "The maximum number of user sessions is reached.",
            )
        } else {
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "Base.1.8.SessionLimitExceeded",
                "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
            )
        };
    }
    let id = g.next_session;
    g.next_session += 1;
    let token: String = {
        let mut rng = rand::rng();
        (0..32)
            .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
            .collect()
    };
    g.sessions.insert(
        id,
        Session {
            token: token.clone(),
            user: user.clone(),
            last_used: now,
        },
    );
    let live = g.sessions.len() as u64;
    drop(g);
    b.counters.sessions_created.fetch_add(1, Ordering::Relaxed);
    b.counters.peak_sessions.fetch_max(live, Ordering::Relaxed);
    let path = format!("{}/{id}", sessions_uri(b));
    let location = if b.profile.absolute_session_location {
        // iLO answers with an absolute URL; the host part is whatever the client used.
        format!("https://bmc.invalid{path}")
    } else {
        path.clone()
    };
    let mut r = json_response(
        StatusCode::CREATED,
        &json!({
            "@odata.id": path,
            "@odata.type": "#Session.v1_6_0.Session",
            "Id": id.to_string(),
            "Name": "User Session",
            "UserName": user,
        }),
    );
    if let (Ok(t), Ok(l)) = (
        HeaderValue::from_str(&token),
        HeaderValue::from_str(&location),
    ) {
        r.headers_mut().insert("X-Auth-Token", t);
        r.headers_mut().insert(header::LOCATION, l);
    }
    r
}

const USUAL_SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

/// The session collection's URI as this BMC shows it.
fn sessions_uri(b: &BmcState) -> &'static str {
    if b.lock().quirks.sessions_elsewhere {
        crate::MOVED_SESSIONS
    } else {
        USUAL_SESSIONS
    }
}

fn service_root(b: &BmcState) -> Value {
    let mut root = json!({
        "@odata.id": "/redfish/v1/",
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": "1.17.0",
        "UUID": b.uuid(),
        "Vendor": b.profile.vendor_name,
        "Product": b.profile.bmc_model,
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
        "Managers": {"@odata.id": "/redfish/v1/Managers"},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "EventService": {"@odata.id": "/redfish/v1/EventService"},
        "Links": {"Sessions": {"@odata.id": sessions_uri(b)}},
    });
    if b.lock().quirks.log_page_size.is_some() {
        root["ProtocolFeaturesSupported"] = json!({"TopSkipQuery": true});
    }
    root
}

fn system(b: &BmcState) -> (Value, String) {
    let p = &b.profile;
    let sys = system_path(b);
    let g = b.lock();
    let etag = format!("W/\"{}\"", g.etag);
    let mut v = json!({
        "@odata.id": sys,
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "@odata.etag": etag,
        "Id": p.system_id,
        "Name": "System",
        "SystemType": "Physical",
        "Manufacturer": p.manufacturer,
        "Model": p.model,
        "SKU": format!("{}-{:05}", p.sku_prefix, b.index % 100_000),
        "SerialNumber": b.serial_number(),
        "UUID": b.uuid(),
        "BiosVersion": p.bios_version,
        "PowerState": power_state_name(&g),
        "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        "Boot": {
            "BootSourceOverrideTarget": g.boot.target,
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd", "Cd", "BiosSetup", "Usb"],
            "BootSourceOverrideEnabled": g.boot.enabled,
            "BootSourceOverrideMode": g.boot.mode,
        },
        "ProcessorSummary": {
            "Count": p.sockets,
            "Model": p.cpu_model,
            "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        },
        "MemorySummary": {
            "TotalSystemMemoryGiB": (p.dimm_mib * p.dimms as u64) as f64 / 1024.0,
            "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        },
        "Processors": {"@odata.id": format!("{sys}/Processors")},
        "Memory": {"@odata.id": format!("{sys}/Memory")},
        "EthernetInterfaces": {"@odata.id": format!("{sys}/EthernetInterfaces")},
        "Storage": {"@odata.id": format!("{sys}/Storage")},
        "LogServices": {"@odata.id": format!("{sys}/LogServices")},
        "Links": {
            "Chassis": [{"@odata.id": chassis_path(b)}],
            "ManagedBy": [{"@odata.id": manager_path(b)}],
        },
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": format!("{sys}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": p.reset_types,
            }
        },
    });
    if p.media.owner == "Systems" {
        v["VirtualMedia"] = json!({"@odata.id": media::collection_path(b)});
    }
    (v, etag)
}

fn cpu_id(b: &BmcState, i: u32) -> String {
    match b.profile.vendor {
        crate::Vendor::Dell => format!("CPU.Socket.{}", i + 1),
        _ => format!("{}", i + 1),
    }
}
fn dimm_id(b: &BmcState, i: u32) -> String {
    match b.profile.vendor {
        crate::Vendor::Dell => format!("DIMM.Socket.A{}", i + 1),
        _ => format!("DIMM{}", i + 1),
    }
}
fn nic_id(b: &BmcState, i: u32) -> String {
    match b.profile.vendor {
        crate::Vendor::Dell => format!("NIC.Integrated.1-{}-1", i + 1),
        _ => format!("{}", i + 1),
    }
}
fn storage_id(b: &BmcState) -> &'static str {
    match b.profile.vendor {
        crate::Vendor::Dell => "RAID.Integrated.1-1",
        _ => "1",
    }
}
fn drive_id(i: u32) -> String {
    format!("Disk.Bay.{i}")
}

fn system_parts(b: &BmcState, sys: &str, path: &str) -> Option<Response> {
    let p = &b.profile;
    let rest = path.strip_prefix(sys)?.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    let storage = format!("{sys}/Storage/{}", storage_id(b));
    Some(match parts.as_slice() {
        ["Processors"] => ok(collection(
            path,
            "ProcessorCollection",
            "Processors Collection",
            (0..p.sockets)
                .map(|i| format!("{path}/{}", cpu_id(b, i)))
                .collect(),
        )),
        ["Processors", id] => match (0..p.sockets).find(|i| cpu_id(b, *i) == *id) {
            Some(_) => ok(json!({
                "@odata.id": path,
                "@odata.type": "#Processor.v1_18_0.Processor",
                "Id": id,
                "Name": format!("Processor {id}"),
                "ProcessorType": "CPU",
                "ProcessorArchitecture": "x86",
                "InstructionSet": "x86-64",
                "Manufacturer": p.cpu_manufacturer,
                "Model": p.cpu_model,
                "MaxSpeedMHz": 3400,
                "TotalCores": p.cores,
                "TotalThreads": p.cores * 2,
                "Status": status_ok(),
            })),
            None => not_found(),
        },
        ["Memory"] => ok(collection(
            path,
            "MemoryCollection",
            "Memory Collection",
            (0..p.dimms)
                .map(|i| format!("{path}/{}", dimm_id(b, i)))
                .collect(),
        )),
        ["Memory", id] => match (0..p.dimms).find(|i| dimm_id(b, *i) == *id) {
            Some(i) => ok(json!({
                "@odata.id": path,
                "@odata.type": "#Memory.v1_17_0.Memory",
                "Id": id,
                "Name": format!("DIMM {id}"),
                "MemoryDeviceType": "DDR4",
                "CapacityMiB": p.dimm_mib,
                "OperatingSpeedMhz": 3200,
                "Manufacturer": "Micron Technology",
                "PartNumber": "36ASF4G72PZ-3G2E1",
                "SerialNumber": format!("{:08X}", b.index as u64 * 64 + i as u64),
                "Status": status_ok(),
            })),
            None => not_found(),
        },
        ["EthernetInterfaces"] => ok(collection(
            path,
            "EthernetInterfaceCollection",
            "Ethernet Interface Collection",
            (0..p.nics)
                .map(|i| format!("{path}/{}", nic_id(b, i)))
                .collect(),
        )),
        ["EthernetInterfaces", id] => match (0..p.nics).find(|i| nic_id(b, *i) == *id) {
            Some(i) => ok(json!({
                "@odata.id": path,
                "@odata.type": "#EthernetInterface.v1_9_0.EthernetInterface",
                "Id": id,
                "Name": format!("NIC {id}"),
                "MACAddress": b.mac(i).to_uppercase(),
                "PermanentMACAddress": b.mac(i).to_uppercase(),
                "SpeedMbps": 25000,
                "LinkStatus": if i == 0 { "LinkUp" } else { "LinkDown" },
                "Status": status_ok(),
            })),
            None => not_found(),
        },
        ["Storage"] => ok(collection(
            path,
            "StorageCollection",
            "Storage Collection",
            vec![storage.clone()],
        )),
        ["Storage", id] if *id == storage_id(b) => ok(json!({
            "@odata.id": path,
            "@odata.type": "#Storage.v1_13_0.Storage",
            "Id": id,
            "Name": "Storage Controller",
            "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
            "Drives@odata.count": p.drives,
            "Drives": (0..p.drives).map(|i| json!({"@odata.id": format!("{storage}/Drives/{}", drive_id(i))})).collect::<Vec<_>>(),
        })),
        ["Storage", id, "Drives", d] if *id == storage_id(b) => {
            match (0..p.drives).find(|i| drive_id(*i) == *d) {
                Some(i) => ok(json!({
                    "@odata.id": path,
                    "@odata.type": "#Drive.v1_16_0.Drive",
                    "Id": d,
                    "Name": format!("Drive {i}"),
                    "Model": "MZ7L3960HCJR-00A07",
                    "Manufacturer": "Samsung",
                    "SerialNumber": format!("S6KNNE0{:06}{}", b.index, i),
                    "CapacityBytes": 960_197_124_096u64,
                    "MediaType": "SSD",
                    "Protocol": "SATA",
                    "Status": status_ok(),
                })),
                None => not_found(),
            }
        }
        _ => return None,
    })
}

fn log_entry(b: &BmcState, l: &crate::LogRecord) -> Value {
    json!({
        "@odata.id": log_entry_path(b, l.id),
        "@odata.type": "#LogEntry.v1_15_0.LogEntry",
        "Id": l.id.to_string(),
        "Name": "Log Entry",
        "EntryType": "Event",
        "Created": l.created,
        "Severity": l.severity,
        "Message": l.message,
        "MessageId": l.message_id,
    })
}

fn chassis(b: &BmcState) -> Value {
    let p = &b.profile;
    json!({
        "@odata.id": chassis_path(b),
        "@odata.type": "#Chassis.v1_22_0.Chassis",
        "Id": p.chassis_id,
        "Name": "Computer System Chassis",
        "ChassisType": "RackMount",
        "Manufacturer": p.manufacturer,
        "Model": p.model,
        "SerialNumber": b.serial_number(),
        "PowerState": power_state_name(&b.lock()),
        "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        "Thermal": {"@odata.id": format!("{}/Thermal", chassis_path(b))},
        "Links": {
            "ComputerSystems": [{"@odata.id": system_path(b)}],
            "ManagedBy": [{"@odata.id": manager_path(b)}],
        },
    })
}

/// The chassis' fans (health as set by [`BmcState::set_fan_health`]) and two temperatures.
fn thermal(b: &BmcState) -> Value {
    let path = format!("{}/Thermal", chassis_path(b));
    let fans: Vec<Value> = b
        .lock()
        .fans
        .iter()
        .enumerate()
        .map(|(i, (name, health))| {
            json!({
                "@odata.id": format!("{path}#/Fans/{i}"),
                "MemberId": i.to_string(),
                "Name": name,
                "Reading": if health == "Critical" { 0 } else { 5600 },
                "ReadingUnits": "RPM",
                "Status": {"State": "Enabled", "Health": health},
            })
        })
        .collect();
    json!({
        "@odata.id": path,
        "@odata.type": "#Thermal.v1_7_0.Thermal",
        "Id": "Thermal",
        "Name": "Thermal",
        "Fans": fans,
        "Temperatures": [
            {"@odata.id": format!("{path}#/Temperatures/0"), "MemberId": "0",
             "Name": "Inlet Temp", "ReadingCelsius": 24,
             "Status": {"State": "Enabled", "Health": "OK"}},
            {"@odata.id": format!("{path}#/Temperatures/1"), "MemberId": "1",
             "Name": "CPU1 Temp", "ReadingCelsius": 47.5,
             "Status": {"State": "Enabled", "Health": "OK"}},
        ],
    })
}

fn manager(b: &BmcState) -> Value {
    let p = &b.profile;
    let mgr = manager_path(b);
    let mut v = json!({
        "@odata.id": mgr,
        "@odata.type": "#Manager.v1_17_0.Manager",
        "Id": p.manager_id,
        "Name": "Manager",
        "ManagerType": "BMC",
        "Model": p.bmc_model,
        "FirmwareVersion": p.bmc_firmware,
        "UUID": b.uuid(),
        "PowerState": "On",
        "Status": status_ok(),
        "LogServices": {"@odata.id": format!("{mgr}/LogServices")},
        "Links": {
            "ManagerForServers": [{"@odata.id": system_path(b)}],
            "ManagerForChassis": [{"@odata.id": chassis_path(b)}],
        },
    });
    if p.media.owner == "Managers" {
        v["VirtualMedia"] = json!({"@odata.id": media::collection_path(b)});
    }
    v
}

fn patch_system(b: &Bmc, headers: &HeaderMap, body: Option<Value>) -> Response {
    let if_match = headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok());
    let mut g = b.lock();
    let etag = format!("W/\"{}\"", g.etag);
    match if_match {
        None if b.profile.requires_if_match => {
            return error(
                StatusCode::PRECONDITION_REQUIRED,
                "Base.1.8.PreconditionRequired",
                "A precondition header or annotation is required to change this resource.",
            );
        }
        Some(m)
            if m != "*"
                && (m != etag || g.quirks.strong_etag_compare)
                && !(g.quirks.strong_etag_compare && m == etag.trim_start_matches("W/")) =>
        {
            return error(
                StatusCode::PRECONDITION_FAILED,
                "Base.1.8.PreconditionFailed",
                "The ETag supplied did not match the ETag required to change this resource.",
            );
        }
        _ => {}
    }
    let Some(boot) = body.as_ref().and_then(|v| v.get("Boot")) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyNotWritable",
            "Only Boot properties can be changed.",
        );
    };
    let target = boot.get("BootSourceOverrideTarget").and_then(Value::as_str);
    let enabled = boot
        .get("BootSourceOverrideEnabled")
        .and_then(Value::as_str);
    let mode = boot.get("BootSourceOverrideMode").and_then(Value::as_str);
    if let Some(t) = target
        && !["None", "Pxe", "Hdd", "Cd", "BiosSetup", "Usb"].contains(&t)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyValueNotInList",
            "The value for BootSourceOverrideTarget is not in the list of acceptable values.",
        );
    }
    if let Some(e) = enabled
        && !["Once", "Continuous", "Disabled"].contains(&e)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyValueNotInList",
            "The value for BootSourceOverrideEnabled is not in the list of acceptable values.",
        );
    }
    if let Some(m) = mode
        && !["UEFI", "Legacy"].contains(&m)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyValueNotInList",
            "The value for BootSourceOverrideMode is not in the list of acceptable values.",
        );
    }
    if let Some(t) = target {
        g.boot.target = t.into();
    }
    if let Some(e) = enabled {
        g.boot.enabled = e.into();
    }
    match mode {
        Some(m) => g.boot.mode = m.into(),
        // The Supermicro behaviour: an override that does not restate the mode sets Legacy.
        None if b.profile.boot_mode_reset_to_legacy && target.is_some() => {
            g.boot.mode = "Legacy".into()
        }
        None => {}
    }
    g.etag += 1;
    StatusCode::NO_CONTENT.into_response()
}

fn reset(b: &Bmc, body: Option<Value>) -> Response {
    let Some(kind) = body
        .as_ref()
        .and_then(|v| v.get("ResetType"))
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterMissing",
            "The action requires the parameter ResetType.",
        );
    };
    if !b.profile.reset_types.contains(&kind.as_str()) {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterValueNotInList",
            "The value for the parameter ResetType is not in the list of acceptable values.",
        );
    }
    b.lock().reset_log.push(kind.clone());
    // Decide on where the system is heading: a ForceOff during a cycle still powers off.
    let on = b.lock().final_on;
    match kind.as_str() {
        "On" | "ForceOn" if !on => {
            transition(b, &[true]);
        }
        "ForceOff" | "GracefulShutdown" if on => {
            transition(b, &[false]);
        }
        "PushPowerButton" => transition(b, &[!on]),
        "ForceRestart" | "GracefulRestart" | "PowerCycle" => {
            if on {
                transition(b, &[false, true]);
            } else if kind == "PowerCycle" {
                transition(b, &[true]);
            } else {
                return error(
                    StatusCode::CONFLICT,
                    "Base.1.8.ResourceInStandby",
                    "The request could not be performed because the resource is in standby.",
                );
            }
            b.lock().resets += 1;
        }
        "Nmi" => {}
        _ => {}
    }
    StatusCode::NO_CONTENT.into_response()
}

/// Moves the power state through `steps`, each landing after the profile's delay.
fn transition(b: &Bmc, steps: &[bool]) {
    let generation = {
        let mut g = b.lock();
        g.generation += 1;
        g.pending = steps.first().map(|t| (*t, g.generation));
        if let Some(last) = steps.last() {
            g.final_on = *last;
        }
        g.generation
    };
    let b2 = b.clone();
    let steps = steps.to_vec();
    let delay = b.spec.power_delay;
    let apply = move |b: &BmcState, target: bool, last: bool| {
        let mut g = b.lock();
        if g.generation != generation {
            return false;
        }
        g.power_on = target;
        g.pending = if last {
            None
        } else {
            Some((!target, generation))
        };
        if target {
            // A one-time override is consumed by the boot it applied to.
            if g.boot.enabled == "Once" {
                g.boot.enabled = "Disabled".into();
                g.boot.target = "None".into();
                g.etag += 1;
            }
        }
        drop(g);
        b.emit(
            "StatusChange",
            "ResourceEvent.1.0.ResourceStatusChanged",
            if target {
                "The system powered on."
            } else {
                "The system powered off."
            },
            &system_path(b),
        );
        true
    };
    if delay.is_zero() {
        let n = steps.len();
        for (i, t) in steps.iter().enumerate() {
            apply(&b2, *t, i + 1 == n);
        }
        return;
    }
    tokio::spawn(async move {
        let n = steps.len();
        for (i, t) in steps.iter().enumerate() {
            tokio::time::sleep(delay).await;
            if !apply(&b2, *t, i + 1 == n) {
                return;
            }
        }
    });
}

async fn admin_handle(b: &Bmc, method: Method, path: &str, req: Request) -> Response {
    let body = axum::body::to_bytes(req.into_body(), 1 << 16)
        .await
        .unwrap_or_default();
    match (method, path.trim_end_matches('/')) {
        (Method::GET, "state") => ok(serde_json::to_value(b.snapshot()).unwrap_or(Value::Null)),
        (Method::PUT, "fault") => match serde_json::from_slice::<Fault>(&body) {
            Ok(f) => {
                b.set_fault(Some(f));
                StatusCode::NO_CONTENT.into_response()
            }
            Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        },
        (Method::DELETE, "fault") => {
            b.set_fault(None);
            StatusCode::NO_CONTENT.into_response()
        }
        (Method::POST, "expire-sessions") => {
            b.expire_sessions();
            StatusCode::NO_CONTENT.into_response()
        }
        (Method::POST, "log") => {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let id = b.add_log(
                v.get("severity")
                    .and_then(Value::as_str)
                    .unwrap_or("Warning"),
                v.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("Test event"),
            );
            ok(json!({"id": id}))
        }
        _ => (StatusCode::NOT_FOUND, Body::from("unknown admin endpoint")).into_response(),
    }
}

fn odata_document() -> Value {
    let sets = [
        ("Systems", "/redfish/v1/Systems"),
        ("Chassis", "/redfish/v1/Chassis"),
        ("Managers", "/redfish/v1/Managers"),
        ("SessionService", "/redfish/v1/SessionService"),
        ("EventService", "/redfish/v1/EventService"),
    ];
    json!({
        "@odata.context": "/redfish/v1/$metadata",
        "value": sets.iter().map(|(n, u)| json!({"name": n, "kind": "Singleton", "url": u})).collect::<Vec<_>>(),
    })
}

/// The schemas this service uses, by reference (the CSDL files themselves are the DMTF's).
const SCHEMAS: &[(&str, &[&str])] = &[
    ("ServiceRoot", &["ServiceRoot", "ServiceRoot.v1_15_0"]),
    ("ComputerSystemCollection", &["ComputerSystemCollection"]),
    (
        "ComputerSystem",
        &["ComputerSystem", "ComputerSystem.v1_20_0"],
    ),
    ("ProcessorCollection", &["ProcessorCollection"]),
    ("Processor", &["Processor", "Processor.v1_18_0"]),
    ("MemoryCollection", &["MemoryCollection"]),
    ("Memory", &["Memory", "Memory.v1_17_0"]),
    (
        "EthernetInterfaceCollection",
        &["EthernetInterfaceCollection"],
    ),
    (
        "EthernetInterface",
        &["EthernetInterface", "EthernetInterface.v1_9_0"],
    ),
    ("StorageCollection", &["StorageCollection"]),
    ("Storage", &["Storage", "Storage.v1_13_0"]),
    ("Drive", &["Drive", "Drive.v1_16_0"]),
    ("LogServiceCollection", &["LogServiceCollection"]),
    ("LogService", &["LogService", "LogService.v1_4_0"]),
    ("LogEntryCollection", &["LogEntryCollection"]),
    ("LogEntry", &["LogEntry", "LogEntry.v1_15_0"]),
    ("ChassisCollection", &["ChassisCollection"]),
    ("Chassis", &["Chassis", "Chassis.v1_22_0"]),
    ("Thermal", &["Thermal", "Thermal.v1_7_0"]),
    ("ManagerCollection", &["ManagerCollection"]),
    ("Manager", &["Manager", "Manager.v1_17_0"]),
    (
        "SessionService",
        &["SessionService", "SessionService.v1_1_8"],
    ),
    ("SessionCollection", &["SessionCollection"]),
    ("Session", &["Session", "Session.v1_6_0"]),
    ("EventService", &["EventService", "EventService.v1_10_0"]),
    (
        "EventDestinationCollection",
        &["EventDestinationCollection"],
    ),
    ("Event", &["Event", "Event.v1_7_0"]),
    ("Message", &["Message", "Message.v1_1_1"]),
    ("Resource", &["Resource", "Resource.v1_14_0"]),
];

fn metadata() -> String {
    let mut x = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<edmx:Edmx xmlns:edmx=\"http://docs.oasis-open.org/odata/ns/edmx\" Version=\"4.0\">\n",
    );
    for (file, namespaces) in SCHEMAS {
        x.push_str(&format!(
            "  <edmx:Reference Uri=\"http://redfish.dmtf.org/schemas/v1/{file}_v1.xml\">\n"
        ));
        for ns in *namespaces {
            x.push_str(&format!("    <edmx:Include Namespace=\"{ns}\"/>\n"));
        }
        x.push_str("  </edmx:Reference>\n");
    }
    x.push_str(
        "  <edmx:DataServices>\n    <Schema xmlns=\"http://docs.oasis-open.org/odata/ns/edm\" Namespace=\"Service\">\n      <EntityContainer Name=\"Service\" Extends=\"ServiceRoot.v1_15_0.ServiceContainer\"/>\n    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n",
    );
    x
}
