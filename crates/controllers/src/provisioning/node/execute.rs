//! What the Inventory controller of provisioning observes, and the writes and BMC Jobs it
//! makes. The install boot and the release shutdown are rufio Jobs named after the allocation
//! ([`job_name`]): created first, then recorded; a pass after a crash in between creates the
//! same name again, gets "already exists", and records it: one boot, never two.

use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::Job;
use ingot_api::seeder::{
    Cluster, INVENTORY_NODE_READY, Inventory, InventoryStatus, JOB_INVENTORY_LABEL,
    ObjectRef as SeederRef, PxeBootConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::phase::{
    self, BOOT_MEDIA_ANNOTATION, BOOT_MEDIA_EJECTED, BOOT_MEDIA_INVALID, BootMedia,
    HARVESTER_INSTALLED, INSTALL_TIMED_OUT, JobState, Note, Outcome, Owner, Power,
    VIRTUAL_MEDIA_UNSUPPORTED, WAITING_FOR_INSTALL_SLOT,
};
use crate::provisioning::cluster::execute::{
    HARVESTER_CREATE_NODE, HARVESTER_JOIN_NODE, INVENTORY_FREED,
};
use crate::provisioning::cluster::phase::Phase as ClusterPhase;
use crate::provisioning::install::{self, SCRIPT_KEY};
use crate::provisioning::tinkerbell::{self, WorkflowState};
use crate::provisioning::{Error, ProvisioningContext, Stores, allocation};
use crate::seeder::conditions::{self, BMC_JOB_SUBMITTED, INVENTORY_ALLOCATED_TO_CLUSTER};
use crate::seeder::power;

/// ingot's record of the install boot: `True`, the message the Job's name.
pub const INSTALL_BOOT: &str = "harvesterInstallBoot";
/// Seeder's condition for the release shutdown (its message: the Cluster's name).
pub const CLUSTER_CLEANUP_SUBMITTED: &str = "clusterCleanupSubmitted";

/// What [`observe`] found.
pub struct Observation {
    pub state: phase::Observed,
    pub boot_job: String,
    pub shutdown_job: String,
    pub eject_job: String,
}

/// The Job of this allocation doing `action` (`reboot`, `shutdown`): the Inventory's name and
/// a suffix fixed by the allocation (Cluster, address), so a second create is "already
/// exists", and a new allocation gets a new name.
pub fn job_name(inventory: &Inventory, action: &str) -> String {
    let status = inventory.status.clone().unwrap_or_default();
    let key = format!(
        "{}/{}/{}/{}",
        inventory.uid().unwrap_or_default(),
        status.owner_cluster.namespace,
        status.owner_cluster.name,
        status.pxe_boot_config.address.unwrap_or_default()
    );
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|i| char::from(ALPHABET[((hash >> (i * 8)) % ALPHABET.len() as u64) as usize]))
        .collect();
    let mut prefix = format!("{}-{action}", inventory.name_any());
    prefix.truncate(56);
    format!("{prefix}-{suffix}")
}

pub async fn observe(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    stores: &Stores,
) -> Result<Observation, Error> {
    let status = inventory.status.clone().unwrap_or_default();
    let namespace = inventory.namespace().unwrap_or_default();
    let boot_job = job_name(inventory, "reboot");
    let shutdown_job = job_name(inventory, "shutdown");
    let eject_job = job_name(inventory, "eject");
    let owner = owner(inventory, &status, ctx, stores).await?;
    let recorded = |condition: &str| conditions::is_true(&status.conditions, condition);
    let job_state = |condition: &str, name: &str| {
        if !recorded(condition) {
            return JobState::None;
        }
        match power::job_outcome(stores.job(&namespace, name).as_deref()) {
            power::JobOutcome::Completed => JobState::Succeeded,
            power::JobOutcome::Failed(why) => JobState::Failed(why),
            // Not seen yet, or cleaned up after it ran: never sent again.
            power::JobOutcome::Running | power::JobOutcome::Missing => JobState::Running,
        }
    };
    let booting_for = conditions::find(&status.conditions, INSTALL_BOOT)
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_update_time.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(|t| Duration::try_from(Timestamp::now().duration_since(t)).unwrap_or_default());
    let install_ready = stores
        .secret(
            &namespace,
            &install::install_secret_name(&inventory.name_any()),
        )
        .is_some_and(|s| install::value(&s, SCRIPT_KEY).is_some())
        // Tinkerbell mode: the Hardware answers the first PXE request, so it comes first
        // (Seeder's `triggerReboot` waits for `tinkHardwareCreated`).
        && (!ctx.settings.tinkerbell() || recorded(tinkerbell::TINK_HARDWARE_CREATED));
    let boot = job_state(INSTALL_BOOT, &boot_job);
    let installed = recorded(HARVESTER_INSTALLED);
    // Tinkerbell mode: the Workflow as watched (a change of it wakes this Inventory).
    let workflow = match stores.tink_listed()? {
        Some(tink) if owner == Owner::Booting && boot != JobState::None && !installed => tink
            .workflow(&namespace, &inventory.name_any())
            .map_or(Some(WorkflowState::Running), |w| {
                Some(tinkerbell::workflow_state(&w))
            }),
        _ => None,
    };
    Ok(Observation {
        state: phase::Observed {
            ready: status.status.as_deref() == Some(INVENTORY_NODE_READY),
            owner,
            power: match status.machine_power_state.as_deref() {
                Some("on") => Power::On,
                Some("off") => Power::Off,
                _ => Power::Unknown,
            },
            boot,
            installed,
            install_ready,
            shutdown: job_state(CLUSTER_CLEANUP_SUBMITTED, &shutdown_job),
            installs_in_flight: installs_in_flight(stores),
            install_budget: ctx.settings.max_concurrent_installs,
            booting_for,
            install_timeout: ctx.settings.install_timeout,
            workflow,
            media: BootMedia::parse(
                inventory
                    .annotations()
                    .get(BOOT_MEDIA_ANNOTATION)
                    .map(String::as_str),
            ),
            ejected: recorded(BOOT_MEDIA_EJECTED),
            claim_cd_to_eject: crate::onprem::cloud::cd_to_eject(inventory).is_some(),
        },
        boot_job,
        shutdown_job,
        eject_job,
    })
}

/// Whether the owner Cluster still wants this Inventory. "No longer" is confirmed with the
/// API server: a store behind the Cluster's last change must not release a server.
async fn owner(
    inventory: &Inventory,
    status: &InventoryStatus,
    ctx: &ProvisioningContext,
    stores: &Stores,
) -> Result<Owner, Error> {
    let o = &status.owner_cluster;
    if o.name.is_empty() {
        return Ok(Owner::None);
    }
    let wants = |cluster: &Cluster| -> Owner {
        let listed = cluster.spec.nodes.iter().any(|n| {
            n.inventory_reference.name == inventory.name_any()
                && crate::provisioning::cluster::reference_namespace(
                    &n.inventory_reference.namespace,
                    cluster,
                ) == inventory.namespace().unwrap_or_default()
        });
        if cluster.metadata.deletion_timestamp.is_some() || !listed {
            return Owner::Unwanted;
        }
        match ClusterPhase::parse(cluster.status.as_ref().and_then(|s| s.status.as_deref())) {
            Some(ClusterPhase::BootReady | ClusterPhase::Running) => Owner::Booting,
            _ => Owner::Waiting,
        }
    };
    let cached = stores.cluster(&o.namespace, &o.name).map(|c| wants(&c));
    if cached.is_some() && cached != Some(Owner::Unwanted) {
        return Ok(cached.unwrap_or(Owner::Waiting));
    }
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &o.namespace);
    Ok(match api.get_opt(&o.name).await? {
        Some(cluster) => wants(&cluster),
        None => Owner::Unwanted,
    })
}

/// Installs booted and not reported, as the store shows them.
fn installs_in_flight(stores: &Stores) -> usize {
    stores
        .inventories
        .state()
        .iter()
        .filter(|i| in_flight(i))
        .count()
}

/// Installs in flight: those the store shows booted and not reported, and those booted here
/// whose record the store does not show yet. A boot the store shows recorded is forgotten here
/// (it counts in the store while in flight, and not once reported).
fn installs_taken(inventories: &[Arc<Inventory>], gate: &mut super::InFlight) -> usize {
    let recorded: std::collections::BTreeSet<String> = inventories
        .iter()
        .filter(|i| {
            i.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, INSTALL_BOOT))
        })
        .map(|i| crate::runtime::object_key(i.as_ref()))
        .collect();
    gate.submitted.retain(|k| !recorded.contains(k));
    inventories.iter().filter(|i| in_flight(i)).count() + gate.submitted.len()
}

fn in_flight(inventory: &Inventory) -> bool {
    inventory.status.as_ref().is_some_and(|s| {
        conditions::is_true(&s.conditions, INSTALL_BOOT)
            && !conditions::is_true(&s.conditions, HARVESTER_INSTALLED)
            && !conditions::is_true(&s.conditions, INSTALL_TIMED_OUT)
            && !conditions::is_true(&s.conditions, VIRTUAL_MEDIA_UNSUPPORTED)
            && !conditions::is_true(&s.conditions, tinkerbell::TINK_WORKFLOW_FAILED)
            && !s.owner_cluster.name.is_empty()
    })
}

pub async fn execute(
    inventory: &Arc<Inventory>,
    ctx: &ProvisioningContext,
    stores: &Stores,
    observed: &Observation,
    outcome: Outcome,
) -> Result<Action, Error> {
    match outcome {
        Outcome::Wait(note, requeue) => {
            if let Some(note) = note {
                note_condition(inventory, ctx, &note).await?;
            }
            Ok(requeue.map_or_else(Action::await_change, Action::requeue))
        }
        Outcome::Boot => boot(inventory, ctx, stores, &observed.boot_job).await,
        Outcome::ShutDown => shut_down(inventory, ctx, &observed.shutdown_job).await,
        Outcome::Eject => eject(inventory, ctx, &observed.eject_job).await,
        Outcome::EjectClaimCd => {
            crate::onprem::cloud::eject_cd(&ctx.client, inventory).await?;
            Ok(Action::await_change())
        }
        Outcome::Free => free(inventory, ctx, stores, observed).await,
        Outcome::WorkflowSucceeded => workflow_succeeded(inventory, ctx, stores).await,
        Outcome::WorkflowFailed { task, action } => {
            workflow_failed(inventory, ctx, stores, &task, &action).await
        }
    }
}

/// The owner Cluster, from the store, for its Events.
fn owner_cluster(inventory: &Inventory, stores: &Stores) -> Option<Arc<Cluster>> {
    let owner = inventory.status.clone().unwrap_or_default().owner_cluster;
    stores.cluster(&owner.namespace, &owner.name)
}

/// The Workflow succeeded: the Hardware no longer network-boots nor runs workflows (so the
/// next reboot boots the disk), the Inventory counts as installed, and the Cluster gets
/// Seeder's Event.
async fn workflow_succeeded(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    stores: &Stores,
) -> Result<Action, Error> {
    let namespace = inventory.namespace().unwrap_or_default();
    let name = inventory.name_any();
    tinkerbell::disable_netboot(&ctx.client, &namespace, &name, true).await?;
    let now = now();
    let written = write_status(inventory, ctx, |s| {
        conditions::set_true(
            &mut s.conditions,
            HARVESTER_INSTALLED,
            Some("the Tinkerbell workflow succeeded: network boot is off, the server boots from its disk"),
            &now,
        );
    })
    .await?;
    if written {
        ctx.metrics.provisioning_installed();
        if let Some(cluster) = owner_cluster(inventory, stores) {
            ctx.cluster_events
                .publish(
                    cluster.as_ref(),
                    EventType::Normal,
                    tinkerbell::WORKFLOW_EVENT,
                    "Provision",
                    format!("workflow {name} completed successfully"),
                )
                .await;
        }
    }
    Ok(Action::await_change())
}

/// The Workflow failed: a condition naming the task and action, and Seeder's Warning Event on
/// the Cluster, once. The server is not booted again (its actions may have written the disk).
async fn workflow_failed(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    stores: &Stores,
    task: &str,
    action: &str,
) -> Result<Action, Error> {
    let name = inventory.name_any();
    let message = format!(
        "workflow {name} failed for task {task}, action {action}; nothing is run again on its own: fix the cause, then remove the node from spec.nodes and add it again to install it once more"
    );
    let now = now();
    let written = write_status(inventory, ctx, |s| {
        conditions::set_error(
            &mut s.conditions,
            tinkerbell::TINK_WORKFLOW_FAILED,
            &message,
            &now,
        );
    })
    .await?;
    if written && let Some(cluster) = owner_cluster(inventory, stores) {
        ctx.cluster_events
            .publish(
                cluster.as_ref(),
                EventType::Warning,
                tinkerbell::WORKFLOW_EVENT,
                "Provision",
                format!("workflow {name} failed for task {task}, action {action}"),
            )
            .await;
    }
    Ok(Action::await_change())
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn inventories(ctx: &ProvisioningContext, inventory: &Inventory) -> Api<Inventory> {
    Api::namespaced(
        ctx.client.clone(),
        &inventory.namespace().unwrap_or_default(),
    )
}

/// Replaces the status (with the resourceVersion read) when `change` changed it.
async fn write_status(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    change: impl FnOnce(&mut InventoryStatus),
) -> Result<bool, Error> {
    let before = inventory.status.clone().unwrap_or_default();
    let mut status = before.clone();
    change(&mut status);
    if status == before {
        return Ok(false);
    }
    let body = json!({
        "metadata": {"resourceVersion": inventory.resource_version()},
        "status": crate::runtime::status::replacing(&before, &status)?,
    });
    inventories(ctx, inventory)
        .patch_status(
            &inventory.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await?;
    Ok(true)
}

async fn note_condition(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    note: &Note,
) -> Result<(), Error> {
    let now = now();
    let written = write_status(inventory, ctx, |s| {
        if note.error {
            conditions::set_error(&mut s.conditions, note.condition, &note.message, &now);
        } else {
            conditions::set_true(&mut s.conditions, note.condition, Some(&note.message), &now);
        }
    })
    .await?;
    if written {
        let kind = if note.error {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.inventory_events
            .publish(
                inventory,
                kind,
                note.condition,
                "Provision",
                note.message.clone(),
            )
            .await;
    }
    Ok(())
}

/// A rufio Job of this Inventory's Machine, labelled and owned as Seeder makes them.
fn job(inventory: &Inventory, name: &str, tasks: serde_json::Value) -> Result<Job, Error> {
    let label = (JOB_INVENTORY_LABEL, inventory.name_any());
    power::inventory_job(inventory, name, label, tasks)
        .map_err(|e| Error::Kube(kube::Error::SerdeError(e)))
}

/// The install boot: power off, a one-time network boot (in the mode the server is in),
/// power on — taken only within the budget of concurrent installs.
async fn boot(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    stores: &Stores,
    name: &str,
) -> Result<Action, Error> {
    let key = crate::runtime::object_key(inventory);
    // The slot is taken under the gate, the Job created outside it: boots of many servers
    // are submitted at once, and none past the budget.
    {
        let mut gate = ctx.boot_gate.lock().await;
        if installs_taken(&stores.inventories.state(), &mut gate)
            >= ctx.settings.max_concurrent_installs
        {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        gate.submitted.insert(key.clone());
    }
    let tasks = match boot_media(inventory) {
        BootMedia::Pxe => json!([
            {"powerAction": "off"},
            {"oneTimeBootDeviceAction": {"device": ["pxe"]}},
            {"powerAction": "on"},
        ]),
        // The CD is inserted before the server is touched: a BMC without virtual media fails
        // the Job there, with the server as it was.
        BootMedia::Cd => json!([
            {"virtualMediaAction": {"kind": "CD", "mediaURL": media_url(inventory, ctx)?}},
            {"powerAction": "off"},
            {"oneTimeBootDeviceAction": {"device": ["cdrom"]}},
            {"powerAction": "on"},
        ]),
    };
    let created = match job(inventory, name, tasks) {
        // One of that name already there is this allocation's (a pass after a crash): it is
        // not sent again.
        Ok(job) => power::create_once(&ctx.client, &job)
            .await
            .map_err(Error::from),
        Err(e) => Err(e),
    };
    if let Err(e) = created {
        // Not booted: the slot is given back.
        ctx.boot_gate.lock().await.submitted.remove(&key);
        return Err(e);
    }
    crate::crash_point(
        ctx.settings.crash_point.as_deref(),
        "provisioning-after-boot-job",
    );
    let now = now();
    write_status(inventory, ctx, |s| {
        conditions::set_true(&mut s.conditions, INSTALL_BOOT, Some(name), &now);
        conditions::set_false(&mut s.conditions, WAITING_FOR_INSTALL_SLOT, &now);
        conditions::set_true(
            &mut s.conditions,
            BMC_JOB_SUBMITTED,
            Some("BMCJob Submitted"),
            &now,
        );
        s.power_action.last_job_name = Some(name.to_owned());
        s.power_action.action_status = None;
    })
    .await?;
    ctx.metrics.provisioning_boot();
    ctx.inventory_events
        .publish(
            inventory,
            EventType::Normal,
            "InstallBoot",
            "Provision",
            match boot_media(inventory) {
                BootMedia::Pxe => {
                    format!("bmc job {name}: power off, one-time network boot, power on")
                }
                BootMedia::Cd => format!(
                    "bmc job {name}: insert the boot CD, power off, one-time CD boot, power on"
                ),
            },
        )
        .await;
    Ok(Action::await_change())
}

/// The Inventory's boot media (an unknown value never reaches a boot: see `phase::to_boot`).
fn boot_media(inventory: &Inventory) -> BootMedia {
    BootMedia::parse(
        inventory
            .annotations()
            .get(BOOT_MEDIA_ANNOTATION)
            .map(String::as_str),
    )
    .unwrap_or(BootMedia::Pxe)
}

/// Where the BMC fetches this node's boot CD: the boot server's `/media/<namespace>/<name>.iso`.
fn media_url(inventory: &Inventory, ctx: &ProvisioningContext) -> Result<String, Error> {
    crate::provisioning::media::media_url(
        ctx.settings.boot_url.as_ref(),
        &inventory.namespace().unwrap_or_default(),
        &inventory.name_any(),
    )
    .ok_or_else(|| {
        Error::Address(
            "a boot CD needs --boot-url (and --boot-media-dir): where the BMC fetches it".into(),
        )
    })?
    .map_err(Error::Settings)
}

/// Installed from the boot CD: the eject (once, a Job named after the allocation), recorded.
async fn eject(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    name: &str,
) -> Result<Action, Error> {
    power::create_once(
        &ctx.client,
        &job(
            inventory,
            name,
            json!([{"virtualMediaAction": {"kind": "CD", "mediaURL": ""}}]),
        )?,
    )
    .await?;
    let now = now();
    write_status(inventory, ctx, |s| {
        conditions::set_true(&mut s.conditions, BOOT_MEDIA_EJECTED, Some(name), &now);
    })
    .await?;
    Ok(Action::await_change())
}

async fn shut_down(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    name: &str,
) -> Result<Action, Error> {
    power::create_once(
        &ctx.client,
        &job(inventory, name, json!([{"powerAction": "off"}]))?,
    )
    .await?;
    let cluster = inventory
        .status
        .clone()
        .unwrap_or_default()
        .owner_cluster
        .name;
    let now = now();
    write_status(inventory, ctx, |s| {
        conditions::set_true(
            &mut s.conditions,
            CLUSTER_CLEANUP_SUBMITTED,
            Some(&cluster),
            &now,
        );
    })
    .await?;
    ctx.inventory_events
        .publish(
            inventory,
            EventType::Normal,
            "Releasing",
            "Provision",
            format!("no longer in cluster {cluster}: shutting down (bmc job {name})"),
        )
        .await;
    Ok(Action::await_change())
}

/// Power is confirmed off: the allocation's Jobs and install Secret go, the address is freed,
/// and the status no longer names the Cluster (Seeder's clearing, `inventoryFreed`).
async fn free(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    stores: &Stores,
    observed: &Observation,
) -> Result<Action, Error> {
    let namespace = inventory.namespace().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    for name in [
        &observed.boot_job,
        &observed.shutdown_job,
        &observed.eject_job,
    ] {
        ignore_missing(jobs.delete(name, &DeleteParams::background()).await)?;
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    ignore_missing(
        secrets
            .delete(
                &install::install_secret_name(&inventory.name_any()),
                &DeleteParams::default(),
            )
            .await,
    )?;
    if ctx.settings.tinkerbell() {
        tinkerbell::delete_all(&ctx.client, &namespace, &inventory.name_any()).await?;
    }
    allocation::release_node(inventory, ctx, stores).await?;
    let cluster = inventory
        .status
        .clone()
        .unwrap_or_default()
        .owner_cluster
        .name;
    let now = now();
    write_status(inventory, ctx, |s| {
        s.pxe_boot_config = PxeBootConfig::default();
        s.owner_cluster = SeederRef::default();
        s.generated_password = None;
        s.power_action.last_job_name = None;
        for condition in [
            INVENTORY_ALLOCATED_TO_CLUSTER,
            HARVESTER_CREATE_NODE,
            HARVESTER_JOIN_NODE,
            CLUSTER_CLEANUP_SUBMITTED,
            INSTALL_BOOT,
            HARVESTER_INSTALLED,
            INSTALL_TIMED_OUT,
            BOOT_MEDIA_EJECTED,
            BOOT_MEDIA_INVALID,
            VIRTUAL_MEDIA_UNSUPPORTED,
            WAITING_FOR_INSTALL_SLOT,
            BMC_JOB_SUBMITTED,
            tinkerbell::TINK_HARDWARE_CREATED,
            tinkerbell::TINK_TEMPLATE_CREATED,
            tinkerbell::TINK_WORKFLOW_CREATED,
            tinkerbell::TINK_WORKFLOW_FAILED,
        ] {
            conditions::set_false(&mut s.conditions, condition, &now);
        }
        conditions::set_true(&mut s.conditions, INVENTORY_FREED, None, &now);
    })
    .await?;
    ctx.inventory_events
        .publish(
            inventory,
            EventType::Normal,
            "Freed",
            "Provision",
            format!("powered off and released from cluster {cluster}"),
        )
        .await;
    Ok(Action::await_change())
}

fn ignore_missing<T>(result: Result<T, kube::Error>) -> Result<(), Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn inventory(name: &str, conditions: &[(&str, &str)]) -> Arc<Inventory> {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s)| json!({"type": t, "status": s}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"baseboardSpec": {"connection": {"host": "h", "port": 623, "insecureTLS": true,
                    "authSecretRef": {"name": "s", "namespace": "ns"}}}},
                "status": {"ownerCluster": {"name": "c", "namespace": "ns"}, "conditions": conditions}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_reported_install_frees_its_slot_even_if_booted_here() {
        let mut gate = super::super::InFlight::default();
        gate.submitted.insert("ns/a".into());
        gate.submitted.insert("ns/b".into());
        // a: recorded and reported; b: not recorded yet.
        let store = vec![
            inventory(
                "a",
                &[(INSTALL_BOOT, "True"), (HARVESTER_INSTALLED, "True")],
            ),
            inventory("b", &[]),
        ];
        assert_eq!(installs_taken(&store, &mut gate), 1);
        assert_eq!(gate.submitted.len(), 1, "a is forgotten, b still counts");
        // b recorded, in flight: it counts once, from the store.
        let store = vec![inventory("b", &[(INSTALL_BOOT, "True")])];
        assert_eq!(installs_taken(&store, &mut gate), 1);
        assert!(gate.submitted.is_empty());
    }
}
