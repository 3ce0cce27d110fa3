//! Plays the servers that boot on the Metal emulator (`ingot-sim metal`).
//!
//! A [`Booter`] watches the emulator's devices through its admin listing (`GET /_sim/devices`,
//! which does not count as API traffic). For each `custom_ipxe` device with a new boot record
//! (`GET /_sim/devices/{id}/boot`) it runs the iPXE script: a `shell` leaves the machine in the
//! iPXE shell; an install kernel makes it read its config as the Harvester installer would
//! (the kernel command line merged over the remote config), check it, and, if the installer
//! would accept it, register a Node of that name with a Ready condition it keeps renewing.
//! A config the installer would refuse leaves the machine `stuck` with the reason, and no Node.
//! A device booted from an OS image with Gardener user data joins with the bootstrap token the
//! user data carries, if the API server would accept it ([`gardener`]).
//!
//! [`servers::ServerFleet`] plays the servers behind a bmc-sim fleet instead: PXE boots through
//! their BMCs, the Harvester install (create or join), and the new cluster's nodes.
//!
//! It depends on no operator crate: the emulator's JSON and the installer's config format are
//! read by its own small parsers. See `docs/boot-sim.md`.

pub mod gardener;
pub mod install;
pub mod ipxe;
pub mod node;
pub mod servers;

mod http;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::Client;
use serde::{Deserialize, Serialize};
use url::Url;

pub use install::{Expected, Schema};
pub use node::Readiness;

/// Errors of the booter itself (not of the machines it plays).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the Metal emulator URL {url:?}: {message}")]
    MetalUrl { url: String, message: String },
    #[error("building the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    #[error("the Metal emulator's admin endpoint {what}: {message}")]
    Emulator { what: String, message: String },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("no machine {0:?} (give a device id or hostname)")]
    UnknownMachine(String),
    #[error("machine {0:?} has not joined a node")]
    NotJoined(String),
    #[error("machine {0:?} is not running (device {1}): power it on first")]
    NotRunning(String, String),
}

/// Where a machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineState {
    /// Waiting for its iPXE script (the emulator is still fetching it).
    Booting,
    /// Sitting in the iPXE shell.
    Shell,
    /// Running the installer.
    Installing,
    /// Installed and joined: a Node exists.
    Joined,
    /// The script or the install config leaves it stuck; `reason` says why.
    Stuck,
    /// The device is gone from the emulator.
    Gone,
}

/// What `GET /machines` shows for one device.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineStatus {
    pub device_id: String,
    pub hostname: String,
    /// The device's state in the emulator (`active`, `reinstalling`, ...).
    pub device_state: String,
    pub state: MachineState,
    pub reason: Option<String>,
    pub boot_count: Option<u32>,
    /// The Node it joined as.
    pub node: Option<String>,
    /// The Ready status it posts: `True`, `False` or `Unknown`.
    pub ready: Option<String>,
    pub schema: Option<Schema>,
    pub warnings: Vec<String>,
    pub since: DateTime<Utc>,
}

/// How a node stops being Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotReady {
    /// The kubelet keeps posting, with `Ready=False` (a sick node that still heartbeats).
    False,
    /// The kubelet is gone: `Ready=Unknown` once, then no heartbeat and no Lease renewal.
    Unknown,
}

/// The booter's settings.
#[derive(Debug, Clone)]
pub struct BooterConfig {
    /// The emulator's API URL (`http://127.0.0.1:4000/metal/v1`) or its root.
    pub metal_url: String,
    /// Only the devices of this project, if set.
    pub project: Option<String>,
    pub expected: Expected,
    pub poll_interval: Duration,
    pub heartbeat_interval: Duration,
}

impl BooterConfig {
    pub fn new(metal_url: impl Into<String>, expected: Expected) -> Self {
        Self {
            metal_url: metal_url.into(),
            project: None,
            expected,
            poll_interval: Duration::from_millis(200),
            heartbeat_interval: Duration::from_secs(10),
        }
    }
}

/// Plays every booting device of one emulator. Clones share the machines.
#[derive(Clone)]
pub struct Booter {
    inner: Arc<Inner>,
}

struct Inner {
    admin: Url,
    project: Option<String>,
    expected: Expected,
    poll_interval: Duration,
    heartbeat_interval: Duration,
    http: reqwest::Client,
    kube: Client,
    machines: Mutex<BTreeMap<String, Machine>>,
    /// Held while a node status is decided and posted: a heartbeat that read `Ready` must not
    /// land after a readiness change posted meanwhile (it would undo it).
    status_posts: tokio::sync::Mutex<()>,
}

struct Machine {
    status: MachineStatus,
    /// The boot record handled last.
    handled_boot: Option<u32>,
    nics: Vec<(String, String)>,
    facts: Option<node::NodeFacts>,
    private_ip: Option<String>,
    plan: Option<String>,
    readiness: Option<Readiness>,
    /// Went Unknown because the device stopped being active.
    powered_down: bool,
    /// Booted from an OS image with Gardener user data (no iPXE).
    gardener: bool,
}

/// The tasks of a started booter; they stop when this is dropped.
pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[derive(Deserialize)]
struct Listing {
    devices: Vec<ListedDevice>,
}

#[derive(Deserialize)]
struct ListedDevice {
    device: Device,
    boot_count: Option<u32>,
}

#[derive(Deserialize)]
struct Device {
    id: String,
    hostname: String,
    state: String,
    #[serde(default)]
    operating_system: Option<Slug>,
    #[serde(default)]
    plan: Option<Slug>,
    #[serde(default)]
    network_ports: Vec<Port>,
    #[serde(default)]
    ip_addresses: Vec<IpAddress>,
    #[serde(default)]
    userdata: Option<String>,
}

#[derive(Deserialize)]
struct Slug {
    #[serde(default)]
    slug: Option<String>,
}

#[derive(Deserialize)]
struct Port {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: PortData,
}

#[derive(Deserialize, Default)]
struct PortData {
    #[serde(default)]
    mac: Option<String>,
}

#[derive(Deserialize)]
struct IpAddress {
    address: String,
    address_family: u8,
    public: bool,
}

/// The emulator's boot record (`GET /_sim/devices/{id}/boot`).
#[derive(Debug, Clone, Deserialize)]
pub struct BootRecord {
    pub boot_count: u32,
    pub ipxe_source: String,
    pub ipxe_script: Option<String>,
    pub ipxe_error: Option<String>,
    pub userdata: Option<String>,
    pub macs: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a boot led to.
enum Outcome {
    Pending,
    Shell,
    Stuck(String),
    Accepted(install::Accepted),
}

impl Booter {
    pub fn new(config: BooterConfig, kube: Client) -> Result<Self, Error> {
        let bad = |message: String| Error::MetalUrl {
            url: config.metal_url.clone(),
            message,
        };
        let mut admin = Url::parse(&config.metal_url).map_err(|e| bad(e.to_string()))?;
        if !matches!(admin.scheme(), "http" | "https") {
            return Err(bad("not an http URL".into()));
        }
        admin.set_path("/_sim/");
        admin.set_query(None);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .no_proxy()
            .build()
            .map_err(Error::HttpClient)?;
        Ok(Self {
            inner: Arc::new(Inner {
                admin,
                project: config.project,
                expected: config.expected,
                poll_interval: config.poll_interval.max(Duration::from_millis(20)),
                heartbeat_interval: config.heartbeat_interval.max(Duration::from_millis(100)),
                http,
                kube,
                machines: Mutex::new(BTreeMap::new()),
                status_posts: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Starts the poll loop and the heartbeats.
    pub fn start(&self) -> Running {
        let poller = self.clone();
        let beater = self.clone();
        Running {
            tasks: vec![
                tokio::spawn(async move {
                    loop {
                        if let Err(error) = poller.poll_once().await {
                            tracing::warn!(%error, "polling the Metal emulator");
                        }
                        tokio::time::sleep(poller.inner.poll_interval).await;
                    }
                }),
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(beater.inner.heartbeat_interval).await;
                        beater.heartbeat_all().await;
                    }
                }),
            ],
        }
    }

    /// The HTTP admin endpoints (`/machines`...); see `docs/boot-sim.md`.
    pub fn router(&self) -> axum::Router {
        http::router(self.clone())
    }

    /// Every machine seen so far.
    pub fn machines(&self) -> Vec<MachineStatus> {
        lock(&self.inner.machines)
            .values()
            .map(|m| m.status.clone())
            .collect()
    }

    /// One machine, by device id or hostname.
    pub fn machine(&self, key: &str) -> Option<MachineStatus> {
        let machines = lock(&self.inner.machines);
        find(&machines, key).map(|id| machines[&id].status.clone())
    }

    /// Makes a joined node NotReady now.
    pub async fn set_not_ready(&self, key: &str, how: NotReady) -> Result<MachineStatus, Error> {
        let status = match how {
            NotReady::False => "False",
            NotReady::Unknown => "Unknown",
        };
        self.set_readiness(key, status).await
    }

    /// Makes a node Ready again (the kubelet posts and heartbeats again).
    pub async fn set_ready(&self, key: &str) -> Result<MachineStatus, Error> {
        self.set_readiness(key, "True").await
    }

    async fn set_readiness(&self, key: &str, status: &'static str) -> Result<MachineStatus, Error> {
        let _posting = self.inner.status_posts.lock().await;
        let (facts, readiness) = {
            let mut machines = lock(&self.inner.machines);
            let id = find(&machines, key).ok_or_else(|| Error::UnknownMachine(key.to_owned()))?;
            let m = machines
                .get_mut(&id)
                .ok_or_else(|| Error::UnknownMachine(key.to_owned()))?;
            let (Some(facts), MachineState::Joined) = (m.facts.clone(), m.status.state) else {
                return Err(Error::NotJoined(key.to_owned()));
            };
            if status == "True" && m.status.device_state != "active" {
                return Err(Error::NotRunning(
                    key.to_owned(),
                    m.status.device_state.clone(),
                ));
            }
            m.powered_down = false;
            let readiness = match m.readiness {
                Some(r) if r.status == status => r,
                _ => Readiness {
                    status,
                    since: Utc::now(),
                },
            };
            m.readiness = Some(readiness);
            m.status.ready = Some(status.to_owned());
            (facts, readiness)
        };
        tracing::info!(node = %facts.name, ready = status, "node readiness set");
        node::post_status(&self.inner.kube, &facts, readiness, false).await?;
        self.machine(key)
            .ok_or_else(|| Error::UnknownMachine(key.to_owned()))
    }

    /// Posts the status of every joined node whose kubelet runs (device active, not `Unknown`).
    pub async fn heartbeat_all(&self) {
        let _posting = self.inner.status_posts.lock().await;
        let due: Vec<(node::NodeFacts, Readiness)> = lock(&self.inner.machines)
            .values()
            .filter(|m| m.status.state == MachineState::Joined && m.status.device_state == "active")
            .filter_map(|m| Some((m.facts.clone()?, m.readiness?)))
            .filter(|(_, r)| r.status != "Unknown")
            .collect();
        for (facts, readiness) in due {
            if let Err(error) = node::post_status(&self.inner.kube, &facts, readiness, false).await
            {
                tracing::warn!(node = %facts.name, %error, "posting node status");
            }
        }
    }

    /// One look at the emulator: new machines, new boots, gone devices.
    pub async fn poll_once(&self) -> Result<(), Error> {
        let mut url = self.admin("devices")?;
        if let Some(p) = &self.inner.project {
            url.query_pairs_mut().append_pair("project", p);
        }
        let listing: Listing = self.get_json(url, "GET /_sim/devices").await?;
        let mut present = Vec::new();
        let mut to_boot = Vec::new();
        let mut to_join = Vec::new();
        let mut posts = Vec::new();
        {
            let mut machines = lock(&self.inner.machines);
            for listed in listing.devices {
                let d = listed.device;
                let custom = d.operating_system.as_ref().and_then(|o| o.slug.as_deref())
                    == Some("custom_ipxe");
                let gardener = match (custom, d.userdata.as_deref()) {
                    (false, Some(ud)) => match gardener::read_user_data(ud) {
                        gardener::Join::NotGardener => continue,
                        join => Some(join),
                    },
                    (false, None) => continue,
                    (true, _) => None,
                };
                present.push(d.id.clone());
                let nics: Vec<(String, String)> = d
                    .network_ports
                    .iter()
                    .filter(|p| p.kind == "NetworkPort")
                    .filter_map(|p| Some((p.name.clone(), p.data.mac.clone()?.to_lowercase())))
                    .collect();
                let private_ip = d
                    .ip_addresses
                    .iter()
                    .find(|a| a.address_family == 4 && !a.public)
                    .map(|a| a.address.clone());
                let m = machines.entry(d.id.clone()).or_insert_with(|| Machine {
                    status: MachineStatus {
                        device_id: d.id.clone(),
                        hostname: d.hostname.clone(),
                        device_state: d.state.clone(),
                        state: MachineState::Booting,
                        reason: None,
                        boot_count: None,
                        node: None,
                        ready: None,
                        schema: None,
                        warnings: Vec::new(),
                        since: Utc::now(),
                    },
                    handled_boot: None,
                    nics: Vec::new(),
                    facts: None,
                    private_ip: None,
                    plan: None,
                    readiness: None,
                    powered_down: false,
                    gardener: gardener.is_some(),
                });
                m.status.hostname = d.hostname;
                let was_active = m.status.device_state == "active";
                let is_active = d.state == "active";
                m.status.device_state = d.state;
                if m.status.state == MachineState::Joined
                    && let Some(facts) = m.facts.clone()
                {
                    if was_active && !is_active {
                        // Powered off or reinstalling: the kubelet stops, and the node
                        // lifecycle controller marks the node Unknown (here at once).
                        let r = Readiness {
                            status: "Unknown",
                            since: Utc::now(),
                        };
                        m.readiness = Some(r);
                        m.status.ready = Some(r.status.to_owned());
                        m.powered_down = true;
                        posts.push((facts, r));
                    } else if !was_active
                        && is_active
                        && m.powered_down
                        && listed.boot_count == m.handled_boot
                    {
                        // Powered on again from its disk: the kubelet starts and posts Ready.
                        let r = Readiness {
                            status: "True",
                            since: Utc::now(),
                        };
                        m.readiness = Some(r);
                        m.status.ready = Some(r.status.to_owned());
                        m.powered_down = false;
                        posts.push((facts, r));
                    }
                }
                m.nics = nics;
                m.private_ip = private_ip;
                m.plan = d.plan.and_then(|p| p.slug);
                if m.status.state == MachineState::Gone {
                    m.status.state = MachineState::Booting;
                }
                if let Some(join) = gardener {
                    if is_active && !matches!(m.status.state, MachineState::Joined) {
                        to_join.push((d.id.clone(), join));
                    }
                } else if let Some(n) = listed.boot_count
                    && m.handled_boot != Some(n)
                {
                    to_boot.push(d.id);
                }
            }
            for m in machines.values_mut() {
                if !present.contains(&m.status.device_id) && m.status.state != MachineState::Gone {
                    tracing::info!(device = %m.status.device_id, hostname = %m.status.hostname, "device gone; its kubelet stops");
                    if m.gardener
                        && m.status.state == MachineState::Joined
                        && let Some(facts) = m.facts.clone()
                    {
                        // The node lifecycle controller marks a silent node Unknown (here at once).
                        posts.push((
                            facts,
                            Readiness {
                                status: "Unknown",
                                since: Utc::now(),
                            },
                        ));
                    }
                    set_state(m, MachineState::Gone, None);
                    m.status.device_state = "gone".into();
                }
            }
        }
        let posting = self.inner.status_posts.lock().await;
        for (facts, readiness) in posts {
            tracing::info!(node = %facts.name, ready = readiness.status, "device power changed");
            if let Err(error) = node::post_status(&self.inner.kube, &facts, readiness, false).await
            {
                tracing::warn!(node = %facts.name, %error, "posting node status");
            }
        }
        drop(posting);
        for (id, join) in to_join {
            if let Err(error) = self.join_gardener(&id, join).await {
                tracing::warn!(device = %id, %error, "joining; trying again at the next poll");
            }
        }
        for id in to_boot {
            if let Err(error) = self.boot(&id).await {
                tracing::warn!(device = %id, %error, "booting; trying again at the next poll");
            }
        }
        Ok(())
    }

    async fn boot(&self, id: &str) -> Result<(), Error> {
        let url = self.admin(&format!("devices/{id}/boot"))?;
        let record: BootRecord = match self.get_json(url, "GET /_sim/devices/{id}/boot").await {
            Ok(r) => r,
            // Deleted between the listing and now.
            Err(Error::Emulator { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let (hostname, nics) = {
            let machines = lock(&self.inner.machines);
            let Some(m) = machines.get(id) else {
                return Ok(());
            };
            (m.status.hostname.clone(), m.nics.clone())
        };
        let outcome = self.run_boot(&record, &hostname, &nics).await;
        let join = {
            let mut machines = lock(&self.inner.machines);
            let Some(m) = machines.get_mut(id) else {
                return Ok(());
            };
            m.status.boot_count = Some(record.boot_count);
            match outcome {
                Outcome::Pending => {
                    set_state(m, MachineState::Booting, None);
                    None
                }
                Outcome::Shell => {
                    m.handled_boot = Some(record.boot_count);
                    tracing::info!(device = id, %hostname, "in the iPXE shell");
                    set_state(m, MachineState::Shell, None);
                    None
                }
                Outcome::Stuck(reason) => {
                    m.handled_boot = Some(record.boot_count);
                    tracing::warn!(device = id, %hostname, %reason, "machine stuck");
                    set_state(m, MachineState::Stuck, Some(reason));
                    None
                }
                Outcome::Accepted(ok) => {
                    set_state(m, MachineState::Installing, None);
                    m.status.schema = Some(ok.schema);
                    m.status.warnings = ok.warnings.clone();
                    for w in &ok.warnings {
                        tracing::warn!(device = id, %hostname, warning = %w, "install config");
                    }
                    let facts = node::NodeFacts {
                        name: ok.node_name.clone(),
                        internal_ip: m.private_ip.clone(),
                        plan: m.plan.clone(),
                        joined_at: Utc::now(),
                    };
                    Some((facts, record.boot_count))
                }
            }
        };
        let Some((facts, boot_count)) = join else {
            return Ok(());
        };
        let readiness = Readiness {
            status: "True",
            since: Utc::now(),
        };
        let result = node::register(&self.inner.kube, &facts, readiness).await;
        let mut machines = lock(&self.inner.machines);
        let Some(m) = machines.get_mut(id) else {
            return Ok(());
        };
        match result {
            Ok(()) => {
                tracing::info!(device = id, node = %facts.name, "joined; node Ready");
                m.handled_boot = Some(boot_count);
                m.readiness = Some(readiness);
                m.powered_down = false;
                m.status.node = Some(facts.name.clone());
                m.status.ready = Some("True".into());
                m.facts = Some(facts);
                set_state(m, MachineState::Joined, None);
                Ok(())
            }
            Err(error) => {
                // Not the installer's fault: try again at the next poll.
                m.status.reason = Some(format!("registering node {}: {error}", facts.name));
                Err(Error::Kube(error))
            }
        }
    }

    /// The kubelet of a Gardener device: joins with the user data's bootstrap token, or stays
    /// stuck (and tries again at the next poll, as a kubelet does) while the API server would
    /// refuse it.
    async fn join_gardener(&self, id: &str, join: gardener::Join) -> Result<(), Error> {
        let refusal = match &join {
            gardener::Join::NotGardener => return Ok(()),
            gardener::Join::Unsubstituted => Some(
                "kubelet: the user data still holds the <<BOOTSTRAP_TOKEN>> placeholder".to_owned(),
            ),
            gardener::Join::Token {
                id: token_id,
                secret,
            } => gardener::refusal(&self.inner.kube, token_id, secret)
                .await?
                .map(|r| format!("kubelet: {r}")),
        };
        let facts = {
            let mut machines = lock(&self.inner.machines);
            let Some(m) = machines.get_mut(id) else {
                return Ok(());
            };
            if let Some(reason) = refusal {
                if m.status.reason.as_deref() != Some(reason.as_str()) {
                    tracing::warn!(device = id, hostname = %m.status.hostname, %reason, "cannot join");
                }
                set_state(m, MachineState::Stuck, Some(reason));
                return Ok(());
            }
            node::NodeFacts {
                name: m.status.hostname.clone(),
                internal_ip: m.private_ip.clone(),
                plan: m.plan.clone(),
                joined_at: Utc::now(),
            }
        };
        let readiness = Readiness {
            status: "True",
            since: Utc::now(),
        };
        node::register(&self.inner.kube, &facts, readiness).await?;
        let mut machines = lock(&self.inner.machines);
        if let Some(m) = machines.get_mut(id) {
            tracing::info!(device = id, node = %facts.name, "joined with its bootstrap token; node Ready");
            m.readiness = Some(readiness);
            m.powered_down = false;
            m.status.node = Some(facts.name.clone());
            m.status.ready = Some("True".into());
            m.facts = Some(facts);
            set_state(m, MachineState::Joined, None);
        }
        Ok(())
    }

    async fn run_boot(
        &self,
        record: &BootRecord,
        hostname: &str,
        nics: &[(String, String)],
    ) -> Outcome {
        if let Some(e) = &record.ipxe_error {
            return Outcome::Stuck(format!("iPXE: {e}"));
        }
        let Some(script) = &record.ipxe_script else {
            return if record.ipxe_source == "none" {
                Outcome::Stuck(
                    "iPXE: no script (neither ipxe_script_url nor #!ipxe userdata)".into(),
                )
            } else {
                Outcome::Pending
            };
        };
        let end = match ipxe::run(script, &record.macs) {
            Ok(end) => end,
            Err(e) => return Outcome::Stuck(format!("iPXE: {e}")),
        };
        let (kernel, cmdline) = match end {
            ipxe::ScriptEnd::Shell => return Outcome::Shell,
            ipxe::ScriptEnd::Kernel {
                kernel, cmdline, ..
            } => (kernel, cmdline),
        };
        let params = ipxe::kernel_params(&cmdline);
        let machine = install::Machine { hostname, nics };
        if let Err(refusal) = install::check_kernel_network(&params, &machine) {
            return Outcome::Stuck(format!("kernel: {refusal}"));
        }
        let cmd = install::read_cmdline(&kernel, &params);
        let not_automatic =
            || Outcome::Stuck(format!("installer: {}", install::Refusal::NotAutomatic));
        if cmd.config_url.is_none() && !cmd.automatic {
            return not_automatic();
        }
        let remote = match self.fetch_config(&cmd, record).await {
            Ok(r) => r,
            Err(refusal) => return Outcome::Stuck(format!("installer: {refusal}")),
        };
        let merged = install::merge(&cmd.config, &remote);
        if !install::is_automatic(&merged) {
            return not_automatic();
        }
        match install::check(
            &merged,
            cmd.release.as_deref(),
            &self.inner.expected,
            &machine,
        ) {
            Ok(ok) => Outcome::Accepted(ok),
            Err(refusal) => Outcome::Stuck(format!("installer: {refusal}")),
        }
    }

    async fn fetch_config(
        &self,
        cmd: &install::Cmdline,
        record: &BootRecord,
    ) -> Result<serde_json::Value, install::Refusal> {
        let Some(url) = &cmd.config_url else {
            return Err(install::Refusal::NoConfigUrl);
        };
        if url == install::METADATA_USERDATA_URL {
            let text = record.userdata.as_deref().unwrap_or_default();
            if text.trim().is_empty() {
                return Err(install::Refusal::ConfigFetch {
                    url: url.clone(),
                    message: "the device has no userdata".into(),
                });
            }
            return install::parse_remote(text, true);
        }
        let parsed = Url::parse(url).ok().filter(|u| {
            u.scheme() == "http"
                && match u.host() {
                    Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                    Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                    Some(url::Host::Domain(d)) => d == "localhost",
                    None => false,
                }
        });
        let Some(parsed) = parsed else {
            return Err(install::Refusal::UnreachableConfigUrl { url: url.clone() });
        };
        let fetch = async {
            let resp = self.inner.http.get(parsed).send().await?;
            resp.error_for_status()?.text().await
        };
        let text = fetch.await.map_err(|e| install::Refusal::ConfigFetch {
            url: url.clone(),
            message: e.without_url().to_string(),
        })?;
        install::parse_remote(&text, false)
    }

    fn admin(&self, path: &str) -> Result<Url, Error> {
        self.inner.admin.join(path).map_err(|e| Error::MetalUrl {
            url: self.inner.admin.to_string(),
            message: e.to_string(),
        })
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: Url,
        what: &str,
    ) -> Result<T, Error> {
        let err = |message: String| Error::Emulator {
            what: what.to_owned(),
            message,
        };
        let resp = self
            .inner
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| err(e.without_url().to_string()))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(err(format!("HTTP {status}")));
        }
        resp.json()
            .await
            .map_err(|e| err(e.without_url().to_string()))
    }
}

fn find(machines: &BTreeMap<String, Machine>, key: &str) -> Option<String> {
    if machines.contains_key(key) {
        return Some(key.to_owned());
    }
    // A hostname may come back on a new device: the one that still exists wins.
    let named = |m: &&Machine| m.status.hostname == key || m.status.node.as_deref() == Some(key);
    machines
        .values()
        .filter(named)
        .find(|m| m.status.state != MachineState::Gone)
        .or_else(|| machines.values().find(named))
        .map(|m| m.status.device_id.clone())
}

fn set_state(m: &mut Machine, state: MachineState, reason: Option<String>) {
    if m.status.state != state {
        m.status.since = Utc::now();
    }
    m.status.state = state;
    m.status.reason = reason;
    if state != MachineState::Joined {
        m.status.ready = None;
        m.readiness = None;
        if state != MachineState::Installing {
            m.status.node = None;
            m.status.schema = None;
            m.status.warnings.clear();
        }
    }
}
