//! The fencing controller against a real API server, with the Rufio side played by the test
//! (Jobs' outcomes and Machines' power state written as Rufio writes them) and no kubelet: the
//! Nodes' `Ready` conditions are written by the test.
//!
//! One fleet of five Nodes, one scenario after the other (fencing counts every Node):
//! a Node NotReady past the delay is powered off by one Job, tainted only once the Job completed
//! *and* its Machine reads off, powered on once its pods are gone, and loses the taint once
//! Ready; three of five NotReady fence nothing; a Node in maintenance, a cordoned one and one
//! whose BMC cannot be read are never powered off; a power-off Job of the episode left by a
//! crash before it was recorded is taken up, not sent again.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use ingot_controllers::Metrics;
use ingot_controllers::fencing::execute::{
    FENCING_HELD, HELD, NODE_FENCED, OUT_OF_SERVICE, POWER_OFF_JOB, POWER_ON_JOB, TAINT_RECORD,
};
use ingot_controllers::fencing::{
    FencingContext, JOB_NODE_LABEL, MaxUnhealthy, Recovery, Settings,
};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(120);

/// Polls `check` until it returns `Some`, or panics with `what` after the deadline.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

struct Fleet {
    client: Client,
    ns: String,
    nodes: Vec<String>,
}

impl Fleet {
    fn node(&self, i: usize) -> &str {
        &self.nodes[i]
    }

    fn inventory(&self, i: usize) -> String {
        format!("inv{i}")
    }

    async fn set_ready(&self, i: usize, ready: bool) {
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        self.set_ready_at(i, ready, &now).await;
    }

    async fn set_ready_at(&self, i: usize, ready: bool, now: &str) {
        let status = if ready { "True" } else { "Unknown" };
        Api::<Node>::all(self.client.clone())
            .patch_status(
                self.node(i),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{
                    "type": "Ready", "status": status, "reason": "Test",
                    "lastHeartbeatTime": now, "lastTransitionTime": now,
                }]}})),
            )
            .await
            .unwrap();
    }

    async fn get(&self, i: usize) -> Node {
        Api::<Node>::all(self.client.clone())
            .get(self.node(i))
            .await
            .unwrap()
    }

    async fn set_power(&self, i: usize, power: &str, contactable: bool) {
        let contactable = if contactable { "True" } else { "False" };
        Api::<Machine>::namespaced(self.client.clone(), &self.ns)
            .patch_status(
                &self.inventory(i),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"powerState": power,
                    "conditions": [{"type": "Contactable", "status": contactable}]}})),
            )
            .await
            .unwrap();
    }

    /// The fencing Jobs of Node `i`.
    async fn jobs(&self, i: usize) -> Vec<Job> {
        Api::<Job>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().labels(&format!("{JOB_NODE_LABEL}={}", self.node(i))))
            .await
            .unwrap()
            .items
    }

    async fn complete_job(&self, name: &str) {
        Api::<Job>::namespaced(self.client.clone(), &self.ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [
                    {"type": "Completed", "status": "True"}]}})),
            )
            .await
            .unwrap();
    }

    async fn annotation(&self, i: usize, key: &str) -> Option<String> {
        self.get(i).await.annotations().get(key).cloned()
    }

    async fn tainted(&self, i: usize) -> bool {
        self.get(i)
            .await
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == OUT_OF_SERVICE && t.value.as_deref() == Some("nodeshutdown"))
    }

    async fn condition(&self, i: usize, type_: &str) -> Option<(String, Option<String>)> {
        let inventory = Api::<Inventory>::namespaced(self.client.clone(), &self.ns)
            .get(&self.inventory(i))
            .await
            .unwrap();
        inventory
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason))
    }

    /// Waits for Node `i`'s hold `reason` and checks that no power action was sent for it.
    /// Whether an Event of `reason` is recorded about Node `i`.
    async fn event(&self, i: usize, reason: &str) -> bool {
        let events = Api::<Event>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap();
        events.items.iter().any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(self.node(i))
        })
    }

    async fn held(&self, i: usize, reason: &str) {
        eventually(&format!("{} held {reason}", self.node(i)), || async {
            (self.annotation(i, HELD).await.as_deref() == Some(reason)).then_some(())
        })
        .await;
        assert!(
            self.jobs(i).await.is_empty(),
            "{} got a power action",
            self.node(i)
        );
        assert!(!self.tainted(i).await);
        eventually(&format!("a {reason} Event on {}", self.node(i)), || async {
            self.event(i, reason).await.then_some(())
        })
        .await;
    }
}

async fn fleet(client: &Client, ns: &str) -> Fleet {
    let nodes: Vec<String> = (0..5).map(|i| format!("{ns}-n{i}")).collect();
    let fleet = Fleet {
        client: client.clone(),
        ns: ns.to_owned(),
        nodes,
    };
    for i in 0..5 {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": fleet.node(i)}})).unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
        fleet.set_ready(i, true).await;
        let inventory: Inventory = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": fleet.inventory(i), "annotations": {
                "metal.harvesterhci.io/local-inventory": "true",
                "metal.harvesterhci.io/local-node-name": fleet.node(i)}},
            "spec": {"baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
                "authSecretRef": {"name": "auth", "namespace": ns}}},
                "events": {"enabled": false, "pollingInterval": "1h"}}
        }))
        .unwrap();
        Api::<Inventory>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &inventory)
            .await
            .unwrap();
        let machine: Machine = serde_json::from_value(json!({
            "metadata": {"name": fleet.inventory(i)},
            "spec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
                "authSecretRef": {"name": "auth", "namespace": ns}}}
        }))
        .unwrap();
        Api::<Machine>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
        fleet.set_power(i, "on", true).await;
    }
    fleet
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_nodes_are_fenced_through_their_bmc_within_the_budget_only() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("fencing").await.unwrap();
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let f = fleet(&client, &ns).await;
    let metrics = Arc::new(Metrics::default());
    let ctx = Arc::new(FencingContext::new(
        client.clone(),
        metrics.clone(),
        "test".into(),
        Settings {
            namespace: Some(ns.clone()),
            // Long enough that three Nodes made NotReady one after the other are all NotReady
            // before the first is due.
            after: Duration::from_secs(5),
            // The default: 2 of the 5 Nodes.
            max_unhealthy: MaxUnhealthy::Percent(40),
            recovery: Recovery::PowerOn,
            remediations_only: false,
            crash_point: None,
        },
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(ingot_controllers::fencing::run(ctx, async move {
        let _ = stopped.await;
    }));

    // A Pod on n0, which the taint would have deleted (no kube-controller-manager here).
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "app"},
        "spec": {"nodeName": f.node(0), "containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();

    // n0 dies: one power-off Job, recorded on the Node; no taint yet.
    f.set_ready(0, false).await;
    let off = eventually("the power-off Job", || async {
        let jobs = f.jobs(0).await;
        (jobs.len() == 1).then(|| jobs[0].name_any())
    })
    .await;
    assert!(off.starts_with("inv0-fence-off-"), "{off}");
    let job = f.jobs(0).await.remove(0);
    assert_eq!(
        serde_json::to_value(&job.spec.tasks).unwrap(),
        json!([{"powerAction": "off"}])
    );
    eventually("the power-off recorded", || async {
        (f.annotation(0, POWER_OFF_JOB).await.as_deref() == Some(off.as_str())).then_some(())
    })
    .await;
    assert!(!f.tainted(0).await);
    // The Job completes, the Machine still reads on: never assumed off.
    f.complete_job(&off).await;
    eventually("the wait for the BMC to read off", || async {
        (f.annotation(0, HELD).await.as_deref() == Some("FencingAwaitingPowerOff")).then_some(())
    })
    .await;
    assert!(
        !f.tainted(0).await,
        "tainted before the BMC read the power off"
    );
    // The BMC reads off: the taint, and ingot's record of it.
    f.set_power(0, "off", true).await;
    eventually("the out-of-service taint", || async {
        f.tainted(0).await.then_some(())
    })
    .await;
    assert_eq!(
        f.annotation(0, TAINT_RECORD).await.as_deref(),
        Some("added")
    );
    eventually("nodeFenced on the Inventory", || async {
        (f.condition(0, NODE_FENCED).await.map(|c| c.0).as_deref() == Some("True")).then_some(())
    })
    .await;
    // Its pod is still there: no power-on. Once it is gone: one power-on Job.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        f.jobs(0).await.len(),
        1,
        "powered on while its pods were still there"
    );
    pods.delete("app", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let on = eventually("the power-on Job", || async {
        f.annotation(0, POWER_ON_JOB).await
    })
    .await;
    assert!(on.starts_with("inv0-fence-on-"), "{on}");
    let jobs = f.jobs(0).await;
    assert_eq!(jobs.len(), 2, "one power-off and one power-on");
    // Back: the taint and the record go; no further power action.
    f.set_power(0, "on", true).await;
    f.set_ready(0, true).await;
    eventually("the taint removed", || async {
        (!f.tainted(0).await && f.annotation(0, POWER_OFF_JOB).await.is_none()).then_some(())
    })
    .await;
    assert_eq!(f.annotation(0, TAINT_RECORD).await, None);
    // The episode's Jobs go with the record.
    eventually("the episode's Jobs deleted", || async {
        f.jobs(0).await.is_empty().then_some(())
    })
    .await;
    for reason in [
        "FencingPowerOff",
        "Fenced",
        "FencingPowerOn",
        "FencingRecovered",
    ] {
        eventually(&format!("a {reason} Event"), || async {
            f.event(0, reason).await.then_some(())
        })
        .await;
    }
    let action = |action| {
        metrics
            .fencing
            .power_actions
            .get_or_create(&ingot_controllers::metrics::ActionLabels { action })
            .get()
    };
    assert_eq!((action("off"), action("on")), (1, 1));
    assert_eq!(metrics.fencing.fenced.get(), 1);
    assert_eq!(metrics.fencing.recovered.get(), 1);

    // Three of five NotReady: a partition is suspected, nothing is fenced. Ready Nodes no
    // Inventory names (here five) are not in the fleet: they do not dilute the budget.
    for i in 0..5 {
        let name = format!("{}-other{i}", f.ns);
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        Api::<Node>::all(client.clone())
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{
                    "type": "Ready", "status": "True", "reason": "Test",
                    "lastHeartbeatTime": now, "lastTransitionTime": now,
                }]}})),
            )
            .await
            .unwrap();
    }
    for i in 1..4 {
        f.set_ready(i, false).await;
    }
    for i in 1..4 {
        f.held(i, "FencingHeldPartitionSuspected").await;
        assert_eq!(
            f.condition(i, FENCING_HELD).await,
            Some(("True".into(), Some("Error".into())))
        );
    }
    for i in 1..4 {
        f.set_ready(i, true).await;
    }
    for i in 1..4 {
        eventually("the hold cleared", || async {
            f.annotation(i, HELD).await.is_none().then_some(())
        })
        .await;
    }

    // Maintenance, a person's cordon, a BMC that cannot be read: never powered off.
    Api::<Node>::all(client.clone())
        .patch(
            f.node(1),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "harvesterhci.io/maintain-status": "running"}}})),
        )
        .await
        .unwrap();
    Api::<Node>::all(client.clone())
        .patch(
            f.node(2),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    f.set_ready(1, false).await;
    f.set_ready(2, false).await;
    f.held(1, "FencingHeldMaintenance").await;
    f.held(2, "FencingHeldCordoned").await;
    f.set_ready(1, true).await;
    f.set_ready(2, true).await;
    f.set_power(3, "unknown", false).await;
    f.set_ready(3, false).await;
    f.held(3, "FencingHeldBMCUnknown").await;
    let held = |reason| {
        metrics
            .fencing
            .held
            .get_or_create(&ingot_controllers::metrics::ReasonLabels { reason })
            .get()
    };
    assert_eq!(held("FencingHeldPartitionSuspected"), 3, "once per Node");
    assert_eq!(held("FencingHeldMaintenance"), 1);
    // Still not, a while later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(f.jobs(3).await.is_empty());

    // A crash between creating the power-off Job and recording it: the next pass finds the
    // episode's Job and goes on with it; no second power-off is sent.
    let since = "2026-01-01T00:00:00Z";
    let mut node = f.get(4).await;
    node.status.as_mut().unwrap().conditions = Some(vec![
        serde_json::from_value(json!({
        "type": "Ready", "status": "Unknown", "lastTransitionTime": since}))
        .unwrap(),
    ]);
    let name = ingot_controllers::fencing::execute::job_name(
        &f.inventory(4),
        &ingot_controllers::fencing::execute::episode(&node),
        "off",
    );
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {JOB_NODE_LABEL: f.node(4)}},
        "spec": {"machineRef": {"name": f.inventory(4), "namespace": ns},
            "tasks": [{"powerAction": "off"}]}
    }))
    .unwrap();
    Api::<Job>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    f.set_ready(3, true).await;
    f.set_ready_at(4, false, since).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    f.complete_job(&name).await;
    f.set_power(4, "off", true).await;
    eventually("the adopted power-off's taint", || async {
        f.tainted(4).await.then_some(())
    })
    .await;
    assert_eq!(
        f.annotation(4, POWER_OFF_JOB).await.as_deref(),
        Some(name.as_str())
    );
    // (Its power-on may follow: it has no pods.)
    let power_offs: Vec<String> = f
        .jobs(4)
        .await
        .iter()
        .map(|j| j.name_any())
        .filter(|n| n.contains("-fence-off-"))
        .collect();
    assert_eq!(
        power_offs,
        vec![name.clone()],
        "a second power-off was sent"
    );
    assert_eq!(action("off"), 1, "only n0's power-off was sent by fencing");

    let _ = stop.send(());
    let _ = controller.await;
    let others = (0..5).map(|i| format!("{}-other{i}", f.ns));
    for node in f.nodes.iter().cloned().chain(others) {
        let _ = Api::<Node>::all(client.clone())
            .delete(&node, &DeleteParams::default())
            .await;
    }
}
