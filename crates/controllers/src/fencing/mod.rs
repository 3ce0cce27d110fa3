//! Fencing of dead Nodes through their BMCs (`ingot run --controllers fencing`, opt-in).
//!
//! A Node NotReady longer than `--fencing-after-seconds`, named by exactly one Inventory
//! (Harvester Seeder's embedded mode, `metal.harvesterhci.io/local-node-name`), is powered off
//! with a rufio Job on the Inventory's Machine; only once that Job completed and the Machine
//! reads the power off does the Node get `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`,
//! so that Kubernetes detaches its volumes and deletes its pods (non-graceful node shutdown).
//! Once its pods are gone the server is powered on again (`--fencing-recovery power-on`) or
//! left off (`stay-off`); once the Node is Ready, the taint ingot added is removed.
//!
//! - [`phase`]: the rules, pure: what to do with one Node given what was observed.
//! - [`execute`]: the observation (from watch stores; a Ready Node costs no API call) and the
//!   writes: Jobs named after the episode (created first, then recorded on the Node: a pass
//!   after a crash gets "already exists" and adopts the Job), the taint and ingot's record of
//!   it on the Node (one write, guarded by `resourceVersion`), a condition on the Inventory and
//!   an Event on the Node and the Inventory for every decision.
//! - [`remediation`]: medik8s NodeHealthCheck as the decider: a BMCRemediation makes its Node a
//!   candidate now, its deletion releases the Node; its conditions say how it went.

pub mod execute;
pub mod phase;
pub mod remediation;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use ingot_api::remediation::BMCRemediation;
use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::Inventory;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::warn;

use crate::Metrics;
use crate::runtime::{self, Backoff, ControllerRuntime, EventRecorder, ReconcileError, Retry};
use crate::seeder::inventory::node_name;

pub use phase::{MaxUnhealthy, Recovery};

const CONTROLLER: &str = "fencing";
/// The controller of BMCRemediations whose Node does not exist.
const ORPHANS_CONTROLLER: &str = "fencing-remediation-orphans";
/// The component of the fencing Events.
const EVENT_COMPONENT: &str = "ingot-fencing";
/// The label of fencing's rufio Jobs: the Node they fence.
pub const JOB_NODE_LABEL: &str = "fencing.ingot.dev/node";

/// Settings of the fencing controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Inventories, Machines and Jobs of this namespace only; `None`: every namespace.
    pub namespace: Option<String>,
    /// `--fencing-after-seconds`: NotReady this long before a Node is fenced.
    pub after: Duration,
    /// `--fencing-max-unhealthy`.
    pub max_unhealthy: MaxUnhealthy,
    /// `--fencing-recovery`.
    pub recovery: Recovery,
    /// `--fencing-remediations-only`: only Nodes a BMCRemediation (medik8s NodeHealthCheck)
    /// names are fenced; ingot's own NotReady delay decides nothing.
    pub remediations_only: bool,
    /// Test builds: the armed crash points.
    pub crash_point: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            after: Duration::from_secs(300),
            max_unhealthy: MaxUnhealthy::Percent(40),
            recovery: Recovery::PowerOn,
            remediations_only: false,
            crash_point: None,
        }
    }
}

/// The stores of the fencing controller's watches.
#[derive(Clone)]
pub struct Stores {
    pub nodes: Store<Node>,
    pub inventories: Store<Inventory>,
    pub machines: Store<Machine>,
    pub jobs: Store<Job>,
    pub remediations: Store<BMCRemediation>,
}

/// What the fencing controller needs, built by `ingot run`.
pub struct FencingContext {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    pub(crate) events: EventRecorder,
    stores: OnceLock<Stores>,
}

impl FencingContext {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: String,
        settings: Settings,
    ) -> Self {
        FencingContext {
            events: EventRecorder::new(client.clone(), EVENT_COMPONENT, Some(instance)),
            client,
            metrics,
            settings,
            stores: OnceLock::new(),
        }
    }

    fn stores(&self) -> Result<Stores, Error> {
        self.stores.get().cloned().ok_or(Error::NotStarted)
    }

    fn api_in<K: crate::NamespacedKind>(&self) -> Api<K> {
        crate::api_in(&self.client, self.settings.namespace.as_deref())
    }
}

/// Errors of the fencing reconciler (retried with backoff by the controller).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the fencing controller's stores are not ready")]
    NotStarted,
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::NotStarted => "not_started",
        }
    }

    fn retry(&self) -> Retry {
        match self {
            Error::Kube(e) if runtime::is_conflict(e) => Retry::Conflict,
            _ => Retry::Backoff,
        }
    }
}

/// Runs the fencing controller until `shutdown`: every Node, woken by its own changes, by its
/// Inventory's, Machine's and fencing Jobs' changes, and by its requeues.
pub async fn run(
    ctx: Arc<FencingContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (nodes, node_events) = crate::lean_reflector(
        Api::<Node>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let (inventories, inventory_events) =
        crate::lean_reflector(ctx.api_in::<Inventory>(), watcher::Config::default());
    let (machines, machine_events) =
        crate::lean_reflector(ctx.api_in::<Machine>(), watcher::Config::default());
    let (jobs, job_events) = crate::lean_reflector(
        ctx.api_in::<Job>(),
        watcher::Config::default().labels(JOB_NODE_LABEL),
    );
    // BMCRemediations in every namespace: one from a namespace that may not act on its Node is
    // refused with a condition, so it must be seen.
    let (remediations, remediation_events) = crate::lean_reflector(
        Api::<BMCRemediation>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let stores = Stores {
        nodes: nodes.clone(),
        inventories: inventories.clone(),
        machines,
        jobs,
        remediations: remediations.clone(),
    };
    let _ = ctx.stores.set(stores.clone());
    // The Node controller never sees a Node that no longer exists: the BMCRemediations of one
    // go to a second controller, woken by each remediation's change and by its Node's deletion.
    // Bounded: a wake that finds it full is dropped with a warning (the controller drains it
    // as fast as the watches fill it; only a stalled one fills it).
    let (mut orphans_tx, orphans_rx) =
        futures::channel::mpsc::channel::<Result<BMCRemediation, watcher::Error>>(ORPHAN_WAKES);
    let mut on_remediation = orphans_tx.clone();
    let remediation_events = remediation_events.inspect(move |event| {
        if let Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) = event {
            wake_orphan(&mut on_remediation, r);
        }
    });
    let of_deleted_node = remediations.clone();
    let node_events = node_events.inspect(move |event| {
        if let Ok(watcher::Event::Delete(node)) = event {
            let name = node.name_any();
            for r in of_deleted_node.state() {
                if remediation::node_of(&r) == name {
                    wake_orphan(&mut orphans_tx, &r);
                }
            }
        }
    });
    let by_machine = inventories.clone();
    let controller = Controller::for_stream(node_events.applied_objects(), nodes)
        .watches_stream(
            inventory_events.applied_objects(),
            |inventory: Inventory| node_name(&inventory).map(ObjectRef::new),
        )
        .watches_stream(machine_events.applied_objects(), move |machine: Machine| {
            let reference = ObjectRef::new(&machine.name_any())
                .within(&machine.namespace().unwrap_or_default());
            let inventory = by_machine.get(&reference)?;
            node_name(&inventory).map(ObjectRef::new)
        })
        .watches_stream(job_events.applied_objects(), |job: Job| {
            job.labels().get(JOB_NODE_LABEL).map(|n| ObjectRef::new(n))
        })
        .watches_stream(remediation_events.applied_objects(), |r: BMCRemediation| {
            Some(ObjectRef::new(&remediation::node_of(&r)))
        })
        .with_config(Config::default().concurrency(16));
    let backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(120));
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    let orphans = Controller::for_stream(orphans_rx, remediations);
    let orphans_backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(120));
    let orphans_runtime =
        ControllerRuntime::new(ORPHANS_CONTROLLER, ctx.metrics.clone(), orphans_backoff);
    let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
    tokio::join!(
        runtime::run(
            controller,
            runtime,
            ctx.clone(),
            reconcile,
            shutdown.clone()
        ),
        runtime::run(
            orphans,
            orphans_runtime,
            ctx,
            remediation::reconcile_without_node,
            shutdown
        ),
    );
}

/// Remediation wakes queued at most for the orphans controller.
const ORPHAN_WAKES: usize = 1024;

fn wake_orphan(
    tx: &mut futures::channel::mpsc::Sender<Result<BMCRemediation, watcher::Error>>,
    remediation: &BMCRemediation,
) {
    if tx.try_send(Ok(remediation.clone())).is_err() {
        warn!(
            remediation = %remediation.name_any(),
            "the remediation wake queue is full; this wake is dropped"
        );
    }
}

async fn reconcile(node: Arc<Node>, ctx: Arc<FencingContext>) -> Result<Action, Error> {
    let stores = ctx.stores()?;
    let name = node.name_any();
    let readiness = execute::readiness(&node);
    let record = execute::Record::read(&node);
    let remediations: Vec<Arc<BMCRemediation>> = stores
        .remediations
        .state()
        .into_iter()
        .filter(|r| remediation::node_of(r) == name)
        .collect();
    // A Node with nothing of fencing on it that fencing would not take up: no API call.
    let not_due =
        ctx.settings.remediations_only || !matches!(readiness, phase::Readiness::NotReady(_));
    if not_due && record.is_empty() && remediations.is_empty() {
        return Ok(Action::await_change());
    }
    let observed = execute::observe(&node, readiness, &record, &ctx, &stores, remediations).await?;
    let inventory_namespace = observed.inventory.as_ref().and_then(|i| i.namespace());
    remediation::report_others(
        &ctx,
        &name,
        inventory_namespace.as_deref(),
        &observed.remediations,
    )
    .await?;
    // The finalizer before anything is done for it: its deletion must release the Node.
    if let Some(driver) = &observed.remediations.driver
        && remediation::hold(&ctx, driver).await?
    {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let phase = phase::phase(&observed.state);
    let outcome = phase::step(&observed.state);
    let action = execute::execute(&node, &ctx, &observed, outcome.clone()).await?;
    if let Some(driver) = &observed.remediations.driver
        && let Some(changes) = remediation::conditions_for(phase, &outcome)
    {
        remediation::write_status(&ctx, driver, &changes).await?;
    }
    // Released: ingot lets go once nothing of the episode is left on the Node.
    if let Some(released) = &observed.remediations.released
        && (outcome == phase::Outcome::Recover || phase == phase::Phase::Healthy)
    {
        remediation::let_go(&ctx, released).await?;
    }
    Ok(action)
}
