//! Request and response bodies of the Equinix Metal API, with the spec's snake_case names.
//! Requests carry only fields the spec defines; responses ignore fields they do not need.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BillingCycle {
    Hourly,
    Daily,
    Monthly,
    Yearly,
}

/// `DeviceCreateInMetroInput`.
#[derive(Clone, Default, PartialEq, Serialize)]
pub struct DeviceCreateRequest {
    pub metro: String,
    /// Retired by the API: a request with a facility is refused before it is sent.
    #[serde(skip)]
    pub facility: Option<Vec<String>>,
    pub plan: String,
    pub operating_system: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub billing_cycle: Option<BillingCycle>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipxe_script_url: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub always_pxe: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub userdata: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spot_instance: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spot_price_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hardware_reservation_id: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub project_ssh_keys: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub user_ssh_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customdata: Option<Value>,
}

impl std::fmt::Debug for DeviceCreateRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceCreateRequest")
            .field("metro", &self.metro)
            .field("facility", &self.facility)
            .field("plan", &self.plan)
            .field("operating_system", &self.operating_system)
            .field("hostname", &self.hostname)
            .field("billing_cycle", &self.billing_cycle)
            .field("ipxe_script_url", &self.ipxe_script_url)
            .field("always_pxe", &self.always_pxe)
            .field(
                "userdata",
                &crate::redacted_userdata(self.userdata.as_deref()),
            )
            .field("tags", &self.tags)
            .field("spot_instance", &self.spot_instance)
            .field("spot_price_max", &self.spot_price_max)
            .field("hardware_reservation_id", &self.hardware_reservation_id)
            .field("project_ssh_keys", &self.project_ssh_keys)
            .field("user_ssh_keys", &self.user_ssh_keys)
            .field("description", &self.description)
            .field("customdata", &self.customdata)
            .finish()
    }
}

/// `DeviceUpdateInput` (the fields ingot changes).
#[derive(Clone, Default, PartialEq, Serialize)]
pub struct DeviceUpdateRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipxe_script_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub userdata: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub always_pxe: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

impl std::fmt::Debug for DeviceUpdateRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceUpdateRequest")
            .field("ipxe_script_url", &self.ipxe_script_url)
            .field(
                "userdata",
                &crate::redacted_userdata(self.userdata.as_deref()),
            )
            .field("always_pxe", &self.always_pxe)
            .field("tags", &self.tags)
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    PowerOn,
    PowerOff,
    Reboot,
    Reinstall,
}

/// `DeviceActionInput`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceAction {
    #[serde(rename = "type")]
    pub kind: ActionType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_data: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deprovision_fast: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipxe_script_url: Option<String>,
}

impl DeviceAction {
    pub fn simple(kind: ActionType) -> Self {
        DeviceAction {
            kind,
            preserve_data: None,
            deprovision_fast: None,
            operating_system: None,
            ipxe_script_url: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Href {
    pub href: String,
}

impl Href {
    /// The last path segment: the id of the referenced object.
    pub fn id(&self) -> &str {
        self.href.rsplit('/').next().unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Meta {
    #[serde(default)]
    pub next: Option<Href>,
    #[serde(default)]
    pub total: Option<u64>,
    #[serde(default)]
    pub current_page: Option<u64>,
    #[serde(default)]
    pub last_page: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MetroRef {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub country: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct SlugRef {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub slug: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PortData {
    #[serde(default)]
    pub mac: Option<String>,
    #[serde(default)]
    pub bonded: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct BondRef {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// `Port`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Port {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    /// `NetworkPort` or `NetworkBondPort`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub data: PortData,
    #[serde(default)]
    pub network_type: Option<String>,
    #[serde(default)]
    pub disbond_operation_supported: Option<bool>,
    #[serde(default)]
    pub bond: Option<BondRef>,
    #[serde(default)]
    pub virtual_networks: Vec<Href>,
    #[serde(default)]
    pub native_virtual_network: Option<Href>,
}

/// `IPAssignment` (the fields ingot reads).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct IpAssignment {
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub address_family: Option<u8>,
    #[serde(default)]
    pub public: Option<bool>,
    #[serde(default)]
    pub management: Option<bool>,
}

/// `Device` (the fields ingot reads).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Device {
    pub id: String,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub metro: Option<MetroRef>,
    #[serde(default)]
    pub plan: Option<SlugRef>,
    #[serde(default)]
    pub operating_system: Option<SlugRef>,
    #[serde(default)]
    pub ipxe_script_url: Option<String>,
    #[serde(default)]
    pub always_pxe: Option<bool>,
    #[serde(default)]
    pub userdata: Option<String>,
    #[serde(default)]
    pub billing_cycle: Option<String>,
    #[serde(default)]
    pub spot_instance: Option<bool>,
    #[serde(default)]
    pub spot_price_max: Option<f64>,
    #[serde(default)]
    pub network_ports: Vec<Port>,
    #[serde(default)]
    pub ip_addresses: Vec<IpAssignment>,
    #[serde(default)]
    pub created_at: Option<String>,
}

/// `DeviceList`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct DeviceList {
    #[serde(default)]
    pub devices: Vec<Device>,
    #[serde(default)]
    pub meta: Meta,
}

/// Filters of `GET /projects/{id}/devices`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceFilter {
    pub tag: Option<String>,
    /// Partial match on the API side.
    pub hostname: Option<String>,
    pub metro: Option<String>,
    /// Page size, at most 1000 (the default).
    pub per_page: Option<u32>,
}

/// `PortAssignInput`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PortAssign {
    pub vnid: String,
}

/// The body of `convert/layer-2` (`PortAssignInput`, `vnid` optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PortConvertLayer2 {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vnid: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestIp {
    pub address_family: u8,
    pub public: bool,
}

/// `PortConvertLayer3Input`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PortConvertLayer3 {
    pub request_ips: Vec<RequestIp>,
}

impl PortConvertLayer3 {
    /// Public IPv4, private IPv4 and public IPv6, as a new device gets.
    pub fn default_ips() -> Self {
        PortConvertLayer3 {
            request_ips: vec![
                RequestIp {
                    address_family: 4,
                    public: true,
                },
                RequestIp {
                    address_family: 4,
                    public: false,
                },
                RequestIp {
                    address_family: 6,
                    public: true,
                },
            ],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VlanAssignmentState {
    Assigned,
    Unassigned,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VlanAssignment {
    /// VLAN id or number.
    pub vlan: String,
    pub state: VlanAssignmentState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native: Option<bool>,
}

/// `PortVlanAssignmentBatchCreateInput`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VlanBatchRequest {
    pub vlan_assignments: Vec<VlanAssignment>,
}

/// `PortVlanAssignmentBatch`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct VlanBatch {
    pub id: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub quantity: Option<u64>,
    #[serde(default)]
    pub error_messages: Vec<String>,
}

/// `VirtualNetwork`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct VirtualNetwork {
    pub id: String,
    #[serde(default)]
    pub vxlan: Option<u32>,
    #[serde(default)]
    pub metro_code: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct VirtualNetworkList {
    #[serde(default)]
    pub virtual_networks: Vec<VirtualNetwork>,
}

/// `VirtualNetworkCreateInput`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VirtualNetworkCreateRequest {
    pub metro: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vxlan: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Nic {
    #[serde(default)]
    pub count: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PlanSpecs {
    #[serde(default)]
    pub nics: Vec<Nic>,
}

/// `Plan`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Plan {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub slug: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub specs: Option<PlanSpecs>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PlanList {
    #[serde(default)]
    pub plans: Vec<Plan>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MetroList {
    #[serde(default)]
    pub metros: Vec<MetroRef>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CapacityLevel {
    #[serde(default)]
    pub level: Option<String>,
}

/// `CapacityList`: metro code -> plan slug -> level.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CapacityList {
    #[serde(default)]
    pub capacity: BTreeMap<String, BTreeMap<String, CapacityLevel>>,
}

/// `Error`: either `error` or `errors` is set.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ApiErrorBody {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub errors: Vec<String>,
}

impl ApiErrorBody {
    pub fn message(&self) -> String {
        let mut parts: Vec<&str> = self.errors.iter().map(String::as_str).collect();
        if let Some(e) = &self.error {
            parts.insert(0, e);
        }
        parts.join("; ")
    }
}
