//! The Machine controller: `status.powerState` (`on`, `off`, `unknown`) and the `Contactable`
//! condition, read from the BMC every `machine_interval` (±10 %, per object) through the
//! session manager's cached session, and again right after each Job of the Machine ends.
//!
//! Reconciles that Kubernetes triggers for other reasons (our own status write, a re-list)
//! do not call the BMC: a Machine is read again only when its interval is up, its spec
//! changed, or a Job of it finished.

use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::{Job, Machine, MachineCondition, MachineStatus, power_state};
use ingot_bmc::{Bmc, PowerState};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Config};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use rand::Rng;
use serde_json::json;
use tracing::warn;

use super::bmcs::{ConnectionError, error_chain};
use super::tenancy::{self, ALLOW_HTTP_ANNOTATION, ConnectionField};
use super::{Error, RufioContext, key_of};
use crate::runtime::{self, Backoff, ControllerRuntime};

const CONTROLLER: &str = "rufio-machine";
/// A failed reconcile (a status write the API server refused) is retried after 10 s, doubling
/// to 2 min while it goes on failing.
const RETRY_BASE: Duration = Duration::from_secs(10);
const RETRY_MAX: Duration = Duration::from_secs(120);
/// Rufio's Machine condition type.
pub const CONTACTABLE: &str = "Contactable";
/// ingot's Machine condition: True while the BMC's password goes over plain HTTP.
pub const PLAINTEXT_CREDENTIALS: &str = "PlaintextCredentials";

pub async fn run(
    ctx: Arc<RufioContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (machines, events) = crate::lean_reflector(
        ctx.watched::<Machine>(),
        watcher::Config::default().any_semantic(),
    );
    let jobs: Api<Job> = ctx.watched();
    let controller = Controller::for_stream(events.applied_objects(), machines);
    let _ = ctx.machines.set(controller.store());
    let controller = controller
        // A finished Job wakes its Machine (the Job controller asked for the refresh).
        .watches(jobs, watcher::Config::default(), |job| {
            super::job::finished(&job).then(|| {
                let (namespace, name) =
                    super::job::machine_of(&job, &job.namespace().unwrap_or_default());
                ObjectRef::<Machine>::new(&name).within(&namespace)
            })
        })
        // A pushed power event reads the power now.
        .reconcile_on(ctx.machine_wakes.stream())
        .with_config(Config::default().concurrency(ctx.settings.machine_concurrency));
    let backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// The interval, ±10 %, drawn per requeue so that Machines created together spread out.
fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(rand::rng().random_range(0.9..1.1))
}

async fn reconcile(machine: Arc<Machine>, ctx: Arc<RufioContext>) -> Result<Action, Error> {
    let machine = machine.as_ref();
    let key = key_of(machine);
    if machine.metadata.deletion_timestamp.is_some() {
        ctx.coordination.forget_poll(&key);
        return Ok(Action::await_change());
    }
    let interval = ctx.settings.machine_interval;
    let refresh = ctx.coordination.take_refresh(&key);
    if !refresh
        && let Some((at, generation)) = ctx.coordination.last_poll(&key)
        && generation == machine.metadata.generation
        && machine.status.is_some()
        && at.elapsed() < interval.mul_f64(0.85)
    {
        return Ok(Action::requeue(interval.saturating_sub(at.elapsed())));
    }
    let read = read_power(machine, &ctx).await;
    ctx.coordination
        .record_poll(key, machine.metadata.generation);
    let outcome = read.as_ref().map(|s| *s).map_err(|u| u.message.clone());
    let mut status = machine.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let plain = tenancy::plain_http(&machine.spec.connection)
        && tenancy::http_allowed(machine.annotations());
    let changed =
        apply(&mut status, &outcome, now.clone()) | apply_plain_http(&mut status, plain, now);
    if changed {
        let api: Api<Machine> = Api::namespaced(
            ctx.client.clone(),
            machine.namespace().as_deref().unwrap_or_default(),
        );
        api.patch_status(
            &machine.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
        if let Err(unread) = &read {
            ctx.machine_events
                .publish(
                    machine,
                    EventType::Warning,
                    unread.reason,
                    "GetPowerState",
                    unread.message.clone(),
                )
                .await;
        }
    }
    Ok(Action::requeue(jittered(interval)))
}

/// Why the power state was not read: the `Contactable=False` message, and the reason of the
/// Warning Event that reports it.
struct Unread {
    message: String,
    reason: &'static str,
}

impl Unread {
    fn failed(message: String) -> Self {
        Unread {
            message,
            reason: "GetPowerStateFailed",
        }
    }
}

/// Reads the power state, or says why it cannot (the `Contactable=False` message).
async fn read_power(machine: &Machine, ctx: &RufioContext) -> Result<PowerState, Unread> {
    let connection = &machine.spec.connection;
    let target = ctx
        .target_for(ConnectionField::Rufio, &machine.metadata, connection)
        .await
        .map_err(|e| match &e {
            ConnectionError::Refused(refusal) => Unread {
                reason: refusal.reason(),
                message: e.to_string(),
            },
            _ => Unread::failed(e.to_string()),
        })?;
    if !target.ignored.is_empty() && machine.status.is_none() {
        ctx.machine_events
            .publish(
                machine,
                EventType::Normal,
                "ProviderOptionsIgnored",
                "Connect",
                format!("ignored: {}", target.ignored.join("; ")),
            )
            .await;
    }
    let reached = ctx
        .bmcs
        .reach_for(&key_of(machine), &target)
        .await
        .map_err(|e| Unread::failed(e.0))?;
    match reached.power {
        Some(state) => Ok(state),
        None => reached.bmc.power_state().await.map_err(|e| {
            warn!(machine = %machine.name_any(), error = %e, "reading the power state failed");
            Unread::failed(format!("get power state: {}", error_chain(&e)))
        }),
    }
}

/// Sets or clears ingot's `PlaintextCredentials` condition (True while the Machine's BMC is
/// spoken to over `http://`, as its annotation allowed). Returns whether anything changed.
pub fn apply_plain_http(status: &mut MachineStatus, plain: bool, now: Time) -> bool {
    let at = status
        .conditions
        .iter()
        .position(|c| c.type_ == PLAINTEXT_CREDENTIALS);
    match (plain, at) {
        (true, None) => {
            status.conditions.push(MachineCondition {
                type_: PLAINTEXT_CREDENTIALS.to_owned(),
                status: "True".to_owned(),
                last_update_time: Some(now),
                message: Some(format!(
                    "connection.host is http:// ({ALLOW_HTTP_ANNOTATION}: \"true\"): the BMC password crosses the network in clear"
                )),
            });
            true
        }
        (false, Some(i)) => {
            status.conditions.remove(i);
            true
        }
        _ => false,
    }
}

/// Rufio's `status.powerState` for a BMC state: transitions count as where they go, as
/// Rufio's substring match does (`PoweringOn` is `on`).
pub fn rufio_power(state: PowerState) -> &'static str {
    match state {
        PowerState::On | PowerState::PoweringOn => power_state::ON,
        PowerState::Off | PowerState::PoweringOff => power_state::OFF,
        PowerState::Unknown => power_state::UNKNOWN,
    }
}

/// Applies a read to the status as Rufio does: `powerState`, and `Contactable` whose
/// `lastUpdateTime` moves only when its status changes. Returns whether anything changed.
pub fn apply(status: &mut MachineStatus, outcome: &Result<PowerState, String>, now: Time) -> bool {
    let before = status.clone();
    let (power, contactable, message) = match outcome {
        Ok(state) => (rufio_power(*state), "True", None),
        Err(message) => (power_state::UNKNOWN, "False", Some(message.clone())),
    };
    status.power_state = Some(power.to_owned());
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == CONTACTABLE)
    {
        Some(c) => {
            if c.status != contactable {
                c.status = contactable.to_owned();
                c.last_update_time = Some(now);
            }
            c.message = message;
        }
        None => status.conditions.push(MachineCondition {
            type_: CONTACTABLE.to_owned(),
            status: contactable.to_owned(),
            last_update_time: Some(now),
            message,
        }),
    }
    *status != before
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn contactable_with_the_power_state() {
        let mut s = MachineStatus::default();
        assert!(apply(&mut s, &Ok(PowerState::On), t(1)));
        assert_eq!(s.power_state.as_deref(), Some("on"));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].type_, "Contactable");
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.conditions[0].message, None);
        assert_eq!(s.conditions[0].last_update_time, Some(t(1)));
        // Same reading: nothing to write.
        assert!(!apply(&mut s, &Ok(PowerState::On), t(2)));
        assert_eq!(s.conditions[0].last_update_time, Some(t(1)));
        // New power state, still contactable: the time stays.
        assert!(apply(&mut s, &Ok(PowerState::PoweringOff), t(3)));
        assert_eq!(s.power_state.as_deref(), Some("off"));
        assert_eq!(s.conditions[0].last_update_time, Some(t(1)));
    }

    #[test]
    fn unreachable_is_unknown_with_the_reason() {
        let mut s = MachineStatus::default();
        apply(&mut s, &Ok(PowerState::Off), t(1));
        assert!(apply(&mut s, &Err("cannot reach".into()), t(5)));
        assert_eq!(s.power_state.as_deref(), Some("unknown"));
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].message.as_deref(), Some("cannot reach"));
        assert_eq!(s.conditions[0].last_update_time, Some(t(5)));
        // A new reason is written, the time stays.
        assert!(apply(&mut s, &Err("other".into()), t(6)));
        assert_eq!(s.conditions[0].last_update_time, Some(t(5)));
        assert!(apply(&mut s, &Ok(PowerState::On), t(7)));
        assert_eq!(s.conditions[0].message, None);
        assert_eq!(s.conditions[0].last_update_time, Some(t(7)));
    }

    #[test]
    fn keeps_other_conditions_of_go_rufio() {
        let mut s: MachineStatus = serde_json::from_value(json!({
            "powerState": "on",
            "conditions": [{"type": "Contactable", "status": "True", "lastUpdateTime": "2024-01-01T00:00:00Z"}]
        }))
        .unwrap();
        assert!(!apply(&mut s, &Ok(PowerState::On), t(9)));
    }

    #[test]
    fn plain_http_is_a_condition_of_its_own_beside_contactable() {
        let mut s = MachineStatus::default();
        apply(&mut s, &Ok(PowerState::On), t(1));
        assert!(!apply_plain_http(&mut s, false, t(2)));
        assert!(apply_plain_http(&mut s, true, t(2)));
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == PLAINTEXT_CREDENTIALS)
            .unwrap();
        assert_eq!(c.status, "True");
        assert!(c.message.as_deref().unwrap().contains("in clear"), "{c:?}");
        // Written once; Contactable untouched.
        assert!(!apply_plain_http(&mut s, true, t(3)));
        assert_eq!(s.conditions[0].type_, CONTACTABLE);
        assert!(apply_plain_http(&mut s, false, t(4)));
        assert_eq!(s.conditions.len(), 1);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..100 {
            let d = jittered(Duration::from_secs(100));
            assert!(d >= Duration::from_secs(90) && d <= Duration::from_secs(110));
        }
    }
}
