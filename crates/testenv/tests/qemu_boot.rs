//! A real network boot as ingot provisions a node: QEMU's DHCP (slirp) hands Debian's iPXE ROM
//! the boot URL `http://10.0.2.2:<port>/boot/${net0/mac}`; a small HTTP server here (on
//! 127.0.0.1, which the guest reaches as 10.0.2.2) answers with an iPXE script for that MAC that
//! boots a Debian kernel with the installer initrd and the Harvester-style arguments
//! (`ip=<addr>::<gw>:<mask>::netboot:off`, `ifname=netboot:<mac>`,
//! `harvester.install.config_url=<url>`); the installer fetches the config, checks it and calls
//! the config's SUCCEEDED webhook (`PUT /disable/<ns>/<name>`), then powers off.

// A failure of the test's own server is the test's failure.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ingot_testenv::qemu::{Firmware, QemuOptions, QemuPeer, QemuServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAC: &str = "52:54:00:6e:67:01";
/// The address ingot gives the node (not slirp's DHCP lease, 10.0.2.15).
const NODE_ADDRESS: &str = "10.0.2.50";
/// Generous: under TCG on a busy two-core machine a boot takes tens of seconds.
const BOOT_DEADLINE: Duration = Duration::from_secs(300);

/// What the site serves and what it was asked.
struct Site {
    port: u16,
    kernel: Vec<u8>,
    initrd: Vec<u8>,
    config: String,
    requests: Mutex<Vec<(String, String)>>,
}

impl Site {
    async fn start(peer: &QemuPeer, config: impl Fn(u16) -> String) -> Arc<Site> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let kernel = std::fs::read(peer.kernel().unwrap()).unwrap();
        let site = Arc::new(Site {
            port,
            kernel,
            initrd: peer.installer_initrd(),
            config: config(port),
            requests: Mutex::new(Vec::new()),
        });
        let serving = site.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serving.clone().answer(stream));
            }
        });
        site
    }

    fn base(&self) -> String {
        format!("http://10.0.2.2:{}", self.port)
    }

    /// The iPXE script ingot serves a node: its kernel and initrd with the installer's arguments.
    fn ipxe_script(&self, mac: &str) -> String {
        let base = self.base();
        format!(
            "#!ipxe\n\
             kernel {base}/vmlinuz initrd=initrd ip={NODE_ADDRESS}::10.0.2.2:255.255.255.0::netboot:off \
             BOOTIF={mac} ifname=netboot:{mac} harvester.install.automatic=true \
             harvester.install.config_url={base}/config/{mac} console=ttyS0\n\
             initrd {base}/initrd\n\
             boot\n"
        )
    }

    /// One HTTP/1.0 exchange: the request line is recorded (its path percent-decoded: iPXE
    /// writes the MAC's colons as %3A), the answer sent, the connection closed.
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
        let mut words = head.lines().next().unwrap_or_default().split(' ');
        let method = words.next().unwrap_or_default().to_owned();
        let path = percent_decode(words.next().unwrap_or_default());
        self.requests
            .lock()
            .unwrap()
            .push((method.clone(), path.clone()));
        let (status, body): (&str, Vec<u8>) = match (method.as_str(), path.as_str()) {
            ("GET", "/vmlinuz") => ("200 OK", self.kernel.clone()),
            ("GET", "/initrd") => ("200 OK", self.initrd.clone()),
            ("GET", p) if p == format!("/boot/{MAC}") => ("200 OK", self.ipxe_script(MAC).into()),
            ("GET", p) if p == format!("/config/{MAC}") => ("200 OK", self.config.clone().into()),
            ("PUT", p) if p.starts_with("/disable/") => ("200 OK", Vec::new()),
            _ => ("404 Not Found", b"not found\n".to_vec()),
        };
        let head = format!(
            "HTTP/1.0 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&body).await;
        let _ = stream.shutdown().await;
    }

    fn count(&self, method: &str, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p)| m == method && p == path)
            .count()
    }

    fn requests(&self) -> Vec<(String, String)> {
        self.requests.lock().unwrap().clone()
    }
}

fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A Harvester install config as Seeder renders it, with or without `install.device`.
fn harvester_config(port: u16, with_device: bool) -> String {
    let device = if with_device {
        "  device: /dev/vda\n"
    } else {
        ""
    };
    format!(
        "scheme_version: 1\n\
         token: node-token\n\
         os:\n  hostname: node-1-default\n\
         install:\n  mode: create\n  managementInterface:\n    method: static\n    ip: {NODE_ADDRESS}\n\
         {device}  automatic: true\n  skipchecks: true\n  webhooks:\n  - event: SUCCEEDED\n    method: PUT\n\
         \x20   url: http://10.0.2.2:{port}/disable/default/node-1\n"
    )
}

fn boot(peer: &QemuPeer, site: &Site) -> QemuServer {
    QemuServer::start(
        peer,
        &QemuOptions {
            mac: MAC,
            memory_mib: 512,
            boot_url: &format!("{}/boot/${{net0/mac}}", site.base()),
            cdrom: None,
            firmware: Firmware::Bios,
        },
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_boots_its_ipxe_script_by_mac_and_calls_the_webhook_once() {
    let Some(peer) = QemuPeer::installed_or_skip("qemu_boot") else {
        return;
    };
    let site = Site::start(&peer, |port| harvester_config(port, true)).await;
    let mut vm = boot(&peer, &site);

    let configured = vm
        .wait_for_serial_line(
            "the installer to configure its address",
            BOOT_DEADLINE,
            |l| l.starts_with("ingot-installer: configured "),
        )
        .await;
    // The address of the script's ip=, on the NIC ifname= named by its MAC (slirp's NAT hides
    // the guest's address from the server: the guest's own report is the evidence).
    assert_eq!(
        configured,
        format!("ingot-installer: configured netboot {NODE_ADDRESS}/24 gateway 10.0.2.2"),
        "{}",
        vm.report()
    );
    vm.wait_for_serial_line("the installer's webhook call", BOOT_DEADLINE, |l| {
        l.starts_with("ingot-installer: webhook SUCCEEDED PUT ")
    })
    .await;
    let to_webhook = vm.elapsed();
    let status = vm.wait_exit(BOOT_DEADLINE).await;
    eprintln!(
        "network boot to the installer's webhook: {:.1} s ({})",
        to_webhook.as_secs_f64(),
        vm.accel
    );
    assert!(status.success(), "{status}\n{}", vm.report());
    let serial = vm.serial();
    assert!(
        serial.contains(&format!("ingot-installer: NIC {MAC} is netboot")),
        "{}",
        vm.report()
    );
    assert!(serial.contains("ingot-installer: install config: mode create, device /dev/vda"));

    let requests = site.requests();
    // The script was asked for by the machine's MAC only (iPXE expanded ${net0/mac}).
    let scripts: Vec<_> = requests
        .iter()
        .filter(|(_, p)| p.starts_with("/boot/"))
        .collect();
    assert!(!scripts.is_empty(), "{requests:?}");
    assert!(
        scripts.iter().all(|(_, p)| *p == format!("/boot/{MAC}")),
        "{requests:?}"
    );
    assert!(site.count("GET", "/vmlinuz") >= 1, "{requests:?}");
    assert!(site.count("GET", "/initrd") >= 1, "{requests:?}");
    assert!(
        site.count("GET", &format!("/config/{MAC}")) >= 1,
        "{requests:?}"
    );
    assert_eq!(
        site.count("PUT", "/disable/default/node-1"),
        1,
        "{requests:?}"
    );
    assert_eq!(
        requests.iter().filter(|(m, _)| m != "GET").count(),
        1,
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_without_install_device_fails_the_install_and_calls_no_webhook() {
    let Some(peer) = QemuPeer::installed_or_skip("qemu_boot") else {
        return;
    };
    let site = Site::start(&peer, |port| harvester_config(port, false)).await;
    let mut vm = boot(&peer, &site);

    let failed = vm
        .wait_for_serial_line("the installer to fail", BOOT_DEADLINE, |l| {
            l.starts_with("ingot-installer: FAILED")
        })
        .await;
    assert_eq!(
        failed,
        "ingot-installer: FAILED: the install config has no install.device"
    );
    vm.wait_exit(BOOT_DEADLINE).await;
    let requests = site.requests();
    assert!(
        site.count("GET", &format!("/config/{MAC}")) >= 1,
        "{requests:?}"
    );
    assert!(requests.iter().all(|(m, _)| m == "GET"), "{requests:?}");
    assert!(
        !vm.serial().contains("ingot-installer: webhook"),
        "{}",
        vm.report()
    );
}
