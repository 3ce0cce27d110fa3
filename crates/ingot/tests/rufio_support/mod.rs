//! Test support of the Rufio end-to-end tests: `ingot run --controllers rufio` and upstream
//! Rufio as processes, sushy-tools over TLS, and reading objects and conditions.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../bmc/tests/common/mod.rs"]
pub mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ingot_api::rufio::{Job, Machine, Task};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub use common::{ChildGuard, free_port, poll_until, require_tool, temp_dir};

/// A process stopped by its PID when dropped; its log kept for failures.
pub struct Proc {
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn spawn_logged(cmd: &mut Command, tag: &str) -> Proc {
    let log = temp_dir(tag).join("out.log");
    let file = std::fs::File::create(&log).unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("start {tag}: {e}"));
    Proc {
        child: Some(child),
        log,
    }
}

/// `ingot run --controllers rufio` on the namespace, with short (scaled) intervals, as the
/// chart's ServiceAccount (`admin` issues its token).
pub fn start_ingot(admin: &Path, namespace: &str, extra: &[&str]) -> Proc {
    let kubeconfig = crate::chart_support::service_account_kubeconfig(admin, namespace, "rufio");
    start_ingot_as(&kubeconfig, namespace, namespace, extra)
}

/// `ingot run --controllers rufio` on `namespace` with a kubeconfig of its own, its Lease in
/// `lease_namespace`.
pub fn start_ingot_as(
    kubeconfig: &Path,
    lease_namespace: &str,
    namespace: &str,
    extra: &[&str],
) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ingot"));
    cmd.arg("run")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--lease-namespace={lease_namespace}"))
        .arg(format!("--lease-name=ingot-{namespace}"))
        .arg("--lease-duration-seconds=3")
        .arg("--controllers=rufio")
        .arg(format!("--rufio-namespace={namespace}"));
    // Scaled defaults, each unless `extra` sets it.
    let http_addr = format!("--http-addr=127.0.0.1:{}", free_port());
    for default in [
        http_addr.as_str(),
        "--rufio-machine-interval-seconds=2",
        "--rufio-task-poll-seconds=0.3",
        "--rufio-redfish-timeout-seconds=3",
    ] {
        let flag = default.split('=').next().unwrap_or_default();
        if !extra.iter().any(|e| e.starts_with(flag)) {
            cmd.arg(default);
        }
    }
    cmd.args(extra)
        .env("RUST_LOG", "info,ingot_controllers=debug");
    spawn_logged(&mut cmd, "ingot-rufio")
}

/// How many requests `ingot run` (its /metrics on `port`) made with `verb` on `resource`.
pub async fn kube_requests(port: u16, verb: &str, resource: &str) -> f64 {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let labels = [
        format!("verb=\"{verb}\""),
        format!("resource=\"{resource}\""),
    ];
    text.lines()
        .filter(|l| l.starts_with("ingot_kube_requests_total{"))
        .filter(|l| labels.iter().all(|label| l.contains(label.as_str())))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The upstream Rufio manager binary of `version` (`INGOT_RUFIO_BIN` for v0.6.5 and
/// `INGOT_RUFIO_032_BIN` for v0.3.2 when set; else built, or taken from the cache, by
/// tools/rufio/build.sh).
pub fn rufio_binary(version: &str) -> PathBuf {
    let var = match version {
        "v0.3.2" => "INGOT_RUFIO_032_BIN",
        _ => "INGOT_RUFIO_BIN",
    };
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/rufio/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(version)
        .stderr(Stdio::inherit())
        .output()
        .expect("run tools/rufio/build.sh");
    assert!(
        out.status.success(),
        "tools/rufio/build.sh {version} failed (it needs Go and the Go module proxy)"
    );
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned();
    PathBuf::from(path)
}

/// Upstream Rufio's manager, watching one namespace.
pub fn start_rufio(binary: &Path, kubeconfig: &Path, namespace: &str) -> Proc {
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--kube-namespace={namespace}"))
        .arg(format!("--metrics-bind-address=127.0.0.1:{}", free_port()))
        .arg(format!(
            "--health-probe-bind-address=127.0.0.1:{}",
            free_port()
        ));
    spawn_logged(&mut cmd, "upstream-rufio")
}

/// An upstream sample (Secret, Machine, Job) as JSON.
pub fn sample(file: &str) -> Value {
    let text = ingot_compat::shared_file(&format!("fixtures/upstream-samples/{file}"));
    ingot_compat::yaml_documents(&text).remove(0)
}

pub async fn create_secret(client: &Client, ns: &str, name: &str, user: &str, password: &str) {
    let mut s = sample("rufio_auth-secret.yaml");
    s["metadata"]["name"] = json!(name);
    s["data"] = json!({});
    s["stringData"] = json!({"username": user, "password": password});
    let secret: Secret = serde_json::from_value(s).unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// The upstream Machine sample, renamed, with its host, ports, credentials changed.
pub fn machine_sample(ns: &str, name: &str, secret: &str, host: &str, options: Value) -> Machine {
    let mut m = sample("rufio_machine_v1alpha1.yaml");
    m["metadata"]["name"] = json!(name);
    m["metadata"]["namespace"] = json!(ns);
    m["spec"]["connection"]["host"] = json!(host);
    m["spec"]["connection"]["authSecretRef"] = json!({"name": secret, "namespace": ns});
    if !options.is_null() {
        m["spec"]["connection"]["providerOptions"] = options;
    }
    serde_json::from_value(m).unwrap()
}

/// The upstream Job sample (off, PXE once, on) for a Machine.
pub fn job_sample(ns: &str, name: &str, machine: &str) -> Job {
    let mut j = sample("rufio_job_v1alpha1.yaml");
    j["metadata"]["name"] = json!(name);
    j["metadata"]["namespace"] = json!(ns);
    j["spec"]["machineRef"] = json!({"name": machine, "namespace": ns});
    serde_json::from_value(j).unwrap()
}

pub async fn create<K>(client: &Client, ns: &str, object: &K) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), object)
        .await
        .unwrap()
}

/// The status of a condition type (`True`/`False`) and its message, from a JSON status.
pub fn condition(status: &Value, type_: &str) -> Option<(String, String)> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

pub async fn machine_status(client: &Client, ns: &str, name: &str) -> Value {
    let m = Api::<Machine>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    serde_json::to_value(m.status).unwrap()
}

pub async fn job_status(client: &Client, ns: &str, name: &str) -> Value {
    let j = Api::<Job>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    serde_json::to_value(j.status).unwrap()
}

/// Waits until the Machine is `Contactable=True` with this power state.
pub async fn wait_contactable(
    client: &Client,
    ns: &str,
    name: &str,
    power: &str,
    within: Duration,
) {
    poll_until(
        &format!("Machine {name} Contactable with power {power}"),
        within,
        || async {
            let s = machine_status(client, ns, name).await;
            (condition(&s, "Contactable").map(|c| c.0).as_deref() == Some("True")
                && s["powerState"] == power)
                .then_some(())
        },
    )
    .await
}

/// Waits for the Job to end; returns its status. Panics with the log if it failed.
pub async fn wait_job(
    client: &Client,
    ns: &str,
    name: &str,
    within: Duration,
    log: &Proc,
) -> Value {
    let status = poll_until(&format!("Job {name} to end"), within, || async {
        let s = job_status(client, ns, name).await;
        let done = condition(&s, "Completed").is_some_and(|c| c.0 == "True")
            || condition(&s, "Failed").is_some_and(|c| c.0 == "True");
        done.then_some(s)
    })
    .await;
    assert!(
        condition(&status, "Completed").is_some_and(|c| c.0 == "True"),
        "Job {name} did not complete: {status}\n{}",
        log.log_tail()
    );
    status
}

pub async fn tasks_of(client: &Client, ns: &str) -> Vec<Task> {
    Api::<Task>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
}

pub async fn delete_all(client: &Client, ns: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<Job>::namespaced(client.clone(), ns)
        .delete_collection(&dp, &Default::default())
        .await;
    let _ = Api::<Task>::namespaced(client.clone(), ns)
        .delete_collection(&dp, &Default::default())
        .await;
    let _ = Api::<Machine>::namespaced(client.clone(), ns)
        .delete_collection(&dp, &Default::default())
        .await;
}

/// sushy-tools' emulator over TLS (a certificate from a CA of its own, `ca`): the fake system
/// `fake` (on), then any others it was started with.
pub struct Sushy {
    _child: ChildGuard,
    pub port: u16,
    pub dir: PathBuf,
    /// PEM of the CA that signed sushy's certificate.
    pub ca: PathBuf,
}

/// A fake system besides the first: its `Name`, `Id` (a UUID) and power state.
pub struct SushySystem<'a> {
    pub name: &'a str,
    pub uuid: &'a str,
    pub power_state: &'a str,
}

pub fn start_sushy_tls(user: &str, password: &str) -> Sushy {
    start_sushy_tls_with(user, password, &[])
}

/// sushy-tools over TLS with the fake system `fake` (on) and `more` systems.
pub fn start_sushy_tls_with(user: &str, password: &str, more: &[SushySystem]) -> Sushy {
    let sushy = require_tool("sushy-emulator");
    let python = sushy
        .parent()
        .map(|d| d.join("python3"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "python3".into());
    let dir = temp_dir("sushy-tls");
    let out = Command::new(&python)
        .args([
            "-c",
            "import bcrypt,sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(rounds=4)).decode())",
            password,
        ])
        .output()
        .expect("python for bcrypt");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    std::fs::write(dir.join("htpasswd"), format!("{user}:{digest}\n")).unwrap();
    // A CA of its own signs the certificate, so that clients can trust sushy by that CA
    // (`--bmc-ca-bundle`) as well as skip verification.
    let ca = dir.join("ca.pem");
    let ca_key = dir.join("ca-key.pem");
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let csr = dir.join("cert.csr");
    let extensions = dir.join("cert.ext");
    std::fs::write(
        &extensions,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let openssl = |args: &[&std::ffi::OsStr]| {
        let status = Command::new("openssl")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(status.success(), "openssl {args:?} failed");
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    openssl(&[
        os("req"),
        os("-x509"),
        os("-newkey"),
        os("rsa:2048"),
        os("-nodes"),
        os("-days"),
        os("1"),
        os("-keyout"),
        ca_key.as_os_str(),
        os("-out"),
        ca.as_os_str(),
        os("-subj"),
        os("/CN=sushy test CA"),
    ]);
    openssl(&[
        os("req"),
        os("-newkey"),
        os("rsa:2048"),
        os("-nodes"),
        os("-keyout"),
        key.as_os_str(),
        os("-out"),
        csr.as_os_str(),
        os("-subj"),
        os("/CN=127.0.0.1"),
    ]);
    openssl(&[
        os("x509"),
        os("-req"),
        os("-days"),
        os("1"),
        os("-in"),
        csr.as_os_str(),
        os("-CA"),
        ca.as_os_str(),
        os("-CAkey"),
        ca_key.as_os_str(),
        os("-CAcreateserial"),
        os("-extfile"),
        extensions.as_os_str(),
        os("-out"),
        cert.as_os_str(),
    ]);
    let port = free_port();
    let conf = format!(
        r#"
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = {port}
SUSHY_EMULATOR_SSL_CERT = '{cert}'
SUSHY_EMULATOR_SSL_KEY = '{key}'
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_STATE_DIR = '{state}'
SUSHY_EMULATOR_AUTH_FILE = '{auth}'
SUSHY_EMULATOR_FAKE_SYSTEMS = [{{
    'uuid': '27946b59-9e44-4fa7-8e91-f3527a1ef094',
    'name': 'fake',
    'power_state': 'On',
    'external_notifier': False,
    'nics': [{{'mac': '00:5c:52:31:3a:9c', 'ip': '127.0.0.2'}}],
}}{more}]
"#,
        more = more
            .iter()
            .map(|m| format!(
                ", {{'uuid': '{}', 'name': '{}', 'power_state': '{}', 'external_notifier': False}}",
                m.uuid, m.name, m.power_state
            ))
            .collect::<String>(),
        cert = cert.display(),
        key = key.display(),
        state = dir.join("state").display(),
        auth = dir.join("htpasswd").display(),
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    std::fs::write(dir.join("conf.py"), conf).unwrap();
    let log = std::fs::File::create(dir.join("sushy.log")).unwrap();
    let child = common::spawn(
        Command::new(&sushy)
            // sushy fetches virtual media images itself: from loopback, never through a proxy.
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            .arg("--config")
            .arg(dir.join("conf.py"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    );
    Sushy {
        _child: child,
        port,
        ca: dir.join("ca.pem"),
        dir,
    }
}

impl Sushy {
    /// The fake system as sushy itself reports it (its own API, not ingot's client).
    pub async fn system(&self, user: &str, password: &str) -> Option<Value> {
        self.systems(user, password).await.into_iter().next()
    }

    /// The system named `name`, as sushy reports it.
    pub async fn system_named(&self, user: &str, password: &str, name: &str) -> Option<Value> {
        self.systems(user, password)
            .await
            .into_iter()
            .find(|s| s["Name"] == name)
    }

    /// The first system's virtual CD device, as sushy reports it.
    pub async fn virtual_cd(&self, user: &str, password: &str) -> Option<Value> {
        let system = self.system(user, password).await?;
        let path = format!("{}/VirtualMedia/Cd", system["@odata.id"].as_str()?);
        self.get(user, password, path).await
    }

    async fn get(&self, user: &str, password: &str, path: String) -> Option<Value> {
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        http.get(format!("https://127.0.0.1:{}{path}", self.port))
            .basic_auth(user, Some(password))
            .send()
            .await
            .ok()?
            .json::<Value>()
            .await
            .ok()
    }

    /// Every member of sushy's `Systems`, in its order (empty when sushy does not answer).
    async fn systems(&self, user: &str, password: &str) -> Vec<Value> {
        let get = |path: String| self.get(user, password, path);
        let Some(collection) = get("/redfish/v1/Systems".into()).await else {
            return Vec::new();
        };
        let mut systems = Vec::new();
        for member in collection["Members"].as_array().into_iter().flatten() {
            let Some(path) = member["@odata.id"].as_str() else {
                continue;
            };
            match get(path.to_owned()).await {
                Some(system) => systems.push(system),
                None => return Vec::new(),
            }
        }
        systems
    }
}
