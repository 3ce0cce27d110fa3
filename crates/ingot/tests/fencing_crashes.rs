//! Fencing killed at its crash points (test builds' `--crash-point`), end to end:
//! `ingot run --controllers fencing` (with its Rufio controllers) against an emulated Redfish
//! BMC, the Node's `Ready` written by the test (no kubelet). The operator dies after creating
//! the power-off Job (not yet recorded), and again right after tainting the Node (before its
//! condition and Event); each time it is started again. What counts: one power-off Job and one
//! power-on Job, never a second; at the BMC one power-on, and the power-off at most once per
//! process (Rufio re-sends an idempotent action its process died sending, docs/rufio.md); and
//! never a taint before the BMC reported the power off.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions};
use ingot_testenv::Operator;
use ingot_testenv::harness::wait_for;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
const POWER_OFF_JOB: &str = "fencing.ingot.dev/power-off-job";

fn tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE))
}

/// One Node whose `Ready` the test writes, its Inventory and Machine `inv` behind one emulated
/// Redfish BMC (its Secret `auth`), in a namespace of their own.
struct Rig {
    env: &'static ingot_testenv::TestEnv,
    client: kube::Client,
    ns: String,
    fleet: Fleet,
    node_name: String,
    nodes: Api<Node>,
    machines: Api<Machine>,
}

impl Rig {
    /// The Node is `Ready` (`ready`) or `Unknown` before its Inventory exists.
    async fn start(tag: &str, ready: bool) -> Rig {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let ns = env.namespace(tag).await.unwrap();
        let fleet = Fleet::uniform(
            FleetOptions {
                tls: true,
                ..FleetOptions::default()
            },
            1,
            BmcSpec::default(),
        )
        .await
        .unwrap();
        let bmc = &fleet.bmcs[0];
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "auth"},
            "stringData": {"username": bmc.state.spec.username, "password": bmc.state.spec.password}
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let node_name = format!("{ns}-node");
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({"metadata": {"name": node_name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        set_ready(&nodes, &node_name, ready).await;
        let inventory: Inventory = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "inv", "annotations": {
                "metal.harvesterhci.io/local-inventory": "true",
                "metal.harvesterhci.io/local-node-name": node_name}},
            "spec": {"baseboardSpec": {"connection": {"host": bmc.url(), "port": 623, "insecureTLS": true,
                "authSecretRef": {"name": "auth", "namespace": ns}}},
                "events": {"enabled": false, "pollingInterval": "1h"}}
        }))
        .unwrap();
        Api::<Inventory>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &inventory)
            .await
            .unwrap();
        let machine: Machine = serde_json::from_value(json!({
            "metadata": {"name": "inv"},
            "spec": {"connection": {"host": bmc.url(), "port": 623, "insecureTLS": true,
                "authSecretRef": {"name": "auth", "namespace": ns}}}
        }))
        .unwrap();
        let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
        machines
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
        Rig {
            env,
            client,
            ns,
            fleet,
            node_name,
            nodes,
            machines,
        }
    }
}

/// The Node's `Ready` as a kubelet (`True`) or the node lifecycle controller (`Unknown`) writes it.
async fn set_ready(nodes: &Api<Node>, name: &str, ready: bool) {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = if ready { "True" } else { "Unknown" };
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": status, "reason": "Test",
                "lastHeartbeatTime": now, "lastTransitionTime": now}]}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_power_off_job_or_the_taint_sends_nothing_twice() {
    let Rig {
        env,
        client,
        ns,
        fleet,
        node_name,
        nodes,
        machines,
    } = Rig::start("fencing-crashes", true).await;
    let bmc = &fleet.bmcs[0];

    let mut ingot = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("fencing")
        .kubeconfig(env.kubeconfig_path())
        .arg(format!("--lease-namespace={ns}"))
        .arg(format!("--lease-name=ingot-{ns}"))
        .arg("--lease-duration-seconds=3")
        .controllers("fencing")
        .arg(format!("--rufio-namespace={ns}"))
        .arg("--rufio-machine-interval-seconds=1")
        .arg("--rufio-task-poll-seconds=0.3")
        .arg("--fencing-after-seconds=2")
        .arg("--fencing-max-unhealthy=1")
        .crash_point(Some("fencing-after-power-off-job"))
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();
    let power = || async {
        machines
            .get("inv")
            .await
            .unwrap()
            .status
            .and_then(|s| s.power_state)
    };
    wait_for("the BMC read on", WAIT, || async {
        (power().await.as_deref() == Some("on")).then_some(())
    })
    .await;

    // Dies after creating the power-off Job, before recording it.
    set_ready(&nodes, &node_name, false).await;
    ingot
        .wait_crashed("fencing-after-power-off-job", WAIT)
        .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let off = jobs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(off.len(), 1);
    let node = nodes.get(&node_name).await.unwrap();
    assert!(!node.annotations().contains_key(POWER_OFF_JOB));
    assert!(!tainted(&node));

    // Started again: the same Job is taken up; dies right after the taint.
    ingot.restart(Some("fencing-after-taint"));
    ingot.wait_crashed("fencing-after-taint", WAIT).await;
    assert_eq!(
        power().await.as_deref(),
        Some("off"),
        "tainted before the BMC read off"
    );
    assert_eq!(bmc.state.snapshot().power_state, "Off");
    let node = nodes.get(&node_name).await.unwrap();
    assert!(tainted(&node));
    assert_eq!(
        node.annotations().get(POWER_OFF_JOB),
        Some(&off[0].name_any())
    );

    // Started again, unarmed: no pods on the Node, so one power-on; Ready again, untainted.
    ingot.restart(None);
    wait_for("the BMC powered on", WAIT, || async {
        (bmc.state.snapshot().power_state == "On").then_some(())
    })
    .await;
    let names: Vec<String> = jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "one power-off Job, one power-on Job: {names:?}"
    );
    assert!(names.contains(&off[0].name_any()), "{names:?}");
    set_ready(&nodes, &node_name, true).await;
    wait_for("the taint removed", WAIT, || async {
        (!tainted(&nodes.get(&node_name).await.unwrap())).then_some(())
    })
    .await;
    wait_for("the episode's Jobs deleted", WAIT, || async {
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let resets = bmc.state.reset_requests();
    let count = |action: &str| resets.iter().filter(|r| *r == action).count();
    assert_eq!(count("On"), 1, "{resets:?}");
    assert_eq!(resets.last().map(String::as_str), Some("On"), "{resets:?}");
    assert!(
        (1..=2).contains(&count("ForceOff")) && resets.len() == count("ForceOff") + 1,
        "the power-off at most once per process, nothing else: {resets:?}"
    );
    ingot.kill();
}

/// NodeHealthCheck's remediation deleted while the server is off (its pod still bound): the
/// release powers it on, and the operator dies right after creating that power-on Job (not yet
/// recorded on the Node). Started again: the same Job is taken up (its name is fixed by the
/// remediation's uid), the taint goes once it ran, the remediation is let go: one power-on Job,
/// the BMC powered on once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_release_power_on_job_powers_on_once() {
    use ingot_api::remediation::BMCRemediation;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::DeleteParams;

    let Rig {
        env,
        client,
        ns,
        fleet,
        node_name,
        nodes,
        machines,
    } = Rig::start("fencing-crashes-nhc", false).await;
    let bmc = &fleet.bmcs[0];
    // A pod that stays: the server is not powered on before the release.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();

    let mut ingot = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("fencing-nhc")
        .kubeconfig(env.kubeconfig_path())
        .arg(format!("--lease-namespace={ns}"))
        .arg(format!("--lease-name=ingot-{ns}"))
        .arg("--lease-duration-seconds=3")
        .controllers("fencing")
        .arg(format!("--rufio-namespace={ns}"))
        .arg("--rufio-machine-interval-seconds=1")
        .arg("--rufio-task-poll-seconds=0.3")
        .arg("--fencing-max-unhealthy=1")
        .arg("--fencing-remediations-only")
        .crash_point(Some("fencing-after-power-on-job"))
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();
    wait_for("the BMC read on", WAIT, || async {
        let power = machines.get("inv").await.unwrap().status?.power_state;
        (power.as_deref() == Some("on")).then_some(())
    })
    .await;

    // NodeHealthCheck's remediation for the Node: fenced.
    let remediations: Api<BMCRemediation> = Api::namespaced(client.clone(), &ns);
    let remediation: BMCRemediation = serde_json::from_value(json!({
        "apiVersion": "fencing.ingot.dev/v1alpha1", "kind": "BMCRemediation",
        "metadata": {"name": node_name,
            "labels": {"app.kubernetes.io/part-of": "node-healthcheck-controller"}},
        "spec": {"strategy": "OutOfServiceTaint", "powerOnAfterRecovery": true}
    }))
    .unwrap();
    remediations
        .create(&PostParams::default(), &remediation)
        .await
        .unwrap();
    wait_for("the Node fenced", WAIT, || async {
        let node = nodes.get(&node_name).await.unwrap();
        (tainted(&node) && bmc.state.snapshot().power_state == "Off").then_some(())
    })
    .await;
    // Released while off: dies right after creating the power-on Job.
    remediations
        .delete(&node_name, &DeleteParams::default())
        .await
        .unwrap();
    ingot.wait_crashed("fencing-after-power-on-job", WAIT).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let power_ons = || async {
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|j| j.name_any())
            .filter(|n| n.contains("-fence-on-"))
            .collect::<Vec<_>>()
    };
    let created = power_ons().await;
    assert_eq!(created.len(), 1, "{created:?}");
    let node = nodes.get(&node_name).await.unwrap();
    assert!(
        !node
            .annotations()
            .contains_key("fencing.ingot.dev/power-on-job")
    );
    assert!(tainted(&node), "untainted before the power-on ran");

    // Started again, unarmed: the same Job taken up; untainted; the remediation let go.
    ingot.restart(None);
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::from_iter(created));
    wait_for("the Node released", WAIT, || async {
        let now = power_ons().await;
        seen.lock().unwrap().extend(now);
        let node = nodes.get(&node_name).await.unwrap();
        let gone = remediations.get_opt(&node_name).await.unwrap().is_none();
        (!tainted(&node) && gone).then_some(())
    })
    .await;
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 1, "one power-on Job in all: {seen:?}");
    // The Job's power on may still be in its transition (PoweringOn) when the Node is let go.
    wait_for("the server on at its BMC", WAIT, || async {
        (bmc.state.snapshot().power_state == "On").then_some(())
    })
    .await;
    let resets = bmc.state.reset_requests();
    let count = |action: &str| resets.iter().filter(|r| *r == action).count();
    // The power-on at most once per process (the Rufio controllers re-send an idempotent
    // action their process died sending), from one Job.
    assert!(
        (1..=2).contains(&count("On")) && resets.len() == count("On") + count("ForceOff"),
        "{resets:?}"
    );
    assert_eq!(count("ForceOff"), 1, "{resets:?}");
    ingot.kill();
}
