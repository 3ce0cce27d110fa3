//! ingot-ipmi against OpenIPMI's `ipmi_sim` (cipher suite 3), with ipmitool
//! reading the same simulator as the reference.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use ingot_ipmi::{BootDevice, BootPersistence, CipherSuite, Client, Error, PowerAction};
use ingot_ipmi_sim::FruInfo;

const USER: &str = "ingot";
const PW: &str = "sim-password";

/// A running ipmi_sim with its configuration in a private directory.
struct IpmiSim {
    _peer: Peer,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Drop for IpmiSim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fru() -> FruInfo {
    FruInfo::example(7)
}

fn start() -> IpmiSim {
    let bin = require("ipmi_sim");
    let port = free_udp_port();
    let dir = std::env::temp_dir().join(format!("ingot-ipmi-sim-{}-{port}", std::process::id()));
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let script = dir.join("chassis.sh");
    std::fs::write(&script, ingot_ipmi_sim::OPENIPMI_CHASSIS_SCRIPT).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    let lan = format!(
        r#"name "ingot"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "{script} 0x20"
  user 2 true "{USER}" "{PW}" admin 10 none md2 md5 straight
"#,
        script = script.display()
    );
    std::fs::write(dir.join("lan.conf"), lan).unwrap();
    let image = fru().encode();
    let mut fru_line = format!("mc_add_fru_data 0x20 0 {} data", image.len());
    for b in &image {
        write!(fru_line, " 0x{b:02x}").unwrap();
    }
    let emu = format!(
        "mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x01 0x30 0x01 0x59 0x00 0x00
sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x07 0x02 0x6f 0x00 0xff 0xff
{fru_line}
mc_enable 0x20
"
    );
    std::fs::write(dir.join("sim.emu"), emu).unwrap();
    let mut cmd = Command::new(bin);
    cmd.current_dir(&dir)
        .arg("-c")
        .arg(dir.join("lan.conf"))
        .arg("-f")
        .arg(dir.join("sim.emu"))
        .arg("-s")
        .arg(dir.join("state"))
        .arg("-n");
    let peer = Peer::spawn("ipmi_sim", cmd);
    IpmiSim {
        _peer: peer,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite3_against_ipmi_sim_agrees_with_ipmitool() {
    require("ipmitool");
    let sim = start();
    let a = sim.addr;
    let client = connect_when_ready(
        config(a, USER, PW, &[CipherSuite::Suite3]),
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(client.cipher_suite().await, Some(CipherSuite::Suite3));

    // Device ID, as configured by mc_add and as ipmitool reads it.
    let id = client.device_id().await.unwrap();
    assert_eq!((id.device_id, id.device_revision), (0, 3));
    assert_eq!(id.firmware_version(), "9.08");
    assert_eq!((id.manufacturer_id, id.product_id), (0x1291, 0x0f02));
    let mc = ipmitool(3, a, USER, PW, &["mc", "info"]).await;
    assert_eq!(field(&mc, "Device ID").unwrap(), id.device_id.to_string());
    assert_eq!(
        field(&mc, "Device Revision").unwrap(),
        id.device_revision.to_string()
    );
    assert_eq!(
        field(&mc, "Firmware Revision").unwrap(),
        id.firmware_version()
    );
    assert_eq!(
        field(&mc, "Manufacturer ID").unwrap(),
        id.manufacturer_id.to_string()
    );
    assert!(
        field(&mc, "Product ID")
            .unwrap()
            .starts_with(&id.product_id.to_string())
    );

    // Power through the chassis control script.
    assert!(client.chassis_status().await.unwrap().power_on);
    assert!(client.power(PowerAction::Off).await.unwrap());
    assert!(!client.chassis_status().await.unwrap().power_on);
    let ps = ipmitool(3, a, USER, PW, &["power", "status"]).await;
    assert!(ps.contains("Chassis Power is off"), "{ps}");
    assert!(
        !client.power(PowerAction::Soft).await.unwrap(),
        "already off"
    );
    assert!(client.power(PowerAction::On).await.unwrap());
    let st = ipmitool(3, a, USER, PW, &["chassis", "status"]).await;
    assert_eq!(field(&st, "System Power").unwrap(), "on");
    assert!(client.power(PowerAction::Reset).await.unwrap());
    assert!(
        std::fs::read_to_string(sim.dir.join("resets"))
            .unwrap()
            .contains('1')
    );
    // ipmi_sim's power cycle is off now, on again a second later.
    assert!(client.power(PowerAction::Cycle).await.unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if client.chassis_status().await.unwrap().power_on {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "power did not come back after cycle"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(client.power(PowerAction::Soft).await.unwrap());
    assert!(!client.chassis_status().await.unwrap().power_on);

    // Boot devices ipmi_sim knows (none, pxe, default disk, cdrom, bios).
    for dev in [
        BootDevice::Pxe,
        BootDevice::Cdrom,
        BootDevice::BiosSetup,
        BootDevice::Disk,
    ] {
        let f = client
            .set_boot_device(dev, BootPersistence::Once, None)
            .await
            .unwrap();
        assert_eq!(f.device, dev);
    }
    let f = client
        .set_boot_device(BootDevice::Pxe, BootPersistence::Once, None)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(sim.dir.join("boot"))
            .unwrap()
            .trim(),
        "pxe"
    );
    let bp = ipmitool(3, a, USER, PW, &["chassis", "bootparam", "get", "5"]).await;
    assert!(bp.contains("Force PXE"), "{bp}");
    assert_eq!(f.device, BootDevice::Pxe);

    // SEL: the records added by sel_add, read by both clients.
    let entries = client.sel_entries().await.unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        (entries[0].sensor_type, entries[0].sensor_number),
        (0x01, 0x30)
    );
    assert_eq!(
        (entries[1].sensor_type, entries[1].event_type),
        (0x07, 0x6f)
    );
    let sel = ipmitool(3, a, USER, PW, &["sel", "list"]).await;
    assert_eq!(
        sel_list_ids(&sel),
        entries.iter().map(|e| e.record_id).collect::<Vec<_>>(),
        "{sel}"
    );
    assert!(
        sel.contains("Temperature #0x30") && sel.contains("Processor #0x02"),
        "{sel}"
    );
    // ipmi_sim stamps records with its uptime, which ipmitool prints as a
    // "Pre-Init" time in decimal seconds: the same value the client decoded.
    let stamps: Vec<u32> = sel
        .lines()
        .filter_map(|l| l.split('|').nth(2))
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    assert_eq!(
        stamps,
        entries
            .iter()
            .map(|e| e.timestamp.unwrap())
            .collect::<Vec<_>>(),
        "{sel}"
    );
    let again = client.sel_entries().await.unwrap();
    assert_eq!(
        again.iter().map(|e| e.stable_id()).collect::<Vec<_>>(),
        entries.iter().map(|e| e.stable_id()).collect::<Vec<_>>()
    );
    let info = client.sel_info().await.unwrap();
    assert_eq!(info.entries, 2);

    // FRU 0, parsed by both.
    let inv = client.inventory().await.unwrap();
    let f = inv.fru.unwrap();
    let (board, product) = (f.board.unwrap(), f.product.unwrap());
    let want = fru();
    assert_eq!(board.serial_number, want.board_serial);
    assert_eq!(product.asset_tag, want.asset_tag);
    let out = ipmitool(3, a, USER, PW, &["fru", "print", "0"]).await;
    assert_eq!(field(&out, "Board Mfg").unwrap(), board.manufacturer);
    assert_eq!(field(&out, "Board Serial").unwrap(), board.serial_number);
    assert_eq!(field(&out, "Product Name").unwrap(), product.product_name);
    assert_eq!(
        field(&out, "Product Serial").unwrap(),
        product.serial_number
    );
    assert_eq!(
        field(&out, "Chassis Serial").unwrap(),
        f.chassis.unwrap().serial_number
    );

    // Clearing the SEL.
    client.clear_sel().await.unwrap();
    assert!(client.sel_entries().await.unwrap().is_empty());
    let sel = ipmitool(3, a, USER, PW, &["sel", "list"]).await;
    assert!(sel_list_ids(&sel).is_empty(), "{sel}");

    assert_eq!(
        client.stats().await.sessions_opened,
        1,
        "one session for everything"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_rejects_bad_credentials_and_suite_17() {
    let sim = start();
    let a = sim.addr;
    // Wait until it answers at all.
    let ok = connect_when_ready(
        config(a, USER, PW, &[CipherSuite::Suite3]),
        Duration::from_secs(15),
    )
    .await;
    ok.close().await;

    match Client::connect(config(a, USER, "wrong", &[CipherSuite::Suite3])).await {
        Err(Error::AuthFailed(_)) => {}
        other => panic!("wrong password: {other:?}"),
    }
    match Client::connect(config(a, "nobody", PW, &[CipherSuite::Suite3])).await {
        Err(Error::AuthFailed(_)) => {}
        other => panic!("unknown user: {other:?}"),
    }
    // ipmi_sim has no RAKP-HMAC-SHA256 and ignores the request: no session,
    // and no silent downgrade when only suite 17 is allowed...
    match Client::connect(config(a, USER, PW, &[CipherSuite::Suite17])).await {
        Err(
            Error::Timeout {
                phase: "open session",
                ..
            }
            | Error::UnsupportedCipherSuite { suite: 17, .. },
        ) => {}
        other => panic!("suite 17: {other:?}"),
    }
    // ...unless suite 3 is explicitly allowed as the fallback.
    let c = Client::connect(config(
        a,
        USER,
        PW,
        &[CipherSuite::Suite17, CipherSuite::Suite3],
    ))
    .await
    .unwrap();
    assert_eq!(c.cipher_suite().await, Some(CipherSuite::Suite3));
    c.device_id().await.unwrap();
    c.close().await;
}

/// A UDP relay between a client and a BMC that can lose every answer.
struct Relay {
    addr: SocketAddr,
    lose_answers: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(to: SocketAddr) -> Relay {
    use std::sync::atomic::Ordering;
    let front = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let back = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    back.connect(to).await.unwrap();
    let addr = front.local_addr().unwrap();
    let lose_answers = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lose = lose_answers.clone();
    let task = tokio::spawn(async move {
        let mut client = None;
        let (mut up, mut down) = (vec![0u8; 2048], vec![0u8; 2048]);
        loop {
            tokio::select! {
                Ok((n, from)) = front.recv_from(&mut up) => {
                    client = Some(from);
                    let _ = back.send(&up[..n]).await;
                }
                Ok(n) = back.recv(&mut down) => {
                    if let Some(c) = client.filter(|_| !lose.load(Ordering::SeqCst)) {
                        let _ = front.send_to(&down[..n], c).await;
                    }
                }
            }
        }
    });
    Relay {
        addr,
        lose_answers,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_reset_whose_answer_is_lost_runs_once_on_ipmi_sim() {
    let sim = start();
    // Ready, then through a relay that can lose ipmi_sim's answers.
    connect_when_ready(
        config(sim.addr, USER, PW, &[CipherSuite::Suite3]),
        Duration::from_secs(15),
    )
    .await
    .close()
    .await;
    let relay = relay(sim.addr).await;
    let mut cfg = config(relay.addr, USER, PW, &[CipherSuite::Suite3]);
    cfg.timeout = Duration::from_millis(300);
    let client = Client::connect(cfg).await.unwrap();
    assert!(client.chassis_status().await.unwrap().power_on);
    relay
        .lose_answers
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = client.power(PowerAction::Reset).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    relay
        .lose_answers
        .store(false, std::sync::atomic::Ordering::SeqCst);
    // ipmi_sim ran its chassis script once per hard reset it carried out; a read after the
    // budget has passed was answered after them.
    assert!(client.chassis_status().await.unwrap().power_on);
    let read = || std::fs::read_to_string(sim.dir.join("resets")).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while read().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resets = read();
    assert_eq!(resets.lines().count(), 1, "hard resets run: {resets:?}");
    client.close().await;
}
