//! Benchmark: scale one InstancePool from 0 to N (default 200) against the Metal emulator with
//! realistic device timings scaled down 10x, through `ingot run` with a 10 requests/s Metal
//! API limit, for the seed's reinstall flow and the single-boot flow. Prints the time until
//! every Instance is managed, the Metal API calls per Instance, and the operator's peak RSS.
//!
//!   INGOT_K8S_BIN=$(tools/k8s-testbin/build.sh) cargo run --release -p ingot --example bench_pool_scale -- [N]

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ingot_api::equinix::InstancePool;
use ingot_boot_sim::{Booter, BooterConfig, Expected};
use ingot_metal_sim::{SimConfig, SimServer, Timings};
use ingot_testenv::harness::bench::proc_status_kib;
use ingot_testenv::{ControlPlane, Options};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const TOKEN: &str = "bench-token";
const PROJECT: &str = "6d0c7b1a-2b3c-4d5e-8f90-a1b2c3d4e5f6";
const JOIN_TOKEN: &str = "bench-join-token";
const VIP: &str = "192.0.2.80";

#[tokio::main]
async fn main() {
    let count: i64 = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("N"))
        .unwrap_or(200);
    let plane = ControlPlane::start(Options::from_env().expect("INGOT_K8S_BIN"))
        .await
        .expect("control plane");
    println!(
        "InstancePool 0 -> {count}; device timings: realistic / 10; Metal API limit 10 requests/s"
    );
    println!(
        "{:<12} {:>14} {:>16} {:>18} {:>14}",
        "flow", "all managed", "API calls", "calls / instance", "peak RSS"
    );
    for single_boot in [false, true] {
        run(&plane, count, single_boot).await;
    }
}

async fn run(plane: &ControlPlane, count: i64, single_boot: bool) {
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
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = serde_json::from_value(json!({"metadata": {"name": "equinix-addon"},
        "stringData": {"METAL_AUTH_TOKEN": TOKEN, "PROJECT_ID": PROJECT}}))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
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
            token: JOIN_TOKEN.into(),
            host: VIP.into(),
            port: None,
            schema: None,
        },
    );
    booter_config.project = Some(PROJECT.into());
    let booter = Booter::new(booter_config, client.clone()).unwrap();
    let _running = booter.start();

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ingot = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("ingot");
    let mut operator = Command::new(&ingot)
        .arg("run")
        .arg(format!(
            "--kubeconfig={}",
            plane.kubeconfig_path().display()
        ))
        .arg(format!("--http-addr=127.0.0.1:{port}"))
        .arg(format!("--lease-namespace={namespace}"))
        .arg(format!("--metal-api-url={}", sim.base_url()))
        .arg(format!("--ipxe-base-url=http://127.0.0.1:{port}"))
        .arg(format!("--cluster-address={VIP}"))
        .arg("--metal-rate-limit=10")
        .arg("--log-level=warn")
        .env("NAMESPACE", &namespace)
        .env("TOKEN", JOIN_TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (build it: cargo build --release -p ingot)",
                ingot.display()
            )
        });

    let pools: Api<InstancePool> = Api::all(client.clone());
    let name = format!("bench-{}", if single_boot { "single" } else { "seed" });
    let pool = serde_json::from_value(json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
        "metadata": {"name": name},
        "spec": {"count": 0, "plan": "c3.small.x86", "metro": "sg", "billingCycle": "hourly",
                 "managementInterface": ["eth0"], "singleBoot": single_boot, "harvesterVersion": "v1.4.2"}}))
    .unwrap();
    pools.create(&PostParams::default(), &pool).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.sim().reset_metrics();

    let started = Instant::now();
    pools
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"count": count}})),
        )
        .await
        .unwrap();
    let mut peak_rss_kb = 0;
    loop {
        peak_rss_kb = peak_rss_kb.max(rss_kb(operator.id()));
        let status = pools.get(&name).await.unwrap().status.unwrap_or_default();
        if status.status == "ready" && status.ready == count {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "not ready after an hour: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = started.elapsed();
    peak_rss_kb = peak_rss_kb.max(hwm_kb(operator.id()));
    let calls = sim.sim().metrics().total_requests;
    println!(
        "{:<12} {:>12.1} s {:>16} {:>18.2} {:>11.1} MiB",
        if single_boot { "single-boot" } else { "seed" },
        took.as_secs_f64(),
        calls,
        calls as f64 / count as f64,
        peak_rss_kb as f64 / 1024.0
    );
    operator.kill().unwrap();
    operator.wait().unwrap();
    // Leave the pool's Instances to the next flow's operator? No: remove them without their
    // finalizers, so the next run starts from an empty cluster.
    pools.delete(&name, &Default::default()).await.unwrap();
    let instances: Api<ingot_api::equinix::Instance> = Api::all(client.clone());
    for instance in instances.list(&Default::default()).await.unwrap() {
        let name = kube::ResourceExt::name_any(&instance);
        let _ = instances
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
}

fn rss_kb(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

fn hwm_kb(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM:")
}
