//! The Job controller: runs `spec.tasks` strictly in order, each as a Task `<job>-task-<n>`
//! controlled by the Job and carrying a snapshot of the Machine's connection. A failed Task
//! fails the Job; when every Task completed the Job is `Completed`. Conditions and times are
//! Rufio's: `Running` (with `startTime`) stays True, `Completed` (with `completionTime`) or
//! `Failed` (with the Task's message) ends it.
//!
//! Tasks are found by their deterministic names, so Tasks the Go Rufio created are continued.
//!
//! A Job records how many of its Tasks completed ([`TASKS_COMPLETED_ANNOTATION`]) when it
//! creates the next one: a completed Task deleted afterwards (by hand, by a cleanup) counts as
//! done and its action is not sent again. Before it creates a destructive Task (a power cycle
//! or reset) it records that too ([`DESTRUCTIVE_TASK_ANNOTATION`]): such a Task gone before it
//! ended fails the Job instead of being created (and sent) again. Without those records (a Job
//! of the Go Rufio), a missing Task is created, as Rufio does.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ingot_api::rufio::{ActionCondition, Job, JobStatus, Machine, Task, TaskSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::coordination::Ahead;
use super::task::{FAILED_AHEAD_ANNOTATION, SENT_ANNOTATION};
use super::tenancy;
use super::{Error, RufioContext};
use crate::runtime::{self, Backoff, ControllerRuntime};
use kube::runtime::events::EventType;

const CONTROLLER: &str = "rufio-job";
pub const RUNNING: &str = "Running";
pub const COMPLETED: &str = "Completed";
pub const FAILED: &str = "Failed";
const API_VERSION: &str = "bmc.tinkerbell.org/v1alpha1";
/// Annotation on a Job: how many of its Tasks, in order, completed (`<job uid>:<count>`, so
/// that a Job created from a copy of another does not inherit it). Written with the creation
/// of the next Task, so it only ever states what the Job saw.
pub const TASKS_COMPLETED_ANNOTATION: &str = "rufio.ingot.dev/tasks-completed";
/// Annotation on a Job: the index of the destructive Task it is creating or created
/// (`<job uid>:<index>`), written before the Task is created.
pub const DESTRUCTIVE_TASK_ANNOTATION: &str = "rufio.ingot.dev/destructive-task";
/// How long a Job waits for its caches to show a write of this process (a Task it created,
/// its own `Running`) before it acts without it (they normally show it within a second).
const OWN_WRITE_WAIT: Duration = Duration::from_secs(30);
/// A failed reconcile (its Machine not found, an API error) is retried after 5 s, doubling to
/// 1 min while it goes on failing.
const RETRY_BASE: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(60);

pub async fn run(
    ctx: Arc<RufioContext>,
    task_changes: impl futures::Stream<Item = Arc<Task>> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (jobs, events) = crate::lean_reflector(ctx.watched::<Job>(), watcher::Config::default());
    let on_sight = ctx.clone();
    let seen = events.applied_objects().inspect(move |job| {
        if let Ok(job) = job {
            send_on_sight(&on_sight, job);
        }
    });
    let controller = Controller::for_stream(seen, jobs)
        .owns_shared_stream(task_changes)
        .with_config(Config::default().concurrency(ctx.settings.task_concurrency));
    let backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// A new Job's first action, when repeatable, goes to its BMC as soon as the watch delivers
/// the Job rather than when the Job's reconcile runs: reconciles wait for a free slot, and
/// slots are held by API writes that take seconds on a busy control plane. The reconcile
/// takes the outcome when it creates the Task. Only Jobs with no status yet and no Task 0,
/// whose Machine is in the cache, are sent ahead; any other goes through its reconcile.
fn send_on_sight(ctx: &Arc<RufioContext>, job: &Job) {
    if job.status.is_some() || job.metadata.deletion_timestamp.is_some() {
        return;
    }
    let Some(action) = job.spec.tasks.first() else {
        return;
    };
    if super::task::sendable_ahead(action).is_none() {
        return;
    }
    let namespace = job.namespace().unwrap_or_default();
    let (machine_ns, machine_name) = machine_of(job, &namespace);
    if !ctx.settings.cross_namespace.allows(&namespace, &machine_ns) {
        return;
    }
    let Some(machine) = ctx.cached_machine(&machine_ns, &machine_name) else {
        return;
    };
    if !matches!(
        ctx.cached_task(&namespace, &task_name(&job.name_any(), 0)),
        Ok(None)
    ) {
        return;
    }
    let Ok(task) = task_for(job, 0, &machine) else {
        return;
    };
    let Some(outcome) = ctx.coordination.begin_send_ahead(super::key_of(&task)) else {
        return;
    };
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let sent = super::task::send_ahead(&task, &ctx).await;
        let _ = outcome.send(Some(sent));
    });
}

/// The namespace and name of the Job's Machine (its own namespace when the ref has none).
pub(super) fn machine_of(job: &Job, namespace: &str) -> (String, String) {
    let machine_ns = job
        .spec
        .machine_ref
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| namespace.to_owned());
    (
        machine_ns,
        job.spec.machine_ref.name.clone().unwrap_or_default(),
    )
}

/// Whether a condition of this type is True.
pub fn has_true(conditions: &[ActionCondition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Rufio's `SetCondition`: replaces the condition of that type, or appends it.
pub fn set(conditions: &mut Vec<ActionCondition>, type_: &str, message: Option<String>) {
    let c = ActionCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        message,
    };
    match conditions.iter_mut().find(|x| x.type_ == type_) {
        Some(x) => *x = c,
        None => conditions.push(c),
    }
}

/// Whether a Job has ended (Completed or Failed).
pub fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .is_some_and(|s| has_true(&s.conditions, COMPLETED) || has_true(&s.conditions, FAILED))
}

/// Rufio's Task name for the n-th action of a Job.
pub fn task_name(job: &str, index: usize) -> String {
    format!("{job}-task-{index}")
}

/// What a Task says about the Job's progress.
#[derive(Debug, PartialEq)]
pub enum TaskState {
    Missing,
    Running,
    Completed,
    Failed(String),
    /// A Task of that name that this Job does not control.
    Foreign,
    /// A Task left by an earlier Job of this name (deleted, then created again: its owner has
    /// the name but another uid), which the garbage collector removes.
    Orphaned,
}

pub fn task_state(task: Option<&Task>, job: &Job) -> TaskState {
    let Some(task) = task else {
        return TaskState::Missing;
    };
    // Its controller, when that is a Job of this name: this one, or an earlier one (another
    // uid: deleted, then created again).
    let namesake = task.metadata.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true)
            && o.kind == "Job"
            && o.api_version == API_VERSION
            && Some(&o.name) == job.metadata.name.as_ref()
    });
    match (namesake, job.metadata.uid.as_ref()) {
        (None, _) => return TaskState::Foreign,
        (Some(owner), Some(uid)) if owner.uid != *uid => return TaskState::Orphaned,
        _ => {}
    }
    let conditions = task
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if has_true(conditions, COMPLETED) {
        return TaskState::Completed;
    }
    if has_true(conditions, FAILED) {
        let message = conditions
            .iter()
            .find(|c| c.type_ == FAILED)
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        return TaskState::Failed(message);
    }
    TaskState::Running
}

/// The next thing to do for a Job: what its pure step ([`decide`]) returns.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Create the Task of this index.
    Create(usize),
    /// A Task is running: wait for it.
    Wait,
    /// A Task this process created a moment ago that the cache does not show yet: its watch
    /// event wakes the Job (creating it again would only be refused after sending its action
    /// again); look again after this long at the latest.
    AwaitOwnWrite(Duration),
    Complete,
    Fail(String),
}

/// How many of the Job's Tasks it recorded as completed (at most its number of Tasks; a
/// record of another Job, or unreadable, counts as none).
pub fn recorded_completed(job: &Job) -> usize {
    own_record(job, TASKS_COMPLETED_ANNOTATION)
        .unwrap_or(0)
        .min(job.spec.tasks.len())
}

/// Whether the Job recorded creating its destructive Task of this index.
pub fn recorded_destructive(job: &Job, index: usize) -> bool {
    own_record(job, DESTRUCTIVE_TASK_ANNOTATION) == Some(index)
}

/// A `<job uid>:<number>` annotation of this very Job.
fn own_record(job: &Job, annotation: &str) -> Option<usize> {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    job.annotations()
        .get(annotation)
        .and_then(|v| v.rsplit_once(':'))
        .filter(|(of, _)| !uid.is_empty() && *of == uid)
        .and_then(|(_, n)| n.parse::<usize>().ok())
}

/// Decides from the Tasks' states (index order, stopping at the first that is not complete).
pub fn next_step(namespace: &str, job: &str, states: &[TaskState], total: usize) -> Outcome {
    for (i, state) in states.iter().enumerate() {
        let name = task_name(job, i);
        match state {
            TaskState::Completed => continue,
            TaskState::Missing => return Outcome::Create(i),
            TaskState::Running => return Outcome::Wait,
            TaskState::Failed(message) if message.is_empty() => {
                return Outcome::Fail(format!("task {namespace}/{name} failed"));
            }
            TaskState::Failed(message) => {
                return Outcome::Fail(format!("task {namespace}/{name} failed: {message}"));
            }
            TaskState::Foreign => {
                return Outcome::Fail(format!(
                    "task {namespace}/{name} exists but is not controlled by this Job: delete it or rename the Job"
                ));
            }
            // A Job deleted to be sent again, before the garbage collector took its Tasks:
            // its deletion wakes this Job, which then creates its own.
            TaskState::Orphaned => return Outcome::Wait,
        }
    }
    if states.len() >= total {
        Outcome::Complete
    } else {
        Outcome::Create(states.len())
    }
}

/// One reconciliation of a Job (what the controller runs for each change).
pub async fn reconcile(job: Arc<Job>, ctx: Arc<RufioContext>) -> Result<Action, Error> {
    reconcile_inner(&job, &ctx).await
}

/// The pure step of a Job: [`next_step`] from its Tasks' states, except that a Task this
/// process created `created_ago(index)` ago and the cache does not show yet is waited for,
/// and that a destructive Task this Job recorded creating (or was creating when it stopped)
/// that is gone before it ended fails the Job: whether it reached the BMC is unknown, so it
/// is not sent again.
pub fn decide(
    job: &Job,
    states: &[TaskState],
    created_ago: impl Fn(usize) -> Option<Duration>,
) -> Outcome {
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    match next_step(&namespace, &name, states, job.spec.tasks.len()) {
        Outcome::Create(i) => match created_ago(i) {
            Some(ago) if ago < OWN_WRITE_WAIT => Outcome::AwaitOwnWrite(OWN_WRITE_WAIT - ago),
            _ if destructive(job, i) && recorded_destructive(job, i) => Outcome::Fail(format!(
                "task {namespace}/{} was created and is gone before it ended: its power cycle or \
                 reset may have reached the BMC and is not sent again; create a new Job to run it",
                task_name(&name, i)
            )),
            _ => Outcome::Create(i),
        },
        other => other,
    }
}

/// Whether the Job's action of this index is a power cycle or reset.
fn destructive(job: &Job, index: usize) -> bool {
    job.spec
        .tasks
        .get(index)
        .and_then(|a| super::task::parse(a).ok())
        .is_some_and(|op| op.destructive())
}

/// One reconcile of a Job, phase by phase: `Running`, its Machine, its Tasks' states, the
/// pure step ([`decide`]), then what it decided, and one status write at the end.
async fn reconcile_inner(job: &Job, ctx: &RufioContext) -> Result<Action, Error> {
    if job.metadata.deletion_timestamp.is_some() || finished(job) {
        return Ok(Action::await_change());
    }
    let mut pass = Pass::new(job, ctx);
    if let Err(wait) = pass.mark_running() {
        return Ok(Action::requeue(wait));
    }
    let Some(machine) = pass.machine().await? else {
        return Ok(Action::await_change());
    };
    let completed = recorded_completed(job);
    let states = pass.task_states(completed).await?;
    let outcome = decide(job, &states, |i| {
        let task = format!("Task {}/{}", pass.namespace, task_name(&pass.name, i));
        ctx.coordination.wrote_ago(&task, &pass.uid)
    });
    match outcome {
        Outcome::Wait => {}
        Outcome::AwaitOwnWrite(wait) => return Ok(Action::requeue(wait)),
        Outcome::Create(i) => pass.create_task(i, &machine, completed).await?,
        Outcome::Complete => {
            set(&mut pass.status.conditions, COMPLETED, None);
            pass.status.completion_time = Some(Time(Timestamp::now()));
        }
        Outcome::Fail(message) => set(&mut pass.status.conditions, FAILED, Some(message)),
    }
    pass.end(&machine).await
}

/// One reconcile of a Job: the Job, its names, and its status as read and as wanted.
struct Pass<'a> {
    job: &'a Job,
    ctx: &'a RufioContext,
    namespace: String,
    name: String,
    uid: String,
    jobs: Api<Job>,
    before: JobStatus,
    status: JobStatus,
}

impl<'a> Pass<'a> {
    fn new(job: &'a Job, ctx: &'a RufioContext) -> Self {
        let namespace = job.namespace().unwrap_or_default();
        let status = job.status.clone().unwrap_or_default();
        Pass {
            jobs: Api::namespaced(ctx.client.clone(), &namespace),
            name: job.name_any(),
            uid: job.metadata.uid.clone().unwrap_or_default(),
            namespace,
            before: status.clone(),
            status,
            job,
            ctx,
        }
    }

    /// What the Job's `Running` write is called among this process's own writes.
    fn running_write(&self) -> String {
        format!("Job {}/{}", self.namespace, self.name)
    }

    /// Phase 1: `Running` (with `startTime`) in the wanted status. `Err(wait)` when this copy
    /// is older than the `Running` this process wrote (a Task's change woke the Job before the
    /// Job's own watch caught up): that write's watch event brings the newer copy, and writing
    /// `Running` again would move `startTime`.
    fn mark_running(&mut self) -> Result<(), Duration> {
        let running_write = self.running_write();
        if has_true(&self.status.conditions, RUNNING) {
            self.ctx.coordination.seen(&running_write);
            return Ok(());
        }
        if let Some(ago) = self.ctx.coordination.wrote_ago(&running_write, &self.uid)
            && ago < OWN_WRITE_WAIT
        {
            return Err(OWN_WRITE_WAIT - ago);
        }
        self.status.start_time = Some(Time(Timestamp::now()));
        set(&mut self.status.conditions, RUNNING, None);
        Ok(())
    }

    /// Phase 2: the Job's Machine, from the Machine controller's cache (as controller-runtime's
    /// client reads) or, for one created a moment ago, the API server. A Machine of another
    /// namespace only when the operator allowed it: otherwise the Job fails (`None`), and the
    /// Machine is neither read nor its BMC driven.
    async fn machine(&mut self) -> Result<Option<Arc<Machine>>, Error> {
        let (machine_ns, machine_name) = machine_of(self.job, &self.namespace);
        let settings = &self.ctx.settings;
        if let Err(refusal) =
            tenancy::check_machine_ref(&self.namespace, &machine_ns, &settings.cross_namespace)
        {
            set(
                &mut self.status.conditions,
                FAILED,
                Some(refusal.to_string()),
            );
            write(&self.jobs, &self.name, &self.status, &self.before).await?;
            let note = refusal.to_string();
            self.ctx
                .job_events
                .publish(
                    self.job,
                    EventType::Warning,
                    refusal.reason(),
                    "GetMachine",
                    note,
                )
                .await;
            return Ok(None);
        }
        if let Some(cached) = self.ctx.cached_machine(&machine_ns, &machine_name) {
            return Ok(Some(cached));
        }
        let machines: Api<Machine> = Api::namespaced(self.ctx.client.clone(), &machine_ns);
        if let Some(fetched) = machines.get_opt(&machine_name).await? {
            return Ok(Some(Arc::new(fetched)));
        }
        write(&self.jobs, &self.name, &self.status, &self.before).await?;
        Err(Error::Other(format!(
            "get Job {}/{} MachineRef: machine {machine_ns}/{machine_name} not found",
            self.namespace, self.name
        )))
    }

    /// Phase 3: the states of the Job's Tasks in order, up to the first not completed. Tasks
    /// the Job recorded as completed stay done, whether or not they still exist. The Task
    /// cache is the one whose changes wake this Job: what woke it is there. A Task missing
    /// from it is created, and an existing one answers 409.
    async fn task_states(&self, completed: usize) -> Result<Vec<TaskState>, Error> {
        let tasks: Api<Task> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let mut states: Vec<TaskState> = (0..completed).map(|_| TaskState::Completed).collect();
        for i in completed..self.job.spec.tasks.len() {
            let name = task_name(&self.name, i);
            let task = match self.ctx.cached_task(&self.namespace, &name) {
                Ok(task) => task,
                Err(super::CacheNotReady) => tasks.get_opt(&name).await?.map(Arc::new),
            };
            if task.is_some() {
                let created = format!("Task {}/{name}", self.namespace);
                self.ctx.coordination.seen(&created);
            }
            let state = task_state(task.as_deref(), self.job);
            let done = state == TaskState::Completed;
            states.push(state);
            if !done {
                break;
            }
        }
        Ok(states)
    }

    /// [`Outcome::Create`]: the Task, the Job's `Running` status and its completed record
    /// written at once (none needs the others); a destructive Task recorded first. A
    /// repeatable action is sent to the BMC before its Task is created, so it does not wait
    /// for the API server to store the Task (`task::send_ahead`); a new Job's first one was
    /// sent when the Job was seen (`send_on_sight`).
    async fn create_task(
        &mut self,
        i: usize,
        machine: &Machine,
        completed: usize,
    ) -> Result<(), Error> {
        let (jobs, name, uid) = (&self.jobs, &self.name, &self.uid);
        if destructive(self.job, i) {
            record(jobs, name, DESTRUCTIVE_TASK_ANNOTATION, uid, i).await?;
        }
        let running = self.status.clone();
        let (created, written, recorded) = tokio::join!(
            send_and_create(self.job, i, machine, self.ctx),
            write(jobs, name, &running, &self.before),
            async {
                if i > completed {
                    record(jobs, name, TASKS_COMPLETED_ANNOTATION, uid, i).await?;
                }
                Ok::<(), Error>(())
            }
        );
        written?;
        recorded?;
        if !has_true(&self.before.conditions, RUNNING) {
            self.ctx.coordination.wrote(self.running_write(), uid);
        }
        self.before = running;
        match created {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                let message = format!(
                    "failed to create Task {}/{}: {e}",
                    self.namespace,
                    task_name(name, i)
                );
                set(&mut self.status.conditions, FAILED, Some(message));
            }
        }
        Ok(())
    }

    /// The end of the pass: the wanted status written; a Job that ended has its Machine's
    /// power state read again once it is.
    async fn end(self, machine: &Machine) -> Result<Action, Error> {
        let conditions = &self.status.conditions;
        if has_true(conditions, COMPLETED) || has_true(conditions, FAILED) {
            self.ctx
                .coordination
                .request_refresh(super::key_of(machine));
        }
        write(&self.jobs, &self.name, &self.status, &self.before).await?;
        Ok(Action::await_change())
    }
}

/// The Task of the Job's action `i`, its action sent first when it is repeatable (or the
/// outcome of its send on sight taken): created marked `sent` when the BMC accepted it.
async fn send_and_create(
    job: &Job,
    i: usize,
    machine: &Machine,
    ctx: &RufioContext,
) -> Result<Task, kube::Error> {
    let mut task = task_for(job, i, machine)?;
    let ahead = match ctx
        .coordination
        .take_send_ahead(&super::key_of(&task))
        .await
    {
        Some(ahead) => ahead,
        None => super::task::send_ahead(&task, ctx).await,
    };
    match ahead {
        Ahead::Sent => {
            ctx.crash_point("rufio-after-send-ahead");
            task.annotations_mut()
                .insert(SENT_ANNOTATION.to_owned(), "sent".to_owned());
        }
        // Sent, and the Task fails with the reason rather than sending it again.
        Ahead::Failed(message) => {
            let annotations = task.annotations_mut();
            annotations.insert(SENT_ANNOTATION.to_owned(), "sent".to_owned());
            annotations.insert(FAILED_AHEAD_ANNOTATION.to_owned(), message);
        }
        Ahead::NotSent => {}
    }
    let tasks: Api<Task> =
        Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let created = tasks.create(&PostParams::default(), &task).await;
    let exists = match &created {
        Ok(_) => true,
        Err(kube::Error::Api(s)) => s.code == 409,
        Err(_) => false,
    };
    if exists {
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        ctx.coordination
            .wrote(format!("Task {}", super::key_of(&task)), uid);
    }
    created
}

/// Writes one of the Job's own records (`<job uid>:<value>`).
async fn record(
    jobs: &Api<Job>,
    name: &str,
    annotation: &str,
    uid: &str,
    value: usize,
) -> Result<(), Error> {
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {annotation: format!("{uid}:{value}")}}
        })),
    )
    .await?;
    Ok(())
}

/// Writes the Job's status if it differs from what it was.
async fn write(
    jobs: &Api<Job>,
    name: &str,
    status: &JobStatus,
    before: &JobStatus,
) -> Result<(), Error> {
    runtime::status::patch_if_changed(jobs, name, Some(before), status).await?;
    Ok(())
}

/// The Machine's connection for its Task, its Secret's namespace written out: a Task made for a
/// Machine of another namespace (allowed) reads the Machine's Secret, not one of the same name
/// in the Task's own namespace.
fn connection_of(machine: &Machine) -> ingot_api::rufio::Connection {
    let mut connection = machine.spec.connection.clone();
    if let Some(secret) = connection.auth_secret_ref.as_mut()
        && secret.namespace.as_deref().is_none_or(str::is_empty)
    {
        secret.namespace = machine.namespace();
    }
    connection
}

/// The Task `<job>-task-<index>`, controlled by the Job, with the Machine's connection (and
/// its acceptance of a `http://` BMC and its pinned certificate).
fn task_for(job: &Job, index: usize, machine: &Machine) -> Result<Task, kube::Error> {
    let Some(action) = job.spec.tasks.get(index) else {
        return Err(kube::Error::Service(
            format!("the Job has no task {index}").into(),
        ));
    };
    Ok(Task {
        metadata: ObjectMeta {
            name: Some(task_name(&job.name_any(), index)),
            namespace: job.namespace(),
            owner_references: Some(vec![OwnerReference {
                api_version: API_VERSION.to_owned(),
                kind: Job::kind(&()).into_owned(),
                name: job.name_any(),
                uid: job.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            annotations: Some(tenancy::carried(machine.annotations()))
                .filter(|carried| !carried.is_empty()),
            ..ObjectMeta::default()
        },
        spec: TaskSpec {
            task: action.clone(),
            connection: connection_of(machine),
        },
        status: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_rufios() {
        assert_eq!(task_name("job-sample", 0), "job-sample-task-0");
        assert_eq!(task_name("j", 12), "j-task-12");
    }

    #[test]
    fn tasks_run_in_order() {
        use TaskState::*;
        assert_eq!(next_step("ns", "j", &[Missing], 3), Outcome::Create(0));
        assert_eq!(next_step("ns", "j", &[Running], 3), Outcome::Wait);
        assert_eq!(
            next_step("ns", "j", &[Completed, Completed], 3),
            Outcome::Create(2)
        );
        assert_eq!(
            next_step("ns", "j", &[Completed, Missing], 3),
            Outcome::Create(1)
        );
        assert_eq!(
            next_step("ns", "j", &[Completed, Completed, Completed], 3),
            Outcome::Complete
        );
    }

    #[test]
    fn a_failed_task_fails_the_job_with_its_message() {
        use TaskState::*;
        assert_eq!(
            next_step("ns", "j", &[Completed, Failed("no answer".into())], 3),
            Outcome::Fail("task ns/j-task-1 failed: no answer".into())
        );
        assert_eq!(
            next_step("ns", "j", &[Failed(String::new())], 1),
            Outcome::Fail("task ns/j-task-0 failed".into())
        );
        let Outcome::Fail(m) = next_step("ns", "j", &[Foreign], 1) else {
            panic!()
        };
        assert!(m.contains("not controlled"), "{m}");
        // The Task of a deleted namesake is waited for until it is collected, not failed on.
        assert_eq!(
            next_step("ns", "j", &[Completed, Orphaned], 2),
            Outcome::Wait
        );
    }

    fn job(uid: &str) -> Job {
        serde_json::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": uid},
            "spec": {"machineRef": {"name": "m", "namespace": "ns"}, "tasks": [{"powerAction": "on"}]}
        }))
        .unwrap()
    }

    fn task(owner_uid: &str, conditions: serde_json::Value) -> Task {
        // The shape the Go Rufio writes: controller owner without blockOwnerDeletion.
        serde_json::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
            "metadata": {"name": "j-task-0", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job", "name": "j", "uid": owner_uid, "controller": true}
            ]},
            "spec": {"task": {"powerAction": "on"}, "connection": {"host": "h", "insecureTLS": true}},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn task_states_as_go_rufio_writes_them() {
        let j = job("u1");
        assert_eq!(task_state(None, &j), TaskState::Missing);
        assert_eq!(
            task_state(Some(&task("u1", json!([]))), &j),
            TaskState::Running
        );
        assert_eq!(
            task_state(
                Some(&task(
                    "u1",
                    json!([{"type": "Completed", "status": "True"}])
                )),
                &j
            ),
            TaskState::Completed
        );
        assert_eq!(
            task_state(
                Some(&task(
                    "u1",
                    json!([{"type": "Failed", "status": "True", "message": "boom"}])
                )),
                &j
            ),
            TaskState::Failed("boom".into())
        );
        // Another uid under this Job's name: an earlier Job of the name, deleted.
        assert_eq!(
            task_state(Some(&task("u2", json!([]))), &j),
            TaskState::Orphaned
        );
        let mut other = task("u1", json!([]));
        other.metadata.owner_references.as_mut().unwrap()[0].name = "other".into();
        assert_eq!(task_state(Some(&other), &j), TaskState::Foreign);
    }

    #[test]
    fn a_task_names_its_machines_secret_with_the_machines_namespace() {
        let machine: Machine = serde_json::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "machines",
                "annotations": {"rufio.ingot.dev/allow-insecure-http": "true", "other": "x"}},
            "spec": {"connection": {"host": "h", "insecureTLS": false,
                "authSecretRef": {"name": "bmc"}}}
        }))
        .unwrap();
        let mut j = job("u1");
        j.spec.machine_ref.namespace = Some("machines".into());
        let t = task_for(&j, 0, &machine).unwrap();
        let secret = t.spec.connection.auth_secret_ref.unwrap();
        assert_eq!(secret.namespace.as_deref(), Some("machines"));
        assert_eq!(secret.name.as_deref(), Some("bmc"));
        let annotations = t.metadata.annotations.unwrap();
        assert_eq!(annotations.len(), 1, "{annotations:?}");
        assert_eq!(annotations[tenancy::ALLOW_HTTP_ANNOTATION], "true");
    }

    #[test]
    fn the_completed_record_is_the_jobs_own() {
        let mut j = job("u1");
        j.spec.tasks.push(j.spec.tasks[0].clone());
        assert_eq!(recorded_completed(&j), 0);
        j.annotations_mut()
            .insert(TASKS_COMPLETED_ANNOTATION.into(), "u1:1".into());
        assert_eq!(recorded_completed(&j), 1);
        // Never more than the Job has.
        j.annotations_mut()
            .insert(TASKS_COMPLETED_ANNOTATION.into(), "u1:9".into());
        assert_eq!(recorded_completed(&j), 2);
        // Copied from another Job, or garbage: none.
        j.annotations_mut()
            .insert(TASKS_COMPLETED_ANNOTATION.into(), "u0:1".into());
        assert_eq!(recorded_completed(&j), 0);
        j.annotations_mut()
            .insert(TASKS_COMPLETED_ANNOTATION.into(), "u1:x".into());
        assert_eq!(recorded_completed(&j), 0);
    }

    #[test]
    fn the_pure_step_waits_for_its_own_task_and_never_resends_a_reboot() {
        let mut j = job("u1");
        assert_eq!(
            decide(&j, &[TaskState::Missing], |_| None),
            Outcome::Create(0)
        );
        // Created a moment ago, not in the cache yet: waited for.
        assert_eq!(
            decide(&j, &[TaskState::Missing], |_| Some(Duration::from_secs(10))),
            Outcome::AwaitOwnWrite(OWN_WRITE_WAIT - Duration::from_secs(10))
        );
        assert_eq!(
            decide(&j, &[TaskState::Missing], |_| Some(OWN_WRITE_WAIT)),
            Outcome::Create(0)
        );
        // A reboot it recorded creating, gone before it ended: the Job fails.
        j.spec.tasks = serde_json::from_value(json!([{"powerAction": "cycle"}])).unwrap();
        assert_eq!(
            decide(&j, &[TaskState::Missing], |_| None),
            Outcome::Create(0)
        );
        j.annotations_mut()
            .insert(DESTRUCTIVE_TASK_ANNOTATION.into(), "u1:0".into());
        let Outcome::Fail(m) = decide(&j, &[TaskState::Missing], |_| None) else {
            panic!()
        };
        assert!(m.contains("ns/j-task-0 was created and is gone"), "{m}");
        // A running one is waited for as usual.
        assert_eq!(decide(&j, &[TaskState::Running], |_| None), Outcome::Wait);
    }

    #[test]
    fn set_condition_replaces() {
        let mut c = Vec::new();
        set(&mut c, RUNNING, None);
        set(&mut c, FAILED, Some("a".into()));
        set(&mut c, FAILED, Some("b".into()));
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].message.as_deref(), Some("b"));
        assert!(has_true(&c, RUNNING));
        assert!(!has_true(&c, COMPLETED));
    }
}
