//! A PXE boot: the iPXE script, the installer's config and checks, the install, its webhooks
//! and the reboot into the installed system.

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;
use url::Url;

use super::{Installed, ServerFleet, ServerState, cluster, kernel};
use crate::{install, ipxe};

/// A config the installer accepted, and what the install will do.
struct Plan {
    installed: Installed,
    mode: &'static str,
    warnings: Vec<String>,
    /// `(event, method, url, payload)` of `install.webhooks`.
    webhooks: Vec<(String, String, String, String)>,
    /// Bound to the installer's address.
    http: reqwest::Client,
}

/// Where a PXE boot goes after iPXE.
enum Booted {
    Installer(Plan),
    /// An OS image reading cloud-init NoCloud data from this seed URL.
    Image {
        seed: String,
        ip: Option<kernel::StaticIp>,
    },
    /// ingot's wipe image: its policy and report URL.
    Wipe {
        policy: String,
        report: Option<String>,
        ip: Option<kernel::StaticIp>,
    },
}

pub(super) async fn boot(fleet: &ServerFleet, i: usize, boot: u64) {
    fleet.set(i, boot, ServerState::Pxe, None);
    match prepare(fleet, i, boot).await {
        Ok(Some(Booted::Installer(plan))) => run_install(fleet, i, boot, plan).await,
        Ok(Some(Booted::Image { seed, ip })) => super::image::run(fleet, i, boot, seed, ip).await,
        Ok(Some(Booted::Wipe { policy, report, ip })) => {
            super::wipe::run(fleet, i, boot, policy, report, ip).await
        }
        // The script exited: the firmware boots the next device, the disk.
        Ok(None) => fleet.disk_boot(i, boot).await,
        Err(reason) => fleet.stuck(i, boot, reason),
    }
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn get_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn script_url(template: &str, mac: &str) -> String {
    if template.contains("{mac}") {
        template.replace("{mac}", mac)
    } else {
        format!("{}/{mac}", template.trim_end_matches('/'))
    }
}

async fn fetch_script(
    fleet: &ServerFleet,
    i: usize,
    boot: u64,
    mac: &str,
) -> Result<String, String> {
    let url = script_url(&fleet.inner().config.boot_url, mac);
    fleet.with(i, boot, |c| c.status.script_fetches += 1);
    let fail = |why: String| {
        format!("PXE: GET {url}: {why}; the firmware falls through to the next boot device")
    };
    let resp = fleet
        .inner()
        .http
        .get(&url)
        .send()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?;
    if !resp.status().is_success() {
        return Err(fail(format!("HTTP {}", resp.status())));
    }
    resp.text()
        .await
        .map_err(|e| fail(e.without_url().to_string()))
}

/// Everything up to the installer's verdict; `None` when the script exits (no install).
async fn prepare(fleet: &ServerFleet, i: usize, boot: u64) -> Result<Option<Booted>, String> {
    let bmc = fleet.bmc(i).ok_or("no such server")?;
    let macs: Vec<String> = (0..fleet.inner().config.nics.max(1))
        .map(|n| bmc.mac(n))
        .collect();
    let script = fetch_script(fleet, i, boot, &macs[0]).await?;
    let (kernel_url, cmdline) = match ipxe::run(&script, &macs) {
        Err(ipxe::ScriptError::Exit { .. }) => return Ok(None),
        Err(e) => return Err(format!("iPXE: {e}")),
        Ok(ipxe::ScriptEnd::Shell) => return Err("iPXE: in the iPXE shell".into()),
        Ok(ipxe::ScriptEnd::Kernel {
            kernel, cmdline, ..
        }) => (kernel, cmdline),
    };
    let params = ipxe::kernel_params(&cmdline);
    let ip = kernel::static_ip(&params, &macs)?;
    if let Some(seed) = super::image::nocloud_seed(&params) {
        return Ok(Some(Booted::Image { seed, ip }));
    }
    if let Some((policy, report)) = super::wipe::orders(&params) {
        return Ok(Some(Booted::Wipe { policy, report, ip }));
    }
    let cmd = install::read_cmdline(&kernel_url, &params);
    let refused = |r: install::Refusal| format!("installer: {r}");
    if cmd.config_url.is_none() && !cmd.automatic {
        return Err(refused(install::Refusal::NotAutomatic));
    }
    let source = ip
        .as_ref()
        .map(|s| IpAddr::V4(s.address))
        .filter(IpAddr::is_loopback);
    let http = bound_client(source)?;
    let remote = fetch_config(&http, cmd.config_url.as_deref())
        .await
        .map_err(refused)?;
    let merged = install::merge(&cmd.config, &remote);
    if !install::is_automatic(&merged) {
        return Err(refused(install::Refusal::NotAutomatic));
    }
    let nics: Vec<(String, String)> = macs
        .iter()
        .enumerate()
        .map(|(n, m)| (format!("eth{n}"), m.clone()))
        .collect();
    let fallback = format!("server-{i}");
    let hostname = get_str(&merged, &["os", "hostname"]).unwrap_or(&fallback);
    let machine = install::Machine {
        hostname,
        nics: &nics,
    };
    let vip = &fleet.inner().vip;
    let release = cmd.release.as_deref();
    let (mode, accepted) = match get_str(&merged, &["install", "mode"]).unwrap_or_default() {
        "create" => (
            "create",
            install::check_create(&merged, release, vip, &machine),
        ),
        "join" => {
            let token = get_str(&merged, &["token"]).unwrap_or_default().to_owned();
            let expected = install::Expected {
                token,
                host: vip.clone(),
                port: None,
                schema: None,
            };
            (
                "join",
                install::check(&merged, release, &expected, &machine),
            )
        }
        other => {
            return Err(format!(
                "installer: install.mode {other:?}: an automatic install needs create or join"
            ));
        }
    };
    let accepted = accepted.map_err(refused)?;
    let mut warnings = accepted.warnings;
    let address = address_of(&merged, ip.as_ref(), &mut warnings);
    let manifests = manifests(&merged, &mut warnings);
    Ok(Some(Booted::Installer(Plan {
        installed: Installed {
            create: mode == "create",
            token: get_str(&merged, &["token"]).unwrap_or_default().to_owned(),
            address,
            node_name: accepted.node_name,
            manifests,
        },
        mode,
        warnings,
        webhooks: webhooks(&merged),
        http,
    })))
}

pub(super) fn bound_client(source: Option<IpAddr>) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .local_address(source)
        .timeout(std::time::Duration::from_secs(10))
        .no_proxy()
        .build()
        .map_err(|e| format!("installer: building its HTTP client: {e}"))
}

/// The installed system's address: the config's static management address, else the
/// installer's own (`ip=`).
fn address_of(
    config: &Value,
    ip: Option<&kernel::StaticIp>,
    warnings: &mut Vec<String>,
) -> Option<String> {
    let from_config = get_str(config, &["install", "managementinterface", "ip"]).map(str::to_owned);
    let from_kernel = ip.map(|s| s.address.to_string());
    if let (Some(c), Some(k)) = (&from_config, &from_kernel)
        && c != k
    {
        warnings.push(format!(
            "install.management_interface.ip {c} differs from the installer's ip= {k}: the installed system uses {c}"
        ));
    }
    from_config.or(from_kernel)
}

async fn fetch_config(
    http: &reqwest::Client,
    url: Option<&str>,
) -> Result<Value, install::Refusal> {
    let Some(url) = url else {
        return Err(install::Refusal::NoConfigUrl);
    };
    let parsed = Url::parse(url).ok().filter(|u| {
        u.scheme() == "http"
            && match u.host() {
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                Some(url::Host::Domain(d)) => d == "localhost",
                None => false,
            }
    });
    let Some(parsed) = parsed else {
        return Err(install::Refusal::UnreachableConfigUrl {
            url: url.to_owned(),
        });
    };
    let fetch = async {
        let resp = http.get(parsed).send().await?;
        resp.error_for_status()?.text().await
    };
    let text = fetch.await.map_err(|e| install::Refusal::ConfigFetch {
        url: url.to_owned(),
        message: e.without_url().to_string(),
    })?;
    install::parse_remote(&text, false)
}

fn webhooks(config: &Value) -> Vec<(String, String, String, String)> {
    let list = get(config, &["install", "webhooks"]).and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(|w| {
            let s = |k: &str| {
                w.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let url = s("url");
            (!url.is_empty()).then(|| (s("event"), s("method"), url, s("payload")))
        })
        .collect()
}

/// `os.write_files` entries under RKE2's manifests directory (plain content).
fn manifests(config: &Value, warnings: &mut Vec<String>) -> Vec<(String, String)> {
    let list = get(config, &["os", "writefiles"]).and_then(Value::as_array);
    let mut out = Vec::new();
    for f in list.into_iter().flatten() {
        let s = |k: &str| {
            f.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let path = s("path");
        if !path.starts_with(cluster::MANIFESTS_DIR) {
            continue;
        }
        match s("encoding").as_str() {
            "" | "text/plain" => out.push((path, s("content"))),
            other => warnings.push(format!(
                "os.write_files {path}: encoding {other:?} is not emulated; not deployed"
            )),
        }
    }
    out
}

/// The install: the disk is wiped, the installer runs, `SUCCEEDED` is announced, the server
/// reboots (no override left: from its disk).
async fn run_install(fleet: &ServerFleet, i: usize, boot: u64, plan: Plan) {
    let Plan {
        installed,
        mode,
        warnings,
        webhooks,
        http,
    } = plan;
    fleet.with(i, boot, |c| {
        *c.installed = None;
        c.status.mode = Some(mode.into());
        c.status.address = installed.address.clone();
        c.status.warnings = warnings;
    });
    fleet.set(i, boot, ServerState::Installing, None);
    let installed = Arc::new(installed);
    send_webhooks(fleet, i, boot, &http, &webhooks, "STARTED").await;
    tokio::time::sleep(fleet.inner().config.install_time).await;
    if fleet
        .with(i, boot, |c| {
            *c.installed = Some(installed.clone());
            c.status.installs += 1;
        })
        .is_none()
    {
        return;
    }
    send_webhooks(fleet, i, boot, &http, &webhooks, "SUCCEEDED").await;
    fleet.set(i, boot, ServerState::Rebooting, None);
    tracing::info!(server = i, node = %installed.node_name, mode, "installed; rebooting");
    if let Some(bmc) = fleet.bmc(i) {
        bmc.reboot_from_os();
    }
}

/// The installer's webhooks for `event`: each sent once, its connection retried a bounded
/// number of times; an HTTP error is a warning.
async fn send_webhooks(
    fleet: &ServerFleet,
    i: usize,
    boot: u64,
    http: &reqwest::Client,
    hooks: &[(String, String, String, String)],
    event: &str,
) {
    let config = &fleet.inner().config;
    for (_, method, url, payload) in hooks.iter().filter(|h| h.0 == event) {
        let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes())
            .unwrap_or(reqwest::Method::GET);
        let mut outcome = Err(String::new());
        for attempt in 1..=config.webhook_attempts.max(1) {
            match http
                .request(method.clone(), url)
                .body(payload.clone())
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => outcome = Ok(()),
                Ok(r) => outcome = Err(format!("HTTP {}", r.status())),
                Err(e) if attempt < config.webhook_attempts => {
                    tracing::warn!(server = i, %url, error = %e.without_url(), "webhook; trying again");
                    tokio::time::sleep(config.webhook_retry).await;
                    continue;
                }
                Err(e) => outcome = Err(e.without_url().to_string()),
            }
            break;
        }
        fleet.with(i, boot, |c| match outcome {
            Ok(()) => c.status.webhooks_sent += 1,
            Err(e) => c
                .status
                .warnings
                .push(format!("webhook {event} {method} {url}: {e}")),
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::install::{Machine, check_create, parse_remote};

    const CREATE: &str = "schemeVersion: 1\ntoken: t0k3n\nos:\n  hostname: n0\ninstall:\n  mode: create\n  vip: 127.0.10.1\n  vipMode: static\n  managementInterface:\n    method: static\n    ip: 127.0.20.10\n    subnetMask: 255.255.255.0\n    gateway: 127.0.20.1\n    interfaces:\n    - hwAddr: 02:00:00:00:00:00\n  device: /dev/sda\n  isoUrl: http://127.0.0.1:9/h.iso\n";

    fn check(config: &str) -> Result<String, String> {
        let nics = vec![("eth0".to_owned(), "02:00:00:00:00:00".to_owned())];
        let machine = Machine {
            hostname: "n0",
            nics: &nics,
        };
        let v = parse_remote(config, false).unwrap();
        check_create(&v, Some("v1.4.2"), "127.0.10.1", &machine)
            .map(|a| a.node_name)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn create_mode_is_checked() {
        assert_eq!(check(CREATE).unwrap(), "n0");
        let other_vip = check(&CREATE.replace("vip: 127.0.10.1", "vip: 127.0.10.2")).unwrap_err();
        assert!(other_vip.contains("install.vip: 127.0.10.2"), "{other_vip}");
        let dhcp = check(&CREATE.replace("vipMode: static", "vipMode: dhcp")).unwrap_err();
        assert!(dhcp.contains("install.vip_mode"), "{dhcp}");
        let no_token = check(&CREATE.replace("token: t0k3n\n", "")).unwrap_err();
        assert!(no_token.contains("token: missing"), "{no_token}");
        let foreign =
            check(&CREATE.replace("hwAddr: 02:00:00:00:00:00", "hwAddr: 02:00:00:00:00:99"))
                .unwrap_err();
        assert!(foreign.contains("not a NIC"), "{foreign}");
    }
}
