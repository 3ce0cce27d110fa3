//! The Task reconciler against a real API server and an emulated Redfish BMC, called directly
//! with the copies a watch cache could hand it: a copy that is behind never sends a reboot
//! again, a send interrupted half-way is never replayed, and a reboot whose answer was lost
//! after the BMC carried it out is not sent again (over Redfish and over IPMI), and a one-time
//! network boot whose BMC switched the boot mode fails saying so, without forcing the mode.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::Task;
use ingot_bmc_sim::{BmcSpec, Fault, Fleet, FleetOptions};
use ingot_controllers::Metrics;
use ingot_controllers::rufio::task::{SENT_ANNOTATION, reconcile};
use ingot_controllers::rufio::{RufioContext, Settings};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

struct Setup {
    tasks: Api<Task>,
    ctx: Arc<RufioContext>,
    fleet: Fleet,
}

async fn setup(action: &str) -> Setup {
    setup_with(action, Duration::from_millis(50)).await
}

async fn setup_with(action: &str, power_delay: Duration) -> Setup {
    setup_task(json!({"powerAction": action}), power_delay).await
}

async fn setup_task(action: serde_json::Value, power_delay: Duration) -> Setup {
    setup_bmc(
        action,
        BmcSpec {
            power_delay,
            ..BmcSpec::default()
        },
    )
    .await
}

async fn setup_bmc(action: serde_json::Value, spec: BmcSpec) -> Setup {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-task").await.unwrap();
    let fleet = Fleet::uniform(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        1,
        BmcSpec {
            username: "admin".into(),
            password: "pw".into(),
            ..spec
        },
    )
    .await
    .unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "auth"},
        "stringData": {"username": "admin", "password": "pw"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let task: Task = serde_json::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
        "metadata": {"name": "j-task-0"},
        "spec": {"task": action, "connection": {
            "host": "127.0.0.1", "insecureTLS": true,
            "authSecretRef": {"name": "auth", "namespace": ns},
            "providerOptions": {"redfish": {"port": fleet.bmcs[0].addr.port()}}
        }}
    }))
    .unwrap();
    tasks.create(&PostParams::default(), &task).await.unwrap();
    let ctx = Arc::new(RufioContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "test".into(),
        Settings {
            task_poll: Duration::from_millis(100),
            ..Settings::default()
        },
    ));
    Setup { tasks, ctx, fleet }
}

async fn run(s: &Setup, task: &Task) {
    reconcile(Arc::new(task.clone()), s.ctx.clone())
        .await
        .unwrap();
}

/// A repeatable action (power on) is not sent twice by one process either: the copy a
/// reconcile is woken with right after the Task's own `startTime` write does not show the
/// `sent` mark yet, and the Task is read again instead of sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_does_not_send_a_power_on_again() {
    let s = setup_bmc(
        json!({"powerAction": "on"}),
        BmcSpec {
            power_delay: Duration::from_secs(2),
            initial_power_on: false,
            ..BmcSpec::default()
        },
    )
    .await;
    let bmc = &s.fleet.bmcs[0].state;
    let stale = s.tasks.get("j-task-0").await.unwrap();
    run(&s, &stale).await;
    assert_eq!(bmc.reset_requests(), ["On"]);
    let fresh = s.tasks.get("j-task-0").await.unwrap();
    assert_eq!(
        fresh.annotations().get(SENT_ANNOTATION).map(String::as_str),
        Some("sent")
    );
    // Handed the copy from before the send (not started, nothing sent) while the BMC is
    // still powering on: nothing is sent again.
    run(&s, &stale).await;
    let mut started = stale.clone();
    started.status = fresh.status.clone();
    run(&s, &started).await;
    assert_eq!(bmc.reset_requests(), ["On"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_never_sends_a_reboot_again() {
    let s = setup("reset").await;
    // The copy a lagging cache holds: started, nothing sent yet.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    s.tasks
        .patch_status(
            "j-task-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"startTime": now}})),
        )
        .await
        .unwrap();
    let stale = s.tasks.get("j-task-0").await.unwrap();
    // The up-to-date reconcile sends the reset once and marks it sent.
    run(&s, &stale).await;
    assert_eq!(s.fleet.bmcs[0].state.snapshot().resets, 1);
    let fresh = s.tasks.get("j-task-0").await.unwrap();
    assert_eq!(
        fresh.annotations().get(SENT_ANNOTATION).map(String::as_str),
        Some("sent")
    );
    // A reconcile handed the old copy again: refused by the API server, nothing sent.
    run(&s, &stale).await;
    run(&s, &stale).await;
    assert_eq!(s.fleet.bmcs[0].state.snapshot().resets, 1);
    let after = s.tasks.get("j-task-0").await.unwrap();
    assert_eq!(
        after.annotations().get(SENT_ANNOTATION).map(String::as_str),
        Some("sent")
    );
    // The fresh copy goes on to verify and complete.
    for _ in 0..50 {
        let t = s.tasks.get("j-task-0").await.unwrap();
        let status = serde_json::to_value(&t.status).unwrap();
        if status["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Completed" && c["status"] == "True")
        }) {
            assert_eq!(s.fleet.bmcs[0].state.snapshot().resets, 1);
            return;
        }
        run(&s, &t).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Task did not complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_reboot_is_not_replayed_and_fails_with_the_reason() {
    let s = setup("cycle").await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    s.tasks
        .patch_status(
            "j-task-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"startTime": now}})),
        )
        .await
        .unwrap();
    // A reconciler killed between marking and sending (or before recording the answer).
    s.tasks
        .patch_metadata(
            "j-task-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {SENT_ANNOTATION: "sending"}}})),
        )
        .await
        .unwrap();
    let t = s.tasks.get("j-task-0").await.unwrap();
    run(&s, &t).await;
    let t = s.tasks.get("j-task-0").await.unwrap();
    let status = serde_json::to_value(&t.status).unwrap();
    let failed = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(failed["status"], "True");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("power cycle was interrupted"),
        "{failed}"
    );
    let snap = s.fleet.bmcs[0].state.snapshot();
    assert_eq!(snap.resets, 0, "{snap:?}");
    assert_eq!(snap.power_state, "On");
}

/// The `type` condition of a Task, if set.
fn condition(t: &Task, kind: &str) -> Option<serde_json::Value> {
    let status = serde_json::to_value(&t.status).unwrap();
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_whose_answer_is_lost_runs_once_and_completes_from_the_power_state() {
    // The reboot lasts long enough that the state read after the lost answer shows it.
    let s = setup_with("reset", Duration::from_secs(2)).await;
    // The BMC carries the reset out and drops the connection instead of answering.
    s.fleet.bmcs[0]
        .state
        .set_fault(Some(Fault::DropAfterAction));
    for _ in 0..100 {
        let t = s.tasks.get("j-task-0").await.unwrap();
        if let Some(done) = condition(&t, "Completed") {
            let snap = s.fleet.bmcs[0].state.snapshot();
            assert_eq!(snap.resets, 1, "{snap:?} {done}");
            assert_eq!(s.fleet.bmcs[0].state.reset_requests(), vec!["ForceRestart"]);
            assert_eq!(
                t.annotations().get(SENT_ANNOTATION).map(String::as_str),
                Some("sent")
            );
            return;
        }
        assert!(condition(&t, "Failed").is_none(), "{:?}", t.status);
        let sent = s.fleet.bmcs[0].state.reset_requests();
        assert!(sent.len() <= 1, "the reset was sent again: {sent:?}");
        run(&s, &t).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Task did not complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipmi_hard_reset_without_answer_runs_once_and_the_task_fails_saying_why() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-task-ipmi").await.unwrap();
    let mut icfg = ingot_ipmi_sim::FleetConfig::uniform(1, "pw");
    icfg.bmcs[0].power_on = true;
    let fleet = ingot_ipmi_sim::serve(icfg).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    // The BMC carries out every copy it receives (no de-duplication) and its answers to
    // Chassis Control are lost; a hard reset reboots in place, so the power state stays on.
    bmc.set_faults(ingot_ipmi_sim::Faults {
        no_dedup: true,
        mute_commands: vec![(0x00, 0x02)],
        ..ingot_ipmi_sim::Faults::default()
    });
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "auth"},
        "stringData": {"username": "admin", "password": "pw"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let task: Task = serde_json::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
        "metadata": {"name": "j-task-0"},
        "spec": {"task": {"powerAction": "reset"}, "connection": {
            "host": "127.0.0.1", "insecureTLS": false,
            "authSecretRef": {"name": "auth", "namespace": ns},
            "providerOptions": {
                "preferredOrder": ["ipmitool"],
                "ipmitool": {"port": bmc.addr().port(), "cipherSuite": "17"}
            }
        }}
    }))
    .unwrap();
    tasks.create(&PostParams::default(), &task).await.unwrap();
    let ctx = Arc::new(RufioContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "test".into(),
        Settings {
            task_poll: Duration::from_millis(100),
            ipmi_timeout: Duration::from_millis(200),
            ..Settings::default()
        },
    ));
    for _ in 0..50 {
        let t = tasks.get("j-task-0").await.unwrap();
        if let Some(failed) = condition(&t, "Failed") {
            let message = failed["message"].as_str().unwrap();
            assert!(
                message.starts_with("power reset: ")
                    && message.contains("the power state does not show whether the BMC carried it out, so it is not sent again"),
                "{message}"
            );
            assert_eq!(bmc.stats().chassis_controls, vec![0x03], "hard resets run");
            return;
        }
        assert!(condition(&t, "Completed").is_none(), "{:?}", t.status);
        let controls = bmc.stats().chassis_controls;
        assert!(
            controls.len() <= 1,
            "the hard reset ran again: {controls:?}"
        );
        reconcile(Arc::new(t), ctx.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Task did not fail");
}

/// A BMC that switches the boot mode to Legacy on a boot override: the Task fails with the
/// reason (the BMC's behaviour and the fix), after one PATCH; a later reconcile sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_time_boot_whose_bmc_switched_the_mode_fails_saying_why() {
    let s = setup_task(
        json!({"oneTimeBootDeviceAction": {"device": ["pxe"]}}),
        Duration::from_millis(50),
    )
    .await;
    let bmc = &s.fleet.bmcs[0].state;
    bmc.set_quirks(ingot_bmc_sim::Quirks {
        boot_mode_always_legacy: true,
        ..ingot_bmc_sim::Quirks::default()
    });
    for _ in 0..3 {
        let task = s.tasks.get("j-task-0").await.unwrap();
        run(&s, &task).await;
    }
    let task = s.tasks.get("j-task-0").await.unwrap();
    let status = task.status.unwrap();
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .unwrap_or_else(|| panic!("not failed: {:?}", status.conditions));
    let message = failed.message.clone().unwrap_or_default();
    assert!(
        message.starts_with("set boot device: the BMC switched the boot mode from UEFI to Legacy")
            && message.contains("does not keep the firmware boot mode")
            && message.contains("set it to UEFI there"),
        "{message}"
    );
    assert_eq!(bmc.system_patches().len(), 1, "one boot PATCH, not forced");
    assert_eq!(bmc.snapshot().boot.mode, "Legacy");
}
