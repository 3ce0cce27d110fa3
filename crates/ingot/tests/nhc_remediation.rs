//! ingot as medik8s NodeHealthCheck's fence agent, end to end: `ingot run --controllers fencing
//! --fencing-remediations-only` as its own process, with the token of the ServiceAccount
//! deploy/manifests/fencing.yaml installs and the flags the chart renders from its `fencing`
//! values (`remediationsOnly: true`), against a control plane of its own. The test plays
//! NodeHealthCheck exactly as its controller does (node-healthcheck-operator,
//! controllers/resources/manager.go): it reads the BMCRemediationTemplate, creates a
//! BMCRemediation of the template's kind without `Template`, in the template's namespace, named
//! after the Node, its `spec` the template's `spec.template.spec`, labelled
//! `app.kubernetes.io/part-of: node-healthcheck-controller` and owned by the health check
//! (here the Namespace stands in for the NodeHealthCheck object, which needs NHC's CRD), reads
//! its `Succeeded` condition, and deletes it once the Node is healthy.
//!
//! The BMCs are real peers: systems of sushy-tools (Redfish, fake driver), every power state
//! read from sushy itself. Scenarios:
//! 1. a Node NotReady with a pod: powered off (sushy reads Off), only then tainted,
//!    `Succeeded=True`; left off while its pod is there; the pod gone, powered on once; Ready
//!    again, NHC deletes the remediation: the taint and ingot's record go, the object goes;
//! 2. another, its pod staying: fenced, then its remediation deleted while it is off (a person
//!    giving up): powered on once on release, then untainted;
//! 3. refusals: a Node in maintenance, a Node whose BMC does not answer, and a remediation from
//!    a namespace other than its Inventory's: `Succeeded=False` with the reason, no Job, no
//!    taint, the servers still on; a Node NotReady past `--fencing-after-seconds` without a
//!    remediation is never fenced (`--fencing-remediations-only`);
//! 4. the budget counts the Nodes NHC remediates: remediations for two Ready Nodes, beyond
//!    `--fencing-max-unhealthy`, are held (`FencingHeldPartitionSuspected`), nothing powered off;
//! 5. NHC's timeout annotation on a held remediation: `Processing=False`
//!    (`RemediationStoppedByNHC`), `Succeeded` keeping its reason;
//! 6. a fenced Node deleted while its remediation holds ingot's finalizer: the remediation says
//!    `NodeNotFound`; deleted, it is let go at once, without a power-on, with a Normal Event.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ingot_api::remediation::BMCRemediation;
use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch};
use kube::api::{PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rufio_support::{
    Operator, SushySystem, closed_port, create_secret, machine_sample, peers, start_sushy_tls_with,
};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(120);
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
const JOB_NODE_LABEL: &str = "fencing.ingot.dev/node";
const FINALIZER: &str = "fencing.ingot.dev/bmc-remediation";
const MAINTAIN_STATUS: &str = "harvesterhci.io/maintain-status";
const USER: &str = "admin";
const PASSWORD: &str = "t0p-Secret";
const AFTER_SECONDS: u64 = 2;

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == OUT_OF_SERVICE && t.effect == "NoExecute")
        })
}

/// A condition of a BMCRemediation: (status, reason).
fn condition(r: &BMCRemediation, type_: &str) -> Option<(String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// What NodeHealthCheck creates from a template for a Node (manager.go's
/// generateRemediationCR), from the template as the API server returns it.
fn remediation_from_template(template: &DynamicObject, node: &str, owner: &Namespace) -> Value {
    let kind = template
        .types
        .as_ref()
        .unwrap()
        .kind
        .strip_suffix("Template")
        .unwrap()
        .to_owned();
    json!({
        "apiVersion": template.types.as_ref().unwrap().api_version,
        "kind": kind,
        "metadata": {
            "name": node,
            "namespace": template.namespace(),
            "labels": {"app.kubernetes.io/part-of": "node-healthcheck-controller"},
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Namespace", "name": owner.name_any(),
                "uid": owner.uid().unwrap(), "controller": false,
            }],
        },
        "spec": template.data["spec"]["template"]["spec"],
    })
}

struct World {
    client: Client,
    nodes: Api<Node>,
    jobs: Api<Job>,
    sushy: peers::Sushy,
    /// Every Job name seen, by Node (Jobs go once the Node is released).
    seen: std::sync::Arc<std::sync::Mutex<BTreeSet<(String, String)>>>,
}

impl World {
    async fn node(&self, name: &str) -> Node {
        self.nodes.get(name).await.unwrap()
    }

    async fn set_ready(&self, node: &str, ready: bool) {
        let t = now();
        self.nodes
            .patch_status(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{
                    "type": "Ready", "status": if ready { "True" } else { "Unknown" },
                    "reason": "Test", "lastHeartbeatTime": t, "lastTransitionTime": t}]}})),
            )
            .await
            .unwrap();
    }

    async fn power(&self, system: &str) -> Option<String> {
        self.sushy
            .system_named(USER, PASSWORD, system)
            .await
            .and_then(|s| s["PowerState"].as_str().map(str::to_owned))
    }

    async fn jobs_of(&self, node: &str) -> Vec<Job> {
        self.jobs
            .list(&ListParams::default().labels(&format!("{JOB_NODE_LABEL}={node}")))
            .await
            .unwrap()
            .items
    }

    /// The names of the power-on Jobs ever seen for the Node.
    fn power_ons_seen(&self, node: &str) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, job)| n == node && job.contains("-fence-on-"))
            .map(|(_, job)| job.clone())
            .collect()
    }

    /// The reasons of the Events about the BMCRemediation.
    async fn event_reasons(&self, r: &BMCRemediation) -> BTreeSet<String> {
        Api::<Event>::namespaced(self.client.clone(), &r.namespace().unwrap())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|o| {
                    o.kind.as_deref() == Some("BMCRemediation") && o.uid == r.uid()
                })
            })
            .filter_map(|e| e.reason)
            .collect()
    }
}

/// The namespace and ServiceAccount standing in for NodeHealthCheck's controller. The account
/// is named as the release, so that `rbac_coverage` counts its requests against the chart's
/// ClusterRole (it reads the role's name after the account's).
const NHC_NAMESPACE: &str = "node-healthcheck";
const NHC_ACCOUNT: &str = "ingot";

/// NodeHealthCheck's identity from the chart (`fencing.nodeHealthCheck.aggregateRole=true`):
/// the rendered ClusterRole, labelled for NHC's aggregation and holding exactly
/// docs/fencing.md's rules, is applied; NHC's own aggregated ClusterRole (as NHC installs it,
/// selecting that label) is filled with its rules by kube-controller-manager; NHC's
/// ServiceAccount is bound to the chart's ClusterRole. Returns a client with that account's token.
async fn nhc_client(admin: &std::path::Path) -> Client {
    let rendered = chart_support::render(
        "ingot",
        chart_support::MANIFESTS_NAMESPACE,
        &[
            "controllers={fencing}".to_owned(),
            "fencing.nodeHealthCheck.aggregateRole=true".to_owned(),
        ],
        &["--show-only", "templates/rbac.yaml"],
    );
    let role = rendered
        .split("\n---")
        .find(|d| d.contains("name: ingot-nhc-remediation\n"))
        .expect("the chart renders the ClusterRole ingot-nhc-remediation");
    let parsed: serde_yaml::Value = serde_yaml::from_str(role).unwrap();
    assert_eq!(parsed["kind"], "ClusterRole");
    assert_eq!(
        parsed["metadata"]["labels"]["rbac.ext-remediation/aggregate-to-ext-remediation"],
        "true"
    );
    let rules: Value = serde_json::to_value(&parsed["rules"]).unwrap();
    assert_eq!(
        rules,
        json!([
            {"apiGroups": ["fencing.ingot.dev"], "resources": ["bmcremediationtemplates"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["fencing.ingot.dev"], "resources": ["bmcremediations"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        ])
    );
    chart_support::kubectl_apply(admin, role, &[]);
    // NHC's aggregated ClusterRole: the rules of every ClusterRole with the label.
    chart_support::kubectl_apply(
        admin,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: node-healthcheck-ext-remediation
aggregationRule:
  clusterRoleSelectors:
    - matchLabels:
        rbac.ext-remediation/aggregate-to-ext-remediation: \"true\"
rules: []
---
apiVersion: v1
kind: Namespace
metadata:
  name: {NHC_NAMESPACE}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {NHC_ACCOUNT}
  namespace: {NHC_NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: node-healthcheck-ingot-remediation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ingot-nhc-remediation
subjects:
  - kind: ServiceAccount
    name: {NHC_ACCOUNT}
    namespace: {NHC_NAMESPACE}
"
        ),
        &[],
    );
    let admin_client = ingot_testenv::TestEnv::connect(admin)
        .await
        .unwrap()
        .client()
        .unwrap();
    let aggregated: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(admin_client);
    eventually(
        "NHC's aggregated ClusterRole holding the chart's rules",
        || async {
            let role = aggregated
                .get("node-healthcheck-ext-remediation")
                .await
                .ok()?;
            let rules = serde_json::to_value(role.rules?).ok()?;
            (rules
                == json!([
                    {"apiGroups": ["fencing.ingot.dev"], "resources": ["bmcremediationtemplates"],
                     "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["fencing.ingot.dev"], "resources": ["bmcremediations"],
                     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                ]))
            .then_some(())
        },
    )
    .await;
    let kubeconfig =
        chart_support::token_kubeconfig(admin, NHC_ACCOUNT, NHC_NAMESPACE, "node-healthcheck");
    ingot_testenv::TestEnv::connect(&kubeconfig)
        .await
        .unwrap()
        .client()
        .unwrap()
}

/// A list, then a watch from its resourceVersion that the API server ends after a second.
async fn list_and_watch<K>(api: Api<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use futures::StreamExt;
    let list = api.list(&ListParams::default()).await.unwrap();
    let version = list.metadata.resource_version.unwrap_or_default();
    let events = api
        .watch(&kube::api::WatchParams::default().timeout(1), &version)
        .await
        .unwrap();
    let events: Vec<_> = events.collect().await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodehealthchecks_remediations_fence_through_the_bmc_and_are_refused_when_they_must_be() {
    let started = Instant::now();
    let plane = ingot_testenv::ControlPlane::start(ingot_testenv::Options {
        watchdog_parent: Some(std::process::id()),
        // NHC's aggregated ClusterRole is filled by kube-controller-manager.
        controller_manager_args: vec!["--controllers=clusterrole-aggregation-controller".into()],
        ..ingot_testenv::Options::from_env().unwrap()
    })
    .await
    .unwrap();
    let admin = plane.kubeconfig_path().to_owned();
    let env = ingot_testenv::TestEnv::connect(&admin).await.unwrap();
    let client = env.client().unwrap();
    let ns = env.namespace("nhc").await.unwrap();
    let tenant = env.namespace("nhc-tenant").await.unwrap();
    let service_account = chart_support::install_from_manifests(&admin, "fencing");
    // NHC's identity: the chart's opt-in ClusterRole for it, its requests made with its token.
    let nhc = nhc_client(&admin).await;

    // n1, n2, n4, n5 on sushy-tools; n3's BMC answers nowhere.
    let more = ["n2", "n4", "n5"].map(|name| SushySystem {
        name,
        uuid: match name {
            "n2" => "1c6c8f4e-0000-4000-8000-000000000002",
            "n4" => "1c6c8f4e-0000-4000-8000-000000000004",
            _ => "1c6c8f4e-0000-4000-8000-000000000005",
        },
        power_state: "On",
    });
    let sushy = start_sushy_tls_with(USER, PASSWORD, &more);
    create_secret(&client, &ns, "sushy-auth", USER, PASSWORD).await;
    let system = |i: usize| match i {
        1 => "fake",
        2 => "n2",
        4 => "n4",
        _ => "n5",
    };
    let node_name = |i: usize| format!("{ns}-n{i}");
    let nodes: Api<Node> = Api::all(client.clone());
    let world = World {
        client: client.clone(),
        nodes: nodes.clone(),
        jobs: Api::namespaced(client.clone(), &ns),
        sushy,
        seen: Default::default(),
    };
    for i in 1..=5 {
        let name = node_name(i);
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        world.set_ready(&name, true).await;
        let port = if i == 3 {
            closed_port()
        } else {
            world.sushy.port
        };
        let inventory: Inventory = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": format!("inv{i}"), "annotations": {
                "metal.harvesterhci.io/local-inventory": "true",
                "metal.harvesterhci.io/local-node-name": name}},
            "spec": {"baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 623,
                "insecureTLS": true, "authSecretRef": {"name": "sushy-auth", "namespace": ns}}},
                "events": {"enabled": false, "pollingInterval": "1h"}}
        }))
        .unwrap();
        Api::<Inventory>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &inventory)
            .await
            .unwrap();
        let machine = machine_sample(
            &ns,
            &format!("inv{i}"),
            "sushy-auth",
            "127.0.0.1",
            json!({"redfish": {"port": port, "systemName": system(i)}}),
        );
        Api::<Machine>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
    }

    // The templates, one in the Inventories' namespace, one in a tenant's.
    let gvk = GroupVersionKind::gvk("fencing.ingot.dev", "v1alpha1", "BMCRemediationTemplate");
    let template_resource = ApiResource::from_gvk(&gvk);
    let template_body = |namespace: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "fencing.ingot.dev/v1alpha1", "kind": "BMCRemediationTemplate",
            "metadata": {"name": "ingot-fence", "namespace": namespace},
            "spec": {"template": {"spec": {"strategy": "OutOfServiceTaint", "powerOnAfterRecovery": true}}}
        }))
        .unwrap()
    };
    for namespace in [&ns, &tenant] {
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &template_resource)
            .create(&PostParams::default(), &template_body(namespace))
            .await
            .unwrap();
    }
    // A strategy ingot does not have is refused by the API server, naming the field.
    let mut bad = template_body(&ns);
    bad.metadata.name = Some("bad".into());
    bad.data["spec"]["template"]["spec"]["strategy"] = json!("ResourceDeletion");
    let refused = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &template_resource)
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("only OutOfServiceTaint"), "{refused}");

    let owner = Api::<Namespace>::all(client.clone())
        .get(&ns)
        .await
        .unwrap();
    // NHC's requests, with its token: reading the remediations, deleting them, and what
    // nhc_remediate does.
    let remediations = |namespace: &str| Api::<BMCRemediation>::namespaced(nhc.clone(), namespace);
    // NHC: read the template, create the remediation for the Node.
    let nhc_remediate = |template_namespace: String, node: String| {
        let client = nhc.clone();
        let owner = owner.clone();
        let template_resource = template_resource.clone();
        async move {
            let template = Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &template_namespace,
                &template_resource,
            )
            .get("ingot-fence")
            .await
            .unwrap();
            let body = remediation_from_template(&template, &node, &owner);
            let r: BMCRemediation = serde_json::from_value(body).unwrap();
            Api::<BMCRemediation>::namespaced(client, &template_namespace)
                .create(&PostParams::default(), &r)
                .await
                .unwrap()
        }
    };

    // The flags, as the chart renders them from its values.
    let deployment: serde_yaml::Value = serde_yaml::from_str(&chart_support::render(
        "ingot",
        chart_support::MANIFESTS_NAMESPACE,
        &[
            "controllers={fencing}".to_owned(),
            format!("fencing.afterSeconds={AFTER_SECONDS}"),
            "fencing.maxUnhealthy=3".to_owned(),
            "fencing.remediationsOnly=true".to_owned(),
            "rufio.machineIntervalSeconds=1".to_owned(),
        ],
        &["--show-only", "templates/deployment.yaml"],
    ))
    .unwrap();
    let flags: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .filter(|a| a.starts_with("--fencing-") || a.starts_with("--rufio-"))
        .collect();
    assert_eq!(
        flags,
        [
            "--rufio-machine-interval-seconds=1".to_owned(),
            format!("--fencing-after-seconds={AFTER_SECONDS}"),
            "--fencing-max-unhealthy=3".to_owned(),
            "--fencing-recovery=power-on".to_owned(),
            "--fencing-remediations-only".to_owned(),
        ]
    );
    let ingot = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("nhc")
        .kubeconfig(&service_account)
        .arg(format!(
            "--lease-namespace={}",
            chart_support::MANIFESTS_NAMESPACE
        ))
        .arg("--lease-name=ingot")
        .arg("--lease-duration-seconds=3")
        .controllers("fencing")
        .args(flags)
        .arg("--rufio-task-poll-seconds=0.3")
        .arg("--rufio-redfish-timeout-seconds=3")
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();

    // Every Job name seen, as they are deleted once the Node is released.
    {
        let jobs = world.jobs.clone();
        let seen = world.seen.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(list) = jobs.list(&ListParams::default()).await {
                    for job in list.items {
                        if let Some(node) = job.labels().get(JOB_NODE_LABEL) {
                            seen.lock().unwrap().insert((node.clone(), job.name_any()));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    for i in [1, 2, 4, 5] {
        eventually(&format!("inv{i} read on"), || async {
            let status = machines.get(&format!("inv{i}")).await.unwrap().status?;
            (status.power_state.as_deref() == Some("on")).then_some(())
        })
        .await;
    }
    eventually("inv3 not contactable", || async {
        let status = machines.get("inv3").await.unwrap().status?;
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Contactable" && c.status == "False")
            .then_some(())
    })
    .await;

    // 1. n1 NotReady with a pod; NHC creates its remediation.
    let (n1, n4) = (node_name(1), node_name(4));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for node in [&n1, &n4] {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": node},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    world.set_ready(&n1, false).await;
    let r1 = nhc_remediate(ns.clone(), n1.clone()).await;
    // NHC lists and watches the templates and its remediations (its informers), and its role
    // lets it merge-patch one (here a label of its own).
    list_and_watch(Api::<DynamicObject>::namespaced_with(
        nhc.clone(),
        &ns,
        &template_resource,
    ))
    .await;
    list_and_watch(Api::<BMCRemediation>::all(nhc.clone())).await;
    remediations(&ns)
        .patch(
            &n1,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"remediation.medik8s.io/seen": "true"}}})),
        )
        .await
        .unwrap();
    eventually("n1 tainted only once sushy reads Off", || async {
        let node = world.node(&n1).await;
        let power = world.power(system(1)).await;
        if !tainted(&node) {
            return None;
        }
        assert_eq!(
            power.as_deref(),
            Some("Off"),
            "n1 tainted while sushy reads {power:?}"
        );
        Some(())
    })
    .await;
    let fenced = eventually("n1's remediation Succeeded", || async {
        let r = remediations(&ns).get(&n1).await.unwrap();
        (condition(&r, "Succeeded") == Some(("True".into(), "Fenced".into()))).then_some(r)
    })
    .await;
    assert_eq!(
        condition(&fenced, "Processing"),
        Some(("False".into(), "Fenced".into()))
    );
    assert_eq!(
        condition(&fenced, "PermanentNodeDeletionExpected").map(|c| c.0),
        Some("False".into())
    );
    assert!(fenced.finalizers().iter().any(|f| f == FINALIZER));
    assert!(fenced.status.as_ref().unwrap().last_update_time.is_some());
    // Its pod is there: the server stays off.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(world.power(system(1)).await.as_deref(), Some("Off"));
    assert!(world.power_ons_seen(&n1).is_empty());
    // The pod gone (as kube-controller-manager deletes it for the taint): one power-on.
    pods.delete(&n1, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eventually("n1 powered on again", || async {
        (world.power(system(1)).await.as_deref() == Some("On")).then_some(())
    })
    .await;
    assert!(
        tainted(&world.node(&n1).await),
        "the taint stays until released"
    );
    // The kubelet back, NHC sees the Node healthy and deletes its remediation.
    world.set_ready(&n1, true).await;
    remediations(&ns)
        .delete(&n1, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "n1 released: untainted, its record and its remediation gone",
        || async {
            let node = world.node(&n1).await;
            let clean = !tainted(&node)
                && !node
                    .annotations()
                    .keys()
                    .any(|k| k.starts_with("fencing.ingot.dev/"));
            let gone = remediations(&ns).get_opt(&n1).await.unwrap().is_none();
            (clean && gone && world.jobs_of(&n1).await.is_empty()).then_some(())
        },
    )
    .await;
    assert_eq!(world.power(system(1)).await.as_deref(), Some("On"));
    let ons = world.power_ons_seen(&n1);
    assert_eq!(ons.len(), 1, "one power-on: {ons:?}");
    let reasons = world.event_reasons(&r1).await;
    for reason in [
        "FencingPowerOff",
        "Fenced",
        "FencingPowerOn",
        "FencingRecovered",
    ] {
        assert!(reasons.contains(reason), "{reason} not in {reasons:?}");
    }

    // 2. n4 fenced, its pod staying; the remediation deleted while it is off.
    world.set_ready(&n4, false).await;
    nhc_remediate(ns.clone(), n4.clone()).await;
    eventually("n4 Succeeded", || async {
        let r = remediations(&ns).get(&n4).await.unwrap();
        (condition(&r, "Succeeded") == Some(("True".into(), "Fenced".into()))).then_some(())
    })
    .await;
    assert!(tainted(&world.node(&n4).await));
    assert_eq!(world.power(system(4)).await.as_deref(), Some("Off"));
    remediations(&ns)
        .delete(&n4, &DeleteParams::default())
        .await
        .unwrap();
    eventually("n4 powered on at its release", || async {
        (world.power(system(4)).await.as_deref() == Some("On")).then_some(())
    })
    .await;
    eventually("n4 untainted and its remediation gone", || async {
        let node = world.node(&n4).await;
        let gone = remediations(&ns).get_opt(&n4).await.unwrap().is_none();
        (!tainted(&node) && gone).then_some(())
    })
    .await;
    // Looked at again for a while: never a second power-on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ons = world.power_ons_seen(&n4);
    assert_eq!(ons.len(), 1, "one power-on: {ons:?}");
    assert!(world.jobs_of(&n4).await.is_empty());
    world.set_ready(&n4, true).await;

    // 3. Refusals: maintenance, a BMC that does not answer, another namespace; and a Node
    // NotReady without a remediation.
    let (n2, n3, n5) = (node_name(2), node_name(3), node_name(5));
    nodes
        .patch(
            &n2,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MAINTAIN_STATUS: "running"}}})),
        )
        .await
        .unwrap();
    for node in [&n2, &n3, &n5] {
        world.set_ready(node, false).await;
    }
    nhc_remediate(ns.clone(), n2.clone()).await;
    nhc_remediate(ns.clone(), n3.clone()).await;
    let foreign = nhc_remediate(tenant.clone(), n5.clone()).await;
    for (namespace, node, reason) in [
        (&ns, &n2, "FencingHeldMaintenance"),
        (&ns, &n3, "FencingHeldBMCUnknown"),
        (&tenant, &n5, "NamespaceNotAllowed"),
    ] {
        eventually(&format!("{node}: Succeeded=False {reason}"), || async {
            let r = remediations(namespace).get(node).await.unwrap();
            (condition(&r, "Succeeded") == Some(("False".into(), reason.into()))
                && condition(&r, "Processing").map(|c| c.0) == Some("False".into()))
            .then_some(())
        })
        .await;
    }
    eventually("the Event NamespaceNotAllowed", || async {
        world
            .event_reasons(&foreign)
            .await
            .contains("NamespaceNotAllowed")
            .then_some(())
    })
    .await;
    // Longer than the delay: still nothing done to any of them.
    tokio::time::sleep(Duration::from_secs(AFTER_SECONDS + 4)).await;
    for (i, node) in [(2, &n2), (3, &n3), (5, &n5)] {
        assert!(world.jobs_of(node).await.is_empty(), "{node}: a power Job");
        assert!(!tainted(&world.node(node).await), "{node}: tainted");
        if i != 3 {
            assert_eq!(
                world.power(system(i)).await.as_deref(),
                Some("On"),
                "{node}"
            );
        }
    }
    let foreign = remediations(&tenant).get(&n5).await.unwrap();
    assert!(
        foreign.finalizers().is_empty(),
        "a refused remediation held"
    );

    // 4. A Node NotReady past the delay with no remediation at all: not fenced either.
    remediations(&tenant)
        .delete(&n5, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(AFTER_SECONDS + 4)).await;
    assert!(world.jobs_of(&n5).await.is_empty(), "n5: a power Job");
    assert!(!tainted(&world.node(&n5).await), "n5: tainted");
    assert_eq!(world.power(system(5)).await.as_deref(), Some("On"));

    // 5. The budget counts NHC's unhealthy Nodes: remediations for two Ready Nodes (NHC
    // judging by another condition), beside n2, n3 (remediated) and n5 (NotReady), make five
    // unhealthy of five, more than --fencing-max-unhealthy=3: neither is powered off.
    nhc_remediate(ns.clone(), n1.clone()).await;
    nhc_remediate(ns.clone(), n4.clone()).await;
    for node in [&n1, &n4] {
        eventually(
            &format!("{node}: Succeeded=False over the budget"),
            || async {
                let r = remediations(&ns).get(node).await.unwrap();
                (condition(&r, "Succeeded")
                    == Some(("False".into(), "FencingHeldPartitionSuspected".into())))
                .then_some(())
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (i, node) in [(1, &n1), (4, &n4)] {
        assert!(world.jobs_of(node).await.is_empty(), "{node}: a power Job");
        assert!(!tainted(&world.node(node).await), "{node}: tainted");
        assert_eq!(
            world.power(system(i)).await.as_deref(),
            Some("On"),
            "{node}"
        );
    }

    // 6. NHC gives up on n2's remediation (its timeout annotation): nothing is started for
    // it, Processing=False says so, and Succeeded keeps the reason it failed for.
    // NHC writes it with an update of the whole object (UpdateRemediationCR).
    let mut timed_out = remediations(&ns).get(&n2).await.unwrap();
    timed_out
        .annotations_mut()
        .insert("remediation.medik8s.io/nhc-timed-out".into(), now());
    remediations(&ns)
        .replace(&n2, &PostParams::default(), &timed_out)
        .await
        .unwrap();
    eventually("n2: Processing=False RemediationStoppedByNHC", || async {
        let r = remediations(&ns).get(&n2).await.unwrap();
        (condition(&r, "Processing") == Some(("False".into(), "RemediationStoppedByNHC".into())))
            .then_some(r)
    })
    .await;
    let r = remediations(&ns).get(&n2).await.unwrap();
    assert_eq!(
        condition(&r, "Succeeded"),
        Some(("False".into(), "FencingHeldMaintenance".into()))
    );
    assert!(world.jobs_of(&n2).await.is_empty());

    // 7. A fenced Node deleted while its remediation holds ingot's finalizer. The held ones
    // let go first (n1, n4 Ready again, n5 too), so that n4 is within the budget.
    for node in [&n1, &n4] {
        remediations(&ns)
            .delete(node, &DeleteParams::default())
            .await
            .unwrap();
    }
    world.set_ready(&n5, true).await;
    for node in [&n1, &n4] {
        eventually(&format!("{node}'s held remediation gone"), || async {
            remediations(&ns)
                .get_opt(node)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
    }
    world.set_ready(&n4, false).await;
    nhc_remediate(ns.clone(), n4.clone()).await;
    let r4 = eventually("n4 fenced again (its pod still bound)", || async {
        let r = remediations(&ns).get(&n4).await.unwrap();
        (condition(&r, "Succeeded") == Some(("True".into(), "Fenced".into()))).then_some(r)
    })
    .await;
    assert_eq!(world.power(system(4)).await.as_deref(), Some("Off"));
    assert!(r4.finalizers().iter().any(|f| f == FINALIZER));
    let power_ons_before = world.power_ons_seen(&n4);
    // The Node object deleted (a person removing it, the server being retired): the live
    // remediation says so, and nothing is powered.
    nodes.delete(&n4, &DeleteParams::default()).await.unwrap();
    eventually("n4's remediation: Succeeded=False NodeNotFound", || async {
        let r = remediations(&ns).get(&n4).await.unwrap();
        (condition(&r, "Succeeded") == Some(("False".into(), "NodeNotFound".into()))
            && condition(&r, "Processing") == Some(("False".into(), "NodeNotFound".into())))
        .then_some(())
    })
    .await;
    assert!(world.event_reasons(&r4).await.contains("NodeNotFound"));
    // NHC deletes it: let go without a power-on (powerOnAfterRecovery is true, but a deleted
    // Node is not a Node back), with a Normal Event saying why.
    remediations(&ns)
        .delete(&n4, &DeleteParams::default())
        .await
        .unwrap();
    eventually("n4's remediation let go", || async {
        remediations(&ns)
            .get_opt(&n4)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let released = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| {
            e.regarding.as_ref().is_some_and(|o| o.uid == r4.uid())
                && e.reason.as_deref() == Some("FencingReleasedNodeGone")
        })
        .expect("the Event FencingReleasedNodeGone on n4's remediation");
    assert_eq!(released.type_.as_deref(), Some("Normal"));
    let note = released.note.unwrap_or_default();
    assert!(
        note.contains(&n4) && note.contains("without any power action"),
        "{note}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(world.power(system(4)).await.as_deref(), Some("Off"));
    assert_eq!(
        world.power_ons_seen(&n4),
        power_ons_before,
        "a power-on Job"
    );
    assert!(
        world.jobs_of(&n4).await.is_empty(),
        "the episode's Jobs left"
    );

    assert!(ingot.is_running(), "ingot exited:\n{}", ingot.log_tail());
    // The manifests' RBAC let ingot do all of it.
    assert!(
        !ingot.log().to_lowercase().contains("forbidden"),
        "a request refused:\n{}",
        ingot.log_tail()
    );
    ingot.kill();
    ingot_testenv::keep_audit_log(&plane, "nhc-remediation").unwrap();
    println!(
        "NodeHealthCheck remediation end to end in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
