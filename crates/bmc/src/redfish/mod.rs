//! Redfish client: logs in at the session collection's usual URI and reads the computer
//! systems at theirs, and reads the service root (whose links it then follows) only where a
//! BMC serves them elsewhere or a call needs the root; SessionService login with
//! `X-Auth-Token`, re-login on 401, logout on close or drop, HTTP Basic fallback; TLS
//! verified by default; a timeout on every call.

mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod json;
mod vendor;

pub use events::DEFAULT_IDLE_TIMEOUT;

pub use vendor::Vendor;

use crate::error::BmcError;
use crate::secret::Password;
use crate::types::*;
use crate::{Bmc, Endpoint};
use async_trait::async_trait;
use json::{health, link, list, string, uint};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How the client authenticates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// A Redfish session when the service offers one, else HTTP Basic.
    #[default]
    Auto,
    /// Sessions only.
    Session,
    /// HTTP Basic on every request, no session.
    Basic,
}

/// TLS settings. Certificates are verified against the system roots by default.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// Skip certificate verification (rufio's `insecureTLS: true`). Opt-in only.
    pub insecure: bool,
    /// Extra trusted roots, PEM (one or more certificates).
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// Trust exactly the server certificate with this SHA-256 fingerprint (of its DER), and
    /// no other: roots, the CA bundle and `insecure` are then not consulted.
    pub pinned_sha256: Option<[u8; 32]>,
}

/// Client settings.
#[derive(Clone, Debug)]
pub struct RedfishOptions {
    /// Bound on every HTTP request (connect + answer).
    pub timeout: Duration,
    pub tls: TlsOptions,
    pub auth: AuthMode,
    /// How long `cycle` waits for the system to report `Off` when it has to emulate
    /// `PowerCycle` with `ForceOff` + `On`.
    pub transition_timeout: Duration,
    /// Idle connections kept per BMC. Sessions do not depend on connections: at fleet scale
    /// (thousands of BMCs, limited file descriptors) 0 reconnects per request and keeps only
    /// the in-flight connections open.
    pub idle_connections_per_bmc: usize,
    /// How long an idle connection is kept. Long enough to carry one operation's requests
    /// (a Job's tasks, a power transition's polls every 3 s), short enough that a fleet polled
    /// every few minutes does not hold a connection (TLS and HTTP buffers, about 50 KiB) per
    /// BMC between polls: at 10,000 BMCs polled every 3 minutes, about 55 connections open a
    /// second, so 10 s kept 550 or more open and 4 s keeps about 220.
    pub idle_connection_timeout: Duration,
    /// Idempotent reads (GET, and the DELETE of our own session) are hedged: when no answer
    /// came after the BMC's usual answer time plus four deviations (`AnswerTime`), at most
    /// this long and half the timeout, an identical copy is sent, another after twice that
    /// and a third after three times, within a fleet-wide budget of copies (`RedfishStats`);
    /// the first answer wins
    /// ("The Tail at Scale"). A login without an answer after this long is sent again (the
    /// slower session is deleted). `None`: no hedging. PATCH, POST actions and other
    /// DELETEs are never hedged.
    pub hedge_after: Option<Duration>,
    /// The computer system to manage when the BMC has several, by `Name` (as bmclib matches
    /// rufio's `systemName`) or else `Id`; `None`: the first member of `Systems`.
    pub system_name: Option<String>,
}

impl Default for RedfishOptions {
    fn default() -> Self {
        RedfishOptions {
            timeout: Duration::from_secs(15),
            tls: TlsOptions::default(),
            auth: AuthMode::Auto,
            transition_timeout: Duration::from_secs(60),
            idle_connections_per_bmc: 1,
            idle_connection_timeout: Duration::from_secs(4),
            hedge_after: Some(Duration::from_secs(2)),
            system_name: None,
        }
    }
}

/// Counters shared by clients (the session manager sums them over the fleet).
#[derive(Debug, Default)]
pub struct RedfishStats {
    pub sessions_opened: AtomicU64,
    pub sessions_closed: AtomicU64,
    pub relogins: AtomicU64,
    pub requests: AtomicU64,
    /// Second requests sent for reads that had no answer yet.
    pub hedged: AtomicU64,
    /// Answer times over the clients sharing these counters (the hedge delay of a BMC not
    /// heard from yet).
    pub answers: AnswerTime,
}

impl RedfishStats {
    /// Whether one more hedged copy stays within the budget: ten copies, and beyond them one
    /// in twenty of the requests sent. When a whole fleet slows down at once (the operator's
    /// own machine saturated), copies would add load where it hurts; past the budget a read
    /// waits for its answer or its timeout.
    fn copy_allowed(&self) -> bool {
        let copies = self.hedged.load(Ordering::Relaxed);
        let requests = self.requests.load(Ordering::Relaxed);
        copies < 10 || copies.saturating_add(1).saturating_mul(20) <= requests
    }
}

/// Smoothed answer time and its mean deviation, in microseconds, as TCP estimates a round
/// trip (RFC 6298: 1/8 and 1/4 weights). A read is hedged once it has waited longer than the
/// smoothed time plus four deviations: BMCs that answer steadily are hedged soon after their
/// usual time, erratic ones only well beyond their spread.
#[derive(Debug, Default)]
pub struct AnswerTime {
    smoothed_us: AtomicU64,
    deviation_us: AtomicU64,
}

impl AnswerTime {
    /// Folds in one answer time. (The two values are updated one after the other; a racing
    /// update costs only some precision.)
    fn fold(&self, took_us: u64) {
        let took_us = took_us.max(1);
        let smoothed = self.smoothed_us.load(Ordering::Relaxed);
        if smoothed == 0 {
            self.smoothed_us.store(took_us, Ordering::Relaxed);
            self.deviation_us.store(took_us / 2, Ordering::Relaxed);
            return;
        }
        let deviation = self.deviation_us.load(Ordering::Relaxed);
        let error = smoothed.abs_diff(took_us);
        self.deviation_us
            .store((deviation * 3 + error) / 4, Ordering::Relaxed);
        self.smoothed_us
            .store(((smoothed * 7 + took_us) / 8).max(1), Ordering::Relaxed);
    }

    /// How long a read waits before its copy goes: the smoothed time plus four deviations,
    /// and at least twice the smoothed time (scheduling jitter on a steady BMC sends no
    /// copies); `None` before any answer.
    fn hedge_after(&self) -> Option<Duration> {
        let smoothed = self.smoothed_us.load(Ordering::Relaxed);
        if smoothed == 0 {
            return None;
        }
        let margin = (self.deviation_us.load(Ordering::Relaxed) * 4).max(smoothed);
        Some(Duration::from_micros(smoothed.saturating_add(margin)))
    }
}

/// What a client keeps of a BMC's service root: the links it follows later and whether `$top`
/// works. A root is often several KiB of JSON (and a `Value` tree several times that in memory):
/// a fleet keeps only these few paths per BMC.
#[derive(Debug, PartialEq)]
struct ServiceRoot {
    systems: Option<String>,
    chassis: Option<String>,
    managers: Option<String>,
    session_service: Option<String>,
    event_service: Option<String>,
    /// `Links.Sessions`, where the root names the session collection itself.
    sessions: Option<String>,
    /// `ProtocolFeaturesSupported.TopSkipQuery`.
    top_skip: bool,
    /// The vendor the root names (`Vendor`, `Oem` keys), if any.
    vendor: Vendor,
}

impl ServiceRoot {
    fn of(root: &Value) -> Self {
        ServiceRoot {
            systems: link(root, "Systems"),
            chassis: link(root, "Chassis"),
            managers: link(root, "Managers"),
            session_service: link(root, "SessionService"),
            event_service: link(root, "EventService"),
            sessions: root
                .pointer("/Links/Sessions/@odata.id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            top_skip: root
                .pointer("/ProtocolFeaturesSupported/TopSkipQuery")
                .and_then(Value::as_bool)
                == Some(true),
            vendor: Vendor::detect(root, None),
        }
    }

    /// The vendor: the root's hint first, then the system's `Manufacturer`.
    fn vendor_with(&self, manufacturer: Option<&str>) -> Vendor {
        match self.vendor {
            Vendor::Generic => Vendor::detect(&Value::Null, manufacturer),
            named => named,
        }
    }
}

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

/// Accepts exactly one server certificate: the one whose DER has this SHA-256 digest. The
/// handshake's signatures are still checked against that certificate's key; the chain and the
/// name are not (the pin is the trust).
#[derive(Debug)]
struct PinnedCertificate {
    sha256: [u8; 32],
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

/// SHA-256 of `data`, with the TLS stack's own hash.
fn sha256(data: &[u8]) -> Option<[u8; 32]> {
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13()?;
    suite
        .common
        .hash_provider
        .hash(data)
        .as_ref()
        .try_into()
        .ok()
}

/// `AB:CD:...`, as `openssl x509 -fingerprint -sha256` prints it.
pub fn fingerprint_text(sha256: &[u8; 32]) -> String {
    sha256
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl rustls::client::danger::ServerCertVerifier for PinnedCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match sha256(end_entity.as_ref()) {
            Some(seen) if seen == self.sha256 => {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            seen => Err(rustls::Error::General(format!(
                "the BMC's certificate has SHA-256 fingerprint {}, not the pinned {}",
                seen.as_ref()
                    .map_or_else(|| "(unknown)".to_owned(), fingerprint_text),
                fingerprint_text(&self.sha256)
            ))),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A TLS configuration that trusts only the certificate with this SHA-256 fingerprint.
fn pinned_tls(sha256: [u8; 32]) -> Result<rustls::ClientConfig, BmcError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BmcError::Config(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCertificate { sha256, algorithms }))
        .with_no_client_auth())
}

#[derive(Clone, Default)]
enum Auth {
    #[default]
    None,
    Session {
        token: String,
        location: Option<String>,
    },
    Basic,
}

/// The session token is a credential: never printed.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Session { location, .. } => f
                .debug_struct("Session")
                .field("token", &"<redacted>")
                .field("location", location)
                .finish(),
            Auth::Basic => f.write_str("Basic"),
        }
    }
}

/// `X-Auth-Token` marked sensitive, so that HTTP-level Debug output and logs leave it out.
fn token_header(token: &str) -> HeaderValue {
    let mut v = HeaderValue::from_str(token).unwrap_or(HeaderValue::from_static(""));
    v.set_sensitive(true);
    v
}

#[derive(Clone, Debug, Default)]
struct Discovered {
    root: Option<Arc<ServiceRoot>>,
    system: Option<String>,
    vendor: Option<Vendor>,
}

/// Re-login back-off after a 401 on a fresh session.
#[derive(Debug, Default)]
struct Relogin {
    not_before: Option<Instant>,
    delay: Duration,
}

/// Where BMCs serve the session collection and the computer systems (the URIs the Redfish
/// specification and the vendors' guides give them). A first contact logs in and finds its
/// system there without reading the service root: three requests instead of four for each
/// BMC of a fleet. A BMC that serves them elsewhere answers 404 or 405, and the client
/// follows its service root's links instead.
const SESSIONS_URI: &str = "/redfish/v1/SessionService/Sessions";
const SYSTEMS_URI: &str = "/redfish/v1/Systems";

const RELOGIN_BACKOFF_MIN: Duration = Duration::from_secs(1);
const RELOGIN_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Members of a collection page asked for with `$top` when the service supports it.
const PAGE_SIZE: usize = 200;
/// Pages followed before a collection is returned as it is (partial).
const MAX_PAGES: usize = 100;
/// Largest answer body read: far above any Redfish resource (a 200-entry log page is a few
/// hundred KiB), low enough that thousands of BMCs answering at once stay within memory.
pub const MAX_BODY_BYTES: usize = 8 << 20;
/// Most members one collection page may list (each may cost a GET of its own).
pub const MAX_PAGE_MEMBERS: usize = 10_000;

/// A Redfish BMC. One instance holds at most one session.
pub struct RedfishClient {
    http: reqwest::Client,
    /// Fleet-wide limit, taken per request (the session manager's).
    gate: Option<Arc<tokio::sync::Semaphore>>,
    relogin: std::sync::Mutex<Relogin>,
    /// This BMC's answer times (for the hedge delay).
    answers: AnswerTime,
    base: String,
    user: String,
    password: Password,
    options: RedfishOptions,
    auth: Mutex<Auth>,
    found: std::sync::Mutex<Discovered>,
    stats: Arc<RedfishStats>,
}

impl std::fmt::Debug for RedfishClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedfishClient")
            .field("base", &self.base)
            .field("user", &self.user)
            .field("password", &self.password)
            .finish_non_exhaustive()
    }
}

struct Response {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Response {
    fn json(&self) -> Result<Value, BmcError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| BmcError::Malformed(format!("invalid JSON ({e})")))
    }
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

impl RedfishClient {
    /// A client with its own HTTP connection pool.
    pub fn new(
        endpoint: &Endpoint,
        user: impl Into<String>,
        password: Password,
        options: RedfishOptions,
    ) -> Result<Self, BmcError> {
        let http = http_client(&options)?;
        Ok(Self::with_http(
            http,
            endpoint,
            user,
            password,
            options,
            Arc::default(),
        ))
    }

    /// A client on a shared HTTP client (built by [`http_client`] with the same options).
    pub fn with_http(
        http: reqwest::Client,
        endpoint: &Endpoint,
        user: impl Into<String>,
        password: Password,
        options: RedfishOptions,
        stats: Arc<RedfishStats>,
    ) -> Self {
        RedfishClient {
            http,
            gate: None,
            relogin: std::sync::Mutex::default(),
            answers: AnswerTime::default(),
            base: endpoint.base_url(),
            user: user.into(),
            password,
            options,
            auth: Mutex::new(Auth::None),
            found: std::sync::Mutex::new(Discovered::default()),
            stats,
        }
    }

    pub fn stats(&self) -> &Arc<RedfishStats> {
        &self.stats
    }

    /// Takes a permit of `gate` for each HTTP request (not for whole operations): the
    /// session manager's fleet limit.
    pub fn with_gate(mut self, gate: Arc<tokio::sync::Semaphore>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Checks that a Redfish service answers here: logs in (the session is kept for the calls
    /// that follow), or with Basic authentication reads the service root.
    pub async fn probe(&self) -> Result<(), BmcError> {
        if self.options.auth == AuthMode::Basic {
            return self.root().await.map(|_| ());
        }
        self.current_auth().await.map(|_| ())
    }

    /// Whether a session token is currently held.
    pub async fn has_session(&self) -> bool {
        matches!(*self.auth.lock().await, Auth::Session { .. })
    }

    /// The detected vendor (once a call that differs by vendor has run).
    pub fn vendor(&self) -> Option<Vendor> {
        self.found.lock().ok().and_then(|f| f.vendor)
    }

    /// Only the path and query of a link are used: a link never sends the token elsewhere.
    fn url(&self, link: &str) -> String {
        join_url(&self.base, link)
    }
}

/// Whether two links name the same resource (a trailing `/` aside; `b` is a path).
fn same_path(a: &str, b: &str) -> bool {
    join_url("", a).trim_end_matches('/') == b.trim_end_matches('/')
}

/// `base` + the path and query of `link` (a link never sends the token to another host).
fn join_url(base: &str, link: &str) -> String {
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
    fn map_send_error(&self, e: reqwest::Error) -> BmcError {
        map_send_error(e, self.options.timeout)
    }

    fn build(
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

    /// One request; a GET is hedged and, if it still times out, tried once more.
    async fn send_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        if method != Method::GET {
            return self.send_once(method, path, body, auth, headers).await;
        }
        self.send_idempotent(method, path, auth, headers).await
    }

    /// A request without body that may be sent more than once (GET, the DELETE of our own
    /// session): hedged.
    async fn send_idempotent(
        &self,
        method: Method,
        path: &str,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        if self.options.hedge_after.is_none() {
            return self.send_once(method, path, None, auth, headers).await;
        }
        self.send_hedged(method, path, auth, headers).await
    }

    /// Sends the request; while no answer came, a copy follows after the hedge delay, another
    /// after twice that and a last one after three times (the delay is at most half the
    /// timeout). The first answer wins. When every request out has timed out, the next copy
    /// goes at once instead of at its time; any other error, or a timeout with no copy left,
    /// is returned. With 1% of requests lost, three copies fail a read once in 10^8 (two did
    /// once in 10^6: a BMC failed in about one 10,000-BMC sweep of twenty).
    async fn send_hedged(
        &self,
        method: Method,
        path: &str,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        // The read and its three copies.
        const ATTEMPTS: u32 = 4;
        let delay = self.hedge_delay();
        // One fleet permit covers the read and its copies: a copy goes out because its read
        // is already late, and must not queue behind every other BMC's requests (with 1% of
        // requests lost, copies waiting for permits of their own kept their lost originals'
        // permits for the whole timeout and cost a 10,000-BMC sweep a fifth of its time).
        // The hedge clock starts once the first request is out, not while it waits.
        let _permit = acquire(&self.gate).await?;
        let started = tokio::time::Instant::now();
        let copy = || self.send_permitted(None, true, method.clone(), path, None, auth, headers);
        let mut pending = futures::stream::FuturesUnordered::new();
        pending.push(self.send_permitted(None, false, method.clone(), path, None, auth, headers));
        let mut sent = 1;
        let mut last_error = None;
        loop {
            if pending.is_empty() {
                // Nothing is out: after a timeout the next copy goes now rather than at its
                // time (one due as the first request timed out must not be lost to it).
                let timed_out = matches!(last_error, Some(BmcError::Timeout(_)));
                if timed_out && sent < ATTEMPTS && self.stats.copy_allowed() {
                    sent += 1;
                    pending.push(copy());
                    continue;
                }
                return Err(last_error.unwrap_or(BmcError::Timeout(self.options.timeout)));
            }
            // Copies are due at fixed times from the first request, whatever happens between.
            let due = started + delay * sent;
            tokio::select! {
                r = futures::StreamExt::next(&mut pending) => match r {
                    Some(Ok(r)) => return Ok(r),
                    Some(Err(e)) => last_error = Some(e),
                    None => {}
                },
                () = tokio::time::sleep_until(due), if sent < ATTEMPTS => {
                    sent += 1;
                    if self.stats.copy_allowed() {
                        pending.push(copy());
                    }
                }
            }
        }
    }

    /// The BMC's smoothed answer time plus four deviations (else the fleet's), at least
    /// 20 ms, at most `hedge_after` and half the timeout.
    fn hedge_delay(&self) -> Duration {
        let cap = self
            .options
            .hedge_after
            .unwrap_or(self.options.timeout)
            .min(self.options.timeout / 2);
        match self
            .answers
            .hedge_after()
            .or_else(|| self.stats.answers.hedge_after())
        {
            Some(delay) => delay.clamp(Duration::from_millis(20).min(cap), cap),
            None => cap,
        }
    }

    async fn send_once(
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
    async fn send_permitted(
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

    /// The service root, if it was read.
    fn known_root(&self) -> Option<Arc<ServiceRoot>> {
        self.found.lock().ok().and_then(|f| f.root.clone())
    }

    /// The service root, fetched once (unauthenticated, as the specification allows).
    async fn root(&self) -> Result<Arc<ServiceRoot>, BmcError> {
        if let Some(r) = self.known_root() {
            return Ok(r);
        }
        let resp = self
            .send_raw(Method::GET, "/redfish/v1/", None, &Auth::None, &[])
            .await?;
        let resp = if resp.status == StatusCode::UNAUTHORIZED {
            // Some BMCs protect the root; retry with credentials.
            self.send_raw(Method::GET, "/redfish/v1/", None, &Auth::Basic, &[])
                .await?
        } else {
            resp
        };
        check_status(&resp, "GET", "/redfish/v1/")?;
        let root = resp.json()?;
        if !root.is_object() || root.get("@odata.id").is_none() && root.get("Systems").is_none() {
            return Err(BmcError::Malformed(
                "the service root is not a Redfish ServiceRoot".into(),
            ));
        }
        let root = Arc::new(ServiceRoot::of(&root));
        if let Ok(mut f) = self.found.lock() {
            f.root = Some(root.clone());
        }
        Ok(root)
    }

    async fn sessions_link(&self, root: &ServiceRoot) -> Result<Option<String>, BmcError> {
        if let Some(l) = &root.sessions {
            return Ok(Some(l.clone()));
        }
        if let Some(ss) = &root.session_service {
            // Fetching the SessionService may itself need authentication.
            let resp = self
                .send_raw(Method::GET, ss, None, &Auth::Basic, &[])
                .await?;
            if resp.status.is_success() {
                let v = resp.json()?;
                return Ok(link(&v, "Sessions"));
            }
        }
        Ok(None)
    }

    /// Establishes authentication: a session, or Basic where sessions are not offered.
    async fn login(&self) -> Result<Auth, BmcError> {
        if self.options.auth == AuthMode::Basic {
            return Ok(Auth::Basic);
        }
        let auto = self.options.auth == AuthMode::Auto;
        let mut refused_at_usual_uri = None;
        if self.known_root().is_none() {
            match self.login_at(SESSIONS_URI, false).await {
                Ok(auth) => return Ok(auth),
                // Not answered, or the session table is full: the root would not change that.
                Err(
                    e @ (BmcError::Timeout(_)
                    | BmcError::Unreachable(_)
                    | BmcError::MaybeSent(_)
                    | BmcError::Tls(_)
                    | BmcError::Unavailable { .. }
                    | BmcError::SessionLimit),
                ) => return Err(e),
                // No session collection there (a 404, or the 401 of a BMC that guards every
                // path but its root), or no Redfish at all: the root tells.
                Err(e) => refused_at_usual_uri = Some(e),
            }
        }
        let root = self.root().await?;
        let Some(sessions) = self.sessions_link(&root).await? else {
            return match self.options.auth {
                AuthMode::Session => Err(BmcError::Unsupported("SessionService".into())),
                _ => Ok(Auth::Basic),
            };
        };
        if let Some(e) = refused_at_usual_uri
            && same_path(&sessions, SESSIONS_URI)
        {
            // Its sessions are where they were asked for: not a second login (a refused one
            // counts towards an account's lockout), and the answer stands.
            return match e {
                BmcError::Http {
                    status: 404 | 405 | 501,
                    ..
                } if auto => Ok(Auth::Basic),
                e => Err(e),
            };
        }
        self.login_at(&sessions, auto).await
    }

    /// A login POST to `sessions`; `basic_if_absent`: a 404, 405 or 501 means the BMC offers
    /// no sessions (use Basic) rather than an error.
    async fn login_at(&self, sessions: &str, basic_if_absent: bool) -> Result<Auth, BmcError> {
        // A login whose answer never came created no session on a BMC that never read it,
        // and at worst one that expires on its own: tried once more, never hedged.
        match self.post_login(sessions, basic_if_absent).await {
            Err(BmcError::Timeout(_)) => self.post_login(sessions, basic_if_absent).await,
            other => other,
        }
    }

    /// The session POST runs in a task of its own: when the caller is cancelled (a
    /// controller's deadline) after the BMC created the session, the task still reads the
    /// token and deletes the session instead of leaking it.
    async fn post_login(&self, sessions: &str, basic_if_absent: bool) -> Result<Auth, BmcError> {
        let body = json!({"UserName": self.user, "Password": self.password.expose()});
        let req = self.build(Method::POST, sessions, Some(&body), &Auth::None, &[]);
        // A login without an answer after `hedge_after` (at most half the timeout; not the
        // adaptive delay of reads: logins are slow on many BMCs and a copy costs a session
        // slot for a moment) is sent a second time; the session that comes second is deleted.
        let hedge = self
            .options
            .hedge_after
            .map(|h| h.min(self.options.timeout / 2));
        let gate = self.gate.clone();
        let timeout = self.options.timeout;
        let stats = self.stats.clone();
        let http = self.http.clone();
        let base = self.base.clone();
        let sessions = sessions.to_owned();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            // The login and its copy go out under one fleet permit (as a hedged read's do).
            let attempt = |req: reqwest::RequestBuilder, copy: bool| {
                let stats = stats.clone();
                let sessions = sessions.clone();
                async move {
                    if copy {
                        stats.hedged.fetch_add(1, Ordering::Relaxed);
                    }
                    stats.requests.fetch_add(1, Ordering::Relaxed);
                    let resp = execute(req, timeout).await?;
                    let auth = login_answer(&resp, &sessions, basic_if_absent)?;
                    if let Auth::Session { .. } = auth {
                        stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, BmcError>(auth)
                }
            };
            let mut spare = hedge.and(req.try_clone());
            let mut pending = futures::stream::FuturesUnordered::new();
            let permit = match acquire(&gate).await {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            pending.push(attempt(req, false));
            let result = loop {
                tokio::select! {
                    r = futures::StreamExt::next(&mut pending) => match r {
                        Some(Ok(auth)) => break Ok(auth),
                        Some(Err(e)) if pending.is_empty() => break Err(e),
                        Some(Err(_)) => {}
                        None => break Err(BmcError::Timeout(timeout)),
                    },
                    _ = tokio::time::sleep(hedge.unwrap_or(timeout)), if spare.is_some() => {
                        if let Some(r) = spare.take().filter(|_| stats.copy_allowed()) {
                            pending.push(attempt(r, true));
                        }
                    }
                }
            };
            drop(permit);
            let logout = |auth: Auth| {
                let http = http.clone();
                let base = base.clone();
                let stats = stats.clone();
                let gate = gate.clone();
                async move {
                    if let Auth::Session {
                        token,
                        location: Some(loc),
                    } = auth
                    {
                        let url = join_url(&base, &loc);
                        if delete_session(&http, &url, &token, timeout, &gate).await {
                            stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            };
            if let Err(Ok(auth)) = tx.send(result) {
                // Nobody waits for this session any more: log it out.
                tracing::debug!(bmc = %base, "login finished after its caller gave up; logging out");
                logout(auth).await;
            }
            // The copy that lost the race: its session, if it made one, is not used.
            while let Some(r) = futures::StreamExt::next(&mut pending).await {
                if let Ok(auth) = r {
                    logout(auth).await;
                }
            }
        });
        let auth = rx
            .await
            .map_err(|_| BmcError::Config("the login task ended".into()))??;
        if let Auth::Session { .. } = auth {
            tracing::debug!(bmc = %self.base, "redfish session opened");
        }
        Ok(auth)
    }

    /// Current authentication, logging in first if there is none.
    async fn current_auth(&self) -> Result<Auth, BmcError> {
        let mut guard = self.auth.lock().await;
        if matches!(*guard, Auth::None) {
            *guard = self.login().await?;
        }
        Ok(guard.clone())
    }

    /// After a 401 with `stale`: log in again unless another caller already did. The old
    /// session is deleted (a 401 is not always an expired session), and a BMC that keeps
    /// refusing fresh sessions is not asked for new ones more often than the back-off.
    async fn relogin(&self, stale: &Auth) -> Result<Auth, BmcError> {
        let mut guard = self.auth.lock().await;
        let same = match (&*guard, stale) {
            (Auth::Session { token: a, .. }, Auth::Session { token: b, .. }) => a == b,
            (Auth::None, _) => true,
            _ => false,
        };
        if same {
            {
                let mut r = self
                    .relogin
                    .lock()
                    .map_err(|_| BmcError::Config("re-login lock poisoned".into()))?;
                let now = Instant::now();
                if r.not_before.is_some_and(|t| now < t) {
                    tracing::debug!(bmc = %self.base, "401 again soon after a re-login; backing off");
                    return Err(BmcError::Unauthorized);
                }
                r.delay = (r.delay * 2).clamp(RELOGIN_BACKOFF_MIN, RELOGIN_BACKOFF_MAX);
                r.not_before = Some(now + r.delay);
            }
            self.stats.relogins.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(bmc = %self.base, "redfish session refused; logging in again");
            let old = std::mem::take(&mut *guard);
            self.delete_session_in_background(old);
            *guard = self.login().await?;
        }
        Ok(guard.clone())
    }

    /// Best effort DELETE of a session no longer used (401/404 when it already expired).
    fn delete_session_in_background(&self, auth: Auth) {
        let Auth::Session {
            token,
            location: Some(loc),
        } = auth
        else {
            return;
        };
        let http = self.http.clone();
        let url = self.url(&loc);
        let timeout = self.options.timeout;
        let stats = self.stats.clone();
        let gate = self.gate.clone();
        tokio::spawn(async move {
            if delete_session(&http, &url, &token, timeout, &gate).await {
                stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// A request went through on a session: the re-login back-off starts over.
    fn session_works(&self) {
        if let Ok(mut r) = self.relogin.lock()
            && r.delay > Duration::ZERO
            && r.not_before.is_some_and(|t| Instant::now() >= t)
        {
            *r = Relogin::default();
        }
    }

    /// An authenticated request; a 401 on a session triggers one re-login and one retry.
    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        let auth = self.current_auth().await?;
        let resp = self
            .send_raw(method.clone(), path, body, &auth, headers)
            .await?;
        if resp.status == StatusCode::UNAUTHORIZED
            && let Auth::Session { .. } = auth
        {
            let auth = self.relogin(&auth).await?;
            let resp = self
                .send_raw(method.clone(), path, body, &auth, headers)
                .await?;
            check_status(&resp, method.as_str(), path)?;
            return Ok(resp);
        }
        if let Auth::Session { .. } = auth {
            self.session_works();
        }
        check_status(&resp, method.as_str(), path)?;
        Ok(resp)
    }

    async fn get(&self, path: &str) -> Result<Value, BmcError> {
        let resp = self.request(Method::GET, path, None, &[]).await?;
        let v = resp.json()?;
        if !v.is_object() {
            return Err(BmcError::Malformed(format!("{path} is not a JSON object")));
        }
        Ok(v)
    }

    async fn get_with_etag(&self, path: &str) -> Result<(Value, Option<String>), BmcError> {
        let resp = self.request(Method::GET, path, None, &[]).await?;
        let v = resp.json()?;
        let etag = resp.header("ETag").or_else(|| string(&v, "@odata.etag"));
        Ok((v, etag))
    }

    /// All members of a collection, following `Members@odata.nextLink`; members that came
    /// with only a link are fetched. A member that cannot be read is skipped (one failing
    /// DIMM must not empty the list); after `MAX_PAGES` pages what was read is returned.
    async fn members(&self, path: &str) -> Result<Vec<Value>, BmcError> {
        let mut out = Vec::new();
        let mut next = Some(path.to_owned());
        let mut pages = 0;
        while let Some(p) = next.take() {
            pages += 1;
            if pages > MAX_PAGES {
                tracing::warn!(bmc = %self.base, collection = %path, read = out.len(), "collection longer than {MAX_PAGES} pages; returning what was read");
                break;
            }
            let coll = match self.get(&p).await {
                Ok(c) => c,
                // A later page that fails: keep what the earlier pages gave.
                Err(e) if pages > 1 && !e.is_auth() && !matches!(e, BmcError::TooLarge(_)) => {
                    tracing::warn!(bmc = %self.base, page = %p, error = %e, "collection page unreadable; returning what was read");
                    break;
                }
                Err(e) => return Err(e),
            };
            let members = page_members(&coll, &p)?;
            for m in members {
                let Some(id) = string(m, "@odata.id") else {
                    continue;
                };
                // Expanded members carry more than the link.
                if m.as_object().is_some_and(|o| o.len() > 2) {
                    out.push(m.clone());
                    continue;
                }
                match self.get(&id).await {
                    Ok(v) => out.push(v),
                    Err(e) if e.is_auth() => return Err(e),
                    Err(e) => {
                        tracing::debug!(bmc = %self.base, member = %id, error = %e, "skipping unreadable member");
                    }
                }
            }
            next = string(&coll, "Members@odata.nextLink");
        }
        Ok(out)
    }

    /// Whether the service takes `$top` / `$skip` (`ProtocolFeaturesSupported.TopSkipQuery`).
    async fn top_skip(&self) -> bool {
        self.root().await.ok().is_some_and(|r| r.top_skip)
    }

    /// A log's entries: pages of `$top` entries (`$skip` advancing) when the service
    /// supports it, else the collection with its `nextLink`s.
    async fn log_entries(&self, entries: &str) -> Result<Vec<Value>, BmcError> {
        if !self.top_skip().await {
            return self.members(entries).await;
        }
        let sep = if entries.contains('?') { '&' } else { '?' };
        let mut out: Vec<Value> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for page in 0..MAX_PAGES {
            let url = format!("{entries}{sep}$top={PAGE_SIZE}&$skip={}", out.len());
            let coll = match self.get(&url).await {
                Ok(c) => c,
                Err(e) if page > 0 && !e.is_auth() && !matches!(e, BmcError::TooLarge(_)) => {
                    tracing::warn!(bmc = %self.base, log = %entries, error = %e, "log page unreadable; returning what was read");
                    return Ok(out);
                }
                Err(e) => return Err(e),
            };
            let members = page_members(&coll, entries)?;
            if members.is_empty() {
                return Ok(out);
            }
            let total = uint(&coll, "Members@odata.count");
            let before = out.len();
            for m in members {
                // A service that ignores `$skip` repeats its first page: stop there.
                let Some(id) = string(m, "@odata.id") else {
                    continue;
                };
                if !seen.insert(id.clone()) {
                    continue;
                }
                if m.as_object().is_some_and(|o| o.len() > 2) {
                    out.push(m.clone());
                } else {
                    match self.get(&id).await {
                        Ok(v) => out.push(v),
                        Err(e) if e.is_auth() => return Err(e),
                        Err(e) => {
                            tracing::debug!(bmc = %self.base, entry = %id, error = %e, "skipping unreadable log entry")
                        }
                    }
                }
            }
            if out.len() == before || total.is_some_and(|t| out.len() as u64 >= t) {
                return Ok(out);
            }
        }
        tracing::warn!(bmc = %self.base, log = %entries, read = out.len(), "log longer than {MAX_PAGES} pages; returning what was read");
        Ok(out)
    }

    async fn member_links(&self, path: &str) -> Result<Vec<String>, BmcError> {
        let coll = self.get(path).await?;
        let members = page_members(&coll, path)?;
        Ok(members
            .iter()
            .filter_map(|m| string(m, "@odata.id"))
            .collect())
    }

    /// The computer system this client manages: the one named by `system_name` on a BMC
    /// with several, else the first member of `Systems`.
    async fn system_path(&self) -> Result<String, BmcError> {
        if let Some(s) = self.found.lock().ok().and_then(|f| f.system.clone()) {
            return Ok(s);
        }
        // Logged in first: a 404 below is then the collection's, not the login's.
        self.current_auth().await?;
        let mut links = match self.known_root() {
            Some(root) => self.systems_of(&root).await?,
            None => match self.member_links(SYSTEMS_URI).await {
                Err(BmcError::Http {
                    status: 404 | 405, ..
                }) => self.systems_of(&*self.root().await?).await?,
                other => other?,
            },
        };
        links.sort();
        let chosen = match (&self.options.system_name, links.len()) {
            (_, 0) => return Err(BmcError::Unsupported("no computer system".into())),
            // One system: it is the one meant, whatever its name (as bmclib does).
            (None, _) | (Some(_), 1) => links.swap_remove(0),
            (Some(wanted), _) => self.system_named(wanted, &links).await?,
        };
        if let Ok(mut f) = self.found.lock() {
            f.system = Some(chosen.clone());
        }
        Ok(chosen)
    }

    /// The members of the root's `Systems` collection.
    async fn systems_of(&self, root: &ServiceRoot) -> Result<Vec<String>, BmcError> {
        let systems = root
            .systems
            .as_deref()
            .ok_or_else(|| BmcError::Unsupported("Systems".into()))?;
        self.member_links(systems).await
    }

    /// The member of `links` whose `Name` is `wanted` (else whose `Id` is). None matching is
    /// an error rather than a guess: a power action must not reach another node's system.
    async fn system_named(&self, wanted: &str, links: &[String]) -> Result<String, BmcError> {
        let mut seen = Vec::with_capacity(links.len());
        for link in links {
            let system = self.get(link).await?;
            let name = string(&system, "Name").unwrap_or_default();
            let id = string(&system, "Id").unwrap_or_default();
            if name == wanted {
                return Ok(link.clone());
            }
            seen.push((link.clone(), name, id));
        }
        if let Some((link, _, _)) = seen.iter().find(|(_, _, id)| id == wanted) {
            return Ok(link.clone());
        }
        let names: Vec<String> = seen
            .iter()
            .map(|(_, name, id)| format!("{name:?} (Id {id:?})"))
            .collect();
        Err(BmcError::Config(format!(
            "no computer system is named {wanted:?} at this BMC; it has {}: set providerOptions.redfish.systemName to one of those names",
            names.join(", ")
        )))
    }

    async fn system(&self) -> Result<(String, Value, Option<String>), BmcError> {
        let path = self.system_path().await?;
        let (v, etag) = self.get_with_etag(&path).await?;
        Ok((path, v, etag))
    }

    /// The BMC's vendor, for the calls that differ by vendor: the service root's hint (the
    /// root is read for it once), else the system's `Manufacturer`.
    async fn vendor_of(&self, system: &Value) -> Vendor {
        if let Some(v) = self.vendor() {
            return v;
        }
        let manufacturer = string(system, "Manufacturer");
        match self.root().await {
            Ok(root) => {
                let vendor = root.vendor_with(manufacturer.as_deref());
                if let Ok(mut f) = self.found.lock() {
                    f.vendor = Some(vendor);
                }
                vendor
            }
            // Not kept: the root's hint is read again next time.
            Err(e) => {
                tracing::debug!(bmc = %self.base, error = %e, "service root unreadable; vendor from the system");
                Vendor::detect(&Value::Null, manufacturer.as_deref())
            }
        }
    }

    /// The ResetType values the system accepts (`None`: the BMC does not say).
    async fn allowed_reset_types(&self, system: &Value) -> Result<Option<Vec<String>>, BmcError> {
        let action = system.pointer("/Actions/#ComputerSystem.Reset");
        if let Some(values) = action.and_then(|a| a.get("ResetType@Redfish.AllowableValues")) {
            return Ok(Some(list(values)));
        }
        if let Some(info) = action.and_then(|a| string(a, "@Redfish.ActionInfo")) {
            let info = self.get(&info).await?;
            if let Some(params) = info.get("Parameters").and_then(Value::as_array) {
                for p in params {
                    if string(p, "Name").as_deref() == Some("ResetType") {
                        return Ok(p.get("AllowableValues").map(list));
                    }
                }
            }
        }
        Ok(None)
    }

    /// `On` after a `ForceOff`: a 503 (busy BMC) is retried until the transition deadline;
    /// a timeout is not (the BMC may have taken it), the caller verifies the state.
    async fn reset_retrying(&self, target: &str, reset_type: &str) -> Result<(), BmcError> {
        let deadline = Instant::now() + self.options.transition_timeout;
        loop {
            match self.reset(target, reset_type).await {
                Err(BmcError::Unavailable { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                other => return other,
            }
        }
    }

    /// A reset sent once. When its answer is lost (`may_have_acted`), the power state of the
    /// system at `path` tells whether the BMC carried it out: it did when the state moved
    /// away from `before`, the state read just before sending (a reset or cycle of a running
    /// system reads `PoweringOff`, `Off` or `PoweringOn` for a while). When it has not moved,
    /// nothing tells, and the error stands: the reset is not sent again.
    async fn reset_once(
        &self,
        path: &str,
        target: &str,
        reset_type: &str,
        before: PowerState,
    ) -> Result<(), BmcError> {
        let e = match self.reset(target, reset_type).await {
            Err(e) if e.may_have_acted() => e,
            other => return other,
        };
        let after = match self.get(path).await {
            Ok(v) => string(&v, "PowerState")
                .map(|s| PowerState::from_redfish(&s))
                .unwrap_or(PowerState::Unknown),
            Err(read) => {
                tracing::debug!(bmc = %self.base, error = %read, "power state unreadable after a lost reset");
                PowerState::Unknown
            }
        };
        let acted = after != before && after != PowerState::Unknown;
        tracing::warn!(bmc = %self.base, reset_type, error = %e, ?before, ?after, carried_out = acted, "the answer to a reset was lost; not sent again");
        if acted { Ok(()) } else { Err(e) }
    }

    async fn reset(&self, target: &str, reset_type: &str) -> Result<(), BmcError> {
        self.request(
            Method::POST,
            target,
            Some(&json!({"ResetType": reset_type})),
            &[],
        )
        .await?;
        Ok(())
    }

    /// Polls the power state until `want` or the transition deadline. A BMC busy with the
    /// transition often answers 503 or not at all for a while: such errors are waited out
    /// (until the deadline), not returned.
    async fn wait_power(&self, path: &str, want: PowerState) -> Result<(), BmcError> {
        let deadline = Instant::now() + self.options.transition_timeout;
        loop {
            match self.get(path).await {
                Ok(v) => {
                    let state = string(&v, "PowerState")
                        .map(|s| PowerState::from_redfish(&s))
                        .unwrap_or(PowerState::Unknown);
                    if state == want {
                        return Ok(());
                    }
                }
                Err(e) if e.is_transient() => {
                    tracing::debug!(bmc = %self.base, error = %e, "power state not readable yet");
                }
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(BmcError::TransitionTimeout(self.options.transition_timeout));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The log services of a system or manager; a resource whose logs cannot be listed
    /// (404, unsupported) contributes none, while transport and auth errors propagate.
    async fn log_services_of(&self, resource: &str) -> Result<Vec<String>, BmcError> {
        let v = self.get(resource).await?;
        let Some(l) = link(&v, "LogServices") else {
            return Ok(Vec::new());
        };
        match self.member_links(&l).await {
            Ok(links) => Ok(links),
            Err(e @ (BmcError::Http { .. } | BmcError::Unsupported(_))) => {
                tracing::debug!(bmc = %self.base, resource = %l, error = %e, "skipping log services");
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// The system's virtual media devices: its own `VirtualMedia` (Redfish 1.12 and later,
    /// newer iDRAC firmware), else those of the managers that manage it (`Links.ManagedBy`,
    /// else every manager), where older services keep them.
    async fn media_devices(&self) -> Result<Vec<Value>, BmcError> {
        let (_, system, _) = self.system().await?;
        if let Some(own) = link(&system, "VirtualMedia") {
            match self.members(&own).await {
                Ok(devices) if !devices.is_empty() => return Ok(devices),
                Ok(_) => {}
                Err(e) if e.is_auth() || e.is_transient() => return Err(e),
                // Linked but not served (404, 501...): the managers may have them.
                Err(e) => {
                    tracing::debug!(bmc = %self.base, collection = %own, error = %e, "system virtual media unreadable; trying the managers");
                }
            }
        }
        let mut managers: Vec<String> = system
            .pointer("/Links/ManagedBy")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|m| string(m, "@odata.id")).collect())
            .unwrap_or_default();
        if managers.is_empty() {
            let root = self.root().await?;
            if let Some(all) = root.managers.as_deref() {
                managers = self.member_links(all).await?;
            }
        }
        let mut devices = Vec::new();
        for manager in managers {
            let manager = self.get(&manager).await?;
            if let Some(l) = link(&manager, "VirtualMedia") {
                devices.extend(self.members(&l).await?);
            }
        }
        Ok(devices)
    }

    /// Ejects a device's media: its `EjectMedia` action, else (services before VirtualMedia
    /// 1.2) a PATCH that empties it.
    async fn eject(&self, device: &Value) -> Result<(), BmcError> {
        let path = string(device, "@odata.id").unwrap_or_default();
        let (method, target, body) = match device
            .pointer("/Actions/#VirtualMedia.EjectMedia/target")
            .and_then(Value::as_str)
        {
            Some(action) => (Method::POST, action.to_owned(), json!({})),
            None => (
                Method::PATCH,
                path,
                json!({"Image": null, "Inserted": false}),
            ),
        };
        self.request(method, &target, Some(&body), &[])
            .await
            .map(|_| ())
    }

    /// Attaches `image` to a device: its `InsertMedia` action with `Inserted` and
    /// `WriteProtected`, again with `Image` alone when the BMC refuses those (some Supermicro
    /// boards), else (services before VirtualMedia 1.2) a PATCH.
    async fn insert(&self, device: &Value, image: &str) -> Result<(), BmcError> {
        let path = string(device, "@odata.id").unwrap_or_default();
        let Some(target) = device
            .pointer("/Actions/#VirtualMedia.InsertMedia/target")
            .and_then(Value::as_str)
        else {
            return self
                .request(
                    Method::PATCH,
                    &path,
                    Some(&json!({"Image": image, "Inserted": true})),
                    &[],
                )
                .await
                .map(|_| ());
        };
        let full = json!({"Image": image, "Inserted": true, "WriteProtected": true});
        match self.request(Method::POST, target, Some(&full), &[]).await {
            Err(BmcError::Http {
                status: 400 | 422, ..
            }) => {
                tracing::debug!(bmc = %self.base, device = %path, "InsertMedia refused with Inserted/WriteProtected; sending Image alone");
                self.request(Method::POST, target, Some(&json!({"Image": image})), &[])
                    .await
                    .map(|_| ())
            }
            other => other.map(|_| ()),
        }
    }

    async fn optional_members(&self, resource: &Value, key: &str) -> Vec<Value> {
        match link(resource, key) {
            Some(l) => match self.members(&l).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(bmc = %self.base, resource = %l, error = %e, "skipping inventory part");
                    Vec::new()
                }
            },
            None => Vec::new(),
        }
    }
}

/// The `Members` of one collection page, at most [`MAX_PAGE_MEMBERS`] of them.
fn page_members<'a>(coll: &'a Value, path: &str) -> Result<&'a Vec<Value>, BmcError> {
    let members = coll
        .get("Members")
        .and_then(Value::as_array)
        .ok_or_else(|| BmcError::Malformed(format!("{path} has no Members")))?;
    if members.len() > MAX_PAGE_MEMBERS {
        return Err(BmcError::TooLarge(format!(
            "{path} lists {} members in one page (at most {MAX_PAGE_MEMBERS} are read)",
            members.len()
        )));
    }
    Ok(members)
}

/// A fleet permit (`None` without a fleet limit).
type Permit = Option<tokio::sync::OwnedSemaphorePermit>;

async fn acquire(gate: &Option<Arc<tokio::sync::Semaphore>>) -> Result<Permit, BmcError> {
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

/// DELETE of a session of ours (best effort; sent again once if it timed out: deleting a
/// session twice is harmless). Returns whether the BMC answered.
async fn delete_session(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    timeout: Duration,
    gate: &Option<Arc<tokio::sync::Semaphore>>,
) -> bool {
    for _ in 0..2 {
        let Ok(_permit) = acquire(gate).await else {
            return false;
        };
        let req = http.delete(url).header("X-Auth-Token", token_header(token));
        match execute(req, timeout).await {
            Ok(_) => return true,
            Err(BmcError::Timeout(_)) => continue,
            Err(_) => return false,
        }
    }
    false
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
async fn execute(req: reqwest::RequestBuilder, timeout: Duration) -> Result<Response, BmcError> {
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

/// The answer to the session POST. Its body is never quoted in an error or a log: some
/// BMCs echo the request, password included, in their error messages.
fn login_answer(resp: &Response, sessions: &str, auto: bool) -> Result<Auth, BmcError> {
    match resp.status.as_u16() {
        200 | 201 | 202 | 204 => {}
        404 | 405 | 501 if auto => return Ok(Auth::Basic),
        _ => {
            return Err(match check_status(resp, "POST", sessions) {
                Err(BmcError::Http {
                    status,
                    method,
                    path,
                    ..
                }) => BmcError::Http {
                    status,
                    method,
                    path,
                    message: None,
                },
                Err(e) => e,
                Ok(()) => BmcError::Malformed("login refused".into()),
            });
        }
    }
    let Some(token) = resp.header("X-Auth-Token") else {
        return Err(BmcError::Malformed(
            "session created without an X-Auth-Token".into(),
        ));
    };
    let location = resp
        .header("Location")
        .or_else(|| resp.json().ok().and_then(|v| string(&v, "@odata.id")));
    Ok(Auth::Session { token, location })
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

fn check_status(resp: &Response, method: &str, path: &str) -> Result<(), BmcError> {
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

/// Preferred ResetType values per action, most specific first.
fn reset_candidates(action: PowerAction) -> &'static [&'static str] {
    match action {
        PowerAction::On => &["On", "ForceOn"],
        PowerAction::Off => &["ForceOff"],
        PowerAction::Soft => &["GracefulShutdown"],
        PowerAction::Reset => &["ForceRestart"],
        PowerAction::Cycle => &["PowerCycle"],
    }
}

fn pick<'a>(candidates: &[&'a str], allowed: Option<&[String]>) -> Option<&'a str> {
    match allowed {
        None => candidates.first().copied(),
        Some(allowed) => candidates
            .iter()
            .copied()
            .find(|c| allowed.iter().any(|a| a == c)),
    }
}

fn parse_boot(system: &Value) -> BootOverride {
    let boot = system.get("Boot").cloned().unwrap_or(Value::Null);
    let target = string(&boot, "BootSourceOverrideTarget");
    let enabled = string(&boot, "BootSourceOverrideEnabled");
    BootOverride {
        device: target
            .as_deref()
            .map(BootDevice::from_redfish)
            .unwrap_or(BootDevice::None),
        persistent: enabled.as_deref() == Some("Continuous"),
        enabled: matches!(enabled.as_deref(), Some("Once") | Some("Continuous")),
        mode: string(&boot, "BootSourceOverrideMode")
            .as_deref()
            .and_then(BootMode::from_redfish),
        raw_target: target,
    }
}

fn normalize_mac(mac: &str) -> String {
    mac.trim().to_ascii_lowercase().replace('-', ":")
}

#[async_trait]
impl Bmc for RedfishClient {
    fn protocol(&self) -> Protocol {
        Protocol::Redfish
    }

    async fn power_state(&self) -> Result<PowerState, BmcError> {
        let path = self.system_path().await?;
        let v = self.get(&path).await?;
        let s = string(&v, "PowerState")
            .ok_or_else(|| BmcError::Malformed(format!("{path} has no PowerState")))?;
        Ok(PowerState::from_redfish(&s))
    }

    async fn power(&self, action: PowerAction) -> Result<PowerOutcome, BmcError> {
        let (path, system, _) = self.system().await?;
        let state = string(&system, "PowerState")
            .map(|s| PowerState::from_redfish(&s))
            .unwrap_or(PowerState::Unknown);
        match (action, state) {
            (PowerAction::On, PowerState::On)
            | (PowerAction::Off | PowerAction::Soft, PowerState::Off) => {
                return Ok(PowerOutcome::already(action));
            }
            _ => {}
        }
        let target = system
            .pointer("/Actions/#ComputerSystem.Reset/target")
            .and_then(Value::as_str)
            .ok_or_else(|| BmcError::Unsupported("ComputerSystem.Reset".into()))?
            .to_owned();
        let allowed = self.allowed_reset_types(&system).await?;
        let mut sent = Vec::new();
        // Reset and cycle of a powered-off system: power it on (the requested end state).
        if matches!(action, PowerAction::Reset | PowerAction::Cycle) && state == PowerState::Off {
            let t = pick(reset_candidates(PowerAction::On), allowed.as_deref())
                .ok_or_else(|| BmcError::Unsupported("ResetType On".into()))?;
            self.reset_once(&path, &target, t, state).await?;
            sent.push(t.to_owned());
            return Ok(PowerOutcome {
                action,
                sent,
                already_in_state: false,
            });
        }
        match pick(reset_candidates(action), allowed.as_deref()) {
            Some(t) => {
                self.reset_once(&path, &target, t, state).await?;
                sent.push(t.to_owned());
            }
            None if action == PowerAction::Cycle => {
                // No PowerCycle (HPE iLO, sushy-tools): ForceOff, wait for Off, then On.
                let off = pick(&["ForceOff"], allowed.as_deref())
                    .ok_or_else(|| BmcError::Unsupported("ResetType ForceOff".into()))?;
                let on = pick(reset_candidates(PowerAction::On), allowed.as_deref())
                    .ok_or_else(|| BmcError::Unsupported("ResetType On".into()))?;
                self.reset_once(&path, &target, off, state).await?;
                sent.push(off.to_owned());
                // Whatever the wait gives, On is attempted: a cycle must not leave the
                // host off because the BMC was busy answering.
                let waited = self.wait_power(&path, PowerState::Off).await;
                if let Err(e) = &waited {
                    tracing::warn!(bmc = %self.base, error = %e, "Off not seen during a cycle; sending On anyway");
                }
                self.reset_retrying(&target, on).await?;
                sent.push(on.to_owned());
                waited?;
            }
            None => {
                return Err(BmcError::Unsupported(format!(
                    "ResetType {} (allowed: {})",
                    reset_candidates(action).join("/"),
                    allowed.unwrap_or_default().join(", ")
                )));
            }
        }
        Ok(PowerOutcome {
            action,
            sent,
            already_in_state: false,
        })
    }

    async fn boot_override(&self) -> Result<BootOverride, BmcError> {
        let (_, system, _) = self.system().await?;
        Ok(parse_boot(&system))
    }

    async fn set_boot_override(&self, request: BootRequest) -> Result<BootOverride, BmcError> {
        let (path, system, etag) = self.system().await?;
        let vendor = self.vendor_of(&system).await;
        let current = parse_boot(&system);
        let boot = system
            .get("Boot")
            .ok_or_else(|| BmcError::Unsupported("Boot override (no Boot property)".into()))?;
        let target = request.device.redfish_target();
        if let Some(allowed) = boot.get("BootSourceOverrideTarget@Redfish.AllowableValues")
            && !list(allowed).iter().any(|a| a == target)
        {
            return Err(BmcError::Unsupported(format!("boot target {target}")));
        }
        let enabled = match (request.device, request.persistent) {
            (BootDevice::None, _) => "Disabled",
            (_, true) => "Continuous",
            (_, false) => "Once",
        };
        let mut patch = serde_json::Map::new();
        patch.insert("BootSourceOverrideTarget".into(), target.into());
        patch.insert("BootSourceOverrideEnabled".into(), enabled.into());
        // The mode is only sent when asked for and different, or when the vendor resets it
        // unless it is restated (Supermicro): never flipped by accident.
        let mode = match (request.mode, current.mode) {
            (Some(want), Some(have)) if want != have => Some(want),
            (Some(want), None) => Some(want),
            (_, Some(have)) if vendor.restate_boot_mode() => Some(have),
            _ => None,
        };
        if let Some(m) = mode {
            patch.insert("BootSourceOverrideMode".into(), m.redfish().into());
        }
        let body = json!({"Boot": Value::Object(patch)});
        let mut if_match = etag;
        for attempt in 0..2 {
            let headers: Vec<(&'static str, String)> = match &if_match {
                Some(e) => vec![("If-Match", e.clone())],
                None => Vec::new(),
            };
            match self
                .request(Method::PATCH, &path, Some(&body), &headers)
                .await
            {
                Ok(_) => break,
                // Stale ETag, or an ETag is required (Lenovo XCC): read it again, once.
                Err(BmcError::Http {
                    status: 412 | 428, ..
                }) if attempt == 0 => {
                    // A weak ETag (`W/"..."`) never matches under the strong comparison
                    // If-Match calls for; some BMCs hand out weak ones all the same.
                    let (_, fresh) = self.get_with_etag(&path).await?;
                    if_match = Some(match fresh {
                        Some(e) if !e.starts_with("W/") => e,
                        _ => "*".to_owned(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        let after = self.get(&path).await?;
        Ok(parse_boot(&after))
    }

    async fn inventory(&self) -> Result<Inventory, BmcError> {
        let (_, system, _) = self.system().await?;
        let vendor = self.vendor_of(&system).await;
        let mut inv = Inventory {
            manufacturer: string(&system, "Manufacturer"),
            model: string(&system, "Model"),
            serial_number: string(&system, "SerialNumber"),
            sku: string(&system, "SKU"),
            uuid: string(&system, "UUID"),
            bios_version: string(&system, "BiosVersion"),
            vendor: vendor.to_string(),
            power_state: string(&system, "PowerState")
                .map(|s| PowerState::from_redfish(&s))
                .unwrap_or(PowerState::Unknown),
            ..Default::default()
        };
        inv.health.system = health(&system, true);
        inv.health.processors = system
            .pointer("/ProcessorSummary/Status")
            .and_then(|s| json::status_health(s, true));
        inv.health.memory = system
            .pointer("/MemorySummary/Status")
            .and_then(|s| json::status_health(s, true));
        inv.total_memory_gib = system
            .pointer("/MemorySummary/TotalSystemMemoryGiB")
            .and_then(Value::as_f64);

        for p in self.optional_members(&system, "Processors").await {
            if string(&p, "ProcessorType").is_some_and(|t| t != "CPU") {
                continue;
            }
            inv.cpus.push(Cpu {
                id: string(&p, "Id").unwrap_or_default(),
                name: string(&p, "Name"),
                manufacturer: string(&p, "Manufacturer"),
                model: string(&p, "Model"),
                cores: uint(&p, "TotalCores").map(|v| v as u32),
                threads: uint(&p, "TotalThreads").map(|v| v as u32),
                max_speed_mhz: uint(&p, "MaxSpeedMHz").map(|v| v as u32),
                health: health(&p, false),
            });
        }
        for m in self.optional_members(&system, "Memory").await {
            if m.pointer("/Status/State").and_then(Value::as_str) == Some("Absent") {
                continue;
            }
            inv.memory.push(MemoryModule {
                id: string(&m, "Id").unwrap_or_default(),
                name: string(&m, "Name"),
                capacity_mib: uint(&m, "CapacityMiB"),
                manufacturer: string(&m, "Manufacturer"),
                part_number: string(&m, "PartNumber").map(|s| s.trim().to_owned()),
                serial_number: string(&m, "SerialNumber"),
                speed_mhz: uint(&m, "OperatingSpeedMhz").map(|v| v as u32),
                health: health(&m, false),
            });
        }
        if inv.health.memory.is_none() {
            inv.health.memory = worst_health(inv.memory.iter().map(|m| m.health));
        }
        if inv.health.processors.is_none() {
            inv.health.processors = worst_health(inv.cpus.iter().map(|m| m.health));
        }
        for n in self.optional_members(&system, "EthernetInterfaces").await {
            let mac = string(&n, "MACAddress").or_else(|| string(&n, "PermanentMACAddress"));
            inv.nics.push(Nic {
                id: string(&n, "Id").unwrap_or_default(),
                mac_address: mac.map(|m| normalize_mac(&m)),
                speed_mbps: uint(&n, "SpeedMbps"),
                link_up: string(&n, "LinkStatus").map(|s| s == "LinkUp"),
                health: health(&n, false),
            });
        }
        inv.health.network = worst_health(inv.nics.iter().map(|n| n.health));
        // Storage (drives hang off each controller) or the older SimpleStorage.
        for s in self.optional_members(&system, "Storage").await {
            let drives = s
                .get("Drives")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for d in drives {
                let Some(l) = string(&d, "@odata.id") else {
                    continue;
                };
                match self.get(&l).await {
                    Ok(d) => inv.disks.push(Disk {
                        id: string(&d, "Id").unwrap_or_default(),
                        name: string(&d, "Name"),
                        model: string(&d, "Model"),
                        serial_number: string(&d, "SerialNumber"),
                        capacity_bytes: uint(&d, "CapacityBytes"),
                        media_type: string(&d, "MediaType"),
                        protocol: string(&d, "Protocol"),
                        health: health(&d, false),
                    }),
                    Err(e) => {
                        tracing::debug!(bmc = %self.base, drive = %l, error = %e, "skipping drive")
                    }
                }
            }
            inv.health.storage = worst_health([inv.health.storage, health(&s, true)]);
            inv.storage_controllers.push(component(&s));
        }
        for d in self.optional_members(&system, "PCIeDevices").await {
            inv.pcie_devices.push(component(&d));
        }
        self.read_chassis_sensors(&mut inv).await;
        if inv.disks.is_empty() {
            for s in self.optional_members(&system, "SimpleStorage").await {
                for (i, d) in s
                    .get("Devices")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                {
                    inv.disks.push(Disk {
                        id: format!("{}/{}", string(&s, "Id").unwrap_or_default(), i),
                        name: string(d, "Name"),
                        model: string(d, "Model").or_else(|| string(d, "Name")),
                        serial_number: None,
                        capacity_bytes: uint(d, "CapacityBytes"),
                        media_type: None,
                        protocol: None,
                        health: health(d, false),
                    });
                }
            }
        }
        if inv.health.storage.is_none() {
            inv.health.storage = worst_health(inv.disks.iter().map(|d| d.health));
        }
        // Chassis and manager: identity fallbacks, BMC firmware.
        if let Some(ch) = system
            .pointer("/Links/Chassis/0/@odata.id")
            .and_then(Value::as_str)
            && let Ok(ch) = self.get(ch).await
        {
            inv.health.chassis = health(&ch, true);
            inv.manufacturer = inv.manufacturer.or_else(|| string(&ch, "Manufacturer"));
            inv.model = inv.model.or_else(|| string(&ch, "Model"));
            inv.serial_number = inv.serial_number.or_else(|| string(&ch, "SerialNumber"));
            inv.sku = inv.sku.or_else(|| string(&ch, "SKU"));
        }
        let manager = match system
            .pointer("/Links/ManagedBy/0/@odata.id")
            .and_then(Value::as_str)
        {
            Some(m) => Some(m.to_owned()),
            None => {
                let root = self.root().await?;
                match &root.managers {
                    Some(l) => self.member_links(l).await?.into_iter().next(),
                    None => None,
                }
            }
        };
        if let Some(m) = manager
            && let Ok(m) = self.get(&m).await
        {
            inv.bmc_firmware_version = string(&m, "FirmwareVersion");
            inv.bmc_model = string(&m, "Model");
            inv.health.bmc = health(&m, false);
        }
        Ok(inv)
    }

    async fn event_log(&self) -> Result<Vec<LogEntry>, BmcError> {
        let system = self.system_path().await?;
        let mut services = self.log_services_of(&system).await?;
        let root = self.root().await?;
        if let Some(managers) = &root.managers {
            for m in self.member_links(managers).await? {
                services.extend(self.log_services_of(&m).await?);
            }
        }
        if services.is_empty() {
            return Err(BmcError::Unsupported("LogServices".into()));
        }
        let mut entries = Vec::new();
        for service in services {
            let s = self.get(&service).await?;
            let Some(l) = link(&s, "Entries") else {
                continue;
            };
            let members = match self.log_entries(&l).await {
                Ok(m) => m,
                Err(e @ BmcError::Http { .. }) => {
                    tracing::debug!(bmc = %self.base, log = %service, error = %e, "skipping log");
                    continue;
                }
                Err(e) => return Err(e),
            };
            for e in members {
                let Some(id) = string(&e, "@odata.id") else {
                    continue;
                };
                entries.push(LogEntry {
                    id,
                    log: service.clone(),
                    created: string(&e, "Created"),
                    severity: string(&e, "Severity"),
                    message: string(&e, "Message").unwrap_or_default(),
                    message_id: string(&e, "MessageId"),
                    entry_type: string(&e, "EntryType"),
                });
            }
        }
        entries.sort_by(|a, b| (&a.created, &a.id).cmp(&(&b.created, &b.id)));
        Ok(entries)
    }

    async fn virtual_media(&self) -> Result<Vec<MediaSlot>, BmcError> {
        Ok(self.media_devices().await?.iter().map(media_slot).collect())
    }

    async fn set_virtual_media(
        &self,
        kind: MediaKind,
        image: Option<String>,
    ) -> Result<(), BmcError> {
        let devices = self.media_devices().await?;
        let slots: Vec<(MediaSlot, &Value)> = devices
            .iter()
            .map(|d| (media_slot(d), d))
            .filter(|(slot, _)| slot.takes(kind))
            .collect();
        if slots.is_empty() {
            let offered: Vec<String> = devices
                .iter()
                .flat_map(|d| media_slot(d).media_types)
                .collect();
            return Err(BmcError::Unsupported(format!(
                "virtual media of kind {} (the BMC offers: {})",
                kind.redfish(),
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            )));
        }
        let Some(image) = image else {
            for (slot, device) in &slots {
                if slot.inserted {
                    self.eject(device).await?;
                }
            }
            return Ok(());
        };
        // Already attached: nothing is sent (ejecting it again could pull the media from
        // under a host that is booting from it).
        if slots
            .iter()
            .any(|(s, _)| s.inserted && s.image.as_deref() == Some(image.as_str()))
        {
            return Ok(());
        }
        // The first device that takes the kind, emptied first (as bmclib does: inserting
        // into an occupied device fails on many BMCs).
        let (slot, device) = &slots[0];
        if slot.inserted {
            self.eject(device).await?;
        }
        self.insert(device, &image).await
    }

    async fn close(&self) -> Result<(), BmcError> {
        let auth = std::mem::take(&mut *self.auth.lock().await);
        if let Auth::Session {
            location: Some(loc),
            ..
        } = &auth
        {
            // Deleting our own session twice is harmless (the second gets 404): hedged.
            let resp = self
                .send_idempotent(Method::DELETE, loc, &auth, &[])
                .await?;
            self.stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(bmc = %self.base, status = resp.status.as_u16(), "redfish session closed");
            // 401/404: the session already expired; nothing more to do.
            if !resp.status.is_success() && !matches!(resp.status.as_u16(), 401 | 404) {
                check_status(&resp, "DELETE", loc)?;
            }
        }
        Ok(())
    }
}

/// A virtual media device as the BMC reports it. `Inserted` is optional in the schema: an
/// attached image without it counts as inserted.
fn media_slot(device: &Value) -> MediaSlot {
    let image = string(device, "Image");
    MediaSlot {
        id: string(device, "@odata.id").unwrap_or_default(),
        media_types: device.get("MediaTypes").map(list).unwrap_or_default(),
        inserted: device
            .get("Inserted")
            .and_then(Value::as_bool)
            .unwrap_or(image.is_some()),
        image,
    }
}

/// A resource's `Name` (else `Id`) and health.
fn component(resource: &Value) -> Component {
    Component {
        name: string(resource, "Name")
            .or_else(|| string(resource, "Id"))
            .unwrap_or_default(),
        health: health(resource, false),
        reading: None,
    }
}

impl RedfishClient {
    /// Fans, temperatures, power supplies and network adapters of every chassis (whatever it is
    /// named: Seeder reads only a chassis named `Computer System Chassis`). A part that cannot
    /// be read is skipped.
    async fn read_chassis_sensors(&self, inv: &mut Inventory) {
        let Ok(root) = self.root().await else {
            return;
        };
        let Some(chassis) = &root.chassis else {
            return;
        };
        let links = match self.member_links(chassis).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(bmc = %self.base, error = %e, "skipping chassis sensors");
                return;
            }
        };
        for l in links {
            let Ok(ch) = self.get(&l).await else {
                continue;
            };
            if let Some(t) = link(&ch, "Thermal")
                && let Ok(t) = self.get(&t).await
            {
                for f in t
                    .get("Fans")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    inv.fans.push(Component {
                        name: string(f, "Name")
                            .or_else(|| string(f, "FanName"))
                            .or_else(|| string(f, "MemberId"))
                            .unwrap_or_default(),
                        health: health(f, false),
                        reading: f.get("Reading").and_then(Value::as_f64),
                    });
                }
                for s in t
                    .get("Temperatures")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    inv.temperatures.push(Temperature {
                        name: string(s, "Name")
                            .or_else(|| string(s, "MemberId"))
                            .unwrap_or_default(),
                        reading_celsius: s.get("ReadingCelsius").and_then(Value::as_f64),
                        health: health(s, false),
                    });
                }
            }
            if let Some(p) = link(&ch, "Power")
                && let Ok(p) = self.get(&p).await
            {
                for s in p
                    .get("PowerSupplies")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    inv.power_supplies.push(component(s));
                }
            }
            for a in self.optional_members(&ch, "NetworkAdapters").await {
                inv.network_adapters.push(component(&a));
            }
        }
    }
}

impl Drop for RedfishClient {
    /// Best effort: a client dropped with a live session logs out in the background.
    fn drop(&mut self) {
        let auth = std::mem::take(self.auth.get_mut());
        let Auth::Session {
            token,
            location: Some(loc),
        } = auth
        else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let req = self
            .http
            .delete(self.url(&loc))
            .header("X-Auth-Token", token_header(&token))
            .timeout(self.options.timeout);
        let stats = self.stats.clone();
        handle.spawn(async move {
            if req.send().await.is_ok() {
                stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_session_token_never_reaches_debug_output() {
        let token = "tok-5ecret-0123456789";
        let auth = Auth::Session {
            token: token.into(),
            location: Some("/redfish/v1/SessionService/Sessions/7".into()),
        };
        let shown = format!("{auth:?}");
        assert!(!shown.contains(token), "{shown}");
        assert!(shown.contains("Sessions/7"), "{shown}");
        let ep = Endpoint::parse("https://bmc.example:8443", None).unwrap();
        let c = RedfishClient::new(&ep, "admin", Password::new("pw"), RedfishOptions::default())
            .unwrap();
        let req = c
            .build(Method::GET, "/redfish/v1/Systems", None, &auth, &[])
            .build()
            .unwrap();
        let header = req.headers().get("X-Auth-Token").unwrap();
        assert!(header.is_sensitive());
        assert_eq!(header.to_str().unwrap(), token);
        let shown = format!("{req:?} {:?}", req.headers());
        assert!(!shown.contains(token), "{shown}");
    }

    #[test]
    fn a_link_names_the_usual_sessions_uri_with_or_without_host_and_slash() {
        for link in [
            "/redfish/v1/SessionService/Sessions",
            "/redfish/v1/SessionService/Sessions/",
            "https://bmc.example/redfish/v1/SessionService/Sessions",
        ] {
            assert!(same_path(link, SESSIONS_URI), "{link}");
        }
        assert!(!same_path(
            "/redfish/v1/AccountService/Sessions",
            SESSIONS_URI
        ));
    }

    #[test]
    fn copies_stay_within_ten_and_one_in_twenty_requests() {
        let stats = RedfishStats::default();
        stats.requests.store(12, Ordering::Relaxed);
        stats.hedged.store(9, Ordering::Relaxed);
        assert!(stats.copy_allowed());
        stats.hedged.store(10, Ordering::Relaxed);
        assert!(!stats.copy_allowed());
        stats.requests.store(219, Ordering::Relaxed);
        assert!(!stats.copy_allowed());
        stats.requests.store(220, Ordering::Relaxed);
        assert!(stats.copy_allowed());
    }

    #[test]
    fn a_steady_bmc_is_hedged_soon_after_its_usual_time_and_an_erratic_one_beyond_its_spread() {
        let steady = AnswerTime::default();
        assert_eq!(steady.hedge_after(), None);
        for _ in 0..40 {
            steady.fold(50_000);
        }
        let after = steady.hedge_after().unwrap();
        assert_eq!(after, Duration::from_millis(100));
        // Answers of 20 ms and 200 ms in turn: a copy only well beyond the slow ones.
        let erratic = AnswerTime::default();
        for i in 0..40 {
            erratic.fold(if i % 2 == 0 { 20_000 } else { 200_000 });
        }
        let after = erratic.hedge_after().unwrap();
        assert!(after > Duration::from_millis(400), "{after:?}");
    }

    #[test]
    fn the_kept_service_root_holds_every_link_and_hint_read_later() {
        let root = serde_json::json!({
            "@odata.id": "/redfish/v1",
            "Id": "RootService",
            "Product": "Integrated Dell Remote Access Controller",
            "RedfishVersion": "1.17.0",
            "UUID": "4c4c4544-0000-0000-0000-000000000000",
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
            "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
            "Managers": {"@odata.id": "/redfish/v1/Managers"},
            "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
            "EventService": {"@odata.id": "/redfish/v1/EventService"},
            "AccountService": {"@odata.id": "/redfish/v1/AccountService"},
            "JsonSchemas": {"@odata.id": "/redfish/v1/JsonSchemas"},
            "Registries": {"@odata.id": "/redfish/v1/Registries"},
            "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
            "ProtocolFeaturesSupported": {
                "TopSkipQuery": true,
                "ExpandQuery": {"Levels": true, "MaxLevels": 1},
                "SelectQuery": true
            },
            "Oem": {"Dell": {"ManagerMACAddress": "aa:bb", "ServiceTag": "ABC1234"}}
        });
        let kept = ServiceRoot::of(&root);
        assert_eq!(
            kept,
            ServiceRoot {
                systems: Some("/redfish/v1/Systems".into()),
                chassis: Some("/redfish/v1/Chassis".into()),
                managers: Some("/redfish/v1/Managers".into()),
                session_service: Some("/redfish/v1/SessionService".into()),
                event_service: Some("/redfish/v1/EventService".into()),
                sessions: Some("/redfish/v1/SessionService/Sessions".into()),
                top_skip: true,
                vendor: Vendor::Dell,
            }
        );
        // The root's vendor hint wins over the system's manufacturer; without one, the
        // manufacturer decides.
        assert_eq!(kept.vendor_with(Some("Supermicro")), Vendor::Dell);
        let plain = ServiceRoot::of(&serde_json::json!({"@odata.id": "/redfish/v1"}));
        assert_eq!(plain.vendor_with(Some("Supermicro")), Vendor::Supermicro);
        assert_eq!(plain.vendor_with(None), Vendor::Generic);
        assert!(!plain.top_skip && plain.systems.is_none());
    }
}
