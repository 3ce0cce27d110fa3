//! Vendor detection and the few places where vendors differ in ways that matter.
//!
//! | vendor | difference | handling |
//! | --- | --- | --- |
//! | Dell iDRAC | session table of a few entries; a full table answers `RAC0218` | mapped to `SessionLimit`; one reused session per BMC |
//! | HPE iLO | no `PowerCycle` ResetType; absolute `Location` for sessions | `cycle` = `ForceOff`, wait for `Off`, `On`; links reduced to their path |
//! | Lenovo XCC | PATCH of the system needs `If-Match` (428 without) | ETag sent when known; on 412/428 re-read and retry once |
//! | Supermicro | a boot PATCH without `BootSourceOverrideMode` resets the mode to Legacy | the detected mode is restated |

use serde_json::Value;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    Dell,
    Hpe,
    Lenovo,
    Supermicro,
    Generic,
}

impl Vendor {
    /// From the service root (`Vendor`, `Oem` keys) and, when known, the system manufacturer.
    pub fn detect(root: &Value, manufacturer: Option<&str>) -> Self {
        let mut hints: Vec<String> = Vec::new();
        if let Some(v) = root.get("Vendor").and_then(Value::as_str) {
            hints.push(v.to_ascii_lowercase());
        }
        if let Some(oem) = root.get("Oem").and_then(Value::as_object) {
            hints.extend(oem.keys().map(|k| k.to_ascii_lowercase()));
        }
        if let Some(m) = manufacturer {
            hints.push(m.to_ascii_lowercase());
        }
        for h in &hints {
            if h.contains("dell") {
                return Vendor::Dell;
            }
            if h == "hpe" || h == "hp" || h.contains("hewlett") {
                return Vendor::Hpe;
            }
            if h.contains("lenovo") {
                return Vendor::Lenovo;
            }
            if h.contains("supermicro") {
                return Vendor::Supermicro;
            }
        }
        Vendor::Generic
    }

    /// Whether a boot-override PATCH must restate the current mode to keep it.
    pub fn restate_boot_mode(&self) -> bool {
        matches!(self, Vendor::Supermicro)
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Dell => "dell",
            Vendor::Hpe => "hpe",
            Vendor::Lenovo => "lenovo",
            Vendor::Supermicro => "supermicro",
            Vendor::Generic => "generic",
        })
    }
}
