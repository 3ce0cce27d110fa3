//! The InstancePool reconciler: keeps `count` Instances named `<pool>-<8 lowercase letters>`,
//! labelled `instancePool=<pool>` and owned by the pool, and reports the original's status.
//!
//! Scale-down removes one Instance at a time (cordon, drain, then delete): those that never
//! joined first, then unhealthy ones, then workers, then the newest; scale-up creates at most
//! [`MAX_CREATES_PER_PASS`] Instances per pass. Unhealthy Nodes are
//! replaced here, one at a time within `maxUnhealthy` (see [`super::health`]). Instances being
//! deleted do not count as present. Spec changes reach Instances
//! created afterwards; existing Instances keep the spec they were created with, as upstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::equinix::{
    Instance, InstancePool, InstancePoolStatus, InstanceSpec, POOL_LABEL, instance_status,
    pool_status,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, ReflectHandle};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use super::PoolsContext;
use super::health::{self, Member, NodeFacts};
use super::removal;
use super::{CREDENTIALS_CONDITION, JOIN_CONDITION, credentials, join, update_condition};
use crate::runtime::{self, ControllerRuntime, ReconcileError};

const CONTROLLER: &str = "instancepool";
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

async fn reconcile(pool: Arc<InstancePool>, ctx: Arc<PoolsContext>) -> Result<Action, Error> {
    reconcile_inner(&pool, &ctx).await
}

/// The pool a Node would belong to by its name (`<pool>-<8 lowercase letters>`).
fn pool_of_node(node: &str) -> Option<String> {
    let (pool, suffix) = node.rsplit_once('-')?;
    (suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_lowercase()) && !pool.is_empty())
        .then(|| pool.to_owned())
}

async fn reconcile_inner(pool: &InstancePool, ctx: &PoolsContext) -> Result<Action, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        // The pool has no finalizer: garbage collection deletes its Instances, whose own
        // finalizers delete the servers.
        return Ok(Action::await_change());
    }
    let name = pool.name_any();
    let caches = &ctx.shared.caches;
    let listed = caches.pool_instances(&name);
    if !caches.expectations.met(&name, &listed) {
        // An Instance created or deleted here is not in the cache yet: counting now could
        // create or remove one too many.
        return Ok(Action::requeue(EXPECTATION_POLL));
    }
    let generation = pool.metadata.generation;
    let mut status = pool.status.clone().unwrap_or_default();
    let before = status.clone();
    let mut events = Vec::new();

    // Credentials and join parameters are reported here; Instances wait for them.
    let shared = &*ctx.shared;
    let (ok, reason, message) =
        match credentials::load(&shared.caches.credentials, &shared.settings.secret) {
            Ok(_) => (
                true,
                "Found",
                format!(
                    "Secret {} holds the Equinix Metal credentials",
                    shared.settings.secret
                ),
            ),
            Err(problem) => (false, problem.reason(), problem.to_string()),
        };
    let (_, flipped) = update_condition(
        &mut status.conditions,
        CREDENTIALS_CONDITION,
        ok,
        reason,
        &message,
        generation,
    );
    if flipped {
        events.push((ok, reason.to_owned(), message));
    }
    let (ok, reason, message) = match join::discover(&shared.caches.ingress, &shared.settings.join)
    {
        Ok(join) => (
            true,
            "Found",
            format!("new nodes join the cluster at {}", join.address),
        ),
        Err(problem) => (false, problem.reason(), problem.to_string()),
    };
    let (_, flipped) = update_condition(
        &mut status.conditions,
        JOIN_CONDITION,
        ok,
        reason,
        &message,
        generation,
    );
    if flipped {
        events.push((ok, reason.to_owned(), message));
    }
    // The original kept the join token in the clear here; ingot never does.
    status.token = None;

    let mut present: Vec<Instance> = listed
        .iter()
        .filter(|i| i.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    let count = pool.spec.count.unwrap_or(0).max(0);
    let have = i64::try_from(present.len()).unwrap_or(i64::MAX);
    let nodes = member_nodes(ctx, &listed);
    let members: Vec<Member> = listed
        .iter()
        .map(|i| member(i, nodes.get(&i.name_any())))
        .collect();

    let mut plan = Plan::default();
    if have < count {
        let instances: Api<Instance> = Api::all(ctx.client.clone());
        for _ in have..count.min(have.saturating_add(MAX_CREATES_PER_PASS)) {
            let instance = new_instance(pool);
            let instance_name = instance.name_any();
            instances
                .create(&PostParams::default(), &instance)
                .await
                .map_err(|source| Error::CreateInstance {
                    name: instance_name.clone(),
                    source,
                })?;
            caches.expectations.created(&name, &instance_name);
            info!(pool = %name, instance = %instance_name, "created instance");
            events.push((
                true,
                "InstanceCreated".to_owned(),
                format!("created Instance {instance_name}"),
            ));
            present.push(instance);
        }
        if i64::try_from(present.len()).unwrap_or(i64::MAX) < count {
            // The rest in the next pass, once the cache shows these.
            plan.look_again(EXPECTATION_POLL);
        }
    } else if have > count {
        removal::scale_down_step(ctx, pool, &members, &nodes, count, &mut plan).await?;
    } else {
        removal::replacement_step(ctx, pool, &members, &nodes, &mut plan).await?;
    }
    removal::uncordon_recovered(ctx, &members, &nodes, &mut plan).await?;
    if let Some(gone) = &plan.deleted {
        present.retain(|i| &i.name_any() != gone);
    }
    for (type_, ok, reason, message) in &plan.conditions {
        let (_, flipped) = update_condition(
            &mut status.conditions,
            type_,
            *ok,
            reason,
            message,
            generation,
        );
        if flipped {
            events.push((*ok, (*reason).to_owned(), message.clone()));
        }
    }
    events.append(&mut plan.events);

    let ready = present
        .iter()
        .filter(|i| {
            i.status
                .as_ref()
                .is_some_and(|s| s.status == instance_status::MANAGED)
        })
        .count();
    let ready = i64::try_from(ready).unwrap_or(i64::MAX);
    status.ready = ready;
    status.requested = count;
    status.needed = count - i64::try_from(present.len()).unwrap_or(i64::MAX);
    status.status = pool_state(count, ready, status.needed).to_owned();
    status.observed_generation = generation;

    if runtime::status::changed(Some(&before), &status) {
        write_status(ctx, &name, &status).await?;
    }
    for (ok, reason, message) in events {
        let type_ = if ok {
            EventType::Normal
        } else {
            EventType::Warning
        };
        ctx.pool_events
            .publish(pool, type_, &reason, "Reconcile", message)
            .await;
    }
    Ok(Action::requeue(plan.requeue.unwrap_or(RESYNC).min(RESYNC)))
}

/// The original's status strings: `ready` once every requested Instance is managed,
/// `tokenReady` while Instances are to be created, `cleanupNodes` while some are to go,
/// `submitted` otherwise.
fn pool_state(count: i64, ready: i64, needed: i64) -> &'static str {
    if needed > 0 {
        pool_status::TOKEN_READY
    } else if needed < 0 {
        pool_status::CLEANUP_NODES
    } else if ready == count {
        pool_status::READY
    } else {
        pool_status::SUBMITTED
    }
}

async fn write_status(
    ctx: &PoolsContext,
    name: &str,
    status: &InstancePoolStatus,
) -> Result<(), Error> {
    let pools: Api<InstancePool> = Api::all(ctx.client.clone());
    // `token: null` removes a join token the Go addon left in the status.
    let mut body =
        serde_json::to_value(status).map_err(|e| Error::WriteStatus(kube::Error::SerdeError(e)))?;
    body["token"] = serde_json::Value::Null;
    pools
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": body })),
        )
        .await
        .map_err(Error::WriteStatus)?;
    Ok(())
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

fn member(instance: &Instance, node: Option<&Node>) -> Member {
    Member {
        name: instance.name_any(),
        managed: instance
            .status
            .as_ref()
            .is_some_and(|s| s.status == instance_status::MANAGED),
        deleting: instance.metadata.deletion_timestamp.is_some(),
        created: instance.metadata.creation_timestamp.as_ref().map(|t| t.0),
        skip: instance
            .annotations()
            .contains_key(health::SKIP_REMEDIATION_ANNOTATION),
        node: node.map(NodeFacts::of),
    }
}

/// What a pass decided besides the Instance count: conditions, Events, when to look again.
#[derive(Default)]
pub(crate) struct Plan {
    pub conditions: Vec<(&'static str, bool, &'static str, String)>,
    pub events: Vec<(bool, String, String)>,
    pub requeue: Option<Duration>,
    /// The Instance deleted in this pass.
    pub deleted: Option<String>,
    /// The member being removed (its cordon stays).
    pub target: Option<String>,
}

impl Plan {
    pub fn condition(
        &mut self,
        type_: &'static str,
        ok: bool,
        reason: &'static str,
        message: String,
    ) {
        self.conditions.push((type_, ok, reason, message));
    }

    pub fn event(&mut self, ok: bool, reason: &str, message: String) {
        self.events.push((ok, reason.to_owned(), message));
    }

    pub fn look_again(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }
}
