//! Seeder's Inventory label `redfishPort.harvesterhci.io` on the real control plane: the
//! hardware facts are read over Redfish at `https://<connection.host>:<label>`, here sushy-tools
//! on its own (non-default) port, while the Inventory's connection reaches the BMC's IPMI side
//! (OpenIPMI's ipmi_sim) only. Without the label the facts would be the FRU's, read over IPMI.
//! A value that is not a port is a Warning Event on the Inventory naming the label.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::collections::BTreeMap;
use std::time::Duration;

use ingot_api::rufio::Machine;
use ingot_api::seeder::Inventory;
use ingot_ipmi_sim::FruInfo;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rufio_support::*;
use serde_json::json;

const NS: &str = "harvester-system";
const NAME: &str = "harvester-redfish-port";
const LABEL: &str = "redfishPort.harvesterhci.io";

async fn clean(client: &Client) {
    let unfinalize = json!({"metadata": {"finalizers": null}});
    let dp = DeleteParams::default();
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let _ = inventories
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&unfinalize))
        .await;
    let _ = machines
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&unfinalize))
        .await;
    let _ = inventories.delete(NAME, &dp).await;
    let _ = machines.delete(NAME, &dp).await;
    let _ = Api::<Node>::all(client.clone()).delete(NAME, &dp).await;
    let _ = Api::<Secret>::namespaced(client.clone(), NS)
        .delete(NAME, &dp)
        .await;
    wait_for(
        "the previous objects gone",
        Duration::from_secs(30),
        || async {
            (inventories.get_opt(NAME).await.unwrap().is_none()
                && machines.get_opt(NAME).await.unwrap().is_none())
            .then_some(())
        },
    )
    .await;
}

async fn hardware_labels(client: &Client) -> BTreeMap<String, String> {
    Api::<Node>::all(client.clone())
        .get(NAME)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| ["manufacturer", "model", "serialNumber"].contains(&k.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hardware_is_read_at_the_labelled_redfish_port() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let admin = env.kubeconfig_path().to_path_buf();
    let kubeconfig = chart_support::install_from_manifests(&admin, "seeder");
    clean(&client).await;

    // One BMC, two sides with the same credentials: Redfish (sushy-tools, its own port) and
    // IPMI (ipmi_sim).
    let sushy = start_sushy_tls(peers::IPMI_USER, peers::IPMI_PASSWORD);
    let sim = peers::start_ipmi_sim(&FruInfo::example(3).encode());
    wait_for("sushy over TLS", Duration::from_secs(30), || async {
        sushy.system(peers::IPMI_USER, peers::IPMI_PASSWORD).await
    })
    .await;
    assert_ne!(sushy.port, 443);

    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NAME},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.19.111.10"}]}
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(NAME.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("username".into(), ByteString(peers::IPMI_USER.into())),
            ("password".into(), ByteString(peers::IPMI_PASSWORD.into())),
        ])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // The host as Seeder expects it (no scheme, no port); the connection's port is IPMI's.
    let inventory: Inventory = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {"name": NAME, "namespace": NS,
            "labels": {LABEL: sushy.port.to_string()},
            "annotations": {
                "metal.harvesterhci.io/local-inventory": "true",
                "metal.harvesterhci.io/local-node-name": NAME}},
        "spec": {"baseboardSpec": {"connection": {
            "host": "127.0.0.1", "port": sim.addr.port(), "insecureTLS": true,
            "authSecretRef": {"name": NAME, "namespace": NS}}},
            "events": {"enabled": true, "pollingInterval": "1s"}}
    }))
    .unwrap();
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    inventories
        .create(&PostParams::default(), &inventory)
        .await
        .unwrap();

    let ingot = ingot_seeder(&kubeconfig, "ingot-redfish-port-test")
        .arg("--rufio-ipmi-timeout-seconds=2")
        .start();

    // The Machine (the connection as it is) reaches the IPMI side; the hardware comes from
    // sushy's Redfish at the labelled port (sushy's System and Chassis, not ipmi_sim's FRU).
    let sushy_labels = BTreeMap::from([
        ("manufacturer".to_owned(), "SushyEmulator".to_owned()),
        ("model".to_owned(), "3500RX".to_owned()),
        ("serialNumber".to_owned(), "437XR1138R2".to_owned()),
    ]);
    let waited = poll_until_or_none(Duration::from_secs(90), || async {
        (hardware_labels(&client).await == sushy_labels).then_some(())
    })
    .await;
    assert!(
        waited.is_some(),
        "Node labels {:?}, Inventory {:?}\n{}",
        hardware_labels(&client).await,
        inventories.get(NAME).await.unwrap().status,
        ingot.log_tail()
    );
    let machine = Api::<Machine>::namespaced(client.clone(), NS)
        .get(NAME)
        .await
        .unwrap();
    let machine = serde_json::to_value(machine.status).unwrap();
    assert_eq!(machine["powerState"], "on", "{machine}");

    // A value that is not a port: a Warning Event naming the label.
    inventories
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL: "redfish"}}})),
        )
        .await
        .unwrap();
    let note = wait_for(
        "the Event naming the label",
        Duration::from_secs(60),
        || async {
            Api::<Event>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME)
                        && e.reason.as_deref() == Some("HardwareReadFailed")
                })
                .filter_map(|e| e.note)
                .find(|n| n.contains(LABEL))
        },
    )
    .await;
    assert!(
        note.contains(r#"label redfishPort.harvesterhci.io "redfish" is not a port"#),
        "{note}"
    );
    drop(ingot);
    clean(&client).await;
}

/// Polls `f` until it gives a value or `within` passes.
async fn poll_until_or_none<T, F, Fut>(within: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if let Some(v) = f().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    None
}
