//! `--host` parsing: a host name, an IPv4/IPv6 address (bracketed or not) or a URL.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

/// Where a BMC is. `port` is the port of the chosen protocol (HTTP(S) for Redfish, UDP for IPMI).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    pub scheme: Scheme,
    /// Host name or address, without brackets.
    pub host: String,
    /// Explicit port; `None` means the protocol's default (443/80 for Redfish, 623 for IPMI).
    pub port: Option<u16>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid BMC address {input:?}: {reason}")]
pub struct EndpointError {
    pub input: String,
    pub reason: &'static str,
}

impl Endpoint {
    /// Parses `h`, `h:p`, `1.2.3.4`, `[::1]:8443`, `::1`, `https://h:8443`, `http://h:8000/`.
    /// `port` (from `--port`) overrides a port in `input`.
    pub fn parse(input: &str, port: Option<u16>) -> Result<Self, EndpointError> {
        let err = |reason| EndpointError {
            input: input.to_owned(),
            reason,
        };
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(err("empty"));
        }
        let (scheme, rest) = if let Some(r) = trimmed.strip_prefix("https://") {
            (Scheme::Https, r)
        } else if let Some(r) = trimmed.strip_prefix("http://") {
            (Scheme::Http, r)
        } else if trimmed.contains("://") {
            return Err(err("only http:// and https:// URLs are supported"));
        } else {
            (Scheme::Https, trimmed)
        };
        // Drop a path (`/`, `/redfish/v1`): the client always starts at the service root.
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(err("no host"));
        }
        if authority.contains('@') {
            return Err(err(
                "credentials in the address are not accepted; use --user",
            ));
        }
        let (host, parsed_port) = if let Some(after) = authority.strip_prefix('[') {
            let (h, tail) = after.split_once(']').ok_or_else(|| err("unclosed '['"))?;
            let p = match tail.strip_prefix(':') {
                Some(p) => Some(p.parse::<u16>().map_err(|_| err("bad port"))?),
                None if tail.is_empty() => None,
                None => return Err(err("garbage after ']'")),
            };
            (h.to_owned(), p)
        } else if authority.parse::<IpAddr>().is_ok() {
            // A bare IPv6 address (several colons) or an IPv4 address.
            (authority.to_owned(), None)
        } else if let Some((h, p)) = authority.rsplit_once(':') {
            if h.contains(':') {
                return Err(err("IPv6 addresses with a port need brackets: [addr]:port"));
            }
            (
                h.to_owned(),
                Some(p.parse::<u16>().map_err(|_| err("bad port"))?),
            )
        } else {
            (authority.to_owned(), None)
        };
        if host.is_empty() {
            return Err(err("no host"));
        }
        if !host.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6())
            && !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        {
            return Err(err("invalid host name"));
        }
        Ok(Endpoint {
            scheme,
            host,
            port: port.or(parsed_port),
        })
    }

    /// The host as it goes into a URL (IPv6 in brackets).
    pub fn url_host(&self) -> String {
        if self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6()) {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }

    /// The Redfish base URL (`https://host[:port]`).
    pub fn base_url(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        match self.port {
            Some(p) => format!("{scheme}://{}:{p}", self.url_host()),
            None => format!("{scheme}://{}", self.url_host()),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base_url())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn p(s: &str) -> Endpoint {
        Endpoint::parse(s, None).unwrap()
    }

    #[test]
    fn forms() {
        assert_eq!(p("bmc1").base_url(), "https://bmc1");
        assert_eq!(
            p("bmc1.example:8443").base_url(),
            "https://bmc1.example:8443"
        );
        assert_eq!(p("10.0.0.5").base_url(), "https://10.0.0.5");
        assert_eq!(p("http://h:8000").base_url(), "http://h:8000");
        assert_eq!(p("https://h:8443/redfish/v1/").base_url(), "https://h:8443");
        assert_eq!(p("::1").base_url(), "https://[::1]");
        assert_eq!(p("[fe80::1]:443").port, Some(443));
        assert_eq!(p("[fe80::1]:443").host, "fe80::1");
        assert_eq!(Endpoint::parse("h:1", Some(2)).unwrap().port, Some(2));
    }

    #[test]
    fn rejects() {
        for bad in [
            "",
            "ftp://h",
            "https://",
            "h:x",
            "u:p@h",
            "h w",
            "fe80::1:99999x",
            "[::1",
        ] {
            assert!(Endpoint::parse(bad, None).is_err(), "{bad}");
        }
    }
}
