//! The primitives of a Node drain: listing the pods on a Node, evicting one pod through the
//! eviction API (PodDisruptionBudgets honoured) with an explicit outcome, and cordoning a Node
//! together with the marker annotations that say who cordoned it and since when.
//!
//! Which pods must leave, how long to wait, what to do with a refused eviction and when to
//! force belong to the callers: `gardener::drain` (MCM's drain: eviction retries, deleting
//! after them, forcing after the drain timeout) and `pools::drain` (the Node of a removed
//! server: evictions until the drain deadline, never a deletion).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

/// The answer to one eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Accepted: the pod is being deleted gracefully.
    Evicted,
    /// The pod was already gone (404).
    Gone,
    /// Refused (429), by a PodDisruptionBudget that allows no disruption now.
    Refused,
}

/// Every pod scheduled to `node`, whatever its state (the policies filter).
pub async fn pods_on(client: &Client, node: &str) -> Result<Vec<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    let listed = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    Ok(listed.items)
}

/// Asks the eviction API to evict `pod`. `client` should not retry 429s itself: a refusal is
/// the caller's to retry, on its own schedule.
pub async fn evict(client: &Client, pod: &Pod) -> Result<Eviction, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    match api.evict(&pod.name_any(), &EvictParams::default()).await {
        Ok(_) => Ok(Eviction::Evicted),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Eviction::Gone),
        Err(kube::Error::Api(status)) if status.code == 429 => Ok(Eviction::Refused),
        Err(error) => Err(error),
    }
}

/// `namespace/name` of a pod, as drains report it.
pub fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Whether the Node is cordoned (`spec.unschedulable`).
pub fn is_cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// What a patch does to `spec.unschedulable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cordon {
    /// Cordon the Node.
    Set,
    /// Leave it as it is (only the marks change).
    Keep,
    /// Lift the cordon.
    Lift,
}

/// The merge patch that applies `cordon` and sets each mark annotation (a `None` value removes
/// it), in one write so that a cordon is never seen without its marker.
pub fn cordon_patch(cordon: Cordon, marks: &[(&str, Option<&str>)]) -> Value {
    let mut patch = json!({});
    if !marks.is_empty() {
        let annotations: Map<String, Value> = marks
            .iter()
            .map(|(key, value)| ((*key).to_owned(), json!(value)))
            .collect();
        patch["metadata"] = json!({ "annotations": annotations });
    }
    match cordon {
        Cordon::Set => patch["spec"] = json!({"unschedulable": true}),
        Cordon::Lift => patch["spec"] = json!({"unschedulable": null}),
        Cordon::Keep => {}
    }
    patch
}

/// Cordons (or un-cordons) the Node named `node` with its marks (see [`cordon_patch`]).
pub async fn cordon(
    client: &Client,
    node: &str,
    cordon: Cordon,
    marks: &[(&str, Option<&str>)],
) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&cordon_patch(cordon, marks)),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cordon_and_its_marks_are_one_patch() {
        assert_eq!(
            cordon_patch(Cordon::Set, &[("a/by", Some("ingot")), ("a/at", Some("t"))]),
            json!({"metadata": {"annotations": {"a/by": "ingot", "a/at": "t"}},
                "spec": {"unschedulable": true}})
        );
        assert_eq!(
            cordon_patch(Cordon::Lift, &[("a/by", None)]),
            json!({"metadata": {"annotations": {"a/by": null}}, "spec": {"unschedulable": null}})
        );
        assert_eq!(
            cordon_patch(Cordon::Keep, &[("a/at", Some("t"))]),
            json!({"metadata": {"annotations": {"a/at": "t"}}})
        );
        assert_eq!(
            cordon_patch(Cordon::Set, &[]),
            json!({"spec": {"unschedulable": true}})
        );
    }
}
