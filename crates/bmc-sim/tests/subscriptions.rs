//! The EventService's push subscriptions, seen over HTTP: created (with the DMTF required
//! properties and the vendor refusals), read back without their headers, deleted, bounded in
//! number, lost on a reset; events POSTed to the destination (HTTP and HTTPS with a
//! self-signed certificate) with the `Context` and headers; failed deliveries retried, then the
//! subscription terminated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ingot_bmc_sim::{BmcSpec, EventKnobs, Fleet, FleetOptions, Vendor};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

async fn one(vendor: Vendor) -> Fleet {
    Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            vendor,
            power_delay: Duration::from_millis(50),
            ..BmcSpec::default()
        }],
    )
    .await
    .expect("fleet")
}

/// What a destination received: each POST's headers and JSON body.
#[derive(Clone, Default)]
struct Received {
    posts: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    /// The first this many POSTs are answered 500.
    fail_first: Arc<Mutex<usize>>,
}

impl Received {
    fn bodies(&self) -> Vec<Value> {
        self.posts
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

async fn receive(State(r): State<Received>, headers: HeaderMap, body: String) -> StatusCode {
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    r.posts.lock().unwrap().push((headers, v));
    let mut fail = r.fail_first.lock().unwrap();
    if *fail > 0 {
        *fail -= 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    StatusCode::NO_CONTENT
}

/// A destination over plain HTTP; returns its URL.
async fn destination(r: Received) -> String {
    let app = Router::new().route("/events", post(receive)).with_state(r);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/events")
}

/// A destination over HTTPS with a self-signed certificate nobody trusts; returns its URL.
async fn tls_destination(r: Received) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let app = Router::new().route("/events", post(receive)).with_state(r);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                }
            });
        }
    });
    format!("https://{addr}/events")
}

async fn send(method: reqwest::Method, url: String, body: Option<Value>) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .request(method, url)
        .basic_auth("admin", Some("password"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    req.send().await.unwrap()
}

async fn subscribe(url: &str, body: Value) -> reqwest::Response {
    send(
        reqwest::Method::POST,
        format!("{url}/redfish/v1/EventService/Subscriptions"),
        Some(body),
    )
    .await
}

async fn message_id(r: reqwest::Response) -> String {
    let v: Value = r.json().await.unwrap();
    v["error"]["@Message.ExtendedInfo"][0]["MessageId"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn wait_until<F: Fn() -> bool>(what: &str, f: F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn power_off(bmc: &ingot_bmc_sim::SimBmc) {
    let r = send(
        reqwest::Method::POST,
        format!(
            "{}/redfish/v1/Systems/{}/Actions/ComputerSystem.Reset",
            bmc.url(),
            bmc.state.profile.system_id
        ),
        Some(json!({"ResetType": "ForceOff"})),
    )
    .await;
    assert!(r.status().is_success(), "{}", r.status());
}

#[tokio::test]
async fn subscriptions_are_created_read_and_deleted() {
    let fleet = one(Vendor::Lenovo).await;
    let url = fleet.bmcs[0].url();

    let r = subscribe(&url, json!({"Protocol": "Redfish"})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(message_id(r).await, "Base.1.8.PropertyMissing");
    let r = subscribe(&url, json!({"Destination": "http://127.0.0.1:9/e"})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(message_id(r).await, "Base.1.8.PropertyMissing");
    let r = subscribe(
        &url,
        json!({"Destination": "http://127.0.0.1:9/e", "Protocol": "SNMPv2c"}),
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_eq!(message_id(r).await, "Base.1.8.PropertyValueNotInList");
    let r = subscribe(
        &url,
        json!({"Destination": "ftp://x/e", "Protocol": "Redfish"}),
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_eq!(message_id(r).await, "Base.1.8.PropertyValueFormatError");
    assert!(fleet.bmcs[0].state.subscriptions().is_empty());

    let r = subscribe(
        &url,
        json!({
            "Destination": "http://127.0.0.1:9/e",
            "Protocol": "Redfish",
            "Context": "ctx-1",
            "HttpHeaders": {"X-Ingot-Secret": "s3cr3t"},
            "EventFormatType": "Event",
            "RegistryPrefixes": ["ResourceEvent"],
        }),
    )
    .await;
    assert_eq!(r.status(), 201);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with("/redfish/v1/EventService/Subscriptions/"));
    let r = send(reqwest::Method::GET, format!("{url}{location}"), None).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        !text.contains("s3cr3t"),
        "write-only headers read back: {text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["Destination"], "http://127.0.0.1:9/e");
    assert_eq!(v["Context"], "ctx-1");
    assert_eq!(v["Protocol"], "Redfish");
    assert_eq!(v["HttpHeaders"], Value::Null);
    assert_eq!(v["EventFormatType"], "Event");
    assert_eq!(v["RegistryPrefixes"], json!(["ResourceEvent"]));
    let c: Value = send(
        reqwest::Method::GET,
        format!("{url}/redfish/v1/EventService/Subscriptions"),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(c["Members"], json!([{"@odata.id": location}]));

    let r = send(reqwest::Method::DELETE, format!("{url}{location}"), None).await;
    assert_eq!(r.status(), 204);
    let r = send(reqwest::Method::GET, format!("{url}{location}"), None).await;
    assert_eq!(r.status(), 404);
    assert!(fleet.bmcs[0].state.subscriptions().is_empty());
}

#[tokio::test]
async fn dell_and_hpe_refuse_retry_policies_and_omit_the_format() {
    for vendor in [Vendor::Dell, Vendor::Hpe] {
        let fleet = one(vendor).await;
        let url = fleet.bmcs[0].url();
        let base = json!({"Destination": "https://127.0.0.1:9/e", "Protocol": "Redfish"});
        let mut with_policy = base.clone();
        with_policy["DeliveryRetryPolicy"] = json!("TerminateAfterRetries");
        let r = subscribe(&url, with_policy).await;
        assert_eq!(r.status(), 400, "{vendor}");
        assert_eq!(message_id(r).await, "Base.1.8.PropertyUnknown");
        let mut empty_types = base.clone();
        empty_types["ResourceTypes"] = json!([]);
        let r = subscribe(&url, empty_types).await;
        assert_eq!(r.status(), 400, "{vendor}");
        let mut with_format = base.clone();
        with_format["EventFormatType"] = json!("Event");
        let r = subscribe(&url, with_format).await;
        assert_eq!(r.status(), 201, "{vendor}");
        let location = r.headers()["location"].to_str().unwrap().to_owned();
        let v: Value = send(reqwest::Method::GET, format!("{url}{location}"), None)
            .await
            .json()
            .await
            .unwrap();
        assert!(v.get("EventFormatType").is_none(), "{vendor}: {v}");
    }
}

#[tokio::test]
async fn the_limit_refuses_more_and_a_reset_loses_every_subscription() {
    let fleet = one(Vendor::Dell).await;
    let bmc = &fleet.bmcs[0];
    let url = bmc.url();
    assert_eq!(EventKnobs::default().max_subscriptions, 8);
    bmc.state.set_event_knobs(EventKnobs {
        max_subscriptions: 2,
        ..EventKnobs::default()
    });
    let body = json!({"Destination": "https://127.0.0.1:9/e", "Protocol": "Redfish"});
    assert_eq!(subscribe(&url, body.clone()).await.status(), 201);
    assert_eq!(subscribe(&url, body.clone()).await.status(), 201);
    let full = subscribe(&url, body.clone()).await;
    assert_eq!(full.status(), 400);
    assert_eq!(
        message_id(full).await,
        "Base.1.8.CreateLimitReachedForResource"
    );
    assert_eq!(bmc.state.subscriptions().len(), 2);

    bmc.state.reset();
    assert!(bmc.state.subscriptions().is_empty());
    assert_eq!(subscribe(&url, body.clone()).await.status(), 201);
    // The same over the admin endpoint.
    let r = reqwest::Client::new()
        .post(format!("{url}/_sim/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(bmc.state.subscriptions().is_empty());

    let mut q = bmc.state.quirks();
    q.event_service_disabled = true;
    bmc.state.set_quirks(q);
    let r = subscribe(&url, body).await;
    assert_eq!(r.status(), 400);
    assert_eq!(message_id(r).await, "Base.1.8.ServiceDisabled");
}

#[tokio::test]
async fn events_are_pushed_with_the_context_and_headers() {
    let fleet = one(Vendor::Lenovo).await;
    let bmc = &fleet.bmcs[0];
    let url = bmc.url();
    let plain = Received::default();
    let tls = Received::default();
    let filtered = Received::default();
    let plain_url = destination(plain.clone()).await;
    let tls_url = tls_destination(tls.clone()).await;
    let filtered_url = destination(filtered.clone()).await;
    for (dest, ctx, extra) in [
        (&plain_url, "plain", json!({})),
        (&tls_url, "tls", json!({})),
        (&filtered_url, "platform", json!(["Platform"])),
    ] {
        let mut body = json!({
            "Destination": dest,
            "Protocol": "Redfish",
            "Context": ctx,
            "HttpHeaders": {"X-Ingot-Secret": format!("secret-{ctx}")},
        });
        if extra.is_array() {
            body["RegistryPrefixes"] = extra;
        }
        assert_eq!(subscribe(&url, body).await.status(), 201);
    }

    power_off(bmc).await;
    // The change is announced when it lands, after the power delay.
    wait_until("the power event", || {
        plain.bodies().len() == 1 && tls.bodies().len() == 1
    })
    .await;
    bmc.state.add_log("Critical", "CPU 1 machine check");
    wait_until("two events at each unfiltered destination", || {
        plain.bodies().len() >= 2 && tls.bodies().len() >= 2 && !filtered.bodies().is_empty()
    })
    .await;
    for (r, ctx) in [(&plain, "plain"), (&tls, "tls")] {
        let posts = r.posts.lock().unwrap().clone();
        for (headers, body) in &posts {
            assert_eq!(headers["x-ingot-secret"], format!("secret-{ctx}").as_str());
            assert_eq!(body["Context"], ctx);
        }
        let ids: Vec<&str> = posts
            .iter()
            .map(|(_, b)| b["Events"][0]["MessageId"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [
                "ResourceEvent.1.0.ResourceStatusChanged",
                "Platform.1.0.PlatformEvent"
            ],
            "{ctx}"
        );
        assert_eq!(
            posts[0].1["Events"][0]["Message"],
            "The system powered off."
        );
        assert_eq!(posts[1].1["Events"][0]["Message"], "CPU 1 machine check");
    }
    // RegistryPrefixes ["Platform"]: the power change is not sent. Every delivery counted once
    // its answer is back (after the destination recorded it).
    wait_until("five deliveries counted", || {
        bmc.state
            .counters
            .events_delivered
            .load(std::sync::atomic::Ordering::Relaxed)
            == 5
    })
    .await;
    let f = filtered.bodies();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0]["Events"][0]["MessageId"], "Platform.1.0.PlatformEvent");
}

#[tokio::test]
async fn failed_deliveries_are_retried_then_the_subscription_terminated() {
    let fleet = one(Vendor::Supermicro).await;
    let bmc = &fleet.bmcs[0];
    let url = bmc.url();
    bmc.state.set_event_knobs(EventKnobs {
        delivery_retry_attempts: 2,
        delivery_retry_interval: Duration::from_millis(100),
        ..EventKnobs::default()
    });
    // Fails once, then accepts: the retry delivers and the subscription stays.
    let flaky = Received::default();
    *flaky.fail_first.lock().unwrap() = 1;
    // Always fails: three attempts, then terminated.
    let broken = Received::default();
    *broken.fail_first.lock().unwrap() = usize::MAX;
    for (dest, ctx) in [
        (destination(flaky.clone()).await, "flaky"),
        (destination(broken.clone()).await, "broken"),
    ] {
        let body = json!({"Destination": dest, "Protocol": "Redfish", "Context": ctx});
        assert_eq!(subscribe(&url, body).await.status(), 201);
    }
    power_off(bmc).await;
    wait_until("the broken subscription terminated", || {
        bmc.state.terminated_subscriptions() == 1
    })
    .await;
    assert_eq!(broken.bodies().len(), 3, "one attempt and two retries");
    let left = bmc.state.subscriptions();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].context.as_deref(), Some("flaky"));
    wait_until("the flaky one delivered on its retry", || {
        flaky.bodies().len() == 2
    })
    .await;
    let f = flaky.bodies();
    assert_eq!(f[0], f[1], "the retry carries the same event");
    assert_eq!(f[0]["Context"], "flaky");
}
