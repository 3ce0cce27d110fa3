//! [`BareMetalCloud`] for Equinix Metal, on top of [`EquinixClient`].

use async_trait::async_trait;

use super::client::EquinixClient;
use super::wire::{self, DeviceAction, DeviceCreateRequest, DeviceFilter, DeviceUpdateRequest};
use crate::error::{Error, Result};
use crate::provider::*;

/// The Equinix Metal cloud of one project.
#[derive(Clone, Debug)]
pub struct EquinixMetal {
    client: EquinixClient,
    project: String,
    /// Creates tried when their outcome stays unknown (timeouts, 5xx) and looking finds nothing.
    create_attempts: u32,
}

const PROVIDER_SCHEME: &str = "equinixmetal://";

fn state(s: Option<&str>) -> ServerState {
    match s.unwrap_or("") {
        "queued" => ServerState::Queued,
        "provisioning" => ServerState::Provisioning,
        "active" => ServerState::Active,
        "reinstalling" => ServerState::Reinstalling,
        "powering_on" => ServerState::PoweringOn,
        "powering_off" => ServerState::PoweringOff,
        "inactive" => ServerState::Off,
        "failed" => ServerState::Failed,
        "deprovisioning" => ServerState::Deprovisioning,
        "deleted" => ServerState::Deleted,
        other => ServerState::Other(other.to_string()),
    }
}

fn port(p: &wire::Port) -> Port {
    Port {
        id: p.id.clone(),
        name: p.name.clone().unwrap_or_default(),
        kind: if p.kind.as_deref() == Some("NetworkBondPort") {
            PortKind::Bond
        } else {
            PortKind::Physical
        },
        mac: p.data.mac.clone(),
        bonded: p.data.bonded.unwrap_or(false),
        mode: p.network_type.as_deref().and_then(NetworkMode::parse),
        vlans: p
            .virtual_networks
            .iter()
            .map(|h| h.id().to_string())
            .collect(),
    }
}

/// Maps a device to the neutral server.
pub fn server(d: &wire::Device) -> Server {
    let metro = d
        .metro
        .as_ref()
        .and_then(|m| m.code.clone())
        .unwrap_or_default();
    let ports: Vec<Port> = d.network_ports.iter().map(port).collect();
    let network_mode = ports
        .iter()
        .find(|p| p.kind == PortKind::Bond)
        .or(ports.first())
        .and_then(|p| p.mode);
    Server {
        id: d.id.clone(),
        provider_id: format!("{PROVIDER_SCHEME}{metro}/{}", d.id),
        hostname: d.hostname.clone().unwrap_or_default(),
        state: state(d.state.as_deref()),
        plan: d
            .plan
            .as_ref()
            .and_then(|p| p.slug.clone())
            .unwrap_or_default(),
        location: metro,
        tags: d.tags.clone(),
        ports,
        addresses: d
            .ip_addresses
            .iter()
            .filter_map(|a| {
                Some(Address {
                    address: a.address.clone()?,
                    family: a.address_family.unwrap_or(4),
                    public: a.public.unwrap_or(false),
                    management: a.management.unwrap_or(false),
                })
            })
            .collect(),
        ipxe_script_url: d.ipxe_script_url.clone(),
        always_pxe: d.always_pxe.unwrap_or(false),
        network_mode,
    }
}

fn looks_like_uuid(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

impl EquinixMetal {
    pub fn new(client: EquinixClient, project: impl Into<String>) -> Self {
        EquinixMetal {
            client,
            project: project.into(),
            create_attempts: 3,
        }
    }

    pub fn client(&self) -> &EquinixClient {
        &self.client
    }

    pub fn project(&self) -> &str {
        &self.project
    }

    /// The device id inside a provider id (`equinixmetal://<metro>/<uuid>`, the older
    /// `equinixmetal://<uuid>`, or a bare uuid).
    pub fn device_id(provider_id: &str) -> &str {
        provider_id.rsplit('/').next().unwrap_or(provider_id)
    }

    fn create_request(&self, spec: &CreateServer) -> Result<DeviceCreateRequest> {
        if spec.owner_tag.is_empty() {
            return Err(Error::InvalidRequest("owner_tag is required".to_string()));
        }
        if spec.hostname.is_empty() {
            return Err(Error::InvalidRequest("hostname is required".to_string()));
        }
        let mut tags = vec![spec.owner_tag.clone()];
        for t in &spec.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        let (os, ipxe, always) = match &spec.boot {
            Boot::Os(slug) => (slug.clone(), None, false),
            Boot::Ipxe { script_url, always } => {
                ("custom_ipxe".to_string(), script_url.clone(), *always)
            }
        };
        Ok(DeviceCreateRequest {
            metro: spec.location.clone(),
            facility: None,
            plan: spec.plan.clone(),
            operating_system: os,
            hostname: Some(spec.hostname.clone()),
            billing_cycle: spec.billing.map(|b| match b {
                Billing::Hourly => wire::BillingCycle::Hourly,
                Billing::Daily => wire::BillingCycle::Daily,
                Billing::Monthly => wire::BillingCycle::Monthly,
                Billing::Yearly => wire::BillingCycle::Yearly,
            }),
            ipxe_script_url: ipxe,
            always_pxe: always,
            userdata: spec.userdata.clone(),
            tags,
            spot_instance: spec.spot_price_max.map(|_| true),
            spot_price_max: spec.spot_price_max,
            hardware_reservation_id: spec.reservation_id.clone(),
            project_ssh_keys: spec.project_ssh_keys.clone(),
            user_ssh_keys: spec.user_ssh_keys.clone(),
            description: None,
            customdata: None,
        })
    }

    async fn device(&self, id: &str) -> Result<wire::Device> {
        self.client.get_device(Self::device_id(id), &[]).await
    }

    async fn change_vlans(&self, port_id: &str, vlans: &[String], assign: bool) -> Result<Port> {
        let p = self.client.get_port(port_id).await?;
        let ids = if vlans.iter().all(|v| looks_like_uuid(v)) {
            vlans.to_vec()
        } else {
            // Numbers are unique per metro; resolve against every VLAN of the project.
            let all = self
                .client
                .list_virtual_networks(&self.project, None)
                .await?;
            let on_port: Vec<&str> = p.virtual_networks.iter().map(|h| h.id()).collect();
            let mut out = Vec::new();
            for w in vlans {
                if looks_like_uuid(w) {
                    out.push(w.clone());
                    continue;
                }
                let candidates: Vec<&wire::VirtualNetwork> = all
                    .iter()
                    .filter(|v| v.vxlan.map(|x| x.to_string()).as_deref() == Some(w.as_str()))
                    .collect();
                let pick = candidates
                    .iter()
                    .find(|v| on_port.contains(&v.id.as_str()))
                    .or(candidates.first())
                    .ok_or_else(|| Error::NotFound {
                        message: format!("VLAN {w}"),
                    })?;
                out.push(pick.id.clone());
            }
            out
        };
        let present: Vec<&str> = p.virtual_networks.iter().map(|h| h.id()).collect();
        let todo: Vec<&String> = ids
            .iter()
            .filter(|id| present.contains(&id.as_str()) != assign)
            .collect();
        match todo.as_slice() {
            [] => Ok(port(&p)),
            [one] => {
                let p = if assign {
                    self.client.assign_port(port_id, one).await?
                } else {
                    self.client.unassign_port(port_id, one).await?
                };
                Ok(port(&p))
            }
            many => {
                let req = wire::VlanBatchRequest {
                    vlan_assignments: many
                        .iter()
                        .map(|v| wire::VlanAssignment {
                            vlan: (*v).clone(),
                            state: if assign {
                                wire::VlanAssignmentState::Assigned
                            } else {
                                wire::VlanAssignmentState::Unassigned
                            },
                            native: None,
                        })
                        .collect(),
                };
                let batch = self.client.batch_vlan_assignments(port_id, &req).await?;
                if !batch.error_messages.is_empty() {
                    return Err(Error::Validation {
                        message: batch.error_messages.join("; "),
                    });
                }
                Ok(port(&self.client.get_port(port_id).await?))
            }
        }
    }
}

#[async_trait]
impl BareMetalCloud for EquinixMetal {
    fn name(&self) -> &'static str {
        "equinix-metal"
    }

    async fn create_server(&self, spec: &CreateServer) -> Result<Server> {
        self.create_request(spec)?;
        if let Some(existing) = self.find_server(&spec.owner_tag, &spec.hostname).await? {
            tracing::info!(device = %existing.id, hostname = %spec.hostname, "adopting existing device");
            return Ok(existing);
        }
        self.create_missing_server(spec).await
    }

    async fn create_missing_server(&self, spec: &CreateServer) -> Result<Server> {
        let req = self.create_request(spec)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.client.create_device(&self.project, &req).await {
                Ok(d) => return Ok(server(&d)),
                Err(e @ (Error::Transient { .. } | Error::Protocol { .. })) => {
                    // The device may or may not exist: look before creating again.
                    tracing::warn!(hostname = %spec.hostname, error = %e, "create outcome unknown, looking");
                    if let Some(found) = self.find_server(&spec.owner_tag, &spec.hostname).await? {
                        return Ok(found);
                    }
                    if attempt >= self.create_attempts {
                        return Err(e);
                    }
                    tokio::time::sleep(super::client::RetryPolicy::default().backoff(attempt))
                        .await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn get_server(&self, id: &str) -> Result<Server> {
        Ok(server(&self.device(id).await?))
    }

    async fn find_server(&self, owner_tag: &str, hostname: &str) -> Result<Option<Server>> {
        let filter = DeviceFilter {
            tag: Some(owner_tag.to_string()),
            hostname: Some(hostname.to_string()),
            ..DeviceFilter::default()
        };
        let devices = self.client.list_devices(&self.project, &filter).await?;
        Ok(devices
            .iter()
            .filter(|d| {
                d.hostname.as_deref() == Some(hostname) && d.tags.iter().any(|t| t == owner_tag)
            })
            .map(server)
            .find(|s| !s.state.is_gone()))
    }

    async fn list_servers(&self, owner_tag: &str) -> Result<Vec<Server>> {
        let filter = DeviceFilter {
            tag: Some(owner_tag.to_string()),
            ..DeviceFilter::default()
        };
        let devices = self.client.list_devices(&self.project, &filter).await?;
        Ok(devices
            .iter()
            .filter(|d| d.tags.iter().any(|t| t == owner_tag))
            .map(server)
            .collect())
    }

    async fn update_boot(&self, id: &str, update: &BootUpdate) -> Result<Server> {
        let req = DeviceUpdateRequest {
            ipxe_script_url: update.ipxe_script_url.clone(),
            userdata: update.userdata.clone(),
            always_pxe: update.always_pxe,
            tags: None,
        };
        Ok(server(
            &self.client.update_device(Self::device_id(id), &req).await?,
        ))
    }

    async fn reinstall(&self, id: &str, r: &Reinstall) -> Result<()> {
        let action = DeviceAction {
            kind: wire::ActionType::Reinstall,
            preserve_data: Some(r.preserve_data),
            deprovision_fast: Some(r.deprovision_fast),
            operating_system: r.os.clone(),
            ipxe_script_url: r.ipxe_script_url.clone(),
        };
        self.client
            .device_action(Self::device_id(id), &action)
            .await
    }

    async fn power(&self, id: &str, action: PowerAction) -> Result<()> {
        let kind = match action {
            PowerAction::On => wire::ActionType::PowerOn,
            PowerAction::Off => wire::ActionType::PowerOff,
            PowerAction::Reboot => wire::ActionType::Reboot,
        };
        self.client
            .device_action(Self::device_id(id), &DeviceAction::simple(kind))
            .await
    }

    async fn delete_server(&self, id: &str) -> Result<()> {
        match self.client.delete_device(Self::device_id(id), true).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn set_network_mode(&self, id: &str, mode: NetworkMode) -> Result<Server> {
        let d = self.device(id).await?;
        let current = server(&d);
        let bond = current
            .ports
            .iter()
            .find(|p| p.kind == PortKind::Bond && p.name == "bond0")
            .ok_or_else(|| Error::Validation {
                message: format!("device {} has no bond0 port", current.id),
            })?
            .clone();
        let eths: Vec<Port> = current
            .ports
            .iter()
            .filter(|p| p.kind == PortKind::Physical)
            .cloned()
            .collect();
        let layer2 = matches!(
            current.network_mode,
            Some(NetworkMode::Layer2Bonded | NetworkMode::Layer2Individual)
        );
        let odd = |name: &str| {
            name.strip_prefix("eth")
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n % 2 == 1)
        };
        match mode {
            NetworkMode::Layer3 | NetworkMode::HybridBonded | NetworkMode::Hybrid => {
                if layer2 {
                    self.client
                        .convert_layer3(&bond.id, &wire::PortConvertLayer3::default_ips())
                        .await?;
                }
                let d = self.device(id).await?;
                for p in server(&d)
                    .ports
                    .iter()
                    .filter(|p| p.kind == PortKind::Physical)
                {
                    let want_bonded = !(mode == NetworkMode::Hybrid && odd(&p.name));
                    if p.bonded && !want_bonded {
                        self.client.disbond_port(&p.id, false).await?;
                    } else if !p.bonded && want_bonded {
                        self.client.bond_port(&p.id, false).await?;
                    }
                }
            }
            NetworkMode::Layer2Bonded => {
                if !layer2 {
                    self.client.convert_layer2(&bond.id, None).await?;
                }
                for p in eths.iter().filter(|p| !p.bonded) {
                    self.client.bond_port(&p.id, false).await?;
                }
            }
            NetworkMode::Layer2Individual => {
                if !layer2 {
                    self.client.convert_layer2(&bond.id, None).await?;
                }
                if let Some(first) = eths.iter().find(|p| p.bonded) {
                    self.client.disbond_port(&first.id, true).await?;
                }
            }
        }
        self.get_server(id).await
    }

    async fn assign_vlans(&self, port_id: &str, vlans: &[String]) -> Result<Port> {
        self.change_vlans(port_id, vlans, true).await
    }

    async fn unassign_vlans(&self, port_id: &str, vlans: &[String]) -> Result<Port> {
        self.change_vlans(port_id, vlans, false).await
    }

    async fn list_vlans(&self, location: &str) -> Result<Vec<Vlan>> {
        let list = self
            .client
            .list_virtual_networks(&self.project, Some(location))
            .await?;
        Ok(list
            .into_iter()
            .map(|v| Vlan {
                id: v.id,
                vxlan: v.vxlan.unwrap_or(0),
                location: v.metro_code.unwrap_or_else(|| location.to_string()),
                description: v.description,
            })
            .collect())
    }

    async fn ensure_vlan(&self, location: &str, vxlan: u32, description: &str) -> Result<Vlan> {
        let find = |list: Vec<Vlan>| list.into_iter().find(|v| v.vxlan == vxlan);
        if let Some(v) = find(self.list_vlans(location).await?) {
            return Ok(v);
        }
        let req = wire::VirtualNetworkCreateRequest {
            metro: location.to_string(),
            vxlan: Some(vxlan),
            description: Some(description.to_string()).filter(|d| !d.is_empty()),
            tags: Vec::new(),
        };
        match self
            .client
            .create_virtual_network(&self.project, &req)
            .await
        {
            Ok(v) => Ok(Vlan {
                id: v.id,
                vxlan: v.vxlan.unwrap_or(vxlan),
                location: v.metro_code.unwrap_or_else(|| location.to_string()),
                description: v.description,
            }),
            Err(e @ (Error::Validation { .. } | Error::Transient { .. })) => {
                // Someone else created it meanwhile, or the answer was lost.
                find(self.list_vlans(location).await?).ok_or(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn plans(&self) -> Result<Vec<PlanInfo>> {
        Ok(self
            .client
            .list_plans()
            .await?
            .into_iter()
            .map(|p| PlanInfo {
                slug: p.slug.clone().unwrap_or_default(),
                name: p.name.clone().or(p.slug.clone()).unwrap_or_default(),
                nics: p
                    .specs
                    .as_ref()
                    .map(|s| s.nics.iter().filter_map(|n| n.count).sum())
                    .unwrap_or(0),
            })
            .collect())
    }

    async fn locations(&self) -> Result<Vec<Location>> {
        Ok(self
            .client
            .list_metros()
            .await?
            .into_iter()
            .map(|m| Location {
                code: m.code.unwrap_or_default(),
                name: m.name.unwrap_or_default(),
            })
            .collect())
    }

    async fn capacity(&self, plan: &str, location: &str) -> Result<CapacityLevel> {
        let c = self.client.metro_capacity().await?;
        let level = c
            .capacity
            .get(location)
            .and_then(|m| m.get(plan))
            .and_then(|l| l.level.as_deref());
        Ok(match level {
            Some("normal") => CapacityLevel::Normal,
            Some("limited") => CapacityLevel::Limited,
            Some("unavailable") => CapacityLevel::Unavailable,
            _ => CapacityLevel::Unknown,
        })
    }
}
