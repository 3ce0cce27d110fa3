//! The Harvester UI's power buttons after docs/migrate-from-seeder.md, on the real API server:
//! Harvester's Addon `harvester-system/harvester-seeder` as Harvester ships it, the guide's
//! commands taken from the guide's own code blocks and run with kubectl, ingot installed from the
//! plain manifests and run as their ServiceAccount, then Harvester's node API calls exactly as
//! its node formatter makes them (the Addon lookup, the Inventory named like the Node, the spec
//! Update, then the status UpdateStatus), each power action checked on sushy-tools itself. Then
//! the guide's rollback, and the guide's old first step (disabling the Addon), which Harvester
//! answers with 424.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use rufio_support::*;
use serde_json::{Value, json};

const NS: &str = "harvester-system";
const NODE: &str = "harvester-ui-node";
const USER: &str = "ui-admin";
const PASSWORD: &str = "ui-password";
const SEEDER_FINALIZER: &str = "finalizer.inventory.metal.harvesterhci.io";
/// The Addon's values as Harvester's installer ships it (image tag and full name).
const SHIPPED_VALUES: &str = "image:\n  tag: v0.1.1\nfullnameOverride: harvester-seeder\n";
/// Step 1 of the guide before the power buttons were kept: the Addon disabled.
const OLD_STEP_1: &str = r#"kubectl -n harvester-system patch addon harvester-seeder --type merge -p '{"spec":{"enabled":false}}'"#;

fn addon_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("harvesterhci.io", "v1beta1", "Addon"),
        "addons",
    )
}

fn inventory_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("metal.harvesterhci.io", "v1alpha1", "Inventory"),
        "inventories",
    )
}

/// The guide's `sh` code block that contains `marker` (exactly one).
fn guide_block(marker: &str) -> String {
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/migrate-from-seeder.md"),
    )
    .unwrap();
    let blocks: Vec<String> = ingot_compat::fenced_blocks(&guide, "sh")
        .into_iter()
        .filter(|b| b.contains(marker))
        .collect();
    assert_eq!(
        blocks.len(),
        1,
        "docs/migrate-from-seeder.md: one sh block with {marker:?}"
    );
    blocks[0].clone()
}

/// Runs shell commands as a user would, `kubectl` being the tests' kubectl on the test's API
/// server (as its administrator), in `dir`.
fn shell(admin: &Path, dir: &Path, script: &str) -> String {
    let prelude = format!(
        "set -euo pipefail\nkubectl() {{ '{}' --kubeconfig='{}' \"$@\"; }}\n",
        chart_support::kubectl(),
        admin.display()
    );
    chart_support::run(
        Command::new("bash")
            .arg("-c")
            .arg(prelude + script)
            .current_dir(dir),
        None,
    )
}

/// Harvester's verdict on the Addon alone (`powerActionPossible`'s first check): 424 when the
/// Addon `harvester-system/harvester-seeder` is missing or not enabled.
fn addon_verdict(addon: Option<&DynamicObject>) -> Result<(), u16> {
    match addon {
        Some(a) if a.data["spec"]["enabled"] == json!(true) => Ok(()),
        _ => Err(424),
    }
}

/// Harvester's `powerActionPossible`: the Addon, then the Inventory named like the Node in
/// harvester-system, ready. Err: (HTTP status, message).
async fn power_action_possible(client: &Client, node: &str) -> Result<(), (u16, String)> {
    let addons: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &addon_resource());
    let addon = addons.get_opt("harvester-seeder").await.unwrap();
    addon_verdict(addon.as_ref()).map_err(|s| (s, "harvester-seeder addon".to_owned()))?;
    let inventories: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &inventory_resource());
    let Some(inventory) = inventories.get_opt(node).await.unwrap() else {
        return Err((424, format!("no inventory {node}")));
    };
    match inventory.data["status"]["status"].as_str() {
        None => Err((
            409,
            format!("no field .status.status present in inventory object: {node}"),
        )),
        Some("inventoryNodeReady") => Ok(()),
        Some(other) => Err((
            409,
            format!(
                "expected to find inventory {node} status inventoryNodeReady, but current status is: {other}"
            ),
        )),
    }
}

/// Harvester's `powerAction`: `powerActionPossible`, then the Inventory read, a request refused
/// while the last one has no answer, the spec Update with `powerActionRequested`, then the
/// status UpdateStatus of the updated object with `powerAction.lastJobName` cleared and the rest
/// of `powerAction` as read.
async fn power_action(client: &Client, node: &str, operation: &str) -> Result<(), String> {
    power_action_possible(client, node)
        .await
        .map_err(|(s, m)| format!("{s}: {m}"))?;
    let inventories: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &inventory_resource());
    let mut inventory = inventories.get(node).await.map_err(|e| e.to_string())?;
    let mut pa = inventory.data["status"]["powerAction"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if inventory.data["spec"]["powerActionRequested"].is_string()
        && pa
            .get("actionStatus")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
    {
        return Err(format!(
            "waiting for power action status for action {} for node {node} to be populated",
            inventory.data["spec"]["powerActionRequested"]
        ));
    }
    inventory.data["spec"]["powerActionRequested"] = json!(operation);
    let mut updated = inventories
        .replace(node, &PostParams::default(), &inventory)
        .await
        .map_err(|e| e.to_string())?;
    pa.insert("lastJobName".into(), json!(""));
    updated.data["status"]["powerAction"] = Value::Object(pa);
    inventories
        .replace_status(node, &PostParams::default(), &updated)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// A user pressing the button until Harvester accepts: an answer of the API server between
/// Harvester's two writes (a conflict) is an error in the UI, and the user presses again.
async fn press(client: &Client, node: &str, operation: &str) {
    let mut last = String::new();
    for _ in 0..5 {
        match power_action(client, node, operation).await {
            Ok(()) => return,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("Harvester's powerAction {operation} on {node}: {last}");
}

async fn addon(client: &Client) -> DynamicObject {
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &addon_resource())
        .get("harvester-seeder")
        .await
        .unwrap()
}

fn values(addon: &DynamicObject) -> serde_yaml::Value {
    serde_yaml::from_str(addon.data["spec"]["valuesContent"].as_str().unwrap()).unwrap()
}

async fn inventory_status(client: &Client) -> Value {
    let inventory = Api::<Inventory>::namespaced(client.clone(), NS)
        .get(NODE)
        .await
        .unwrap();
    serde_json::to_value(inventory.status).unwrap()
}

/// Waits for the answer to `operation` (a Job of it, `complete`) and for sushy's own power state.
async fn wait_answered(
    client: &Client,
    sushy: &Sushy,
    operation: &str,
    power_state: &str,
    ingot: &Operator,
) {
    let prefix = format!("{NODE}-{operation}-");
    let s = wait_for(
        &format!("{operation} answered"),
        Duration::from_secs(60),
        || async {
            let s = inventory_status(client).await;
            let job = s["powerAction"]["lastJobName"].as_str().unwrap_or_default();
            (job.starts_with(&prefix) && s["powerAction"]["actionStatus"].is_string()).then_some(s)
        },
    )
    .await;
    assert_eq!(
        s["powerAction"]["actionStatus"],
        "complete",
        "{s}\n{}",
        ingot.log_tail()
    );
    let state = sushy.system(USER, PASSWORD).await.unwrap()["PowerState"].clone();
    assert_eq!(
        state, power_state,
        "sushy's own power state after {operation}"
    );
}

async fn clean(client: &Client) {
    let unfinalize = json!({"metadata": {"finalizers": null}});
    let dp = DeleteParams::default();
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let _ = inventories
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&unfinalize))
        .await;
    let _ = machines
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&unfinalize))
        .await;
    let _ = inventories.delete(NODE, &dp).await;
    let _ = machines.delete(NODE, &dp).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    for j in jobs
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("inventory.metal.harvesterhci.io={NODE}")),
        )
        .await
        .unwrap()
    {
        let _ = jobs.delete(&j.name_any(), &dp).await;
    }
    let _ = Api::<Node>::all(client.clone()).delete(NODE, &dp).await;
    let _ = Api::<Secret>::namespaced(client.clone(), NS)
        .delete(NODE, &dp)
        .await;
    let _ = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &addon_resource())
        .delete("harvester-seeder", &dp)
        .await;
    wait_for(
        "the previous objects gone",
        Duration::from_secs(30),
        || async {
            (inventories.get_opt(NODE).await.unwrap().is_none()
                && machines.get_opt(NODE).await.unwrap().is_none())
            .then_some(())
        },
    )
    .await;
}

// docs/migrate-from-seeder.md's guide under Harvester's UI, one behaviour per test, over one
// fixture (`Guide`): Harvester's Addon as shipped, a BMC (sushy-tools over TLS), its Node and
// Secret; the guide's steps, the UI's power buttons and the rollback, in this order
// (`ingot_testenv::scenario!`).
ingot_testenv::scenario!(mod guide: Guide {
    the_guide_s_first_step_stops_seeder_and_keeps_its_addon_enabled,
    ingot_installed_from_the_manifests_makes_the_ui_s_inventory_ready,
    the_guide_s_machine_check_passes,
    the_ui_keeps_its_power_buttons_after_the_guide,
    rolling_back_restores_seeder_s_values_and_stops_ingot_s_deployment,
    rolling_back_leaves_the_inventory_as_the_go_seeder_reads_it,
    the_guide_s_old_first_step_takes_the_buttons_away,
});

/// Harvester's Addon CRD and the enabled Addon as shipped, the BMC, its Node and Secret, and
/// the Inventory the UI makes for it (created at the guide's step 3).
struct Guide {
    client: Client,
    admin: std::path::PathBuf,
    work: std::path::PathBuf,
    sushy: Sushy,
    inventory: Inventory,
    /// `ingot run` from the manifests (from the guide's step 3 until the rollback).
    ingot: Option<ingot_testenv::Operator>,
}

impl Guide {
    async fn start() -> Self {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let admin = env.kubeconfig_path().to_path_buf();
        // Harvester's Addon CRD (upstream's file) and the namespace.
        chart_support::kubectl_apply(
            &admin,
            &format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n---\n{}",
                ingot_compat::shared_file("fixtures/upstream-crds/harvesterhci.io_addons.yaml")
            ),
            &["--server-side", "--force-conflicts"],
        );
        let addons: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NS, &addon_resource());
        wait_for("the Addon CRD served", Duration::from_secs(30), || async {
            addons.list(&Default::default()).await.ok().map(|_| ())
        })
        .await;
        clean(&client).await;

        // The Addon as Harvester's installer ships it, enabled (Seeder running).
        let shipped: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "harvesterhci.io/v1beta1", "kind": "Addon",
            "metadata": {"name": "harvester-seeder", "namespace": NS,
                "labels": {"addon.harvesterhci.io/experimental": "true"}},
            "spec": {"repo": "http://harvester-cluster-repo.cattle-system.svc/charts", "version": "0.1.1",
                "chart": "harvester-seeder", "enabled": true, "valuesContent": SHIPPED_VALUES}
        }))
        .unwrap();
        addons
            .create(&PostParams::default(), &shipped)
            .await
            .unwrap();

        // The BMC, the Node and the Inventory the UI makes for it (named like the Node).
        let sushy = start_sushy_tls(USER, PASSWORD);
        wait_for("sushy over TLS", Duration::from_secs(30), || async {
            sushy.system(USER, PASSWORD).await
        })
        .await;
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": "172.19.110.10"}]}
        }))
        .unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(NODE.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("username".into(), ByteString(USER.into())),
                ("password".into(), ByteString(PASSWORD.into())),
            ])),
            ..Default::default()
        };
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let inventory: Inventory = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": NODE, "namespace": NS, "annotations": {
                "metal.harvesterhci.io/local-inventory": "true",
                "metal.harvesterhci.io/local-node-name": NODE}},
            "spec": {"baseboardSpec": {"connection": {
                "host": format!("https://127.0.0.1:{}", sushy.port), "port": 623, "insecureTLS": true,
                "authSecretRef": {"name": NODE, "namespace": NS}}},
                "events": {"enabled": false, "pollingInterval": "1h"}}
        }))
        .unwrap();
        let work = temp_dir("harvester-ui");
        Guide {
            client,
            admin,
            work,
            sushy,
            inventory,
            ingot: None,
        }
    }

    async fn finish(self) {
        let client = &self.client;
        clean(client).await;
    }

    /// Step 1 of the guide, from its code block: Seeder scaled to 0, its Addon enabled.
    async fn the_guide_s_first_step_stops_seeder_and_keeps_its_addon_enabled(&mut self) {
        let (client, admin, work) = (&self.client, &self.admin, &self.work);
        shell(admin, work, &guide_block("seeder-stopped.yaml"));
        let stopped = addon(client).await;
        assert_eq!(stopped.data["spec"]["enabled"], json!(true), "{stopped:?}");
        let v = values(&stopped);
        assert_eq!(v["replicaCount"], serde_yaml::Value::from(0), "{v:?}");
        assert_eq!(
            v["image"]["tag"],
            serde_yaml::Value::from("v0.1.1"),
            "{v:?}"
        );
        assert_eq!(
            v["fullnameOverride"],
            serde_yaml::Value::from("harvester-seeder"),
            "{v:?}"
        );
        assert_eq!(addon_verdict(Some(&stopped)), Ok(()));
    }

    /// Step 3: the plain manifests, run as their ServiceAccount (the command is the guide's);
    /// the UI's Inventory becomes ready.
    async fn ingot_installed_from_the_manifests_makes_the_ui_s_inventory_ready(&mut self) {
        let (client, admin, inventory) = (&self.client, &self.admin, &self.inventory);
        assert!(guide_block("deploy/manifests/seeder.yaml").contains(
            "kubectl apply --server-side --force-conflicts -f deploy/manifests/seeder.yaml"
        ));
        Api::<Inventory>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), inventory)
            .await
            .unwrap();
        let kubeconfig = chart_support::install_from_manifests(admin, "seeder");
        let ingot = ingot_seeder(&kubeconfig, "ingot-harvester-ui-test")
            .arg("--rufio-task-poll-seconds=0.3")
            .start();
        wait_for("the Inventory ready", Duration::from_secs(60), || async {
            (inventory_status(client).await["status"] == "inventoryNodeReady").then_some(())
        })
        .await;
        self.ingot = Some(ingot);
    }

    /// Step 4's check of the Machines, the guide's command in this test's namespace (other
    /// tests' Machines share the control plane).
    async fn the_guide_s_machine_check_passes(&mut self) {
        let admin = &self.admin;
        let guide = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/migrate-from-seeder.md"),
        )
        .unwrap();
        let guide = guide.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(guide.contains(
            "`kubectl wait --for=condition=Contactable -A --all machines.bmc.tinkerbell.org`"
        ));
        chart_support::run(
            Command::new(chart_support::kubectl())
                .arg(format!("--kubeconfig={}", admin.display()))
                .args([
                    "wait",
                    "--for=condition=Contactable",
                    "-n",
                    NS,
                    "--all",
                    "machines.bmc.tinkerbell.org",
                    "--timeout=120s",
                ]),
            None,
        );
    }

    /// The UI offers powerAction on a Node in maintenance; Harvester's node API drives ingot.
    async fn the_ui_keeps_its_power_buttons_after_the_guide(&mut self) {
        let (client, sushy) = (&self.client, &self.sushy);
        let ingot = self.ingot.as_ref().expect("ingot runs");
        Api::<Node>::all(client.clone())
            .patch(
                NODE,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"harvesterhci.io/maintain-status": "completed"}}}),
                ),
            )
            .await
            .unwrap();
        assert_eq!(power_action_possible(client, NODE).await, Ok(()));
        press(client, NODE, "shutdown").await;
        wait_answered(client, sushy, "shutdown", "Off", ingot).await;
        press(client, NODE, "poweron").await;
        wait_answered(client, sushy, "poweron", "On", ingot).await;
    }

    /// Rolling back, from the guide's code block: ingot stopped (its process here; the block
    /// scales the manifests' Deployment), Seeder's values restored.
    async fn rolling_back_restores_seeder_s_values_and_stops_ingot_s_deployment(&mut self) {
        let (client, admin, work) = (&self.client, &self.admin, &self.work);
        let ingot = self.ingot.take().expect("ingot runs");
        ingot.kill();
        shell(admin, work, &guide_block("seeder-restored.yaml"));
        let restored = addon(client).await;
        assert_eq!(restored.data["spec"]["enabled"], json!(true));
        assert_eq!(
            restored.data["spec"]["valuesContent"], SHIPPED_VALUES,
            "the Addon's values as shipped again"
        );
        let deployment = chart_support::run(
            Command::new(chart_support::kubectl())
                .arg(format!("--kubeconfig={}", admin.display()))
                .args([
                    "-n",
                    chart_support::MANIFESTS_NAMESPACE,
                    "get",
                    "deployment",
                    "ingot",
                    "-o",
                    "jsonpath={.spec.replicas}",
                ]),
            None,
        );
        assert_eq!(deployment, "0");
    }

    /// Left as the Go Seeder reads it: Seeder's finalizer alone, ready, its Machine with
    /// Seeder's finalizer, owned by it.
    async fn rolling_back_leaves_the_inventory_as_the_go_seeder_reads_it(&mut self) {
        let client = &self.client;
        let left = Api::<Inventory>::namespaced(client.clone(), NS)
            .get(NODE)
            .await
            .unwrap();
        assert_eq!(left.finalizers(), [SEEDER_FINALIZER]);
        // Left as the Go Seeder reads it: ready, its Machine with Seeder's finalizer, owned by it.
        assert_eq!(
            left.status.as_ref().unwrap().status.as_deref(),
            Some("inventoryNodeReady")
        );
        let machine = Api::<Machine>::namespaced(client.clone(), NS)
            .get(NODE)
            .await
            .unwrap();
        assert_eq!(machine.finalizers(), [SEEDER_FINALIZER]);
        assert_eq!(machine.owner_references()[0].uid, left.uid().unwrap());
    }

    /// The guide's old first step takes the buttons away: Harvester answers 424.
    async fn the_guide_s_old_first_step_takes_the_buttons_away(&mut self) {
        let (client, admin, work) = (&self.client, &self.admin, &self.work);
        shell(admin, work, OLD_STEP_1);
        assert_eq!(
            power_action_possible(client, NODE).await.map_err(|e| e.0),
            Err(424)
        );
        assert_eq!(addon_verdict(Some(&addon(client).await)), Err(424));
        assert_eq!(addon_verdict(None), Err(424));
    }
}
