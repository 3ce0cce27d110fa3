//! Power actions: Harvester's `spec.powerActionRequested` → a rufio Job shaped as Seeder's
//! `GenerateJob` → `status.powerAction` and the `bmcJob*` conditions. Pure decisions only; the
//! reconciler does the I/O.
//!
//! The handshake is Seeder's: Harvester sets `spec.powerActionRequested` and clears
//! `status.powerAction.lastJobName`; a request is taken when `bmcJobSubmitted` is not True, the
//! request is set and `lastJobName` is empty. `actionStatus` is absent while the Job runs (the
//! UI reads its absence as "in progress"), then `complete` or `failed`.
//!
//! One step more than Seeder, so that a Job is never created twice: the Job's name is chosen
//! and written with `bmcJobSubmitted` (its message `creating bmc job <name>`, with the
//! resourceVersion read) *before* the Job is created under that name, and `lastJobName` after.
//! A reconcile that finds `bmcJobSubmitted` True without `lastJobName` (the process stopped in
//! between, or the create timed out) creates the Job of the recorded name, which the API
//! server refuses (409) when it exists: the Job is found by the name ingot wrote, never by
//! comparing the API server's clock with the operator's.

use std::collections::BTreeMap;
use std::fmt;

use ingot_api::rufio::{Action, Job, JobSpec, MachineRef, OneTimeBootDeviceAction};
use ingot_api::seeder::{Inventory, InventoryStatus, JOB_INVENTORY_LABEL, power_action};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::conditions::{self, BMC_JOB_COMPLETED, BMC_JOB_ERROR, BMC_JOB_SUBMITTED};

/// `status.powerAction.actionStatus` values.
pub const ACTION_COMPLETE: &str = "complete";
pub const ACTION_FAILED: &str = "failed";

/// Annotation on an Inventory asking reboots to network-boot once (Seeder's reboot Job: off,
/// one-time PXE, on). Without it a reboot is off, then on.
pub const REBOOT_PXE_ANNOTATION: &str = "seeder.ingot.dev/reboot-pxe";

/// A power action Harvester can request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    Shutdown,
    PowerOn,
    Reboot,
}

/// A `spec.powerActionRequested` that is not a power action.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "spec.powerActionRequested {0:?} is not a power action; valid values are shutdown, poweron, reboot"
)]
pub struct UnknownAction(pub String);

impl PowerAction {
    pub fn parse(value: &str) -> Result<Self, UnknownAction> {
        match value {
            power_action::SHUTDOWN => Ok(Self::Shutdown),
            power_action::POWER_ON => Ok(Self::PowerOn),
            power_action::REBOOT => Ok(Self::Reboot),
            other => Err(UnknownAction(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Shutdown => power_action::SHUTDOWN,
            Self::PowerOn => power_action::POWER_ON,
            Self::Reboot => power_action::REBOOT,
        }
    }

    /// The Job's tasks. `off` is Rufio's hard off (Redfish ForceOff, IPMI chassis power off).
    fn tasks(self, pxe_on_reboot: bool) -> Vec<Action> {
        let power = |p: &str| Action {
            power_action: Some(p.to_owned()),
            ..Action::default()
        };
        match self {
            Self::PowerOn => vec![power("on")],
            Self::Shutdown => vec![power("off")],
            Self::Reboot if pxe_on_reboot => vec![
                power("off"),
                Action {
                    one_time_boot_device_action: Some(OneTimeBootDeviceAction {
                        device: vec!["pxe".to_owned()],
                        efi_boot: None,
                    }),
                    ..Action::default()
                },
                power("on"),
            ],
            Self::Reboot => vec![power("off"), power("on")],
        }
    }
}

impl fmt::Display for PowerAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the Inventory asks reboots to PXE-boot once.
pub fn pxe_on_reboot(inventory: &Inventory) -> bool {
    inventory
        .annotations()
        .get(REBOOT_PXE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// The `message` of `bmcJobSubmitted` that records the name of the Job being created.
const CREATING_JOB: &str = "creating bmc job ";

/// The longest generateName prefix the API server keeps (63 minus its 5 random characters).
const MAX_GENERATED_PREFIX: usize = 58;

/// A new Job name as the API server makes one from Seeder's generateName `<inventory>-<action>-`:
/// the prefix (cut to 58 characters) and 5 random characters of its alphabet.
pub fn new_job_name(inventory: &Inventory, action: PowerAction) -> String {
    // The API server's alphabet (no vowels, no 0 1 3: no words, no look-alikes).
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut prefix = format!("{}-{action}-", inventory.name_any());
    // Object names are ASCII; the boundary check only keeps a bad one from panicking.
    let mut cut = prefix.len().min(MAX_GENERATED_PREFIX);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    prefix.truncate(cut);
    let random = uuid::Uuid::new_v4();
    let suffix: String = random.as_bytes()[..5]
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    prefix + &suffix
}

/// The name of the Job a taken request creates, as recorded when it was taken.
pub fn recorded_job(status: &InventoryStatus) -> Option<&str> {
    conditions::find(&status.conditions, BMC_JOB_SUBMITTED)
        .filter(|c| c.status == "True")
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.strip_prefix(CREATING_JOB))
        .filter(|name| !name.is_empty())
}

/// Whether this Job is the one `generate_job` made for this Inventory (its label and its
/// owner reference to this very Inventory), not another object that took the name.
pub fn is_inventory_job(job: &Job, inventory: &Inventory) -> bool {
    let uid = inventory.uid().unwrap_or_default();
    job.labels().get(JOB_INVENTORY_LABEL) == Some(&inventory.name_any())
        && job.owner_references().iter().any(|o| o.uid == uid)
}

/// Seeder's `GenerateJob`: generateName `<inventory>-<action>-`, the label
/// `inventory.metal.harvesterhci.io: <inventory>`, an owner reference to the Inventory (not a
/// controller reference, as `controllerutil.SetOwnerReference` writes), and the Machine of the
/// same name. The name itself is the one recorded when the request was taken
/// ([`new_job_name`]), so that the Job can be found again after a crash or a timeout.
pub fn generate_job(inventory: &Inventory, action: PowerAction, job_name: &str) -> Job {
    let name = inventory.name_any();
    let namespace = inventory.namespace().unwrap_or_default();
    Job {
        metadata: ObjectMeta {
            name: Some(job_name.to_owned()),
            generate_name: Some(format!("{name}-{action}-")),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([(
                JOB_INVENTORY_LABEL.to_owned(),
                name.clone(),
            )])),
            owner_references: Some(vec![owner_reference(inventory)]),
            ..ObjectMeta::default()
        },
        spec: JobSpec {
            machine_ref: MachineRef {
                name: Some(name),
                namespace: Some(namespace),
                ..MachineRef::default()
            },
            tasks: action.tasks(pxe_on_reboot(inventory)),
        },
        status: None,
    }
}

/// A rufio Job on the Inventory's Machine (same name and namespace), owned by the Inventory,
/// under a name fixed by what it is for, with one label saying whose it is.
pub fn inventory_job(
    inventory: &Inventory,
    name: &str,
    label: (&str, String),
    tasks: serde_json::Value,
) -> Result<Job, serde_json::Error> {
    let namespace = inventory.namespace().unwrap_or_default();
    let spec: JobSpec = serde_json::from_value(serde_json::json!({
        "machineRef": {"name": inventory.name_any(), "namespace": namespace},
        "tasks": tasks,
    }))?;
    let mut job = Job::new(name, spec);
    job.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace),
        labels: Some(BTreeMap::from([(label.0.to_owned(), label.1)])),
        owner_references: Some(vec![owner_reference(inventory)]),
        ..ObjectMeta::default()
    };
    Ok(job)
}

/// Creates a Job named for what it does once ([`inventory_job`]): one of that name already
/// there is the same Job, created by a pass that crashed before recording it, and is not sent
/// again.
pub async fn create_once(client: &kube::Client, job: &Job) -> Result<(), kube::Error> {
    let api: kube::Api<Job> = kube::Api::namespaced(
        client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    match api.create(&kube::api::PostParams::default(), job).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The power state an Inventory's Machine reports, as the controllers that act on it read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Power {
    On,
    Off,
    /// Not read yet, not contactable, or anything else: never taken for off.
    Unknown,
}

/// How a Job a controller submitted (under a name fixed by what it is for) stands.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    /// Not submitted.
    None,
    /// Submitted, not finished, not seen yet, or gone after it was recorded: never sent again.
    Running,
    Succeeded,
    Failed(String),
}

/// An owner reference to the Inventory, as `controllerutil.SetOwnerReference` writes it.
pub fn owner_reference(inventory: &Inventory) -> OwnerReference {
    OwnerReference {
        api_version: Inventory::api_version(&()).into_owned(),
        kind: Inventory::kind(&()).into_owned(),
        name: inventory.name_any(),
        uid: inventory.uid().unwrap_or_default(),
        ..OwnerReference::default()
    }
}

/// What to do about power actions on this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerStep {
    /// Nothing requested, or the last request has its answer.
    Idle,
    /// A request waits for the Inventory to be ready (its BMC to answer).
    WaitReady,
    /// The request names no power action.
    Unknown(UnknownAction),
    /// Mark the request taken, then create its Job.
    Submit(PowerAction),
    /// The request was taken but `lastJobName` not written: create the Job of the recorded
    /// name (found when it exists), then record it.
    Recover(PowerAction, String),
    /// The request was taken without recording its Job's name (by an earlier ingot): which
    /// Job it made is unknown, so it fails rather than sending the action again.
    Unrecorded(PowerAction),
    /// The Job of the request runs; follow it.
    Track(String),
    /// The request is not taken, for this reason (its Node left maintenance).
    Refuse(PowerAction, String),
}

/// Seeder's `triggerPowerAction` / `reconcileBMCJob` gate, plus the recovery step.
pub fn next_step(requested: Option<&str>, status: &InventoryStatus, ready: bool) -> PowerStep {
    let requested = requested.unwrap_or_default();
    let job = status
        .power_action
        .last_job_name
        .as_deref()
        .unwrap_or_default();
    if conditions::is_true(&status.conditions, BMC_JOB_SUBMITTED) {
        if !job.is_empty() {
            return PowerStep::Track(job.to_owned());
        }
        return match (PowerAction::parse(requested), recorded_job(status)) {
            (Ok(action), Some(job)) => PowerStep::Recover(action, job.to_owned()),
            (Ok(action), None) => PowerStep::Unrecorded(action),
            (Err(unknown), _) => PowerStep::Unknown(unknown),
        };
    }
    if requested.is_empty() || !job.is_empty() {
        return PowerStep::Idle;
    }
    match PowerAction::parse(requested) {
        Err(unknown) => PowerStep::Unknown(unknown),
        Ok(_) if !ready => PowerStep::WaitReady,
        Ok(action) => PowerStep::Submit(action),
    }
}

/// The request is taken: Seeder's status for a submitted Job, before the Job exists, with the
/// name the Job will have.
pub fn mark_submitted(status: &mut InventoryStatus, job: &str, now: &str) {
    status.power_action.action_status = None;
    status.power_action.last_job_name = None;
    conditions::set_true(
        &mut status.conditions,
        BMC_JOB_SUBMITTED,
        Some(&format!("{CREATING_JOB}{job}")),
        now,
    );
    conditions::set_false(&mut status.conditions, BMC_JOB_ERROR, now);
    conditions::set_false(&mut status.conditions, BMC_JOB_COMPLETED, now);
}

/// A request naming no power action fails at once, so that Harvester accepts the next one.
pub fn mark_unknown(status: &mut InventoryStatus, unknown: &UnknownAction, now: &str) {
    mark_failed(status, &unknown.to_string(), now);
}

/// The request fails without a Job (or without following one): `actionStatus: failed` and
/// the reason in `bmcJobErrorr`, so that Harvester accepts the next request.
pub fn mark_failed(status: &mut InventoryStatus, message: &str, now: &str) {
    status.power_action.action_status = Some(ACTION_FAILED.to_owned());
    conditions::set_false(&mut status.conditions, BMC_JOB_SUBMITTED, now);
    conditions::set_true(&mut status.conditions, BMC_JOB_ERROR, Some(message), now);
}

/// The request fails without a Job ever created for it: as [`mark_failed`], and `lastJobName`
/// names the Job it would have had (none exists), so that the request counts as answered until
/// Harvester makes the next one (which clears `lastJobName`): it is never taken later.
pub fn mark_refused(status: &mut InventoryStatus, job: &str, message: &str, now: &str) {
    mark_failed(status, message, now);
    status.power_action.last_job_name = Some(job.to_owned());
}

/// Why a request whose Node is not in maintenance when it would be taken fails.
pub fn outside_maintenance_message(node: &str, action: PowerAction) -> String {
    format!(
        "node {node} is not in maintenance mode: the {action} request is not sent; enable \
         maintenance mode (annotation {}) and request again",
        super::node_api::MAINTAIN_STATUS_ANNOTATION
    )
}

/// Why a request taken by an earlier ingot, which recorded no Job name, fails.
pub fn unrecorded_message(inventory: &Inventory) -> String {
    format!(
        "the request was taken without recording the name of its bmc job, so it is not sent again: \
         check the Jobs labelled {JOB_INVENTORY_LABEL}={} and request again",
        inventory.name_any()
    )
}

/// Where a Job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Running,
    Completed,
    Failed(String),
    /// Deleted before it ended.
    Missing,
}

pub fn job_outcome(job: Option<&Job>) -> JobOutcome {
    use crate::rufio::job::{COMPLETED, FAILED};
    let Some(job) = job else {
        return JobOutcome::Missing;
    };
    let conditions = job
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let true_ = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    if true_(COMPLETED).is_some() {
        JobOutcome::Completed
    } else if let Some(failed) = true_(FAILED) {
        JobOutcome::Failed(failed.message.clone().unwrap_or_default())
    } else {
        JobOutcome::Running
    }
}

/// Seeder's `reconcileBMCJob`: an ended Job gives `actionStatus` and its condition, and the
/// request is no longer submitted. Returns whether the Job ended.
pub fn apply_outcome(
    status: &mut InventoryStatus,
    job: &str,
    outcome: &JobOutcome,
    now: &str,
) -> bool {
    let failure = match outcome {
        JobOutcome::Running => return false,
        JobOutcome::Completed => None,
        JobOutcome::Failed(message) => Some(message.clone()),
        JobOutcome::Missing => Some(format!("bmc job {job} was deleted before it ended")),
    };
    match failure {
        None => {
            status.power_action.action_status = Some(ACTION_COMPLETE.to_owned());
            conditions::set_true(&mut status.conditions, BMC_JOB_COMPLETED, None, now);
        }
        Some(message) => {
            status.power_action.action_status = Some(ACTION_FAILED.to_owned());
            conditions::set_true(&mut status.conditions, BMC_JOB_ERROR, Some(&message), now);
        }
    }
    conditions::set_false(&mut status.conditions, BMC_JOB_SUBMITTED, now);
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ingot_api::rufio::{ActionCondition, JobStatus};
    use ingot_api::seeder::{InventorySpec, LOCAL_INVENTORY_ANNOTATION};
    use serde_json::json;

    fn inventory(annotations: &[(&str, &str)]) -> Inventory {
        let mut i = Inventory::new("harvester-659jw", InventorySpec::default());
        i.metadata.namespace = Some("harvester-system".into());
        i.metadata.uid = Some("uid-1".into());
        i.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        i
    }

    #[test]
    fn the_job_is_shaped_as_seeders_generate_job() {
        let i = inventory(&[(LOCAL_INVENTORY_ANNOTATION, "true")]);
        let job = generate_job(&i, PowerAction::Shutdown, "harvester-659jw-shutdown-x7k2p");
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "bmc.tinkerbell.org/v1alpha1",
                "kind": "Job",
                "metadata": {
                    "name": "harvester-659jw-shutdown-x7k2p",
                    "generateName": "harvester-659jw-shutdown-",
                    "namespace": "harvester-system",
                    "labels": {"inventory.metal.harvesterhci.io": "harvester-659jw"},
                    "ownerReferences": [{
                        "apiVersion": "metal.harvesterhci.io/v1alpha1",
                        "kind": "Inventory",
                        "name": "harvester-659jw",
                        "uid": "uid-1"
                    }]
                },
                "spec": {
                    "machineRef": {"name": "harvester-659jw", "namespace": "harvester-system"},
                    "tasks": [{"powerAction": "off"}]
                }
            })
        );
        let on = generate_job(&i, PowerAction::PowerOn, "harvester-659jw-poweron-b2c4d");
        assert_eq!(on.spec.tasks[0].power_action.as_deref(), Some("on"));
        assert_eq!(
            on.metadata.generate_name.as_deref(),
            Some("harvester-659jw-poweron-")
        );
    }

    #[test]
    fn reboot_is_off_then_on_and_pxe_only_when_asked() {
        let plain = generate_job(&inventory(&[]), PowerAction::Reboot, "j");
        let tasks = serde_json::to_value(&plain.spec.tasks).unwrap();
        assert_eq!(
            tasks,
            json!([{"powerAction": "off"}, {"powerAction": "on"}])
        );
        let pxe = generate_job(
            &inventory(&[(REBOOT_PXE_ANNOTATION, "true")]),
            PowerAction::Reboot,
            "j",
        );
        let tasks = serde_json::to_value(&pxe.spec.tasks).unwrap();
        assert_eq!(
            tasks,
            json!([{"powerAction": "off"}, {"oneTimeBootDeviceAction": {"device": ["pxe"]}}, {"powerAction": "on"}])
        );
    }

    #[test]
    fn unknown_actions_name_the_field_and_the_valid_values() {
        let e = PowerAction::parse("Reboot").unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.powerActionRequested \"Reboot\" is not a power action; valid values are shutdown, poweron, reboot"
        );
    }

    fn status(v: serde_json::Value) -> InventoryStatus {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_request_is_taken_only_when_ready_and_not_answered() {
        let empty = InventoryStatus::default();
        assert_eq!(next_step(None, &empty, true), PowerStep::Idle);
        assert_eq!(next_step(Some(""), &empty, true), PowerStep::Idle);
        assert_eq!(
            next_step(Some("reboot"), &empty, true),
            PowerStep::Submit(PowerAction::Reboot)
        );
        assert_eq!(
            next_step(Some("reboot"), &empty, false),
            PowerStep::WaitReady
        );
        // Answered: lastJobName is set until Harvester clears it with its next request.
        let answered =
            status(json!({"powerAction": {"actionStatus": "complete", "lastJobName": "j"}}));
        assert_eq!(next_step(Some("reboot"), &answered, true), PowerStep::Idle);
        assert!(matches!(
            next_step(Some("halt"), &empty, true),
            PowerStep::Unknown(_)
        ));
    }

    #[test]
    fn a_submitted_request_is_tracked_or_recovered() {
        let running = status(json!({
            "conditions": [{"type": "bmcJobSubmitted", "status": "True"}],
            "powerAction": {"lastJobName": "n-reboot-abcde"}
        }));
        assert_eq!(
            next_step(Some("reboot"), &running, false),
            PowerStep::Track("n-reboot-abcde".into())
        );
        let mut marked = InventoryStatus::default();
        mark_submitted(&mut marked, "n-shutdown-b2c4d", "t1");
        assert_eq!(
            next_step(Some("shutdown"), &marked, true),
            PowerStep::Recover(PowerAction::Shutdown, "n-shutdown-b2c4d".into())
        );
        // Taken by an earlier ingot that recorded no name: not sent again.
        let unrecorded =
            status(json!({"conditions": [{"type": "bmcJobSubmitted", "status": "True"}]}));
        assert_eq!(
            next_step(Some("shutdown"), &unrecorded, true),
            PowerStep::Unrecorded(PowerAction::Shutdown)
        );
    }

    #[test]
    fn a_refused_request_stays_answered() {
        let mut s = InventoryStatus::default();
        s.power_action.last_job_name = Some(String::new());
        mark_refused(
            &mut s,
            "n-shutdown-b2c4d",
            "node n is not in maintenance mode",
            "t1",
        );
        assert_eq!(s.power_action.action_status.as_deref(), Some("failed"));
        assert!(conditions::is_true(&s.conditions, BMC_JOB_ERROR));
        // The Node in maintenance later (or the next pass): the request is not taken again.
        assert_eq!(next_step(Some("shutdown"), &s, true), PowerStep::Idle);
        // Harvester's next request clears lastJobName, and that one is taken.
        s.power_action.last_job_name = Some(String::new());
        assert_eq!(
            next_step(Some("shutdown"), &s, true),
            PowerStep::Submit(PowerAction::Shutdown)
        );
    }

    #[test]
    fn new_job_names_are_generate_names_and_differ() {
        let i = inventory(&[]);
        let a = new_job_name(&i, PowerAction::Reboot);
        let b = new_job_name(&i, PowerAction::Reboot);
        assert_ne!(a, b);
        let suffix = a.strip_prefix("harvester-659jw-reboot-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{a}"
        );
        // A long Inventory name is cut as the API server cuts a generateName.
        let long = Inventory::new(&"n".repeat(70), InventorySpec::default());
        let name = new_job_name(&long, PowerAction::Shutdown);
        assert_eq!(name.len(), 63);
        assert!(name.starts_with(&"n".repeat(58)));
    }

    #[test]
    fn the_job_is_recognised_by_its_label_and_owner() {
        let i = inventory(&[]);
        let job = generate_job(&i, PowerAction::Reboot, "harvester-659jw-reboot-b2c4d");
        assert!(is_inventory_job(&job, &i));
        let mut other_owner = job.clone();
        other_owner.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-2".into();
        assert!(!is_inventory_job(&other_owner, &i));
        let mut unlabelled = job.clone();
        unlabelled.metadata.labels = None;
        assert!(!is_inventory_job(&unlabelled, &i));
    }

    #[test]
    fn the_answer_follows_the_job() {
        let mut s = InventoryStatus::default();
        mark_submitted(&mut s, "j", "t1");
        assert!(conditions::is_true(&s.conditions, BMC_JOB_SUBMITTED));
        s.power_action.last_job_name = Some("j".into());
        assert!(!apply_outcome(&mut s, "j", &JobOutcome::Running, "t2"));
        let v = serde_json::to_value(&s).unwrap();
        assert!(v["powerAction"].get("actionStatus").is_none(), "{v}");

        let mut done = s.clone();
        assert!(apply_outcome(&mut done, "j", &JobOutcome::Completed, "t3"));
        assert_eq!(done.power_action.action_status.as_deref(), Some("complete"));
        assert!(conditions::is_true(&done.conditions, BMC_JOB_COMPLETED));
        assert!(!conditions::is_true(&done.conditions, BMC_JOB_SUBMITTED));

        let mut failed = s.clone();
        apply_outcome(
            &mut failed,
            "j",
            &JobOutcome::Failed("task x failed: y".into()),
            "t3",
        );
        assert_eq!(failed.power_action.action_status.as_deref(), Some("failed"));
        let error = conditions::find(&failed.conditions, BMC_JOB_ERROR).unwrap();
        assert_eq!(error.status, "True");
        assert_eq!(error.message.as_deref(), Some("task x failed: y"));

        let mut gone = s;
        apply_outcome(&mut gone, "j", &JobOutcome::Missing, "t3");
        assert_eq!(gone.power_action.action_status.as_deref(), Some("failed"));

        // The next request clears the answer and the old error.
        mark_submitted(&mut failed, "j2", "t4");
        assert_eq!(failed.power_action.action_status, None);
        assert!(!conditions::is_true(&failed.conditions, BMC_JOB_ERROR));
    }

    #[test]
    fn job_outcomes_read_rufio_conditions() {
        let job = |conds: Vec<(&str, &str, Option<&str>)>| {
            let mut j = generate_job(&inventory(&[]), PowerAction::PowerOn, "j");
            j.status = Some(JobStatus {
                conditions: conds
                    .into_iter()
                    .map(|(t, s, m)| ActionCondition {
                        type_: t.into(),
                        status: s.into(),
                        message: m.map(Into::into),
                    })
                    .collect(),
                ..JobStatus::default()
            });
            j
        };
        assert_eq!(job_outcome(None), JobOutcome::Missing);
        assert_eq!(
            job_outcome(Some(&job(vec![("Running", "True", None)]))),
            JobOutcome::Running
        );
        assert_eq!(
            job_outcome(Some(&job(vec![
                ("Running", "True", None),
                ("Completed", "True", None)
            ]))),
            JobOutcome::Completed
        );
        assert_eq!(
            job_outcome(Some(&job(vec![("Failed", "True", Some("boom"))]))),
            JobOutcome::Failed("boom".into())
        );
    }

    #[test]
    fn unknown_requests_fail_once_and_stay_quiet() {
        let mut s = InventoryStatus::default();
        let unknown = UnknownAction("halt".into());
        mark_unknown(&mut s, &unknown, "t1");
        let before = s.clone();
        mark_unknown(&mut s, &unknown, "t2");
        assert_eq!(s, before);
        assert_eq!(s.power_action.action_status.as_deref(), Some("failed"));
    }
}
