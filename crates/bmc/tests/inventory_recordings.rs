//! The inventory mapping's test data (`src/redfish/inventory/testdata/`) is what the client
//! reads from the emulator's vendor profiles today: a change to a profile or to what the client
//! fetches shows here, and the recording is made again with the `record_inventory` example.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingot_bmc::redfish::fuzzing::inventory_documents;
use ingot_bmc::redfish::{RedfishClient, RedfishOptions};
use ingot_bmc::{Endpoint, Password};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use serde_json::Value;

async fn check(vendor: Vendor, recorded: &str) {
    let spec = BmcSpec {
        vendor,
        ..BmcSpec::default()
    };
    let fleet = Fleet::start(FleetOptions::default(), vec![spec.clone()])
        .await
        .unwrap();
    let endpoint = Endpoint::parse(&fleet.bmcs[0].url(), None).unwrap();
    let client = RedfishClient::new(
        &endpoint,
        spec.username,
        Password::new(spec.password),
        RedfishOptions::default(),
    )
    .unwrap();
    let live = inventory_documents(&client).await.unwrap();
    let recorded: Value = serde_json::from_str(recorded).unwrap();
    assert!(
        live == recorded,
        "the {vendor} profile no longer serves what src/redfish/inventory/testdata/{vendor}.json \
         holds; record it again: cargo run -p ingot-bmc --example record_inventory -- sim {vendor}"
    );
}

#[tokio::test]
async fn the_dell_recording_is_what_the_dell_profile_serves() {
    check(
        Vendor::Dell,
        include_str!("../src/redfish/inventory/testdata/dell.json"),
    )
    .await;
}

#[tokio::test]
async fn the_hpe_recording_is_what_the_hpe_profile_serves() {
    check(
        Vendor::Hpe,
        include_str!("../src/redfish/inventory/testdata/hpe.json"),
    )
    .await;
}

#[tokio::test]
async fn the_lenovo_recording_is_what_the_lenovo_profile_serves() {
    check(
        Vendor::Lenovo,
        include_str!("../src/redfish/inventory/testdata/lenovo.json"),
    )
    .await;
}

#[tokio::test]
async fn the_supermicro_recording_is_what_the_supermicro_profile_serves() {
    check(
        Vendor::Supermicro,
        include_str!("../src/redfish/inventory/testdata/supermicro.json"),
    )
    .await;
}
