//! Tenant isolation: which namespaces the references of a Machine, Job or Task may cross, and
//! whether its BMC may be spoken to over plain HTTP.
//!
//! An object refers to Secrets and Machines of its own namespace. Another namespace only when
//! the operator allows that pair (`ingot run --rufio-allow-cross-namespace FROM=TO`); else the
//! object is refused before anything is read or sent. A BMC whose `connection.host` is
//! `http://` would receive the password in clear: refused unless the object carries
//! [`ALLOW_HTTP_ANNOTATION`] `: "true"`.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use ingot_api::rufio::Connection;
use ingot_bmc::{Endpoint, Scheme};

/// Set to `"true"` on a Machine, Task or Seeder Inventory to accept a `http://` BMC (its
/// password then goes over the network in clear). Jobs copy it from their Machine to their Tasks.
pub const ALLOW_HTTP_ANNOTATION: &str = "rufio.ingot.dev/allow-insecure-http";

/// The SHA-256 fingerprint of the only certificate to accept from the BMC (64 hex digits,
/// colons allowed, as `openssl x509 -noout -fingerprint -sha256` prints it), on a Machine, Task
/// or Seeder Inventory: the BMC is then trusted by that certificate alone, without
/// `insecureTLS`. Jobs copy it from their Machine to their Tasks.
pub const TLS_FINGERPRINT_ANNOTATION: &str = "rufio.ingot.dev/tls-sha256-fingerprint";

/// The annotations of a Machine that its Tasks (and of an Inventory that its Machine) carry.
pub const CARRIED_ANNOTATIONS: [&str; 2] = [ALLOW_HTTP_ANNOTATION, TLS_FINGERPRINT_ANNOTATION];

/// Those of `annotations` that are carried to the objects made from them.
pub fn carried(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    annotations
        .iter()
        .filter(|(k, _)| CARRIED_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A [`TLS_FINGERPRINT_ANNOTATION`] that is not a SHA-256 fingerprint.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "annotation {TLS_FINGERPRINT_ANNOTATION} {0:?} is not a SHA-256 fingerprint: give the 64 hex digits of the BMC certificate's (colons allowed), as `openssl x509 -noout -fingerprint -sha256` prints them"
)]
pub struct FingerprintError(pub String);

/// The pinned certificate's SHA-256, if the object pins one.
pub fn pinned_sha256(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<[u8; 32]>, FingerprintError> {
    let Some(text) = annotations.get(TLS_FINGERPRINT_ANNOTATION) else {
        return Ok(None);
    };
    let digits: Vec<u8> = text.trim().bytes().filter(|b| *b != b':').collect();
    let bad = || FingerprintError(text.clone());
    if digits.len() != 64 {
        return Err(bad());
    }
    let mut sha256 = [0u8; 32];
    for (byte, pair) in sha256.iter_mut().zip(digits.chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    Ok(Some(sha256))
}

/// The Event reason of a reference to another namespace that the operator did not allow.
pub const CROSS_NAMESPACE_REFUSED: &str = "CrossNamespaceRefused";
/// The Event reason of a `http://` BMC without [`ALLOW_HTTP_ANNOTATION`].
pub const PLAIN_HTTP_REFUSED: &str = "PlainHttpRefused";

/// The namespace pairs the operator allowed: objects of `from` may refer to `to`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrossNamespace {
    pairs: BTreeSet<(String, String)>,
}

/// An allow-list entry that is not `FROM=TO`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--rufio-allow-cross-namespace {0:?}: write FROM=TO (objects in namespace FROM may refer to Secrets and Machines in namespace TO), pairs separated by commas"
)]
pub struct AllowListError(pub String);

impl CrossNamespace {
    /// Parses `FROM=TO` entries (empty entries are skipped).
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, AllowListError> {
        let mut pairs = BTreeSet::new();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry.is_empty() {
                continue;
            }
            let valid = |n: &str| {
                !n.is_empty()
                    && n.len() <= 63
                    && n.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            };
            match entry.split_once('=') {
                Some((from, to)) if valid(from.trim()) && valid(to.trim()) => {
                    pairs.insert((from.trim().to_owned(), to.trim().to_owned()));
                }
                _ => return Err(AllowListError(entry.to_owned())),
            }
        }
        Ok(CrossNamespace { pairs })
    }

    /// Whether an object of namespace `from` may refer to namespace `to`.
    pub fn allows(&self, from: &str, to: &str) -> bool {
        from == to || self.pairs.contains(&(from.to_owned(), to.to_owned()))
    }
}

/// Why ingot does not use a reference as written. Nothing is read or sent for it.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error(
        "{field} {to:?} is not this object's namespace {from:?}: ingot reads BMC credentials from the object's own namespace only. Put the Secret in {from:?}, or have the operator allow it (`ingot run --rufio-allow-cross-namespace {from}={to}`, chart value rufio.allowCrossNamespace)"
    )]
    SecretNamespace {
        field: &'static str,
        from: String,
        to: String,
    },
    #[error(
        "spec.machineRef.namespace {to:?} is not the Job's namespace {from:?}: a Job drives only Machines of its own namespace. Create the Job in {to:?}, or have the operator allow it (`ingot run --rufio-allow-cross-namespace {from}={to}`, chart value rufio.allowCrossNamespace)"
    )]
    MachineNamespace { from: String, to: String },
    #[error(
        "{field} {host:?} is plain http://: the BMC password would cross the network in clear. Use https://, or annotate the object {ALLOW_HTTP_ANNOTATION}=\"true\" to accept that"
    )]
    PlainHttp { field: &'static str, host: String },
}

impl Refusal {
    /// The reason of the Warning Event that reports it.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::SecretNamespace { .. } | Refusal::MachineNamespace { .. } => {
                CROSS_NAMESPACE_REFUSED
            }
            Refusal::PlainHttp { .. } => PLAIN_HTTP_REFUSED,
        }
    }
}

/// The field of a connection in an object's spec (`spec.connection` for Rufio's objects,
/// `spec.baseboardSpec.connection` for a Seeder Inventory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionField {
    Rufio,
    Inventory,
}

impl ConnectionField {
    fn secret_namespace(self) -> &'static str {
        match self {
            ConnectionField::Rufio => "spec.connection.authSecretRef.namespace",
            ConnectionField::Inventory => "spec.baseboardSpec.connection.authSecretRef.namespace",
        }
    }

    fn host(self) -> &'static str {
        match self {
            ConnectionField::Rufio => "spec.connection.host",
            ConnectionField::Inventory => "spec.baseboardSpec.connection.host",
        }
    }
}

/// Whether the connection speaks plain HTTP to its BMC (accepted only with the annotation).
pub fn plain_http(connection: &Connection) -> bool {
    Endpoint::parse(&connection.host, None).is_ok_and(|e| e.scheme == Scheme::Http)
}

/// Whether the object's annotations accept a `http://` BMC.
pub fn http_allowed(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(ALLOW_HTTP_ANNOTATION)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Checks a connection of an object of `namespace` before its Secret is read: the Secret's
/// namespace, and plain HTTP.
pub fn check_connection(
    field: ConnectionField,
    namespace: &str,
    annotations: &BTreeMap<String, String>,
    connection: &Connection,
    allowed: &CrossNamespace,
) -> Result<(), Refusal> {
    if plain_http(connection) && !http_allowed(annotations) {
        return Err(Refusal::PlainHttp {
            field: field.host(),
            host: connection.host.clone(),
        });
    }
    if let Some(to) = connection
        .auth_secret_ref
        .as_ref()
        .and_then(|r| r.namespace.as_deref())
        .filter(|n| !n.is_empty())
        && !allowed.allows(namespace, to)
    {
        return Err(Refusal::SecretNamespace {
            field: field.secret_namespace(),
            from: namespace.to_owned(),
            to: to.to_owned(),
        });
    }
    Ok(())
}

/// Checks a Job's `spec.machineRef.namespace` (`machine_namespace`, defaulted to the Job's).
pub fn check_machine_ref(
    job_namespace: &str,
    machine_namespace: &str,
    allowed: &CrossNamespace,
) -> Result<(), Refusal> {
    if allowed.allows(job_namespace, machine_namespace) {
        Ok(())
    } else {
        Err(Refusal::MachineNamespace {
            from: job_namespace.to_owned(),
            to: machine_namespace.to_owned(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::SecretReference;

    fn conn(host: &str, secret_ns: Option<&str>) -> Connection {
        Connection {
            host: host.into(),
            port: 623,
            auth_secret_ref: Some(SecretReference {
                name: Some("bmc".into()),
                namespace: secret_ns.map(Into::into),
            }),
            insecure_tls: false,
            provider_options: None,
        }
    }

    #[test]
    fn the_allow_list_is_pairs_and_the_own_namespace_is_always_allowed() {
        let allowed =
            CrossNamespace::parse(&["team-a=bmc-secrets", " team-b = shared ", ""]).unwrap();
        assert!(allowed.allows("team-a", "team-a"));
        assert!(allowed.allows("team-a", "bmc-secrets"));
        assert!(allowed.allows("team-b", "shared"));
        // A pair allows one direction only.
        assert!(!allowed.allows("bmc-secrets", "team-a"));
        assert!(!allowed.allows("team-a", "shared"));
        assert!(CrossNamespace::default().allows("x", "x"));
        assert!(!CrossNamespace::default().allows("x", "y"));
        for bad in ["team-a", "=b", "a=", "A=b", "a=b=c", "a/b=c"] {
            let e = CrossNamespace::parse(&[bad]).unwrap_err();
            assert!(e.to_string().contains("FROM=TO"), "{e}");
        }
    }

    #[test]
    fn a_secret_of_another_namespace_is_refused_naming_the_field_and_the_fix() {
        let none = CrossNamespace::default();
        let annotations = BTreeMap::new();
        let c = conn("10.0.0.5", Some("other"));
        let e =
            check_connection(ConnectionField::Rufio, "mine", &annotations, &c, &none).unwrap_err();
        assert_eq!(e.reason(), CROSS_NAMESPACE_REFUSED);
        let text = e.to_string();
        assert!(
            text.contains("spec.connection.authSecretRef.namespace \"other\""),
            "{text}"
        );
        assert!(
            text.contains("--rufio-allow-cross-namespace mine=other"),
            "{text}"
        );
        let e = check_connection(ConnectionField::Inventory, "mine", &annotations, &c, &none)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.baseboardSpec.connection.authSecretRef")
        );
        // Its own namespace, said or not, and an allowed pair.
        for ns in [Some("mine"), Some(""), None] {
            check_connection(
                ConnectionField::Rufio,
                "mine",
                &annotations,
                &conn("h", ns),
                &none,
            )
            .unwrap();
        }
        let allowed = CrossNamespace::parse(&["mine=other"]).unwrap();
        check_connection(ConnectionField::Rufio, "mine", &annotations, &c, &allowed).unwrap();
    }

    #[test]
    fn plain_http_needs_the_annotation() {
        let none = CrossNamespace::default();
        let mut annotations = BTreeMap::new();
        let c = conn("http://10.0.0.5:8000", None);
        let e =
            check_connection(ConnectionField::Rufio, "ns", &annotations, &c, &none).unwrap_err();
        assert_eq!(e.reason(), PLAIN_HTTP_REFUSED);
        assert!(e.to_string().contains("spec.connection.host"), "{e}");
        assert!(e.to_string().contains(ALLOW_HTTP_ANNOTATION), "{e}");
        annotations.insert(ALLOW_HTTP_ANNOTATION.to_owned(), "false".to_owned());
        check_connection(ConnectionField::Rufio, "ns", &annotations, &c, &none).unwrap_err();
        annotations.insert(ALLOW_HTTP_ANNOTATION.to_owned(), "true".to_owned());
        check_connection(ConnectionField::Rufio, "ns", &annotations, &c, &none).unwrap();
        assert!(plain_http(&c));
        for tls in ["10.0.0.5", "https://10.0.0.5", "bmc.example:8443"] {
            assert!(!plain_http(&conn(tls, None)), "{tls}");
        }
    }

    #[test]
    fn a_pinned_fingerprint_is_64_hex_digits_with_or_without_colons() {
        let mut annotations = BTreeMap::new();
        assert_eq!(pinned_sha256(&annotations), Ok(None));
        let plain = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        annotations.insert(TLS_FINGERPRINT_ANNOTATION.to_owned(), plain.to_owned());
        let sha = pinned_sha256(&annotations).unwrap().unwrap();
        assert_eq!(sha[1], 0x11);
        assert_eq!(sha[31], 0xff);
        let colons: Vec<String> = plain
            .as_bytes()
            .chunks(2)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        annotations.insert(TLS_FINGERPRINT_ANNOTATION.to_owned(), colons.join(":"));
        assert_eq!(pinned_sha256(&annotations).unwrap(), Some(sha));
        for bad in ["", "00:11", &plain.replace('0', "g"), &format!("{plain}00")] {
            annotations.insert(TLS_FINGERPRINT_ANNOTATION.to_owned(), bad.to_owned());
            let e = pinned_sha256(&annotations).unwrap_err();
            assert!(e.to_string().contains(TLS_FINGERPRINT_ANNOTATION), "{e}");
        }
        annotations.insert("other".to_owned(), "x".to_owned());
        assert_eq!(
            carried(&annotations).keys().collect::<Vec<_>>(),
            [TLS_FINGERPRINT_ANNOTATION]
        );
    }

    #[test]
    fn a_job_drives_machines_of_its_namespace_unless_allowed() {
        let none = CrossNamespace::default();
        check_machine_ref("a", "a", &none).unwrap();
        let e = check_machine_ref("a", "b", &none).unwrap_err();
        assert_eq!(e.reason(), CROSS_NAMESPACE_REFUSED);
        assert!(
            e.to_string().contains("spec.machineRef.namespace \"b\""),
            "{e}"
        );
        check_machine_ref("a", "b", &CrossNamespace::parse(&["a=b"]).unwrap()).unwrap();
    }
}
