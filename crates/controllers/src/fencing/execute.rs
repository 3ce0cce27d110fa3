//! What the fencing controller observes of a Node (from its watch stores), and the writes and
//! BMC Jobs it makes.
//!
//! ingot's record of an episode lives on the Node, in annotations: the power-off and power-on
//! Jobs' names, whether ingot added the out-of-service taint (or found it there), and the last
//! hold told. Jobs are named after the episode (the Node's uid and the time its `Ready`
//! condition last changed) and created before they are recorded: a pass after a crash in
//! between makes the same name, gets "already exists", and adopts it: one power action, never
//! two. The taint and its record are one write, guarded by the Node's `resourceVersion`, so
//! that the node lifecycle controller's taints are never overwritten.

use std::sync::Arc;
use std::time::Duration;

use ingot_api::remediation::{BMCRemediation, NHC_TIMED_OUT_ANNOTATION};
use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::{Inventory, InventoryStatus};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::phase::{self, Hold, JobState, Outcome, Power, Readiness, Recovery};
use super::remediation::{self as nhc, Remediations};
use super::{Error, FencingContext, JOB_NODE_LABEL, Stores};
use crate::seeder::inventory::node_name;
use crate::seeder::{conditions, power};

/// ingot's annotations on a fenced (or held) Node.
pub const POWER_OFF_JOB: &str = "fencing.ingot.dev/power-off-job";
pub const POWER_ON_JOB: &str = "fencing.ingot.dev/power-on-job";
/// `added` (ingot added the taint, and removes it) or `found` (it was there: left alone).
pub const TAINT_RECORD: &str = "fencing.ingot.dev/out-of-service-taint";
/// The reason of the last hold told (its Event and condition are written once).
pub const HELD: &str = "fencing.ingot.dev/held";

/// Kubernetes' taint of non-graceful node shutdown.
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
pub const OUT_OF_SERVICE_VALUE: &str = "nodeshutdown";
/// Harvester's maintenance mode on a Node.
pub const MAINTAIN_STATUS: &str = "harvesterhci.io/maintain-status";
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// The Inventory conditions (wrangler style, in Seeder's list): why the Node is not fenced,
/// and that it is.
pub const FENCING_HELD: &str = "fencingHeld";
pub const NODE_FENCED: &str = "nodeFenced";

/// ingot's record on the Node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub power_off_job: Option<String>,
    pub power_on_job: Option<String>,
    pub taint: Option<String>,
    pub held: Option<String>,
}

impl Record {
    pub fn read(node: &Node) -> Self {
        let a = node.annotations();
        let get = |k: &str| a.get(k).filter(|v| !v.is_empty()).cloned();
        Record {
            power_off_job: get(POWER_OFF_JOB),
            power_on_job: get(POWER_ON_JOB),
            taint: get(TAINT_RECORD),
            held: get(HELD),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Record::default()
    }
}

/// How the Node's `Ready` condition stands, and since when.
pub fn readiness(node: &Node) -> Readiness {
    let Some(ready) = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
    else {
        return Readiness::Unreported;
    };
    if ready.status == "True" {
        return Readiness::Ready;
    }
    let since = ready
        .last_transition_time
        .as_ref()
        .map(|t| Duration::try_from(Timestamp::now().duration_since(t.0)).unwrap_or_default())
        .unwrap_or_default();
    Readiness::NotReady(since)
}

/// What [`observe`] found.
pub struct Observation {
    pub state: phase::Observed,
    pub record: Record,
    /// The one Inventory naming the Node, when there is one (with its Machine).
    pub inventory: Option<Arc<Inventory>>,
    pub power_off_job: String,
    pub power_on_job: String,
    /// The Node's BMCRemediations (medik8s NodeHealthCheck), sorted.
    pub remediations: Remediations,
}

/// What fixes an episode decided by fencing itself: the Node's uid and the time its `Ready`
/// condition last changed. (One a BMCRemediation decided is fixed by that object's uid.)
pub fn episode(node: &Node) -> String {
    let since = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    format!("{}/{since}", node.uid().unwrap_or_default())
}

/// The Job of this episode doing `action` (`off`, `on`) on the Inventory's Machine: a name
/// fixed by the episode ([`episode`], or a BMCRemediation's uid).
pub fn job_name(inventory: &str, key: &str, action: &str) -> String {
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|i| char::from(ALPHABET[((hash >> (i * 8)) % ALPHABET.len() as u64) as usize]))
        .collect();
    let mut prefix = format!("{inventory}-fence-{action}");
    prefix.truncate(56);
    format!("{prefix}-{suffix}")
}

fn machine_power(machine: Option<&Machine>) -> Power {
    let Some(status) = machine.and_then(|m| m.status.as_ref()) else {
        return Power::Unknown;
    };
    let contactable = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Contactable" && c.status == "True");
    match (contactable, status.power_state.as_deref()) {
        (true, Some("on")) => Power::On,
        (true, Some("off")) => Power::Off,
        _ => Power::Unknown,
    }
}

/// A Job's state: a recorded one that is gone is taken as still running (never sent again);
/// an unrecorded one is the episode's if the store holds it (adopted after a crash).
fn job_state(stores: &Stores, namespace: &str, name: &str, recorded: bool) -> JobState {
    let job = stores.jobs.get(&ObjectRef::new(name).within(namespace));
    if job.is_none() && !recorded {
        return JobState::None;
    }
    match power::job_outcome(job.as_deref()) {
        power::JobOutcome::Completed => JobState::Succeeded,
        power::JobOutcome::Failed(why) => JobState::Failed(why),
        power::JobOutcome::Running | power::JobOutcome::Missing => JobState::Running,
    }
}

/// Whether a Pod tolerates the out-of-service taint (then it is not deleted for it).
fn tolerates_out_of_service(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|tolerations| {
            tolerations.iter().any(|t| {
                let key = t.key.as_deref().unwrap_or_default();
                let exists = t.operator.as_deref() == Some("Exists");
                let key_matches = key == OUT_OF_SERVICE || (key.is_empty() && exists);
                let value_matches =
                    exists || t.value.as_deref().unwrap_or_default() == OUT_OF_SERVICE_VALUE;
                let effect = t.effect.as_deref().unwrap_or_default();
                key_matches && value_matches && (effect.is_empty() || effect == "NoExecute")
            })
        })
}

pub async fn observe(
    node: &Node,
    readiness: Readiness,
    record: &Record,
    ctx: &FencingContext,
    stores: &Stores,
    remediations: Vec<Arc<BMCRemediation>>,
) -> Result<Observation, Error> {
    let name = node.name_any();
    let settings = &ctx.settings;
    let mut named: Vec<Arc<Inventory>> = stores
        .inventories
        .state()
        .into_iter()
        .filter(|i| node_name(i) == Some(name.as_str()) && i.metadata.deletion_timestamp.is_none())
        .collect();
    let inventory = (named.len() == 1).then(|| named.remove(0));
    let machine = inventory.as_ref().and_then(|i| {
        stores
            .machines
            .get(&ObjectRef::new(&i.name_any()).within(&i.namespace().unwrap_or_default()))
    });
    let namespace = inventory
        .as_ref()
        .and_then(|i| i.namespace())
        .unwrap_or_default();
    let inventory_name = inventory.as_ref().map(|i| i.name_any()).unwrap_or_default();
    // NodeHealthCheck's decision, when a BMCRemediation in the Inventory's namespace names the
    // Node: a candidate now (the delay is NHC's), or released once that object is deleted.
    let remediations = Remediations::sort(
        remediations,
        inventory.as_ref().and_then(|i| i.namespace()).as_deref(),
        record.power_off_job.is_some(),
    );
    let readiness = if remediations.driver.is_some() {
        match readiness {
            Readiness::NotReady(since) => Readiness::NotReady(since.max(settings.after)),
            _ => Readiness::NotReady(settings.after),
        }
    } else if remediations.released.is_some() || settings.remediations_only {
        Readiness::Ready
    } else {
        readiness
    };
    let key = remediations
        .current()
        .and_then(|r| r.uid())
        .unwrap_or_else(|| episode(node));
    let power_off_job = record
        .power_off_job
        .clone()
        .unwrap_or_else(|| job_name(&inventory_name, &key, "off"));
    let power_on_job = record
        .power_on_job
        .clone()
        .unwrap_or_else(|| job_name(&inventory_name, &key, "on"));
    let (power_off, power_on) = if inventory.is_some() {
        (
            job_state(
                stores,
                &namespace,
                &power_off_job,
                record.power_off_job.is_some(),
            ),
            job_state(
                stores,
                &namespace,
                &power_on_job,
                record.power_on_job.is_some(),
            ),
        )
    } else {
        // No one Inventory: a recorded Job is never sent again, nor taken for done (the
        // Inventory's Jobs go with it).
        let recorded = |r: &Option<String>| {
            if r.is_some() {
                JobState::Failed("the Node's Inventory is gone".into())
            } else {
                JobState::None
            }
        };
        (
            recorded(&record.power_off_job),
            recorded(&record.power_on_job),
        )
    };
    let all = stores.nodes.state();
    // The budget is over the fleet ingot fences: the Nodes an Inventory in its scope names (as
    // a NodeHealthCheck's selector). Quorum is over every control-plane Node.
    let names: std::collections::BTreeSet<String> = stores
        .inventories
        .state()
        .iter()
        .filter_map(|i| node_name(i).map(str::to_owned))
        .collect();
    let fleet: Vec<&Arc<Node>> = all
        .iter()
        .filter(|n| names.contains(&n.name_any()))
        .collect();
    // NodeHealthCheck's unhealthy Nodes (a BMCRemediation from their Inventory's namespace)
    // count against the budget as the NotReady ones do.
    let inventory_namespaces: std::collections::BTreeSet<(String, String)> = stores
        .inventories
        .state()
        .iter()
        .filter_map(|i| Some((node_name(i)?.to_owned(), i.namespace()?)))
        .collect();
    let remediated: std::collections::BTreeSet<String> = stores
        .remediations
        .state()
        .iter()
        .filter(|r| {
            r.metadata.deletion_timestamp.is_none()
                && !r.annotations().contains_key(NHC_TIMED_OUT_ANNOTATION)
                && inventory_namespaces
                    .contains(&(nhc::node_of(r), r.namespace().unwrap_or_default()))
        })
        .map(|r| nhc::node_of(r))
        .collect();
    let node_ready = |n: &Node| self::readiness(n) == Readiness::Ready;
    let control_plane = |n: &Node| n.labels().contains_key(CONTROL_PLANE_LABEL);
    let tainted = record.taint.is_some();
    let pods_left = if tainted
        && settings.recovery == Recovery::PowerOn
        && power_on == JobState::None
        && matches!(readiness, Readiness::NotReady(_))
    {
        let pods: Api<Pod> = Api::all(ctx.client.clone());
        pods.list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?
            .items
            .iter()
            .filter(|p| !tolerates_out_of_service(p))
            .count()
    } else {
        0
    };
    Ok(Observation {
        state: phase::Observed {
            readiness,
            after: settings.after,
            maintenance: node
                .annotations()
                .get(MAINTAIN_STATUS)
                .is_some_and(|v| !v.is_empty()),
            cordoned: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            unhealthy: fleet
                .iter()
                .filter(|n| {
                    matches!(self::readiness(n), Readiness::NotReady(_))
                        || remediated.contains(&n.name_any())
                })
                .count(),
            nodes: fleet.len(),
            max_unhealthy: settings.max_unhealthy,
            control_plane: control_plane(node),
            control_planes: all.iter().filter(|n| control_plane(n)).count(),
            other_ready_control_planes: all
                .iter()
                .filter(|n| control_plane(n) && node_ready(n) && n.name_any() != name)
                .count(),
            inventory: inventory.is_some() && machine.is_some(),
            power: machine_power(machine.as_deref()),
            power_off,
            tainted,
            pods_left,
            recovery: settings.recovery,
            power_on,
            held_before: record.held.is_some(),
            released: remediations.released.is_some(),
        },
        record: record.clone(),
        inventory,
        power_off_job,
        power_on_job,
        remediations,
    })
}

pub async fn execute(
    node: &Node,
    ctx: &FencingContext,
    observed: &Observation,
    outcome: Outcome,
) -> Result<Action, Error> {
    match outcome {
        Outcome::Wait(requeue) => Ok(requeue.map_or_else(Action::await_change, Action::requeue)),
        Outcome::Held(hold, message, requeue) => {
            held(node, ctx, observed, hold, &message).await?;
            Ok(requeue.map_or_else(Action::await_change, Action::requeue))
        }
        Outcome::PowerOff => power_off(node, ctx, observed).await,
        Outcome::Taint => taint(node, ctx, observed).await,
        Outcome::PowerOn => power_on(node, ctx, observed).await,
        Outcome::Recover => recover(node, ctx, observed).await,
    }
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Merge-patches the Node with its resourceVersion (a conflict is looked at again).
async fn patch_node(ctx: &FencingContext, node: &Node, mut body: Value) -> Result<(), Error> {
    body["metadata"]["resourceVersion"] = json!(node.resource_version());
    Api::<Node>::all(ctx.client.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await?;
    Ok(())
}

/// Replaces the Inventory's status (with the resourceVersion read) when `change` changed it.
async fn write_inventory(
    inventory: &Inventory,
    ctx: &FencingContext,
    change: impl FnOnce(&mut InventoryStatus),
) -> Result<(), Error> {
    let before = inventory.status.clone().unwrap_or_default();
    let mut status = before.clone();
    change(&mut status);
    if status == before {
        return Ok(());
    }
    let body = json!({
        "metadata": {"resourceVersion": inventory.resource_version()},
        "status": crate::runtime::status::replacing(&before, &status)?,
    });
    Api::<Inventory>::namespaced(
        ctx.client.clone(),
        &inventory.namespace().unwrap_or_default(),
    )
    .patch_status(
        &inventory.name_any(),
        &PatchParams::default(),
        &Patch::Merge(body),
    )
    .await?;
    Ok(())
}

/// An Event on the Node, on its Inventory (when there is one) and on the BMCRemediation the
/// episode is for (when there is one).
async fn tell(
    ctx: &FencingContext,
    node: &Node,
    observed: &Observation,
    warning: bool,
    reason: &str,
    message: &str,
) {
    let inventory = observed.inventory.as_deref();
    let kind = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    ctx.events
        .publish(node, kind, reason, "Fence", message.to_owned())
        .await;
    if let Some(inventory) = inventory {
        ctx.events
            .publish(inventory, kind, reason, "Fence", message.to_owned())
            .await;
    }
    if let Some(remediation) = observed.remediations.current() {
        ctx.events
            .publish(
                remediation.as_ref(),
                kind,
                reason,
                "Fence",
                message.to_owned(),
            )
            .await;
    }
}

/// A hold: told once per reason (the Node's record), as a condition and an Event.
async fn held(
    node: &Node,
    ctx: &FencingContext,
    observed: &Observation,
    hold: Hold,
    message: &str,
) -> Result<(), Error> {
    if observed.record.held.as_deref() == Some(hold.reason()) {
        return Ok(());
    }
    // The condition first: the Node's record says the hold was told.
    if let Some(inventory) = &observed.inventory {
        let now = now();
        write_inventory(inventory, ctx, |s| {
            if hold.warning() {
                conditions::set_error(&mut s.conditions, FENCING_HELD, message, &now);
            } else {
                conditions::set_true(&mut s.conditions, FENCING_HELD, Some(message), &now);
            }
        })
        .await?;
    }
    patch_node(
        ctx,
        node,
        json!({"metadata": {"annotations": {HELD: hold.reason()}}}),
    )
    .await?;
    ctx.metrics.fencing_held(hold.reason());
    tell(ctx, node, observed, hold.warning(), hold.reason(), message).await;
    Ok(())
}

/// A rufio Job of the Inventory's Machine, labelled with the Node and owned by the Inventory.
fn job(inventory: &Inventory, node: &Node, name: &str, action: &str) -> Result<Job, Error> {
    let label = (JOB_NODE_LABEL, node.name_any());
    power::inventory_job(inventory, name, label, json!([{"powerAction": action}]))
        .map_err(|e| Error::Kube(kube::Error::SerdeError(e)))
}

async fn power_off(
    node: &Node,
    ctx: &FencingContext,
    observed: &Observation,
) -> Result<Action, Error> {
    let Some(inventory) = &observed.inventory else {
        return Ok(Action::requeue(phase::POLL));
    };
    let name = &observed.power_off_job;
    // One of that name already there is this episode's (a pass after a crash): not sent again.
    power::create_once(&ctx.client, &job(inventory, node, name, "off")?).await?;
    crate::crash_point(
        ctx.settings.crash_point.as_deref(),
        "fencing-after-power-off-job",
    );
    patch_node(
        ctx,
        node,
        json!({"metadata": {"annotations": {POWER_OFF_JOB: name, HELD: null}}}),
    )
    .await?;
    ctx.metrics.fencing_power_action("off");
    let why = match &observed.remediations.driver {
        Some(r) => format!(
            "BMCRemediation {}/{} (medik8s NodeHealthCheck) asks for it",
            r.namespace().unwrap_or_default(),
            r.name_any()
        ),
        None => format!("NotReady for {}s or longer", ctx.settings.after.as_secs()),
    };
    let message = format!(
        "{why}: powering the server off through its BMC (bmc job {name}); the Node is tainted out of service once the BMC confirms it off"
    );
    tell(ctx, node, observed, true, "FencingPowerOff", &message).await;
    Ok(Action::requeue(phase::POLL))
}

async fn taint(node: &Node, ctx: &FencingContext, observed: &Observation) -> Result<Action, Error> {
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let found = taints
        .iter()
        .any(|t| t.key == OUT_OF_SERVICE && t.effect == "NoExecute");
    if !found {
        taints.push(Taint {
            key: OUT_OF_SERVICE.to_owned(),
            value: Some(OUT_OF_SERVICE_VALUE.to_owned()),
            effect: "NoExecute".to_owned(),
            time_added: None,
        });
    }
    patch_node(
        ctx,
        node,
        json!({
            "metadata": {"annotations": {
                POWER_OFF_JOB: observed.power_off_job,
                TAINT_RECORD: if found { "found" } else { "added" },
                HELD: null,
            }},
            "spec": {"taints": taints},
        }),
    )
    .await?;
    crate::crash_point(ctx.settings.crash_point.as_deref(), "fencing-after-taint");
    ctx.metrics.fencing.fenced.inc();
    if let Some(inventory) = &observed.inventory {
        let now = now();
        let message = format!(
            "node {} fenced: powered off, out of service",
            node.name_any()
        );
        write_inventory(inventory, ctx, |s| {
            conditions::set_true(&mut s.conditions, NODE_FENCED, Some(&message), &now);
            conditions::set_false(&mut s.conditions, FENCING_HELD, &now);
        })
        .await?;
    }
    let message = format!(
        "the BMC confirmed the power off: tainted {OUT_OF_SERVICE}={OUT_OF_SERVICE_VALUE}:NoExecute so that its volumes detach and its pods move"
    );
    tell(ctx, node, observed, true, "Fenced", &message).await;
    Ok(Action::requeue(phase::POLL))
}

async fn power_on(
    node: &Node,
    ctx: &FencingContext,
    observed: &Observation,
) -> Result<Action, Error> {
    let Some(inventory) = &observed.inventory else {
        return Ok(Action::requeue(phase::POLL));
    };
    let name = &observed.power_on_job;
    power::create_once(&ctx.client, &job(inventory, node, name, "on")?).await?;
    crate::crash_point(
        ctx.settings.crash_point.as_deref(),
        "fencing-after-power-on-job",
    );
    patch_node(
        ctx,
        node,
        json!({"metadata": {"annotations": {POWER_ON_JOB: name}}}),
    )
    .await?;
    ctx.metrics.fencing_power_action("on");
    let message = format!(
        "the fenced Node's pods are gone: powering the server on again (bmc job {name}); the taint is removed once the Node is Ready"
    );
    tell(ctx, node, observed, false, "FencingPowerOn", &message).await;
    Ok(Action::await_change())
}

async fn recover(
    node: &Node,
    ctx: &FencingContext,
    observed: &Observation,
) -> Result<Action, Error> {
    let mut body = json!({"metadata": {"annotations": {
        POWER_OFF_JOB: null, POWER_ON_JOB: null, TAINT_RECORD: null, HELD: null,
    }}});
    let fenced = observed.record.taint.is_some() || observed.record.power_off_job.is_some();
    if observed.record.taint.as_deref() == Some("added") {
        let taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| !(t.key == OUT_OF_SERVICE && t.effect == "NoExecute"))
            .collect();
        body["spec"] = json!({"taints": taints});
    }
    patch_node(ctx, node, body).await?;
    // The record is gone: the episode's Jobs go too (best effort: a failure leaves a finished
    // Job behind, which its Inventory's deletion takes along).
    if let Some(inventory) = &observed.inventory {
        let jobs: Api<Job> = Api::namespaced(
            ctx.client.clone(),
            &inventory.namespace().unwrap_or_default(),
        );
        for (state, name) in [
            (&observed.state.power_off, &observed.power_off_job),
            (&observed.state.power_on, &observed.power_on_job),
        ] {
            if *state == JobState::None {
                continue;
            }
            match jobs.delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(error) => tracing::warn!(%error, job = %name, "could not delete a fencing Job"),
            }
        }
    }
    if let Some(inventory) = &observed.inventory {
        let now = now();
        write_inventory(inventory, ctx, |s| {
            conditions::set_false(&mut s.conditions, NODE_FENCED, &now);
            conditions::set_false(&mut s.conditions, FENCING_HELD, &now);
        })
        .await?;
    }
    ctx.metrics.fencing.recovered.inc();
    if fenced {
        let message = if observed.record.taint.as_deref() == Some("added") {
            format!("the Node is Ready again: {OUT_OF_SERVICE} removed")
        } else {
            "the Node is Ready again: fencing's record removed".to_owned()
        };
        tell(ctx, node, observed, false, "FencingRecovered", &message).await;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(tolerations: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "tolerations": tolerations}}))
        .unwrap()
    }

    #[test]
    fn only_pods_that_tolerate_the_out_of_service_taint_stay() {
        assert!(!tolerates_out_of_service(&pod(json!([]))));
        // What DaemonSets tolerate is not this taint.
        assert!(!tolerates_out_of_service(&pod(json!([
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
        ]))));
        assert!(tolerates_out_of_service(&pod(
            json!([{"operator": "Exists"}])
        )));
        assert!(tolerates_out_of_service(&pod(json!([
            {"key": OUT_OF_SERVICE, "operator": "Equal", "value": "nodeshutdown", "effect": "NoExecute"}
        ]))));
        assert!(!tolerates_out_of_service(&pod(json!([
            {"key": OUT_OF_SERVICE, "operator": "Equal", "value": "other"}
        ]))));
    }

    #[test]
    fn job_names_are_fixed_by_the_episode() {
        let node = |uid: &str, since: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n", "uid": uid},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                    "lastTransitionTime": since}]}}))
            .unwrap()
        };
        let name =
            |inventory: &str, node: &Node, action| job_name(inventory, &episode(node), action);
        let a = name("inv", &node("u1", "2026-01-01T00:00:00Z"), "off");
        assert_eq!(a, name("inv", &node("u1", "2026-01-01T00:00:00Z"), "off"));
        assert!(a.starts_with("inv-fence-off-"), "{a}");
        assert_ne!(a, name("inv", &node("u1", "2026-01-01T00:05:00Z"), "off"));
        assert_ne!(a, name("inv", &node("u2", "2026-01-01T00:00:00Z"), "off"));
        // A BMCRemediation's episode: its uid.
        assert_ne!(job_name("inv", "r1", "off"), job_name("inv", "r2", "off"));
        let long = name(&"x".repeat(80), &node("u1", "2026-01-01T00:00:00Z"), "off");
        assert!(long.len() <= 63, "{long}");
    }
}
