//! Claims of Inventories: which server a pool's Instance or a Gardener Machine runs on.
//!
//! A claim is an owner mark on the Inventory, written before anything boots it: the owner's
//! tag ([`OWNER_ANNOTATION`], as a pool tags its servers on a cloud) and the hostname it
//! serves ([`HOSTNAME_ANNOTATION`]), with the label [`CLAIMED_LABEL`] for selection. It is
//! written under the `resourceVersion` the Inventory was read at, so two claimers racing for
//! one Inventory never both get it: the second gets a 409 and goes to the next candidate. A
//! claimer that died after writing finds its claim again by owner and hostname ([`find`])
//! instead of claiming a second server. Only the claim's owner releases it, again under the
//! `resourceVersion` read.
//!
//! A free Inventory ([`why_taken`] says `None`) is ready (Seeder's `inventoryNodeReady`), not
//! being deleted, not allocated to a provisioned Cluster (`status.ownerCluster`), not listed by
//! one's `spec.nodes`, and not claimed: a server is in one Cluster or one pool, never both.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use ingot_api::seeder::{Cluster, INVENTORY_NODE_READY, Inventory};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::provisioning::cluster::reference_namespace;

/// The owner's tag (a pool's owner tag, a MachineClass's).
pub const OWNER_ANNOTATION: &str = "onprem.ingot.dev/owner";
/// The hostname the claimed server serves.
pub const HOSTNAME_ANNOTATION: &str = "onprem.ingot.dev/hostname";
/// On every claimed Inventory (`true`): `!onprem.ingot.dev/claimed` selects the unclaimed.
pub const CLAIMED_LABEL: &str = "onprem.ingot.dev/claimed";
/// The most candidates one claim tries before it says none could be taken (each 409 is
/// another claimer that got there first).
pub const MAX_ATTEMPTS: usize = 8;

/// Who holds an Inventory, and for which hostname.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub owner: String,
    pub hostname: String,
}

/// Why an Inventory cannot be claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    Deleting,
    /// Not `inventoryNodeReady` (its BMC not reached yet, or not reachable).
    NotReady,
    /// Allocated to this provisioned Cluster (`namespace/name`).
    InCluster(String),
    /// Listed by this provisioned Cluster's `spec.nodes` (`namespace/name`).
    ListedByCluster(String),
    Claimed(Claim),
}

/// The Inventory's claim, if it has one.
pub fn claim_of(inventory: &Inventory) -> Option<Claim> {
    let annotations = inventory.annotations();
    Some(Claim {
        owner: annotations.get(OWNER_ANNOTATION)?.clone(),
        hostname: annotations.get(HOSTNAME_ANNOTATION)?.clone(),
    })
}

/// Why the Inventory cannot be claimed; `None` when it is free.
pub fn why_taken(inventory: &Inventory, clusters: &[Arc<Cluster>]) -> Option<Taken> {
    if inventory.metadata.deletion_timestamp.is_some() {
        return Some(Taken::Deleting);
    }
    if let Some(claim) = claim_of(inventory) {
        return Some(Taken::Claimed(claim));
    }
    let status = inventory.status.as_ref();
    if let Some(owner) = status
        .map(|s| &s.owner_cluster)
        .filter(|o| !o.name.is_empty())
    {
        return Some(Taken::InCluster(format!(
            "{}/{}",
            owner.namespace, owner.name
        )));
    }
    let namespace = inventory.namespace().unwrap_or_default();
    let name = inventory.name_any();
    if let Some(cluster) = clusters.iter().find(|c| {
        c.spec.nodes.iter().any(|n| {
            n.inventory_reference.name == name
                && reference_namespace(&n.inventory_reference.namespace, c) == namespace
        })
    }) {
        return Some(Taken::ListedByCluster(format!(
            "{}/{}",
            cluster.namespace().unwrap_or_default(),
            cluster.name_any()
        )));
    }
    if status.and_then(|s| s.status.as_deref()) != Some(INVENTORY_NODE_READY) {
        return Some(Taken::NotReady);
    }
    None
}

/// The Inventory claimed by `owner` for `hostname`, if any.
pub fn find<'a>(
    inventories: &'a [Arc<Inventory>],
    owner: &str,
    hostname: &str,
) -> Option<&'a Arc<Inventory>> {
    inventories
        .iter()
        .find(|i| claim_of(i).is_some_and(|c| c.owner == owner && c.hostname == hostname))
}

/// Every Inventory `owner` holds.
pub fn held_by<'a>(inventories: &'a [Arc<Inventory>], owner: &str) -> Vec<&'a Arc<Inventory>> {
    inventories
        .iter()
        .filter(|i| claim_of(i).is_some_and(|c| c.owner == owner))
        .collect()
}

/// The free Inventories the selector matches, in the order a claim for `hostname` tries
/// them: by name, starting at a place hashed from the hostname, so that claimers for
/// different hostnames seldom race for the same Inventory. An invalid selector matches
/// nothing.
pub fn candidates(
    inventories: &[Arc<Inventory>],
    clusters: &[Arc<Cluster>],
    selector: &LabelSelector,
    hostname: &str,
) -> Vec<Arc<Inventory>> {
    let Ok(selector) = Selector::try_from(selector.clone()) else {
        return Vec::new();
    };
    let mut free: Vec<Arc<Inventory>> = inventories
        .iter()
        .filter(|i| selector.matches(i.labels()))
        .filter(|i| why_taken(i, clusters).is_none())
        .cloned()
        .collect();
    free.sort_by_key(|i| (i.namespace(), i.name_any()));
    if !free.is_empty() {
        let mut hasher = DefaultHasher::new();
        hostname.hash(&mut hasher);
        let start = (hasher.finish() % free.len() as u64) as usize;
        free.rotate_left(start);
    }
    free
}

/// What a claim attempt came to.
#[derive(Debug)]
pub enum Claimed {
    /// This Inventory, as written.
    Took(Box<Inventory>),
    /// Every candidate tried was taken first by another claimer (or gone).
    NoneLeft { tried: usize },
}

/// Claims the first of `candidates` that is still as read: the owner mark written under its
/// `resourceVersion`. A candidate changed since (another claimer, a status write) or gone is
/// passed over; at most [`MAX_ATTEMPTS`] are tried.
pub async fn claim(
    api: &Api<Inventory>,
    candidates: &[Arc<Inventory>],
    claim: &Claim,
) -> Result<Claimed, kube::Error> {
    let mut tried = 0;
    for candidate in candidates.iter().take(MAX_ATTEMPTS) {
        tried += 1;
        let patch = json!({"metadata": {
            "resourceVersion": candidate.resource_version(),
            "labels": {CLAIMED_LABEL: "true"},
            "annotations": {OWNER_ANNOTATION: claim.owner, HOSTNAME_ANNOTATION: claim.hostname},
        }});
        match api
            .patch(
                &candidate.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(written) => return Ok(Claimed::Took(Box::new(written))),
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(Claimed::NoneLeft { tried })
}

/// Releases `claim` from the Inventory, if it is still that claim: the mark removed under the
/// `resourceVersion` read. `false` when the Inventory holds another claim or none (nothing
/// written).
pub async fn release(
    api: &Api<Inventory>,
    inventory: &Inventory,
    claim: &Claim,
) -> Result<bool, kube::Error> {
    release_with(api, inventory, claim, &[]).await
}

/// [`release`], removing these annotations of the claim's holder in the same write (what it
/// recorded about the server while it held it), so that none outlives the claim.
pub async fn release_with(
    api: &Api<Inventory>,
    inventory: &Inventory,
    claim: &Claim,
    annotations: &[&str],
) -> Result<bool, kube::Error> {
    if claim_of(inventory).as_ref() != Some(claim) {
        return Ok(false);
    }
    let unset: BTreeMap<&str, Option<&str>> = [OWNER_ANNOTATION, HOSTNAME_ANNOTATION]
        .iter()
        .chain(annotations)
        .map(|a| (*a, None))
        .collect();
    let patch = json!({"metadata": {
        "resourceVersion": inventory.resource_version(),
        "labels": {CLAIMED_LABEL: null},
        "annotations": unset,
    }});
    api.patch(
        &inventory.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn inventory(name: &str, extra: serde_json::Value) -> Arc<Inventory> {
        let mut value = json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": name, "namespace": "site", "labels": {"rack": "a"}},
            "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": "aa:bb:cc:dd:ee:01",
                     "baseboardSpec": {"connection": {"host": "10.0.0.1", "port": 623, "insecureTLS": true,
                        "authSecretRef": {"name": "bmc", "namespace": "site"}}}},
            "status": {"status": INVENTORY_NODE_READY,
                       "ownerCluster": {"name": "", "namespace": ""},
                       "pxeBootConfig": {}},
        });
        merge(&mut value, extra);
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, value) => *slot = value,
        }
    }

    fn selector(labels: serde_json::Value) -> LabelSelector {
        serde_json::from_value(json!({"matchLabels": labels})).unwrap()
    }

    fn cluster_listing(inventory: &str) -> Arc<Cluster> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "c", "namespace": "site"},
                "spec": {"version": "v1.4.0", "imageURL": "http://x/", "clusterConfig": {},
                         "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": "site"}},
                         "nodes": [{"inventoryReference": {"name": inventory, "namespace": ""},
                                    "addressPoolReference": {"name": "p", "namespace": "site"}}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn only_a_ready_unclaimed_server_outside_every_cluster_is_free() {
        assert_eq!(why_taken(&inventory("a", json!({})), &[]), None);
        let deleting = inventory(
            "a",
            json!({"metadata": {"deletionTimestamp": "2026-11-28T00:00:00Z", "finalizers": ["x"]}}),
        );
        assert_eq!(why_taken(&deleting, &[]), Some(Taken::Deleting));
        let not_ready = inventory("a", json!({"status": {"status": ""}}));
        assert_eq!(why_taken(&not_ready, &[]), Some(Taken::NotReady));
        let allocated = inventory(
            "a",
            json!({"status": {"ownerCluster": {"name": "c", "namespace": "site"}}}),
        );
        assert_eq!(
            why_taken(&allocated, &[]),
            Some(Taken::InCluster("site/c".into()))
        );
        assert_eq!(
            why_taken(&inventory("a", json!({})), &[cluster_listing("a")]),
            Some(Taken::ListedByCluster("site/c".into()))
        );
        let claimed = inventory(
            "a",
            json!({"metadata": {"annotations": {OWNER_ANNOTATION: "pool-1", HOSTNAME_ANNOTATION: "h1"}}}),
        );
        assert_eq!(
            why_taken(&claimed, &[]),
            Some(Taken::Claimed(Claim {
                owner: "pool-1".into(),
                hostname: "h1".into()
            }))
        );
    }

    #[test]
    fn candidates_match_the_selector_and_start_where_the_hostname_says() {
        let all: Vec<Arc<Inventory>> = ["a", "b", "c", "d"]
            .into_iter()
            .map(|n| inventory(n, json!({})))
            .chain([inventory(
                "other-rack",
                json!({"metadata": {"labels": {"rack": "b"}}}),
            )])
            .collect();
        let names = |hostname: &str| -> Vec<String> {
            candidates(&all, &[], &selector(json!({"rack": "a"})), hostname)
                .iter()
                .map(|i| i.name_any())
                .collect()
        };
        let first = names("h1");
        assert_eq!(first.len(), 4, "{first:?}");
        assert!(!first.contains(&"other-rack".to_owned()));
        // The same hostname always starts at the same place, in name order from there.
        assert_eq!(names("h1"), first);
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, ["a", "b", "c", "d"]);
        // Hostnames spread over the candidates.
        let starts: std::collections::BTreeSet<String> = (0..32)
            .map(|i| names(&format!("h{i}"))[0].clone())
            .collect();
        assert!(starts.len() > 1, "{starts:?}");
        // An invalid selector matches nothing.
        let bad: LabelSelector = serde_json::from_value(json!({"matchExpressions": [
            {"key": "rack", "operator": "Sideways", "values": ["a"]}]}))
        .unwrap();
        assert!(candidates(&all, &[], &bad, "h1").is_empty());
    }

    #[test]
    fn a_claim_is_found_by_owner_and_hostname() {
        let all = vec![
            inventory(
                "a",
                json!({"metadata": {"annotations": {OWNER_ANNOTATION: "pool-1", HOSTNAME_ANNOTATION: "h1"}}}),
            ),
            inventory(
                "b",
                json!({"metadata": {"annotations": {OWNER_ANNOTATION: "pool-2", HOSTNAME_ANNOTATION: "h1"}}}),
            ),
            inventory("c", json!({})),
        ];
        assert_eq!(find(&all, "pool-1", "h1").unwrap().name_any(), "a");
        assert_eq!(find(&all, "pool-2", "h1").unwrap().name_any(), "b");
        assert!(find(&all, "pool-1", "h2").is_none());
        assert_eq!(held_by(&all, "pool-1").len(), 1);
    }
}
