//! The servers behind a bmc-sim fleet, provisioned as Harvester Seeder does: a one-time PXE
//! boot through Redfish, the iPXE script and config served by MAC from a loopback server that
//! records what it is asked, the installer's webhook, the reboot into the installed system,
//! and the new cluster in a second kube-apiserver bound to the cluster's VIP.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, SimBmc, Vendor};
use ingot_boot_sim::Running;
use ingot_boot_sim::servers::{ServerFleet, ServerFleetConfig, ServerState, ServerStatus};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use serde_json::json;
use tokio::sync::OnceCell;

const VIP: &str = "127.0.10.1";
const GATEWAY: &str = "127.0.20.1";
const TOKEN: &str = "Kx7pQ2mN9vR4tL8w";
const DEADLINE: Duration = Duration::from_secs(90);

static TARGET: OnceCell<ingot_testenv::ControlPlane> = OnceCell::const_new();

/// The second control plane: the new Harvester cluster at its VIP.
async fn target() -> kube::Config {
    let plane = TARGET
        .get_or_init(|| async {
            let options = ingot_testenv::Options {
                controller_manager: false,
                install_crds: false,
                watchdog_parent: Some(std::process::id()),
                bind_address: VIP.parse().unwrap(),
                bootstrap_token_auth: true,
                ..ingot_testenv::Options::from_env().unwrap()
            };
            ingot_testenv::ControlPlane::start(options).await.unwrap()
        })
        .await;
    assert!(plane.api_url().starts_with(&format!("https://{VIP}:")));
    ingot_testenv::TestEnv::connect(plane.kubeconfig_path())
        .await
        .unwrap()
        .config()
}

/// The provisioning side: scripts and configs by MAC, and what it was asked.
#[derive(Clone, Default)]
struct Provisioner(Arc<Mutex<Served>>);

#[derive(Default)]
struct Served {
    scripts: HashMap<String, String>,
    configs: HashMap<String, String>,
    script_gets: HashMap<String, u32>,
    /// `(mac, source address)` of each config fetch.
    config_gets: Vec<(String, IpAddr)>,
    webhooks: HashMap<String, u32>,
}

async fn script(State(p): State<Provisioner>, Path(mac): Path<String>) -> (StatusCode, String) {
    let mut s = p.0.lock().unwrap();
    *s.script_gets.entry(mac.clone()).or_default() += 1;
    match s.scripts.get(&mac) {
        Some(body) => (StatusCode::OK, body.clone()),
        None => (StatusCode::NOT_FOUND, String::new()),
    }
}

async fn config(
    State(p): State<Provisioner>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(mac): Path<String>,
) -> (StatusCode, String) {
    let mut s = p.0.lock().unwrap();
    s.config_gets.push((mac.clone(), peer.ip()));
    match s.configs.get(&mac) {
        Some(body) => (StatusCode::OK, body.clone()),
        None => (StatusCode::NOT_FOUND, String::new()),
    }
}

async fn webhook(State(p): State<Provisioner>, Path(name): Path<String>) -> StatusCode {
    *p.0.lock().unwrap().webhooks.entry(name).or_default() += 1;
    StatusCode::OK
}

impl Provisioner {
    async fn serve(&self) -> String {
        let app = axum::Router::new()
            .route("/boot/{mac}", axum::routing::get(script))
            .route("/config/{mac}", axum::routing::get(config))
            .route("/disable/{name}", axum::routing::put(webhook))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app).await.unwrap();
        });
        format!("http://{addr}")
    }

    fn with<T>(&self, f: impl FnOnce(&mut Served) -> T) -> T {
        f(&mut self.0.lock().unwrap())
    }
}

/// A node as Seeder renders it: the iPXE script (static `ip=`) and the Harvester config.
struct NodeSpec {
    name: String,
    mac: String,
    address: String,
    create: bool,
    token: String,
}

fn ipxe_script(base: &str, n: &NodeSpec) -> String {
    let v = "v1.4.2";
    format!(
        "#!ipxe\ndhcp\niflinkwait -t 5000\nset base http://127.0.0.1:9/images/{v}\n\
         kernel ${{base}}/harvester-{v}-vmlinuz-amd64 initrd=harvester-{v}-initrd-amd64 \
         ip={addr}::{GATEWAY}:255.255.255.0::netboot:off net.ifnames=1 rd.cos.disable rd.noverifyssl \
         BOOTIF={mac} ifname=netboot:{mac} root=live:${{base}}/harvester-{v}-rootfs-amd64.squashfs \
         console=tty1 harvester.install.automatic=true harvester.install.config_url={base}/config/{mac}\n\
         initrd ${{base}}/harvester-{v}-initrd-amd64\nboot\n",
        addr = n.address,
        mac = n.mac,
    )
}

fn harvester_config(base: &str, n: &NodeSpec, extra_os: &str) -> String {
    let mode = if n.create {
        format!("  mode: create\n  vip: {VIP}\n  vipMode: static\n")
    } else {
        "  mode: join\n".to_owned()
    };
    let server = if n.create {
        String::new()
    } else {
        format!("serverUrl: https://{VIP}:443\n")
    };
    format!(
        "schemeVersion: 1\ntoken: {token}\n{server}os:\n  hostname: {name}\n  password: secret\n{extra_os}\
         install:\n{mode}  managementInterface:\n    method: static\n    ip: {addr}\n    subnetMask: 255.255.255.0\n\
         \x20   gateway: {GATEWAY}\n    defaultRoute: true\n    interfaces:\n    - hwAddr: {mac}\n\
         \x20 automatic: true\n  device: /dev/sda\n  skipchecks: true\n\
         \x20 isoUrl: http://127.0.0.1:9/images/v1.4.2/harvester-v1.4.2-amd64.iso\n\
         \x20 webhooks:\n  - event: SUCCEEDED\n    method: PUT\n    url: {base}/disable/{name}\n",
        token = n.token,
        name = n.name,
        addr = n.address,
        mac = n.mac,
    )
}

/// A manifest the create node deploys (as ingot installs its node-reading credential).
const MANIFEST: &str = "  write_files:\n  - path: /var/lib/rancher/rke2/server/manifests/ingot-reader.yaml\n    content: |\n      apiVersion: v1\n      kind: ServiceAccount\n      metadata:\n        name: ingot-reader\n        namespace: kube-system\n      ---\n      apiVersion: rbac.authorization.k8s.io/v1\n      kind: ClusterRole\n      metadata:\n        name: ingot-node-reader\n      rules:\n      - apiGroups: [\"\"]\n        resources: [nodes]\n        verbs: [get, list, watch]\n      ---\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n        name: ingot-reader-hint\n      data:\n        a: b\n";

struct Env {
    fleet: Fleet,
    servers: ServerFleet,
    _running: Running,
    prov: Provisioner,
    base: String,
    http: reqwest::Client,
    target: kube::Client,
    prefix: String,
}

impl Env {
    async fn start(count: usize, boot_url: Option<&str>) -> Env {
        let target_config = target().await;
        let spec = BmcSpec {
            vendor: Vendor::Dell,
            power_delay: Duration::from_secs(2),
            ..BmcSpec::default()
        };
        let fleet = Fleet::start(FleetOptions::default(), vec![spec; count])
            .await
            .unwrap();
        let prov = Provisioner::default();
        let base = prov.serve().await;
        let mut config = ServerFleetConfig::new(
            boot_url.map_or(format!("{base}/boot"), str::to_owned),
            target_config.clone(),
        );
        config.install_time = Duration::from_secs(3);
        config.heartbeat_interval = Duration::from_millis(500);
        let bmcs = fleet.bmcs.iter().map(|b| b.state.clone()).collect();
        let servers = ServerFleet::new(config, bmcs).unwrap();
        let running = servers.start();
        Env {
            fleet,
            servers,
            _running: running,
            prov,
            base,
            http: reqwest::Client::new(),
            target: kube::Client::try_from(target_config).unwrap(),
            prefix: format!("bf-{}", ingot_testenv::random_suffix(5)),
        }
    }

    /// Node `i`: its MAC (NIC 0), an address from the pool, create for 0.
    fn node(&self, i: usize, token: &str) -> NodeSpec {
        NodeSpec {
            name: format!("{}-node-{i}", self.prefix),
            mac: self.fleet.bmcs[i].state.mac(0),
            address: format!("127.0.20.{}", 10 + i),
            create: i == 0,
            token: token.to_owned(),
        }
    }

    fn serve_node(&self, n: &NodeSpec, extra_os: &str) {
        let script = ipxe_script(&self.base, n);
        let config = harvester_config(&self.base, n, extra_os);
        self.prov.with(|s| {
            s.scripts.insert(n.mac.clone(), script);
            s.configs.insert(n.mac.clone(), config);
        });
    }

    /// What the operator does: a one-time PXE override, then off and on, over Redfish.
    async fn pxe_boot(&self, i: usize) {
        let bmc = &self.fleet.bmcs[i];
        let system = format!("{}/redfish/v1/Systems/System.Embedded.1", bmc.url());
        let once = json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
        self.redfish(reqwest::Method::PATCH, &system, once).await;
        self.power(bmc, "ForceOff", "Off").await;
        self.power(bmc, "On", "On").await;
    }

    async fn power(&self, bmc: &SimBmc, reset: &str, lands: &str) {
        let url = format!(
            "{}/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset",
            bmc.url()
        );
        self.redfish(reqwest::Method::POST, &url, json!({"ResetType": reset}))
            .await;
        let end = tokio::time::Instant::now() + DEADLINE;
        while bmc.state.snapshot().power_state != lands {
            assert!(tokio::time::Instant::now() < end, "power never {lands}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn redfish(&self, method: reqwest::Method, url: &str, body: serde_json::Value) {
        let r = self
            .http
            .request(method, url)
            .basic_auth("admin", Some("password"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{url}: {}", r.status());
    }

    async fn wait_server(
        &self,
        i: usize,
        what: &str,
        pred: impl Fn(&ServerStatus) -> bool,
    ) -> ServerStatus {
        let end = tokio::time::Instant::now() + DEADLINE;
        loop {
            let s = self.servers.server(i).unwrap();
            if pred(&s) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "server {i}: {what}; now {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_node(&self, name: &str, what: &str, pred: impl Fn(&Node) -> bool) -> Node {
        let nodes: Api<Node> = Api::all(self.target.clone());
        let end = tokio::time::Instant::now() + DEADLINE;
        loop {
            if let Some(n) = nodes.get_opt(name).await.unwrap()
                && pred(&n)
            {
                return n;
            }
            assert!(tokio::time::Instant::now() < end, "node {name}: {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn node_absent(&self, name: &str) -> bool {
        let nodes: Api<Node> = Api::all(self.target.clone());
        nodes.get_opt(name).await.unwrap().is_none()
    }

    fn devices(&self, i: usize) -> Vec<String> {
        self.fleet.bmcs[i]
            .state
            .boots()
            .into_iter()
            .map(|b| b.device)
            .collect()
    }
}

fn ready(n: &Node) -> Option<String> {
    let conditions = n.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn internal_ip(n: &Node) -> Option<String> {
    let addresses = n.status.as_ref()?.addresses.as_ref()?;
    addresses
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pxe_installs_a_new_cluster_create_then_joins() {
    let env = Env::start(3, None).await;
    let nodes: Vec<NodeSpec> = (0..3)
        .map(|i| {
            env.node(
                i,
                if i == 2 {
                    "not-the-cluster-token"
                } else {
                    TOKEN
                },
            )
        })
        .collect();
    // Found powered on with an empty disk: no operating system, as hardware.
    for i in 0..3 {
        env.wait_server(i, "no OS on its disk", |s| {
            s.state == ServerState::Stuck
                && s.reason
                    .as_deref()
                    .unwrap_or_default()
                    .contains("no operating system")
        })
        .await;
    }
    for (i, n) in nodes.iter().enumerate() {
        env.serve_node(n, if i == 0 { MANIFEST } else { "" });
    }
    // A join node installed before the cluster exists waits for it.
    env.pxe_boot(1).await;
    env.wait_server(1, "waiting for the cluster", |s| {
        s.state == ServerState::Starting
            && s.reason
                .as_deref()
                .unwrap_or_default()
                .contains("waiting for the cluster")
    })
    .await;
    assert!(env.node_absent(&nodes[1].name).await);
    tokio::join!(env.pxe_boot(0), env.pxe_boot(2));

    let n0 = env
        .wait_node(&nodes[0].name, "Ready", |n| {
            ready(n).as_deref() == Some("True")
        })
        .await;
    assert_eq!(internal_ip(&n0).as_deref(), Some(nodes[0].address.as_str()));
    let n1 = env
        .wait_node(&nodes[1].name, "Ready", |n| {
            ready(n).as_deref() == Some("True")
        })
        .await;
    assert_eq!(internal_ip(&n1).as_deref(), Some(nodes[1].address.as_str()));
    let stuck = env
        .wait_server(2, "stuck on its wrong token", |s| {
            s.state == ServerState::Stuck
        })
        .await;
    assert!(
        stuck
            .reason
            .as_deref()
            .unwrap()
            .contains("refused the join token"),
        "{stuck:?}"
    );
    assert!(
        !stuck
            .reason
            .as_deref()
            .unwrap()
            .contains("not-the-cluster-token")
    );
    assert!(env.node_absent(&nodes[2].name).await);

    for (i, n) in nodes.iter().enumerate() {
        // One script per PXE boot, the config fetched from the node's own address, one
        // webhook per install, and the installed system booted from disk.
        env.prov.with(|s| {
            assert_eq!(s.script_gets.get(&n.mac), Some(&1), "node {i}");
            let sources: Vec<String> = s
                .config_gets
                .iter()
                .filter(|(m, _)| *m == n.mac)
                .map(|(_, ip)| ip.to_string())
                .collect();
            assert_eq!(sources, vec![n.address.clone()], "node {i}");
            assert_eq!(s.webhooks.get(&n.name), Some(&1), "node {i}");
        });
        assert_eq!(env.devices(i), vec!["Hdd", "Pxe", "Hdd"], "node {i}");
        let s = env.servers.server(i).unwrap();
        assert_eq!(
            (s.installs, s.webhooks_sent, s.boot_device.as_deref()),
            (1, 1, Some("Hdd"))
        );
    }

    // The create node deployed its manifest into the new cluster.
    let sa: Api<ServiceAccount> = Api::namespaced(env.target.clone(), "kube-system");
    assert!(sa.get_opt("ingot-reader").await.unwrap().is_some());
    let roles: Api<ClusterRole> = Api::all(env.target.clone());
    assert!(roles.get_opt("ingot-node-reader").await.unwrap().is_some());
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.target.clone(), "default");
    assert!(cms.get_opt("ingot-reader-hint").await.unwrap().is_some());

    // Given the right token and PXE-booted again, the third node reinstalls and joins.
    env.serve_node(&env.node(2, TOKEN), "");
    env.pxe_boot(2).await;
    let n2 = env
        .wait_node(&nodes[2].name, "Ready", |n| {
            ready(n).as_deref() == Some("True")
        })
        .await;
    assert_eq!(internal_ip(&n2).as_deref(), Some(nodes[2].address.as_str()));
    env.prov
        .with(|s| assert_eq!(s.webhooks.get(&nodes[2].name), Some(&2)));

    // Powered off through its BMC, a join node goes NotReady and its Lease is no longer renewed.
    let leases: Api<Lease> = Api::namespaced(env.target.clone(), "kube-node-lease");
    env.power(&env.fleet.bmcs[1], "ForceOff", "Off").await;
    env.wait_node(&nodes[1].name, "NotReady", |n| {
        ready(n).as_deref() == Some("Unknown")
    })
    .await;
    let renew = |l: Lease| l.spec.unwrap().renew_time.unwrap().0;
    let stopped = renew(leases.get(&nodes[1].name).await.unwrap());
    let running = renew(leases.get(&nodes[0].name).await.unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(renew(leases.get(&nodes[1].name).await.unwrap()), stopped);
    assert!(
        renew(leases.get(&nodes[0].name).await.unwrap()) > running,
        "the create node heartbeats"
    );
    assert_eq!(env.servers.server(1).unwrap().state, ServerState::Off);
    // Powered on again, it boots its disk and is Ready again.
    env.power(&env.fleet.bmcs[1], "On", "On").await;
    env.wait_node(&nodes[1].name, "Ready again", |n| {
        ready(n).as_deref() == Some("True")
    })
    .await;
    assert_eq!(env.devices(1), vec!["Hdd", "Pxe", "Hdd", "Hdd"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_and_config_faults_leave_servers_stuck() {
    let env = Env::start(1, None).await;
    let n = env.node(0, TOKEN);
    // No script yet: 404, stuck, and tried again at the next power-on.
    env.pxe_boot(0).await;
    let s = env
        .wait_server(0, "stuck on 404", |s| {
            s.state == ServerState::Stuck && s.boot_count == 2
        })
        .await;
    assert!(s.reason.as_deref().unwrap().contains("HTTP 404"), "{s:?}");
    // A config the installer refuses: stuck with the reason, no webhook, no Node.
    env.serve_node(&n, "");
    let refused = harvester_config(&env.base, &n, "").replace("  device: /dev/sda\n", "");
    env.prov.with(|s| s.configs.insert(n.mac.clone(), refused));
    env.pxe_boot(0).await;
    let s = env
        .wait_server(0, "refused config", |s| {
            s.state == ServerState::Stuck && s.boot_count == 3
        })
        .await;
    assert!(
        s.reason.as_deref().unwrap().contains("install.device"),
        "{s:?}"
    );
    assert_eq!(s.script_fetches, 2);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(env.servers.server(0).unwrap().state, ServerState::Stuck);
    env.prov.with(|s| assert!(s.webhooks.is_empty()));
    assert!(env.node_absent(&n.name).await);
    assert_eq!(env.devices(0), vec!["Hdd", "Pxe", "Pxe"]);

    // The status listing over HTTP.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = env.servers.router();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let listing: serde_json::Value = env
        .http
        .get(format!("http://{addr}/servers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["servers"][0]["state"], "stuck");
    assert_eq!(listing["servers"][0]["mac"], n.mac.as_str());
    let missing = env
        .http
        .get(format!("http://{addr}/servers/7"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // The boot server refuses connections: stuck with the reason.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/boot", closed.local_addr().unwrap());
    drop(closed);
    let other = Env::start(1, Some(&url)).await;
    other.pxe_boot(0).await;
    let s = other
        .wait_server(0, "refused", |s| {
            s.state == ServerState::Stuck && s.boot_count == 2
        })
        .await;
    assert!(s.reason.as_deref().unwrap().contains("PXE: GET"), "{s:?}");
}

/// Accepts connections and closes the first `drops` without an answer; answers the rest 200.
/// Returns its URL and the number of connections seen.
async fn flaky_webhook(drops: usize) -> (String, Arc<Mutex<usize>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/disable/flaky", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let n = {
                let mut c = counter.lock().unwrap();
                *c += 1;
                *c
            };
            if n <= drops {
                drop(conn);
                continue;
            }
            let mut buf = vec![0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
        }
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_connection_errors_are_retried() {
    let env = Env::start(1, None).await;
    let n = env.node(0, "another-cluster-token");
    env.serve_node(&n, "");
    let (url, seen) = flaky_webhook(2).await;
    let config = harvester_config(&env.base, &n, "")
        .replace(&format!("{}/disable/{}", env.base, n.name), &url);
    env.prov.with(|s| s.configs.insert(n.mac.clone(), config));
    env.pxe_boot(0).await;
    let s = env
        .wait_server(0, "installed and rebooted", |s| {
            s.installs == 1 && s.boot_device.as_deref() == Some("Hdd")
        })
        .await;
    assert_eq!(s.webhooks_sent, 1, "{s:?}");
    assert_eq!(
        *seen.lock().unwrap(),
        3,
        "two dropped connections, then the PUT"
    );
    assert!(s.warnings.iter().all(|w| !w.contains("webhook")), "{s:?}");
}
