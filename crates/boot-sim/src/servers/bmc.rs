//! A server's BMC as the server itself sees it: its NICs' MACs, its power, what its firmware
//! booted, and the OS rebooting itself. Implemented for both emulated BMCs: bmc-sim's Redfish
//! [`BmcState`] and ipmi-sim's IPMI [`BmcHandle`].

use std::sync::Arc;

use ingot_bmc_sim::BmcState;
use ingot_ipmi_sim::BmcHandle;

/// One start of the server, in Redfish's words whatever the BMC speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBoot {
    /// 1 for the first start, one more for each start after.
    pub count: u64,
    /// What the firmware booted: `Pxe`, `Hdd` (the disk), `Cd`... (Redfish's target names).
    pub device: String,
    /// `UEFI` or `Legacy`.
    pub mode: String,
    /// The power went off (or the server was reset) after this boot.
    pub powered_off: bool,
}

/// A server's BMC as the server sees it.
pub trait ServerBmc: Send + Sync {
    /// The MAC of NIC `nic`, lower case with colons.
    fn mac(&self, nic: u32) -> String;
    /// The power state (`On`, `Off`, or a transition the BMC reports).
    fn power_state(&self) -> String;
    /// The latest start, if the server was ever on.
    fn last_boot(&self) -> Option<ServerBoot>;
    /// The OS reboots the server (no BMC request): off, on again, the firmware boots what the
    /// override says (none left: the disk).
    fn reboot_from_os(&self);
}

impl ServerBmc for Arc<BmcState> {
    fn mac(&self, nic: u32) -> String {
        BmcState::mac(self, nic)
    }

    fn power_state(&self) -> String {
        self.snapshot().power_state
    }

    fn last_boot(&self) -> Option<ServerBoot> {
        BmcState::last_boot(self).map(|b| ServerBoot {
            count: b.count,
            device: b.device,
            mode: b.mode,
            powered_off: b.powered_off_at.is_some(),
        })
    }

    fn reboot_from_os(&self) {
        BmcState::reboot_from_os(self);
    }
}

impl ServerBmc for BmcHandle {
    fn mac(&self, nic: u32) -> String {
        BmcHandle::mac(self, u8::try_from(nic).unwrap_or(u8::MAX))
    }

    fn power_state(&self) -> String {
        if self.power_on() { "On" } else { "Off" }.into()
    }

    fn last_boot(&self) -> Option<ServerBoot> {
        BmcHandle::last_boot(self).map(|b| ServerBoot {
            count: b.count,
            device: redfish_device(&b.device).into(),
            mode: if b.efi { "UEFI" } else { "Legacy" }.into(),
            powered_off: b.powered_off,
        })
    }

    fn reboot_from_os(&self) {
        BmcHandle::reboot_from_os(self);
    }
}

/// Redfish's `BootSourceOverrideTarget` for ipmitool's name of a boot device selector.
fn redfish_device(ipmi: &str) -> &str {
    match ipmi {
        "pxe" => "Pxe",
        "disk" | "safe" => "Hdd",
        "cdrom" | "remote-cdrom" => "Cd",
        "bios" => "BiosSetup",
        "diag" => "Diags",
        "floppy" | "remote-floppy" => "Floppy",
        "remote-media" | "remote-disk" => "RemoteDrive",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::redfish_device;

    #[test]
    fn ipmi_devices_read_as_redfish_targets() {
        assert_eq!(redfish_device("pxe"), "Pxe");
        assert_eq!(redfish_device("disk"), "Hdd");
        assert_eq!(redfish_device("safe"), "Hdd");
        assert_eq!(redfish_device("bios"), "BiosSetup");
        assert_eq!(redfish_device("other"), "other");
    }
}
