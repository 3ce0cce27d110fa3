//! Each allocated node's script and config, from its Cluster, its Inventory, the token and
//! its OS password (`ingot_harvester::provision` renders; this maps the objects onto it), plus
//! the node-reader manifest the create node installs.

use std::collections::BTreeMap;

use ingot_api::seeder::Cluster;
use ingot_harvester::provision::{NodeInstall, NodeMode};
use ingot_harvester::secret::Secret as Hidden;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use serde_yaml::{Mapping, Value};

use super::cluster::observe::MemberView;
use super::install::{self, NODE_READER_ID_KEY, NODE_READER_SECRET_KEY, PASSWORD_KEY, TOKEN_KEY};
use super::tinkerbell::Stack;
use super::{ProvisioningContext, Stores};

/// What the boot server hands one node.
#[derive(Clone, Debug, PartialEq)]
pub struct InstallFiles {
    /// Empty in stream-image mode (no install script).
    pub script: String,
    pub config: String,
    /// The node's address (only it may fetch the config).
    pub address: String,
}

/// Why a Cluster with `streamImageMode` is refused when ingot serves the boot itself.
pub const STREAM_NEEDS_TINKERBELL: &str = "spec.clusterConfig.streamImageMode is set: the node writes a raw image through a Tinkerbell workflow, which ingot's own boot does not run: run ingot with --provisioning-boot tinkerbell (Tinkerbell installed), or unset streamImageMode to install from the ISO";

/// The most read from `clusterConfig.configURL`.
const MAX_BASE_CONFIG: usize = 1 << 20;
/// Where RKE2 applies manifests from on its servers.
pub const RKE2_MANIFESTS: &str = "/var/lib/rancher/rke2/server/manifests";
/// The group of the node-reader bootstrap token (bootstrap groups must start so).
pub const NODE_READER_GROUP: &str = "system:bootstrappers:ingot-node-reader";

/// Whether `mac` is six colon-separated hex octets.
pub fn is_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The files each allocated node should have, by `spec.nodes` index.
pub async fn wanted_installs(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    stores: &Stores,
    members: &[MemberView],
    token: Option<&Secret>,
    tink: Option<&Result<Stack, String>>,
) -> Vec<(usize, Result<InstallFiles, String>)> {
    let config = cluster.spec.cluster_config.clone().unwrap_or_default();
    let base = match config.config_url.as_deref().filter(|u| !u.is_empty()) {
        Some(url) => Some(fetch_base(ctx, url).await),
        None => None,
    };
    members
        .iter()
        .filter(|m| allocated_to(cluster, m))
        .map(|m| {
            let files = match &base {
                Some(Err(why)) => Err(why.clone()),
                _ => node_files(
                    cluster,
                    ctx,
                    stores,
                    m,
                    token,
                    base.clone().and_then(Result::ok),
                    tink,
                ),
            };
            (m.index, files)
        })
        .collect()
}

fn allocated_to(cluster: &Cluster, member: &MemberView) -> bool {
    member
        .inventory
        .as_ref()
        .and_then(|i| i.status.as_ref())
        .is_some_and(|s| {
            Some(&s.owner_cluster.name) == cluster.metadata.name.as_ref()
                && s.pxe_boot_config.address.is_some()
        })
}

async fn fetch_base(ctx: &ProvisioningContext, url: &str) -> Result<Value, String> {
    let fail = |why: String| {
        format!(
            "clusterConfig.configURL {url}: {why}; make it serve the base Harvester config as YAML"
        )
    };
    let mut response = ctx
        .http
        .get(url)
        .send()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?;
    if !response.status().is_success() {
        return Err(fail(format!("HTTP {}", response.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?
    {
        if body.len() + chunk.len() > MAX_BASE_CONFIG {
            return Err(fail(format!("more than {MAX_BASE_CONFIG} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    serde_yaml::from_slice(&body).map_err(|e| fail(format!("not YAML: {e}")))
}

fn node_files(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    stores: &Stores,
    member: &MemberView,
    token: Option<&Secret>,
    base: Option<Value>,
    tink: Option<&Result<Stack, String>>,
) -> Result<InstallFiles, String> {
    let config = cluster.spec.cluster_config.clone().unwrap_or_default();
    let inventory = member.inventory.as_ref().ok_or("the Inventory is gone")?;
    let status = inventory.status.clone().unwrap_or_default();
    let stream = config.stream_image_mode.unwrap_or(false);
    let stack = match tink {
        Some(stack) => Some(stack.as_ref().map_err(Clone::clone)?),
        None if stream => {
            return Err(STREAM_NEEDS_TINKERBELL.to_owned());
        }
        None => None,
    };
    let boot_url = ctx.settings.boot_url.as_ref();
    let path = format!("{}/{}", member.namespace, member.name);
    let (config_url, webhook_url) = match stack {
        // Hegel serves the config; the installer's webhook (not in stream mode) comes to ingot.
        Some(stack) => (
            stack.user_data_url(),
            match boot_url {
                _ if stream => String::new(),
                Some(url) => join(url, &format!("disable/{path}")),
                None => return Err("ingot runs without --boot-url, so the installer's SUCCEEDED webhook has nowhere to go: give ingot run the URL servers reach its boot server at (or use streamImageMode, which has no webhook)".to_owned()),
            },
        ),
        None => {
            let boot_url = boot_url.ok_or(
                "ingot runs without --boot-url, so no node can reach its install config: give ingot run the URL servers reach its boot server at",
            )?;
            (
                join(boot_url, &format!("config/{path}")),
                join(boot_url, &format!("disable/{path}")),
            )
        }
    };
    let vip = cluster
        .status
        .as_ref()
        .and_then(|s| s.cluster_address.clone())
        .ok_or("the Cluster has no address yet")?;
    let secret = stores
        .secret(
            &member.namespace,
            &install::install_secret_name(&member.name),
        )
        .ok_or("the node's install Secret is not written yet")?;
    let token = token.ok_or("the cluster token Secret is not written yet")?;
    let node = NodeInstall {
        version: cluster.spec.version.clone(),
        image_url: cluster.spec.image_url.clone().unwrap_or_default(),
        arch: inventory
            .spec
            .arch
            .clone()
            .unwrap_or_else(|| "amd64".to_owned()),
        mac: inventory
            .spec
            .management_interface_mac_address
            .clone()
            .unwrap_or_default(),
        hostname: format!("{}-{}", member.name, member.namespace),
        address: status.pxe_boot_config.address.clone().unwrap_or_default(),
        netmask: status.pxe_boot_config.netmask.clone().unwrap_or_default(),
        gateway: status.pxe_boot_config.gateway.clone().unwrap_or_default(),
        primary_disk: inventory.spec.primary_disk.clone().unwrap_or_default(),
        mode: if member.index == 0 {
            NodeMode::Create { vip }
        } else {
            NodeMode::Join { vip }
        },
        token: Hidden::new(install::value(token, TOKEN_KEY).unwrap_or_default()),
        os_password: Hidden::new(install::value(&secret, PASSWORD_KEY).unwrap_or_default()),
        ssh_keys: config.ssh_keys.clone().unwrap_or_default(),
        nameservers: config.nameservers.clone().unwrap_or_default(),
        vlan_id: config.vlan_id.and_then(|v| u32::try_from(v).ok()),
        bond_options: config.bond_options.clone(),
        wipe_disks: config.wipe_disks.unwrap_or(false),
        stream_image_mode: stream,
        base_config: base,
        config_url,
        webhook_url,
    };
    // Stream mode boots no install script (Tinkerbell's workflow writes the image).
    let script = if stream {
        String::new()
    } else {
        ingot_harvester::ipxe_script(&node).map_err(|e| e.to_string())?
    };
    let mut config = ingot_harvester::install_config(&node).map_err(|e| e.to_string())?;
    if member.index == 0 {
        config = with_node_reader(&config, token)?;
    }
    Ok(InstallFiles {
        script,
        config,
        address: node.address,
    })
}

/// What in the Cluster's own settings (`spec.version`, `spec.imageURL`, `clusterConfig`) keeps
/// any node from being rendered, found before anything is allocated: rendered for a stand-in
/// node whose own values are all valid, so an error can only name a Cluster field. Then whether
/// ingot itself can hand the files out. The Cluster's `Ready` reason and the message.
pub fn settings_problem(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
) -> Option<(&'static str, String)> {
    let stand_in_url = url::Url::parse("http://stand-in.invalid").ok()?;
    let boot_url = ctx.settings.boot_url.as_ref().unwrap_or(&stand_in_url);
    let config = cluster.spec.cluster_config.clone().unwrap_or_default();
    let stand_in = NodeInstall {
        version: cluster.spec.version.clone(),
        image_url: cluster.spec.image_url.clone().unwrap_or_default(),
        arch: "amd64".to_owned(),
        mac: "02:00:00:00:00:01".to_owned(),
        hostname: "stand-in".to_owned(),
        address: "10.0.0.2".to_owned(),
        netmask: "255.255.255.0".to_owned(),
        gateway: "10.0.0.1".to_owned(),
        primary_disk: "/dev/sda".to_owned(),
        mode: NodeMode::Create {
            vip: "10.0.0.3".to_owned(),
        },
        token: Hidden::new("stand-in".to_owned()),
        os_password: Hidden::new("stand-in".to_owned()),
        ssh_keys: config.ssh_keys.clone().unwrap_or_default(),
        nameservers: config.nameservers.clone().unwrap_or_default(),
        vlan_id: config.vlan_id.and_then(|v| u32::try_from(v).ok()),
        bond_options: config.bond_options.clone(),
        wipe_disks: config.wipe_disks.unwrap_or(false),
        stream_image_mode: config.stream_image_mode.unwrap_or(false),
        base_config: None,
        config_url: join(boot_url, "config/stand-in/stand-in"),
        webhook_url: join(boot_url, "disable/stand-in/stand-in"),
    };
    // Stream mode boots no install script (and ingot's own boot refuses it before this).
    let script = if stand_in.stream_image_mode {
        Ok(String::new())
    } else {
        ingot_harvester::ipxe_script(&stand_in)
    };
    if let Err(e) = script.and_then(|_| ingot_harvester::install_config(&stand_in)) {
        return Some(("ClusterInvalid", e.to_string()));
    }
    // Only Tinkerbell's stream mode reports to nobody and fetches nothing from ingot.
    let needs_boot_server = !(ctx.settings.tinkerbell() && stand_in.stream_image_mode);
    (needs_boot_server && ctx.settings.boot_url.is_none()).then(|| {
        (
            "BootServerUnset",
            "ingot runs without --boot-url, so no node can reach its install config: give ingot run the URL servers reach its boot server at".to_owned(),
        )
    })
}

fn join(base: &url::Url, path: &str) -> String {
    format!("{}/{path}", base.as_str().trim_end_matches('/'))
}

/// Adds to the create node's config the manifest RKE2 applies on its first start: a bootstrap
/// token whose only rights are to list and watch Nodes (see `super::remote`).
fn with_node_reader(config: &str, token: &Secret) -> Result<String, String> {
    let id = install::value(token, NODE_READER_ID_KEY)
        .ok_or("the token Secret has no node-reader id")?;
    let secret = install::value(token, NODE_READER_SECRET_KEY)
        .ok_or("the token Secret has no node-reader secret")?;
    let mut document: Value = serde_yaml::from_str(config).map_err(|e| e.to_string())?;
    let file: Value = serde_yaml::to_value(BTreeMap::from([
        ("path", format!("{RKE2_MANIFESTS}/ingot-node-reader.yaml")),
        ("owner", "root".to_owned()),
        ("permissions", "0600".to_owned()),
        ("content", node_reader_manifest(id, secret)),
    ]))
    .map_err(|e| e.to_string())?;
    let os = document
        .as_mapping_mut()
        .ok_or("the install config is not a map")?
        .entry(Value::from("os"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let files = os
        .as_mapping_mut()
        .ok_or("os is not a map")?
        .entry(Value::from("writeFiles"))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    files
        .as_sequence_mut()
        .ok_or("os.writeFiles is not a list")?
        .push(file);
    serde_yaml::to_string(&document).map_err(|e| e.to_string())
}

/// The bootstrap token Secret, a ClusterRole that lists and watches Nodes, and its binding to the token's
/// group.
pub fn node_reader_manifest(id: &str, secret: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-{id}
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: ingot lists and watches the Nodes of this cluster with this token, and nothing else
  token-id: {id}
  token-secret: {secret}
  usage-bootstrap-authentication: \"true\"
  auth-extra-groups: {NODE_READER_GROUP}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ingot-node-reader
rules:
- apiGroups: [\"\"]
  resources: [nodes]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ingot-node-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ingot-node-reader
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: {NODE_READER_GROUP}
"
    )
}

/// The name the create node's Node will be listed under (Seeder's `os.hostname`).
pub fn hostname(inventory: &ingot_api::seeder::Inventory) -> String {
    format!(
        "{}-{}",
        inventory.name_any(),
        inventory.namespace().unwrap_or_default()
    )
}
