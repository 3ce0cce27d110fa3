//! `ingot bmc` in the real binary, over Redfish and IPMI against the emulators (served by this
//! test process on loopback).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use serde_json::Value;
use tokio::process::Command;

async fn ingot(args: &[String]) -> (Value, i32) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(env!("CARGO_BIN_EXE_ingot"))
            .args(args)
            .env("BMC_PW", "password")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("ingot bmc finished")
    .expect("ingot bmc ran");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not one JSON document ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (json, out.status.code().unwrap_or(-1))
}

fn args(host: &str, port: Option<u16>, protocol: Option<&str>, command: &[&str]) -> Vec<String> {
    let mut v = vec!["bmc".to_string(), "--host".into(), host.into()];
    if let Some(p) = port {
        v.extend(["--port".into(), p.to_string()]);
    }
    v.extend(
        ["--user", "admin", "--password-env", "BMC_PW", "--json"]
            .iter()
            .map(|s| s.to_string()),
    );
    if let Some(p) = protocol {
        v.extend(["--protocol".into(), p.into()]);
    }
    v.extend(command.iter().map(|s| s.to_string()));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingot_bmc_over_redfish_and_ipmi() {
    let help = Command::new(env!("CARGO_BIN_EXE_ingot"))
        .arg("--help")
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(help.contains("bmc"), "{help}");

    let redfish = Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            vendor: Vendor::Lenovo,
            power_delay: Duration::from_millis(100),
            ..BmcSpec::default()
        }],
    )
    .await
    .unwrap();
    // Detection tries TCP on the IPMI port first: the same number over TCP is held (bound, not
    // listening, so a connection is refused) for the test's length. UDP and TCP ports are
    // handed out apart, so the Redfish emulator may already hold it: then the BMC moves.
    let (ipmi, _tcp_hold) = loop {
        let ipmi = ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig::uniform(1, "password"))
            .await
            .unwrap();
        let hold = tokio::net::TcpSocket::new_v4().unwrap();
        if hold.bind(ipmi.bmcs()[0].addr()).is_ok() {
            break (ipmi, hold);
        }
    };
    let bmc = &ipmi.bmcs()[0];
    let ia = bmc.addr();
    let url = redfish.bmcs[0].url();
    let ip = ia.ip().to_string();

    // IPMI, forced, then detected (nothing listens on that port over TCP).
    let (j, code) = ingot(&args(
        &ip,
        Some(ia.port()),
        Some("ipmi"),
        &["power", "status"],
    ))
    .await;
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["protocol"], "ipmi");
    assert_eq!(j["result"]["powerState"], "off");
    let (j, code) = ingot(&args(&ip, Some(ia.port()), None, &["power", "on"])).await;
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["protocol"], "ipmi");
    assert_eq!(j["result"]["sent"][0], "power up");
    assert!(bmc.power_on());
    let (j, code) = ingot(&args(
        &ip,
        Some(ia.port()),
        Some("ipmi"),
        &["boot", "pxe", "--once"],
    ))
    .await;
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["result"]["device"], "pxe");
    assert_eq!(j["result"]["mode"], "uefi");

    // Redfish, forced and detected: the same document layout.
    let (r, code) = ingot(&args(&url, None, Some("redfish"), &["power", "status"])).await;
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["protocol"], "redfish");
    let (d, code) = ingot(&args(&url, None, None, &["boot", "pxe", "--once"])).await;
    assert_eq!(code, 0, "{d}");
    assert_eq!(d["protocol"], "redfish");
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&d), keys(&j));
    assert_eq!(keys(&d["result"]), keys(&j["result"]));

    // A bad argument is a usage error (exit 2) with a JSON document.
    let (e, code) = ingot(&args("ftp://x", None, None, &["power", "status"])).await;
    assert_eq!(code, 2);
    assert_eq!(e["error"]["kind"], "usage");
}

/// `ingot bmc ... sensors`, table and `--json`, over Redfish (a profile serving `Sensors` and
/// one serving only `ThermalSubsystem`/`PowerSubsystem`) and over IPMI (the SDR repository).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingot_bmc_sensors_over_redfish_and_ipmi() {
    let redfish = Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec::default(), BmcSpec::default()],
    )
    .await
    .unwrap();
    redfish.bmcs[1].state.set_quirks(ingot_bmc_sim::Quirks {
        new_thermal_schema: true,
        no_sensors: true,
        ..Default::default()
    });
    for b in &redfish.bmcs {
        b.state.set_fan_health("System Fan 2", "Critical");
    }
    for (b, count) in redfish.bmcs.iter().zip([6, 6]) {
        let url = b.url();
        let (j, code) = ingot(&args(&url, None, None, &["sensors"])).await;
        assert_eq!(code, 0, "{j}");
        assert_eq!(j["protocol"], "redfish");
        assert_eq!(j["command"], "sensors");
        let sensors = j["result"]["sensors"].as_array().unwrap();
        assert_eq!(sensors.len(), count, "{j}");
        let fan = sensors
            .iter()
            .find(|s| s["name"] == "System Fan 2")
            .unwrap();
        assert_eq!(fan["kind"], "fan");
        assert_eq!(fan["health"], "critical");
        // The table (no --json).
        let mut a = args(&url, None, None, &["sensors"]);
        a.retain(|x| x != "--json");
        let out = Command::new(env!("CARGO_BIN_EXE_ingot"))
            .args(&a)
            .env("BMC_PW", "password")
            .output()
            .await
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        assert!(lines.next().unwrap().starts_with("NAME"), "{text}");
        let fan_line = lines.find(|l| l.starts_with("System Fan 2")).unwrap();
        assert!(
            fan_line.contains("critical") && fan_line.contains("RPM"),
            "{fan_line}"
        );
    }

    // IPMI: the emulator's SDR repository (a temperature, a fan, a power supply), with the
    // fan read under its lower critical threshold.
    let ipmi = ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig::uniform(1, "password"))
        .await
        .unwrap();
    let bmc = &ipmi.bmcs()[0];
    bmc.set_sensor_raw(0x02, 8);
    let ia = bmc.addr();
    let (j, code) = ingot(&args(
        &ia.ip().to_string(),
        Some(ia.port()),
        Some("ipmi"),
        &["sensors"],
    ))
    .await;
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["protocol"], "ipmi");
    let sensors = j["result"]["sensors"].as_array().unwrap();
    let names: Vec<&str> = sensors.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["Inlet Temp", "Fan1", "PS1 Status"], "{j}");
    assert_eq!(sensors[0]["reading"], 24.0);
    assert_eq!(sensors[0]["health"], "ok");
    assert_eq!(sensors[1]["reading"], 800.0);
    assert_eq!(sensors[1]["thresholds"]["lowerCritical"], 1000.0);
    assert_eq!(sensors[1]["health"], "critical");
    assert_eq!(sensors[2]["kind"], "power_supply");
    assert_eq!(sensors[2]["health"], "ok");
    // Same document layout as over Redfish.
    let (r, _) = ingot(&args(&redfish.bmcs[0].url(), None, None, &["sensors"])).await;
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&r), keys(&j));
    assert_eq!(
        keys(&r["result"]["sensors"][0]),
        keys(&j["result"]["sensors"][0])
    );
}
