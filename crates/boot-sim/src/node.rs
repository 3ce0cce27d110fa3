//! The kubelet's part: register the Node, post its Ready condition, renew its Lease.

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
const FIELD_MANAGER: &str = "ingot-boot-sim";

/// The Ready condition to post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    pub since: DateTime<Utc>,
}

impl Readiness {
    fn reason_message(self) -> (&'static str, &'static str) {
        match self.status {
            "True" => ("KubeletReady", "kubelet is posting ready status"),
            "False" => ("KubeletNotReady", "container runtime network not ready"),
            _ => ("NodeStatusUnknown", "Kubelet stopped posting node status."),
        }
    }
}

/// What the node reports about itself.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub name: String,
    pub internal_ip: Option<String>,
    pub plan: Option<String>,
    /// When the node joined (the transition time of the pressure conditions).
    pub joined_at: DateTime<Utc>,
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Creates the Node if it is not there, then posts its status.
pub async fn register(
    client: &Client,
    facts: &NodeFacts,
    ready: Readiness,
) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = serde_json::Map::new();
    labels.insert("kubernetes.io/hostname".into(), json!(facts.name));
    labels.insert("kubernetes.io/os".into(), json!("linux"));
    labels.insert("kubernetes.io/arch".into(), json!("amd64"));
    labels.insert("beta.kubernetes.io/os".into(), json!("linux"));
    labels.insert("beta.kubernetes.io/arch".into(), json!("amd64"));
    if let Some(plan) = &facts.plan {
        labels.insert("node.kubernetes.io/instance-type".into(), json!(plan));
    }
    let meta = json!({"metadata": {"labels": labels}});
    if nodes.get_opt(&facts.name).await?.is_none() {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": facts.name, "labels": labels},
            "spec": {"providerID": format!("rke2://{}", facts.name)},
        }))
        .map_err(kube::Error::SerdeError)?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    nodes
        .patch(&facts.name, &PatchParams::default(), &Patch::Merge(&meta))
        .await?;
    post_status(client, facts, ready, true).await
}

/// Posts the node's conditions with a fresh heartbeat (and addresses when `full`), and renews
/// its Lease unless the kubelet is gone (`Unknown`).
pub async fn post_status(
    client: &Client,
    facts: &NodeFacts,
    ready: Readiness,
    full: bool,
) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = Utc::now();
    let (reason, message) = ready.reason_message();
    let heartbeat = ts(now);
    let pressure = |kind: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": "False", "reason": reason, "message": message,
               "lastHeartbeatTime": heartbeat, "lastTransitionTime": ts(facts.joined_at)})
    };
    let mut status = json!({
        "conditions": [
            pressure("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            pressure("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            pressure("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            {"type": "Ready", "status": ready.status, "reason": reason, "message": message,
             "lastHeartbeatTime": heartbeat, "lastTransitionTime": ts(ready.since)},
        ],
    });
    if full {
        let mut addresses = Vec::new();
        if let Some(ip) = &facts.internal_ip {
            addresses.push(json!({"type": "InternalIP", "address": ip}));
        }
        addresses.push(json!({"type": "Hostname", "address": facts.name}));
        status["addresses"] = json!(addresses);
        status["capacity"] = json!({"cpu": "8", "memory": "65536Mi", "pods": "200"});
        status["allocatable"] = json!({"cpu": "8", "memory": "65536Mi", "pods": "200"});
        status["nodeInfo"] = json!({
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "Harvester", "containerRuntimeVersion": "containerd://",
            "kubeletVersion": "", "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": "amd64",
        });
    }
    nodes
        .patch_status(
            &facts.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    if ready.status != "Unknown" {
        renew_lease(client, &facts.name, now).await?;
    }
    Ok(())
}

async fn renew_lease(client: &Client, name: &str, now: DateTime<Utc>) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": now.to_rfc3339_opts(SecondsFormat::Micros, true),
        },
    });
    leases
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await?;
    Ok(())
}
