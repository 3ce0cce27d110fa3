//! Seeder's full mode booting a real machine: `ingot run --controllers provisioning` allocates
//! one Inventory (its BMC an emulated Redfish BMC, `ingot-bmc-sim`) to a one-node Cluster, its
//! boot Job sets the BMC's next boot to PXE and powers the server on; when the BMC records that
//! PXE boot, the test starts QEMU with the Inventory's MAC (`ingot_testenv::qemu`): Debian's
//! iPXE ROM gets `http://10.0.2.2:<port>/boot/${net0/mac}` from QEMU's DHCP and fetches ingot's
//! own script from ingot's boot server, which boots the Debian kernel and the test's installer
//! initrd (served by a small HTTP server of the test under the Harvester file names the script
//! names, `<imageURL>/<version>/harvester-<version>-vmlinuz-amd64`...). The installer configures
//! the script's `ip=`, fetches ingot's rendered install config, checks it, and calls its
//! SUCCEEDED webhook; the Inventory becomes `harvesterInstalled` and its MAC is answered the
//! boot-from-disk script from then on.
//!
//! QEMU's user-mode network (slirp) NATs the guest: its requests reach ingot's boot server
//! (on 127.0.0.1, which the guest reaches as 10.0.2.2) from 127.0.0.1, not from the node's
//! address, so ingot runs with `--boot-allow-source 127.0.0.1/32`, as a site with a NAT between
//! its nodes and the boot server would. The guest's own console is the evidence of the address
//! it configured. Skipped (passing) without the QEMU peer, except under `CI=true` or
//! `scripts/test.sh`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ingot_api::seeder::{AddressPool, Cluster, Inventory};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use ingot_controllers::provisioning::boot::BOOT_FROM_DISK;
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::harness::wait_for;
use ingot_testenv::qemu::{Firmware, QemuOptions, QemuPeer, QemuServer};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const VERSION: &str = "v1.7.1";
/// On slirp's network (10.0.2.0/24: the host, its loopback, is 10.0.2.2, its DNS 10.0.2.3, its
/// DHCP lease 10.0.2.15): the nodes' half, and the VIP in the other half (pools may not overlap).
const NODE_CIDR: &str = "10.0.2.0/25";
const GATEWAY: &str = "10.0.2.2";
const VIP: &str = "10.0.2.200";
/// Generous: under TCG on a busy two-core machine a boot takes tens of seconds.
const WAIT: Duration = Duration::from_secs(120);

/// A kubeconfig of the manifests' ServiceAccount (`deploy/manifests/provisioning.yaml`).
fn service_account(admin: &Path) -> &'static PathBuf {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| chart_support::install_from_manifests(admin, "provisioning"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The image server of `imageURL`: the kernel and the installer initrd under Harvester's file
/// names, every request recorded.
struct Images {
    port: u16,
    kernel: Vec<u8>,
    initrd: Vec<u8>,
    requests: Mutex<Vec<String>>,
}

impl Images {
    async fn start(peer: &QemuPeer) -> Arc<Images> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let images = Arc::new(Images {
            port: listener.local_addr().unwrap().port(),
            kernel: std::fs::read(peer.kernel().unwrap()).unwrap(),
            initrd: peer.installer_initrd(),
            requests: Mutex::new(Vec::new()),
        });
        let serving = images.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serving.clone().answer(stream));
            }
        });
        images
    }

    fn kernel_path() -> String {
        format!("/{VERSION}/harvester-{VERSION}-vmlinuz-amd64")
    }

    fn initrd_path() -> String {
        format!("/{VERSION}/harvester-{VERSION}-initrd-amd64")
    }

    async fn answer(self: Arc<Self>, mut stream: TcpStream) {
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head);
        let line = head.lines().next().unwrap_or_default().to_owned();
        let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
        self.requests.lock().unwrap().push(line);
        let (status, body) = if path == Self::kernel_path() {
            ("200 OK", self.kernel.clone())
        } else if path == Self::initrd_path() {
            ("200 OK", self.initrd.clone())
        } else {
            ("404 Not Found", b"not found\n".to_vec())
        };
        let head = format!(
            "HTTP/1.0 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&body).await;
        let _ = stream.shutdown().await;
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn condition(inventory: &Inventory, type_: &str) -> Option<String> {
    inventory
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

async fn create<K>(api: &Api<K>, value: Value)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", K::kind(&())));
}

/// One node being installed: its Inventory allocated to a one-node Cluster, its boot Job done
/// (the BMC recorded the PXE boot it set), ingot serving it.
struct Site {
    client: kube::Client,
    ns: String,
    inventories: Api<Inventory>,
    fleet: Fleet,
    mac: String,
    images: Arc<Images>,
    port: u16,
    operator: Operator,
    address: String,
}

/// The site in a new namespace `prefix-...`; `media`: ingot serves boot CDs too, and the
/// Inventory asks for one (`provisioning.ingot.dev/boot-media: cd`): the BMC records a CD boot.
async fn site(peer: &QemuPeer, prefix: &str, media: bool) -> Site {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace(prefix).await.unwrap();
    let kubeconfig = service_account(env.kubeconfig_path()).clone();

    let spec = BmcSpec {
        vendor: Vendor::Dell,
        power_delay: Duration::from_secs(2),
        initial_power_on: false,
        ..BmcSpec::default()
    };
    let fleet = Fleet::start(
        FleetOptions {
            tls: true,
            ..FleetOptions::default()
        },
        vec![spec.clone()],
    )
    .await
    .unwrap();
    let bmc = &fleet.bmcs[0];
    let mac = bmc.state.mac(0);
    let images = Images::start(peer).await;

    let port = free_port();
    let mut operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .tag("provisioning-qemu")
        .kubeconfig(&kubeconfig)
        .arg(format!(
            "--lease-namespace={}",
            chart_support::MANIFESTS_NAMESPACE
        ))
        .arg(format!("--lease-name=ingot-{ns}"))
        .arg("--lease-duration-seconds=3")
        .controllers("provisioning")
        .arg(format!("--provisioning-namespace={ns}"))
        .arg(format!("--boot-addr=127.0.0.1:{port}"))
        // The URL the guest reaches the boot server by, through slirp.
        .arg(format!("--boot-url=http://{GATEWAY}:{port}"))
        // slirp makes every request of the guest come from 127.0.0.1.
        .arg("--boot-allow-source=127.0.0.1/32")
        .env("RUST_LOG", "info,ingot_controllers=debug");
    if media {
        operator = operator.arg(format!(
            "--boot-media-dir={}",
            peer.boot_media_dir().display()
        ));
    }
    let operator = operator.start();

    let pools: Api<AddressPool> = Api::namespaced(client.clone(), &ns);
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), &ns);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    create(
        &pools,
        json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes"},
            "spec": {"cidr": NODE_CIDR, "gateway": GATEWAY,
                // slirp's own addresses (network, DNS, DHCP lease) are not handed out.
                "reservedAddresses": ["10.0.2.1", "10.0.2.3", "10.0.2.15"]}
        }),
    )
    .await;
    create(
        &pools,
        json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "vip"},
            "spec": {"cidr": format!("{VIP}/32"), "gateway": GATEWAY, "netmask": "255.255.255.0"}
        }),
    )
    .await;
    create(
        &secrets,
        json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "node0"},
            "stringData": {"username": spec.username, "password": spec.password}
        }),
    )
    .await;
    create(
        &inventories,
        json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "node0", "annotations": {
                "provisioning.ingot.dev/boot-media": if media { "cd" } else { "pxe" }}},
            "spec": {
                "primaryDisk": "/dev/vda",
                "managementInterfaceMacAddress": mac,
                "baseboardSpec": {"connection": {
                    "host": format!("https://127.0.0.1:{}", bmc.addr.port()), "port": 623,
                    "insecureTLS": true,
                    "authSecretRef": {"name": "node0", "namespace": ns}}}
            }
        }),
    )
    .await;
    create(
        &clusters,
        json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "real"},
            "spec": {
                "version": VERSION,
                "imageURL": format!("http://{GATEWAY}:{}", images.port),
                "clusterConfig": {"nameservers": ["10.0.2.3"]},
                "nodes": [{"inventoryReference": {"name": "node0", "namespace": ns},
                    "addressPoolReference": {"name": "nodes", "namespace": ns}}],
                "vipConfig": {"addressPoolReference": {"name": "vip", "namespace": ns}}
            }
        }),
    )
    .await;

    // ingot's boot Job set the next boot to PXE and powered the server on: the BMC recorded it.
    let booted = tokio::time::timeout(WAIT, async {
        let device = if media { "Cd" } else { "Pxe" };
        while !bmc.state.boots().iter().any(|r| r.device == device) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if booted.is_err() {
        let inventory = inventories.get("node0").await.map(|i| i.status);
        let cluster = clusters.get("real").await.map(|c| c.status);
        panic!(
            "the BMC recorded no PXE boot within {WAIT:?}: {:?}\nInventory: {inventory:#?}\nCluster: {cluster:#?}\noperator: {}",
            bmc.state.boots(),
            operator.log_tail()
        );
    }
    let address = inventories
        .get("node0")
        .await
        .unwrap()
        .status
        .unwrap()
        .pxe_boot_config
        .address
        .expect("the allocated Inventory has an address");
    assert!(address.starts_with("10.0.2."), "{address}");
    Site {
        client,
        ns,
        inventories,
        fleet,
        mac,
        images,
        port,
        operator,
        address,
    }
}

/// One QEMU machine at a time: two under TCG on two cores would starve each other.
static ONE_MACHINE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_machine_boots_ingots_script_fetches_its_config_and_reports_installed() {
    let Some(peer) = QemuPeer::installed_or_skip("provisioning_qemu") else {
        return;
    };
    let _one = ONE_MACHINE.lock().await;
    let Site {
        client,
        ns,
        inventories,
        fleet: _fleet,
        mac,
        images,
        port,
        operator,
        address,
    } = site(&peer, "provqemu", false).await;

    let mut vm = QemuServer::start(
        &peer,
        &QemuOptions {
            mac: &mac,
            memory_mib: 512,
            boot_url: &format!("http://{GATEWAY}:{port}/boot/${{net0/mac}}"),
            cdrom: None,
            firmware: Firmware::Bios,
        },
    );
    let report =
        |vm: &QemuServer| format!("{}\n--- operator:\n{}", vm.report(), operator.log_tail());

    let configured = vm
        .wait_for_serial_line("the installer to configure its address", WAIT, |l| {
            l.starts_with("ingot-installer: configured ")
        })
        .await;
    assert_eq!(
        configured,
        format!("ingot-installer: configured netboot {address}/25 gateway {GATEWAY}"),
        "{}",
        report(&vm)
    );
    vm.wait_for_serial_line("the installer's webhook call", WAIT, |l| {
        l.starts_with("ingot-installer: webhook SUCCEEDED PUT ")
    })
    .await;
    let to_webhook = vm.elapsed();
    let status = vm.wait_exit(WAIT).await;
    eprintln!(
        "network boot to the installer's webhook: {:.1} s ({})",
        to_webhook.as_secs_f64(),
        vm.accel
    );
    assert!(status.success(), "{status}\n{}", report(&vm));
    let serial = vm.serial();
    assert!(
        serial.contains(&format!("ingot-installer: NIC {mac} is netboot")),
        "{}",
        report(&vm)
    );
    // ingot's rendered config (camelCase keys) passed the installer's checks.
    assert!(
        serial.contains("ingot-installer: install config: mode create, device /dev/vda"),
        "{}",
        report(&vm)
    );
    assert!(
        serial.contains(&format!(
            "ingot-installer: webhook SUCCEEDED PUT http://{GATEWAY}:{port}/disable/{ns}/node0: HTTP/1.0 202 Accepted"
        )),
        "{}",
        report(&vm)
    );

    // ingot served this MAC's script (iPXE asked by ${net0/mac}, percent-encoded) and its config.
    let log = operator.log();
    assert!(
        log.lines()
            .any(|l| l.contains("served an install script") && l.contains(&mac)),
        "{}",
        report(&vm)
    );
    assert!(
        log.lines()
            .any(|l| l.contains("served an install config") && l.contains("node0")),
        "{}",
        report(&vm)
    );
    let requests = images.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with(&format!("GET {} ", Images::kernel_path()))),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with(&format!("GET {} ", Images::initrd_path()))),
        "{requests:?}"
    );

    let installed = wait_for("the Inventory to be harvesterInstalled", WAIT, || async {
        let i = inventories.get("node0").await.ok()?;
        (condition(&i, "harvesterInstalled").as_deref() == Some("True")).then_some(i)
    })
    .await;
    assert_eq!(
        installed.status.unwrap().pxe_boot_config.address.as_deref(),
        Some(address.as_str())
    );
    // Installed: the MAC's next network boot is answered with the boot-from-disk script.
    let script = reqwest::get(format!("http://127.0.0.1:{port}/boot/{mac}"))
        .await
        .unwrap();
    assert_eq!(script.status(), 200);
    assert_eq!(script.text().await.unwrap(), BOOT_FROM_DISK);

    operator.terminate();
    drop(vm);
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
}

/// A site without PXE: the Inventory asks for the boot CD (`provisioning.ingot.dev/boot-media:
/// cd`). ingot's boot Job inserts the node's CD as virtual media at the BMC (read back from it:
/// the URL inserted, a one-time CD boot) and powers it on; the CD, fetched from that URL as the
/// BMC would, boots a real machine from QEMU's `-cdrom` (ISOLINUX, then iPXE running the CD's
/// script: the node's address set static, no DHCP asked), which chains to the same install
/// script a PXE boot gets; the installer configures that address, fetches ingot's config and
/// reports SUCCEEDED. Once installed, the CD is no longer served and ingot ejects it at the BMC.
/// The machine boots in BIOS mode (SeaBIOS: ISOLINUX, then `ipxe.lkrn`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_machine_boots_its_boot_cd_into_the_installer() {
    let Some(peer) = QemuPeer::installed_or_skip("provisioning_qemu") else {
        return;
    };
    boots_its_boot_cd_into_the_installer(&peer, "provcd", Firmware::Bios).await;
}

/// The same CD boots a UEFI machine (OVMF): the firmware takes the CD's EFI entry, whose FAT
/// image holds iPXE for UEFI (`ipxe.efi`) and the node's script as `autoexec.ipxe`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uefi_machine_boots_the_same_boot_cd_into_the_installer() {
    let Some(peer) = QemuPeer::installed_or_skip("provisioning_qemu") else {
        return;
    };
    boots_its_boot_cd_into_the_installer(&peer, "provuefi", Firmware::Uefi).await;
}

async fn boots_its_boot_cd_into_the_installer(peer: &QemuPeer, tag: &str, firmware: Firmware) {
    let _one = ONE_MACHINE.lock().await;
    let site = site(peer, tag, true).await;
    // ingot's boot Job inserted the node's CD at the BMC and booted it once: the BMC fetches the
    // image as a real one would, from the URL inserted (through slirp's address for the host).
    let bmc = &site.fleet.bmcs[0];
    let inserted: Vec<String> = bmc
        .state
        .media()
        .into_iter()
        .filter(|m| m.inserted)
        .filter_map(|m| m.image)
        .collect();
    assert_eq!(
        inserted,
        vec![format!(
            "http://{GATEWAY}:{}/media/{}/node0.iso",
            site.port, site.ns
        )],
        "{:?}",
        bmc.state.media_log()
    );
    let cd_boot = bmc
        .state
        .boots()
        .into_iter()
        .find(|r| r.device == "Cd")
        .unwrap();
    assert_eq!(cd_boot.override_enabled, "Once");
    let media_url = inserted[0].replace(GATEWAY, "127.0.0.1");
    let answer = reqwest::get(&media_url).await.unwrap();
    assert_eq!(answer.status(), 200, "{}", site.operator.log_tail());
    let iso = answer.bytes().await.unwrap();
    assert_eq!(&iso[16 * 2048 + 1..16 * 2048 + 6], b"CD001");
    let cd = std::env::temp_dir().join(format!("ingot-{}-node0.iso", site.ns));
    std::fs::write(&cd, &iso).unwrap();

    let mut vm = QemuServer::start(
        peer,
        &QemuOptions {
            mac: &site.mac,
            memory_mib: 512,
            // Not used: the CD's script sets the address and the boot URL itself.
            boot_url: "",
            cdrom: Some(&cd),
            firmware,
        },
    );
    let report = |vm: &QemuServer| {
        format!(
            "{}\n--- operator:\n{}",
            vm.report(),
            site.operator.log_tail()
        )
    };
    let configured = vm
        .wait_for_serial_line("the installer to configure its address", WAIT, |l| {
            l.starts_with("ingot-installer: configured ")
        })
        .await;
    assert_eq!(
        configured,
        format!(
            "ingot-installer: configured netboot {}/25 gateway {GATEWAY}",
            site.address
        ),
        "{}",
        report(&vm)
    );
    vm.wait_for_serial_line("the installer's webhook call", WAIT, |l| {
        l.starts_with("ingot-installer: webhook SUCCEEDED PUT ")
    })
    .await;
    let to_webhook = vm.elapsed();
    let status = vm.wait_exit(WAIT).await;
    eprintln!(
        "CD boot ({firmware:?}) to the installer's webhook: {:.1} s ({})",
        to_webhook.as_secs_f64(),
        vm.accel
    );
    // Which boot program ran: ISOLINUX's iPXE for BIOS, the EFI system partition's for UEFI.
    let serial = vm.serial();
    let from_esp = serial.contains("autoexec.ipxe... ok");
    assert_eq!(from_esp, firmware == Firmware::Uefi, "{}", report(&vm));
    assert!(status.success(), "{status}\n{}", report(&vm));
    let log = site.operator.log();
    assert!(
        log.lines().any(|l| l.contains("served a boot CD")),
        "{}",
        report(&vm)
    );
    // The CD's iPXE asked for this MAC's script, as a PXE boot does.
    assert!(
        log.lines()
            .any(|l| l.contains("served an install script") && l.contains(&site.mac)),
        "{}",
        report(&vm)
    );
    assert!(
        site.images
            .requests()
            .iter()
            .any(|r| r.starts_with(&format!("GET {} ", Images::kernel_path()))),
        "{:?}",
        site.images.requests()
    );
    wait_for("the Inventory to be harvesterInstalled", WAIT, || async {
        let i = site.inventories.get("node0").await.ok()?;
        (condition(&i, "harvesterInstalled").as_deref() == Some("True")).then_some(())
    })
    .await;
    let after = reqwest::get(&media_url).await.unwrap();
    assert_eq!(after.status(), 404, "an installed node's CD is not served");
    // Installed: ingot ejected the CD at the BMC, once.
    wait_for("the CD ejected at the BMC", WAIT, || async {
        bmc.state.media().iter().all(|m| !m.inserted).then_some(())
    })
    .await;
    let installed = site.inventories.get("node0").await.unwrap();
    assert_eq!(
        condition(&installed, "bootMediaEjected").as_deref(),
        Some("True")
    );

    site.operator.terminate();
    drop(vm);
    let _ = std::fs::remove_file(&cd);
    let _ = Api::<Namespace>::all(site.client.clone())
        .delete(&site.ns, &DeleteParams::default())
        .await;
}
