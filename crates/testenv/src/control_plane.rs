//! Starting and stopping etcd, kube-apiserver and kube-controller-manager.

use std::fs::{self, File};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Error, Result, install_crds, pki, random_suffix};

/// How long the control plane may take to answer `/readyz`. It is ready in a few seconds on
/// two cores; the margin covers a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The audit log, in the state directory: one JSON line per request a ServiceAccount made, with
/// the RBAC rule's role that allowed it (how the chart's least privilege is proven).
pub const AUDIT_LOG: &str = "audit.log";

/// Only ServiceAccounts' requests are recorded (the tests' admin and the controller manager
/// use other identities), at Metadata level: who, what, and the authorizer's reason.
const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: [\"system:serviceaccounts\"]
  - level: None
";

/// What to start, and where.
#[derive(Clone, Debug)]
pub struct Options {
    /// The directory holding `etcd`, `kube-apiserver` and `kube-controller-manager`.
    pub bin_dir: PathBuf,
    /// Where state, logs and the kubeconfig go; a new temporary directory when `None`.
    pub state_dir: Option<PathBuf>,
    /// Run kube-controller-manager (garbage collection, namespace deletion).
    pub controller_manager: bool,
    /// Install the CRDs before returning.
    pub install_crds: bool,
    /// Stop the control plane once this process exits (for control planes owned by a test
    /// process, which never drops its statics).
    pub watchdog_parent: Option<u32>,
    /// The loopback address kube-apiserver listens on (and its serving certificate names):
    /// `127.0.0.1` by default; another one plays a second cluster at its own address (a VIP).
    pub bind_address: IpAddr,
    /// `--enable-bootstrap-token-auth`: a `bootstrap.kubernetes.io/token` Secret in
    /// `kube-system` authenticates its `<id>.<secret>` bearer token (group
    /// `system:bootstrappers`), as RKE2 accepts the tokens it creates.
    pub bootstrap_token_auth: bool,
    /// More arguments for kube-controller-manager, after the testenv's own. A repeated
    /// `--controllers` adds to the list (a string-slice flag appends), e.g.
    /// `--controllers=node-lifecycle-controller` beside garbage collection and namespaces.
    pub controller_manager_args: Vec<String>,
}

impl Options {
    /// Options from the environment: `INGOT_K8S_BIN` names the binaries' directory.
    pub fn from_env() -> Result<Self> {
        let bin_dir = std::env::var_os("INGOT_K8S_BIN")
            .map(PathBuf::from)
            .ok_or(Error::NoBinDir)?;
        Ok(Self {
            bin_dir,
            state_dir: None,
            controller_manager: true,
            install_crds: true,
            watchdog_parent: None,
            bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            bootstrap_token_auth: false,
            controller_manager_args: Vec::new(),
        })
    }
}

/// A running control plane. Dropping it stops every process by PID and removes its state.
pub struct ControlPlane {
    dir: PathBuf,
    remove_dir: bool,
    kubeconfig: PathBuf,
    api_url: String,
    processes: Vec<(&'static str, Child)>,
    watchdog: Option<Child>,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver, waits until the API server is ready, installs the CRDs,
    /// then starts kube-controller-manager (after the CRDs, so that its garbage collector
    /// knows them from its first discovery).
    pub async fn start(options: Options) -> Result<Self> {
        if !options.bind_address.is_loopback() {
            return Err(Error::NotLoopback(options.bind_address));
        }
        for binary in ["etcd", "kube-apiserver", "kube-controller-manager"] {
            if !options.bin_dir.join(binary).is_file() {
                return Err(Error::MissingBinaries {
                    dir: options.bin_dir.clone(),
                });
            }
        }
        let (dir, remove_dir) = match &options.state_dir {
            Some(dir) => (dir.clone(), false),
            None => {
                let dir = std::env::temp_dir().join(format!("ingot-testenv-{}", random_suffix(8)));
                (dir, true)
            }
        };
        fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;

        let pki = pki::generate(options.bind_address)?;
        let token = random_suffix(32);
        write(&dir.join("ca.crt"), &pki.ca_cert_pem)?;
        write(&dir.join("apiserver.crt"), &pki.serving_cert_pem)?;
        write(&dir.join("apiserver.key"), &pki.serving_key_pem)?;
        write(&dir.join("sa.key"), &pki.service_account_key_pem)?;
        write(&dir.join("sa.pub"), &pki.service_account_public_pem)?;
        write(&dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        write(
            &dir.join("tokens.csv"),
            &format!("{token},admin,admin,\"system:masters\"\n"),
        )?;

        let [etcd_port, etcd_peer_port, api_port] = free_ports(options.bind_address)?;
        let api_url = format!(
            "https://{}",
            std::net::SocketAddr::new(options.bind_address, api_port)
        );
        let kubeconfig = dir.join("kubeconfig");
        write(
            &kubeconfig,
            &kubeconfig_yaml(&api_url, &pki.ca_cert_pem, &token),
        )?;

        let mut plane = Self {
            dir: dir.clone(),
            remove_dir,
            kubeconfig,
            api_url,
            processes: Vec::new(),
            watchdog: None,
        };

        let etcd_data = dir.join("etcd");
        plane.spawn(
            "etcd",
            Command::new(options.bin_dir.join("etcd")).args([
                "--name=default".to_owned(),
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer_port}"),
                "--unsafe-no-fsync=true".to_owned(),
                "--logger=zap".to_owned(),
                "--log-level=warn".to_owned(),
            ]),
        )?;

        let mut apiserver_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--bind-address={}", options.bind_address),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", dir.join("apiserver.crt").display()),
            format!(
                "--tls-private-key-file={}",
                dir.join("apiserver.key").display()
            ),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            "--authorization-mode=RBAC".to_owned(),
            format!("--service-account-issuer=https://127.0.0.1:{api_port}"),
            format!(
                "--service-account-key-file={}",
                dir.join("sa.pub").display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                dir.join("sa.key").display()
            ),
            "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
            "--allow-privileged=true".to_owned(),
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            "--endpoint-reconciler-type=none".to_owned(),
            format!("--cert-dir={}", dir.join("certs").display()),
            format!(
                "--audit-policy-file={}",
                dir.join("audit-policy.yaml").display()
            ),
            format!("--audit-log-path={}", dir.join(AUDIT_LOG).display()),
            "--audit-log-format=json".to_owned(),
            "--audit-log-mode=blocking".to_owned(),
        ];
        if options.bootstrap_token_auth {
            apiserver_args.push("--enable-bootstrap-token-auth=true".to_owned());
        }
        // kube-apiserver derives its advertised address from the default route; a network
        // namespace without one must name an address.
        if let Ok(address) = std::env::var("INGOT_TESTENV_ADVERTISE_ADDRESS") {
            apiserver_args.push(format!("--advertise-address={address}"));
        }
        plane.spawn(
            "kube-apiserver",
            Command::new(options.bin_dir.join("kube-apiserver")).args(apiserver_args),
        )?;

        if let Some(parent) = options.watchdog_parent {
            plane.start_watchdog(parent)?;
        }

        plane.wait_ready().await?;
        if options.install_crds {
            install_crds(&plane.client().await?).await?;
        }
        if options.controller_manager {
            plane.spawn(
                "kube-controller-manager",
                Command::new(options.bin_dir.join("kube-controller-manager"))
                    .args([
                        format!("--kubeconfig={}", plane.kubeconfig.display()),
                        "--controllers=garbagecollector,namespace".to_owned(),
                        "--leader-elect=false".to_owned(),
                        "--secure-port=0".to_owned(),
                        "--use-service-account-credentials=false".to_owned(),
                    ])
                    .args(&options.controller_manager_args),
            )?;
            if let Some(parent) = options.watchdog_parent {
                plane.start_watchdog(parent)?;
            }
        }
        Ok(plane)
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The directory with the control plane's state and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The PIDs of the running processes, by name.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.processes
            .iter()
            .map(|(name, child)| (*name, child.id()))
            .collect()
    }

    pub async fn client(&self) -> Result<kube::Client> {
        crate::TestEnv::connect(&self.kubeconfig).await?.client()
    }

    /// Stops every process by PID: SIGTERM, then SIGKILL after a grace period.
    pub fn stop(&mut self) {
        for (_, child) in self.processes.iter().rev() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (_, child) in self.processes.iter_mut().rev() {
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.processes.clear();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        if self.remove_dir {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn spawn(&mut self, name: &'static str, command: &mut Command) -> Result<()> {
        let log = File::create(self.dir.join(format!("{name}.log")))
            .map_err(io(format!("creating the {name} log")))?;
        let log_err = log
            .try_clone()
            .map_err(io(format!("opening the {name} log")))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(io(format!("starting {name}")))?;
        self.processes.push((name, child));
        Ok(())
    }

    /// A shell that waits for `parent` to exit, then stops the control plane by PID. A test
    /// process never drops its statics, so this is how its control plane ends with it.
    fn start_watchdog(&mut self, parent: u32) -> Result<()> {
        if let Some(mut old) = self.watchdog.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        let pids: Vec<String> = self
            .processes
            .iter()
            .map(|(_, child)| child.id().to_string())
            .collect();
        let pids = pids.join(" ");
        let cleanup = if self.remove_dir {
            format!("rm -rf '{}'", self.dir.display())
        } else {
            String::new()
        };
        let script = format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 0.5; done; kill -TERM {pids} 2>/dev/null; sleep 3; kill -KILL {pids} 2>/dev/null; {cleanup}"
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("starting the control plane watchdog".to_owned()))?;
        self.watchdog = Some(child);
        Ok(())
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        let client = self.client().await?;
        loop {
            for (name, child) in &mut self.processes {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(Error::ProcessExited {
                        process: name,
                        status: status.to_string(),
                        log_tail: log_tail(&self.dir.join(format!("{name}.log"))),
                    });
                }
            }
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| Error::Io {
                    what: "building the readiness request".to_owned(),
                    source: std::io::Error::other(e),
                })?;
            if let Ok(body) = client.request_text(request).await
                && body.trim() == "ok"
            {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::NotReady {
                    seconds: READY_TIMEOUT.as_secs(),
                    log_tail: log_tail(&self.dir.join("kube-apiserver.log")),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn kubeconfig_yaml(api_url: &str, ca_pem: &str, token: &str) -> String {
    use base64::Engine as _;
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: ingot-test\n  cluster:\n    server: {api_url}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: ingot-test\n  context:\n    cluster: ingot-test\n    user: admin\ncurrent-context: ingot-test\n",
        ca = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes()),
    )
}

/// Three distinct free TCP ports: two on 127.0.0.1 (etcd), the last on `api` as well.
fn free_ports(api: IpAddr) -> Result<[u16; 3]> {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|i| {
            if i == 2 {
                TcpListener::bind((api, 0))
            } else {
                TcpListener::bind("127.0.0.1:0")
            }
        })
        .collect::<Result<_, _>>()
        .map_err(io("finding free loopback ports".to_owned()))?;
    let mut ports = [0u16; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(io("reading a bound port".to_owned()))?
            .port();
    }
    Ok(ports)
}

fn write(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).map_err(io(format!("writing {}", path.display())))
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_non_loopback_bind_address_is_refused() {
        let options = Options {
            bin_dir: PathBuf::from("unused"),
            state_dir: None,
            controller_manager: false,
            install_crds: false,
            watchdog_parent: None,
            bind_address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            bootstrap_token_auth: true,
            controller_manager_args: Vec::new(),
        };
        let Err(error) = ControlPlane::start(options).await else {
            panic!("started on a non-loopback address");
        };
        assert!(matches!(error, Error::NotLoopback(_)), "{error}");
        assert!(error.to_string().contains("192.0.2.1"), "{error}");
    }
}
