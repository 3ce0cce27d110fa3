//! An established session's receive loop, fed a sequence of datagrams. Each record of the input
//! is `kind, seq (4 bytes LE), length, bytes`: kind 0 sends the bytes as they are; 1 seals them
//! with the session's keys (encrypted and authenticated, as the BMC would); 2 seals them as the
//! answer to the pending request; 3 seals them and then changes one byte of the packet. A
//! packet changed after sealing must never be taken as the answer.
#![no_main]

use ingot_ipmi::CipherSuite;
use ingot_ipmi::fuzzing::{Keys, PAYLOAD_IPMI, Received, Receiver, encode_response};
use libfuzzer_sys::fuzz_target;

const CONSOLE_SID: u32 = 0x1122_3344;
const NETFN: u8 = 0x06;
const CMD: u8 = 0x01;
const RQ_SEQ: u8 = 5;

fuzz_target!(|data: &[u8]| {
    let Some((&head, mut rest)) = data.split_first() else {
        return;
    };
    let suite = if head & 1 == 0 {
        CipherSuite::Suite3
    } else {
        CipherSuite::Suite17
    };
    let keys = || Keys::derive(suite, &[head; 20]).expect("session keys derive");
    let sealer = keys();
    let mut rx = Receiver::new(keys(), CONSOLE_SID, 0x5566_7788);
    for _ in 0..64 {
        let [kind, s0, s1, s2, s3, len, tail @ ..] = rest else {
            break;
        };
        let len = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        let seq = u32::from_le_bytes([*s0, *s1, *s2, *s3]);
        let iv = [*kind; 16];
        let (datagram, tampered) = match kind % 4 {
            0 => (bytes.to_vec(), false),
            1 => (seal(&sealer, seq, bytes, iv), false),
            2 => {
                let (completion, data) = bytes.split_first().unwrap_or((&0, &[]));
                let m = encode_response(NETFN, CMD, RQ_SEQ, *completion, data);
                (seal(&sealer, seq, &m, iv), false)
            }
            _ => {
                let mut p = seal(&sealer, seq, bytes, iv);
                // Past the RMCP header, which the AuthCode does not cover.
                let at = 4 + usize::from(*kind) % (p.len() - 4);
                p[at] ^= s0 | 1;
                (p, true)
            }
        };
        let got = rx.receive(&datagram, NETFN, CMD, RQ_SEQ);
        if tampered {
            assert!(
                !matches!(got, Received::Answer(_)),
                "a changed packet was taken: {got:?}"
            );
        }
    }
});

fn seal(keys: &Keys, seq: u32, payload: &[u8], iv: [u8; 16]) -> Vec<u8> {
    keys.seal(PAYLOAD_IPMI, CONSOLE_SID, seq, payload, iv)
        .expect("a payload under 256 bytes seals")
}
