//! The fixture of Seeder's full mode end to end: a Cluster of three Inventories provisioned
//! onto emulated servers behind emulated Redfish BMCs (`ingot-bmc-sim`, 2 s power transitions),
//! which PXE-boot from ingot's boot server, check their install config as the Harvester
//! installer would, call its SUCCEEDED webhook, and form the new cluster in a second
//! kube-apiserver bound to the Cluster's VIP (`ingot-boot-sim`'s `ServerFleet`).
//! `ingot run --controllers provisioning` runs as the plain manifests' ServiceAccount. What the
//! tests assert is read from the peers: boot records at the BMCs, Nodes in the new cluster,
//! allocations in the AddressPools.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ingot_api::seeder::{AddressPool, Cluster, Inventory};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_boot_sim::Running;
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig};
use ingot_testenv::harness::operator::Operator;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::chart_support;

pub const VIP: &str = "127.0.10.1";
pub const NODE_CIDR: &str = "127.0.20.0/24";
pub const GATEWAY: &str = "127.0.20.1";
pub const WAIT: Duration = Duration::from_secs(180);
pub const SERVERS: usize = 3;

/// A kubeconfig of the manifests' ServiceAccount (`deploy/manifests/provisioning.yaml`).
pub fn service_account(admin: &Path) -> &'static PathBuf {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| chart_support::install_from_manifests(admin, "provisioning"))
}

static TARGET: OnceCell<ingot_testenv::ControlPlane> = OnceCell::const_new();

/// The second control plane: the new Harvester cluster, listening on its VIP, taking bootstrap
/// tokens as RKE2 does.
pub async fn target() -> &'static ingot_testenv::ControlPlane {
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Cluster `first` over these Inventories (each with an address from the pool `nodes`), its
/// VIP from the pool `vip`, to be installed into the API server at `target_url`.
pub fn cluster_manifest(
    ns: &str,
    inventories: &[String],
    target_url: &str,
    nameserver: &str,
) -> Value {
    let target_port = target_url.rsplit(':').next().unwrap().trim_end_matches('/');
    let nodes: Vec<Value> = inventories
        .iter()
        .map(|n| {
            json!({"inventoryReference": {"name": n, "namespace": ns},
                "addressPoolReference": {"name": "nodes", "namespace": ns}})
        })
        .collect();
    json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "first", "labels": {"clusterPort.harvesterhci.io": target_port}},
        "spec": {
            "version": "v1.7.1",
            "imageURL": "http://127.0.0.1:9/iso",
            "clusterConfig": {"nameservers": [nameserver], "sshKeys": ["ssh-ed25519 AAAAC3Nz ops"]},
            "nodes": nodes,
            "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": ns}}
        }
    })
}

pub fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// How a [`Provisioned`] starts.
pub struct Options {
    /// The operator's log tag.
    pub tag: &'static str,
    /// The operator's first start is armed at this crash point.
    pub crash_point: Option<&'static str>,
    /// The nodes' pool: its CIDR and gateway (tests running at once use their own).
    pub node_cidr: &'static str,
    pub gateway: &'static str,
    /// Attempts of an installer webhook whose connection fails (one second apart).
    pub webhook_attempts: u32,
    /// `--provisioning-max-concurrent-installs`, if not the default.
    pub max_installs: Option<usize>,
    /// How long each emulated install takes.
    pub install_time: Duration,
    /// `--provisioning-install-timeout-seconds`, if not the default.
    pub install_timeout_seconds: Option<u64>,
    /// `--provisioning-boot tinkerbell`, as the chart's ServiceAccount with
    /// `provisioning.tinkerbell=true`; the Tinkerbell CRDs installed from the shared fixtures,
    /// Service `tink-stack` (without its load-balancer IP) and ConfigMap `seeder-config`
    /// ([`CONFIGURE_IMAGE`]) made in the namespace.
    pub tinkerbell: bool,
    /// Where the servers get their iPXE script, if not ingot's boot server (`{mac}` is theirs).
    pub server_boot_url: Option<String>,
    /// More arguments of `ingot run`.
    pub extra_args: Vec<String>,
}

/// The `configure-harvester-image` of the `seeder-config` ConfigMap (Tinkerbell mode).
pub const CONFIGURE_IMAGE: &str = "mirror.example/configure-harvester:v2";

/// Applies the `tinkerbell.org` CRDs of the shared fixtures (Hardware, Template, Workflow) and
/// waits until they are established.
pub async fn install_tinkerbell_crds(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dir = ingot_testenv::shared_dir().join("fixtures/upstream-crds");
    for file in ["hardware", "template", "workflow"] {
        let path = dir.join(format!("tinkerbell.org_{file}-crd.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text).unwrap();
        crd.status = None;
        crd.metadata.creation_timestamp = None;
        let name = crd.metadata.name.clone().unwrap();
        api.patch(
            &name,
            &kube::api::PatchParams::apply("ingot-tests").force(),
            &kube::api::Patch::Apply(&crd),
        )
        .await
        .unwrap();
        ingot_testenv::wait_for(&format!("CRD {name} established"), WAIT, || async {
            let crd = api.get(&name).await.ok()?;
            crd.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tag: "provisioned",
            crash_point: None,
            node_cidr: NODE_CIDR,
            gateway: GATEWAY,
            webhook_attempts: 5,
            max_installs: None,
            install_time: Duration::from_secs(3),
            install_timeout_seconds: None,
            tinkerbell: false,
            server_boot_url: None,
            extra_args: Vec::new(),
        }
    }
}

pub struct Provisioned {
    pub client: Client,
    pub ns: String,
    pub fleet: Fleet,
    pub servers: ServerFleet,
    _running: Running,
    pub operator: Operator,
    pub target: Client,
    /// Where ingot's boot server answers.
    pub boot_url: String,
    /// The Inventories' names, by BMC index.
    pub names: Vec<String>,
}

impl Provisioned {
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> Self {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let ns = env.namespace("prov").await.unwrap();
        let (kubeconfig, lease_namespace) = if options.tinkerbell {
            install_tinkerbell_crds(&client).await;
            for object in [
                json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "tink-stack", "namespace": ns},
                    "spec": {"type": "LoadBalancer", "ports": [{"name": "hegel", "port": 50061}]}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "seeder-config", "namespace": ns},
                    "data": {"configure-harvester-image": CONFIGURE_IMAGE}}),
            ] {
                chart_support::kubectl_apply(
                    env.kubeconfig_path(),
                    &serde_json::to_string(&object).unwrap(),
                    &[],
                );
            }
            let kubeconfig = chart_support::service_account_kubeconfig_with(
                env.kubeconfig_path(),
                &ns,
                "provisioning",
                &["provisioning.tinkerbell=true".to_owned()],
            );
            (kubeconfig, ns.clone())
        } else {
            (
                service_account(env.kubeconfig_path()).clone(),
                chart_support::MANIFESTS_NAMESPACE.to_owned(),
            )
        };
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
        let server_boot_url = options
            .server_boot_url
            .clone()
            .unwrap_or_else(|| format!("{boot}/boot"));
        let mut config = ServerFleetConfig::new(server_boot_url, target_env.config());
        config.install_time = options.install_time;
        config.heartbeat_interval = Duration::from_secs(1);
        config.webhook_attempts = options.webhook_attempts;
        let servers =
            ServerFleet::new(config, fleet.bmcs.iter().map(|b| b.state.clone()).collect()).unwrap();
        let running = servers.start();
        let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .tag(options.tag)
            .crash_point(options.crash_point)
            .kubeconfig(&kubeconfig)
            .arg(format!("--lease-namespace={lease_namespace}"))
            .arg(format!("--lease-name=ingot-{ns}"))
            .arg("--lease-duration-seconds=3")
            .controllers("provisioning")
            .arg(format!("--provisioning-namespace={ns}"))
            // Its own BMCs only: tests running at once keep to their namespaces (and to the
            // BMCs' few sessions).
            .arg(format!("--seeder-namespace={ns}"))
            .arg(format!("--rufio-namespace={ns}"))
            .arg(format!("--boot-addr=127.0.0.1:{port}"))
            .arg(format!("--boot-url={boot}"))
            .args(
                options
                    .max_installs
                    .map(|n| format!("--provisioning-max-concurrent-installs={n}")),
            )
            .args(
                options
                    .install_timeout_seconds
                    .map(|n| format!("--provisioning-install-timeout-seconds={n}")),
            )
            .args(
                options
                    .tinkerbell
                    .then_some("--provisioning-boot=tinkerbell".to_owned()),
            )
            .args(options.extra_args.clone())
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
            boot_url: boot.clone(),
            names: Vec::new(),
        };
        me.create_objects(plane.api_url(), &options).await;
        me
    }

    pub async fn create_objects(&mut self, target_url: &str, options: &Options) {
        let ns = &self.ns;
        self.create(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes"},
            "spec": {"cidr": options.node_cidr, "gateway": options.gateway}
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
        self.create(cluster_manifest(ns, &self.names, target_url, "127.0.20.53"))
            .await;
    }

    pub async fn create(&self, value: Value) {
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

    pub fn clusters(&self) -> Api<Cluster> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn inventories(&self) -> Api<Inventory> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pools(&self) -> Api<AddressPool> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits for the Cluster's status; on timeout fails with what the Cluster and its
    /// Inventories say.
    pub async fn wait_status(&self, status: &str) -> Cluster {
        self.wait_status_of("first", status).await
    }

    /// [`Self::wait_status`] of the Cluster `name`.
    pub async fn wait_status_of(&self, name: &str, status: &str) -> Cluster {
        let clusters = self.clusters();
        let reached = tokio::time::timeout(WAIT, async {
            loop {
                if let Ok(c) = clusters.get(name).await
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
                let cluster = clusters.get(name).await.ok().map(|c| c.status);
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
                    "Cluster {name} not {status} after {WAIT:?}: {cluster:#?}\n{inventories:#?}\nservers: {:#?}\noperator: {}",
                    self.servers.servers(),
                    self.operator.log_tail()
                )
            }
        }
    }

    /// PXE boots each server made, by BMC index.
    pub fn pxe_boots(&self) -> Vec<usize> {
        self.fleet
            .bmcs
            .iter()
            .map(|b| b.state.boots().iter().filter(|r| r.device == "Pxe").count())
            .collect()
    }

    pub fn condition(inventory: &Inventory, type_: &str) -> Option<String> {
        inventory
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    }

    /// Addresses each pool hands out, by the owner's name.
    pub async fn allocations(&self, pool: &str) -> BTreeMap<String, String> {
        let pool = self.pools().get(pool).await.unwrap();
        pool.status
            .unwrap_or_default()
            .address_allocation
            .into_iter()
            .map(|(address, owner)| (owner.name, address))
            .collect()
    }

    pub async fn finish(self) {
        self.operator.terminate();
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}
