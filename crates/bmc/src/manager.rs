//! The session manager: one client (and so one session) per BMC reused across calls, at most
//! `per_bmc_limit` requests in flight per BMC (default 1), at most `fleet_limit` across the
//! fleet, the working protocol detected once and remembered, every session closed on shutdown.

use crate::error::BmcError;
use crate::redfish::{
    AuthMode, RedfishClient, RedfishOptions, RedfishStats, TlsOptions, http_client,
};
use crate::secret::Password;
use crate::types::*;
use crate::{Bmc, Endpoint};
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Receives what the manager sees, for metrics: every call through a [`ManagedBmc`] and every
/// client (session) opened and dropped. Labels are low-cardinality: a protocol, an operation
/// name (`power_state`, `power`, ...), `ok` or a [`BmcError::kind`].
pub trait BmcObserver: Send + Sync {
    /// A call ended. `protocol` is `None` when no protocol could be reached (detection failed).
    fn call(
        &self,
        protocol: Option<Protocol>,
        operation: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        let _ = (protocol, operation, outcome, took);
    }

    /// A client connected to a BMC: it holds one session, reused by every call to that BMC.
    fn session_opened(&self, protocol: Protocol) {
        let _ = protocol;
    }

    /// That client is gone (logged out, evicted, replaced or shut down).
    fn session_closed(&self, protocol: Protocol) {
        let _ = protocol;
    }
}

/// A shared observer, or none.
#[derive(Clone, Default)]
pub struct Observer(Option<Arc<dyn BmcObserver>>);

impl Observer {
    pub fn new(observer: Arc<dyn BmcObserver>) -> Self {
        Observer(Some(observer))
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(Some)"
        } else {
            "Observer(None)"
        })
    }
}

/// Reports a session closed when the last clone of a connected client is dropped.
struct SessionGuard {
    observer: Arc<dyn BmcObserver>,
    protocol: Protocol,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.observer.session_closed(self.protocol);
    }
}

/// How to reach one BMC.
#[derive(Clone, Debug)]
pub struct BmcConfig {
    pub endpoint: Endpoint,
    pub username: String,
    pub password: Password,
    /// `None`: detect (Redfish first, then the other registered connectors).
    pub protocol: Option<Protocol>,
    /// Skip TLS verification (rufio `insecureTLS`).
    pub insecure_tls: bool,
    /// Extra trusted roots (PEM).
    pub ca_bundle_pem: Option<Arc<Vec<u8>>>,
    /// Trust only the certificate with this SHA-256 fingerprint (Redfish over HTTPS).
    pub pinned_sha256: Option<[u8; 32]>,
    /// The Redfish computer system to manage, by its `Name` (or `Id`), on a BMC that has
    /// several (rufio `providerOptions.redfish.systemName`); `None`: the first one.
    pub system_name: Option<String>,
    /// Redfish with HTTP Basic authentication on every request, never a session (rufio
    /// `providerOptions.redfish.useBasicAuth`); `false`: a session when the BMC offers one.
    pub basic_auth: bool,
}

impl BmcConfig {
    /// One client per BMC, account, managed system and authentication: each is part of a
    /// client's state.
    pub fn key(&self) -> String {
        let mut key = format!("{}|{}", self.endpoint, self.username);
        if let Some(system) = &self.system_name {
            key.push_str(&format!("|{system}"));
        }
        if self.basic_auth {
            key.push_str("|basic");
        }
        key
    }
}

/// A way to reach a BMC with one protocol. The IPMI crate provides one for RMCP+.
#[async_trait]
pub trait Connector: Send + Sync {
    fn protocol(&self) -> Protocol;
    /// Builds a client and checks that the protocol answers at this endpoint, without
    /// changing the machine (a Redfish client checks by logging in, and keeps the session).
    async fn connect(&self, config: &BmcConfig) -> Result<Arc<dyn Bmc>, BmcError>;

    /// Like `connect`, with the client taking a permit of `gate` (the manager's fleet limit)
    /// for each request or exchange it sends, the probe included. Connectors that do not
    /// override this (and `gates_requests`) are limited by the manager for whole calls.
    async fn connect_gated(
        &self,
        config: &BmcConfig,
        gate: Arc<Semaphore>,
    ) -> Result<Arc<dyn Bmc>, BmcError> {
        let _ = gate;
        self.connect(config).await
    }

    /// Whether clients from `connect_gated` take the gate per request themselves.
    fn gates_requests(&self) -> bool {
        false
    }
}

/// Time a BMC has to answer its logout at shutdown ([`SessionManager::shutdown`]).
pub const LOGOUT_DEADLINE: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct ManagerOptions {
    /// Requests in flight per BMC. Most BMCs serialise anyway; 1 is the safe default.
    pub per_bmc_limit: usize,
    /// Requests in flight across the fleet (a hedged read and its copies count once).
    pub fleet_limit: usize,
    /// Redfish client settings (timeout, auth mode); TLS comes from each [`BmcConfig`].
    pub redfish: RedfishOptions,
    /// Told of every call and session (metrics).
    pub observer: Observer,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            per_bmc_limit: 1,
            fleet_limit: 64,
            redfish: RedfishOptions::default(),
            observer: Observer::default(),
        }
    }
}

/// HTTP clients by TLS setting (insecure, CA bundle, pinned certificate).
type Pools = Mutex<HashMap<(bool, Option<Arc<Vec<u8>>>, Option<[u8; 32]>), reqwest::Client>>;

/// The built-in Redfish connector; HTTP clients (connection pools) are shared per TLS setting.
pub struct RedfishConnector {
    options: RedfishOptions,
    stats: Arc<RedfishStats>,
    pools: Pools,
}

impl RedfishConnector {
    pub fn new(options: RedfishOptions) -> Self {
        RedfishConnector {
            options,
            stats: Arc::default(),
            pools: Mutex::default(),
        }
    }

    pub fn stats(&self) -> &Arc<RedfishStats> {
        &self.stats
    }

    fn client_for(
        &self,
        config: &BmcConfig,
        gate: Option<Arc<Semaphore>>,
    ) -> Result<RedfishClient, BmcError> {
        let mut options = self.options.clone();
        options.tls = TlsOptions {
            insecure: config.insecure_tls,
            ca_bundle_pem: config.ca_bundle_pem.as_deref().cloned(),
            pinned_sha256: config.pinned_sha256,
        };
        options.system_name = config.system_name.clone();
        if config.basic_auth {
            options.auth = AuthMode::Basic;
        }
        let key = (
            config.insecure_tls,
            config.ca_bundle_pem.clone(),
            config.pinned_sha256,
        );
        let http = {
            let mut pools = self
                .pools
                .lock()
                .map_err(|_| BmcError::Config("connection pool lock poisoned".into()))?;
            match pools.get(&key) {
                Some(c) => c.clone(),
                None => {
                    let c = http_client(&options)?;
                    pools.insert(key, c.clone());
                    c
                }
            }
        };
        let client = RedfishClient::with_http(
            http,
            &config.endpoint,
            config.username.clone(),
            config.password.clone(),
            options,
            self.stats.clone(),
        );
        Ok(match gate {
            Some(g) => client.with_gate(g),
            None => client,
        })
    }
}

#[async_trait]
impl Connector for RedfishConnector {
    fn protocol(&self) -> Protocol {
        Protocol::Redfish
    }

    async fn connect(&self, config: &BmcConfig) -> Result<Arc<dyn Bmc>, BmcError> {
        let client = self.client_for(config, None)?;
        client.probe().await?;
        Ok(Arc::new(client))
    }

    async fn connect_gated(
        &self,
        config: &BmcConfig,
        gate: Arc<Semaphore>,
    ) -> Result<Arc<dyn Bmc>, BmcError> {
        let client = self.client_for(config, Some(gate))?;
        client.probe().await?;
        Ok(Arc::new(client))
    }

    fn gates_requests(&self) -> bool {
        true
    }
}

/// A connected client, and whether it takes the fleet permit per request itself.
#[derive(Clone)]
struct Connected {
    bmc: Arc<dyn Bmc>,
    gated: bool,
    _session: Option<Arc<SessionGuard>>,
}

struct Entry {
    config: BmcConfig,
    permits: Semaphore,
    client: tokio::sync::Mutex<Option<Connected>>,
    protocol: Mutex<Option<Protocol>>,
}

/// Owns the clients of a fleet of BMCs.
pub struct SessionManager {
    options: ManagerOptions,
    fleet: Arc<Semaphore>,
    redfish: Arc<RedfishConnector>,
    connectors: Vec<Arc<dyn Connector>>,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    closed: AtomicBool,
}

impl SessionManager {
    pub fn new(options: ManagerOptions) -> Arc<Self> {
        Self::with_connectors(options, Vec::new())
    }

    /// `extra` connectors (IPMI) are tried after Redfish when the protocol is not given.
    pub fn with_connectors(options: ManagerOptions, extra: Vec<Arc<dyn Connector>>) -> Arc<Self> {
        let redfish = Arc::new(RedfishConnector::new(options.redfish.clone()));
        let mut connectors: Vec<Arc<dyn Connector>> = vec![redfish.clone()];
        connectors.extend(extra);
        Arc::new(SessionManager {
            fleet: Arc::new(Semaphore::new(options.fleet_limit.max(1))),
            options,
            redfish,
            connectors,
            entries: Mutex::default(),
            closed: AtomicBool::new(false),
        })
    }

    /// Redfish counters over the fleet (sessions opened/closed, re-logins, requests).
    pub fn redfish_stats(&self) -> &Arc<RedfishStats> {
        self.redfish.stats()
    }

    /// A handle to one BMC. Handles for the same endpoint and user share the client, the
    /// session and the per-BMC limit; a changed password replaces the client.
    pub fn bmc(self: &Arc<Self>, config: BmcConfig) -> ManagedBmc {
        let key = config.key();
        let mut replaced = None;
        let entry = {
            let mut entries = match self.entries.lock() {
                Ok(e) => e,
                Err(poisoned) => poisoned.into_inner(),
            };
            let fresh = |config: BmcConfig| {
                Arc::new(Entry {
                    permits: Semaphore::new(self.options.per_bmc_limit.max(1)),
                    client: tokio::sync::Mutex::new(None),
                    protocol: Mutex::new(config.protocol),
                    config,
                })
            };
            match entries.get(&key) {
                Some(e)
                    if e.config.password == config.password
                        && e.config.insecure_tls == config.insecure_tls
                        && e.config.ca_bundle_pem == config.ca_bundle_pem
                        && e.config.pinned_sha256 == config.pinned_sha256
                        && (config.protocol.is_none()
                            || e.config.protocol.is_none()
                            || e.config.protocol == config.protocol) =>
                {
                    e.clone()
                }
                _ => {
                    let e = fresh(config);
                    replaced = entries.insert(key, e.clone());
                    e
                }
            }
        };
        if let Some(old) = replaced {
            tokio::spawn(async move {
                if let Some(c) = old.client.lock().await.take() {
                    let _ = c.bmc.close().await;
                }
            });
        }
        ManagedBmc {
            manager: self.clone(),
            entry,
        }
    }

    /// The protocol detected for this BMC, once a call went through.
    pub fn detected_protocol(&self, config: &BmcConfig) -> Option<Protocol> {
        let entries = self.entries.lock().ok()?;
        let e = entries.get(&config.key())?;
        *e.protocol.lock().ok()?
    }

    /// BMC requests in flight across the fleet (fleet permits taken), and the limit.
    pub fn fleet_in_flight(&self) -> (usize, usize) {
        let limit = self.options.fleet_limit.max(1);
        (limit.saturating_sub(self.fleet.available_permits()), limit)
    }

    /// Closes every session (Redfish logout), at most `fleet_limit` at a time. Returns the
    /// number of clients closed. Later calls through existing handles fail.
    pub async fn shutdown(&self) -> usize {
        self.shutdown_within(LOGOUT_DEADLINE).await
    }

    /// Closes every session like [`SessionManager::shutdown`], giving each BMC at most `per_bmc`
    /// (a login still in flight included) so that dead BMCs cannot hold up the others or the
    /// process: the logouts run in parallel (up to the fleet limit), and a BMC that does not
    /// answer in time is left (its session expires on the BMC). No session is opened after this
    /// starts. Returns the number of sessions closed or abandoned.
    pub async fn shutdown_within(&self, per_bmc: Duration) -> usize {
        self.closed.store(true, Ordering::SeqCst);
        let entries: Vec<Arc<Entry>> = match self.entries.lock() {
            Ok(mut e) => e.drain().map(|(_, v)| v).collect(),
            Err(poisoned) => poisoned.into_inner().drain().map(|(_, v)| v).collect(),
        };
        futures::stream::iter(entries)
            .map(|e| async move {
                let logout = async {
                    let client = e.client.lock().await.take();
                    match client {
                        Some(c) => {
                            if let Err(err) = c.bmc.close().await {
                                tracing::debug!(bmc = %e.config.endpoint, error = %err, "logout failed");
                            }
                            1
                        }
                        None => 0,
                    }
                };
                match tokio::time::timeout(per_bmc, logout).await {
                    Ok(n) => n,
                    Err(_) => {
                        tracing::debug!(bmc = %e.config.endpoint, "no logout answer in time; the BMC expires the session");
                        1
                    }
                }
            })
            .buffer_unordered(self.options.fleet_limit.max(1))
            .fold(0, |acc, n| async move { acc + n })
            .await
    }

    /// Forgets one BMC: its session is closed (Redfish logout, IPMI Close Session) and the
    /// next handle for it starts afresh. Handles still held keep working on their own
    /// client until dropped. Returns whether the BMC was known.
    pub async fn evict(&self, config: &BmcConfig) -> bool {
        let removed = match self.entries.lock() {
            Ok(mut e) => e.remove(&config.key()),
            Err(poisoned) => poisoned.into_inner().remove(&config.key()),
        };
        match removed {
            Some(e) => {
                close_entry(&e).await;
                true
            }
            None => false,
        }
    }

    /// Forgets one BMC like [`SessionManager::evict`], but only if no handle refers to it: a
    /// handle in use would log in again on its own client, a session nobody logs out. Returns
    /// `Some(true)` if evicted, `Some(false)` if in use (try again later), `None` if unknown.
    pub async fn evict_unused(&self, config: &BmcConfig) -> Option<bool> {
        let removed = {
            let mut entries = match self.entries.lock() {
                Ok(e) => e,
                Err(poisoned) => poisoned.into_inner(),
            };
            let key = config.key();
            // The map holds one reference; a handle holds another.
            if Arc::strong_count(entries.get(&key)?) > 1 {
                return Some(false);
            }
            entries.remove(&key)?
        };
        close_entry(&removed).await;
        Some(true)
    }

    /// Keeps the BMCs for which `keep` is true and evicts (logs out of) the others, for a
    /// controller that knows its current set of BMCs. Returns the number evicted.
    pub async fn retain(&self, keep: impl Fn(&BmcConfig) -> bool) -> usize {
        self.evict_where(|e| !keep(&e.config)).await
    }

    /// Evicts every BMC no handle refers to any more ([`ManagedBmc`] dropped everywhere).
    pub async fn evict_unreferenced(&self) -> usize {
        // The map holds one reference; a handle holds another.
        self.evict_where(|e| Arc::strong_count(e) == 1).await
    }

    /// BMCs currently known to the manager.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    /// Whether the manager knows no BMC.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    async fn evict_where(&self, evict: impl Fn(&Arc<Entry>) -> bool) -> usize {
        let gone: Vec<Arc<Entry>> = {
            let mut entries = match self.entries.lock() {
                Ok(e) => e,
                Err(poisoned) => poisoned.into_inner(),
            };
            let keys: Vec<String> = entries
                .iter()
                .filter(|(_, e)| evict(e))
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| entries.remove(k)).collect()
        };
        let n = gone.len();
        futures::stream::iter(gone)
            .for_each_concurrent(self.options.fleet_limit.max(1), |e| async move {
                close_entry(&e).await;
            })
            .await;
        n
    }

    async fn client(&self, entry: &Entry) -> Result<Connected, BmcError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(BmcError::Config("the session manager is shut down".into()));
        }
        let mut slot = entry.client.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let known = entry.protocol.lock().ok().and_then(|p| *p);
        let candidates: Vec<&Arc<dyn Connector>> = match known {
            Some(p) => self
                .connectors
                .iter()
                .filter(|c| c.protocol() == p)
                .collect(),
            None => self.connectors.iter().collect(),
        };
        if candidates.is_empty() {
            return Err(BmcError::Unsupported(format!(
                "no {} client is available",
                known.map(|p| p.to_string()).unwrap_or_default()
            )));
        }
        let mut first_error = None;
        for c in candidates {
            let gated = c.gates_requests();
            let attempt = if gated {
                c.connect_gated(&entry.config, self.fleet.clone()).await
            } else {
                match self.fleet.acquire().await {
                    Ok(_permit) => c.connect(&entry.config).await,
                    Err(_) => Err(BmcError::Config("fleet limit closed".into())),
                }
            };
            match attempt {
                Ok(bmc) if self.closed.load(Ordering::SeqCst) => {
                    // Shut down while logging in: this session is nobody's to log out later.
                    let _ = tokio::time::timeout(LOGOUT_DEADLINE, bmc.close()).await;
                    return Err(BmcError::Config("the session manager is shut down".into()));
                }
                Ok(bmc) => {
                    let session = self.options.observer.0.clone().map(|observer| {
                        observer.session_opened(c.protocol());
                        Arc::new(SessionGuard {
                            observer,
                            protocol: c.protocol(),
                        })
                    });
                    let client = Connected {
                        bmc,
                        gated,
                        _session: session,
                    };
                    if let Ok(mut p) = entry.protocol.lock() {
                        if p.is_none() {
                            tracing::info!(bmc = %entry.config.endpoint, protocol = %c.protocol(), "BMC protocol detected");
                        }
                        *p = Some(c.protocol());
                    }
                    *slot = Some(client.clone());
                    return Ok(client);
                }
                Err(e) if known.is_none() && redfish_present(c.protocol(), &e) => {
                    // The Redfish service is there (its certificate or our credentials are
                    // the problem): falling back to IPMI would hide that, and remembering
                    // IPMI would keep using the wrong protocol once it is fixed.
                    tracing::debug!(bmc = %entry.config.endpoint, error = %e, "Redfish answered; no fallback");
                    return Err(e);
                }
                Err(e) => {
                    tracing::debug!(bmc = %entry.config.endpoint, protocol = %c.protocol(), error = %e, "protocol probe failed");
                    // Report the protocol that answered (wrong password, full session table)
                    // rather than the one that is not there at all.
                    match &first_error {
                        Some(prev) if !protocol_answered(&e) || protocol_answered(prev) => {}
                        _ => first_error = Some(e),
                    }
                }
            }
        }
        Err(first_error.unwrap_or_else(|| BmcError::Unsupported("no protocol".into())))
    }
}

/// A Redfish probe error that proves a Redfish service is at the endpoint.
fn redfish_present(protocol: Protocol, e: &BmcError) -> bool {
    protocol == Protocol::Redfish
        && matches!(
            e,
            BmcError::Tls(_) | BmcError::Unauthorized | BmcError::Forbidden
        )
}

async fn close_entry(e: &Entry) {
    let client = e.client.lock().await.take();
    if let Some(c) = client
        && let Err(err) = c.bmc.close().await
    {
        tracing::debug!(bmc = %e.config.endpoint, error = %err, "logout failed");
    }
}

/// Whether an error shows that the protocol is served at the endpoint (it answered, but no).
fn protocol_answered(e: &BmcError) -> bool {
    matches!(
        e,
        BmcError::Unauthorized
            | BmcError::Forbidden
            | BmcError::SessionLimit
            | BmcError::Command { .. }
    )
}

/// A BMC reached through the [`SessionManager`]: every call takes a per-BMC permit, then a
/// fleet permit, and uses the shared client.
#[derive(Clone)]
pub struct ManagedBmc {
    manager: Arc<SessionManager>,
    entry: Arc<Entry>,
}

impl ManagedBmc {
    /// One call, reported to the observer.
    async fn with<T, F, Fut>(&self, operation: &'static str, f: F) -> Result<T, BmcError>
    where
        F: FnOnce(Arc<dyn Bmc>) -> Fut,
        Fut: std::future::Future<Output = Result<T, BmcError>>,
    {
        let started = Instant::now();
        let result = self.call(f).await;
        if let Some(observer) = &self.manager.options.observer.0 {
            let protocol = self.protocol_detected().or(self.entry.config.protocol);
            let outcome = result.as_ref().map_or_else(BmcError::kind, |_| "ok");
            observer.call(protocol, operation, outcome, started.elapsed());
        }
        result
    }

    async fn call<T, F, Fut>(&self, f: F) -> Result<T, BmcError>
    where
        F: FnOnce(Arc<dyn Bmc>) -> Fut,
        Fut: std::future::Future<Output = Result<T, BmcError>>,
    {
        let _bmc = self
            .entry
            .permits
            .acquire()
            .await
            .map_err(|_| BmcError::Config("BMC closed".into()))?;
        // The fleet permit is taken per request by the client (detection included), so a
        // slow or dead BMC holds fleet capacity only while one of its requests is out, not
        // for a whole operation (inventory walk, cycle wait, protocol detection).
        let client = self.manager.client(&self.entry).await?;
        if client.gated {
            return f(client.bmc).await;
        }
        let _fleet = self
            .manager
            .fleet
            .acquire()
            .await
            .map_err(|_| BmcError::Config("fleet limit closed".into()))?;
        f(client.bmc).await
    }

    /// The protocol in use (after the first call).
    pub fn protocol_detected(&self) -> Option<Protocol> {
        self.entry.protocol.lock().ok().and_then(|p| *p)
    }
}

#[async_trait]
impl Bmc for ManagedBmc {
    fn protocol(&self) -> Protocol {
        self.protocol_detected().unwrap_or(Protocol::Redfish)
    }
    async fn power_state(&self) -> Result<PowerState, BmcError> {
        self.with("power_state", |c| async move { c.power_state().await })
            .await
    }
    async fn power(&self, action: PowerAction) -> Result<PowerOutcome, BmcError> {
        self.with("power", |c| async move { c.power(action).await })
            .await
    }
    async fn boot_override(&self) -> Result<BootOverride, BmcError> {
        self.with("boot_override", |c| async move { c.boot_override().await })
            .await
    }
    async fn set_boot_override(&self, request: BootRequest) -> Result<BootOverride, BmcError> {
        self.with("set_boot_override", |c| async move {
            c.set_boot_override(request).await
        })
        .await
    }
    async fn virtual_media(&self) -> Result<Vec<MediaSlot>, BmcError> {
        self.with("virtual_media", |c| async move { c.virtual_media().await })
            .await
    }
    async fn set_virtual_media(
        &self,
        kind: MediaKind,
        image: Option<String>,
    ) -> Result<(), BmcError> {
        self.with("set_virtual_media", |c| async move {
            c.set_virtual_media(kind, image).await
        })
        .await
    }
    async fn inventory(&self) -> Result<Inventory, BmcError> {
        self.with("inventory", |c| async move { c.inventory().await })
            .await
    }
    async fn event_log(&self) -> Result<Vec<LogEntry>, BmcError> {
        self.with("event_log", |c| async move { c.event_log().await })
            .await
    }
    async fn sensors(&self) -> Result<Vec<Sensor>, BmcError> {
        self.with("sensors", |c| async move { c.sensors().await })
            .await
    }

    async fn pushed_events(&self, last_event_id: Option<String>) -> Result<PushedEvents, BmcError> {
        self.with("pushed_events", |c| async move {
            c.pushed_events(last_event_id).await
        })
        .await
    }
    async fn ensure_event_subscription(
        &self,
        subscription: &EventSubscription,
        stale: StaleContext<'_>,
    ) -> Result<Subscribed, BmcError> {
        self.with("ensure_event_subscription", |c| async move {
            c.ensure_event_subscription(subscription, stale).await
        })
        .await
    }
    async fn remove_event_subscription(
        &self,
        destination: &str,
        context: &str,
    ) -> Result<usize, BmcError> {
        self.with("remove_event_subscription", |c| async move {
            c.remove_event_subscription(destination, context).await
        })
        .await
    }
    async fn close(&self) -> Result<(), BmcError> {
        let client = self.entry.client.lock().await.take();
        match client {
            Some(c) => c.bmc.close().await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_redfish_answers_that_prove_redfish_stop_detection() {
        for e in [BmcError::Unauthorized, BmcError::Forbidden] {
            assert!(redfish_present(Protocol::Redfish, &e), "{e:?}");
            assert!(!redfish_present(Protocol::Ipmi, &e), "{e:?}");
        }
        for e in [
            BmcError::Timeout(std::time::Duration::from_secs(1)),
            BmcError::Unavailable { status: 503 },
            BmcError::Malformed("not Redfish".into()),
            BmcError::Unreachable(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))),
        ] {
            assert!(!redfish_present(Protocol::Redfish, &e), "{e:?}");
        }
    }
}
