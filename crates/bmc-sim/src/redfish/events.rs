//! The event service, its (empty) subscriptions and its server-sent event stream.

use super::{Bmc, Req, collection, ok, status_ok};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use std::convert::Infallible;
use std::time::Duration;
use tokio_stream::wrappers::BroadcastStream;

pub(super) fn route(r: &Req) -> Option<Response> {
    Some(match r.path {
        "/redfish/v1/EventService" => ok(json!({
            "@odata.id": "/redfish/v1/EventService",
            "@odata.type": "#EventService.v1_10_0.EventService",
            "Id": "EventService",
            "Name": "Event Service",
            "ServiceEnabled": true,
            "DeliveryRetryAttempts": 3,
            "DeliveryRetryIntervalSeconds": 30,
            "ServerSentEventUri": "/redfish/v1/EventService/SSE",
            "Status": status_ok(),
            "Subscriptions": {"@odata.id": "/redfish/v1/EventService/Subscriptions"},
        })),
        "/redfish/v1/EventService/Subscriptions" => ok(collection(
            r.path,
            "EventDestinationCollection",
            "Event Subscriptions",
            vec![],
        )),
        "/redfish/v1/EventService/SSE" => sse(r.b),
        _ => return None,
    })
}

fn sse(b: &Bmc) -> Response {
    let rx = b.events.subscribe();
    let stream = BroadcastStream::new(rx).filter_map(|m| async move {
        m.ok()
            .map(|data| Ok::<Event, Infallible>(Event::default().data(data)))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
