//! Seeder's full mode end to end: a Cluster of three Inventories provisioned onto emulated
//! servers behind emulated Redfish BMCs (`ingot-bmc-sim`, 2 s power transitions), which PXE-boot
//! from ingot's boot server, check their install config as the Harvester installer would, call
//! its SUCCEEDED webhook, and form the new cluster in a second kube-apiserver bound to the
//! Cluster's VIP (`ingot-boot-sim`'s `ServerFleet`). `ingot run --controllers provisioning` runs
//! as the plain manifests' ServiceAccount. What each step asserts is read from the peers: boot
//! records at the BMCs, Nodes in the new cluster, allocations in the AddressPools.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod provisioning_support;

use std::collections::BTreeSet;
use std::time::Duration;

use ingot_testenv::harness::wait_for;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use provisioning_support::{GATEWAY, Provisioned, SERVERS, VIP, WAIT};
use serde_json::{Value, json};

impl Provisioned {
    async fn addresses_are_allocated_and_every_server_boots_once(&mut self) {
        self.wait_status("tinkConfigReady").await;
        let inventories = self.inventories();
        let mut addresses = BTreeSet::new();
        for name in &self.names {
            let inventory = inventories.get(name).await.unwrap();
            let status = inventory.status.clone().unwrap();
            let address = status.pxe_boot_config.address.clone().unwrap();
            assert!(address.starts_with("127.0.20."), "{name}: {address}");
            assert_ne!(address, GATEWAY, "the gateway was handed out");
            assert_ne!(address, "127.0.20.0", "the network address was handed out");
            assert_eq!(status.pxe_boot_config.gateway.as_deref(), Some(GATEWAY));
            assert_eq!(status.owner_cluster.name, "first");
            assert_eq!(
                status.generated_password, None,
                "the OS password stays in its Secret"
            );
            addresses.insert(address);
        }
        assert_eq!(addresses.len(), SERVERS, "an address was given twice");
        let cluster = self.clusters().get("first").await.unwrap();
        let status = cluster.status.unwrap();
        assert_eq!(status.cluster_address.as_deref(), Some(VIP));
        assert_eq!(status.token, None, "the cluster token stays in its Secret");
        let first = inventories.get(&self.names[0]).await.unwrap();
        assert_eq!(
            Self::condition(&first, "harvesterCreateNode").as_deref(),
            Some("True")
        );
        let second = inventories.get(&self.names[1]).await.unwrap();
        assert_eq!(
            Self::condition(&second, "harvesterJoinNode").as_deref(),
            Some("True")
        );
        let boots = wait_for("every server to PXE-boot", WAIT, || async {
            let boots = self.pxe_boots();
            boots.iter().all(|b| *b >= 1).then_some(boots)
        })
        .await;
        assert_eq!(boots, vec![1; SERVERS], "PXE boots per server");
    }

    async fn the_cluster_runs_once_its_nodes_are_ready_in_it(&mut self) {
        self.wait_status("clusterRunning").await;
        let nodes = Api::<Node>::all(self.target.clone())
            .list(&ListParams::default())
            .await
            .unwrap();
        let inventories = self.inventories();
        for name in &self.names {
            let inventory = inventories.get(name).await.unwrap();
            let address = inventory
                .status
                .clone()
                .unwrap()
                .pxe_boot_config
                .address
                .unwrap();
            assert!(
                nodes.items.iter().any(|n| n
                    .status
                    .as_ref()
                    .and_then(|s| s.addresses.as_ref())
                    .is_some_and(|a| a.iter().any(|a| a.address == address))),
                "no Node of the new cluster has {name}'s address {address}"
            );
            assert_eq!(
                Self::condition(&inventory, "harvesterInstalled").as_deref(),
                Some("True"),
                "{name}"
            );
        }
        for status in self.servers.servers() {
            assert_eq!(status.webhooks_sent, 1, "server {}", status.index);
            assert_eq!(status.script_fetches, 1, "server {}", status.index);
        }
        // Installed: no server is booted into the installer again.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            self.pxe_boots(),
            vec![1; SERVERS],
            "a server was booted twice"
        );
        let metric = |name: &'static str, labels: &'static [&'static str]| {
            let operator = &self.operator;
            async move { operator.metric_sum(name, labels).await }
        };
        assert_eq!(
            metric("ingot_provisioning_install_boots_total", &[]).await,
            SERVERS as f64
        );
        assert_eq!(
            metric("ingot_provisioning_installs_succeeded_total", &[]).await,
            SERVERS as f64
        );
        assert!(
            metric(
                "ingot_provisioning_cluster_phase_reached_seconds_count",
                &["phase=\"clusterRunning\""]
            )
            .await
                >= 1.0,
            "the time to clusterRunning was not observed"
        );
    }

    /// The install config and the webhook answer only the node's own address.
    async fn only_the_node_s_own_address_reads_its_config(&mut self) {
        let inventory = self.inventories().get(&self.names[0]).await.unwrap();
        let own: std::net::IpAddr = inventory
            .status
            .unwrap()
            .pxe_boot_config
            .address
            .unwrap()
            .parse()
            .unwrap();
        let stranger: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        assert_ne!(own, stranger);
        let ask = |source: std::net::IpAddr, method: reqwest::Method, path: &str| {
            let url = format!("{}/{path}/{}/{}", self.boot_url, self.ns, self.names[0]);
            async move {
                reqwest::Client::builder()
                    .local_address(source)
                    .build()
                    .unwrap()
                    .request(method, url)
                    .send()
                    .await
                    .unwrap()
            }
        };
        let refused = ask(stranger, reqwest::Method::GET, "config").await;
        assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
        assert!(
            refused.text().await.unwrap().is_empty(),
            "a refusal leaked a body"
        );
        let refused = ask(stranger, reqwest::Method::PUT, "disable").await;
        assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
        let answered = ask(own, reqwest::Method::GET, "config").await;
        assert_eq!(answered.status(), reqwest::StatusCode::OK);
        assert!(
            answered.text().await.unwrap().contains("install:"),
            "the node's own address was not given its config"
        );
    }

    async fn a_removed_node_is_shut_down_then_its_address_freed(&mut self) {
        let removed = self.names[2].clone();
        let held = self.allocations("nodes").await;
        assert!(held.contains_key(&removed));
        let cluster = self.clusters().get("first").await.unwrap();
        let nodes: Vec<Value> = serde_json::to_value(&cluster.spec.nodes)
            .unwrap()
            .as_array()
            .unwrap()[..2]
            .to_vec();
        self.clusters()
            .patch(
                "first",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"nodes": nodes}})),
            )
            .await
            .unwrap();
        let inventories = self.inventories();
        let freed = wait_for(&format!("{removed} freed"), WAIT, || async {
            let i = inventories.get(&removed).await.ok()?;
            (Self::condition(&i, "inventoryFreed").as_deref() == Some("True")).then_some(i)
        })
        .await;
        let status = freed.status.unwrap();
        assert!(status.owner_cluster.name.is_empty());
        assert_eq!(status.pxe_boot_config.address, None);
        assert!(
            !self.fleet.bmcs[2].state.snapshot().power_state.eq("On"),
            "freed while its BMC reports it on"
        );
        assert!(!self.allocations("nodes").await.contains_key(&removed));
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &self.ns);
        assert!(
            secrets
                .get_opt(&format!("{removed}-harvester-install"))
                .await
                .unwrap()
                .is_none(),
            "the install Secret (OS password, config) outlived the allocation"
        );
    }

    /// Scale-out: appended to `spec.nodes` again, the freed server is allocated as a joining
    /// node, booted once more (its second allocation, its second PXE boot) and joins.
    async fn a_node_appended_to_spec_nodes_is_installed_and_joins(&mut self) {
        let added = self.names[2].clone();
        let cluster = self.clusters().get("first").await.unwrap();
        let mut nodes = serde_json::to_value(&cluster.spec.nodes).unwrap();
        nodes.as_array_mut().unwrap().push(json!({
            "inventoryReference": {"name": added, "namespace": self.ns},
            "addressPoolReference": {"name": "nodes", "namespace": self.ns}
        }));
        self.clusters()
            .patch(
                "first",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"nodes": nodes}})),
            )
            .await
            .unwrap();
        let inventories = self.inventories();
        let installed = wait_for(&format!("{added} installed again"), WAIT, || async {
            let i = inventories.get(&added).await.ok()?;
            (Self::condition(&i, "harvesterInstalled").as_deref() == Some("True")).then_some(i)
        })
        .await;
        assert_eq!(
            Self::condition(&installed, "harvesterJoinNode").as_deref(),
            Some("True")
        );
        self.wait_status("clusterRunning").await;
        assert_eq!(self.pxe_boots(), vec![1, 1, 2], "PXE boots per server");
        let webhooks: Vec<u32> = self
            .servers
            .servers()
            .iter()
            .map(|s| s.webhooks_sent)
            .collect();
        assert_eq!(webhooks, vec![1, 1, 2], "webhooks per server");
    }

    /// A deleted Inventory that is still a node of the Cluster waits for it: its server keeps
    /// running with its address held, until it is taken out of `spec.nodes`; then it is shut
    /// down, its address freed, and the Inventory goes.
    async fn a_deleted_node_waits_for_its_cluster_to_let_it_go(&mut self) {
        let deleted = self.names[1].clone();
        let inventories = self.inventories();
        inventories
            .delete(&deleted, &DeleteParams::default())
            .await
            .unwrap();
        let message = wait_for(&format!("{deleted} waiting for release"), WAIT, || async {
            let i = inventories.get(&deleted).await.ok()?;
            i.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "waitingForRelease" && c.status == "True")
                .and_then(|c| c.message)
        })
        .await;
        assert!(message.contains("spec.nodes"), "{message}");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(inventories.get_opt(&deleted).await.unwrap().is_some());
        assert_eq!(
            self.fleet.bmcs[1].state.snapshot().power_state,
            "On",
            "a deletion shut a node of the running cluster down"
        );
        assert!(self.allocations("nodes").await.contains_key(&deleted));
        let cluster = self.clusters().get("first").await.unwrap();
        let nodes: Vec<Value> = serde_json::to_value(&cluster.spec.nodes)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["inventoryReference"]["name"] != deleted.as_str())
            .cloned()
            .collect();
        assert_eq!(nodes.len(), 2);
        self.clusters()
            .patch(
                "first",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"nodes": nodes}})),
            )
            .await
            .unwrap();
        wait_for(&format!("{deleted} to go"), WAIT, || async {
            inventories
                .get_opt(&deleted)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
        assert_ne!(self.fleet.bmcs[1].state.snapshot().power_state, "On");
        assert!(!self.allocations("nodes").await.contains_key(&deleted));
    }

    async fn deleting_the_cluster_releases_every_node_and_the_vip(&mut self) {
        self.clusters()
            .delete("first", &DeleteParams::default())
            .await
            .unwrap();
        let clusters = self.clusters();
        wait_for("the Cluster to go", WAIT, || async {
            clusters
                .get_opt("first")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
        for (i, name) in self.names.iter().enumerate() {
            let Some(inventory) = self.inventories().get_opt(name).await.unwrap() else {
                continue; // deleted by an earlier step
            };
            assert!(
                inventory.status.unwrap().owner_cluster.name.is_empty(),
                "{name} still names the Cluster"
            );
            assert_ne!(
                self.fleet.bmcs[i].state.snapshot().power_state,
                "On",
                "{name} is on"
            );
        }
        assert!(self.allocations("nodes").await.is_empty());
        assert!(self.allocations("vip").await.is_empty());
    }

    /// A freed Inventory is still Seeder's: a changed BMC connection reaches its Machine.
    async fn a_freed_inventory_s_bmc_change_reaches_its_machine(&mut self) {
        let name = self.names[0].clone();
        self.inventories()
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"baseboardSpec": {"connection": {"port": 624}}}})),
            )
            .await
            .unwrap();
        let machines: Api<ingot_api::rufio::Machine> =
            Api::namespaced(self.client.clone(), &self.ns);
        wait_for(&format!("Machine {name} with port 624"), WAIT, || async {
            let machine = machines.get(&name).await.ok()?;
            (machine.spec.connection.port == 624).then_some(())
        })
        .await;
    }
}

ingot_testenv::scenario!(mod three_servers: Provisioned {
    addresses_are_allocated_and_every_server_boots_once,
    the_cluster_runs_once_its_nodes_are_ready_in_it,
    only_the_node_s_own_address_reads_its_config,
    a_removed_node_is_shut_down_then_its_address_freed,
    a_node_appended_to_spec_nodes_is_installed_and_joins,
    a_deleted_node_waits_for_its_cluster_to_let_it_go,
    deleting_the_cluster_releases_every_node_and_the_vip,
    a_freed_inventory_s_bmc_change_reaches_its_machine,
});

/// `--provisioning-max-concurrent-installs=1`: the servers install one after another. Read from
/// the BMCs and the Inventories: each server's PXE boot comes after the install the one before
/// reported, and the servers that waited said so (`waitingForInstallSlot`).
/// Also: the new cluster's Nodes are watched, and the Cluster controller is woken by it. The
/// first Node answers the node reader (its manifest applied) about a second after its install
/// report; 8 s installs one after another put the last Node's registration more than 10 s (the
/// poll while installs remain) after that, so after the watch opened.
#[tokio::test(flavor = "multi_thread")]
async fn with_a_budget_of_one_install_the_servers_install_one_after_another() {
    let f = Provisioned::start_with(provisioning_support::Options {
        tag: "provisioned-budget",
        node_cidr: "127.0.24.0/24",
        gateway: "127.0.24.1",
        max_installs: Some(1),
        install_time: Duration::from_secs(8),
        ..provisioning_support::Options::default()
    })
    .await;
    f.wait_status("clusterRunning").await;
    let inventories = f.inventories();
    let mut installs = Vec::new();
    for (i, name) in f.names.iter().enumerate() {
        let pxe = f.fleet.bmcs[i]
            .state
            .boots()
            .into_iter()
            .find(|r| r.device == "Pxe")
            .unwrap_or_else(|| panic!("{name} never PXE-booted"));
        let inventory = inventories.get(name).await.unwrap();
        let installed = inventory
            .status
            .clone()
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "harvesterInstalled" && c.status == "True")
            .and_then(|c| c.last_update_time)
            .unwrap_or_else(|| panic!("{name} not installed"));
        let booted: k8s_openapi::jiff::Timestamp = pxe.booted_at.parse().unwrap();
        let reported: k8s_openapi::jiff::Timestamp = installed.parse().unwrap();
        installs.push((booted, reported, name.clone()));
    }
    installs.sort();
    for pair in installs.windows(2) {
        assert!(
            pair[1].0 > pair[0].1,
            "{} PXE-booted at {} before {} reported its install at {}",
            pair[1].2,
            pair[1].0,
            pair[0].2,
            pair[0].1
        );
    }
    let waited = f
        .inventories()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|i| Provisioned::condition(i, "waitingForInstallSlot").is_some())
        .count();
    assert!(waited >= 1, "no server said it waited for an install slot");
    // Whether the new cluster's Node watch wakes the Cluster here depends on the install order
    // (the watch opens only once the create node is up; installed last, every Node is already
    // there): what wakes a Cluster is tested in crates/controllers/tests/remote_nodes.rs.
    f.finish().await;
}

/// An installer that never reports: after `--provisioning-install-timeout-seconds` the Inventory
/// says so (`installTimedOut`, naming what to do) and its install slot is given back, so with a
/// budget of one the next server boots; no server is booted into the installer twice, and the
/// Cluster does not claim to run.
#[tokio::test(flavor = "multi_thread")]
async fn an_install_that_never_reports_times_out_and_is_not_replayed() {
    let f = Provisioned::start_with(provisioning_support::Options {
        tag: "provisioned-timeout",
        node_cidr: "127.0.25.0/24",
        gateway: "127.0.25.1",
        max_installs: Some(1),
        install_time: Duration::from_secs(3600),
        install_timeout_seconds: Some(6),
        ..provisioning_support::Options::default()
    })
    .await;
    let inventories = f.inventories();
    for name in &f.names {
        wait_for(&format!("{name} to time out"), WAIT, || async {
            let inventory = inventories.get(name).await.ok()?;
            let condition = inventory
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "installTimedOut" && c.status == "True")?;
            Some(condition.message.unwrap_or_default())
        })
        .await;
    }
    let inventory = inventories.get(&f.names[0]).await.unwrap();
    let message = inventory
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "installTimedOut")
        .and_then(|c| c.message)
        .unwrap();
    assert!(
        message.contains("within 6s") && message.contains("spec.nodes"),
        "{message}"
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(f.client.clone(), &f.ns);
    wait_for("a Warning Event installTimedOut", WAIT, || async {
        let listed = events.list(&ListParams::default()).await.ok()?;
        listed
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("installTimedOut")
                    && e.type_.as_deref() == Some("Warning")
                    && e.involved_object.name.as_deref() == Some(&f.names[0])
            })
            .then_some(())
    })
    .await;
    // Seen timed out by the BMCs too: one PXE boot each, and none after a wait.
    assert_eq!(f.pxe_boots(), vec![1; provisioning_support::SERVERS]);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        f.pxe_boots(),
        vec![1; provisioning_support::SERVERS],
        "a timed-out install was booted again"
    );
    let cluster = f.clusters().get("first").await.unwrap();
    assert_ne!(
        cluster.status.unwrap().status.as_deref(),
        Some("clusterRunning")
    );
    f.finish().await;
}
