//! `ingot-sim`: emulators for development and tests.
//!
//! `ingot-sim metal --listen 127.0.0.1:PORT --token TOKEN --project PROJECT_ID` serves an
//! emulated Equinix Metal API at `http://127.0.0.1:PORT/metal/v1`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use ingot_metal_sim::{SimConfig, Timings};

#[derive(Parser)]
#[command(
    name = "ingot-sim",
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
    }
}
