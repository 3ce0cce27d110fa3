//! A pool over Inventories at 50 servers: an InstancePool of N drawn from N Inventories whose
//! BMCs are emulated Redfish BMCs (`ingot-bmc-sim`, `latency_ms` per request, 200 ms power
//! transitions), the servers behind them (`ingot-boot-sim`'s `ServerFleet`) PXE-booting from
//! ingot's boot server, installing for a fixed time, calling the SUCCEEDED webhook and
//! registering their Nodes with the pool's join token, in a kube-apiserver that is both the
//! cluster ingot runs in and the cluster the nodes join (bound to the VIP). `ingot run
//! --controllers pools,provisioning` runs as its own process. The Inventories are made ready
//! (their BMCs answered) and the AddressPool accepted before the pool is applied, so what is
//! timed is the pool's work.
//!
//! Prints, from the pool's apply: the first and last install boot the BMCs recorded, when the
//! last Node was Ready and the last Instance `managed`, that less the emulated install time
//! (ingot's share: its reconciles, the claims, the rufio Jobs against the emulated BMCs, the
//! boot server, the servers' reboot and Node registration, and the Instances' 10 s look at a
//! server being installed), the operator's API writes per server (its own
//! `ingot_kube_requests_total` by verb and resource), its CPU time and reconciles per
//! controller, the Redfish requests per server and its peak RSS.
//!
//! Run by hand (not a test):
//!   source scripts/lib.sh; build_control_plane
//!   cargo build -p ingot && cargo run -p ingot --example bench_inventory_pool -- [N=50] [latency_ms=50] [install_s=30]
//! With `INGOT_BENCH_BINARY=target/release/ingot` the operator measured is a release build;
//! `INGOT_BENCH_LOG=<file>` keeps its log.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "bench_support/mod.rs"]
mod bench_support;

use bench_support::{Counters, bmc_requests, free_port, inventory_name, object, until};

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ingot_api::equinix::{Instance, InstancePool, instance_status};
use ingot_api::seeder::{AddressPool, INVENTORY_NODE_READY, Inventory};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig};
use ingot_testenv::harness::bench::{ProcessGroup, ingot_binary};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const NS: &str = "bench-pool";
const VIP: &str = "127.0.13.1";
const NODE_CIDR: &str = "127.0.33.0/24";
const GATEWAY: &str = "127.0.33.1";
const TOKEN: &str = "bench-pool-join-token";

async fn create_objects(client: &Client, fleet: &Fleet) {
    for name in [NS, "harvester-system"] {
        let _ = Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": name}})),
            )
            .await;
    }
    Api::<AddressPool>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "nodes"},
                "spec": {"cidr": NODE_CIDR, "gateway": GATEWAY}})),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let spec = BmcSpec::default();
    futures::stream::iter(fleet.bmcs.iter().enumerate())
        .map(|(i, bmc)| {
            let (secrets, inventories) = (secrets.clone(), inventories.clone());
            let name = inventory_name(i);
            let (user, password) = (spec.username.clone(), spec.password.clone());
            async move {
                secrets
                    .create(
                        &PostParams::default(),
                        &object(json!({"metadata": {"name": name},
                            "stringData": {"username": user, "password": password}})),
                    )
                    .await
                    .unwrap();
                inventories
                    .create(
                        &PostParams::default(),
                        &object(json!({
                            "metadata": {"name": name, "labels": {"bench": "pool"}},
                            "spec": {
                                "primaryDisk": "/dev/sda",
                                "managementInterfaceMacAddress": bmc.state.mac(0),
                                "baseboardSpec": {"connection": {
                                    "host": format!("https://127.0.0.1:{}", bmc.addr.port()),
                                    "port": 623, "insecureTLS": true,
                                    "authSecretRef": {"name": name, "namespace": NS}}}
                            }
                        })),
                    )
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: u64| -> u64 {
        args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
    };
    let n = arg(1, 50) as usize;
    let latency_ms = arg(2, 50);
    let install = Duration::from_secs(arg(3, 30));
    assert!(
        (1..=250).contains(&n),
        "N: 1 to 250 (one /24 of node addresses)"
    );

    let plane = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
        controller_manager: false,
        install_crds: true,
        watchdog_parent: Some(std::process::id()),
        bind_address: VIP.parse().unwrap(),
        bootstrap_token_auth: true,
        ..ingot_testenv::Options::from_env().unwrap()
    })
    .await
    .unwrap();
    let env = ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
        .await
        .unwrap();
    let client = env.client().unwrap();

    let spec = BmcSpec {
        vendor: Vendor::Dell,
        latency: Duration::from_millis(latency_ms),
        power_delay: Duration::from_millis(200),
        initial_power_on: false,
        ..BmcSpec::default()
    };
    let fleet = Fleet::start(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        vec![spec; n],
    )
    .await
    .unwrap();
    let boot_port = free_port();
    let boot = format!("http://127.0.0.1:{boot_port}");
    let mut config = ServerFleetConfig::new(format!("{boot}/boot"), env.config());
    config.install_time = install;
    let servers =
        ServerFleet::new(config, fleet.bmcs.iter().map(|b| b.state.clone()).collect()).unwrap();
    servers.cluster_exists(TOKEN).await.unwrap();
    let _running = servers.start();

    let http_port = free_port();
    let log = match std::env::var_os("INGOT_BENCH_LOG") {
        Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
        None => Stdio::null(),
    };
    let operator = ProcessGroup(
        Command::new(ingot_binary())
            .process_group(0)
            .arg("run")
            .arg(format!(
                "--kubeconfig={}",
                plane.kubeconfig_path().display()
            ))
            .arg("--controllers=pools,provisioning")
            .arg(format!("--http-addr=127.0.0.1:{http_port}"))
            .arg(format!("--lease-namespace={NS}"))
            .arg(format!("--provisioning-namespace={NS}"))
            .arg(format!("--seeder-namespace={NS}"))
            .arg(format!("--rufio-namespace={NS}"))
            .arg(format!("--pool-inventory-namespaces={NS}"))
            .arg(format!("--boot-addr=127.0.0.1:{boot_port}"))
            .arg(format!("--boot-url={boot}"))
            .arg(format!("--cluster-address={VIP}"))
            .arg("--harvester-mirror=http://127.0.0.1:9/iso")
            .env("TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start ingot run"),
    );
    println!(
        "a pool of {n} over {n} Inventories, Redfish BMCs over HTTPS ({latency_ms} ms per request, 200 ms power transitions), installs of {} s",
        install.as_secs()
    );
    create_objects(&client, &fleet).await;
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    until(
        "the Inventories to be ready",
        Duration::from_secs(600),
        || async {
            let list = inventories.list(&ListParams::default()).await.unwrap();
            list.items
                .iter()
                .filter(|i| {
                    i.status.as_ref().and_then(|s| s.status.as_deref())
                        == Some(INVENTORY_NODE_READY)
                })
                .count()
                == n
        },
    )
    .await;
    let pools: Api<AddressPool> = Api::namespaced(client.clone(), NS);
    until(
        "the AddressPool to be ready",
        Duration::from_secs(60),
        || async {
            pools
                .get("nodes")
                .await
                .ok()
                .and_then(|p| p.status)
                .is_some_and(|s| s.status == "poolReady")
        },
    )
    .await;
    // Settled: the writes and BMC requests of readiness are left out.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let counters_before = Counters::read(http_port).await;
    let bmc_before = bmc_requests(&fleet);
    let cpu_before = operator.cpu_seconds();

    let applied_at = Timestamp::now();
    let applied = Instant::now();
    Api::<InstancePool>::all(client.clone())
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
                "metadata": {"name": "bench"},
                "spec": {"count": n, "inventorySelector": {"matchLabels": {"bench": "pool"}},
                    "inventoryNamespace": NS, "addressPool": "nodes", "harvesterVersion": "v1.7.1"}
            })),
        )
        .await
        .unwrap();
    let instances: Api<Instance> = Api::all(client.clone());
    let limit = Duration::from_secs(1800);
    loop {
        let managed = instances
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|i| {
                i.status
                    .as_ref()
                    .is_some_and(|s| s.status == instance_status::MANAGED)
            })
            .count();
        if managed == n {
            break;
        }
        assert!(
            applied.elapsed() < limit,
            "{managed} of {n} managed after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_managed = applied.elapsed().as_secs_f64();
    let peak_rss = operator.rss_mib().0;
    let cpu = operator.cpu_seconds() - cpu_before;
    let counted = Counters::read(http_port).await.since(&counters_before);
    let bmc = bmc_requests(&fleet) - bmc_before;

    let mut boots: Vec<f64> = fleet
        .bmcs
        .iter()
        .filter_map(|b| {
            let pxe = b.state.boots().into_iter().find(|r| r.device == "Pxe")?;
            let at: Timestamp = pxe.booted_at.parse().ok()?;
            Some(at.duration_since(applied_at).as_secs_f64())
        })
        .collect();
    boots.sort_by(f64::total_cmp);
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    let mut nodes_up: Vec<f64> = servers
        .servers()
        .iter()
        .filter(|s| s.ready.as_deref() == Some("True"))
        .filter_map(|s| {
            let since = serde_json::to_value(s).ok()?["since"].as_str()?.to_owned();
            let at: Timestamp = since.parse().ok()?;
            Some(at.duration_since(applied_at).as_secs_f64())
        })
        .collect();
    nodes_up.sort_by(f64::total_cmp);

    println!("from the pool's apply:");
    println!(
        "  install boots recorded by the BMCs: {} of {n}; first {:.1} s, last {:.1} s",
        boots.len(),
        boots.first().copied().unwrap_or(f64::NAN),
        boots.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "  Nodes Ready (the emulated servers): {} of {n}, the last at {:.1} s ({nodes} Nodes)",
        nodes_up.len(),
        nodes_up.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "  every Instance managed (ready {n} {n}): {all_managed:.1} s; less the {} s install: ingot's share {:.1} s",
        install.as_secs(),
        all_managed - install.as_secs_f64()
    );
    let total_writes: f64 = counted.writes.values().sum();
    println!(
        "operator API writes: {total_writes} ({:.1} per server): {:?}",
        total_writes / n as f64,
        counted.writes
    );
    println!(
        "operator CPU: {cpu:.1} s; reconciles by controller (count, seconds): {:?}",
        counted
            .reconciles
            .iter()
            .map(|(c, k)| (
                c.as_str(),
                *k,
                (counted.reconcile_seconds.get(c).copied().unwrap_or(0.0) * 10.0).round() / 10.0
            ))
            .collect::<Vec<_>>()
    );
    println!(
        "Redfish requests: {bmc} ({:.1} per server)",
        bmc as f64 / n as f64
    );
    println!("operator peak RSS: {peak_rss:.0} MiB");
}
