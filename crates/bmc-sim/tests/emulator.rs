//! The emulator's own behaviour, seen over HTTP: sessions and their limit, power transitions,
//! the admin endpoints and the server-sent event stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn one(vendor: Vendor) -> Fleet {
    Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            vendor,
            max_sessions: 2,
            power_delay: Duration::from_millis(200),
            ..BmcSpec::default()
        }],
    )
    .await
    .expect("fleet")
}

async fn login(http: &reqwest::Client, url: &str) -> reqwest::Response {
    http.post(format!("{url}/redfish/v1/SessionService/Sessions"))
        .json(&json!({"UserName": "admin", "Password": "password"}))
        .send()
        .await
        .expect("login")
}

#[tokio::test]
async fn sessions_have_a_limit() {
    let fleet = one(Vendor::Hpe).await;
    let url = fleet.bmcs[0].url();
    let http = reqwest::Client::new();
    let a = login(&http, &url).await;
    assert_eq!(a.status(), 201);
    assert!(a.headers().get("X-Auth-Token").is_some());
    assert!(login(&http, &url).await.status().is_success());
    let full = login(&http, &url).await;
    assert_eq!(full.status(), 503);
    let body: Value = full.json().await.unwrap();
    assert!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"]
            .as_str()
            .unwrap()
            .contains("SessionLimitExceeded")
    );
    let unauth = http
        .get(format!("{url}/redfish/v1/Systems"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauth.status(), 401);
}

#[tokio::test]
async fn power_changes_are_streamed_as_events() {
    let fleet = one(Vendor::Dell).await;
    let bmc = &fleet.bmcs[0];
    let url = bmc.url();
    let http = reqwest::Client::new();
    let sse = http
        .get(format!("{url}/redfish/v1/EventService/SSE"))
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    assert!(
        sse.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut stream = sse.bytes_stream();
    let reset = http
        .post(format!(
            "{url}/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset"
        ))
        .basic_auth("admin", Some("password"))
        .json(&json!({"ResetType": "ForceOff"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), 204);
    let state = bmc.state.snapshot().power_state;
    assert!(state == "PoweringOff" || state == "Off", "{state}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while !seen.contains("powered off") {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, stream.next())
            .await
            .expect("event within the deadline")
            .expect("stream open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = seen
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .expect("an SSE data line");
    let event: Value = serde_json::from_str(data.trim()).unwrap();
    assert_eq!(
        event["Events"][0]["OriginOfCondition"]["@odata.id"],
        "/redfish/v1/Systems/System.Embedded.1"
    );
    assert_eq!(bmc.state.snapshot().power_state, "Off");
}

#[tokio::test]
async fn admin_endpoints_inject_faults() {
    let fleet = one(Vendor::Lenovo).await;
    let url = fleet.bmcs[0].url();
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{url}/_sim/fault"))
        .json(&json!({"kind": "unavailable"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);
    assert_eq!(
        http.get(format!("{url}/redfish/v1/"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    http.delete(format!("{url}/_sim/fault"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        http.get(format!("{url}/redfish/v1/"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let log: Value = http
        .post(format!("{url}/_sim/log"))
        .json(&json!({"severity": "Critical", "message": "PSU 1 failed"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = log["id"].as_u64().unwrap();
    let entry: Value = http
        .get(format!(
            "{url}/redfish/v1/Systems/1/LogServices/PlatformLog/Entries/{id}"
        ))
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(entry["Message"], "PSU 1 failed");
    let state: Value = http
        .get(format!("{url}/_sim/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["powerState"], "On");
}

#[tokio::test]
async fn lenovo_requires_if_match_on_patch() {
    let fleet = one(Vendor::Lenovo).await;
    let url = fleet.bmcs[0].url();
    let http = reqwest::Client::new();
    let body =
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
    let r = http
        .patch(format!("{url}/redfish/v1/Systems/1"))
        .basic_auth("admin", Some("password"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 428);
    let etag = http
        .get(format!("{url}/redfish/v1/Systems/1"))
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap()
        .headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let r = http
        .patch(format!("{url}/redfish/v1/Systems/1"))
        .basic_auth("admin", Some("password"))
        .header("If-Match", etag)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

async fn redfish(http: &reqwest::Client, method: reqwest::Method, url: String, body: Value) {
    let r = http
        .request(method, url)
        .basic_auth("admin", Some("password"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

async fn wait_power(bmc: &ingot_bmc_sim::SimBmc, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while bmc.state.snapshot().power_state != state {
        assert!(Instant::now() < deadline, "power never {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn each_power_on_is_a_boot_record() {
    let fleet = one(Vendor::Dell).await;
    let bmc = &fleet.bmcs[0];
    let url = bmc.url();
    let system = format!("{url}/redfish/v1/Systems/System.Embedded.1");
    let reset = format!("{system}/Actions/ComputerSystem.Reset");
    let http = reqwest::Client::new();
    // Found on: it booted its disk.
    assert_eq!(bmc.state.boots().len(), 1);
    assert_eq!(bmc.state.boots()[0].device, "Hdd");
    let once =
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
    redfish(&http, reqwest::Method::PATCH, system.clone(), once).await;
    redfish(
        &http,
        reqwest::Method::POST,
        reset.clone(),
        json!({"ResetType": "ForceOff"}),
    )
    .await;
    wait_power(bmc, "Off").await;
    assert!(
        bmc.state.boots()[0].powered_off_at.is_some(),
        "power-off ends the boot"
    );
    redfish(
        &http,
        reqwest::Method::POST,
        reset.clone(),
        json!({"ResetType": "On"}),
    )
    .await;
    wait_power(bmc, "On").await;
    let pxe = bmc.state.last_boot().unwrap();
    assert_eq!((pxe.count, pxe.device.as_str()), (2, "Pxe"));
    assert_eq!(
        (pxe.override_enabled.as_str(), pxe.mode.as_str()),
        ("Once", "UEFI")
    );
    assert!(pxe.powered_off_at.is_none());
    // The Once override was consumed by that boot: a restart boots the disk.
    let sys: Value = http
        .get(&system)
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sys["Boot"]["BootSourceOverrideEnabled"], "Disabled");
    redfish(
        &http,
        reqwest::Method::POST,
        reset.clone(),
        json!({"ResetType": "ForceRestart"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while bmc.state.boots().len() < 3 {
        assert!(Instant::now() < deadline, "the restart never booted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_power(bmc, "On").await;
    // A Continuous override stays for every boot; the OS rebooting itself is a boot too.
    let continuous = json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Continuous"}});
    redfish(&http, reqwest::Method::PATCH, system.clone(), continuous).await;
    let requests = bmc.state.snapshot().requests;
    bmc.state.reboot_from_os();
    let deadline = Instant::now() + Duration::from_secs(10);
    while bmc.state.boots().len() < 4 || bmc.state.snapshot().power_state != "On" {
        assert!(Instant::now() < deadline, "the OS reboot never booted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Read over the admin endpoint, which is not Redfish traffic.
    let report: Value = http
        .get(format!("{url}/_sim/boots"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        bmc.state.snapshot().requests,
        requests,
        "neither the OS reboot nor /_sim/boots counts"
    );
    assert_eq!(report["powerState"], "On");
    let devices: Vec<(u64, &str, &str)> = report["boots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["count"].as_u64().unwrap(),
                b["device"].as_str().unwrap(),
                b["overrideEnabled"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        devices,
        vec![
            (1, "Hdd", "Disabled"),
            (2, "Pxe", "Once"),
            (3, "Hdd", "Disabled"),
            (4, "Pxe", "Continuous")
        ]
    );
    assert!(report["boots"][2]["poweredOffAt"].is_string());
    assert!(report["boots"][3]["poweredOffAt"].is_null());
    assert_eq!(
        bmc.state.reset_requests(),
        vec!["ForceOff", "On", "ForceRestart"]
    );
}
