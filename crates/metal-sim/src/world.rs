//! The emulated state: devices, their ports, virtual networks, boot records.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::catalog::{self, Plan};
use crate::config::{Faults, HardwareReservationConfig, Timings};

/// An error the API answers with.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub messages: Vec<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            messages: vec![message.into()],
        }
    }
    pub fn not_found() -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "Not found")
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }
    pub fn body(&self) -> Value {
        if self.status == StatusCode::UNAUTHORIZED {
            json!({"error": self.messages.join("; ")})
        } else {
            json!({"errors": self.messages})
        }
    }
}

pub type Reply = Result<(StatusCode, Option<Value>), ApiError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Queued,
    Provisioning,
    Active,
    Reinstalling,
    PoweringOff,
    Inactive,
    PoweringOn,
    Failed,
    Deprovisioning,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Provisioning => "provisioning",
            State::Active => "active",
            State::Reinstalling => "reinstalling",
            State::PoweringOff => "powering_off",
            State::Inactive => "inactive",
            State::PoweringOn => "powering_on",
            State::Failed => "failed",
            State::Deprovisioning => "deprovisioning",
        }
    }
}

#[derive(Clone, Debug)]
pub struct SimPort {
    pub id: String,
    pub name: String,
    pub is_bond: bool,
    pub mac: String,
    pub bonded: bool,
    /// Virtual network ids.
    pub vlans: Vec<String>,
    pub native: Option<String>,
}

#[derive(Clone, Debug)]
pub struct SimDevice {
    pub id: String,
    pub project: String,
    pub hostname: String,
    pub plan: &'static Plan,
    pub metro: &'static catalog::Metro,
    pub os: String,
    pub billing_cycle: String,
    pub ipxe_script_url: Option<String>,
    pub always_pxe: bool,
    pub userdata: Option<String>,
    pub customdata: Value,
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub spot_instance: bool,
    pub spot_price_max: Option<f64>,
    pub hardware_reservation_id: Option<String>,
    pub ssh_keys: Vec<String>,
    pub locked: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub state: State,
    pub since: Instant,
    pub fail: bool,
    pub bond_layer2: bool,
    pub ports: Vec<SimPort>,
    pub ip_seq: u32,
}

#[derive(Clone, Debug)]
pub struct SimVlan {
    pub id: String,
    pub project: String,
    pub metro: &'static catalog::Metro,
    pub vxlan: u32,
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub created_at: DateTime<Utc>,
}

/// What a `custom_ipxe` device ran when it last became active.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BootRecord {
    pub device_id: String,
    pub hostname: String,
    /// 1 for the first boot, +1 for every reinstall.
    pub boot_count: u32,
    pub ipxe_script_url: Option<String>,
    /// `url` (fetched from a loopback ipxe_script_url), `userdata` (`#!ipxe` userdata) or `none`.
    pub ipxe_source: String,
    /// The iPXE script the machine would run; None while a fetch is pending or when it failed.
    pub ipxe_script: Option<String>,
    /// Set when fetching the script failed or the URL is not on loopback.
    pub ipxe_error: Option<String>,
    /// The userdata the metadata service would serve.
    pub userdata: Option<String>,
    pub macs: Vec<String>,
    pub booted_at: DateTime<Utc>,
}

/// A script to fetch once the lock is released.
pub struct PendingFetch {
    pub device_id: String,
    pub boot_count: u32,
    pub url: String,
}

pub struct World {
    pub devices: HashMap<String, SimDevice>,
    /// Creation order of device ids (the list order).
    pub order: Vec<String>,
    pub port_owner: HashMap<String, String>,
    pub vlans: Vec<SimVlan>,
    pub boots: HashMap<String, BootRecord>,
    pub pending_fetches: Vec<PendingFetch>,
    pub timings: Timings,
    pub faults: Faults,
    pub seq: u64,
    /// Window index and requests counted in it, for the server-side rate limit.
    pub rl_window: (i64, u32),
    /// Hardware reservations by id, with the device provisioned on each (if any).
    pub reservations: BTreeMap<String, SimReservation>,
}

/// A hardware reservation and the device it holds.
#[derive(Clone, Debug)]
pub struct SimReservation {
    pub config: HardwareReservationConfig,
    pub device: Option<String>,
}

pub fn href_device(id: &str) -> String {
    format!("/metal/v1/devices/{id}")
}

fn mac_for(device: &str, index: usize) -> String {
    // Stable for a device: derived from its id.
    let u = Uuid::parse_str(device).unwrap_or_default();
    let b = u.as_bytes();
    format!(
        "b4:96:91:{:02x}:{:02x}:{:02x}",
        b[0],
        b[1],
        (b[2] & 0xf0) | (index as u8 & 0x0f)
    )
}

impl World {
    pub fn new(timings: Timings, faults: Faults) -> Self {
        World {
            devices: HashMap::new(),
            order: Vec::new(),
            port_owner: HashMap::new(),
            vlans: Vec::new(),
            boots: HashMap::new(),
            pending_fetches: Vec::new(),
            timings,
            faults,
            seq: 0,
            rl_window: (0, 0),
            reservations: BTreeMap::new(),
        }
    }

    /// Adds hardware reservations (the configuration's).
    pub fn with_reservations(mut self, reservations: Vec<HardwareReservationConfig>) -> Self {
        for r in reservations {
            self.reservations.insert(
                r.id.clone(),
                SimReservation {
                    config: r,
                    device: None,
                },
            );
        }
        self
    }

    /// The reservation a create asks for (`hardware_reservation_id`), checked as Metal does:
    /// it belongs to the project, is provisionable, is not already provisioned, and its plan and
    /// metro are the request's. `next-available` takes the first free one that fits.
    fn reservation_for(
        &self,
        project: &str,
        requested: &str,
        plan: &Plan,
        metro: &catalog::Metro,
    ) -> Result<String, ApiError> {
        let fits = |r: &SimReservation| {
            r.config.project == project
                && r.config.provisionable
                && r.device.is_none()
                && catalog::plan(&r.config.plan).is_some_and(|p| p.slug == plan.slug)
                && catalog::metro(&r.config.metro).is_some_and(|m| m.code == metro.code)
        };
        if requested == "next-available" {
            return self
                .reservations
                .values()
                .find(|r| fits(r))
                .map(|r| r.config.id.clone())
                .ok_or_else(|| {
                    ApiError::unprocessable(format!(
                        "No available hardware reservations of plan {} in metro {}",
                        plan.slug, metro.code
                    ))
                });
        }
        let r = self
            .reservations
            .get(requested)
            .filter(|r| r.config.project == project)
            .ok_or_else(|| {
                ApiError::unprocessable(format!(
                    "hardware_reservation_id {requested}: no such hardware reservation in this project"
                ))
            })?;
        if let Some(device) = &r.device {
            return Err(ApiError::unprocessable(format!(
                "Hardware reservation {requested} is already provisioned with device {device}"
            )));
        }
        if !r.config.provisionable {
            return Err(ApiError::unprocessable(format!(
                "Hardware reservation {requested} is a spare and is not provisionable"
            )));
        }
        if !fits(r) {
            return Err(ApiError::unprocessable(format!(
                "Hardware reservation {requested} is a {} in metro {}, not a {} in metro {}",
                r.config.plan, r.config.metro, plan.slug, metro.code
            )));
        }
        Ok(requested.to_owned())
    }

    fn next_id(&mut self) -> String {
        self.seq += 1;
        Uuid::new_v4().to_string()
    }

    /// Moves every device along its state machine.
    pub fn advance_all(&mut self, now: Instant) {
        let ids: Vec<String> = self.order.clone();
        for id in ids {
            self.advance(&id, now);
        }
    }

    /// Moves a device along its state machine; removes it when deprovisioning is over.
    pub fn advance(&mut self, id: &str, now: Instant) {
        let t = self.timings.clone();
        let slow_delete = self.faults.slow_delete_ms;
        let mut became_active = false;
        let mut gone = false;
        {
            let Some(d) = self.devices.get_mut(id) else {
                return;
            };
            loop {
                let (dur, next) = match d.state {
                    State::Queued => (t.queued_ms, State::Provisioning),
                    State::Provisioning => (
                        t.provisioning_ms,
                        if d.fail { State::Failed } else { State::Active },
                    ),
                    State::Reinstalling => (t.reinstalling_ms, State::Active),
                    State::PoweringOff => (t.power_ms, State::Inactive),
                    State::PoweringOn => (t.power_ms, State::Active),
                    State::Deprovisioning => (
                        slow_delete.unwrap_or(t.deprovisioning_ms),
                        State::Deprovisioning,
                    ),
                    State::Active | State::Inactive | State::Failed => break,
                };
                let dur = Timings::d(dur);
                if now.saturating_duration_since(d.since) < dur {
                    break;
                }
                if d.state == State::Deprovisioning {
                    gone = true;
                    break;
                }
                let booting = matches!(d.state, State::Provisioning | State::Reinstalling);
                d.since += dur;
                d.state = next;
                d.updated_at = Utc::now();
                if next == State::Active && booting {
                    became_active = true;
                }
            }
        }
        if gone {
            self.remove_device(id);
        } else if became_active {
            self.record_boot(id);
        }
    }

    pub fn remove_device(&mut self, id: &str) {
        if let Some(d) = self.devices.remove(id) {
            for p in &d.ports {
                self.port_owner.remove(&p.id);
            }
            // The reserved server goes back to its reservation.
            if let Some(r) = d
                .hardware_reservation_id
                .as_ref()
                .and_then(|r| self.reservations.get_mut(r))
            {
                r.device = None;
            }
            self.order.retain(|x| x != id);
        }
    }

    fn record_boot(&mut self, id: &str) {
        let Some(d) = self.devices.get(id) else {
            return;
        };
        if d.os != "custom_ipxe" {
            return;
        }
        let boot_count = self.boots.get(id).map(|b| b.boot_count).unwrap_or(0) + 1;
        let userdata = d.userdata.clone();
        let ipxe_userdata = userdata
            .as_deref()
            .filter(|u| u.trim_start().starts_with("#!ipxe"));
        let mut rec = BootRecord {
            device_id: id.to_string(),
            hostname: d.hostname.clone(),
            boot_count,
            ipxe_script_url: d.ipxe_script_url.clone(),
            ipxe_source: "none".to_string(),
            ipxe_script: None,
            ipxe_error: None,
            userdata: userdata.clone(),
            macs: d
                .ports
                .iter()
                .filter(|p| !p.is_bond)
                .map(|p| p.mac.clone())
                .collect(),
            booted_at: Utc::now(),
        };
        if let Some(url) = d.ipxe_script_url.clone().filter(|u| !u.is_empty()) {
            rec.ipxe_source = "url".to_string();
            if is_loopback_url(&url) {
                self.pending_fetches.push(PendingFetch {
                    device_id: id.to_string(),
                    boot_count,
                    url,
                });
            } else {
                rec.ipxe_error =
                    Some("ipxe_script_url is not on loopback: not fetched".to_string());
            }
        } else if let Some(script) = ipxe_userdata {
            rec.ipxe_source = "userdata".to_string();
            rec.ipxe_script = Some(script.to_string());
        }
        self.boots.insert(id.to_string(), rec);
    }

    pub fn device(&self, id: &str) -> Result<&SimDevice, ApiError> {
        self.devices.get(id).ok_or_else(ApiError::not_found)
    }

    pub fn device_mut(&mut self, id: &str) -> Result<&mut SimDevice, ApiError> {
        self.devices.get_mut(id).ok_or_else(ApiError::not_found)
    }

    pub fn create_device(
        &mut self,
        project: &str,
        input: DeviceCreateInput,
        now: Instant,
    ) -> Result<String, ApiError> {
        if input.facility.is_some() {
            return Err(ApiError::unprocessable(
                "facility is no longer supported: use metro",
            ));
        }
        let metro_code = input
            .metro
            .as_deref()
            .ok_or_else(|| ApiError::unprocessable("metro is required"))?;
        let metro = catalog::metro(metro_code)
            .ok_or_else(|| ApiError::unprocessable(format!("metro {metro_code} is not valid")))?;
        let plan = catalog::plan(&input.plan)
            .ok_or_else(|| ApiError::unprocessable(format!("plan {} is not valid", input.plan)))?;
        if !catalog::OPERATING_SYSTEMS
            .iter()
            .any(|(slug, ..)| *slug == input.operating_system)
        {
            return Err(ApiError::unprocessable(format!(
                "operating_system {} is not valid",
                input.operating_system
            )));
        }
        if input.operating_system == "custom_ipxe"
            && input.ipxe_script_url.as_deref().unwrap_or("").is_empty()
            && !input
                .userdata
                .as_deref()
                .unwrap_or("")
                .trim_start()
                .starts_with("#!ipxe")
        {
            return Err(ApiError::unprocessable(
                "ipxe_script_url or #!ipxe userdata is required for custom_ipxe",
            ));
        }
        if let Some(bc) = &input.billing_cycle
            && !["hourly", "daily", "monthly", "yearly"].contains(&bc.as_str())
        {
            return Err(ApiError::unprocessable(format!(
                "billing_cycle {bc} is not valid"
            )));
        }
        if input.spot_instance == Some(true) && input.spot_price_max.is_none() {
            return Err(ApiError::unprocessable(
                "spot_price_max is required for a spot instance",
            ));
        }
        // Reservations are modelled when the configuration lists some; otherwise the id is
        // recorded unchecked.
        let reservation = match input
            .hardware_reservation_id
            .as_deref()
            .filter(|r| !r.is_empty())
        {
            Some(requested) if self.reservations.is_empty() => Some(requested.to_owned()),
            Some(requested) => Some(self.reservation_for(project, requested, plan, metro)?),
            None => None,
        };
        // A reserved server is there already: capacity is for on-demand devices.
        if reservation.is_none()
            && self
                .faults
                .capacity_exhausted
                .iter()
                .any(|pm| pm.plan == plan.slug && pm.metro == metro.code)
        {
            return Err(ApiError::unprocessable(format!(
                "Oh snap, we don't have enough capacity: no {} servers in stock in metro {}",
                plan.slug, metro.code
            )));
        }
        let id = self.next_id();
        let mut ports = vec![SimPort {
            id: Uuid::new_v4().to_string(),
            name: "bond0".to_string(),
            is_bond: true,
            mac: mac_for(&id, 0xf),
            bonded: true,
            vlans: Vec::new(),
            native: None,
        }];
        for i in 0..plan.nics {
            ports.push(SimPort {
                id: Uuid::new_v4().to_string(),
                name: format!("eth{i}"),
                is_bond: false,
                mac: mac_for(&id, i),
                bonded: true,
                vlans: Vec::new(),
                native: None,
            });
        }
        for p in &ports {
            self.port_owner.insert(p.id.clone(), id.clone());
        }
        let fail = self
            .faults
            .fail_provisioning
            .contains(&input.hostname_or_default());
        let ssh_keys: Vec<String> = input
            .project_ssh_keys
            .iter()
            .chain(input.user_ssh_keys.iter())
            .cloned()
            .collect();
        let ts = Utc::now();
        let seq = self.seq as u32;
        let dev = SimDevice {
            id: id.clone(),
            project: project.to_string(),
            hostname: input.hostname_or_default(),
            plan,
            metro,
            os: input.operating_system,
            billing_cycle: input.billing_cycle.unwrap_or_else(|| "hourly".to_string()),
            ipxe_script_url: input.ipxe_script_url,
            always_pxe: input.always_pxe.unwrap_or(false),
            userdata: input.userdata,
            customdata: input.customdata.unwrap_or_else(|| json!({})),
            description: input.description,
            tags: input.tags,
            spot_instance: input.spot_instance.unwrap_or(false),
            spot_price_max: input.spot_price_max,
            hardware_reservation_id: reservation.clone(),
            ssh_keys,
            locked: input.locked.unwrap_or(false),
            created_at: ts,
            updated_at: ts,
            state: State::Queued,
            since: now,
            fail,
            bond_layer2: false,
            ports,
            ip_seq: seq,
        };
        self.devices.insert(id.clone(), dev);
        self.order.push(id.clone());
        if let Some(r) = reservation.and_then(|r| self.reservations.get_mut(&r)) {
            r.device = Some(id.clone());
        }
        Ok(id)
    }

    pub fn network_type(d: &SimDevice) -> &'static str {
        let all_bonded = d.ports.iter().filter(|p| !p.is_bond).all(|p| p.bonded);
        let bond_vlans = d.ports.iter().any(|p| p.is_bond && !p.vlans.is_empty());
        match (d.bond_layer2, all_bonded) {
            (false, true) if bond_vlans => "hybrid-bonded",
            (false, true) => "layer3",
            (false, false) => "hybrid",
            (true, true) => "layer2-bonded",
            (true, false) => "layer2-individual",
        }
    }

    pub fn port_json(&self, d: &SimDevice, p: &SimPort) -> Value {
        let bond = d.ports.iter().find(|b| b.is_bond);
        let mut v = json!({
            "id": p.id,
            "name": p.name,
            "type": if p.is_bond { "NetworkBondPort" } else { "NetworkPort" },
            "href": format!("/metal/v1/ports/{}", p.id),
            "data": {"mac": p.mac, "bonded": p.bonded},
            "disbond_operation_supported": !p.is_bond,
            "network_type": World::network_type(d),
            "virtual_networks": p.vlans.iter().map(|v| json!({"href": format!("/metal/v1/virtual-networks/{v}")})).collect::<Vec<_>>(),
        });
        if !p.is_bond
            && let Some(b) = bond
        {
            v["bond"] = json!({"id": b.id, "name": b.name});
        }
        if let Some(n) = &p.native {
            v["native_virtual_network"] =
                json!({"href": format!("/metal/v1/virtual-networks/{n}")});
        }
        v
    }

    pub fn device_json(&self, d: &SimDevice) -> Value {
        let n = d.ip_seq;
        let (hi, lo) = ((n / 250) % 250, n % 250 + 2);
        let ips = if d.bond_layer2 {
            Vec::new()
        } else {
            vec![
                json!({"id": Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("{}-v4pub", d.id).as_bytes()).to_string(),
                       "address_family": 4, "address": format!("147.75.{hi}.{lo}"), "cidr": 31, "netmask": "255.255.255.254",
                       "gateway": format!("147.75.{hi}.{}", lo - 1), "network": format!("147.75.{hi}.{}", lo - 1),
                       "public": true, "management": true, "manageable": true, "enabled": true, "global_ip": false,
                       "href": "/metal/v1/ips/v4pub", "assigned_to": {"href": href_device(&d.id)}}),
                json!({"id": Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("{}-v4priv", d.id).as_bytes()).to_string(),
                       "address_family": 4, "address": format!("10.70.{hi}.{lo}"), "cidr": 31, "netmask": "255.255.255.254",
                       "gateway": format!("10.70.{hi}.{}", lo - 1), "network": format!("10.70.{hi}.{}", lo - 1),
                       "public": false, "management": true, "manageable": true, "enabled": true, "global_ip": false,
                       "href": "/metal/v1/ips/v4priv", "assigned_to": {"href": href_device(&d.id)}}),
                json!({"id": Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("{}-v6pub", d.id).as_bytes()).to_string(),
                       "address_family": 6, "address": format!("2604:1380:4641:{hi:x}::{lo:x}"), "cidr": 127,
                       "gateway": format!("2604:1380:4641:{hi:x}::{:x}", lo - 1), "network": format!("2604:1380:4641:{hi:x}::{:x}", lo - 1),
                       "public": true, "management": true, "manageable": true, "enabled": true, "global_ip": false,
                       "href": "/metal/v1/ips/v6pub", "assigned_to": {"href": href_device(&d.id)}}),
            ]
        };
        let os = catalog::OPERATING_SYSTEMS
            .iter()
            .find(|(slug, ..)| *slug == d.os)
            .map(|(slug, name, distro, version)| {
                json!({"slug": slug, "name": name, "distro": distro, "version": version})
            })
            .unwrap_or_else(|| json!({"slug": d.os}));
        let mut v = json!({
            "id": d.id,
            "short_id": d.id.split('-').next().unwrap_or_default(),
            "href": href_device(&d.id),
            "hostname": d.hostname,
            "state": d.state.as_str(),
            "created_at": d.created_at.to_rfc3339(),
            "updated_at": d.updated_at.to_rfc3339(),
            "billing_cycle": d.billing_cycle,
            "always_pxe": d.always_pxe,
            "locked": d.locked,
            "network_frozen": false,
            "bonding_mode": 4,
            "tags": d.tags,
            "customdata": d.customdata,
            "spot_instance": d.spot_instance,
            "plan": {"id": d.plan.id, "slug": d.plan.slug, "name": d.plan.name, "class": d.plan.class},
            "metro": catalog::metro_json(d.metro),
            "operating_system": os,
            "project": {"href": format!("/metal/v1/projects/{}", d.project)},
            "project_lite": {"href": format!("/metal/v1/projects/{}", d.project)},
            "ssh_keys": d.ssh_keys.iter().map(|k| json!({"href": format!("/metal/v1/ssh-keys/{k}")})).collect::<Vec<_>>(),
            "network_ports": d.ports.iter().map(|p| self.port_json(d, p)).collect::<Vec<_>>(),
            "ip_addresses": ips,
            "provisioning_percentage": match d.state { State::Queued => 0.0, State::Provisioning => 50.0, _ => 100.0 },
            "switch_uuid": &d.id[..8],
            "sos": format!("{}@sos.{}.platformequinix.com", d.id, d.metro.code),
            "volumes": [],
            "actions": [{"type": "power_off", "name": "Power Off"}, {"type": "reboot", "name": "Reboot"}, {"type": "reinstall", "name": "Reinstall"}],
        });
        if let Some(u) = &d.ipxe_script_url {
            v["ipxe_script_url"] = json!(u);
        }
        if let Some(u) = &d.userdata {
            v["userdata"] = json!(u);
        }
        if let Some(desc) = &d.description {
            v["description"] = json!(desc);
        }
        if let Some(p) = d.spot_price_max {
            v["spot_price_max"] = json!(p);
        }
        if let Some(r) = &d.hardware_reservation_id {
            v["hardware_reservation"] =
                json!({"id": r, "href": format!("/metal/v1/hardware-reservations/{r}")});
        }
        v
    }

    pub fn vlan_json(&self, v: &SimVlan) -> Value {
        let instances: Vec<Value> = self
            .order
            .iter()
            .filter_map(|id| self.devices.get(id))
            .filter(|d| d.ports.iter().any(|p| p.vlans.contains(&v.id)))
            .map(|d| json!({"href": href_device(&d.id)}))
            .collect();
        let mut out = json!({
            "id": v.id,
            "href": format!("/metal/v1/virtual-networks/{}", v.id),
            "vxlan": v.vxlan,
            "metro_code": v.metro.code,
            "metro": catalog::metro_json(v.metro),
            "assigned_to": {"href": format!("/metal/v1/projects/{}", v.project)},
            "assigned_to_virtual_circuit": false,
            "created_at": v.created_at.to_rfc3339(),
            "tags": v.tags,
            "instances": instances,
        });
        if let Some(d) = &v.description {
            out["description"] = json!(d);
        }
        out
    }

    pub fn create_vlan(
        &mut self,
        project: &str,
        input: VirtualNetworkCreateInput,
    ) -> Result<SimVlan, ApiError> {
        if input.facility.is_some() {
            return Err(ApiError::unprocessable(
                "facility is no longer supported: use metro",
            ));
        }
        let code = input
            .metro
            .as_deref()
            .ok_or_else(|| ApiError::unprocessable("metro is required"))?;
        let metro = catalog::metro(code)
            .ok_or_else(|| ApiError::unprocessable(format!("metro {code} is not valid")))?;
        let taken = |vx: u32| {
            self.vlans
                .iter()
                .any(|v| v.project == project && v.metro.code == metro.code && v.vxlan == vx)
        };
        let vxlan = match input.vxlan {
            Some(vx) => {
                if !(2..=3999).contains(&vx) {
                    return Err(ApiError::unprocessable("vxlan must be between 2 and 3999"));
                }
                if taken(vx) {
                    return Err(ApiError::unprocessable(format!(
                        "vxlan {vx} is already in use in metro {}",
                        metro.code
                    )));
                }
                vx
            }
            None => (1000..=1999)
                .find(|vx| !taken(*vx))
                .ok_or_else(|| ApiError::unprocessable("no free vxlan in 1000-1999"))?,
        };
        let v = SimVlan {
            id: Uuid::new_v4().to_string(),
            project: project.to_string(),
            metro,
            vxlan,
            description: input.description,
            tags: input.tags,
            created_at: Utc::now(),
        };
        self.vlans.push(v.clone());
        Ok(v)
    }

    /// Finds a virtual network of the device's project and metro by id or vxlan number.
    fn resolve_vnid(&self, d: &SimDevice, vnid: &str) -> Result<String, ApiError> {
        let found = self.vlans.iter().find(|v| {
            v.project == d.project
                && (v.id == vnid || (v.metro.code == d.metro.code && v.vxlan.to_string() == vnid))
        });
        match found {
            Some(v) if v.metro.code != d.metro.code => Err(ApiError::unprocessable(format!(
                "virtual network {vnid} is in metro {}, the device is in {}",
                v.metro.code, d.metro.code
            ))),
            Some(v) => Ok(v.id.clone()),
            None => Err(ApiError::unprocessable(format!(
                "virtual network {vnid} not found in this project"
            ))),
        }
    }

    /// Applies a port operation; returns the device id.
    pub fn port_op(&mut self, port_id: &str, op: PortOp) -> Result<String, ApiError> {
        let dev_id = self
            .port_owner
            .get(port_id)
            .cloned()
            .ok_or_else(ApiError::not_found)?;
        let resolved = match &op {
            PortOp::Assign(vnid) | PortOp::Unassign(vnid) => {
                let d = self.device(&dev_id)?;
                Some(self.resolve_vnid(d, vnid)?)
            }
            _ => None,
        };
        let d = self.device_mut(&dev_id)?;
        if matches!(
            d.state,
            State::Deprovisioning | State::Queued | State::Provisioning
        ) {
            return Err(ApiError::unprocessable(format!(
                "cannot change the network of a device in state {}",
                d.state.as_str()
            )));
        }
        let idx = d
            .ports
            .iter()
            .position(|p| p.id == port_id)
            .ok_or_else(ApiError::not_found)?;
        let is_bond = d.ports[idx].is_bond;
        match op {
            PortOp::Bond { bulk } => {
                for (i, p) in d.ports.iter_mut().enumerate() {
                    if !p.is_bond && (bulk || is_bond || i == idx) {
                        if !p.vlans.is_empty() {
                            return Err(ApiError::unprocessable(format!(
                                "port {} has virtual networks assigned: unassign them before bonding",
                                p.name
                            )));
                        }
                        p.bonded = true;
                    }
                }
            }
            PortOp::Disbond { bulk } => {
                if is_bond && !bulk {
                    return Err(ApiError::unprocessable("a bond port cannot be disbonded"));
                }
                for (i, p) in d.ports.iter_mut().enumerate() {
                    if !p.is_bond && (bulk || i == idx) {
                        p.bonded = false;
                    }
                }
            }
            PortOp::ConvertLayer2 => {
                d.bond_layer2 = true;
            }
            PortOp::ConvertLayer3 => {
                if d.ports.iter().any(|p| !p.vlans.is_empty()) {
                    return Err(ApiError::unprocessable(
                        "virtual networks are still assigned: unassign them before converting to layer 3",
                    ));
                }
                d.bond_layer2 = false;
                for p in d.ports.iter_mut() {
                    p.bonded = true;
                }
            }
            PortOp::Assign(_) => {
                let vid = resolved.unwrap_or_default();
                let p = &mut d.ports[idx];
                if !p.is_bond && p.bonded {
                    return Err(ApiError::unprocessable(format!(
                        "port {} is bonded: assign the virtual network to the bond port",
                        p.name
                    )));
                }
                if p.vlans.contains(&vid) {
                    return Err(ApiError::unprocessable(
                        "virtual network is already assigned to this port",
                    ));
                }
                p.vlans.push(vid);
            }
            PortOp::Unassign(_) => {
                let vid = resolved.unwrap_or_default();
                let p = &mut d.ports[idx];
                if !p.vlans.contains(&vid) {
                    return Err(ApiError::unprocessable(
                        "virtual network is not assigned to this port",
                    ));
                }
                p.vlans.retain(|v| v != &vid);
                if p.native.as_deref() == Some(vid.as_str()) {
                    p.native = None;
                }
            }
            PortOp::SetNative(vid) => {
                d.ports[idx].native = Some(vid);
            }
        }
        d.updated_at = Utc::now();
        Ok(dev_id)
    }

    pub fn batch(&mut self, port_id: &str, input: VlanBatchInput) -> Result<Value, ApiError> {
        let dev_id = self
            .port_owner
            .get(port_id)
            .cloned()
            .ok_or_else(ApiError::not_found)?;
        // Validate everything first so that a batch applies whole or not at all.
        let mut plan = Vec::new();
        {
            let d = self.device(&dev_id)?;
            for a in &input.vlan_assignments {
                if a.state != "assigned" && a.state != "unassigned" {
                    return Err(ApiError::unprocessable(format!(
                        "vlan assignment state {} is not valid",
                        a.state
                    )));
                }
                let vid = self.resolve_vnid(d, &a.vlan)?;
                let vx = self
                    .vlans
                    .iter()
                    .find(|v| v.id == vid)
                    .map(|v| v.vxlan)
                    .unwrap_or(0);
                plan.push((vid, vx, a.state.clone(), a.native.unwrap_or(false)));
            }
        }
        let snapshot = self.device(&dev_id)?.clone();
        let mut out = Vec::new();
        for (vid, vx, state, native) in &plan {
            let r = if state == "unassigned" {
                self.port_op(port_id, PortOp::Unassign(vid.clone()))
            } else {
                self.port_op(port_id, PortOp::Assign(vid.clone()))
                    .and_then(|_| {
                        if *native {
                            self.port_op(port_id, PortOp::SetNative(vid.clone()))
                        } else {
                            Ok(String::new())
                        }
                    })
            };
            if let Err(e) = r {
                self.devices.insert(dev_id.clone(), snapshot);
                return Err(e);
            }
            out.push(json!({"id": Uuid::new_v4().to_string(), "vlan": vx, "state": state, "native": native}));
        }
        let d = self.device(&dev_id)?;
        let port = d
            .ports
            .iter()
            .find(|p| p.id == port_id)
            .map(|p| self.port_json(d, p))
            .unwrap_or(Value::Null);
        let now = Utc::now().to_rfc3339();
        Ok(json!({
            "id": Uuid::new_v4().to_string(),
            "state": "completed",
            "quantity": out.len(),
            "vlan_assignments": out,
            "error_messages": [],
            "port": port,
            "project": {"href": format!("/metal/v1/projects/{}", d.project)},
            "created_at": now,
            "updated_at": now,
        }))
    }

    pub fn capacity_json(&self) -> Value {
        let mut metros = BTreeMap::new();
        for m in catalog::METROS {
            let mut plans = BTreeMap::new();
            for p in catalog::PLANS {
                let out = self
                    .faults
                    .capacity_exhausted
                    .iter()
                    .any(|pm| pm.plan == p.slug && pm.metro == m.code);
                plans.insert(
                    p.slug.to_string(),
                    json!({"level": if out { "unavailable" } else { "normal" }}),
                );
            }
            metros.insert(
                m.code.to_string(),
                Value::Object(plans.into_iter().collect()),
            );
        }
        json!({"capacity": metros})
    }

    pub fn action(
        &mut self,
        id: &str,
        input: DeviceActionInput,
        now: Instant,
    ) -> Result<(), ApiError> {
        let d = self.device_mut(id)?;
        let busy = matches!(
            d.state,
            State::Queued | State::Provisioning | State::Deprovisioning | State::Reinstalling
        );
        match input.r#type.as_str() {
            "power_on" => {
                if d.state != State::Inactive {
                    return Err(ApiError::unprocessable(format!(
                        "device is {}: only an inactive device can be powered on",
                        d.state.as_str()
                    )));
                }
                d.state = State::PoweringOn;
            }
            "power_off" => {
                if d.state != State::Active {
                    return Err(ApiError::unprocessable(format!(
                        "device is {}: only an active device can be powered off",
                        d.state.as_str()
                    )));
                }
                d.state = State::PoweringOff;
            }
            "reboot" => {
                if d.state != State::Active {
                    return Err(ApiError::unprocessable(format!(
                        "device is {}: only an active device can be rebooted",
                        d.state.as_str()
                    )));
                }
                return Ok(());
            }
            "reinstall" => {
                if busy {
                    return Err(ApiError::unprocessable(format!(
                        "device is {}: it cannot be reinstalled now",
                        d.state.as_str()
                    )));
                }
                if let Some(os) = input.operating_system {
                    if !catalog::OPERATING_SYSTEMS.iter().any(|(s, ..)| *s == os) {
                        return Err(ApiError::unprocessable(format!(
                            "operating_system {os} is not valid"
                        )));
                    }
                    d.os = os;
                }
                if let Some(u) = input.ipxe_script_url {
                    d.ipxe_script_url = Some(u);
                }
                d.state = State::Reinstalling;
            }
            "rescue" => {
                return Err(ApiError::unprocessable(
                    "rescue is not available for this device",
                ));
            }
            other => {
                return Err(ApiError::unprocessable(format!(
                    "action type {other} is not valid"
                )));
            }
        }
        d.since = now;
        d.updated_at = Utc::now();
        Ok(())
    }
}

pub fn is_loopback_url(url: &str) -> bool {
    match url::Url::parse(url) {
        Ok(u) => match u.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        },
        Err(_) => false,
    }
}

pub enum PortOp {
    Bond { bulk: bool },
    Disbond { bulk: bool },
    ConvertLayer2,
    ConvertLayer3,
    Assign(String),
    Unassign(String),
    SetNative(String),
}

// ---- request bodies: unknown fields and wrong types are refused with 422 ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpAddressInput {
    pub address_family: Option<u8>,
    pub cidr: Option<u32>,
    pub ip_reservations: Option<Vec<String>>,
    pub public: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceCreateInput {
    pub metro: Option<String>,
    pub facility: Option<Value>,
    pub plan: String,
    pub operating_system: String,
    pub hostname: Option<String>,
    pub billing_cycle: Option<String>,
    pub always_pxe: Option<bool>,
    pub customdata: Option<Value>,
    pub description: Option<String>,
    pub features: Option<Vec<String>>,
    pub hardware_reservation_id: Option<String>,
    pub ip_addresses: Option<Vec<IpAddressInput>>,
    pub ipxe_script_url: Option<String>,
    pub locked: Option<bool>,
    pub network_frozen: Option<bool>,
    pub no_ssh_keys: Option<bool>,
    pub private_ipv4_subnet_size: Option<i32>,
    pub public_ipv4_subnet_size: Option<i32>,
    #[serde(default)]
    pub project_ssh_keys: Vec<String>,
    #[serde(default)]
    pub user_ssh_keys: Vec<String>,
    pub spot_instance: Option<bool>,
    pub spot_price_max: Option<f64>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub termination_time: Option<String>,
    pub userdata: Option<String>,
}

impl DeviceCreateInput {
    fn hostname_or_default(&self) -> String {
        self.hostname
            .clone()
            .unwrap_or_else(|| "device".to_string())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceUpdateInput {
    pub always_pxe: Option<bool>,
    pub billing_cycle: Option<String>,
    pub customdata: Option<Value>,
    pub description: Option<String>,
    pub hostname: Option<String>,
    pub firmware_set_id: Option<String>,
    pub ipxe_script_url: Option<String>,
    pub locked: Option<bool>,
    pub network_frozen: Option<bool>,
    pub spot_instance: Option<bool>,
    pub tags: Option<Vec<String>>,
    pub userdata: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceActionInput {
    pub r#type: String,
    pub force_delete: Option<bool>,
    pub deprovision_fast: Option<bool>,
    pub preserve_data: Option<bool>,
    pub operating_system: Option<String>,
    pub ipxe_script_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualNetworkCreateInput {
    pub description: Option<String>,
    pub facility: Option<String>,
    pub metro: Option<String>,
    pub vxlan: Option<u32>,
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortAssignInput {
    pub vnid: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestIp {
    pub address_family: Option<i64>,
    pub public: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConvertLayer3Input {
    pub request_ips: Option<Vec<RequestIp>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VlanAssignmentInput {
    pub vlan: String,
    #[serde(default = "assigned")]
    pub state: String,
    pub native: Option<bool>,
}

fn assigned() -> String {
    "assigned".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VlanBatchInput {
    pub vlan_assignments: Vec<VlanAssignmentInput>,
}

/// Parses a JSON body into `T`, answering 422 with an `errors` array as the API does.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body = if body.iter().all(|b| b.is_ascii_whitespace()) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| ApiError::unprocessable(format!("invalid request body: {e}")))
}

pub fn elapsed_ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn input(hostname: &str) -> DeviceCreateInput {
        serde_json::from_value(json!({
            "metro": "sv", "plan": "c3.small.x86", "operating_system": "custom_ipxe",
            "hostname": hostname, "userdata": "#!ipxe\nshell\n"
        }))
        .unwrap()
    }

    fn state(w: &World, id: &str) -> Option<State> {
        w.devices.get(id).map(|d| d.state)
    }

    #[test]
    fn hardware_reservations_are_taken_refused_and_given_back() {
        let reservation =
            |id: &str, project: &str, plan: &str, provisionable: bool| HardwareReservationConfig {
                id: id.into(),
                project: project.into(),
                plan: plan.into(),
                metro: "sv".into(),
                provisionable,
            };
        let faults = Faults {
            capacity_exhausted: vec![crate::PlanMetro {
                plan: "c3.small.x86".into(),
                metro: "sv".into(),
            }],
            ..Faults::default()
        };
        let mut w = World::new(Timings::instant(), faults).with_reservations(vec![
            reservation("r-1", "p", "c3.small.x86", true),
            reservation("r-spare", "p", "c3.small.x86", false),
            reservation("r-big", "p", "n3.xlarge.x86", true),
            reservation("r-other", "q", "c3.small.x86", true),
        ]);
        let t0 = Instant::now();
        let reserved = |id: &str| {
            let mut i = input("a");
            i.hardware_reservation_id = Some(id.into());
            i
        };
        let refusal = |w: &mut World, id: &str| {
            let e = w.create_device("p", reserved(id), t0).unwrap_err();
            assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
            e.messages.join("; ")
        };
        // On demand there is no capacity; the reservation's server is there.
        assert!(refusal(&mut w, "").contains("capacity"));
        let id = w.create_device("p", reserved("r-1"), t0).unwrap();
        assert_eq!(w.reservations["r-1"].device.as_deref(), Some(id.as_str()));
        assert_eq!(
            w.device_json(&w.devices[&id])["hardware_reservation"]["id"],
            "r-1"
        );
        assert!(refusal(&mut w, "r-1").contains("already provisioned"));
        assert!(refusal(&mut w, "r-spare").contains("spare"));
        assert!(refusal(&mut w, "r-big").contains("n3.xlarge.x86"));
        assert!(refusal(&mut w, "r-other").contains("no such hardware reservation"));
        assert!(refusal(&mut w, "r-unknown").contains("no such hardware reservation"));
        assert!(refusal(&mut w, "next-available").contains("No available"));
        // Gone, the server is free again, and `next-available` finds it.
        w.remove_device(&id);
        assert_eq!(w.reservations["r-1"].device, None);
        let again = w
            .create_device("p", reserved("next-available"), t0)
            .unwrap();
        assert_eq!(
            w.devices[&again].hardware_reservation_id.as_deref(),
            Some("r-1")
        );
    }

    #[test]
    fn devices_follow_the_timings() {
        let t = Timings {
            queued_ms: 1_000,
            provisioning_ms: 10_000,
            reinstalling_ms: 5_000,
            deprovisioning_ms: 2_000,
            power_ms: 500,
        };
        let mut w = World::new(t, Faults::default());
        let t0 = Instant::now();
        let id = w.create_device("p", input("a"), t0).unwrap();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        w.advance(&id, at(999));
        assert_eq!(state(&w, &id), Some(State::Queued));
        w.advance(&id, at(1_000));
        assert_eq!(state(&w, &id), Some(State::Provisioning));
        assert!(w.boots.is_empty());
        w.advance(&id, at(11_000));
        assert_eq!(state(&w, &id), Some(State::Active));
        assert_eq!(w.boots[&id].boot_count, 1);

        let reinstall =
            serde_json::from_value(json!({"type": "reinstall", "preserve_data": true})).unwrap();
        w.action(&id, reinstall, at(20_000)).unwrap();
        w.advance(&id, at(24_999));
        assert_eq!(state(&w, &id), Some(State::Reinstalling));
        w.advance(&id, at(25_000));
        assert_eq!(state(&w, &id), Some(State::Active));
        assert_eq!(w.boots[&id].boot_count, 2);

        let off = serde_json::from_value(json!({"type": "power_off"})).unwrap();
        w.action(&id, off, at(30_000)).unwrap();
        w.advance(&id, at(30_100));
        assert_eq!(state(&w, &id), Some(State::PoweringOff));
        w.advance(&id, at(30_500));
        assert_eq!(state(&w, &id), Some(State::Inactive));

        let d = w.device_mut(&id).unwrap();
        d.state = State::Deprovisioning;
        d.since = at(40_000);
        w.advance(&id, at(41_999));
        assert_eq!(state(&w, &id), Some(State::Deprovisioning));
        w.advance(&id, at(42_000));
        assert_eq!(state(&w, &id), None, "gone after deprovisioning");
        assert!(w.port_owner.is_empty());
    }

    #[test]
    fn network_type_follows_the_metal_rules() {
        let mut w = World::new(Timings::instant(), Faults::default());
        let now = Instant::now();
        let id = w.create_device("p", input("n"), now).unwrap();
        w.advance(&id, now);
        let vlan = w
            .create_vlan(
                "p",
                serde_json::from_value(json!({"metro": "sv", "vxlan": 1234})).unwrap(),
            )
            .unwrap();
        let port = |w: &World, name: &str| {
            w.devices[&id]
                .ports
                .iter()
                .find(|p| p.name == name)
                .unwrap()
                .id
                .clone()
        };
        let (bond0, eth0, eth1) = (port(&w, "bond0"), port(&w, "eth0"), port(&w, "eth1"));
        let ty = |w: &World| World::network_type(&w.devices[&id]);
        assert_eq!(ty(&w), "layer3");
        w.port_op(&eth1, PortOp::Disbond { bulk: false }).unwrap();
        assert_eq!(ty(&w), "hybrid");
        w.port_op(&eth1, PortOp::Bond { bulk: false }).unwrap();
        w.port_op(&bond0, PortOp::Assign("1234".into())).unwrap();
        assert_eq!(ty(&w), "hybrid-bonded");
        assert!(
            w.port_op(&bond0, PortOp::ConvertLayer3).is_err(),
            "VLANs block layer 3"
        );
        w.port_op(&bond0, PortOp::Unassign(vlan.id.clone()))
            .unwrap();
        w.port_op(&bond0, PortOp::ConvertLayer2).unwrap();
        assert_eq!(ty(&w), "layer2-bonded");
        w.port_op(&eth0, PortOp::Disbond { bulk: true }).unwrap();
        assert_eq!(ty(&w), "layer2-individual");
        w.port_op(&eth0, PortOp::Assign(vlan.id.clone())).unwrap();
        assert!(
            w.port_op(&eth0, PortOp::Bond { bulk: true }).is_err(),
            "a port with VLANs is not bonded"
        );
        w.port_op(&eth0, PortOp::Unassign("1234".into())).unwrap();
        w.port_op(&bond0, PortOp::ConvertLayer3).unwrap();
        assert_eq!(ty(&w), "layer3");
    }

    #[test]
    fn macs_are_stable_and_distinct() {
        let mut w = World::new(Timings::instant(), Faults::default());
        let now = Instant::now();
        let a = w.create_device("p", input("a"), now).unwrap();
        let b = w.create_device("p", input("b"), now).unwrap();
        let macs = |id: &str| {
            w.devices[id]
                .ports
                .iter()
                .map(|p| p.mac.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            macs(&a),
            w.devices[&a]
                .ports
                .iter()
                .map(|p| mac_for(
                    &a,
                    if p.is_bond {
                        0xf
                    } else {
                        p.name[3..].parse().unwrap()
                    }
                ))
                .collect::<Vec<_>>()
        );
        assert_ne!(macs(&a), macs(&b));
    }

    #[test]
    fn loopback_urls_only() {
        assert!(is_loopback_url("http://127.0.0.1:8080/x.ipxe"));
        assert!(is_loopback_url("http://localhost/x"));
        assert!(is_loopback_url("http://[::1]/x"));
        assert!(!is_loopback_url("https://example.com/x"));
        assert!(!is_loopback_url("http://10.0.0.1/x"));
    }
}
