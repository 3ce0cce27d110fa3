//! Benchmark: a MachineDeployment from 0 to N (default 100) Machines with upstream
//! machine-controller-manager and `ingot run --controllers gardener`, against the Metal emulator
//! (realistic device timings scaled down 10x) with a 10 requests/s Metal API limit. Prints the
//! time until every Machine is Running, the Metal API calls per Machine against the minimum,
//! and the operator's peak RSS.
//!
//!   INGOT_K8S_BIN=$(tools/k8s-testbin/build.sh) INGOT_MCM_BIN=$(tools/mcm/build.sh) \
//!     sh -c 'cargo build -p ingot --bin ingot --example bench_gardener &&
//!            "${CARGO_TARGET_DIR:-target}"/debug/examples/bench_gardener [N]'

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ingot_api::gardener::Machine;
use ingot_boot_sim::{Booter, BooterConfig, Expected};
use ingot_metal_sim::{SimConfig, SimServer, Timings};
use ingot_testenv::harness::bench::proc_status_kib;
use ingot_testenv::mcm::Mcm;
use ingot_testenv::{ControlPlane, Options};
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;

const TOKEN: &str = "bench-token";
const PROJECT: &str = "e3db5484-f789-43e1-8aea-a1921cae50dd";

#[tokio::main]
async fn main() {
    let count: i64 = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("N"))
        .unwrap_or(100);
    let plane = ControlPlane::start(Options::from_env().expect("INGOT_K8S_BIN"))
        .await
        .expect("control plane");
    let client = plane.client().await.unwrap();
    let namespace = format!("bench-{}", ingot_testenv::random_suffix(5));
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap(),
        )
        .await
        .unwrap();

    let mut config = SimConfig::single(TOKEN, PROJECT);
    config.timings = Timings::realistic().faster(10);
    let sim = SimServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut booter_config = BooterConfig::new(
        sim.base_url(),
        Expected {
            token: String::new(),
            host: "192.0.2.1".into(),
            port: None,
            schema: None,
        },
    );
    booter_config.project = Some(PROJECT.into());
    booter_config.heartbeat_interval = Duration::from_secs(20);
    let booter = Booter::new(booter_config, client.clone()).unwrap();
    let _running = booter.start();
    let log = std::env::temp_dir().join(format!("mcm-{namespace}.log"));
    let _mcm = Mcm::start(plane.kubeconfig_path(), &namespace, &log).expect("INGOT_MCM_BIN");
    // target/<profile>/examples/bench_gardener -> target/<profile>/ingot (build it first).
    let ingot = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("ingot");
    let mut operator = Command::new(&ingot)
        .arg("run")
        .arg("--controllers=gardener")
        .arg(format!(
            "--kubeconfig={}",
            plane.kubeconfig_path().display()
        ))
        .arg("--http-addr=127.0.0.1:0")
        .arg(format!("--namespace={namespace}"))
        .arg(format!("--lease-namespace={namespace}"))
        .arg(format!("--metal-api-url={}", sim.base_url()))
        .arg("--metal-rate-limit=10")
        .arg("--log-level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let apply = async |api_version: &str, kind: &str, plural: &str, manifest: serde_json::Value| {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        let object: DynamicObject = serde_json::from_value(manifest).unwrap();
        api.patch(
            &kube::ResourceExt::name_any(&object),
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap();
    };
    apply("v1", "Secret", "secrets", json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bench"},
        "stringData": {"apiToken": TOKEN, "userData": "#!/bin/bash\necho <<BOOTSTRAP_TOKEN>> > /var/lib/gardener-node-agent/credentials/bootstrap-token\n"},
    }))
    .await;
    apply("machine.sapcloud.io/v1alpha1", "MachineClass", "machineclasses", json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass", "metadata": {"name": "bench"},
        "provider": "EquinixMetal", "secretRef": {"name": "bench", "namespace": namespace},
        "providerSpec": {"projectID": PROJECT, "OS": "ubuntu_22_04", "metro": "ny", "machineType": "c3.small.x86", "billingCycle": "hourly",
                         "tags": ["kubernetes.io/cluster/bench: 1", "kubernetes.io/role/node: 1"]},
    }))
    .await;
    let md = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "metadata": {"name": "bench"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"bench": "yes"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": {"bench": "yes"}}, "spec": {"class": {"kind": "MachineClass", "name": "bench"}}}},
    });
    apply(
        "machine.sapcloud.io/v1alpha1",
        "MachineDeployment",
        "machinedeployments",
        md.clone(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    sim.sim().reset_metrics();

    let started = Instant::now();
    let mut scaled = md;
    scaled["spec"]["replicas"] = json!(count);
    apply(
        "machine.sapcloud.io/v1alpha1",
        "MachineDeployment",
        "machinedeployments",
        scaled,
    )
    .await;
    let machines: Api<Machine> = Api::namespaced(client.clone(), &namespace);
    let mut peak_rss_kb = 0;
    loop {
        peak_rss_kb = peak_rss_kb.max(proc_status_kib(operator.id(), "VmRSS:"));
        let list = machines.list(&ListParams::default()).await.unwrap().items;
        let running = list
            .iter()
            .filter(|m| ingot_controllers::gardener::status::phase(m) == "Running")
            .count();
        if running as i64 == count && list.len() as i64 == count {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "not Running after an hour: {running}/{count}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = started.elapsed();
    peak_rss_kb = peak_rss_kb.max(proc_status_kib(operator.id(), "VmHWM:"));
    let metrics = sim.sim().metrics();
    let calls = metrics.total_requests;
    println!(
        "MachineDeployment 0 -> {count}; device timings: realistic / 10; Metal API limit 10 requests/s"
    );
    println!("all Running after      {:>8.1} s", took.as_secs_f64());
    println!(
        "Metal API calls        {calls:>8}  ({:.2} per Machine; minimum 1: the create)",
        calls as f64 / count as f64
    );
    for op in ["findProjectDevices", "createDevice", "findDeviceById"] {
        println!("  {op:<20} {:>8}", metrics.requests(op));
    }
    println!(
        "operator peak RSS      {:>8.1} MiB",
        peak_rss_kb as f64 / 1024.0
    );
    operator.kill().unwrap();
    operator.wait().unwrap();
}
