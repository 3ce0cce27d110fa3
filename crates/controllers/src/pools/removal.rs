//! Draining a member's Node before its server goes, for both destructive paths: the pool's
//! removal of one member (scale-down, replacement; planned in [`super::pool::plan`]) and the
//! deletion of an Instance (its finalizer). One pass cordons the Node, evicts through
//! [`super::drain`], and decides within `drainTimeout` whether the server may go.

use std::time::Duration;

use ingot_api::equinix::InstancePool;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};

use super::PoolsContext;
use super::drain::{self, DrainState};
use super::health::NodeFacts;
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

pub(crate) fn drain_timeout(pool: &InstancePool) -> Duration {
    pool.spec
        .drain_timeout
        .as_deref()
        .and_then(parse_go_duration)
        .unwrap_or(DEFAULT_DRAIN_TIMEOUT)
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
