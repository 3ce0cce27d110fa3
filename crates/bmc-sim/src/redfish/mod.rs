//! The Redfish resources of one emulated BMC, and the `/_sim/` admin endpoints.
//!
//! A request goes through [`handle`] (faults, authentication, quirks, the body), then the route
//! table [`ROUTES`]: one module per resource, asked in order, the first that takes the path
//! answers.

mod admin;
mod chassis;
mod events;
mod handle;
mod logs;
mod managers;
mod service_root;
mod sessions;
mod subscriptions;
mod system_parts;
mod systems;
mod virtual_media;

use crate::{BmcState, Fault, Inner};
use axum::Router;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

type Bmc = Arc<BmcState>;

pub(crate) use systems::transition;

pub(crate) fn router(state: Bmc) -> Router {
    Router::new().fallback(handle::handle).with_state(state)
}

pub(crate) fn power_state_name(g: &Inner) -> &'static str {
    match (g.power_on, g.pending) {
        (_, Some((true, _))) => "PoweringOn",
        (_, Some((false, _))) => "PoweringOff",
        (true, None) => "On",
        (false, None) => "Off",
    }
}

pub(crate) fn system_path(b: &BmcState) -> String {
    format!("/redfish/v1/Systems/{}", b.profile.system_id)
}

pub(crate) fn manager_path(b: &BmcState) -> String {
    format!("/redfish/v1/Managers/{}", b.profile.manager_id)
}

fn chassis_path(b: &BmcState) -> String {
    format!("/redfish/v1/Chassis/{}", b.profile.chassis_id)
}

fn log_service_path(b: &BmcState) -> String {
    let (kind, id) = b.profile.log;
    let owner = if kind == "Systems" {
        system_path(b)
    } else {
        manager_path(b)
    };
    format!("{owner}/LogServices/{id}")
}

pub(crate) fn log_entry_path(b: &BmcState, id: u64) -> String {
    format!("{}/Entries/{id}", log_service_path(b))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json;charset=utf-8"),
    );
    r.headers_mut()
        .insert("OData-Version", HeaderValue::from_static("4.0"));
    r
}

fn ok(body: Value) -> Response {
    json_response(StatusCode::OK, &body)
}

fn error(status: StatusCode, message_id: &str, message: &str) -> Response {
    json_response(
        status,
        &json!({
            "error": {
                "code": message_id,
                "message": message,
                "@Message.ExtendedInfo": [{
                    "@odata.type": "#Message.v1_1_1.Message",
                    "MessageId": message_id,
                    "Message": message,
                    "Severity": "Critical",
                    "MessageSeverity": "Critical",
                    "Resolution": "None."
                }]
            }
        }),
    )
}

fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "Base.1.8.ResourceMissingAtURI",
        "The resource at the URI was not found.",
    )
}

fn unauthorized() -> Response {
    let mut r = error(
        StatusCode::UNAUTHORIZED,
        "Base.1.8.NoValidSession",
        "There is no valid session established with the implementation.",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"redfish\""),
    );
    r
}

fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "Base.1.8.OperationNotAllowed",
        "The HTTP method is not allowed on this resource.",
    )
}

fn collection(path: &str, kind: &str, name: &str, members: Vec<String>) -> Value {
    json!({
        "@odata.id": path,
        "@odata.type": format!("#{kind}.{kind}"),
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members.iter().map(|m| json!({"@odata.id": m})).collect::<Vec<_>>(),
    })
}

fn status_ok() -> Value {
    json!({"State": "Enabled", "Health": "OK"})
}

/// A request as the resources see it, once the pipeline let it through.
struct Req<'a> {
    b: &'a Bmc,
    method: &'a Method,
    /// Without trailing `/` (the root `/` aside).
    path: &'a str,
    headers: &'a HeaderMap,
    body: Option<&'a Value>,
    fault: Option<&'a Fault>,
}

impl Req<'_> {
    /// Whether the request only reads (GET or HEAD).
    fn reads(&self) -> bool {
        *self.method == Method::GET || *self.method == Method::HEAD
    }
}

/// What a resource answers to a request for one of its paths (`None`: not its path).
type Route = fn(&Req) -> Option<Response>;

/// The resources in the order they are asked; a path none of them takes is not found. The
/// ones after [`read_only`] serve only GET and HEAD: any other method is refused there.
const ROUTES: &[Route] = &[
    service_root::route,
    sessions::route,
    systems::route,
    virtual_media::route,
    subscriptions::route,
    read_only,
    system_parts::route,
    logs::route,
    chassis::route,
    managers::route,
    events::route,
];

fn route(req: &Req) -> Response {
    ROUTES
        .iter()
        .find_map(|route| route(req))
        .unwrap_or_else(not_found)
}

/// Refuses every method but GET and HEAD on the paths the resources after it serve.
fn read_only(req: &Req) -> Option<Response> {
    (!req.reads()).then(method_not_allowed)
}
