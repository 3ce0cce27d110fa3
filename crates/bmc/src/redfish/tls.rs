//! Certificate pinning: a TLS configuration that trusts exactly one server certificate.

use crate::error::BmcError;
use std::sync::Arc;

/// Accepts exactly one server certificate: the one whose DER has this SHA-256 digest. The
/// handshake's signatures are still checked against that certificate's key; the chain and the
/// name are not (the pin is the trust).
#[derive(Debug)]
struct PinnedCertificate {
    sha256: [u8; 32],
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

/// SHA-256 of `data`, with the TLS stack's own hash.
fn sha256(data: &[u8]) -> Option<[u8; 32]> {
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13()?;
    suite
        .common
        .hash_provider
        .hash(data)
        .as_ref()
        .try_into()
        .ok()
}

/// `AB:CD:...`, as `openssl x509 -fingerprint -sha256` prints it.
pub fn fingerprint_text(sha256: &[u8; 32]) -> String {
    sha256
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl rustls::client::danger::ServerCertVerifier for PinnedCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match sha256(end_entity.as_ref()) {
            Some(seen) if seen == self.sha256 => {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            seen => Err(rustls::Error::General(format!(
                "the BMC's certificate has SHA-256 fingerprint {}, not the pinned {}",
                seen.as_ref()
                    .map_or_else(|| "(unknown)".to_owned(), fingerprint_text),
                fingerprint_text(&self.sha256)
            ))),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A TLS configuration that trusts only the certificate with this SHA-256 fingerprint.
pub(super) fn pinned_tls(sha256: [u8; 32]) -> Result<rustls::ClientConfig, BmcError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BmcError::Config(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCertificate { sha256, algorithms }))
        .with_no_client_auth())
}
