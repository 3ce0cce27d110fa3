//! One server's way through a provisioned Cluster, as the Inventory controller sees it: a typed
//! phase read from the Inventory's status, one function per phase, each returning an
//! [`Outcome`]. Pure: the executor (`super::execute`) observes and acts.
//!
//! The two BMC actions that must not be repeated, the install boot and the release shutdown,
//! are rufio Jobs with names fixed by the allocation (`super::job_name`): a pass that
//! finds the Job already there (after a crash between creating it and recording it) adopts it
//! instead of booting the server a second time.

use std::time::Duration;

pub use crate::provisioning::tinkerbell::WorkflowState;

pub use crate::seeder::power::{JobState, Power};

/// Whether the Inventory's owner Cluster still wants it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// No `ownerCluster`.
    None,
    /// Listed by a Cluster that is not booting yet.
    Waiting,
    /// Listed by a Cluster that boots its nodes (`tinkConfigReady` or `clusterRunning`).
    Booting,
    /// `ownerCluster` names a Cluster that is gone, being deleted, or no longer lists it.
    Unwanted,
}

/// What the executor observed of one Inventory.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// `status.status` is `inventoryNodeReady`.
    pub ready: bool,
    pub owner: Owner,
    pub power: Power,
    /// The install boot Job of this allocation.
    pub boot: JobState,
    /// The installer reported SUCCEEDED (its webhook).
    pub installed: bool,
    /// The install Secret (script and config) exists.
    pub install_ready: bool,
    /// The release shutdown Job of this allocation.
    pub shutdown: JobState,
    /// Installs now between their boot and their webhook, across the operator.
    pub installs_in_flight: usize,
    /// `--provisioning-max-concurrent-installs`.
    pub install_budget: usize,
    /// How long the boot Job has been recorded (for the install timeout).
    pub booting_for: Option<Duration>,
    pub install_timeout: Duration,
    /// Tinkerbell mode: the node's Workflow as watched, while it installs (`None`: not
    /// looked at, or not in that mode).
    pub workflow: Option<WorkflowState>,
    /// How the installer is booted (the Inventory's [`BOOT_MEDIA_ANNOTATION`]).
    pub media: Result<BootMedia, String>,
    /// The boot CD's eject was sent (`bootMediaEjected`).
    pub ejected: bool,
    /// Claimed by a pool (`crate::onprem`), whose install booted from the CD and reported,
    /// and whose CD was not ejected yet.
    pub claim_cd_to_eject: bool,
}

/// The Inventory annotation choosing how its installer is booted: `pxe` (the default) or `cd`
/// (the boot server's CD, inserted as virtual media through its BMC).
pub const BOOT_MEDIA_ANNOTATION: &str = "provisioning.ingot.dev/boot-media";

/// How a server boots into the installer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootMedia {
    /// A one-time network boot; the site's DHCP points iPXE at ingot.
    Pxe,
    /// ingot's boot CD for this node, inserted as virtual media, and a one-time CD boot; no
    /// DHCP is needed. Ejected once installed.
    Cd,
}

impl BootMedia {
    /// The annotation's value; an unknown one is an error naming it and the choices.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value {
            None | Some("" | "pxe") => Ok(BootMedia::Pxe),
            Some("cd") => Ok(BootMedia::Cd),
            Some(other) => Err(format!(
                "{BOOT_MEDIA_ANNOTATION} is {other:?}: use pxe (network boot, the default) or cd (ingot's boot CD as virtual media)"
            )),
        }
    }
}

/// Where an Inventory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not part of any Cluster.
    Free,
    /// Not part of any Cluster, claimed by a pool whose install booted from the CD and
    /// reported: the pool's cloud drives the server; here only its CD is ejected.
    ClaimInstalledFromCd,
    /// Allocated; the Cluster is not booting yet.
    Allocated,
    /// The Cluster boots: this server is to be booted into the installer.
    ToBoot,
    /// Boot Job submitted; waiting for the installer's webhook.
    Installing,
    /// The installer reported SUCCEEDED: the server boots from its disk.
    Installed,
    /// Its Cluster no longer wants it: shut down, then freed.
    Releasing,
}

/// A condition on the Inventory saying why it waits (Seeder's wrangler conditions; `error`
/// shows in the Harvester UI).
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub condition: &'static str,
    pub message: String,
    pub error: bool,
}

/// What a phase decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Nothing to do; set `note` if any; look again after the duration (or on a change).
    Wait(Option<Note>, Option<Duration>),
    /// Create the boot Job (power off, one-time network boot, power on) and record
    /// `bmcJobSubmitted`.
    Boot,
    /// Create the shutdown Job and record `clusterCleanupSubmitted`.
    ShutDown,
    /// Installed from the boot CD: create the eject Job and record `bootMediaEjected`.
    Eject,
    /// A claimed server installed from the boot CD: the claim's eject Job, recorded on the
    /// Inventory (`crate::onprem::cloud::eject_cd`).
    EjectClaimCd,
    /// Power is confirmed off: free the address, delete the install Secret and this
    /// allocation's Jobs (and in Tinkerbell mode the Hardware, Template and Workflow), clear
    /// the status, `inventoryFreed`.
    Free,
    /// Tinkerbell mode: the Workflow reached `STATE_SUCCESS`: network boot and workflows off on
    /// the Hardware, the install recorded, an Event on the Cluster.
    WorkflowSucceeded,
    /// Tinkerbell mode: the Workflow failed in this task and action: a condition and a
    /// Warning Event on the Cluster; nothing is run again.
    WorkflowFailed { task: String, action: String },
}

/// ingot's Inventory conditions beside Seeder's (wrangler style, same list).
pub const WAITING_FOR_INSTALL_SLOT: &str = "waitingForInstallSlot";
pub const HARVESTER_INSTALLED: &str = "harvesterInstalled";
pub const INSTALL_TIMED_OUT: &str = "installTimedOut";
pub const BOOT_MEDIA_EJECTED: &str = "bootMediaEjected";
/// The condition of a boot media annotation ingot cannot follow.
pub const BOOT_MEDIA_INVALID: &str = "bootMediaInvalid";
/// The condition of a CD boot whose BMC has no virtual media (IPMI, or a Redfish service
/// without a CD device).
pub const VIRTUAL_MEDIA_UNSUPPORTED: &str = "virtualMediaUnsupported";

/// Whether a failed boot Job failed inserting the CD because the BMC has none to insert it in
/// (the rufio Task's message: the action, then the BMC's refusal).
pub fn no_virtual_media(why: &str) -> bool {
    why.contains("insert virtual media") && why.contains("not supported by this BMC")
}

const JOB_POLL: Duration = Duration::from_secs(30);

pub fn phase(observed: &Observed) -> Phase {
    match observed.owner {
        Owner::None if observed.claim_cd_to_eject => Phase::ClaimInstalledFromCd,
        Owner::None => Phase::Free,
        Owner::Unwanted => Phase::Releasing,
        Owner::Waiting => Phase::Allocated,
        Owner::Booting if observed.installed => Phase::Installed,
        Owner::Booting if observed.boot != JobState::None => Phase::Installing,
        Owner::Booting => Phase::ToBoot,
    }
}

/// One pass: what to do next.
pub fn step(observed: &Observed) -> Outcome {
    match phase(observed) {
        Phase::Free | Phase::Allocated => Outcome::Wait(None, None),
        Phase::ClaimInstalledFromCd => Outcome::EjectClaimCd,
        Phase::Installed => installed(observed),
        Phase::ToBoot => to_boot(observed),
        Phase::Installing => installing(observed),
        Phase::Releasing => releasing(observed),
    }
}

/// Installed: a boot CD still inserted is ejected, once.
fn installed(observed: &Observed) -> Outcome {
    if observed.media == Ok(BootMedia::Cd) && !observed.ejected {
        return Outcome::Eject;
    }
    Outcome::Wait(None, None)
}

fn to_boot(observed: &Observed) -> Outcome {
    if let Err(why) = &observed.media {
        return Outcome::Wait(
            Some(Note {
                condition: BOOT_MEDIA_INVALID,
                message: why.clone(),
                error: true,
            }),
            None,
        );
    }
    if !observed.ready {
        return Outcome::Wait(
            Some(Note {
                condition: WAITING_FOR_INSTALL_SLOT,
                message: "waiting for the BMC to answer before booting the installer".into(),
                error: false,
            }),
            None,
        );
    }
    if !observed.install_ready {
        // The Cluster writes it before it boots; a pass may see the Cluster first.
        return Outcome::Wait(None, Some(Duration::from_secs(5)));
    }
    if observed.installs_in_flight >= observed.install_budget {
        return Outcome::Wait(
            Some(Note {
                condition: WAITING_FOR_INSTALL_SLOT,
                message: format!(
                    "{} installs in progress, the most --provisioning-max-concurrent-installs allows: this server boots when one finishes",
                    observed.installs_in_flight
                ),
                error: false,
            }),
            Some(JOB_POLL),
        );
    }
    Outcome::Boot
}

fn installing(observed: &Observed) -> Outcome {
    match &observed.workflow {
        Some(WorkflowState::Succeeded) => return Outcome::WorkflowSucceeded,
        Some(WorkflowState::Failed { task, action }) => {
            return Outcome::WorkflowFailed {
                task: task.clone(),
                action: action.clone(),
            };
        }
        _ => {}
    }
    // A Workflow's change wakes the Inventory (Tinkerbell mode): no faster poll for it.
    let poll = JOB_POLL;
    match &observed.boot {
        JobState::Failed(why) if observed.media == Ok(BootMedia::Cd) && no_virtual_media(why) => {
            Outcome::Wait(
                Some(Note {
                    condition: VIRTUAL_MEDIA_UNSUPPORTED,
                    message: format!(
                        "this server's BMC cannot insert a CD as virtual media ({why}); the server was not touched: set {BOOT_MEDIA_ANNOTATION} to pxe (or remove it), then remove the node from spec.nodes and add it again"
                    ),
                    error: true,
                }),
                None,
            )
        }
        JobState::Failed(why) => Outcome::Wait(
            Some(Note {
                condition: INSTALL_TIMED_OUT,
                message: format!(
                    "the boot into the installer failed ({why}); nothing is retried on its own: remove the node from spec.nodes and add it again to boot it once more"
                ),
                error: true,
            }),
            None,
        ),
        _ if observed
            .booting_for
            .is_some_and(|t| t >= observed.install_timeout) =>
        {
            Outcome::Wait(
                Some(Note {
                    condition: INSTALL_TIMED_OUT,
                    message: format!(
                        "the installer has not reported success within {}s of the boot; nothing is retried on its own: check the server's console, then remove the node from spec.nodes and add it again to boot it once more",
                        observed.install_timeout.as_secs()
                    ),
                    error: true,
                }),
                None,
            )
        }
        // Look again when the install would time out, if that comes before the next poll.
        _ => {
            let left = observed
                .booting_for
                .map_or(poll, |t| observed.install_timeout.saturating_sub(t));
            Outcome::Wait(None, Some(poll.min(left).max(Duration::from_secs(1))))
        }
    }
}

/// The shutdown is always sent, and the server freed once the BMC read it off after that: a
/// power state read before it (kept while the operator was down, say) may be stale, and
/// freeing a running server's address would give it to a second one. A server already off
/// costs one Job, whose Task finds it off and sends nothing.
fn releasing(observed: &Observed) -> Outcome {
    match (observed.power, &observed.shutdown) {
        (_, JobState::None) => Outcome::ShutDown,
        (Power::Off, JobState::Succeeded | JobState::Failed(_)) => Outcome::Free,
        (_, JobState::Failed(why)) => Outcome::Wait(
            Some(Note {
                condition: "clusterCleanupSubmitted",
                message: format!(
                    "the shutdown failed ({why}); the address stays held until the BMC reports the server off"
                ),
                error: true,
            }),
            Some(Duration::from_secs(600)),
        ),
        // Submitted, or done but the power state not read off yet: never taken for off.
        _ => Outcome::Wait(None, Some(JOB_POLL)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(owner: Owner) -> Observed {
        Observed {
            ready: true,
            owner,
            power: Power::On,
            boot: JobState::None,
            installed: false,
            install_ready: true,
            shutdown: JobState::None,
            installs_in_flight: 0,
            install_budget: 10,
            booting_for: None,
            install_timeout: Duration::from_secs(3600),
            workflow: None,
            media: Ok(BootMedia::Pxe),
            ejected: false,
            claim_cd_to_eject: false,
        }
    }

    #[test]
    fn a_boot_cd_is_ejected_once_installed_and_a_bad_choice_never_boots() {
        let mut o = observed(Owner::Booting);
        o.media = Ok(BootMedia::Cd);
        assert_eq!(step(&o), Outcome::Boot);
        o.boot = JobState::Succeeded;
        o.installed = true;
        assert_eq!(step(&o), Outcome::Eject);
        o.ejected = true;
        assert_eq!(step(&o), Outcome::Wait(None, None));
        // Network-booted: nothing to eject.
        let mut pxe = observed(Owner::Booting);
        pxe.boot = JobState::Succeeded;
        pxe.installed = true;
        assert_eq!(step(&pxe), Outcome::Wait(None, None));
        let mut bad = observed(Owner::Booting);
        bad.media = BootMedia::parse(Some("usb"));
        match step(&bad) {
            Outcome::Wait(Some(note), None) => {
                assert_eq!(note.condition, BOOT_MEDIA_INVALID);
                assert!(
                    note.message.contains(BOOT_MEDIA_ANNOTATION) && note.message.contains("cd")
                );
                assert!(note.error);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(BootMedia::parse(None), Ok(BootMedia::Pxe));
        assert_eq!(BootMedia::parse(Some("cd")), Ok(BootMedia::Cd));
        // A pool's claimed server installed from its CD: ejected; otherwise left to the pool.
        let mut claimed = observed(Owner::None);
        assert_eq!(step(&claimed), Outcome::Wait(None, None));
        claimed.claim_cd_to_eject = true;
        assert_eq!(step(&claimed), Outcome::EjectClaimCd);
    }

    #[test]
    fn a_cd_boot_refused_for_want_of_virtual_media_says_so_and_others_time_out() {
        let mut o = observed(Owner::Booting);
        o.media = Ok(BootMedia::Cd);
        o.boot = JobState::Failed(
            "insert virtual media: not supported by this BMC: virtual media over IPMI".into(),
        );
        let Outcome::Wait(Some(note), None) = step(&o) else {
            panic!("{:?}", step(&o))
        };
        assert_eq!(note.condition, VIRTUAL_MEDIA_UNSUPPORTED);
        assert!(note.error && note.message.contains(BOOT_MEDIA_ANNOTATION));
        // Any other failure of the same Job is the install's failure.
        o.boot = JobState::Failed("power off: timeout".into());
        let Outcome::Wait(Some(note), None) = step(&o) else {
            panic!("{:?}", step(&o))
        };
        assert_eq!(note.condition, INSTALL_TIMED_OUT);
    }

    #[test]
    fn a_workflow_s_end_is_acted_on_once_and_a_failure_is_never_booted_again() {
        let mut o = observed(Owner::Booting);
        o.boot = JobState::Succeeded;
        o.workflow = Some(WorkflowState::Running);
        assert_eq!(step(&o), Outcome::Wait(None, Some(JOB_POLL)));
        o.workflow = Some(WorkflowState::Succeeded);
        assert_eq!(step(&o), Outcome::WorkflowSucceeded);
        o.workflow = Some(WorkflowState::Failed {
            task: "t".into(),
            action: "a".into(),
        });
        assert!(matches!(step(&o), Outcome::WorkflowFailed { .. }));
        // Recorded as installed: nothing more.
        o.installed = true;
        assert_eq!(step(&o), Outcome::Wait(None, None));
    }

    #[test]
    fn a_server_boots_once_its_cluster_boots() {
        assert_eq!(step(&observed(Owner::Waiting)), Outcome::Wait(None, None));
        assert_eq!(step(&observed(Owner::Booting)), Outcome::Boot);
        let mut o = observed(Owner::Booting);
        o.boot = JobState::Running;
        assert_eq!(phase(&o), Phase::Installing);
        assert!(matches!(step(&o), Outcome::Wait(None, Some(_))));
        o.installed = true;
        assert_eq!(phase(&o), Phase::Installed);
    }

    #[test]
    fn boots_wait_for_a_slot_within_the_budget() {
        let mut o = observed(Owner::Booting);
        o.installs_in_flight = 10;
        assert!(
            matches!(step(&o), Outcome::Wait(Some(n), _) if n.condition == WAITING_FOR_INSTALL_SLOT)
        );
        o.installs_in_flight = 9;
        assert_eq!(step(&o), Outcome::Boot);
    }

    #[test]
    fn a_failed_or_silent_install_is_reported_and_never_booted_again() {
        let mut o = observed(Owner::Booting);
        o.boot = JobState::Failed("BMC refused".into());
        assert!(matches!(step(&o), Outcome::Wait(Some(n), None) if n.error));
        o.boot = JobState::Succeeded;
        o.booting_for = Some(Duration::from_secs(3600));
        assert!(
            matches!(step(&o), Outcome::Wait(Some(n), None) if n.condition == INSTALL_TIMED_OUT)
        );
    }

    #[test]
    fn an_install_is_looked_at_again_when_it_would_time_out() {
        let mut o = observed(Owner::Booting);
        o.boot = JobState::Succeeded;
        o.install_timeout = Duration::from_secs(20);
        o.booting_for = Some(Duration::from_secs(12));
        assert_eq!(step(&o), Outcome::Wait(None, Some(Duration::from_secs(8))));
        o.install_timeout = Duration::from_secs(3600);
        assert_eq!(step(&o), Outcome::Wait(None, Some(JOB_POLL)));
    }

    #[test]
    fn a_released_server_is_freed_only_once_the_bmc_reports_it_off() {
        let mut o = observed(Owner::Unwanted);
        assert_eq!(step(&o), Outcome::ShutDown);
        o.shutdown = JobState::Running;
        assert!(matches!(step(&o), Outcome::Wait(None, Some(_))));
        o.shutdown = JobState::Succeeded;
        o.power = Power::Unknown;
        assert!(matches!(step(&o), Outcome::Wait(None, Some(_))));
        o.power = Power::Off;
        assert_eq!(step(&o), Outcome::Free);
        // Read off before any shutdown (perhaps a stale reading): the shutdown is sent, and
        // the server freed only once it completed.
        let mut o = observed(Owner::Unwanted);
        o.power = Power::Off;
        assert_eq!(step(&o), Outcome::ShutDown);
        o.shutdown = JobState::Running;
        assert!(matches!(step(&o), Outcome::Wait(None, Some(_))));
    }
}
