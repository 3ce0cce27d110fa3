//! Server-sent events where a BMC refuses push: an Inventory whose BMC takes no subscription
//! but offers the EventService's stream (`ServerSentEventUri`) has that stream followed, one
//! per Inventory, and each event read from it wakes the Inventory as a pushed one does
//! ([`super::push::wake`]). The poll stays the truth.
//!
//! - Bounded: at most `--events-max-streams` held at once, in a map keyed by Inventory.
//! - Each stream holds its own connection: the BMC's session-manager permits are taken only
//!   while it is opened, so the polls never wait on it.
//! - A dropped stream is opened again after 1 s, doubling to 30 s (as `ingot bmc events`),
//!   with `Last-Event-ID` when the BMC gave ids.
//! - Stopped when push is accepted, the events are disabled, the Inventory is deleted, or the
//!   Seeder controller stops (this replica no longer leads: [`StopOnDrop`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use ingot_api::seeder::Inventory;
use ingot_bmc::manager::ManagedBmc;
use ingot_bmc::{Bmc, BmcError, PushedEvents};
use kube::ResourceExt;
use prometheus_client::metrics::gauge::Gauge;
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

use super::{SeederContext, push};
use crate::rufio::bmcs::error_chain;

/// `--events-max-streams`' default.
pub const DEFAULT_MAX_STREAMS: usize = 1000;
/// First wait before a dropped stream is opened again; doubled after each failed attempt.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One followed stream: its task, and which start it is (so that a task ending on its own
/// never removes a newer one).
struct Held {
    task: AbortHandle,
    generation: u64,
}

/// The streams held, by Inventory (`namespace/name`).
pub struct Streams {
    max: usize,
    held: Mutex<HashMap<String, Held>>,
    next: std::sync::atomic::AtomicU64,
    gauge: Gauge,
}

/// Whether the Inventory's BMC stream is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// Started now.
    Started,
    /// Held already.
    Held,
    /// Not started: `--events-max-streams` (this many) are held.
    Full(usize),
    /// Not followed: the BMC offers no stream, or opening it failed.
    No,
}

impl Streams {
    pub fn new(max: usize, gauge: Gauge) -> Self {
        Streams {
            max,
            held: Mutex::default(),
            next: std::sync::atomic::AtomicU64::new(0),
            gauge,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn holds(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    fn full(&self) -> bool {
        self.lock().len() >= self.max
    }

    /// Holds `task` for `key` if there is room (else aborts it); its generation.
    fn insert(&self, key: &str, task: AbortHandle) -> Option<u64> {
        let mut held = self.lock();
        if held.len() >= self.max && !held.contains_key(key) {
            task.abort();
            return None;
        }
        let generation = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(old) = held.insert(key.to_owned(), Held { task, generation }) {
            old.task.abort();
        }
        self.gauge.set(held.len() as i64);
        Some(generation)
    }

    /// Stops the Inventory's stream, if one is held.
    pub fn stop(&self, key: &str) {
        let mut held = self.lock();
        if let Some(h) = held.remove(key) {
            h.task.abort();
            info!(inventory = %key, "event stream closed");
        }
        self.gauge.set(held.len() as i64);
    }

    /// Forgets a stream whose task ended on its own.
    fn ended(&self, key: &str, generation: u64) {
        let mut held = self.lock();
        if held.get(key).is_some_and(|h| h.generation == generation) {
            held.remove(key);
        }
        self.gauge.set(held.len() as i64);
    }

    /// Stops every stream (the Seeder controller stops).
    pub fn stop_all(&self) {
        let mut held = self.lock();
        for (_, h) in held.drain() {
            h.task.abort();
        }
        self.gauge.set(0);
    }
}

/// Stops every stream when dropped: held by the Seeder controller's run, so that a replica
/// that stops leading (its controllers aborted) or shuts down holds none.
pub(crate) struct StopOnDrop(pub(crate) Arc<SeederContext>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.streams.stop_all();
    }
}

/// Follows the BMC's stream for the Inventory (push refused), unless one is held already or
/// `--events-max-streams` are.
pub(crate) async fn follow(
    inventory: &Inventory,
    bmc: &ManagedBmc,
    ctx: &Arc<SeederContext>,
) -> Followed {
    let key = push::key_of(inventory);
    if ctx.streams.holds(&key) {
        return Followed::Held;
    }
    if ctx.streams.full() {
        return Followed::Full(ctx.streams.max);
    }
    let (Some(namespace), Some(uid)) = (inventory.namespace(), inventory.uid()) else {
        return Followed::No;
    };
    let stream = match bmc.pushed_events(None).await {
        Ok(s) => s,
        Err(e) => {
            debug!(inventory = %key, error = %error_chain(&e), "no event stream either");
            return Followed::No;
        }
    };
    let target = Target {
        key: key.clone(),
        namespace,
        name: inventory.name_any(),
        uid,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(run(target, bmc.clone(), stream, Arc::clone(ctx), rx));
    match ctx.streams.insert(&key, task.abort_handle()) {
        Some(generation) => {
            let _ = tx.send(generation);
            info!(inventory = %key, "following the BMC's event stream");
            Followed::Started
        }
        None => Followed::Full(ctx.streams.max),
    }
}

/// Whose stream a task follows.
struct Target {
    key: String,
    namespace: String,
    name: String,
    uid: String,
}

/// Why a stream's task ended on its own.
enum End {
    /// The Inventory is gone (or another of the same name was made).
    Gone,
    /// The BMC no longer offers the stream.
    NotOffered(String),
}

async fn run(
    target: Target,
    bmc: ManagedBmc,
    stream: PushedEvents,
    ctx: Arc<SeederContext>,
    generation: tokio::sync::oneshot::Receiver<u64>,
) {
    // Held only once the map took it (else it is aborted before this).
    let Ok(generation) = generation.await else {
        return;
    };
    let end = read(&target, &bmc, stream, &ctx).await;
    match end {
        End::Gone => info!(inventory = %target.key, "event stream closed: the Inventory is gone"),
        End::NotOffered(why) => warn!(
            inventory = %target.key, error = %why,
            "the BMC no longer offers its event stream; the next poll tries again"
        ),
    }
    ctx.streams.ended(&target.key, generation);
}

/// Reads the stream, opening it again after each drop, until it ends for good.
async fn read(target: &Target, bmc: &ManagedBmc, stream: PushedEvents, ctx: &SeederContext) -> End {
    let mut stream = stream;
    let mut last_id: Option<String> = None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let why = loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    if event.id.is_some() {
                        last_id.clone_from(&event.id);
                    }
                    if !take(target, &event.data, ctx) {
                        return End::Gone;
                    }
                    backoff = FIRST_BACKOFF;
                }
                Some(Err(e)) => break error_chain(&e),
                None => break "the stream ended".to_owned(),
            }
        };
        warn!(inventory = %target.key, error = %why, "the event stream dropped; reconnecting in {}s", backoff.as_secs());
        stream = loop {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            match bmc.pushed_events(last_id.clone()).await {
                Ok(s) => {
                    info!(inventory = %target.key, last_event_id = ?last_id, "event stream reconnected");
                    break s;
                }
                Err(e @ BmcError::Unsupported(_)) => return End::NotOffered(error_chain(&e)),
                Err(e) => {
                    warn!(inventory = %target.key, error = %error_chain(&e), "reconnecting the event stream failed; retrying in {}s", backoff.as_secs());
                }
            }
        };
    }
}

/// One event read from the stream: taken as a pushed one. `false` when the Inventory is gone.
fn take(target: &Target, event: &serde_json::Value, ctx: &SeederContext) -> bool {
    let inventory = match ctx.inventory(&target.namespace, &target.name) {
        Ok(Some(i)) => i,
        Ok(None) => return false,
        // The store is not read yet: the poll reads what this event is about.
        Err(()) => return true,
    };
    if inventory.uid().as_deref() != Some(target.uid.as_str()) {
        return false;
    }
    push::wake(ctx, &inventory, event);
    ctx.metrics
        .seeder_events_accepted
        .get_or_create(&crate::metrics::SourceLabels {
            source: push::SOURCE_STREAM,
        })
        .inc();
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_map_is_bounded_and_a_late_end_keeps_a_newer_stream() {
        let gauge = Gauge::default();
        let streams = Streams::new(2, gauge.clone());
        let task = || tokio::spawn(std::future::pending::<()>());
        let a = task();
        let ga = streams.insert("ns/a", a.abort_handle()).unwrap();
        assert!(streams.insert("ns/b", task().abort_handle()).is_some());
        assert_eq!(gauge.get(), 2);
        let c = task();
        assert_eq!(streams.insert("ns/c", c.abort_handle()), None);
        assert!(
            c.await.unwrap_err().is_cancelled(),
            "beyond the bound: aborted"
        );
        assert!(streams.full());

        // A new start for `a` replaces (aborts) the old; the old task's end keeps the new.
        let a2 = task();
        let ga2 = streams.insert("ns/a", a2.abort_handle()).unwrap();
        assert!(a.await.unwrap_err().is_cancelled());
        streams.ended("ns/a", ga);
        assert!(streams.holds("ns/a"));
        streams.ended("ns/a", ga2);
        assert!(!streams.holds("ns/a"));
        assert_eq!(gauge.get(), 1);

        streams.stop("ns/b");
        assert!(!streams.holds("ns/b"));
        assert_eq!(gauge.get(), 0);
        streams.insert("ns/d", a2.abort_handle()).unwrap();
        streams.stop_all();
        assert!(a2.await.unwrap_err().is_cancelled());
        assert_eq!(gauge.get(), 0);
    }
}
