//! ingot-ipmi against pyghmi's fake BMC (`fakebmc`, cipher suite 3 only,
//! users fixed to admin/password), with ipmitool on the same peer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::*;
use ingot_ipmi::{BootDevice, BootMode, BootPersistence, CipherSuite, Client, Error, PowerAction};

const USER: &str = "admin";
const PW: &str = "password";

fn start() -> (Peer, SocketAddr) {
    let bin = require("fakebmc");
    let port = free_udp_port();
    let mut cmd = Command::new(bin);
    cmd.arg("--port").arg(port.to_string());
    (
        Peer::spawn("fakebmc", cmd),
        SocketAddr::from(([127, 0, 0, 1], port)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite3_power_boot_against_fakebmc_agrees_with_ipmitool() {
    require("ipmitool");
    let (_peer, a) = start();
    let client = connect_when_ready(
        config(a, USER, PW, &[CipherSuite::Suite3]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(client.cipher_suite().await, Some(CipherSuite::Suite3));

    let id = client.device_id().await.unwrap();
    let mc = ipmitool(3, a, USER, PW, &["mc", "info"]).await;
    assert_eq!(field(&mc, "Device ID").unwrap(), id.device_id.to_string());
    assert_eq!(
        field(&mc, "Firmware Revision").unwrap(),
        id.firmware_version()
    );
    assert_eq!(
        field(&mc, "Manufacturer ID").unwrap(),
        id.manufacturer_id.to_string()
    );

    // fakebmc starts powered off.
    assert!(!client.chassis_status().await.unwrap().power_on);
    let st = ipmitool(3, a, USER, PW, &["chassis", "status"]).await;
    assert_eq!(field(&st, "System Power").unwrap(), "off");
    assert!(client.power(PowerAction::On).await.unwrap());
    let ps = ipmitool(3, a, USER, PW, &["power", "status"]).await;
    assert!(ps.contains("Chassis Power is on"), "{ps}");
    assert!(client.power(PowerAction::Reset).await.unwrap());
    // fakebmc does not implement power cycle: a typed completion code.
    match client.power(PowerAction::Cycle).await {
        Err(Error::CompletionCode { code: 0xCC, .. }) => {}
        other => panic!("cycle: {other:?}"),
    }
    assert!(client.power(PowerAction::Soft).await.unwrap());
    assert!(!client.chassis_status().await.unwrap().power_on);
    ipmitool(3, a, USER, PW, &["chassis", "power", "on"]).await;
    assert!(client.chassis_status().await.unwrap().power_on);
    assert!(client.power(PowerAction::Off).await.unwrap());
    assert!(!client.power(PowerAction::Off).await.unwrap());

    // Boot devices round-trip through pyghmi's name mapping.
    for dev in [
        BootDevice::Pxe,
        BootDevice::Disk,
        BootDevice::Cdrom,
        BootDevice::BiosSetup,
    ] {
        let f = client
            .set_boot_device(dev, BootPersistence::Once, None)
            .await
            .unwrap();
        assert_eq!(f.device, dev);
        assert_eq!(
            f.mode,
            BootMode::Legacy,
            "fakebmc reports legacy; the override keeps it"
        );
    }
    ipmitool(3, a, USER, PW, &["chassis", "bootdev", "pxe"]).await;
    assert_eq!(client.boot_flags().await.unwrap().device, BootDevice::Pxe);
    let bp = ipmitool(3, a, USER, PW, &["chassis", "bootparam", "get", "5"]).await;
    assert!(bp.contains("Force PXE"), "{bp}");

    // fakebmc has no SEL: the client reports the BMC's completion code.
    match client.sel_entries().await {
        Err(Error::CompletionCode { code: 0xC1, .. }) => {}
        other => panic!("SEL on fakebmc: {other:?}"),
    }

    assert_eq!(client.stats().await.sessions_opened, 1);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fakebmc_rejects_a_wrong_password() {
    let (_peer, a) = start();
    let ok = connect_when_ready(
        config(a, USER, PW, &[CipherSuite::Suite3]),
        Duration::from_secs(20),
    )
    .await;
    ok.close().await;
    match Client::connect(config(a, USER, "nope", &[CipherSuite::Suite3])).await {
        Err(Error::AuthFailed(_)) => {}
        other => panic!("wrong password: {other:?}"),
    }
}
