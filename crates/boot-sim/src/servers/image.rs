//! A network boot into an OS image (not the Harvester installer): the kernel line carries
//! `ds=nocloud-net;s=<seed>` (cloud-init's NoCloud data source) and the static `ip=`. As
//! cloud-init does, the server fetches `<seed>meta-data` and `<seed>user-data` from its own
//! address; its host name is the meta-data's `local-hostname`. Gardener user data makes its
//! kubelet join with the bootstrap token in it, checked as kube-apiserver checks one
//! ([`crate::gardener`]); any other user data leaves the system up without a Node.

use std::net::IpAddr;

use super::{Installed, ServerFleet, ServerState, kernel};
use crate::gardener::{self, Join};

/// The longest meta-data or user-data read.
const MAX_DATA: usize = 256 * 1024;

/// What the kernel line says of an image boot: its NoCloud seed URL.
pub(super) fn nocloud_seed(params: &[(String, Option<String>)]) -> Option<String> {
    params
        .iter()
        .filter(|(k, _)| k == "ds")
        .filter_map(|(_, v)| v.as_deref())
        .find_map(|v| {
            let (source, rest) = v.split_once(';')?;
            if !source.starts_with("nocloud") {
                return None;
            }
            rest.split(';')
                .find_map(|kv| {
                    kv.strip_prefix("s=")
                        .or_else(|| kv.strip_prefix("seedfrom="))
                })
                .map(str::to_owned)
        })
}

/// The booted image: cloud-init's data, then the kubelet.
pub(super) async fn run(
    fleet: &ServerFleet,
    i: usize,
    boot: u64,
    seed: String,
    ip: Option<kernel::StaticIp>,
) {
    fleet.set(
        i,
        boot,
        ServerState::Starting,
        Some("cloud-init: reading its NoCloud data".into()),
    );
    let source = ip.as_ref().map(|s| IpAddr::V4(s.address));
    let http = match super::pxe::bound_client(source.filter(IpAddr::is_loopback)) {
        Ok(h) => h,
        Err(reason) => return fleet.stuck(i, boot, reason),
    };
    let (meta, user) = match (
        fetch(&http, &seed, "meta-data").await,
        fetch(&http, &seed, "user-data").await,
    ) {
        (Ok(m), Ok(u)) => (m, u),
        (Err(e), _) | (_, Err(e)) => return fleet.stuck(i, boot, e),
    };
    let Some(hostname) = meta
        .lines()
        .find_map(|l| l.strip_prefix("local-hostname:"))
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
    else {
        return fleet.stuck(
            i,
            boot,
            "cloud-init: the meta-data has no local-hostname".into(),
        );
    };
    let address = ip.as_ref().map(|s| s.address.to_string());
    fleet.with(i, boot, |c| c.status.address = address.clone());
    let (id, secret) = match gardener::read_user_data(&user) {
        Join::NotGardener => {
            return fleet.set(
                i,
                boot,
                ServerState::Running,
                Some("up; its user data joins no cluster".into()),
            );
        }
        Join::Unsubstituted => {
            let why = "kubelet: the user data still holds the <<BOOTSTRAP_TOKEN>> placeholder";
            return fleet.stuck(i, boot, why.into());
        }
        Join::Token { id, secret } => (id, secret),
    };
    // A kubelet retries a refused bootstrap token until the boot is over.
    loop {
        let admin = fleet.inner().admin.clone();
        let why = match gardener::refusal(&admin, &id, &secret).await {
            Ok(None) => break,
            Ok(Some(r)) => format!("kubelet: {r}"),
            Err(e) => format!("kubelet: reading the bootstrap token: {e}"),
        };
        if fleet
            .with(i, boot, |c| {
                super::set_state(c.status, ServerState::Stuck, Some(why.clone()))
            })
            .is_none()
        {
            return;
        }
        tokio::time::sleep(fleet.inner().config.poll_interval).await;
    }
    let system = Installed {
        create: false,
        token: String::new(),
        address,
        node_name: hostname,
        manifests: Vec::new(),
    };
    // Registered as the admin: the bootstrap token was checked above, and a shoot's RBAC for
    // `system:bootstrappers` (CSRs, then the node's own credential) is not emulated.
    let _ = fleet
        .register(i, boot, &system, fleet.inner().admin.clone())
        .await;
}

async fn fetch(http: &reqwest::Client, seed: &str, file: &str) -> Result<String, String> {
    let url = format!("{seed}{file}");
    let fail = |why: String| format!("cloud-init: GET {url}: {why}");
    let resp = http
        .get(&url)
        .send()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?;
    if !resp.status().is_success() {
        return Err(fail(format!("HTTP {}", resp.status())));
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?;
    if body.len() > MAX_DATA {
        return Err(fail(format!("more than {MAX_DATA} bytes")));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_nocloud_seed_on_the_kernel_line() {
        let params = crate::ipxe::kernel_params(
            "initrd=initrd ip=10.0.0.5::10.0.0.1:255.255.255.0:m1:netboot:off ds=nocloud-net;s=http://10.0.0.2:81/nocloud/metal/s0/ console=ttyS0",
        );
        assert_eq!(
            nocloud_seed(&params).as_deref(),
            Some("http://10.0.0.2:81/nocloud/metal/s0/")
        );
        assert_eq!(
            nocloud_seed(&crate::ipxe::kernel_params("ds=ec2 console=ttyS0")),
            None
        );
    }
}
