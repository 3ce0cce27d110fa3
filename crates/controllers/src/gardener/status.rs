//! The one place that writes a Machine's status: phase, `lastOperation` and Node conditions,
//! with upstream's strings, through the status subresource, only when something changed, and
//! with the resourceVersion as precondition (a conflict means: look again).

use ingot_api::gardener::Machine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::{Code, Error, GardenerContext};

/// `status.currentStatus.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Unknown,
    Failed,
    CrashLoopBackOff,
    Terminating,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Unknown => "Unknown",
            Phase::Failed => "Failed",
            Phase::CrashLoopBackOff => "CrashLoopBackOff",
            Phase::Terminating => "Terminating",
        }
    }
}

/// `status.lastOperation.state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpState {
    Processing,
    Failed,
    Successful,
}

impl OpState {
    pub fn as_str(self) -> &'static str {
        match self {
            OpState::Processing => "Processing",
            OpState::Failed => "Failed",
            OpState::Successful => "Successful",
        }
    }
}

/// `status.lastOperation.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpType {
    Create,
    HealthCheck,
    Delete,
}

impl OpType {
    pub fn as_str(self) -> &'static str {
        match self {
            OpType::Create => "Create",
            OpType::HealthCheck => "HealthCheck",
            OpType::Delete => "Delete",
        }
    }
}

/// A new `lastOperation`, and the phase to go to (None keeps `currentStatus` as it is, as
/// the deletion steps do).
#[derive(Clone, Debug)]
pub struct Update {
    pub phase: Option<Phase>,
    pub timeout_active: bool,
    pub description: String,
    pub state: OpState,
    pub kind: OpType,
    pub error_code: Option<Code>,
    /// `Some("")` clears `status.lastKnownState`.
    pub last_known_state: Option<String>,
}

impl Update {
    pub fn new(
        phase: Option<Phase>,
        kind: OpType,
        state: OpState,
        description: impl Into<String>,
    ) -> Self {
        Update {
            phase,
            timeout_active: false,
            description: description.into(),
            state,
            kind,
            error_code: None,
            last_known_state: None,
        }
    }
}

/// The machine's phase, `""` while being created.
pub fn phase(machine: &Machine) -> &str {
    machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.phase.as_deref())
        .unwrap_or("")
}

/// The machine's `lastOperation.description`.
pub fn description(machine: &Machine) -> &str {
    machine
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .and_then(|o| o.description.as_deref())
        .unwrap_or("")
}

pub fn now() -> Value {
    serde_json::to_value(Time(Timestamp::now())).unwrap_or(Value::Null)
}

/// Writes the update unless the machine already says exactly this.
pub async fn write(ctx: &GardenerContext, machine: &Machine, update: Update) -> Result<(), Error> {
    let last = machine
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref());
    let same_op = last.is_some_and(|o| {
        o.description.as_deref() == Some(update.description.as_str())
            && o.state.as_deref() == Some(update.state.as_str())
            && o.type_.as_deref() == Some(update.kind.as_str())
            && o.error_code.as_deref() == update.error_code.map(Code::name)
    });
    let same_phase = update.phase.is_none_or(|p| phase(machine) == p.as_str());
    let same_state = update.last_known_state.as_ref().is_none_or(|s| {
        machine
            .status
            .as_ref()
            .and_then(|st| st.last_known_state.as_deref())
            .unwrap_or("")
            == s
    });
    if same_op && same_phase && same_state {
        return Ok(());
    }
    let now = now();
    let mut status = json!({
        "lastOperation": {
            "description": update.description,
            "state": update.state.as_str(),
            "type": update.kind.as_str(),
            "lastUpdateTime": now,
            "errorCode": update.error_code.map(Code::name),
        }
    });
    if let Some(p) = update.phase
        && !same_phase
    {
        status["currentStatus"] = json!({
            "phase": p.as_str(),
            "timeoutActive": update.timeout_active,
            "lastUpdateTime": now,
        });
    }
    if let Some(s) = update.last_known_state {
        status["lastKnownState"] = json!(s);
    }
    if let Some(p) = update.phase
        && !same_phase
    {
        event(ctx, machine, p, &update.description).await;
    }
    tracing::info!(
        machine = %machine.name_any(),
        phase = update.phase.map(Phase::as_str).unwrap_or(phase(machine)),
        state = update.state.as_str(),
        description = %update.description,
        "machine status"
    );
    patch_status(ctx, machine, status).await
}

/// An Event on the Machine for a new phase (reason: the phase; Warning for `Failed`,
/// `CrashLoopBackOff` and `Unknown`); a failure to record it is logged, never fatal.
async fn event(ctx: &GardenerContext, machine: &Machine, phase: Phase, description: &str) {
    use kube::runtime::events::EventType;
    let type_ = match phase {
        Phase::Failed | Phase::CrashLoopBackOff | Phase::Unknown => EventType::Warning,
        _ => EventType::Normal,
    };
    let note: String = description.chars().take(1024).collect();
    ctx.events
        .publish(machine, type_, phase.as_str(), "Reconcile", note)
        .await;
}

/// Copies the Node's conditions to the Machine.
pub async fn write_conditions(
    ctx: &GardenerContext,
    machine: &Machine,
    conditions: &[Value],
) -> Result<(), Error> {
    patch_status(ctx, machine, json!({ "conditions": conditions })).await
}

/// Sets `currentStatus.preserveExpiryTime`.
pub async fn write_preserve_expiry(
    ctx: &GardenerContext,
    machine: &Machine,
    until: Timestamp,
) -> Result<(), Error> {
    let until = serde_json::to_value(Time(until))?;
    patch_status(
        ctx,
        machine,
        json!({"currentStatus": {"preserveExpiryTime": until}}),
    )
    .await
}

/// Clears `currentStatus.preserveExpiryTime` (the last step of ending a preservation).
pub async fn clear_preserve_expiry(ctx: &GardenerContext, machine: &Machine) -> Result<(), Error> {
    patch_status(
        ctx,
        machine,
        json!({"currentStatus": {"preserveExpiryTime": null}}),
    )
    .await
}

async fn patch_status(
    ctx: &GardenerContext,
    machine: &Machine,
    status: Value,
) -> Result<(), Error> {
    let body = json!({
        "metadata": {"resourceVersion": machine.resource_version()},
        "status": status,
    });
    ctx.machines()
        .patch_status(
            &machine.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await?;
    Ok(())
}
