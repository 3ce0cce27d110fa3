//! What the client reports about its calls, for metrics. The client knows nothing of Prometheus:
//! the operator injects an [`Observer`] (see [`super::equinix::EquinixClient::with_observer`]).

use std::sync::Arc;
use std::time::Duration;

/// Receives one report per API call, retry, 429 answer and rate-limiter wait. Operations are
/// the OpenAPI operation ids of the Metal API (`createDevice`, `findDeviceById`, ...), outcomes
/// `ok` or an [`crate::Error::kind`]: both are low-cardinality.
pub trait MetalObserver: Send + Sync {
    /// A call ended (after its retries) with `outcome`, `took` including retries and waits.
    fn call(&self, operation: &'static str, outcome: &'static str, took: Duration) {
        let _ = (operation, outcome, took);
    }

    /// An attempt failed with `reason` (an error kind) and is sent again.
    fn retry(&self, operation: &'static str, reason: &'static str) {
        let _ = (operation, reason);
    }

    /// The API answered 429 Too Many Requests.
    fn rate_limited(&self, operation: &'static str) {
        let _ = operation;
    }

    /// A request was held by the client-side rate limiter (its own rate, or a pause the API
    /// asked for with `Retry-After` or `X-RateLimit-Remaining: 0`) for `waited`.
    fn rate_limit_wait(&self, waited: Duration) {
        let _ = waited;
    }
}

/// A shared observer, or none.
#[derive(Clone, Default)]
pub struct Observer(Option<Arc<dyn MetalObserver>>);

impl Observer {
    pub fn new(observer: Arc<dyn MetalObserver>) -> Self {
        Observer(Some(observer))
    }

    pub(crate) fn get(&self) -> Option<&dyn MetalObserver> {
        self.0.as_deref()
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(Some)"
        } else {
            "Observer(None)"
        })
    }
}
