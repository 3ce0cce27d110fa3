//! Deletion of an Instance: its Node is drained first, as scale-down drains (cordon, evictions
//! within the pool's `drainTimeout`, one Node of the pool at a time, a control-plane Node not
//! while another control-plane Node is unhealthy); then every server that is the Instance's
//! (404 counts as gone), then the Node, then the finalizers (the Go addon's too). Without
//! credentials, while the drain waits, or when Metal refuses, the finalizer stays and the
//! `Ready` condition says why: a server is never leaked, and a Node never disappears under its
//! pods.

use std::time::Duration;

use ingot_api::equinix::{INSTANCE_FINALIZER, Instance, POOL_LABEL, WRANGLER_INSTANCE_FINALIZER};
use k8s_openapi::api::core::v1::Node;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use tracing::info;

use super::super::drain;
use super::super::health::NodeFacts;
use super::super::removal::{self, DRAIN_POLL, DrainStep};
use super::phase::{self, Blocked};
use super::{Error, OWNER_TAG_PREFIX, Reconciler};
use crate::runtime::finalizer;

/// What deleting an Instance whose Node exists waits for, if anything.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Drain this Node now.
    Go,
    /// Another Node of the pool is drained first.
    After(String),
    /// A control-plane Node waits while another control-plane Node is not Ready.
    HeldForControlPlane(String),
}

/// Whose drain goes first among the pool's Instances being deleted that still have a Node:
/// one whose drain started, else the first by name; a control-plane Node never while another
/// control-plane Node is not Ready (etcd would lose its quorum).
pub(crate) fn turn(
    me: &str,
    control_plane: bool,
    others_deleting: &[(String, bool)],
    unhealthy_control_plane: Option<&str>,
) -> Turn {
    if control_plane && let Some(other) = unhealthy_control_plane {
        return Turn::HeldForControlPlane(other.to_owned());
    }
    if let Some((first, _)) = others_deleting.iter().find(|(_, draining)| *draining) {
        return Turn::After(first.clone());
    }
    match others_deleting.iter().map(|(n, _)| n).min() {
        Some(first) if first.as_str() < me => Turn::After(first.clone()),
        _ => Turn::Go,
    }
}

impl Reconciler<'_> {
    pub(super) async fn finalize(&self) -> Result<Action, Error> {
        if !self.has_finalizer(INSTANCE_FINALIZER)
            && !self.has_finalizer(WRANGLER_INSTANCE_FINALIZER)
        {
            return Ok(Action::await_change());
        }
        let cloud = match self.cloud()? {
            Ok(cloud) => cloud,
            Err(mut blocked) => {
                blocked.message = format!("cannot delete the server: {}", blocked.message);
                return self.blocked(blocked).await;
            }
        };
        // The Node as it is now (a deletion is no steady state): one the cache has not shown
        // yet is drained too.
        let nodes: Api<Node> = Api::all(self.ctx.client.clone());
        if let Some(node) = nodes.get_opt(&self.name()).await?
            && let Some(wait) = self.drain_first(&node).await?
        {
            return self.blocked(wait).await;
        }
        match self.delete_servers(cloud.as_ref()).await {
            Ok(Some(refused)) => return self.blocked(refused).await,
            Ok(None) => {}
            Err(error) => return self.metal_error(error).await,
        }
        match nodes.delete(&self.name(), &DeleteParams::default()).await {
            Ok(_) => info!(instance = %self.name(), "node deleted"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
        // Ours and the Go addon's, in one write guarded by the resourceVersion read.
        let mut remaining = self.instance.finalizers().to_vec();
        for ours in [INSTANCE_FINALIZER, WRANGLER_INSTANCE_FINALIZER] {
            if let Some(rest) = finalizer::without(&remaining, ours) {
                remaining = rest;
            }
        }
        let instances: Api<Instance> = Api::all(self.ctx.client.clone());
        finalizer::set(&instances, self.instance, &remaining).await?;
        Ok(Action::await_change())
    }

    /// Drains the Instance's Node before its server goes; what it waits for, if anything.
    async fn drain_first(&self, node: &Node) -> Result<Option<Blocked>, Error> {
        if node.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let name = self.name();
        let caches = &self.ctx.shared.caches;
        let pool_name = self.instance.labels().get(POOL_LABEL).cloned();
        let pool = pool_name.as_deref().and_then(|p| caches.pool(p));
        let others: Vec<(String, bool)> = pool_name
            .as_deref()
            .map(|p| caches.pool_instances(p))
            .unwrap_or_default()
            .iter()
            .filter(|i| i.metadata.deletion_timestamp.is_some() && i.name_any() != name)
            .filter_map(|i| {
                let node = caches.node(&i.name_any())?;
                Some((i.name_any(), drain::drain_started(&node).is_some()))
            })
            .collect();
        let facts = NodeFacts::of(node);
        let unhealthy_control_plane = caches
            .nodes
            .state()
            .iter()
            .filter(|n| n.name_any() != name)
            .find(|n| {
                let other = NodeFacts::of(n);
                other.control_plane && !other.ready
            })
            .map(|n| n.name_any());
        match turn(
            &name,
            facts.control_plane,
            &others,
            unhealthy_control_plane.as_deref(),
        ) {
            Turn::Go => {}
            Turn::After(first) => {
                return Ok(Some(Blocked {
                    reason: "WaitingForDrain",
                    message: format!(
                        "deleting: Node {first} of the pool is drained first, one Node at a time; Node {name} is drained after it"
                    ),
                    retry: DRAIN_POLL,
                }));
            }
            Turn::HeldForControlPlane(other) => {
                return Ok(Some(Blocked {
                    reason: "ControlPlaneHeld",
                    message: format!(
                        "deleting: Node {name} is a control-plane Node and control-plane Node {other} is not Ready; it is not drained or deleted until {other} is Ready again or gone"
                    ),
                    retry: Duration::from_secs(15),
                }));
            }
        }
        let timeout = pool
            .as_deref()
            .map_or(removal::DEFAULT_DRAIN_TIMEOUT, removal::drain_timeout);
        let step = removal::drain_step(self.ctx, node, timeout, "as its Instance is deleted")
            .await
            .map_err(Error::Kube)?;
        match step {
            DrainStep::Proceed { timed_out } => {
                if let Some(message) = timed_out {
                    self.event(EventType::Warning, "DrainTimeout", message)
                        .await;
                }
                Ok(None)
            }
            DrainStep::Wait { message, blocked } => Ok(Some(Blocked {
                reason: if blocked { "DrainBlocked" } else { "Draining" },
                message,
                retry: DRAIN_POLL,
            })),
        }
    }

    /// Every server this Instance owns: the one in its status, if it is the Instance's (see
    /// [`phase::owns`]), and every one with its tag (a crash can leave one whose id never
    /// reached the status). A server in the status that is not the Instance's is refused:
    /// nothing is deleted and the refusal is returned.
    async fn delete_servers(
        &self,
        cloud: &dyn ingot_metal::BareMetalCloud,
    ) -> Result<Option<Blocked>, ingot_metal::Error> {
        let mut ids = Vec::new();
        let id = self.status().instance_id;
        if !id.is_empty() {
            match cloud.get_server(&id).await {
                Ok(server) if server.state.is_gone() => {}
                Ok(server) if !phase::owns(self.instance, &server) => {
                    return Ok(Some(phase::not_owned(self.instance, &server)));
                }
                Ok(_) => ids.push(id),
                Err(ingot_metal::Error::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let tag = format!(
            "{OWNER_TAG_PREFIX}{}",
            self.instance.metadata.uid.as_deref().unwrap_or_default()
        );
        for server in cloud.list_servers(&tag).await? {
            if !ids.contains(&server.id) {
                ids.push(server.id);
            }
        }
        for id in &ids {
            cloud.delete_server(id).await?;
            info!(instance = %self.name(), server = %id, "server deleted");
            self.ctx.shared.crash_point("during-finalize");
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn others(list: &[(&str, bool)]) -> Vec<(String, bool)> {
        list.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect()
    }

    #[test]
    fn one_node_of_the_pool_drains_at_a_time() {
        assert_eq!(turn("p-b", false, &[], None), Turn::Go);
        assert_eq!(
            turn("p-b", false, &others(&[("p-a", false)]), None),
            Turn::After("p-a".into())
        );
        assert_eq!(
            turn("p-a", false, &others(&[("p-b", false)]), None),
            Turn::Go
        );
        // One whose drain started goes on first, whatever its name.
        assert_eq!(
            turn(
                "p-a",
                false,
                &others(&[("p-c", true), ("p-b", false)]),
                None
            ),
            Turn::After("p-c".into())
        );
    }

    #[test]
    fn a_control_plane_node_waits_while_another_is_not_ready() {
        assert_eq!(
            turn("p-a", true, &[], Some("cp-2")),
            Turn::HeldForControlPlane("cp-2".into())
        );
        assert_eq!(turn("p-a", false, &[], Some("cp-2")), Turn::Go);
        assert_eq!(turn("p-a", true, &[], None), Turn::Go);
    }
}
