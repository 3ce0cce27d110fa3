//! Provisioning: Harvester Seeder's full mode (`metal.harvesterhci.io/v1alpha1` Clusters other
//! than `harvester-system/local`, their Inventories and AddressPools), without Tinkerbell: ingot
//! allocates the addresses, writes each node's iPXE script and Harvester install config, boots
//! the server into the installer once through its BMC (a rufio Job), serves the boot itself
//! (`ingot run --boot-addr`), and hears the installer's SUCCEEDED webhook. Opt-in
//! ([`BootMode::Tinkerbell`]), Tinkerbell's Smee and Hegel serve the boot from the objects
//! [`tinkerbell`] writes.
//!
//! - [`ipam`]: which addresses an AddressPool hands out, to whom (pure).
//! - [`addresses`]: `allocate_address` and `release_address`, safe against concurrent callers
//!   (writes under the `resourceVersion` read); [`allocation`]: the Cluster's and its nodes'
//!   addresses on top of it.
//! - [`addresspool`]: the AddressPool controller (`provisioning-addresspool`): Seeder's status,
//!   its finalizer, bad input held with a condition, deletion held while an address is.
//! - [`cluster`]: the Cluster state machine (Seeder's status strings), VIP, token, allocation
//!   of the nodes, their install Secrets, and the check that the new cluster has its Nodes.
//! - [`node`]: one server's boot and release (the Inventory side).
//! - [`install`]: the install Secret of a node (OS password, script, config) and what it holds.
//! - [`boot`]: what the boot server answers, read from the stores.
//! - [`tinkerbell`]: the opt-in mode that boots through Tinkerbell: Hardware, Template and
//!   Workflow objects as Seeder writes them, and the Workflow followed.
//!
//! Inventories' Machines, readiness and power actions stay Seeder's common chain
//! (`seeder::inventory`, which `ingot run` starts with provisioning).

pub mod addresses;
pub mod addresspool;
pub mod allocation;
pub mod boot;
pub mod cluster;
pub mod fat;
pub mod install;
pub mod ipam;
pub mod media;
pub mod node;
pub mod remote;
pub mod render;
pub mod tinkerbell;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ingot_api::rufio::Job;
use ingot_api::seeder::{AddressPool, Cluster, Inventory};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::Metrics;
use crate::rufio::tenancy::CrossNamespace;
use crate::runtime::{EventRecorder, ReconcileError, Retry};

/// Seeder's finalizer on a provisioned Cluster.
pub const CLUSTER_FINALIZER: &str = "finalizer.metal.cluster.harvesterhci.io";
/// The label on the Secrets ingot writes for provisioning (`install` or `token`).
pub const SECRET_LABEL: &str = "provisioning.ingot.dev/secret";
/// The component of provisioning's Events.
const EVENT_COMPONENT: &str = "ingot-provisioning";

/// Settings of provisioning, from `ingot run`.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Only Clusters and Inventories of this namespace; `None`: every namespace.
    pub namespace: Option<String>,
    /// The base URL servers reach ingot's boot server at (`--boot-url`), e.g.
    /// `http://10.0.0.5:8082`: it goes into each script and config.
    pub boot_url: Option<url::Url>,
    /// At most this many servers between their install boot and their installer's SUCCEEDED.
    pub max_concurrent_installs: usize,
    /// An install not reported within this long after its boot is held with a condition.
    pub install_timeout: Duration,
    /// Which namespaces a Cluster may take Inventories and AddressPools from, besides its own.
    pub cross_namespace: CrossNamespace,
    /// Crash points armed in test builds (`--crash-point`).
    pub crash_point: Option<String>,
    /// Who boots the servers: ingot's boot server (default) or Tinkerbell (opt-in).
    pub boot: BootMode,
}

/// Who serves the servers' boot (`--provisioning-boot`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BootMode {
    /// ingot's boot server serves each node's iPXE script and install config.
    #[default]
    Ingot,
    /// Tinkerbell's Smee and Hegel do, from the Hardware, Template and Workflow objects ingot
    /// writes as Seeder does ([`tinkerbell`]).
    Tinkerbell {
        /// The Hegel/Smee address; `None`: the load-balancer IP of Service `tink-stack` in the
        /// Cluster's namespace, as Seeder reads it.
        address: Option<String>,
    },
}

impl Settings {
    pub fn tinkerbell(&self) -> bool {
        matches!(self.boot, BootMode::Tinkerbell { .. })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            boot_url: None,
            max_concurrent_installs: 20,
            install_timeout: Duration::from_secs(2 * 3600),
            cross_namespace: CrossNamespace::default(),
            crash_point: None,
            boot: BootMode::Ingot,
        }
    }
}

/// The watched stores provisioning reads (one watch each, shared by its controllers and the
/// boot server).
#[derive(Clone)]
pub struct Stores {
    pub clusters: Store<Cluster>,
    pub inventories: Store<Inventory>,
    pub pools: Store<AddressPool>,
    /// Jobs labelled with their Inventory (`inventory.metal.harvesterhci.io`).
    pub jobs: Store<Job>,
    /// The Secrets ingot writes (labelled [`SECRET_LABEL`]).
    pub secrets: Store<Secret>,
    /// Tinkerbell mode only: what its objects and the stack say.
    pub tink: Option<tinkerbell::Stores>,
}

impl Stores {
    /// Waits for every store's first list; `false` if a watch ended first.
    pub async fn listed(&self) -> bool {
        let (clusters, inventories, pools, jobs, secrets) = tokio::join!(
            self.clusters.wait_until_ready(),
            self.inventories.wait_until_ready(),
            self.pools.wait_until_ready(),
            self.jobs.wait_until_ready(),
            self.secrets.wait_until_ready(),
        );
        clusters.is_ok() && inventories.is_ok() && pools.is_ok() && jobs.is_ok() && secrets.is_ok()
    }

    pub fn inventory(&self, namespace: &str, name: &str) -> Option<Arc<Inventory>> {
        self.inventories
            .get(&ObjectRef::new(name).within(namespace))
    }

    pub fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>> {
        self.clusters.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn pool(&self, namespace: &str, name: &str) -> Option<Arc<AddressPool>> {
        self.pools.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.secrets.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn job(&self, namespace: &str, name: &str) -> Option<Arc<Job>> {
        self.jobs.get(&ObjectRef::new(name).within(namespace))
    }

    /// Tinkerbell mode: its stores once each has listed (`Err`: not yet, to be tried again;
    /// an empty store would be taken for a missing stack or Workflow).
    pub(crate) fn tink_listed(&self) -> Result<Option<&tinkerbell::Stores>, Error> {
        match &self.tink {
            None => Ok(None),
            Some(tink) if tink.listed() => Ok(Some(tink)),
            Some(_) => Err(Error::NotStarted),
        }
    }
}

/// What provisioning's controllers share, built by `ingot run`.
pub struct ProvisioningContext {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    pub(crate) cluster_events: EventRecorder,
    pub(crate) inventory_events: EventRecorder,
    pub(crate) pool_events: EventRecorder,
    stores: OnceLock<Stores>,
    /// Held while an install boot is counted against the budget and its slot taken (not while
    /// its Job is created), so that two reconciles never both take the last slot.
    pub(crate) boot_gate: tokio::sync::Mutex<node::InFlight>,
    /// For `clusterConfig.configURL`.
    pub(crate) http: reqwest::Client,
    /// For the new cluster's API server, whose CA ingot does not know (`remote`).
    pub(crate) remote_http: reqwest::Client,
    /// The watches of new clusters' Nodes, and the Cluster wake-ups they send.
    pub(crate) node_watches: remote::NodeWatches,
    /// When each pool's owners were last looked up (see [`addresspool`]).
    owner_checks: Mutex<HashMap<String, Instant>>,
}

impl ProvisioningContext {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: String,
        settings: Settings,
    ) -> Self {
        let events = || EventRecorder::new(client.clone(), EVENT_COMPONENT, Some(instance.clone()));
        let node_watches =
            remote::NodeWatches::new(metrics.provisioning.new_cluster_wakeups.clone());
        ProvisioningContext {
            cluster_events: events(),
            inventory_events: events(),
            pool_events: events(),
            client,
            metrics,
            settings,
            stores: OnceLock::new(),
            boot_gate: tokio::sync::Mutex::new(node::InFlight::default()),
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(15))
                .redirect(reqwest::redirect::Policy::limited(3))
                .build()
                .unwrap_or_default(),
            remote_http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(10))
                .tls_danger_accept_invalid_certs(true)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            node_watches,
            owner_checks: Mutex::default(),
        }
    }

    /// Whether the pool's owners are to be looked up on this pass (see [`addresspool`]); if so,
    /// records the look as made now.
    pub(crate) fn owner_check_due(&self, key: &str, deleting: bool) -> bool {
        let mut checks = self.owner_checks.lock().unwrap_or_else(|e| e.into_inner());
        let due = deleting
            || checks
                .get(key)
                .is_none_or(|at| at.elapsed() >= addresspool::RESYNC);
        if due {
            checks.insert(key.to_owned(), Instant::now());
        }
        due
    }

    /// Forgets a pool that is gone.
    pub(crate) fn forget_owner_check(&self, key: &str) {
        let mut checks = self.owner_checks.lock().unwrap_or_else(|e| e.into_inner());
        checks.remove(key);
    }

    /// The stores, once [`run`] started the watches.
    pub fn stores(&self) -> Option<&Stores> {
        self.stores.get()
    }

    pub(crate) fn watched<K: crate::NamespacedKind>(&self) -> kube::Api<K> {
        crate::api_in(&self.client, self.settings.namespace.as_deref())
    }

    /// Whether an object of `from` may use one of `to` (its own namespace, or allowed).
    pub(crate) fn may_use(&self, from: &str, to: &str) -> bool {
        from == to || self.settings.cross_namespace.allows(from, to)
    }
}

/// Errors of provisioning's reconciles.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("address pool: {0}")]
    Address(String),
    #[error("the stores are not filled yet")]
    NotStarted,
    /// ingot runs without a setting this needs (the message names the flag).
    #[error("{0}")]
    Settings(String),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(e) if crate::runtime::is_conflict(e) => "conflict",
            Error::Kube(_) => "kube",
            Error::Address(_) => "address",
            Error::NotStarted => "starting",
            Error::Settings(_) => "settings",
        }
    }

    fn retry(&self) -> Retry {
        match self {
            Error::Kube(e) if crate::runtime::is_conflict(e) => Retry::Conflict,
            _ => Retry::Backoff,
        }
    }
}

/// `namespace/name`, as conditions and Events write an object.
pub(crate) fn full_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Changes a controller may fall behind by before the watch waits for it.
const FEED_BUFFER: usize = 1024;

/// Starts the watches and the two controllers; returns when `shutdown` completes.
pub async fn run(
    ctx: Arc<ProvisioningContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Config;
    // One store per kind, filled by one watch; each controller is woken only after the store
    // holds the change.
    let (clusters, cluster_writer) = reflector::store_shared(FEED_BUFFER);
    let (inventories, inventory_writer) = reflector::store_shared(FEED_BUFFER);
    let (pools, pool_writer) = reflector::store_shared(FEED_BUFFER);
    let (jobs, job_writer) = reflector::store_shared(FEED_BUFFER);
    let (secrets, secret_writer) = reflector::store_shared(FEED_BUFFER);
    let subscriptions = (|| {
        Some((
            cluster::Triggers {
                clusters: cluster_writer.subscribe()?,
                inventories: inventory_writer.subscribe()?,
                pools: pool_writer.subscribe()?,
                secrets: secret_writer.subscribe()?,
                stack: None,
            },
            node::Triggers {
                inventories: inventory_writer.subscribe()?,
                slots: inventory_writer.subscribe()?,
                clusters: cluster_writer.subscribe()?,
                jobs: job_writer.subscribe()?,
                workflows: None,
            },
        ))
    })();
    let pool_trigger = pool_writer.subscribe();
    // Tinkerbell mode: the Workflows, Service tink-stack and ConfigMap seeder-config, watched
    // (only in that mode, so the default mode needs no right to them).
    let mut tink = ctx
        .settings
        .tinkerbell()
        .then(|| tinkerbell::Watches::new(FEED_BUFFER));
    let tink_triggers = match &mut tink {
        None => Some(None),
        Some(watches) => watches.triggers().map(Some),
    };
    let (Some((mut cluster_triggers, mut node_triggers)), Some(pool_trigger), Some(tink_triggers)) =
        (subscriptions, pool_trigger, tink_triggers)
    else {
        tracing::warn!("a provisioning store takes no subscriber; provisioning does not run");
        return;
    };
    if let Some(t) = tink_triggers {
        cluster_triggers.stack = Some((t.services, t.configs));
        node_triggers.workflows = Some(t.workflows);
    }
    let stores = Stores {
        clusters,
        inventories,
        pools,
        jobs,
        secrets,
        tink: tink.as_ref().map(tinkerbell::Watches::stores),
    };
    let _ = ctx.stores.set(stores.clone());
    let labelled = |label: &str| Config::default().labels(label);
    let feeds = async {
        tokio::join!(
            crate::feed_store(cluster_writer, ctx.watched::<Cluster>(), Config::default()),
            crate::feed_store(
                inventory_writer,
                ctx.watched::<Inventory>(),
                Config::default()
            ),
            crate::feed_store(pool_writer, ctx.watched::<AddressPool>(), Config::default()),
            crate::feed_store(
                job_writer,
                ctx.watched::<Job>(),
                labelled(ingot_api::seeder::JOB_INVENTORY_LABEL)
            ),
            crate::feed_store(
                secret_writer,
                ctx.watched::<Secret>(),
                labelled(SECRET_LABEL)
            ),
            async {
                if let Some(watches) = tink {
                    watches
                        .feed(&ctx.client, ctx.settings.namespace.as_deref())
                        .await;
                }
            },
        )
    };
    tokio::select! {
        _ = feeds => {}
        _ = async {
            // Nothing is decided from a store before its first list: an Inventory store not
            // filled yet reads as "no node holds this Cluster", and a deleted Cluster would be
            // let go with its servers still running.
            if !stores.listed().await {
                return;
            }
            tokio::join!(
                addresspool::run(ctx.clone(), stores.pools.clone(), pool_trigger, shutdown.clone()),
                cluster::run(ctx.clone(), stores.clone(), cluster_triggers, shutdown.clone()),
                node::run(ctx.clone(), stores, node_triggers, shutdown),
            );
        } => {}
    }
}
