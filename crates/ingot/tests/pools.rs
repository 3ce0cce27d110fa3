//! The pools part end to end: a real kube-apiserver, the Metal emulator, the booting servers,
//! and `ingot run` as a process. The scenarios share one emulator-free control plane, so they
//! run one at a time (each with its own emulator, booter and operator).
//!
//! The longer ones are fixtures with named tests, one behaviour each
//! (`ingot_testenv::scenario!`): the fixture's `start` sets its pool up once, its steps run in
//! order on it (each starting from what the steps before it left), each reported as its own test.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ingot_api::equinix::{Instance, InstancePool};
use ingot_boot_sim::{Booter, BooterConfig, Expected, NotReady, Running};
use ingot_metal_sim::{PlanMetro, SimConfig, SimServer, Timings};
use ingot_testenv::{Front, Operator, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const METAL_TOKEN: &str = "metal-token-e2e";
const PROJECT: &str = "8f3a0bd2-5c4e-4d7a-9b1e-3c2d1e0f9a87";
const JOIN_TOKEN: &str = "K10-e2e-join-token";
const VIP: &str = "192.0.2.44";

/// One scenario at a time: every operator watches every (cluster-scoped) pool.
static SERIAL: Mutex<()> = Mutex::const_new(());

struct Stack {
    client: Client,
    namespace: String,
    sim: SimServer,
    booter: Booter,
    _running: Running,
    operator: Option<Operator>,
    /// The operator's health, metrics and iPXE address as the servers see it: one address the
    /// test holds across the operator's restarts (each of which binds a port of its own).
    front: Front,
    kubeconfig: std::path::PathBuf,
    /// The point at which the operator aborts (`--crash-point`), if any.
    crash_point: Option<String>,
    /// Seconds before an install that has not joined is repeated.
    install_retry_seconds: u64,
    /// The join token the operator renders (`TOKEN`); the booting servers expect JOIN_TOKEN.
    join_token: String,
    /// Where the credentials Secret is (`NAMESPACE`) and where the Lease is taken.
    credentials_namespace: String,
    lease_namespace: String,
}

/// The emulator's realistic device timings, scaled down ten times: a server is active about
/// 3 s after its create, back from a reinstall 2 s after it.
fn scaled_timings() -> Timings {
    let realistic = Timings::realistic();
    Timings {
        queued_ms: realistic.queued_ms / 10,
        provisioning_ms: realistic.provisioning_ms / 10,
        reinstalling_ms: realistic.reinstalling_ms / 10,
        deprovisioning_ms: realistic.deprovisioning_ms / 10,
        power_ms: realistic.power_ms / 10,
    }
}

impl Stack {
    async fn start(with_secret: bool) -> Stack {
        let mut stack = Self::prepare(false).await;
        if with_secret {
            stack.write_secret(METAL_TOKEN).await;
        }
        stack.start_operator();
        stack
    }

    /// The emulator and booter, ingot not started yet. `from_manifests`: ingot is installed as
    /// docs/migrate-from-equinix-addon.md says (deploy/manifests/pools.yaml, its ServiceAccount,
    /// the credentials in harvester-system); otherwise with the chart's RBAC in a namespace of
    /// the test's own.
    async fn prepare(from_manifests: bool) -> Stack {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let namespace = env.namespace("pools").await.unwrap();
        let mut sim_config = SimConfig::single(METAL_TOKEN, PROJECT);
        sim_config.timings = scaled_timings();
        let sim = SimServer::start(sim_config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let mut config = BooterConfig::new(
            sim.base_url(),
            Expected {
                token: JOIN_TOKEN.to_owned(),
                host: VIP.to_owned(),
                port: None,
                schema: None,
            },
        );
        config.project = Some(PROJECT.to_owned());
        config.poll_interval = Duration::from_millis(100);
        config.heartbeat_interval = Duration::from_secs(1);
        let booter = Booter::new(config, client.clone()).unwrap();
        let running = booter.start();
        let front = Front::following(&log_path(&namespace)).await;
        // `ingot run` runs as the chart's ServiceAccount with the chart's RBAC for pools: a
        // permission the chart lacks fails these tests.
        let (kubeconfig, credentials_namespace, lease_namespace) = if from_manifests {
            (
                chart_support::install_from_manifests(env.kubeconfig_path(), "pools"),
                "harvester-system".to_owned(),
                chart_support::MANIFESTS_NAMESPACE.to_owned(),
            )
        } else {
            (
                chart_support::service_account_kubeconfig(
                    env.kubeconfig_path(),
                    &namespace,
                    "pools",
                ),
                namespace.clone(),
                namespace.clone(),
            )
        };
        Stack {
            client,
            namespace,
            sim,
            booter,
            _running: running,
            operator: None,
            front,
            kubeconfig,
            crash_point: None,
            install_retry_seconds: 10,
            join_token: JOIN_TOKEN.to_owned(),
            credentials_namespace,
            lease_namespace,
        }
    }

    /// Starts (or restarts) `ingot run`, with the stack's settings as they are now (a test
    /// changes the join token between two starts); every start appends to one log.
    fn start_operator(&mut self) {
        self.kill_operator();
        let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .log_file(self.log_path())
            .crash_point(self.crash_point.as_deref())
            // The same identity after every restart, as a pod keeps its name: the restarted
            // process takes its own Lease back at once.
            .arg(format!("--identity=ingot-e2e-{}", self.namespace))
            .kubeconfig(&self.kubeconfig)
            .arg(format!("--lease-namespace={}", self.lease_namespace))
            .arg("--lease-duration-seconds=3")
            .arg(format!("--metal-api-url={}", self.sim.base_url()))
            .arg(format!("--ipxe-base-url=http://{}", self.front.addr()))
            .arg(format!("--cluster-address={VIP}"))
            .arg("--metal-rate-limit=200")
            .arg("--metal-poll-seconds=0.5")
            // A kill can land while a server fetches its install script from this operator.
            .arg(format!(
                "--install-retry-seconds={}",
                self.install_retry_seconds
            ))
            .arg("--error-backoff-seconds=0.5")
            .arg("--error-backoff-max-seconds=5")
            // Pools over Inventories of one namespace only (its test names another).
            .arg("--pool-inventory-namespaces=racks")
            .env("NAMESPACE", &self.credentials_namespace)
            .env("TOKEN", &self.join_token)
            .start();
        self.operator = Some(operator);
    }

    fn operator(&self) -> &Operator {
        self.operator.as_ref().expect("the operator was started")
    }

    fn kill_operator(&mut self) {
        if let Some(operator) = &self.operator {
            operator.kill();
        }
    }

    async fn write_secret(&self, token: &str) {
        let secrets: Api<Secret> =
            Api::namespaced(self.client.clone(), &self.credentials_namespace);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "equinix-addon"},
            "stringData": {"METAL_AUTH_TOKEN": token, "PROJECT_ID": PROJECT}
        }))
        .unwrap();
        secrets
            .patch(
                "equinix-addon",
                &PatchParams::apply("e2e").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
    }

    /// The operator's /metrics: series (name with labels) -> value.
    async fn metrics(&self) -> BTreeMap<String, f64> {
        self.operator().metrics().await
    }

    fn pools(&self) -> Api<InstancePool> {
        Api::all(self.client.clone())
    }

    fn instances(&self) -> Api<Instance> {
        Api::all(self.client.clone())
    }

    async fn create_pool(&self, mut manifest: Value, name: &str) {
        manifest["metadata"]["name"] = json!(name);
        let pool: InstancePool = serde_json::from_value(manifest).unwrap();
        self.pools()
            .create(&PostParams::default(), &pool)
            .await
            .unwrap();
    }

    async fn set_count(&self, name: &str, count: i64) {
        self.pools()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"count": count}})),
            )
            .await
            .unwrap();
    }

    async fn pool_columns(&self, name: &str) -> Option<(String, i64, i64)> {
        let status = self.pools().get(name).await.ok()?.status?;
        Some((status.status, status.ready, status.requested))
    }

    async fn wait_ready(&self, name: &str, count: i64, timeout: Duration) {
        let want = ("ready".to_owned(), count, count);
        wait_for(
            &format!("pool {name} to be `ready {count} {count}`"),
            timeout,
            async || (self.pool_columns(name).await.as_ref() == Some(&want)).then_some(()),
        )
        .await;
    }

    async fn pool_instances(&self, pool: &str) -> Vec<Instance> {
        let list = self
            .instances()
            .list(&ListParams::default().labels(&format!("instancePool={pool}")))
            .await
            .unwrap();
        list.items
            .into_iter()
            .filter(|i| i.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// Devices of these pools in the emulator (hostname `<pool>-<suffix>`): id -> (hostname,
    /// device JSON). Other tests' pools share the control plane, so devices are told apart by
    /// pool name.
    fn devices(&self, pools: &[&str]) -> BTreeMap<String, (String, Value)> {
        self.sim
            .sim()
            .device_listing(Some(PROJECT))
            .into_iter()
            .filter_map(|entry| {
                let device = entry["device"].clone();
                let id = device["id"].as_str().unwrap().to_owned();
                let hostname = device["hostname"].as_str().unwrap().to_owned();
                let ours = pools.iter().any(|pool| {
                    hostname
                        .strip_prefix(pool)
                        .is_some_and(|rest| rest.len() == 9 && rest.starts_with('-'))
                });
                ours.then_some((id, (hostname, device)))
            })
            .collect()
    }

    async fn metal(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{path}", self.sim.base_url()))
            .header("X-Auth-Token", METAL_TOKEN);
        if !body.is_null() {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Waits for an Event on the object that matches (Events follow the status write).
    async fn expect_event(
        &self,
        kind: &str,
        name: &str,
        matches: impl Fn(&(String, String, String)) -> bool,
    ) {
        wait_for(
            &format!("an Event on {kind} {name}"),
            Duration::from_secs(15),
            async || {
                self.events_for(kind, name)
                    .await
                    .iter()
                    .any(&matches)
                    .then_some(())
            },
        )
        .await;
    }

    async fn events_for(&self, kind: &str, name: &str) -> Vec<(String, String, String)> {
        let events: Api<Event> = Api::all(self.client.clone());
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some(kind)
                    && e.involved_object.name.as_deref() == Some(name)
            })
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Deletes every pool named and waits until the emulator holds no device.
    async fn delete_pools_and_expect_no_devices(&self, names: &[String]) {
        for name in names {
            match self.pools().delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                // Deleted by the test already.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => panic!("deleting pool {name}: {error}"),
            }
        }
        let pools: Vec<&str> = names.iter().map(String::as_str).collect();
        wait_for(
            "every device to be deleted",
            Duration::from_secs(90),
            async || self.devices(&pools).is_empty().then_some(()),
        )
        .await;
        for name in names {
            wait_for(
                "the pool's Instances to be gone",
                Duration::from_secs(60),
                async || self.pool_instances(name).await.is_empty().then_some(()),
            )
            .await;
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.kill_operator();
    }
}

/// The operator's log of the test in `namespace`: every start's lines.
fn log_path(namespace: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ingot-{namespace}.log"))
}

fn readme_pool() -> Value {
    ingot_compat::readme_pool()
}

/// The fork README's networkingConfiguration variants, in the order they appear.
fn fork_networking_variants() -> Vec<Value> {
    ingot_compat::fork_manifest_and_snippets().1
}

/// The README's pool and the fork README's five networkingConfiguration variants, one server
/// each, in a project that holds the fork README's VLANs.
struct Seeds {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    stack: Stack,
    /// Each pool's name and manifest.
    pools: Vec<(String, Value)>,
}

impl Seeds {
    async fn start() -> Self {
        let serial = SERIAL.lock().await;
        let stack = Stack::start(true).await;
        // The fork README's VLANs exist in the project, as its README assumes.
        for vxlan in [1000, 1001] {
            stack
                .metal(
                    reqwest::Method::POST,
                    &format!("/projects/{PROJECT}/virtual-networks"),
                    json!({"metro": "sg", "vxlan": vxlan}),
                )
                .await;
        }
        let suffix = ingot_testenv::random_suffix(4);
        let mut pools = vec![(format!("readme-{suffix}"), readme_pool())];
        for (index, networking) in fork_networking_variants().into_iter().enumerate() {
            let mut pool = readme_pool();
            pool["spec"]["networkingConfiguration"] = networking;
            pools.push((format!("net{index}-{suffix}"), pool));
        }
        assert_eq!(
            pools.len(),
            6,
            "the README pool and the fork's five variants"
        );
        for (name, manifest) in &pools {
            stack.create_pool(manifest.clone(), name).await;
        }
        Seeds {
            _serial: serial,
            stack,
            pools,
        }
    }

    async fn finish(mut self) {
        self.stack.kill_operator();
    }

    fn names(&self) -> Vec<&str> {
        self.pools.iter().map(|(name, _)| name.as_str()).collect()
    }

    async fn every_networking_variant_s_pool_reaches_ready(&mut self) {
        for (name, _) in &self.pools {
            self.stack
                .wait_ready(name, 1, Duration::from_secs(120))
                .await;
        }
    }

    /// Once managed, no server's userdata holds the join token any more.
    async fn a_managed_server_s_userdata_no_longer_holds_the_join_token(&mut self) {
        let names = self.names();
        wait_for(
            "the userdata of every managed server to be scrubbed",
            Duration::from_secs(30),
            async || {
                self.stack
                    .devices(&names)
                    .values()
                    .all(|(_, device)| {
                        let userdata = device["userdata"].as_str().unwrap_or_default();
                        !userdata.contains(JOIN_TOKEN) && userdata.contains("removed by ingot")
                    })
                    .then_some(())
            },
        )
        .await;
    }

    async fn each_pool_has_one_server_and_none_is_duplicated(&mut self) {
        let devices = self.stack.devices(&self.names());
        assert_eq!(
            devices.len(),
            self.pools.len(),
            "one device per pool, no duplicate"
        );
    }

    async fn each_instance_is_managed_with_metal_s_ips_on_its_own_tagged_server(&mut self) {
        let devices = self.stack.devices(&self.names());
        for (name, manifest) in &self.pools {
            let instances = self.stack.pool_instances(name).await;
            assert_eq!(instances.len(), 1);
            let instance = &instances[0];
            let status = instance.status.clone().unwrap();
            assert_eq!(status.status, "managed");
            // Layer 2 modes take the server off Metal's layer 3 network: it has no Metal IPs.
            let layer2 = manifest["spec"]["networkingConfiguration"]["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("layer2"));
            if !layer2 {
                assert!(
                    !status.public_ip.is_empty() && !status.private_ip.is_empty(),
                    "{name}: IPs filled: {status:?}"
                );
            }
            let (hostname, device) = devices
                .get(&status.instance_id)
                .expect("the instance's device exists");
            assert_eq!(hostname, &instance.name_any());
            assert!(
                device["tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t.as_str().unwrap().starts_with("ingot-instance:"))
            );
        }
    }

    /// The ports are in the requested mode with the VLANs.
    async fn the_ports_are_in_the_requested_mode_with_the_requested_vlans(&mut self) {
        let devices = self.stack.devices(&self.names());
        let vlans = self
            .stack
            .metal(
                reqwest::Method::GET,
                &format!("/projects/{PROJECT}/virtual-networks"),
                Value::Null,
            )
            .await;
        let vxlan_of: BTreeMap<String, u64> = vlans["virtual_networks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["id"].as_str().unwrap().to_owned(),
                    v["vxlan"].as_u64().unwrap(),
                )
            })
            .collect();
        for (name, manifest) in &self.pools {
            let networking = &manifest["spec"]["networkingConfiguration"];
            let Some(mode) = networking["type"].as_str() else {
                continue;
            };
            let instances = self.stack.pool_instances(name).await;
            let status = instances[0].status.clone().unwrap();
            let (_, device) = devices
                .get(&status.instance_id)
                .expect("the instance's device exists");
            let ports = device["network_ports"].as_array().unwrap();
            let bond = ports.iter().find(|p| p["name"] == "bond0").unwrap();
            assert_eq!(
                bond["network_type"].as_str(),
                Some(mode),
                "{name}: bond0 network_type"
            );
            for interface in networking["interfaceConfiguration"].as_array().unwrap() {
                let port_name = interface["name"].as_str().unwrap();
                let port = ports.iter().find(|p| p["name"] == port_name).unwrap();
                let wanted: BTreeSet<u64> = interface["vlanIDS"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().parse().unwrap())
                    .collect();
                let have: BTreeSet<u64> = port["virtual_networks"]
                    .as_array()
                    .map(|vs| {
                        vs.iter()
                            .filter_map(|v| {
                                v["href"]
                                    .as_str()?
                                    .rsplit('/')
                                    .next()
                                    .and_then(|id| vxlan_of.get(id))
                                    .copied()
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                assert_eq!(have, wanted, "{name}: VLANs on {port_name}: {port}");
            }
        }
    }

    /// Steady state: passes over managed pools and Instances read the watched caches, never the
    /// API server. Touching every object makes both controllers reconcile it.
    async fn steady_state_passes_read_the_caches_not_the_api_server(&mut self) {
        let stack = &self.stack;
        let before = stack.metrics().await;
        for (name, _) in &self.pools {
            let touch = json!({"metadata": {"annotations": {"e2e/touched": "1"}}});
            stack
                .pools()
                .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
                .await
                .unwrap();
            for instance in stack.pool_instances(name).await {
                stack
                    .instances()
                    .patch(
                        &instance.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&touch),
                    )
                    .await
                    .unwrap();
            }
        }
        let passes = |metrics: &BTreeMap<String, f64>, controller: &str| {
            metrics
                .get(&format!(
                    "ingot_reconciliations_total{{controller=\"{controller}\"}}"
                ))
                .copied()
                .unwrap_or_default()
        };
        let touched = self.pools.len() as f64;
        let after = wait_for(
            "both controllers to reconcile every touched object",
            Duration::from_secs(30),
            async || {
                let now = stack.metrics().await;
                (passes(&now, "instancepool") >= passes(&before, "instancepool") + touched
                    && passes(&now, "instance") >= passes(&before, "instance") + touched)
                    .then_some(now)
            },
        )
        .await;
        for verb in ["get", "list"] {
            for resource in ["secrets", "nodes", "instances", "instancepools", "services"] {
                let series =
                    format!("ingot_kube_requests_total{{verb=\"{verb}\",resource=\"{resource}\"}}");
                let read = after.get(&series).copied().unwrap_or_default()
                    - before.get(&series).copied().unwrap_or_default();
                assert_eq!(
                    read, 0.0,
                    "{series}: steady-state passes read the API server"
                );
            }
        }
    }

    async fn deleting_the_pools_deletes_their_servers_and_instances(&mut self) {
        let names: Vec<String> = self.pools.iter().map(|(name, _)| name.clone()).collect();
        self.stack.delete_pools_and_expect_no_devices(&names).await;
    }
}

ingot_testenv::scenario!(mod seeds: Seeds {
    every_networking_variant_s_pool_reaches_ready,
    a_managed_server_s_userdata_no_longer_holds_the_join_token,
    each_pool_has_one_server_and_none_is_duplicated,
    each_instance_is_managed_with_metal_s_ips_on_its_own_tagged_server,
    the_ports_are_in_the_requested_mode_with_the_requested_vlans,
    steady_state_passes_read_the_caches_not_the_api_server,
    deleting_the_pools_deletes_their_servers_and_instances,
});

#[tokio::test]
async fn scale_out_and_in_then_replace_an_unhealthy_node() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("scale-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["nodeCleanupWaitInterval"] = json!("3s");
    // The workload evicted from the unreachable Node is waited for until then: nothing there
    // confirms its deletion.
    manifest["spec"]["drainTimeout"] = json!("5s");
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 1, Duration::from_secs(60)).await;
    let first = stack.pool_instances(&name).await[0].clone();
    // Creation timestamps have one-second resolution: scale out in a later second, so that
    // "newest" is well defined.
    let created = first.metadata.creation_timestamp.clone().unwrap().0;
    wait_for("a later second", Duration::from_secs(3), async || {
        (k8s_openapi::jiff::Timestamp::now().as_second() > created.as_second()).then_some(())
    })
    .await;
    let first = first.name_any();

    stack.set_count(&name, 5).await;
    stack.wait_ready(&name, 5, Duration::from_secs(120)).await;
    assert_eq!(stack.devices(&[&name]).len(), 5);

    // All joined and healthy: the newest go first, so the first Instance stays.
    stack.set_count(&name, 2).await;
    stack.wait_ready(&name, 2, Duration::from_secs(60)).await;
    wait_for(
        "three devices to be deleted",
        Duration::from_secs(60),
        async || (stack.devices(&[&name]).len() == 2).then_some(()),
    )
    .await;
    let kept: BTreeSet<String> = stack
        .pool_instances(&name)
        .await
        .iter()
        .map(|i| i.name_any())
        .collect();
    assert!(
        kept.contains(&first),
        "the oldest Instance is kept: {kept:?}"
    );
    assert_eq!(kept.len(), 2);

    // A node held NotReady past nodeCleanupWaitInterval is replaced.
    let victim = kept.iter().next().unwrap().clone();
    let victim_device = stack
        .pool_instances(&name)
        .await
        .into_iter()
        .find(|i| i.name_any() == victim)
        .unwrap()
        .status
        .unwrap()
        .instance_id;
    // A workload on it, to be evicted before the node goes.
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), &stack.namespace);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "workload"},
        "spec": {"nodeName": victim, "containers": [{"name": "app", "image": "registry.invalid/app"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    stack
        .booter
        .set_not_ready(&victim, NotReady::Unknown)
        .await
        .unwrap();
    wait_for(
        "the unhealthy Instance to be replaced",
        Duration::from_secs(90),
        async || {
            let names: BTreeSet<String> = stack
                .pool_instances(&name)
                .await
                .iter()
                .map(|i| i.name_any())
                .collect();
            (!names.contains(&victim) && names.len() == 2).then_some(())
        },
    )
    .await;
    stack.wait_ready(&name, 2, Duration::from_secs(90)).await;
    assert!(
        !stack.devices(&[&name]).contains_key(&victim_device),
        "the unhealthy node's server is deleted"
    );
    let evicted = pods.get_opt("workload").await.unwrap();
    assert!(
        evicted.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the node was drained first"
    );
    stack
        .expect_event("InstancePool", &name, |(_, reason, message)| {
            reason == "ReplacingUnhealthyNode" && message.contains(&victim)
        })
        .await;

    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

/// A README pool created before its credentials exist; the API's failures are then injected
/// one after the other, each healed before the next.
struct Faults {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    stack: Stack,
    name: String,
    /// The pool's Instance (from the first pass on; after a replacement, the new one).
    instance: String,
}

impl Faults {
    async fn start() -> Self {
        let serial = SERIAL.lock().await;
        let stack = Stack::start(false).await;
        let name = format!("faults-{}", ingot_testenv::random_suffix(4));
        stack.create_pool(readme_pool(), &name).await;
        Faults {
            _serial: serial,
            stack,
            name,
            instance: String::new(),
        }
    }

    async fn finish(mut self) {
        self.stack.kill_operator();
    }

    async fn condition(
        &self,
        kind: &str,
        object: &str,
        type_: &str,
    ) -> Option<(String, String, String)> {
        match kind {
            "pool" => self.stack.pool_condition(object, type_).await,
            _ => self.stack.instance_condition(object, type_).await,
        }
    }

    /// No Secret: a condition and an Event saying what to create.
    async fn no_secret_is_a_condition_and_an_event_saying_what_to_create(&mut self) {
        let (stack, name) = (&self.stack, &self.name);
        let (status, reason, message) = wait_for(
            "CredentialsReady=False",
            Duration::from_secs(30),
            async || {
                self.condition("pool", name, "CredentialsReady")
                    .await
                    .filter(|c| c.0 == "False")
            },
        )
        .await;
        assert_eq!(reason, "SecretNotFound");
        assert!(
            message.contains("METAL_AUTH_TOKEN") && message.contains(&stack.namespace),
            "{message}"
        );
        assert_eq!(status, "False");
        stack
            .expect_event("InstancePool", name, |e| {
                e.0 == "Warning" && e.1 == "SecretNotFound"
            })
            .await;
    }

    /// The Go addon's plaintext annotations are removed from an Instance.
    async fn the_go_addon_s_plaintext_annotations_are_removed_from_an_instance(&mut self) {
        let stack = &self.stack;
        let instance = wait_for("the Instance", Duration::from_secs(30), async || {
            stack.pool_instances(&self.name).await.into_iter().next()
        })
        .await
        .name_any();
        let go_style = json!({"metadata": {"annotations": {"token": "metal-token-in-the-clear", "password": "os-password"}}});
        stack
            .instances()
            .patch(&instance, &PatchParams::default(), &Patch::Merge(&go_style))
            .await
            .unwrap();
        wait_for(
            "the plaintext annotations to be removed",
            Duration::from_secs(30),
            async || {
                let annotations = stack
                    .instances()
                    .get(&instance)
                    .await
                    .ok()?
                    .metadata
                    .annotations
                    .unwrap_or_default();
                (!annotations.contains_key("token") && !annotations.contains_key("password"))
                    .then_some(())
            },
        )
        .await;
        self.instance = instance;
    }

    /// A token the API refuses (401).
    async fn a_refused_token_is_a_condition_and_an_event_that_never_show_it(&mut self) {
        let (stack, instance) = (&self.stack, &self.instance);
        stack.write_secret("not-the-token").await;
        let (_, _, message) = wait_for(
            "Ready=False Unauthorized",
            Duration::from_secs(60),
            async || {
                self.condition("instance", instance, "Ready")
                    .await
                    .filter(|c| c.1 == "Unauthorized")
            },
        )
        .await;
        assert!(
            !message.contains("not-the-token"),
            "the token never shows: {message}"
        );
        stack
            .expect_event("Instance", instance, |e| e.1 == "Unauthorized")
            .await;
    }

    /// No capacity for the plan in the metro.
    async fn no_capacity_in_the_metro_is_a_condition_and_an_event_and_no_server(&mut self) {
        let (stack, name, instance) = (&self.stack, &self.name, &self.instance);
        stack.sim.sim().update_faults(|f| {
            f.capacity_exhausted.push(PlanMetro {
                plan: "c3.small.x86".into(),
                metro: "sg".into(),
            })
        });
        stack.write_secret(METAL_TOKEN).await;
        wait_for(
            "Ready=False NoCapacity",
            Duration::from_secs(90),
            async || {
                self.condition("instance", instance, "Ready")
                    .await
                    .filter(|c| c.1 == "NoCapacity")
            },
        )
        .await;
        stack
            .expect_event("InstancePool", name, |e| e.1 == "NoCapacity")
            .await;
        assert!(stack.devices(&[name]).is_empty());
    }

    /// A server that fails provisioning is replaced once capacity is back.
    async fn a_server_that_fails_provisioning_is_replaced_once_capacity_is_back(&mut self) {
        let (stack, name, instance) = (&self.stack, &self.name, &self.instance);
        stack.sim.sim().update_faults(|f| {
            f.capacity_exhausted.clear();
            f.fail_provisioning.push(instance.clone());
        });
        wait_for("ProvisioningFailed", Duration::from_secs(120), async || {
            stack
                .events_for("Instance", instance)
                .await
                .into_iter()
                .find(|e| e.1 == "ProvisioningFailed")
        })
        .await;
        stack
            .sim
            .sim()
            .update_faults(|f| f.fail_provisioning.clear());
        stack.wait_ready(name, 1, Duration::from_secs(120)).await;
        assert_eq!(
            stack.devices(&[name]).len(),
            1,
            "the failed server was deleted, one server remains"
        );
    }

    /// Metal refuses the deletion (403): a condition and an Event, and the server is not
    /// leaked.
    async fn a_forbidden_deletion_is_a_condition_and_an_event_and_the_server_kept(&mut self) {
        self.stack.sim.sim().update_faults(|f| {
            f.endpoints.insert(
                "deleteDevice".into(),
                ingot_metal_sim::EndpointFault {
                    error_rate: 1.0,
                    status: Some(403),
                    ..Default::default()
                },
            );
        });
        self.instance = self
            .stack
            .pool_instances(&self.name)
            .await
            .remove(0)
            .name_any();
        let (stack, name, instance) = (&self.stack, &self.name, &self.instance);
        stack
            .pools()
            .delete(name, &DeleteParams::background())
            .await
            .unwrap();
        let (_, _, message) = wait_for(
            "Ready=False Forbidden on deletion",
            Duration::from_secs(60),
            async || {
                self.condition("instance", instance, "Ready")
                    .await
                    .filter(|c| c.1 == "Forbidden")
            },
        )
        .await;
        assert!(message.contains("forbidden"), "{message}");
        stack
            .expect_event("Instance", instance, |e| {
                e.0 == "Warning" && e.1 == "Forbidden"
            })
            .await;
        assert_eq!(
            stack.devices(&[name]).len(),
            1,
            "the server is kept, not leaked"
        );
    }

    /// A 422 is the same: the API's refusal on the condition, an Event, no leak.
    async fn a_refused_deletion_is_a_condition_and_an_event_and_the_server_kept(&mut self) {
        let (stack, name, instance) = (&self.stack, &self.name, &self.instance);
        stack.sim.sim().update_faults(|f| {
            f.endpoints.insert(
                "deleteDevice".into(),
                ingot_metal_sim::EndpointFault {
                    error_rate: 1.0,
                    status: Some(422),
                    ..Default::default()
                },
            );
        });
        wait_for(
            "Ready=False RequestRefused on deletion",
            Duration::from_secs(90),
            async || {
                self.condition("instance", instance, "Ready")
                    .await
                    .filter(|c| c.1 == "RequestRefused")
            },
        )
        .await;
        stack
            .expect_event("Instance", instance, |e| {
                e.0 == "Warning" && e.1 == "RequestRefused"
            })
            .await;
        assert_eq!(stack.devices(&[name]).len(), 1, "still kept");
    }

    /// Once Metal allows the deletion, the server goes.
    async fn once_allowed_the_refused_deletion_goes_through(&mut self) {
        let (stack, name) = (&self.stack, &self.name);
        stack.sim.sim().update_faults(|f| f.endpoints.clear());
        wait_for(
            "every device to be deleted",
            Duration::from_secs(90),
            async || stack.devices(&[name]).is_empty().then_some(()),
        )
        .await;
    }
}

ingot_testenv::scenario!(mod faults: Faults {
    no_secret_is_a_condition_and_an_event_saying_what_to_create,
    the_go_addon_s_plaintext_annotations_are_removed_from_an_instance,
    a_refused_token_is_a_condition_and_an_event_that_never_show_it,
    no_capacity_in_the_metro_is_a_condition_and_an_event_and_no_server,
    a_server_that_fails_provisioning_is_replaced_once_capacity_is_back,
    a_forbidden_deletion_is_a_condition_and_an_event_and_the_server_kept,
    a_refused_deletion_is_a_condition_and_an_event_and_the_server_kept,
    once_allowed_the_refused_deletion_goes_through,
});

impl Stack {
    /// Runs the operator with `--crash-point` until it has aborted `most` times or runs
    /// `quiet` without aborting; returns the number of processes ended (aborted or killed).
    async fn crash_at(&mut self, point: &str, most: usize, quiet: Duration) -> usize {
        self.kill_operator();
        self.crash_point = Some(point.to_owned());
        let mut ended = 0;
        while ended < most {
            self.start_operator();
            let deadline = Instant::now() + quiet;
            loop {
                if let Some(status) = self.operator().exit_status() {
                    assert!(!status.success(), "the operator aborted at {point}");
                    ended += 1;
                    break;
                }
                if Instant::now() > deadline {
                    self.kill_operator();
                    self.crash_point = None;
                    self.start_operator();
                    return ended + 1;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.crash_point = None;
        self.start_operator();
        ended
    }

    /// How often the operator aborted at `point` so far (from its log).
    fn crashes_at(&self, point: &str) -> usize {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("crash point reached") && l.contains(point))
            .count()
    }

    fn log_path(&self) -> std::path::PathBuf {
        log_path(&self.namespace)
    }

    /// SIGKILLs the leader `kills` times at random moments, restarting it each time.
    async fn kill_randomly(&mut self, kills: usize) -> usize {
        use rand::Rng;
        for _ in 0..kills {
            let delay = Duration::from_millis(rand::rng().random_range(100..700));
            tokio::time::sleep(delay).await;
            self.kill_operator();
            self.start_operator();
        }
        kills
    }

    /// Exactly one device per Instance of the pool, each Instance's own, and no device
    /// reinstalled more often than its Instance recorded an intent to (one install and its
    /// `installRetries`), as the emulator counts boots.
    async fn assert_devices_match(&self, pool: &str, want: usize) {
        let instances = wait_for(
            &format!("{want} devices for {want} Instances of {pool}"),
            Duration::from_secs(60),
            async || {
                let instances = self.pool_instances(pool).await;
                (instances.len() == want && self.devices(&[pool]).len() == want)
                    .then_some(instances)
            },
        )
        .await;
        let devices = self.devices(&[pool]);
        let hostnames: BTreeSet<&String> = devices.values().map(|(h, _)| h).collect();
        assert_eq!(hostnames.len(), want, "no duplicated server: {hostnames:?}");
        for instance in &instances {
            let status = instance.status.clone().unwrap();
            let (hostname, _) = devices
                .get(&status.instance_id)
                .unwrap_or_else(|| panic!("{} points at its device", instance.name_any()));
            assert_eq!(hostname, &instance.name_any());
            let boots = self
                .sim
                .sim()
                .boot_record(&status.instance_id)
                .map(|r| r.boot_count)
                .unwrap_or(0);
            let intents = 1 + status.install_retries.unwrap_or(0);
            assert!(
                i64::from(boots) - 1 <= intents,
                "{}: {boots} boots, but only {intents} reinstalls intended",
                instance.name_any()
            );
        }
    }
}

#[tokio::test]
async fn the_leader_killed_200_times_at_chosen_and_random_points_never_leaks_or_duplicates() {
    let _serial = SERIAL.lock().await;
    let mut stack = Stack::start(true).await;
    let name = format!("crash-{}", ingot_testenv::random_suffix(4));
    let mut kills = 0;

    // Scale-out 0 -> 5 under random kills.
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(5);
    stack.create_pool(manifest, &name).await;
    kills += stack.kill_randomly(60).await;
    stack.wait_ready(&name, 5, Duration::from_secs(180)).await;
    stack.assert_devices_match(&name, 5).await;

    // Scale-out 5 -> 7, aborting right after each create call (before the status write),
    // then right after each reinstall call. Two Instances create at once, so the abort after
    // one create may come while the other's create is still on the wire (adopted by its tag
    // on restart): each point is reached at least once, not once per Instance.
    stack.set_count(&name, 7).await;
    let quiet = Duration::from_secs(15);
    kills += stack
        .crash_at("after-create,after-reinstall", 12, quiet)
        .await;
    let (created, reinstalled) = (
        stack.crashes_at("after-create"),
        stack.crashes_at("after-reinstall"),
    );
    assert!(
        created >= 1 && reinstalled >= 1,
        "the chosen points were reached: {created} after create, {reinstalled} after reinstall"
    );
    stack.wait_ready(&name, 7, Duration::from_secs(180)).await;
    stack.assert_devices_match(&name, 7).await;

    // Scale-in 7 -> 3, aborting during finalize, then under random kills.
    stack.set_count(&name, 3).await;
    kills += stack.crash_at("during-finalize", 10, quiet).await;
    assert!(
        stack.crashes_at("during-finalize") >= 1,
        "the finalize point was reached"
    );
    kills += stack.kill_randomly(50).await;
    stack.wait_ready(&name, 3, Duration::from_secs(180)).await;
    stack.assert_devices_match(&name, 3).await;

    // Delete under random kills, up to 200 in all.
    stack
        .pools()
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
    let finalizing = stack.crash_at("during-finalize", 5, quiet).await;
    kills += finalizing;
    assert!(kills < 200, "{kills} kills before the last round");
    kills += stack.kill_randomly(200 - kills).await;
    assert_eq!(kills, 200);
    wait_for(
        "every device to be deleted",
        Duration::from_secs(120),
        async || stack.devices(&[&name]).is_empty().then_some(()),
    )
    .await;
    wait_for(
        "the pool's Instances to be gone",
        Duration::from_secs(60),
        async || stack.pool_instances(&name).await.is_empty().then_some(()),
    )
    .await;
    let _ = Api::<Namespace>::all(stack.client.clone())
        .delete(&stack.namespace, &DeleteParams::default())
        .await;
}

/// Fencing: a leader whose Lease is taken while a Metal create is on the wire cancels that
/// call and exits at once, rather than finishing it; the next leader ends with exactly one server.
#[tokio::test]
async fn a_deposed_leader_cuts_off_its_call_in_flight_and_the_next_leader_does_not_duplicate() {
    let _serial = SERIAL.lock().await;
    let mut stack = Stack::start(true).await;
    const CREATE_LATENCY: Duration = Duration::from_secs(10);
    stack.sim.sim().update_faults(|f| {
        f.endpoints.insert(
            "createDevice".into(),
            ingot_metal_sim::EndpointFault {
                latency_ms: u64::try_from(CREATE_LATENCY.as_millis()).unwrap(),
                ..Default::default()
            },
        );
    });
    let name = format!("fence-{}", ingot_testenv::random_suffix(4));
    stack.create_pool(readme_pool(), &name).await;
    wait_for(
        "the create call to be on the wire",
        Duration::from_secs(60),
        async || (stack.sim.sim().metrics().requests("createDevice") >= 1).then_some(()),
    )
    .await;
    let on_the_wire = Instant::now();

    // Another replica takes the Lease (as after a partition that outlived it).
    let leases: Api<Lease> = Api::namespaced(stack.client.clone(), &stack.namespace);
    let mut taken = false;
    for _ in 0..10 {
        let mut lease = leases.get("ingot").await.unwrap();
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("usurper".to_owned());
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        spec.lease_duration_seconds = Some(600);
        if leases
            .replace("ingot", &PostParams::default(), &lease)
            .await
            .is_ok()
        {
            taken = true;
            break;
        }
    }
    assert!(taken, "the test took the Lease");
    let taken_at = Instant::now();
    // The deposed leader exits.
    let status = stack.operator().wait_exit(Duration::from_secs(30)).await;
    let exited_after = taken_at.elapsed();
    assert!(!status.success(), "it exits with an error: {status:?}");
    // The create would have answered CREATE_LATENCY after it was sent: exiting well before
    // that means the call was cut off, not awaited (a graceful stop would have finished it).
    assert!(
        on_the_wire.elapsed() < CREATE_LATENCY - Duration::from_secs(2),
        "the deposed leader exited {exited_after:?} after losing the Lease, {:?} after its create was sent: the call in flight was finished, not cut off",
        on_the_wire.elapsed()
    );
    let log = std::fs::read_to_string(stack.log_path()).unwrap_or_default();
    assert!(log.contains("lost leadership"), "{log}");

    // Whatever the emulator did with the abandoned request has happened by now; the next
    // leader adopts its server by tag or creates one, never both.
    tokio::time::sleep(
        CREATE_LATENCY.saturating_sub(on_the_wire.elapsed()) + Duration::from_secs(1),
    )
    .await;
    stack.sim.sim().update_faults(|f| f.endpoints.clear());
    leases.delete("ingot", &Default::default()).await.unwrap();
    stack.start_operator();
    stack.wait_ready(&name, 1, Duration::from_secs(90)).await;
    stack.assert_devices_match(&name, 1).await;
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

#[tokio::test]
async fn single_boot_joins_without_a_reinstall_and_creates_missing_vlans() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("single-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["singleBoot"] = json!(true);
    manifest["spec"]["harvesterVersion"] = json!("v1.3.2");
    manifest["spec"]["createMissingVlans"] = json!(true);
    manifest["spec"]["networkingConfiguration"] = json!({"type": "hybrid", "interfaceConfiguration": [{"name": "eth1", "vlanIDS": ["1200"]}]});
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 1, Duration::from_secs(90)).await;

    let instance = stack.pool_instances(&name).await.remove(0);
    let device = instance.status.unwrap().instance_id;
    let record = stack.sim.sim().boot_record(&device).expect("a boot record");
    assert_eq!(
        record.boot_count, 1,
        "joined from its first boot, no reinstall"
    );
    let script = record.ipxe_script.unwrap_or_default();
    assert!(
        script.contains("${net0/mac}") && script.contains("harvester-v1.3.2-vmlinuz-amd64"),
        "{script}"
    );
    let vlans = stack
        .metal(
            reqwest::Method::GET,
            &format!("/projects/{PROJECT}/virtual-networks"),
            Value::Null,
        )
        .await;
    assert!(
        vlans["virtual_networks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["vxlan"] == 1200),
        "VLAN 1200 was created: {vlans}"
    );
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

#[tokio::test]
async fn a_harvester_v1_0_pool_boots_with_the_v1_0_config_and_joins() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("v10-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["harvesterVersion"] = json!("v1.0.3");
    manifest["spec"]["count"] = json!(2);
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;

    let instances = stack.pool_instances(&name).await;
    assert_eq!(instances.len(), 2);
    let nodes: Api<Node> = Api::all(stack.client.clone());
    for instance in &instances {
        let device = instance.status.clone().unwrap().instance_id;
        let record = stack.sim.sim().boot_record(&device).expect("a boot record");
        let script = record.ipxe_script.unwrap_or_default();
        assert!(
            script.contains("harvester-v1.0.3-vmlinuz-amd64"),
            "the v1.0.3 installer boots: {script}"
        );
        // The booting server ran the v1.0 installer's checks on the config it fetched: the
        // management network under install.networks.harvester-mgmt, the join URL on 8443.
        let machine = stack
            .booter
            .machine(&device)
            .expect("the booter saw the server");
        assert_eq!(
            machine.schema,
            Some(ingot_boot_sim::Schema::V1_0),
            "{machine:?}"
        );
        assert!(machine.warnings.is_empty(), "{machine:?}");
        let node = machine.node.clone().expect("the server joined as a Node");
        assert_eq!(node, instance.name_any());
        assert!(nodes.get_opt(&node).await.unwrap().is_some(), "Node {node}");
    }
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

impl Stack {
    async fn pool_condition(&self, pool: &str, type_: &str) -> Option<(String, String, String)> {
        self.pools()
            .get(pool)
            .await
            .ok()?
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason, c.message))
    }

    async fn names(&self, pool: &str) -> BTreeSet<String> {
        self.pool_instances(pool)
            .await
            .iter()
            .map(|i| i.name_any())
            .collect()
    }

    async fn annotate_node(&self, node: &str, key: &str, value: Option<&str>) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }
}

/// Instances of a pool in one look: (name, managed, being deleted).
async fn snapshot(stack: &Stack, pool: &str) -> Vec<(String, bool, bool)> {
    let list = stack
        .instances()
        .list(&ListParams::default().labels(&format!("instancePool={pool}")))
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|i| {
            let managed = i.status.as_ref().is_some_and(|s| s.status == "managed");
            (
                i.name_any(),
                managed,
                i.metadata.deletion_timestamp.is_some(),
            )
        })
        .collect()
}

/// A pool of five healthy Nodes (`nodeCleanupWaitInterval` 2 s) whose Nodes go NotReady: a
/// partition, one in maintenance, then one and another.
struct Partition {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    stack: Stack,
    name: String,
    /// The five original Instances (and Nodes), sorted.
    names: Vec<String>,
    /// The first of the two Nodes replaced one after the other, its server and the second.
    first: String,
    first_device: String,
    second: String,
}

impl Partition {
    async fn start() -> Self {
        let serial = SERIAL.lock().await;
        let stack = Stack::start(true).await;
        let name = format!("part-{}", ingot_testenv::random_suffix(4));
        let mut manifest = readme_pool();
        manifest["spec"]["count"] = json!(5);
        manifest["spec"]["nodeCleanupWaitInterval"] = json!("2s");
        stack.create_pool(manifest, &name).await;
        stack.wait_ready(&name, 5, Duration::from_secs(120)).await;
        let names: Vec<String> = stack.names(&name).await.into_iter().collect();
        let (first, second) = (names[3].clone(), names[4].clone());
        Partition {
            _serial: serial,
            stack,
            name,
            names,
            first,
            first_device: String::new(),
            second,
        }
    }

    async fn finish(mut self) {
        self.stack.kill_operator();
    }

    /// A partition: 3 of 5 Nodes NotReady, above the default maxUnhealthy of 1.
    async fn a_partition_is_a_condition_and_an_event_naming_the_unhealthy_nodes(&mut self) {
        let (stack, name, names) = (&self.stack, &self.name, &self.names);
        for node in &names[..3] {
            stack
                .booter
                .set_not_ready(node, NotReady::Unknown)
                .await
                .unwrap();
        }
        let (_, _, message) = wait_for(
            "RemediationAllowed=False TooManyUnhealthy",
            Duration::from_secs(30),
            async || {
                // The Nodes go one by one: the first pass may see two of the three.
                stack
                    .pool_condition(name, "RemediationAllowed")
                    .await
                    .filter(|c| {
                        c.0 == "False" && c.1 == "TooManyUnhealthy" && c.2.contains("3 of 5")
                    })
            },
        )
        .await;
        assert!(
            names[..3].iter().all(|n| message.contains(n.as_str())),
            "{message}"
        );
        stack
            .expect_event("InstancePool", name, |e| {
                e.0 == "Warning" && e.1 == "TooManyUnhealthy"
            })
            .await;
    }

    async fn a_partition_replaces_nothing(&mut self) {
        let (stack, name) = (&self.stack, &self.name);
        // Four wait intervals later, still nothing replaced.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let now = snapshot(stack, name).await;
        assert_eq!(now.len(), 5);
        assert!(now.iter().all(|(_, _, deleting)| !deleting), "{now:?}");
        assert_eq!(stack.devices(&[name]).len(), 5);
    }

    /// Healed but for one Node in maintenance: it alone is unhealthy, and never replaced.
    async fn a_node_in_maintenance_is_exempt_and_never_replaced(&mut self) {
        let (stack, name, names) = (&self.stack, &self.name, &self.names);
        stack
            .annotate_node(
                &names[2],
                "harvesterhci.io/maintain-status",
                Some("running"),
            )
            .await;
        stack.booter.set_ready(&names[0]).await.unwrap();
        stack.booter.set_ready(&names[1]).await.unwrap();
        let (_, _, message) = wait_for(
            "RemediationAllowed Exempt",
            Duration::from_secs(30),
            async || {
                stack
                    .pool_condition(name, "RemediationAllowed")
                    .await
                    .filter(|c| c.1 == "Exempt")
            },
        )
        .await;
        assert!(
            message.contains(&names[2]) && message.contains("maintenance"),
            "{message}"
        );
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            stack.names(name).await,
            names.iter().cloned().collect::<BTreeSet<_>>(),
            "the Node in maintenance is kept"
        );
        // Ready first, then out of maintenance: the other order leaves a moment in which a
        // long-NotReady Node is out of maintenance, and the pool would rightly replace it.
        stack.booter.set_ready(&names[2]).await.unwrap();
        stack
            .annotate_node(&names[2], "harvesterhci.io/maintain-status", None)
            .await;
    }

    /// One NotReady Node: exactly it is replaced.
    async fn one_not_ready_node_alone_is_replaced(&mut self) {
        self.first_device = self
            .stack
            .pool_instances(&self.name)
            .await
            .into_iter()
            .find(|i| i.name_any() == self.first)
            .unwrap()
            .status
            .unwrap()
            .instance_id;
        let (stack, name, first) = (&self.stack, &self.name, &self.first);
        stack
            .booter
            .set_not_ready(first, NotReady::Unknown)
            .await
            .unwrap();
        wait_for(
            "the unhealthy Instance to be deleted",
            Duration::from_secs(30),
            async || {
                let now = snapshot(stack, name).await;
                now.iter()
                    .all(|(n, _, deleting)| n != first || *deleting)
                    .then_some(())
            },
        )
        .await;
    }

    /// A second one that fails while the replacement is joining waits until the replacement is
    /// managed; never two at a time, and only the unhealthy ones go.
    async fn a_second_not_ready_node_waits_until_the_first_replacement_is_managed(&mut self) {
        let (stack, name, names, second) = (&self.stack, &self.name, &self.names, &self.second);
        stack
            .booter
            .set_not_ready(second, NotReady::Unknown)
            .await
            .unwrap();
        let mut replacement_managed = None;
        let mut second_removed = None;
        let started = Instant::now();
        while second_removed.is_none() || stack.pool_columns(name).await.map(|c| c.1) != Some(5) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "timed out waiting for both replacements"
            );
            let now = snapshot(stack, name).await;
            let deleting = now.iter().filter(|(_, _, d)| *d).count();
            assert!(deleting <= 1, "never two replacements at a time: {now:?}");
            let originals_kept = now.iter().filter(|(n, _, _)| names.contains(n)).count();
            assert!(originals_kept >= 3, "only the unhealthy ones go: {now:?}");
            if replacement_managed.is_none()
                && now
                    .iter()
                    .any(|(n, managed, _)| !names.contains(n) && *managed)
            {
                replacement_managed = Some(Instant::now());
            }
            if second_removed.is_none()
                && now.iter().all(|(n, _, deleting)| n != second || *deleting)
            {
                second_removed = Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (managed, removed) = (replacement_managed.unwrap(), second_removed.unwrap());
        assert!(
            removed > managed,
            "the second replacement started only after the first was managed"
        );
    }

    /// The pool is back to five, the healthy originals kept, each Instance on a server of its
    /// own, the replaced ones' servers deleted.
    async fn the_replaced_nodes_servers_go_and_the_healthy_ones_are_kept(&mut self) {
        let (stack, name, names) = (&self.stack, &self.name, &self.names);
        stack.wait_ready(name, 5, Duration::from_secs(120)).await;
        let kept = stack.names(name).await;
        for original in &names[..3] {
            assert!(kept.contains(original), "{original} kept: {kept:?}");
        }
        assert!(!kept.contains(&self.first) && !kept.contains(&self.second));
        assert!(!stack.devices(&[name]).contains_key(&self.first_device));
        stack.assert_devices_match(name, 5).await;
    }

    /// What /metrics showed of all this: the blocked passes by reason, the two replacements
    /// and their drains, the Metal calls, the time spent in each phase, the pool converged.
    async fn metrics_show_the_blocked_passes_the_replacements_and_their_metal_calls(&mut self) {
        let metrics = self.stack.metrics().await;
        let value = |series: &str| metrics.get(series).copied().unwrap_or_default();
        let shown = format!("{metrics:#?}");
        for reason in ["too_many_unhealthy", "maintenance"] {
            assert!(
                value(&format!(
                    "ingot_pool_replacements_blocked_total{{reason=\"{reason}\"}}"
                )) >= 1.0,
                "blocked by {reason}: {shown}"
            );
        }
        assert_eq!(value("ingot_pool_replacements_total"), 2.0, "{shown}");
        assert!(
            value(r#"ingot_drains_total{controller="pools",outcome="drained"}"#) >= 2.0,
            "{shown}"
        );
        for (operation, at_least) in [("createDevice", 7.0), ("deleteDevice", 2.0)] {
            assert!(
                value(&format!(
                    "ingot_metal_requests_total{{operation=\"{operation}\",outcome=\"ok\"}}"
                )) >= at_least,
                "{operation}: {shown}"
            );
            assert!(
                value(&format!(
                    "ingot_metal_request_duration_seconds_count{{operation=\"{operation}\"}}"
                )) >= at_least,
                "{operation}: {shown}"
            );
        }
        for phase in ["new", "queued", "ready"] {
            assert!(
                value(&format!(
                    "ingot_instance_phase_duration_seconds_count{{phase=\"{phase}\"}}"
                )) >= 7.0,
                "phase {phase}: {shown}"
            );
        }
        assert!(value(r#"ingot_pools{status="ready"}"#) >= 1.0, "{shown}");
        assert!(value("ingot_pool_instances_managed") >= 5.0, "{shown}");
    }

    async fn deleting_the_partitioned_pool_deletes_its_servers_and_instances(&mut self) {
        self.stack
            .delete_pools_and_expect_no_devices(std::slice::from_ref(&self.name))
            .await;
    }
}

ingot_testenv::scenario!(mod partition: Partition {
    a_partition_is_a_condition_and_an_event_naming_the_unhealthy_nodes,
    a_partition_replaces_nothing,
    a_node_in_maintenance_is_exempt_and_never_replaced,
    one_not_ready_node_alone_is_replaced,
    a_second_not_ready_node_waits_until_the_first_replacement_is_managed,
    the_replaced_nodes_servers_go_and_the_healthy_ones_are_kept,
    metrics_show_the_blocked_passes_the_replacements_and_their_metal_calls,
    deleting_the_partitioned_pool_deletes_its_servers_and_instances,
});

/// A pool of five healthy Nodes scaled down to two: a workload on each of the three to go, the
/// first one's guarded by a PodDisruptionBudget that refuses any eviction.
struct ScaleDown {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    stack: Stack,
    name: String,
    /// The Instances scale-down removes, in its order: all joined and healthy, so the newest
    /// first (names break ties).
    victims: Vec<String>,
    pods: Api<Pod>,
    /// Stands in for the kubelets, until the scale-down is done.
    kubelet: tokio::task::JoinHandle<()>,
}

impl ScaleDown {
    async fn start() -> Self {
        let serial = SERIAL.lock().await;
        let stack = Stack::start(true).await;
        let name = format!("drain-{}", ingot_testenv::random_suffix(4));
        let mut manifest = readme_pool();
        manifest["spec"]["count"] = json!(5);
        stack.create_pool(manifest, &name).await;
        stack.wait_ready(&name, 5, Duration::from_secs(120)).await;

        let mut order: Vec<(std::cmp::Reverse<k8s_openapi::jiff::Timestamp>, String)> = stack
            .pool_instances(&name)
            .await
            .into_iter()
            .map(|i| {
                (
                    std::cmp::Reverse(i.metadata.creation_timestamp.clone().unwrap().0),
                    i.name_any(),
                )
            })
            .collect();
        order.sort();
        let victims: Vec<String> = order.iter().take(3).map(|(_, n)| n.clone()).collect();
        // Running and Ready, as its kubelet would report (the eviction API lets pending pods
        // go whatever their budget says).
        for (index, node) in victims.iter().enumerate() {
            stack
                .running_pod(&format!("work-{index}"), node, index == 0)
                .await;
        }
        // No kubelet runs on these Nodes: the test confirms the deletion of evicted pods.
        let kubelet = stack.confirm_pod_deletions();
        let pods = Api::namespaced(stack.client.clone(), &stack.namespace);
        ScaleDown {
            _serial: serial,
            stack,
            name,
            victims,
            pods,
            kubelet,
        }
    }

    async fn finish(mut self) {
        self.kubelet.abort();
        self.stack.kill_operator();
    }

    /// The scale-down's first drain is held by the budget: a condition naming the pod and the
    /// Node.
    async fn a_pdb_holds_the_first_drain_with_a_condition(&mut self) {
        let (stack, name, victims) = (&self.stack, &self.name, &self.victims);
        stack.set_count(name, 2).await;
        let (_, _, message) = wait_for(
            "DrainingSucceeded=False DrainBlocked",
            Duration::from_secs(30),
            async || {
                stack
                    .pool_condition(name, "DrainingSucceeded")
                    .await
                    .filter(|c| c.0 == "False" && c.1 == "DrainBlocked")
            },
        )
        .await;
        assert!(
            message.contains("work-0") && message.contains(&victims[0]),
            "{message}"
        );
    }

    /// Held: the first victim is cordoned, nothing else is, nothing is deleted.
    async fn while_held_only_its_node_is_cordoned_and_nothing_deleted(&mut self) {
        let (stack, name, victims) = (&self.stack, &self.name, &self.victims);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(stack.cordoned(name).await, vec![victims[0].clone()]);
        assert_eq!(snapshot(stack, name).await.len(), 5);
        assert!(self.pods.get_opt("work-0").await.unwrap().is_some());
    }

    /// The budget goes: the drain finishes, and the others follow one at a time.
    async fn once_the_pdb_goes_the_nodes_go_newest_first_one_at_a_time(&mut self) {
        let (stack, name, victims) = (&self.stack, &self.name, &self.victims);
        let pdbs: Api<PodDisruptionBudget> =
            Api::namespaced(stack.client.clone(), &stack.namespace);
        pdbs.delete("work-0", &DeleteParams::default())
            .await
            .unwrap();
        let mut removed: Vec<String> = Vec::new();
        let started = Instant::now();
        while stack.pool_columns(name).await != Some(("ready".to_owned(), 2, 2))
            || removed.len() < 3
        {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "timed out scaling down: removed {removed:?}"
            );
            let now = snapshot(stack, name).await;
            assert!(
                now.iter().filter(|(_, _, d)| *d).count() <= 1,
                "one Node at a time: {now:?}"
            );
            assert!(stack.cordoned(name).await.len() <= 1, "one drain at a time");
            for victim in victims {
                let going = now.iter().all(|(n, _, d)| n != victim || *d);
                if going && !removed.contains(victim) {
                    removed.push(victim.clone());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.kubelet.abort();
        assert_eq!(&removed, victims, "newest first, one after the other");
    }

    async fn each_removed_node_s_workload_was_evicted(&mut self) {
        for index in 0..3 {
            assert!(
                self.pods
                    .get_opt(&format!("work-{index}"))
                    .await
                    .unwrap()
                    .is_none(),
                "work-{index} was evicted"
            );
        }
    }

    async fn draining_succeeded_is_true_again(&mut self) {
        let (stack, name) = (&self.stack, &self.name);
        wait_for(
            "DrainingSucceeded=True",
            Duration::from_secs(10),
            async || {
                stack
                    .pool_condition(name, "DrainingSucceeded")
                    .await
                    .filter(|c| c.0 == "True")
            },
        )
        .await;
    }

    async fn each_kept_instance_has_a_server_of_its_own(&mut self) {
        self.stack.assert_devices_match(&self.name, 2).await;
    }

    /// /metrics counted the passes the budget held the drain, and the three drains.
    async fn metrics_count_the_held_passes_and_the_three_drains(&mut self) {
        let metrics = self.stack.metrics().await;
        let value = |series: &str| metrics.get(series).copied().unwrap_or_default();
        assert!(
            value(r#"ingot_drains_blocked_total{controller="pools"}"#) >= 1.0,
            "{metrics:#?}"
        );
        assert!(
            value(r#"ingot_drains_total{controller="pools",outcome="drained"}"#) >= 3.0,
            "{metrics:#?}"
        );
    }

    async fn deleting_the_scaled_down_pool_deletes_its_servers_and_instances(&mut self) {
        self.stack
            .delete_pools_and_expect_no_devices(std::slice::from_ref(&self.name))
            .await;
    }
}

ingot_testenv::scenario!(mod scale_down: ScaleDown {
    a_pdb_holds_the_first_drain_with_a_condition,
    while_held_only_its_node_is_cordoned_and_nothing_deleted,
    once_the_pdb_goes_the_nodes_go_newest_first_one_at_a_time,
    each_removed_node_s_workload_was_evicted,
    draining_succeeded_is_true_again,
    each_kept_instance_has_a_server_of_its_own,
    metrics_count_the_held_passes_and_the_three_drains,
    deleting_the_scaled_down_pool_deletes_its_servers_and_instances,
});

#[tokio::test]
async fn a_node_that_recovers_while_its_drain_is_blocked_is_uncordoned_and_kept() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("heal-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(2);
    manifest["spec"]["nodeCleanupWaitInterval"] = json!("2s");
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;
    let sick: String = stack.names(&name).await.into_iter().next().unwrap();

    // A guarded, running workload on it.
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), &stack.namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "guarded", "labels": {"app": "guarded"}},
        "spec": {"nodeName": sick, "containers": [{"name": "app", "image": "registry.invalid/app"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("guarded", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(stack.client.clone(), &stack.namespace);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();

    // Sick but reachable (its kubelet reports Ready=False): chosen for replacement, cordoned,
    // and held by the budget.
    stack
        .booter
        .set_not_ready(&sick, NotReady::False)
        .await
        .unwrap();
    wait_for(
        "DrainingSucceeded=False DrainBlocked",
        Duration::from_secs(30),
        async || {
            stack
                .pool_condition(&name, "DrainingSucceeded")
                .await
                .filter(|c| c.0 == "False" && c.1 == "DrainBlocked")
        },
    )
    .await;
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let unschedulable = async || {
        nodes
            .get(&sick)
            .await
            .unwrap()
            .spec
            .and_then(|s| s.unschedulable)
            == Some(true)
    };
    assert!(unschedulable().await, "cordoned for the replacement");

    // It recovers: uncordoned, the condition back to True, and it stays.
    stack.booter.set_ready(&sick).await.unwrap();
    let (_, reason, _) = wait_for(
        "DrainingSucceeded=True",
        Duration::from_secs(30),
        async || {
            stack
                .pool_condition(&name, "DrainingSucceeded")
                .await
                .filter(|c| c.0 == "True")
        },
    )
    .await;
    assert_eq!(reason, "NodeRecovered");
    assert!(!unschedulable().await, "uncordoned");
    stack
        .expect_event("InstancePool", &name, |e| {
            e.1 == "NodeRecovered" && e.2.contains(&sick)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(stack.names(&name).await.contains(&sick), "the Node is kept");
    assert!(pods.get_opt("guarded").await.unwrap().is_some());
    pdbs.delete("guard", &DeleteParams::default())
        .await
        .unwrap();
    // Deleting the pool drains the Node first: the evicted pod's deletion is confirmed as its
    // kubelet would.
    let kubelet = stack.confirm_pod_deletions();
    stack.delete_pools_and_expect_no_devices(&[name]).await;
    kubelet.abort();
}

#[tokio::test]
async fn an_unreachable_node_whose_drain_is_refused_goes_after_drain_timeout() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("gone-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(2);
    manifest["spec"]["nodeCleanupWaitInterval"] = json!("2s");
    manifest["spec"]["drainTimeout"] = json!("6s");
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;
    let lost: String = stack.names(&name).await.into_iter().next().unwrap();

    // A workload on it that a PodDisruptionBudget refuses to let go.
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), &stack.namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pinned", "labels": {"app": "pinned"}},
        "spec": {"nodeName": lost, "containers": [{"name": "app", "image": "registry.invalid/app"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("pinned", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(stack.client.clone(), &stack.namespace);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "pin"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pinned"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();

    // Unreachable (its kubelet stopped reporting): refused at once, then, past drainTimeout,
    // the replacement goes on without the drain, as nothing on the Node can confirm anything.
    stack
        .booter
        .set_not_ready(&lost, NotReady::Unknown)
        .await
        .unwrap();
    wait_for(
        "DrainingSucceeded=False DrainBlocked inside the deadline",
        Duration::from_secs(30),
        async || {
            stack
                .pool_condition(&name, "DrainingSucceeded")
                .await
                .filter(|c| c.0 == "False" && c.1 == "DrainBlocked")
        },
    )
    .await;
    assert!(
        stack.names(&name).await.contains(&lost),
        "held inside the deadline"
    );
    stack
        .expect_event("InstancePool", &name, |e| {
            e.1 == "DrainTimeout" && e.2.contains(&lost)
        })
        .await;
    wait_for(
        "the unreachable Node's Instance to be replaced",
        Duration::from_secs(120),
        async || {
            let names = stack.names(&name).await;
            (names.len() == 2 && !names.contains(&lost)).then_some(())
        },
    )
    .await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;
    pdbs.delete("pin", &DeleteParams::default()).await.unwrap();
    stack.assert_devices_match(&name, 2).await;
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

#[tokio::test]
async fn an_install_that_never_joins_is_retried_re_rendered_and_counted() {
    let _serial = SERIAL.lock().await;
    let mut stack = Stack::start(true).await;
    // The operator starts with a join token the cluster does not accept: the installer
    // refuses the config, and no Node joins.
    stack.kill_operator();
    stack.join_token = "K10-a-stale-token".to_owned();
    stack.start_operator();
    let name = format!("retry-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(1);
    stack.create_pool(manifest, &name).await;
    let instance = wait_for("the Instance", Duration::from_secs(30), async || {
        stack
            .pool_instances(&name)
            .await
            .into_iter()
            .next()
            .map(|i| i.name_any())
    })
    .await;

    // install-retry-seconds (10) after the installed server turned active: retried, counted
    // in status, with a Warning Event (the Ready condition says InstallRetried until the
    // server is back from the reinstall).
    wait_for(
        "status.installRetries = 1",
        Duration::from_secs(90),
        async || {
            let status = stack.instances().get(&instance).await.ok()?.status?;
            (status.install_retries >= Some(1)).then_some(())
        },
    )
    .await;
    stack
        .expect_event("Instance", &instance, |e| {
            e.0 == "Warning" && e.1 == "InstallRetried" && e.2.contains("retry 1 of 3")
        })
        .await;

    // The token is fixed: the next retry renders the config again, and the Node joins.
    stack.kill_operator();
    stack.join_token = JOIN_TOKEN.to_owned();
    stack.start_operator();
    stack.wait_ready(&name, 1, Duration::from_secs(120)).await;
    let status = stack.pool_instances(&name).await.remove(0).status.unwrap();
    let retries = status.install_retries.unwrap_or(0);
    assert!(
        (2..=3).contains(&retries),
        "joined after a re-rendered retry: {retries} retries"
    );
    assert!(!status.instance_id.is_empty());
    // One reinstall per recorded intent: the emulator counts the first boot, the install and
    // each retry.
    let boots = stack
        .sim
        .sim()
        .boot_record(&status.instance_id)
        .map(|r| r.boot_count)
        .unwrap_or(0);
    assert_eq!(i64::from(boots), 2 + retries, "boots of the server");
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

/// docs/migrate-from-equinix-addon.md, step by step: a pool the Go addon made (its status
/// strings, its join token in the pool's status, its plaintext token annotation, its finalizers
/// and a server it created without ingot's tag), the addon stopped, ingot installed from
/// deploy/manifests/pools.yaml and run as that ServiceAccount. The pool is adopted as it is: no
/// server created, reinstalled or deleted, the secrets in the clear removed; and it is still
/// deletable, with its server, through ingot.
struct GoAddonPool {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    stack: Stack,
    pool: String,
    instance: String,
    /// The server the Go addon created.
    device_id: String,
    /// The emulator's request counts before ingot started.
    before: ingot_metal_sim::Metrics,
}

impl GoAddonPool {
    async fn start() -> Self {
        let serial = SERIAL.lock().await;
        let mut stack = Stack::prepare(true).await;
        stack.write_secret(METAL_TOKEN).await;
        let pool = format!("go-made-{}", ingot_testenv::random_suffix(4));
        let instance = format!("{pool}-{}", ingot_testenv::random_suffix(8));

        // The server the Go addon created (packngo's request), active.
        let http = reqwest::Client::new();
        let device: Value = http
            .post(format!(
                "{}/projects/{PROJECT}/devices",
                stack.sim.base_url()
            ))
            .header("X-Auth-Token", METAL_TOKEN)
            .json(
                &json!({"hostname": instance, "plan": "c3.small.x86", "metro": "SG",
                          "operating_system": "custom_ipxe", "billing_cycle": "hourly",
                          "ipxe_script_url": "https://example.invalid/master.ipxe",
                          // The Go addon's install config, its secrets in the clear.
                          "userdata": format!("token: {JOIN_TOKEN}\nos:\n  password: go-addon-password\n")}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let device_id = device["id"].as_str().unwrap().to_owned();
        wait_for(
            "the Go addon's server to be active",
            Duration::from_secs(30),
            async || {
                let found: Value = http
                    .get(format!("{}/devices/{device_id}", stack.sim.base_url()))
                    .header("X-Auth-Token", METAL_TOKEN)
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                (found["state"] == "active").then_some(())
            },
        )
        .await;

        // The pool and its Instance in the Go addon's shapes, and the Node that joined.
        let mut manifest = readme_pool();
        manifest["spec"]["count"] = json!(1);
        stack.create_pool(manifest.clone(), &pool).await;
        stack
            .pools()
            .patch_status(
                &pool,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {
                "status": "ready", "ready": 1, "requested": 1, "needed": 0, "token": JOIN_TOKEN}})),
            )
            .await
            .unwrap();
        let owner = stack.pools().get(&pool).await.unwrap();
        let spec = &manifest["spec"];
        let go_instance: Instance = serde_json::from_value(json!({
            "apiVersion": "equinix.harvesterhci.io/v1", "kind": "Instance",
            "metadata": {
                "name": instance,
                "labels": {"instancePool": pool},
                "annotations": {"token": METAL_TOKEN, "reconfig_ipxe_url": "https://example.invalid/master.ipxe"},
                "finalizers": ["equinix.instance.harvesterhci.io", "wrangler.cattle.io/instance-remove"],
                "ownerReferences": [{"apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
                                     "name": pool, "uid": owner.uid().unwrap(), "controller": true}],
            },
            "spec": {"plan": spec["plan"], "metro": spec["metro"], "billingCycle": spec["billingCycle"],
                     "projectID": PROJECT, "operating_system": "custom_ipxe"},
        }))
        .unwrap();
        stack
            .instances()
            .create(&PostParams::default(), &go_instance)
            .await
            .unwrap();
        stack
            .instances()
            .patch_status(&instance, &PatchParams::default(), &Patch::Merge(&json!({"status": {
                "status": "managed", "instanceID": device_id, "publicIP": "203.0.113.7", "privateIP": "10.0.0.7"}})))
            .await
            .unwrap();
        let nodes: Api<Node> = Api::all(stack.client.clone());
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": instance}})).unwrap(),
            )
            .await
            .unwrap();
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        nodes
            .patch_status(
                &instance,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "joined",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}]}})),
            )
            .await
            .unwrap();
        let before = stack.sim.sim().metrics();

        // ingot, from the manifests.
        stack.start_operator();
        GoAddonPool {
            _serial: serial,
            stack,
            pool,
            instance,
            device_id,
            before,
        }
    }

    async fn finish(mut self) {
        self.stack.kill_operator();
    }

    async fn the_go_addon_s_token_and_plaintext_annotation_go_and_its_finalizer_stays(&mut self) {
        let (stack, pool, instance) = (&self.stack, &self.pool, &self.instance);
        wait_for(
            "the Go addon's token and plaintext annotation to be gone, the finalizer kept",
            Duration::from_secs(60),
            async || {
                let pool_status = stack.pools().get(pool).await.ok()?.status?;
                let adopted = stack.instances().get(instance).await.ok()?;
                let annotations = adopted.annotations();
                (pool_status.token.is_none()
                    && !annotations.contains_key("token")
                    && adopted
                        .finalizers()
                        .contains(&"equinix.instance.harvesterhci.io".to_owned()))
                .then_some(())
            },
        )
        .await;
    }

    async fn the_pool_is_ready_with_its_instance_managed_on_the_go_addon_s_server(&mut self) {
        let stack = &self.stack;
        stack
            .wait_ready(&self.pool, 1, Duration::from_secs(30))
            .await;
        let adopted = stack.instances().get(&self.instance).await.unwrap();
        let status = adopted.status.unwrap();
        assert_eq!(
            (status.status.as_str(), status.instance_id.as_str()),
            ("managed", self.device_id.as_str())
        );
    }

    /// Settled: the server the Go addon made was neither recreated, reinstalled nor rebooted;
    /// its userdata, which held the join token and OS password, was replaced once.
    async fn the_server_is_not_recreated_reinstalled_or_rebooted_its_userdata_replaced_once(
        &mut self,
    ) {
        let stack = &self.stack;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = stack.sim.sim().metrics();
        for op in ["createDevice", "deleteDevice", "performAction"] {
            assert_eq!(
                after.requests(op),
                self.before.requests(op),
                "{op} was sent to the adopted server"
            );
        }
        assert_eq!(
            after.requests("updateDevice") - self.before.requests("updateDevice"),
            1
        );
        let userdata =
            stack.devices(&[self.pool.as_str()])[&self.device_id].1["userdata"].to_string();
        assert!(
            !userdata.contains(JOIN_TOKEN) && !userdata.contains("go-addon-password"),
            "{userdata}"
        );
    }

    /// Still deletable through ingot: the pool goes, with its Instance, server and Node.
    async fn the_pool_is_still_deleted_with_its_instance_server_and_node(&mut self) {
        let stack = &self.stack;
        stack
            .delete_pools_and_expect_no_devices(std::slice::from_ref(&self.pool))
            .await;
        let nodes: Api<Node> = Api::all(stack.client.clone());
        wait_for(
            "the Node to be deleted",
            Duration::from_secs(30),
            async || {
                nodes
                    .get_opt(&self.instance)
                    .await
                    .unwrap()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    }
}

ingot_testenv::scenario!(mod go_addon_pool: GoAddonPool {
    the_go_addon_s_token_and_plaintext_annotation_go_and_its_finalizer_stays,
    the_pool_is_ready_with_its_instance_managed_on_the_go_addon_s_server,
    the_server_is_not_recreated_reinstalled_or_rebooted_its_userdata_replaced_once,
    the_pool_is_still_deleted_with_its_instance_server_and_node,
});

impl Stack {
    /// An Instance's condition of this type: (status, reason, message).
    async fn instance_condition(
        &self,
        instance: &str,
        type_: &str,
    ) -> Option<(String, String, String)> {
        self.instances()
            .get_opt(instance)
            .await
            .ok()??
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason, c.message))
    }

    /// Waits for the Instance's `Ready` condition to be False with this reason; its message.
    async fn wait_blocked(&self, instance: &str, reason: &str, timeout: Duration) -> String {
        wait_for(
            &format!("Instance {instance} Ready=False {reason}"),
            timeout,
            async || {
                self.instance_condition(instance, "Ready")
                    .await
                    .filter(|c| c.0 == "False" && c.1 == reason)
                    .map(|c| c.2)
            },
        )
        .await
    }

    /// A Running, Ready pod on `node` (as its kubelet would report), optionally guarded by a
    /// PodDisruptionBudget that refuses every eviction.
    async fn running_pod(&self, name: &str, node: &str, guarded: bool) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        if guarded {
            let pdbs: Api<PodDisruptionBudget> =
                Api::namespaced(self.client.clone(), &self.namespace);
            let pdb: PodDisruptionBudget = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}
            }))
            .unwrap();
            pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        }
    }

    /// Stands in for the kubelets (none runs on these Nodes): confirms every pod deletion.
    fn confirm_pod_deletions(&self) -> tokio::task::JoinHandle<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        tokio::spawn(async move {
            loop {
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    for pod in list.items {
                        if pod.metadata.deletion_timestamp.is_some() {
                            let _ = pods
                                .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                                .await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }

    /// Nodes of the pool that are unschedulable.
    async fn cordoned(&self, pool: &str) -> Vec<String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
            .map(|n| n.name_any())
            .filter(|n| n.starts_with(pool))
            .collect()
    }

    /// The pool's Instance that scale-down removes first (all healthy: the newest, then by
    /// name).
    async fn newest(&self, pool: &str) -> String {
        let mut order: Vec<(std::cmp::Reverse<k8s_openapi::jiff::Timestamp>, String)> = self
            .pool_instances(pool)
            .await
            .into_iter()
            .map(|i| {
                (
                    std::cmp::Reverse(i.metadata.creation_timestamp.clone().unwrap().0),
                    i.name_any(),
                )
            })
            .collect();
        order.sort();
        order.remove(0).1
    }
}

/// An Instance whose `status.status` is none of the phases is blocked with a condition and an
/// Event: its server, a live joined Node, is neither reinstalled nor replaced, and nothing is
/// written over the status.
#[tokio::test]
async fn an_unknown_instance_status_is_blocked_and_the_server_left_alone() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("odd-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(1);
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 1, Duration::from_secs(120)).await;
    let instance = stack.pool_instances(&name).await.remove(0);
    let member = instance.name_any();
    let server = instance.status.unwrap().instance_id;
    let before = stack.sim.sim().metrics();

    // Written again while a status write of the controller that was under way when the pool
    // read ready replaced it: what is checked is the answer to the status once it holds.
    let message = wait_for(
        &format!("Instance {member} Ready=False UnknownStatus"),
        Duration::from_secs(90),
        async || {
            let current = stack.instances().get(&member).await.ok()?.status?;
            if current.status != "installing-v2" {
                stack
                    .instances()
                    .patch_status(
                        &member,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": {"status": "installing-v2"}})),
                    )
                    .await
                    .ok()?;
                return None;
            }
            current
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "UnknownStatus")
                .map(|c| c.message)
        },
    )
    .await;
    assert!(
        message.contains("installing-v2") && message.contains(&server),
        "{message}"
    );
    stack
        .expect_event("Instance", &member, |e| {
            e.0 == "Warning" && e.1 == "UnknownStatus"
        })
        .await;
    let status = stack
        .instances()
        .get(&member)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        (status.status.as_str(), status.instance_id.as_str()),
        ("installing-v2", server.as_str())
    );
    let after = stack.sim.sim().metrics();
    for op in ["createDevice", "deleteDevice", "performAction"] {
        assert_eq!(after.requests(op), before.requests(op), "{op} was sent");
    }
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

/// Deleting a pool drains its Nodes before their servers go, one Node at a time: a pod a
/// PodDisruptionBudget guards holds its Node's server, the others wait their turn, and each
/// Instance's `Ready` condition says why.
#[tokio::test]
async fn deleting_a_pool_drains_its_nodes_one_at_a_time_before_the_servers_go() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("bye-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(3);
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 3, Duration::from_secs(120)).await;
    let members: Vec<String> = stack.names(&name).await.into_iter().collect();
    // The first by name drains first: its pod is guarded; the second's is not.
    stack.running_pod("held", &members[0], true).await;
    stack.running_pod("free", &members[1], false).await;
    let kubelet = stack.confirm_pod_deletions();
    let servers = stack.devices(&[name.as_str()]);
    assert_eq!(servers.len(), 3);

    stack
        .pools()
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
    let message = stack
        .wait_blocked(&members[0], "DrainBlocked", Duration::from_secs(60))
        .await;
    assert!(message.contains("held"), "{message}");
    for waiting in &members[1..] {
        let message = stack
            .wait_blocked(waiting, "WaitingForDrain", Duration::from_secs(30))
            .await;
        assert!(message.contains(&members[0]), "{message}");
    }
    assert_eq!(stack.cordoned(&name).await, vec![members[0].clone()]);
    assert_eq!(
        stack.devices(&[name.as_str()]).len(),
        3,
        "no server goes while its Node is not drained"
    );
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), &stack.namespace);
    assert!(
        pods.get_opt("free").await.unwrap().is_some(),
        "not its turn"
    );

    // The budget goes: each Node is drained, then its server deleted, one at a time.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(stack.client.clone(), &stack.namespace);
    pdbs.delete("held", &DeleteParams::default()).await.unwrap();
    let started = Instant::now();
    while !stack.devices(&[name.as_str()]).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "timed out deleting the servers"
        );
        assert!(
            stack.cordoned(&name).await.len() <= 1,
            "one drain at a time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kubelet.abort();
    for pod in ["held", "free"] {
        assert!(pods.get_opt(pod).await.unwrap().is_none(), "{pod} evicted");
    }
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

/// Deleting an Instance whose Node is a control-plane Node waits while another control-plane
/// Node is not Ready, and says so.
#[tokio::test]
async fn a_control_plane_node_is_not_deleted_while_another_is_not_ready() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("cp-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(2);
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;
    let members: Vec<String> = stack.names(&name).await.into_iter().collect();
    let nodes: Api<Node> = Api::all(stack.client.clone());
    for member in &members {
        nodes
            .patch(
                member,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": {
                    "node-role.kubernetes.io/control-plane": "true"}}})),
            )
            .await
            .unwrap();
    }
    let (going, sick) = (&members[0], &members[1]);
    stack
        .booter
        .set_not_ready(sick, NotReady::False)
        .await
        .unwrap();
    let server = stack
        .instances()
        .get(going)
        .await
        .unwrap()
        .status
        .unwrap()
        .instance_id;

    stack
        .instances()
        .delete(going, &DeleteParams::default())
        .await
        .unwrap();
    let message = stack
        .wait_blocked(going, "ControlPlaneHeld", Duration::from_secs(30))
        .await;
    assert!(message.contains(sick.as_str()), "{message}");
    stack
        .expect_event("Instance", going, |e| e.1 == "ControlPlaneHeld")
        .await;
    assert!(
        stack.devices(&[name.as_str()]).contains_key(&server),
        "the server stays"
    );
    assert!(stack.cordoned(&name).await.is_empty(), "not even cordoned");

    // The other control-plane Node is Ready again: the deletion goes on.
    stack.booter.set_ready(sick).await.unwrap();
    wait_for(
        "the Instance and its server to be gone",
        Duration::from_secs(60),
        async || {
            (stack.instances().get_opt(going).await.unwrap().is_none()
                && !stack.devices(&[name.as_str()]).contains_key(&server))
            .then_some(())
        },
    )
    .await;
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

/// On an unreachable Node, an evicted pod nothing confirms the deletion of still counts: the
/// removal waits for it until `drainTimeout`, and then goes on with an Event.
#[tokio::test]
async fn an_unreachable_node_s_evicted_pods_are_waited_for_until_drain_timeout() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("lost-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(2);
    manifest["spec"]["nodeCleanupWaitInterval"] = json!("2s");
    manifest["spec"]["drainTimeout"] = json!("10s");
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;
    let lost: String = stack.names(&name).await.into_iter().next().unwrap();
    stack.running_pod("stranded", &lost, false).await;

    stack
        .booter
        .set_not_ready(&lost, NotReady::Unknown)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), &stack.namespace);
    wait_for(
        "the pod on the unreachable Node to be evicted",
        Duration::from_secs(30),
        async || {
            pods.get_opt("stranded")
                .await
                .unwrap()?
                .metadata
                .deletion_timestamp
                .map(|_| ())
        },
    )
    .await;
    // Evicted, not gone: the Instance (and its server) stay.
    let instance = stack.instances().get_opt(&lost).await.unwrap();
    assert!(
        instance.is_some_and(|i| i.metadata.deletion_timestamp.is_none()),
        "removed while its evicted pod was still there"
    );
    stack
        .expect_event("InstancePool", &name, |e| {
            e.1 == "DrainTimeout"
                && e.2.contains(&lost)
                && e.2.contains("1 pods are still terminating")
        })
        .await;
    wait_for(
        "the unreachable Node's Instance to be replaced",
        Duration::from_secs(120),
        async || {
            let names = stack.names(&name).await;
            (names.len() == 2 && !names.contains(&lost)).then_some(())
        },
    )
    .await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;
    let _ = pods
        .delete("stranded", &DeleteParams::default().grace_period(0))
        .await;
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

/// A Node a person cordoned is drained on scale-down without its cordon becoming ingot's, and
/// when the pool grows back that cordon stays.
#[tokio::test]
async fn a_person_s_cordon_is_never_taken_over_or_lifted() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("mine-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(2);
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 2, Duration::from_secs(120)).await;
    let victim = stack.newest(&name).await;
    let nodes: Api<Node> = Api::all(stack.client.clone());
    nodes
        .patch(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    stack.running_pod("kept", &victim, true).await;

    stack.set_count(&name, 1).await;
    wait_for(
        "DrainingSucceeded=False DrainBlocked",
        Duration::from_secs(30),
        async || {
            stack
                .pool_condition(&name, "DrainingSucceeded")
                .await
                .filter(|c| c.0 == "False" && c.1 == "DrainBlocked" && c.2.contains(&victim))
        },
    )
    .await;
    let node = nodes.get(&victim).await.unwrap();
    assert_eq!(
        node.annotations()
            .get("equinix.harvesterhci.io/cordoned-by"),
        None,
        "the person's cordon was taken over"
    );
    assert_eq!(node.spec.unwrap().unschedulable, Some(true));

    // The pool grows back: the Node stays, and so does the person's cordon.
    stack.set_count(&name, 2).await;
    stack.wait_ready(&name, 2, Duration::from_secs(60)).await;
    assert!(stack.names(&name).await.contains(&victim));
    let node = nodes.get(&victim).await.unwrap();
    assert_eq!(
        node.spec.unwrap().unschedulable,
        Some(true),
        "the person's cordon was lifted"
    );
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(stack.client.clone(), &stack.namespace);
    pdbs.delete("kept", &DeleteParams::default()).await.unwrap();
    let kubelet = stack.confirm_pod_deletions();
    stack.delete_pools_and_expect_no_devices(&[name]).await;
    kubelet.abort();
}

/// A pool asked for many Instances creates them in bounded steps: the first status written
/// counts at most ten created.
#[tokio::test]
async fn scale_up_creates_a_bounded_number_of_instances_per_pass() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{WatchEvent, WatchParams};
    let _serial = SERIAL.lock().await;
    // No credentials: Instances are created but no server is.
    let mut stack = Stack::start(false).await;
    let name = format!("many-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(25);
    manifest["metadata"]["name"] = json!(name);
    let pool: InstancePool = serde_json::from_value(manifest).unwrap();
    let created = stack
        .pools()
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let mut events = stack
        .pools()
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={name}")),
            &created.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    let mut needed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while needed.last() != Some(&0) {
        assert!(Instant::now() < deadline, "statuses seen: {needed:?}");
        let event = tokio::time::timeout(Duration::from_secs(30), events.try_next())
            .await
            .expect("a pool status")
            .unwrap()
            .expect("the watch ends");
        if let WatchEvent::Modified(pool) = event
            && let Some(status) = pool.status
            && status.requested == 25
        {
            needed.push(status.needed);
        }
    }
    assert_eq!(needed.first(), Some(&15), "statuses seen: {needed:?}");
    assert!(needed.windows(2).all(|w| w[0] - w[1] <= 10), "{needed:?}");
    assert_eq!(stack.pool_instances(&name).await.len(), 25);

    // Nothing was made outside: the Instances go without their finalizer.
    stack.kill_operator();
    for instance in stack.pool_instances(&name).await {
        stack
            .instances()
            .patch(
                &instance.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
    }
    stack
        .pools()
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
    wait_for(
        "the pool's Instances to be gone",
        Duration::from_secs(60),
        async || stack.pool_instances(&name).await.is_empty().then_some(()),
    )
    .await;
}

/// A server named in `status.instanceID` that is not the Instance's (no tag of its, another
/// hostname) is never deleted: the deletion waits with a condition until the id is corrected.
#[tokio::test]
async fn a_server_that_is_not_the_instance_s_is_never_deleted() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("tag-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(1);
    stack.create_pool(manifest, &name).await;
    stack.wait_ready(&name, 1, Duration::from_secs(120)).await;
    let instance = stack.pool_instances(&name).await.remove(0);
    let member = instance.name_any();
    let own = instance.status.unwrap().instance_id;
    let foreign = stack
        .metal(
            reqwest::Method::POST,
            &format!("/projects/{PROJECT}/devices"),
            json!({"hostname": "someone-elses", "plan": "c3.small.x86", "metro": "SG",
                   "operating_system": "custom_ipxe", "billing_cycle": "hourly",
                   "ipxe_script_url": "https://example.invalid/x.ipxe"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Written by hand once the Instance is managed; a status write of the operator's that
    // read the Instance before this one may land after it, so it is written until it stays.
    wait_for(
        "the foreign id to stay in the Instance's status",
        Duration::from_secs(60),
        async || {
            stack
                .instances()
                .patch_status(
                    &member,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": {"instanceID": foreign}})),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = stack.instances().get(&member).await.unwrap();
            (now.status.map(|s| s.instance_id).as_deref() == Some(foreign.as_str())).then_some(())
        },
    )
    .await;

    stack
        .pools()
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
    let message = stack
        .wait_blocked(&member, "ServerNotOwned", Duration::from_secs(60))
        .await;
    assert!(message.contains(&foreign), "{message}");
    let base = stack.sim.base_url();
    let device = |id: String| {
        let base = base.clone();
        async move {
            let found: Value = reqwest::Client::new()
                .get(format!("{base}/devices/{id}"))
                .header("X-Auth-Token", METAL_TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            found["state"].as_str().unwrap_or_default().to_owned()
        }
    };
    assert!(
        !matches!(
            device(foreign.clone()).await.as_str(),
            "deprovisioning" | "deleted" | ""
        ),
        "the foreign server was deleted"
    );
    assert!(
        stack.devices(&[name.as_str()]).contains_key(&own),
        "nothing is deleted while the refusal stands"
    );

    // The id corrected: the Instance's own server goes, the other stays.
    stack
        .instances()
        .patch_status(
            &member,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"instanceID": own}})),
        )
        .await
        .unwrap();
    stack.delete_pools_and_expect_no_devices(&[name]).await;
    assert!(
        !matches!(
            device(foreign.clone()).await.as_str(),
            "deprovisioning" | "deleted" | ""
        ),
        "the foreign server was deleted"
    );
    stack
        .metal(
            reqwest::Method::DELETE,
            &format!("/devices/{foreign}"),
            Value::Null,
        )
        .await;
}

/// A pool over Inventories never orders from Equinix Metal: with the Equinix credentials in
/// place and the operator allowing pools the Inventories of `racks` only, a pool naming `metal`
/// has its Instances wait, naming the namespace and the flag (`InventoryNamespaceNotAllowed`,
/// with a Warning Event on the pool), before anything of `metal` is read; and no server is
/// made at the Metal emulator.
#[tokio::test]
async fn a_pool_over_inventories_orders_no_server_and_says_why_it_waits() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("racks-{}", ingot_testenv::random_suffix(4));
    let manifest = json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
        "metadata": {"name": name},
        "spec": {"count": 2, "inventorySelector": {"matchLabels": {"rack": "a"}},
            "inventoryNamespace": "metal", "addressPool": "nodes"}});
    stack.create_pool(manifest, &name).await;
    let (status, _reason, message) = wait_for(
        "the pool's BackendReady condition",
        Duration::from_secs(60),
        async || {
            stack
                .pool_condition(&name, "BackendReady")
                .await
                .filter(|(_, reason, _)| reason == "Inventories")
        },
    )
    .await;
    assert_eq!(status, "True");
    assert!(message.contains("namespace metal"), "{message}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let reasons: Vec<(String, String)> = stack
            .pool_instances(&name)
            .await
            .into_iter()
            .flat_map(|i| i.status.unwrap_or_default().conditions)
            .filter(|c| c.type_ == "Ready")
            .map(|c| (c.reason, c.message))
            .collect();
        if reasons.len() == 2
            && reasons.iter().all(|(r, m)| {
                r == "InventoryNamespaceNotAllowed"
                    && m.contains("\"metal\"")
                    && m.contains("--pool-inventory-namespaces")
            })
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the Instances do not wait with InventoryNamespaceNotAllowed: {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stack
        .expect_event("InstancePool", &name, |(type_, reason, message)| {
            type_ == "Warning"
                && reason == "InventoryNamespaceNotAllowed"
                && message.contains("racks")
        })
        .await;
    assert_eq!(stack.pool_instances(&name).await.len(), 2);
    assert!(stack.devices(&[&name]).is_empty());
    stack
        .pools()
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
}
