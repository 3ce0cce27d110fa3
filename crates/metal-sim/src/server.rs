//! HTTP side of the emulator: the API routes under `/metal/v1`, the admin routes under `/_sim`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::catalog;
use crate::config::{EndpointFault, Faults, ProjectConfig, SimConfig, TokenConfig};
use crate::world::{self, ApiError, BootRecord, PortOp, Reply, World, parse};

/// Base path of the API, as on the real service.
pub const API_PREFIX: &str = "/metal/v1";

/// One API operation: the spec's operationId, method and path template.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub id: &'static str,
    pub method: &'static str,
    pub path: &'static str,
}

macro_rules! op {
    ($name:ident, $id:literal, $method:literal, $path:literal) => {
        pub const $name: Op = Op {
            id: $id,
            method: $method,
            path: $path,
        };
    };
}

pub mod ops {
    use super::Op;
    op!(
        FIND_PROJECT_DEVICES,
        "findProjectDevices",
        "GET",
        "/projects/{id}/devices"
    );
    op!(
        CREATE_DEVICE,
        "createDevice",
        "POST",
        "/projects/{id}/devices"
    );
    op!(FIND_DEVICE, "findDeviceById", "GET", "/devices/{id}");
    op!(UPDATE_DEVICE, "updateDevice", "PUT", "/devices/{id}");
    op!(DELETE_DEVICE, "deleteDevice", "DELETE", "/devices/{id}");
    op!(
        PERFORM_ACTION,
        "performAction",
        "POST",
        "/devices/{id}/actions"
    );
    op!(FIND_PORT, "findPortById", "GET", "/ports/{id}");
    op!(BOND_PORT, "bondPort", "POST", "/ports/{id}/bond");
    op!(DISBOND_PORT, "disbondPort", "POST", "/ports/{id}/disbond");
    op!(
        CONVERT_L2,
        "convertLayer2",
        "POST",
        "/ports/{id}/convert/layer-2"
    );
    op!(
        CONVERT_L3,
        "convertLayer3",
        "POST",
        "/ports/{id}/convert/layer-3"
    );
    op!(ASSIGN_PORT, "assignPort", "POST", "/ports/{id}/assign");
    op!(
        UNASSIGN_PORT,
        "unassignPort",
        "POST",
        "/ports/{id}/unassign"
    );
    op!(
        VLAN_BATCH,
        "createPortVlanAssignmentBatch",
        "POST",
        "/ports/{id}/vlan-assignments/batches"
    );
    op!(
        FIND_VLANS,
        "findVirtualNetworks",
        "GET",
        "/projects/{id}/virtual-networks"
    );
    op!(
        CREATE_VLAN,
        "createVirtualNetwork",
        "POST",
        "/projects/{id}/virtual-networks"
    );
    op!(FIND_PLANS, "findPlans", "GET", "/plans");
    op!(FIND_METROS, "findMetros", "GET", "/locations/metros");
    op!(
        FIND_CAPACITY,
        "findCapacityForMetro",
        "GET",
        "/capacity/metros"
    );
}

/// One request and its answer, kept when traffic recording is on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Exchange {
    pub operation: String,
    pub method: String,
    /// The spec's path template, e.g. `/devices/{id}`.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub request: Option<Value>,
    pub status: u16,
    pub response: Option<Value>,
}

/// Calls per endpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EndpointCounters {
    pub requests: u64,
    /// Answers by HTTP status.
    pub responses: BTreeMap<u16, u64>,
    /// Injected errors and 429s.
    pub faults: u64,
}

/// Counters of the whole emulator (`GET /_sim/metrics`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Metrics {
    pub total_requests: u64,
    pub endpoints: BTreeMap<String, EndpointCounters>,
}

impl Metrics {
    pub fn requests(&self, op: &str) -> u64 {
        self.endpoints.get(op).map(|e| e.requests).unwrap_or(0)
    }
    pub fn faults(&self) -> u64 {
        self.endpoints.values().map(|e| e.faults).sum()
    }
}

struct Inner {
    world: Mutex<World>,
    tokens: Vec<TokenConfig>,
    projects: Vec<ProjectConfig>,
    rng: Mutex<StdRng>,
    metrics: Mutex<Metrics>,
    traffic: Mutex<Vec<Exchange>>,
    record: AtomicBool,
    http: reqwest::Client,
}

/// A handle on the emulator's state, cheap to clone.
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Caller<'a> {
    token: &'a TokenConfig,
    projects: &'a [ProjectConfig],
}

impl Caller<'_> {
    fn project(&self, id: &str, write: bool) -> Result<(), ApiError> {
        if !self.projects.iter().any(|p| p.id == id) {
            return Err(ApiError::not_found());
        }
        if !self.token.projects.iter().any(|p| p == id) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "You are not authorized to view this project",
            ));
        }
        if write && self.token.read_only {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "This API key is read-only",
            ));
        }
        Ok(())
    }
}

impl Sim {
    pub fn new(cfg: SimConfig) -> Self {
        let world =
            World::new(cfg.timings, cfg.faults).with_reservations(cfg.hardware_reservations);
        Sim {
            inner: Arc::new(Inner {
                world: Mutex::new(world),
                tokens: cfg.tokens,
                projects: cfg.projects,
                rng: Mutex::new(StdRng::seed_from_u64(cfg.seed)),
                metrics: Mutex::new(Metrics::default()),
                traffic: Mutex::new(Vec::new()),
                record: AtomicBool::new(cfg.record_traffic),
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .no_proxy()
                    .build()
                    .unwrap_or_default(),
            }),
        }
    }

    /// Replaces the faults.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.inner.world).faults = faults;
    }

    /// Changes the faults in place.
    pub fn update_faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut lock(&self.inner.world).faults);
    }

    pub fn faults(&self) -> Faults {
        lock(&self.inner.world).faults.clone()
    }

    pub fn metrics(&self) -> Metrics {
        lock(&self.inner.metrics).clone()
    }

    pub fn reset_metrics(&self) {
        *lock(&self.inner.metrics) = Metrics::default();
    }

    pub fn set_recording(&self, on: bool) {
        self.inner.record.store(on, Ordering::SeqCst);
    }

    pub fn traffic(&self) -> Vec<Exchange> {
        lock(&self.inner.traffic).clone()
    }

    pub fn clear_traffic(&self) {
        lock(&self.inner.traffic).clear();
    }

    /// The device provisioned on a hardware reservation; `Err` if there is no such reservation.
    pub fn reservation_device(&self, reservation: &str) -> Result<Option<String>, String> {
        self.tick();
        lock(&self.inner.world)
            .reservations
            .get(reservation)
            .map(|r| r.device.clone())
            .ok_or_else(|| format!("no hardware reservation {reservation}"))
    }

    pub fn boot_record(&self, device: &str) -> Option<BootRecord> {
        self.tick();
        lock(&self.inner.world).boots.get(device).cloned()
    }

    /// Every device that still exists, in creation order (optionally of one project), as the API
    /// shows it, with the `boot_count` of its latest boot record (`None` before the first).
    pub fn device_listing(&self, project: Option<&str>) -> Vec<Value> {
        self.tick();
        let w = lock(&self.inner.world);
        w.order
            .iter()
            .filter_map(|id| w.devices.get(id))
            .filter(|d| project.is_none_or(|p| d.project == p))
            .map(|d| {
                json!({
                    "device": w.device_json(d),
                    "boot_count": w.boots.get(&d.id).map(|b| b.boot_count),
                })
            })
            .collect()
    }

    /// Number of devices that still exist (any state) in a project.
    pub fn device_count(&self, project: &str) -> usize {
        self.tick();
        lock(&self.inner.world)
            .devices
            .values()
            .filter(|d| d.project == project)
            .count()
    }

    /// Makes a device disappear at once, as if removed behind the API's back.
    pub fn vanish(&self, device: &str) -> bool {
        let mut w = lock(&self.inner.world);
        let found = w.devices.contains_key(device);
        w.remove_device(device);
        found
    }

    /// Puts a device into `failed`.
    pub fn fail_device(&self, device: &str) -> bool {
        let mut w = lock(&self.inner.world);
        match w.devices.get_mut(device) {
            Some(d) => {
                d.state = world::State::Failed;
                true
            }
            None => false,
        }
    }

    /// Advances every device and starts pending script fetches.
    pub fn tick(&self) {
        let fetches = {
            let mut w = lock(&self.inner.world);
            w.advance_all(Instant::now());
            std::mem::take(&mut w.pending_fetches)
        };
        self.spawn_fetches(fetches);
    }

    fn spawn_fetches(&self, fetches: Vec<world::PendingFetch>) {
        if fetches.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for f in fetches {
            let sim = self.clone();
            rt.spawn(async move {
                let result = async {
                    let resp = sim.inner.http.get(&f.url).send().await?;
                    let resp = resp.error_for_status()?;
                    resp.text().await
                }
                .await;
                let mut w = lock(&sim.inner.world);
                if let Some(rec) = w.boots.get_mut(&f.device_id)
                    && rec.boot_count == f.boot_count
                {
                    match result {
                        Ok(script) => rec.ipxe_script = Some(script),
                        Err(e) => rec.ipxe_error = Some(format!("fetching {}: {e}", f.url)),
                    }
                }
            });
        }
    }

    fn count(&self, op: Op, status: Option<StatusCode>, fault: bool) {
        let mut m = lock(&self.inner.metrics);
        let e = m.endpoints.entry(op.id.to_string()).or_default();
        match status {
            None => e.requests += 1,
            Some(s) => *e.responses.entry(s.as_u16()).or_default() += 1,
        }
        if fault {
            e.faults += 1;
        }
        if status.is_none() {
            m.total_requests += 1;
        }
    }

    /// Runs one API request through faults, authentication, the state and the recorder.
    async fn handle(
        &self,
        op: Op,
        headers: &HeaderMap,
        query: &[(String, String)],
        body: &Bytes,
        f: impl FnOnce(&mut World, &Caller<'_>, Instant) -> Reply,
    ) -> Response {
        self.count(op, None, false);
        let (latency, burst, injected, lose, hang, rl) = {
            let mut w = lock(&self.inner.world);
            let rl = match w.faults.server_rate_limit.clone() {
                Some(l) if l.window_secs > 0 => {
                    let now = chrono::Utc::now().timestamp();
                    let window = l.window_secs as i64;
                    let idx = now.div_euclid(window);
                    if w.rl_window.0 != idx {
                        w.rl_window = (idx, 0);
                    }
                    w.rl_window.1 += 1;
                    let used = w.rl_window.1;
                    Some(RateLimitState {
                        limit: l.limit,
                        remaining: l.limit.saturating_sub(used),
                        reset: (idx + 1) * window,
                        exceeded: used > l.limit,
                    })
                }
                _ => None,
            };
            let faults = &mut w.faults;
            let mut latency = faults.latency_ms;
            let burst = match faults.rate_limit_burst.as_mut() {
                Some(b) if b.count > 0 => {
                    b.count -= 1;
                    Some(b.clone())
                }
                _ => None,
            };
            let mut injected = None;
            let mut lose = false;
            for key in [op.id, "*"] {
                if let Some(ef) = faults.endpoints.get_mut(key) {
                    latency += ef.latency_ms;
                    if injected.is_none() {
                        injected = pick_error(ef, &self.inner.rng);
                    }
                    if ef.lose_response_count > 0 && injected.is_none() && !lose {
                        ef.lose_response_count -= 1;
                        lose = true;
                    }
                }
            }
            (
                latency,
                burst,
                injected,
                lose,
                faults.hang_ms.unwrap_or(5_000),
                rl,
            )
        };
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        let request_json: Option<Value> = serde_json::from_slice(body).ok();
        let limited = match (&burst, &rl) {
            (Some(b), _) => Some((
                b.retry_after_secs,
                100,
                chrono::Utc::now().timestamp() + b.reset_in_secs as i64,
            )),
            (None, Some(r)) if r.exceeded => Some((
                Some((r.reset - chrono::Utc::now().timestamp()).max(1) as u64),
                r.limit,
                r.reset,
            )),
            _ => None,
        };
        if let Some((retry_after, limit, reset)) = limited {
            let body = json!({"errors": ["Too Many Requests"]});
            let mut resp = json_response(StatusCode::TOO_MANY_REQUESTS, Some(body.clone()));
            let h = resp.headers_mut();
            if let Some(ra) = retry_after {
                h.insert(header::RETRY_AFTER, HeaderValue::from(ra));
            }
            h.insert("x-ratelimit-limit", HeaderValue::from(limit));
            h.insert("x-ratelimit-remaining", HeaderValue::from(0u64));
            h.insert("x-ratelimit-reset", HeaderValue::from(reset));
            return self.finish(
                op,
                query,
                request_json,
                StatusCode::TOO_MANY_REQUESTS,
                Some(body),
                resp,
                true,
            );
        }
        if let Some(status) = injected {
            let body = json!({"errors": ["Oh snap, something went wrong! We've logged the error and will take a look."]});
            let resp = json_response(status, Some(body.clone()));
            return self.finish(op, query, request_json, status, Some(body), resp, true);
        }
        let reply = {
            let token = headers
                .get("x-auth-token")
                .and_then(|v| v.to_str().ok())
                .and_then(|t| self.inner.tokens.iter().find(|c| c.token == t));
            match token {
                None => Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "Invalid authentication token",
                )),
                Some(token) => {
                    let caller = Caller {
                        token,
                        projects: &self.inner.projects,
                    };
                    let now = Instant::now();
                    let (reply, fetches) = {
                        let mut w = lock(&self.inner.world);
                        w.advance_all(now);
                        let reply = f(&mut w, &caller, now);
                        (reply, std::mem::take(&mut w.pending_fetches))
                    };
                    self.spawn_fetches(fetches);
                    reply
                }
            }
        };
        let (status, body) = match reply {
            Ok((s, b)) => (s, b),
            Err(e) => (e.status, Some(e.body())),
        };
        if lose {
            tokio::time::sleep(Duration::from_millis(hang)).await;
        }
        let mut resp = json_response(status, body.clone());
        if let Some(r) = rl {
            let h = resp.headers_mut();
            h.insert("x-ratelimit-limit", HeaderValue::from(r.limit));
            h.insert("x-ratelimit-remaining", HeaderValue::from(r.remaining));
            h.insert("x-ratelimit-reset", HeaderValue::from(r.reset));
        }
        self.finish(op, query, request_json, status, body, resp, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        op: Op,
        query: &[(String, String)],
        request: Option<Value>,
        status: StatusCode,
        body: Option<Value>,
        resp: Response,
        fault: bool,
    ) -> Response {
        self.count(op, Some(status), fault);
        if self.inner.record.load(Ordering::SeqCst) {
            lock(&self.inner.traffic).push(Exchange {
                operation: op.id.to_string(),
                method: op.method.to_string(),
                path: op.path.to_string(),
                query: query.to_vec(),
                request,
                status: status.as_u16(),
                response: body,
            });
        }
        resp
    }
}

struct RateLimitState {
    limit: u32,
    remaining: u32,
    reset: i64,
    exceeded: bool,
}

fn pick_error(ef: &mut EndpointFault, rng: &Mutex<StdRng>) -> Option<StatusCode> {
    let status =
        StatusCode::from_u16(ef.status.unwrap_or(500)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if ef.error_count > 0 {
        ef.error_count -= 1;
        return Some(status);
    }
    if ef.error_rate > 0.0 && lock(rng).random::<f64>() < ef.error_rate {
        return Some(status);
    }
    None
}

fn json_response(status: StatusCode, body: Option<Value>) -> Response {
    match body {
        Some(b) => (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            b.to_string(),
        )
            .into_response(),
        None => status.into_response(),
    }
}

fn q<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn q_bool(query: &[(String, String)], key: &str) -> Result<Option<bool>, ApiError> {
    match q(query, key) {
        None => Ok(None),
        Some("true") | Some("1") => Ok(Some(true)),
        Some("false") | Some("0") => Ok(Some(false)),
        Some(v) => Err(ApiError::unprocessable(format!(
            "{key} must be a boolean, got {v}"
        ))),
    }
}

fn q_u32(query: &[(String, String)], key: &str, default: u32, max: u32) -> Result<u32, ApiError> {
    match q(query, key) {
        None => Ok(default),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n.min(max)),
            _ => Err(ApiError::unprocessable(format!(
                "{key} must be a positive integer, got {v}"
            ))),
        },
    }
}

type Qs = Query<Vec<(String, String)>>;

fn ok(v: Value) -> Reply {
    Ok((StatusCode::OK, Some(v)))
}

/// Checks the caller may use the device; 404 when it does not exist.
fn device_access(w: &World, c: &Caller<'_>, id: &str, write: bool) -> Result<(), ApiError> {
    let d = w.device(id)?;
    c.project(&d.project, write)
}

fn port_access(w: &World, c: &Caller<'_>, port: &str, write: bool) -> Result<String, ApiError> {
    let dev = w
        .port_owner
        .get(port)
        .cloned()
        .ok_or_else(ApiError::not_found)?;
    device_access(w, c, &dev, write)?;
    Ok(dev)
}

async fn list_devices(
    State(s): State<Sim>,
    Path(project): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let qv = query.clone();
    s.handle(
        ops::FIND_PROJECT_DEVICES,
        &headers,
        &query,
        &body,
        move |w, c, _| {
            c.project(&project, false)?;
            let page = q_u32(&qv, "page", 1, 100_000)?;
            let per_page = q_u32(&qv, "per_page", 10, 1000)?;
            let tag = q(&qv, "tag");
            let hostname = q(&qv, "hostname");
            let metro = q(&qv, "metro");
            let matching: Vec<&world::SimDevice> = w
                .order
                .iter()
                .filter_map(|id| w.devices.get(id))
                .filter(|d| d.project == project)
                .filter(|d| tag.is_none_or(|t| d.tags.iter().any(|x| x == t)))
                .filter(|d| hostname.is_none_or(|h| d.hostname.contains(h)))
                .filter(|d| metro.is_none_or(|m| d.metro.code == m))
                .collect();
            let total = matching.len() as u32;
            let last_page = total.div_ceil(per_page).max(1);
            let start = ((page - 1) as usize).saturating_mul(per_page as usize);
            let devices: Vec<Value> = matching
                .iter()
                .skip(start)
                .take(per_page as usize)
                .map(|d| w.device_json(d))
                .collect();
            let href = |p: u32| {
                let mut ser = url::form_urlencoded::Serializer::new(String::new());
                ser.append_pair("page", &p.to_string());
                ser.append_pair("per_page", &per_page.to_string());
                for (k, v) in [("tag", tag), ("hostname", hostname), ("metro", metro)] {
                    if let Some(v) = v {
                        ser.append_pair(k, v);
                    }
                }
                json!({"href": format!("{API_PREFIX}/projects/{project}/devices?{}", ser.finish())})
            };
            let mut meta = json!({
                "first": href(1), "last": href(last_page), "self": href(page),
                "total": total, "current_page": page, "last_page": last_page,
            });
            if page < last_page {
                meta["next"] = href(page + 1);
            }
            if page > 1 {
                meta["previous"] = href(page - 1);
            }
            ok(json!({"devices": devices, "meta": meta}))
        },
    )
    .await
}

async fn create_device(
    State(s): State<Sim>,
    Path(project): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let b = body.clone();
    s.handle(
        ops::CREATE_DEVICE,
        &headers,
        &query,
        &body,
        move |w, c, now| {
            c.project(&project, true)?;
            let input: world::DeviceCreateInput = parse(&b)?;
            let id = w.create_device(&project, input, now)?;
            Ok((StatusCode::CREATED, Some(w.device_json(w.device(&id)?))))
        },
    )
    .await
}

async fn get_device(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    s.handle(ops::FIND_DEVICE, &headers, &query, &body, move |w, c, _| {
        device_access(w, c, &id, false)?;
        ok(w.device_json(w.device(&id)?))
    })
    .await
}

async fn update_device(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let b = body.clone();
    s.handle(
        ops::UPDATE_DEVICE,
        &headers,
        &query,
        &body,
        move |w, c, _| {
            device_access(w, c, &id, true)?;
            let input: world::DeviceUpdateInput = parse(&b)?;
            let d = w.device_mut(&id)?;
            if d.locked && input.locked != Some(false) {
                return Err(ApiError::unprocessable("Device is locked"));
            }
            if let Some(v) = input.always_pxe {
                d.always_pxe = v;
            }
            if let Some(v) = input.billing_cycle {
                d.billing_cycle = v;
            }
            if let Some(v) = input.customdata {
                d.customdata = v;
            }
            if let Some(v) = input.description {
                d.description = Some(v);
            }
            if let Some(v) = input.hostname {
                d.hostname = v;
            }
            if let Some(v) = input.ipxe_script_url {
                d.ipxe_script_url = Some(v);
            }
            if let Some(v) = input.locked {
                d.locked = v;
            }
            if let Some(v) = input.tags {
                d.tags = v;
            }
            if let Some(v) = input.userdata {
                d.userdata = Some(v);
            }
            d.updated_at = chrono::Utc::now();
            ok(w.device_json(w.device(&id)?))
        },
    )
    .await
}

async fn delete_device(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let qv = query.clone();
    s.handle(
        ops::DELETE_DEVICE,
        &headers,
        &query,
        &body,
        move |w, c, now| {
            device_access(w, c, &id, true)?;
            let _force = q_bool(&qv, "force_delete")?;
            let d = w.device_mut(&id)?;
            if d.locked {
                return Err(ApiError::unprocessable("Cannot delete a locked device"));
            }
            if d.state != world::State::Deprovisioning {
                d.state = world::State::Deprovisioning;
                d.since = now;
            }
            Ok((StatusCode::NO_CONTENT, None))
        },
    )
    .await
}

async fn device_action(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let b = body.clone();
    s.handle(
        ops::PERFORM_ACTION,
        &headers,
        &query,
        &body,
        move |w, c, now| {
            device_access(w, c, &id, true)?;
            let input: world::DeviceActionInput = parse(&b)?;
            w.action(&id, input, now)?;
            Ok((StatusCode::ACCEPTED, None))
        },
    )
    .await
}

fn port_reply(w: &World, dev: &str, port: &str) -> Reply {
    let d = w.device(dev)?;
    let p = d
        .ports
        .iter()
        .find(|p| p.id == port)
        .ok_or_else(ApiError::not_found)?;
    ok(w.port_json(d, p))
}

async fn get_port(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    s.handle(ops::FIND_PORT, &headers, &query, &body, move |w, c, _| {
        let dev = port_access(w, c, &id, false)?;
        port_reply(w, &dev, &id)
    })
    .await
}

async fn port_action(
    s: Sim,
    op: Op,
    id: String,
    query: Vec<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let b = body.clone();
    let qv = query.clone();
    s.handle(op, &headers, &query, &body, move |w, c, _| {
        port_access(w, c, &id, true)?;
        let pop = match op.id {
            "bondPort" => PortOp::Bond {
                bulk: q_bool(&qv, "bulk_enable")?.unwrap_or(false),
            },
            "disbondPort" => PortOp::Disbond {
                bulk: q_bool(&qv, "bulk_disable")?.unwrap_or(false),
            },
            "convertLayer2" => {
                let input: world::PortAssignInput = parse(&b)?;
                let dev = w.port_op(&id, PortOp::ConvertLayer2)?;
                if let Some(vnid) = input.vnid {
                    w.port_op(&id, PortOp::Assign(vnid))?;
                }
                return port_reply(w, &dev, &id);
            }
            "convertLayer3" => {
                let _: world::PortConvertLayer3Input = parse(&b)?;
                PortOp::ConvertLayer3
            }
            "assignPort" | "unassignPort" => {
                let input: world::PortAssignInput = parse(&b)?;
                let vnid = input
                    .vnid
                    .ok_or_else(|| ApiError::unprocessable("vnid is required"))?;
                if op.id == "assignPort" {
                    PortOp::Assign(vnid)
                } else {
                    PortOp::Unassign(vnid)
                }
            }
            _ => return Err(ApiError::not_found()),
        };
        let dev = w.port_op(&id, pop)?;
        port_reply(w, &dev, &id)
    })
    .await
}

async fn bond_port(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(q): Qs,
    h: HeaderMap,
    b: Bytes,
) -> Response {
    port_action(s, ops::BOND_PORT, id, q, h, b).await
}
async fn disbond_port(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(q): Qs,
    h: HeaderMap,
    b: Bytes,
) -> Response {
    port_action(s, ops::DISBOND_PORT, id, q, h, b).await
}
async fn convert_l2(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(q): Qs,
    h: HeaderMap,
    b: Bytes,
) -> Response {
    port_action(s, ops::CONVERT_L2, id, q, h, b).await
}
async fn convert_l3(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(q): Qs,
    h: HeaderMap,
    b: Bytes,
) -> Response {
    port_action(s, ops::CONVERT_L3, id, q, h, b).await
}
async fn assign_port(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(q): Qs,
    h: HeaderMap,
    b: Bytes,
) -> Response {
    port_action(s, ops::ASSIGN_PORT, id, q, h, b).await
}
async fn unassign_port(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(q): Qs,
    h: HeaderMap,
    b: Bytes,
) -> Response {
    port_action(s, ops::UNASSIGN_PORT, id, q, h, b).await
}

async fn vlan_batch(
    State(s): State<Sim>,
    Path(id): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let b = body.clone();
    s.handle(ops::VLAN_BATCH, &headers, &query, &body, move |w, c, _| {
        port_access(w, c, &id, true)?;
        let input: world::VlanBatchInput = parse(&b)?;
        let out = w.batch(&id, input)?;
        Ok((StatusCode::CREATED, Some(out)))
    })
    .await
}

async fn list_vlans(
    State(s): State<Sim>,
    Path(project): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let qv = query.clone();
    s.handle(ops::FIND_VLANS, &headers, &query, &body, move |w, c, _| {
        c.project(&project, false)?;
        let metro = q(&qv, "metro");
        let list: Vec<Value> = w
            .vlans
            .iter()
            .filter(|v| v.project == project)
            .filter(|v| metro.is_none_or(|m| v.metro.code == m || v.metro.id == m))
            .map(|v| w.vlan_json(v))
            .collect();
        ok(json!({"virtual_networks": list}))
    })
    .await
}

async fn create_vlan(
    State(s): State<Sim>,
    Path(project): Path<String>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let b = body.clone();
    s.handle(ops::CREATE_VLAN, &headers, &query, &body, move |w, c, _| {
        c.project(&project, true)?;
        let input: world::VirtualNetworkCreateInput = parse(&b)?;
        let v = w.create_vlan(&project, input)?;
        Ok((StatusCode::CREATED, Some(w.vlan_json(&v))))
    })
    .await
}

async fn list_plans(
    State(s): State<Sim>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let qv = query.clone();
    s.handle(ops::FIND_PLANS, &headers, &query, &body, move |_, _, _| {
        let slug = q(&qv, "slug");
        let plans: Vec<Value> = catalog::PLANS
            .iter()
            .filter(|p| slug.is_none_or(|s| p.slug == s))
            .map(catalog::plan_json)
            .collect();
        ok(json!({"plans": plans}))
    })
    .await
}

async fn list_metros(
    State(s): State<Sim>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    s.handle(ops::FIND_METROS, &headers, &query, &body, move |_, _, _| {
        ok(json!({"metros": catalog::METROS.iter().map(catalog::metro_json).collect::<Vec<_>>()}))
    })
    .await
}

async fn capacity(
    State(s): State<Sim>,
    Query(query): Qs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    s.handle(
        ops::FIND_CAPACITY,
        &headers,
        &query,
        &body,
        move |w, _, _| ok(w.capacity_json()),
    )
    .await
}

// ---- admin ----

async fn admin_get_faults(State(s): State<Sim>) -> Response {
    axum::Json(s.faults()).into_response()
}

async fn admin_put_faults(State(s): State<Sim>, body: Bytes) -> Response {
    match serde_json::from_slice::<Faults>(&body) {
        Ok(f) => {
            s.set_faults(f);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(json!({"errors": [format!("invalid faults: {e}")]})),
        ),
    }
}

async fn admin_metrics(State(s): State<Sim>) -> Response {
    axum::Json(s.metrics()).into_response()
}

async fn admin_reset_metrics(State(s): State<Sim>) -> Response {
    s.reset_metrics();
    StatusCode::NO_CONTENT.into_response()
}

async fn prometheus(State(s): State<Sim>) -> Response {
    let m = s.metrics();
    let mut out = String::from("# TYPE ingot_sim_metal_requests_total counter\n");
    for (op, e) in &m.endpoints {
        out.push_str(&format!(
            "ingot_sim_metal_requests_total{{operation=\"{op}\"}} {}\n",
            e.requests
        ));
    }
    out.push_str("# TYPE ingot_sim_metal_responses_total counter\n");
    for (op, e) in &m.endpoints {
        for (status, n) in &e.responses {
            out.push_str(&format!(
                "ingot_sim_metal_responses_total{{operation=\"{op}\",status=\"{status}\"}} {n}\n"
            ));
        }
    }
    out.push_str("# TYPE ingot_sim_metal_injected_faults_total counter\n");
    for (op, e) in &m.endpoints {
        out.push_str(&format!(
            "ingot_sim_metal_injected_faults_total{{operation=\"{op}\"}} {}\n",
            e.faults
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn admin_traffic(State(s): State<Sim>) -> Response {
    axum::Json(s.traffic()).into_response()
}

async fn admin_clear_traffic(State(s): State<Sim>) -> Response {
    s.clear_traffic();
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_devices(
    State(s): State<Sim>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let devices = s.device_listing(q(&query, "project"));
    axum::Json(json!({ "devices": devices })).into_response()
}

async fn admin_boot(State(s): State<Sim>, Path(id): Path<String>) -> Response {
    match s.boot_record(&id) {
        Some(r) => axum::Json(r).into_response(),
        None => json_response(
            StatusCode::NOT_FOUND,
            Some(json!({"errors": ["no boot recorded for this device"]})),
        ),
    }
}

async fn admin_vanish(State(s): State<Sim>, Path(id): Path<String>) -> Response {
    if s.vanish(&id) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
    .into_response()
}

async fn admin_fail(State(s): State<Sim>, Path(id): Path<String>) -> Response {
    if s.fail_device(&id) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
    .into_response()
}

/// The whole router: the API under `/metal/v1`, admin under `/_sim`, Prometheus at `/metrics`.
pub fn router(sim: Sim) -> Router {
    let api = Router::new()
        .route(
            "/projects/{id}/devices",
            get(list_devices).post(create_device),
        )
        .route(
            "/devices/{id}",
            get(get_device).put(update_device).delete(delete_device),
        )
        .route("/devices/{id}/actions", post(device_action))
        .route("/ports/{id}", get(get_port))
        .route("/ports/{id}/bond", post(bond_port))
        .route("/ports/{id}/disbond", post(disbond_port))
        .route("/ports/{id}/convert/layer-2", post(convert_l2))
        .route("/ports/{id}/convert/layer-3", post(convert_l3))
        .route("/ports/{id}/assign", post(assign_port))
        .route("/ports/{id}/unassign", post(unassign_port))
        .route("/ports/{id}/vlan-assignments/batches", post(vlan_batch))
        .route(
            "/projects/{id}/virtual-networks",
            get(list_vlans).post(create_vlan),
        )
        .route("/plans", get(list_plans))
        .route("/locations/metros", get(list_metros))
        .route("/capacity/metros", get(capacity));
    let admin = Router::new()
        .route("/faults", get(admin_get_faults).put(admin_put_faults))
        .route("/metrics", get(admin_metrics))
        .route("/metrics/reset", post(admin_reset_metrics))
        .route("/traffic", get(admin_traffic).delete(admin_clear_traffic))
        .route("/devices", get(admin_devices))
        .route("/devices/{id}/boot", get(admin_boot))
        .route("/devices/{id}/vanish", post(admin_vanish))
        .route("/devices/{id}/fail", post(admin_fail));
    Router::new()
        .nest(API_PREFIX, api)
        .nest("/_sim", admin)
        .route("/metrics", get(prometheus))
        .with_state(sim)
}

/// A running emulator on a loopback port; stops when dropped.
pub struct SimServer {
    addr: SocketAddr,
    sim: Sim,
    shutdown: Option<oneshot::Sender<()>>,
    ticker: JoinHandle<()>,
}

impl SimServer {
    /// Binds `addr` (use port 0 for a free one) and serves in the background.
    pub async fn start(cfg: SimConfig, addr: SocketAddr) -> std::io::Result<SimServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let sim = Sim::new(cfg);
        let (tx, rx) = oneshot::channel::<()>();
        let app = router(sim.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        let ticker = spawn_ticker(sim.clone());
        Ok(SimServer {
            addr,
            sim,
            shutdown: Some(tx),
            ticker,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API base URL, e.g. `http://127.0.0.1:4000/metal/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}{API_PREFIX}", self.addr)
    }

    /// The admin base URL, e.g. `http://127.0.0.1:4000/_sim`.
    pub fn admin_url(&self) -> String {
        format!("http://{}/_sim", self.addr)
    }

    pub fn sim(&self) -> &Sim {
        &self.sim
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.ticker.abort();
    }
}

fn spawn_ticker(sim: Sim) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(Duration::from_millis(200));
        loop {
            iv.tick().await;
            sim.tick();
        }
    })
}

/// Serves until the process ends (the CLI).
pub async fn serve(cfg: SimConfig, listener: TcpListener) -> std::io::Result<()> {
    let sim = Sim::new(cfg);
    let _ticker = spawn_ticker(sim.clone());
    axum::serve(listener, router(sim)).await
}
