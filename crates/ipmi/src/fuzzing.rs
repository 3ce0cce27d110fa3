//! Entry points for the fuzz targets (`fuzz/` in the repository) and the property tests: the
//! decoders of what a BMC sends and the session keys, which are otherwise internal. Built only
//! with the `fuzzing` feature; nothing here is part of the client's API.

use crate::crypto::SessionKeys;
use crate::error::Result;
use crate::packet::{self, payload};
use crate::rakp;
use crate::session::Session;
use crate::{CipherSuite, Privilege};

/// RMCP+ payload types.
pub const PAYLOAD_IPMI: u8 = payload::IPMI;
/// RMCP+ payload types.
pub const PAYLOAD_OPEN_SESSION_RESPONSE: u8 = payload::OPEN_SESSION_RESPONSE;
/// RMCP+ payload types.
pub const PAYLOAD_RAKP2: u8 = payload::RAKP2;
/// RMCP+ payload types.
pub const PAYLOAD_RAKP4: u8 = payload::RAKP4;

/// The keys of an established session (integrity K1 and the AES key from K2).
pub struct Keys(SessionKeys);

impl Keys {
    /// K1 and K2 from a session integrity key, as after RAKP 4.
    pub fn derive(suite: CipherSuite, sik: &[u8]) -> Result<Self> {
        SessionKeys::derive(suite, sik).map(Keys)
    }

    /// AES-CBC-128 with the RMCP+ confidentiality header and trailer.
    pub fn encrypt(&self, iv: [u8; 16], data: &[u8]) -> Result<Vec<u8>> {
        self.0.encrypt(iv, data)
    }

    /// The inverse of [`Keys::encrypt`].
    pub fn decrypt(&self, payload: &[u8]) -> Result<Vec<u8>> {
        self.0.decrypt(payload)
    }

    /// An encrypted and authenticated RMCP+ packet, as a session sends it.
    pub fn seal(
        &self,
        payload_type: u8,
        session_id: u32,
        seq: u32,
        payload: &[u8],
        iv: [u8; 16],
    ) -> Result<Vec<u8>> {
        packet::encode_v2(payload_type, session_id, seq, payload, Some((&self.0, iv)))
    }
}

/// A decoded RMCP+ packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub payload_type: u8,
    pub authenticated: bool,
    pub session_id: u32,
    pub seq: u32,
    pub payload: Vec<u8>,
}

/// Why a datagram was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Malformed(String),
    Integrity,
}

/// A cleartext RMCP+ packet (session setup).
pub fn encode_packet(payload_type: u8, payload: &[u8]) -> Result<Vec<u8>> {
    packet::encode_v2(payload_type, 0, 0, payload, None)
}

/// Parse an RMCP+ datagram, checking its AuthCode and decrypting it with `keys`.
pub fn decode_packet(buf: &[u8], keys: Option<&Keys>) -> std::result::Result<Packet, Refused> {
    packet::decode_v2(buf, keys.map(|k| &k.0))
        .map(|p| Packet {
            payload_type: p.payload_type,
            authenticated: p.authenticated,
            session_id: p.session_id,
            seq: p.seq,
            payload: p.payload,
        })
        .map_err(|r| match r {
            packet::Reject::Malformed(why) => Refused::Malformed(why),
            packet::Reject::Integrity => Refused::Integrity,
        })
}

/// A decoded IPMI response message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub netfn: u8,
    pub rq_seq: u8,
    pub cmd: u8,
    pub completion: u8,
    pub data: Vec<u8>,
}

/// An IPMI LAN request message.
pub fn encode_request(netfn: u8, cmd: u8, rq_seq: u8, data: &[u8]) -> Vec<u8> {
    packet::encode_request(netfn, cmd, rq_seq, data)
}

/// An IPMI LAN response message as a BMC frames it (both checksums).
pub fn encode_response(netfn: u8, cmd: u8, rq_seq: u8, completion: u8, data: &[u8]) -> Vec<u8> {
    let mut m = vec![packet::RQ_ADDR, (netfn | 1) << 2];
    m.push(packet::checksum(&m));
    m.extend_from_slice(&[packet::BMC_ADDR, (rq_seq & 0x3F) << 2, cmd, completion]);
    m.extend_from_slice(data);
    m.push(packet::checksum(&m[3..]));
    m
}

/// Decode an IPMI LAN response message.
pub fn decode_response(m: &[u8]) -> Result<Response> {
    packet::decode_response(m).map(|r| Response {
        netfn: r.netfn,
        rq_seq: r.rq_seq,
        cmd: r.cmd,
        completion: r.completion,
        data: r.data,
    })
}

/// The anti-replay window over the BMC's session sequence numbers.
#[derive(Debug, Default, Clone)]
pub struct SeqWindow(packet::SeqWindow);

impl SeqWindow {
    /// Whether `seq` is taken (and is then marked as seen).
    pub fn accept(&mut self, seq: u32) -> bool {
        self.0.accept(seq)
    }
}

/// The Open Session Request the client sends.
pub fn open_session_request(tag: u8, console_sid: u32, suite: CipherSuite) -> Vec<u8> {
    rakp::open_session_request(tag, console_sid, suite)
}

/// Check an Open Session Response; the BMC's session id when it answers this request.
pub fn parse_open_session_response(
    p: &[u8],
    tag: u8,
    console_sid: u32,
    suite: CipherSuite,
) -> Result<Option<u32>> {
    rakp::parse_open_session_response(p, tag, console_sid, suite).map(|r| r.map(|r| r.bmc_sid))
}

/// The console's side of RAKP 1–4.
pub struct Handshake(rakp::Handshake);

impl Handshake {
    pub fn new(
        suite: CipherSuite,
        console_sid: u32,
        bmc_sid: u32,
        rm: [u8; 16],
        privilege: Privilege,
        username: &[u8],
    ) -> Self {
        Handshake(rakp::Handshake {
            suite,
            console_sid,
            bmc_sid,
            rm,
            role: privilege as u8 | rakp::NAME_ONLY_LOOKUP,
            username: username.to_vec(),
        })
    }

    /// The key exchange code a BMC that knows `kuid` puts in RAKP 2.
    pub fn rakp2_code(&self, kuid: &[u8], rc: &[u8; 16], guid: &[u8; 16]) -> Result<Vec<u8>> {
        self.0.rakp2_code(kuid, rc, guid)
    }

    /// Check RAKP 2: the BMC's random number and GUID when it answers this handshake.
    pub fn check_rakp2(
        &self,
        p: &[u8],
        tag: u8,
        kuid: &[u8],
    ) -> Result<Option<([u8; 16], [u8; 16])>> {
        self.0.check_rakp2(p, tag, kuid)
    }

    /// The session integrity key.
    pub fn sik(&self, kg: &[u8], rc: &[u8; 16]) -> Result<Vec<u8>> {
        self.0.sik(kg, rc)
    }

    /// The integrity check value a BMC puts in RAKP 4.
    pub fn rakp4_icv(&self, sik: &[u8], guid: &[u8; 16]) -> Result<Vec<u8>> {
        let h = &self.0;
        let mut icv = h
            .suite
            .hmac(sik, &[&h.rm, &h.bmc_sid.to_le_bytes(), guid])?;
        icv.truncate(h.suite.icv_len());
        Ok(icv)
    }

    /// Check RAKP 4: the session keys when it answers this handshake.
    pub fn check_rakp4(
        &self,
        p: &[u8],
        tag: u8,
        sik: &[u8],
        guid: &[u8; 16],
    ) -> Result<Option<Keys>> {
        self.0.check_rakp4(p, tag, sik, guid).map(|k| k.map(Keys))
    }
}

/// What the session's receive loop made of one datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// The answer to the pending request.
    Answer(Response),
    /// Not for this request (malformed, another session, replayed, another command).
    Ignored,
    /// The AuthCode did not verify.
    BadIntegrity,
}

/// An established session's receive path, fed one datagram at a time.
pub struct Receiver(Session);

impl Receiver {
    /// A session as after RAKP 4 with these keys (`console_sid` is what the BMC addresses).
    pub fn new(keys: Keys, console_sid: u32, bmc_sid: u32) -> Self {
        Receiver(Session::for_fuzzing(keys.0, console_sid, bmc_sid))
    }

    /// What the receive loop of a request `netfn`/`cmd` with `rq_seq` does with `datagram`.
    pub fn receive(&mut self, datagram: &[u8], netfn: u8, cmd: u8, rq_seq: u8) -> Received {
        match self.0.receive_for_fuzzing(datagram, netfn, cmd, rq_seq) {
            Ok(Some(r)) => Received::Answer(Response {
                netfn: r.netfn,
                rq_seq: r.rq_seq,
                cmd: r.cmd,
                completion: r.completion,
                data: r.data,
            }),
            Ok(None) => Received::Ignored,
            Err(()) => Received::BadIntegrity,
        }
    }
}
