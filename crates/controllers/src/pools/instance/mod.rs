//! The Instance reconciler: one Equinix Metal server through the seed's flow.
//!
//! `""` → create the server (iPXE shell boot) → `queued` → once active: network mode and
//! VLANs, MACs of the management interfaces, final Harvester config as userdata, iPXE pointed
//! at the installer, reinstall → `reinstalling` → active again → `ready` (IPs filled) → a Node
//! of the same name → `managed`. A managed Node that stays NotReady longer than
//! `nodeCleanupWaitInterval` (from its Ready condition's lastTransitionTime) is cordoned, drained and its
//! Instance deleted; the pool creates a replacement.
//!
//! With `singleBoot` (Harvester v1.1 and later) the first boot is the install: the iPXE script
//! passes the management MACs as `${netN/mac}` kernel arguments and the userdata holds the rest
//! of the config, so there is no reinstall: `queued` -> active -> `ready`.
//!
//! Safety: the finalizer is on the Instance before the server is created; the server carries
//! the tag `ingot-instance:<uid>` and is adopted, not duplicated, after a crash; `instanceID`
//! is written as soon as the server exists; deletion deletes the server (404 counts as gone),
//! then the Node, then the finalizers (the Go addon's too).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ingot_api::equinix::{
    INSTANCE_FINALIZER, Instance, InstancePool, InstanceStatus, POOL_LABEL,
    WRANGLER_INSTANCE_FINALIZER, instance_status,
};
use ingot_harvester::{
    Artifacts, HarvesterVersion, InstallBoot, JoinConfig, ManagementNetwork, SHELL_SCRIPT,
};
use ingot_metal::{
    BareMetalCloud, Boot, BootUpdate, CreateServer, NetworkMode, PortKind, Reinstall, Server,
    ServerState,
};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, EvictParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::{READY_CONDITION, Settings, credentials, join, publish, update_condition};
use crate::Context;

const CONTROLLER: &str = "instance";
/// Tag prefix marking a server as this Instance's, with its UID.
pub const OWNER_TAG_PREFIX: &str = "ingot-instance:";
/// Key of the OS password in an Instance's password Secret.
const PASSWORD_KEY: &str = "password";
/// Annotations in which the Go addon kept credentials in the clear.
const PLAINTEXT_ANNOTATIONS: [&str; 2] = ["token", "password"];
/// The reinstall iPXE script URL the Go addon kept on its Instances.
const RECONFIG_ANNOTATION: &str = "reconfig_ipxe_url";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Equinix Metal API: {0}")]
    Metal(#[from] ingot_metal::Error),
}

impl Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Metal(error) => error.kind(),
        }
    }
}

pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let instances: Api<Instance> = Api::all(ctx.client.clone());
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    Controller::new(instances, watcher::Config::default().any_semantic())
        // A Node is its Instance's by name (the server's hostname).
        .watches(nodes, watcher::Config::default(), |node| {
            Some(ObjectRef::<Instance>::new(&node.name_any()))
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "instance reconciliation failed");
            }
        })
        .await;
}

async fn reconcile(instance: Arc<Instance>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = Reconciler {
        instance: &instance,
        ctx: &ctx,
        settings: &ctx.pools.settings,
    }
    .run()
    .await;
    ctx.metrics.reconciled(CONTROLLER, started.elapsed());
    result
}

fn error_policy(_instance: Arc<Instance>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error.metric_label());
    Action::requeue(Duration::from_secs(5))
}

struct Reconciler<'a> {
    instance: &'a Instance,
    ctx: &'a Context,
    settings: &'a Settings,
}

/// Why the Instance cannot progress now: a reason, a message, and when to look again.
struct Blocked {
    reason: &'static str,
    message: String,
    retry: Duration,
}

impl Reconciler<'_> {
    fn name(&self) -> String {
        self.instance.name_any()
    }

    fn owner_tag(&self) -> String {
        format!(
            "{OWNER_TAG_PREFIX}{}",
            self.instance.metadata.uid.as_deref().unwrap_or_default()
        )
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
        let credentials = match credentials::load(&self.ctx.client, &self.settings.secret).await {
            Ok(credentials) => credentials,
            Err(problem) => {
                return self
                    .blocked(Blocked {
                        reason: problem.reason(),
                        message: problem.to_string(),
                        retry: Duration::from_secs(30),
                    })
                    .await;
            }
        };
        let cloud = self.ctx.pools.cloud(&credentials)?;
        let step = match self.status().status.as_str() {
            instance_status::NEW => self.create(&cloud).await,
            instance_status::QUEUED | instance_status::SUBMITTED => self.install(&cloud).await,
            instance_status::REINSTALLING => self.await_reinstall(&cloud).await,
            instance_status::READY => self.await_node(&cloud).await,
            instance_status::MANAGED => self.watch_health().await,
            other => {
                warn!(instance = %self.name(), status = other, "unknown instance status; starting over");
                self.write_status(|s| s.status = instance_status::NEW.to_owned())
                    .await?;
                Ok(Ok(Action::requeue(Duration::ZERO)))
            }
        };
        match step {
            Ok(Ok(action)) => Ok(action),
            Ok(Err(blocked)) => self.blocked(blocked).await,
            Err(Error::Metal(error)) if !error.is_transient() => {
                let reason = metal_reason(&error);
                self.blocked(Blocked {
                    reason,
                    message: error.to_string(),
                    retry: Duration::from_secs(60),
                })
                .await
            }
            Err(error) => Err(error),
        }
    }

    /// `""`: create the server (or adopt the one a crash left), write its id at once.
    async fn create(&self, cloud: &dyn BareMetalCloud) -> Result<Result<Action, Blocked>, Error> {
        let spec = &self.instance.spec;
        let (Some(plan), Some(metro)) = (spec.plan.clone(), spec.metro.clone()) else {
            return Ok(Err(Blocked {
                reason: "InvalidSpec",
                message: "spec.plan and spec.metro are required to create a server".to_owned(),
                retry: Duration::from_secs(300),
            }));
        };
        let (boot, userdata) = if spec.single_boot == Some(true) {
            // The first boot installs: the iPXE script from ingot, the config in the userdata.
            let Some(script_url) = self.install_script_url() else {
                return Ok(Err(no_ipxe_url()));
            };
            let config = match self.join_config().await? {
                Ok(config) => config,
                Err(blocked) => return Ok(Err(blocked)),
            };
            match config.render_intermediate() {
                Ok(userdata) => (
                    Boot::Ipxe {
                        script_url: Some(script_url),
                        always: false,
                    },
                    userdata,
                ),
                Err(error) => return Ok(Err(invalid_config(error))),
            }
        } else {
            // The seed's first boot: an iPXE shell, so the server turns active and shows its
            // MAC addresses before anything is installed.
            (
                Boot::Ipxe {
                    script_url: None,
                    always: false,
                },
                SHELL_SCRIPT.to_owned(),
            )
        };
        let mut request = CreateServer::new(self.name(), plan, metro, self.owner_tag(), boot);
        request.userdata = Some(userdata);
        request.tags = spec.tags.clone().unwrap_or_default();
        request.billing = match spec.billing_cycle.as_deref() {
            Some("daily") => Some(ingot_metal::Billing::Daily),
            Some("monthly") => Some(ingot_metal::Billing::Monthly),
            Some("yearly") => Some(ingot_metal::Billing::Yearly),
            Some("hourly") => Some(ingot_metal::Billing::Hourly),
            _ => None,
        };
        if spec.spot_instance == Some(true) {
            request.spot_price_max = spec.spot_price_max.as_deref().and_then(|p| p.parse().ok());
        }
        request.reservation_id = spec
            .hardware_reservation_id
            .clone()
            .filter(|r| !r.is_empty());
        request.project_ssh_keys = spec.project_ssh_keys.clone().unwrap_or_default();
        request.user_ssh_keys = spec.user_ssh_keys.clone().unwrap_or_default();

        let server = cloud.create_server(&request).await?;
        info!(instance = %self.name(), server = %server.id, "server created");
        let single_boot = spec.single_boot == Some(true);
        self.write_status(|s| {
            s.status = instance_status::QUEUED.to_owned();
            s.instance_id = server.id.clone();
            s.install_started_at = single_boot.then(|| Time(Timestamp::now()));
        })
        .await?;
        self.set_ready(
            false,
            "Provisioning",
            &format!("server {} is being provisioned", server.id),
        )
        .await?;
        self.event(
            EventType::Normal,
            "ServerCreated",
            format!("created server {} ({})", server.id, server.provider_id),
        )
        .await;
        Ok(Ok(Action::requeue(self.poll())))
    }

    /// `queued`: once the server is active, wire its network; in the seed's flow render the
    /// final config, point iPXE at the installer and reinstall.
    async fn install(&self, cloud: &dyn BareMetalCloud) -> Result<Result<Action, Blocked>, Error> {
        let Some(server) = self.current_server(cloud).await? else {
            return Ok(Ok(Action::requeue(Duration::ZERO)));
        };
        match &server.state {
            ServerState::Active => {}
            ServerState::Failed => return self.replace_failed_server(cloud, &server).await,
            state if state.is_in_progress() => {
                return Ok(self.within(
                    self.settings.provision_timeout,
                    "ProvisioningTimeout",
                    "the server did not become active",
                ));
            }
            other => {
                return Ok(Err(Blocked {
                    reason: "UnexpectedServerState",
                    message: format!(
                        "server {} is {other:?}; waiting for it to become active",
                        server.id
                    ),
                    retry: Duration::from_secs(30),
                }));
            }
        }
        let server = match self.apply_network(cloud, &server).await? {
            Ok(server) => server,
            Err(blocked) => return Ok(Err(blocked)),
        };
        if self.instance.spec.single_boot == Some(true) {
            // The first boot was the install: no reinstall.
            return self.installed(&server).await;
        }
        let Some(script_url) = self.install_script_url() else {
            return Ok(Err(no_ipxe_url()));
        };
        if server.ipxe_script_url.as_deref() == Some(script_url.as_str()) {
            // The reinstall into the installer (which is what sets this URL) was requested before a
            // restart lost the status write; the server is active again, so it has installed.
            return self.installed(&server).await;
        }

        let spec = &self.instance.spec;
        let ports: Vec<ingot_harvester::Port> = server.ports.iter().map(harvester_port).collect();
        let bond_options = spec.management_bonding_options.clone().unwrap_or_default();
        let mgmt =
            match ManagementNetwork::from_ports(&management_interfaces(spec), &ports, bond_options)
            {
                Ok(mgmt) => mgmt,
                Err(error) => {
                    return Ok(Err(Blocked {
                        reason: "InvalidManagementInterfaces",
                        message: error.to_string(),
                        retry: Duration::from_secs(300),
                    }));
                }
            };
        let config = match self.join_config().await? {
            Ok(config) => config,
            Err(blocked) => return Ok(Err(blocked)),
        };
        let userdata = match config.render_final(&mgmt) {
            Ok(userdata) => userdata,
            Err(error) => return Ok(Err(invalid_config(error))),
        };
        cloud
            .update_boot(
                &server.id,
                &BootUpdate {
                    ipxe_script_url: None,
                    userdata: Some(userdata),
                    always_pxe: None,
                },
            )
            .await?;
        cloud
            .reinstall(
                &server.id,
                &Reinstall {
                    preserve_data: true,
                    deprovision_fast: true,
                    os: None,
                    ipxe_script_url: Some(script_url),
                },
            )
            .await?;
        self.write_status(|s| {
            s.status = instance_status::REINSTALLING.to_owned();
            s.install_started_at = Some(Time(Timestamp::now()));
        })
        .await?;
        self.set_ready(
            false,
            "Installing",
            &format!("server {} is installing Harvester", server.id),
        )
        .await?;
        self.event(
            EventType::Normal,
            "Installing",
            format!(
                "server {} reinstalls into Harvester, joining {}",
                server.id, config.server
            ),
        )
        .await;
        Ok(Ok(Action::requeue(self.poll())))
    }

    /// Harvester is installed: fill in the addresses, then wait for the Node.
    async fn installed(&self, server: &Server) -> Result<Result<Action, Blocked>, Error> {
        let public = server
            .management_address(true, 4)
            .unwrap_or_default()
            .to_owned();
        let private = server
            .management_address(false, 4)
            .unwrap_or_default()
            .to_owned();
        self.write_status(|s| {
            s.status = instance_status::READY.to_owned();
            s.public_ip = public.clone();
            s.private_ip = private.clone();
            // A restart that lost the reinstall's status write leaves no start time: count
            // from now.
            s.install_started_at
                .get_or_insert_with(|| Time(Timestamp::now()));
        })
        .await?;
        self.set_ready(
            false,
            "Joining",
            "Harvester is installed; waiting for the Node to join",
        )
        .await?;
        Ok(Ok(Action::requeue(Duration::from_secs(1))))
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
        let join = match join::discover(&self.ctx.client, &self.settings.join).await {
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

    /// Network mode and VLANs, as the pool asked; idempotent (the provider reads port state).
    async fn apply_network(
        &self,
        cloud: &dyn BareMetalCloud,
        server: &Server,
    ) -> Result<Result<Server, Blocked>, Error> {
        let Some(networking) = &self.instance.spec.networking_configuration else {
            return Ok(Ok(server.clone()));
        };
        let mut server = server.clone();
        if let Some(mode) = networking.type_.as_deref().filter(|t| !t.is_empty()) {
            let Some(mode) = NetworkMode::parse(mode) else {
                return Ok(Err(Blocked {
                    reason: "InvalidNetworkType",
                    message: format!(
                        "spec.networkingConfiguration.type {mode:?} is not a Metal network type"
                    ),
                    retry: Duration::from_secs(300),
                }));
            };
            server = cloud.set_network_mode(&server.id, mode).await?;
        }
        for interface in networking.interface_configuration.iter().flatten() {
            let Some(name) = interface.name.as_deref() else {
                continue;
            };
            let vlans = interface.vlan_ids.clone().unwrap_or_default();
            if vlans.is_empty() {
                continue;
            }
            let Some(port) = server.port(name) else {
                let existing: Vec<&str> = server.ports.iter().map(|p| p.name.as_str()).collect();
                return Ok(Err(Blocked {
                    reason: "NoSuchPort",
                    message: format!(
                        "networkingConfiguration names port {name}, which server {} does not have (it has {existing:?})",
                        server.id
                    ),
                    retry: Duration::from_secs(300),
                }));
            };
            if self.instance.spec.create_missing_vlans == Some(true) {
                for vxlan in vlans.iter().filter_map(|v| v.parse::<u32>().ok()) {
                    let description = format!("created by ingot for {}", self.name());
                    cloud
                        .ensure_vlan(&server.location, vxlan, &description)
                        .await?;
                }
            }
            cloud.assign_vlans(&port.id, &vlans).await?;
        }
        Ok(Ok(cloud.get_server(&server.id).await?))
    }

    /// `reinstalling`: active again means installed.
    async fn await_reinstall(
        &self,
        cloud: &dyn BareMetalCloud,
    ) -> Result<Result<Action, Blocked>, Error> {
        let Some(server) = self.current_server(cloud).await? else {
            return Ok(Ok(Action::requeue(Duration::ZERO)));
        };
        match &server.state {
            ServerState::Active => self.installed(&server).await,
            ServerState::Failed => self.replace_failed_server(cloud, &server).await,
            _ => Ok(self.within(
                self.settings.provision_timeout,
                "ReinstallTimeout",
                "the server did not come back from its reinstall",
            )),
        }
    }

    /// `ready`: wait for a Node of the Instance's name.
    async fn await_node(
        &self,
        cloud: &dyn BareMetalCloud,
    ) -> Result<Result<Action, Blocked>, Error> {
        let nodes: Api<Node> = Api::all(self.ctx.client.clone());
        if nodes.get_opt(&self.name()).await?.is_some() {
            self.write_status(|s| s.status = instance_status::MANAGED.to_owned())
                .await?;
            self.set_ready(true, "Joined", "the server joined the cluster as a Node")
                .await?;
            self.event(
                EventType::Normal,
                "Joined",
                "the Node joined the cluster".to_owned(),
            )
            .await;
            return Ok(Ok(Action::requeue(Duration::from_secs(60))));
        }
        // Node events wake this up; the requeue only bounds the wait.
        // An install that has not joined within the retry period is started again: its iPXE
        // script may have been unreachable, or the installer may have failed.
        let started = self.status().install_started_at.map(|t| t.0);
        if let Some(started) = started {
            let waited =
                Duration::try_from(Timestamp::now().duration_since(started)).unwrap_or_default();
            if waited > self.settings.install_retry {
                let Some(script_url) = self.install_script_url() else {
                    return Ok(Err(no_ipxe_url()));
                };
                let id = self.status().instance_id;
                let reinstall = Reinstall {
                    preserve_data: true,
                    deprovision_fast: true,
                    os: None,
                    ipxe_script_url: Some(script_url),
                };
                cloud.reinstall(&id, &reinstall).await?;
                self.write_status(|s| {
                    s.status = instance_status::REINSTALLING.to_owned();
                    s.install_started_at = Some(Time(Timestamp::now()));
                })
                .await?;
                let message = format!(
                    "no Node joined within {}s of the install; installing server {id} again",
                    waited.as_secs()
                );
                self.event(EventType::Warning, "InstallRetried", message)
                    .await;
                return Ok(Ok(Action::requeue(self.poll())));
            }
        }
        Ok(self.within(
            self.settings.join_timeout,
            "JoinTimeout",
            "no Node joined after the install",
        ))
    }

    /// `managed`: replace a Node that stays NotReady past nodeCleanupWaitInterval.
    async fn watch_health(&self) -> Result<Result<Action, Blocked>, Error> {
        let Some(interval) = self
            .instance
            .spec
            .node_cleanup_wait_interval
            .as_deref()
            .and_then(parse_go_duration)
        else {
            return Ok(Ok(Action::await_change()));
        };
        let nodes: Api<Node> = Api::all(self.ctx.client.clone());
        let Some(node) = nodes.get_opt(&self.name()).await? else {
            return Ok(Ok(Action::requeue(interval)));
        };
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let Some(ready) = ready.filter(|c| c.status != "True") else {
            return Ok(Ok(Action::await_change()));
        };
        let since = ready
            .last_transition_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let unhealthy_for =
            Duration::try_from(Timestamp::now().duration_since(since)).unwrap_or_default();
        if unhealthy_for < interval {
            return Ok(Ok(Action::requeue(
                interval - unhealthy_for + Duration::from_secs(1),
            )));
        }
        // At most one replacement per pool at a time.
        if self.pool_replacement_in_progress().await? {
            return Ok(Ok(Action::requeue(Duration::from_secs(15))));
        }
        let message = format!(
            "Node {} has not been Ready for {}s (longer than nodeCleanupWaitInterval {}): replacing it",
            self.name(),
            unhealthy_for.as_secs(),
            self.instance
                .spec
                .node_cleanup_wait_interval
                .as_deref()
                .unwrap_or_default()
        );
        nodes
            .patch(
                &self.name(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"unschedulable": true}})),
            )
            .await?;
        if let Err(blocked) = self.drain().await? {
            return Ok(Err(blocked));
        }
        self.pool_event(
            EventType::Warning,
            "ReplacingUnhealthyNode",
            message.clone(),
        )
        .await;
        self.event(EventType::Warning, "ReplacingUnhealthyNode", message)
            .await;
        let instances: Api<Instance> = Api::all(self.ctx.client.clone());
        instances
            .delete(&self.name(), &DeleteParams::default())
            .await?;
        Ok(Ok(Action::await_change()))
    }

    /// Evicts the Node's pods (not DaemonSet or mirror pods), honouring PodDisruptionBudgets:
    /// a refused eviction holds the replacement back and says so. The Node is not Ready, so
    /// its kubelet may never confirm the deletions; accepted evictions are enough to go on.
    async fn drain(&self) -> Result<Result<(), Blocked>, Error> {
        let pods: Api<Pod> = Api::all(self.ctx.client.clone());
        let on_node = pods
            .list(
                &kube::api::ListParams::default().fields(&format!("spec.nodeName={}", self.name())),
            )
            .await?;
        for pod in on_node.items {
            let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
            let mirror = pod
                .annotations()
                .contains_key("kubernetes.io/config.mirror");
            if daemon || mirror || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let namespace = pod.namespace().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &namespace);
            match api.evict(&pod.name_any(), &EvictParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(kube::Error::Api(status)) if status.code == 429 => {
                    return Ok(Err(Blocked {
                        reason: "DrainBlocked",
                        message: format!(
                            "evicting pod {namespace}/{} from Node {} is refused by a PodDisruptionBudget; the replacement waits",
                            pod.name_any(),
                            self.name()
                        ),
                        retry: Duration::from_secs(30),
                    }));
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(Ok(()))
    }

    async fn pool_replacement_in_progress(&self) -> Result<bool, Error> {
        let Some(pool) = self.instance.labels().get(POOL_LABEL) else {
            return Ok(false);
        };
        let instances: Api<Instance> = Api::all(self.ctx.client.clone());
        let siblings = instances
            .list(&kube::api::ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
            .await?;
        Ok(siblings
            .items
            .iter()
            .any(|i| i.metadata.deletion_timestamp.is_some() && i.name_any() != self.name()))
    }

    /// The server this Instance owns, by id; a vanished server sends the Instance back to `""`
    /// so that a new one is created.
    async fn current_server(&self, cloud: &dyn BareMetalCloud) -> Result<Option<Server>, Error> {
        let id = self.status().instance_id;
        match cloud.get_server(&id).await {
            Ok(server) if !server.state.is_gone() => Ok(Some(server)),
            Ok(_) | Err(ingot_metal::Error::NotFound { .. }) => {
                self.event(
                    EventType::Warning,
                    "ServerVanished",
                    format!("server {id} is gone; creating a new one"),
                )
                .await;
                self.write_status(|s| {
                    s.status = instance_status::NEW.to_owned();
                    s.instance_id = String::new();
                })
                .await?;
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    }

    async fn replace_failed_server(
        &self,
        cloud: &dyn BareMetalCloud,
        server: &Server,
    ) -> Result<Result<Action, Blocked>, Error> {
        let message = format!(
            "server {} failed to provision; deleting it and creating a new one",
            server.id
        );
        self.set_ready(false, "ProvisioningFailed", &message)
            .await?;
        self.event(EventType::Warning, "ProvisioningFailed", message)
            .await;
        cloud.delete_server(&server.id).await?;
        self.write_status(|s| {
            s.status = instance_status::NEW.to_owned();
            s.instance_id = String::new();
        })
        .await?;
        Ok(Ok(Action::requeue(Duration::from_secs(30))))
    }

    /// Keeps waiting until `timeout` after the Instance was created, then reports it.
    fn within(
        &self,
        timeout: Duration,
        reason: &'static str,
        what: &str,
    ) -> Result<Action, Blocked> {
        let created = self
            .instance
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let waited =
            Duration::try_from(Timestamp::now().duration_since(created)).unwrap_or_default();
        if waited > timeout {
            Err(Blocked {
                reason,
                message: format!("{what} within {}s", timeout.as_secs()),
                retry: Duration::from_secs(60),
            })
        } else {
            Ok(Action::requeue(self.poll()))
        }
    }

    /// When to look at a server in progress again: the poll interval with 20% jitter, so that
    /// many servers created together do not poll the API in step.
    fn poll(&self) -> Duration {
        use rand::Rng;
        self.settings
            .poll_interval
            .mul_f64(rand::rng().random_range(0.8..1.2))
    }

    /// The install iPXE script: the Go addon's annotation if it set one, else the one ingot
    /// serves for this Instance.
    fn install_script_url(&self) -> Option<String> {
        if let Some(url) = self
            .instance
            .annotations()
            .get(RECONFIG_ANNOTATION)
            .filter(|u| !u.is_empty())
        {
            return Some(url.clone());
        }
        let base = self.settings.ipxe_base_url.as_ref()?;
        Some(format!(
            "{}/ipxe/instances/{}.ipxe",
            base.trim_end_matches('/'),
            self.name()
        ))
    }

    /// The OS password lives in a Secret owned by the Instance (never in annotations or status).
    async fn os_password(&self) -> Result<ingot_harvester::Secret, Error> {
        let secrets: Api<Secret> =
            Api::namespaced(self.ctx.client.clone(), &self.settings.secret.namespace);
        let name = format!("{}-os", self.name());
        if let Some(secret) = secrets.get_opt(&name).await?
            && let Some(value) = secret.data.as_ref().and_then(|d| d.get(PASSWORD_KEY))
            && let Ok(password) = String::from_utf8(value.0.clone())
        {
            return Ok(ingot_harvester::Secret::new(password));
        }
        let password = random_password();
        let owner = OwnerReference {
            api_version: Instance::api_version(&()).into_owned(),
            kind: Instance::kind(&()).into_owned(),
            name: self.name(),
            uid: self.instance.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name),
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
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Box::pin(self.os_password()).await
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Deletion: the server (404 counts as gone), then the Node, then the finalizers.
    async fn finalize(&self) -> Result<Action, Error> {
        if !self.has_finalizer(INSTANCE_FINALIZER)
            && !self.has_finalizer(WRANGLER_INSTANCE_FINALIZER)
        {
            return Ok(Action::await_change());
        }
        let credentials = match credentials::load(&self.ctx.client, &self.settings.secret).await {
            Ok(credentials) => credentials,
            Err(problem) => {
                // Without credentials the server cannot be deleted: keep the finalizer rather
                // than leak a billed server, and say why.
                let message = format!("cannot delete the server: {problem}");
                return self
                    .blocked(Blocked {
                        reason: problem.reason(),
                        message,
                        retry: Duration::from_secs(30),
                    })
                    .await;
            }
        };
        let cloud = self.ctx.pools.cloud(&credentials)?;
        let mut ids = Vec::new();
        let id = self.status().instance_id;
        if !id.is_empty() {
            ids.push(id);
        }
        // A server created just before a crash, whose id never reached the status.
        if let Some(server) = cloud.find_server(&self.owner_tag(), &self.name()).await?
            && !ids.contains(&server.id)
        {
            ids.push(server.id);
        }
        for id in &ids {
            cloud.delete_server(id).await?;
            info!(instance = %self.name(), server = %id, "server deleted");
        }
        let nodes: Api<Node> = Api::all(self.ctx.client.clone());
        match nodes.delete(&self.name(), &DeleteParams::default()).await {
            Ok(_) => info!(instance = %self.name(), "node deleted"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
        let remaining: Vec<String> = self
            .instance
            .finalizers()
            .iter()
            .filter(|f| {
                f.as_str() != INSTANCE_FINALIZER && f.as_str() != WRANGLER_INSTANCE_FINALIZER
            })
            .cloned()
            .collect();
        self.patch_finalizers(remaining).await?;
        Ok(Action::await_change())
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.instance.finalizers().iter().any(|f| f == finalizer)
    }

    async fn add_finalizer(&self) -> Result<(), Error> {
        let mut finalizers = self.instance.finalizers().to_vec();
        finalizers.push(INSTANCE_FINALIZER.to_owned());
        self.patch_finalizers(finalizers).await
    }

    /// Replaces the finalizer list, guarded by the resourceVersion read, so another writer's
    /// finalizer is never dropped.
    async fn patch_finalizers(&self, finalizers: Vec<String>) -> Result<(), Error> {
        let instances: Api<Instance> = Api::all(self.ctx.client.clone());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": self.instance.resource_version()}});
        instances
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    async fn write_status(&self, change: impl FnOnce(&mut InstanceStatus)) -> Result<(), Error> {
        let mut status = self.status();
        change(&mut status);
        status.observed_generation = self.instance.metadata.generation;
        let instances: Api<Instance> = Api::all(self.ctx.client.clone());
        instances
            .patch_status(
                &self.name(),
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": status })),
            )
            .await?;
        Ok(())
    }

    async fn set_ready(&self, ok: bool, reason: &str, message: &str) -> Result<bool, Error> {
        let mut status = self.status();
        let (changed, flipped) = update_condition(
            &mut status.conditions,
            READY_CONDITION,
            ok,
            reason,
            message,
            self.instance.metadata.generation,
        );
        if changed {
            let instances: Api<Instance> = Api::all(self.ctx.client.clone());
            let patch = json!({"status": {"conditions": status.conditions}});
            instances
                .patch_status(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(flipped)
    }

    async fn blocked(&self, blocked: Blocked) -> Result<Action, Error> {
        if self
            .set_ready(false, blocked.reason, &blocked.message)
            .await?
        {
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
        publish(self.ctx, self.instance, type_, reason, "Provision", note).await;
    }

    async fn pool_event(&self, type_: EventType, reason: &str, note: String) {
        let Some(pool) = self.instance.labels().get(POOL_LABEL) else {
            return;
        };
        let pools: Api<InstancePool> = Api::all(self.ctx.client.clone());
        if let Ok(Some(pool)) = pools.get_opt(pool).await {
            publish(self.ctx, &pool, type_, reason, "Provision", note).await;
        }
    }
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
        _ => "MetalError",
    }
}

fn harvester_port(port: &ingot_metal::Port) -> ingot_harvester::Port {
    let kind = match port.kind {
        PortKind::Bond => ingot_harvester::PortKind::Bond,
        PortKind::Physical => ingot_harvester::PortKind::Physical,
    };
    ingot_harvester::Port {
        name: port.name.clone(),
        kind,
        mac: port.mac.clone(),
    }
}

fn random_password() -> String {
    use rand::Rng;
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rng();
    (0..20)
        .map(|_| char::from(LETTERS[rng.random_range(0..LETTERS.len())]))
        .collect()
}

/// A Go duration (`5m`, `1h30m`, `90s`, `1.5h`); the CRD already refuses anything else.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let (unit, seconds) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .filter(|(unit, _)| rest.starts_with(unit))
        .max_by_key(|(unit, _)| unit.len())?;
        rest = &rest[unit.len()..];
        total += number * seconds;
    }
    Some(Duration::from_secs_f64(total))
}

fn no_ipxe_url() -> Blocked {
    Blocked {
        reason: "NoIpxeUrl",
        message: "no URL for the install iPXE script: start ingot with --ipxe-base-url (where servers reach ingot)".to_owned(),
        retry: Duration::from_secs(60),
    }
}

fn invalid_config(error: ingot_harvester::ConfigError) -> Blocked {
    Blocked {
        reason: "InvalidConfig",
        message: error.to_string(),
        retry: Duration::from_secs(300),
    }
}

fn management_interfaces(spec: &ingot_api::equinix::InstanceSpec) -> Vec<String> {
    spec.management_interfaces
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| vec![ingot_api::equinix::DEFAULT_MANAGEMENT_INTERFACE.to_owned()])
}

/// Why an install script cannot be rendered for an Instance.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error(transparent)]
    Version(#[from] ingot_harvester::VersionError),
    #[error(transparent)]
    Artifacts(#[from] ingot_harvester::ArtifactsError),
    #[error(transparent)]
    Ipxe(#[from] ingot_harvester::IpxeError),
    #[error("the installer's config URL: {0}")]
    Url(#[from] url::ParseError),
}

/// The install iPXE script ingot serves for an Instance at `/ipxe/instances/<name>.ipxe`: the
/// installer of its Harvester release, with the management MACs on the kernel command line
/// when it boots once (`singleBoot`).
pub fn install_script(settings: &Settings, instance: &Instance) -> Result<String, ScriptError> {
    let spec = &instance.spec;
    let version = HarvesterVersion::parse_or_default(spec.harvester_version.as_deref())?;
    let artifacts = Artifacts::new(&version, settings.harvester_mirror.as_deref())?;
    let mut boot = InstallBoot::reinstall(artifacts)?;
    if spec.single_boot == Some(true) {
        boot.single_boot = Some(ingot_harvester::ipxe::SingleBoot {
            interfaces: management_interfaces(spec),
            bond_options: spec.management_bonding_options.clone().unwrap_or_default(),
        });
    }
    Ok(boot.script()?)
}

#[cfg(test)]
mod tests {
    use super::parse_go_duration;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("5m0s"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("5 minutes"), None);
        assert_eq!(parse_go_duration(""), None);
    }
}
