//! Side by side on the same BMC fleet emulator: upstream Tinkerbell Rufio (its manager built
//! from its Go module by tools/rufio) and ingot's Rufio controllers, each given N Machines on a
//! real control plane. Prints, per run: the time until every Machine's power state is known,
//! the BMC sessions opened, and the requests per Machine; then the spec-change → BMC-call
//! latency of N Jobs created at once (ingot).
//!
//! Run by hand (not a test):
//!   source scripts/lib.sh; build_control_plane; build_rufio
//!   cargo run -p ingot --example bench_rufio -- [N=1000] [latency_ms=50] [runs=all|ingot|latency]
//!
//! Each emulated BMC answers Redfish (HTTPS) and IPMI lanplus, every Redfish request after
//! `latency_ms`. ingot runs in this process (the same controllers `ingot run` starts).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ingot_api::rufio::{Job, Machine};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions};
use ingot_controllers::Metrics;
use ingot_controllers::rufio::{RufioContext, Settings, run};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::watch;

const USER: &str = "admin";
const PASSWORD: &str = "bench-password";

/// The upstream process, killed by its PID if the benchmark stops early.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Fleets {
    redfish: Fleet,
    ipmi: ingot_ipmi_sim::Fleet,
}

impl Fleets {
    fn sessions_opened(&self) -> u64 {
        let r: u64 = self
            .redfish
            .bmcs
            .iter()
            .map(|b| b.state.snapshot().sessions_created)
            .sum();
        let i: u64 = self
            .ipmi
            .bmcs()
            .iter()
            .map(|b| b.stats().sessions_opened)
            .sum();
        r + i
    }
    fn requests(&self) -> u64 {
        self.redfish
            .bmcs
            .iter()
            .map(|b| b.state.snapshot().requests)
            .sum()
    }
    /// Each Redfish BMC's state, to sample from another task.
    fn states(&self) -> Vec<Arc<ingot_bmc_sim::BmcState>> {
        self.redfish.bmcs.iter().map(|b| b.state.clone()).collect()
    }
    fn open_sessions(&self) -> usize {
        self.redfish
            .bmcs
            .iter()
            .map(|b| b.state.snapshot().sessions)
            .sum()
    }
}

async fn create_machines(client: &Client, ns: &str, fleets: &Fleets) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "bmc-auth", "namespace": ns},
        "stringData": {"username": USER, "password": PASSWORD}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let api: Api<Machine> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(
        fleets
            .redfish
            .bmcs
            .iter()
            .zip(fleets.ipmi.bmcs())
            .enumerate(),
    )
    .map(|(i, (r, p))| {
        let api = api.clone();
        let m: Machine = serde_json::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
            "metadata": {"name": format!("m{i:05}"), "namespace": ns},
            "spec": {"connection": {
                "host": "127.0.0.1", "insecureTLS": true,
                "authSecretRef": {"name": "bmc-auth", "namespace": ns},
                "providerOptions": {
                    "redfish": {"port": r.addr.port()},
                    "ipmitool": {"port": p.addr().port()}
                }
            }}
        }))
        .unwrap();
        async move { api.create(&PostParams::default(), &m).await.unwrap() }
    })
    .buffer_unordered(32)
    .collect::<Vec<_>>()
    .await;
}

/// Seconds until every Machine of the namespace has `powerState` on or off. Watched, not
/// listed: a list of every Machine a few times a second would load the API server (and this
/// process, where ingot runs) more than the operator being measured.
async fn until_known(
    client: &Client,
    ns: &str,
    n: usize,
    start: Instant,
    limit: Duration,
) -> Option<f64> {
    use kube::runtime::{WatchStreamExt, watcher};
    let api: Api<Machine> = Api::namespaced(client.clone(), ns);
    let mut known = std::collections::HashSet::new();
    let mut changes = std::pin::pin!(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    let deadline = tokio::time::sleep(limit.saturating_sub(start.elapsed()));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => {
                eprintln!("  gave up: {}/{n} known after {limit:?}", known.len());
                return None;
            }
            change = changes.next() => {
                let change = change?;
                let Ok(m) = change else { continue };
                let state = m.status.as_ref().and_then(|s| s.power_state.as_deref());
                if matches!(state, Some("on" | "off")) {
                    known.insert(m.metadata.name.clone().unwrap_or_default());
                }
                if known.len() >= n {
                    return Some(start.elapsed().as_secs_f64());
                }
            }
        }
    }
}

/// Samples the fleet's Redfish request count every 10 ms until told to stop; answers the
/// seconds from `start` to the first and to the last increase seen.
fn request_times(
    fleets: &Fleets,
    start: Instant,
) -> (
    watch::Sender<bool>,
    tokio::task::JoinHandle<Option<(f64, f64)>>,
) {
    let bmcs = fleets.states();
    let (stop, mut stopped) = watch::channel(false);
    let sampler = tokio::spawn(async move {
        let count = || {
            bmcs.iter()
                .map(|b| {
                    b.counters
                        .requests
                        .load(std::sync::atomic::Ordering::Relaxed)
                })
                .sum::<u64>()
        };
        let mut last = count();
        let mut at: Option<(f64, f64)> = None;
        while !*stopped.borrow() {
            tokio::select! {
                _ = stopped.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            let now = count();
            if now != last {
                last = now;
                let t = start.elapsed().as_secs_f64();
                at = Some((at.map_or(t, |(first, _)| first), t));
            }
        }
        at
    });
    (stop, sampler)
}

fn ingot_settings(ns: &str, concurrency: Option<u16>) -> Settings {
    let mut s = Settings {
        namespace: Some(ns.to_owned()),
        ..Settings::default()
    };
    if let Some(c) = concurrency {
        s.machine_concurrency = c;
        s.task_concurrency = c;
        s.fleet_limit = c as usize;
    } else {
        // Other settings to compare, by environment (the defaults when unset).
        let from_env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
        if let Some(c) = from_env("BENCH_MACHINE_CONCURRENCY") {
            s.machine_concurrency = c;
        }
        if let Some(c) = from_env("BENCH_TASK_CONCURRENCY") {
            s.task_concurrency = c;
        }
    }
    s
}

struct Figures {
    label: String,
    seconds: Option<f64>,
    /// Seconds until the BMCs received their first and their last Redfish request of the sweep
    /// (sampled every 10 ms): what comes before the first is the operator starting (its
    /// caches filled); what follows the last is one answer and the status writes.
    requests_at: Option<(f64, f64)>,
    sessions: u64,
    requests_per_machine: f64,
    /// Redfish sessions still open on the BMCs once the operator stopped.
    left_open: usize,
}

async fn run_ingot(
    client: &Client,
    operator_client: &Client,
    ns: &str,
    n: usize,
    fleets: &Fleets,
    concurrency: Option<u16>,
    label: &str,
) -> Figures {
    create_machines(client, ns, fleets).await;
    let (s0, q0, open0) = (
        fleets.sessions_opened(),
        fleets.requests(),
        fleets.open_sessions(),
    );
    let ctx = Arc::new(RufioContext::new(
        operator_client.clone(),
        Arc::new(Metrics::default()),
        "bench".into(),
        ingot_settings(ns, concurrency),
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let shutdown = {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let start = Instant::now();
    let handle = tokio::spawn(run(ctx, futures::FutureExt::shared(shutdown)));
    let (stop_sampling, sampled) = request_times(fleets, start);
    let seconds = until_known(client, ns, n, start, Duration::from_secs(1800)).await;
    let _ = stop_sampling.send(true);
    let mut figures = Figures {
        label: label.to_owned(),
        seconds,
        requests_at: sampled.await.ok().flatten(),
        sessions: fleets.sessions_opened() - s0,
        requests_per_machine: (fleets.requests() - q0) as f64 / n as f64,
        left_open: 0,
    };
    let _ = stop_tx.send(true);
    let _ = handle.await;
    figures.left_open = fleets.open_sessions().saturating_sub(open0);
    figures
}

async fn run_upstream(
    client: &Client,
    kubeconfig: &std::path::Path,
    ns: &str,
    n: usize,
    fleets: &Fleets,
) -> Figures {
    let binary = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tools/rufio/build.sh"
        ))
        .arg("v0.6.5")
        .stderr(Stdio::inherit())
        .output()
        .expect("tools/rufio/build.sh");
    let binary = String::from_utf8_lossy(&binary.stdout).trim().to_owned();
    create_machines(client, ns, fleets).await;
    let (s0, q0, open0) = (
        fleets.sessions_opened(),
        fleets.requests(),
        fleets.open_sessions(),
    );
    let start = Instant::now();
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let mut child = Stopped(
        Command::new(binary)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--kube-namespace={ns}"))
            .arg(format!("--metrics-bind-address=127.0.0.1:{}", port()))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{}", port()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start upstream rufio"),
    );
    let (stop_sampling, sampled) = request_times(fleets, start);
    let seconds = until_known(client, ns, n, start, Duration::from_secs(3600)).await;
    let _ = stop_sampling.send(true);
    let mut figures = Figures {
        label: "upstream rufio v0.6.5 (defaults: 1 Machine worker)".into(),
        seconds,
        requests_at: sampled.await.ok().flatten(),
        sessions: fleets.sessions_opened() - s0,
        requests_per_machine: (fleets.requests() - q0) as f64 / n as f64,
        left_open: 0,
    };
    // SIGTERM, as a Deployment stops it.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.0.id().to_string())
        .status();
    let _ = child.0.wait();
    figures.left_open = fleets.open_sessions().saturating_sub(open0);
    figures
}

/// Seconds the API server takes to accept one status write per Machine (`powerState` set
/// to `unknown`, 64 at a time): the floor of a first sweep's "all known" on this control plane.
async fn status_writes(client: &Client, ns: &str, n: usize) -> f64 {
    use kube::api::{Patch, PatchParams};
    let api: Api<Machine> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                api.patch_status(
                    &format!("m{i:05}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"powerState": "unknown"}})),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    start.elapsed().as_secs_f64()
}

/// N Jobs (`powerAction: off`) created at once; the latency from each create call to its BMC
/// seeing the power-off request (the emulator's state leaves `On`).
async fn job_latency(client: &Client, ns: &str, n: usize, fleets: &Fleets) -> JobLatency {
    let ctx = Arc::new(RufioContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "bench".into(),
        ingot_settings(ns, None),
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let shutdown = {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let handle = tokio::spawn(run(ctx, futures::FutureExt::shared(shutdown)));
    // Let the Machines be read once (one session open per BMC), as in a running operator.
    let deadline = Instant::now() + Duration::from_secs(600);
    while fleets.open_sessions() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let bmcs = fleets.states();
    let sampler = tokio::spawn(async move {
        let mut seen: HashMap<usize, Instant> = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(600);
        while seen.len() < bmcs.len() && Instant::now() < deadline {
            for (i, b) in bmcs.iter().enumerate() {
                if !seen.contains_key(&i) && b.snapshot().power_state != "On" {
                    seen.insert(i, Instant::now());
                }
            }
            // A scan of the fleet costs CPU the operator needs: 20 ms is the resolution.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen
    });
    // When each Job reaches a watcher of this process: the API server's own watch delay.
    let delivered = {
        use kube::runtime::{WatchStreamExt, watcher};
        let api: Api<Job> = Api::namespaced(client.clone(), ns);
        tokio::spawn(async move {
            let mut at: HashMap<String, Instant> = HashMap::new();
            let mut jobs = std::pin::pin!(
                watcher(api, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
            );
            let deadline = tokio::time::sleep(Duration::from_secs(600));
            tokio::pin!(deadline);
            while at.len() < n {
                tokio::select! {
                    () = &mut deadline => break,
                    job = jobs.next() => match job {
                        Some(Ok(job)) => {
                            at.entry(job.metadata.name.unwrap_or_default())
                                .or_insert_with(Instant::now);
                        }
                        Some(Err(_)) => {}
                        None => break,
                    },
                }
            }
            at
        })
    };
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    let writes_before = api_writes(client).await;
    let first_create = Instant::now();
    let created: HashMap<usize, (Instant, Instant)> = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let job: Job = serde_json::from_value(json!({
                "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
                "metadata": {"name": format!("off-{i:05}"), "namespace": ns},
                "spec": {"machineRef": {"name": format!("m{i:05}"), "namespace": ns},
                         "tasks": [{"powerAction": "off"}]}
            }))
            .unwrap();
            async move {
                let at = Instant::now();
                api.create(&PostParams::default(), &job).await.unwrap();
                (i, (at, Instant::now()))
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let seen = sampler.await.unwrap();
    let delivered = delivered.await.unwrap_or_default();
    let finished = all_jobs_finished(&api, n).await;
    let writes = api_writes(client).await;
    let _ = stop_tx.send(true);
    let _ = handle.await;
    let ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1000.0;
    let mut lat: Vec<f64> = seen
        .iter()
        .filter_map(|(i, t)| created.get(i).map(|(at, _)| ms(*at, *t)))
        .collect();
    // From the create call's answer: the Job exists, the API server's queue is behind it.
    let mut after_answer: Vec<f64> = seen
        .iter()
        .filter_map(|(i, t)| created.get(i).map(|(_, done)| ms(*done, *t)))
        .collect();
    let mut watch_delay: Vec<f64> = created
        .iter()
        .filter_map(|(i, (_, done))| delivered.get(&format!("off-{i:05}")).map(|t| ms(*done, *t)))
        .collect();
    // From the Job's arrival at a watcher to its BMC's request: the operator's own share.
    let mut after_delivery: Vec<f64> = seen
        .iter()
        .filter_map(|(i, t)| delivered.get(&format!("off-{i:05}")).map(|at| ms(*at, *t)))
        .collect();
    let mut create_calls: Vec<f64> = created.values().map(|(at, done)| ms(*at, *done)).collect();
    let all_created = created.values().map(|(_, done)| *done).max();
    JobLatency {
        p50: quantile(&mut lat, 0.5),
        p99: quantile(&mut lat, 0.99),
        reached: seen.len(),
        answered_p50: quantile(&mut after_answer, 0.5),
        answered_p99: quantile(&mut after_answer, 0.99),
        watch_p50: quantile(&mut watch_delay, 0.5),
        watch_p99: quantile(&mut watch_delay, 0.99),
        delivered_p50: quantile(&mut after_delivery, 0.5),
        delivered_p99: quantile(&mut after_delivery, 0.99),
        creates_ms: all_created.map_or(0.0, |done| ms(first_create, done)),
        create_call_p99: quantile(&mut create_calls, 0.99),
        finished,
        writes: writes
            .into_iter()
            .map(|(what, count)| {
                let before = writes_before.get(&what).copied().unwrap_or(0.0);
                (what, count - before)
            })
            .filter(|(_, count)| *count > 0.0)
            .collect(),
    }
}

/// Waits (up to 5 minutes) until every Job is `Completed` or `Failed`; how many are.
async fn all_jobs_finished(api: &Api<Job>, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let finished = api
            .list(&Default::default())
            .await
            .map(|jobs| {
                jobs.items
                    .iter()
                    .filter(|j| ingot_controllers::rufio::job::finished(j))
                    .count()
            })
            .unwrap_or(0);
        if finished >= n || Instant::now() > deadline {
            return finished;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The API server's count of writes (`POST`, `PUT`, `PATCH`, `DELETE`) to Rufio's resources,
/// by verb and resource, from its own `apiserver_request_total`.
async fn api_writes(client: &Client) -> std::collections::BTreeMap<String, f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap_or_default();
    let mut counts = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let verb = label("verb");
        if label("group") != "bmc.tinkerbell.org"
            || !matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
        {
            continue;
        }
        let subresource = label("subresource");
        let resource = if subresource.is_empty() {
            label("resource")
        } else {
            format!("{}/{subresource}", label("resource"))
        };
        // Refused writes (a conflict, an existing name) are listed apart, with their code.
        let code = label("code");
        let refused = if code.starts_with('2') {
            String::new()
        } else {
            format!(" ({code})")
        };
        *counts
            .entry(format!("{verb} {resource}{refused}"))
            .or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    counts
}

/// What [`job_latency`] measured, in ms.
struct JobLatency {
    p50: f64,
    p99: f64,
    /// BMCs that saw their power-off request.
    reached: usize,
    /// From each create call's answer (the Job stored) to its BMC's power-off request; a BMC
    /// that left `On` before the answer came back counts as 0.
    answered_p50: f64,
    answered_p99: f64,
    /// From each create call's answer to the Job's arrival at another watcher (the
    /// benchmark's own): how late the API server delivers the change to any controller.
    watch_p50: f64,
    watch_p99: f64,
    /// From each Job's arrival at that watcher to its BMC's power-off request: what the
    /// operator adds once the API server has delivered the change (the BMC's latency included).
    delivered_p50: f64,
    delivered_p99: f64,
    /// From the first create call to the last one's answer: the API server's own share.
    creates_ms: f64,
    create_call_p99: f64,
    /// Jobs `Completed` or `Failed` when the writes were counted.
    finished: usize,
    /// Writes to Rufio's resources from the first create until every Job finished, by verb
    /// and resource (the Job creates included).
    writes: std::collections::BTreeMap<String, f64>,
}

fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    values[((values.len() as f64 * q) as usize).min(values.len() - 1)]
}

#[tokio::main]
async fn main() {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let latency_ms: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50);
    let which = args.get(3).cloned().unwrap_or_else(|| "all".into());
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    // The operator's own client, as `ingot run` builds it (HTTP/2 where the API server offers
    // it); `BENCH_HTTP1=1` gives it kube's default HTTP/1.1 client instead, to compare.
    let operator_client = if std::env::var_os("BENCH_HTTP1").is_some() {
        println!("the operator's client speaks HTTP/1.1 (BENCH_HTTP1)");
        Client::try_from(env.config()).unwrap()
    } else {
        ingot_controllers::api_client::client(env.config(), &Arc::new(Metrics::default())).unwrap()
    };
    let spec = BmcSpec {
        username: USER.into(),
        password: PASSWORD.into(),
        latency: Duration::from_millis(latency_ms),
        power_delay: Duration::from_millis(200),
        max_sessions: 8,
        ..BmcSpec::default()
    };
    let redfish = Fleet::uniform(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        n,
        spec,
    )
    .await
    .unwrap();
    let mut ipmi_cfg = ingot_ipmi_sim::FleetConfig::uniform(n, PASSWORD);
    for b in &mut ipmi_cfg.bmcs {
        b.power_on = true;
    }
    let ipmi = ingot_ipmi_sim::serve(ipmi_cfg).await.unwrap();
    let fleets = Fleets { redfish, ipmi };
    println!(
        "{n} Machines, Redfish latency {latency_ms} ms per request (each BMC also answers IPMI)"
    );
    let mut results = Vec::new();
    if which == "all" {
        let ns = env.namespace("bench-upstream").await.unwrap();
        results.push(run_upstream(&client, env.kubeconfig_path(), &ns, n, &fleets).await);
    }
    let ns = env.namespace("bench-ingot").await.unwrap();
    results.push(
        run_ingot(
            &client,
            &operator_client,
            &ns,
            n,
            &fleets,
            None,
            "ingot (defaults: 256 Machines at once, fleet limit 256)",
        )
        .await,
    );
    if which != "latency" {
        let ns_eq = env.namespace("bench-ingot-eq").await.unwrap();
        results.push(
            run_ingot(
                &client,
                &operator_client,
                &ns_eq,
                n,
                &fleets,
                Some(1),
                "ingot at equal concurrency (1 Machine, 1 request at a time)",
            )
            .await,
        );
    }
    for f in &results {
        println!(
            "{:<62} all known after {:>8} s (BMC requests received from {} s)  sessions opened {:>6}  Redfish requests per Machine {:.2}  Redfish sessions left open {}",
            f.label,
            f.seconds
                .map(|s| format!("{s:.1}"))
                .unwrap_or_else(|| "-".into()),
            f.requests_at
                .map(|(first, last)| format!("{first:.2} to {last:.2}"))
                .unwrap_or_else(|| "-".into()),
            f.sessions,
            f.requests_per_machine,
            f.left_open
        );
    }
    let writes = status_writes(&client, &ns, n).await;
    println!(
        "for scale: the API server took {writes:.1} s to accept {n} Machine status writes (64 at a time), the least any operator's first sweep needs"
    );
    let l = job_latency(&client, &ns, n, &fleets).await;
    println!(
        "{} of {n} Jobs (powerAction off) created at once: create → BMC power-off request p50 {:.0} ms, p99 {:.0} ms (each Redfish request takes {latency_ms} ms at the BMC)",
        l.reached, l.p50, l.p99
    );
    println!(
        "  measured from each create call's answer (the Job stored): p50 {:.0} ms, p99 {:.0} ms",
        l.answered_p50, l.answered_p99
    );
    println!(
        "  the API server's watch delivered the Jobs to another watcher p50 {:.0} ms, p99 {:.0} ms after the create's answer",
        l.watch_p50, l.watch_p99
    );
    println!(
        "  measured from each Job's arrival at that watcher: p50 {:.0} ms, p99 {:.0} ms (the operator's own share, the power-off's two Redfish requests at the BMC included)",
        l.delivered_p50, l.delivered_p99
    );
    println!(
        "the API server took {:.0} ms to answer the {n} creates (64 at a time; one create call p99 {:.0} ms)",
        l.creates_ms, l.create_call_p99
    );
    let total: f64 = l.writes.values().sum();
    println!(
        "API writes to Rufio's resources until {} of {n} Jobs finished: {:.2} per Job ({})",
        l.finished,
        total / n as f64,
        l.writes
            .iter()
            .map(|(what, count)| format!("{what} {count:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "Redfish sessions still open on the BMCs: {}",
        fleets.open_sessions()
    );
}
