#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use std::collections::BTreeMap;

use ingot_harvester::Port;
use ingot_harvester::config::{ConfigError, JoinConfig, ManagementNetwork, finalize_userdata};
use ingot_harvester::{Artifacts, HarvesterVersion, Schema, Secret};
use pretty_assertions::assert_eq;

fn join(version: &str) -> JoinConfig {
    let v = HarvesterVersion::parse(version).unwrap();
    let iso = Artifacts::new(&v, None).unwrap().iso.to_string();
    let mut c = JoinConfig::new(
        v,
        "147.75.1.10",
        Secret::new("K10cluster::server:s3cret"),
        "pool-abcdefgh",
        Secret::new("hunter2hunter2ab"),
        iso,
    );
    c.ssh_authorized_keys = vec!["ssh-ed25519 AAAAC3Nza ops@example".into()];
    c
}

fn ports() -> Vec<Port> {
    vec![
        Port::bond("bond0"),
        Port::physical("eth0", "0C:C4:7A:6B:84:20"),
        Port::physical("eth1", "0c:c4:7a:6b:84:21"),
    ]
}

fn bond_opts() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("miimon".to_owned(), "100".to_owned()),
        ("mode".to_owned(), "balance-tlb".to_owned()),
    ])
}

#[test]
fn current_schema_intermediate() {
    let c = join("v1.3.2");
    assert_eq!(c.schema(), Schema::Current);
    assert_eq!(
        c.render_intermediate().unwrap(),
        "#cloud-config
scheme_version: 1
server_url: https://147.75.1.10:443
token: K10cluster::server:s3cret
os:
  hostname: pool-abcdefgh
  password: hunter2hunter2ab
  ssh_authorized_keys:
  - ssh-ed25519 AAAAC3Nza ops@example
install:
  mode: join
  device: /dev/sda
  iso_url: https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-amd64.iso
  tty: ttyS1,115200n8
  automatic: true
"
    );
}

#[test]
fn current_schema_final_with_bond() {
    let c = join("v1.3.2");
    let mgmt =
        ManagementNetwork::from_ports(&["eth0".into(), "eth1".into()], &ports(), bond_opts())
            .unwrap();
    let expected = "#cloud-config
scheme_version: 1
server_url: https://147.75.1.10:443
token: K10cluster::server:s3cret
os:
  hostname: pool-abcdefgh
  password: hunter2hunter2ab
  ssh_authorized_keys:
  - ssh-ed25519 AAAAC3Nza ops@example
install:
  mode: join
  management_interface:
    interfaces:
    - hwAddr: 0c:c4:7a:6b:84:20
    - hwAddr: 0c:c4:7a:6b:84:21
    method: dhcp
    default_route: true
    bond_options:
      miimon: '100'
      mode: balance-tlb
  device: /dev/sda
  iso_url: https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-amd64.iso
  tty: ttyS1,115200n8
  automatic: true
";
    assert_eq!(c.render_final(&mgmt).unwrap(), expected);
    // The seed flow's merge of the stored intermediate config gives the same document.
    let merged =
        finalize_userdata(&c.render_intermediate().unwrap(), Schema::Current, &mgmt).unwrap();
    let parse = |s: &str| serde_yaml::from_str::<serde_yaml::Value>(s).unwrap();
    assert_eq!(parse(&merged), parse(expected));
}

#[test]
fn v1_0_schema_intermediate_and_final() {
    let mut c = join("v1.0.3");
    c.ssh_authorized_keys.clear();
    assert_eq!(c.schema(), Schema::V1_0);
    assert_eq!(
        c.render_intermediate().unwrap(),
        "#cloud-config
server_url: https://147.75.1.10:8443
token: K10cluster::server:s3cret
os:
  hostname: pool-abcdefgh
  password: hunter2hunter2ab
install:
  mode: join
  device: /dev/sda
  iso_url: https://releases.rancher.com/harvester/v1.0.3/harvester-v1.0.3-amd64.iso
  tty: ttyS1,115200n8
  automatic: true
"
    );
    let mgmt = ManagementNetwork::from_ports(&["eth0".into()], &ports(), bond_opts()).unwrap();
    assert_eq!(
        c.render_final(&mgmt).unwrap(),
        "#cloud-config
server_url: https://147.75.1.10:8443
token: K10cluster::server:s3cret
os:
  hostname: pool-abcdefgh
  password: hunter2hunter2ab
install:
  mode: join
  networks:
    harvester-mgmt:
      interfaces:
      - hwAddr: 0c:c4:7a:6b:84:20
      method: dhcp
      default_route: true
      bond_options:
        miimon: '100'
        mode: balance-tlb
  device: /dev/sda
  iso_url: https://releases.rancher.com/harvester/v1.0.3/harvester-v1.0.3-amd64.iso
  tty: ttyS1,115200n8
  automatic: true
"
    );
}

#[test]
fn no_bond_options_means_no_bond_options_key() {
    let c = join("v1.4.2");
    let mgmt = ManagementNetwork::from_ports(&["eth0".into()], &ports(), BTreeMap::new()).unwrap();
    let out = c.render_final(&mgmt).unwrap();
    assert!(!out.contains("bond_options"), "{out}");
    assert!(
        out.contains(
            "    - hwAddr: 0c:c4:7a:6b:84:20\n    method: dhcp\n    default_route: true\n  device:"
        ),
        "{out}"
    );
}

#[test]
fn finalizes_the_originals_lower_cased_intermediate_config() {
    // What the Go addon stored in Instance.spec.userdata (yaml.v2, lower-cased, zero values).
    let original = "#cloud-config
serverurl: https://147.75.1.10:8443
token: K10cluster::server:s3cret
os:
  sshauthorizedkeys: []
  hostname: pool-abcdefgh
  password: hunter2hunter2ab
install:
  automatic: true
  mode: join
  networks: {}
  vip: \"\"
  device: /dev/sda
  isourl: https://releases.rancher.com/harvester/master/harvester-master-amd64.iso
  tty: ttyS1,115200n8
";
    let mgmt = ManagementNetwork::from_ports(&["eth0".into()], &ports(), bond_opts()).unwrap();
    let out = finalize_userdata(original, Schema::V1_0, &mgmt).unwrap();
    assert!(
        out.starts_with("#cloud-config\nserverurl: https://147.75.1.10:8443\n"),
        "{out}"
    );
    let v: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
    let net = &v["install"]["networks"]["harvester-mgmt"];
    assert_eq!(net["interfaces"][0]["hwAddr"], "0c:c4:7a:6b:84:20");
    assert_eq!(net["method"], "dhcp");
    assert_eq!(net["default_route"], true);
    assert_eq!(net["bond_options"]["mode"], "balance-tlb");
    assert_eq!(
        v["install"]["isourl"],
        "https://releases.rancher.com/harvester/master/harvester-master-amd64.iso"
    );
    assert_eq!(out.matches("networks").count(), 1);
}

#[test]
fn ipv6_server_gets_brackets() {
    let mut c = join("v1.3.2");
    c.server = "2604:1380::1".into();
    assert_eq!(c.server_url(), "https://[2604:1380::1]:443");
}

#[test]
fn missing_interface_names_it_and_lists_ports() {
    let err =
        ManagementNetwork::from_ports(&["eth3".into()], &ports(), BTreeMap::new()).unwrap_err();
    assert!(matches!(&err, ConfigError::NoSuchInterface { name, .. } if name == "eth3"));
    assert_eq!(
        err.to_string(),
        "management interface \"eth3\" is not a port of the device; ports that exist: bond0, eth0, eth1; fix spec.managementInterface(s)"
    );
}

#[test]
fn interface_without_mac_is_an_error() {
    let mut p = ports();
    p[2].mac = None;
    let err = ManagementNetwork::from_ports(&["eth0".into(), "eth1".into()], &p, BTreeMap::new())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "management interface \"eth1\" has no MAC address reported by the provider yet"
    );
    p[2].mac = Some("0c:c4:7a:6b:84".into());
    let err = ManagementNetwork::from_ports(&["eth1".into()], &p, BTreeMap::new()).unwrap_err();
    assert!(matches!(err, ConfigError::InvalidMac { .. }));
}

#[test]
fn bond_as_management_interface_is_refused() {
    let err =
        ManagementNetwork::from_ports(&["bond0".into()], &ports(), BTreeMap::new()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "management interface \"bond0\" is a bond and has no MAC of its own; name its member ports instead (eth0, eth1)"
    );
    assert!(matches!(
        ManagementNetwork::from_ports(&[], &ports(), BTreeMap::new()),
        Err(ConfigError::NoInterfaces)
    ));
}

#[test]
fn debug_of_inputs_does_not_leak_secrets() {
    let c = join("v1.3.2");
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("s3cret"), "{dbg}");
    assert!(!dbg.contains("hunter2"), "{dbg}");
    assert!(dbg.contains("Secret(***)"), "{dbg}");
}

#[test]
fn empty_token_is_refused() {
    let mut c = join("v1.3.2");
    c.token = Secret::default();
    assert_eq!(
        c.render_intermediate().unwrap_err().to_string(),
        "token must not be empty"
    );
}

#[test]
fn awkward_values_survive_a_yaml_round_trip() {
    // Values that YAML would read as something else, or that could break out of their line.
    for value in [
        "true",
        "1.0",
        "null",
        "a: b",
        "#not-a-comment",
        "- item",
        "'quoted'",
        "line\nbreak",
        "K10::server:x",
    ] {
        let mut c = join("v1.3.2");
        c.password = Secret::new(value);
        c.token = Secret::new(value);
        c.ssh_authorized_keys = vec![value.to_owned()];
        let out = c.render_intermediate().unwrap();
        let v: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
        assert_eq!(v["token"].as_str(), Some(value), "{out}");
        assert_eq!(v["os"]["password"].as_str(), Some(value), "{out}");
        assert_eq!(
            v["os"]["ssh_authorized_keys"][0].as_str(),
            Some(value),
            "{out}"
        );
        assert_eq!(v["install"]["mode"].as_str(), Some("join"), "{out}");
    }
}
