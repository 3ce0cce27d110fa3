//! Push subscriptions (Redfish `EventDestination`): ours found by `Destination` + `Context`,
//! created when missing (our stale copies at the same `Destination` deleted first), deleted. The
//! create sends only what every vendor takes: no `DeliveryRetryPolicy` and no empty `ResourceTypes`
//! (iLO and iDRAC refuse them).

use super::RedfishClient;
use super::json::{link, string};
use crate::error::BmcError;
use crate::types::{EventSubscription, StaleContext, Subscribed, no_stale_context};
use reqwest::Method;
use serde_json::{Map, Value, json};

/// Subscriptions read at most when looking for ours (BMCs hold a handful; Dell OME 8).
pub const MAX_SUBSCRIPTIONS_READ: usize = 64;

impl RedfishClient {
    /// The subscription collection's URI; [`BmcError::Unsupported`] without an EventService,
    /// with one disabled, or without subscriptions.
    async fn subscriptions_uri(&self) -> Result<String, BmcError> {
        let service = self.enabled_event_service("push subscriptions").await?;
        link(&service, "Subscriptions")
            .ok_or_else(|| BmcError::Unsupported("push subscriptions".into()))
    }

    /// The URIs of the subscriptions at this destination: those with this context, and those
    /// whose context `stale` takes (another).
    async fn matching(
        &self,
        uri: &str,
        destination: &str,
        context: &str,
        stale: StaleContext<'_>,
    ) -> Result<(Vec<String>, Vec<String>), BmcError> {
        let members = self.members_up_to(uri, MAX_SUBSCRIPTIONS_READ).await?;
        let (mut ours, mut old) = (Vec::new(), Vec::new());
        for m in &members {
            if string(m, "Destination").as_deref() != Some(destination) {
                continue;
            }
            let (Some(c), Some(id)) = (string(m, "Context"), string(m, "@odata.id")) else {
                continue;
            };
            if c == context {
                ours.push(id);
            } else if stale(&c) {
                old.push(id);
            }
        }
        Ok((ours, old))
    }

    /// Deletes these subscriptions (one already gone counts as deleted).
    async fn delete_all(&self, uris: &[String]) -> Result<(), BmcError> {
        for m in uris {
            match self.request(Method::DELETE, m, None, &[]).await {
                Ok(_) | Err(BmcError::Http { status: 404, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub(super) async fn ensure_subscription(
        &self,
        s: &EventSubscription,
        stale: StaleContext<'_>,
    ) -> Result<Subscribed, BmcError> {
        let uri = self.subscriptions_uri().await?;
        let (ours, old) = self
            .matching(&uri, &s.destination, &s.context, stale)
            .await?;
        // The stale ones first: on a full BMC they hold the slot ours needs.
        self.delete_all(&old).await?;
        if let Some(found) = ours.into_iter().next() {
            return Ok(Subscribed::Found(found));
        }
        let headers: Map<String, Value> = s
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.expose().to_owned())))
            .collect();
        let body = json!({
            "Destination": s.destination,
            "Protocol": "Redfish",
            "Context": s.context,
            "EventFormatType": "Event",
            "HttpHeaders": headers,
        });
        let resp = self
            .request(Method::POST, &uri, Some(&body), &[])
            .await
            .map_err(|e| scrub(e, s))?;
        let created = resp
            .header("Location")
            .or_else(|| resp.json().ok().and_then(|v| string(&v, "@odata.id")))
            .unwrap_or(uri);
        Ok(Subscribed::Created(created))
    }

    pub(super) async fn remove_subscription(
        &self,
        destination: &str,
        context: &str,
    ) -> Result<usize, BmcError> {
        let uri = self.subscriptions_uri().await?;
        let (ours, _) = self
            .matching(&uri, destination, context, &no_stale_context)
            .await?;
        self.delete_all(&ours).await?;
        Ok(ours.len())
    }
}

/// A refused create's error without the header values, should the BMC quote the request.
fn scrub(e: BmcError, s: &EventSubscription) -> BmcError {
    match e {
        BmcError::Http {
            status,
            method,
            path,
            message,
        } => BmcError::Http {
            status,
            method,
            path,
            message: message.map(|m| {
                if s.headers
                    .iter()
                    .any(|(_, v)| !v.is_empty() && m.contains(v.expose()))
                {
                    "(the BMC's message quoted the request; not shown)".to_owned()
                } else {
                    m
                }
            }),
        },
        e => e,
    }
}
