//! The Harvester installer's side: the kernel command line and the remote config merged into
//! one config, and the checks an automatic join install makes before it can succeed.
//!
//! Field names are matched the way the installer's loader does (its fuzzy mapper): case does
//! not matter and `_` is ignored, so `server_url`, `serverUrl` and `serverurl` are one field,
//! as are `hwAddr` and `hwaddr`. Keys of maps (network names, bond options) are kept as written.

use serde_json::{Map, Value};
use url::Url;

/// The config schema of the installer release that runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Schema {
    /// Harvester v1.0: `install.networks.harvester-mgmt`, join port 8443.
    #[serde(rename = "v1.0")]
    V1_0,
    /// Harvester v1.1 and later: `scheme_version: 1`, `install.management_interface`, port 443.
    #[serde(rename = "current")]
    Current,
}

impl Schema {
    pub fn join_port(self) -> u16 {
        match self {
            Schema::V1_0 => 8443,
            Schema::Current => 443,
        }
    }

    /// The schema of a release name such as `v1.0.3` or `v1.4.2-rc1`; `None` if it is not one.
    pub fn of_version(version: &str) -> Option<Schema> {
        let v = version.strip_prefix('v')?;
        let mut it = v.split(['.', '-']);
        let major: u32 = it.next()?.parse().ok()?;
        let minor: u32 = it.next()?.parse().ok()?;
        Some(if major == 1 && minor == 0 {
            Schema::V1_0
        } else {
            Schema::Current
        })
    }
}

/// What the cluster expects of a joining node.
#[derive(Clone)]
pub struct Expected {
    pub token: String,
    /// The VIP (host of the join URL).
    pub host: String,
    /// A port the cluster listens on, if not the schema's.
    pub port: Option<u16>,
    /// The installer's schema; `None`: from the kernel URL's release, else from the config.
    pub schema: Option<Schema>,
}

impl std::fmt::Debug for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expected")
            .field("token", &"***")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("schema", &self.schema)
            .finish()
    }
}

/// The machine being installed.
#[derive(Debug, Clone)]
pub struct Machine<'a> {
    pub hostname: &'a str,
    /// `(port name, MAC)` of the NICs, eth0 first.
    pub nics: &'a [(String, String)],
}

/// Why the installer stops. Never contains the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the kernel command line has no harvester.install.automatic=true: the installer waits at the console for input"
    )]
    NotAutomatic,
    #[error(
        "the kernel command line has no harvester.install.config_url and carries no config itself"
    )]
    NoConfigUrl,
    #[error("fetching the config from {url}: {message}")]
    ConfigFetch { url: String, message: String },
    #[error(
        "the config URL {url} cannot be reached from the emulator (only the metadata userdata URL and loopback http URLs are served)"
    )]
    UnreachableConfigUrl { url: String },
    #[error(
        "the device's userdata does not start with #cloud-config, which Metal requires of userdata"
    )]
    NotCloudConfig,
    #[error("the config is not a YAML mapping: {0}")]
    BadYaml(String),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("install.mode is {0:?}: the installer creates a cluster (create) or joins one (join)")]
    UnknownMode(String),
    #[error("install.mode join needs {0}")]
    Missing(&'static str),
    #[error("install.mode create needs {0}")]
    CreateMissing(&'static str),
    #[error("install.vip {vip:?}: {message}")]
    WrongVip { vip: String, message: String },
    #[error("the kernel cannot bring up the network: {0}")]
    KernelNetwork(String),
    #[error("the join token does not match the cluster's token")]
    WrongToken,
    #[error("server_url {url:?}: {message}")]
    WrongServer { url: String, message: String },
    #[error("management interface hwAddr {mac} is not a NIC of this machine (its NICs: {nics})")]
    UnknownMac { mac: String, nics: String },
    #[error("management interface {name:?} is not a NIC of this machine (its NICs: {nics})")]
    UnknownInterface { name: String, nics: String },
    #[error(
        "management interface {0} is listed twice (the kernel command line and the config are merged by appending lists)"
    )]
    DuplicateInterface(String),
    #[error("no management interface: {0}")]
    NoManagementInterface(String),
}

/// A config the installer accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub schema: Schema,
    /// The name the node joins under (`os.hostname`).
    pub node_name: String,
    /// Things a real install would get past but that are worth knowing.
    pub warnings: Vec<String>,
}

/// Where the installer's config comes from, after the command line has been read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    MetadataUserdata,
    Url(String),
    None,
}

/// The kernel command line as the installer reads it.
#[derive(Debug, Clone)]
pub struct Cmdline {
    pub automatic: bool,
    pub config_url: Option<String>,
    /// The `harvester.*` arguments as a config tree (normalized names).
    pub config: Value,
    /// The release named by the kernel URL (`.../harvester-v1.3.2-vmlinuz-amd64`).
    pub release: Option<String>,
}

pub const METADATA_USERDATA_URL: &str = "https://metadata.platformequinix.com/userdata";

/// Field names whose values are maps with free keys.
const MAP_FIELDS: &[&str] = &[
    "networks",
    "bondoptions",
    "sysctls",
    "environment",
    "labels",
];

fn norm(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Normalizes field names of a config tree (not the keys of map fields).
fn normalize(v: Value, free_keys: bool) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let key = if free_keys { k } else { norm(&k) };
                let child_free = !free_keys && MAP_FIELDS.contains(&key.as_str());
                out.insert(key, normalize(v, child_free));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(|v| normalize(v, false)).collect()),
        other => other,
    }
}

/// Reads the kernel command line of the install boot.
pub fn read_cmdline(kernel: &str, params: &[(String, Option<String>)]) -> Cmdline {
    let mut config = Value::Object(Map::new());
    for (key, value) in params {
        let Some(path) = key.strip_prefix("harvester.") else {
            continue;
        };
        let value = value.clone().unwrap_or_default();
        let parts: Vec<&str> = path.split('.').collect();
        let leaf_is_interfaces = parts.last().is_some_and(|p| norm(p) == "interfaces");
        let leaf: Value = if leaf_is_interfaces {
            // `hwAddr:<mac>` (or `name:<nic>`) is one interface.
            let mut iface = Map::new();
            if let Some((k, v)) = value.split_once(':') {
                iface.insert(norm(k), Value::String(v.to_owned()));
            }
            Value::Object(iface)
        } else {
            Value::String(value)
        };
        insert_path(&mut config, &parts, leaf, leaf_is_interfaces);
    }
    let config = normalize(config, false);
    let automatic = get(&config, &["install", "automatic"]).is_some_and(truthy);
    let config_url = get(&config, &["install", "configurl"])
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    Cmdline {
        automatic,
        config_url,
        config,
        release: release_of(kernel),
    }
}

fn insert_path(tree: &mut Value, parts: &[&str], leaf: Value, list: bool) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    let Value::Object(m) = tree else {
        return;
    };
    if rest.is_empty() {
        if list {
            match m.get_mut(*first) {
                Some(Value::Array(a)) => a.push(leaf),
                _ => {
                    m.insert((*first).to_owned(), Value::Array(vec![leaf]));
                }
            }
        } else {
            m.insert((*first).to_owned(), leaf);
        }
        return;
    }
    let child = m
        .entry((*first).to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !child.is_object() {
        *child = Value::Object(Map::new());
    }
    insert_path(child, rest, leaf, list);
}

/// `harvester-v1.3.2-vmlinuz-amd64` → `v1.3.2`.
fn release_of(kernel: &str) -> Option<String> {
    let file = kernel.rsplit('/').next()?;
    let rest = file.strip_prefix("harvester-")?;
    let end = rest.find("-vmlinuz")?;
    let v = &rest[..end];
    Schema::of_version(v).map(|_| v.to_owned())
}

/// Whether the merged config asks for an unattended install.
pub fn is_automatic(config: &Value) -> bool {
    get(config, &["install", "automatic"]).is_some_and(truthy)
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn get_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Parses the remote config (YAML, `#cloud-config` first when it comes from Metal's userdata).
pub fn parse_remote(text: &str, from_userdata: bool) -> Result<Value, Refusal> {
    if from_userdata && !text.trim_start().starts_with("#cloud-config") {
        return Err(Refusal::NotCloudConfig);
    }
    let v: Value = serde_yaml::from_str(text).map_err(|e| Refusal::BadYaml(e.to_string()))?;
    if !v.is_object() {
        return Err(Refusal::BadYaml("the document is not a mapping".into()));
    }
    Ok(normalize(v, false))
}

/// The installer's merge: the command line over the remote config. A non-empty command-line
/// value wins, maps merge, lists are appended (command line first).
pub fn merge(cmdline: &Value, remote: &Value) -> Value {
    match (cmdline, remote) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = b.clone();
            for (k, av) in a {
                let merged = match b.get(k) {
                    Some(bv) => merge(av, bv),
                    None => av.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(a), Value::Array(b)) => {
            Value::Array(a.iter().chain(b.iter()).cloned().collect())
        }
        (Value::String(s), other) if s.is_empty() => other.clone(),
        (Value::Null, other) => other.clone(),
        (a, _) => a.clone(),
    }
}

/// The checks of an automatic join install.
pub fn check(
    config: &Value,
    release: Option<&str>,
    expected: &Expected,
    machine: &Machine<'_>,
) -> Result<Accepted, Refusal> {
    let mut warnings = Vec::new();
    let invalid = |field: &str, message: String| Refusal::Invalid {
        field: field.to_owned(),
        message,
    };
    let scheme_version = get(config, &["schemeversion"]).map(|v| match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let has_mgmt_iface = get(config, &["install", "managementinterface"]).is_some();
    let schema = expected
        .schema
        .or_else(|| release.and_then(Schema::of_version))
        .unwrap_or(if scheme_version.is_some() || has_mgmt_iface {
            Schema::Current
        } else {
            Schema::V1_0
        });
    if let Some(sv) = &scheme_version {
        match schema {
            Schema::Current if sv != "1" => {
                return Err(invalid(
                    "scheme_version",
                    format!("{sv} is not a schema this installer reads (1)"),
                ));
            }
            Schema::V1_0 => warnings.push(format!(
                "scheme_version {sv} is ignored by a v1.0 installer"
            )),
            _ => {}
        }
    }

    let mode = get_str(config, &["install", "mode"]).unwrap_or_default();
    match mode {
        "join" => {
            let server_url =
                get_str(config, &["serverurl"]).ok_or(Refusal::Missing("server_url"))?;
            let token = get_str(config, &["token"]).ok_or(Refusal::Missing("token"))?;
            check_token(token, expected)?;
            check_server_url(server_url, schema, expected)?;
        }
        "create" => {
            let token = get_str(config, &["token"]).ok_or(Refusal::CreateMissing("token"))?;
            check_token(token, expected)?;
            check_vip(config, expected, machine)?;
        }
        "" => {
            return Err(invalid(
                "install.mode",
                "missing: an automatic install needs create or join".into(),
            ));
        }
        other => return Err(Refusal::UnknownMode(other.to_owned())),
    }

    // The management network.
    let (field, network) = match schema {
        Schema::Current => (
            "install.management_interface",
            get(config, &["install", "managementinterface"]),
        ),
        Schema::V1_0 => (
            "install.networks.harvester-mgmt",
            get(config, &["install", "networks", "harvester-mgmt"]),
        ),
    };
    let Some(network) = network else {
        let hint = match schema {
            Schema::Current if get(config, &["install", "networks"]).is_some() => {
                "; install.networks is the v1.0 schema, which this installer does not read"
            }
            Schema::V1_0 if has_mgmt_iface => {
                "; install.management_interface is the v1.1+ schema, which a v1.0 installer does not read"
            }
            _ => "",
        };
        return Err(Refusal::NoManagementInterface(format!(
            "{field} is missing{hint}"
        )));
    };
    let interfaces = network
        .get("interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if interfaces.is_empty() {
        return Err(Refusal::NoManagementInterface(format!(
            "{field}.interfaces is empty"
        )));
    }
    let nics = machine
        .nics
        .iter()
        .map(|(n, m)| format!("{n} {m}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut seen = Vec::new();
    for iface in &interfaces {
        let mac = iface
            .get("hwaddr")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = iface
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let nic = if !mac.is_empty() {
            machine
                .nics
                .iter()
                .find(|(_, m)| m.eq_ignore_ascii_case(mac))
                .ok_or_else(|| Refusal::UnknownMac {
                    mac: mac.to_owned(),
                    nics: nics.clone(),
                })?
        } else if !name.is_empty() {
            machine
                .nics
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| Refusal::UnknownInterface {
                    name: name.to_owned(),
                    nics: nics.clone(),
                })?
        } else {
            return Err(invalid(
                &format!("{field}.interfaces"),
                "an interface without hwAddr or name (an empty ${netN/mac}?)".into(),
            ));
        };
        if seen.contains(&nic.0) {
            return Err(Refusal::DuplicateInterface(format!("{} {}", nic.0, nic.1)));
        }
        seen.push(nic.0.clone());
    }
    match network
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "dhcp" => {}
        "static" => check_static(network, field)?,
        "" => {
            return Err(invalid(
                &format!("{field}.method"),
                "missing (dhcp or static)".into(),
            ));
        }
        other => {
            return Err(invalid(
                &format!("{field}.method"),
                format!("{other:?} is not dhcp or static"),
            ));
        }
    }

    if let Some(vlan) = network.get("vlanid") {
        let id = match vlan {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse::<u64>().ok(),
            _ => None,
        };
        if id.is_none_or(|id| id > 4094) {
            return Err(invalid(
                &format!("{field}.vlan_id"),
                format!("{vlan} is not a VLAN ID (0 for none, 1 to 4094)"),
            ));
        }
    }

    if get_str(config, &["install", "device"]).is_none() {
        return Err(invalid(
            "install.device",
            "missing: no disk to install to".into(),
        ));
    }
    match get_str(config, &["install", "isourl"]) {
        None => {
            return Err(invalid(
                "install.iso_url",
                "missing: a PXE install needs the ISO".into(),
            ));
        }
        Some(iso) => match Url::parse(iso) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => {
                return Err(invalid(
                    "install.iso_url",
                    format!("{iso:?} is not an http(s) URL"),
                ));
            }
        },
    }
    let node_name = match get_str(config, &["os", "hostname"]) {
        Some(h) => {
            if h != machine.hostname {
                warnings.push(format!(
                    "os.hostname {h:?} differs from the device hostname {:?}: the node joins as {h:?}",
                    machine.hostname
                ));
            }
            h.to_owned()
        }
        None => {
            warnings.push(format!(
                "os.hostname is missing: the node takes the DHCP hostname {:?}",
                machine.hostname
            ));
            machine.hostname.to_owned()
        }
    };
    if get_str(config, &["os", "password"]).is_none() {
        warnings.push("os.password is missing: no console login on the node".into());
    }
    Ok(Accepted {
        schema,
        node_name,
        warnings,
    })
}

/// The checks of an automatic create install (servers behind BMCs, `crate::servers`): the
/// node starts a new cluster at `install.vip`, which must be `vip` (where the emulated cluster
/// answers), with its own `token`; the management network, disk, ISO and hostname are checked
/// as for a join (to itself).
pub fn check_create(
    config: &Value,
    release: Option<&str>,
    vip: &str,
    machine: &Machine<'_>,
) -> Result<Accepted, Refusal> {
    let token = get_str(config, &["token"]).ok_or(Refusal::Invalid {
        field: "token".into(),
        message: "missing: install.mode create needs the new cluster's token".into(),
    })?;
    let found = get_str(config, &["install", "vip"]).ok_or(Refusal::Invalid {
        field: "install.vip".into(),
        message: "missing: install.mode create needs the cluster's address".into(),
    })?;
    if found != vip {
        return Err(Refusal::Invalid {
            field: "install.vip".into(),
            message: format!("{found}: the new cluster's address here is {vip}"),
        });
    }
    match get_str(config, &["install", "vipmode"]).unwrap_or("static") {
        "static" => {}
        other => {
            return Err(Refusal::Invalid {
                field: "install.vip_mode".into(),
                message: format!("{other:?}: only static is emulated (the VIP is fixed)"),
            });
        }
    }
    let current = get(config, &["schemeversion"]).is_some()
        || get(config, &["install", "managementinterface"]).is_some();
    let schema = release.and_then(Schema::of_version).unwrap_or(if current {
        Schema::Current
    } else {
        Schema::V1_0
    });
    if !config.is_object() || !matches!(config.get("install"), Some(Value::Object(_))) {
        return Err(Refusal::BadYaml("install is not a mapping".into()));
    }
    let mut as_join = config.clone();
    as_join["install"]["mode"] = Value::from("join");
    as_join["serverurl"] = Value::from(format!("https://{vip}:{}", schema.join_port()));
    let expected = Expected {
        token: token.to_owned(),
        host: vip.to_owned(),
        port: None,
        schema: None,
    };
    check(&as_join, release, &expected, machine)
}

fn check_token(token: &str, expected: &Expected) -> Result<(), Refusal> {
    if token == expected.token {
        Ok(())
    } else {
        Err(Refusal::WrongToken)
    }
}

/// A creating node's VIP: the cluster's address, static or by DHCP for a NIC of this machine.
fn check_vip(config: &Value, expected: &Expected, machine: &Machine<'_>) -> Result<(), Refusal> {
    let vip = get_str(config, &["install", "vip"]).ok_or(Refusal::CreateMissing("install.vip"))?;
    let wrong = |message: String| Refusal::WrongVip {
        vip: vip.to_owned(),
        message,
    };
    let want = expected.host.trim_start_matches('[').trim_end_matches(']');
    if vip != want {
        return Err(wrong(format!("the cluster's address is {want}")));
    }
    match get_str(config, &["install", "vipmode"]).unwrap_or_default() {
        "static" => {
            if vip.parse::<std::net::IpAddr>().is_err() {
                return Err(wrong("vip_mode static needs an IP address".into()));
            }
        }
        "dhcp" => {
            let hw = get_str(config, &["install", "viphwaddr"]).unwrap_or_default();
            if !machine.nics.iter().any(|(_, m)| m.eq_ignore_ascii_case(hw)) {
                return Err(wrong(format!(
                    "vip_mode dhcp needs vip_hw_addr, a MAC of this machine; it is {hw:?}"
                )));
            }
        }
        "" => return Err(Refusal::CreateMissing("install.vip_mode (static or dhcp)")),
        other => return Err(wrong(format!("vip_mode {other:?} is not static or dhcp"))),
    }
    Ok(())
}

fn ipv4_field(
    network: &Value,
    field: &str,
    key: &str,
    name: &str,
) -> Result<std::net::Ipv4Addr, Refusal> {
    let raw = network.get(key).and_then(Value::as_str).unwrap_or_default();
    let at = format!("{field}.{name}");
    if raw.is_empty() {
        return Err(Refusal::Invalid {
            field: at,
            message: "required with method static".into(),
        });
    }
    raw.parse().map_err(|_| Refusal::Invalid {
        field: at,
        message: format!("{raw:?} is not an IPv4 address"),
    })
}

/// A static management network: an address, a contiguous netmask, and a gateway inside the
/// network (else the node has no route out).
fn check_static(network: &Value, field: &str) -> Result<(), Refusal> {
    let ip = ipv4_field(network, field, "ip", "ip")?;
    let mask = ipv4_field(network, field, "subnetmask", "subnet_mask")?;
    let gateway = ipv4_field(network, field, "gateway", "gateway")?;
    let bits = u32::from(mask);
    if bits.leading_ones() + bits.trailing_zeros() != 32 {
        return Err(Refusal::Invalid {
            field: format!("{field}.subnet_mask"),
            message: format!("{mask} is not a contiguous netmask"),
        });
    }
    if u32::from(ip) & bits != u32::from(gateway) & bits {
        return Err(Refusal::Invalid {
            field: format!("{field}.gateway"),
            message: format!("{gateway} is outside the network {ip}/{mask}: no route out"),
        });
    }
    Ok(())
}

/// The network dracut brings up from the kernel command line before the installer runs:
/// `ifname=<name>:<mac>` must name a NIC of this machine, `vlan=<name>:<parent>` a parent it
/// knows, and a static `ip=<addr>::<gw>:<mask>:<host>:<iface>:off` valid addresses and an
/// interface it knows (a NIC's name, an `ifname=` or a `vlan=` name).
pub fn check_kernel_network(
    params: &[(String, Option<String>)],
    machine: &Machine<'_>,
) -> Result<(), Refusal> {
    let bad = |m: String| Refusal::KernelNetwork(m);
    let nics = machine
        .nics
        .iter()
        .map(|(n, m)| format!("{n} {m}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut known: Vec<String> = machine.nics.iter().map(|(n, _)| n.clone()).collect();
    for (key, value) in params {
        if key == "ifname" {
            let value = value.as_deref().unwrap_or_default();
            let Some((name, mac)) = value.split_once(':') else {
                return Err(bad(format!("ifname={value} is not <name>:<mac>")));
            };
            if !machine
                .nics
                .iter()
                .any(|(_, m)| m.eq_ignore_ascii_case(mac))
            {
                return Err(bad(format!(
                    "ifname={value}: no NIC of this machine has MAC {mac} (its NICs: {nics})"
                )));
            }
            known.push(name.to_owned());
        }
    }
    for (key, value) in params {
        if key == "vlan" {
            let value = value.as_deref().unwrap_or_default();
            let Some((name, parent)) = value.split_once(':') else {
                return Err(bad(format!("vlan={value} is not <name>:<parent>")));
            };
            if !known.iter().any(|k| k == parent) {
                return Err(bad(format!(
                    "vlan={value}: no interface {parent:?} (name it with ifname=<name>:<mac>)"
                )));
            }
            known.push(name.to_owned());
        }
    }
    for (key, value) in params {
        let value = value.as_deref().unwrap_or_default();
        if key != "ip" || !value.contains(':') {
            continue;
        }
        let parts: Vec<&str> = value.split(':').collect();
        if parts.len() < 7 {
            return Err(bad(format!(
                "ip={value} is not <address>::<gateway>:<netmask>:<hostname>:<interface>:<autoconf>"
            )));
        }
        let addr = |what: &str, raw: &str| -> Result<std::net::Ipv4Addr, Refusal> {
            raw.parse().map_err(|_| {
                bad(format!(
                    "ip={value}: the {what} {raw:?} is not an IPv4 address"
                ))
            })
        };
        addr("address", parts[0])?;
        if !parts[2].is_empty() {
            addr("gateway", parts[2])?;
        }
        let mask = addr("netmask", parts[3])?;
        let bits = u32::from(mask);
        if bits.leading_ones() + bits.trailing_zeros() != 32 {
            return Err(bad(format!(
                "ip={value}: the netmask {mask} is not contiguous"
            )));
        }
        let iface = parts[5];
        if !known.iter().any(|k| k == iface) {
            return Err(bad(format!(
                "ip={value}: no interface {iface:?} (its NICs: {nics}; name one with ifname=<name>:<mac> or vlan=<name>:<parent>)"
            )));
        }
        if !matches!(parts[6], "off" | "none") {
            return Err(bad(format!(
                "ip={value}: a static address ends in :off or :none, not :{}",
                parts[6]
            )));
        }
    }
    Ok(())
}

fn check_server_url(raw: &str, schema: Schema, expected: &Expected) -> Result<(), Refusal> {
    let wrong = |message: String| Refusal::WrongServer {
        url: raw.to_owned(),
        message,
    };
    let url = Url::parse(raw).map_err(|e| wrong(format!("not a URL: {e}")))?;
    if url.scheme() != "https" {
        return Err(wrong("the join URL is https".into()));
    }
    let host = url.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let want_host = expected.host.trim_start_matches('[').trim_end_matches(']');
    if host != want_host {
        return Err(wrong(format!("the cluster's address is {want_host}")));
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let schema_port = schema.join_port();
    if port != schema_port {
        let release = match schema {
            Schema::V1_0 => "a v1.0 node joins on 8443 (rancherd)",
            Schema::Current => "a v1.1+ node joins on 443",
        };
        return Err(wrong(format!("port {port}: {release}")));
    }
    if let Some(p) = expected.port
        && p != port
    {
        return Err(wrong(format!("the cluster listens on port {p}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn fuzzy_names_and_merge() {
        let remote = parse_remote(
            "#cloud-config\nserverurl: https://10.0.0.1:8443\nToken: t\ninstall:\n  networks:\n    harvester-mgmt:\n      interfaces:\n      - hwaddr: AA:bb:cc:dd:ee:01\n      method: dhcp\n  Mode: join\n  device: /dev/sda\n  isourl: http://x/h.iso\nos:\n  hostname: h1\n",
            true,
        )
        .unwrap();
        let cmd = read_cmdline(
            "http://m/v1.0.0/harvester-v1.0.3-vmlinuz-amd64",
            &crate::ipxe::kernel_params(
                "harvester.install.automatic=true harvester.install.config_url=https://metadata.platformequinix.com/userdata",
            ),
        );
        assert!(cmd.automatic);
        assert_eq!(cmd.release.as_deref(), Some("v1.0.3"));
        let merged = merge(&cmd.config, &remote);
        let nics = vec![("eth0".to_owned(), "aa:bb:cc:dd:ee:01".to_owned())];
        let exp = Expected {
            token: "t".into(),
            host: "10.0.0.1".into(),
            port: None,
            schema: None,
        };
        let ok = check(
            &merged,
            cmd.release.as_deref(),
            &exp,
            &Machine {
                hostname: "h1",
                nics: &nics,
            },
        )
        .unwrap();
        assert_eq!(ok.schema, Schema::V1_0);
        assert_eq!(ok.node_name, "h1");

        // Another os.hostname: the node joins under it, with a warning.
        let ok = check(
            &merged,
            cmd.release.as_deref(),
            &exp,
            &Machine {
                hostname: "device-name",
                nics: &nics,
            },
        )
        .unwrap();
        assert_eq!(ok.node_name, "h1");
        assert!(
            ok.warnings.iter().any(|w| w.contains("device-name")),
            "{:?}",
            ok.warnings
        );

        // A v1.4 installer (from the kernel URL) reads neither the v1.0 section nor port 8443.
        let err = check(
            &merged,
            Some("v1.4.2"),
            &exp,
            &Machine {
                hostname: "h1",
                nics: &nics,
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("port 8443"), "{err}");
    }

    #[test]
    fn automatic_may_come_from_the_config() {
        let cmd = read_cmdline(
            "k",
            &crate::ipxe::kernel_params("harvester.install.config_url=http://127.0.0.1:1/c"),
        );
        assert!(!cmd.automatic);
        let remote = parse_remote("install:\n  automatic: true\n", false).unwrap();
        assert!(is_automatic(&merge(&cmd.config, &remote)));
        assert!(!is_automatic(&cmd.config));
    }

    #[test]
    fn kernel_network_forms() {
        let nics = vec![("eth0".to_owned(), "aa:bb:cc:dd:ee:01".to_owned())];
        let machine = Machine {
            hostname: "h1",
            nics: &nics,
        };
        let net = |cmdline: &str| {
            check_kernel_network(&crate::ipxe::kernel_params(cmdline), &machine)
                .map_err(|e| e.to_string())
        };
        assert_eq!(net("ip=dhcp"), Ok(()));
        assert_eq!(
            net("ip=10.0.0.5::10.0.0.1:255.255.255.0::eth0:none"),
            Ok(())
        );
        assert_eq!(
            net("vlan=vlan5:eth0 ip=10.0.0.5::10.0.0.1:255.255.255.0::vlan5:off"),
            Ok(())
        );
        assert_eq!(
            net(
                "ifname=netboot:AA:BB:CC:DD:EE:01 ip=10.0.0.5::10.0.0.1:255.255.255.0::netboot:off"
            ),
            Ok(())
        );
        assert_eq!(
            net("ifname=netboot"),
            Err(
                "the kernel cannot bring up the network: ifname=netboot is not <name>:<mac>".into()
            )
        );
        assert_eq!(
            net("ip=10.0.0.5::10.0.0.1:255.255.255.0"),
            Err("the kernel cannot bring up the network: ip=10.0.0.5::10.0.0.1:255.255.255.0 is not <address>::<gateway>:<netmask>:<hostname>:<interface>:<autoconf>".into())
        );
        assert_eq!(
            net("ip=10.0.0.x::10.0.0.1:255.255.255.0::eth0:off"),
            Err("the kernel cannot bring up the network: ip=10.0.0.x::10.0.0.1:255.255.255.0::eth0:off: the address \"10.0.0.x\" is not an IPv4 address".into())
        );
    }

    #[test]
    fn create_mode_vips() {
        let nics = vec![("eth0".to_owned(), "aa:bb:cc:dd:ee:01".to_owned())];
        let machine = Machine {
            hostname: "h1",
            nics: &nics,
        };
        let exp = |host: &str| Expected {
            token: "t".into(),
            host: host.into(),
            port: None,
            schema: Some(Schema::Current),
        };
        let config = |vip: &str, mode: &str| {
            parse_remote(
                &format!(
                    "schemeVersion: 1\ntoken: t\nos: {{hostname: h1, password: p}}\ninstall:\n  mode: create\n  vip: {vip}\n  {mode}\n  managementInterface: {{method: dhcp, interfaces: [{{hwAddr: 'aa:bb:cc:dd:ee:01'}}]}}\n  device: /dev/sda\n  isoUrl: http://m/h.iso\n"
                ),
                false,
            )
            .unwrap()
        };
        let run = |host: &str, vip: &str, mode: &str| {
            check(&config(vip, mode), None, &exp(host), &machine)
                .map(|a| a.node_name)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            run("10.0.0.9", "10.0.0.9", "vipMode: static"),
            Ok("h1".into())
        );
        assert_eq!(
            run(
                "10.0.0.9",
                "10.0.0.9",
                "vip_mode: dhcp\n  vip_hw_addr: AA:BB:CC:DD:EE:01"
            ),
            Ok("h1".into())
        );
        assert_eq!(
            run("vip.example", "vip.example", "vipMode: static"),
            Err("install.vip \"vip.example\": vip_mode static needs an IP address".into())
        );
        assert_eq!(
            run("10.0.0.9", "10.0.0.9", "vipMode: arp"),
            Err("install.vip \"10.0.0.9\": vip_mode \"arp\" is not static or dhcp".into())
        );
        assert_eq!(
            run("10.0.0.9", "10.0.0.9", "tty: tty1"),
            Err("install.mode create needs install.vip_mode (static or dhcp)".into())
        );
    }
}
