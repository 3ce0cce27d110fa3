//! A stateful emulator of the Equinix Metal API (the frozen v1 spec), for development and tests.
//!
//! It depends on nothing of the operator: it has its own wire structs. Devices move through
//! `queued -> provisioning -> active`, `reinstalling -> active`, `deprovisioning -> gone`
//! with configurable timings; ports follow the Metal network-type rules; faults are injected on
//! demand; every call is counted. See `docs/metal.md`.

pub mod catalog;
pub mod config;
pub mod server;
pub mod world;

pub use config::{
    EndpointFault, Faults, HardwareReservationConfig, PlanMetro, ProjectConfig, RateLimitBurst,
    ServerRateLimit, SimConfig, Timings, TokenConfig,
};
pub use server::{Exchange, Metrics, Sim, SimServer, router, serve};
pub use world::BootRecord;
