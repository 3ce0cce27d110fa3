//! The pools part (harvester-equinix-addon): InstancePool and Instance.
//!
//! - [`pool`] keeps `count` Instances per pool and reports the original's status strings.
//! - [`instance`] drives one server through the seed's flow: create with an iPXE shell boot,
//!   read the management MACs once the server is active, render the Harvester config, point
//!   iPXE at the installer, reinstall, wait for the Node, and replace it when it stays
//!   unhealthy.
//!
//! Credentials are read from their Secret at every reconcile; the Metal API is reached only
//! through the `BareMetalCloud` trait.

mod credentials;
pub mod instance;
mod join;
pub mod pool;

use std::sync::Arc;
use std::time::Duration;

use ingot_api::condition::{ConditionStatus, set_condition};
use ingot_metal::equinix::{ClientConfig, EquinixClient, EquinixMetal, RateLimiter};
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::warn;

pub use credentials::{Credentials, CredentialsError, SecretLocation};
pub use join::{Join, JoinError, JoinSettings};

use crate::Context;

/// Condition type: the Equinix credentials Secret is present and complete.
pub const CREDENTIALS_CONDITION: &str = "CredentialsReady";
/// Condition type: the join token and cluster address are known.
pub const JOIN_CONDITION: &str = "JoinReady";
/// Condition type on Instances: the Instance is a Ready node, or why not.
pub const READY_CONDITION: &str = "Ready";

/// Settings of the pools controllers.
#[derive(Clone, Debug)]
pub struct Settings {
    pub secret: SecretLocation,
    pub join: JoinSettings,
    /// Base URL of the Equinix Metal API (the emulator's for local runs).
    pub metal_api_url: String,
    /// Where servers fetch their install iPXE script: ingot serves `<base>/ipxe/pools/<pool>`.
    pub ipxe_base_url: Option<String>,
    /// A mirror of Harvester's release artifacts (kernel, initrd, rootfs, ISO).
    pub harvester_mirror: Option<String>,
    /// How often a server on its way somewhere (provisioning, reinstalling) is looked at; Metal
    /// has no watch.
    pub poll_interval: Duration,
    /// How long a server may take to become active, or to come back from a reinstall.
    pub provision_timeout: Duration,
    /// How long after being sent into the installer a server that has not joined is sent
    /// again (its iPXE script may have been unreachable, the install may have failed).
    pub install_retry: Duration,
    /// How long an installed server may take to join as a Node.
    pub join_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            secret: SecretLocation::default(),
            join: JoinSettings::default(),
            metal_api_url: ingot_metal::equinix::DEFAULT_BASE_URL.to_owned(),
            ipxe_base_url: None,
            harvester_mirror: None,
            poll_interval: Duration::from_secs(10),
            provision_timeout: Duration::from_secs(30 * 60),
            install_retry: Duration::from_secs(15 * 60),
            join_timeout: Duration::from_secs(60 * 60),
        }
    }
}

/// What the pools controllers share: settings and one Metal rate limiter for every client.
pub struct PoolsShared {
    pub settings: Settings,
    pub limiter: Arc<RateLimiter>,
}

impl PoolsShared {
    pub fn new(settings: Settings, requests_per_second: f64) -> Self {
        Self {
            settings,
            limiter: Arc::new(RateLimiter::new(requests_per_second, 5)),
        }
    }

    /// A Metal client for these credentials (made per reconcile, so rotation applies at once;
    /// every client shares the rate limiter).
    pub fn cloud(&self, credentials: &Credentials) -> Result<EquinixMetal, ingot_metal::Error> {
        let config = ClientConfig::new(
            self.settings.metal_api_url.clone(),
            credentials.token.clone(),
        );
        let client = EquinixClient::with_limiter(config, self.limiter.clone())?;
        Ok(EquinixMetal::new(client, credentials.project_id.clone()))
    }
}

/// Runs both controllers until `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    tokio::join!(
        pool::run(ctx.clone(), shutdown.clone()),
        instance::run(ctx, shutdown)
    );
}

/// Records an Event on an object, logging (not failing) when that is impossible.
pub(crate) async fn publish<K>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) where
    K: Resource<DynamicType = ()>,
{
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &object.object_ref(&())).await {
        warn!(%error, reason, "could not record an event");
    }
}

/// Sets a condition. Returns whether anything changed (write the status) and whether its
/// status or reason changed (record an Event): a new reason is news even if still False.
pub(crate) fn update_condition(
    conditions: &mut Vec<ingot_api::Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> (bool, bool) {
    let before = conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let status = if ok {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let changed = set_condition(conditions, type_, status, reason, message, generation);
    let news = before.is_none_or(|(s, r)| s != status.as_str() || r != reason);
    (changed, news)
}
