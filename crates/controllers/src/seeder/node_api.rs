//! Harvester's node power actions, `powerActionPossible` and `powerAction`, answered as Harvester's
//! node API answers them (`pkg/api/node/formatter.go`), with two gates Harvester leaves to its UI:
//! the Node must be in maintenance, and the caller must be allowed to update that Node (a
//! SubjectAccessReview on the API server). Served over HTTPS by `ingot run` and used by
//! `ingot power`.

use std::collections::BTreeMap;

use ingot_api::seeder::{INVENTORY_NODE_READY, Inventory, LOCAL_NODE_NAME_ANNOTATION};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::inventory::node_name;

/// The Node annotation Harvester sets while a Node is in maintenance (any non-empty value).
pub const MAINTAIN_STATUS_ANNOTATION: &str = "harvesterhci.io/maintain-status";

/// The operations Harvester accepts, in its order (its error message lists them so).
pub const OPERATIONS: [&str; 3] = ["shutdown", "poweron", "reboot"];

/// Who asks. A server checks the user its TokenReview named; the CLI checks its own kubeconfig's
/// identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    User {
        name: String,
        uid: Option<String>,
        groups: Vec<String>,
        extra: BTreeMap<String, Vec<String>>,
    },
    Myself,
    /// A caller whose power permission the server has already checked (and cached).
    Permitted {
        name: String,
    },
}

impl Caller {
    /// The user's name, as logged.
    pub fn name(&self) -> &str {
        match self {
            Caller::User { name, .. } | Caller::Permitted { name } => name,
            Caller::Myself => "the kubeconfig's user",
        }
    }
}

/// An answer other than success: the HTTP status Harvester gives, and its message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn api(what: &str, error: &kube::Error) -> Self {
        Self::new(500, format!("{what}: {error}"))
    }
}

/// `powerActionPossible`: 204 when the Node's Inventory (the one in `namespace` that maps to
/// the Node, [`inventory_of_node`]) is `inventoryNodeReady`; 424 without an Inventory; 409
/// with Harvester's messages otherwise.
pub async fn power_action_possible(
    client: &Client,
    namespace: &str,
    node: &str,
) -> Result<(), Refusal> {
    let inventory = inventory_of_node(client, namespace, node).await?;
    ready(&inventory, node)
}

/// Harvester's readiness check of the Node's Inventory.
fn ready(inventory: &Inventory, node: &str) -> Result<(), Refusal> {
    match inventory.status.as_ref().and_then(|s| s.status.as_deref()) {
        None => Err(Refusal::new(
            409,
            format!("no field .status.status present in inventory object: {node}"),
        )),
        Some(INVENTORY_NODE_READY) => Ok(()),
        Some(other) => Err(Refusal::new(
            409,
            format!(
                "expected to find inventory {node} status {INVENTORY_NODE_READY}, but current status is: {other}"
            ),
        )),
    }
}

/// Whether Harvester has the Node in maintenance (its annotation, any non-empty value).
pub fn in_maintenance(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MAINTAIN_STATUS_ANNOTATION))
        .is_some_and(|v| !v.is_empty())
}

/// The Inventory in `namespace` that maps to the Node by Seeder's annotation
/// `metal.harvesterhci.io/local-node-name` (Harvester's UI names it after the Node too, and
/// that one is read first). An Inventory that only shares the Node's name is not the Node's.
pub async fn inventory_of_node(
    client: &Client,
    namespace: &str,
    node: &str,
) -> Result<Inventory, Refusal> {
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), namespace);
    let namesake = inventories
        .get_opt(node)
        .await
        .map_err(|e| Refusal::api("reading the inventory", &e))?;
    if let Some(inventory) = namesake.filter(|i| node_name(i) == Some(node)) {
        return Ok(inventory);
    }
    let listed = inventories
        .list(&ListParams::default())
        .await
        .map_err(|e| Refusal::api("listing the inventories", &e))?;
    let mut mapped: Vec<Inventory> = listed
        .items
        .into_iter()
        .filter(|i| node_name(i) == Some(node))
        .collect();
    match mapped.len() {
        0 => Err(Refusal::new(
            424,
            format!(
                "no inventory in {namespace} maps to node {node} (annotation \
                 {LOCAL_NODE_NAME_ANNOTATION}): the node has no BMC known to ingot"
            ),
        )),
        1 => Ok(mapped.remove(0)),
        _ => Err(Refusal::new(
            409,
            format!(
                "inventories {} in {namespace} all map to node {node} (annotation \
                 {LOCAL_NODE_NAME_ANNOTATION}): keep it on one of them",
                mapped
                    .iter()
                    .map(|i| i.name_any())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// `powerAction {operation}`: checks the operation, the caller's power permission on the Node, the
/// Node's maintenance and `powerActionPossible`, refuses while the last request has no answer,
/// then writes the request as Harvester does: `spec.powerActionRequested`, then
/// `status.powerAction.lastJobName` cleared (what arms the Seeder controller).
pub async fn request_power_action(
    client: &Client,
    namespace: &str,
    node: &str,
    operation: &str,
    caller: &Caller,
) -> Result<(), Refusal> {
    if !OPERATIONS.contains(&operation) {
        // Harvester's message, its spelling included.
        return Err(Refusal::new(
            400,
            format!(
                "operation {operation} is not a valid power opreation. valid values need to be in [{}]",
                OPERATIONS.join(" ")
            ),
        ));
    }
    ensure_may_power(client, node, caller).await?;
    ensure_in_maintenance(client, node).await?;
    let inventory = inventory_of_node(client, namespace, node).await?;
    ready(&inventory, node)?;
    request_on(client, namespace, node, &inventory, operation).await
}

/// The Node exists and is in maintenance (404, 409 otherwise).
async fn ensure_in_maintenance(client: &Client, node: &str) -> Result<(), Refusal> {
    let nodes: Api<Node> = Api::all(client.clone());
    let found = match nodes.get_opt(node).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(Refusal::new(404, format!("node {node} not found"))),
        Err(error) => return Err(Refusal::api("reading the node", &error)),
    };
    if !in_maintenance(&found) {
        return Err(Refusal::new(
            409,
            format!(
                "node {node} is not in maintenance mode: enable maintenance mode first \
                 (annotation {MAINTAIN_STATUS_ANNOTATION})"
            ),
        ));
    }
    Ok(())
}

/// Writes the request on the ready Inventory of the Node, unless one is still waiting for its
/// status, and arms its answer.
async fn request_on(
    client: &Client,
    namespace: &str,
    node: &str,
    inventory: &Inventory,
    operation: &str,
) -> Result<(), Refusal> {
    let name = inventory.name_any();
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), namespace);
    let mut power_action = inventory
        .status
        .as_ref()
        .map(|s| s.power_action.clone())
        .unwrap_or_default();
    if let Some(old) = inventory.spec.power_action_requested.as_deref()
        && power_action
            .action_status
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    {
        return Err(Refusal::new(
            409,
            format!(
                "waiting for power action status for action {old} for node {node} to be populated"
            ),
        ));
    }
    // The request, on the version just read: a concurrent request makes this one fail (409)
    // rather than both being taken.
    let resource_version = inventory.metadata.resource_version.clone();
    inventories
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": resource_version},
                "spec": {"powerActionRequested": operation},
            })),
        )
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) if status.code == 409 => Refusal::new(
                409,
                format!("inventory {name} changed while the request was made: try again"),
            ),
            other => Refusal::api("writing the request", &other),
        })?;
    power_action.last_job_name = Some(String::new());
    inventories
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"powerAction": power_action}})),
        )
        .await
        .map_err(|e| Refusal::api("arming the request", &e))?;
    Ok(())
}

/// The permission a power action needs, checked on the API server's authorizer for the Node's
/// name: `create` on `nodes/poweraction` in the API group `seeder.ingot.dev` (no such resource
/// is served; it exists in RBAC only). Updating a Node is not enough: many DaemonSets and every
/// kubelet may do that.
pub const POWER_PERMISSION: (&str, &str, &str, &str) =
    ("create", "seeder.ingot.dev", "nodes", "poweraction");

/// Whether the caller holds `POWER_PERMISSION` on `node`, asked of the API server's authorizer.
pub async fn may_power(client: &Client, node: &str, caller: &Caller) -> Result<bool, Refusal> {
    let (verb, group, resource, subresource) = POWER_PERMISSION;
    let attributes = ResourceAttributes {
        verb: Some(verb.to_owned()),
        group: Some(group.to_owned()),
        resource: Some(resource.to_owned()),
        subresource: Some(subresource.to_owned()),
        name: Some(node.to_owned()),
        ..Default::default()
    };
    let allowed = match caller {
        Caller::User {
            name,
            uid,
            groups,
            extra,
        } => {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(name.clone()),
                    uid: uid.clone(),
                    groups: Some(groups.clone()),
                    extra: Some(extra.clone()),
                    resource_attributes: Some(attributes),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = Api::<SubjectAccessReview>::all(client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| Refusal::api("asking the authorizer", &e))?;
            answer.status.is_some_and(|s| s.allowed)
        }
        Caller::Myself => {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(attributes),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| Refusal::api("asking the authorizer", &e))?;
            answer.status.is_some_and(|s| s.allowed)
        }
        Caller::Permitted { .. } => true,
    };
    Ok(allowed)
}

/// The 403 of a caller without `POWER_PERMISSION` on `node`.
pub fn power_refused(caller: &Caller, node: &str) -> Refusal {
    let (verb, group, resource, subresource) = POWER_PERMISSION;
    let who = match caller {
        Caller::Myself => "you",
        other => other.name(),
    };
    Refusal::new(
        403,
        format!(
            "{who} may not request power actions on node {node}: that needs {verb} on \
             {resource}/{subresource} in the API group {group} (updating the Node is not enough)"
        ),
    )
}

async fn ensure_may_power(client: &Client, node: &str, caller: &Caller) -> Result<(), Refusal> {
    if may_power(client, node, caller).await? {
        Ok(())
    } else {
        Err(power_refused(caller, node))
    }
}
