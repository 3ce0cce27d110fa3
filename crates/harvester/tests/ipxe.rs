#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use std::collections::BTreeMap;

use ingot_harvester::ipxe::{InstallBoot, IpxeError, SHELL_SCRIPT, SingleBoot, ipxe_netdev};
use ingot_harvester::{Artifacts, HarvesterVersion};
use pretty_assertions::assert_eq;

fn boot(version: &str, mirror: Option<&str>) -> InstallBoot {
    let v = HarvesterVersion::parse(version).unwrap();
    InstallBoot::reinstall(Artifacts::new(&v, mirror).unwrap()).unwrap()
}

fn bond_opts() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("miimon".to_owned(), "100".to_owned()),
        ("mode".to_owned(), "balance-tlb".to_owned()),
    ])
}

#[test]
fn shell_script_is_the_originals() {
    assert_eq!(SHELL_SCRIPT, "#!ipxe\nshell\n");
}

#[test]
fn v1_0_install_script() {
    assert_eq!(
        boot("v1.0.3", Some("http://mirror.example:8080/harvester")).script().unwrap(),
        "#!ipxe
dhcp
kernel http://mirror.example:8080/harvester/v1.0.3/harvester-v1.0.3-vmlinuz-amd64 ip=dhcp net.ifnames=1 rd.cos.disable rd.noverifyssl root=live:http://mirror.example:8080/harvester/v1.0.3/harvester-v1.0.3-rootfs-amd64.squashfs console=ttyS1,115200 harvester.install.automatic=true boot_cmd=\"echo include_ping_test=yes >> /etc/conf.d/net-online\" harvester.install.config_url=https://metadata.platformequinix.com/userdata
initrd http://mirror.example:8080/harvester/v1.0.3/harvester-v1.0.3-initrd-amd64
boot
"
    );
}

#[test]
fn current_install_script() {
    assert_eq!(
        boot("v1.3.2", None).script().unwrap(),
        "#!ipxe
dhcp
kernel https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-vmlinuz-amd64 initrd=harvester-v1.3.2-initrd-amd64 ip=dhcp net.ifnames=1 rd.cos.disable rd.noverifyssl root=live:https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-rootfs-amd64.squashfs rd.net.timeout.dhcp=100 rd.net.dhcp.retry=10 console=ttyS1,115200 harvester.install.automatic=true harvester.install.skipchecks=true boot_cmd=\"echo include_ping_test=yes >> /etc/conf.d/net-online\" harvester.install.config_url=https://metadata.platformequinix.com/userdata
initrd https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-initrd-amd64
boot
"
    );
}

#[test]
fn single_boot_passes_macs_and_bond_options() {
    let mut b = boot("v1.4.2", None);
    b.single_boot = Some(SingleBoot {
        interfaces: vec!["eth0".into(), "eth1".into()],
        bond_options: bond_opts(),
    });
    let script = b.script().unwrap();
    let kernel = script.lines().nth(2).unwrap();
    assert!(
        kernel.contains(
            " rd.net.dhcp.retry=10 \
harvester.install.management_interface.interfaces=\"hwAddr:${net0/mac}\" \
harvester.install.management_interface.interfaces=\"hwAddr:${net1/mac}\" \
harvester.install.management_interface.method=dhcp \
harvester.install.management_interface.bond_options.miimon=100 \
harvester.install.management_interface.bond_options.mode=balance-tlb \
console=ttyS1,115200 "
        ),
        "{kernel}"
    );
    assert!(script.starts_with("#!ipxe\ndhcp\nkernel https://releases.rancher.com/harvester/v1.4.2/harvester-v1.4.2-vmlinuz-amd64 initrd=harvester-v1.4.2-initrd-amd64 "));
    assert!(script.ends_with("\ninitrd https://releases.rancher.com/harvester/v1.4.2/harvester-v1.4.2-initrd-amd64\nboot\n"));
}

#[test]
fn single_boot_refusals() {
    let with = |version: &str, interfaces: &[&str], opts: BTreeMap<String, String>| {
        let mut b = boot(version, None);
        b.single_boot = Some(SingleBoot {
            interfaces: interfaces.iter().map(|s| (*s).to_owned()).collect(),
            bond_options: opts,
        });
        b.script().unwrap_err()
    };
    assert_eq!(
        with("v1.0.3", &["eth0"], BTreeMap::new()).to_string(),
        "the single-boot flow needs Harvester v1.1 or later (management_interface kernel arguments); v1.0.3 uses the reinstall flow"
    );
    assert_eq!(
        with("v1.3.2", &["bond0"], BTreeMap::new()).to_string(),
        "management interface \"bond0\" is a bond; the single-boot flow passes NIC MACs, so name the bond's member ports (e.g. eth0, eth1)"
    );
    assert!(matches!(
        with("v1.3.2", &["enp1s0"], BTreeMap::new()),
        IpxeError::UnmappableInterface { .. }
    ));
    assert_eq!(
        with("v1.3.2", &[], BTreeMap::new()),
        IpxeError::NoManagementInterface
    );
    assert!(matches!(
        with(
            "v1.3.2",
            &["eth0"],
            BTreeMap::from([("mode".to_owned(), "balance-tlb x=1".to_owned())])
        ),
        IpxeError::InvalidBondOption { .. }
    ));
}

#[test]
fn interface_to_netdev() {
    assert_eq!(ipxe_netdev("eth0").unwrap(), "net0");
    assert_eq!(ipxe_netdev("eth3").unwrap(), "net3");
    assert_eq!(ipxe_netdev("eth12").unwrap(), "net12");
    for bad in ["eth", "eth01", "ethX", "en0", "net0"] {
        assert!(
            matches!(ipxe_netdev(bad), Err(IpxeError::UnmappableInterface { .. })),
            "{bad}"
        );
    }
    assert!(matches!(
        ipxe_netdev("bond0"),
        Err(IpxeError::BondAsManagementInterface { .. })
    ));
}
