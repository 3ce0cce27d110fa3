//! Plays the servers behind a fleet of emulated BMCs (the BMC-driven, Seeder-style
//! provisioning): bmc-sim's Redfish BMCs or ipmi-sim's IPMI ones, each seen through
//! [`ServerBmc`]. Each power-on the firmware records ([`ingot_bmc_sim::BootRecord`],
//! [`ingot_ipmi_sim::BootRecord`]) is booted as hardware would.
//!
//! - **PXE**: the iPXE script from the boot URL (`{mac}`: NIC 0's MAC, lower case with colons),
//!   run; the install kernel's static `ip=` is the installer's address; the config at
//!   `harvester.install.config_url` is fetched from that address (the client socket is bound to
//!   it when it is a loopback one), checked as the installer does (`install.mode` `create`
//!   or `join`), the install takes [`ServerFleetConfig::install_time`], the `SUCCEEDED`
//!   webhooks are sent once, and the server reboots itself (no override left: the disk).
//! - **Image**: a kernel line with `ds=nocloud-net;s=<seed>` is an OS image booted over the
//!   network, not the installer: cloud-init's meta-data and user-data are fetched from its own
//!   address, and Gardener user data joins its Node with the bootstrap token in it.
//! - **Wipe**: a kernel line with `ingot.wipe=metadata` is ingot's wipe image: the disk is
//!   erased ([`ServerFleetConfig::wipe_time`]; a later disk boot finds no operating system)
//!   and the wipe reported to `ingot.report` from the server's own address.
//! - **Disk**: an installed server is the Harvester node. The create node starts the cluster in
//!   the target API server (a join credential for its token, its `server/manifests`), registers
//!   its Node and keeps it Ready; a join node waits for that cluster, then registers with the
//!   credential its own token gives, which the API server refuses for a wrong token. A server
//!   never installed stays at "no operating system".
//! - **Power off**: the kubelet stops; the Node is posted `Ready=Unknown` (standing in for the
//!   node lifecycle controller) and no longer renewed.
//!
//! The fleet is followed in process (the [`BmcState`] / [`ingot_ipmi_sim::BmcHandle`] handles),
//! not over `/_sim/boots` or IPMI: the server and its BMC are one machine, so the OS rebooting
//! itself after the install is no BMC request (no counter, no reset log entry, no chassis
//! control), and 100 servers cost no polling traffic.

mod bmc;
pub mod cluster;
mod image;
pub mod kernel;
mod pxe;
mod wipe;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use ingot_bmc_sim::BmcState;
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use bmc::{ServerBmc, ServerBoot};

use crate::node::{self, NodeFacts, Readiness};
use crate::{Error, Running, lock};

/// The settings of a [`ServerFleet`].
#[derive(Clone)]
pub struct ServerFleetConfig {
    /// Where a PXE-booting server gets its iPXE script: `{mac}` is replaced by its MAC; without
    /// `{mac}`, `/<mac>` is appended (`http://127.0.0.1:8080/boot` → `.../boot/02:00:...`).
    pub boot_url: String,
    /// The API server that plays the new cluster; its host is the cluster's VIP.
    pub target: kube::Config,
    /// How long the installer runs once the config is accepted.
    pub install_time: Duration,
    /// How long the wipe image erases before it reports.
    pub wipe_time: Duration,
    pub poll_interval: Duration,
    pub heartbeat_interval: Duration,
    /// NICs per server (`ServerBmc::mac(0)`, `mac(1)`...); it PXE-boots from the first.
    pub nics: u32,
    /// Attempts of a webhook whose connection fails, and the wait between them.
    pub webhook_attempts: u32,
    pub webhook_retry: Duration,
}

impl ServerFleetConfig {
    pub fn new(boot_url: impl Into<String>, target: kube::Config) -> Self {
        Self {
            boot_url: boot_url.into(),
            target,
            install_time: Duration::from_secs(3),
            wipe_time: Duration::from_secs(2),
            poll_interval: Duration::from_millis(100),
            heartbeat_interval: Duration::from_secs(10),
            nics: 2,
            webhook_attempts: 5,
            webhook_retry: Duration::from_secs(1),
        }
    }
}

/// Where a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Powered off (or never on).
    Off,
    /// PXE: fetching and running its iPXE script, reading its install config.
    Pxe,
    /// The installer runs.
    Installing,
    /// Installed; rebooting into it.
    Rebooting,
    /// Booted from disk; its RKE2 is starting, or waiting for the cluster it joins.
    Starting,
    /// Its Node is registered and posted Ready.
    Running,
    /// Booted into a wipe image, erasing its disks.
    Wiping,
    /// Its disks erased and the wipe reported; idle until powered off.
    Wiped,
    /// `reason` says why.
    Stuck,
}

/// What `GET /servers` shows for one server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerStatus {
    pub index: usize,
    /// NIC 0: the MAC it PXE-boots with.
    pub mac: String,
    /// The BMC's power state.
    pub power: String,
    pub boot_count: u64,
    /// What the latest boot booted (`Pxe`, `Hdd`...).
    pub boot_device: Option<String>,
    pub state: ServerState,
    pub reason: Option<String>,
    /// `create` or `join`, from its install config.
    pub mode: Option<String>,
    /// Its static address (the Node's InternalIP).
    pub address: Option<String>,
    pub node: Option<String>,
    pub ready: Option<String>,
    pub script_fetches: u32,
    pub installs: u32,
    pub webhooks_sent: u32,
    /// Wipes done (the disk erased), and wipe reports the boot server accepted.
    pub wipes: u32,
    pub wipe_reports: u32,
    pub warnings: Vec<String>,
    pub since: DateTime<Utc>,
}

/// What an install left on the disk.
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    pub create: bool,
    pub token: String,
    pub address: Option<String>,
    pub node_name: String,
    /// `(path, content)` of the `os.write_files` under RKE2's manifests directory.
    pub manifests: Vec<(String, String)>,
}

struct Kubelet {
    client: Client,
    facts: NodeFacts,
    since: DateTime<Utc>,
}

struct Server {
    bmc: Arc<dyn ServerBmc>,
    status: ServerStatus,
    /// The boot record handled last, and whether its power-off was.
    handled: u64,
    off_seen: bool,
    task: Option<tokio::task::JoinHandle<()>>,
    installed: Option<Arc<Installed>>,
    kubelet: Option<Kubelet>,
    manifests_pending: bool,
}

pub(crate) struct Inner {
    config: ServerFleetConfig,
    vip: String,
    admin: Client,
    http: reqwest::Client,
    servers: Mutex<Vec<Server>>,
    /// The server whose cluster runs (its create node is up).
    cluster: Mutex<Option<usize>>,
}

/// The servers behind one fleet of emulated BMCs. Clones share them.
#[derive(Clone)]
pub struct ServerFleet {
    inner: Arc<Inner>,
}

impl ServerFleet {
    /// Plays the servers behind bmc-sim's Redfish BMCs `bmcs` (in order: server `i` is
    /// `bmcs[i]`).
    pub fn new(config: ServerFleetConfig, bmcs: Vec<Arc<BmcState>>) -> Result<Self, Error> {
        let bmcs = bmcs
            .into_iter()
            .map(|b| Arc::new(b) as Arc<dyn ServerBmc>)
            .collect();
        Self::with_bmcs(config, bmcs)
    }

    /// Plays the servers behind ipmi-sim's IPMI BMCs `bmcs` (in order).
    pub fn ipmi(
        config: ServerFleetConfig,
        bmcs: Vec<ingot_ipmi_sim::BmcHandle>,
    ) -> Result<Self, Error> {
        let bmcs = bmcs
            .into_iter()
            .map(|b| Arc::new(b) as Arc<dyn ServerBmc>)
            .collect();
        Self::with_bmcs(config, bmcs)
    }

    /// Plays the servers behind `bmcs`, of any kind (in order).
    pub fn with_bmcs(
        config: ServerFleetConfig,
        bmcs: Vec<Arc<dyn ServerBmc>>,
    ) -> Result<Self, Error> {
        let vip = config.target.cluster_url.host().unwrap_or_default();
        let vip = vip.trim_start_matches('[').trim_end_matches(']').to_owned();
        let admin = Client::try_from(config.target.clone())?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .no_proxy()
            .build()
            .map_err(Error::HttpClient)?;
        let servers = bmcs
            .into_iter()
            .enumerate()
            .map(|(index, bmc)| Server {
                status: new_status(index, bmc.mac(0)),
                bmc,
                handled: 0,
                off_seen: true,
                task: None,
                installed: None,
                kubelet: None,
                manifests_pending: false,
            })
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                vip,
                admin,
                http,
                servers: Mutex::new(servers),
                cluster: Mutex::new(None),
            }),
        })
    }

    /// Starts following the BMCs, and the heartbeats.
    pub fn start(&self) -> Running {
        let poller = self.clone();
        let beater = self.clone();
        Running {
            tasks: vec![
                tokio::spawn(async move {
                    loop {
                        poller.poll_once().await;
                        tokio::time::sleep(poller.inner.config.poll_interval).await;
                    }
                }),
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(beater.inner.config.heartbeat_interval).await;
                        beater.heartbeat_all().await;
                    }
                }),
            ],
        }
    }

    pub fn servers(&self) -> Vec<ServerStatus> {
        let servers = lock(&self.inner.servers);
        servers.iter().map(|s| s.status.clone()).collect()
    }

    pub fn server(&self, index: usize) -> Option<ServerStatus> {
        lock(&self.inner.servers)
            .get(index)
            .map(|s| s.status.clone())
    }

    /// `GET /servers` and `GET /servers/{index}`.
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/servers", axum::routing::get(list))
            .route("/servers/{index}", axum::routing::get(one))
            .with_state(self.clone())
    }

    /// The cluster at the VIP already runs (no server of this fleet creates it; its nodes are
    /// join nodes, as a pool's): its join credential for `cluster_token` is set up, and join
    /// nodes register at once.
    pub async fn cluster_exists(&self, cluster_token: &str) -> Result<(), kube::Error> {
        cluster::start(&self.inner.admin, cluster_token).await?;
        *lock(&self.inner.cluster) = Some(usize::MAX);
        Ok(())
    }

    /// One look at every BMC: a new power-on is booted, a power-off stops the OS.
    pub async fn poll_once(&self) {
        let mut stopped = Vec::new();
        {
            let mut servers = lock(&self.inner.servers);
            let mut cluster = lock(&self.inner.cluster);
            for (i, s) in servers.iter_mut().enumerate() {
                s.status.power = s.bmc.power_state();
                let Some(boot) = s.bmc.last_boot() else {
                    continue;
                };
                if boot.count != s.handled {
                    s.handled = boot.count;
                    s.off_seen = false;
                    if let Some(t) = s.task.take() {
                        t.abort();
                    }
                    s.status.boot_count = boot.count;
                    s.status.boot_device = Some(boot.device.clone());
                    if !boot.powered_off {
                        let fleet = self.clone();
                        let task = fleet.run_boot(i, boot.count, boot.device);
                        s.task = Some(tokio::spawn(task));
                        continue;
                    }
                }
                if boot.powered_off && !s.off_seen {
                    s.off_seen = true;
                    if let Some(t) = s.task.take() {
                        t.abort();
                    }
                    if let Some(k) = s.kubelet.take() {
                        stopped.push(k.facts);
                    }
                    if *cluster == Some(i) {
                        *cluster = None;
                    }
                    let ready = s.status.node.as_ref().map(|_| "Unknown".to_owned());
                    set_state(&mut s.status, ServerState::Off, None);
                    s.status.ready = ready;
                }
            }
        }
        for facts in stopped {
            // The node lifecycle controller's part, at once: the kubelet stopped posting.
            let unknown = Readiness {
                status: "Unknown",
                since: Utc::now(),
            };
            if let Err(error) = node::post_status(&self.inner.admin, &facts, unknown, false).await {
                tracing::warn!(node = %facts.name, %error, "posting Ready=Unknown");
            }
        }
    }

    /// Posts the status of every running node, and applies manifests still pending.
    pub async fn heartbeat_all(&self) {
        let due: Vec<(usize, Client, NodeFacts, DateTime<Utc>, bool)> = lock(&self.inner.servers)
            .iter()
            .enumerate()
            .filter(|(_, s)| s.status.state == ServerState::Running)
            .filter_map(|(i, s)| {
                let k = s.kubelet.as_ref()?;
                Some((
                    i,
                    k.client.clone(),
                    k.facts.clone(),
                    k.since,
                    s.manifests_pending,
                ))
            })
            .collect();
        for (i, client, facts, since, manifests) in due {
            let ready = Readiness {
                status: "True",
                since,
            };
            if let Err(error) = node::post_status(&client, &facts, ready, false).await {
                tracing::warn!(node = %facts.name, %error, "posting node status");
            }
            if manifests {
                self.apply_manifests(i).await;
            }
        }
    }

    async fn run_boot(self, i: usize, boot: u64, device: String) {
        match device.as_str() {
            "Pxe" => pxe::boot(&self, i, boot).await,
            "Hdd" => self.disk_boot(i, boot).await,
            other => {
                let reason = format!("boot device {other} is not emulated (Pxe or Hdd)");
                self.stuck(i, boot, reason);
            }
        }
    }

    /// Runs `f` on server `i` if boot `boot` is still the one it runs.
    pub(crate) fn with<T>(
        &self,
        i: usize,
        boot: u64,
        f: impl FnOnce(&mut ServerCtx) -> T,
    ) -> Option<T> {
        let mut servers = lock(&self.inner.servers);
        let s = servers.get_mut(i)?;
        if s.handled != boot || s.off_seen {
            return None;
        }
        let mut ctx = ServerCtx {
            status: &mut s.status,
            installed: &mut s.installed,
        };
        Some(f(&mut ctx))
    }

    pub(crate) fn set(&self, i: usize, boot: u64, state: ServerState, reason: Option<String>) {
        self.with(i, boot, |c| set_state(c.status, state, reason));
    }

    pub(crate) fn stuck(&self, i: usize, boot: u64, reason: String) {
        tracing::warn!(server = i, %reason, "server stuck");
        self.set(i, boot, ServerState::Stuck, Some(reason));
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    pub(crate) fn bmc(&self, i: usize) -> Option<Arc<dyn ServerBmc>> {
        lock(&self.inner.servers).get(i).map(|s| s.bmc.clone())
    }

    pub(super) async fn disk_boot(&self, i: usize, boot: u64) {
        let Some(installed) = self.with(i, boot, |c| c.installed.clone()).flatten() else {
            let reason = "no operating system: the disk holds nothing bootable (never installed)";
            return self.stuck(i, boot, reason.into());
        };
        self.with(i, boot, |c| {
            c.status.mode = Some(if installed.create { "create" } else { "join" }.into());
            c.status.address = installed.address.clone();
        });
        if installed.create {
            self.start_cluster(i, boot, &installed).await;
        } else {
            self.join_cluster(i, boot, &installed).await;
        }
    }

    /// The create node: its RKE2 starts the cluster, its kubelet registers.
    async fn start_cluster(&self, i: usize, boot: u64, installed: &Installed) {
        if let Some(j) = *lock(&self.inner.cluster)
            && j != i
        {
            let reason = format!(
                "rke2: a cluster already runs at {} (server {j} created it)",
                self.inner.vip
            );
            return self.stuck(i, boot, reason);
        }
        self.set(
            i,
            boot,
            ServerState::Starting,
            Some("rke2 server starting".into()),
        );
        while let Err(error) = cluster::start(&self.inner.admin, &installed.token).await {
            self.set(
                i,
                boot,
                ServerState::Starting,
                Some(format!("rke2 server starting: {error}")),
            );
            tokio::time::sleep(self.inner.config.poll_interval).await;
        }
        let client = self.inner.admin.clone();
        if self.register(i, boot, installed, client).await.is_ok() {
            *lock(&self.inner.cluster) = Some(i);
            self.apply_manifests(i).await;
        }
    }

    /// A join node: waits for the cluster, then registers with its token's credential.
    async fn join_cluster(&self, i: usize, boot: u64, installed: &Installed) {
        let vip = &self.inner.vip;
        while lock(&self.inner.cluster).is_none() {
            let why = format!(
                "rke2 agent: waiting for the cluster at https://{vip}:443 (no server runs it)"
            );
            self.set(i, boot, ServerState::Starting, Some(why));
            tokio::time::sleep(self.inner.config.poll_interval).await;
        }
        let client = match cluster::join_client(&self.inner.config.target, &installed.token) {
            Ok(c) => c,
            Err(reason) => return self.stuck(i, boot, reason),
        };
        match self.register(i, boot, installed, client).await {
            Err(kube::Error::Api(e)) if e.code == 401 => {
                let reason = format!(
                    "rke2 agent: the cluster at https://{vip}:443 refused the join token (401 Unauthorized)"
                );
                self.stuck(i, boot, reason);
            }
            _ => {}
        }
    }

    /// The kubelet registers the Node (other errors are retried) and keeps it Ready.
    async fn register(
        &self,
        i: usize,
        boot: u64,
        installed: &Installed,
        client: Client,
    ) -> Result<(), kube::Error> {
        let facts = NodeFacts {
            name: installed.node_name.clone(),
            internal_ip: installed.address.clone(),
            plan: None,
            joined_at: Utc::now(),
        };
        let ready = Readiness {
            status: "True",
            since: Utc::now(),
        };
        loop {
            match node::register(&client, &facts, ready).await {
                Ok(()) => break,
                Err(kube::Error::Api(e)) if e.code == 401 || e.code == 403 => {
                    return Err(kube::Error::Api(e));
                }
                Err(error) => {
                    let why = format!("kubelet: registering node {}: {error}", facts.name);
                    self.set(i, boot, ServerState::Starting, Some(why));
                    tokio::time::sleep(self.inner.config.poll_interval).await;
                }
            }
        }
        tracing::info!(server = i, node = %facts.name, "node registered, Ready");
        let mut servers = lock(&self.inner.servers);
        if let Some(s) = servers.get_mut(i)
            && s.handled == boot
            && !s.off_seen
        {
            s.manifests_pending = installed.create && !installed.manifests.is_empty();
            s.status.node = Some(facts.name.clone());
            set_state(&mut s.status, ServerState::Running, None);
            s.status.ready = Some("True".into());
            s.kubelet = Some(Kubelet {
                client,
                facts,
                since: ready.since,
            });
        }
        Ok(())
    }

    /// RKE2's deploy controller: the create node's manifests, applied until they all are.
    async fn apply_manifests(&self, i: usize) {
        let manifests = {
            let servers = lock(&self.inner.servers);
            let Some(s) = servers.get(i) else { return };
            match (&s.installed, s.manifests_pending) {
                (Some(inst), true) => inst.manifests.clone(),
                _ => return,
            }
        };
        let mut failures = Vec::new();
        for (path, content) in &manifests {
            if let Err(e) = cluster::apply_manifest(&self.inner.admin, path, content).await {
                failures.push(e);
            }
        }
        let mut servers = lock(&self.inner.servers);
        if let Some(s) = servers.get_mut(i) {
            s.manifests_pending = !failures.is_empty();
            s.status.warnings.retain(|w| !w.starts_with("deploy: "));
            s.status
                .warnings
                .extend(failures.into_iter().map(|f| format!("deploy: {f}")));
        }
    }
}

/// What a boot task may change of its server.
pub(crate) struct ServerCtx<'a> {
    pub status: &'a mut ServerStatus,
    pub installed: &'a mut Option<Arc<Installed>>,
}

fn new_status(index: usize, mac: String) -> ServerStatus {
    ServerStatus {
        index,
        mac,
        power: String::new(),
        boot_count: 0,
        boot_device: None,
        state: ServerState::Off,
        reason: None,
        mode: None,
        address: None,
        node: None,
        ready: None,
        script_fetches: 0,
        installs: 0,
        webhooks_sent: 0,
        wipes: 0,
        wipe_reports: 0,
        warnings: Vec::new(),
        since: Utc::now(),
    }
}

pub(crate) fn set_state(s: &mut ServerStatus, state: ServerState, reason: Option<String>) {
    if s.state != state {
        s.since = Utc::now();
    }
    s.state = state;
    s.reason = reason;
    if state != ServerState::Running {
        s.ready = None;
    }
}

async fn list(State(f): State<ServerFleet>) -> Response {
    axum::Json(json!({ "servers": f.servers() })).into_response()
}

async fn one(State(f): State<ServerFleet>, Path(index): Path<usize>) -> Response {
    match f.server(index) {
        Some(s) => axum::Json(s).into_response(),
        None => (
            axum::http::StatusCode::NOT_FOUND,
            axum::Json(json!({"error": format!("no server {index}")})),
        )
            .into_response(),
    }
}
