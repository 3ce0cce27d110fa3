//! What a node provisioned by Harvester Seeder's full mode boots: its iPXE script and its
//! Harvester install config, which ingot serves per node (by the node's management MAC).
//!
//! The caller (the Cluster reconciler and the HTTP server that serves the two documents) maps a
//! `metal.harvesterhci.io/v1alpha1` Cluster, the node's Inventory and its allocated address onto
//! [`NodeInstall`]; the base config of `clusterConfig.configURL` is fetched by the caller and
//! passed in already parsed. Nothing here does I/O.
//!
//! **The script** ([`ipxe_script`], not in stream-image mode) brings up the management NIC with
//! its static address before the kernel fetches anything: `dhcp`, `iflinkwait -t 5000` (as
//! Seeder's script, but `|| echo ...` after it: an iPXE built without `iflinkwait`, such as
//! Debian's `ipxe-qemu`, would otherwise end the script there), then a kernel line with `ip=<address>::<gateway>:<netmask>::netboot:off`, where `netboot` is the NIC
//! named by `ifname=netboot:<mac>`. With `vlanID` above 1 the address goes on a VLAN interface:
//! `ip=...::vlan<ID>:off vlan=vlan<ID>:netboot`. `boot_cmd` is single-quoted as Seeder writes it.
//! Every value that lands in the script is refused if it could end the kernel line or start
//! another iPXE command (whitespace, control characters, quotes, and `$`, which iPXE expands).
//!
//! **The config** ([`install_config`]) has Seeder's keys and values, merged over the base
//! config: scalars are set; lists are appended (`os.dnsNameservers`, `os.sshAuthorizedKeys`,
//! `install.wipeDisksList`, and also `os.afterInstallChrootCommands` and `install.webhooks`,
//! which Seeder replaces, so that a base config's commands and webhooks still run);
//! `install.managementInterface` gets the node's static address, its one interface and the bond
//! options, replacing the base's interfaces and bond options, and keeps the base's other keys
//! of it, such as `mtu`. Keys of the base that ingot does not set are kept as written.
//! Custom bond options are kept (Seeder renders a new map, filled with defaults only when none
//! are given, and so drops custom ones); the defaults `mode: balance-tlb`, `miimon: "100"` are
//! written only when none are given, and an empty set writes no `bondOptions`, leaving the
//! installer's own defaults.
//!
//! **Key casing.** Keys are written in camelCase, the JSON names of harvester-installer's
//! `pkg/config` structs (`schemeVersion`, `serverUrl`, `managementInterface`, `subnetMask`,
//! `hwAddr`, `vlanId`, `bondOptions`, `isoUrl`, `wipeAllDisks`, `wipeDisksList`,
//! `dnsNameservers`, `sshAuthorizedKeys`, `afterInstallChrootCommands`, and `skipchecks`,
//! which is lower-case there). That is what Seeder emits (it marshals the installer's struct), and
//! what the installer's loader reads directly: `LoadHarvesterConfig` runs a fuzzy-name mapper
//! that also accepts each field's lower-case and snake_case forms (and the form without a
//! trailing `s`), then converts through the JSON names. The installer's `Network.DefaultRoute`
//! is `json:"-"` in current releases, so `defaultRoute: true` is written for the releases that
//! read it and ignored by the others. ingot's Equinix configs ([`crate::config`]) use the
//! snake_case forms; both load the same. Because the loader copies an alias onto its field in
//! map order, a base config that writes one field under two names would load either value:
//! the base's keys are renamed to the camelCase names first, and two names for one field are
//! refused ([`ProvisionError::BaseConfig`]).
//!
//! The installer reads `schemeVersion: 1` and `install.managementInterface` from v1.1 on, so
//! v1.0 releases are refused; stream-image mode (a raw image written by a Tinkerbell workflow,
//! no install script) needs v1.2 or later.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use serde_yaml::{Mapping, Value};
use url::Url;

use crate::artifacts::{Artifacts, ArtifactsError};
use crate::secret::Secret;
use crate::version::{HarvesterVersion, Schema, VersionError};

/// The bond options written when the Cluster gives none (`clusterConfig.bondOptions` absent).
pub const DEFAULT_BOND_OPTIONS: [(&str, &str); 2] = [("mode", "balance-tlb"), ("miimon", "100")];

/// The installer event whose webhook tells ingot a node is installed.
pub const SUCCEEDED_EVENT: &str = "SUCCEEDED";

/// The `boot_cmd` kernel argument, quoted as Seeder writes it.
pub const BOOT_CMD: &str = "boot_cmd='echo include_ping_test=yes >> /etc/conf.d/net-online'";

/// The CPU architecture of an Inventory (`spec.arch`), as Harvester's artifact names spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// `amd64` or `arm64`; anything else is [`ProvisionError::Arch`].
    pub fn parse(value: &str) -> Result<Self, ProvisionError> {
        match value {
            "amd64" => Ok(Arch::Amd64),
            "arm64" => Ok(Arch::Arm64),
            other => Err(ProvisionError::Arch {
                value: other.to_owned(),
            }),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the node creates the cluster (the Cluster's first node) or joins it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeMode {
    /// `install.mode: create` with the cluster VIP as `install.vip` (`vipMode: static`).
    Create { vip: String },
    /// `install.mode: join` with `serverUrl: https://<vip>:443`.
    Join { vip: String },
}

impl NodeMode {
    pub fn vip(&self) -> &str {
        match self {
            NodeMode::Create { vip } | NodeMode::Join { vip } => vip,
        }
    }
}

/// One node's install, as the Cluster, its Inventory and the node's allocated address give
/// it. `Debug` shows `Secret(***)` for the token and the password.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInstall {
    /// The Cluster's `spec.version`, e.g. `v1.7.1`.
    pub version: String,
    /// The Cluster's `spec.imageURL`: artifacts are at `<imageURL>/<version>/harvester-...`.
    pub image_url: String,
    /// The Inventory's `spec.arch`: `amd64` or `arm64`.
    pub arch: String,
    /// The Inventory's `spec.managementInterfaceMacAddress`.
    pub mac: String,
    /// `os.hostname` (Seeder: `<inventory>-<namespace>`).
    pub hostname: String,
    /// The node's static IPv4 address, netmask and gateway (the Inventory's `pxeBootConfig`).
    pub address: String,
    pub netmask: String,
    pub gateway: String,
    /// The Inventory's `spec.primaryDisk`: the install disk.
    pub primary_disk: String,
    pub mode: NodeMode,
    /// The cluster token (the Cluster's `status.token`).
    pub token: Secret,
    /// The node's OS password (the Inventory's `status.generatedPassword`).
    pub os_password: Secret,
    /// `clusterConfig.sshKeys`.
    pub ssh_keys: Vec<String>,
    /// `clusterConfig.nameservers` (IP addresses).
    pub nameservers: Vec<String>,
    /// `clusterConfig.vlanID` (the CRD defaults it to 1): above 1 the management network is
    /// tagged.
    pub vlan_id: Option<u32>,
    /// `clusterConfig.bondOptions`: `None` when the Cluster gives none (defaults are written).
    pub bond_options: Option<BTreeMap<String, String>>,
    /// `clusterConfig.wipeDisks`.
    pub wipe_disks: bool,
    /// `clusterConfig.streamImageMode`.
    pub stream_image_mode: bool,
    /// The YAML document at `clusterConfig.configURL`, fetched by the caller, if there is one.
    pub base_config: Option<Value>,
    /// Where ingot serves this node's config (`harvester.install.config_url`).
    pub config_url: String,
    /// The URL of the installer's `SUCCEEDED` webhook (`PUT`), not used in stream-image mode.
    pub webhook_url: String,
}

/// Why a node's script or config cannot be rendered. Never contains the token or the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProvisionError {
    #[error("the Cluster's spec.version: {0}")]
    Version(#[from] VersionError),
    #[error(
        "the Cluster's spec.version {version} is not supported: {reason}; use Harvester v1.1.0 or later, e.g. v1.7.1"
    )]
    UnsupportedVersion {
        version: String,
        reason: &'static str,
    },
    #[error(
        "streamImageMode needs Harvester v1.2.0 or later (earlier releases publish no raw image); {version} installs from the ISO, so unset streamImageMode"
    )]
    StreamModeUnsupported { version: String },
    #[error(
        "streamImageMode is set: the node writes a raw image through a Tinkerbell workflow and boots no install script; unset streamImageMode to install through iPXE"
    )]
    StreamImageMode,
    #[error("the Inventory's spec.arch {value:?} is not amd64 or arm64; set it to one of them")]
    Arch { value: String },
    #[error(
        "the Inventory's spec.managementInterfaceMacAddress {value:?} is not six colon-separated hex octets; write it like 0c:c4:7a:6b:84:20"
    )]
    Mac { value: String },
    #[error("{field} {value:?} is not an IPv4 address; write it like 172.16.128.11")]
    NotIpv4 { field: &'static str, value: String },
    #[error(
        "netmask {value:?} is not a contiguous IPv4 netmask; write it like 255.255.248.0 (set the AddressPool's spec.netmask)"
    )]
    Netmask { value: String },
    #[error(
        "gateway {gateway} is not in the node's network {address}/{netmask}, so the node cannot reach it; set the AddressPool's spec.netmask to the network's mask, or its spec.gateway to a router in that network"
    )]
    GatewayOutsideNetwork {
        gateway: String,
        address: String,
        netmask: String,
    },
    #[error("{field} is empty; {fix}")]
    Missing {
        field: &'static str,
        fix: &'static str,
    },
    #[error(
        "the Inventory's spec.primaryDisk {value:?} is not a device path; write it like /dev/sda"
    )]
    PrimaryDisk { value: String },
    #[error("hostname {value:?} is not a lower-case RFC 1123 host name: {reason}")]
    Hostname { value: String, reason: &'static str },
    #[error("clusterConfig.vlanID {value} is outside 1..4094; use a VLAN ID, or 1 for none")]
    VlanId { value: u32 },
    #[error("clusterConfig.nameservers[{index}] {value:?} is not an IP address")]
    Nameserver { index: usize, value: String },
    #[error("clusterConfig.sshKeys[{index}] is empty; remove it or give the public key")]
    EmptySshKey { index: usize },
    #[error(
        "clusterConfig.bondOptions {key}={value:?}: bond options are written into the node's network configuration and must be letters, digits and . _ - + , : / only"
    )]
    BondOption { key: String, value: String },
    #[error("{field} {value:?} cannot go into the iPXE script: {reason}")]
    UnsafeForIpxe {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("the Cluster's spec.imageURL: {0}")]
    ImageUrl(#[source] ArtifactsError),
    #[error("{field} {value:?} is not an absolute http(s) URL: {reason}")]
    Url {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("the config at clusterConfig.configURL: {path}: {message}; fix the document it serves")]
    BaseConfig { path: String, message: String },
    #[error("could not write the config as YAML: {0}")]
    Emit(String),
}

/// The validated values both documents need.
struct Checked {
    artifacts: Artifacts,
    mac: String,
    address: Ipv4Addr,
    netmask: Ipv4Addr,
    gateway: Ipv4Addr,
    vip: Ipv4Addr,
    vlan_id: Option<u32>,
    bond_options: BTreeMap<String, String>,
}

impl NodeInstall {
    fn check(&self) -> Result<Checked, ProvisionError> {
        let version = HarvesterVersion::parse(&self.version)?;
        if version.schema() == Schema::V1_0 {
            return Err(ProvisionError::UnsupportedVersion {
                version: version.to_string(),
                reason: "v1.0 installers do not read schemeVersion 1 and install.managementInterface",
            });
        }
        if self.stream_image_mode && version.major == 1 && version.minor < 2 {
            return Err(ProvisionError::StreamModeUnsupported {
                version: version.to_string(),
            });
        }
        let arch = Arch::parse(&self.arch)?;

        if self.image_url.is_empty() {
            return Err(ProvisionError::Missing {
                field: "the Cluster's spec.imageURL",
                fix: "set it to where the release artifacts are, e.g. https://releases.rancher.com/harvester",
            });
        }
        script_safe("the Cluster's spec.imageURL", &self.image_url)?;
        let artifacts = Artifacts::for_arch(&version, Some(&self.image_url), arch.as_str())
            .map_err(ProvisionError::ImageUrl)?;

        if !is_mac(&self.mac) {
            return Err(ProvisionError::Mac {
                value: self.mac.clone(),
            });
        }
        let address = ipv4("address", &self.address)?;
        let netmask = ipv4("netmask", &self.netmask)?;
        let gateway = ipv4("gateway", &self.gateway)?;
        let mask = u32::from(netmask);
        if mask.leading_ones() + mask.trailing_zeros() != 32 {
            return Err(ProvisionError::Netmask {
                value: self.netmask.clone(),
            });
        }
        if u32::from(address) & mask != u32::from(gateway) & mask {
            return Err(ProvisionError::GatewayOutsideNetwork {
                gateway: gateway.to_string(),
                address: address.to_string(),
                netmask: netmask.to_string(),
            });
        }
        let vip = ipv4("the cluster VIP", self.mode.vip())?;

        if self.primary_disk.is_empty() {
            return Err(ProvisionError::Missing {
                field: "the Inventory's spec.primaryDisk",
                fix: "set it to the install disk, e.g. /dev/sda",
            });
        }
        if !self.primary_disk.starts_with("/dev/")
            || self.primary_disk.len() == "/dev/".len()
            || self
                .primary_disk
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ProvisionError::PrimaryDisk {
                value: self.primary_disk.clone(),
            });
        }
        check_hostname(&self.hostname)?;

        if self.token.is_empty() {
            return Err(ProvisionError::Missing {
                field: "the cluster token",
                fix: "the Cluster's status.token must be generated before its nodes are rendered",
            });
        }
        if self.os_password.is_empty() {
            return Err(ProvisionError::Missing {
                field: "the OS password",
                fix: "the Inventory's status.generatedPassword must be generated before the node is rendered",
            });
        }
        for (index, ns) in self.nameservers.iter().enumerate() {
            if ns.parse::<IpAddr>().is_err() {
                return Err(ProvisionError::Nameserver {
                    index,
                    value: ns.clone(),
                });
            }
        }
        if let Some(index) = self.ssh_keys.iter().position(|k| k.trim().is_empty()) {
            return Err(ProvisionError::EmptySshKey { index });
        }
        if let Some(value) = self.vlan_id
            && !(1..=4094).contains(&value)
        {
            return Err(ProvisionError::VlanId { value });
        }

        let bond_options = match &self.bond_options {
            None => DEFAULT_BOND_OPTIONS
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            Some(custom) => custom.clone(),
        };
        for (key, value) in &bond_options {
            let plain_key = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            let plain_value = !value.is_empty()
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-+,:/".contains(&b));
            if !plain_key || !plain_value {
                return Err(ProvisionError::BondOption {
                    key: key.clone(),
                    value: value.clone(),
                });
            }
        }

        Ok(Checked {
            artifacts,
            mac: self.mac.to_ascii_lowercase(),
            address,
            netmask,
            gateway,
            vip,
            vlan_id: self.vlan_id,
            bond_options,
        })
    }
}

/// The node's iPXE script (not in stream-image mode, which boots no install script).
pub fn ipxe_script(node: &NodeInstall) -> Result<String, ProvisionError> {
    let c = node.check()?;
    if node.stream_image_mode {
        return Err(ProvisionError::StreamImageMode);
    }
    script_safe("the config URL", &node.config_url)?;
    http_url("the config URL", &node.config_url)?;
    let a = &c.artifacts;
    let (address, gateway, netmask, mac) = (c.address, c.gateway, c.netmask, &c.mac);
    let ip = match c.vlan_id {
        Some(id) if id > 1 => {
            format!("ip={address}::{gateway}:{netmask}::vlan{id}:off vlan=vlan{id}:netboot")
        }
        _ => format!("ip={address}::{gateway}:{netmask}::netboot:off"),
    };
    Ok(format!(
        "#!ipxe\n\
         dhcp\n\
         iflinkwait -t 5000 || echo no link wait in this iPXE\n\
         kernel {kernel} initrd={initrd_name} {ip} net.ifnames=1 rd.cos.disable rd.noverifyssl BOOTIF={mac} ifname=netboot:{mac} root=live:{rootfs} console=tty1 harvester.install.automatic=true {BOOT_CMD} harvester.install.config_url={config_url}\n\
         initrd {initrd}\n\
         boot\n",
        kernel = a.kernel,
        initrd_name = a.initrd_name(),
        rootfs = a.rootfs,
        config_url = node.config_url,
        initrd = a.initrd,
    ))
}

/// The node's Harvester install config (YAML, without a `#cloud-config` line: ingot serves it
/// at the config URL, not as Metal userdata), merged over the base config if there is one.
pub fn install_config(node: &NodeInstall) -> Result<String, ProvisionError> {
    let c = node.check()?;
    if !node.stream_image_mode {
        http_url("the webhook URL", &node.webhook_url)?;
    }

    let mut doc = match &node.base_config {
        None | Some(Value::Null) => Mapping::new(),
        Some(Value::Mapping(m)) => m.clone(),
        Some(_) => return Err(base_error("the document", "is not a mapping")),
    };
    canonicalize(&mut doc, TOP_FIELDS, "")?;
    set(&mut doc, "schemeVersion", Value::from(1));
    if let NodeMode::Join { .. } = node.mode {
        set(
            &mut doc,
            "serverUrl",
            format!("https://{}:443", c.vip).into(),
        );
    }
    set(&mut doc, "token", node.token.expose().into());

    let os = child_mapping(&mut doc, "os", OS_FIELDS, "os")?;
    set(os, "hostname", node.hostname.clone().into());
    set(os, "password", node.os_password.expose().into());
    append(
        os,
        "dnsNameservers",
        node.nameservers.iter().cloned().map(Value::from),
        "os.dnsNameservers",
    )?;
    append(
        os,
        "sshAuthorizedKeys",
        node.ssh_keys.iter().cloned().map(Value::from),
        "os.sshAuthorizedKeys",
    )?;
    append(
        os,
        "afterInstallChrootCommands",
        [Value::from(format!(
            "grub2-editenv /oem/grubenv set extra_cmdline=\"ifname=netboot:{}\"",
            c.mac
        ))],
        "os.afterInstallChrootCommands",
    )?;

    let install = child_mapping(&mut doc, "install", INSTALL_FIELDS, "install")?;
    match &node.mode {
        NodeMode::Create { .. } => {
            set(install, "mode", "create".into());
            set(install, "vip", c.vip.to_string().into());
            set(install, "vipMode", "static".into());
        }
        NodeMode::Join { .. } => set(install, "mode", "join".into()),
    }
    let mgmt = child_mapping(
        install,
        "managementInterface",
        NETWORK_FIELDS,
        "install.managementInterface",
    )?;
    set(mgmt, "method", "static".into());
    set(mgmt, "ip", c.address.to_string().into());
    set(mgmt, "subnetMask", c.netmask.to_string().into());
    set(mgmt, "gateway", c.gateway.to_string().into());
    set(mgmt, "defaultRoute", true.into());
    let mut iface = Mapping::new();
    iface.insert("hwAddr".into(), c.mac.clone().into());
    set(
        mgmt,
        "interfaces",
        Value::Sequence(vec![Value::Mapping(iface)]),
    );
    if let Some(id) = c.vlan_id {
        set(mgmt, "vlanId", Value::from(id));
    }
    if c.bond_options.is_empty() {
        mgmt.remove("bondOptions");
    } else {
        let opts = c
            .bond_options
            .iter()
            .map(|(k, v)| (Value::from(k.clone()), Value::from(v.clone())))
            .collect();
        set(mgmt, "bondOptions", Value::Mapping(opts));
    }
    set(install, "device", node.primary_disk.clone().into());
    let wipe_all = node.wipe_disks || flag(install.get("wipeAllDisks"), "install.wipeAllDisks")?;
    if wipe_all {
        set(install, "wipeAllDisks", true.into());
        let listed = list(install.get("wipeDisksList"), "install.wipeDisksList")?
            .iter()
            .any(|d| d.as_str() == Some(node.primary_disk.as_str()));
        if !listed {
            append(
                install,
                "wipeDisksList",
                [Value::from(node.primary_disk.clone())],
                "install.wipeDisksList",
            )?;
        }
    }
    set(install, "skipchecks", true.into());
    set(install, "automatic", true.into());
    if !node.stream_image_mode {
        set(install, "isoUrl", c.artifacts.iso.to_string().into());
        let mut hook = Mapping::new();
        hook.insert("event".into(), SUCCEEDED_EVENT.into());
        hook.insert("method".into(), "PUT".into());
        hook.insert("url".into(), node.webhook_url.clone().into());
        append(
            install,
            "webhooks",
            [Value::Mapping(hook)],
            "install.webhooks",
        )?;
    }
    serde_yaml::to_string(&doc).map_err(|e| ProvisionError::Emit(e.to_string()))
}

// The JSON names of the installer's config structs (`pkg/config`) at the levels written here.
const TOP_FIELDS: &[&str] = &[
    "schemeVersion",
    "serverUrl",
    "token",
    "sans",
    "os",
    "install",
    "runtimeVersion",
    "rancherVersion",
    "harvesterChartVersion",
    "monitoringChartVersion",
    "systemSettings",
    "loggingChartVersion",
    "kubeovnChartVersion",
];
const OS_FIELDS: &[&str] = &[
    "afterInstallChrootCommands",
    "sshAuthorizedKeys",
    "writeFiles",
    "hostname",
    "modules",
    "sysctls",
    "ntpServers",
    "dnsNameservers",
    "password",
    "environment",
    "labels",
    "sshd",
    "persistentStatePaths",
    "externalStorageConfig",
    "additionalKernelArguments",
];
const INSTALL_FIELDS: &[&str] = &[
    "automatic",
    "skipchecks",
    "mode",
    "managementInterface",
    "vip",
    "vipHwAddr",
    "vipMode",
    "clusterDns",
    "clusterPodCidr",
    "clusterServiceCidr",
    "forceEfi",
    "device",
    "configUrl",
    "silent",
    "isoUrl",
    "powerOff",
    "noFormat",
    "debug",
    "tty",
    "forceGpt",
    "role",
    "withNetImages",
    "wipeAllDisks",
    "wipeDisksList",
    "forceMbr",
    "dataDisk",
    "webhooks",
    "addons",
    "harvester",
    "rawDiskImagePath",
    "persistentPartitionSize",
];
const NETWORK_FIELDS: &[&str] = &[
    "interfaces",
    "method",
    "ip",
    "subnetMask",
    "gateway",
    "defaultRoute",
    "bondOptions",
    "mtu",
    "vlanId",
];

/// `hwAddr` → `hw_addr`, as the installer's mapper derives a field's snake_case form.
fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `key` names `field` for the installer's loader: the field's JSON name, its
/// lower-case or snake_case form, or those without a trailing `s`/`es`.
fn names_field(key: &str, field: &str) -> bool {
    if key == field {
        return true;
    }
    let key = key.to_ascii_lowercase();
    let mut stems = vec![field];
    if let Some(s) = field.strip_suffix('s')
        && !s.is_empty()
    {
        stems.push(s);
    }
    if let Some(s) = field.strip_suffix("es")
        && !s.is_empty()
    {
        stems.push(s);
    }
    stems
        .iter()
        .any(|s| key == s.to_ascii_lowercase() || key == snake(s))
}

/// Renames the keys of `map` that name one of `fields` to the field's JSON name; two keys for
/// one field are refused.
fn canonicalize(map: &mut Mapping, fields: &[&str], path: &str) -> Result<(), ProvisionError> {
    let at = |k: &Value| {
        let k = k.as_str().unwrap_or("?");
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    let old = std::mem::take(map);
    let mut written: Vec<(Value, Value)> = Vec::new();
    for (key, value) in old {
        let target = key
            .as_str()
            .and_then(|k| fields.iter().find(|f| names_field(k, f)))
            .map_or_else(|| key.clone(), |f| Value::from(*f));
        if let Some((_, first)) = written.iter().find(|(t, _)| *t == target) {
            return Err(base_error(
                &at(&key),
                &format!(
                    "{} names the same installer field ({}); keep one",
                    at(first),
                    target.as_str().unwrap_or("?")
                ),
            ));
        }
        written.push((target.clone(), key));
        map.insert(target, value);
    }
    Ok(())
}

fn base_error(path: &str, message: &str) -> ProvisionError {
    ProvisionError::BaseConfig {
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

/// Sets `key`, in place if it is there.
fn set(map: &mut Mapping, key: &str, value: Value) {
    map.insert(key.into(), value);
}

/// The mapping at `key`, created if absent, with its keys canonicalized.
fn child_mapping<'a>(
    map: &'a mut Mapping,
    key: &str,
    fields: &[&str],
    path: &str,
) -> Result<&'a mut Mapping, ProvisionError> {
    let slot = map
        .entry(key.into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if slot.is_null() {
        *slot = Value::Mapping(Mapping::new());
    }
    let child = slot
        .as_mapping_mut()
        .ok_or_else(|| base_error(path, "is not a mapping"))?;
    canonicalize(child, fields, path)?;
    Ok(child)
}

/// A list field of the base: absent or null is empty, a single string is a one-item list (the
/// installer's loader reads it so).
fn list(value: Option<&Value>, path: &str) -> Result<Vec<Value>, ProvisionError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(s)) => Ok(s.clone()),
        Some(Value::String(s)) => Ok(vec![Value::from(s.clone())]),
        Some(_) => Err(base_error(path, "is not a list")),
    }
}

fn append(
    map: &mut Mapping,
    key: &str,
    items: impl IntoIterator<Item = Value>,
    path: &str,
) -> Result<(), ProvisionError> {
    let mut all = list(map.get(key), path)?;
    let before = all.len();
    all.extend(items);
    if all.len() > before || map.contains_key(key) {
        set(map, key, Value::Sequence(all));
    }
    Ok(())
}

/// A boolean field of the base, as the installer's loader reads it (`true` or `"true"`).
fn flag(value: Option<&Value>, path: &str) -> Result<bool, ProvisionError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") || s.is_empty() => Ok(false),
        Some(_) => Err(base_error(path, "is not true or false")),
    }
}

fn ipv4(field: &'static str, value: &str) -> Result<Ipv4Addr, ProvisionError> {
    value.parse().map_err(|_| ProvisionError::NotIpv4 {
        field,
        value: value.to_owned(),
    })
}

fn is_mac(mac: &str) -> bool {
    let octets: Vec<&str> = mac.split(':').collect();
    octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn check_hostname(value: &str) -> Result<(), ProvisionError> {
    let err = |reason| {
        Err(ProvisionError::Hostname {
            value: value.to_owned(),
            reason,
        })
    };
    if value.is_empty() {
        return err("it is empty");
    }
    if value.len() > 253 {
        return err("it is longer than 253 characters");
    }
    for label in value.split('.') {
        if label.is_empty() || label.len() > 63 {
            return err("each dot-separated part must be 1 to 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return err("only lower-case letters, digits, '-' and '.' are allowed");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return err("a part must not start or end with '-'");
        }
    }
    Ok(())
}

/// Refuses what could end the kernel line or start another iPXE command, or that iPXE would
/// expand.
fn script_safe(field: &'static str, value: &str) -> Result<(), ProvisionError> {
    let reason = if value.chars().any(|c| c == '\n' || c == '\r') {
        Some("a line break would start another iPXE command")
    } else if value.chars().any(char::is_control) {
        Some("control characters are not allowed")
    } else if value.chars().any(char::is_whitespace) {
        Some("whitespace would split the kernel command line")
    } else if value.contains(['"', '\'']) {
        Some("quotes would change how the kernel command line is split")
    } else if value.contains('$') {
        Some("iPXE expands ${...} settings")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ProvisionError::UnsafeForIpxe {
            field,
            value: value.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

fn http_url(field: &'static str, value: &str) -> Result<(), ProvisionError> {
    let err = |reason: String| ProvisionError::Url {
        field,
        value: value.to_owned(),
        reason,
    };
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err("it contains whitespace or control characters".into()));
    }
    let url = Url::parse(value).map_err(|e| err(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(err(format!("the scheme is {}", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(err("it has no host".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const MAC: &str = "0c:c4:7a:6b:84:20";
    const TOKEN: &str = "tok3nTOK3Ntok3nT";
    const PASSWORD: &str = "pAssw0rdPASSW0RD";

    fn create_node() -> NodeInstall {
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
            mode: NodeMode::Create {
                vip: "172.16.128.7".into(),
            },
            token: Secret::new(TOKEN),
            os_password: Secret::new(PASSWORD),
            ssh_keys: vec!["ssh-ed25519 AAAAC3Nza ops@example".into()],
            nameservers: vec!["172.16.128.1".into()],
            vlan_id: Some(1),
            bond_options: None,
            wipe_disks: false,
            stream_image_mode: false,
            base_config: None,
            config_url: "http://172.16.135.40:9090/harvester/config/0c:c4:7a:6b:84:20".into(),
            webhook_url: "http://172.16.135.40:9090/disable/default/node".into(),
        }
    }

    fn join_node() -> NodeInstall {
        NodeInstall {
            mac: "0C:C4:7A:6B:80:D0".into(),
            hostname: "node2-default".into(),
            address: "172.16.128.12".into(),
            mode: NodeMode::Join {
                vip: "172.16.128.7".into(),
            },
            config_url: "http://172.16.135.40:9090/harvester/config/0c:c4:7a:6b:80:d0".into(),
            webhook_url: "http://172.16.135.40:9090/disable/default/node2".into(),
            ..create_node()
        }
    }

    fn yaml(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn create_node_script() {
        assert_eq!(
            ipxe_script(&create_node()).unwrap(),
            "#!ipxe\n\
             dhcp\n\
             iflinkwait -t 5000 || echo no link wait in this iPXE\n\
             kernel http://172.16.135.50:8080/v1.7.1/harvester-v1.7.1-vmlinuz-amd64 initrd=harvester-v1.7.1-initrd-amd64 ip=172.16.128.11::172.16.128.1:255.255.248.0::netboot:off net.ifnames=1 rd.cos.disable rd.noverifyssl BOOTIF=0c:c4:7a:6b:84:20 ifname=netboot:0c:c4:7a:6b:84:20 root=live:http://172.16.135.50:8080/v1.7.1/harvester-v1.7.1-rootfs-amd64.squashfs console=tty1 harvester.install.automatic=true boot_cmd='echo include_ping_test=yes >> /etc/conf.d/net-online' harvester.install.config_url=http://172.16.135.40:9090/harvester/config/0c:c4:7a:6b:84:20\n\
             initrd http://172.16.135.50:8080/v1.7.1/harvester-v1.7.1-initrd-amd64\n\
             boot\n"
        );
    }

    #[test]
    fn join_node_script_on_arm64() {
        let node = NodeInstall {
            arch: "arm64".into(),
            image_url: "https://mirror.example/harvester/".into(),
            ..join_node()
        };
        assert_eq!(
            ipxe_script(&node).unwrap(),
            "#!ipxe\n\
             dhcp\n\
             iflinkwait -t 5000 || echo no link wait in this iPXE\n\
             kernel https://mirror.example/harvester/v1.7.1/harvester-v1.7.1-vmlinuz-arm64 initrd=harvester-v1.7.1-initrd-arm64 ip=172.16.128.12::172.16.128.1:255.255.248.0::netboot:off net.ifnames=1 rd.cos.disable rd.noverifyssl BOOTIF=0c:c4:7a:6b:80:d0 ifname=netboot:0c:c4:7a:6b:80:d0 root=live:https://mirror.example/harvester/v1.7.1/harvester-v1.7.1-rootfs-arm64.squashfs console=tty1 harvester.install.automatic=true boot_cmd='echo include_ping_test=yes >> /etc/conf.d/net-online' harvester.install.config_url=http://172.16.135.40:9090/harvester/config/0c:c4:7a:6b:80:d0\n\
             initrd https://mirror.example/harvester/v1.7.1/harvester-v1.7.1-initrd-arm64\n\
             boot\n"
        );
    }

    #[test]
    fn vlan_script_and_config() {
        let node = NodeInstall {
            vlan_id: Some(100),
            ..join_node()
        };
        let script = ipxe_script(&node).unwrap();
        assert!(
            script.contains(
                " ip=172.16.128.12::172.16.128.1:255.255.248.0::vlan100:off vlan=vlan100:netboot net.ifnames=1 "
            ),
            "{script}"
        );
        assert!(!script.contains("netboot:off"), "{script}");
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(
            config["install"]["managementInterface"]["vlanId"],
            Value::from(100)
        );
        // No VLAN ID at all: no vlanId key, and the untagged kernel form.
        let node = NodeInstall {
            vlan_id: None,
            ..join_node()
        };
        assert!(ipxe_script(&node).unwrap().contains("::netboot:off "));
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(config["install"]["managementInterface"].get("vlanId"), None);
    }

    #[test]
    fn create_node_config() {
        assert_eq!(
            install_config(&create_node()).unwrap(),
            r#"schemeVersion: 1
token: tok3nTOK3Ntok3nT
os:
  hostname: node-default
  password: pAssw0rdPASSW0RD
  dnsNameservers:
  - 172.16.128.1
  sshAuthorizedKeys:
  - ssh-ed25519 AAAAC3Nza ops@example
  afterInstallChrootCommands:
  - grub2-editenv /oem/grubenv set extra_cmdline="ifname=netboot:0c:c4:7a:6b:84:20"
install:
  mode: create
  vip: 172.16.128.7
  vipMode: static
  managementInterface:
    method: static
    ip: 172.16.128.11
    subnetMask: 255.255.248.0
    gateway: 172.16.128.1
    defaultRoute: true
    interfaces:
    - hwAddr: 0c:c4:7a:6b:84:20
    vlanId: 1
    bondOptions:
      miimon: '100'
      mode: balance-tlb
  device: /dev/sda
  skipchecks: true
  automatic: true
  isoUrl: http://172.16.135.50:8080/v1.7.1/harvester-v1.7.1-amd64.iso
  webhooks:
  - event: SUCCEEDED
    method: PUT
    url: http://172.16.135.40:9090/disable/default/node
"#
        );
    }

    #[test]
    fn join_node_config() {
        let node = NodeInstall {
            ssh_keys: vec![],
            nameservers: vec![],
            ..join_node()
        };
        assert_eq!(
            install_config(&node).unwrap(),
            r#"schemeVersion: 1
serverUrl: https://172.16.128.7:443
token: tok3nTOK3Ntok3nT
os:
  hostname: node2-default
  password: pAssw0rdPASSW0RD
  afterInstallChrootCommands:
  - grub2-editenv /oem/grubenv set extra_cmdline="ifname=netboot:0c:c4:7a:6b:80:d0"
install:
  mode: join
  managementInterface:
    method: static
    ip: 172.16.128.12
    subnetMask: 255.255.248.0
    gateway: 172.16.128.1
    defaultRoute: true
    interfaces:
    - hwAddr: 0c:c4:7a:6b:80:d0
    vlanId: 1
    bondOptions:
      miimon: '100'
      mode: balance-tlb
  device: /dev/sda
  skipchecks: true
  automatic: true
  isoUrl: http://172.16.135.50:8080/v1.7.1/harvester-v1.7.1-amd64.iso
  webhooks:
  - event: SUCCEEDED
    method: PUT
    url: http://172.16.135.40:9090/disable/default/node2
"#
        );
    }

    #[test]
    fn custom_bond_options_are_kept() {
        let node = NodeInstall {
            bond_options: Some(BTreeMap::from([
                ("mode".to_owned(), "active-backup".to_owned()),
                ("primary".to_owned(), "eth0".to_owned()),
            ])),
            ..join_node()
        };
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(
            config["install"]["managementInterface"]["bondOptions"],
            yaml("{mode: active-backup, primary: eth0}")
        );
        // An empty set is kept too: no bondOptions, not the defaults.
        let node = NodeInstall {
            bond_options: Some(BTreeMap::new()),
            ..join_node()
        };
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(
            config["install"]["managementInterface"].get("bondOptions"),
            None
        );
    }

    #[test]
    fn default_bond_options_when_absent() {
        let config = yaml(&install_config(&join_node()).unwrap());
        assert_eq!(
            config["install"]["managementInterface"]["bondOptions"],
            yaml("{mode: balance-tlb, miimon: '100'}")
        );
    }

    #[test]
    fn wipe_disks() {
        let node = NodeInstall {
            wipe_disks: true,
            primary_disk: "/dev/nvme0n1".into(),
            ..join_node()
        };
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(config["install"]["wipeAllDisks"], Value::from(true));
        assert_eq!(config["install"]["wipeDisksList"], yaml("[/dev/nvme0n1]"));
        assert_eq!(config["install"]["device"], Value::from("/dev/nvme0n1"));

        // Asked for by the base config only: the install disk is added too (harvester#9536).
        let node = NodeInstall {
            base_config: Some(yaml(
                "install: {wipe_all_disks: 'true', wipeDisksList: [/dev/sdb]}",
            )),
            ..join_node()
        };
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(config["install"]["wipeAllDisks"], Value::from(true));
        assert_eq!(
            config["install"]["wipeDisksList"],
            yaml("[/dev/sdb, /dev/sda]")
        );
        assert_eq!(config["install"].get("wipe_all_disks"), None);

        // The install disk listed already: not twice.
        let node = NodeInstall {
            wipe_disks: true,
            base_config: Some(yaml("install: {wipeDisksList: [/dev/sda]}")),
            ..join_node()
        };
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(config["install"]["wipeDisksList"], yaml("[/dev/sda]"));

        // Not asked for: neither key.
        let config = yaml(&install_config(&join_node()).unwrap());
        assert_eq!(config["install"].get("wipeAllDisks"), None);
        assert_eq!(config["install"].get("wipeDisksList"), None);
    }

    #[test]
    fn merged_over_the_base_config() {
        let base = yaml(
            r#"
token: base-token
server_url: https://10.9.9.9:443
os:
  ssh_authorized_keys: [ssh-rsa BASE base@example]
  dns_nameservers: 1.1.1.1
  ntp_servers: [0.suse.pool.ntp.org]
  hostname: base-name
  afterInstallChrootCommands: [echo base]
  writeFiles:
  - path: /etc/motd
    content: hello
install:
  tty: ttyS0
  management_interface:
    method: dhcp
    mtu: 9000
    interfaces: [{hwAddr: "aa:aa:aa:aa:aa:aa"}]
    bond_options: {mode: 802.3ad}
  webhooks:
  - {event: STARTED, method: GET, url: "http://hooks.example/started"}
  addons:
    rancher_logging: {enabled: true}
systemSettings:
  ntp-servers: '{"ntpServers":["0.suse.pool.ntp.org"]}'
"#,
        );
        let node = NodeInstall {
            base_config: Some(base),
            ..join_node()
        };
        let config = yaml(&install_config(&node).unwrap());
        let want = yaml(
            r#"
token: tok3nTOK3Ntok3nT
serverUrl: https://172.16.128.7:443
schemeVersion: 1
os:
  sshAuthorizedKeys: [ssh-rsa BASE base@example, ssh-ed25519 AAAAC3Nza ops@example]
  dnsNameservers: [1.1.1.1, 172.16.128.1]
  ntpServers: [0.suse.pool.ntp.org]
  hostname: node2-default
  afterInstallChrootCommands:
  - echo base
  - grub2-editenv /oem/grubenv set extra_cmdline="ifname=netboot:0c:c4:7a:6b:80:d0"
  writeFiles:
  - path: /etc/motd
    content: hello
  password: pAssw0rdPASSW0RD
install:
  tty: ttyS0
  managementInterface:
    method: static
    mtu: 9000
    interfaces: [{hwAddr: "0c:c4:7a:6b:80:d0"}]
    bondOptions: {miimon: '100', mode: balance-tlb}
    ip: 172.16.128.12
    subnetMask: 255.255.248.0
    gateway: 172.16.128.1
    defaultRoute: true
    vlanId: 1
  webhooks:
  - {event: STARTED, method: GET, url: "http://hooks.example/started"}
  - {event: SUCCEEDED, method: PUT, url: "http://172.16.135.40:9090/disable/default/node2"}
  addons:
    rancher_logging: {enabled: true}
  mode: join
  device: /dev/sda
  skipchecks: true
  automatic: true
  isoUrl: http://172.16.135.50:8080/v1.7.1/harvester-v1.7.1-amd64.iso
systemSettings:
  ntp-servers: '{"ntpServers":["0.suse.pool.ntp.org"]}'
"#,
        );
        assert_eq!(config, want);

        // A null or empty base is no base.
        for base in [Value::Null, yaml("{}")] {
            let node = NodeInstall {
                base_config: Some(base),
                ..join_node()
            };
            assert_eq!(
                install_config(&node).unwrap(),
                install_config(&join_node()).unwrap()
            );
        }
    }

    #[test]
    fn bad_base_configs_name_the_key() {
        for (base, message) in [
            (
                "- a list",
                "the config at clusterConfig.configURL: the document: is not a mapping; fix the document it serves",
            ),
            (
                "os: plain",
                "the config at clusterConfig.configURL: os: is not a mapping; fix the document it serves",
            ),
            (
                "install: [a]",
                "the config at clusterConfig.configURL: install: is not a mapping; fix the document it serves",
            ),
            (
                "install: {managementInterface: 3}",
                "the config at clusterConfig.configURL: install.managementInterface: is not a mapping; fix the document it serves",
            ),
            (
                "os: {dnsNameservers: {a: b}}",
                "the config at clusterConfig.configURL: os.dnsNameservers: is not a list; fix the document it serves",
            ),
            (
                "install: {wipeAllDisks: 3}",
                "the config at clusterConfig.configURL: install.wipeAllDisks: is not true or false; fix the document it serves",
            ),
            (
                "os: {ssh_authorized_keys: [a], sshAuthorizedKeys: [b]}",
                "the config at clusterConfig.configURL: os.sshAuthorizedKeys: os.ssh_authorized_keys names the same installer field (sshAuthorizedKeys); keep one; fix the document it serves",
            ),
            (
                "serverurl: x\nserver_url: y",
                "the config at clusterConfig.configURL: server_url: serverurl names the same installer field (serverUrl); keep one; fix the document it serves",
            ),
        ] {
            let node = NodeInstall {
                base_config: Some(yaml(base)),
                ..join_node()
            };
            let err = install_config(&node).unwrap_err();
            assert!(
                matches!(err, ProvisionError::BaseConfig { .. }),
                "{base}: {err:?}"
            );
            assert_eq!(err.to_string(), message, "{base}");
        }
    }

    #[test]
    fn stream_image_mode() {
        let node = NodeInstall {
            stream_image_mode: true,
            webhook_url: String::new(),
            ..join_node()
        };
        assert_eq!(ipxe_script(&node), Err(ProvisionError::StreamImageMode));
        let config = yaml(&install_config(&node).unwrap());
        assert_eq!(config["install"].get("isoUrl"), None);
        assert_eq!(config["install"].get("webhooks"), None);
        assert_eq!(config["install"]["device"], Value::from("/dev/sda"));

        let node = NodeInstall {
            version: "v1.1.3".into(),
            ..node
        };
        assert_eq!(
            install_config(&node).unwrap_err().to_string(),
            "streamImageMode needs Harvester v1.2.0 or later (earlier releases publish no raw image); v1.1.3 installs from the ISO, so unset streamImageMode"
        );
    }

    #[test]
    fn debug_hides_the_token_and_the_password() {
        let shown = format!("{:?}", create_node());
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(!shown.contains(PASSWORD), "{shown}");
        assert!(shown.contains("Secret(***)"), "{shown}");
        assert!(shown.contains("node-default"), "{shown}");
    }

    fn err(node: NodeInstall) -> ProvisionError {
        let script = ipxe_script(&node).unwrap_err();
        let config = install_config(&node).unwrap_err();
        assert_eq!(script, config);
        let text = config.to_string();
        assert!(!text.contains(TOKEN) && !text.contains(PASSWORD), "{text}");
        config
    }

    #[test]
    fn every_validation_error_names_the_field() {
        let cases: Vec<(NodeInstall, &str)> = vec![
            (
                NodeInstall {
                    version: "1.7.1".into(),
                    ..create_node()
                },
                "the Cluster's spec.version: harvesterVersion \"1.7.1\" is not usable: it must start with 'v'; write a Harvester release such as v1.4.2 or v1.0.3",
            ),
            (
                NodeInstall {
                    version: "v1.0.3".into(),
                    ..create_node()
                },
                "the Cluster's spec.version v1.0.3 is not supported: v1.0 installers do not read schemeVersion 1 and install.managementInterface; use Harvester v1.1.0 or later, e.g. v1.7.1",
            ),
            (
                NodeInstall {
                    arch: "x86_64".into(),
                    ..create_node()
                },
                "the Inventory's spec.arch \"x86_64\" is not amd64 or arm64; set it to one of them",
            ),
            (
                NodeInstall {
                    arch: String::new(),
                    ..create_node()
                },
                "the Inventory's spec.arch \"\" is not amd64 or arm64; set it to one of them",
            ),
            (
                NodeInstall {
                    mac: "0c-c4-7a-6b-84-20".into(),
                    ..create_node()
                },
                "the Inventory's spec.managementInterfaceMacAddress \"0c-c4-7a-6b-84-20\" is not six colon-separated hex octets; write it like 0c:c4:7a:6b:84:20",
            ),
            (
                NodeInstall {
                    mac: "xx:xx:xx:xx:xx".into(),
                    ..create_node()
                },
                "the Inventory's spec.managementInterfaceMacAddress \"xx:xx:xx:xx:xx\" is not six colon-separated hex octets; write it like 0c:c4:7a:6b:84:20",
            ),
            (
                NodeInstall {
                    address: "fd00::11".into(),
                    ..create_node()
                },
                "address \"fd00::11\" is not an IPv4 address; write it like 172.16.128.11",
            ),
            (
                NodeInstall {
                    gateway: "172.16.128".into(),
                    ..create_node()
                },
                "gateway \"172.16.128\" is not an IPv4 address; write it like 172.16.128.11",
            ),
            (
                NodeInstall {
                    netmask: "21".into(),
                    ..create_node()
                },
                "netmask \"21\" is not an IPv4 address; write it like 172.16.128.11",
            ),
            (
                NodeInstall {
                    netmask: "255.0.255.0".into(),
                    ..create_node()
                },
                "netmask \"255.0.255.0\" is not a contiguous IPv4 netmask; write it like 255.255.248.0 (set the AddressPool's spec.netmask)",
            ),
            (
                NodeInstall {
                    netmask: "255.255.255.255".into(),
                    ..create_node()
                },
                "gateway 172.16.128.1 is not in the node's network 172.16.128.11/255.255.255.255, so the node cannot reach it; set the AddressPool's spec.netmask to the network's mask, or its spec.gateway to a router in that network",
            ),
            (
                NodeInstall {
                    mode: NodeMode::Join {
                        vip: "vip.example".into(),
                    },
                    ..create_node()
                },
                "the cluster VIP \"vip.example\" is not an IPv4 address; write it like 172.16.128.11",
            ),
            (
                NodeInstall {
                    primary_disk: String::new(),
                    ..create_node()
                },
                "the Inventory's spec.primaryDisk is empty; set it to the install disk, e.g. /dev/sda",
            ),
            (
                NodeInstall {
                    primary_disk: "sda".into(),
                    ..create_node()
                },
                "the Inventory's spec.primaryDisk \"sda\" is not a device path; write it like /dev/sda",
            ),
            (
                NodeInstall {
                    hostname: "Node_1".into(),
                    ..create_node()
                },
                "hostname \"Node_1\" is not a lower-case RFC 1123 host name: only lower-case letters, digits, '-' and '.' are allowed",
            ),
            (
                NodeInstall {
                    hostname: String::new(),
                    ..create_node()
                },
                "hostname \"\" is not a lower-case RFC 1123 host name: it is empty",
            ),
            (
                NodeInstall {
                    token: Secret::default(),
                    ..create_node()
                },
                "the cluster token is empty; the Cluster's status.token must be generated before its nodes are rendered",
            ),
            (
                NodeInstall {
                    os_password: Secret::default(),
                    ..create_node()
                },
                "the OS password is empty; the Inventory's status.generatedPassword must be generated before the node is rendered",
            ),
            (
                NodeInstall {
                    nameservers: vec!["1.1.1.1".into(), "dns.example".into()],
                    ..create_node()
                },
                "clusterConfig.nameservers[1] \"dns.example\" is not an IP address",
            ),
            (
                NodeInstall {
                    ssh_keys: vec![" ".into()],
                    ..create_node()
                },
                "clusterConfig.sshKeys[0] is empty; remove it or give the public key",
            ),
            (
                NodeInstall {
                    vlan_id: Some(4095),
                    ..create_node()
                },
                "clusterConfig.vlanID 4095 is outside 1..4094; use a VLAN ID, or 1 for none",
            ),
            (
                NodeInstall {
                    vlan_id: Some(0),
                    ..create_node()
                },
                "clusterConfig.vlanID 0 is outside 1..4094; use a VLAN ID, or 1 for none",
            ),
            (
                NodeInstall {
                    bond_options: Some(BTreeMap::from([("mode".to_owned(), "x'\ny".to_owned())])),
                    ..create_node()
                },
                "clusterConfig.bondOptions mode=\"x'\\ny\": bond options are written into the node's network configuration and must be letters, digits and . _ - + , : / only",
            ),
            (
                NodeInstall {
                    image_url: String::new(),
                    ..create_node()
                },
                "the Cluster's spec.imageURL is empty; set it to where the release artifacts are, e.g. https://releases.rancher.com/harvester",
            ),
            (
                NodeInstall {
                    image_url: "http://172.16.135.50:8080\nshell".into(),
                    ..create_node()
                },
                "the Cluster's spec.imageURL \"http://172.16.135.50:8080\\nshell\" cannot go into the iPXE script: a line break would start another iPXE command",
            ),
            (
                NodeInstall {
                    image_url: "http://m/h\u{7}".into(),
                    ..create_node()
                },
                "the Cluster's spec.imageURL \"http://m/h\\u{7}\" cannot go into the iPXE script: control characters are not allowed",
            ),
            (
                NodeInstall {
                    image_url: "http://m/h x=1".into(),
                    ..create_node()
                },
                "the Cluster's spec.imageURL \"http://m/h x=1\" cannot go into the iPXE script: whitespace would split the kernel command line",
            ),
            (
                NodeInstall {
                    image_url: "http://m/${net0/mac}".into(),
                    ..create_node()
                },
                "the Cluster's spec.imageURL \"http://m/${net0/mac}\" cannot go into the iPXE script: iPXE expands ${...} settings",
            ),
            (
                NodeInstall {
                    image_url: "ftp://m/harvester".into(),
                    ..create_node()
                },
                "the Cluster's spec.imageURL: the artifact mirror \"ftp://m/harvester\" must be http or https, not ftp",
            ),
        ];
        for (node, message) in cases {
            assert_eq!(err(node).to_string(), message);
        }
    }

    #[test]
    fn urls_only_the_documents_use() {
        // The config URL only matters to the script, the webhook URL only to the config.
        let node = NodeInstall {
            config_url: "http://10.0.0.1/c\nchain http://evil/x".into(),
            ..create_node()
        };
        assert_eq!(
            ipxe_script(&node).unwrap_err().to_string(),
            "the config URL \"http://10.0.0.1/c\\nchain http://evil/x\" cannot go into the iPXE script: a line break would start another iPXE command"
        );
        assert!(install_config(&node).is_ok());
        let node = NodeInstall {
            config_url: "http://10.0.0.1/it's".into(),
            ..create_node()
        };
        assert_eq!(
            ipxe_script(&node).unwrap_err().to_string(),
            "the config URL \"http://10.0.0.1/it's\" cannot go into the iPXE script: quotes would change how the kernel command line is split"
        );
        let node = NodeInstall {
            config_url: "/relative".into(),
            ..create_node()
        };
        assert!(matches!(
            ipxe_script(&node),
            Err(ProvisionError::Url {
                field: "the config URL",
                ..
            })
        ));

        let node = NodeInstall {
            webhook_url: "mailto:ops@example".into(),
            ..create_node()
        };
        assert_eq!(
            install_config(&node).unwrap_err().to_string(),
            "the webhook URL \"mailto:ops@example\" is not an absolute http(s) URL: the scheme is mailto"
        );
        assert!(ipxe_script(&node).is_ok());
    }

    #[test]
    fn installer_field_aliases() {
        for (key, field) in [
            ("serverUrl", "serverUrl"),
            ("server_url", "serverUrl"),
            ("serverurl", "serverUrl"),
            ("SERVERURL", "serverUrl"),
            ("hw_addr", "hwAddr"),
            ("ssh_authorized_key", "sshAuthorizedKeys"),
            ("webhook", "webhooks"),
            ("interface", "interfaces"),
        ] {
            assert!(names_field(key, field), "{key} → {field}");
        }
        assert!(!names_field("server", "serverUrl"));
        assert!(!names_field("ser_ver_url", "serverUrl"));
    }
}
