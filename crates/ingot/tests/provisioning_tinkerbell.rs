//! Seeder's full mode with `--provisioning-boot tinkerbell`, on the real API server with the
//! Tinkerbell CRDs of the shared fixtures: three Inventories behind emulated Redfish BMCs, a
//! Cluster, and `ingot run` as the chart's ServiceAccount with `provisioning.tinkerbell=true`.
//! Each allocated node gets its Hardware, Template and Workflow in Seeder's shapes (checked
//! field by field), updated when their rendering changes; the test plays tink-controller by
//! writing Workflow statuses as Tink v0.9/v0.10 does (`status.state`, and each action's
//! `status` under `status.tasks`); a node removed loses all three objects, and so does every
//! node of a deleted Cluster. The emulated servers are booted once each through their BMCs;
//! in the first test nothing serves them Smee's script or Hegel's config (they stop at the
//! config); in the second, the test serves both from the Hardware objects as Smee and Hegel
//! would, and the servers install and form the new cluster (`clusterRunning`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod provisioning_support;

use std::time::{Duration, Instant};

use ingot_testenv::harness::wait_for;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use provisioning_support::{CONFIGURE_IMAGE, Options, Provisioned, VIP, WAIT};
use serde_json::{Value, json};

const GATEWAY: &str = "127.0.22.1";
/// The `tink-stack` Service's load-balancer IP: Hegel's address.
const TINK_IP: &str = "127.0.0.1";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "tinkerbell.org".into(),
        version: "v1alpha1".into(),
        api_version: "tinkerbell.org/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn tink(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let plural = match kind {
        "Hardware" => "hardware",
        "Template" => "templates",
        _ => "workflows",
    };
    Api::namespaced_with(client.clone(), ns, &resource(kind, plural))
}

fn secret_value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

impl Provisioned {
    fn tink(&self, kind: &str) -> Api<DynamicObject> {
        tink(&self.client, &self.ns, kind)
    }

    /// The object's `spec` once `check` holds of it.
    async fn wait_spec(
        &self,
        kind: &str,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let api = self.tink(kind);
        wait_for(&format!("{kind} {name}: {what}"), WAIT, || async {
            let object = api.get_opt(name).await.ok()??;
            let spec = object.data["spec"].clone();
            check(&spec).then_some(spec)
        })
        .await
    }

    async fn wait_gone(&self, kind: &str, name: &str) {
        let api = self.tink(kind);
        wait_for(&format!("{kind} {name} deleted"), WAIT, || async {
            api.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }

    async fn wait_event(&self, type_: &str, says: &str) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        wait_for(
            &format!("a {type_} WorkflowEvent saying {says:?}"),
            WAIT,
            || async {
                let list = events.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .any(|e| {
                        e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Cluster")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("first")
                            && e.reason.as_deref() == Some("WorkflowEvent")
                            && e.type_.as_deref() == Some(type_)
                            && e.note.as_deref() == Some(says)
                    })
                    .then_some(())
            },
        )
        .await;
    }

    async fn wait_condition(&self, inventory: &str, condition: &str) -> String {
        let inventories = self.inventories();
        wait_for(&format!("{condition} on {inventory}"), WAIT, || async {
            let i = inventories.get(inventory).await.ok()?;
            let c = i
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == condition && c.status == "True")?;
            Some(c.message.unwrap_or_default())
        })
        .await
    }

    /// Writes the Workflow's status as tink-controller does.
    async fn workflow_status(&self, name: &str, state: &str, action_states: [&str; 3]) {
        let actions: Vec<Value> = ["stream-harvester", "configure-harvester", "reboot-harvester"]
            .iter()
            .zip(action_states)
            .map(|(action, status)| {
                json!({"name": action, "image": "x", "timeout": 90, "status": status, "seconds": 1})
            })
            .collect();
        let body = json!({"status": {
            "state": state,
            "globalTimeout": 36000,
            "tasks": [{"name": "harvester-os-installation", "worker": "w", "actions": actions}],
        }});
        self.tink("Workflow")
            .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
            .await
            .unwrap();
    }

    /// Jobs of an Inventory (its install boot and any shutdown).
    async fn jobs_of(&self, inventory: &str) -> usize {
        Api::<ingot_api::rufio::Job>::namespaced(self.client.clone(), &self.ns)
            .list(
                &ListParams::default()
                    .labels(&format!("inventory.metal.harvesterhci.io={inventory}")),
            )
            .await
            .unwrap()
            .items
            .len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tinkerbell_objects_are_written_as_seeder_writes_them_and_the_workflow_is_followed() {
    let p = Provisioned::start_with(Options {
        tag: "tinkerbell",
        node_cidr: "127.0.22.0/24",
        gateway: GATEWAY,
        tinkerbell: true,
        ..Options::default()
    })
    .await;
    let ns = p.ns.clone();

    // Bad input first: without the stack's load-balancer IP, the Cluster waits naming the
    // Service and the fix, and nothing is booted.
    let clusters = p.clusters();
    let message = wait_for("the Cluster waiting for Tinkerbell", WAIT, || async {
        let c = clusters.get("first").await.ok()?;
        let ready = c
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.reason == "WaitingForTinkerbell")?;
        Some(ready.message)
    })
    .await;
    assert!(
        message.contains(&format!("{ns}/tink-stack"))
            && message.contains("--provisioning-tink-address"),
        "{message}"
    );
    assert_eq!(p.pxe_boots(), vec![0, 0, 0]);
    assert!(p.tink("Hardware").get_opt("node0").await.unwrap().is_none());
    // The Service is watched: its load-balancer IP wakes the waiting Cluster, well before the
    // minute after which a waiting Cluster looks again on its own.
    let ip_given = Instant::now();
    Api::<Service>::namespaced(p.client.clone(), &ns)
        .patch_status(
            "tink-stack",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": TINK_IP}]}}})),
        )
        .await
        .unwrap();
    p.wait_status("tinkConfigReady").await;
    assert!(
        ip_given.elapsed() < Duration::from_secs(30),
        "the tink-stack Service's IP was seen after {:?}",
        ip_given.elapsed()
    );

    // Every node: the three objects, Seeder's conditions, and one boot.
    for name in &p.names {
        for condition in [
            "tinkHardwareCreated",
            "tinkTemplateCreated",
            "tinkWorkflowCreated",
        ] {
            p.wait_condition(name, condition).await;
        }
    }
    wait_for("every server PXE-booted once", WAIT, || async {
        (p.pxe_boots() == vec![1, 1, 1]).then_some(())
    })
    .await;

    // node0's objects, field by field (Seeder's pkg/tink).
    let inventory = p.inventories().get("node0").await.unwrap();
    let status = inventory.status.clone().unwrap();
    assert_eq!(
        status.generated_password, None,
        "the password stays out of status"
    );
    let cluster = clusters.get("first").await.unwrap();
    assert_eq!(
        cluster.status.as_ref().unwrap().token,
        None,
        "the token stays out of status"
    );
    let address = status.pxe_boot_config.address.clone().unwrap();
    let netmask = status.pxe_boot_config.netmask.clone().unwrap();
    let mac = inventory
        .spec
        .management_interface_mac_address
        .clone()
        .unwrap();
    let hardware = p.tink("Hardware").get("node0").await.unwrap();
    let owner = &hardware.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str()
        ),
        ("metal.harvesterhci.io/v1alpha1", "Cluster", "first")
    );
    let spec = &hardware.data["spec"];
    let interface = &spec["interfaces"][0];
    assert_eq!(spec["interfaces"].as_array().unwrap().len(), 1);
    assert_eq!(interface["netboot"]["allowPXE"], true);
    assert_eq!(interface["netboot"]["allowWorkflow"], true);
    let script = interface["netboot"]["ipxe"]["contents"].as_str().unwrap();
    assert!(script.starts_with("#!ipxe"), "{script}");
    assert!(
        script.contains(&format!(
            "harvester.install.config_url=http://{TINK_IP}:50061/2009-04-04/user-data"
        )),
        "the script points at Hegel: {script}"
    );
    assert!(
        script.contains(&format!("ip={address}::{GATEWAY}:{netmask}::netboot:off")),
        "{script}"
    );
    let dhcp = &interface["dhcp"];
    assert_eq!(dhcp["mac"], mac.to_ascii_lowercase());
    assert_eq!(dhcp["hostname"], format!("node0-{ns}"));
    assert_eq!(dhcp["lease_time"], 86400);
    assert_eq!(dhcp["arch"], "x86_64");
    assert_eq!(dhcp["uefi"], true);
    assert_eq!(
        dhcp["ip"],
        json!({"address": address, "netmask": netmask, "gateway": GATEWAY})
    );
    assert_eq!(spec["disks"], json!([{"device": "/dev/sda"}]));
    assert_eq!(spec["metadata"]["facility"]["facility_code"], "on_prem");
    assert_eq!(
        spec["metadata"]["instance"]["operating_system"],
        json!({"version": "v1.7.1", "distro": "harvester"})
    );
    // userData: the install config Hegel serves, secrets included (as Seeder writes it).
    let user_data: serde_yaml::Value =
        serde_yaml::from_str(spec["userData"].as_str().unwrap()).unwrap();
    let secrets: Api<Secret> = Api::namespaced(p.client.clone(), &ns);
    let token = secret_value(
        &secrets.get("first-harvester-token").await.unwrap(),
        "token",
    );
    let password = secret_value(
        &secrets.get("node0-harvester-install").await.unwrap(),
        "password",
    );
    assert_eq!(user_data["token"].as_str(), Some(token.as_str()));
    assert_eq!(
        user_data["os"]["password"].as_str(),
        Some(password.as_str())
    );
    assert_eq!(user_data["install"]["mode"].as_str(), Some("create"));
    assert_eq!(user_data["install"]["vip"].as_str(), Some(VIP));
    assert_eq!(user_data["install"]["device"].as_str(), Some("/dev/sda"));
    assert_eq!(
        user_data["install"]["isoUrl"].as_str(),
        Some("http://127.0.0.1:9/iso/v1.7.1/harvester-v1.7.1-amd64.iso")
    );
    let hook = user_data["install"]["webhooks"][0]["url"].as_str().unwrap();
    assert!(hook.ends_with(&format!("/disable/{ns}/node0")), "{hook}");
    // The Template: Seeder's stream workflow, the ConfigMap's image override.
    let template = p.tink("Template").get("node0").await.unwrap();
    assert_eq!(
        template.metadata.owner_references.as_ref().unwrap()[0].name,
        "first"
    );
    let data: serde_yaml::Value =
        serde_yaml::from_str(template.data["spec"]["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["name"].as_str(), Some("harvester-installation"));
    assert_eq!(data["global_timeout"].as_u64(), Some(36000));
    let task = &data["tasks"][0];
    assert_eq!(task["name"].as_str(), Some("harvester-os-installation"));
    assert_eq!(task["worker"].as_str(), Some("{{.device_1}}"));
    assert_eq!(
        serde_yaml::from_value::<Vec<String>>(task["volumes"].clone()).unwrap(),
        [
            "/dev:/dev",
            "/dev/console:/dev/console",
            "/lib/firmware:/lib/firmware"
        ]
    );
    let actions = task["actions"].as_sequence().unwrap();
    let names: Vec<&str> = actions
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "stream-harvester",
            "configure-harvester",
            "reboot-harvester"
        ]
    );
    assert_eq!(actions[0]["image"].as_str(), Some("gmehta3/image2disk:dev"));
    assert_eq!(actions[0]["timeout"].as_u64(), Some(3000));
    assert_eq!(
        actions[0]["environment"]["COMPRESSED"].as_str(),
        Some("true")
    );
    assert_eq!(
        actions[0]["environment"]["DEST_DISK"].as_str(),
        Some("/dev/sda")
    );
    assert_eq!(
        actions[0]["environment"]["IMG_URL"].as_str(),
        Some("http://127.0.0.1:9/iso/v1.7.1/harvester-v1.7.1-amd64.raw.gz")
    );
    assert_eq!(actions[1]["image"].as_str(), Some(CONFIGURE_IMAGE));
    assert_eq!(actions[1]["timeout"].as_u64(), Some(90));
    assert_eq!(
        actions[1]["environment"]["HARVESTER_DEVICE"].as_str(),
        Some("/dev/sda")
    );
    assert_eq!(
        actions[1]["environment"]["HARVESTER_TTY"].as_str(),
        Some("tty1")
    );
    assert_eq!(
        actions[1]["environment"]["HARVESTER_STREAMDISK_CLOUDINIT_URL"].as_str(),
        Some(format!("http://{TINK_IP}:50061/2009-04-04/user-data").as_str())
    );
    assert_eq!(actions[2]["image"].as_str(), Some("gmehta3/reboot:latest"));
    // The Workflow.
    let workflow = p.tink("Workflow").get("node0").await.unwrap();
    assert_eq!(
        workflow.data["spec"],
        json!({"templateRef": "node0", "hardwareRef": "node0",
            "hardwareMap": {"device_1": mac.to_ascii_lowercase()}})
    );
    // Smee and Hegel serve the boot: ingot's boot server answers neither the node's script
    // (by its MAC) nor its config (from its own address), as it answers an unknown one.
    let answer = reqwest::get(format!("{}/boot/{mac}", p.boot_url))
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::NOT_FOUND);
    let body = answer.text().await.unwrap();
    assert!(!body.contains("harvester"), "{body}");
    let answer = reqwest::Client::builder()
        .local_address(address.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
        .get(format!("{}/config/{ns}/node0", p.boot_url))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::NOT_FOUND);
    // A join node's config.
    let join = p.tink("Hardware").get("node1").await.unwrap();
    let join: serde_yaml::Value =
        serde_yaml::from_str(join.data["spec"]["userData"].as_str().unwrap()).unwrap();
    assert_eq!(join["install"]["mode"].as_str(), Some("join"));
    assert_eq!(
        join["serverUrl"].as_str(),
        Some(format!("https://{VIP}:443").as_str())
    );

    // A changed rendering reaches all three (Seeder never updates its Hardware).
    clusters
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterConfig": {
                "nameservers": ["127.0.20.53", "127.0.22.54"],
                "customProvisioningTemplate": "site-template"}}})),
        )
        .await
        .unwrap();
    p.wait_spec("Hardware", "node1", "the new nameserver in userData", |s| {
        s["userData"]
            .as_str()
            .is_some_and(|u| u.contains("127.0.22.54"))
    })
    .await;
    p.wait_spec("Workflow", "node1", "the custom template", |s| {
        s["templateRef"] == "site-template"
    })
    .await;
    Api::<ConfigMap>::namespaced(p.client.clone(), &ns)
        .patch(
            "seeder-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"reboot-harvester-image": "mirror.example/reboot:v2"}})),
        )
        .await
        .unwrap();
    // The ConfigMap is watched: its change wakes the Cluster.
    p.wait_spec("Template", "node1", "the new reboot image", |s| {
        s["data"]
            .as_str()
            .is_some_and(|d| d.contains("mirror.example/reboot:v2"))
    })
    .await;

    // STATE_SUCCESS: network boot and workflows off, the node installed, Seeder's Event. The
    // Workflow is watched: its change wakes the Inventory (whose own look comes every 30 s),
    // counted as the Inventory controller takes it.
    let wakeups = || async {
        p.operator
            .metric_sum("ingot_provisioning_workflow_wakeups_total", &[])
            .await
    };
    let before = wakeups().await;
    p.workflow_status(
        "node0",
        "STATE_SUCCESS",
        ["STATE_SUCCESS", "STATE_SUCCESS", "STATE_SUCCESS"],
    )
    .await;
    p.wait_spec("Hardware", "node0", "network boot off", |s| {
        s["interfaces"][0]["netboot"]["allowPXE"] == false
            && s["interfaces"][0]["netboot"]["allowWorkflow"] == false
    })
    .await;
    p.wait_condition("node0", "harvesterInstalled").await;
    let after = wakeups().await;
    assert!(
        after > before,
        "the Workflow's success did not wake its Inventory ({before} wake-ups before, {after} after)"
    );
    p.wait_event("Normal", "workflow node0 completed successfully")
        .await;

    // A failed Workflow: a condition and a Warning naming the task and action; never retried.
    p.workflow_status(
        "node1",
        "STATE_FAILED",
        ["STATE_SUCCESS", "STATE_FAILED", "STATE_PENDING"],
    )
    .await;
    p.wait_event(
        "Warning",
        "workflow node1 failed for task harvester-os-installation, action configure-harvester",
    )
    .await;
    let inventories = p.inventories();
    let failed = wait_for("tinkWorkflowFailed on node1", WAIT, || async {
        let i = inventories.get("node1").await.ok()?;
        i.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "tinkWorkflowFailed")
    })
    .await;
    assert!(
        failed
            .message
            .as_deref()
            .is_some_and(|m| m.contains("action configure-harvester")),
        "{failed:?}"
    );
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(p.pxe_boots()[1], 1, "a failed install was booted again");
    assert_eq!(
        p.jobs_of("node1").await,
        1,
        "a second Job was made for node1"
    );
    // Workflows, the stack's Service and ConfigMap were read from watches only: ingot never
    // asked for one of them (its own request counter).
    for resource in ["workflows", "services", "configmaps"] {
        let gets = p
            .operator
            .metric_sum(
                "ingot_kube_requests_total",
                &[r#"verb="get""#, &format!(r#"resource="{resource}""#)],
            )
            .await;
        assert_eq!(gets, 0.0, "GET {resource} was sent {gets} times");
        let watches = p
            .operator
            .metric_sum(
                "ingot_kube_requests_total",
                &[r#"verb="watch""#, &format!(r#"resource="{resource}""#)],
            )
            .await;
        assert!(watches >= 1.0, "{resource} are not watched");
    }

    // The installer's webhook (Seeder's endpoint) turns network boot off on the Hardware.
    let node2 = inventories.get("node2").await.unwrap();
    let node2_address: std::net::IpAddr = node2
        .status
        .unwrap()
        .pxe_boot_config
        .address
        .unwrap()
        .parse()
        .unwrap();
    let hook = user_data_of(&p, "node2").await["install"]["webhooks"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = reqwest::Client::builder()
        .local_address(node2_address)
        .build()
        .unwrap()
        .put(&hook)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.status());
    p.wait_spec("Hardware", "node2", "allowPXE off after the webhook", |s| {
        s["interfaces"][0]["netboot"]["allowPXE"] == false
    })
    .await;
    p.wait_condition("node2", "harvesterInstalled").await;

    // A node removed: its three objects go, even with its Hardware already missing.
    let nodes: Vec<Value> = ["node0", "node1"]
        .iter()
        .map(|n| {
            json!({"inventoryReference": {"name": n, "namespace": ns},
                "addressPoolReference": {"name": "nodes", "namespace": ns}})
        })
        .collect();
    clusters
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodes": nodes}})),
        )
        .await
        .unwrap();
    // The Hardware already gone (Seeder's shared notFound flag would leave the others): deleted
    // once the release began, so that no pass of the Cluster made before writes it again.
    p.wait_condition("node2", "clusterCleanupSubmitted").await;
    match p
        .tink("Hardware")
        .delete("node2", &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("deleting Hardware node2: {e}"),
    }
    for kind in ["Hardware", "Template", "Workflow"] {
        p.wait_gone(kind, "node2").await;
    }
    p.wait_condition("node2", "inventoryFreed").await;
    for kind in ["Hardware", "Template", "Workflow"] {
        assert!(
            p.tink(kind).get_opt("node0").await.unwrap().is_some(),
            "{kind} node0 went with node2"
        );
    }

    // The Cluster deleted: every node released, every object gone.
    clusters
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    for name in ["node0", "node1"] {
        for kind in ["Hardware", "Template", "Workflow"] {
            p.wait_gone(kind, name).await;
        }
    }
    wait_for("the Cluster gone", WAIT, || async {
        clusters
            .get_opt("first")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // streamImageMode, allowed in this mode: no script on the Hardware, neither ISO nor
    // webhook in the config; the Template's workflow writes the image.
    p.create(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "stream"},
        "spec": {
            "version": "v1.7.1",
            "imageURL": "http://127.0.0.1:9/iso",
            "clusterConfig": {"streamImageMode": true},
            "nodes": [{"inventoryReference": {"name": "node0", "namespace": ns},
                "addressPoolReference": {"name": "nodes", "namespace": ns}}],
            "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": ns}}
        }
    }))
    .await;
    let hardware = wait_for("the stream Cluster's Hardware", WAIT, || async {
        let h = p.tink("Hardware").get_opt("node0").await.ok()??;
        (h.metadata.owner_references.as_ref()?[0].name == "stream").then_some(h)
    })
    .await;
    let netboot = &hardware.data["spec"]["interfaces"][0]["netboot"];
    assert_eq!(netboot["allowPXE"], true);
    assert_eq!(
        netboot.get("ipxe"),
        None,
        "stream mode boots no script: {netboot}"
    );
    let config: serde_yaml::Value =
        serde_yaml::from_str(hardware.data["spec"]["userData"].as_str().unwrap()).unwrap();
    assert_eq!(config["install"].get("isoUrl"), None);
    assert_eq!(config["install"].get("webhooks"), None);
    assert_eq!(config["install"]["mode"].as_str(), Some("create"));
    p.wait_spec("Template", "node0", "the stream workflow", |s| {
        s["data"]
            .as_str()
            .is_some_and(|d| d.contains("harvester-v1.7.1-amd64.raw.gz"))
    })
    .await;
    p.wait_status_of("stream", "tinkConfigReady").await;
    p.finish().await;
}

async fn user_data_of(p: &Provisioned, name: &str) -> serde_yaml::Value {
    let hardware = p.tink("Hardware").get(name).await.unwrap();
    serde_yaml::from_str(hardware.data["spec"]["userData"].as_str().unwrap()).unwrap()
}

/// Hegel's and Smee's address in [`servers_boot_from_what_smee_and_hegel_serve`].
const STACK: &str = "127.0.23.1";

/// Smee and Hegel, as far as a server sees them, read from the Hardware objects of `ns`:
/// `GET /boot/<mac>` answers the Hardware's `ipxe.contents` while its `allowPXE` is on (a
/// script that boots the disk otherwise), and `GET /2009-04-04/user-data` the `userData` of
/// the Hardware whose address is the request's source, as Hegel does.
async fn serve_stack(client: Client, ns: String) {
    use axum::extract::{ConnectInfo, Path, State};
    use axum::http::StatusCode;
    use axum::routing::get;
    type Hardware = Api<DynamicObject>;
    async fn all(api: &Hardware) -> Vec<Value> {
        api.list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|h| h.data["spec"].clone())
                    .collect()
            })
            .unwrap_or_default()
    }
    async fn smee(State(api): State<Hardware>, Path(mac): Path<String>) -> (StatusCode, String) {
        let mac = mac.to_ascii_lowercase();
        let found = all(&api)
            .await
            .into_iter()
            .find(|s| s["interfaces"][0]["dhcp"]["mac"] == mac.as_str());
        match found {
            Some(s) if s["interfaces"][0]["netboot"]["allowPXE"] == true => (
                StatusCode::OK,
                s["interfaces"][0]["netboot"]["ipxe"]["contents"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ),
            _ => (
                StatusCode::OK,
                ingot_controllers::provisioning::boot::BOOT_FROM_DISK.to_owned(),
            ),
        }
    }
    async fn hegel(
        State(api): State<Hardware>,
        ConnectInfo(source): ConnectInfo<std::net::SocketAddr>,
    ) -> (StatusCode, String) {
        let source = source.ip().to_string();
        all(&api)
            .await
            .into_iter()
            .find(|s| s["interfaces"][0]["dhcp"]["ip"]["address"] == source.as_str())
            .and_then(|s| s["userData"].as_str().map(str::to_owned))
            .map_or((StatusCode::NOT_FOUND, String::new()), |u| {
                (StatusCode::OK, u)
            })
    }
    let app = axum::Router::new()
        .route("/boot/{mac}", get(smee))
        .route("/2009-04-04/user-data", get(hegel))
        .with_state(tink(&client, &ns, "Hardware"));
    let listener = tokio::net::TcpListener::bind((STACK, 50061)).await.unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn servers_boot_from_what_smee_and_hegel_serve() {
    let p = Provisioned::start_with(Options {
        tag: "tinkerbell-e2e",
        node_cidr: "127.0.24.0/24",
        gateway: "127.0.24.1",
        tinkerbell: true,
        server_boot_url: Some(format!("http://{STACK}:50061/boot/{{mac}}")),
        // The address given wins over Service tink-stack (which has no load-balancer IP here).
        extra_args: vec![format!("--provisioning-tink-address={STACK}")],
        ..Options::default()
    })
    .await;
    serve_stack(p.client.clone(), p.ns.clone()).await;
    p.wait_status("clusterRunning").await;
    assert_eq!(p.pxe_boots(), vec![1, 1, 1], "each server booted once");
    for name in p.names.clone() {
        let spec = p
            .wait_spec(
                "Hardware",
                &name,
                "network boot off after the install",
                |s| s["interfaces"][0]["netboot"]["allowPXE"] == false,
            )
            .await;
        assert!(
            spec["interfaces"][0]["netboot"]["ipxe"]["contents"]
                .as_str()
                .is_some_and(|c| c.contains(&format!("http://{STACK}:50061/2009-04-04/user-data"))),
            "{name}: {spec}"
        );
        p.wait_condition(&name, "harvesterInstalled").await;
    }
    // Each server read its script from Smee and its config from Hegel, and is a Node of the
    // new cluster at its address.
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(p.target.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    for name in &p.names {
        let inventory = p.inventories().get(name).await.unwrap();
        let address = inventory.status.unwrap().pxe_boot_config.address.unwrap();
        assert!(
            nodes.items.iter().any(|n| n
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .is_some_and(|a| a.iter().any(|a| a.address == address))),
            "no Node of the new cluster has {name}'s address {address}"
        );
    }
    for status in p.servers.servers() {
        assert_eq!(status.script_fetches, 1, "server {}", status.index);
        assert_eq!(status.webhooks_sent, 1, "server {}", status.index);
    }
    p.finish().await;
}
