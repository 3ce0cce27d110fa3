//! `machine.sapcloud.io/v1alpha1`: the Gardener machine-controller-manager resources, as far as
//! a machine controller reads and writes them. Gardener owns these CRDs; ingot installs
//! Gardener's own files and keeps every field it does not model (`extra`) when it writes back.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The finalizer MCM and its machine controllers put on Machines and MachineClasses.
pub const MCM_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
/// The finalizer a machine controller puts on the Secrets it reads.
pub const MC_SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";
/// The label on a Machine naming its Node.
pub const NODE_LABEL: &str = "node";
/// The `provider` of an Equinix Metal MachineClass.
pub const PROVIDER_EQUINIX_METAL: &str = "EquinixMetal";

/// A machine, reconciled by a machine controller into a server and a Node.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "Machine",
    plural = "machines",
    namespaced,
    schema = "disabled",
    status = "MachineStatus"
)]
pub struct MachineSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassSpec>,
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Everything else of the spec (nodeTemplate, timeouts, ...), kept verbatim.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Reference from a Machine (or a template) to its class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClassSpec {
    #[serde(rename = "apiGroup", default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MachineStatus {
    #[serde(
        rename = "currentStatus",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub current_status: Option<CurrentStatus>,
    #[serde(
        rename = "lastOperation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_operation: Option<LastOperation>,
    /// Copies of the Node's conditions, kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Value>>,
    #[serde(
        rename = "lastKnownState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_known_state: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CurrentStatus {
    /// `Pending`, `Available`, `Running`, `Terminating`, `Unknown`, `Failed`,
    /// `CrashLoopBackOff`, ...; empty while the machine is being created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(
        rename = "timeoutActive",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_active: Option<bool>,
    #[serde(
        rename = "lastUpdateTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_update_time: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct LastOperation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "errorCode", default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(
        rename = "lastUpdateTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_update_time: Option<String>,
    /// `Processing`, `Failed` or `Successful`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `Create`, `Update`, `InPlaceUpdate`, `DrainNode`, `HealthCheck` or `Delete`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// A machine class: provider, provider spec and credentials. It has no `spec` wrapper.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineClass",
    plural = "machineclasses",
    namespaced,
    schema = "disabled",
    no_spec
)]
pub struct MachineClassFields {
    /// Provider-specific spec, kept raw.
    #[serde(rename = "providerSpec", default)]
    pub provider_spec: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(rename = "secretRef", default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    #[serde(
        rename = "credentialsSecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub credentials_secret_ref: Option<SecretReference>,
    #[serde(
        rename = "nodeTemplate",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_template: Option<Value>,
}

/// The Equinix Metal provider spec of a MachineClass (`providerSpec`). Unknown keys such as
/// the retired `facilities` are ignored, as the Go provider ignores them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct EquinixMetalProviderSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metro: Option<String>,
    #[serde(rename = "machineType", default)]
    pub machine_type: String,
    #[serde(rename = "billingCycle", default)]
    pub billing_cycle: String,
    /// Upper case on the wire: the provider's name for the operating system slug.
    #[serde(rename = "OS", default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(
        rename = "ipxeScriptUrl",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ipxe_script_url: Option<String>,
    #[serde(rename = "projectID", default)]
    pub project_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(rename = "sshKeys", default, skip_serializing_if = "Option::is_none")]
    pub ssh_keys: Option<Vec<String>>,
    #[serde(rename = "userdata", default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(
        rename = "reservationIDs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub reservation_ids: Option<Vec<String>>,
    #[serde(
        rename = "reservedDevicesOnly",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub reserved_devices_only: Option<bool>,
}

/// The `provider` of a MachineClass whose machines are Inventories (servers on premises).
pub const PROVIDER_INVENTORY: &str = "Inventory";

/// The provider spec of an `Inventory` MachineClass: which Inventories, where their addresses
/// come from, and the OS image they boot. The machines' user data is the class Secret's
/// `userData`, as for every provider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InventoryProviderSpec {
    /// The namespace of the Inventories (and of the AddressPool).
    #[serde(default)]
    pub inventory_namespace: String,
    /// Which Inventories of that namespace (their labels); empty: any.
    #[serde(default)]
    pub inventory_selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    /// The AddressPool of `inventoryNamespace` the servers' static addresses come from.
    #[serde(default)]
    pub address_pool: String,
    /// The OS image: kernel, initrd and kernel parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<InventoryImage>,
    /// `kubernetes.io/cluster/<name>` (the machines' owner) and `kubernetes.io/role/<role>`, as
    /// on Equinix Metal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// What a released machine's server goes through before it is freed: `none` (the default)
    /// or `metadata` (the site's wipe image erases its disks' partition tables first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wipe_policy: Option<String>,
    /// The least a machine's server must have (`cores`, `memoryGiB`, `diskGiB`), as an
    /// InstancePool's `inventoryMinimum`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_minimum: Option<crate::equinix::InventoryMinimum>,
}

/// The OS image an `Inventory` MachineClass boots.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct InventoryImage {
    #[serde(default)]
    pub kernel: String,
    #[serde(default)]
    pub initrd: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cmdline: String,
}

/// A set of Machines kept at `replicas` (upstream MCM reconciles it; ingot only reads it).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineSet",
    plural = "machinesets",
    namespaced,
    schema = "disabled",
    status = "Value"
)]
pub struct MachineSetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(
        rename = "machineClass",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub machine_class: Option<ClassSpec>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A rolling-updated set of MachineSets (upstream MCM reconciles it; ingot only reads it).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineDeployment",
    plural = "machinedeployments",
    namespaced,
    schema = "disabled",
    status = "Value"
)]
pub struct MachineDeploymentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}
