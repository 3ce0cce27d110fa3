//! `metal.harvesterhci.io/v1alpha1`: Inventory, Cluster and AddressPool in Seeder's shapes.
//!
//! Seeder's own CRD marks `primaryDisk`, `managementInterfaceMacAddress` and `events` as
//! required, yet the embedded-mode Inventory of the Harvester enhancement proposal and Seeder's
//! own sample omit some of them. ingot accepts both: those fields are optional here (the
//! Harvester UI sends empty strings) and `events` defaults to disabled.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;
use crate::rufio::MachineSpec;

/// Annotation the Harvester UI sets (`"true"`) on the Inventory of an existing node.
pub const LOCAL_INVENTORY_ANNOTATION: &str = "metal.harvesterhci.io/local-inventory";
/// Annotation naming the Node an embedded-mode Inventory maps to.
pub const LOCAL_NODE_NAME_ANNOTATION: &str = "metal.harvesterhci.io/local-node-name";
/// Seeder's finalizer on Inventories, also put on the Machines made for them.
pub const INVENTORY_FINALIZER: &str = "finalizer.inventory.metal.harvesterhci.io";
/// Label on rufio Jobs naming the Inventory they act for.
pub const JOB_INVENTORY_LABEL: &str = "inventory.metal.harvesterhci.io";
/// Namespace and name of the embedded-mode placeholder Cluster.
pub const LOCAL_CLUSTER_NAMESPACE: &str = "harvester-system";
pub const LOCAL_CLUSTER_NAME: &str = "local";
/// `status.status` of an Inventory whose BMC answers; Harvester checks this exact string.
pub const INVENTORY_NODE_READY: &str = "inventoryNodeReady";

/// `status.status` of a provisioned Cluster, in order (Seeder's strings; `tinkConfigReady` is
/// kept although ingot serves the boot itself).
pub mod cluster_status {
    pub const CONFIG_READY: &str = "clusterConfigReady";
    pub const NODES_PATCHED: &str = "clusterNodesPatched";
    pub const BOOT_READY: &str = "tinkConfigReady";
    pub const RUNNING: &str = "clusterRunning";
}

/// Power actions Harvester requests through `spec.powerActionRequested`.
pub mod power_action {
    pub const SHUTDOWN: &str = "shutdown";
    pub const POWER_ON: &str = "poweron";
    pub const REBOOT: &str = "reboot";
}

/// A physical server and its BMC.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "metal.harvesterhci.io",
    version = "v1alpha1",
    kind = "Inventory",
    plural = "inventories",
    namespaced,
    status = "InventoryStatus",
    doc = "A physical server and its BMC, mapped to a Harvester node.",
    printcolumn = r#"{"name":"InventoryStatus","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"GeneratedPassword","type":"string","jsonPath":".status.generatedPassword"}"#,
    printcolumn = r#"{"name":"AllocatedNodeAddress","type":"string","jsonPath":".status.pxeBootConfig.address"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".status.ownerCluster.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct InventorySpec {
    #[serde(
        rename = "primaryDisk",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub primary_disk: Option<String>,
    #[serde(
        rename = "managementInterfaceMacAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub management_interface_mac_address: Option<String>,
    #[serde(rename = "baseboardSpec")]
    pub baseboard_spec: MachineSpec,
    #[serde(default = "Events::disabled")]
    pub events: Events,
    /// `shutdown`, `poweron` or `reboot`, set by Harvester to request a power action.
    #[serde(
        rename = "powerActionRequested",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["", "shutdown", "poweron", "reboot"]))]
    pub power_action_requested: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["amd64", "arm64"]))]
    pub arch: Option<String>,
}

/// Hardware event collection of an Inventory.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Events {
    #[serde(default)]
    pub enabled: bool,
    /// How often the BMC is read for events, a Go duration such as `1h`.
    #[serde(rename = "pollingInterval", default = "default_polling_interval")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(r"self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')")
        .message("pollingInterval must be a Go duration such as 1h or 30m"))]
    pub polling_interval: String,
}

impl Events {
    fn disabled() -> Self {
        Self {
            enabled: false,
            polling_interval: default_polling_interval(),
        }
    }
}

impl Default for Events {
    fn default() -> Self {
        Self::disabled()
    }
}

fn default_polling_interval() -> String {
    "1h".to_owned()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct InventoryStatus {
    /// `inventoryNodeReady` once the BMC answers, else empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(
        rename = "generatedPassword",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub generated_password: Option<String>,
    #[serde(
        rename = "hardwareID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub hardware_id: Option<String>,
    /// Seeder's wrangler-style conditions (string timestamps, never removed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WranglerCondition>,
    /// Always written, possibly empty, as Seeder does.
    #[serde(rename = "pxeBootConfig", default)]
    pub pxe_boot_config: PxeBootConfig,
    #[serde(rename = "ownerCluster", default)]
    pub owner_cluster: ObjectRef,
    #[serde(rename = "powerAction", default)]
    pub power_action: PowerActionStatus,
    #[serde(
        rename = "machinePowerState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub machine_power_state: Option<String>,
}

/// A wrangler condition: RFC 3339 strings for times, `reason: Error` marks an error.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WranglerCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(
        rename = "lastUpdateTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_update_time: Option<String>,
    #[serde(
        rename = "lastTransitionTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PxeBootConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netmask: Option<String>,
    #[serde(
        rename = "nameServers",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub name_servers: Option<Vec<String>>,
}

/// Name and namespace, both always written (Seeder's `ObjectReference`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ObjectRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// Progress of the last power action. `actionStatus` is absent while a Job runs: the
/// Harvester UI derives "stopping"/"starting" from its absence.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PowerActionStatus {
    /// `complete` or `failed`; absent while in progress.
    #[serde(
        rename = "actionStatus",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub action_status: Option<String>,
    #[serde(
        rename = "lastActionRequested",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_action_requested: Option<String>,
    #[serde(
        rename = "lastJobName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_job_name: Option<String>,
}

/// A Harvester cluster built from Inventories; in embedded mode the placeholder
/// `harvester-system/local`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "metal.harvesterhci.io",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    namespaced,
    status = "ClusterStatus",
    doc = "A Harvester cluster made of Inventories.",
    printcolumn = r#"{"name":"ClusterStatus","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"ClusterToken","type":"string","jsonPath":".status.token"}"#,
    printcolumn = r#"{"name":"ClusterAddress","type":"string","jsonPath":".status.clusterAddress"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ClusterSpec {
    pub version: String,
    #[serde(rename = "imageURL", default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    pub nodes: Vec<NodeConfig>,
    #[serde(rename = "vipConfig")]
    pub vip_config: VipConfig,
    #[serde(
        rename = "clusterConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_config: Option<ClusterConfig>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NodeConfig {
    #[serde(rename = "inventoryReference")]
    pub inventory_reference: ObjectRef,
    #[serde(rename = "addressPoolReference")]
    pub address_pool_reference: ObjectRef,
    #[serde(
        rename = "staticAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub static_address: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct VipConfig {
    #[serde(rename = "addressPoolReference")]
    pub address_pool_reference: ObjectRef,
    #[serde(
        rename = "staticAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub static_address: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterConfig {
    #[serde(rename = "configURL", default, skip_serializing_if = "Option::is_none")]
    pub config_url: Option<String>,
    #[serde(rename = "sshKeys", default, skip_serializing_if = "Option::is_none")]
    pub ssh_keys: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nameservers: Option<Vec<String>>,
    #[serde(
        rename = "customProvisioningTemplate",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub custom_provisioning_template: Option<String>,
    #[serde(
        rename = "bondOptions",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub bond_options: Option<BTreeMap<String, String>>,
    #[serde(rename = "vlanID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4094))]
    pub vlan_id: Option<i64>,
    #[serde(
        rename = "streamImageMode",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub stream_image_mode: Option<bool>,
    #[serde(rename = "wipeDisks", default, skip_serializing_if = "Option::is_none")]
    pub wipe_disks: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `clusterConfigReady`, `clusterNodesPatched`, `tinkConfigReady` or `clusterRunning`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(
        rename = "clusterAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_address: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Addresses for nodes and VIPs (used by Seeder's provisioning mode, not by embedded mode).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "metal.harvesterhci.io",
    version = "v1alpha1",
    kind = "AddressPool",
    plural = "addresspools",
    namespaced,
    status = "AddressPoolStatus",
    doc = "A pool of addresses for Harvester nodes and VIPs.",
    printcolumn = r#"{"name":"AddressPoolStatus","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"StartAddress","type":"string","jsonPath":".status.startAddress"}"#,
    printcolumn = r#"{"name":"LastAddress","type":"string","jsonPath":".status.lastAddress"}"#,
    printcolumn = r#"{"name":"NetMask","type":"string","jsonPath":".status.netmask"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableAddresses"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct AddressPoolSpec {
    /// An IPv4 CIDR such as `172.16.128.0/24`.
    #[x_kube(validation = kube::core::Rule::new("isCIDR(self)").message("cidr must be a CIDR such as 172.16.128.0/24"))]
    #[schemars(length(max = 64))]
    pub cidr: String,
    #[x_kube(validation = kube::core::Rule::new("isIP(self)").message("gateway must be an IP address"))]
    #[schemars(length(max = 64))]
    pub gateway: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netmask: Option<String>,
    #[serde(
        rename = "reservedAddresses",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub reserved_addresses: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AddressPoolStatus {
    /// `poolReady` or `poolExhausted`.
    #[serde(default)]
    pub status: String,
    #[serde(rename = "startAddress", default)]
    pub start_address: String,
    #[serde(rename = "lastAddress", default)]
    pub last_address: String,
    #[serde(rename = "availableAddresses", default)]
    pub available_addresses: i64,
    #[serde(rename = "addressAllocation", default)]
    pub address_allocation: BTreeMap<String, AllocatedObject>,
    #[serde(default)]
    pub netmask: String,
    /// ingot's conditions (`Ready`, `Deleting`), beside Seeder's fields: why a pool is refused
    /// or what holds its deletion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AllocatedObject {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}
