//! A pool's minimum size on premises, on the real API server: `ingot run --controllers
//! provisioning` reads each ready Inventory's size once from its BMC (emulated Redfish BMCs
//! of three vendors, `ingot-bmc-sim`, over TLS) and records it on the Inventory, and an
//! `InventoryCloud` asking for a minimum takes only the Inventories that have it, saying of the
//! others what they lack.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod onprem_support;

use std::path::Path;
use std::time::Duration;

use ingot_api::seeder::Inventory;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_controllers::onprem::cloud::{InventoryCloud, Settings};
use ingot_controllers::onprem::size::{
    CORES_ANNOTATION, DISK_ANNOTATION, MEMORY_ANNOTATION, Minimum, SIZE_READ_ANNOTATION,
};
use ingot_controllers::provisioning::addresses::PoolRef;
use ingot_controllers::provisioning::node::phase::BootMedia;
use ingot_metal::{BareMetalCloud, Boot, CreateServer, Error, Shortage};
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::wait_for;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use onprem_support::{create_inventories, object};
use serde_json::json;

const OWNER: &str = "pool-sized";
const WAIT: Duration = Duration::from_secs(120);

fn request(hostname: &str) -> CreateServer {
    CreateServer::new(
        hostname,
        "ignored-plan",
        "ignored-metro",
        OWNER,
        Boot::Ipxe {
            script_url: Some(format!("http://127.0.0.1:9/ipxe/{hostname}.ipxe")),
            always: false,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_inventories_as_large_as_the_minimum_are_taken() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("inventory-sizes").await.unwrap();
    // node0: Dell, 2 × 28 cores, 256 GiB; node1: HPE, 2 × 16 cores, 128 GiB; node2: Lenovo,
    // 2 × 24 cores, 128 GiB; each with 960 GB disks.
    let specs = [Vendor::Dell, Vendor::Hpe, Vendor::Lenovo].map(|vendor| BmcSpec {
        vendor,
        initial_power_on: false,
        ..BmcSpec::default()
    });
    let fleet = Fleet::start(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        specs.to_vec(),
    )
    .await
    .unwrap();
    create_inventories(
        &client,
        &ns,
        &fleet,
        ("10.33.0.0/29", "10.33.0.1"),
        |_| json!({"rack": "s"}),
    )
    .await;
    let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("inventory-sizes")
        .kubeconfig(Path::new(env.kubeconfig_path()))
        .arg(format!("--lease-namespace={ns}"))
        .arg(format!("--lease-name=ingot-{ns}"))
        .arg("--lease-duration-seconds=3")
        .controllers("provisioning")
        .arg(format!("--provisioning-namespace={ns}"))
        .arg(format!("--seeder-namespace={ns}"))
        .arg(format!("--rufio-namespace={ns}"))
        .arg("--rufio-machine-interval-seconds=1")
        .arg("--rufio-task-poll-seconds=0.3")
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();

    // Each size read from its BMC once it is ready, and recorded on its Inventory.
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), &ns);
    for (name, cores, memory) in [
        ("node0", "56", "256"),
        ("node1", "32", "128"),
        ("node2", "48", "128"),
    ] {
        let read = wait_for(&format!("{name}'s size read"), WAIT, || async {
            let i = inventories.get(name).await.ok()?;
            i.annotations()
                .contains_key(SIZE_READ_ANNOTATION)
                .then_some(i)
        })
        .await;
        let annotations = read.annotations();
        assert_eq!(annotations[CORES_ANNOTATION], cores, "{name}");
        assert_eq!(annotations[MEMORY_ANNOTATION], memory, "{name}");
        assert_eq!(annotations[DISK_ANNOTATION], "894", "{name}");
    }

    let cloud = |minimum: Minimum| {
        InventoryCloud::new(
            client.clone(),
            Settings {
                namespaces: vec![ns.clone()],
                selector: object(json!({"matchLabels": {"rack": "s"}})),
                address_pool: PoolRef {
                    namespace: ns.clone(),
                    name: "nodes".to_owned(),
                },
                off_wait: Duration::from_secs(60),
                poll: Duration::from_millis(250),
                owner: Some(OWNER.to_owned()),
                boot_url: None,
                boot_media: BootMedia::Pxe,
                wipe: Default::default(),
                wipe_image: None,
                minimum,
                crash_point: None,
            },
        )
        .unwrap()
    };
    // 48 cores and 192 GiB: only the Dell has both; the others are named with what they lack.
    let large = cloud(Minimum {
        cores: Some(48),
        memory_gib: Some(192),
        disk_gib: Some(500),
    });
    let taken = large.create_server(&request("big-1")).await.unwrap();
    assert_eq!(taken.id, format!("{ns}/node0"));
    let none = large.create_server(&request("big-2")).await.unwrap_err();
    let message = none.to_string();
    assert!(
        matches!(
            none,
            Error::NoServer {
                why: Shortage::NoneMatching,
                ..
            }
        ) && message.contains("has 48 cores, 192 GiB of memory, a 500 GiB disk")
            && message.contains(&format!("{ns}/node1 (32 cores, 128 GiB of memory)"))
            && message.contains(&format!("{ns}/node2 (128 GiB of memory)"))
            && message.contains("lower inventoryMinimum"),
        "{message}"
    );
    // 40 cores: the Lenovo.
    let forty = cloud(Minimum {
        cores: Some(40),
        ..Minimum::default()
    })
    .create_server(&request("mid-1"))
    .await
    .unwrap();
    assert_eq!(forty.id, format!("{ns}/node2"));

    // Deleting the time of the read has the size read again (after a hardware change): what
    // was recorded is replaced by what the BMC reports.
    inventories
        .patch(
            "node1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                SIZE_READ_ANNOTATION: null, CORES_ANNOTATION: "1"}}})),
        )
        .await
        .unwrap();
    let again = wait_for("node1's size read again", WAIT, || async {
        let i = inventories.get("node1").await.ok()?;
        i.annotations()
            .contains_key(SIZE_READ_ANNOTATION)
            .then_some(i)
    })
    .await;
    assert_eq!(again.annotations()[CORES_ANNOTATION], "32");
    assert_eq!(again.annotations()[MEMORY_ANNOTATION], "128");
    operator.terminate();
}
