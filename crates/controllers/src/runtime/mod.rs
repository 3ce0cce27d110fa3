//! What every controller of the crate runs on, so that the four read alike.
//!
//! - [`run`] drives a kube-runtime `Controller` until shutdown: it times every reconcile into
//!   the reconcile metrics, counts errors by their [`ReconcileError::metric_label`], asks the
//!   controller's [`Backoff`] when to retry, and logs one line per failure.
//! - [`ReconcileError`] is the one trait a controller's error implements: a `&'static str`
//!   label (never an object name, so metrics stay bounded) and a [`Retry`] class.
//! - [`EventRecorder`] is the one Event publisher of a controller, reporting as the replica.
//! - [`finalizer`] adds and removes finalizers guarded by `resourceVersion`.
//! - [`status`] writes a status only when it changed.

mod backoff;
mod events;
pub mod finalizer;
pub mod status;

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Resource;
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Error as ControllerError};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

pub use backoff::Backoff;
pub use events::EventRecorder;

use crate::Metrics;

/// How soon a failed reconcile is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// A peer or the API server failed: the object's exponential backoff (with jitter), reset
    /// by its next success.
    Backoff,
    /// A write lost a race on `resourceVersion`: the watch is bringing the newer object, so
    /// look again after [`CONFLICT_RETRY`] without counting a failure.
    Conflict,
}

/// The retry after a [`Retry::Conflict`].
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// The error of a controller's reconcile.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// The `error` label of `ingot_reconcile_errors_total`: a fixed word, never a name.
    fn metric_label(&self) -> &'static str;

    /// How soon to retry; by default the object's backoff, or at once after a conflict.
    fn retry(&self) -> Retry {
        Retry::Backoff
    }
}

/// Whether a Kubernetes API error is a lost optimistic-concurrency race (409).
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(response) if response.code == 409)
}

/// One controller's name (its metrics label and log field) and error backoff.
pub struct ControllerRuntime {
    name: &'static str,
    metrics: Arc<Metrics>,
    backoff: Backoff,
}

impl ControllerRuntime {
    pub fn new(name: &'static str, metrics: Arc<Metrics>, backoff: Backoff) -> Self {
        Self {
            name,
            metrics,
            backoff,
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Forgets an object's failures (it was deleted): the backoff table holds only objects
    /// that exist and are failing.
    pub fn forget(&self, key: &str) {
        self.backoff.succeeded(key);
    }

    fn finished<E: ReconcileError>(&self, key: &str, result: &Result<Action, E>, took: Duration) {
        self.metrics.reconciled(self.name, took);
        if result.is_ok() {
            self.backoff.succeeded(key);
        }
    }

    fn failed<E: ReconcileError>(&self, key: &str, error: &E) -> Action {
        self.metrics.failed(self.name, error.metric_label());
        match error.retry() {
            Retry::Conflict => {
                debug!(controller = self.name, object = key, %error, "write conflict, looking again");
                Action::requeue(CONFLICT_RETRY)
            }
            Retry::Backoff => {
                let delay = self.backoff.failed(key);
                warn!(
                    controller = self.name,
                    object = key,
                    %error,
                    retry_in_ms = delay.as_millis() as u64,
                    "reconcile failed"
                );
                Action::requeue(delay)
            }
        }
    }
}

/// The key of an object in logs and the backoff table: `namespace/name`, or `name`.
pub fn object_key<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// Runs `controller` until `shutdown`: every reconcile timed into the metrics, every error
/// counted, logged once and retried as its [`Retry`] class says.
pub async fn run<K, C, E, F, Fut>(
    controller: Controller<K>,
    runtime: ControllerRuntime,
    ctx: Arc<C>,
    reconcile: F,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Debug + Eq + Hash + Clone + Unpin,
    C: Send + Sync + 'static,
    E: ReconcileError,
    F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let runtime = Arc::new(runtime);
    let name = runtime.name;
    let on_error = runtime.clone();
    controller
        .graceful_shutdown_on(shutdown)
        .run(
            move |object: Arc<K>, ctx: Arc<C>| {
                let runtime = runtime.clone();
                let key = object_key(object.as_ref());
                let reconciled = reconcile(object, ctx);
                async move {
                    let started = Instant::now();
                    let result = reconciled.await;
                    runtime.finished(&key, &result, started.elapsed());
                    result
                }
            },
            move |object: Arc<K>, error: &E, _ctx: Arc<C>| {
                on_error.failed(&object_key(object.as_ref()), error)
            },
            ctx,
        )
        .for_each(|result| async move {
            match result {
                Ok(_) | Err(ControllerError::ReconcilerFailed(..)) => {}
                // An object gone before its turn, or a watch hiccup the watcher retries.
                Err(error) => debug!(controller = name, %error, "controller"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum TestError {
        #[error("lost a race")]
        Raced,
        #[error("peer down")]
        Down,
    }

    impl ReconcileError for TestError {
        fn metric_label(&self) -> &'static str {
            match self {
                TestError::Raced => "conflict",
                TestError::Down => "peer",
            }
        }

        fn retry(&self) -> Retry {
            match self {
                TestError::Raced => Retry::Conflict,
                TestError::Down => Retry::Backoff,
            }
        }
    }

    fn runtime() -> ControllerRuntime {
        let backoff = Backoff::new(Duration::from_secs(4), Duration::from_secs(60));
        ControllerRuntime::new("test", Arc::new(Metrics::default()), backoff)
    }

    #[test]
    fn a_conflict_is_retried_at_once_and_costs_no_backoff() {
        let runtime = runtime();
        assert_eq!(
            runtime.failed("ns/a", &TestError::Raced),
            Action::requeue(CONFLICT_RETRY)
        );
        // The first real failure still gets the first delay (4 s with jitter in [2, 4]).
        assert_ne!(
            runtime.failed("ns/a", &TestError::Down),
            Action::requeue(CONFLICT_RETRY)
        );
        let metrics = runtime.metrics.encode().unwrap();
        assert!(
            metrics.contains(r#"controller="test",error="conflict""#),
            "{metrics}"
        );
        assert!(
            metrics.contains(r#"controller="test",error="peer""#),
            "{metrics}"
        );
    }

    #[test]
    fn a_success_resets_the_backoff_and_is_timed() {
        let runtime = runtime();
        for _ in 0..5 {
            runtime.failed("ns/a", &TestError::Down);
        }
        let ok: Result<Action, TestError> = Ok(Action::await_change());
        runtime.finished("ns/a", &ok, Duration::from_millis(3));
        let delay = runtime.backoff.failed("ns/a");
        assert!(delay <= Duration::from_secs(4), "{delay:?}");
        let metrics = runtime.metrics.encode().unwrap();
        assert!(
            metrics.contains(r#"reconciliations_total{controller="test"} 1"#),
            "{metrics}"
        );
    }

    #[test]
    fn objects_are_keyed_by_namespace_and_name() {
        let mut map = ConfigMap::default();
        map.metadata.name = Some("a".into());
        assert_eq!(object_key(&map), "a");
        map.metadata.namespace = Some("ns".into());
        assert_eq!(object_key(&map), "ns/a");
    }

    /// `run` takes a controller the way the crate's controllers build theirs.
    #[allow(dead_code)]
    async fn wiring_type_checks(api: kube::Api<ConfigMap>) {
        run(
            Controller::new(api, watcher::Config::default()),
            runtime(),
            Arc::new(()),
            |_map: Arc<ConfigMap>, _ctx: Arc<()>| async {
                Ok::<_, TestError>(Action::await_change())
            },
            std::future::pending(),
        )
        .await;
    }
}
