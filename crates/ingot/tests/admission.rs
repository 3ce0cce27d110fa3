//! Seeder's admission rules and the kinds ingot does not implement, on the real control plane:
//!
//! - InventoryTemplate and NestedCluster (their CRDs as `ingot crds` writes them): applying
//!   Seeder's own samples is refused by the API server with the message saying ingot does not
//!   implement them and what to do instead;
//! - one Inventory per BMC, with ingot installed from `deploy/manifests/seeder.yaml`: a second Inventory naming the same `connection` host and port
//!   (another spelling of the host) gets no rufio Machine, an error condition naming the fields
//!   and the Inventory that has the BMC, and a Warning Event; it proceeds when that Inventory
//!   points elsewhere, and a third one proceeds when the one holding it is deleted.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::time::Duration;

use ingot_api::rufio::Machine;
use ingot_api::seeder::Inventory;
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use rufio_support::*;
use serde_json::{Value, json};

const NS: &str = "harvester-system";

fn sample(file: &str) -> Value {
    let text = ingot_compat::shared_file(&format!("fixtures/seeder-full-mode/{file}"));
    ingot_compat::yaml_documents(&text).remove(0)
}

/// Creates a sample (moved to `namespace`) and returns the API server's refusal.
async fn refusal(client: &Client, namespace: &str, mut manifest: Value, plural: &str) -> String {
    manifest["metadata"]["namespace"] = json!(namespace);
    let kind = manifest["kind"].as_str().unwrap().to_owned();
    let gvk = GroupVersionKind::gvk("metal.harvesterhci.io", "v1alpha1", &kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let object: DynamicObject = serde_json::from_value(manifest).unwrap();
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => panic!("{kind} was accepted: {created:?}"),
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            e.message
        }
        Err(e) => panic!("{kind}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeders_inventory_template_and_nested_cluster_samples_are_refused() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    // The test environment installs `ingot crds`' CRDs (the manifests' are kept equal to them).
    let namespace = env.namespace("nested").await.unwrap();
    for (file, plural, kind) in [
        (
            "metal_v1alpha1_inventorytemplate.yaml",
            "inventorytemplates",
            "InventoryTemplate",
        ),
        (
            "metal_v1alpha1_nestedcluster.yaml",
            "nestedclusters",
            "NestedCluster",
        ),
    ] {
        let message = refusal(&client, &namespace, sample(file), plural).await;
        assert!(
            message.contains(&format!("ingot does not implement {kind}")),
            "{message}"
        );
        assert!(
            message.contains("an Inventory for each") && message.contains("then a Cluster"),
            "{message}"
        );
    }
}

fn inventory(name: &str, host: &str, port: u16) -> Inventory {
    serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {"name": name, "namespace": NS, "annotations": {
            "metal.harvesterhci.io/local-inventory": "true",
            "metal.harvesterhci.io/local-node-name": name}},
        "spec": {"baseboardSpec": {"connection": {
            "host": host, "port": port, "insecureTLS": true,
            "authSecretRef": {"name": "admission-bmc", "namespace": NS}}}}
    }))
    .unwrap()
}

async fn machine_exists(client: &Client, name: &str) -> bool {
    Api::<Machine>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

async fn status(client: &Client, name: &str) -> Value {
    let inventory = Api::<Inventory>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap();
    serde_json::to_value(inventory.status).unwrap()
}

/// The `bmcInUse` condition's status, reason and message.
async fn bmc_in_use(client: &Client, name: &str) -> Option<(String, String, String)> {
    let status = status(client, name).await;
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "bmcInUse")?
        .clone();
    Some((
        c["status"].as_str().unwrap_or_default().to_owned(),
        c["reason"].as_str().unwrap_or_default().to_owned(),
        c["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

async fn held_by(client: &Client, name: &str, owner: &str) -> String {
    let (_, _, message) = wait_for(
        &format!("{name} held for {owner}'s BMC"),
        Duration::from_secs(60),
        || async {
            bmc_in_use(client, name)
                .await
                .filter(|(s, r, m)| s == "True" && r == "Error" && m.contains(owner))
        },
    )
    .await;
    message
}

async fn proceeds(client: &Client, name: &str) {
    wait_for(
        &format!("{name}'s Machine"),
        Duration::from_secs(60),
        || async { machine_exists(client, name).await.then_some(()) },
    )
    .await;
    wait_for(
        &format!("{name} no longer held"),
        Duration::from_secs(60),
        || async {
            bmc_in_use(client, name)
                .await
                .filter(|(s, _, _)| s == "False")
        },
    )
    .await;
}

async fn clean(client: &Client, names: &[&str]) {
    let unfinalize = json!({"metadata": {"finalizers": null}});
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    for name in names {
        let unfinalized = Patch::Merge(&unfinalize);
        let _ = inventories
            .patch(name, &PatchParams::default(), &unfinalized)
            .await;
        let _ = machines
            .patch(name, &PatchParams::default(), &unfinalized)
            .await;
        let _ = inventories.delete(name, &DeleteParams::default()).await;
        let _ = machines.delete(name, &DeleteParams::default()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_inventory_of_the_same_bmc_is_held_without_a_machine_until_the_first_lets_go() {
    const FIRST: &str = "admission-first";
    const SECOND: &str = "admission-second";
    const THIRD: &str = "admission-third";
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let kubeconfig = chart_support::install_from_manifests(env.kubeconfig_path(), "seeder");
    clean(&client, &[FIRST, SECOND, THIRD]).await;
    create_secret(&client, NS, "admission-bmc", "admin", "password").await;
    let ingot = ingot_seeder(&kubeconfig, "ingot-admission-test").start();
    // Nothing answers there: the rule is about the Machines made, not the BMC's answers.
    let port = closed_port();
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    inventories
        .create(
            &PostParams::default(),
            &inventory(FIRST, "bmc.localhost", port),
        )
        .await
        .unwrap();
    wait_for("the first Machine", Duration::from_secs(60), || async {
        machine_exists(&client, FIRST).await.then_some(())
    })
    .await;
    // The same BMC, its host spelt in capitals.
    inventories
        .create(
            &PostParams::default(),
            &inventory(SECOND, "BMC.Localhost", port),
        )
        .await
        .unwrap();
    let message = held_by(&client, SECOND, &format!("{NS}/{FIRST}")).await;
    assert!(
        message.contains("spec.baseboardSpec.connection.host/port"),
        "{message}"
    );
    let event = wait_for("the Warning Event", Duration::from_secs(60), || async {
        Api::<Event>::namespaced(client.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(SECOND)
                    && e.reason.as_deref() == Some("BMCInUse")
            })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event.note.as_deref().unwrap_or_default().contains(FIRST),
        "{event:?}"
    );
    // Held on every pass (it is looked at every few seconds): still no Machine.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        !machine_exists(&client, SECOND).await,
        "{}",
        ingot.log_tail()
    );
    assert_ne!(
        status(&client, SECOND).await["status"],
        "inventoryNodeReady"
    );

    // The first one points at another BMC: the second proceeds.
    inventories
        .patch(
            FIRST,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"baseboardSpec": {"connection": {"port": closed_port()}}}}),
            ),
        )
        .await
        .unwrap();
    proceeds(&client, SECOND).await;

    // A third on the second's BMC is held by it, and proceeds once it is deleted.
    inventories
        .create(
            &PostParams::default(),
            &inventory(THIRD, "bmc.localhost", port),
        )
        .await
        .unwrap();
    held_by(&client, THIRD, &format!("{NS}/{SECOND}")).await;
    assert!(!machine_exists(&client, THIRD).await);
    inventories
        .delete(SECOND, &DeleteParams::default())
        .await
        .unwrap();
    proceeds(&client, THIRD).await;

    drop(ingot);
    clean(&client, &[FIRST, SECOND, THIRD]).await;
}

/// The `Ready` condition's reason and message of a Cluster.
async fn cluster_ready(client: &Client, ns: &str, name: &str) -> Option<(String, String)> {
    let cluster = Api::<ingot_api::seeder::Cluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    let ready = cluster
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((ready.reason, ready.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_clusters_listing_one_free_inventory_the_older_gets_it_and_the_newer_waits() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("claims").await.unwrap();
    let apply = |value: Value| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let kind = value["kind"].as_str().unwrap().to_owned();
            let plural = match kind.as_str() {
                "AddressPool" => "addresspools",
                "Inventory" => "inventories",
                _ => "clusters",
            };
            let gvk = GroupVersionKind::gvk("metal.harvesterhci.io", "v1alpha1", &kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
            let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
            api.create(
                &PostParams::default(),
                &serde_json::from_value(value).unwrap(),
            )
            .await
            .unwrap();
        }
    };
    apply(
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": "vip"}, "spec": {"cidr": "10.9.0.8/29", "gateway": "10.9.0.9"}}),
    )
    .await;
    apply(
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {"name": "shared"},
        "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": "0c:c4:7a:6b:84:20",
            "baseboardSpec": {"connection": {"host": "127.0.0.1", "port": closed_port(),
                "insecureTLS": true}}}}),
    )
    .await;
    let cluster = |name: &str| {
        json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"version": "v1.7.1", "imageURL": "http://127.0.0.1:9/iso",
                "nodes": [{"inventoryReference": {"name": "shared", "namespace": ns},
                    "addressPoolReference": {"name": "vip", "namespace": ns}}],
                "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": ns}}}})
    };
    apply(cluster("older")).await;
    // creationTimestamp has seconds: the newer one is created in a later second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    apply(cluster("newer")).await;

    let ingot = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("provisioning")
        .kubeconfig(env.kubeconfig_path())
        .arg(format!("--lease-namespace={ns}"))
        .arg("--lease-name=ingot-admission-claims")
        .arg("--lease-duration-seconds=3")
        .controllers("provisioning")
        .arg(format!("--provisioning-namespace={ns}"))
        .arg(format!("--seeder-namespace={ns}"))
        .arg(format!("--rufio-namespace={ns}"))
        .arg("--rufio-machine-interval-seconds=2")
        // Nothing boots here; a Cluster is held until ingot can hand out install files.
        .arg("--boot-url=http://127.0.0.1:9")
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();

    let (_, message) = wait_for(
        "the newer Cluster held for the older",
        Duration::from_secs(90),
        || async {
            cluster_ready(&client, &ns, "newer")
                .await
                .filter(|(reason, _)| reason == "InventoryInAnotherCluster")
        },
    )
    .await;
    assert!(
        message.contains("spec.nodes[0].inventoryReference")
            && message.contains(&format!("{ns}/shared"))
            && message.contains(&format!("{ns}/older"))
            && message.contains("created first"),
        "{message}"
    );
    let event = wait_for(
        "the Cluster's Warning Event",
        Duration::from_secs(60),
        || async {
            Api::<Event>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("newer")
                        && e.reason.as_deref() == Some("InventoryInAnotherCluster")
                })
        },
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    // The older one is not held by the newer: it waits for the Inventory's BMC only.
    // (It may first wait for its VIP pool to be read: the reason it settles on counts.)
    let (reason, message) = wait_for(
        "the older Cluster waiting for the Inventory",
        Duration::from_secs(60),
        || async {
            cluster_ready(&client, &ns, "older")
                .await
                .filter(|(reason, _)| reason != "WaitingForAddressPool")
        },
    )
    .await;
    assert_eq!(
        reason,
        "WaitingForInventory",
        "{message}\n{}",
        ingot.log_tail()
    );

    // The older Cluster goes: the Inventory is the newer one's.
    Api::<ingot_api::seeder::Cluster>::namespaced(client.clone(), &ns)
        .delete("older", &DeleteParams::default())
        .await
        .unwrap();
    let (reason, message) = wait_for(
        "the newer Cluster no longer held",
        Duration::from_secs(150),
        || async {
            cluster_ready(&client, &ns, "newer")
                .await
                .filter(|(reason, _)| {
                    reason != "InventoryInAnotherCluster" && reason != "WaitingForAddressPool"
                })
        },
    )
    .await;
    assert_eq!(
        reason,
        "WaitingForInventory",
        "{message}\n{}",
        ingot.log_tail()
    );
    drop(ingot);
}

/// The refusal is on create only: a NestedCluster written before the rule (as Seeder left
/// them) can still be changed, lose its finalizer, and go. The CRD is ingot's, moved to a group
/// of its own, first without its rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_seeder_left_can_still_be_changed_and_deleted() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("left").await.unwrap();
    let group = format!("nested-{}.test.ingot.dev", ingot_testenv::random_suffix(6));
    let name = format!("nestedclusters.{group}");
    let mut crd = serde_json::to_value(ingot_api::refused::nested_cluster_crd()).unwrap();
    crd["metadata"]["name"] = json!(name);
    crd["spec"]["group"] = json!(group);
    let schema = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let rules = schema
        .as_object_mut()
        .unwrap()
        .remove("x-kubernetes-validations")
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let apply = PatchParams::apply("admission-test").force();
    crds.patch(&name, &apply, &Patch::Apply(&crd))
        .await
        .unwrap();
    wait_for("the CRD established", Duration::from_secs(30), || async {
        let crd = crds.get(&name).await.unwrap();
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
    let gvk = GroupVersionKind::gvk(&group, "v1alpha1", "NestedCluster");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "nestedclusters");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let object = |name: &str, finalizers: &[&str]| -> DynamicObject {
        let mut manifest = sample("metal_v1alpha1_nestedcluster.yaml");
        manifest["apiVersion"] = json!(format!("{group}/v1alpha1"));
        manifest["metadata"] = json!({"name": name, "namespace": ns, "finalizers": finalizers});
        serde_json::from_value(manifest).unwrap()
    };
    let left = wait_for(
        "the object Seeder left",
        Duration::from_secs(30),
        || async {
            api.create(
                &PostParams::default(),
                &object("left", &["finalizer.metal.cluster.harvesterhci.io"]),
            )
            .await
            .ok()
        },
    )
    .await;
    assert_eq!(left.metadata.name.as_deref(), Some("left"));

    // ingot's CRD, with its rule: a new one is refused (once the API server has the rule).
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = rules;
    crds.patch(&name, &apply, &Patch::Apply(&crd))
        .await
        .unwrap();
    let mut attempt = 0;
    wait_for("a new one refused", Duration::from_secs(30), || {
        attempt += 1;
        let new = object(&format!("new-{attempt}"), &[]);
        let api = api.clone();
        async move {
            match api.create(&PostParams::default(), &new).await {
                Err(kube::Error::Api(e)) if e.message.contains("ingot does not implement") => {
                    Some(())
                }
                _ => None,
            }
        }
    })
    .await;
    // The old one: its spec changed, its finalizer removed, then deleted.
    api.patch(
        "left",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"version": "v1.7.1"}})),
    )
    .await
    .unwrap();
    api.patch(
        "left",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    api.delete("left", &DeleteParams::default()).await.unwrap();
    wait_for("the old one gone", Duration::from_secs(30), || async {
        api.get_opt("left").await.unwrap().is_none().then_some(())
    })
    .await;
    let _ = crds.delete(&name, &DeleteParams::default()).await;
}
