//! The Secrets provisioning keeps, instead of Seeder's status fields:
//!
//! - per Cluster, `<cluster>-harvester-token` (owner: the Cluster): the cluster token nodes
//!   join with (`token`), and the id and secret of the bootstrap token ingot reads the new
//!   cluster's Nodes with (`node-reader-id`, `node-reader-secret`);
//! - per node, `<inventory>-harvester-install` (owner: the Inventory): the OS password
//!   (`password`, made when the node is allocated), and once the Cluster boots, the iPXE script
//!   (`ipxe`) and the Harvester install config (`config`) the boot server hands out.
//!
//! Seeder writes the token to `status.token` and the password to `status.generatedPassword`,
//! where anyone who can read the object reads them; no upstream reader needs them there, so
//! ingot leaves both empty (the `ClusterToken` and `GeneratedPassword` columns stay blank).
//! Every secret value comes from `rand`'s thread-local generator, a CSPRNG seeded by the OS.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use super::SECRET_LABEL;

pub const TOKEN_KEY: &str = "token";
pub const NODE_READER_ID_KEY: &str = "node-reader-id";
pub const NODE_READER_SECRET_KEY: &str = "node-reader-secret";
pub const PASSWORD_KEY: &str = "password";
pub const SCRIPT_KEY: &str = "ipxe";
pub const CONFIG_KEY: &str = "config";
/// The address the node installs with, copied beside its script (the boot server checks
/// that the config is fetched from it).
pub const ADDRESS_KEY: &str = "address";

/// The cluster token Secret's name.
pub fn token_secret_name(cluster: &str) -> String {
    format!("{cluster}-harvester-token")
}

/// A node's install Secret's name.
pub fn install_secret_name(inventory: &str) -> String {
    format!("{inventory}-harvester-install")
}

/// `len` random characters of `alphabet`.
pub fn random_string(len: usize, alphabet: &[u8]) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/// A bootstrap token's alphabet (`[a-z0-9]`, as the API server requires).
const BOOTSTRAP: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A new cluster token Secret.
pub fn new_token_secret(cluster: &str, namespace: &str, owner: OwnerReference) -> Secret {
    secret(
        &token_secret_name(cluster),
        namespace,
        owner,
        "token",
        [
            (TOKEN_KEY, random_string(32, ALNUM)),
            (NODE_READER_ID_KEY, random_string(6, BOOTSTRAP)),
            (NODE_READER_SECRET_KEY, random_string(16, BOOTSTRAP)),
        ],
    )
}

/// A new install Secret holding only the node's OS password.
pub fn new_install_secret(inventory: &str, namespace: &str, owner: OwnerReference) -> Secret {
    secret(
        &install_secret_name(inventory),
        namespace,
        owner,
        "install",
        [(PASSWORD_KEY, random_string(24, ALNUM))],
    )
}

fn secret<const N: usize>(
    name: &str,
    namespace: &str,
    owner: OwnerReference,
    kind: &str,
    data: [(&str, String); N],
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(SECRET_LABEL.to_owned(), kind.to_owned())])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
                .collect(),
        ),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// A key of a Secret as text.
pub fn value<'a>(secret: &'a Secret, key: &str) -> Option<&'a str> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|v| std::str::from_utf8(&v.0).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_of_the_right_alphabet() {
        let a = random_string(32, ALNUM);
        let b = random_string(32, ALNUM);
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
        let id = random_string(6, BOOTSTRAP);
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
    }

    #[test]
    fn the_install_secret_holds_the_password_under_its_label() {
        let s = new_install_secret("node1", "default", OwnerReference::default());
        assert_eq!(s.metadata.name.as_deref(), Some("node1-harvester-install"));
        assert_eq!(value(&s, PASSWORD_KEY).map(str::len), Some(24));
        assert_eq!(
            s.metadata
                .labels
                .unwrap()
                .get(SECRET_LABEL)
                .map(String::as_str),
            Some("install")
        );
    }
}
