//! Creation and health of a Machine (upstream `reconcileClusterMachine`,
//! `triggerCreationFlow`, `reconcileMachineHealth`).
//!
//! The device is found by hostname and cluster tag before any create, so a reconcile killed
//! between the create and the `spec.providerID` write adopts the device instead of creating a
//! second one.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ingot_api::gardener::{MCM_FINALIZER, Machine, MachineClass, NODE_LABEL};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::driver::{MachineRequest, SecretData};
use super::lifecycle::{
    self, HealthInputs, Lifecycle, NodeView, Outcome as HealthOutcome, Timeout,
};
use super::status::{self, OpState, OpType, Phase, Update};
use crate::runtime::{self, ControllerRuntime, finalizer};

use super::{
    CONFLICT_RETRY, CRITICAL_COMPONENTS_NOT_READY, Code, Error, GardenerContext, LONG_RETRY,
    MACHINE_NAME_LABEL, MACHINE_PRIORITY, MEDIUM_RETRY, PRESERVE_ANNOTATION, SHORT_RETRY, Status,
    bootstrap, delete, error_backoff, go_duration, has_finalizer, parse_go_duration,
};

/// The `controller` label of the reconcile metrics.
const CONTROLLER: &str = "gardener-machine";
/// How often a Pending or Unknown machine is looked at until its timeout.
const HEALTH_RECHECK: Duration = Duration::from_secs(60);
/// How often a machine waiting for its deployment's failure permit looks again.
const FAILURE_BUDGET_RECHECK: Duration = Duration::from_secs(2);
/// The MachineDeployment name label on Machines (`GetMachineDeploymentName`).
pub const DEPLOYMENT_LABEL: &str = "name";

/// Runs the Machine controller until `shutdown` completes. Nodes map to the Machine of their
/// `node.gardener.cloud/machine-name` label, or of their name (a Node is named after its
/// Machine on Equinix Metal); Nodes marked `not-managed-by-mcm` are ignored, as upstream's node
/// handlers ignore them.
pub async fn run(
    ctx: Arc<GardenerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let namespace = ctx.settings.namespace.clone();
    let nodes: Api<Node> = Api::all(ctx.target().clone());
    // One watch of the Nodes: it fills the Node cache, then triggers the reconcile, so that a
    // reconcile never sees an older Node than the event that caused it.
    let watch = watcher::watcher(nodes, watcher::Config::default()).default_backoff();
    let node_events = match ctx.nodes.take_writer() {
        Some(writer) => watch.reflect(writer).touched_objects().boxed(),
        None => watch.touched_objects().boxed(),
    };
    let controller = Controller::new(ctx.machines(), watcher::Config::default()).watches_stream(
        node_events,
        move |node: Node| {
            if not_managed(&node) {
                return None;
            }
            let name = node
                .labels()
                .get(MACHINE_NAME_LABEL)
                .cloned()
                .unwrap_or_else(|| node.name_any());
            Some(ObjectRef::<Machine>::new(&name).within(&namespace))
        },
    );
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), error_backoff());
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// Reconciles one Machine: another provider's is left alone, a deleted one goes through
/// [`delete`]; then the finalizers, then the function of its phase (parsed once).
pub(crate) async fn reconcile(
    machine: Arc<Machine>,
    ctx: Arc<GardenerContext>,
) -> Result<Action, Error> {
    let Some(class) = ctx.served_class(&machine).await? else {
        // Another provider's Machine, or its class is missing (upstream: LongRetry).
        return Ok(Action::requeue(LONG_RETRY));
    };
    if machine.metadata.deletion_timestamp.is_some() {
        return delete::reconcile(&machine, &class, &ctx).await;
    }
    if !has_finalizer(&machine) {
        finalizer::add(&ctx.machines(), machine.as_ref(), &[MCM_FINALIZER]).await?;
        return Ok(Action::await_change());
    }
    if !finalizer::has(&class, MCM_FINALIZER) {
        // Upstream requires the class finalizer before it creates anything.
        super::safety::reconcile_class(&ctx, &class).await?;
        return Ok(Action::requeue(CONFLICT_RETRY));
    }
    match Lifecycle::parse(status::phase(&machine)) {
        Lifecycle::New => create(&ctx, &machine, &class).await,
        Lifecycle::CrashLoopBackOff => crash_loop_back_off(&ctx, &machine, &class).await,
        Lifecycle::Failed => failed(&ctx, &machine).await,
        phase @ (Lifecycle::Pending
        | Lifecycle::Running
        | Lifecycle::Unknown
        | Lifecycle::Other) => linked(&ctx, &machine, &class, phase).await,
    }
}

/// `CrashLoopBackOff`: the health check (its Node may have joined after all), then the
/// creation again.
async fn crash_loop_back_off(
    ctx: &GardenerContext,
    machine: &Machine,
    class: &MachineClass,
) -> Result<Action, Error> {
    if let Some(action) = health(ctx, machine, Lifecycle::CrashLoopBackOff).await? {
        return Ok(action);
    }
    create(ctx, machine, class).await
}

/// `Failed`: the health check (a recovered Node re-joins), then the preservation.
async fn failed(ctx: &GardenerContext, machine: &Machine) -> Result<Action, Error> {
    if let Some(action) = health(ctx, machine, Lifecycle::Failed).await? {
        return Ok(action);
    }
    preserve(ctx, machine, &node_label(machine)).await
}

/// `Pending`, `Running`, `Unknown` (and phases other controllers write): the health check; a
/// machine that lost its provider id is created again (the device is found first).
async fn linked(
    ctx: &GardenerContext,
    machine: &Machine,
    class: &MachineClass,
    phase: Lifecycle,
) -> Result<Action, Error> {
    if let Some(action) = health(ctx, machine, phase).await? {
        return Ok(action);
    }
    if machine.spec.provider_id.as_deref().unwrap_or("").is_empty() {
        return create(ctx, machine, class).await;
    }
    Ok(Action::requeue(LONG_RETRY))
}

/// The Machine's `node` label, `""` without one.
fn node_label(machine: &Machine) -> String {
    machine
        .labels()
        .get(NODE_LABEL)
        .cloned()
        .unwrap_or_default()
}

/// The effective creation timeout: the annotation (HEAD), `spec.creationTimeout`, the flag.
pub fn creation_timeout(ctx: &GardenerContext, machine: &Machine) -> Duration {
    machine
        .annotations()
        .get("node.machine.sapcloud.io/effective-creation-timeout")
        .and_then(|v| parse_go_duration(v))
        .or_else(|| spec_duration(machine, "creationTimeout"))
        .unwrap_or(ctx.settings.creation_timeout)
}

pub fn spec_duration(machine: &Machine, key: &str) -> Option<Duration> {
    machine
        .spec
        .extra
        .get(key)
        .and_then(Value::as_str)
        .and_then(parse_go_duration)
}

fn age(since: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Duration {
    since
        .map(|t| Timestamp::now().duration_since(t.0))
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or_default()
}

fn since_status_update(machine: &Machine) -> Duration {
    let t = machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.last_update_time.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok());
    t.and_then(|t| Duration::try_from(Timestamp::now().duration_since(t)).ok())
        .unwrap_or_default()
}

/// The creation flow: find or create the device, record its provider id and the `node`
/// label, then go `Pending`.
async fn create(
    ctx: &GardenerContext,
    machine: &Machine,
    class: &MachineClass,
) -> Result<Action, Error> {
    let Some(secret) = user_data(ctx, machine, class).await? else {
        warn!(machine = %machine.name_any(), "the class's secret has no userData");
        return Ok(Action::requeue(SHORT_RETRY));
    };
    let req = MachineRequest {
        machine,
        class,
        secret: &secret,
    };
    let (node_name, provider_id) = match find_or_create(ctx, req).await {
        Ok(found) => found,
        Err(s) => return create_failed(ctx, machine, s).await,
    };
    if node_name.is_empty() || provider_id.is_empty() {
        return Ok(Action::requeue(MEDIUM_RETRY));
    }
    link(ctx, machine, &node_name, &provider_id).await
}

/// The class's secret data with the user data's placeholders filled in (the bootstrap token
/// made first); None when the Secret has no `userData`.
async fn user_data(
    ctx: &GardenerContext,
    machine: &Machine,
    class: &MachineClass,
) -> Result<Option<SecretData>, Error> {
    let name = machine.name_any();
    let mut secret = ctx.secret_data(class).await?;
    let Some(user_data) = secret.get_str("userData") else {
        return Ok(None);
    };
    let token = bootstrap::ensure_token(
        ctx.target(),
        &name,
        creation_timeout(ctx, machine),
        &ctx.settings.bootstrap_token_auth_extra_groups,
    )
    .await?;
    secret.0.insert(
        "userData".into(),
        bootstrap::substitute(&user_data, &token, &name).into_bytes(),
    );
    Ok(Some(secret))
}

/// The device's node name and provider id: the one the cloud finds for the Machine, else a
/// new one (only while the Machine has no provider id), else what the Machine already says.
async fn find_or_create(
    ctx: &GardenerContext,
    req: MachineRequest<'_>,
) -> Result<(String, String), Status> {
    let machine = req.machine;
    let provider_id = machine.spec.provider_id.clone().unwrap_or_default();
    match ctx.driver.get_machine_status(req.clone()).await {
        Ok(found) => Ok((found.node_name, found.provider_id)),
        Err(s)
            if matches!(s.code, Code::NotFound | Code::Unimplemented) && provider_id.is_empty() =>
        {
            let created = ctx.driver.create_machine(req).await?;
            info!(machine = %machine.name_any(), provider_id = %created.provider_id, "device created");
            ctx.crash_point("gardener-after-create");
            Ok((created.node_name, created.provider_id))
        }
        Err(s) if matches!(s.code, Code::NotFound | Code::Unimplemented) => {
            let node = machine
                .labels()
                .get(NODE_LABEL)
                .cloned()
                .unwrap_or_else(|| machine.name_any());
            Ok((node, provider_id))
        }
        Err(s) => Err(s),
    }
}

/// Records the device on the Machine (the `node` label, the default priority, the provider
/// id) where missing, then goes `Pending`.
async fn link(
    ctx: &GardenerContext,
    machine: &Machine,
    node_name: &str,
    provider_id: &str,
) -> Result<Action, Error> {
    let no_provider_id = machine.spec.provider_id.as_deref().unwrap_or("").is_empty();
    let no_priority = !machine.annotations().contains_key(MACHINE_PRIORITY);
    let no_label = machine
        .labels()
        .get(NODE_LABEL)
        .is_none_or(String::is_empty);
    if !(no_label || no_priority || no_provider_id) {
        return pending(ctx, machine).await;
    }
    let mut meta = json!({"labels": {NODE_LABEL: node_name}});
    if no_priority {
        meta["annotations"] = json!({MACHINE_PRIORITY: "3"});
    }
    let spec = no_provider_id.then(|| json!({"providerID": provider_id}));
    // With the label and provider id in place (upstream PR #1070), Pending follows at once on
    // the updated object: no second status call to the cloud.
    let updated = patch_metadata(ctx, machine, meta, spec).await?;
    pending(ctx, &updated).await
}

/// A machine whose device exists and is linked goes `Pending` (from `""` or `CrashLoopBackOff`).
async fn pending(ctx: &GardenerContext, machine: &Machine) -> Result<Action, Error> {
    let phase = status::phase(machine);
    if phase.is_empty() || phase == Phase::CrashLoopBackOff.as_str() {
        let mut update = Update::new(
            Some(Phase::Pending),
            OpType::Create,
            OpState::Processing,
            "Creating machine on cloud provider",
        );
        update.timeout_active = true;
        status::write(ctx, machine, update).await?;
        return Ok(Action::requeue(HEALTH_RECHECK));
    }
    Ok(Action::requeue(LONG_RETRY))
}

/// A failed create: `CrashLoopBackOff` until the creation timeout, then `Failed`; the error
/// code goes to `lastOperation.errorCode` (ResourceExhausted tells the autoscaler to back off).
async fn create_failed(
    ctx: &GardenerContext,
    machine: &Machine,
    s: Status,
) -> Result<Action, Error> {
    let timed_out =
        age(machine.metadata.creation_timestamp.as_ref()) > creation_timeout(ctx, machine);
    let phase = if timed_out {
        Phase::Failed
    } else {
        Phase::CrashLoopBackOff
    };
    let retry = match s.code {
        Code::ResourceExhausted => ctx.settings.resource_exhausted_retry,
        c if c.is_transient() => SHORT_RETRY,
        _ => MEDIUM_RETRY,
    };
    let keep_state = s.code == Code::ResourceExhausted || s.code.is_transient();
    let mut update = Update::new(
        Some(phase),
        OpType::Create,
        OpState::Failed,
        format!("Cloud provider message - {s}"),
    );
    update.error_code = Some(s.code);
    if !keep_state {
        update.last_known_state = Some(String::new());
    }
    status::write(ctx, machine, update).await?;
    Ok(Action::requeue(retry))
}

/// The health check of a machine linked to a Node (upstream `reconcileMachineHealth`): the
/// Node read from the watch's cache, linked back to the Machine, the verdict of
/// [`lifecycle::health`] carried out. Returns an action when it decided the outcome.
async fn health(
    ctx: &GardenerContext,
    machine: &Machine,
    phase: Lifecycle,
) -> Result<Option<Action>, Error> {
    let node_name = node_label(machine);
    if node_name.is_empty() {
        return Ok(None);
    }
    let node = ctx.nodes.node(ctx.target(), &node_name).await?;
    let view = node.as_ref().map(node_view);
    if let Some(node) = &node {
        if not_managed(node) {
            // Left alone: neither linked, nor finalized, nor followed when deleted (the orphan
            // pass takes the mark away once this Machine names it).
            tracing::debug!(machine = %machine.name_any(), node = %node_name, "node marked not-managed-by-mcm: left alone");
        } else if node.metadata.deletion_timestamp.is_none() {
            sync_node_link(ctx, node, &machine.name_any()).await?;
        }
    }
    let machine_conditions: Vec<Value> = machine
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let outcome = lifecycle::health(&HealthInputs {
        phase,
        machine_conditions: &machine_conditions,
        node: view.as_ref(),
        unhealthy_if_true: &effective_node_conditions(ctx, machine),
        creating: machine
            .status
            .as_ref()
            .and_then(|s| s.last_operation.as_ref())
            .is_some_and(|o| {
                o.type_.as_deref() == Some("Create") && o.state.as_deref() != Some("Successful")
            }),
    });
    let conditions = view.map_or(machine_conditions, |v| v.conditions);
    carry_out_health(ctx, machine, phase, outcome, &conditions).await
}

/// What the health check needs of a Node.
fn node_view(node: &Node) -> NodeView {
    NodeView {
        conditions: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| serde_json::to_value(c).ok())
                    .collect()
            })
            .unwrap_or_default(),
        critical_taint: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == CRITICAL_COMPONENTS_NOT_READY)),
        deleting: node.metadata.deletion_timestamp.is_some(),
        not_managed: not_managed(node),
    }
}

/// Does what the health verdict says; `conditions` are the Node's (the Machine's when the Node
/// is gone).
async fn carry_out_health(
    ctx: &GardenerContext,
    machine: &Machine,
    phase: Lifecycle,
    outcome: HealthOutcome,
    conditions: &[Value],
) -> Result<Option<Action>, Error> {
    let name = machine.name_any();
    let unknown = |description: String| {
        Update::new(
            Some(Phase::Unknown),
            OpType::HealthCheck,
            OpState::Processing,
            description,
        )
    };
    match outcome {
        HealthOutcome::NodeGone => {
            let d = format!(
                "Node object went missing. Machine {name} is unhealthy - changing MachinePhase to Unknown"
            );
            status::write(ctx, machine, unknown(d)).await?;
            Ok(Some(Action::requeue(HEALTH_RECHECK)))
        }
        HealthOutcome::DeleteMachine => {
            info!(machine = %name, "node is being deleted: deleting its machine");
            match ctx
                .machines()
                .delete(&name, &kube::api::DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            Ok(Some(Action::await_change()))
        }
        HealthOutcome::CopyConditions => {
            status::write_conditions(ctx, machine, conditions).await?;
            Ok(Some(Action::requeue(CONFLICT_RETRY)))
        }
        HealthOutcome::Joined { first } => joined(ctx, machine, first).await.map(Some),
        HealthOutcome::Unhealthy => {
            let d = format!(
                "Machine {name} is unhealthy - changing MachinePhase to Unknown. Node conditions: {}",
                Value::Array(conditions.to_vec())
            );
            status::write(ctx, machine, unknown(d)).await?;
            Ok(Some(Action::requeue(HEALTH_RECHECK)))
        }
        HealthOutcome::CheckTimeouts => timeouts(ctx, machine, phase, conditions).await,
        HealthOutcome::Healthy => Ok(None),
    }
}

/// A healthy Node: `Running`; on the first join the bootstrap token goes.
async fn joined(ctx: &GardenerContext, machine: &Machine, first: bool) -> Result<Action, Error> {
    let name = machine.name_any();
    let (description, kind) = if first {
        (
            format!("Machine {name} successfully joined the cluster"),
            OpType::Create,
        )
    } else {
        (
            format!("Machine {name} successfully re-joined the cluster"),
            OpType::HealthCheck,
        )
    };
    status::write(
        ctx,
        machine,
        Update::new(Some(Phase::Running), kind, OpState::Successful, description),
    )
    .await?;
    if first && let Err(error) = bootstrap::delete_token(ctx.target(), &name).await {
        warn!(machine = %name, %error, "deleting the bootstrap token");
    }
    Ok(Action::requeue(LONG_RETRY))
}

/// Pending past the creation timeout, or Unknown past the health timeout: `Failed`.
async fn timeouts(
    ctx: &GardenerContext,
    machine: &Machine,
    phase: Lifecycle,
    conditions: &[Value],
) -> Result<Option<Action>, Error> {
    let (elapsed, limit, disabled) = match phase {
        Lifecycle::Pending => (
            age(machine.metadata.creation_timestamp.as_ref()),
            creation_timeout(ctx, machine),
            false,
        ),
        Lifecycle::Unknown => (
            since_status_update(machine),
            spec_duration(machine, "healthTimeout").unwrap_or(ctx.settings.health_timeout),
            machine
                .spec
                .extra
                .get("disableHealthTimeout")
                .and_then(Value::as_bool)
                == Some(true),
        ),
        _ => return Ok(None),
    };
    match lifecycle::timeout(phase, elapsed, limit, disabled, HEALTH_RECHECK) {
        Timeout::None => Ok(None),
        Timeout::Recheck(after) => Ok(Some(Action::requeue(after))),
        Timeout::Expired(Phase::Pending) => {
            let update = Update::new(
                Some(Phase::Failed),
                OpType::Create,
                OpState::Failed,
                format!(
                    "Machine {} failed to join the cluster in {} minutes.",
                    machine.name_any(),
                    go_duration(limit)
                ),
            );
            status::write(ctx, machine, update).await?;
            Ok(Some(Action::requeue(LONG_RETRY)))
        }
        Timeout::Expired(_) => unhealthy_too_long(ctx, machine, limit, conditions)
            .await
            .map(Some),
    }
}

/// Unknown past the health timeout: `Failed`, one machine of a MachineDeployment at a time
/// (upstream's permit per deployment): the next is marked Failed, and so replaced, once no
/// other is being replaced.
async fn unhealthy_too_long(
    ctx: &GardenerContext,
    machine: &Machine,
    timeout: Duration,
    conditions: &[Value],
) -> Result<Action, Error> {
    let name = machine.name_any();
    let deployment = machine.labels().get(DEPLOYMENT_LABEL).cloned();
    let lock = deployment.as_deref().map(|d| ctx.failure_lock(d));
    let _permit = match &lock {
        Some(lock) => Some(lock.lock().await),
        None => None,
    };
    if let Some(deployment) = &deployment
        && replacing_in(ctx, deployment, &name).await? > 0
    {
        info!(machine = %name, %deployment, "unhealthy past the health timeout; waiting for another machine of the deployment to be replaced first");
        return Ok(Action::requeue(FAILURE_BUDGET_RECHECK));
    }
    let mut update = Update::new(
        Some(Phase::Failed),
        OpType::HealthCheck,
        OpState::Failed,
        format!(
            "Machine {name} health checks failing since last {} minutes. Updating machine phase to Failed. Node Conditions: {}",
            go_duration(timeout),
            Value::Array(conditions.to_vec())
        ),
    );
    // Upstream keeps the previous operation type.
    if let Some(kind) = machine
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .and_then(|o| o.type_.as_deref())
    {
        update.kind = if kind == "Create" {
            OpType::Create
        } else {
            OpType::HealthCheck
        };
    }
    status::write(ctx, machine, update).await?;
    Ok(Action::requeue(LONG_RETRY))
}

/// Preservation of a Failed machine (upstream v0.62): with the preserve annotation
/// (`now`, `when-failed`, or MCM's `auto-preserved`) on the Machine or its Node, the machine gets
/// `currentStatus.preserveExpiryTime`, and MCM leaves it alone until then.
async fn preserve(
    ctx: &GardenerContext,
    machine: &Machine,
    node_name: &str,
) -> Result<Action, Error> {
    let expiry = machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.extra.get("preserveExpiryTime"))
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<Timestamp>().ok());
    if let Some(expiry) = expiry {
        let left = Duration::try_from(expiry.duration_since(Timestamp::now())).unwrap_or_default();
        if !left.is_zero() {
            return Ok(Action::requeue(left + Duration::from_millis(100)));
        }
        // Expired: drop the annotation (no re-preservation), then the expiry; MCM then
        // replaces the machine.
        info!(machine = %machine.name_any(), "preservation expired");
        if machine.annotations().contains_key(PRESERVE_ANNOTATION) {
            patch_metadata(
                ctx,
                machine,
                json!({"annotations": {PRESERVE_ANNOTATION: null}}),
                None,
            )
            .await?;
            return Ok(Action::requeue(CONFLICT_RETRY));
        }
        status::clear_preserve_expiry(ctx, machine).await?;
        return Ok(Action::requeue(LONG_RETRY));
    }
    let mut value = machine.annotations().get(PRESERVE_ANNOTATION).cloned();
    if value.is_none() && !node_name.is_empty() {
        value = ctx
            .nodes
            .node(ctx.target(), node_name)
            .await?
            .and_then(|n| n.annotations().get(PRESERVE_ANNOTATION).cloned());
    }
    if !matches!(
        value.as_deref(),
        Some("now" | "when-failed" | "auto-preserved")
    ) {
        return Ok(Action::requeue(LONG_RETRY));
    }
    let timeout =
        spec_duration(machine, "machinePreserveTimeout").unwrap_or(ctx.settings.preserve_timeout);
    let until = Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
            timeout.as_secs() as i64,
        ))
        .unwrap_or(Timestamp::MAX);
    info!(machine = %machine.name_any(), until = %until, "failed machine preserved");
    status::write_preserve_expiry(ctx, machine, until).await?;
    Ok(Action::requeue(timeout))
}

/// Machines of a MachineDeployment (other than `except`) that are neither Running nor Unknown,
/// read from the API (not a cache) so that the one just marked Failed counts. A preserved
/// Failed machine does not count; a Terminating one counts twice, as upstream.
async fn replacing_in(
    ctx: &GardenerContext,
    deployment: &str,
    except: &str,
) -> Result<usize, Error> {
    let list = ctx
        .machines()
        .list(&kube::api::ListParams::default().labels(&format!("{DEPLOYMENT_LABEL}={deployment}")))
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|m| m.name_any() != except)
        .map(|m| {
            let preserved = m
                .status
                .as_ref()
                .and_then(|s| s.current_status.as_ref())
                .is_some_and(|c| {
                    c.extra
                        .get("preserveExpiryTime")
                        .is_some_and(|v| !v.is_null())
                });
            match status::phase(m) {
                "Running" | "Unknown" => 0,
                "Failed" if preserved => 0,
                "Terminating" => 2,
                _ => 1,
            }
        })
        .sum())
}

fn effective_node_conditions(ctx: &GardenerContext, machine: &Machine) -> Vec<String> {
    machine
        .spec
        .extra
        .get("nodeConditions")
        .and_then(Value::as_str)
        .map(|s| {
            s.split(',')
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect()
        })
        .unwrap_or_else(|| ctx.settings.node_conditions.clone())
}

/// The Node carries upstream's `not-managed-by-mcm` mark.
fn not_managed(node: &Node) -> bool {
    node.annotations().contains_key(super::NOT_MANAGED_BY_MCM)
}

/// Puts `node.gardener.cloud/machine-name` on the Node and the node finalizer.
async fn sync_node_link(
    ctx: &GardenerContext,
    node: &Node,
    machine_name: &str,
) -> Result<(), Error> {
    let labelled = node.labels().get(MACHINE_NAME_LABEL).map(String::as_str) == Some(machine_name);
    let finalized = node.finalizers().iter().any(|f| f == super::NODE_FINALIZER);
    if labelled && finalized || node.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let mut finalizers = node.finalizers().to_vec();
    if !finalized {
        finalizers.push(super::NODE_FINALIZER.to_owned());
    }
    let nodes: Api<Node> = Api::all(ctx.target().clone());
    let body = json!({"metadata": {
        "resourceVersion": node.resource_version(),
        "labels": {MACHINE_NAME_LABEL: machine_name},
        "finalizers": finalizers,
    }});
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await?;
    Ok(())
}

/// A merge patch of the Machine's metadata (and spec), guarded by its resourceVersion.
pub(crate) async fn patch_metadata(
    ctx: &GardenerContext,
    machine: &Machine,
    mut metadata: Value,
    spec: Option<Value>,
) -> Result<Machine, Error> {
    metadata["resourceVersion"] = json!(machine.resource_version());
    let mut body = json!({"metadata": metadata});
    if let Some(spec) = spec {
        body["spec"] = spec;
    }
    Ok(ctx
        .machines()
        .patch(
            &machine.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await?)
}
