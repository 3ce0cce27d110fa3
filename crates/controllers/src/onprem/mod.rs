//! Servers the user owns, as Inventories, for the pools and the Gardener machines that used to
//! run on a cloud (issue: node pools on your own metal).
//!
//! - [`claims`]: which Inventory a pool's Instance or a Gardener Machine runs on; exclusive
//!   and crash-safe claims written before anything boots.
//! - [`cloud`]: `InventoryCloud`, a `BareMetalCloud` over those claims: a server created is
//!   an Inventory claimed, given an address and booted into the installer through its BMC; a
//!   server deleted is powered off, confirmed off, and returned to the free set.
//!
//! What comes on top (the pools and MachineClass wiring) is not built yet; nothing in
//! `ingot run` makes an `InventoryCloud` today.

pub mod claims;
pub mod cloud;
