//! The controllers' stores hold objects without `managedFields` (a real API server always
//! writes them).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::test]
async fn stored_objects_carry_no_managed_fields() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("lean-reflector").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "facts"}, "data": {"a": "1"}})).unwrap();
    api.create(&PostParams::default(), &map).await.unwrap();
    assert!(
        !api.get("facts").await.unwrap().managed_fields().is_empty(),
        "the API server wrote managedFields"
    );

    let (store, events) = ingot_controllers::lean_reflector(api, watcher::Config::default());
    let drive = tokio::spawn(events.for_each(|_| async {}));
    tokio::time::timeout(Duration::from_secs(30), store.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    let stored = store.state();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].data.as_ref().unwrap()["a"], "1");
    assert!(stored[0].managed_fields().is_empty());
    drive.abort();
}
