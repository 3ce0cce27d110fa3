//! `ingot-sim bmc` as a standalone command: prints one line per BMC, serves them, stops on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

struct Guard(std::process::Child);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn serves_a_small_fleet_over_tls() {
    let ca = std::env::temp_dir().join(format!("ingot-sim-ca-{}.pem", std::process::id()));
    let mut child = Guard(
        Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
            .args(["bmc", "--count", "3", "--tls", "--power-delay-ms", "0"])
            .arg("--ca-out")
            .arg(&ca)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ingot-sim"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let lines: Vec<serde_json::Value> = BufReader::new(stdout)
        .lines()
        .take(3)
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let vendors: Vec<&str> = lines
        .iter()
        .map(|l| l["vendor"].as_str().unwrap())
        .collect();
    assert_eq!(vendors, ["dell", "hpe", "lenovo"]);
    let pem = std::fs::read_to_string(&ca).unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE"));
    let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes()).unwrap();
    let http = reqwest::Client::builder()
        .tls_certs_only(certs)
        .build()
        .unwrap();
    for l in &lines {
        let url = l["url"].as_str().unwrap();
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        let root: serde_json::Value = http
            .get(format!("{url}/redfish/v1/"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(root["@odata.id"], "/redfish/v1/");
    }
    let _ = std::fs::remove_file(&ca);
}

#[tokio::test]
async fn serves_ipmi_beside_redfish_with_the_same_credentials() {
    let mut child = Guard(
        Command::new(env!("CARGO_BIN_EXE_ingot-sim"))
            .args([
                "bmc",
                "--count",
                "2",
                "--ipmi",
                "--user",
                "operator",
                "--password",
                "sim-secret",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ingot-sim"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let lines: Vec<serde_json::Value> = BufReader::new(stdout)
        .lines()
        .take(2)
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert!(l["url"].as_str().unwrap().starts_with("http://127.0.0.1:"));
        let addr = l["ipmi"].as_str().unwrap().to_owned();
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        let mut cfg = ingot_ipmi::Config::new(addr, "operator", "sim-secret");
        cfg.keepalive = None;
        let client = ingot_ipmi::Client::connect(cfg).await.unwrap();
        assert!(client.chassis_status().await.unwrap().power_on);
        client.close().await;
    }
    assert_ne!(lines[0]["ipmi"], lines[1]["ipmi"]);
}
