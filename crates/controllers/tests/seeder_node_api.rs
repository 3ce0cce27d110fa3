//! Harvester's node power actions against a real API server: the request goes to the Inventory
//! that maps to the Node (Seeder's `metal.harvesterhci.io/local-node-name`), never to another
//! Inventory that only shares the Node's name.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use ingot_api::seeder::Inventory;
use ingot_controllers::seeder::node_api::{Caller, power_action_possible, request_power_action};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// A ready Inventory (as the Seeder controller leaves it) that names `node` as its Node.
async fn ready_inventory(client: &Client, ns: &str, name: &str, node: &str) {
    let inventory: Inventory = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {"name": name, "annotations": {
            "metal.harvesterhci.io/local-inventory": "true",
            "metal.harvesterhci.io/local-node-name": node}},
        "spec": {"baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
            "authSecretRef": {"name": name, "namespace": ns}}},
            "events": {"enabled": false, "pollingInterval": "1h"}}
    }))
    .unwrap();
    let api: Api<Inventory> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &inventory)
        .await
        .unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "status": "inventoryNodeReady",
            "pxeBootConfig": {},
            "ownerCluster": {"name": "", "namespace": ""},
            "powerAction": {}
        }})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_goes_to_the_inventory_mapped_to_the_node_not_a_namesake() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("seeder-node-api").await.unwrap();
    let node = format!("{ns}-node");
    let nodes: Api<Node> = Api::all(client.clone());
    let in_maintenance: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "annotations": {"harvesterhci.io/maintain-status": "completed"}}
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &in_maintenance)
        .await
        .unwrap();
    // The namesake belongs to another Node; the Node's own Inventory has another name.
    ready_inventory(&client, &ns, &node, "another-node").await;
    ready_inventory(&client, &ns, "bmc-of-the-node", &node).await;

    power_action_possible(&client, &ns, &node).await.unwrap();
    request_power_action(&client, &ns, &node, "reboot", &Caller::Myself)
        .await
        .unwrap();
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), &ns);
    let mapped = inventories.get("bmc-of-the-node").await.unwrap();
    assert_eq!(
        mapped.spec.power_action_requested.as_deref(),
        Some("reboot")
    );
    assert_eq!(
        mapped.status.unwrap().power_action.last_job_name.as_deref(),
        Some("")
    );
    let namesake = inventories.get(&node).await.unwrap();
    assert_eq!(
        namesake.spec.power_action_requested, None,
        "the request went to the Inventory of another Node"
    );

    // With no Inventory mapped to the Node, the namesake is still not taken for it.
    inventories
        .delete("bmc-of-the-node", &Default::default())
        .await
        .unwrap();
    for _ in 0..100 {
        if inventories
            .get_opt("bmc-of-the-node")
            .await
            .unwrap()
            .is_none()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let refusal = power_action_possible(&client, &ns, &node)
        .await
        .unwrap_err();
    assert_eq!(refusal.status, 424, "{refusal}");
    assert!(
        refusal
            .message
            .contains("annotation metal.harvesterhci.io/local-node-name"),
        "{refusal}"
    );
    nodes.delete(&node, &Default::default()).await.unwrap();
}
