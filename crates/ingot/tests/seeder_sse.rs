//! Server-sent events where a BMC refuses push, end to end on the real control plane: `ingot run
//! --controllers seeder` with the events receiver and `--events-max-streams=1`, two local
//! Inventories whose BMCs (ingot's Redfish emulator) take no subscription (full) but serve the
//! EventService's stream. One stream is followed, the other Inventory is only polled and says so
//! once (polled every second, not again); an event at the followed BMC becomes the Node Event
//! within seconds although it is polled hourly, a power change refreshes the Machine's power; the
//! stream dropped by the BMC is opened again (with `Last-Event-ID`) and the next event still
//! arrives; its events disabled, the stream is closed (and followed again once enabled); the
//! Inventory deleted, its stream is closed; the slot freed, the other Inventory's stream is
//! followed, and closed once its BMC takes push.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod push_support;
mod rufio_support;

use std::time::{Duration, Instant};

use ingot_api::rufio::Machine;
use ingot_api::seeder::Inventory;
use ingot_bmc_sim::{EventKnobs, SimBmc};
use ingot_testenv::Operator;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use push_support::*;
use rufio_support::*;
use serde_json::json;

const A: &str = "harvester-sse-a";
const B: &str = "harvester-sse-b";

/// Waits until the operator holds `n` streams and the BMC has `n` open.
async fn wait_streams(ingot: &Operator, bmc: &SimBmc, n: usize, what: &str) {
    wait_for(what, Duration::from_secs(60), || async {
        (ingot.metric_sum("ingot_seeder_event_streams", &[]).await == n as f64
            && bmc.state.event_streams_open() == n)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn server_sent_events_where_push_is_refused() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    clean(&client, &[A, B]).await;

    let fleet = two_bmcs().await;
    // No room for a subscription (400 CreateLimitReachedForResource); the stream is served.
    for bmc in &fleet.bmcs {
        bmc.state.set_event_knobs(EventKnobs {
            max_subscriptions: 0,
            ..EventKnobs::default()
        });
    }
    create_nodes_and_secrets(&client, &[A, B]).await;
    let key_file = temp_dir("sse").join("events.key");
    std::fs::write(&key_file, "k".repeat(48)).unwrap();
    let port = closed_port();
    let kubeconfig = chart_support::install_from_manifests(env.kubeconfig_path(), "seeder");
    let ingot =
        rufio_support::ingot_seeder_with_machine_interval(&kubeconfig, "ingot-sse-test", 600)
            .arg(format!("--events-addr=127.0.0.1:{port}"))
            .arg(format!(
                "--events-url=https://127.0.0.1:{port}/redfish-events"
            ))
            .arg(format!("--events-key-file={}", key_file.display()))
            .arg("--events-max-streams=1")
            .start();

    // Polled hourly: after the first read, only an event can bring the news quickly.
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    for (name, bmc) in [(A, &fleet.bmcs[0]), (B, &fleet.bmcs[1])] {
        inventories
            .create(&PostParams::default(), &inventory(name, bmc, "1h"))
            .await
            .unwrap();
    }

    // One stream (the bound): which Inventory got it is a race; the other is only polled.
    let followed = wait_for(
        "the EventStreamFollowed Event",
        Duration::from_secs(60),
        || async {
            for name in [A, B] {
                if !inventory_events(&client, name, "EventStreamFollowed")
                    .await
                    .is_empty()
                {
                    return Some(name);
                }
            }
            None
        },
    )
    .await;
    let (polled, bmc, other) = if followed == A {
        (B, &fleet.bmcs[0], &fleet.bmcs[1])
    } else {
        (A, &fleet.bmcs[1], &fleet.bmcs[0])
    };
    let refused = wait_for(
        "both EventSubscriptionRefused Events",
        Duration::from_secs(60),
        || async {
            let f = inventory_events(&client, followed, "EventSubscriptionRefused").await;
            let p = inventory_events(&client, polled, "EventSubscriptionRefused").await;
            (!f.is_empty() && !p.is_empty()).then_some((f, p))
        },
    )
    .await;
    assert_eq!(refused.0.len(), 1, "{refused:?}");
    assert!(refused.0[0].contains("limit"), "{refused:?}");
    assert!(
        refused.0[0].contains("server-sent event stream is followed"),
        "{refused:?}"
    );
    assert_eq!(refused.1.len(), 1, "{refused:?}");
    assert!(
        refused.1[0].contains("--events-max-streams") && refused.1[0].contains("every 1h"),
        "{refused:?}"
    );
    assert!(
        inventory_events(&client, polled, "EventStreamFollowed")
            .await
            .is_empty()
    );
    // (The other may have been opened in the race for the one slot, and closed at once: the
    // BMC notices at its next keep-alive.)
    wait_for(
        "one stream, at one BMC",
        Duration::from_secs(60),
        || async {
            (bmc.state.event_streams_open() == 1 && other.state.event_streams_open() == 0)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        ingot.metric_sum("ingot_seeder_event_streams", &[]).await,
        1.0
    );
    assert!(bmc.state.subscriptions().is_empty());

    // The one only polled, now every second: still no room, said once more (the interval is
    // in the message), not at each poll. (kube's recorder counts a repeat of an Event's reason
    // within minutes in its series.)
    set_events(
        &client,
        polled,
        json!({"enabled": true, "pollingInterval": "1s"}),
    )
    .await;
    let said = refusals_after(&client, polled, other, 200).await;
    assert_eq!(said.len(), 1, "{said:?}");
    let times = said[0].series.as_ref().map_or(1, |s| s.count.unwrap_or(1));
    assert!(times <= 2, "said {times} times: {said:?}");
    // Hourly again: it takes no slot freed below until it is asked to.
    set_events(
        &client,
        polled,
        json!({"enabled": true, "pollingInterval": "1h"}),
    )
    .await;
    assert_eq!(other.state.event_streams_open(), 0);
    assert_eq!(
        ingot.metric_sum("ingot_seeder_event_streams", &[]).await,
        1.0
    );

    // A hardware event at the BMC: the Node Event within seconds (the poll is hourly).
    let sent = Instant::now();
    bmc.state.add_log("Critical", "CPU 1 internal error (IERR)");
    wait_for(
        "the streamed event's Node Event",
        Duration::from_secs(15),
        || async {
            node_events(&client, followed)
                .await
                .iter()
                .any(|m| m.contains("CPU 1 internal error"))
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "event at the BMC to Node Event (server-sent): {:?}",
        sent.elapsed()
    );
    assert!(
        ingot
            .metric_sum("ingot_seeder_events_accepted_total", &["source=\"sse\""])
            .await
            >= 1.0
    );

    // A power change at the BMC: the Machine reads off within seconds, although its power is
    // read every ten minutes.
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    force_off(bmc).await;
    let off = Instant::now();
    wait_for(
        "the Machine's power off",
        Duration::from_secs(15),
        || async {
            let m = machines.get(followed).await.ok()?;
            (m.status?.power_state.as_deref() == Some("off")).then_some(())
        },
    )
    .await;
    eprintln!(
        "power off at the BMC to the Machine's status (server-sent): {:?}",
        off.elapsed()
    );

    // The BMC drops its streams: the stream is opened again, with the last id it gave, and the
    // next event still arrives.
    let opens = bmc.state.event_stream_opens().len();
    bmc.state.drop_event_streams();
    let reopened = wait_for(
        "the stream opened again",
        Duration::from_secs(30),
        || async {
            let o = bmc.state.event_stream_opens();
            (o.len() > opens && bmc.state.event_streams_open() == 1).then_some(o)
        },
    )
    .await;
    assert!(
        reopened.last().unwrap().is_some(),
        "no Last-Event-ID: {reopened:?}"
    );
    bmc.state
        .add_log("Warning", "Fan 3 speed below lower threshold");
    wait_for(
        "the event after the reconnection",
        Duration::from_secs(15),
        || async {
            node_events(&client, followed)
                .await
                .iter()
                .any(|m| m.contains("Fan 3 speed below"))
                .then_some(())
        },
    )
    .await;

    // The polled one holds no stream.
    assert_eq!(other.state.event_streams_open(), 0);

    // Its events disabled: the stream is closed; enabled again: followed again.
    set_events(
        &client,
        followed,
        json!({"enabled": false, "pollingInterval": "1h"}),
    )
    .await;
    wait_streams(&ingot, bmc, 0, "the stream closed (events disabled)").await;
    set_events(
        &client,
        followed,
        json!({"enabled": true, "pollingInterval": "1h"}),
    )
    .await;
    wait_streams(&ingot, bmc, 1, "the stream followed again").await;

    // The Inventory deleted: its stream is closed (at the operator, and at the BMC).
    inventories
        .delete(followed, &DeleteParams::default())
        .await
        .unwrap();
    wait_streams(&ingot, bmc, 0, "the stream closed").await;

    // The slot is free: the other Inventory's stream is followed at its next poll (now every
    // 2 s), until its BMC takes push: then the subscription is made and the stream closed.
    set_events(
        &client,
        polled,
        json!({"enabled": true, "pollingInterval": "2s"}),
    )
    .await;
    wait_for(
        "the other Inventory's stream",
        Duration::from_secs(60),
        || async {
            let followed = !inventory_events(&client, polled, "EventStreamFollowed")
                .await
                .is_empty();
            (followed && other.state.event_streams_open() == 1).then_some(())
        },
    )
    .await;
    other.state.set_event_knobs(EventKnobs::default());
    wait_for(
        "push taken, the stream closed",
        Duration::from_secs(60),
        || async {
            (other.state.subscriptions().len() == 1
                && ingot.metric_sum("ingot_seeder_event_streams", &[]).await == 0.0
                && other.state.event_streams_open() == 0)
                .then_some(())
        },
    )
    .await;

    assert!(
        !ingot.log().contains(PASSWORD),
        "the BMC's password was logged"
    );

    ingot.kill();
    clean(&client, &[A, B]).await;
}
