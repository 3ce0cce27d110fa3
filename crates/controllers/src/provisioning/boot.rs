//! What ingot's boot server (`ingot run --boot-addr`) answers, read from provisioning's stores:
//!
//! - `GET /boot/<mac>`: the iPXE script of the Inventory whose
//!   `spec.managementInterfaceMacAddress` is `<mac>`, while it is allocated, its script is
//!   written and its installer has not reported; otherwise a script that exits, so the
//!   firmware boots the next device (the disk). A MAC no Inventory has: 404 (with the same
//!   script). A site's DHCP points iPXE here; this is the only line it needs.
//! - `GET /config/<namespace>/<name>`: the node's Harvester install config, only to the
//!   node's own address (the one its kernel's `ip=` gives it), as Hegel hands out user data by
//!   source address; `--boot-allow-source` adds sources (a NAT or relay in between).
//! - `PUT /disable/<namespace>/<name>`: the installer's SUCCEEDED webhook (Seeder's path),
//!   from the same sources: the node stops being offered the installer, so its next boot is
//!   from its disk.

use std::net::IpAddr;

use ingot_api::seeder::Inventory;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;

use super::install::{self, ADDRESS_KEY, CONFIG_KEY, SCRIPT_KEY};
use super::node::phase::HARVESTER_INSTALLED;
use super::{Error, ProvisioningContext, Stores};
use crate::seeder::conditions;
use crate::seeder::inventory::is_local;

/// The script for a server that must boot from its disk.
pub const BOOT_FROM_DISK: &str = "#!ipxe\n# no install for this server: boot the next device\nexit\n";

/// The answer to `GET /boot/<mac>`.
#[derive(Debug, PartialEq)]
pub enum Script {
    Install(String),
    /// Known, not to be installed now.
    Disk,
    /// No Inventory has this MAC.
    Unknown,
}

/// The answer to the config and webhook requests.
#[derive(Debug, PartialEq)]
pub enum Answer<T> {
    Ok(T),
    /// Not from the node's address (nor an allowed source).
    Forbidden,
    /// No such allocated node.
    NotFound,
}

/// A MAC in the one spelling compared: lower case, colons.
pub fn normal_mac(mac: &str) -> String {
    mac.trim().to_ascii_lowercase().replace('-', ":")
}

fn by_mac(stores: &Stores, mac: &str) -> Option<std::sync::Arc<Inventory>> {
    let mac = normal_mac(mac);
    stores.inventories.state().into_iter().find(|i| {
        !is_local(i)
            && i.spec
                .management_interface_mac_address
                .as_deref()
                .is_some_and(|m| normal_mac(m) == mac)
    })
}

fn allocated(inventory: &Inventory) -> bool {
    inventory
        .status
        .as_ref()
        .is_some_and(|s| !s.owner_cluster.name.is_empty())
}

fn installed(inventory: &Inventory) -> bool {
    inventory
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, HARVESTER_INSTALLED))
}

pub fn script(stores: &Stores, mac: &str) -> Script {
    let Some(inventory) = by_mac(stores, mac) else {
        return Script::Unknown;
    };
    if !allocated(&inventory) || installed(&inventory) {
        return Script::Disk;
    }
    let namespace = inventory.namespace().unwrap_or_default();
    stores
        .secret(&namespace, &install::install_secret_name(&inventory.name_any()))
        .and_then(|s| install::value(&s, SCRIPT_KEY).map(str::to_owned))
        .map_or(Script::Disk, Script::Install)
}

/// Whether `source` may ask for this node's config or report its install.
fn from_node(secret: &k8s_openapi::api::core::v1::Secret, source: IpAddr, allowed: &[ipnet::IpNet]) -> bool {
    let own = install::value(secret, ADDRESS_KEY).and_then(|a| a.parse::<IpAddr>().ok());
    own == Some(source) || allowed.iter().any(|net| net.contains(&source))
}

pub fn config(stores: &Stores, namespace: &str, name: &str, source: IpAddr, allowed: &[ipnet::IpNet]) -> Answer<String> {
    let Some(inventory) = stores.inventory(namespace, name).filter(|i| allocated(i)) else {
        return Answer::NotFound;
    };
    let Some(secret) = stores.secret(namespace, &install::install_secret_name(&inventory.name_any())) else {
        return Answer::NotFound;
    };
    if !from_node(&secret, source, allowed) {
        return Answer::Forbidden;
    }
    install::value(&secret, CONFIG_KEY).map_or(Answer::NotFound, |c| Answer::Ok(c.to_owned()))
}

/// The SUCCEEDED webhook: `harvesterInstalled` on the Inventory (a repeat changes nothing).
pub async fn succeeded(
    ctx: &ProvisioningContext,
    namespace: &str,
    name: &str,
    source: IpAddr,
    allowed: &[ipnet::IpNet],
) -> Result<Answer<()>, Error> {
    let stores = ctx.stores().ok_or(Error::NotStarted)?;
    let Some(inventory) = stores.inventory(namespace, name).filter(|i| allocated(i)) else {
        return Ok(Answer::NotFound);
    };
    let Some(secret) = stores.secret(namespace, &install::install_secret_name(name)) else {
        return Ok(Answer::NotFound);
    };
    if !from_node(&secret, source, allowed) {
        return Ok(Answer::Forbidden);
    }
    if installed(&inventory) {
        return Ok(Answer::Ok(()));
    }
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut status = inventory.status.clone().unwrap_or_default();
    conditions::set_true(
        &mut status.conditions,
        HARVESTER_INSTALLED,
        Some("the installer reported SUCCEEDED: network boot is off, the server boots from its disk"),
        &now,
    );
    let api: kube::Api<Inventory> = kube::Api::namespaced(ctx.client.clone(), namespace);
    let body = json!({
        "metadata": {"resourceVersion": inventory.resource_version()},
        "status": {"conditions": status.conditions},
    });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await?;
    crate::crash_point(ctx.settings.crash_point.as_deref(), "provisioning-after-webhook");
    ctx.metrics.provisioning_installed();
    ctx.inventory_events
        .publish(inventory.as_ref(), EventType::Normal, "Installed", "Provision", "the Harvester installer reported SUCCEEDED")
        .await;
    Ok(Answer::Ok(()))
}
