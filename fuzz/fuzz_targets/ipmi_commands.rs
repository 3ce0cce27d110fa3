//! The command responses ingot decodes: SEL records, boot flags (Get System Boot Options
//! parameter 5), Get Device ID and Get Chassis Status.
#![no_main]

use ingot_ipmi::{BootFlags, ChassisStatus, DeviceId, SelEntry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match SelEntry::parse(data) {
        Ok(e) => {
            assert!(data.len() >= 16);
            assert_eq!(e.stable_id().len(), 13);
        }
        Err(_) => assert!(data.len() < 16),
    }
    if let Ok(f) = BootFlags::parse(data) {
        assert_eq!(f.raw[..], data[2..7]);
        let _ = f.device.selector();
    }
    if let Ok(d) = DeviceId::parse(data) {
        let _ = d.firmware_version();
    }
    let _ = ChassisStatus::parse(data);
});
