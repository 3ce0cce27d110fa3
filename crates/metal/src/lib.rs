//! Bare-metal clouds for ingot.
//!
//! Controllers use the cloud-neutral [`BareMetalCloud`] trait and its types ([`Server`],
//! [`Port`], [`NetworkMode`], [`Vlan`], ...). [`equinix`] implements it for Equinix Metal over
//! a typed HTTP client with timeouts, retries, a shared rate limiter and typed errors.

pub mod equinix;
pub mod error;
pub mod observe;
pub mod provider;
pub mod secret;

pub use error::{Error, Result, Shortage};
pub use observe::{MetalObserver, Observer};
pub use provider::*;
pub use secret::ApiToken;

/// How `Debug` shows userdata: never its text (it carries join tokens and passwords), only
/// its size.
pub(crate) fn redacted_userdata(userdata: Option<&str>) -> Option<String> {
    userdata.map(|u| format!("<redacted, {} bytes>", u.len()))
}

#[cfg(test)]
mod redaction_tests {
    use super::*;

    #[test]
    fn debug_of_requests_never_shows_userdata() {
        let mut create = CreateServer::new(
            "h",
            "p",
            "sg",
            "tag",
            Boot::Ipxe {
                script_url: None,
                always: false,
            },
        );
        create.userdata = Some("token: K10-secret".to_owned());
        let update = BootUpdate {
            userdata: Some("password: hunter2".to_owned()),
            ..BootUpdate::default()
        };
        let wire_update = equinix::wire::DeviceUpdateRequest {
            userdata: Some("token: K10-secret".to_owned()),
            ..Default::default()
        };
        for shown in [
            format!("{create:?}"),
            format!("{update:?}"),
            format!("{wire_update:?}"),
        ] {
            assert!(
                !shown.contains("K10-secret") && !shown.contains("hunter2"),
                "{shown}"
            );
            assert!(shown.contains("redacted"), "{shown}");
        }
    }
}
