//! Provisioning killed at chosen points (test builds' `--crash-point`): after a node's address
//! is allocated (its Inventory not yet saying so), after the install boot's rufio Job is created
//! (not yet recorded), after the installer's webhook is recorded (its Event not yet sent); and
//! down while its Cluster is deleted. Each time the operator is started again, unarmed, and what
//! counts is read from the peers: the boot records at the emulated BMCs, the webhooks the
//! emulated servers sent, the allocations in the AddressPools, the power the BMCs report.
//!
//! The fixture is `provisioned_clusters.rs`'s (three servers); each test has its own node
//! network so that the tests can share the new cluster's API server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod provisioning_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ingot_testenv::harness::wait_for;
use kube::api::DeleteParams;
use provisioning_support::{Options, Provisioned, SERVERS, WAIT};

/// Attempts of an installer webhook whose connection fails, one second apart: enough to reach
/// the operator started again after a crash in the middle of the request.
const WEBHOOK_ATTEMPTS: u32 = 60;

fn options(
    tag: &'static str,
    crash_point: Option<&'static str>,
    node_cidr: &'static str,
    gateway: &'static str,
) -> Options {
    Options {
        tag,
        crash_point,
        node_cidr,
        gateway,
        webhook_attempts: WEBHOOK_ATTEMPTS,
        ..Options::default()
    }
}

impl Provisioned {
    /// Every allocation of `pool` as `(address, owner kind, owner name)`.
    async fn held(&self, pool: &str) -> Vec<(String, String, String)> {
        let pool = self.pools().get(pool).await.unwrap();
        pool.status
            .unwrap_or_default()
            .address_allocation
            .into_iter()
            .map(|(address, owner)| (address, owner.kind, owner.name))
            .collect()
    }

    /// One address per node, distinct, each the one its Inventory names, none for an owner that
    /// is gone; the VIP held by the Cluster alone.
    async fn one_address_per_node(&self) {
        let held = self.held("nodes").await;
        let owners: Vec<&str> = held.iter().map(|(_, _, name)| name.as_str()).collect();
        let distinct: BTreeSet<&str> = owners.iter().copied().collect();
        assert_eq!(
            owners.len(),
            distinct.len(),
            "a node holds two addresses: {held:?}"
        );
        let names: BTreeSet<&str> = self.names.iter().map(String::as_str).collect();
        assert_eq!(distinct, names, "the node pool's owners: {held:?}");
        let by_owner: BTreeMap<&str, &str> = held
            .iter()
            .map(|(address, _, name)| (name.as_str(), address.as_str()))
            .collect();
        for name in &self.names {
            let inventory = self.inventories().get(name).await.unwrap();
            let status = inventory.status.unwrap();
            assert_eq!(
                status.pxe_boot_config.address.as_deref(),
                by_owner.get(name.as_str()).copied(),
                "{name}'s address is not the one the pool holds for it"
            );
        }
        let vip = self.held("vip").await;
        assert_eq!(vip.len(), 1, "the VIP pool: {vip:?}");
        assert_eq!((vip[0].1.as_str(), vip[0].2.as_str()), ("cluster", "first"));
    }

    /// Every server booted the installer once and sent its webhook once.
    async fn every_server_installed_once(&self) {
        // Sent, or given up on (refused, or its attempts spent): the server says which.
        let webhooks = wait_for("every server's webhook", WAIT, || async {
            let servers = self.servers.servers();
            servers
                .iter()
                .all(|s| s.webhooks_sent >= 1 || !s.warnings.is_empty())
                .then(|| servers.iter().map(|s| s.webhooks_sent).collect::<Vec<_>>())
        })
        .await;
        assert_eq!(
            webhooks,
            vec![1; SERVERS],
            "webhooks sent per server: {:#?}",
            self.servers.servers()
        );
        // Installed: none is booted into the installer again.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(self.pxe_boots(), vec![1; SERVERS], "PXE boots per server");
        // Two boot Jobs sent at once may make one boot: the BMC counts the power-ons asked.
        for (i, bmc) in self.fleet.bmcs.iter().enumerate() {
            let resets = bmc.state.reset_requests();
            let ons = resets.iter().filter(|r| r.as_str() == "On").count();
            assert_eq!(ons, 1, "server {i} was powered on {ons} times: {resets:?}");
        }
        for status in self.servers.servers() {
            assert_eq!(status.installs, 1, "server {}", status.index);
        }
    }

    /// Started armed at `point`: it aborts there, is started again unarmed, and the Cluster
    /// runs with each server installed once, each node holding one address.
    async fn survives_a_crash_at(mut self, point: &str) {
        self.operator.wait_crashed(point, WAIT).await;
        self.operator.restart(None);
        self.wait_status("clusterRunning").await;
        self.every_server_installed_once().await;
        self.one_address_per_node().await;
        self.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_an_allocation_allocates_no_address_twice() {
    let point = "provisioning-after-allocation";
    Provisioned::start_with(options(
        "crash-allocation",
        Some(point),
        "127.0.21.0/24",
        "127.0.21.1",
    ))
    .await
    .survives_a_crash_at(point)
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_the_boot_job_boots_no_server_twice() {
    let point = "provisioning-after-boot-job";
    Provisioned::start_with(options(
        "crash-boot-job",
        Some(point),
        "127.0.22.0/24",
        "127.0.22.1",
    ))
    .await
    .survives_a_crash_at(point)
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_the_webhook_installs_no_server_twice() {
    let point = "provisioning-after-webhook";
    Provisioned::start_with(options(
        "crash-webhook",
        Some(point),
        "127.0.23.0/24",
        "127.0.23.1",
    ))
    .await
    .survives_a_crash_at(point)
    .await;
}

/// The Cluster deleted while the operator is down: started again, it shuts every server down
/// and frees every address before the Cluster goes.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_deleted_while_down_is_released_on_restart() {
    let mut p = Provisioned::start_with(options(
        "deleted-while-down",
        None,
        "127.0.24.0/24",
        "127.0.24.1",
    ))
    .await;
    p.wait_status("clusterRunning").await;
    for (i, bmc) in p.fleet.bmcs.iter().enumerate() {
        assert_eq!(bmc.state.snapshot().power_state, "On", "server {i}");
    }
    p.operator.kill();
    p.clusters()
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    // Down, nothing releases it: the finalizer holds the Cluster, the servers run.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = p.clusters().get_opt("first").await.unwrap();
    assert!(
        held.is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
        "the Cluster went while the operator was down"
    );
    assert_eq!(p.held("nodes").await.len(), SERVERS);
    p.operator.restart(None);
    let clusters = p.clusters();
    wait_for("the Cluster to go", WAIT, || async {
        clusters
            .get_opt("first")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    for (i, bmc) in p.fleet.bmcs.iter().enumerate() {
        assert_eq!(
            bmc.state.snapshot().power_state,
            "Off",
            "server {i} is not off"
        );
    }
    assert_eq!(
        p.held("nodes").await,
        Vec::new(),
        "node addresses still held"
    );
    assert_eq!(p.held("vip").await, Vec::new(), "the VIP still held");
    for name in &p.names {
        let inventory = p.inventories().get(name).await.unwrap();
        assert_eq!(
            Provisioned::condition(&inventory, "inventoryFreed").as_deref(),
            Some("True"),
            "{name}"
        );
        assert!(inventory.status.unwrap().owner_cluster.name.is_empty());
    }
    assert_eq!(p.pxe_boots(), vec![1; SERVERS], "PXE boots per server");
    p.finish().await;
}
