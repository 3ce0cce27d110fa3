//! IPMI behind the `Bmc` trait: `ingot bmc` over IPMI against ingot's lanplus emulator and
//! OpenIPMI's `ipmi_sim`, the same `--json` shape as Redfish, protocol detection on an
//! IPMI-only BMC, and one power contract run over both protocols.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use clap::Parser;
use common::poll_until;
use ingot_bmc::cli::{BmcArgs, execute_with};
use ingot_bmc::ipmi::{IpmiBmc, IpmiConnector, IpmiOptions};
use ingot_bmc::manager::{BmcConfig, Connector, ManagerOptions, SessionManager};
use ingot_bmc::redfish::{RedfishClient, RedfishOptions};
use ingot_bmc::*;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_ipmi_sim::FruInfo;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Parser)]
struct Top {
    #[command(flatten)]
    bmc: BmcArgs,
}

/// Runs `ingot bmc` with `BMC_PW` set to `password`.
async fn cli(password: &str, args: &[&str]) -> (Value, u8) {
    let parsed = Top::try_parse_from(std::iter::once("bmc").chain(args.iter().copied()))
        .unwrap()
        .bmc;
    let out = execute_with(parsed, Vec::new(), |name| {
        (name == "BMC_PW").then(|| password.to_owned())
    })
    .await;
    (out.json, out.code)
}

/// `--host ADDR --port PORT --user U --password-env BMC_PW --json [--protocol P] <command>`.
fn argv(addr: SocketAddr, user: &str, protocol: Option<&str>, command: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--host".into(),
        addr.ip().to_string(),
        "--port".into(),
        addr.port().to_string(),
        "--user".into(),
        user.into(),
        "--password-env".into(),
        "BMC_PW".into(),
        "--json".into(),
    ];
    if let Some(p) = protocol {
        v.extend(["--protocol".into(), p.into()]);
    }
    v.extend(command.iter().map(|s| s.to_string()));
    v
}

async fn run(password: &str, v: &[String]) -> Value {
    let args: Vec<&str> = v.iter().map(String::as_str).collect();
    let (json, code) = cli(password, &args).await;
    assert_eq!(code, 0, "{args:?}: {json}");
    assert_eq!(json["ok"], true, "{json}");
    json
}

/// Every object in `a` has the keys of the matching object in `b` and the other way round;
/// arrays are compared element by element where both have one.
fn same_shape(a: &Value, b: &Value, path: &str) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let kx: Vec<&String> = x.keys().collect();
            let ky: Vec<&String> = y.keys().collect();
            assert_eq!(kx, ky, "keys differ at {path}");
            for (k, v) in x {
                same_shape(v, &y[k], &format!("{path}.{k}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if let (Some(p), Some(q)) = (x.first(), y.first()) {
                same_shape(p, q, &format!("{path}[0]"));
            }
        }
        // Scalars and null: absent values are `null` on either side.
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_))
            if !(a.is_null() || b.is_null()) =>
        {
            panic!("{path}: {a} vs {b}");
        }
        _ => {}
    }
}

/// A system event record body (bytes 2..16 of a SEL record).
fn sel_record(timestamp: u32, sensor_type: u8, sensor: u8, data1: u8) -> [u8; 14] {
    let t = timestamp.to_le_bytes();
    [
        0x02,
        t[0],
        t[1],
        t[2],
        t[3],
        0x20,
        0x00,
        0x04,
        sensor_type,
        sensor,
        0x01,
        data1,
        0,
        0,
    ]
}

async fn ipmi_fleet(count: usize, power_on: bool) -> ingot_ipmi_sim::Fleet {
    let mut cfg = ingot_ipmi_sim::FleetConfig::uniform(count, "password");
    for b in &mut cfg.bmcs {
        b.power_on = power_on;
    }
    ingot_ipmi_sim::serve(cfg).await.unwrap()
}

async fn redfish_fleet(vendor: Vendor) -> Fleet {
    Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            vendor,
            power_delay: Duration::from_millis(100),
            ..BmcSpec::default()
        }],
    )
    .await
    .unwrap()
}

fn redfish_addr(fleet: &Fleet) -> SocketAddr {
    let url = fleet.bmcs[0].url();
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

#[tokio::test]
async fn cli_over_ipmi_emulator_matches_the_redfish_json_shape() {
    let ipmi = ipmi_fleet(1, false).await;
    let bmc = &ipmi.bmcs()[0];
    let first = bmc.add_sel(sel_record(1_700_000_000, 0x01, 0x30, 0x09));
    let second = bmc.add_sel(sel_record(1_700_000_060, 0x07, 0x02, 0x00));
    let ia = bmc.addr();
    let redfish = redfish_fleet(Vendor::Supermicro).await;
    let ra = redfish_addr(&redfish);
    let i = |cmd: &[&str]| argv(ia, "admin", Some("ipmi"), cmd);
    let r = |cmd: &[&str]| argv(ra, "admin", Some("redfish"), cmd);
    let http = |mut v: Vec<String>| {
        // The Redfish emulator serves plain HTTP.
        v[1] = format!("http://{}", v[1]);
        v
    };

    // power status / on / off
    let j = run("password", &i(&["power", "status"])).await;
    assert_eq!(j["protocol"], "ipmi");
    assert_eq!(j["host"], ia.to_string());
    assert_eq!(j["command"], "power status");
    assert_eq!(j["result"]["powerState"], "off");
    same_shape(
        &j,
        &run("password", &http(r(&["power", "status"]))).await,
        "$",
    );

    let j = run("password", &i(&["power", "on"])).await;
    assert_eq!(j["result"]["action"], "on");
    assert_eq!(j["result"]["sent"], serde_json::json!(["power up"]));
    assert_eq!(j["result"]["alreadyInState"], false);
    assert!(bmc.power_on());
    let j = run("password", &i(&["power", "on", "--wait", "10"])).await;
    assert_eq!(j["result"]["alreadyInState"], true);
    assert_eq!(j["result"]["powerState"], "on");
    same_shape(
        &j,
        &run("password", &http(r(&["power", "on", "--wait", "10"]))).await,
        "$",
    );
    let j = run("password", &i(&["power", "off"])).await;
    assert_eq!(j["result"]["sent"], serde_json::json!(["power down"]));
    assert!(!bmc.power_on());
    let j = run("password", &i(&["power", "status"])).await;
    assert_eq!(j["result"]["powerState"], "off");

    // boot pxe --once keeps the emulator's UEFI mode.
    let j = run("password", &i(&["boot", "pxe", "--once"])).await;
    assert_eq!(j["command"], "boot pxe");
    assert_eq!(j["result"]["device"], "pxe");
    assert_eq!(j["result"]["persistent"], false);
    assert_eq!(j["result"]["enabled"], true);
    assert_eq!(j["result"]["mode"], "uefi");
    assert_eq!(j["result"]["rawTarget"], "pxe");
    let flags = bmc.boot_flags();
    assert_eq!(flags[0] & 0xE0, 0xA0, "valid, next boot only, EFI");
    assert_eq!((flags[1] >> 2) & 0x0F, 1, "PXE");
    same_shape(
        &j,
        &run("password", &http(r(&["boot", "pxe", "--once"]))).await,
        "$",
    );
    let j = run("password", &i(&["boot", "disk", "--persistent"])).await;
    assert_eq!(j["result"]["device"], "disk");
    assert_eq!(j["result"]["persistent"], true);
    assert_eq!(j["result"]["mode"], "uefi");
    let j = run("password", &i(&["boot", "show"])).await;
    assert_eq!(j["result"]["device"], "disk");
    // A mode asked for is written, even one that switches the machine.
    let j = run(
        "password",
        &i(&["boot", "pxe", "--once", "--mode", "legacy"]),
    )
    .await;
    assert_eq!(j["result"]["mode"], "legacy");
    assert_eq!(
        bmc.boot_flags()[0] & 0xE0,
        0x80,
        "valid, next boot only, legacy"
    );

    // inventory: FRU 0 and Get Device ID.
    let j = run("password", &i(&["inventory"])).await;
    let fru = FruInfo::example(0);
    let inv = &j["result"];
    assert_eq!(inv["manufacturer"], fru.product_manufacturer.as_str());
    assert_eq!(inv["model"], fru.product_name.as_str());
    assert_eq!(inv["serialNumber"], fru.product_serial.as_str());
    assert_eq!(inv["sku"], fru.product_part_number.as_str());
    assert_eq!(inv["bmcFirmwareVersion"], "2.15");
    assert_eq!(inv["vendor"], "generic");
    assert_eq!(inv["powerState"], "off");
    assert!(inv["uuid"].is_string(), "{inv}");
    same_shape(&j, &run("password", &http(r(&["inventory"]))).await, "$");

    // sel: stable ids, oldest first, the same on a second read.
    let j = run("password", &i(&["sel"])).await;
    let entries = j["result"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{j}");
    assert_eq!(entries[0]["id"], format!("sel:{first:04x}"));
    assert_eq!(entries[1]["id"], format!("sel:{second:04x}"));
    assert_eq!(entries[0]["log"], "sel");
    assert_eq!(entries[0]["created"], "2023-11-14T22:13:20Z");
    assert_eq!(entries[0]["severity"], "Critical");
    assert_eq!(entries[0]["entryType"], "SEL");
    assert!(
        entries[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("Processor")
    );
    assert_eq!(run("password", &i(&["sel"])).await["result"], j["result"]);
    same_shape(&j, &run("password", &http(r(&["sel"]))).await, "$");

    // Sensors: the emulator's SDR repository (a temperature, a fan, a power supply) in the
    // same document as the Redfish emulator's.
    let j = run("password", &i(&["sensors"])).await;
    assert_eq!(j["result"]["sensors"].as_array().unwrap().len(), 3, "{j}");
    assert_eq!(j["result"]["sensors"][1]["reading"], 5600.0);
    same_shape(&j, &run("password", &http(r(&["sensors"]))).await, "$");

    // Virtual media: IPMI has none, and says so.
    let (json, code) = cli(
        "password",
        &i(&["media", "show"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(code, 1, "{json}");
    assert_eq!(json["error"]["kind"], "unsupported", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("virtual media over IPMI"),
        "{json}"
    );

    // Chassis controls the emulator executed: exactly power up, then power down.
    assert_eq!(bmc.stats().chassis_controls, vec![1, 0]);

    // A wrong password is typed and not printed.
    let (json, code) = cli(
        "not-the-password",
        &i(&["power", "status"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(code, 1);
    assert_eq!(json["error"]["kind"], "unauthorized", "{json}");
    assert!(!json.to_string().contains("not-the-password"));
    // Every session was closed when each command ended.
    poll_until("sessions closed", Duration::from_secs(10), || async {
        (bmc.stats().sessions == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn cli_over_openipmi_ipmi_sim() {
    let fru = FruInfo::example(7);
    let sim = common::openipmi::start(&fru.encode());
    let a = sim.addr;
    let user = common::openipmi::USER;
    let pw = common::openipmi::PASSWORD;
    // ipmi_sim offers suite 3 only and ignores requests for 17: pin the suite...
    let i = |cmd: &[&str]| {
        let mut v = argv(a, user, Some("ipmi"), &["--cipher-suite", "3"]);
        v.extend(cmd.iter().map(|s| s.to_string()));
        v
    };
    // ...except for the first command (polled: ipmi_sim may still be starting), which shows
    // the default falls back from 17 to 3.
    let first = poll_until("ipmi_sim answers", Duration::from_secs(30), || async {
        let v = argv(a, user, Some("ipmi"), &["power", "status"]);
        let args: Vec<&str> = v.iter().map(String::as_str).collect();
        let (json, code) = cli(pw, &args).await;
        (code == 0).then_some(json)
    })
    .await;
    assert_eq!(first["protocol"], "ipmi");
    assert_eq!(first["result"]["powerState"], "on");

    let j = run(pw, &i(&["power", "off"])).await;
    assert_eq!(j["result"]["sent"], serde_json::json!(["power down"]));
    let j = run(pw, &i(&["power", "status"])).await;
    assert_eq!(j["result"]["powerState"], "off");
    let j = run(pw, &i(&["power", "off"])).await;
    assert_eq!(j["result"]["alreadyInState"], true);
    let j = run(pw, &i(&["power", "on"])).await;
    assert_eq!(j["result"]["sent"], serde_json::json!(["power up"]));
    let j = run(pw, &i(&["power", "status"])).await;
    assert_eq!(j["result"]["powerState"], "on");

    // ipmi_sim hands the device to its chassis script and keeps the selector, but drops the
    // rest of byte 1 of parameter 5 (valid, persistent and EFI bits all read 0; ipmitool reads
    // "Boot Flag Invalid" too): the device reads back, the override does not count as
    // enabled, and no boot mode is reported (the EFI bit is therefore tested against ingot's
    // emulator, in `ipmi_one_time_network_boot_writes_the_reported_mode`).
    let j = run(pw, &i(&["boot", "pxe", "--once"])).await;
    assert_eq!(j["result"]["device"], "pxe");
    assert_eq!(j["result"]["persistent"], false);
    assert_eq!(j["result"]["enabled"], false);
    assert_eq!(
        std::fs::read_to_string(sim.dir.join("boot"))
            .unwrap()
            .trim(),
        "pxe"
    );
    assert_eq!(j["result"]["mode"], Value::Null, "{j}");
    let j = run(pw, &i(&["boot", "show"])).await;
    assert_eq!(j["result"]["device"], "pxe");
    assert_eq!(j["result"]["rawTarget"], "pxe");
    assert_eq!(j["result"]["mode"], Value::Null);

    let j = run(pw, &i(&["inventory"])).await;
    let inv = &j["result"];
    assert_eq!(inv["manufacturer"], fru.product_manufacturer.as_str());
    assert_eq!(inv["model"], fru.product_name.as_str());
    assert_eq!(inv["serialNumber"], fru.product_serial.as_str());
    assert_eq!(inv["bmcFirmwareVersion"], "9.08");
    assert_eq!(inv["powerState"], "on");

    let j = run(pw, &i(&["sel"])).await;
    let entries = j["result"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{j}");
    assert!(
        entries[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Temperature #0x30")
    );
    assert!(
        entries[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("Processor #0x02")
    );
    let ids: Vec<&Value> = entries.iter().map(|e| &e["id"]).collect();
    let again = run(pw, &i(&["sel"])).await;
    let ids_again: Vec<&Value> = again["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["id"])
        .collect();
    assert_eq!(ids, ids_again, "SEL ids are stable across reads");

    // Same shape as the emulator's documents for the same commands.
    let emu = ipmi_fleet(1, true).await;
    let ea = emu.bmcs()[0].addr();
    for cmd in [
        &["power", "status"][..],
        &["boot", "show"],
        &["inventory"],
        &["sel"],
        &["sensors"],
    ] {
        let ours = run("password", &argv(ea, "admin", Some("ipmi"), cmd)).await;
        let theirs = run(pw, &i(cmd)).await;
        same_shape(&ours, &theirs, "$");
    }
}

#[tokio::test]
async fn detection_picks_ipmi_when_redfish_is_closed_and_remembers_it() {
    let fleet = ipmi_fleet(1, true).await;
    let addr = fleet.bmcs()[0].addr();
    let ipmi = Arc::new(IpmiConnector::new(IpmiOptions {
        timeout: Duration::from_millis(500),
        keepalive: None,
        ..IpmiOptions::default()
    }));
    let manager = SessionManager::with_connectors(
        ManagerOptions {
            redfish: RedfishOptions {
                timeout: Duration::from_secs(2),
                ..RedfishOptions::default()
            },
            ..ManagerOptions::default()
        },
        vec![ipmi.clone() as Arc<dyn Connector>],
    );
    // The same port number on TCP has no listener: the Redfish probe is refused.
    let config = BmcConfig {
        endpoint: Endpoint::parse(&format!("http://{addr}"), None).unwrap(),
        username: "admin".into(),
        password: Password::new("password"),
        protocol: None,
        insecure_tls: false,
        ca_bundle_pem: None,
        pinned_sha256: None,
        system_name: None,
        basic_auth: false,
    };
    let bmc = manager.bmc(config.clone());
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);
    assert_eq!(manager.detected_protocol(&config), Some(Protocol::Ipmi));
    assert_eq!(bmc.protocol(), Protocol::Ipmi);
    for _ in 0..3 {
        bmc.power_state().await.unwrap();
        bmc.boot_override().await.unwrap();
    }
    let redfish = manager.redfish_stats();
    assert_eq!(
        redfish.requests.load(Ordering::Relaxed),
        1,
        "one Redfish attempt"
    );
    assert_eq!(ipmi.stats().connects.load(Ordering::Relaxed), 1);
    assert_eq!(
        fleet.bmcs()[0].stats().sessions_opened,
        1,
        "one IPMI session"
    );

    // After the session is closed, the next call goes straight to IPMI.
    bmc.close().await.unwrap();
    let again = manager.bmc(config.clone());
    assert_eq!(again.power_state().await.unwrap(), PowerState::On);
    assert_eq!(redfish.requests.load(Ordering::Relaxed), 1);
    assert_eq!(ipmi.stats().connects.load(Ordering::Relaxed), 2);
    assert_eq!(manager.shutdown().await, 1);
    poll_until("sessions closed", Duration::from_secs(10), || async {
        (fleet.bmcs()[0].stats().sessions == 0).then_some(())
    })
    .await;

    // The command detects it too.
    let (json, code) = cli(
        "password",
        &argv(addr, "admin", None, &["power", "status"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["protocol"], "ipmi");

    // With a wrong password, detection reports the protocol that answered (IPMI refused the
    // credentials), not the Redfish port that is closed.
    let (json, code) = cli(
        "wrong-password",
        &argv(addr, "admin", None, &["power", "status"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(code, 1, "{json}");
    assert_eq!(json["error"]["kind"], "unauthorized", "{json}");
}

/// The power contract every `Bmc` keeps, whatever the protocol.
async fn power_contract(bmc: &dyn Bmc, expect: Protocol) {
    async fn wait(bmc: &dyn Bmc, want: PowerState) {
        poll_until(
            &format!("power {want}"),
            Duration::from_secs(20),
            || async { (bmc.power_state().await.ok() == Some(want)).then_some(()) },
        )
        .await;
    }
    assert_eq!(bmc.protocol(), expect);
    let o = bmc.power(PowerAction::On).await.unwrap();
    assert_eq!(o.action, PowerAction::On);
    wait(bmc, PowerState::On).await;
    let o = bmc.power(PowerAction::On).await.unwrap();
    assert!(o.already_in_state && o.sent.is_empty(), "{o:?}");

    let o = bmc.power(PowerAction::Off).await.unwrap();
    assert!(!o.already_in_state && o.sent.len() == 1, "{o:?}");
    wait(bmc, PowerState::Off).await;
    for action in [PowerAction::Off, PowerAction::Soft] {
        let o = bmc.power(action).await.unwrap();
        assert!(o.already_in_state && o.sent.is_empty(), "{action}: {o:?}");
    }

    // cycle on a powered-off system starts it.
    let o = bmc.power(PowerAction::Cycle).await.unwrap();
    assert!(!o.already_in_state && !o.sent.is_empty(), "{o:?}");
    wait(bmc, PowerState::On).await;
    let o = bmc.power(PowerAction::Reset).await.unwrap();
    assert!(!o.already_in_state && o.sent.len() == 1, "{o:?}");
    wait(bmc, PowerState::On).await;

    let o = bmc.power(PowerAction::Off).await.unwrap();
    assert!(!o.already_in_state, "{o:?}");
    wait(bmc, PowerState::Off).await;
    let o = bmc.power(PowerAction::On).await.unwrap();
    assert!(!o.already_in_state, "{o:?}");
    wait(bmc, PowerState::On).await;
    bmc.close().await.unwrap();
}

#[tokio::test]
async fn the_power_contract_holds_over_redfish_and_ipmi() {
    let redfish = redfish_fleet(Vendor::Dell).await;
    let ipmi = ipmi_fleet(1, false).await;
    let rf_endpoint = Endpoint::parse(&redfish.bmcs[0].url(), None).unwrap();
    let ipmi_endpoint = Endpoint::parse(&ipmi.bmcs()[0].addr().to_string(), None).unwrap();
    let config = |endpoint: &Endpoint, protocol| BmcConfig {
        endpoint: endpoint.clone(),
        username: "admin".into(),
        password: Password::new("password"),
        protocol: Some(protocol),
        insecure_tls: false,
        ca_bundle_pem: None,
        pinned_sha256: None,
        system_name: None,
        basic_auth: false,
    };
    let ipmi_options = IpmiOptions {
        timeout: Duration::from_millis(500),
        keepalive: None,
        ..IpmiOptions::default()
    };

    // The clients themselves.
    let rf = RedfishClient::new(
        &rf_endpoint,
        "admin",
        Password::new("password"),
        RedfishOptions {
            timeout: Duration::from_secs(5),
            ..RedfishOptions::default()
        },
    )
    .unwrap();
    power_contract(&rf, Protocol::Redfish).await;
    let ib = IpmiBmc::connect(&config(&ipmi_endpoint, Protocol::Ipmi), &ipmi_options)
        .await
        .unwrap();
    power_contract(&ib, Protocol::Ipmi).await;

    // And through the session manager.
    let manager = SessionManager::with_connectors(
        ManagerOptions::default(),
        vec![Arc::new(IpmiConnector::new(ipmi_options)) as Arc<dyn Connector>],
    );
    power_contract(
        &manager.bmc(config(&rf_endpoint, Protocol::Redfish)),
        Protocol::Redfish,
    )
    .await;
    power_contract(
        &manager.bmc(config(&ipmi_endpoint, Protocol::Ipmi)),
        Protocol::Ipmi,
    )
    .await;
    manager.shutdown().await;

    // IPMI commands the emulator executed: on (the first run starts off), off, on (cycle while
    // off), reset, off, on; the second run starts on and skips the first.
    assert_eq!(
        ipmi.bmcs()[0].stats().chassis_controls,
        vec![1, 0, 1, 3, 0, 1, 0, 1, 3, 0, 1]
    );
}

/// A one-time network boot over IPMI writes the EFI bit of the mode the boot flags report
/// (read back from the emulator): valid UEFI flags stay UEFI, valid Legacy flags stay Legacy;
/// flags without the valid bit report no mode, and UEFI is written (a leftover EFI bit of 0
/// would otherwise switch a UEFI machine to Legacy). A mode asked for is written. A BMC that
/// stores another EFI bit is reported as `BootModeNotKept`, and the flags are written once.
#[tokio::test]
async fn ipmi_one_time_network_boot_writes_the_reported_mode() {
    let mut icfg = ingot_ipmi_sim::FleetConfig::uniform(4, "password");
    // Persistent disk override, valid: UEFI, Legacy; then no valid flags, EFI bit 0.
    icfg.bmcs[0].boot_flags = [0xE0, 0x08, 0, 0, 0];
    icfg.bmcs[1].boot_flags = [0xC0, 0x08, 0, 0, 0];
    icfg.bmcs[2].boot_flags = [0x00, 0x00, 0, 0, 0];
    icfg.bmcs[3].boot_flags = [0xE0, 0x08, 0, 0, 0];
    let fleet = ingot_ipmi_sim::serve(icfg).await.unwrap();
    let handles = fleet.bmcs();
    handles[3].set_faults(ingot_ipmi_sim::Faults {
        drop_efi_bit: true,
        ..ingot_ipmi_sim::Faults::default()
    });
    let options = IpmiOptions {
        keepalive: None,
        ..IpmiOptions::default()
    };
    let mut bmcs = Vec::new();
    for h in handles {
        let mut cfg = common::bmc_config(&h.addr().to_string());
        cfg.protocol = Some(Protocol::Ipmi);
        bmcs.push(IpmiBmc::connect(&cfg, &options).await.unwrap());
    }
    let pxe = |mode| BootRequest {
        device: BootDevice::Pxe,
        persistent: false,
        mode,
    };
    for (i, mode, flags) in [
        (0, BootMode::Uefi, 0xA0),
        (1, BootMode::Legacy, 0x80),
        (2, BootMode::Uefi, 0xA0),
    ] {
        assert_eq!(
            bmcs[i].boot_override().await.unwrap().mode,
            [Some(BootMode::Uefi), Some(BootMode::Legacy), None][i]
        );
        let o = bmcs[i].set_boot_override(pxe(None)).await.unwrap();
        assert_eq!((o.device, o.mode), (BootDevice::Pxe, Some(mode)), "BMC {i}");
        assert_eq!(handles[i].boot_flags()[..2], [flags, 0x04], "BMC {i}");
    }
    // Asked for, the other mode is written.
    let o = bmcs[1]
        .set_boot_override(pxe(Some(BootMode::Uefi)))
        .await
        .unwrap();
    assert_eq!(o.mode, Some(BootMode::Uefi));
    assert_eq!(handles[1].boot_flags()[0], 0xA0);

    let e = bmcs[3].set_boot_override(pxe(None)).await.unwrap_err();
    assert!(
        matches!(
            e,
            BmcError::BootModeNotKept {
                before: Some(BootMode::Uefi),
                wanted: BootMode::Uefi,
                after: BootMode::Legacy
            }
        ),
        "{e:?}"
    );
    let written = handles[3].stats().boot_params_written;
    assert_eq!(
        written.iter().filter(|p| **p == 5).count(),
        1,
        "the flags are written once, not again to force the mode: {written:?}"
    );
    for b in bmcs {
        b.close().await.unwrap();
    }
}

/// ipmi_sim emulator commands for six sensors: Full threshold records (a temperature that is
/// fine, one past its upper non-critical threshold, a fan under its lower critical one, a
/// 12 V rail whose conversion has M, B and R exponent), a Compact power supply status whose
/// "failure detected" state is set, and a temperature with scanning disabled.
fn sensor_emu() -> String {
    use common::openipmi::{compact_sdr, full_sdr};
    let mut e = String::new();
    e += &full_sdr(
        1,
        0x01,
        1,
        "Inlet Temp",
        (1, 0, 0, 0),
        [0, 0, 0, 40, 45, 50],
        0x38,
    );
    e += &full_sdr(
        2,
        0x01,
        1,
        "CPU1 Temp",
        (1, 0, 0, 0),
        [0, 0, 0, 85, 95, 100],
        0x38,
    );
    e += &full_sdr(
        3,
        0x04,
        18,
        "Fan1",
        (100, 0, 0, 0),
        [8, 5, 3, 0, 0, 0],
        0x07,
    );
    // y = (5x + 2) / 100 volts.
    e += &full_sdr(
        4,
        0x02,
        4,
        "12V",
        (5, 2, -2, 0),
        [230, 220, 200, 250, 255, 0],
        0x1F,
    );
    e += &compact_sdr(5, 0x08, "PS1 Status");
    e += &full_sdr(
        6,
        0x01,
        1,
        "Spare Temp",
        (1, 0, 0, 0),
        [0, 0, 0, 40, 45, 50],
        0x38,
    );
    e += "sensor_add 0x20 0 1 0x01 0x01
sensor_set_threshold 0x20 0 1 settable 111000 50 45 40 0 0 0
sensor_set_value 0x20 0 1 24 0
sensor_add 0x20 0 2 0x01 0x01
sensor_set_threshold 0x20 0 2 settable 111000 100 95 85 0 0 0
sensor_set_value 0x20 0 2 90 0
sensor_add 0x20 0 3 0x04 0x01
sensor_set_threshold 0x20 0 3 settable 000111 0 0 0 3 5 8
sensor_set_value 0x20 0 3 4 0
sensor_add 0x20 0 4 0x02 0x01
sensor_set_threshold 0x20 0 4 settable 011111 0 255 250 200 220 230
sensor_set_value 0x20 0 4 240 0
sensor_add 0x20 0 5 0x08 0x6f
sensor_set_bit 0x20 0 5 0 1 0
sensor_set_bit 0x20 0 5 1 1 0
sensor_add 0x20 0 6 0x01 0x01
sensor_set_value 0x20 0 6 30 0
sensor_set_event_support 0x20 0 6 disable no-scanning none 000000000000000 000000000000000 000000000000000 000000000000000
";
    e
}

/// `ipmitool sensor` lines: name -> (reading, unit, status, [LNR, LC, LNC, UNC, UC, UNR]).
type IpmitoolRow = (Option<f64>, String, String, [Option<f64>; 6]);

fn ipmitool_sensors(addr: SocketAddr) -> std::collections::BTreeMap<String, IpmitoolRow> {
    let bin = common::require_apt_tool("ipmitool", "ipmitool");
    let out = std::process::Command::new(bin)
        .args(["-I", "lanplus", "-H", &addr.ip().to_string(), "-p"])
        .arg(addr.port().to_string())
        .args([
            "-U",
            common::openipmi::USER,
            "-P",
            common::openipmi::PASSWORD,
        ])
        .args(["-C", "3", "sensor"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = |s: &str| s.trim().parse::<f64>().ok();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            (c.len() >= 10).then(|| {
                (
                    c[0].to_owned(),
                    (
                        f(c[1]),
                        c[2].to_owned(),
                        c[3].to_owned(),
                        [f(c[4]), f(c[5]), f(c[6]), f(c[7]), f(c[8]), f(c[9])],
                    ),
                )
            })
        })
        .collect()
}

#[tokio::test]
async fn sensors_over_openipmi_ipmi_sim_match_ipmitool() {
    let fru = FruInfo::example(3);
    let sim = common::openipmi::start_with(&fru.encode(), &sensor_emu());
    let a = sim.addr;
    let user = common::openipmi::USER;
    let pw = common::openipmi::PASSWORD;
    let cmd = argv(a, user, Some("ipmi"), &["--cipher-suite", "3", "sensors"]);
    let j = poll_until("ipmi_sim answers", Duration::from_secs(30), || async {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let (json, code) = cli(pw, &args).await;
        (code == 0).then_some(json)
    })
    .await;
    assert_eq!(j["command"], "sensors");
    let sensors = j["result"]["sensors"].as_array().unwrap();
    let by_name = |n: &str| {
        sensors
            .iter()
            .find(|s| s["name"] == n)
            .unwrap_or_else(|| panic!("no sensor {n}: {j}"))
    };
    assert_eq!(sensors.len(), 6, "{j}");

    let inlet = by_name("Inlet Temp");
    assert_eq!(inlet["kind"], "temperature");
    assert_eq!(inlet["reading"], 24.0, "{j}");
    assert_eq!(inlet["unit"], "Cel");
    assert_eq!(inlet["thresholds"]["upperNonCritical"], 40.0);
    assert_eq!(inlet["thresholds"]["upperCritical"], 45.0);
    assert_eq!(inlet["thresholds"]["upperFatal"], 50.0);
    assert_eq!(inlet["thresholds"]["lowerCritical"], Value::Null);
    assert_eq!(inlet["health"], "ok");
    assert_eq!(inlet["state"], "enabled");
    assert!(
        inlet["source"].as_str().unwrap().starts_with("sdr:"),
        "{inlet}"
    );
    assert_eq!(by_name("CPU1 Temp")["health"], "warning");
    let fan = by_name("Fan1");
    assert_eq!(
        (fan["kind"].as_str(), fan["reading"].as_f64()),
        (Some("fan"), Some(400.0))
    );
    assert_eq!(fan["unit"], "RPM");
    assert_eq!(fan["thresholds"]["lowerCritical"], 500.0);
    assert_eq!(fan["health"], "critical");
    let v12 = by_name("12V");
    assert_eq!(
        (v12["kind"].as_str(), v12["reading"].as_f64()),
        (Some("voltage"), Some(12.02))
    );
    assert_eq!(v12["thresholds"]["lowerNonCritical"], 11.52);
    assert_eq!(v12["thresholds"]["upperCritical"], 12.77);
    assert_eq!(v12["health"], "ok");
    let psu = by_name("PS1 Status");
    assert_eq!(psu["kind"], "power_supply");
    assert_eq!(psu["reading"], Value::Null);
    assert_eq!(psu["health"], "critical", "failure detected is set");
    let spare = by_name("Spare Temp");
    assert_eq!(spare["state"], "disabled");
    assert_eq!(spare["reading"], Value::Null);
    assert_eq!(spare["health"], Value::Null);

    // ipmitool reads the same BMC the same way: readings, thresholds and status.
    let theirs = ipmitool_sensors(a);
    for s in sensors {
        let name = s["name"].as_str().unwrap();
        let (reading, unit, status, t) = theirs
            .get(name)
            .unwrap_or_else(|| panic!("ipmitool has no {name}: {theirs:?}"));
        if unit == "discrete" {
            continue;
        }
        assert_eq!(s["reading"].as_f64(), *reading, "{name}");
        let th = &s["thresholds"];
        let ours = [
            th["lowerFatal"].as_f64(),
            th["lowerCritical"].as_f64(),
            th["lowerNonCritical"].as_f64(),
            th["upperNonCritical"].as_f64(),
            th["upperCritical"].as_f64(),
            th["upperFatal"].as_f64(),
        ];
        assert_eq!(&ours, t, "{name}");
        let health = match status.as_str() {
            "ok" => Value::from("ok"),
            "nc" => Value::from("warning"),
            "cr" | "nr" => Value::from("critical"),
            _ => Value::Null,
        };
        assert_eq!(s["health"], health, "{name}: ipmitool says {status}");
    }

    // The table: a header and one line per sensor.
    let args: Vec<String> = cmd.iter().filter(|a| *a != "--json").cloned().collect();
    let parsed = Top::try_parse_from(std::iter::once("bmc").chain(args.iter().map(String::as_str)))
        .unwrap()
        .bmc;
    let out = execute_with(parsed, Vec::new(), |n| {
        (n == "BMC_PW").then(|| pw.to_owned())
    })
    .await;
    assert_eq!(out.code, 0, "{}", out.text);
    let lines: Vec<&str> = out.text.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{}", out.text);
    assert_eq!(lines.len(), 7, "{}", out.text);
    let fan_line = lines.iter().find(|l| l.starts_with("Fan1")).unwrap();
    for cell in ["fan", "400", "RPM", "300/500/800 .. -/-/-", "critical"] {
        assert!(fan_line.contains(cell), "{cell:?} in {fan_line:?}");
    }
}
