//! `ingot-sim servers` as a script starts it: one server behind an emulated Redfish BMC, told
//! over Redfish to PXE-boot once, fetches its iPXE script from the boot URL, installs from the
//! config it names, calls the installer's webhook, reboots from its disk and creates the
//! cluster in the target API server (a second control plane at a VIP on loopback).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::{Value, json};

const VIP: &str = "127.0.11.1";
const ADDRESS: &str = "127.0.21.10";
const GATEWAY: &str = "127.0.21.1";
const DEADLINE: Duration = Duration::from_secs(120);

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The boot server's part: the script and config of one MAC, and the webhooks heard.
#[derive(Clone, Default)]
struct Boot(Arc<Mutex<Served>>);

#[derive(Default)]
struct Served {
    mac: String,
    script: String,
    config: String,
    webhooks: u32,
}

async fn script(State(b): State<Boot>, Path(mac): Path<String>) -> (StatusCode, String) {
    let s = b.0.lock().unwrap();
    if mac == s.mac {
        (StatusCode::OK, s.script.clone())
    } else {
        (StatusCode::NOT_FOUND, String::new())
    }
}

async fn config(State(b): State<Boot>) -> String {
    b.0.lock().unwrap().config.clone()
}

async fn webhook(State(b): State<Boot>) -> StatusCode {
    b.0.lock().unwrap().webhooks += 1;
    StatusCode::OK
}

fn ipxe_script(base: &str, mac: &str) -> String {
    let v = "v1.7.1";
    format!(
        "#!ipxe\ndhcp\nset base http://127.0.0.1:9/images/{v}\n\
         kernel ${{base}}/harvester-{v}-vmlinuz-amd64 initrd=harvester-{v}-initrd-amd64 \
         ip={ADDRESS}::{GATEWAY}:255.255.255.0::netboot:off ifname=netboot:{mac} \
         harvester.install.automatic=true harvester.install.config_url={base}/config\n\
         initrd ${{base}}/harvester-{v}-initrd-amd64\nboot\n"
    )
}

fn harvester_config(base: &str, mac: &str, hostname: &str) -> String {
    format!(
        "schemeVersion: 1\ntoken: servers-cli-token\nos:\n  hostname: {hostname}\n  password: secret\n\
         install:\n  mode: create\n  vip: {VIP}\n  vipMode: static\n  managementInterface:\n\
         \x20   method: static\n    ip: {ADDRESS}\n    subnetMask: 255.255.255.0\n    gateway: {GATEWAY}\n\
         \x20   interfaces:\n    - hwAddr: {mac}\n  device: /dev/sda\n\
         \x20 isoUrl: http://127.0.0.1:9/images/harvester-v1.7.1-amd64.iso\n\
         \x20 webhooks:\n  - event: SUCCEEDED\n    method: PUT\n    url: {base}/disable\n"
    )
}

#[tokio::test]
async fn servers_subcommand_provisions_a_server_into_the_target_cluster() {
    let plane = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
        controller_manager: false,
        install_crds: false,
        watchdog_parent: Some(std::process::id()),
        bind_address: VIP.parse().unwrap(),
        bootstrap_token_auth: true,
        ..ingot_testenv::Options::from_env().unwrap()
    })
    .await
    .unwrap();

    let boot = Boot::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/boot/{mac}", axum::routing::get(script))
        .route("/config", axum::routing::get(config))
        .route("/disable", axum::routing::put(webhook))
        .with_state(boot.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let out = std::env::temp_dir().join(format!("ingot-sim-servers-{}.json", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
        .args(["servers", "--count", "1", "--boot-url"])
        .arg(format!("{base}/boot"))
        .arg("--target-kubeconfig")
        .arg(plane.kubeconfig_path())
        .args(["--user", "ADMIN", "--password", "ADMIN"])
        .args(["--power-delay-ms", "500", "--install-secs", "1"])
        .args(["--heartbeat-secs", "1", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("ingot-sim starts");
    let stdout = child.stdout.take().unwrap();
    let _running = Running(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let server: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), line);
    let _ = std::fs::remove_file(&out);
    assert_eq!(server["index"], 0);
    let mac = server["mac"].as_str().unwrap().to_owned();
    let bmc = server["bmc"].as_str().unwrap().to_owned();
    assert!(bmc.starts_with("https://127.0.0.1:"), "{bmc}");
    let hostname = format!("servers-cli-{}", ingot_testenv::random_suffix(5));
    *boot.0.lock().unwrap() = Served {
        mac: mac.clone(),
        script: ipxe_script(&base, &mac),
        config: harvester_config(&base, &mac, &hostname),
        webhooks: 0,
    };

    // The operator's part, over Redfish with the given credentials: a one-time PXE boot, then on.
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .no_proxy()
        .build()
        .unwrap();
    let system = format!("{bmc}/redfish/v1/Systems/System.Embedded.1");
    let wrong = http
        .get(&system)
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401, "the BMC takes --user/--password only");
    let once =
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
    let r = http
        .patch(&system)
        .basic_auth("ADMIN", Some("ADMIN"))
        .json(&once)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = http
        .post(format!("{system}/Actions/ComputerSystem.Reset"))
        .basic_auth("ADMIN", Some("ADMIN"))
        .json(&json!({"ResetType": "On"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());

    // It installs, calls the webhook, reboots from its disk and creates the cluster: its Node is
    // Ready in the target, with its static address.
    let target = ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
        .await
        .unwrap()
        .client()
        .unwrap();
    let nodes: Api<Node> = Api::all(target);
    let status_url = server["status"].as_str().unwrap().to_owned();
    let end = tokio::time::Instant::now() + DEADLINE;
    let node = loop {
        if let Ok(Some(node)) = nodes.get_opt(&hostname).await {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True");
            if ready {
                break node;
            }
        }
        if tokio::time::Instant::now() > end {
            let status = http.get(&status_url).send().await.unwrap().text().await;
            panic!("no Ready Node {hostname} after {DEADLINE:?}; the server: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let addresses = node.status.unwrap().addresses.unwrap();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == ADDRESS),
        "{addresses:?}"
    );
    assert_eq!(boot.0.lock().unwrap().webhooks, 1, "one SUCCEEDED webhook");
    let status: Value = http
        .get(&status_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["mode"], "create", "{status}");
    assert_eq!(status["installs"], 1, "{status}");
}

#[test]
fn servers_subcommand_refuses_a_kubeconfig_it_cannot_read() {
    let output = Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
        .args(["servers", "--boot-url", "http://127.0.0.1:9/boot"])
        .args(["--target-kubeconfig", "no-such-kubeconfig.yaml"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--target-kubeconfig no-such-kubeconfig.yaml"),
        "{stderr}"
    );
}

#[test]
fn servers_subcommand_defaults_to_seconds_long_power_transitions_and_install() {
    let output = Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
        .args(["servers", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    let default_of = |flag: &str| {
        let at = help
            .find(flag)
            .unwrap_or_else(|| panic!("no {flag} in {help}"));
        let rest = &help[at..];
        let start = rest.find("[default: ").unwrap() + "[default: ".len();
        rest[start..start + rest[start..].find(']').unwrap()].to_owned()
    };
    assert_eq!(default_of("--power-delay-ms"), "5000");
    assert_eq!(default_of("--install-secs"), "30");
    assert_eq!(default_of("--count"), "3");
}
