//! Upstream Gardener machine-controller-manager (the MachineSet and MachineDeployment
//! controllers, built from its Go module by `tools/mcm/build.sh`) as a process beside the tests,
//! pointed at the test control plane with `--control-kubeconfig`, `--target-kubeconfig` and
//! `--namespace`. Stopped by PID when the handle is dropped.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Error, Result};

/// The environment variable naming the directory `tools/mcm/build.sh` printed.
pub const MCM_BIN_ENV: &str = "INGOT_MCM_BIN";

/// A running machine-controller-manager.
pub struct Mcm {
    child: Child,
    log: PathBuf,
}

impl Mcm {
    /// Starts MCM for one namespace of one cluster (control and target alike). Its log goes
    /// to `log`.
    pub fn start(kubeconfig: &Path, namespace: &str, log: &Path) -> Result<Self> {
        Self::start_with_target(kubeconfig, kubeconfig, namespace, log)
    }

    /// Starts MCM with its MachineDeployments in `namespace` of the control cluster and the
    /// Nodes in the target cluster, as it runs in a Gardener seed.
    pub fn start_with_target(
        control_kubeconfig: &Path,
        target_kubeconfig: &Path,
        namespace: &str,
        log: &Path,
    ) -> Result<Self> {
        let dir = std::env::var_os(MCM_BIN_ENV)
            .map(PathBuf::from)
            .ok_or(Error::NoMcmBin)?;
        let binary = dir.join("machine-controller-manager");
        if !binary.is_file() {
            return Err(Error::NoMcmBin);
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|source| Error::Io {
                what: "finding a free port for MCM".into(),
                source,
            })?
            .port();
        let out = File::create(log).map_err(|source| Error::Io {
            what: format!("creating {}", log.display()),
            source,
        })?;
        let child = Command::new(&binary)
            .arg(format!(
                "--control-kubeconfig={}",
                control_kubeconfig.display()
            ))
            .arg(format!(
                "--target-kubeconfig={}",
                target_kubeconfig.display()
            ))
            .arg(format!("--namespace={namespace}"))
            .arg(format!("--port={port}"))
            .arg("--address=127.0.0.1")
            .arg("--leader-elect=false")
            .arg("--safety-up=2")
            .arg("--safety-down=1")
            .arg("--machine-safety-overshooting-period=1s")
            .arg("--v=2")
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|source| Error::Io {
                what: "MCM log".into(),
                source,
            })?)
            .stderr(out)
            .spawn()
            .map_err(|source| Error::Io {
                what: format!("starting {}", binary.display()),
                source,
            })?;
        Ok(Mcm {
            child,
            log: log.to_owned(),
        })
    }

    /// Still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Mcm {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let _ = self.child.wait();
    }
}
