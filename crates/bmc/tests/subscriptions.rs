//! Push subscriptions through the Redfish client and the session manager, against ingot's BMC
//! emulator (every vendor profile): ours found again by Destination + Context (Dell and HPE leave
//! `EventFormatType` out of a GET), created once, re-created after a BMC reset, deleted without
//! touching another's; our stale copies deleted when ours is ensured, and only those; refusals
//! typed, the secret header never in an error or `Debug`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::bmc_config;
use ingot_bmc::manager::{ManagerOptions, SessionManager};
use ingot_bmc::redfish::{RedfishClient, RedfishOptions};
use ingot_bmc::*;
use ingot_bmc_sim::{BmcSpec, EventKnobs, Fleet, FleetOptions, SimBmc, Vendor};
use std::time::Duration;

const SECRET: &str = "do-not-print-7f3a";

async fn one(vendor: Vendor) -> Fleet {
    Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            vendor,
            ..BmcSpec::default()
        }],
    )
    .await
    .expect("fleet")
}

fn client(b: &SimBmc) -> RedfishClient {
    let ep = Endpoint::parse(&b.url(), None).expect("endpoint");
    let options = RedfishOptions {
        timeout: Duration::from_secs(5),
        ..RedfishOptions::default()
    };
    RedfishClient::new(&ep, "admin", Password::new("password"), options).expect("client")
}

fn ours(context: &str) -> EventSubscription {
    EventSubscription {
        // Nothing listens there: the BMC does not test the destination on create.
        destination: "https://127.0.0.1:9/redfish-events".into(),
        context: context.into(),
        headers: vec![("X-Ingot-Event-Secret".into(), Password::new(SECRET))],
    }
}

#[tokio::test]
async fn ours_is_found_created_once_recreated_after_a_reset_and_deleted() {
    for vendor in Vendor::ALL {
        let fleet = one(vendor).await;
        let bmc = &fleet.bmcs[0];
        let c = client(bmc);
        let sub = ours("default/node-1");
        let Subscribed::Created(uri) = c
            .ensure_event_subscription(&sub, &no_stale_context)
            .await
            .unwrap()
        else {
            panic!("{vendor}: not created");
        };
        let held = bmc.state.subscriptions();
        assert_eq!(held.len(), 1, "{vendor}");
        assert_eq!(held[0].destination, sub.destination);
        assert_eq!(held[0].context.as_deref(), Some("default/node-1"));
        assert_eq!(held[0].header_names, ["X-Ingot-Event-Secret"]);
        assert!(
            uri.ends_with(&format!("/Subscriptions/{}", held[0].id)),
            "{uri}"
        );

        // Found again, whether or not the BMC reads back EventFormatType: nothing created.
        assert_eq!(
            c.ensure_event_subscription(&sub, &no_stale_context)
                .await
                .unwrap(),
            Subscribed::Found(uri.clone()),
            "{vendor}"
        );
        // Another context at the same destination is another subscription.
        let other = ours("default/node-2");
        assert!(matches!(
            c.ensure_event_subscription(&other, &no_stale_context)
                .await
                .unwrap(),
            Subscribed::Created(_)
        ));
        assert_eq!(bmc.state.subscriptions().len(), 2, "{vendor}");

        // A BMC reset loses them: the next ensure creates ours again.
        bmc.state.reset();
        assert!(matches!(
            c.ensure_event_subscription(&sub, &no_stale_context)
                .await
                .unwrap(),
            Subscribed::Created(_)
        ));
        assert!(matches!(
            c.ensure_event_subscription(&other, &no_stale_context)
                .await
                .unwrap(),
            Subscribed::Created(_)
        ));

        assert_eq!(
            c.remove_event_subscription(&sub.destination, &sub.context)
                .await
                .unwrap(),
            1
        );
        let left = bmc.state.subscriptions();
        assert_eq!(left.len(), 1, "{vendor}");
        assert_eq!(left[0].context.as_deref(), Some("default/node-2"));
        // Removing what is not there is no error.
        assert_eq!(
            c.remove_event_subscription(&sub.destination, &sub.context)
                .await
                .unwrap(),
            0
        );
    }
}

#[tokio::test]
async fn refusals_are_typed_and_never_show_the_secret() {
    let sub = ours("default/node-1");
    assert!(!format!("{sub:?}").contains(SECRET), "{sub:?}");

    // A full BMC (Dell OME keeps 8): its 400, without the header value.
    let fleet = one(Vendor::Dell).await;
    let bmc = &fleet.bmcs[0];
    bmc.state.set_event_knobs(EventKnobs {
        max_subscriptions: 1,
        ..EventKnobs::default()
    });
    let c = client(bmc);
    c.ensure_event_subscription(&ours("someone-else"), &no_stale_context)
        .await
        .unwrap();
    let e = c
        .ensure_event_subscription(&sub, &no_stale_context)
        .await
        .unwrap_err();
    assert!(matches!(e, BmcError::Http { status: 400, .. }), "{e:?}");
    let shown = format!("{e} {e:?}");
    assert!(shown.contains("limit"), "{shown}");
    assert!(!shown.contains(SECRET), "{shown}");

    // A disabled EventService: unsupported, nothing created.
    let mut q = bmc.state.quirks();
    q.event_service_disabled = true;
    bmc.state.set_quirks(q);
    bmc.state.reset();
    let e = client(bmc)
        .ensure_event_subscription(&sub, &no_stale_context)
        .await
        .unwrap_err();
    assert!(matches!(e, BmcError::Unsupported(_)), "{e:?}");
    assert!(bmc.state.subscriptions().is_empty());
}

#[tokio::test]
async fn the_session_manager_passes_them_through() {
    let fleet = one(Vendor::Hpe).await;
    let manager = SessionManager::new(ManagerOptions::default());
    let b = manager.bmc(bmc_config(&fleet.bmcs[0].url()));
    let sub = ours("default/node-1");
    assert!(matches!(
        b.ensure_event_subscription(&sub, &no_stale_context)
            .await
            .unwrap(),
        Subscribed::Created(_)
    ));
    assert!(matches!(
        b.ensure_event_subscription(&sub, &no_stale_context)
            .await
            .unwrap(),
        Subscribed::Found(_)
    ));
    assert_eq!(
        b.remove_event_subscription(&sub.destination, &sub.context)
            .await
            .unwrap(),
        1
    );
    assert!(fleet.bmcs[0].state.subscriptions().is_empty());
    manager.shutdown().await;
}

#[tokio::test]
async fn stale_copies_at_our_destination_are_deleted_and_only_those() {
    let fleet = one(Vendor::Dell).await;
    let bmc = &fleet.bmcs[0];
    // A full BMC (3 slots, all taken): the stale copy holds the slot ours needs.
    bmc.state.set_event_knobs(EventKnobs {
        max_subscriptions: 3,
        ..EventKnobs::default()
    });
    let c = client(bmc);
    let old = ours("mine:node-1:old-key");
    let mut elsewhere = ours("mine:node-1:old-key");
    elsewhere.destination = "https://127.0.0.1:10/another-receiver".into();
    let other = ours("mine:node-2:old-key");
    for s in [&old, &elsewhere, &other] {
        c.ensure_event_subscription(s, &no_stale_context)
            .await
            .unwrap();
    }
    let new = ours("mine:node-1:new-key");
    let stale = |context: &str| context.starts_with("mine:node-1:");
    let full = c
        .ensure_event_subscription(&new, &no_stale_context)
        .await
        .unwrap_err();
    assert!(
        matches!(full, BmcError::Http { status: 400, .. }),
        "{full:?}"
    );
    assert_eq!(bmc.state.subscriptions().len(), 3);

    let Subscribed::Created(uri) = c.ensure_event_subscription(&new, &stale).await.unwrap() else {
        panic!("not created");
    };
    let mut left: Vec<(String, Option<String>)> = bmc
        .state
        .subscriptions()
        .into_iter()
        .map(|s| (s.destination, s.context))
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            (
                elsewhere.destination.clone(),
                Some("mine:node-1:old-key".into())
            ),
            (old.destination.clone(), Some("mine:node-1:new-key".into())),
            (old.destination.clone(), Some("mine:node-2:old-key".into())),
        ]
    );
    // Found again: nothing deleted, nothing made.
    assert_eq!(
        c.ensure_event_subscription(&new, &stale).await.unwrap(),
        Subscribed::Found(uri)
    );
    assert_eq!(bmc.state.subscriptions().len(), 3);
}
