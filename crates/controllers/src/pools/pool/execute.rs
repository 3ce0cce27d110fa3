//! Carries out an InstancePool [`Plan`]: the creates, the one removal (cordon and drain through
//! [`removal::drain_step`], then the deletion), the uncordons; then the status, written when it
//! changed, and the Events, recorded after it. A failed call ends the pass with its error before
//! anything is written: the next pass plans again from what it then sees.
//!
//! Crash safety: an Instance is deleted only after its Node drained (or, unreachable, outlived
//! `drainTimeout`), and the drain's start is marked on the Node before the first eviction, so a
//! restart goes on with the same removal and the same deadline. Creates are counted in the
//! cache's expectations, so no pass counts before the cache shows them.

use ingot_api::equinix::{Instance, InstancePool, InstancePoolStatus};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::info;

use super::super::PoolsContext;
use super::super::drain;
use super::super::removal::{self, DrainStep};
use super::plan::{Cause, Plan, Removal, Removed, next_status};
use super::{Error, new_instance};
use crate::runtime;

/// Carries out `plan` for `pool`, whose Instances (as planned on) are `instances`.
pub(super) async fn execute(
    ctx: &PoolsContext,
    pool: &InstancePool,
    instances: &[Instance],
    plan: Plan,
) -> Result<Action, Error> {
    for reason in &plan.blocked {
        ctx.metrics.replacement_blocked(reason);
    }
    let created = create(ctx, pool, plan.create).await?;
    let removed = match &plan.removal {
        Some(removal) => Some(remove(ctx, pool, removal).await?),
        None => None,
    };
    for uncordon in &plan.uncordon {
        drain::uncordon(&ctx.client, &uncordon.node)
            .await
            .map_err(|source| Error::Drain {
                node: uncordon.node.name_any(),
                source,
            })?;
    }
    let report = plan.report(created, removed);
    let (status, events) = next_status(pool, instances, &report);
    let before = pool.status.clone().unwrap_or_default();
    if runtime::status::changed(Some(&before), &status) {
        write_status(ctx, &pool.name_any(), &status).await?;
    }
    for note in events {
        let type_ = if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.pool_events
            .publish(pool, type_, note.reason, "Reconcile", note.message)
            .await;
    }
    Ok(Action::requeue(report.requeue))
}

/// Creates `count` new Instances of the pool; their names.
async fn create(
    ctx: &PoolsContext,
    pool: &InstancePool,
    count: usize,
) -> Result<Vec<String>, Error> {
    let pool_name = pool.name_any();
    let instances: Api<Instance> = Api::all(ctx.client.clone());
    let mut created = Vec::with_capacity(count);
    for _ in 0..count {
        let instance = new_instance(pool);
        let name = instance.name_any();
        instances
            .create(&PostParams::default(), &instance)
            .await
            .map_err(|source| Error::CreateInstance {
                name: name.clone(),
                source,
            })?;
        ctx.shared.caches.expectations.created(&pool_name, &name);
        info!(pool = %pool_name, instance = %name, "created instance");
        created.push(name);
    }
    Ok(created)
}

/// Cordon, drain within the deadline, then delete the Instance.
async fn remove(
    ctx: &PoolsContext,
    pool: &InstancePool,
    removal: &Removal,
) -> Result<Removed, Error> {
    let member = removal.member.as_str();
    let mut timed_out = None;
    if let Some(node) = &removal.node {
        let step = removal::drain_step(ctx, node, removal.drain_timeout, &removal.why)
            .await
            .map_err(|source| Error::Drain {
                node: member.to_owned(),
                source,
            })?;
        match step {
            DrainStep::Proceed { timed_out: why } => timed_out = why,
            DrainStep::Wait { message, blocked } => {
                return Ok(Removed::Draining { message, blocked });
            }
        }
    }
    let instances: Api<Instance> = Api::all(ctx.client.clone());
    match instances.delete(member, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.shared
                .caches
                .expectations
                .deleted(&pool.name_any(), member);
            if removal.cause == Cause::Replacement {
                ctx.metrics.replacement_started();
            }
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(source) => {
            return Err(Error::DeleteInstance {
                name: member.to_owned(),
                source,
            });
        }
    }
    let reason = removal.cause.reason();
    info!(pool = %pool.name_any(), instance = %member, reason, "removed instance");
    Ok(Removed::Deleted { timed_out })
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
