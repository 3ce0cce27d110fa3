//! The Gardener machine controller for Equinix Metal and for servers on premises (Inventories):
//! ingot in the place of `machine-controller-manager-provider-equinix-metal`, beside upstream
//! machine-controller-manager
//! (which runs the MachineSet and MachineDeployment controllers). Both talk only through the API:
//! Machines, MachineClasses, Secrets and Nodes.
//!
//! * [`machine`]: creation and health of a Machine (phases `""` -> `Pending` -> `Running`,
//!   `CrashLoopBackOff`, `Unknown`, `Failed`).
//! * [`delete`]: the deletion flow, step by step, each step recorded in
//!   `status.lastOperation.description` with upstream's markers so that either controller can
//!   finish what the other started.
//! * [`drain`]: evicting a drained Node's pods, PodDisruptionBudgets and eviction retries.
//! * [`bootstrap`]: the bootstrap token Secret and the user-data placeholders.
//! * [`safety`]: MachineClass and Secret finalizers, and the orphan-device collector.
//! * [`driver`]: MCM's driver interface, the Equinix Metal driver and the Inventory driver.

pub mod bootstrap;
pub mod delete;
pub mod drain;
pub mod driver;
pub mod lifecycle;
pub mod machine;
pub mod safety;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use ingot_api::gardener::{
    MCM_FINALIZER, Machine, MachineClass, PROVIDER_EQUINIX_METAL, PROVIDER_INVENTORY,
};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

pub use driver::{Code, Driver, SecretData, Status};

use crate::runtime::{Backoff, EventRecorder, ReconcileError, Retry};

/// The component the Gardener controllers' Events are reported as (upstream's provider
/// records none; MCM's own are `machine-controller`).
pub const EVENT_COMPONENT: &str = "ingot";

/// A shared driver.
pub type SharedDriver = Arc<dyn Driver>;

/// MCM's retry periods (`machineutils.{Conflict,Short,Medium,Long}Retry`).
pub const CONFLICT_RETRY: Duration = Duration::from_millis(200);
pub const SHORT_RETRY: Duration = Duration::from_secs(5);
pub const MEDIUM_RETRY: Duration = Duration::from_secs(180);
pub const LONG_RETRY: Duration = Duration::from_secs(600);

/// Label on a Node naming its Machine (`machineutils.MachineLabelKey`).
pub const MACHINE_NAME_LABEL: &str = "node.gardener.cloud/machine-name";
/// Deletion priority annotation; the machine controller sets the default `"3"`.
pub const MACHINE_PRIORITY: &str = "machinepriority.machine.sapcloud.io";
/// Node finalizer (v0.61+).
pub const NODE_FINALIZER: &str = "node.machine.sapcloud.io/machine-controller";
/// Force deletion label on a Machine.
pub const FORCE_DELETION_LABEL: &str = "force-deletion";
/// Taint that keeps a Pending machine from Running.
pub const CRITICAL_COMPONENTS_NOT_READY: &str = "node.gardener.cloud/critical-components-not-ready";
/// On a Node no Machine backs (upstream `NotManagedByMCM`): the machine controller leaves it
/// alone.
pub const NOT_MANAGED_BY_MCM: &str = "node.machine.sapcloud.io/not-managed-by-mcm";
/// Preservation annotation (v0.62+).
pub const PRESERVE_ANNOTATION: &str = "node.machine.sapcloud.io/preserve";

/// Test-only: `INGOT_CRASH_POINT=<name>` (read by test builds of `ingot run`, see
/// [`GardenerContext::with_crash_points`]) aborts the process when the named point is reached,
/// so that tests can kill the operator at an exact line. Names: `gardener-after-create`,
/// `gardener-during-drain`, `gardener-during-delete`.
pub const CRASH_POINT_ENV: &str = "INGOT_CRASH_POINT";

/// Settings, named after upstream's machine-controller flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `--namespace`: where Machines, MachineClasses and their Secrets live.
    pub namespace: String,
    /// `--machine-creation-timeout`.
    pub creation_timeout: Duration,
    /// `--machine-health-timeout`.
    pub health_timeout: Duration,
    /// `--machine-drain-timeout`.
    pub drain_timeout: Duration,
    /// `--machine-max-evict-retries`.
    pub max_evict_retries: u32,
    /// `--machine-safety-orphan-vms-period`.
    pub orphan_vms_period: Duration,
    /// `--node-conditions`: conditions that make a node unhealthy when True.
    pub node_conditions: Vec<String>,
    /// `--bootstrap-token-auth-extra-groups`.
    pub bootstrap_token_auth_extra_groups: String,
    /// `--resource-exhausted-retry`.
    pub resource_exhausted_retry: Duration,
    /// `--machine-preserve-timeout`.
    pub preserve_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: "default".into(),
            creation_timeout: Duration::from_secs(20 * 60),
            health_timeout: Duration::from_secs(10 * 60),
            drain_timeout: Duration::from_secs(2 * 3600),
            max_evict_retries: 360,
            orphan_vms_period: Duration::from_secs(15 * 60),
            node_conditions: "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
                .split(',')
                .map(str::to_owned)
                .collect(),
            bootstrap_token_auth_extra_groups: String::new(),
            resource_exhausted_retry: LONG_RETRY,
            preserve_timeout: Duration::from_secs(96 * 3600),
        }
    }
}

/// The two clusters of upstream's machine controller. The control cluster (a Gardener seed)
/// holds the Machines, MachineClasses, their Secrets and the Machines' Events, in
/// `--namespace`; the target cluster (the shoot) holds the Nodes, the pods drained from them,
/// PodDisruptionBudgets, VolumeAttachments and the bootstrap token Secrets in `kube-system`.
/// One cluster can be both: [`Clusters::single`].
#[derive(Clone)]
pub struct Clusters {
    pub control: Client,
    pub target: Client,
    /// The target without the client's own 429 retries: a refused eviction must come back at
    /// once, it is the drain's to retry (see [`delete`]).
    pub target_evictions: Client,
}

impl Clusters {
    /// One cluster for everything.
    pub fn single(client: Client) -> Self {
        Clusters {
            control: client.clone(),
            target: client.clone(),
            target_evictions: client,
        }
    }
}

/// What the Gardener controllers share.
pub struct GardenerContext {
    pub clusters: Clusters,
    pub driver: Arc<dyn Driver>,
    pub settings: Settings,
    crash_point: Option<String>,
    /// One lock per MachineDeployment around marking a machine Failed.
    failure_locks: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Refused evictions of the Nodes being drained.
    pub(crate) evictions: drain::EvictionTracker,
    /// The target cluster's Nodes, as the machine controller's watch sees them.
    pub(crate) nodes: NodeCache,
    /// The MachineClasses of `--namespace`, watched ([`run`] fills it).
    pub(crate) class_cache: Cache<MachineClass>,
    /// The Secrets of `--namespace` (the classes' `secretRef`s), watched ([`run`] fills it).
    pub(crate) secret_cache: Cache<Secret>,
    /// Drains are counted here (a private registry unless `ingot run` gives its own).
    pub metrics: Arc<crate::Metrics>,
    /// The one Event recorder of the Gardener controllers (component `ingot`, this replica).
    pub events: EventRecorder,
}

/// Objects of one kind as a watch sees them, filled by the one watch that takes its writer;
/// a read falls back to the API until that watch has listed them all (or when none runs).
pub(crate) struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    writer: std::sync::Mutex<Option<Writer<K>>>,
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fn new() -> Self {
        let (store, writer) = reflector::store();
        Cache {
            store,
            writer: std::sync::Mutex::new(Some(writer)),
        }
    }

    /// The writer, for the one watch that fills the cache.
    pub(crate) fn take_writer(&self) -> Option<Writer<K>> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The object from the cache, or None (outer) while the watch has not listed everything.
    fn cached(&self, name: &str, namespace: Option<&str>) -> Option<Option<K>> {
        let ready = matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())));
        if !ready {
            return None;
        }
        let mut key = ObjectRef::new(name);
        if let Some(namespace) = namespace {
            key = key.within(namespace);
        }
        Some(self.store.get(&key).map(|o| K::clone(&o)))
    }

    /// The object from the cache, else from `api`.
    pub(crate) async fn get(
        &self,
        api: &Api<K>,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<Option<K>, kube::Error> {
        match self.cached(name, namespace) {
            Some(found) => Ok(found),
            None => api.get_opt(name).await,
        }
    }

    /// The object from the cache once the watch has listed everything (waiting at most
    /// [`CACHE_WAIT`] for that): never a GET, so that the API server sees only the watch.
    pub(crate) async fn watched(
        &self,
        kind: &'static str,
        name: &str,
        namespace: &str,
    ) -> Result<Option<K>, Error> {
        match tokio::time::timeout(CACHE_WAIT, self.store.wait_until_ready()).await {
            Ok(Ok(())) => {}
            _ => return Err(Error::NotWatched(kind)),
        }
        Ok(self
            .store
            .get(&ObjectRef::new(name).within(namespace))
            .map(|o| K::clone(&o)))
    }

    /// Fills the cache from a watch of `api` until `shutdown` (or at once, when another
    /// watch fills it).
    pub(crate) async fn fill(
        &self,
        api: Api<K>,
        shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) {
        let Some(writer) = self.take_writer() else {
            return;
        };
        let watch = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(|_| std::future::ready(()));
        tokio::select! {
            () = watch => {}
            () = shutdown => {}
        }
    }
}

/// How long a read of a watched cache waits for the watch's first list.
pub const CACHE_WAIT: Duration = Duration::from_secs(30);

/// The target cluster's Nodes from the machine controller's watch ([`machine::run`] fills it),
/// so that a Machine's health check reads its Node without a GET per pass.
pub(crate) type NodeCache = Cache<Node>;

impl NodeCache {
    /// The Node from the cache once the watch has listed every Node; until then (or without a
    /// watch) from the API.
    pub(crate) async fn node(
        &self,
        target: &Client,
        name: &str,
    ) -> Result<Option<Node>, kube::Error> {
        self.get(&Api::all(target.clone()), name, None).await
    }
}

impl GardenerContext {
    pub fn new(clusters: Clusters, driver: Arc<dyn Driver>, settings: Settings) -> Self {
        let clusters_control = clusters.control.clone();
        GardenerContext {
            clusters,
            driver,
            settings,
            crash_point: None,
            failure_locks: std::sync::Mutex::default(),
            evictions: drain::EvictionTracker::default(),
            nodes: NodeCache::new(),
            class_cache: Cache::new(),
            secret_cache: Cache::new(),
            metrics: Arc::default(),
            events: EventRecorder::new(clusters_control, EVENT_COMPONENT, None),
        }
    }

    /// Reports Events as this replica (`ingot run --identity`).
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.events = EventRecorder::new(
            self.clusters.control.clone(),
            EVENT_COMPONENT,
            Some(identity.into()),
        );
        self
    }

    /// Counts into `metrics` (the ones `/metrics` serves).
    pub fn with_metrics(mut self, metrics: Arc<crate::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Test hook: the comma-separated crash points to abort at (see [`CRASH_POINT_ENV`]).
    pub fn with_crash_points(mut self, points: Option<String>) -> Self {
        self.crash_point = points.filter(|p| !p.is_empty());
        self
    }

    /// The control cluster: Machines, MachineClasses, Secrets, Events.
    pub fn control(&self) -> &Client {
        &self.clusters.control
    }

    /// The target cluster: Nodes, pods, PodDisruptionBudgets, VolumeAttachments, bootstrap tokens.
    pub fn target(&self) -> &Client {
        &self.clusters.target
    }

    /// The lock taken while deciding to mark a machine of this deployment Failed.
    pub fn failure_lock(&self, deployment: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.failure_locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(deployment.to_owned()).or_default().clone()
    }

    pub fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.control().clone(), &self.settings.namespace)
    }

    pub fn classes(&self) -> Api<MachineClass> {
        Api::namespaced(self.control().clone(), &self.settings.namespace)
    }

    /// Aborts the process here if the tests asked for it (see [`CRASH_POINT_ENV`]).
    pub fn crash_point(&self, name: &str) {
        crate::crash_point(self.crash_point.as_deref(), name);
    }

    /// The class of a Machine when it is a `MachineClass` of a provider ingot serves; None for
    /// a Machine another machine controller owns.
    pub async fn served_class(&self, machine: &Machine) -> Result<Option<MachineClass>, Error> {
        let Some(class) = machine.spec.class.as_ref() else {
            return Ok(None);
        };
        if class.kind != "MachineClass" || class.name.is_empty() {
            return Ok(None);
        }
        let found = (self.class_cache)
            .watched("MachineClasses", &class.name, &self.settings.namespace)
            .await?;
        Ok(found.filter(served))
    }

    /// The class's `secretRef` data merged with its `credentialsSecretRef` data (the latter
    /// wins); a missing Secret counts as empty, as upstream.
    pub async fn secret_data(&self, class: &MachineClass) -> Result<SecretData, Error> {
        let mut data = SecretData::default();
        for reference in [&class.spec.secret_ref, &class.spec.credentials_secret_ref]
            .into_iter()
            .flatten()
        {
            let Some(name) = reference.name.as_deref() else {
                continue;
            };
            let namespace = reference
                .namespace
                .clone()
                .unwrap_or_else(|| self.settings.namespace.clone());
            let secrets: Api<Secret> = Api::namespaced(self.control().clone(), &namespace);
            // Only the Secrets of `--namespace` are watched.
            let secret = if namespace == self.settings.namespace {
                (self.secret_cache)
                    .watched("Secrets", name, &namespace)
                    .await?
            } else {
                secrets.get_opt(name).await?
            };
            if let Some(secret) = secret {
                for (k, v) in secret.data.unwrap_or_default() {
                    data.0.insert(k, v.0);
                }
            }
        }
        Ok(data)
    }
}

/// Whether ingot is the machine controller of this class: `EquinixMetal` or `Inventory`.
pub fn served(class: &MachineClass) -> bool {
    matches!(
        class.spec.provider.as_deref(),
        Some(PROVIDER_EQUINIX_METAL | PROVIDER_INVENTORY)
    )
}

/// Errors of the Gardener controllers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("serialising a patch: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "the watch of the {0} of the namespace has not listed them yet (is list/watch granted?)"
    )]
    NotWatched(&'static str),
}

impl ReconcileError for Error {
    /// The `error` label of `ingot_reconcile_errors_total`.
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Json(_) => "json",
            Error::NotWatched(_) => "cache",
        }
    }

    /// A write that lost a race on `resourceVersion` (409) looks again at once.
    fn retry(&self) -> Retry {
        match self {
            Error::Kube(error) if crate::runtime::is_conflict(error) => Retry::Conflict,
            _ => Retry::Backoff,
        }
    }
}

/// The reconcile error backoff of the Gardener controllers: [`SHORT_RETRY`] (upstream's retry
/// after an error) doubling per failure of the same object, at most [`ERROR_BACKOFF_MAX`].
pub fn error_backoff() -> Backoff {
    Backoff::new(SHORT_RETRY, ERROR_BACKOFF_MAX)
}

/// The longest wait after repeated failures of one object.
pub const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The machine has our finalizer.
pub fn has_finalizer(machine: &Machine) -> bool {
    machine.finalizers().iter().any(|f| f == MCM_FINALIZER)
}

pub use crate::duration::{go_duration, parse_go_duration};

/// Runs the machine controller, the class controller, the orphan collector and the watches of
/// the MachineClasses and Secrets of `--namespace` (which the machine controller reads instead
/// of a GET per pass) until `shutdown` completes.
pub async fn run(
    ctx: Arc<GardenerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let secrets = Api::namespaced(ctx.control().clone(), &ctx.settings.namespace);
    tokio::join!(
        ctx.class_cache.fill(ctx.classes(), shutdown.clone()),
        ctx.secret_cache.fill(secrets, shutdown.clone()),
        machine::run(ctx.clone(), shutdown.clone()),
        safety::run_classes(ctx.clone(), shutdown.clone()),
        safety::run_orphan_collector(ctx.clone(), shutdown),
    );
}
