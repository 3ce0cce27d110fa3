//! `ingot-testenv up`: runs a real control plane in the foreground for scripts (the test
//! command and the local demo) until SIGTERM or Ctrl-C, then stops it by PID.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use ingot_testenv::{ControlPlane, Options};

#[derive(Parser)]
#[command(
    about = "Run a loopback Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) with ingot's CRDs"
)]
enum Command {
    /// Start the control plane and keep it running until SIGTERM or Ctrl-C.
    Up {
        /// Directory for state, logs and the kubeconfig (`<dir>/kubeconfig`).
        #[arg(long)]
        dir: PathBuf,
        /// Directory with etcd, kube-apiserver and kube-controller-manager.
        #[arg(long, env = "INGOT_K8S_BIN")]
        bin_dir: PathBuf,
        /// Do not start kube-controller-manager.
        #[arg(long)]
        no_controller_manager: bool,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Command::Up {
        dir,
        bin_dir,
        no_controller_manager,
    } = Command::parse();
    let ready_marker = dir.join("ready");
    let _ = std::fs::remove_file(&ready_marker);
    let options = Options {
        bin_dir,
        state_dir: Some(dir.clone()),
        controller_manager: !no_controller_manager,
        install_crds: true,
        watchdog_parent: None,
        bind_address: std::net::Ipv4Addr::LOCALHOST.into(),
        bootstrap_token_auth: false,
    };
    let started = std::time::Instant::now();
    let mut plane = ControlPlane::start(options)
        .await
        .context("starting the control plane")?;
    println!(
        "control plane ready in {:.1} s at {}; kubeconfig: {}",
        started.elapsed().as_secs_f64(),
        plane.api_url(),
        plane.kubeconfig_path().display()
    );
    for (name, pid) in plane.pids() {
        println!(
            "  {name}: pid {pid}, log {}",
            plane.dir().join(format!("{name}.log")).display()
        );
    }
    std::fs::write(&ready_marker, plane.api_url()).context("writing the ready marker")?;

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let _ = std::fs::remove_file(&ready_marker);
    plane.stop();
    Ok(())
}
