//! The pool's decisions about destroying members, as pure functions of what it sees:
//! which unhealthy Node to replace (at most one at a time, within `maxUnhealthy`), and which
//! member goes first on scale-down.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::budget::MaxUnhealthy;
use super::drain::{cordoned_by_us, drain_started};

/// Harvester's maintenance mode annotation on a Node.
pub const MAINTENANCE_ANNOTATION: &str = "harvesterhci.io/maintain-status";
/// On a Node or an Instance: never replace it for being unhealthy (Cluster API's
/// `skip-remediation`, in this API group).
pub const SKIP_REMEDIATION_ANNOTATION: &str = "equinix.harvesterhci.io/skip-remediation";
const CONTROL_PLANE_LABELS: [&str; 3] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
    "node-role.kubernetes.io/etcd",
];

/// What the pool knows of a Node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFacts {
    /// `Ready` is `True`.
    pub ready: bool,
    /// `Ready` is `Unknown` (the kubelet stopped reporting) or the unreachable taint is set.
    pub unreachable: bool,
    /// When `Ready` last changed.
    pub ready_since: Option<Timestamp>,
    pub unschedulable: bool,
    pub cordoned_by_us: bool,
    /// ingot started draining it (on a Node a person cordoned, without taking the cordon over).
    pub draining: bool,
    pub maintenance: bool,
    pub skip: bool,
    pub control_plane: bool,
}

impl NodeFacts {
    pub fn of(node: &Node) -> Self {
        let condition = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/unreachable"));
        let annotations = node.annotations();
        NodeFacts {
            ready: condition.is_some_and(|c| c.status == "True"),
            unreachable: tainted || condition.is_none_or(|c| c.status == "Unknown"),
            ready_since: condition.and_then(|c| c.last_transition_time.as_ref().map(|t| t.0)),
            unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
            cordoned_by_us: cordoned_by_us(node),
            draining: drain_started(node).is_some(),
            maintenance: annotations
                .get(MAINTENANCE_ANNOTATION)
                .is_some_and(|v| !v.is_empty()),
            skip: annotations.contains_key(SKIP_REMEDIATION_ANNOTATION),
            control_plane: CONTROL_PLANE_LABELS
                .iter()
                .any(|l| node.labels().contains_key(*l)),
        }
    }

    /// Not Ready for longer than `wait`; how long, if so.
    fn unhealthy_for(&self, wait: Duration, now: Timestamp) -> Option<Duration> {
        if self.ready {
            return None;
        }
        let since = self.ready_since.unwrap_or(now);
        let down = Duration::try_from(now.duration_since(since)).unwrap_or_default();
        (down > wait).then_some(down)
    }
}

/// One member of a pool, as the decisions need it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Member {
    pub name: String,
    /// `status.status == managed`.
    pub managed: bool,
    /// Being deleted.
    pub deleting: bool,
    pub created: Option<Timestamp>,
    /// The Instance carries the skip annotation.
    pub skip: bool,
    pub node: Option<NodeFacts>,
}

/// What health replacement decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Replacement {
    /// Nothing is unhealthy long enough.
    Healthy,
    /// More members are unhealthy than `maxUnhealthy` allows: nothing is replaced.
    TooManyUnhealthy {
        unhealthy: Vec<String>,
        allowed: usize,
    },
    /// A replacement (or another change) is under way; the budget is held until it is managed.
    InFlight { member: String },
    /// Unhealthy members, none of which may be replaced.
    AllExempt { exempt: Vec<(String, &'static str)> },
    /// Replace this one.
    Replace {
        member: String,
        down_for: Duration,
        control_plane: bool,
    },
}

/// Which unhealthy member to replace now, if any: at most one at a time, never while another
/// member is being deleted or has yet to join (a replacement holds the budget until it is
/// managed), nothing when more than `max` are unhealthy, workers before control-plane Nodes,
/// and never a Node in maintenance, cordoned by a person or opted out.
pub fn replacement(
    members: &[Member],
    wait: Duration,
    max: MaxUnhealthy,
    now: Timestamp,
) -> Replacement {
    let live: Vec<&Member> = members.iter().filter(|m| !m.deleting).collect();
    let mut unhealthy: Vec<(&Member, &NodeFacts, Duration)> = live
        .iter()
        .filter(|m| m.managed)
        .filter_map(|m| {
            let node = m.node.as_ref()?;
            node.unhealthy_for(wait, now).map(|d| (*m, node, d))
        })
        .collect();
    if unhealthy.is_empty() {
        return Replacement::Healthy;
    }
    let allowed = max.allowed(live.len());
    if unhealthy.len() > allowed {
        let mut names: Vec<String> = unhealthy.iter().map(|(m, _, _)| m.name.clone()).collect();
        names.sort();
        return Replacement::TooManyUnhealthy {
            unhealthy: names,
            allowed,
        };
    }
    if let Some(busy) = members.iter().find(|m| m.deleting || !m.managed) {
        return Replacement::InFlight {
            member: busy.name.clone(),
        };
    }
    let mut exempt = Vec::new();
    unhealthy.retain(|(m, node, _)| {
        let why = if node.maintenance {
            Some("in maintenance")
        } else if node.unschedulable && !node.cordoned_by_us {
            Some("cordoned by a person")
        } else if node.skip || m.skip {
            Some("opted out")
        } else {
            None
        };
        if let Some(why) = why {
            exempt.push((m.name.clone(), why));
        }
        why.is_none()
    });
    // A replacement already started (cordoned by us) goes on; then workers before the
    // control plane; then the longest down.
    unhealthy.sort_by_key(|(m, node, down)| {
        (
            !node.cordoned_by_us,
            node.control_plane,
            std::cmp::Reverse(*down),
            m.name.clone(),
        )
    });
    match unhealthy.first() {
        Some((member, node, down)) => Replacement::Replace {
            member: member.name.clone(),
            down_for: *down,
            control_plane: node.control_plane,
        },
        None => Replacement::AllExempt { exempt },
    }
}

/// What scale-down decided.
#[derive(Clone, Debug, PartialEq)]
pub enum ScaleDown {
    /// Remove this member next.
    Remove { member: String, joined: bool },
    /// A member is still being removed: one at a time.
    InFlight { member: String },
    /// The next would be a control-plane Node while another member is unhealthy.
    HeldForControlPlane { member: String, unhealthy: String },
}

/// The member to remove next on scale-down: one at a time; never joined first, then those
/// whose Node is not Ready, then workers, then the newest; a removal already started (cordoned
/// by us) goes on first. A control-plane Node is never removed while another is unhealthy.
pub fn scale_down(members: &[Member]) -> Option<ScaleDown> {
    if let Some(busy) = members.iter().find(|m| m.deleting) {
        return Some(ScaleDown::InFlight {
            member: busy.name.clone(),
        });
    }
    let mut order: Vec<&Member> = members.iter().collect();
    order.sort_by_key(|m| {
        let node = m.node.as_ref();
        (
            !node.is_some_and(|n| n.cordoned_by_us || n.draining),
            m.managed && node.is_some(),
            node.is_some_and(|n| n.ready),
            node.is_some_and(|n| n.control_plane),
            std::cmp::Reverse(m.created),
            m.name.clone(),
        )
    });
    let victim = order.first()?;
    let joined = victim.managed && victim.node.is_some();
    if victim.node.as_ref().is_some_and(|n| n.control_plane)
        && let Some(other) = members
            .iter()
            .find(|m| m.name != victim.name && m.node.as_ref().is_some_and(|n| !n.ready))
    {
        return Some(ScaleDown::HeldForControlPlane {
            member: victim.name.clone(),
            unhealthy: other.name.clone(),
        });
    }
    Some(ScaleDown::Remove {
        member: victim.name.clone(),
        joined,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn member(name: &str, ready: bool, down_secs: i64) -> Member {
        Member {
            name: name.to_owned(),
            managed: true,
            created: Some("2026-01-01T10:00:00Z".parse().unwrap()),
            node: Some(NodeFacts {
                ready,
                unreachable: !ready,
                ready_since: Some(now() - k8s_openapi::jiff::SignedDuration::from_secs(down_secs)),
                ..NodeFacts::default()
            }),
            ..Member::default()
        }
    }

    const WAIT: Duration = Duration::from_secs(60);

    #[test]
    fn above_the_budget_nothing_is_replaced() {
        let members = vec![
            member("a", false, 600),
            member("b", false, 600),
            member("c", false, 600),
            member("d", true, 600),
            member("e", true, 600),
        ];
        let decision = replacement(&members, WAIT, MaxUnhealthy::default(), now());
        assert_eq!(
            decision,
            Replacement::TooManyUnhealthy {
                unhealthy: vec!["a".into(), "b".into(), "c".into()],
                allowed: 1
            }
        );
        // 60% of 5 allows 3.
        assert!(matches!(
            replacement(&members, WAIT, MaxUnhealthy::Percent(60), now()),
            Replacement::Replace { .. }
        ));
    }

    #[test]
    fn exactly_the_one_unhealthy_member_is_replaced_after_the_wait() {
        let mut members = vec![
            member("a", true, 600),
            member("b", false, 600),
            member("c", true, 600),
        ];
        assert!(matches!(
            replacement(&members, WAIT, MaxUnhealthy::default(), now()),
            Replacement::Replace { ref member, .. } if member == "b"
        ));
        members[1] = member("b", false, 30);
        assert_eq!(
            replacement(&members, WAIT, MaxUnhealthy::default(), now()),
            Replacement::Healthy
        );
    }

    #[test]
    fn the_budget_is_held_until_the_replacement_is_managed() {
        let mut joining = member("new", true, 0);
        joining.managed = false;
        joining.node = None;
        let members = vec![member("a", true, 600), member("b", false, 600), joining];
        assert_eq!(
            replacement(&members, WAIT, MaxUnhealthy::Count(2), now()),
            Replacement::InFlight {
                member: "new".into()
            }
        );
        let mut deleting = member("old", false, 600);
        deleting.deleting = true;
        let members = vec![member("a", true, 600), member("b", false, 600), deleting];
        assert!(matches!(
            replacement(&members, WAIT, MaxUnhealthy::Count(2), now()),
            Replacement::InFlight { .. }
        ));
    }

    #[test]
    fn maintenance_a_person_s_cordon_and_opt_out_are_never_replaced() {
        for exempt in 0..3 {
            let mut sick = member("b", false, 600);
            let node = sick.node.as_mut().unwrap();
            match exempt {
                0 => node.maintenance = true,
                1 => node.unschedulable = true,
                _ => sick.skip = true,
            }
            let members = vec![member("a", true, 600), sick];
            assert!(
                matches!(
                    replacement(&members, WAIT, MaxUnhealthy::default(), now()),
                    Replacement::AllExempt { .. }
                ),
                "case {exempt}"
            );
        }
        // Our own cordon does not exempt it.
        let mut sick = member("b", false, 600);
        let node = sick.node.as_mut().unwrap();
        node.unschedulable = true;
        node.cordoned_by_us = true;
        assert!(matches!(
            replacement(
                &[member("a", true, 600), sick],
                WAIT,
                MaxUnhealthy::default(),
                now()
            ),
            Replacement::Replace { .. }
        ));
    }

    #[test]
    fn control_plane_nodes_go_last() {
        let mut cp = member("a-cp", false, 900);
        cp.node.as_mut().unwrap().control_plane = true;
        let members = vec![cp, member("b-worker", false, 300), member("c", true, 0)];
        assert!(matches!(
            replacement(&members, WAIT, MaxUnhealthy::Count(2), now()),
            Replacement::Replace { ref member, control_plane: false, .. } if member == "b-worker"
        ));
    }

    #[test]
    fn scale_down_order() {
        let at = |s: &str| Some(s.parse::<Timestamp>().unwrap());
        let mut never_joined = member("never", true, 0);
        never_joined.managed = false;
        never_joined.node = None;
        let sick = member("sick", false, 10);
        let mut cp = member("cp", true, 0);
        cp.node.as_mut().unwrap().control_plane = true;
        cp.created = at("2026-01-01T11:59:00Z");
        let mut old = member("old", true, 0);
        old.created = at("2026-01-01T09:00:00Z");
        let mut new = member("new", true, 0);
        new.created = at("2026-01-01T11:00:00Z");
        let mut members = vec![
            old.clone(),
            cp.clone(),
            new.clone(),
            sick.clone(),
            never_joined.clone(),
        ];
        let mut removed = Vec::new();
        while let Some(ScaleDown::Remove { member, .. }) = scale_down(&members) {
            removed.push(member.clone());
            members.retain(|m| m.name != member);
        }
        assert_eq!(removed, ["never", "sick", "new", "old", "cp"]);

        // One at a time.
        let mut going = old.clone();
        going.deleting = true;
        assert!(matches!(
            scale_down(&[going, new.clone()]),
            Some(ScaleDown::InFlight { .. })
        ));
        // Never a control-plane Node while another is unhealthy.
        let mut sick_cp = member("sick-cp", false, 5);
        sick_cp.node.as_mut().unwrap().control_plane = true;
        let mut other = member("other", false, 5);
        other.node.as_mut().unwrap().control_plane = true;
        assert!(matches!(
            scale_down(&[sick_cp, other]),
            Some(ScaleDown::HeldForControlPlane { .. })
        ));
        // A removal already started goes on.
        let mut started = old;
        started.node.as_mut().unwrap().cordoned_by_us = true;
        assert!(matches!(
            scale_down(&[new, started]),
            Some(ScaleDown::Remove { ref member, .. }) if member == "old"
        ));
    }
}
