//! ingot's reconcilers. Each module owns one part of the system and runs as a kube-runtime
//! controller; this crate root holds what they share.
//!
//! Data flows one way: API objects -> reconciler -> provider or BMC trait -> status and Events.
//! Reconcilers are level-triggered and idempotent: they read the world, compute, apply, and can
//! be stopped at any line.

pub mod api_client;
pub mod cluster;
pub mod duration;
pub mod fencing;
pub mod gardener;
pub mod metrics;
pub mod onprem;
pub mod pools;
pub mod provisioning;
pub mod rufio;
pub mod runtime;
pub mod seeder;
pub mod wakes;

use kube::Client;

pub use metrics::Metrics;

/// What a test build of `ingot run` does at an armed crash point (it aborts the process);
/// see [`set_crash_hook`].
static CRASH_HOOK: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Installs the test hook behind `--crash-point` / `INGOT_CRASH_POINT`. Only test builds of
/// the binary (its `crash-points` feature) install one; without it an armed point does nothing,
/// and the shipped binary has no way to arm one.
pub fn set_crash_hook(hook: fn(&str)) {
    let _ = CRASH_HOOK.set(hook);
}

/// Calls the crash hook when `point` is one of the comma-separated `armed` names, so that a
/// test kills the operator at an exact line and counts what reached the emulator.
pub(crate) fn crash_point(armed: Option<&str>, point: &str) {
    if armed.is_some_and(|points| points.split(',').any(|p| p.trim() == point))
        && let Some(hook) = CRASH_HOOK.get()
    {
        hook(point);
    }
}

/// The API of a namespaced kind in one namespace, or in all of them.
pub(crate) fn api_in<K: NamespacedKind>(client: &Client, namespace: Option<&str>) -> kube::Api<K> {
    match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    }
}

/// What a watched kind must be: a namespaced or cluster-scoped object kube can decode, held
/// in stores shared between tasks.
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A [`Watched`] kind that lives in namespaces.
pub trait NamespacedKind:
    Watched + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
{
}

impl<K> NamespacedKind for K where
    K: Watched + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
{
}

/// The watch a controller is driven by, feeding the store it reads, with objects stored
/// without `metadata.managedFields` (see [`lean_events`]).
pub fn lean_reflector<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) -> (
    kube::runtime::reflector::Store<K>,
    impl futures::Stream<Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>>
    + Send
    + 'static,
) {
    let (store, writer) = kube::runtime::reflector::store();
    (
        store,
        kube::runtime::reflector(writer, lean_events(api, config)),
    )
}

/// A watch (re-listing with backoff) whose objects come without `metadata.managedFields`: no
/// reconciler reads them, and once a few writers have touched an object they are most of its
/// size, held once per object for every object of a fleet in a store.
pub fn lean_events<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) -> impl futures::Stream<Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>>
+ Send
+ 'static {
    use kube::runtime::WatchStreamExt;
    kube::runtime::watcher(api, config)
        .default_backoff()
        .modify(|object: &mut K| object.meta_mut().managed_fields = None)
}

/// Fills a store from a lean watch for as long as it is polled (drop it to stop); a failed
/// watch is logged with its kind and listed again with backoff.
pub async fn feed_store<K: Watched>(
    writer: kube::runtime::reflector::store::Writer<K>,
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) {
    use futures::StreamExt;
    let kind = K::kind(&()).into_owned();
    kube::runtime::reflector(writer, lean_events(api, config))
        .for_each(|event| {
            if let Err(error) = event {
                tracing::warn!(%error, kind, "watch failed; listing again");
            }
            std::future::ready(())
        })
        .await;
}

/// The controllers `ingot run` can start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControllerKind {
    /// InstancePool and Instance (harvester-equinix-addon).
    Pools,
    /// The Gardener machine controller for Equinix Metal MachineClasses.
    Gardener,
    /// Machine, Job and Task of `bmc.tinkerbell.org` (Tinkerbell Rufio).
    Rufio,
    /// Harvester Seeder's embedded mode: the local Cluster and its Inventories (needs Rufio).
    Seeder,
    /// Harvester Seeder's full (provisioning) mode: AddressPools.
    Provisioning,
    /// Fencing of dead Nodes through their Inventories' BMCs (needs Rufio).
    Fencing,
}

impl ControllerKind {
    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::Pools => "pools",
            ControllerKind::Gardener => "gardener",
            ControllerKind::Rufio => "rufio",
            ControllerKind::Seeder => "seeder",
            ControllerKind::Provisioning => "provisioning",
            ControllerKind::Fencing => "fencing",
        }
    }
}
