//! Seeder's full mode end to end over IPMI: a Cluster of three Inventories whose BMCs are IPMI
//! ones (`ingot-ipmi-sim`: RMCP+ lanplus, a chassis power state machine with 2 s power
//! transitions, boot flags "next boot only" consumed on power-up), named as a Seeder user names
//! an IPMI BMC (`baseboardSpec.connection`: the host and the BMC's UDP port, no scheme; ingot's
//! rufio finds no Redfish there and detects IPMI). The servers behind them
//! (`ingot-boot-sim`'s `ServerFleet`) PXE-boot from ingot's boot server when their firmware
//! boots the override, install, call the webhook, reboot from disk and form the new cluster in
//! a second kube-apiserver bound to the Cluster's VIP. Two servers are UEFI machines whose BMCs
//! report no valid boot flags; the third a Legacy machine whose BMC holds a persistent Legacy
//! boot-to-disk override. What is asserted is read from the BMCs (boot records, boot flags
//! ingot wrote, chassis controls), the new cluster's Nodes and the AddressPools.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod provisioning_support;

use std::collections::BTreeMap;
use std::time::Duration;

use ingot_api::seeder::{Cluster, Inventory};
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig};
use ingot_ipmi_sim::{BmcHandle, BootRecord, FleetConfig};
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::harness::wait_for;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use provisioning_support::{
    VIP, WAIT, cluster_manifest, free_port, object, service_account, target,
};
use serde_json::{Value, json};

const NODE_CIDR: &str = "127.0.26.0/24";
const GATEWAY: &str = "127.0.26.1";
const PASSWORD: &str = "ipmi-password-26";
/// The Legacy machine.
const LEGACY: usize = 2;

fn condition(inventory: &Inventory, type_: &str) -> Option<String> {
    inventory
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn pxe_boots(bmc: &BmcHandle) -> Vec<BootRecord> {
    bmc.boots()
        .into_iter()
        .filter(|b| b.device == "pxe")
        .collect()
}

async fn create(client: &Client, ns: &str, value: Value) {
    let kind = value["kind"].as_str().unwrap().to_owned();
    let pp = PostParams::default();
    let result = match kind.as_str() {
        "Secret" => Api::<Secret>::namespaced(client.clone(), ns)
            .create(&pp, &object(value))
            .await
            .map(drop),
        "AddressPool" => Api::<ingot_api::seeder::AddressPool>::namespaced(client.clone(), ns)
            .create(&pp, &object(value))
            .await
            .map(drop),
        "Inventory" => Api::<Inventory>::namespaced(client.clone(), ns)
            .create(&pp, &object(value))
            .await
            .map(drop),
        _ => Api::<Cluster>::namespaced(client.clone(), ns)
            .create(&pp, &object(value))
            .await
            .map(drop),
    };
    result.unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
}

async fn allocations(client: &Client, ns: &str, pool: &str) -> BTreeMap<String, String> {
    let pool = Api::<ingot_api::seeder::AddressPool>::namespaced(client.clone(), ns)
        .get(pool)
        .await
        .unwrap();
    pool.status
        .unwrap_or_default()
        .address_allocation
        .into_iter()
        .map(|(address, owner)| (owner.name, address))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_is_provisioned_through_ipmi_bmcs_in_each_server_s_boot_mode() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("prov-ipmi").await.unwrap();
    let kubeconfig = service_account(env.kubeconfig_path()).clone();
    let plane = target().await;
    let target_env = ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
        .await
        .unwrap();

    let mut config = FleetConfig::uniform(3, PASSWORD);
    for bmc in &mut config.bmcs {
        bmc.power_delay = Duration::from_secs(2);
    }
    // A Legacy machine whose BMC holds a persistent Legacy boot-to-disk override (valid,
    // persistent, EFI bit clear; selector 2): ingot reads Legacy from it and keeps it.
    config.bmcs[LEGACY].uefi = false;
    config.bmcs[LEGACY].boot_flags = [0xC0, 0x08, 0, 0, 0];
    let fleet = ingot_ipmi_sim::serve(config).await.unwrap();
    let bmcs = fleet.bmcs().to_vec();

    let port = free_port();
    let boot = format!("http://127.0.0.1:{port}");
    let mut server_config = ServerFleetConfig::new(format!("{boot}/boot"), target_env.config());
    server_config.install_time = Duration::from_secs(3);
    server_config.heartbeat_interval = Duration::from_secs(1);
    let servers = ServerFleet::ipmi(server_config, bmcs.clone()).unwrap();
    let _running = servers.start();
    let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("provisioned-ipmi")
        .kubeconfig(&kubeconfig)
        .arg(format!(
            "--lease-namespace={}",
            chart_support::MANIFESTS_NAMESPACE
        ))
        .arg(format!("--lease-name=ingot-{ns}"))
        .arg("--lease-duration-seconds=3")
        .controllers("provisioning")
        .arg(format!("--provisioning-namespace={ns}"))
        .arg(format!("--seeder-namespace={ns}"))
        .arg(format!("--rufio-namespace={ns}"))
        .arg(format!("--boot-addr=127.0.0.1:{port}"))
        .arg(format!("--boot-url={boot}"))
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();

    create(
        &client,
        &ns,
        json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes"},
            "spec": {"cidr": NODE_CIDR, "gateway": GATEWAY}
        }),
    )
    .await;
    create(
        &client,
        &ns,
        json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "vip"},
            "spec": {"cidr": format!("{VIP}/32"), "gateway": "127.0.10.254", "netmask": "255.255.255.0"}
        }),
    )
    .await;
    let mut names = Vec::new();
    for (i, bmc) in bmcs.iter().enumerate() {
        let name = format!("ipmi{i}");
        create(
            &client,
            &ns,
            json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                "stringData": {"username": "admin", "password": PASSWORD}
            }),
        )
        .await;
        // An IPMI BMC as a Seeder user writes it: the host, the BMC's (UDP) port.
        create(
            &client,
            &ns,
            json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "metadata": {"name": name},
                "spec": {
                    "primaryDisk": "/dev/sda",
                    "managementInterfaceMacAddress": bmc.mac(0),
                    "baseboardSpec": {"connection": {
                        "host": "127.0.0.1", "port": bmc.addr().port(),
                        "insecureTLS": true,
                        "authSecretRef": {"name": name, "namespace": ns}}}
                }
            }),
        )
        .await;
        names.push(name);
    }
    create(
        &client,
        &ns,
        cluster_manifest(&ns, &names, plane.api_url(), "127.0.26.53"),
    )
    .await;

    // The Cluster runs.
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), &ns);
    let running = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(c) = clusters.get("first").await
                && c.status.as_ref().and_then(|s| s.status.as_deref()) == Some("clusterRunning")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    if running.is_err() {
        let cluster = clusters.get("first").await.ok().map(|c| c.status);
        let inv: Vec<_> = inventories
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|i| (i.metadata.name, i.status))
            .collect();
        panic!(
            "Cluster first not clusterRunning after {WAIT:?}: {cluster:#?}\n{inv:#?}\nservers: {:#?}\noperator: {}",
            servers.servers(),
            operator.log_tail()
        );
    }

    // Every Node of the new cluster, at its server's address.
    let node_list = Api::<Node>::all(target_env.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap();
    for name in &names {
        let inventory = inventories.get(name).await.unwrap();
        assert_eq!(
            condition(&inventory, "harvesterInstalled").as_deref(),
            Some("True"),
            "{name}"
        );
        let address = inventory.status.unwrap().pxe_boot_config.address.unwrap();
        assert!(address.starts_with("127.0.26."), "{name}: {address}");
        assert!(
            node_list.items.iter().any(|n| n
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .is_some_and(|a| a.iter().any(|a| a.address == address))),
            "no Node of the new cluster has {name}'s address {address}"
        );
    }
    // One webhook and one script per server.
    for status in servers.servers() {
        assert_eq!(status.webhooks_sent, 1, "server {}", status.index);
        assert_eq!(status.script_fetches, 1, "server {}", status.index);
    }
    // Each BMC: exactly one network boot, by the override ingot wrote, in the server's mode;
    // then the disk, in that mode too.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (i, bmc) in bmcs.iter().enumerate() {
        let uefi = i != LEGACY;
        let pxe = pxe_boots(bmc);
        assert_eq!(pxe.len(), 1, "server {i}: network boots {pxe:?}");
        let pxe = &pxe[0];
        assert!(pxe.override_applied, "server {i}");
        assert_eq!(pxe.efi, uefi, "server {i} network-booted in the wrong mode");
        assert_eq!(
            pxe.flags[0] & 0xE0,
            if uefi { 0xA0 } else { 0x80 },
            "server {i}: boot flags ingot sent {:02x?} (valid, next boot only, EFI bit {})",
            pxe.flags,
            if uefi { "set" } else { "clear" }
        );
        assert_eq!(pxe.flags[1] >> 2 & 0x0F, 1, "server {i}: not PXE");
        let boots = bmc.boots();
        let last = boots.last().unwrap();
        assert_eq!(last.device, "disk", "server {i}: {boots:?}");
        assert_eq!(
            last.efi, uefi,
            "server {i} booted its disk in the wrong mode"
        );
        assert!(bmc.power_on(), "server {i} is off");
    }

    // A node removed is powered off over IPMI before its address is freed.
    let removed = names[LEGACY].clone();
    assert!(
        allocations(&client, &ns, "nodes")
            .await
            .contains_key(&removed)
    );
    let controls_before = bmcs[LEGACY].stats().chassis_controls.len();
    let cluster = clusters.get("first").await.unwrap();
    let kept: Vec<Value> = serde_json::to_value(&cluster.spec.nodes)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["inventoryReference"]["name"] != json!(removed))
        .cloned()
        .collect();
    assert_eq!(kept.len(), 2);
    let removed_entry = serde_json::to_value(&cluster.spec.nodes).unwrap()[LEGACY].clone();
    assert_eq!(removed_entry["inventoryReference"]["name"], json!(removed));
    clusters
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodes": kept}})),
        )
        .await
        .unwrap();
    let freed = wait_for(&format!("{removed} freed"), WAIT, || async {
        let i = inventories.get(&removed).await.ok()?;
        (condition(&i, "inventoryFreed").as_deref() == Some("True")).then_some(i)
    })
    .await;
    assert!(
        !bmcs[LEGACY].power_on(),
        "{removed} freed while its BMC reports it on"
    );
    let controls = bmcs[LEGACY].stats().chassis_controls;
    assert!(
        controls[controls_before..].contains(&0),
        "no IPMI power down sent to {removed}: chassis controls {controls:?}"
    );
    assert!(bmcs[LEGACY].last_boot().unwrap().powered_off);
    let status = freed.status.unwrap();
    assert!(status.owner_cluster.name.is_empty());
    assert_eq!(status.pxe_boot_config.address, None);
    assert!(
        !allocations(&client, &ns, "nodes")
            .await
            .contains_key(&removed)
    );
    // The others run on, untouched.
    for i in (0..bmcs.len()).filter(|i| *i != LEGACY) {
        assert!(bmcs[i].power_on(), "server {i} went off");
        assert_eq!(pxe_boots(&bmcs[i]).len(), 1, "server {i} booted again");
    }

    // Switched on at the server, then added again to boot from ingot's CD: IPMI has no virtual
    // media, so the boot Job fails at its first task, the Inventory says why, and the server is
    // not touched (still on, no chassis control, no boot).
    bmcs[LEGACY].set_power(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let controls_before = bmcs[LEGACY].stats().chassis_controls.len();
    let boots_before = bmcs[LEGACY].boots().len();
    inventories
        .patch(
            &removed,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "provisioning.ingot.dev/boot-media": "cd"}}})),
        )
        .await
        .unwrap();
    let mut nodes = kept.clone();
    nodes.push(removed_entry);
    clusters
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodes": nodes}})),
        )
        .await
        .unwrap();
    let refused = wait_for(
        &format!("{removed}'s virtualMediaUnsupported"),
        WAIT,
        || async {
            let i = inventories.get(&removed).await.ok()?;
            (condition(&i, "virtualMediaUnsupported").as_deref() == Some("True")).then_some(i)
        },
    )
    .await;
    let message = refused
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "virtualMediaUnsupported")
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.contains("IPMI") && message.contains("provisioning.ingot.dev/boot-media"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        bmcs[LEGACY].stats().chassis_controls.len(),
        controls_before,
        "a chassis control reached {removed}'s BMC after the refused CD boot"
    );
    assert_eq!(bmcs[LEGACY].boots().len(), boots_before);
    assert!(bmcs[LEGACY].power_on(), "{removed} was switched off");

    operator.terminate();
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
}
