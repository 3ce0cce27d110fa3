//! The booting servers against the Metal emulator and a real kube-apiserver, over loopback.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use ingot_boot_sim::{
    Booter, BooterConfig, Expected, MachineState, MachineStatus, NotReady, Running,
};
use ingot_metal_sim::{SimConfig, SimServer};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::{Value, json};

const TOKEN: &str = "metal-token";
const PROJECT: &str = "5b1f0c3e-8d2a-4f6b-9c7d-1e2f3a4b5c6d";
const JOIN_TOKEN: &str = "K10-join-token-for-tests";
const VIP: &str = "192.0.2.10";
const USERDATA_URL: &str = "https://metadata.platformequinix.com/userdata";
const SHELL: &str = "#!ipxe\nshell\n";
const DEADLINE: Duration = Duration::from_secs(30);

/// A tiny loopback server for iPXE scripts and configs: path → body.
#[derive(Clone, Default)]
struct Files(Arc<Mutex<HashMap<String, String>>>);

impl Files {
    fn put(&self, path: &str, body: String) {
        self.0.lock().unwrap().insert(path.to_owned(), body);
    }
}

async fn serve_file(State(files): State<Files>, Path(path): Path<String>) -> impl IntoResponse {
    match files.0.lock().unwrap().get(&path) {
        Some(body) => (StatusCode::OK, body.clone()),
        None => (StatusCode::NOT_FOUND, String::new()),
    }
}

async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    addr
}

struct Env {
    sim: SimServer,
    files: Files,
    files_url: String,
    booter: Booter,
    _running: Running,
    http: reqwest::Client,
    nodes: Api<Node>,
    leases: Api<Lease>,
    prefix: String,
}

impl Env {
    async fn start() -> Env {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let sim = SimServer::start(
            SimConfig::single(TOKEN, PROJECT),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let files = Files::default();
        let addr = serve(
            axum::Router::new()
                .route("/{*path}", axum::routing::get(serve_file))
                .with_state(files.clone()),
        )
        .await;
        let mut config = BooterConfig::new(
            sim.base_url(),
            Expected {
                token: JOIN_TOKEN.to_owned(),
                host: VIP.to_owned(),
                port: None,
                schema: None,
            },
        );
        config.project = Some(PROJECT.to_owned());
        config.poll_interval = Duration::from_millis(100);
        config.heartbeat_interval = Duration::from_millis(300);
        let booter = Booter::new(config, client.clone()).unwrap();
        let running = booter.start();
        Env {
            sim,
            files,
            files_url: format!("http://{addr}"),
            booter,
            _running: running,
            http: reqwest::Client::new(),
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client, "kube-node-lease"),
            prefix: format!("boot-{}", ingot_testenv::random_suffix(5)),
        }
    }

    async fn set_ready_via_library(&self, key: &str) {
        let m = self.booter.set_ready(key).await.unwrap();
        assert_eq!(m.ready.as_deref(), Some("True"));
    }

    fn hostname(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.sim.base_url()))
            .header("X-Auth-Token", TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Creates a custom_ipxe device; returns its id.
    async fn create(&self, hostname: &str, userdata: &str, ipxe_url: Option<&str>) -> String {
        let mut body = json!({
            "hostname": hostname, "plan": "c3.small.x86", "metro": "sv",
            "operating_system": "custom_ipxe", "userdata": userdata,
        });
        if let Some(u) = ipxe_url {
            body["ipxe_script_url"] = json!(u);
        }
        let d = self
            .api(
                reqwest::Method::POST,
                &format!("/projects/{PROJECT}/devices"),
                Some(body),
            )
            .await;
        d["id"].as_str().unwrap().to_owned()
    }

    /// The device's NIC MACs, eth0 first.
    async fn macs(&self, id: &str) -> Vec<String> {
        let d = self
            .api(reqwest::Method::GET, &format!("/devices/{id}"), None)
            .await;
        d["network_ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "NetworkPort")
            .map(|p| p["data"]["mac"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Sets userdata and the script URL, then reinstalls (the seed flow's second boot).
    async fn reinstall(&self, id: &str, userdata: &str, ipxe_url: &str) {
        self.api(
            reqwest::Method::PUT,
            &format!("/devices/{id}"),
            Some(json!({"userdata": userdata, "ipxe_script_url": ipxe_url})),
        )
        .await;
        self.api(
            reqwest::Method::POST,
            &format!("/devices/{id}/actions"),
            Some(json!({"type": "reinstall"})),
        )
        .await;
    }

    /// Puts an install script on the file server; returns its URL.
    fn script(&self, name: &str, script: String) -> String {
        self.files.put(name, script);
        format!("{}/{name}", self.files_url)
    }

    async fn wait_machine(
        &self,
        id: &str,
        what: &str,
        pred: impl Fn(&MachineStatus) -> bool,
    ) -> MachineStatus {
        let end = tokio::time::Instant::now() + DEADLINE;
        loop {
            let m = self.booter.machine(id);
            if let Some(m) = &m
                && pred(m)
            {
                return m.clone();
            }
            assert!(
                tokio::time::Instant::now() < end,
                "machine {id} never got {what}; last: {m:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_state(&self, id: &str, state: MachineState) -> MachineStatus {
        self.wait_machine(id, &format!("{state:?}"), |m| m.state == state)
            .await
    }

    async fn wait_node(&self, name: &str, what: &str, pred: impl Fn(&Node) -> bool) -> Node {
        let end = tokio::time::Instant::now() + DEADLINE;
        loop {
            let n = self.nodes.get_opt(name).await.unwrap();
            if let Some(n) = &n
                && pred(n)
            {
                return n.clone();
            }
            assert!(
                tokio::time::Instant::now() < end,
                "node {name} never got {what}; last: {:?}",
                n.and_then(|n| n.status)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn ready_condition(n: &Node) -> Option<k8s_openapi::api::core::v1::NodeCondition> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

fn ready_is(status: &'static str) -> impl Fn(&Node) -> bool {
    move |n| ready_condition(n).is_some_and(|c| c.status == status)
}

/// The install boot of a release, as ingot renders it; `extra` goes on the kernel line.
fn install_script(version: &str, config_url: &str, extra: &str) -> String {
    let base = format!("http://mirror.example/harvester/{version}");
    format!(
        "#!ipxe\ndhcp\nkernel {base}/harvester-{version}-vmlinuz-amd64 initrd=harvester-{version}-initrd-amd64 ip=dhcp net.ifnames=1 rd.cos.disable rd.noverifyssl root=live:{base}/harvester-{version}-rootfs-amd64.squashfs {extra} console=ttyS1,115200 harvester.install.automatic=true harvester.install.skipchecks=true boot_cmd=\"echo include_ping_test=yes >> /etc/conf.d/net-online\" harvester.install.config_url={config_url}\ninitrd {base}/harvester-{version}-initrd-amd64\nboot\n"
    )
}

/// A current-schema join config; `network` is the management_interface block (or empty).
fn current_config(hostname: &str, server_url: &str, token: &str, network: &str) -> String {
    format!(
        "#cloud-config\nscheme_version: 1\nserver_url: {server_url}\ntoken: {token}\nos:\n  hostname: {hostname}\n  password: secret\ninstall:\n  mode: join\n{network}  device: /dev/sda\n  iso_url: https://releases.example/harvester/v1.4.2/harvester-v1.4.2-amd64.iso\n  tty: ttyS1,115200n8\n  automatic: true\n"
    )
}

fn mgmt(macs: &[&str]) -> String {
    let mut s = String::from("  management_interface:\n    interfaces:\n");
    for m in macs {
        s.push_str(&format!("    - hwAddr: {m}\n"));
    }
    s.push_str("    method: dhcp\n    default_route: true\n    bond_options:\n      mode: balance-tlb\n      miimon: '100'\n");
    s
}

#[tokio::test]
async fn seed_flow_shell_then_install_joins_a_ready_node_that_heartbeats() {
    let env = Env::start().await;
    let host = env.hostname("seed");
    let id = env.create(&host, SHELL, None).await;

    let m = env.wait_state(&id, MachineState::Shell).await;
    assert_eq!(m.boot_count, Some(1));
    assert!(
        env.nodes.get_opt(&host).await.unwrap().is_none(),
        "a machine in the shell has no node"
    );

    let macs = env.macs(&id).await;
    let config = current_config(
        &host,
        &format!("https://{VIP}:443"),
        JOIN_TOKEN,
        &mgmt(&[&macs[0].to_uppercase(), &macs[1]]),
    );
    let url = env.script("seed.ipxe", install_script("v1.4.2", USERDATA_URL, ""));
    env.reinstall(&id, &config, &url).await;

    let m = env
        .wait_machine(&id, "joined after the reinstall", |m| {
            m.state == MachineState::Joined && m.boot_count == Some(2)
        })
        .await;
    assert_eq!(m.node.as_deref(), Some(host.as_str()));
    assert_eq!(m.ready.as_deref(), Some("True"));
    assert_eq!(m.schema, Some(ingot_boot_sim::Schema::Current));
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);

    let node = env.wait_node(&host, "Ready=True", ready_is("True")).await;
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], host);
    let addresses = node.status.as_ref().unwrap().addresses.clone().unwrap();
    let internal = addresses.iter().find(|a| a.type_ == "InternalIP").unwrap();
    assert!(internal.address.starts_with("10."), "{internal:?}");

    // The kubelet's heartbeat: lastHeartbeatTime moves on, the transition stays.
    let first = ready_condition(&node).unwrap();
    let later = env
        .wait_node(&host, "a newer heartbeat", |n| {
            ready_condition(n).unwrap().last_heartbeat_time != first.last_heartbeat_time
        })
        .await;
    let later = ready_condition(&later).unwrap();
    assert!(later.last_heartbeat_time.unwrap().0 > first.last_heartbeat_time.unwrap().0);
    assert_eq!(later.last_transition_time, first.last_transition_time);
    let lease = env.leases.get(&host).await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some(host.as_str())
    );

    // Reinstalled with a config the installer refuses: the kubelet is gone, the Node stays.
    let bad = current_config(
        &host,
        &format!("https://{VIP}:443"),
        "an-old-token",
        &mgmt(&[&macs[0]]),
    );
    env.reinstall(&id, &bad, &url).await;
    let m = env
        .wait_machine(&id, "stuck after the third boot", |m| {
            m.state == MachineState::Stuck && m.boot_count == Some(3)
        })
        .await;
    assert!(m.reason.unwrap().contains("token does not match"));
    assert_eq!(m.ready, None);
    assert!(env.nodes.get_opt(&host).await.unwrap().is_some());
}

#[tokio::test]
async fn single_boot_with_net_macs_on_the_kernel_line_joins() {
    let env = Env::start().await;
    let host = env.hostname("single");
    let p = "harvester.install.management_interface";
    let extra = format!(
        "{p}.interfaces=\"hwAddr:${{net0/mac}}\" {p}.interfaces=\"hwAddr:${{net1/mac}}\" {p}.method=dhcp {p}.bond_options.miimon=100 {p}.bond_options.mode=balance-tlb"
    );
    let url = env.script(
        "single.ipxe",
        install_script("v1.3.2", USERDATA_URL, &extra),
    );
    // The intermediate config: no management network, the kernel line brings it.
    let config = current_config(&host, &format!("https://{VIP}:443"), JOIN_TOKEN, "");
    let id = env.create(&host, &config, Some(&url)).await;
    let m = env.wait_state(&id, MachineState::Joined).await;
    assert_eq!(m.boot_count, Some(1));
    env.wait_node(&host, "Ready=True", ready_is("True")).await;

    // The same interfaces in the config as well are listed twice by the installer's merge.
    let host2 = env.hostname("twice");
    let id2 = env.create(&host2, SHELL, None).await;
    env.wait_state(&id2, MachineState::Shell).await;
    let macs = env.macs(&id2).await;
    let config = current_config(
        &host2,
        &format!("https://{VIP}:443"),
        JOIN_TOKEN,
        &mgmt(&[&macs[0]]),
    );
    env.reinstall(&id2, &config, &url).await;
    let m = env.wait_state(&id2, MachineState::Stuck).await;
    let reason = m.reason.unwrap();
    assert!(
        reason.contains("listed twice") && reason.contains(&macs[0]),
        "{reason}"
    );
    assert!(env.nodes.get_opt(&host2).await.unwrap().is_none());
}

#[tokio::test]
async fn v1_0_schema_with_lowercased_keys_on_8443_joins_from_a_loopback_config_url() {
    let env = Env::start().await;
    let host = env.hostname("v10");
    let id = env.create(&host, SHELL, None).await;
    env.wait_state(&id, MachineState::Shell).await;
    let macs = env.macs(&id).await;
    // What the original addon wrote: yaml.v2's lower-cased field names, zero values included.
    let config = format!(
        "#cloud-config\nserverurl: https://{VIP}:8443\ntoken: {JOIN_TOKEN}\nos:\n  sshauthorizedkeys: []\n  hostname: {host}\n  password: secret\n  environment: {{}}\ninstall:\n  automatic: true\n  mode: join\n  networks:\n    harvester-mgmt:\n      interfaces:\n      - name: \"\"\n        hwaddr: {}\n      method: dhcp\n      ip: \"\"\n      defaultroute: true\n      bondoptions:\n        miimon: \"100\"\n        mode: balance-tlb\n  vip: \"\"\n  device: /dev/sda\n  configurl: \"\"\n  isourl: https://releases.example/harvester/v1.0.3/harvester-v1.0.3-amd64.iso\n  tty: ttyS1,115200n8\nruntimeversion: \"\"\n",
        macs[0]
    );
    env.files.put("configs/v10.yaml", config);
    let config_url = format!("{}/configs/v10.yaml", env.files_url);
    let url = env.script("v10.ipxe", install_script("v1.0.3", &config_url, ""));
    // Userdata is the shell script still; the config comes from the loopback URL.
    env.reinstall(&id, SHELL, &url).await;
    let m = env
        .wait_machine(&id, "joined", |m| m.state == MachineState::Joined)
        .await;
    assert_eq!(m.schema, Some(ingot_boot_sim::Schema::V1_0));
    env.wait_node(&host, "Ready=True", ready_is("True")).await;
}

#[tokio::test]
async fn configs_the_installer_refuses_leave_the_machine_stuck_without_a_node() {
    let env = Env::start().await;
    let p = "harvester.install.management_interface";
    let single = format!("{p}.interfaces=\"hwAddr:${{net0/mac}}\" {p}.method=dhcp");
    let single_url = env.script(
        "single.ipxe",
        install_script("v1.4.2", USERDATA_URL, &single),
    );
    let seed_url = env.script("seed.ipxe", install_script("v1.4.2", USERDATA_URL, ""));
    let good_server = format!("https://{VIP}:443");

    // A MAC that is not on this device.
    let foreign = "0c:c4:7a:6b:84:20";
    let host_mac = env.hostname("mac");
    let config = current_config(&host_mac, &good_server, JOIN_TOKEN, &mgmt(&[foreign]));
    let id_mac = env.create(&host_mac, &config, Some(&seed_url)).await;

    // The wrong join token.
    let host_token = env.hostname("token");
    let config = current_config(&host_token, &good_server, "not-the-token", "");
    let id_token = env.create(&host_token, &config, Some(&single_url)).await;

    // The v1.0 port with the current schema.
    let host_port = env.hostname("port");
    let config = current_config(&host_port, &format!("https://{VIP}:8443"), JOIN_TOKEN, "");
    let id_port = env.create(&host_port, &config, Some(&single_url)).await;

    // Another cluster's address.
    let host_vip = env.hostname("vip");
    let config = current_config(&host_vip, "https://198.51.100.7:443", JOIN_TOKEN, "");
    let id_vip = env.create(&host_vip, &config, Some(&single_url)).await;

    // The v1.0 network section given to a current installer.
    let host_old = env.hostname("old");
    let config = format!(
        "#cloud-config\nserver_url: {good_server}\ntoken: {JOIN_TOKEN}\nos:\n  hostname: {host_old}\ninstall:\n  mode: join\n  networks:\n    harvester-mgmt:\n      interfaces:\n      - hwAddr: {foreign}\n      method: dhcp\n  device: /dev/sda\n  iso_url: https://releases.example/h.iso\n"
    );
    let id_old = env.create(&host_old, &config, Some(&seed_url)).await;

    // Userdata Metal would not have taken: no #cloud-config line.
    let host_cc = env.hostname("cc");
    let config =
        current_config(&host_cc, &good_server, JOIN_TOKEN, "").replace("#cloud-config\n", "");
    let id_cc = env.create(&host_cc, &config, Some(&single_url)).await;

    // A script that stops before booting.
    let host_noboot = env.hostname("noboot");
    let id_noboot = env
        .create(
            &host_noboot,
            "#!ipxe\ndhcp\nkernel http://mirror.example/k\n",
            None,
        )
        .await;

    let cases = [
        (
            &id_mac,
            &host_mac,
            vec![foreign, "not a NIC of this machine"],
        ),
        (&id_token, &host_token, vec!["token does not match"]),
        (&id_port, &host_port, vec!["port 8443", "443"]),
        (&id_vip, &host_vip, vec!["198.51.100.7", VIP]),
        (
            &id_old,
            &host_old,
            vec!["install.management_interface is missing", "v1.0 schema"],
        ),
        (&id_cc, &host_cc, vec!["#cloud-config"]),
        (&id_noboot, &host_noboot, vec!["without `boot`"]),
    ];
    for (id, host, needles) in cases {
        let m = env.wait_state(id, MachineState::Stuck).await;
        let reason = m.reason.clone().unwrap();
        for n in needles {
            assert!(reason.contains(n), "{host}: {reason:?} should name {n:?}");
        }
        assert!(
            !reason.contains(JOIN_TOKEN) && !reason.contains("not-the-token"),
            "{reason}"
        );
        assert!(m.node.is_none());
    }
    // Visible over HTTP too.
    let addr = serve(env.booter.router()).await;
    let body: Value = env
        .http
        .get(format!("http://{addr}/machines"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = body["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["hostname"] == host_mac.as_str())
        .unwrap();
    assert_eq!(listed["state"], "stuck");
    assert!(listed["reason"].as_str().unwrap().contains(foreign));
    for host in [
        &host_mac,
        &host_token,
        &host_port,
        &host_vip,
        &host_old,
        &host_cc,
        &host_noboot,
    ] {
        assert!(
            env.nodes.get_opt(host).await.unwrap().is_none(),
            "{host} has a node"
        );
    }
}

/// A Seeder full-mode node as ingot renders it (`ingot_harvester::provision`): the script and
/// the config are served over loopback, by the management MAC as ingot serves them.
fn seeder_node(
    env: &Env,
    hostname: &str,
    mac: &str,
    mode: ingot_harvester::NodeMode,
) -> ingot_harvester::NodeInstall {
    ingot_harvester::NodeInstall {
        version: "v1.7.1".into(),
        image_url: "http://mirror.example/harvester".into(),
        arch: "amd64".into(),
        mac: mac.into(),
        hostname: hostname.into(),
        address: "192.0.2.21".into(),
        netmask: "255.255.255.0".into(),
        gateway: "192.0.2.1".into(),
        primary_disk: "/dev/sda".into(),
        mode,
        token: ingot_harvester::Secret::new(JOIN_TOKEN),
        os_password: ingot_harvester::Secret::new("generated-password"),
        ssh_keys: vec![],
        nameservers: vec!["192.0.2.1".into()],
        vlan_id: Some(1),
        bond_options: None,
        wipe_disks: false,
        stream_image_mode: false,
        base_config: None,
        config_url: format!("{}/seeder/config/{mac}", env.files_url),
        webhook_url: "http://192.0.2.2:9090/disable/default/node".into(),
    }
}

#[tokio::test]
async fn seeder_full_mode_nodes_rendered_by_ingot_join_and_a_broken_one_is_stuck() {
    let env = Env::start().await;
    let mut ids = Vec::new();
    for (name, create) in [
        ("seeder-create", true),
        ("seeder-join", false),
        ("seeder-nodisk", false),
    ] {
        let host = env.hostname(name);
        let id = env.create(&host, SHELL, None).await;
        env.wait_state(&id, MachineState::Shell).await;
        let macs = env.macs(&id).await;
        let mode = if create {
            ingot_harvester::NodeMode::Create { vip: VIP.into() }
        } else {
            ingot_harvester::NodeMode::Join { vip: VIP.into() }
        };
        let node = seeder_node(&env, &host, &macs[1], mode);
        let mut config = ingot_harvester::install_config(&node).unwrap();
        if name == "seeder-nodisk" {
            config = config.replace("  device: /dev/sda\n", "");
        }
        env.files.put(&format!("seeder/config/{}", macs[1]), config);
        let url = env.script(
            &format!("seeder/ipxe/{}", macs[1]),
            ingot_harvester::ipxe_script(&node).unwrap(),
        );
        env.reinstall(&id, SHELL, &url).await;
        ids.push((id, host));
    }
    for (id, host) in &ids[..2] {
        let m = env.wait_state(id, MachineState::Joined).await;
        assert_eq!(m.schema, Some(ingot_boot_sim::Schema::Current));
        assert_eq!(m.warnings, Vec::<String>::new());
        env.wait_node(host, "Ready=True", ready_is("True")).await;
    }
    let (id, host) = &ids[2];
    let m = env.wait_state(id, MachineState::Stuck).await;
    assert_eq!(
        m.reason.as_deref(),
        Some("installer: install.device: missing: no disk to install to")
    );
    assert!(env.nodes.get_opt(host).await.unwrap().is_none());
}

#[tokio::test]
async fn not_ready_knob_flips_the_node_and_a_deleted_device_stops_heartbeating() {
    let env = Env::start().await;
    let host = env.hostname("knob");
    let p = "harvester.install.management_interface";
    let extra = format!("{p}.interfaces=\"hwAddr:${{net0/mac}}\" {p}.method=dhcp");
    let url = env.script(
        "single.ipxe",
        install_script("v1.4.2", USERDATA_URL, &extra),
    );
    let config = current_config(&host, &format!("https://{VIP}:443"), JOIN_TOKEN, "");
    let id = env.create(&host, &config, Some(&url)).await;
    env.wait_state(&id, MachineState::Joined).await;
    let node = env.wait_node(&host, "Ready=True", ready_is("True")).await;
    let joined = ready_condition(&node).unwrap();

    // Library knob: the kubelet dies.
    let m = env
        .booter
        .set_not_ready(&host, NotReady::Unknown)
        .await
        .unwrap();
    assert_eq!(m.ready.as_deref(), Some("Unknown"));
    let node = env
        .wait_node(&host, "Ready=Unknown", ready_is("Unknown"))
        .await;
    let unknown = ready_condition(&node).unwrap();
    assert_eq!(unknown.reason.as_deref(), Some("NodeStatusUnknown"));
    assert!(unknown.last_transition_time.unwrap().0 >= joined.last_transition_time.unwrap().0);

    // HTTP knobs: Ready again, then a sick kubelet that still posts (Ready=False).
    let addr = serve(env.booter.router()).await;
    let resp = env
        .http
        .post(format!("http://{addr}/machines/{host}/ready"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    env.wait_node(&host, "Ready=True again", ready_is("True"))
        .await;
    let resp = env
        .http
        .post(format!(
            "http://{addr}/machines/{id}/not-ready?status=False"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let node = env.wait_node(&host, "Ready=False", ready_is("False")).await;
    let sick = ready_condition(&node).unwrap();
    env.wait_node(&host, "a heartbeat while not ready", |n| {
        let c = ready_condition(n).unwrap();
        c.status == "False" && c.last_heartbeat_time != sick.last_heartbeat_time
    })
    .await;
    let resp = env
        .http
        .post(format!("http://{addr}/machines/nobody/ready"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    // Powered off: the kubelet stops and the node goes Unknown; powered on: Ready again.
    env.set_ready_via_library(&host).await;
    for (action, status) in [("power_off", "Unknown"), ("power_on", "True")] {
        env.api(
            reqwest::Method::POST,
            &format!("/devices/{id}/actions"),
            Some(json!({"type": action})),
        )
        .await;
        env.wait_node(&host, status, ready_is(status)).await;
        if action == "power_off" {
            let err = env.booter.set_ready(&host).await.unwrap_err();
            assert!(err.to_string().contains("power it on"), "{err}");
        }
    }
    let m = env
        .wait_machine(&id, "active again", |m| m.device_state == "active")
        .await;
    assert_eq!(m.state, MachineState::Joined);
    assert_eq!(m.ready.as_deref(), Some("True"));

    // The device is deleted: the machine is gone, the Node stays (the operator deletes it).
    env.http
        .delete(format!(
            "{}/devices/{id}?force_delete=true",
            env.sim.base_url()
        ))
        .header("X-Auth-Token", TOKEN)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    env.wait_state(&id, MachineState::Gone).await;
    assert!(env.nodes.get_opt(&host).await.unwrap().is_some());
    let resp = env
        .http
        .post(format!("http://{addr}/machines/{host}/ready"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409, "a gone machine has no kubelet to wake");
}
