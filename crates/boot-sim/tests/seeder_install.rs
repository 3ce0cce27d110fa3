//! What ingot renders for a Seeder full-mode node (`ingot_harvester::provision`), booted by the
//! emulator's own readers: the iPXE script run, the kernel's network brought up, the config
//! merged and checked as the Harvester installer would. A rendered node is accepted; a broken
//! one is refused with the reason.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;

use ingot_boot_sim::install::{self, Accepted, Expected, Machine, Refusal, Schema};
use ingot_boot_sim::ipxe::{self, ScriptEnd};
use ingot_harvester::provision::{NodeInstall, NodeMode, install_config, ipxe_script};
use ingot_harvester::secret::Secret;

const TOKEN: &str = "tok3nTOK3Ntok3nT";
const VIP: &str = "172.16.128.7";
const MAC: &str = "0c:c4:7a:6b:84:20";

fn node(mode: NodeMode) -> NodeInstall {
    NodeInstall {
        version: "v1.7.1".into(),
        image_url: "http://172.16.135.50:8080".into(),
        arch: "amd64".into(),
        mac: MAC.into(),
        hostname: "node-default".into(),
        address: "172.16.128.11".into(),
        netmask: "255.255.248.0".into(),
        gateway: "172.16.128.1".into(),
        primary_disk: "/dev/sda".into(),
        mode,
        token: Secret::new(TOKEN),
        os_password: Secret::new("pAssw0rdPASSW0RD"),
        ssh_keys: vec!["ssh-ed25519 AAAAC3Nza ops@example".into()],
        nameservers: vec!["172.16.128.1".into()],
        vlan_id: Some(1),
        bond_options: None,
        wipe_disks: true,
        stream_image_mode: false,
        base_config: None,
        config_url: "http://127.0.0.1:9090/config".into(),
        webhook_url: "http://127.0.0.1:9090/disable/default/node".into(),
    }
}

fn join() -> NodeInstall {
    node(NodeMode::Join { vip: VIP.into() })
}

fn create() -> NodeInstall {
    node(NodeMode::Create { vip: VIP.into() })
}

/// Two NICs; the management one is the second.
fn nics() -> Vec<(String, String)> {
    vec![
        ("eth0".into(), "0c:c4:7a:6b:84:1f".into()),
        ("eth1".into(), MAC.to_uppercase()),
    ]
}

/// Boots `script` with `config` at its config URL on a machine with `nics`.
fn boot(script: &str, config: &str, nics: &[(String, String)]) -> Result<Accepted, Refusal> {
    let macs: Vec<String> = nics.iter().map(|(_, m)| m.clone()).collect();
    let ScriptEnd::Kernel {
        kernel, cmdline, ..
    } = ipxe::run(script, &macs).expect("the script boots a kernel")
    else {
        panic!("the script stops in the shell");
    };
    let params = ipxe::kernel_params(&cmdline);
    let machine = Machine {
        hostname: "node-default",
        nics,
    };
    install::check_kernel_network(&params, &machine)?;
    let cmd = install::read_cmdline(&kernel, &params);
    assert!(cmd.automatic);
    assert_eq!(
        cmd.config_url.as_deref(),
        Some("http://127.0.0.1:9090/config")
    );
    let remote = install::parse_remote(config, false)?;
    let merged = install::merge(&cmd.config, &remote);
    let expected = Expected {
        token: TOKEN.into(),
        host: VIP.into(),
        port: None,
        schema: None,
    };
    install::check(&merged, cmd.release.as_deref(), &expected, &machine)
}

fn rendered(node: &NodeInstall) -> (String, String) {
    (ipxe_script(node).unwrap(), install_config(node).unwrap())
}

#[test]
fn rendered_join_and_create_nodes_are_accepted() {
    for node in [join(), create()] {
        let (script, config) = rendered(&node);
        let ok = boot(&script, &config, &nics()).unwrap();
        assert_eq!(ok.schema, Schema::Current, "{:?}", node.mode);
        assert_eq!(ok.node_name, "node-default");
        assert_eq!(ok.warnings, Vec::<String>::new());
    }
}

#[test]
fn rendered_vlan_and_custom_bond_nodes_are_accepted() {
    let node = NodeInstall {
        vlan_id: Some(100),
        bond_options: Some(BTreeMap::from([(
            "mode".to_owned(),
            "active-backup".to_owned(),
        )])),
        base_config: Some(
            serde_yaml::from_str("install: {management_interface: {mtu: 9000}}").unwrap(),
        ),
        ..join()
    };
    let (script, config) = rendered(&node);
    assert!(script.contains("vlan=vlan100:netboot"), "{script}");
    boot(&script, &config, &nics()).unwrap();
}

/// Replaces `from` in `text`, which must contain it.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in\n{text}");
    text.replacen(from, to, 1)
}

#[test]
fn broken_configs_are_refused_with_the_reason() {
    let (script, config) = rendered(&join());
    let cases = [
        (
            edit(&config, "  device: /dev/sda\n", ""),
            "install.device: missing: no disk to install to",
        ),
        (
            edit(
                &config,
                "subnetMask: 255.255.248.0",
                "subnetMask: 255.0.255.0",
            ),
            "install.management_interface.subnet_mask: 255.0.255.0 is not a contiguous netmask",
        ),
        (
            edit(
                &config,
                "subnetMask: 255.255.248.0",
                "subnetMask: 255.255.255.255",
            ),
            "install.management_interface.gateway: 172.16.128.1 is outside the network 172.16.128.11/255.255.255.255: no route out",
        ),
        (
            edit(&config, "ip: 172.16.128.11", "ip: 172.16.128"),
            "install.management_interface.ip: \"172.16.128\" is not an IPv4 address",
        ),
        (
            edit(&config, "    gateway: 172.16.128.1\n", ""),
            "install.management_interface.gateway: required with method static",
        ),
        (
            edit(&config, "vlanId: 1", "vlanId: 5000"),
            "install.management_interface.vlan_id: 5000 is not a VLAN ID (0 for none, 1 to 4094)",
        ),
        (
            edit(
                &config,
                "hwAddr: 0c:c4:7a:6b:84:20",
                "hwAddr: 0c:c4:7a:6b:84:99",
            ),
            "management interface hwAddr 0c:c4:7a:6b:84:99 is not a NIC of this machine (its NICs: eth0 0c:c4:7a:6b:84:1f, eth1 0C:C4:7A:6B:84:20)",
        ),
        (
            edit(&config, "token: tok3nTOK3Ntok3nT", "token: other"),
            "the join token does not match the cluster's token",
        ),
        (
            edit(&config, "mode: join", "mode: upgrade"),
            "install.mode is \"upgrade\": the installer creates a cluster (create) or joins one (join)",
        ),
    ];
    for (broken, reason) in cases {
        let refusal = boot(&script, &broken, &nics()).unwrap_err();
        assert_eq!(refusal.to_string(), reason);
    }

    let (script, config) = rendered(&create());
    for (broken, reason) in [
        (
            edit(&config, "vip: 172.16.128.7", "vip: 172.16.128.8"),
            "install.vip \"172.16.128.8\": the cluster's address is 172.16.128.7",
        ),
        (
            edit(&config, "  vipMode: static\n", ""),
            "install.mode create needs install.vip_mode (static or dhcp)",
        ),
        (
            edit(&config, "vipMode: static", "vipMode: dhcp"),
            "install.vip \"172.16.128.7\": vip_mode dhcp needs vip_hw_addr, a MAC of this machine; it is \"\"",
        ),
    ] {
        let refusal = boot(&script, &broken, &nics()).unwrap_err();
        assert_eq!(refusal.to_string(), reason);
    }
}

#[test]
fn broken_kernel_networks_are_refused_with_the_reason() {
    let (script, config) = rendered(&join());
    // Rendered for another machine: its management MAC is not here.
    let other = vec![("eth0".to_owned(), "b4:96:91:00:00:01".to_owned())];
    assert_eq!(
        boot(&script, &config, &other).unwrap_err().to_string(),
        "the kernel cannot bring up the network: ifname=netboot:0c:c4:7a:6b:84:20: no NIC of this machine has MAC 0c:c4:7a:6b:84:20 (its NICs: eth0 b4:96:91:00:00:01)"
    );
    for (from, to, reason) in [
        (
            "::netboot:off",
            "::mgmt:off",
            "the kernel cannot bring up the network: ip=172.16.128.11::172.16.128.1:255.255.248.0::mgmt:off: no interface \"mgmt\" (its NICs: eth0 0c:c4:7a:6b:84:1f, eth1 0C:C4:7A:6B:84:20; name one with ifname=<name>:<mac> or vlan=<name>:<parent>)",
        ),
        (
            ":255.255.248.0:",
            ":255.255.0.248:",
            "the kernel cannot bring up the network: ip=172.16.128.11::172.16.128.1:255.255.0.248::netboot:off: the netmask 255.255.0.248 is not contiguous",
        ),
        (
            "::netboot:off",
            "::netboot:dhcp",
            "the kernel cannot bring up the network: ip=172.16.128.11::172.16.128.1:255.255.248.0::netboot:dhcp: a static address ends in :off or :none, not :dhcp",
        ),
    ] {
        let broken = edit(&script, from, to);
        assert_eq!(
            boot(&broken, &config, &nics()).unwrap_err().to_string(),
            reason
        );
    }
    // The VLAN form needs its parent.
    let node = NodeInstall {
        vlan_id: Some(100),
        ..join()
    };
    let (script, config) = rendered(&node);
    let broken = edit(&script, "vlan=vlan100:netboot", "vlan=vlan100:bond0");
    assert_eq!(
        boot(&broken, &config, &nics()).unwrap_err().to_string(),
        "the kernel cannot bring up the network: vlan=vlan100:bond0: no interface \"bond0\" (name it with ifname=<name>:<mac>)"
    );
}
