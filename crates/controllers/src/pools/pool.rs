//! The InstancePool reconciler: keeps `count` Instances named `<pool>-<8 lowercase letters>`,
//! labelled `instancePool=<pool>` and owned by the pool, and reports the original's status.
//!
//! Scale-down removes Instances that never joined first, then unhealthy ones, then the
//! newest. Instances being deleted do not count as present. Spec changes reach Instances
//! created afterwards; existing Instances keep the spec they were created with, as upstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ingot_api::equinix::{
    Instance, InstancePool, InstancePoolStatus, InstanceSpec, POOL_LABEL, instance_status,
    pool_status,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::{CREDENTIALS_CONDITION, JOIN_CONDITION, credentials, join, publish, update_condition};
use crate::Context;

const CONTROLLER: &str = "instancepool";
const RESYNC: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing the pool's Instances: {0}")]
    ListInstances(#[source] kube::Error),
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
}

impl Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::ListInstances(_) => "list_instances",
            Error::CreateInstance { .. } => "create_instance",
            Error::DeleteInstance { .. } => "delete_instance",
            Error::WriteStatus(_) => "write_status",
        }
    }
}

pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let pools: Api<InstancePool> = Api::all(ctx.client.clone());
    let instances: Api<Instance> = Api::all(ctx.client.clone());
    Controller::new(pools, watcher::Config::default().any_semantic())
        // Instances map to their pool by label, which also covers those the Go addon created.
        .watches(instances, watcher::Config::default(), |instance| {
            instance
                .labels()
                .get(POOL_LABEL)
                .map(|pool| ObjectRef::<InstancePool>::new(pool))
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "instancepool reconciliation failed");
            }
        })
        .await;
}

async fn reconcile(pool: Arc<InstancePool>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&pool, &ctx).await;
    ctx.metrics.reconciled(CONTROLLER, started.elapsed());
    result
}

async fn reconcile_inner(pool: &InstancePool, ctx: &Context) -> Result<Action, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        // The pool has no finalizer: garbage collection deletes its Instances, whose own
        // finalizers delete the servers.
        return Ok(Action::await_change());
    }
    let name = pool.name_any();
    let generation = pool.metadata.generation;
    let mut status = pool.status.clone().unwrap_or_default();
    let before = status.clone();
    let mut events = Vec::new();

    // Credentials and join parameters are reported here; Instances wait for them.
    let shared = &*ctx.pools;
    let (ok, reason, message) = match credentials::load(&ctx.client, &shared.settings.secret).await
    {
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
    let (ok, reason, message) = match join::discover(&ctx.client, &shared.settings.join).await {
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

    let instances: Api<Instance> = Api::all(ctx.client.clone());
    let listed = instances
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={name}")))
        .await
        .map_err(Error::ListInstances)?;
    let mut present: Vec<Instance> = listed
        .items
        .into_iter()
        .filter(|i| i.metadata.deletion_timestamp.is_none())
        .collect();
    let count = pool.spec.count.unwrap_or(0).max(0);
    let have = i64::try_from(present.len()).unwrap_or(i64::MAX);

    if have < count {
        for _ in have..count {
            let instance = new_instance(pool);
            let instance_name = instance.name_any();
            instances
                .create(&PostParams::default(), &instance)
                .await
                .map_err(|source| Error::CreateInstance {
                    name: instance_name.clone(),
                    source,
                })?;
            info!(pool = %name, instance = %instance_name, "created instance");
            events.push((
                true,
                "InstanceCreated".to_owned(),
                format!("created Instance {instance_name}"),
            ));
            present.push(instance);
        }
    } else if have > count {
        let victims = scale_down_order(ctx, present.clone()).await;
        for victim in victims
            .into_iter()
            .take(usize::try_from(have - count).unwrap_or(0))
        {
            let victim_name = victim.name_any();
            match instances
                .delete(&victim_name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(Error::DeleteInstance {
                        name: victim_name,
                        source,
                    });
                }
            }
            info!(pool = %name, instance = %victim_name, "removed instance (scale down)");
            events.push((
                true,
                "InstanceRemoved".to_owned(),
                format!("removed Instance {victim_name} to scale down to {count}"),
            ));
            present.retain(|i| i.name_any() != victim_name);
        }
    }

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

    if status != before {
        write_status(ctx, &name, &status).await?;
    }
    for (ok, reason, message) in events {
        let type_ = if ok {
            EventType::Normal
        } else {
            EventType::Warning
        };
        publish(ctx, pool, type_, &reason, "Reconcile", message).await;
    }
    Ok(Action::requeue(RESYNC))
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

async fn write_status(ctx: &Context, name: &str, status: &InstancePoolStatus) -> Result<(), Error> {
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
    Instance {
        metadata: ObjectMeta {
            name: Some(format!("{pool_name}-{}", random_letters(8))),
            labels: Some(BTreeMap::from([(POOL_LABEL.to_owned(), pool_name)])),
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
            ..InstanceSpec::default()
        },
        status: None,
    }
}

/// Instances in the order they go on scale-down: never joined, then unhealthy, then newest.
async fn scale_down_order(ctx: &Context, mut instances: Vec<Instance>) -> Vec<Instance> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let mut keyed = Vec::with_capacity(instances.len());
    for instance in instances.drain(..) {
        let joined = instance
            .status
            .as_ref()
            .is_some_and(|s| s.status == instance_status::MANAGED);
        let healthy = if joined {
            match nodes.get_opt(&instance.name_any()).await {
                Ok(Some(node)) => node_ready(&node),
                _ => false,
            }
        } else {
            false
        };
        let created = instance.metadata.creation_timestamp.clone().map(|t| t.0);
        // Sort key: joined (false first), healthy (false first), newest first.
        keyed.push(((joined, healthy, std::cmp::Reverse(created)), instance));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, instance)| instance).collect()
}

pub(crate) fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn random_letters(len: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

fn error_policy(_pool: Arc<InstancePool>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error.metric_label());
    Action::requeue(Duration::from_secs(5))
}
