//! What the tests of servers on premises share (`inventory_pools.rs`, `inventory_machines.rs`):
//! a rack of emulated Redfish BMCs (TLS, 2 s power transitions, off at first), its Inventories
//! `node<i>` with their BMC Secrets and the AddressPool `nodes`, and what the API server and
//! the BMCs say of claims, addresses, boots and power-offs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use ingot_api::seeder::{AddressPool, Inventory};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_controllers::onprem::claims::{CLAIMED_LABEL, HOSTNAME_ANNOTATION};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub async fn create_namespaces(client: &Client, names: &[&str]) {
    for name in names {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": name}})),
            )
            .await
            .unwrap();
    }
}

/// `servers` emulated Redfish BMCs over TLS, servers off, power transitions of 2 s.
pub async fn rack(servers: usize) -> Fleet {
    let spec = BmcSpec {
        vendor: Vendor::Dell,
        power_delay: Duration::from_secs(2),
        initial_power_on: false,
        // A killed operator cannot log out: its session holds one of the BMC's 4 slots until
        // it times out. Real BMCs time out in minutes (iDRAC: 30); a minute here, so that a
        // test's several kills do not lock the next process out for the rest of the test.
        session_timeout: Duration::from_secs(60),
        ..BmcSpec::default()
    };
    Fleet::start(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        vec![spec; servers],
    )
    .await
    .unwrap()
}

/// The AddressPool `nodes` of `ns` (`cidr`, `gateway`) and one Inventory `node<i>` per BMC of
/// `fleet`, its BMC Secret beside it, labelled `labels(i)`.
pub async fn create_inventories(
    client: &Client,
    ns: &str,
    fleet: &Fleet,
    (cidr, gateway): (&str, &str),
    labels: impl Fn(usize) -> Value,
) {
    Api::<AddressPool>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "nodes"},
                "spec": {"cidr": cidr, "gateway": gateway}})),
        )
        .await
        .unwrap();
    let spec = BmcSpec::default();
    for (i, bmc) in fleet.bmcs.iter().enumerate() {
        let name = format!("node{i}");
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": name},
                    "stringData": {"username": spec.username, "password": spec.password}})),
            )
            .await
            .unwrap();
        Api::<Inventory>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &object(json!({
                    "metadata": {"name": name, "labels": labels(i)},
                    "spec": {
                        "primaryDisk": "/dev/sda",
                        "managementInterfaceMacAddress": bmc.state.mac(0),
                        "baseboardSpec": {"connection": {
                            "host": format!("https://127.0.0.1:{}", bmc.addr.port()),
                            "port": 623, "insecureTLS": true,
                            "authSecretRef": {"name": name, "namespace": ns}}}
                    }
                })),
            )
            .await
            .unwrap();
    }
}

/// Claimed Inventories of `ns`, by the hostname (Instance or Machine) they are claimed for.
pub async fn claims(client: &Client, ns: &str) -> BTreeMap<String, String> {
    Api::<Inventory>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{CLAIMED_LABEL}=true")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|i| {
            let host = i.annotations().get(HOSTNAME_ANNOTATION)?.clone();
            Some((host, i.name_any()))
        })
        .collect()
}

/// Addresses the pool `nodes` of `ns` hands out, by the owner's name.
pub async fn allocations(client: &Client, ns: &str) -> BTreeMap<String, String> {
    Api::<AddressPool>::namespaced(client.clone(), ns)
        .get("nodes")
        .await
        .unwrap()
        .status
        .unwrap_or_default()
        .address_allocation
        .into_iter()
        .map(|(address, owner)| (owner.name, address))
        .collect()
}

/// The index of Inventory `node<i>`.
pub fn index(inventory: &str) -> usize {
    inventory.trim_start_matches("node").parse().unwrap()
}

/// Power-off requests the BMC of `node<i>` received.
pub fn power_offs(fleet: &Fleet, i: usize) -> usize {
    fleet.bmcs[i]
        .state
        .reset_requests()
        .iter()
        .filter(|r| r.contains("Off") || r.contains("Shutdown"))
        .count()
}

/// Network boots the BMC of `node<i>` recorded.
pub fn pxe_boots(fleet: &Fleet, i: usize) -> usize {
    fleet.bmcs[i]
        .state
        .boots()
        .iter()
        .filter(|r| r.device == "Pxe")
        .count()
}
