//! The Cluster controller of provisioning: every Cluster but `harvester-system/local`
//! (embedded mode's). It observes ([`observe`]), asks the pure state machine ([`phase::step`])
//! what next, and carries that out ([`execute`]).

pub mod claims;
pub mod execute;
pub mod observe;
pub mod phase;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use ingot_api::seeder::{
    AddressPool, Cluster, Inventory, LOCAL_CLUSTER_NAME, LOCAL_CLUSTER_NAMESPACE,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::{ObjectRef, ReflectHandle};
use kube::{Resource, ResourceExt};

use super::{Error, ProvisioningContext, Stores};
use crate::runtime::{self, Backoff, ControllerRuntime};

const CONTROLLER: &str = "provisioning-cluster";

/// The changes that wake the Cluster controller.
pub struct Triggers<C, I, P, S> {
    pub clusters: C,
    pub inventories: I,
    pub pools: P,
    pub secrets: S,
    /// Tinkerbell mode: Services `tink-stack` and ConfigMaps `seeder-config`.
    pub stack: Option<(ReflectHandle<Service>, ReflectHandle<ConfigMap>)>,
}

pub async fn run<C, I, P, S>(
    ctx: Arc<ProvisioningContext>,
    stores: Stores,
    triggers: Triggers<C, I, P, S>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) where
    C: Stream<Item = Arc<Cluster>> + Send + 'static,
    I: Stream<Item = Arc<Inventory>> + Send + 'static,
    P: Stream<Item = Arc<AddressPool>> + Send + 'static,
    S: Stream<Item = Arc<Secret>> + Send + 'static,
{
    let listing = stores.clusters.clone();
    let using_pool = stores.clusters.clone();
    let controller = Controller::for_shared_stream(triggers.clusters, stores.clusters.clone())
        // An Inventory wakes the Cluster that owns it and those that list it.
        .watches_shared_stream(triggers.inventories, move |inventory| {
            clusters_of(&listing.state(), &inventory)
        })
        .watches_shared_stream(triggers.pools, move |pool| {
            clusters_using(&using_pool.state(), &pool)
        })
        // The token Secret and the nodes' install Secrets carry the Cluster's name.
        .watches_shared_stream(triggers.secrets, |secret| {
            let owner = secret
                .annotations()
                .get(CLUSTER_ANNOTATION)?
                .split_once('/')
                .map(|(ns, name)| ObjectRef::new(name).within(ns))?;
            Some(owner)
        })
        // A Node of a new cluster turning Ready (`remote::NodeWatches`).
        .reconcile_on(ctx.node_watches.wakes())
        .with_config(Config::default().concurrency(16));
    // Tinkerbell mode: the stack's Service and ConfigMap wake every Cluster of their namespace.
    let controller = match triggers.stack {
        Some((services, configs)) => {
            let (of_service, of_config) = (stores.clusters.clone(), stores.clusters.clone());
            controller
                .watches_shared_stream(services, move |service| {
                    clusters_in(&of_service.state(), service.namespace().as_deref())
                })
                .watches_shared_stream(configs, move |config| {
                    clusters_in(&of_config.state(), config.namespace().as_deref())
                })
        }
        None => controller,
    };
    let backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(120));
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// The annotation on provisioning's Secrets naming their Cluster (`namespace/name`).
pub const CLUSTER_ANNOTATION: &str = "provisioning.ingot.dev/cluster";

fn is_local(cluster: &Cluster) -> bool {
    cluster.name_any() == LOCAL_CLUSTER_NAME
        && cluster.namespace().as_deref() == Some(LOCAL_CLUSTER_NAMESPACE)
}

fn clusters_of(clusters: &[Arc<Cluster>], inventory: &Inventory) -> Vec<ObjectRef<Cluster>> {
    let namespace = inventory.namespace().unwrap_or_default();
    let name = inventory.name_any();
    let owner = inventory
        .status
        .as_ref()
        .map(|s| &s.owner_cluster)
        .filter(|o| !o.name.is_empty());
    clusters
        .iter()
        .filter(|c| !is_local(c))
        .filter(|c| {
            let owns = owner.is_some_and(|o| {
                Some(&o.name) == c.metadata.name.as_ref()
                    && Some(&o.namespace) == c.metadata.namespace.as_ref()
            });
            owns || c.spec.nodes.iter().any(|n| {
                n.inventory_reference.name == name
                    && reference_namespace(&n.inventory_reference.namespace, c) == namespace
            })
        })
        .map(|c| ObjectRef::from(c.as_ref()))
        .collect()
}

fn clusters_in(clusters: &[Arc<Cluster>], namespace: Option<&str>) -> Vec<ObjectRef<Cluster>> {
    clusters
        .iter()
        .filter(|c| !is_local(c) && c.namespace().as_deref() == namespace)
        .map(|c| ObjectRef::from(c.as_ref()))
        .collect()
}

fn clusters_using(clusters: &[Arc<Cluster>], pool: &AddressPool) -> Vec<ObjectRef<Cluster>> {
    let namespace = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    clusters
        .iter()
        .filter(|c| !is_local(c))
        .filter(|c| {
            std::iter::once(&c.spec.vip_config.address_pool_reference)
                .chain(c.spec.nodes.iter().map(|n| &n.address_pool_reference))
                .any(|r| r.name == name && reference_namespace(&r.namespace, c) == namespace)
        })
        .map(|c| ObjectRef::from(c.as_ref()))
        .collect()
}

/// A reference's namespace: the Cluster's own when the reference leaves it empty.
pub(crate) fn reference_namespace(namespace: &str, cluster: &Cluster) -> String {
    if namespace.is_empty() {
        cluster.namespace().unwrap_or_default()
    } else {
        namespace.to_owned()
    }
}

async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<ProvisioningContext>) -> Result<Action, Error> {
    if is_local(&cluster) {
        // Embedded mode's (`seeder::cluster`).
        return Ok(Action::await_change());
    }
    let stores = ctx.stores().ok_or(Error::NotStarted)?.clone();
    if cluster.meta().deletion_timestamp.is_some() {
        ctx.node_watches.stop(&ObjectRef::from(cluster.as_ref()));
        return execute::finalize(&cluster, &ctx, &stores).await;
    }
    let api = execute::clusters(&ctx, &cluster);
    let cluster = match runtime::finalizer::add(&api, &cluster, &[super::CLUSTER_FINALIZER]).await?
    {
        Some(written) => Arc::new(written),
        None => cluster,
    };
    let observed = observe::observe(&cluster, &ctx, &stores).await?;
    let outcome = phase::step(&observed.state);
    execute::execute(&cluster, &ctx, &stores, &observed, outcome).await
}
