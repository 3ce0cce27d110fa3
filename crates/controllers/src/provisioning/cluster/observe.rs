//! What one pass of the Cluster controller sees: the VIP, the token, each `spec.nodes` entry,
//! whether the nodes' install Secrets are current, and (while booting) the new cluster's
//! Ready Nodes. Reads the stores; the API server only for the new cluster.

use std::sync::Arc;

use ingot_api::seeder::{Cluster, INVENTORY_NODE_READY, Inventory};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::phase::{self, Member, Phase};
use super::reference_namespace;
use crate::provisioning::install::{self, CONFIG_KEY, SCRIPT_KEY};
use crate::provisioning::node::phase::HARVESTER_INSTALLED;
use crate::provisioning::{
    Error, ProvisioningContext, Stores, allocation, full_name, remote, render,
};
use crate::seeder::conditions;

/// One `spec.nodes` entry as found.
#[derive(Clone, Debug)]
pub struct MemberView {
    pub index: usize,
    pub namespace: String,
    pub name: String,
    pub inventory: Option<Arc<Inventory>>,
    pub pool_namespace: String,
    pub pool_name: String,
    pub static_address: Option<String>,
}

/// What [`observe`] found, for the state machine and the executor.
pub struct Observation {
    pub state: phase::Observed,
    pub members: Vec<MemberView>,
    pub token: Option<Arc<Secret>>,
    /// The install files each allocated node should have (index → script and config), or why
    /// they cannot be made (a `clusterConfig` or Inventory field to fix).
    pub installs: Vec<(usize, Result<render::InstallFiles, String>)>,
}

pub async fn observe(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    stores: &Stores,
) -> Result<Observation, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let phase = Phase::parse(cluster.status.as_ref().and_then(|s| s.status.as_deref()));
    let token = stores.secret(&namespace, &install::token_secret_name(&name));
    let members = member_views(cluster, stores);
    let found: Vec<(String, Member)> = members
        .iter()
        .map(|m| {
            (
                full_name(&m.namespace, &m.name),
                member(cluster, ctx, stores, m),
            )
        })
        .collect();
    let installs = match phase {
        Some(Phase::NodesPatched | Phase::BootReady | Phase::Running) => {
            render::wanted_installs(cluster, ctx, stores, &members, token.as_deref()).await
        }
        _ => Vec::new(),
    };
    let stale_installs = installs
        .iter()
        .filter(|(i, wanted)| match wanted {
            Ok(files) => !current(stores, &members[*i], files),
            // Reported by the executor with the field to fix.
            Err(_) => true,
        })
        .count();
    let installed = members
        .iter()
        .filter(|m| {
            m.inventory.as_ref().is_some_and(|i| {
                i.status
                    .as_ref()
                    .is_some_and(|s| conditions::is_true(&s.conditions, HARVESTER_INSTALLED))
            })
        })
        .count();
    let remote_ready = match (phase, &token) {
        // Asked once the create node reported its install: before, nothing answers.
        (Some(Phase::BootReady), Some(token)) if installed > 0 => {
            remote::ready_nodes(cluster, ctx, token, &members).await
        }
        _ => None,
    };
    Ok(Observation {
        state: phase::Observed {
            phase,
            // Looked at only until the nodes are allocated; after, each node's rendering says.
            settings_problem: match phase {
                Some(Phase::New | Phase::ConfigReady) => render::settings_problem(cluster, ctx),
                _ => None,
            },
            vip: allocation::vip(cluster, ctx, stores),
            token: token.is_some(),
            members: found,
            stale_installs,
            installed,
            remote_ready,
        },
        members,
        token,
        installs,
    })
}

fn member_views(cluster: &Cluster, stores: &Stores) -> Vec<MemberView> {
    cluster
        .spec
        .nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let namespace = reference_namespace(&node.inventory_reference.namespace, cluster);
            let name = node.inventory_reference.name.clone();
            MemberView {
                index,
                inventory: stores.inventory(&namespace, &name),
                namespace,
                name,
                pool_namespace: reference_namespace(
                    &node.address_pool_reference.namespace,
                    cluster,
                ),
                pool_name: node.address_pool_reference.name.clone(),
                static_address: node.static_address.clone().filter(|a| !a.is_empty()),
            }
        })
        .collect()
}

/// What a `spec.nodes` entry is, for the state machine.
fn member(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    stores: &Stores,
    view: &MemberView,
) -> Member {
    let own = cluster.namespace().unwrap_or_default();
    if !ctx.may_use(&own, &view.namespace) {
        return Member::Invalid {
            field: "inventoryReference.namespace",
            fix: format!(
                "a Cluster of namespace {own} may not install Inventories of namespace {}: move one of them, or allow it with --rufio-allow-cross-namespace {own}={}",
                view.namespace, view.namespace
            ),
        };
    }
    let Some(inventory) = &view.inventory else {
        return Member::Missing;
    };
    let status = inventory.status.clone().unwrap_or_default();
    let owner = &status.owner_cluster;
    if !owner.name.is_empty() {
        let mine = Some(&owner.name) == cluster.metadata.name.as_ref()
            && Some(&owner.namespace) == cluster.metadata.namespace.as_ref();
        return if !mine {
            Member::Taken {
                by: full_name(&owner.namespace, &owner.name),
            }
        } else if status.pxe_boot_config.address.is_some() {
            Member::Allocated
        } else {
            Member::Free
        };
    }
    if inventory.metadata.deletion_timestamp.is_some() {
        return Member::Invalid {
            field: "inventoryReference",
            fix: format!(
                "Inventory {}/{} is being deleted: remove it from spec.nodes, or list it again once it is created anew",
                view.namespace, view.name
            ),
        };
    }
    // Free, and listed by other Clusters too: the one created first gets it.
    let clusters = stores.clusters.state();
    let listing = clusters
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| ctx.may_use(&c.namespace().unwrap_or_default(), &view.namespace));
    if let Some(by) = super::claims::claimed_by_other(cluster, &view.namespace, &view.name, listing)
    {
        return Member::Taken { by };
    }
    if let Some((field, fix)) = invalid(inventory) {
        return Member::Invalid { field, fix };
    }
    if status.status.as_deref() != Some(INVENTORY_NODE_READY) {
        return Member::NotReady;
    }
    Member::Free
}

/// A field of the Inventory that keeps it from being installed.
fn invalid(inventory: &Inventory) -> Option<(&'static str, String)> {
    let spec = &inventory.spec;
    if spec.primary_disk.as_deref().is_none_or(str::is_empty) {
        return Some((
            "spec.primaryDisk",
            "set the disk Harvester installs on, such as /dev/sda".to_owned(),
        ));
    }
    match spec.management_interface_mac_address.as_deref() {
        Some(mac) if render::is_mac(mac) => None,
        Some(mac) => Some((
            "spec.managementInterfaceMacAddress",
            format!("{mac:?} is not a MAC address such as 0c:c4:7a:6b:84:20"),
        )),
        None => Some((
            "spec.managementInterfaceMacAddress",
            "set the MAC of the interface the server network-boots from".to_owned(),
        )),
    }
}

/// Whether the node's install Secret already holds `files`.
fn current(stores: &Stores, view: &MemberView, files: &render::InstallFiles) -> bool {
    stores
        .secret(&view.namespace, &install::install_secret_name(&view.name))
        .is_some_and(|s| {
            install::value(&s, SCRIPT_KEY) == Some(files.script.as_str())
                && install::value(&s, CONFIG_KEY) == Some(files.config.as_str())
        })
}
