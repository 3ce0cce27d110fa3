//! Servers the user owns, as Inventories, for the pools and the Gardener machines that used to
//! run on a cloud (issue: node pools on your own metal).
//!
//! - [`claims`]: which Inventory a pool's Instance or a Gardener Machine runs on; exclusive
//!   and crash-safe claims written before anything boots.
//! - [`cloud`]: `InventoryCloud`, a `BareMetalCloud` over those claims: a server created is
//!   an Inventory claimed, given an address and booted into the installer through its BMC; a
//!   server deleted is powered off, confirmed off, and returned to the free set.
//!
//! - [`install`]: what a pool's claimed server installs (a Seeder join with its static
//!   address), rendered into the claim's install Secret that ingot's boot server hands out.
//!
//! - [`image`]: what a Gardener machine's claimed server boots (its MachineClass's OS image,
//!   its user data as cloud-init NoCloud data), rendered into the same Secret.
//!
//! - [`size`]: how large a server is (read once from its BMC, recorded on its Inventory), and
//!   whether it has a pool's `spec.inventoryMinimum`.
//!
//! - [`wipe`]: what a released server goes through before it is freed, when its owner asks
//!   for a wipe: the site's wipe image, booted with its orders, and its report.
//!
//! The Instance controller makes one `InventoryCloud` per Instance of a pool with
//! `spec.inventorySelector`; the Gardener driver for `provider: Inventory` MachineClasses one
//! per class.

pub mod claims;
pub mod cloud;
pub mod image;
pub mod install;
pub mod size;
pub mod wipe;
