//! Fencing end to end: `ingot run --controllers fencing` as its own process, with the token of
//! the ServiceAccount the plain manifests (deploy/manifests/fencing.yaml) install and the flags
//! the chart renders from its `fencing` values, against a control plane whose real
//! kube-controller-manager runs its node lifecycle, taint-eviction and pod garbage-collector
//! controllers. Five Nodes, whose `Ready` the test posts every second as a kubelet would, each
//! named by an Inventory whose Machine is a real BMC peer: four systems of sushy-tools (Redfish,
//! fake driver) and OpenIPMI's ipmi_sim. Every power state is read back from the peer itself
//! (sushy's Redfish `PowerState`, `ipmitool chassis power status`), never from ingot's objects.
//!
//! One fleet, one scenario after the other (fencing counts every Node):
//! 1. a sushy Node and the ipmi_sim Node stop heartbeating: kube-controller-manager marks them
//!    NotReady, their servers are powered off (the peers read off), only then are they tainted
//!    out of service, kube-controller-manager deletes their pods, the servers are powered on
//!    (the peers read on), and the Nodes back Ready lose the taint;
//! 2. three of five stop: nothing is powered off, each says `FencingHeldPartitionSuspected`;
//! 3. a Node in maintenance stops: never powered off (`FencingHeldMaintenance`), while the
//!    ipmi_sim Node, its ipmi_sim stopped, is never taken for off (`FencingHeldBMCUnknown`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use ingot_ipmi_sim::FruInfo;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rufio_support::{
    Operator, SushySystem, create_secret, machine_sample, peers, start_sushy_tls_with,
};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(120);
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
const HELD: &str = "fencing.ingot.dev/held";
const MAINTAIN_STATUS: &str = "harvesterhci.io/maintain-status";
const JOB_NODE_LABEL: &str = "fencing.ingot.dev/node";
const USER: &str = "admin";
const PASSWORD: &str = "t0p-Secret";
/// `fencing.afterSeconds`: longer than kube-controller-manager's monitor period (1 s), so
/// that Nodes that stop together are all NotReady before the first of them is a candidate.
const AFTER_SECONDS: u64 = 4;

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The kubelets of the five Nodes: every second, each Node not silenced gets `Ready=True` with
/// a fresh heartbeat (its transition time kept since it last came back).
#[derive(Clone)]
struct Kubelets {
    /// Node → the `lastTransitionTime` of its Ready; a Node not in it is silent.
    posting: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Kubelets {
    fn start(client: Client, nodes: &[String]) -> Self {
        let posting = Arc::new(Mutex::new(
            nodes.iter().map(|n| (n.clone(), now())).collect(),
        ));
        let kubelets = Kubelets { posting };
        let this = kubelets.clone();
        tokio::spawn(async move {
            let api: Api<Node> = Api::all(client);
            loop {
                let posting = this.posting.lock().unwrap().clone();
                for (node, since) in posting {
                    let heartbeat = now();
                    let _ = api
                        .patch_status(
                            &node,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"conditions": [{
                                "type": "Ready", "status": "True", "reason": "KubeletReady",
                                "lastHeartbeatTime": heartbeat, "lastTransitionTime": since,
                            }]}})),
                        )
                        .await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        kubelets
    }

    fn stop(&self, node: &str) {
        self.posting.lock().unwrap().remove(node);
    }

    fn resume(&self, node: &str) {
        self.posting.lock().unwrap().insert(node.to_owned(), now());
    }
}

/// A Node's BMC, as the test reads it: from the peer, not from ingot's Machine.
enum Peer<'a> {
    Sushy {
        sushy: &'a peers::Sushy,
        system: &'static str,
    },
    Ipmi(&'a Mutex<peers::IpmiSim>),
}

impl Peer<'_> {
    /// `On` or `Off` as the peer reports it (`None` when it does not answer).
    async fn power(&self) -> Option<String> {
        match self {
            Peer::Sushy { sushy, system } => sushy
                .system_named(USER, PASSWORD, system)
                .await
                .and_then(|s| s["PowerState"].as_str().map(str::to_owned)),
            Peer::Ipmi(sim) => {
                let out = tokio::task::block_in_place(|| {
                    sim.lock()
                        .unwrap()
                        .ipmitool(&["chassis", "power", "status"])
                });
                match out.as_str() {
                    "Chassis Power is on" => Some("On".to_owned()),
                    "Chassis Power is off" => Some("Off".to_owned()),
                    _ => None,
                }
            }
        }
    }
}

fn tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == OUT_OF_SERVICE && t.effect == "NoExecute")
        })
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

fn completed(job: &Job) -> bool {
    serde_json::to_value(&job.status).unwrap()["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Completed" && c["status"] == "True")
}

struct Fleet {
    client: Client,
    nodes: Api<Node>,
    pods: Api<Pod>,
    jobs: Api<Job>,
    kubelets: Kubelets,
}

impl Fleet {
    async fn node(&self, name: &str) -> Node {
        self.nodes.get(name).await.unwrap()
    }

    async fn jobs_of(&self, node: &str) -> Vec<Job> {
        self.jobs
            .list(&ListParams::default().labels(&format!("{JOB_NODE_LABEL}={node}")))
            .await
            .unwrap()
            .items
    }

    /// The reasons of the Events on the Node (events.k8s.io, in `default`).
    async fn event_reasons(&self, node: &str) -> BTreeSet<String> {
        Api::<Event>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Node") && r.name.as_deref() == Some(node)
                })
            })
            .filter_map(|e| e.reason)
            .collect()
    }

    /// Waits until the Node is held for `reason` (its annotation and an Event); it never gets
    /// a power Job meanwhile.
    async fn wait_held(&self, node: &str, reason: &str) {
        ingot_testenv::wait_for(&format!("{node} held: {reason}"), DEADLINE, || async {
            assert!(
                self.jobs_of(node).await.is_empty(),
                "{node}: a power Job, where it should be held ({reason})"
            );
            (self
                .node(node)
                .await
                .annotations()
                .get(HELD)
                .map(String::as_str)
                == Some(reason))
            .then_some(())
        })
        .await;
        ingot_testenv::wait_for(
            &format!("the Event {reason} on {node}"),
            DEADLINE,
            || async {
                self.event_reasons(node)
                    .await
                    .contains(reason)
                    .then_some(())
            },
        )
        .await;
    }

    async fn wait_ready_and_clean(&self, node: &str) {
        ingot_testenv::wait_for(
            &format!("{node} Ready, nothing of fencing left on it"),
            DEADLINE,
            || async {
                let n = self.node(node).await;
                let clean = !tainted(&n)
                    && !n
                        .annotations()
                        .keys()
                        .any(|k| k.starts_with("fencing.ingot.dev/"));
                (ready(&n).as_deref() == Some("True") && clean).then_some(())
            },
        )
        .await;
    }

    /// One Node fenced end to end: it stops heartbeating, kube-controller-manager marks it
    /// NotReady, its BMC is powered off, it is tainted only once the peer reads off and the
    /// power-off Job completed, kube-controller-manager deletes its pod, the peer is powered
    /// on, and once the kubelet is back the taint goes.
    async fn fence(&self, node: &str, peer: &Peer<'_>) {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": node},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}))
        .unwrap();
        self.pods
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        assert_eq!(peer.power().await.as_deref(), Some("On"), "{node}");
        self.kubelets.stop(node);
        ingot_testenv::wait_for(
            &format!("kube-controller-manager's NotReady on {node}"),
            DEADLINE,
            || async {
                (ready(&self.node(node).await).as_deref() == Some("Unknown")).then_some(())
            },
        )
        .await;
        // Until the taint: the pod stays (kube-controller-manager's own taints tolerated for
        // 300 s); once it shows, the peer reads off and the power-off Job completed.
        ingot_testenv::wait_for(
            &format!("{node} tainted out of service"),
            DEADLINE,
            || async {
                let n = self.node(node).await;
                let power = peer.power().await;
                if !tainted(&n) {
                    assert!(
                        self.pods.get_opt(node).await.unwrap().is_some(),
                        "{node}: its pod went before the taint"
                    );
                    return None;
                }
                assert_eq!(
                    power.as_deref(),
                    Some("Off"),
                    "{node} tainted while its BMC reads {power:?}"
                );
                let jobs = self.jobs_of(node).await;
                assert_eq!(jobs.len(), 1, "{node}: one power-off Job");
                assert!(
                    completed(&jobs[0]),
                    "{node} tainted before its power-off Job completed"
                );
                Some(())
            },
        )
        .await;
        ingot_testenv::wait_for(
            &format!("kube-controller-manager deleting {node}'s pod"),
            DEADLINE,
            || async {
                self.pods
                    .get_opt(node)
                    .await
                    .unwrap()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        ingot_testenv::wait_for(
            &format!("{node}'s BMC powered on again"),
            DEADLINE,
            || async { (peer.power().await.as_deref() == Some("On")).then_some(()) },
        )
        .await;
        assert!(
            tainted(&self.node(node).await),
            "{node}: the taint stays until Ready"
        );
        self.kubelets.resume(node);
        self.wait_ready_and_clean(node).await;
        ingot_testenv::wait_for(&format!("{node}'s Jobs deleted"), DEADLINE, || async {
            self.jobs_of(node).await.is_empty().then_some(())
        })
        .await;
        // The Events, each published once its step's writes are done.
        for reason in [
            "FencingPowerOff",
            "Fenced",
            "FencingPowerOn",
            "FencingRecovered",
        ] {
            ingot_testenv::wait_for(
                &format!("the Event {reason} on {node}"),
                DEADLINE,
                || async {
                    self.event_reasons(node)
                        .await
                        .contains(reason)
                        .then_some(())
                },
            )
            .await;
        }
    }

    /// Nothing of fencing was done to the Node: no Job, no taint, the peer on.
    async fn untouched(&self, node: &str, peer: &Peer<'_>) {
        assert!(self.jobs_of(node).await.is_empty(), "{node}: a power Job");
        assert!(!tainted(&self.node(node).await), "{node}: tainted");
        assert_eq!(
            peer.power().await.as_deref(),
            Some("On"),
            "{node}: powered off"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_nodes_are_fenced_through_sushy_and_ipmi_sim_and_held_when_they_must_not_be() {
    let started = Instant::now();
    let plane = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
        watchdog_parent: Some(std::process::id()),
        controller_manager_args: vec![
            "--controllers=node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller".into(),
            "--node-monitor-period=1s".into(),
            "--node-monitor-grace-period=10s".into(),
            "--node-startup-grace-period=10s".into(),
        ],
        ..ingot_testenv::Options::from_env().unwrap()
    })
    .await
    .unwrap();
    let admin = plane.kubeconfig_path().to_owned();
    let env = ingot_testenv::TestEnv::connect(&admin).await.unwrap();
    let client = env.client().unwrap();
    let ns = env.namespace("fencing-e2e").await.unwrap();
    // The identity: what deploy/manifests/fencing.yaml installs, as a user without Helm does.
    let service_account = chart_support::install_from_manifests(&admin, "fencing");

    // The BMCs: four systems on sushy-tools, one ipmi_sim.
    let more = ["n2", "n3", "n4"].map(|name| SushySystem {
        name,
        uuid: match name {
            "n2" => "0b6c8f4e-0000-4000-8000-000000000002",
            "n3" => "0b6c8f4e-0000-4000-8000-000000000003",
            _ => "0b6c8f4e-0000-4000-8000-000000000004",
        },
        power_state: "On",
    });
    let sushy = start_sushy_tls_with(USER, PASSWORD, &more);
    let sim = peers::start_ipmi_sim(&FruInfo::example(5).encode());
    sim.wait_answering().await;
    create_secret(&client, &ns, "sushy-auth", USER, PASSWORD).await;
    create_secret(
        &client,
        &ns,
        "ipmi-auth",
        peers::IPMI_USER,
        peers::IPMI_PASSWORD,
    )
    .await;

    let names: Vec<String> = (1..=5).map(|i| format!("{ns}-n{i}")).collect();
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &names {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let kubelets = Kubelets::start(client.clone(), &names);
    let systems = ["fake", "n2", "n3", "n4"];
    for (i, name) in names.iter().enumerate() {
        let inventory = format!("inv{}", i + 1);
        let (secret, options) = match systems.get(i) {
            Some(system) => (
                "sushy-auth",
                json!({"redfish": {"port": sushy.port, "systemName": system}}),
            ),
            None => (
                "ipmi-auth",
                json!({"ipmitool": {"port": sim.addr.port(), "cipherSuite": "3"}}),
            ),
        };
        let inventory_object: Inventory = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": inventory, "annotations": {
                "metal.harvesterhci.io/local-inventory": "true",
                "metal.harvesterhci.io/local-node-name": name}},
            "spec": {"baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 623,
                "insecureTLS": true, "authSecretRef": {"name": secret, "namespace": ns}}},
                "events": {"enabled": false, "pollingInterval": "1h"}}
        }))
        .unwrap();
        Api::<Inventory>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &inventory_object)
            .await
            .unwrap();
        let machine = machine_sample(&ns, &inventory, secret, "127.0.0.1", options);
        Api::<Machine>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
    }

    // The flags, as the chart renders them from its values.
    let deployment: serde_yaml::Value = serde_yaml::from_str(&chart_support::render(
        "ingot",
        chart_support::MANIFESTS_NAMESPACE,
        &[
            "controllers={fencing}".to_owned(),
            format!("fencing.afterSeconds={AFTER_SECONDS}"),
            "fencing.maxUnhealthy=40%".to_owned(),
            "fencing.recovery=power-on".to_owned(),
            "rufio.machineIntervalSeconds=1".to_owned(),
        ],
        &["--show-only", "templates/deployment.yaml"],
    ))
    .unwrap();
    let flags: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .filter(|a| a.starts_with("--fencing-") || a.starts_with("--rufio-"))
        .collect();
    assert_eq!(
        flags,
        [
            "--rufio-machine-interval-seconds=1".to_owned(),
            format!("--fencing-after-seconds={AFTER_SECONDS}"),
            "--fencing-max-unhealthy=40%".to_owned(),
            "--fencing-recovery=power-on".to_owned(),
        ]
    );
    let ingot = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("fencing-e2e")
        .kubeconfig(&service_account)
        .arg(format!(
            "--lease-namespace={}",
            chart_support::MANIFESTS_NAMESPACE
        ))
        .arg("--lease-name=ingot")
        .arg("--lease-duration-seconds=3")
        .controllers("fencing")
        .args(flags)
        .arg("--rufio-task-poll-seconds=0.3")
        .arg("--rufio-redfish-timeout-seconds=3")
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();

    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    for i in 1..=5 {
        ingot_testenv::wait_for(&format!("inv{i} read on"), DEADLINE, || async {
            let status = machines.get(&format!("inv{i}")).await.unwrap().status?;
            (status.power_state.as_deref() == Some("on")).then_some(())
        })
        .await;
    }
    let fleet = Fleet {
        client: client.clone(),
        nodes: nodes.clone(),
        pods: Api::namespaced(client.clone(), &ns),
        jobs: Api::namespaced(client.clone(), &ns),
        kubelets,
    };
    let sim = Mutex::new(sim);
    let peer = |i: usize| match systems.get(i) {
        Some(&system) => Peer::Sushy {
            sushy: &sushy,
            system,
        },
        None => Peer::Ipmi(&sim),
    };
    ingot_testenv::wait_for("every Node Ready", DEADLINE, || async {
        for name in &names {
            if ready(&fleet.node(name).await).as_deref() != Some("True") {
                return None;
            }
        }
        Some(())
    })
    .await;

    // 1. A Redfish Node and the IPMI Node die (2 of 5, within 40 %): each fenced and back.
    let (redfish, ipmi) = (peer(0), peer(4));
    tokio::join!(
        fleet.fence(&names[0], &redfish),
        fleet.fence(&names[4], &ipmi),
    );

    // 2. Three of five stop: a partition is suspected, nothing is powered off.
    for name in &names[1..4] {
        fleet.kubelets.stop(name);
    }
    for name in &names[1..4] {
        fleet.wait_held(name, "FencingHeldPartitionSuspected").await;
    }
    // Longer than the delay again: still nothing.
    tokio::time::sleep(Duration::from_secs(AFTER_SECONDS + 3)).await;
    for (i, name) in names.iter().enumerate() {
        fleet.untouched(name, &peer(i)).await;
    }
    for name in &names[1..4] {
        fleet.kubelets.resume(name);
    }
    for name in &names[1..4] {
        fleet.wait_ready_and_clean(name).await;
    }

    // 3. A Node in maintenance stops, and the IPMI Node stops with its BMC gone (2 of 5):
    // neither is powered off nor tainted.
    nodes
        .patch(
            &names[1],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MAINTAIN_STATUS: "running"}}})),
        )
        .await
        .unwrap();
    sim.lock().unwrap().stop();
    ingot_testenv::wait_for("the IPMI Machine not contactable", DEADLINE, || async {
        let status = machines.get("inv5").await.unwrap().status?;
        let contactable = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Contactable" && c.status == "True");
        (!contactable).then_some(())
    })
    .await;
    fleet.kubelets.stop(&names[1]);
    fleet.kubelets.stop(&names[4]);
    fleet.wait_held(&names[1], "FencingHeldMaintenance").await;
    fleet.wait_held(&names[4], "FencingHeldBMCUnknown").await;
    tokio::time::sleep(Duration::from_secs(AFTER_SECONDS + 3)).await;
    fleet.untouched(&names[1], &peer(1)).await;
    assert!(
        fleet.jobs_of(&names[4]).await.is_empty(),
        "a power Job for an unreadable BMC"
    );
    assert!(
        !tainted(&fleet.node(&names[4]).await),
        "tainted with its BMC unreadable"
    );
    assert_eq!(peer(4).power().await, None, "ipmi_sim still answers");

    // 4. Three control-plane Nodes, two of them stop (2 of 5, within 40 %): powering either off
    // would leave one of three Ready, not a majority, so neither is fenced. (The Node in
    // maintenance leaves it once Ready: NotReady, it would be fenced at once.)
    fleet.kubelets.resume(&names[1]);
    fleet.kubelets.resume(&names[4]);
    fleet.wait_ready_and_clean(&names[1]).await;
    nodes
        .patch(
            &names[1],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MAINTAIN_STATUS: null}}})),
        )
        .await
        .unwrap();
    fleet.wait_ready_and_clean(&names[4]).await;
    for name in &names[1..4] {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {
                    "node-role.kubernetes.io/control-plane": "true"}}})),
            )
            .await
            .unwrap();
    }
    fleet.kubelets.stop(&names[1]);
    fleet.kubelets.stop(&names[2]);
    fleet.wait_held(&names[1], "FencingHeldEtcdQuorum").await;
    fleet.wait_held(&names[2], "FencingHeldEtcdQuorum").await;
    tokio::time::sleep(Duration::from_secs(AFTER_SECONDS + 3)).await;
    fleet.untouched(&names[1], &peer(1)).await;
    fleet.untouched(&names[2], &peer(2)).await;

    assert!(ingot.is_running(), "ingot exited:\n{}", ingot.log_tail());
    ingot.kill();
    ingot_testenv::keep_audit_log(&plane, "fencing-e2e").unwrap();
    println!(
        "fencing end to end in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
