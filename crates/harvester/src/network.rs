//! Port and VLAN plans for the five Equinix Metal network modes of the fork's README.
//!
//! [`plan`] is a pure function from the desired mode and VLANs plus the device's current ports
//! to an ordered list of [`Step`]s. It is idempotent: a converged device gives an empty plan,
//! and re-planning after any prefix of a plan was applied gives exactly the rest of it.
//! [`apply`] is the same model run forward (used by tests and emulators): it applies one step
//! to a port list with the preconditions Metal enforces.
//!
//! Target state per mode (ports `ethN` are physical, `bondN` are bonds):
//!
//! | mode | physical ports | bonds | VLANs go on |
//! |---|---|---|---|
//! | `layer3` (Metal's default) | all bonded | layer 3 | nowhere |
//! | `hybrid` | odd `ethN` unbonded (layer 2), even bonded | layer 3 | the odd, unbonded ports |
//! | `hybrid-bonded` | all bonded | layer 3 | the bond |
//! | `layer2-bonded` | all bonded | layer 2 | the bond |
//! | `layer2-individual` | all unbonded (layer 2) | layer 2 | the individual ports |
//!
//! Step order: create missing VLANs (opt-in), unassign VLANs that are not wanted, bond ports,
//! convert bonds to the mode's layer, disbond ports, assign wanted VLANs. A port that does not
//! support disbonding stays bonded (as the original left it); asking for VLANs on it is an
//! error.

use std::collections::BTreeSet;
use std::fmt;

/// `NetworkPort` or `NetworkBondPort` in Metal's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortKind {
    Physical,
    Bond,
}

/// A port's network type: layer 3 (routed, Metal's IPs) or layer 2 (VLANs only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    L3,
    L2,
}

impl Layer {
    /// Maps Metal's `Port.network_type` onto the layer: `layer3`, `hybrid` and
    /// `hybrid-bonded` keep the bond routed (layer 3); `layer2-bonded`, `layer2-individual`
    /// (and the per-port `layer2`) are layer 2. `None` for anything else.
    pub fn from_network_type(network_type: &str) -> Option<Self> {
        match network_type {
            "layer3" | "hybrid" | "hybrid-bonded" => Some(Layer::L3),
            "layer2-bonded" | "layer2-individual" | "layer2" => Some(Layer::L2),
            _ => None,
        }
    }
}

impl PortKind {
    /// Maps Metal's `Port.type`: `NetworkPort` or `NetworkBondPort`.
    pub fn from_metal_type(port_type: &str) -> Option<Self> {
        match port_type {
            "NetworkPort" => Some(PortKind::Physical),
            "NetworkBondPort" => Some(PortKind::Bond),
            _ => None,
        }
    }
}

/// A VLAN assigned to a port or known in the project: its vxlan number and/or its UUID.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PortVlan {
    pub vxlan: Option<u16>,
    pub id: Option<String>,
}

impl PortVlan {
    pub fn vxlan(vxlan: u16) -> Self {
        Self {
            vxlan: Some(vxlan),
            id: None,
        }
    }

    fn matches(&self, wanted: &VlanRef) -> bool {
        match wanted {
            VlanRef::Vxlan(n) => self.vxlan == Some(*n),
            VlanRef::Id(id) => self
                .id
                .as_deref()
                .is_some_and(|mine| mine.eq_ignore_ascii_case(id)),
        }
    }

    fn reference(&self) -> Option<VlanRef> {
        match (&self.id, self.vxlan) {
            (Some(id), _) => Some(VlanRef::Id(id.to_ascii_lowercase())),
            (None, Some(n)) => Some(VlanRef::Vxlan(n)),
            (None, None) => None,
        }
    }
}

/// A port of a device as the provider reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub kind: PortKind,
    pub mac: Option<String>,
    /// Whether a physical port is a member of its bond (`data.bonded`).
    pub bonded: bool,
    /// The port's layer. The plan reads it for bonds only (Metal's `network_type` is the
    /// composite type of the bond); a physical port's state is its `bonded` flag.
    pub layer: Layer,
    pub vlans: Vec<PortVlan>,
    /// `disbond_operation_supported`.
    pub disbond_supported: bool,
}

impl Port {
    /// A physical port as Metal provisions it: bonded, layer 3, no VLANs, disbond supported.
    pub fn physical(name: &str, mac: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: PortKind::Physical,
            mac: Some(mac.to_owned()),
            bonded: true,
            layer: Layer::L3,
            vlans: Vec::new(),
            disbond_supported: true,
        }
    }

    /// A bond port as Metal provisions it: layer 3, no VLANs.
    pub fn bond(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: PortKind::Bond,
            mac: None,
            bonded: true,
            layer: Layer::L3,
            vlans: Vec::new(),
            disbond_supported: false,
        }
    }

    fn eth_index(&self) -> Option<u32> {
        self.name.strip_prefix("eth")?.parse().ok()
    }
}

/// A VLAN as `vlanIDS` names it: a vxlan number (2-3999) or a virtual network UUID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VlanRef {
    Vxlan(u16),
    Id(String),
}

impl VlanRef {
    /// Parses one `vlanIDS` entry; `None` when it is neither a vxlan number nor a UUID.
    pub fn parse(value: &str) -> Option<Self> {
        if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            return value
                .parse::<u16>()
                .ok()
                .filter(|n| (2..=3999).contains(n))
                .map(VlanRef::Vxlan);
        }
        let groups: Vec<&str> = value.split('-').collect();
        let lens = [8, 4, 4, 4, 12];
        if groups.len() == 5
            && groups
                .iter()
                .zip(lens)
                .all(|(g, l)| g.len() == l && g.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Some(VlanRef::Id(value.to_ascii_lowercase()));
        }
        None
    }
}

impl fmt::Display for VlanRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VlanRef::Vxlan(n) => write!(f, "{n}"),
            VlanRef::Id(id) => f.write_str(id),
        }
    }
}

/// The five network modes of `networkingConfiguration.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkMode {
    Layer3,
    Hybrid,
    HybridBonded,
    Layer2Bonded,
    Layer2Individual,
}

impl NetworkMode {
    pub const ALL: [NetworkMode; 5] = [
        NetworkMode::Layer3,
        NetworkMode::Hybrid,
        NetworkMode::HybridBonded,
        NetworkMode::Layer2Bonded,
        NetworkMode::Layer2Individual,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Layer3 => "layer3",
            NetworkMode::Hybrid => "hybrid",
            NetworkMode::HybridBonded => "hybrid-bonded",
            NetworkMode::Layer2Bonded => "layer2-bonded",
            NetworkMode::Layer2Individual => "layer2-individual",
        }
    }

    /// `None` for an absent or empty type (leave the network as it is).
    pub fn parse(value: Option<&str>) -> Result<Option<Self>, NetworkError> {
        match value {
            None | Some("") => Ok(None),
            Some(v) => Self::ALL
                .into_iter()
                .find(|m| m.as_str() == v)
                .map(Some)
                .ok_or_else(|| NetworkError::UnknownMode {
                    value: v.to_owned(),
                }),
        }
    }

    fn bond_layer(self) -> Layer {
        match self {
            NetworkMode::Layer3 | NetworkMode::Hybrid | NetworkMode::HybridBonded => Layer::L3,
            NetworkMode::Layer2Bonded | NetworkMode::Layer2Individual => Layer::L2,
        }
    }

    /// Whether this physical port ends bonded (before the disbond-support exception).
    fn wants_bonded(self, port: &Port) -> bool {
        match self {
            NetworkMode::Layer3 | NetworkMode::HybridBonded | NetworkMode::Layer2Bonded => true,
            NetworkMode::Hybrid => port.eth_index().is_none_or(|i| i.is_multiple_of(2)),
            NetworkMode::Layer2Individual => false,
        }
    }

    fn vlan_hint(self) -> &'static str {
        match self {
            NetworkMode::Layer3 => {
                "layer3 carries no VLANs: remove interfaceConfiguration, or pick hybrid, hybrid-bonded, layer2-bonded or layer2-individual"
            }
            NetworkMode::Hybrid => {
                "in hybrid mode VLANs go on the odd ports that are unbonded from bond0"
            }
            NetworkMode::HybridBonded | NetworkMode::Layer2Bonded => "VLANs go on the bond",
            NetworkMode::Layer2Individual => "VLANs go on the individual physical ports",
        }
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `interfaceConfiguration` entry: a port name and its VLANs (as strings).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct InterfaceVlans {
    pub name: Option<String>,
    pub vlan_ids: Vec<String>,
}

impl InterfaceVlans {
    pub fn new(name: &str, vlans: &[&str]) -> Self {
        Self {
            name: Some(name.to_owned()),
            vlan_ids: vlans.iter().map(|v| (*v).to_owned()).collect(),
        }
    }
}

/// Everything [`plan`] reads.
#[derive(Clone, Debug, Default)]
pub struct PlanInput<'a> {
    /// `networkingConfiguration.type`; absent or empty leaves the network alone.
    pub mode: Option<&'a str>,
    /// `networkingConfiguration.interfaceConfiguration`.
    pub interfaces: &'a [InterfaceVlans],
    /// The device's ports, as the provider reports them now.
    pub ports: &'a [Port],
    /// Create VLANs (by vxlan) that the project does not have yet.
    pub create_vlans: bool,
    /// The VLANs the project has in the device's metro (read only when `create_vlans`).
    pub project_vlans: &'a [PortVlan],
}

/// One provider call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    CreateVlan { vxlan: u16 },
    UnassignVlan { port: String, vlan: VlanRef },
    Bond { port: String },
    ConvertToLayer2 { port: String },
    ConvertToLayer3 { port: String },
    Disbond { port: String },
    AssignVlan { port: String, vlan: VlanRef },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::CreateVlan { vxlan } => write!(f, "create VLAN {vxlan}"),
            Step::UnassignVlan { port, vlan } => write!(f, "unassign VLAN {vlan} from {port}"),
            Step::Bond { port } => write!(f, "bond {port}"),
            Step::ConvertToLayer2 { port } => write!(f, "convert {port} to layer 2"),
            Step::ConvertToLayer3 { port } => write!(f, "convert {port} to layer 3"),
            Step::Disbond { port } => write!(f, "disbond {port}"),
            Step::AssignVlan { port, vlan } => write!(f, "assign VLAN {vlan} to {port}"),
        }
    }
}

/// A networking configuration that cannot be planned, or a step the model refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    #[error(
        "networkingConfiguration.type {value:?} is not a network mode; use layer3, hybrid, hybrid-bonded, layer2-bonded or layer2-individual"
    )]
    UnknownMode { value: String },
    #[error(
        "networkingConfiguration.interfaceConfiguration lists VLANs but networkingConfiguration.type is empty; set the type (e.g. hybrid) or remove the VLANs"
    )]
    VlansWithoutMode,
    #[error("{field} is missing; name the port, e.g. eth1 or bond0")]
    MissingPortName { field: String },
    #[error("{field} names port {name:?}, which the device does not have; ports that exist: {}", existing.join(", "))]
    UnknownPort {
        field: String,
        name: String,
        existing: Vec<String>,
    },
    #[error(
        "{field} has {value:?}, which is neither a vxlan number from 2 to 3999 nor a virtual network UUID"
    )]
    InvalidVlan { field: String, value: String },
    #[error("{field}: mode {mode} does not allow VLANs on {port}; {hint} (ports that may carry VLANs here: {})", allowed_list(.allowed))]
    VlanNotAllowed {
        field: String,
        port: String,
        mode: NetworkMode,
        hint: &'static str,
        allowed: Vec<String>,
    },
    #[error(
        "{field}: mode {mode} needs {port} unbonded for its VLANs, but Metal does not support disbonding {port} on this device; move the VLANs to another port"
    )]
    DisbondUnsupported {
        field: String,
        port: String,
        mode: NetworkMode,
    },
    #[error("mode {mode} needs a bond port (bond0), and the device reports none")]
    NoBond { mode: NetworkMode },
    #[error("step \"{step}\" refused: {reason}")]
    Refused { step: String, reason: &'static str },
}

fn allowed_list(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "none".to_owned()
    } else {
        allowed.join(", ")
    }
}

/// Which physical ports end bonded: the mode's wish, except that a port that cannot be
/// disbonded stays bonded.
fn ends_bonded(mode: NetworkMode, port: &Port) -> bool {
    mode.wants_bonded(port) || (port.bonded && !port.disbond_supported)
}

fn may_carry_vlans(mode: NetworkMode, port: &Port) -> bool {
    match mode {
        NetworkMode::Layer3 => false,
        NetworkMode::HybridBonded | NetworkMode::Layer2Bonded => port.kind == PortKind::Bond,
        NetworkMode::Hybrid | NetworkMode::Layer2Individual => {
            port.kind == PortKind::Physical && !mode.wants_bonded(port)
        }
    }
}

/// The desired VLANs per port, in port order, validated.
fn desired_vlans(
    mode: NetworkMode,
    interfaces: &[InterfaceVlans],
    ports: &[Port],
) -> Result<Vec<(usize, Vec<VlanRef>)>, NetworkError> {
    let mut wanted: Vec<Vec<VlanRef>> = vec![Vec::new(); ports.len()];
    for (i, entry) in interfaces.iter().enumerate() {
        let base = format!("networkingConfiguration.interfaceConfiguration[{i}]");
        let name = entry
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| NetworkError::MissingPortName {
                field: format!("{base}.name"),
            })?;
        let idx =
            ports
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| NetworkError::UnknownPort {
                    field: format!("{base}.name"),
                    name: name.to_owned(),
                    existing: ports.iter().map(|p| p.name.clone()).collect(),
                })?;
        let port = &ports[idx];
        let mut refs = Vec::new();
        for (j, raw) in entry.vlan_ids.iter().enumerate() {
            let vlan = VlanRef::parse(raw).ok_or_else(|| NetworkError::InvalidVlan {
                field: format!("{base}.vlanIDS[{j}]"),
                value: raw.clone(),
            })?;
            refs.push(vlan);
        }
        if refs.is_empty() {
            continue;
        }
        if !may_carry_vlans(mode, port) {
            return Err(NetworkError::VlanNotAllowed {
                field: format!("{base}.vlanIDS"),
                port: name.to_owned(),
                mode,
                hint: mode.vlan_hint(),
                allowed: ports
                    .iter()
                    .filter(|p| may_carry_vlans(mode, p))
                    .map(|p| p.name.clone())
                    .collect(),
            });
        }
        if port.kind == PortKind::Physical && ends_bonded(mode, port) {
            return Err(NetworkError::DisbondUnsupported {
                field: format!("{base}.vlanIDS"),
                port: name.to_owned(),
                mode,
            });
        }
        for r in refs {
            if !wanted[idx].contains(&r) {
                wanted[idx].push(r);
            }
        }
    }
    Ok(wanted.into_iter().enumerate().collect())
}

/// The ordered steps that take `input.ports` to the requested mode and VLANs.
pub fn plan(input: &PlanInput<'_>) -> Result<Vec<Step>, NetworkError> {
    let Some(mode) = NetworkMode::parse(input.mode)? else {
        if input.interfaces.iter().any(|i| !i.vlan_ids.is_empty()) {
            return Err(NetworkError::VlansWithoutMode);
        }
        return Ok(Vec::new());
    };
    let ports = input.ports;
    if !ports.iter().any(|p| p.kind == PortKind::Bond) {
        return Err(NetworkError::NoBond { mode });
    }
    let wanted = desired_vlans(mode, input.interfaces, ports)?;
    let mut steps = Vec::new();

    if input.create_vlans {
        let mut seen = BTreeSet::new();
        for (_, vlans) in &wanted {
            for v in vlans {
                if let VlanRef::Vxlan(n) = v {
                    let known = input.project_vlans.iter().any(|p| p.vxlan == Some(*n));
                    if !known && seen.insert(*n) {
                        steps.push(Step::CreateVlan { vxlan: *n });
                    }
                }
            }
        }
    }

    for ((_, vlans), port) in wanted.iter().zip(ports) {
        for assigned in &port.vlans {
            if !vlans.iter().any(|w| assigned.matches(w))
                && let Some(vlan) = assigned.reference()
            {
                steps.push(Step::UnassignVlan {
                    port: port.name.clone(),
                    vlan,
                });
            }
        }
    }

    let physical = || ports.iter().filter(|p| p.kind == PortKind::Physical);
    for port in physical() {
        if !port.bonded && ends_bonded(mode, port) {
            steps.push(Step::Bond {
                port: port.name.clone(),
            });
        }
    }
    for port in ports.iter().filter(|p| p.kind == PortKind::Bond) {
        if port.layer != mode.bond_layer() {
            let port = port.name.clone();
            steps.push(match mode.bond_layer() {
                Layer::L2 => Step::ConvertToLayer2 { port },
                Layer::L3 => Step::ConvertToLayer3 { port },
            });
        }
    }
    for port in physical() {
        if port.bonded && !ends_bonded(mode, port) {
            steps.push(Step::Disbond {
                port: port.name.clone(),
            });
        }
    }

    for ((_, vlans), port) in wanted.iter().zip(ports) {
        for w in vlans {
            if !port.vlans.iter().any(|a| a.matches(w)) {
                steps.push(Step::AssignVlan {
                    port: port.name.clone(),
                    vlan: w.clone(),
                });
            }
        }
    }
    Ok(steps)
}

/// Applies one step to a port list and the project's VLANs, with Metal's preconditions: a
/// port must be free of VLANs to be bonded, must support disbonding to be disbonded, and a
/// physical port carries VLANs only when unbonded. Assigning a VLAN by vxlan needs the VLAN to
/// exist in the project. This is the model [`plan`] plans against.
pub fn apply(
    ports: &mut [Port],
    project_vlans: &mut Vec<PortVlan>,
    step: &Step,
) -> Result<(), NetworkError> {
    let refused = |reason| NetworkError::Refused {
        step: step.to_string(),
        reason,
    };
    let find = |ports: &mut [Port], name: &str| -> Option<usize> {
        ports.iter().position(|p| p.name == name)
    };
    match step {
        Step::CreateVlan { vxlan } => {
            if project_vlans.iter().any(|v| v.vxlan == Some(*vxlan)) {
                return Err(refused("the vxlan exists in this metro"));
            }
            project_vlans.push(PortVlan::vxlan(*vxlan));
        }
        Step::UnassignVlan { port, vlan } => {
            let i = find(ports, port).ok_or_else(|| refused("no such port"))?;
            let before = ports[i].vlans.len();
            ports[i].vlans.retain(|a| !a.matches(vlan));
            if ports[i].vlans.len() == before {
                return Err(refused("the VLAN is not assigned to the port"));
            }
        }
        Step::Bond { port } => {
            let i = find(ports, port).ok_or_else(|| refused("no such port"))?;
            if ports[i].kind != PortKind::Physical || ports[i].bonded {
                return Err(refused("only an unbonded physical port can be bonded"));
            }
            if !ports[i].vlans.is_empty() {
                return Err(refused("the port still has VLANs"));
            }
            let bond_layer = ports
                .iter()
                .find(|p| p.kind == PortKind::Bond)
                .map_or(Layer::L3, |b| b.layer);
            ports[i].bonded = true;
            ports[i].layer = bond_layer;
        }
        Step::Disbond { port } => {
            let i = find(ports, port).ok_or_else(|| refused("no such port"))?;
            if ports[i].kind != PortKind::Physical || !ports[i].bonded {
                return Err(refused("only a bonded physical port can be disbonded"));
            }
            if !ports[i].disbond_supported {
                return Err(refused("the port does not support disbonding"));
            }
            ports[i].bonded = false;
            ports[i].layer = Layer::L2;
        }
        Step::ConvertToLayer2 { port } | Step::ConvertToLayer3 { port } => {
            let layer = if matches!(step, Step::ConvertToLayer2 { .. }) {
                Layer::L2
            } else {
                Layer::L3
            };
            let i = find(ports, port).ok_or_else(|| refused("no such port"))?;
            if ports[i].kind != PortKind::Bond {
                return Err(refused("only a bond is converted"));
            }
            if ports[i].layer == layer {
                return Err(refused("the bond is in that layer already"));
            }
            ports[i].layer = layer;
            for p in ports.iter_mut() {
                if p.kind == PortKind::Physical && p.bonded {
                    p.layer = layer;
                }
            }
        }
        Step::AssignVlan { port, vlan } => {
            if let VlanRef::Vxlan(n) = vlan
                && !project_vlans.iter().any(|v| v.vxlan == Some(*n))
            {
                return Err(refused("the VLAN does not exist in the project"));
            }
            let i = find(ports, port).ok_or_else(|| refused("no such port"))?;
            if ports[i].kind == PortKind::Physical && ports[i].bonded {
                return Err(refused("a bonded physical port cannot carry VLANs"));
            }
            if ports[i].vlans.iter().any(|a| a.matches(vlan)) {
                return Err(refused("the VLAN is assigned already"));
            }
            let known = project_vlans
                .iter()
                .find(|v| v.matches(vlan))
                .cloned()
                .unwrap_or_else(|| match vlan {
                    VlanRef::Vxlan(n) => PortVlan::vxlan(*n),
                    VlanRef::Id(id) => PortVlan {
                        vxlan: None,
                        id: Some(id.clone()),
                    },
                });
            ports[i].vlans.push(known);
        }
    }
    Ok(())
}
