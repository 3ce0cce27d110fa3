//! Rolling back from ingot to upstream Tinkerbell Rufio (docs/migrate-from-seeder.md, "Rolling
//! back"): ingot, installed from the plain manifests and run as their ServiceAccount, runs the
//! upstream samples against OpenIPMI's ipmi_sim; it is stopped by its PID, and upstream Rufio
//! v0.6.5 (built from its Go module) takes the same Machine, runs a new Job on the BMC, and the
//! Job, Tasks and Machine ingot wrote are deleted with only Rufio running.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ingot_api::rufio::{Job, Machine};
use ingot_ipmi_sim::FruInfo;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use rufio_support::*;
use serde_json::json;

fn ipmitool(port: u16, args: &[&str]) -> String {
    let out = Command::new(require_apt_tool("ipmitool", "ipmitool"))
        .args(["-I", "lanplus", "-C", "3", "-N", "1", "-R", "3"])
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", peers::IPMI_USER, "-P", peers::IPMI_PASSWORD])
        .args(args)
        .output()
        .expect("run ipmitool");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

async fn power(port: u16) -> String {
    tokio::task::spawn_blocking(move || ipmitool(port, &["chassis", "power", "status"]))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_rufio_takes_over_what_ingot_left() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-rollback").await.unwrap();
    let sim = peers::start_ipmi_sim(&FruInfo::example(7).encode());
    let port = sim.addr.port();
    wait_for("ipmi_sim on", Duration::from_secs(30), || async {
        (power(port).await == "Chassis Power is on").then_some(())
    })
    .await;
    create_secret(
        &client,
        &ns,
        "sample-machine-auth",
        peers::IPMI_USER,
        peers::IPMI_PASSWORD,
    )
    .await;
    let options = json!({"ipmitool": {"port": port, "cipherSuite": "3"}});
    create(
        &client,
        &ns,
        &machine_sample(
            &ns,
            "machine-sample",
            "sample-machine-auth",
            "127.0.0.1",
            options,
        ),
    )
    .await;

    // ingot runs the sample Job.
    let kubeconfig = chart_support::install_from_manifests(env.kubeconfig_path(), "rufio");
    let ingot = start_ingot_as(&kubeconfig, chart_support::MANIFESTS_NAMESPACE, &ns, &[]);
    wait_contactable(
        &client,
        &ns,
        "machine-sample",
        "on",
        Duration::from_secs(60),
    )
    .await;
    create(
        &client,
        &ns,
        &job_sample(&ns, "job-ingot", "machine-sample"),
    )
    .await;
    wait_job(&client, &ns, "job-ingot", Duration::from_secs(60), &ingot).await;
    let ingot_tasks = tasks_of(&client, &ns).await.len();
    assert_eq!(ingot_tasks, 3, "the sample Job's three Tasks");

    // Rolled back: ingot stopped, upstream Rufio started on the same objects.
    ingot.kill();
    let mut rufio = start_rufio(&rufio_binary("v0.6.5"), env.kubeconfig_path(), &ns);
    let seen_off = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen_off, stop) = (seen_off.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if power(port).await == "Chassis Power is off" {
                    seen_off.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // Upstream's Job reconciler can fail its own Job with "already exists" (its stale cache,
    // see rufio_upstream.rs): a Job failed so is tried again under a new name.
    let mut completed = None;
    for attempt in 0..3 {
        let name = format!("job-upstream-{attempt}");
        create(&client, &ns, &job_sample(&ns, &name, "machine-sample")).await;
        let status = wait_for(
            &format!("upstream Rufio to end {name}"),
            Duration::from_secs(120),
            || async {
                let s = job_status(&client, &ns, &name).await;
                let done = condition(&s, "Completed").is_some_and(|c| c.0 == "True")
                    || condition(&s, "Failed").is_some_and(|c| c.0 == "True");
                done.then_some(s)
            },
        )
        .await;
        if condition(&status, "Completed").is_some_and(|c| c.0 == "True") {
            completed = Some(name);
            break;
        }
        let failed = condition(&status, "Failed").unwrap();
        assert!(
            failed.1.contains("already exists"),
            "upstream Rufio failed {name}: {status}\n{}",
            rufio.log_tail()
        );
    }
    let completed = completed.expect("upstream Rufio failed its own Job three times running");
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    assert!(
        seen_off.load(Ordering::Relaxed),
        "the BMC never went off under upstream Rufio"
    );
    assert_eq!(power(port).await, "Chassis Power is on");
    let job_uid = Api::<Job>::namespaced(client.clone(), &ns)
        .get(&completed)
        .await
        .unwrap()
        .uid()
        .unwrap();
    assert!(
        tasks_of(&client, &ns)
            .await
            .iter()
            .any(|t| t.owner_references().iter().any(|o| o.uid == job_uid)),
        "upstream Rufio's Tasks of {completed}"
    );

    // What ingot wrote is deletable with only Rufio running: no finalizer of ingot's holds it.
    Api::<Job>::namespaced(client.clone(), &ns)
        .delete("job-ingot", &DeleteParams::foreground())
        .await
        .unwrap();
    Api::<Machine>::namespaced(client.clone(), &ns)
        .delete("machine-sample", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "ingot's Job, its Tasks and the Machine gone",
        Duration::from_secs(60),
        || async {
            let jobs = Api::<Job>::namespaced(client.clone(), &ns);
            let machines = Api::<Machine>::namespaced(client.clone(), &ns);
            (jobs.get_opt("job-ingot").await.unwrap().is_none()
                && machines.get_opt("machine-sample").await.unwrap().is_none())
            .then_some(())
        },
    )
    .await;
    rufio.stop();
    delete_all(&client, &ns).await;
}
