//! Prometheus metrics, with low-cardinality labels only (never an object name).

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use ingot_bmc::Protocol;
use ingot_bmc::manager::BmcObserver;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeRequestLabels {
    pub verb: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetalCallLabels {
    pub operation: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabels {
    pub operation: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BmcCallLabels {
    pub protocol: &'static str,
    pub operation: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BmcOperationLabels {
    pub protocol: &'static str,
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabels {
    pub protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainLabels {
    pub controller: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub transition: &'static str,
}

/// How a drain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainOutcome {
    /// Every pod was evicted.
    Drained,
    /// Pods were deleted rather than evicted (Gardener: drain timeout, `force-deletion`, an
    /// unhealthy Node).
    Forced,
    /// The drain timeout passed on an unreachable Node and the removal went on without it
    /// (pools).
    TimedOut,
}

impl DrainOutcome {
    fn label(self) -> &'static str {
        match self {
            DrainOutcome::Drained => "drained",
            DrainOutcome::Forced => "forced",
            DrainOutcome::TimedOut => "timed_out",
        }
    }
}

/// A change of leadership of this replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaderTransition {
    /// The replica took the lease.
    Acquired,
    /// The lease was taken over or could not be renewed in time. The process exits right
    /// after, so a scrape seldom sees this: watch acquisitions across replicas instead.
    Lost,
}

impl LeaderTransition {
    fn label(self) -> &'static str {
        match self {
            LeaderTransition::Acquired => "acquired",
            LeaderTransition::Lost => "lost",
        }
    }
}

type Sampler = Box<dyn Fn(&Metrics) + Send + Sync>;

/// A metric whose `# HELP` and `# TYPE` are served before its first sample: the registry
/// leaves out families without samples, and dashboards and alerts must find every family.
#[derive(Debug)]
struct Described<M>(M);

impl<M: EncodeMetric> EncodeMetric for Described<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

/// The operator's metrics, registered once: every family is in /metrics (HELP and TYPE) from
/// the start, before its first sample.
pub struct Metrics {
    pub registry: Registry,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    pub leader_transitions: Family<TransitionLabels, Counter>,
    pub reconciliations: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    /// Requests to the Kubernetes API server: what the watched caches save is seen here.
    pub kube_requests: Family<KubeRequestLabels, Counter>,
    pub metal: MetalMetrics,
    pub bmc: BmcMetrics,
    pub pool: PoolMetrics,
    pub provisioning: ProvisioningMetrics,
    pub fencing: FencingMetrics,
    /// Hardware events taken, by source: `push` (POSTed to the receiver, secret and Context
    /// right) or `sse` (read from a BMC's server-sent event stream).
    pub seeder_events_accepted: Family<SourceLabels, Counter>,
    /// BMC server-sent event streams followed now (BMCs that refuse push).
    pub seeder_event_streams: Gauge,
    /// Pushed hardware events refused, by reason (too_large, malformed, unknown_context,
    /// unauthenticated, not_leading).
    pub seeder_events_refused: Family<ReasonLabels, Counter>,
    /// Run before every scrape: gauges read from a live source (caches, the BMC fleet limit).
    samplers: Mutex<Vec<Sampler>>,
}

/// Equinix Metal API calls.
pub struct MetalMetrics {
    pub requests: Family<MetalCallLabels, Counter>,
    pub request_duration: Family<OperationLabels, Histogram>,
    pub retries: Family<RetryLabels, Counter>,
    pub rate_limited: Family<OperationLabels, Counter>,
    pub rate_limit_waits: Counter,
    pub rate_limit_wait_seconds: Counter<f64, AtomicU64>,
}

impl MetalMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            requests: registered(
                registry,
                "metal_requests",
                "Equinix Metal API calls, by operation (OpenAPI operation id) and outcome (ok or the error kind) after the client's retries",
                Family::<MetalCallLabels, Counter>::default(),
            ),
            request_duration: registered(
                registry,
                "metal_request_duration_seconds",
                "Time of one Equinix Metal API call, retries and rate-limit waits included",
                Family::<OperationLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.005, 2.0, 14))
                }),
            ),
            retries: registered(
                registry,
                "metal_retries",
                "Equinix Metal API attempts sent again, by operation and the failure's kind",
                Family::<RetryLabels, Counter>::default(),
            ),
            rate_limited: registered(
                registry,
                "metal_rate_limited",
                "429 Too Many Requests answers from the Equinix Metal API, by operation",
                Family::<OperationLabels, Counter>::default(),
            ),
            rate_limit_waits: registered(
                registry,
                "metal_rate_limit_waits",
                "Equinix Metal API requests held by the client-side rate limiter (its own rate, or a pause the API asked for)",
                Counter::default(),
            ),
            rate_limit_wait_seconds: registered(
                registry,
                "metal_rate_limit_wait_seconds",
                "Time Equinix Metal API requests were held by the client-side rate limiter",
                Counter::<f64, AtomicU64>::default(),
            ),
        }
    }
}

/// BMC calls and sessions.
pub struct BmcMetrics {
    pub requests: Family<BmcCallLabels, Counter>,
    pub request_duration: Family<BmcOperationLabels, Histogram>,
    pub sessions_open: Family<ProtocolLabels, Gauge>,
    pub fleet_in_flight: Gauge,
    pub fleet_limit: Gauge,
}

impl BmcMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            requests: registered(
                registry,
                "bmc_requests",
                "BMC calls, by protocol (redfish, ipmi, unknown when none answered), operation and outcome (ok or the error kind)",
                Family::<BmcCallLabels, Counter>::default(),
            ),
            request_duration: registered(
                registry,
                "bmc_request_duration_seconds",
                "Time of one BMC call (connecting and protocol detection included)",
                Family::<BmcOperationLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.005, 2.0, 14))
                }),
            ),
            sessions_open: registered(
                registry,
                "bmc_sessions_open",
                "BMC clients connected, by protocol: one per BMC, holding the session its calls reuse",
                Family::<ProtocolLabels, Gauge>::default(),
            ),
            fleet_in_flight: registered(
                registry,
                "bmc_fleet_in_flight",
                "BMC requests in flight across the fleet (fleet permits taken; a hedged read and its copies hold one)",
                Gauge::default(),
            ),
            fleet_limit: registered(
                registry,
                "bmc_fleet_limit",
                "BMC requests allowed in flight across the fleet (--rufio-fleet-limit)",
                Gauge::default(),
            ),
        }
    }
}

/// InstancePools, their Instances, replacements and drains.
pub struct PoolMetrics {
    pub instance_phase_duration: Family<PhaseLabels, Histogram>,
    pub by_status: Family<StatusLabels, Gauge>,
    pub instances_requested: Gauge,
    pub instances_managed: Gauge,
    pub replacements: Counter,
    pub replacements_blocked: Family<ReasonLabels, Counter>,
    pub drains: Family<DrainLabels, Counter>,
    pub drains_blocked: Family<DrainControllerLabels, Counter>,
}

impl PoolMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            instance_phase_duration: registered(
                registry,
                "instance_phase_duration_seconds",
                "Time an Instance spent in a provisioning phase (new, queued, reinstalling, ready, managed), observed when it leaves the phase",
                Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(1.0, 2.0, 16))
                }),
            ),
            by_status: registered(
                registry,
                "pools",
                "InstancePools by status (new, tokenReady, submitted, ready, cleanupNodes), as this replica's cache holds them",
                Family::<StatusLabels, Gauge>::default(),
            ),
            instances_requested: registered(
                registry,
                "pool_instances_requested",
                "Instances requested by every InstancePool (spec.count), summed",
                Gauge::default(),
            ),
            instances_managed: registered(
                registry,
                "pool_instances_managed",
                "Instances whose Node joined (status.ready of every InstancePool), summed",
                Gauge::default(),
            ),
            replacements: registered(
                registry,
                "pool_replacements",
                "Unhealthy pool members removed to be replaced",
                Counter::default(),
            ),
            replacements_blocked: registered(
                registry,
                "pool_replacements_blocked",
                "Pool passes that found Nodes unhealthy for too long but replaced none, by reason (too_many_unhealthy, maintenance, cordoned, opted_out, invalid_max_unhealthy); rises at every pass while blocked",
                Family::<ReasonLabels, Counter>::default(),
            ),
            drains: registered(
                registry,
                "drains",
                "Node drains finished, by controller (pools, gardener) and outcome (drained, forced, timed_out)",
                Family::<DrainLabels, Counter>::default(),
            ),
            drains_blocked: registered(
                registry,
                "drains_blocked",
                "Drain passes held back by a PodDisruptionBudget refusal (or, pools, a drain timeout on a reachable Node); rises at every pass while a drain is stuck",
                Family::<DrainControllerLabels, Counter>::default(),
            ),
        }
    }
}

/// Provisioned Clusters and their nodes (Seeder's full mode).
pub struct ProvisioningMetrics {
    pub cluster_phase_reached: Family<PhaseLabels, Histogram>,
    pub install_boots: Counter,
    pub installs_succeeded: Counter,
    pub new_cluster_wakeups: Counter,
    pub workflow_wakeups: Counter,
}

impl ProvisioningMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            cluster_phase_reached: registered(
                registry,
                "provisioning_cluster_phase_reached_seconds",
                "Time from a provisioned Cluster's creation to its reaching a status (clusterConfigReady, clusterNodesPatched, tinkConfigReady, clusterRunning)",
                Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.25, 2.0, 16))
                }),
            ),
            install_boots: registered(
                registry,
                "provisioning_install_boots",
                "Servers booted into the Harvester installer through their BMC (one rufio Job each)",
                Counter::default(),
            ),
            installs_succeeded: registered(
                registry,
                "provisioning_installs_succeeded",
                "Installer SUCCEEDED webhooks taken (the first per node)",
                Counter::default(),
            ),
            new_cluster_wakeups: registered(
                registry,
                "provisioning_new_cluster_wakeups",
                "Clusters reconciled because a watched Node of their new cluster changed readiness, or the watch ended",
                Counter::default(),
            ),
            workflow_wakeups: registered(
                registry,
                "provisioning_workflow_wakeups",
                "Inventories reconciled because their Tinkerbell Workflow changed (Tinkerbell mode)",
                Counter::default(),
            ),
        }
    }
}

/// Fencing of dead Nodes through their BMCs.
pub struct FencingMetrics {
    pub power_actions: Family<ActionLabels, Counter>,
    pub fenced: Counter,
    pub recovered: Counter,
    pub held: Family<ReasonLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
}

impl FencingMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            power_actions: registered(
                registry,
                "fencing_power_actions",
                "Power actions sent to dead Nodes' BMCs (one rufio Job each), by action (off, on)",
                Family::<ActionLabels, Counter>::default(),
            ),
            fenced: registered(
                registry,
                "fencing_fenced",
                "Nodes tainted out of service once their BMC confirmed the power off",
                Counter::default(),
            ),
            recovered: registered(
                registry,
                "fencing_recovered",
                "Fenced or held Nodes Ready again, their out-of-service taint and record removed",
                Counter::default(),
            ),
            held: registered(
                registry,
                "fencing_held",
                "Nodes not fenced (or not further), counted once per Node and reason: the reason (FencingHeldMaintenance, FencingHeldCordoned, FencingHeldPartitionSuspected, FencingHeldEtcdQuorum, FencingHeldNoInventory, FencingHeldBMCUnknown, FencingPowerOffFailed, FencingAwaitingPowerOff, FencingPowerOnFailed)",
                Family::<ReasonLabels, Counter>::default(),
            ),
        }
    }
}

/// Registers `metric` under `name` (with the registry's `ingot_` prefix) and returns it.
fn registered<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: EncodeMetric + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    registry.register(name, help, Described(metric.clone()));
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("ingot");
        Self {
            leader: registered(
                &mut registry,
                "leader",
                "1 while this replica holds the leader lease",
                Gauge::default(),
            ),
            leader_transitions: registered(
                &mut registry,
                "leader_transitions",
                "Changes of leadership of this replica: acquired, lost (taken over or not renewed in time; the process exits right after)",
                Family::<TransitionLabels, Counter>::default(),
            ),
            reconciliations: registered(
                &mut registry,
                "reconciliations",
                "Reconciliations started",
                Family::<ControllerLabels, Counter>::default(),
            ),
            reconcile_errors: registered(
                &mut registry,
                "reconcile_errors",
                "Reconciliations that failed, by error kind",
                Family::<ErrorLabels, Counter>::default(),
            ),
            reconcile_duration: registered(
                &mut registry,
                "reconcile_duration_seconds",
                "Time spent in one reconciliation",
                Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.001, 2.0, 16))
                }),
            ),
            kube_requests: registered(
                &mut registry,
                "kube_requests",
                "Requests to the Kubernetes API server, by verb and resource",
                Family::<KubeRequestLabels, Counter>::default(),
            ),
            metal: MetalMetrics::register(&mut registry),
            bmc: BmcMetrics::register(&mut registry),
            pool: PoolMetrics::register(&mut registry),
            provisioning: ProvisioningMetrics::register(&mut registry),
            fencing: FencingMetrics::register(&mut registry),
            seeder_events_accepted: registered(
                &mut registry,
                "seeder_events_accepted",
                "Hardware events taken, by source: push (POSTed by a BMC, the Inventory's secret and Context right) or sse (read from the BMC's server-sent event stream where it refuses push); each wakes the Inventory's hardware read",
                Family::<SourceLabels, Counter>::default(),
            ),
            seeder_event_streams: registered(
                &mut registry,
                "seeder_event_streams",
                "BMC server-sent event streams followed now, for Inventories whose BMC refuses push (at most --events-max-streams)",
                Gauge::default(),
            ),
            seeder_events_refused: registered(
                &mut registry,
                "seeder_events_refused",
                "Hardware events pushed to the receiver and refused, by reason (too_large, malformed, unknown_context, unauthenticated, not_leading)",
                Family::<ReasonLabels, Counter>::default(),
            ),
            registry,
            samplers: Mutex::default(),
        }
    }
}

impl Metrics {
    pub fn reconciled(&self, controller: &str, took: Duration) {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciliations.get_or_create(&labels).inc();
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn failed(&self, controller: &str, error: &str) {
        let labels = ErrorLabels {
            controller: controller.to_owned(),
            error: error.to_owned(),
        };
        self.reconcile_errors.get_or_create(&labels).inc();
    }

    /// Counts one request to the API server.
    pub fn kube_request(&self, method: &str, path: &str, query: Option<&str>) {
        self.kube_requests
            .get_or_create(&kube_request_labels(method, path, query))
            .inc();
    }

    pub fn leader_transition(&self, transition: LeaderTransition) {
        self.leader_transitions
            .get_or_create(&TransitionLabels {
                transition: transition.label(),
            })
            .inc();
    }

    /// An Instance left `phase` (an Instance status string; `""` is `new`) after `spent`.
    pub fn phase_left(&self, phase: &str, spent: Duration) {
        let phase = match phase {
            "" => "new",
            "queued" | "submitted" => "queued",
            "reinstalling" => "reinstalling",
            "ready" => "ready",
            "managed" => "managed",
            _ => "other",
        };
        self.pool
            .instance_phase_duration
            .get_or_create(&PhaseLabels { phase })
            .observe(spent.as_secs_f64());
    }

    /// A provisioned Cluster reached `status` (one of Seeder's strings) `since` its creation.
    pub fn provisioning_phase(&self, status: &str, since: Duration) {
        let phase = match status {
            "clusterConfigReady" => "clusterConfigReady",
            "clusterNodesPatched" => "clusterNodesPatched",
            "tinkConfigReady" => "tinkConfigReady",
            "clusterRunning" => "clusterRunning",
            _ => "other",
        };
        self.provisioning
            .cluster_phase_reached
            .get_or_create(&PhaseLabels { phase })
            .observe(since.as_secs_f64());
    }

    pub fn provisioning_boot(&self) {
        self.provisioning.install_boots.inc();
    }

    pub fn provisioning_installed(&self) {
        self.provisioning.installs_succeeded.inc();
    }

    pub fn replacement_started(&self) {
        self.pool.replacements.inc();
    }

    pub fn fencing_power_action(&self, action: &'static str) {
        self.fencing
            .power_actions
            .get_or_create(&ActionLabels { action })
            .inc();
    }

    pub fn fencing_held(&self, reason: &'static str) {
        self.fencing
            .held
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn replacement_blocked(&self, reason: &'static str) {
        self.pool
            .replacements_blocked
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn drain_finished(&self, controller: &'static str, outcome: DrainOutcome) {
        self.pool
            .drains
            .get_or_create(&DrainLabels {
                controller,
                outcome: outcome.label(),
            })
            .inc();
    }

    pub fn drain_blocked(&self, controller: &'static str) {
        self.pool
            .drains_blocked
            .get_or_create(&DrainControllerLabels { controller })
            .inc();
    }

    /// Runs `sample` before every scrape, to set gauges from a live source.
    pub fn on_scrape(&self, sample: impl Fn(&Metrics) + Send + Sync + 'static) {
        self.samplers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(sample));
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        for sample in self
            .samplers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            sample(self);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl ingot_metal::MetalObserver for Metrics {
    fn call(&self, operation: &'static str, outcome: &'static str, took: Duration) {
        self.metal
            .requests
            .get_or_create(&MetalCallLabels { operation, outcome })
            .inc();
        self.metal
            .request_duration
            .get_or_create(&OperationLabels { operation })
            .observe(took.as_secs_f64());
    }

    fn retry(&self, operation: &'static str, reason: &'static str) {
        self.metal
            .retries
            .get_or_create(&RetryLabels { operation, reason })
            .inc();
    }

    fn rate_limited(&self, operation: &'static str) {
        self.metal
            .rate_limited
            .get_or_create(&OperationLabels { operation })
            .inc();
    }

    fn rate_limit_wait(&self, waited: Duration) {
        self.metal.rate_limit_waits.inc();
        self.metal
            .rate_limit_wait_seconds
            .inc_by(waited.as_secs_f64());
    }
}

fn protocol_label(protocol: Option<Protocol>) -> &'static str {
    match protocol {
        Some(Protocol::Redfish) => "redfish",
        Some(Protocol::Ipmi) => "ipmi",
        None => "unknown",
    }
}

impl BmcObserver for Metrics {
    fn call(
        &self,
        protocol: Option<Protocol>,
        operation: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        let protocol = protocol_label(protocol);
        self.bmc
            .requests
            .get_or_create(&BmcCallLabels {
                protocol,
                operation,
                outcome,
            })
            .inc();
        self.bmc
            .request_duration
            .get_or_create(&BmcOperationLabels {
                protocol,
                operation,
            })
            .observe(took.as_secs_f64());
    }

    fn session_opened(&self, protocol: Protocol) {
        self.bmc
            .sessions_open
            .get_or_create(&ProtocolLabels {
                protocol: protocol_label(Some(protocol)),
            })
            .inc();
    }

    fn session_closed(&self, protocol: Protocol) {
        self.bmc
            .sessions_open
            .get_or_create(&ProtocolLabels {
                protocol: protocol_label(Some(protocol)),
            })
            .dec();
    }
}

/// The Kubernetes verb and resource of an API request: `get`, `list`, `watch`, `create`,
/// `update`, `patch`, `delete` or `deletecollection`; the resource with its subresource
/// (`instances/status`), or `other` for paths outside the resource API (`/version`).
pub fn kube_request_labels(method: &str, path: &str, query: Option<&str>) -> KubeRequestLabels {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    };
    let Some(mut rest) = rest.filter(|r| !r.is_empty()) else {
        return KubeRequestLabels {
            verb: method.to_ascii_lowercase(),
            resource: "other".to_owned(),
        };
    };
    // `namespaces/<ns>/<resource>...`; `namespaces` and `namespaces/<ns>` are the resource itself.
    if rest.len() >= 3 && rest[0] == "namespaces" {
        rest = &rest[2..];
    }
    let named = rest.len() >= 2;
    let resource = match rest.get(2) {
        Some(sub) => format!("{}/{sub}", rest[0]),
        None => rest[0].to_owned(),
    };
    let watching = query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    });
    let verb = match method {
        "GET" if named => "get",
        "GET" if watching => "watch",
        "GET" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if named => "delete",
        "DELETE" => "deletecollection",
        other => {
            return KubeRequestLabels {
                verb: other.to_ascii_lowercase(),
                resource,
            };
        }
    };
    KubeRequestLabels {
        verb: verb.to_owned(),
        resource,
    }
}

#[cfg(test)]
mod tests {
    use super::{Metrics, kube_request_labels};

    #[test]
    fn every_family_is_served_before_its_first_sample() {
        let text = Metrics::default().encode().unwrap_or_default();
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(types, 37, "{text}");
        for family in [
            "ingot_reconcile_errors counter",
            "ingot_provisioning_cluster_phase_reached_seconds histogram",
            "ingot_provisioning_install_boots counter",
            "ingot_provisioning_installs_succeeded counter",
            "ingot_provisioning_new_cluster_wakeups counter",
            "ingot_provisioning_workflow_wakeups counter",
            "ingot_metal_requests counter",
            "ingot_bmc_request_duration_seconds histogram",
            "ingot_pools gauge",
            "ingot_drains counter",
            "ingot_fencing_power_actions counter",
            "ingot_fencing_fenced counter",
            "ingot_fencing_recovered counter",
            "ingot_fencing_held counter",
            "ingot_seeder_events_accepted counter",
            "ingot_seeder_events_refused counter",
            "ingot_seeder_event_streams gauge",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family}\n")),
                "{family}: {text}"
            );
        }
    }

    fn labels(method: &str, path: &str, query: Option<&str>) -> (String, String) {
        let l = kube_request_labels(method, path, query);
        (l.verb, l.resource)
    }

    #[test]
    fn requests_are_named_by_kubernetes_verb_and_resource() {
        let cases = [
            ("GET", "/api/v1/nodes/n1", None, "get", "nodes"),
            (
                "GET",
                "/api/v1/nodes",
                Some("watch=true&resourceVersion=5"),
                "watch",
                "nodes",
            ),
            (
                "GET",
                "/api/v1/nodes",
                Some("labelSelector=a"),
                "list",
                "nodes",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/secrets/s",
                None,
                "get",
                "secrets",
            ),
            ("GET", "/api/v1/namespaces/ns", None, "get", "namespaces"),
            ("GET", "/api/v1/namespaces", None, "list", "namespaces"),
            (
                "PATCH",
                "/apis/equinix.harvesterhci.io/v1/instances/i/status",
                None,
                "patch",
                "instances/status",
            ),
            (
                "POST",
                "/api/v1/namespaces/ns/pods/p/eviction",
                None,
                "create",
                "pods/eviction",
            ),
            (
                "DELETE",
                "/apis/equinix.harvesterhci.io/v1/instances/i",
                None,
                "delete",
                "instances",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/pods",
                None,
                "deletecollection",
                "pods",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                None,
                "update",
                "leases",
            ),
            ("GET", "/version", None, "get", "other"),
        ];
        for (method, path, query, verb, resource) in cases {
            assert_eq!(
                labels(method, path, query),
                (verb.to_owned(), resource.to_owned()),
                "{method} {path}"
            );
        }
    }
}
