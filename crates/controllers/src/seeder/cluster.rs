//! The embedded-mode `local` Cluster (`harvester-system/local`): created if missing as Seeder's
//! `SetupLocalCluster` does, status `clusterRunning` with the cluster's own address, and the
//! local Inventories listed in `spec.nodes`.

use ingot_api::seeder::{
    Cluster, ClusterConfig, ClusterSpec, ClusterStatus, LOCAL_CLUSTER_NAME,
    LOCAL_CLUSTER_NAMESPACE, NodeConfig, ObjectRef, VipConfig,
};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tracing::info;

use super::Error;

/// `status.status` of the local Cluster.
pub const CLUSTER_RUNNING: &str = "clusterRunning";
/// `spec.version` of the local Cluster.
pub const LOCAL_VERSION: &str = "local";

/// Seeder's local Cluster: no nodes yet, version `local`, empty VIP and cluster config.
pub fn local_cluster() -> Cluster {
    let mut cluster = Cluster::new(
        LOCAL_CLUSTER_NAME,
        ClusterSpec {
            version: LOCAL_VERSION.to_owned(),
            nodes: Vec::new(),
            vip_config: VipConfig::default(),
            cluster_config: Some(ClusterConfig::default()),
            image_url: None,
        },
    );
    cluster.metadata.namespace = Some(LOCAL_CLUSTER_NAMESPACE.to_owned());
    cluster
}

/// The status the local Cluster must have.
pub fn wanted_status(address: &str) -> ClusterStatus {
    ClusterStatus {
        status: Some(CLUSTER_RUNNING.to_owned()),
        cluster_address: Some(address.to_owned()),
        ..ClusterStatus::default()
    }
}

/// Whether `status` already says what [`wanted_status`] says (other fields are left alone).
pub fn status_ok(status: Option<&ClusterStatus>, address: &str) -> bool {
    status.is_some_and(|s| {
        s.status.as_deref() == Some(CLUSTER_RUNNING)
            && s.cluster_address.as_deref() == Some(address)
    })
}

/// Whether the Inventory is listed in `spec.nodes`.
pub fn is_member(spec: &ClusterSpec, namespace: &str, name: &str) -> bool {
    spec.nodes.iter().any(|n| refers_to(n, namespace, name))
}

/// Appends the Inventory to `spec.nodes` as Seeder does (empty address pool reference).
/// Returns whether it was added.
pub fn add_member(spec: &mut ClusterSpec, namespace: &str, name: &str) -> bool {
    if is_member(spec, namespace, name) {
        return false;
    }
    spec.nodes.push(NodeConfig {
        inventory_reference: ObjectRef {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        },
        address_pool_reference: ObjectRef::default(),
        static_address: None,
    });
    true
}

/// Removes every entry of the Inventory. Returns whether one was removed.
pub fn remove_member(spec: &mut ClusterSpec, namespace: &str, name: &str) -> bool {
    let before = spec.nodes.len();
    spec.nodes.retain(|n| !refers_to(n, namespace, name));
    spec.nodes.len() != before
}

fn refers_to(node: &NodeConfig, namespace: &str, name: &str) -> bool {
    node.inventory_reference.name == name && node.inventory_reference.namespace == namespace
}

/// The cluster's own API address: the ClusterIP of `default/kubernetes` (Seeder writes the
/// RKE2 default 10.53.0.1 without looking).
pub async fn cluster_address(client: &Client) -> Result<String, Error> {
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await?;
    service
        .spec
        .and_then(|s| s.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .ok_or_else(|| Error::Other("the Service default/kubernetes has no ClusterIP".to_owned()))
}

/// Creates the local Cluster if it is missing and sets its status; returns it.
pub async fn ensure_local_cluster(client: &Client, address: &str) -> Result<Cluster, Error> {
    let api: Api<Cluster> = Api::namespaced(client.clone(), LOCAL_CLUSTER_NAMESPACE);
    let cluster = match api.get_opt(LOCAL_CLUSTER_NAME).await? {
        Some(cluster) => cluster,
        None => match api.create(&PostParams::default(), &local_cluster()).await {
            Ok(cluster) => {
                info!("created the local Cluster {LOCAL_CLUSTER_NAMESPACE}/{LOCAL_CLUSTER_NAME}");
                cluster
            }
            // Another writer made it in between: use theirs.
            Err(kube::Error::Api(e)) if e.code == 409 => api.get(LOCAL_CLUSTER_NAME).await?,
            Err(e) => return Err(e.into()),
        },
    };
    if status_ok(cluster.status.as_ref(), address) {
        return Ok(cluster);
    }
    let patched = api
        .patch_status(
            LOCAL_CLUSTER_NAME,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"status": CLUSTER_RUNNING, "clusterAddress": address}}),
            ),
        )
        .await?;
    Ok(patched)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_local_cluster_is_seeders() {
        let v = serde_json::to_value(local_cluster()).unwrap();
        assert_eq!(v["metadata"]["name"], "local");
        assert_eq!(v["metadata"]["namespace"], "harvester-system");
        assert_eq!(
            v["spec"],
            json!({
                "version": "local",
                "nodes": [],
                "vipConfig": {"addressPoolReference": {"name": "", "namespace": ""}},
                "clusterConfig": {}
            })
        );
    }

    #[test]
    fn members_are_added_once_and_removed() {
        let mut spec = local_cluster().spec;
        assert!(add_member(&mut spec, "harvester-system", "a"));
        assert!(!add_member(&mut spec, "harvester-system", "a"));
        assert!(add_member(&mut spec, "other", "a"));
        assert_eq!(spec.nodes.len(), 2);
        let v = serde_json::to_value(&spec.nodes[0]).unwrap();
        assert_eq!(
            v,
            json!({
                "inventoryReference": {"name": "a", "namespace": "harvester-system"},
                "addressPoolReference": {"name": "", "namespace": ""}
            })
        );
        assert!(remove_member(&mut spec, "harvester-system", "a"));
        assert!(!remove_member(&mut spec, "harvester-system", "a"));
        assert!(is_member(&spec, "other", "a"));
    }

    #[test]
    fn the_status_is_checked_field_by_field() {
        assert!(!status_ok(None, "10.0.0.1"));
        assert!(status_ok(Some(&wanted_status("10.0.0.1")), "10.0.0.1"));
        assert!(!status_ok(Some(&wanted_status("10.53.0.1")), "10.0.0.1"));
    }
}
