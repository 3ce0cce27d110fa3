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

// `ingot bmc ... events`: the real binary following the emulators and OpenIPMI's `ipmi_sim`.

#[path = "../../bmc/tests/common/mod.rs"]
mod common;

use ingot_bmc_sim::Quirks;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// A running `ingot bmc ... events`: its stdout lines as they come, its stderr so far.
struct Follower {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Follower {
    fn start(args: &[String], password: &str) -> Follower {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ingot"))
            .args(args)
            .env("BMC_PW", password)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("ingot bmc events ran");
        let (tx, lines) = mpsc::unbounded_channel();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(l)) = out.next_line().await {
                let _ = tx.send(l);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(l)) = err.next_line().await {
                let mut s = sink.lock().unwrap();
                s.push_str(&l);
                s.push('\n');
            }
        });
        Follower {
            child,
            lines,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next line printed, within a generous deadline.
    async fn next_line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(30), self.lines.recv())
            .await
            .unwrap_or_else(|_| panic!("no event printed within 30 s; stderr:\n{}", self.stderr()))
            .unwrap_or_else(|| panic!("ingot bmc events ended; stderr:\n{}", self.stderr()))
    }

    /// The next event printed (one JSON document).
    async fn next_event(&mut self) -> Value {
        let line = self.next_line().await;
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(v["schemaVersion"], 1, "{v}");
        assert_eq!(v["command"], "events", "{v}");
        assert_eq!(v["ok"], true, "{v}");
        v
    }

    /// Nothing more printed for `quiet`.
    async fn prints_nothing_for(&mut self, quiet: Duration) {
        if let Ok(Some(line)) = tokio::time::timeout(quiet, self.lines.recv()).await {
            panic!("printed again: {line}\nstderr:\n{}", self.stderr());
        }
    }

    async fn wait_stderr(&self, what: &str) {
        let stderr = self.stderr.clone();
        common::poll_until(what, Duration::from_secs(30), || {
            let s = stderr.lock().unwrap().clone();
            async move { s.contains(what).then_some(()) }
        })
        .await;
    }

    /// Sends `signal`; the command ends by itself with exit 0.
    async fn stop(mut self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("ingot bmc events ended after the signal")
            .unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "{signal}: {status}\n{}",
            self.stderr()
        );
    }
}

fn events_args(host: &str, port: Option<u16>, extra: &[&str]) -> Vec<String> {
    let mut cmd = vec!["events"];
    cmd.extend(extra);
    args(host, port, None, &cmd)
}

async fn wait_streams(b: &ingot_bmc_sim::SimBmc, opens: usize) {
    common::poll_until(
        "the event stream opened",
        Duration::from_secs(30),
        || async {
            (b.state.event_stream_opens().len() >= opens && b.state.event_streams_open() > 0)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_server_sent_events_and_reconnect_after_a_drop() {
    let fleet = Fleet::start(FleetOptions::default(), vec![BmcSpec::default()])
        .await
        .unwrap();
    let b = &fleet.bmcs[0];
    let mut f = Follower::start(&events_args(&b.url(), None, &[]), "password");
    // The log's two entries first, then what the BMC pushes.
    for want in ["The system was powered on.", "Fan 3 speed"] {
        let e = f.next_event().await;
        assert_eq!(e["protocol"], "redfish");
        assert_eq!(e["result"]["source"], "log", "{e}");
        assert!(e["result"]["message"].as_str().unwrap().starts_with(want));
    }
    wait_streams(b, 1).await;
    assert!(f.stderr().contains("server-sent events"), "{}", f.stderr());
    b.state.add_log("Critical", "PSU 2 lost input");
    let first = f.next_event().await;
    assert_eq!(first["result"]["source"], "sse", "{first}");
    assert_eq!(first["result"]["message"], "PSU 2 lost input");
    assert_eq!(first["result"]["messageId"], "Platform.1.0.PlatformEvent");
    assert!(
        first["result"]["origin"]
            .as_str()
            .unwrap()
            .contains("/LogServices/"),
        "{first}"
    );

    // The BMC drops the stream: the command opens it again, naming the last event it saw.
    b.state.drop_event_streams();
    wait_streams(b, 2).await;
    assert_eq!(
        b.state.event_stream_opens(),
        vec![
            None,
            Some(first["result"]["id"].as_str().unwrap().to_owned())
        ]
    );
    b.state.add_log("Warning", "PSU 2 input restored");
    let next = f.next_event().await;
    assert_eq!(next["result"]["source"], "sse", "{next}");
    assert_eq!(next["result"]["message"], "PSU 2 input restored");
    assert!(f.stderr().contains("reconnected"), "{}", f.stderr());
    f.stop(nix::sys::signal::Signal::SIGINT).await;
    assert_eq!(b.state.open_sessions(), 0, "the session was logged out");

    // --since-now: the log's entries are not printed, only what the BMC pushes afterwards;
    // without --json, one line of text per event.
    let mut text = events_args(&b.url(), None, &["--since-now"]);
    text.retain(|a| a != "--json");
    let mut f = Follower::start(&text, "password");
    wait_streams(b, 3).await;
    b.state.add_log("OK", "PSU 2 redundancy\nregained");
    let line = f.next_line().await;
    let fields: Vec<&str> = line.split(" | ").collect();
    assert_eq!(fields.len(), 4, "{line}");
    assert!(fields[0].len() >= 20 && fields[0].ends_with('Z'), "{line}");
    assert_eq!(
        fields[1..],
        [
            "-",
            "Platform.1.0.PlatformEvent",
            "PSU 2 redundancy regained"
        ],
        "time | severity | message id | message, on one line: {line}"
    );
    f.stop(nix::sys::signal::Signal::SIGTERM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_poll_the_log_of_a_bmc_without_server_sent_events() {
    let fleet = Fleet::start(FleetOptions::default(), vec![BmcSpec::default()])
        .await
        .unwrap();
    let b = &fleet.bmcs[0];
    b.state.set_quirks(Quirks {
        no_server_sent_events: true,
        ..Quirks::default()
    });
    let mut f = Follower::start(
        &events_args(&b.url(), None, &["--poll-seconds", "1"]),
        "password",
    );
    for _ in 0..2 {
        let e = f.next_event().await;
        assert_eq!(e["result"]["source"], "log", "{e}");
    }
    assert!(
        f.stderr().contains("offers no server-sent events"),
        "{}",
        f.stderr()
    );
    let id = b.state.add_log("Critical", "PSU 1 lost input");
    let e = f.next_event().await;
    assert_eq!(e["result"]["source"], "log", "{e}");
    assert_eq!(e["result"]["message"], "PSU 1 lost input");
    assert!(
        e["result"]["id"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/{id}")),
        "{e}"
    );
    // Five more reads of the log (one a second) print nothing again.
    f.prints_nothing_for(Duration::from_secs(5)).await;
    assert_eq!(b.state.event_stream_opens(), Vec::<Option<String>>::new());
    f.stop(nix::sys::signal::Signal::SIGINT).await;

    // An unset password variable is a usage error (exit 2); refused credentials end it with
    // exit 1 and the failure document.
    let (j, code) = ingot(
        &events_args(&b.url(), None, &[])
            .iter()
            .map(|a| {
                if a == "BMC_PW" {
                    "NO_SUCH_PW".to_string()
                } else {
                    a.clone()
                }
            })
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(code, 2, "{j}");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(env!("CARGO_BIN_EXE_ingot"))
            .args(events_args(&b.url(), None, &[]))
            .env("BMC_PW", "wrong-password")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{j}");
    assert_eq!(j["command"], "events");
    assert_eq!(j["error"]["kind"], "unauthorized", "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_poll_the_sel_of_openipmi_ipmi_sim() {
    let sim = common::openipmi::start(&[]);
    let a = sim.addr;
    let ip = a.ip().to_string();
    let mut argv = events_args(&ip, Some(a.port()), &["--poll-seconds", "1"]);
    argv.splice(
        argv.len() - 3..argv.len() - 3,
        ["--protocol", "ipmi", "--cipher-suite", "3"].map(String::from),
    );
    // --json after the command, as well as before it.
    argv.retain(|s| s != "--json");
    argv.push("--json".into());
    argv.iter_mut()
        .filter(|s| s.as_str() == "admin")
        .for_each(|s| *s = common::openipmi::USER.into());
    let mut f = Follower::start(&argv, common::openipmi::PASSWORD);
    // ipmi_sim starts with two records.
    for want in ["Temperature #0x30", "Processor #0x02"] {
        let e = f.next_event().await;
        assert_eq!(e["protocol"], "ipmi", "{e}");
        assert_eq!(e["result"]["source"], "sel", "{e}");
        assert!(
            e["result"]["message"].as_str().unwrap().starts_with(want),
            "{e}"
        );
    }
    f.wait_stderr("following the SEL").await;
    let ipmitool = |cmd: &[String]| {
        std::process::Command::new(common::require_apt_tool("ipmitool", "ipmitool"))
            .args(["-I", "lanplus", "-H", &ip, "-p", &a.port().to_string()])
            .args([
                "-U",
                common::openipmi::USER,
                "-P",
                common::openipmi::PASSWORD,
                "-C",
                "3",
            ])
            .args(cmd)
            .output()
            .unwrap()
    };
    let out = ipmitool(&add_fan_entry(0x41));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e = f.next_event().await;
    assert_eq!(e["result"]["source"], "sel", "{e}");
    assert!(
        e["result"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Fan #0x41"),
        "{e}"
    );
    f.prints_nothing_for(Duration::from_secs(5)).await;

    // The SEL cleared: said, and the next entry printed.
    let out = ipmitool(&["sel".into(), "clear".into()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    f.wait_stderr("the SEL was cleared").await;
    let out = ipmitool(&add_fan_entry(0x42));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e = f.next_event().await;
    assert!(
        e["result"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Fan #0x42"),
        "{e}"
    );
    f.prints_nothing_for(Duration::from_secs(3)).await;
    f.stop(nix::sys::signal::Signal::SIGINT).await;
}

/// ipmitool's arguments for Add SEL Entry (storage 0x44): a system event record, the lower
/// non-critical threshold of fan `sensor` crossed.
fn add_fan_entry(sensor: u8) -> Vec<String> {
    let mut v: Vec<String> = ["raw", "0x0a", "0x44"].map(String::from).to_vec();
    let record = [
        0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x04, 0x04, sensor, 0x01, 0x00, 0xff,
        0xff,
    ];
    v.extend(record.iter().map(|b: &u8| format!("0x{b:02x}")));
    v
}
