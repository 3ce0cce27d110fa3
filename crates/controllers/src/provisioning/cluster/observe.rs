//! What one pass of the Cluster controller sees: the VIP, the token, each `spec.nodes` entry,
//! whether the nodes' install Secrets are current, and (while booting) the new cluster's
//! Ready Nodes. Reads the stores; the API server only for the new cluster.

use std::sync::Arc;

use ingot_api::seeder::{Cluster, INVENTORY_NODE_READY, Inventory};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::phase::{self, Member, Phase};
use super::reference_namespace;
use crate::provisioning::install::{self, CONFIG_KEY, SCRIPT_KEY};
use crate::provisioning::node::phase::HARVESTER_INSTALLED;
use crate::provisioning::tinkerbell::{self, Kind};
use crate::provisioning::{
    BootMode, Error, ProvisioningContext, Stores, allocation, full_name, remote, render,
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
    /// Tinkerbell mode: each allocated node's Hardware, Template and Workflow as they should
    /// be, and whether they are.
    pub tink: Vec<TinkObject>,
}

/// One Tinkerbell object of a node, as it should be.
#[derive(Clone, Debug)]
pub struct TinkObject {
    /// The `spec.nodes` index.
    pub index: usize,
    pub kind: tinkerbell::Kind,
    pub spec: serde_json::Value,
    /// The `resourceVersion` it was read at, if it exists (to be patched under it, not
    /// created).
    pub read_at: Option<String>,
    /// It exists with this spec, and the Inventory's condition says so.
    pub current: bool,
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
    let writing = matches!(
        phase,
        Some(Phase::NodesPatched | Phase::BootReady | Phase::Running)
    );
    let stack = match (&ctx.settings.boot, stores.tink_listed()?) {
        (BootMode::Tinkerbell { address }, Some(tink)) if writing => Some(tinkerbell::stack(
            &namespace,
            address.as_deref(),
            tink.service(&namespace).as_deref(),
            tink.config(&namespace).as_deref(),
        )),
        _ => None,
    };
    let installs = if writing {
        render::wanted_installs(
            cluster,
            ctx,
            stores,
            &members,
            token.as_deref(),
            stack.as_ref(),
        )
        .await
    } else {
        Vec::new()
    };
    let tink = match &stack {
        Some(Ok(stack)) => tink_objects(cluster, ctx, stores, &members, &installs, stack).await?,
        _ => Vec::new(),
    };
    let tink_blocked = stack.and_then(Result::err);
    let stale_tink = tink.iter().filter(|o| !o.current).count();
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
    let key = ObjectRef::from(cluster);
    let remote_ready = match (phase, &token) {
        // Asked once the create node reported its install: before, nothing answers.
        (Some(Phase::BootReady), Some(token)) if installed > 0 => {
            remote::ready_nodes(cluster, ctx, token, &members).await
        }
        // Running, or back to allocation: its Nodes are no longer followed.
        _ => {
            ctx.node_watches.stop(&key);
            None
        }
    };
    let watching = ctx.node_watches.following(&key);
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
            stale_tink,
            tink_blocked,
            config_refused: (!ctx.settings.tinkerbell()
                && cluster
                    .spec
                    .cluster_config
                    .as_ref()
                    .and_then(|c| c.stream_image_mode)
                    .unwrap_or(false))
            .then(|| render::STREAM_NEEDS_TINKERBELL.to_owned()),
            installed,
            remote_ready,
            watching,
        },
        members,
        token,
        installs,
        tink,
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

/// Each allocated node's Hardware, Template and Workflow as they should be (from its rendered
/// files), and whether the API server and the Inventory's conditions show them so.
async fn tink_objects(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    stores: &Stores,
    members: &[MemberView],
    installs: &[(usize, Result<render::InstallFiles, String>)],
    stack: &tinkerbell::Stack,
) -> Result<Vec<TinkObject>, Error> {
    let tink = stores.tink_listed()?.ok_or(Error::NotStarted)?;
    let config = cluster.spec.cluster_config.clone().unwrap_or_default();
    let mut objects = Vec::new();
    for (index, files) in installs {
        let (Ok(files), Some(inventory)) = (files, members[*index].inventory.as_ref()) else {
            continue;
        };
        let member = &members[*index];
        let status = inventory.status.clone().unwrap_or_default();
        let pxe = &status.pxe_boot_config;
        let stream = config.stream_image_mode.unwrap_or(false);
        let node = tinkerbell::Node {
            name: &member.name,
            namespace: &member.namespace,
            mac: inventory
                .spec
                .management_interface_mac_address
                .as_deref()
                .unwrap_or_default(),
            arch: inventory.spec.arch.as_deref().unwrap_or("amd64"),
            address: pxe.address.as_deref().unwrap_or_default(),
            netmask: pxe.netmask.as_deref().unwrap_or_default(),
            gateway: pxe.gateway.as_deref().unwrap_or_default(),
            primary_disk: inventory.spec.primary_disk.as_deref().unwrap_or_default(),
            version: &cluster.spec.version,
            image_url: cluster.spec.image_url.as_deref().unwrap_or_default(),
            user_data: &files.config,
            script: (!stream).then_some(files.script.as_str()),
            installed: conditions::is_true(&status.conditions, HARVESTER_INSTALLED),
            custom_template: config.custom_provisioning_template.as_deref(),
        };
        let specs = [
            (Kind::Hardware, tinkerbell::hardware_spec(&node)),
            (
                Kind::Template,
                tinkerbell::template_spec(&node, stack).map_err(Error::Address)?,
            ),
            (Kind::Workflow, tinkerbell::workflow_spec(&node)),
        ];
        for (kind, mut spec) in specs {
            // The Workflow as watched; a stale one is written under the version it was
            // seen at, refused, and seen again.
            let found = match kind {
                Kind::Workflow => tink
                    .workflow(&member.namespace, &member.name)
                    .map(|w| (*w).clone()),
                _ => {
                    tinkerbell::api(&ctx.client, &member.namespace, kind)
                        .get_opt(&member.name)
                        .await?
                }
            };
            if let (Kind::Hardware, Some(found)) = (kind, &found) {
                // Network boot turned off (the install reported) stays off for this
                // allocation, even if the Inventory's record of it is not seen yet.
                tinkerbell::keep_netboot_off(&mut spec, &found.data["spec"]);
            }
            let read_at = found
                .as_ref()
                .map(|o| o.metadata.resource_version.clone().unwrap_or_default());
            let current = found.is_some_and(|o| tinkerbell::contains(&o.data["spec"], &spec))
                && conditions::is_true(&status.conditions, kind.condition());
            objects.push(TinkObject {
                index: *index,
                kind,
                spec,
                read_at,
                current,
            });
        }
    }
    Ok(objects)
}
