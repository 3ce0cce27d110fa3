//! Session setup as the BMC answers it: Open Session Response, RAKP 2 and RAKP 4. The first byte
//! picks the message and the suite; when its top bit is set the target writes the correct key
//! exchange code / integrity check value into the message (a fuzzer cannot guess an HMAC), so
//! the paths past the authentication are fuzzed too.
#![no_main]

use ingot_ipmi::fuzzing::{Handshake, parse_open_session_response};
use ingot_ipmi::{CipherSuite, Privilege};
use libfuzzer_sys::fuzz_target;

const TAG: u8 = 0x2A;
const CONSOLE_SID: u32 = 0xA0B1_C2D3;
const KUID: [u8; 20] = *b"fuzzing-password\0\0\0\0";

fuzz_target!(|data: &[u8]| {
    let Some((&head, p)) = data.split_first() else {
        return;
    };
    let suite = if head & 1 == 0 {
        CipherSuite::Suite3
    } else {
        CipherSuite::Suite17
    };
    let fix = head & 0x80 != 0;
    let hs = Handshake::new(
        suite,
        CONSOLE_SID,
        0x0102_0304,
        [7; 16],
        Privilege::Administrator,
        b"admin",
    );
    match ((head >> 1) & 0x3F) % 3 {
        0 => {
            if let Ok(Some(sid)) = parse_open_session_response(p, TAG, CONSOLE_SID, suite) {
                assert_ne!(sid, 0, "session id 0 accepted");
            }
        }
        1 => {
            let mut p = p.to_vec();
            if fix && p.len() >= 40 {
                let rc: [u8; 16] = p[8..24].try_into().expect("16 bytes");
                let guid: [u8; 16] = p[24..40].try_into().expect("16 bytes");
                let code = hs.rakp2_code(&KUID, &rc, &guid).expect("HMAC");
                p.truncate(40);
                p.extend_from_slice(&code);
            }
            let got = hs.check_rakp2(&p, TAG, &KUID);
            if let Ok(Some((rc, _))) = got {
                assert_eq!(&p[8..24], &rc);
                let _ = hs.sik(&KUID, &rc);
            }
        }
        _ => {
            let mut p = p.to_vec();
            let sik = [9u8; 32];
            let guid = [3u8; 16];
            if fix && p.len() >= 8 {
                let icv = hs.rakp4_icv(&sik, &guid).expect("HMAC");
                p.truncate(8);
                p.extend_from_slice(&icv);
            }
            let _ = hs.check_rakp4(&p, TAG, &sik, &guid);
        }
    }
});
