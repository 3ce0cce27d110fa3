//! The Machine lifecycle as a state machine: the phase parsed once ([`Lifecycle`]), and the
//! pure decisions the machine controller's phase functions act on: the health verdict of a
//! Machine linked to a Node ([`health`]) and the timeouts of a Pending or Unknown machine
//! ([`timeout`]). No API here: [`super::machine`] reads what they need and does what they
//! decide.

use std::time::Duration;

use serde_json::Value;

use super::status::Phase;

/// Where a Machine is, by `status.currentStatus.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// `""`: being created, no device linked yet.
    New,
    Pending,
    Running,
    Unknown,
    Failed,
    CrashLoopBackOff,
    /// `Terminating`, or a phase another controller wrote (e.g. `Available`): only the health
    /// check applies.
    Other,
}

impl Lifecycle {
    pub fn parse(phase: &str) -> Lifecycle {
        match phase {
            "" => Lifecycle::New,
            "Pending" => Lifecycle::Pending,
            "Running" => Lifecycle::Running,
            "Unknown" => Lifecycle::Unknown,
            "Failed" => Lifecycle::Failed,
            "CrashLoopBackOff" => Lifecycle::CrashLoopBackOff,
            _ => Lifecycle::Other,
        }
    }
}

/// The Node of a Machine, as far as its health goes.
#[derive(Clone, Debug, Default)]
pub struct NodeView {
    /// Its conditions, as JSON (as the Machine holds them).
    pub conditions: Vec<Value>,
    /// It carries `node.gardener.cloud/critical-components-not-ready`.
    pub critical_taint: bool,
    /// It is being deleted.
    pub deleting: bool,
    /// It carries `node.machine.sapcloud.io/not-managed-by-mcm`: neither linked nor followed
    /// when deleted (its health still counts).
    pub not_managed: bool,
}

/// What the health check of a Machine linked to a Node decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The Node of a Running machine (with conditions) is gone: `Unknown`.
    NodeGone,
    /// The Node is being deleted: the Machine goes too (upstream v0.61+), MCM replaces it.
    DeleteMachine,
    /// The Node's conditions differ from the Machine's: copy them, then look again.
    CopyConditions,
    /// Healthy and not yet Running: `Running`; `first` when this is the join after the create
    /// (the bootstrap token then goes).
    Joined { first: bool },
    /// A Running machine is unhealthy: `Unknown`.
    Unhealthy,
    /// Unhealthy, or Pending: the creation or health timeout decides ([`timeout`]).
    CheckTimeouts,
    /// Nothing for the health check to do: the phase carries on.
    Healthy,
}

/// What the health check sees.
pub struct HealthInputs<'a> {
    pub phase: Lifecycle,
    /// The conditions the Machine holds.
    pub machine_conditions: &'a [Value],
    /// Its Node, None when there is none.
    pub node: Option<&'a NodeView>,
    /// The conditions that make a Node unhealthy when True (besides Ready not True).
    pub unhealthy_if_true: &'a [String],
    /// `lastOperation` is a Create that did not succeed yet.
    pub creating: bool,
}

/// The health verdict (upstream `reconcileMachineHealth`, one decision per pass).
pub fn health(inputs: &HealthInputs<'_>) -> Outcome {
    let phase = inputs.phase;
    let Some(node) = inputs.node else {
        if phase == Lifecycle::Running && !inputs.machine_conditions.is_empty() {
            return Outcome::NodeGone;
        }
        return Outcome::CheckTimeouts;
    };
    if node.deleting && !node.not_managed {
        return Outcome::DeleteMachine;
    }
    if conditions_changed(inputs.machine_conditions, &node.conditions) {
        return Outcome::CopyConditions;
    }
    let healthy = is_healthy(&node.conditions, inputs.unhealthy_if_true);
    if healthy
        && phase != Lifecycle::Running
        && !(phase == Lifecycle::Pending && node.critical_taint)
    {
        return Outcome::Joined {
            first: inputs.creating,
        };
    }
    if !healthy && phase == Lifecycle::Running {
        return Outcome::Unhealthy;
    }
    if !healthy || phase == Lifecycle::Pending {
        return Outcome::CheckTimeouts;
    }
    Outcome::Healthy
}

/// What the timeouts decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Pending past the creation timeout, or Unknown past the health timeout: `Failed`.
    Expired(Phase),
    /// Not yet: look again after this.
    Recheck(Duration),
    /// Neither Pending nor Unknown: no timeout runs.
    None,
}

/// Pending for `elapsed` since the creation against the creation timeout, or Unknown for
/// `elapsed` since the last status update against the health timeout (unless disabled).
pub fn timeout(
    phase: Lifecycle,
    elapsed: Duration,
    limit: Duration,
    disabled: bool,
    recheck: Duration,
) -> Timeout {
    match phase {
        Lifecycle::Pending if elapsed > limit => Timeout::Expired(Phase::Pending),
        Lifecycle::Unknown if !disabled && elapsed > limit => Timeout::Expired(Phase::Unknown),
        Lifecycle::Pending | Lifecycle::Unknown => Timeout::Recheck(recheck.min(limit)),
        _ => Timeout::None,
    }
}

/// Upstream `isHealthy`: Ready is True and none of the listed conditions is True.
pub fn is_healthy(conditions: &[Value], unhealthy_if_true: &[String]) -> bool {
    let status_of = |t: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == t)
            .and_then(|c| c["status"].as_str())
            .map(str::to_owned)
    };
    if conditions.is_empty() || status_of("Ready").as_deref() != Some("True") {
        return false;
    }
    unhealthy_if_true
        .iter()
        .all(|t| status_of(t).as_deref() != Some("True"))
}

/// Conditions differ by type, status and reason (heartbeat times are ignored).
pub fn conditions_changed(machine: &[Value], node: &[Value]) -> bool {
    let key = |cs: &[Value]| {
        let mut v: Vec<(String, String, String)> = cs
            .iter()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or("").to_owned();
                (s("type"), s("status"), s("reason"))
            })
            .collect();
        v.sort();
        v
    };
    key(machine) != key(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn phases_parse_once() {
        assert_eq!(Lifecycle::parse(""), Lifecycle::New);
        assert_eq!(Lifecycle::parse("Pending"), Lifecycle::Pending);
        assert_eq!(
            Lifecycle::parse("CrashLoopBackOff"),
            Lifecycle::CrashLoopBackOff
        );
        assert_eq!(Lifecycle::parse("Terminating"), Lifecycle::Other);
        assert_eq!(Lifecycle::parse("Available"), Lifecycle::Other);
    }

    #[test]
    fn healthy_needs_ready_and_no_bad_condition() {
        let list = vec!["DiskPressure".to_owned()];
        let ready = json!({"type": "Ready", "status": "True"});
        let pressure = json!({"type": "DiskPressure", "status": "True"});
        assert!(is_healthy(std::slice::from_ref(&ready), &list));
        assert!(!is_healthy(&[ready.clone(), pressure], &list));
        assert!(!is_healthy(
            &[json!({"type": "Ready", "status": "Unknown"})],
            &list
        ));
        assert!(!is_healthy(&[], &list));
    }

    #[test]
    fn conditions_compare_without_heartbeats() {
        let a = vec![
            json!({"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": "1"}),
        ];
        let b = vec![
            json!({"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": "2"}),
        ];
        let c = vec![json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady"})];
        assert!(!conditions_changed(&a, &b));
        assert!(conditions_changed(&a, &c));
        assert!(conditions_changed(&[], &a));
    }

    fn verdict(
        phase: Lifecycle,
        machine: &[Value],
        node: Option<&NodeView>,
        creating: bool,
    ) -> Outcome {
        health(&HealthInputs {
            phase,
            machine_conditions: machine,
            node,
            unhealthy_if_true: &["DiskPressure".to_owned()],
            creating,
        })
    }

    fn node(conditions: &[Value]) -> NodeView {
        NodeView {
            conditions: conditions.to_vec(),
            ..NodeView::default()
        }
    }

    #[test]
    fn a_missing_node_makes_a_running_machine_unknown_and_others_wait_for_their_timeout() {
        let ready = [json!({"type": "Ready", "status": "True"})];
        assert_eq!(
            verdict(Lifecycle::Running, &ready, None, false),
            Outcome::NodeGone
        );
        assert_eq!(
            verdict(Lifecycle::Running, &[], None, false),
            Outcome::CheckTimeouts,
            "never saw a Node: no conditions to lose"
        );
        assert_eq!(
            verdict(Lifecycle::Pending, &ready, None, true),
            Outcome::CheckTimeouts
        );
    }

    #[test]
    fn a_deleted_node_takes_its_machine_before_anything_else() {
        let mut deleting = node(&[]);
        deleting.deleting = true;
        assert_eq!(
            verdict(Lifecycle::Running, &[], Some(&deleting), false),
            Outcome::DeleteMachine
        );
        deleting.not_managed = true;
        assert_eq!(
            verdict(Lifecycle::Running, &[], Some(&deleting), false),
            Outcome::Unhealthy,
            "a Node marked not-managed-by-mcm is not followed, only its health counts"
        );
    }

    #[test]
    fn new_node_conditions_are_copied_first() {
        let ready = [json!({"type": "Ready", "status": "True", "reason": "KubeletReady"})];
        assert_eq!(
            verdict(Lifecycle::Pending, &[], Some(&node(&ready)), true),
            Outcome::CopyConditions
        );
    }

    #[test]
    fn a_healthy_node_makes_its_machine_running_unless_critical_components_are_not_ready() {
        let ready = [json!({"type": "Ready", "status": "True"})];
        let healthy = node(&ready);
        assert_eq!(
            verdict(Lifecycle::Pending, &ready, Some(&healthy), true),
            Outcome::Joined { first: true }
        );
        assert_eq!(
            verdict(Lifecycle::Unknown, &ready, Some(&healthy), false),
            Outcome::Joined { first: false }
        );
        assert_eq!(
            verdict(Lifecycle::Failed, &ready, Some(&healthy), false),
            Outcome::Joined { first: false },
            "a Failed machine whose Node recovers re-joins, as upstream"
        );
        assert_eq!(
            verdict(Lifecycle::Running, &ready, Some(&healthy), false),
            Outcome::Healthy
        );
        let mut tainted = healthy.clone();
        tainted.critical_taint = true;
        assert_eq!(
            verdict(Lifecycle::Pending, &ready, Some(&tainted), true),
            Outcome::CheckTimeouts
        );
        assert_eq!(
            verdict(Lifecycle::Unknown, &ready, Some(&tainted), false),
            Outcome::Joined { first: false },
            "the taint holds back only the first Running"
        );
    }

    #[test]
    fn an_unhealthy_node_makes_a_running_machine_unknown_then_the_timeout_decides() {
        let sick = [
            json!({"type": "Ready", "status": "True"}),
            json!({"type": "DiskPressure", "status": "True"}),
        ];
        let view = node(&sick);
        assert_eq!(
            verdict(Lifecycle::Running, &sick, Some(&view), false),
            Outcome::Unhealthy
        );
        assert_eq!(
            verdict(Lifecycle::Unknown, &sick, Some(&view), false),
            Outcome::CheckTimeouts
        );
        assert_eq!(
            verdict(Lifecycle::Failed, &sick, Some(&view), false),
            Outcome::CheckTimeouts
        );
    }

    #[test]
    fn timeouts_fail_pending_and_unknown_machines_only_once_expired() {
        let minute = Duration::from_secs(60);
        let limit = Duration::from_secs(600);
        let long = Duration::from_secs(601);
        assert_eq!(
            timeout(Lifecycle::Pending, long, limit, false, minute),
            Timeout::Expired(Phase::Pending)
        );
        assert_eq!(
            timeout(Lifecycle::Pending, minute, limit, false, minute),
            Timeout::Recheck(minute)
        );
        assert_eq!(
            timeout(
                Lifecycle::Pending,
                Duration::from_secs(1),
                Duration::from_secs(5),
                false,
                minute
            ),
            Timeout::Recheck(Duration::from_secs(5))
        );
        assert_eq!(
            timeout(Lifecycle::Unknown, long, limit, false, minute),
            Timeout::Expired(Phase::Unknown)
        );
        assert_eq!(
            timeout(Lifecycle::Unknown, long, limit, true, minute),
            Timeout::Recheck(minute),
            "disableHealthTimeout"
        );
        assert_eq!(
            timeout(Lifecycle::Running, long, limit, false, minute),
            Timeout::None
        );
    }
}
