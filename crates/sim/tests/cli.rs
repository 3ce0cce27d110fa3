//! `ingot-sim metal` as a user starts it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the emulator on a free loopback port; returns it and its base URL.
fn start(args: &[&str]) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ingot-sim starts");
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://") && w.ends_with("/metal/v1"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (running, url)
}

const PROJECT: &str = "7d2e9f10-3a4b-4c5d-8e6f-708192a3b4c5";

#[tokio::test]
async fn metal_subcommand_serves_the_project_for_the_token() {
    let (_sim, url) = start(&[
        "metal",
        "--listen",
        "127.0.0.1:0",
        "--token",
        "cli-token",
        "--project",
        PROJECT,
    ]);
    let http = reqwest::Client::new();
    let ok = http
        .get(format!("{url}/projects/{PROJECT}/devices"))
        .header("X-Auth-Token", "cli-token")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let body: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(body["meta"]["total"], 0);
    let denied = http
        .get(format!("{url}/projects/{PROJECT}/devices"))
        .header("X-Auth-Token", "other")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
}

#[tokio::test]
async fn config_file_adds_projects_and_tokens() {
    let dir = std::env::temp_dir().join(format!("ingot-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("metal.json");
    let other = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
    std::fs::write(
        &file,
        serde_json::json!({
            "projects": [{"id": other, "name": "second"}],
            "tokens": [{"token": "second-token", "projects": [other]}],
            "timings": {"queued_ms": 0, "provisioning_ms": 0, "reinstalling_ms": 0, "deprovisioning_ms": 0, "power_ms": 0}
        })
        .to_string(),
    )
    .unwrap();
    let (_sim, url) = start(&[
        "metal",
        "--listen",
        "127.0.0.1:0",
        "--token",
        "cli-token",
        "--project",
        PROJECT,
        "--config",
        file.to_str().unwrap(),
        "--timings",
        "realistic",
    ]);
    let http = reqwest::Client::new();
    let get = |token: &'static str, project: &str| {
        http.get(format!("{url}/projects/{project}/devices"))
            .header("X-Auth-Token", token)
            .send()
    };
    assert_eq!(get("second-token", other).await.unwrap().status(), 200);
    assert_eq!(get("cli-token", PROJECT).await.unwrap().status(), 200);
    assert_eq!(get("second-token", PROJECT).await.unwrap().status(), 403);
    // Realistic timings: a new device is still queued or provisioning right after creation.
    let created = http
        .post(format!("{url}/projects/{other}/devices"))
        .header("X-Auth-Token", "second-token")
        .json(&serde_json::json!({"metro": "sv", "plan": "c3.small.x86", "operating_system": "debian_12", "hostname": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let d: serde_json::Value = created.json().await.unwrap();
    let got: serde_json::Value = http
        .get(format!("{url}/devices/{}", d["id"].as_str().unwrap()))
        .header("X-Auth-Token", "second-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(got["state"], "active");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn refuses_to_start_without_a_token() {
    let out = Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
        .args(["metal", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no token"));
}
