//! Seeder embedded mode at fleet scale: N Inventories, each with its Node and BMC Secret, against
//! the BMC fleet emulator (Redfish over HTTPS, `latency_ms` per request), on a real control
//! plane, with `ingot run --controllers seeder` as its own process. Prints the time until every
//! Inventory is `inventoryNodeReady`, the operator's peak RSS, its API writes per minute once
//! nothing changes, and the latency of N power actions requested at once (Harvester's two
//! writes → `actionStatus: complete`).
//!
//! With `push`, the operator runs its events receiver instead, and the last step is a hardware
//! event at a sample of the BMCs (a log entry, pushed to the receiver): the time from the event
//! at the BMC to its Node Event (p50 / p99), the operator's CPU and memory meanwhile, and the
//! BMC requests it cost against the polls that would bring the news as soon.
//!
//! Run by hand (not a test):
//!   source scripts/lib.sh; build_control_plane
//!   cargo build -p ingot && cargo run -p ingot --example bench_seeder -- [N=1000] [latency_ms=50] [power|no-power|push] [events=min(N,500)]
//! With `INGOT_BENCH_BINARY=target/release/ingot` (after `cargo build --release -p ingot`) the
//! operator measured is a release build, as a cluster runs it.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ingot_api::seeder::{INVENTORY_NODE_READY, Inventory, LOCAL_CLUSTER_NAMESPACE};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions};
use ingot_testenv::harness::bench::{ProcessGroup, ingot_binary};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const USER: &str = "admin";
const PASSWORD: &str = "bench-password";
const NS: &str = LOCAL_CLUSTER_NAMESPACE;

fn inventory_name(i: usize) -> String {
    format!("node-{i:05}")
}

async fn create_objects(client: &Client, fleet: &Fleet) {
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    futures::stream::iter(fleet.bmcs.iter().enumerate())
        .map(|(i, bmc)| {
            let (nodes, secrets, inventories) = (nodes.clone(), secrets.clone(), inventories.clone());
            let name = inventory_name(i);
            let address = format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256);
            let port = bmc.addr.port();
            async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "status": {"addresses": [{"type": "InternalIP", "address": address}]}
                }))
                .unwrap();
                nodes.create(&PostParams::default(), &node).await.unwrap();
                let secret: Secret = serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": NS},
                    "stringData": {"username": USER, "password": PASSWORD}
                }))
                .unwrap();
                secrets.create(&PostParams::default(), &secret).await.unwrap();
                let inventory: Inventory = serde_json::from_value(json!({
                    "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                    "metadata": {"name": name, "namespace": NS, "annotations": {
                        "metal.harvesterhci.io/local-inventory": "true",
                        "metal.harvesterhci.io/local-node-name": name}},
                    "spec": {
                        "baseboardSpec": {"connection": {
                            "host": format!("https://127.0.0.1:{port}"), "port": 623, "insecureTLS": true,
                            "authSecretRef": {"name": name, "namespace": NS}}},
                        "events": {"enabled": true, "pollingInterval": "1h"}
                    }
                }))
                .unwrap();
                inventories
                    .create(&PostParams::default(), &inventory)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
}

/// Hardware events at `k` of the BMCs, 20 a second: the time from each (a log entry added at
/// the BMC, which pushes it) to its Node Event, read from a watch of the Events.
async fn pushed_events(client: &Client, fleet: &Fleet, operator: &ProcessGroup, k: usize) {
    let subscribed = Instant::now();
    while fleet
        .bmcs
        .iter()
        .any(|b| b.state.subscriptions().len() != 1)
    {
        assert!(
            subscribed.elapsed() < Duration::from_secs(600),
            "not every BMC has one subscription after 10 min"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "every BMC subscribed {:.1} s after all were ready",
        subscribed.elapsed().as_secs_f64()
    );
    // The BMCs that get an event, and their requests: counted there only, since at 10,000
    // the rest of the fleet is never quiet (hourly polls of 10,000 are about three a second).
    let stride = (fleet.bmcs.len() / k.max(1)).max(1);
    let sampled: Vec<_> = (0..k)
        .map(|i| &fleet.bmcs[(i * stride) % fleet.bmcs.len()])
        .collect();
    let requests = || -> u64 { sampled.iter().map(|b| b.state.snapshot().requests).sum() };
    // Their background (polls, power reads) over 10 s, taken out of the count below.
    let quiet_from = (Instant::now(), requests());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let background_per_second =
        (requests() - quiet_from.1) as f64 / quiet_from.0.elapsed().as_secs_f64();
    let (cpu_before, requests_before, counted_from) =
        (operator.cpu_seconds(), requests(), Instant::now());
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let seen = tokio::spawn(async move {
        let mut seen: HashMap<String, Instant> = HashMap::new();
        let config = watcher::Config::default().fields("reason=HarvesterHardwareDiscovery");
        let mut stream = std::pin::pin!(watcher(events, config).applied_objects());
        while seen.len() < k {
            match tokio::time::timeout(Duration::from_secs(600), stream.next()).await {
                Ok(Some(Ok(event))) => {
                    let message = event.message.unwrap_or_default();
                    if let Some(marker) = message
                        .split_whitespace()
                        .find(|w| w.starts_with("bench-event-"))
                    {
                        seen.entry(marker.trim_end_matches('.').to_owned())
                            .or_insert_with(Instant::now);
                    }
                }
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        seen
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let mut sent = HashMap::new();
    for (i, bmc) in sampled.iter().enumerate() {
        let marker = format!("bench-event-{i}");
        sent.insert(marker.clone(), Instant::now());
        bmc.state.add_log(
            "Warning",
            &format!("Fan 2 below its lower threshold {marker}"),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = seen.await.unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    // The reads the events woke go on after their Node Events (the inventory and the sensors):
    // counted until 3 s bring no more than the background (or a minute has passed).
    let mut last = requests();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = requests();
        if (now - last) as f64 <= background_per_second * 3.0 * 1.5 + 1.0 {
            last = now;
            break;
        }
        last = now;
    }
    let cpu = operator.cpu_seconds() - cpu_before;
    let background = background_per_second * counted_from.elapsed().as_secs_f64();
    let spent = ((last - requests_before) as f64 - background).max(0.0) as u64;
    let mut latency: Vec<f64> = sent
        .iter()
        .filter_map(|(m, at)| Some(seen.get(m)?.duration_since(*at).as_secs_f64()))
        .collect();
    latency.sort_by(f64::total_cmp);
    if latency.is_empty() {
        println!("no pushed event became a Node Event");
        return;
    }
    let q = |p: f64| latency[((latency.len() as f64 * p) as usize).min(latency.len() - 1)];
    let (p50, p99) = (q(0.5), q(0.99));
    println!(
        "{} of {k} events at the BMC became Node Events: p50 {p50:.2} s, p99 {p99:.2} s",
        latency.len()
    );
    println!("operator CPU over the {elapsed:.1} s of events and the reads they woke: {cpu:.1} s");
    let per_event = spent as f64 / k as f64;
    // Polling alone brings an event within p99 only if each BMC is read every p99 seconds.
    let n = fleet.bmcs.len() as f64;
    let polls = n * elapsed / p99.max(0.001);
    println!(
        "BMC requests during the events: {spent} ({per_event:.1} per event); polling every {p99:.1} s instead: {polls:.0} hardware reads of {n:.0} BMCs in that time ({:.0} requests at {per_event:.1} each)",
        polls * per_event
    );
}

/// Polls the Inventories until `done` holds for each, returning when each first did.
async fn until_each(
    client: &Client,
    n: usize,
    limit: Duration,
    done: impl Fn(&Inventory) -> bool,
) -> HashMap<String, Instant> {
    // Watched, not listed: a list of 10,000 Inventories a few times a second would be most of
    // the API server's work.
    let api: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = HashMap::new();
    let mut inventories =
        std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    while seen.len() < n {
        match tokio::time::timeout_at(deadline, inventories.next()).await {
            Ok(Some(Ok(inventory))) => {
                if done(&inventory) {
                    seen.entry(inventory.name_any())
                        .or_insert_with(Instant::now);
                }
            }
            Ok(Some(Err(_))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    if seen.len() < n {
        eprintln!("  gave up: {}/{n} after {limit:?}", seen.len());
    }
    seen
}

/// Write requests to the API server so far, by `verb resource`, from the
/// operator's own counter.
async fn writes(http_port: u16) -> BTreeMap<String, f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{http_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let label = |line: &str, name: &str| {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    };
    let mut by_kind = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("ingot_kube_requests_total{"))
    {
        let (Some(verb), Some(resource)) = (label(line, "verb"), label(line, "resource")) else {
            continue;
        };
        if !["create", "update", "patch", "delete"].contains(&verb.as_str()) {
            continue;
        }
        let Some(count) = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse::<f64>().ok())
        else {
            continue;
        };
        *by_kind.entry(format!("{verb} {resource}")).or_insert(0.0) += count;
    }
    by_kind
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let latency_ms: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50);
    let mode = args.get(3).map(String::as_str).unwrap_or("power");
    let events: usize = args
        .get(4)
        .and_then(|a| a.parse().ok())
        .unwrap_or(n.min(500));
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let spec = BmcSpec {
        username: USER.into(),
        password: PASSWORD.into(),
        latency: Duration::from_millis(latency_ms),
        power_delay: Duration::from_millis(200),
        max_sessions: 8,
        ..BmcSpec::default()
    };
    let fleet = Fleet::uniform(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        n,
        spec,
    )
    .await
    .unwrap();
    println!("{n} Inventories, Redfish BMCs over HTTPS, {latency_ms} ms per request");
    let created = Instant::now();
    create_objects(&client, &fleet).await;
    println!(
        "objects created (Node, Secret, Inventory each) in {:.1} s",
        created.elapsed().as_secs_f64()
    );

    let http_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // `INGOT_BENCH_WRAP=heaptrack` runs the operator under a profiler (its RSS is then not
    // the operator's).
    let mut command = match std::env::var_os("INGOT_BENCH_WRAP") {
        Some(wrapper) => {
            let mut c = Command::new(wrapper);
            c.arg(ingot_binary());
            c
        }
        None => Command::new(ingot_binary()),
    };
    // The events receiver's flags, after `run`.
    let mut receiver = Vec::new();
    if mode == "push" {
        let key = ingot_testenv::harness::temp_dir("bench-push").join("events.key");
        std::fs::write(&key, "bench-events-key-".repeat(4)).unwrap();
        let port = ingot_testenv::harness::closed_port();
        receiver = vec![
            format!("--events-addr=127.0.0.1:{port}"),
            format!("--events-url=https://127.0.0.1:{port}/redfish-events"),
            format!("--events-key-file={}", key.display()),
        ];
    }
    let operator = ProcessGroup(
        command
            .process_group(0)
            .arg("run")
            .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
            .arg("--controllers=seeder")
            .arg(format!("--http-addr=127.0.0.1:{http_port}"))
            .arg(format!("--lease-namespace={NS}"))
            .arg(format!("--seeder-namespace={NS}"))
            .arg(format!("--rufio-namespace={NS}"))
            .args(&receiver)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ingot run"),
    );
    let started = Instant::now();
    let ready = until_each(&client, n, Duration::from_secs(3600), |i| {
        i.status.as_ref().and_then(|s| s.status.as_deref()) == Some(INVENTORY_NODE_READY)
    })
    .await;
    let all_ready = ready
        .values()
        .max()
        .map(|t| t.duration_since(started).as_secs_f64());
    println!(
        "{} of {n} inventoryNodeReady after {} s",
        ready.len(),
        all_ready
            .map(|s| format!("{s:.1}"))
            .unwrap_or_else(|| "-".into())
    );

    // Steady state: settle, then count the operator's writes over a minute.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let before = writes(http_port).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let mut steady: BTreeMap<String, f64> = writes(http_port).await;
    for (kind, count) in &mut steady {
        *count -= before.get(kind).copied().unwrap_or(0.0);
    }
    steady.retain(|_, count| *count > 0.0);
    println!(
        "API writes in a minute of steady state: {} ({steady:?})",
        steady.values().sum::<f64>()
    );

    if mode == "push" {
        pushed_events(&client, &fleet, &operator, events).await;
    }
    if mode != "power" {
        let (peak, now) = operator.rss_mib();
        println!("operator RSS: peak {peak:.0} MiB, now {now:.0} MiB");
        return;
    }
    // Power actions: every Node put in maintenance (ingot refuses a shutdown of a Node that is
    // not), then every Inventory asked to shut down at once, as Harvester writes it.
    let api: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let asked: HashMap<String, Instant> = futures::stream::iter(0..n)
        .map(|i| {
            let (api, nodes) = (api.clone(), nodes.clone());
            async move {
                let name = inventory_name(i);
                nodes
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {
                            "harvesterhci.io/maintain-status": "completed"}}})),
                    )
                    .await
                    .unwrap();
                let at = Instant::now();
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"powerActionRequested": "shutdown"}})),
                )
                .await
                .unwrap();
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"powerAction": {"lastJobName": ""}}})),
                )
                .await
                .unwrap();
                (name, at)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    // An answer is `complete` or `failed` of the shutdown's Job; a failure is counted, not
    // waited on.
    let answered = until_each(&client, n, Duration::from_secs(1800), |i| {
        let pa = i.status.as_ref().map(|s| &s.power_action);
        pa.is_some_and(|pa| {
            matches!(pa.action_status.as_deref(), Some("complete" | "failed"))
                && pa
                    .last_job_name
                    .as_deref()
                    .is_some_and(|j| j.contains("-shutdown-"))
        })
    })
    .await;
    let failed = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|i| {
            i.status
                .as_ref()
                .and_then(|s| s.power_action.action_status.as_deref())
                == Some("failed")
        })
        .count();
    if failed > 0 {
        println!("{failed} of {n} shutdowns failed");
    }
    let mut latency: Vec<f64> = answered
        .iter()
        .filter_map(|(name, t)| Some(t.duration_since(*asked.get(name)?).as_secs_f64()))
        .collect();
    latency.sort_by(f64::total_cmp);
    let q = |p: f64| latency[((latency.len() as f64 * p) as usize).min(latency.len() - 1)];
    if !latency.is_empty() {
        println!(
            "{} of {n} shutdowns answered: request → complete p50 {:.1} s, p99 {:.1} s",
            latency.len(),
            q(0.5),
            q(0.99)
        );
    }
    let off = fleet
        .bmcs
        .iter()
        .filter(|b| b.state.snapshot().power_state == "Off")
        .count();
    println!("BMCs powered off, read from the emulator: {off} of {n}");
    let (peak, now) = operator.rss_mib();
    println!("operator RSS: peak {peak:.0} MiB, now {now:.0} MiB");
}
