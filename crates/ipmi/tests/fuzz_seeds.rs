//! The seed inputs of this crate's fuzz targets (`fuzz/`), built with the crate's own encoders
//! and the emulator's FRU image. Each seed is checked to decode as its target needs it to (a
//! seed that fails early would only fuzz the first length check); with `INGOT_FUZZ_SEEDS=DIR`
//! they are also written to `DIR/<target>/<name>`, which is how `scripts/fuzz.sh` makes its
//! corpora.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingot_ipmi::fuzzing::{
    Keys, PAYLOAD_IPMI, decode_packet, decode_response, encode_packet, encode_response,
    open_session_request,
};
use ingot_ipmi::{BootDevice, BootFlags, ChassisStatus, CipherSuite, DeviceId, SelEntry};

/// The session integrity key the `ipmi_packet` target derives its keys from.
const PACKET_SIK: [u8; 32] = [0x5A; 32];
/// The tag and console session id the `ipmi_rakp` target expects.
const RAKP_TAG: u8 = 0x2A;
const RAKP_CONSOLE_SID: u32 = 0xA0B1_C2D3;
/// The console session id of the `ipmi_session` target.
const SESSION_CONSOLE_SID: u32 = 0x1122_3344;

const DEVICE_ID: [u8; 15] = [
    0x20, 0x81, 0x02, 0x15, 0x02, 0xBF, 0x57, 0x01, 0x00, 0x34, 0x12, 1, 2, 3, 4,
];
const SEL_RECORD: [u8; 16] = [
    0x01, 0x00, 0x02, 0x10, 0x32, 0x54, 0x76, 0x20, 0x00, 0x04, 0x0C, 0x01, 0x6F, 0x00, 0xFF, 0xFF,
];
/// Get System Boot Options, parameter 5: valid, once, UEFI, PXE.
const BOOT_FLAGS: [u8; 7] = [0x01, 0x05, 0xA0, 0x04, 0x00, 0x00, 0x00];
const CHASSIS_STATUS: [u8; 4] = [0x41, 0x00, 0x40, 0x00];

fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut out = Vec::new();

    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let keys = Keys::derive(suite, &PACKET_SIK).unwrap();
        let answer = encode_response(0x06, 0x01, 5, 0, &DEVICE_ID);
        let sealed = keys
            .seal(PAYLOAD_IPMI, 0x1122_3344, 7, &answer, [3; 16])
            .unwrap();
        let name = match suite {
            CipherSuite::Suite3 => "get_device_id_suite3",
            CipherSuite::Suite17 => "get_device_id_suite17",
        };
        out.push(("ipmi_packet", name, sealed));
    }
    let request = open_session_request(1, 0x1122_3344, CipherSuite::Suite17);
    out.push((
        "ipmi_packet",
        "open_session_request",
        encode_packet(0x10, &request).unwrap(),
    ));
    out.push((
        "ipmi_packet",
        "chassis_status_message",
        encode_response(0x00, 0x01, 9, 0, &CHASSIS_STATUS),
    ));

    for (head, suite, name) in [
        (0x00, CipherSuite::Suite3, "open_session_response_suite3"),
        (0x01, CipherSuite::Suite17, "open_session_response_suite17"),
    ] {
        // The response echoes the request's algorithm records after the BMC's session id.
        let request = open_session_request(RAKP_TAG, RAKP_CONSOLE_SID, suite);
        let mut m = vec![head, RAKP_TAG, 0, 4, 0];
        m.extend_from_slice(&RAKP_CONSOLE_SID.to_le_bytes());
        m.extend_from_slice(&0x0102_0304u32.to_le_bytes());
        m.extend_from_slice(&request[8..]);
        out.push(("ipmi_rakp", name, m));
    }
    // The top bit makes the target write the correct code into the message.
    for (head, name, code_len) in [(0x82, "rakp2_suite3", 20), (0x83, "rakp2_suite17", 32)] {
        let mut m = vec![head, RAKP_TAG, 0, 0, 0];
        m.extend_from_slice(&RAKP_CONSOLE_SID.to_le_bytes());
        m.extend_from_slice(&[0x11; 16]); // Rc
        m.extend_from_slice(&[0x22; 16]); // GUID
        m.extend(std::iter::repeat_n(0, code_len));
        out.push(("ipmi_rakp", name, m));
    }
    for (head, name, icv_len) in [(0x84, "rakp4_suite3", 12), (0x85, "rakp4_suite17", 16)] {
        let mut m = vec![head, RAKP_TAG, 0, 0, 0];
        m.extend_from_slice(&RAKP_CONSOLE_SID.to_le_bytes());
        m.extend(std::iter::repeat_n(0, icv_len));
        out.push(("ipmi_rakp", name, m));
    }

    out.push((
        "ipmi_fru",
        "emulator_fru",
        ingot_ipmi_sim::FruInfo::example(1).encode(),
    ));

    out.push(("ipmi_commands", "sel_record", SEL_RECORD.to_vec()));
    out.push(("ipmi_commands", "boot_flags", BOOT_FLAGS.to_vec()));
    out.push(("ipmi_commands", "device_id", DEVICE_ID.to_vec()));
    out.push(("ipmi_commands", "chassis_status", CHASSIS_STATUS.to_vec()));

    // Records: kind, seq (LE), length, bytes. The answer, a replay of it, a late answer, a
    // changed packet and garbage.
    let record = |kind: u8, seq: u32, bytes: &[u8]| {
        let mut r = vec![kind];
        r.extend_from_slice(&seq.to_le_bytes());
        r.push(u8::try_from(bytes.len()).unwrap());
        r.extend_from_slice(bytes);
        r
    };
    let mut answer = vec![0u8];
    answer.extend_from_slice(&DEVICE_ID);
    for (head, name) in [(0x00, "exchange_suite3"), (0x01, "exchange_suite17")] {
        let mut s = vec![head];
        s.extend(record(2, 5, &answer));
        s.extend(record(2, 5, &answer));
        s.extend(record(2, 3, &answer));
        s.extend(record(3, 6, &answer));
        s.extend(record(1, 9, &[1, 2, 3]));
        s.extend(record(0, 0, &[0x06, 0x00, 0xFF, 0x07, 0x06]));
        out.push(("ipmi_session", name, s));
    }
    out
}

#[test]
fn seeds_decode_as_their_targets_need() {
    let seeds = seeds();
    for (target, name, bytes) in &seeds {
        match (*target, *name) {
            ("ipmi_packet", "open_session_request") => {
                assert_eq!(decode_packet(bytes, None).unwrap().payload_type, 0x10);
            }
            ("ipmi_packet", "chassis_status_message") => {
                let r = decode_response(bytes).unwrap();
                assert!(ChassisStatus::parse(&r.data).unwrap().power_on);
            }
            ("ipmi_packet", n) => {
                let suite = if n.ends_with("suite3") {
                    CipherSuite::Suite3
                } else {
                    CipherSuite::Suite17
                };
                let keys = Keys::derive(suite, &PACKET_SIK).unwrap();
                let p = decode_packet(bytes, Some(&keys)).unwrap();
                let r = decode_response(&p.payload).unwrap();
                assert_eq!(DeviceId::parse(&r.data).unwrap().product_id, 0x1234);
            }
            ("ipmi_rakp", _) => assert!(bytes.len() > 8, "{name}"),
            ("ipmi_fru", _) => {
                let fru = ingot_ipmi::fru::parse(bytes).unwrap();
                assert_eq!(fru.board.unwrap().serial_number, "BSN00001");
            }
            ("ipmi_commands", "sel_record") => {
                assert_eq!(SelEntry::parse(bytes).unwrap().stable_id(), "0001-76543210");
            }
            ("ipmi_commands", "boot_flags") => {
                let f = BootFlags::parse(bytes).unwrap();
                assert!(f.valid);
                assert_eq!(f.device, BootDevice::Pxe);
            }
            ("ipmi_commands", "device_id") => {
                assert_eq!(DeviceId::parse(bytes).unwrap().firmware_version(), "2.15");
            }
            ("ipmi_commands", "chassis_status") => {
                assert!(ChassisStatus::parse(bytes).unwrap().power_on);
            }
            ("ipmi_session", _) => {
                use ingot_ipmi::fuzzing::{Received, Receiver};
                let suite = if bytes[0] & 1 == 0 {
                    CipherSuite::Suite3
                } else {
                    CipherSuite::Suite17
                };
                let keys = || Keys::derive(suite, &[bytes[0]; 20]).unwrap();
                let mut rx = Receiver::new(keys(), SESSION_CONSOLE_SID, 1);
                let answer = encode_response(0x06, 0x01, 5, 0, &DEVICE_ID);
                let sealed = keys()
                    .seal(PAYLOAD_IPMI, SESSION_CONSOLE_SID, 5, &answer, [2; 16])
                    .unwrap();
                assert!(matches!(
                    rx.receive(&sealed, 0x06, 0x01, 5),
                    Received::Answer(_)
                ));
                assert_eq!(rx.receive(&sealed, 0x06, 0x01, 5), Received::Ignored);
            }
            other => panic!("no check for seed {other:?}"),
        }
    }
    if let Some(dir) = std::env::var_os("INGOT_FUZZ_SEEDS") {
        let dir = std::path::PathBuf::from(dir);
        for (target, name, bytes) in &seeds {
            std::fs::create_dir_all(dir.join(target)).unwrap();
            std::fs::write(dir.join(target).join(name), bytes).unwrap();
        }
    }
}
