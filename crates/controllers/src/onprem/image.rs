//! What a Gardener machine's claimed server boots: the OS image of its MachineClass (a kernel
//! and an initrd) with the machine's user data as cloud-init NoCloud data. The request is the
//! create's `userdata` ([`ImageRequest`], JSON); it is rendered for the claimed Inventory and its
//! static address into the claim's Secret (the one [`super::install`] names), which ingot's boot
//! server hands out: the script to the server's MAC, the NoCloud files to its own address only.
//!
//! The script boots the image with `ip=` (the claimed address, static on the Inventory's MAC:
//! no DHCP is needed) and `ds=nocloud-net;s=<boot-url>/nocloud/<namespace>/<name>/`, where
//! cloud-init reads `meta-data` (instance id and host name: the Machine's name) and `user-data`
//! (the MachineClass Secret's `userData`, its bootstrap token filled in by the machine
//! controller). It is served at every network boot while the claim holds: the image is the
//! machine's system, as an iPXE-booted device's is on a cloud.

use ingot_api::seeder::{AddressPool, Inventory};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use super::install::{self, InstallFiles};
use crate::provisioning::ipam;

/// The claim Secret's key of the NoCloud `user-data`.
pub const USER_DATA_KEY: &str = "user-data";
/// The claim Secret's key of the NoCloud `meta-data`.
pub const META_DATA_KEY: &str = "meta-data";
/// The longest user data a machine's server is handed (cloud-init's own limit on EC2 is 16 KiB;
/// Gardener's node agent bootstrap is far smaller).
pub const MAX_USER_DATA: usize = 64 * 1024;

/// The OS image a MachineClass boots.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// The kernel's `http`/`https` URL.
    pub kernel: String,
    /// The initrd's `http`/`https` URL.
    pub initrd: String,
    /// More kernel parameters (e.g. `console=ttyS0`); one line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cmdline: String,
}

/// What a Gardener machine asks its claimed server to boot. `Debug` hides the user data (it
/// holds the bootstrap token).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageRequest {
    pub image: Image,
    pub user_data: String,
}

impl std::fmt::Debug for ImageRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageRequest")
            .field("image", &self.image)
            .field("user_data", &"***")
            .finish()
    }
}

impl ImageRequest {
    /// An image request, when `userdata` is one (JSON with `image`); `None` for anything else.
    pub fn parse(userdata: &str) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_str(userdata).ok()?;
        value.get("image")?;
        serde_json::from_value(value).ok()
    }

    /// The request as a create's `userdata`.
    pub fn to_userdata(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Why this request cannot be booted, naming the field; `None` when it can.
    pub fn problem(&self) -> Option<String> {
        for (field, value) in [
            ("kernel", &self.image.kernel),
            ("initrd", &self.image.initrd),
        ] {
            if let Some(why) = bad_url(value) {
                return Some(format!(
                    "providerSpec.image.{field} {value:?} {why}; give the http or https URL of the image's {field}"
                ));
            }
        }
        if self.image.cmdline.chars().any(char::is_control) {
            return Some(
                "providerSpec.image.cmdline has a line break or control character; write the kernel parameters on one line".to_owned(),
            );
        }
        if self.user_data.len() > MAX_USER_DATA {
            return Some(format!(
                "the userData of the MachineClass Secret is {} bytes, more than {MAX_USER_DATA}; make it smaller",
                self.user_data.len()
            ));
        }
        None
    }
}

/// Why `text` is not a URL a script may fetch, or `None`.
fn bad_url(text: &str) -> Option<&'static str> {
    if text.is_empty() {
        return Some("is empty");
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("has blanks or control characters");
    }
    match url::Url::parse(text) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => None,
        Ok(_) => Some("is not http or https"),
        Err(_) => Some("is not a URL"),
    }
}

/// Renders the boot of `inventory` at `address` (from `pool`) for machine `hostname`: the
/// script, the address, and the NoCloud files under `boot_url`.
pub fn render(
    request: &ImageRequest,
    inventory: &Inventory,
    hostname: &str,
    address: &str,
    pool: &AddressPool,
    boot_url: &url::Url,
) -> Result<(InstallFiles, String, String), String> {
    if let Some(problem) = request.problem() {
        return Err(problem);
    }
    let link = ipam::Pool::parse(&pool.spec)
        .map_err(|e| format!("AddressPool {}: {e}", pool.name_any()))?;
    let namespace = inventory.namespace().unwrap_or_default();
    let name = inventory.name_any();
    let seed = boot_url
        .join(&format!("nocloud/{namespace}/{name}/"))
        .map_err(|e| format!("the boot URL {boot_url}: {e}"))?;
    let mac = inventory
        .spec
        .management_interface_mac_address
        .clone()
        .unwrap_or_default();
    let image = &request.image;
    let extra = if image.cmdline.trim().is_empty() {
        String::new()
    } else {
        format!(" {}", image.cmdline.trim())
    };
    let script = format!(
        "#!ipxe\n\
         # ingot: the OS image of machine {hostname} on Inventory {namespace}/{name}\n\
         kernel {kernel} initrd=initrd ip={address}::{gateway}:{netmask}:{hostname}:netboot:off ifname=netboot:{mac} ds=nocloud-net;s={seed}{extra}\n\
         initrd --name initrd {initrd}\n\
         boot\n",
        kernel = image.kernel,
        initrd = image.initrd,
        gateway = link.gateway(),
        netmask = link.netmask(),
    );
    let meta_data =
        format!("instance-id: {namespace}/{name}/{hostname}\nlocal-hostname: {hostname}\n");
    let files = InstallFiles {
        script,
        config: String::new(),
        address: address.to_owned(),
        netmask: link.netmask().to_string(),
        gateway: link.gateway().to_string(),
    };
    Ok((files, meta_data, request.user_data.clone()))
}

/// The claim's Secret for a machine's boot: the install Secret's shape with the NoCloud files.
pub fn image_secret(
    inventory: &Inventory,
    files: &InstallFiles,
    meta_data: &str,
    user_data: &str,
) -> Secret {
    let mut secret = install::install_secret(inventory, files);
    let data = secret.data.get_or_insert_default();
    data.insert(
        META_DATA_KEY.to_owned(),
        ByteString(meta_data.as_bytes().to_vec()),
    );
    data.insert(
        USER_DATA_KEY.to_owned(),
        ByteString(user_data.as_bytes().to_vec()),
    );
    secret
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn request() -> ImageRequest {
        ImageRequest {
            image: Image {
                kernel: "http://images.example/gardenlinux/vmlinuz".into(),
                initrd: "http://images.example/gardenlinux/initrd".into(),
                cmdline: "console=ttyS0".into(),
            },
            user_data: "#!/bin/bash\necho abc123.0123456789abcdef > token\n".into(),
        }
    }

    fn inventory() -> Inventory {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "server-0", "namespace": "metal", "uid": "u-1"},
            "spec": {"managementInterfaceMacAddress": "0c:c4:7a:6b:84:20",
                "baseboardSpec": {"connection": {"host": "10.0.0.1", "port": 623, "insecureTLS": true,
                    "authSecretRef": {"name": "bmc", "namespace": "metal"}}}},
        }))
        .unwrap()
    }

    fn pool() -> AddressPool {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes", "namespace": "metal"},
            "spec": {"cidr": "10.0.9.0/24", "gateway": "10.0.9.1"},
        }))
        .unwrap()
    }

    #[test]
    fn renders_the_image_with_a_static_address_and_its_nocloud_seed() {
        let boot = url::Url::parse("http://10.0.9.2:8081/").unwrap();
        let (files, meta, user) = render(
            &request(),
            &inventory(),
            "md-abc-x1",
            "10.0.9.20",
            &pool(),
            &boot,
        )
        .unwrap();
        assert!(files.script.starts_with("#!ipxe\n"), "{}", files.script);
        assert!(files.script.contains(
            "kernel http://images.example/gardenlinux/vmlinuz initrd=initrd ip=10.0.9.20::10.0.9.1:255.255.255.0:md-abc-x1:netboot:off ifname=netboot:0c:c4:7a:6b:84:20 ds=nocloud-net;s=http://10.0.9.2:8081/nocloud/metal/server-0/ console=ttyS0\n"
        ), "{}", files.script);
        assert!(
            files
                .script
                .contains("initrd --name initrd http://images.example/gardenlinux/initrd\nboot\n")
        );
        assert_eq!(files.address, "10.0.9.20");
        assert!(meta.contains("local-hostname: md-abc-x1\n"), "{meta}");
        assert_eq!(user, request().user_data);
        let secret = image_secret(&inventory(), &files, &meta, &user);
        let data = secret.data.unwrap();
        assert_eq!(data[USER_DATA_KEY].0, user.as_bytes());
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("server-0-pool-install")
        );
    }

    #[test]
    fn a_bad_image_is_refused_naming_the_field() {
        let boot = url::Url::parse("http://10.0.9.2:8081/").unwrap();
        let mut r = request();
        r.image.kernel = "http://x/vmlinuz\nshell".into();
        let Err(e) = render(&r, &inventory(), "m", "10.0.9.20", &pool(), &boot) else {
            panic!("a kernel URL with a line break was rendered");
        };
        assert!(e.contains("providerSpec.image.kernel"), "{e}");
        let mut r = request();
        r.image.initrd = "ftp://x/initrd".into();
        let e = r.problem().unwrap();
        assert!(
            e.contains("providerSpec.image.initrd") && e.contains("http"),
            "{e}"
        );
        let mut r = request();
        r.image.cmdline = "a\nb".into();
        assert!(r.problem().unwrap().contains("providerSpec.image.cmdline"));
        let mut r = request();
        r.user_data = "x".repeat(MAX_USER_DATA + 1);
        assert!(r.problem().unwrap().contains("userData"));
    }

    #[test]
    fn only_image_requests_parse_and_debug_hides_the_user_data() {
        let r = request();
        assert_eq!(ImageRequest::parse(&r.to_userdata()), Some(r.clone()));
        assert_eq!(ImageRequest::parse(r#"{"version":"v1.7.1"}"#), None);
        assert_eq!(ImageRequest::parse("#!/bin/bash"), None);
        assert!(!format!("{r:?}").contains("abc123"));
    }
}
