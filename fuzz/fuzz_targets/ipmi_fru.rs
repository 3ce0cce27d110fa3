//! FRU inventory images (the common header, the chassis, board and product areas and their
//! type/length-encoded fields) as Read FRU Data returns them.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(fru) = ingot_ipmi::fru::parse(data) {
        let _ = format!("{fru:?}");
    }
});
