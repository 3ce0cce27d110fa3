//! The iPXE scripts of the two boot flows, rendered per Instance.
//!
//! **Seed flow (reinstall)**: the device is created with [`SHELL_SCRIPT`], which stops in an
//! iPXE shell. Metal marks a `custom_ipxe` device active once iPXE has been served, so its
//! ports and MACs can be read; the final config is written to userdata and the device is
//! reinstalled with the install script.
//!
//! **Single boot** (opt-in, Harvester v1.1 and later): the install script passes the MACs of
//! the management interfaces as kernel arguments through iPXE's `${netN/mac}`, so the device
//! installs on its first boot with the intermediate config as userdata, and no reinstall is
//! needed. Management interface `ethN` maps to iPXE's `netN`: Metal's servers enumerate their
//! NICs in the same order in iPXE and in Linux with `net.ifnames=1`'s eth naming. A bond
//! (`bond0`) has no MAC of its own and cannot be a management interface here.

use std::collections::BTreeMap;

use url::Url;

use crate::artifacts::Artifacts;
use crate::version::{HarvesterVersion, Schema};

/// The first boot of the seed flow: stop in an iPXE shell.
pub const SHELL_SCRIPT: &str = "#!ipxe\nshell\n";

/// Where Equinix Metal serves a device's userdata to the device itself.
pub const EQUINIX_USERDATA_URL: &str = "https://metadata.platformequinix.com/userdata";

/// The serial console of Metal's servers, as a kernel argument.
pub const EQUINIX_CONSOLE: &str = "ttyS1,115200";

/// A script that cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpxeError {
    #[error(
        "the single-boot flow needs Harvester v1.1 or later (management_interface kernel arguments); {version} uses the reinstall flow"
    )]
    SingleBootUnsupported { version: String },
    #[error(
        "management interface {name:?} is a bond; the single-boot flow passes NIC MACs, so name the bond's member ports (e.g. eth0, eth1)"
    )]
    BondAsManagementInterface { name: String },
    #[error(
        "management interface {name:?} is not an ethN port, so it has no iPXE netN counterpart; name ports eth0, eth1, ..."
    )]
    UnmappableInterface { name: String },
    #[error("the single-boot flow needs at least one management interface, e.g. eth0")]
    NoManagementInterface,
    #[error(
        "bond option {key}={value:?} cannot go on a kernel command line; use letters, digits and . _ - + only"
    )]
    InvalidBondOption { key: String, value: String },
    #[error("{what} URL {value:?} cannot go on a kernel command line (whitespace or quotes)")]
    UnsafeUrl { what: &'static str, value: String },
}

/// Maps a management interface name to the iPXE network device that has its MAC:
/// `eth3` → `net3`. Refuses bonds and names without an index.
pub fn ipxe_netdev(interface: &str) -> Result<String, IpxeError> {
    if interface.starts_with("bond") {
        return Err(IpxeError::BondAsManagementInterface {
            name: interface.to_owned(),
        });
    }
    match interface.strip_prefix("eth") {
        Some(n)
            if !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0')) =>
        {
            Ok(format!("net{n}"))
        }
        _ => Err(IpxeError::UnmappableInterface {
            name: interface.to_owned(),
        }),
    }
}

/// The management network passed on the kernel command line (single boot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleBoot {
    /// Metal port names, `ethN`.
    pub interfaces: Vec<String>,
    pub bond_options: BTreeMap<String, String>,
}

/// The install boot of one Instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallBoot {
    pub artifacts: Artifacts,
    /// Where the installer fetches its config: Metal's userdata URL, or one ingot serves.
    pub config_url: Url,
    /// `Some` for the single-boot flow.
    pub single_boot: Option<SingleBoot>,
}

impl InstallBoot {
    /// The seed flow's install boot: the config comes from Metal's userdata.
    pub fn reinstall(artifacts: Artifacts) -> Result<Self, url::ParseError> {
        Ok(Self {
            artifacts,
            config_url: Url::parse(EQUINIX_USERDATA_URL)?,
            single_boot: None,
        })
    }

    fn version(&self) -> &HarvesterVersion {
        &self.artifacts.version
    }

    /// The kernel command line after the kernel URL.
    pub fn kernel_args(&self) -> Result<Vec<String>, IpxeError> {
        let a = &self.artifacts;
        for (what, url) in [
            ("rootfs", &a.rootfs),
            ("kernel", &a.kernel),
            ("initrd", &a.initrd),
            ("config", &self.config_url),
        ] {
            if url.as_str().contains(['"', '\'', ' ', '\t', '\n']) {
                return Err(IpxeError::UnsafeUrl {
                    what,
                    value: url.to_string(),
                });
            }
        }
        let current = self.version().schema() == Schema::Current;
        let mut args = Vec::new();
        if current {
            args.push(format!("initrd={}", a.initrd_name()));
        }
        args.extend(
            [
                "ip=dhcp",
                "net.ifnames=1",
                "rd.cos.disable",
                "rd.noverifyssl",
            ]
            .map(String::from),
        );
        args.push(format!("root=live:{}", a.rootfs));
        if current {
            args.push("rd.net.timeout.dhcp=100".into());
            args.push("rd.net.dhcp.retry=10".into());
        }
        if let Some(single) = &self.single_boot {
            args.extend(single_boot_args(self.version(), single)?);
        }
        args.push(format!("console={EQUINIX_CONSOLE}"));
        args.push("harvester.install.automatic=true".into());
        if current {
            args.push("harvester.install.skipchecks=true".into());
        }
        args.push(r#"boot_cmd="echo include_ping_test=yes >> /etc/conf.d/net-online""#.into());
        args.push(format!("harvester.install.config_url={}", self.config_url));
        Ok(args)
    }

    /// The whole script: `dhcp`, `kernel ...`, `initrd ...`, `boot`.
    pub fn script(&self) -> Result<String, IpxeError> {
        let args = self.kernel_args()?.join(" ");
        Ok(format!(
            "#!ipxe\ndhcp\nkernel {} {args}\ninitrd {}\nboot\n",
            self.artifacts.kernel, self.artifacts.initrd
        ))
    }
}

/// `harvester.install.management_interface.*` arguments: one `interfaces="hwAddr:${netN/mac}"`
/// per interface (the installer's command-line reader collects a repeated key into a list),
/// `method=dhcp`, and one `bond_options.<key>=<value>` per bond option.
fn single_boot_args(
    version: &HarvesterVersion,
    single: &SingleBoot,
) -> Result<Vec<String>, IpxeError> {
    if !version.supports_single_boot() {
        return Err(IpxeError::SingleBootUnsupported {
            version: version.to_string(),
        });
    }
    if single.interfaces.is_empty() {
        return Err(IpxeError::NoManagementInterface);
    }
    const PREFIX: &str = "harvester.install.management_interface";
    let mut args = Vec::new();
    for name in &single.interfaces {
        let net = ipxe_netdev(name)?;
        args.push(format!("{PREFIX}.interfaces=\"hwAddr:${{{net}/mac}}\""));
    }
    args.push(format!("{PREFIX}.method=dhcp"));
    for (key, value) in &single.bond_options {
        let plain = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
        };
        if !plain(key) || !plain(value) {
            return Err(IpxeError::InvalidBondOption {
                key: key.clone(),
                value: value.clone(),
            });
        }
        args.push(format!("{PREFIX}.bond_options.{key}={value}"));
    }
    Ok(args)
}
