//! Server-side RMCP+ wire handling: suite algorithms, the integrity trailer,
//! AES-CBC-128 confidentiality and IPMI message (de)framing. Written
//! independently of the client crate so the two check each other.

use aes::Aes128;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::NoPadding};
use hmac::{Hmac, Mac};

/// Cipher suites the emulator can offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suite {
    /// RAKP-HMAC-SHA1 / HMAC-SHA1-96 / AES-CBC-128.
    S3,
    /// RAKP-HMAC-SHA256 / HMAC-SHA256-128 / AES-CBC-128.
    S17,
}

impl Suite {
    /// The suite id.
    pub fn id(self) -> u8 {
        match self {
            Suite::S3 => 3,
            Suite::S17 => 17,
        }
    }

    /// (authentication, integrity, confidentiality) algorithm numbers.
    pub(crate) fn algorithms(self) -> (u8, u8, u8) {
        match self {
            Suite::S3 => (1, 1, 1),
            Suite::S17 => (3, 4, 1),
        }
    }

    pub(crate) fn from_algorithms(a: u8, i: u8, c: u8) -> Option<Suite> {
        match (a, i, c) {
            (1, 1, 1) => Some(Suite::S3),
            (3, 4, 1) => Some(Suite::S17),
            _ => None,
        }
    }

    pub(crate) fn trunc_len(self) -> usize {
        match self {
            Suite::S3 => 12,
            Suite::S17 => 16,
        }
    }

    pub(crate) fn mac(self, key: &[u8], chunks: &[&[u8]]) -> Vec<u8> {
        match self {
            Suite::S3 => {
                let Ok(mut m) = <Hmac<sha1::Sha1> as Mac>::new_from_slice(key) else {
                    return Vec::new();
                };
                for c in chunks {
                    m.update(c);
                }
                m.finalize().into_bytes().to_vec()
            }
            Suite::S17 => {
                let Ok(mut m) = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key) else {
                    return Vec::new();
                };
                for c in chunks {
                    m.update(c);
                }
                m.finalize().into_bytes().to_vec()
            }
        }
    }
}

/// Keys of an active session on the BMC side.
#[derive(Clone)]
pub(crate) struct Keys {
    pub suite: Suite,
    pub k1: Vec<u8>,
    pub k2: Vec<u8>,
}

impl Keys {
    /// K1/K2: HMAC over Const1/Const2, which are 20 bytes long for every
    /// authentication algorithm (IPMI 2.0 table 13-19).
    pub fn from_sik(suite: Suite, sik: &[u8]) -> Keys {
        Keys {
            suite,
            k1: suite.mac(sik, &[&[1u8; 20]]),
            k2: suite.mac(sik, &[&[2u8; 20]]),
        }
    }

    fn aes_key(&self) -> &[u8] {
        self.k2.get(..16).unwrap_or(&[])
    }

    fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let iv: [u8; 16] = rand::random();
        let mut buf = plain.to_vec();
        let mut n = 0u8;
        while !(buf.len() + 1).is_multiple_of(16) {
            n += 1;
            buf.push(n);
        }
        buf.push(n);
        let ct = cbc::Encryptor::<Aes128>::new_from_slices(self.aes_key(), &iv)
            .ok()?
            .encrypt_padded_vec_mut::<NoPadding>(&buf);
        let mut out = iv.to_vec();
        out.extend(ct);
        Some(out)
    }

    fn open(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < 32 || !sealed.len().is_multiple_of(16) {
            return None;
        }
        let mut pt = cbc::Decryptor::<Aes128>::new_from_slices(self.aes_key(), &sealed[..16])
            .ok()?
            .decrypt_padded_vec_mut::<NoPadding>(&sealed[16..])
            .ok()?;
        let n = usize::from(*pt.last()?);
        if n >= 16 || n + 1 > pt.len() {
            return None;
        }
        let keep = pt.len() - n - 1;
        pt.truncate(keep);
        Some(pt)
    }
}

/// Fields of an inbound IPMI 2.0 packet.
pub(crate) struct Inbound<'a> {
    pub ptype: u8,
    pub sid: u32,
    pub seq: u32,
    pub payload: &'a [u8],
    /// Everything from the auth type byte to the end of the datagram.
    pub session_part: &'a [u8],
    pub payload_end: usize,
}

pub(crate) fn parse_v2(dgram: &[u8]) -> Option<Inbound<'_>> {
    let s = dgram.get(4..)?;
    if s.len() < 12 || s[0] != 0x06 {
        return None;
    }
    let len = usize::from(u16::from_le_bytes([s[10], s[11]]));
    let payload = s.get(12..12 + len)?;
    Some(Inbound {
        ptype: s[1],
        sid: u32::from_le_bytes([s[2], s[3], s[4], s[5]]),
        seq: u32::from_le_bytes([s[6], s[7], s[8], s[9]]),
        payload,
        session_part: s,
        payload_end: 12 + len,
    })
}

/// Verify the integrity trailer and decrypt the payload of an in-session packet.
pub(crate) fn unseal(p: &Inbound<'_>, keys: &Keys) -> Option<Vec<u8>> {
    if p.ptype & 0xC0 != 0xC0 {
        return None; // the emulator insists on integrity + confidentiality
    }
    let t = keys.suite.trunc_len();
    let s = p.session_part;
    if s.len() < p.payload_end + 2 + t {
        return None;
    }
    let mac_at = s.len() - t;
    let pad = usize::from(s[mac_at - 2]);
    if s[mac_at - 1] != 0x07 || p.payload_end + pad + 2 != mac_at {
        return None;
    }
    let want = keys.suite.mac(&keys.k1, &[&s[..mac_at]]);
    let got = &s[mac_at..];
    if want.len() < t || want[..t].iter().zip(got).fold(0u8, |a, (x, y)| a | (x ^ y)) != 0 {
        return None;
    }
    keys.open(p.payload)
}

/// Build an RMCP+ datagram; with keys, encrypted and authenticated.
pub(crate) fn seal(
    ptype: u8,
    sid: u32,
    seq: u32,
    payload: &[u8],
    keys: Option<&Keys>,
) -> Option<Vec<u8>> {
    let mut out = vec![0x06, 0x00, 0xFF, 0x07, 0x06];
    let body = match keys {
        Some(k) => {
            out.push(ptype | 0xC0);
            k.seal(payload)?
        }
        None => {
            out.push(ptype);
            payload.to_vec()
        }
    };
    out.extend(sid.to_le_bytes());
    out.extend(seq.to_le_bytes());
    out.extend((body.len() as u16).to_le_bytes());
    out.extend(&body);
    if let Some(k) = keys {
        let mut pad = 0;
        while (out.len() - 4 + pad + 2) % 4 != 0 {
            pad += 1;
        }
        out.extend(std::iter::repeat_n(0xFFu8, pad));
        out.push(pad as u8);
        out.push(0x07);
        let mac = k.suite.mac(&k.k1, &[&out[4..]]);
        out.extend(mac.get(..k.suite.trunc_len())?);
    }
    Some(out)
}

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
}

/// A decoded IPMI request.
pub(crate) struct Request {
    pub rs_addr: u8,
    pub netfn: u8,
    pub rs_lun: u8,
    pub rq_addr: u8,
    pub rq_seq_lun: u8,
    pub cmd: u8,
    pub data: Vec<u8>,
}

pub(crate) fn parse_request(m: &[u8]) -> Option<Request> {
    if m.len() < 7 || sum(&m[..3]) != 0 || sum(&m[3..]) != 0 {
        return None;
    }
    Some(Request {
        rs_addr: m[0],
        netfn: m[1] >> 2,
        rs_lun: m[1] & 3,
        rq_addr: m[3],
        rq_seq_lun: m[4],
        cmd: m[5],
        data: m[6..m.len() - 1].to_vec(),
    })
}

pub(crate) fn build_response(req: &Request, cc: u8, data: &[u8]) -> Vec<u8> {
    let mut m = vec![req.rq_addr, ((req.netfn | 1) << 2) | (req.rq_seq_lun & 3)];
    m.push(sum(&m).wrapping_neg());
    m.extend([
        req.rs_addr,
        (req.rq_seq_lun & 0xFC) | req.rs_lun,
        req.cmd,
        cc,
    ]);
    m.extend(data);
    let c = sum(&m[3..]).wrapping_neg();
    m.push(c);
    m
}
