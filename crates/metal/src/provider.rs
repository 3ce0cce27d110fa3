//! The cloud-neutral face of a bare-metal cloud. Controllers see only these types; the Equinix
//! Metal implementation lives in [`crate::equinix`], and another cloud can be added beside it.

use async_trait::async_trait;

use crate::error::Result;

/// Where a server is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Accepted, waiting for hardware.
    Queued,
    Provisioning,
    Active,
    Reinstalling,
    PoweringOn,
    PoweringOff,
    /// Powered off.
    Off,
    Failed,
    Deprovisioning,
    Deleted,
    /// A state this version does not know, kept verbatim.
    Other(String),
}

impl ServerState {
    /// Still on its way to `Active` (or back to it).
    pub fn is_in_progress(&self) -> bool {
        matches!(
            self,
            ServerState::Queued
                | ServerState::Provisioning
                | ServerState::Reinstalling
                | ServerState::PoweringOn
                | ServerState::PoweringOff
        )
    }

    /// Going or gone.
    pub fn is_gone(&self) -> bool {
        matches!(self, ServerState::Deprovisioning | ServerState::Deleted)
    }
}

/// How a server's ports are wired (the five modes bare-metal clouds of this kind offer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetworkMode {
    /// Ports bonded, routed layer 3, no VLANs.
    Layer3,
    /// Bond in layer 3, one port taken out of it for VLANs.
    Hybrid,
    /// Bond in layer 3 with VLANs on the bond.
    HybridBonded,
    /// Bond in layer 2, VLANs on the bond.
    Layer2Bonded,
    /// Every port on its own in layer 2.
    Layer2Individual,
}

impl NetworkMode {
    /// The name used in manifests (`layer3`, `hybrid`, `hybrid-bonded`, `layer2-bonded`,
    /// `layer2-individual`).
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Layer3 => "layer3",
            NetworkMode::Hybrid => "hybrid",
            NetworkMode::HybridBonded => "hybrid-bonded",
            NetworkMode::Layer2Bonded => "layer2-bonded",
            NetworkMode::Layer2Individual => "layer2-individual",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "layer3" => NetworkMode::Layer3,
            "hybrid" => NetworkMode::Hybrid,
            "hybrid-bonded" => NetworkMode::HybridBonded,
            "layer2-bonded" => NetworkMode::Layer2Bonded,
            "layer2-individual" => NetworkMode::Layer2Individual,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// A bond of physical ports.
    Bond,
    /// A physical port.
    Physical,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Port {
    pub id: String,
    pub name: String,
    pub kind: PortKind,
    pub mac: Option<String>,
    /// A physical port that is a member of its bond.
    pub bonded: bool,
    pub mode: Option<NetworkMode>,
    /// Ids of the VLANs on this port.
    pub vlans: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Address {
    pub address: String,
    pub family: u8,
    pub public: bool,
    pub management: bool,
}

/// A server as the cloud reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Server {
    pub id: String,
    /// Stable id across clouds, e.g. `equinixmetal://<metro>/<uuid>`.
    pub provider_id: String,
    pub hostname: String,
    pub state: ServerState,
    pub plan: String,
    pub location: String,
    pub tags: Vec<String>,
    pub ports: Vec<Port>,
    pub addresses: Vec<Address>,
    pub ipxe_script_url: Option<String>,
    pub always_pxe: bool,
    pub network_mode: Option<NetworkMode>,
}

impl Server {
    pub fn port(&self, name: &str) -> Option<&Port> {
        self.ports.iter().find(|p| p.name == name)
    }

    /// MAC addresses of the physical ports, in port order.
    pub fn macs(&self) -> Vec<String> {
        self.ports
            .iter()
            .filter(|p| p.kind == PortKind::Physical)
            .filter_map(|p| p.mac.clone())
            .collect()
    }

    pub fn management_address(&self, public: bool, family: u8) -> Option<&str> {
        self.addresses
            .iter()
            .find(|a| a.management && a.public == public && a.family == family)
            .map(|a| a.address.as_str())
    }
}

/// What the server boots.
#[derive(Clone, Debug, PartialEq)]
pub enum Boot {
    /// An operating system image by its slug.
    Os(String),
    /// Chain-load an iPXE script. With no URL the userdata must start with `#!ipxe`.
    Ipxe {
        script_url: Option<String>,
        /// PXE on every boot, not only the first.
        always: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Billing {
    Hourly,
    Daily,
    Monthly,
    Yearly,
}

/// A new server. `owner_tag` marks it as ours: it is added to the tags and, with the hostname,
/// finds the server again (idempotent create).
#[derive(Clone, PartialEq)]
pub struct CreateServer {
    pub hostname: String,
    pub plan: String,
    /// Metro (or the cloud's equivalent).
    pub location: String,
    pub owner_tag: String,
    pub tags: Vec<String>,
    pub boot: Boot,
    pub userdata: Option<String>,
    pub billing: Option<Billing>,
    /// A spot instance with this maximum hourly price.
    pub spot_price_max: Option<f64>,
    pub reservation_id: Option<String>,
    pub project_ssh_keys: Vec<String>,
    pub user_ssh_keys: Vec<String>,
}

impl std::fmt::Debug for CreateServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateServer")
            .field("hostname", &self.hostname)
            .field("plan", &self.plan)
            .field("location", &self.location)
            .field("owner_tag", &self.owner_tag)
            .field("tags", &self.tags)
            .field("boot", &self.boot)
            .field(
                "userdata",
                &crate::redacted_userdata(self.userdata.as_deref()),
            )
            .field("billing", &self.billing)
            .field("spot_price_max", &self.spot_price_max)
            .field("reservation_id", &self.reservation_id)
            .field("project_ssh_keys", &self.project_ssh_keys)
            .field("user_ssh_keys", &self.user_ssh_keys)
            .finish()
    }
}

impl CreateServer {
    pub fn new(
        hostname: impl Into<String>,
        plan: impl Into<String>,
        location: impl Into<String>,
        owner_tag: impl Into<String>,
        boot: Boot,
    ) -> Self {
        CreateServer {
            hostname: hostname.into(),
            plan: plan.into(),
            location: location.into(),
            owner_tag: owner_tag.into(),
            tags: Vec::new(),
            boot,
            userdata: None,
            billing: None,
            spot_price_max: None,
            reservation_id: None,
            project_ssh_keys: Vec::new(),
            user_ssh_keys: Vec::new(),
        }
    }
}

/// Changes to what a server boots next time.
#[derive(Clone, Default, PartialEq)]
pub struct BootUpdate {
    pub ipxe_script_url: Option<String>,
    pub userdata: Option<String>,
    pub always_pxe: Option<bool>,
}

impl std::fmt::Debug for BootUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootUpdate")
            .field("ipxe_script_url", &self.ipxe_script_url)
            .field(
                "userdata",
                &crate::redacted_userdata(self.userdata.as_deref()),
            )
            .field("always_pxe", &self.always_pxe)
            .finish()
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reinstall {
    pub preserve_data: bool,
    pub deprovision_fast: bool,
    /// Boot another OS; None keeps the current one.
    pub os: Option<String>,
    pub ipxe_script_url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    On,
    Off,
    Reboot,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Vlan {
    pub id: String,
    pub vxlan: u32,
    pub location: String,
    pub description: Option<String>,
}

/// How much of a plan a location has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapacityLevel {
    Normal,
    Limited,
    Unavailable,
    Unknown,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PlanInfo {
    pub slug: String,
    pub name: String,
    /// Physical NICs.
    pub nics: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Location {
    pub code: String,
    pub name: String,
}

/// A bare-metal cloud, as controllers use it.
#[async_trait]
pub trait BareMetalCloud: Send + Sync {
    /// Short name of the cloud (`equinix-metal`).
    fn name(&self) -> &'static str;

    /// Creates a server, or returns the one that already has this owner tag and hostname.
    /// A create whose answer was lost is resolved by looking, never by creating twice.
    async fn create_server(&self, spec: &CreateServer) -> Result<Server>;

    /// Creates a server the caller knows is missing: it listed the owner's servers
    /// ([`BareMetalCloud::list_servers`]) after its last create and this hostname was not there.
    /// Skips the lookup before the create; a create whose outcome is unknown is still resolved
    /// by looking.
    async fn create_missing_server(&self, spec: &CreateServer) -> Result<Server>;

    /// `Error::NotFound` when it does not exist.
    async fn get_server(&self, id: &str) -> Result<Server>;

    /// The server with this owner tag and exact hostname, if any (not one being deleted).
    async fn find_server(&self, owner_tag: &str, hostname: &str) -> Result<Option<Server>>;

    /// Every server with this owner tag (all pages).
    async fn list_servers(&self, owner_tag: &str) -> Result<Vec<Server>>;

    async fn update_boot(&self, id: &str, update: &BootUpdate) -> Result<Server>;

    async fn reinstall(&self, id: &str, reinstall: &Reinstall) -> Result<()>;

    async fn power(&self, id: &str, action: PowerAction) -> Result<()>;

    /// Deletes a server; a server that is already gone is a success.
    async fn delete_server(&self, id: &str) -> Result<()>;

    /// Brings the server's ports into `mode`; does nothing already done. Returns the server as
    /// it is afterwards.
    async fn set_network_mode(&self, id: &str, mode: NetworkMode) -> Result<Server>;

    /// Puts these VLANs (ids or numbers) on a port; those already there are left alone.
    async fn assign_vlans(&self, port_id: &str, vlans: &[String]) -> Result<Port>;

    /// Takes these VLANs off a port; those not there are left alone.
    async fn unassign_vlans(&self, port_id: &str, vlans: &[String]) -> Result<Port>;

    async fn list_vlans(&self, location: &str) -> Result<Vec<Vlan>>;

    /// The VLAN with this number in this location, created if missing.
    async fn ensure_vlan(&self, location: &str, vxlan: u32, description: &str) -> Result<Vlan>;

    async fn plans(&self) -> Result<Vec<PlanInfo>>;

    async fn locations(&self) -> Result<Vec<Location>>;

    async fn capacity(&self, plan: &str, location: &str) -> Result<CapacityLevel>;
}
