//! Harvester Seeder's embedded mode (`metal.harvesterhci.io/v1alpha1`) on top of the Rufio
//! controllers: the `local` Cluster, one rufio Machine per local Inventory, readiness from the
//! Machine's `Contactable` condition, the Node's address, and power actions as rufio Jobs.
//!
//! - [`cluster`]: the `harvester-system/local` Cluster and its `spec.nodes`.
//! - [`inventory`]: the Inventory reconciler (watching Inventories, their Machines and Jobs, the
//!   Nodes they name and the local Cluster).
//! - [`power`]: `spec.powerActionRequested` → Job → `status.powerAction` (pure decisions).
//! - [`conditions`]: Seeder's wrangler-style conditions.
//! - [`hardware`]: hardware facts → Node labels `manufacturer`, `model`, `serialNumber`.
//! - [`health`]: hardware health and event-log entries → Seeder's Node Events (de-duplicated),
//!   hardware facts → Node annotations (pure decisions).
//! - [`node_health`]: the poller that reads the BMC once per `spec.events.pollingInterval`.
//! - [`push`]: the Inventories' Redfish event subscriptions and what a pushed event wakes.
//! - [`streams`]: the BMCs' server-sent event streams, followed where push is refused.
//!
//! Power and readiness go through the Rufio controllers (which `ingot run` starts with this
//! one): a slow or dead BMC holds its own Machine and Job. The only BMC calls made here are the
//! hardware reads of [`node_health`], through Rufio's session manager (the same session), each
//! Inventory in its own reconcile.

pub mod bmc_owner;
mod caches;
pub mod cluster;
pub mod conditions;
pub mod hardware;
pub mod health;
pub mod inventory;
pub mod node_api;
pub mod node_health;
pub mod power;
pub mod push;
pub mod streams;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{reflector, watcher};
use kube::{Api, Client};
use tracing::warn;

use crate::Metrics;
use crate::rufio::RufioContext;
use crate::runtime::{EventRecorder, ReconcileError};

/// Finalizer for the Inventory's entry in the local Cluster's `spec.nodes` (ingot's own, so that
/// the entry is removed before the Inventory can go, whatever else holds it).
pub const MEMBERSHIP_FINALIZER: &str = "seeder.ingot.dev/local-cluster-membership";

/// Settings of the Seeder controller.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Only Inventories of this namespace; `None`: every namespace (as Seeder).
    pub namespace: Option<String>,
    /// Embedded mode runs (`--controllers seeder`): the local Cluster and local Inventories.
    pub embedded: bool,
    /// Provisioning (Seeder's full mode) runs: Inventories that are not local get the common
    /// chain (Machine, readiness, power actions) too.
    pub provisioning: bool,
    /// Push events: the receiver's URL and key (`None`: polling only).
    pub push: Option<Arc<push::PushSettings>>,
}

/// What the Seeder controller needs, built by `ingot run`.
pub struct SeederContext {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// The Event recorders of the Inventory controller and the hardware poller
    /// (`ingot-seeder`).
    pub(crate) inventory_events: EventRecorder,
    pub(crate) hardware_events: EventRecorder,
    /// The local Cluster's `clusterAddress`, read once at start.
    cluster_address: OnceLock<String>,
    /// The Rufio controllers' BMC sessions, for the hardware read.
    pub rufio: Arc<RufioContext>,
    /// When each Inventory's hardware was last read.
    hardware_read: Mutex<HashMap<String, Instant>>,
    /// This replica's name (Events' reporting instance).
    instance: String,
    /// Held while the local Cluster's member list is read and written: every Inventory writes
    /// that one object, and concurrent reconciles would otherwise only conflict with each other.
    pub(crate) cluster_writes: tokio::sync::Mutex<()>,
    /// Inventories (namespace, name) waiting to join the local Cluster: whoever writes next
    /// adds them all in one write (a group commit), so a thousand joins are not a thousand
    /// writes of an ever larger object.
    pub(crate) pending_joins: Mutex<std::collections::BTreeSet<(String, String)>>,
    /// The Inventory controller's stores of Machines, Jobs and Nodes (see [`caches`]).
    caches: OnceLock<caches::Caches>,
    /// The Nodes as the hardware poller last wrote them.
    node_writes: caches::NodeWrites,
    /// Inventories whose hardware a pushed event asked to read now.
    hardware_woken: Mutex<std::collections::HashSet<String>>,
    pub(crate) hardware_wakes: crate::wakes::Wakes<Inventory>,
    /// Per Inventory with push events: what its last subscription ensure said (`None`: it
    /// holds), so that an unchanged refusal is not written again; and whose subscription was
    /// made or found by this process.
    pub(crate) subscriptions: Mutex<HashMap<String, Option<String>>>,
    /// The BMCs' server-sent event streams followed where push is refused.
    pub(crate) streams: streams::Streams,
}

impl SeederContext {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: String,
        settings: Settings,
        rufio: Arc<RufioContext>,
    ) -> Self {
        let events = || EventRecorder::new(client.clone(), EVENT_COMPONENT, Some(instance.clone()));
        let streams = streams::Streams::new(
            settings.push.as_ref().map_or(0, |p| p.max_streams),
            metrics.seeder_event_streams.clone(),
        );
        SeederContext {
            inventory_events: events(),
            hardware_events: events(),
            client,
            metrics,
            settings,
            cluster_address: OnceLock::new(),
            rufio,
            hardware_read: Mutex::default(),
            instance,
            cluster_writes: tokio::sync::Mutex::new(()),
            pending_joins: Mutex::default(),
            caches: OnceLock::new(),
            node_writes: caches::NodeWrites::default(),
            hardware_woken: Mutex::default(),
            hardware_wakes: crate::wakes::Wakes::default(),
            subscriptions: Mutex::default(),
            streams,
        }
    }

    /// An Inventory from the controller's store; `Err` until the store holds its first list
    /// (a missing Inventory may then only be not yet seen).
    pub(crate) fn inventory(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Inventory>>, ()> {
        use futures::FutureExt;
        let store = &self.caches.get().ok_or(())?.inventories;
        if !matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))) {
            return Err(());
        }
        Ok(store.get(&ObjectRef::new(name).within(namespace)))
    }

    /// Reads the Inventory's hardware now (a pushed event): at most once per
    /// [`MIN_WOKEN_READ`], whatever its polling interval.
    pub(crate) fn wake_hardware(&self, inventory: &Inventory) {
        let key = format!(
            "{}/{}",
            inventory.metadata.namespace.as_deref().unwrap_or_default(),
            inventory.metadata.name.as_deref().unwrap_or_default()
        );
        if let Ok(mut woken) = self.hardware_woken.lock() {
            if woken.len() >= 100_000 {
                woken.clear();
            }
            woken.insert(key);
        }
        self.hardware_wakes.wake(ObjectRef::from_obj(inventory));
    }

    /// Keeps the Inventory's read asked for (it waits for [`MIN_WOKEN_READ`]).
    pub(crate) fn keep_hardware_wake(&self, key: &str) {
        if let Ok(mut woken) = self.hardware_woken.lock() {
            woken.insert(key.to_owned());
        }
    }

    /// Whether a pushed event asked for the Inventory's read (and takes the request).
    pub(crate) fn take_hardware_wake(&self, key: &str) -> bool {
        self.hardware_woken
            .lock()
            .map(|mut w| w.remove(key))
            .unwrap_or(false)
    }

    /// The Inventory's Machine (same namespace and name), from the cache or else the API
    /// server.
    pub(crate) async fn machine(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Machine>, kube::Error> {
        let api = Api::namespaced(self.client.clone(), namespace);
        let store = self.caches.get().map(|c| &c.machines);
        caches::read_through(store, &api, &ObjectRef::new(name).within(namespace)).await
    }

    /// A Job of an Inventory, from the cache or else the API server.
    pub(crate) async fn job(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Job>, kube::Error> {
        let api = Api::namespaced(self.client.clone(), namespace);
        let store = self.caches.get().map(|c| &c.jobs);
        caches::read_through(store, &api, &ObjectRef::new(name).within(namespace)).await
    }

    /// A Node, from the cache or else the API server.
    pub(crate) async fn node(&self, name: &str) -> Result<Option<Node>, kube::Error> {
        let store = self.caches.get().map(|c| &c.nodes);
        caches::read_through(store, &Api::all(self.client.clone()), &ObjectRef::new(name)).await
    }

    /// A Node for the hardware poller: the cached copy when it shows the poller's last write,
    /// else the API server's.
    pub(crate) async fn node_to_poll(&self, name: &str) -> Result<Option<Node>, kube::Error> {
        let store = self.caches.get().map(|c| &c.nodes);
        if let Some(node) = caches::cached(store, &ObjectRef::new(name))
            && self.node_writes.shows_last_write(&node)
        {
            return Ok(Some(node));
        }
        let node = Api::<Node>::all(self.client.clone()).get_opt(name).await?;
        match &node {
            Some(node) => self.node_writes.known(node),
            None => self.node_writes.forget(name),
        }
        Ok(node)
    }

    /// Records the Node as the hardware poller's write left it.
    pub(crate) fn node_written(&self, node: &Node) {
        self.node_writes.known(node);
    }

    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// Forgets a deleted Inventory's last hardware read.
    pub(crate) fn forget_hardware(&self, key: &str) {
        if let Ok(mut read) = self.hardware_read.lock() {
            read.remove(key);
        }
    }

    /// Whether the Inventory's hardware is due for a read (`Ok`); if so, records the read as
    /// done now (a failed read waits its interval too, so a BMC is not asked on every pass).
    /// Otherwise, how long until it is due.
    pub(crate) fn take_hardware_turn(&self, key: &str, interval: Duration) -> Result<(), Duration> {
        let mut read = match self.hardware_read.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(at) = read.get(key)
            && at.elapsed() < interval
        {
            return Err(interval - at.elapsed());
        }
        read.insert(key.to_owned(), Instant::now());
        Ok(())
    }

    /// The API of `K` in the watched namespace (or all namespaces).
    pub(crate) fn watched<K: crate::NamespacedKind>(&self) -> kube::Api<K> {
        crate::api_in(&self.client, self.settings.namespace.as_deref())
    }

    fn cluster_address(&self) -> Option<&str> {
        self.cluster_address.get().map(String::as_str)
    }
}

/// Makes sure the local Cluster exists with its status (retrying until it works or `shutdown`),
/// then runs the Inventory controller until `shutdown`.
pub async fn run(
    ctx: Arc<SeederContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    // No stream outlives the controllers (shut down, or aborted when the lease is lost).
    let _streams = streams::StopOnDrop(ctx.clone());
    // Embedded mode prepares the local Cluster first; with provisioning too, that goes on
    // beside the Inventories it does not concern (a local one waits for it).
    let prepare = {
        let ctx = ctx.clone();
        async move {
            if ctx.settings.embedded {
                start(&ctx).await;
            }
        }
    };
    if !ctx.settings.provisioning {
        let started = tokio::select! {
            () = prepare => true,
            () = shutdown.clone() => false,
        };
        if !started {
            return;
        }
    } else {
        let stopped = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = prepare => {}
                () = stopped => {}
            }
        });
    }
    // One store of Inventories for both controllers (a fleet's Inventories held once), each
    // woken only after the store holds the change.
    let (inventories, writer) = reflector::store_shared(INVENTORY_FEED_BUFFER);
    let (Some(for_inventory), Some(for_health)) = (writer.subscribe(), writer.subscribe()) else {
        warn!("the Inventory store takes no subscriber; the Seeder controllers do not run");
        return;
    };
    let feed = crate::feed_store(
        writer,
        ctx.watched::<Inventory>(),
        watcher::Config::default(),
    );
    tokio::select! {
        () = feed => {}
        _ = async {
            tokio::join!(
                inventory::run(ctx.clone(), inventories.clone(), for_inventory, shutdown.clone()),
                node_health::run(ctx, inventories, for_health, shutdown.clone())
            )
        } => {}
    }
}

/// The shortest time between two hardware reads of one Inventory that pushed events ask for.
pub const MIN_WOKEN_READ: Duration = Duration::from_secs(1);

/// Inventory changes a controller may fall behind by before the watch waits for it.
const INVENTORY_FEED_BUFFER: usize = 1024;

async fn start(ctx: &SeederContext) {
    let mut delay = Duration::from_secs(1);
    loop {
        match startup(ctx).await {
            Ok(()) => return,
            Err(error) => {
                warn!(%error, "preparing the local Cluster failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

async fn startup(ctx: &SeederContext) -> Result<(), Error> {
    let address = cluster::cluster_address(&ctx.client).await?;
    cluster::ensure_local_cluster(&ctx.client, &address).await?;
    let _ = ctx.cluster_address.set(address);
    Ok(())
}

/// Errors of the Seeder reconciler (retried with backoff by the controller).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

/// The component of the Seeder controllers' Events.
const EVENT_COMPONENT: &str = "ingot-seeder";

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Other(_) => "other",
        }
    }
}
