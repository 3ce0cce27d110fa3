//! The deletion flow (upstream `triggerDeletionFlow`): one step per reconcile, each step's
//! outcome written to `status.lastOperation.description` with upstream's marker for the next
//! step, so that a restart (or the Go controller) carries on where it stopped. Every step is
//! safe to repeat: the drain evicts what is left, the device delete treats "gone" as done.

use std::time::Duration;

use ingot_api::gardener::{MCM_FINALIZER, Machine, MachineClass, NODE_LABEL};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use super::drain;
use super::driver::MachineRequest;
use super::machine::{patch_metadata, spec_duration};
use super::status::{self, OpState, OpType, Phase, Update};
use super::{
    Code, Error, FORCE_DELETION_LABEL, GardenerContext, LONG_RETRY, MACHINE_NAME_LABEL,
    NODE_FINALIZER, SHORT_RETRY, has_finalizer,
};
use crate::cluster::{self, drain::Cordon};
use crate::metrics::DrainOutcome;
use crate::runtime::finalizer;

pub const GET_VM_STATUS: &str = "Set machine status to termination. Now, getting VM Status";
/// The `controller` label of the Gardener drains.
const DRAIN_METRIC: &str = "gardener";
pub const INITIATE_DRAIN: &str = "Initiate node drain";
pub const DEL_VOLUMES_ATTACHMENTS: &str = "Delete Volume Attachments";
pub const INITIATE_VM_DELETION: &str = "Initiate VM deletion";
pub const INITIATE_NODE_DELETION: &str = "Initiate node object deletion";
pub const INITIATE_FINALIZER_REMOVAL: &str = "Initiate machine object finalizer removal";

/// How long a NotReady (or read-only) node is waited for before the drain is forced.
const UNHEALTHY_FORCE_AFTER: Duration = Duration::from_secs(5 * 60);

/// The step a description asks for, in upstream's order of checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    GetVmStatus,
    Drain,
    DeleteVolumeAttachments,
    DeleteVm,
    DeleteNode,
    RemoveFinalizer,
    /// No marker (e.g. MCM's "Deleting machine from cloud provider"): start over.
    Start,
}

pub fn step(description: &str) -> Step {
    [
        (GET_VM_STATUS, Step::GetVmStatus),
        (INITIATE_DRAIN, Step::Drain),
        (DEL_VOLUMES_ATTACHMENTS, Step::DeleteVolumeAttachments),
        (INITIATE_VM_DELETION, Step::DeleteVm),
        (INITIATE_NODE_DELETION, Step::DeleteNode),
        (INITIATE_FINALIZER_REMOVAL, Step::RemoveFinalizer),
    ]
    .into_iter()
    .find(|(marker, _)| description.contains(marker))
    .map(|(_, s)| s)
    .unwrap_or(Step::Start)
}

pub async fn reconcile(
    machine: &Machine,
    class: &MachineClass,
    ctx: &GardenerContext,
) -> Result<Action, Error> {
    if !has_finalizer(machine) {
        return Ok(Action::requeue(LONG_RETRY));
    }
    let description = status::description(machine);
    let step = if status::phase(machine) != Phase::Terminating.as_str() {
        Step::Start
    } else {
        step(description)
    };
    match step {
        Step::Start => {
            let update = Update::new(
                Some(Phase::Terminating),
                OpType::Delete,
                OpState::Processing,
                GET_VM_STATUS,
            );
            write(ctx, machine, update).await
        }
        Step::GetVmStatus => get_vm_status(ctx, machine, class).await,
        Step::Drain => drain(ctx, machine).await,
        Step::DeleteVolumeAttachments => delete_volume_attachments(ctx, machine).await,
        Step::DeleteVm => delete_vm(ctx, machine, class).await,
        Step::DeleteNode => delete_node(ctx, machine).await,
        Step::RemoveFinalizer => {
            finalizer::remove(&ctx.machines(), machine, MCM_FINALIZER).await?;
            info!(machine = %machine.name_any(), "machine deleted");
            Ok(Action::await_change())
        }
    }
}

async fn write(ctx: &GardenerContext, machine: &Machine, update: Update) -> Result<Action, Error> {
    let retry = if update.state == OpState::Failed {
        SHORT_RETRY
    } else {
        Duration::from_millis(200)
    };
    status::write(ctx, machine, update).await?;
    Ok(Action::requeue(retry))
}

fn step_update(description: impl Into<String>, state: OpState) -> Update {
    Update::new(None, OpType::Delete, state, description)
}

async fn get_vm_status(
    ctx: &GardenerContext,
    machine: &Machine,
    class: &MachineClass,
) -> Result<Action, Error> {
    if machine
        .labels()
        .get(NODE_LABEL)
        .is_some_and(|n| !n.is_empty())
    {
        return write(
            ctx,
            machine,
            step_update(INITIATE_DRAIN, OpState::Processing),
        )
        .await;
    }
    let name = machine.name_any();
    let nodes: Api<Node> = Api::all(ctx.target().clone());
    let by_label = nodes
        .list(&ListParams::default().labels(&format!("{MACHINE_NAME_LABEL}={name}")))
        .await?;
    let node_name = match by_label.items.first() {
        Some(node) => Some(node.name_any()),
        None => {
            let secret = ctx.secret_data(class).await?;
            let req = MachineRequest {
                machine,
                class,
                secret: &secret,
            };
            match ctx.driver.get_machine_status(req).await {
                Ok(found) => Some(found.node_name),
                Err(s) if s.code == Code::NotFound => {
                    let d = format!(
                        "VM was not found at provider. Moving forward to node drain. {INITIATE_DRAIN}"
                    );
                    return write(ctx, machine, step_update(d, OpState::Processing)).await;
                }
                Err(s) if matches!(s.code, Code::Unimplemented | Code::Uninitialized) => None,
                Err(s) => {
                    let d = format!(
                        "Error occurred with decoding machine error status while getting VM status, aborting with retry. {s} {GET_VM_STATUS}"
                    );
                    status::write(ctx, machine, step_update(d, OpState::Failed)).await?;
                    return Ok(Action::requeue(SHORT_RETRY));
                }
            }
        }
    };
    if let Some(node) = node_name.filter(|n| !n.is_empty()) {
        patch_metadata(ctx, machine, json!({"labels": {NODE_LABEL: node}}), None).await?;
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    write(
        ctx,
        machine,
        step_update(INITIATE_DRAIN, OpState::Processing),
    )
    .await
}

fn condition_bad_for(machine: &Machine, kind: &str, good: &str, at_least: Duration) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == kind)
        .any(|c| {
            c["status"].as_str() != Some(good)
                && c["lastTransitionTime"]
                    .as_str()
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .and_then(|t| Duration::try_from(Timestamp::now().duration_since(t)).ok())
                    .is_some_and(|d| d > at_least)
        })
}

/// Cordons the Node, marks it `Terminating`, and evicts its pods through the eviction API
/// (PodDisruptionBudgets are honoured: a refused eviction is retried `maxEvictRetries` times,
/// see [`drain`]); after the drain timeout, with the `force-deletion` label, or on a node
/// NotReady for 5 minutes, pods are deleted.
async fn drain(ctx: &GardenerContext, machine: &Machine) -> Result<Action, Error> {
    let node_name = machine
        .labels()
        .get(NODE_LABEL)
        .cloned()
        .unwrap_or_default();
    if node_name.is_empty() {
        let d = format!(
            "Skipping drain as nodeName is not a valid one for machine. {INITIATE_VM_DELETION}"
        );
        return write(ctx, machine, step_update(d, OpState::Processing)).await;
    }
    let nodes: Api<Node> = Api::all(ctx.target().clone());
    let Some(node) = nodes.get_opt(&node_name).await? else {
        let d = format!("Skipping drain as node object does not exist. {INITIATE_VM_DELETION}");
        return write(ctx, machine, step_update(d, OpState::Processing)).await;
    };
    let drain_timeout =
        spec_duration(machine, "drainTimeout").unwrap_or(ctx.settings.drain_timeout);
    let deleting_for = machine
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| Duration::try_from(Timestamp::now().duration_since(t.0)).ok())
        .unwrap_or_default();
    let force = force_drain(machine, deleting_for, drain_timeout);
    cordon_and_mark(ctx, machine, &node).await?;
    ctx.crash_point("gardener-during-drain");

    let max_retries =
        drain::max_evict_retries(machine, ctx.settings.max_evict_retries, drain_timeout);
    let pass = drain::pods(ctx, &node_name, force, max_retries).await?;
    let until_force = drain_timeout.saturating_sub(deleting_for) + Duration::from_secs(1);
    drain_pass_done(ctx, machine, &node_name, force, pass, until_force).await
}

/// Upstream's force: the `force-deletion` label, past the drain timeout, or a Node NotReady
/// (or with a read-only file system) for [`UNHEALTHY_FORCE_AFTER`].
fn force_drain(machine: &Machine, deleting_for: Duration, drain_timeout: Duration) -> bool {
    machine
        .labels()
        .get(FORCE_DELETION_LABEL)
        .is_some_and(|v| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"))
        || deleting_for > drain_timeout
        || condition_bad_for(machine, "Ready", "True", UNHEALTHY_FORCE_AFTER)
        || condition_bad_for(
            machine,
            "ReadonlyFilesystem",
            "False",
            UNHEALTHY_FORCE_AFTER,
        )
}

/// Cordons the Node (no marker: upstream's cordon is plain) and says why with upstream's Node
/// condition `Terminating` (`Unhealthy` for a Failed machine, else `ScaleDown`).
async fn cordon_and_mark(
    ctx: &GardenerContext,
    machine: &Machine,
    node: &Node,
) -> Result<(), Error> {
    let node_name = node.name_any();
    if !cluster::drain::is_cordoned(node) {
        cluster::drain::cordon(ctx.target(), &node_name, Cordon::Set, &[]).await?;
    }
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    if conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Terminating")) {
        return Ok(());
    }
    let reason = if status::phase(machine) == Phase::Failed.as_str() {
        "Unhealthy"
    } else {
        "ScaleDown"
    };
    let mut conditions: Vec<Value> = conditions
        .map(|cs| {
            cs.iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default();
    conditions.push(json!({"type": "Terminating", "status": "True", "reason": reason, "lastTransitionTime": status::now()}));
    let nodes: Api<Node> = Api::all(ctx.target().clone());
    nodes
        .patch_status(
            &node_name,
            &PatchParams::default(),
            &Patch::Strategic(&json!({"status": {"conditions": conditions}})),
        )
        .await?;
    Ok(())
}

/// Records a drain pass: done (forced or not), or blocked until the next eviction (or the
/// drain timeout, `until_force` from now).
async fn drain_pass_done(
    ctx: &GardenerContext,
    machine: &Machine,
    node_name: &str,
    force: bool,
    pass: drain::Pass,
    until_force: Duration,
) -> Result<Action, Error> {
    // A drain is counted once its step is written: a pass whose write conflicts (a stale
    // copy of the Machine) runs again and must not count the same drain twice.
    if force {
        let d = format!("Force Drain successful. {DEL_VOLUMES_ATTACHMENTS}");
        let next = write(ctx, machine, step_update(d, OpState::Processing)).await?;
        ctx.metrics
            .drain_finished(DRAIN_METRIC, DrainOutcome::Forced);
        ctx.evictions.forget(node_name);
        return Ok(next);
    }
    if !pass.blocked.is_empty() {
        ctx.metrics.drain_blocked(DRAIN_METRIC);
        let d = format!(
            "Drain failed due to - {}. Will retry in next sync. {INITIATE_DRAIN}",
            pass.blocked.join("; ")
        );
        status::write(ctx, machine, step_update(d, OpState::Failed)).await?;
        // Come back for the next eviction, or when the drain timeout forces the drain.
        let next = pass
            .next_retry
            .unwrap_or(SHORT_RETRY)
            .max(Duration::from_secs(1));
        return Ok(Action::requeue(next.min(until_force)));
    }
    let d = format!("Drain successful. {INITIATE_VM_DELETION}");
    let next = write(ctx, machine, step_update(d, OpState::Processing)).await?;
    ctx.metrics
        .drain_finished(DRAIN_METRIC, DrainOutcome::Drained);
    ctx.evictions.forget(node_name);
    Ok(next)
}

async fn delete_volume_attachments(
    ctx: &GardenerContext,
    machine: &Machine,
) -> Result<Action, Error> {
    let node_name = machine
        .labels()
        .get(NODE_LABEL)
        .cloned()
        .unwrap_or_default();
    let attachments: Api<VolumeAttachment> = Api::all(ctx.target().clone());
    let mut live = 0;
    for va in attachments.list(&ListParams::default()).await?.items {
        if va.spec.node_name != node_name || va.metadata.deletion_timestamp.is_some() {
            continue;
        }
        live += 1;
        match attachments
            .delete(&va.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if live > 0 {
        return Ok(Action::requeue(SHORT_RETRY));
    }
    let d = format!(
        "No Live VolumeAttachments for node: {node_name}. Moving to VM Deletion. {INITIATE_VM_DELETION}"
    );
    write(ctx, machine, step_update(d, OpState::Processing)).await
}

async fn delete_vm(
    ctx: &GardenerContext,
    machine: &Machine,
    class: &MachineClass,
) -> Result<Action, Error> {
    let secret = ctx.secret_data(class).await?;
    let req = MachineRequest {
        machine,
        class,
        secret: &secret,
    };
    let result = ctx.driver.delete_machine(req).await;
    // Test-only: the device is deleted, the step is not recorded yet.
    ctx.crash_point("gardener-during-delete");
    match result {
        Ok(resp) => {
            let mut update = step_update(
                format!("VM deletion was successful. {INITIATE_NODE_DELETION}"),
                OpState::Processing,
            );
            update.last_known_state = Some(resp.last_known_state);
            write(ctx, machine, update).await
        }
        Err(s) if s.code == Code::NotFound => {
            write(
                ctx,
                machine,
                step_update(
                    format!("VM not found. Continuing deletion flow. {INITIATE_NODE_DELETION}"),
                    OpState::Processing,
                ),
            )
            .await
        }
        Err(s) if s.code.is_transient() => {
            let d = format!(
                "VM deletion failed due to - {s}. However, will re-try in the next resync. {INITIATE_VM_DELETION}"
            );
            status::write(ctx, machine, step_update(d, OpState::Failed)).await?;
            Ok(Action::requeue(SHORT_RETRY))
        }
        Err(s) => {
            let d = format!(
                "VM deletion failed due to - {s}. Aborting operation. {INITIATE_VM_DELETION}"
            );
            status::write(ctx, machine, step_update(d, OpState::Failed)).await?;
            Ok(Action::requeue(LONG_RETRY))
        }
    }
}

async fn delete_node(ctx: &GardenerContext, machine: &Machine) -> Result<Action, Error> {
    let name = machine.name_any();
    let Some(node_name) = machine
        .labels()
        .get(NODE_LABEL)
        .filter(|n| !n.is_empty())
        .cloned()
    else {
        let d = format!(
            "Label {NODE_LABEL:?} not present on machine {name:?}, continuing deletion flow. {INITIATE_FINALIZER_REMOVAL}"
        );
        return write(ctx, machine, step_update(d, OpState::Processing)).await;
    };
    let nodes: Api<Node> = Api::all(ctx.target().clone());
    if let Some(node) = nodes.get_opt(&node_name).await? {
        finalizer::remove(&nodes, &node, NODE_FINALIZER).await?;
        match nodes.delete(&node_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        let d = format!(
            "Deletion of Node Object {node_name:?} is successful. {INITIATE_FINALIZER_REMOVAL}"
        );
        return write(ctx, machine, step_update(d, OpState::Processing)).await;
    }
    let d = format!(
        "No node object found for {node_name:?}, continuing deletion flow. {INITIATE_FINALIZER_REMOVAL}"
    );
    write(ctx, machine, step_update(d, OpState::Processing)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_follow_upstream_markers() {
        assert_eq!(step(GET_VM_STATUS), Step::GetVmStatus);
        assert_eq!(
            step("VM was not found at provider. Moving forward to node drain. Initiate node drain"),
            Step::Drain
        );
        assert_eq!(
            step("Drain failed due to - x. Will retry in next sync. Initiate node drain"),
            Step::Drain
        );
        assert_eq!(
            step("Force Drain successful. Delete Volume Attachments"),
            Step::DeleteVolumeAttachments
        );
        assert_eq!(
            step("Drain successful. Initiate VM deletion"),
            Step::DeleteVm
        );
        assert_eq!(
            step("VM deletion was successful. Initiate node object deletion"),
            Step::DeleteNode
        );
        assert_eq!(
            step(
                "Deletion of Node Object \"n\" is successful. Initiate machine object finalizer removal"
            ),
            Step::RemoveFinalizer
        );
        assert_eq!(step("Deleting machine from cloud provider"), Step::Start);
    }
}
