//! Protocol-neutral types. Their serde form is the `--json` output of `ingot bmc` and is stable:
//! fields are only ever added.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The management protocol a BMC is reached with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Redfish,
    Ipmi,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Redfish => "redfish",
            Protocol::Ipmi => "ipmi",
        })
    }
}

/// Power state as rufio reports it (`on`, `off`, `unknown`), plus the transitions Redfish exposes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    #[default]
    Unknown,
}

impl PowerState {
    /// Parses a Redfish `PowerState` value.
    pub fn from_redfish(s: &str) -> Self {
        match s {
            "On" => PowerState::On,
            "Off" => PowerState::Off,
            "PoweringOn" => PowerState::PoweringOn,
            "PoweringOff" => PowerState::PoweringOff,
            // "Paused" and vendor values: not a state ingot acts on.
            _ => PowerState::Unknown,
        }
    }

    /// The rufio `Machine.status.powerState` string (`on`, `off`, `unknown`).
    pub fn rufio(&self) -> &'static str {
        match self {
            PowerState::On => "on",
            PowerState::Off => "off",
            _ => "unknown",
        }
    }
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PowerState::On => "on",
            PowerState::Off => "off",
            PowerState::PoweringOn => "poweringon",
            PowerState::PoweringOff => "poweringoff",
            PowerState::Unknown => "unknown",
        })
    }
}

/// Power actions, named as rufio's `Task.powerAction`. The mapping to Redfish `ResetType` and
/// IPMI chassis control is documented in `docs/bmc.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PowerAction {
    /// Power up. Redfish `On` (`ForceOn` when `On` is not offered); IPMI chassis control 1.
    On,
    /// Hard power off. Redfish `ForceOff`; IPMI chassis control 0.
    Off,
    /// Orderly (ACPI) shutdown. Redfish `GracefulShutdown`; IPMI chassis control 5.
    Soft,
    /// Hard reset without removing power. Redfish `ForceRestart`; IPMI chassis control 3.
    Reset,
    /// Power off, then on. Redfish `PowerCycle` (or `ForceOff` then `On` when the BMC does not
    /// offer it); IPMI chassis control 2.
    Cycle,
}

impl fmt::Display for PowerAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PowerAction::On => "on",
            PowerAction::Off => "off",
            PowerAction::Soft => "soft",
            PowerAction::Reset => "reset",
            PowerAction::Cycle => "cycle",
        })
    }
}

impl FromStr for PowerAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" => Ok(PowerAction::On),
            "off" => Ok(PowerAction::Off),
            "soft" => Ok(PowerAction::Soft),
            "reset" => Ok(PowerAction::Reset),
            "cycle" => Ok(PowerAction::Cycle),
            other => Err(format!("unknown power action {other:?}")),
        }
    }
}

/// What a power request did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PowerOutcome {
    pub action: PowerAction,
    /// The protocol-level commands sent, in order (e.g. `["ForceOff", "On"]`); empty when the
    /// system already was in the requested state.
    pub sent: Vec<String>,
    pub already_in_state: bool,
}

impl PowerOutcome {
    pub fn already(action: PowerAction) -> Self {
        PowerOutcome {
            action,
            sent: Vec::new(),
            already_in_state: true,
        }
    }
}

/// Boot devices ingot sets (rufio `bootDevice` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BootDevice {
    /// No override.
    None,
    Pxe,
    Disk,
    Cdrom,
    /// Firmware setup.
    Bios,
    Usb,
    /// Anything else the BMC reported.
    #[value(skip)]
    Other,
}

impl BootDevice {
    pub fn redfish_target(&self) -> &'static str {
        match self {
            BootDevice::None => "None",
            BootDevice::Pxe => "Pxe",
            BootDevice::Disk => "Hdd",
            BootDevice::Cdrom => "Cd",
            BootDevice::Bios => "BiosSetup",
            BootDevice::Usb => "Usb",
            BootDevice::Other => "None",
        }
    }

    pub fn from_redfish(s: &str) -> Self {
        match s {
            "None" => BootDevice::None,
            "Pxe" => BootDevice::Pxe,
            "Hdd" => BootDevice::Disk,
            "Cd" => BootDevice::Cdrom,
            "BiosSetup" => BootDevice::Bios,
            "Usb" => BootDevice::Usb,
            _ => BootDevice::Other,
        }
    }
}

/// Firmware boot mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum BootMode {
    #[serde(rename = "uefi")]
    #[value(name = "uefi")]
    Uefi,
    #[serde(rename = "legacy")]
    #[value(name = "legacy")]
    Legacy,
}

impl BootMode {
    pub fn redfish(&self) -> &'static str {
        match self {
            BootMode::Uefi => "UEFI",
            BootMode::Legacy => "Legacy",
        }
    }
    pub fn from_redfish(s: &str) -> Option<Self> {
        match s {
            "UEFI" => Some(BootMode::Uefi),
            "Legacy" => Some(BootMode::Legacy),
            _ => None,
        }
    }
}

/// A requested boot override.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootRequest {
    pub device: BootDevice,
    /// `false`: next boot only (Redfish `Once`); `true`: every boot (`Continuous`).
    pub persistent: bool,
    /// `None`: keep the mode the BMC currently uses.
    pub mode: Option<BootMode>,
}

/// The boot override as the BMC reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootOverride {
    pub device: BootDevice,
    /// `true` when the override applies to every boot.
    pub persistent: bool,
    /// `false` when no override is active.
    pub enabled: bool,
    /// Detected boot mode; `None` when the BMC does not say.
    pub mode: Option<BootMode>,
    /// Raw protocol value of the target (e.g. `Pxe`).
    pub raw_target: Option<String>,
}

/// A kind of virtual media (Redfish `MediaTypes`, the names Rufio's `virtualMediaAction.kind`
/// takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum MediaKind {
    #[serde(rename = "CD")]
    #[value(name = "CD")]
    Cd,
    #[serde(rename = "DVD")]
    #[value(name = "DVD")]
    Dvd,
    #[serde(rename = "USBStick")]
    #[value(name = "USBStick")]
    UsbStick,
    #[serde(rename = "Floppy")]
    #[value(name = "Floppy")]
    Floppy,
}

impl MediaKind {
    pub const ALL: [MediaKind; 4] = [
        MediaKind::Cd,
        MediaKind::Dvd,
        MediaKind::UsbStick,
        MediaKind::Floppy,
    ];

    pub fn redfish(&self) -> &'static str {
        match self {
            MediaKind::Cd => "CD",
            MediaKind::Dvd => "DVD",
            MediaKind::UsbStick => "USBStick",
            MediaKind::Floppy => "Floppy",
        }
    }

    pub fn from_redfish(s: &str) -> Option<Self> {
        MediaKind::ALL.into_iter().find(|k| k.redfish() == s)
    }
}

/// One virtual media device as the BMC reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaSlot {
    /// Where the BMC serves it (Redfish `@odata.id`).
    pub id: String,
    /// The kinds it takes, as the BMC names them (`CD`, `DVD`, `USBStick`...).
    pub media_types: Vec<String>,
    /// The attached image's URL (`None`: empty).
    pub image: Option<String>,
    pub inserted: bool,
}

impl MediaSlot {
    pub fn takes(&self, kind: MediaKind) -> bool {
        self.media_types.iter().any(|t| t == kind.redfish())
    }
}

/// Health roll-up of a component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Ok,
    Warning,
    Critical,
}

impl Health {
    pub fn from_redfish(s: &str) -> Option<Self> {
        match s {
            "OK" => Some(Health::Ok),
            "Warning" => Some(Health::Warning),
            "Critical" => Some(Health::Critical),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
    pub sku: Option<String>,
    pub uuid: Option<String>,
    pub bios_version: Option<String>,
    pub bmc_firmware_version: Option<String>,
    pub bmc_model: Option<String>,
    /// The vendor ingot detected (`dell`, `hpe`, `lenovo`, `supermicro`, `generic`).
    pub vendor: String,
    pub power_state: PowerState,
    pub health: HealthSummary,
    pub cpus: Vec<Cpu>,
    pub memory: Vec<MemoryModule>,
    pub total_memory_gib: Option<f64>,
    pub nics: Vec<Nic>,
    pub disks: Vec<Disk>,
    /// Fans of every chassis (Redfish `Thermal.Fans`), with their reading (RPM or percent).
    #[serde(default)]
    pub fans: Vec<Component>,
    /// Temperature sensors of every chassis (Redfish `Thermal.Temperatures`).
    #[serde(default)]
    pub temperatures: Vec<Temperature>,
    /// Power supplies of every chassis (Redfish `Power.PowerSupplies`).
    #[serde(default)]
    pub power_supplies: Vec<Component>,
    /// Network adapters of every chassis (Redfish `NetworkAdapters`).
    #[serde(default)]
    pub network_adapters: Vec<Component>,
    /// Storage subsystems of the system (Redfish `Storage` members).
    #[serde(default)]
    pub storage_controllers: Vec<Component>,
    /// PCIe devices of the system (Redfish `PCIeDevices`).
    #[serde(default)]
    pub pcie_devices: Vec<Component>,
}

/// A named part and its health.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    pub name: String,
    pub health: Option<Health>,
    /// A fan's reading, in the BMC's unit (RPM or percent); `None` for other parts.
    pub reading: Option<f64>,
}

/// A temperature sensor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Temperature {
    pub name: String,
    pub reading_celsius: Option<f64>,
    pub health: Option<Health>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthSummary {
    /// The system's own roll-up (Redfish `Status.HealthRollup`, else `Status.Health`).
    pub system: Option<Health>,
    pub chassis: Option<Health>,
    pub bmc: Option<Health>,
    pub processors: Option<Health>,
    pub memory: Option<Health>,
    pub storage: Option<Health>,
    pub network: Option<Health>,
}

/// The worst of several healths (`None` entries ignored).
pub fn worst_health(items: impl IntoIterator<Item = Option<Health>>) -> Option<Health> {
    items.into_iter().flatten().max_by_key(|h| match h {
        Health::Ok => 0,
        Health::Warning => 1,
        Health::Critical => 2,
    })
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    pub id: String,
    /// The BMC's display name (Redfish `Name`).
    #[serde(default)]
    pub name: Option<String>,
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub cores: Option<u32>,
    pub threads: Option<u32>,
    pub max_speed_mhz: Option<u32>,
    pub health: Option<Health>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryModule {
    pub id: String,
    /// The BMC's display name (Redfish `Name`).
    #[serde(default)]
    pub name: Option<String>,
    pub capacity_mib: Option<u64>,
    pub manufacturer: Option<String>,
    pub part_number: Option<String>,
    pub serial_number: Option<String>,
    pub speed_mhz: Option<u32>,
    pub health: Option<Health>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    pub id: String,
    /// Lower-case, colon-separated.
    pub mac_address: Option<String>,
    pub speed_mbps: Option<u64>,
    pub link_up: Option<bool>,
    pub health: Option<Health>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    pub id: String,
    /// The BMC's display name (Redfish `Name`).
    #[serde(default)]
    pub name: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
    pub capacity_bytes: Option<u64>,
    /// `HDD`, `SSD` when reported.
    pub media_type: Option<String>,
    pub protocol: Option<String>,
    pub health: Option<Health>,
}

/// One event-log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    /// Stable identity: the Redfish entry's `@odata.id` (or `sel:<record id>` for IPMI). The
    /// same entry read twice has the same id; de-duplicate on [`LogEntry::dedup_key`], which
    /// also covers BMCs that reuse ids after a log is cleared.
    pub id: String,
    /// The log it came from (`@odata.id` of the LogService, or `sel`).
    pub log: String,
    /// RFC 3339 time stamp, as the BMC reported it.
    pub created: Option<String>,
    /// `OK`, `Warning`, `Critical` as reported.
    pub severity: Option<String>,
    pub message: String,
    pub message_id: Option<String>,
    /// `Event`, `SEL`, `Oem`...
    pub entry_type: Option<String>,
}

impl LogEntry {
    pub fn dedup_key(&self) -> String {
        format!("{}|{}", self.id, self.created.as_deref().unwrap_or(""))
    }
}

/// Most sensors read from one BMC; the rest are left out (and logged).
pub const MAX_SENSORS: usize = 1024;

/// What a sensor measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SensorKind {
    Temperature,
    Fan,
    Voltage,
    Current,
    Power,
    /// A power supply's own state (IPMI sensor type 0x08, Redfish `PowerSupplies`).
    PowerSupply,
    /// A drive bay's state (IPMI sensor type 0x0D).
    Drive,
    Other,
}

impl SensorKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            SensorKind::Temperature => "temperature",
            SensorKind::Fan => "fan",
            SensorKind::Voltage => "voltage",
            SensorKind::Current => "current",
            SensorKind::Power => "power",
            SensorKind::PowerSupply => "power_supply",
            SensorKind::Drive => "drive",
            SensorKind::Other => "other",
        }
    }
}

impl fmt::Display for SensorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a sensor gave a reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SensorState {
    /// Read (the reading may still be absent when the sensor has no numeric value).
    #[default]
    Enabled,
    /// Scanning disabled (IPMI) or `Status.State: Disabled` (Redfish).
    Disabled,
    /// The BMC has no reading now (IPMI `reading unavailable`, a sensor of another
    /// controller, Redfish `UnavailableOffline`).
    Unavailable,
    /// The part is not there (Redfish `Status.State: Absent`).
    Absent,
}

/// Threshold values, in the reading's unit; `None` where the BMC gives none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Thresholds {
    pub lower_non_critical: Option<f64>,
    pub lower_critical: Option<f64>,
    /// IPMI lower non-recoverable, Redfish `LowerFatal`.
    pub lower_fatal: Option<f64>,
    pub upper_non_critical: Option<f64>,
    pub upper_critical: Option<f64>,
    /// IPMI upper non-recoverable, Redfish `UpperFatal`.
    pub upper_fatal: Option<f64>,
}

impl Thresholds {
    pub fn is_empty(&self) -> bool {
        *self == Thresholds::default()
    }

    /// The health a reading has against these thresholds (a value at a threshold has
    /// crossed it, as IPMI's comparison status counts it).
    pub fn health_of(&self, reading: f64) -> Health {
        let at_or_below = |t: Option<f64>| t.is_some_and(|t| reading <= t);
        let at_or_above = |t: Option<f64>| t.is_some_and(|t| reading >= t);
        if at_or_below(self.lower_critical)
            || at_or_below(self.lower_fatal)
            || at_or_above(self.upper_critical)
            || at_or_above(self.upper_fatal)
        {
            Health::Critical
        } else if at_or_below(self.lower_non_critical) || at_or_above(self.upper_non_critical) {
            Health::Warning
        } else {
            Health::Ok
        }
    }
}

/// One sensor of a BMC: an IPMI SDR sensor, a Redfish `Sensor`, or a fan, temperature or
/// power supply of a chassis' `Thermal`/`Power` or `ThermalSubsystem`/`PowerSubsystem`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sensor {
    pub name: String,
    pub kind: SensorKind,
    /// The reading in `unit`; `None` when there is none (discrete sensors, no reading now).
    pub reading: Option<f64>,
    /// `Cel`, `RPM`, `V`, `A`, `W`, `%` (Redfish's units) or the IPMI unit's name.
    pub unit: Option<String>,
    pub thresholds: Thresholds,
    /// The worse of the BMC's own status and what the thresholds say; `None` when neither
    /// is known.
    pub health: Option<Health>,
    pub state: SensorState,
    /// Where it was read: `sdr:<record id>/<sensor number>` or the Redfish resource
    /// (`@odata.id`, with `#/Fans/0`-style fragments for array members).
    pub source: String,
}

/// One event a BMC pushed (Redfish server-sent events): the event's SSE id (the last one the
/// stream gave, if any) and its JSON document.
#[derive(Debug, Clone, PartialEq)]
pub struct PushedEvent {
    pub id: Option<String>,
    pub data: serde_json::Value,
}

/// A stream of pushed events, holding its own connection.
pub type PushedEvents = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<PushedEvent, crate::error::BmcError>> + Send>,
>;

/// A push subscription ingot keeps on a BMC's EventService: found again by `destination` and
/// `context` (many BMCs leave `EventFormatType` out of what they read back), created with
/// `headers` (write-only on the BMC; a header value is a secret, never printed).
#[derive(Clone, Debug, PartialEq)]
pub struct EventSubscription {
    /// Where the BMC POSTs its events (`https://...`).
    pub destination: String,
    /// Echoed by the BMC in every event: says whose event it is.
    pub context: String,
    /// Sent by the BMC with every event (`Debug` redacts the values).
    pub headers: Vec<(String, crate::secret::Password)>,
}

/// Which other `Context`s at a subscription's destination are stale copies of it (made by the
/// same subscriber before, e.g. under another key): deleted when it is ensured.
pub type StaleContext<'a> = &'a (dyn Fn(&str) -> bool + Send + Sync);

/// No other `Context` is stale.
pub fn no_stale_context(_: &str) -> bool {
    false
}

/// What ensuring a push subscription did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subscribed {
    /// Ours was there already (its URI).
    Found(String),
    /// It was missing and is now created (its URI).
    Created(String),
}
