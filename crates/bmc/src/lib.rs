//! BMC access for ingot: one protocol-neutral [`Bmc`] trait, a Redfish client that implements
//! it, a [`manager::SessionManager`] that bounds concurrency and reuses one session per BMC, and
//! the `ingot bmc` command ([`cli`]).
//!
//! The IPMI (RMCP+) client lives in its own crate (`ingot-ipmi`); [`ipmi`] puts it behind the
//! same trait and plugs it into the manager through [`manager::Connector`]; [`pinned`] is the
//! IPMI connector that keeps a cipher suite pinned per BMC.

pub mod cli;
pub mod endpoint;
pub mod error;
mod follow;
pub mod ipmi;
pub mod manager;
pub mod pinned;
pub mod redfish;
pub mod secret;
pub mod types;

pub use endpoint::{Endpoint, Scheme};
pub use error::BmcError;
pub use secret::Password;
pub use types::*;

use async_trait::async_trait;

/// What ingot needs from a baseboard management controller, whatever the protocol.
///
/// Every method is bounded by the client's per-call timeout. Implementations reuse one
/// authenticated session across calls and re-authenticate transparently when it expires.
#[async_trait]
pub trait Bmc: Send + Sync {
    /// The protocol this client speaks.
    fn protocol(&self) -> Protocol;

    /// The current power state of the (first) computer system.
    async fn power_state(&self) -> Result<PowerState, BmcError>;

    /// Requests a power action; returns once the BMC accepted it (transitions may still be in
    /// progress: poll [`Bmc::power_state`]). Actions that are already satisfied (`on` while on,
    /// `off`/`soft` while off) are not sent and report [`PowerOutcome::AlreadyInState`].
    async fn power(&self, action: PowerAction) -> Result<PowerOutcome, BmcError>;

    /// The current boot source override, including the detected boot mode.
    async fn boot_override(&self) -> Result<BootOverride, BmcError>;

    /// Sets the boot source override. With `mode: None` the BMC's current boot mode (UEFI or
    /// Legacy) is kept: it is never flipped by accident.
    async fn set_boot_override(&self, request: BootRequest) -> Result<BootOverride, BmcError>;

    /// The virtual media devices of the (first) computer system.
    async fn virtual_media(&self) -> Result<Vec<MediaSlot>, BmcError>;

    /// With an image URL: empties the first device that takes `kind` and attaches the image
    /// (the BMC fetches it); nothing is sent when a device of the kind already holds it.
    /// Without: ejects the media of every device that takes `kind`.
    /// Returns once the BMC accepted it; read [`Bmc::virtual_media`] to see the effect.
    async fn set_virtual_media(
        &self,
        kind: MediaKind,
        image: Option<String>,
    ) -> Result<(), BmcError>;

    /// Hardware inventory: identity, firmware, CPUs, memory, NICs, disks and health roll-ups.
    async fn inventory(&self) -> Result<Inventory, BmcError>;

    /// Event log entries (Redfish LogServices, IPMI SEL) with stable ids, oldest first.
    async fn event_log(&self) -> Result<Vec<LogEntry>, BmcError>;

    /// Sensor readings with their thresholds and health: the IPMI SDR repository's sensors,
    /// or Redfish `Sensors` and the chassis' fans, temperatures and power supplies (`Thermal`
    /// and `Power`, else `ThermalSubsystem` and `PowerSubsystem`). At most [`MAX_SENSORS`].
    async fn sensors(&self) -> Result<Vec<Sensor>, BmcError>;

    /// The events the BMC pushes (Redfish server-sent events), sending `Last-Event-ID` when
    /// given; the stream holds its own connection and ends with an error when it drops or stays
    /// silent too long. [`BmcError::Unsupported`] where the BMC pushes none (IPMI, a Redfish
    /// service without `ServerSentEventUri` or with its EventService disabled).
    async fn pushed_events(&self, last_event_id: Option<String>) -> Result<PushedEvents, BmcError> {
        let _ = last_event_id;
        Err(BmcError::Unsupported("pushed events".into()))
    }

    /// Makes sure the BMC holds the push subscription `subscription` (Redfish EventService,
    /// found by `Destination` + `Context`, created when missing). Subscriptions with the same
    /// `Destination` whose `Context` is another one that `stale` takes (the subscriber's older
    /// copies of this one) are deleted first. [`BmcError::Unsupported`] where the BMC takes
    /// none (IPMI, no EventService or subscriptions, EventService disabled); a refusal (full,
    /// rejected) is the BMC's [`BmcError::Http`].
    async fn ensure_event_subscription(
        &self,
        subscription: &EventSubscription,
        stale: StaleContext<'_>,
    ) -> Result<Subscribed, BmcError> {
        let _ = (subscription, stale);
        Err(BmcError::Unsupported("push subscriptions".into()))
    }

    /// Deletes every push subscription with this `Destination` and `Context`; how many there
    /// were.
    async fn remove_event_subscription(
        &self,
        destination: &str,
        context: &str,
    ) -> Result<usize, BmcError> {
        let _ = (destination, context);
        Err(BmcError::Unsupported("push subscriptions".into()))
    }

    /// Closes the session (Redfish logout). Further calls open a new one.
    async fn close(&self) -> Result<(), BmcError>;
}
