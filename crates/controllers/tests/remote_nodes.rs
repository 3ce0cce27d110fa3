//! The watch of a new cluster's Nodes (`provisioning::remote::NodeWatches`) against a real
//! kube-apiserver taking bootstrap tokens, as RKE2's does, with the node-reader token and role
//! that the create node's install config makes (`render::node_reader_manifest`): a Node that
//! starts or stops counting (Ready, with an InternalIP) wakes its Cluster, heartbeats do not,
//! and a new cluster that refuses the watch is left to the poll.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use futures::{Stream, StreamExt};
use ingot_api::seeder::Cluster;
use ingot_controllers::provisioning::remote::{self, Endpoint, NodeWatches};
use ingot_controllers::provisioning::render;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);
/// How long a wake-up that should not come is waited for.
const QUIET: Duration = Duration::from_secs(3);

async fn control_plane() -> ingot_testenv::ControlPlane {
    let options = ingot_testenv::Options {
        controller_manager: false,
        install_crds: false,
        watchdog_parent: Some(std::process::id()),
        bootstrap_token_auth: true,
        ..ingot_testenv::Options::from_env().unwrap()
    };
    ingot_testenv::ControlPlane::start(options).await.unwrap()
}

async fn create<K>(api: Api<K>, document: Value)
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(document).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// Applies the node reader manifest as RKE2 applies its auto-deploy directory.
async fn apply_node_reader(client: &Client, id: &str, secret: &str) {
    for document in serde_yaml::Deserializer::from_str(&render::node_reader_manifest(id, secret)) {
        let value: Value = serde::Deserialize::deserialize(document).unwrap();
        match value["kind"].as_str().unwrap() {
            "Secret" => {
                let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
                create(api, value).await
            }
            "ClusterRole" => create::<ClusterRole>(Api::all(client.clone()), value).await,
            "ClusterRoleBinding" => {
                create::<ClusterRoleBinding>(Api::all(client.clone()), value).await
            }
            other => panic!("unexpected {other} in the node reader manifest"),
        }
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap()
}

async fn node(nodes: &Api<Node>, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

async fn set_status(nodes: &Api<Node>, name: &str, ready: &str, heartbeat: &str) {
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat,
                        "lastTransitionTime": "2026-11-28T00:00:00Z", "reason": "KubeletReady"}],
        "addresses": [{"type": "InternalIP", "address": "127.0.20.5"}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn woken(
    wakes: &mut (impl Stream<Item = ObjectRef<Cluster>> + Unpin),
    cluster: &ObjectRef<Cluster>,
    what: &str,
) {
    let got = tokio::time::timeout(DEADLINE, wakes.next())
        .await
        .unwrap_or_else(|_| panic!("no wake-up after {what}"));
    assert_eq!(got.as_ref(), Some(cluster), "{what}");
}

async fn quiet(wakes: &mut (impl Stream<Item = ObjectRef<Cluster>> + Unpin), what: &str) {
    if let Ok(got) = tokio::time::timeout(QUIET, wakes.next()).await {
        panic!("woken by {what}: {got:?}");
    }
}

#[tokio::test]
async fn a_node_changing_readiness_wakes_its_cluster_and_heartbeats_do_not() {
    let plane = control_plane().await;
    let admin = plane.client().await.unwrap();
    apply_node_reader(&admin, "abcdef", "0123456789abcdef").await;
    let endpoint = Endpoint {
        base: plane.api_url().trim_end_matches('/').to_owned(),
        bearer: "abcdef.0123456789abcdef".to_owned(),
    };
    let http = http();
    let nodes: Api<Node> = Api::all(admin.clone());
    node(&nodes, "before").await;
    set_status(&nodes, "before", "True", "2026-11-28T00:00:00Z").await;

    let watches = NodeWatches::default();
    let mut wakes = Box::pin(watches.wakes());
    let cluster = ObjectRef::<Cluster>::new("new").within("tenant");
    // The token may list Nodes (the API server answers it only after its informers start).
    let listed = loop {
        match remote::list(&http, &endpoint).await {
            Ok(listed) => break listed,
            Err(why) if why.contains("401") || why.contains("403") => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Err(why) => panic!("listing the Nodes with the node reader token: {why}"),
        }
    };
    assert_eq!(listed.items.len(), 1);
    watches.follow(cluster.clone(), &http, &endpoint, &listed);
    assert!(watches.following(&cluster));
    // Let the watch open before the first change.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A Node listed as counting, seen again unchanged: nothing.
    set_status(&nodes, "before", "True", "2026-11-28T00:00:05Z").await;
    quiet(&mut wakes, "a heartbeat of a Node listed Ready").await;

    node(&nodes, "n1").await;
    quiet(&mut wakes, "a Node registered without status").await;
    set_status(&nodes, "n1", "True", "2026-11-28T00:00:10Z").await;
    woken(&mut wakes, &cluster, "a Node turning Ready").await;
    set_status(&nodes, "n1", "True", "2026-11-28T00:00:20Z").await;
    quiet(&mut wakes, "a heartbeat of a Ready Node").await;
    set_status(&nodes, "n1", "False", "2026-11-28T00:00:30Z").await;
    woken(&mut wakes, &cluster, "a Node no longer Ready").await;
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    quiet(&mut wakes, "a Node that did not count deleted").await;
    nodes
        .delete("before", &DeleteParams::default())
        .await
        .unwrap();
    woken(&mut wakes, &cluster, "a Ready Node deleted").await;

    watches.stop(&cluster);
    assert!(!watches.following(&cluster));
    node(&nodes, "after").await;
    set_status(&nodes, "after", "True", "2026-11-28T00:00:40Z").await;
    quiet(&mut wakes, "a Node turning Ready after the watch stopped").await;
}

#[tokio::test]
async fn a_cluster_that_refuses_the_watch_is_polled() {
    let plane = control_plane().await;
    let admin = plane.client().await.unwrap();
    apply_node_reader(&admin, "ghijkl", "0123456789ghijkl").await;
    // A reader role made before it asked for `watch`.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let list_only =
        json!({"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]});
    roles
        .patch(
            "ingot-node-reader",
            &PatchParams::default(),
            &Patch::Merge(&list_only),
        )
        .await
        .unwrap();
    let endpoint = Endpoint {
        base: plane.api_url().trim_end_matches('/').to_owned(),
        bearer: "ghijkl.0123456789ghijkl".to_owned(),
    };
    let http = http();
    let listed = loop {
        match remote::list(&http, &endpoint).await {
            Ok(listed) => break listed,
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    let watches = NodeWatches::default();
    let cluster = ObjectRef::<Cluster>::new("old").within("tenant");
    watches.follow(cluster.clone(), &http, &endpoint, &listed);
    let start = std::time::Instant::now();
    while watches.following(&cluster) {
        assert!(
            start.elapsed() < DEADLINE,
            "the refused watch is still counted open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Not asked again at once: the Cluster is polled.
    watches.follow(cluster.clone(), &http, &endpoint, &listed);
    assert!(!watches.following(&cluster));
}
