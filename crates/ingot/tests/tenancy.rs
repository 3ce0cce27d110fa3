//! Tenant isolation end to end, on the real control plane with `ingot run --controllers rufio`
//! as the chart's ServiceAccount: a Machine, Job or Task reaches only Secrets and Machines of its
//! own namespace unless the operator allows the pair; a `http://` BMC only when the object asks
//! for it; a BMC certificate is verified against the operator's CA bundle. Refused objects say
//! why in a condition and a Warning Event, and their BMC never sees a request.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::time::Duration;

use ingot_api::rufio::{Machine, Task};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use rufio_support::*;
use serde_json::json;
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

const USER: &str = "admin";
const PASSWORD: &str = "t0p-Secret";
const SECRET: &str = "bmc-auth";
const ALLOW_HTTP: &str = "rufio.ingot.dev/allow-insecure-http";
const PIN: &str = "rufio.ingot.dev/tls-sha256-fingerprint";

/// The SHA-256 fingerprint (`AB:CD:...`) of the certificate the TLS server on `port` presents,
/// as openssl reads it.
fn served_fingerprint(port: u16) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let fingerprint = text.rsplit('=').next().unwrap_or_default().to_owned();
    assert_eq!(fingerprint.len(), 95, "openssl printed {text:?}");
    fingerprint
}

async fn annotate(client: &Client, ns: &str, name: &str, key: &str, value: &str) {
    Api::<Machine>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
}

async fn fleet(n: usize, tls: bool) -> Fleet {
    Fleet::uniform(
        FleetOptions {
            tls,
            ..FleetOptions::default()
        },
        n,
        BmcSpec {
            username: USER.into(),
            password: PASSWORD.into(),
            ..BmcSpec::default()
        },
    )
    .await
    .unwrap()
}

/// A Machine on the emulated BMC at `port`, its Secret `secret_ns/SECRET`.
fn machine(ns: &str, name: &str, secret_ns: &str, host: &str, port: u16) -> Machine {
    // IPMI at a port where nothing answers: only the Redfish emulator is this BMC.
    let options = json!({"redfish": {"port": port}, "ipmitool": {"port": closed_port()}});
    let mut m = machine_sample(ns, name, SECRET, host, options);
    m.spec
        .connection
        .auth_secret_ref
        .as_mut()
        .unwrap()
        .namespace = Some(secret_ns.into());
    m
}

/// The Events of the namespace about `object` with `reason`: their notes.
async fn event_notes(client: &Client, ns: &str, object: &str, reason: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some("Warning")
        })
        .filter_map(|e| e.note)
        .collect()
}

/// Waits for a Warning Event with `reason` on `object` and returns its note.
async fn wait_event(client: &Client, ns: &str, object: &str, reason: &str) -> String {
    wait_for(
        &format!("a {reason} Event on {object}"),
        Duration::from_secs(30),
        || async {
            event_notes(client, ns, object, reason)
                .await
                .into_iter()
                .next()
        },
    )
    .await
}

/// Waits until the Machine's `Contactable` condition has this status; returns its message.
async fn wait_contactable_is(client: &Client, ns: &str, name: &str, wanted: &str) -> String {
    wait_for(
        &format!("Machine {name} Contactable={wanted}"),
        Duration::from_secs(30),
        || async {
            let status = machine_status(client, ns, name).await;
            condition(&status, "Contactable")
                .filter(|c| c.0 == wanted)
                .map(|c| c.1)
        },
    )
    .await
}

/// The chart's ServiceAccount for `rufio` watching `ns`, its Secret rights narrowed by
/// `rufio.namespace` and `rufio.allowCrossNamespace` to Roles.
fn narrowed_kubeconfig(admin: &std::path::Path, ns: &str, allow: &[String]) -> std::path::PathBuf {
    let mut sets = vec![format!("rufio.namespace={ns}")];
    for (i, pair) in allow.iter().enumerate() {
        sets.push(format!("rufio.allowCrossNamespace[{i}]={pair}"));
    }
    chart_support::service_account_kubeconfig_with(admin, ns, "rufio", &sets)
}

/// A Machine naming a Secret of another namespace, and a Job naming a Machine of another
/// namespace, are refused with a condition and an Event naming the field: the Secret is not
/// read (no GET, and the chart's narrowed RBAC would refuse it) and neither BMC sees a request.
/// Once the operator allows the pair, the same objects work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn references_across_namespaces_are_refused_unless_the_operator_allows_them() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let tenant = env.namespace("tenancy-a").await.unwrap();
    let other = env.namespace("tenancy-b").await.unwrap();
    let fleet = fleet(2, true).await;
    let (stolen_bmc, victim_bmc) = (&fleet.bmcs[0], &fleet.bmcs[1]);
    create_secret(&client, &other, SECRET, USER, PASSWORD).await;
    let stolen = machine(
        &tenant,
        "stolen",
        &other,
        "127.0.0.1",
        stolen_bmc.addr.port(),
    );
    create(&client, &tenant, &stolen).await;
    let victim = machine(
        &other,
        "victim",
        &other,
        "127.0.0.1",
        victim_bmc.addr.port(),
    );
    create(&client, &other, &victim).await;
    let job = job_sample(&tenant, "power-victim", "victim");
    let mut job: ingot_api::rufio::Job = job;
    job.spec.machine_ref.namespace = Some(other.clone());
    create(&client, &tenant, &job).await;

    // The chart as the operator installs it for `tenant` with the pair allowed (a Role reading
    // Secrets of `other`), run first without the flag: the Roles do not decide, ingot does.
    let allow = format!("{tenant}={other}");
    let kubeconfig =
        narrowed_kubeconfig(env.kubeconfig_path(), &tenant, std::slice::from_ref(&allow));
    let ingot = start_ingot_as(&kubeconfig, &tenant, &tenant, &[]);
    let port = ingot.http_addr().await;

    let message = wait_contactable_is(&client, &tenant, "stolen", "False").await;
    assert!(
        message.contains(&format!(
            "spec.connection.authSecretRef.namespace \"{other}\""
        )) && message.contains("--rufio-allow-cross-namespace"),
        "{message}"
    );
    let note = wait_event(&client, &tenant, "stolen", "CrossNamespaceRefused").await;
    assert!(
        note.contains("spec.connection.authSecretRef.namespace"),
        "{note}"
    );
    let status = wait_for("the Job to fail", Duration::from_secs(30), || async {
        let s = job_status(&client, &tenant, "power-victim").await;
        condition(&s, "Failed")
            .filter(|c| c.0 == "True")
            .map(|c| c.1)
    })
    .await;
    assert!(
        status.contains(&format!("spec.machineRef.namespace \"{other}\"")),
        "{status}"
    );
    let note = wait_event(&client, &tenant, "power-victim", "CrossNamespaceRefused").await;
    assert!(note.contains("spec.machineRef.namespace"), "{note}");
    assert!(tasks_of(&client, &tenant).await.is_empty());
    assert_eq!(kube_requests(port, "get", "secrets").await, 0.0);
    assert_eq!(stolen_bmc.state.snapshot().requests, 0);
    assert_eq!(victim_bmc.state.snapshot().requests, 0);
    assert_eq!(victim_bmc.state.snapshot().power_state, "On");
    ingot.kill();

    // The operator allows tenant -> other: the Machine reads the Secret there, and a new Job
    // drives the Machine of the other namespace.
    let ingot = start_ingot_as(
        &kubeconfig,
        &tenant,
        &tenant,
        &[&format!("--rufio-allow-cross-namespace={allow}")],
    );
    wait_contactable(&client, &tenant, "stolen", "on", Duration::from_secs(30)).await;
    let mut again = job_sample(&tenant, "power-victim-allowed", "victim");
    again.spec.machine_ref.namespace = Some(other.clone());
    create(&client, &tenant, &again).await;
    wait_job(
        &client,
        &tenant,
        "power-victim-allowed",
        Duration::from_secs(60),
        &ingot,
    )
    .await;
    assert!(victim_bmc.state.snapshot().requests > 0);
    ingot.kill();
    delete_all(&client, &tenant).await;
    delete_all(&client, &other).await;
}

/// A Task created directly with a Secret of another namespace fails naming the field, and
/// nothing reaches its BMC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_naming_a_secret_of_another_namespace_fails_and_sends_nothing() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let tenant = env.namespace("tenancy-task").await.unwrap();
    let other = env.namespace("tenancy-task-b").await.unwrap();
    let fleet = fleet(1, true).await;
    let bmc = &fleet.bmcs[0];
    create_secret(&client, &other, SECRET, USER, PASSWORD).await;
    let m = machine(&tenant, "m", &other, "127.0.0.1", bmc.addr.port());
    let task: Task = serde_json::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
        "metadata": {"name": "power-off", "namespace": tenant},
        "spec": {"task": {"powerAction": "off"}, "connection": m.spec.connection},
    }))
    .unwrap();
    create(&client, &tenant, &task).await;
    let kubeconfig = narrowed_kubeconfig(env.kubeconfig_path(), &tenant, &[]);
    let ingot = start_ingot_as(&kubeconfig, &tenant, &tenant, &[]);
    let message = wait_for("the Task to fail", Duration::from_secs(30), || async {
        let t = Api::<Task>::namespaced(client.clone(), &tenant)
            .get("power-off")
            .await
            .unwrap();
        let status = serde_json::to_value(t.status).unwrap();
        condition(&status, "Failed")
            .filter(|c| c.0 == "True")
            .map(|c| c.1)
    })
    .await;
    // Rufio's message for a Task whose BMC cannot be reached, with the refusal (docs/install.md).
    assert!(
        message.starts_with("Failed to connect to BMC: "),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "spec.connection.authSecretRef.namespace \"{other}\""
        )),
        "{message}\n{}",
        ingot.log_tail()
    );
    let note = wait_event(&client, &tenant, "power-off", "CrossNamespaceRefused").await;
    assert!(note.contains("--rufio-allow-cross-namespace"), "{note}");
    assert_eq!(bmc.state.snapshot().requests, 0);
    assert_eq!(bmc.state.snapshot().power_state, "On");
    delete_all(&client, &tenant).await;
}

/// A `http://` BMC is refused (nothing sent) until the Machine carries the annotation; then it
/// is contactable with the `PlaintextCredentials` condition, and its Job's Tasks, which carry
/// the annotation from the Machine, complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_bmc_is_used_only_when_the_machine_asks_for_it() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("tenancy-http").await.unwrap();
    let fleet = fleet(1, false).await;
    let bmc = &fleet.bmcs[0];
    create_secret(&client, &ns, SECRET, USER, PASSWORD).await;
    let mut m = machine(&ns, "plain", &ns, "http://127.0.0.1", bmc.addr.port());
    m.spec.connection.insecure_tls = false;
    create(&client, &ns, &m).await;
    let kubeconfig = narrowed_kubeconfig(env.kubeconfig_path(), &ns, &[]);
    let ingot = start_ingot_as(&kubeconfig, &ns, &ns, &[]);

    let message = wait_contactable_is(&client, &ns, "plain", "False").await;
    assert!(
        message.contains("spec.connection.host") && message.contains(ALLOW_HTTP),
        "{message}"
    );
    let note = wait_event(&client, &ns, "plain", "PlainHttpRefused").await;
    assert!(note.contains("in clear"), "{note}");
    assert_eq!(bmc.state.snapshot().requests, 0);
    assert!(
        condition(
            &machine_status(&client, &ns, "plain").await,
            "PlaintextCredentials"
        )
        .is_none()
    );

    Api::<Machine>::namespaced(client.clone(), &ns)
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ALLOW_HTTP: "true"}}})),
        )
        .await
        .unwrap();
    wait_contactable(&client, &ns, "plain", "on", Duration::from_secs(30)).await;
    let status = machine_status(&client, &ns, "plain").await;
    let (plain, message) = condition(&status, "PlaintextCredentials").unwrap();
    assert_eq!(plain, "True");
    assert!(message.contains("in clear"), "{message}");

    create(&client, &ns, &job_sample(&ns, "cycle", "plain")).await;
    wait_job(&client, &ns, "cycle", Duration::from_secs(60), &ingot).await;
    for task in tasks_of(&client, &ns).await {
        assert_eq!(
            task.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ALLOW_HTTP))
                .map(String::as_str),
            Some("true")
        );
    }
    delete_all(&client, &ns).await;
}

/// With `insecureTLS: false`, sushy-tools over TLS and the emulated BMC (each with a
/// certificate from a CA of its own) are refused, and trusted once `ingot run --bmc-ca-bundle`
/// names both CAs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bmc_ca_bundle_lets_a_machine_verify_its_bmc() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("tenancy-ca").await.unwrap();
    let fleet = fleet(1, true).await;
    let sushy = start_sushy_tls(USER, PASSWORD);
    create_secret(&client, &ns, SECRET, USER, PASSWORD).await;
    for (name, port) in [
        ("emulated", fleet.bmcs[0].addr.port()),
        ("sushy", sushy.port),
    ] {
        let mut m = machine(&ns, name, &ns, "127.0.0.1", port);
        m.spec.connection.insecure_tls = false;
        create(&client, &ns, &m).await;
    }
    let kubeconfig = narrowed_kubeconfig(env.kubeconfig_path(), &ns, &[]);

    let ingot = start_ingot_as(&kubeconfig, &ns, &ns, &[]);
    for name in ["emulated", "sushy"] {
        let message = wait_contactable_is(&client, &ns, name, "False").await;
        assert!(
            message.contains("TLS handshake") && message.contains("UnknownIssuer"),
            "{name}: {message}"
        );
    }
    ingot.kill();

    let bundle = temp_dir("tenancy-ca").join("bmc-ca.pem");
    let sushy_ca = std::fs::read_to_string(&sushy.ca).unwrap();
    std::fs::write(
        &bundle,
        format!("{}\n{sushy_ca}", fleet.tls.as_ref().unwrap().ca_pem),
    )
    .unwrap();
    let ingot = start_ingot_as(
        &kubeconfig,
        &ns,
        &ns,
        &[&format!("--bmc-ca-bundle={}", bundle.display())],
    );
    wait_contactable(&client, &ns, "emulated", "on", Duration::from_secs(30)).await;
    wait_contactable(&client, &ns, "sushy", "on", Duration::from_secs(30)).await;
    drop(ingot);
    delete_all(&client, &ns).await;
}

/// A Machine with `insecureTLS: false` and no CA for its BMC is trusted by the certificate
/// fingerprint it pins, on sushy-tools over TLS and on the project's emulator; a Job on the
/// pinned sushy Machine runs (its Tasks carry the pin); a wrong pin fails naming both
/// fingerprints and the emulated BMC sees no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_certificate_fingerprint_is_the_only_trust_needed() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("tenancy-pin").await.unwrap();
    let sushy = start_sushy_tls(USER, PASSWORD);
    let fleet = fleet(2, true).await;
    create_secret(&client, &ns, SECRET, USER, PASSWORD).await;
    let verified = |name: &str, port: u16| {
        let mut m = machine(&ns, name, &ns, "127.0.0.1", port);
        m.spec.connection.insecure_tls = false;
        m
    };
    create(&client, &ns, &verified("sushy", sushy.port)).await;
    create(
        &client,
        &ns,
        &verified("emulated", fleet.bmcs[0].addr.port()),
    )
    .await;
    create(
        &client,
        &ns,
        &verified("mispinned", fleet.bmcs[1].addr.port()),
    )
    .await;
    let kubeconfig = narrowed_kubeconfig(env.kubeconfig_path(), &ns, &[]);
    let ingot = start_ingot_as(&kubeconfig, &ns, &ns, &[]);
    // Not trusted without a pin (no CA names them, and insecureTLS is false).
    for name in ["sushy", "emulated"] {
        wait_contactable_is(&client, &ns, name, "False").await;
    }

    let sushy_pin = served_fingerprint(sushy.port);
    annotate(&client, &ns, "sushy", PIN, &sushy_pin).await;
    let emulated_pin = served_fingerprint(fleet.bmcs[0].addr.port());
    annotate(
        &client,
        &ns,
        "emulated",
        PIN,
        &emulated_pin.replace(':', "").to_lowercase(),
    )
    .await;
    let wrong = ["00"; 32].join(":");
    annotate(&client, &ns, "mispinned", PIN, &wrong).await;
    wait_contactable(&client, &ns, "sushy", "on", Duration::from_secs(30)).await;
    wait_contactable(&client, &ns, "emulated", "on", Duration::from_secs(30)).await;
    let message = wait_for(
        "the mispinned Machine to name the fingerprints",
        Duration::from_secs(30),
        || async {
            let status = machine_status(&client, &ns, "mispinned").await;
            condition(&status, "Contactable")
                .filter(|c| c.0 == "False" && c.1.contains("not the pinned"))
                .map(|c| c.1)
        },
    )
    .await;
    let other_pin = served_fingerprint(fleet.bmcs[1].addr.port());
    assert!(
        message.contains(&other_pin) && message.contains(&wrong),
        "{message}"
    );
    assert_eq!(fleet.bmcs[1].state.snapshot().requests, 0);

    create(&client, &ns, &job_sample(&ns, "cycle", "sushy")).await;
    wait_job(&client, &ns, "cycle", Duration::from_secs(60), &ingot).await;
    for task in tasks_of(&client, &ns).await {
        assert_eq!(
            task.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(PIN))
                .map(String::as_str),
            Some(sushy_pin.as_str())
        );
    }
    assert_eq!(
        sushy.system(USER, PASSWORD).await.unwrap()["PowerState"],
        "On"
    );
    delete_all(&client, &ns).await;
}

/// `ingot run` stops at start, naming the flag and the fix, on an allow-list entry that is not
/// FROM=TO and on a CA bundle without a certificate (before it reaches any cluster).
#[test]
fn ingot_run_refuses_a_bad_allow_list_and_a_bundle_without_certificates() {
    let not_pem = temp_dir("tenancy-bad-ca").join("not-a-bundle.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let bad_ca = format!("--bmc-ca-bundle={}", not_pem.display());
    for (args, expected) in [
        (
            vec!["--rufio-allow-cross-namespace=team-a=ok,team-b"],
            "--rufio-allow-cross-namespace \"team-b\": write FROM=TO",
        ),
        (vec![bad_ca.as_str()], "give a file of PEM certificates"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ingot"))
            .arg("run")
            .arg("--controllers=rufio")
            .arg("--kubeconfig=/nonexistent/kubeconfig")
            .args(&args)
            .env_remove("INGOT_RUFIO_ALLOW_CROSS_NAMESPACE")
            .env_remove("INGOT_BMC_CA_BUNDLE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("kubeconfig"),
            "stopped before connecting: {stderr}"
        );
    }
}
