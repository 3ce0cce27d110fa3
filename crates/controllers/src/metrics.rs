//! Prometheus metrics, with low-cardinality labels only (never an object name).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
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

/// The operator's metrics, registered once.
pub struct Metrics {
    pub registry: Registry,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    pub reconciliations: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("ingot");
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        let reconciliations = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "reconciliations",
            "Reconciliations started",
            reconciliations.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed, by error kind",
            reconcile_errors.clone(),
        );
        let reconcile_duration =
            Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            });
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconciliation",
            reconcile_duration.clone(),
        );
        Self {
            registry,
            leader,
            reconciliations,
            reconcile_errors,
            reconcile_duration,
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

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
