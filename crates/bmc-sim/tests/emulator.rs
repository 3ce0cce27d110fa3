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
