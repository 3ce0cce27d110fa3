//! Upstream Tinkerbell Rufio as a real peer: its manager, built from its Go module
//! (tools/rufio), runs the upstream samples against an IPMI BMC on the real control plane and
//! is stopped by its PID in the middle of a Job; `ingot run --controllers rufio` then adopts
//! the Machine, continues the Job from the Tasks Rufio wrote, and everything stays deletable.
//!
//! v0.6.5 honours `providerOptions` (OpenIPMI's ipmi_sim on a free port, cipher suite 3);
//! v0.3.2, as Harvester Seeder runs it, ignores them, so its BMC (ingot's IPMI emulator)
//! listens on the default port 623 of a loopback address of its own.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ingot_api::rufio::{Job, Machine, Task};
use ingot_ipmi_sim::FruInfo;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use rufio_support::*;
use serde_json::json;
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// An IPMI BMC as `ipmitool` reaches it.
struct Peer {
    host: String,
    port: u16,
    user: String,
    password: String,
}

impl Peer {
    /// `ipmitool` against the peer: its own answer, not ingot's.
    fn ipmitool(&self, args: &[&str]) -> String {
        let out = Command::new(require_apt_tool("ipmitool", "ipmitool"))
            .args(["-I", "lanplus", "-C", "3", "-N", "1", "-R", "3"])
            .args(["-H", &self.host, "-p", &self.port.to_string()])
            .args(["-U", &self.user, "-P", &self.password])
            .args(args)
            .output()
            .expect("run ipmitool");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    async fn power(&self) -> String {
        let peer = Peer { ..self.clone() };
        tokio::task::spawn_blocking(move || peer.ipmitool(&["chassis", "power", "status"]))
            .await
            .unwrap()
    }
}

impl Clone for Peer {
    fn clone(&self) -> Self {
        Peer {
            host: self.host.clone(),
            port: self.port,
            user: self.user.clone(),
            password: self.password.clone(),
        }
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_written_by_upstream_rufio_v0_6_5_are_adopted_continued_and_deletable() {
    let _serial = SERIAL.lock().await;
    let sim = peers::start_ipmi_sim(&FruInfo::example(5).encode());
    let peer = Peer {
        host: "127.0.0.1".into(),
        port: sim.addr.port(),
        user: peers::IPMI_USER.into(),
        password: peers::IPMI_PASSWORD.into(),
    };
    let options = json!({"ipmitool": {"port": sim.addr.port(), "cipherSuite": "3"}});
    handover("v0.6.5", &peer, options).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_written_by_upstream_rufio_v0_3_2_as_seeder_runs_it_are_adopted() {
    let _serial = SERIAL.lock().await;
    // v0.3.2 reaches IPMI on port 623 only: a loopback address of this test's own.
    let host = "127.0.93.32";
    let mut bmc = ingot_ipmi_sim::BmcConfig::new(0, "sim-password-032");
    bmc.port = 623;
    bmc.power_on = true;
    let fleet = ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig {
        bind: host.parse().unwrap(),
        bmcs: vec![bmc],
    })
    .await
    .expect("bind UDP 127.0.93.32:623 (the tests run as root, as CI does)");
    let peer = Peer {
        host: host.into(),
        port: 623,
        user: "admin".into(),
        password: "sim-password-032".into(),
    };
    handover("v0.3.2", &peer, serde_json::Value::Null).await;
    drop(fleet);
}

/// What upstream Rufio left behind when it was stopped after the Job's first Task.
struct UpstreamHalf {
    ns: String,
    upstream_status: serde_json::Value,
    handed_over: serde_json::Value,
    seen_off: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    watcher: tokio::task::JoinHandle<()>,
}

/// Upstream Rufio starts the sample Job, is stopped after its first Task, and ingot finishes.
async fn handover(version: &str, peer: &Peer, options: serde_json::Value) {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    // Upstream's Job reconciler lists Tasks from its cache: woken by its own status write
    // before the cache holds the Task it just created, it creates it again and fails the Job
    // with "already exists" (a defect of upstream's, not ingot's). Such a run hands over
    // nothing to adopt, so upstream's half starts again in a new namespace.
    let mut half = None;
    for attempt in 1..=3 {
        match upstream_half(version, peer, options.clone()).await {
            Ok(h) => {
                half = Some(h);
                break;
            }
            Err(failed) => {
                eprintln!("attempt {attempt}: upstream Rufio failed its own Job: {failed}")
            }
        }
    }
    let UpstreamHalf {
        ns,
        upstream_status,
        handed_over,
        seen_off,
        stop,
        watcher,
    } = half.expect("upstream Rufio failed its own Job three times running");

    // ingot, installed from the plain manifests as docs/migrate-from-seeder.md says and run as
    // their ServiceAccount, adopts and continues.
    let kubeconfig = chart_support::install_from_manifests(env.kubeconfig_path(), "rufio");
    let ingot = start_ingot_as(&kubeconfig, chart_support::MANIFESTS_NAMESPACE, &ns, &[]);
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
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    assert!(seen_off.load(Ordering::Relaxed), "the peer never went off");
    assert_eq!(peer.power().await, "Chassis Power is on");
    let boot = peer.ipmitool(&["chassis", "bootparam", "get", "5"]);
    assert!(boot.contains("Force PXE"), "{boot}");
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
    wait_for(
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
    ingot.kill();
}

/// Runs upstream Rufio on the samples until the Job's first Task completes, then stops it.
/// `Err` carries the Job's status when upstream failed the Job itself.
async fn upstream_half(
    version: &str,
    peer: &Peer,
    options: serde_json::Value,
) -> Result<UpstreamHalf, serde_json::Value> {
    let rufio_bin = rufio_binary(version);
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-peer").await.unwrap();
    // The peer starts on (a previous attempt may have left it off).
    wait_for("the IPMI peer on", Duration::from_secs(30), || async {
        if peer.power().await == "Chassis Power is on" {
            return Some(());
        }
        let p = peer.clone();
        tokio::task::spawn_blocking(move || p.ipmitool(&["chassis", "power", "on"]))
            .await
            .unwrap();
        None
    })
    .await;
    create_secret(
        &client,
        &ns,
        "sample-machine-auth",
        &peer.user,
        &peer.password,
    )
    .await;
    let machine = machine_sample(
        &ns,
        "machine-sample",
        "sample-machine-auth",
        &peer.host,
        options,
    );
    create(&client, &ns, &machine).await;
    // Watch the peer's own power state for the off in between.
    let seen_off = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen_off, stop, peer) = (seen_off.clone(), stop.clone(), peer.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if peer.power().await == "Chassis Power is off" {
                    seen_off.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // Upstream Rufio reads the Machine and starts the sample Job.
    let mut rufio = start_rufio(&rufio_bin, env.kubeconfig_path(), &ns);
    let upstream_status = wait_for(
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
    wait_for(
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
    if condition(&handed_over, "Failed")
        .is_some_and(|c| c.0 == "True" && c.1.contains("already exists"))
    {
        stop.store(true, Ordering::Relaxed);
        watcher.await.unwrap();
        return Err(handed_over);
    }
    assert!(
        condition(&handed_over, "Completed").is_none(),
        "upstream Rufio finished the whole Job before it was stopped: {handed_over}\n{}",
        rufio.log_tail()
    );
    assert_eq!(condition(&handed_over, "Running").unwrap().0, "True");
    Ok(UpstreamHalf {
        ns,
        upstream_status,
        handed_over,
        seen_off,
        stop,
        watcher,
    })
}
