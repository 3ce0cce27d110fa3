//! What a claimed server installs: the Harvester join a pool asks for ([`InstallRequest`], the
//! `userdata` of its `CreateServer`), rendered with provisioning's renderer for the claimed
//! Inventory and its static address, into the claim's install Secret. ingot's boot server hands
//! the script to the server's MAC and the config to the server's own address only, and takes
//! the installer's `SUCCEEDED` webhook as the end of that install (see `provisioning::boot`).
//!
//! The files are a Seeder join: `install.mode: join` to `https://<vip>:443` with the pool's
//! token, the Instance's name as host name, the server's address static on its management MAC
//! (`ip=` on the kernel line, `install.managementInterface` in the config), so no DHCP is needed.

use std::collections::BTreeMap;

use ingot_api::seeder::{AddressPool, Inventory};
use ingot_harvester::{NodeInstall, NodeMode, Secret as Hidden};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::provisioning::SECRET_LABEL;
use crate::provisioning::install::{ADDRESS_KEY, CONFIG_KEY, SCRIPT_KEY};
use crate::provisioning::ipam;

/// The value of [`SECRET_LABEL`] on a claim's install Secret.
pub const INSTALL_SECRET_KIND: &str = "pool-install";

/// The claim's install Secret (owned by the Inventory).
pub fn install_secret_name(inventory: &str) -> String {
    format!("{inventory}-pool-install")
}

/// What a pool asks a claimed server to install, carried as the create's `userdata` (JSON).
/// `Debug` hides the token and the password.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallRequest {
    /// The Harvester release, e.g. `v1.7.1`.
    pub version: String,
    /// Where the release artifacts are: `<imageUrl>/<version>/harvester-...`.
    pub image_url: String,
    /// The cluster VIP the node joins (`https://<vip>:443`).
    pub vip: String,
    pub token: String,
    pub os_password: String,
    /// The install disk; else the Inventory's `spec.primaryDisk`, else `/dev/sda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bond_options: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_keys: Vec<String>,
    /// The management network's VLAN (above 1: tagged), from the pool's
    /// `networkingConfiguration.interfaceConfiguration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan_id: Option<u32>,
}

impl std::fmt::Debug for InstallRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstallRequest")
            .field("version", &self.version)
            .field("image_url", &self.image_url)
            .field("vip", &self.vip)
            .field("token", &"***")
            .field("os_password", &"***")
            .field("disk", &self.disk)
            .finish_non_exhaustive()
    }
}

impl InstallRequest {
    /// Reads a create's `userdata`; the error names what is wrong, never a secret value.
    pub fn parse(userdata: &str) -> Result<Self, String> {
        serde_json::from_str(userdata).map_err(|e| {
            format!(
                "the userdata of a server on premises must be ingot's install request (JSON with version, imageUrl, vip, token, osPassword): {}",
                e.classify_name()
            )
        })
    }
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    /// The kind of error only: serde's message may quote the input, which holds secrets.
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "it could not be read",
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                "it is not JSON"
            }
            serde_json::error::Category::Data => "a field is missing or of the wrong type",
        }
    }
}

/// The script, config and address a claimed server installs with.
#[derive(Clone, PartialEq)]
pub struct InstallFiles {
    pub script: String,
    pub config: String,
    pub address: String,
    /// The address's link (its pool's), for the boot CD, which sets the address itself.
    pub netmask: String,
    pub gateway: String,
}

/// The claim's install Secret keys of the address's netmask and gateway.
pub const NETMASK_KEY: &str = "netmask";
pub const GATEWAY_KEY: &str = "gateway";

/// Renders the install of `inventory` at `address` (from `pool`), with the config and webhook
/// under `boot_url` (the boot server's `config/<ns>/<name>` and `disable/<ns>/<name>`).
pub fn render(
    request: &InstallRequest,
    inventory: &Inventory,
    hostname: &str,
    address: &str,
    pool: &AddressPool,
    boot_url: &url::Url,
) -> Result<InstallFiles, String> {
    let link = ipam::Pool::parse(&pool.spec)
        .map_err(|e| format!("AddressPool {}: {e}", pool.name_any()))?;
    let path = format!(
        "{}/{}",
        inventory.namespace().unwrap_or_default(),
        inventory.name_any()
    );
    let under = |prefix: &str| {
        boot_url
            .join(&format!("{prefix}/{path}"))
            .map(|u| u.to_string())
            .map_err(|e| format!("the boot URL {boot_url}: {e}"))
    };
    let node = NodeInstall {
        version: request.version.clone(),
        image_url: request.image_url.clone(),
        arch: inventory
            .spec
            .arch
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "amd64".to_owned()),
        mac: inventory
            .spec
            .management_interface_mac_address
            .clone()
            .unwrap_or_default(),
        hostname: hostname.to_owned(),
        address: address.to_owned(),
        netmask: link.netmask().to_string(),
        gateway: link.gateway().to_string(),
        primary_disk: request
            .disk
            .clone()
            .filter(|d| !d.is_empty())
            .or_else(|| {
                inventory
                    .spec
                    .primary_disk
                    .clone()
                    .filter(|d| !d.is_empty())
            })
            .unwrap_or_else(|| "/dev/sda".to_owned()),
        mode: NodeMode::Join {
            vip: request.vip.clone(),
        },
        token: Hidden::new(request.token.clone()),
        os_password: Hidden::new(request.os_password.clone()),
        ssh_keys: request.ssh_keys.clone(),
        nameservers: Vec::new(),
        vlan_id: request.vlan_id,
        bond_options: request.bond_options.clone(),
        wipe_disks: false,
        stream_image_mode: false,
        base_config: None,
        config_url: under("config")?,
        webhook_url: under("disable")?,
    };
    Ok(InstallFiles {
        script: ingot_harvester::ipxe_script(&node).map_err(|e| e.to_string())?,
        config: ingot_harvester::install_config(&node).map_err(|e| e.to_string())?,
        address: address.to_owned(),
        netmask: node.netmask.clone(),
        gateway: node.gateway.clone(),
    })
}

/// The claim's install Secret holding `files`, owned by the Inventory.
pub fn install_secret(inventory: &Inventory, files: &InstallFiles) -> Secret {
    claim_secret(
        inventory,
        &[
            (SCRIPT_KEY, &files.script),
            (CONFIG_KEY, &files.config),
            (ADDRESS_KEY, &files.address),
            (NETMASK_KEY, &files.netmask),
            (GATEWAY_KEY, &files.gateway),
        ],
    )
}

/// The claim's install Secret holding these keys, owned by the Inventory.
pub fn claim_secret(inventory: &Inventory, values: &[(&str, &String)]) -> Secret {
    let owner = OwnerReference {
        api_version: "metal.harvesterhci.io/v1alpha1".to_owned(),
        kind: "Inventory".to_owned(),
        name: inventory.name_any(),
        uid: inventory.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let data = values
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(install_secret_name(&inventory.name_any())),
            namespace: inventory.namespace(),
            labels: Some(BTreeMap::from([(
                SECRET_LABEL.to_owned(),
                INSTALL_SECRET_KIND.to_owned(),
            )])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn request() -> InstallRequest {
        InstallRequest {
            version: "v1.7.1".into(),
            image_url: "http://mirror.example/harvester".into(),
            vip: "10.0.9.1".into(),
            token: "join-token-5f1".into(),
            os_password: "os-password-9c2".into(),
            disk: None,
            bond_options: None,
            ssh_keys: Vec::new(),
            vlan_id: None,
        }
    }

    fn inventory() -> Inventory {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "server-0", "namespace": "metal", "uid": "u-1"},
            "spec": {"primaryDisk": "/dev/nvme0n1",
                "managementInterfaceMacAddress": "0c:c4:7a:6b:84:20",
                "baseboardSpec": {"connection": {"host": "10.0.0.9", "port": 623, "insecureTLS": true,
                    "authSecretRef": {"name": "s", "namespace": "metal"}}}}
        }))
        .unwrap()
    }

    fn pool() -> AddressPool {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes", "namespace": "metal"},
            "spec": {"cidr": "10.0.9.0/24", "gateway": "10.0.9.254"}
        }))
        .unwrap()
    }

    #[test]
    fn a_claimed_server_joins_with_its_static_address_and_the_pools_token() {
        let boot = url::Url::parse("http://10.0.0.5:8082").unwrap();
        let rendered = |request: &InstallRequest| {
            render(
                request,
                &inventory(),
                "pool-abcdefgh",
                "10.0.9.17",
                &pool(),
                &boot,
            )
            .unwrap()
        };
        let files = rendered(&request());
        assert!(
            files
                .script
                .contains("ip=10.0.9.17::10.0.9.254:255.255.255.0::netboot:off"),
            "{}",
            files.script
        );
        assert!(
            files.script.contains("BOOTIF=0c:c4:7a:6b:84:20"),
            "{}",
            files.script
        );
        assert!(
            files.script.contains(
                "harvester.install.config_url=http://10.0.0.5:8082/config/metal/server-0"
            ),
            "{}",
            files.script
        );
        let config: serde_yaml::Value = serde_yaml::from_str(&files.config).unwrap();
        assert_eq!(config["install"]["mode"], "join");
        assert_eq!(config["serverUrl"], "https://10.0.9.1:443");
        assert_eq!(config["token"], "join-token-5f1");
        assert_eq!(config["os"]["hostname"], "pool-abcdefgh");
        assert_eq!(config["os"]["password"], "os-password-9c2");
        // The Inventory's disk unless the pool names one.
        assert_eq!(config["install"]["device"], "/dev/nvme0n1");
        assert_eq!(
            config["install"]["webhooks"][0]["url"],
            "http://10.0.0.5:8082/disable/metal/server-0"
        );
        assert_eq!(files.address, "10.0.9.17");
        assert_eq!(
            (files.netmask.as_str(), files.gateway.as_str()),
            ("255.255.255.0", "10.0.9.254")
        );
        let secret = install_secret(&inventory(), &files);
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("server-0-pool-install")
        );
        assert_eq!(secret.metadata.owner_references.unwrap()[0].uid, "u-1");
        // With the pool's management VLAN: the address on that VLAN, in the script and config.
        let tagged = rendered(&InstallRequest {
            vlan_id: Some(100),
            ..request()
        });
        assert!(
            tagged.script.contains(
                "ip=10.0.9.17::10.0.9.254:255.255.255.0::vlan100:off vlan=vlan100:netboot"
            ),
            "{}",
            tagged.script
        );
        let config: serde_yaml::Value = serde_yaml::from_str(&tagged.config).unwrap();
        assert_eq!(config["install"]["managementInterface"]["vlanId"], 100);
        assert!(
            config["install"]["managementInterface"]
                .get("vlanId")
                .is_some()
                && !files.config.contains("vlanId"),
            "{}",
            files.config
        );
    }

    #[test]
    fn a_bad_request_is_named_without_its_secrets() {
        let boot = url::Url::parse("http://10.0.0.5:8082").unwrap();
        let mut bad = request();
        bad.vip = "cluster.example".into();
        let Err(error) = render(&bad, &inventory(), "pool-a", "10.0.9.17", &pool(), &boot) else {
            panic!("a host name VIP was accepted");
        };
        assert!(error.contains("cluster.example"), "{error}");
        let error = InstallRequest::parse(r#"{"version": "v1.7.1", "token": "join-token-5f1"}"#)
            .unwrap_err();
        assert!(
            !error.contains("join-token-5f1") && error.contains("missing"),
            "{error}"
        );
        assert!(!format!("{:?}", request()).contains("join-token-5f1"));
    }
}
