//! RMCP+ datagrams as a BMC (or anyone on the network) may send them: the session header, the
//! integrity trailer, the confidentiality trailer and the IPMI message inside.
#![no_main]

use ingot_ipmi::CipherSuite;
use ingot_ipmi::fuzzing::{Keys, decode_packet, decode_response};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static KEYS: LazyLock<[Keys; 2]> = LazyLock::new(|| {
    [CipherSuite::Suite3, CipherSuite::Suite17]
        .map(|s| Keys::derive(s, &[0x5A; 32]).expect("fixed session keys derive"))
});

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = decode_packet(data, None) {
        assert!(
            !p.authenticated,
            "an authenticated packet outside a session"
        );
        let _ = decode_response(&p.payload);
    }
    for keys in KEYS.iter() {
        if let Ok(p) = decode_packet(data, Some(keys)) {
            let _ = decode_response(&p.payload);
        }
    }
    // The IPMI message decoder on its own, and the decryption of any payload.
    if let Ok(r) = decode_response(data) {
        assert_eq!(r.data.len(), data.len() - 8);
    }
    let _ = KEYS[0].decrypt(data);
});
