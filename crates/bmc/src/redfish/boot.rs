//! The boot source override: read from the system, and set by the smallest PATCH that keeps
//! the boot mode (target and enabled; the mode only when asked for and different, or when the
//! vendor resets it unless restated), carrying the ETag where the BMC asks for one. The
//! override is read back: a mode other than the one kept or asked for is
//! [`BmcError::BootModeNotKept`].

use super::RedfishClient;
use super::json::{list, string};
use crate::error::BmcError;
use crate::types::*;
use reqwest::Method;
use serde_json::{Value, json};

impl RedfishClient {
    /// Sets the boot source override (see [`crate::Bmc::set_boot_override`]).
    pub(super) async fn set_boot(&self, request: BootRequest) -> Result<BootOverride, BmcError> {
        let (path, system, etag) = self.system().await?;
        let vendor = self.vendor_of(&system).await;
        let current = parse_boot(&system);
        let boot = system
            .get("Boot")
            .ok_or_else(|| BmcError::Unsupported("Boot override (no Boot property)".into()))?;
        let target = request.device.redfish_target();
        if let Some(allowed) = boot.get("BootSourceOverrideTarget@Redfish.AllowableValues")
            && !list(allowed).iter().any(|a| a == target)
        {
            return Err(BmcError::Unsupported(format!("boot target {target}")));
        }
        let enabled = match (request.device, request.persistent) {
            (BootDevice::None, _) => "Disabled",
            (_, true) => "Continuous",
            (_, false) => "Once",
        };
        let mut patch = serde_json::Map::new();
        patch.insert("BootSourceOverrideTarget".into(), target.into());
        patch.insert("BootSourceOverrideEnabled".into(), enabled.into());
        // The mode is only sent when asked for and different, or when the vendor resets it
        // unless it is restated (Supermicro): never flipped by accident.
        let mode = match (request.mode, current.mode) {
            (Some(want), Some(have)) if want != have => Some(want),
            (Some(want), None) => Some(want),
            (_, Some(have)) if vendor.restate_boot_mode() => Some(have),
            _ => None,
        };
        if let Some(m) = mode {
            patch.insert("BootSourceOverrideMode".into(), m.redfish().into());
        }
        let body = json!({"Boot": Value::Object(patch)});
        let mut if_match = etag;
        for attempt in 0..2 {
            let headers: Vec<(&'static str, String)> = match &if_match {
                Some(e) => vec![("If-Match", e.clone())],
                None => Vec::new(),
            };
            match self
                .request(Method::PATCH, &path, Some(&body), &headers)
                .await
            {
                Ok(_) => break,
                // Stale ETag, or an ETag is required (Lenovo XCC): read it again, once.
                Err(BmcError::Http {
                    status: 412 | 428, ..
                }) if attempt == 0 => {
                    // A weak ETag (`W/"..."`) never matches under the strong comparison
                    // If-Match calls for; some BMCs hand out weak ones all the same.
                    let (_, fresh) = self.get_with_etag(&path).await?;
                    if_match = Some(match fresh {
                        Some(e) if !e.starts_with("W/") => e,
                        _ => "*".to_owned(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        let after = parse_boot(&self.get(&path).await?);
        // The mode kept (or asked for) must still be the one reported. A BMC that changed it
        // anyway is reported, never PATCHed again to force it: it changed it once already.
        if let (Some(wanted), Some(now)) = (request.mode.or(current.mode), after.mode)
            && wanted != now
        {
            return Err(BmcError::BootModeNotKept {
                before: current.mode,
                wanted,
                after: now,
            });
        }
        Ok(after)
    }
}

pub(super) fn parse_boot(system: &Value) -> BootOverride {
    let boot = system.get("Boot").cloned().unwrap_or(Value::Null);
    let target = string(&boot, "BootSourceOverrideTarget");
    let enabled = string(&boot, "BootSourceOverrideEnabled");
    BootOverride {
        device: target
            .as_deref()
            .map(BootDevice::from_redfish)
            .unwrap_or(BootDevice::None),
        persistent: enabled.as_deref() == Some("Continuous"),
        enabled: matches!(enabled.as_deref(), Some("Once") | Some("Continuous")),
        mode: string(&boot, "BootSourceOverrideMode")
            .as_deref()
            .and_then(BootMode::from_redfish),
        raw_target: target,
    }
}
