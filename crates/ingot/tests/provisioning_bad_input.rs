//! Bad input to provisioning, on the real API server: each mistake holds the Cluster with a
//! `Ready=False` condition naming the field and the fix, a Warning Event, and nothing
//! allocated, written or booted; the boot server answers nothing for servers it does not know.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use ingot_api::seeder::{AddressPool, Cluster, Inventory};
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::harness::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn create<K>(client: &Client, ns: &str, value: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(value).unwrap(),
        )
        .await
        .unwrap();
}

fn cluster(name: &str, ns: &str, inventory: &str, vip_pool: &str) -> Value {
    json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "version": "v1.7.1", "imageURL": "http://127.0.0.1:9/iso",
            "nodes": [{"inventoryReference": {"name": inventory, "namespace": ns},
                "addressPoolReference": {"name": "nodes", "namespace": ns}}],
            "vipConfig": {"addressPoolReference": {"name": vip_pool, "namespace": ns}}
        }
    })
}

/// The Cluster's `Ready` condition (reason, message) once it is False with `reason`.
async fn held(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("Cluster {name} held with {reason}"),
        WAIT,
        || async {
            let c = clusters.get(name).await.ok()?;
            let ready = c
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == reason)?;
            Some(ready.message)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mistake_holds_its_cluster_naming_the_field_and_nothing_is_allocated() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("prov-bad").await.unwrap();
    let port = free_port();
    let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("provisioning-bad-input")
        .kubeconfig(env.kubeconfig_path())
        .arg(format!("--lease-name=ingot-{ns}"))
        .controllers("provisioning")
        .arg(format!("--provisioning-namespace={ns}"))
        .arg(format!("--boot-addr=127.0.0.1:{port}"))
        .arg(format!("--boot-url=http://127.0.0.1:{port}"))
        .start();
    create::<AddressPool>(
        &client,
        &ns,
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes"}, "spec": {"cidr": "127.0.30.0/24", "gateway": "127.0.30.1"}}),
    )
    .await;
    create::<AddressPool>(
        &client,
        &ns,
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "vip"}, "spec": {"cidr": "127.0.31.1/32", "gateway": "127.0.31.254", "netmask": "255.255.255.0"}}),
    )
    .await;
    // An Inventory without its install disk (its BMC does not matter: it is refused first).
    create::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"},
            "stringData": {"username": "admin", "password": "password"}}),
    )
    .await;
    create::<Inventory>(
        &client,
        &ns,
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "nodisk"},
            "spec": {"managementInterfaceMacAddress": "02:00:00:00:30:01",
                "baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 9, "insecureTLS": true,
                    "authSecretRef": {"name": "bmc", "namespace": ns}}}}}),
    )
    .await;

    // An Inventory of another namespace: not this operator's (--provisioning-namespace scopes
    // the Seeder and Rufio controllers it runs too), so it gets no Machine.
    let other = env.namespace("prov-bad-other").await.unwrap();
    create::<Secret>(
        &client,
        &other,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"},
            "stringData": {"username": "admin", "password": "password"}}),
    )
    .await;
    create::<Inventory>(
        &client,
        &other,
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "elsewhere"},
            "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": "02:00:00:00:30:02",
                "baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 9, "insecureTLS": true,
                    "authSecretRef": {"name": "bmc", "namespace": other}}}}}),
    )
    .await;

    create::<Cluster>(&client, &ns, cluster("missing", &ns, "nowhere", "vip")).await;
    let message = held(&client, &ns, "missing", "InventoryMissing").await;
    assert!(
        message.contains("spec.nodes[0].inventoryReference") && message.contains("nowhere"),
        "{message}"
    );

    create::<Cluster>(&client, &ns, cluster("nodisk", &ns, "nodisk", "vip")).await;
    let message = held(&client, &ns, "nodisk", "InventoryInvalid").await;
    assert!(message.contains("spec.primaryDisk"), "{message}");

    // A release ingot cannot install (Seeder's README sample's): held before its VIP is taken.
    let mut old = cluster("oldrelease", &ns, "nowhere", "vip");
    old["spec"]["version"] = json!("v1.0.2");
    create::<Cluster>(&client, &ns, old).await;
    let message = held(&client, &ns, "oldrelease", "ClusterInvalid").await;
    assert!(
        message.contains("spec.version v1.0.2") && message.contains("v1.1.0 or later"),
        "{message}"
    );

    // A MAC the boot server could never match.
    create::<Inventory>(
        &client,
        &ns,
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "badmac"},
            "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": "0c-c4-7a-6b-84-20",
                "baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 11, "insecureTLS": true,
                    "authSecretRef": {"name": "bmc", "namespace": ns}}}}}),
    )
    .await;
    create::<Cluster>(&client, &ns, cluster("badmac", &ns, "badmac", "vip")).await;
    let message = held(&client, &ns, "badmac", "InventoryInvalid").await;
    assert!(
        message.contains("spec.managementInterfaceMacAddress") && message.contains("0c:c4:7a"),
        "{message}"
    );

    // A valid Inventory whose BMC does not answer: not a mistake, so the VIP is looked at.
    create::<Inventory>(
        &client,
        &ns,
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "silent"},
            "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": "02:00:00:00:30:03",
                "baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 10, "insecureTLS": true,
                    "authSecretRef": {"name": "bmc", "namespace": ns}}}}}),
    )
    .await;
    create::<Cluster>(&client, &ns, cluster("novip", &ns, "silent", "absent")).await;
    let message = held(&client, &ns, "novip", "WaitingForAddressPool").await;
    assert!(
        message.contains("spec.vipConfig.addressPoolReference") && message.contains("absent"),
        "{message}"
    );

    // streamImageMode needs Tinkerbell's workflow, which ingot's own boot does not run: held
    // before it takes its VIP, naming the field and the fix.
    let mut stream = cluster("stream", &ns, "silent", "vip");
    stream["spec"]["clusterConfig"] = json!({"streamImageMode": true});
    create::<Cluster>(&client, &ns, stream).await;
    let message = held(&client, &ns, "stream", "ClusterConfigUnsupported").await;
    assert!(
        message.contains("spec.clusterConfig.streamImageMode")
            && message.contains("--provisioning-boot tinkerbell"),
        "{message}"
    );

    // Nothing was allocated, no Secret written for the held Clusters' nodes, no Job made.
    for pool in ["nodes", "vip"] {
        let p = Api::<AddressPool>::namespaced(client.clone(), &ns)
            .get(pool)
            .await
            .unwrap();
        let held: Vec<_> = p
            .status
            .unwrap_or_default()
            .address_allocation
            .into_iter()
            .filter(|(_, o)| o.kind != "reserved")
            .collect();
        assert!(held.is_empty(), "{pool} holds {held:?}");
    }
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("provisioning.ingot.dev/secret=install"))
        .await
        .unwrap();
    assert!(secrets.items.is_empty(), "install Secrets were written");
    let inventory = Api::<Inventory>::namespaced(client.clone(), &ns)
        .get("nodisk")
        .await
        .unwrap();
    assert!(
        inventory
            .status
            .unwrap_or_default()
            .owner_cluster
            .name
            .is_empty()
    );

    // This namespace's Inventory got its Machine long ago; the other namespace's none.
    let machines =
        |namespace: &str| Api::<ingot_api::rufio::Machine>::namespaced(client.clone(), namespace);
    wait_for(
        "the Machine of this namespace's Inventory",
        WAIT,
        || async { machines(&ns).get_opt("nodisk").await.ok()?.map(drop) },
    )
    .await;
    assert!(
        machines(&other)
            .get_opt("elsewhere")
            .await
            .unwrap()
            .is_none(),
        "an Inventory of another namespace got a Machine"
    );

    // The boot server: an unknown MAC is 404 with a script that boots the disk; a node that is
    // not allocated has no config.
    let http = reqwest::Client::new();
    let script = http
        .get(format!("http://127.0.0.1:{port}/boot/02:00:00:00:99:99"))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), 404);
    let body = script.text().await.unwrap();
    assert!(
        body.starts_with("#!ipxe") && body.contains("exit"),
        "{body}"
    );
    let config = http
        .get(format!("http://127.0.0.1:{port}/config/{ns}/nodisk"))
        .send()
        .await
        .unwrap();
    assert_eq!(config.status(), 404);
    operator.terminate();
}
