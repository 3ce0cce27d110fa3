//! The fault matrix: for every fault the emulator can inject, the client
//! returns the right typed error (or recovers) within its own worst-case
//! bound, never panics, and never makes the BMC hold more sessions than it
//! allows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::future::Future;
use std::time::Duration;

use common::*;
use ingot_ipmi::{CipherSuite, Client, Config, Error};
use ingot_ipmi_sim::{BmcHandle, Faults, FleetConfig, serve};

const PW: &str = "fault-pass";

fn fast(bmc: &BmcHandle, suite: CipherSuite) -> Config {
    let mut c = config(bmc.addr(), "admin", PW, &[suite]);
    c.timeout = Duration::from_millis(250);
    c.retries = 2;
    c
}

/// Run `f` and fail the test if it outlives the configuration's bound.
async fn bounded<T>(cfg: &Config, f: impl Future<Output = T>) -> T {
    let bound = cfg.worst_case() + Duration::from_secs(1);
    match tokio::time::timeout(bound, f).await {
        Ok(v) => v,
        Err(_) => panic!("call outlived its bound of {bound:?}"),
    }
}

/// Connect, retrying transient refusals (as the controllers do) until `within`.
async fn connect_retrying_transient(cfg: &Config, within: Duration) -> Client {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match bounded(cfg, Client::connect(cfg.clone())).await {
            Ok(client) => return client,
            Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("connect: {e:?}"),
        }
    }
}

fn assert_within_limit(bmc: &BmcHandle, max: usize) {
    let s = bmc.stats();
    assert!(
        s.peak_sessions <= max,
        "BMC held {} sessions, allows {max}",
        s.peak_sessions
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_matrix() {
    let mut fleet_cfg = FleetConfig::uniform(2, PW);
    for b in &mut fleet_cfg.bmcs {
        b.max_sessions = 2;
        b.session_timeout = Duration::from_millis(1500);
    }
    let fleet = serve(fleet_cfg).await.unwrap();
    for (suite, bmc) in [CipherSuite::Suite3, CipherSuite::Suite17]
        .into_iter()
        .zip(fleet.bmcs())
    {
        let max = 2;

        // Unresponsive BMC → Timeout, from connect and from a live session.
        bmc.set_faults(Faults {
            unresponsive: true,
            ..Faults::default()
        });
        let cfg = fast(bmc, suite);
        match bounded(&cfg, Client::connect(cfg.clone())).await {
            Err(Error::Timeout {
                phase: "channel authentication capabilities",
                attempts: 3,
                ..
            }) => {}
            other => panic!("{suite}: unresponsive: {other:?}"),
        }
        bmc.set_faults(Faults::default());
        let client = bounded(&cfg, Client::connect(cfg.clone())).await.unwrap();
        bmc.set_faults(Faults {
            unresponsive: true,
            ..Faults::default()
        });
        match bounded(&cfg, client.device_id()).await {
            Err(Error::Timeout { .. }) => {}
            other => panic!("{suite}: unresponsive mid-session: {other:?}"),
        }
        bmc.set_faults(Faults::default());
        // Recovers once the BMC answers again (the stale session was dropped
        // and replaced; never more than one of ours at a time).
        bounded(&cfg, client.device_id()).await.unwrap();
        client.close().await;
        assert_within_limit(bmc, max);

        // The session whose Close Session was lost while the BMC was silent
        // stays until the BMC's idle timer expires it.
        assert!(bmc.stats().sessions <= 1);
        assert!(eventually(Duration::from_secs(5), || bmc.stats().sessions == 0).await);
        let lingering = 0;

        // Wrong password → AuthFailed, and the half-open session is released.
        bmc.set_faults(Faults {
            wrong_password: true,
            ..Faults::default()
        });
        match bounded(&cfg, Client::connect(cfg.clone())).await {
            Err(Error::AuthFailed(_)) => {}
            other => panic!("{suite}: wrong password: {other:?}"),
        }
        assert!(eventually(Duration::from_secs(2), || bmc.stats().sessions == lingering).await);
        bmc.set_faults(Faults::default());
        let mut bad = cfg.clone();
        bad.password = "guess".into();
        assert!(matches!(
            bounded(&bad, Client::connect(bad.clone())).await,
            Err(Error::AuthFailed(_))
        ));
        let mut unknown = cfg.clone();
        unknown.username = "nobody".into();
        assert!(matches!(
            bounded(&unknown, Client::connect(unknown.clone())).await,
            Err(Error::AuthFailed(_))
        ));
        assert_eq!(bmc.stats().sessions, lingering);

        // Session table full (injected) → SessionLimit.
        bmc.set_faults(Faults {
            session_table_full: true,
            ..Faults::default()
        });
        match bounded(&cfg, Client::connect(cfg.clone())).await {
            Err(e @ Error::SessionLimit { status: 0x01 }) => assert!(e.is_transient()),
            other => panic!("{suite}: table full: {other:?}"),
        }
        bmc.set_faults(Faults::default());

        // Session table full for real: two clients hold both slots, a third is refused.
        let a = bounded(&cfg, Client::connect(cfg.clone())).await.unwrap();
        let b = bounded(&cfg, Client::connect(cfg.clone())).await.unwrap();
        match bounded(&cfg, Client::connect(cfg.clone())).await {
            Err(Error::SessionLimit { .. }) => {}
            other => panic!("{suite}: real table full: {other:?}"),
        }
        a.close().await;
        let c = bounded(&cfg, Client::connect(cfg.clone())).await.unwrap();
        b.close().await;
        c.close().await;
        assert_within_limit(bmc, max);

        // Intermittent loss → retransmits succeed; one session throughout.
        // Enough retransmissions that neither loss (31 lost in a row) nor a stall of the test
        // machine (4.6 s) makes the client re-establish its session.
        let mut lossy = cfg.clone();
        lossy.retries = 30;
        lossy.timeout = Duration::from_millis(150);
        bmc.set_faults(Faults {
            loss_percent: 20,
            ..Faults::default()
        });
        // Connecting under loss may be refused for a while: a retransmitted
        // Open Session takes a table entry of its own (as on OpenBMC), and two
        // orphans fill this BMC's table until its setup timer drops them. That
        // refusal is transient, and a caller retrying it gets in.
        let client = connect_retrying_transient(&lossy, Duration::from_secs(15)).await;
        let before = bmc.stats().sessions_opened;
        for _ in 0..15 {
            bounded(&lossy, client.chassis_status()).await.unwrap();
        }
        let id = bounded(&lossy, client.device_id()).await.unwrap();
        assert_eq!(id.manufacturer_id, 0xBEEF);
        assert_eq!(client.stats().await.sessions_opened, 1);
        bmc.set_faults(Faults::default());
        client.close().await;
        assert_eq!(bmc.stats().sessions_opened, before);
        assert_within_limit(bmc, max);

        // Slow answers within the timeout → fine.
        bmc.set_faults(Faults {
            delay: Duration::from_millis(80),
            ..Faults::default()
        });
        let client = bounded(&cfg, Client::connect(cfg.clone())).await.unwrap();
        bounded(&cfg, client.chassis_status()).await.unwrap();
        // Slower than every attempt → Timeout; the late answers that arrive
        // afterwards must not be mistaken for answers to later requests.
        bmc.set_faults(Faults {
            delay: Duration::from_millis(400),
            ..Faults::default()
        });
        let mut once = cfg.clone();
        once.retries = 0;
        let slow = bounded(&once, Client::connect(once.clone())).await;
        assert!(
            matches!(slow, Err(Error::Timeout { .. })),
            "{suite}: slow: {slow:?}"
        );
        match bounded(&cfg, client.device_id()).await {
            Ok(_) => {} // a late answer to a retransmission is a valid answer
            Err(Error::Timeout { .. }) => {}
            other => panic!("{suite}: slow mid-session: {other:?}"),
        }
        bmc.set_faults(Faults::default());
        let status = bounded(&cfg, client.chassis_status()).await.unwrap();
        assert!(!status.power_on);
        let id = bounded(&cfg, client.device_id()).await.unwrap();
        assert_eq!(id.product_id, 0x0101);
        client.close().await;
        // Half-open sessions left by the timed-out handshake expire on the
        // BMC; the table never overflowed.
        assert_within_limit(bmc, max);

        // Every answer duplicated: the copies are dropped by the sequence
        // window / rqSeq matching and never answer a later request.
        bmc.set_faults(Faults {
            duplicate: true,
            ..Faults::default()
        });
        let client = bounded(&cfg, Client::connect(cfg.clone())).await.unwrap();
        for _ in 0..5 {
            let s = bounded(&cfg, client.chassis_status()).await.unwrap();
            assert!(!s.power_on);
            let id = bounded(&cfg, client.device_id()).await.unwrap();
            assert_eq!(id.manufacturer_id, 0xBEEF);
            let f = bounded(&cfg, client.boot_flags()).await.unwrap();
            assert_eq!(f.mode, ingot_ipmi::BootMode::Uefi);
        }
        let stats = client.stats().await;
        assert_eq!(stats.sessions_opened, 1);
        assert!(stats.replays_dropped >= 10, "{stats:?}");
        client.close().await;
        bmc.set_faults(Faults::default());

        // RAKP 4 lost: the BMC activated a session the client never got;
        // the client closes it with the keys it derived.
        bmc.set_faults(Faults {
            lose_rakp4: true,
            ..Faults::default()
        });
        let before = bmc.stats().sessions;
        match bounded(&cfg, Client::connect(cfg.clone())).await {
            Err(Error::Timeout {
                phase: "RAKP 3/4", ..
            }) => {}
            other => panic!("{suite}: lost RAKP 4: {other:?}"),
        }
        assert_eq!(bmc.stats().sessions, before, "orphaned session closed");
        bmc.set_faults(Faults::default());

        // Corrupted integrity codes → Integrity, never accepted as data.
        bmc.set_faults(Faults {
            corrupt_integrity: true,
            ..Faults::default()
        });
        match bounded(&cfg, Client::connect(cfg.clone())).await {
            Err(Error::Integrity(n)) => assert!(n >= 1),
            other => panic!("{suite}: corrupt integrity: {other:?}"),
        }
        bmc.set_faults(Faults::default());
        assert_within_limit(bmc, max);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_against_a_small_table_never_overflow_it() {
    let mut fleet_cfg = FleetConfig::uniform(1, PW);
    fleet_cfg.bmcs[0].max_sessions = 3;
    let fleet = serve(fleet_cfg).await.unwrap();
    let bmc = fleet.bmc(0).unwrap().clone();
    let cfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let cfg = cfg.clone();
        tasks.push(tokio::spawn(async move {
            match Client::connect(cfg).await {
                Ok(c) => {
                    let r = c.device_id().await.map(|_| ());
                    c.close().await;
                    r
                }
                Err(e) => Err(e),
            }
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => ok += 1,
            Err(Error::SessionLimit { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert!(ok >= 3, "at least the table size succeeded ({ok})");
    assert!(bmc.stats().peak_sessions <= 3);
    assert!(eventually(Duration::from_secs(2), || bmc.stats().sessions == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_of_fifty_with_one_session_each() {
    let fleet = serve(FleetConfig::uniform(50, PW)).await.unwrap();
    let mut clients = Vec::new();
    for bmc in fleet.bmcs() {
        clients.push(
            Client::connect(fast(bmc, CipherSuite::Suite17))
                .await
                .unwrap(),
        );
    }
    for _round in 0..3 {
        let mut tasks = Vec::new();
        for c in &clients {
            // Two concurrent callers per client: serialised on one session.
            for _ in 0..2 {
                let c = c.clone();
                tasks.push(tokio::spawn(async move {
                    c.chassis_status().await.map(|s| s.power_on)
                }));
            }
        }
        for t in tasks {
            assert!(!t.await.unwrap().unwrap());
        }
    }
    for (c, bmc) in clients.iter().zip(fleet.bmcs()) {
        assert_eq!(c.stats().await.sessions_opened, 1);
        assert_eq!(bmc.stats().peak_sessions, 1);
        c.close().await;
        assert_eq!(bmc.stats().sessions, 0);
    }
}
