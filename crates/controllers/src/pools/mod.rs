//! The pools part (harvester-equinix-addon): InstancePool and Instance.
//!
//! - [`pool`] keeps `count` Instances per pool and reports the original's status strings.
//! - [`instance`] drives one server through the seed's flow, as an explicit state machine:
//!   create with an iPXE shell boot, read the management MACs once the server is active,
//!   render the Harvester config, reinstall into the installer, wait for the Node.
//! - [`health`] decides which unhealthy Node to replace and which member goes first on
//!   scale-down; the pool's plan ([`pool::plan`]) turns that into one removal, which its
//!   executor carries out, draining the Node first (`removal`, over [`drain`]).
//!
//! Both controllers read the cluster from one set of watched caches ([`cache`]); credentials
//! are read from their cached Secret at every reconcile, so a rotated token applies at once.
//! The Metal API is reached only through the `BareMetalCloud` trait, made by the
//! [`CloudConnector`] that `ingot run` injects; a pool with `spec.inventorySelector` gets an
//! `onprem::cloud::InventoryCloud` over its Inventories instead.

pub mod budget;
pub mod cache;
mod credentials;
pub mod drain;
pub mod health;
pub mod instance;
pub mod ipxe;
mod join;
pub mod pool;
mod removal;

use std::sync::Arc;
use std::time::Duration;

use ingot_api::condition::{ConditionStatus, set_condition};
use ingot_metal::equinix::{ClientConfig, EquinixClient, EquinixMetal, RateLimiter};
use ingot_metal::{BareMetalCloud, Observer};
use kube::Client;
use tracing::warn;

pub use credentials::{
    Credentials, CredentialsError, DEFAULT_SECRET_NAME, DEFAULT_SECRET_NAMESPACE, SecretLocation,
};
pub use join::{Join, JoinError, JoinSettings};
pub use removal::{DEFAULT_DRAIN_TIMEOUT, DRAIN_CONDITION, REMEDIATION_CONDITION};

use crate::Metrics;
use crate::metrics::StatusLabels;
use crate::runtime::{Backoff, EventRecorder};

/// Condition type: the Equinix credentials Secret is present and complete.
pub const CREDENTIALS_CONDITION: &str = "CredentialsReady";
/// Condition type: the join token and cluster address are known.
pub const JOIN_CONDITION: &str = "JoinReady";
/// Condition type: which backend the pool's servers come from and whether ingot runs it.
pub const BACKEND_CONDITION: &str = "BackendReady";
/// Condition type on Instances: the Instance is a Ready node, or why not.
pub const READY_CONDITION: &str = "Ready";

/// Settings of the pools controllers.
#[derive(Clone, Debug)]
pub struct Settings {
    pub secret: SecretLocation,
    pub join: JoinSettings,
    /// Base URL of the Equinix Metal API (the emulator's for local runs).
    pub metal_api_url: String,
    /// Where servers fetch their install iPXE script: ingot serves
    /// `<base>/ipxe/instances/<instance>.ipxe`.
    pub ipxe_base_url: Option<String>,
    /// A mirror of Harvester's release artifacts (kernel, initrd, rootfs, ISO).
    pub harvester_mirror: Option<String>,
    /// How often a server on its way somewhere (provisioning, reinstalling) is looked at; Metal
    /// has no watch.
    pub poll_interval: Duration,
    /// How long a new server may take to become active (`queued`); then it is replaced.
    pub provision_timeout: Duration,
    /// How long a reinstall may take to bring the server back (`reinstalling`); then it is
    /// replaced.
    pub reinstall_timeout: Duration,
    /// How long after the installed server turned active a server that has not joined is sent
    /// into the installer again (its script may have been unreachable, the install may have
    /// failed); doubled at every retry, up to four times this.
    pub install_retry: Duration,
    /// Install retries before the server is replaced.
    pub install_retries: u32,
    /// First delay after a failed reconcile; doubled per failure (with jitter) up to
    /// `error_backoff_max`.
    pub error_backoff: Duration,
    pub error_backoff_max: Duration,
    /// The namespaces whose Inventories a pool with `spec.inventorySelector` may draw from;
    /// empty: any (an InstancePool is cluster-scoped, so only the operator's settings bound it).
    pub inventory_namespaces: Vec<String>,
    /// Where servers on premises reach ingot's boot server (`--boot-url`): their install config
    /// and the installer's webhook are under it.
    pub boot_url: Option<url::Url>,
    /// How long one pass of a delete on premises waits for the power off to be read back
    /// before it looks again later.
    pub release_off_wait: Duration,
    /// How soon an Instance that found no Inventory to take looks again (a watch of
    /// Inventories wakes it sooner).
    pub no_inventory_retry: Duration,
    /// The site's wipe image (`--wipe-kernel-url`, `--wipe-initrd-url`), which a pool with
    /// `wipePolicy: metadata` boots its released servers into.
    pub wipe_image: Option<crate::onprem::wipe::WipeImage>,
    /// Test hook: the process aborts when it reaches one of these named points
    /// (comma-separated: `after-create`, `before-reinstall`, `after-reinstall`,
    /// `during-finalize`), to prove a crash there is harmless.
    pub crash_point: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            secret: SecretLocation::default(),
            join: JoinSettings::default(),
            metal_api_url: ingot_metal::equinix::DEFAULT_BASE_URL.to_owned(),
            ipxe_base_url: None,
            harvester_mirror: None,
            poll_interval: Duration::from_secs(10),
            provision_timeout: Duration::from_secs(30 * 60),
            reinstall_timeout: Duration::from_secs(30 * 60),
            install_retry: Duration::from_secs(45 * 60),
            install_retries: 3,
            error_backoff: Duration::from_secs(5),
            error_backoff_max: Duration::from_secs(300),
            inventory_namespaces: Vec::new(),
            boot_url: None,
            release_off_wait: Duration::from_secs(20),
            no_inventory_retry: Duration::from_secs(15),
            wipe_image: None,
            crash_point: None,
        }
    }
}

/// Makes a cloud client for a set of credentials. Injected, so that tests can substitute a
/// provider that fails.
pub trait CloudConnector: Send + Sync {
    fn connect(
        &self,
        credentials: &Credentials,
    ) -> Result<Arc<dyn BareMetalCloud>, ingot_metal::Error>;
}

/// Equinix Metal clients sharing one rate limiter (and one observer of their calls).
pub struct EquinixConnector {
    api_url: String,
    limiter: Arc<RateLimiter>,
    observer: Observer,
}

impl EquinixConnector {
    pub fn new(api_url: impl Into<String>, requests_per_second: f64) -> Self {
        Self::with_limiter(api_url, Arc::new(RateLimiter::new(requests_per_second, 5)))
    }

    /// Clients that share `limiter` with other controllers' clients of the same account.
    pub fn with_limiter(api_url: impl Into<String>, limiter: Arc<RateLimiter>) -> Self {
        Self {
            api_url: api_url.into(),
            limiter,
            observer: Observer::default(),
        }
    }

    /// Clients that report their calls to `observer` (metrics).
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = observer;
        self
    }
}

impl CloudConnector for EquinixConnector {
    fn connect(
        &self,
        credentials: &Credentials,
    ) -> Result<Arc<dyn BareMetalCloud>, ingot_metal::Error> {
        let config = ClientConfig::new(self.api_url.clone(), credentials.token.clone());
        let client = EquinixClient::with_limiter(config, self.limiter.clone())?
            .with_observer(self.observer.clone());
        Ok(Arc::new(EquinixMetal::new(
            client,
            credentials.project_id.clone(),
        )))
    }
}

/// What the pools controllers share with the rest of `ingot run` (its iPXE script server):
/// settings, the cloud connector and the caches. Built before leading.
pub struct PoolsShared {
    pub settings: Settings,
    pub connector: Arc<dyn CloudConnector>,
    /// A client that does not retry 429s, for evictions (a refusal is an answer).
    pub eviction_client: Option<kube::Client>,
    /// What both controllers read instead of the API server; filled by [`run`].
    pub caches: cache::Caches,
}

impl PoolsShared {
    pub fn new(settings: Settings, connector: Arc<dyn CloudConnector>) -> Self {
        Self {
            settings,
            connector,
            eviction_client: None,
            caches: cache::Caches::new(),
        }
    }

    pub fn with_eviction_client(mut self, client: kube::Client) -> Self {
        self.eviction_client = Some(client);
        self
    }

    /// A cloud client for these credentials (made per reconcile, so rotation applies at once).
    pub fn cloud(
        &self,
        credentials: &Credentials,
    ) -> Result<Arc<dyn BareMetalCloud>, ingot_metal::Error> {
        self.connector.connect(credentials)
    }

    /// The test hook: aborts the process at the named point if asked to.
    pub(crate) fn crash_point(&self, point: &str) {
        crate::crash_point(self.settings.crash_point.as_deref(), point);
    }
}

/// The component the pools controllers' Events are reported as.
const EVENT_COMPONENT: &str = "ingot";

/// The pools controllers' context, made by `ingot run` once it leads: the API client, metrics,
/// [`PoolsShared`], and per controller its Event recorder (reporting as this replica) and, for
/// the Instance controller, its error backoff (a refusal from Metal waits by it too).
pub struct PoolsContext {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub shared: Arc<PoolsShared>,
    pub(crate) pool_events: EventRecorder,
    pub(crate) instance_events: EventRecorder,
    pub(crate) instance_backoff: Backoff,
}

impl PoolsContext {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: String,
        shared: Arc<PoolsShared>,
    ) -> Self {
        let events = || EventRecorder::new(client.clone(), EVENT_COMPONENT, Some(instance.clone()));
        Self {
            pool_events: events(),
            instance_events: events(),
            instance_backoff: shared.settings.error_backoff(),
            client,
            metrics,
            shared,
        }
    }
}

impl Settings {
    /// A per-object error backoff from `error_backoff` up to `error_backoff_max`.
    pub(crate) fn error_backoff(&self) -> Backoff {
        Backoff::new(self.error_backoff, self.error_backoff_max)
    }
}

/// Runs both controllers until `shutdown` completes. They start once every cache holds its
/// first list.
pub async fn run(
    ctx: Arc<PoolsContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let caches = &ctx.shared.caches;
    let Some(feeds) = caches.start(&ctx.client, &ctx.shared.settings.secret, shutdown.clone())
    else {
        warn!("the pools controllers were started twice; the second start is ignored");
        return;
    };
    // Pools by status, read from the cache at every scrape: a deleted pool leaves no series.
    let pools = caches.pools.clone();
    ctx.metrics.on_scrape(move |metrics| {
        let mut by_status = std::collections::BTreeMap::<String, i64>::new();
        let (mut requested, mut managed) = (0, 0);
        for pool in pools.state() {
            let status = pool.status.clone().unwrap_or_default();
            let name = if status.status.is_empty() {
                "new".to_owned()
            } else {
                status.status
            };
            *by_status.entry(name).or_default() += 1;
            requested += pool.spec.count.unwrap_or(0).max(0);
            managed += status.ready.max(0);
        }
        metrics.pool.by_status.clear();
        for (status, n) in by_status {
            metrics
                .pool
                .by_status
                .get_or_create(&StatusLabels { status })
                .set(n);
        }
        metrics.pool.instances_requested.set(requested);
        metrics.pool.instances_managed.set(managed);
    });
    tokio::select! {
        ready = caches.ready() => {
            if ready.is_err() {
                return;
            }
        }
        () = shutdown.clone() => return,
    }
    tokio::join!(
        pool::run(
            ctx.clone(),
            feeds.pools,
            feeds.instances_for_pools,
            feeds.nodes_for_pools,
            shutdown.clone()
        ),
        instance::run(
            ctx.clone(),
            feeds.instances,
            feeds.nodes_for_instances,
            shutdown
        )
    );
}

/// Sets a condition. Returns whether anything changed (write the status) and whether its
/// status or reason changed (record an Event): a new reason is news even if still False.
pub(crate) fn update_condition(
    conditions: &mut Vec<ingot_api::Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> (bool, bool) {
    let before = conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let status = if ok {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let changed = set_condition(conditions, type_, status, reason, message, generation);
    let news = before.is_none_or(|(s, r)| s != status.as_str() || r != reason);
    (changed, news)
}
