//! From a Rufio `connection` to a BMC handle of the session manager: credentials from the
//! Secret, the Redfish and IPMI ports and the IPMI cipher suite from `providerOptions`, and the
//! working protocol detected once per BMC and remembered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use ingot_api::rufio::Connection;
use ingot_bmc::ipmi::{IpmiOptions, ipmi_address};
use ingot_bmc::manager::{BmcConfig, Connector, ManagedBmc, SessionManager};
use ingot_bmc::pinned::PinnedIpmiConnector;
use ingot_bmc::{Bmc, BmcError, Endpoint, Password, PowerState, Protocol, Scheme};
use ingot_ipmi::CipherSuite;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

/// Redfish's port when `providerOptions.redfish.port` is not set (bmclib's default).
pub const REDFISH_PORT: u16 = 443;
/// IPMI's port when neither `providerOptions.ipmitool.port` nor `connection.port` says.
pub const IPMI_PORT: u16 = 623;

/// Why a Machine's connection cannot be used. Messages name the field and the fix, and never
/// carry a credential.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(
        "connection.authSecretRef is not set: name a Secret with `username` and `password` keys"
    )]
    NoSecret,
    #[error("reading the Secret {namespace}/{name} of connection.authSecretRef: {source}")]
    SecretRead {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("'{key}' required in Machine secret {namespace}/{name}")]
    SecretKey {
        key: &'static str,
        namespace: String,
        name: String,
    },
    #[error("connection.host {host:?} is not a BMC address: {reason}")]
    Host { host: String, reason: &'static str },
    #[error("{field} {value} is not a port: use 1-65535")]
    Port { field: &'static str, value: i64 },
    #[error(
        "providerOptions.ipmitool.cipherSuite {0:?} is not supported: use \"3\" or \"17\" (suite 0 has no authentication)"
    )]
    CipherSuite(String),
    #[error("{0}")]
    Refused(#[from] super::tenancy::Refusal),
    #[error("{0}")]
    Fingerprint(#[from] super::tenancy::FingerprintError),
    #[error(
        "providerOptions.rpc is not supported by ingot (no RPC provider): remove it and reach the BMC over Redfish or IPMI"
    )]
    Rpc,
}

/// Username and password of a BMC.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub username: String,
    pub password: Password,
}

/// The namespace and name of `connection.authSecretRef` (its namespace defaults to the
/// object's).
pub fn secret_ref(
    connection: &Connection,
    default_namespace: &str,
) -> Result<(String, String), ConnectionError> {
    let reference = connection
        .auth_secret_ref
        .as_ref()
        .ok_or(ConnectionError::NoSecret)?;
    let name = reference.name.clone().unwrap_or_default();
    let namespace = reference
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| default_namespace.to_owned());
    if name.is_empty() {
        return Err(ConnectionError::NoSecret);
    }
    Ok((namespace, name))
}

/// Reads the Secret's `username` and `password` keys from the API server.
pub async fn read_credentials(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Credentials, ConnectionError> {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = secrets
        .get(&name)
        .await
        .map_err(|source| ConnectionError::SecretRead {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
    let value = |key: &'static str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .cloned()
            })
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ConnectionError::SecretKey {
                key,
                namespace: namespace.clone(),
                name: name.clone(),
            })
    };
    Ok(Credentials {
        username: value("username")?,
        password: Password::new(value("password")?),
    })
}

/// Where and how to reach one BMC, per protocol.
#[derive(Clone, Debug)]
pub struct Target {
    pub redfish: BmcConfig,
    pub ipmi: BmcConfig,
    /// `providerOptions.ipmitool.cipherSuite`; `None` tries 17, then 3.
    pub cipher_suite: Option<CipherSuite>,
    /// `providerOptions.preferredOrder` names ipmitool before any Redfish provider.
    pub ipmi_first: bool,
    /// Options accepted but not acted on, for an Event.
    pub ignored: Vec<&'static str>,
}

fn port(field: &'static str, value: i64) -> Result<u16, ConnectionError> {
    u16::try_from(value)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(ConnectionError::Port { field, value })
}

/// Redfish providers of bmclib (all speak Redfish or a vendor web API on the HTTPS port).
const REDFISH_DRIVERS: [&str; 6] = [
    "gofish",
    "dell",
    "supermicro",
    "asrockrack",
    "openbmc",
    "redfish",
];

/// Builds the per-protocol configurations of a connection.
pub fn target(connection: &Connection, creds: &Credentials) -> Result<Target, ConnectionError> {
    let options = connection.provider_options.clone().unwrap_or_default();
    if options.rpc.is_some() {
        return Err(ConnectionError::Rpc);
    }
    let parsed = Endpoint::parse(&connection.host, None).map_err(|e| ConnectionError::Host {
        host: connection.host.clone(),
        reason: e.reason,
    })?;
    let redfish_port = match options.redfish.as_ref().and_then(|r| r.port) {
        Some(p) => port("providerOptions.redfish.port", p)?,
        None => parsed.port.unwrap_or(REDFISH_PORT),
    };
    // connection.port is Rufio's IPMI port (default 623); ipmitool.port wins when set.
    let ipmi_port = match options.ipmitool.as_ref().and_then(|i| i.port) {
        Some(p) => port("providerOptions.ipmitool.port", p)?,
        None => port("connection.port", connection.port)?,
    };
    let cipher_suite = match options
        .ipmitool
        .as_ref()
        .and_then(|i| i.cipher_suite.as_deref())
        .map(str::trim)
    {
        None | Some("") => None,
        Some("3") => Some(CipherSuite::Suite3),
        Some("17") => Some(CipherSuite::Suite17),
        Some(other) => return Err(ConnectionError::CipherSuite(other.to_owned())),
    };
    let ipmi_first = options.preferred_order.as_ref().is_some_and(|order| {
        let rank = |f: &dyn Fn(&str) -> bool| order.iter().position(|d| f(&d.to_lowercase()));
        match (
            rank(&|d| d == "ipmitool" || d == "ipmi"),
            rank(&|d| REDFISH_DRIVERS.contains(&d)),
        ) {
            (Some(i), Some(r)) => i < r,
            (Some(_), None) => true,
            _ => false,
        }
    });
    let mut ignored = Vec::new();
    if options.intel_amt.is_some() {
        ignored.push("providerOptions.intelAMT (ingot speaks Redfish and IPMI, not AMT)");
    }
    let config = |scheme, port, protocol| BmcConfig {
        endpoint: Endpoint {
            scheme,
            host: parsed.host.clone(),
            port: Some(port),
        },
        username: creds.username.clone(),
        password: creds.password.clone(),
        protocol: Some(protocol),
        insecure_tls: connection.insecure_tls,
        ca_bundle_pem: None,
        pinned_sha256: None,
        system_name: None,
        basic_auth: false,
    };
    let redfish = options.redfish.as_ref();
    Ok(Target {
        redfish: BmcConfig {
            system_name: redfish
                .and_then(|r| r.system_name.clone())
                .filter(|n| !n.is_empty()),
            basic_auth: redfish.and_then(|r| r.use_basic_auth) == Some(true),
            ..config(parsed.scheme, redfish_port, Protocol::Redfish)
        },
        ipmi: config(Scheme::Https, ipmi_port, Protocol::Ipmi),
        cipher_suite,
        ipmi_first,
        ignored,
    })
}

/// Why no protocol reached a BMC.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReachError(pub String);

/// The session manager plus what ingot remembers per BMC: its protocol, and which objects
/// (Machines, Tasks) use it, so that a BMC no object refers to any more is logged out.
pub struct Bmcs {
    pub manager: Arc<SessionManager>,
    ipmi: Arc<PinnedIpmiConnector>,
    detected: Mutex<HashMap<String, Protocol>>,
    /// Object (`namespace/name`) -> the target it last reached.
    users: Mutex<HashMap<String, Target>>,
}

/// A BMC reached: its handle, the protocol, and the power state read while detecting it.
pub struct Reached {
    pub bmc: ManagedBmc,
    pub protocol: Protocol,
    pub power: Option<PowerState>,
}

impl Bmcs {
    pub fn new(
        manager: impl FnOnce(Vec<Arc<dyn Connector>>) -> Arc<SessionManager>,
        ipmi: IpmiOptions,
    ) -> Self {
        let connector = Arc::new(PinnedIpmiConnector::new(ipmi));
        let manager = manager(vec![connector.clone() as Arc<dyn Connector>]);
        Bmcs {
            manager,
            ipmi: connector,
            detected: Mutex::default(),
            users: Mutex::default(),
        }
    }

    /// [`Bmcs::reach`] on behalf of an object, remembered for [`Bmcs::forget_users_except`].
    pub async fn reach_for(&self, user: &str, target: &Target) -> Result<Reached, ReachError> {
        if let Ok(mut users) = self.users.lock() {
            users.insert(user.to_owned(), target.clone());
        }
        self.reach(target).await
    }

    /// Forgets the users not in `live` and logs out of the BMCs only they used (both
    /// protocols); returns how many sessions were closed. Sessions a live object may still
    /// need are never touched, and a session a reconcile is using right now is left for the
    /// next sweep (its user is kept until then).
    pub async fn forget_users_except(&self, live: &HashSet<String>) -> usize {
        let gone: Vec<(String, Target)> = {
            let Ok(mut users) = self.users.lock() else {
                return 0;
            };
            let kept: HashSet<String> = users
                .iter()
                .filter(|(user, _)| live.contains(*user))
                .map(|(_, target)| Self::key(target))
                .collect();
            let stale: Vec<String> = users
                .keys()
                .filter(|user| !live.contains(*user))
                .cloned()
                .collect();
            let mut gone = Vec::new();
            for user in stale {
                match users.get(&user) {
                    // Another live object still uses this BMC: only the user is forgotten.
                    Some(target) if kept.contains(&Self::key(target)) => {
                        users.remove(&user);
                    }
                    Some(target) => gone.push((user, target.clone())),
                    None => {}
                }
            }
            gone
        };
        let mut closed = 0;
        for (user, target) in gone {
            let mut in_use = false;
            for config in [&target.redfish, &target.ipmi] {
                match self.manager.evict_unused(config).await {
                    Some(true) => closed += 1,
                    Some(false) => in_use = true,
                    None => {}
                }
            }
            if in_use {
                continue;
            }
            if let Ok(mut detected) = self.detected.lock() {
                detected.remove(&Self::key(&target));
            }
            if let Ok(mut users) = self.users.lock() {
                users.remove(&user);
            }
        }
        closed
    }

    /// A BMC as its Redfish client sees it (the system managed on it and the authentication
    /// are part of that: such Machines have clients of their own, logged out apart), and its
    /// IPMI address.
    fn key(target: &Target) -> String {
        format!("{}|{}", target.redfish.key(), target.ipmi.endpoint)
    }

    fn handle(&self, target: &Target, protocol: Protocol) -> ManagedBmc {
        match protocol {
            Protocol::Redfish => self.manager.bmc(target.redfish.clone()),
            Protocol::Ipmi => self.manager.bmc(target.ipmi.clone()),
        }
    }

    /// The protocol detected for this target, if any.
    pub fn known(&self, target: &Target) -> Option<Protocol> {
        self.detected.lock().ok()?.get(&Self::key(target)).copied()
    }

    /// A handle on the BMC's protocol. The first time, each protocol is tried in order with a
    /// power-state read; a protocol that answered with a refusal (credentials, TLS) is the
    /// BMC's protocol and no other is tried.
    pub async fn reach(&self, target: &Target) -> Result<Reached, ReachError> {
        if self.ipmi.pin(&target.ipmi, target.cipher_suite) {
            let _ = self.manager.bmc(target.ipmi.clone()).close().await;
        }
        if let Some(protocol) = self.known(target) {
            return Ok(Reached {
                bmc: self.handle(target, protocol),
                protocol,
                power: None,
            });
        }
        let order = if target.ipmi_first {
            [Protocol::Ipmi, Protocol::Redfish]
        } else {
            [Protocol::Redfish, Protocol::Ipmi]
        };
        let mut failures = Vec::new();
        for protocol in order {
            let bmc = self.handle(target, protocol);
            match bmc.power_state().await {
                Ok(state) => {
                    if let Ok(mut d) = self.detected.lock() {
                        d.insert(Self::key(target), protocol);
                    }
                    return Ok(Reached {
                        bmc,
                        protocol,
                        power: Some(state),
                    });
                }
                Err(e) if answered(&e) => {
                    return Err(ReachError(describe(protocol, target, &e)));
                }
                Err(e) => failures.push(describe(protocol, target, &e)),
            }
        }
        Err(ReachError(format!(
            "failed to open connection to BMC: {}",
            failures.join("; ")
        )))
    }
}

/// The BMC answered this protocol, but refused (so it is the BMC's protocol).
fn answered(e: &BmcError) -> bool {
    matches!(
        e,
        BmcError::Unauthorized
            | BmcError::Forbidden
            | BmcError::SessionLimit
            | BmcError::Tls(_)
            | BmcError::Command { .. }
            | BmcError::Http { .. }
    )
}

/// `redfish at https://h:443: cannot reach the BMC (connection refused)`.
pub fn describe(protocol: Protocol, target: &Target, e: &BmcError) -> String {
    let at = match protocol {
        Protocol::Redfish => target.redfish.endpoint.to_string(),
        Protocol::Ipmi => ipmi_address(&target.ipmi.endpoint),
    };
    format!("{protocol} at {at}: {}", error_chain(e))
}

/// An error with its first cause (the causes of BMC errors carry no credentials).
pub fn error_chain(e: &BmcError) -> String {
    use std::error::Error as _;
    match e.source() {
        Some(cause) => {
            let mut text = cause.to_string();
            // reqwest's message names the URL, which the caller already said.
            if let Some(inner) = cause.source() {
                text = inner.to_string();
            }
            // A TLS failure says why at the bottom (an unknown issuer, a pin that does not
            // match), under layers that only say "connect".
            if matches!(e, BmcError::Tls(_)) {
                let mut deepest: &dyn std::error::Error = cause;
                while let Some(inner) = deepest.source() {
                    deepest = inner;
                }
                text = deepest.to_string();
            }
            format!("{e} ({text})")
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ingot_api::rufio::{IpmitoolOptions, ProviderOptions, RedfishOptions, RpcOptions};

    fn creds() -> Credentials {
        Credentials {
            username: "admin".into(),
            password: Password::new("pw"),
        }
    }

    fn conn(host: &str, options: Option<ProviderOptions>) -> Connection {
        Connection {
            host: host.into(),
            port: 623,
            auth_secret_ref: None,
            insecure_tls: true,
            provider_options: options,
        }
    }

    #[test]
    fn default_ports() {
        let t = target(&conn("10.0.0.5", None), &creds()).unwrap();
        assert_eq!(t.redfish.endpoint.base_url(), "https://10.0.0.5:443");
        assert_eq!(ipmi_address(&t.ipmi.endpoint), "10.0.0.5:623");
        assert_eq!(t.cipher_suite, None);
        assert!(!t.ipmi_first);
        assert!(t.redfish.insecure_tls);
    }

    #[test]
    fn provider_ports_and_cipher_suite() {
        let opts = ProviderOptions {
            redfish: Some(RedfishOptions {
                port: Some(8443),
                ..Default::default()
            }),
            ipmitool: Some(IpmitoolOptions {
                port: Some(6230),
                cipher_suite: Some("3".into()),
            }),
            preferred_order: Some(vec!["ipmitool".into(), "gofish".into()]),
            ..Default::default()
        };
        let t = target(&conn("bmc1", Some(opts)), &creds()).unwrap();
        assert_eq!(t.redfish.endpoint.base_url(), "https://bmc1:8443");
        assert_eq!(ipmi_address(&t.ipmi.endpoint), "bmc1:6230");
        assert_eq!(t.cipher_suite, Some(CipherSuite::Suite3));
        assert!(t.ipmi_first);
    }

    #[test]
    fn connection_port_is_the_ipmi_port() {
        let mut c = conn("bmc1", None);
        c.port = 6231;
        let t = target(&c, &creds()).unwrap();
        assert_eq!(ipmi_address(&t.ipmi.endpoint), "bmc1:6231");
        assert_eq!(t.redfish.endpoint.port, Some(443));
    }

    #[test]
    fn refused_options_name_the_field() {
        let rpc = ProviderOptions {
            rpc: Some(RpcOptions {
                consumer_url: "https://example.invalid/rpc".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = target(&conn("bmc1", Some(rpc)), &creds()).unwrap_err();
        assert!(e.to_string().contains("providerOptions.rpc"), "{e}");
        let suite0 = ProviderOptions {
            ipmitool: Some(IpmitoolOptions {
                port: None,
                cipher_suite: Some("0".into()),
            }),
            ..Default::default()
        };
        let e = target(&conn("bmc1", Some(suite0)), &creds()).unwrap_err();
        assert!(e.to_string().contains("cipherSuite"), "{e}");
        let mut bad = conn("bmc1", None);
        bad.port = 70000;
        let e = target(&bad, &creds()).unwrap_err();
        assert!(e.to_string().contains("connection.port 70000"), "{e}");
        let e = target(&conn("u:p@bmc1", None), &creds()).unwrap_err();
        assert!(e.to_string().contains("connection.host"), "{e}");
    }

    #[test]
    fn redfish_options_reach_the_redfish_client_only() {
        let opts = ProviderOptions {
            redfish: Some(RedfishOptions {
                port: None,
                use_basic_auth: Some(true),
                system_name: Some("s1".into()),
            }),
            ..Default::default()
        };
        let t = target(&conn("bmc1", Some(opts)), &creds()).unwrap();
        assert!(t.ignored.is_empty(), "{:?}", t.ignored);
        assert_eq!(t.redfish.system_name.as_deref(), Some("s1"));
        assert!(t.redfish.basic_auth);
        assert_eq!(t.ipmi.system_name, None);
        assert!(!t.ipmi.basic_auth);
    }
}
