//! An InstancePool over Inventories, end to end: `ingot run --controllers pools,provisioning`
//! against a real API server that also plays the Harvester cluster the pool's nodes join (bound
//! to the VIP, taking bootstrap tokens as RKE2 does). Four Inventories' BMCs are emulated
//! Redfish BMCs (`ingot-bmc-sim`, TLS, 2 s power transitions); the servers behind them
//! (`ingot-boot-sim`'s `ServerFleet`) PXE-boot from ingot's boot server, fetch their install
//! config from their own static address, check it as the Harvester installer does, call the
//! SUCCEEDED webhook and register their Node with the pool's join token. The operator runs with a
//! token of the chart's ServiceAccount (`controllers={pools,provisioning}`, the chart's default
//! values otherwise), so the chart's roles are shown to be enough. What is asserted is
//! read from the peers: power states and boots at the BMCs, Nodes, claims and allocations at
//! the API server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod onprem_support;

use std::collections::BTreeMap;
use std::time::Duration;

use ingot_api::equinix::{Instance, InstancePool, POOL_LABEL, instance_status};
use ingot_api::seeder::Inventory;
use ingot_bmc_sim::{BmcSpec, Fleet};
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig};
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::wait_for;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use onprem_support::{
    allocations, claims, create_inventories, create_namespaces, free_port, index, object,
    power_offs, pxe_boots, rack,
};
use serde_json::json;

/// Where a test's cluster and nodes are: the tests of this file run at once, each on its own.
struct Net {
    /// Where the chart is installed (its ServiceAccount, the Instances' OS password Secrets);
    /// its kubeconfig file is named after it, so each test has its own.
    release_namespace: &'static str,
    vip: &'static str,
    node_cidr: &'static str,
    gateway: &'static str,
}

const SCALING: Net = Net {
    release_namespace: "ingot-scaling",
    vip: "127.0.11.1",
    node_cidr: "127.0.21.0/24",
    gateway: "127.0.21.1",
};
const CRASHES: Net = Net {
    release_namespace: "ingot-crashes",
    vip: "127.0.12.1",
    node_cidr: "127.0.22.0/24",
    gateway: "127.0.22.1",
};
const NO_MEDIA: Net = Net {
    release_namespace: "ingot-nomedia",
    vip: "127.0.13.1",
    node_cidr: "127.0.23.0/24",
    gateway: "127.0.23.1",
};
const TOKEN: &str = "pool-join-token-7d2f";
const SERVERS: usize = 4;
const WAIT: Duration = Duration::from_secs(240);

struct Site {
    client: Client,
    ns: String,
    fleet: Fleet,
    servers: ServerFleet,
    operator: Operator,
    _plane: ingot_testenv::ControlPlane,
    _running: ingot_boot_sim::Running,
}

impl Site {
    /// The site, the operator's first start armed at `crash_point`.
    async fn start(net: &Net, crash_point: Option<&str>) -> Self {
        let plane = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
            controller_manager: false,
            install_crds: true,
            watchdog_parent: Some(std::process::id()),
            bind_address: net.vip.parse().unwrap(),
            bootstrap_token_auth: true,
            ..ingot_testenv::Options::from_env().unwrap()
        })
        .await
        .unwrap();
        let env = ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
            .await
            .unwrap();
        let client = env.client().unwrap();
        let ns = "metal".to_owned();
        // The Inventories' namespace, and the chart's, where the Instances' OS passwords are.
        create_namespaces(&client, &[ns.as_str(), net.release_namespace]).await;
        let fleet = rack(SERVERS).await;
        let port = free_port();
        let boot = format!("http://127.0.0.1:{port}");
        let mut config = ServerFleetConfig::new(format!("{boot}/boot"), env.config());
        config.install_time = Duration::from_secs(3);
        config.heartbeat_interval = Duration::from_secs(1);
        let servers =
            ServerFleet::new(config, fleet.bmcs.iter().map(|b| b.state.clone()).collect()).unwrap();
        // The cluster the pool's nodes join runs already: its join credential for the token.
        servers.cluster_exists(TOKEN).await.unwrap();
        let running = servers.start();
        let service_account = chart_support::service_account_kubeconfig(
            plane.kubeconfig_path(),
            net.release_namespace,
            "pools,provisioning",
        );
        let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .tag("inventory-pools")
            .crash_point(crash_point)
            .kubeconfig(&service_account)
            .arg(format!("--lease-namespace={}", net.release_namespace))
            .arg(format!(
                "--equinix-secret-namespace={}",
                net.release_namespace
            ))
            .arg("--lease-duration-seconds=3")
            .controllers("pools,provisioning")
            .arg(format!("--provisioning-namespace={ns}"))
            .arg(format!("--seeder-namespace={ns}"))
            .arg(format!("--rufio-namespace={ns}"))
            .arg(format!("--pool-inventory-namespaces={ns}"))
            .arg(format!("--boot-addr=127.0.0.1:{port}"))
            .arg(format!("--boot-url={boot}"))
            .arg(format!("--cluster-address={}", net.vip))
            .arg("--harvester-mirror=http://127.0.0.1:9/iso")
            .arg("--metal-poll-seconds=1")
            .arg("--pool-release-wait-seconds=5")
            .arg("--wipe-kernel-url=http://127.0.0.1:9/wipe/vmlinuz")
            .arg("--wipe-initrd-url=http://127.0.0.1:9/wipe/initrd.img")
            // A member waiting for an Inventory is woken by the Inventory watch, not this look.
            .arg("--pool-no-inventory-retry-seconds=600")
            .env("TOKEN", TOKEN)
            .env("RUST_LOG", "info,ingot_controllers=debug")
            .start();
        let site = Site {
            client,
            ns,
            fleet,
            servers,
            operator,
            _plane: plane,
            _running: running,
        };
        // `node0`..`node2` labelled for the pool, `node3` not (yet).
        create_inventories(
            &site.client,
            &site.ns,
            &site.fleet,
            (net.node_cidr, net.gateway),
            |i| {
                if i < 3 {
                    json!({"rack": "a"})
                } else {
                    json!({})
                }
            },
        )
        .await;
        site
    }

    fn inventories(&self) -> Api<Inventory> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The pool `rack-a` over the Inventories labelled `rack: a`, with these fields besides
    /// (or instead).
    async fn create_pool_with(&self, count: i64, extra: serde_json::Value) {
        let mut spec = json!({
            "count": count,
            "inventorySelector": {"matchLabels": {"rack": "a"}},
            "inventoryNamespace": self.ns,
            "addressPool": "nodes",
            "harvesterVersion": "v1.7.1",
            "nodeCleanupWaitInterval": "6s",
            "maxUnhealthy": 1,
            "drainTimeout": "5s"
        });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        Api::<InstancePool>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
                    "metadata": {"name": "rack-a"},
                    "spec": spec
                })),
            )
            .await
            .unwrap();
    }

    /// What must hold whatever crashed where: each claimed Inventory is claimed for a live
    /// Instance of the pool, and the addresses handed out are exactly the claimed Inventories'.
    async fn consistent(&self) {
        let instances: Vec<String> = self
            .instances()
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        let claims = self.claims().await;
        for (host, inventory) in &claims {
            assert!(
                instances.contains(host),
                "Inventory {inventory} is claimed for {host}, which is no Instance: {instances:?}"
            );
        }
        let claimed: Vec<&String> = claims.values().collect();
        let allocated: Vec<String> = self.allocations().await.into_keys().collect();
        for owner in &allocated {
            assert!(
                claimed.contains(&owner),
                "an address is held by {owner}, which is not claimed: {claims:?}"
            );
        }
    }

    fn power_offs(&self, i: usize) -> usize {
        power_offs(&self.fleet, i)
    }

    async fn scale(&self, count: i64) {
        Api::<InstancePool>::all(self.client.clone())
            .patch(
                "rack-a",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"count": count}})),
            )
            .await
            .unwrap();
    }

    async fn instances(&self) -> Vec<Instance> {
        Api::<Instance>::all(self.client.clone())
            .list(&ListParams::default().labels(&format!("{POOL_LABEL}=rack-a")))
            .await
            .unwrap()
            .items
    }

    /// Waits until the pool has exactly `n` Instances, each `managed` with its Node; returns
    /// the claimed Inventory of each, by Instance.
    async fn settled(&self, n: usize) -> BTreeMap<String, String> {
        let reached = tokio::time::timeout(WAIT, async {
            loop {
                let instances = self.instances().await;
                let claims = self.claims().await;
                let nodes: Vec<String> = Api::<Node>::all(self.client.clone())
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect();
                let done = instances.len() == n
                    && instances.iter().all(|i| {
                        i.metadata.deletion_timestamp.is_none()
                            && i.status.as_ref().map(|s| s.status.as_str())
                                == Some(instance_status::MANAGED)
                            && nodes.contains(&i.name_any())
                    })
                    && claims.len() == n;
                if done {
                    return claims;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        match reached {
            Ok(claims) => claims,
            Err(_) => panic!(
                "the pool did not settle at {n}: {:#?}\nservers: {:#?}\noperator: {}",
                self.instances()
                    .await
                    .into_iter()
                    .map(|i| (i.name_any(), i.status))
                    .collect::<Vec<_>>(),
                self.servers.servers(),
                self.operator.log_tail()
            ),
        }
    }

    async fn claims(&self) -> BTreeMap<String, String> {
        claims(&self.client, &self.ns).await
    }

    async fn allocations(&self) -> BTreeMap<String, String> {
        allocations(&self.client, &self.ns).await
    }

    /// A power action at the BMC of `node<i>`, as a person (or a failure) does it.
    async fn press(&self, i: usize, reset: &str) {
        let bmc = &self.fleet.bmcs[i];
        let spec = BmcSpec::default();
        let answer = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .unwrap()
            .post(format!(
                "{}/redfish/v1/Systems/{}/Actions/ComputerSystem.Reset",
                bmc.url(),
                bmc.state.profile.system_id
            ))
            .basic_auth(&spec.username, Some(&spec.password))
            .json(&json!({"ResetType": reset}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{reset}: {}", answer.status());
    }

    /// The server's firmware boots the network first (a continuous PXE override), as many
    /// sites set it.
    async fn network_first(&self, i: usize) {
        let bmc = &self.fleet.bmcs[i];
        let spec = BmcSpec::default();
        let answer = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .unwrap()
            .patch(format!(
                "{}/redfish/v1/Systems/{}",
                bmc.url(),
                bmc.state.profile.system_id
            ))
            .basic_auth(&spec.username, Some(&spec.password))
            .json(&json!({"Boot": {"BootSourceOverrideEnabled": "Continuous",
                "BootSourceOverrideTarget": "Pxe"}}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
    }

    /// The pool's condition of this type: (status, reason).
    async fn pool_condition(&self, type_: &str) -> Option<(String, String)> {
        Api::<InstancePool>::all(self.client.clone())
            .get("rack-a")
            .await
            .unwrap()
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason))
    }

    async fn node_ready(&self, name: &str) -> Option<String> {
        Api::<Node>::all(self.client.clone())
            .get_opt(name)
            .await
            .unwrap()?
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status)
    }

    fn index(name: &str) -> usize {
        index(name)
    }

    fn pxe_boots(&self, i: usize) -> usize {
        pxe_boots(&self.fleet, i)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_over_inventories_scales_and_waits_for_a_free_inventory() {
    let site = Site::start(&SCALING, None).await;
    // The management network is tagged: VLAN 100 on the management bond.
    site.create_pool_with(
        2,
        json!({"networkingConfiguration": {"interfaceConfiguration": [
            {"name": "bond0", "vlanIDS": ["100"]}]}}),
    )
    .await;

    // 0 → 2: two Inventories claimed, each booted once into the installer (its address on the
    // pool's VLAN, which the emulated installer checks), joined as the Instance's Node at the
    // address allocated to it.
    let two = site.settled(2).await;
    let allocations = site.allocations().await;
    for (instance, inventory) in &two {
        let node = Api::<Node>::all(site.client.clone())
            .get(instance)
            .await
            .unwrap();
        let internal = node
            .status
            .and_then(|s| s.addresses)
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address);
        assert_eq!(internal.as_ref(), allocations.get(inventory), "{instance}");
        assert_eq!(site.pxe_boots(Site::index(inventory)), 1, "{inventory}");
        let install =
            Api::<k8s_openapi::api::core::v1::Secret>::namespaced(site.client.clone(), &site.ns)
                .get(&format!("{inventory}-pool-install"))
                .await
                .unwrap();
        let file =
            |key: &str| String::from_utf8(install.data.as_ref().unwrap()[key].0.clone()).unwrap();
        assert!(
            file("ipxe").contains("::vlan100:off vlan=vlan100:netboot"),
            "{}",
            file("ipxe")
        );
        let config: serde_yaml::Value = serde_yaml::from_str(&file("config")).unwrap();
        assert_eq!(config["install"]["managementInterface"]["vlanId"], 100);
    }
    let pool = Api::<InstancePool>::all(site.client.clone())
        .get("rack-a")
        .await
        .unwrap();
    let backend = pool
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "BackendReady")
        .expect("no BackendReady condition");
    assert_eq!(
        (backend.status.as_str(), backend.reason.as_str()),
        ("True", "Inventories")
    );

    // 2 → 1: one member drained and deleted; its server is powered off and read back off
    // before its claim and address are let go.
    site.scale(1).await;
    let one = site.settled(1).await;
    let (released_instance, released) = two
        .iter()
        .find(|(i, _)| !one.contains_key(*i))
        .map(|(i, n)| (i.clone(), n.clone()))
        .unwrap();
    let released_bmc = &site.fleet.bmcs[Site::index(&released)];
    wait_for("the released server off at its BMC", WAIT, || async {
        (released_bmc.state.snapshot().power_state == "Off").then_some(())
    })
    .await;
    wait_for("the released address freed", WAIT, || async {
        (!site.allocations().await.contains_key(&released)).then_some(())
    })
    .await;
    let nodes = Api::<Node>::all(site.client.clone());
    wait_for("the removed member's Node deleted", WAIT, || async {
        nodes
            .get_opt(&released_instance)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // 1 → 3: the freed Inventory and the third are claimed and installed.
    site.scale(3).await;
    let three = site.settled(3).await;
    assert!(three.values().any(|n| *n == released), "{three:?}");
    assert_eq!(
        site.pxe_boots(Site::index(&released)),
        2,
        "the released server is installed again for its new claim"
    );

    // 3 → 4 with three matching Inventories: the fourth member waits, saying why; labelling
    // the fourth Inventory lets it proceed.
    site.scale(4).await;
    let waiting = wait_for("a member waiting for a free Inventory", WAIT, || async {
        site.instances().await.into_iter().find(|i| {
            i.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == "NoneFree")
            })
        })
    })
    .await;
    let message = waiting
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains("all 3 Inventories"), "{message}");
    assert_eq!(site.pxe_boots(3), 0);
    site.inventories()
        .patch(
            "node3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"rack": "a"}}})),
        )
        .await
        .unwrap();
    let four = site.settled(4).await;
    assert_eq!(
        four.get(&waiting.name_any()).map(String::as_str),
        Some("node3")
    );
    assert_eq!(site.pxe_boots(3), 1);

    // 4 → 3: the Inventory let go is the free one a replacement can take.
    site.scale(3).await;
    let three = site.settled(3).await;
    let members: Vec<(String, String)> = three.into_iter().collect();

    // A partition: two of three servers stop, more than maxUnhealthy (1): nothing is replaced.
    site.press(Site::index(&members[0].1), "ForceOff").await;
    site.press(Site::index(&members[1].1), "ForceOff").await;
    wait_for("the pool holding its replacements", WAIT, || async {
        (site.pool_condition("RemediationAllowed").await
            == Some(("False".to_owned(), "TooManyUnhealthy".to_owned())))
        .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let held: Vec<String> = site
        .instances()
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    for (instance, _) in &members {
        assert!(
            held.contains(instance),
            "{instance} was replaced in a partition"
        );
    }

    // One comes back, its firmware set to boot the network first: the boot server sends it to
    // its disk (its install reported), so it is not installed again, and its Node is Ready.
    let back = Site::index(&members[1].1);
    let installs_before = site.servers.server(back).unwrap().installs;
    site.network_first(back).await;
    site.press(back, "On").await;
    wait_for("the returning Node Ready", WAIT, || async {
        (site.node_ready(&members[1].0).await.as_deref() == Some("True")).then_some(())
    })
    .await;
    let server = site.servers.server(back).unwrap();
    assert_eq!(server.boot_device.as_deref(), Some("Pxe"), "{server:?}");
    assert_eq!(
        server.installs, installs_before,
        "an installed server was installed again"
    );

    // One unhealthy, within the budget: its member is replaced, its Inventory released (after
    // the power off was read back, as every release), and a new member joins on a free one.
    let after = wait_for("the unhealthy member replaced", WAIT, || async {
        let claims = site.claims().await;
        (!claims.contains_key(&members[0].0) && claims.len() == 3).then_some(claims)
    })
    .await;
    assert!(after.contains_key(&members[1].0) && after.contains_key(&members[2].0));
    site.settled(3).await;
    let log = site.operator.log();
    assert!(
        !log.contains(TOKEN),
        "the join token is in the operator's log"
    );
}

/// The operator killed after a claim, after the install boot's Job was created but before it
/// was recorded, after the release's wipe boot was created but before it was recorded, and
/// after a release's power off was read back but before the claim went: one owner per
/// Inventory, no claim without its Instance, no address without its claim, one install boot,
/// one wipe and one power off at the BMC.
/// A pool that boots its servers from the CD, on an Inventory whose BMC has no virtual media
/// (IPMI): the CD boot fails at its insert, before the server is touched, and the Instance shows
/// the refusal (`Ready` `False`, `RequestRefused`, the BMC's reason and what to change) instead
/// of being replaced; the claim stays and nothing more reaches the BMC.
#[tokio::test(flavor = "multi_thread")]
async fn a_cd_boot_on_a_bmc_without_virtual_media_is_shown_on_the_instance() {
    let site = Site::start(&NO_MEDIA, None).await;
    let ipmi = ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig::uniform(1, "ipmi-password"))
        .await
        .unwrap();
    let bmc = ipmi.bmcs()[0].clone();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(site.client.clone(), &site.ns)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "nodev"},
                "stringData": {"username": "admin", "password": "ipmi-password"}})),
        )
        .await
        .unwrap();
    site.inventories()
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "nodev", "labels": {"rack": "v"}},
                "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": bmc.mac(0),
                    "baseboardSpec": {"connection": {"host": "127.0.0.1",
                        "port": bmc.addr().port(), "insecureTLS": true,
                        "authSecretRef": {"name": "nodev", "namespace": site.ns}}}}
            })),
        )
        .await
        .unwrap();
    wait_for("nodev ready", WAIT, || async {
        let i = site.inventories().get("nodev").await.ok()?;
        (i.status?.status.as_deref() == Some(ingot_api::seeder::INVENTORY_NODE_READY)).then_some(())
    })
    .await;
    let controls_before = bmc.stats().chassis_controls.len();
    site.create_pool_with(
        1,
        json!({"inventorySelector": {"matchLabels": {"rack": "v"}}, "bootMedia": "cd"}),
    )
    .await;
    let (instance, message) = wait_for("the Instance to show the refusal", WAIT, || async {
        let instance = site.instances().await.into_iter().next()?;
        let ready = instance
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        (ready.status == "False" && ready.reason == "RequestRefused")
            .then(|| (instance.name_any(), ready.message))
    })
    .await;
    assert!(
        message.contains("Inventory metal/nodev")
            && message.contains("virtual media")
            && message.contains("spec.bootMedia: pxe"),
        "{message}"
    );
    // Not replaced: the one Instance keeps its claim, and the server's power was not touched.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let instances = site.instances().await;
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0].name_any(), instance);
    assert_eq!(
        site.claims().await,
        BTreeMap::from([(instance.clone(), "nodev".to_owned())])
    );
    assert_eq!(
        bmc.stats().chassis_controls.len(),
        controls_before,
        "the refused CD boot reached the server's power"
    );
    site.operator.terminate();
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_during_claim_boot_and_release_nothing_is_owned_twice_or_leaked() {
    let mut site = Site::start(&CRASHES, Some("onprem-after-claim")).await;
    site.create_pool_with(1, json!({"wipePolicy": "metadata"}))
        .await;

    // Killed right after the claim: it holds, and nothing else was done.
    site.operator.wait_crashed("onprem-after-claim", WAIT).await;
    let claims = site.claims().await;
    assert_eq!(claims.len(), 1, "{claims:?}");
    site.consistent().await;
    assert!(site.allocations().await.is_empty());
    let inventory = claims.values().next().unwrap().clone();
    let i = Site::index(&inventory);
    assert_eq!(site.pxe_boots(i), 0);

    // Started again, killed once the install boot's Job exists but is not recorded.
    site.operator.restart(Some("onprem-after-boot-job"));
    site.operator
        .wait_crashed("onprem-after-boot-job", WAIT)
        .await;
    site.consistent().await;
    assert_eq!(site.claims().await, claims, "the claim was not adopted");

    // Started again for good: the same Inventory, booted once.
    site.operator.restart(None);
    let settled = site.settled(1).await;
    assert_eq!(settled, claims);
    site.consistent().await;
    assert_eq!(site.pxe_boots(i), 1, "the install boot was sent twice");
    let offs_before_release = site.power_offs(i);

    // Scaled to 0 (the pool wipes what it releases), killed once the wipe boot's Job exists
    // but is not recorded: the claim holds.
    let boots_before_release = site.pxe_boots(i);
    site.operator.restart(Some("onprem-after-wipe-job"));
    site.scale(0).await;
    site.operator
        .wait_crashed("onprem-after-wipe-job", WAIT)
        .await;
    site.consistent().await;
    assert_eq!(site.claims().await, claims);
    // Started again, killed once the power off was read back, before the address and claim
    // go: the wipe boot was sent once, the wipe ran and reported before the power off.
    site.operator.restart(Some("onprem-after-off-confirmed"));
    site.operator
        .wait_crashed("onprem-after-off-confirmed", WAIT)
        .await;
    site.consistent().await;
    assert_eq!(site.fleet.bmcs[i].state.snapshot().power_state, "Off");
    assert_eq!(
        site.pxe_boots(i),
        boots_before_release + 1,
        "the wipe boot was sent twice"
    );
    let server = site.servers.server(i).unwrap();
    assert_eq!((server.wipes, server.wipe_reports), (1, 1), "{server:?}");
    site.operator.restart(None);
    site.settled(0).await;
    site.consistent().await;
    assert!(site.allocations().await.is_empty());
    // The wipe boot's power off, then the release's: each sent once.
    assert_eq!(
        site.power_offs(i),
        offs_before_release + 2,
        "a power off was sent again: {:?}",
        site.fleet.bmcs[i].state.reset_requests()
    );
}
