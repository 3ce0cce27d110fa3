//! Behaviours a client driven unattended by a controller must have, against the in-repo
//! emulator with faults: the boot override survives the 60 s chassis timeout, a Chassis
//! Control is never repeated on a new session, every session the BMC activated is closed,
//! keep-alives follow the last exchange, and retransmitted Open Sessions (which OpenBMC
//! turns into new table entries) never leave the client with two sessions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ingot_ipmi::{BootDevice, BootPersistence, CipherSuite, Client, Error, PowerAction};
use ingot_ipmi_sim::{Faults, FleetConfig, serve};

const PW: &str = "s3cret-pass";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_time_boot_override_outlives_the_chassis_timeout() {
    let mut cfg = FleetConfig::uniform(1, PW);
    // The IPMI 60 s timeout, scaled.
    cfg.bmcs[0].boot_flags_timeout = Duration::from_millis(300);
    let fleet = serve(cfg).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    let client = Client::connect(config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]))
        .await
        .unwrap();
    let flags = client
        .set_boot_device(BootDevice::Pxe, BootPersistence::Once, None)
        .await
        .unwrap();
    assert!(flags.valid);
    // Parameter 3 ("don't clear the valid bit on the 60 s timeout") before parameter 5.
    let written = bmc.stats().boot_params_written;
    assert_eq!(written, vec![3, 5], "boot parameters written: {written:?}");

    tokio::time::sleep(Duration::from_millis(700)).await;
    let flags = client.boot_flags().await.unwrap();
    assert!(
        flags.valid,
        "the override was cleared by the chassis timeout"
    );
    assert_eq!(flags.device, BootDevice::Pxe);
    assert_eq!(bmc.boot_flags()[0] & 0x80, 0x80);

    // The emulator does model the timeout: parameter 5 alone (as a client that skips
    // parameter 3 would write it) loses its valid bit.
    client.raw(0x00, 0x08, &[3, 0x00]).await.unwrap();
    client
        .raw(0x00, 0x08, &[5, 0x80 | 0x20, 0x04, 0, 0, 0])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(bmc.boot_flags()[0] & 0x80, 0, "valid bit expired");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chassis_control_without_answer_is_not_repeated_on_a_new_session() {
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    bmc.set_power(true);
    let mut cfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    cfg.timeout = Duration::from_millis(200);
    cfg.retries = 1;
    let client = Client::connect(cfg).await.unwrap();
    assert!(client.chassis_status().await.unwrap().power_on);
    // The BMC carries the cycle out but its answer is lost.
    bmc.set_faults(Faults {
        mute_commands: vec![(0x00, 0x02)],
        ..Faults::default()
    });
    let err = client.power(PowerAction::Cycle).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let stats = bmc.stats();
    assert_eq!(
        stats.chassis_controls,
        vec![0x02],
        "the power cycle ran more than once"
    );
    assert_eq!(
        stats.sessions_opened, 1,
        "no new session was opened to replay it"
    );
    bmc.set_faults(Faults::default());
    // Reads go on, on the same session.
    assert!(client.chassis_status().await.is_ok());
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_fails_after_rakp4_is_closed() {
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    // Set Session Privilege Level never answered: the session is active on the BMC.
    bmc.set_faults(Faults {
        mute_commands: vec![(0x06, 0x3B)],
        ..Faults::default()
    });
    let mut cfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    cfg.timeout = Duration::from_millis(200);
    cfg.retries = 1;
    let err = Client::connect(cfg).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let stats = bmc.stats();
    assert_eq!(stats.sessions_opened, 1);
    assert_eq!(
        stats.sessions, 0,
        "the session activated by RAKP 3 was left open"
    );
    assert!(
        stats.commands.contains(&(0x06, 0x3C)),
        "{:?}",
        stats.commands
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_is_scheduled_from_the_last_exchange() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].session_timeout = Duration::from_millis(900);
    let fleet = serve(cfg).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    let mut ccfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    ccfg.keepalive = Some(Duration::from_millis(600));
    let client = Client::connect(ccfg).await.unwrap();
    // A call just after the first keep-alive tick would have been due: a fixed tick
    // then waits almost two intervals (about 1.2 s) and the BMC expires the session.
    tokio::time::sleep(Duration::from_millis(650)).await;
    client.device_id().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1400)).await;
    let stats = bmc.stats();
    assert_eq!(stats.active_sessions, 1, "the idle session expired");
    client.device_id().await.unwrap();
    assert_eq!(
        bmc.stats().sessions_opened,
        1,
        "a second session was needed"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retransmitted_open_sessions_never_give_the_client_two_sessions() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].max_sessions = 64;
    let fleet = serve(cfg).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    bmc.set_faults(Faults {
        loss_percent: 25,
        ..Faults::default()
    });
    let mut ccfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    // A lost exchange costs a timeout; only 31 lost in a row (p = 0.44^31) or a
    // stall of the test machine longer than 31 timeouts (4.6 s) would make the
    // client re-establish its session, which is allowed but not what this counts.
    ccfg.timeout = Duration::from_millis(150);
    ccfg.retries = 30;
    let client = Client::connect(ccfg).await.unwrap();
    for _ in 0..30 {
        client.chassis_status().await.unwrap();
    }
    let mine = client.stats().await;
    let stats = bmc.stats();
    assert_eq!(mine.sessions_opened, 1, "{mine:?}");
    assert_eq!(stats.sessions_opened, 1, "{stats:?}");
    assert_eq!(stats.peak_active_sessions, 1, "{stats:?}");
    client.close().await;
    bmc.set_faults(Faults::default());
    // Whatever Open Session copies were answered, none is active once closed.
    let stats = bmc.stats();
    assert!(stats.active_sessions <= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chassis_control_is_never_retransmitted_to_a_bmc_that_runs_every_copy() {
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    bmc.set_power(true);
    let mut cfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    cfg.timeout = Duration::from_millis(150);
    cfg.retries = 3;
    let client = Client::connect(cfg).await.unwrap();
    // Without de-duplication a retransmission (same rqSeq, new session sequence number)
    // is a second hard reset; the answers are lost, so a retransmitting client sends four.
    bmc.set_faults(Faults {
        no_dedup: true,
        mute_commands: vec![(0x00, 0x02)],
        ..Faults::default()
    });
    let err = client.power(PowerAction::Reset).await.unwrap_err();
    let stats = bmc.stats();
    assert_eq!(stats.chassis_controls, vec![0x03], "hard resets executed");
    assert!(matches!(err, Error::Timeout { attempts: 1, .. }), "{err:?}");
    // Reads are still retransmitted: the mode is not what stops the repeat.
    bmc.set_faults(Faults {
        no_dedup: true,
        mute_commands: vec![(0x00, 0x01)],
        ..Faults::default()
    });
    let before = bmc.stats().commands.len();
    assert!(client.chassis_status().await.is_err());
    let reads = bmc.stats().commands[before..]
        .iter()
        .filter(|c| **c == (0x00, 0x01))
        .count();
    assert!(reads >= 4, "{reads} Get Chassis Status received");
    bmc.set_faults(Faults::default());
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_with_a_bad_integrity_code_are_counted() {
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    let mut cfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    cfg.timeout = Duration::from_millis(150);
    cfg.retries = 1;
    cfg.keepalive = None;
    let client = Client::connect(cfg).await.unwrap();
    assert_eq!(client.stats().await.integrity_failures, 0);
    bmc.set_faults(Faults {
        corrupt_integrity: true,
        ..Faults::default()
    });
    let err = client.device_id().await.unwrap_err();
    let Error::Integrity(n) = err else {
        panic!("{err:?}")
    };
    let stats = client.stats().await;
    assert!(n >= 1);
    assert!(
        stats.integrity_failures >= u64::from(n),
        "{n} in the error, {stats:?}"
    );
    bmc.set_faults(Faults::default());
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_entries_of_retransmitted_open_sessions_are_released() {
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    // Every answer comes after two retransmissions went out: the BMC (which, like OpenBMC,
    // gives each copy of an Open Session Request its own entry) holds three entries.
    bmc.set_faults(Faults {
        delay: Duration::from_millis(250),
        ..Faults::default()
    });
    let mut cfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    cfg.timeout = Duration::from_millis(100);
    cfg.retries = 6;
    let client = Client::connect(cfg).await.unwrap();
    bmc.set_faults(Faults::default());
    assert!(
        bmc.stats().peak_sessions >= 2,
        "the copies took entries: {:?}",
        bmc.stats()
    );
    // Released by the client, well before the emulator's 10 s setup timer would.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stats = bmc.stats();
        if stats.sessions == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "orphaned Open Session entries left: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(client.chassis_status().await.is_ok());
    client.close().await;
}
