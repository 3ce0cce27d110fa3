//! The pools part end to end: a real kube-apiserver, the Metal emulator, the booting servers,
//! and `ingot run` as a process. The scenarios share one emulator-free control plane, so they
//! run one at a time (each with its own emulator, booter and operator).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ingot_api::equinix::{Instance, InstancePool};
use ingot_boot_sim::{Booter, BooterConfig, Expected, NotReady, Running};
use ingot_metal_sim::{PlanMetro, SimConfig, SimServer};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, Secret};
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
    operator: Option<Child>,
    http_port: u16,
    kubeconfig: std::path::PathBuf,
}

impl Stack {
    async fn start(with_secret: bool) -> Stack {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let namespace = env.namespace("pools").await.unwrap();
        let sim = SimServer::start(
            SimConfig::single(METAL_TOKEN, PROJECT),
            "127.0.0.1:0".parse().unwrap(),
        )
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
        let http_port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut stack = Stack {
            client,
            namespace,
            sim,
            booter,
            _running: running,
            operator: None,
            http_port,
            kubeconfig: env.kubeconfig_path().to_owned(),
        };
        if with_secret {
            stack.write_secret(METAL_TOKEN).await;
        }
        stack.start_operator();
        stack
    }

    /// Starts (or restarts) `ingot run`.
    fn start_operator(&mut self) {
        let log = std::env::temp_dir().join(format!("ingot-{}.log", self.namespace));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_ingot"))
            .arg("run")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--http-addr=127.0.0.1:{}", self.http_port))
            .arg(format!("--lease-namespace={}", self.namespace))
            .arg("--lease-duration-seconds=3")
            .arg(format!("--metal-api-url={}", self.sim.base_url()))
            .arg(format!(
                "--ipxe-base-url=http://127.0.0.1:{}",
                self.http_port
            ))
            .arg(format!("--cluster-address={VIP}"))
            .arg("--metal-rate-limit=200")
            .arg("--metal-poll-seconds=0.5")
            // A kill can land while a server fetches its install script from this operator.
            .arg("--install-retry-seconds=10")
            .env("NAMESPACE", &self.namespace)
            .env("TOKEN", JOIN_TOKEN)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.operator = Some(child);
    }

    fn kill_operator(&mut self) {
        if let Some(mut child) = self.operator.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    async fn write_secret(&self, token: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
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
            self.pools()
                .delete(name, &DeleteParams::background())
                .await
                .unwrap();
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

async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn readme_pool() -> Value {
    ingot_compat::readme_pool()
}

/// The fork README's networkingConfiguration variants, in the order they appear.
fn fork_networking_variants() -> Vec<Value> {
    ingot_compat::fork_manifest_and_snippets().1
}

#[tokio::test]
async fn seed_pools_reach_ready_in_every_networking_variant() {
    let _serial = SERIAL.lock().await;
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
    for (name, _) in &pools {
        stack.wait_ready(name, 1, Duration::from_secs(120)).await;
    }

    let names: Vec<&str> = pools.iter().map(|(name, _)| name.as_str()).collect();
    let devices = stack.devices(&names);
    assert_eq!(
        devices.len(),
        pools.len(),
        "one device per pool, no duplicate"
    );
    let vlans = stack
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
    for (name, manifest) in &pools {
        let instances = stack.pool_instances(name).await;
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

        // The ports are in the requested mode with the VLANs.
        let networking = &manifest["spec"]["networkingConfiguration"];
        let Some(mode) = networking["type"].as_str() else {
            continue;
        };
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
    let names: Vec<String> = pools.into_iter().map(|(name, _)| name).collect();
    stack.delete_pools_and_expect_no_devices(&names).await;
}

#[tokio::test]
async fn scale_out_and_in_then_replace_an_unhealthy_node() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(true).await;
    let name = format!("scale-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["nodeCleanupWaitInterval"] = json!("3s");
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
    let events = stack.events_for("InstancePool", &name).await;
    assert!(
        events
            .iter()
            .any(|(_, reason, message)| reason == "ReplacingUnhealthyNode"
                && message.contains(&victim)),
        "{events:?}"
    );

    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

#[tokio::test]
async fn failures_show_conditions_and_events_and_the_pool_recovers() {
    let _serial = SERIAL.lock().await;
    let stack = Stack::start(false).await;
    let name = format!("faults-{}", ingot_testenv::random_suffix(4));
    stack.create_pool(readme_pool(), &name).await;

    let condition =
        async |kind: &str, object: &str, type_: &str| -> Option<(String, String, String)> {
            let conditions = match kind {
                "pool" => stack.pools().get(object).await.ok()?.status?.conditions,
                _ => stack.instances().get(object).await.ok()?.status?.conditions,
            };
            conditions
                .into_iter()
                .find(|c| c.type_ == type_)
                .map(|c| (c.status, c.reason, c.message))
        };

    // 1. No Secret: a condition and an Event saying what to create.
    let (status, reason, message) = wait_for(
        "CredentialsReady=False",
        Duration::from_secs(30),
        async || {
            condition("pool", &name, "CredentialsReady")
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
    assert!(
        stack
            .events_for("InstancePool", &name)
            .await
            .iter()
            .any(|e| e.0 == "Warning" && e.1 == "SecretNotFound")
    );
    let instance = wait_for("the Instance", Duration::from_secs(30), async || {
        stack.pool_instances(&name).await.into_iter().next()
    })
    .await
    .name_any();

    // The Go addon's plaintext annotations are removed from an Instance.
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

    // 2. A token the API refuses (401).
    stack.write_secret("not-the-token").await;
    let (_, _, message) = wait_for(
        "Ready=False Unauthorized",
        Duration::from_secs(60),
        async || {
            condition("instance", &instance, "Ready")
                .await
                .filter(|c| c.1 == "Unauthorized")
        },
    )
    .await;
    assert!(
        !message.contains("not-the-token"),
        "the token never shows: {message}"
    );
    assert!(
        stack
            .events_for("Instance", &instance)
            .await
            .iter()
            .any(|e| e.1 == "Unauthorized")
    );

    // 3. No capacity for the plan in the metro.
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
            condition("instance", &instance, "Ready")
                .await
                .filter(|c| c.1 == "NoCapacity")
        },
    )
    .await;
    assert!(
        stack
            .events_for("InstancePool", &name)
            .await
            .iter()
            .any(|e| e.1 == "NoCapacity")
    );
    assert!(stack.devices(&[&name]).is_empty());

    // 4. A server that fails provisioning is replaced once capacity is back.
    stack.sim.sim().update_faults(|f| {
        f.capacity_exhausted.clear();
        f.fail_provisioning.push(instance.clone());
    });
    wait_for("ProvisioningFailed", Duration::from_secs(120), async || {
        stack
            .events_for("Instance", &instance)
            .await
            .into_iter()
            .find(|e| e.1 == "ProvisioningFailed")
    })
    .await;
    stack
        .sim
        .sim()
        .update_faults(|f| f.fail_provisioning.clear());
    stack.wait_ready(&name, 1, Duration::from_secs(120)).await;
    assert_eq!(
        stack.devices(&[&name]).len(),
        1,
        "the failed server was deleted, one server remains"
    );
    stack.delete_pools_and_expect_no_devices(&[name]).await;
}

#[tokio::test]
async fn killed_twenty_times_during_scale_out_leaves_exactly_five_devices() {
    use rand::Rng;
    let _serial = SERIAL.lock().await;
    let mut stack = Stack::start(true).await;
    let name = format!("sigkill-{}", ingot_testenv::random_suffix(4));
    let mut manifest = readme_pool();
    manifest["spec"]["count"] = json!(5);
    stack.create_pool(manifest, &name).await;
    for _ in 0..20 {
        let delay = Duration::from_millis(rand::rng().random_range(50..600));
        tokio::time::sleep(delay).await;
        stack.kill_operator();
        stack.start_operator();
    }
    stack.wait_ready(&name, 5, Duration::from_secs(180)).await;
    let devices = stack.devices(&[&name]);
    let instances = stack.pool_instances(&name).await;
    assert_eq!(instances.len(), 5);
    assert_eq!(
        devices.len(),
        5,
        "exactly five devices: {:?}",
        devices.values().map(|d| &d.0).collect::<Vec<_>>()
    );
    let hostnames: BTreeSet<&String> = devices.values().map(|(hostname, _)| hostname).collect();
    for instance in &instances {
        let status = instance.status.clone().unwrap();
        assert!(
            devices.contains_key(&status.instance_id),
            "{} points at its device",
            instance.name_any()
        );
        assert!(hostnames.contains(&instance.name_any()));
    }
    stack.delete_pools_and_expect_no_devices(&[name]).await;
    // The namespace is the test's: nothing else to clean.
    let _ = Api::<Namespace>::all(stack.client.clone())
        .delete(&stack.namespace, &DeleteParams::default())
        .await;
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
