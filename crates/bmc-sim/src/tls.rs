//! The fleet's own CA and certificates (generated at start, never written to the repository).

use crate::{BmcState, Fault, SimError};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::Arc;

/// A CA, a leaf for `localhost`/`127.0.0.1`/`::1`, and a leaf for another name (the TLS fault).
pub struct TlsMaterial {
    /// PEM of the CA certificate: what a client adds to its trusted roots.
    pub ca_pem: String,
    good: Arc<CertifiedKey>,
    wrong_name: Arc<CertifiedKey>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

fn tls_err(e: impl std::fmt::Display) -> SimError {
    SimError::Tls(e.to_string())
}

impl TlsMaterial {
    pub fn generate() -> Result<Self, SimError> {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let ca_key = rcgen::KeyPair::generate().map_err(tls_err)?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "ingot-bmc-sim test CA");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(tls_err)?;
        let leaf = |names: Vec<String>| -> Result<Arc<CertifiedKey>, SimError> {
            let key = rcgen::KeyPair::generate().map_err(tls_err)?;
            let mut params = rcgen::CertificateParams::new(names).map_err(tls_err)?;
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "ingot-bmc-sim BMC");
            let cert = params.signed_by(&key, &ca).map_err(tls_err)?;
            let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
            let signing = provider
                .key_provider
                .load_private_key(der)
                .map_err(tls_err)?;
            Ok(Arc::new(CertifiedKey::new(
                vec![CertificateDer::from(cert.der().to_vec()), ca.der().clone()],
                signing,
            )))
        };
        Ok(TlsMaterial {
            ca_pem: ca.pem(),
            good: leaf(vec!["localhost".into(), "127.0.0.1".into(), "::1".into()])?,
            wrong_name: leaf(vec!["wrong-name.invalid".into()])?,
        })
    }

    pub(crate) fn server_config(
        &self,
        bmc: Arc<BmcState>,
    ) -> Result<Arc<rustls::ServerConfig>, SimError> {
        let resolver = Resolver {
            good: self.good.clone(),
            wrong_name: self.wrong_name.clone(),
            bmc,
        };
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

#[derive(Debug)]
struct Resolver {
    good: Arc<CertifiedKey>,
    wrong_name: Arc<CertifiedKey>,
    bmc: Arc<BmcState>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if self.bmc.fault() == Some(Fault::TlsError) {
            Some(self.wrong_name.clone())
        } else {
            Some(self.good.clone())
        }
    }
}
