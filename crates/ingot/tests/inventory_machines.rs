//! Gardener machines on Inventories, end to end: upstream machine-controller-manager (built from
//! its Go module) runs a MachineDeployment of `provider: Inventory` machines, and
//! `ingot run --controllers gardener,provisioning` is their machine controller, with a token of
//! the chart's ServiceAccount. Four Inventories' BMCs are emulated Redfish BMCs (`ingot-bmc-sim`,
//! TLS, 2 s power transitions); the servers behind them (`ingot-boot-sim`'s `ServerFleet`)
//! PXE-boot from ingot's boot server into the class's OS image, read their cloud-init data from
//! their own static address, and their kubelet joins with the bootstrap token the machine
//! controller wrote into the user data. What is asserted is read from the peers: power states at
//! the BMCs, Nodes, claims and addresses at the API server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod onprem_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ingot_api::gardener::{Machine, MachineClass, MachineDeployment};
use ingot_api::seeder::Inventory;
use ingot_bmc_sim::Fleet;
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig};
use ingot_controllers::gardener::driver::inventory::{InventoryDriver, InventorySettings};
use ingot_controllers::gardener::{Driver, SecretData};
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::mcm::Mcm;
use ingot_testenv::wait_for;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Api, Client, ResourceExt};
use onprem_support::{
    allocations, claims, create_inventories, create_namespaces, free_port, index, power_offs,
    pxe_boots, rack,
};
use serde_json::{Value, json};

/// Where the chart is installed and the Machines live (`gardener.namespace`), one per test:
/// the ServiceAccount's kubeconfig file is named after it.
const LIFE: &str = "ingot-machines";
const CRASHES: &str = "ingot-machine-crashes";
/// Where the Inventories, their BMC Secrets and the AddressPool are.
const METAL: &str = "metal";
const SERVERS: usize = 4;
const DEPLOYMENT: &str = "inv-md";
const WAIT: Duration = Duration::from_secs(240);

/// Gardener-style user data: the node agent's bootstrap token and machine name files.
const USER_DATA: &str = "#!/bin/bash\nmkdir -p /var/lib/gardener-node-agent/credentials\ncat <<EOF >/var/lib/gardener-node-agent/credentials/bootstrap-token\n<<BOOTSTRAP_TOKEN>>\nEOF\ncat <<EOF >/var/lib/gardener-node-agent/machine-name\n<<MACHINE_NAME>>\nEOF\nsystemctl enable --now gardener-node-agent\n";

struct Site {
    client: Client,
    /// The Machines' namespace.
    ns: &'static str,
    /// ingot's boot server.
    boot: String,
    fleet: Fleet,
    servers: ServerFleet,
    operator: Operator,
    _mcm: Mcm,
    _running: ingot_boot_sim::Running,
    _plane: ingot_testenv::ControlPlane,
}

impl Site {
    /// The site, the operator's first start armed at `crash_point`.
    async fn start(ns: &'static str, crash_point: Option<&str>) -> Self {
        let plane = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
            controller_manager: false,
            install_crds: true,
            watchdog_parent: Some(std::process::id()),
            ..ingot_testenv::Options::from_env().unwrap()
        })
        .await
        .unwrap();
        let env = ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
            .await
            .unwrap();
        let client = env.client().unwrap();
        create_namespaces(&client, &[METAL, ns]).await;
        let fleet = rack(SERVERS).await;
        let port = free_port();
        let boot = format!("http://127.0.0.1:{port}");
        let mut config = ServerFleetConfig::new(format!("{boot}/boot"), env.config());
        config.heartbeat_interval = Duration::from_secs(1);
        let servers =
            ServerFleet::new(config, fleet.bmcs.iter().map(|b| b.state.clone()).collect()).unwrap();
        let running = servers.start();
        let log = std::env::temp_dir().join(format!("mcm-{ns}.log"));
        let mcm =
            Mcm::start_with_target(plane.kubeconfig_path(), plane.kubeconfig_path(), ns, &log)
                .unwrap();
        let service_account = chart_support::service_account_kubeconfig(
            plane.kubeconfig_path(),
            ns,
            "gardener,provisioning",
        );
        let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .tag("inventory-machines")
            .crash_point(crash_point)
            .kubeconfig(&service_account)
            .controllers("gardener,provisioning")
            .arg(format!("--namespace={ns}"))
            .arg(format!("--lease-namespace={ns}"))
            .arg("--lease-duration-seconds=3")
            .arg(format!("--provisioning-namespace={METAL}"))
            .arg(format!("--seeder-namespace={METAL}"))
            .arg(format!("--rufio-namespace={METAL}"))
            .arg(format!("--machine-inventory-namespaces={METAL}"))
            .arg(format!("--boot-addr=127.0.0.1:{port}"))
            .arg(format!("--boot-url={boot}"))
            .arg("--machine-release-wait=5s")
            .arg("--wipe-kernel-url=http://127.0.0.1:9/wipe/vmlinuz")
            .arg("--wipe-initrd-url=http://127.0.0.1:9/wipe/initrd.img")
            .env("RUST_LOG", "info,ingot_controllers=debug")
            .start();
        let site = Site {
            client,
            ns,
            boot: boot.clone(),
            fleet,
            servers,
            operator,
            _mcm: mcm,
            _running: running,
            _plane: plane,
        };
        create_inventories(
            &site.client,
            METAL,
            &site.fleet,
            ("127.0.24.0/24", "127.0.24.1"),
            |_| json!({"rack": "a"}),
        )
        .await;
        site.create_classes().await;
        site
    }

    /// The classes `inv-a` and `inv-b` (another kernel line, and its released servers wiped),
    /// their Secret with Gardener-style user data, and the MachineDeployment at 0 on `inv-a`.
    async fn create_classes(&self) {
        self.apply(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "inv-secret", "namespace": self.ns},
            "stringData": {"userData": USER_DATA},
        }))
        .await;
        for (name, cmdline, wipe) in [
            ("inv-a", "console=ttyS0", "none"),
            ("inv-b", "console=ttyS1", "metadata"),
        ] {
            self.apply(&json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                "metadata": {"name": name, "namespace": self.ns},
                "provider": "Inventory",
                "providerSpec": {
                    "inventoryNamespace": METAL,
                    "inventorySelector": {"matchLabels": {"rack": "a"}},
                    "addressPool": "nodes",
                    "image": {
                        "kernel": "http://127.0.0.1:9/gardenlinux/vmlinuz",
                        "initrd": "http://127.0.0.1:9/gardenlinux/initrd",
                        "cmdline": cmdline,
                    },
                    "tags": ["kubernetes.io/cluster/shoot--e2e", "kubernetes.io/role/node"],
                    "wipePolicy": wipe,
                },
                "secretRef": {"name": "inv-secret", "namespace": self.ns},
            }))
            .await;
        }
        let mut md = ingot_compat::yaml_documents(&ingot_compat::shared_file(
            "fixtures/mcm-provider-samples/machine-deployment.yaml",
        ))
        .remove(0);
        md["metadata"] = json!({"name": DEPLOYMENT, "namespace": self.ns});
        md["spec"]["replicas"] = json!(0);
        md["spec"]["minReadySeconds"] = json!(0);
        // One new machine at a time, none of the old ones down before it runs.
        md["spec"]["strategy"]["rollingUpdate"] = json!({"maxSurge": 1, "maxUnavailable": 0});
        md["spec"]["selector"]["matchLabels"] = json!({"name": DEPLOYMENT});
        md["spec"]["template"]["metadata"]["labels"] = json!({"name": DEPLOYMENT});
        md["spec"]["template"]["spec"]["class"] = json!({"kind": "MachineClass", "name": "inv-a"});
        self.apply(&md).await;
    }

    /// The class with `inv-a`'s Inventory namespace, image and wipe policy.
    async fn mend_class(&self, name: &str) {
        let resource = ApiResource {
            group: "machine.sapcloud.io".into(),
            version: "v1alpha1".into(),
            api_version: "machine.sapcloud.io/v1alpha1".into(),
            kind: "MachineClass".into(),
            plural: "machineclasses".into(),
        };
        Api::<DynamicObject>::namespaced_with(self.client.clone(), self.ns, &resource)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"providerSpec": {
                    "inventoryNamespace": METAL,
                    "image": {"kernel": "http://127.0.0.1:9/vmlinuz"},
                    "wipePolicy": "none",
                    "inventoryMinimum": null,
                }})),
            )
            .await
            .unwrap();
    }

    async fn apply(&self, manifest: &Value) {
        let api_version = manifest["apiVersion"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = manifest["kind"].as_str().unwrap();
        let plural = match kind {
            "MachineClass" => "machineclasses".to_owned(),
            other => format!("{}s", other.to_lowercase()),
        };
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural,
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), self.ns, &resource);
        let object: DynamicObject = serde_json::from_value(manifest.clone()).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }

    fn inventories(&self) -> Api<Inventory> {
        Api::namespaced(self.client.clone(), METAL)
    }

    fn deployments(&self) -> Api<MachineDeployment> {
        Api::namespaced(self.client.clone(), self.ns)
    }

    async fn scale(&self, replicas: i64) {
        self.deployments()
            .patch(
                DEPLOYMENT,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
    }

    async fn machines(&self) -> Vec<Machine> {
        Api::<Machine>::namespaced(self.client.clone(), self.ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    async fn claims(&self) -> BTreeMap<String, String> {
        claims(&self.client, METAL).await
    }

    async fn allocations(&self) -> BTreeMap<String, String> {
        allocations(&self.client, METAL).await
    }

    async fn nodes(&self) -> BTreeSet<String> {
        Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect()
    }

    /// What must hold whatever crashed where: each claimed Inventory is claimed for a live
    /// Machine, and the addresses handed out are exactly the claimed Inventories'.
    async fn consistent(&self) {
        let machines: Vec<String> = self
            .machines()
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        let claims = self.claims().await;
        for (host, inventory) in &claims {
            assert!(
                machines.contains(host),
                "Inventory {inventory} is claimed for {host}, which is no Machine: {machines:?}"
            );
        }
        let claimed: BTreeSet<&String> = claims.values().collect();
        for owner in self.allocations().await.keys() {
            assert!(
                claimed.contains(owner),
                "an address is held by {owner}, which is not claimed: {claims:?}"
            );
        }
    }

    /// A Machine's last operation, once its description holds `text`.
    async fn last_operation_says(&self, machine: &str, text: &str) -> String {
        let api = Api::<Machine>::namespaced(self.client.clone(), self.ns);
        wait_for(
            &format!("machine {machine} to say {text:?}"),
            WAIT,
            async || {
                let description = api
                    .get_opt(machine)
                    .await
                    .unwrap()?
                    .status?
                    .last_operation?
                    .description?;
                description.contains(text).then_some(description)
            },
        )
        .await
    }

    fn power(&self, inventory: &str) -> String {
        self.fleet.bmcs[index(inventory)]
            .state
            .snapshot()
            .power_state
    }

    /// Exactly `n` Machines, all Running on class `class`, each on its own claimed Inventory
    /// (powered on, its address held) with its Node; every other Inventory free, powered off
    /// and without an address. Returns the claims, by Machine.
    async fn settled(&self, n: usize, class: &str) -> BTreeMap<String, String> {
        let found = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(claims) = self.settled_now(n, class).await {
                    return claims;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        match found {
            Ok(claims) => claims,
            Err(_) => panic!(
                "the deployment did not settle at {n} on {class}: machines {:#?}\nclaims {:?}\nservers {:#?}\noperator: {}",
                self.machines()
                    .await
                    .into_iter()
                    .map(|m| (m.name_any(), m.status))
                    .collect::<Vec<_>>(),
                self.claims().await,
                self.servers.servers(),
                self.operator.log_tail()
            ),
        }
    }

    async fn settled_now(&self, n: usize, class: &str) -> Option<BTreeMap<String, String>> {
        let machines = self.machines().await;
        let running = machines.len() == n
            && machines.iter().all(|m| {
                m.metadata.deletion_timestamp.is_none()
                    && m.spec.class.as_ref().is_some_and(|c| c.name == class)
                    && m.status
                        .as_ref()
                        .and_then(|s| s.current_status.as_ref())
                        .and_then(|c| c.phase.as_deref())
                        == Some("Running")
            });
        if !running {
            return None;
        }
        let claims = self.claims().await;
        let names: BTreeSet<String> = machines.iter().map(ResourceExt::name_any).collect();
        if claims.keys().cloned().collect::<BTreeSet<_>>() != names {
            return None;
        }
        let nodes = self.nodes().await;
        if !names.iter().all(|m| nodes.contains(m)) {
            return None;
        }
        let allocations = self.allocations().await;
        for i in 0..SERVERS {
            let inventory = format!("node{i}");
            let claimed = claims.values().any(|c| *c == inventory);
            let power = self.power(&inventory);
            let addressed = allocations.contains_key(&inventory);
            if claimed != (power == "On") || claimed != addressed {
                return None;
            }
        }
        // Each Machine's provider id names its claimed Inventory.
        for m in &machines {
            let id = m.spec.provider_id.as_deref().unwrap_or_default();
            if id != format!("inventory://{METAL}/{}", claims[&m.name_any()]) {
                return None;
            }
        }
        Some(claims)
    }
}

/// A MachineDeployment of Inventory machines under upstream MCM: 0 → 3 → 1, a rolling update
/// onto another class, and deleted to 0: every Inventory back in the free set, powered off,
/// its address free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_scales_rolls_and_deletes_on_inventories() {
    let site = Site::start(LIFE, None).await;

    site.scale(3).await;
    let three = site.settled(3, "inv-a").await;
    // The servers booted the class's image and read their user data from ingot.
    for i in 0..SERVERS {
        let status = site.servers.server(i).unwrap();
        if three.values().any(|c| *c == format!("node{i}")) {
            assert_eq!(
                status.node.as_deref(),
                three
                    .iter()
                    .find(|(_, c)| **c == format!("node{i}"))
                    .map(|(m, _)| m.as_str())
            );
        }
    }

    // Each server's cloud-init data goes to its own address only, its bootstrap token filled in.
    let (machine, inventory) = three.iter().next().unwrap();
    let address = site.allocations().await[inventory].clone();
    let url = format!("{}/nocloud/{METAL}/{inventory}/user-data", site.boot);
    let from = |source: &str| {
        reqwest::Client::builder()
            .local_address(source.parse::<std::net::IpAddr>().unwrap())
            .no_proxy()
            .build()
            .unwrap()
    };
    let refused = from("127.0.0.1").get(&url).send().await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
    let own = from(&address).get(&url).send().await.unwrap();
    assert_eq!(own.status(), reqwest::StatusCode::OK);
    let user_data = own.text().await.unwrap();
    assert!(
        user_data.contains("gardener-node-agent") && !user_data.contains("<<BOOTSTRAP_TOKEN>>"),
        "{user_data}"
    );
    let meta = from(&address)
        .get(format!(
            "{}/nocloud/{METAL}/{inventory}/meta-data",
            site.boot
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        meta.contains(&format!("local-hostname: {machine}\n")),
        "{meta}"
    );

    // The claims record the class's tags, and a class lists its cluster's machines of its own
    // role only, as on Equinix Metal (the driver asked directly, as MCM's orphan collection
    // does).
    for inventory in three.values() {
        let claimed = site.inventories().get(inventory).await.unwrap();
        assert_eq!(
            claimed.annotations()["onprem.ingot.dev/tags"],
            r#"["kubernetes.io/role/node"]"#
        );
    }
    let driver = InventoryDriver::new(
        site.client.clone(),
        InventorySettings {
            namespaces: vec![METAL.to_owned()],
            boot_url: None,
            wipe_image: None,
            off_wait: Duration::from_secs(1),
            crash_point: None,
        },
    );
    let classes: Api<MachineClass> = Api::namespaced(site.client.clone(), site.ns);
    let mut class = classes.get("inv-a").await.unwrap();
    let listed = driver
        .list_machines(&class, &SecretData::default())
        .await
        .unwrap();
    assert_eq!(
        listed.values().cloned().collect::<BTreeSet<_>>(),
        three.keys().cloned().collect::<BTreeSet<_>>()
    );
    class.spec.provider_spec["tags"] = json!([
        "kubernetes.io/cluster/shoot--e2e",
        "kubernetes.io/role/other"
    ]);
    let other = driver
        .list_machines(&class, &SecretData::default())
        .await
        .unwrap();
    assert!(other.is_empty(), "another role's class lists {other:?}");

    site.scale(1).await;
    let one = site.settled(1, "inv-a").await;
    let kept: &String = one.keys().next().unwrap();
    assert!(three.contains_key(kept), "a machine of the three is kept");
    wait_for("the removed machines' Nodes gone", WAIT, async || {
        let nodes = site.nodes().await;
        (!three.keys().any(|m| m != kept && nodes.contains(m))).then_some(())
    })
    .await;

    // A rolling update: the machine on `inv-a` replaced by one on `inv-b`.
    site.deployments()
        .patch(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": "inv-b"}}}}})),
        )
        .await
        .unwrap();
    let rolled = site.settled(1, "inv-b").await;
    assert!(!rolled.contains_key(kept), "the old machine was replaced");

    site.deployments()
        .delete(DEPLOYMENT, &DeleteParams::background())
        .await
        .unwrap();
    wait_for(
        "every machine gone, every Inventory free and off",
        WAIT,
        async || {
            let machines = site.machines().await;
            let claims = site.claims().await;
            let allocations = site.allocations().await;
            let off = (0..SERVERS).all(|i| site.power(&format!("node{i}")) == "Off");
            (machines.is_empty() && claims.is_empty() && allocations.is_empty() && off)
                .then_some(())
        },
    )
    .await;
    // Released Inventories carry none of the claim's records.
    for inventory in site
        .inventories()
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        let left: Vec<&String> = inventory
            .annotations()
            .keys()
            .filter(|k| k.starts_with("onprem.ingot.dev/"))
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", inventory.name_any());
    }
    // Only `inv-b` wipes: its machine's server was erased and reported once, before its off;
    // the servers `inv-a` released were not.
    for i in 0..SERVERS {
        let server = site.servers.server(i).unwrap();
        let on_b = rolled.values().any(|c| *c == format!("node{i}"));
        let expected = if on_b { (1, 1) } else { (0, 0) };
        assert_eq!((server.wipes, server.wipe_reports), expected, "{server:?}");
    }
}

/// A class the driver cannot serve says why on its Machine, naming the field, and claims
/// nothing: an image URL that is not http(s), an Inventory namespace the operator does not
/// allow (`--machine-inventory-namespaces`), a wipe policy it does not know, a selector no
/// Inventory matches and a minimum none has (ResourceExhausted, saying so).
async fn bad_classes_are_refused_naming_the_field(site: &Site) {
    let http = "http://127.0.0.1:9/vmlinuz";
    for (name, namespace, kernel, rack, wipe, minimum, expected) in [
        (
            "inv-ftp",
            METAL,
            "ftp://127.0.0.1:9/vmlinuz",
            "a",
            "none",
            1,
            "providerSpec.image.kernel",
        ),
        (
            "inv-elsewhere",
            "other-site",
            http,
            "a",
            "none",
            1,
            "--machine-inventory-namespaces",
        ),
        (
            "inv-shred",
            METAL,
            http,
            "a",
            "shred",
            1,
            "providerSpec.wipePolicy \"shred\": use none",
        ),
        // A selector nothing matches: no capacity, and why.
        (
            "inv-none",
            METAL,
            http,
            "z",
            "none",
            1,
            "code = [ResourceExhausted] message = [Could not create machine: no server to take: no Inventory in namespaces metal matches the selector",
        ),
        // A minimum no server has (the Dells have 56 cores): no capacity, and what each lacks.
        (
            "inv-small",
            METAL,
            http,
            "a",
            "none",
            1000,
            "has 1000 cores: metal/node",
        ),
    ] {
        site.apply(&json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": name, "namespace": site.ns},
            "provider": "Inventory",
            "providerSpec": {
                "inventoryNamespace": namespace,
                "inventorySelector": {"matchLabels": {"rack": rack}},
                "addressPool": "nodes",
                "image": {"kernel": kernel, "initrd": "http://127.0.0.1:9/initrd"},
                "tags": ["kubernetes.io/cluster/shoot--e2e", "kubernetes.io/role/node"],
                "wipePolicy": wipe,
                "inventoryMinimum": {"cores": minimum},
            },
            "secretRef": {"name": "inv-secret", "namespace": site.ns},
        }))
        .await;
        site.apply(&json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": format!("{name}-m"), "namespace": site.ns},
            "spec": {"class": {"kind": "MachineClass", "name": name}},
        }))
        .await;
        site.last_operation_says(&format!("{name}-m"), expected)
            .await;
        assert!(site.claims().await.is_empty(), "{name}: nothing is claimed");
        // Deleted, it waits for a class the driver can read (it cannot know what a class it
        // cannot read claimed); once the class is mended, the delete finds nothing and ends.
        Api::<Machine>::namespaced(site.client.clone(), site.ns)
            .delete(&format!("{name}-m"), &DeleteParams::background())
            .await
            .unwrap();
        site.mend_class(name).await;
    }
    wait_for("the refused machines gone", WAIT, async || {
        site.machines().await.is_empty().then_some(())
    })
    .await;
}

/// The operator killed after a claim, after the boot's Job was created but before it was
/// recorded, and after a release's power off was read back but before the claim went: one owner
/// per Inventory, no claim without its Machine, no address without its claim, one boot and one
/// power off at the BMC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_claim_boot_and_release_a_machine_s_inventory_is_owned_once() {
    let mut site = Site::start(CRASHES, Some("onprem-after-claim")).await;
    site.scale(1).await;

    site.operator.wait_crashed("onprem-after-claim", WAIT).await;
    let claims = site.claims().await;
    assert_eq!(claims.len(), 1, "{claims:?}");
    site.consistent().await;
    assert!(site.allocations().await.is_empty());
    let inventory = claims.values().next().unwrap().clone();
    let i = index(&inventory);
    assert_eq!(pxe_boots(&site.fleet, i), 0);

    site.operator.restart(Some("onprem-after-boot-job"));
    site.operator
        .wait_crashed("onprem-after-boot-job", WAIT)
        .await;
    site.consistent().await;
    assert_eq!(site.claims().await, claims, "the claim was not adopted");

    site.operator.restart(None);
    let settled = site.settled(1, "inv-a").await;
    assert_eq!(settled, claims);
    assert_eq!(pxe_boots(&site.fleet, i), 1, "the boot was sent twice");
    let offs_before_release = power_offs(&site.fleet, i);

    site.operator.restart(Some("onprem-after-off-confirmed"));
    site.scale(0).await;
    site.operator
        .wait_crashed("onprem-after-off-confirmed", WAIT)
        .await;
    site.consistent().await;
    assert_eq!(site.power(&inventory), "Off");
    site.operator.restart(None);
    wait_for(
        "the machine gone and its Inventory free",
        WAIT,
        async || (site.machines().await.is_empty() && site.claims().await.is_empty()).then_some(()),
    )
    .await;
    site.consistent().await;
    assert!(site.allocations().await.is_empty());
    assert_eq!(
        power_offs(&site.fleet, i),
        offs_before_release + 1,
        "the release's power off was sent again: {:?}",
        site.fleet.bmcs[i].state.reset_requests()
    );

    bad_classes_are_refused_naming_the_field(&site).await;
    assert!(
        !site.operator.log().contains("gardener-node-agent"),
        "the user data reached the operator's log"
    );
}
