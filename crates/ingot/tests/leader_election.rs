//! Two `ingot run` replicas against one control plane: only the lease holder reconciles; when
//! it is killed with SIGKILL the other takes over within 15 s and reconciles; when it is sent
//! SIGTERM it releases the Lease and exits, and the other leads well before the Lease would
//! have expired.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ingot_testenv::{Operator, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

struct Replica {
    identity: String,
    operator: Operator,
}

impl Replica {
    fn start(kubeconfig: &Path, namespace: &str, identity: &str) -> Self {
        Self::start_with(kubeconfig, namespace, identity, &[])
    }

    fn start_with(kubeconfig: &Path, namespace: &str, identity: &str, extra: &[&str]) -> Self {
        // A new log for this run (the harness appends to a log file).
        let _ = std::fs::remove_file(log_path(identity));
        let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .log_file(log_path(identity))
            .controllers("pools")
            .arg("--lease-name=ingot-leader-test")
            .kubeconfig(kubeconfig)
            .arg(format!("--lease-namespace={namespace}"))
            .arg(format!("--identity={identity}"))
            .args(extra.iter().copied())
            // The pools controller reads its Secret here: a namespace of this test.
            .env("NAMESPACE", namespace)
            .start();
        Self {
            identity: identity.to_owned(),
            operator,
        }
    }

    /// The replica's reconciliation count and leader gauge, from /metrics.
    async fn metrics(&self, http: &reqwest::Client) -> Option<(u64, u64)> {
        let addr = self.operator.http_addr().await;
        let text = http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let value = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        // Reconciliations of every controller (pools runs `instancepool` and `instance`).
        let reconciled: u64 = text
            .lines()
            .filter(|l| l.starts_with("ingot_reconciliations_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum();
        let leader = value("ingot_leader ")?;
        Some((reconciled, leader as u64))
    }
}

/// A replica's log (its identity names it).
fn log_path(identity: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{identity}.log"))
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("ingot-leader-test")
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

#[tokio::test]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over_after_sigkill() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let namespace = env.namespace("leader").await.expect("namespace");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let http = reqwest::Client::new();

    let first = Replica::start(env.kubeconfig_path(), &namespace, "replica-a");
    let holder = wait_for(
        "replica-a to take the lease",
        Duration::from_secs(30),
        async || lease_holder(&leases).await,
    )
    .await;
    assert_eq!(holder, first.identity);
    let second = Replica::start(env.kubeconfig_path(), &namespace, "replica-b");
    wait_for(
        "replica-b to serve /metrics",
        Duration::from_secs(30),
        async || second.metrics(&http).await,
    )
    .await;

    // Something to reconcile: a pool, whose CredentialsReady condition only a leader writes.
    let pools: Api<ingot_api::equinix::InstancePool> = Api::all(client.clone());
    let pool_name = format!("leader-{}", ingot_testenv::random_suffix(6));
    let pool = serde_json::from_value(
        json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
        "metadata": {"name": pool_name}, "spec": {"count": 0}}),
    )
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
    wait_for(
        "the leader to reconcile the pool",
        Duration::from_secs(30),
        async || {
            let pool = pools.get(&pool_name).await.ok()?;
            pool.status?
                .conditions
                .iter()
                .any(|c| c.type_ == "CredentialsReady")
                .then_some(())
        },
    )
    .await;

    // Pools are cluster-scoped: the other test's replica (leading in its own namespace) may
    // write the condition first, so replica-a's own count is what shows it leads.
    let (first_count, first_leader) = wait_for(
        "replica-a to reconcile",
        Duration::from_secs(30),
        async || first.metrics(&http).await.filter(|(count, _)| *count > 0),
    )
    .await;
    let (second_count, second_leader) = second.metrics(&http).await.expect("replica-b metrics");
    assert!(first_count > 0, "the leader reconciled");
    assert_eq!(first_leader, 1);
    assert_eq!(
        (second_count, second_leader),
        (0, 0),
        "the standby reconciles nothing"
    );

    // SIGKILL: no chance to release the lease; the standby must notice that it is no longer renewed.
    let first = first;
    first.operator.kill();
    let killed_at = Instant::now();
    let holder = wait_for(
        "replica-b to take the lease",
        Duration::from_secs(15),
        async || lease_holder(&leases).await.filter(|h| h == "replica-b"),
    )
    .await;
    let took = killed_at.elapsed();
    assert_eq!(holder, second.identity);
    assert!(took < Duration::from_secs(15), "takeover took {took:?}");
    eprintln!(
        "replica-b took over {:.1} s after replica-a was killed",
        took.as_secs_f64()
    );

    wait_for(
        "replica-b to reconcile",
        Duration::from_secs(15),
        async || {
            let (count, leader) = second.metrics(&http).await?;
            (count > 0 && leader == 1).then_some(())
        },
    )
    .await;
    assert!(second.operator.is_running(), "replica-b keeps running");
}

#[tokio::test]
async fn a_leader_whose_lease_is_taken_stops_before_the_new_holder_could_lead() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let namespace = env.namespace("fence").await.expect("namespace");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let leader = Replica::start(env.kubeconfig_path(), &namespace, "replica-fenced");
    wait_for(
        "replica-fenced to take the lease",
        Duration::from_secs(30),
        async || {
            lease_holder(&leases)
                .await
                .filter(|h| h == "replica-fenced")
        },
    )
    .await;

    // Another replica takes the Lease over (as after a partition that outlived the lease).
    // (A renewal between the read and the write conflicts: read again.)
    let mut taken = false;
    for _ in 0..10 {
        let mut lease = leases.get("ingot-leader-test").await.expect("lease");
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("usurper".to_owned());
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        spec.lease_duration_seconds = Some(600);
        if leases
            .replace("ingot-leader-test", &PostParams::default(), &lease)
            .await
            .is_ok()
        {
            taken = true;
            break;
        }
    }
    assert!(taken, "the test took the lease over");
    let taken_at = Instant::now();

    // The deposed leader cancels its work and exits at its next renewal, well within the
    // lease duration (10 s) in which the new holder would start.
    let status = leader.operator.wait_exit(Duration::from_secs(10)).await;
    assert!(!status.success(), "it exits with an error: {status:?}");
    eprintln!(
        "the deposed leader exited {:.1} s after its lease was taken",
        taken_at.elapsed().as_secs_f64()
    );
    let log = std::fs::read_to_string(log_path("replica-fenced")).expect("replica log");
    assert!(log.contains("lost leadership"), "{log}");
    assert_eq!(
        lease_holder(&leases).await.as_deref(),
        Some("usurper"),
        "the deposed leader did not take it back"
    );
}

/// SIGTERM stops the controllers, releases the Lease and exits 0: with a 30 s Lease the
/// standby leads within a few seconds (its next try), not after the Lease expires.
#[tokio::test]
async fn a_leader_sent_sigterm_releases_the_lease_and_the_standby_leads_at_once() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let namespace = env.namespace("leader-term").await.expect("namespace");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let http = reqwest::Client::new();
    let lease_seconds = 30;
    let lease_flag = format!("--lease-duration-seconds={lease_seconds}");

    let first = Replica::start_with(env.kubeconfig_path(), &namespace, "term-a", &[&lease_flag]);
    wait_for(
        "term-a to take the lease",
        Duration::from_secs(30),
        async || lease_holder(&leases).await.filter(|h| h == "term-a"),
    )
    .await;
    wait_for("term-a to lead", Duration::from_secs(30), async || {
        first
            .metrics(&http)
            .await
            .filter(|(_, leader)| *leader == 1)
    })
    .await;
    let second = Replica::start_with(env.kubeconfig_path(), &namespace, "term-b", &[&lease_flag]);
    wait_for("term-b to stand by", Duration::from_secs(30), async || {
        second
            .metrics(&http)
            .await
            .filter(|(_, leader)| *leader == 0)
    })
    .await;

    first.operator.terminate();
    let signalled = Instant::now();
    let status = first.operator.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "term-a exited with {status}");
    // Released before the exit: the Lease no longer names term-a (it is empty, or term-b's).
    assert_ne!(
        lease_holder(&leases).await.as_deref(),
        Some("term-a"),
        "the Lease still names the replica that exited"
    );
    wait_for(
        "term-b to take the lease",
        Duration::from_secs(lease_seconds),
        async || lease_holder(&leases).await.filter(|h| h == "term-b"),
    )
    .await;
    wait_for(
        "term-b to lead",
        Duration::from_secs(lease_seconds),
        async || {
            second
                .metrics(&http)
                .await
                .filter(|(_, leader)| *leader == 1)
        },
    )
    .await;
    let took = signalled.elapsed();
    eprintln!(
        "term-b led {:.1} s after SIGTERM to term-a (Lease: {lease_seconds} s)",
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(lease_seconds / 2),
        "the standby took {took:?} to lead: the Lease was not released"
    );
}
