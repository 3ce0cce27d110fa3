//! Push events: each local Inventory with `spec.events.enabled` gets a Redfish EventService
//! subscription on its BMC (ensured at every hardware poll, removed when the Inventory goes or
//! its events are disabled), and the events its BMC POSTs to the operator's receiver wake that
//! Inventory's hardware poll at once (whose Node Events are de-duplicated as a poll's always
//! are), and a power event its Machine's power read. The poll stays the truth at its interval.
//!
//! Each subscription carries a secret header, `HMAC-SHA256(operator key, Inventory uid)`: never
//! stored in the cluster, compared in constant time by the receiver. Its `Context` names the
//! Inventory and the operator key (`ingot:<namespace>/<name>:<key id>`), so that a
//! subscription made under another key is not taken for ours: it is deleted from the BMC when
//! ours is ensured, and ours made.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hmac::{Hmac, Mac};
use ingot_api::seeder::Inventory;
use ingot_bmc::{Bmc, BmcError, EventSubscription, Password, Subscribed};
use kube::ResourceExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use sha2::Sha256;
use tracing::{info, warn};

use super::streams::{self, Followed};
use super::{SeederContext, node_health};
use crate::Metrics;
use crate::metrics::{ReasonLabels, SourceLabels};
use crate::rufio::bmcs::error_chain;

/// The header each event must carry: the Inventory's secret.
pub const SECRET_HEADER: &str = "X-Ingot-Event-Secret";
/// The largest event body taken (a Redfish event is a few KiB).
pub const MAX_EVENT_BYTES: usize = 64 * 1024;
const CONTEXT_PREFIX: &str = "ingot:";
/// `ingot_seeder_events_accepted_total{source}`: POSTed to the receiver, or read from a BMC's
/// server-sent event stream.
pub const SOURCE_PUSH: &str = "push";
pub const SOURCE_STREAM: &str = "sse";

/// Where the BMCs reach the receiver, and the key the secrets derive from.
#[derive(Clone)]
pub struct PushSettings {
    /// The receiver's URL as the BMCs reach it (`https://...`).
    pub url: String,
    key: Vec<u8>,
    /// Server-sent event streams held at once, for BMCs that refuse push
    /// (`--events-max-streams`).
    pub max_streams: usize,
}

impl std::fmt::Debug for PushSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushSettings")
            .field("url", &self.url)
            .field("key", &"<redacted>")
            .field("max_streams", &self.max_streams)
            .finish()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl PushSettings {
    pub fn new(url: String, key: Vec<u8>) -> Self {
        PushSettings {
            url,
            key,
            max_streams: streams::DEFAULT_MAX_STREAMS,
        }
    }

    /// At most `n` server-sent event streams held at once.
    pub fn with_max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        // HMAC takes a key of any length.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return Vec::new();
        };
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes().to_vec()
    }

    /// A short public name of the key (in every `Context`).
    pub fn key_id(&self) -> String {
        hex(&self.mac(&[b"ingot push key id"])[..4])
    }

    /// The `Context` of the Inventory's subscription.
    pub fn context(&self, inventory: &Inventory) -> String {
        format!(
            "{CONTEXT_PREFIX}{}/{}:{}",
            inventory.namespace().unwrap_or_default(),
            inventory.name_any(),
            self.key_id()
        )
    }

    /// Whether `context` is the Inventory's under another key: a subscription made before the
    /// key changed, whose events are refused (deleted when ours is ensured).
    pub fn stale_context(&self, inventory: &Inventory, context: &str) -> bool {
        parse_context(context).is_some_and(|(namespace, name, key_id)| {
            inventory.namespace().as_deref() == Some(namespace)
                && inventory.name_any() == name
                && key_id != self.key_id()
        })
    }

    /// The Inventory's secret header value (from its uid).
    fn secret(&self, uid: &str) -> String {
        hex(&self.mac(&[b"inventory\0", uid.as_bytes()]))
    }

    /// The Inventory's subscription (`None` before it has a uid).
    pub fn subscription(&self, inventory: &Inventory) -> Option<EventSubscription> {
        let uid = inventory.uid()?;
        Some(EventSubscription {
            destination: self.url.clone(),
            context: self.context(inventory),
            headers: vec![(SECRET_HEADER.to_owned(), Password::new(self.secret(&uid)))],
        })
    }
}

/// `(namespace, name, key id)` of a `Context` of ours.
pub fn parse_context(context: &str) -> Option<(&str, &str, &str)> {
    let rest = context.strip_prefix(CONTEXT_PREFIX)?;
    let (object, key_id) = rest.rsplit_once(':')?;
    let (namespace, name) = object.split_once('/')?;
    (!name.is_empty() && !key_id.is_empty()).then_some((namespace, name, key_id))
}

/// Equal, in a time that does not depend on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a Redfish event says the power changed: a `MessageId` about power
/// (`ResourcePowerStateChanged`, `PowerStateChanged`, `SystemPowerOn`...), or a status change of
/// a ComputerSystem.
pub fn power_related(event: &Value) -> bool {
    let id = event.get("MessageId").and_then(Value::as_str).unwrap_or("");
    let origin = event
        .pointer("/OriginOfCondition/@odata.id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let system = origin
        .strip_prefix("/redfish/v1/Systems/")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
    id.contains("Power") || (system && id.ends_with("ResourceStatusChanged"))
}

/// Why an event was refused; `reason()` is the metric label (a fixed set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The body is larger than [`MAX_EVENT_BYTES`].
    TooLarge,
    /// Not a Redfish event with a `Context`.
    Malformed(String),
    /// The `Context` names no Inventory of ours (or another key's).
    UnknownContext,
    /// The secret header is missing or wrong.
    Unauthenticated,
    /// This replica does not lead (the Seeder controller does not run here), or has not read
    /// the Inventories yet.
    NotLeading,
}

impl Refused {
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::TooLarge => "too_large",
            Refused::Malformed(_) => "malformed",
            Refused::UnknownContext => "unknown_context",
            Refused::Unauthenticated => "unauthenticated",
            Refused::NotLeading => "not_leading",
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            Refused::TooLarge => 413,
            Refused::Malformed(_) => 400,
            Refused::UnknownContext => 404,
            Refused::Unauthenticated => 401,
            Refused::NotLeading => 503,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refused::TooLarge => format!("an event body is at most {MAX_EVENT_BYTES} bytes"),
            Refused::Malformed(why) => why.clone(),
            Refused::UnknownContext => "no subscription of this operator has this Context".into(),
            Refused::Unauthenticated => format!("the {SECRET_HEADER} header is missing or wrong"),
            Refused::NotLeading => {
                "this replica does not lead, or has not read the Inventories yet; the BMC retries"
                    .into()
            }
        }
    }
}

/// The receiver's side in the controllers: checks an event and wakes what it concerns.
pub struct Receiver {
    pub settings: Arc<PushSettings>,
    metrics: Arc<Metrics>,
    seeder: OnceLock<Arc<SeederContext>>,
}

impl Receiver {
    pub fn new(settings: Arc<PushSettings>, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Receiver {
            settings,
            metrics,
            seeder: OnceLock::new(),
        })
    }

    /// The Seeder controller started (this replica leads): events are taken from now on.
    pub fn attach(&self, seeder: Arc<SeederContext>) {
        let _ = self.seeder.set(seeder);
    }

    /// Counts a refusal (the HTTP layer's too, such as a body too large).
    pub fn count_refused(&self, refused: &Refused) {
        self.metrics
            .seeder_events_refused
            .get_or_create(&ReasonLabels {
                reason: refused.reason(),
            })
            .inc();
    }

    /// One POSTed event body with the secret header it came with.
    pub fn receive(&self, secret: Option<&[u8]>, body: &[u8]) -> Result<(), Refused> {
        let result = self.check_and_wake(secret, body);
        match &result {
            Ok(()) => {
                self.metrics
                    .seeder_events_accepted
                    .get_or_create(&SourceLabels {
                        source: SOURCE_PUSH,
                    })
                    .inc();
            }
            Err(refused) => self.count_refused(refused),
        }
        result
    }

    fn check_and_wake(&self, secret: Option<&[u8]>, body: &[u8]) -> Result<(), Refused> {
        if body.len() > MAX_EVENT_BYTES {
            return Err(Refused::TooLarge);
        }
        let event: Value = serde_json::from_slice(body)
            .map_err(|e| Refused::Malformed(format!("the body is not JSON ({e})")))?;
        let context = event
            .get("Context")
            .and_then(Value::as_str)
            .ok_or_else(|| Refused::Malformed("the event has no Context".into()))?;
        let (namespace, name, key_id) = parse_context(context).ok_or(Refused::UnknownContext)?;
        if key_id != self.settings.key_id() {
            return Err(Refused::UnknownContext);
        }
        let seeder = self.seeder.get().ok_or(Refused::NotLeading)?;
        // Until the Inventories are read, an unknown one may only be not yet seen: the BMC
        // retries.
        let inventory = seeder
            .inventory(namespace, name)
            .map_err(|()| Refused::NotLeading)?
            .ok_or(Refused::UnknownContext)?;
        let uid = inventory.uid().ok_or(Refused::UnknownContext)?;
        let expected = self.settings.secret(&uid);
        if !secret.is_some_and(|s| constant_time_eq(s, expected.as_bytes())) {
            return Err(Refused::Unauthenticated);
        }
        let power = wake(seeder, &inventory, &event);
        tracing::debug!(inventory = %format!("{namespace}/{name}"), power, "pushed event taken");
        Ok(())
    }
}

/// Wakes what a Redfish event concerns: the Inventory's hardware read now, and its Machine's
/// power read for an event about power. Whether it was about power.
pub(crate) fn wake(seeder: &SeederContext, inventory: &Inventory, event: &Value) -> bool {
    seeder.wake_hardware(inventory);
    let power = event
        .get("Events")
        .and_then(Value::as_array)
        .is_some_and(|events| events.iter().any(power_related));
    if power {
        let namespace = inventory.namespace().unwrap_or_default();
        seeder
            .rufio
            .wake_machine(ObjectRef::new(&inventory.name_any()).within(&namespace));
    }
    power
}

pub(crate) fn key_of(inventory: &Inventory) -> String {
    format!(
        "{}/{}",
        inventory.namespace().unwrap_or_default(),
        inventory.name_any()
    )
}

/// Makes sure the Inventory's BMC holds its subscription (at each poll). An Event on the
/// Inventory says when one was created, and when the BMC refuses one (once per new refusal:
/// nothing is written while it stays refused the same way, or holds). A BMC that refuses push
/// but offers server-sent events has its stream followed instead ([`streams`]); one that takes
/// push again has it closed.
pub(crate) async fn ensure(inventory: &Inventory, interval: Duration, ctx: &Arc<SeederContext>) {
    let Some(settings) = &ctx.settings.push else {
        return;
    };
    let Some(subscription) = settings.subscription(inventory) else {
        return;
    };
    let key = key_of(inventory);
    let bmc = match node_health::reach(inventory, ctx).await {
        Ok(bmc) => bmc,
        Err(why) => {
            let followed = held(&key, ctx);
            return say(inventory, interval, Some((why, followed)), ctx).await;
        }
    };
    let stale = |context: &str| settings.stale_context(inventory, context);
    let refusal = match bmc.ensure_event_subscription(&subscription, &stale).await {
        Ok(subscribed) => {
            // Push is taken: the stream, if one was followed, is no longer needed.
            ctx.streams.stop(&key);
            if let Subscribed::Created(uri) = subscribed {
                created(inventory, &uri, &settings.url, ctx).await;
            }
            None
        }
        Err(e) if refuses_push(&e) => {
            let followed = streams::follow(inventory, &bmc, ctx).await;
            if followed == Followed::Started {
                stream_followed(inventory, ctx).await;
            }
            Some((error_chain(&e), followed))
        }
        Err(e) => Some((error_chain(&e), held(&key, ctx))),
    };
    say(inventory, interval, refusal, ctx).await;
}

/// Whether the BMC refused push itself (no EventService or subscriptions, disabled, full,
/// another 4xx), rather than not answering.
fn refuses_push(e: &BmcError) -> bool {
    matches!(e, BmcError::Unsupported(_))
        || matches!(e, BmcError::Http { status, .. } if (400..500).contains(status))
}

/// [`Followed::Held`] if the Inventory's stream is held (an unanswered ensure keeps it).
fn held(key: &str, ctx: &SeederContext) -> Followed {
    if ctx.streams.holds(key) {
        Followed::Held
    } else {
        Followed::No
    }
}

async fn created(inventory: &Inventory, uri: &str, url: &str, ctx: &SeederContext) {
    info!(inventory = %key_of(inventory), %uri, "event subscription created");
    ctx.hardware_events
        .publish(
            inventory,
            EventType::Normal,
            "EventSubscriptionCreated",
            "EventSubscriptionCreated",
            format!("the BMC pushes its events to {url} (subscription {uri})"),
        )
        .await;
}

async fn stream_followed(inventory: &Inventory, ctx: &SeederContext) {
    ctx.hardware_events
        .publish(
            inventory,
            EventType::Normal,
            "EventStreamFollowed",
            "EventStreamFollowed",
            "the BMC takes no push subscription: its server-sent event stream is followed, \
             each event read as a pushed one",
        )
        .await;
}

/// What a refusal says, with what the stream does.
fn refusal_message(why: &str, followed: &Followed, interval: Duration) -> String {
    let every = crate::duration::go_duration(interval);
    match followed {
        Followed::Started | Followed::Held => format!(
            "the BMC takes no event subscription ({why}); its server-sent event stream is \
             followed instead, and its hardware read every {every}"
        ),
        Followed::Full(max) => format!(
            "the BMC takes no event subscription ({why}) and its server-sent events are not \
             followed: the operator holds --events-max-streams ({max}) already; its hardware \
             is read every {every}"
        ),
        Followed::No => format!(
            "the BMC takes no event subscription ({why}); its hardware is read every {every}"
        ),
    }
}

/// Records what the ensure found; a refusal is said (Event and log) when its message differs
/// from the last one.
async fn say(
    inventory: &Inventory,
    interval: Duration,
    refusal: Option<(String, Followed)>,
    ctx: &SeederContext,
) {
    let key = key_of(inventory);
    let message = refusal.map(|(why, followed)| refusal_message(&why, &followed, interval));
    let previous = ctx
        .subscriptions
        .lock()
        .ok()
        .and_then(|mut s| s.insert(key.clone(), message.clone()));
    if let Some(message) = message
        && previous != Some(Some(message.clone()))
    {
        warn!(inventory = %key, "{message}");
        ctx.hardware_events
            .publish(
                inventory,
                EventType::Warning,
                "EventSubscriptionRefused",
                "EventSubscriptionRefused",
                message,
            )
            .await;
    }
}

/// Removes the Inventory's subscription from its BMC (its events were disabled or it is
/// being deleted); a BMC that cannot be reached keeps it until it terminates it for failed
/// deliveries (the receiver refuses them).
pub(crate) async fn unsubscribe(inventory: &Inventory, ctx: &SeederContext) {
    let Some(settings) = &ctx.settings.push else {
        return;
    };
    let key = key_of(inventory);
    ctx.streams.stop(&key);
    let removed = match node_health::reach(inventory, ctx).await {
        Ok(bmc) => bmc
            .remove_event_subscription(&settings.url, &settings.context(inventory))
            .await
            .map_err(|e| error_chain(&e)),
        Err(e) => Err(e),
    };
    match removed {
        Ok(n) => info!(inventory = %key, removed = n, "event subscription removed"),
        Err(error) => warn!(inventory = %key, %error, "could not remove the event subscription"),
    }
    if let Ok(mut s) = ctx.subscriptions.lock() {
        s.remove(&key);
    }
}

/// [`unsubscribe`], if this process ensured the Inventory's subscription.
pub(crate) async fn unsubscribe_if_ours(inventory: &Inventory, ctx: &SeederContext) {
    let ours = ctx
        .subscriptions
        .lock()
        .is_ok_and(|s| s.contains_key(&key_of(inventory)));
    if ours {
        unsubscribe(inventory, ctx).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inventory(uid: &str) -> Inventory {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "node-1", "namespace": "ns", "uid": uid},
            "spec": {"baseboardSpec": {"connection": {"host": "h", "insecureTLS": true}}}
        }))
        .unwrap()
    }

    #[test]
    fn secrets_differ_by_uid_and_key_and_never_print() {
        let a = PushSettings::new("https://x/events".into(), b"key-a".to_vec());
        let b = PushSettings::new("https://x/events".into(), b"key-b".to_vec());
        let s1 = a.subscription(&inventory("u-1")).unwrap();
        let s2 = a.subscription(&inventory("u-2")).unwrap();
        let s3 = b.subscription(&inventory("u-1")).unwrap();
        let secret = |s: &EventSubscription| s.headers[0].1.expose().to_owned();
        assert_eq!(secret(&s1).len(), 64);
        assert_ne!(secret(&s1), secret(&s2));
        assert_ne!(secret(&s1), secret(&s3));
        assert_eq!(s1.context, format!("ingot:ns/node-1:{}", a.key_id()));
        assert_ne!(s1.context, s3.context, "another key is another Context");
        assert!(!format!("{s1:?} {a:?}").contains(&secret(&s1)));
        assert!(!format!("{a:?}").contains("key-a"));
        assert_eq!(
            parse_context(&s1.context),
            Some(("ns", "node-1", a.key_id().as_str()))
        );
        assert_eq!(parse_context("someone else's"), None);
        assert_eq!(parse_context("ingot:ns/:k"), None);
        // Only the same Inventory's Context under another key is stale.
        let inv = inventory("u-1");
        assert!(a.stale_context(&inv, &s3.context));
        assert!(!a.stale_context(&inv, &s1.context));
        assert!(!a.stale_context(&inv, "ingot:ns/node-2:0000"));
        assert!(!a.stale_context(&inv, "ingot:other/node-1:0000"));
        assert!(!a.stale_context(&inv, "someone else's ns/node-1:0000"));
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn power_events_are_told_apart() {
        let e = |id: &str, origin: &str| json!({"MessageId": id, "OriginOfCondition": {"@odata.id": origin}});
        assert!(power_related(&e(
            "ResourceEvent.1.0.ResourceStatusChanged",
            "/redfish/v1/Systems/1"
        )));
        assert!(power_related(&e(
            "iLOEvents.2.1.ResourcePowerStateChanged",
            "/redfish/v1/Chassis/1"
        )));
        assert!(!power_related(&e(
            "ResourceEvent.1.0.ResourceStatusChanged",
            "/redfish/v1/Systems/1/Storage/1"
        )));
        assert!(!power_related(&e(
            "Platform.1.0.PlatformEvent",
            "/redfish/v1/Systems/1/LogServices/Log/Entries/3"
        )));
    }
}
