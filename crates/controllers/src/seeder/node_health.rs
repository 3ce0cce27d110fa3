//! The hardware poller of embedded mode (Seeder's `ClusterEventReconciler`, per Inventory):
//! for each local, ready Inventory with `spec.events.enabled` whose Node exists, once per
//! `spec.events.pollingInterval`, the BMC's inventory and event log are read through the Rufio
//! controllers' session and become
//!
//! - the Node labels `manufacturer`, `model`, `serialNumber` ([`super::hardware`]),
//! - the Node annotations `seeder.ingot.dev/{cpu,memory,bios-version,bmc-firmware-version,
//!   nic-macs,disks,health}` ([`super::health::fact_annotations`]),
//! - Events on the Node in Seeder's format for readings that changed and for new event-log
//!   entries ([`super::health`]),
//! - the Node condition `HardwareHealthy` from the inventory and the BMC's sensors
//!   ([`super::health::hardware_condition`]), written only when it changes; not touched when
//!   the sensors could not be read.
//!
//! Labels, annotations and the de-duplication state go in one merge patch of the Node, only
//! when something differs, before the Events are written (so an entry is never emitted twice,
//! even across a restart). Each Inventory is its own reconcile with no concurrency bound here:
//! a slow or dead BMC holds only its own Inventory (the session manager bounds each call).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ingot_api::seeder::{INVENTORY_NODE_READY, Inventory};
use ingot_bmc::manager::ManagedBmc;
use ingot_bmc::{Bmc, BmcError, LogEntry, Scheme, Sensor};
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ReflectHandle, Store};
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};
use tracing::{debug, info, warn};

use crate::runtime::{self, Backoff, ControllerRuntime};

use super::inventory::{is_local, node_name};
use super::{Error, SeederContext, hardware, health, push};
use crate::onprem::size;
use crate::rufio::bmcs;
use crate::rufio::tenancy::ConnectionField;

const CONTROLLER: &str = "seeder-hardware";
/// A failed pass (the Node unreadable or unwritable) is retried after 15 s, doubling to 2 min
/// while it goes on failing.
const RETRY_BASE: Duration = Duration::from_secs(15);
const RETRY_MAX: Duration = Duration::from_secs(120);
/// Namespace of the Events of cluster-scoped objects.
const NODE_EVENTS_NAMESPACE: &str = "default";

pub async fn run(
    ctx: Arc<SeederContext>,
    inventories: Store<Inventory>,
    changes: ReflectHandle<Inventory>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_shared_stream(changes, inventories)
        // As many at once as Rufio's Machines: each read waits on its own BMC only (a dead one
        // holds one slot for its timeout), and the BMC calls share the fleet limit anyway. No
        // bound would start a fleet's reads at once, each with its own API connection.
        // A pushed event reads the hardware now.
        .reconcile_on(ctx.hardware_wakes.stream())
        .with_config(Config::default().concurrency(ctx.rufio.settings.machine_concurrency));
    let backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

fn key(inventory: &Inventory) -> String {
    format!(
        "{}/{}",
        inventory.namespace().unwrap_or_default(),
        inventory.name_any()
    )
}

/// The Inventory's polling interval, or the default with the reason it was not taken.
pub fn interval_of(inventory: &Inventory) -> (Duration, Option<String>) {
    match health::polling_interval(&inventory.spec.events.polling_interval) {
        Ok(d) => (d, None),
        Err(why) => (health::DEFAULT_POLLING_INTERVAL, Some(why)),
    }
}

async fn reconcile(inventory: Arc<Inventory>, ctx: Arc<SeederContext>) -> Result<Action, Error> {
    let key = key(&inventory);
    let ready =
        inventory.status.as_ref().and_then(|s| s.status.as_deref()) == Some(INVENTORY_NODE_READY);
    if ctx.settings.provisioning
        && !is_local(&inventory)
        && ready
        && inventory.metadata.deletion_timestamp.is_none()
        && !size::size_read(&inventory)
    {
        return read_size(&inventory, &ctx).await;
    }
    if !is_local(&inventory)
        || inventory.metadata.deletion_timestamp.is_some()
        || !inventory.spec.events.enabled
        || !ready
    {
        ctx.forget_hardware(&key);
        // Deleted, not ready or its events disabled: its BMC's stream, if one is followed, goes.
        ctx.streams.stop(&key);
        if !inventory.spec.events.enabled && inventory.metadata.deletion_timestamp.is_none() {
            push::unsubscribe_if_ours(&inventory, &ctx).await;
        }
        return Ok(Action::await_change());
    }
    let (interval, invalid) = interval_of(&inventory);
    let woken = ctx.take_hardware_wake(&key);
    let turn = if woken {
        super::MIN_WOKEN_READ
    } else {
        interval
    };
    if let Err(wait) = ctx.take_hardware_turn(&key, turn) {
        if woken {
            ctx.keep_hardware_wake(&key);
        }
        return Ok(Action::requeue(wait));
    }
    if let Some(why) = invalid {
        ctx.hardware_events
            .publish(
                inventory.as_ref(),
                EventType::Warning,
                "InvalidPollingInterval",
                "InvalidPollingInterval",
                format!("{why}; polling every 1h (the default)"),
            )
            .await;
    }
    let Some(node_name) = node_name(&inventory) else {
        return Ok(Action::requeue(interval));
    };
    let Some(node) = ctx.node_to_poll(node_name).await? else {
        return Ok(Action::requeue(interval));
    };
    let read = poll(&inventory, &node, &ctx).await?;
    // The subscription is ensured at each poll (not at a woken read: the event came through
    // it), so that a BMC reset or a termination is repaired at the next one.
    if read && !woken {
        push::ensure(&inventory, interval, &ctx).await;
    }
    Ok(Action::requeue(interval))
}

/// A server provisioning may take (not local): its size read from its BMC once, and recorded on
/// the Inventory with the time of the read ([`size`]), so that a pool can ask for a minimum. A
/// BMC not read is tried again later, quietly: its readiness says the rest.
async fn read_size(inventory: &Inventory, ctx: &SeederContext) -> Result<Action, Error> {
    let api: Api<Inventory> = Api::namespaced(
        ctx.client.clone(),
        &inventory.namespace().unwrap_or_default(),
    );
    // The store may not show a read this controller just wrote: the Inventory as it is now.
    if api
        .get_opt(&inventory.name_any())
        .await?
        .is_none_or(|now| size::size_read(&now))
    {
        return Ok(Action::await_change());
    }
    let facts = match reach(inventory, ctx).await {
        Ok(bmc) => bmc.inventory().await.map_err(|e| bmcs::error_chain(&e)),
        Err(message) => Err(message),
    };
    let facts = match facts {
        Ok(facts) => facts,
        Err(why) => {
            debug!(inventory = %key(inventory), %why, "its size not read");
            return Ok(Action::requeue(RETRY_MAX));
        }
    };
    let read = size::size_annotations(&facts);
    // A dimension not reported is removed: a read again after a hardware change is exact.
    let mut annotations: Map<String, Value> = size::SIZE_ANNOTATIONS
        .iter()
        .map(|k| {
            (
                (*k).to_owned(),
                read.get(k).map_or(Value::Null, |v| v.as_str().into()),
            )
        })
        .collect();
    annotations.insert(
        size::SIZE_READ_ANNOTATION.to_owned(),
        Timestamp::now().to_string().into(),
    );
    api.patch(
        &inventory.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
    )
    .await?;
    info!(inventory = %key(inventory), size = ?read, "size read from the BMC");
    Ok(Action::await_change())
}

/// One read of the BMC and what follows from it; whether the BMC could be read.
async fn poll(inventory: &Inventory, node: &Node, ctx: &SeederContext) -> Result<bool, Error> {
    let bmc = match reach(inventory, ctx).await {
        Ok(bmc) => bmc,
        Err(message) => return read_failed(inventory, &message, ctx).await,
    };
    // The event log first: its new entries are the news a pushed event brings, so they are
    // said before the inventory and the sensors are read (tens of requests more). The cursor
    // is written before the Events, so an Event lost to an API error is never said twice.
    let log = read_log(&bmc, inventory).await;
    let annotations = node.annotations();
    let cursor = annotations
        .get(health::EVENT_LOG_CURSOR_ANNOTATION)
        .map(String::as_str);
    let (entries, new_cursor) = health::new_log_entries(&log, cursor);
    if let Some(c) = new_cursor.filter(|c| Some(c.as_str()) != cursor) {
        let written = Api::<Node>::all(ctx.client.clone())
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    health::EVENT_LOG_CURSOR_ANNOTATION: c}}})),
            )
            .await?;
        ctx.node_written(&written);
    }
    for e in entries {
        let (message, warning) = health::log_entry_event(e);
        node_event(node, &message, warning, ctx).await;
    }

    let facts = match bmc.inventory().await {
        Ok(facts) => facts,
        Err(e) => return read_failed(inventory, &bmcs::error_chain(&e), ctx).await,
    };
    let sensors = read_sensors(&bmc, inventory).await;
    let readings = health::readings(&facts);
    let (fresh, fingerprints) =
        health::fresh_readings(&readings, &health::stored_fingerprints(annotations));

    let (mut wanted, too_long) = health::fact_annotations(&facts);
    for fact in too_long {
        ctx.hardware_events
            .publish(
                inventory,
                EventType::Warning,
                "HardwareFactTooLong",
                "HardwareFactTooLong",
                fact.to_string(),
            )
            .await;
    }
    wanted.insert(health::READINGS_ANNOTATION, fingerprints);
    let mut metadata = Map::new();
    if let Some(p) = health::annotation_patch(annotations, &wanted, &health::FACT_ANNOTATIONS) {
        metadata.insert("annotations".into(), Value::Object(p));
    }
    if let Some(p) = hardware::label_patch(node.labels(), &hardware::wanted_labels(&facts)) {
        metadata.extend(p["metadata"].as_object().cloned().unwrap_or_default());
    }
    if !metadata.is_empty() {
        let written = Api::<Node>::all(ctx.client.clone())
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": metadata })),
            )
            .await?;
        ctx.node_written(&written);
        info!(node = %node.name_any(), changed = ?metadata.keys().collect::<Vec<_>>(), "hardware facts written");
    }
    if let Some(sensors) = sensors {
        let wanted = health::hardware_condition(&facts, &sensors);
        let current = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == health::HARDWARE_HEALTHY));
        let now = Timestamp::now().to_string();
        if let Some(patch) = health::hardware_condition_patch(current, &wanted, &now) {
            let written = Api::<Node>::all(ctx.client.clone())
                .patch_status(
                    &node.name_any(),
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await?;
            ctx.node_written(&written);
            info!(node = %node.name_any(), healthy = wanted.healthy, reason = %wanted.reason, "hardware condition written");
        }
    }
    for r in fresh {
        node_event(node, &r.message, r.warning, ctx).await;
    }
    Ok(true)
}

/// Says on the Inventory that its BMC could not be read; the poll did not read it.
async fn read_failed(
    inventory: &Inventory,
    message: &str,
    ctx: &SeederContext,
) -> Result<bool, Error> {
    ctx.hardware_events
        .publish(
            inventory,
            EventType::Warning,
            "HardwareReadFailed",
            "HardwareReadFailed",
            format!("reading the hardware facts: {message}"),
        )
        .await;
    Ok(false)
}

/// Seeder's label on the Inventory that sets the port of the hardware reads over Redfish.
pub const REDFISH_PORT_LABEL: &str = "redfishPort.harvesterhci.io";

/// The port the Inventory's label [`REDFISH_PORT_LABEL`] sets for the hardware reads (`None`
/// without the label), or why its value is not a port.
pub fn redfish_port_label(inventory: &Inventory) -> Result<Option<u16>, String> {
    let Some(value) = inventory.labels().get(REDFISH_PORT_LABEL) else {
        return Ok(None);
    };
    value
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .map(Some)
        .ok_or_else(|| {
            format!(
                "label {REDFISH_PORT_LABEL} {value:?} is not a port: set it to the BMC's Redfish \
                 port (1 to 65535) or remove it"
            )
        })
}

/// The Inventory's BMC for the hardware reads (through the Rufio controllers' session).
pub(crate) async fn reach(
    inventory: &Inventory,
    ctx: &SeederContext,
) -> Result<ManagedBmc, String> {
    let redfish_port = redfish_port_label(inventory)?;
    let mut target = ctx
        .rufio
        .target_for(
            ConnectionField::Inventory,
            &inventory.metadata,
            &inventory.spec.baseboard_spec.connection,
        )
        .await
        .map_err(|e| e.to_string())?;
    let bmc = match redfish_port {
        // Seeder reads the hardware over Redfish only, at `https://<connection.host>:<label>`.
        Some(port) => {
            target.redfish.endpoint.scheme = Scheme::Https;
            target.redfish.endpoint.port = Some(port);
            ctx.rufio.bmcs.manager.bmc(target.redfish.clone())
        }
        None => ctx.rufio.bmcs.reach(&target).await.map_err(|e| e.0)?.bmc,
    };
    debug!(inventory = %inventory.name_any(), redfish = %target.redfish.endpoint, labelled = redfish_port.is_some(), "reaching the BMC");
    Ok(bmc)
}

/// The BMC's event log; a BMC without one, or one that could not be read, gives an empty log.
async fn read_log(bmc: &ManagedBmc, inventory: &Inventory) -> Vec<LogEntry> {
    match bmc.event_log().await {
        Ok(log) => log,
        Err(BmcError::Unsupported(_)) => Vec::new(),
        Err(e) => {
            warn!(inventory = %inventory.name_any(), error = %bmcs::error_chain(&e), "reading the event log failed");
            Vec::new()
        }
    }
}

/// The BMC's sensors: none for a BMC without them, `None` when they could not be read.
async fn read_sensors(bmc: &ManagedBmc, inventory: &Inventory) -> Option<Vec<Sensor>> {
    match bmc.sensors().await {
        Ok(s) => Some(s),
        Err(BmcError::Unsupported(_)) => Some(Vec::new()),
        Err(e) => {
            warn!(inventory = %inventory.name_any(), error = %bmcs::error_chain(&e), "reading the sensors failed; the hardware condition is left as it is");
            None
        }
    }
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The core Event Seeder writes on the Node: reason `HarvesterHardwareDiscovery`, source
/// component `boots`, in `default`.
pub fn core_event(node: &Node, message: &str, warning: bool, instance: &str) -> CoreEvent {
    let now = Timestamp::now();
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{:x}{:x}",
                node.name_any(),
                now.as_nanosecond(),
                seq
            )),
            namespace: Some(NODE_EVENTS_NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.name_any()),
            uid: node.uid(),
            ..ObjectReference::default()
        },
        reason: Some(health::REASON.into()),
        message: Some(message.into()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some(health::SOURCE_COMPONENT.into()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        reporting_component: Some("ingot-seeder".into()),
        reporting_instance: Some(instance.into()),
        ..CoreEvent::default()
    }
}

async fn node_event(node: &Node, message: &str, warning: bool, ctx: &SeederContext) {
    let api: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), NODE_EVENTS_NAMESPACE);
    let event = core_event(node, message, warning, ctx.instance());
    if let Err(error) = api.create(&PostParams::default(), &event).await {
        warn!(%error, node = %node.name_any(), message, "could not record a hardware event");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_event_is_seeders() {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n1", "uid": "u-1"}})).unwrap();
        let e =
            serde_json::to_value(core_event(&node, "fan Fan1 is Critical", true, "pod-0")).unwrap();
        assert_eq!(e["metadata"]["namespace"], "default");
        assert!(e["metadata"]["name"].as_str().unwrap().starts_with("n1."));
        assert_eq!(
            e["involvedObject"],
            json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1"})
        );
        assert_eq!(e["reason"], "HarvesterHardwareDiscovery");
        assert_eq!(e["source"], json!({"component": "boots"}));
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["message"], "fan Fan1 is Critical");
        let normal = core_event(&node, "ThermalHealth: x reported temp: 1C", false, "p");
        assert_eq!(normal.type_.as_deref(), Some("Normal"));
        assert_ne!(
            normal.metadata.name,
            core_event(&node, "", false, "p").metadata.name
        );
    }

    #[test]
    fn the_redfish_port_label_is_a_port_or_an_error_naming_it() {
        let with = |value: Option<&str>| -> Inventory {
            let mut v = json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "metadata": {"name": "i"},
                "spec": {"baseboardSpec": {"connection": {"host": "h", "insecureTLS": true}},
                    "events": {"enabled": true, "pollingInterval": "1h"}}
            });
            if let Some(value) = value {
                v["metadata"]["labels"] = json!({ REDFISH_PORT_LABEL: value });
            }
            serde_json::from_value(v).unwrap()
        };
        assert_eq!(redfish_port_label(&with(None)), Ok(None));
        assert_eq!(redfish_port_label(&with(Some("8443"))), Ok(Some(8443)));
        for bad in ["abc", "0", "65536", "-1", ""] {
            let why = redfish_port_label(&with(Some(bad))).unwrap_err();
            assert!(
                why.contains("label redfishPort.harvesterhci.io")
                    && why.contains(&format!("{bad:?}")),
                "{why}"
            );
        }
    }

    #[test]
    fn an_invalid_interval_falls_back_to_the_default() {
        let mut i: Inventory = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "ns"},
            "spec": {"baseboardSpec": {"connection": {"host": "h", "insecureTLS": true}},
                "events": {"enabled": true, "pollingInterval": "2s"}}
        }))
        .unwrap();
        assert_eq!(interval_of(&i), (Duration::from_secs(2), None));
        i.spec.events.polling_interval = "0s".into();
        let (d, why) = interval_of(&i);
        assert_eq!(d, Duration::from_secs(3600));
        assert!(why.unwrap().contains("\"0s\""));
    }
}
