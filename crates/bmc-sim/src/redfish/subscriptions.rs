//! Push subscriptions (DMTF `EventDestination`): created, read and deleted under
//! `/redfish/v1/EventService/Subscriptions`; each one gets the BMC's events POSTed to its
//! `Destination` by [`crate::delivery`].

use super::{Bmc, Req, collection, error, json_response, method_not_allowed, not_found};
use crate::{Subscription, Vendor};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(super) const SUBSCRIPTIONS: &str = "/redfish/v1/EventService/Subscriptions";

pub(super) fn route(r: &Req) -> Option<Response> {
    if r.path == SUBSCRIPTIONS {
        return Some(match *r.method {
            Method::POST => create(r.b, r.body),
            Method::GET | Method::HEAD => {
                let ids: Vec<String> =
                    r.b.lock()
                        .subscriptions
                        .keys()
                        .map(|id| format!("{SUBSCRIPTIONS}/{id}"))
                        .collect();
                super::ok(collection(
                    SUBSCRIPTIONS,
                    "EventDestinationCollection",
                    "Event Subscriptions",
                    ids,
                ))
            }
            _ => method_not_allowed(),
        });
    }
    let id = r
        .path
        .strip_prefix(SUBSCRIPTIONS)
        .and_then(|rest| rest.strip_prefix('/'))?;
    let Ok(id) = id.parse::<u64>() else {
        return Some(not_found());
    };
    Some(member(r, id))
}

fn member(r: &Req, id: u64) -> Response {
    let mut g = r.b.lock();
    let Some(s) = g.subscriptions.get(&id) else {
        return not_found();
    };
    match *r.method {
        Method::GET | Method::HEAD => {
            let mut body = json!({
                "@odata.id": format!("{SUBSCRIPTIONS}/{id}"),
                "@odata.type": "#EventDestination.v1_13_0.EventDestination",
                "Id": id.to_string(),
                "Name": "Event Subscription",
                "Destination": s.destination,
                "Protocol": "Redfish",
                "Context": s.context,
                "SubscriptionType": "RedfishEvent",
                // Write-only: never read back.
                "HttpHeaders": Value::Null,
            });
            // Dell and HPE leave `EventFormatType` out of what they read back.
            if !omits_format(r.b.profile.vendor) {
                body["EventFormatType"] = json!(s.format.as_deref().unwrap_or("Event"));
            }
            if let Some(p) = &s.registry_prefixes {
                body["RegistryPrefixes"] = json!(p);
            }
            super::ok(body)
        }
        Method::DELETE => {
            g.subscriptions.remove(&id);
            StatusCode::NO_CONTENT.into_response()
        }
        _ => method_not_allowed(),
    }
}

fn omits_format(vendor: Vendor) -> bool {
    matches!(vendor, Vendor::Dell | Vendor::Hpe)
}

fn bad(message_id: &str, message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, message_id, message)
}

fn create(b: &Bmc, body: Option<&Value>) -> Response {
    let Some(body) = body.and_then(Value::as_object) else {
        return bad(
            "Base.1.8.PropertyMissing",
            "The property Destination is a required property and must be included in the request.",
        );
    };
    let Some(destination) = body.get("Destination").and_then(Value::as_str) else {
        return bad(
            "Base.1.8.PropertyMissing",
            "The property Destination is a required property and must be included in the request.",
        );
    };
    let Ok(url) = reqwest::Url::parse(destination) else {
        return bad(
            "Base.1.8.PropertyValueFormatError",
            "The value of the property Destination is not an http or https URI.",
        );
    };
    if url.scheme() != "http" && url.scheme() != "https" {
        return bad(
            "Base.1.8.PropertyValueFormatError",
            "The value of the property Destination is not an http or https URI.",
        );
    }
    match body.get("Protocol").and_then(Value::as_str) {
        Some("Redfish") => {}
        None => {
            return bad(
                "Base.1.8.PropertyMissing",
                "The property Protocol is a required property and must be included in the request.",
            );
        }
        Some(_) => {
            return bad(
                "Base.1.8.PropertyValueNotInList",
                "The value of the property Protocol is not in the list of acceptable values (Redfish).",
            );
        }
    }
    // iLO and iDRAC refuse what they do not support (ironcore metal-operator PR #754).
    if omits_format(b.profile.vendor) {
        if body.contains_key("DeliveryRetryPolicy") {
            return bad(
                "Base.1.8.PropertyUnknown",
                "The property DeliveryRetryPolicy is not in the list of valid properties for the resource.",
            );
        }
        if body
            .get("ResourceTypes")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        {
            return bad(
                "Base.1.8.PropertyValueFormatError",
                "The value [] of the property ResourceTypes is not in an acceptable format.",
            );
        }
    }
    let context = match body.get("Context") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return bad(
                "Base.1.8.PropertyValueTypeError",
                "The value of the property Context is not a string.",
            );
        }
    };
    let mut headers = Vec::new();
    match body.get("HttpHeaders") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                let valid = v.as_str().filter(|v| {
                    header::HeaderName::from_bytes(k.as_bytes()).is_ok()
                        && HeaderValue::from_str(v).is_ok()
                });
                let Some(v) = valid else {
                    return bad(
                        "Base.1.8.PropertyValueFormatError",
                        "HttpHeaders must be an object of header names to string values.",
                    );
                };
                headers.push((k.clone(), v.to_owned()));
            }
        }
        Some(_) => {
            return bad(
                "Base.1.8.PropertyValueTypeError",
                "HttpHeaders must be an object of header names to string values.",
            );
        }
    }
    let format = body
        .get("EventFormatType")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let registry_prefixes = body
        .get("RegistryPrefixes")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        });
    let mut g = b.lock();
    if g.quirks.event_service_disabled {
        return bad(
            "Base.1.8.ServiceDisabled",
            "The operation failed because the service at /redfish/v1/EventService is disabled.",
        );
    }
    if g.subscriptions.len() >= g.event_knobs.max_subscriptions {
        return bad(
            "Base.1.8.CreateLimitReachedForResource",
            "The create operation failed because the resource has reached the limit of possible resources.",
        );
    }
    let id = g.next_subscription;
    g.next_subscription += 1;
    let queue = crate::delivery::start(b, id);
    g.subscriptions.insert(
        id,
        Subscription {
            destination: destination.to_owned(),
            context,
            headers,
            format,
            registry_prefixes,
            queue,
        },
    );
    drop(g);
    let location = format!("{SUBSCRIPTIONS}/{id}");
    let mut r = json_response(
        StatusCode::CREATED,
        &json!({
            "@odata.id": location,
            "@odata.type": "#EventDestination.v1_13_0.EventDestination",
            "Id": id.to_string(),
            "Name": "Event Subscription",
            "Destination": destination,
            "Protocol": "Redfish",
        }),
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}
