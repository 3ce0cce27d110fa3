//! `ingot run` stopped with SIGTERM while BMC reads are in flight, some to BMCs that stopped
//! answering: the reads are cancelled rather than waited out, every session on a BMC that
//! answers is logged out, and the process is gone within 5 s. The BMCs are the emulated fleet
//! (Redfish over TLS, each counting the sessions it opened and closed); the operator runs as the
//! chart's ServiceAccount against the real control plane.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ingot_api::rufio::Machine;
use ingot_bmc_sim::{BmcSpec, Fault, Fleet, FleetOptions};
use rufio_support::*;
use serde_json::json;

const USER: &str = "admin";
const PASSWORD: &str = "t0p-Secret";

/// `machines` Machines on as many emulated BMCs, each read every `interval_seconds`, `dead` of
/// which stop answering once every Machine is contactable; SIGTERM once a read to each dead BMC
/// is in flight. Returns the time from SIGTERM to the exit.
async fn sigterm_with_reads_in_flight(
    machines: usize,
    dead: usize,
    interval_seconds: u32,
) -> Duration {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("shutdown").await.unwrap();
    let fleet = Fleet::uniform(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        machines,
        BmcSpec {
            username: USER.into(),
            password: PASSWORD.into(),
            ..BmcSpec::default()
        },
    )
    .await
    .unwrap();
    create_secret(&client, &ns, "bmc-auth", USER, PASSWORD).await;
    for (i, bmc) in fleet.bmcs.iter().enumerate() {
        let machine = machine_sample(
            &ns,
            &format!("m{i}"),
            "bmc-auth",
            "127.0.0.1",
            json!({"redfish": {"port": bmc.addr.port()}, "ipmitool": {"port": closed_udp_port()}}),
        );
        create(&client, &ns, &machine).await;
    }
    // `ingot run --controllers rufio` as the chart's ServiceAccount: frequent reads, and a
    // Redfish timeout far longer than the 5 s allowed (a read to a dead BMC that were waited out
    // would keep the process for 30 s).
    let interval = format!("--rufio-machine-interval-seconds={interval_seconds}");
    let kubeconfig = chart_support::service_account_kubeconfig(env.kubeconfig_path(), &ns, "rufio");
    let ingot = ingot_testenv::Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("shutdown")
        .kubeconfig(&kubeconfig)
        .arg(format!("--lease-namespace={ns}"))
        .arg(format!("--lease-name=ingot-{ns}"))
        // A Lease that the first reads of a large fleet (TLS logins) cannot starve.
        .arg("--lease-duration-seconds=30")
        .controllers("rufio")
        .arg(format!("--rufio-namespace={ns}"))
        .arg(&interval)
        .arg("--rufio-redfish-timeout-seconds=30")
        .env("RUST_LOG", "info")
        .start();
    let deadline = Instant::now() + Duration::from_secs(120 + machines as u64 / 2);
    loop {
        let listed = kube::Api::<Machine>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .unwrap();
        let contactable = listed
            .items
            .iter()
            .filter(|m| {
                let status = serde_json::to_value(&m.status).unwrap();
                condition(&status, "Contactable").is_some_and(|c| c.0 == "True")
                    && status["powerState"] == "on"
            })
            .count();
        if contactable == machines {
            break;
        }
        if let Some(status) = ingot.exit_status() {
            panic!(
                "ingot exited ({status}) before the Machines were read\n{}",
                ingot.log_tail()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{contactable} of {machines} Machines contactable\n{}",
            ingot.log_tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for bmc in &fleet.bmcs {
        assert!(
            bmc.state.open_sessions() >= 1,
            "BMC {} has no session open: {}",
            bmc.addr,
            ingot.log_tail()
        );
    }

    let (dead_bmcs, live_bmcs) = fleet.bmcs.split_at(dead);
    for bmc in dead_bmcs {
        bmc.state.set_fault(Some(Fault::Timeout));
    }
    wait_for(
        "a read in flight to each dead BMC",
        Duration::from_secs(60),
        || async {
            dead_bmcs
                .iter()
                .all(|b| b.state.counters.in_flight.now.load(Ordering::SeqCst) > 0)
                .then_some(())
        },
    )
    .await;

    ingot.terminate();
    let signalled = Instant::now();
    let status = ingot.wait_exit(Duration::from_secs(60)).await;
    let took = signalled.elapsed();
    let log = ingot.log_tail();
    assert!(status.success(), "ingot exited with {status}: {log}");

    let open: Vec<String> = live_bmcs
        .iter()
        .filter_map(|b| {
            let s = b.state.snapshot();
            (s.sessions > 0 || s.sessions_created != s.sessions_deleted).then(|| {
                format!(
                    "{}: {} open, {} created, {} deleted",
                    b.addr, s.sessions, s.sessions_created, s.sessions_deleted
                )
            })
        })
        .collect();
    assert!(
        open.is_empty(),
        "sessions left open on {} of {} answering BMCs: {open:?}\n{log}",
        open.len(),
        live_bmcs.len()
    );
    ingot.kill();
    delete_all(&client, &ns).await;
    took
}

/// 50 Machines, 5 of whose BMCs stop answering: SIGTERM to exit within 5 s, every session on
/// the 45 others logged out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_logs_out_of_every_bmc_and_exits_within_5_s_despite_dead_bmcs() {
    let took = sigterm_with_reads_in_flight(50, 5, 1).await;
    eprintln!(
        "50 Machines, 5 dead BMCs: exited {:.2} s after SIGTERM",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
}

/// The measurement: 1,000 Machines, 10 dead BMCs (run with `--ignored`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 1,000 Machines take minutes to create and read"]
async fn sigterm_with_1000_machines_and_10_dead_bmcs() {
    let took = sigterm_with_reads_in_flight(1000, 10, 10).await;
    eprintln!(
        "1,000 Machines, 10 dead BMCs: exited {:.2} s after SIGTERM",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
}
