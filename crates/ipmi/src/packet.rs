//! RMCP, the IPMI 2.0 session header and IPMI LAN message framing.
//!
//! Every decoder here works on untrusted datagrams: all lengths are checked
//! and malformed input becomes an `Err`, never a panic.

use crate::crypto::{SessionKeys, ct_eq};
use crate::error::{Error, Result};

/// RMCP version 1.0, reserved, sequence 0xFF (no RMCP ACK), class IPMI.
pub(crate) const RMCP_IPMI: [u8; 4] = [0x06, 0x00, 0xFF, 0x07];
const RMCP_CLASS_IPMI: u8 = 0x07;

/// Authentication type field value that marks an IPMI 2.0 (RMCP+) packet.
pub(crate) const AUTH_TYPE_RMCPP: u8 = 0x06;

/// RMCP+ payload types (§13.27.3).
pub(crate) mod payload {
    pub const IPMI: u8 = 0x00;
    pub const OPEN_SESSION_REQUEST: u8 = 0x10;
    pub const OPEN_SESSION_RESPONSE: u8 = 0x11;
    pub const RAKP1: u8 = 0x12;
    pub const RAKP2: u8 = 0x13;
    pub const RAKP3: u8 = 0x14;
    pub const RAKP4: u8 = 0x15;
}

const ENCRYPTED: u8 = 0x80;
const AUTHENTICATED: u8 = 0x40;
/// RMCP+ session header length after the RMCP header:
/// auth type, payload type, session id (4), sequence (4), payload length (2).
const SESSION_HEADER: usize = 12;

/// Build an RMCP+ packet. With `keys` the payload is encrypted (AES-CBC-128)
/// and an integrity trailer is appended; without, it goes in the clear (only
/// used for the session-setup payloads, whose session id and sequence are 0).
pub(crate) fn encode_v2(
    payload_type: u8,
    session_id: u32,
    seq: u32,
    payload: &[u8],
    keys: Option<(&SessionKeys, [u8; 16])>,
) -> Result<Vec<u8>> {
    let (ptype, body) = match keys {
        Some((k, iv)) => (
            payload_type | ENCRYPTED | AUTHENTICATED,
            k.encrypt(iv, payload)?,
        ),
        None => (payload_type, payload.to_vec()),
    };
    let len = u16::try_from(body.len())
        .map_err(|_| Error::Protocol("payload longer than 65535 bytes".into()))?;
    let mut out = Vec::with_capacity(4 + SESSION_HEADER + body.len() + 24);
    out.extend_from_slice(&RMCP_IPMI);
    out.push(AUTH_TYPE_RMCPP);
    out.push(ptype);
    out.extend_from_slice(&session_id.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    if let Some((k, _)) = keys {
        // Integrity pad: the bytes from the auth type field through the next
        // header field must be a multiple of 4 (§13.28.4).
        let covered = out.len() - 4 + 2;
        let pad = (4 - covered % 4) % 4;
        out.extend(std::iter::repeat_n(0xFF, pad));
        out.push(pad as u8);
        out.push(RMCP_CLASS_IPMI); // next header
        let code = k.auth_code(&out[4..])?;
        out.extend_from_slice(&code);
    }
    Ok(out)
}

/// A decoded RMCP+ packet.
#[derive(Debug)]
pub(crate) struct V2Packet {
    pub payload_type: u8,
    pub authenticated: bool,
    pub session_id: u32,
    pub seq: u32,
    /// Decrypted when the packet was encrypted.
    pub payload: Vec<u8>,
}

/// Why a datagram was not accepted.
#[derive(Debug)]
pub(crate) enum Reject {
    /// Not RMCP+ / malformed; ignore it.
    Malformed(String),
    /// Well-formed, but the integrity AuthCode did not verify.
    Integrity,
}

/// Parse an RMCP+ datagram, verifying the integrity AuthCode with `keys`
/// when the packet says it is authenticated.
pub(crate) fn decode_v2(
    buf: &[u8],
    keys: Option<&SessionKeys>,
) -> std::result::Result<V2Packet, Reject> {
    let bad = |m: &str| Reject::Malformed(m.to_string());
    if buf.len() < 4 + SESSION_HEADER {
        return Err(bad("short datagram"));
    }
    if buf[0] != 0x06 || buf[3] & 0x1F != RMCP_CLASS_IPMI {
        return Err(bad("not an RMCP IPMI datagram"));
    }
    if buf[4] != AUTH_TYPE_RMCPP {
        return Err(bad("not an RMCP+ (IPMI 2.0) packet"));
    }
    let ptype = buf[5];
    if ptype & 0x3F == 0x02 {
        return Err(bad("OEM payloads are not supported"));
    }
    let session_id = u32::from_le_bytes([buf[6], buf[7], buf[8], buf[9]]);
    let seq = u32::from_le_bytes([buf[10], buf[11], buf[12], buf[13]]);
    let len = usize::from(u16::from_le_bytes([buf[14], buf[15]]));
    let start = 4 + SESSION_HEADER;
    let end = start
        .checked_add(len)
        .filter(|e| *e <= buf.len())
        .ok_or_else(|| bad("payload length beyond datagram"))?;
    let authenticated = ptype & AUTHENTICATED != 0;
    let encrypted = ptype & ENCRYPTED != 0;
    if authenticated {
        let k = keys.ok_or_else(|| bad("authenticated packet outside a session"))?;
        let code_len = k.suite.icv_len();
        let trailer = buf.len() - end;
        if trailer < 2 + code_len {
            return Err(bad("short integrity trailer"));
        }
        let code_at = buf.len() - code_len;
        let pad_len = usize::from(buf[code_at - 2]);
        if buf[code_at - 1] != RMCP_CLASS_IPMI || pad_len + 2 + code_len != trailer || pad_len > 3 {
            return Err(bad("malformed integrity trailer"));
        }
        let expect = k
            .auth_code(&buf[4..code_at])
            .map_err(|_| Reject::Integrity)?;
        if !ct_eq(&expect, &buf[code_at..]) {
            return Err(Reject::Integrity);
        }
    } else if end != buf.len() {
        return Err(bad("trailing bytes after payload"));
    }
    let raw = &buf[start..end];
    let payload = if encrypted {
        let k = keys.ok_or_else(|| bad("encrypted packet outside a session"))?;
        k.decrypt(raw)
            .map_err(|e| Reject::Malformed(e.to_string()))?
    } else {
        raw.to_vec()
    };
    Ok(V2Packet {
        payload_type: ptype & 0x3F,
        authenticated,
        session_id,
        seq,
        payload,
    })
}

/// The requester (remote console software) address used by ipmitool and the spec examples.
pub(crate) const RQ_ADDR: u8 = 0x81;
/// The BMC's responder address.
pub(crate) const BMC_ADDR: u8 = 0x20;

pub(crate) fn checksum(data: &[u8]) -> u8 {
    data.iter()
        .fold(0u8, |a, b| a.wrapping_add(*b))
        .wrapping_neg()
}

/// Encode an IPMI LAN request message (§13.8).
pub(crate) fn encode_request(netfn: u8, cmd: u8, rq_seq: u8, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(7 + data.len());
    m.push(BMC_ADDR);
    m.push(netfn << 2);
    m.push(checksum(&m[0..2]));
    m.push(RQ_ADDR);
    m.push((rq_seq & 0x3F) << 2);
    m.push(cmd);
    m.extend_from_slice(data);
    let c = checksum(&m[3..]);
    m.push(c);
    m
}

/// A decoded IPMI response message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub netfn: u8,
    pub rq_seq: u8,
    pub cmd: u8,
    pub completion: u8,
    pub data: Vec<u8>,
}

/// Decode an IPMI LAN response message, checking both checksums.
pub(crate) fn decode_response(m: &[u8]) -> Result<Response> {
    if m.len() < 8 {
        return Err(Error::Protocol(format!(
            "IPMI response of {} bytes",
            m.len()
        )));
    }
    if checksum(&m[0..2]) != m[2] {
        return Err(Error::Protocol("IPMI header checksum mismatch".into()));
    }
    let last = m.len() - 1;
    if checksum(&m[3..last]) != m[last] {
        return Err(Error::Protocol("IPMI data checksum mismatch".into()));
    }
    Ok(Response {
        netfn: m[1] >> 2,
        rq_seq: m[4] >> 2,
        cmd: m[5],
        completion: m[6],
        data: m[7..last].to_vec(),
    })
}

/// Anti-replay window over the BMC's outbound session sequence numbers:
/// a number is accepted once, and only if it is newer than the highest seen
/// or within the 32 below it (§6.12.13 uses ±16 on the BMC side; a console
/// may be at least as lenient).
#[derive(Debug, Default, Clone)]
pub(crate) struct SeqWindow {
    highest: u32,
    /// Bit i set = `highest - i` has been seen.
    seen: u32,
}

impl SeqWindow {
    pub fn accept(&mut self, seq: u32) -> bool {
        if seq == 0 {
            return false;
        }
        if self.highest == 0 || seq > self.highest {
            let shift = seq - self.highest;
            self.seen = if self.highest == 0 || shift >= 32 {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.highest = seq;
            return true;
        }
        let back = self.highest - seq;
        if back >= 32 || self.seen & (1 << back) != 0 {
            return false;
        }
        self.seen |= 1 << back;
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::crypto::CipherSuite;

    #[test]
    fn get_device_id_request_bytes() {
        // Hand-computed: 20 18 c8 81 04 01 7a (rqSeq 1).
        let m = encode_request(0x06, 0x01, 1, &[]);
        assert_eq!(m, vec![0x20, 0x18, 0xC8, 0x81, 0x04, 0x01, 0x7A]);
    }

    #[test]
    fn response_decoding_checks_checksums() {
        let mut m = vec![0x81, 0x1C, 0x63, 0x20, 0x04, 0x01, 0x00, 0x20, 0x01];
        let c = checksum(&m[3..]);
        m.push(c);
        let r = decode_response(&m).unwrap();
        assert_eq!((r.netfn, r.rq_seq, r.cmd, r.completion), (0x07, 1, 0x01, 0));
        assert_eq!(r.data, vec![0x20, 0x01]);
        let mut broken = m.clone();
        broken[7] ^= 1;
        assert!(decode_response(&broken).is_err());
        assert!(decode_response(&m[..5]).is_err());
    }

    #[test]
    fn cleartext_session_setup_packet() {
        let p = encode_v2(payload::OPEN_SESSION_REQUEST, 0, 0, &[1, 2, 3], None).unwrap();
        assert_eq!(
            p,
            vec![
                6, 0, 0xFF, 7, 6, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 1, 2, 3
            ]
        );
        let d = decode_v2(&p, None).unwrap();
        assert_eq!(d.payload_type, 0x10);
        assert_eq!(d.payload, vec![1, 2, 3]);
    }

    #[test]
    fn authenticated_packet_layout_and_tamper_detection() {
        for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
            let keys = SessionKeys::derive(suite, &vec![5u8; suite.hash_len()]).unwrap();
            let msg = encode_request(0x00, 0x01, 3, &[]);
            let p = encode_v2(payload::IPMI, 0xA0B0C0D0, 7, &msg, Some((&keys, [3; 16]))).unwrap();
            assert_eq!(p[5], 0xC0);
            // Payload: IV + one block (7 bytes + 8 pad + 1 length).
            assert_eq!(u16::from_le_bytes([p[14], p[15]]), 32);
            let covered = p.len() - 4 - suite.icv_len();
            assert_eq!(covered % 4, 0);
            let d = decode_v2(&p, Some(&keys)).unwrap();
            assert_eq!((d.session_id, d.seq), (0xA0B0C0D0, 7));
            assert!(d.authenticated);
            assert_eq!(d.payload, msg);
            for i in 4..p.len() {
                let mut t = p.clone();
                t[i] ^= 0x01;
                assert!(
                    decode_v2(&t, Some(&keys)).is_err(),
                    "tamper at {i} accepted"
                );
            }
        }
    }

    #[test]
    fn decoder_survives_every_truncation_and_garbage() {
        let keys = SessionKeys::derive(CipherSuite::Suite3, &[1u8; 20]).unwrap();
        let p = encode_v2(
            payload::IPMI,
            1,
            1,
            &[1, 2, 3, 4, 5, 6, 7, 8],
            Some((&keys, [0; 16])),
        )
        .unwrap();
        for n in 0..p.len() {
            let _ = decode_v2(&p[..n], Some(&keys));
            let _ = decode_v2(&p[..n], None);
            let _ = decode_response(&p[..n]);
        }
        let mut x: u32 = 12345;
        for _ in 0..2000 {
            let len = (x % 80) as usize;
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                x = x.wrapping_mul(1103515245).wrapping_add(12345);
                buf.push((x >> 16) as u8);
            }
            if buf.len() > 5 {
                buf[0] = 6;
                buf[3] = 7;
                buf[4] = 6;
            }
            let _ = decode_v2(&buf, Some(&keys));
            let _ = decode_response(&buf);
        }
    }

    #[test]
    fn sequence_window() {
        let mut w = SeqWindow::default();
        assert!(!w.accept(0));
        assert!(w.accept(5));
        assert!(!w.accept(5));
        assert!(w.accept(3));
        assert!(w.accept(9));
        assert!(!w.accept(3));
        assert!(w.accept(4));
        assert!(w.accept(100));
        assert!(!w.accept(68));
        assert!(w.accept(69));
    }
}
