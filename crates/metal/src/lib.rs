//! Bare-metal clouds for ingot.
//!
//! Controllers use the cloud-neutral [`BareMetalCloud`] trait and its types ([`Server`],
//! [`Port`], [`NetworkMode`], [`Vlan`], ...). [`equinix`] implements it for Equinix Metal over
//! a typed HTTP client with timeouts, retries, a shared rate limiter and typed errors.

pub mod equinix;
pub mod error;
pub mod provider;
pub mod secret;

pub use error::{Error, Result};
pub use provider::*;
pub use secret::ApiToken;
