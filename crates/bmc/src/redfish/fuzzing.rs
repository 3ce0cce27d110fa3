//! Entry points for the fuzz targets (`fuzz/` in the repository), the property tests and the
//! recorder of the inventory mapping's test data: the mappings of what a Redfish service sends,
//! which are otherwise internal. Built only with the `fuzzing` feature; nothing here is part of
//! the client's API.

use super::boot::parse_boot;
use super::discovery::ServiceRoot;
use super::inventory::map::{component, normalize_mac};
use super::media::media_slot;
use super::sessions::{Auth, login_answer};
use super::transport::{Response, check_status};
use super::{events, json, transport};
use crate::error::BmcError;
use crate::types::{BootOverride, Component, Health, MediaSlot};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

/// `base` + the path and query of `link`, as every request URL is built.
pub fn join_url(base: &str, link: &str) -> String {
    transport::join_url(base, link)
}

/// Whether two links name the same resource.
pub fn same_path(a: &str, b: &str) -> bool {
    transport::same_path(a, b)
}

/// What the client keeps of a service root, as `Debug` text.
pub fn service_root(root: &Value) -> String {
    format!("{:?}", ServiceRoot::of(root))
}

/// The boot override a system document reports.
pub fn boot_override(system: &Value) -> BootOverride {
    parse_boot(system)
}

/// A virtual media device.
pub fn media(device: &Value) -> MediaSlot {
    media_slot(device)
}

/// A component's name and health.
pub fn named_component(resource: &Value) -> Component {
    component(resource)
}

/// The accessors every mapping reads fields with: string, number, link, list, health.
pub fn field(v: &Value, key: &str) -> (Option<String>, Option<u64>, Option<String>, Vec<String>) {
    (
        json::string(v, key),
        json::uint(v, key),
        json::link(v, key),
        v.get(key).map(json::list).unwrap_or_default(),
    )
}

/// A resource's health, its own or rolled up.
pub fn health(resource: &Value, rollup: bool) -> Option<Health> {
    json::health(resource, rollup)
}

/// A MAC address as the inventory reports it.
pub fn mac(text: &str) -> String {
    normalize_mac(text)
}

fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Option<Response> {
    let status = StatusCode::from_u16(status).ok()?;
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let (Ok(k), Ok(v)) = (HeaderName::try_from(*k), HeaderValue::try_from(*v)) else {
            continue;
        };
        map.append(k, v);
    }
    Some(Response {
        status,
        headers: map,
        body: body.to_vec(),
    })
}

/// The error an answer with `status` and `body` becomes (`Ok` for a success);
/// `None` for a status HTTP does not have.
pub fn answer_error(status: u16, body: &[u8]) -> Option<Result<(), BmcError>> {
    response(status, &[], body).map(|r| check_status(&r, "GET", "/redfish/v1/Systems/1"))
}

/// What the client makes of the answer to its login POST: the session's location (`Ok(None)`
/// for HTTP Basic or a session without one); `None` for a status HTTP does not have.
pub fn login(
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<Result<Option<String>, BmcError>> {
    let r = response(status, headers, body)?;
    Some(
        login_answer(&r, "/redfish/v1/SessionService/Sessions", true).map(|a| match a {
            Auth::Session { location, .. } => location,
            Auth::Basic | Auth::None => None,
        }),
    )
}

/// The event stream's framing: bytes in as they arrive, messages out.
#[derive(Default)]
pub struct EventFramer(events::Framer);

impl EventFramer {
    /// Bytes as one read of the stream returned them.
    pub fn push(&mut self, chunk: &[u8]) {
        self.0.push(chunk);
    }

    /// The next complete message (comments skipped); `None` until a blank line ends one.
    pub fn next_message(&mut self) -> Option<Result<Value, BmcError>> {
        self.0.next_message()
    }
}

/// The documents the client reads for an inventory, and the service root, as the inventory
/// mapping's recorded test data holds them (`redfish/inventory/testdata/`).
pub async fn inventory_documents(client: &super::RedfishClient) -> Result<Value, BmcError> {
    let root = client.get("/redfish/v1/").await?;
    let (_, system, _) = client.system().await?;
    let documents = client.inventory_documents(system).await?;
    let mut recorded = serde_json::to_value(documents)
        .map_err(|e| BmcError::Malformed(format!("inventory documents: {e}")))?;
    if let Some(fields) = recorded.as_object_mut() {
        fields.insert("ServiceRoot".into(), root);
    }
    Ok(recorded)
}
