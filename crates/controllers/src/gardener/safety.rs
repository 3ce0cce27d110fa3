//! MachineClass and Secret finalizers (upstream `machineclass.go`, `secret.go`) and the
//! orphan-device collector (`machine_safety.go`): a device of a class's cluster and role tags
//! that no Machine owns is deleted. Provider ids are compared by device UUID, so devices whose
//! Machines carry an older id form (`equinixmetal://<facility>/<uuid>`) are not orphans.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use ingot_api::gardener::{
    MC_SECRET_FINALIZER, MCM_FINALIZER, Machine, MachineClass, MachineSpec, PROVIDER_EQUINIX_METAL,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::driver::{MachineRequest, same_device};
use super::status;
use super::{Error, GardenerContext, SHORT_RETRY};

/// Runs the MachineClass controller: classes in use (and their Secrets) carry the finalizer.
pub async fn run_classes(
    ctx: Arc<GardenerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let namespace = ctx.settings.namespace.clone();
    Controller::new(ctx.classes(), watcher::Config::default())
        .watches(
            ctx.machines(),
            watcher::Config::default(),
            move |m: Machine| {
                let class = m.spec.class.as_ref().filter(|c| c.kind == "MachineClass")?;
                Some(ObjectRef::<MachineClass>::new(&class.name).within(&namespace))
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(
            |class: Arc<MachineClass>, ctx: Arc<GardenerContext>| async move {
                reconcile_class(&ctx, &class).await?;
                Ok::<_, Error>(Action::requeue(std::time::Duration::from_secs(600)))
            },
            |_, error: &Error, _| {
                warn!(%error, "machine class reconcile failed");
                Action::requeue(SHORT_RETRY)
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// Adds the finalizer to a class that Machines use (and to its Secrets), removes it from one
/// no Machine uses any more.
pub async fn reconcile_class(ctx: &GardenerContext, class: &MachineClass) -> Result<(), Error> {
    if class.spec.provider.as_deref() != Some(PROVIDER_EQUINIX_METAL) {
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
    let has = class.finalizers().iter().any(|f| f == MCM_FINALIZER);
    let want = in_use || (class.metadata.deletion_timestamp.is_none() && has);
    if want != has {
        let finalizers: Vec<String> = if want {
            class
                .finalizers()
                .iter()
                .cloned()
                .chain([MCM_FINALIZER.to_owned()])
                .collect()
        } else {
            class
                .finalizers()
                .iter()
                .filter(|f| *f != MCM_FINALIZER)
                .cloned()
                .collect()
        };
        let body = json!({"metadata": {"finalizers": finalizers, "resourceVersion": class.resource_version()}});
        ctx.classes()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
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
        let has = secret.finalizers().iter().any(|f| f == MC_SECRET_FINALIZER);
        let want = referenced.contains(&secret.name_any());
        if has == want {
            continue;
        }
        let finalizers: Vec<String> = if want {
            secret
                .finalizers()
                .iter()
                .cloned()
                .chain([MC_SECRET_FINALIZER.to_owned()])
                .collect()
        } else {
            secret
                .finalizers()
                .iter()
                .filter(|f| *f != MC_SECRET_FINALIZER)
                .cloned()
                .collect()
        };
        let body = json!({"metadata": {"finalizers": finalizers, "resourceVersion": secret.resource_version()}});
        secrets
            .patch(
                &secret.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await?;
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
        }
    };
    tokio::select! {
        () = collector => {}
        () = shutdown => {}
    }
}

/// One pass over every Equinix class of the namespace. Devices are listed before Machines, so
/// a device whose Machine exists is always seen with it. Returns how many devices were deleted.
pub async fn collect_orphans(ctx: &GardenerContext) -> Result<usize, Error> {
    let classes = ctx.classes().list(&ListParams::default()).await?;
    let mut deleted = 0;
    for class in classes
        .items
        .iter()
        .filter(|c| c.spec.provider.as_deref() == Some(PROVIDER_EQUINIX_METAL))
    {
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
