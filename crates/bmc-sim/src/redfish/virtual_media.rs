//! The virtual media collection, its devices and their insert and eject actions.

use super::{Req, collection, error, method_not_allowed, not_found, ok};
use crate::media;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The virtual media collection, its devices and their actions (`None`: another path).
pub(super) fn route(r: &Req) -> Option<Response> {
    let (b, method, path, body) = (r.b, r.method, r.path, r.body);
    let coll = media::collection_path(b);
    let rest = path.strip_prefix(coll.as_str())?;
    let get = *method == Method::GET || *method == Method::HEAD;
    if rest.is_empty() {
        if !get {
            return Some(method_not_allowed());
        }
        let members = b
            .profile
            .media
            .devices
            .iter()
            .map(|(id, _)| format!("{coll}/{id}"))
            .collect();
        return Some(ok(collection(
            &coll,
            "VirtualMediaCollection",
            "Virtual Media Services",
            members,
        )));
    }
    let rest = rest.strip_prefix('/')?;
    let (id, action) = match rest.split_once("/Actions/") {
        Some((id, action)) => (id, Some(action)),
        None => (rest, None),
    };
    let index = b.profile.media.devices.iter().position(|(d, _)| *d == id)?;
    let empty = json!({});
    let body = body.unwrap_or(&empty);
    let outcome = match (action, method.clone()) {
        (None, Method::GET | Method::HEAD) => return Some(ok(media::device(b, index))),
        (None, Method::PATCH) => media::patch(b, index, body),
        (Some(_), m) if m != Method::POST => return Some(method_not_allowed()),
        (Some("VirtualMedia.InsertMedia"), _)
            if b.profile.media.insert != media::MediaInsert::Patch =>
        {
            media::insert(b, index, body)
        }
        (Some("VirtualMedia.EjectMedia"), _)
            if b.profile.media.insert != media::MediaInsert::Patch =>
        {
            media::eject(b, index)
        }
        (Some(_), _) => return Some(not_found()),
        (None, _) => return Some(method_not_allowed()),
    };
    Some(match outcome {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err((status, id, message)) => error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            id,
            message,
        ),
    })
}
