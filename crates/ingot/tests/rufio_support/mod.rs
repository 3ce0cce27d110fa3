//! Test support of the Rufio end-to-end tests: `ingot run --controllers rufio` and upstream
//! Rufio as processes, sushy-tools over TLS, and reading objects and conditions.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ingot_api::rufio::{Job, Machine, Task};
pub use ingot_testenv::{Operator, OperatorBuilder};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use ingot_testenv::harness::peers::{
    self, Sushy, SushySystem, start_sushy_tls, start_sushy_tls_with,
};
#[allow(unused_imports)]
pub use ingot_testenv::harness::{closed_port, closed_udp_port, require_apt_tool, temp_dir};
pub use ingot_testenv::wait_for;

/// A process of a peer (upstream Rufio) stopped by its PID when dropped; its log kept for
/// failures.
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
pub fn start_ingot(admin: &Path, namespace: &str, extra: &[&str]) -> Operator {
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
) -> Operator {
    ingot_as(kubeconfig, lease_namespace, namespace)
        .args(extra.iter().copied())
        .start()
}

/// The builder of [`start_ingot_as`], for more than extra arguments.
pub fn ingot_as(kubeconfig: &Path, lease_namespace: &str, namespace: &str) -> OperatorBuilder {
    Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("rufio")
        .kubeconfig(kubeconfig)
        .arg(format!("--lease-namespace={lease_namespace}"))
        .arg(format!("--lease-name=ingot-{namespace}"))
        .arg("--lease-duration-seconds=3")
        .controllers("rufio")
        .arg(format!("--rufio-namespace={namespace}"))
        // Scaled defaults, each unless the test sets it.
        .default_arg("--rufio-machine-interval-seconds=2")
        .default_arg("--rufio-task-poll-seconds=0.3")
        .default_arg("--rufio-redfish-timeout-seconds=3")
        .env("RUST_LOG", "info,ingot_controllers=debug")
}

/// How many requests `ingot run` (its /metrics at `addr`) made with `verb` on `resource`.
pub async fn kube_requests(addr: SocketAddr, verb: &str, resource: &str) -> f64 {
    let text = ingot_testenv::harness::operator::scrape(addr)
        .await
        .unwrap();
    ingot_testenv::harness::operator::sum_of(
        &text,
        "ingot_kube_requests_total",
        &[
            &format!("verb=\"{verb}\""),
            &format!("resource=\"{resource}\""),
        ],
    )
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
        // Ports of its own choosing.
        .arg("--metrics-bind-address=127.0.0.1:0")
        .arg("--health-probe-bind-address=127.0.0.1:0");
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
    wait_for(
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
    log: &Operator,
) -> Value {
    let status = wait_for(&format!("Job {name} to end"), within, || async {
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

/// `ingot run --controllers seeder` (rufio comes with it) on `harvester-system`, installed from
/// the plain manifests (`kubeconfig` holds their ServiceAccount's token, the Lease is in their
/// namespace), with scaled intervals.
pub fn ingot_seeder(kubeconfig: &Path, lease_name: &str) -> OperatorBuilder {
    ingot_seeder_with_machine_interval(kubeconfig, lease_name, 2)
}

/// [`ingot_seeder`], the Machines' power read every `seconds`.
pub fn ingot_seeder_with_machine_interval(
    kubeconfig: &Path,
    lease_name: &str,
    seconds: u64,
) -> OperatorBuilder {
    Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("seeder")
        .kubeconfig(kubeconfig)
        .arg(format!(
            "--lease-namespace={}",
            crate::chart_support::MANIFESTS_NAMESPACE
        ))
        .arg(format!("--lease-name={lease_name}"))
        .arg("--lease-duration-seconds=3")
        .controllers("seeder")
        .arg("--seeder-namespace=harvester-system")
        .arg("--rufio-namespace=harvester-system")
        .arg(format!("--rufio-machine-interval-seconds={seconds}"))
        .arg("--rufio-redfish-timeout-seconds=10")
        .env("RUST_LOG", "info,ingot_controllers=debug")
}
