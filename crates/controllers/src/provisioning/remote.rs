//! Whether the new cluster has its Nodes: `GET https://<VIP>:<port>/api/v1/nodes` with the
//! cluster's node-reader bootstrap token (`<id>.<secret>` from its token Secret).
//!
//! Seeder mints a `system:masters` client certificate from RKE2's server-bootstrap endpoint
//! with the join token (a cluster-admin credential). ingot asks for less: the create node's
//! install config writes a manifest into RKE2's auto-deploy directory that makes a bootstrap
//! token (which RKE2's API server accepts, as `rke2 token create` tokens) whose only right is
//! to list Nodes (`render::node_reader_manifest`). The token never leaves the management
//! cluster's Secret and the node's own config.
//!
//! The port is 6443, or the Cluster's `clusterPort.harvesterhci.io` label (Seeder's override).
//! The new cluster's CA is not known to ingot (RKE2 makes it on the first node), so the
//! server's certificate is not verified: someone on the path could only learn a token that
//! lists Nodes, and at worst hold or hasten `clusterRunning`.

use std::collections::BTreeSet;
use std::time::Duration;

use ingot_api::seeder::Cluster;
use k8s_openapi::List;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::ResourceExt;
use tracing::debug;

use super::ProvisioningContext;
use super::cluster::observe::MemberView;
use super::install::{self, NODE_READER_ID_KEY, NODE_READER_SECRET_KEY};

/// Seeder's label overriding the new cluster's port.
pub const CLUSTER_PORT_LABEL: &str = "clusterPort.harvesterhci.io";
const DEFAULT_PORT: u16 = 6443;
/// The most of a Node list read from the new cluster.
const MAX_BODY: usize = 16 << 20;

/// The new cluster's Ready Nodes whose InternalIP is one of the nodes' addresses; `None` when
/// it does not answer (yet).
pub async fn ready_nodes(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    token: &Secret,
    members: &[MemberView],
) -> Option<usize> {
    let vip = cluster.status.as_ref()?.cluster_address.clone()?;
    let port = cluster
        .labels()
        .get(CLUSTER_PORT_LABEL)
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or(DEFAULT_PORT);
    let bearer = format!(
        "{}.{}",
        install::value(token, NODE_READER_ID_KEY)?,
        install::value(token, NODE_READER_SECRET_KEY)?
    );
    let url = format!("https://{}/api/v1/nodes", host_port(&vip, port));
    let nodes = match read(ctx, &url, &bearer).await {
        Ok(nodes) => nodes,
        Err(why) => {
            debug!(cluster = %cluster.name_any(), %why, "the new cluster does not answer yet");
            return None;
        }
    };
    let addresses: BTreeSet<String> = members
        .iter()
        .filter_map(|m| {
            m.inventory
                .as_ref()?
                .status
                .as_ref()?
                .pxe_boot_config
                .address
                .clone()
        })
        .collect();
    Some(
        nodes
            .items
            .iter()
            .filter(|n| ready(n) && internal_ips(n).any(|ip| addresses.contains(ip)))
            .count(),
    )
}

fn host_port(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

async fn read(ctx: &ProvisioningContext, url: &str, bearer: &str) -> Result<List<Node>, String> {
    let mut response = ctx
        .remote_http
        .get(url)
        .bearer_auth(bearer)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| e.without_url().to_string())?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("a Node list over {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn internal_ips(node: &Node) -> impl Iterator<Item = &String> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| &a.address)
}
