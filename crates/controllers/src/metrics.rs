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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeRequestLabels {
    pub verb: String,
    pub resource: String,
}

/// The operator's metrics, registered once.
pub struct Metrics {
    pub registry: Registry,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    pub reconciliations: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    /// Requests to the Kubernetes API server: what the watched caches save is seen here.
    pub kube_requests: Family<KubeRequestLabels, Counter>,
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
        let kube_requests = Family::<KubeRequestLabels, Counter>::default();
        registry.register(
            "kube_requests",
            "Requests to the Kubernetes API server, by verb and resource",
            kube_requests.clone(),
        );
        Self {
            registry,
            leader,
            kube_requests,
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

    /// Counts one request to the API server.
    pub fn kube_request(&self, method: &str, path: &str, query: Option<&str>) {
        self.kube_requests
            .get_or_create(&kube_request_labels(method, path, query))
            .inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
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
    use super::kube_request_labels;

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
