//! Seeder's full (provisioning) mode end to end on the real control plane: AddressPools under
//! `ingot run --controllers provisioning`, run as the plain manifests' ServiceAccount, and the
//! address API the Cluster controller calls (`allocate_address`, `release_address`), each
//! test in a namespace and with an operator of its own (`--provisioning-namespace`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ingot_api::seeder::{AddressPool, AllocatedObject, Cluster};
use ingot_controllers::provisioning::addresses::{
    AddressError, PoolRef, allocate_address, allocate_addresses, release_address,
};
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::harness::wait_for;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const FINALIZER: &str = "finalizer.addresspool.harvesterhci.io";
const WAIT: Duration = Duration::from_secs(120);

/// A kubeconfig of the manifests' ServiceAccount (`deploy/manifests/provisioning.yaml`,
/// installed once per test binary).
fn service_account(admin: &Path) -> &'static PathBuf {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| chart_support::install_from_manifests(admin, "provisioning"))
}

struct Fixture {
    client: Client,
    ns: String,
    operator: Operator,
}

/// A namespace, and `ingot run --controllers provisioning` for it as the ServiceAccount.
async fn start(tag: &str) -> Fixture {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace(tag).await.unwrap();
    let kubeconfig = service_account(env.kubeconfig_path()).clone();
    let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("provisioning")
        .kubeconfig(&kubeconfig)
        .arg(format!(
            "--lease-namespace={}",
            chart_support::MANIFESTS_NAMESPACE
        ))
        .arg(format!("--lease-name=ingot-{ns}"))
        // Long enough that a loaded machine does not cost the lease (the process would exit).
        .arg("--lease-duration-seconds=15")
        .controllers("provisioning")
        .arg(format!("--provisioning-namespace={ns}"))
        .env("RUST_LOG", "info,ingot_controllers=debug")
        .start();
    Fixture {
        client,
        ns,
        operator,
    }
}

impl Fixture {
    fn pools(&self) -> Api<AddressPool> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pool_ref(&self, name: &str) -> PoolRef {
        PoolRef {
            namespace: self.ns.clone(),
            name: name.to_owned(),
        }
    }

    fn owner(&self, kind: &str, name: &str) -> AllocatedObject {
        AllocatedObject {
            kind: kind.to_owned(),
            name: name.to_owned(),
            namespace: self.ns.clone(),
        }
    }

    async fn create_pool(&self, name: &str, spec: Value) -> Result<AddressPool, kube::Error> {
        let pool: AddressPool = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.pools().create(&PostParams::default(), &pool).await
    }

    /// A Cluster that owns addresses (its own pools are elsewhere: only its existence counts).
    async fn create_cluster(&self, name: &str) {
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"version": "v1.4.0", "nodes": [],
                "vipConfig": {"addressPoolReference": {"name": "elsewhere", "namespace": self.ns}}}
        }))
        .unwrap();
        Api::<Cluster>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();
    }

    /// Waits until the pool's `status.status` is `state`; returns the pool.
    async fn wait_state(&self, name: &str, state: &str) -> AddressPool {
        let pools = self.pools();
        wait_for(&format!("AddressPool {name} {state}"), WAIT, || async {
            let pool = pools.get(name).await.ok()?;
            (pool.status.as_ref()?.status == state).then_some(pool)
        })
        .await
    }

    /// Allocates for a Cluster `owner` of the pool, retrying while the pool is not ready yet.
    async fn allocate(
        &self,
        pool: &str,
        owner: &str,
        fixed: Option<&str>,
    ) -> Result<Ipv4Addr, AddressError> {
        allocate_address(
            &self.client,
            &self.pool_ref(pool),
            &self.owner("cluster", owner),
            fixed,
        )
        .await
    }

    fn condition(pool: &AddressPool, type_: &str) -> Option<(String, String, String)> {
        pool.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    /// Waits for an Event of `reason` about the pool that says `says` (recorded after the
    /// status write that the test saw).
    async fn wait_event(&self, pool: &str, reason: &str, says: &str) {
        let what = format!("the {reason} Event of {pool} saying {says:?}");
        wait_for(&what, WAIT, || async {
            self.event(pool, reason, says).await.then_some(())
        })
        .await;
    }

    /// Whether an Event of `reason` about the pool says `says`.
    async fn event(&self, pool: &str, reason: &str, says: &str) -> bool {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pool)
                    && e.reporting_controller.as_deref() == Some("ingot-provisioning")
                    && e.reason.as_deref() == Some(reason)
                    && e.note.as_deref().is_some_and(|n| n.contains(says))
            })
    }
}

/// Replaces every `namespace: default` in a sample by `ns`.
fn into_namespace(value: &mut Value, ns: &str) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "namespace" && v == "default" {
                    *v = json!(ns);
                } else {
                    into_namespace(v, ns);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| into_namespace(v, ns)),
        _ => {}
    }
}

/// The objects of Seeder's README (its quickstart and its AddressPool sample), each once.
fn seeder_readme_objects(kind: &str) -> Vec<Value> {
    let readme = ingot_compat::shared_file("fixtures/seeder-full-mode/README.md");
    let mut seen = BTreeSet::new();
    ingot_compat::fenced_blocks(&readme, "")
        .iter()
        .flat_map(|block| ingot_compat::yaml_documents(block))
        .filter(|doc| doc["kind"] == kind)
        .filter(|doc| seen.insert(doc["metadata"]["name"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeders_readme_pools_become_ready_and_hand_out_their_one_address() {
    let f = start("prov-readme").await;
    let other_ns = ingot_testenv::shared()
        .await
        .namespace("prov-other")
        .await
        .unwrap();
    let elsewhere: Api<AddressPool> = Api::namespaced(f.client.clone(), &other_ns);
    let outside: AddressPool = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": "outside"}, "spec": {"cidr": "10.9.0.0/24", "gateway": "10.9.0.1"}
    }))
    .unwrap();
    elsewhere
        .create(&PostParams::default(), &outside)
        .await
        .unwrap();
    let pools = seeder_readme_objects("AddressPool");
    assert_eq!(pools.len(), 3, "node-pool, node2-pool, vip-pool");
    for kind in ["AddressPool", "Inventory", "Cluster"] {
        for mut object in seeder_readme_objects(kind) {
            object["metadata"]["namespace"] = json!(f.ns);
            into_namespace(&mut object, &f.ns);
            // The sample's BMCs are on its lab network: here a closed port on loopback, so
            // that the Inventories' Machines reach nothing outside this machine.
            if kind == "Inventory" {
                object["spec"]["baseboardSpec"]["connection"]["host"] = json!("127.0.0.1");
                object["spec"]["baseboardSpec"]["connection"]["port"] = json!(9);
            }
            let yaml = serde_json::to_string(&object).unwrap();
            chart_support::kubectl_apply(
                ingot_testenv::shared().await.kubeconfig_path(),
                &yaml,
                &[],
            );
        }
    }
    for sample in &pools {
        let name = sample["metadata"]["name"].as_str().unwrap();
        let address = sample["spec"]["cidr"]
            .as_str()
            .unwrap()
            .trim_end_matches("/32");
        // Nothing is taken yet: the quickstart's Cluster names Harvester v1.0.2, which ingot
        // cannot install, so it is held before it takes its VIP (below); the node pools wait
        // for their Inventories, whose BMCs do not answer.
        let pool = f.wait_state(name, "poolReady").await;
        let status = pool.status.clone().unwrap();
        assert_eq!(
            (status.start_address.as_str(), status.last_address.as_str()),
            (address, address)
        );
        assert_eq!(status.available_addresses, 1);
        assert_eq!(status.netmask, "255.255.248.0");
        assert!(status.address_allocation.is_empty(), "{name}");
        wait_for("the finalizer", WAIT, || async {
            let pool = f.pools().get(name).await.ok()?;
            pool.finalizers()
                .iter()
                .any(|x| x == FINALIZER)
                .then_some(())
        })
        .await;
    }
    let clusters: Api<Cluster> = Api::namespaced(f.client.clone(), &f.ns);
    let held = wait_for("the quickstart's Cluster held", WAIT, || async {
        let cluster = clusters.get("first").await.ok()?;
        cluster
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.reason == "ClusterInvalid")
            .map(|c| c.message)
    })
    .await;
    assert!(held.contains("spec.version v1.0.2"), "{held}");
    // Taken for the quickstart's Cluster, the VIP is the pool's one address (asking again
    // gives the same); its Inventories get their node addresses.
    let vip = f.allocate("vip-pool", "first", None).await.unwrap();
    assert_eq!(vip, Ipv4Addr::new(172, 16, 128, 7));
    let node = f.owner("inventory", "node");
    let address = allocate_address(&f.client, &f.pool_ref("node-pool"), &node, None)
        .await
        .unwrap();
    assert_eq!(address, Ipv4Addr::new(172, 16, 128, 11));
    let pool = f.wait_state("vip-pool", "poolExhausted").await;
    assert_eq!(
        pool.status.unwrap().address_allocation["172.16.128.7"],
        f.owner("cluster", "first")
    );
    let second = f.allocate("vip-pool", "second", None).await;
    assert!(
        second.as_ref().is_err_and(AddressError::is_exhausted),
        "a second VIP from a /32: {second:?}"
    );
    // The owners exist: the controller keeps their addresses over its next passes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node_pool = f.wait_state("node-pool", "poolExhausted").await;
    assert_eq!(
        node_pool.status.unwrap().address_allocation["172.16.128.11"],
        node
    );
    let reconciled = f
        .operator
        .metric_sum(
            "ingot_reconciliations_total",
            &[r#"controller="provisioning-addresspool""#],
        )
        .await;
    assert!(reconciled >= 3.0, "{reconciled}");
    let timed = f
        .operator
        .metric_sum(
            "ingot_reconcile_duration_seconds_count",
            &[r#"controller="provisioning-addresspool""#],
        )
        .await;
    assert!(timed >= 3.0, "{timed}");
    // A pool of another namespace is not this operator's (--provisioning-namespace).
    assert!(elsewhere.get("outside").await.unwrap().status.is_none());
    // This operator runs without --boot-url: a Cluster with nothing wrong is held, saying so.
    let valid: Cluster = serde_json::from_value(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "valid"},
        "spec": {"version": "v1.7.1", "imageURL": "http://127.0.0.1:9/iso", "nodes": [],
            "vipConfig": {"addressPoolReference": {"name": "vip-pool", "namespace": f.ns}}}
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &valid)
        .await
        .unwrap();
    let held = wait_for("a valid Cluster held", WAIT, || async {
        let cluster = clusters.get("valid").await.ok()?;
        cluster
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.reason == "BootServerUnset")
            .map(|c| c.message)
    })
    .await;
    assert!(held.contains("--boot-url"), "{held}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_24_never_hands_out_network_broadcast_gateway_or_reserved() {
    let f = start("prov-24").await;
    let spec = json!({"cidr": "10.20.0.0/24", "gateway": "10.20.0.254", "reservedAddresses": ["10.20.0.10"]});
    f.create_pool("lan", spec).await.unwrap();
    let pool = f.wait_state("lan", "poolReady").await;
    let status = pool.status.unwrap();
    assert_eq!(
        (status.start_address.as_str(), status.last_address.as_str()),
        ("10.20.0.1", "10.20.0.254")
    );
    assert_eq!(status.available_addresses, 253);
    assert_eq!(
        status.address_allocation["10.20.0.10"],
        AllocatedObject {
            kind: "reserved".into(),
            name: "reservedAddress".into(),
            namespace: "reserved".into()
        }
    );
    let mut seen = BTreeSet::new();
    for i in 0..252 {
        let name = format!("c{i}");
        f.create_cluster(&name).await;
        seen.insert(f.allocate("lan", &name, None).await.unwrap());
    }
    assert_eq!(seen.len(), 252);
    for never in ["10.20.0.0", "10.20.0.255", "10.20.0.254", "10.20.0.10"] {
        assert!(
            !seen.contains(&never.parse().unwrap()),
            "{never} was handed out"
        );
    }
    // Exhausted, then ready again once one is released.
    let pool = f.wait_state("lan", "poolExhausted").await;
    wait_for("Ready reason PoolExhausted", WAIT, || async {
        let pool = f.pools().get("lan").await.ok()?;
        (Fixture::condition(&pool, "Ready")?.1 == "PoolExhausted").then_some(())
    })
    .await;
    assert_eq!(pool.status.unwrap().address_allocation.len(), 253);
    f.create_cluster("late").await;
    let late = f.allocate("lan", "late", None).await;
    assert!(
        late.as_ref().is_err_and(AddressError::is_exhausted),
        "{late:?}"
    );
    let c7 = f.owner("cluster", "c7");
    assert!(
        release_address(&f.client, &f.pool_ref("lan"), &c7)
            .await
            .unwrap()
    );
    assert!(
        !release_address(&f.client, &f.pool_ref("lan"), &c7)
            .await
            .unwrap()
    );
    f.wait_state("lan", "poolReady").await;
    assert_eq!(
        f.allocate("lan", "late", None).await.unwrap(),
        Ipv4Addr::new(10, 20, 0, 8)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_address_is_honoured_and_refused_when_taken_or_not_the_pools() {
    let f = start("prov-static").await;
    let spec =
        json!({"cidr": "10.21.0.0/24", "gateway": "10.21.0.1", "reservedAddresses": ["10.21.0.9"]});
    f.create_pool("lan", spec).await.unwrap();
    f.wait_state("lan", "poolReady").await;
    for name in ["a", "b"] {
        f.create_cluster(name).await;
    }
    assert_eq!(
        f.allocate("lan", "a", Some("10.21.0.50")).await.unwrap(),
        Ipv4Addr::new(10, 21, 0, 50)
    );
    for (address, says) in [
        ("10.21.0.50", "is held by cluster"),
        ("10.22.0.5", "is not in the pool's cidr 10.21.0.0/24"),
        ("10.21.0.1", "is the pool's gateway"),
        ("10.21.0.0", "is the network address"),
        ("10.21.0.255", "is the broadcast address"),
        ("10.21.0.9", "reservedAddresses"),
    ] {
        let error = f.allocate("lan", "b", Some(address)).await.unwrap_err();
        assert!(!error.is_retryable(), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("staticAddress") && message.contains(says),
            "{address}: {message}"
        );
    }
    let pool = f.pools().get("lan").await.unwrap();
    let held: Vec<_> = pool
        .status
        .unwrap()
        .address_allocation
        .into_keys()
        .collect();
    assert_eq!(held, ["10.21.0.50", "10.21.0.9"]);
    // An owner that does not exist loses its address on the controller's next pass.
    f.allocate("lan", "ghost", Some("10.21.0.77"))
        .await
        .unwrap();
    wait_for(
        "the address of a Cluster that does not exist freed",
        WAIT,
        || async {
            let pool = f.pools().get("lan").await.ok()?;
            (!pool.status?.address_allocation.contains_key("10.21.0.77")).then_some(())
        },
    )
    .await;
    f.wait_event("lan", "AddressFreed", "10.21.0.77 freed: its cluster")
        .await;
    let pool = f.pools().get("lan").await.unwrap();
    assert!(
        pool.status
            .unwrap()
            .address_allocation
            .contains_key("10.21.0.50")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_allocations_from_separate_clients_never_double() {
    let f = start("prov-race").await;
    // 62 hosts less the gateway: 61 addresses for 70 owners.
    f.create_pool(
        "lan",
        json!({"cidr": "10.23.0.0/26", "gateway": "10.23.0.1"}),
    )
    .await
    .unwrap();
    f.wait_state("lan", "poolReady").await;
    let owners: Vec<String> = (0..70).map(|i| format!("c{i}")).collect();
    for name in &owners {
        f.create_cluster(name).await;
    }
    let env = ingot_testenv::shared().await;
    let tasks: Vec<_> = owners
        .iter()
        .map(|name| {
            let client = env.client().unwrap();
            let (pool, owner) = (f.pool_ref("lan"), f.owner("cluster", name));
            tokio::spawn(async move { allocate_address(&client, &pool, &owner, None).await })
        })
        .collect();
    let mut given = Vec::new();
    let mut exhausted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(address) => given.push(address),
            Err(error) if error.is_exhausted() => exhausted += 1,
            Err(other) => panic!("{other}"),
        }
    }
    let distinct: BTreeSet<_> = given.iter().collect();
    assert_eq!((given.len(), distinct.len(), exhausted), (61, 61, 9));
    let pool = f.wait_state("lan", "poolExhausted").await;
    let recorded = pool.status.unwrap().address_allocation;
    assert_eq!(recorded.len(), 61);
    for address in &given {
        assert!(
            recorded.contains_key(&address.to_string()),
            "{address} not recorded"
        );
    }
}

/// The Cluster controller takes a pool's addresses for all its nodes in one write
/// (`allocate_addresses`). Batches from separate clients at once, beside single allocations,
/// never give an address twice; each batch gives its owners in order up to the first refusal
/// (here: the pool exhausted), and what it returned is what the pool records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_never_double_and_stop_at_the_first_refusal() {
    let f = start("prov-batch").await;
    // 30 hosts less the gateway: 29 addresses for 6 batches of 6 owners and 6 single owners.
    f.create_pool(
        "lan",
        json!({"cidr": "10.25.0.0/27", "gateway": "10.25.0.1"}),
    )
    .await
    .unwrap();
    f.wait_state("lan", "poolReady").await;
    let batches: Vec<Vec<String>> = (0..6)
        .map(|b| (0..6).map(|i| format!("b{b}-{i}")).collect())
        .collect();
    let singles: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for name in batches.iter().flatten().chain(&singles) {
        f.create_cluster(name).await;
    }
    let env = ingot_testenv::shared().await;
    let batch_tasks: Vec<_> = batches
        .iter()
        .map(|names| {
            let client = env.client().unwrap();
            let pool = f.pool_ref("lan");
            let owners: Vec<_> = names
                .iter()
                .map(|n| (f.owner("cluster", n), None))
                .collect();
            tokio::spawn(async move { allocate_addresses(&client, &pool, &owners).await })
        })
        .collect();
    let single_tasks: Vec<_> = singles
        .iter()
        .map(|name| {
            let client = env.client().unwrap();
            let (pool, owner) = (f.pool_ref("lan"), f.owner("cluster", name));
            tokio::spawn(async move { allocate_address(&client, &pool, &owner, None).await })
        })
        .collect();
    let mut given: Vec<(String, Ipv4Addr)> = Vec::new();
    for (names, task) in batches.iter().zip(batch_tasks) {
        let (addresses, refused) = task.await.unwrap();
        match &refused {
            None => assert_eq!(addresses.len(), names.len()),
            Some(e) => assert!(e.is_exhausted(), "{e}"),
        }
        given.extend(names.iter().cloned().zip(addresses));
    }
    for (name, task) in singles.iter().zip(single_tasks) {
        match task.await.unwrap() {
            Ok(address) => given.push((name.clone(), address)),
            Err(error) if error.is_exhausted() => {}
            Err(other) => panic!("{other}"),
        }
    }
    let distinct: BTreeSet<_> = given.iter().map(|(_, a)| a).collect();
    assert_eq!((given.len(), distinct.len()), (29, 29), "{given:?}");
    let pool = f.wait_state("lan", "poolExhausted").await;
    let recorded = pool.status.unwrap().address_allocation;
    assert_eq!(recorded.len(), 29);
    for (name, address) in &given {
        assert_eq!(
            recorded.get(&address.to_string()).map(|o| o.name.as_str()),
            Some(name.as_str()),
            "{address}"
        );
    }

    // A refusal in the middle: the owner before it gets its address, the one after is not
    // tried.
    f.create_pool(
        "small",
        json!({"cidr": "10.26.0.0/29", "gateway": "10.26.0.1"}),
    )
    .await
    .unwrap();
    f.wait_state("small", "poolReady").await;
    for name in ["x", "y", "z"] {
        f.create_cluster(name).await;
    }
    let owners = vec![
        (f.owner("cluster", "x"), None),
        (f.owner("cluster", "y"), Some("10.26.0.2".to_owned())),
        (f.owner("cluster", "z"), None),
    ];
    let (addresses, refused) = allocate_addresses(&f.client, &f.pool_ref("small"), &owners).await;
    assert_eq!(addresses, vec!["10.26.0.2".parse::<Ipv4Addr>().unwrap()]);
    let refused = refused.expect("y's staticAddress is x's").to_string();
    assert!(refused.contains("10.26.0.2"), "{refused}");
    let pool = f.pools().get("small").await.unwrap();
    let holders: Vec<String> = pool
        .status
        .unwrap()
        .address_allocation
        .values()
        .map(|o| o.name.clone())
        .collect();
    assert_eq!(holders, vec!["x".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_survive_a_restart_of_the_operator() {
    let mut f = start("prov-restart").await;
    f.create_pool(
        "lan",
        json!({"cidr": "10.24.0.0/28", "gateway": "10.24.0.1"}),
    )
    .await
    .unwrap();
    f.wait_state("lan", "poolReady").await;
    f.create_cluster("a").await;
    let first = f.allocate("lan", "a", None).await.unwrap();
    f.operator.restart(None);
    wait_for("the restarted operator to reconcile", WAIT, || async {
        let n = f
            .operator
            .metric_sum(
                "ingot_reconciliations_total",
                &[r#"controller="provisioning-addresspool""#],
            )
            .await;
        (n >= 1.0).then_some(())
    })
    .await;
    f.create_cluster("b").await;
    assert_eq!(f.allocate("lan", "a", None).await.unwrap(), first);
    assert_ne!(f.allocate("lan", "b", None).await.unwrap(), first);
    let pool = f.pools().get("lan").await.unwrap();
    assert_eq!(
        pool.status.unwrap().address_allocation[&first.to_string()],
        f.owner("cluster", "a")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_waits_while_an_owner_holds_an_address_and_frees_those_gone() {
    let f = start("prov-delete").await;
    f.create_pool(
        "lan",
        json!({"cidr": "10.25.0.0/28", "gateway": "10.25.0.1"}),
    )
    .await
    .unwrap();
    f.wait_state("lan", "poolReady").await;
    for name in ["kept", "gone"] {
        f.create_cluster(name).await;
        f.allocate("lan", name, None).await.unwrap();
    }
    f.pools()
        .delete("lan", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the Deleting condition naming both holders",
        WAIT,
        || async {
            let pool = f.pools().get("lan").await.ok()?;
            let (status, _, message) = Fixture::condition(&pool, "Deleting")?;
            let names = message.contains(&format!("cluster {}/kept", f.ns))
                && message.contains(&format!("cluster {}/gone", f.ns));
            (status == "True" && names).then_some(())
        },
    )
    .await;
    f.wait_event("lan", "DeletionBlocked", "kept").await;
    f.create_cluster("newcomer").await;
    let refused = f.allocate("lan", "newcomer", None).await;
    assert!(
        matches!(refused, Err(AddressError::Deleting(_))),
        "{refused:?}"
    );
    // The Cluster `gone` goes: its address is freed, `kept` still holds the pool.
    Api::<Cluster>::namespaced(f.client.clone(), &f.ns)
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the address of the deleted Cluster freed", WAIT, || async {
        let pool = f.pools().get("lan").await.ok()?;
        let holders: Vec<_> = pool
            .status?
            .address_allocation
            .into_values()
            .map(|o| o.name)
            .collect();
        (holders == ["kept"]).then_some(())
    })
    .await;
    // The Cluster's own finalizer freed its address (the pool frees those of owners gone
    // without one: `a_static_address_is_honoured...`).
    assert!(f.pools().get("lan").await.is_ok(), "deleted while held");
    release_address(&f.client, &f.pool_ref("lan"), &f.owner("cluster", "kept"))
        .await
        .unwrap();
    wait_for("the pool gone", WAIT, || async {
        f.pools()
            .get_opt("lan")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_held_with_a_condition_naming_the_field() {
    let f = start("prov-bad").await;
    // An invalid CIDR never gets in (the CRD's CEL rule).
    let refused = f
        .create_pool(
            "cidr",
            json!({"cidr": "10.26.0.0/40", "gateway": "10.26.0.1"}),
        )
        .await;
    assert!(
        format!("{refused:?}").contains("cidr must be a CIDR"),
        "{refused:?}"
    );
    f.create_pool(
        "first",
        json!({"cidr": "10.26.0.0/24", "gateway": "10.26.0.1"}),
    )
    .await
    .unwrap();
    f.wait_state("first", "poolReady").await;
    let cases = [
        (
            "offlink",
            json!({"cidr": "10.27.0.0/24", "gateway": "10.28.0.1"}),
            "spec.gateway 10.28.0.1 is not on the pool's network",
        ),
        (
            "reserved",
            json!({"cidr": "10.29.0.0/24", "gateway": "10.29.0.1", "reservedAddresses": ["10.30.0.1"]}),
            "spec.reservedAddresses",
        ),
        (
            "netmask",
            json!({"cidr": "10.31.0.0/24", "gateway": "10.31.0.1", "netmask": "255.0.255.0"}),
            "spec.netmask",
        ),
        (
            "overlap",
            json!({"cidr": "10.26.0.128/25", "gateway": "10.26.0.129"}),
            "shares addresses with AddressPool first",
        ),
    ];
    for (name, spec, _) in &cases {
        f.create_pool(name, spec.clone()).await.unwrap();
    }
    f.create_cluster("a").await;
    for (name, _, says) in cases {
        let pool = f.wait_state(name, "poolInvalid").await;
        let (status, _, message) = Fixture::condition(&pool, "Ready").unwrap();
        assert_eq!(status, "False");
        assert!(
            message.contains(says) && message.contains("give"),
            "{name}: {message}"
        );
        assert!(pool.status.unwrap().address_allocation.is_empty());
        assert!(matches!(
            f.allocate(name, "a", None).await,
            Err(AddressError::NotReady(..))
        ));
        wait_for("the InvalidSpec Event", WAIT, || async {
            f.event(name, "InvalidSpec", says).await.then_some(())
        })
        .await;
    }
    // The earlier pool is untouched by the later one.
    assert!(f.allocate("first", "a", None).await.is_ok());
}
