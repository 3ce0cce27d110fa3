//! `metal.harvesterhci.io/v1alpha1` InventoryTemplate and NestedCluster: Seeder's lab feature
//! that makes VMs on another Harvester cluster and installs them as a nested cluster. ingot does
//! not implement it. Their CRDs are still served (same group, names and printer columns as
//! Seeder's, `spec` and `status` free-form) so that a manifest for them is refused with a
//! message saying so and what to do instead, rather than with "no matches for kind".
//!
//! The refusal is a CEL rule on the whole object with an optional `oldSelf`: it fails when there
//! is no old object, that is on every create. Objects that already exist (written by Seeder
//! before ingot took over) can still be read, updated and deleted, finalizers included.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// What to do instead, in every refusal.
const INSTEAD: &str = "create the VMs yourself, an Inventory for each (spec.baseboardSpec \
naming its BMC), then a Cluster listing those Inventories in spec.nodes";

/// The message of InventoryTemplate's refusal.
pub fn inventory_template_message() -> String {
    format!(
        "ingot does not implement InventoryTemplate (VMs made on another Harvester cluster for a nested cluster): {INSTEAD}"
    )
}

/// The message of NestedCluster's refusal.
pub fn nested_cluster_message() -> String {
    format!(
        "ingot does not implement NestedCluster (a Harvester cluster installed on VMs of another Harvester cluster): {INSTEAD}"
    )
}

fn column(name: &str, path: &str) -> Value {
    json!({"name": name, "type": "string", "jsonPath": path})
}

fn refused(
    kind: &str,
    plural: &str,
    columns: Vec<Value>,
    message: String,
) -> CustomResourceDefinition {
    let free_form = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.metal.harvesterhci.io")},
        "spec": {
            "group": "metal.harvesterhci.io",
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "description": format!("Seeder's {kind}, which ingot does not implement: every create is refused."),
                    "type": "object",
                    "properties": {"spec": free_form, "status": free_form},
                    "x-kubernetes-validations": [{
                        "rule": "oldSelf.hasValue()",
                        "optionalOldSelf": true,
                        "message": message,
                    }],
                }},
            }],
        },
    });
    serde_json::from_value(crd).unwrap_or_default()
}

/// InventoryTemplate's CRD: Seeder's names and columns, every create refused.
pub fn inventory_template_crd() -> CustomResourceDefinition {
    refused(
        "InventoryTemplate",
        "inventorytemplates",
        vec![
            column("InventoryTemplateStatus", ".status.status"),
            column("Reason", ".status.message"),
        ],
        inventory_template_message(),
    )
}

/// NestedCluster's CRD: Seeder's names and columns, every create refused.
pub fn nested_cluster_crd() -> CustomResourceDefinition {
    refused(
        "NestedCluster",
        "nestedclusters",
        vec![
            column("ClusterStatus", ".status.status"),
            column("ClusterToken", ".status.token"),
            column("ClusterAddress", ".status.clusterAddress"),
        ],
        nested_cluster_message(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn both_crds_are_well_formed_with_seeders_names() {
        for (crd, kind) in [
            (inventory_template_crd(), "InventoryTemplate"),
            (nested_cluster_crd(), "NestedCluster"),
        ] {
            assert_eq!(crd.spec.names.kind, kind);
            assert_eq!(crd.spec.group, "metal.harvesterhci.io");
            let version = &crd.spec.versions[0];
            let schema = version
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap();
            let rules = schema.x_kubernetes_validations.as_ref().unwrap();
            assert_eq!(rules[0].optional_old_self, Some(true));
            assert!(
                rules[0]
                    .message
                    .as_ref()
                    .unwrap()
                    .contains("does not implement")
            );
        }
    }
}
