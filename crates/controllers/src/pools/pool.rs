//! The InstancePool reconciler: keeps `count` Instances named `<pool>-<8 lowercase letters>`,
//! labelled `instancePool=<pool>` and owned by the pool, and reports the original's status.
//!
//! Scale-down removes one Instance at a time (cordon, drain, then delete): those that never
//! joined first, then unhealthy ones, then workers, then the newest; scale-up creates at most
//! [`MAX_CREATES_PER_PASS`] Instances per pass. Unhealthy Nodes are
//! replaced here, one at a time within `maxUnhealthy` (see [`super::health`]). Instances being
//! deleted do not count as present. Spec changes reach Instances
//! created afterwards; existing Instances keep the spec they were created with, as upstream.
//!
//! A pass reads the pool, its Instances and their Nodes from the caches, computes what to do
//! with the pure [`plan::plan`], and `execute` carries it out: calls first, then the status,
//! then the Events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::equinix::{Instance, InstancePool, InstanceSpec, POOL_LABEL};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, ReflectHandle};
use kube::{Resource, ResourceExt};

use super::{PoolsContext, credentials, join};
use crate::runtime::{self, ControllerRuntime, ReconcileError};
use plan::Observed;

mod execute;
pub(crate) mod plan;
#[cfg(test)]
mod tests;

const CONTROLLER: &str = "instancepool";
/// How often a pool is looked at when nothing happens.
const RESYNC: Duration = Duration::from_secs(60);
/// How soon a pool waiting for the cache to show its own writes looks again.
const EXPECTATION_POLL: Duration = Duration::from_millis(500);
/// The most Instances (so servers) one pass creates: a pool asked for hundreds grows in steps
/// that each wait for the cache to show the last one, and a mistyped count is seen, and can be
/// corrected, before it is all ordered.
pub const MAX_CREATES_PER_PASS: i64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating Instance {name}: {source}")]
    CreateInstance {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting Instance {name}: {source}")]
    DeleteInstance {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the pool status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("draining Node {node}: {source}")]
    Drain {
        node: String,
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::CreateInstance { .. } => "create_instance",
            Error::DeleteInstance { .. } => "delete_instance",
            Error::WriteStatus(_) => "write_status",
            Error::Drain { .. } => "drain",
        }
    }
}

pub(crate) async fn run(
    ctx: Arc<PoolsContext>,
    pools: ReflectHandle<InstancePool>,
    instances: ReflectHandle<Instance>,
    nodes: ReflectHandle<Node>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_shared_stream(pools, ctx.shared.caches.pools.clone())
        // Instances map to their pool by label, which also covers those the Go addon created.
        .watches_shared_stream(instances, |instance| {
            instance
                .labels()
                .get(POOL_LABEL)
                .map(|pool| ObjectRef::<InstancePool>::new(pool))
        })
        // A Node has its Instance's name, `<pool>-<8 letters>`.
        .watches_shared_stream(nodes, |node| {
            pool_of_node(&node.name_any()).map(|pool| ObjectRef::<InstancePool>::new(&pool))
        });
    let runtime = ControllerRuntime::new(
        CONTROLLER,
        ctx.metrics.clone(),
        ctx.shared.settings.error_backoff(),
    );
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// One pass: what the pool sees, the plan for it ([`plan::plan`], pure), and its execution.
async fn reconcile(pool: Arc<InstancePool>, ctx: Arc<PoolsContext>) -> Result<Action, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        // The pool has no finalizer: garbage collection deletes its Instances, whose own
        // finalizers delete the servers.
        return Ok(Action::await_change());
    }
    let name = pool.name_any();
    let shared = &*ctx.shared;
    let listed = shared.caches.pool_instances(&name);
    if !shared.caches.expectations.met(&name, &listed) {
        // An Instance created or deleted here is not in the cache yet: counting now could
        // create or remove one too many.
        return Ok(Action::requeue(EXPECTATION_POLL));
    }
    let nodes = member_nodes(&ctx, &listed);
    let seen = Observed {
        pool: &pool,
        instances: &listed,
        nodes: &nodes,
        credentials: credentials::load(&shared.caches.credentials, &shared.settings.secret)
            .map(|_| ()),
        secret: &shared.settings.secret,
        join: join::discover(&shared.caches.ingress, &shared.settings.join)
            .map(|join| join.address),
        now: Timestamp::now(),
    };
    let plan = plan::plan(&seen);
    execute::execute(&ctx, &pool, &listed, plan).await
}

/// The pool a Node would belong to by its name (`<pool>-<8 lowercase letters>`).
fn pool_of_node(node: &str) -> Option<String> {
    let (pool, suffix) = node.rsplit_once('-')?;
    (suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_lowercase()) && !pool.is_empty())
        .then(|| pool.to_owned())
}
/// A new Instance of the pool, with the pool's spec copied as the original copies it.
fn new_instance(pool: &InstancePool) -> Instance {
    let pool_name = pool.name_any();
    let spec = &pool.spec;
    let owner = OwnerReference {
        api_version: InstancePool::api_version(&()).into_owned(),
        kind: InstancePool::kind(&()).into_owned(),
        name: pool_name.clone(),
        uid: pool.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let networking = spec.networking_configuration.clone().filter(|n| {
        n.type_.as_deref().is_some_and(|t| !t.is_empty())
            || n.interface_configuration
                .as_ref()
                .is_some_and(|i| !i.is_empty())
    });
    // The pool's install script travels as the Go addon carried it: an annotation.
    let annotations = spec
        .ipxe_script_url
        .clone()
        .filter(|u| !u.is_empty())
        .map(|url| BTreeMap::from([(super::ipxe::RECONFIG_ANNOTATION.to_owned(), url)]));
    Instance {
        metadata: ObjectMeta {
            name: Some(format!("{pool_name}-{}", random_letters(8))),
            labels: Some(BTreeMap::from([(POOL_LABEL.to_owned(), pool_name)])),
            annotations,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: InstanceSpec {
            plan: spec.plan.clone(),
            metro: spec.metro.clone(),
            operating_system: Some("custom_ipxe".to_owned()),
            billing_cycle: spec.billing_cycle.clone(),
            ipxe_script_url: None,
            spot_instance: spec.spot_instance,
            spot_price_max: spec.spot_price_max.clone(),
            user_ssh_keys: spec.user_ssh_keys.clone(),
            project_ssh_keys: spec.project_ssh_keys.clone(),
            node_cleanup_wait_interval: spec.node_cleanup_wait_interval.clone(),
            management_interfaces: spec.management_interfaces.clone(),
            management_bonding_options: spec.management_bonding_options.clone(),
            networking_configuration: networking,
            harvester_version: spec.harvester_version.clone(),
            single_boot: spec.single_boot,
            create_missing_vlans: spec.create_missing_vlans,
            iso_url: spec.iso_url.clone().filter(|u| !u.is_empty()),
            install_disk: spec.install_disk.clone().filter(|d| !d.is_empty()),
            inventory_selector: spec.inventory_selector.clone(),
            inventory_namespace: spec.inventory_namespace.clone(),
            boot_media: spec.boot_media.clone(),
            wipe_policy: spec.wipe_policy.clone(),
            inventory_minimum: spec.inventory_minimum.clone(),
            address_pool: spec.address_pool.clone(),
            ..InstanceSpec::default()
        },
        status: None,
    }
}

fn random_letters(len: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

/// The Nodes of these Instances (by name), from the cache.
fn member_nodes(ctx: &PoolsContext, instances: &[Instance]) -> BTreeMap<String, Node> {
    instances
        .iter()
        .filter_map(|instance| {
            let name = instance.name_any();
            let node = ctx.shared.caches.node(&name)?;
            Some((name, Node::clone(&node)))
        })
        .collect()
}
