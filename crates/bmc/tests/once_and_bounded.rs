//! A destructive action reaches the BMC at most once, and what a BMC sends is bounded: the
//! Redfish client against ingot's BMC emulator with faults (a connection dropped after the
//! action was carried out, huge bodies, events and collection pages), and the IPMI adapter
//! against the IPMI emulator in its mode without de-duplication of retransmissions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::bmc_config;
use futures::StreamExt;
use ingot_bmc::redfish::{MAX_BODY_BYTES, MAX_PAGE_MEMBERS, RedfishClient, RedfishOptions};
use ingot_bmc::*;
use ingot_bmc_sim::{BmcSpec, Fault, Fleet, FleetOptions, SimBmc};
use std::time::Duration;

async fn one(power_delay: Duration) -> Fleet {
    Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            power_delay,
            ..BmcSpec::default()
        }],
    )
    .await
    .expect("fleet")
}

fn client(b: &SimBmc) -> RedfishClient {
    let ep = Endpoint::parse(&b.url(), None).expect("endpoint");
    RedfishClient::new(
        &ep,
        "admin",
        Password::new("password"),
        RedfishOptions {
            timeout: Duration::from_secs(5),
            ..RedfishOptions::default()
        },
    )
    .expect("client")
}

#[tokio::test]
async fn a_reset_whose_connection_drops_after_it_was_carried_out_is_sent_once() {
    // The transition lasts long enough that the state read after the lost answer shows it.
    let fleet = one(Duration::from_secs(3)).await;
    let b = &fleet.bmcs[0];
    let c = client(b);
    assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    b.state.set_fault(Some(Fault::DropAfterAction));
    let outcome = c.power(PowerAction::Reset).await.unwrap();
    assert_eq!(outcome.sent, vec!["ForceRestart"]);
    assert_eq!(b.state.reset_requests(), vec!["ForceRestart"], "sent once");
    assert_eq!(b.state.snapshot().resets, 1);
    b.state.set_fault(None);
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_post_lost_after_sending_is_maybe_sent_and_a_refused_connection_is_unreachable() {
    let fleet = one(Duration::from_secs(3)).await;
    let b = &fleet.bmcs[0];
    let c = client(b);
    assert_eq!(c.power_state().await.unwrap(), PowerState::On);
    // A boot override PATCH carried out, its answer lost: the error says it may be done.
    b.state.set_fault(Some(Fault::DropAfterAction));
    let err = c
        .set_boot_override(BootRequest {
            device: BootDevice::Pxe,
            persistent: false,
            mode: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "maybe_sent", "{err:?}");
    assert!(err.may_have_acted());
    assert!(err.to_string().contains("may have carried it out"), "{err}");
    b.state.set_fault(None);
    assert_eq!(b.state.snapshot().boot.target, "Pxe", "it was carried out");
    // Nothing listens: the connection is refused, the request never left.
    let addr = b.addr;
    drop(c);
    drop(fleet);
    let ep = Endpoint::parse(&format!("http://{addr}"), None).unwrap();
    let c = RedfishClient::new(
        &ep,
        "admin",
        Password::new("password"),
        RedfishOptions {
            timeout: Duration::from_secs(5),
            ..RedfishOptions::default()
        },
    )
    .unwrap();
    let err = c.power(PowerAction::Reset).await.unwrap_err();
    assert_eq!(err.kind(), "unreachable", "{err:?}");
    assert!(!err.may_have_acted());
}

#[tokio::test]
async fn a_huge_body_fails_with_a_clear_error() {
    let fleet = one(Duration::from_millis(100)).await;
    let b = &fleet.bmcs[0];
    b.state.set_fault(Some(Fault::HugeBody {
        bytes: 8 * MAX_BODY_BYTES as u64,
    }));
    let err = client(b).power_state().await.unwrap_err();
    assert_eq!(err.kind(), "too_large", "{err:?}");
    assert!(err.to_string().contains("larger than 8 MiB"), "{err}");
}

#[tokio::test]
async fn a_huge_collection_page_fails_with_a_clear_error() {
    let fleet = one(Duration::from_millis(100)).await;
    let b = &fleet.bmcs[0];
    b.state.set_fault(Some(Fault::HugeCollection {
        members: MAX_PAGE_MEMBERS + 1,
    }));
    let err = client(b).power_state().await.unwrap_err();
    assert_eq!(err.kind(), "too_large", "{err:?}");
    assert!(
        err.to_string()
            .contains("/redfish/v1/Systems lists 10001 members in one page"),
        "{err}"
    );
    // A page at the bound is read.
    b.state.set_fault(Some(Fault::HugeCollection {
        members: MAX_PAGE_MEMBERS,
    }));
    let err = client(b).power_state().await.unwrap_err();
    assert_ne!(err.kind(), "too_large", "{err:?}");
}

#[tokio::test]
async fn a_huge_event_ends_the_stream_with_a_clear_error() {
    let fleet = one(Duration::from_millis(100)).await;
    let b = &fleet.bmcs[0];
    b.state.set_fault(Some(Fault::HugeEvent { bytes: 4 << 20 }));
    let c = client(b);
    let events = c.event_stream(Duration::from_secs(20)).await.unwrap();
    let mut events = Box::pin(events);
    let first = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("an answer within the deadline")
        .expect("an item");
    let err = first.unwrap_err();
    assert_eq!(err.kind(), "too_large", "{err:?}");
    assert!(err.to_string().contains("larger than 1024 KiB"), "{err}");
    assert!(events.next().await.is_none(), "the stream ended");
}

async fn ipmi_bmc(
    handle: &ingot_ipmi_sim::BmcHandle,
    timeout: Duration,
) -> ingot_bmc::ipmi::IpmiBmc {
    let mut cfg = bmc_config(&handle.addr().to_string());
    cfg.protocol = Some(Protocol::Ipmi);
    ingot_bmc::ipmi::IpmiBmc::connect(
        &cfg,
        &ingot_bmc::ipmi::IpmiOptions {
            timeout,
            retries: 3,
            keepalive: None,
            ..ingot_bmc::ipmi::IpmiOptions::default()
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_ipmi_hard_reset_without_answer_runs_once_and_fails_as_maybe_carried_out() {
    let mut icfg = ingot_ipmi_sim::FleetConfig::uniform(1, "password");
    icfg.bmcs[0].power_on = true;
    let fleet = ingot_ipmi_sim::serve(icfg).await.unwrap();
    let handle = &fleet.bmcs()[0];
    let bmc = ipmi_bmc(handle, Duration::from_millis(150)).await;
    // A BMC that carries out every copy it receives, and whose answers are lost.
    handle.set_faults(ingot_ipmi_sim::Faults {
        no_dedup: true,
        mute_commands: vec![(0x00, 0x02)],
        ..ingot_ipmi_sim::Faults::default()
    });
    let err = bmc.power(PowerAction::Reset).await.unwrap_err();
    // A hard reset leaves the power on: the state cannot tell, the error stands.
    assert!(err.may_have_acted(), "{err:?}");
    assert_eq!(
        handle.stats().chassis_controls,
        vec![0x03],
        "the hard reset ran once"
    );
    handle.set_faults(ingot_ipmi_sim::Faults::default());
    bmc.close().await.unwrap();
}

#[tokio::test]
async fn an_ipmi_power_cycle_without_answer_is_read_from_the_power_state() {
    let mut icfg = ingot_ipmi_sim::FleetConfig::uniform(1, "password");
    icfg.bmcs[0].power_on = true;
    // Off at once, on again much later: the state read after the lost answer shows it.
    icfg.bmcs[0].cycle_delay = Duration::from_secs(30);
    let fleet = ingot_ipmi_sim::serve(icfg).await.unwrap();
    let handle = &fleet.bmcs()[0];
    let bmc = ipmi_bmc(handle, Duration::from_millis(150)).await;
    handle.set_faults(ingot_ipmi_sim::Faults {
        no_dedup: true,
        mute_commands: vec![(0x00, 0x02)],
        ..ingot_ipmi_sim::Faults::default()
    });
    let outcome = bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(outcome.sent, vec!["power cycle"]);
    assert_eq!(handle.stats().chassis_controls, vec![0x02], "sent once");
    handle.set_faults(ingot_ipmi_sim::Faults::default());
    bmc.close().await.unwrap();
}
