//! RMCP+ session setup: Open Session Request/Response and RAKP 1–4
//! (IPMI 2.0 §13.17–13.31), as pure encode/decode/derive functions.

use crate::crypto::{CipherSuite, SessionKeys, ct_eq};
use crate::error::{Error, Result};

/// Privilege levels (§6.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Privilege {
    /// Callback.
    Callback = 1,
    /// User: read-only commands.
    User = 2,
    /// Operator: chassis control, boot options.
    Operator = 3,
    /// Administrator.
    Administrator = 4,
}

/// RAKP 1 role byte bit: look the user up by name only (ipmitool's default).
pub(crate) const NAME_ONLY_LOOKUP: u8 = 0x10;

pub(crate) fn open_session_request(tag: u8, console_sid: u32, suite: CipherSuite) -> Vec<u8> {
    let mut m = Vec::with_capacity(32);
    m.push(tag);
    // Requested maximum privilege: 0 = the highest the BMC allows for the
    // algorithms; the effective level is negotiated in RAKP 1.
    m.push(0);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&console_sid.to_le_bytes());
    for (kind, alg) in [
        (0u8, suite.auth_alg()),
        (1, suite.integrity_alg()),
        (2, suite.conf_alg()),
    ] {
        m.extend_from_slice(&[kind, 0, 0, 8, alg, 0, 0, 0]);
    }
    m
}

/// What the BMC granted in its Open Session Response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenSessionResponse {
    pub bmc_sid: u32,
}

pub(crate) fn rakp_status_error(status: u8, suite: CipherSuite) -> Error {
    match status {
        0x01 | 0x0B => Error::SessionLimit { status },
        0x04 | 0x05 | 0x06 | 0x07 | 0x10 | 0x11 => Error::UnsupportedCipherSuite {
            suite: suite.id(),
            status,
        },
        0x0D => Error::AuthFailed("the BMC does not know this user name"),
        0x0F => Error::AuthFailed("the BMC rejected the key exchange code (wrong password?)"),
        0x09 | 0x0A => Error::Unauthorized("the requested privilege level is not allowed"),
        s => Error::RakpStatus(s),
    }
}

pub(crate) fn parse_open_session_response(
    p: &[u8],
    tag: u8,
    console_sid: u32,
    suite: CipherSuite,
) -> Result<Option<OpenSessionResponse>> {
    if p.len() < 8 || p[0] != tag {
        return Ok(None); // a stale answer to an earlier attempt
    }
    if u32::from_le_bytes([p[4], p[5], p[6], p[7]]) != console_sid {
        return Ok(None);
    }
    if p[1] != 0 {
        return Err(rakp_status_error(p[1], suite));
    }
    if p.len() < 36 {
        return Err(Error::Protocol(format!(
            "Open Session Response of {} bytes",
            p.len()
        )));
    }
    let bmc_sid = u32::from_le_bytes([p[8], p[9], p[10], p[11]]);
    if bmc_sid == 0 {
        return Err(Error::Protocol("the BMC assigned session id 0".into()));
    }
    // The BMC must echo exactly the algorithms proposed: never accept a
    // downgrade (e.g. to "none", i.e. cipher suite 0).
    let want = [suite.auth_alg(), suite.integrity_alg(), suite.conf_alg()];
    for (i, alg) in want.iter().enumerate() {
        let rec = &p[12 + i * 8..20 + i * 8];
        if rec[0] != i as u8 || rec[4] & 0x3F != *alg {
            return Err(Error::UnsupportedCipherSuite {
                suite: suite.id(),
                status: 0x11,
            });
        }
    }
    Ok(Some(OpenSessionResponse { bmc_sid }))
}

/// Handshake state from RAKP 1 on.
pub(crate) struct Handshake {
    pub suite: CipherSuite,
    pub console_sid: u32,
    pub bmc_sid: u32,
    pub rm: [u8; 16],
    pub role: u8,
    pub username: Vec<u8>,
}

impl Handshake {
    pub fn rakp1(&self, tag: u8) -> Result<Vec<u8>> {
        let ulen = u8::try_from(self.username.len())
            .ok()
            .filter(|l| *l <= 16)
            .ok_or_else(|| Error::Protocol("IPMI user names are at most 16 bytes".into()))?;
        let mut m = Vec::with_capacity(28 + self.username.len());
        m.push(tag);
        m.extend_from_slice(&[0, 0, 0]);
        m.extend_from_slice(&self.bmc_sid.to_le_bytes());
        m.extend_from_slice(&self.rm);
        m.push(self.role);
        m.extend_from_slice(&[0, 0]);
        m.push(ulen);
        m.extend_from_slice(&self.username);
        Ok(m)
    }

    /// Check RAKP 2; returns the BMC random number and GUID.
    /// `Ok(None)` = not an answer to this handshake.
    pub fn check_rakp2(
        &self,
        p: &[u8],
        tag: u8,
        kuid: &[u8],
    ) -> Result<Option<([u8; 16], [u8; 16])>> {
        if p.len() < 8
            || p[0] != tag
            || u32::from_le_bytes([p[4], p[5], p[6], p[7]]) != self.console_sid
        {
            return Ok(None);
        }
        if p[1] != 0 {
            return Err(rakp_status_error(p[1], self.suite));
        }
        let n = self.suite.hash_len();
        if p.len() != 40 + n {
            return Err(Error::Protocol(format!("RAKP 2 of {} bytes", p.len())));
        }
        let mut rc = [0u8; 16];
        rc.copy_from_slice(&p[8..24]);
        let mut guid = [0u8; 16];
        guid.copy_from_slice(&p[24..40]);
        let expect = self.rakp2_code(kuid, &rc, &guid)?;
        if !ct_eq(&expect, &p[40..]) {
            return Err(Error::AuthFailed(
                "the BMC's RAKP 2 code does not match (wrong password?)",
            ));
        }
        Ok(Some((rc, guid)))
    }

    /// HMAC_Kuid(SIDm, SIDc, Rm, Rc, GUIDc, ROLEm, ULENm, UNAMEm).
    pub fn rakp2_code(&self, kuid: &[u8], rc: &[u8; 16], guid: &[u8; 16]) -> Result<Vec<u8>> {
        self.suite.hmac(
            kuid,
            &[
                &self.console_sid.to_le_bytes(),
                &self.bmc_sid.to_le_bytes(),
                &self.rm,
                rc,
                guid,
                &[self.role, self.username.len() as u8],
                &self.username,
            ],
        )
    }

    /// RAKP 3 carrying HMAC_Kuid(Rc, SIDm, ROLEm, ULENm, UNAMEm).
    pub fn rakp3(&self, tag: u8, kuid: &[u8], rc: &[u8; 16]) -> Result<Vec<u8>> {
        let code = self.suite.hmac(
            kuid,
            &[
                rc,
                &self.console_sid.to_le_bytes(),
                &[self.role, self.username.len() as u8],
                &self.username,
            ],
        )?;
        let mut m = vec![tag, 0, 0, 0];
        m.extend_from_slice(&self.bmc_sid.to_le_bytes());
        m.extend_from_slice(&code);
        Ok(m)
    }

    /// SIK = HMAC_Kg(Rm, Rc, ROLEm, ULENm, UNAMEm), Kg = Kuid without a BMC key.
    pub fn sik(&self, kg: &[u8], rc: &[u8; 16]) -> Result<Vec<u8>> {
        self.suite.hmac(
            kg,
            &[
                &self.rm,
                rc,
                &[self.role, self.username.len() as u8],
                &self.username,
            ],
        )
    }

    /// Check RAKP 4: ICV = HMAC_SIK(Rm, SIDc, GUIDc) truncated to 12 (SHA1) or 16 (SHA256) bytes.
    pub fn check_rakp4(
        &self,
        p: &[u8],
        tag: u8,
        sik: &[u8],
        guid: &[u8; 16],
    ) -> Result<Option<SessionKeys>> {
        if p.len() < 8
            || p[0] != tag
            || u32::from_le_bytes([p[4], p[5], p[6], p[7]]) != self.console_sid
        {
            return Ok(None);
        }
        if p[1] != 0 {
            return Err(rakp_status_error(p[1], self.suite));
        }
        let n = self.suite.icv_len();
        if p.len() != 8 + n {
            return Err(Error::Protocol(format!("RAKP 4 of {} bytes", p.len())));
        }
        let mut icv = self
            .suite
            .hmac(sik, &[&self.rm, &self.bmc_sid.to_le_bytes(), guid])?;
        icv.truncate(n);
        if !ct_eq(&icv, &p[8..]) {
            return Err(Error::AuthFailed(
                "RAKP 4 integrity check value does not match",
            ));
        }
        SessionKeys::derive(self.suite, sik).map(Some)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn hs(suite: CipherSuite) -> Handshake {
        Handshake {
            suite,
            console_sid: 0x0403_0201,
            bmc_sid: 0x0807_0605,
            rm: [0xAA; 16],
            role: 0x14,
            username: b"admin".to_vec(),
        }
    }

    #[test]
    fn open_session_request_layout() {
        let m = open_session_request(7, 0x11223344, CipherSuite::Suite17);
        assert_eq!(
            m,
            vec![
                7, 0, 0, 0, 0x44, 0x33, 0x22, 0x11, //
                0, 0, 0, 8, 3, 0, 0, 0, //
                1, 0, 0, 8, 4, 0, 0, 0, //
                2, 0, 0, 8, 1, 0, 0, 0,
            ]
        );
    }

    #[test]
    fn open_session_response_refuses_downgrade() {
        let mut r = vec![7, 0, 4, 0, 0x44, 0x33, 0x22, 0x11, 9, 0, 0, 0];
        r.extend_from_slice(&[
            0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 8, 1, 0, 0, 0,
        ]);
        let ok = parse_open_session_response(&r, 7, 0x11223344, CipherSuite::Suite3).unwrap();
        assert_eq!(ok, Some(OpenSessionResponse { bmc_sid: 9 }));
        // Same answer for a suite-17 proposal is a downgrade.
        assert!(matches!(
            parse_open_session_response(&r, 7, 0x11223344, CipherSuite::Suite17),
            Err(Error::UnsupportedCipherSuite { .. })
        ));
        // Integrity "none".
        r[20] = 0;
        assert!(parse_open_session_response(&r, 7, 0x11223344, CipherSuite::Suite3).is_err());
        // Status "insufficient resources".
        let full = [7, 1, 0, 0, 0x44, 0x33, 0x22, 0x11];
        assert!(matches!(
            parse_open_session_response(&full, 7, 0x11223344, CipherSuite::Suite3),
            Err(Error::SessionLimit { status: 1 })
        ));
        // Another tag: ignored.
        assert_eq!(
            parse_open_session_response(&full, 8, 0x11223344, CipherSuite::Suite3).unwrap(),
            None
        );
    }

    #[test]
    fn rakp_codes_follow_the_spec_formulas() {
        // Recompute each MAC from the field list written out by hand.
        for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
            let h = hs(suite);
            let kuid = crate::Password::from("secret").key().unwrap();
            let rc = [0xBB; 16];
            let guid = [0xCC; 16];
            let mut input = vec![1, 2, 3, 4, 5, 6, 7, 8];
            input.extend_from_slice(&[0xAA; 16]);
            input.extend_from_slice(&[0xBB; 16]);
            input.extend_from_slice(&[0xCC; 16]);
            input.extend_from_slice(&[0x14, 5]);
            input.extend_from_slice(b"admin");
            assert_eq!(
                h.rakp2_code(&kuid, &rc, &guid).unwrap(),
                suite.hmac(&kuid, &[&input]).unwrap()
            );

            let mut r2 = vec![0x42, 0, 0, 0, 1, 2, 3, 4];
            r2.extend_from_slice(&rc);
            r2.extend_from_slice(&guid);
            r2.extend_from_slice(&suite.hmac(&kuid, &[&input]).unwrap());
            assert_eq!(h.check_rakp2(&r2, 0x42, &kuid).unwrap(), Some((rc, guid)));
            let wrong = crate::Password::from("other").key().unwrap();
            assert!(matches!(
                h.check_rakp2(&r2, 0x42, &wrong),
                Err(Error::AuthFailed(_))
            ));

            let r3 = h.rakp3(0x42, &kuid, &rc).unwrap();
            let mut r3_in = vec![0xBB; 16];
            r3_in.extend_from_slice(&[1, 2, 3, 4, 0x14, 5]);
            r3_in.extend_from_slice(b"admin");
            assert_eq!(&r3[8..], &suite.hmac(&kuid, &[&r3_in]).unwrap()[..]);
            assert_eq!(&r3[4..8], &[5, 6, 7, 8]);

            let sik = h.sik(&kuid, &rc).unwrap();
            let mut sik_in = vec![0xAA; 16];
            sik_in.extend_from_slice(&[0xBB; 16]);
            sik_in.extend_from_slice(&[0x14, 5]);
            sik_in.extend_from_slice(b"admin");
            assert_eq!(sik, suite.hmac(&kuid, &[&sik_in]).unwrap());
            assert_eq!(sik.len(), suite.hash_len());

            let mut icv_in = vec![0xAA; 16];
            icv_in.extend_from_slice(&[5, 6, 7, 8]);
            icv_in.extend_from_slice(&[0xCC; 16]);
            let icv = suite.hmac(&sik, &[&icv_in]).unwrap();
            let mut r4 = vec![0x42, 0, 0, 0, 1, 2, 3, 4];
            r4.extend_from_slice(&icv[..suite.icv_len()]);
            assert!(h.check_rakp4(&r4, 0x42, &sik, &guid).unwrap().is_some());
            // A full-length (untruncated) ICV is a protocol error, not accepted.
            let mut long = r4[..8].to_vec();
            long.extend_from_slice(&icv);
            assert!(h.check_rakp4(&long, 0x42, &sik, &guid).is_err());
        }
    }

    #[test]
    fn rakp1_layout() {
        let m = hs(CipherSuite::Suite3).rakp1(9).unwrap();
        assert_eq!(m.len(), 28 + 5);
        assert_eq!(&m[..8], &[9, 0, 0, 0, 5, 6, 7, 8]);
        assert_eq!(m[24], 0x14);
        assert_eq!(m[27], 5);
        let mut long = hs(CipherSuite::Suite3);
        long.username = vec![b'u'; 17];
        assert!(long.rakp1(1).is_err());
    }
}
