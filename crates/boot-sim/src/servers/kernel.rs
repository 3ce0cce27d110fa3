//! The install kernel's network arguments, as dracut reads them: the static
//! `ip=<addr>::<gw>:<mask>::<iface>:off`, `ifname=<iface>:<mac>` and, for a VLAN,
//! `vlan=vlan<ID>:<parent>`.

use std::net::Ipv4Addr;

/// The address the installer runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticIp {
    pub address: Ipv4Addr,
    pub gateway: Ipv4Addr,
    pub netmask: String,
    /// `netboot`, or `vlan<ID>` on top of it.
    pub interface: String,
    pub vlan: Option<u16>,
}

fn value<'a>(params: &'a [(String, Option<String>)], key: &str) -> Vec<&'a str> {
    params
        .iter()
        .filter(|(k, _)| k == key)
        .filter_map(|(_, v)| v.as_deref())
        .collect()
}

/// Reads the static `ip=`; `Ok(None)` when there is none or it is `dhcp` (the installer then
/// runs with a DHCP address). `macs` are the server's NICs: the interface must end on one.
pub fn static_ip(
    params: &[(String, Option<String>)],
    macs: &[String],
) -> Result<Option<StaticIp>, String> {
    let Some(ip) = value(params, "ip").into_iter().find(|v| v.contains(':')) else {
        return Ok(None);
    };
    let f: Vec<&str> = ip.split(':').collect();
    let bad = |why: &str| format!("dracut: ip={ip}: {why} (<addr>::<gw>:<mask>::<iface>:off)");
    if f.len() != 7 || !f[1].is_empty() || !matches!(f[6], "off" | "none") {
        return Err(bad("not a static address"));
    }
    let address: Ipv4Addr = f[0].parse().map_err(|_| bad("bad address"))?;
    let gateway: Ipv4Addr = f[2].parse().map_err(|_| bad("bad gateway"))?;
    let mask_ok = f[3].parse::<Ipv4Addr>().is_ok() || f[3].parse::<u8>().is_ok_and(|p| p <= 32);
    if !mask_ok {
        return Err(bad("bad netmask"));
    }
    let interface = f[5].to_owned();
    let (parent, vlan) = match interface.strip_prefix("vlan") {
        Some(id) => {
            let id: u16 = id.parse().map_err(|_| bad("bad VLAN interface"))?;
            let parent = value(params, "vlan")
                .into_iter()
                .find_map(|v| v.strip_prefix(&format!("{interface}:")))
                .ok_or_else(|| {
                    format!(
                        "dracut: ip= names {interface} but no vlan={interface}:<parent> defines it"
                    )
                })?;
            (parent.to_owned(), Some(id))
        }
        None => (interface.clone(), None),
    };
    let mac = value(params, "ifname")
        .into_iter()
        .find_map(|v| v.strip_prefix(&format!("{parent}:")))
        .ok_or_else(|| format!("dracut: no ifname={parent}:<mac> names the interface {parent}"))?;
    if !macs.iter().any(|m| m.eq_ignore_ascii_case(mac)) {
        return Err(format!(
            "dracut: ifname={parent}:{mac} is not a NIC of this server (its NICs: {})",
            macs.join(", ")
        ));
    }
    Ok(Some(StaticIp {
        address,
        gateway,
        netmask: f[3].to_owned(),
        interface,
        vlan,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ipxe::kernel_params;

    #[test]
    fn static_and_vlan_forms() {
        let macs = vec!["02:00:00:00:00:00".to_owned()];
        let p = kernel_params(
            "ip=127.0.20.5::127.0.20.1:255.255.255.0::netboot:off ifname=netboot:02:00:00:00:00:00",
        );
        let ip = static_ip(&p, &macs).unwrap().unwrap();
        assert_eq!(ip.address, Ipv4Addr::new(127, 0, 20, 5));
        assert_eq!((ip.interface.as_str(), ip.vlan), ("netboot", None));
        let p = kernel_params(
            "ip=127.0.20.5::127.0.20.1:255.255.255.0::vlan7:off vlan=vlan7:netboot ifname=netboot:02:00:00:00:00:00",
        );
        assert_eq!(static_ip(&p, &macs).unwrap().unwrap().vlan, Some(7));
        let p = kernel_params(
            "ip=127.0.20.5::127.0.20.1:255.255.255.0::vlan7:off ifname=netboot:02:00:00:00:00:00",
        );
        assert!(static_ip(&p, &macs).unwrap_err().contains("vlan=vlan7"));
        let p = kernel_params(
            "ip=127.0.20.5::127.0.20.1:255.255.255.0::netboot:off ifname=netboot:02:00:00:00:00:99",
        );
        assert!(static_ip(&p, &macs).unwrap_err().contains("not a NIC"));
        assert_eq!(static_ip(&kernel_params("ip=dhcp"), &macs).unwrap(), None);
    }
}
