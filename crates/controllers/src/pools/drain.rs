//! Cordoning and draining a Node before its server goes: pods are evicted through the eviction
//! API (PodDisruptionBudgets honoured), DaemonSet and mirror pods stay, and an evicted pod
//! counts until it is gone, as `kubectl drain` waits for it, on an unreachable Node too. A
//! cordon made here is marked on the Node, so that it can be undone when the Node recovers; a
//! Node a person cordoned is drained without taking that cordon over, so it is never lifted.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::{Client, ResourceExt};

use crate::cluster::drain::{self, Cordon, Eviction};

/// Marks a cordon made by ingot (value `ingot`).
pub const CORDONED_BY_ANNOTATION: &str = "equinix.harvesterhci.io/cordoned-by";
/// When ingot started draining the Node (RFC 3339): the drain deadline counts from it.
pub const DRAIN_STARTED_ANNOTATION: &str = "equinix.harvesterhci.io/drain-started-at";
const CORDONED_BY: &str = "ingot";

/// Where a drain stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainState {
    /// No pod left that must go first.
    Done,
    /// Evictions accepted; `remaining` pods are still terminating.
    Terminating { remaining: usize },
    /// A PodDisruptionBudget refuses to let this pod go now.
    Refused { pod: String },
}

/// Whether ingot cordoned this Node.
pub fn cordoned_by_us(node: &Node) -> bool {
    node.annotations()
        .get(CORDONED_BY_ANNOTATION)
        .is_some_and(|v| v == CORDONED_BY)
}

/// When ingot started draining this Node.
pub fn drain_started(node: &Node) -> Option<Timestamp> {
    node.annotations()
        .get(DRAIN_STARTED_ANNOTATION)
        .and_then(|t| t.parse().ok())
}

/// Cordons the Node and marks the cordon and the drain's start as ingot's (kept if already
/// there, so that the deadline does not move). A Node a person already cordoned keeps that
/// cordon as theirs: only the drain's start is marked, so the cordon is never lifted here.
pub async fn cordon(client: &Client, node: &Node, now: Timestamp) -> Result<(), kube::Error> {
    let unschedulable = drain::is_cordoned(node);
    if unschedulable && (cordoned_by_us(node) || drain_started(node).is_some()) {
        return Ok(());
    }
    let started = drain_started(node).unwrap_or(now).to_string();
    let started = (DRAIN_STARTED_ANNOTATION, Some(started.as_str()));
    if unschedulable {
        drain::cordon(client, &node.name_any(), Cordon::Keep, &[started]).await
    } else {
        let ours = (CORDONED_BY_ANNOTATION, Some(CORDONED_BY));
        drain::cordon(client, &node.name_any(), Cordon::Set, &[ours, started]).await
    }
}

/// Undoes ingot's cordon (never a person's: on a Node a person cordoned, only the drain's
/// start is forgotten).
pub async fn uncordon(client: &Client, node: &Node) -> Result<(), kube::Error> {
    let name = node.name_any();
    if cordoned_by_us(node) {
        let marks = [
            (CORDONED_BY_ANNOTATION, None),
            (DRAIN_STARTED_ANNOTATION, None),
        ];
        drain::cordon(client, &name, Cordon::Lift, &marks).await
    } else if drain_started(node).is_some() {
        drain::cordon(
            client,
            &name,
            Cordon::Keep,
            &[(DRAIN_STARTED_ANNOTATION, None)],
        )
        .await
    } else {
        Ok(())
    }
}

/// The pools' drain policy: whether a pod must leave before the Node (and its server) goes.
///
/// Skipped: DaemonSet pods (their controller puts them on every Node, and they go with it),
/// mirror pods (the kubelet's static pods: the API cannot evict them), and finished pods
/// (`Succeeded`/`Failed`: nothing runs, and on an unreachable Node no kubelet would confirm
/// their deletion, so they would hold the drain until its deadline for nothing). Every other
/// pod is evicted, never deleted: a refusal waits, and the drain deadline of `removal` decides.
/// The Gardener drain differs on purpose (see `gardener::drain::must_leave`).
pub fn must_leave(pod: &Pod) -> bool {
    let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !(daemon || mirror || finished)
}

/// One round of draining: evicts the pods that must leave and are not yet terminating. A pod
/// evicted or terminating still counts until it is gone: on an unreachable Node nothing may
/// confirm it, and the drain deadline decides then (see `removal`), never this pass.
pub async fn drain(client: &Client, node: &str) -> Result<DrainState, kube::Error> {
    let mut terminating = 0;
    for pod in drain::pods_on(client, node)
        .await?
        .iter()
        .filter(|p| must_leave(p))
    {
        if pod.metadata.deletion_timestamp.is_some() {
            terminating += 1;
            continue;
        }
        match drain::evict(client, pod).await? {
            Eviction::Evicted => terminating += 1,
            Eviction::Gone => {}
            Eviction::Refused => {
                return Ok(DrainState::Refused {
                    pod: drain::pod_key(pod),
                });
            }
        }
    }
    Ok(if terminating == 0 {
        DrainState::Done
    } else {
        DrainState::Terminating {
            remaining: terminating,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(owner: Option<&str>, mirror: bool, phase: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        if let Some(kind) = owner {
            pod.metadata.owner_references = Some(vec![OwnerReference {
                kind: kind.to_owned(),
                ..OwnerReference::default()
            }]);
        }
        if mirror {
            pod.metadata.annotations = Some(
                [("kubernetes.io/config.mirror".to_owned(), "x".to_owned())]
                    .into_iter()
                    .collect(),
            );
        }
        pod.status = phase.map(|p| k8s_openapi::api::core::v1::PodStatus {
            phase: Some(p.to_owned()),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn daemonset_mirror_and_finished_pods_stay() {
        assert!(must_leave(&pod(None, false, None)));
        assert!(must_leave(&pod(Some("ReplicaSet"), false, Some("Running"))));
        assert!(!must_leave(&pod(Some("DaemonSet"), false, None)));
        assert!(!must_leave(&pod(None, true, None)));
        assert!(!must_leave(&pod(None, false, Some("Succeeded"))));
    }

    #[test]
    fn a_person_s_cordon_is_not_ours() {
        let mut node = Node::default();
        assert!(!cordoned_by_us(&node));
        node.metadata.annotations = Some(
            [(CORDONED_BY_ANNOTATION.to_owned(), "ingot".to_owned())]
                .into_iter()
                .collect(),
        );
        assert!(cordoned_by_us(&node));
    }
}
