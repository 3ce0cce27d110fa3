//! The Harvester install config a joining node reads from its userdata
//! (`harvester.install.config_url`).
//!
//! Keys follow Harvester's documented config file: snake_case (`server_url`, `iso_url`,
//! `ssh_authorized_keys`, `management_interface`, `bond_options`, `default_route`), with the
//! interface key `hwAddr` as the docs write it. The installer's loader maps these onto its Go
//! fields whatever the casing, so they are read on every release. Only fields that are set are
//! written: no zero values.
//!
//! Two schemas ([`Schema`]):
//! - v1.0: `server_url` on port 8443, the management network under
//!   `install.networks.harvester-mgmt`.
//! - current (v1.1 and later): `scheme_version: 1`, `server_url` on port 443, the management
//!   network under `install.management_interface`.
//!
//! Two stages, as the seed's reinstall flow needs them: the *intermediate* config (first boot,
//! MACs unknown, no management network) and the *final* config (the MACs of the management
//! interfaces and the bond options merged in).

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use crate::port::{Port, PortKind};
use crate::secret::Secret;
use crate::version::{HarvesterVersion, Schema};

/// The first line Equinix Metal requires of userdata, and the installer strips.
pub const CLOUD_CONFIG_HEADER: &str = "#cloud-config\n";
/// The network name of the management interface in the v1.0 schema.
pub const V1_0_MGMT_NETWORK: &str = "harvester-mgmt";
/// The serial console of Equinix Metal servers (SOS), as the installer's `tty` wants it.
pub const EQUINIX_TTY: &str = "ttyS1,115200n8";
/// The install disk of Equinix Metal's c3/m3 plans.
pub const DEFAULT_DEVICE: &str = "/dev/sda";

/// Errors of rendering or merging a config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "management interface {name:?} is not a port of the device; ports that exist: {}; fix spec.managementInterface(s)",
        existing.join(", ")
    )]
    NoSuchInterface { name: String, existing: Vec<String> },
    #[error(
        "management interface {name:?} is a bond and has no MAC of its own; name its member ports instead ({})",
        members.join(", ")
    )]
    BondInterface { name: String, members: Vec<String> },
    #[error("management interface {name:?} has no MAC address reported by the provider yet")]
    NoMac { name: String },
    #[error(
        "management interface {name:?} has MAC {mac:?}, which is not six colon-separated hex octets"
    )]
    InvalidMac { name: String, mac: String },
    #[error("no management interface is named; set spec.managementInterface(s), e.g. [eth0]")]
    NoInterfaces,
    #[error("{field} must not be empty")]
    Missing { field: &'static str },
    #[error("bond option {key:?} is not a plain option name (letters, digits, '_' or '-')")]
    InvalidBondOption { key: String },
    #[error("the intermediate config is not YAML: {0}")]
    Parse(#[source] serde_yaml::Error),
    #[error("the intermediate config has no {0} mapping")]
    NotAMapping(&'static str),
    #[error("could not write the config as YAML: {0}")]
    Emit(#[source] serde_yaml::Error),
}

/// What a joining node's config is made of. `Debug` hides the token and the password.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinConfig {
    pub version: HarvesterVersion,
    /// The cluster VIP (host name, IPv4 or IPv6 address) the node joins.
    pub server: String,
    pub token: Secret,
    pub hostname: String,
    pub password: Secret,
    pub ssh_authorized_keys: Vec<String>,
    pub device: String,
    pub iso_url: String,
    pub tty: String,
}

impl JoinConfig {
    /// A join config with Equinix Metal's defaults (`/dev/sda`, `ttyS1,115200n8`).
    pub fn new(
        version: HarvesterVersion,
        server: impl Into<String>,
        token: Secret,
        hostname: impl Into<String>,
        password: Secret,
        iso_url: impl Into<String>,
    ) -> Self {
        Self {
            version,
            server: server.into(),
            token,
            hostname: hostname.into(),
            password,
            ssh_authorized_keys: Vec::new(),
            device: DEFAULT_DEVICE.to_owned(),
            iso_url: iso_url.into(),
            tty: EQUINIX_TTY.to_owned(),
        }
    }

    pub fn schema(&self) -> Schema {
        self.version.schema()
    }

    /// `https://<server>:<port>`, the port from the schema; IPv6 addresses get brackets.
    pub fn server_url(&self) -> String {
        let host = if self.server.contains(':') && !self.server.starts_with('[') {
            format!("[{}]", self.server)
        } else {
            self.server.clone()
        };
        format!("https://{host}:{}", self.schema().join_port())
    }

    /// The first boot's config: everything but the management network.
    pub fn render_intermediate(&self) -> Result<String, ConfigError> {
        emit(&self.document(None)?)
    }

    /// The install config with the management network.
    pub fn render_final(&self, mgmt: &ManagementNetwork) -> Result<String, ConfigError> {
        emit(&self.document(Some(mgmt))?)
    }

    fn document(&self, mgmt: Option<&ManagementNetwork>) -> Result<Mapping, ConfigError> {
        for (field, value) in [
            ("server", self.server.as_str()),
            ("token", self.token.expose()),
            ("hostname", self.hostname.as_str()),
        ] {
            if value.is_empty() {
                return Err(ConfigError::Missing { field });
            }
        }
        let schema = self.schema();
        let mut doc = Mapping::new();
        if schema == Schema::Current {
            doc.insert("scheme_version".into(), Value::from(1));
        }
        doc.insert("server_url".into(), self.server_url().into());
        doc.insert("token".into(), self.token.expose().into());

        let mut os = Mapping::new();
        os.insert("hostname".into(), self.hostname.clone().into());
        if !self.password.is_empty() {
            os.insert("password".into(), self.password.expose().into());
        }
        if !self.ssh_authorized_keys.is_empty() {
            os.insert(
                "ssh_authorized_keys".into(),
                Value::Sequence(
                    self.ssh_authorized_keys
                        .iter()
                        .map(|k| k.clone().into())
                        .collect(),
                ),
            );
        }
        doc.insert("os".into(), Value::Mapping(os));

        let mut install = Mapping::new();
        install.insert("mode".into(), "join".into());
        if let Some(mgmt) = mgmt {
            insert_management(&mut install, schema, mgmt)?;
        }
        for (key, value) in [
            ("device", &self.device),
            ("iso_url", &self.iso_url),
            ("tty", &self.tty),
        ] {
            if !value.is_empty() {
                install.insert(key.into(), value.clone().into());
            }
        }
        install.insert("automatic".into(), true.into());
        doc.insert("install".into(), Value::Mapping(install));
        Ok(doc)
    }
}

/// The management network: the MACs of its interfaces (one or more; two or more make a bond)
/// and the bond options (`mode`, `miimon`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagementNetwork {
    pub macs: Vec<String>,
    pub bond_options: BTreeMap<String, String>,
}

impl ManagementNetwork {
    /// Looks up the MAC of each named management interface among the device's ports.
    /// Errors name the interface and list the ports that exist.
    pub fn from_ports(
        interfaces: &[String],
        ports: &[Port],
        bond_options: BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        if interfaces.is_empty() {
            return Err(ConfigError::NoInterfaces);
        }
        let mut macs = Vec::with_capacity(interfaces.len());
        for name in interfaces {
            let port = ports.iter().find(|p| &p.name == name).ok_or_else(|| {
                ConfigError::NoSuchInterface {
                    name: name.clone(),
                    existing: ports.iter().map(|p| p.name.clone()).collect(),
                }
            })?;
            if port.kind == PortKind::Bond {
                return Err(ConfigError::BondInterface {
                    name: name.clone(),
                    members: ports
                        .iter()
                        .filter(|p| p.kind == PortKind::Physical)
                        .map(|p| p.name.clone())
                        .collect(),
                });
            }
            let mac = port
                .mac
                .as_deref()
                .filter(|m| !m.is_empty())
                .ok_or_else(|| ConfigError::NoMac { name: name.clone() })?;
            if !is_mac(mac) {
                return Err(ConfigError::InvalidMac {
                    name: name.clone(),
                    mac: mac.to_owned(),
                });
            }
            macs.push(mac.to_ascii_lowercase());
        }
        for key in bond_options.keys() {
            if key.is_empty()
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(ConfigError::InvalidBondOption { key: key.clone() });
            }
        }
        Ok(Self { macs, bond_options })
    }
}

fn is_mac(mac: &str) -> bool {
    let octets: Vec<&str> = mac.split(':').collect();
    octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn network_value(mgmt: &ManagementNetwork) -> Value {
    let mut net = Mapping::new();
    let interfaces = mgmt
        .macs
        .iter()
        .map(|mac| {
            let mut i = Mapping::new();
            i.insert("hwAddr".into(), mac.clone().into());
            Value::Mapping(i)
        })
        .collect();
    net.insert("interfaces".into(), Value::Sequence(interfaces));
    net.insert("method".into(), "dhcp".into());
    net.insert("default_route".into(), true.into());
    if !mgmt.bond_options.is_empty() {
        let opts = mgmt
            .bond_options
            .iter()
            .map(|(k, v)| (Value::from(k.clone()), Value::from(v.clone())))
            .collect();
        net.insert("bond_options".into(), Value::Mapping(opts));
    }
    Value::Mapping(net)
}

/// Puts the management network into an `install` mapping at the schema's place, replacing
/// whatever network section was there (in any casing the original wrote).
fn insert_management(
    install: &mut Mapping,
    schema: Schema,
    mgmt: &ManagementNetwork,
) -> Result<(), ConfigError> {
    for stale in [
        "networks",
        "management_interface",
        "managementInterface",
        "managementinterface",
    ] {
        install.remove(stale);
    }
    let net = network_value(mgmt);
    match schema {
        Schema::V1_0 => {
            let mut networks = Mapping::new();
            networks.insert(V1_0_MGMT_NETWORK.into(), net);
            install.insert("networks".into(), Value::Mapping(networks));
        }
        Schema::Current => {
            install.insert("management_interface".into(), net);
        }
    }
    Ok(())
}

/// The seed flow's merge: takes the intermediate config stored on the Instance (ingot's, or
/// the original's lower-cased one), puts the management network in, and writes it back with
/// the `#cloud-config` header. Every other key is kept as it was.
pub fn finalize_userdata(
    intermediate: &str,
    schema: Schema,
    mgmt: &ManagementNetwork,
) -> Result<String, ConfigError> {
    let body: String = intermediate
        .lines()
        .filter(|l| !matches!(l.trim_end(), "#cloud-config" | "#!cloud-config"))
        .collect::<Vec<_>>()
        .join("\n");
    let value: Value = serde_yaml::from_str(&body).map_err(ConfigError::Parse)?;
    let mut doc = match value {
        Value::Mapping(m) => m,
        Value::Null => Mapping::new(),
        _ => return Err(ConfigError::NotAMapping("top-level")),
    };
    let install = doc
        .entry("install".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let install = install
        .as_mapping_mut()
        .ok_or(ConfigError::NotAMapping("install"))?;
    insert_management(install, schema, mgmt)?;
    emit(&doc)
}

fn emit(doc: &Mapping) -> Result<String, ConfigError> {
    let body = serde_yaml::to_string(doc).map_err(ConfigError::Emit)?;
    Ok(format!("{CLOUD_CONFIG_HEADER}{body}"))
}
