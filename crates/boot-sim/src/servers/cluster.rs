//! The new Harvester cluster, as its nodes see it: the API server that plays it (at the VIP),
//! what the create node's RKE2 sets up there when it starts (a join credential, its
//! `server/manifests`), and the kubelet credentials of create and join nodes.

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, Config};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const FIELD_MANAGER: &str = "rke2-deploy";
/// The group joining nodes authenticate in (a bootstrap token's extra group).
const NODE_GROUP: &str = "system:bootstrappers:rke2-nodes";
const NODE_ROLE: &str = "rke2-node-bootstrapper";
/// Where RKE2's deploy controller picks up manifests.
pub const MANIFESTS_DIR: &str = "/var/lib/rancher/rke2/server/manifests/";

/// The bootstrap token (`<id>.<secret>`, lower-case hex) standing in for a cluster token: the
/// create node installs it, a join node presents the one its own config's token gives, so a
/// wrong token is refused by the API server itself.
pub fn bootstrap_token(cluster_token: &str) -> (String, String) {
    let hex = |salt: &str, n: usize| -> String {
        let digest = Sha256::digest(format!("{salt}:{cluster_token}").as_bytes());
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()[..n]
            .to_owned()
    };
    (hex("id", 6), hex("secret", 16))
}

async fn apply(client: &Client, gvk: &GroupVersionKind, obj: &Value) -> Result<(), kube::Error> {
    let (ar, caps) = kube::discovery::pinned_kind(client, gvk).await?;
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}

/// What the create node's RKE2 does when the cluster starts: the join credential for its
/// token, and what a kubelet may do with it (register and renew its Node and Lease).
pub async fn start(admin: &Client, cluster_token: &str) -> Result<(), kube::Error> {
    let (id, secret) = bootstrap_token(cluster_token);
    let objects = [
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {"token-id": id, "token-secret": secret,
                "usage-bootstrap-authentication": "true", "auth-extra-groups": NODE_GROUP}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": NODE_ROLE},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "create", "patch", "update"]},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch", "update"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": NODE_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NODE_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": NODE_GROUP}]}),
    ];
    for obj in &objects {
        if let Some(gvk) = gvk_of(obj) {
            apply(admin, &gvk, obj).await?;
        }
    }
    Ok(())
}

fn gvk_of(obj: &Value) -> Option<GroupVersionKind> {
    let api_version = obj.get("apiVersion")?.as_str()?;
    let kind = obj.get("kind")?.as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Some(GroupVersionKind::gvk(group, version, kind))
}

/// Applies one manifest file (multi-document YAML) as RKE2's deploy controller does: every
/// object with server-side apply. Returns the objects applied.
pub async fn apply_manifest(admin: &Client, path: &str, content: &str) -> Result<usize, String> {
    let objects = documents(path, content)?;
    for obj in &objects {
        let gvk =
            gvk_of(obj).ok_or_else(|| format!("{path}: an object without apiVersion/kind"))?;
        apply(admin, &gvk, obj).await.map_err(|e| {
            format!(
                "{path}: applying {} {}: {e}",
                gvk.kind, obj["metadata"]["name"]
            )
        })?;
    }
    Ok(objects.len())
}

/// The non-empty documents of a multi-document YAML file.
fn documents(path: &str, content: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(content) {
        let obj: Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("{path}: not YAML: {e}"))?;
        if !obj.is_null() {
            out.push(obj);
        }
    }
    Ok(out)
}

/// The client a join node's kubelet uses: the cluster's address, the bootstrap token its
/// config's token gives.
pub fn join_client(target: &Config, cluster_token: &str) -> Result<Client, String> {
    let (id, secret) = bootstrap_token(cluster_token);
    let mut config = target.clone();
    config.auth_info = serde_json::from_value(json!({"token": format!("{id}.{secret}")}))
        .map_err(|e| format!("building the kubelet credential: {e}"))?;
    Client::try_from(config).map_err(|e| format!("building the kubelet client: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_bootstrap_shaped_and_differ() {
        let (id, secret) = super::bootstrap_token("Abc123");
        assert_eq!((id.len(), secret.len()), (6, 16));
        assert!(
            id.chars()
                .chain(secret.chars())
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(super::bootstrap_token("Abc124").1, secret);
    }
}
