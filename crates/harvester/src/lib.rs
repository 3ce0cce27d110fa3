//! The pure part of provisioning Harvester nodes on Equinix Metal, as harvester-equinix-addon
//! did it, without Kubernetes or HTTP: typed inputs in, text out.
//!
//! - [`version`]: a strict Harvester release version and the config schema it implies.
//! - [`artifacts`]: kernel, initrd, rootfs and ISO URLs of a release, with a mirror override.
//! - [`config`]: the Harvester install config (`#cloud-config` userdata) in the v1.0 schema and
//!   the current (`scheme_version: 1`) schema, intermediate and final.
//! - [`ipxe`]: the iPXE scripts of the two boot flows (shell-then-reinstall, single boot).
//! - [`provision`]: what a node provisioned by Seeder's full mode boots: its iPXE script and
//!   its install config, by MAC, with a static management address.
//! - [`port`]: a server's port as the config needs it (name, kind, MAC).
//! - [`secret`]: a redacting string for the join token and the OS password.
//!
//! The reconciler maps the `equinix.harvesterhci.io/v1` types and the Metal provider's port
//! data onto the small neutral types here; every field maps 1:1.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod artifacts;
pub mod config;
pub mod ipxe;
pub mod port;
pub mod provision;
pub mod secret;
pub mod version;

pub use artifacts::{Artifacts, ArtifactsError, DEFAULT_RELEASE_BASE};
pub use config::{ConfigError, JoinConfig, ManagementNetwork};
pub use ipxe::{InstallBoot, IpxeError, SHELL_SCRIPT};
pub use port::{Port, PortKind};
pub use provision::{Arch, NodeInstall, NodeMode, ProvisionError, install_config, ipxe_script};
pub use secret::Secret;
pub use version::{DEFAULT_VERSION, HarvesterVersion, Schema, VersionError};
