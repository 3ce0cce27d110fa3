//! `--host` / the BMC address of a Machine or Inventory: `Endpoint::parse`. A parsed address
//! must come back unchanged from its own base URL.
#![no_main]

use ingot_bmc::Endpoint;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let port = data.first().map(|b| u16::from(*b) * 257);
    for port in [None, port] {
        let Ok(e) = Endpoint::parse(text, port) else {
            continue;
        };
        let url = e.base_url();
        assert_eq!(Endpoint::parse(&url, None).as_ref(), Ok(&e), "{url}");
    }
});
