//! What a released server goes through before it returns to the free set, when its owner asks
//! for a wipe (`InstancePool.spec.wipePolicy: metadata`, as Metal3's
//! `automatedCleaningMode: metadata`): the next tenant of an Inventory must not find the last
//! one's partitions, file systems or RAID and LVM signatures.
//!
//! ingot boots the server, through its BMC, into the site's wipe image (`ingot run
//! --wipe-kernel-url`, `--wipe-initrd-url`): a kernel and initrd whose agent reads its orders
//! from the kernel command line ([`script`]), erases, then reports to ingot's boot server. The
//! contract, for whoever builds the image:
//!
//! - `ingot.wipe=metadata`: erase the partition tables and the file-system, RAID and LVM
//!   signatures of every local disk (`wipefs --all` on each, and the first and last MiB zeroed,
//!   where the GPT backup lives);
//! - `ip=<address>::<gateway>:<netmask>::netboot:off ifname=netboot:<mac>`: the server's
//!   static address (dracut's syntax), so no DHCP is needed;
//! - `ingot.report=<url>`: once every disk is erased, `PUT` to it, from that address. A wipe
//!   that fails does not report: the server stays claimed, with its address, and is never
//!   freed unwiped.
//!
//! The script is written into the claim's install Secret ([`WIPE_SCRIPT_KEY`]); the boot
//! server hands it to the server's MAC while the wipe runs ([`wiping`]) and takes the report
//! from its address only.

use ingot_api::seeder::Inventory;
use kube::ResourceExt;

/// The claim's install Secret key of the wipe's iPXE script.
pub const WIPE_SCRIPT_KEY: &str = "wipe-script";
/// The wipe boot's Job, once it was sent: the server is being wiped until it reports.
pub const WIPE_JOB_ANNOTATION: &str = "onprem.ingot.dev/wipe-job";
/// The wipe boot's Job whose wipe reported: the release may power the server off and free it.
pub const WIPED_ANNOTATION: &str = "onprem.ingot.dev/wiped";

/// What a release erases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WipePolicy {
    /// Nothing: powered off and freed.
    #[default]
    None,
    /// The disks' partition tables and signatures, by the wipe image, before the power off.
    Metadata,
}

impl WipePolicy {
    /// The field's value (`none`, `metadata`); an unknown one is an error naming the choices.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value {
            None | Some("" | "none") => Ok(WipePolicy::None),
            Some("metadata") => Ok(WipePolicy::Metadata),
            Some(other) => Err(format!(
                "wipePolicy {other:?}: use none (power off only, the default) or metadata (erase the disks' partition tables and signatures)"
            )),
        }
    }

    fn word(self) -> &'static str {
        match self {
            WipePolicy::None => "none",
            WipePolicy::Metadata => "metadata",
        }
    }
}

/// The site's wipe image (`--wipe-kernel-url`, `--wipe-initrd-url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WipeImage {
    pub kernel: url::Url,
    pub initrd: url::Url,
}

impl WipeImage {
    /// Both URLs or neither; each `http` or `https`.
    pub fn from_flags(
        kernel: Option<&url::Url>,
        initrd: Option<&url::Url>,
    ) -> Result<Option<Self>, String> {
        match (kernel, initrd) {
            (None, None) => Ok(None),
            (Some(kernel), Some(initrd)) => {
                for (flag, url) in [("--wipe-kernel-url", kernel), ("--wipe-initrd-url", initrd)] {
                    if !matches!(url.scheme(), "http" | "https") {
                        return Err(format!(
                            "{flag} {url}: iPXE fetches it, so it must be an http or https URL"
                        ));
                    }
                }
                Ok(Some(WipeImage {
                    kernel: kernel.clone(),
                    initrd: initrd.clone(),
                }))
            }
            _ => Err(
                "--wipe-kernel-url and --wipe-initrd-url go together: give both, or neither"
                    .to_owned(),
            ),
        }
    }
}

/// The server's address while it is wiped.
pub struct WipeAddress<'a> {
    pub mac: &'a str,
    pub address: &'a str,
    pub netmask: &'a str,
    pub gateway: &'a str,
}

/// The iPXE script that boots the wipe image with its orders (see the module's
/// documentation). The URLs are written as the URL parser serializes them (no whitespace);
/// the address parts are checked to be addresses and a MAC, so nothing can add an argument.
pub fn script(
    image: &WipeImage,
    policy: WipePolicy,
    at: &WipeAddress<'_>,
    report: &url::Url,
) -> Result<String, String> {
    let ip = |what: &str, value: &str| {
        value
            .parse::<std::net::Ipv4Addr>()
            .map(|a| a.to_string())
            .map_err(|_| format!("the server's {what} {value:?} is not an IPv4 address"))
    };
    let (address, netmask, gateway) = (
        ip("address", at.address)?,
        ip("netmask", at.netmask)?,
        ip("gateway", at.gateway)?,
    );
    let mac = crate::provisioning::boot::normal_mac(at.mac);
    if mac.len() != 17 || !mac.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
        return Err(format!(
            "the server's MAC {:?} is not a MAC address",
            at.mac
        ));
    }
    let initrd_name = image
        .initrd
        .path_segments()
        .and_then(|mut s| s.next_back())
        .filter(|n| !n.is_empty())
        .unwrap_or("initrd");
    Ok(format!(
        "#!ipxe\n\
         # released: wipe ({policy}), then report\n\
         kernel {kernel} initrd={initrd_name} ip={address}::{gateway}:{netmask}::netboot:off ifname=netboot:{mac} BOOTIF={mac} console=tty1 ingot.wipe={policy} ingot.report={report}\n\
         initrd {initrd}\n\
         boot\n",
        policy = policy.word(),
        kernel = image.kernel,
        initrd = image.initrd,
    ))
}

/// The wipe boot's Job of a claim being wiped: claimed, not confirmed off, the wipe sent and
/// not reported. While it is, the boot server hands the server its wipe script.
pub fn wiping(inventory: &Inventory) -> Option<&str> {
    use super::claims::CLAIMED_LABEL;
    use super::cloud::OFF_CONFIRMED_ANNOTATION;
    let annotations = inventory.annotations();
    if inventory.labels().get(CLAIMED_LABEL).map(String::as_str) != Some("true")
        || annotations.contains_key(OFF_CONFIRMED_ANNOTATION)
    {
        return None;
    }
    let job = annotations.get(WIPE_JOB_ANNOTATION)?;
    (annotations.get(WIPED_ANNOTATION) != Some(job)).then_some(job.as_str())
}

/// Whether the claim's wipe reported.
pub fn wiped(inventory: &Inventory) -> bool {
    let annotations = inventory.annotations();
    annotations
        .get(WIPE_JOB_ANNOTATION)
        .is_some_and(|job| annotations.get(WIPED_ANNOTATION) == Some(job))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image() -> WipeImage {
        WipeImage {
            kernel: url::Url::parse("http://10.0.0.5/wipe/vmlinuz").unwrap(),
            initrd: url::Url::parse("http://10.0.0.5/wipe/wipe-initrd.img").unwrap(),
        }
    }

    fn at<'a>(address: &'a str, mac: &'a str) -> WipeAddress<'a> {
        WipeAddress {
            mac,
            address,
            netmask: "255.255.255.0",
            gateway: "10.31.0.1",
        }
    }

    #[test]
    fn the_script_carries_the_orders_the_address_and_the_report_url() {
        let report = url::Url::parse("http://10.0.0.9:8080/wiped/site/server-1").unwrap();
        let script = script(
            &image(),
            WipePolicy::Metadata,
            &at("10.31.0.3", "52-54-00-00-00-1A"),
            &report,
        )
        .unwrap();
        assert_eq!(
            script,
            "#!ipxe\n# released: wipe (metadata), then report\n\
             kernel http://10.0.0.5/wipe/vmlinuz initrd=wipe-initrd.img ip=10.31.0.3::10.31.0.1:255.255.255.0::netboot:off ifname=netboot:52:54:00:00:00:1a BOOTIF=52:54:00:00:00:1a console=tty1 ingot.wipe=metadata ingot.report=http://10.0.0.9:8080/wiped/site/server-1\n\
             initrd http://10.0.0.5/wipe/wipe-initrd.img\nboot\n"
        );
    }

    #[test]
    fn nothing_recorded_can_add_an_argument_to_the_script() {
        let report = url::Url::parse("http://10.0.0.9/wiped/site/server-1").unwrap();
        for (address, mac) in [
            ("10.31.0.3 ingot.wipe=none", "52:54:00:00:00:1a"),
            ("10.31.0.3", "52:54:00:00:00:1a rd.break"),
        ] {
            let refused = script(&image(), WipePolicy::Metadata, &at(address, mac), &report);
            assert!(refused.is_err(), "{refused:?}");
        }
    }

    #[test]
    fn the_image_needs_both_urls_over_http() {
        let (kernel, initrd) = (image().kernel, image().initrd);
        assert_eq!(
            WipeImage::from_flags(Some(&kernel), Some(&initrd)).unwrap(),
            Some(image())
        );
        assert_eq!(WipeImage::from_flags(None, None).unwrap(), None);
        let half = WipeImage::from_flags(Some(&kernel), None).unwrap_err();
        assert!(half.contains("go together"), "{half}");
        let tftp = url::Url::parse("tftp://10.0.0.5/vmlinuz").unwrap();
        let refused = WipeImage::from_flags(Some(&tftp), Some(&initrd)).unwrap_err();
        assert!(refused.contains("--wipe-kernel-url"), "{refused}");
        assert_eq!(WipePolicy::parse(None), Ok(WipePolicy::None));
        assert_eq!(
            WipePolicy::parse(Some("metadata")),
            Ok(WipePolicy::Metadata)
        );
        assert!(
            WipePolicy::parse(Some("all"))
                .unwrap_err()
                .contains("metadata")
        );
    }

    #[test]
    fn a_claim_is_wiped_from_its_wipe_boot_until_that_boot_reports() {
        let inventory = |annotations: serde_json::Value| -> Inventory {
            serde_json::from_value(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "metadata": {"name": "server-1", "namespace": "site",
                    "labels": {"onprem.ingot.dev/claimed": "true"}, "annotations": annotations},
                "spec": {"baseboardSpec": {"connection": {"host": "10.0.0.9", "port": 623,
                "insecureTLS": true, "authSecretRef": {"name": "s", "namespace": "site"}}}}
            }))
            .unwrap()
        };
        let sent = inventory(json!({WIPE_JOB_ANNOTATION: "server-1-wipe-bcd"}));
        assert_eq!(wiping(&sent), Some("server-1-wipe-bcd"));
        assert!(!wiped(&sent));
        let reported = inventory(json!({WIPE_JOB_ANNOTATION: "server-1-wipe-bcd",
            WIPED_ANNOTATION: "server-1-wipe-bcd"}));
        assert_eq!(wiping(&reported), None);
        assert!(wiped(&reported));
        let off = inventory(json!({WIPE_JOB_ANNOTATION: "server-1-wipe-bcd",
            "onprem.ingot.dev/off-confirmed": "true"}));
        assert_eq!(wiping(&off), None);
        assert_eq!(wiping(&inventory(json!({}))), None);
    }
}
