//! An InstancePool pass as a pure function of what the pool sees. From the pool, its
//! Instances, their Nodes, the credentials and join checks and the time, [`plan`] decides the
//! Instances to create, the one member to remove (scale-down or the replacement of an unhealthy
//! Node, chosen by [`super::super::health`]), the Nodes to uncordon, the conditions and the
//! Events. The executor (`pool::execute`) carries the plan out; what only the drain can tell
//! (still draining, drained, given up on an unreachable Node) comes back through
//! [`Plan::report`], and [`next_status`] makes the status to write. No I/O here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ingot_api::equinix::{
    Instance, InstancePool, InstancePoolStatus, instance_status, pool_status,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::super::budget::MaxUnhealthy;
use super::super::credentials::{CredentialsError, SecretLocation};
use super::super::health::{self, Member, NodeFacts, Replacement, ScaleDown};
use super::super::join::JoinError;
use super::super::removal::{DRAIN_CONDITION, DRAIN_POLL, REMEDIATION_CONDITION, drain_timeout};
use super::super::{BACKEND_CONDITION, CREDENTIALS_CONDITION, JOIN_CONDITION, update_condition};
use super::{EXPECTATION_POLL, MAX_CREATES_PER_PASS, RESYNC};
use crate::duration::parse_go_duration;

/// Event reason of the removal of an unhealthy member.
pub(crate) const REPLACING_UNHEALTHY_NODE: &str = "ReplacingUnhealthyNode";
/// Reason of [`BACKEND_CONDITION`] on a pool with `spec.inventorySelector`.
pub(crate) const INVENTORIES: &str = "Inventories";
/// Event reason of the removal of a member on scale-down.
const INSTANCE_REMOVED: &str = "InstanceRemoved";
/// How soon a scale-down held for the control plane looks again.
const CONTROL_PLANE_HELD_RETRY: Duration = Duration::from_secs(15);
/// How soon a replacement waiting for another change to finish looks again.
const IN_FLIGHT_RETRY: Duration = Duration::from_secs(5);

/// What a pass of the pool reads: the pool, its Instances (those being deleted included), their
/// Nodes by name, the two checks the pool reports, and the time.
pub(crate) struct Observed<'a> {
    pub pool: &'a InstancePool,
    pub instances: &'a [Instance],
    pub nodes: &'a BTreeMap<String, Node>,
    /// Whether the Equinix credentials Secret (at `secret`) is usable.
    pub credentials: Result<(), CredentialsError>,
    pub secret: &'a SecretLocation,
    /// The address new nodes join the cluster at, or what is missing.
    pub join: Result<String, JoinError>,
    pub now: Timestamp,
}

/// A condition of the pool as a pass decides it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Condition {
    pub type_: &'static str,
    pub ok: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Condition {
    fn new(type_: &'static str, ok: bool, reason: &'static str, message: String) -> Self {
        Self {
            type_,
            ok,
            reason,
            message,
        }
    }
}

/// An Event on the pool.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Why a member is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    ScaleDown,
    /// Its Node has been unhealthy for longer than `nodeCleanupWaitInterval`.
    Replacement,
}

impl Cause {
    /// The reason of the removal's Event (a Warning for a replacement).
    pub fn reason(self) -> &'static str {
        match self {
            Cause::ScaleDown => INSTANCE_REMOVED,
            Cause::Replacement => REPLACING_UNHEALTHY_NODE,
        }
    }
}

/// The member to remove now: cordon and drain its Node (if it has one) within `drain_timeout`,
/// then delete the Instance, whose finalizer deletes the server and the Node.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Removal {
    pub member: String,
    pub node: Option<Node>,
    pub cause: Cause,
    /// Why, in words, for the drain's condition and the Event.
    pub why: String,
    pub drain_timeout: Duration,
}

/// A Node cordoned or being drained by ingot that is no longer to be removed (it recovered, or
/// the pool grew back).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Uncordon {
    pub node: Node,
    /// ingot's cordon: it is lifted, with a condition and an Event. Otherwise the cordon is a
    /// person's and stays; only the drain's start is forgotten.
    pub ours: bool,
}

/// What one pass does, in the order the executor does it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    /// `CredentialsReady` and `JoinReady`, set first (their Events come first).
    pub checks: Vec<Condition>,
    /// How many Instances to create (at most [`MAX_CREATES_PER_PASS`]).
    pub create: usize,
    pub removal: Option<Removal>,
    pub uncordon: Vec<Uncordon>,
    /// Conditions of the scale-down or replacement decision.
    pub conditions: Vec<Condition>,
    /// Why replacements are blocked (labels of the replacements-blocked metric).
    pub blocked: Vec<&'static str>,
    /// The member being removed: its cordon stays.
    pub target: Option<String>,
    pub requeue: Option<Duration>,
}

/// How the removal went, as the executor saw it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Removed {
    /// The drain is not finished; `blocked` when a condition must show it (a refusal, or the
    /// deadline passed on a reachable Node).
    Draining { message: String, blocked: bool },
    /// The Instance was deleted (or was gone); `timed_out` tells why a drain was given up on.
    Deleted { timed_out: Option<String> },
}

/// What a carried-out plan writes and says.
#[derive(Debug, PartialEq)]
pub(crate) struct Report {
    pub checks: Vec<Condition>,
    /// The Instances created.
    pub created: Vec<String>,
    /// The other conditions, in the order they are set (the last of a type wins).
    pub conditions: Vec<Condition>,
    /// The Events that are not a condition's change.
    pub events: Vec<Note>,
    /// The Instance deleted in this pass.
    pub deleted: Option<String>,
    pub requeue: Duration,
}

/// The pass for what the pool sees.
pub(crate) fn plan(seen: &Observed<'_>) -> Plan {
    let mut plan = Plan {
        checks: checks(seen),
        ..Plan::default()
    };
    let members: Vec<Member> = seen
        .instances
        .iter()
        .map(|i| member(i, seen.nodes.get(&i.name_any())))
        .collect();
    let count = requested(seen.pool);
    let have = i64::try_from(members.iter().filter(|m| !m.deleting).count()).unwrap_or(i64::MAX);
    if have < count {
        let create = count.min(have.saturating_add(MAX_CREATES_PER_PASS)) - have;
        plan.create = usize::try_from(create).unwrap_or(0);
        if have + create < count {
            // The rest in the next pass, once the cache shows these.
            plan.look_again(EXPECTATION_POLL);
        }
    } else if have > count {
        plan.scale_down(seen, &members, count);
    } else {
        plan.remediate(seen, &members);
    }
    plan.uncordon = uncordons(seen, &members, plan.target.as_deref());
    plan
}

/// The namespace of the Inventories a pool with `spec.inventorySelector` draws from.
fn on_premises(pool: &InstancePool) -> Option<&str> {
    pool.spec
        .inventory_selector
        .as_ref()
        .map(|_| pool.spec.inventory_namespace.as_deref().unwrap_or_default())
}

/// The fields set on a pool over Inventories that only Equinix Metal reads, and which are
/// therefore ignored (the API server refuses the others: `plan`, `metro`, billing, spot...).
/// An empty value counts as unset.
fn not_read_on_premises(pool: &InstancePool) -> Vec<&'static str> {
    let spec = &pool.spec;
    let text = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
    let list = |v: &Option<Vec<String>>| v.as_ref().is_some_and(|v| !v.is_empty());
    [
        ("spec.ipxeScriptUrl", text(&spec.ipxe_script_url)),
        ("spec.isoUrl", text(&spec.iso_url)),
        ("spec.singleBoot", spec.single_boot.is_some()),
        ("spec.customData", text(&spec.custom_data)),
        ("spec.usersshKeys", list(&spec.user_ssh_keys)),
        ("spec.projectsshKeys", list(&spec.project_ssh_keys)),
        ("spec.nosshKeys", spec.no_ssh_keys == Some(true)),
        (
            "spec.features",
            spec.features.as_ref().is_some_and(|f| !f.is_empty()),
        ),
        ("spec.facility", list(&spec.facility)),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect()
}

/// `spec.count`, never below zero.
fn requested(pool: &InstancePool) -> i64 {
    pool.spec.count.unwrap_or(0).max(0)
}

/// Credentials (or, on premises, where the servers come from) and join parameters are reported
/// on the pool; Instances wait for them.
fn checks(seen: &Observed<'_>) -> Vec<Condition> {
    let backend = match on_premises(seen.pool) {
        Some(namespace) => {
            let unread = not_read_on_premises(seen.pool);
            Condition::new(
                BACKEND_CONDITION,
                true,
                INVENTORIES,
                format!(
                    "servers are Inventories of namespace {namespace} matching the pool's inventorySelector, their addresses from AddressPool {namespace}/{}; the Equinix Metal credentials are not used{}",
                    seen.pool.spec.address_pool.as_deref().unwrap_or_default(),
                    if unread.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", nor {}, which only Equinix Metal reads",
                            unread.join(", ")
                        )
                    }
                ),
            )
        }
        None => credentials(seen),
    };
    let join = match &seen.join {
        Ok(address) => Condition::new(
            JOIN_CONDITION,
            true,
            "Found",
            format!("new nodes join the cluster at {address}"),
        ),
        Err(problem) => {
            Condition::new(JOIN_CONDITION, false, problem.reason(), problem.to_string())
        }
    };
    vec![backend, join]
}

fn credentials(seen: &Observed<'_>) -> Condition {
    match &seen.credentials {
        Ok(()) => Condition::new(
            CREDENTIALS_CONDITION,
            true,
            "Found",
            format!("Secret {} holds the Equinix Metal credentials", seen.secret),
        ),
        Err(problem) => Condition::new(
            CREDENTIALS_CONDITION,
            false,
            problem.reason(),
            problem.to_string(),
        ),
    }
}

/// A member of the pool as the decisions of [`health`] need it.
fn member(instance: &Instance, node: Option<&Node>) -> Member {
    Member {
        name: instance.name_any(),
        managed: managed(instance),
        deleting: instance.metadata.deletion_timestamp.is_some(),
        created: instance.metadata.creation_timestamp.as_ref().map(|t| t.0),
        skip: instance
            .annotations()
            .contains_key(health::SKIP_REMEDIATION_ANNOTATION),
        node: node.map(NodeFacts::of),
    }
}

fn managed(instance: &Instance) -> bool {
    instance
        .status
        .as_ref()
        .is_some_and(|s| s.status == instance_status::MANAGED)
}

impl Plan {
    fn condition(&mut self, type_: &'static str, ok: bool, reason: &'static str, message: String) {
        self.conditions
            .push(Condition::new(type_, ok, reason, message));
    }

    fn look_again(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    fn remove(&mut self, seen: &Observed<'_>, member: String, cause: Cause, why: String) {
        self.target = Some(member.clone());
        self.removal = Some(Removal {
            node: seen.nodes.get(&member).cloned(),
            member,
            cause,
            why,
            drain_timeout: drain_timeout(seen.pool),
        });
        // Drained or not, deleted or not: the drain and the deletion are looked at again soon.
        self.look_again(DRAIN_POLL);
    }

    /// Scale-down: the next member to go, one at a time.
    fn scale_down(&mut self, seen: &Observed<'_>, members: &[Member], count: i64) {
        let live: Vec<Member> = members.iter().filter(|m| !m.deleting).cloned().collect();
        let decision = match members.iter().find(|m| m.deleting) {
            Some(member) => Some(ScaleDown::InFlight {
                member: member.name.clone(),
            }),
            None => health::scale_down(&live),
        };
        match decision {
            None => {}
            Some(ScaleDown::InFlight { member }) => {
                // One at a time: wait for the Instance being removed to be gone.
                self.target = Some(member);
                self.look_again(DRAIN_POLL);
            }
            Some(ScaleDown::HeldForControlPlane { member, unhealthy }) => {
                self.condition(
                    DRAIN_CONDITION,
                    false,
                    "ControlPlaneHeld",
                    format!(
                        "scale-down to {count} would remove control-plane Node {member} while {unhealthy} is unhealthy: waiting"
                    ),
                );
                self.look_again(CONTROL_PLANE_HELD_RETRY);
            }
            Some(ScaleDown::Remove { member, .. }) => {
                let why = format!("to scale down to {count}");
                self.remove(seen, member, Cause::ScaleDown, why);
            }
        }
    }

    /// Health replacement: at most one unhealthy Node at a time, within `maxUnhealthy`.
    fn remediate(&mut self, seen: &Observed<'_>, members: &[Member]) {
        // As upstream: no nodeCleanupWaitInterval, no replacement.
        let Some(wait) = seen
            .pool
            .spec
            .node_cleanup_wait_interval
            .as_deref()
            .and_then(parse_go_duration)
        else {
            return;
        };
        let not_ready = members
            .iter()
            .any(|m| m.node.as_ref().is_some_and(|n| !n.ready));
        let max = match max_unhealthy(seen.pool) {
            Ok(max) => max,
            Err(text) => {
                if not_ready {
                    self.blocked.push("invalid_max_unhealthy");
                }
                self.condition(
                    REMEDIATION_CONDITION,
                    false,
                    "InvalidMaxUnhealthy",
                    format!(
                        "spec.maxUnhealthy {text:?} is neither a count nor a percentage such as 40%: nothing is replaced until it is fixed"
                    ),
                );
                return;
            }
        };
        // Look again when a NotReady Node will have waited long enough.
        if not_ready {
            self.look_again((wait / 4).clamp(Duration::from_secs(1), Duration::from_secs(30)));
        }
        let decision = health::replacement(members, wait, max, seen.now);
        self.replacement(seen, members, decision, wait, max);
    }

    /// What the replacement decision means for this pass.
    fn replacement(
        &mut self,
        seen: &Observed<'_>,
        members: &[Member],
        decision: Replacement,
        wait: Duration,
        max: MaxUnhealthy,
    ) {
        match decision {
            Replacement::Healthy => self.condition(
                REMEDIATION_CONDITION,
                true,
                "WithinBudget",
                format!("no Node has been NotReady for longer than {wait:?}; maxUnhealthy {max}"),
            ),
            Replacement::TooManyUnhealthy { unhealthy, allowed } => {
                self.blocked.push("too_many_unhealthy");
                self.condition(
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
                    self.target = Some(member);
                }
                self.look_again(IN_FLIGHT_RETRY);
            }
            Replacement::AllExempt { exempt } => self.all_exempt(&exempt),
            Replacement::Replace {
                member,
                down_for,
                control_plane,
            } => {
                self.condition(
                    REMEDIATION_CONDITION,
                    true,
                    "Replacing",
                    format!("replacing {member}; maxUnhealthy {max}"),
                );
                let why = replacement_why(seen.pool, &member, down_for, control_plane);
                self.remove(seen, member, Cause::Replacement, why);
            }
        }
    }

    /// Unhealthy members, none of which may be replaced.
    fn all_exempt(&mut self, exempt: &[(String, &'static str)]) {
        let reasons: BTreeSet<&'static str> =
            exempt.iter().map(|(_, why)| exemption_label(why)).collect();
        self.blocked.extend(reasons);
        let list: Vec<String> = exempt
            .iter()
            .map(|(m, why)| format!("{m} ({why})"))
            .collect();
        self.condition(
            REMEDIATION_CONDITION,
            true,
            "Exempt",
            format!("unhealthy but not to be replaced: {}", list.join(", ")),
        );
    }

    /// What the pass writes and says once carried out: the removal's conditions and Events as
    /// the drain went, then the uncordons'.
    pub(crate) fn report(self, created: Vec<String>, removed: Option<Removed>) -> Report {
        let mut conditions = self.conditions;
        let mut events = Vec::new();
        let mut deleted = None;
        if let (Some(removal), Some(removed)) = (&self.removal, removed) {
            match removed {
                Removed::Draining { message, blocked } => {
                    if blocked {
                        conditions.push(Condition::new(
                            DRAIN_CONDITION,
                            false,
                            "DrainBlocked",
                            message,
                        ));
                    }
                }
                Removed::Deleted { timed_out } => {
                    events.extend(timed_out.map(|message| Note {
                        warning: true,
                        reason: "DrainTimeout",
                        message,
                    }));
                    if removal.node.is_some() {
                        conditions.push(Condition::new(
                            DRAIN_CONDITION,
                            true,
                            "Drained",
                            format!("Node {} was drained", removal.member),
                        ));
                    }
                    events.push(Note {
                        warning: removal.cause == Cause::Replacement,
                        reason: removal.cause.reason(),
                        message: format!("removed Instance {}: {}", removal.member, removal.why),
                    });
                    deleted = Some(removal.member.clone());
                }
            }
        }
        for uncordon in self.uncordon.iter().filter(|u| u.ours) {
            let node = uncordon.node.name_any();
            conditions.push(Condition::new(
                DRAIN_CONDITION,
                true,
                "NodeRecovered",
                format!("Node {node} is Ready again and was uncordoned; it stays"),
            ));
            events.push(Note {
                warning: false,
                reason: "NodeRecovered",
                message: format!("Node {node} is Ready again: uncordoned, no longer removed"),
            });
        }
        Report {
            checks: self.checks,
            created,
            conditions,
            events,
            deleted,
            requeue: self.requeue.unwrap_or(RESYNC).min(RESYNC),
        }
    }
}

/// `spec.maxUnhealthy`, or the text that is neither a count nor a percentage.
fn max_unhealthy(pool: &InstancePool) -> Result<MaxUnhealthy, &str> {
    match &pool.spec.max_unhealthy {
        None => Ok(MaxUnhealthy::default()),
        Some(IntOrString::Int(n)) => Ok(MaxUnhealthy::Count(u32::try_from(*n).unwrap_or(0))),
        Some(IntOrString::String(text)) => MaxUnhealthy::parse(text).ok_or(text.as_str()),
    }
}

fn replacement_why(
    pool: &InstancePool,
    member: &str,
    down_for: Duration,
    control_plane: bool,
) -> String {
    format!(
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
    )
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

/// Nodes cordoned or being drained by ingot that are Ready and no longer to be removed.
fn uncordons(seen: &Observed<'_>, members: &[Member], target: Option<&str>) -> Vec<Uncordon> {
    members
        .iter()
        .filter(|m| !m.deleting && target != Some(m.name.as_str()))
        .filter_map(|m| {
            let node = seen.nodes.get(&m.name)?;
            let facts = NodeFacts::of(node);
            ((facts.cordoned_by_us || facts.draining) && facts.ready).then(|| Uncordon {
                node: node.clone(),
                ours: facts.cordoned_by_us,
            })
        })
        .collect()
}

/// The status after the pass, and the Events to record: each condition whose status or
/// reason changed, in order (the checks', the creates', the others', then the rest).
pub(crate) fn next_status(
    pool: &InstancePool,
    instances: &[Instance],
    report: &Report,
) -> (InstancePoolStatus, Vec<Note>) {
    let generation = pool.metadata.generation;
    let mut status = pool.status.clone().unwrap_or_default();
    let mut events = Vec::new();
    set_conditions(&mut status, &report.checks, generation, &mut events);
    // The original kept the join token in the clear here; ingot never does.
    status.token = None;
    events.extend(report.created.iter().map(|name| Note {
        warning: false,
        reason: "InstanceCreated",
        message: format!("created Instance {name}"),
    }));
    set_conditions(&mut status, &report.conditions, generation, &mut events);
    events.extend(report.events.iter().cloned());

    // Instances being deleted do not count as present.
    let present: Vec<&Instance> = instances
        .iter()
        .filter(|i| i.metadata.deletion_timestamp.is_none())
        .filter(|i| report.deleted.as_deref() != Some(i.name_any().as_str()))
        .collect();
    let count = requested(pool);
    let ready = i64::try_from(present.iter().filter(|i| managed(i)).count()).unwrap_or(i64::MAX);
    let present = present.len().saturating_add(report.created.len());
    status.ready = ready;
    status.requested = count;
    status.needed = count - i64::try_from(present).unwrap_or(i64::MAX);
    status.status = pool_state(count, ready, status.needed).to_owned();
    status.observed_generation = generation;
    (status, events)
}

fn set_conditions(
    status: &mut InstancePoolStatus,
    conditions: &[Condition],
    generation: Option<i64>,
    events: &mut Vec<Note>,
) {
    for condition in conditions {
        let (_, flipped) = update_condition(
            &mut status.conditions,
            condition.type_,
            condition.ok,
            condition.reason,
            &condition.message,
            generation,
        );
        if flipped {
            events.push(Note {
                warning: !condition.ok,
                reason: condition.reason,
                message: condition.message.clone(),
            });
        }
    }
}

/// The original's status strings: `ready` once every requested Instance is managed,
/// `tokenReady` while Instances are to be created, `cleanupNodes` while some are to go,
/// `submitted` otherwise.
fn pool_state(count: i64, ready: i64, needed: i64) -> &'static str {
    if needed > 0 {
        pool_status::TOKEN_READY
    } else if needed < 0 {
        pool_status::CLEANUP_NODES
    } else if ready == count {
        pool_status::READY
    } else {
        pool_status::SUBMITTED
    }
}
