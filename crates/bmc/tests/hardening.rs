//! The BMC layer as a controller drives it unattended, against the emulators with faults and
//! quirks of real BMCs: busy BMCs during a cycle, weak ETags, failing collection members,
//! long logs, sessions that must never leak, Redfish that must not be mistaken for IPMI,
//! the fleet limit held per request, mutating calls never hedged or replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bmc_config, poll_until};
use ingot_bmc::ipmi::{IpmiConnector, IpmiOptions};
use ingot_bmc::manager::{BmcConfig, Connector, ManagerOptions, SessionManager};
use ingot_bmc::redfish::{RedfishClient, RedfishOptions};
use ingot_bmc::*;
use ingot_bmc_sim::{BmcSpec, Fault, Fleet, FleetOptions, Quirks, SimBmc, Vendor};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn options() -> RedfishOptions {
    RedfishOptions {
        timeout: Duration::from_secs(3),
        transition_timeout: Duration::from_secs(20),
        ..RedfishOptions::default()
    }
}

/// Without hedging, so that sessions created can be counted exactly.
fn unhedged() -> RedfishOptions {
    RedfishOptions {
        hedge_after: None,
        ..options()
    }
}

async fn one(spec: BmcSpec) -> Fleet {
    Fleet::start(FleetOptions::default(), vec![spec])
        .await
        .unwrap()
}

fn client(b: &SimBmc, options: RedfishOptions) -> RedfishClient {
    client_with(b, "password", options)
}

fn client_with(b: &SimBmc, password: &str, options: RedfishOptions) -> RedfishClient {
    let ep = Endpoint::parse(&b.url(), None).unwrap();
    RedfishClient::new(&ep, "admin", Password::new(password), options).unwrap()
}

/// The BMC leaves its next `n` requests unanswered (the fault is set now, before the caller
/// sends anything), then answers again.
fn lose_next(b: &SimBmc, n: u64) -> impl std::future::Future<Output = ()> + '_ {
    b.state.set_fault(Some(Fault::Timeout));
    let before = b.state.counters.requests.load(Ordering::Relaxed);
    async move {
        while b.state.counters.requests.load(Ordering::Relaxed) < before + n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        b.state.set_fault(None);
    }
}

#[tokio::test]
async fn cycle_emulation_waits_out_a_busy_bmc_and_always_sends_on() {
    // HPE iLO has no PowerCycle: ForceOff, wait for Off, On.
    let fleet = one(BmcSpec {
        vendor: Vendor::Hpe,
        power_delay: Duration::from_millis(1000),
        ..BmcSpec::default()
    })
    .await;
    let b = &fleet.bmcs[0];
    let c = Arc::new(client(b, options()));
    c.power_state().await.unwrap();
    let task = {
        let c = c.clone();
        tokio::spawn(async move { c.power(PowerAction::Cycle).await })
    };
    // As soon as ForceOff landed, the BMC answers 503 to everything for a while.
    poll_until("ForceOff sent", Duration::from_secs(10), || async {
        (!b.state.reset_requests().is_empty()).then_some(())
    })
    .await;
    b.state.set_fault(Some(Fault::Unavailable));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    b.state.set_fault(None);
    let outcome = task.await.unwrap().unwrap();
    assert_eq!(outcome.sent, vec!["ForceOff", "On"]);
    poll_until("back on", Duration::from_secs(10), || async {
        (b.state.snapshot().power_state == "On").then_some(())
    })
    .await;
    assert_eq!(b.state.reset_requests(), vec!["ForceOff", "On"]);
    c.close().await.unwrap();
}

#[tokio::test]
async fn cycle_emulation_sends_on_even_when_off_is_never_seen() {
    let fleet = one(BmcSpec {
        vendor: Vendor::Hpe,
        power_delay: Duration::from_millis(300),
        ..BmcSpec::default()
    })
    .await;
    let b = &fleet.bmcs[0];
    let c = Arc::new(client(
        b,
        RedfishOptions {
            transition_timeout: Duration::from_secs(2),
            ..options()
        },
    ));
    c.power_state().await.unwrap();
    let task = {
        let c = c.clone();
        tokio::spawn(async move { c.power(PowerAction::Cycle).await })
    };
    poll_until("ForceOff sent", Duration::from_secs(10), || async {
        (!b.state.reset_requests().is_empty()).then_some(())
    })
    .await;
    // The system path keeps failing past the transition deadline.
    b.state.set_quirks(Quirks {
        fail_paths: vec![("/redfish/v1/Systems/1".into(), 503)],
        ..Quirks::default()
    });
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err, BmcError::TransitionTimeout(_)), "{err:?}");
    assert_eq!(
        b.state.reset_requests(),
        vec!["ForceOff", "On"],
        "On was sent all the same"
    );
    b.state.set_quirks(Quirks::default());
    poll_until("back on", Duration::from_secs(10), || async {
        (b.state.snapshot().power_state == "On").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_weak_etag_is_not_sent_again_after_412() {
    let fleet = one(BmcSpec::default()).await;
    let b = &fleet.bmcs[0];
    b.state.set_quirks(Quirks {
        strong_etag_compare: true,
        ..Quirks::default()
    });
    let c = client(b, options());
    let got = c
        .set_boot_override(BootRequest {
            device: BootDevice::Pxe,
            persistent: false,
            mode: None,
        })
        .await
        .unwrap();
    assert_eq!(got.device, BootDevice::Pxe);
    assert!(got.enabled);
    assert_eq!(b.state.snapshot().boot.target, "Pxe");
    c.close().await.unwrap();
}

#[tokio::test]
async fn one_failing_member_does_not_empty_the_inventory_list() {
    let fleet = one(BmcSpec::default()).await;
    let b = &fleet.bmcs[0];
    let dimm = "/redfish/v1/Systems/System.Embedded.1/Memory/DIMM.Socket.A3";
    b.state.set_quirks(Quirks {
        fail_paths: vec![(dimm.into(), 500)],
        ..Quirks::default()
    });
    let c = client(b, options());
    let inv = c.inventory().await.unwrap();
    assert_eq!(inv.memory.len(), b.state.profile.dimms as usize - 1);
    assert!(inv.memory.iter().all(|m| m.id != "DIMM.Socket.A3"));
    assert!(!inv.cpus.is_empty() && !inv.disks.is_empty());
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_long_log_is_read_in_top_skip_pages() {
    let fleet = one(BmcSpec::default()).await;
    let b = &fleet.bmcs[0];
    // 3 entries per page by default: more than 100 pages through nextLink alone.
    b.state.set_quirks(Quirks {
        log_page_size: Some(3),
        ..Quirks::default()
    });
    for i in 0..700 {
        b.state.add_log("OK", &format!("entry {i}"));
    }
    let c = client(b, options());
    let log = c.event_log().await.unwrap();
    assert_eq!(log.len(), 702);
    let mut ids: Vec<&str> = log.iter().map(|e| e.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 702, "no entry twice");
    c.close().await.unwrap();
}

#[tokio::test]
async fn the_login_error_body_never_reaches_the_error() {
    let fleet = one(BmcSpec::default()).await;
    let b = &fleet.bmcs[0];
    b.state.set_quirks(Quirks {
        echo_login_body: true,
        ..Quirks::default()
    });
    let secret = "Wr0ng-But-Secret";
    let c = client_with(b, secret, options());
    let err = c.power_state().await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(secret), "password in the error: {shown}");
    assert!(matches!(err, BmcError::Http { status: 400, .. }), "{err:?}");
}

#[tokio::test]
async fn a_relogin_deletes_the_old_session() {
    let fleet = one(BmcSpec::default()).await;
    let b = &fleet.bmcs[0];
    let c = client(b, unhedged());
    c.power_state().await.unwrap();
    // One 401 on a session that is still alive on the BMC.
    b.state.set_quirks(Quirks {
        spurious_401: 1,
        ..Quirks::default()
    });
    c.power_state().await.unwrap();
    assert_eq!(b.state.counters.sessions_created.load(Ordering::Relaxed), 2);
    poll_until("old session deleted", Duration::from_secs(5), || async {
        (b.state.open_sessions() == 1).then_some(())
    })
    .await;
    c.close().await.unwrap();
    assert_eq!(b.state.open_sessions(), 0);
}

#[tokio::test]
async fn relogins_back_off_when_every_new_session_is_refused() {
    let fleet = one(BmcSpec::default()).await;
    let b = &fleet.bmcs[0];
    let c = client(b, unhedged());
    c.power_state().await.unwrap();
    b.state.set_quirks(Quirks {
        reject_tokens: true,
        ..Quirks::default()
    });
    for _ in 0..10 {
        let err = c.power_state().await.unwrap_err();
        assert!(matches!(err, BmcError::Unauthorized), "{err:?}");
    }
    let created = b.state.counters.sessions_created.load(Ordering::Relaxed);
    assert!(
        created <= 2,
        "{created} sessions created for 10 refused calls"
    );
    // The first session's DELETE was refused like every token; the current one is closed.
    b.state.set_quirks(Quirks::default());
    c.close().await.unwrap();
    assert!(b.state.open_sessions() <= 1);
}

#[tokio::test]
async fn a_login_cancelled_by_its_caller_still_deletes_its_session() {
    let fleet = one(BmcSpec {
        latency: Duration::from_millis(400),
        ..BmcSpec::default()
    })
    .await;
    let b = &fleet.bmcs[0];
    let c = client(b, options());
    // The login POST is the first request and takes 400 ms: give up before its answer.
    let r = tokio::time::timeout(Duration::from_millis(200), c.power_state()).await;
    assert!(r.is_err(), "the call was meant to be cancelled");
    poll_until("login answered", Duration::from_secs(5), || async {
        (b.state.counters.sessions_created.load(Ordering::Relaxed) == 1).then_some(())
    })
    .await;
    poll_until("orphan session deleted", Duration::from_secs(5), || async {
        (b.state.open_sessions() == 0).then_some(())
    })
    .await;
    assert!(!c.has_session().await);
}

#[tokio::test]
async fn a_tls_error_means_redfish_is_there_and_ipmi_is_not_tried() {
    let fleet = Fleet::start(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        vec![BmcSpec::default()],
    )
    .await
    .unwrap();
    let url = fleet.bmcs[0].url();
    let port = fleet.bmcs[0].addr.port();
    // An IPMI BMC on the same port number (UDP) would answer a fallback.
    let mut icfg = ingot_ipmi_sim::FleetConfig::uniform(1, "password");
    icfg.bmcs[0].port = port;
    icfg.bmcs[0].power_on = true;
    let ipmi_fleet = ingot_ipmi_sim::serve(icfg).await.unwrap();
    let ipmi = Arc::new(IpmiConnector::new(IpmiOptions {
        timeout: Duration::from_millis(300),
        keepalive: None,
        ..IpmiOptions::default()
    }));
    let manager = SessionManager::with_connectors(
        ManagerOptions {
            redfish: options(),
            ..ManagerOptions::default()
        },
        vec![ipmi.clone() as Arc<dyn Connector>],
    );
    // No CA given: the emulator's certificate is not trusted.
    let cfg = bmc_config(&url);
    let bmc = manager.bmc(cfg.clone());
    for _ in 0..2 {
        let err = bmc.power_state().await.unwrap_err();
        assert_eq!(err.kind(), "tls", "{err:?}");
    }
    assert_eq!(manager.detected_protocol(&cfg), None, "nothing remembered");
    assert_eq!(ipmi.stats().connects.load(Ordering::Relaxed), 0);
    assert_eq!(ipmi_fleet.bmcs()[0].stats().sessions_opened, 0);
}

#[tokio::test]
async fn evicted_bmcs_are_logged_out() {
    let fleet = Fleet::uniform(FleetOptions::default(), 3, BmcSpec::default())
        .await
        .unwrap();
    let manager = SessionManager::new(ManagerOptions {
        redfish: options(),
        ..ManagerOptions::default()
    });
    let configs: Vec<BmcConfig> = fleet.bmcs.iter().map(|b| bmc_config(&b.url())).collect();
    let handles: Vec<_> = configs.iter().map(|c| manager.bmc(c.clone())).collect();
    for h in &handles {
        h.power_state().await.unwrap();
    }
    assert_eq!(manager.len(), 3);
    // Still referenced: nothing to evict.
    assert_eq!(manager.evict_unreferenced().await, 0);
    let mut handles = handles.into_iter();
    let first = handles.next().unwrap();
    drop(first);
    assert_eq!(manager.evict_unreferenced().await, 1);
    assert_eq!(fleet.bmcs[0].state.open_sessions(), 0);
    assert_eq!(fleet.bmcs[1].state.open_sessions(), 1);
    // A controller that knows its current set keeps only those.
    let keep = configs[2].endpoint.to_string();
    assert_eq!(manager.retain(|c| c.endpoint.to_string() == keep).await, 1);
    assert_eq!(fleet.bmcs[1].state.open_sessions(), 0);
    assert!(manager.evict(&configs[2]).await);
    assert_eq!(fleet.bmcs[2].state.open_sessions(), 0);
    assert!(manager.is_empty());
}

#[tokio::test]
async fn the_fleet_permit_is_not_held_through_a_cycle_wait() {
    let fleet = Fleet::start(
        FleetOptions::default(),
        vec![
            BmcSpec {
                vendor: Vendor::Hpe,
                power_delay: Duration::from_secs(3),
                ..BmcSpec::default()
            },
            BmcSpec::default(),
        ],
    )
    .await
    .unwrap();
    let manager = SessionManager::new(ManagerOptions {
        per_bmc_limit: 1,
        fleet_limit: 1,
        redfish: options(),
        ..ManagerOptions::default()
    });
    let slow = manager.bmc(bmc_config(&fleet.bmcs[0].url()));
    let other = manager.bmc(bmc_config(&fleet.bmcs[1].url()));
    slow.power_state().await.unwrap();
    other.power_state().await.unwrap();
    let cycle = tokio::spawn(async move { slow.power(PowerAction::Cycle).await });
    poll_until("ForceOff sent", Duration::from_secs(10), || async {
        (!fleet.bmcs[0].state.reset_requests().is_empty()).then_some(())
    })
    .await;
    // With the only fleet permit held for the whole cycle, this would wait for it.
    other.power_state().await.unwrap();
    assert!(!cycle.is_finished(), "the other BMC waited for the cycle");
    cycle.await.unwrap().unwrap();
}

/// The third request of a read is due as the first one times out (the hedge delay is at most
/// half the timeout): that timeout must not cancel it. The first two requests of each read are
/// lost; the third is answered.
#[tokio::test]
async fn a_copy_due_as_the_first_request_times_out_is_still_sent() {
    let fleet = one(BmcSpec {
        latency: Duration::from_millis(300),
        ..BmcSpec::default()
    })
    .await;
    let b = &fleet.bmcs[0];
    // Answers of 300 ms put the hedge delay at its cap, half the 1 s timeout: copies at
    // 0.5 s and 1 s, when the first request times out. Which of the two comes first is a race
    // of timers, so the case is played fifteen times: five rounds (ten copies, the budget a
    // fresh client has before it counts requests) on each of three clients.
    for client_no in 0..3 {
        let c = client(
            b,
            RedfishOptions {
                timeout: Duration::from_secs(1),
                ..options()
            },
        );
        c.power_state().await.unwrap();
        for round in 0..5 {
            let (read, ()) = tokio::join!(c.power_state(), lose_next(b, 2));
            assert_eq!(
                read.unwrap_or_else(|e| panic!("client {client_no}, round {round}: {e}")),
                PowerState::On
            );
        }
        c.close().await.unwrap();
    }
}

/// A read's hedged copy goes out under the read's own fleet permit: with a fleet limit of 1,
/// a copy that waited for a permit of its own would wait for its lost original's timeout.
#[tokio::test]
async fn a_hedged_copy_does_not_wait_for_a_fleet_permit() {
    let fleet = one(BmcSpec {
        latency: Duration::from_millis(100),
        ..BmcSpec::default()
    })
    .await;
    let b = &fleet.bmcs[0];
    let manager = SessionManager::new(ManagerOptions {
        per_bmc_limit: 1,
        fleet_limit: 1,
        redfish: options(),
        ..ManagerOptions::default()
    });
    let bmc = manager.bmc(bmc_config(&b.url()));
    bmc.power_state().await.unwrap();
    // The next request is never answered; its copy (some 150 ms later, as the BMC answers
    // steadily in 100 ms) is.
    b.state.set_fault(Some(Fault::Timeout));
    let before = b.state.counters.requests.load(Ordering::Relaxed);
    let started = std::time::Instant::now();
    let read = tokio::spawn(async move { bmc.power_state().await });
    while b.state.counters.requests.load(Ordering::Relaxed) == before {
        assert!(started.elapsed() < Duration::from_secs(5), "no request");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    b.state.set_fault(None);
    assert_eq!(read.await.unwrap().unwrap(), PowerState::On);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the read took {took:?} (the request timeout is 3 s)"
    );
    assert!(manager.redfish_stats().hedged.load(Ordering::Relaxed) >= 1);
}

#[tokio::test]
async fn a_read_survives_its_first_three_requests_lost() {
    let fleet = one(BmcSpec {
        latency: Duration::from_millis(50),
        ..BmcSpec::default()
    })
    .await;
    let b = &fleet.bmcs[0];
    let c = client(
        b,
        RedfishOptions {
            timeout: Duration::from_secs(1),
            ..options()
        },
    );
    c.power_state().await.unwrap();
    let before = b.state.counters.requests.load(Ordering::Relaxed);
    let (read, ()) = tokio::join!(c.power_state(), lose_next(b, 3));
    assert_eq!(read.unwrap(), PowerState::On, "the third copy answered");
    assert_eq!(
        b.state.counters.requests.load(Ordering::Relaxed),
        before + 4
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn reads_are_hedged_and_mutating_calls_never_are() {
    // Copies go out at 250 and 500 ms, well before the answer at 600 ms, and the next would
    // be due at 750 ms: no copy is sent as the answer arrives, where it could reach the BMC
    // after the request count below is read and be taken for a copy of the power call.
    let fleet = one(BmcSpec {
        latency: Duration::from_millis(600),
        power_delay: Duration::from_millis(100),
        ..BmcSpec::default()
    })
    .await;
    let b = &fleet.bmcs[0];
    let c = client(
        b,
        RedfishOptions {
            hedge_after: Some(Duration::from_millis(250)),
            ..options()
        },
    );
    assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    assert!(c.stats().hedged.load(Ordering::Relaxed) > 0, "reads hedged");
    let before = b.state.counters.requests.load(Ordering::Relaxed);
    let hedged = c.stats().hedged.load(Ordering::Relaxed);
    let sessions = b.state.counters.sessions_created.load(Ordering::Relaxed);
    c.power(PowerAction::Off).await.unwrap();
    assert_eq!(b.state.reset_requests(), vec!["ForceOff"], "sent once");
    // The power call is one (hedged) GET of the system and one POST.
    let after = b.state.counters.requests.load(Ordering::Relaxed);
    let gets = c.stats().hedged.load(Ordering::Relaxed) - hedged;
    assert_eq!(after - before, 2 + gets, "only reads were doubled");
    assert_eq!(
        b.state.counters.sessions_created.load(Ordering::Relaxed),
        sessions
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn ipmi_mutating_commands_are_never_hedged() {
    let mut icfg = ingot_ipmi_sim::FleetConfig::uniform(1, "password");
    icfg.bmcs[0].power_on = true;
    let fleet = ingot_ipmi_sim::serve(icfg).await.unwrap();
    let handle = &fleet.bmcs()[0];
    handle.set_faults(ingot_ipmi_sim::Faults {
        delay: Duration::from_millis(250),
        ..ingot_ipmi_sim::Faults::default()
    });
    let mut cfg = bmc_config(&handle.addr().to_string());
    cfg.protocol = Some(Protocol::Ipmi);
    let bmc = ingot_bmc::ipmi::IpmiBmc::connect(
        &cfg,
        &IpmiOptions {
            timeout: Duration::from_secs(1),
            hedge_after: Some(Duration::from_millis(100)),
            keepalive: None,
            ..IpmiOptions::default()
        },
    )
    .await
    .unwrap();
    let before = handle.stats().commands.len();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);
    let reads = handle.stats().commands.len() - before;
    assert!(reads >= 2, "the read was hedged ({reads} received)");
    bmc.power(PowerAction::Cycle).await.unwrap();
    let stats = handle.stats();
    assert_eq!(stats.chassis_controls, vec![0x02]);
    let controls = stats
        .commands
        .iter()
        .filter(|c| **c == (0x00, 0x02))
        .count();
    assert_eq!(controls, 1, "the chassis control was sent once");
    bmc.close().await.unwrap();
}

#[tokio::test]
async fn an_unanswered_chassis_control_is_not_repeated_and_the_state_is_read_again() {
    let mut icfg = ingot_ipmi_sim::FleetConfig::uniform(1, "password");
    icfg.bmcs[0].power_on = true;
    let fleet = ingot_ipmi_sim::serve(icfg).await.unwrap();
    let handle = &fleet.bmcs()[0];
    let mut cfg = bmc_config(&handle.addr().to_string());
    cfg.protocol = Some(Protocol::Ipmi);
    let bmc = ingot_bmc::ipmi::IpmiBmc::connect(
        &cfg,
        &IpmiOptions {
            timeout: Duration::from_millis(200),
            retries: 1,
            keepalive: None,
            ..IpmiOptions::default()
        },
    )
    .await
    .unwrap();
    // The BMC carries the power cycle out; its answer is lost.
    handle.set_faults(ingot_ipmi_sim::Faults {
        mute_commands: vec![(0x00, 0x02)],
        ..ingot_ipmi_sim::Faults::default()
    });
    let err = bmc.power(PowerAction::Cycle).await.unwrap_err();
    assert_eq!(err.kind(), "timeout", "{err:?}");
    let stats = handle.stats();
    assert_eq!(stats.chassis_controls, vec![0x02], "sent once");
    let control = stats
        .commands
        .iter()
        .position(|c| *c == (0x00, 0x02))
        .unwrap();
    assert!(
        stats.commands[control..].contains(&(0x00, 0x01)),
        "Get Chassis Status after the timeout: {:?}",
        stats.commands
    );
    assert_eq!(stats.sessions_opened, 1);
    bmc.close().await.unwrap();
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    // A fleet polled every few minutes must not hold a connection per BMC between polls.
    let fleet = one(BmcSpec::default()).await;
    let b = &fleet.bmcs[0];
    let open = || b.state.counters.connections_open.load(Ordering::Relaxed);
    let c = client(
        b,
        RedfishOptions {
            idle_connection_timeout: Duration::from_millis(400),
            ..options()
        },
    );
    c.power_state().await.unwrap();
    c.power_state().await.unwrap();
    assert_eq!(open(), 1, "one connection carries an operation's requests");
    poll_until(
        "the idle connection closed",
        Duration::from_secs(5),
        || async { (open() == 0).then_some(()) },
    )
    .await;
    // The session outlives the connection: the next read needs no login.
    let logins = b.state.counters.sessions_created.load(Ordering::Relaxed);
    c.power_state().await.unwrap();
    assert_eq!(
        b.state.counters.sessions_created.load(Ordering::Relaxed),
        logins
    );
}
