//! The `/_sim/` admin endpoints: state, boot records, faults, session expiry, a BMC reset and log
//! entries.

use super::{Bmc, ok};
use crate::Fault;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(super) async fn handle(b: &Bmc, method: Method, path: &str, req: Request) -> Response {
    let body = axum::body::to_bytes(req.into_body(), 1 << 16)
        .await
        .unwrap_or_default();
    match (method, path.trim_end_matches('/')) {
        (Method::GET, "boots") => ok(serde_json::to_value(b.boots_report()).unwrap_or(Value::Null)),
        (Method::GET, "state") => ok(serde_json::to_value(b.snapshot()).unwrap_or(Value::Null)),
        (Method::PUT, "fault") => match serde_json::from_slice::<Fault>(&body) {
            Ok(f) => {
                b.set_fault(Some(f));
                StatusCode::NO_CONTENT.into_response()
            }
            Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        },
        (Method::DELETE, "fault") => {
            b.set_fault(None);
            StatusCode::NO_CONTENT.into_response()
        }
        (Method::POST, "reset") => {
            b.reset();
            StatusCode::NO_CONTENT.into_response()
        }
        (Method::POST, "expire-sessions") => {
            b.expire_sessions();
            StatusCode::NO_CONTENT.into_response()
        }
        (Method::POST, "log") => {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let id = b.add_log(
                v.get("severity")
                    .and_then(Value::as_str)
                    .unwrap_or("Warning"),
                v.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("Test event"),
            );
            ok(json!({"id": id}))
        }
        _ => (StatusCode::NOT_FOUND, Body::from("unknown admin endpoint")).into_response(),
    }
}
