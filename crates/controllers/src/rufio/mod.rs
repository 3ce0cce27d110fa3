//! Tinkerbell Rufio (`bmc.tinkerbell.org/v1alpha1`): the Machine, Job and Task controllers.
//!
//! - [`machine`] keeps `status.powerState` and the `Contactable` condition, polling each BMC on
//!   an interval (with per-object jitter) through one cached session per BMC, and right after
//!   every Job of the Machine finishes.
//! - [`job`] runs a Job's actions in order as Tasks `<job>-task-<n>` owned by the Job.
//! - [`task`] runs one action on the BMC and completes only once the BMC reports the result.
//!
//! Status shapes, condition types and names are upstream Rufio's, so objects the Go Rufio
//! wrote are read, continued and deletable. Every BMC call goes through the session manager
//! (bounded fleet-wide and per BMC); each object is reconciled on its own, so a slow or dead
//! BMC holds only its own object.

pub mod bmcs;
pub mod coordination;
pub mod job;
pub mod machine;
pub mod secrets;
pub mod task;
pub mod tenancy;

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use ingot_api::rufio::{Machine, Task};
use ingot_bmc::ipmi::IpmiOptions;
use ingot_bmc::manager::{ManagerOptions, Observer, SessionManager};
use ingot_bmc::redfish::RedfishOptions;
use kube::Client;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tracing::warn;

use crate::Metrics;
use crate::runtime::{EventRecorder, ReconcileError};
pub use bmcs::Bmcs;
pub use coordination::Coordination;

/// Settings of the Rufio controllers.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Only this namespace (Rufio's `--kube-namespace`); `None`: every namespace.
    pub namespace: Option<String>,
    /// How often each Machine's power state is read (Rufio: 3 min), ±10 % per object.
    pub machine_interval: Duration,
    /// How long a Task may take before it fails (Rufio: 10 min).
    pub task_timeout: Duration,
    /// How often a running Task reads the BMC to see whether the action took effect.
    pub task_poll: Duration,
    /// Machines reconciled at once (each waits on its own BMC only).
    pub machine_concurrency: u16,
    /// Jobs and Tasks reconciled at once.
    pub task_concurrency: u16,
    /// BMC requests in flight across the fleet (a hedged read and its copies count once).
    pub fleet_limit: usize,
    /// Per-request timeout of a Redfish call.
    pub redfish_timeout: Duration,
    /// Per-exchange timeout of an IPMI request (retransmitted `ipmi_retries` times).
    pub ipmi_timeout: Duration,
    pub ipmi_retries: u32,
    /// How often the sessions of BMCs no Machine or Task refers to any more are logged out.
    pub evict_interval: Duration,
    /// Test hook (`INGOT_CRASH_POINT`): `rufio-after-send-ahead`, `rufio-after-destructive-send`;
    /// the Seeder controller's `seeder-after-job-create`.
    pub crash_point: Option<String>,
    /// Namespace pairs whose objects may refer to Secrets and Machines across (`FROM=TO`);
    /// every other reference stays in the object's namespace.
    pub cross_namespace: tenancy::CrossNamespace,
    /// CA certificates (PEM) trusted for BMC certificates besides the system roots.
    pub ca_bundle_pem: Option<Arc<Vec<u8>>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            machine_interval: Duration::from_secs(180),
            task_timeout: Duration::from_secs(600),
            task_poll: Duration::from_secs(3),
            machine_concurrency: 256,
            task_concurrency: 256,
            fleet_limit: 256,
            redfish_timeout: Duration::from_secs(10),
            ipmi_timeout: Duration::from_secs(1),
            ipmi_retries: 3,
            evict_interval: Duration::from_secs(60),
            crash_point: None,
            cross_namespace: tenancy::CrossNamespace::default(),
            ca_bundle_pem: None,
        }
    }
}

/// A cache that has not yet listed its objects: the caller reads the API server.
#[derive(Debug)]
pub(crate) struct CacheNotReady;

/// What the Rufio controllers share.
pub struct RufioContext {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// The Event recorders of the Machine, Job and Task controllers (`ingot-rufio`).
    pub(crate) machine_events: EventRecorder,
    pub(crate) job_events: EventRecorder,
    pub(crate) task_events: EventRecorder,
    pub settings: Settings,
    pub bmcs: Bmcs,
    /// The BMC credentials, kept until their Secret changes.
    pub secrets: secrets::SecretCache,
    /// What the Machine, Job and Task controllers tell each other in memory.
    pub(crate) coordination: Coordination,
    /// The Machine and Task controllers' caches: which objects still exist.
    machines: OnceLock<Store<Machine>>,
    tasks: OnceLock<Store<Task>>,
    /// Machines to read again now (a pushed power event).
    pub(crate) machine_wakes: crate::wakes::Wakes<Machine>,
}

impl RufioContext {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: String,
        settings: Settings,
    ) -> Self {
        let manager_options = ManagerOptions {
            per_bmc_limit: 1,
            fleet_limit: settings.fleet_limit,
            redfish: RedfishOptions {
                timeout: settings.redfish_timeout,
                ..RedfishOptions::default()
            },
            observer: Observer::new(metrics.clone()),
        };
        let ipmi = IpmiOptions {
            timeout: settings.ipmi_timeout,
            retries: settings.ipmi_retries,
            ..IpmiOptions::default()
        };
        let bmcs = Bmcs::new(
            |connectors| SessionManager::with_connectors(manager_options, connectors),
            ipmi,
        );
        let manager = Arc::downgrade(&bmcs.manager);
        metrics.on_scrape(move |metrics| {
            if let Some(manager) = manager.upgrade() {
                let (in_flight, limit) = manager.fleet_in_flight();
                metrics
                    .bmc
                    .fleet_in_flight
                    .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
                metrics
                    .bmc
                    .fleet_limit
                    .set(i64::try_from(limit).unwrap_or(i64::MAX));
            }
        });
        let events = || EventRecorder::new(client.clone(), EVENT_COMPONENT, Some(instance.clone()));
        RufioContext {
            secrets: secrets::SecretCache::new(settings.namespace.clone()),
            machine_events: events(),
            job_events: events(),
            task_events: events(),
            client,
            metrics,
            settings,
            bmcs,
            coordination: Coordination::default(),
            machines: OnceLock::new(),
            tasks: OnceLock::new(),
            machine_wakes: crate::wakes::Wakes::default(),
        }
    }

    /// Reads the Machine's power from its BMC now, whatever its interval (a pushed power
    /// event).
    pub fn wake_machine(&self, machine: ObjectRef<Machine>) {
        let key = format!(
            "{}/{}",
            machine.namespace.as_deref().unwrap_or_default(),
            machine.name
        );
        self.coordination.request_refresh(key);
        self.machine_wakes.wake(machine);
    }

    /// Aborts the process here if the tests asked for it (see [`Settings::crash_point`]).
    pub(crate) fn crash_point(&self, point: &str) {
        crate::crash_point(self.settings.crash_point.as_deref(), point);
    }

    /// Forgets sends ahead and own writes older than `older_than`, and the retries of Tasks
    /// that ended or are gone.
    fn forget_stale(&self, older_than: Duration) {
        self.coordination.forget_stale(older_than);
        self.forget_ended_retries();
    }

    /// Forgets the retries of Tasks that ended or are gone: a Task deleted while it failed
    /// is never reconciled again to reset them. Skipped until the Task cache holds its first
    /// list (an empty cache would look like every Task gone).
    fn forget_ended_retries(&self) {
        let Some(tasks) = self.tasks.get() else {
            return;
        };
        if tasks
            .wait_until_ready()
            .now_or_never()
            .is_none_or(|r| r.is_err())
        {
            return;
        }
        let going_on: HashSet<String> = tasks
            .state()
            .iter()
            .filter(|t| !task_ended(t))
            .map(|t| key_of(t.as_ref()))
            .collect();
        self.coordination
            .forget_task_retries(|key| going_on.contains(key));
    }

    /// The API of `K` in the watched namespace (or all namespaces).
    pub(crate) fn watched<K: crate::NamespacedKind>(&self) -> kube::Api<K> {
        crate::api_in(&self.client, self.settings.namespace.as_deref())
    }

    /// Logs out of the BMCs that only deleted Machines and Tasks used. Skipped until both
    /// caches hold their first list (an empty cache would look like everything deleted).
    pub async fn evict_unused_bmcs(&self) -> usize {
        let (Some(machines), Some(tasks)) = (self.machines.get(), self.tasks.get()) else {
            return 0;
        };
        let ready = |store: Option<Result<(), _>>| store.is_some_and(|r| r.is_ok());
        if !ready(machines.wait_until_ready().now_or_never())
            || !ready(tasks.wait_until_ready().now_or_never())
        {
            return 0;
        }
        let live: HashSet<String> = machines
            .state()
            .iter()
            .map(|m| key_of(m.as_ref()))
            .chain(tasks.state().iter().map(|t| key_of(t.as_ref())))
            .collect();
        self.bmcs.forget_users_except(&live).await
    }

    /// The Machine as the Machine controller's cache holds it (`None` when it does not, yet).
    pub(crate) fn cached_machine(&self, namespace: &str, name: &str) -> Option<Arc<Machine>> {
        self.machines
            .get()?
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The Task as the shared Task cache holds it (`None`: it does not exist), once the cache
    /// holds its first list.
    pub(crate) fn cached_task(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Task>>, CacheNotReady> {
        let tasks = self.tasks.get().ok_or(CacheNotReady)?;
        if tasks
            .wait_until_ready()
            .now_or_never()
            .is_none_or(|r| r.is_err())
        {
            return Err(CacheNotReady);
        }
        Ok(tasks.get(&ObjectRef::new(name).within(namespace)))
    }

    /// Where and how to reach the BMC of an object's `connection`: refused before its Secret
    /// is read when the object may not use it ([`tenancy::check_connection`]), else its
    /// credentials (kept, or read) in the target, with the operator's CA bundle and the
    /// object's pinned certificate.
    pub(crate) async fn target_for(
        &self,
        field: tenancy::ConnectionField,
        meta: &kube::api::ObjectMeta,
        connection: &ingot_api::rufio::Connection,
    ) -> Result<bmcs::Target, bmcs::ConnectionError> {
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let annotations = meta.annotations.clone().unwrap_or_default();
        tenancy::check_connection(
            field,
            namespace,
            &annotations,
            connection,
            &self.settings.cross_namespace,
        )?;
        let creds = self
            .secrets
            .credentials(&self.client, connection, namespace)
            .await?;
        let mut target = bmcs::target(connection, &creds)?;
        target.redfish.ca_bundle_pem = self.settings.ca_bundle_pem.clone();
        target.redfish.pinned_sha256 = tenancy::pinned_sha256(&annotations)?;
        Ok(target)
    }

    /// Closes every BMC session (logout), in parallel, each BMC within
    /// [`ingot_bmc::manager::LOGOUT_DEADLINE`].
    pub async fn shutdown(&self) -> usize {
        self.bmcs.manager.shutdown().await
    }
}

/// Runs the Machine, Job and Task controllers until `shutdown` completes. The BMC sessions stay
/// open: they are shared with the Seeder controller, and the caller logs out of them
/// ([`RufioContext::shutdown`]) once every controller has stopped.
pub async fn run(
    ctx: Arc<RufioContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    // One watch of Tasks feeds the Task controller, wakes the Jobs that own them, and fills
    // the store both read: a Job woken by its Task's change finds that change in the store.
    let (tasks, writer) = reflector::store_shared(TASK_FEED_BUFFER);
    let (Some(for_tasks), Some(for_jobs)) = (writer.subscribe(), writer.subscribe()) else {
        warn!("the Task store takes no subscriber; the Rufio controllers do not run");
        return;
    };
    let _ = ctx.tasks.set(tasks.clone());
    let feed = crate::feed_store(writer, ctx.watched::<Task>(), watcher::Config::default());
    tokio::select! {
        () = feed => {}
        () = ctx.secrets.watch(ctx.watched()) => {}
        _ = async {
            tokio::join!(
                machine::run(ctx.clone(), shutdown.clone()),
                job::run(ctx.clone(), for_jobs, shutdown.clone()),
                task::run(ctx.clone(), tasks, for_tasks, shutdown.clone()),
                evict_unused_bmcs(ctx.clone(), shutdown),
            )
        } => {}
    }
}

/// Whether a Task is being deleted, completed or failed: it needs no backoff any more.
fn task_ended(task: &Task) -> bool {
    let conditions = task
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    task.metadata.deletion_timestamp.is_some()
        || job::has_true(conditions, job::COMPLETED)
        || job::has_true(conditions, job::FAILED)
}

/// Task changes a controller may fall behind by before the watch waits for it.
const TASK_FEED_BUFFER: usize = 1024;

/// Every `evict_interval`, logs out of the BMCs of deleted Machines and Tasks, so that a
/// fleet that changes does not accumulate sessions (and BMC session-table slots).
async fn evict_unused_bmcs(
    ctx: Arc<RufioContext>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let sweep = async {
        loop {
            tokio::time::sleep(ctx.settings.evict_interval).await;
            ctx.forget_stale(ctx.settings.evict_interval);
            let closed = ctx.evict_unused_bmcs().await;
            if closed > 0 {
                tracing::info!(
                    sessions = closed,
                    "logged out of BMCs no Machine or Task uses"
                );
            }
        }
    };
    tokio::select! {
        () = sweep => {}
        () = shutdown => {}
    }
}

/// `namespace/name` of an object.
pub(crate) fn key_of<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// Errors of the Rufio reconcilers (retried with backoff by the controller).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Connection(#[from] bmcs::ConnectionError),
    #[error("{0}")]
    Other(String),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Connection(_) => "connection",
            Error::Other(_) => "other",
        }
    }
}

/// The component of the Rufio controllers' Events.
const EVENT_COMPONENT: &str = "ingot-rufio";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event as WatchEvent;
    use serde_json::json;

    fn task(name: &str, conditions: serde_json::Value) -> Task {
        serde_json::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"task": {"powerAction": "on"}, "connection": {"host": "h", "insecureTLS": true}},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn the_backoff_of_gone_or_ended_tasks_is_forgotten() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let ctx = RufioContext::new(
            Client::try_from(config).unwrap(),
            Arc::new(Metrics::default()),
            "test".into(),
            Settings::default(),
        );
        let (store, mut writer) = reflector::store();
        ctx.tasks.set(store).unwrap();
        for key in ["ns/failing", "ns/gone", "ns/completed"] {
            ctx.coordination.task_retry(key);
        }
        // Before the cache holds its first list nothing is forgotten.
        ctx.forget_stale(Duration::from_secs(60));
        assert_eq!(ctx.coordination.task_retries_tracked(), 3);
        writer.apply_watcher_event(&WatchEvent::Init);
        writer.apply_watcher_event(&WatchEvent::InitApply(task("failing", json!([]))));
        writer.apply_watcher_event(&WatchEvent::InitApply(task(
            "completed",
            json!([{"type": "Completed", "status": "True"}]),
        )));
        writer.apply_watcher_event(&WatchEvent::InitDone);
        ctx.forget_stale(Duration::from_secs(60));
        assert_eq!(ctx.coordination.task_retries_tracked(), 1);
        // The Task still failing keeps its backoff (2 s after 1 s, with jitter in [1 s, 2 s]).
        let again = ctx.coordination.task_retry("ns/failing");
        assert!(
            again >= Duration::from_secs(1) && again <= Duration::from_secs(2),
            "{again:?}"
        );
        ctx.coordination
            .forget_task_retries(|key| key != "ns/failing");
        assert_eq!(ctx.coordination.task_retries_tracked(), 0);
    }
}
