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

/// Marks a Task as the Task controller does when its action succeeded.
async fn complete(tasks: &Api<Task>, name: &str) {
    tasks
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"conditions": [
                {"type": "Completed", "status": "True"}
            ]}})),
        )
        .await
        .unwrap();
}

/// A Job whose completed Task was deleted (by hand, by a cleanup) goes on with its next Task
/// and never creates the deleted one again: its action would run a second time, after the
/// actions that followed it (a power off after the power on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_completed_task_is_not_run_again() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-job-progress").await.unwrap();
    // No BMC answers here and no Task controller runs: the Tasks are completed by hand, and
    // what is checked is which Tasks the Job creates (a Task is what sends an action).
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
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "reboot"},
        "spec": {"machineRef": {"name": "m", "namespace": ns},
            "tasks": [{"powerAction": "off"}, {"powerAction": "on"}]}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let ctx = Arc::new(RufioContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "test".into(),
        Settings::default(),
    ));
    let pass = || async {
        let current = jobs.get("reboot").await.unwrap();
        reconcile(Arc::new(current), ctx.clone()).await.unwrap();
    };
    pass().await;
    assert!(tasks.get_opt("reboot-task-0").await.unwrap().is_some());
    complete(&tasks, "reboot-task-0").await;
    pass().await;
    assert!(tasks.get_opt("reboot-task-1").await.unwrap().is_some());

    // The completed power off is deleted while the power on runs.
    tasks
        .delete("reboot-task-0", &Default::default())
        .await
        .unwrap();
    poll_gone(&tasks, "reboot-task-0").await;
    pass().await;
    assert!(
        tasks.get_opt("reboot-task-0").await.unwrap().is_none(),
        "the deleted power off was created again"
    );

    // The power on completes: so does the Job, with no Task created again.
    complete(&tasks, "reboot-task-1").await;
    pass().await;
    let done = jobs.get("reboot").await.unwrap();
    let conditions = done.status.unwrap().conditions;
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Completed" && c.status == "True"),
        "{conditions:?}"
    );
    assert!(tasks.get_opt("reboot-task-0").await.unwrap().is_none());
}

/// A reset Task deleted before it ended may have reset the machine: the Job fails saying so
/// and does not create (and send) it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_destructive_task_is_not_sent_again() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-job-reset").await.unwrap();
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
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "reset"},
        "spec": {"machineRef": {"name": "m", "namespace": ns}, "tasks": [{"powerAction": "reset"}]}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let ctx = Arc::new(RufioContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "test".into(),
        Settings::default(),
    ));
    let pass = || async {
        let current = jobs.get("reset").await.unwrap();
        reconcile(Arc::new(current), ctx.clone()).await.unwrap();
    };
    pass().await;
    assert!(tasks.get_opt("reset-task-0").await.unwrap().is_some());
    tasks
        .delete("reset-task-0", &Default::default())
        .await
        .unwrap();
    poll_gone(&tasks, "reset-task-0").await;
    // A fresh process (no memory of its own writes) sees the Task gone.
    let ctx = Arc::new(RufioContext::new(
        client.clone(),
        Arc::new(Metrics::default()),
        "test".into(),
        Settings::default(),
    ));
    let current = jobs.get("reset").await.unwrap();
    reconcile(Arc::new(current), ctx).await.unwrap();
    assert!(
        tasks.get_opt("reset-task-0").await.unwrap().is_none(),
        "the deleted reset was created again"
    );
    let failed = jobs.get("reset").await.unwrap();
    let conditions = failed.status.unwrap().conditions;
    let message = conditions
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| panic!("the Job did not fail: {conditions:?}"));
    assert!(
        message.contains(&format!("task {ns}/reset-task-0 was created and is gone"))
            && message.contains("not sent again"),
        "{message}"
    );
}

/// Waits until the API server no longer has the Task (its deletion is immediate without
/// finalizers; bounded all the same).
async fn poll_gone(tasks: &Api<Task>, name: &str) {
    for _ in 0..100 {
        if tasks.get_opt(name).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("Task {name} was not deleted within 10 s");
}
