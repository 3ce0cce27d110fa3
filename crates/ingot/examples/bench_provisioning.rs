//! Seeder's full mode at 100 nodes: one Cluster of N Inventories provisioned onto emulated
//! servers behind emulated Redfish BMCs (`ingot-bmc-sim`, `latency_ms` per request, 200 ms
//! power transitions), which PXE-boot from ingot's boot server, install for a fixed time, call
//! the SUCCEEDED webhook and register their Nodes in a second kube-apiserver bound to the
//! Cluster's VIP (`ingot-boot-sim`'s `ServerFleet`), with `ingot run --controllers provisioning`
//! as its own process. The Inventories are made ready (their BMCs answered) and the pools
//! accepted before the Cluster is applied, so what is timed is the provisioning.
//!
//! Prints, from the Cluster's apply: when each status was reached, when the boot Jobs were
//! created (watched), the first and last PXE boot the BMCs recorded (power on into the
//! one-time network boot; with a budget below N, the boots grouped in waves of it), when the
//! last emulated Node was Ready, `clusterRunning`, and that less the emulated install time once
//! per wave (ingot's share: its reconciles, the rufio Jobs against the emulated BMCs, the boot
//! server, and the emulated servers' reboot and Node registration). Then the operator's API
//! writes per node (its own `ingot_kube_requests_total`, by verb and resource: its writes
//! alone, not the emulated servers' or the benchmark's), its CPU time and reconciles per
//! controller, the Redfish requests per node (the BMCs' counters) and its peak RSS.
//!
//! Run by hand (not a test):
//!   source scripts/lib.sh; build_control_plane
//!   cargo build -p ingot && cargo run -p ingot --example bench_provisioning -- [N=100] [latency_ms=50] [install_s=30] [budget=N]
//! `budget` is `--provisioning-max-concurrent-installs` (ingot's default is 20). With
//! `INGOT_BENCH_BINARY=target/release/ingot` the operator measured is a release build;
//! `INGOT_BENCH_LOG=<file>` keeps its log.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "bench_support/mod.rs"]
mod bench_support;

use bench_support::{Counters, bmc_requests, free_port, inventory_name, object, until};

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ingot_api::rufio::Job;
use ingot_api::seeder::{AddressPool, Cluster, INVENTORY_NODE_READY, Inventory};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig};
use ingot_testenv::harness::bench::{ProcessGroup, ingot_binary};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "bench-provisioning";
const VIP: &str = "127.0.11.1";
const NODE_CIDR: &str = "127.0.31.0/24";
const GATEWAY: &str = "127.0.31.1";

async fn create_objects(client: &Client, fleet: &Fleet, n: usize) {
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": NS}})),
        )
        .await;
    let pools: Api<AddressPool> = Api::namespaced(client.clone(), NS);
    pools
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
                "metadata": {"name": "nodes"},
                "spec": {"cidr": NODE_CIDR, "gateway": GATEWAY}
            })),
        )
        .await
        .unwrap();
    pools
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
                "metadata": {"name": "vip"},
                "spec": {"cidr": format!("{VIP}/32"), "gateway": "127.0.11.254", "netmask": "255.255.255.0"}
            })),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let spec = BmcSpec::default();
    futures::stream::iter(fleet.bmcs.iter().take(n).enumerate())
        .map(|(i, bmc)| {
            let (secrets, inventories) = (secrets.clone(), inventories.clone());
            let name = inventory_name(i);
            let (user, password) = (spec.username.clone(), spec.password.clone());
            async move {
                secrets
                    .create(
                        &PostParams::default(),
                        &object(json!({
                            "metadata": {"name": name, "namespace": NS},
                            "stringData": {"username": user, "password": password}
                        })),
                    )
                    .await
                    .unwrap();
                inventories
                    .create(
                        &PostParams::default(),
                        &object(json!({
                            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                            "metadata": {"name": name, "namespace": NS},
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
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: u64| -> u64 {
        args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
    };
    let n = arg(1, 100) as usize;
    let latency_ms = arg(2, 50);
    let install = Duration::from_secs(arg(3, 30));
    let budget = arg(4, n as u64) as usize;
    assert!(
        (1..=250).contains(&n),
        "N: 1 to 250 (one /24 of node addresses)"
    );

    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let target = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
        controller_manager: false,
        install_crds: false,
        watchdog_parent: Some(std::process::id()),
        bind_address: VIP.parse().unwrap(),
        bootstrap_token_auth: true,
        ..ingot_testenv::Options::from_env().unwrap()
    })
    .await
    .unwrap();
    let target_env = ingot_testenv::TestEnv::connect(target.kubeconfig_path())
        .await
        .unwrap();
    let target_port = target
        .api_url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();

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
    let mut config = ServerFleetConfig::new(format!("{boot}/boot"), target_env.config());
    config.install_time = install;
    let servers =
        ServerFleet::new(config, fleet.bmcs.iter().map(|b| b.state.clone()).collect()).unwrap();
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
            .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
            .arg("--controllers=provisioning")
            .arg(format!("--http-addr=127.0.0.1:{http_port}"))
            .arg(format!("--lease-namespace={NS}"))
            .arg(format!("--provisioning-namespace={NS}"))
            .arg(format!("--seeder-namespace={NS}"))
            .arg(format!("--rufio-namespace={NS}"))
            .arg(format!("--boot-addr=127.0.0.1:{boot_port}"))
            .arg(format!("--boot-url={boot}"))
            .arg(format!("--provisioning-max-concurrent-installs={budget}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start ingot run"),
    );
    println!(
        "{n} nodes, Redfish BMCs over HTTPS ({latency_ms} ms per request, 200 ms power transitions), installs of {} s, at most {budget} at once",
        install.as_secs()
    );
    create_objects(&client, &fleet, n).await;
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let pools: Api<AddressPool> = Api::namespaced(client.clone(), NS);
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
    until("the pools to be ready", Duration::from_secs(60), || async {
        let list = pools.list(&ListParams::default()).await.unwrap();
        list.items.len() == 2
            && list
                .items
                .iter()
                .all(|p| p.status.as_ref().is_some_and(|s| s.status == "poolReady"))
    })
    .await;
    // Settled: the writes and BMC requests of readiness are left out.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let counters_before = Counters::read(http_port).await;
    let bmc_before = bmc_requests(&fleet);
    let cpu_before = operator.cpu_seconds();

    let nodes: Vec<Value> = (0..n)
        .map(|i| {
            json!({"inventoryReference": {"name": inventory_name(i), "namespace": NS},
                "addressPoolReference": {"name": "nodes", "namespace": NS}})
        })
        .collect();
    // When each boot Job is first seen (watched: creation timestamps are in whole seconds).
    let jobs_seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let job_watch = {
        let seen = jobs_seen.clone();
        let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
        tokio::spawn(async move {
            let mut events =
                std::pin::pin!(watcher(jobs, watcher::Config::default()).applied_objects());
            while let Some(event) = events.next().await {
                if let Ok(job) = event {
                    seen.lock()
                        .unwrap()
                        .entry(job.name_any())
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let applied_at = Timestamp::now();
    let applied = Instant::now();
    clusters
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "bench", "labels": {"clusterPort.harvesterhci.io": target_port}},
                "spec": {
                    "version": "v1.7.1",
                    "imageURL": "http://127.0.0.1:9/iso",
                    "clusterConfig": {"nameservers": ["127.0.31.53"], "sshKeys": ["ssh-ed25519 AAAAC3Nz ops"]},
                    "nodes": nodes,
                    "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": NS}}
                }
            })),
        )
        .await
        .unwrap();

    // Each status as first seen (polled every 100 ms).
    let mut reached: Vec<(String, f64)> = Vec::new();
    let limit = Duration::from_secs(1800);
    loop {
        let status = clusters
            .get("bench")
            .await
            .ok()
            .and_then(|c| c.status?.status)
            .unwrap_or_default();
        if !status.is_empty() && reached.last().is_none_or(|(s, _)| *s != status) {
            reached.push((status.clone(), applied.elapsed().as_secs_f64()));
        }
        if status == "clusterRunning" {
            break;
        }
        assert!(
            applied.elapsed() < limit,
            "not clusterRunning after {limit:?}: {reached:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let running = applied.elapsed().as_secs_f64();
    let peak_rss = operator.rss_mib().0;
    let cpu = operator.cpu_seconds() - cpu_before;
    let counted = Counters::read(http_port).await.since(&counters_before);
    let bmc = bmc_requests(&fleet) - bmc_before;

    job_watch.abort();
    let mut jobs: Vec<f64> = jobs_seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, _)| name.contains("-reboot-"))
        .map(|(_, at)| at.duration_since(applied).as_secs_f64())
        .collect();
    jobs.sort_by(f64::total_cmp);
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
    let ready_nodes = Api::<Node>::all(target_env.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    // When each server's Node was last posted Ready in the new cluster (its state `running`).
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
    let waves = n.div_ceil(budget);
    let install_total = install.as_secs_f64() * waves as f64;

    println!("from the Cluster's apply:");
    for (status, at) in &reached {
        println!("  {status}: {at:.1} s");
    }
    println!(
        "  boot Jobs (rufio) created: {} of {n}; first {:.1} s, last {:.1} s",
        jobs.len(),
        jobs.first().copied().unwrap_or(f64::NAN),
        jobs.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "  PXE boots recorded by the BMCs: {} of {n}; first {:.1} s, last {:.1} s",
        boots.len(),
        boots.first().copied().unwrap_or(f64::NAN),
        boots.last().copied().unwrap_or(f64::NAN)
    );
    for (w, chunk) in boots.chunks(budget).enumerate() {
        if waves > 1 {
            println!(
                "    wave {}: {} boots, {:.1} s to {:.1} s",
                w + 1,
                chunk.len(),
                chunk[0],
                chunk[chunk.len() - 1]
            );
        }
    }
    println!(
        "  Nodes Ready in the new cluster (the emulated servers): {} of {n}, the last at {:.1} s",
        nodes_up.len(),
        nodes_up.last().copied().unwrap_or(f64::NAN)
    );
    println!("  clusterRunning: {running:.1} s ({ready_nodes} Nodes in the new cluster)");
    println!(
        "  less {waves} wave(s) of {} s installs: ingot's share {:.1} s",
        install.as_secs(),
        running - install_total
    );
    let total_writes: f64 = counted.writes.values().sum();
    println!(
        "operator API writes: {total_writes} ({:.1} per node): {:?}",
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
        "Redfish requests: {bmc} ({:.1} per node)",
        bmc as f64 / n as f64
    );
    println!("operator peak RSS: {peak_rss:.0} MiB");
}
