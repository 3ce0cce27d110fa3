use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;

fn pool(name: &str, cidr: &str, gateway: &str, created_secs: i64) -> AddressPool {
    let mut pool: AddressPool = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": name, "namespace": "default", "generation": 1},
        "spec": {"cidr": cidr, "gateway": gateway}
    }))
    .unwrap();
    pool.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created_secs).unwrap()));
    pool
}

fn owner(kind: &str, name: &str) -> AllocatedObject {
    AllocatedObject {
        kind: kind.into(),
        name: name.into(),
        namespace: "default".into(),
    }
}

#[test]
fn a_new_pool_gets_seeders_status_and_the_finalizer() {
    let p = pool("a", "10.0.0.0/24", "10.0.0.1", 10);
    let plan = plan(&p, judge(&p, &[]), &[]);
    assert_eq!(plan.status.status, ipam::READY);
    assert_eq!(plan.status.start_address, "10.0.0.1");
    assert_eq!(plan.finalizer, FinalizerStep::Add);
    assert!(plan.events.is_empty());
    let ready = &plan.status.conditions[0];
    assert_eq!(
        (ready.type_.as_str(), ready.status.as_str()),
        ("Ready", "True")
    );
}

#[test]
fn the_later_of_two_overlapping_pools_is_refused() {
    let first = Arc::new(pool("first", "10.0.0.0/24", "10.0.0.1", 10));
    let later = Arc::new(pool("later", "10.0.0.128/25", "10.0.0.129", 20));
    let apart = Arc::new(pool("apart", "10.0.1.0/24", "10.0.1.1", 30));
    let peers = [first.clone(), later.clone(), apart.clone()];
    assert!(judge(&first, &peers).is_ok());
    assert!(judge(&apart, &peers).is_ok());
    let refusal = judge(&later, &peers).unwrap_err();
    assert_eq!(refusal.reason, "Overlapping");
    assert!(
        refusal.message.contains("AddressPool first"),
        "{}",
        refusal.message
    );
    let plan = plan(&later, Err(refusal), &[]);
    assert_eq!(plan.status.status, ipam::INVALID);
    assert_eq!(plan.status.conditions[0].status, "False");
    assert_eq!(plan.events.len(), 1);
    // The same refusal again records no second Event.
    let mut again = (*later).clone();
    again.status = Some(plan.status.clone());
    let refusal = judge(&again, &peers).unwrap_err();
    assert!(super::plan(&again, Err(refusal), &[]).events.is_empty());
}

#[test]
fn owners_gone_are_freed_and_deletion_waits_for_the_others() {
    let mut p = pool("a", "10.0.0.0/24", "10.0.0.1", 10);
    let parsed = judge(&p, &[]).unwrap();
    let mut status = ipam::settled(&parsed, &AddressPoolStatus::default());
    ipam::allocate(&parsed, &mut status, &owner("cluster", "kept"), None).unwrap();
    ipam::allocate(&parsed, &mut status, &owner("inventory", "gone"), None).unwrap();
    p.status = Some(status);
    let gone = [owner("inventory", "gone")];
    let live = plan(&p, judge(&p, &[]), &gone);
    assert_eq!(live.status.address_allocation.len(), 1);
    assert_eq!(live.events[0].1, "AddressFreed");

    p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(50).unwrap()));
    let held = plan(&p, judge(&p, &[]), &gone);
    assert_eq!(held.finalizer, FinalizerStep::Keep);
    let deleting = held
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Deleting")
        .unwrap();
    assert!(
        deleting
            .message
            .contains("10.0.0.2 by cluster default/kept"),
        "{}",
        deleting.message
    );
    assert!(held.events.iter().any(|e| e.1 == "DeletionBlocked"));

    let all_gone = [owner("inventory", "gone"), owner("cluster", "kept")];
    assert_eq!(
        plan(&p, judge(&p, &[]), &all_gone).finalizer,
        FinalizerStep::Remove
    );
}
