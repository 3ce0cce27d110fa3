//! Harvester Seeder's full (provisioning) mode (`metal.harvesterhci.io/v1alpha1`).
//!
//! - [`ipam`]: which addresses an AddressPool hands out, to whom (pure).
//! - [`addresses`]: `allocate_address` and `release_address`, the API the Cluster controller
//!   calls, safe against concurrent callers (writes under the `resourceVersion` read).
//! - [`addresspool`]: the AddressPool controller (`provisioning-addresspool`): Seeder's status,
//!   its finalizer, bad input held with a condition, deletion held while an address is.

pub mod addresses;
pub mod addresspool;
pub mod ipam;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use ingot_api::seeder::AddressPool;
use kube::Client;
use kube::runtime::reflector::Store;

use crate::Metrics;
use crate::runtime::{EventRecorder, ReconcileError, Retry, is_conflict};

/// The component of the provisioning controllers' Events.
const EVENT_COMPONENT: &str = "ingot-provisioning";

/// Settings of the provisioning controllers.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Only objects of this namespace; `None`: every namespace (as Seeder).
    pub namespace: Option<String>,
}

/// What the provisioning controllers need, built by `ingot run`.
pub struct ProvisioningContext {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    pub(crate) pool_events: EventRecorder,
    /// The AddressPool controller's store (every pool, for the overlap check).
    pub(crate) pools: OnceLock<Store<AddressPool>>,
    /// When each pool's owners were last looked up (`namespace/name`).
    owner_checks: Mutex<HashMap<String, Instant>>,
}

impl ProvisioningContext {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: String,
        settings: Settings,
    ) -> Self {
        Self {
            pool_events: EventRecorder::new(client.clone(), EVENT_COMPONENT, Some(instance)),
            client,
            metrics,
            settings,
            pools: OnceLock::new(),
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

    /// The API of `K` in the watched namespace (or all namespaces).
    pub(crate) fn watched<K: crate::NamespacedKind>(&self) -> kube::Api<K> {
        crate::api_in(&self.client, self.settings.namespace.as_deref())
    }
}

/// Runs the provisioning controllers until `shutdown`.
pub async fn run(
    ctx: Arc<ProvisioningContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    addresspool::run(ctx, shutdown).await;
}

/// Errors of the provisioning reconcilers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(e) if is_conflict(e) => "conflict",
            Error::Kube(_) => "kube",
        }
    }

    fn retry(&self) -> Retry {
        match self {
            Error::Kube(e) if is_conflict(e) => Retry::Conflict,
            Error::Kube(_) => Retry::Backoff,
        }
    }
}
