//! An async IPMI 2.0 client over LAN (RMCP+) built for fleets: one
//! long-lived session per BMC, reused across calls, kept alive while idle
//! and closed explicitly, so that a reconcile loop over thousands of BMCs
//! does not exhaust their session tables.
//!
//! Cipher suites 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) and 17
//! (RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128). Suite 0 cannot be
//! requested, and a BMC that answers with weaker algorithms than proposed is
//! refused.
//!
//! ```no_run
//! # async fn demo() -> ingot_ipmi::Result<()> {
//! use ingot_ipmi::{Client, Config, PowerAction};
//! let client = Client::connect(Config::new("10.0.0.5:623", "admin", "secret")).await?;
//! let status = client.chassis_status().await?;
//! if !status.power_on {
//!     client.power(PowerAction::On).await?;
//! }
//! client.close().await;
//! # Ok(()) }
//! ```
//!
//! See `docs/ipmi.md` in the repository for the protocol coverage and the
//! session policy.

mod client;
mod commands;
mod crypto;
mod error;
pub mod fru;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod packet;
mod rakp;
pub mod sdr;
mod session;

pub use client::{Client, ClientStats, Config};
pub use commands::{
    BootDevice, BootFlags, BootMode, BootPersistence, ChassisControl, ChassisStatus, DeviceId,
    Inventory, PowerAction, RestorePolicy, SelEntry, SelInfo,
};
pub use crypto::{CipherSuite, Password};
pub use error::{Error, Result, completion_code_text, rakp_status_text};
pub use fru::Fru;
pub use rakp::Privilege;
pub use sdr::{RawThresholds, SdrInfo, SensorReading, SensorRecord};
