//! The event service and its server-sent event stream (its subscriptions: `subscriptions`).

use super::{Bmc, Req, ok, status_ok};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use std::convert::Infallible;
use std::time::Duration;
use tokio_stream::wrappers::BroadcastStream;

pub(super) fn route(r: &Req) -> Option<Response> {
    let (no_sse, disabled, knobs) = {
        let g = r.b.lock();
        (
            g.quirks.no_server_sent_events,
            g.quirks.event_service_disabled,
            g.event_knobs.clone(),
        )
    };
    Some(match r.path {
        "/redfish/v1/EventService" if no_sse => ok(json!({
            "@odata.id": "/redfish/v1/EventService",
            "@odata.type": "#EventService.v1_10_0.EventService",
            "Id": "EventService",
            "Name": "Event Service",
            "ServiceEnabled": true,
            "DeliveryRetryAttempts": knobs.delivery_retry_attempts,
            "DeliveryRetryIntervalSeconds": knobs.delivery_retry_interval.as_secs(),
            "Status": status_ok(),
            "Subscriptions": {"@odata.id": "/redfish/v1/EventService/Subscriptions"},
        })),
        "/redfish/v1/EventService/SSE" if no_sse => return None,
        "/redfish/v1/EventService" => ok(json!({
            "@odata.id": "/redfish/v1/EventService",
            "@odata.type": "#EventService.v1_10_0.EventService",
            "Id": "EventService",
            "Name": "Event Service",
            "ServiceEnabled": !disabled,
            "DeliveryRetryAttempts": knobs.delivery_retry_attempts,
            "DeliveryRetryIntervalSeconds": knobs.delivery_retry_interval.as_secs(),
            "ServerSentEventUri": "/redfish/v1/EventService/SSE",
            "Status": status_ok(),
            "Subscriptions": {"@odata.id": "/redfish/v1/EventService/Subscriptions"},
        })),
        "/redfish/v1/EventService/SSE" => {
            let last = r
                .headers
                .get("last-event-id")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            r.b.lock().stream_opens.push(last);
            sse(r.b)
        }
        _ => return None,
    })
}

/// Each event carries its `Id` as the SSE id; the stream ends when the BMC drops its streams.
fn sse(b: &Bmc) -> Response {
    let rx = b.events.subscribe();
    let mut epoch = b.stream_epoch.subscribe();
    let dropped = async move {
        let _ = epoch.changed().await;
    };
    let stream = BroadcastStream::new(rx)
        .filter_map(|m| async move {
            m.ok().map(|data| {
                let id = serde_json::from_str::<serde_json::Value>(&data)
                    .ok()
                    .and_then(|v| v.get("Id").and_then(|i| i.as_str().map(str::to_owned)));
                let event = Event::default().data(data);
                Ok::<Event, Infallible>(match id {
                    Some(id) => event.id(id),
                    None => event,
                })
            })
        })
        .take_until(dropped);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
