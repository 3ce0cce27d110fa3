//! The HTTP client of the Equinix Metal API.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use super::ratelimit::RateLimiter;
use super::wire::*;
use crate::error::{Error, Result};
use crate::observe::Observer;
use crate::secret::ApiToken;

/// Where the real service answered.
pub const DEFAULT_BASE_URL: &str = "https://api.equinix.com/metal/v1";

/// Retries of idempotent calls on 5xx and timeouts, and of every call on 429.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Longest wait the client accepts from a 429 before giving up with `RateLimited`.
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            max_rate_limit_wait: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// Jittered exponential backoff: a random delay between half and all of
    /// `base * 2^(attempt-1)`, capped at `max_delay`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let cap = exp.min(self.max_delay);
        let ms = cap.as_millis() as u64;
        if ms == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(rand::rng().random_range(ms / 2..=ms))
    }
}

/// Settings of a client.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub base_url: String,
    pub token: ApiToken,
    /// Timeout of every call (connect + answer).
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub user_agent: String,
}

impl ClientConfig {
    pub fn new(base_url: impl Into<String>, token: ApiToken) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            token,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            user_agent: format!("ingot/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Calls made by a client (and every client sharing its counters).
#[derive(Debug, Default)]
pub struct ClientStats {
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    pub rate_limited: AtomicU64,
    pub timeouts: AtomicU64,
}

impl ClientStats {
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
    pub fn rate_limited(&self) -> u64 {
        self.rate_limited.load(Ordering::Relaxed)
    }
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }
}

/// A typed client of the Equinix Metal API. Cheap to clone; clones share the rate limiter and
/// the counters.
#[derive(Clone, Debug)]
pub struct EquinixClient {
    http: reqwest::Client,
    base: Url,
    token: ApiToken,
    timeout: Duration,
    retry: RetryPolicy,
    limiter: Arc<RateLimiter>,
    stats: Arc<ClientStats>,
    observer: Observer,
}

struct Answer {
    status: StatusCode,
    body: Vec<u8>,
}

fn status_error(status: StatusCode, body: &[u8]) -> Error {
    let parsed: ApiErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let mut message = parsed.message();
    if message.is_empty() {
        message = status.to_string();
    }
    let lower = message.to_ascii_lowercase();
    let capacity = ["capacity", "stock", "no available", "not enough"]
        .iter()
        .any(|w| lower.contains(w));
    match status.as_u16() {
        401 => Error::Unauthorized { message },
        403 => Error::Forbidden { message },
        404 => Error::NotFound { message },
        409 => Error::Conflict { message },
        400 | 422 if capacity => Error::NoCapacity { message },
        503 if capacity => Error::NoCapacity { message },
        400 | 422 => Error::Validation { message },
        429 => Error::RateLimited { retry_after: None },
        s if s >= 500 => Error::Transient {
            message: format!("{status}: {message}"),
            source: None,
        },
        _ => Error::Protocol {
            message: format!("{status}: {message}"),
            source: None,
        },
    }
}

/// When the API wants us back: `Retry-After` (seconds or HTTP date), else `X-RateLimit-Reset`
/// (epoch seconds).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(v) = text("retry-after") {
        if let Ok(secs) = v.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if let Ok(when) = chrono::DateTime::parse_from_rfc2822(v) {
            let delta = when.timestamp() - chrono::Utc::now().timestamp();
            return Some(Duration::from_secs(delta.max(0) as u64));
        }
    }
    reset_in(headers)
}

fn reset_in(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("x-ratelimit-reset")?.to_str().ok()?.trim();
    let reset: i64 = v.parse().ok()?;
    let now = chrono::Utc::now().timestamp();
    // Some services send seconds to wait rather than an epoch: small values are read so.
    let delta = if reset > 1_000_000_000 {
        reset - now
    } else {
        reset
    };
    Some(Duration::from_secs(delta.max(0) as u64))
}

impl EquinixClient {
    /// A client with its own rate limiter of `rate_per_sec` (burst 5).
    pub fn new(config: ClientConfig, rate_per_sec: f64) -> Result<Self> {
        Self::with_limiter(config, Arc::new(RateLimiter::new(rate_per_sec, 5)))
    }

    /// A client sharing `limiter` with others (one limiter per token for the whole operator).
    pub fn with_limiter(config: ClientConfig, limiter: Arc<RateLimiter>) -> Result<Self> {
        if config.token.is_empty() {
            return Err(Error::InvalidRequest("the API token is empty".to_string()));
        }
        let mut base = Url::parse(&config.base_url)
            .map_err(|e| Error::InvalidRequest(format!("base URL {}: {e}", config.base_url)))?;
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let http = reqwest::Client::builder()
            .user_agent(config.user_agent.clone())
            .connect_timeout(config.timeout)
            .build()
            .map_err(|e| Error::InvalidRequest(format!("building the HTTP client: {e}")))?;
        Ok(EquinixClient {
            http,
            base,
            token: config.token,
            timeout: config.timeout,
            retry: config.retry,
            limiter,
            stats: Arc::new(ClientStats::default()),
            observer: Observer::default(),
        })
    }

    /// Reports every call, retry, 429 and rate-limiter wait to `observer` (metrics).
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = observer;
        self
    }

    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    pub fn limiter(&self) -> &Arc<RateLimiter> {
        &self.limiter
    }

    fn url(&self, path: &str, query: &[(&str, String)]) -> Result<Url> {
        let mut url = self
            .base
            .join(path.trim_start_matches('/'))
            .map_err(|e| Error::InvalidRequest(format!("path {path}: {e}")))?;
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
        }
        Ok(url)
    }

    /// One API call with rate limiting, timeout and retries, reported to the observer.
    async fn call(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
        idempotent: bool,
    ) -> Result<Answer> {
        let started = Instant::now();
        let result = self
            .call_with_retries(op, method, path, query, body, idempotent)
            .await;
        if let Some(observer) = self.observer.get() {
            let outcome = result.as_ref().map_or_else(Error::kind, |_| "ok");
            observer.call(op, outcome, started.elapsed());
        }
        result
    }

    /// `idempotent` calls are retried on 5xx and timeouts; every call is retried on 429 and on
    /// connection refusals (nothing was sent then).
    async fn call_with_retries(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
        idempotent: bool,
    ) -> Result<Answer> {
        let url = self.url(path, query)?;
        let mut attempt = 0u32;
        let mut rate_waited = Duration::ZERO;
        loop {
            attempt += 1;
            let waited = self.limiter.acquire().await;
            if !waited.is_zero()
                && let Some(observer) = self.observer.get()
            {
                observer.rate_limit_wait(waited);
            }
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let mut token = HeaderValue::from_str(self.token.expose()).map_err(|_| {
                Error::InvalidRequest("the API token is not a valid header value".to_string())
            })?;
            token.set_sensitive(true);
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .timeout(self.timeout)
                .header("X-Auth-Token", token)
                .header(http::header::ACCEPT, "application/json");
            if let Some(b) = &body {
                req = req
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(b.clone());
            }
            let started = Instant::now();
            let result = req.send().await;
            let outcome: std::result::Result<Answer, (Error, bool, Option<Duration>)> = match result
            {
                Err(e) => {
                    let timeout = e.is_timeout();
                    if timeout {
                        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    let retry = e.is_connect() || (idempotent && (timeout || e.is_request()));
                    let what = if timeout { "timed out" } else { "failed" };
                    Err((
                        Error::Transient {
                            message: format!("{op} {what} after {:?}", started.elapsed()),
                            source: Some(Box::new(e.without_url())),
                        },
                        retry,
                        None,
                    ))
                }
                Ok(resp) => {
                    let status = resp.status();
                    let headers = resp.headers().clone();
                    match resp.bytes().await {
                        Err(e) => {
                            if e.is_timeout() {
                                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                            }
                            Err((
                                Error::Transient {
                                    message: format!("{op}: reading the answer failed"),
                                    source: Some(Box::new(e.without_url())),
                                },
                                idempotent,
                                None,
                            ))
                        }
                        Ok(b) => self.judge(status, &headers, b.to_vec(), idempotent, attempt),
                    }
                }
            };
            match outcome {
                Ok(a) => {
                    tracing::debug!(op, %method, status = a.status.as_u16(), attempt, "metal api call");
                    return Ok(a);
                }
                Err((err, retry, wait)) => {
                    tracing::debug!(op, %method, attempt, error = %err, "metal api call failed");
                    let observer = self.observer.get();
                    if let (Error::RateLimited { .. }, Some(observer)) = (&err, observer) {
                        observer.rate_limited(op);
                    }
                    if !retry || attempt >= self.retry.max_attempts.max(1) {
                        return Err(err);
                    }
                    let delay = match wait {
                        Some(w) => {
                            rate_waited += w;
                            if rate_waited > self.retry.max_rate_limit_wait {
                                return Err(err);
                            }
                            // Everyone sharing the limiter waits, not just this call.
                            self.limiter.pause_until(Instant::now() + w);
                            Duration::ZERO
                        }
                        None => self.retry.backoff(attempt),
                    };
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    if let Some(observer) = observer {
                        observer.retry(op, err.kind());
                    }
                    tracing::info!(op, attempt, delay_ms = delay.as_millis() as u64, error = %err, "retrying metal api call");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Sorts an answer: success, retryable failure (with the wait the API asked for), or final.
    fn judge(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        bytes: Vec<u8>,
        idempotent: bool,
        attempt: u32,
    ) -> std::result::Result<Answer, (Error, bool, Option<Duration>)> {
        if headers
            .get("x-ratelimit-remaining")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() == "0")
            && let Some(wait) = reset_in(headers)
        {
            self.limiter.pause_until(Instant::now() + wait);
        }
        if status.is_success() {
            Ok(Answer {
                status,
                body: bytes,
            })
        } else if status == StatusCode::TOO_MANY_REQUESTS {
            self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            let wait = retry_after(headers);
            Err((
                Error::RateLimited { retry_after: wait },
                true,
                Some(wait.unwrap_or_else(|| self.retry.backoff(attempt))),
            ))
        } else {
            let err = status_error(status, &bytes);
            let retry = idempotent && status.is_server_error();
            Err((err, retry, None))
        }
    }

    async fn json<T: DeserializeOwned>(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&(impl Serialize + ?Sized)>,
        idempotent: bool,
    ) -> Result<T> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| Error::InvalidRequest(format!("encoding the {op} body: {e}")))?;
        let a = self.call(op, method, path, query, body, idempotent).await?;
        serde_json::from_slice(&a.body).map_err(|e| Error::Protocol {
            message: format!("decoding the {op} answer"),
            source: Some(Box::new(e)),
        })
    }

    async fn empty(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&(impl Serialize + ?Sized)>,
        idempotent: bool,
    ) -> Result<()> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| Error::InvalidRequest(format!("encoding the {op} body: {e}")))?;
        self.call(op, method, path, query, body, idempotent).await?;
        Ok(())
    }

    fn include(include: &[&str]) -> Vec<(&'static str, String)> {
        if include.is_empty() {
            Vec::new()
        } else {
            vec![("include", include.join(","))]
        }
    }

    // ---- devices ----

    /// `POST /projects/{id}/devices`. Never retried on 5xx or timeout: the caller resolves
    /// an unknown outcome by looking (see [`super::EquinixMetal::create_server`]).
    pub async fn create_device(&self, project: &str, req: &DeviceCreateRequest) -> Result<Device> {
        if req.facility.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err(Error::InvalidRequest(
                "facility is retired by Equinix Metal: give a metro instead".to_string(),
            ));
        }
        if req.metro.is_empty() {
            return Err(Error::InvalidRequest("metro is required".to_string()));
        }
        if req.operating_system == "custom_ipxe"
            && req.ipxe_script_url.as_deref().unwrap_or("").is_empty()
            && !req
                .userdata
                .as_deref()
                .unwrap_or("")
                .trim_start()
                .starts_with("#!ipxe")
        {
            return Err(Error::InvalidRequest(
                "custom_ipxe needs an ipxe_script_url or #!ipxe userdata".to_string(),
            ));
        }
        self.json(
            "createDevice",
            Method::POST,
            &format!("projects/{project}/devices"),
            &[],
            Some(req),
            false,
        )
        .await
    }

    /// `GET /devices/{id}`.
    pub async fn get_device(&self, id: &str, include: &[&str]) -> Result<Device> {
        self.json::<Device>(
            "findDeviceById",
            Method::GET,
            &format!("devices/{id}"),
            &Self::include(include),
            None::<&()>,
            true,
        )
        .await
    }

    /// `GET /projects/{id}/devices`, every page.
    pub async fn list_devices(&self, project: &str, filter: &DeviceFilter) -> Result<Vec<Device>> {
        let per_page = filter.per_page.unwrap_or(1000).clamp(1, 1000);
        let mut out = Vec::new();
        let mut page: u64 = 1;
        loop {
            let mut query = vec![
                ("page", page.to_string()),
                ("per_page", per_page.to_string()),
            ];
            if let Some(t) = &filter.tag {
                query.push(("tag", t.clone()));
            }
            if let Some(h) = &filter.hostname {
                query.push(("hostname", h.clone()));
            }
            if let Some(m) = &filter.metro {
                query.push(("metro", m.clone()));
            }
            let list: DeviceList = self
                .json(
                    "findProjectDevices",
                    Method::GET,
                    &format!("projects/{project}/devices"),
                    &query,
                    None::<&()>,
                    true,
                )
                .await?;
            let got = list.devices.len();
            out.extend(list.devices);
            let more = match (list.meta.next.as_ref(), list.meta.last_page) {
                (Some(_), _) => true,
                (None, Some(last)) => page < last,
                (None, None) => false,
            };
            if !more || got == 0 {
                return Ok(out);
            }
            page += 1;
            if page > 100_000 {
                return Err(Error::Protocol {
                    message: "device list does not end".to_string(),
                    source: None,
                });
            }
        }
    }

    /// `PUT /devices/{id}`.
    pub async fn update_device(&self, id: &str, req: &DeviceUpdateRequest) -> Result<Device> {
        self.json(
            "updateDevice",
            Method::PUT,
            &format!("devices/{id}"),
            &[],
            Some(req),
            true,
        )
        .await
    }

    /// `POST /devices/{id}/actions`.
    pub async fn device_action(&self, id: &str, action: &DeviceAction) -> Result<()> {
        self.empty(
            "performAction",
            Method::POST,
            &format!("devices/{id}/actions"),
            &[],
            Some(action),
            false,
        )
        .await
    }

    /// `DELETE /devices/{id}?force_delete=...`.
    pub async fn delete_device(&self, id: &str, force: bool) -> Result<()> {
        let query = if force {
            vec![("force_delete", "true".to_string())]
        } else {
            Vec::new()
        };
        self.empty(
            "deleteDevice",
            Method::DELETE,
            &format!("devices/{id}"),
            &query,
            None::<&()>,
            true,
        )
        .await
    }

    // ---- ports ----

    pub async fn get_port(&self, id: &str) -> Result<Port> {
        self.json::<Port>(
            "findPortById",
            Method::GET,
            &format!("ports/{id}"),
            &[],
            None::<&()>,
            true,
        )
        .await
    }

    /// `POST /ports/{id}/bond?bulk_enable=`.
    pub async fn bond_port(&self, id: &str, bulk_enable: bool) -> Result<Port> {
        self.json(
            "bondPort",
            Method::POST,
            &format!("ports/{id}/bond"),
            &[("bulk_enable", bulk_enable.to_string())],
            None::<&()>,
            false,
        )
        .await
    }

    /// `POST /ports/{id}/disbond?bulk_disable=`.
    pub async fn disbond_port(&self, id: &str, bulk_disable: bool) -> Result<Port> {
        self.json(
            "disbondPort",
            Method::POST,
            &format!("ports/{id}/disbond"),
            &[("bulk_disable", bulk_disable.to_string())],
            None::<&()>,
            false,
        )
        .await
    }

    /// `POST /ports/{id}/convert/layer-2`, optionally assigning a VLAN (id or number) after.
    pub async fn convert_layer2(&self, id: &str, vnid: Option<&str>) -> Result<Port> {
        let body = PortConvertLayer2 {
            vnid: vnid.map(str::to_string),
        };
        self.json(
            "convertLayer2",
            Method::POST,
            &format!("ports/{id}/convert/layer-2"),
            &[],
            Some(&body),
            false,
        )
        .await
    }

    pub async fn convert_layer3(&self, id: &str, req: &PortConvertLayer3) -> Result<Port> {
        self.json(
            "convertLayer3",
            Method::POST,
            &format!("ports/{id}/convert/layer-3"),
            &[],
            Some(req),
            false,
        )
        .await
    }

    /// `POST /ports/{id}/assign`; `vnid` is a VLAN id or number.
    pub async fn assign_port(&self, id: &str, vnid: &str) -> Result<Port> {
        let body = PortAssign {
            vnid: vnid.to_string(),
        };
        self.json(
            "assignPort",
            Method::POST,
            &format!("ports/{id}/assign"),
            &[],
            Some(&body),
            false,
        )
        .await
    }

    pub async fn unassign_port(&self, id: &str, vnid: &str) -> Result<Port> {
        let body = PortAssign {
            vnid: vnid.to_string(),
        };
        self.json(
            "unassignPort",
            Method::POST,
            &format!("ports/{id}/unassign"),
            &[],
            Some(&body),
            false,
        )
        .await
    }

    /// `POST /ports/{id}/vlan-assignments/batches`.
    pub async fn batch_vlan_assignments(
        &self,
        id: &str,
        req: &VlanBatchRequest,
    ) -> Result<VlanBatch> {
        self.json(
            "createPortVlanAssignmentBatch",
            Method::POST,
            &format!("ports/{id}/vlan-assignments/batches"),
            &[],
            Some(req),
            false,
        )
        .await
    }

    // ---- virtual networks and lookups ----

    pub async fn list_virtual_networks(
        &self,
        project: &str,
        metro: Option<&str>,
    ) -> Result<Vec<VirtualNetwork>> {
        let query: Vec<(&str, String)> = metro
            .map(|m| ("metro", m.to_string()))
            .into_iter()
            .collect();
        let list: VirtualNetworkList = self
            .json(
                "findVirtualNetworks",
                Method::GET,
                &format!("projects/{project}/virtual-networks"),
                &query,
                None::<&()>,
                true,
            )
            .await?;
        Ok(list.virtual_networks)
    }

    pub async fn create_virtual_network(
        &self,
        project: &str,
        req: &VirtualNetworkCreateRequest,
    ) -> Result<VirtualNetwork> {
        self.json(
            "createVirtualNetwork",
            Method::POST,
            &format!("projects/{project}/virtual-networks"),
            &[],
            Some(req),
            false,
        )
        .await
    }

    pub async fn list_plans(&self) -> Result<Vec<Plan>> {
        let list: PlanList = self
            .json("findPlans", Method::GET, "plans", &[], None::<&()>, true)
            .await?;
        Ok(list.plans)
    }

    pub async fn list_metros(&self) -> Result<Vec<MetroRef>> {
        let list: MetroList = self
            .json(
                "findMetros",
                Method::GET,
                "locations/metros",
                &[],
                None::<&()>,
                true,
            )
            .await?;
        Ok(list.metros)
    }

    pub async fn metro_capacity(&self) -> Result<CapacityList> {
        self.json(
            "findCapacityForMetro",
            Method::GET,
            "capacity/metros",
            &[],
            None::<&()>,
            true,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn statuses_map_to_typed_errors() {
        let body = |m: &str| serde_json::to_vec(&serde_json::json!({"errors": [m]})).unwrap();
        assert!(
            matches!(status_error(StatusCode::UNAUTHORIZED, br#"{"error":"Invalid authentication token"}"#), Error::Unauthorized { message } if message == "Invalid authentication token")
        );
        assert!(matches!(
            status_error(StatusCode::FORBIDDEN, &body("no")),
            Error::Forbidden { .. }
        ));
        assert!(matches!(
            status_error(StatusCode::NOT_FOUND, b""),
            Error::NotFound { .. }
        ));
        assert!(matches!(
            status_error(StatusCode::CONFLICT, &body("busy")),
            Error::Conflict { .. }
        ));
        assert!(
            matches!(status_error(StatusCode::UNPROCESSABLE_ENTITY, &body("plan is not valid")), Error::Validation { message } if message == "plan is not valid")
        );
        assert!(matches!(
            status_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                &body("no c3.small.x86 servers in stock")
            ),
            Error::NoCapacity { .. }
        ));
        assert!(matches!(
            status_error(
                StatusCode::SERVICE_UNAVAILABLE,
                &body("Not enough capacity")
            ),
            Error::NoCapacity { .. }
        ));
        assert!(status_error(StatusCode::BAD_GATEWAY, b"<html>").is_transient());
        let two = serde_json::to_vec(&serde_json::json!({"errors": ["a", "b"]})).unwrap();
        assert!(
            matches!(status_error(StatusCode::UNPROCESSABLE_ENTITY, &two), Error::Validation { message } if message == "a; b")
        );
    }

    #[test]
    fn retry_after_in_seconds_date_or_reset() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let when = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        h.insert("retry-after", HeaderValue::from_str(&when).unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d <= Duration::from_secs(30) && d >= Duration::from_secs(28),
            "{d:?}"
        );
        let mut h = HeaderMap::new();
        let reset = chrono::Utc::now().timestamp() + 5;
        h.insert("x-ratelimit-reset", HeaderValue::from(reset));
        let d = retry_after(&h).unwrap();
        assert!(
            d <= Duration::from_secs(5) && d >= Duration::from_secs(4),
            "{d:?}"
        );
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1_000),
            ..RetryPolicy::default()
        };
        for _ in 0..50 {
            let d1 = p.backoff(1);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
            let d3 = p.backoff(3);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            assert!(p.backoff(30) <= Duration::from_millis(1_000));
        }
    }
}
