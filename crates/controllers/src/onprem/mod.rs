//! Servers the user owns, as Inventories, for the pools and the Gardener machines that used to
//! run on a cloud (issue: node pools on your own metal).
//!
//! - [`claims`]: which Inventory a pool's Instance or a Gardener Machine runs on; exclusive
//!   and crash-safe claims written before anything boots.
//!
//! What comes on top (the `BareMetalCloud` over Inventories: the boot, the release through the
//! BMC, the pools and MachineClass wiring) is not built yet; nothing in `ingot run` claims an
//! Inventory today.

pub mod claims;
