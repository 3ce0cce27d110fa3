//! Fleet benchmark (not a test): reads the power state of N emulated BMCs twice through the
//! session manager and prints sweep time, the ratio to the bound N x latency / fleet limit,
//! sessions opened per sweep and peak RSS.
//!
//! ```text
//! cargo run --release -p ingot-bmc --example fleet_bench -- 1000 10000
//! cargo run --release -p ingot-bmc --example fleet_bench -- --protocol ipmi 1000 9000
//! ```
//! With `--protocol ipmi` the fleet is `ingot-ipmi-sim` (answers delayed by the latency, the
//! timeout ratio dropped as datagrams in each direction) and the clients go through the IPMI
//! connector (one UDP socket each; `BENCH_CLIENT_TIMEOUT_MS` is the per-exchange timeout).
//! Environment: `BENCH_LATENCY_MS` (50), `BENCH_TIMEOUT_RATIO` (0.01), `BENCH_FLEET_LIMIT` (256),
//! `BENCH_CLIENT_TIMEOUT_MS` (1000). When the open-file limit cannot hold one listener per BMC
//! plus both ends of a kept-alive connection per BMC, the client reconnects per request.

use ingot_bmc::ipmi::{IpmiConnector, IpmiOptions};
use ingot_bmc::manager::{BmcConfig, Connector, ManagerOptions, SessionManager};
use ingot_bmc::redfish::RedfishOptions;
use ingot_bmc::{Bmc, Endpoint, Password};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn proc_status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .map(|l| l[field.len()..].trim().to_owned())
        })
        .unwrap_or_else(|| "?".into())
}

fn fd_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

struct Sweep {
    elapsed: Duration,
    p99: Duration,
    ok: usize,
    failed: usize,
    sessions_opened: u64,
    requests: u64,
}

async fn sweep(fleet: &Fleet, bmcs: &[ingot_bmc::manager::ManagedBmc]) -> Sweep {
    let sessions_before: u64 = fleet
        .bmcs
        .iter()
        .map(|b| b.state.counters.sessions_created.load(Ordering::Relaxed))
        .sum();
    let requests_before: u64 = fleet
        .bmcs
        .iter()
        .map(|b| b.state.counters.requests.load(Ordering::Relaxed))
        .sum();
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, b) in bmcs.iter().enumerate() {
        let b = b.clone();
        set.spawn(async move { b.power_state().await.map_err(|e| (i, e.to_string())) });
    }
    let (mut ok, mut failed) = (0, 0);
    let mut done = Vec::with_capacity(bmcs.len());
    while let Some(r) = set.join_next().await {
        done.push(start.elapsed());
        match r {
            Ok(Ok(_)) => ok += 1,
            Ok(Err((i, e))) => {
                failed += 1;
                if failed <= 3 {
                    let bmc = &fleet.bmcs[i].state.counters;
                    println!(
                        "    BMC {i} failed: {e} (it received {} requests in all, created {} sessions)",
                        bmc.requests.load(Ordering::Relaxed),
                        bmc.sessions_created.load(Ordering::Relaxed)
                    );
                }
            }
            Err(e) => {
                failed += 1;
                println!("    a sweep task ended: {e}");
            }
        }
    }
    let elapsed = start.elapsed();
    let p99 = done
        .get((done.len() * 99 / 100).saturating_sub(1))
        .copied()
        .unwrap_or_default();
    let sessions_after: u64 = fleet
        .bmcs
        .iter()
        .map(|b| b.state.counters.sessions_created.load(Ordering::Relaxed))
        .sum();
    let requests_after: u64 = fleet
        .bmcs
        .iter()
        .map(|b| b.state.counters.requests.load(Ordering::Relaxed))
        .sum();
    Sweep {
        elapsed,
        p99,
        ok,
        failed,
        sessions_opened: sessions_after - sessions_before,
        requests: requests_after - requests_before,
    }
}

/// Power state of every BMC through the manager: (time, time for 99%, ok, failed).
async fn ipmi_sweep(bmcs: &[ingot_bmc::manager::ManagedBmc]) -> (Duration, Duration, usize, usize) {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, b) in bmcs.iter().enumerate() {
        let b = b.clone();
        set.spawn(async move { b.power_state().await.map_err(|e| (i, e.to_string())) });
    }
    let (mut ok, mut failed) = (0, 0);
    let mut done = Vec::with_capacity(bmcs.len());
    while let Some(r) = set.join_next().await {
        done.push(start.elapsed());
        match r {
            Ok(Ok(_)) => ok += 1,
            Ok(Err((i, e))) => {
                failed += 1;
                if failed <= 3 {
                    println!("    BMC {i} failed: {e}");
                }
            }
            Err(e) => {
                failed += 1;
                println!("    a sweep task ended: {e}");
            }
        }
    }
    let p99 = done
        .get((done.len() * 99 / 100).saturating_sub(1))
        .copied()
        .unwrap_or_default();
    (start.elapsed(), p99, ok, failed)
}

async fn ipmi_bench(
    n: usize,
    latency: Duration,
    timeout_ratio: f64,
    fleet_limit: usize,
    client_timeout: Duration,
    fds: u64,
) -> anyhow::Result<()> {
    // One UDP socket per emulated BMC and one per client.
    if (n as u64) * 2 + 200 > fds {
        println!(
            "\nN = {n}: skipped, {} sockets do not fit the open-file limit {fds}",
            n * 2
        );
        return Ok(());
    }
    let loss = (timeout_ratio * 100.0).round().clamp(0.0, 100.0) as u8;
    let fleet = ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig::uniform(n, "password")).await?;
    for b in fleet.bmcs() {
        b.set_faults(ingot_ipmi_sim::Faults {
            delay: latency,
            loss_percent: loss,
            ..ingot_ipmi_sim::Faults::default()
        });
    }
    let ipmi = Arc::new(IpmiConnector::new(IpmiOptions {
        timeout: client_timeout,
        keepalive: None,
        ..IpmiOptions::default()
    }));
    let manager = SessionManager::with_connectors(
        ManagerOptions {
            per_bmc_limit: 1,
            fleet_limit,
            ..ManagerOptions::default()
        },
        vec![ipmi.clone() as Arc<dyn Connector>],
    );
    let mut bmcs = Vec::with_capacity(n);
    for b in fleet.bmcs() {
        bmcs.push(manager.bmc(BmcConfig {
            endpoint: Endpoint::parse(&b.addr().to_string(), None)?,
            username: "admin".into(),
            password: Password::new("password"),
            protocol: Some(ingot_bmc::Protocol::Ipmi),
            insecure_tls: false,
            ca_bundle_pem: None,
            pinned_sha256: None,
            system_name: None,
            basic_auth: false,
        }));
    }
    let bound = latency.as_secs_f64() * n as f64 / fleet_limit as f64;
    println!(
        "\nN = {n} IPMI BMCs ({loss}% of datagrams dropped each way); bound N x latency / limit = {bound:.2} s (per exchange; a first call is 6 exchanges: capabilities, open session, RAKP 1/2, RAKP 3/4, privilege, the request)"
    );
    for i in 1..=2 {
        let opened_before: u64 = fleet.bmcs().iter().map(|b| b.stats().sessions_opened).sum();
        let (elapsed, p99, ok, failed) = ipmi_sweep(&bmcs).await;
        let opened_after: u64 = fleet.bmcs().iter().map(|b| b.stats().sessions_opened).sum();
        println!(
            "  sweep {i}: {:.2} s (ratio {:.2}; 99% of BMCs done at {:.2} s), {ok} ok, {failed} failed, {} sessions opened",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() / bound,
            p99.as_secs_f64(),
            opened_after - opened_before
        );
    }
    let most = fleet
        .bmcs()
        .iter()
        .map(|b| b.stats().peak_sessions)
        .max()
        .unwrap_or(0);
    let most_active = fleet
        .bmcs()
        .iter()
        .map(|b| b.stats().peak_active_sessions)
        .max()
        .unwrap_or(0);
    println!(
        "  most session-table entries ever held on one BMC: {most} ({most_active} active); IPMI connects: {}",
        ipmi.stats().connects.load(Ordering::Relaxed)
    );
    let t = Instant::now();
    let closed = manager.shutdown().await;
    let open: usize = fleet.bmcs().iter().map(|b| b.stats().active_sessions).sum();
    let half_open: usize = fleet
        .bmcs()
        .iter()
        .map(|b| b.stats().sessions - b.stats().active_sessions)
        .sum();
    println!(
        "  shutdown: {closed} clients closed in {:.2} s, {open} sessions left open on the BMCs ({half_open} half-open entries of lost Open Session answers, expiring on the BMCs' 10 s setup timer)",
        t.elapsed().as_secs_f64()
    );
    println!(
        "  peak RSS so far (client + emulator in one process): {}",
        proc_status("VmHWM:")
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ipmi = args
        .windows(2)
        .any(|w| w[0] == "--protocol" && w[1] == "ipmi");
    let counts: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let counts = if counts.is_empty() {
        vec![1000, 10_000]
    } else {
        counts
    };
    let latency = Duration::from_millis(env("BENCH_LATENCY_MS", 50));
    let timeout_ratio: f64 = env("BENCH_TIMEOUT_RATIO", 0.01);
    let fleet_limit: usize = env("BENCH_FLEET_LIMIT", 256);
    let client_timeout = Duration::from_millis(env("BENCH_CLIENT_TIMEOUT_MS", 1000));
    let fds = fd_limit().unwrap_or(1024);
    println!(
        "latency {latency:?} per request, {:.1}% of requests never answered, client timeout {client_timeout:?}, fleet limit {fleet_limit}, per-BMC limit 1",
        timeout_ratio * 100.0
    );
    if ipmi {
        for n in counts {
            ipmi_bench(n, latency, timeout_ratio, fleet_limit, client_timeout, fds).await?;
        }
        return Ok(());
    }
    for n in counts {
        let fleet = Fleet::uniform(
            FleetOptions::default(),
            n,
            BmcSpec {
                latency,
                timeout_ratio,
                max_sessions: 4,
                ..BmcSpec::default()
            },
        )
        .await?;
        // One listener per BMC, plus both ends of each kept-alive connection: keep connections
        // alive only when the descriptor limit allows it (sessions are kept either way).
        let keep_alive = (n as u64) * 3 + 1000 <= fds;
        let manager = SessionManager::new(ManagerOptions {
            per_bmc_limit: 1,
            fleet_limit,
            redfish: RedfishOptions {
                timeout: client_timeout,
                idle_connections_per_bmc: usize::from(keep_alive),
                ..RedfishOptions::default()
            },
            ..ManagerOptions::default()
        });
        let mut bmcs = Vec::with_capacity(n);
        for b in &fleet.bmcs {
            bmcs.push(manager.bmc(BmcConfig {
                endpoint: Endpoint::parse(&b.url(), None)?,
                username: "admin".into(),
                password: Password::new("password"),
                protocol: None,
                insecure_tls: false,
                ca_bundle_pem: None,
                pinned_sha256: None,
                system_name: None,
                basic_auth: false,
            }));
        }
        let bound = latency.as_secs_f64() * n as f64 / fleet_limit as f64;
        println!(
            "\nN = {n} BMCs; bound N x latency / limit = {bound:.2} s; connections kept alive: {keep_alive} (open-file limit {fds})"
        );
        for i in 1..=2 {
            let hedged_before = manager.redfish_stats().hedged.load(Ordering::Relaxed);
            let s = sweep(&fleet, &bmcs).await;
            let hedged = manager.redfish_stats().hedged.load(Ordering::Relaxed) - hedged_before;
            // The bound with the requests each BMC needed (without the hedged copies).
            let per_bmc = s.requests.saturating_sub(hedged) as f64 / n as f64;
            let req_bound = bound * per_bmc;
            println!(
                "  sweep {i}: {:.2} s (ratio {:.2}; 99% of BMCs done at {:.2} s, ratio {:.2}), {} ok, {} failed, {} sessions opened, {} requests ({:.2} per BMC, {hedged} hedged); bound N x latency x {per_bmc:.2} requests / limit = {req_bound:.2} s, ratio {:.2}",
                s.elapsed.as_secs_f64(),
                s.elapsed.as_secs_f64() / bound,
                s.p99.as_secs_f64(),
                s.p99.as_secs_f64() / bound,
                s.ok,
                s.failed,
                s.sessions_opened,
                s.requests,
                s.requests as f64 / n as f64,
                s.elapsed.as_secs_f64() / req_bound,
            );
        }
        let most = fleet
            .bmcs
            .iter()
            .map(|b| b.state.counters.sessions_created.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let per_bmc_peak = fleet
            .bmcs
            .iter()
            .map(|b| b.state.counters.in_flight.peak.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        println!(
            "  most sessions ever created on one BMC: {most}; peak requests in flight: {} fleet-wide, {per_bmc_peak} on one BMC",
            fleet.in_flight.peak.load(Ordering::Relaxed)
        );
        let t = Instant::now();
        let closed = manager.shutdown().await;
        let open: usize = fleet.bmcs.iter().map(|b| b.state.snapshot().sessions).sum();
        println!(
            "  shutdown: {closed} clients closed in {:.2} s, {open} sessions left open on the BMCs",
            t.elapsed().as_secs_f64()
        );
        println!(
            "  peak RSS so far (client + emulator in one process): {}",
            proc_status("VmHWM:")
        );
        drop(bmcs);
        drop(fleet);
    }
    Ok(())
}
