//! Rufio end to end on the real control plane: upstream Rufio's own samples (Secret, Machine,
//! Job; only host, ports and credentials changed) against real peers (sushy-tools over TLS,
//! OpenIPMI's ipmi_sim), driven by `ingot run --controllers rufio`, with the peers' own state
//! read back from the peers. The scenarios run one at a time.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ingot_api::rufio::{Job, Machine, Task};
use ingot_bmc_sim::{BmcSpec, Fault, Fleet, FleetOptions};
use ingot_ipmi_sim::FruInfo;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use rufio_support::*;
use serde_json::{Value, json};
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// The sample Secret's credentials (admin / t0p-Secret), kept for sushy.
const SAMPLE_USER: &str = "admin";
const SAMPLE_PASSWORD: &str = "t0p-Secret";

/// Checks the Job and Task objects against Rufio's shapes.
async fn check_job_shape(client: &kube::Client, ns: &str, job: &str, status: &Value) {
    assert_eq!(condition(status, "Running").unwrap().0, "True");
    assert!(status["startTime"].is_string(), "{status}");
    assert!(status["completionTime"].is_string(), "{status}");
    let uid = Api::<Job>::namespaced(client.clone(), ns)
        .get(job)
        .await
        .unwrap()
        .uid()
        .unwrap();
    let tasks: Vec<Task> = tasks_of(client, ns)
        .await
        .into_iter()
        .filter(|t| t.name_any().starts_with(&format!("{job}-task-")))
        .collect();
    let mut names: Vec<String> = tasks.iter().map(|t| t.name_any()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            format!("{job}-task-0"),
            format!("{job}-task-1"),
            format!("{job}-task-2")
        ]
    );
    for t in &tasks {
        let owner = &t.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "Job");
        assert_eq!(owner.api_version, "bmc.tinkerbell.org/v1alpha1");
        assert_eq!(owner.name, job);
        assert_eq!(owner.uid, uid);
        assert_eq!(owner.controller, Some(true));
        let s = serde_json::to_value(&t.status).unwrap();
        assert_eq!(condition(&s, "Completed").unwrap().0, "True", "{s}");
        assert!(s["startTime"].is_string() && s["completionTime"].is_string());
    }
}

/// sushy-tools over TLS and OpenIPMI's ipmi_sim, both answering, and a Machine from upstream's
/// sample on each: `machine-sample` (Redfish) and `machine-sample-ipmi`, with their Secrets.
async fn sample_machines_on_sushy_and_ipmi_sim(
    client: &kube::Client,
    ns: &str,
) -> (Sushy, peers::IpmiSim) {
    let sushy = start_sushy_tls(SAMPLE_USER, SAMPLE_PASSWORD);
    let sim = peers::start_ipmi_sim(&FruInfo::example(3).encode());
    wait_for("sushy over TLS", Duration::from_secs(30), || async {
        sushy.system(SAMPLE_USER, SAMPLE_PASSWORD).await
    })
    .await;
    sim.wait_answering().await;

    create_secret(
        client,
        ns,
        "sample-machine-auth",
        SAMPLE_USER,
        SAMPLE_PASSWORD,
    )
    .await;
    create_secret(
        client,
        ns,
        "ipmi-machine-auth",
        peers::IPMI_USER,
        peers::IPMI_PASSWORD,
    )
    .await;
    let redfish = machine_sample(
        ns,
        "machine-sample",
        "sample-machine-auth",
        "127.0.0.1",
        json!({"redfish": {"port": sushy.port}}),
    );
    let ipmi = machine_sample(
        ns,
        "machine-sample-ipmi",
        "ipmi-machine-auth",
        "127.0.0.1",
        json!({"ipmitool": {"port": sim.addr.port(), "cipherSuite": "3"}}),
    );
    create(client, ns, &redfish).await;
    create(client, ns, &ipmi).await;

    (sushy, sim)
}

/// Waits until both sample Machines are `Contactable` and read `on`.
async fn wait_sample_machines(client: &kube::Client, ns: &str) {
    for machine in ["machine-sample", "machine-sample-ipmi"] {
        wait_contactable(client, ns, machine, "on", Duration::from_secs(60)).await;
    }
}

#[tokio::test]
async fn upstream_samples_on_sushy_over_tls_and_ipmi_sim() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio").await.unwrap();

    let (sushy, sim) = sample_machines_on_sushy_and_ipmi_sim(&client, &ns).await;

    let ingot = start_ingot(env.kubeconfig_path(), &ns, &[]);
    wait_sample_machines(&client, &ns).await;

    // The sample Job on sushy: off, PXE once, on. Watch the peer for the off in between.
    let saw_off = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (saw_off, stop) = (saw_off.clone(), stop.clone());
        let port = sushy.port;
        tokio::spawn(async move {
            let peer = PeerSushy { port };
            while !stop.load(Ordering::Relaxed) {
                if let Some(s) = peer.system().await
                    && s["PowerState"] == "Off"
                {
                    saw_off.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    };
    create(
        &client,
        &ns,
        &job_sample(&ns, "job-sample", "machine-sample"),
    )
    .await;
    let status = wait_job(&client, &ns, "job-sample", Duration::from_secs(90), &ingot).await;
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    check_job_shape(&client, &ns, "job-sample", &status).await;
    assert!(
        saw_off.load(Ordering::Relaxed),
        "sushy never reported Off during the Job"
    );
    let system = sushy.system(SAMPLE_USER, SAMPLE_PASSWORD).await.unwrap();
    assert_eq!(system["PowerState"], "On", "{system}");
    assert_eq!(
        system["Boot"]["BootSourceOverrideTarget"], "Pxe",
        "{system}"
    );

    // The same sample Job on ipmi_sim; its chassis state files are the peer's own state.
    let power_file = sim.dir.join("power");
    let seen_off = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen_off, stop, power_file) = (seen_off.clone(), stop.clone(), power_file.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if std::fs::read_to_string(&power_file).is_ok_and(|p| p.trim() == "0") {
                    seen_off.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    create(
        &client,
        &ns,
        &job_sample(&ns, "job-sample-ipmi", "machine-sample-ipmi"),
    )
    .await;
    let status = wait_job(
        &client,
        &ns,
        "job-sample-ipmi",
        Duration::from_secs(60),
        &ingot,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    check_job_shape(&client, &ns, "job-sample-ipmi", &status).await;
    assert!(seen_off.load(Ordering::Relaxed), "ipmi_sim never went off");
    assert_eq!(
        sim.ipmitool(&["chassis", "power", "status"]),
        "Chassis Power is on"
    );
    assert_eq!(
        std::fs::read_to_string(sim.dir.join("boot"))
            .unwrap()
            .trim(),
        "pxe"
    );

    // The Machines are read again after their Jobs and stay contactable, on.
    wait_contactable(
        &client,
        &ns,
        "machine-sample",
        "on",
        Duration::from_secs(20),
    )
    .await;
    wait_contactable(
        &client,
        &ns,
        "machine-sample-ipmi",
        "on",
        Duration::from_secs(20),
    )
    .await;

    // Everything is deletable (no finalizers), Tasks go with their Job.
    delete_all(&client, &ns).await;
    wait_for("objects deleted", Duration::from_secs(30), || async {
        let m = Api::<Machine>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .unwrap();
        let j = Api::<Job>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .unwrap();
        (m.items.is_empty() && j.items.is_empty()).then_some(())
    })
    .await;
    ingot.kill();
}

/// Reads sushy's own API for the watcher task.
struct PeerSushy {
    port: u16,
}

impl PeerSushy {
    async fn system(&self) -> Option<Value> {
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let url = format!(
            "https://127.0.0.1:{}/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef094",
            self.port
        );
        http.get(url)
            .basic_auth(SAMPLE_USER, Some(SAMPLE_PASSWORD))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    }
}

// A dead BMC among twenty healthy ones, one behaviour per test, over one fleet and one
// `ingot run --controllers rufio` (`DeadBmc`), in this order (`ingot_testenv::scenario!`; the
// emulated fleet runs in this process, on the scenario's worker threads).
ingot_testenv::scenario!(mod dead_bmc: DeadBmc {
    a_dead_bmc_delays_no_other_machine,
    a_bmc_that_never_answers_is_not_contactable_with_a_clear_message,
    a_closed_bmc_port_is_not_contactable,
    polls_reuse_one_session_per_bmc,
    a_deleted_machine_s_bmc_is_logged_out_and_the_others_keep_theirs,
    sigterm_logs_out_every_bmc_session,
});

/// Twenty healthy Redfish BMCs over TLS and one that never answers (the emulated fleet, in this
/// process), their Machines, one more Machine whose BMC port is closed, and `ingot run` started
/// last.
struct DeadBmc {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    client: kube::Client,
    ns: String,
    healthy: usize,
    fleet: Fleet,
    ingot: Operator,
    started: Instant,
}

impl DeadBmc {
    async fn start() -> Self {
        let _serial = SERIAL.lock().await;
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let ns = env.namespace("rufio-dead").await.unwrap();

        // Twenty healthy Redfish BMCs over TLS, and one that never answers.
        let healthy = 20;
        let fleet = sample_fleet(
            healthy + 1,
            BmcSpec {
                latency: Duration::from_millis(20),
                ..BmcSpec::default()
            },
        )
        .await;
        let dead = &fleet.bmcs[healthy];
        dead.state
            .set_fault(Some(Fault::Slow { delay_ms: 120_000 }));
        create_secret(
            &client,
            &ns,
            "sample-machine-auth",
            SAMPLE_USER,
            SAMPLE_PASSWORD,
        )
        .await;
        // The dead one first, so that it is reconciled first.
        let dead_machine = machine_sample(
            &ns,
            "dead",
            "sample-machine-auth",
            "127.0.0.1",
            json!({"redfish": {"port": dead.addr.port()}, "ipmitool": {"port": closed_udp_port()}}),
        );
        create(&client, &ns, &dead_machine).await;
        // A BMC address where nothing listens at all.
        let refused = machine_sample(
            &ns,
            "refused",
            "sample-machine-auth",
            "127.0.0.1",
            json!({"redfish": {"port": closed_port()}, "ipmitool": {"port": closed_udp_port()}}),
        );
        create(&client, &ns, &refused).await;
        for (i, bmc) in fleet.bmcs.iter().take(healthy).enumerate() {
            let m = machine_sample(
                &ns,
                &format!("m{i:02}"),
                "sample-machine-auth",
                "127.0.0.1",
                json!({"redfish": {"port": bmc.addr.port()}}),
            );
            create(&client, &ns, &m).await;
        }
        let started = Instant::now();
        // The dead BMC holds its reconcile for the Redfish timeout (8 s) before IPMI is tried.
        let ingot = start_ingot(
            env.kubeconfig_path(),
            &ns,
            &[
                "--rufio-redfish-timeout-seconds=8",
                "--rufio-evict-interval-seconds=1",
            ],
        );
        DeadBmc {
            _serial,
            client,
            ns,
            healthy,
            fleet,
            ingot,
            started,
        }
    }

    async fn finish(self) {
        let (client, ns) = (&self.client, &self.ns);
        delete_all(client, ns).await;
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }

    /// Every healthy Machine is contactable while the dead BMC is still being waited for (8 s
    /// Redfish timeout, then the IPMI probe): it held nobody else up.
    async fn a_dead_bmc_delays_no_other_machine(&mut self) {
        let (client, ns, healthy, started) = (&self.client, &self.ns, self.healthy, self.started);
        for i in 0..healthy {
            wait_contactable(
                client,
                ns,
                &format!("m{i:02}"),
                "on",
                Duration::from_secs(30),
            )
            .await;
        }
        let all_known = started.elapsed();
        // The dead BMC is still being waited for (8 s Redfish timeout, then the IPMI probe):
        // it held nobody else up.
        let dead_status = machine_status(client, ns, "dead").await;
        assert!(
            dead_status.is_null() || condition(&dead_status, "Contactable").is_none(),
            "the dead BMC was judged before the healthy ones were read ({all_known:?}): {dead_status}"
        );
    }

    /// The BMC that never answers: Contactable False, a message naming the connection, its
    /// address and "no answer", no password; power state unknown.
    async fn a_bmc_that_never_answers_is_not_contactable_with_a_clear_message(&mut self) {
        let (client, ns) = (&self.client, &self.ns);
        let dead = &self.fleet.bmcs[self.healthy];
        let (status, message) = wait_for(
            "the dead Machine to be judged",
            Duration::from_secs(60),
            || async {
                let s = machine_status(client, ns, "dead").await;
                condition(&s, "Contactable")
            },
        )
        .await;
        assert_eq!(status, "False");
        assert!(
            message.contains("failed to open connection to BMC")
                && message.contains(&format!(
                    "redfish at https://127.0.0.1:{}",
                    dead.addr.port()
                ))
                && message.contains("no answer"),
            "{message}"
        );
        assert!(!message.contains(SAMPLE_PASSWORD));
        assert_eq!(
            machine_status(client, ns, "dead").await["powerState"],
            "unknown"
        );
    }

    /// A BMC address where nothing listens: Contactable False, "cannot reach the BMC".
    async fn a_closed_bmc_port_is_not_contactable(&mut self) {
        let (client, ns) = (&self.client, &self.ns);
        let (status, message) = wait_for("refused judged", Duration::from_secs(30), || async {
            condition(&machine_status(client, ns, "refused").await, "Contactable")
        })
        .await;
        assert_eq!(status, "False");
        assert!(message.contains("cannot reach the BMC"), "{message}");
    }

    /// Polled every 2 s, through one session per BMC: never a login per poll.
    async fn polls_reuse_one_session_per_bmc(&mut self) {
        let (fleet, healthy) = (&self.fleet, self.healthy);
        let before: Vec<u64> = fleet.bmcs[..healthy]
            .iter()
            .map(|b| b.state.snapshot().requests)
            .collect();
        tokio::time::sleep(Duration::from_secs(7)).await;
        for (i, b) in fleet.bmcs[..healthy].iter().enumerate() {
            let snap = b.state.snapshot();
            assert!(
                snap.requests > before[i],
                "BMC {i} was not polled again: {snap:?}"
            );
            assert_eq!(snap.sessions_created, 1, "BMC {i}: {snap:?}");
            assert_eq!(snap.sessions, 1, "BMC {i}: {snap:?}");
        }
    }

    /// Machines deleted: their BMCs are logged out at the next sweep; the others keep theirs.
    async fn a_deleted_machine_s_bmc_is_logged_out_and_the_others_keep_theirs(&mut self) {
        let (client, ns, fleet, healthy) = (&self.client, &self.ns, &self.fleet, self.healthy);
        let deleted = 5;
        let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
        for i in 0..deleted {
            machines
                .delete(&format!("m{i:02}"), &DeleteParams::default())
                .await
                .unwrap();
        }
        wait_for(
            "the deleted Machines' BMC sessions to be logged out",
            Duration::from_secs(30),
            || async {
                fleet.bmcs[..deleted]
                    .iter()
                    .all(|b| b.state.snapshot().sessions == 0)
                    .then_some(())
            },
        )
        .await;
        for (i, b) in fleet.bmcs[deleted..healthy].iter().enumerate() {
            let snap = b.state.snapshot();
            assert_eq!(
                snap.sessions,
                1,
                "BMC {}: kept while its Machine exists: {snap:?}",
                i + deleted
            );
            assert_eq!(snap.sessions_created, 1, "BMC {}: {snap:?}", i + deleted);
        }
    }

    /// SIGTERM: every session is logged out.
    async fn sigterm_logs_out_every_bmc_session(&mut self) {
        let (ingot, fleet, healthy) = (&self.ingot, &self.fleet, self.healthy);
        ingot.terminate();
        ingot.wait_exit(Duration::from_secs(30)).await;
        for (i, b) in fleet.bmcs[..healthy].iter().enumerate() {
            assert_eq!(
                b.state.snapshot().sessions,
                0,
                "BMC {i} session left open\n{}",
                ingot.log_tail()
            );
        }
    }
}

/// A reboot is sent once per Task, whatever the watch cache shows: each BMC counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboots_are_sent_exactly_once() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-once").await.unwrap();
    // One Redfish BMC per vendor profile, and two IPMI BMCs.
    let fleet = sample_fleet(
        4,
        BmcSpec {
            power_delay: Duration::from_millis(300),
            ..BmcSpec::default()
        },
    )
    .await;
    let mut ipmi_cfg = ingot_ipmi_sim::FleetConfig::uniform(2, SAMPLE_PASSWORD);
    for b in &mut ipmi_cfg.bmcs {
        b.power_on = true;
    }
    let ipmi = ingot_ipmi_sim::serve(ipmi_cfg).await.unwrap();
    create_secret(
        &client,
        &ns,
        "sample-machine-auth",
        SAMPLE_USER,
        SAMPLE_PASSWORD,
    )
    .await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let mut names = Vec::new();
    for (i, b) in fleet.bmcs.iter().enumerate() {
        let m = machine_sample(
            &ns,
            &format!("redfish-{i}"),
            "sample-machine-auth",
            "127.0.0.1",
            json!({"redfish": {"port": b.addr.port()}, "ipmitool": {"port": closed_udp_port()}}),
        );
        create(&client, &ns, &m).await;
        let mut j = job_sample(&ns, &format!("reset-{i}"), &format!("redfish-{i}"));
        j.spec.tasks = serde_json::from_value(json!([{"powerAction": "reset"}])).unwrap();
        jobs.create(&Default::default(), &j).await.unwrap();
        names.push(format!("reset-{i}"));
    }
    for (i, b) in ipmi.bmcs().iter().enumerate() {
        let m = machine_sample(
            &ns,
            &format!("ipmi-{i}"),
            "sample-machine-auth",
            "127.0.0.1",
            json!({"redfish": {"port": closed_port()}, "ipmitool": {"port": b.addr().port()}}),
        );
        create(&client, &ns, &m).await;
        let mut j = job_sample(&ns, &format!("reboot-ipmi-{i}"), &format!("ipmi-{i}"));
        j.spec.tasks =
            serde_json::from_value(json!([{"powerAction": "cycle"}, {"powerAction": "reset"}]))
                .unwrap();
        jobs.create(&Default::default(), &j).await.unwrap();
        names.push(format!("reboot-ipmi-{i}"));
    }
    let ingot = start_ingot(env.kubeconfig_path(), &ns, &[]);
    for name in &names {
        wait_job(&client, &ns, name, Duration::from_secs(60), &ingot).await;
    }
    for (i, b) in fleet.bmcs.iter().enumerate() {
        assert_eq!(b.state.snapshot().resets, 1, "Redfish BMC {i}");
    }
    for (i, b) in ipmi.bmcs().iter().enumerate() {
        // Chassis Control 2 (power cycle), then 3 (hard reset), each once.
        assert_eq!(b.stats().chassis_controls, vec![2, 3], "IPMI BMC {i}");
    }
    ingot.kill();
    delete_all(&client, &ns).await;
}

/// The Machine is read again right after its Job ends, not at its next interval (10 min here);
/// an ignored provider option and a failed read are reported as Events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_is_read_again_right_after_its_job() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-refresh").await.unwrap();
    let fleet = sample_fleet(
        1,
        BmcSpec {
            power_delay: Duration::from_millis(200),
            ..BmcSpec::default()
        },
    )
    .await;
    create_secret(
        &client,
        &ns,
        "sample-machine-auth",
        SAMPLE_USER,
        SAMPLE_PASSWORD,
    )
    .await;
    let m = machine_sample(
        &ns,
        "machine-sample",
        "sample-machine-auth",
        "127.0.0.1",
        json!({"redfish": {"port": fleet.bmcs[0].addr.port()}, "intelAMT": {"port": 16992}}),
    );
    create(&client, &ns, &m).await;
    let gone = machine_sample(
        &ns,
        "gone",
        "sample-machine-auth",
        "127.0.0.1",
        json!({"redfish": {"port": closed_port()}, "ipmitool": {"port": closed_udp_port()}}),
    );
    create(&client, &ns, &gone).await;
    let ingot = start_ingot(
        env.kubeconfig_path(),
        &ns,
        &["--rufio-machine-interval-seconds=600"],
    );
    wait_contactable(
        &client,
        &ns,
        "machine-sample",
        "on",
        Duration::from_secs(30),
    )
    .await;
    let mut j = job_sample(&ns, "off", "machine-sample");
    j.spec.tasks = serde_json::from_value(json!([{"powerAction": "off"}])).unwrap();
    create(&client, &ns, &j).await;
    wait_job(&client, &ns, "off", Duration::from_secs(30), &ingot).await;
    wait_for(
        "the Machine to read off",
        Duration::from_secs(10),
        || async {
            (machine_status(&client, &ns, "machine-sample").await["powerState"] == "off")
                .then_some(())
        },
    )
    .await;
    assert_eq!(fleet.bmcs[0].state.snapshot().power_state, "Off");

    let events = || async {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .unwrap()
            .items
    };
    wait_for("the Events", Duration::from_secs(20), || async {
        let events = events().await;
        let has = |object: &str, reason: &str| {
            events.iter().any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
                    && e.reason.as_deref() == Some(reason)
            })
        };
        (has("machine-sample", "ProviderOptionsIgnored") && has("gone", "GetPowerStateFailed"))
            .then_some(())
    })
    .await;
    let note = events()
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("ProviderOptionsIgnored"))
        .and_then(|e| e.note)
        .unwrap();
    assert!(note.contains("providerOptions.intelAMT"), "{note}");
    ingot.kill();
    delete_all(&client, &ns).await;
}

/// A Machine's Secret is read once, not at every poll, and read again as soon as it changes:
/// a wrong password makes the Machine not contactable at its next poll, the right one makes it
/// contactable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_is_read_once_and_again_when_it_changes() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-secret").await.unwrap();
    let fleet = sample_fleet(1, BmcSpec::default()).await;
    let secret = "sample-machine-auth";
    create_secret(&client, &ns, secret, SAMPLE_USER, SAMPLE_PASSWORD).await;
    let m = machine_sample(
        &ns,
        "machine-sample",
        secret,
        "127.0.0.1",
        json!({"redfish": {"port": fleet.bmcs[0].addr.port()}}),
    );
    create(&client, &ns, &m).await;
    let ingot = start_ingot(
        env.kubeconfig_path(),
        &ns,
        &["--rufio-machine-interval-seconds=1"],
    );
    let port = ingot.http_addr().await;
    wait_contactable(
        &client,
        &ns,
        "machine-sample",
        "on",
        Duration::from_secs(30),
    )
    .await;
    let bmc = &fleet.bmcs[0].state;
    // Reads made before the Secret watch has listed go to the API server; after that, polls
    // (each one request at the BMC) read no Secret.
    wait_for(
        "three polls without a Secret read",
        Duration::from_secs(30),
        || async {
            let (gets, requests) = (
                kube_requests(port, "get", "secrets").await,
                bmc.snapshot().requests,
            );
            // Polls that stop coming fail the wait below instead of hanging here.
            let three_polls = async {
                while bmc.snapshot().requests < requests + 3 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(10), three_polls)
                .await
                .ok()?;
            (kube_requests(port, "get", "secrets").await == gets).then_some(())
        },
    )
    .await;

    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let set_password = |password: &'static str| {
        let secrets = secrets.clone();
        async move {
            secrets
                .patch(
                    secret,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"stringData": {"password": password}})),
                )
                .await
                .unwrap();
        }
    };
    let contactable = |wanted: &'static str| {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            let status = machine_status(&client, &ns, "machine-sample").await;
            (condition(&status, "Contactable").map(|c| c.0).as_deref() == Some(wanted))
                .then_some(())
        }
    };
    set_password("not-the-password").await;
    wait_for(
        "Contactable=False with the changed password",
        Duration::from_secs(15),
        || contactable("False"),
    )
    .await;
    set_password(SAMPLE_PASSWORD).await;
    wait_for(
        "Contactable=True with the password put back",
        Duration::from_secs(15),
        || contactable("True"),
    )
    .await;
    ingot.kill();
    delete_all(&client, &ns).await;
}

/// A fleet of `n` emulated BMCs over TLS that take the sample credentials (`spec` for the
/// rest).
async fn sample_fleet(n: usize, spec: BmcSpec) -> Fleet {
    Fleet::uniform(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        n,
        BmcSpec {
            username: SAMPLE_USER.into(),
            password: SAMPLE_PASSWORD.into(),
            ..spec
        },
    )
    .await
    .unwrap()
}

/// A [`sample_fleet`], the sample Secret, and one Machine `m<i>` per BMC (Redfish port given,
/// IPMI closed).
async fn machines_on_fleet(client: &kube::Client, ns: &str, n: usize, spec: BmcSpec) -> Fleet {
    let fleet = sample_fleet(n, spec).await;
    create_secret(
        client,
        ns,
        "sample-machine-auth",
        SAMPLE_USER,
        SAMPLE_PASSWORD,
    )
    .await;
    for (i, b) in fleet.bmcs.iter().enumerate() {
        let m = machine_sample(
            ns,
            &format!("m{i}"),
            "sample-machine-auth",
            "127.0.0.1",
            json!({"redfish": {"port": b.addr.port()}, "ipmitool": {"port": closed_udp_port()}}),
        );
        create(client, ns, &m).await;
    }
    fleet
}

/// A failed Task fails its Job with the Task's message; a BMC that is busy for a while is
/// retried with backoff until it answers (Rufio fails the Task at the first error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_fails_the_job_and_a_busy_bmc_is_retried() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-fail").await.unwrap();
    let fleet = machines_on_fleet(
        &client,
        &ns,
        2,
        BmcSpec {
            power_delay: Duration::from_millis(100),
            initial_power_on: false,
            ..BmcSpec::default()
        },
    )
    .await;
    let ingot = start_ingot(env.kubeconfig_path(), &ns, &[]);
    wait_contactable(&client, &ns, "m0", "off", Duration::from_secs(30)).await;

    // on, then an action the BMC cannot do (this emulated iDRAC has no floppy device): the
    // Job fails with the second Task's message.
    let mut j = job_sample(&ns, "fails", "m0");
    j.spec.tasks = serde_json::from_value(json!([
        {"powerAction": "on"},
        {"virtualMediaAction": {"kind": "Floppy", "mediaURL": "http://127.0.0.1:1/x.img"}},
        {"powerAction": "off"}
    ]))
    .unwrap();
    create(&client, &ns, &j).await;
    let status = wait_for("the Job to fail", Duration::from_secs(30), || async {
        let s = job_status(&client, &ns, "fails").await;
        condition(&s, "Failed").map(|c| (c, s))
    })
    .await;
    let ((failed, message), status) = status;
    assert_eq!(failed, "True");
    assert!(
        message.starts_with(&format!(
            "task {ns}/fails-task-1 failed: insert virtual media: not supported by this BMC: virtual media of kind Floppy (the BMC offers: CD, DVD, USBStick)"
        )),
        "{message}"
    );
    assert!(condition(&status, "Completed").is_none(), "{status}");
    assert!(status["completionTime"].is_null(), "{status}");
    let names: Vec<String> = tasks_of(&client, &ns)
        .await
        .iter()
        .map(|t| t.name_any())
        .collect();
    assert!(!names.contains(&"fails-task-2".to_owned()), "{names:?}");
    assert_eq!(fleet.bmcs[0].state.snapshot().power_state, "On");

    // m1's BMC answers 503 for a few seconds: the Task waits it out and completes.
    wait_contactable(&client, &ns, "m1", "off", Duration::from_secs(30)).await;
    fleet.bmcs[1].state.set_fault(Some(Fault::Unavailable));
    let mut j = job_sample(&ns, "busy", "m1");
    j.spec.tasks = serde_json::from_value(json!([{"powerAction": "on"}])).unwrap();
    create(&client, &ns, &j).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = job_status(&client, &ns, "busy").await;
    assert!(condition(&s, "Failed").is_none(), "failed while busy: {s}");
    assert_eq!(fleet.bmcs[1].state.snapshot().power_state, "Off");
    fleet.bmcs[1].state.set_fault(None);
    wait_job(&client, &ns, "busy", Duration::from_secs(60), &ingot).await;
    assert_eq!(fleet.bmcs[1].state.snapshot().power_state, "On");
    ingot.kill();
    delete_all(&client, &ns).await;
}

/// A repeatable action does not wait for the API server to store its Task: the Job sends it
/// first, so the BMC has it by the time the Task appears. The Task is created marked `sent`
/// and only verifies, so the BMC receives the action once; the effect already shows, so one
/// status write starts and completes it. The Task is created once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeatable_action_reaches_the_bmc_before_its_task_exists() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-ahead").await.unwrap();
    // Each request takes 300 ms at the BMC: a Task that sent the action only once it existed
    // would be seen well before the BMC had it.
    let fleet = machines_on_fleet(
        &client,
        &ns,
        1,
        BmcSpec {
            latency: Duration::from_millis(300),
            power_delay: Duration::from_millis(200),
            ..BmcSpec::default()
        },
    )
    .await;
    let ingot = start_ingot(
        env.kubeconfig_path(),
        &ns,
        &["--rufio-machine-interval-seconds=600"],
    );
    let port = ingot.http_addr().await;
    wait_contactable(&client, &ns, "m0", "on", Duration::from_secs(30)).await;

    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let mut appeared = std::pin::pin!(watcher(tasks, watcher::Config::default()).applied_objects());
    let mut j = job_sample(&ns, "off", "m0");
    j.spec.tasks = serde_json::from_value(json!([{"powerAction": "off"}])).unwrap();
    create(&client, &ns, &j).await;
    let first = tokio::time::timeout(Duration::from_secs(30), appeared.next())
        .await
        .expect("the Task within 30 s")
        .expect("the Task watch")
        .expect("a Task");
    let requests = fleet.bmcs[0].state.reset_requests();
    assert_eq!(first.name_any(), "off-task-0");
    assert_eq!(
        requests,
        ["ForceOff"],
        "the BMC had the power-off request when its Task appeared"
    );
    assert_eq!(
        first
            .annotations()
            .get(ingot_controllers::rufio::task::SENT_ANNOTATION)
            .map(String::as_str),
        Some("sent")
    );
    // The power-off took effect (200 ms) before the Task's first reading of the BMC (300 ms):
    // one status write starts and completes the Task, so no version of it has a `startTime`
    // without being `Completed`.
    let completed = |t: &Task| {
        t.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Completed" && c.status == "True")
        })
    };
    let mut versions = vec![first];
    while !versions.last().is_some_and(completed) {
        let next = tokio::time::timeout(Duration::from_secs(30), appeared.next())
            .await
            .expect("the Task completed within 30 s")
            .expect("the Task watch")
            .expect("a Task");
        versions.push(next);
    }
    let started_only = versions
        .iter()
        .filter(|t| !completed(t) && t.status.as_ref().is_some_and(|s| s.start_time.is_some()))
        .count();
    assert_eq!(
        started_only,
        0,
        "a Task whose action already shows was started and completed in two writes: {:?}",
        versions.iter().map(|t| &t.status).collect::<Vec<_>>()
    );
    let done = versions
        .last()
        .and_then(|t| t.status.as_ref())
        .expect("a status");
    assert!(
        done.start_time.is_some() && done.completion_time.is_some(),
        "{done:?}"
    );
    wait_job(&client, &ns, "off", Duration::from_secs(30), &ingot).await;
    assert_eq!(fleet.bmcs[0].state.snapshot().power_state, "Off");
    assert_eq!(
        fleet.bmcs[0].state.reset_requests(),
        ["ForceOff"],
        "sent once"
    );
    // The Job's `Running` write wakes it again before the Task cache shows the Task it just
    // created: it waits for the Task instead of creating it again (a 409).
    assert_eq!(
        kube_requests(port, "create", "tasks").await,
        1.0,
        "Task creates sent by the operator"
    );
    ingot.kill();
    delete_all(&client, &ns).await;
}

/// A new Job's action goes out when the watch delivers the Job, not when a reconcile slot is
/// free. With one Job reconciled at a time, Job A's reconcile is held by its slow BMC (its
/// send ahead waits up to 2 s before Task A is created); Job B, created meanwhile, still
/// reaches its own BMC before Task A exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_jobs_action_does_not_wait_for_a_reconcile_slot() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-sight").await.unwrap();
    let fleet = machines_on_fleet(
        &client,
        &ns,
        2,
        BmcSpec {
            latency: Duration::from_millis(50),
            power_delay: Duration::from_millis(200),
            ..BmcSpec::default()
        },
    )
    .await;
    let ingot = start_ingot(
        env.kubeconfig_path(),
        &ns,
        &[
            "--rufio-machine-interval-seconds=600",
            "--rufio-task-concurrency=1",
        ],
    );
    for m in ["m0", "m1"] {
        wait_contactable(&client, &ns, m, "on", Duration::from_secs(30)).await;
    }
    let (slow, fast) = (&fleet.bmcs[0].state, &fleet.bmcs[1].state);
    slow.set_fault(Some(Fault::Slow { delay_ms: 5000 }));
    let requests_before = slow.snapshot().requests;
    let off = |name: &str, machine: &str| {
        let mut j = job_sample(&ns, name, machine);
        j.spec.tasks = serde_json::from_value(json!([{"powerAction": "off"}])).unwrap();
        j
    };
    create(&client, &ns, &off("a", "m0")).await;
    wait_for(
        "Job a's request at its BMC",
        Duration::from_secs(10),
        || async { (slow.snapshot().requests > requests_before).then_some(()) },
    )
    .await;
    create(&client, &ns, &off("b", "m1")).await;
    wait_for(
        "Job b's power-off at its BMC",
        Duration::from_secs(10),
        || async { (fast.reset_requests() == ["ForceOff"]).then_some(()) },
    )
    .await;
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    assert!(
        tasks.get_opt("a-task-0").await.unwrap().is_none(),
        "Job b's action waited for Job a's reconcile (Task a-task-0 exists)"
    );
    slow.set_fault(None);
    for job in ["a", "b"] {
        wait_job(&client, &ns, job, Duration::from_secs(60), &ingot).await;
    }
    assert_eq!(slow.snapshot().power_state, "Off");
    assert_eq!(fast.snapshot().power_state, "Off");
    assert_eq!(fast.reset_requests(), ["ForceOff"], "sent once");
    ingot.kill();
    delete_all(&client, &ns).await;
}

/// An operator killed at either Rufio crash point neither loses nor repeats a power action;
/// the BMCs count the requests. Killed after a power-off reached the BMC ahead of its Task,
/// the next process may send it again (harmless; its client reads the power state first) and
/// goes on with the Job. Killed after a reset reached the BMC but before its Task recorded
/// that, the next process fails the Task rather than resetting the machine a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_operator_neither_loses_nor_repeats_a_power_action() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-crash").await.unwrap();
    let fleet = machines_on_fleet(
        &client,
        &ns,
        2,
        BmcSpec {
            latency: Duration::from_millis(50),
            power_delay: Duration::from_millis(300),
            ..BmcSpec::default()
        },
    )
    .await;
    let (ahead, reboot) = (&fleet.bmcs[0].state, &fleet.bmcs[1].state);
    let start = |crash_point: Option<&str>| {
        let flag = crash_point.map(|p| format!("--crash-point={p}"));
        let mut extra = vec!["--rufio-machine-interval-seconds=600"];
        extra.extend(flag.as_deref());
        start_ingot(env.kubeconfig_path(), &ns, &extra)
    };

    // Killed between sending a power-off ahead and creating its Task.
    let ingot = start(Some("rufio-after-send-ahead"));
    wait_contactable(&client, &ns, "m0", "on", Duration::from_secs(30)).await;
    let mut j = job_sample(&ns, "off-on", "m0");
    j.spec.tasks =
        serde_json::from_value(json!([{"powerAction": "off"}, {"powerAction": "on"}])).unwrap();
    create(&client, &ns, &j).await;
    ingot
        .wait_crashed("rufio-after-send-ahead", Duration::from_secs(30))
        .await;
    assert_eq!(ahead.reset_requests(), ["ForceOff"]);
    assert!(
        tasks_of(&client, &ns).await.is_empty(),
        "a Task was created"
    );

    let ingot = start(Some("rufio-after-destructive-send"));
    wait_job(&client, &ns, "off-on", Duration::from_secs(60), &ingot).await;
    let requests = ahead.reset_requests();
    let offs = requests.iter().filter(|r| *r == "ForceOff").count();
    assert!(
        (1..=2).contains(&offs)
            && requests[offs..] == ["On"]
            && requests[..offs].iter().all(|r| r == "ForceOff"),
        "power-off at most once per process, then power-on once: {requests:?}"
    );
    assert_eq!(ahead.snapshot().power_state, "On");

    // Killed between the BMC accepting a reset and its Task recording that.
    let mut j = job_sample(&ns, "reset", "m1");
    j.spec.tasks = serde_json::from_value(json!([{"powerAction": "reset"}])).unwrap();
    create(&client, &ns, &j).await;
    ingot
        .wait_crashed("rufio-after-destructive-send", Duration::from_secs(30))
        .await;
    assert_eq!(reboot.snapshot().resets, 1);

    let ingot = start(None);
    let status = wait_for("Job reset to end", Duration::from_secs(60), || async {
        let s = job_status(&client, &ns, "reset").await;
        (condition(&s, "Failed").is_some() || condition(&s, "Completed").is_some()).then_some(s)
    })
    .await;
    let failed = condition(&status, "Failed");
    assert!(
        failed
            .as_ref()
            .is_some_and(|(f, m)| f == "True" && m.contains("interrupted")),
        "the interrupted reset did not fail its Job: {status}\n{}",
        ingot.log_tail()
    );
    // The machine rebooted once; the next process never sent the reset again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(reboot.snapshot().resets, 1);
    assert_eq!(
        reboot.reset_requests().len(),
        1,
        "{:?}",
        reboot.reset_requests()
    );
    drop(ingot);
    delete_all(&client, &ns).await;
}

/// `providerOptions.redfish.systemName` picks the system on a BMC that has several (sushy-tools
/// with two), by `Name` or `Id`: the Machine shows that system's power state and Jobs act on it
/// alone, read back from sushy. A name no system has makes the Machine not contactable, with a
/// message that names the field and the BMC's systems, rather than acting on the first system;
/// on a BMC with a single system, that system is used whatever the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_name_picks_the_system_on_a_bmc_with_several() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-systems").await.unwrap();
    // Sorted by path, `fake` (27946b59-...) comes first: the named system is the second.
    let sushy = start_sushy_tls_with(
        SAMPLE_USER,
        SAMPLE_PASSWORD,
        &[SushySystem {
            name: "blade-2",
            uuid: "f1e2d3c4-0000-4000-8000-000000000002",
            power_state: "Off",
        }],
    );
    let power_of = |name: &'static str| {
        let sushy = &sushy;
        async move {
            sushy
                .system_named(SAMPLE_USER, SAMPLE_PASSWORD, name)
                .await
                .map(|s| s["PowerState"].as_str().unwrap_or_default().to_owned())
        }
    };
    wait_for("sushy over TLS", Duration::from_secs(30), || async {
        power_of("blade-2").await
    })
    .await;
    create_secret(
        &client,
        &ns,
        "sample-machine-auth",
        SAMPLE_USER,
        SAMPLE_PASSWORD,
    )
    .await;
    // On a BMC with one system, that system is meant whatever the name says (as bmclib).
    let single = sample_fleet(1, BmcSpec::default()).await;
    let machines = [
        ("blade", sushy.port, "blade-2"),
        (
            "blade-by-id",
            sushy.port,
            "f1e2d3c4-0000-4000-8000-000000000002",
        ),
        ("missing", sushy.port, "blade-9"),
        ("single", single.bmcs[0].addr.port(), "not-its-name"),
    ];
    for (machine, port, system) in machines {
        let m = machine_sample(
            &ns,
            machine,
            "sample-machine-auth",
            "127.0.0.1",
            json!({"redfish": {"port": port, "systemName": system}}),
        );
        create(&client, &ns, &m).await;
    }
    let ingot = start_ingot(env.kubeconfig_path(), &ns, &[]);
    wait_contactable(&client, &ns, "blade", "off", Duration::from_secs(30)).await;
    wait_contactable(&client, &ns, "blade-by-id", "off", Duration::from_secs(30)).await;
    wait_contactable(&client, &ns, "single", "on", Duration::from_secs(30)).await;

    for (job, action, after) in [("blade-on", "on", "On"), ("blade-off", "off", "Off")] {
        let mut j = job_sample(&ns, job, "blade");
        j.spec.tasks = serde_json::from_value(json!([{ "powerAction": action }])).unwrap();
        create(&client, &ns, &j).await;
        wait_job(&client, &ns, job, Duration::from_secs(60), &ingot).await;
        assert_eq!(power_of("blade-2").await.as_deref(), Some(after));
        assert_eq!(
            power_of("fake").await.as_deref(),
            Some("On"),
            "the other system was touched"
        );
    }

    let (contactable, message) = wait_for(
        "Machine missing's Contactable condition",
        Duration::from_secs(30),
        || async {
            condition(
                &machine_status(&client, &ns, "missing").await,
                "Contactable",
            )
        },
    )
    .await;
    assert_eq!(contactable, "False", "{message}");
    assert!(
        message.contains("providerOptions.redfish.systemName")
            && message.contains("\"blade-9\"")
            && message.contains("\"blade-2\""),
        "{message}"
    );
    assert_eq!(power_of("fake").await.as_deref(), Some("On"));
    drop(ingot);
    delete_all(&client, &ns).await;
}

/// `providerOptions.redfish.useBasicAuth: true` sends HTTP Basic credentials with every request
/// and never opens a Redfish session, as bmclib does with it; a Machine without it logs in
/// once. The BMCs count the sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_basic_auth_opens_no_session() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-basic").await.unwrap();
    let fleet = machines_on_fleet(&client, &ns, 1, BmcSpec::default()).await;
    let basic = sample_fleet(1, BmcSpec::default()).await;
    let m = machine_sample(
        &ns,
        "basic",
        "sample-machine-auth",
        "127.0.0.1",
        json!({"redfish": {"port": basic.bmcs[0].addr.port(), "useBasicAuth": true}}),
    );
    create(&client, &ns, &m).await;
    let ingot = start_ingot(env.kubeconfig_path(), &ns, &[]);
    wait_contactable(&client, &ns, "basic", "on", Duration::from_secs(30)).await;
    wait_contactable(&client, &ns, "m0", "on", Duration::from_secs(30)).await;
    let mut j = job_sample(&ns, "basic-off", "basic");
    j.spec.tasks = serde_json::from_value(json!([{"powerAction": "off"}])).unwrap();
    create(&client, &ns, &j).await;
    wait_job(&client, &ns, "basic-off", Duration::from_secs(60), &ingot).await;

    let with_basic = basic.bmcs[0].state.snapshot();
    assert_eq!(with_basic.power_state, "Off");
    assert_eq!(with_basic.sessions_created, 0, "a session was opened");
    assert!(with_basic.requests > 0);
    assert_eq!(fleet.bmcs[0].state.snapshot().sessions_created, 1);
    drop(ingot);
    delete_all(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_media_job_attaches_the_image_on_sushy_and_ipmi_has_none() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-media").await.unwrap();
    let (sushy, _sim) = sample_machines_on_sushy_and_ipmi_sim(&client, &ns).await;
    let image = ingot_bmc_sim::ImageServer::start("hook.iso", b"hook image".to_vec())
        .await
        .unwrap();
    let ingot = start_ingot(env.kubeconfig_path(), &ns, &[]);
    wait_sample_machines(&client, &ns).await;

    // Attach the image and boot from it once, as a Tinkerbell ISO boot does.
    let mut j = job_sample(&ns, "media-boot", "machine-sample");
    j.spec.tasks = serde_json::from_value(json!([
        {"virtualMediaAction": {"kind": "CD", "mediaURL": image.url}},
        {"oneTimeBootDeviceAction": {"device": ["cdrom"], "efiBoot": true}},
    ]))
    .unwrap();
    create(&client, &ns, &j).await;
    wait_job(&client, &ns, "media-boot", Duration::from_secs(60), &ingot).await;
    let cd = sushy
        .virtual_cd(SAMPLE_USER, SAMPLE_PASSWORD)
        .await
        .unwrap();
    assert_eq!(cd["Image"], image.url.as_str(), "{cd}");
    assert_eq!(cd["Inserted"], true, "{cd}");
    assert_eq!(image.fetches(), 1, "sushy fetched the image once");
    let system = sushy.system(SAMPLE_USER, SAMPLE_PASSWORD).await.unwrap();
    assert_eq!(system["Boot"]["BootSourceOverrideTarget"], "Cd", "{system}");

    // No mediaURL: eject.
    let mut j = job_sample(&ns, "media-eject", "machine-sample");
    j.spec.tasks = serde_json::from_value(json!([{"virtualMediaAction": {"kind": "CD"}}])).unwrap();
    create(&client, &ns, &j).await;
    wait_job(&client, &ns, "media-eject", Duration::from_secs(60), &ingot).await;
    let cd = sushy
        .virtual_cd(SAMPLE_USER, SAMPLE_PASSWORD)
        .await
        .unwrap();
    assert_eq!(cd["Inserted"], false, "{cd}");

    // IPMI has no virtual media: the Task fails saying so, and the Job with it.
    let mut j = job_sample(&ns, "media-ipmi", "machine-sample-ipmi");
    j.spec.tasks = serde_json::from_value(json!([
        {"virtualMediaAction": {"kind": "CD", "mediaURL": image.url}},
    ]))
    .unwrap();
    create(&client, &ns, &j).await;
    let status = wait_for(
        "Job media-ipmi to fail",
        Duration::from_secs(60),
        || async {
            let s = job_status(&client, &ns, "media-ipmi").await;
            condition(&s, "Failed")
                .is_some_and(|c| c.0 == "True")
                .then_some(s)
        },
    )
    .await;
    let (_, message) = condition(&status, "Failed").unwrap();
    assert!(
        message.starts_with(&format!("task {ns}/media-ipmi-task-0 failed: "))
            && message.contains("virtual media over IPMI"),
        "{message}"
    );
    assert_eq!(image.fetches(), 1);
    drop(ingot);
    delete_all(&client, &ns).await;
}

/// A Job's one-time network boot on a BMC that switches the boot mode to Legacy: the boot is
/// sent ahead of its Task, and the switch is not hidden by sending it again (the override would
/// then keep the switched mode and succeed): the Task is created failed-ahead, it and the Job
/// fail naming the BMC's behaviour and the fix, and the BMC received one boot PATCH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_mode_switched_by_the_bmc_fails_the_job_and_is_not_forced() {
    let _serial = SERIAL.lock().await;
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("rufio-bootmode").await.unwrap();
    let fleet = machines_on_fleet(&client, &ns, 1, BmcSpec::default()).await;
    let bmc = &fleet.bmcs[0].state;
    bmc.set_quirks(ingot_bmc_sim::Quirks {
        boot_mode_always_legacy: true,
        ..ingot_bmc_sim::Quirks::default()
    });
    let ingot = start_ingot(
        env.kubeconfig_path(),
        &ns,
        &["--rufio-machine-interval-seconds=600"],
    );
    wait_contactable(&client, &ns, "m0", "on", Duration::from_secs(30)).await;
    let mut j = job_sample(&ns, "pxe", "m0");
    j.spec.tasks =
        serde_json::from_value(json!([{"oneTimeBootDeviceAction": {"device": ["pxe"]}}])).unwrap();
    create(&client, &ns, &j).await;
    let status = wait_for("Job pxe to fail", Duration::from_secs(60), || async {
        let s = job_status(&client, &ns, "pxe").await;
        condition(&s, "Failed")
            .is_some_and(|c| c.0 == "True")
            .then_some(s)
    })
    .await;
    let (_, message) = condition(&status, "Failed").unwrap();
    assert!(
        message.starts_with(&format!(
            "task {ns}/pxe-task-0 failed: set boot device: the BMC switched the boot mode from UEFI to Legacy"
        )) && message.contains("ingot does not send the mode again to force it"),
        "{message}"
    );
    let task = Api::<Task>::namespaced(client.clone(), &ns)
        .get("pxe-task-0")
        .await
        .unwrap();
    assert!(
        task.annotations()
            .contains_key(ingot_controllers::rufio::task::FAILED_AHEAD_ANNOTATION),
        "sent ahead of the Task: {:?}",
        task.annotations()
    );
    assert_eq!(bmc.system_patches().len(), 1, "one boot PATCH, not forced");
    drop(ingot);
    delete_all(&client, &ns).await;
}
