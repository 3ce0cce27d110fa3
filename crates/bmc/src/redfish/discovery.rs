//! Discovery: what a client keeps of the service root, the computer system it manages (at the
//! usual URI first, else by the root's links; by name on a BMC with several) and the vendor.

use super::json::{link, string};
use super::sessions::Auth;
use super::transport::check_status;
use super::{RedfishClient, Vendor};
use crate::error::BmcError;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::sync::Arc;

/// What a client keeps of a BMC's service root: the links it follows later and whether `$top`
/// works. A root is often several KiB of JSON (and a `Value` tree several times that in memory):
/// a fleet keeps only these few paths per BMC.
#[derive(Debug, PartialEq)]
pub(super) struct ServiceRoot {
    pub(super) systems: Option<String>,
    pub(super) chassis: Option<String>,
    pub(super) managers: Option<String>,
    pub(super) session_service: Option<String>,
    pub(super) event_service: Option<String>,
    /// `Links.Sessions`, where the root names the session collection itself.
    pub(super) sessions: Option<String>,
    /// `ProtocolFeaturesSupported.TopSkipQuery`.
    pub(super) top_skip: bool,
    /// The vendor the root names (`Vendor`, `Oem` keys), if any.
    pub(super) vendor: Vendor,
}

impl ServiceRoot {
    pub(super) fn of(root: &Value) -> Self {
        ServiceRoot {
            systems: link(root, "Systems"),
            chassis: link(root, "Chassis"),
            managers: link(root, "Managers"),
            session_service: link(root, "SessionService"),
            event_service: link(root, "EventService"),
            sessions: root
                .pointer("/Links/Sessions/@odata.id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            top_skip: root
                .pointer("/ProtocolFeaturesSupported/TopSkipQuery")
                .and_then(Value::as_bool)
                == Some(true),
            vendor: Vendor::detect(root, None),
        }
    }

    /// The vendor: the root's hint first, then the system's `Manufacturer`.
    pub(super) fn vendor_with(&self, manufacturer: Option<&str>) -> Vendor {
        match self.vendor {
            Vendor::Generic => Vendor::detect(&Value::Null, manufacturer),
            named => named,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Discovered {
    pub(super) root: Option<Arc<ServiceRoot>>,
    pub(super) system: Option<String>,
    pub(super) vendor: Option<Vendor>,
}

/// Where BMCs serve the computer systems (the URI the Redfish specification and the vendors'
/// guides give them): with the session collection's, a first contact logs in and finds its
/// system without reading the service root, three requests instead of four for each BMC of a
/// fleet. A BMC that serves them elsewhere answers 404 or 405, and the client follows its
/// service root's links instead.
const SYSTEMS_URI: &str = "/redfish/v1/Systems";

impl RedfishClient {
    /// The service root, if it was read.
    pub(super) fn known_root(&self) -> Option<Arc<ServiceRoot>> {
        self.found.lock().ok().and_then(|f| f.root.clone())
    }

    /// The service root, fetched once (unauthenticated, as the specification allows).
    pub(super) async fn root(&self) -> Result<Arc<ServiceRoot>, BmcError> {
        if let Some(r) = self.known_root() {
            return Ok(r);
        }
        let resp = self
            .send_raw(Method::GET, "/redfish/v1/", None, &Auth::None, &[])
            .await?;
        let resp = if resp.status == StatusCode::UNAUTHORIZED {
            // Some BMCs protect the root; retry with credentials.
            self.send_raw(Method::GET, "/redfish/v1/", None, &Auth::Basic, &[])
                .await?
        } else {
            resp
        };
        check_status(&resp, "GET", "/redfish/v1/")?;
        let root = resp.json()?;
        if !root.is_object() || root.get("@odata.id").is_none() && root.get("Systems").is_none() {
            return Err(BmcError::Malformed(
                "the service root is not a Redfish ServiceRoot".into(),
            ));
        }
        let root = Arc::new(ServiceRoot::of(&root));
        if let Ok(mut f) = self.found.lock() {
            f.root = Some(root.clone());
        }
        Ok(root)
    }

    /// The computer system this client manages: the one named by `system_name` on a BMC
    /// with several, else the first member of `Systems`.
    pub(super) async fn system_path(&self) -> Result<String, BmcError> {
        if let Some(s) = self.found.lock().ok().and_then(|f| f.system.clone()) {
            return Ok(s);
        }
        // Logged in first: a 404 below is then the collection's, not the login's.
        self.current_auth().await?;
        let mut links = match self.known_root() {
            Some(root) => self.systems_of(&root).await?,
            None => match self.member_links(SYSTEMS_URI).await {
                Err(BmcError::Http {
                    status: 404 | 405, ..
                }) => self.systems_of(&*self.root().await?).await?,
                other => other?,
            },
        };
        links.sort();
        let chosen = match (&self.options.system_name, links.len()) {
            (_, 0) => return Err(BmcError::Unsupported("no computer system".into())),
            // One system: it is the one meant, whatever its name (as bmclib does).
            (None, _) | (Some(_), 1) => links.swap_remove(0),
            (Some(wanted), _) => self.system_named(wanted, &links).await?,
        };
        if let Ok(mut f) = self.found.lock() {
            f.system = Some(chosen.clone());
        }
        Ok(chosen)
    }

    /// The members of the root's `Systems` collection.
    async fn systems_of(&self, root: &ServiceRoot) -> Result<Vec<String>, BmcError> {
        let systems = root
            .systems
            .as_deref()
            .ok_or_else(|| BmcError::Unsupported("Systems".into()))?;
        self.member_links(systems).await
    }

    /// The member of `links` whose `Name` is `wanted` (else whose `Id` is). None matching is
    /// an error rather than a guess: a power action must not reach another node's system.
    async fn system_named(&self, wanted: &str, links: &[String]) -> Result<String, BmcError> {
        let mut seen = Vec::with_capacity(links.len());
        for link in links {
            let system = self.get(link).await?;
            let name = string(&system, "Name").unwrap_or_default();
            let id = string(&system, "Id").unwrap_or_default();
            if name == wanted {
                return Ok(link.clone());
            }
            seen.push((link.clone(), name, id));
        }
        if let Some((link, _, _)) = seen.iter().find(|(_, _, id)| id == wanted) {
            return Ok(link.clone());
        }
        let names: Vec<String> = seen
            .iter()
            .map(|(_, name, id)| format!("{name:?} (Id {id:?})"))
            .collect();
        Err(BmcError::Config(format!(
            "no computer system is named {wanted:?} at this BMC; it has {}: set providerOptions.redfish.systemName to one of those names",
            names.join(", ")
        )))
    }

    pub(super) async fn system(&self) -> Result<(String, Value, Option<String>), BmcError> {
        let path = self.system_path().await?;
        let (v, etag) = self.get_with_etag(&path).await?;
        Ok((path, v, etag))
    }

    /// The BMC's vendor, for the calls that differ by vendor: the service root's hint (the
    /// root is read for it once), else the system's `Manufacturer`.
    pub(super) async fn vendor_of(&self, system: &Value) -> Vendor {
        if let Some(v) = self.vendor() {
            return v;
        }
        let manufacturer = string(system, "Manufacturer");
        match self.root().await {
            Ok(root) => {
                let vendor = root.vendor_with(manufacturer.as_deref());
                if let Ok(mut f) = self.found.lock() {
                    f.vendor = Some(vendor);
                }
                vendor
            }
            // Not kept: the root's hint is read again next time.
            Err(e) => {
                tracing::debug!(bmc = %self.base, error = %e, "service root unreadable; vendor from the system");
                Vendor::detect(&Value::Null, manufacturer.as_deref())
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_service_root_holds_every_link_and_hint_read_later() {
        let root = serde_json::json!({
            "@odata.id": "/redfish/v1",
            "Id": "RootService",
            "Product": "Integrated Dell Remote Access Controller",
            "RedfishVersion": "1.17.0",
            "UUID": "4c4c4544-0000-0000-0000-000000000000",
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
            "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
            "Managers": {"@odata.id": "/redfish/v1/Managers"},
            "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
            "EventService": {"@odata.id": "/redfish/v1/EventService"},
            "AccountService": {"@odata.id": "/redfish/v1/AccountService"},
            "JsonSchemas": {"@odata.id": "/redfish/v1/JsonSchemas"},
            "Registries": {"@odata.id": "/redfish/v1/Registries"},
            "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
            "ProtocolFeaturesSupported": {
                "TopSkipQuery": true,
                "ExpandQuery": {"Levels": true, "MaxLevels": 1},
                "SelectQuery": true
            },
            "Oem": {"Dell": {"ManagerMACAddress": "aa:bb", "ServiceTag": "ABC1234"}}
        });
        let kept = ServiceRoot::of(&root);
        assert_eq!(
            kept,
            ServiceRoot {
                systems: Some("/redfish/v1/Systems".into()),
                chassis: Some("/redfish/v1/Chassis".into()),
                managers: Some("/redfish/v1/Managers".into()),
                session_service: Some("/redfish/v1/SessionService".into()),
                event_service: Some("/redfish/v1/EventService".into()),
                sessions: Some("/redfish/v1/SessionService/Sessions".into()),
                top_skip: true,
                vendor: Vendor::Dell,
            }
        );
        // The root's vendor hint wins over the system's manufacturer; without one, the
        // manufacturer decides.
        assert_eq!(kept.vendor_with(Some("Supermicro")), Vendor::Dell);
        let plain = ServiceRoot::of(&serde_json::json!({"@odata.id": "/redfish/v1"}));
        assert_eq!(plain.vendor_with(Some("Supermicro")), Vendor::Supermicro);
        assert_eq!(plain.vendor_with(None), Vendor::Generic);
        assert!(!plain.top_skip && plain.systems.is_none());
    }
}
