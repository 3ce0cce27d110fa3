//! `kubectl get` shows the columns of the originals: STATUS READY REQUESTED for pools and
//! STATUS INSTANCEID PUBLICIP PRIVATEIP for instances. Seeder's kinds keep Seeder's columns
//! (names, types, paths, order) exactly, and ingot's own come after them only: the progress of
//! a provisioning (a Cluster's `Ready` reason, an Inventory's Cluster, a pool's free addresses).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let kubectl = std::env::var("INGOT_KUBECTL").expect(
        "INGOT_KUBECTL: the kubectl built by tools/k8s-testbin/build.sh kubectl (scripts/test.sh sets it)",
    );
    let output = std::process::Command::new(&kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {kubectl}: {e}"));
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test]
async fn kubectl_get_shows_the_original_columns() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let name = format!("columns-{}", ingot_testenv::random_suffix(6));

    let pools: Api<ingot_api::equinix::InstancePool> = Api::all(client.clone());
    let pool = serde_json::from_value(
        json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
        "metadata": {"name": name}, "spec": {"count": 1}}),
    )
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
    let status = json!({"status": {"status": "ready", "ready": 1, "requested": 1}});
    pools
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pool status");

    let instances: Api<ingot_api::equinix::Instance> = Api::all(client);
    let instance_name = format!("{name}-zaoolitj");
    let instance = serde_json::from_value(
        json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "Instance",
        "metadata": {"name": instance_name}, "spec": {"plan": "c3.small.x86"}}),
    )
    .expect("instance");
    instances
        .create(&PostParams::default(), &instance)
        .await
        .expect("create instance");
    let status = json!({"status": {"status": "managed", "instanceID": "1c6106a0-13e6-44fa-af2c-bec67d4b6c65",
        "publicIP": "145.40.73.137", "privateIP": "10.8.23.5"}});
    instances
        .patch_status(
            &instance_name,
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("instance status");

    let out = kubectl(env.kubeconfig_path(), &["get", "instancepool", &name]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(columns(lines[0]), ["NAME", "STATUS", "READY", "REQUESTED"]);
    assert_eq!(columns(lines[1]), [name.as_str(), "ready", "1", "1"]);

    let out = kubectl(env.kubeconfig_path(), &["get", "instance", &instance_name]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        columns(lines[0]),
        ["NAME", "STATUS", "INSTANCEID", "PUBLICIP", "PRIVATEIP"]
    );
    assert_eq!(
        columns(lines[1]),
        [
            instance_name.as_str(),
            "managed",
            "1c6106a0-13e6-44fa-af2c-bec67d4b6c65",
            "145.40.73.137",
            "10.8.23.5"
        ]
    );
}

/// `additionalPrinterColumns` of a CRD's first version, as (name, type, jsonPath).
fn printer_columns(crd: &Value) -> Vec<(String, String, String)> {
    crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (field("name"), field("type"), field("jsonPath"))
        })
        .collect()
}

#[test]
fn seeders_kinds_keep_seeders_columns_first_and_add_only_trailing_ones() {
    let ours: Vec<Value> = ingot_api::crds::generated()
        .iter()
        .map(|crd| serde_json::to_value(crd).unwrap())
        .collect();
    let mut added = std::collections::BTreeMap::new();
    for plural in [
        "addresspools",
        "clusters",
        "inventories",
        "inventorytemplates",
        "nestedclusters",
    ] {
        let upstream = ingot_compat::yaml_documents(&ingot_compat::shared_file(&format!(
            "fixtures/upstream-crds/metal.harvesterhci.io_{plural}.yaml"
        )))
        .remove(0);
        let name = format!("{plural}.metal.harvesterhci.io");
        let ours = ours
            .iter()
            .find(|crd| crd["metadata"]["name"] == name.as_str())
            .unwrap_or_else(|| panic!("ingot generates no CRD {name}"));
        let (theirs, ours) = (printer_columns(&upstream), printer_columns(ours));
        assert!(!theirs.is_empty(), "{plural}");
        assert_eq!(
            ours[..theirs.len()],
            theirs[..],
            "{plural}: Seeder's columns first"
        );
        added.insert(
            plural,
            ours[theirs.len()..]
                .iter()
                .map(|c| c.0.clone())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(added["clusters"], ["Reason", "Age"]);
    assert_eq!(added["inventories"], ["Cluster", "Age"]);
    assert_eq!(added["addresspools"], ["Available", "Age"]);
    assert!(added["inventorytemplates"].is_empty() && added["nestedclusters"].is_empty());
}

#[tokio::test]
async fn kubectl_get_shows_seeders_columns_then_the_progress() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let ns = env.namespace("columns").await.expect("namespace");
    let kubeconfig = env.kubeconfig_path();

    let clusters: Api<ingot_api::seeder::Cluster> = Api::namespaced(client.clone(), &ns);
    let cluster = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "two"},
        "spec": {"version": "v1.7.1", "nodes": [],
            "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": ""}}}
    }))
    .expect("cluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create cluster");
    let status = json!({"status": {"status": "clusterConfigReady", "token": "abc",
        "clusterAddress": "10.1.0.10", "conditions": [
            {"type": "Ready", "status": "False", "reason": "WaitingForInventory",
             "message": "waiting", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    clusters
        .patch_status("two", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("cluster status");

    let inventories: Api<ingot_api::seeder::Inventory> = Api::namespaced(client.clone(), &ns);
    let inventory = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {"name": "node0"},
        "spec": {"baseboardSpec": {"connection": {"host": "10.1.0.100", "port": 623,
            "insecureTLS": true}}}
    }))
    .expect("inventory");
    inventories
        .create(&PostParams::default(), &inventory)
        .await
        .expect("create inventory");
    let status = json!({"status": {"status": "inventoryNodeReady", "generatedPassword": "pw",
        "pxeBootConfig": {"address": "10.1.0.11"},
        "ownerCluster": {"name": "two", "namespace": ns}}});
    inventories
        .patch_status("node0", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("inventory status");

    let pools: Api<ingot_api::seeder::AddressPool> = Api::namespaced(client, &ns);
    let pool = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": "nodes"},
        "spec": {"cidr": "10.1.0.0/28", "gateway": "10.1.0.1"}
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
    let status = json!({"status": {"status": "poolReady", "startAddress": "10.1.0.0",
        "lastAddress": "10.1.0.15", "netmask": "255.255.255.240", "availableAddresses": 13,
        "addressAllocation": {}}});
    pools
        .patch_status("nodes", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pool status");

    let get = |kind: &str, name: &str| {
        let out = kubectl(kubeconfig, &["get", "-n", &ns, kind, name]);
        let lines: Vec<Vec<String>> = out
            .lines()
            .map(|l| columns(l).into_iter().map(str::to_owned).collect())
            .collect();
        (lines[0].clone(), lines[1].clone())
    };
    let (header, row) = get("clusters.metal.harvesterhci.io", "two");
    assert_eq!(
        header,
        [
            "NAME",
            "CLUSTERSTATUS",
            "CLUSTERTOKEN",
            "CLUSTERADDRESS",
            "REASON",
            "AGE"
        ]
    );
    assert_eq!(
        row[..5],
        [
            "two",
            "clusterConfigReady",
            "abc",
            "10.1.0.10",
            "WaitingForInventory"
        ]
    );
    let (header, row) = get("inventories.metal.harvesterhci.io", "node0");
    assert_eq!(
        header,
        [
            "NAME",
            "INVENTORYSTATUS",
            "GENERATEDPASSWORD",
            "ALLOCATEDNODEADDRESS",
            "CLUSTER",
            "AGE"
        ]
    );
    assert_eq!(
        row[..5],
        ["node0", "inventoryNodeReady", "pw", "10.1.0.11", "two"]
    );
    let (header, row) = get("addresspools.metal.harvesterhci.io", "nodes");
    assert_eq!(
        header,
        [
            "NAME",
            "ADDRESSPOOLSTATUS",
            "STARTADDRESS",
            "LASTADDRESS",
            "NETMASK",
            "AVAILABLE",
            "AGE"
        ]
    );
    assert_eq!(
        row[..6],
        [
            "nodes",
            "poolReady",
            "10.1.0.0",
            "10.1.0.15",
            "255.255.255.240",
            "13"
        ]
    );
}
