//! What the push events tests share: a local Inventory on a BMC of the emulator, its Node and
//! Secret, and the Events read back.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;

use ingot_api::seeder::Inventory;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, SimBmc};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub const NS: &str = "harvester-system";
pub const USER: &str = "admin";
pub const PASSWORD: &str = "push-test-password";
pub const SECRET_HEADER: &str = "X-Ingot-Event-Secret";

/// Two emulated Redfish BMCs over TLS, answering at once.
pub async fn two_bmcs() -> Fleet {
    Fleet::start(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        vec![
            BmcSpec {
                username: USER.into(),
                password: PASSWORD.into(),
                power_delay: std::time::Duration::from_millis(100),
                ..BmcSpec::default()
            };
            2
        ],
    )
    .await
    .unwrap()
}

/// Each name's Node and BMC Secret.
pub async fn create_nodes_and_secrets(client: &Client, names: &[&str]) {
    for name in names {
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node(name))
            .await
            .unwrap();
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret(name))
            .await
            .unwrap();
    }
}

pub fn inventory(name: &str, bmc: &SimBmc, interval: &str) -> Inventory {
    serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1",
        "kind": "Inventory",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {
                "metal.harvesterhci.io/localInventory": "true",
                "metal.harvesterhci.io/localNodeName": name,
            },
        },
        "spec": {
            "baseboardSpec": {"connection": {
                "host": format!("https://127.0.0.1:{}", bmc.addr.port()),
                "port": 623,
                "insecureTLS": true,
                "authSecretRef": {"name": name, "namespace": NS},
            }},
            "events": {"enabled": true, "pollingInterval": interval},
        }
    }))
    .unwrap()
}

pub fn secret(name: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("username".into(), ByteString(USER.as_bytes().to_vec())),
            ("password".into(), ByteString(PASSWORD.as_bytes().to_vec())),
        ])),
        ..Default::default()
    }
}

pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.19.110.10"}]}
    }))
    .unwrap()
}

/// The namespace, the Inventories `names` with their Nodes and Secrets gone.
pub async fn clean(client: &Client, names: &[&str]) {
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await;
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let dp = DeleteParams::default();
    for name in names {
        let _ = inventories
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = inventories.delete(name, &dp).await;
        let _ = Api::<Node>::all(client.clone()).delete(name, &dp).await;
        let _ = Api::<Secret>::namespaced(client.clone(), NS)
            .delete(name, &dp)
            .await;
    }
}

/// The core Events of a namespace that match a field selector.
pub async fn events(client: &Client, namespace: &str, fields: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(fields))
        .await
        .unwrap()
        .items
}

fn messages(events: Vec<Event>) -> Vec<String> {
    events
        .into_iter()
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

/// Seeder's hardware Events on the Node: their messages.
pub async fn node_events(client: &Client, node: &str) -> Vec<String> {
    let fields = format!("involvedObject.name={node},reason=HarvesterHardwareDiscovery");
    messages(events(client, "default", &fields).await)
}

/// The Events on an Inventory with this reason: their messages.
pub async fn inventory_events(client: &Client, name: &str, reason: &str) -> Vec<String> {
    let fields =
        format!("involvedObject.name={name},involvedObject.kind=Inventory,reason={reason}");
    messages(events(client, NS, &fields).await)
}

/// The `EventSubscriptionRefused` Events of an Inventory, once its BMC has answered `more`
/// requests more (polls since).
pub async fn refusals_after(client: &Client, name: &str, bmc: &SimBmc, more: u64) -> Vec<Event> {
    let reads = bmc.state.snapshot().requests;
    ingot_testenv::wait_for(
        &format!("{more} more requests at the BMC of {name}"),
        std::time::Duration::from_secs(60),
        || async { (bmc.state.snapshot().requests >= reads + more).then_some(()) },
    )
    .await;
    let fields = format!("involvedObject.name={name},reason=EventSubscriptionRefused");
    events(client, NS, &fields).await
}

/// Sets the Inventory's `spec.events`.
pub async fn set_events(client: &Client, name: &str, events: Value) {
    Api::<Inventory>::namespaced(client.clone(), NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"events": events}})),
        )
        .await
        .unwrap();
}

/// A power change made at the BMC itself (not through ingot).
pub async fn force_off(bmc: &SimBmc) {
    let r = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap()
        .post(format!(
            "{}/redfish/v1/Systems/{}/Actions/ComputerSystem.Reset",
            bmc.url(),
            bmc.state.profile.system_id
        ))
        .basic_auth(USER, Some(PASSWORD))
        .json(&json!({"ResetType": "ForceOff"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}
