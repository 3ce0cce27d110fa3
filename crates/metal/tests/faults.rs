//! Each fault knob of the emulator, and how the client and provider live with it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ingot_metal::equinix::RetryPolicy;
use ingot_metal::equinix::wire::DeviceFilter;
use ingot_metal::{BareMetalCloud, CapacityLevel, Error, ServerState};
use ingot_metal_sim::{EndpointFault, Faults, PlanMetro, RateLimitBurst};

fn endpoint(op: &str, f: EndpointFault) -> Faults {
    Faults {
        endpoints: [(op.to_string(), f)].into_iter().collect(),
        ..Faults::default()
    }
}

#[tokio::test]
async fn server_errors_on_idempotent_calls_are_retried() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    let s = cloud
        .create_server(&ipxe_server("retry-get"))
        .await
        .unwrap();
    srv.sim().set_faults(endpoint(
        "findDeviceById",
        EndpointFault {
            error_count: 2,
            status: Some(503),
            ..EndpointFault::default()
        },
    ));
    srv.sim().reset_metrics();
    let before = cloud.client().stats().retries();
    let got = cloud.get_server(&s.id).await.unwrap();
    assert_eq!(got.id, s.id);
    let m = srv.sim().metrics();
    assert_eq!(m.requests("findDeviceById"), 3);
    assert_eq!(m.endpoints["findDeviceById"].responses.get(&503), Some(&2));
    assert_eq!(cloud.client().stats().retries() - before, 2);
}

#[tokio::test]
async fn retries_are_bounded_and_end_in_a_transient_error() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    let s = cloud
        .create_server(&ipxe_server("always-failing"))
        .await
        .unwrap();
    srv.sim().set_faults(endpoint(
        "*",
        EndpointFault {
            error_rate: 1.0,
            ..EndpointFault::default()
        },
    ));
    srv.sim().reset_metrics();
    let err = cloud.get_server(&s.id).await.unwrap_err();
    assert!(matches!(err, Error::Transient { .. }), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(
        srv.sim().metrics().requests("findDeviceById"),
        4,
        "max_attempts of the policy"
    );
}

#[tokio::test]
async fn a_random_error_rate_is_absorbed_by_retries() {
    let srv = start(config()).await;
    let c = client(&srv);
    let cloud = cloud(&srv);
    let s = cloud.create_server(&ipxe_server("flaky")).await.unwrap();
    srv.sim().set_faults(endpoint(
        "findDeviceById",
        EndpointFault {
            error_rate: 0.2,
            ..EndpointFault::default()
        },
    ));
    srv.sim().reset_metrics();
    for _ in 0..40 {
        c.get_device(&s.id, &[]).await.unwrap();
    }
    let m = srv.sim().metrics();
    let faults = m.endpoints["findDeviceById"].faults;
    assert!(faults > 0, "the seeded rate injected errors");
    assert_eq!(
        m.requests("findDeviceById"),
        40 + faults,
        "one retry per injected error"
    );
    assert_eq!(c.stats().retries(), faults);
}

#[tokio::test]
async fn a_failed_create_is_not_retried_blindly_by_the_client() {
    let srv = start(config()).await;
    let c = client(&srv);
    srv.sim().set_faults(endpoint(
        "createDevice",
        EndpointFault {
            error_count: 1,
            ..EndpointFault::default()
        },
    ));
    let req = ingot_metal::equinix::wire::DeviceCreateRequest {
        metro: "sv".into(),
        plan: "c3.small.x86".into(),
        operating_system: "ubuntu_24_04".into(),
        hostname: Some("raw".into()),
        ..Default::default()
    };
    assert!(matches!(
        c.create_device(PROJECT, &req).await,
        Err(Error::Transient { .. })
    ));
    assert_eq!(
        srv.sim().metrics().requests("createDevice"),
        1,
        "POST is not retried on 5xx"
    );

    // The provider looks, finds nothing, and creates once more.
    srv.sim().set_faults(endpoint(
        "createDevice",
        EndpointFault {
            error_count: 1,
            ..EndpointFault::default()
        },
    ));
    let cloud = cloud(&srv);
    let s = cloud
        .create_server(&ipxe_server("after-500"))
        .await
        .unwrap();
    assert_eq!(cloud.list_servers(OWNER).await.unwrap().len(), 1);
    assert_eq!(cloud.list_servers(OWNER).await.unwrap()[0].id, s.id);
}

#[tokio::test]
async fn a_create_whose_response_is_lost_does_not_make_a_second_device() {
    let srv = start(config()).await;
    let mut faults = endpoint(
        "createDevice",
        EndpointFault {
            lose_response_count: 1,
            ..EndpointFault::default()
        },
    );
    faults.hang_ms = Some(8_000);
    srv.sim().set_faults(faults);
    let c = client_with(&srv, TOKEN, Duration::from_millis(1_500), fast_retry());
    let cloud = ingot_metal::equinix::EquinixMetal::new(c.clone(), PROJECT);
    let s = cloud
        .create_server(&ipxe_server("lost-answer"))
        .await
        .unwrap();
    assert_eq!(s.hostname, "lost-answer");
    assert_eq!(srv.sim().device_count(PROJECT), 1);
    assert_eq!(
        srv.sim().metrics().requests("createDevice"),
        1,
        "resolved by looking, not by creating again"
    );
    assert!(c.stats().timeouts() >= 1);
    // And a later reconcile adopts it too.
    assert_eq!(
        cloud
            .create_server(&ipxe_server("lost-answer"))
            .await
            .unwrap()
            .id,
        s.id
    );
    assert_eq!(srv.sim().device_count(PROJECT), 1);
}

#[tokio::test]
async fn rate_limit_bursts_honour_retry_after_and_reset() {
    let srv = start(config()).await;
    let c = client(&srv);
    srv.sim().set_faults(Faults {
        rate_limit_burst: Some(RateLimitBurst {
            count: 2,
            retry_after_secs: Some(1),
            reset_in_secs: 1,
        }),
        ..Faults::default()
    });
    let list = c
        .list_devices(PROJECT, &DeviceFilter::default())
        .await
        .unwrap();
    assert!(list.is_empty());
    assert_eq!(c.stats().rate_limited(), 2);
    let m = srv.sim().metrics();
    assert_eq!(
        m.endpoints["findProjectDevices"].responses.get(&429),
        Some(&2)
    );
    assert_eq!(
        m.endpoints["findProjectDevices"].responses.get(&200),
        Some(&1)
    );

    // Without Retry-After the client reads X-RateLimit-Reset; a POST is retried too (429 means
    // nothing was done).
    srv.sim().set_faults(Faults {
        rate_limit_burst: Some(RateLimitBurst {
            count: 1,
            retry_after_secs: None,
            reset_in_secs: 1,
        }),
        ..Faults::default()
    });
    let cloud = ingot_metal::equinix::EquinixMetal::new(c.clone(), PROJECT);
    cloud.ensure_vlan("sv", 1500, "").await.unwrap();
    assert_eq!(c.stats().rate_limited(), 3);
}

#[tokio::test]
async fn a_rate_limit_longer_than_the_budget_is_reported() {
    let srv = start(config()).await;
    let retry = RetryPolicy {
        max_rate_limit_wait: Duration::from_secs(1),
        ..fast_retry()
    };
    let c = client_with(&srv, TOKEN, Duration::from_secs(5), retry);
    srv.sim().set_faults(Faults {
        rate_limit_burst: Some(RateLimitBurst {
            count: 10,
            retry_after_secs: Some(30),
            reset_in_secs: 30,
        }),
        ..Faults::default()
    });
    match c.list_plans().await {
        Err(Error::RateLimited { retry_after }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(30)))
        }
        other => panic!("expected rate limited, got {other:?}"),
    }
    assert_eq!(srv.sim().metrics().total_requests, 1);
}

#[tokio::test]
async fn added_latency_beyond_the_timeout_fails_idempotent_calls_after_retries() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    let s = cloud.create_server(&ipxe_server("slow")).await.unwrap();
    srv.sim().set_faults(endpoint(
        "findDeviceById",
        EndpointFault {
            latency_ms: 2_000,
            ..EndpointFault::default()
        },
    ));
    let retry = RetryPolicy {
        max_attempts: 2,
        ..fast_retry()
    };
    let c = client_with(&srv, TOKEN, Duration::from_millis(200), retry);
    let err = c.get_device(&s.id, &[]).await.unwrap_err();
    assert!(matches!(err, Error::Transient { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert_eq!(c.stats().timeouts(), 2);
    // Global latency below the timeout only slows things down.
    srv.sim().set_faults(Faults {
        latency_ms: 50,
        ..Faults::default()
    });
    let patient = client_with(&srv, TOKEN, Duration::from_secs(10), fast_retry());
    assert_eq!(patient.get_device(&s.id, &[]).await.unwrap().id, s.id);
    assert_eq!(patient.stats().timeouts(), 0);
}

#[tokio::test]
async fn exhausted_capacity_is_a_typed_error() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    srv.sim().set_faults(Faults {
        capacity_exhausted: vec![PlanMetro {
            plan: "c3.small.x86".into(),
            metro: "sv".into(),
        }],
        ..Faults::default()
    });
    let err = cloud
        .create_server(&ipxe_server("no-stock"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoCapacity { .. }), "{err:?}");
    assert_eq!(err.kind(), "no_capacity");
    assert_eq!(
        cloud.capacity("c3.small.x86", "sv").await.unwrap(),
        CapacityLevel::Unavailable
    );
    assert_eq!(
        cloud.capacity("c3.small.x86", "da").await.unwrap(),
        CapacityLevel::Normal
    );
    let mut elsewhere = ipxe_server("in-stock");
    elsewhere.location = "da".into();
    cloud.create_server(&elsewhere).await.unwrap();
}

#[tokio::test]
async fn a_device_can_fail_provisioning_vanish_or_delete_slowly() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    srv.sim().set_faults(Faults {
        fail_provisioning: vec!["doomed".into()],
        slow_delete_ms: Some(600_000),
        ..Faults::default()
    });
    let doomed = cloud.create_server(&ipxe_server("doomed")).await.unwrap();
    assert_eq!(
        cloud.get_server(&doomed.id).await.unwrap().state,
        ServerState::Failed
    );
    assert!(
        srv.sim().boot_record(&doomed.id).is_none(),
        "a failed device never booted"
    );

    let ghost = cloud.create_server(&ipxe_server("ghost")).await.unwrap();
    assert!(srv.sim().vanish(&ghost.id));
    assert!(
        cloud
            .get_server(&ghost.id)
            .await
            .unwrap_err()
            .is_not_found()
    );
    cloud.delete_server(&ghost.id).await.unwrap();

    let slow = cloud
        .create_server(&ipxe_server("slow-delete"))
        .await
        .unwrap();
    cloud.delete_server(&slow.id).await.unwrap();
    assert_eq!(
        cloud.get_server(&slow.id).await.unwrap().state,
        ServerState::Deprovisioning
    );
    assert_eq!(
        cloud.find_server(OWNER, "slow-delete").await.unwrap(),
        None,
        "a device being deleted is not adopted"
    );
    // Deleting again while it deprovisions is fine.
    cloud.delete_server(&slow.id).await.unwrap();
    srv.sim().update_faults(|f| f.slow_delete_ms = None);
    assert!(cloud.get_server(&slow.id).await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn faults_and_counters_over_the_admin_endpoints() {
    let srv = start(config()).await;
    let http = reqwest::Client::new();
    let faults = serde_json::json!({
        "endpoints": {"findPlans": {"error_count": 1, "status": 502}},
        "latency_ms": 0
    });
    let r = http
        .put(format!("{}/faults", srv.admin_url()))
        .json(&faults)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let bad = http
        .put(format!("{}/faults", srv.admin_url()))
        .json(&serde_json::json!({"nonsense": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    let got: Faults = http
        .get(format!("{}/faults", srv.admin_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got.endpoints["findPlans"].error_count, 1);

    let c = client(&srv);
    c.list_plans().await.unwrap();
    let m: ingot_metal_sim::Metrics = http
        .get(format!("{}/metrics", srv.admin_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m.requests("findPlans"), 2);
    assert_eq!(m.endpoints["findPlans"].responses.get(&502), Some(&1));
    assert_eq!(m.faults(), 1);
    let text = http
        .get(format!("http://{}/metrics", srv.addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("ingot_sim_metal_requests_total{operation=\"findPlans\"} 2"),
        "{text}"
    );

    let s = cloud(&srv)
        .create_server(&ipxe_server("to-vanish"))
        .await
        .unwrap();
    let r = http
        .post(format!("{}/devices/{}/vanish", srv.admin_url(), s.id))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(c.get_device(&s.id, &[]).await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn create_missing_server_also_resolves_a_lost_answer_by_looking() {
    let srv = start(config()).await;
    let mut faults = endpoint(
        "createDevice",
        EndpointFault {
            lose_response_count: 1,
            ..EndpointFault::default()
        },
    );
    faults.hang_ms = Some(8_000);
    srv.sim().set_faults(faults);
    let c = client_with(&srv, TOKEN, Duration::from_millis(1_500), fast_retry());
    let cloud = ingot_metal::equinix::EquinixMetal::new(c, PROJECT);
    assert!(cloud.list_servers(OWNER).await.unwrap().is_empty());
    let s = cloud
        .create_missing_server(&ipxe_server("listed-lost"))
        .await
        .unwrap();
    assert_eq!(s.hostname, "listed-lost");
    assert_eq!(srv.sim().device_count(PROJECT), 1);
    let m = srv.sim().metrics();
    assert_eq!(m.requests("createDevice"), 1);
    // One list before, one look after the lost answer: no lookup before the create.
    assert_eq!(m.requests("findProjectDevices"), 2);
}

#[tokio::test]
async fn x_ratelimit_remaining_zero_holds_the_client_until_the_reset() {
    let srv = start(config()).await;
    srv.sim().set_faults(Faults {
        server_rate_limit: Some(ingot_metal_sim::ServerRateLimit {
            limit: 4,
            window_secs: 1,
        }),
        ..Faults::default()
    });
    // No client-side limit: only the API's headers can keep it under the server's limit.
    let c = client(&srv);
    for _ in 0..10 {
        c.list_metros().await.unwrap();
    }
    let m = srv.sim().metrics();
    assert_eq!(m.requests("findMetros"), 10);
    assert_eq!(
        m.endpoints["findMetros"].responses.get(&429),
        None,
        "the client waited for the reset"
    );
    assert_eq!(c.stats().rate_limited(), 0);

    // Two clients that do not share a limiter can overrun the limit between them: a 429 with
    // Retry-After makes the loser wait, and every call still succeeds.
    let other = client(&srv);
    tokio::join!(
        async {
            for _ in 0..6 {
                c.list_metros().await.unwrap();
            }
        },
        async {
            for _ in 0..6 {
                other.list_metros().await.unwrap();
            }
        }
    );
    assert_eq!(
        srv.sim().metrics().endpoints["findMetros"]
            .responses
            .get(&200),
        Some(&22)
    );
}

#[tokio::test]
async fn the_admin_device_listing_shows_boot_counts_outside_the_counters() {
    let srv = start(config()).await;
    let http = reqwest::Client::new();
    let s = cloud(&srv)
        .create_server(&ipxe_server("listed"))
        .await
        .unwrap();
    let before = srv.sim().metrics().total_requests;
    let listing: serde_json::Value = http
        .get(format!("{}/devices?project={PROJECT}", srv.admin_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let devices = listing["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{listing}");
    assert_eq!(devices[0]["device"]["id"], s.id.as_str());
    assert_eq!(devices[0]["device"]["hostname"], "listed");
    // Instant timings: the listing moved the device to active, which recorded its first boot.
    assert_eq!(devices[0]["device"]["state"], "active");
    assert_eq!(devices[0]["boot_count"], 1);
    let other: serde_json::Value = http
        .get(format!(
            "{}/devices?project={OTHER_PROJECT}",
            srv.admin_url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(other["devices"].as_array().unwrap().len(), 0);
    assert_eq!(
        srv.sim().metrics().total_requests,
        before,
        "admin reads are not API traffic"
    );
}

/// Everything the client reports to its observer, in order.
#[derive(Default)]
struct Recorder {
    seen: std::sync::Mutex<Vec<(&'static str, String)>>,
    waited: std::sync::Mutex<Duration>,
}

impl ingot_metal::MetalObserver for Recorder {
    fn call(&self, operation: &'static str, outcome: &'static str, _took: Duration) {
        self.seen
            .lock()
            .unwrap()
            .push(("call", format!("{operation} {outcome}")));
    }
    fn retry(&self, operation: &'static str, reason: &'static str) {
        self.seen
            .lock()
            .unwrap()
            .push(("retry", format!("{operation} {reason}")));
    }
    fn rate_limited(&self, operation: &'static str) {
        self.seen
            .lock()
            .unwrap()
            .push(("429", operation.to_owned()));
    }
    fn rate_limit_wait(&self, waited: Duration) {
        *self.waited.lock().unwrap() += waited;
    }
}

#[tokio::test]
async fn the_observer_sees_each_call_s_outcome_its_retries_429s_and_limiter_waits() {
    let srv = start(config()).await;
    let recorder = std::sync::Arc::new(Recorder::default());
    let c = client(&srv).with_observer(ingot_metal::Observer::new(recorder.clone()));
    srv.sim().set_faults(Faults {
        rate_limit_burst: Some(RateLimitBurst {
            count: 2,
            retry_after_secs: Some(1),
            reset_in_secs: 1,
        }),
        ..Faults::default()
    });
    c.list_devices(PROJECT, &DeviceFilter::default())
        .await
        .unwrap();
    srv.sim().set_faults(Faults::default());
    let missing = c
        .get_device("00000000-0000-4000-8000-000000000000", &[])
        .await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
    let seen = recorder.seen.lock().unwrap().clone();
    let expected: Vec<(&str, String)> = vec![
        ("429", "findProjectDevices".into()),
        ("retry", "findProjectDevices rate_limited".into()),
        ("429", "findProjectDevices".into()),
        ("retry", "findProjectDevices rate_limited".into()),
        ("call", "findProjectDevices ok".into()),
        ("call", "findDeviceById not_found".into()),
    ];
    assert_eq!(seen, expected);
    // Each 429 asked for a second: the limiter held the next request for it.
    let waited = *recorder.waited.lock().unwrap();
    assert!(waited >= Duration::from_millis(1_800), "{waited:?}");
}
