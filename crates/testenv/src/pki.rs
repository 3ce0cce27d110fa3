//! Certificates and keys for a loopback control plane: a CA, the API server's serving
//! certificate (127.0.0.1, localhost and the address it binds) and the service-account signing key.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};

pub struct Pki {
    pub ca_cert_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub service_account_key_pem: String,
    pub service_account_public_pem: String,
}

pub fn generate(bind_address: std::net::IpAddr) -> Result<Pki, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ingot test control plane CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving_params =
        CertificateParams::new(vec!["localhost".to_owned(), "kubernetes".to_owned()])?;
    serving_params
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    if bind_address != std::net::IpAddr::from([127, 0, 0, 1]) {
        serving_params
            .subject_alt_names
            .push(SanType::IpAddress(bind_address));
    }
    serving_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let serving_cert = serving_params.signed_by(&serving_key, &issuer)?;

    let service_account_key = KeyPair::generate()?;
    Ok(Pki {
        ca_cert_pem: ca_cert.pem(),
        serving_cert_pem: serving_cert.pem(),
        serving_key_pem: serving_key.serialize_pem(),
        service_account_key_pem: service_account_key.serialize_pem(),
        service_account_public_pem: service_account_key.public_key_pem(),
    })
}
