//! A fleet of emulated BMCs speaking Redfish, in one process, for development, tests and
//! benchmarks. It knows nothing of ingot's client: only the wire format.
//!
//! Each BMC gets its own listener on a loopback address (an ephemeral port on `127.0.0.1` by
//! default), so a client follows ordinary `/redfish/v1/...` `@odata.id` links exactly as on
//! real hardware. A BMC costs one listening socket plus its connections: 10,000 BMCs need a
//! file-descriptor limit above 20,000 when clients keep connections alive.
//!
//! Per BMC: SessionService with a max-sessions limit, power with transition delays, boot
//! override (Once is consumed by the next boot), a boot record per power-on ([`BootRecord`]), inventory in four vendor shapes, LogServices
//! entries, EventService with server-sent events and push subscriptions (delivery with retries,
//! termination, loss on [`BmcState::reset`]), and faults on demand ([`Fault`]) set in
//! process or over `PUT /_sim/fault`.

mod delivery;
mod image;
mod media;
mod profile;
mod redfish;
mod server;
mod tls;

pub use image::ImageServer;
pub use media::{MediaInsert, MediaProfile, MediaState};
pub use profile::{Profile, Vendor};
pub use tls::TlsMaterial;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// A fault a BMC shows on demand.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Accept requests and never answer.
    Timeout,
    /// Answer 401 to every request that needs authentication, and to logins.
    Unauthorized,
    /// Answer 503 to everything.
    Unavailable,
    /// Answer 200 with a body that is not JSON.
    MalformedJson,
    /// Present a certificate for another host name (TLS listeners only; same CA).
    TlsError,
    /// The session table is full: logins fail with the vendor's session-limit error.
    SessionFull,
    /// Answer every request after `delay_ms`.
    Slow { delay_ms: u64 },
    /// Carry out every request that changes something (POST, PATCH, PUT, DELETE; logins and
    /// logouts excepted) and then close the connection without answering: the client cannot
    /// tell whether it was done.
    DropAfterAction,
    /// Answer every GET but the service root's with 200 and a JSON body of `bytes` bytes
    /// (streamed, without `Content-Length`).
    HugeBody { bytes: u64 },
    /// The event stream sends one event of `bytes` bytes that never ends.
    HugeEvent { bytes: u64 },
    /// The `Systems` collection lists `members` members in one page.
    HugeCollection { members: usize },
}

/// Put into each request by the connection serving it: notified, the connection is closed
/// without an answer ([`Fault::DropAfterAction`]).
#[derive(Clone, Debug)]
pub(crate) struct CloseConnection(pub(crate) Arc<tokio::sync::Notify>);

/// Behaviours of real BMCs that are off by default, switched per BMC with
/// [`BmcState::set_quirks`] (tests of clients that must cope with them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quirks {
    /// `If-Match` is compared strongly (RFC 9110): a weak ETag (`W/"..."`) never matches,
    /// although the BMC hands out weak ones; only `*` or the bare tag does.
    pub strong_etag_compare: bool,
    /// These paths answer this HTTP status (e.g. one DIMM that fails with 500).
    pub fail_paths: Vec<(String, u16)>,
    /// Session tokens are refused (401) while logins still succeed.
    pub reject_tokens: bool,
    /// The next N requests carrying a valid session token answer 401 (the session lives on).
    pub spurious_401: u32,
    /// The log `Entries` collection is served in pages of this many entries with
    /// `Members@odata.nextLink`; `$top` / `$skip` are honoured (`TopSkipQuery`).
    pub log_page_size: Option<usize>,
    /// A refused login's error message quotes the request body (password included), as
    /// some BMC firmware does.
    pub echo_login_body: bool,
    /// The session collection is served at [`MOVED_SESSIONS`] (the root's `Links.Sessions`
    /// says so) and its usual URI answers 404.
    pub sessions_elsewhere: bool,
    /// Every boot PATCH that sets a target leaves the mode `Legacy`, whether it names a mode or
    /// not: a BMC that cannot keep UEFI across a boot override (what the Supermicro profile does
    /// only to a PATCH that omits the mode).
    pub boot_mode_always_legacy: bool,
    /// The chassis links `ThermalSubsystem` and `PowerSubsystem` (Redfish 2020.4 and later)
    /// and no `Thermal` (which answers 404), as newer firmware does.
    #[serde(default)]
    pub new_thermal_schema: bool,
    /// The chassis has no `Sensors` collection (which answers 404).
    #[serde(default)]
    pub no_sensors: bool,
    /// The EventService has no `ServerSentEventUri` and the stream's URI answers 404: a BMC
    /// without server-sent events (clients poll the log instead).
    #[serde(default)]
    pub no_server_sent_events: bool,
    /// The EventService reads `ServiceEnabled: false` (its stream is still served).
    #[serde(default)]
    pub event_service_disabled: bool,
}

/// How the EventService delivers to push subscriptions, switched per BMC with
/// [`BmcState::set_event_knobs`].
#[derive(Clone, Debug, PartialEq)]
pub struct EventKnobs {
    /// Subscriptions the BMC holds at most; a create beyond answers 400
    /// `CreateLimitReachedForResource` (Dell OME: 8).
    pub max_subscriptions: usize,
    /// Retries of a failed delivery before the subscription is terminated (deleted).
    pub delivery_retry_attempts: u32,
    /// Time between those retries.
    pub delivery_retry_interval: Duration,
    /// Time a delivery may take (connecting included) before it counts as failed.
    pub delivery_timeout: Duration,
}

impl Default for EventKnobs {
    fn default() -> Self {
        EventKnobs {
            max_subscriptions: 8,
            delivery_retry_attempts: 3,
            delivery_retry_interval: Duration::from_secs(30),
            delivery_timeout: Duration::from_secs(5),
        }
    }
}

/// One push subscription as the BMC keeps it.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub destination: String,
    pub context: Option<String>,
    /// Sent with every delivery; never read back.
    pub headers: Vec<(String, String)>,
    pub format: Option<String>,
    pub registry_prefixes: Option<Vec<String>>,
    /// The delivery task's queue (dropped with the subscription, which ends the task).
    pub queue: tokio::sync::mpsc::Sender<String>,
}

/// A push subscription as a test sees it ([`BmcState::subscriptions`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriptionView {
    pub id: u64,
    pub destination: String,
    pub context: Option<String>,
    /// The names of its `HttpHeaders` (the values are the subscriber's secrets).
    pub header_names: Vec<String>,
    pub event_format_type: Option<String>,
    pub registry_prefixes: Option<Vec<String>>,
}

/// Where a BMC with [`Quirks::sessions_elsewhere`] serves its session collection.
pub const MOVED_SESSIONS: &str = "/redfish/v1/AccountService/Sessions";

/// How to build one BMC.
#[derive(Clone, Debug)]
pub struct BmcSpec {
    pub vendor: Vendor,
    pub username: String,
    pub password: String,
    pub max_sessions: usize,
    /// Delay before a power change lands (the state reads `PoweringOn`/`PoweringOff` meanwhile).
    pub power_delay: Duration,
    /// Added to every Redfish request.
    pub latency: Duration,
    /// Probability that a Redfish request never gets an answer (0.0 to 1.0).
    pub timeout_ratio: f64,
    /// Idle time after which a session expires.
    pub session_timeout: Duration,
    pub initial_power_on: bool,
}

impl Default for BmcSpec {
    fn default() -> Self {
        BmcSpec {
            vendor: Vendor::Dell,
            username: "admin".into(),
            password: "password".into(),
            max_sessions: 4,
            power_delay: Duration::from_millis(200),
            latency: Duration::ZERO,
            timeout_ratio: 0.0,
            session_timeout: Duration::from_secs(1800),
            initial_power_on: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// Loopback address to listen on.
    pub listen: IpAddr,
    /// First port; `0` = ephemeral ports.
    pub base_port: u16,
    /// Serve HTTPS with a certificate from the fleet's own CA.
    pub tls: bool,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
            base_port: 0,
            tls: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("only loopback addresses are served, not {0}")]
    NotLoopback(IpAddr),
    #[error("TLS setup failed: {0}")]
    Tls(String),
}

#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub token: String,
    pub user: String,
    pub last_used: Instant,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogRecord {
    pub id: u64,
    pub created: String,
    pub severity: String,
    pub message: String,
    pub message_id: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BootState {
    pub target: String,
    pub enabled: String,
    pub mode: String,
}

/// One power-on of the server, as its firmware saw it: what it booted and when it stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootRecord {
    /// 1 for the first power-on, one more for each power-on after (a restart is one).
    pub count: u64,
    /// What the firmware booted: the override's target (`Pxe`, `Cd`, `UefiHttp`...) when an
    /// override applied to this boot, else `Hdd` (the disk).
    pub device: String,
    /// The boot mode (`UEFI` or `Legacy`).
    pub mode: String,
    /// The override that applied: `Once` (consumed by this boot), `Continuous`, or `Disabled`.
    pub override_enabled: String,
    pub booted_at: String,
    /// When the power went off (the OS stopped); `None` while it runs.
    pub powered_off_at: Option<String>,
}

/// What `GET /_sim/boots` reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Boots {
    pub power_state: String,
    pub boots: Vec<BootRecord>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub power_on: bool,
    /// Target state and generation of a transition in progress.
    pub pending: Option<(bool, u64)>,
    /// The state the current transition ends in (`power_on` when none is in progress).
    pub final_on: bool,
    pub generation: u64,
    pub boot: BootState,
    pub sessions: BTreeMap<u64, Session>,
    pub next_session: u64,
    pub logs: Vec<LogRecord>,
    pub etag: u64,
    pub resets: u64,
    pub fault: Option<Fault>,
    pub quirks: Quirks,
    /// Every `ResetType` accepted, in order.
    pub reset_log: Vec<String>,
    /// `(name, Redfish health)` of each fan in the chassis' `Thermal`.
    pub fans: Vec<(String, String)>,
    /// The virtual media devices, in the profile's order.
    pub media: Vec<MediaState>,
    /// Every virtual media change accepted (`insert <device> <image>`, `eject <device>`).
    pub media_log: Vec<String>,
    /// Every power-on, oldest first.
    pub boots: Vec<BootRecord>,
    /// The body of every PATCH of the system, as received, in order.
    pub system_patches: Vec<serde_json::Value>,
    /// The `Last-Event-ID` header of every event stream opened, in order (`None`: absent).
    pub stream_opens: Vec<Option<String>>,
    /// Push subscriptions by id.
    pub subscriptions: BTreeMap<u64, Subscription>,
    pub next_subscription: u64,
    /// Subscriptions deleted by the BMC after failed deliveries.
    pub terminated_subscriptions: u64,
    pub event_knobs: EventKnobs,
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Inner {
    /// The power goes on: the firmware boots the override's target (a `Once` override is
    /// consumed now), or the disk.
    pub(crate) fn power_on_boot(&mut self) {
        let applies = self.boot.enabled != "Disabled" && self.boot.target != "None";
        let record = BootRecord {
            count: self.boots.last().map(|b| b.count + 1).unwrap_or(1),
            device: if applies {
                self.boot.target.clone()
            } else {
                "Hdd".into()
            },
            mode: self.boot.mode.clone(),
            override_enabled: if applies {
                self.boot.enabled.clone()
            } else {
                "Disabled".into()
            },
            booted_at: now_rfc3339(),
            powered_off_at: None,
        };
        self.boots.push(record);
        if self.boot.enabled == "Once" {
            self.boot.enabled = "Disabled".into();
            self.boot.target = "None".into();
            self.etag += 1;
        }
    }

    /// The power goes off: the running OS stops.
    pub(crate) fn power_off_stop(&mut self) {
        if let Some(last) = self.boots.last_mut()
            && last.powered_off_at.is_none()
        {
            last.powered_off_at = Some(now_rfc3339());
        }
    }
}

/// Requests in flight, now and at peak.
#[derive(Debug, Default)]
pub struct InFlight {
    pub now: AtomicU64,
    pub peak: AtomicU64,
}

impl InFlight {
    pub(crate) fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
    }
    pub(crate) fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counters seen from the BMC side.
#[derive(Debug, Default)]
pub struct BmcCounters {
    /// Redfish requests being handled by this BMC (peak: the client's per-BMC concurrency).
    pub in_flight: InFlight,
    pub requests: AtomicU64,
    pub sessions_created: AtomicU64,
    pub sessions_deleted: AtomicU64,
    pub peak_sessions: AtomicU64,
    pub logins_refused: AtomicU64,
    /// TCP connections the client holds open to this BMC now.
    pub connections_open: AtomicU64,
    /// Events a push subscription's destination accepted (2xx).
    pub events_delivered: AtomicU64,
    /// Push deliveries that failed (each retry counts).
    pub event_delivery_failures: AtomicU64,
}

/// One emulated BMC (shared by its listener and the test that owns the fleet).
#[derive(Debug)]
pub struct BmcState {
    pub index: usize,
    pub spec: BmcSpec,
    pub profile: Profile,
    pub counters: BmcCounters,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) events: broadcast::Sender<String>,
    /// Bumped to end every open event stream ([`BmcState::drop_event_streams`]).
    pub(crate) stream_epoch: tokio::sync::watch::Sender<u64>,
    /// Shared by every BMC of the fleet (peak: the client's fleet-wide concurrency).
    pub fleet_in_flight: Arc<InFlight>,
}

/// What `GET /_sim/state` reports.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub power_state: String,
    pub boot: BootState,
    pub sessions: usize,
    pub sessions_created: u64,
    pub sessions_deleted: u64,
    pub peak_sessions: u64,
    pub requests: u64,
    pub resets: u64,
    pub fault: Option<Fault>,
}

impl BmcState {
    fn new(index: usize, spec: BmcSpec, fleet_in_flight: Arc<InFlight>) -> Arc<Self> {
        let profile = Profile::of(spec.vendor);
        let (events, _) = broadcast::channel(16);
        let now = chrono::Utc::now();
        let logs = vec![
            LogRecord {
                id: 1,
                created: (now - chrono::Duration::hours(2))
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                severity: "OK".into(),
                message: "The system was powered on.".into(),
                message_id: "ResourceEvent.1.0.ResourceStatusChanged".into(),
            },
            LogRecord {
                id: 2,
                created: (now - chrono::Duration::hours(1))
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                severity: "Warning".into(),
                message: "Fan 3 speed is below the lower warning threshold.".into(),
                message_id: "ResourceEvent.1.0.ResourceWarningThresholdExceeded".into(),
            },
        ];
        Arc::new(BmcState {
            index,
            inner: Mutex::new(Inner {
                power_on: spec.initial_power_on,
                pending: None,
                final_on: spec.initial_power_on,
                generation: 0,
                boot: BootState {
                    target: "None".into(),
                    enabled: "Disabled".into(),
                    mode: "UEFI".into(),
                },
                sessions: BTreeMap::new(),
                next_session: 1,
                logs,
                etag: 1,
                resets: 0,
                fault: None,
                quirks: Quirks::default(),
                reset_log: Vec::new(),
                fans: vec![
                    ("System Fan 1".into(), "OK".into()),
                    ("System Fan 2".into(), "OK".into()),
                ],
                media: media::initial(&profile.media),
                media_log: Vec::new(),
                // A server found on has booted its disk.
                boots: if spec.initial_power_on {
                    vec![BootRecord {
                        count: 1,
                        device: "Hdd".into(),
                        mode: "UEFI".into(),
                        override_enabled: "Disabled".into(),
                        booted_at: now_rfc3339(),
                        powered_off_at: None,
                    }]
                } else {
                    Vec::new()
                },
                system_patches: Vec::new(),
                stream_opens: Vec::new(),
                subscriptions: BTreeMap::new(),
                next_subscription: 1,
                terminated_subscriptions: 0,
                event_knobs: EventKnobs::default(),
            }),
            spec,
            profile,
            counters: BmcCounters::default(),
            events,
            stream_epoch: tokio::sync::watch::Sender::new(0),
            fleet_in_flight,
        })
    }

    /// Every power-on so far, oldest first (see [`BootRecord`]).
    pub fn boots(&self) -> Vec<BootRecord> {
        self.lock().boots.clone()
    }

    /// The latest power-on, if the server was ever on.
    pub fn last_boot(&self) -> Option<BootRecord> {
        self.lock().boots.last().cloned()
    }

    /// What `GET /_sim/boots` shows.
    pub fn boots_report(&self) -> Boots {
        let g = self.lock();
        Boots {
            power_state: redfish::power_state_name(&g).into(),
            boots: g.boots.clone(),
        }
    }

    /// The server's OS reboots itself (an installer's final reboot): off, then on after the
    /// power delay each, booting whatever the override says (none left: the disk). Not a
    /// Redfish request: no counter or reset log entry.
    pub fn reboot_from_os(self: &Arc<Self>) {
        if self.lock().final_on {
            redfish::transition(self, &[false, true]);
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Sets (or clears) the fault. `Unauthorized` also ends every session, as a password
    /// change or a BMC reset would.
    pub fn set_fault(&self, fault: Option<Fault>) {
        if fault == Some(Fault::Unauthorized) {
            self.expire_sessions();
        }
        self.lock().fault = fault;
    }

    /// Sets the Redfish health (`OK`, `Warning`, `Critical`) of the named fan (`System Fan 1`
    /// or `System Fan 2`), as the chassis' `Thermal`, `ThermalSubsystem/Fans` and `Sensors`
    /// report it (a `Critical` fan reads 0 RPM).
    pub fn set_fan_health(&self, fan: &str, health: &str) {
        for (name, h) in &mut self.lock().fans {
            if name == fan {
                *h = health.to_owned();
            }
        }
    }

    /// Switches the [`Quirks`] of this BMC.
    pub fn set_quirks(&self, quirks: Quirks) {
        self.lock().quirks = quirks;
    }

    pub fn quirks(&self) -> Quirks {
        self.lock().quirks.clone()
    }

    /// Every `ComputerSystem.Reset` accepted (its `ResetType`), in order.
    pub fn reset_requests(&self) -> Vec<String> {
        self.lock().reset_log.clone()
    }

    /// The body of every PATCH of the system received (accepted or not), in order.
    pub fn system_patches(&self) -> Vec<serde_json::Value> {
        self.lock().system_patches.clone()
    }

    /// Sets the boot mode the system reports (`UEFI` or `Legacy`).
    pub fn set_boot_mode(&self, mode: &str) {
        self.lock().boot.mode = mode.to_owned();
    }

    /// Sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.lock().sessions.len()
    }

    pub fn fault(&self) -> Option<Fault> {
        self.lock().fault.clone()
    }

    /// Ends every session now (as a BMC reboot or idle timeout would).
    pub fn expire_sessions(&self) {
        let mut g = self.lock();
        let n = g.sessions.len() as u64;
        g.sessions.clear();
        self.counters
            .sessions_deleted
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Ends every open event stream (the connection closes, as when a BMC's web server
    /// restarts); streams opened afterwards carry on.
    pub fn drop_event_streams(&self) {
        self.stream_epoch.send_modify(|n| *n += 1);
    }

    /// The BMC resets: it loses its push subscriptions, its sessions and its event streams.
    pub fn reset(&self) {
        self.lock().subscriptions.clear();
        self.expire_sessions();
        self.drop_event_streams();
    }

    /// Switches how the EventService delivers ([`EventKnobs`]).
    pub fn set_event_knobs(&self, knobs: EventKnobs) {
        self.lock().event_knobs = knobs;
    }

    /// The push subscriptions the BMC holds now, by id.
    pub fn subscriptions(&self) -> Vec<SubscriptionView> {
        self.lock()
            .subscriptions
            .iter()
            .map(|(id, s)| SubscriptionView {
                id: *id,
                destination: s.destination.clone(),
                context: s.context.clone(),
                header_names: s.headers.iter().map(|(k, _)| k.clone()).collect(),
                event_format_type: s.format.clone(),
                registry_prefixes: s.registry_prefixes.clone(),
            })
            .collect()
    }

    /// The `HttpHeaders` a subscription was created with, values included (what the BMC sends
    /// with each delivery; a GET never shows them).
    pub fn subscription_headers(&self, id: u64) -> Vec<(String, String)> {
        self.lock()
            .subscriptions
            .get(&id)
            .map(|s| s.headers.clone())
            .unwrap_or_default()
    }

    /// Subscriptions the BMC deleted after failed deliveries so far.
    pub fn terminated_subscriptions(&self) -> u64 {
        self.lock().terminated_subscriptions
    }

    /// Event streams open now.
    pub fn event_streams_open(&self) -> usize {
        self.events.receiver_count()
    }

    /// The `Last-Event-ID` header of every event stream opened so far, in order.
    pub fn event_stream_opens(&self) -> Vec<Option<String>> {
        self.lock().stream_opens.clone()
    }

    /// Appends an event-log entry and announces it on the event stream.
    pub fn add_log(&self, severity: &str, message: &str) -> u64 {
        let id = {
            let mut g = self.lock();
            let id = g.logs.last().map(|l| l.id + 1).unwrap_or(1);
            g.logs.push(LogRecord {
                id,
                created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                severity: severity.into(),
                message: message.into(),
                message_id: "Platform.1.0.PlatformEvent".into(),
            });
            id
        };
        self.emit(
            "Alert",
            "Platform.1.0.PlatformEvent",
            message,
            &redfish::log_entry_path(self, id),
        );
        id
    }

    pub fn snapshot(&self) -> Snapshot {
        let g = self.lock();
        Snapshot {
            power_state: redfish::power_state_name(&g).into(),
            boot: g.boot.clone(),
            sessions: g.sessions.len(),
            sessions_created: self.counters.sessions_created.load(Ordering::Relaxed),
            sessions_deleted: self.counters.sessions_deleted.load(Ordering::Relaxed),
            peak_sessions: self.counters.peak_sessions.load(Ordering::Relaxed),
            requests: self.counters.requests.load(Ordering::Relaxed),
            resets: g.resets,
            fault: g.fault.clone(),
        }
    }

    /// The virtual media devices as they are now.
    pub fn media(&self) -> Vec<MediaState> {
        self.lock().media.clone()
    }

    /// Every virtual media change the BMC accepted, in order.
    pub fn media_log(&self) -> Vec<String> {
        self.lock().media_log.clone()
    }

    pub fn serial_number(&self) -> String {
        format!("{}{:07}", self.profile.sku_prefix, self.index)
    }

    pub fn mac(&self, nic: u32) -> String {
        let i = self.index as u32;
        format!(
            "02:00:{:02x}:{:02x}:{:02x}:{:02x}",
            (i >> 16) & 0xff,
            (i >> 8) & 0xff,
            i & 0xff,
            nic & 0xff
        )
    }

    pub fn uuid(&self) -> String {
        format!("4c4c4544-0000-4000-8000-{:012x}", self.index)
    }

    /// Announces an event on the event streams and to every push subscription whose
    /// `RegistryPrefixes` (if any) take its `MessageId`, with the subscription's `Context`.
    pub(crate) fn emit(&self, kind: &str, message_id: &str, message: &str, origin: &str) {
        let pushed = !self.lock().subscriptions.is_empty();
        if self.events.receiver_count() == 0 && !pushed {
            return;
        }
        let n = self.counters.requests.load(Ordering::Relaxed);
        let event = serde_json::json!({
            "@odata.type": "#Event.v1_7_0.Event",
            "Id": n.to_string(),
            "Name": "Event",
            "Events": [{
                "EventType": kind,
                "EventId": n.to_string(),
                "EventTimestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                "MessageId": message_id,
                "Message": message,
                "OriginOfCondition": {"@odata.id": origin},
            }],
        });
        if pushed {
            let g = self.lock();
            for s in g.subscriptions.values() {
                let wanted = s.registry_prefixes.as_ref().is_none_or(|p| {
                    p.is_empty() || p.iter().any(|p| message_id.starts_with(p.as_str()))
                });
                if !wanted {
                    continue;
                }
                let mut body = event.clone();
                if let Some(c) = &s.context {
                    body["Context"] = serde_json::json!(c);
                }
                // A full queue drops the event, as a BMC's bounded queue does.
                let _ = s.queue.try_send(body.to_string());
            }
        }
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(event.to_string());
        }
    }
}

/// A running BMC: its state and where it listens.
#[derive(Clone, Debug)]
pub struct SimBmc {
    pub addr: SocketAddr,
    pub tls: bool,
    pub state: Arc<BmcState>,
}

impl SimBmc {
    /// `http://127.0.0.1:PORT` or `https://...`.
    pub fn url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.addr
        )
    }
}

/// Many BMCs, each on its own listener. Dropping the fleet stops them.
pub struct Fleet {
    pub bmcs: Vec<SimBmc>,
    /// Redfish requests in flight across the fleet.
    pub in_flight: Arc<InFlight>,
    pub tls: Option<Arc<TlsMaterial>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Fleet {
    /// Starts `specs.len()` BMCs.
    pub async fn start(options: FleetOptions, specs: Vec<BmcSpec>) -> Result<Fleet, SimError> {
        if !options.listen.is_loopback() {
            return Err(SimError::NotLoopback(options.listen));
        }
        let tls = if options.tls {
            Some(Arc::new(TlsMaterial::generate()?))
        } else {
            None
        };
        let in_flight = Arc::new(InFlight::default());
        let mut bmcs = Vec::with_capacity(specs.len());
        let mut tasks = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let port = if options.base_port == 0 {
                0
            } else {
                options.base_port.saturating_add(i as u16)
            };
            let addr = SocketAddr::new(options.listen, port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| SimError::Listen { addr, source })?;
            let addr = listener
                .local_addr()
                .map_err(|source| SimError::Listen { addr, source })?;
            let state = BmcState::new(i, spec, in_flight.clone());
            let server_tls = match &tls {
                Some(t) => Some(t.server_config(state.clone())?),
                None => None,
            };
            tasks.push(tokio::spawn(server::serve(
                listener,
                state.clone(),
                server_tls,
            )));
            bmcs.push(SimBmc {
                addr,
                tls: tls.is_some(),
                state,
            });
        }
        Ok(Fleet {
            bmcs,
            in_flight,
            tls,
            tasks,
        })
    }

    /// `count` BMCs cycling through the vendor profiles, with the given template.
    pub async fn uniform(
        options: FleetOptions,
        count: usize,
        template: BmcSpec,
    ) -> Result<Fleet, SimError> {
        let specs = (0..count)
            .map(|i| BmcSpec {
                vendor: Vendor::ALL[i % Vendor::ALL.len()],
                ..template.clone()
            })
            .collect();
        Fleet::start(options, specs).await
    }

    /// Stops every listener and open connection.
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}
