//! The pools part (harvester-equinix-addon): InstancePool and Instance.
//!
//! This controller reads the Equinix credentials Secret at every reconcile, so that rotating
//! it reaches every pool, and reports on the pool whether it is usable.

mod credentials;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ingot_api::condition::{ConditionStatus, set_condition};
use ingot_api::equinix::InstancePool;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

pub use credentials::{CredentialsError, Settings};

use crate::Context;

const CONTROLLER: &str = "pools";
/// Condition type saying whether the Equinix credentials Secret is present and complete.
pub const CREDENTIALS_CONDITION: &str = "CredentialsReady";
/// How often a pool is looked at again without any change (the Secret is read each time).
const RESYNC: Duration = Duration::from_secs(60);

/// Errors of one reconciliation; the variant name is the metric label.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the credentials Secret: {0}")]
    Credentials(#[source] kube::Error),
    #[error("writing the pool status: {0}")]
    WriteStatus(#[source] kube::Error),
}

impl Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Credentials(_) => "credentials",
            Error::WriteStatus(_) => "write_status",
        }
    }
}

/// Runs the InstancePool controller until `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let pools: Api<InstancePool> = Api::all(ctx.client.clone());
    Controller::new(pools, watcher::Config::default().any_semantic())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "instancepool reconciliation failed");
            }
        })
        .await;
}

async fn reconcile(pool: Arc<InstancePool>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let name = pool.name_any();
    let generation = pool.metadata.generation;
    let mut status = pool.status.clone().unwrap_or_default();

    let (state, reason, message) = match credentials::check(&ctx.client, &ctx.pools).await {
        Ok(()) => (
            ConditionStatus::True,
            "Found",
            format!(
                "Secret {} holds the Equinix Metal credentials",
                ctx.pools.secret_ref()
            ),
        ),
        Err(CredentialsError::Api(error)) => return Err(Error::Credentials(error)),
        Err(problem) => (
            ConditionStatus::False,
            problem.reason(),
            problem.to_string(),
        ),
    };
    let was = status
        .conditions
        .iter()
        .find(|c| c.type_ == CREDENTIALS_CONDITION)
        .map(|c| c.status.clone());
    let mut changed = set_condition(
        &mut status.conditions,
        CREDENTIALS_CONDITION,
        state,
        reason,
        &message,
        generation,
    );
    changed |= status.observed_generation != generation;
    status.observed_generation = generation;

    if changed {
        let api: Api<InstancePool> = Api::all(ctx.client.clone());
        let patch = json!({ "status": { "conditions": status.conditions, "observedGeneration": generation } });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::WriteStatus)?;
        if was.as_deref() != Some(state.as_str()) {
            info!(pool = %name, reason, "credentials condition changed");
            let event = Event {
                type_: if state == ConditionStatus::True {
                    EventType::Normal
                } else {
                    EventType::Warning
                },
                reason: reason.to_owned(),
                note: Some(message),
                action: "CheckCredentials".to_owned(),
                secondary: None,
            };
            let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
            if let Err(error) = recorder.publish(&event, &pool.object_ref(&())).await {
                warn!(pool = %name, %error, "could not record an event");
            }
        }
    }
    ctx.metrics.reconciled(CONTROLLER, started.elapsed());
    Ok(Action::requeue(RESYNC))
}

fn error_policy(_pool: Arc<InstancePool>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error.metric_label());
    Action::requeue(Duration::from_secs(5))
}
