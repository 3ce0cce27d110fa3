//! The session service, its collection and sessions: logins and logouts.

use super::{
    Bmc, Req, collection, error, json_response, method_not_allowed, not_found, ok, status_ok,
    unauthorized,
};
use crate::{BmcState, Fault, Session};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Instant;

pub(super) const USUAL_SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

pub(super) fn route(r: &Req) -> Option<Response> {
    let b = r.b;
    if r.path == "/redfish/v1/SessionService" {
        return Some(ok(json!({
            "@odata.id": "/redfish/v1/SessionService",
            "@odata.type": "#SessionService.v1_1_8.SessionService",
            "Id": "SessionService",
            "Name": "Session Service",
            "ServiceEnabled": true,
            "SessionTimeout": b.spec.session_timeout.as_secs().clamp(30, 86400),
            "Status": status_ok(),
            "Sessions": {"@odata.id": sessions_uri(b)},
        })));
    }
    if r.path == USUAL_SESSIONS {
        return Some(match *r.method {
            Method::POST => create_session(b, r.body, r.fault),
            Method::GET | Method::HEAD => {
                let uri = sessions_uri(b);
                let ids: Vec<String> = b
                    .lock()
                    .sessions
                    .keys()
                    .map(|id| format!("{uri}/{id}"))
                    .collect();
                ok(collection(
                    uri,
                    "SessionCollection",
                    "Session Collection",
                    ids,
                ))
            }
            _ => method_not_allowed(),
        });
    }
    let id = r
        .path
        .strip_prefix(USUAL_SESSIONS)
        .and_then(|rest| rest.strip_prefix('/'))?;
    Some(session(r, id))
}

/// One session: read, or deleted (a logout).
fn session(r: &Req, id: &str) -> Response {
    let b = r.b;
    let Ok(id) = id.parse::<u64>() else {
        return not_found();
    };
    let mut g = b.lock();
    let Some(s) = g.sessions.get(&id).cloned() else {
        return not_found();
    };
    match *r.method {
        Method::DELETE => {
            g.sessions.remove(&id);
            b.counters.sessions_deleted.fetch_add(1, Ordering::Relaxed);
            StatusCode::NO_CONTENT.into_response()
        }
        Method::GET | Method::HEAD => ok(json!({
            "@odata.id": r.path,
            "@odata.type": "#Session.v1_6_0.Session",
            "Id": id.to_string(),
            "Name": "User Session",
            "UserName": s.user,
        })),
        _ => method_not_allowed(),
    }
}

fn create_session(b: &Bmc, body: Option<&Value>, fault: Option<&Fault>) -> Response {
    let user = body
        .and_then(|v| v.get("UserName"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let pass = body
        .and_then(|v| v.get("Password"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if fault == Some(&Fault::Unauthorized) || user != b.spec.username || pass != b.spec.password {
        return login_refused(b, body);
    }
    let mut g = b.lock();
    let now = Instant::now();
    let timeout = b.spec.session_timeout;
    g.sessions
        .retain(|_, s| now.duration_since(s.last_used) < timeout);
    if fault == Some(&Fault::SessionFull) || g.sessions.len() >= b.spec.max_sessions {
        drop(g);
        return session_limit(b);
    }
    let id = g.next_session;
    g.next_session += 1;
    let token: String = {
        let mut rng = rand::rng();
        (0..32)
            .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
            .collect()
    };
    g.sessions.insert(
        id,
        Session {
            token: token.clone(),
            user: user.clone(),
            last_used: now,
        },
    );
    let live = g.sessions.len() as u64;
    drop(g);
    b.counters.sessions_created.fetch_add(1, Ordering::Relaxed);
    b.counters.peak_sessions.fetch_max(live, Ordering::Relaxed);
    created(b, id, &token, &user)
}

/// A refused login: 401, or (quirk `echo_login_body`) a 400 whose message quotes the request.
fn login_refused(b: &Bmc, body: Option<&Value>) -> Response {
    b.counters.logins_refused.fetch_add(1, Ordering::Relaxed);
    if b.lock().quirks.echo_login_body {
        let quoted = body.map(Value::to_string).unwrap_or_default();
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyValueIncorrect",
            &format!("The login request {quoted} was not accepted."),
        );
    }
    unauthorized()
}

/// A login refused because the session table is full, in the vendor's words.
fn session_limit(b: &Bmc) -> Response {
    b.counters.logins_refused.fetch_add(1, Ordering::Relaxed);
    if b.profile.dell_session_limit_error {
        error(
            StatusCode::BAD_REQUEST,
            "IDRAC.2.9.RAC0218",
            "The maximum number of user sessions is reached.",
        )
    } else {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Base.1.8.SessionLimitExceeded",
            "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
        )
    }
}

/// The 201 of a session created: its token and location in the headers.
fn created(b: &Bmc, id: u64, token: &str, user: &str) -> Response {
    let path = format!("{}/{id}", sessions_uri(b));
    let location = if b.profile.absolute_session_location {
        // iLO answers with an absolute URL; the host part is whatever the client used.
        format!("https://bmc.invalid{path}")
    } else {
        path.clone()
    };
    let mut r = json_response(
        StatusCode::CREATED,
        &json!({
            "@odata.id": path,
            "@odata.type": "#Session.v1_6_0.Session",
            "Id": id.to_string(),
            "Name": "User Session",
            "UserName": user,
        }),
    );
    if let (Ok(t), Ok(l)) = (
        HeaderValue::from_str(token),
        HeaderValue::from_str(&location),
    ) {
        r.headers_mut().insert("X-Auth-Token", t);
        r.headers_mut().insert(header::LOCATION, l);
    }
    r
}

/// The session collection's URI as this BMC shows it.
pub(super) fn sessions_uri(b: &BmcState) -> &'static str {
    if b.lock().quirks.sessions_elsewhere {
        crate::MOVED_SESSIONS
    } else {
        USUAL_SESSIONS
    }
}
