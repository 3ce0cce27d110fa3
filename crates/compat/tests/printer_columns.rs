//! `kubectl get` shows the columns of the originals: STATUS READY REQUESTED for pools and
//! STATUS INSTANCEID PUBLICIP PRIVATEIP for instances.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let kubectl = std::env::var("INGOT_KUBECTL").expect(
        "INGOT_KUBECTL: the kubectl built by tools/k8s-testbin/build.sh kubectl (scripts/test.sh sets it)",
    );
    let output = std::process::Command::new(&kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {kubectl}: {e}"));
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test]
async fn kubectl_get_shows_the_original_columns() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let name = format!("columns-{}", ingot_testenv::random_suffix(6));

    let pools: Api<ingot_api::equinix::InstancePool> = Api::all(client.clone());
    let pool = serde_json::from_value(
        json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
        "metadata": {"name": name}, "spec": {"count": 1}}),
    )
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
    let status = json!({"status": {"status": "ready", "ready": 1, "requested": 1}});
    pools
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pool status");

    let instances: Api<ingot_api::equinix::Instance> = Api::all(client);
    let instance_name = format!("{name}-zaoolitj");
    let instance = serde_json::from_value(
        json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "Instance",
        "metadata": {"name": instance_name}, "spec": {"plan": "c3.small.x86"}}),
    )
    .expect("instance");
    instances
        .create(&PostParams::default(), &instance)
        .await
        .expect("create instance");
    let status = json!({"status": {"status": "managed", "instanceID": "1c6106a0-13e6-44fa-af2c-bec67d4b6c65",
        "publicIP": "145.40.73.137", "privateIP": "10.8.23.5"}});
    instances
        .patch_status(
            &instance_name,
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("instance status");

    let out = kubectl(env.kubeconfig_path(), &["get", "instancepool", &name]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(columns(lines[0]), ["NAME", "STATUS", "READY", "REQUESTED"]);
    assert_eq!(columns(lines[1]), [name.as_str(), "ready", "1", "1"]);

    let out = kubectl(env.kubeconfig_path(), &["get", "instance", &instance_name]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        columns(lines[0]),
        ["NAME", "STATUS", "INSTANCEID", "PUBLICIP", "PRIVATEIP"]
    );
    assert_eq!(
        columns(lines[1]),
        [
            instance_name.as_str(),
            "managed",
            "1c6106a0-13e6-44fa-af2c-bec67d4b6c65",
            "145.40.73.137",
            "10.8.23.5"
        ]
    );
}
