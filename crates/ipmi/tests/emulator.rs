//! ingot-ipmi against the in-repo lanplus emulator (suites 3 and 17), with
//! ipmitool as the reference client on the same simulated BMCs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ingot_ipmi::{
    BootDevice, BootMode, BootPersistence, CipherSuite, Client, Error, PowerAction, Privilege,
};
use ingot_ipmi_sim::{FleetConfig, Suite, serve};

const PW: &str = "s3cret-pass";

fn sel_body(ts: u32, sensor_type: u8, sensor: u8, dir_type: u8, data1: u8) -> [u8; 14] {
    let t = ts.to_le_bytes();
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
        dir_type,
        data1,
        0xFF,
        0xFF,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_suites_power_boot_sel_fru_device_id() {
    let mut cfg = FleetConfig::uniform(2, PW);
    cfg.bmcs[0].sel = vec![
        sel_body(1_700_000_000, 0x01, 0x30, 0x01, 0x59),
        sel_body(1_700_000_060, 0x02, 0x31, 0x81, 0x57),
    ];
    let fleet = serve(cfg).await.unwrap();
    for (suite, bmc) in [CipherSuite::Suite3, CipherSuite::Suite17]
        .into_iter()
        .zip(fleet.bmcs())
    {
        let client = Client::connect(config(bmc.addr(), "admin", PW, &[suite]))
            .await
            .unwrap();
        assert_eq!(client.cipher_suite().await, Some(suite));

        let id = client.device_id().await.unwrap();
        assert_eq!(
            (id.device_id, id.manufacturer_id, id.product_id),
            (0x20, 0xBEEF, 0x0101)
        );
        assert_eq!(id.firmware_version(), "2.15");
        assert_eq!(id.ipmi_version, (2, 0));

        // Power state machine.
        assert!(!client.chassis_status().await.unwrap().power_on);
        assert!(client.power(PowerAction::On).await.unwrap());
        assert!(bmc.power_on());
        assert!(
            !client.power(PowerAction::On).await.unwrap(),
            "already on: nothing sent"
        );
        assert!(client.power(PowerAction::Reset).await.unwrap());
        assert!(client.power(PowerAction::Cycle).await.unwrap());
        assert!(client.power(PowerAction::Soft).await.unwrap());
        assert!(!bmc.power_on());
        match client.power(PowerAction::Cycle).await {
            Err(Error::CompletionCode { code: 0xD5, .. }) => {}
            other => panic!("cycle while off: {other:?}"),
        }
        assert!(client.power(PowerAction::On).await.unwrap());
        assert!(client.power(PowerAction::Off).await.unwrap());
        assert!(!client.chassis_status().await.unwrap().power_on);
        assert_eq!(bmc.stats().chassis_controls, vec![1, 3, 2, 5, 1, 0]);

        // Boot override keeps the UEFI mode the BMC reports unless told otherwise.
        let before = client.boot_flags().await.unwrap();
        assert_eq!(before.mode, BootMode::Uefi);
        let f = client
            .set_boot_device(BootDevice::Pxe, BootPersistence::Once, None)
            .await
            .unwrap();
        assert_eq!(
            (f.valid, f.device, f.mode, f.persistence),
            (true, BootDevice::Pxe, BootMode::Uefi, BootPersistence::Once)
        );
        assert_eq!(bmc.boot_flags()[..2], [0xA0, 0x04]);
        // A one-time override is consumed by the next boot.
        client.power(PowerAction::On).await.unwrap();
        assert!(!client.boot_flags().await.unwrap().valid);
        let f = client
            .set_boot_device(
                BootDevice::Disk,
                BootPersistence::Persistent,
                Some(BootMode::Legacy),
            )
            .await
            .unwrap();
        assert_eq!(
            (f.device, f.mode, f.persistence),
            (
                BootDevice::Disk,
                BootMode::Legacy,
                BootPersistence::Persistent
            )
        );
        client.power(PowerAction::Reset).await.unwrap();
        assert!(
            client.boot_flags().await.unwrap().valid,
            "persistent override survives a boot"
        );
        let f = client
            .set_boot_device(BootDevice::BiosSetup, BootPersistence::Once, None)
            .await
            .unwrap();
        assert_eq!(
            f.mode,
            BootMode::Legacy,
            "mode read back from the BMC, not flipped"
        );
        assert_eq!(f.device, BootDevice::BiosSetup);
        let f = client
            .set_boot_device(BootDevice::Cdrom, BootPersistence::Once, None)
            .await
            .unwrap();
        assert_eq!(f.device, BootDevice::Cdrom);

        // FRU through multi-chunk reads (the BMC accepts at most 24 bytes a read).
        let inv = client.inventory().await.unwrap();
        let fru = inv.fru.unwrap();
        let board = fru.board.unwrap();
        let product = fru.product.unwrap();
        let chassis = fru.chassis.unwrap();
        let n = if suite == CipherSuite::Suite3 { 0 } else { 1 };
        assert_eq!(board.serial_number, format!("BSN{n:05}"));
        assert_eq!(board.manufacturer, "Ingot Labs");
        assert_eq!(product.product_name, "IL-1U");
        assert_eq!(product.asset_tag, format!("asset-{n}"));
        assert_eq!(chassis.serial_number, format!("CSN{n:05}"));

        // SEL with stable ids.
        let entries = client.sel_entries().await.unwrap();
        if suite == CipherSuite::Suite3 {
            assert_eq!(entries.len(), 2);
            assert_eq!(entries[0].record_id, 1);
            assert_eq!(entries[0].timestamp, Some(1_700_000_000));
            assert_eq!(entries[1].sensor_number, 0x31);
            assert!(entries[1].deassertion);
            assert_eq!(
                entries[0].stable_id(),
                format!("0001-{:08x}", 1_700_000_000u32)
            );
            // Ids stay stable across reads and after additions.
            bmc.add_sel(sel_body(1_700_000_120, 0x04, 0x40, 0x01, 0x52));
            let again = client.sel_entries().await.unwrap();
            assert_eq!(again.len(), 3);
            assert_eq!(again[0].stable_id(), entries[0].stable_id());
            assert_eq!(again[1].stable_id(), entries[1].stable_id());
            client.clear_sel().await.unwrap();
            assert!(client.sel_entries().await.unwrap().is_empty());
            // A record added after clearing reuses no earlier stable id.
            bmc.add_sel(sel_body(1_700_000_180, 0x04, 0x40, 0x01, 0x52));
            let after = client.sel_entries().await.unwrap();
            assert!(
                entries
                    .iter()
                    .all(|e| e.stable_id() != after[0].stable_id())
            );
        } else {
            assert!(entries.is_empty());
            assert_eq!(client.sel_info().await.unwrap().entries, 0);
        }

        // All of that on one session.
        let stats = client.stats().await;
        assert_eq!(stats.sessions_opened, 1);
        assert_eq!(bmc.stats().sessions_opened, 1);
        assert_eq!(bmc.stats().peak_sessions, 1);
        client.close().await;
        assert_eq!(bmc.stats().sessions, 0, "Close Session released the slot");
        assert!(matches!(client.device_id().await, Err(Error::Closed)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_privilege_cannot_control_power() {
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = fleet.bmc(0).unwrap();
    let mut cfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    cfg.privilege = Privilege::User;
    let client = Client::connect(cfg).await.unwrap();
    assert!(client.chassis_status().await.is_ok());
    assert!(matches!(
        client
            .chassis_control(ingot_ipmi::ChassisControl::PowerUp)
            .await,
        Err(Error::Unauthorized(_))
    ));
    assert!(!bmc.power_on());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_client_closes_its_session() {
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = fleet.bmc(0).unwrap().clone();
    {
        let client = Client::connect(config(bmc.addr(), "admin", PW, &[CipherSuite::Suite3]))
            .await
            .unwrap();
        client.device_id().await.unwrap();
        assert_eq!(bmc.stats().sessions, 1);
    }
    assert!(eventually(Duration::from_secs(5), || bmc.stats().sessions == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_session_is_reestablished_once() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].session_timeout = Duration::from_millis(300);
    let fleet = serve(cfg).await.unwrap();
    let bmc = fleet.bmc(0).unwrap().clone();
    let mut ccfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]);
    ccfg.timeout = Duration::from_millis(200);
    ccfg.retries = 1;
    let client = Client::connect(ccfg).await.unwrap();
    client.device_id().await.unwrap();
    // The BMC forgets idle sessions (expiry runs when a datagram arrives, so
    // poll with a second client-less datagram source: an ipmitool-free ping).
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let ping = [
        0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, 0x01, 0x00, 0x00,
    ];
    assert!(
        eventually(Duration::from_secs(5), || {
            let _ = probe.send_to(&ping, bmc.addr());
            bmc.stats().sessions == 0
        })
        .await
    );
    client.device_id().await.unwrap();
    assert_eq!(client.stats().await.sessions_opened, 2);
    assert_eq!(bmc.stats().peak_sessions, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_holds_an_idle_session() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].session_timeout = Duration::from_millis(800);
    let fleet = serve(cfg).await.unwrap();
    let bmc = fleet.bmc(0).unwrap().clone();
    let mut ccfg = config(bmc.addr(), "admin", PW, &[CipherSuite::Suite3]);
    ccfg.keepalive = Some(Duration::from_millis(150));
    let client = Client::connect(ccfg).await.unwrap();
    // Idle for well past the BMC's timeout; the session must stay.
    let start = tokio::time::Instant::now();
    let held = eventually(Duration::from_secs(3), || {
        start.elapsed() > Duration::from_millis(2000) || bmc.stats().sessions == 0
    })
    .await;
    assert!(held);
    assert_eq!(bmc.stats().sessions, 1);
    client.device_id().await.unwrap();
    assert_eq!(client.stats().await.sessions_opened, 1);
    assert_eq!(bmc.stats().sessions_opened, 1);
}

/// ipmitool and ingot-ipmi read the same simulated BMC and must agree; the
/// suite-17 path of the emulator must be accepted by `ipmitool -C 17`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmitool_agrees_with_the_client_on_the_emulator() {
    require("ipmitool");
    let mut cfg = FleetConfig::uniform(2, PW);
    for b in &mut cfg.bmcs {
        b.sel = vec![
            sel_body(1_700_000_000, 0x01, 0x30, 0x01, 0x59),
            sel_body(1_700_003_600, 0x07, 0x02, 0x6F, 0x00),
        ];
        b.power_on = true;
    }
    let fleet = serve(cfg).await.unwrap();
    for (suite, bmc) in [3u8, 17].into_iter().zip(fleet.bmcs()) {
        let a = bmc.addr();
        let client = Client::connect(config(
            a,
            "admin",
            PW,
            &[CipherSuite::from_id(suite).unwrap()],
        ))
        .await
        .unwrap();

        let mc = ipmitool(suite, a, "admin", PW, &["mc", "info"]).await;
        let id = client.device_id().await.unwrap();
        assert_eq!(field(&mc, "Device ID").unwrap(), id.device_id.to_string());
        assert_eq!(
            field(&mc, "Firmware Revision").unwrap(),
            id.firmware_version()
        );
        assert_eq!(
            field(&mc, "Manufacturer ID").unwrap(),
            id.manufacturer_id.to_string()
        );
        assert!(
            field(&mc, "Product ID")
                .unwrap()
                .starts_with(&id.product_id.to_string())
        );
        assert_eq!(
            field(&mc, "IPMI Version").unwrap(),
            format!("{}.{}", id.ipmi_version.0, id.ipmi_version.1)
        );

        let st = ipmitool(suite, a, "admin", PW, &["chassis", "status"]).await;
        let cs = client.chassis_status().await.unwrap();
        assert_eq!(
            field(&st, "System Power").unwrap(),
            if cs.power_on { "on" } else { "off" }
        );
        assert_eq!(
            field(&st, "Power Overload").unwrap(),
            cs.power_overload.to_string()
        );
        assert_eq!(
            field(&st, "Main Power Fault").unwrap(),
            cs.power_fault.to_string()
        );

        // Writes by one are seen by the other.
        client.power(PowerAction::Off).await.unwrap();
        let ps = ipmitool(suite, a, "admin", PW, &["power", "status"]).await;
        assert!(ps.contains("Chassis Power is off"), "{ps}");
        ipmitool(suite, a, "admin", PW, &["chassis", "power", "on"]).await;
        assert!(client.chassis_status().await.unwrap().power_on);

        client
            .set_boot_device(BootDevice::Pxe, BootPersistence::Persistent, None)
            .await
            .unwrap();
        let bp = ipmitool(suite, a, "admin", PW, &["chassis", "bootparam", "get", "5"]).await;
        assert!(bp.contains("Force PXE"), "{bp}");
        assert!(bp.contains("Options apply to all future boots"), "{bp}");
        assert!(bp.contains("BIOS EFI boot"), "{bp}");
        ipmitool(suite, a, "admin", PW, &["chassis", "bootdev", "disk"]).await;
        assert_eq!(client.boot_flags().await.unwrap().device, BootDevice::Disk);

        let sel = ipmitool(suite, a, "admin", PW, &["sel", "list"]).await;
        let ours = client.sel_entries().await.unwrap();
        assert_eq!(
            sel_list_ids(&sel),
            ours.iter().map(|e| e.record_id).collect::<Vec<_>>(),
            "{sel}"
        );
        // ipmitool prints the BMC timestamp in UTC (TZ=UTC): 2023-11-14 22:13:20 for 1700000000.
        assert!(sel.contains("11/14/23 | 22:13:20"), "{sel}");
        assert!(sel.contains("11/14/23 | 23:13:20"), "{sel}");
        let elist = ipmitool(suite, a, "admin", PW, &["sel", "elist"]).await;
        assert_eq!(sel_list_ids(&elist), sel_list_ids(&sel), "{elist}");
        let info = ipmitool(suite, a, "admin", PW, &["sel", "info"]).await;
        assert_eq!(field(&info, "Entries").unwrap(), ours.len().to_string());

        let fru = ipmitool(suite, a, "admin", PW, &["fru", "print", "0"]).await;
        let inv = client.fru(0).await.unwrap();
        let board = inv.board.unwrap();
        let product = inv.product.unwrap();
        assert_eq!(field(&fru, "Board Mfg").unwrap(), board.manufacturer);
        assert_eq!(field(&fru, "Board Product").unwrap(), board.product_name);
        assert_eq!(field(&fru, "Board Serial").unwrap(), board.serial_number);
        assert_eq!(field(&fru, "Board Part Number").unwrap(), board.part_number);
        assert_eq!(field(&fru, "Product Name").unwrap(), product.product_name);
        assert_eq!(
            field(&fru, "Product Serial").unwrap(),
            product.serial_number
        );
        assert_eq!(field(&fru, "Product Asset Tag").unwrap(), product.asset_tag);
        assert_eq!(
            field(&fru, "Chassis Serial").unwrap(),
            inv.chassis.unwrap().serial_number
        );

        // ipmitool closes its sessions; ours is the only one left.
        client.close().await;
        assert_eq!(bmc.stats().sessions, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmitool_wrong_password_is_rejected_by_the_emulator() {
    require("ipmitool");
    let fleet = serve(FleetConfig::uniform(1, PW)).await.unwrap();
    let bmc = fleet.bmc(0).unwrap();
    let (_, ok, _) =
        ipmitool_status(17, bmc.addr(), "admin", "not-the-password", &["mc", "info"]).await;
    assert!(!ok);
    assert_eq!(bmc.stats().sessions_opened, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_only_offered_by_the_bmc_is_negotiated() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].suites = vec![Suite::S3];
    let fleet = serve(cfg).await.unwrap();
    let bmc = fleet.bmc(0).unwrap();
    match Client::connect(config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17])).await {
        Err(Error::UnsupportedCipherSuite {
            suite: 17,
            status: 0x11,
        }) => {}
        other => panic!("expected an unsupported suite error, got {other:?}"),
    }
    let c = Client::connect(config(
        bmc.addr(),
        "admin",
        PW,
        &[CipherSuite::Suite17, CipherSuite::Suite3],
    ))
    .await
    .unwrap();
    assert_eq!(c.cipher_suite().await, Some(CipherSuite::Suite3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_key_login_with_a_bmc_key() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].bmc_key = Some("kg-0123456789".into());
    let fleet = serve(cfg).await.unwrap();
    let bmc = fleet.bmc(0).unwrap();
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let mut with_kg = config(bmc.addr(), "admin", PW, &[suite]);
        with_kg.bmc_key = Some("kg-0123456789".into());
        let c = Client::connect(with_kg).await.unwrap();
        c.device_id().await.unwrap();
        c.close().await;
        // Without Kg the password is right but the session keys are not.
        match Client::connect(config(bmc.addr(), "admin", PW, &[suite])).await {
            Err(Error::AuthFailed(_)) => {}
            other => panic!("{suite}: missing Kg: {other:?}"),
        }
    }
    require("ipmitool");
    let out = ipmitool(
        17,
        bmc.addr(),
        "admin",
        PW,
        &["-k", "kg-0123456789", "mc", "info"],
    )
    .await;
    assert!(field(&out, "Manufacturer ID").is_some(), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_transitions_take_time_when_configured() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].power_on = true;
    cfg.bmcs[0].cycle_delay = Duration::from_millis(300);
    cfg.bmcs[0].soft_off_delay = Duration::from_millis(300);
    let fleet = serve(cfg).await.unwrap();
    let bmc = fleet.bmc(0).unwrap().clone();
    let client = Client::connect(config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]))
        .await
        .unwrap();
    client
        .set_boot_device(BootDevice::Pxe, BootPersistence::Once, None)
        .await
        .unwrap();
    assert!(client.power(PowerAction::Cycle).await.unwrap());
    assert!(
        !client.chassis_status().await.unwrap().power_on,
        "off during the cycle"
    );
    assert!(eventually(Duration::from_secs(5), || bmc.power_on()).await);
    assert!(
        !client.boot_flags().await.unwrap().valid,
        "the one-time override was used by that boot"
    );
    assert!(client.power(PowerAction::Soft).await.unwrap());
    assert!(
        client.chassis_status().await.unwrap().power_on,
        "the OS is still shutting down"
    );
    assert!(eventually(Duration::from_secs(5), || !bmc.power_on()).await);
}

/// Boot flags without the valid bit report no mode: their EFI bit (0 here, as many BMCs leave
/// it once a one-time override is used) is not kept, UEFI is written unless a mode is asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_without_the_valid_bit_keep_no_mode() {
    let mut cfg = FleetConfig::uniform(1, PW);
    cfg.bmcs[0].boot_flags = [0x00, 0x00, 0, 0, 0];
    let fleet = serve(cfg).await.unwrap();
    let bmc = fleet.bmc(0).unwrap().clone();
    let client = Client::connect(config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]))
        .await
        .unwrap();
    let before = client.boot_flags().await.unwrap();
    assert_eq!(before.reported_mode(), None);
    let f = client
        .set_boot_device(BootDevice::Pxe, BootPersistence::Once, None)
        .await
        .unwrap();
    assert_eq!(
        (f.reported_mode(), f.device),
        (Some(BootMode::Uefi), BootDevice::Pxe)
    );
    assert_eq!(bmc.boot_flags()[..2], [0xA0, 0x04]);
    // Valid Legacy flags are kept.
    client
        .set_boot_device(
            BootDevice::Disk,
            BootPersistence::Persistent,
            Some(BootMode::Legacy),
        )
        .await
        .unwrap();
    let f = client
        .set_boot_device(BootDevice::Pxe, BootPersistence::Once, None)
        .await
        .unwrap();
    assert_eq!(f.reported_mode(), Some(BootMode::Legacy));
    assert_eq!(bmc.boot_flags()[..2], [0x80, 0x04]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdr_partial_reads_and_cancelled_reservations() {
    let mut cfg = FleetConfig::uniform(1, PW);
    // Reads of more than 8 bytes are refused (0xCA): the client halves its 16-byte reads.
    cfg.bmcs[0].sdr_max_read = 8;
    let fleet = serve(cfg).await.unwrap();
    let bmc = &fleet.bmcs()[0];
    let client = Client::connect(config(bmc.addr(), "admin", PW, &[CipherSuite::Suite17]))
        .await
        .unwrap();
    let count = |cmd: u8| {
        bmc.stats()
            .commands
            .iter()
            .filter(|c| **c == (0x0A, cmd))
            .count()
    };
    let sensors = client.sdr_sensors().await.unwrap();
    let names: Vec<&str> = sensors.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Inlet Temp", "Fan1", "PS1 Status"]);
    assert_eq!(sensors[1].conversion.unwrap().convert(56), Some(5600.0));
    assert_eq!(count(0x22), 1, "one reservation");
    // Three records of 42 to 58 bytes: a 5-byte header each, one refused 16-byte read, then
    // pieces of at most 8 bytes.
    let whole = (58 - 5usize).div_ceil(8) + (52 - 5usize).div_ceil(8) + (42 - 5usize).div_ceil(8);
    assert_eq!(count(0x23), 3 + 1 + whole, "{:?}", bmc.stats().commands);

    // ipmitool reads the same repository.
    let out = ipmitool(17, bmc.addr(), "admin", PW, &["sdr", "list"]).await;
    assert!(
        out.contains("Inlet Temp") && out.contains("24 degrees C"),
        "{out}"
    );
    assert!(out.contains("Fan1") && out.contains("5600 RPM"), "{out}");

    // The repository changes twice during the read: read again from the start, whole.
    bmc.set_faults(ingot_ipmi_sim::Faults {
        sdr_cancellations: 2,
        ..Default::default()
    });
    let before = count(0x22);
    assert_eq!(client.sdr_sensors().await.unwrap(), sensors);
    assert_eq!(count(0x22) - before, 3, "two restarts");

    // It never stops changing: a bounded number of restarts, then an error that says so.
    bmc.set_faults(ingot_ipmi_sim::Faults {
        sdr_cancellations: 1000,
        ..Default::default()
    });
    let before = count(0x22);
    let e = client.sdr_sensors().await.unwrap_err();
    assert!(e.to_string().contains("reservation cancelled"), "{e}");
    assert_eq!(
        count(0x22) - before,
        ingot_ipmi::sdr::MAX_SDR_RESTARTS as usize + 1
    );
    bmc.set_faults(ingot_ipmi_sim::Faults::default());

    // Readings and thresholds; a sensor that is not there is a completion code.
    let r = client.sensor_reading(0x01).await.unwrap();
    assert!(r.valid());
    assert_eq!(r.raw, 24);
    let t = client.sensor_thresholds(0x02).await.unwrap();
    assert_eq!((t.get(0), t.get(1), t.get(3)), (Some(15), Some(10), None));
    bmc.set_sensor_raw(0x02, 8);
    let r = client.sensor_reading(0x02).await.unwrap();
    assert_eq!(r.states & 0x3F, 0b11, "at or below LNC and LC");
    assert!(matches!(
        client.sensor_reading(0x77).await,
        Err(Error::CompletionCode { code: 0xCB, .. })
    ));
}
