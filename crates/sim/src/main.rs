//! `ingot-sim`: emulators for development and tests.
//!
//! - `ingot-sim metal --listen 127.0.0.1:PORT --token TOKEN --project PROJECT_ID` serves an
//!   emulated Equinix Metal API at `http://127.0.0.1:PORT/metal/v1`.
//! - `ingot-sim boot --metal-url http://127.0.0.1:PORT/metal/v1 --kubeconfig FILE
//!   --join-token-env VAR --server-url https://VIP` plays the servers that boot on that emulator
//!   and joins the ones whose install config the Harvester installer would accept as Nodes.
//! - `ingot-sim bmc --count N [--ipmi]` runs a fleet of emulated Redfish BMCs on loopback, each
//!   also answering IPMI lanplus with `--ipmi`.
//! - `ingot-sim servers --count N --boot-url URL --target-kubeconfig FILE` runs N servers behind
//!   emulated Redfish BMCs, provisioned as in Seeder's full mode: a PXE boot set over Redfish
//!   fetches the iPXE script from the boot URL, installs, calls the installer's webhook, and the
//!   installed servers form the cluster played by the target API server (its host is the VIP).

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
    /// Play the servers that boot on a Metal emulator and join them as Nodes.
    Boot(BootArgs),
    /// Servers behind emulated Redfish BMCs that PXE-boot from a boot server, install Harvester
    /// and form the cluster that the target API server plays (Seeder's full mode).
    Servers(ServersArgs),
}

#[derive(clap::Args)]
struct ServersArgs {
    /// Number of servers (one BMC each).
    #[arg(long, default_value_t = 3)]
    count: usize,
    /// Where a PXE-booting server fetches its iPXE script: `{mac}` is replaced by its MAC;
    /// without `{mac}`, `/<mac>` is appended (ingot's `--boot-url` followed by `/boot`).
    #[arg(long)]
    boot_url: String,
    /// Admin kubeconfig of the API server that plays the new cluster; its host is the
    /// cluster's VIP.
    #[arg(long)]
    target_kubeconfig: PathBuf,
    /// Loopback address the BMCs listen on (HTTPS, a certificate of their own CA).
    #[arg(long, default_value = "127.0.0.1")]
    listen: IpAddr,
    /// First BMC port (BMC i listens on base-port + i); 0 picks ephemeral ports.
    #[arg(long, default_value_t = 0)]
    base_port: u16,
    /// Vendor profile of every BMC (dell, hpe, lenovo, supermicro).
    #[arg(long, default_value = "dell")]
    vendor: Vendor,
    /// The BMCs' user.
    #[arg(long, default_value = "admin")]
    user: String,
    /// The BMCs' password.
    #[arg(long, default_value = "password")]
    password: String,
    /// How long a power transition takes, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    power_delay_ms: u64,
    /// How long the installer runs once it accepts its config, in seconds.
    #[arg(long, default_value_t = 30)]
    install_secs: u64,
    /// How often a node's kubelet posts its status, in seconds.
    #[arg(long, default_value_t = 10)]
    heartbeat_secs: u64,
    /// Address of `GET /servers` (each server's state, loopback).
    #[arg(long, default_value = "127.0.0.1:0")]
    status_listen: SocketAddr,
    /// Also write the servers' lines (as printed on stdout) to this file, once every BMC
    /// listens.
    #[arg(long)]
    out: Option<PathBuf>,
}

async fn servers(a: ServersArgs) -> anyhow::Result<()> {
    if a.count == 0 {
        anyhow::bail!("--count 0: give the number of servers, 1 or more");
    }
    let path = &a.target_kubeconfig;
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("--target-kubeconfig {}: reading it", path.display()))?;
    let target =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("--target-kubeconfig {}: loading it", path.display()))?;
    let spec = BmcSpec {
        vendor: a.vendor,
        username: a.user.clone(),
        password: a.password.clone(),
        power_delay: Duration::from_millis(a.power_delay_ms),
        initial_power_on: false,
        ..BmcSpec::default()
    };
    let options = FleetOptions {
        listen: a.listen,
        base_port: a.base_port,
        tls: true,
    };
    let fleet = Fleet::start(options, vec![spec; a.count])
        .await
        .context("starting the BMCs")?;
    let mut config = ingot_boot_sim::servers::ServerFleetConfig::new(a.boot_url.clone(), target);
    config.install_time = Duration::from_secs(a.install_secs);
    config.heartbeat_interval = Duration::from_secs(a.heartbeat_secs.max(1));
    let servers = ingot_boot_sim::servers::ServerFleet::new(
        config,
        fleet.bmcs.iter().map(|b| b.state.clone()).collect(),
    )
    .context("starting the servers")?;
    let listener = tokio::net::TcpListener::bind(a.status_listen)
        .await
        .with_context(|| format!("--status-listen {}: binding it", a.status_listen))?;
    let status = listener.local_addr()?;
    let _running = servers.start();
    let router = servers.router();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the status endpoint stopped");
        }
    });
    let lines: String = fleet
        .bmcs
        .iter()
        .map(|b| {
            let line = serde_json::json!({
                "index": b.state.index,
                "bmc": b.url(),
                "mac": b.state.mac(0),
                "vendor": b.state.profile.vendor.to_string(),
                "status": format!("http://{status}/servers/{}", b.state.index),
            });
            format!("{line}\n")
        })
        .collect();
    if let Some(out) = &a.out {
        let tmp = out.with_extension("partial");
        std::fs::write(&tmp, &lines).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
    }
    print!("{lines}");
    tracing::info!(
        servers = a.count,
        boot_url = %a.boot_url,
        status = %format!("http://{status}/servers"),
        "servers powered off, waiting for their BMCs' commands"
    );
    wait_for_signal().await;
    Ok(())
}

#[derive(clap::Args)]
struct BootArgs {
    /// The Metal emulator's API URL (its admin endpoints are found beside it).
    #[arg(long)]
    metal_url: String,
    /// Only the devices of this project.
    #[arg(long)]
    project: Option<String>,
    /// Kubeconfig of the cluster the nodes join (default: the usual kubeconfig lookup).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Name of the environment variable holding the cluster's join token.
    #[arg(long, conflicts_with = "join_token_file")]
    join_token_env: Option<String>,
    /// File holding the cluster's join token.
    #[arg(long)]
    join_token_file: Option<PathBuf>,
    /// The join URL the nodes must use: https://VIP, or https://VIP:PORT to require a port.
    #[arg(long)]
    server_url: String,
    /// The Harvester release the installer is (default: from the kernel URL, else the config).
    #[arg(long)]
    harvester_version: Option<String>,
    /// Address of the admin endpoints (/machines, loopback).
    #[arg(long, default_value = "127.0.0.1:4100")]
    listen: SocketAddr,
    /// How often to look at the emulator, in milliseconds.
    #[arg(long, default_value_t = 200)]
    poll_ms: u64,
    /// How often a node's kubelet posts its status, in seconds.
    #[arg(long, default_value_t = 10)]
    heartbeat_secs: u64,
}

fn join_token(args: &BootArgs) -> anyhow::Result<String> {
    let token = match (&args.join_token_env, &args.join_token_file) {
        (Some(var), None) => std::env::var(var)
            .with_context(|| format!("the join token variable {var} is not set"))?,
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the join token from {}", path.display()))?,
        _ => {
            anyhow::bail!("give the join token with --join-token-env VAR or --join-token-file FILE")
        }
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        anyhow::bail!("the join token is empty");
    }
    Ok(token)
}

async fn boot(args: BootArgs) -> anyhow::Result<()> {
    let token = join_token(&args)?;
    let server = url::Url::parse(&args.server_url)
        .with_context(|| format!("--server-url {}", args.server_url))?;
    if server.scheme() != "https" {
        anyhow::bail!("--server-url {}: the join URL is https", args.server_url);
    }
    let host = server
        .host_str()
        .with_context(|| format!("--server-url {} has no host", args.server_url))?
        .to_owned();
    let schema = match &args.harvester_version {
        Some(v) => Some(
            ingot_boot_sim::Schema::of_version(v)
                .with_context(|| format!("--harvester-version {v}: expected e.g. v1.4.2"))?,
        ),
        None => None,
    };
    let kube_config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig")?,
    };
    let client = kube::Client::try_from(kube_config).context("building the Kubernetes client")?;
    let mut config = ingot_boot_sim::BooterConfig::new(
        args.metal_url.clone(),
        ingot_boot_sim::Expected {
            token,
            host,
            port: server.port(),
            schema,
        },
    );
    config.project = args.project.clone();
    config.poll_interval = std::time::Duration::from_millis(args.poll_ms);
    config.heartbeat_interval = std::time::Duration::from_secs(args.heartbeat_secs);
    let booter = ingot_boot_sim::Booter::new(config, client)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let _running = booter.start();
    tracing::info!(%addr, metal = %args.metal_url, "booting servers");
    println!("boot emulator: http://{addr}/machines");
    axum::serve(listener, booter.router()).await?;
    Ok(())
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
        Command::Boot(args) => boot(args).await,
        Command::Servers(args) => servers(args).await,
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
