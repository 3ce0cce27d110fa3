//! Address management of an AddressPool, pure: which addresses a pool may hand out, who holds
//! which, the next one for an owner. No Kubernetes API here; the state is the pool's status
//! (`addressAllocation`, keyed by the address), so a decision survives restarts.
//!
//! Unlike Seeder (research §1.8), the network and broadcast addresses are never handed out
//! (except in /31 and /32, where every address is a host), nor the gateway, nor a reserved
//! address, and a `staticAddress` is honoured or refused with the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ingot_api::seeder::{AddressPoolSpec, AddressPoolStatus, AllocatedObject};

/// `status.status` of a pool with a free address.
pub const READY: &str = "poolReady";
/// `status.status` of a pool whose every address is held.
pub const EXHAUSTED: &str = "poolExhausted";
/// `status.status` of a pool refused for bad input (ingot's; Seeder has no such state).
pub const INVALID: &str = "poolInvalid";

/// The owner kind of a Cluster's VIP.
pub const KIND_CLUSTER: &str = "cluster";
/// The owner kind of an Inventory's address.
pub const KIND_INVENTORY: &str = "inventory";
/// The owner kind (and name and namespace) Seeder writes for a reserved address.
pub const KIND_RESERVED: &str = "reserved";
const RESERVED_NAME: &str = "reservedAddress";

/// The owner entry of a reserved address, as Seeder writes it.
pub fn reserved_owner() -> AllocatedObject {
    AllocatedObject {
        kind: KIND_RESERVED.to_owned(),
        name: RESERVED_NAME.to_owned(),
        namespace: KIND_RESERVED.to_owned(),
    }
}

/// A spec that cannot make a pool: the field, the value and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.cidr {0:?} is not an IPv4 CIDR; give one such as 172.16.128.0/24")]
    Cidr(String),
    #[error("spec.gateway {0:?} is not an IPv4 address; give one such as 172.16.128.1")]
    Gateway(String),
    #[error(
        "spec.netmask {0:?} is not an IPv4 netmask; give one such as 255.255.255.0, or leave it out to use the CIDR's"
    )]
    Netmask(String),
    #[error(
        "spec.gateway {gateway} is not on the pool's network {network}/{netmask}; give a gateway on that network (or a wider spec.netmask)"
    )]
    GatewayOffLink {
        gateway: Ipv4Addr,
        network: Ipv4Addr,
        netmask: Ipv4Addr,
    },
    #[error(
        "spec.reservedAddresses: {value:?} is not an address of {cidr}; give only addresses of spec.cidr"
    )]
    Reserved { value: String, cidr: String },
}

/// Why an owner got no address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    #[error("staticAddress {0:?} is not an IPv4 address; give one such as 172.16.128.10")]
    StaticInvalid(String),
    #[error("staticAddress {address} is not in the pool's cidr {cidr}; give an address of {cidr}")]
    StaticOutside { address: Ipv4Addr, cidr: String },
    #[error(
        "staticAddress {address} is the {what} address of {cidr}; give a host address from {first} to {last}"
    )]
    StaticNotHost {
        address: Ipv4Addr,
        what: &'static str,
        cidr: String,
        first: Ipv4Addr,
        last: Ipv4Addr,
    },
    #[error("staticAddress {0} is the pool's gateway; give another address of the pool")]
    StaticGateway(Ipv4Addr),
    #[error(
        "staticAddress {0} is in the pool's reservedAddresses; give another address of the pool"
    )]
    StaticReserved(Ipv4Addr),
    #[error(
        "staticAddress {address} is held by {kind} {namespace}/{name}; give a free address or release it there"
    )]
    StaticTaken {
        address: Ipv4Addr,
        kind: String,
        namespace: String,
        name: String,
    },
    #[error("every address of the pool ({cidr}) is held; free one or use another pool")]
    Exhausted { cidr: String },
}

/// A valid pool spec: its CIDR, netmask, gateway and reserved addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    cidr: String,
    network: u32,
    prefix: u8,
    netmask: Ipv4Addr,
    gateway: Ipv4Addr,
    reserved: BTreeSet<Ipv4Addr>,
}

/// The mask of a prefix length.
fn mask(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    }
}

fn parse_cidr(cidr: &str) -> Option<(u32, u8)> {
    let (address, prefix) = cidr.trim().split_once('/')?;
    let address: Ipv4Addr = address.parse().ok()?;
    let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32)?;
    Some((u32::from(address) & mask(prefix), prefix))
}

fn parse_netmask(netmask: &str) -> Option<Ipv4Addr> {
    let value = u32::from(netmask.trim().parse::<Ipv4Addr>().ok()?);
    // Contiguous ones from the top: its complement plus one is a power of two.
    let contiguous = value == 0 || (!value).wrapping_add(1).is_power_of_two();
    contiguous.then_some(value.into())
}

impl Pool {
    /// The pool of `spec`, or the first field that is wrong. The gateway must be on the link's
    /// network: the CIDR's address under `spec.netmask` (the README's /32 pools name a gateway
    /// outside their one address, on the /21 their netmask gives), or the CIDR itself.
    pub fn parse(spec: &AddressPoolSpec) -> Result<Pool, SpecError> {
        let (network, prefix) =
            parse_cidr(&spec.cidr).ok_or_else(|| SpecError::Cidr(spec.cidr.clone()))?;
        let netmask = match spec.netmask.as_deref().filter(|m| !m.trim().is_empty()) {
            Some(m) => parse_netmask(m).ok_or_else(|| SpecError::Netmask(m.to_owned()))?,
            None => Ipv4Addr::from(mask(prefix)),
        };
        let gateway: Ipv4Addr = spec
            .gateway
            .trim()
            .parse()
            .map_err(|_| SpecError::Gateway(spec.gateway.clone()))?;
        let link = network & u32::from(netmask);
        if u32::from(gateway) & u32::from(netmask) != link {
            return Err(SpecError::GatewayOffLink {
                gateway,
                network: link.into(),
                netmask,
            });
        }
        let cidr = format!("{}/{prefix}", Ipv4Addr::from(network));
        let mut pool = Pool {
            cidr,
            network,
            prefix,
            netmask,
            gateway,
            reserved: BTreeSet::new(),
        };
        for value in spec.reserved_addresses.iter().flatten() {
            let refused = || SpecError::Reserved {
                value: value.clone(),
                cidr: pool.cidr.clone(),
            };
            let address: Ipv4Addr = value.trim().parse().map_err(|_| refused())?;
            if !pool.contains(address) {
                return Err(refused());
            }
            pool.reserved.insert(address);
        }
        Ok(pool)
    }

    /// The CIDR, normalised (`172.16.128.0/24`).
    pub fn cidr(&self) -> &str {
        &self.cidr
    }

    /// The link's netmask: `spec.netmask`, or the CIDR's.
    pub fn netmask(&self) -> Ipv4Addr {
        self.netmask
    }

    pub fn gateway(&self) -> Ipv4Addr {
        self.gateway
    }

    fn broadcast(&self) -> u32 {
        self.network | !mask(self.prefix)
    }

    /// The first host address: the network's next, or the network itself in /31 and /32.
    pub fn first(&self) -> Ipv4Addr {
        if self.prefix >= 31 {
            self.network
        } else {
            self.network + 1
        }
        .into()
    }

    /// The last host address: the broadcast's previous, or the broadcast in /31 and /32.
    pub fn last(&self) -> Ipv4Addr {
        if self.prefix >= 31 {
            self.broadcast()
        } else {
            self.broadcast() - 1
        }
        .into()
    }

    /// Whether `address` is in the CIDR.
    pub fn contains(&self, address: Ipv4Addr) -> bool {
        u32::from(address) & mask(self.prefix) == self.network
    }

    /// Whether the two pools share an address.
    pub fn overlaps(&self, other: &Pool) -> bool {
        self.network <= other.broadcast() && other.network <= self.broadcast()
    }

    /// Whether the pool may hand `address` out at all: a host address, not the gateway, not
    /// reserved.
    pub fn assignable(&self, address: Ipv4Addr) -> bool {
        (self.first()..=self.last()).contains(&address)
            && address != self.gateway
            && !self.reserved.contains(&address)
    }

    /// How many addresses the pool may hand out, reserved ones included (as Seeder counts
    /// them, they fill the pool as allocations): the host addresses less the gateway.
    pub fn available(&self) -> i64 {
        let hosts = i64::from(u32::from(self.last()) - u32::from(self.first())) + 1;
        let gateway = (self.first()..=self.last()).contains(&self.gateway);
        hosts - i64::from(gateway)
    }

    /// The lowest address not held in `allocation` that the pool may hand out.
    pub fn lowest_free(&self, allocation: &BTreeMap<String, AllocatedObject>) -> Option<Ipv4Addr> {
        let held: BTreeSet<Ipv4Addr> = allocation.keys().filter_map(|k| k.parse().ok()).collect();
        (u32::from(self.first())..=u32::from(self.last()))
            .map(Ipv4Addr::from)
            .find(|a| self.assignable(*a) && !held.contains(a))
    }

    /// Why `address` (a `staticAddress`) may not be handed out, whoever holds it.
    fn refuse_static(&self, address: Ipv4Addr) -> Option<AllocateError> {
        if !self.contains(address) {
            return Some(AllocateError::StaticOutside {
                address,
                cidr: self.cidr.clone(),
            });
        }
        let not_host = |what| AllocateError::StaticNotHost {
            address,
            what,
            cidr: self.cidr.clone(),
            first: self.first(),
            last: self.last(),
        };
        if address < self.first() {
            return Some(not_host("network"));
        }
        if address > self.last() {
            return Some(not_host("broadcast"));
        }
        if address == self.gateway {
            return Some(AllocateError::StaticGateway(address));
        }
        self.reserved
            .contains(&address)
            .then_some(AllocateError::StaticReserved(address))
    }
}

/// The status a pool should show: Seeder's fields from the spec (`startAddress` and
/// `lastAddress` the first and last host address, `availableAddresses` as
/// [`Pool::available`], `netmask` the spec's or the CIDR's), the reserved addresses as
/// allocations of [`reserved_owner`] (a reserved address an owner holds already stays the
/// owner's), and `poolReady` or `poolExhausted`.
pub fn settled(pool: &Pool, current: &AddressPoolStatus) -> AddressPoolStatus {
    let mut status = current.clone();
    status.start_address = pool.first().to_string();
    status.last_address = pool.last().to_string();
    status.available_addresses = pool.available();
    status.netmask = pool.netmask.to_string();
    let reserved = reserved_owner();
    status
        .address_allocation
        .retain(|address, owner| *owner != reserved || is_reserved(pool, address));
    for address in &pool.reserved {
        status
            .address_allocation
            .entry(address.to_string())
            .or_insert_with(|| reserved.clone());
    }
    refresh(pool, &mut status);
    status
}

fn is_reserved(pool: &Pool, address: &str) -> bool {
    address.parse().is_ok_and(|a| pool.reserved.contains(&a))
}

/// Sets `status.status` from what is free.
pub fn refresh(pool: &Pool, status: &mut AddressPoolStatus) {
    status.status = match pool.lowest_free(&status.address_allocation) {
        Some(_) => READY,
        None => EXHAUSTED,
    }
    .to_owned();
}

/// The address `owner` holds in `status`, if any.
pub fn held_by(status: &AddressPoolStatus, owner: &AllocatedObject) -> Option<Ipv4Addr> {
    status
        .address_allocation
        .iter()
        .find(|(_, o)| *o == owner)
        .and_then(|(address, _)| address.parse().ok())
}

/// Gives `owner` an address and records it in `status`: the one it holds already (so a
/// repeated call, or one after a restart, changes nothing), else `static_address` if the pool
/// may hand it out and no one else holds it, else the lowest free one. Returns the address and
/// whether `status` changed.
pub fn allocate(
    pool: &Pool,
    status: &mut AddressPoolStatus,
    owner: &AllocatedObject,
    static_address: Option<&str>,
) -> Result<(Ipv4Addr, bool), AllocateError> {
    if let Some(address) = held_by(status, owner) {
        return Ok((address, false));
    }
    let address = match static_address.map(str::trim).filter(|s| !s.is_empty()) {
        Some(text) => static_choice(pool, status, text)?,
        None => pool
            .lowest_free(&status.address_allocation)
            .ok_or_else(|| AllocateError::Exhausted {
                cidr: pool.cidr.clone(),
            })?,
    };
    status
        .address_allocation
        .insert(address.to_string(), owner.clone());
    refresh(pool, status);
    Ok((address, true))
}

fn static_choice(
    pool: &Pool,
    status: &AddressPoolStatus,
    text: &str,
) -> Result<Ipv4Addr, AllocateError> {
    let address: Ipv4Addr = text
        .parse()
        .map_err(|_| AllocateError::StaticInvalid(text.to_owned()))?;
    if let Some(refused) = pool.refuse_static(address) {
        return Err(refused);
    }
    match status.address_allocation.get(&address.to_string()) {
        Some(holder) => Err(AllocateError::StaticTaken {
            address,
            kind: holder.kind.clone(),
            namespace: holder.namespace.clone(),
            name: holder.name.clone(),
        }),
        None => Ok(address),
    }
}

/// Frees every address `owner` holds; returns whether `status` changed. Reserved addresses are
/// never freed this way.
pub fn release(pool: &Pool, status: &mut AddressPoolStatus, owner: &AllocatedObject) -> bool {
    if owner.kind == KIND_RESERVED {
        return false;
    }
    let before = status.address_allocation.len();
    status.address_allocation.retain(|_, o| o != owner);
    let changed = status.address_allocation.len() != before;
    if changed {
        refresh(pool, status);
    }
    changed
}

/// The owners holding an address (reserved entries left out), each once.
pub fn holders(status: &AddressPoolStatus) -> Vec<(String, AllocatedObject)> {
    status
        .address_allocation
        .iter()
        .filter(|(_, o)| o.kind != KIND_RESERVED)
        .map(|(a, o)| (a.clone(), o.clone()))
        .collect()
}

#[cfg(test)]
#[path = "ipam_tests.rs"]
mod tests;
