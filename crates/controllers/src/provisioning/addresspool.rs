//! The AddressPool controller (`provisioning-addresspool`).
//!
//! Each pass reads which holders of an address are gone (the one I/O before deciding), decides
//! with [`plan`] (pure) and carries the plan out in [`apply`]:
//!
//! - a valid pool gets Seeder's status ([`ipam::settled`]: `poolReady` or `poolExhausted`,
//!   reserved addresses as allocations) and then the finalizer `finalizer.addresspool.harvesterhci.io`;
//! - bad input (spec fields, or a CIDR sharing addresses with a pool created before it in the
//!   namespace) is held as `poolInvalid` with a `Ready=False` condition naming the field and the
//!   fix, and a Warning Event; nothing is handed out from it;
//! - an allocation whose owner (a Cluster for `kind: cluster`, an Inventory for
//!   `kind: inventory`) no longer exists is freed: the owners are looked up on the first pass
//!   that finds an address held, then on a pass at least [`RESYNC`] after the last look (every
//!   pool is passed over every [`RESYNC`]), and on every pass while the pool is being deleted;
//! - deletion waits while an owner that still exists holds an address: a `Deleting` condition
//!   and a `DeletionBlocked` Event name each, and the pool is looked at again every
//!   [`DELETION_RECHECK`] (and on each change, such as a release).
//!
//! Every status write replaces the whole status under the `resourceVersion` it was decided on,
//! as [`super::addresses`] does, so the controller and the Cluster controller never overwrite
//! each other's allocations.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::condition::{ConditionStatus, set_condition};
use ingot_api::seeder::{AddressPool, AddressPoolStatus, AllocatedObject, Cluster, Inventory};
use kube::api::PostParams;
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};

use super::ipam::{self, Pool};
use super::{Error, ProvisioningContext};
use crate::runtime::{self, Backoff, ControllerRuntime, finalizer};

/// The controller's name in metrics and logs.
const CONTROLLER: &str = "provisioning-addresspool";
/// Seeder's finalizer on an AddressPool.
pub const FINALIZER: &str = "finalizer.addresspool.harvesterhci.io";
/// How often a pool is looked at without a change (to free addresses of owners gone).
pub const RESYNC: Duration = Duration::from_secs(60);
/// How often a pool whose deletion waits is looked at again.
pub const DELETION_RECHECK: Duration = Duration::from_secs(5);

/// The condition of a pool's acceptance (`True`: addresses can be handed out).
pub const READY_CONDITION: &str = "Ready";
/// The condition of a pool's deletion held by an owner.
pub const DELETING_CONDITION: &str = "Deleting";

pub async fn run(
    ctx: Arc<ProvisioningContext>,
    pools: Store<AddressPool>,
    changes: impl futures::Stream<Item = Arc<AddressPool>> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_shared_stream(changes, pools);
    let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

async fn reconcile(pool: Arc<AddressPool>, ctx: Arc<ProvisioningContext>) -> Result<Action, Error> {
    let namespace = pool.namespace().unwrap_or_default();
    let deleting = pool.metadata.deletion_timestamp.is_some();
    let held = pool
        .status
        .as_ref()
        .is_some_and(|s| !ipam::holders(s).is_empty());
    let due = held && ctx.owner_check_due(&runtime::object_key(pool.as_ref()), deleting);
    let gone = match due {
        true => owners_gone(&ctx, &pool).await?,
        false => Vec::new(),
    };
    let peers = ctx.stores().map(|s| s.pools.state()).unwrap_or_default();
    let verdict = judge(&pool, &peers);
    apply(&ctx, &pool, &namespace, plan(&pool, verdict, &gone)).await
}

/// Why a pool is refused: the condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// The pool's spec parsed, or why it is refused: a field of its own, or a CIDR that shares an
/// address with a pool of the namespace created before it (by `creationTimestamp`, then name).
pub fn judge(pool: &AddressPool, peers: &[Arc<AddressPool>]) -> Result<Pool, Refusal> {
    let parsed = Pool::parse(&pool.spec).map_err(|e| Refusal {
        reason: "InvalidSpec",
        message: e.to_string(),
    })?;
    let key = |p: &AddressPool| (p.metadata.creation_timestamp.clone(), p.name_any());
    let earlier = peers.iter().filter(|p| {
        p.namespace() == pool.namespace() && p.name_any() != pool.name_any() && key(p) < key(pool)
    });
    for peer in earlier {
        if let Ok(other) = Pool::parse(&peer.spec)
            && other.overlaps(&parsed)
        {
            return Err(Refusal {
                reason: "Overlapping",
                message: format!(
                    "spec.cidr {} shares addresses with AddressPool {} ({}), created before it; give a cidr that overlaps no other pool of the namespace",
                    parsed.cidr(),
                    peer.name_any(),
                    other.cidr()
                ),
            });
        }
    }
    Ok(parsed)
}

/// What one pass does.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The whole status to write (only if it differs from the pool's).
    pub status: AddressPoolStatus,
    pub finalizer: FinalizerStep,
    /// Events to record: type, reason, note.
    pub events: Vec<(EventType, &'static str, String)>,
    pub requeue: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerStep {
    Add,
    Remove,
    Keep,
}

/// Decides a pass from the pool, its [`judge`]ment and the holders whose owner is gone.
pub fn plan(pool: &AddressPool, verdict: Result<Pool, Refusal>, gone: &[AllocatedObject]) -> Plan {
    let current = pool.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status
        .address_allocation
        .retain(|_, owner| !gone.contains(owner));
    let mut events: Vec<_> = freed_notes(&current, gone)
        .into_iter()
        .map(|note| (EventType::Normal, "AddressFreed", note))
        .collect();
    if pool.metadata.deletion_timestamp.is_some() {
        return deletion(pool, status, events);
    }
    let generation = pool.metadata.generation;
    let (state, reason, message) = match verdict {
        Ok(parsed) => {
            status = ipam::settled(&parsed, &status);
            // No counts in the message: it would change (and be written) on every allocation.
            let (reason, message) = match status.status.as_str() {
                ipam::EXHAUSTED => ("PoolExhausted", "every address of the pool is held"),
                _ => ("PoolReady", "the pool has a free address"),
            };
            (ConditionStatus::True, reason.to_owned(), message.to_owned())
        }
        Err(refusal) => {
            status.status = ipam::INVALID.to_owned();
            (
                ConditionStatus::False,
                refusal.reason.to_owned(),
                refusal.message,
            )
        }
    };
    let was = condition_of(&current, READY_CONDITION);
    set_condition(
        &mut status.conditions,
        READY_CONDITION,
        state,
        &reason,
        &message,
        generation,
    );
    if state == ConditionStatus::False && was != Some((state.as_str().to_owned(), message.clone()))
    {
        events.push((EventType::Warning, "InvalidSpec", message));
    }
    Plan {
        status,
        finalizer: FinalizerStep::Add,
        events,
        requeue: RESYNC,
    }
}

fn deletion(
    pool: &AddressPool,
    mut status: AddressPoolStatus,
    mut events: Vec<(EventType, &'static str, String)>,
) -> Plan {
    let held = ipam::holders(&status);
    if held.is_empty() {
        return Plan {
            status,
            finalizer: FinalizerStep::Remove,
            events,
            requeue: RESYNC,
        };
    }
    let list: Vec<String> = held
        .iter()
        .map(|(address, o)| format!("{address} by {} {}/{}", o.kind, o.namespace, o.name))
        .collect();
    let message = format!(
        "deletion waits until these addresses are released: {}",
        list.join(", ")
    );
    let was = condition_of(&status, DELETING_CONDITION);
    set_condition(
        &mut status.conditions,
        DELETING_CONDITION,
        ConditionStatus::True,
        "AddressesHeld",
        &message,
        pool.metadata.generation,
    );
    if was != Some(("True".to_owned(), message.clone())) {
        events.push((EventType::Warning, "DeletionBlocked", message));
    }
    Plan {
        status,
        finalizer: FinalizerStep::Keep,
        events,
        requeue: DELETION_RECHECK,
    }
}

fn condition_of(status: &AddressPoolStatus, type_: &str) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.message.clone()))
}

fn freed_notes(status: &AddressPoolStatus, gone: &[AllocatedObject]) -> Vec<String> {
    status
        .address_allocation
        .iter()
        .filter(|(_, o)| gone.contains(o))
        .map(|(a, o)| {
            format!(
                "{a} freed: its {} {}/{} no longer exists",
                o.kind, o.namespace, o.name
            )
        })
        .collect()
}

/// The holders of the pool's addresses whose owner no longer exists (a Cluster or an
/// Inventory; an owner of another kind is never judged gone).
async fn owners_gone(
    ctx: &ProvisioningContext,
    pool: &AddressPool,
) -> Result<Vec<AllocatedObject>, Error> {
    let Some(status) = &pool.status else {
        return Ok(Vec::new());
    };
    let owners: BTreeSet<(String, String, String)> = ipam::holders(status)
        .into_iter()
        .map(|(_, o)| (o.kind, o.namespace, o.name))
        .collect();
    let mut gone = Vec::new();
    for (kind, namespace, name) in owners {
        let exists = match kind.as_str() {
            ipam::KIND_CLUSTER => Api::<Cluster>::namespaced(ctx.client.clone(), &namespace)
                .get_metadata_opt(&name)
                .await?
                .is_some(),
            ipam::KIND_INVENTORY => Api::<Inventory>::namespaced(ctx.client.clone(), &namespace)
                .get_metadata_opt(&name)
                .await?
                .is_some(),
            _ => true,
        };
        if !exists {
            gone.push(AllocatedObject {
                kind,
                name,
                namespace,
            });
        }
    }
    Ok(gone)
}

/// Carries a [`Plan`] out: the status (replaced under the `resourceVersion` read), then the
/// finalizer, then the Events.
async fn apply(
    ctx: &ProvisioningContext,
    pool: &AddressPool,
    namespace: &str,
    plan: Plan,
) -> Result<Action, Error> {
    let api: Api<AddressPool> = Api::namespaced(ctx.client.clone(), namespace);
    let mut current = pool.clone();
    let removing = plan.finalizer == FinalizerStep::Remove;
    if !removing && runtime::status::changed(pool.status.as_ref(), &plan.status) {
        current.status = Some(plan.status);
        current = api
            .replace_status(&pool.name_any(), &PostParams::default(), &current)
            .await?;
    }
    match plan.finalizer {
        FinalizerStep::Add => {
            finalizer::add(&api, &current, &[FINALIZER]).await?;
        }
        FinalizerStep::Remove => {
            finalizer::remove(&api, &current, FINALIZER).await?;
            ctx.forget_owner_check(&runtime::object_key(pool));
        }
        FinalizerStep::Keep => {}
    }
    for (type_, reason, note) in plan.events {
        ctx.pool_events
            .publish(pool, type_, reason, "Reconcile", note)
            .await;
    }
    Ok(Action::requeue(plan.requeue))
}

#[cfg(test)]
#[path = "addresspool_tests.rs"]
mod tests;
