//! A real Kubernetes control plane for ingot's tests and its local demo.
//!
//! [`ControlPlane::start`] runs etcd, kube-apiserver and kube-controller-manager (built from the
//! published Go modules by `tools/k8s-testbin/build.sh`) on free loopback ports, writes a
//! kubeconfig, and installs the CRDs: those ingot generates and Gardener's `machine.sapcloud.io`
//! files from the shared fixtures. The processes are stopped by PID when the handle is dropped.
//!
//! Tests call [`shared`]: one control plane per test process (or the one named by
//! `INGOT_TESTENV_KUBECONFIG`, which the test script starts once for the whole run), and
//! [`TestEnv::namespace`] for a fresh namespace per test.
//!
//! [`qemu`] boots a real machine from the network (QEMU, Debian's iPXE ROM, a Debian kernel) for
//! the provisioning tests.

mod control_plane;
mod crds;
pub mod harness;
pub mod mcm;
mod pki;
pub mod qemu;

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tokio::sync::OnceCell;

pub use control_plane::{AUDIT_LOG, ControlPlane, Options};
pub use crds::{install_crds, shared_dir};
pub use harness::operator::{Front, Operator, OperatorBuilder};
pub use harness::wait_for;

/// The audit logs of control planes other than the shared one, kept beside it
/// ([`keep_audit_log`]) for the chart's least-privilege check (`rbac_coverage`).
pub const KEPT_AUDIT_LOG_PREFIX: &str = "audit-kept-";

/// A test that ran `ingot run` as the chart's ServiceAccount on a control plane of its own
/// copies that plane's audit log beside the shared control plane's (the one
/// `INGOT_TESTENV_KUBECONFIG` names), as `audit-kept-<name>.log`, so that the requests it made
/// count as the shared plane's do. Without a shared control plane there is nothing to keep.
pub fn keep_audit_log(plane: &ControlPlane, name: &str) -> Result<()> {
    let Some(shared) = std::env::var_os("INGOT_TESTENV_KUBECONFIG") else {
        return Ok(());
    };
    let Some(dir) = Path::new(&shared).parent() else {
        return Ok(());
    };
    let from = plane.dir().join(AUDIT_LOG);
    let to = dir.join(format!("{KEPT_AUDIT_LOG_PREFIX}{name}.log"));
    std::fs::copy(&from, &to).map_err(|source| Error::Io {
        what: format!("copying {} to {}", from.display(), to.display()),
        source,
    })?;
    Ok(())
}

/// Errors of the test environment. Each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the control plane binaries are missing from {dir}: run tools/k8s-testbin/build.sh and set INGOT_K8S_BIN to the directory it prints"
    )]
    MissingBinaries { dir: PathBuf },
    #[error(
        "INGOT_K8S_BIN is not set: run tools/k8s-testbin/build.sh (or scripts/test.sh) and export the directory it prints"
    )]
    NoBinDir,
    #[error(
        "INGOT_MCM_BIN is not set or holds no machine-controller-manager: run tools/mcm/build.sh (or scripts/test.sh) and export the directory it prints"
    )]
    NoMcmBin,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{process} exited before the control plane was ready ({status}); last lines of its log:\n{log_tail}"
    )]
    ProcessExited {
        process: &'static str,
        status: String,
        log_tail: String,
    },
    #[error(
        "the control plane was not ready within {seconds} s; last lines of the kube-apiserver log:\n{log_tail}"
    )]
    NotReady { seconds: u64, log_tail: String },
    #[error(
        "Options.bind_address {0} is not a loopback address: the control plane listens on loopback only (use 127.x.y.z)"
    )]
    NotLoopback(std::net::IpAddr),
    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("reading the CRD file {path}: {message}")]
    CrdFile { path: PathBuf, message: String },
    #[error("CRD {name} was not established within {seconds} s")]
    CrdNotEstablished { name: String, seconds: u64 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A running control plane as tests see it: where to connect, and how to get a namespace.
pub struct TestEnv {
    kubeconfig: PathBuf,
    config: Config,
    // Keeps a control plane this process started alive until the process exits; a watchdog
    // stops it by PID afterwards (statics are never dropped).
    _owned: Option<ControlPlane>,
}

static SHARED: OnceCell<TestEnv> = OnceCell::const_new();

/// The control plane of this test process: the one `INGOT_TESTENV_KUBECONFIG` names, or one
/// started on first use (CRDs installed either way).
pub async fn shared() -> &'static TestEnv {
    match SHARED.get_or_try_init(init_shared).await {
        Ok(env) => env,
        Err(error) => panic!("cannot provide a Kubernetes control plane for the tests: {error}"),
    }
}

async fn init_shared() -> Result<TestEnv> {
    if let Some(path) = std::env::var_os("INGOT_TESTENV_KUBECONFIG") {
        let env = TestEnv::connect(Path::new(&path)).await?;
        install_crds(&env.client()?).await?;
        return Ok(env);
    }
    let options = Options {
        watchdog_parent: Some(std::process::id()),
        ..Options::from_env()?
    };
    let plane = ControlPlane::start(options).await?;
    let mut env = TestEnv::connect(plane.kubeconfig_path()).await?;
    env._owned = Some(plane);
    Ok(env)
}

impl TestEnv {
    /// Connects to the control plane of a kubeconfig file.
    pub async fn connect(kubeconfig: &Path) -> Result<Self> {
        let config = load_config(kubeconfig).await?;
        Ok(Self {
            kubeconfig: kubeconfig.to_owned(),
            config,
            _owned: None,
        })
    }

    /// The kubeconfig file, for processes the test starts (`ingot run`, kubectl).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The client configuration of the kubeconfig, for clients built otherwise than `client`.
    pub fn config(&self) -> Config {
        self.config.clone()
    }

    /// A new client. Make one per test: a client belongs to the runtime that made it.
    pub fn client(&self) -> Result<Client> {
        Ok(Client::try_from(self.config.clone())?)
    }

    /// Creates a fresh namespace named `<prefix>-<random>` and returns its name.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        let name = format!("{prefix}-{}", random_suffix(6));
        let namespaces: Api<Namespace> = Api::all(self.client()?);
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces
            .create(&PostParams::default(), &namespace)
            .await?;
        Ok(name)
    }
}

/// A name suffix of lowercase letters and digits, unique enough for one test run.
pub fn random_suffix(len: usize) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

async fn load_config(path: &Path) -> Result<Config> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig {
            path: path.to_owned(),
            message: e.to_string(),
        })
}
