//! A network boot into ingot's wipe image, as its contract says (`ingot.wipe=<policy>`,
//! `ingot.report=<url>` and the static `ip=` on the kernel line): the disks are erased, which
//! takes [`super::ServerFleetConfig::wipe_time`], leaving nothing bootable; then the report is
//! `PUT` from the server's own address, its connection retried as the installer's webhooks.
//! The agent then idles until the server is powered off.

use std::net::IpAddr;

use super::{ServerFleet, ServerState, kernel};

/// What the kernel line says of a wipe boot: the policy and where to report.
pub(super) fn orders(params: &[(String, Option<String>)]) -> Option<(String, Option<String>)> {
    let value = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.clone())
    };
    Some((value("ingot.wipe")?, value("ingot.report")))
}

pub(super) async fn run(
    fleet: &ServerFleet,
    i: usize,
    boot: u64,
    policy: String,
    report: Option<String>,
    ip: Option<kernel::StaticIp>,
) {
    if policy != "metadata" {
        let reason = format!("wipe agent: ingot.wipe={policy} is not a policy it knows");
        return fleet.stuck(i, boot, reason);
    }
    let Some(report) = report else {
        return fleet.stuck(i, boot, "wipe agent: no ingot.report URL".into());
    };
    fleet.with(i, boot, |c| {
        c.status.address = ip.as_ref().map(|s| s.address.to_string());
    });
    fleet.set(
        i,
        boot,
        ServerState::Wiping,
        Some(format!("erasing the disks' metadata ({policy})")),
    );
    tokio::time::sleep(fleet.inner().config.wipe_time).await;
    if fleet
        .with(i, boot, |c| {
            *c.installed = None;
            c.status.wipes += 1;
        })
        .is_none()
    {
        return;
    }
    let source = ip.as_ref().map(|s| IpAddr::V4(s.address));
    let http = match super::pxe::bound_client(source.filter(IpAddr::is_loopback)) {
        Ok(h) => h,
        Err(reason) => return fleet.stuck(i, boot, reason),
    };
    let config = &fleet.inner().config;
    for attempt in 1..=config.webhook_attempts.max(1) {
        match http.put(&report).send().await {
            Ok(r) if r.status().is_success() => {
                fleet.with(i, boot, |c| c.status.wipe_reports += 1);
                return fleet.set(i, boot, ServerState::Wiped, None);
            }
            Ok(r) => {
                let reason = format!("wipe agent: PUT {report}: HTTP {}", r.status());
                return fleet.stuck(i, boot, reason);
            }
            Err(e) if attempt < config.webhook_attempts => {
                tracing::warn!(server = i, %report, error = %e.without_url(), "wipe report; trying again");
                tokio::time::sleep(config.webhook_retry).await;
            }
            Err(e) => {
                let reason = format!("wipe agent: PUT {report}: {}", e.without_url());
                return fleet.stuck(i, boot, reason);
            }
        }
    }
}
