//! Delivery of events to push subscriptions: one task per subscription POSTs its events in
//! order to its `Destination`, retries a failed delivery [`EventKnobs::delivery_retry_attempts`]
//! times [`EventKnobs::delivery_retry_interval`] apart, then terminates the subscription.

use crate::{BmcState, EventKnobs};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

/// Events waiting for one subscription; more are dropped (as a BMC's bounded queue does).
const QUEUE: usize = 64;

/// The HTTP client of every delivery: self-signed certificates accepted, as BMCs do.
fn client() -> Option<&'static reqwest::Client> {
    static CLIENT: OnceLock<Option<reqwest::Client>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .pool_idle_timeout(Duration::from_secs(30))
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .tls_danger_accept_invalid_certs(true)
                .build()
                .ok()
        })
        .as_ref()
}

/// Starts the delivery task of subscription `id`: what it is sent is delivered.
pub(crate) fn start(b: &Arc<BmcState>, id: u64) -> mpsc::Sender<String> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let weak = Arc::downgrade(b);
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(run(weak, id, rx));
    }
    tx
}

/// Where subscription `id` is delivered, with which headers.
type Target = (String, Vec<(String, String)>);

/// Where and how subscription `id` is delivered now, with the knobs (`None`: it is gone).
fn target(b: &BmcState, id: u64) -> Option<(Target, EventKnobs)> {
    let g = b.lock();
    let s = g.subscriptions.get(&id)?;
    Some((
        (s.destination.clone(), s.headers.clone()),
        g.event_knobs.clone(),
    ))
}

async fn run(b: Weak<BmcState>, id: u64, mut rx: mpsc::Receiver<String>) {
    while let Some(body) = rx.recv().await {
        let mut failures = 0u32;
        loop {
            let Some(state) = b.upgrade() else { return };
            let Some(((destination, headers), knobs)) = target(&state, id) else {
                return;
            };
            drop(state);
            if post(&destination, &headers, &body, knobs.delivery_timeout).await {
                if let Some(state) = b.upgrade() {
                    state
                        .counters
                        .events_delivered
                        .fetch_add(1, Ordering::Relaxed);
                }
                break;
            }
            let Some(state) = b.upgrade() else { return };
            state
                .counters
                .event_delivery_failures
                .fetch_add(1, Ordering::Relaxed);
            if failures >= knobs.delivery_retry_attempts {
                let mut g = state.lock();
                if g.subscriptions.remove(&id).is_some() {
                    g.terminated_subscriptions += 1;
                }
                tracing::info!(
                    bmc = state.index,
                    id,
                    "subscription terminated after failed deliveries"
                );
                return;
            }
            failures += 1;
            drop(state);
            tokio::time::sleep(knobs.delivery_retry_interval).await;
        }
    }
}

/// One delivery: true when the destination answered 2xx within the timeout.
async fn post(
    destination: &str,
    headers: &[(String, String)],
    body: &str,
    timeout: Duration,
) -> bool {
    let Some(client) = client() else { return false };
    let mut req = client
        .post(destination)
        .timeout(timeout)
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    match req.send().await {
        Ok(r) => r.status().is_success(),
        Err(_) => false,
    }
}
