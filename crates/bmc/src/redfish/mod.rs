//! Redfish client: logs in at the session collection's usual URI and reads the computer
//! systems at theirs, and reads the service root (whose links it then follows) only where a
//! BMC serves them elsewhere or a call needs the root; SessionService login with
//! `X-Auth-Token`, re-login on 401, logout on close or drop, HTTP Basic fallback; TLS
//! verified by default; a timeout on every call.
//!
//! One file per concern: `options` (settings), `tls` (certificate pinning), `transport` (one
//! HTTP exchange, its bounds and errors), `hedging` (copies of slow reads), `sessions` (login,
//! re-login, logout, authenticated requests), `discovery` (service root, system, vendor),
//! `collections` (members and pages), the calls of [`Bmc`] in `power`, `boot`, `media`, `logs`
//! and `inventory` (fetching, and a pure mapping of the documents), `events` (server-sent
//! events) and `subscriptions` (push subscriptions).

mod boot;
mod collections;
mod discovery;
mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod hedging;
mod inventory;
mod json;
mod logs;
mod media;
mod options;
mod power;
mod sensors;
mod sessions;
mod subscriptions;
mod tls;
mod transport;
mod vendor;

pub use collections::MAX_PAGE_MEMBERS;
pub use events::DEFAULT_IDLE_TIMEOUT;
pub use hedging::{AnswerTime, RedfishStats};
pub use options::{AuthMode, RedfishOptions, TlsOptions};
pub use tls::fingerprint_text;
pub use transport::{MAX_BODY_BYTES, http_client};
pub use vendor::Vendor;

use crate::error::BmcError;
use crate::secret::Password;
use crate::types::*;
use crate::{Bmc, Endpoint};
use async_trait::async_trait;
use boot::parse_boot;
use discovery::Discovered;
use json::string;
use sessions::{Auth, Relogin};
use std::sync::Arc;
use tokio::sync::Mutex;

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
        self.power_action(action).await
    }

    async fn boot_override(&self) -> Result<BootOverride, BmcError> {
        let (_, system, _) = self.system().await?;
        Ok(parse_boot(&system))
    }

    async fn set_boot_override(&self, request: BootRequest) -> Result<BootOverride, BmcError> {
        self.set_boot(request).await
    }

    async fn inventory(&self) -> Result<Inventory, BmcError> {
        self.read_inventory().await
    }

    async fn event_log(&self) -> Result<Vec<LogEntry>, BmcError> {
        self.read_event_log().await
    }

    async fn sensors(&self) -> Result<Vec<Sensor>, BmcError> {
        self.read_sensors().await
    }

    async fn pushed_events(&self, last_event_id: Option<String>) -> Result<PushedEvents, BmcError> {
        let s = self
            .event_stream_from(events::DEFAULT_IDLE_TIMEOUT, last_event_id)
            .await?;
        Ok(Box::pin(s))
    }

    async fn virtual_media(&self) -> Result<Vec<MediaSlot>, BmcError> {
        self.media_slots().await
    }

    async fn set_virtual_media(
        &self,
        kind: MediaKind,
        image: Option<String>,
    ) -> Result<(), BmcError> {
        self.attach_media(kind, image).await
    }

    async fn ensure_event_subscription(
        &self,
        subscription: &EventSubscription,
        stale: StaleContext<'_>,
    ) -> Result<Subscribed, BmcError> {
        self.ensure_subscription(subscription, stale).await
    }

    async fn remove_event_subscription(
        &self,
        destination: &str,
        context: &str,
    ) -> Result<usize, BmcError> {
        self.remove_subscription(destination, context).await
    }

    async fn close(&self) -> Result<(), BmcError> {
        self.logout().await
    }
}
