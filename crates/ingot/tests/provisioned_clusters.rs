//! Seeder's full mode end to end: a Cluster of three Inventories provisioned onto emulated
//! servers behind emulated Redfish BMCs (`ingot-bmc-sim`, 2 s power transitions), which PXE-boot
//! from ingot's boot server, check their install config as the Harvester installer would, call
//! its SUCCEEDED webhook, and form the new cluster in a second kube-apiserver bound to the
//! Cluster's VIP (`ingot-boot-sim`'s `ServerFleet`). `ingot run --controllers provisioning` runs
//! as the plain manifests' ServiceAccount. What each step asserts is read from the peers: boot
//! records at the BMCs, Nodes in the new cluster, allocations in the AddressPools.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ingot_api::seeder::{AddressPool, Cluster, Inventory};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_boot_sim::Running;
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig};
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::harness::wait_for;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const VIP: &str = "127.0.10.1";
const NODE_CIDR: &str = "127.0.20.0/24";
const GATEWAY: &str = "127.0.20.1";
const WAIT: Duration = Duration::from_secs(180);
const SERVERS: usize = 3;

/// A kubeconfig of the manifests' ServiceAccount (`deploy/manifests/provisioning.yaml`).
fn service_account(admin: &Path) -> &'static PathBuf {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| chart_support::install_from_manifests(admin, "provisioning"))
}

static TARGET: OnceCell<ingot_testenv::ControlPlane> = OnceCell::const_new();

/// The second control plane: the new Harvester cluster, listening on its VIP, taking bootstrap
/// tokens as RKE2 does.
async fn target() -> &'static ingot_testenv::ControlPlane {
    TARGET
        .get_or_init(|| async {
            let options = ingot_testenv::Options {
                controller_manager: false,
                install_crds: false,
                watchdog_parent: Some(std::process::id()),
                bind_address: VIP.parse().unwrap(),
                bootstrap_token_auth: true,
                ..ingot_testenv::Options::from_env().unwrap()
            };
            ingot_testenv::ControlPlane::start(options).await.unwrap()
        })
        .await
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

struct Provisioned {
    client: Client,
    ns: String,
    fleet: Fleet,
    servers: ServerFleet,
    _running: Running,
    operator: Operator,
    target: Client,
    /// The Inventories' names, by BMC index.
    names: Vec<String>,
}

impl Provisioned {
    async fn start() -> Self {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let ns = env.namespace("prov").await.unwrap();
        let kubeconfig = service_account(env.kubeconfig_path()).clone();
        let plane = target().await;
        let target_env = ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
            .await
            .unwrap();
        let spec = BmcSpec {
            vendor: Vendor::Dell,
            power_delay: Duration::from_secs(2),
            initial_power_on: false,
            ..BmcSpec::default()
        };
        let fleet = Fleet::start(
            FleetOptions {
                tls: true,
                ..FleetOptions::default()
            },
            vec![spec; SERVERS],
        )
        .await
        .unwrap();
        let port = free_port();
        let boot = format!("http://127.0.0.1:{port}");
        let mut config = ServerFleetConfig::new(format!("{boot}/boot"), target_env.config());
        config.install_time = Duration::from_secs(3);
        config.heartbeat_interval = Duration::from_secs(1);
        let servers =
            ServerFleet::new(config, fleet.bmcs.iter().map(|b| b.state.clone()).collect()).unwrap();
        let running = servers.start();
        let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .tag("provisioned")
            .kubeconfig(&kubeconfig)
            .arg(format!(
                "--lease-namespace={}",
                chart_support::MANIFESTS_NAMESPACE
            ))
            .arg(format!("--lease-name=ingot-{ns}"))
            .arg("--lease-duration-seconds=3")
            .controllers("provisioning")
            .arg(format!("--provisioning-namespace={ns}"))
            .arg(format!("--boot-addr=127.0.0.1:{port}"))
            .arg(format!("--boot-url={boot}"))
            .env("RUST_LOG", "info,ingot_controllers=debug")
            .start();
        let mut me = Provisioned {
            client,
            ns,
            fleet,
            servers,
            _running: running,
            operator,
            target: target_env.client().unwrap(),
            names: Vec::new(),
        };
        me.create_objects(plane.api_url()).await;
        me
    }

    async fn create_objects(&mut self, target_url: &str) {
        let ns = &self.ns;
        let target_port = target_url.rsplit(':').next().unwrap().trim_end_matches('/');
        self.create(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes"},
            "spec": {"cidr": NODE_CIDR, "gateway": GATEWAY}
        }))
        .await;
        // A /32 for the VIP, as Seeder's README writes its pools.
        self.create(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "vip"},
            "spec": {"cidr": format!("{VIP}/32"), "gateway": "127.0.10.254", "netmask": "255.255.255.0"}
        }))
        .await;
        for (i, bmc) in self.fleet.bmcs.iter().enumerate() {
            let name = format!("node{i}");
            let spec = &BmcSpec::default();
            self.create(json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                "stringData": {"username": spec.username, "password": spec.password}
            }))
            .await;
            self.create(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "metadata": {"name": name},
                "spec": {
                    "primaryDisk": "/dev/sda",
                    "managementInterfaceMacAddress": bmc.state.mac(0),
                    "baseboardSpec": {"connection": {
                        "host": format!("https://127.0.0.1:{}", bmc.addr.port()), "port": 623,
                        "insecureTLS": true,
                        "authSecretRef": {"name": name, "namespace": ns}}}
                }
            }))
            .await;
            self.names.push(name);
        }
        let nodes: Vec<Value> = self
            .names
            .iter()
            .map(|n| {
                json!({"inventoryReference": {"name": n, "namespace": ns},
                    "addressPoolReference": {"name": "nodes", "namespace": ns}})
            })
            .collect();
        self.create(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "first", "labels": {"clusterPort.harvesterhci.io": target_port}},
            "spec": {
                "version": "v1.7.1",
                "imageURL": "http://127.0.0.1:9/iso",
                "clusterConfig": {"nameservers": ["127.0.20.53"], "sshKeys": ["ssh-ed25519 AAAAC3Nz ops"]},
                "nodes": nodes,
                "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": ns}}
            }
        }))
        .await;
    }

    async fn create(&self, value: Value) {
        let kind = value["kind"].as_str().unwrap().to_owned();
        let result = match kind.as_str() {
            "Secret" => Api::<Secret>::namespaced(self.client.clone(), &self.ns)
                .create(&PostParams::default(), &object(value))
                .await
                .map(drop),
            "AddressPool" => self
                .pools()
                .create(&PostParams::default(), &object(value))
                .await
                .map(drop),
            "Inventory" => self
                .inventories()
                .create(&PostParams::default(), &object(value))
                .await
                .map(drop),
            _ => self
                .clusters()
                .create(&PostParams::default(), &object(value))
                .await
                .map(drop),
        };
        result.unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
    }

    fn clusters(&self) -> Api<Cluster> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn inventories(&self) -> Api<Inventory> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pools(&self) -> Api<AddressPool> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits for the Cluster's status; on timeout fails with what the Cluster and its
    /// Inventories say.
    async fn wait_status(&self, status: &str) -> Cluster {
        let clusters = self.clusters();
        let reached = tokio::time::timeout(WAIT, async {
            loop {
                if let Ok(c) = clusters.get("first").await
                    && c.status.as_ref().and_then(|s| s.status.as_deref()) == Some(status)
                {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        match reached {
            Ok(cluster) => cluster,
            Err(_) => {
                let cluster = clusters.get("first").await.ok().map(|c| c.status);
                let inventories: Vec<_> = self
                    .inventories()
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|i| (i.metadata.name, i.status))
                    .collect();
                panic!(
                    "Cluster first not {status} after {WAIT:?}: {cluster:#?}\n{inventories:#?}\nservers: {:#?}\noperator: {}",
                    self.servers.servers(),
                    self.operator.log_tail()
                )
            }
        }
    }

    /// PXE boots each server made, by BMC index.
    fn pxe_boots(&self) -> Vec<usize> {
        self.fleet
            .bmcs
            .iter()
            .map(|b| b.state.boots().iter().filter(|r| r.device == "Pxe").count())
            .collect()
    }

    fn condition(inventory: &Inventory, type_: &str) -> Option<String> {
        inventory
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    }

    /// Addresses each pool hands out, by the owner's name.
    async fn allocations(&self, pool: &str) -> BTreeMap<String, String> {
        let pool = self.pools().get(pool).await.unwrap();
        pool.status
            .unwrap_or_default()
            .address_allocation
            .into_iter()
            .map(|(address, owner)| (owner.name, address))
            .collect()
    }

    async fn addresses_are_allocated_and_every_server_boots_once(&mut self) {
        self.wait_status("tinkConfigReady").await;
        let inventories = self.inventories();
        let mut addresses = BTreeSet::new();
        for name in &self.names {
            let inventory = inventories.get(name).await.unwrap();
            let status = inventory.status.clone().unwrap();
            let address = status.pxe_boot_config.address.clone().unwrap();
            assert!(address.starts_with("127.0.20."), "{name}: {address}");
            assert_ne!(address, GATEWAY, "the gateway was handed out");
            assert_ne!(address, "127.0.20.0", "the network address was handed out");
            assert_eq!(status.pxe_boot_config.gateway.as_deref(), Some(GATEWAY));
            assert_eq!(status.owner_cluster.name, "first");
            assert_eq!(
                status.generated_password, None,
                "the OS password stays in its Secret"
            );
            addresses.insert(address);
        }
        assert_eq!(addresses.len(), SERVERS, "an address was given twice");
        let cluster = self.clusters().get("first").await.unwrap();
        let status = cluster.status.unwrap();
        assert_eq!(status.cluster_address.as_deref(), Some(VIP));
        assert_eq!(status.token, None, "the cluster token stays in its Secret");
        let first = inventories.get(&self.names[0]).await.unwrap();
        assert_eq!(
            Self::condition(&first, "harvesterCreateNode").as_deref(),
            Some("True")
        );
        let second = inventories.get(&self.names[1]).await.unwrap();
        assert_eq!(
            Self::condition(&second, "harvesterJoinNode").as_deref(),
            Some("True")
        );
        let boots = wait_for("every server to PXE-boot", WAIT, || async {
            let boots = self.pxe_boots();
            boots.iter().all(|b| *b >= 1).then_some(boots)
        })
        .await;
        assert_eq!(boots, vec![1; SERVERS], "PXE boots per server");
    }

    async fn the_cluster_runs_once_its_nodes_are_ready_in_it(&mut self) {
        self.wait_status("clusterRunning").await;
        let nodes = Api::<Node>::all(self.target.clone())
            .list(&ListParams::default())
            .await
            .unwrap();
        let inventories = self.inventories();
        for name in &self.names {
            let inventory = inventories.get(name).await.unwrap();
            let address = inventory
                .status
                .clone()
                .unwrap()
                .pxe_boot_config
                .address
                .unwrap();
            assert!(
                nodes.items.iter().any(|n| n
                    .status
                    .as_ref()
                    .and_then(|s| s.addresses.as_ref())
                    .is_some_and(|a| a.iter().any(|a| a.address == address))),
                "no Node of the new cluster has {name}'s address {address}"
            );
            assert_eq!(
                Self::condition(&inventory, "harvesterInstalled").as_deref(),
                Some("True"),
                "{name}"
            );
        }
        for status in self.servers.servers() {
            assert_eq!(status.webhooks_sent, 1, "server {}", status.index);
            assert_eq!(status.script_fetches, 1, "server {}", status.index);
        }
        // Installed: no server is booted into the installer again.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            self.pxe_boots(),
            vec![1; SERVERS],
            "a server was booted twice"
        );
    }

    async fn a_removed_node_is_shut_down_then_its_address_freed(&mut self) {
        let removed = self.names[2].clone();
        let held = self.allocations("nodes").await;
        assert!(held.contains_key(&removed));
        let cluster = self.clusters().get("first").await.unwrap();
        let nodes: Vec<Value> = serde_json::to_value(&cluster.spec.nodes)
            .unwrap()
            .as_array()
            .unwrap()[..2]
            .to_vec();
        self.clusters()
            .patch(
                "first",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"nodes": nodes}})),
            )
            .await
            .unwrap();
        let inventories = self.inventories();
        let freed = wait_for(&format!("{removed} freed"), WAIT, || async {
            let i = inventories.get(&removed).await.ok()?;
            (Self::condition(&i, "inventoryFreed").as_deref() == Some("True")).then_some(i)
        })
        .await;
        let status = freed.status.unwrap();
        assert!(status.owner_cluster.name.is_empty());
        assert_eq!(status.pxe_boot_config.address, None);
        assert!(
            !self.fleet.bmcs[2].state.snapshot().power_state.eq("On"),
            "freed while its BMC reports it on"
        );
        assert!(!self.allocations("nodes").await.contains_key(&removed));
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &self.ns);
        assert!(
            secrets
                .get_opt(&format!("{removed}-harvester-install"))
                .await
                .unwrap()
                .is_none(),
            "the install Secret (OS password, config) outlived the allocation"
        );
    }

    async fn deleting_the_cluster_releases_every_node_and_the_vip(&mut self) {
        self.clusters()
            .delete("first", &DeleteParams::default())
            .await
            .unwrap();
        let clusters = self.clusters();
        wait_for("the Cluster to go", WAIT, || async {
            clusters
                .get_opt("first")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
        for (i, name) in self.names.iter().enumerate() {
            let inventory = self.inventories().get(name).await.unwrap();
            assert!(
                inventory.status.unwrap().owner_cluster.name.is_empty(),
                "{name} still names the Cluster"
            );
            assert_ne!(
                self.fleet.bmcs[i].state.snapshot().power_state,
                "On",
                "{name} is on"
            );
        }
        assert!(self.allocations("nodes").await.is_empty());
        assert!(self.allocations("vip").await.is_empty());
    }

    async fn finish(self) {
        self.operator.terminate();
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

ingot_testenv::scenario!(mod three_servers: Provisioned {
    addresses_are_allocated_and_every_server_boots_once,
    the_cluster_runs_once_its_nodes_are_ready_in_it,
    a_removed_node_is_shut_down_then_its_address_freed,
    deleting_the_cluster_releases_every_node_and_the_vip,
});
