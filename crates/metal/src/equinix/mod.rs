//! Equinix Metal: the typed HTTP client ([`EquinixClient`]) and the [`EquinixMetal`]
//! implementation of [`crate::BareMetalCloud`].

mod client;
mod cloud;
mod ratelimit;
pub mod wire;

pub use client::{ClientConfig, ClientStats, DEFAULT_BASE_URL, EquinixClient, RetryPolicy};
pub use cloud::{EquinixMetal, server};
pub use ratelimit::RateLimiter;
