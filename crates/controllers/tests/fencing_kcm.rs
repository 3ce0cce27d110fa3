//! Fencing with the real kube-controller-manager acting on what it does: its node lifecycle
//! controller marks a silent Node NotReady (no kubelet posts its status here), and once ingot
//! taints the Node out of service after its BMC (played by the test: the Job's outcome and the
//! Machine's power state, as the Rufio controllers write them) confirmed the power off, its
//! taint-eviction and pod garbage-collector controllers delete the Node's pods. ingot's taint
//! write keeps the node lifecycle controller's taints; the Node back Ready loses ingot's taint.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use ingot_controllers::Metrics;
use ingot_controllers::fencing::execute::{OUT_OF_SERVICE, POWER_ON_JOB};
use ingot_controllers::fencing::{
    FencingContext, JOB_NODE_LABEL, MaxUnhealthy, Recovery, Settings,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(180);

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Posts the Node's status as a kubelet does: Ready, heartbeat now.
async fn post_ready(client: &Client, node: &str) {
    let now = now();
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }]}})),
        )
        .await
        .unwrap();
}

fn taints(node: &Node) -> BTreeSet<(String, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect()
}

fn ready(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_controller_manager_deletes_the_pods_of_a_node_fenced_out_of_service() {
    let plane = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
        watchdog_parent: Some(std::process::id()),
        controller_manager_args: vec![
            // Appended to the testenv's own list (a repeated string-slice flag appends).
            "--controllers=node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller".into(),
            "--node-monitor-period=2s".into(),
            "--node-monitor-grace-period=10s".into(),
            "--node-startup-grace-period=10s".into(),
        ],
        ..ingot_testenv::Options::from_env().unwrap()
    })
    .await
    .unwrap();
    let env = ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
        .await
        .unwrap();
    let client = env.client().unwrap();
    let ns = env.namespace("fencing-kcm").await.unwrap();
    let name = format!("{ns}-node");
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    post_ready(&client, &name).await;
    let inventory: Inventory = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {"name": "inv", "annotations": {
            "metal.harvesterhci.io/local-inventory": "true",
            "metal.harvesterhci.io/local-node-name": name}},
        "spec": {"baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
            "authSecretRef": {"name": "auth", "namespace": ns}}},
            "events": {"enabled": false, "pollingInterval": "1h"}}
    }))
    .unwrap();
    Api::<Inventory>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &inventory)
        .await
        .unwrap();
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let machine: Machine = serde_json::from_value(json!({
        "metadata": {"name": "inv"},
        "spec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
            "authSecretRef": {"name": "auth", "namespace": ns}}}
    }))
    .unwrap();
    machines
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let set_power = |power: &'static str| {
        let machines = machines.clone();
        async move {
            machines
                .patch_status(
                    "inv",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"powerState": power,
                        "conditions": [{"type": "Contactable", "status": "True"}]}})),
                )
                .await
                .unwrap();
        }
    };
    set_power("on").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "app"},
        "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let ctx = Arc::new(FencingContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "test".into(),
        Settings {
            namespace: Some(ns.clone()),
            after: Duration::from_secs(2),
            max_unhealthy: MaxUnhealthy::Count(1),
            recovery: Recovery::PowerOn,
            remediations_only: false,
            crash_point: None,
        },
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(ingot_controllers::fencing::run(ctx, async move {
        let _ = stopped.await;
    }));

    // No kubelet renews it: the node lifecycle controller marks it NotReady, and fencing sends
    // the power-off.
    ingot_testenv::wait_for(
        "the node lifecycle controller's NotReady",
        DEADLINE,
        || async {
            (ready(&nodes.get(&name).await.unwrap()).as_deref() == Some("Unknown")).then_some(())
        },
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let selector = ListParams::default().labels(&format!("{JOB_NODE_LABEL}={name}"));
    let off = ingot_testenv::wait_for("the power-off Job", DEADLINE, || async {
        jobs.list(&selector)
            .await
            .unwrap()
            .items
            .first()
            .map(|j| j.name_any())
    })
    .await;
    // The node lifecycle controller's taints, before ingot's.
    let before = ingot_testenv::wait_for(
        "the node lifecycle controller's taints",
        DEADLINE,
        || async {
            let t = taints(&nodes.get(&name).await.unwrap());
            (!t.is_empty()).then_some(t)
        },
    )
    .await;
    assert!(pods.get_opt("app").await.unwrap().is_some());
    jobs.patch_status(
        &off,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{"type": "Completed", "status": "True"}]}})),
    )
    .await
    .unwrap();
    set_power("off").await;
    let after = ingot_testenv::wait_for("the out-of-service taint", DEADLINE, || async {
        let t = taints(&nodes.get(&name).await.unwrap());
        t.contains(&(OUT_OF_SERVICE.to_owned(), "NoExecute".to_owned()))
            .then_some(t)
    })
    .await;
    assert!(
        before.is_subset(&after),
        "the node lifecycle controller's taints were overwritten: {before:?} then {after:?}"
    );
    // kube-controller-manager deletes the pod (taint eviction, then the pod GC's force delete
    // of a terminating pod on an out-of-service Node).
    ingot_testenv::wait_for(
        "the pod deleted by kube-controller-manager",
        DEADLINE,
        || async { pods.get_opt("app").await.unwrap().is_none().then_some(()) },
    )
    .await;
    // Its pods gone: powered on.
    ingot_testenv::wait_for("the power-on Job", DEADLINE, || async {
        nodes
            .get(&name)
            .await
            .unwrap()
            .annotations()
            .get(POWER_ON_JOB)
            .cloned()
    })
    .await;
    set_power("on").await;
    // The kubelet is back: the taint goes.
    post_ready(&client, &name).await;
    ingot_testenv::wait_for("the out-of-service taint removed", DEADLINE, || async {
        let t = taints(&nodes.get(&name).await.unwrap());
        (!t.iter().any(|(k, _)| k == OUT_OF_SERVICE)).then_some(())
    })
    .await;
    let _ = stop.send(());
    let _ = controller.await;
}
