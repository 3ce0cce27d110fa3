//! `fencing.ingot.dev/v1alpha1`: BMCRemediationTemplate and BMCRemediation, ingot's fencing
//! offered to medik8s NodeHealthCheck (NHC) as an external remediation.
//!
//! NHC's contract, which these follow: a NodeHealthCheck names a *template* (`kind`
//! ending in `Template`, in some namespace) whose `spec.template.spec` NHC copies into the
//! `spec` of a remediation object it creates for an unhealthy Node: of the template's kind
//! without the `Template` suffix, in the template's namespace, named after the Node (or with a
//! generated name and the annotation [`NODE_NAME_ANNOTATION`] naming it), owned by the
//! NodeHealthCheck. NHC reads the conditions `Processing`, `Succeeded` and
//! `PermanentNodeDeletionExpected` of that object, marks it with [`NHC_TIMED_OUT_ANNOTATION`]
//! when it gives up on it, and deletes it once the Node is healthy again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;

/// The annotation NHC puts on a remediation object with a generated name: the Node it is for.
pub const NODE_NAME_ANNOTATION: &str = "remediation.medik8s.io/node-name";
/// The annotation NHC puts on a remediation object it stopped waiting for (timed out, or
/// `Succeeded=False`): a remediator starts nothing new for it.
pub const NHC_TIMED_OUT_ANNOTATION: &str = "remediation.medik8s.io/nhc-timed-out";

/// The condition types NHC reads (medik8s/common).
pub const PROCESSING: &str = "Processing";
pub const SUCCEEDED: &str = "Succeeded";
pub const PERMANENT_NODE_DELETION_EXPECTED: &str = "PermanentNodeDeletionExpected";

/// The only strategy: the out-of-service taint once the BMC confirms the power off.
pub const OUT_OF_SERVICE_TAINT: &str = "OutOfServiceTaint";

/// How a Node is fenced (the remediation's `spec`, copied by NHC from its template).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fencing.ingot.dev",
    version = "v1alpha1",
    kind = "BMCRemediation",
    plural = "bmcremediations",
    shortname = "bmcr",
    namespaced,
    status = "BMCRemediationStatus",
    doc = "The fencing of one Node through its Inventory's BMC (power off, confirmed, then Kubernetes' out-of-service taint), as a medik8s NodeHealthCheck creates it from a BMCRemediationTemplate: named after the Node, or carrying the annotation remediation.medik8s.io/node-name.",
    printcolumn = r#"{"name":"Processing","type":"string","jsonPath":".status.conditions[?(@.type==\"Processing\")].status"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"string","jsonPath":".status.conditions[?(@.type==\"Succeeded\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Succeeded\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = kube::core::Rule::new("self == oldSelf").message(
    "spec is fixed once the remediation exists: delete it and let NodeHealthCheck create it again from the template"
))]
pub struct BMCRemediationSpec {
    /// `OutOfServiceTaint` (the default, and the only one): the Node gets
    /// `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` once its BMC confirms the
    /// power off, so that its volumes detach and its pods move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new("self == 'OutOfServiceTaint'").message(
        "strategy: only OutOfServiceTaint is supported (power off through the BMC, then the out-of-service taint); remove the field or set it to OutOfServiceTaint"
    ))]
    pub strategy: Option<String>,
    /// Once the fenced Node's pods are gone, power the server on again (one power-on), so
    /// that it can come back and NodeHealthCheck see it healthy (default `true`). `false`
    /// leaves it off until the remediation is deleted, which powers nothing on.
    #[serde(
        rename = "powerOnAfterRecovery",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub power_on_after_recovery: Option<bool>,
}

impl BMCRemediationSpec {
    pub fn power_on(&self) -> bool {
        self.power_on_after_recovery.unwrap_or(true)
    }
}

/// What NHC reads: `Processing`, `Succeeded`, `PermanentNodeDeletionExpected` (always
/// `False`: ingot never deletes the Node).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct BMCRemediationStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last time ingot changed this status.
    #[serde(
        rename = "lastUpdateTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_update_time: Option<Time>,
}

/// The template a NodeHealthCheck names (`spec.remediationTemplate` or one of
/// `spec.escalatingRemediations`): NHC copies its `spec.template.spec` into each
/// BMCRemediation it creates, in the template's namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fencing.ingot.dev",
    version = "v1alpha1",
    kind = "BMCRemediationTemplate",
    plural = "bmcremediationtemplates",
    shortname = "bmcrt",
    namespaced,
    doc = "The template of the BMCRemediations a medik8s NodeHealthCheck creates for unhealthy Nodes (its external remediation template). It must live in the namespace of the Inventories of the Nodes it fences."
)]
pub struct BMCRemediationTemplateSpec {
    pub template: BMCRemediationTemplateResource,
}

/// `spec.template`: what each BMCRemediation's `spec` is made of.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct BMCRemediationTemplateResource {
    pub spec: BMCRemediationSpec,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::{CustomResourceExt, Resource};

    #[test]
    fn the_kinds_follow_nhcs_template_naming() {
        // NHC finds the remediation's kind by cutting `Template` off the template's.
        assert_eq!(
            BMCRemediationTemplate::kind(&()).strip_suffix("Template"),
            Some(&*BMCRemediation::kind(&()))
        );
        assert_eq!(
            BMCRemediation::api_version(&()),
            BMCRemediationTemplate::api_version(&())
        );
        let crd = serde_json::to_value(BMCRemediationTemplate::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(
            spec["properties"]["template"]["properties"]["spec"]["properties"]
                ["powerOnAfterRecovery"]
                .is_object(),
            "{spec}"
        );
    }

    #[test]
    fn power_on_after_recovery_defaults_to_true() {
        assert!(BMCRemediationSpec::default().power_on());
        let spec: BMCRemediationSpec =
            serde_json::from_value(serde_json::json!({"powerOnAfterRecovery": false})).unwrap();
        assert!(!spec.power_on());
    }
}
