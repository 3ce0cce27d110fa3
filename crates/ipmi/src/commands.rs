//! Typed IPMI commands: Get Device ID, chassis status and control, system
//! boot options (parameter 5), FRU inventory and the System Event Log.

use crate::client::{Client, check};
use crate::error::{Error, Result};
use crate::fru::{self, Fru};

const NETFN_CHASSIS: u8 = 0x00;
const NETFN_APP: u8 = 0x06;
const NETFN_STORAGE: u8 = 0x0A;

/// Get Device ID response (IPMI 2.0 §20.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceId {
    /// Device ID.
    pub device_id: u8,
    /// Device revision (low nibble).
    pub device_revision: u8,
    /// The device provides Device SDRs.
    pub provides_sdrs: bool,
    /// False while the firmware is updating / self-initialising.
    pub device_available: bool,
    /// Major firmware revision (binary).
    pub firmware_major: u8,
    /// Minor firmware revision, BCD as sent (0x01 = ".01").
    pub firmware_minor_bcd: u8,
    /// IPMI version (major, minor); 2.0 is (2, 0).
    pub ipmi_version: (u8, u8),
    /// Additional device support bits.
    pub additional_support: u8,
    /// IANA manufacturer id (20 bits).
    pub manufacturer_id: u32,
    /// Product id.
    pub product_id: u16,
    /// Auxiliary firmware revision, when sent.
    pub aux_firmware: Option<[u8; 4]>,
}

impl DeviceId {
    /// Firmware revision as ipmitool prints it, e.g. "1.01".
    pub fn firmware_version(&self) -> String {
        format!("{}.{:02x}", self.firmware_major, self.firmware_minor_bcd)
    }

    /// Parse the response data (after the completion code).
    pub fn parse(d: &[u8]) -> Result<Self> {
        if d.len() < 11 {
            return Err(Error::Protocol(format!(
                "Get Device ID returned {} bytes",
                d.len()
            )));
        }
        Ok(DeviceId {
            device_id: d[0],
            device_revision: d[1] & 0x0F,
            provides_sdrs: d[1] & 0x80 != 0,
            device_available: d[2] & 0x80 == 0,
            firmware_major: d[2] & 0x7F,
            firmware_minor_bcd: d[3],
            ipmi_version: (d[4] & 0x0F, d[4] >> 4),
            additional_support: d[5],
            manufacturer_id: u32::from_le_bytes([d[6], d[7], d[8] & 0x0F, 0]),
            product_id: u16::from_le_bytes([d[9], d[10]]),
            aux_firmware: d.get(11..15).map(|a| [a[0], a[1], a[2], a[3]]),
        })
    }
}

/// Power restore policy from Get Chassis Status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePolicy {
    /// Stay off after AC returns.
    AlwaysOff,
    /// Restore the previous state.
    Previous,
    /// Always power up.
    AlwaysOn,
    /// Not reported.
    Unknown,
}

/// Get Chassis Status response (§28.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChassisStatus {
    /// System power is on.
    pub power_on: bool,
    /// Power overload.
    pub power_overload: bool,
    /// Interlock active.
    pub interlock: bool,
    /// Main power fault.
    pub power_fault: bool,
    /// Power control fault.
    pub power_control_fault: bool,
    /// Power restore policy.
    pub restore_policy: RestorePolicy,
    /// Last power event bits.
    pub last_power_event: u8,
    /// Misc chassis state bits (intrusion, lockout, drive fault, fan fault, identify).
    pub misc: u8,
    /// Front panel button capabilities, when sent.
    pub front_panel: Option<u8>,
}

impl ChassisStatus {
    /// Parse the response data.
    pub fn parse(d: &[u8]) -> Result<Self> {
        if d.len() < 3 {
            return Err(Error::Protocol(format!(
                "Get Chassis Status returned {} bytes",
                d.len()
            )));
        }
        Ok(ChassisStatus {
            power_on: d[0] & 0x01 != 0,
            power_overload: d[0] & 0x02 != 0,
            interlock: d[0] & 0x04 != 0,
            power_fault: d[0] & 0x08 != 0,
            power_control_fault: d[0] & 0x10 != 0,
            restore_policy: match (d[0] >> 5) & 0x03 {
                0 => RestorePolicy::AlwaysOff,
                1 => RestorePolicy::Previous,
                2 => RestorePolicy::AlwaysOn,
                _ => RestorePolicy::Unknown,
            },
            last_power_event: d[1],
            misc: d[2],
            front_panel: d.get(3).copied(),
        })
    }
}

/// Chassis Control sub-commands (§28.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChassisControl {
    /// Power down (hard off, no OS involvement).
    PowerDown = 0,
    /// Power up.
    PowerUp = 1,
    /// Power cycle: off, a BMC-defined pause (≥ 1 s), on.
    PowerCycle = 2,
    /// Hard reset (reset line, power stays on).
    HardReset = 3,
    /// Pulse a diagnostic interrupt (NMI).
    DiagnosticInterrupt = 4,
    /// Soft shutdown via ACPI (emulated overtemperature / power button).
    SoftShutdown = 5,
}

/// Power actions as the rest of ingot names them (the rufio vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    /// `on` → Chassis Control "power up"; no-op when already on.
    On,
    /// `off` (hard) → "power down"; no-op when already off.
    Off,
    /// `soft` → "soft shutdown" (ACPI); no-op when already off.
    Soft,
    /// `reset` → "hard reset".
    Reset,
    /// `cycle` → "power cycle".
    Cycle,
}

impl PowerAction {
    /// The Chassis Control sub-command used for this action.
    pub fn chassis_control(self) -> ChassisControl {
        match self {
            PowerAction::On => ChassisControl::PowerUp,
            PowerAction::Off => ChassisControl::PowerDown,
            PowerAction::Soft => ChassisControl::SoftShutdown,
            PowerAction::Reset => ChassisControl::HardReset,
            PowerAction::Cycle => ChassisControl::PowerCycle,
        }
    }
}

/// Boot device selector (boot flags byte 2, bits 5:2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootDevice {
    /// No override.
    NoOverride,
    /// Force PXE.
    Pxe,
    /// Force boot from the default hard drive.
    Disk,
    /// Hard drive, safe mode.
    DiskSafeMode,
    /// Diagnostic partition.
    Diagnostic,
    /// CD/DVD.
    Cdrom,
    /// BIOS / firmware setup.
    BiosSetup,
    /// Remote (redirected) floppy / primary removable media.
    RemoteFloppy,
    /// Remote (redirected) CD/DVD.
    RemoteCdrom,
    /// Primary remote media.
    RemoteMedia,
    /// Remote (redirected) hard drive.
    RemoteDisk,
    /// Floppy / primary removable media.
    Floppy,
    /// A selector value this crate has no name for.
    Other(u8),
}

impl BootDevice {
    /// The 4-bit selector.
    pub fn selector(self) -> u8 {
        match self {
            BootDevice::NoOverride => 0x0,
            BootDevice::Pxe => 0x1,
            BootDevice::Disk => 0x2,
            BootDevice::DiskSafeMode => 0x3,
            BootDevice::Diagnostic => 0x4,
            BootDevice::Cdrom => 0x5,
            BootDevice::BiosSetup => 0x6,
            BootDevice::RemoteFloppy => 0x7,
            BootDevice::RemoteCdrom => 0x8,
            BootDevice::RemoteMedia => 0x9,
            BootDevice::RemoteDisk => 0xB,
            BootDevice::Floppy => 0xF,
            BootDevice::Other(v) => v & 0x0F,
        }
    }

    /// Inverse of [`Self::selector`].
    pub fn from_selector(v: u8) -> Self {
        match v & 0x0F {
            0x0 => BootDevice::NoOverride,
            0x1 => BootDevice::Pxe,
            0x2 => BootDevice::Disk,
            0x3 => BootDevice::DiskSafeMode,
            0x4 => BootDevice::Diagnostic,
            0x5 => BootDevice::Cdrom,
            0x6 => BootDevice::BiosSetup,
            0x7 => BootDevice::RemoteFloppy,
            0x8 => BootDevice::RemoteCdrom,
            0x9 => BootDevice::RemoteMedia,
            0xB => BootDevice::RemoteDisk,
            0xF => BootDevice::Floppy,
            o => BootDevice::Other(o),
        }
    }
}

/// Firmware boot mode (boot flags byte 1, bit 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootMode {
    /// PC-compatible (legacy BIOS) boot.
    Legacy,
    /// EFI boot.
    Uefi,
}

/// Whether the override applies to the next boot only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootPersistence {
    /// Next boot only (the BMC clears the flags after it).
    Once,
    /// All future boots.
    Persistent,
}

/// Boot flags (system boot options parameter 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootFlags {
    /// Byte 1 bit 7: the flags are valid (an override is pending).
    pub valid: bool,
    /// Byte 1 bit 6.
    pub persistence: BootPersistence,
    /// Byte 1 bit 5.
    pub mode: BootMode,
    /// Byte 2 bits 5:2.
    pub device: BootDevice,
    /// The five data bytes as read.
    pub raw: [u8; 5],
}

impl BootFlags {
    /// Parse the Get System Boot Options data for parameter 5.
    pub fn parse(d: &[u8]) -> Result<Self> {
        if d.len() < 7 || d[1] & 0x7F != 5 {
            return Err(Error::Protocol(format!(
                "boot flags response of {} bytes",
                d.len()
            )));
        }
        let raw = [d[2], d[3], d[4], d[5], d[6]];
        Ok(Self::from_raw(raw))
    }

    /// The firmware boot mode, if the BMC reports one: only flags with the
    /// valid bit set say which mode the next boot uses. Without it the EFI
    /// bit is whatever the BMC left there (often 0, "PC compatible", on a UEFI
    /// machine whose one-time override was used up), not the machine's mode.
    pub fn reported_mode(&self) -> Option<BootMode> {
        self.valid.then_some(self.mode)
    }

    fn from_raw(raw: [u8; 5]) -> Self {
        BootFlags {
            valid: raw[0] & 0x80 != 0,
            persistence: if raw[0] & 0x40 != 0 {
                BootPersistence::Persistent
            } else {
                BootPersistence::Once
            },
            mode: if raw[0] & 0x20 != 0 {
                BootMode::Uefi
            } else {
                BootMode::Legacy
            },
            device: BootDevice::from_selector(raw[1] >> 2),
            raw,
        }
    }
}

/// Get SEL Info response (§31.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelInfo {
    /// SEL version (0x51 for IPMI 1.5/2.0).
    pub version: u8,
    /// Number of entries.
    pub entries: u16,
    /// Free space in bytes.
    pub free_bytes: u16,
    /// Most recent addition timestamp.
    pub last_add: u32,
    /// Most recent erase timestamp.
    pub last_erase: u32,
    /// Operation support bits (bit 7 overflow, bit 1 reserve supported).
    pub operations: u8,
}

impl SelInfo {
    /// Reserve SEL is supported.
    pub fn supports_reserve(&self) -> bool {
        self.operations & 0x02 != 0
    }
}

/// One SEL record (16 bytes, §32).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelEntry {
    /// Record id.
    pub record_id: u16,
    /// Record type: 0x02 system event, 0xC0–0xDF OEM timestamped, 0xE0–0xFF OEM.
    pub record_type: u8,
    /// Seconds since 1970 (BMC clock), for timestamped records.
    pub timestamp: Option<u32>,
    /// Generator id (system events).
    pub generator_id: u16,
    /// Sensor type (system events).
    pub sensor_type: u8,
    /// Sensor number (system events).
    pub sensor_number: u8,
    /// Deassertion (true) or assertion (false).
    pub deassertion: bool,
    /// Event/reading type code.
    pub event_type: u8,
    /// Event data 1–3.
    pub event_data: [u8; 3],
    /// The record as read.
    pub raw: [u8; 16],
}

impl SelEntry {
    /// Parse a 16-byte record.
    pub fn parse(r: &[u8]) -> Result<Self> {
        let r: [u8; 16] = r
            .get(..16)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| Error::Protocol("SEL record shorter than 16 bytes".into()))?;
        let record_type = r[2];
        let timestamp = (record_type < 0xE0).then(|| u32::from_le_bytes([r[3], r[4], r[5], r[6]]));
        Ok(SelEntry {
            record_id: u16::from_le_bytes([r[0], r[1]]),
            record_type,
            timestamp,
            generator_id: u16::from_le_bytes([r[7], r[8]]),
            sensor_type: r[10],
            sensor_number: r[11],
            deassertion: r[12] & 0x80 != 0,
            event_type: r[12] & 0x7F,
            event_data: [r[13], r[14], r[15]],
            raw: r,
        })
    }

    /// An id that is stable across reads and distinguishes a record from a
    /// later one that reuses its record id after the SEL was cleared:
    /// `<record id>-<timestamp>` in hex (the timestamp is 0 for untimestamped
    /// OEM records).
    pub fn stable_id(&self) -> String {
        format!("{:04x}-{:08x}", self.record_id, self.timestamp.unwrap_or(0))
    }
}

/// Inventory assembled from Get Device ID and FRU device 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inventory {
    /// Get Device ID.
    pub device: DeviceId,
    /// FRU 0, when the BMC has one.
    pub fru: Option<Fru>,
}

/// Largest FRU read we ask for first; shrunk when the BMC says it is too big.
const FRU_CHUNK: u8 = 32;
/// Bound on SEL iteration (the record id space).
const MAX_SEL_ENTRIES: usize = 0xFFFF;

impl Client {
    /// Get Device ID.
    pub async fn device_id(&self) -> Result<DeviceId> {
        let r = self.call("Get Device ID", NETFN_APP, 0x01, &[]).await?;
        DeviceId::parse(&check("Get Device ID", r)?)
    }

    /// Get Chassis Status.
    pub async fn chassis_status(&self) -> Result<ChassisStatus> {
        let r = self
            .call("Get Chassis Status", NETFN_CHASSIS, 0x01, &[])
            .await?;
        ChassisStatus::parse(&check("Get Chassis Status", r)?)
    }

    /// Chassis Control.
    pub async fn chassis_control(&self, c: ChassisControl) -> Result<()> {
        // Sent once: never retransmitted, nor repeated on a new session after a
        // timeout. The first copy may have been carried out (a second power cycle
        // is not harmless).
        let r = self
            .call_unrepeated("Chassis Control", NETFN_CHASSIS, 0x02, &[c as u8])
            .await?;
        check("Chassis Control", r).map(|_| ())
    }

    /// Perform a power action (see [`PowerAction`] for the mapping). `On`,
    /// `Off` and `Soft` read the power state first and send nothing when the
    /// machine is already there; `Reset` and `Cycle` are always sent (a BMC
    /// may refuse `Cycle` while off with completion code 0xD5).
    /// Returns whether a Chassis Control command was sent.
    pub async fn power(&self, action: PowerAction) -> Result<bool> {
        let wanted_on = match action {
            PowerAction::On => Some(true),
            PowerAction::Off | PowerAction::Soft => Some(false),
            PowerAction::Reset | PowerAction::Cycle => None,
        };
        if let Some(on) = wanted_on
            && self.chassis_status().await?.power_on == on
        {
            return Ok(false);
        }
        self.chassis_control(action.chassis_control()).await?;
        Ok(true)
    }

    /// Read boot flags (system boot options parameter 5).
    pub async fn boot_flags(&self) -> Result<BootFlags> {
        let r = self
            .call("Get System Boot Options", NETFN_CHASSIS, 0x09, &[5, 0, 0])
            .await?;
        BootFlags::parse(&check("Get System Boot Options", r)?)
    }

    /// Set a boot device override. `mode: None` keeps the firmware boot mode
    /// the BMC currently reports (read first), so an override never flips a
    /// UEFI machine to legacy boot by accident. Flags without the valid bit
    /// report no mode (many BMCs clear the whole byte once the override is
    /// used): the mode is then [`BootMode::Uefi`], see [`BootFlags::reported_mode`].
    /// Returns the flags read back.
    pub async fn set_boot_device(
        &self,
        device: BootDevice,
        persistence: BootPersistence,
        mode: Option<BootMode>,
    ) -> Result<BootFlags> {
        let mode = match mode {
            Some(m) => m,
            None => self
                .boot_flags()
                .await?
                .reported_mode()
                .unwrap_or(BootMode::Uefi),
        };
        let mut b1 = 0x80; // valid
        if persistence == BootPersistence::Persistent {
            b1 |= 0x40;
        }
        if mode == BootMode::Uefi {
            b1 |= 0x20;
        }
        // Parameter 3 first (as Ironic and pyghmi do): without bit 3 the BMC
        // clears the valid bit 60 s after it is set, so a one-time override
        // set more than a minute before the boot would be silently lost. A
        // BMC that does not know the parameter still gets the override.
        let r = self
            .call_once("Set System Boot Options", NETFN_CHASSIS, 0x08, &[3, 0x08])
            .await?;
        if r.completion != 0 {
            tracing::debug!(
                code = r.completion,
                "the BMC refused boot options parameter 3 (valid bit clearing)"
            );
        }
        let data = [5, b1, device.selector() << 2, 0, 0, 0];
        let r = self
            .call_once("Set System Boot Options", NETFN_CHASSIS, 0x08, &data)
            .await?;
        check("Set System Boot Options", r)?;
        self.boot_flags().await
    }

    /// Get FRU Inventory Area Info: (size in bytes, accessed by words).
    pub async fn fru_area_info(&self, fru_id: u8) -> Result<(u16, bool)> {
        let r = self
            .call(
                "Get FRU Inventory Area Info",
                NETFN_STORAGE,
                0x10,
                &[fru_id],
            )
            .await?;
        let d = check("Get FRU Inventory Area Info", r)?;
        if d.len() < 3 {
            return Err(Error::Protocol("short FRU inventory area info".into()));
        }
        Ok((u16::from_le_bytes([d[0], d[1]]), d[2] & 0x01 != 0))
    }

    /// Read a whole FRU device, in chunks (shrinking them if the BMC asks).
    pub async fn read_fru(&self, fru_id: u8) -> Result<Vec<u8>> {
        let (size, by_words) = self.fru_area_info(fru_id).await?;
        let size = usize::from(size);
        let mut out = Vec::with_capacity(size);
        let mut chunk = FRU_CHUNK;
        while out.len() < size {
            let want = (size - out.len()).min(usize::from(chunk)) as u8;
            let offset = out.len();
            let (off, count) = if by_words {
                (offset / 2, want.div_ceil(2))
            } else {
                (offset, want)
            };
            let off =
                u16::try_from(off).map_err(|_| Error::Protocol("FRU offset overflow".into()))?;
            let [lo, hi] = off.to_le_bytes();
            let r = self
                .call(
                    "Read FRU Data",
                    NETFN_STORAGE,
                    0x11,
                    &[fru_id, lo, hi, count],
                )
                .await?;
            match r.completion {
                0xC8..=0xCA if chunk > 4 => {
                    chunk /= 2;
                    continue;
                }
                _ => {}
            }
            let d = check("Read FRU Data", r)?;
            let got = usize::from(
                *d.first()
                    .ok_or_else(|| Error::Protocol("empty FRU read".into()))?,
            );
            let got = if by_words { got * 2 } else { got };
            let bytes = d
                .get(1..1 + got)
                .ok_or_else(|| Error::Protocol("FRU read shorter than its count".into()))?;
            if bytes.is_empty() {
                return Err(Error::Protocol("FRU read returned no data".into()));
            }
            let room = size - out.len();
            out.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        Ok(out)
    }

    /// Read and parse FRU device `fru_id`.
    pub async fn fru(&self, fru_id: u8) -> Result<Fru> {
        fru::parse(&self.read_fru(fru_id).await?)
    }

    /// Get Device ID plus FRU 0 (absent when the BMC has no FRU device).
    pub async fn inventory(&self) -> Result<Inventory> {
        let device = self.device_id().await?;
        let fru = match self.fru(0).await {
            Ok(f) => Some(f),
            Err(Error::CompletionCode { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(Inventory { device, fru })
    }

    /// Get SEL Info.
    pub async fn sel_info(&self) -> Result<SelInfo> {
        let r = self.call("Get SEL Info", NETFN_STORAGE, 0x40, &[]).await?;
        let d = check("Get SEL Info", r)?;
        if d.len() < 14 {
            return Err(Error::Protocol(format!(
                "Get SEL Info returned {} bytes",
                d.len()
            )));
        }
        Ok(SelInfo {
            version: d[0],
            entries: u16::from_le_bytes([d[1], d[2]]),
            free_bytes: u16::from_le_bytes([d[3], d[4]]),
            last_add: u32::from_le_bytes([d[5], d[6], d[7], d[8]]),
            last_erase: u32::from_le_bytes([d[9], d[10], d[11], d[12]]),
            operations: d[13],
        })
    }

    async fn reserve_sel(&self) -> Result<u16> {
        let r = self.call("Reserve SEL", NETFN_STORAGE, 0x42, &[]).await?;
        let d = check("Reserve SEL", r)?;
        if d.len() < 2 {
            return Err(Error::Protocol("short Reserve SEL response".into()));
        }
        Ok(u16::from_le_bytes([d[0], d[1]]))
    }

    /// Read every SEL entry, first to last. Uses a reservation when the BMC
    /// supports one and restarts (at most three times) if it is cancelled
    /// because the SEL changed mid-read.
    pub async fn sel_entries(&self) -> Result<Vec<SelEntry>> {
        let info = self.sel_info().await?;
        if info.entries == 0 {
            return Ok(Vec::new());
        }
        let mut restarts = 0;
        'restart: loop {
            let reservation = if info.supports_reserve() {
                self.reserve_sel().await?
            } else {
                0
            };
            let mut out = Vec::new();
            let mut seen = std::collections::HashSet::new();
            let mut id: u16 = 0x0000;
            loop {
                let [rl, rh] = reservation.to_le_bytes();
                let [il, ih] = id.to_le_bytes();
                let r = self
                    .call(
                        "Get SEL Entry",
                        NETFN_STORAGE,
                        0x43,
                        &[rl, rh, il, ih, 0, 0xFF],
                    )
                    .await?;
                match r.completion {
                    0xC5 if restarts < 3 => {
                        restarts += 1;
                        continue 'restart;
                    }
                    // Empty SEL or the record vanished (cleared): stop here.
                    0xCB if out.is_empty() || id != 0 => return Ok(out),
                    _ => {}
                }
                let d = check("Get SEL Entry", r)?;
                if d.len() < 18 {
                    return Err(Error::Protocol(format!(
                        "Get SEL Entry returned {} bytes",
                        d.len()
                    )));
                }
                let next = u16::from_le_bytes([d[0], d[1]]);
                let entry = SelEntry::parse(&d[2..])?;
                if !seen.insert(entry.record_id) || out.len() >= MAX_SEL_ENTRIES {
                    return Err(Error::Protocol("SEL record ids loop".into()));
                }
                out.push(entry);
                if next == 0xFFFF {
                    return Ok(out);
                }
                id = next;
            }
        }
    }

    /// Clear the SEL (needs Operator privilege).
    pub async fn clear_sel(&self) -> Result<()> {
        let [rl, rh] = self.reserve_sel().await?.to_le_bytes();
        let r = self
            .call_once(
                "Clear SEL",
                NETFN_STORAGE,
                0x47,
                &[rl, rh, b'C', b'L', b'R', 0xAA],
            )
            .await?;
        check("Clear SEL", r).map(|_| ())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn device_id_parsing() {
        let d = [
            0x20, 0x81, 0x01, 0x23, 0x02, 0xBF, 0x57, 0x01, 0x00, 0x02, 0x0C,
        ];
        let id = DeviceId::parse(&d).unwrap();
        assert_eq!(id.device_id, 0x20);
        assert!(id.provides_sdrs);
        assert_eq!(id.firmware_version(), "1.23");
        assert_eq!(id.ipmi_version, (2, 0));
        assert_eq!(id.manufacturer_id, 0x157);
        assert_eq!(id.product_id, 0x0C02);
        assert_eq!(id.aux_firmware, None);
        assert!(DeviceId::parse(&d[..10]).is_err());
    }

    #[test]
    fn chassis_status_parsing() {
        let s = ChassisStatus::parse(&[0x41, 0x00, 0x00]).unwrap();
        assert!(s.power_on);
        assert_eq!(s.restore_policy, RestorePolicy::AlwaysOn);
        assert!(ChassisStatus::parse(&[1, 0]).is_err());
    }

    #[test]
    fn boot_flag_bits() {
        let f = BootFlags::parse(&[1, 5, 0xE0, 0x04, 0, 0, 0]).unwrap();
        assert!(f.valid);
        assert_eq!(f.persistence, BootPersistence::Persistent);
        assert_eq!(f.mode, BootMode::Uefi);
        assert_eq!(f.device, BootDevice::Pxe);
        let f = BootFlags::parse(&[1, 5, 0x00, 0x18, 0, 0, 0]).unwrap();
        assert_eq!(
            (f.valid, f.mode, f.device),
            (false, BootMode::Legacy, BootDevice::BiosSetup)
        );
        for d in 0..16 {
            assert_eq!(BootDevice::from_selector(d).selector(), d);
        }
    }

    #[test]
    fn sel_record_parsing_and_stable_id() {
        let r = [
            0x34, 0x12, 0x02, 0x78, 0x56, 0x34, 0x12, 0x20, 0x00, 0x04, 0x01, 0x30, 0x81, 0x59,
            0x00, 0x00,
        ];
        let e = SelEntry::parse(&r).unwrap();
        assert_eq!(e.record_id, 0x1234);
        assert_eq!(e.timestamp, Some(0x12345678));
        assert_eq!(
            (e.sensor_type, e.sensor_number, e.event_type),
            (0x01, 0x30, 0x01)
        );
        assert!(e.deassertion);
        assert_eq!(e.stable_id(), "1234-12345678");
        assert!(SelEntry::parse(&r[..15]).is_err());
    }

    #[test]
    fn power_action_mapping() {
        assert_eq!(PowerAction::On.chassis_control() as u8, 1);
        assert_eq!(PowerAction::Off.chassis_control() as u8, 0);
        assert_eq!(PowerAction::Soft.chassis_control() as u8, 5);
        assert_eq!(PowerAction::Reset.chassis_control() as u8, 3);
        assert_eq!(PowerAction::Cycle.chassis_control() as u8, 2);
    }
}
