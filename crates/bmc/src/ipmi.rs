//! IPMI 2.0 (RMCP+) behind the [`Bmc`] trait: an adapter over the `ingot-ipmi` client, and the
//! [`IpmiConnector`] the session manager uses to detect and reach IPMI-only BMCs.
//!
//! The adapter lives here, not in `ingot-ipmi`, so that the protocol crate stays a plain RMCP+
//! client with no knowledge of ingot's neutral types, and `ingot-bmc` (which owns those types)
//! is the one place where protocols are mapped onto them.

use crate::error::BmcError;
use crate::manager::{BmcConfig, Connector};
use crate::types::*;
use crate::{Bmc, Endpoint};
use async_trait::async_trait;
use ingot_ipmi as ipmi;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The IPMI port (RMCP, UDP).
pub const IPMI_PORT: u16 = 623;

/// IPMI client settings shared by every BMC a connector reaches.
#[derive(Clone, Debug)]
pub struct IpmiOptions {
    /// How long each exchange waits before retransmitting.
    pub timeout: Duration,
    /// Retransmissions after the first packet of each exchange.
    pub retries: u32,
    /// Cipher suites to try, in order.
    pub cipher_suites: Vec<ipmi::CipherSuite>,
    /// Privilege requested (Operator is enough for power, boot and reading the SEL).
    pub privilege: ipmi::Privilege,
    /// Keep-alive interval while idle (`None`: no keep-alive, e.g. one-shot commands).
    pub keepalive: Option<Duration>,
    /// Reads are retransmitted first after this shorter delay (a hedged request); commands
    /// that change the BMC never are. `None`: every retransmission waits `timeout`.
    pub hedge_after: Option<Duration>,
}

impl Default for IpmiOptions {
    fn default() -> Self {
        IpmiOptions {
            timeout: Duration::from_secs(1),
            retries: 3,
            cipher_suites: vec![ipmi::CipherSuite::Suite17, ipmi::CipherSuite::Suite3],
            privilege: ipmi::Privilege::Operator,
            keepalive: Some(Duration::from_secs(30)),
            hedge_after: Some(Duration::from_millis(300)),
        }
    }
}

/// `host:port` for the IPMI socket: the endpoint's port, else 623.
pub fn ipmi_address(endpoint: &Endpoint) -> String {
    format!(
        "{}:{}",
        endpoint.url_host(),
        endpoint.port.unwrap_or(IPMI_PORT)
    )
}

/// One BMC over IPMI. Cheap to clone; clones share the client and its session.
#[derive(Clone, Debug)]
pub struct IpmiBmc {
    client: ipmi::Client,
}

impl IpmiBmc {
    /// Opens a session (read-only: nothing is changed on the BMC).
    pub async fn connect(config: &BmcConfig, options: &IpmiOptions) -> Result<Self, BmcError> {
        Self::connect_gated(config, options, None).await
    }

    /// Like `connect`, taking a permit of `gate` per exchange (see
    /// [`ipmi::Client::connect_gated`]).
    pub async fn connect_gated(
        config: &BmcConfig,
        options: &IpmiOptions,
        gate: Option<Arc<tokio::sync::Semaphore>>,
    ) -> Result<Self, BmcError> {
        let mut cfg = ipmi::Config::new(
            ipmi_address(&config.endpoint),
            config.username.clone(),
            ipmi::Password::new(config.password.expose().as_bytes().to_vec()),
        );
        cfg.timeout = options.timeout;
        cfg.retries = options.retries;
        cfg.cipher_suites = options.cipher_suites.clone();
        cfg.privilege = options.privilege;
        cfg.keepalive = options.keepalive;
        cfg.hedge_after = options.hedge_after;
        let client = ipmi::Client::connect_gated(cfg, gate)
            .await
            .map_err(map_error)?;
        Ok(IpmiBmc { client })
    }

    /// Wraps an existing client.
    pub fn from_client(client: ipmi::Client) -> Self {
        IpmiBmc { client }
    }

    /// The protocol client (raw commands, statistics).
    pub fn client(&self) -> &ipmi::Client {
        &self.client
    }

    /// Sends a power-up instead of reset/cycle on a powered-off system, like the Redfish side.
    /// `was_on`: the power state read just before.
    async fn control(
        &self,
        action: PowerAction,
        c: ipmi::ChassisControl,
        was_on: bool,
    ) -> Result<PowerOutcome, BmcError> {
        match self.client.chassis_control(c).await {
            Ok(()) => {}
            Err(e @ (ipmi::Error::Timeout { .. } | ipmi::Error::MaybeSent { .. })) => {
                // The command may have been carried out and only its answer
                // lost: it is never sent again. The power state (a read may use
                // a new session) tells when it moved since just before; a hard
                // reset, or a cycle that is over, leaves no trace there and the
                // error stands.
                let now = self.client.chassis_status().await.map(|s| s.power_on);
                let acted = now.as_ref().is_ok_and(|on| *on != was_on);
                tracing::warn!(
                    bmc = %self.client.peer(),
                    command = control_name(c),
                    power_on = ?now.as_ref().ok(),
                    carried_out = acted,
                    "chassis control got no answer; not repeated"
                );
                if !acted {
                    return Err(map_error(e));
                }
            }
            Err(e) => return Err(map_error(e)),
        }
        Ok(PowerOutcome {
            action,
            sent: vec![control_name(c).to_owned()],
            already_in_state: false,
        })
    }
}

/// The name of a chassis control sub-command as `PowerOutcome.sent` reports it.
pub fn control_name(c: ipmi::ChassisControl) -> &'static str {
    match c {
        ipmi::ChassisControl::PowerDown => "power down",
        ipmi::ChassisControl::PowerUp => "power up",
        ipmi::ChassisControl::PowerCycle => "power cycle",
        ipmi::ChassisControl::HardReset => "hard reset",
        ipmi::ChassisControl::DiagnosticInterrupt => "diagnostic interrupt",
        ipmi::ChassisControl::SoftShutdown => "soft shutdown",
    }
}

#[async_trait]
impl Bmc for IpmiBmc {
    fn protocol(&self) -> Protocol {
        Protocol::Ipmi
    }

    async fn power_state(&self) -> Result<PowerState, BmcError> {
        let s = self.client.chassis_status().await.map_err(map_error)?;
        Ok(if s.power_on {
            PowerState::On
        } else {
            PowerState::Off
        })
    }

    async fn power(&self, action: PowerAction) -> Result<PowerOutcome, BmcError> {
        use ipmi::ChassisControl as C;
        let on = self
            .client
            .chassis_status()
            .await
            .map_err(map_error)?
            .power_on;
        let control = match (action, on) {
            (PowerAction::On, true) | (PowerAction::Off | PowerAction::Soft, false) => {
                return Ok(PowerOutcome::already(action));
            }
            (PowerAction::On, false) => C::PowerUp,
            (PowerAction::Off, true) => C::PowerDown,
            (PowerAction::Soft, true) => C::SoftShutdown,
            // Many BMCs refuse reset and cycle while off (0xD5): the host is started instead.
            (PowerAction::Reset | PowerAction::Cycle, false) => C::PowerUp,
            (PowerAction::Reset, true) => C::HardReset,
            (PowerAction::Cycle, true) => C::PowerCycle,
        };
        self.control(action, control, on).await
    }

    async fn boot_override(&self) -> Result<BootOverride, BmcError> {
        let flags = self.client.boot_flags().await.map_err(map_error)?;
        Ok(boot_override_from(&flags))
    }

    async fn virtual_media(&self) -> Result<Vec<MediaSlot>, BmcError> {
        Err(no_virtual_media())
    }

    async fn set_virtual_media(
        &self,
        _kind: MediaKind,
        _image: Option<String>,
    ) -> Result<(), BmcError> {
        Err(no_virtual_media())
    }

    async fn set_boot_override(&self, request: BootRequest) -> Result<BootOverride, BmcError> {
        let device = match request.device {
            BootDevice::None => ipmi::BootDevice::NoOverride,
            BootDevice::Pxe => ipmi::BootDevice::Pxe,
            BootDevice::Disk => ipmi::BootDevice::Disk,
            BootDevice::Cdrom => ipmi::BootDevice::Cdrom,
            BootDevice::Bios => ipmi::BootDevice::BiosSetup,
            // "Primary removable media": what BMCs boot USB sticks from.
            BootDevice::Usb => ipmi::BootDevice::Floppy,
            BootDevice::Other => {
                return Err(BmcError::Unsupported(
                    "boot device \"other\" cannot be requested".into(),
                ));
            }
        };
        let persistence = if request.persistent {
            ipmi::BootPersistence::Persistent
        } else {
            ipmi::BootPersistence::Once
        };
        // The mode asked for, else the one the BMC reports, else UEFI (see [`DEFAULT_BOOT_MODE`]).
        let before = boot_override_from(&self.client.boot_flags().await.map_err(map_error)?).mode;
        let wanted = request.mode.or(before).unwrap_or(DEFAULT_BOOT_MODE);
        let mode = match wanted {
            BootMode::Uefi => ipmi::BootMode::Uefi,
            BootMode::Legacy => ipmi::BootMode::Legacy,
        };
        let flags = self
            .client
            .set_boot_device(device, persistence, Some(mode))
            .await
            .map_err(map_error)?;
        let after = boot_override_from(&flags);
        // Flags read back valid with another EFI bit: the BMC did not keep the mode written.
        // Reported, never written again to force it.
        if let Some(now) = after.mode
            && now != wanted
        {
            return Err(BmcError::BootModeNotKept {
                before,
                wanted,
                after: now,
            });
        }
        Ok(after)
    }

    async fn inventory(&self) -> Result<Inventory, BmcError> {
        let inv = self.client.inventory().await.map_err(map_error)?;
        let status = self.client.chassis_status().await.map_err(map_error)?;
        let uuid = self.system_guid().await;
        Ok(inventory_from(&inv, &status, uuid))
    }

    async fn event_log(&self) -> Result<Vec<LogEntry>, BmcError> {
        let entries = match self.client.sel_entries().await {
            Ok(e) => e,
            // No SEL device (pyghmi's fakebmc, some blades): an empty log, not an error.
            Err(ipmi::Error::CompletionCode {
                code: 0xC1 | 0xCB | 0xD5 | 0xD6,
                ..
            }) => Vec::new(),
            Err(e) => return Err(map_error(e)),
        };
        Ok(entries.iter().map(log_entry_from).collect())
    }

    async fn sensors(&self) -> Result<Vec<Sensor>, BmcError> {
        let records = match self.client.sdr_sensors().await {
            Ok(r) => r,
            // No SDR repository: no sensors, not an error.
            Err(ipmi::Error::CompletionCode {
                code: 0xC1 | 0xCB | 0xD5 | 0xD6,
                ..
            }) => Vec::new(),
            Err(e) => return Err(map_error(e)),
        };
        let mut out = Vec::with_capacity(records.len().min(MAX_SENSORS));
        for r in records.iter().take(MAX_SENSORS) {
            out.push(self.read_sensor(r).await?);
        }
        Ok(out)
    }

    async fn close(&self) -> Result<(), BmcError> {
        self.client.close().await;
        Ok(())
    }
}

/// The BMC's own IPMB address: sensors owned by another controller need bridging, which
/// ingot does not do; they are listed without a reading.
const BMC_ADDRESS: u8 = 0x20;

impl IpmiBmc {
    /// Reads one SDR sensor: its reading, and its thresholds when the record says they can
    /// be read. A sensor the BMC refuses to read (a completion code) is listed unavailable;
    /// a BMC that stops answering fails the whole read.
    async fn read_sensor(&self, r: &ipmi::SensorRecord) -> Result<Sensor, BmcError> {
        if r.owner_id != BMC_ADDRESS || r.owner_lun != 0 {
            return Ok(sensor_from(r, None, None));
        }
        let reading = match self.client.sensor_reading(r.number).await {
            Ok(v) => Some(v),
            Err(ipmi::Error::CompletionCode { .. }) => None,
            Err(e) => return Err(map_error(e)),
        };
        let thresholds = if r.is_threshold()
            && r.conversion.is_some()
            && matches!(r.threshold_access(), 1 | 2)
        {
            match self.client.sensor_thresholds(r.number).await {
                Ok(t) => Some(t),
                Err(ipmi::Error::CompletionCode { .. }) => None,
                Err(e) => return Err(map_error(e)),
            }
        } else {
            None
        };
        Ok(sensor_from(r, reading, thresholds))
    }
}

/// What an SDR sensor measures, from its sensor type and unit.
pub fn sensor_kind(r: &ipmi::SensorRecord) -> SensorKind {
    match r.sensor_type {
        0x01 => SensorKind::Temperature,
        0x02 => SensorKind::Voltage,
        0x03 => SensorKind::Current,
        0x04 => SensorKind::Fan,
        _ if r.is_threshold() && r.base_unit == 6 => SensorKind::Power,
        0x08 => SensorKind::PowerSupply,
        0x0D => SensorKind::Drive,
        _ => SensorKind::Other,
    }
}

/// The unit of an SDR sensor's reading: Redfish's unit names for the common ones, else the
/// IPMI unit type code.
fn sensor_unit(r: &ipmi::SensorRecord) -> Option<String> {
    if r.units1 & 0x01 != 0 {
        return Some("%".into());
    }
    Some(
        match r.base_unit {
            0 => return None,
            1 => "Cel",
            2 => "[degF]",
            3 => "K",
            4 => "V",
            5 => "A",
            6 => "W",
            7 => "J",
            9 => "VA",
            17 => "[cft_i]/min",
            18 => "RPM",
            19 => "Hz",
            other => return Some(format!("ipmi-unit-{other}")),
        }
        .into(),
    )
}

/// An SDR sensor in the neutral form, from its record, its reading and its thresholds
/// (Get Sensor Thresholds, or the Full record's own values when the thresholds are fixed).
pub fn sensor_from(
    r: &ipmi::SensorRecord,
    reading: Option<ipmi::SensorReading>,
    thresholds: Option<ipmi::RawThresholds>,
) -> Sensor {
    let kind = sensor_kind(r);
    let source = format!("sdr:{:04x}/{:#04x}", r.record_id, r.number);
    let name = if r.name.is_empty() {
        format!("sensor {:#04x}", r.number)
    } else {
        r.name.clone()
    };
    let state = match reading {
        None => SensorState::Unavailable,
        Some(v) if !v.scanning => SensorState::Disabled,
        Some(v) if v.unavailable => SensorState::Unavailable,
        Some(_) => SensorState::Enabled,
    };
    let valid = reading.filter(|v| v.valid());
    let mut sensor = Sensor {
        name,
        kind,
        reading: None,
        unit: None,
        thresholds: Thresholds::default(),
        health: None,
        state,
        source,
    };
    if r.is_threshold() {
        let Some(c) = r.conversion else {
            return sensor;
        };
        sensor.unit = sensor_unit(r);
        let raw: [Option<u8>; 6] = match (thresholds, r.threshold_access(), r.sdr_thresholds) {
            (Some(t), _, _) => std::array::from_fn(|i| t.get(i)),
            (None, 3, Some(sdr)) => {
                std::array::from_fn(|i| (r.readable_thresholds & (1 << i) != 0).then_some(sdr[i]))
            }
            _ => [None; 6],
        };
        let v = |i: usize| raw[i].and_then(|b| c.convert(b));
        sensor.thresholds = Thresholds {
            lower_non_critical: v(0),
            lower_critical: v(1),
            lower_fatal: v(2),
            upper_non_critical: v(3),
            upper_critical: v(4),
            upper_fatal: v(5),
        };
        if let Some(v) = valid {
            sensor.reading = c.convert(v.raw);
            // The BMC's threshold comparison status, and the thresholds.
            let bits = v.states & 0x3F;
            let bmc = if bits & 0b11_0110 != 0 {
                Health::Critical
            } else if bits & 0b00_1001 != 0 {
                Health::Warning
            } else {
                Health::Ok
            };
            let ours = sensor.reading.map(|x| sensor.thresholds.health_of(x));
            sensor.health = worst_health([Some(bmc), ours]);
        }
        return sensor;
    }
    // Discrete sensors: the sensor-specific states of power supplies and drive bays.
    if let Some(v) = valid
        && r.event_reading_type == 0x6F
        && matches!(r.sensor_type, 0x08 | 0x0D)
    {
        let s = v.states;
        let (critical, warning) = match r.sensor_type {
            // Failure detected, input lost (either way), configuration error; predictive
            // failure, input out of range but present.
            0x08 => (s & 0b0101_1010 != 0, s & 0b0010_0100 != 0),
            // Drive fault, in failed array; predictive failure, in critical array.
            _ => (s & 0b0100_0010 != 0, s & 0b0010_0100 != 0),
        };
        sensor.health = Some(if critical {
            Health::Critical
        } else if warning {
            Health::Warning
        } else {
            Health::Ok
        });
    }
    sensor
}

impl IpmiBmc {
    /// Get System GUID, else Get Device GUID; `None` when neither is offered.
    async fn system_guid(&self) -> Option<String> {
        for cmd in [0x37, 0x08] {
            if let Ok(d) = self.client.raw(0x06, cmd, &[]).await
                && let Some(g) = d.get(..16)
                && g.iter().any(|b| *b != 0)
            {
                return Some(format_guid(g));
            }
        }
        None
    }
}

/// A GUID as IPMI sends it (SMBIOS byte order: the first three fields little-endian).
fn format_guid(g: &[u8]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let rev = |b: &[u8]| {
        let mut v = b.to_vec();
        v.reverse();
        hex(&v)
    };
    format!(
        "{}-{}-{}-{}-{}",
        rev(&g[0..4]),
        rev(&g[4..6]),
        rev(&g[6..8]),
        hex(&g[8..10]),
        hex(&g[10..16])
    )
}

fn boot_device_name(d: ipmi::BootDevice) -> String {
    use ipmi::BootDevice as D;
    match d {
        D::NoOverride => "none".into(),
        D::Pxe => "pxe".into(),
        D::Disk => "disk".into(),
        D::DiskSafeMode => "safe".into(),
        D::Diagnostic => "diag".into(),
        D::Cdrom => "cdrom".into(),
        D::BiosSetup => "bios".into(),
        D::RemoteFloppy => "remote-floppy".into(),
        D::RemoteCdrom => "remote-cdrom".into(),
        D::RemoteMedia => "remote-media".into(),
        D::RemoteDisk => "remote-disk".into(),
        D::Floppy => "floppy".into(),
        D::Other(v) => format!("selector-{v:#x}"),
    }
}

/// The boot mode written with a boot override when neither the request nor the BMC names one
/// (boot flags without the valid bit report no mode): UEFI. What such flags hold in the EFI bit
/// is not the machine's mode (often 0 on a UEFI machine whose one-time override was used up),
/// so "keeping" it would switch UEFI machines to Legacy, the harm this avoids: Harvester from
/// v1.8 installs in UEFI only, current servers ship in UEFI, and on some (Dell) a Legacy boot
/// of a UEFI machine schedules a BIOS configuration job. A Legacy machine behind such a BMC
/// needs the mode asked for explicitly.
pub const DEFAULT_BOOT_MODE: BootMode = BootMode::Uefi;

/// Boot flags (parameter 5) in the neutral form. The device is the selector as stored (like
/// Redfish's `BootSourceOverrideTarget`, reported whether or not the override is enabled); the
/// override is enabled when the flags are valid and name a device. OpenIPMI's `ipmi_sim`, for
/// one, keeps the selector but never reports the valid bit.
pub fn boot_override_from(flags: &ipmi::BootFlags) -> BootOverride {
    use ipmi::BootDevice as D;
    let device = match flags.device {
        D::NoOverride => BootDevice::None,
        D::Pxe => BootDevice::Pxe,
        D::Disk | D::DiskSafeMode => BootDevice::Disk,
        D::Cdrom | D::RemoteCdrom => BootDevice::Cdrom,
        D::BiosSetup => BootDevice::Bios,
        D::Floppy => BootDevice::Usb,
        D::Diagnostic | D::RemoteFloppy | D::RemoteMedia | D::RemoteDisk | D::Other(_) => {
            BootDevice::Other
        }
    };
    let enabled = flags.valid && device != BootDevice::None;
    BootOverride {
        device,
        persistent: flags.persistence == ipmi::BootPersistence::Persistent,
        enabled,
        mode: flags.reported_mode().map(|m| match m {
            ipmi::BootMode::Uefi => BootMode::Uefi,
            ipmi::BootMode::Legacy => BootMode::Legacy,
        }),
        raw_target: Some(boot_device_name(flags.device)),
    }
}

/// The vendor name from the IANA enterprise number of Get Device ID.
pub fn vendor_from_iana(id: u32) -> &'static str {
    match id {
        674 => "dell",
        11 | 47196 => "hpe",
        19046 | 20301 => "lenovo",
        10876 => "supermicro",
        _ => "generic",
    }
}

fn manufacturer_from_iana(id: u32) -> Option<&'static str> {
    Some(match id {
        674 => "Dell Inc.",
        11 | 47196 => "HPE",
        19046 | 20301 => "Lenovo",
        10876 => "Supermicro",
        343 => "Intel Corporation",
        _ => return None,
    })
}

fn non_empty(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// Get Device ID + FRU 0 + chassis status in the neutral form. IPMI has no standard CPU,
/// memory, NIC or disk inventory: those lists stay empty.
pub fn inventory_from(
    inv: &ipmi::Inventory,
    status: &ipmi::ChassisStatus,
    uuid: Option<String>,
) -> Inventory {
    let fru = inv.fru.clone().unwrap_or_default();
    let product = fru.product.as_ref();
    let board = fru.board.as_ref();
    let chassis = fru.chassis.as_ref();
    let first =
        |items: [Option<&String>; 3]| items.into_iter().flatten().find_map(|s| non_empty(s));
    let manufacturer = first([
        product.map(|p| &p.manufacturer),
        board.map(|b| &b.manufacturer),
        None,
    ])
    .or_else(|| manufacturer_from_iana(inv.device.manufacturer_id).map(str::to_owned));
    let fault = status.power_fault || status.power_control_fault || status.power_overload;
    Inventory {
        manufacturer,
        model: first([
            product.map(|p| &p.product_name),
            board.map(|b| &b.product_name),
            None,
        ]),
        serial_number: first([
            product.map(|p| &p.serial_number),
            chassis.map(|c| &c.serial_number),
            board.map(|b| &b.serial_number),
        ]),
        sku: first([
            product.map(|p| &p.part_number),
            chassis.map(|c| &c.part_number),
            None,
        ]),
        uuid,
        bios_version: None,
        bmc_firmware_version: Some(inv.device.firmware_version()),
        bmc_model: None,
        vendor: vendor_from_iana(inv.device.manufacturer_id).to_owned(),
        power_state: if status.power_on {
            PowerState::On
        } else {
            PowerState::Off
        },
        health: HealthSummary {
            chassis: Some(if fault { Health::Critical } else { Health::Ok }),
            ..HealthSummary::default()
        },
        ..Inventory::default()
    }
}

fn sensor_type_name(t: u8) -> &'static str {
    match t {
        0x01 => "Temperature",
        0x02 => "Voltage",
        0x03 => "Current",
        0x04 => "Fan",
        0x05 => "Physical Security",
        0x06 => "Platform Security",
        0x07 => "Processor",
        0x08 => "Power Supply",
        0x09 => "Power Unit",
        0x0C => "Memory",
        0x0D => "Drive Slot",
        0x0F => "System Firmware Progress",
        0x10 => "Event Logging Disabled",
        0x12 => "System Event",
        0x13 => "Critical Interrupt",
        0x14 => "Button / Switch",
        0x1D => "System Boot / Restart Initiated",
        0x1F => "OS Boot",
        0x20 => "OS Stop / Shutdown",
        0x21 => "Slot / Connector",
        0x23 => "Watchdog",
        0x2B => "Version Change",
        _ => "Sensor",
    }
}

/// Severity of a threshold event (event/reading type 0x01) from its offset; `None` otherwise.
fn threshold_severity(e: &ipmi::SelEntry) -> Option<&'static str> {
    if e.event_type != 0x01 {
        return None;
    }
    Some(match e.event_data[0] & 0x0F {
        0x00 | 0x01 | 0x06 | 0x07 => "Warning",
        0x02..=0x05 | 0x08..=0x0B => "Critical",
        _ => return None,
    })
}

/// SEL time stamps below this are seconds since BMC initialisation, not since 1970.
const SEL_TIME_SPECIFIED: u32 = 0x2000_0000;

/// One SEL record as a neutral entry: `id = sel:<record id, 4 hex digits>`, `log = sel`.
pub fn log_entry_from(e: &ipmi::SelEntry) -> LogEntry {
    let created = e
        .timestamp
        .filter(|t| *t >= SEL_TIME_SPECIFIED)
        .and_then(|t| chrono::DateTime::from_timestamp(i64::from(t), 0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let (message, message_id, entry_type) = if e.record_type == 0x02 {
        (
            format!(
                "{} #{:#04x}: {} (event type {:#04x}, data {:02x} {:02x} {:02x})",
                sensor_type_name(e.sensor_type),
                e.sensor_number,
                if e.deassertion {
                    "deasserted"
                } else {
                    "asserted"
                },
                e.event_type,
                e.event_data[0],
                e.event_data[1],
                e.event_data[2]
            ),
            Some(format!(
                "IPMI.{:02X}.{:02X}.{:X}",
                e.sensor_type,
                e.event_type,
                e.event_data[0] & 0x0F
            )),
            "SEL",
        )
    } else {
        let hex: String = e.raw[3..].iter().map(|b| format!("{b:02x}")).collect();
        (
            format!("OEM record type {:#04x}: {hex}", e.record_type),
            None,
            "Oem",
        )
    };
    LogEntry {
        id: format!("sel:{:04x}", e.record_id),
        log: "sel".into(),
        created,
        severity: threshold_severity(e).map(str::to_owned),
        message,
        message_id,
        entry_type: Some(entry_type.into()),
    }
}

/// IPMI errors in ingot's protocol-neutral form.
pub fn map_error(e: ipmi::Error) -> BmcError {
    use ipmi::Error as E;
    match e {
        E::Timeout {
            attempts,
            per_attempt,
            ..
        } => BmcError::Timeout(per_attempt * attempts),
        E::AuthFailed(_) => BmcError::Unauthorized,
        E::Unauthorized(_) => BmcError::Forbidden,
        E::SessionLimit { .. } => BmcError::SessionLimit,
        E::UnsupportedCipherSuite { .. } => BmcError::Unsupported(e.to_string()),
        // Unknown user or role, bad integrity check value during the handshake.
        E::RakpStatus(0x09 | 0x0A | 0x0C | 0x0D | 0x0E | 0x0F) => BmcError::Unauthorized,
        E::RakpStatus(0x04..=0x07 | 0x10 | 0x11) => BmcError::Unsupported(e.to_string()),
        E::RakpStatus(_) | E::Integrity(_) | E::Protocol(_) => BmcError::Malformed(e.to_string()),
        E::CompletionCode { command, code } => match code {
            0xC1 | 0xCB | 0xD5 | 0xD6 => BmcError::Unsupported(e.to_string()),
            _ => BmcError::Command {
                command: command.to_owned(),
                code,
                message: ipmi::completion_code_text(code).to_owned(),
            },
        },
        E::Io(io) => BmcError::Unreachable(Box::new(io)),
        E::MaybeSent { source, .. } => BmcError::MaybeSent(Box::new(source)),
        E::Closed => BmcError::Config("the IPMI session is closed".into()),
        other => BmcError::Malformed(other.to_string()),
    }
}

/// Counters of an [`IpmiConnector`].
#[derive(Debug, Default)]
pub struct IpmiStats {
    /// `connect` calls (protocol probes included).
    pub connects: AtomicU64,
    /// Sessions opened by `connect`.
    pub sessions_opened: AtomicU64,
}

/// Reaches BMCs over IPMI for the session manager: `connect` opens a session, which is the
/// check that IPMI answers with these credentials; nothing is changed on the BMC.
#[derive(Debug, Default)]
pub struct IpmiConnector {
    options: IpmiOptions,
    stats: Arc<IpmiStats>,
}

impl IpmiConnector {
    pub fn new(options: IpmiOptions) -> Self {
        IpmiConnector {
            options,
            stats: Arc::default(),
        }
    }

    pub fn stats(&self) -> &Arc<IpmiStats> {
        &self.stats
    }
}

#[async_trait]
impl Connector for IpmiConnector {
    fn protocol(&self) -> Protocol {
        Protocol::Ipmi
    }

    async fn connect(&self, config: &BmcConfig) -> Result<Arc<dyn Bmc>, BmcError> {
        self.stats.connects.fetch_add(1, Ordering::Relaxed);
        let bmc = IpmiBmc::connect(config, &self.options).await?;
        self.stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(bmc))
    }

    async fn connect_gated(
        &self,
        config: &BmcConfig,
        gate: Arc<tokio::sync::Semaphore>,
    ) -> Result<Arc<dyn Bmc>, BmcError> {
        self.stats.connects.fetch_add(1, Ordering::Relaxed);
        let bmc = IpmiBmc::connect_gated(config, &self.options, Some(gate)).await?;
        self.stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(bmc))
    }

    fn gates_requests(&self) -> bool {
        true
    }
}

/// IPMI has no virtual media: it belongs to the BMC's Redfish service.
fn no_virtual_media() -> BmcError {
    BmcError::Unsupported(
        "virtual media over IPMI (IPMI has none; it needs the BMC's Redfish service)".into(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn guid_byte_order() {
        let g: Vec<u8> = (0u8..16).collect();
        assert_eq!(format_guid(&g), "03020100-0504-0706-0809-0a0b0c0d0e0f");
    }

    #[test]
    fn addresses() {
        let ep = Endpoint::parse("10.0.0.5", None).unwrap();
        assert_eq!(ipmi_address(&ep), "10.0.0.5:623");
        let ep = Endpoint::parse("[fe80::1]:6230", None).unwrap();
        assert_eq!(ipmi_address(&ep), "[fe80::1]:6230");
    }

    #[test]
    fn errors_are_typed() {
        let t = map_error(ipmi::Error::Timeout {
            phase: "x",
            attempts: 4,
            per_attempt: Duration::from_millis(250),
        });
        assert!(matches!(t, BmcError::Timeout(d) if d == Duration::from_secs(1)));
        // A socket error before sending: nothing left. After: the BMC may have acted.
        let before = map_error(ipmi::Error::Io(std::io::Error::from(
            std::io::ErrorKind::HostUnreachable,
        )));
        assert_eq!(before.kind(), "unreachable");
        assert!(!before.may_have_acted());
        let after = map_error(ipmi::Error::MaybeSent {
            command: "Chassis Control",
            source: std::io::Error::from(std::io::ErrorKind::HostUnreachable),
        });
        assert_eq!(after.kind(), "maybe_sent");
        assert!(after.may_have_acted());
        assert_eq!(
            map_error(ipmi::Error::AuthFailed("rakp 2")).kind(),
            "unauthorized"
        );
        assert_eq!(
            map_error(ipmi::Error::SessionLimit { status: 1 }).kind(),
            "session_limit"
        );
        assert_eq!(
            map_error(ipmi::Error::CompletionCode {
                command: "Chassis Control",
                code: 0xD5
            })
            .kind(),
            "unsupported"
        );
        assert_eq!(
            map_error(ipmi::Error::CompletionCode {
                command: "Chassis Control",
                code: 0xCC
            })
            .kind(),
            "command"
        );
    }

    #[test]
    fn boot_flags_keep_mode() {
        let flags = ipmi::BootFlags::parse(&[1, 5, 0xA0, 0x04, 0, 0, 0]).unwrap();
        let b = boot_override_from(&flags);
        assert_eq!(b.device, BootDevice::Pxe);
        assert!(b.enabled && !b.persistent);
        assert_eq!(b.mode, Some(BootMode::Uefi));
        assert_eq!(b.raw_target.as_deref(), Some("pxe"));
        // Without the valid bit the EFI bit is not the machine's mode: none is reported.
        for byte1 in [0x00, 0x20] {
            let flags = ipmi::BootFlags::parse(&[1, 5, byte1, 0x04, 0, 0, 0]).unwrap();
            assert_eq!(boot_override_from(&flags).mode, None, "{byte1:#x}");
        }
    }

    fn record(sensor_type: u8, event_reading_type: u8) -> ipmi::SensorRecord {
        ipmi::SensorRecord {
            record_id: 7,
            record_type: 0x01,
            owner_id: 0x20,
            owner_lun: 0,
            number: 0x11,
            entity_id: 0,
            entity_instance: 0,
            capabilities: 3 << 2,
            sensor_type,
            event_reading_type,
            readable_thresholds: 0x38,
            units1: 0,
            base_unit: 1,
            conversion: None,
            sdr_thresholds: Some([0, 0, 0, 80, 90, 100]),
            name: "T".into(),
        }
    }

    #[test]
    fn sdr_sensors_in_the_neutral_form() {
        let linear = ipmi::sdr::Conversion {
            format: 0,
            linearization: 0,
            m: 1,
            b: 0,
            r_exp: 0,
            b_exp: 0,
        };
        let reading = |raw: u8, states: u16| ipmi::SensorReading {
            raw,
            scanning: true,
            unavailable: false,
            states,
        };
        // Fixed thresholds (access 3) come from the record; 85 is past UNC 80: a warning even
        // when the BMC's comparison status says nothing.
        let r = ipmi::SensorRecord {
            conversion: Some(linear),
            ..record(0x01, 0x01)
        };
        let s = sensor_from(&r, Some(reading(85, 0)), None);
        assert_eq!(s.thresholds.upper_non_critical, Some(80.0));
        assert_eq!(s.thresholds.upper_fatal, Some(100.0));
        assert_eq!((s.reading, s.health), (Some(85.0), Some(Health::Warning)));
        assert_eq!(s.source, "sdr:0007/0x11");
        // The BMC's comparison status alone (UC) makes it critical.
        let s = sensor_from(&r, Some(reading(20, 0x10)), None);
        assert_eq!(s.health, Some(Health::Critical));
        // Owned by another controller: not read, listed unavailable.
        let other = ipmi::SensorRecord {
            owner_id: 0x2C,
            ..r.clone()
        };
        let s = sensor_from(&other, None, None);
        assert_eq!(
            (s.state, s.reading, s.health),
            (SensorState::Unavailable, None, None)
        );
        // Power supply states: predictive failure is a warning, input lost critical.
        let psu = ipmi::SensorRecord {
            conversion: None,
            ..record(0x08, 0x6F)
        };
        assert_eq!(
            sensor_from(&psu, Some(reading(0, 0b0101)), None).health,
            Some(Health::Warning)
        );
        assert_eq!(
            sensor_from(&psu, Some(reading(0, 0b1001)), None).health,
            Some(Health::Critical)
        );
        assert_eq!(
            sensor_from(&psu, Some(reading(0, 0b0001)), None).health,
            Some(Health::Ok)
        );
        assert_eq!(sensor_from(&psu, None, None).kind, SensorKind::PowerSupply);
    }

    #[test]
    fn sel_entry_ids_and_times() {
        let mut r = [0u8; 16];
        r[0] = 0x12;
        r[2] = 0x02;
        r[3..7].copy_from_slice(&1_700_000_000u32.to_le_bytes());
        r[10] = 0x01;
        r[12] = 0x01;
        r[13] = 0x09;
        let e = ipmi::SelEntry::parse(&r).unwrap();
        let l = log_entry_from(&e);
        assert_eq!(l.id, "sel:0012");
        assert_eq!(l.log, "sel");
        assert_eq!(l.created.as_deref(), Some("2023-11-14T22:13:20Z"));
        assert_eq!(l.severity.as_deref(), Some("Critical"));
        assert!(l.message.starts_with("Temperature"), "{}", l.message);
    }
}
