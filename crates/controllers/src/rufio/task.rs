//! The Task controller: one BMC action, completed only once the BMC reports its effect.
//!
//! Phases: set `startTime`; mark the action as being sent (annotation), send it, mark it sent;
//! then read the BMC (soon after the send, then less often, at most every `task_poll`) until
//! the state is reached (`Completed`) or `task_timeout` passes (`Failed`, Rufio's
//! `bmc task timeout: <ns>`). Transient errors
//! (unreachable, busy) are retried with backoff. A destructive action (`cycle`, `reset`) whose
//! sending was interrupted, or whose answer was lost (timeout, connection lost after sending)
//! without the power state showing that the BMC carried it out, is never sent again: the Task
//! fails and says so.

use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::{Action as RufioAction, JobStatus, Task};
use ingot_bmc::manager::ManagedBmc;
use ingot_bmc::{
    Bmc, BmcError, BootDevice, BootMode, BootRequest, MediaKind, MediaSlot, PowerAction, PowerState,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use super::bmcs::{self, ConnectionError, error_chain};
use super::coordination::Ahead;
use super::job::{COMPLETED, FAILED, has_true, set};
use super::tenancy::{ConnectionField, Refusal};
use super::{Error, RufioContext, key_of};
use crate::runtime::{self, Backoff, ControllerRuntime};
use kube::runtime::events::EventType;

const CONTROLLER: &str = "rufio-task";
/// A failed reconcile (an API error) is retried after 1 s, doubling to 30 s; a busy or
/// unreachable BMC has the same backoff of its own ([`super::Coordination::task_retry`]).
const RETRY_BASE: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Where ingot notes how far it got sending a Task's action: `sending`, then `sent`.
pub const SENT_ANNOTATION: &str = "rufio.ingot.dev/action";
/// Why the action sent ahead of this Task (by its Job) failed in a way that sending it again
/// would hide: the Task fails with this message and sends nothing.
pub const FAILED_AHEAD_ANNOTATION: &str = "rufio.ingot.dev/failed-ahead";

/// A Task's action, checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Status,
    Power(PowerAction),
    Boot(BootRequest),
    /// Attach the image to a device of this kind; `None` ejects every such device.
    Media(MediaKind, Option<String>),
}

impl Op {
    /// Actions that must not run twice (a second reboot) when it is unknown whether the
    /// first one reached the BMC.
    pub fn destructive(&self) -> bool {
        matches!(self, Op::Power(PowerAction::Cycle | PowerAction::Reset))
    }
}

/// Parses a Task's action. Errors name the field and what is accepted.
pub fn parse(action: &RufioAction) -> Result<Op, String> {
    let set = [
        action.power_action.is_some(),
        action.one_time_boot_device_action.is_some(),
        action.virtual_media_action.is_some(),
        action.boot_device.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if set != 1 {
        return Err(format!(
            "task must have exactly one of powerAction, oneTimeBootDeviceAction, virtualMediaAction, bootDevice (has {set})"
        ));
    }
    if let Some(p) = &action.power_action {
        return match p.as_str() {
            "status" => Ok(Op::Status),
            other => other.parse().map(Op::Power).map_err(|_| {
                format!("powerAction {other:?} is not one of on, off, soft, status, cycle, reset")
            }),
        };
    }
    if let Some(b) = &action.one_time_boot_device_action {
        let device = b.device.first().ok_or_else(|| {
            "oneTimeBootDeviceAction.device is empty: name one of pxe, disk, bios, cdrom".to_owned()
        })?;
        return Ok(Op::Boot(BootRequest {
            device: device_of(device, "oneTimeBootDeviceAction.device")?,
            persistent: false,
            mode: mode_of(b.efi_boot),
        }));
    }
    if let Some(b) = &action.boot_device {
        return Ok(Op::Boot(BootRequest {
            device: device_of(&b.device, "bootDevice.device")?,
            persistent: b.persistent.unwrap_or(false),
            mode: mode_of(b.efi_boot),
        }));
    }
    if let Some(m) = &action.virtual_media_action {
        let kind = MediaKind::from_redfish(&m.kind).ok_or_else(|| {
            format!(
                "virtualMediaAction.kind {:?} is not supported: use one of CD, DVD, USBStick, Floppy",
                m.kind
            )
        })?;
        let image = m.media_url.clone().filter(|u| !u.is_empty());
        return Ok(Op::Media(kind, image));
    }
    Err("task has no action".to_owned())
}

/// `efiBoot: true` asks for UEFI (and may switch a Legacy machine: it was asked for). Absent
/// or `false`, the BMC's current mode is kept: upstream Rufio reads both as a Go `false` and
/// sends Legacy, which switches UEFI machines to BIOS boot (harvester#11562), and its own
/// sample writes `efiBoot: false`; so `false` is not taken as a request for Legacy. Legacy is
/// asked for explicitly with `ingot bmc boot <device> --mode legacy`.
fn mode_of(efi: Option<bool>) -> Option<BootMode> {
    efi.unwrap_or(false).then_some(BootMode::Uefi)
}

fn device_of(device: &str, field: &str) -> Result<BootDevice, String> {
    match device {
        "pxe" => Ok(BootDevice::Pxe),
        "disk" => Ok(BootDevice::Disk),
        "bios" => Ok(BootDevice::Bios),
        "cdrom" => Ok(BootDevice::Cdrom),
        other => Err(format!(
            "{field} {other:?} is not supported: use one of pxe, disk, bios, cdrom"
        )),
    }
}

/// Whether the BMC shows the action's effect.
pub fn power_reached(action: PowerAction, state: PowerState) -> bool {
    match action {
        PowerAction::On | PowerAction::Cycle | PowerAction::Reset => state == PowerState::On,
        PowerAction::Off | PowerAction::Soft => state == PowerState::Off,
    }
}

/// How far sending got, from the annotation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sent {
    No,
    Sending,
    Yes,
}

/// What to do with a Task now: the decision of the pure step [`phase`], carried out by the
/// reconcile (one function per phase) into an [`Outcome`].
#[derive(Debug, PartialEq)]
pub enum Phase {
    /// Finished (or deleted): nothing.
    Done,
    /// Record `startTime` before anything is sent (a reboot, or a `status` read).
    Start,
    /// A repeatable action (power on / off, boot device, virtual media) not sent yet: it goes
    /// out with its `startTime`, since sending it twice is harmless and it need not wait for
    /// the API server's answer.
    StartAndSend,
    /// Created `sent` (its Job sent the action ahead): if the BMC already shows the effect,
    /// one status write starts and completes the Task; otherwise it is started as [`Phase::Start`].
    StartSentAhead,
    /// Rufio's timeout, with the time since `startTime`.
    TimedOut(Duration),
    Send,
    /// Sending a destructive action was interrupted: never replay it.
    Interrupted,
    Verify,
}

pub fn phase(task: &Task, op: &Op, now: Timestamp, timeout: Duration) -> Phase {
    let status = task.status.clone().unwrap_or_default();
    if task.metadata.deletion_timestamp.is_some()
        || has_true(&status.conditions, COMPLETED)
        || has_true(&status.conditions, FAILED)
    {
        return Phase::Done;
    }
    let Some(start) = status.start_time else {
        return match sent(task) {
            Sent::Yes => Phase::StartSentAhead,
            Sent::No if !op.destructive() && *op != Op::Status => Phase::StartAndSend,
            _ => Phase::Start,
        };
    };
    let elapsed = Duration::try_from(now.duration_since(start.0)).unwrap_or_default();
    if elapsed >= timeout {
        return Phase::TimedOut(elapsed);
    }
    match sent(task) {
        Sent::No => Phase::Send,
        Sent::Sending if op.destructive() => Phase::Interrupted,
        Sent::Sending => Phase::Send,
        Sent::Yes => Phase::Verify,
    }
}

pub fn sent(task: &Task) -> Sent {
    match task.annotations().get(SENT_ANNOTATION).map(String::as_str) {
        Some("sending") => Sent::Sending,
        Some("sent") => Sent::Yes,
        _ => Sent::No,
    }
}

pub async fn run(
    ctx: Arc<RufioContext>,
    tasks: Store<Task>,
    changes: impl futures::Stream<Item = Arc<Task>> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_shared_stream(changes, tasks)
        .with_config(Config::default().concurrency(ctx.settings.task_concurrency));
    let backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// One reconciliation of a Task (what the controller runs for each change).
pub async fn reconcile(task: Arc<Task>, ctx: Arc<RufioContext>) -> Result<Action, Error> {
    reconcile_inner(&task, &ctx).await
}

/// How a Task ends, or that it goes on (what a phase's function returns).
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Complete,
    Fail(String),
    /// Look again after this long.
    Again(Duration),
}

async fn reconcile_inner(task: &Task, ctx: &RufioContext) -> Result<Action, Error> {
    let api: Api<Task> = Api::namespaced(
        ctx.client.clone(),
        task.namespace().as_deref().unwrap_or_default(),
    );
    let op = match parse(&task.spec.task) {
        Ok(op) => op,
        Err(message) => return fail_unparsable(&api, task, ctx, message).await,
    };
    if let Some(message) = task.annotations().get(FAILED_AHEAD_ANNOTATION) {
        return fail_unparsable(&api, task, ctx, message.clone()).await;
    }
    let mut decided = phase(task, &op, Timestamp::now(), ctx.settings.task_timeout);
    // A copy that does not show the `sent` mark of an action this process sent is behind
    // (woken by the Task's own `startTime` write): the Task as stored decides.
    let fresh;
    let task = if matches!(decided, Phase::Send | Phase::StartAndSend)
        && ctx.coordination.sent_here(&key_of(task))
    {
        fresh = api.get(&task.name_any()).await?;
        decided = phase(&fresh, &op, Timestamp::now(), ctx.settings.task_timeout);
        &fresh
    } else {
        task
    };
    match decided {
        Phase::StartAndSend => return start_and_send(&api, task, &op, ctx).await,
        Phase::StartSentAhead if complete_if_shown(&api, task, &op, ctx).await? => {
            ctx.coordination.task_settled(&key_of(task));
            return Ok(Action::await_change());
        }
        _ => {}
    }
    let (task, current) = started(&api, task.clone(), &op, ctx, decided).await?;
    if current == Phase::Done {
        ctx.coordination.task_settled(&key_of(&task));
        return Ok(Action::await_change());
    }
    let outcome = act(&api, &task, &op, ctx, current).await?;
    settle(&api, &task, ctx, outcome).await
}

/// A Task whose action does not parse (or whose action sent ahead failed) fails with the
/// reason (unless it already ended).
async fn fail_unparsable(
    api: &Api<Task>,
    task: &Task,
    ctx: &RufioContext,
    message: String,
) -> Result<Action, Error> {
    if phase(
        task,
        &Op::Status,
        Timestamp::now(),
        ctx.settings.task_timeout,
    ) != Phase::Done
    {
        finish(api, task, Outcome::Fail(message)).await?;
    }
    Ok(Action::await_change())
}

/// [`Phase::StartAndSend`]: `startTime` and the action written and sent at once. (The Job
/// creates its next Task only once this one shows `Completed` in the cache this copy came
/// from, so a stale copy never replays an earlier step.)
async fn start_and_send(
    api: &Api<Task>,
    task: &Task,
    op: &Op,
    ctx: &RufioContext,
) -> Result<Action, Error> {
    let (started, outcome) = tokio::join!(start(api, task), send_phase(task, op, ctx, api));
    started?;
    settle(api, task, ctx, outcome?).await
}

/// [`Phase::StartSentAhead`]: whether the BMC shows the effect of the action sent ahead, and
/// one write then started and completed the Task.
async fn complete_if_shown(
    api: &Api<Task>,
    task: &Task,
    op: &Op,
    ctx: &RufioContext,
) -> Result<bool, Error> {
    let Ok(bmc) = reach(task, ctx).await else {
        return Ok(false);
    };
    Ok(effect_shows(&bmc, op).await && complete_at_start(api, task).await?.is_some())
}

/// [`Phase::Start`]: records `startTime` and goes on with the Task as stored. Writes on the
/// way to sending carry the resourceVersion they were decided on: a copy from the watch cache
/// that is behind (an earlier reconcile already started or sent) gets a conflict, and the Task
/// is read again from the API server, so a reboot is never sent twice because of a stale copy.
/// An interrupted send is judged on a fresh read too.
async fn started(
    api: &Api<Task>,
    mut task: Task,
    op: &Op,
    ctx: &RufioContext,
    mut current: Phase,
) -> Result<(Task, Phase), Error> {
    let name = task.name_any();
    let mut read_fresh = false;
    for _ in 0..3 {
        match current {
            Phase::Start | Phase::StartAndSend | Phase::StartSentAhead => {
                match start(api, &task).await? {
                    // The answer is the Task as stored: go on with it at once.
                    Some(t) => task = t,
                    None => {
                        task = api.get(&name).await?;
                        read_fresh = true;
                    }
                }
            }
            Phase::Interrupted if !read_fresh => {
                task = api.get(&name).await?;
                read_fresh = true;
            }
            _ => break,
        }
        current = phase(&task, op, Timestamp::now(), ctx.settings.task_timeout);
    }
    Ok((task, current))
}

/// The started Task's phase carried out: what it comes to.
async fn act(
    api: &Api<Task>,
    task: &Task,
    op: &Op,
    ctx: &RufioContext,
    current: Phase,
) -> Result<Outcome, Error> {
    Ok(match current {
        // Done is settled before; conflicts three times in a row: look again shortly.
        Phase::Done | Phase::Start | Phase::StartAndSend | Phase::StartSentAhead => {
            Outcome::Again(ctx.settings.task_poll)
        }
        Phase::TimedOut(elapsed) => {
            Outcome::Fail(format!("bmc task timeout: {}", elapsed.as_nanos()))
        }
        Phase::Interrupted => Outcome::Fail(format!(
            "sending {} was interrupted and it is unknown whether the BMC received it; it is not sent again: check the machine, then create a new Job",
            describe(op)
        )),
        Phase::Send => send_phase(task, op, ctx, api).await?,
        Phase::Verify => match connect(task, ctx).await {
            Ok(bmc) => verify(&bmc, op, ctx, &key_of(task), next_look(task, ctx)).await,
            Err(outcome) => outcome,
        },
    })
}

/// Sends the Task's action (a `status` Task reads the power state), marking a reboot as being
/// sent first and every action as sent once the BMC accepted it.
async fn send_phase(
    task: &Task,
    op: &Op,
    ctx: &RufioContext,
    api: &Api<Task>,
) -> Result<Outcome, Error> {
    let key = key_of(task);
    let name = task.name_any();
    let bmc = match connect(task, ctx).await {
        Ok(bmc) => bmc,
        Err(outcome) => return Ok(outcome),
    };
    if *op == Op::Status {
        // Nothing to send: `status` reads the power state (Rufio fails it always).
        return Ok(match bmc.power_state().await {
            Ok(_) => Outcome::Complete,
            Err(e) => transient_or_fail(ctx, &key, "get power state", &e),
        });
    }
    // Only a reboot needs the mark: sending anything else twice is harmless (and this
    // process does not, see `Coordination::sending`).
    if op.destructive() && !mark_sending(api, &name, task.resource_version()).await? {
        return Ok(Outcome::Again(Duration::from_millis(200)));
    }
    ctx.coordination.sending(&key);
    Ok(match send(&bmc, op).await {
        Ok(()) => {
            if op.destructive() {
                ctx.crash_point("rufio-after-destructive-send");
            }
            mark(api, &name, "sent").await?;
            info!(task = %key, action = describe(op), "BMC accepted the action");
            Outcome::Again(FIRST_LOOK.min(ctx.settings.task_poll))
        }
        // No answer, or the connection lost after sending: the BMC may have acted. The BMC
        // layer already read the power state, which did not show it: a reboot is never sent
        // twice.
        Err(e) if op.destructive() && e.may_have_acted() => Outcome::Fail(format!(
            "{}: {}; the power state does not show whether the BMC carried it out, so it is not sent again: check the machine, then create a new Job",
            describe(op),
            error_chain(&e)
        )),
        Err(e) if surely_not_sent(&e) || (!op.destructive() && e.is_transient()) => {
            ctx.coordination.forget_send(&key);
            mark(api, &name, "").await?;
            transient_or_fail(ctx, &key, describe(op), &e)
        }
        Err(e) => Outcome::Fail(format!("{}: {}", describe(op), error_chain(&e))),
    })
}

/// Records `startTime` if the Task is still as this reconcile saw it; `None` when it is not
/// (an earlier reconcile already started it).
async fn start(api: &Api<Task>, task: &Task) -> Result<Option<Task>, Error> {
    let status = JobStatus {
        start_time: Some(Time(Timestamp::now())),
        ..task.status.clone().unwrap_or_default()
    };
    let rv = task.resource_version();
    guarded(api.patch_status(
        &task.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": {"resourceVersion": rv}, "status": status })),
    ))
    .await
}

async fn settle(
    api: &Api<Task>,
    task: &Task,
    ctx: &RufioContext,
    outcome: Outcome,
) -> Result<Action, Error> {
    match outcome {
        Outcome::Again(delay) => Ok(Action::requeue(delay.max(Duration::from_millis(50)))),
        done => {
            ctx.coordination.task_settled(&key_of(task));
            finish(api, task, done).await?;
            Ok(Action::await_change())
        }
    }
}

fn describe(op: &Op) -> &'static str {
    match op {
        Op::Status => "power status",
        Op::Power(PowerAction::On) => "power on",
        Op::Power(PowerAction::Off) => "power off",
        Op::Power(PowerAction::Soft) => "soft power off",
        Op::Power(PowerAction::Cycle) => "power cycle",
        Op::Power(PowerAction::Reset) => "power reset",
        Op::Boot(_) => "set boot device",
        Op::Media(_, Some(_)) => "insert virtual media",
        Op::Media(_, None) => "eject virtual media",
    }
}

/// Errors that show the request never reached the BMC (no connection made, busy). A connection
/// lost after sending is `MaybeSent`, not one of these.
fn surely_not_sent(e: &BmcError) -> bool {
    matches!(
        e,
        BmcError::Unreachable(_) | BmcError::SessionLimit | BmcError::Unavailable { .. }
    )
}

fn transient_or_fail(ctx: &RufioContext, key: &str, what: &str, e: &BmcError) -> Outcome {
    if e.is_transient() {
        let delay = ctx.coordination.task_retry(key);
        debug!(task = key, error = %e, ?delay, "transient BMC error; retrying");
        Outcome::Again(delay)
    } else {
        Outcome::Fail(format!("{what}: {}", error_chain(e)))
    }
}

/// Why a Task's BMC cannot be used now.
enum NotReached {
    /// The Secret is not readable yet, or the BMC does not answer: try again later.
    Transient(String),
    /// The connection is misconfigured: the Task fails with this message.
    Misconfigured(String),
    /// The Task may not use this connection (tenancy): it fails, nothing read or sent.
    Refused(Refusal),
}

/// Where and how to reach the Task's BMC (its Secret read, or kept).
async fn target_of(task: &Task, ctx: &RufioContext) -> Result<bmcs::Target, NotReached> {
    match ctx
        .target_for(
            ConnectionField::Rufio,
            &task.metadata,
            &task.spec.connection,
        )
        .await
    {
        Ok(target) => Ok(target),
        Err(e @ (ConnectionError::SecretRead { .. } | ConnectionError::SecretKey { .. })) => Err(
            NotReached::Transient(format!("secret not readable yet: {e}")),
        ),
        Err(ConnectionError::Refused(refusal)) => Err(NotReached::Refused(refusal)),
        Err(e) => Err(NotReached::Misconfigured(format!(
            "Failed to connect to BMC: {e}"
        ))),
    }
}

/// A handle on the Task's BMC, without side effects on the Task's backoff.
async fn reach(task: &Task, ctx: &RufioContext) -> Result<ManagedBmc, NotReached> {
    let target = target_of(task, ctx).await?;
    ctx.bmcs
        .reach_for(&key_of(task), &target)
        .await
        .map(|reached| reached.bmc)
        .map_err(|e| NotReached::Transient(format!("BMC not reachable: {e}")))
}

/// A handle on the Task's BMC. Configuration errors fail the Task; unreachable BMCs and
/// unreadable Secrets are retried with backoff until the timeout.
async fn connect(task: &Task, ctx: &RufioContext) -> Result<ManagedBmc, Outcome> {
    match reach(task, ctx).await {
        Ok(bmc) => Ok(bmc),
        Err(NotReached::Transient(why)) => {
            let key = key_of(task);
            debug!(task = %key, %why, "retrying");
            Err(Outcome::Again(ctx.coordination.task_retry(&key)))
        }
        Err(NotReached::Misconfigured(message)) => Err(Outcome::Fail(message)),
        Err(NotReached::Refused(refusal)) => {
            let message = format!("Failed to connect to BMC: {refusal}");
            ctx.task_events
                .publish(
                    task,
                    EventType::Warning,
                    refusal.reason(),
                    "Connect",
                    message.clone(),
                )
                .await;
            Err(Outcome::Fail(message))
        }
    }
}

/// Sends a repeatable action (power on, off, soft, boot device) for the Job that is about to
/// create its Task, so that the action does not wait for the API server to store the Task
/// first (seconds, on a busy control plane). Returns whether the BMC accepted it: the Task is
/// then created marked `sent` and only verifies. When it did not, or when the operator stops
/// before the Task exists, the Task sends the action itself, which is harmless for these
/// actions. Reboots and `status` are never sent ahead: they wait for their Task.
pub(crate) async fn send_ahead(task: &Task, ctx: &RufioContext) -> Ahead {
    let Some(op) = sendable_ahead(&task.spec.task) else {
        return Ahead::NotSent;
    };
    let key = key_of(task);
    let sent = tokio::time::timeout(SEND_AHEAD_WAIT, async {
        // Only to a BMC this process has already reached: finding the protocol of a new (or
        // dead) BMC can take the connect timeouts, which the Task's create must not wait for.
        let target = target_of(task, ctx).await.ok()?;
        ctx.bmcs.known(&target)?;
        let reached = ctx.bmcs.reach_for(&key, &target).await.ok()?;
        Some(send(&reached.bmc, &op).await)
    })
    .await;
    match sent {
        Ok(Some(Ok(()))) => {
            info!(task = %key, action = describe(&op), "BMC accepted the action (sent ahead of its Task)");
            Ahead::Sent
        }
        // The BMC switched the boot mode: sent again, the override would read the switched
        // mode as the one to keep and succeed. The Task fails with the reason instead.
        Ok(Some(Err(e @ BmcError::BootModeNotKept { .. }))) => {
            Ahead::Failed(format!("{}: {}", describe(&op), error_chain(&e)))
        }
        // Refused, unreachable or slow: the Task sends it (again, which these actions allow).
        Ok(Some(Err(e))) => {
            debug!(task = %key, error = %e, "not sent ahead; the Task sends it");
            Ahead::NotSent
        }
        Ok(None) | Err(_) => Ahead::NotSent,
    }
}

/// The action, if it may be sent ahead of its Task: it is repeatable and quick. Virtual media
/// is not: the BMC fetches the image before it answers, which can take longer than the wait.
pub(crate) fn sendable_ahead(action: &RufioAction) -> Option<Op> {
    parse(action)
        .ok()
        .filter(|op| matches!(op, Op::Power(_) | Op::Boot(_)) && !op.destructive())
}

/// How long sending ahead may take (Secret read and BMC answer): far longer than a healthy
/// BMC takes, and short enough that a BMC that stopped answering delays its Task's create by
/// no more than this.
const SEND_AHEAD_WAIT: Duration = Duration::from_secs(2);

async fn send(bmc: &ManagedBmc, op: &Op) -> Result<(), BmcError> {
    match op {
        Op::Status => Ok(()),
        Op::Power(action) => bmc.power(*action).await.map(|_| ()),
        Op::Boot(request) => bmc.set_boot_override(*request).await.map(|_| ()),
        Op::Media(kind, image) => bmc.set_virtual_media(*kind, image.clone()).await,
    }
}

/// Whether the BMC's devices show the media change: the image attached to a device of the
/// kind, or no device of the kind holding anything.
pub fn media_reached(kind: MediaKind, image: Option<&str>, slots: &[MediaSlot]) -> bool {
    let mut of_kind = slots.iter().filter(|s| s.takes(kind));
    match image {
        Some(image) => of_kind.any(|s| s.inserted && s.image.as_deref() == Some(image)),
        None => of_kind.all(|s| !s.inserted),
    }
}

/// How soon a sent action's effect is first read back.
pub const FIRST_LOOK: Duration = Duration::from_millis(250);

/// How soon a started Task's BMC is read again: as long as the Task has run (at least
/// [`FIRST_LOOK`]), at most `--rufio-task-poll-seconds`. A BMC that acts within a second
/// completes its Task within a second; a slow one is read a few more times in its first
/// seconds, then every poll.
pub fn look_again_after(started: Option<Timestamp>, now: Timestamp, poll: Duration) -> Duration {
    let running = started
        .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
        .unwrap_or_default();
    running.max(FIRST_LOOK).min(poll)
}

fn next_look(task: &Task, ctx: &RufioContext) -> Duration {
    let started = task
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    look_again_after(started, Timestamp::now(), ctx.settings.task_poll)
}

/// Reads the BMC: Complete once the action's effect shows; else looks again after `poll`.
async fn verify(
    bmc: &ManagedBmc,
    op: &Op,
    ctx: &RufioContext,
    key: &str,
    poll: Duration,
) -> Outcome {
    match op {
        Op::Status => Outcome::Complete,
        Op::Power(action) => match bmc.power_state().await {
            Ok(state) if power_reached(*action, state) => Outcome::Complete,
            Ok(_) => Outcome::Again(poll),
            Err(e) => transient_or_fail(ctx, key, "get power state", &e),
        },
        Op::Boot(request) => match bmc.boot_override().await {
            // The device read back is the evidence: some BMCs (ipmi_sim, and ipmitool's
            // "Boot Flag Invalid") never report the valid bit of a one-time override.
            Ok(b) if b.device == request.device => Outcome::Complete,
            Ok(b) => Outcome::Fail(format!(
                "set boot device: the BMC reports {:?} after setting {:?}",
                b.device, request.device
            )),
            Err(e) => transient_or_fail(ctx, key, "get boot device", &e),
        },
        // A BMC may take a while to connect the image: looked at again until the timeout.
        Op::Media(kind, image) => match bmc.virtual_media().await {
            Ok(slots) if media_reached(*kind, image.as_deref(), &slots) => Outcome::Complete,
            Ok(_) => Outcome::Again(poll),
            Err(e) => transient_or_fail(ctx, key, "get virtual media", &e),
        },
    }
}

/// Whether the BMC already shows the action's effect, read without touching the Task's
/// backoff (any error or other reading: not yet, and the Task goes the usual way).
async fn effect_shows(bmc: &ManagedBmc, op: &Op) -> bool {
    match op {
        Op::Status => false,
        Op::Power(action) => {
            matches!(bmc.power_state().await, Ok(state) if power_reached(*action, state))
        }
        Op::Boot(request) => {
            matches!(bmc.boot_override().await, Ok(b) if b.device == request.device)
        }
        Op::Media(kind, image) => {
            matches!(bmc.virtual_media().await, Ok(slots) if media_reached(*kind, image.as_deref(), &slots))
        }
    }
}

/// Records `startTime`, `Completed` and `completionTime` in one write, if the Task is still
/// as this reconcile saw it; `None` when it is not.
async fn complete_at_start(api: &Api<Task>, task: &Task) -> Result<Option<Task>, Error> {
    let now = Time(Timestamp::now());
    let mut status = task.status.clone().unwrap_or_default();
    status.start_time = Some(now.clone());
    status.completion_time = Some(now);
    set(&mut status.conditions, COMPLETED, None);
    guarded(api.patch_status(
        &task.name_any(),
        &PatchParams::default(),
        &Patch::Merge(
            json!({ "metadata": {"resourceVersion": task.resource_version()}, "status": status }),
        ),
    ))
    .await
}

/// `Ok(None)` when the write was refused as based on an old copy (HTTP 409).
async fn guarded<T>(
    write: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<Option<T>, Error> {
    match write.await {
        Ok(t) => Ok(Some(t)),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Marks a reboot as being sent, if the Task is still as this reconcile saw it.
async fn mark_sending(api: &Api<Task>, name: &str, rv: Option<String>) -> Result<bool, Error> {
    let body = json!({ "metadata": { "resourceVersion": rv, "annotations": { SENT_ANNOTATION: "sending" } } });
    Ok(
        guarded(api.patch_metadata(name, &PatchParams::default(), &Patch::Merge(body)))
            .await?
            .is_some(),
    )
}

async fn mark(api: &Api<Task>, name: &str, value: &str) -> Result<(), Error> {
    let value = (!value.is_empty()).then_some(value);
    api.patch_metadata(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": { SENT_ANNOTATION: value } } })),
    )
    .await?;
    Ok(())
}

async fn finish(api: &Api<Task>, task: &Task, outcome: Outcome) -> Result<(), Error> {
    let mut status = task.status.clone().unwrap_or_default();
    match outcome {
        Outcome::Complete => {
            set(&mut status.conditions, COMPLETED, None);
            status.completion_time = Some(Time(Timestamp::now()));
        }
        Outcome::Fail(message) => set(&mut status.conditions, FAILED, Some(message)),
        Outcome::Again(_) => return Ok(()),
    }
    api.patch_status(
        &task.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn task(status: serde_json::Value, annotation: Option<&str>) -> Task {
        let mut t: Task = serde_json::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
            "metadata": {"name": "j-task-0", "namespace": "ns"},
            "spec": {"task": {"powerAction": "cycle"}, "connection": {"host": "h", "insecureTLS": true}},
            "status": status
        }))
        .unwrap();
        if let Some(a) = annotation {
            t.annotations_mut()
                .insert(SENT_ANNOTATION.to_owned(), a.to_owned());
        }
        t
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    const T: Duration = Duration::from_secs(600);

    #[test]
    fn phases_in_order() {
        let cycle = &Op::Power(PowerAction::Cycle);
        let on = &Op::Power(PowerAction::On);
        assert_eq!(phase(&task(json!({}), None), cycle, at(0), T), Phase::Start);
        // The two quick starts: a repeatable action goes out with its startTime, and one sent
        // ahead by its Job may start and complete in one write.
        assert_eq!(
            phase(&task(json!({}), None), on, at(0), T),
            Phase::StartAndSend
        );
        assert_eq!(
            phase(&task(json!({}), None), &Op::Status, at(0), T),
            Phase::Start
        );
        assert_eq!(
            phase(&task(json!({}), Some("sent")), on, at(0), T),
            Phase::StartSentAhead
        );
        assert_eq!(
            phase(&task(json!({}), Some("sending")), on, at(0), T),
            Phase::Start
        );
        let started = json!({"startTime": "1970-01-01T00:00:10Z"});
        assert_eq!(
            phase(&task(started.clone(), None), cycle, at(20), T),
            Phase::Send
        );
        assert_eq!(
            phase(&task(started.clone(), Some("sent")), cycle, at(20), T),
            Phase::Verify
        );
        // Interrupted while sending: a reboot is never replayed, a power-on is.
        assert_eq!(
            phase(&task(started.clone(), Some("sending")), cycle, at(20), T),
            Phase::Interrupted
        );
        assert_eq!(
            phase(&task(started.clone(), Some("sending")), on, at(20), T),
            Phase::Send
        );
        assert_eq!(
            phase(&task(started, Some("sent")), cycle, at(610), T),
            Phase::TimedOut(Duration::from_secs(600))
        );
    }

    #[test]
    fn finished_tasks_are_left_alone() {
        for c in ["Completed", "Failed"] {
            let t = task(
                json!({"startTime": "1970-01-01T00:00:10Z", "conditions": [{"type": c, "status": "True"}]}),
                None,
            );
            assert_eq!(phase(&t, &Op::Status, at(10_000), T), Phase::Done);
        }
    }

    #[test]
    fn actions_parse_as_rufio_names_them() {
        let a = |v: serde_json::Value| parse(&serde_json::from_value(v).unwrap());
        assert_eq!(
            a(json!({"powerAction": "soft"})),
            Ok(Op::Power(PowerAction::Soft))
        );
        assert_eq!(a(json!({"powerAction": "status"})), Ok(Op::Status));
        assert_eq!(
            a(json!({"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": false}})),
            Ok(Op::Boot(BootRequest {
                device: BootDevice::Pxe,
                persistent: false,
                mode: None
            }))
        );
        assert_eq!(
            a(json!({"oneTimeBootDeviceAction": {"device": ["disk"], "efiBoot": true}})),
            Ok(Op::Boot(BootRequest {
                device: BootDevice::Disk,
                persistent: false,
                mode: Some(BootMode::Uefi)
            }))
        );
        assert_eq!(
            a(json!({"bootDevice": {"device": "bios", "persistent": true}})),
            Ok(Op::Boot(BootRequest {
                device: BootDevice::Bios,
                persistent: true,
                mode: None
            }))
        );
        for (bad, field) in [
            (
                json!({"oneTimeBootDeviceAction": {"device": []}}),
                "device is empty",
            ),
            (
                json!({"oneTimeBootDeviceAction": {"device": ["safe"]}}),
                "\"safe\"",
            ),
            (
                json!({"virtualMediaAction": {"kind": "BluRay", "mediaURL": "http://x/a.iso"}}),
                "virtualMediaAction.kind \"BluRay\"",
            ),
            (json!({}), "exactly one"),
            (json!({"powerAction": "hibernate"}), "powerAction"),
        ] {
            let e = a(bad).unwrap_err();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn virtual_media_parses_with_an_empty_url_as_eject() {
        let a = |v: serde_json::Value| parse(&serde_json::from_value(v).unwrap());
        assert_eq!(
            a(
                json!({"virtualMediaAction": {"kind": "CD", "mediaURL": "http://10.0.0.1/hook.iso"}})
            ),
            Ok(Op::Media(
                MediaKind::Cd,
                Some("http://10.0.0.1/hook.iso".to_owned())
            ))
        );
        assert_eq!(
            a(json!({"virtualMediaAction": {"kind": "USBStick", "mediaURL": ""}})),
            Ok(Op::Media(MediaKind::UsbStick, None))
        );
        assert_eq!(
            a(json!({"virtualMediaAction": {"kind": "DVD"}})),
            Ok(Op::Media(MediaKind::Dvd, None))
        );
        // Never sent ahead of its Task: the BMC fetches the image before it answers.
        assert!(
            sendable_ahead(
                &serde_json::from_value(
                    json!({"virtualMediaAction": {"kind": "CD", "mediaURL": "http://x/a.iso"}})
                )
                .unwrap()
            )
            .is_none()
        );
    }

    #[test]
    fn media_is_reached_when_the_image_is_in_a_device_of_the_kind() {
        let slot = |types: &[&str], image: Option<&str>, inserted: bool| MediaSlot {
            id: "/redfish/v1/Managers/1/VirtualMedia/x".into(),
            media_types: types.iter().map(|t| (*t).to_owned()).collect(),
            image: image.map(str::to_owned),
            inserted,
        };
        let url = "http://10.0.0.1/hook.iso";
        let usb = slot(&["USBStick"], Some(url), true);
        let cd_empty = slot(&["CD", "DVD"], None, false);
        let cd_other = slot(&["CD", "DVD"], Some("http://10.0.0.1/old.iso"), true);
        let cd_hook = slot(&["CD", "DVD"], Some(url), true);
        let cd_hook_not_inserted = slot(&["CD", "DVD"], Some(url), false);
        // The image in a device of another kind does not count.
        assert!(!media_reached(
            MediaKind::Cd,
            Some(url),
            &[usb.clone(), cd_empty.clone()]
        ));
        assert!(!media_reached(
            MediaKind::Cd,
            Some(url),
            std::slice::from_ref(&cd_other)
        ));
        assert!(!media_reached(
            MediaKind::Cd,
            Some(url),
            &[cd_hook_not_inserted]
        ));
        assert!(media_reached(
            MediaKind::Dvd,
            Some(url),
            &[usb.clone(), cd_hook.clone()]
        ));
        // Ejected: no device of the kind holds anything; other kinds may.
        assert!(media_reached(MediaKind::Cd, None, &[usb, cd_empty]));
        assert!(!media_reached(MediaKind::Cd, None, &[cd_other]));
    }

    /// A sent action is read back soon, then less often, never less often than the poll.
    #[test]
    fn the_bmc_is_read_again_soon_after_the_send_then_every_poll() {
        let poll = Duration::from_secs(3);
        let ms = |m: i64| Timestamp::from_millisecond(1_000_000 + m).unwrap();
        let after = |running_ms: i64| look_again_after(Some(ms(0)), ms(running_ms), poll);
        assert_eq!(after(0), FIRST_LOOK);
        assert_eq!(after(100), FIRST_LOOK);
        assert_eq!(after(800), Duration::from_millis(800));
        assert_eq!(after(2_000), Duration::from_secs(2));
        assert_eq!(after(60_000), poll);
        assert_eq!(look_again_after(None, ms(0), poll), FIRST_LOOK);
        // A poll shorter than the first look is kept (tests run at 100 ms).
        let quick = Duration::from_millis(100);
        assert_eq!(look_again_after(Some(ms(0)), ms(0), quick), quick);
    }

    #[test]
    fn completion_is_the_state_read_back() {
        assert!(power_reached(PowerAction::On, PowerState::On));
        assert!(!power_reached(PowerAction::On, PowerState::PoweringOn));
        assert!(power_reached(PowerAction::Soft, PowerState::Off));
        assert!(!power_reached(PowerAction::Off, PowerState::PoweringOff));
        assert!(power_reached(PowerAction::Cycle, PowerState::On));
        assert!(Op::Power(PowerAction::Reset).destructive());
        assert!(!Op::Power(PowerAction::Off).destructive());
    }
}
