//! `ingot-sim`: emulators for development and tests.
//!
//! - `ingot-sim metal --listen 127.0.0.1:PORT --token TOKEN --project PROJECT_ID` serves an
//!   emulated Equinix Metal API at `http://127.0.0.1:PORT/metal/v1`.
//! - `ingot-sim bmc --count N [--ipmi]` runs a fleet of emulated Redfish BMCs on loopback, each
//!   also answering IPMI lanplus with `--ipmi`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_metal_sim::{SimConfig, Timings};

#[derive(Parser)]
#[command(
    name = "ingot-sim",
    version,
    about = "Emulators for ingot's development and tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Emulate the Equinix Metal API.
    Metal(MetalArgs),
    /// A fleet of emulated BMCs on loopback: Redfish, and IPMI lanplus as well with --ipmi.
    Bmc(BmcArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum TimingsArg {
    Instant,
    Realistic,
}

#[derive(clap::Args)]
struct MetalArgs {
    /// Address to listen on (loopback).
    #[arg(long, default_value = "127.0.0.1:4000")]
    listen: SocketAddr,
    /// API token accepted for --project.
    #[arg(long, env = "INGOT_SIM_METAL_TOKEN")]
    token: Option<String>,
    /// Project id (UUID) the token may use.
    #[arg(long)]
    project: Option<String>,
    /// JSON file with more projects, tokens, timings and faults (see docs/metal.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Device state timings.
    #[arg(long, value_enum)]
    timings: Option<TimingsArg>,
}

async fn metal(args: MetalArgs) -> anyhow::Result<()> {
    let mut cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str::<SimConfig>(&text)
                .with_context(|| format!("parsing {}", path.display()))?
        }
        None => SimConfig::default(),
    };
    match (&args.token, &args.project) {
        (Some(t), Some(p)) => cfg = cfg.with_project(t, p),
        (None, None) => {}
        _ => anyhow::bail!("--token and --project go together"),
    }
    if cfg.tokens.is_empty() {
        anyhow::bail!("no token configured: give --token and --project, or --config");
    }
    match args.timings {
        Some(TimingsArg::Instant) => cfg.timings = Timings::instant(),
        Some(TimingsArg::Realistic) => cfg.timings = Timings::realistic(),
        None => {}
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, projects = cfg.projects.len(), tokens = cfg.tokens.len(), "metal emulator listening");
    println!("metal emulator: http://{addr}/metal/v1 (admin http://{addr}/_sim)");
    ingot_metal_sim::serve(cfg, listener).await?;
    Ok(())
}

#[derive(clap::Args)]
struct BmcArgs {
    /// Number of BMCs.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Loopback address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    listen: IpAddr,
    /// First port (BMC i listens on base-port + i); 0 picks ephemeral ports.
    #[arg(long, default_value_t = 0)]
    base_port: u16,
    /// Serve HTTPS with a fleet CA (its PEM is written to --ca-out).
    #[arg(long)]
    tls: bool,
    /// Where to write the CA certificate (PEM) when --tls is set.
    #[arg(long)]
    ca_out: Option<std::path::PathBuf>,
    /// Vendor profile for every BMC (dell, hpe, lenovo, supermicro); default: round robin.
    #[arg(long)]
    vendor: Option<Vendor>,
    #[arg(long, default_value = "admin")]
    user: String,
    #[arg(long, default_value = "password")]
    password: String,
    #[arg(long, default_value_t = 4)]
    max_sessions: usize,
    /// Power transition delay in milliseconds.
    #[arg(long, default_value_t = 2000)]
    power_delay_ms: u64,
    /// Latency added to every request, in milliseconds.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Fraction of requests that never get an answer.
    #[arg(long, default_value_t = 0.0)]
    timeout_ratio: f64,
    /// Also serve IPMI 2.0 lanplus (suites 3 and 17) for every BMC, with the same credentials,
    /// on a UDP port of its own ("ipmi" in each JSON line).
    #[arg(long)]
    ipmi: bool,
    /// First UDP port of the IPMI endpoints (BMC i uses ipmi-base-port + i); 0 picks ephemeral ports.
    #[arg(long, default_value_t = 0, requires = "ipmi")]
    ipmi_base_port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // reqwest (used by the Metal emulator) is built without a crypto provider: ring, as in the
    // rest of the workspace.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match Cli::parse().command {
        Command::Metal(args) => metal(args).await,
        Command::Bmc(args) => run_bmc(args).await,
    }
}

async fn run_bmc(a: BmcArgs) -> anyhow::Result<()> {
    let template = BmcSpec {
        vendor: a.vendor.unwrap_or(Vendor::Dell),
        username: a.user.clone(),
        password: a.password.clone(),
        max_sessions: a.max_sessions,
        power_delay: Duration::from_millis(a.power_delay_ms),
        latency: Duration::from_millis(a.latency_ms),
        timeout_ratio: a.timeout_ratio,
        ..BmcSpec::default()
    };
    let specs = (0..a.count)
        .map(|i| BmcSpec {
            vendor: a.vendor.unwrap_or(Vendor::ALL[i % Vendor::ALL.len()]),
            ..template.clone()
        })
        .collect();
    let options = FleetOptions {
        listen: a.listen,
        base_port: a.base_port,
        tls: a.tls,
    };
    let fleet = Fleet::start(options, specs)
        .await
        .context("starting the BMC fleet")?;
    if let (Some(tls), Some(path)) = (&fleet.tls, &a.ca_out) {
        std::fs::write(path, &tls.ca_pem).with_context(|| format!("writing {}", path.display()))?;
    }
    let ipmi = if a.ipmi {
        let bmcs = (0..a.count)
            .map(|i| {
                let mut b = ingot_ipmi_sim::BmcConfig::new(i, a.password.clone());
                b.username = a.user.clone();
                b.max_sessions = a.max_sessions;
                b.power_on = true;
                b.port = match a.ipmi_base_port {
                    0 => 0,
                    base => u16::try_from(i)
                        .ok()
                        .and_then(|i| base.checked_add(i))
                        .context("--ipmi-base-port + --count exceeds the port range")?,
                };
                Ok(b)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let fleet = ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig {
            bind: a.listen,
            bmcs,
        })
        .await
        .context("starting the IPMI endpoints")?;
        Some(fleet)
    } else {
        None
    };
    // One line per BMC on stdout (machine-readable), then wait for Ctrl-C / SIGTERM.
    for (i, b) in fleet.bmcs.iter().enumerate() {
        let mut line = serde_json::json!({"index": b.state.index, "url": b.url(), "vendor": b.state.profile.vendor.to_string()});
        if let Some(h) = ipmi.as_ref().and_then(|f| f.bmc(i)) {
            line["ipmi"] = serde_json::Value::String(h.addr().to_string());
        }
        println!("{line}");
    }
    eprintln!(
        "{} BMCs running; admin endpoints under /_sim/ on each. Ctrl-C to stop.",
        fleet.bmcs.len()
    );
    wait_for_signal().await;
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}
