//! The Instance reconciler: one Equinix Metal server through the seed's flow, as the state
//! machine of [`phase`]:
//!
//! `""` → create the server (iPXE shell boot) → `queued` → once active: network mode and
//! VLANs, final Harvester config as userdata, reinstall into the installer → `reinstalling` →
//! active again → `ready` (IPs filled) → a Node of the same name → `managed` (the userdata is
//! scrubbed of the join token and OS password).
//!
//! With `singleBoot` (Harvester v1.1 and later) the first boot is the install: `queued` →
//! active → `ready`.
//!
//! This module reads the cluster, runs the phase function, and is the one place that writes
//! status, the `Ready` condition and Events. Replacement of unhealthy Nodes is decided by the
//! pool (see [`super::health`]), not here.
//!
//! Safety: the finalizer is on the Instance before the server is created; the server carries
//! the tag `ingot-instance:<uid>`, and every server with it is adopted or deleted, never
//! duplicated; the intent to reinstall is in status before the call.

mod finalize;
pub mod phase;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::equinix::{
    INSTANCE_FINALIZER, Instance, InstancePool, InstanceStatus, POOL_LABEL, instance_status,
};
use ingot_api::seeder::Inventory;
use ingot_harvester::{Artifacts, HarvesterVersion, JoinConfig};
use ingot_metal::BareMetalCloud;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, ReflectHandle};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::PoolsContext;
use super::cache::PASSWORD_SECRET_LABEL;
pub use super::ipxe::{ScriptError, install_script};
use super::{READY_CONDITION, Settings, credentials, join, update_condition};
use crate::onprem::wipe::WipePolicy;
use crate::provisioning::node::phase::BootMedia;
use crate::runtime::{self, ControllerRuntime, ReconcileError, finalizer};
use phase::{Blocked, Inputs, Outcome, Phase, Ready, Transition};

const CONTROLLER: &str = "instance";
/// Tag prefix marking a server as this Instance's, with its UID.
pub const OWNER_TAG_PREFIX: &str = "ingot-instance:";
/// Key of the OS password in an Instance's password Secret.
const PASSWORD_KEY: &str = "password";
/// Annotations in which the Go addon kept credentials in the clear.
const PLAINTEXT_ANNOTATIONS: [&str; 2] = ["token", "password"];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Equinix Metal API: {0}")]
    Metal(#[from] ingot_metal::Error),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Metal(error) => error.kind(),
        }
    }
}

pub(crate) async fn run(
    ctx: Arc<PoolsContext>,
    instances: ReflectHandle<Instance>,
    nodes: ReflectHandle<Node>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_shared_stream(instances, ctx.shared.caches.instances.clone())
        // A Node is its Instance's by name (the server's hostname).
        .watches_shared_stream(nodes, |node| {
            Some(ObjectRef::<Instance>::new(&node.name_any()))
        });
    let controller = match inventory_wakes(&ctx) {
        Some(wakes) => controller.reconcile_on(wakes),
        None => controller,
    };
    // The context holds a clone of this backoff: a refusal from Metal waits by it too.
    let runtime = ControllerRuntime::new(
        CONTROLLER,
        ctx.metrics.clone(),
        ctx.instance_backoff.clone(),
    );
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// With pools on premises (`--boot-url`): a watch of Inventories whose every Inventory that
/// turns up free and ready wakes the Instances waiting for one in its namespace, so they need
/// not wait for their next look (`--pool-no-inventory-retry-seconds`), and whose wipe reported
/// wakes the Instance releasing it, which would otherwise look again only after its back-off. The watch is only a wake-up: the claim
/// reads the Inventories itself, and a watch refused or failing delays nothing beyond that look.
fn inventory_wakes(
    ctx: &Arc<PoolsContext>,
) -> Option<impl futures::Stream<Item = ObjectRef<Instance>> + Send + 'static> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    ctx.shared.settings.boot_url.as_ref()?;
    let api: Api<Inventory> = Api::all(ctx.client.clone());
    let instances = ctx.shared.caches.instances.clone();
    let wakes = watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(|event| async move {
            event
                .inspect_err(|e| tracing::debug!(error = %e, "the Inventory watch of the pools failed; Instances waiting for one look again on their own"))
                .ok()
        })
        .flat_map(move |inventory| {
            let mut woken = waiting_for(&instances.state(), &inventory);
            woken.extend(wiped_for(&inventory));
            futures::stream::iter(woken)
        });
    Some(wakes)
}

/// The Instances a free, ready `inventory` may serve: those of its namespace whose last create
/// found no Inventory to take (their `Ready` reason one of [`ingot_metal::Shortage`]'s).
fn waiting_for(instances: &[Arc<Instance>], inventory: &Inventory) -> Vec<ObjectRef<Instance>> {
    if crate::onprem::claims::why_taken(inventory, &[]).is_some() {
        return Vec::new();
    }
    let namespace = inventory.namespace();
    instances
        .iter()
        .filter(|i| i.metadata.deletion_timestamp.is_none())
        .filter(|i| i.spec.inventory_namespace.is_some() && i.spec.inventory_namespace == namespace)
        .filter(|i| {
            i.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == READY_CONDITION
                        && matches!(c.reason.as_str(), "NoneMatching" | "NotReady" | "NoneFree")
                })
            })
        })
        .map(|i| ObjectRef::from_obj(i.as_ref()))
        .collect()
}

/// The Instance whose released server's wipe just reported (its claim's hostname is the
/// Instance's name): its release can go on.
fn wiped_for(inventory: &Inventory) -> Option<ObjectRef<Instance>> {
    if !crate::onprem::wipe::wiped(inventory) {
        return None;
    }
    let claim = crate::onprem::claims::claim_of(inventory)?;
    Some(ObjectRef::new(&claim.hostname))
}

async fn reconcile(instance: Arc<Instance>, ctx: Arc<PoolsContext>) -> Result<Action, Error> {
    Reconciler {
        instance: &instance,
        ctx: &ctx,
        settings: &ctx.shared.settings,
    }
    .run()
    .await
}

struct Reconciler<'a> {
    instance: &'a Instance,
    ctx: &'a PoolsContext,
    settings: &'a Settings,
}

impl Reconciler<'_> {
    fn name(&self) -> String {
        self.instance.name_any()
    }

    fn status(&self) -> InstanceStatus {
        self.instance.status.clone().unwrap_or_default()
    }

    async fn run(&self) -> Result<Action, Error> {
        if self.instance.metadata.deletion_timestamp.is_some() {
            return self.finalize().await;
        }
        if !self.has_finalizer(INSTANCE_FINALIZER) {
            // Before anything exists outside the cluster: a crash after this line cannot
            // leave an untracked server.
            self.add_finalizer().await?;
            return Ok(Action::requeue(Duration::ZERO));
        }
        // The Go addon kept the Metal token and the OS password in annotations; ingot reads
        // neither and removes both.
        if PLAINTEXT_ANNOTATIONS
            .iter()
            .any(|key| self.instance.annotations().contains_key(*key))
        {
            let instances: Api<Instance> = Api::all(self.ctx.client.clone());
            let patch = json!({"metadata": {"annotations": {"token": null, "password": null}}});
            instances
                .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(Action::requeue(Duration::ZERO));
        }
        let cloud = match self.cloud()? {
            Ok(cloud) => cloud,
            Err(blocked) => return self.blocked(blocked).await,
        };
        let Some(phase) = Phase::parse(&self.status().status) else {
            // Starting over would reinstall a server that may be a live, joined Node.
            warn!(instance = %self.name(), status = %self.status().status, "unknown instance status; blocked");
            return self.blocked(phase::unknown_status(&self.status())).await;
        };
        let single_boot = phase::single_boot(self.instance);
        let needs_join = match phase {
            Phase::New => single_boot,
            Phase::Queued | Phase::Ready => !single_boot,
            Phase::Reinstalling | Phase::Managed => false,
        };
        let join = if needs_join {
            Some(self.join_config().await?)
        } else {
            None
        };
        let node_exists =
            phase == Phase::Ready && self.ctx.shared.caches.node(&self.name()).is_some();
        let inputs = Inputs {
            instance: self.instance,
            settings: self.settings,
            now: Timestamp::now(),
            join,
            node_exists,
            jitter: jitter(),
        };
        match phase::step(phase, &inputs, cloud.as_ref()).await {
            Ok(outcome) => self.apply(outcome, cloud.as_ref()).await,
            Err(error) => self.metal_error(error).await,
        }
    }

    /// Where this Instance's server comes from: the Inventories its pool names, or Equinix
    /// Metal with the credentials. Why neither can be used now, as a refusal.
    pub(super) fn cloud(&self) -> Result<Result<Arc<dyn BareMetalCloud>, Blocked>, Error> {
        if phase::on_premises(self.instance) {
            return Ok(inventory_cloud(
                &self.ctx.client,
                self.settings,
                self.instance,
            ));
        }
        match credentials::load(&self.ctx.shared.caches.credentials, &self.settings.secret) {
            Ok(credentials) => Ok(Ok(self.ctx.shared.cloud(&credentials)?)),
            Err(problem) => Ok(Err(Blocked {
                reason: problem.reason(),
                message: problem.to_string(),
                retry: Duration::from_secs(30),
            })),
        }
    }

    /// A refusal from Metal (401, 403, 422, no capacity, ...) is a condition and an Event and
    /// waits with backoff; a transient failure is retried by the error policy.
    async fn metal_error(&self, error: ingot_metal::Error) -> Result<Action, Error> {
        if error.is_transient() {
            return Err(error.into());
        }
        if let ingot_metal::Error::NoServer { .. } = &error {
            // No Inventory free now: not a failure to back off from; one may be freed or
            // added at any time.
            return self
                .blocked(Blocked {
                    reason: metal_reason(&error),
                    message: error.to_string(),
                    retry: self.settings.no_inventory_retry,
                })
                .await;
        }
        let retry = self
            .ctx
            .instance_backoff
            .failed(&runtime::object_key(self.instance));
        self.blocked(Blocked {
            reason: metal_reason(&error),
            message: error.to_string(),
            retry: retry.max(Duration::from_secs(30)),
        })
        .await
    }

    /// Carries out what the phase function decided.
    async fn apply(&self, outcome: Outcome, cloud: &dyn BareMetalCloud) -> Result<Action, Error> {
        match outcome {
            Outcome::Transition(transition) => self.write(transition).await,
            Outcome::Wait(after) => Ok(Action::requeue(after)),
            Outcome::Blocked(blocked) => self.blocked(blocked).await,
            Outcome::Create { request } => {
                if let Some(blocked) = self.owner_pool_gone().await? {
                    return self.blocked(blocked).await;
                }
                let server = match cloud.create_missing_server(&request).await {
                    Ok(server) => server,
                    Err(error) => return self.metal_error(error).await,
                };
                // A crash here leaves a server whose id is not in the status: the next pass
                // finds it by its tag and adopts it.
                self.ctx.shared.crash_point("after-create");
                info!(instance = %self.name(), server = %server.id, "server created");
                let mut status = self.status();
                status.status = instance_status::QUEUED.to_owned();
                status.instance_id = server.id.clone();
                status.install_started_at = None;
                self.write(Transition {
                    status,
                    ready: Some(Ready {
                        ok: false,
                        reason: "Provisioning",
                        message: format!("server {} is being provisioned", server.id),
                    }),
                    note: Some(phase::Note {
                        warning: false,
                        reason: "ServerCreated",
                        message: format!("created server {} ({})", server.id, server.provider_id),
                    }),
                    requeue: self.settings.poll_interval.mul_f64(jitter()),
                })
                .await
            }
            Outcome::Reinstall {
                server_id,
                request,
                then,
            } => {
                // The intent first: after a crash from here on, the reinstall is taken as
                // requested and never requested twice.
                let intent =
                    phase::reinstall_intent(&self.status(), &then.status, Timestamp::now());
                self.write_status(&intent).await?;
                self.ctx.shared.crash_point("before-reinstall");
                if let Err(error) = cloud.reinstall(&server_id, &request).await {
                    // Refused or failed for sure: the intent is withdrawn before anything else.
                    if !error.is_transient() {
                        self.write_status_over(&intent, &self.status()).await?;
                    }
                    return self.metal_error(error).await;
                }
                self.ctx.shared.crash_point("after-reinstall");
                info!(instance = %self.name(), server = %server_id, "reinstall requested");
                self.write_with_base(intent, then).await
            }
        }
    }

    async fn write(&self, transition: Transition) -> Result<Action, Error> {
        self.write_with_base(self.status(), transition).await
    }

    /// The one place that writes status, the `Ready` condition and Events together.
    async fn write_with_base(
        &self,
        before: InstanceStatus,
        transition: Transition,
    ) -> Result<Action, Error> {
        let mut status = transition.status;
        status.conditions = before.conditions.clone();
        if status.status != before.status || status.phase_started_at.is_none() {
            status.phase_started_at = Some(Time(Timestamp::now()));
        }
        let mut news = false;
        if let Some(ready) = &transition.ready {
            let (_, flipped) = update_condition(
                &mut status.conditions,
                READY_CONDITION,
                ready.ok,
                ready.reason,
                &ready.message,
                self.instance.metadata.generation,
            );
            news = flipped;
        }
        status.observed_generation = self.instance.metadata.generation;
        if self.write_status_over(&before, &status).await? {
            // An Instance is `new` from its creation until its first phase is recorded.
            let entered = before
                .phase_started_at
                .as_ref()
                .or(if before.status.is_empty() {
                    self.instance.metadata.creation_timestamp.as_ref()
                } else {
                    None
                });
            if status.status != before.status
                && let Some(entered) = entered
            {
                let spent = Timestamp::now().duration_since(entered.0);
                self.ctx.metrics.phase_left(
                    &before.status,
                    Duration::try_from(spent).unwrap_or_default(),
                );
            }
        }
        if let Some(note) = transition.note {
            let type_ = if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.event(type_, note.reason, note.message.clone()).await;
            if note.warning {
                self.pool_event(
                    type_,
                    note.reason,
                    format!("Instance {}: {}", self.name(), note.message),
                )
                .await;
            }
        } else if news && let Some(ready) = &transition.ready {
            self.event(EventType::Normal, ready.reason, ready.message.clone())
                .await;
        }
        Ok(Action::requeue(transition.requeue))
    }

    async fn write_status(&self, status: &InstanceStatus) -> Result<bool, Error> {
        self.write_status_over(&self.status(), status).await
    }

    /// Writes `status` over `before` when it differs (fields set before and unset now are
    /// removed); returns whether it wrote.
    async fn write_status_over(
        &self,
        before: &InstanceStatus,
        status: &InstanceStatus,
    ) -> Result<bool, Error> {
        let instances: Api<Instance> = Api::all(self.ctx.client.clone());
        Ok(runtime::status::replace_if_changed(&instances, &self.name(), before, status).await?)
    }

    /// The join config of this Instance: release, cluster address and token, OS password.
    async fn join_config(&self) -> Result<Result<JoinConfig, Blocked>, Error> {
        let version = match HarvesterVersion::parse_or_default(
            self.instance.spec.harvester_version.as_deref(),
        ) {
            Ok(version) => version,
            Err(error) => {
                return Ok(Err(Blocked {
                    reason: "InvalidVersion",
                    message: error.to_string(),
                    retry: Duration::from_secs(300),
                }));
            }
        };
        let artifacts = match Artifacts::new(&version, self.settings.harvester_mirror.as_deref()) {
            Ok(artifacts) => artifacts,
            Err(error) => {
                return Ok(Err(Blocked {
                    reason: "InvalidMirror",
                    message: error.to_string(),
                    retry: Duration::from_secs(300),
                }));
            }
        };
        let join = match join::discover(&self.ctx.shared.caches.ingress, &self.settings.join) {
            Ok(join) => join,
            Err(problem) => {
                return Ok(Err(Blocked {
                    reason: problem.reason(),
                    message: problem.to_string(),
                    retry: Duration::from_secs(30),
                }));
            }
        };
        let password = self.os_password().await?;
        Ok(Ok(JoinConfig::new(
            version,
            join.address,
            join.token,
            self.name(),
            password,
            artifacts.iso.to_string(),
        )))
    }

    /// The OS password lives in a Secret owned by the Instance (never in annotations or status),
    /// read from the cache; one the cache does not hold yet (just made, or made before it was
    /// labelled for the cache) is read live, so a password is never made twice.
    async fn os_password(&self) -> Result<ingot_harvester::Secret, Error> {
        let namespace = &self.settings.secret.namespace;
        let name = format!("{}-os", self.name());
        let cached = self
            .ctx
            .shared
            .caches
            .passwords
            .get(&ObjectRef::new(&name).within(namespace));
        if let Some(password) = cached.as_deref().and_then(password_of) {
            return Ok(password);
        }
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), namespace);
        if let Some(password) = secrets.get_opt(&name).await?.as_ref().and_then(password_of) {
            return Ok(password);
        }
        let password = random_password();
        let owner = OwnerReference {
            api_version: <Instance as kube::Resource>::api_version(&()).into_owned(),
            kind: <Instance as kube::Resource>::kind(&()).into_owned(),
            name: self.name(),
            uid: self.instance.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    PASSWORD_SECRET_LABEL.to_owned(),
                    "true".to_owned(),
                )])),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            string_data: Some(BTreeMap::from([(
                PASSWORD_KEY.to_owned(),
                password.clone(),
            )])),
            ..Secret::default()
        };
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(ingot_harvester::Secret::new(password)),
            // Another reconcile made it first: use that one.
            Err(kube::Error::Api(status)) if status.code == 409 => secrets
                .get(&name)
                .await
                .ok()
                .as_ref()
                .and_then(password_of)
                .ok_or(Error::Kube(kube::Error::Api(status))),
            Err(error) => Err(error.into()),
        }
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        finalizer::has(self.instance, finalizer)
    }

    /// Adds ingot's finalizer, guarded by the resourceVersion read, so another writer's
    /// finalizer is never dropped.
    async fn add_finalizer(&self) -> Result<(), Error> {
        let instances: Api<Instance> = Api::all(self.ctx.client.clone());
        finalizer::add(&instances, self.instance, &[INSTANCE_FINALIZER]).await?;
        Ok(())
    }

    /// `Ready=False` with the reason; an Event on the Instance and its pool when it is news.
    /// Before a server is created: the owning pool, read now (a cache may still hold a pool
    /// just deleted, whose reconcile can create an Instance in the moment before garbage
    /// collection), must still be there and not being deleted; otherwise no server is made and
    /// garbage collection deletes this Instance.
    async fn owner_pool_gone(&self) -> Result<Option<Blocked>, Error> {
        let pools: Api<InstancePool> = Api::all(self.ctx.client.clone());
        for owner in self
            .instance
            .owner_references()
            .iter()
            .filter(|o| o.kind == "InstancePool")
        {
            let live = pools.get_opt(&owner.name).await?;
            let gone = match &live {
                None => true,
                Some(pool) => {
                    pool.metadata.uid.as_deref() != Some(owner.uid.as_str())
                        || pool.metadata.deletion_timestamp.is_some()
                }
            };
            if gone {
                return Ok(Some(Blocked {
                    reason: "PoolDeleted",
                    message: format!(
                        "pool {} is deleted or being deleted: no server is created for this Instance",
                        owner.name
                    ),
                    retry: Duration::from_secs(30),
                }));
            }
        }
        Ok(None)
    }

    async fn blocked(&self, blocked: Blocked) -> Result<Action, Error> {
        let mut status = self.status();
        let (changed, flipped) = update_condition(
            &mut status.conditions,
            READY_CONDITION,
            false,
            blocked.reason,
            &blocked.message,
            self.instance.metadata.generation,
        );
        if changed {
            let instances: Api<Instance> = Api::all(self.ctx.client.clone());
            let before = json!({"conditions": self.status().conditions});
            let after = json!({"conditions": status.conditions});
            runtime::status::patch_if_changed(&instances, &self.name(), Some(&before), &after)
                .await?;
        }
        if flipped {
            self.event(EventType::Warning, blocked.reason, blocked.message.clone())
                .await;
            self.pool_event(
                EventType::Warning,
                blocked.reason,
                format!("Instance {}: {}", self.name(), blocked.message),
            )
            .await;
        }
        Ok(Action::requeue(blocked.retry))
    }

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        self.ctx
            .instance_events
            .publish(self.instance, type_, reason, "Provision", note)
            .await;
    }

    async fn pool_event(&self, type_: EventType, reason: &str, note: String) {
        let Some(pool) = self.instance.labels().get(POOL_LABEL) else {
            return;
        };
        if let Some(pool) = self.ctx.shared.caches.pool(pool) {
            self.ctx
                .instance_events
                .publish(pool.as_ref(), type_, reason, "Provision", note)
                .await;
        }
    }
}

/// The cloud of an Instance whose pool draws from Inventories: its namespace (if the operator
/// allows pools it), its selector and AddressPool, acting for this Instance's tag only.
pub(crate) fn inventory_cloud(
    client: &kube::Client,
    settings: &Settings,
    instance: &Instance,
) -> Result<Arc<dyn BareMetalCloud>, Blocked> {
    let spec = &instance.spec;
    let namespace = spec.inventory_namespace.clone().unwrap_or_default();
    if !settings.inventory_namespaces.is_empty()
        && !settings.inventory_namespaces.contains(&namespace)
    {
        return Err(Blocked {
            reason: "InventoryNamespaceNotAllowed",
            message: format!(
                "spec.inventoryNamespace {namespace:?} is not a namespace ingot lets pools draw Inventories from ({}): use one of them, or have the operator's --pool-inventory-namespaces include it",
                settings.inventory_namespaces.join(", ")
            ),
            retry: Duration::from_secs(300),
        });
    }
    let Some(address_pool) = spec.address_pool.clone().filter(|p| !p.is_empty()) else {
        return Err(Blocked {
            reason: "NoAddressPool",
            message: "spec.addressPool is empty: name the AddressPool of inventoryNamespace the servers' addresses come from".to_owned(),
            retry: Duration::from_secs(300),
        });
    };
    let cloud = crate::onprem::cloud::InventoryCloud::new(
        client.clone(),
        crate::onprem::cloud::Settings {
            namespaces: vec![namespace.clone()],
            selector: spec.inventory_selector.clone().unwrap_or_default(),
            address_pool: crate::provisioning::addresses::PoolRef {
                namespace,
                name: address_pool,
            },
            off_wait: settings.release_off_wait,
            poll: Duration::from_secs(1),
            owner: Some(phase::owner_tag(instance)),
            boot_url: settings.boot_url.clone(),
            // The schema admits pxe and cd only.
            boot_media: BootMedia::parse(spec.boot_media.as_deref()).unwrap_or(BootMedia::Pxe),
            wipe: WipePolicy::parse(spec.wipe_policy.as_deref()).map_err(|why| Blocked {
                reason: "RequestRefused",
                message: format!("spec.{why}"),
                retry: Duration::from_secs(300),
            })?,
            wipe_image: settings.wipe_image.clone(),
            minimum: crate::onprem::size::Minimum::of(spec.inventory_minimum.as_ref()),
            crash_point: settings.crash_point.clone(),
        },
    )
    .map_err(|error| Blocked {
        reason: "RequestRefused",
        message: format!("spec.inventorySelector: {error}"),
        retry: Duration::from_secs(300),
    })?;
    Ok(Arc::new(cloud))
}

/// A random factor in [0.8, 1.2], so that servers created together do not poll in step.
fn jitter() -> f64 {
    use rand::Rng;
    rand::rng().random_range(0.8..1.2)
}

fn metal_reason(error: &ingot_metal::Error) -> &'static str {
    match error {
        ingot_metal::Error::Unauthorized { .. } => "Unauthorized",
        ingot_metal::Error::Forbidden { .. } => "Forbidden",
        ingot_metal::Error::NoCapacity { .. } => "NoCapacity",
        ingot_metal::Error::Validation { .. } | ingot_metal::Error::InvalidRequest(_) => {
            "RequestRefused"
        }
        ingot_metal::Error::NotFound { .. } => "NotFound",
        ingot_metal::Error::Conflict { .. } => "Conflict",
        ingot_metal::Error::NoServer { why, .. } => why.as_str(),
        ingot_metal::Error::NotOnPremises { .. } => "NotOnPremises",
        _ => "MetalError",
    }
}

fn password_of(secret: &Secret) -> Option<ingot_harvester::Secret> {
    let value = secret.data.as_ref()?.get(PASSWORD_KEY)?;
    let password = String::from_utf8(value.0.clone()).ok()?;
    Some(ingot_harvester::Secret::new(password))
}

fn random_password() -> String {
    use rand::Rng;
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rng();
    (0..20)
        .map(|_| char::from(LETTERS[rng.random_range(0..LETTERS.len())]))
        .collect()
}

/// A Go duration; kept here for callers of the former path.
pub use crate::duration::parse_go_duration;
