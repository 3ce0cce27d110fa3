//! The Gardener machine controller end to end: a real kube-apiserver with Gardener's CRDs,
//! upstream machine-controller-manager (built from its Go module) running the MachineSets and
//! MachineDeployments, `ingot run --controllers gardener` as the machine controller, the Metal
//! emulator with scaled provisioning times, and booting servers whose kubelets join with the
//! bootstrap token of their user data. Each scenario has its own namespace, emulator, MCM and
//! operator.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ingot_api::gardener::{Machine, MachineDeployment, MachineSet};
use ingot_boot_sim::{Booter, BooterConfig, Expected, Running};
use ingot_metal_sim::{HardwareReservationConfig, PlanMetro, SimConfig, SimServer, Timings};
use ingot_testenv::mcm::Mcm;
use ingot_testenv::{Operator, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const TOKEN: &str = "gardener-e2e-metal-token";
/// The project of the provider's sample machine class.
const PROJECT: &str = "e3db5484-f789-43e1-8aea-a1921cae50dd";
const CLASS: &str = "eqx-mc";

/// Gardener-style user data: the node agent's bootstrap token and machine name files.
const USER_DATA: &str = "#!/bin/bash\nmkdir -p /var/lib/gardener-node-agent/credentials\ncat <<EOF >/var/lib/gardener-node-agent/credentials/bootstrap-token\n<<BOOTSTRAP_TOKEN>>\nEOF\ncat <<EOF >/var/lib/gardener-node-agent/machine-name\n<<MACHINE_NAME>>\nEOF\nsystemctl enable --now gardener-node-agent\n";

struct Stack {
    /// The control cluster: Machines, MachineClasses, Secrets (and ingot's Lease).
    client: Client,
    /// The target cluster: Nodes, pods, bootstrap tokens. The control cluster itself unless the
    /// stack was started with [`Stack::start_with_target_cluster`].
    target: Client,
    namespace: String,
    sim: SimServer,
    _booter: Booter,
    _running: Running,
    _mcm: Mcm,
    operator: Option<Operator>,
    kubeconfig: PathBuf,
    /// The second API server's kubeconfig, when the Nodes join one.
    target_kubeconfig: Option<PathBuf>,
    lease_namespace: String,
    extra_args: Vec<String>,
    // Dropped last: the processes above talk to it.
    _target_plane: Option<ingot_testenv::ControlPlane>,
}

impl Stack {
    async fn start(extra_args: &[&str]) -> Stack {
        Self::start_on(extra_args, None, false, Vec::new()).await
    }

    /// Installed as docs/migrate-from-mcm-provider.md says: deploy/manifests/gardener.yaml as it
    /// is (Machines in `default`), ingot run as its ServiceAccount, its Lease in ingot-system.
    async fn start_from_manifests(extra_args: &[&str]) -> Stack {
        Self::start_on(extra_args, None, true, Vec::new()).await
    }

    /// A stack whose Nodes join a second API server (a shoot), while the Machines stay in the
    /// shared one (the seed): no CRDs, no controller manager there, as in a fresh shoot.
    async fn start_with_target_cluster(extra_args: &[&str]) -> Stack {
        let options = ingot_testenv::Options {
            controller_manager: false,
            install_crds: false,
            watchdog_parent: Some(std::process::id()),
            ..ingot_testenv::Options::from_env().unwrap()
        };
        let plane = ingot_testenv::ControlPlane::start(options).await.unwrap();
        Self::start_on(extra_args, Some(plane), false, Vec::new()).await
    }

    /// A stack whose emulator holds these hardware reservations of the project.
    async fn start_with_reservations(reservations: Vec<HardwareReservationConfig>) -> Stack {
        Self::start_on(&[], None, false, reservations).await
    }

    async fn start_on(
        extra_args: &[&str],
        target_plane: Option<ingot_testenv::ControlPlane>,
        from_manifests: bool,
        reservations: Vec<HardwareReservationConfig>,
    ) -> Stack {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let (target, target_kubeconfig) = match &target_plane {
            Some(plane) => (
                plane.client().await.unwrap(),
                Some(plane.kubeconfig_path().to_owned()),
            ),
            None => (client.clone(), None),
        };
        let namespace = if from_manifests {
            "default".to_owned()
        } else {
            env.namespace("gardener").await.unwrap()
        };
        let mut config = SimConfig::single(TOKEN, PROJECT);
        config.hardware_reservations = reservations;
        // Scaled: seconds where the real service takes minutes.
        config.timings = Timings {
            queued_ms: 200,
            provisioning_ms: 1_000,
            reinstalling_ms: 1_000,
            deprovisioning_ms: 300,
            power_ms: 200,
        };
        let sim = SimServer::start(config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let mut booter_config = BooterConfig::new(
            sim.base_url(),
            Expected {
                token: String::new(),
                host: "192.0.2.1".into(),
                port: None,
                schema: None,
            },
        );
        booter_config.project = Some(PROJECT.to_owned());
        booter_config.poll_interval = Duration::from_millis(200);
        booter_config.heartbeat_interval = Duration::from_secs(2);
        // The servers join the target cluster, with bootstrap tokens found there.
        let booter = Booter::new(booter_config, target.clone()).unwrap();
        let running = booter.start();
        let log = std::env::temp_dir().join(format!("mcm-{namespace}.log"));
        let mcm = Mcm::start_with_target(
            env.kubeconfig_path(),
            target_kubeconfig
                .as_deref()
                .unwrap_or(env.kubeconfig_path()),
            &namespace,
            &log,
        )
        .unwrap();
        // ingot runs as the chart's ServiceAccount: a permission the chart lacks fails here.
        let (kubeconfig, lease_namespace) = if from_manifests {
            (
                chart_support::install_from_manifests(env.kubeconfig_path(), "gardener"),
                chart_support::MANIFESTS_NAMESPACE.to_owned(),
            )
        } else {
            (
                chart_support::service_account_kubeconfig(
                    env.kubeconfig_path(),
                    &namespace,
                    "gardener",
                ),
                namespace.clone(),
            )
        };
        let mut stack = Stack {
            client,
            target,
            namespace,
            sim,
            _booter: booter,
            _running: running,
            _mcm: mcm,
            operator: None,
            kubeconfig,
            target_kubeconfig,
            lease_namespace,
            extra_args: extra_args.iter().map(|s| (*s).to_owned()).collect(),
            _target_plane: target_plane,
        };
        stack.start_operator(None);
        stack.apply_samples().await;
        stack
    }

    /// Starts (or restarts) `ingot run` with a stable identity; `crash_point` arms a test-only
    /// abort at that line.
    fn start_operator(&mut self, crash_point: Option<&str>) {
        if let Some(operator) = &mut self.operator {
            operator.restart(crash_point);
            return;
        }
        let mut builder = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .log_file(std::env::temp_dir().join(format!("ingot-{}.log", self.namespace)))
            .controllers("gardener")
            .kubeconfig(&self.kubeconfig)
            .arg(format!("--namespace={}", self.namespace))
            .arg(format!("--lease-namespace={}", self.lease_namespace))
            .arg(format!("--identity=ingot-{}", self.namespace))
            .arg("--lease-duration-seconds=3")
            .arg(format!("--metal-api-url={}", self.sim.base_url()))
            .arg("--metal-rate-limit=200")
            .args(self.extra_args.iter().cloned())
            .crash_point(crash_point);
        if let Some(target) = &self.target_kubeconfig {
            // ingot's own client (and Lease) on the control cluster; both upstream flags, so
            // that ignoring either one would send that half of the work to the wrong cluster.
            builder = builder
                .arg(format!(
                    "--control-kubeconfig={}",
                    self.kubeconfig.display()
                ))
                .arg(format!("--target-kubeconfig={}", target.display()));
        }
        self.operator = Some(builder.start());
    }

    fn operator(&self) -> &Operator {
        self.operator.as_ref().expect("the operator was started")
    }

    /// The running operator's /metrics, series (name with labels) -> value. Its port is the
    /// one it logged (it picks a free one itself).
    async fn metrics(&self) -> BTreeMap<String, f64> {
        self.operator().metrics().await
    }

    fn kill_operator(&mut self) {
        if let Some(operator) = &self.operator {
            operator.kill();
        }
    }

    /// Waits for the operator to abort at its crash point.
    async fn wait_operator_crashed(&mut self, timeout: Duration) {
        let status = self.operator().wait_exit(timeout).await;
        assert!(!status.success(), "aborted, not exited: {status}");
    }

    /// The provider's machine-class.yaml (first class) and secret.yaml, credentials filled. The
    /// sample's plan and OS (`t1.small.x86`, `alpine_3`) are retired; the emulator offers
    /// current ones. The sample user data has no bootstrap placeholder (its node could never
    /// join), so Gardener-style user data replaces it.
    async fn apply_samples(&self) {
        let classes = ingot_compat::yaml_documents(&ingot_compat::shared_file(
            "fixtures/mcm-provider-samples/machine-class.yaml",
        ));
        let mut class = classes
            .into_iter()
            .find(|c| c["metadata"]["name"] == CLASS)
            .unwrap();
        class["metadata"]["namespace"] = json!(self.namespace);
        class["secretRef"]["namespace"] = json!(self.namespace);
        class["providerSpec"]["machineType"] = json!("c3.small.x86");
        class["providerSpec"]["OS"] = json!("ubuntu_22_04");
        assert_eq!(class["providerSpec"]["projectID"], PROJECT);
        self.apply(&class).await;
        let mut secret = ingot_compat::yaml_documents(&ingot_compat::shared_file(
            "fixtures/mcm-provider-samples/secret.yaml",
        ))
        .remove(0);
        secret["metadata"]["namespace"] = json!(self.namespace);
        secret["stringData"]["apiToken"] = json!(TOKEN);
        secret["stringData"]["userData"] = json!(USER_DATA);
        self.apply(&secret).await;
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
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.namespace, &resource);
        // Created as kubectl create would: unknown fields of the samples (the
        // `template.spec.class.namespace` of the provider's MachineDeployment) are pruned.
        let object: DynamicObject = serde_json::from_value(manifest.clone()).unwrap();
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                api.patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(manifest),
                )
                .await
                .unwrap();
            }
            Err(e) => panic!("creating {kind} {}: {e}", object.name_any()),
        }
    }

    /// The provider's sample MachineDeployment, renamed and sized.
    async fn create_deployment(&self, name: &str, replicas: i64) {
        self.create_deployment_with(name, replicas, json!({})).await;
    }

    /// The sample MachineDeployment with these fields merged into its machines' spec.
    async fn create_deployment_with(&self, name: &str, replicas: i64, machine_spec: Value) {
        let mut md = ingot_compat::yaml_documents(&ingot_compat::shared_file(
            "fixtures/mcm-provider-samples/machine-deployment.yaml",
        ))
        .remove(0);
        md["metadata"]["name"] = json!(name);
        md["metadata"]["namespace"] = json!(self.namespace);
        md["spec"]["replicas"] = json!(replicas);
        md["spec"]["selector"]["matchLabels"] = json!({"test-label": name});
        // `name` is the MachineDeployment label Gardener puts on its machines.
        md["spec"]["template"]["metadata"]["labels"] = json!({"test-label": name, "name": name});
        for (key, value) in machine_spec.as_object().into_iter().flatten() {
            md["spec"]["template"]["spec"][key] = value.clone();
        }
        self.apply(&md).await;
    }

    fn deployments(&self) -> Api<MachineDeployment> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn machines_api(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn scale(&self, name: &str, replicas: i64) {
        self.deployments()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
    }

    async fn machines(&self) -> Vec<Machine> {
        self.machines_api()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Active (not deleted) devices of the emulator: id -> hostname.
    fn devices(&self) -> BTreeMap<String, String> {
        self.sim
            .sim()
            .device_listing(Some(PROJECT))
            .into_iter()
            .map(|e| e["device"].clone())
            .filter(|d| !matches!(d["state"].as_str(), Some("deleted" | "deprovisioning")))
            .map(|d| {
                (
                    d["id"].as_str().unwrap().to_owned(),
                    d["hostname"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Exactly `count` Machines, all Running, each backed by its own device and a Ready Node,
    /// and no other device. Returns the Machines.
    async fn wait_running(&self, count: usize, timeout: Duration) -> Vec<Machine> {
        wait_for(
            &format!("{count} Running machines, one device each"),
            timeout,
            async || {
                let machines = self.machines().await;
                let running = machines.len() == count
                    && machines
                        .iter()
                        .all(|m| phase(m) == "Running" && m.metadata.deletion_timestamp.is_none());
                if !running {
                    return None;
                }
                let devices = self.devices();
                let backing: BTreeSet<String> = machines.iter().map(device_of).collect();
                (devices.len() == count
                    && devices.keys().cloned().collect::<BTreeSet<_>>() == backing)
                    .then_some(machines)
            },
        )
        .await
    }

    async fn node(&self, name: &str) -> Option<Node> {
        Api::<Node>::all(self.target.clone())
            .get_opt(name)
            .await
            .unwrap()
    }

    async fn delete_deployment_and_expect_nothing_left(&self, name: &str) {
        self.deployments()
            .delete(name, &DeleteParams::background())
            .await
            .unwrap();
        wait_for(
            "every machine and device to be gone",
            Duration::from_secs(120),
            async || (self.machines().await.is_empty() && self.devices().is_empty()).then_some(()),
        )
        .await;
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.kill_operator();
    }
}

fn phase(m: &Machine) -> String {
    ingot_controllers::gardener::status::phase(m).to_owned()
}

fn device_of(m: &Machine) -> String {
    m.spec
        .provider_id
        .as_deref()
        .unwrap_or("")
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_owned()
}

fn last_operation(m: &Machine) -> Value {
    serde_json::to_value(m.status.as_ref().and_then(|s| s.last_operation.clone())).unwrap()
}

// A MachineDeployment's life with upstream MCM, one behaviour per test, over one stack (`Life`):
// it runs three Machines, is touched, scaled, loses a Node, rolls to a new class and is deleted,
// in this order (`ingot_testenv::scenario!`).
ingot_testenv::scenario!(mod deployment_life: Life {
    a_deployment_s_machines_run_each_on_its_device_with_its_node_joined,
    passes_over_running_machines_read_class_and_secret_from_the_caches,
    scaling_deletes_the_nodes_of_the_deleted_machines,
    a_deleted_node_deletes_its_machine_which_mcm_replaces,
    a_new_class_rolls_every_machine_onto_its_plan,
    a_deleted_deployment_leaves_no_machine_or_device_and_none_was_made_twice,
    each_phase_change_is_an_event_on_its_machine,
    neither_the_api_token_nor_the_user_data_is_logged,
});

/// One stack and its MachineDeployment `eqx-md-life`, with the Machines it first ran.
struct Life {
    stack: Stack,
    md: &'static str,
    /// The three Machines the deployment first ran.
    machines: Vec<Machine>,
}

impl Life {
    async fn start() -> Self {
        Life {
            stack: Stack::start(&[]).await,
            md: "eqx-md-life",
            machines: Vec::new(),
        }
    }

    async fn finish(self) {}

    /// Three Running Machines, each with MCM's finalizer, its node label and priority, an
    /// `equinixmetal://` provider ID, a Successful Create, its Node joined with its conditions
    /// copied, and its bootstrap token used then deleted.
    async fn a_deployment_s_machines_run_each_on_its_device_with_its_node_joined(&mut self) {
        let stack = &self.stack;
        let md = self.md;
        stack.create_deployment(md, 3).await;
        let machines = stack.wait_running(3, Duration::from_secs(120)).await;
        for m in &machines {
            let name = m.name_any();
            assert!(
                m.finalizers()
                    .contains(&"machine.sapcloud.io/machine-controller-manager".to_owned())
            );
            assert_eq!(m.labels().get("node"), Some(&name), "node label");
            assert_eq!(
                m.annotations()
                    .get("machinepriority.machine.sapcloud.io")
                    .map(String::as_str),
                Some("3")
            );
            let provider_id = m.spec.provider_id.clone().unwrap();
            assert!(
                provider_id.starts_with("equinixmetal://ny/"),
                "{provider_id}"
            );
            let op = last_operation(m);
            assert_eq!(
                op["description"],
                format!("Machine {name} successfully joined the cluster")
            );
            assert_eq!(
                (op["state"].as_str(), op["type"].as_str()),
                (Some("Successful"), Some("Create"))
            );
            let node = stack.node(&name).await.expect("the machine's Node joined");
            assert_eq!(
                node.labels().get("node.gardener.cloud/machine-name"),
                Some(&name)
            );
            let conditions = m.status.as_ref().unwrap().conditions.clone().unwrap();
            assert!(
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
                "node conditions copied"
            );
            // The bootstrap token was used and then deleted.
            let token = ingot_controllers::gardener::bootstrap::secret_name(&name);
            assert!(
                Api::<Secret>::namespaced(stack.client.clone(), "kube-system")
                    .get_opt(&token)
                    .await
                    .unwrap()
                    .is_none()
            );
        }
        self.machines = machines;
    }

    /// Steady state: repeated passes over the Running machines read their MachineClass and
    /// its Secret from the watched caches, never with a GET per pass.
    async fn passes_over_running_machines_read_class_and_secret_from_the_caches(&mut self) {
        let stack = &self.stack;
        let machines = &self.machines;
        let passes = |metrics: &BTreeMap<String, f64>| {
            metrics
                .get("ingot_reconciliations_total{controller=\"gardener-machine\"}")
                .copied()
                .unwrap_or_default()
        };
        let before = stack.metrics().await;
        let mut seen = passes(&before);
        for round in 0..2 {
            for m in machines {
                let touch =
                    json!({"metadata": {"annotations": {"e2e/touched": round.to_string()}}});
                stack
                    .machines_api()
                    .patch(
                        &m.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&touch),
                    )
                    .await
                    .unwrap();
            }
            seen = wait_for(
                "the machine controller to reconcile every touched Machine",
                Duration::from_secs(60),
                async || {
                    let now = passes(&stack.metrics().await);
                    (now >= seen + machines.len() as f64).then_some(now)
                },
            )
            .await;
        }
        let after = stack.metrics().await;
        // The MachineClass controller's passes (the touched Machines name the class) are counted.
        assert!(
            after
                .get("ingot_reconciliations_total{controller=\"gardener-machine-class\"}")
                .is_some_and(|n| *n > 0.0),
            "{after:#?}"
        );
        for resource in ["machineclasses", "secrets"] {
            let series =
                format!("ingot_kube_requests_total{{verb=\"get\",resource=\"{resource}\"}}");
            let read = after.get(&series).copied().unwrap_or_default()
                - before.get(&series).copied().unwrap_or_default();
            assert_eq!(
                read,
                0.0,
                "{series}: {} passes over {} Running machines read the API server",
                passes(&after) - passes(&before),
                machines.len()
            );
        }
        let class: Value = serde_json::to_value(
            stack
                .machines_api()
                .get(&machines[0].name_any())
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(class["spec"]["class"]["name"], CLASS);
    }

    /// Scaled to 5 then 1: the Nodes of the deleted Machines are deleted with them.
    async fn scaling_deletes_the_nodes_of_the_deleted_machines(&mut self) {
        let stack = &self.stack;
        let md = self.md;
        let machines = &self.machines;
        stack.scale(md, 5).await;
        stack.wait_running(5, Duration::from_secs(120)).await;
        stack.scale(md, 1).await;
        let one = stack.wait_running(1, Duration::from_secs(120)).await;
        // Nodes of deleted machines are deleted with them.
        for m in machines
            .iter()
            .filter(|m| m.name_any() != one[0].name_any())
        {
            assert!(
                stack.node(&m.name_any()).await.is_none(),
                "node of {} deleted",
                m.name_any()
            );
        }
    }

    /// Deleting the Node (held by the machine controller's finalizer) deletes its Machine,
    /// which MCM replaces.
    async fn a_deleted_node_deletes_its_machine_which_mcm_replaces(&mut self) {
        let stack = &self.stack;
        let one = stack.wait_running(1, Duration::from_secs(120)).await;
        let survivor = one[0].name_any();
        let node = stack.node(&survivor).await.unwrap();
        assert!(
            node.finalizers()
                .contains(&"node.machine.sapcloud.io/machine-controller".to_owned())
        );
        Api::<Node>::all(stack.client.clone())
            .delete(&survivor, &DeleteParams::default())
            .await
            .unwrap();
        wait_for(
            "the machine of the deleted node to be replaced",
            Duration::from_secs(120),
            async || {
                let machines = stack.wait_running_now(1).await?;
                (machines[0].name_any() != survivor).then_some(())
            },
        )
        .await;
        assert!(stack.node(&survivor).await.is_none(), "the node is gone");
    }

    /// A rolling update: a new class (another plan), every Machine replaced, on its plan.
    async fn a_new_class_rolls_every_machine_onto_its_plan(&mut self) {
        let stack = &self.stack;
        let md = self.md;
        stack.scale(md, 2).await;
        let before: BTreeSet<String> = stack
            .wait_running(2, Duration::from_secs(120))
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        let mut v2 = ingot_compat::yaml_documents(&ingot_compat::shared_file(
            "fixtures/mcm-provider-samples/machine-class.yaml",
        ))
        .remove(0);
        v2["metadata"] = json!({"name": "eqx-mc-v2", "namespace": stack.namespace});
        v2["secretRef"]["namespace"] = json!(stack.namespace);
        v2["providerSpec"]["machineType"] = json!("c3.medium.x86");
        v2["providerSpec"]["OS"] = json!("ubuntu_24_04");
        stack.apply(&v2).await;
        stack
            .deployments()
            .patch(md, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": "eqx-mc-v2"}}}}})))
            .await
            .unwrap();
        let after = wait_for(
            "every machine replaced by one of the new class",
            Duration::from_secs(180),
            async || {
                let machines = stack.wait_running_now(2).await?;
                machines
                    .iter()
                    .all(|m| {
                        m.spec.class.as_ref().unwrap().name == "eqx-mc-v2"
                            && !before.contains(&m.name_any())
                    })
                    .then_some(machines)
            },
        )
        .await;
        let plans: BTreeSet<String> = stack
            .sim
            .sim()
            .device_listing(Some(PROJECT))
            .into_iter()
            .filter(|e| {
                after
                    .iter()
                    .any(|m| device_of(m) == e["device"]["id"].as_str().unwrap())
            })
            .map(|e| e["device"]["plan"]["slug"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(plans, BTreeSet::from(["c3.medium.x86".to_owned()]));
    }

    /// Deleting the deployment leaves no Machine and no device; one device was created per
    /// Machine, never two.
    async fn a_deleted_deployment_leaves_no_machine_or_device_and_none_was_made_twice(&mut self) {
        let stack = &self.stack;
        let md = self.md;
        stack.delete_deployment_and_expect_nothing_left(md).await;
        // No duplicate was ever made: one create per Machine.
        let creates = stack.sim.sim().metrics().requests("createDevice");
        assert_eq!(creates, 3 + 2 + 1 + 1 + 2, "devices created");
    }

    /// Each phase change is an Event on its Machine.
    async fn each_phase_change_is_an_event_on_its_machine(&mut self) {
        let stack = &self.stack;
        let machines = &self.machines;
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(stack.client.clone(), &stack.namespace);
        let reasons: BTreeSet<String> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Machine")
                    && e.involved_object.name.as_deref() == Some(&machines[0].name_any())
            })
            .filter_map(|e| e.reason)
            .collect();
        for reason in ["Pending", "Running", "Terminating"] {
            assert!(reasons.contains(reason), "{reason} in {reasons:?}");
        }
    }

    /// Neither the API token nor the user data (with its bootstrap tokens) is ever logged.
    async fn neither_the_api_token_nor_the_user_data_is_logged(&mut self) {
        let stack = &self.stack;
        let log = std::fs::read_to_string(
            std::env::temp_dir().join(format!("ingot-{}.log", stack.namespace)),
        )
        .unwrap();
        assert!(log.contains("device created"), "the log is the operator's");
        assert!(!log.contains(TOKEN), "the API token is not logged");
        assert!(
            !log.contains("gardener-node-agent"),
            "the user data is not logged"
        );
    }
}

/// Unhealthy machines of one MachineDeployment are marked Failed (and so replaced) one at a
/// time: the second only once the first one's replacement runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_machines_of_a_deployment_are_replaced_one_at_a_time() {
    let stack = Stack::start(&["--machine-health-timeout=3s"]).await;
    let md = "eqx-md-budget";
    stack.create_deployment(md, 2).await;
    let originals: BTreeSet<String> = stack
        .wait_running(2, Duration::from_secs(120))
        .await
        .iter()
        .map(|m| {
            assert!(stack.sim.sim().vanish(&device_of(m)));
            m.name_any()
        })
        .collect();
    // Poll numbers at which each original was first seen marked (Failed, Terminating or gone),
    // and at which a replacement was first seen Running. One list per poll: a consistent view.
    let mut marked: BTreeMap<String, usize> = BTreeMap::new();
    let mut replacement_running: Option<usize> = None;
    let mut poll = 0;
    wait_for(
        "both machines to be replaced",
        Duration::from_secs(120),
        async || {
            poll += 1;
            let machines = stack.machines().await;
            for name in &originals {
                let m = machines.iter().find(|m| &m.name_any() == name);
                if m.is_none_or(|m| matches!(phase(m).as_str(), "Failed" | "Terminating")) {
                    marked.entry(name.clone()).or_insert(poll);
                }
            }
            if machines
                .iter()
                .any(|m| !originals.contains(&m.name_any()) && phase(m) == "Running")
            {
                replacement_running.get_or_insert(poll);
            }
            stack
                .wait_running_now(2)
                .await
                .filter(|ms| ms.iter().all(|m| !originals.contains(&m.name_any())))
        },
    )
    .await;
    let second = *marked.values().max().unwrap();
    assert_eq!(marked.len(), 2);
    assert!(
        replacement_running.unwrap() <= second,
        "the second machine was marked Failed (poll {second}) before the first replacement ran (poll {replacement_running:?})"
    );
    // The phase Events: Warnings for Unknown and Failed, Normal otherwise, each reported by
    // component `ingot` as this replica (its --identity).
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(stack.client.clone(), &stack.namespace);
    let phase_events: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Machine"))
        .collect();
    let reasons: BTreeSet<&str> = phase_events
        .iter()
        .filter_map(|e| e.reason.as_deref())
        .collect();
    for reason in ["Running", "Unknown", "Failed"] {
        assert!(reasons.contains(reason), "{reason} in {reasons:?}");
    }
    for event in &phase_events {
        let reason = event.reason.as_deref().unwrap_or_default();
        let warning = matches!(reason, "Unknown" | "Failed" | "CrashLoopBackOff");
        assert_eq!(
            event.type_.as_deref(),
            Some(if warning { "Warning" } else { "Normal" }),
            "{event:?}"
        );
        assert_eq!(
            (
                event.reporting_component.as_deref(),
                event.reporting_instance.clone()
            ),
            (Some("ingot"), Some(format!("ingot-{}", stack.namespace))),
            "{event:?}"
        );
    }
    stack.delete_deployment_and_expect_nothing_left(md).await;
}

/// A deletion the Go machine controller started and left at "Initiate VM deletion" (drain
/// done) is finished by ingot from that step: the drain is not repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumes_a_deletion_the_go_controller_started() {
    let mut stack = Stack::start(&[]).await;
    // Stopped while the Go controller's leftovers are put in place.
    stack.kill_operator();
    let name = format!("go-started-{}", ingot_testenv::random_suffix(5));
    let id = stack.go_provider_server(&name).await;
    // A pod no drain could evict: if the drain ran again, the deletion would stop there.
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), &stack.namespace);
    pods.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "guarded", "labels": {"app": "guarded"}},
        "spec": {"nodeName": name, "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "busybox"}]},
    })).unwrap())
    .await
    .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(stack.client.clone(), &stack.namespace);
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    pdbs.patch_status(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"observedGeneration": 1,
        "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}})),
    )
    .await
    .unwrap();
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": {"node": name}, "finalizers": ["machine.sapcloud.io/machine-controller-manager"]},
        "spec": {"class": {"kind": "MachineClass", "name": CLASS}, "providerID": format!("equinixmetal://ny/{id}")},
    }))
    .unwrap();
    stack
        .machines_api()
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    stack
        .machines_api()
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": {
            "currentStatus": {"phase": "Terminating", "lastUpdateTime": "2026-01-01T00:00:00Z"},
            "lastOperation": {"description": "Drain successful. Initiate VM deletion", "state": "Processing", "type": "Delete",
                              "lastUpdateTime": "2026-01-01T00:00:00Z"},
        }})))
        .await
        .unwrap();
    stack
        .machines_api()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();

    stack.start_operator(None);
    wait_for(
        "the machine, its device and its node to be gone",
        Duration::from_secs(60),
        async || {
            let gone = stack.machines_api().get_opt(&name).await.unwrap().is_none()
                && !stack.devices().contains_key(&id)
                && stack.node(&name).await.is_none();
            gone.then_some(())
        },
    )
    .await;
    assert!(
        pods.get_opt("guarded").await.unwrap().is_some(),
        "the drain was not repeated"
    );
}

impl Stack {
    /// A server as the Go provider creates it (its request, no lookup tag of ingot's) and the
    /// Node it joined as; returns the server's id.
    async fn go_provider_server(&self, name: &str) -> String {
        let device: Value = reqwest::Client::new()
            .post(format!("{}/projects/{PROJECT}/devices", self.sim.base_url()))
            .header("X-Auth-Token", TOKEN)
            .json(&json!({"metro": "ny", "plan": "c3.small.x86", "operating_system": "ubuntu_22_04", "hostname": name,
                          "tags": ["kubernetes.io/cluster/YOUR_CLUSTER_NAME: 1", "kubernetes.io/role/YOUR_ROLE_NAME: 1"]}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        Api::<Node>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await
            .unwrap();
        device["id"].as_str().unwrap().to_owned()
    }

    /// The `wait_running` condition, once.
    async fn wait_running_now(&self, count: usize) -> Option<Vec<Machine>> {
        let machines = self.machines().await;
        let ok = machines.len() == count
            && machines
                .iter()
                .all(|m| phase(m) == "Running" && m.metadata.deletion_timestamp.is_none())
            && self.devices().keys().cloned().collect::<BTreeSet<_>>()
                == machines.iter().map(device_of).collect();
        ok.then_some(machines)
    }
}

// Faults under one MachineDeployment, one behaviour per test, over one stack (`Faults`): a device
// vanishes behind ingot's back, orphan devices appear, capacity runs out and comes back, in this
// order (`ingot_testenv::scenario!`).
ingot_testenv::scenario!(mod faults: Faults {
    a_machine_whose_device_vanished_fails_and_is_preserved_until_its_expiry,
    a_preserved_machine_is_replaced_after_its_expiry,
    orphan_devices_are_deleted_and_a_machine_s_own_is_kept,
    a_machine_refused_for_capacity_is_resource_exhausted_in_crash_loop_back_off,
    mcm_lists_a_machine_refused_for_capacity_among_the_failed_ones,
    once_capacity_is_back_the_refused_machine_runs,
});

/// One stack (short health, orphan, retry and preserve periods) and its MachineDeployment
/// `eqx-md-faults`, which runs one Machine from the start.
struct Faults {
    stack: Stack,
    md: &'static str,
    /// The deployment's first Machine.
    first: Machine,
    /// The Machine that replaced `first`.
    replacement: Option<Machine>,
    /// The Machine refused for capacity.
    starved: Option<Machine>,
}

impl Faults {
    async fn start() -> Self {
        let stack = Stack::start(&[
            "--machine-health-timeout=5s",
            "--machine-safety-orphan-vms-period=2s",
            "--resource-exhausted-retry=3s",
            "--machine-preserve-timeout=6s",
        ])
        .await;
        let md = "eqx-md-faults";
        stack.create_deployment(md, 1).await;
        let first = stack
            .wait_running(1, Duration::from_secs(120))
            .await
            .remove(0);
        Faults {
            stack,
            md,
            first,
            replacement: None,
            starved: None,
        }
    }

    async fn finish(self) {}

    /// The device is deleted behind ingot's back: the Node goes Unknown, the Machine Unknown,
    /// then Failed after the health timeout. It asked to be preserved when failed, so it is
    /// kept (MCM leaves it) until its preserve expiry.
    async fn a_machine_whose_device_vanished_fails_and_is_preserved_until_its_expiry(&mut self) {
        let stack = &self.stack;
        let first = &self.first;
        stack
            .machines_api()
            .patch(
                &first.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": {"node.machine.sapcloud.io/preserve": "when-failed"}}})),
            )
            .await
            .unwrap();
        assert!(stack.sim.sim().vanish(&device_of(first)));
        let preserved = wait_for(
            "the failed machine to be preserved",
            Duration::from_secs(60),
            async || {
                let m = stack
                    .machines_api()
                    .get_opt(&first.name_any())
                    .await
                    .unwrap()?;
                let current =
                    serde_json::to_value(m.status.as_ref()?.current_status.as_ref()?).unwrap();
                (current["phase"] == "Failed" && current["preserveExpiryTime"].is_string())
                    .then_some(m)
            },
        )
        .await;
        assert!(
            last_operation(&preserved)["description"]
                .as_str()
                .unwrap()
                .contains("health checks failing since last 5s minutes")
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let kept = stack.machines_api().get(&first.name_any()).await.unwrap();
        assert!(
            kept.metadata.deletion_timestamp.is_none(),
            "a preserved machine is not deleted before its expiry"
        );
    }

    /// After its preserve expiry, MCM replaces the failed Machine.
    async fn a_preserved_machine_is_replaced_after_its_expiry(&mut self) {
        let stack = &self.stack;
        let first = &self.first;
        let replacement = wait_for(
            "the machine to be replaced",
            Duration::from_secs(120),
            async || {
                let machines = stack.wait_running_now(1).await?;
                (machines[0].name_any() != first.name_any()).then(|| machines[0].clone())
            },
        )
        .await;
        self.replacement = Some(replacement);
    }

    /// Orphans: a device of the class's tags that no Machine owns, and a second device with the
    /// hostname of a Running Machine. Both are deleted; the Machine's own device is kept.
    async fn orphan_devices_are_deleted_and_a_machine_s_own_is_kept(&mut self) {
        let stack = &self.stack;
        let replacement = self.replacement.as_ref().expect("the replacement ran");
        let tags = json!([
            "kubernetes.io/cluster/YOUR_CLUSTER_NAME: 1",
            "kubernetes.io/role/YOUR_ROLE_NAME: 1"
        ]);
        let mut orphans = Vec::new();
        for hostname in ["orphan-device".to_owned(), replacement.name_any()] {
            let created: Value = reqwest::Client::new()
                .post(format!("{}/projects/{PROJECT}/devices", stack.sim.base_url()))
                .header("X-Auth-Token", TOKEN)
                .json(&json!({"metro": "ny", "plan": "c3.small.x86", "operating_system": "ubuntu_22_04", "hostname": hostname, "tags": tags}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            orphans.push(created["id"].as_str().unwrap().to_owned());
        }
        wait_for(
            "the orphan devices to be collected",
            Duration::from_secs(60),
            async || {
                let devices = stack.devices();
                (orphans.iter().all(|o| !devices.contains_key(o))
                    && devices.contains_key(&device_of(replacement)))
                .then_some(())
            },
        )
        .await;
    }

    /// No capacity: the new Machine says ResourceExhausted and stays in CrashLoopBackOff.
    async fn a_machine_refused_for_capacity_is_resource_exhausted_in_crash_loop_back_off(
        &mut self,
    ) {
        let stack = &self.stack;
        let md = self.md;
        stack.sim.sim().update_faults(|f| {
            f.capacity_exhausted.push(PlanMetro {
                plan: "c3.small.x86".into(),
                metro: "ny".into(),
            })
        });
        stack.scale(md, 2).await;
        let starved = wait_for(
            "a machine refused for capacity",
            Duration::from_secs(60),
            async || {
                stack
                    .machines()
                    .await
                    .into_iter()
                    .find(|m| last_operation(m)["errorCode"] == "ResourceExhausted")
            },
        )
        .await;
        let op = last_operation(&starved);
        assert_eq!(phase(&starved), "CrashLoopBackOff");
        assert_eq!(
            (op["state"].as_str(), op["type"].as_str()),
            (Some("Failed"), Some("Create"))
        );
        assert!(
            op["description"].as_str().unwrap().starts_with("Cloud provider message - machine codes error: code = [ResourceExhausted] message = [Could not create machine: "),
            "{op}"
        );
        self.starved = Some(starved);
    }

    /// MCM lists the Machine refused for capacity among the failed machines.
    async fn mcm_lists_a_machine_refused_for_capacity_among_the_failed_ones(&mut self) {
        let stack = &self.stack;
        let starved = self.starved.as_ref().expect("a machine was refused");
        let sets: Api<MachineSet> = Api::namespaced(stack.client.clone(), &stack.namespace);
        wait_for(
            "MCM to list the machine among the failed ones",
            Duration::from_secs(60),
            async || {
                let list = sets.list(&ListParams::default()).await.unwrap();
                list.items
                    .iter()
                    .any(|s| {
                        s.status.as_ref().is_some_and(|st| {
                            st["failedMachines"]
                                .as_array()
                                .is_some_and(|f| f.iter().any(|m| m["name"] == starved.name_any()))
                        })
                    })
                    .then_some(())
            },
        )
        .await;
    }

    /// Once capacity is back the refused Machine runs; the deployment then deletes cleanly.
    async fn once_capacity_is_back_the_refused_machine_runs(&mut self) {
        let stack = &self.stack;
        let md = self.md;
        stack
            .sim
            .sim()
            .update_faults(|f| f.capacity_exhausted.clear());
        stack.wait_running(2, Duration::from_secs(90)).await;
        stack.delete_deployment_and_expect_nothing_left(md).await;
    }
}

/// The drain evicts through the eviction API. An eviction refused by a budget is tried
/// `--machine-max-evict-retries` times, 20 s apart, then the pod is deleted; a budget that
/// allows no disruption with all its pods healthy ("misconfigured") is not worked around: that
/// pod stays until the drain timeout forces the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_honours_pod_disruption_budgets_and_forces_after_the_timeout() {
    // One eviction per refused pod (30 s / 20 s would allow one as well).
    let stack = Stack::start(&[
        "--machine-drain-timeout=30s",
        "--machine-max-evict-retries=1",
    ])
    .await;
    let md = "eqx-md-drain";
    stack.create_deployment(md, 1).await;
    let machine = stack
        .wait_running(1, Duration::from_secs(120))
        .await
        .remove(0);
    let node = machine.name_any();
    let pods: Api<Pod> = Api::namespaced(stack.target.clone(), &stack.namespace);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(stack.target.clone(), &stack.namespace);
    // Two Ready pods on the node, each guarded by a budget that allows no disruption, with
    // the status the disruption controller would compute (this control plane runs none).
    // "guarded": its only pod is healthy and still nothing may go: misconfigured.
    // "retried": one of its two pods is down, so none may go for now: a refusal worth retrying.
    for (name, min_available, status) in [
        (
            "guarded",
            1,
            json!({"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}),
        ),
        (
            "retried",
            2,
            json!({"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 1, "desiredHealthy": 2, "expectedPods": 2}),
        ),
    ] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})))
            .await
            .unwrap();
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}},
        }))
        .unwrap();
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        pdbs.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap();
    }
    // A pod no budget guards: evicted.
    let free: Pod = serde_json::from_value(json!({
        "metadata": {"name": "free"},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &free).await.unwrap();

    stack.scale(md, 0).await;
    let description = wait_for(
        "the drain to be refused by both budgets",
        Duration::from_secs(60),
        async || {
            let m = stack.machines_api().get_opt(&node).await.unwrap()?;
            let op = last_operation(&m);
            let d = op["description"].as_str().unwrap_or("").to_owned();
            (op["state"] == "Failed"
                && d.contains("Will retry in next sync. Initiate node drain")
                && d.contains("retried: eviction refused by a PodDisruptionBudget (1 of 1 tries)")
                && d.contains(&format!(
                    "pod disruption budget {}/guarded is misconfigured",
                    stack.namespace
                )))
            .then_some(d)
        },
    )
    .await;
    let refused_at = Instant::now();
    let cordoned = stack.node(&node).await.unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true), "cordoned");
    assert!(
        stack.devices().contains_key(&device_of(&machine)),
        "the device stays while the drain is refused"
    );
    assert!(
        pods.get_opt("retried").await.unwrap().is_some(),
        "not deleted before its retry: {description}"
    );
    wait_for(
        "the free pod to be evicted",
        Duration::from_secs(30),
        async || pods.get_opt("free").await.unwrap().is_none().then_some(()),
    )
    .await;
    // Its one eviction used up, 20 s later the refused pod is deleted; the misconfigured
    // budget's pod stays.
    wait_for(
        "the refused pod to be deleted after its retries",
        Duration::from_secs(40),
        async || {
            pods.get_opt("retried")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        refused_at.elapsed() >= Duration::from_secs(15),
        "deleted {:?} after the refusal, not after the retry interval",
        refused_at.elapsed()
    );
    assert!(
        pods.get_opt("guarded").await.unwrap().is_some(),
        "the pod of the misconfigured budget is not deleted by the retries"
    );
    // After the drain timeout the drain is forced: the pod is deleted and the machine goes.
    stack.delete_deployment_and_expect_nothing_left(md).await;
    assert!(pods.get_opt("guarded").await.unwrap().is_none());
    assert!(stack.node(&node).await.is_none());
    // /metrics counted the refused passes and the forced end, and the Metal calls.
    let metrics = stack.metrics().await;
    let value = |series: &str| metrics.get(series).copied().unwrap_or_default();
    assert!(
        value(r#"ingot_drains_blocked_total{controller="gardener"}"#) >= 1.0,
        "{metrics:#?}"
    );
    assert_eq!(
        value(r#"ingot_drains_total{controller="gardener",outcome="forced"}"#),
        1.0,
        "{metrics:#?}"
    );
    assert!(
        value(r#"ingot_metal_requests_total{operation="createDevice",outcome="ok"}"#) >= 1.0,
        "{metrics:#?}"
    );
}

/// With no eviction retries (`--machine-max-evict-retries=0`), every pod is still evicted
/// first: one no budget guards leaves gracefully (its grace period kept), and one its budget
/// refuses is deleted only after the retry interval, never in the first pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_evict_retries_pods_are_still_evicted_first() {
    let stack = Stack::start(&[
        "--machine-drain-timeout=10m",
        "--machine-max-evict-retries=0",
    ])
    .await;
    let md = "eqx-md-noretry";
    stack.create_deployment(md, 1).await;
    let machine = stack
        .wait_running(1, Duration::from_secs(120))
        .await
        .remove(0);
    let node = machine.name_any();
    let pods: Api<Pod> = Api::namespaced(stack.target.clone(), &stack.namespace);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(stack.target.clone(), &stack.namespace);
    // "refused": one of its budget's two pods is down, so none may go for now.
    let refused: Pod = serde_json::from_value(json!({
        "metadata": {"name": "refused", "labels": {"app": "refused"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &refused).await.unwrap();
    pods.patch_status("refused", &PatchParams::default(), &Patch::Merge(&json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})))
        .await
        .unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "refused"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "refused"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    pdbs.patch_status(
        "refused",
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"status": {"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 1, "desiredHealthy": 2, "expectedPods": 2}}),
        ),
    )
    .await
    .unwrap();
    // "free": no budget, a 30 s grace period.
    let free: Pod = serde_json::from_value(json!({
        "metadata": {"name": "free"},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &free).await.unwrap();

    stack.scale(md, 0).await;
    wait_for(
        "the drain to be refused once",
        Duration::from_secs(60),
        async || {
            let m = stack.machines_api().get_opt(&node).await.unwrap()?;
            let op = last_operation(&m);
            let d = op["description"].as_str().unwrap_or("").to_owned();
            (op["state"] == "Failed"
                && d.contains("refused: eviction refused by a PodDisruptionBudget (1 of 0 tries)"))
            .then_some(())
        },
    )
    .await;
    let free = pods
        .get_opt("free")
        .await
        .unwrap()
        .expect("evicted, still terminating");
    assert!(free.metadata.deletion_timestamp.is_some(), "evicted");
    assert_eq!(
        free.metadata.deletion_grace_period_seconds,
        Some(30),
        "evicted with its grace period, not deleted with none"
    );
    // 20 s after the refusal the refused pod is deleted, and the machine goes.
    wait_for(
        "the refused pod to be deleted after the retry interval",
        Duration::from_secs(40),
        async || {
            pods.get_opt("refused")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let _ = pods
        .delete("free", &DeleteParams::default().grace_period(0))
        .await;
    stack.delete_deployment_and_expect_nothing_left(md).await;
}

// The binary's longest test; libtest starts tests in name order, and this name sorts first so
// that it runs beside the others instead of after most of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_chosen_and_random_moments_leaves_no_orphan_or_duplicate() {
    // No orphan collection: a duplicate device must not be hidden by the collector.
    let mut stack = Stack::start(&["--machine-safety-orphan-vms-period=1h"]).await;
    let md = "eqx-md-crash";

    // Killed right after the create, before the provider id is written: the restart adopts it.
    stack.kill_operator();
    stack.start_operator(Some("gardener-after-create"));
    stack.create_deployment(md, 1).await;
    stack.wait_operator_crashed(Duration::from_secs(60)).await;
    assert_eq!(stack.devices().len(), 1);
    stack.start_operator(None);
    stack.wait_running(1, Duration::from_secs(120)).await;

    // Killed during the drain, then during the device delete: the restart finishes the job.
    for point in ["gardener-during-drain", "gardener-during-delete"] {
        stack.scale(md, 2).await;
        stack.wait_running(2, Duration::from_secs(120)).await;
        stack.kill_operator();
        stack.start_operator(Some(point));
        stack.scale(md, 1).await;
        stack.wait_operator_crashed(Duration::from_secs(60)).await;
        stack.start_operator(None);
        stack.wait_running(1, Duration::from_secs(120)).await;
    }

    // Killed at (seeded, so repeatable) random moments of a rolling update of 3 machines.
    stack.scale(md, 3).await;
    stack.wait_running(3, Duration::from_secs(120)).await;
    let mut v2 = ingot_compat::yaml_documents(&ingot_compat::shared_file(
        "fixtures/mcm-provider-samples/machine-class.yaml",
    ))
    .remove(0);
    v2["metadata"] = json!({"name": "eqx-mc-v2", "namespace": stack.namespace});
    v2["secretRef"]["namespace"] = json!(stack.namespace);
    v2["providerSpec"]["machineType"] = json!("c3.medium.x86");
    v2["providerSpec"]["OS"] = json!("ubuntu_24_04");
    stack.apply(&v2).await;
    stack
        .deployments()
        .patch(md, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": "eqx-mc-v2"}}}}})))
        .await
        .unwrap();
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..2500))).await;
        stack.kill_operator();
        stack.start_operator(None);
    }
    let done = wait_for(
        "the rollout to finish",
        Duration::from_secs(180),
        async || {
            let machines = stack.wait_running_now(3).await?;
            machines
                .iter()
                .all(|m| m.spec.class.as_ref().unwrap().name == "eqx-mc-v2")
                .then_some(machines)
        },
    )
    .await;
    // Every device belongs to exactly one Machine; no device was created twice for one.
    let devices = stack.devices();
    let hostnames: BTreeSet<&String> = devices.values().collect();
    assert_eq!(
        hostnames.len(),
        devices.len(),
        "one device per hostname: {devices:?}"
    );
    assert_eq!(devices.len(), done.len());
    stack.delete_deployment_and_expect_nothing_left(md).await;
}

// As upstream's machine controller runs in a Gardener seed: the Machines, MachineClasses and
// Secrets in the control cluster, the Nodes (with their bootstrap tokens and the pods drained
// from them) in a second API server, ingot given both with `--control-kubeconfig` and
// `--target-kubeconfig`. A stray Node of the target cluster, which no Machine backs, is marked
// `not-managed-by-mcm` once older than the creation timeout (the flag; the machines have their
// own), and unmarked when a Machine names it. One behaviour per test, over one stack (`Split`),
// in this order (`ingot_testenv::scenario!`).
ingot_testenv::scenario!(mod split_clusters: Split {
    machines_run_with_their_nodes_in_the_target_cluster_only,
    the_lease_and_the_machines_events_stay_in_the_control_cluster,
    running_machines_read_their_nodes_from_the_watch_cache,
    a_stray_node_is_marked_not_managed_and_loses_the_node_finalizer,
    a_machine_naming_the_stray_node_removes_the_mark,
    scaled_to_zero_the_target_s_pods_are_drained_and_its_nodes_deleted,
});

const NOT_MANAGED: &str = "node.machine.sapcloud.io/not-managed-by-mcm";
const NODE_FINALIZER: &str = "node.machine.sapcloud.io/machine-controller";

/// A stack whose Nodes join a second API server, a stray Node there (with the node finalizer,
/// no Machine), and the MachineDeployment `eqx-md-split`.
struct Split {
    stack: Stack,
    target_nodes: Api<Node>,
    stray: String,
    md: &'static str,
    /// The deployment's two Running Machines.
    machines: Vec<Machine>,
}

impl Split {
    async fn start() -> Self {
        let stack = Stack::start_with_target_cluster(&[
            "--machine-creation-timeout=3s",
            "--machine-safety-orphan-vms-period=1s",
        ])
        .await;
        let target_nodes: Api<Node> = Api::all(stack.target.clone());
        let stray = format!("stray-{}", ingot_testenv::random_suffix(5));
        target_nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": stray, "finalizers": [NODE_FINALIZER]}}),
                )
                .unwrap(),
            )
            .await
            .unwrap();
        let md = "eqx-md-split";
        stack
            .create_deployment_with(md, 2, json!({"creationTimeout": "2m"}))
            .await;
        Split {
            stack,
            target_nodes,
            stray,
            md,
            machines: Vec::new(),
        }
    }

    async fn finish(self) {
        self.target_nodes
            .delete(&self.stray, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// Two Running Machines, each with its Node in the target cluster (labelled, with the node
    /// finalizer, managed), none in the control cluster, the target Node's conditions copied.
    async fn machines_run_with_their_nodes_in_the_target_cluster_only(&mut self) {
        let stack = &self.stack;
        let machines = stack.wait_running(2, Duration::from_secs(120)).await;
        let control_nodes: Api<Node> = Api::all(stack.client.clone());
        for m in &machines {
            let name = m.name_any();
            let node = stack.node(&name).await.expect("the Node joined the target");
            assert_eq!(
                node.labels().get("node.gardener.cloud/machine-name"),
                Some(&name)
            );
            assert!(node.finalizers().contains(&NODE_FINALIZER.to_owned()));
            assert!(
                !node.annotations().contains_key(NOT_MANAGED),
                "a backed node is managed"
            );
            assert!(
                control_nodes.get_opt(&name).await.unwrap().is_none(),
                "no Node in the control cluster"
            );
            let conditions = m.status.as_ref().unwrap().conditions.clone().unwrap();
            assert!(
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
                "the target Node's conditions are copied"
            );
        }
        self.machines = machines;
    }

    /// ingot's Lease stays on its own cluster; the Events are the Machines' cluster's.
    async fn the_lease_and_the_machines_events_stay_in_the_control_cluster(&mut self) {
        let stack = &self.stack;
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(stack.client.clone(), &stack.namespace);
        assert!(leases.get_opt("ingot").await.unwrap().is_some());
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(stack.client.clone(), &stack.namespace);
        assert!(
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.involved_object.kind.as_deref() == Some("Machine")
                        && e.reason.as_deref() == Some("Running")
                }),
            "Running events on the Machines"
        );
    }

    /// Running machines read their Nodes from the Node watch's cache: the heartbeats (every
    /// 2 s) trigger their health checks, and none of them GETs a Node. Counted by ingot's own
    /// clients (the target API server also serves the booting servers and MCM).
    async fn running_machines_read_their_nodes_from_the_watch_cache(&mut self) {
        let stack = &self.stack;
        let node_gets = async || {
            stack
                .metrics()
                .await
                .get("ingot_kube_requests_total{verb=\"get\",resource=\"nodes\"}")
                .copied()
                .unwrap_or(0.0)
        };
        let gets = node_gets().await;
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            node_gets().await,
            gets,
            "no GET of a Node while the machines run"
        );
    }

    /// The stray Node is marked and loses the node finalizer, which nothing would remove.
    async fn a_stray_node_is_marked_not_managed_and_loses_the_node_finalizer(&mut self) {
        let (target_nodes, stray) = (&self.target_nodes, &self.stray);
        wait_for(
            "the stray node to be marked not-managed-by-mcm",
            Duration::from_secs(30),
            async || {
                let node = target_nodes.get(stray).await.unwrap();
                (node.annotations().get(NOT_MANAGED).map(String::as_str) == Some("1")
                    && node.finalizers().is_empty())
                .then_some(())
            },
        )
        .await;
    }

    /// A Machine (of another provider's class) naming the stray Node: the mark goes.
    async fn a_machine_naming_the_stray_node_removes_the_mark(&mut self) {
        let stack = &self.stack;
        let (target_nodes, stray) = (&self.target_nodes, &self.stray);
        let claim: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": format!("claims-{stray}"), "labels": {"node": stray}},
            "spec": {"class": {"kind": "MachineClass", "name": "another-provider"}},
        }))
        .unwrap();
        stack
            .machines_api()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap();
        wait_for(
            "the mark to go once a machine names the node",
            Duration::from_secs(30),
            async || {
                let node = target_nodes.get(stray).await.unwrap();
                (!node.annotations().contains_key(NOT_MANAGED)).then_some(())
            },
        )
        .await;
        stack
            .machines_api()
            .delete(&claim.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }

    /// Scaled to zero: a pod in the target is evicted by the drain, the Nodes are deleted
    /// there, every device goes.
    async fn scaled_to_zero_the_target_s_pods_are_drained_and_its_nodes_deleted(&mut self) {
        let stack = &self.stack;
        let (md, machines) = (self.md, &self.machines);
        let pods: Api<Pod> = Api::namespaced(stack.target.clone(), "default");
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "workload"},
                "spec": {"nodeName": machines[0].name_any(), "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "busybox"}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
        stack.delete_deployment_and_expect_nothing_left(md).await;
        assert!(pods.get_opt("workload").await.unwrap().is_none(), "drained");
        for m in machines {
            assert!(stack.node(&m.name_any()).await.is_none(), "node deleted");
        }
    }
}

/// docs/migrate-from-mcm-provider.md, step by step: a Running Machine as the Go provider leaves
/// it (its providerID, MCM's finalizer, a server without any mark of ingot's, a joined Node), the
/// Go provider stopped, ingot installed from deploy/manifests/gardener.yaml and run as that
/// ServiceAccount. The Machine is adopted as it is (no server created or touched) and is still
/// deletable through ingot, with its server and its Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_the_go_provider_made_is_adopted_after_installing_from_the_manifests() {
    let mut stack = Stack::start_from_manifests(&[]).await;
    stack.kill_operator();
    let name = format!("go-made-{}", ingot_testenv::random_suffix(5));
    let id = stack.go_provider_server(&name).await;
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    nodes
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "joined",
             "lastHeartbeatTime": now, "lastTransitionTime": now}]}})),
        )
        .await
        .unwrap();
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": {"node": name}, "finalizers": ["machine.sapcloud.io/machine-controller-manager"]},
        "spec": {"class": {"kind": "MachineClass", "name": CLASS}, "providerID": format!("equinixmetal://ny/{id}")},
    }))
    .unwrap();
    stack
        .machines_api()
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    stack
        .machines_api()
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": {
            "node": name,
            "currentStatus": {"phase": "Running", "timeoutActive": false, "lastUpdateTime": now},
            "lastOperation": {"description": format!("Machine {name} successfully joined the cluster"),
                              "state": "Successful", "type": "Create", "lastUpdateTime": now},
        }})))
        .await
        .unwrap();
    let before = stack.sim.sim().metrics();

    stack.start_operator(None);
    // Adopted: the machine controller's finalizer on the Node, the Machine Running on the same
    // server.
    let adopted = wait_for(
        "the Node to be adopted",
        Duration::from_secs(60),
        async || {
            let node = stack.node(&name).await?;
            node.finalizers()
                .contains(&ingot_controllers::gardener::NODE_FINALIZER.to_owned())
                .then_some(node)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let machine = stack.machines_api().get(&name).await.unwrap();
    assert_eq!(phase(&machine), "Running", "{adopted:?}");
    assert_eq!(device_of(&machine), id);
    let after = stack.sim.sim().metrics();
    for op in [
        "createDevice",
        "updateDevice",
        "deleteDevice",
        "performAction",
    ] {
        assert_eq!(
            after.requests(op),
            before.requests(op),
            "{op} was sent to the adopted server"
        );
    }

    stack
        .machines_api()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the machine, its device and its node to be gone",
        Duration::from_secs(60),
        async || {
            let gone = stack.machines_api().get_opt(&name).await.unwrap().is_none()
                && !stack.devices().contains_key(&id)
                && stack.node(&name).await.is_none();
            gone.then_some(())
        },
    )
    .await;
}

/// The provider README's standalone Machines (`kubernetes/machines/`), each applied with its
/// class from machine-class.yaml (filled in as the README says: namespace, project, token; the
/// sample's retired plan and OS swapped for current ones). The reservation class's
/// `reservationIDs` exist in the project, and with `reservedDevicesOnly` its Machine gets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_s_standalone_machine_samples_run_and_are_deleted() {
    let classes = ingot_compat::yaml_documents(&ingot_compat::shared_file(
        "fixtures/mcm-provider-samples/machine-class.yaml",
    ));
    let reserved_class = classes
        .iter()
        .find(|c| c["metadata"]["name"] == "eqx-mc-ny-reserved")
        .unwrap();
    assert_eq!(reserved_class["providerSpec"]["reservedDevicesOnly"], true);
    let reservation_ids: Vec<String> = reserved_class["providerSpec"]["reservationIDs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    let reservations = reservation_ids
        .iter()
        .map(|id| HardwareReservationConfig {
            id: id.clone(),
            project: PROJECT.into(),
            plan: "c3.small.x86".into(),
            metro: "ny".into(),
            provisionable: true,
        })
        .collect();
    let stack = Stack::start_with_reservations(reservations).await;
    // The classes the samples name (`eqx-mc` is applied with every stack).
    for mut class in classes
        .into_iter()
        .filter(|c| c["metadata"]["name"] != CLASS)
    {
        class["metadata"]["namespace"] = json!(stack.namespace);
        class["secretRef"]["namespace"] = json!(stack.namespace);
        class["providerSpec"]["machineType"] = json!("c3.small.x86");
        class["providerSpec"]["OS"] = json!("ubuntu_22_04");
        stack.apply(&class).await;
    }
    let samples = ingot_compat::fixture_documents("fixtures/mcm-provider-samples/machines");
    assert_eq!(samples.len(), 3, "{samples:?}");
    let mut names = BTreeSet::new();
    for (file, mut machine) in samples {
        assert_eq!(machine["kind"], "Machine", "{file}");
        machine["metadata"]["namespace"] = json!(stack.namespace);
        names.insert(machine["metadata"]["name"].as_str().unwrap().to_owned());
        stack.apply(&machine).await;
    }
    let machines = stack.wait_running(3, Duration::from_secs(180)).await;
    for m in &machines {
        let name = m.name_any();
        assert!(names.contains(&name), "{name}");
        let node = stack.node(&name).await.expect("the machine's Node joined");
        assert_eq!(
            node.labels().get("node.gardener.cloud/machine-name"),
            Some(&name)
        );
        let device = device_of(m);
        let reservation = reservation_ids
            .iter()
            .find(|id| stack.sim.sim().reservation_device(id).unwrap() == Some(device.clone()));
        assert_eq!(
            reservation.is_some(),
            name == "eqx-test-machine-reserved",
            "{name}: only the reservation class's Machine is on a reservation"
        );
    }

    for name in &names {
        stack
            .machines_api()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_for(
        "every sample Machine, its Node and its device to be gone",
        Duration::from_secs(120),
        async || {
            let machines = stack.machines().await;
            let mut nodes = Vec::new();
            for name in &names {
                if stack.node(name).await.is_some() {
                    nodes.push(name.clone());
                }
            }
            // The reserved server is given back once its device is gone.
            let reserved = reservation_ids
                .iter()
                .any(|id| stack.sim.sim().reservation_device(id).unwrap().is_some());
            (machines.is_empty() && nodes.is_empty() && stack.devices().is_empty() && !reserved)
                .then_some(())
        },
    )
    .await;
}
