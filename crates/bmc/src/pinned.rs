//! An IPMI connector for the session manager that honours a cipher suite pinned per BMC
//! (rufio's `providerOptions.ipmitool.cipherSuite`).

use crate::error::BmcError;
use crate::ipmi::{IpmiBmc, IpmiOptions, ipmi_address};
use crate::manager::{BmcConfig, Connector};
use crate::{Bmc, Protocol};
use async_trait::async_trait;
use ingot_ipmi::CipherSuite;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An IPMI connector that honours a cipher suite pinned per BMC (`providerOptions.ipmitool`).
pub struct PinnedIpmiConnector {
    options: IpmiOptions,
    pinned: Mutex<HashMap<String, CipherSuite>>,
}

impl PinnedIpmiConnector {
    pub fn new(options: IpmiOptions) -> Self {
        PinnedIpmiConnector {
            options,
            pinned: Mutex::default(),
        }
    }

    fn key(config: &BmcConfig) -> String {
        format!("{}|{}", ipmi_address(&config.endpoint), config.username)
    }

    /// Records the suite for a BMC; returns whether it changed (the open session must go).
    pub fn pin(&self, config: &BmcConfig, suite: Option<CipherSuite>) -> bool {
        let mut pinned = match self.pinned.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        let key = Self::key(config);
        let before = match suite {
            Some(s) => pinned.insert(key, s),
            None => pinned.remove(&key),
        };
        before != suite
    }

    /// The suites tried with a BMC: its pinned one, else those of the options.
    pub fn suites(&self, config: &BmcConfig) -> Vec<CipherSuite> {
        let pinned = match self.pinned.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        match pinned.get(&Self::key(config)) {
            Some(s) => vec![*s],
            None => self.options.cipher_suites.clone(),
        }
    }
}

#[async_trait]
impl Connector for PinnedIpmiConnector {
    fn protocol(&self) -> Protocol {
        Protocol::Ipmi
    }

    async fn connect(&self, config: &BmcConfig) -> Result<Arc<dyn Bmc>, BmcError> {
        let mut options = self.options.clone();
        options.cipher_suites = self.suites(config);
        Ok(Arc::new(IpmiBmc::connect(config, &options).await?))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{Endpoint, Password};

    fn ipmi_config(host: &str, user: &str) -> BmcConfig {
        BmcConfig {
            endpoint: Endpoint::parse(host, None).unwrap(),
            username: user.into(),
            password: Password::new("pw"),
            protocol: Some(Protocol::Ipmi),
            insecure_tls: false,
            ca_bundle_pem: None,
            pinned_sha256: None,
            system_name: None,
            basic_auth: false,
        }
    }

    #[test]
    fn pinning_reports_changes() {
        let c = PinnedIpmiConnector::new(IpmiOptions::default());
        let t = ipmi_config("bmc1:623", "admin");
        assert!(!c.pin(&t, None));
        assert_eq!(c.suites(&t), IpmiOptions::default().cipher_suites);
        assert!(c.pin(&t, Some(CipherSuite::Suite3)));
        assert!(!c.pin(&t, Some(CipherSuite::Suite3)));
        assert_eq!(c.suites(&t), vec![CipherSuite::Suite3]);
        assert!(c.pin(&t, Some(CipherSuite::Suite17)));
        assert!(c.pin(&t, None));
    }

    #[test]
    fn a_suite_is_pinned_per_bmc_address_and_account() {
        let c = PinnedIpmiConnector::new(IpmiOptions::default());
        assert!(c.pin(&ipmi_config("bmc1:623", "admin"), Some(CipherSuite::Suite3)));
        assert_eq!(
            c.suites(&ipmi_config("bmc1:623", "admin")),
            vec![CipherSuite::Suite3]
        );
        for other in [
            ipmi_config("bmc1:623", "operator"),
            ipmi_config("bmc2:623", "admin"),
            ipmi_config("bmc1:6230", "admin"),
        ] {
            assert_eq!(c.suites(&other), IpmiOptions::default().cipher_suites);
        }
    }
}
