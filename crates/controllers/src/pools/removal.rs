//! The pool's destructive paths, one member at a time: scale-down and the replacement of an
//! unhealthy Node. Each cordons the Node, drains it within `drainTimeout`, then deletes the
//! Instance (whose finalizer deletes the server and the Node). What to remove is decided in
//! [`super::health`]; this module carries it out and reports on the pool.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ingot_api::equinix::{Instance, InstancePool};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use tracing::info;

use super::PoolsContext;
use super::budget::MaxUnhealthy;
use super::drain::{self, DrainState};
use super::health::{self, Member, NodeFacts, Replacement, ScaleDown};
use super::pool::{Error, Plan};
use crate::duration::parse_go_duration;
use crate::metrics::DrainOutcome;

/// Pool condition: whether unhealthy Nodes may be replaced (Cluster API's name).
pub const REMEDIATION_CONDITION: &str = "RemediationAllowed";
/// Pool condition: whether the last drain went through (Cluster API's name).
pub const DRAIN_CONDITION: &str = "DrainingSucceeded";
/// `drainTimeout` when the pool sets none.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a drain in progress is looked at.
pub(crate) const DRAIN_POLL: Duration = Duration::from_secs(2);
/// The `controller` label of the pools' drains.
const DRAIN_METRIC: &str = "pools";
/// Event reason of the removal of an unhealthy member.
const REPLACING_UNHEALTHY_NODE: &str = "ReplacingUnhealthyNode";

pub(crate) fn drain_timeout(pool: &InstancePool) -> Duration {
    pool.spec
        .drain_timeout
        .as_deref()
        .and_then(parse_go_duration)
        .unwrap_or(DEFAULT_DRAIN_TIMEOUT)
}

/// Scale-down: the next member to go, one at a time.
pub(crate) async fn scale_down_step(
    ctx: &PoolsContext,
    pool: &InstancePool,
    members: &[Member],
    nodes: &BTreeMap<String, Node>,
    count: i64,
    plan: &mut Plan,
) -> Result<(), Error> {
    let live: Vec<Member> = members.iter().filter(|m| !m.deleting).cloned().collect();
    let in_flight = members.iter().find(|m| m.deleting);
    let decision = match in_flight {
        Some(member) => Some(ScaleDown::InFlight {
            member: member.name.clone(),
        }),
        None => health::scale_down(&live),
    };
    match decision {
        None => {}
        Some(ScaleDown::InFlight { member }) => {
            // One at a time: wait for the Instance being removed to be gone.
            plan.target = Some(member);
            plan.look_again(DRAIN_POLL);
        }
        Some(ScaleDown::HeldForControlPlane { member, unhealthy }) => {
            plan.condition(
                DRAIN_CONDITION,
                false,
                "ControlPlaneHeld",
                format!(
                    "scale-down to {count} would remove control-plane Node {member} while {unhealthy} is unhealthy: waiting"
                ),
            );
            plan.look_again(Duration::from_secs(15));
        }
        Some(ScaleDown::Remove { member, .. }) => {
            let why = format!("to scale down to {count}");
            remove(
                ctx,
                pool,
                &member,
                nodes.get(&member),
                &why,
                "InstanceRemoved",
                plan,
            )
            .await?;
        }
    }
    Ok(())
}

/// Health replacement: at most one unhealthy Node at a time, within `maxUnhealthy`.
pub(crate) async fn replacement_step(
    ctx: &PoolsContext,
    pool: &InstancePool,
    members: &[Member],
    nodes: &BTreeMap<String, Node>,
    plan: &mut Plan,
) -> Result<(), Error> {
    // As upstream: no nodeCleanupWaitInterval, no replacement.
    let Some(wait) = pool
        .spec
        .node_cleanup_wait_interval
        .as_deref()
        .and_then(parse_go_duration)
    else {
        return Ok(());
    };
    let max = match &pool.spec.max_unhealthy {
        None => MaxUnhealthy::default(),
        Some(IntOrString::Int(n)) => MaxUnhealthy::Count(u32::try_from(*n).unwrap_or(0)),
        Some(IntOrString::String(text)) => match MaxUnhealthy::parse(text) {
            Some(max) => max,
            None => {
                if members
                    .iter()
                    .any(|m| m.node.as_ref().is_some_and(|n| !n.ready))
                {
                    ctx.metrics.replacement_blocked("invalid_max_unhealthy");
                }
                plan.condition(
                    REMEDIATION_CONDITION,
                    false,
                    "InvalidMaxUnhealthy",
                    format!(
                        "spec.maxUnhealthy {text:?} is neither a count nor a percentage such as 40%: nothing is replaced until it is fixed"
                    ),
                );
                return Ok(());
            }
        },
    };
    let now = Timestamp::now();
    // Look again when a NotReady Node will have waited long enough.
    if members
        .iter()
        .any(|m| m.node.as_ref().is_some_and(|n| !n.ready))
    {
        plan.look_again((wait / 4).clamp(Duration::from_secs(1), Duration::from_secs(30)));
    }
    match health::replacement(members, wait, max, now) {
        Replacement::Healthy => {
            plan.condition(
                REMEDIATION_CONDITION,
                true,
                "WithinBudget",
                format!("no Node has been NotReady for longer than {wait:?}; maxUnhealthy {max}"),
            );
        }
        Replacement::TooManyUnhealthy { unhealthy, allowed } => {
            ctx.metrics.replacement_blocked("too_many_unhealthy");
            plan.condition(
                REMEDIATION_CONDITION,
                false,
                "TooManyUnhealthy",
                format!(
                    "{} of {} Nodes are unhealthy ({}), more than maxUnhealthy {max} allows ({allowed}): replacing none, as this looks like a partition rather than broken servers",
                    unhealthy.len(),
                    members.iter().filter(|m| !m.deleting).count(),
                    unhealthy.join(", ")
                ),
            );
        }
        Replacement::InFlight { member } => {
            // The budget is held: whatever is in flight finishes (and joins) first.
            if members.iter().any(|m| m.deleting) {
                plan.target = Some(member);
            }
            plan.look_again(Duration::from_secs(5));
        }
        Replacement::AllExempt { exempt } => {
            let reasons: BTreeSet<&'static str> =
                exempt.iter().map(|(_, why)| exemption_label(why)).collect();
            for reason in reasons {
                ctx.metrics.replacement_blocked(reason);
            }
            let list: Vec<String> = exempt
                .iter()
                .map(|(m, why)| format!("{m} ({why})"))
                .collect();
            plan.condition(
                REMEDIATION_CONDITION,
                true,
                "Exempt",
                format!("unhealthy but not to be replaced: {}", list.join(", ")),
            );
        }
        Replacement::Replace {
            member,
            down_for,
            control_plane,
        } => {
            plan.condition(
                REMEDIATION_CONDITION,
                true,
                "Replacing",
                format!("replacing {member}; maxUnhealthy {max}"),
            );
            let why = format!(
                "Node {member} has not been Ready for {}s (longer than nodeCleanupWaitInterval {}){}: replacing it",
                down_for.as_secs(),
                pool.spec
                    .node_cleanup_wait_interval
                    .as_deref()
                    .unwrap_or_default(),
                if control_plane {
                    ", a control-plane Node, the only one replaced now"
                } else {
                    ""
                }
            );
            remove(
                ctx,
                pool,
                &member,
                nodes.get(&member),
                &why,
                REPLACING_UNHEALTHY_NODE,
                plan,
            )
            .await?;
        }
    }
    Ok(())
}

/// The metric label of a reason [`health::replacement`] exempts a member for.
fn exemption_label(why: &str) -> &'static str {
    match why {
        "in maintenance" => "maintenance",
        "cordoned by a person" => "cordoned",
        "opted out" => "opted_out",
        _ => "exempt",
    }
}

/// What a drain's state means for the removal, given the deadline.
#[derive(Debug, PartialEq, Eq)]
enum DrainVerdict {
    /// Drained: delete the Instance.
    Proceed,
    /// Past `drainTimeout` on an unreachable Node: its kubelet cannot confirm anything, so the
    /// removal goes on (as Cluster API does for unreachable Nodes).
    GoOnWithoutIt,
    /// Keep waiting; `blocked` says the condition must show it (a refusal, or the deadline
    /// passed on a reachable Node), `expired` that the deadline passed.
    Wait { blocked: bool, expired: bool },
}

fn drain_verdict(
    state: &DrainState,
    draining: Duration,
    timeout: Duration,
    unreachable: bool,
) -> DrainVerdict {
    if *state == DrainState::Done {
        return DrainVerdict::Proceed;
    }
    let expired = draining > timeout;
    if expired && unreachable {
        return DrainVerdict::GoOnWithoutIt;
    }
    DrainVerdict::Wait {
        blocked: expired || matches!(state, DrainState::Refused { .. }),
        expired,
    }
}

/// Where draining a Node before its server goes stands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DrainStep {
    /// Drained, or unreachable past `drainTimeout` (`timed_out` says so, for an Event): the
    /// server may go.
    Proceed { timed_out: Option<String> },
    /// Not yet: why, and whether it is blocked (a refusal, or the deadline passed on a
    /// reachable Node) rather than pods still terminating.
    Wait { message: String, blocked: bool },
}

/// One pass of draining `node` (a member's) before its server goes: cordon, evict, and the
/// verdict within `timeout`. Going on without a finished drain is decided on the Node as it is
/// now, read live: a cached copy may not show that it came back.
pub(crate) async fn drain_step(
    ctx: &PoolsContext,
    node: &Node,
    timeout: Duration,
    why: &str,
) -> Result<DrainStep, kube::Error> {
    let member = node.name_any();
    let now = Timestamp::now();
    drain::cordon(&ctx.client, node, now).await?;
    let evictions = ctx.shared.eviction_client.as_ref().unwrap_or(&ctx.client);
    let state = drain::drain(evictions, &member).await?;
    if state == DrainState::Done {
        ctx.metrics
            .drain_finished(DRAIN_METRIC, DrainOutcome::Drained);
        return Ok(DrainStep::Proceed { timed_out: None });
    }
    let started = drain::drain_started(node).unwrap_or(now);
    let draining = Duration::try_from(now.duration_since(started)).unwrap_or_default();
    let waiting = match &state {
        DrainState::Refused { pod } => {
            format!("evicting pod {pod} is refused by a PodDisruptionBudget")
        }
        DrainState::Terminating { remaining } => {
            format!("{remaining} pods are still terminating")
        }
        DrainState::Done => String::new(),
    };
    let mut unreachable = NodeFacts::of(node).unreachable;
    if unreachable && draining > timeout {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        unreachable = match nodes.get_opt(&member).await? {
            Some(live) => NodeFacts::of(&live).unreachable,
            None => true,
        };
    }
    match drain_verdict(&state, draining, timeout, unreachable) {
        DrainVerdict::Proceed => Ok(DrainStep::Proceed { timed_out: None }),
        DrainVerdict::GoOnWithoutIt => {
            ctx.metrics
                .drain_finished(DRAIN_METRIC, DrainOutcome::TimedOut);
            Ok(DrainStep::Proceed {
                timed_out: Some(format!(
                    "draining unreachable Node {member} did not finish within {}s ({waiting}): going on without it",
                    timeout.as_secs()
                )),
            })
        }
        DrainVerdict::Wait { blocked, expired } => {
            let message = if expired {
                format!(
                    "draining Node {member} did not finish within drainTimeout {}s ({waiting}); the Node is reachable, so it stays cordoned and is not removed",
                    timeout.as_secs()
                )
            } else {
                format!("draining Node {member} before removing it {why}: {waiting}")
            };
            if blocked {
                ctx.metrics.drain_blocked(DRAIN_METRIC);
            }
            Ok(DrainStep::Wait { message, blocked })
        }
    }
}

/// Cordon, drain within the deadline, then delete the Instance.
async fn remove(
    ctx: &PoolsContext,
    pool: &InstancePool,
    member: &str,
    node: Option<&Node>,
    why: &str,
    reason: &'static str,
    plan: &mut Plan,
) -> Result<(), Error> {
    plan.target = Some(member.to_owned());
    if let Some(node) = node {
        let step = drain_step(ctx, node, drain_timeout(pool), why)
            .await
            .map_err(|source| Error::Drain {
                node: member.to_owned(),
                source,
            })?;
        match step {
            DrainStep::Proceed { timed_out } => {
                if let Some(message) = timed_out {
                    plan.event(false, "DrainTimeout", message);
                }
            }
            DrainStep::Wait { message, blocked } => {
                if blocked {
                    plan.condition(DRAIN_CONDITION, false, "DrainBlocked", message);
                }
                plan.look_again(DRAIN_POLL);
                return Ok(());
            }
        }
        plan.condition(
            DRAIN_CONDITION,
            true,
            "Drained",
            format!("Node {member} was drained"),
        );
    }
    let instances: Api<Instance> = Api::all(ctx.client.clone());
    match instances.delete(member, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.shared
                .caches
                .expectations
                .deleted(&pool.name_any(), member);
            if reason == REPLACING_UNHEALTHY_NODE {
                ctx.metrics.replacement_started();
            }
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(source) => {
            return Err(Error::DeleteInstance {
                name: member.to_owned(),
                source,
            });
        }
    }
    info!(pool = %pool.name_any(), instance = %member, reason, "removed instance");
    plan.event(
        reason != REPLACING_UNHEALTHY_NODE,
        reason,
        format!("removed Instance {member}: {why}"),
    );
    plan.deleted = Some(member.to_owned());
    plan.look_again(DRAIN_POLL);
    Ok(())
}

/// Nodes cordoned by ingot that are no longer to be removed (they recovered, or the pool grew
/// back) are uncordoned, and the drain condition returns to True.
pub(crate) async fn uncordon_recovered(
    ctx: &PoolsContext,
    members: &[Member],
    nodes: &BTreeMap<String, Node>,
    plan: &mut Plan,
) -> Result<(), Error> {
    for member in members.iter().filter(|m| !m.deleting) {
        if plan.target.as_deref() == Some(member.name.as_str()) {
            continue;
        }
        let Some(node) = nodes.get(&member.name) else {
            continue;
        };
        let facts = NodeFacts::of(node);
        if !(facts.cordoned_by_us || facts.draining) || !facts.ready {
            continue;
        }
        drain::uncordon(&ctx.client, node)
            .await
            .map_err(|source| Error::Drain {
                node: member.name.clone(),
                source,
            })?;
        if !facts.cordoned_by_us {
            // A person's cordon: it stays; only the drain's start was forgotten.
            continue;
        }
        plan.condition(
            DRAIN_CONDITION,
            true,
            "NodeRecovered",
            format!(
                "Node {} is Ready again and was uncordoned; it stays",
                member.name
            ),
        );
        plan.event(
            true,
            "NodeRecovered",
            format!(
                "Node {} is Ready again: uncordoned, no longer removed",
                member.name
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(300);

    fn refused() -> DrainState {
        DrainState::Refused {
            pod: "work-0".to_owned(),
        }
    }

    #[test]
    fn a_finished_drain_proceeds() {
        assert_eq!(
            drain_verdict(&DrainState::Done, Duration::ZERO, TIMEOUT, false),
            DrainVerdict::Proceed
        );
    }

    #[test]
    fn a_refusal_inside_the_deadline_is_blocked_at_once() {
        for unreachable in [false, true] {
            assert_eq!(
                drain_verdict(&refused(), Duration::from_secs(10), TIMEOUT, unreachable),
                DrainVerdict::Wait {
                    blocked: true,
                    expired: false
                }
            );
        }
    }

    #[test]
    fn pods_still_terminating_inside_the_deadline_wait_quietly() {
        let state = DrainState::Terminating { remaining: 2 };
        assert_eq!(
            drain_verdict(&state, Duration::from_secs(10), TIMEOUT, false),
            DrainVerdict::Wait {
                blocked: false,
                expired: false
            }
        );
    }

    #[test]
    fn past_the_deadline_an_unreachable_node_goes_and_a_reachable_one_stays_blocked() {
        let late = Duration::from_secs(301);
        for state in [refused(), DrainState::Terminating { remaining: 1 }] {
            assert_eq!(
                drain_verdict(&state, late, TIMEOUT, true),
                DrainVerdict::GoOnWithoutIt
            );
            assert_eq!(
                drain_verdict(&state, late, TIMEOUT, false),
                DrainVerdict::Wait {
                    blocked: true,
                    expired: true
                }
            );
        }
    }
}
