//! Carries out what [`super::phase::step`] decided: the only place the Cluster controller
//! writes. Each write carries what it was decided on (a `resourceVersion`, or a create that
//! fails when someone else created first), so a pass that lost a race does nothing twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use ingot_api::condition::{ConditionStatus, set_condition};
use ingot_api::seeder::{Cluster, ClusterStatus, Inventory, ObjectRef as SeederRef, PxeBootConfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use super::CLUSTER_ANNOTATION;
use super::observe::{MemberView, Observation};
use super::phase::{Hold, Outcome, Phase};
use crate::provisioning::install::{self, ADDRESS_KEY, CONFIG_KEY, SCRIPT_KEY};
use crate::provisioning::{
    CLUSTER_FINALIZER, Error, ProvisioningContext, Stores, allocation, full_name, tinkerbell,
};
use crate::runtime;
use crate::seeder::conditions;

/// The `Ready` condition of a provisioned Cluster (beside Seeder's status string).
pub const READY: &str = "Ready";
/// Seeder's Inventory conditions the allocation sets.
pub const HARVESTER_CREATE_NODE: &str = "harvesterCreateNode";
pub const HARVESTER_JOIN_NODE: &str = "harvesterJoinNode";
pub const INVENTORY_FREED: &str = "inventoryFreed";

pub(crate) fn clusters(ctx: &ProvisioningContext, cluster: &Cluster) -> Api<Cluster> {
    Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default())
}

pub async fn execute(
    cluster: &Arc<Cluster>,
    ctx: &ProvisioningContext,
    stores: &Stores,
    observed: &Observation,
    outcome: Outcome,
) -> Result<Action, Error> {
    match outcome {
        Outcome::Wait(hold) => wait(cluster, ctx, hold).await,
        Outcome::AllocateVip => {
            let address = allocation::allocate_vip(cluster, ctx).await?;
            write_status(cluster, ctx, |s| s.cluster_address = Some(address.clone())).await?;
            event(
                ctx,
                cluster,
                EventType::Normal,
                "VIPAllocated",
                format!("cluster address {address}"),
            )
            .await;
            Ok(Action::await_change())
        }
        Outcome::CreateToken => {
            let secret = install::new_token_secret(
                &cluster.name_any(),
                &cluster.namespace().unwrap_or_default(),
                owner(cluster.as_ref()),
            );
            create_secret(ctx, annotated(secret, cluster)).await?;
            Ok(Action::await_change())
        }
        Outcome::AllocateNodes(indexes) => {
            allocate_nodes(cluster, ctx, stores, observed, &indexes).await
        }
        Outcome::WriteInstalls => write_installs(cluster, ctx, observed).await,
        Outcome::WriteTinkerbell => write_tinkerbell(cluster, ctx, observed).await,
        Outcome::Advance(phase) => advance(cluster, ctx, phase).await,
    }
}

async fn wait(cluster: &Cluster, ctx: &ProvisioningContext, hold: Hold) -> Result<Action, Error> {
    let status = if hold.reason == "Running" {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let mut conditions = cluster.status.clone().unwrap_or_default().conditions;
    let generation = cluster.metadata.generation;
    if set_condition(
        &mut conditions,
        READY,
        status,
        hold.reason,
        &hold.message,
        generation,
    ) {
        write_status(cluster, ctx, |s| s.conditions = conditions.clone()).await?;
        let kind = if hold.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        event(ctx, cluster, kind, hold.reason, hold.message.clone()).await;
    }
    Ok(Action::requeue(hold.retry))
}

async fn advance(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    phase: Phase,
) -> Result<Action, Error> {
    write_status(cluster, ctx, |s| s.status = Some(phase.as_str().to_owned())).await?;
    let created = cluster.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let since = created
        .and_then(|t| Duration::try_from(Timestamp::now().duration_since(t)).ok())
        .unwrap_or_default();
    ctx.metrics.provisioning_phase(phase.as_str(), since);
    info!(cluster = %cluster.name_any(), status = phase.as_str(), "cluster status");
    event(
        ctx,
        cluster,
        EventType::Normal,
        "ClusterStatus",
        format!("status changed to {}", phase.as_str()),
    )
    .await;
    Ok(Action::await_change())
}

/// Merge-patches the status with `change` applied, guarded by the resourceVersion read.
async fn write_status(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    change: impl FnOnce(&mut ClusterStatus),
) -> Result<(), Error> {
    let mut status = cluster.status.clone().unwrap_or_default();
    change(&mut status);
    let body = json!({
        "metadata": {"resourceVersion": cluster.resource_version()},
        "status": status,
    });
    clusters(ctx, cluster)
        .patch_status(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await?;
    Ok(())
}

async fn event(
    ctx: &ProvisioningContext,
    cluster: &Cluster,
    kind: EventType,
    reason: &str,
    note: String,
) {
    ctx.cluster_events
        .publish(cluster, kind, reason, "Provision", note)
        .await;
}

/// A controlling owner reference (deleting the owner deletes the Secret).
pub(crate) fn owner<K: Resource<DynamicType = ()>>(object: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: object.meta().name.clone().unwrap_or_default(),
        uid: object.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn annotated(mut secret: Secret, cluster: &Cluster) -> Secret {
    secret.metadata.annotations = Some(BTreeMap::from([(
        CLUSTER_ANNOTATION.to_owned(),
        full_name(
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
        ),
    )]));
    secret
}

/// Creates `secret`; one that exists already is left as it is (its values were made once).
async fn create_secret(ctx: &ProvisioningContext, secret: Secret) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(
        ctx.client.clone(),
        secret.metadata.namespace.as_deref().unwrap_or_default(),
    );
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Nodes whose records the Cluster controller writes at once (install Secrets, Inventory
/// statuses).
const NODE_WRITES: usize = 16;

/// Allocates the nodes: the addresses of each pool in one write of it (its allocations are
/// one object), the pools at once; then each node's install Secret and status, many at once.
async fn allocate_nodes(
    cluster: &Arc<Cluster>,
    ctx: &ProvisioningContext,
    stores: &Stores,
    observed: &Observation,
    indexes: &[usize],
) -> Result<Action, Error> {
    let mut by_pool: BTreeMap<(String, String), Vec<&MemberView>> = BTreeMap::new();
    for i in indexes {
        let m = &observed.members[*i];
        if m.inventory.is_none() {
            continue;
        }
        by_pool
            .entry((m.pool_namespace.clone(), m.pool_name.clone()))
            .or_default()
            .push(m);
    }
    let results = join_all(by_pool.into_values().map(|members| async move {
        let (given, refused) = allocation::allocate_nodes(cluster, ctx, stores, &members).await;
        // A test kills the operator here: the addresses are held, the Inventories do not say
        // so yet.
        if !given.is_empty() {
            crate::crash_point(
                ctx.settings.crash_point.as_deref(),
                "provisioning-after-allocation",
            );
        }
        let given: Vec<_> = members.iter().zip(given).collect();
        for batch in given.chunks(NODE_WRITES) {
            let recorded = join_all(
                batch
                    .iter()
                    .map(|(member, address)| record_node(cluster, ctx, member, address.clone())),
            )
            .await;
            for result in recorded {
                result?;
            }
        }
        refused.map_or(Ok(()), Err)
    }))
    .await;
    for result in results {
        if let Err(Error::Address(why)) = &result {
            return wait(
                cluster,
                ctx,
                Hold {
                    reason: "AddressUnavailable",
                    message: why.clone(),
                    retry: super::phase::SLOW_POLL,
                    warning: true,
                },
            )
            .await;
        }
        result?;
    }
    Ok(Action::await_change())
}

/// One node allocated its address: its install Secret (the OS password), then its status:
/// address, `ownerCluster`, Seeder's conditions (`harvesterCreateNode` for the first entry,
/// which creates the cluster; `harvesterJoinNode` for the others).
async fn record_node(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    member: &MemberView,
    allocation: allocation::NodeAddress,
) -> Result<(), Error> {
    let Some(inventory) = &member.inventory else {
        return Ok(());
    };
    let secret =
        install::new_install_secret(&member.name, &member.namespace, owner(inventory.as_ref()));
    create_secret(ctx, annotated(secret, cluster)).await?;
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut status = inventory.status.clone().unwrap_or_default();
    status.pxe_boot_config = PxeBootConfig {
        address: Some(allocation.address.clone()),
        gateway: Some(allocation.gateway),
        netmask: Some(allocation.netmask),
        name_servers: status.pxe_boot_config.name_servers.clone(),
    };
    status.owner_cluster = SeederRef {
        name: cluster.name_any(),
        namespace: cluster.namespace().unwrap_or_default(),
    };
    let message = format!("node assigned to cluster {}", cluster.name_any());
    conditions::set_true(
        &mut status.conditions,
        conditions::INVENTORY_ALLOCATED_TO_CLUSTER,
        Some(&message),
        &now,
    );
    conditions::set_false(&mut status.conditions, INVENTORY_FREED, &now);
    let (mode, text) = if member.index == 0 {
        (HARVESTER_CREATE_NODE, "Create Mode")
    } else {
        (HARVESTER_JOIN_NODE, "Join Mode")
    };
    conditions::set_true(&mut status.conditions, mode, Some(text), &now);
    let api: Api<Inventory> = Api::namespaced(ctx.client.clone(), &member.namespace);
    let body = json!({
        "metadata": {"resourceVersion": inventory.resource_version()},
        "status": status,
    });
    api.patch_status(&member.name, &PatchParams::default(), &Patch::Merge(body))
        .await?;
    ctx.inventory_events
        .publish(
            inventory.as_ref(),
            EventType::Normal,
            "Allocated",
            "Provision",
            format!("{message} with address {} ({text})", allocation.address),
        )
        .await;
    Ok(())
}

/// Writes each node's script and config into its install Secret where they changed (Seeder
/// never updates its Hardware; here a changed `clusterConfig` reaches nodes not yet booted).
async fn write_installs(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    observed: &Observation,
) -> Result<Action, Error> {
    if let Some((i, Err(why))) = observed.installs.iter().find(|(_, r)| r.is_err()) {
        let member = &observed.members[*i];
        return wait(
            cluster,
            ctx,
            Hold {
                reason: "InstallConfigInvalid",
                message: format!(
                    "spec.nodes[{i}] ({}): {why}",
                    full_name(&member.namespace, &member.name)
                ),
                retry: super::phase::SLOW_POLL,
                warning: true,
            },
        )
        .await;
    }
    let writes = observed.installs.iter().filter_map(|(i, files)| {
        let files = files.as_ref().ok()?;
        let member = &observed.members[*i];
        Some(async move {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &member.namespace);
            let data = BTreeMap::from([
                (
                    SCRIPT_KEY.to_owned(),
                    ByteString(files.script.clone().into_bytes()),
                ),
                (
                    CONFIG_KEY.to_owned(),
                    ByteString(files.config.clone().into_bytes()),
                ),
                (
                    ADDRESS_KEY.to_owned(),
                    ByteString(files.address.clone().into_bytes()),
                ),
            ]);
            api.patch(
                &install::install_secret_name(&member.name),
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": data })),
            )
            .await
        })
    });
    for result in join_all(writes).await {
        result?;
    }
    Ok(Action::await_change())
}

/// Tinkerbell mode: creates or updates each node's stale Hardware, Template and Workflow
/// (owner: the Cluster), then sets Seeder's conditions on its Inventory. A Hardware whose
/// rendering changed is updated (Seeder never updates it).
async fn write_tinkerbell(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    observed: &Observation,
) -> Result<Action, Error> {
    let mut indexes: Vec<usize> = observed
        .tink
        .iter()
        .filter(|o| !o.current)
        .map(|o| o.index)
        .collect();
    indexes.dedup();
    let writes = indexes.into_iter().map(|index| async move {
        let member = &observed.members[index];
        let Some(inventory) = member.inventory.as_ref() else {
            return Ok::<(), Error>(());
        };
        for object in observed.tink.iter().filter(|o| o.index == index) {
            let api = tinkerbell::api(&ctx.client, &member.namespace, object.kind);
            if object.current {
                continue;
            }
            let Some(read_at) = &object.read_at else {
                let new = tinkerbell::object(
                    object.kind,
                    &member.name,
                    &member.namespace,
                    owner(cluster),
                    object.spec.clone(),
                );
                match api.create(&PostParams::default(), &new).await {
                    Ok(_) => {}
                    // Created since it was read: patched on the next pass if it differs.
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
                continue;
            };
            // Under the version read: a change made since (the webhook turning network boot
            // off) is never overwritten with what was decided before it.
            api.patch(
                &member.name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": read_at},
                    "spec": object.spec,
                })),
            )
            .await?;
        }
        let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let mut status = inventory.status.clone().unwrap_or_default();
        for kind in tinkerbell::Kind::ALL {
            conditions::set_true(
                &mut status.conditions,
                kind.condition(),
                Some(kind.message()),
                &now,
            );
        }
        if Some(&status) != inventory.status.as_ref() {
            let body = json!({
                "metadata": {"resourceVersion": inventory.resource_version()},
                "status": {"conditions": status.conditions},
            });
            Api::<Inventory>::namespaced(ctx.client.clone(), &member.namespace)
                .patch_status(&member.name, &PatchParams::default(), &Patch::Merge(body))
                .await?;
        }
        Ok(())
    });
    for result in join_all(writes).await {
        result?;
    }
    // The objects are not watched: look again soon, for what is still to write.
    Ok(Action::requeue(Duration::from_secs(2)))
}

/// Deletion: every node this Cluster holds is released by the Inventory controller (shut
/// down, address freed); then the VIP is freed and Seeder's finalizer removed.
pub async fn finalize(
    cluster: &Arc<Cluster>,
    ctx: &ProvisioningContext,
    stores: &Stores,
) -> Result<Action, Error> {
    if !runtime::finalizer::has(cluster.as_ref(), CLUSTER_FINALIZER) {
        return Ok(Action::await_change());
    }
    let held: Vec<String> = stores
        .inventories
        .state()
        .iter()
        .filter(|i| {
            i.status.as_ref().is_some_and(|s| {
                Some(&s.owner_cluster.name) == cluster.metadata.name.as_ref()
                    && Some(&s.owner_cluster.namespace) == cluster.metadata.namespace.as_ref()
            })
        })
        .map(|i| full_name(&i.namespace().unwrap_or_default(), &i.name_any()))
        .collect();
    if !held.is_empty() {
        let hold = Hold {
            reason: "ReleasingNodes",
            message: format!("waiting for {} to shut down and be freed", held.join(", ")),
            retry: Duration::from_secs(30),
            warning: false,
        };
        return wait(cluster, ctx, hold).await;
    }
    allocation::release_cluster(cluster, ctx, stores).await?;
    runtime::finalizer::remove(&clusters(ctx, cluster), cluster.as_ref(), CLUSTER_FINALIZER)
        .await?;
    Ok(Action::await_change())
}
