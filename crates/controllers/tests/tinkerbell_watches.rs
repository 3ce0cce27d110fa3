//! Tinkerbell mode's watches, on the real API server with the Tinkerbell CRDs of the shared
//! fixtures: a Workflow written wakes the Inventory of its name and namespace, once the store
//! holds the change (its new state); only the Service `tink-stack` and the ConfigMap
//! `seeder-config` are listed (another of each is not held), and only in the namespace given.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use serde_json::json;

use ingot_controllers::provisioning::tinkerbell::{self, Kind, Watches, WorkflowState};

const WAIT: Duration = Duration::from_secs(60);

async fn install_workflow_crd(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let path =
        ingot_testenv::shared_dir().join("fixtures/upstream-crds/tinkerbell.org_workflow-crd.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text).unwrap();
    crd.status = None;
    crd.metadata.creation_timestamp = None;
    let name = crd.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("ingot-tests").force(),
        &Patch::Apply(&crd),
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

async fn create<K>(api: &Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_wakes_its_inventory_and_only_the_stack_s_objects_are_held() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    install_workflow_crd(&client).await;
    let ns = env.namespace("tink-watch").await.unwrap();
    let other = env.namespace("tink-other").await.unwrap();

    let mut watches = Watches::new(16);
    let mut triggers = watches.triggers().unwrap();
    assert!(
        watches.triggers().is_none(),
        "the triggers are handed out once"
    );
    let stores = watches.stores();
    let feed = {
        let client = client.clone();
        let ns = ns.clone();
        tokio::spawn(async move { watches.feed(&client, Some(&ns)).await })
    };
    ingot_testenv::wait_for("the watches listed", WAIT, || async {
        stores.listed().then_some(())
    })
    .await;

    // A Workflow's change wakes Inventory <ns>/<name>, its state already in the store.
    let resource = Kind::Workflow.resource();
    let workflows = |namespace: &str| -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), namespace, &resource)
    };
    let workflow = json!({
        "apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "node0"},
        "spec": {"templateRef": "node0", "hardwareRef": "node0",
            "hardwareMap": {"device_1": "02:00:00:00:00:01"}},
    });
    let mut in_other = workflow.clone();
    in_other["metadata"]["name"] = "elsewhere".into();
    create(&workflows(&other), in_other).await;
    create(&workflows(&ns), workflow).await;
    let woken = tokio::time::timeout(WAIT, triggers.workflows.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken, ObjectRef::new("node0").within(&ns));
    workflows(&ns)
        .patch_status(
            "node0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": "STATE_SUCCESS"}})),
        )
        .await
        .unwrap();
    let woken = tokio::time::timeout(WAIT, triggers.workflows.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken, ObjectRef::new("node0").within(&ns));
    let stored = stores.workflow(&ns, "node0").unwrap();
    assert_eq!(
        tinkerbell::workflow_state(&stored),
        WorkflowState::Succeeded
    );
    assert!(stored.metadata.managed_fields.is_none());
    assert!(
        stores.workflow(&other, "elsewhere").is_none(),
        "a Workflow outside the namespace is held"
    );

    // Services and ConfigMaps: only the stack's names.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    for name in ["tink-stack", "unrelated"] {
        create(
            &services,
            json!({"metadata": {"name": name},
                "spec": {"ports": [{"name": "hegel", "port": 50061}]}}),
        )
        .await;
    }
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for name in ["seeder-config", "unrelated"] {
        create(
            &configs,
            json!({"metadata": {"name": name}, "data": {"a": "1"}}),
        )
        .await;
    }
    let service = tokio::time::timeout(WAIT, triggers.services.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(service.metadata.name.as_deref(), Some("tink-stack"));
    let config = tokio::time::timeout(WAIT, triggers.configs.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(config.metadata.name.as_deref(), Some("seeder-config"));
    assert!(stores.service(&ns).is_some() && stores.config(&ns).is_some());
    let names = |v: Vec<Option<String>>| v.into_iter().flatten().collect::<Vec<_>>();
    assert_eq!(
        names(
            stores
                .services
                .state()
                .iter()
                .map(|s| s.metadata.name.clone())
                .collect()
        ),
        ["tink-stack"]
    );
    assert_eq!(
        names(
            stores
                .configs
                .state()
                .iter()
                .map(|c| c.metadata.name.clone())
                .collect()
        ),
        ["seeder-config"]
    );
    feed.abort();
}
