//! Cipher suites and the RMCP+ key material (IPMI 2.0 §13.28–13.32).

use aes::Aes128;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::NoPadding};
use hmac::{Hmac, Mac};

use crate::error::{Error, Result};

/// A password or BMC key (Kg). `Debug`/`Display` never show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(Vec<u8>);

impl Password {
    /// Wrap a secret. IPMI 2.0 keys are at most 20 bytes; longer secrets are
    /// rejected when the session is opened.
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Password(secret.into())
    }

    /// The key as RMCP+ uses it: the secret zero-padded to 20 bytes.
    pub(crate) fn key(&self) -> Result<[u8; 20]> {
        if self.0.len() > 20 {
            return Err(Error::Protocol(
                "IPMI 2.0 passwords are at most 20 bytes".into(),
            ));
        }
        let mut k = [0u8; 20];
        k[..self.0.len()].copy_from_slice(&self.0);
        Ok(k)
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl std::fmt::Display for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<&str> for Password {
    fn from(s: &str) -> Self {
        Password::new(s.as_bytes().to_vec())
    }
}

impl From<String> for Password {
    fn from(s: String) -> Self {
        Password::new(s.into_bytes())
    }
}

/// The cipher suites ingot speaks. Suite 0 (no authentication) is deliberately absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
    Suite3,
    /// RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128.
    Suite17,
}

pub(crate) const AUTH_HMAC_SHA1: u8 = 0x01;
pub(crate) const AUTH_HMAC_SHA256: u8 = 0x03;
pub(crate) const INTEGRITY_HMAC_SHA1_96: u8 = 0x01;
pub(crate) const INTEGRITY_HMAC_SHA256_128: u8 = 0x04;
pub(crate) const CONF_AES_CBC_128: u8 = 0x01;

impl CipherSuite {
    /// The suite id as ipmitool's `-C` takes it.
    pub fn id(self) -> u8 {
        match self {
            CipherSuite::Suite3 => 3,
            CipherSuite::Suite17 => 17,
        }
    }

    /// Look a suite up by id.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            3 => Some(CipherSuite::Suite3),
            17 => Some(CipherSuite::Suite17),
            _ => None,
        }
    }

    pub(crate) fn auth_alg(self) -> u8 {
        match self {
            CipherSuite::Suite3 => AUTH_HMAC_SHA1,
            CipherSuite::Suite17 => AUTH_HMAC_SHA256,
        }
    }

    pub(crate) fn integrity_alg(self) -> u8 {
        match self {
            CipherSuite::Suite3 => INTEGRITY_HMAC_SHA1_96,
            CipherSuite::Suite17 => INTEGRITY_HMAC_SHA256_128,
        }
    }

    pub(crate) fn conf_alg(self) -> u8 {
        CONF_AES_CBC_128
    }

    /// Length of the HMAC output (and of K1/K2/SIK).
    pub(crate) fn hash_len(self) -> usize {
        match self {
            CipherSuite::Suite3 => 20,
            CipherSuite::Suite17 => 32,
        }
    }

    /// Length of the truncated integrity AuthCode and of the RAKP 4 ICV.
    pub(crate) fn icv_len(self) -> usize {
        match self {
            CipherSuite::Suite3 => 12,
            CipherSuite::Suite17 => 16,
        }
    }

    /// HMAC over the concatenation of `parts`.
    pub(crate) fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Result<Vec<u8>> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Result<Vec<u8>> {
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .map_err(|_| Error::Protocol("HMAC key rejected".into()))?;
            for p in parts {
                mac.update(p);
            }
            Ok(mac.finalize().into_bytes().to_vec())
        }
        match self {
            CipherSuite::Suite3 => run::<Hmac<sha1::Sha1>>(key, parts),
            CipherSuite::Suite17 => run::<Hmac<sha2::Sha256>>(key, parts),
        }
    }
}

impl std::fmt::Display for CipherSuite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.id())
    }
}

/// Keys of an established session.
#[derive(Clone)]
pub(crate) struct SessionKeys {
    pub suite: CipherSuite,
    /// Integrity key K1 (full hash length).
    pub k1: Vec<u8>,
    /// AES-128 key: the first 16 bytes of K2.
    pub aes: [u8; 16],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeys")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

impl SessionKeys {
    /// K1 = HMAC(SIK, Const1), K2 = HMAC(SIK, Const2) (§13.32). The
    /// constants are 20 bytes of 0x01 / 0x02 for every suite, SHA256 too
    /// (table 13-19; ipmitool and BMC firmware agree).
    pub fn derive(suite: CipherSuite, sik: &[u8]) -> Result<Self> {
        let k1 = suite.hmac(sik, &[&[0x01; 20]])?;
        let k2 = suite.hmac(sik, &[&[0x02; 20]])?;
        let mut aes = [0u8; 16];
        aes.copy_from_slice(
            k2.get(..16)
                .ok_or_else(|| Error::Protocol("short K2".into()))?,
        );
        Ok(SessionKeys { suite, k1, aes })
    }

    /// The integrity AuthCode: HMAC(K1, data) truncated to 12 or 16 bytes.
    pub fn auth_code(&self, data: &[u8]) -> Result<Vec<u8>> {
        let mut mac = self.suite.hmac(&self.k1, &[data])?;
        mac.truncate(self.suite.icv_len());
        Ok(mac)
    }

    /// AES-CBC-128 with the RMCP+ confidentiality header and trailer (§13.29):
    /// IV ‖ E(data ‖ 1,2,3…N ‖ N).
    pub fn encrypt(&self, iv: [u8; 16], data: &[u8]) -> Result<Vec<u8>> {
        let pad = (16 - (data.len() + 1) % 16) % 16;
        let mut plain = Vec::with_capacity(data.len() + pad + 1);
        plain.extend_from_slice(data);
        for i in 1..=pad {
            plain.push(i as u8);
        }
        plain.push(pad as u8);
        let enc = cbc::Encryptor::<Aes128>::new_from_slices(&self.aes, &iv)
            .map_err(|_| Error::Protocol("AES key setup".into()))?;
        let ct = enc.encrypt_padded_vec_mut::<NoPadding>(&plain);
        let mut out = Vec::with_capacity(16 + ct.len());
        out.extend_from_slice(&iv);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Inverse of [`Self::encrypt`], checking the trailer.
    pub fn decrypt(&self, payload: &[u8]) -> Result<Vec<u8>> {
        if payload.len() < 32 || !payload.len().is_multiple_of(16) {
            return Err(Error::Protocol(format!(
                "encrypted payload of {} bytes is not IV + whole AES blocks",
                payload.len()
            )));
        }
        let (iv, ct) = payload.split_at(16);
        let dec = cbc::Decryptor::<Aes128>::new_from_slices(&self.aes, iv)
            .map_err(|_| Error::Protocol("AES key setup".into()))?;
        let mut plain = dec
            .decrypt_padded_vec_mut::<NoPadding>(ct)
            .map_err(|_| Error::Protocol("AES-CBC decryption failed".into()))?;
        let pad = usize::from(*plain.last().unwrap_or(&0));
        if pad > 15 || pad + 1 > plain.len() {
            return Err(Error::Protocol("bad confidentiality trailer".into()));
        }
        let body = plain.len() - pad - 1;
        // The pad bytes are 1, 2, 3, …; a mismatch means the wrong key.
        for (i, b) in plain[body..body + pad].iter().enumerate() {
            if usize::from(*b) != i + 1 {
                return Err(Error::Protocol("bad confidentiality pad".into()));
            }
        }
        plain.truncate(body);
        Ok(plain)
    }
}

/// Constant-time comparison for MACs.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn hmac_matches_rfc_vectors() {
        // RFC 2202 test case 2 (HMAC-SHA1) and RFC 4231 test case 2 (HMAC-SHA256).
        let sha1 = CipherSuite::Suite3
            .hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"])
            .unwrap();
        assert_eq!(sha1, hex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"));
        let sha256 = CipherSuite::Suite17
            .hmac(b"Jefe", &[b"what do ya want for nothing?"])
            .unwrap();
        assert_eq!(
            sha256,
            hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        );
    }

    #[test]
    fn zero_padded_key_gives_the_same_mac_as_the_bare_password() {
        // RMCP+ pads Kuid to 20 bytes; HMAC pads keys with zeros to the block
        // size anyway, so both must agree (ipmitool relies on this too).
        let pw = Password::from("admin");
        let padded = pw.key().unwrap();
        for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
            assert_eq!(
                suite.hmac(&padded, &[b"x"]).unwrap(),
                suite.hmac(b"admin", &[b"x"]).unwrap()
            );
        }
        assert!(Password::new(vec![b'a'; 21]).key().is_err());
    }

    #[test]
    fn k1_k2_are_hmacs_of_constant_blocks() {
        let sik = [0x11u8; 20];
        let keys = SessionKeys::derive(CipherSuite::Suite3, &sik).unwrap();
        assert_eq!(
            keys.k1,
            CipherSuite::Suite3.hmac(&sik, &[&[1u8; 20]]).unwrap()
        );
        let k2 = CipherSuite::Suite3.hmac(&sik, &[&[2u8; 20]]).unwrap();
        assert_eq!(&keys.aes[..], &k2[..16]);
        let sik = [0x22u8; 32];
        let keys = SessionKeys::derive(CipherSuite::Suite17, &sik).unwrap();
        // SHA256 still uses the 20-byte constants.
        assert_eq!(
            keys.k1,
            CipherSuite::Suite17.hmac(&sik, &[&[1u8; 20]]).unwrap()
        );
        assert_ne!(
            keys.k1,
            CipherSuite::Suite17.hmac(&sik, &[&[1u8; 32]]).unwrap()
        );
        assert_eq!(keys.k1.len(), 32);
        assert_eq!(keys.auth_code(b"abc").unwrap().len(), 16);
    }

    #[test]
    fn aes_roundtrip_and_padding_layout() {
        let keys = SessionKeys {
            suite: CipherSuite::Suite3,
            k1: vec![0; 20],
            aes: [7; 16],
        };
        for len in [0usize, 1, 14, 15, 16, 17, 40] {
            let data: Vec<u8> = (0..len as u8).collect();
            let ct = keys.encrypt([9; 16], &data).unwrap();
            assert_eq!(ct.len() % 16, 0);
            assert_eq!(&ct[..16], &[9; 16]);
            // 15 bytes of data need no pad: 15 + 1 length byte fills a block.
            if len == 15 {
                assert_eq!(ct.len(), 32);
            }
            assert_eq!(keys.decrypt(&ct).unwrap(), data);
        }
        // AES-128 FIPS-197 appendix C.1 through the CBC path with a zero IV.
        let fips = SessionKeys {
            suite: CipherSuite::Suite3,
            k1: vec![],
            aes: hex("000102030405060708090a0b0c0d0e0f").try_into().unwrap(),
        };
        let enc = cbc::Encryptor::<Aes128>::new_from_slices(&fips.aes, &[0u8; 16])
            .unwrap()
            .encrypt_padded_vec_mut::<NoPadding>(&hex("00112233445566778899aabbccddeeff"));
        assert_eq!(enc, hex("69c4e0d86a7b0430d8cdb78070b4c55a"));
    }

    #[test]
    fn decrypt_rejects_garbage() {
        let keys = SessionKeys {
            suite: CipherSuite::Suite3,
            k1: vec![0; 20],
            aes: [7; 16],
        };
        assert!(keys.decrypt(&[0u8; 15]).is_err());
        assert!(keys.decrypt(&[0u8; 31]).is_err());
        let other = SessionKeys {
            aes: [8; 16],
            ..keys.clone()
        };
        let ct = other.encrypt([1; 16], b"hello").unwrap();
        assert!(keys.decrypt(&ct).is_err());
    }

    #[test]
    fn password_is_redacted() {
        let pw = Password::from("hunter2");
        assert!(!format!("{pw:?}").contains("hunter2"));
        assert!(!format!("{pw}").contains("hunter2"));
    }
}
