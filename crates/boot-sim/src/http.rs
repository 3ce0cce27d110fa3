//! The booter's admin endpoints (loopback): the machines, and the NotReady/Ready knobs.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::{Booter, Error, NotReady};

pub fn router(booter: Booter) -> Router {
    Router::new()
        .route("/machines", get(list))
        .route("/machines/{key}", get(one))
        .route("/machines/{key}/not-ready", post(not_ready))
        .route("/machines/{key}/ready", post(ready))
        .with_state(booter)
}

async fn list(State(b): State<Booter>) -> Response {
    axum::Json(json!({ "machines": b.machines() })).into_response()
}

async fn one(State(b): State<Booter>, Path(key): Path<String>) -> Response {
    match b.machine(&key) {
        Some(m) => axum::Json(m).into_response(),
        None => error(&Error::UnknownMachine(key)),
    }
}

#[derive(Deserialize)]
struct NotReadyQuery {
    status: Option<String>,
}

async fn not_ready(
    State(b): State<Booter>,
    Path(key): Path<String>,
    Query(q): Query<NotReadyQuery>,
) -> Response {
    let how = match q.status.as_deref() {
        None | Some("Unknown") | Some("unknown") => NotReady::Unknown,
        Some("False") | Some("false") => NotReady::False,
        Some(other) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": format!("status {other:?}: use False or Unknown")})),
            )
                .into_response();
        }
    };
    reply(b.set_not_ready(&key, how).await)
}

async fn ready(State(b): State<Booter>, Path(key): Path<String>) -> Response {
    reply(b.set_ready(&key).await)
}

fn reply(r: Result<crate::MachineStatus, Error>) -> Response {
    match r {
        Ok(m) => axum::Json(m).into_response(),
        Err(e) => error(&e),
    }
}

fn error(e: &Error) -> Response {
    let status = match e {
        Error::UnknownMachine(_) => StatusCode::NOT_FOUND,
        Error::NotJoined(_) => StatusCode::CONFLICT,
        _ => StatusCode::BAD_GATEWAY,
    };
    (status, axum::Json(json!({"error": e.to_string()}))).into_response()
}
