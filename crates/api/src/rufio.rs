//! `bmc.tinkerbell.org/v1alpha1`: Machine, Job and Task in the shapes Seeder installs (Rufio
//! v0.3.2), accepting the fields newer Rufio releases added (`preferredOrder`,
//! `redfish.useBasicAuth`, `redfish.systemName`, `intelAMT.hostScheme`, `bootDevice`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, SecretReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A server reachable through its baseboard management controller.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "bmc.tinkerbell.org",
    version = "v1alpha1",
    kind = "Machine",
    plural = "machines",
    namespaced,
    category = "tinkerbell",
    status = "MachineStatus",
    doc = "A server reachable through its baseboard management controller (BMC)."
)]
pub struct MachineSpec {
    pub connection: Connection,
}

/// How to reach a BMC.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Connection {
    /// Host name, IP address or URL of the BMC.
    #[schemars(length(min = 1))]
    pub host: String,
    /// Port of the BMC (IPMI 623 by default; for Redfish use providerOptions.redfish.port).
    #[serde(default = "default_ipmi_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i64,
    /// Secret with `username` and `password` keys.
    #[serde(
        rename = "authSecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub auth_secret_ref: Option<SecretReference>,
    /// Skip TLS certificate verification. Rufio ignored this and never verified; ingot
    /// verifies unless it is true.
    #[serde(rename = "insecureTLS")]
    pub insecure_tls: bool,
    #[serde(
        rename = "providerOptions",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_options: Option<ProviderOptions>,
}

fn default_ipmi_port() -> i64 {
    623
}

/// Per-protocol options.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ProviderOptions {
    #[serde(rename = "intelAMT", default, skip_serializing_if = "Option::is_none")]
    pub intel_amt: Option<IntelAmtOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipmitool: Option<IpmitoolOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redfish: Option<RedfishOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc: Option<RpcOptions>,
    /// Order in which protocols are tried (newer Rufio).
    #[serde(
        rename = "preferredOrder",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_order: Option<Vec<String>>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct IntelAmtOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    #[serde(
        rename = "hostScheme",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["http", "https"]))]
    pub host_scheme: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct IpmitoolOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i64>,
    /// IPMI cipher suite: 3 or 17 (suite 0 has no authentication and is refused).
    #[serde(
        rename = "cipherSuite",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 8))]
    #[x_kube(validation = kube::core::Rule::new("self in ['', '3', '17']").message(
        "cipherSuite must be 3 (HMAC-SHA1, AES-128) or 17 (HMAC-SHA256, AES-128); suite 0 sends no authentication and is never used"
    ))]
    pub cipher_suite: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RedfishOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i64>,
    #[serde(
        rename = "useBasicAuth",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_basic_auth: Option<bool>,
    #[serde(
        rename = "systemName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub system_name: Option<String>,
}

/// Rufio's RPC provider options, kept so that such Machines read and round-trip.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RpcOptions {
    #[serde(rename = "consumerURL")]
    pub consumer_url: String,
    #[serde(
        rename = "logNotificationsDisabled",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub log_notifications_disabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RpcRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<RpcSignature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac: Option<RpcHmac>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<RpcExperimental>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RpcRequest {
    #[serde(
        rename = "httpContentType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub http_content_type: Option<String>,
    #[serde(
        rename = "httpMethod",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub http_method: Option<String>,
    #[serde(
        rename = "staticHeaders",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub static_headers: Option<BTreeMap<String, Vec<String>>>,
    #[serde(
        rename = "timestampFormat",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub timestamp_format: Option<String>,
    #[serde(
        rename = "timestampHeader",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub timestamp_header: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RpcSignature {
    #[serde(
        rename = "headerName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub header_name: Option<String>,
    #[serde(
        rename = "appendAlgoToHeaderDisabled",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub append_algo_to_header_disabled: Option<bool>,
    #[serde(
        rename = "includedPayloadHeaders",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub included_payload_headers: Option<Vec<String>>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RpcHmac {
    #[serde(
        rename = "prefixSigDisabled",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub prefix_sig_disabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<BTreeMap<String, Vec<SecretReference>>>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RpcExperimental {
    #[serde(
        rename = "customRequestPayload",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub custom_request_payload: Option<String>,
    #[serde(rename = "dotPath", default, skip_serializing_if = "Option::is_none")]
    pub dot_path: Option<String>,
}

/// Power state as Rufio reports it: `on`, `off` or `unknown`.
pub mod power_state {
    pub const ON: &str = "on";
    pub const OFF: &str = "off";
    pub const UNKNOWN: &str = "unknown";
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MachineStatus {
    #[serde(
        rename = "powerState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["on", "off", "unknown"]))]
    pub power_state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MachineCondition>,
}

/// Rufio's Machine condition: type `Contactable`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MachineCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(
        rename = "lastUpdateTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A sequence of BMC actions on one Machine, run in order.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "bmc.tinkerbell.org",
    version = "v1alpha1",
    kind = "Job",
    plural = "jobs",
    namespaced,
    shortname = "j",
    category = "tinkerbell",
    status = "JobStatus",
    doc = "A sequence of BMC actions on one Machine, run in order."
)]
pub struct JobSpec {
    /// The Machine whose BMC runs the tasks.
    #[serde(rename = "machineRef")]
    pub machine_ref: MachineRef,
    /// Actions, each with exactly one of powerAction, oneTimeBootDeviceAction,
    /// virtualMediaAction or bootDevice.
    #[schemars(length(min = 1, max = 32))]
    pub tasks: Vec<Action>,
}

/// Reference to a Machine. Rufio types it as a full ObjectReference; only name and namespace
/// are read.
pub type MachineRef = ObjectReference;

/// One BMC action: exactly one of powerAction, oneTimeBootDeviceAction, virtualMediaAction
/// or bootDevice (Rufio's `maxProperties: 1`, plus at least one).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[schemars(extend("maxProperties" = 1, "minProperties" = 1))]
pub struct Action {
    /// `on`, `off` (hard), `soft`, `status`, `cycle` or `reset`.
    #[serde(
        rename = "powerAction",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["on", "off", "soft", "status", "cycle", "reset"]))]
    pub power_action: Option<String>,
    #[serde(
        rename = "oneTimeBootDeviceAction",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub one_time_boot_device_action: Option<OneTimeBootDeviceAction>,
    #[serde(
        rename = "virtualMediaAction",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub virtual_media_action: Option<VirtualMediaAction>,
    /// Newer Rufio's boot device action (once or persistent).
    #[serde(
        rename = "bootDevice",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub boot_device: Option<BootDeviceAction>,
}

const BOOT_DEVICES: [&str; 5] = ["pxe", "disk", "bios", "cdrom", "safe"];

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct OneTimeBootDeviceAction {
    /// Boot devices; the first is used: `pxe`, `disk`, `bios`, `cdrom` or `safe`.
    #[schemars(length(min = 1, max = 8), inner(length(max = 16)))]
    #[x_kube(validation = kube::core::Rule::new("self.all(d, d in ['pxe', 'disk', 'bios', 'cdrom', 'safe'])")
        .message("device must be one of pxe, disk, bios, cdrom, safe"))]
    pub device: Vec<String>,
    #[serde(rename = "efiBoot", default, skip_serializing_if = "Option::is_none")]
    pub efi_boot: Option<bool>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct BootDeviceAction {
    #[schemars(extend("enum" = BOOT_DEVICES))]
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    #[serde(rename = "efiBoot", default, skip_serializing_if = "Option::is_none")]
    pub efi_boot: Option<bool>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct VirtualMediaAction {
    /// Image to insert; empty ejects.
    #[serde(rename = "mediaURL", default, skip_serializing_if = "Option::is_none")]
    pub media_url: Option<String>,
    /// Media kind, e.g. `CD`.
    pub kind: String,
}

/// Condition of a Job (`Running`, `Completed`, `Failed`) or a Task (`Completed`, `Failed`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ActionCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct JobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ActionCondition>,
    #[serde(rename = "startTime", default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(
        rename = "completionTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub completion_time: Option<Time>,
}

/// One BMC action with the connection it runs against.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "bmc.tinkerbell.org",
    version = "v1alpha1",
    kind = "Task",
    plural = "tasks",
    namespaced,
    shortname = "t",
    category = "tinkerbell",
    status = "TaskStatus",
    doc = "One BMC action and the connection it runs against."
)]
pub struct TaskSpec {
    pub task: Action,
    pub connection: Connection,
}

pub type TaskStatus = JobStatus;
