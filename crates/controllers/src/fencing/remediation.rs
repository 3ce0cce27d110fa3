//! Fencing decided by medik8s NodeHealthCheck: a BMCRemediation for a Node (named after it, or
//! annotated `remediation.medik8s.io/node-name`) makes the fencing controller take the Node as
//! a candidate now, whatever its own delay says; its deletion (NHC deletes it once the Node is
//! healthy) releases the Node: the taint ingot added goes, and the server is powered on per
//! `powerOnAfterRecovery` if that was not done yet.
//!
//! Everything else is fencing's: the same checks (maintenance, cordon, the budget, quorum, one
//! Inventory, a BMC that reads), the same Jobs named after the episode (here the
//! BMCRemediation's uid), recorded on the Node, the taint only once the BMC confirms off.
//!
//! Tenancy: a BMCRemediation acts only on a Node whose Inventory is in its own namespace (the
//! namespace of the NodeHealthCheck's template); from any other namespace it is refused with a
//! condition and an Event and changes nothing.

use std::sync::Arc;

use ingot_api::Condition;
use ingot_api::condition::{ConditionStatus, set_condition};
use ingot_api::remediation::{
    BMCRemediation, BMCRemediationStatus, NHC_TIMED_OUT_ANNOTATION, NODE_NAME_ANNOTATION,
    PERMANENT_NODE_DELETION_EXPECTED, PROCESSING, SUCCEEDED,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::phase::{Hold, Outcome, Phase};
use super::{Error, FencingContext};
use crate::runtime::finalizer;

/// Held by a BMCRemediation ingot acts on, until the Node is released.
pub const FINALIZER: &str = "fencing.ingot.dev/bmc-remediation";

/// The reason of a BMCRemediation from a namespace that may not act on the Node.
pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
/// The reason once NHC stopped waiting for it before any power action.
pub const STOPPED_BY_NHC: &str = "RemediationStoppedByNHC";

/// The Node a BMCRemediation is for.
pub fn node_of(remediation: &BMCRemediation) -> String {
    remediation
        .annotations()
        .get(NODE_NAME_ANNOTATION)
        .filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| remediation.name_any())
}

/// What the BMCRemediations of a Node say, once its Inventory is known.
#[derive(Clone, Debug, Default)]
pub struct Remediations {
    /// The one ingot acts for (allowed, not deleted, not given up by NHC before a power
    /// action): the Node is a candidate now.
    pub driver: Option<Arc<BMCRemediation>>,
    /// One allowed and deleted, with no driver: the Node is released.
    pub released: Option<Arc<BMCRemediation>>,
    /// Allowed, given up by NHC before ingot powered anything off (or a younger one beside the
    /// driver).
    pub stopped: Vec<Arc<BMCRemediation>>,
    /// From a namespace that may not act on the Node.
    pub refused: Vec<Arc<BMCRemediation>>,
    /// Deleted, holding ingot's finalizer, and not the one releasing the Node.
    pub done: Vec<Arc<BMCRemediation>>,
}

impl Remediations {
    /// `all`: the Node's BMCRemediations; `namespace`: its one Inventory's (`None`: none, and
    /// fencing holds it for that); `powered_off`: a power-off of the episode is recorded.
    pub fn sort(
        mut all: Vec<Arc<BMCRemediation>>,
        namespace: Option<&str>,
        powered_off: bool,
    ) -> Self {
        all.sort_by_key(|r| (r.creation_timestamp().map(|t| t.0), r.name_any()));
        let mut out = Remediations::default();
        for r in all {
            let allowed = namespace.is_none_or(|ns| r.namespace().as_deref() == Some(ns));
            let deleted = r.metadata.deletion_timestamp.is_some();
            if !allowed {
                if deleted {
                    out.done.push(r);
                } else {
                    out.refused.push(r);
                }
            } else if deleted {
                if out.released.is_none() {
                    out.released = Some(r);
                } else {
                    out.done.push(r);
                }
            } else if r.annotations().contains_key(NHC_TIMED_OUT_ANNOTATION) && !powered_off {
                out.stopped.push(r);
            } else if out.driver.is_none() {
                out.driver = Some(r);
            } else {
                // A second one for the same Node: the first drives; this one only reports.
                out.stopped.push(r);
            }
        }
        if out.driver.is_some()
            && let Some(r) = out.released.take()
        {
            out.done.push(r);
        }
        out
    }

    /// The one the fencing Events and Jobs are about.
    pub fn current(&self) -> Option<&Arc<BMCRemediation>> {
        self.driver.as_ref().or(self.released.as_ref())
    }
}

/// The conditions a driving BMCRemediation shows, from the phase and what this pass did.
/// `None`: nothing to say (leave them).
pub fn conditions_for(
    phase: Phase,
    outcome: &Outcome,
) -> Option<[(&'static str, ConditionStatus, String, String); 2]> {
    use ConditionStatus::{False, True, Unknown};
    let fenced = |message: &str| {
        [
            (PROCESSING, False, "Fenced".to_owned(), message.to_owned()),
            (SUCCEEDED, True, "Fenced".to_owned(), message.to_owned()),
        ]
    };
    let working = |reason: &str, message: &str| {
        [
            (PROCESSING, True, reason.to_owned(), message.to_owned()),
            (SUCCEEDED, Unknown, reason.to_owned(), message.to_owned()),
        ]
    };
    let failed = |reason: &str, message: &str| {
        [
            (PROCESSING, False, reason.to_owned(), message.to_owned()),
            (SUCCEEDED, False, reason.to_owned(), message.to_owned()),
        ]
    };
    const OUT_OF_SERVICE: &str =
        "the BMC confirmed the power off; the Node is tainted node.kubernetes.io/out-of-service";
    match (phase, outcome) {
        (_, Outcome::Taint) => Some(fenced(OUT_OF_SERVICE)),
        (Phase::Fenced, Outcome::Held(Hold::PowerOnFailed, message, _)) => {
            Some(fenced(&format!("{OUT_OF_SERVICE}; {message}")))
        }
        (Phase::Fenced, _) => Some(fenced(OUT_OF_SERVICE)),
        (_, Outcome::Held(Hold::AwaitingPowerOff, message, _)) => {
            Some(working(Hold::AwaitingPowerOff.reason(), message))
        }
        (_, Outcome::Held(hold, message, _)) => Some(failed(hold.reason(), message)),
        (_, Outcome::PowerOff) | (Phase::PoweringOff, _) => Some(working(
            "FencingPowerOff",
            "powering the server off through its BMC; the Node is tainted out of service once the BMC confirms it off",
        )),
        _ => None,
    }
}

/// Sets `changes` (and `PermanentNodeDeletionExpected=False`: ingot never deletes a Node) on
/// the BMCRemediation's status; writes it, with `lastUpdateTime`, only when something changed.
/// Returns whether it wrote.
pub async fn write_status(
    ctx: &FencingContext,
    remediation: &BMCRemediation,
    changes: &[(&str, ConditionStatus, String, String)],
) -> Result<bool, Error> {
    let before = remediation.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> = before.conditions.clone();
    let mut changed = false;
    for (type_, status, reason, message) in changes {
        changed |= set_condition(&mut conditions, type_, *status, reason, message, None);
    }
    changed |= set_condition(
        &mut conditions,
        PERMANENT_NODE_DELETION_EXPECTED,
        ConditionStatus::False,
        "NodeKept",
        "ingot powers the server off and on through its BMC; the Node object is never deleted",
        None,
    );
    if !changed {
        return Ok(false);
    }
    let status = BMCRemediationStatus {
        conditions,
        last_update_time: Some(Time(Timestamp::now())),
    };
    let body = json!({
        "metadata": {"resourceVersion": remediation.resource_version()},
        "status": crate::runtime::status::replacing(&before, &status)?,
    });
    Api::<BMCRemediation>::namespaced(
        ctx.client.clone(),
        &remediation.namespace().unwrap_or_default(),
    )
    .patch_status(
        &remediation.name_any(),
        &PatchParams::default(),
        &Patch::Merge(body),
    )
    .await?;
    Ok(true)
}

fn api(ctx: &FencingContext, remediation: &BMCRemediation) -> Api<BMCRemediation> {
    Api::namespaced(
        ctx.client.clone(),
        &remediation.namespace().unwrap_or_default(),
    )
}

/// Adds ingot's finalizer; `true` when it wrote (the watch brings the object back).
pub async fn hold(ctx: &FencingContext, remediation: &BMCRemediation) -> Result<bool, Error> {
    Ok(
        finalizer::add(&api(ctx, remediation), remediation, &[FINALIZER])
            .await?
            .is_some(),
    )
}

/// Removes ingot's finalizer (the object then goes).
pub async fn let_go(ctx: &FencingContext, remediation: &BMCRemediation) -> Result<(), Error> {
    finalizer::remove(&api(ctx, remediation), remediation, FINALIZER).await?;
    Ok(())
}

/// Reports on what this pass did not act on: refused ones (other namespace) and ones NHC gave
/// up on before a power action; lets go of deleted ones that release nothing.
pub async fn report_others(
    ctx: &FencingContext,
    node: &str,
    inventory_namespace: Option<&str>,
    remediations: &Remediations,
) -> Result<(), Error> {
    use ConditionStatus::False;
    for r in &remediations.refused {
        let message = format!(
            "namespace {} may not act on Node {node}: its Inventory is in namespace {}; create the BMCRemediationTemplate your NodeHealthCheck names in that namespace",
            r.namespace().unwrap_or_default(),
            inventory_namespace.unwrap_or_default()
        );
        let changes = [
            (
                PROCESSING,
                False,
                NAMESPACE_NOT_ALLOWED.to_owned(),
                message.clone(),
            ),
            (
                SUCCEEDED,
                False,
                NAMESPACE_NOT_ALLOWED.to_owned(),
                message.clone(),
            ),
        ];
        if write_status(ctx, r, &changes).await? {
            ctx.events
                .publish(
                    r.as_ref(),
                    EventType::Warning,
                    NAMESPACE_NOT_ALLOWED,
                    "Fence",
                    message,
                )
                .await;
        }
    }
    for r in &remediations.stopped {
        let message = "nothing is done for this remediation: NodeHealthCheck stopped waiting for it (remediation.medik8s.io/nhc-timed-out) before ingot powered anything off, or an older remediation of the same Node drives".to_owned();
        let succeeded_false = r
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == SUCCEEDED))
            .is_some_and(|c| c.status == "False");
        let mut changes = vec![(
            PROCESSING,
            False,
            STOPPED_BY_NHC.to_owned(),
            message.clone(),
        )];
        if !succeeded_false {
            changes.push((SUCCEEDED, False, STOPPED_BY_NHC.to_owned(), message.clone()));
        }
        write_status(ctx, r, &changes).await?;
    }
    for r in &remediations.done {
        let_go(ctx, r).await?;
    }
    Ok(())
}

/// The reason of a BMCRemediation whose Node does not exist.
pub const NODE_NOT_FOUND: &str = "NodeNotFound";
/// The reason of the Event when ingot lets go of one whose Node does not exist.
pub const RELEASED_NODE_GONE: &str = "FencingReleasedNodeGone";

/// What becomes of a BMCRemediation whose Node does not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WithoutNode {
    /// Deleted, holding ingot's finalizer: let go, without any power action (a deleted Node is
    /// not a Node back).
    LetGo,
    /// Alive: its conditions say the Node is gone; nothing is fenced.
    Report,
    /// Deleted without ingot's finalizer: nothing of ingot's.
    Nothing,
}

/// What to do with a BMCRemediation whose Node does not exist.
pub fn without_node(remediation: &BMCRemediation) -> WithoutNode {
    if remediation.metadata.deletion_timestamp.is_none() {
        WithoutNode::Report
    } else if remediation.finalizers().iter().any(|f| f == FINALIZER) {
        WithoutNode::LetGo
    } else {
        WithoutNode::Nothing
    }
}

/// The conditions of a live BMCRemediation whose Node does not exist.
pub fn node_not_found(node: &str) -> [(&'static str, ConditionStatus, String, String); 2] {
    let message = format!(
        "Node {node} does not exist: nothing is fenced (no power action for a Node that is not there); delete this remediation, or it acts once a Node of that name exists"
    );
    [
        (
            PROCESSING,
            ConditionStatus::False,
            NODE_NOT_FOUND.to_owned(),
            message.clone(),
        ),
        (
            SUCCEEDED,
            ConditionStatus::False,
            NODE_NOT_FOUND.to_owned(),
            message,
        ),
    ]
}

/// A BMCRemediation whose Node the Node store does not hold (its change, or its Node's
/// deletion, woke it). The API server is asked whether the Node exists (the store may lag);
/// if it does, the Node's own pass has it. If not: a deleted one holding ingot's finalizer is
/// let go at once, with a Normal Event saying why and no power action, after its episode's
/// Jobs are deleted; a live one says `NodeNotFound` in its conditions (and a Warning Event).
pub async fn reconcile_without_node(
    remediation: Arc<BMCRemediation>,
    ctx: Arc<FencingContext>,
) -> Result<kube::runtime::controller::Action, Error> {
    use kube::runtime::controller::Action;
    use kube::runtime::reflector::ObjectRef;
    let stores = ctx.stores()?;
    let node = node_of(&remediation);
    let what = without_node(&remediation);
    if what == WithoutNode::Nothing || stores.nodes.get(&ObjectRef::new(&node)).is_some() {
        return Ok(Action::await_change());
    }
    let found = Api::<k8s_openapi::api::core::v1::Node>::all(ctx.client.clone())
        .list_metadata(
            &kube::api::ListParams::default()
                .fields(&format!("metadata.name={node}"))
                .limit(1),
        )
        .await?;
    if !found.items.is_empty() {
        return Ok(Action::await_change());
    }
    match what {
        WithoutNode::LetGo => {
            // The episode's Jobs (best effort: a finished Job left behind goes with its
            // Inventory).
            for job in stores.jobs.state() {
                if job.labels().get(super::JOB_NODE_LABEL) != Some(&node) {
                    continue;
                }
                let jobs: Api<ingot_api::rufio::Job> =
                    Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
                match jobs
                    .delete(&job.name_any(), &kube::api::DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(error) => {
                        tracing::warn!(%error, job = %job.name_any(), "could not delete a fencing Job")
                    }
                }
            }
            ctx.events
                .publish(
                    remediation.as_ref(),
                    EventType::Normal,
                    RELEASED_NODE_GONE,
                    "Release",
                    format!(
                        "Node {node} no longer exists: ingot's finalizer is removed without any power action (a deleted Node is not a Node back)"
                    ),
                )
                .await;
            let_go(&ctx, &remediation).await?;
        }
        WithoutNode::Report => {
            if write_status(&ctx, &remediation, &node_not_found(&node)).await? {
                ctx.events
                    .publish(
                        remediation.as_ref(),
                        EventType::Warning,
                        NODE_NOT_FOUND,
                        "Fence",
                        format!("Node {node} does not exist: nothing is fenced"),
                    )
                    .await;
            }
        }
        WithoutNode::Nothing => {}
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn remediation(
        namespace: &str,
        name: &str,
        annotations: &[(&str, &str)],
        deleted: bool,
    ) -> Arc<BMCRemediation> {
        let mut r = BMCRemediation::new(name, Default::default());
        r.metadata = ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            deletion_timestamp: deleted.then(|| Time(Timestamp::now())),
            ..ObjectMeta::default()
        };
        Arc::new(r)
    }

    #[test]
    fn the_node_is_the_name_or_nhcs_annotation() {
        assert_eq!(node_of(&remediation("ns", "n1", &[], false)), "n1");
        assert_eq!(
            node_of(&remediation(
                "ns",
                "n1-x7k2p",
                &[(NODE_NAME_ANNOTATION, "n1")],
                false
            )),
            "n1"
        );
    }

    #[test]
    fn only_the_inventorys_namespace_acts() {
        let mine = remediation("inv", "n1", &[], false);
        let other = remediation("tenant", "n1", &[], false);
        let sorted = Remediations::sort(vec![other.clone(), mine.clone()], Some("inv"), false);
        assert_eq!(
            sorted.driver.as_ref().map(|r| r.namespace()),
            Some(mine.namespace())
        );
        assert_eq!(sorted.refused.len(), 1);
        // Without an Inventory, fencing's own check holds it (NoInventory).
        let sorted = Remediations::sort(vec![other], None, false);
        assert!(sorted.driver.is_some());
    }

    #[test]
    fn deleted_releases_and_nhcs_time_out_stops_only_before_a_power_off() {
        let sorted =
            Remediations::sort(vec![remediation("inv", "n1", &[], true)], Some("inv"), true);
        assert!(sorted.driver.is_none() && sorted.released.is_some());
        let timed_out = remediation(
            "inv",
            "n1",
            &[(NHC_TIMED_OUT_ANNOTATION, "2026-01-01T00:00:00Z")],
            false,
        );
        let sorted = Remediations::sort(vec![timed_out.clone()], Some("inv"), false);
        assert!(sorted.driver.is_none() && sorted.stopped.len() == 1);
        let sorted = Remediations::sort(vec![timed_out], Some("inv"), true);
        assert!(sorted.driver.is_some(), "a power-off under way goes on");
    }

    #[test]
    fn without_its_node_a_held_deletion_is_let_go_and_a_live_one_reports() {
        assert_eq!(
            without_node(&remediation("inv", "n1", &[], false)),
            WithoutNode::Report
        );
        let mut held = remediation("inv", "n1", &[], true).as_ref().clone();
        assert_eq!(without_node(&held), WithoutNode::Nothing, "not ingot's");
        held.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
        assert_eq!(without_node(&held), WithoutNode::LetGo);
        let [processing, succeeded] = node_not_found("n1");
        assert_eq!(
            (processing.0, processing.1, processing.2.as_str()),
            (PROCESSING, ConditionStatus::False, NODE_NOT_FOUND)
        );
        assert_eq!(
            (succeeded.0, succeeded.1, succeeded.2.as_str()),
            (SUCCEEDED, ConditionStatus::False, NODE_NOT_FOUND)
        );
        assert!(succeeded.3.contains("Node n1 does not exist"));
    }

    #[test]
    fn succeeded_only_once_tainted() {
        let status = |phase, outcome: Outcome| {
            conditions_for(phase, &outcome).map(|c| (c[0].1, c[1].1, c[1].2.clone()))
        };
        use ConditionStatus::{False, True, Unknown};
        assert_eq!(
            status(Phase::Candidate, Outcome::PowerOff),
            Some((True, Unknown, "FencingPowerOff".into()))
        );
        assert_eq!(
            status(
                Phase::PoweringOff,
                Outcome::Held(Hold::AwaitingPowerOff, "m".into(), None)
            ),
            Some((True, Unknown, "FencingAwaitingPowerOff".into()))
        );
        assert_eq!(
            status(Phase::PoweringOff, Outcome::Taint),
            Some((False, True, "Fenced".into()))
        );
        assert_eq!(
            status(
                Phase::Candidate,
                Outcome::Held(Hold::BmcUnknown, "m".into(), None)
            ),
            Some((False, False, "FencingHeldBMCUnknown".into()))
        );
        assert_eq!(
            status(
                Phase::PoweringOff,
                Outcome::Held(Hold::PowerOffFailed, "m".into(), None)
            ),
            Some((False, False, "FencingPowerOffFailed".into()))
        );
        assert_eq!(status(Phase::Healthy, Outcome::Wait(None)), None);
    }
}
