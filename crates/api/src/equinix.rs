//! `equinix.harvesterhci.io/v1`: InstancePool and Instance, as the harvester-equinix-addon
//! serves them (cluster-scoped, the original's field names and casing).
//!
//! Every field is optional on the wire, as it was upstream; the schema adds the validation the
//! original only did at run time (or never), with messages that name the field and the fix.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;

/// The label that ties an Instance to its pool (unprefixed, camelCase: the original's key).
pub const POOL_LABEL: &str = "instancePool";
/// The original's finalizer on Instances; ingot sets and honours the same one.
pub const INSTANCE_FINALIZER: &str = "equinix.instance.harvesterhci.io";
/// The finalizer wrangler added to the original's Instances; ingot removes it so they can go.
pub const WRANGLER_INSTANCE_FINALIZER: &str = "wrangler.cattle.io/instance-remove";
/// The management interface used when a pool names none.
pub const DEFAULT_MANAGEMENT_INTERFACE: &str = "eth0";

/// Pool status strings, exactly as the original writes them.
pub mod pool_status {
    pub const NEW: &str = "";
    pub const TOKEN_READY: &str = "tokenReady";
    pub const SUBMITTED: &str = "submitted";
    pub const READY: &str = "ready";
    pub const CLEANUP_NODES: &str = "cleanupNodes";
}

/// Instance status strings, exactly as the original writes them.
pub mod instance_status {
    pub const NEW: &str = "";
    pub const QUEUED: &str = "queued";
    pub const SUBMITTED: &str = "submitted";
    pub const REINSTALLING: &str = "reinstalling";
    pub const READY: &str = "ready";
    pub const MANAGED: &str = "managed";
}

const GO_DURATION_RULE: &str = r"self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')";
const GO_DURATION_MESSAGE: &str =
    "must be a Go duration such as 5m, 90s or 1h30m (a number followed by ns, us, ms, s, m or h)";

/// A pool of Equinix Metal servers that join the Harvester cluster as nodes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "equinix.harvesterhci.io",
    version = "v1",
    kind = "InstancePool",
    plural = "instancepools",
    status = "InstancePoolStatus",
    doc = "A pool of Equinix Metal servers provisioned with iPXE into a Harvester cluster.",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Requested","type":"integer","jsonPath":".status.requested"}"#
)]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || has(self.inventoryNamespace)"#).field_path(".inventoryNamespace").message("inventoryNamespace is required with inventorySelector: name the namespace of the Inventories the pool draws from (an InstancePool is cluster-scoped)"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventoryNamespace) || has(self.inventorySelector)"#).field_path(".inventorySelector").message("inventorySelector is required with inventoryNamespace: set it (an empty selector, {}, takes any Inventory of the namespace) or remove inventoryNamespace"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.plan) || self.plan == ''"#).field_path(".plan").message("plan is an Equinix Metal field and a pool with inventorySelector draws its servers from Inventories: remove spec.plan"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.metro) || self.metro == ''"#).field_path(".metro").message("metro is an Equinix Metal field and a pool with inventorySelector draws its servers from Inventories: remove spec.metro"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.billingCycle) || self.billingCycle == ''"#).field_path(".billingCycle").message("billingCycle is an Equinix Metal field and a pool with inventorySelector draws its servers from Inventories: remove spec.billingCycle"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.spotInstance) || !self.spotInstance"#).field_path(".spotInstance").message("spotInstance is an Equinix Metal field and a pool with inventorySelector draws its servers from Inventories: remove spec.spotInstance"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.spotPriceMax) || self.spotPriceMax == ''"#).field_path(".spotPriceMax").message("spotPriceMax is an Equinix Metal field and a pool with inventorySelector draws its servers from Inventories: remove spec.spotPriceMax"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.createMissingVlans) || !self.createMissingVlans"#).field_path(".createMissingVlans").message("createMissingVlans creates Equinix Metal VLANs, which a pool with inventorySelector has none of: remove spec.createMissingVlans"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.networkingConfiguration) || !has(self.networkingConfiguration.type) || self.networkingConfiguration.type == ''"#).field_path(".networkingConfiguration.type").message("networkingConfiguration.type sets Equinix Metal port modes through its API, which a pool with inventorySelector has no part of (bonds come from managementBondingOptions, switch ports are yours): remove spec.networkingConfiguration.type"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.networkingConfiguration) || !has(self.networkingConfiguration.interfaceConfiguration) || (size(self.networkingConfiguration.interfaceConfiguration) <= 1 && self.networkingConfiguration.interfaceConfiguration.all(c, has(c.name) && (c.name == 'eth0' || c.name == 'bond0') && has(c.vlanIDS) && size(c.vlanIDS) == 1 && c.vlanIDS[0].matches('^[0-9]+$')))"#).field_path(".networkingConfiguration.interfaceConfiguration").message("with inventorySelector, networkingConfiguration.interfaceConfiguration only sets the management network's VLAN in the install config (switch ports are yours; no Equinix port API): give at most one entry, named eth0 or bond0, with one VLAN number in vlanIDS; VM networks' VLANs are Harvester cluster networks, set after install"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || !has(self.managementInterface) || self.managementInterface.all(i, i == 'eth0')"#).field_path(".managementInterface").message("an Inventory has one known port, eth0 (spec.managementInterfaceMacAddress): with inventorySelector, managementInterface may only name eth0; remove the other names"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventorySelector) || (has(self.addressPool) && self.addressPool != '')"#).field_path(".addressPool").message("addressPool is required with inventorySelector: name the AddressPool of inventoryNamespace the servers' static addresses come from"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.bootMedia) || has(self.inventorySelector)"#).field_path(".bootMedia").message("bootMedia says how servers drawn from Inventories boot: set inventorySelector, or remove bootMedia (Equinix Metal boots its own way)"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.inventoryMinimum) || has(self.inventorySelector)"#).field_path(".inventoryMinimum").message("inventoryMinimum is the least a server drawn from Inventories must have: set inventorySelector, or remove inventoryMinimum (on Equinix Metal the plan says the size)"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.wipePolicy) || has(self.inventorySelector)"#).field_path(".wipePolicy").message("wipePolicy says how servers drawn from Inventories are wiped when released: set inventorySelector, or remove wipePolicy (Equinix Metal wipes its own servers)"))]
#[x_kube(validation = kube::core::Rule::new(r#"!has(self.addressPool) || has(self.inventorySelector)"#).field_path(".addressPool").message("addressPool gives addresses to servers drawn from Inventories: set inventorySelector and inventoryNamespace, or remove addressPool"))]
pub struct InstancePoolSpec {
    /// Desired number of Instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub count: Option<i64>,
    /// Equinix Metal billing cycle, e.g. `hourly`.
    #[serde(
        rename = "billingCycle",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["", "hourly", "daily", "monthly", "yearly"]))]
    pub billing_cycle: Option<String>,
    #[serde(
        rename = "spotInstance",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub spot_instance: Option<bool>,
    /// Highest spot price, a quantity such as `0.5`.
    #[serde(
        rename = "spotPriceMax",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub spot_price_max: Option<String>,
    /// Accepted for compatibility; the original never used it either.
    #[serde(
        rename = "customData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub custom_data: Option<String>,
    #[serde(
        rename = "usersshKeys",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub user_ssh_keys: Option<Vec<String>>,
    #[serde(
        rename = "projectsshKeys",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub project_ssh_keys: Option<Vec<String>>,
    /// Accepted for compatibility; not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<BTreeMap<String, String>>,
    /// Accepted for compatibility; not used.
    #[serde(rename = "nosshKeys", default, skip_serializing_if = "Option::is_none")]
    pub no_ssh_keys: Option<bool>,
    /// Metal ports whose MACs form the Harvester management network (default `[eth0]`).
    /// Singular on the pool, plural on the Instance: both are the original's names.
    #[serde(
        rename = "managementInterface",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 16), inner(length(max = 64)))]
    pub management_interfaces: Option<Vec<String>>,
    /// Bond options of the management interface, e.g. `{mode: balance-tlb, miimon: "100"}`.
    #[serde(
        rename = "managementBondingOptions",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub management_bonding_options: Option<BTreeMap<String, String>>,
    /// iPXE script of the install boot.
    #[serde(
        rename = "ipxeScriptUrl",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ipxe_script_url: Option<String>,
    /// Harvester ISO URL.
    #[serde(rename = "isoUrl", default, skip_serializing_if = "Option::is_none")]
    pub iso_url: Option<String>,
    /// Equinix Metal plan, e.g. `c3.small.x86`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Equinix Metal metro, e.g. `SG`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metro: Option<String>,
    /// Retired by Equinix Metal in 2023: only an empty list is accepted; use `metro`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), inner(length(max = 64)))]
    #[x_kube(validation = kube::core::Rule::new("size(self) == 0").message(
        "facility is retired by Equinix Metal and refused by its API: remove spec.facility and set spec.metro instead"
    ))]
    pub facility: Option<Vec<String>>,
    /// How long a managed node may stay NotReady before it is replaced, e.g. `5m`.
    #[serde(
        rename = "nodeCleanupWaitInterval",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(GO_DURATION_RULE).message(GO_DURATION_MESSAGE))]
    pub node_cleanup_wait_interval: Option<String>,
    /// Harvester release to install, e.g. `v1.4.2` (ingot's addition). Releases before v1.1
    /// get the v1.0 config schema and join port 8443; later ones the current schema and 443.
    /// Default: a current release (see docs/harvester.md).
    #[serde(
        rename = "harvesterVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(r"self.matches('^v[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.]+)?$')").message(
        "harvesterVersion must be a Harvester release such as v1.4.2 or v1.3.0-rc1"
    ))]
    pub harvester_version: Option<String>,
    /// Boot straight into the installer, with the management MACs passed on the kernel command
    /// line, instead of the original's boot-read-reinstall (Harvester v1.1 and later; ingot's
    /// addition).
    #[serde(
        rename = "singleBoot",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub single_boot: Option<bool>,
    /// Create VLANs named by number in interfaceConfiguration that the project lacks in the
    /// pool's metro (ingot's addition; the original required them to exist).
    #[serde(
        rename = "createMissingVlans",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub create_missing_vlans: Option<bool>,
    /// How many of the pool's Nodes may be unhealthy (NotReady past nodeCleanupWaitInterval)
    /// for unhealthy ones to be replaced: a count or a percentage such as `40%` (ingot's
    /// addition, as Cluster API's MachineHealthCheck; default 1). Above it nothing is
    /// replaced: many Nodes failing together is a partition, not broken servers.
    #[serde(
        rename = "maxUnhealthy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_unhealthy: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    /// How long draining a Node (before a replacement or a scale-down) may take (ingot's
    /// addition; default `5m`). Past it, a Node that is unreachable goes anyway; a reachable
    /// one stays cordoned and the pool says `DrainBlocked`.
    #[serde(
        rename = "drainTimeout",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(GO_DURATION_RULE).message(GO_DURATION_MESSAGE))]
    pub drain_timeout: Option<String>,
    /// The disk Harvester is installed on (ingot's addition; default `/dev/sda`, the
    /// original's).
    #[serde(
        rename = "installDisk",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 256))]
    #[x_kube(validation = kube::core::Rule::new("self.startsWith('/dev/')").message(
        "installDisk must be a device path such as /dev/sda or /dev/nvme0n1"
    ))]
    pub install_disk: Option<String>,
    #[serde(
        rename = "networkingConfiguration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub networking_configuration: Option<NetworkingConfiguration>,
    /// Draw the pool's servers from Seeder Inventories matching this label selector, reached
    /// through their BMCs, instead of Equinix Metal (ingot's addition; see docs/onprem.md). The
    /// Equinix Metal fields (plan, metro, billingCycle, spot, createMissingVlans and the port
    /// settings of networkingConfiguration) are then refused.
    #[serde(
        rename = "inventorySelector",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = kube::core::Rule::new(
        "!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn'] ? (has(e.values) && size(e.values) > 0) : (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))"
    ).message(
        "each matchExpressions entry needs operator In or NotIn with values, or Exists or DoesNotExist without values"
    ))]
    pub inventory_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// The namespace of the Inventories an inventorySelector pool draws from (required with
    /// it: an InstancePool is cluster-scoped).
    #[serde(
        rename = "inventoryNamespace",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 63))]
    #[x_kube(validation = kube::core::Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message(
        "inventoryNamespace must be a namespace name: lowercase letters, digits and '-', starting and ending with a letter or digit"
    ))]
    pub inventory_namespace: Option<String>,
    /// The provisioning AddressPool (in inventoryNamespace) an inventorySelector pool's
    /// servers take their static addresses from (required with it).
    #[serde(
        rename = "addressPool",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 253))]
    pub address_pool: Option<String>,
    /// How an inventorySelector pool's servers boot the installer: `pxe` (a one-time network
    /// boot; the default) or `cd` (ingot's boot CD for the server, inserted as virtual media
    /// through its BMC, no DHCP needed). An Inventory's own
    /// `provisioning.ingot.dev/boot-media` annotation, where set, decides for that server.
    #[serde(rename = "bootMedia", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["pxe", "cd"]))]
    pub boot_media: Option<String>,
    /// What an inventorySelector pool's released server goes through before it returns to the
    /// free set: `none` (the default: powered off only) or `metadata` (booted into the wipe
    /// image given to `ingot run --wipe-kernel-url/--wipe-initrd-url`, which erases the disks'
    /// partition tables and signatures and reports; only then powered off and freed).
    #[serde(
        rename = "wipePolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["none", "metadata"]))]
    pub wipe_policy: Option<String>,
    /// The least an inventorySelector pool's server must have, as its BMC reports it (read
    /// once per Inventory, recorded as `provisioning.ingot.dev/{cores,memory-gib,disk-gib}`):
    /// Inventories below it, or whose BMC does not report a size asked for, are not taken.
    #[serde(
        rename = "inventoryMinimum",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub inventory_minimum: Option<InventoryMinimum>,
}

/// The least a pool's server must have; each field optional.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct InventoryMinimum {
    /// Processor cores, all sockets together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cores: Option<i64>,
    /// Memory, in GiB.
    #[serde(rename = "memoryGiB", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_gib: Option<i64>,
    /// The largest disk, in GiB.
    #[serde(rename = "diskGiB", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub disk_gib: Option<i64>,
}

/// How the servers' ports are wired, as in the fork's README.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NetworkingConfiguration {
    /// `layer3` (the Metal default), `hybrid`, `hybrid-bonded`, `layer2-bonded` or
    /// `layer2-individual`; empty leaves the network as Metal provisions it.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["", "layer3", "hybrid", "hybrid-bonded", "layer2-bonded", "layer2-individual"]))]
    pub type_: Option<String>,
    #[serde(
        rename = "interfaceConfiguration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    pub interface_configuration: Option<Vec<InterfaceConfiguration>>,
}

/// The VLANs of one port (`eth1`, `bond0`, ...).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct InterfaceConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub name: Option<String>,
    /// VLANs as strings: a vxlan number (2 to 3999) or a virtual network UUID.
    #[serde(rename = "vlanIDS", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(max = 64)))]
    #[x_kube(validation = kube::core::Rule::new(
        "self.all(v, v.matches('^[0-9]+$') ? (int(v) >= 2 && int(v) <= 3999) : v.matches('^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'))"
    ).message("each VLAN must be a vxlan number from 2 to 3999 or the UUID of a Metal virtual network"))]
    pub vlan_ids: Option<Vec<String>>,
}

/// The pool's status: the original's fields, always present, plus conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct InstancePoolStatus {
    /// `""`, `tokenReady`, `submitted`, `ready` or `cleanupNodes`.
    #[serde(default)]
    pub status: String,
    /// Instances whose status is `managed`.
    #[serde(default)]
    pub ready: i64,
    /// The `count` last acted on.
    #[serde(default)]
    pub requested: i64,
    /// Instances still to create (> 0) or remove (< 0).
    #[serde(default)]
    pub needed: i64,
    /// Written in the clear by the original; ingot reads it but never writes it, and clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One Equinix Metal server of a pool, named `<pool>-<8 lowercase letters>`; the Node that
/// joins carries the same name.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "equinix.harvesterhci.io",
    version = "v1",
    kind = "Instance",
    plural = "instances",
    status = "InstanceStatus",
    doc = "One Equinix Metal server of an InstancePool.",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"InstanceID","type":"string","jsonPath":".status.instanceID"}"#,
    printcolumn = r#"{"name":"publicIP","type":"string","jsonPath":".status.publicIP"}"#,
    printcolumn = r#"{"name":"privateIP","type":"string","jsonPath":".status.privateIP"}"#
)]
pub struct InstanceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Retired by Equinix Metal; kept so that objects written by the original still read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facility: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metro: Option<String>,
    /// Always `custom_ipxe` for pool members.
    #[serde(
        rename = "operating_system",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub operating_system: Option<String>,
    #[serde(
        rename = "billingCycle",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["", "hourly", "daily", "monthly", "yearly"]))]
    pub billing_cycle: Option<String>,
    #[serde(rename = "projectID", default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// The first boot's cloud-config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userdata: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// iPXE script of the first boot.
    #[serde(
        rename = "ipxeScriptUrl",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ipxe_script_url: Option<String>,
    #[serde(
        rename = "publicIPv4SubnetSize",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub public_ipv4_subnet_size: Option<i64>,
    #[serde(rename = "alwaysPxe", default, skip_serializing_if = "Option::is_none")]
    pub always_pxe: Option<bool>,
    #[serde(
        rename = "hardwareReservation_id",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub hardware_reservation_id: Option<String>,
    #[serde(
        rename = "spotInstance",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub spot_instance: Option<bool>,
    #[serde(
        rename = "spotPriceMax",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub spot_price_max: Option<String>,
    #[serde(
        rename = "customData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub custom_data: Option<String>,
    #[serde(
        rename = "usersshKeys",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub user_ssh_keys: Option<Vec<String>>,
    #[serde(
        rename = "projectsshKeys",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub project_ssh_keys: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<BTreeMap<String, String>>,
    #[serde(rename = "nosshKeys", default, skip_serializing_if = "Option::is_none")]
    pub no_ssh_keys: Option<bool>,
    #[serde(
        rename = "nodeCleanupWaitInterval",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(GO_DURATION_RULE).message(GO_DURATION_MESSAGE))]
    pub node_cleanup_wait_interval: Option<String>,
    #[serde(
        rename = "managementInterfaces",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub management_interfaces: Option<Vec<String>>,
    #[serde(
        rename = "managementBondingOptions",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub management_bonding_options: Option<BTreeMap<String, String>>,
    /// Harvester release to install, e.g. `v1.4.2` (ingot's addition). Releases before v1.1
    /// get the v1.0 config schema and join port 8443; later ones the current schema and 443.
    /// Default: a current release (see docs/harvester.md).
    #[serde(
        rename = "harvesterVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new(r"self.matches('^v[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.]+)?$')").message(
        "harvesterVersion must be a Harvester release such as v1.4.2 or v1.3.0-rc1"
    ))]
    pub harvester_version: Option<String>,
    /// Boot straight into the installer, with the management MACs passed on the kernel command
    /// line, instead of the original's boot-read-reinstall (Harvester v1.1 and later; ingot's
    /// addition).
    #[serde(
        rename = "singleBoot",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub single_boot: Option<bool>,
    /// Create VLANs named by number in interfaceConfiguration that the project lacks in the
    /// pool's metro (ingot's addition; the original required them to exist).
    #[serde(
        rename = "createMissingVlans",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub create_missing_vlans: Option<bool>,
    /// Harvester ISO URL (copied from the pool's `isoUrl`; default: the release's ISO).
    #[serde(rename = "isoUrl", default, skip_serializing_if = "Option::is_none")]
    pub iso_url: Option<String>,
    /// The disk Harvester is installed on (copied from the pool; default `/dev/sda`).
    #[serde(
        rename = "installDisk",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub install_disk: Option<String>,
    #[serde(
        rename = "networkingConfiguration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub networking_configuration: Option<NetworkingConfiguration>,
    /// Copied from the pool: the server is drawn from these Inventories (see the pool's field).
    #[serde(
        rename = "inventorySelector",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub inventory_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// Copied from the pool.
    #[serde(
        rename = "inventoryNamespace",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub inventory_namespace: Option<String>,
    /// Copied from the pool.
    #[serde(
        rename = "addressPool",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub address_pool: Option<String>,
    /// Copied from the pool.
    #[serde(rename = "bootMedia", default, skip_serializing_if = "Option::is_none")]
    pub boot_media: Option<String>,
    /// Copied from the pool.
    #[serde(
        rename = "wipePolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub wipe_policy: Option<String>,
    /// Copied from the pool.
    #[serde(
        rename = "inventoryMinimum",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub inventory_minimum: Option<InventoryMinimum>,
}

/// The Instance's status: the original's fields, always present, plus conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct InstanceStatus {
    /// `""`, `queued`, `submitted`, `reinstalling`, `ready` or `managed`.
    #[serde(default)]
    pub status: String,
    /// The Equinix Metal device UUID.
    #[serde(rename = "instanceID", default)]
    pub instance_id: String,
    #[serde(rename = "publicIP", default)]
    pub public_ip: String,
    #[serde(rename = "privateIP", default)]
    pub private_ip: String,
    /// When the installing server last turned active (ingot's addition): an install that has
    /// not joined within the operator's install retry period from then is started again.
    #[serde(
        rename = "installStartedAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub install_started_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// When the current `status` began (ingot's addition): per-phase timeouts count from it.
    #[serde(
        rename = "phaseStartedAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub phase_started_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Installs started again because no Node joined (ingot's addition).
    #[serde(
        rename = "installRetries",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub install_retries: Option<i64>,
    /// Set before a reinstall is requested and cleared once it is known to be under way
    /// (ingot's addition): a restart that finds it set never requests it again.
    #[serde(
        rename = "reinstallRequestedAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub reinstall_requested_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The server's userdata no longer holds the join token and OS password (ingot's
    /// addition).
    #[serde(
        rename = "userdataScrubbed",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub userdata_scrubbed: Option<bool>,
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
