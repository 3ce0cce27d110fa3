//! Upstream Tinkerbell Rufio as a real peer: its manager, built from its Go module
//! (tools/rufio), runs the upstream samples against ipmi_sim on the real control plane and is
//! stopped by its PID in the middle of a Job; `ingot run --controllers rufio` then adopts the
//! Machine, continues the Job from the Tasks Rufio wrote, and everything stays deletable.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod rufio_support;

use std::process::Command;
use std::time::Duration;

use ingot_api::rufio::{Job, Machine, Task};
use ingot_ipmi_sim::FruInfo;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use rufio_support::common::openipmi;
use rufio_support::*;
use serde_json::json;
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

fn ipmitool(sim: &openipmi::IpmiSim, args: &[&str]) -> String {
    let out = Command::new(common::require_apt_tool("ipmitool", "ipmitool"))
        .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1"])
        .arg("-p")
        .arg(sim.addr.port().to_string())
        .args(["-U", openipmi::USER, "-P", openipmi::PASSWORD])
        .args(args)
        .output()
        .expect("run ipmitool");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

async fn task_completed(client: &kube::Client, ns: &str, name: &str) -> bool {
    match Api::<Task>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
    {
        Some(t) => {
            let s = serde_json::to_value(&t.status).unwrap();
            condition(&s, "Completed").is_some_and(|c| c.0 == "True")
        }
        None => false,
    }
}

#[tokio::test]
async fn objects_written_by_upstream_rufio_v0_6_5_are_adopted_continued_and_deletable() {
    let _serial = SERIAL.lock().await;
    let rufio_bin = rufio_binary("v0.6.5");
    common::require_apt_tool("ipmitool", "ipmitool");
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-peer").await.unwrap();

    let sim = openipmi::start(&FruInfo::example(5).encode());
    poll_until("ipmi_sim", Duration::from_secs(30), || async {
        ipmitool(&sim, &["chassis", "power", "status"])
            .contains("Chassis Power is")
            .then_some(())
    })
    .await;
    create_secret(
        &client,
        &ns,
        "sample-machine-auth",
        openipmi::USER,
        openipmi::PASSWORD,
    )
    .await;
    let machine = machine_sample(
        &ns,
        "machine-sample",
        "sample-machine-auth",
        "127.0.0.1",
        json!({"ipmitool": {"port": sim.addr.port(), "cipherSuite": "3"}}),
    );
    create(&client, &ns, &machine).await;

    // Upstream Rufio reads the Machine and starts the sample Job.
    let mut rufio = start_rufio(&rufio_bin, env.kubeconfig_path(), &ns);
    let upstream_status = poll_until(
        "upstream Rufio to make the Machine contactable",
        Duration::from_secs(90),
        || async {
            let s = machine_status(&client, &ns, "machine-sample").await;
            (condition(&s, "Contactable").is_some_and(|c| c.0 == "True") && s["powerState"] == "on")
                .then_some(s)
        },
    )
    .await;
    create(
        &client,
        &ns,
        &job_sample(&ns, "job-sample", "machine-sample"),
    )
    .await;
    poll_until(
        "upstream Rufio to complete job-sample-task-0 (off)",
        Duration::from_secs(90),
        || async {
            task_completed(&client, &ns, "job-sample-task-0")
                .await
                .then_some(())
        },
    )
    .await;
    rufio.stop();
    let handed_over = job_status(&client, &ns, "job-sample").await;
    assert!(
        condition(&handed_over, "Completed").is_none(),
        "upstream Rufio finished the whole Job before it was stopped: {handed_over}\n{}",
        rufio.log_tail()
    );
    assert_eq!(condition(&handed_over, "Running").unwrap().0, "True");
    assert_eq!(
        std::fs::read_to_string(sim.dir.join("power"))
            .unwrap()
            .trim(),
        "0",
        "upstream Rufio powered the peer off"
    );

    // ingot adopts and continues.
    let mut ingot = start_ingot(env.kubeconfig_path(), &ns, &[]);
    let status = wait_job(&client, &ns, "job-sample", Duration::from_secs(60), &ingot).await;
    assert_eq!(
        status["startTime"], handed_over["startTime"],
        "the Job's startTime is upstream's"
    );
    assert!(status["completionTime"].is_string());
    let job_uid = Api::<Job>::namespaced(client.clone(), &ns)
        .get("job-sample")
        .await
        .unwrap()
        .uid()
        .unwrap();
    for i in 0..3 {
        let name = format!("job-sample-task-{i}");
        assert!(task_completed(&client, &ns, &name).await, "{name}");
        let t = Api::<Task>::namespaced(client.clone(), &ns)
            .get(&name)
            .await
            .unwrap();
        let owner = &t.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Job", job_uid.as_str())
        );
        assert_eq!(owner.controller, Some(true));
    }
    assert_eq!(
        ipmitool(&sim, &["chassis", "power", "status"]),
        "Chassis Power is on"
    );
    assert_eq!(
        std::fs::read_to_string(sim.dir.join("boot"))
            .unwrap()
            .trim(),
        "pxe"
    );
    // The Machine upstream wrote is kept up to date: contactable, on, and its condition
    // time is upstream's (the status did not change).
    wait_contactable(
        &client,
        &ns,
        "machine-sample",
        "on",
        Duration::from_secs(20),
    )
    .await;
    let now = machine_status(&client, &ns, "machine-sample").await;
    assert_eq!(
        now["conditions"][0]["lastUpdateTime"],
        upstream_status["conditions"][0]["lastUpdateTime"]
    );

    // Deletable: the Job takes its Tasks with it (garbage collection), the Machine goes.
    Api::<Job>::namespaced(client.clone(), &ns)
        .delete("job-sample", &DeleteParams::foreground())
        .await
        .unwrap();
    Api::<Machine>::namespaced(client.clone(), &ns)
        .delete("machine-sample", &DeleteParams::default())
        .await
        .unwrap();
    poll_until(
        "Job, Tasks and Machine gone",
        Duration::from_secs(60),
        || async {
            let tasks = tasks_of(&client, &ns).await;
            let jobs = Api::<Job>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .unwrap();
            let machines = Api::<Machine>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .unwrap();
            (tasks.is_empty() && jobs.items.is_empty() && machines.items.is_empty()).then_some(())
        },
    )
    .await;
    ingot.stop();
}
