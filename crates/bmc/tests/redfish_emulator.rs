//! The Redfish client and the session manager against ingot's BMC emulator, over real HTTP(S).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bmc_config, poll_until};
use ingot_bmc::manager::{BmcConfig, ManagerOptions, SessionManager};
use ingot_bmc::redfish::{AuthMode, RedfishClient, RedfishOptions, TlsOptions};
use ingot_bmc::*;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Quirks, SimBmc, Vendor};
use std::sync::Arc;
use std::time::Duration;

fn spec(vendor: Vendor) -> BmcSpec {
    BmcSpec {
        vendor,
        power_delay: Duration::from_millis(300),
        ..BmcSpec::default()
    }
}

async fn fleet_of(vendors: &[Vendor], tls: bool) -> Fleet {
    Fleet::start(
        FleetOptions {
            tls,
            ..FleetOptions::default()
        },
        vendors.iter().map(|v| spec(*v)).collect(),
    )
    .await
    .expect("fleet")
}

fn options() -> RedfishOptions {
    RedfishOptions {
        timeout: Duration::from_secs(5),
        transition_timeout: Duration::from_secs(20),
        ..RedfishOptions::default()
    }
}

fn client(b: &SimBmc, options: RedfishOptions) -> RedfishClient {
    let ep = Endpoint::parse(&b.url(), None).expect("endpoint");
    RedfishClient::new(&ep, "admin", Password::new("password"), options).expect("client")
}

async fn wait_power(c: &dyn Bmc, want: PowerState) {
    poll_until(
        &format!("power {want}"),
        Duration::from_secs(20),
        || async { (c.power_state().await.ok() == Some(want)).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn one_session_reused_and_closed() {
    let fleet = fleet_of(&[Vendor::Dell], false).await;
    let b = &fleet.bmcs[0];
    let c = client(b, options());
    for _ in 0..5 {
        assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    }
    c.inventory().await.unwrap();
    let s = b.state.snapshot();
    assert_eq!(s.sessions_created, 1, "one session for all calls");
    assert_eq!(s.sessions, 1);
    c.close().await.unwrap();
    assert_eq!(b.state.snapshot().sessions, 0, "logout on close");
}

#[tokio::test]
async fn a_first_contact_reads_the_power_state_in_three_requests() {
    let fleet = fleet_of(&[Vendor::Dell, Vendor::Hpe], false).await;
    // Requests are counted exactly: no hedged copy of a read slowed by a loaded machine.
    let unhedged = RedfishOptions {
        hedge_after: None,
        ..options()
    };
    // Login, `Systems`, the system: the service root is not read.
    let c = client(&fleet.bmcs[0], unhedged.clone());
    assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    assert_eq!(fleet.bmcs[0].state.snapshot().requests, 3);
    // The same through the session manager, which detects the protocol with that login.
    let manager = SessionManager::new(ManagerOptions {
        redfish: unhedged,
        ..ManagerOptions::default()
    });
    let b = manager.bmc(bmc_config(&fleet.bmcs[1].url()));
    assert_eq!(b.power_state().await.unwrap(), PowerState::On);
    assert_eq!(b.protocol_detected(), Some(Protocol::Redfish));
    let s = fleet.bmcs[1].state.snapshot();
    assert_eq!((s.requests, s.sessions_created), (3, 1));
    manager.shutdown().await;
    assert_eq!(fleet.bmcs[1].state.snapshot().sessions, 0);
}

#[tokio::test]
async fn sessions_served_elsewhere_are_found_through_the_service_root() {
    let fleet = fleet_of(&[Vendor::Supermicro], false).await;
    let b = &fleet.bmcs[0];
    b.state.set_quirks(Quirks {
        sessions_elsewhere: true,
        ..Quirks::default()
    });
    let c = client(b, options());
    assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    assert!(c.has_session().await, "a session, not Basic authentication");
    // The vendor's boot-mode rule still holds: the mode is not reset by the PATCH.
    let before = b.state.snapshot().boot.mode.clone();
    c.set_boot_override(BootRequest {
        device: BootDevice::Pxe,
        persistent: false,
        mode: None,
    })
    .await
    .unwrap();
    assert_eq!(b.state.snapshot().boot.mode, before);
    c.close().await.unwrap();
    let s = b.state.snapshot();
    assert_eq!(
        (s.sessions_created, s.sessions),
        (1, 0),
        "logged out where it logged in"
    );
}

#[tokio::test]
async fn a_login_refused_at_the_usual_uri_is_not_sent_again() {
    let fleet = fleet_of(&[Vendor::Dell], false).await;
    let b = &fleet.bmcs[0];
    b.state.set_quirks(Quirks {
        fail_paths: vec![("/redfish/v1/SessionService/Sessions".into(), 400)],
        ..Quirks::default()
    });
    let c = client(b, options());
    let e = c.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::Http { status: 400, .. }), "{e:?}");
    // The POST, then the root (which names the same collection): one login, not two.
    assert_eq!(b.state.snapshot().requests, 2);

    // A wrong password the same way: a refused login counts towards an account's lockout.
    let fleet = fleet_of(&[Vendor::Lenovo], false).await;
    let b = &fleet.bmcs[0];
    let ep = Endpoint::parse(&b.url(), None).unwrap();
    let c = RedfishClient::new(&ep, "admin", Password::new("wrong"), options()).unwrap();
    assert!(matches!(c.power_state().await, Err(BmcError::Unauthorized)));
    assert_eq!(b.state.snapshot().requests, 2);
}

#[tokio::test]
async fn relogin_after_session_expiry_and_logout_on_drop() {
    let fleet = fleet_of(&[Vendor::Hpe], false).await;
    let b = &fleet.bmcs[0];
    let c = client(b, options());
    c.power_state().await.unwrap();
    b.state.expire_sessions();
    assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    assert_eq!(b.state.snapshot().sessions_created, 2);
    assert_eq!(
        c.stats()
            .relogins
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    drop(c);
    poll_until("logout after drop", Duration::from_secs(5), || async {
        (b.state.snapshot().sessions == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn power_actions_follow_transitions() {
    for vendor in Vendor::ALL {
        let fleet = fleet_of(&[vendor], false).await;
        let c = client(&fleet.bmcs[0], options());
        let o = c.power(PowerAction::On).await.unwrap();
        assert!(o.already_in_state, "{vendor}: on while on sends nothing");
        let o = c.power(PowerAction::Off).await.unwrap();
        assert_eq!(o.sent, vec!["ForceOff"]);
        wait_power(&c, PowerState::Off).await;
        assert!(c.power(PowerAction::Soft).await.unwrap().already_in_state);
        assert_eq!(c.power(PowerAction::On).await.unwrap().sent, vec!["On"]);
        wait_power(&c, PowerState::On).await;
        assert_eq!(
            c.power(PowerAction::Soft).await.unwrap().sent,
            vec!["GracefulShutdown"]
        );
        wait_power(&c, PowerState::Off).await;
        // Reset of a system that is off powers it on.
        assert_eq!(c.power(PowerAction::Reset).await.unwrap().sent, vec!["On"]);
        wait_power(&c, PowerState::On).await;
        assert_eq!(
            c.power(PowerAction::Reset).await.unwrap().sent,
            vec!["ForceRestart"]
        );
        wait_power(&c, PowerState::On).await;
        let cycle = c.power(PowerAction::Cycle).await.unwrap();
        if vendor == Vendor::Hpe {
            // No PowerCycle on iLO: emulated with ForceOff, wait for Off, On.
            assert_eq!(cycle.sent, vec!["ForceOff", "On"]);
        } else {
            assert_eq!(cycle.sent, vec!["PowerCycle"]);
        }
        wait_power(&c, PowerState::On).await;
        assert!(fleet.bmcs[0].state.snapshot().resets >= 1);
    }
}

#[tokio::test]
async fn boot_override_keeps_the_boot_mode() {
    for vendor in Vendor::ALL {
        let fleet = fleet_of(&[vendor], false).await;
        let b = &fleet.bmcs[0];
        let c = client(b, options());
        let before = c.boot_override().await.unwrap();
        assert_eq!(before.mode, Some(BootMode::Uefi));
        assert!(!before.enabled);
        let after = c
            .set_boot_override(BootRequest {
                device: BootDevice::Pxe,
                persistent: false,
                mode: None,
            })
            .await
            .unwrap();
        assert_eq!(after.device, BootDevice::Pxe, "{vendor}");
        assert!(after.enabled && !after.persistent);
        assert_eq!(
            after.mode,
            Some(BootMode::Uefi),
            "{vendor}: mode never flipped"
        );
        assert_eq!(b.state.snapshot().boot.mode, "UEFI");
        // Persistent, then an explicit mode change.
        let p = c
            .set_boot_override(BootRequest {
                device: BootDevice::Disk,
                persistent: true,
                mode: Some(BootMode::Legacy),
            })
            .await
            .unwrap();
        assert!(p.persistent);
        assert_eq!(p.mode, Some(BootMode::Legacy));
        // A Once override is consumed by the next boot.
        c.set_boot_override(BootRequest {
            device: BootDevice::Pxe,
            persistent: false,
            mode: Some(BootMode::Uefi),
        })
        .await
        .unwrap();
        c.power(PowerAction::Reset).await.unwrap();
        poll_until("override consumed", Duration::from_secs(10), || async {
            let o = c.boot_override().await.ok()?;
            (!o.enabled).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn inventory_of_each_vendor_profile() {
    let fleet = fleet_of(&Vendor::ALL, false).await;
    for b in &fleet.bmcs {
        let c = client(b, options());
        let inv = c.inventory().await.unwrap();
        let p = &b.state.profile;
        assert_eq!(inv.vendor, p.vendor.to_string());
        assert_eq!(inv.manufacturer.as_deref(), Some(p.manufacturer));
        assert_eq!(inv.model.as_deref(), Some(p.model));
        assert_eq!(inv.serial_number, Some(b.state.serial_number()));
        assert!(inv.sku.is_some());
        assert_eq!(inv.bios_version.as_deref(), Some(p.bios_version));
        assert_eq!(inv.bmc_firmware_version.as_deref(), Some(p.bmc_firmware));
        assert_eq!(inv.cpus.len(), p.sockets as usize);
        assert_eq!(inv.cpus[0].cores, Some(p.cores));
        assert_eq!(inv.memory.len(), p.dimms as usize);
        assert_eq!(inv.nics.len(), p.nics as usize);
        assert_eq!(inv.nics[0].mac_address, Some(b.state.mac(0)));
        assert_eq!(inv.disks.len(), p.drives as usize);
        assert_eq!(inv.health.system, Some(Health::Ok));
        assert_eq!(inv.health.storage, Some(Health::Ok));
        assert_eq!(inv.power_state, PowerState::On);
    }
}

#[tokio::test]
async fn event_log_ids_are_stable() {
    let fleet = fleet_of(&Vendor::ALL, false).await;
    for b in &fleet.bmcs {
        let c = client(b, options());
        let first = c.event_log().await.unwrap();
        assert_eq!(first.len(), 2);
        b.state.add_log("Critical", "PSU 2 lost input");
        let second = c.event_log().await.unwrap();
        assert_eq!(second.len(), 3);
        assert_eq!(&second[..2], &first[..], "same entries, same ids");
        let new: Vec<_> = second
            .iter()
            .filter(|e| !first.iter().any(|f| f.dedup_key() == e.dedup_key()))
            .collect();
        assert_eq!(new.len(), 1);
        assert_eq!(new[0].message, "PSU 2 lost input");
        assert_eq!(new[0].severity.as_deref(), Some("Critical"));
        assert!(new[0].id.starts_with("/redfish/v1/"));
    }
}

#[tokio::test]
async fn tls_is_verified_unless_told_otherwise() {
    let fleet = fleet_of(&[Vendor::Dell], true).await;
    let b = &fleet.bmcs[0];
    let ca = fleet.tls.as_ref().unwrap().ca_pem.clone().into_bytes();
    // Unknown CA: refused.
    let err = client(b, options()).power_state().await.unwrap_err();
    assert!(matches!(err, BmcError::Tls(_)), "{err:?}");
    // With the CA bundle: accepted.
    let mut o = options();
    o.tls = TlsOptions {
        insecure: false,
        ca_bundle_pem: Some(ca),
        pinned_sha256: None,
    };
    assert_eq!(client(b, o).power_state().await.unwrap(), PowerState::On);
    // Opt-in insecure: accepted.
    let mut o = options();
    o.tls.insecure = true;
    assert_eq!(client(b, o).power_state().await.unwrap(), PowerState::On);
}

#[tokio::test]
async fn basic_auth_mode_opens_no_session() {
    let fleet = fleet_of(&[Vendor::Lenovo], false).await;
    let b = &fleet.bmcs[0];
    let mut o = options();
    o.auth = AuthMode::Basic;
    let c = client(b, o);
    c.power_state().await.unwrap();
    c.inventory().await.unwrap();
    assert_eq!(b.state.snapshot().sessions_created, 0);
    // Wrong password: typed error, no panic.
    let ep = Endpoint::parse(&b.url(), None).unwrap();
    let bad = RedfishClient::new(&ep, "admin", Password::new("nope"), options()).unwrap();
    assert!(matches!(
        bad.power_state().await,
        Err(BmcError::Unauthorized)
    ));
}

#[tokio::test]
async fn session_limit_is_typed_and_respected() {
    let fleet = Fleet::start(
        FleetOptions::default(),
        vec![
            BmcSpec {
                vendor: Vendor::Dell,
                max_sessions: 1,
                ..BmcSpec::default()
            },
            BmcSpec {
                vendor: Vendor::Supermicro,
                max_sessions: 1,
                ..BmcSpec::default()
            },
        ],
    )
    .await
    .unwrap();
    for b in &fleet.bmcs {
        let a = client(b, options());
        a.power_state().await.unwrap();
        let other = client(b, options());
        let err = other.power_state().await.unwrap_err();
        assert!(matches!(err, BmcError::SessionLimit), "{err:?}");
        assert!(err.is_transient());
        a.close().await.unwrap();
        other.power_state().await.unwrap();
        assert_eq!(b.state.snapshot().peak_sessions, 1);
    }
}

#[tokio::test]
async fn manager_bounds_concurrency_and_reuses_sessions() {
    let fleet = Fleet::uniform(
        FleetOptions::default(),
        8,
        BmcSpec {
            latency: Duration::from_millis(20),
            max_sessions: 1,
            ..BmcSpec::default()
        },
    )
    .await
    .unwrap();
    let manager = SessionManager::new(ManagerOptions {
        per_bmc_limit: 1,
        fleet_limit: 3,
        redfish: options(),
        ..ManagerOptions::default()
    });
    let configs: Vec<BmcConfig> = fleet.bmcs.iter().map(|b| bmc_config(&b.url())).collect();
    // 8 BMCs x 6 concurrent callers each.
    let mut tasks = Vec::new();
    for cfg in &configs {
        for _ in 0..6 {
            let bmc = manager.bmc(cfg.clone());
            tasks.push(tokio::spawn(async move { bmc.power_state().await }));
        }
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), PowerState::On);
    }
    assert!(
        fleet
            .in_flight
            .peak
            .load(std::sync::atomic::Ordering::SeqCst)
            <= 3,
        "fleet limit respected"
    );
    for (b, cfg) in fleet.bmcs.iter().zip(&configs) {
        assert_eq!(
            b.state
                .counters
                .in_flight
                .peak
                .load(std::sync::atomic::Ordering::SeqCst),
            1,
            "per-BMC limit respected"
        );
        let s = b.state.snapshot();
        assert_eq!(s.sessions_created, 1, "one session per BMC");
        assert_eq!(s.peak_sessions, 1);
        assert_eq!(manager.detected_protocol(cfg), Some(Protocol::Redfish));
    }
    let opened = manager
        .redfish_stats()
        .sessions_opened
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(opened, 8);
    assert_eq!(manager.shutdown().await, 8);
    for b in &fleet.bmcs {
        assert_eq!(b.state.snapshot().sessions, 0, "closed on shutdown");
    }
    let after = manager.bmc(configs[0].clone()).power_state().await;
    assert!(after.is_err());
}

#[tokio::test]
async fn sessions_are_never_more_than_allowed_under_concurrency() {
    let fleet = fleet_of(&[Vendor::Dell], false).await;
    let b = &fleet.bmcs[0];
    let c = Arc::new(client(b, options()));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move { c.power_state().await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        b.state.snapshot().sessions_created,
        1,
        "one login for racing callers"
    );
}

#[tokio::test]
async fn ipv6_loopback_with_tls() {
    let fleet = Fleet::start(
        FleetOptions {
            listen: "::1".parse().unwrap(),
            tls: true,
            ..FleetOptions::default()
        },
        vec![spec(Vendor::Hpe)],
    )
    .await
    .expect("fleet on ::1");
    let b = &fleet.bmcs[0];
    let host = format!("https://[::1]:{}", b.addr.port());
    let ep = Endpoint::parse(&host, None).unwrap();
    assert_eq!(ep.host, "::1");
    let mut o = options();
    o.tls.ca_bundle_pem = Some(fleet.tls.as_ref().unwrap().ca_pem.clone().into_bytes());
    let c = RedfishClient::new(&ep, "admin", Password::new("password"), o).unwrap();
    assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    // HPE answers the login with an absolute Location on another host name: the logout still
    // goes to this BMC.
    c.close().await.unwrap();
    assert_eq!(b.state.snapshot().sessions, 0);
}

#[tokio::test]
async fn an_event_service_disabled_or_without_a_stream_is_unsupported() {
    let fleet = fleet_of(&[Vendor::Dell], false).await;
    let b = &fleet.bmcs[0];
    for quirks in [
        Quirks {
            event_service_disabled: true,
            ..Quirks::default()
        },
        Quirks {
            no_server_sent_events: true,
            ..Quirks::default()
        },
    ] {
        b.state.set_quirks(quirks.clone());
        let c = client(b, options());
        match c.event_stream(Duration::from_secs(30)).await {
            Err(BmcError::Unsupported(what)) => {
                assert!(what.contains("server-sent events"), "{what}")
            }
            Err(e) => panic!("{quirks:?}: {e}"),
            Ok(_) => panic!("{quirks:?}: a stream was opened"),
        }
    }
    assert_eq!(b.state.event_stream_opens(), Vec::<Option<String>>::new());
}

#[tokio::test]
async fn event_stream_reports_power_changes() {
    use futures::StreamExt;
    let fleet = fleet_of(&[Vendor::Dell], false).await;
    let b = &fleet.bmcs[0];
    let c = client(b, options());
    let events = c
        .event_stream(Duration::from_secs(30))
        .await
        .expect("event stream");
    let mut events = Box::pin(events);
    c.power(PowerAction::Off).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event within the deadline")
        .expect("stream open")
        .expect("event");
    assert_eq!(
        event["Events"][0]["OriginOfCondition"]["@odata.id"],
        "/redfish/v1/Systems/System.Embedded.1"
    );
    b.state.add_log("Critical", "PSU 2 lost input");
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event within the deadline")
        .expect("stream open")
        .expect("event");
    assert_eq!(event["Events"][0]["Message"], "PSU 2 lost input");
    assert_eq!(
        b.state.snapshot().sessions_created,
        1,
        "the stream reuses the session"
    );
}

/// What the manager reports to its observer.
#[derive(Default)]
struct Recorder {
    calls: std::sync::Mutex<Vec<String>>,
    open: std::sync::atomic::AtomicI64,
}

impl ingot_bmc::manager::BmcObserver for Recorder {
    fn call(
        &self,
        protocol: Option<Protocol>,
        operation: &'static str,
        outcome: &'static str,
        _took: Duration,
    ) {
        let protocol = protocol.map_or("unknown".to_owned(), |p| p.to_string());
        self.calls
            .lock()
            .unwrap()
            .push(format!("{protocol} {operation} {outcome}"));
    }
    fn session_opened(&self, _: Protocol) {
        self.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    fn session_closed(&self, _: Protocol) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn the_observer_sees_calls_by_outcome_and_the_sessions_open() {
    let fleet = fleet_of(&[Vendor::Dell], false).await;
    let recorder = Arc::new(Recorder::default());
    let manager = SessionManager::new(ManagerOptions {
        redfish: options(),
        observer: ingot_bmc::manager::Observer::new(recorder.clone()),
        ..ManagerOptions::default()
    });
    let good = bmc_config(&fleet.bmcs[0].url());
    let bmc = manager.bmc(good.clone());
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);
    bmc.boot_override().await.unwrap();
    assert_eq!(recorder.open.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Nothing listens here: the call fails before any protocol is reached.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = manager.bmc(bmc_config(&format!("http://127.0.0.1:{port}")));
    assert!(refused.power_state().await.is_err());
    assert_eq!(
        recorder.calls.lock().unwrap().clone(),
        [
            "redfish power_state ok",
            "redfish boot_override ok",
            "unknown power_state unreachable",
        ]
    );
    drop(bmc);
    assert!(manager.evict(&good).await);
    assert_eq!(recorder.open.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn virtual_media_is_attached_and_ejected_on_every_vendor_profile() {
    // Dell keeps its devices under the system, the others under the manager; Lenovo takes a
    // PATCH (no actions), Supermicro refuses `Inserted`/`WriteProtected`; every profile
    // refuses to insert into an occupied device.
    let fleet = fleet_of(&Vendor::ALL, false).await;
    for b in &fleet.bmcs {
        let vendor = b.state.profile.vendor;
        let c = client(b, options());
        let cd = |slots: &[MediaSlot]| {
            slots
                .iter()
                .find(|s| s.takes(MediaKind::Cd))
                .cloned()
                .unwrap_or_else(|| panic!("{vendor}: no CD device in {slots:?}"))
        };
        let before = c.virtual_media().await.unwrap();
        assert!(!cd(&before).inserted, "{vendor}: {before:?}");

        let first = "http://127.0.0.1:9/images/first.iso".to_owned();
        c.set_virtual_media(MediaKind::Cd, Some(first.clone()))
            .await
            .unwrap_or_else(|e| panic!("{vendor}: insert: {e}"));
        let slot = cd(&c.virtual_media().await.unwrap());
        assert!(slot.inserted, "{vendor}: {slot:?}");
        assert_eq!(slot.image.as_deref(), Some(first.as_str()), "{vendor}");
        // The BMC's own state, not only what the client reads back.
        let held = b.state.media();
        assert!(
            held.iter().any(|m| m.inserted
                && m.write_protected
                && m.image.as_deref() == Some(first.as_str())),
            "{vendor}: {held:?}"
        );

        // The same image again: already attached, nothing is sent.
        c.set_virtual_media(MediaKind::Cd, Some(first.clone()))
            .await
            .unwrap();
        assert_eq!(
            b.state.media_log().len(),
            1,
            "{vendor}: {:?}",
            b.state.media_log()
        );

        // An occupied device is emptied before the next image goes in.
        let second = "http://127.0.0.1:9/images/second.iso".to_owned();
        c.set_virtual_media(MediaKind::Dvd, Some(second.clone()))
            .await
            .unwrap_or_else(|e| panic!("{vendor}: second insert: {e}"));
        let slot = cd(&c.virtual_media().await.unwrap());
        assert_eq!(slot.image.as_deref(), Some(second.as_str()), "{vendor}");

        c.set_virtual_media(MediaKind::Cd, None)
            .await
            .unwrap_or_else(|e| panic!("{vendor}: eject: {e}"));
        let slot = cd(&c.virtual_media().await.unwrap());
        assert!(!slot.inserted && slot.image.is_none(), "{vendor}: {slot:?}");
        // Ejecting an empty device sends nothing (the BMCs refuse it).
        c.set_virtual_media(MediaKind::Cd, None).await.unwrap();

        let device = &b
            .state
            .profile
            .media
            .devices
            .iter()
            .position(|(_, t)| t.contains(&"CD"))
            .unwrap();
        let id = b.state.profile.media.devices[*device].0;
        assert_eq!(
            b.state.media_log(),
            vec![
                format!("insert {id} {first}"),
                format!("eject {id}"),
                format!("insert {id} {second}"),
                format!("eject {id}"),
            ],
            "{vendor}: the BMC's own record"
        );
    }
}

#[tokio::test]
async fn a_media_kind_no_device_takes_is_refused_with_what_the_bmc_offers() {
    let fleet = fleet_of(&[Vendor::Lenovo], false).await;
    let c = client(&fleet.bmcs[0], options());
    let e = c
        .set_virtual_media(MediaKind::UsbStick, Some("http://127.0.0.1:9/a.img".into()))
        .await
        .unwrap_err();
    assert!(matches!(e, BmcError::Unsupported(_)), "{e:?}");
    assert!(
        e.to_string().contains("USBStick") && e.to_string().contains("CD, DVD"),
        "{e}"
    );
    assert!(fleet.bmcs[0].state.media_log().is_empty());
}

#[tokio::test]
async fn virtual_media_linked_but_not_served_is_looked_for_at_the_managers() {
    // A Dell keeps its devices under the system; here that collection answers 404, and the
    // managers have none: no devices, rather than the 404 (a BMC may link what it does not
    // serve).
    let fleet = fleet_of(&[Vendor::Dell], false).await;
    let b = &fleet.bmcs[0];
    b.state.set_quirks(Quirks {
        fail_paths: vec![(
            "/redfish/v1/Systems/System.Embedded.1/VirtualMedia".into(),
            404,
        )],
        ..Quirks::default()
    });
    let c = client(b, options());
    assert_eq!(c.virtual_media().await.unwrap(), Vec::new());
    let e = c
        .set_virtual_media(MediaKind::Cd, Some("http://127.0.0.1:9/a.iso".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(e, BmcError::Unsupported(_)) && e.to_string().contains("offers: none"),
        "{e}"
    );
}

fn once(mode: Option<BootMode>) -> BootRequest {
    BootRequest {
        device: BootDevice::Pxe,
        persistent: false,
        mode,
    }
}

/// The PATCH holds the target and `Once`; the mode only where the vendor resets it unless it
/// is restated (Supermicro) or a different one is asked for. Read back from the emulator: a
/// UEFI system stays UEFI, a Legacy one stays Legacy.
#[tokio::test]
async fn a_one_time_network_boot_sends_the_smallest_patch_and_keeps_the_mode() {
    let fleet = fleet_of(&[Vendor::Dell, Vendor::Supermicro], false).await;
    let bare = serde_json::json!({"Boot": {
        "BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
    let with = |mode: &str| {
        serde_json::json!({"Boot": {
            "BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once",
            "BootSourceOverrideMode": mode}})
    };
    for (b, restated) in [(&fleet.bmcs[0], false), (&fleet.bmcs[1], true)] {
        let c = client(b, options());
        for (mode, kept) in [("UEFI", BootMode::Uefi), ("Legacy", BootMode::Legacy)] {
            b.state.set_boot_mode(mode);
            let before = b.state.system_patches().len();
            let o = c.set_boot_override(once(None)).await.unwrap();
            assert_eq!(o.mode, Some(kept), "{mode}");
            assert_eq!(
                b.state.snapshot().boot.mode,
                mode,
                "the emulator keeps {mode}"
            );
            let want = if restated { with(mode) } else { bare.clone() };
            assert_eq!(b.state.system_patches()[before..], [want], "{mode}");
            // The mode asked for and already in use is not sent either (unless restated).
            let before = b.state.system_patches().len();
            c.set_boot_override(once(Some(kept))).await.unwrap();
            let want = if restated { with(mode) } else { bare.clone() };
            assert_eq!(b.state.system_patches()[before..], [want], "{mode}");
        }
        // Another mode asked for explicitly is sent, and taken.
        let before = b.state.system_patches().len();
        let o = c
            .set_boot_override(once(Some(BootMode::Uefi)))
            .await
            .unwrap();
        assert_eq!(o.mode, Some(BootMode::Uefi));
        assert_eq!(b.state.system_patches()[before..], [with("UEFI")]);
    }
}

/// A BMC that switches the mode to Legacy on every boot PATCH: the switch is reported as
/// `BootModeNotKept` after one PATCH, which is not sent again to force the mode back, whether
/// the mode was left out (Dell), restated (Supermicro) or asked for.
#[tokio::test]
async fn a_bmc_that_does_not_keep_the_mode_is_reported_not_forced() {
    let fleet = fleet_of(&[Vendor::Dell, Vendor::Supermicro], false).await;
    for b in &fleet.bmcs {
        b.state.set_quirks(Quirks {
            boot_mode_always_legacy: true,
            ..Quirks::default()
        });
        let c = client(b, options());
        let e = c.set_boot_override(once(None)).await.unwrap_err();
        assert!(
            matches!(
                e,
                BmcError::BootModeNotKept {
                    before: Some(BootMode::Uefi),
                    wanted: BootMode::Uefi,
                    after: BootMode::Legacy
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.kind(), "boot_mode_not_kept");
        assert!(!e.is_transient());
        let m = e.to_string();
        assert!(
            m.contains("switched the boot mode from UEFI to Legacy")
                && m.contains("does not send the mode again"),
            "{m}"
        );
        assert_eq!(b.state.system_patches().len(), 1, "one PATCH, not forced");
        // Asked for explicitly on the (now) Legacy system: not taken, reported, sent once.
        let e = c
            .set_boot_override(once(Some(BootMode::Uefi)))
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                BmcError::BootModeNotKept {
                    before: Some(BootMode::Legacy),
                    wanted: BootMode::Uefi,
                    after: BootMode::Legacy
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("still reports boot mode Legacy"),
            "{e}"
        );
        assert_eq!(b.state.system_patches().len(), 2);
    }
}
