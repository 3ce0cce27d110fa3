//! Seeder's embedded mode end to end on the real control plane: the HEP's Secret and Inventory
//! (from the shared seeds; only host, port and credentials changed) against real BMC peers
//! (sushy-tools over TLS, OpenIPMI's ipmi_sim), driven by `ingot run --controllers seeder`, with
//! each power action checked on the peer itself. Objects in the Go Seeder's shapes are adopted,
//! and a dead BMC is judged without holding the others up.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::{Cluster, Inventory};
use ingot_bmc_sim::{BmcSpec, Fault, Fleet, FleetOptions};
use ingot_ipmi_sim::FruInfo;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Secret, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rufio_support::*;
use serde_json::{Value, json};

const NS: &str = "harvester-system";
const HEP_NAME: &str = "harvester-659jw";
const IPMI_NAME: &str = "harvester-ipmi";
const DEAD_NAME: &str = "harvester-dead";
const GO_NAME: &str = "harvester-go";
const SIM_NAME: &str = "harvester-sim";
const MEMBERSHIP_FINALIZER: &str = "seeder.ingot.dev/local-cluster-membership";
const SEEDER_FINALIZER: &str = "finalizer.inventory.metal.harvesterhci.io";

/// The HEP's three JSON blocks: the Secret, the Inventory and its status.
fn hep() -> (Value, Value) {
    let text = ingot_compat::shared_file("seeds/harvester-seeder-embedded-mode-HEP.md");
    let blocks = ingot_compat::fenced_blocks(&text, "json");
    let mut secret: Value = serde_json::from_str(&blocks[0]).unwrap();
    secret["apiVersion"] = json!("v1");
    secret["kind"] = json!("Secret");
    let mut inventory: Value = serde_json::from_str(&blocks[1]).unwrap();
    inventory["apiVersion"] = json!("metal.harvesterhci.io/v1alpha1");
    (secret, inventory)
}

/// The HEP Secret's credentials (kept for sushy: only host and port change for it).
fn hep_credentials() -> (String, String) {
    let secret: Secret = serde_json::from_value(hep().0).unwrap();
    let data = secret.data.unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    (text("username"), text("password"))
}

/// The HEP Inventory renamed (name, Secret and Node), with this host and port, its BMC polled
/// every second.
fn hep_inventory(name: &str, host: &str, port: u16) -> Inventory {
    let mut v = hep().1;
    v["spec"]["events"] = json!({"enabled": true, "pollingInterval": "1s"});
    v["metadata"]["name"] = json!(name);
    v["metadata"]["annotations"]["metal.harvesterhci.io/localNodeName"] = json!(name);
    v["spec"]["baseboardSpec"]["connection"]["host"] = json!(host);
    v["spec"]["baseboardSpec"]["connection"]["port"] = json!(port);
    v["spec"]["baseboardSpec"]["connection"]["authSecretRef"]["name"] = json!(name);
    serde_json::from_value(v).unwrap()
}

fn hep_secret(name: &str, user: &str, password: &str) -> Secret {
    let mut secret: Secret = serde_json::from_value(hep().0).unwrap();
    secret.metadata.name = Some(name.into());
    secret.data = Some(BTreeMap::from([
        ("username".into(), ByteString(user.as_bytes().to_vec())),
        ("password".into(), ByteString(password.as_bytes().to_vec())),
    ]));
    secret
}

fn node(name: &str, address: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {"addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": name}
        ]}
    }))
    .unwrap()
}

/// Removes everything a previous run could have left in harvester-system.
async fn clean(client: &Client) {
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await;
    // The power action API's certificate is made again by the first start.
    let _ = Api::<Secret>::namespaced(client.clone(), chart_support::MANIFESTS_NAMESPACE)
        .delete("ingot-power-api-tls", &DeleteParams::default())
        .await;
    let unfinalize = json!({"metadata": {"finalizers": null}});
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    for i in inventories.list(&Default::default()).await.unwrap() {
        let _ = inventories
            .patch(
                &i.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&unfinalize),
            )
            .await;
    }
    for m in machines.list(&Default::default()).await.unwrap() {
        let _ = machines
            .patch(
                &m.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&unfinalize),
            )
            .await;
    }
    let dp = DeleteParams::default();
    let _ = inventories
        .delete_collection(&dp, &Default::default())
        .await;
    let _ = machines.delete_collection(&dp, &Default::default()).await;
    let _ = Api::<Job>::namespaced(client.clone(), NS)
        .delete_collection(&dp, &Default::default())
        .await;
    let _ = Api::<Cluster>::namespaced(client.clone(), NS)
        .delete("local", &dp)
        .await;
    for n in [HEP_NAME, IPMI_NAME, DEAD_NAME, GO_NAME, SIM_NAME] {
        let _ = Api::<Node>::all(client.clone()).delete(n, &dp).await;
        let _ = Api::<Secret>::namespaced(client.clone(), NS)
            .delete(n, &dp)
            .await;
    }
    wait_for(
        "harvester-system emptied",
        Duration::from_secs(20),
        || async {
            let left = inventories
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .len()
                + machines
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .len();
            (left == 0).then_some(())
        },
    )
    .await;
}

async fn inventory(client: &Client, name: &str) -> Inventory {
    Api::<Inventory>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap()
}

async fn status(client: &Client, name: &str) -> Value {
    serde_json::to_value(inventory(client, name).await.status).unwrap()
}

/// A wrangler condition of the Inventory: (status, reason, message).
fn wrangler(status: &Value, type_: &str) -> Option<(String, String, String)> {
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    Some((s("status"), s("reason"), s("message")))
}

async fn wait_ready(client: &Client, name: &str, within: Duration, ingot: &Operator) -> Value {
    wait_for(&format!("Inventory {name} ready"), within, || async {
        let s = status(client, name).await;
        (s["status"] == "inventoryNodeReady").then_some(s)
    })
    .await;
    let s = status(client, name).await;
    assert_eq!(
        s["status"],
        "inventoryNodeReady",
        "{s}\n{}",
        ingot.log_tail()
    );
    s
}

/// Harvester's `powerAction` handler: refuses while the last action has no answer, then sets
/// `spec.powerActionRequested` and clears `status.powerAction.lastJobName` (two writes).
/// Puts the Node in Harvester's maintenance mode, or takes it out.
async fn set_maintenance(client: &Client, node: &str, on: bool) {
    let value = if on { json!("completed") } else { Value::Null };
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"harvesterhci.io/maintain-status": value}}}),
            ),
        )
        .await
        .unwrap();
}

/// The Jobs of this Inventory's requests of this action.
async fn jobs_of(client: &Client, name: &str, operation: &str) -> Vec<String> {
    let prefix = format!("{name}-{operation}-");
    Api::<Job>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("inventory.metal.harvesterhci.io={name}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(|j| j.name_any())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// Harvester's request, on a Node in maintenance (as its UI offers power actions only then).
async fn request_power(client: &Client, name: &str, operation: &str) {
    set_maintenance(client, name, true).await;
    request_power_anyway(client, name, operation).await;
}

/// Harvester's request, whatever the Node's maintenance.
async fn request_power_anyway(client: &Client, name: &str, operation: &str) {
    let api: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let current = inventory(client, name).await;
    let pa = current.status.clone().unwrap_or_default().power_action;
    if current.spec.power_action_requested.is_some() {
        assert!(
            pa.action_status.as_deref().is_some_and(|s| !s.is_empty()),
            "Harvester would refuse: no answer yet for {name}: {pa:?}"
        );
    }
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"powerActionRequested": operation}})),
    )
    .await
    .unwrap();
    let mut pa = serde_json::to_value(&pa).unwrap();
    pa["lastJobName"] = json!("");
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"powerAction": pa}})),
    )
    .await
    .unwrap();
}

/// Waits for the answer to the request: a new Job of this action, then `complete`.
async fn wait_power(
    client: &Client,
    name: &str,
    operation: &str,
    ingot: &Operator,
) -> (Value, Job) {
    let prefix = format!("{name}-{operation}-");
    let asked = Instant::now();
    let s = wait_for(
        &format!("{operation} on {name} to be answered"),
        Duration::from_secs(40),
        || async {
            let s = status(client, name).await;
            let job = s["powerAction"]["lastJobName"].as_str().unwrap_or_default();
            (job.starts_with(&prefix) && s["powerAction"]["actionStatus"].is_string()).then_some(s)
        },
    )
    .await;
    assert_eq!(
        s["powerAction"]["actionStatus"],
        "complete",
        "{s}\n{}",
        ingot.log_tail()
    );
    assert_eq!(wrangler(&s, "bmcJobCompleted").unwrap().0, "True", "{s}");
    assert_eq!(wrangler(&s, "bmcJobSubmitted").unwrap().0, "False", "{s}");
    let job_name = s["powerAction"]["lastJobName"].as_str().unwrap();
    eprintln!("{operation} on {name} answered after {:?}", asked.elapsed());
    let job = Api::<Job>::namespaced(client.clone(), NS)
        .get(job_name)
        .await
        .unwrap();
    check_job_shape(&job, name, operation, &inventory(client, name).await);
    if job.spec.tasks.len() > 1 {
        // The Job recorded its first Task's completion as it created the next (with the
        // chart's RBAC: the operator may patch Jobs).
        assert_eq!(
            job.annotations()
                .get("rufio.ingot.dev/tasks-completed")
                .map(String::as_str),
            Some(format!("{}:1", job.uid().unwrap()).as_str()),
            "{:?}",
            job.metadata.annotations
        );
    }
    (s, job)
}

/// Seeder's GenerateJob shape.
fn check_job_shape(job: &Job, inventory: &str, operation: &str, owner: &Inventory) {
    assert_eq!(
        job.metadata.generate_name.as_deref(),
        Some(format!("{inventory}-{operation}-").as_str())
    );
    assert_eq!(
        job.labels()
            .get("inventory.metal.harvesterhci.io")
            .map(String::as_str),
        Some(inventory)
    );
    let owners = job.owner_references();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].kind, "Inventory");
    assert_eq!(owners[0].uid, owner.uid().unwrap());
    assert_eq!(job.spec.machine_ref.name.as_deref(), Some(inventory));
    let tasks = serde_json::to_value(&job.spec.tasks).unwrap();
    let expected = match operation {
        "shutdown" => json!([{"powerAction": "off"}]),
        "poweron" => json!([{"powerAction": "on"}]),
        _ => json!([{"powerAction": "off"}, {"powerAction": "on"}]),
    };
    assert_eq!(tasks, expected);
}

/// A series of ingot's /metrics at `http_port` (0 while absent); `None` when it does not answer.
async fn series(http_port: u16, series: &str) -> Option<f64> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], http_port));
    let text = ingot_testenv::harness::operator::scrape(addr).await.ok()?;
    let metrics = ingot_testenv::harness::operator::parse_metrics(&text);
    Some(metrics.get(series).copied().unwrap_or_default())
}

/// How many Node patches ingot has sent (its `ingot_kube_requests_total`).
async fn node_patches(http_port: u16) -> f64 {
    kube_requests(http_port, "patch", "nodes").await
}

/// How many requests of this verb on this resource ingot has sent (`ingot_kube_requests_total`).
async fn kube_requests(http_port: u16, verb: &str, resource: &str) -> f64 {
    let name = format!(r#"ingot_kube_requests_total{{verb="{verb}",resource="{resource}"}}"#);
    series(http_port, &name)
        .await
        .expect("ingot's /metrics answers")
}

/// How many BMC reads the hardware poller has made: its inventory reads, the one BMC call
/// only the poller makes (its reconciles also count passes that wait for their turn).
async fn hardware_polls(http_port: u16) -> f64 {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], http_port));
    let text = ingot_testenv::harness::operator::scrape(addr)
        .await
        .unwrap_or_default();
    ingot_testenv::harness::operator::sum_of(
        &text,
        "ingot_bmc_requests_total",
        &[r#"operation="inventory""#],
    )
}

/// How many passes the Inventory controller has made (its `ingot_reconciliations_total`).
async fn inventory_passes(http_port: u16) -> f64 {
    let name = r#"ingot_reconciliations_total{controller="seeder-inventory"}"#;
    series(http_port, name).await.unwrap_or_default()
}

/// The hardware labels of a Node.
async fn hardware_labels(client: &Client, node: &str) -> BTreeMap<String, String> {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .unwrap()
        .labels()
        .iter()
        .filter(|(k, _)| ["manufacturer", "model", "serialNumber"].contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The Node's `HardwareHealthy` condition: (status, reason, message).
async fn hardware_condition(client: &Client, node: &str) -> Option<(String, String, String)> {
    let n = Api::<Node>::all(client.clone()).get(node).await.ok()?;
    let c = n
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "HardwareHealthy")?;
    Some((
        c.status,
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
    ))
}

/// Seeder's hardware Events on a Node, oldest first: (type, message). Each is checked to be in
/// Seeder's shape (core Event in default, about the Node, source component boots).
async fn hardware_events(client: &Client, node: &str) -> Vec<(String, String)> {
    let mut events: Vec<Event> = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default().fields(&format!(
            "involvedObject.name={node},reason=HarvesterHardwareDiscovery"
        )))
        .await
        .unwrap()
        .items;
    events.sort_by_key(|e| (e.first_timestamp.clone().map(|t| t.0), e.name_any()));
    events
        .into_iter()
        .map(|e| {
            assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
            assert_eq!(
                e.source.as_ref().and_then(|s| s.component.as_deref()),
                Some("boots")
            );
            assert_eq!(e.count, Some(1));
            (e.type_.unwrap_or_default(), e.message.unwrap_or_default())
        })
        .collect()
}

/// ingot's hardware annotations on a Node.
async fn hardware_annotations(client: &Client, node: &str) -> BTreeMap<String, String> {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .unwrap()
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with("seeder.ingot.dev/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn labels(manufacturer: &str, model: &str, serial: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("manufacturer".to_owned(), manufacturer.to_owned()),
        ("model".to_owned(), model.to_owned()),
        ("serialNumber".to_owned(), serial.to_owned()),
    ])
}

/// `ingot run --controllers seeder` on harvester-system (rufio comes with it), scaled intervals,
/// its power action API on a port of its own choosing.
fn seeder_operator(kubeconfig: &std::path::Path) -> OperatorBuilder {
    ingot_seeder(kubeconfig, "ingot-seeder-test")
        .arg("--power-api-addr=127.0.0.1:0")
        // As the manifests run it: the certificate of a Secret ingot makes (first start) and
        // reads (the restart), with the manifests' RBAC.
        .arg("--power-api-tls-secret=ingot-power-api-tls")
        .arg("--power-api-tls-names=ingot,ingot.ingot-system,ingot.ingot-system.svc")
        .arg("--rufio-task-poll-seconds=0.3")
        .arg("--rufio-ipmi-timeout-seconds=0.5")
}

/// An Inventory, its Machine and a running Job as the Go Seeder leaves them, and its entry in a
/// local Cluster the Go Seeder made (with its constant address).
async fn go_seeder_objects(client: &Client, sim_port: u16) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let local: Cluster = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "local", "namespace": NS},
        "spec": {"clusterConfig": {}, "nodes": [{
            "addressPoolReference": {"name": "", "namespace": ""},
            "inventoryReference": {"name": GO_NAME, "namespace": NS}}],
            "version": "local", "vipConfig": {"addressPoolReference": {"name": "", "namespace": ""}}}
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &local)
        .await
        .unwrap();
    clusters
        .patch_status(
            "local",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"status": "clusterRunning", "clusterAddress": "10.53.0.1"}}),
            ),
        )
        .await
        .unwrap();

    let mut go = hep_inventory(GO_NAME, "127.0.0.1", sim_port);
    go.metadata.annotations = Some(BTreeMap::from([
        (
            "metal.harvesterhci.io/local-inventory".into(),
            "true".into(),
        ),
        (
            "metal.harvesterhci.io/local-node-name".into(),
            GO_NAME.into(),
        ),
    ]));
    go.metadata.finalizers = Some(vec![SEEDER_FINALIZER.into()]);
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let go = inventories
        .create(&PostParams::default(), &go)
        .await
        .unwrap();
    let uid = go.uid().unwrap();
    let job_name = format!("{GO_NAME}-shutdown-x7k2p");
    inventories
        .patch_status(
            GO_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "status": "inventoryNodeReady",
                "hardwareID": "5f0d2b4e-cb39-11ed-8000-0242ac120002",
                "conditions": [
                    {"type": "bmcObjectCreated", "status": "True", "lastUpdateTime": "2023-03-26T22:50:15Z"},
                    {"type": "inventoryAllocatedToCluster", "status": "True", "lastUpdateTime": "2023-03-26T22:50:16Z"},
                    {"type": "bmcJobSubmitted", "status": "True", "lastUpdateTime": "2023-03-26T22:51:15Z"},
                    {"type": "bmcJobErrorr", "status": "False", "lastUpdateTime": "2023-03-26T22:51:15Z"},
                    {"type": "bmcJobCompleted", "status": "False", "lastUpdateTime": "2023-03-26T22:51:15Z"}
                ],
                "pxeBootConfig": {"address": "10.99.0.9"},
                "ownerCluster": {"name": "", "namespace": ""},
                "powerAction": {"lastJobName": job_name}
            }})),
        )
        .await
        .unwrap();
    let owner = json!([{"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory", "name": GO_NAME, "uid": uid}]);
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
        "metadata": {"name": GO_NAME, "namespace": NS, "finalizers": [SEEDER_FINALIZER], "ownerReferences": owner},
        "spec": go.spec.baseboard_spec
    }))
    .unwrap();
    create(client, NS, &machine).await;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
        "metadata": {"name": job_name, "namespace": NS, "generateName": format!("{GO_NAME}-shutdown-"),
            "labels": {"inventory.metal.harvesterhci.io": GO_NAME}, "ownerReferences": owner},
        "spec": {"machineRef": {"name": GO_NAME, "namespace": NS}, "tasks": [{"powerAction": "off"}]}
    }))
    .unwrap();
    create(client, NS, &job).await;
}

// Seeder's embedded mode, one behaviour per test, over one shared fixture (`Embedded`): the
// peers, the objects in harvester-system and one `ingot run` are set up once per test binary,
// and each test below is one step of the cluster's life, run in this order on that fixture (a
// step starts from what the steps before it left). Each test reports its own step; a step after
// a failed one fails as not run; the fixture is torn down before the binary exits
// (`ingot_testenv::scenario!`).
ingot_testenv::scenario!(mod embedded: Embedded {
    the_healthy_bmcs_are_ready_before_the_dead_one_is_judged,
    the_inventory_status_has_the_heps_shape_and_the_nodes_address,
    each_inventory_owns_one_machine_with_seeders_finalizer,
    the_go_seeders_local_cluster_is_adopted_with_the_clusters_own_address,
    hardware_facts_become_node_labels,
    an_edited_label_is_put_back_and_unchanged_labels_are_not_written,
    each_hardware_reading_is_one_node_event,
    hardware_facts_become_node_annotations,
    a_new_reading_is_one_new_event,
    a_hung_bmc_holds_no_other_bmcs_polling,
    a_restarted_operator_says_nothing_again,
    the_go_seeders_running_job_is_followed_and_its_inventory_adopted,
    power_actions_reach_sushy_and_ipmi_sim,
    a_reboot_turns_the_peer_off_and_on_with_no_network_boot,
    a_request_out_of_maintenance_is_refused_and_reaches_no_bmc,
    a_taken_request_is_found_by_its_recorded_job_name_and_not_sent_again,
    an_operator_killed_after_creating_a_job_records_it_and_creates_no_other,
    steady_state_reads_no_jobs,
    inventory_passes_read_machines_nodes_and_jobs_from_the_caches,
    the_power_api_and_cli_act_for_permitted_callers_only,
    a_dead_bmc_is_judged_with_a_clear_condition_and_no_credentials,
    a_bmc_that_stops_answering_makes_its_inventory_not_ready,
    a_deleted_inventory_leaves_the_local_cluster_then_its_machine_goes,
    a_deleted_local_cluster_comes_back_with_its_members,
    no_credentials_are_logged,
});

/// The hardware Events said so far: of the HEP's Node (sushy), the IPMI one (ipmi_sim) and the
/// emulator's.
#[derive(Default)]
struct Said {
    hep: Vec<(String, String)>,
    ipmi: Vec<(String, String)>,
    sim: Vec<(String, String)>,
}

/// The fixture: the peers (sushy-tools over TLS, ipmi_sim, a dead BMC, later ingot's Redfish
/// emulator), the HEP's objects and the Go Seeder's in harvester-system, and `ingot run`
/// installed from the plain manifests.
struct Embedded {
    test_started: Instant,
    env: &'static ingot_testenv::TestEnv,
    client: Client,
    user: String,
    password: String,
    sushy: Sushy,
    sim: peers::IpmiSim,
    /// The Go Seeder's Inventory's BMC: its own (one Inventory per BMC).
    go_sim: peers::IpmiSim,
    /// A "BMC" that accepts connections and never answers; its IPMI port is closed.
    _dead: TcpListener,
    dead_port: u16,
    ingot: Operator,
    http_port: u16,
    inventories: Api<Inventory>,
    clusters: Api<Cluster>,
    service_ip: String,
    /// From the operator's start until both healthy BMCs' Inventories were ready.
    healthy_ready: Duration,
    hep_status: Value,
    /// ingot's Redfish emulator, the BMC of `SIM_NAME` (from the hardware Events on).
    fleet: Option<Fleet>,
    said: Said,
    /// A SEL record added to ipmi_sim with ipmitool.
    record: std::path::PathBuf,
}

/// The record of the SEL's critical threshold event `record`.
fn sel_critical(record: &str) -> (String, String) {
    (
        "Warning".to_owned(),
        format!(
            "EventLog: Temperature #0x30: asserted (event type 0x01, data 59 00 00) (severity Critical, entry sel:{record})"
        ),
    )
}

/// The members of a Cluster, sorted.
fn members(c: &Cluster) -> Vec<String> {
    let mut m: Vec<String> = c
        .spec
        .nodes
        .iter()
        .map(|n| n.inventory_reference.name.clone())
        .collect();
    m.sort();
    m
}

impl Embedded {
    async fn start() -> Self {
        let test_started = Instant::now();
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        clean(&client).await;

        let (user, password) = hep_credentials();
        let sushy = start_sushy_tls(&user, &password);
        let sim = peers::start_ipmi_sim(&FruInfo::example(3).encode());
        let go_sim = peers::start_ipmi_sim(&FruInfo::example(4).encode());
        let dead = TcpListener::bind("127.0.0.1:0").unwrap();
        let dead_port = dead.local_addr().unwrap().port();
        wait_for("sushy over TLS", Duration::from_secs(30), || async {
            sushy.system(&user, &password).await
        })
        .await;
        sim.wait_answering().await;
        go_sim.wait_answering().await;

        let nodes: Api<Node> = Api::all(client.clone());
        for (name, ip) in [
            (HEP_NAME, "172.19.109.10"),
            (IPMI_NAME, "172.19.109.11"),
            (DEAD_NAME, "172.19.109.12"),
            (GO_NAME, "172.19.109.13"),
        ] {
            nodes
                .create(&PostParams::default(), &node(name, ip))
                .await
                .unwrap();
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
        for (name, u, p) in [
            (HEP_NAME, user.as_str(), password.as_str()),
            (IPMI_NAME, peers::IPMI_USER, peers::IPMI_PASSWORD),
            (DEAD_NAME, user.as_str(), password.as_str()),
            (GO_NAME, peers::IPMI_USER, peers::IPMI_PASSWORD),
        ] {
            secrets
                .create(&PostParams::default(), &hep_secret(name, u, p))
                .await
                .unwrap();
        }
        go_seeder_objects(&client, go_sim.addr.port()).await;
        // The dead BMC first, so that it is reconciled first.
        let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
        for inv in [
            hep_inventory(
                DEAD_NAME,
                &format!("https://127.0.0.1:{dead_port}"),
                closed_port(),
            ),
            hep_inventory(HEP_NAME, &format!("https://127.0.0.1:{}", sushy.port), 623),
            hep_inventory(IPMI_NAME, "127.0.0.1", sim.addr.port()),
        ] {
            inventories
                .create(&PostParams::default(), &inv)
                .await
                .unwrap();
        }
        let service_ip = Api::<Service>::namespaced(client.clone(), "default")
            .get("kubernetes")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .unwrap();

        eprintln!("{:?}: peers and objects ready", test_started.elapsed());
        let started = Instant::now();
        // Installed as docs/migrate-from-seeder.md says, from the plain manifests, and run as
        // their ServiceAccount (the seeder group includes Rufio's RBAC): a permission the
        // manifests lack fails these tests, and the Go Seeder's objects above must be adopted.
        let kubeconfig = chart_support::install_from_manifests(env.kubeconfig_path(), "seeder");
        let ingot = seeder_operator(&kubeconfig).start();
        let http_port = ingot.http_addr().await.port();
        let hep_status = wait_ready(&client, HEP_NAME, Duration::from_secs(30), &ingot).await;
        wait_ready(&client, IPMI_NAME, Duration::from_secs(30), &ingot).await;
        let healthy_ready = started.elapsed();
        Self {
            test_started,
            env,
            clusters: Api::namespaced(client.clone(), NS),
            client,
            user,
            password,
            sushy,
            sim,
            go_sim,
            _dead: dead,
            dead_port,
            ingot,
            http_port,
            inventories,
            service_ip,
            healthy_ready,
            hep_status,
            fleet: None,
            said: Said::default(),
            record: std::env::temp_dir().join(format!("ingot-sel-{}.txt", std::process::id())),
        }
    }

    /// Stops the operator and removes what the scenario made.
    async fn finish(self) {
        self.ingot.kill();
        let _ = std::fs::remove_file(&self.record);
        clean(&self.client).await;
        eprintln!(
            "healthy ready after {:?}; whole scenario {:?}",
            self.healthy_ready,
            self.test_started.elapsed()
        );
    }

    fn ipmi_power(&self) -> String {
        self.sim.ipmitool(&["chassis", "power", "status"])
    }

    /// The dead BMC is still being waited for (10 s Redfish timeout) when both healthy ones are
    /// ready: it held nobody up.
    async fn the_healthy_bmcs_are_ready_before_the_dead_one_is_judged(&mut self) {
        let dead_status = status(&self.client, DEAD_NAME).await;
        let healthy_ready = self.healthy_ready;
        assert!(
            wrangler(&dead_status, "machineNotContactable").is_none(),
            "the dead BMC was judged before the healthy ones were ready ({healthy_ready:?}): {dead_status}"
        );
    }

    /// The HEP's status shape, with the Node's address.
    async fn the_inventory_status_has_the_heps_shape_and_the_nodes_address(&mut self) {
        let hep_status = &self.hep_status;
        assert_eq!(hep_status["pxeBootConfig"]["address"], "172.19.109.10");
        assert_eq!(
            hep_status["ownerCluster"],
            json!({"name": "", "namespace": ""})
        );
        assert_eq!(hep_status["machinePowerState"], "on");
        assert_eq!(wrangler(hep_status, "bmcObjectCreated").unwrap().0, "True");
        assert!(hep_status["hardwareID"].is_string());
        assert_eq!(
            status(&self.client, IPMI_NAME).await["pxeBootConfig"]["address"],
            "172.19.109.11"
        );
    }

    /// One Machine per Inventory, Seeder's finalizer, owned by the Inventory; two finalizers on
    /// the Inventory.
    async fn each_inventory_owns_one_machine_with_seeders_finalizer(&mut self) {
        let client = &self.client;
        let hep_inventory_now = inventory(client, HEP_NAME).await;
        let machine = Api::<Machine>::namespaced(client.clone(), NS)
            .get(HEP_NAME)
            .await
            .unwrap();
        assert_eq!(machine.finalizers(), [SEEDER_FINALIZER]);
        assert_eq!(
            machine.owner_references()[0].uid,
            hep_inventory_now.uid().unwrap()
        );
        assert_eq!(machine.spec, hep_inventory_now.spec.baseboard_spec);
        let mut finalizers = hep_inventory_now.finalizers().to_vec();
        finalizers.sort();
        assert_eq!(finalizers, [SEEDER_FINALIZER, MEMBERSHIP_FINALIZER]);
    }

    /// The local Cluster: the Go Seeder's, its address corrected to the cluster's own.
    async fn the_go_seeders_local_cluster_is_adopted_with_the_clusters_own_address(&mut self) {
        let clusters = &self.clusters;
        let local = wait_for(
            "all four in the local Cluster",
            Duration::from_secs(10),
            || async {
                let c = clusters.get("local").await.unwrap();
                (members(&c).len() == 4).then_some(c)
            },
        )
        .await;
        let local_status = local.status.clone().unwrap();
        assert_eq!(local_status.status.as_deref(), Some("clusterRunning"));
        assert_eq!(
            local_status.cluster_address.as_deref(),
            Some(self.service_ip.as_str())
        );
        assert_eq!(members(&local), [HEP_NAME, DEAD_NAME, GO_NAME, IPMI_NAME]);
    }

    /// Hardware facts on the Nodes: sushy's System names the manufacturer only, its Chassis the
    /// model and serial; ipmi_sim's FRU all three. Seeder's trimming (spaces, dots) applied.
    async fn hardware_facts_become_node_labels(&mut self) {
        let client = &self.client;
        let sushy_labels = labels("SushyEmulator", "3500RX", "437XR1138R2");
        let ipmi_labels = labels("IngotLabs", "IL-1U", "PSN00003");
        wait_for("hardware labels", Duration::from_secs(20), || async {
            (hardware_labels(client, HEP_NAME).await == sushy_labels
                && hardware_labels(client, IPMI_NAME).await == ipmi_labels)
                .then_some(())
        })
        .await;
        assert!(hardware_labels(client, DEAD_NAME).await.is_empty());
    }

    /// Read every second, written only when changed: a label changed by hand is put back, and
    /// otherwise nothing is patched.
    async fn an_edited_label_is_put_back_and_unchanged_labels_are_not_written(&mut self) {
        let client = &self.client;
        let sushy_labels = labels("SushyEmulator", "3500RX", "437XR1138R2");
        Api::<Node>::all(client.clone())
            .patch(
                HEP_NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"model": "edited"}}})),
            )
            .await
            .unwrap();
        wait_for(
            "the model label put back",
            Duration::from_secs(10),
            || async { (hardware_labels(client, HEP_NAME).await == sushy_labels).then_some(()) },
        )
        .await;
        let patches = node_patches(self.http_port).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            node_patches(self.http_port).await,
            patches,
            "unchanged labels were written again"
        );
    }

    /// Hardware health as Seeder's Node Events, each reading once. sushy has a Thermal and no
    /// log; ipmi_sim a SEL with two records and no sensors; ingot's Redfish emulator both, and
    /// fans whose health it changes. Polled every second.
    async fn each_hardware_reading_is_one_node_event(&mut self) {
        let client = &self.client;
        let fleet = Fleet::uniform(
            FleetOptions {
                tls: true,
                ..FleetOptions::default()
            },
            1,
            BmcSpec {
                username: self.user.clone(),
                password: self.password.clone(),
                ..BmcSpec::default()
            },
        )
        .await
        .unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node(SIM_NAME, "172.19.109.14"))
            .await
            .unwrap();
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(
                &PostParams::default(),
                &hep_secret(SIM_NAME, &self.user, &self.password),
            )
            .await
            .unwrap();
        self.inventories
            .create(
                &PostParams::default(),
                &hep_inventory(
                    SIM_NAME,
                    &format!("https://127.0.0.1:{}", fleet.bmcs[0].addr.port()),
                    623,
                ),
            )
            .await
            .unwrap();
        self.fleet = Some(fleet);
        wait_ready(client, SIM_NAME, Duration::from_secs(30), &self.ingot).await;
        let sushy_thermal = (
            "Normal".to_owned(),
            "ThermalHealth: CPU Temp reported temp: 41C,Chassis Intake Temp reported temp: 25C"
                .to_owned(),
        );
        let sim_thermal = (
            "Normal".to_owned(),
            "ThermalHealth: Inlet Temp reported temp: 24C,CPU1 Temp reported temp: 47.5C"
                .to_owned(),
        );
        let events_seen = Instant::now();
        let (hep_events, ipmi_events, sim_events) =
            wait_for("the hardware Events", Duration::from_secs(20), || async {
                let hep = hardware_events(client, HEP_NAME).await;
                let ipmi = hardware_events(client, IPMI_NAME).await;
                let sim = hardware_events(client, SIM_NAME).await;
                (!hep.is_empty() && ipmi.len() >= 2 && sim.len() >= 3).then_some((hep, ipmi, sim))
            })
            .await;
        eprintln!(
            "hardware Events after {:?}: {hep_events:?} {ipmi_events:?} {sim_events:?}",
            events_seen.elapsed()
        );
        assert_eq!(hep_events, [sushy_thermal]);
        // The SEL's two records (a critical threshold event, a state event), Warning and Normal
        // by severity; their time stamps count from the BMC's start, so no creation time.
        assert_eq!(
            ipmi_events,
            [
                sel_critical("0001"),
                (
                    "Normal".to_owned(),
                    "EventLog: Processor #0x02: asserted (event type 0x6f, data 00 ff ff) (entry sel:0002)"
                        .to_owned()
                )
            ]
        );
        assert!(sim_events.contains(&sim_thermal), "{sim_events:?}");
        let sim_log: Vec<&(String, String)> = sim_events
            .iter()
            .filter(|(_, m)| m.starts_with("EventLog: "))
            .collect();
        assert_eq!(sim_log.len(), 2, "{sim_events:?}");
        assert!(
            sim_log
                .iter()
                .any(|(t, m)| t == "Warning" && m.contains("severity Warning"))
        );
        assert!(
            sim_log
                .iter()
                .any(|(t, m)| t == "Normal" && m.contains("The system was powered on."))
        );
        // Every Node's hardware is healthy: sushy's Thermal, ipmi_sim's empty SDR repository,
        // the emulator's Sensors and Thermal.
        for node in [HEP_NAME, IPMI_NAME, SIM_NAME] {
            let c = wait_for("HardwareHealthy", Duration::from_secs(20), || async {
                hardware_condition(client, node).await
            })
            .await;
            assert_eq!(
                (c.0.as_str(), c.1.as_str()),
                ("True", "Healthy"),
                "{node}: {c:?}"
            );
        }
        // Several cycles later, nothing said again.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(hardware_events(client, HEP_NAME).await, hep_events);
        assert_eq!(hardware_events(client, IPMI_NAME).await, ipmi_events);
        assert_eq!(hardware_events(client, SIM_NAME).await, sim_events);
        self.said = Said {
            hep: hep_events,
            ipmi: ipmi_events,
            sim: sim_events,
        };
    }

    /// The facts as annotations.
    async fn hardware_facts_become_node_annotations(&mut self) {
        let client = &self.client;
        let sim_bmc = &self.fleet.as_ref().expect("the emulator").bmcs[0];
        let sim_annotations = hardware_annotations(client, SIM_NAME).await;
        eprintln!(
            "annotations: {:?} {sim_annotations:?} {:?}",
            hardware_annotations(client, HEP_NAME).await,
            hardware_annotations(client, IPMI_NAME).await
        );
        for key in [
            "cpu",
            "memory",
            "bios-version",
            "bmc-firmware-version",
            "nic-macs",
            "disks",
            "health",
            "health-readings",
            "event-log-cursor",
        ] {
            assert!(
                sim_annotations.contains_key(&format!("seeder.ingot.dev/{key}")),
                "{key}: {sim_annotations:?}"
            );
        }
        assert_eq!(sim_annotations["seeder.ingot.dev/health"], "OK");
        assert!(
            sim_annotations["seeder.ingot.dev/nic-macs"].contains(&sim_bmc.state.mac(0)),
            "{sim_annotations:?}"
        );
    }

    /// A fan goes Critical: one Warning. A new SEL record and a new log entry: one Event each.
    async fn a_new_reading_is_one_new_event(&mut self) {
        let client = &self.client;
        let sim_bmc = &self.fleet.as_ref().expect("the emulator").bmcs[0];
        let (hep_events, ipmi_events, sim_events) =
            (&self.said.hep, &self.said.ipmi, &self.said.sim);
        sim_bmc.state.set_fan_health("System Fan 1", "Critical");
        sim_bmc
            .state
            .add_log("Critical", "Drive 0 predictive failure");
        std::fs::write(&self.record, "0x04 0x01 0x30 0x01 0x59 0x00 0x00\n").unwrap();
        self.sim
            .ipmitool(&["sel", "add", self.record.to_str().unwrap()]);
        let changed = Instant::now();
        let (ipmi_after, sim_after) = wait_for(
            "the new readings' Events",
            Duration::from_secs(20),
            || async {
                let ipmi = hardware_events(client, IPMI_NAME).await;
                let sim = hardware_events(client, SIM_NAME).await;
                (ipmi.len() > ipmi_events.len() && sim.len() >= sim_events.len() + 2)
                    .then_some((ipmi, sim))
            },
        )
        .await;
        eprintln!(
            "new readings' Events after {:?}: {:?} {:?}",
            changed.elapsed(),
            &ipmi_after[ipmi_events.len()..],
            &sim_after[sim_events.len()..]
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let ipmi_after = hardware_events(client, IPMI_NAME).await;
        let sim_after = hardware_events(client, SIM_NAME).await;
        assert_eq!(ipmi_after.len(), ipmi_events.len() + 1, "{ipmi_after:?}");
        assert_eq!(ipmi_after[ipmi_events.len()], sel_critical("0003"));
        let mut sim_new = sim_after[sim_events.len()..].to_vec();
        sim_new.sort();
        assert_eq!(sim_new.len(), 2, "{sim_after:?}");
        assert_eq!(
            sim_new[1],
            (
                "Warning".to_owned(),
                "fan System Fan 1 is Critical".to_owned()
            )
        );
        assert_eq!(sim_new[0].0, "Warning");
        assert!(
            sim_new[0]
                .1
                .starts_with("EventLog: Drive 0 predictive failure (severity Critical"),
            "{sim_new:?}"
        );
        assert_eq!(
            hardware_annotations(client, SIM_NAME).await["seeder.ingot.dev/health"],
            "Critical"
        );
        // The condition names the kind and the part (read from the inventory's Thermal and
        // from the Sensors: once), and is written once.
        let c = wait_for("HardwareHealthy False", Duration::from_secs(20), || async {
            hardware_condition(client, SIM_NAME)
                .await
                .filter(|c| c.0 == "False")
        })
        .await;
        assert_eq!(
            c,
            (
                "False".to_owned(),
                "FanUnhealthy".to_owned(),
                "fan System Fan 1 is Critical".to_owned()
            )
        );
        let status_patches = kube_requests(self.http_port, "patch", "nodes/status").await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            kube_requests(self.http_port, "patch", "nodes/status").await,
            status_patches,
            "an unchanged condition was written again"
        );
        assert_eq!(&hardware_events(client, HEP_NAME).await, hep_events);
        self.said.ipmi = ipmi_after;
        self.said.sim = sim_after;
    }

    /// A BMC that stops answering holds no other BMC's polling: with the emulator hanging, a
    /// new SEL record on ipmi_sim is still reported within a few cycles.
    async fn a_hung_bmc_holds_no_other_bmcs_polling(&mut self) {
        let client = &self.client;
        let sim_bmc = &self.fleet.as_ref().expect("the emulator").bmcs[0];
        let ipmi_after = &self.said.ipmi;
        sim_bmc
            .state
            .set_fault(Some(Fault::Slow { delay_ms: 120_000 }));
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.sim
            .ipmitool(&["sel", "add", self.record.to_str().unwrap()]);
        let _ = std::fs::remove_file(&self.record);
        let hung = Instant::now();
        let ipmi_last = wait_for(
            "a SEL record while another BMC hangs",
            Duration::from_secs(8),
            || async {
                let events = hardware_events(client, IPMI_NAME).await;
                (events.len() > ipmi_after.len()).then_some(events)
            },
        )
        .await;
        assert_eq!(ipmi_last[ipmi_after.len()..], [sel_critical("0004")]);
        eprintln!(
            "SEL record reported after {:?} while the emulator hung",
            hung.elapsed()
        );
        self.said.ipmi = ipmi_last;
    }

    /// Killed and started again, ingot says nothing again: what was said is kept on the Nodes.
    async fn a_restarted_operator_says_nothing_again(&mut self) {
        let client = &self.client;
        let inventories = &self.inventories;
        inventories
            .delete(SIM_NAME, &DeleteParams::default())
            .await
            .unwrap();
        wait_for(
            "the emulator's Inventory gone",
            Duration::from_secs(30),
            || async {
                inventories
                    .get_opt(SIM_NAME)
                    .await
                    .unwrap()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        self.ingot.restart(None);
        self.http_port = self.ingot.http_addr().await.port();
        let http_port = self.http_port;
        let restarted = Instant::now();
        wait_for(
            "hardware polls after the restart",
            // The restarted replica first waits out the killed one's Lease.
            Duration::from_secs(60),
            || async { (hardware_polls(http_port).await >= 6.0).then_some(()) },
        )
        .await;
        eprintln!(
            "six hardware polls {:?} after the restart",
            restarted.elapsed()
        );
        assert_eq!(hardware_events(client, HEP_NAME).await, self.said.hep);
        assert_eq!(hardware_events(client, IPMI_NAME).await, self.said.ipmi);
    }

    /// The Go Seeder's running shutdown Job is followed to its end; the Inventory is adopted.
    async fn the_go_seeders_running_job_is_followed_and_its_inventory_adopted(&mut self) {
        let client = &self.client;
        let go_status = wait_for(
            "the Go Seeder's Job answered",
            Duration::from_secs(30),
            || async {
                let s = status(client, GO_NAME).await;
                s["powerAction"]["actionStatus"].is_string().then_some(s)
            },
        )
        .await;
        assert_eq!(
            go_status["powerAction"]["actionStatus"], "complete",
            "{go_status}"
        );
        assert_eq!(
            go_status["hardwareID"],
            "5f0d2b4e-cb39-11ed-8000-0242ac120002"
        );
        assert_eq!(go_status["pxeBootConfig"]["address"], "172.19.109.13");
        assert_eq!(
            self.go_sim.ipmitool(&["chassis", "power", "status"]),
            "Chassis Power is off",
            "the Go Seeder's shutdown Job reached the BMC"
        );
        let go_inventory = inventory(client, GO_NAME).await;
        assert!(
            go_inventory
                .finalizers()
                .contains(&MEMBERSHIP_FINALIZER.to_owned())
        );
    }

    /// Power actions, on both peers at once, each checked on the peer.
    async fn power_actions_reach_sushy_and_ipmi_sim(&mut self) {
        let (client, ingot, sushy) = (&self.client, &self.ingot, &self.sushy);
        let (user, password) = (&self.user, &self.password);
        request_power(client, HEP_NAME, "shutdown").await;
        request_power(client, IPMI_NAME, "poweron").await;
        wait_power(client, HEP_NAME, "shutdown", ingot).await;
        wait_power(client, IPMI_NAME, "poweron", ingot).await;
        assert_eq!(
            sushy.system(user, password).await.unwrap()["PowerState"],
            "Off"
        );
        assert_eq!(self.ipmi_power(), "Chassis Power is on");
        wait_for("machinePowerState off", Duration::from_secs(10), || async {
            (status(client, HEP_NAME).await["machinePowerState"] == "off").then_some(())
        })
        .await;

        request_power(client, HEP_NAME, "poweron").await;
        request_power(client, IPMI_NAME, "shutdown").await;
        wait_power(client, HEP_NAME, "poweron", ingot).await;
        wait_power(client, IPMI_NAME, "shutdown", ingot).await;
        assert_eq!(
            sushy.system(user, password).await.unwrap()["PowerState"],
            "On"
        );
        assert_eq!(self.ipmi_power(), "Chassis Power is off");
        request_power(client, IPMI_NAME, "poweron").await;
        wait_power(client, IPMI_NAME, "poweron", ingot).await;
        assert_eq!(self.ipmi_power(), "Chassis Power is on");
    }

    /// Reboot: the peer goes off and comes back on, with no network boot set.
    async fn a_reboot_turns_the_peer_off_and_on_with_no_network_boot(&mut self) {
        let (client, ingot, sushy, sim) = (&self.client, &self.ingot, &self.sushy, &self.sim);
        let (user, password) = (&self.user, &self.password);
        let saw_off = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (saw_off, stop, power) = (saw_off.clone(), stop.clone(), sim.dir.join("power"));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if std::fs::read_to_string(&power).is_ok_and(|p| p.trim() == "0") {
                        saw_off.store(true, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        let boot_before =
            sushy.system(user, password).await.unwrap()["Boot"]["BootSourceOverrideTarget"].clone();
        request_power(client, HEP_NAME, "reboot").await;
        request_power(client, IPMI_NAME, "reboot").await;
        wait_power(client, HEP_NAME, "reboot", ingot).await;
        wait_power(client, IPMI_NAME, "reboot", ingot).await;
        stop.store(true, Ordering::Relaxed);
        watcher.await.unwrap();
        assert!(
            saw_off.load(Ordering::Relaxed),
            "ipmi_sim never went off during the reboot"
        );
        assert_eq!(self.ipmi_power(), "Chassis Power is on");
        let system = sushy.system(user, password).await.unwrap();
        assert_eq!(system["PowerState"], "On");
        assert_eq!(
            system["Boot"]["BootSourceOverrideTarget"], boot_before,
            "{system}"
        );
        assert_ne!(
            std::fs::read_to_string(sim.dir.join("boot"))
                .unwrap_or_default()
                .trim(),
            "pxe"
        );
    }

    /// A request whose Node left maintenance before it was taken fails, and reaches no BMC.
    async fn a_request_out_of_maintenance_is_refused_and_reaches_no_bmc(&mut self) {
        let client = &self.client;
        set_maintenance(client, IPMI_NAME, false).await;
        let jobs_before = jobs_of(client, IPMI_NAME, "shutdown").await;
        request_power_anyway(client, IPMI_NAME, "shutdown").await;
        let refused = wait_for(
            "the request out of maintenance refused",
            Duration::from_secs(20),
            || async {
                // The request cleared `lastJobName`; its answer sets it again.
                let s = status(client, IPMI_NAME).await;
                let answered = s["powerAction"]["lastJobName"]
                    .as_str()
                    .is_some_and(|j| !j.is_empty());
                answered.then_some(s)
            },
        )
        .await;
        assert_eq!(
            refused["powerAction"]["actionStatus"], "failed",
            "{refused}"
        );
        let (error, _, message) = wrangler(&refused, "bmcJobErrorr").unwrap();
        assert_eq!(error, "True", "{refused}");
        assert!(
            message.contains(&format!("node {IPMI_NAME} is not in maintenance mode")),
            "{message}"
        );
        assert_eq!(jobs_of(client, IPMI_NAME, "shutdown").await, jobs_before);
        assert_eq!(self.ipmi_power(), "Chassis Power is on");
    }

    /// A request taken, its Job created, then the operator stopped before recording the Job's
    /// name, by an operator whose clock ran an hour ahead of the API server's: the Job is found
    /// by the name recorded when the request was taken, and not created (or sent) again.
    async fn a_taken_request_is_found_by_its_recorded_job_name_and_not_sent_again(&mut self) {
        let (client, ingot, inventories) = (&self.client, &self.ingot, &self.inventories);
        set_maintenance(client, IPMI_NAME, true).await;
        let jobs_before = jobs_of(client, IPMI_NAME, "shutdown").await;
        let ipmi_inventory = inventory(client, IPMI_NAME).await;
        let taken = format!("{IPMI_NAME}-shutdown-x7k2p");
        let owner = json!([{"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "name": IPMI_NAME, "uid": ipmi_inventory.uid().unwrap()}]);
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
            "metadata": {"name": taken, "namespace": NS, "generateName": format!("{IPMI_NAME}-shutdown-"),
                "labels": {"inventory.metal.harvesterhci.io": IPMI_NAME}, "ownerReferences": owner},
            "spec": {"machineRef": {"name": IPMI_NAME, "namespace": NS}, "tasks": [{"powerAction": "off"}]}
        }))
        .unwrap();
        create(client, NS, &job).await;
        let ahead = (k8s_openapi::jiff::Timestamp::now()
            + k8s_openapi::jiff::SignedDuration::from_hours(1))
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
        wait_for(
            "the taken request written",
            Duration::from_secs(10),
            || async {
                let mut current = inventory(client, IPMI_NAME).await;
                let status = current.status.as_mut().unwrap();
                for c in &mut status.conditions {
                    let (value, message) = match c.type_.as_str() {
                        "bmcJobSubmitted" => ("True", Some(format!("creating bmc job {taken}"))),
                        "bmcJobErrorr" | "bmcJobCompleted" => ("False", None),
                        _ => continue,
                    };
                    c.status = value.into();
                    c.message = message;
                    c.reason = None;
                    c.last_update_time = Some(ahead.clone());
                }
                status.power_action.action_status = None;
                status.power_action.last_job_name = None;
                inventories
                    .replace_status(IPMI_NAME, &PostParams::default(), &current)
                    .await
                    .ok()
            },
        )
        .await;
        let (_, job) = wait_power(client, IPMI_NAME, "shutdown", ingot).await;
        assert_eq!(job.name_any(), taken);
        let mut want = jobs_before.clone();
        want.push(taken.clone());
        want.sort();
        let mut have = jobs_of(client, IPMI_NAME, "shutdown").await;
        have.sort();
        assert_eq!(have, want, "a second Job was created for the taken request");
        assert_eq!(self.ipmi_power(), "Chassis Power is off");
        request_power(client, IPMI_NAME, "poweron").await;
        wait_power(client, IPMI_NAME, "poweron", ingot).await;
        assert_eq!(self.ipmi_power(), "Chassis Power is on");
    }

    /// The operator killed right after creating a request's Job, before recording its name:
    /// the next one records that Job and creates no other; the BMC is switched off by it.
    async fn an_operator_killed_after_creating_a_job_records_it_and_creates_no_other(&mut self) {
        let client = &self.client;
        self.ingot.restart(Some("seeder-after-job-create"));
        let jobs_before = jobs_of(client, IPMI_NAME, "shutdown").await;
        request_power(client, IPMI_NAME, "shutdown").await;
        // Generous: the new process first waits out the killed one's Lease, on a busy machine.
        self.ingot
            .wait_crashed("seeder-after-job-create", Duration::from_secs(90))
            .await;
        let crashed = status(client, IPMI_NAME).await;
        assert_eq!(wrangler(&crashed, "bmcJobSubmitted").unwrap().0, "True");
        assert!(
            crashed["powerAction"]["lastJobName"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{crashed}"
        );
        let mut made: Vec<String> = jobs_of(client, IPMI_NAME, "shutdown")
            .await
            .into_iter()
            .filter(|j| !jobs_before.contains(j))
            .collect();
        assert_eq!(made.len(), 1, "{made:?}");
        self.ingot.restart(None);
        self.http_port = self.ingot.http_addr().await.port();
        let ingot = &self.ingot;
        let (_, job) = wait_power(client, IPMI_NAME, "shutdown", ingot).await;
        assert_eq!(job.name_any(), made.remove(0));
        assert_eq!(
            jobs_of(client, IPMI_NAME, "shutdown").await.len(),
            jobs_before.len() + 1,
            "a second Job was created after the restart"
        );
        assert_eq!(self.ipmi_power(), "Chassis Power is off");
        request_power(client, IPMI_NAME, "poweron").await;
        wait_power(client, IPMI_NAME, "poweron", ingot).await;
        assert_eq!(self.ipmi_power(), "Chassis Power is on");
    }

    /// In steady state (no request open), the checks of a request read nothing: no Job is read
    /// or listed while the Inventories are reconciled and their hardware read three times.
    async fn steady_state_reads_no_jobs(&mut self) {
        let http_port = self.http_port;
        let reads = || async {
            let mut n = Vec::new();
            for (verb, resource) in [
                ("get", "jobs"),
                ("list", "jobs"),
                ("get", "inventories"),
                ("list", "inventories"),
                ("get", "nodes"),
            ] {
                n.push(kube_requests(http_port, verb, resource).await);
            }
            n
        };
        let polls = hardware_polls(http_port).await;
        let before = reads().await;
        wait_for(
            "three more hardware polls",
            Duration::from_secs(30),
            || async { (hardware_polls(http_port).await >= polls + 3.0).then_some(()) },
        )
        .await;
        let after = reads().await;
        eprintln!(
            "steady state, three hardware polls: get/list jobs, get/list inventories, get nodes: {before:?} -> {after:?}"
        );
        assert_eq!(after[..2], before[..2], "Jobs read in steady state");
        // Nor a Node: each poll takes it from the watch cache, which shows the poller's last
        // write.
        assert_eq!(after[4], before[4], "Nodes read by the hardware polls");
    }

    /// The Inventory passes read their Machine, Node and Jobs from the watch caches: a pass of
    /// each touched Inventory reads none of them from the API server.
    async fn inventory_passes_read_machines_nodes_and_jobs_from_the_caches(&mut self) {
        let http_port = self.http_port;
        let inventories: Api<Inventory> = Api::namespaced(self.client.clone(), NS);
        let cached_reads = || async {
            (
                kube_requests(http_port, "get", "machines").await,
                kube_requests(http_port, "get", "nodes").await,
                kube_requests(http_port, "get", "jobs").await,
            )
        };
        let passes = inventory_passes(http_port).await;
        let before = cached_reads().await;
        for name in [HEP_NAME, IPMI_NAME, GO_NAME] {
            inventories
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {"ingot.test/touched": "1"}}}),
                    ),
                )
                .await
                .unwrap();
        }
        wait_for(
            "a pass of each touched Inventory",
            Duration::from_secs(30),
            || async { (inventory_passes(http_port).await >= passes + 3.0).then_some(()) },
        )
        .await;
        let after = cached_reads().await;
        eprintln!("three Inventory passes: get machines, nodes, jobs: {before:?} -> {after:?}");
        assert_eq!(
            after, before,
            "Machines, Nodes or Jobs read by the Inventory passes"
        );
    }

    /// The power API finds the Node out of maintenance first.
    async fn the_power_api_and_cli_act_for_permitted_callers_only(&mut self) {
        let client = &self.client;
        set_maintenance(client, HEP_NAME, false).await;
        let power_api_port = self.ingot.power_api_addr().await.port();
        power_api_and_cli(self.env, client, power_api_port, &self.ingot).await;
        assert_eq!(
            self.sushy.system(&self.user, &self.password).await.unwrap()["PowerState"],
            "On",
            "shut down by the power API, powered on by `ingot power`"
        );
    }

    /// The dead BMC (judged meanwhile): a clear condition, with wrangler's error reason, no
    /// credentials.
    async fn a_dead_bmc_is_judged_with_a_clear_condition_and_no_credentials(&mut self) {
        let client = &self.client;
        let (cond, reason, message) =
            wait_for("the dead BMC judged", Duration::from_secs(30), || async {
                wrangler(&status(client, DEAD_NAME).await, "machineNotContactable")
            })
            .await;
        assert_eq!((cond.as_str(), reason.as_str()), ("True", "Error"));
        assert!(
            message.contains("failed to open connection to BMC")
                && message.contains(&format!("https://127.0.0.1:{}", self.dead_port)),
            "{message}"
        );
        assert!(!message.contains(&self.password));
        assert!(status(client, DEAD_NAME).await["status"].is_null());
    }

    /// A BMC that stops answering: the Inventory says so and is no longer ready.
    async fn a_bmc_that_stops_answering_makes_its_inventory_not_ready(&mut self) {
        self.sim.stop();
        let client = &self.client;
        let (cond, reason, _) = wait_for(
            "machineNotContactable after ipmi_sim stopped",
            Duration::from_secs(30),
            || async {
                let s = status(client, IPMI_NAME).await;
                wrangler(&s, "machineNotContactable").filter(|c| c.0 == "True")
            },
        )
        .await;
        assert_eq!((cond.as_str(), reason.as_str()), ("True", "Error"));
        assert!(status(client, IPMI_NAME).await["status"].is_null());
    }

    /// Deleting an Inventory: out of the local Cluster first, then its Machine collected.
    async fn a_deleted_inventory_leaves_the_local_cluster_then_its_machine_goes(&mut self) {
        let (client, inventories, clusters) = (&self.client, &self.inventories, &self.clusters);
        inventories
            .delete(GO_NAME, &DeleteParams::default())
            .await
            .unwrap();
        wait_for("the Go Inventory gone", Duration::from_secs(20), || async {
            inventories
                .get_opt(GO_NAME)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
        assert_eq!(
            members(&clusters.get("local").await.unwrap()),
            [HEP_NAME, DEAD_NAME, IPMI_NAME]
        );
        wait_for("its Machine collected", Duration::from_secs(30), || async {
            Api::<Machine>::namespaced(client.clone(), NS)
                .get_opt(GO_NAME)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
    }

    /// The local Cluster deleted by hand comes back with its members.
    async fn a_deleted_local_cluster_comes_back_with_its_members(&mut self) {
        let clusters = &self.clusters;
        let service_ip = &self.service_ip;
        clusters
            .delete("local", &DeleteParams::default())
            .await
            .unwrap();
        wait_for(
            "the local Cluster made again",
            Duration::from_secs(20),
            || async {
                let c = clusters.get_opt("local").await.unwrap()?;
                (members(&c) == [HEP_NAME, DEAD_NAME, IPMI_NAME]
                    && c.status.as_ref()?.cluster_address.as_deref() == Some(service_ip.as_str()))
                .then_some(())
            },
        )
        .await;
    }

    /// Every start's log holds neither BMC password.
    async fn no_credentials_are_logged(&mut self) {
        let log = self.ingot.log();
        assert!(
            log.contains("serving /healthz"),
            "the log is the operator's"
        );
        assert!(!log.contains(&self.password) && !log.contains(peers::IPMI_PASSWORD));
    }
}

/// One caller of Harvester's node actions: a ServiceAccount with `rules`, its token and a
/// kubeconfig holding it.
fn power_caller(
    env: &ingot_testenv::TestEnv,
    name: &str,
    rules: Value,
) -> (String, std::path::PathBuf) {
    let manifests = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: {NS}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {name}}}\nrules: {rules}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {name}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {name}}}\n\
         subjects: [{{kind: ServiceAccount, name: {name}, namespace: {NS}}}]\n"
    );
    chart_support::kubectl_apply(env.kubeconfig_path(), &manifests, &[]);
    let kubeconfig = chart_support::token_kubeconfig(env.kubeconfig_path(), name, NS, name);
    let token = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: ").map(str::to_owned))
        .unwrap();
    (token, kubeconfig)
}

/// Harvester's `powerActionPossible` / `powerAction` over HTTPS, answered as Harvester answers,
/// refused out of maintenance and to a caller without the power permission (who may update the
/// Node); then
/// `ingot power` under the same rules. Ends with the HEP's server on.
async fn power_api_and_cli(
    env: &ingot_testenv::TestEnv,
    client: &Client,
    port: u16,
    ingot: &Operator,
) {
    let (operator, operator_config) = power_caller(
        env,
        "power-operator",
        json!([
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": ["seeder.ingot.dev"], "resources": ["nodes/poweraction"], "verbs": ["create"]},
            {"apiGroups": ["metal.harvesterhci.io"], "resources": ["inventories"], "verbs": ["get", "patch"]},
            {"apiGroups": ["metal.harvesterhci.io"], "resources": ["inventories/status"], "verbs": ["patch"]},
        ]),
    );
    let (viewer, viewer_config) = power_caller(
        env,
        "power-viewer",
        json!([
            // Updating the Node is not the power permission.
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "update"]},
            {"apiGroups": ["metal.harvesterhci.io"], "resources": ["inventories"], "verbs": ["get"]},
        ]),
    );
    // ingot's own certificate, self-signed at start.
    let https = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let call = async |token: Option<&str>, node: &str, action: &str, body: Option<Value>| {
        let mut request = https.post(format!(
            "https://127.0.0.1:{port}/v1/harvester/nodes/{node}?action={action}"
        ));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    };
    let possible = "powerActionPossible";
    let action = "powerAction";
    assert_eq!(call(Some(&operator), HEP_NAME, possible, None).await.0, 204);
    let (code, body) = call(Some(&operator), DEAD_NAME, possible, None).await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body.contains(&format!(
            "no field .status.status present in inventory object: {DEAD_NAME}"
        )),
        "{body}"
    );
    assert_eq!(
        call(Some(&operator), "no-such-node", possible, None)
            .await
            .0,
        424
    );
    assert_eq!(call(None, HEP_NAME, possible, None).await.0, 401);
    assert_eq!(
        call(Some("not-a-token"), HEP_NAME, possible, None).await.0,
        401
    );

    // Out of maintenance: refused, and nothing requested.
    let shutdown = Some(json!({"operation": "shutdown"}));
    let (code, body) = call(Some(&operator), HEP_NAME, action, shutdown.clone()).await;
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("not in maintenance mode"), "{body}");
    Api::<Node>::all(client.clone())
        .patch(
            HEP_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"harvesterhci.io/maintain-status": "completed"}}})),
        )
        .await
        .unwrap();
    let (code, body) = call(Some(&viewer), HEP_NAME, action, shutdown.clone()).await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = call(
        Some(&operator),
        HEP_NAME,
        action,
        Some(json!({"operation": "explode"})),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("is not a valid power opreation"), "{body}");
    assert_eq!(
        inventory(client, HEP_NAME)
            .await
            .spec
            .power_action_requested
            .as_deref(),
        Some("reboot"),
        "a refused request changed the Inventory"
    );

    let (code, body) = call(Some(&operator), HEP_NAME, action, shutdown).await;
    assert_eq!(code, 204, "{body}");
    wait_power(client, HEP_NAME, "shutdown", ingot).await;

    // The CLI: refused to the viewer, done for the operator.
    let cli = |config: &std::path::Path, operation: &str| {
        Command::new(env!("CARGO_BIN_EXE_ingot"))
            .args(["power", HEP_NAME, operation])
            .arg(format!("--kubeconfig={}", config.display()))
            .output()
            .unwrap()
    };
    let refused = cli(&viewer_config, "poweron");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("may not request power actions"), "{stderr}");
    let done = cli(&operator_config, "poweron");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    wait_power(client, HEP_NAME, "poweron", ingot).await;
}
