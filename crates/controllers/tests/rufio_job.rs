//! The Job reconciler against a real API server, called directly with the copy a lagging Job
//! cache could hand it: a copy older than the operator's own `Running` write does not write
//! `Running` again (which would move `startTime`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::{Job, Machine, Task};
use ingot_controllers::Metrics;
use ingot_controllers::rufio::job::reconcile;
use ingot_controllers::rufio::{RufioContext, Settings};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_older_than_its_own_running_write_writes_nothing() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-job").await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "auth"},
        "stringData": {"username": "admin", "password": "pw"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // No BMC answers here: the action is not sent ahead (the operator never reached this
    // BMC), so the Task is created unsent and nothing else is needed of the BMC.
    let machine: Machine = serde_json::from_value(json!({
        "metadata": {"name": "m"},
        "spec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
            "authSecretRef": {"name": "auth", "namespace": ns}}}
    }))
    .unwrap();
    Api::<Machine>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "j"},
        "spec": {"machineRef": {"name": "m", "namespace": ns}, "tasks": [{"powerAction": "off"}]}
    }))
    .unwrap();
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    let ctx = Arc::new(RufioContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "test".into(),
        Settings::default(),
    ));
    reconcile(Arc::new(created.clone()), ctx.clone())
        .await
        .unwrap();
    let running = jobs.get("j").await.unwrap();
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    assert!(tasks.get_opt("j-task-0").await.unwrap().is_some());
    let start = running.status.as_ref().and_then(|s| s.start_time.clone());
    assert!(start.is_some(), "{:?}", running.status);
    // `startTime` has a resolution of one second: a second later, writing `Running` again
    // would change the Job (and its resourceVersion).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The Task's change wakes the Job while its cache still holds the copy without status.
    reconcile(Arc::new(created), ctx.clone()).await.unwrap();
    let after = jobs.get("j").await.unwrap();
    assert_eq!(
        after.resource_version(),
        running.resource_version(),
        "the Job was written again from a copy older than its Running: {:?}",
        after.status
    );
    // The up-to-date copy goes on (the Task is still running: nothing to write).
    reconcile(Arc::new(running.clone()), ctx).await.unwrap();
    let last = jobs.get("j").await.unwrap();
    assert_eq!(last.status.and_then(|s| s.start_time), start);
}
