//! The InstancePool's plan, without a cluster: what a pass creates, removes, uncordons, sets
//! and says, from the pool, its Instances and their Nodes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use ingot_api::equinix::{
    Instance, InstancePool, InstancePoolSpec, InstanceSpec, InstanceStatus, instance_status,
    pool_status,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::super::credentials::{CredentialsError, SecretLocation};
use super::super::drain::CORDONED_BY_ANNOTATION;
use super::super::removal::{DRAIN_CONDITION, DRAIN_POLL, REMEDIATION_CONDITION};
use super::super::{BACKEND_CONDITION, CREDENTIALS_CONDITION, JOIN_CONDITION};
use super::plan::{
    Cause, Condition, INVENTORIES, Note, Observed, Plan, REPLACING_UNHEALTHY_NODE, Removed,
    next_status, plan,
};
use super::{EXPECTATION_POLL, MAX_CREATES_PER_PASS, RESYNC};

fn now() -> Timestamp {
    "2026-03-01T12:00:00Z".parse().unwrap()
}

fn ago(secs: i64) -> Time {
    Time(now() - SignedDuration::from_secs(secs))
}

fn pool(count: i64) -> InstancePool {
    let mut pool = InstancePool::new(
        "p",
        InstancePoolSpec {
            count: Some(count),
            ..InstancePoolSpec::default()
        },
    );
    pool.metadata.generation = Some(1);
    pool
}

/// A pool that replaces Nodes NotReady for over a minute.
fn healing_pool(count: i64) -> InstancePool {
    let mut pool = pool(count);
    pool.spec.node_cleanup_wait_interval = Some("1m".into());
    pool
}

/// A managed member created `age` seconds ago.
fn member(name: &str, age: i64) -> Instance {
    let mut instance = Instance::new(name, InstanceSpec::default());
    instance.metadata.creation_timestamp = Some(ago(age));
    instance.status = Some(InstanceStatus {
        status: instance_status::MANAGED.into(),
        ..InstanceStatus::default()
    });
    instance
}

fn deleting(mut instance: Instance) -> Instance {
    instance.metadata.deletion_timestamp = Some(ago(1));
    instance
}

/// A Node Ready (or not) since `since` seconds ago.
fn node(name: &str, ready: bool, since: i64) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "lastTransitionTime": ago(since).0.to_string(),
        }]},
    }))
    .unwrap()
}

fn cordoned_by_ingot(mut node: Node) -> Node {
    node.metadata.annotations = Some(BTreeMap::from([(
        CORDONED_BY_ANNOTATION.to_owned(),
        "ingot".to_owned(),
    )]));
    node.spec.get_or_insert_default().unschedulable = Some(true);
    node
}

fn nodes(list: Vec<Node>) -> BTreeMap<String, Node> {
    list.into_iter()
        .map(|n| (n.metadata.name.clone().unwrap(), n))
        .collect()
}

fn secret() -> SecretLocation {
    SecretLocation {
        namespace: "harvester-system".into(),
        name: "equinix".into(),
    }
}

fn plan_for(pool: &InstancePool, instances: &[Instance], nodes: &BTreeMap<String, Node>) -> Plan {
    let secret = secret();
    plan(&Observed {
        pool,
        instances,
        nodes,
        credentials: Ok(()),
        secret: &secret,
        join: Ok("192.0.2.44".into()),
        now: now(),
    })
}

#[test]
fn a_pool_short_of_instances_creates_at_most_ten_per_pass() {
    let plan = plan_for(&pool(25), &[], &BTreeMap::new());
    assert_eq!(plan.create, 10);
    assert_eq!(MAX_CREATES_PER_PASS, 10);
    // The rest once the cache shows these.
    assert_eq!(plan.requeue, Some(EXPECTATION_POLL));
    assert_eq!(plan.removal, None);

    // One being deleted does not count: two to make, all in this pass.
    let instances = [member("p-a", 60), deleting(member("p-b", 60))];
    let plan = plan_for(&pool(3), &instances, &BTreeMap::new());
    assert_eq!(plan.create, 2);
    assert_eq!(plan.requeue, None);
    let report = plan.report(vec!["p-c".into(), "p-d".into()], None);
    assert_eq!(report.requeue, RESYNC);
    let (status, events) = next_status(&pool(3), &instances, &report);
    assert_eq!((status.requested, status.ready, status.needed), (3, 1, 0));
    assert_eq!(status.status, pool_status::SUBMITTED);
    let created: Vec<&str> = events
        .iter()
        .filter(|e| e.reason == "InstanceCreated")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(created, ["created Instance p-c", "created Instance p-d"]);
}

/// A pool over Inventories is counted as any pool, reports where its servers come from instead
/// of the Equinix credentials, and does not need them.
#[test]
fn a_pool_over_inventories_needs_no_equinix_credentials() {
    let mut on_premises = pool(3);
    on_premises.spec.inventory_selector = Some(Default::default());
    on_premises.spec.inventory_namespace = Some("metal".into());
    on_premises.spec.address_pool = Some("nodes".into());
    let secret = secret();
    let seen = Observed {
        pool: &on_premises,
        instances: &[],
        nodes: &BTreeMap::new(),
        credentials: Err(CredentialsError::SecretNotFound {
            secret: secret.to_string(),
        }),
        secret: &secret,
        join: Ok("192.0.2.44".into()),
        now: now(),
    };
    let plan = plan(&seen);
    assert_eq!(plan.create, 3);
    let checks: Vec<(&str, bool, &str)> = plan
        .checks
        .iter()
        .map(|c| (c.type_, c.ok, c.reason))
        .collect();
    assert_eq!(
        checks,
        [
            (BACKEND_CONDITION, true, INVENTORIES),
            (JOIN_CONDITION, true, "Found")
        ]
    );
    assert!(
        plan.checks[0].message.contains("namespace metal")
            && plan.checks[0].message.contains("AddressPool metal/nodes"),
        "{}",
        plan.checks[0].message
    );
    assert!(
        !plan.checks[0].message.contains("only Equinix Metal reads"),
        "{}",
        plan.checks[0].message
    );
    // The Equinix-only fields it carries are named as not read.
    let mut carrying = on_premises.clone();
    carrying.spec.ipxe_script_url = Some("http://boot.example/install.ipxe".into());
    carrying.spec.single_boot = Some(true);
    carrying.spec.user_ssh_keys = Some(vec!["key-id".into()]);
    carrying.spec.iso_url = Some(String::new());
    let seen = Observed {
        pool: &carrying,
        ..seen
    };
    let message = super::plan::plan(&seen).checks[0].message.clone();
    assert!(
        message.ends_with(
            ", nor spec.ipxeScriptUrl, spec.singleBoot, spec.usersshKeys, which only Equinix Metal reads"
        ),
        "{message}"
    );
    // Its members draw from the same Inventories, of the size it asks for, and boot and are
    // wiped as it chose.
    on_premises.spec.boot_media = Some("cd".into());
    on_premises.spec.wipe_policy = Some("metadata".into());
    let minimum = ingot_api::equinix::InventoryMinimum {
        cores: Some(32),
        ..Default::default()
    };
    on_premises.spec.inventory_minimum = Some(minimum.clone());
    let member_spec = super::new_instance(&on_premises).spec;
    assert_eq!(member_spec.inventory_namespace.as_deref(), Some("metal"));
    assert_eq!(member_spec.address_pool.as_deref(), Some("nodes"));
    assert_eq!(member_spec.boot_media.as_deref(), Some("cd"));
    assert_eq!(member_spec.wipe_policy.as_deref(), Some("metadata"));
    assert_eq!(member_spec.inventory_minimum, Some(minimum));
    // One too many: the scale-down removes one, as for any pool.
    let members = vec![
        member("p-a", 60),
        member("p-b", 60),
        member("p-c", 60),
        member("p-d", 60),
    ];
    let plan = plan_for(&on_premises, &members, &BTreeMap::new());
    assert_eq!(plan.create, 0);
    assert!(plan.removal.is_some());
    // The same pool without the selector is an Equinix pool and reports the credentials.
    let plan = plan_for(&pool(3), &[], &BTreeMap::new());
    assert_eq!(plan.create, 3);
    assert!(plan.checks.iter().all(|c| c.type_ != BACKEND_CONDITION));
    assert!(plan.checks.iter().any(|c| c.type_ == CREDENTIALS_CONDITION));
}

#[test]
fn the_checks_come_first_and_only_a_change_is_news() {
    let pool = pool(0);
    let secret = secret();
    let seen = Observed {
        pool: &pool,
        instances: &[],
        nodes: &BTreeMap::new(),
        credentials: Err(CredentialsError::SecretNotFound {
            secret: secret.to_string(),
        }),
        secret: &secret,
        join: Ok("192.0.2.44".into()),
        now: now(),
    };
    let plan = plan(&seen);
    assert_eq!(plan.checks[0].type_, CREDENTIALS_CONDITION);
    assert_eq!(
        (plan.checks[0].ok, plan.checks[0].reason),
        (false, "SecretNotFound")
    );
    assert_eq!(
        plan.checks[1],
        Condition {
            type_: JOIN_CONDITION,
            ok: true,
            reason: "Found",
            message: "new nodes join the cluster at 192.0.2.44".into(),
        }
    );
    let report = plan.report(Vec::new(), None);
    let (status, events) = next_status(&pool, &[], &report);
    let said: Vec<(bool, &str)> = events.iter().map(|e| (e.warning, e.reason)).collect();
    assert_eq!(said, [(true, "SecretNotFound"), (false, "Found")]);
    assert_eq!(status.status, pool_status::READY);

    // The same again, on the status written: nothing new to say.
    let mut seen_again = pool.clone();
    seen_again.status = Some(status);
    let (_, events) = next_status(&seen_again, &[], &report);
    assert_eq!(events, []);
}

#[test]
fn scale_down_removes_the_newest_then_waits_for_it_to_be_gone() {
    let instances = [member("p-old", 3600), member("p-new", 60)];
    let nodes = nodes(vec![node("p-old", true, 3000), node("p-new", true, 30)]);
    let plan = plan_for(&pool(1), &instances, &nodes);
    let removal = plan.removal.clone().expect("a removal");
    assert_eq!(removal.member, "p-new");
    assert_eq!(removal.cause, Cause::ScaleDown);
    assert_eq!(removal.why, "to scale down to 1");
    assert_eq!(removal.node, nodes.get("p-new").cloned());
    assert_eq!(plan.target.as_deref(), Some("p-new"));
    assert_eq!(plan.requeue, Some(DRAIN_POLL));
    assert_eq!(plan.create, 0);

    // While it is being deleted, nothing else goes.
    let instances = [
        member("p-old", 3600),
        deleting(member("p-new", 60)),
        member("p-third", 30),
    ];
    let plan = plan_for(&pool(1), &instances, &nodes);
    assert_eq!(plan.removal, None);
    assert_eq!(plan.target.as_deref(), Some("p-new"));
    assert_eq!(plan.requeue, Some(DRAIN_POLL));
}

#[test]
fn an_unhealthy_node_is_replaced_after_the_wait_and_the_removal_reports_its_drain() {
    let pool = healing_pool(2);
    let instances = [member("p-a", 3600), member("p-b", 3600)];
    let nodes = nodes(vec![node("p-a", true, 3000), node("p-b", false, 600)]);
    let plan = plan_for(&pool, &instances, &nodes);
    assert_eq!(
        plan.conditions,
        [Condition {
            type_: REMEDIATION_CONDITION,
            ok: true,
            reason: "Replacing",
            message: "replacing p-b; maxUnhealthy 1".into(),
        }]
    );
    let removal = plan.removal.clone().expect("a replacement");
    assert_eq!(
        (removal.member.as_str(), removal.cause),
        ("p-b", Cause::Replacement)
    );
    assert_eq!(
        removal.why,
        "Node p-b has not been Ready for 600s (longer than nodeCleanupWaitInterval 1m): replacing it"
    );
    assert_eq!(removal.drain_timeout, Duration::from_secs(300));
    assert_eq!(plan.blocked, Vec::<&str>::new());

    // A drain a PodDisruptionBudget refuses: a condition, nothing deleted.
    let held = plan_for(&pool, &instances, &nodes).report(
        Vec::new(),
        Some(Removed::Draining {
            message: "refused".into(),
            blocked: true,
        }),
    );
    assert_eq!(held.deleted, None);
    assert_eq!(held.conditions.last().unwrap().reason, "DrainBlocked");
    assert_eq!(held.events, []);

    // Given up on an unreachable Node past drainTimeout: deleted, with both Events.
    let report = plan.report(
        Vec::new(),
        Some(Removed::Deleted {
            timed_out: Some("draining unreachable Node p-b did not finish".into()),
        }),
    );
    assert_eq!(report.deleted.as_deref(), Some("p-b"));
    assert_eq!(
        report.conditions.last().unwrap(),
        &Condition {
            type_: DRAIN_CONDITION,
            ok: true,
            reason: "Drained",
            message: "Node p-b was drained".into(),
        }
    );
    let said: Vec<(bool, &str)> = report
        .events
        .iter()
        .map(|e| (e.warning, e.reason))
        .collect();
    assert_eq!(
        said,
        [(true, "DrainTimeout"), (true, REPLACING_UNHEALTHY_NODE)]
    );
    let (status, _) = next_status(&pool, &instances, &report);
    assert_eq!((status.ready, status.needed), (1, 1));
    assert_eq!(status.status, pool_status::TOKEN_READY);
}

#[test]
fn more_unhealthy_than_max_unhealthy_replaces_none() {
    let instances: Vec<Instance> = ["p-a", "p-b", "p-c"]
        .iter()
        .map(|n| member(n, 3600))
        .collect();
    let nodes = nodes(vec![
        node("p-a", false, 600),
        node("p-b", false, 600),
        node("p-c", true, 600),
    ]);
    let plan = plan_for(&healing_pool(3), &instances, &nodes);
    assert_eq!(plan.removal, None);
    assert_eq!(plan.blocked, ["too_many_unhealthy"]);
    assert_eq!(plan.conditions[0].reason, "TooManyUnhealthy");
    assert!(!plan.conditions[0].ok);
    assert!(
        plan.conditions[0].message.starts_with(
            "2 of 3 Nodes are unhealthy (p-a, p-b), more than maxUnhealthy 1 allows (1)"
        ),
        "{}",
        plan.conditions[0].message
    );
    // Looked at again within a quarter of the wait.
    assert_eq!(plan.requeue, Some(Duration::from_secs(15)));
}

#[test]
fn an_invalid_max_unhealthy_replaces_nothing_and_says_how_to_fix_it() {
    let mut pool = healing_pool(2);
    pool.spec.max_unhealthy = Some(IntOrString::String("lots".into()));
    let instances = [member("p-a", 3600), member("p-b", 3600)];
    let nodes = nodes(vec![node("p-a", true, 3000), node("p-b", false, 600)]);
    let plan = plan_for(&pool, &instances, &nodes);
    assert_eq!(plan.removal, None);
    assert_eq!(plan.blocked, ["invalid_max_unhealthy"]);
    assert_eq!(plan.conditions[0].reason, "InvalidMaxUnhealthy");
    assert!(
        plan.conditions[0]
            .message
            .contains("spec.maxUnhealthy \"lots\" is neither a count nor a percentage"),
        "{}",
        plan.conditions[0].message
    );
}

#[test]
fn without_a_cleanup_interval_nothing_is_replaced() {
    let instances = [member("p-a", 3600), member("p-b", 3600)];
    let nodes = nodes(vec![node("p-a", true, 3000), node("p-b", false, 6000)]);
    let plan = plan_for(&pool(2), &instances, &nodes);
    assert_eq!(plan.removal, None);
    assert_eq!(plan.conditions, []);
    assert_eq!(plan.requeue, None);
}

#[test]
fn a_recovered_node_is_uncordoned_unless_it_is_the_one_being_removed() {
    let instances = [member("p-a", 3600), member("p-b", 60)];
    let nodes = nodes(vec![
        cordoned_by_ingot(node("p-a", true, 10)),
        node("p-b", true, 30),
    ]);
    let plan = plan_for(&pool(2), &instances, &nodes);
    assert_eq!(plan.uncordon.len(), 1);
    assert!(plan.uncordon[0].ours);
    let report = plan.report(Vec::new(), None);
    assert_eq!(
        report.conditions,
        [Condition {
            type_: DRAIN_CONDITION,
            ok: true,
            reason: "NodeRecovered",
            message: "Node p-a is Ready again and was uncordoned; it stays".into(),
        }]
    );
    assert_eq!(
        report.events,
        [Note {
            warning: false,
            reason: "NodeRecovered",
            message: "Node p-a is Ready again: uncordoned, no longer removed".into(),
        }]
    );

    // On scale-down the removal already started goes on: its cordon stays.
    let plan = plan_for(&pool(1), &instances, &nodes);
    assert_eq!(plan.removal.map(|r| r.member).as_deref(), Some("p-a"));
    assert_eq!(plan.uncordon, []);
}
