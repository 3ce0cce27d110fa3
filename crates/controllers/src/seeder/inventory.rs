//! The Inventory reconciler of embedded mode (Seeder's `LocalClusterReconciler` and the
//! embedded half of its `InventoryReconciler`, in one place so that nothing races).
//!
//! For an Inventory annotated as local (`metal.harvesterhci.io/local-inventory: "true"`, or the
//! HEP's `metal.harvesterhci.io/localInventory`), in order:
//!
//! 1. finalizers: [`MEMBERSHIP_FINALIZER`] for its entry in the local Cluster, Seeder's
//!    `finalizer.inventory.metal.harvesterhci.io` for its Machine;
//! 2. its entry in the local Cluster's `spec.nodes`;
//! 3. its rufio Machine (same name, `spec = baseboardSpec`, Seeder's finalizer, an owner
//!    reference to the Inventory);
//! 4. one status write: `bmcObjectCreated`, readiness from the Machine's `Contactable` (read on
//!    every pass, so a BMC that stops answering shows as `machineNotContactable`), the Machine's
//!    power state, the Node's InternalIP, and the power-action handshake ([`super::power`]).
//!
//! On deletion the entry leaves the Cluster before the membership finalizer goes, and the
//! Machine's finalizer goes before Seeder's finalizer leaves the Inventory. Every write carries
//! the resourceVersion it was decided on.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use ingot_api::rufio::{Job, Machine, MachineStatus};
use ingot_api::seeder::{
    Cluster, ClusterSpec, INVENTORY_FINALIZER, INVENTORY_NODE_READY, Inventory, InventoryStatus,
    JOB_INVENTORY_LABEL, LOCAL_CLUSTER_NAME, LOCAL_CLUSTER_NAMESPACE, LOCAL_INVENTORY_ANNOTATION,
    LOCAL_NODE_NAME_ANNOTATION,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use super::conditions::{
    self, BMC_OBJECT_CREATED, INVENTORY_ALLOCATED_TO_CLUSTER, MACHINE_NOT_CONTACTABLE,
};
use super::power::{self, JobOutcome, PowerStep};
use super::{Error, MEMBERSHIP_FINALIZER, SeederContext, bmc_owner, cluster, node_api};
use crate::rufio::machine::CONTACTABLE;
use crate::rufio::tenancy;
use crate::runtime::{self, Backoff, ControllerRuntime, finalizer};

const CONTROLLER: &str = "seeder-inventory";
/// The HEP's spellings of the two annotations (Seeder renamed them before release; the HEP and
/// manifests written from it still use these).
pub const LOCAL_INVENTORY_ANNOTATION_HEP: &str = "metal.harvesterhci.io/localInventory";
pub const LOCAL_NODE_NAME_ANNOTATION_HEP: &str = "metal.harvesterhci.io/localNodeName";
/// A pass with nothing to wait for still comes back this often (everything read is watched).
const RESYNC: Duration = Duration::from_secs(600);
/// The condition of a deleted Inventory that waits for its Cluster to release it.
pub const WAITING_FOR_RELEASE: &str = "waitingForRelease";
/// A held Inventory ([`hold`]) looks again this often for the other one's deletion or change.
const HELD_RECHECK: Duration = Duration::from_secs(5);
/// A failed pass (a write that lost a race, an API error) is retried after 5 s, doubling to
/// 1 min while it goes on failing.
const RETRY_BASE: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(60);

pub async fn run(
    ctx: Arc<SeederContext>,
    inventories: Store<Inventory>,
    changes: ReflectHandle<Inventory>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let by_node = inventories.clone();
    let all = inventories.clone();
    let every_inventory = inventories.clone();
    let clusters: Api<Cluster> = Api::namespaced(ctx.client.clone(), LOCAL_CLUSTER_NAMESPACE);
    // Each watch fills the store the passes read (`super::caches`) before it wakes them.
    let (machines, machine_changes) =
        crate::lean_reflector(ctx.watched::<Machine>(), watcher::Config::default());
    let (jobs, job_changes) = crate::lean_reflector(
        ctx.watched::<Job>(),
        watcher::Config::default().labels(JOB_INVENTORY_LABEL),
    );
    // Nodes are embedded mode's (a local Inventory names its Node); provisioning alone
    // watches none.
    let (nodes, node_changes) = if ctx.settings.embedded {
        let (store, changes) = crate::lean_reflector(
            Api::<Node>::all(ctx.client.clone()),
            watcher::Config::default(),
        );
        (store, changes.boxed())
    } else {
        let (store, _writer) = kube::runtime::reflector::store();
        (store, futures::stream::pending().boxed())
    };
    let _ = ctx.caches.set(super::caches::Caches {
        machines,
        jobs,
        nodes,
        inventories: every_inventory,
    });
    let controller = Controller::for_shared_stream(changes, inventories)
        // A Machine and its Inventory share namespace and name.
        .watches_stream(machine_changes.touched_objects(), |m| Some(same_name(&m)))
        .watches_stream(job_changes.touched_objects(), |job| {
            let inventory = job.labels().get(JOB_INVENTORY_LABEL)?.clone();
            Some(ObjectRef::new(&inventory).within(&job.namespace()?))
        })
        .watches_stream(node_changes.touched_objects(), move |node| {
            naming_node(&by_node, &node.name_any())
        })
        // Only the local Inventories the Cluster does not list (all of them once it is
        // deleted): waking every Inventory on each join would make N joins N² passes.
        .watches_stream(
            watcher(
                clusters,
                watcher::Config::default().fields(&format!("metadata.name={LOCAL_CLUSTER_NAME}")),
            )
            .default_backoff()
            .map_ok(|event| match event {
                watcher::Event::Delete(mut gone) => {
                    gone.spec.nodes.clear();
                    watcher::Event::Delete(gone)
                }
                other => other,
            })
            .touched_objects(),
            move |cluster| missing_from(&all, &cluster),
        )
        .with_config(Config::default().concurrency(64));
    let backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

fn same_name<K: Resource<DynamicType = ()>>(object: &K) -> ObjectRef<Inventory> {
    let r = ObjectRef::new(&object.meta().name.clone().unwrap_or_default());
    match &object.meta().namespace {
        Some(ns) => r.within(ns),
        None => r,
    }
}

fn naming_node(store: &Store<Inventory>, node: &str) -> Vec<ObjectRef<Inventory>> {
    store
        .state()
        .iter()
        .filter(|i| node_name(i) == Some(node))
        .map(|i| ObjectRef::from(i.as_ref()))
        .collect()
}

fn missing_from(store: &Store<Inventory>, cluster: &Cluster) -> Vec<ObjectRef<Inventory>> {
    let going = cluster.metadata.deletion_timestamp.is_some();
    let members: std::collections::HashSet<(&str, &str)> = cluster
        .spec
        .nodes
        .iter()
        .filter(|_| !going)
        .map(|n| {
            let r = &n.inventory_reference;
            (r.namespace.as_str(), r.name.as_str())
        })
        .collect();
    store
        .state()
        .iter()
        .filter(|i| is_local(i))
        .filter(|i| {
            let namespace = i.metadata.namespace.as_deref().unwrap_or_default();
            !members.contains(&(namespace, i.metadata.name.as_deref().unwrap_or_default()))
        })
        .map(|i| ObjectRef::from(i.as_ref()))
        .collect()
}

/// Whether the Inventory is a local one (either spelling of the annotation, `"true"`).
pub fn is_local(inventory: &Inventory) -> bool {
    let a = inventory.annotations();
    [LOCAL_INVENTORY_ANNOTATION, LOCAL_INVENTORY_ANNOTATION_HEP]
        .iter()
        .any(|k| a.get(*k).is_some_and(|v| v == "true"))
}

/// The Node the Inventory maps to (either spelling; Seeder's wins when both are set).
pub fn node_name(inventory: &Inventory) -> Option<&str> {
    let a = inventory.annotations();
    [LOCAL_NODE_NAME_ANNOTATION, LOCAL_NODE_NAME_ANNOTATION_HEP]
        .iter()
        .find_map(|k| a.get(*k).filter(|v| !v.is_empty()))
        .map(String::as_str)
}

async fn reconcile(inventory: Arc<Inventory>, ctx: Arc<SeederContext>) -> Result<Action, Error> {
    let mine = if is_local(&inventory) {
        ctx.settings.embedded
    } else {
        ctx.settings.provisioning
    };
    if !mine {
        // Provisioning-mode Inventories are not embedded mode's to touch, nor the other way.
        return Ok(Action::await_change());
    }
    if inventory.metadata.deletion_timestamp.is_some() {
        finalize(&inventory, &ctx).await
    } else {
        apply(&inventory, &ctx).await
    }
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn inventories(ctx: &SeederContext, inventory: &Inventory) -> Api<Inventory> {
    Api::namespaced(
        ctx.client.clone(),
        &inventory.namespace().unwrap_or_default(),
    )
}

async fn apply(inventory: &Inventory, ctx: &SeederContext) -> Result<Action, Error> {
    let api = inventories(ctx, inventory);
    // A provisioned server (not local) has Seeder's common chain only: its Machine, readiness
    // and power actions; `provisioning::node` installs and releases it.
    let local = is_local(inventory);
    let finalizers: &[&str] = if local {
        &[MEMBERSHIP_FINALIZER, INVENTORY_FINALIZER]
    } else {
        &[INVENTORY_FINALIZER]
    };
    let inventory = finalizer::add(&api, inventory, finalizers)
        .await?
        .unwrap_or_else(|| inventory.clone());
    let node = if local {
        join_local_cluster(&inventory, ctx).await?;
        read_node(&inventory, ctx).await?
    } else {
        None
    };
    if let Some(message) = held_for_its_bmc(&inventory, ctx).await {
        return hold(&inventory, &message, ctx).await;
    }
    let machine = ensure_machine(&inventory, ctx).await?;
    update_status(&inventory, machine.as_ref(), node.as_ref(), ctx).await?;
    Ok(Action::requeue(RESYNC))
}

/// Why the Inventory may not have a Machine: another Inventory, created before it, names the
/// same BMC ([`bmc_owner`]).
async fn held_for_its_bmc(inventory: &Inventory, ctx: &SeederContext) -> Option<String> {
    let store = &ctx.caches.get()?.inventories;
    // Decided on the whole list: before it is read, an older Inventory could be missing.
    store.wait_until_ready().await.ok()?;
    let all = store.state();
    bmc_owner::owner_of_bmc(inventory, all.iter().map(AsRef::as_ref))
        .map(|owner| bmc_owner::held_message(inventory, owner))
}

/// A held Inventory: no Machine is made for it (one it already had, from before another
/// Inventory was changed to name its BMC, is left as it is), not ready, the error condition,
/// and a Warning Event when the condition says something new. Looked at again every
/// [`HELD_RECHECK`]: the other Inventory's deletion or change wakes nobody else.
async fn hold(inventory: &Inventory, message: &str, ctx: &SeederContext) -> Result<Action, Error> {
    let now = now();
    let mut status = inventory.status.clone().unwrap_or_default();
    let said = conditions::find(&status.conditions, bmc_owner::BMC_IN_USE)
        .is_some_and(|c| c.status == "True" && c.message.as_deref() == Some(message));
    conditions::set_error(&mut status.conditions, bmc_owner::BMC_IN_USE, message, &now);
    conditions::set_false(&mut status.conditions, BMC_OBJECT_CREATED, &now);
    status.status = None;
    let inventory = write_status(inventory, status, ctx).await?;
    if !said {
        ctx.inventory_events
            .publish(
                &inventory,
                EventType::Warning,
                "BMCInUse",
                "BMCInUse",
                message.to_owned(),
            )
            .await;
    }
    Ok(Action::requeue(HELD_RECHECK))
}

/// Step 2: the Inventory's entry in the local Cluster (re-created with its status if missing).
/// Joins waiting at the same time are written together (see `SeederContext::pending_joins`).
async fn join_local_cluster(inventory: &Inventory, ctx: &SeederContext) -> Result<(), Error> {
    let address = ctx
        .cluster_address()
        .ok_or_else(|| Error::Other("the local Cluster is not prepared yet".to_owned()))?
        .to_owned();
    let me = (
        inventory.namespace().unwrap_or_default(),
        inventory.name_any(),
    );
    lock(&ctx.pending_joins).insert(me.clone());
    let written = {
        let _one_writer = ctx.cluster_writes.lock().await;
        let batch: Vec<(String, String)> = {
            let mut pending = lock(&ctx.pending_joins);
            if !pending.contains(&me) {
                // Written by the batch of another reconcile meanwhile.
                return Ok(());
            }
            std::mem::take(&mut *pending).into_iter().collect()
        };
        let change = |spec: &mut ClusterSpec| {
            let mut added = Vec::new();
            for (namespace, name) in &batch {
                if cluster::add_member(spec, namespace, name) {
                    added.push((namespace.clone(), name.clone()));
                }
            }
            added
        };
        match write_membership(ctx, change, Some(&address)).await {
            Ok(written) => written,
            Err(error) => {
                // The others of the batch try again themselves.
                lock(&ctx.pending_joins).extend(batch);
                return Err(error);
            }
        }
    };
    if let Some((local, added)) = written {
        for (namespace, name) in added {
            ctx.inventory_events
                .publish(
                    &local,
                    EventType::Normal,
                    "ClusterUpdated",
                    "ClusterUpdated",
                    format!("inventory {name} in namespace {namespace} added to local cluster"),
                )
                .await;
        }
    }
    Ok(())
}

/// Removes the Inventory from the local Cluster (nothing to do without a Cluster).
async fn leave_local_cluster(inventory: &Inventory, ctx: &SeederContext) -> Result<(), Error> {
    let (namespace, name) = (
        inventory.namespace().unwrap_or_default(),
        inventory.name_any(),
    );
    // A join a cancelled reconcile left waiting must not be written after this.
    lock(&ctx.pending_joins).remove(&(namespace.clone(), name.clone()));
    let written = {
        let _one_writer = ctx.cluster_writes.lock().await;
        let change = |spec: &mut ClusterSpec| {
            if cluster::remove_member(spec, &namespace, &name) {
                vec![(namespace.clone(), name.clone())]
            } else {
                Vec::new()
            }
        };
        write_membership(ctx, change, None).await?
    };
    if let Some((local, _)) = written {
        ctx.inventory_events
            .publish(
                &local,
                EventType::Normal,
                "ClusterUpdated",
                "ClusterUpdated",
                format!("inventory {name} in namespace {namespace} removed from local cluster"),
            )
            .await;
    }
    Ok(())
}

/// Reads the local Cluster, applies `change` to its member list and writes it back (the caller
/// holds `cluster_writes`); a conflict with another writer (a person, another tool) is read and
/// tried again at once, a few times. `address`: create the Cluster if it is missing. Returns
/// the Cluster written and the members `change` reported, or `None` when nothing changed.
async fn write_membership(
    ctx: &SeederContext,
    change: impl Fn(&mut ClusterSpec) -> Vec<(String, String)>,
    address: Option<&str>,
) -> Result<Option<(Cluster, Vec<(String, String)>)>, Error> {
    const ATTEMPTS: usize = 5;
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), LOCAL_CLUSTER_NAMESPACE);
    for attempt in 1..=ATTEMPTS {
        let mut local = match address {
            Some(address) => cluster::ensure_local_cluster(&ctx.client, address).await?,
            None => match api.get_opt(LOCAL_CLUSTER_NAME).await? {
                Some(local) => local,
                None => return Ok(None),
            },
        };
        let changed = change(&mut local.spec);
        if changed.is_empty() {
            return Ok(None);
        }
        // A full replace: it carries the resourceVersion read, so a concurrent change conflicts.
        match api
            .replace(LOCAL_CLUSTER_NAME, &PostParams::default(), &local)
            .await
        {
            Ok(written) => return Ok(Some((written, changed))),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < ATTEMPTS => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(None)
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The Machine Seeder makes for an Inventory: same name, `spec = baseboardSpec`, Seeder's
/// finalizer, and the Inventory as controlling owner (as Seeder's local-cluster controller).
pub fn desired_machine(inventory: &Inventory) -> Machine {
    let mut machine = Machine::new(&inventory.name_any(), inventory.spec.baseboard_spec.clone());
    machine.metadata = ObjectMeta {
        name: Some(inventory.name_any()),
        namespace: inventory.namespace(),
        finalizers: Some(vec![INVENTORY_FINALIZER.to_owned()]),
        owner_references: Some(vec![controller_reference(inventory)]),
        annotations: Some(tenancy::carried(inventory.annotations())).filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    };
    machine
}

fn controller_reference(inventory: &Inventory) -> OwnerReference {
    OwnerReference {
        controller: Some(true),
        block_owner_deletion: Some(true),
        ..power::owner_reference(inventory)
    }
}

/// What an existing Machine lacks: the spec, Seeder's finalizer, an owner reference to this
/// Inventory. `None` when nothing is missing. Machines the Go Seeder made are adopted as they
/// are (its owner reference may or may not be a controller reference).
pub fn machine_patch(inventory: &Inventory, machine: &Machine) -> Option<serde_json::Value> {
    let mut patch = serde_json::Map::new();
    if machine.spec != inventory.spec.baseboard_spec {
        patch.insert("spec".into(), json!(inventory.spec.baseboard_spec));
    }
    let mut metadata = serde_json::Map::new();
    // The Inventory's acceptance of a `http://` BMC and its pinned certificate, which its
    // Machine carries too (removed from the Machine with the Inventory's).
    let wanted = tenancy::carried(inventory.annotations());
    let changed: serde_json::Map<String, serde_json::Value> = tenancy::CARRIED_ANNOTATIONS
        .iter()
        .filter(|k| machine.annotations().get(**k) != wanted.get(**k))
        .map(|k| ((*k).to_owned(), json!(wanted.get(*k))))
        .collect();
    if !changed.is_empty() {
        metadata.insert("annotations".into(), serde_json::Value::Object(changed));
    }
    if let Some(finalizers) = finalizer::with(machine.finalizers(), &[INVENTORY_FINALIZER]) {
        metadata.insert("finalizers".into(), json!(finalizers));
    }
    let uid = inventory.uid().unwrap_or_default();
    if !machine.owner_references().iter().any(|o| o.uid == uid) {
        let mut owners = machine.owner_references().to_vec();
        let has_controller = owners.iter().any(|o| o.controller == Some(true));
        owners.push(if has_controller {
            power::owner_reference(inventory)
        } else {
            controller_reference(inventory)
        });
        metadata.insert("ownerReferences".into(), json!(owners));
    }
    if patch.is_empty() && metadata.is_empty() {
        return None;
    }
    metadata.insert("resourceVersion".into(), json!(machine.resource_version()));
    patch.insert("metadata".into(), serde_json::Value::Object(metadata));
    Some(serde_json::Value::Object(patch))
}

/// Step 3: the Machine, created or brought in line. A Machine someone is deleting loses
/// Seeder's finalizer (so it can go) and is made again on the next pass. Returns the Machine
/// as it stands, `None` while one is being replaced.
async fn ensure_machine(
    inventory: &Inventory,
    ctx: &SeederContext,
) -> Result<Option<Machine>, Error> {
    let namespace = inventory.namespace().unwrap_or_default();
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(machine) = ctx.machine(&namespace, &inventory.name_any()).await? else {
        let created = api
            .create(&PostParams::default(), &desired_machine(inventory))
            .await?;
        info!(inventory = %inventory.name_any(), %namespace, "created the rufio Machine");
        return Ok(Some(created));
    };
    if machine.metadata.deletion_timestamp.is_some() {
        finalizer::remove(&api, &machine, INVENTORY_FINALIZER).await?;
        return Ok(None);
    }
    let Some(patch) = machine_patch(inventory, &machine) else {
        return Ok(Some(machine));
    };
    let name = machine.name_any();
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(patched) => Ok(Some(patched)),
        // The cached copy was behind (this pass's own last change to it not cached yet): the
        // Machine as it is decides.
        Err(error) if crate::runtime::is_conflict(&error) => {
            let Some(current) = api.get_opt(&name).await? else {
                return Ok(None);
            };
            match machine_patch(inventory, &current) {
                Some(patch) if current.metadata.deletion_timestamp.is_none() => Ok(Some(
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await?,
                )),
                _ => Ok(Some(current)),
            }
        }
        Err(error) => Err(error.into()),
    }
}

/// The Node the Inventory names, `None` (with a Warning Event) when it names none or a missing
/// one: the rest of the Inventory is still kept.
async fn read_node(inventory: &Inventory, ctx: &SeederContext) -> Result<Option<Node>, Error> {
    let Some(name) = node_name(inventory) else {
        ctx.inventory_events.publish(inventory, EventType::Warning, "MissingNodeName", "MissingNodeName", format!(
                "annotation {LOCAL_NODE_NAME_ANNOTATION} (or {LOCAL_NODE_NAME_ANNOTATION_HEP}) must name the Node of this Inventory"
            ))
        .await;
        return Ok(None);
    };
    let node = ctx.node(name).await?;
    if node.is_none() {
        ctx.inventory_events
            .publish(
                inventory,
                EventType::Warning,
                "NodeNotFound",
                "NodeNotFound",
                format!(
                    "node {name} named by annotation {LOCAL_NODE_NAME_ANNOTATION} does not exist"
                ),
            )
            .await;
    }
    Ok(node)
}

/// The Node's InternalIP (the last one, as Seeder takes it).
pub fn internal_ip(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .next_back()
}

/// Readiness and power state from the Machine: `Contactable=True` is `inventoryNodeReady`
/// (and, for a local Inventory, `inventoryAllocatedToCluster`, as embedded Seeder marks it;
/// a provisioned one is allocated by its Cluster); `Contactable=False` clears it and sets
/// `machineNotContactable` as an error with the Machine's message. A Machine not read yet
/// changes nothing.
pub fn apply_machine(
    status: &mut InventoryStatus,
    machine: Option<&MachineStatus>,
    local: bool,
    now: &str,
) {
    let Some(machine) = machine else {
        return;
    };
    if let Some(power) = &machine.power_state {
        status.machine_power_state = Some(power.clone());
    }
    let Some(contactable) = machine.conditions.iter().find(|c| c.type_ == CONTACTABLE) else {
        return;
    };
    if contactable.status == "True" {
        status.status = Some(INVENTORY_NODE_READY.to_owned());
        conditions::set_false(&mut status.conditions, MACHINE_NOT_CONTACTABLE, now);
        if local {
            conditions::set_true(
                &mut status.conditions,
                INVENTORY_ALLOCATED_TO_CLUSTER,
                None,
                now,
            );
        }
    } else {
        status.status = None;
        let message = contactable
            .message
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "the BMC does not answer".to_owned());
        conditions::set_error(
            &mut status.conditions,
            MACHINE_NOT_CONTACTABLE,
            &message,
            now,
        );
    }
}

/// Step 4: everything the status says, written once (with the resourceVersion read), then the
/// power-action handshake, which may create a Job between two writes.
async fn update_status(
    inventory: &Inventory,
    machine: Option<&Machine>,
    node: Option<&Node>,
    ctx: &SeederContext,
) -> Result<(), Error> {
    let now = now();
    let mut status = observed_status(inventory, machine, node, &now);
    let step = power_step(inventory, &status, node);
    let (events, job_name) = take_power_step(&step, inventory, &mut status, ctx, &now).await?;
    let inventory = write_status(inventory, status, ctx).await?;
    for (type_, reason, note) in events {
        ctx.inventory_events
            .publish(&inventory, type_, reason, reason, note)
            .await;
    }
    match (step, job_name) {
        (PowerStep::Submit(action), Some(name)) | (PowerStep::Recover(action, name), _) => {
            submit_job(&inventory, action, &name, ctx).await
        }
        _ => Ok(()),
    }
}

/// The status with what the Machine and the Node show: `bmcObjectCreated`, the hardware ID,
/// readiness and power state, the Node's address.
fn observed_status(
    inventory: &Inventory,
    machine: Option<&Machine>,
    node: Option<&Node>,
    now: &str,
) -> InventoryStatus {
    let mut status = inventory.status.clone().unwrap_or_default();
    // No longer held for its BMC (see `hold`).
    conditions::set_false(&mut status.conditions, bmc_owner::BMC_IN_USE, now);
    match machine {
        Some(machine) => {
            conditions::set_true(&mut status.conditions, BMC_OBJECT_CREATED, None, now);
            if status.hardware_id.is_none() {
                status.hardware_id = Some(uuid::Uuid::new_v4().to_string());
            }
            apply_machine(
                &mut status,
                machine.status.as_ref(),
                is_local(inventory),
                now,
            );
        }
        None => {
            // The Machine is being replaced: not ready until the new one answers.
            status.status = None;
            conditions::set_false(&mut status.conditions, BMC_OBJECT_CREATED, now);
        }
    }
    if let Some(address) = node.and_then(internal_ip) {
        status.pxe_boot_config.address = Some(address);
    }
    status
}

/// The power-action handshake's next step. A request is taken only while its Node (when it
/// has one) is in maintenance, checked now rather than when it was made: it may have waited
/// hours for its BMC to answer.
fn power_step(inventory: &Inventory, status: &InventoryStatus, node: Option<&Node>) -> PowerStep {
    let ready = status.status.as_deref() == Some(INVENTORY_NODE_READY);
    match power::next_step(
        inventory.spec.power_action_requested.as_deref(),
        status,
        ready,
    ) {
        PowerStep::Submit(action) => match node.filter(|n| !node_api::in_maintenance(n)) {
            Some(node) => PowerStep::Refuse(
                action,
                power::outside_maintenance_message(&node.name_any(), action),
            ),
            None => PowerStep::Submit(action),
        },
        other => other,
    }
}

/// An Event to record once the status is written.
type PendingEvent = (EventType, &'static str, String);

/// The step's mark on the status, the Events it makes, and the name of a Job to submit.
async fn take_power_step(
    step: &PowerStep,
    inventory: &Inventory,
    status: &mut InventoryStatus,
    ctx: &SeederContext,
    now: &str,
) -> Result<(Vec<PendingEvent>, Option<String>), Error> {
    let mut events = Vec::new();
    let mut job_name = None;
    match step {
        PowerStep::Idle | PowerStep::WaitReady | PowerStep::Recover(..) => {}
        PowerStep::Refuse(action, message) => {
            let name = power::new_job_name(inventory, *action);
            power::mark_refused(status, &name, message, now);
            events.push((EventType::Warning, "PowerActionRefused", message.clone()));
        }
        PowerStep::Unrecorded(action) => {
            let message = power::unrecorded_message(inventory);
            let name = power::new_job_name(inventory, *action);
            power::mark_refused(status, &name, &message, now);
            events.push((EventType::Warning, "PowerActionFailed", message));
        }
        PowerStep::Unknown(unknown) => {
            let before = status.clone();
            power::mark_unknown(status, unknown, now);
            if *status != before {
                let note = unknown.to_string();
                events.push((EventType::Warning, "UnknownPowerAction", note));
            }
        }
        PowerStep::Submit(action) => {
            let name = power::new_job_name(inventory, *action);
            power::mark_submitted(status, &name, now);
            job_name = Some(name);
        }
        PowerStep::Track(job) => {
            let outcome = power::job_outcome(read_job(inventory, job, ctx).await?.as_ref());
            if power::apply_outcome(status, job, &outcome, now) {
                events.push(outcome_event(job, &outcome));
            }
        }
    }
    Ok((events, job_name))
}

fn outcome_event(job: &str, outcome: &JobOutcome) -> (EventType, &'static str, String) {
    match outcome {
        JobOutcome::Completed => (
            EventType::Normal,
            "PowerActionCompleted",
            format!("bmc job {job} completed"),
        ),
        JobOutcome::Failed(message) => (
            EventType::Warning,
            "PowerActionFailed",
            format!("bmc job {job} failed: {message}"),
        ),
        JobOutcome::Missing | JobOutcome::Running => (
            EventType::Warning,
            "PowerActionFailed",
            format!("bmc job {job} was deleted before it ended"),
        ),
    }
}

async fn read_job(
    inventory: &Inventory,
    job: &str,
    ctx: &SeederContext,
) -> Result<Option<Job>, Error> {
    let namespace = inventory.namespace().unwrap_or_default();
    Ok(ctx.job(&namespace, job).await?)
}

/// Replaces the status if it changed, carrying the resourceVersion read; returns the Inventory
/// as written (or as it was).
async fn write_status(
    inventory: &Inventory,
    status: InventoryStatus,
    ctx: &SeederContext,
) -> Result<Inventory, Error> {
    if inventory.status.as_ref() == Some(&status)
        || (inventory.status.is_none() && status == InventoryStatus::default())
    {
        return Ok(inventory.clone());
    }
    let mut updated = inventory.clone();
    updated.status = Some(status);
    let written = inventories(ctx, inventory)
        .replace_status(&inventory.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(written)
}

/// Creates the Job of a taken request under the name recorded when it was taken (an existing
/// Job of that name is the one an earlier try created), then records its name.
async fn submit_job(
    inventory: &Inventory,
    action: power::PowerAction,
    name: &str,
    ctx: &SeederContext,
) -> Result<(), Error> {
    let namespace = inventory.namespace().unwrap_or_default();
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut status = inventory.status.clone().unwrap_or_default();
    let job = power::generate_job(inventory, action, name);
    match api.create(&PostParams::default(), &job).await {
        Ok(_) => {
            info!(inventory = %inventory.name_any(), %namespace, job = %name, %action, "created the power action job");
            ctx.rufio.crash_point("seeder-after-job-create");
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api.get_opt(name).await?;
            if !existing.is_some_and(|j| power::is_inventory_job(&j, inventory)) {
                let message = format!(
                    "job {namespace}/{name} exists but was not created for this inventory: request again"
                );
                power::mark_refused(&mut status, name, &message, &now());
                let inventory = write_status(inventory, status, ctx).await?;
                ctx.inventory_events
                    .publish(
                        &inventory,
                        EventType::Warning,
                        "PowerActionFailed",
                        "PowerActionFailed",
                        message,
                    )
                    .await;
                return Ok(());
            }
            info!(inventory = %inventory.name_any(), %namespace, job = %name, %action, "found the power action job created before");
        }
        Err(e) => return Err(e.into()),
    }
    status.power_action.last_job_name = Some(name.to_owned());
    let inventory = write_status(inventory, status, ctx).await?;
    ctx.inventory_events
        .publish(
            &inventory,
            EventType::Normal,
            "PowerActionSubmitted",
            "PowerActionSubmitted",
            format!("bmc job {name} submitted for power action {action}"),
        )
        .await;
    Ok(())
}

/// Deletion: the Cluster entry, then the membership finalizer; the Machine's finalizer, then
/// Seeder's finalizer. Each step is written before the next is taken.
async fn finalize(inventory: &Inventory, ctx: &SeederContext) -> Result<Action, Error> {
    let api = inventories(ctx, inventory);
    let holds = |f: &str| inventory.finalizers().iter().any(|x| x == f);
    if !holds(MEMBERSHIP_FINALIZER) && !holds(INVENTORY_FINALIZER) {
        return Ok(Action::await_change());
    }
    // Seeder's finalizer also stood for the membership before ingot: the entry goes first
    // whichever finalizer is left.
    if is_local(inventory) {
        leave_local_cluster(inventory, ctx).await?;
        if inventory.spec.events.enabled {
            super::push::unsubscribe(inventory, ctx).await;
        }
    }
    let inventory = finalizer::remove(&api, inventory, MEMBERSHIP_FINALIZER)
        .await?
        .unwrap_or_else(|| inventory.clone());
    if finalizer::has(&inventory, INVENTORY_FINALIZER) {
        if let Some(owner) = allocated_to(&inventory).filter(|_| !is_local(&inventory)) {
            return wait_for_release(&inventory, &owner, ctx).await;
        }
        release_machine(&inventory, ctx).await?;
        finalizer::remove(&api, &inventory, INVENTORY_FINALIZER).await?;
    }
    Ok(Action::await_change())
}

/// The Cluster (`namespace/name`) a provisioned Inventory is allocated to, if any.
fn allocated_to(inventory: &Inventory) -> Option<String> {
    let owner = &inventory.status.as_ref()?.owner_cluster;
    (!owner.name.is_empty()).then(|| format!("{}/{}", owner.namespace, owner.name))
}

/// A deleted Inventory still allocated to a Cluster keeps its finalizer, and so its Machine,
/// until provisioning has released it (server shut down, address freed): dropping it now would
/// leave a running server with an address the pool could hand out again, and shutting a node of
/// a running cluster down is not a deletion's to decide. Meanwhile its status still shows the
/// Machine's power state, which the release waits on. Said once, as a condition and an Event;
/// the release's status write wakes it.
async fn wait_for_release(
    inventory: &Inventory,
    owner: &str,
    ctx: &SeederContext,
) -> Result<Action, Error> {
    let message = format!(
        "deleted while allocated to Cluster {owner}: remove it from that Cluster's spec.nodes (or delete the Cluster); once its server is shut down and its address freed, the Inventory goes"
    );
    let machine = ctx
        .machine(
            &inventory.namespace().unwrap_or_default(),
            &inventory.name_any(),
        )
        .await?;
    let now = now();
    let mut status = observed_status(inventory, machine.as_ref(), None, &now);
    let said = conditions::find(&status.conditions, WAITING_FOR_RELEASE)
        .is_some_and(|c| c.status == "True" && c.message.as_deref() == Some(message.as_str()));
    if !said {
        conditions::set_error(&mut status.conditions, WAITING_FOR_RELEASE, &message, &now);
    }
    let inventory = write_status(inventory, status, ctx).await?;
    if !said {
        ctx.inventory_events
            .publish(
                &inventory,
                EventType::Warning,
                "WaitingForRelease",
                "Delete",
                message,
            )
            .await;
    }
    Ok(Action::await_change())
}

/// Removes Seeder's finalizer from the Inventory's Machine (garbage collection deletes it).
async fn release_machine(inventory: &Inventory, ctx: &SeederContext) -> Result<(), Error> {
    let api: Api<Machine> = Api::namespaced(
        ctx.client.clone(),
        &inventory.namespace().unwrap_or_default(),
    );
    if let Some(machine) = api.get_opt(&inventory.name_any()).await? {
        finalizer::remove(&api, &machine, INVENTORY_FINALIZER).await?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rufio::tenancy::ALLOW_HTTP_ANNOTATION;
    use ingot_api::seeder::InventorySpec;

    fn inventory(annotations: serde_json::Value) -> Inventory {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "harvester-659jw", "namespace": "harvester-system", "uid": "u1",
                "annotations": annotations},
            "spec": {"baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
                "authSecretRef": {"name": "harvester-659jw", "namespace": "harvester-system"}}},
                "events": {"enabled": true, "pollingInterval": "1h"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_cluster_change_wakes_only_the_local_inventories_it_does_not_list() {
        let (store, mut writer) = kube::runtime::reflector::store::<Inventory>();
        let named = |name: &str, local: &str| {
            let mut i = inventory(json!({"metal.harvesterhci.io/local-inventory": local}));
            i.metadata.name = Some(name.to_owned());
            i
        };
        writer.apply_watcher_event(&watcher::Event::Init);
        for (name, local) in [("a", "true"), ("b", "true"), ("c", "true"), ("d", "false")] {
            writer.apply_watcher_event(&watcher::Event::InitApply(named(name, local)));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let mut local = cluster::local_cluster();
        cluster::add_member(&mut local.spec, "harvester-system", "a");
        let mut woken: Vec<String> = missing_from(&store, &local)
            .into_iter()
            .map(|r| r.name)
            .collect();
        woken.sort();
        assert_eq!(woken, ["b", "c"]);
        // A Cluster deleted and made again lists nobody: every local Inventory joins again.
        assert_eq!(missing_from(&store, &cluster::local_cluster()).len(), 3);
        // Nor does one on its way out.
        local.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        assert_eq!(missing_from(&store, &local).len(), 3);
    }

    #[test]
    fn both_spellings_of_the_annotations_are_read() {
        let seeder = inventory(json!({
            "metal.harvesterhci.io/local-inventory": "true",
            "metal.harvesterhci.io/local-node-name": "n1"
        }));
        let hep = inventory(json!({
            "metal.harvesterhci.io/localInventory": "true",
            "metal.harvesterhci.io/localNodeName": "n2"
        }));
        assert!(is_local(&seeder) && is_local(&hep));
        assert_eq!(node_name(&seeder), Some("n1"));
        assert_eq!(node_name(&hep), Some("n2"));
        assert!(!is_local(&inventory(
            json!({"metal.harvesterhci.io/local-inventory": "false"})
        )));
        assert!(!is_local(&Inventory::new("x", InventorySpec::default())));
    }

    #[test]
    fn finalizers_are_added_in_order_and_removed_one_at_a_time() {
        let none: Vec<String> = vec![];
        assert_eq!(
            finalizer::with(&none, &[MEMBERSHIP_FINALIZER, INVENTORY_FINALIZER]).unwrap(),
            vec![MEMBERSHIP_FINALIZER, INVENTORY_FINALIZER]
        );
        let go = vec![INVENTORY_FINALIZER.to_owned()];
        assert_eq!(
            finalizer::with(&go, &[MEMBERSHIP_FINALIZER, INVENTORY_FINALIZER]).unwrap(),
            vec![INVENTORY_FINALIZER, MEMBERSHIP_FINALIZER]
        );
        let both = vec![
            INVENTORY_FINALIZER.to_owned(),
            MEMBERSHIP_FINALIZER.to_owned(),
        ];
        assert_eq!(
            finalizer::with(&both, &[MEMBERSHIP_FINALIZER, INVENTORY_FINALIZER]),
            None
        );
        assert_eq!(
            finalizer::without(&both, MEMBERSHIP_FINALIZER).unwrap(),
            vec![INVENTORY_FINALIZER]
        );
        assert_eq!(finalizer::without(&go, MEMBERSHIP_FINALIZER), None);
        // Every write carries the resourceVersion the decision was made on.
        let mut machine = desired_machine(&inventory(json!({})));
        machine.metadata.resource_version = Some("9".into());
        assert_eq!(
            finalizer::patch(
                &finalizer::without(machine.finalizers(), INVENTORY_FINALIZER).unwrap(),
                machine.metadata.resource_version.as_deref()
            ),
            json!({"metadata": {"finalizers": [], "resourceVersion": "9"}})
        );
    }

    #[test]
    fn the_machine_is_seeders() {
        let i = inventory(json!({}));
        let m = serde_json::to_value(desired_machine(&i)).unwrap();
        assert_eq!(m["metadata"]["name"], "harvester-659jw");
        assert_eq!(
            m["metadata"]["finalizers"],
            json!(["finalizer.inventory.metal.harvesterhci.io"])
        );
        assert_eq!(
            m["metadata"]["ownerReferences"],
            json!([{"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "name": "harvester-659jw", "uid": "u1", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(
            m["spec"],
            serde_json::to_value(&i.spec.baseboard_spec).unwrap()
        );
        assert_eq!(machine_patch(&i, &desired_machine(&i)), None);
    }

    #[test]
    fn a_go_seeder_machine_is_adopted_with_what_it_lacks() {
        let i = inventory(json!({}));
        let mut m = desired_machine(&i);
        // Seeder's local-cluster controller: controller reference, no finalizer.
        m.metadata.finalizers = None;
        m.metadata.resource_version = Some("7".into());
        let patch = machine_patch(&i, &m).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": [INVENTORY_FINALIZER], "resourceVersion": "7"}})
        );
        // A changed baseboardSpec is carried over.
        let mut changed = i.clone();
        changed.spec.baseboard_spec.connection.host = "10.0.0.9".into();
        let patch = machine_patch(&changed, &desired_machine(&i)).unwrap();
        assert_eq!(patch["spec"]["connection"]["host"], "10.0.0.9");
    }

    #[test]
    fn the_machine_carries_the_inventorys_acceptance_of_plain_http() {
        let mut i = inventory(json!({}));
        i.annotations_mut()
            .insert(ALLOW_HTTP_ANNOTATION.into(), "true".into());
        let m = desired_machine(&i);
        assert_eq!(
            m.annotations()
                .get(ALLOW_HTTP_ANNOTATION)
                .map(String::as_str),
            Some("true")
        );
        assert_eq!(machine_patch(&i, &m), None);
        // Added to a Machine without it, and taken away with the Inventory's.
        let patch = machine_patch(&i, &desired_machine(&inventory(json!({})))).unwrap();
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({ALLOW_HTTP_ANNOTATION: "true"})
        );
        let patch = machine_patch(&inventory(json!({})), &m).unwrap();
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({ALLOW_HTTP_ANNOTATION: null})
        );
    }

    fn machine_status(v: serde_json::Value) -> MachineStatus {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn readiness_follows_contactable_both_ways() {
        let mut s = InventoryStatus::default();
        apply_machine(&mut s, Some(&machine_status(json!({}))), true, "t0");
        assert_eq!(
            s,
            InventoryStatus::default(),
            "a Machine not read yet changes nothing"
        );
        apply_machine(
            &mut s,
            Some(&machine_status(json!({"powerState": "on",
                "conditions": [{"type": "Contactable", "status": "True"}]}))),
            true,
            "t1",
        );
        assert_eq!(s.status.as_deref(), Some("inventoryNodeReady"));
        assert_eq!(s.machine_power_state.as_deref(), Some("on"));
        assert!(conditions::find(&s.conditions, MACHINE_NOT_CONTACTABLE).is_none());

        apply_machine(
            &mut s,
            Some(&machine_status(json!({"powerState": "unknown",
                "conditions": [{"type": "Contactable", "status": "False", "message": "failed to open connection to BMC"}]}))),
            true,
            "t2",
        );
        assert_eq!(s.status, None);
        let c = conditions::find(&s.conditions, MACHINE_NOT_CONTACTABLE).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("Error"))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("failed to open connection to BMC")
        );
        assert_eq!(s.machine_power_state.as_deref(), Some("unknown"));

        apply_machine(
            &mut s,
            Some(&machine_status(json!({"powerState": "off",
                "conditions": [{"type": "Contactable", "status": "True"}]}))),
            true,
            "t3",
        );
        assert_eq!(s.status.as_deref(), Some("inventoryNodeReady"));
        let c = conditions::find(&s.conditions, MACHINE_NOT_CONTACTABLE).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            ("False", None, None)
        );
    }

    #[test]
    fn the_last_internal_ip_is_the_address() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"addresses": [
                {"type": "Hostname", "address": "n"},
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "InternalIP", "address": "10.0.0.2"}
            ]}
        }))
        .unwrap();
        assert_eq!(internal_ip(&node).as_deref(), Some("10.0.0.2"));
    }
}
