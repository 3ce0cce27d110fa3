//! Vendor profiles: resource ids, identity strings, and the behaviours where real BMCs differ.

use crate::media::{MediaInsert, MediaProfile};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// Dell iDRAC 9: `System.Embedded.1`, `iDRAC.Embedded.1`, SEL under the manager, a full
    /// session table answers 400 `RAC0218`.
    Dell,
    /// HPE iLO 5: ids `1`, no `PowerCycle`, absolute session `Location`, IML log on the system.
    Hpe,
    /// Lenovo XCC: PATCH of the system requires `If-Match` (428 without).
    Lenovo,
    /// Supermicro X12: a boot PATCH that omits `BootSourceOverrideMode` resets it to Legacy.
    Supermicro,
}

impl Vendor {
    pub const ALL: [Vendor; 4] = [
        Vendor::Dell,
        Vendor::Hpe,
        Vendor::Lenovo,
        Vendor::Supermicro,
    ];
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Dell => "dell",
            Vendor::Hpe => "hpe",
            Vendor::Lenovo => "lenovo",
            Vendor::Supermicro => "supermicro",
        })
    }
}

impl FromStr for Vendor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "dell" => Ok(Vendor::Dell),
            "hpe" => Ok(Vendor::Hpe),
            "lenovo" => Ok(Vendor::Lenovo),
            "supermicro" => Ok(Vendor::Supermicro),
            other => Err(format!("unknown vendor profile {other:?}")),
        }
    }
}

/// Static facts of a profile.
#[derive(Clone, Debug)]
pub struct Profile {
    pub vendor: Vendor,
    pub vendor_name: &'static str,
    pub manufacturer: &'static str,
    pub model: &'static str,
    pub sku_prefix: &'static str,
    pub system_id: &'static str,
    pub manager_id: &'static str,
    pub chassis_id: &'static str,
    pub bios_version: &'static str,
    pub bmc_model: &'static str,
    pub bmc_firmware: &'static str,
    pub cpu_model: &'static str,
    pub cpu_manufacturer: &'static str,
    pub cores: u32,
    pub sockets: u32,
    pub dimm_mib: u64,
    pub dimms: u32,
    pub nics: u32,
    pub drives: u32,
    /// `(resource kind, log id)`: where the event log lives (`Systems` or `Managers`).
    pub log: (&'static str, &'static str),
    pub reset_types: &'static [&'static str],
    pub requires_if_match: bool,
    pub boot_mode_reset_to_legacy: bool,
    pub absolute_session_location: bool,
    pub dell_session_limit_error: bool,
    pub media: MediaProfile,
}

const FULL_RESET: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PushPowerButton",
    "PowerCycle",
];
const NO_CYCLE: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "PushPowerButton",
];

impl Profile {
    pub fn of(vendor: Vendor) -> Profile {
        match vendor {
            Vendor::Dell => Profile {
                vendor,
                vendor_name: "Dell",
                manufacturer: "Dell Inc.",
                model: "PowerEdge R650",
                sku_prefix: "DL",
                system_id: "System.Embedded.1",
                manager_id: "iDRAC.Embedded.1",
                chassis_id: "System.Embedded.1",
                bios_version: "1.13.2",
                bmc_model: "14G Monolithic",
                bmc_firmware: "7.00.00.172",
                cpu_model: "Intel(R) Xeon(R) Gold 6330 CPU @ 2.00GHz",
                cpu_manufacturer: "Intel",
                cores: 28,
                sockets: 2,
                dimm_mib: 32768,
                dimms: 8,
                nics: 2,
                drives: 2,
                log: ("Managers", "Sel"),
                reset_types: FULL_RESET,
                requires_if_match: false,
                boot_mode_reset_to_legacy: false,
                absolute_session_location: false,
                dell_session_limit_error: true,
                media: MediaProfile {
                    // iDRAC 9 from firmware 6: under the system.
                    owner: "Systems",
                    devices: &[("1", &["CD", "DVD"]), ("2", &["USBStick"])],
                    insert: MediaInsert::Actions,
                },
            },
            Vendor::Hpe => Profile {
                vendor,
                vendor_name: "HPE",
                manufacturer: "HPE",
                model: "ProLiant DL360 Gen10 Plus",
                sku_prefix: "P",
                system_id: "1",
                manager_id: "1",
                chassis_id: "1",
                bios_version: "U46 v1.82 (10/19/2023)",
                bmc_model: "iLO 5",
                bmc_firmware: "iLO 5 v3.00",
                cpu_model: "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz",
                cpu_manufacturer: "Intel(R) Corporation",
                cores: 16,
                sockets: 2,
                dimm_mib: 16384,
                dimms: 8,
                nics: 4,
                drives: 2,
                log: ("Systems", "IML"),
                reset_types: NO_CYCLE,
                requires_if_match: false,
                boot_mode_reset_to_legacy: false,
                absolute_session_location: true,
                dell_session_limit_error: false,
                media: MediaProfile {
                    owner: "Managers",
                    devices: &[("1", &["Floppy", "USBStick"]), ("2", &["CD", "DVD"])],
                    insert: MediaInsert::Actions,
                },
            },
            Vendor::Lenovo => Profile {
                vendor,
                vendor_name: "Lenovo",
                manufacturer: "Lenovo",
                model: "ThinkSystem SR650 V2",
                sku_prefix: "7Z73",
                system_id: "1",
                manager_id: "1",
                chassis_id: "1",
                bios_version: "AFE124H-3.10",
                bmc_model: "Lenovo XClarity Controller",
                bmc_firmware: "AFBT58J 6.60",
                cpu_model: "Intel(R) Xeon(R) Gold 5318Y CPU @ 2.10GHz",
                cpu_manufacturer: "Intel(R) Corporation",
                cores: 24,
                sockets: 2,
                dimm_mib: 32768,
                dimms: 4,
                nics: 2,
                drives: 2,
                log: ("Systems", "PlatformLog"),
                reset_types: FULL_RESET,
                requires_if_match: true,
                boot_mode_reset_to_legacy: false,
                absolute_session_location: false,
                dell_session_limit_error: false,
                media: MediaProfile {
                    owner: "Managers",
                    devices: &[("EXT1", &["CD", "DVD"])],
                    insert: MediaInsert::Patch,
                },
            },
            Vendor::Supermicro => Profile {
                vendor,
                vendor_name: "Supermicro",
                manufacturer: "Supermicro",
                model: "SYS-620U-TNR",
                sku_prefix: "SYS",
                system_id: "1",
                manager_id: "1",
                chassis_id: "1",
                bios_version: "1.4b",
                bmc_model: "ASPEED",
                bmc_firmware: "01.01.06",
                cpu_model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
                cpu_manufacturer: "Intel(R) Corporation",
                cores: 32,
                sockets: 2,
                dimm_mib: 65536,
                dimms: 4,
                nics: 2,
                drives: 1,
                log: ("Managers", "Log1"),
                reset_types: FULL_RESET,
                requires_if_match: false,
                boot_mode_reset_to_legacy: true,
                absolute_session_location: false,
                dell_session_limit_error: false,
                media: MediaProfile {
                    owner: "Managers",
                    devices: &[("CD1", &["CD", "DVD"])],
                    insert: MediaInsert::ActionsImageOnly,
                },
            },
        }
    }
}
