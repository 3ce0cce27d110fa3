//! MachineClass and Secret finalizers (upstream `machineclass.go`, `secret.go`) and the
//! orphan-device collector (`machine_safety.go`): a device of a class's cluster and role tags
//! that no Machine owns is deleted. Provider ids are compared by device UUID, so devices whose
//! Machines carry an older id form (`equinixmetal://<facility>/<uuid>`) are not orphans.
//! The same pass marks the Nodes no Machine backs `node.machine.sapcloud.io/not-managed-by-mcm`
//! (upstream `AnnotateNodesUnmanagedByMCM`), and the machine controller leaves such Nodes alone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::gardener::{
    MC_SECRET_FINALIZER, MCM_FINALIZER, Machine, MachineClass, MachineSpec, NODE_LABEL,
};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::driver::{MachineRequest, same_device};
use super::status;
use super::{
    Error, GardenerContext, LONG_RETRY, NODE_FINALIZER, NOT_MANAGED_BY_MCM, error_backoff,
};
use crate::runtime::{self, ControllerRuntime, finalizer};

/// The `controller` label of the MachineClass controller's reconcile metrics.
const CONTROLLER: &str = "gardener-machine-class";

/// Runs the MachineClass controller: classes in use (and their Secrets) carry the finalizer.
pub async fn run_classes(
    ctx: Arc<GardenerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let namespace = ctx.settings.namespace.clone();
    let controller = Controller::new(ctx.classes(), watcher::Config::default()).watches(
        ctx.machines(),
        watcher::Config::default(),
        move |m: Machine| {
            let class = m.spec.class.as_ref().filter(|c| c.kind == "MachineClass")?;
            Some(ObjectRef::<MachineClass>::new(&class.name).within(&namespace))
        },
    );
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), error_backoff());
    runtime::run(
        controller,
        runtime,
        ctx,
        |class: Arc<MachineClass>, ctx: Arc<GardenerContext>| async move {
            reconcile_class(&ctx, &class).await?;
            Ok::<_, Error>(Action::requeue(LONG_RETRY))
        },
        shutdown,
    )
    .await;
}

/// Adds the finalizer to a class that Machines use (and to its Secrets), removes it from one
/// no Machine uses any more.
pub async fn reconcile_class(ctx: &GardenerContext, class: &MachineClass) -> Result<(), Error> {
    if !super::served(class) {
        return Ok(());
    }
    let name = class.name_any();
    let machines = ctx.machines().list(&ListParams::default()).await?;
    let in_use = machines.items.iter().any(|m| {
        m.spec
            .class
            .as_ref()
            .is_some_and(|c| c.kind == "MachineClass" && c.name == name)
    });
    let has = finalizer::has(class, MCM_FINALIZER);
    let want = in_use || (class.metadata.deletion_timestamp.is_none() && has);
    let written = if want {
        finalizer::add(&ctx.classes(), class, &[MCM_FINALIZER]).await?
    } else {
        finalizer::remove(&ctx.classes(), class, MCM_FINALIZER).await?
    };
    if written.is_some() {
        info!(class = %name, finalizer = want, "machine class finalizer");
    }
    reconcile_secrets(ctx).await
}

/// Secrets referenced by any class of the namespace carry `machine.sapcloud.io/machine-controller`.
async fn reconcile_secrets(ctx: &GardenerContext) -> Result<(), Error> {
    let classes = ctx.classes().list(&ListParams::default()).await?;
    let mut referenced = std::collections::BTreeSet::new();
    for class in classes
        .items
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        for r in [&class.spec.secret_ref, &class.spec.credentials_secret_ref]
            .into_iter()
            .flatten()
        {
            let ns = r
                .namespace
                .clone()
                .unwrap_or_else(|| ctx.settings.namespace.clone());
            if ns == ctx.settings.namespace
                && let Some(n) = &r.name
            {
                referenced.insert(n.clone());
            }
        }
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.control().clone(), &ctx.settings.namespace);
    for secret in secrets.list(&ListParams::default()).await?.items {
        let has = finalizer::has(&secret, MC_SECRET_FINALIZER);
        let want = referenced.contains(&secret.name_any());
        if has == want {
            continue;
        }
        if want {
            finalizer::add(&secrets, &secret, &[MC_SECRET_FINALIZER]).await?;
        } else {
            finalizer::remove(&secrets, &secret, MC_SECRET_FINALIZER).await?;
        }
    }
    Ok(())
}

/// Runs an orphan pass every `--machine-safety-orphan-vms-period`.
pub async fn run_orphan_collector(
    ctx: Arc<GardenerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let period = ctx.settings.orphan_vms_period;
    let collector = async {
        loop {
            tokio::time::sleep(period).await;
            match collect_orphans(&ctx).await {
                Ok(0) => {}
                Ok(n) => info!(deleted = n, "orphan devices collected"),
                Err(error) => warn!(%error, "orphan collection"),
            }
            // Upstream runs it in the same pass, whatever the device check found.
            if let Err(error) = mark_unmanaged_nodes(&ctx).await {
                warn!(%error, "marking the nodes no machine backs");
            }
        }
    };
    tokio::select! {
        () = collector => {}
        () = shutdown => {}
    }
}

/// One pass over every class of the namespace ingot serves. Devices are listed before Machines, so
/// a device whose Machine exists is always seen with it. Returns how many devices were deleted.
pub async fn collect_orphans(ctx: &GardenerContext) -> Result<usize, Error> {
    let classes = ctx.classes().list(&ListParams::default()).await?;
    let mut deleted = 0;
    for class in classes.items.iter().filter(|c| super::served(c)) {
        let secret = ctx.secret_data(class).await?;
        let devices = match ctx.driver.list_machines(class, &secret).await {
            Ok(d) => d,
            Err(s) => {
                // Upstream: the first failing class ends the pass.
                warn!(class = %class.name_any(), error = %s, "listing devices; orphan pass stopped");
                return Ok(deleted);
            }
        };
        let machines: BTreeMap<String, Machine> = ctx
            .machines()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|m| (m.name_any(), m))
            .collect();
        for (provider_id, name) in devices {
            if let Some(m) = machines.get(&name) {
                let owned = m
                    .spec
                    .provider_id
                    .as_deref()
                    .is_some_and(|p| same_device(p, &provider_id));
                let creating = matches!(status::phase(m), "" | "CrashLoopBackOff");
                if owned || creating {
                    continue;
                }
            }
            let dummy = Machine {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ctx.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: MachineSpec {
                    provider_id: Some(provider_id.clone()),
                    ..MachineSpec::default()
                },
                status: None,
            };
            let req = MachineRequest {
                machine: &dummy,
                class,
                secret: &secret,
            };
            match ctx.driver.delete_machine(req).await {
                Ok(_) => {
                    info!(machine = %name, %provider_id, "orphan device deleted");
                    deleted += 1;
                }
                Err(s) => {
                    warn!(machine = %name, %provider_id, error = %s, "deleting an orphan device")
                }
            }
        }
    }
    Ok(deleted)
}

/// What the orphan pass does to one Node's `not-managed-by-mcm` annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeMark {
    /// No Machine backs it and it is older than the creation timeout: annotate it (and drop
    /// the node finalizer, which no Machine deletion would ever remove).
    Unmanaged,
    /// A Machine backs it again: the annotation goes.
    Managed,
}

/// Upstream's rule: a Node counts as backed when exactly one Machine names it in its `node`
/// label; two or more are an error upstream, and the Node is left as it is.
pub fn node_mark(
    annotated: bool,
    machines_naming_it: usize,
    age: Duration,
    creation_timeout: Duration,
) -> Option<NodeMark> {
    match machines_naming_it {
        0 if !annotated && age > creation_timeout => Some(NodeMark::Unmanaged),
        1 if annotated => Some(NodeMark::Managed),
        _ => None,
    }
}

/// Annotates the Nodes of the target cluster that no Machine backs, and un-annotates those a
/// Machine backs again. Returns how many Nodes changed.
pub async fn mark_unmanaged_nodes(ctx: &GardenerContext) -> Result<usize, Error> {
    let nodes: Api<Node> = Api::all(ctx.target().clone());
    let listed = nodes.list(&ListParams::default()).await?;
    let mut naming: BTreeMap<String, usize> = BTreeMap::new();
    for machine in ctx.machines().list(&ListParams::default()).await?.items {
        if let Some(node) = machine.labels().get(NODE_LABEL).filter(|n| !n.is_empty()) {
            *naming.entry(node.clone()).or_default() += 1;
        }
    }
    let mut changed = 0;
    for node in listed.items {
        let name = node.name_any();
        let annotated = node.annotations().contains_key(NOT_MANAGED_BY_MCM);
        let age = node
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|t| Duration::try_from(Timestamp::now().duration_since(t.0)).ok())
            .unwrap_or_default();
        let machines = naming.get(&name).copied().unwrap_or(0);
        let Some(mark) = node_mark(annotated, machines, age, ctx.settings.creation_timeout) else {
            continue;
        };
        let mut metadata = json!({"resourceVersion": node.resource_version()});
        match mark {
            NodeMark::Unmanaged => {
                metadata["annotations"] = json!({NOT_MANAGED_BY_MCM: "1"});
                if node.finalizers().iter().any(|f| f == NODE_FINALIZER) {
                    let kept: Vec<&String> = node
                        .finalizers()
                        .iter()
                        .filter(|f| *f != NODE_FINALIZER)
                        .collect();
                    metadata["finalizers"] = json!(kept);
                }
            }
            NodeMark::Managed => metadata["annotations"] = json!({NOT_MANAGED_BY_MCM: null}),
        }
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": metadata})),
            )
            .await?;
        info!(node = %name, ?mark, "not-managed-by-mcm");
        changed += 1;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_without_a_machine_are_marked_after_the_creation_timeout() {
        let timeout = Duration::from_secs(1200);
        let old = Duration::from_secs(1201);
        let young = Duration::from_secs(10);
        assert_eq!(node_mark(false, 0, old, timeout), Some(NodeMark::Unmanaged));
        assert_eq!(node_mark(false, 0, young, timeout), None, "still joining");
        assert_eq!(node_mark(true, 0, old, timeout), None, "already marked");
        assert_eq!(node_mark(false, 1, old, timeout), None);
        assert_eq!(node_mark(true, 1, young, timeout), Some(NodeMark::Managed));
        assert_eq!(node_mark(true, 2, old, timeout), None, "ambiguous: left");
    }
}
