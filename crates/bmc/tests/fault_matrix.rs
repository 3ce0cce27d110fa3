//! For every fault the emulator can inject: the client returns the right typed error within
//! its timeout, never panics, never holds more sessions than the BMC allows, and recovers
//! once the fault is cleared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use ingot_bmc::redfish::{RedfishClient, RedfishOptions, TlsOptions};
use ingot_bmc::*;
use ingot_bmc_sim::{BmcSpec, Fault, Fleet, FleetOptions, Vendor};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Timeout,
    Unauthorized,
    Unavailable,
    Malformed,
    Tls,
    SessionLimit,
    Ok,
}

fn matches<T>(e: &Result<T, BmcError>, want: Expect) -> bool {
    matches!(
        (e, want),
        (Ok(_), Expect::Ok)
            | (Err(BmcError::Timeout(_)), Expect::Timeout)
            | (Err(BmcError::Unauthorized), Expect::Unauthorized)
            | (
                Err(BmcError::Unavailable { status: 503 }),
                Expect::Unavailable
            )
            | (Err(BmcError::Malformed(_)), Expect::Malformed)
            | (Err(BmcError::Tls(_)), Expect::Tls)
            | (Err(BmcError::SessionLimit), Expect::SessionLimit)
    )
}

fn kind<T>(r: Result<T, BmcError>) -> Result<(), BmcError> {
    r.map(|_| ())
}

/// `(fault, expected on a fresh client, expected on a client that holds a session)`.
fn matrix() -> Vec<(Fault, Expect, Expect)> {
    vec![
        (Fault::Timeout, Expect::Timeout, Expect::Timeout),
        (
            Fault::Unauthorized,
            Expect::Unauthorized,
            Expect::Unauthorized,
        ),
        (Fault::Unavailable, Expect::Unavailable, Expect::Unavailable),
        (Fault::MalformedJson, Expect::Malformed, Expect::Malformed),
        (Fault::TlsError, Expect::Tls, Expect::Tls),
        // A full table refuses new logins; an existing session keeps working.
        (Fault::SessionFull, Expect::SessionLimit, Expect::Ok),
        (Fault::Slow { delay_ms: 300 }, Expect::Ok, Expect::Ok),
        (
            Fault::Slow { delay_ms: 10_000 },
            Expect::Timeout,
            Expect::Timeout,
        ),
    ]
}

#[tokio::test]
async fn every_fault_gives_its_typed_error() {
    let max_sessions = 2;
    let fleet = Fleet::start(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        Vendor::ALL
            .iter()
            .map(|v| BmcSpec {
                vendor: *v,
                max_sessions,
                ..BmcSpec::default()
            })
            .collect(),
    )
    .await
    .unwrap();
    let ca = fleet.tls.as_ref().unwrap().ca_pem.clone().into_bytes();
    let options = RedfishOptions {
        timeout: TIMEOUT,
        tls: TlsOptions {
            insecure: false,
            ca_bundle_pem: Some(ca),
            pinned_sha256: None,
        },
        ..RedfishOptions::default()
    };
    // Fresh client: the login path. Warm client: the authenticated request path.
    let bound = TIMEOUT * 4 + Duration::from_secs(2);
    for b in &fleet.bmcs {
        let ep = Endpoint::parse(&b.url(), None).unwrap();
        let new_client = || {
            RedfishClient::new(&ep, "admin", Password::new("password"), options.clone()).unwrap()
        };
        let warm = new_client();
        for (fault, fresh_expect, warm_expect) in matrix() {
            warm.power_state().await.expect("healthy before the fault");
            b.state.set_fault(Some(fault.clone()));
            let fresh = new_client();
            let got = tokio::time::timeout(bound, fresh.power_state())
                .await
                .unwrap_or_else(|_| panic!("{fault:?}: fresh client exceeded its timeout"));
            assert!(
                matches(&got, fresh_expect),
                "{} {fault:?} fresh: want {fresh_expect:?}, got {got:?}",
                b.state.profile.vendor
            );
            // TLS faults hit new connections only: drop pooled ones by using a new client
            // that shares nothing; the warm client reconnects when its pool is empty.
            let got = tokio::time::timeout(bound, warm.power_state())
                .await
                .unwrap_or_else(|_| panic!("{fault:?}: warm client exceeded its timeout"));
            let warm_ok = matches(&got, warm_expect)
                || (fault == Fault::TlsError && matches(&got, Expect::Ok));
            assert!(
                warm_ok,
                "{} {fault:?} warm: want {warm_expect:?}, got {got:?}",
                b.state.profile.vendor
            );
            // Every other operation fails the same way (Dell profile; the others share the code).
            if b.state.profile.vendor == Vendor::Dell {
                let boot = BootRequest {
                    device: BootDevice::Pxe,
                    persistent: false,
                    mode: None,
                };
                let results = [
                    ("inventory", kind(warm.inventory().await)),
                    ("event_log", kind(warm.event_log().await)),
                    ("boot_override", kind(warm.boot_override().await)),
                    (
                        "set_boot_override",
                        kind(warm.set_boot_override(boot).await),
                    ),
                    ("power on", kind(warm.power(PowerAction::On).await)),
                ];
                for (op, got) in results {
                    let ok = matches(&got, warm_expect)
                        || (fault == Fault::TlsError && matches(&got, Expect::Ok));
                    assert!(ok, "{fault:?} {op}: want {warm_expect:?}, got {got:?}");
                }
            }
            b.state.set_fault(None);
            drop(fresh);
            // Recovers once the fault is gone.
            let again = tokio::time::timeout(bound, warm.power_state()).await;
            assert!(
                matches!(again, Ok(Ok(PowerState::On))),
                "{fault:?}: no recovery: {again:?}"
            );
            let s = b.state.snapshot();
            assert!(
                s.peak_sessions <= max_sessions as u64,
                "{fault:?}: {} sessions open at peak, BMC allows {max_sessions}",
                s.peak_sessions
            );
            // The dropped client logs out in the background: only the warm session remains.
            common::poll_until("no leaked session", Duration::from_secs(5), || async {
                (b.state.snapshot().sessions <= 1).then_some(())
            })
            .await;
        }
        warm.close().await.unwrap();
    }
}

#[tokio::test]
async fn unreachable_bmc_is_typed() {
    let port = common::free_port();
    let ep = Endpoint::parse(&format!("http://127.0.0.1:{port}"), None).unwrap();
    let c = RedfishClient::new(
        &ep,
        "admin",
        Password::new("password"),
        RedfishOptions {
            timeout: TIMEOUT,
            ..RedfishOptions::default()
        },
    )
    .unwrap();
    let err = c.power_state().await.unwrap_err();
    assert!(matches!(err, BmcError::Unreachable(_)), "{err:?}");
    assert!(!format!("{err:?}").contains("password"));
}
