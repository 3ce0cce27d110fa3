//! The Equinix Metal API's answers as ingot reads them: the first byte picks the wire type, the
//! rest is the body. A device is also mapped to the cloud-neutral server.
#![no_main]

use ingot_metal::equinix::{EquinixMetal, server, wire};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    match pick % 9 {
        0 => {
            if let Ok(d) = serde_json::from_slice::<wire::Device>(body) {
                let s = server(&d);
                let _ = EquinixMetal::device_id(&s.id);
            }
        }
        1 => {
            if let Ok(l) = serde_json::from_slice::<wire::DeviceList>(body) {
                l.devices.iter().for_each(|d| drop(server(d)));
            }
        }
        2 => drop(serde_json::from_slice::<wire::VlanBatch>(body)),
        3 => drop(serde_json::from_slice::<wire::VirtualNetworkList>(body)),
        4 => drop(serde_json::from_slice::<wire::PlanList>(body)),
        5 => drop(serde_json::from_slice::<wire::MetroList>(body)),
        6 => drop(serde_json::from_slice::<wire::CapacityList>(body)),
        7 => {
            if let Ok(e) = serde_json::from_slice::<wire::ApiErrorBody>(body) {
                let _ = e.message();
            }
        }
        _ => drop(serde_json::from_slice::<wire::Port>(body)),
    }
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = EquinixMetal::device_id(text);
    }
});
