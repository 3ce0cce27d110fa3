//! The custom resources ingot serves or reads, wire-compatible with the upstream projects.
//!
//! | module | group | upstream | CRD |
//! | --- | --- | --- | --- |
//! | [`equinix`] | `equinix.harvesterhci.io/v1` | harvester-equinix-addon | generated here |
//! | [`seeder`] | `metal.harvesterhci.io/v1alpha1` | Harvester Seeder | generated here |
//! | [`refused`] | `metal.harvesterhci.io/v1alpha1` (InventoryTemplate, NestedCluster) | Harvester Seeder | generated here; every create refused |
//! | [`rufio`] | `bmc.tinkerbell.org/v1alpha1` | Tinkerbell Rufio | generated here |
//! | [`remediation`] | `fencing.ingot.dev/v1alpha1` (BMCRemediation, BMCRemediationTemplate) | medik8s NodeHealthCheck's external remediation contract | generated here |
//! | [`gardener`] | `machine.sapcloud.io/v1alpha1` | Gardener machine-controller-manager | Gardener's own files |
//!
//! Field names keep the upstream casing exactly, odd ones included (`managementInterface` on a
//! pool but `managementInterfaces` on an instance, `operating_system`, `hardwareReservation_id`,
//! `vlanIDS`): existing manifests and objects written by the Go programs must keep working.
//! Where ingot adds something (validation, `conditions`, `observedGeneration`) it only narrows
//! what was meaningless or adds optional fields.

pub mod condition;
pub mod crds;
pub mod equinix;
pub mod gardener;
pub mod refused;
pub mod remediation;
pub mod rufio;
pub mod seeder;

pub use condition::Condition;
