//! `ingot-sim boot` as a user starts it, beside `ingot-sim metal`, against a real API server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `ingot-sim` and returns it with the first http URL on its first stdout line.
fn start(args: &[&str], envs: &[(&str, &str)], stderr: Stdio) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
        .args(args)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("ingot-sim starts");
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (running, url)
}

const PROJECT: &str = "7d2e9f10-3a4b-4c5d-8e6f-708192a3b4c5";
const JOIN_TOKEN: &str = "cli-join-token-3f9a";

async fn serve_config(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/config.yaml",
        axum::routing::get(move || {
            let body = body.clone();
            async move { body }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/config.yaml")
}

#[tokio::test]
async fn boot_subcommand_joins_a_node_and_never_logs_the_join_token() {
    let env = ingot_testenv::shared().await;
    let nodes: Api<Node> = Api::all(env.client().unwrap());
    let host = format!("cli-boot-{}", ingot_testenv::random_suffix(5));
    let (_metal, metal_url) = start(
        &[
            "metal",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "cli-token",
            "--project",
            PROJECT,
        ],
        &[],
        Stdio::null(),
    );
    let log = std::env::temp_dir().join(format!("ingot-sim-boot-{}.log", std::process::id()));
    let (_boot, machines_url) = start(
        &[
            "boot",
            "--metal-url",
            &metal_url,
            "--project",
            PROJECT,
            "--kubeconfig",
            env.kubeconfig_path().to_str().unwrap(),
            "--join-token-env",
            "TEST_JOIN_TOKEN",
            "--server-url",
            "https://192.0.2.20",
            "--listen",
            "127.0.0.1:0",
            "--heartbeat-secs",
            "1",
        ],
        &[("TEST_JOIN_TOKEN", JOIN_TOKEN), ("RUST_LOG", "debug")],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    assert!(machines_url.ends_with("/machines"), "{machines_url}");
    let base = machines_url.trim_end_matches("/machines").to_owned();

    // The install script is the userdata itself; the config comes from a loopback URL.
    let config = format!(
        "scheme_version: 1\nserver_url: https://192.0.2.20:443\ntoken: {JOIN_TOKEN}\nos:\n  hostname: {host}\ninstall:\n  mode: join\n  device: /dev/sda\n  iso_url: https://releases.example/h.iso\n"
    );
    let config_url = serve_config(config).await;
    let script = format!(
        "#!ipxe\ndhcp\nkernel http://mirror.example/v1.4.2/harvester-v1.4.2-vmlinuz-amd64 ip=dhcp harvester.install.management_interface.interfaces=\"hwAddr:${{net0/mac}}\" harvester.install.management_interface.method=dhcp harvester.install.automatic=true harvester.install.config_url={config_url}\ninitrd http://mirror.example/v1.4.2/harvester-v1.4.2-initrd-amd64\nboot\n"
    );
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{metal_url}/projects/{PROJECT}/devices"))
        .header("X-Auth-Token", "cli-token")
        .json(&serde_json::json!({"metro": "sv", "plan": "c3.small.x86", "operating_system": "custom_ipxe", "hostname": host, "userdata": script}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let ready = |status: &'static str| {
        move |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == status)
        }
    };
    loop {
        if nodes
            .get_opt(&host)
            .await
            .unwrap()
            .as_ref()
            .is_some_and(ready("True"))
        {
            break;
        }
        let machines: serde_json::Value = http
            .get(&machines_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Ready node; machines: {machines}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let resp = http
        .post(format!("{base}/machines/{host}/not-ready"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    loop {
        if nodes
            .get_opt(&host)
            .await
            .unwrap()
            .as_ref()
            .is_some_and(ready("Unknown"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node never went Unknown"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("joined"), "{logged}");
    assert!(!logged.contains(JOIN_TOKEN), "the join token was logged");
    std::fs::remove_file(&log).ok();
}

#[test]
fn boot_refuses_a_join_token_it_cannot_read() {
    let out = Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
        .args([
            "boot",
            "--metal-url",
            "http://127.0.0.1:1/metal/v1",
            "--join-token-env",
            "INGOT_SIM_TEST_UNSET_TOKEN",
            "--server-url",
            "https://192.0.2.20",
        ])
        .env_remove("INGOT_SIM_TEST_UNSET_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("INGOT_SIM_TEST_UNSET_TOKEN"));
}
