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
        /// Do not install ingot's CRDs (a control plane that plays another cluster).
        #[arg(long)]
        no_crds: bool,
        /// The loopback address kube-apiserver listens on and its certificate names (e.g. a
        /// cluster's VIP, 127.x.y.z).
        #[arg(long, default_value = "127.0.0.1")]
        bind_address: std::net::IpAddr,
        /// Accept bootstrap tokens (`--enable-bootstrap-token-auth`), as RKE2 does.
        #[arg(long)]
        bootstrap_token_auth: bool,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Command::Up {
        dir,
        bin_dir,
        no_controller_manager,
        no_crds,
        bind_address,
        bootstrap_token_auth,
    } = Command::parse();
    let ready_marker = dir.join("ready");
    let _ = std::fs::remove_file(&ready_marker);
    let options = Options {
        bin_dir,
        state_dir: Some(dir.clone()),
        controller_manager: !no_controller_manager,
        install_crds: !no_crds,
        watchdog_parent: None,
        bind_address,
        bootstrap_token_auth,
        controller_manager_args: Vec::new(),
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
