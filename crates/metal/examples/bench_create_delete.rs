//! Creates and deletes N devices through the provider against the emulator, with a client-side
//! rate limit and injected 5xx errors, and prints wall time, API calls, retries and the ratio to
//! the minimum possible calls (one create and one delete per device).
//!
//! ```text
//! cargo run --release -p ingot-metal --example bench_create_delete -- \
//!     [--devices 1000] [--rate 10] [--error-rate 0.05] [--workers 16] [--mode lookup|listed]
//! ```
//!
//! `lookup`: every create first looks for the device by owner tag and hostname (the safe
//! default of `create_server`). `listed`: the caller lists the owner's devices once and creates
//! the missing ones with `create_missing_server`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ingot_metal::equinix::{ClientConfig, EquinixClient, EquinixMetal, RateLimiter, RetryPolicy};
use ingot_metal::{ApiToken, BareMetalCloud, Boot, CreateServer};
use ingot_metal_sim::{EndpointFault, Faults, SimConfig, SimServer};

const TOKEN: &str = "bench-token";
const PROJECT: &str = "4b1f6a3e-2c5d-4e7f-8a9b-0c1d2e3f4a5b";
const OWNER: &str = "ingot.io/pool=bench";

struct Args {
    devices: usize,
    rate: f64,
    error_rate: f64,
    workers: usize,
    listed: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        devices: 1000,
        rate: 10.0,
        error_rate: 0.05,
        workers: 16,
        listed: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--devices" => a.devices = val()?.parse().map_err(|e| format!("--devices: {e}"))?,
            "--rate" => a.rate = val()?.parse().map_err(|e| format!("--rate: {e}"))?,
            "--error-rate" => {
                a.error_rate = val()?.parse().map_err(|e| format!("--error-rate: {e}"))?
            }
            "--workers" => a.workers = val()?.parse().map_err(|e| format!("--workers: {e}"))?,
            "--mode" => {
                a.listed = match val()?.as_str() {
                    "lookup" => false,
                    "listed" => true,
                    other => return Err(format!("--mode lookup|listed, not {other}")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn spec(i: usize) -> CreateServer {
    let mut s = CreateServer::new(
        format!("bench-{i:05}"),
        "c3.small.x86",
        "sv",
        OWNER,
        Boot::Ipxe {
            script_url: Some("http://127.0.0.1:9/boot.ipxe".to_string()),
            always: false,
        },
    );
    s.userdata = Some("#cloud-config\n".to_string());
    s
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let mut cfg = SimConfig::single(TOKEN, PROJECT);
    cfg.seed = 42;
    cfg.faults = Faults {
        endpoints: [(
            "*".to_string(),
            EndpointFault {
                error_rate: a.error_rate,
                status: Some(500),
                ..EndpointFault::default()
            },
        )]
        .into_iter()
        .collect(),
        ..Faults::default()
    };
    let srv = SimServer::start(cfg, "127.0.0.1:0".parse()?).await?;

    let mut ccfg = ClientConfig::new(srv.base_url(), ApiToken::new(TOKEN));
    ccfg.timeout = Duration::from_secs(10);
    ccfg.retry = RetryPolicy {
        max_attempts: 6,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(2),
        ..RetryPolicy::default()
    };
    let limiter = Arc::new(RateLimiter::new(a.rate, 1));
    let client = EquinixClient::with_limiter(ccfg, limiter)?;
    let cloud = Arc::new(EquinixMetal::new(client, PROJECT));
    let requeues = Arc::new(AtomicU64::new(0));

    println!(
        "bench: {} devices, client rate limit {}/s, injected 5xx rate {:.0}%, {} workers, mode {}",
        a.devices,
        a.rate,
        a.error_rate * 100.0,
        a.workers,
        if a.listed { "listed" } else { "lookup" }
    );
    let started = Instant::now();

    if a.listed {
        // One paginated list tells what is missing.
        loop {
            match cloud.list_servers(OWNER).await {
                Ok(existing) => {
                    assert!(existing.is_empty());
                    break;
                }
                Err(e) if e.is_transient() => {
                    requeues.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    // Create.
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.workers {
        let (cloud, next, requeues) = (cloud.clone(), next.clone(), requeues.clone());
        let (n, listed) = (a.devices as u64, a.listed);
        tasks.spawn(async move {
            let mut ids = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, ingot_metal::Error>(ids);
                }
                let s = spec(i as usize);
                // A controller requeues on a transient error; the retry is idempotent.
                let mut tries = 0;
                loop {
                    let r = if listed && tries == 0 {
                        cloud.create_missing_server(&s).await
                    } else {
                        cloud.create_server(&s).await
                    };
                    match r {
                        Ok(server) => {
                            ids.push(server.id);
                            break;
                        }
                        Err(e) if e.is_transient() && tries < 10 => {
                            tries += 1;
                            requeues.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        });
    }
    let mut ids = Vec::new();
    while let Some(r) = tasks.join_next().await {
        ids.extend(r??);
    }
    let created_at = started.elapsed();
    let live = srv.sim().device_count(PROJECT);

    // Delete.
    let ids = Arc::new(std::sync::Mutex::new(ids));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.workers {
        let (cloud, ids, requeues) = (cloud.clone(), ids.clone(), requeues.clone());
        tasks.spawn(async move {
            loop {
                let id = match ids.lock() {
                    Ok(mut v) => v.pop(),
                    Err(_) => None,
                };
                let Some(id) = id else {
                    return Ok::<_, ingot_metal::Error>(());
                };
                let mut tries = 0;
                loop {
                    match cloud.delete_server(&id).await {
                        Ok(()) => break,
                        Err(e) if e.is_transient() && tries < 10 => {
                            tries += 1;
                            requeues.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let wall = started.elapsed();

    let stats = cloud.client().stats();
    let m = srv.sim().metrics();
    let created = m
        .endpoints
        .get("createDevice")
        .and_then(|e| e.responses.get(&201))
        .copied()
        .unwrap_or(0);
    let minimum = 2 * a.devices as u64;
    println!("devices live after create: {live} (devices created by the API: {created})");
    println!(
        "devices left after delete: {}",
        srv.sim().device_count(PROJECT)
    );
    println!(
        "wall time: {:.1} s (create phase {:.1} s)",
        wall.as_secs_f64(),
        created_at.as_secs_f64()
    );
    println!("API calls (client): {}", stats.requests());
    println!("API calls (emulator): {}", m.total_requests);
    println!(
        "  by endpoint: {}",
        m.endpoints
            .iter()
            .map(|(k, v)| format!("{k}={}", v.requests))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("injected 5xx: {}", m.faults());
    println!(
        "client retries: {}, requeues after a final error: {}",
        stats.retries(),
        requeues.load(Ordering::Relaxed)
    );
    println!(
        "minimum possible calls: {minimum}; ratio: {:.3}",
        stats.requests() as f64 / minimum as f64
    );
    println!(
        "achieved rate: {:.2} calls/s",
        stats.requests() as f64 / wall.as_secs_f64()
    );
    Ok(())
}
