//! Seeder's first admission rule, enforced by the Cluster controller: an Inventory is in one
//! Cluster only. Seeder refused the second Cluster in a validating webhook; a CRD's CEL rules
//! cannot see other objects, so ingot lets it be created and holds it (`Ready=False`, reason
//! `InventoryInAnotherCluster`, naming `spec.nodes[i].inventoryReference` and the other
//! Cluster). An Inventory already allocated goes with its `status.ownerCluster`; one listed by
//! several Clusters before any allocated it goes to the Cluster created first (by
//! `creationTimestamp`, then `namespace/name`), decided here.

use ingot_api::seeder::{Cluster, LOCAL_CLUSTER_NAME, LOCAL_CLUSTER_NAMESPACE};
use kube::ResourceExt;

use super::reference_namespace;

/// Where a Cluster stands in the order that decides who gets a free Inventory.
fn rank(cluster: &Cluster) -> (Option<k8s_openapi::jiff::Timestamp>, String, String) {
    (
        cluster.metadata.creation_timestamp.as_ref().map(|t| t.0),
        cluster.namespace().unwrap_or_default(),
        cluster.name_any(),
    )
}

fn lists(cluster: &Cluster, namespace: &str, name: &str) -> bool {
    cluster.spec.nodes.iter().any(|n| {
        n.inventory_reference.name == name
            && reference_namespace(&n.inventory_reference.namespace, cluster) == namespace
    })
}

/// The Cluster a free Inventory `namespace/name` goes to: the first, by creation time then
/// `namespace/name`, of the Clusters listing it in `spec.nodes`. Embedded mode's local Cluster
/// and Clusters being deleted take nothing.
pub fn first_claimant<'a, I>(namespace: &str, name: &str, clusters: I) -> Option<&'a Cluster>
where
    I: IntoIterator<Item = &'a Cluster>,
{
    clusters
        .into_iter()
        .filter(|c| {
            !(c.name_any() == LOCAL_CLUSTER_NAME
                && c.namespace().as_deref() == Some(LOCAL_CLUSTER_NAMESPACE))
        })
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| lists(c, namespace, name))
        .min_by_key(|c| rank(c))
}

/// The other Cluster that a free Inventory `namespace/name` listed by `cluster` goes to, as
/// `namespace/name`; `None` when it goes to `cluster`.
pub fn claimed_by_other<'a, I>(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    clusters: I,
) -> Option<String>
where
    I: IntoIterator<Item = &'a Cluster>,
{
    let first = first_claimant(namespace, name, clusters)?;
    (rank(first) != rank(cluster)).then(|| {
        format!(
            "{}/{}, which was created first and lists it too",
            first.namespace().unwrap_or_default(),
            first.name_any()
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(
        namespace: &str,
        name: &str,
        created: &str,
        inventories: &[(&str, &str)],
    ) -> Cluster {
        let nodes: Vec<_> = inventories
            .iter()
            .map(|(ns, n)| {
                json!({"inventoryReference": {"name": n, "namespace": ns},
                "addressPoolReference": {"name": "pool", "namespace": ""}})
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"version": "v1.7.1", "nodes": nodes,
                "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": ""}}}
        }))
        .unwrap()
    }

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:00:05Z";

    #[test]
    fn the_older_cluster_gets_a_free_inventory_both_list() {
        let older = cluster("a", "zz", T1, &[("a", "node0")]);
        let newer = cluster("a", "aa", T2, &[("a", "node0")]);
        let all = [newer.clone(), older.clone()];
        assert_eq!(first_claimant("a", "node0", &all).unwrap().name_any(), "zz");
        assert_eq!(claimed_by_other(&older, "a", "node0", &all), None);
        let other = claimed_by_other(&newer, "a", "node0", &all).unwrap();
        assert!(other.starts_with("a/zz,"), "{other}");
    }

    #[test]
    fn at_the_same_time_namespace_then_name_decides() {
        let b = cluster("ns1", "b", T1, &[("inv", "node0")]);
        let a = cluster("ns2", "a", T1, &[("inv", "node0")]);
        let all = [a.clone(), b.clone()];
        assert_eq!(
            first_claimant("inv", "node0", &all).unwrap().name_any(),
            "b"
        );
        assert!(claimed_by_other(&a, "inv", "node0", &all).is_some());
    }

    #[test]
    fn an_empty_reference_namespace_is_the_clusters_own() {
        let older = cluster("a", "old", T1, &[("", "node0")]);
        let newer = cluster("a", "new", T2, &[("a", "node0")]);
        let elsewhere = cluster("b", "other", T1, &[("", "node0")]);
        let all = [older.clone(), newer.clone(), elsewhere];
        assert!(
            claimed_by_other(&newer, "a", "node0", &all)
                .unwrap()
                .starts_with("a/old")
        );
    }

    #[test]
    fn deleted_local_and_unrelated_clusters_take_nothing() {
        let mut going = cluster("a", "going", T1, &[("a", "node0")]);
        going.metadata.deletion_timestamp = going.metadata.creation_timestamp.clone();
        let local = cluster(
            LOCAL_CLUSTER_NAMESPACE,
            LOCAL_CLUSTER_NAME,
            T1,
            &[("a", "node0")],
        );
        let unrelated = cluster("a", "unrelated", T1, &[("a", "node1")]);
        let me = cluster("a", "me", T2, &[("a", "node0")]);
        let all = [going, local, unrelated, me.clone()];
        assert_eq!(claimed_by_other(&me, "a", "node0", &all), None);
    }
}
