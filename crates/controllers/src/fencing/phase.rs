//! One Node's way through fencing: a typed phase read from what the executor observed, one
//! function per phase, each returning an [`Outcome`]. Pure: the executor observes and acts.
//!
//! A Node that stays NotReady longer than `--fencing-after-seconds` is powered off through its
//! Inventory's BMC; only once the rufio Job has completed *and* the Machine reads the power
//! off does the Node get Kubernetes' `node.kubernetes.io/out-of-service` taint (non-graceful
//! node shutdown: its volumes detach and its pods are deleted). Once its pods are gone it is
//! powered on again (or stays off, per `--fencing-recovery`); once Ready, the taint ingot
//! added is removed.
//!
//! Destroy only within a budget, checked in this order before the one power-off of an
//! episode: a Node in maintenance or cordoned by a person is never fenced; more Nodes NotReady
//! than `--fencing-max-unhealthy` fences nothing (a partition is suspected); a control-plane
//! Node only while the other Ready control-plane Nodes keep a strict majority; never without an
//! Inventory whose BMC reports a power state. Each power action is a rufio Job whose name is
//! fixed by the episode (the Node and the time it went NotReady): a pass after a crash adopts
//! it, and a failed one is reported, never sent again on its own.

use std::time::Duration;

/// How the Node's `Ready` condition stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// `Ready` is `False` or `Unknown`, since this long.
    NotReady(Duration),
    /// No `Ready` condition yet (a Node registering): never fenced.
    Unreported,
}

pub use crate::seeder::power::{JobState, Power};

/// What happens once a fenced Node's pods are gone (`--fencing-recovery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    PowerOn,
    StayOff,
}

/// How many Nodes may be NotReady before fencing stops (`--fencing-max-unhealthy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnhealthy {
    Count(usize),
    /// Of the fleet (the Nodes an Inventory in scope names), rounded down.
    Percent(u32),
}

impl MaxUnhealthy {
    /// Parses `3` or `40%`.
    pub fn parse(value: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--fencing-max-unhealthy {value:?}: expected a count of Nodes (e.g. 2) or a percent of all Nodes from 0% to 100% (e.g. 40%)"
            )
        };
        match value.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<u32>() {
                Ok(p) if p <= 100 => Ok(MaxUnhealthy::Percent(p)),
                _ => Err(bad()),
            },
            None => value
                .trim()
                .parse::<usize>()
                .map(MaxUnhealthy::Count)
                .map_err(|_| bad()),
        }
    }

    /// The most Nodes that may be NotReady, of `total`.
    pub fn limit(self, total: usize) -> usize {
        match self {
            MaxUnhealthy::Count(n) => n,
            MaxUnhealthy::Percent(p) => total * p as usize / 100,
        }
    }
}

/// What the executor observed of one Node, its Inventory and the fleet.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub readiness: Readiness,
    /// `--fencing-after-seconds`.
    pub after: Duration,
    /// Harvester's `harvesterhci.io/maintain-status` is set.
    pub maintenance: bool,
    /// `spec.unschedulable` (a person's cordon).
    pub cordoned: bool,
    /// Nodes whose `Ready` is not `True`, this one included, and all Nodes.
    pub unhealthy: usize,
    pub nodes: usize,
    pub max_unhealthy: MaxUnhealthy,
    /// Labelled `node-role.kubernetes.io/control-plane`.
    pub control_plane: bool,
    /// All control-plane Nodes, and the Ready ones other than this.
    pub control_planes: usize,
    pub other_ready_control_planes: usize,
    /// Exactly one Inventory names this Node, and its Machine exists.
    pub inventory: bool,
    pub power: Power,
    /// The power-off Job of this episode.
    pub power_off: JobState,
    /// The out-of-service taint ingot added is on the Node.
    pub tainted: bool,
    /// Pods still bound to the Node that do not tolerate the taint.
    pub pods_left: usize,
    pub recovery: Recovery,
    /// The power-on Job of this episode.
    pub power_on: JobState,
    /// A hold is recorded on the Node (its Event told once).
    pub held_before: bool,
    /// The BMCRemediation that made the Node a candidate was deleted (NodeHealthCheck found
    /// the Node healthy, or a person gave it up): the Node is released.
    pub released: bool,
}

/// Where a Node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Ready (or not reported yet), nothing of ingot's on it.
    Healthy,
    /// NotReady for less than `after`.
    Suspect,
    /// NotReady for `after` or longer, not powered off yet: the checks decide.
    Candidate,
    /// The power-off Job is submitted; the taint waits for the BMC to confirm off.
    PoweringOff,
    /// Tainted out of service.
    Fenced,
    /// Ready again with ingot's record on it (a power action, its taint, or a hold): the taint
    /// ingot added and the record go.
    Recovered,
}

/// Why a Node is not fenced, or waits (the Event's and metric's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    Maintenance,
    Cordoned,
    PartitionSuspected,
    EtcdQuorum,
    NoInventory,
    BmcUnknown,
    PowerOffFailed,
    AwaitingPowerOff,
    PowerOnFailed,
}

impl Hold {
    pub fn reason(self) -> &'static str {
        match self {
            Hold::Maintenance => "FencingHeldMaintenance",
            Hold::Cordoned => "FencingHeldCordoned",
            Hold::PartitionSuspected => "FencingHeldPartitionSuspected",
            Hold::EtcdQuorum => "FencingHeldEtcdQuorum",
            Hold::NoInventory => "FencingHeldNoInventory",
            Hold::BmcUnknown => "FencingHeldBMCUnknown",
            Hold::PowerOffFailed => "FencingPowerOffFailed",
            Hold::AwaitingPowerOff => "FencingAwaitingPowerOff",
            Hold::PowerOnFailed => "FencingPowerOnFailed",
        }
    }

    /// A failure a person must look at (a Warning), not a wait.
    pub fn warning(self) -> bool {
        matches!(
            self,
            Hold::PartitionSuspected
                | Hold::EtcdQuorum
                | Hold::BmcUnknown
                | Hold::PowerOffFailed
                | Hold::PowerOnFailed
        )
    }
}

/// What a phase decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Nothing to do; look again after the duration (or on a change).
    Wait(Option<Duration>),
    /// Not fenced (or not further) for this reason; look again after the duration.
    Held(Hold, String, Option<Duration>),
    /// Create this episode's power-off Job and record it on the Node.
    PowerOff,
    /// Power is confirmed off: add the out-of-service taint (and record that ingot added it).
    Taint,
    /// The pods are gone: create this episode's power-on Job and record it.
    PowerOn,
    /// Ready again: remove the taint ingot added and its record.
    Recover,
}

/// How often a held or waiting Node is looked at again when no change of its own wakes it
/// (the fleet's budget moves with other Nodes).
pub const POLL: Duration = Duration::from_secs(30);

pub fn phase(o: &Observed) -> Phase {
    let recorded =
        o.power_off != JobState::None || o.tainted || o.power_on != JobState::None || o.held_before;
    match o.readiness {
        Readiness::Ready | Readiness::Unreported if recorded => Phase::Recovered,
        Readiness::Ready | Readiness::Unreported => Phase::Healthy,
        Readiness::NotReady(_) if o.tainted => Phase::Fenced,
        Readiness::NotReady(_) if o.power_off != JobState::None => Phase::PoweringOff,
        Readiness::NotReady(since) if since < o.after => Phase::Suspect,
        Readiness::NotReady(_) => Phase::Candidate,
    }
}

/// One pass: what to do next.
pub fn step(o: &Observed) -> Outcome {
    match phase(o) {
        Phase::Healthy => Outcome::Wait(None),
        Phase::Suspect => suspect(o),
        Phase::Candidate => candidate(o),
        Phase::PoweringOff => powering_off(o),
        Phase::Fenced => fenced(o),
        Phase::Recovered => recovered(o),
    }
}

fn suspect(o: &Observed) -> Outcome {
    let Readiness::NotReady(since) = o.readiness else {
        return Outcome::Wait(None);
    };
    Outcome::Wait(Some(
        o.after.saturating_sub(since).max(Duration::from_secs(1)),
    ))
}

fn candidate(o: &Observed) -> Outcome {
    let held = |hold: Hold, message: String| Outcome::Held(hold, message, Some(POLL));
    if o.maintenance {
        return held(
            Hold::Maintenance,
            "the Node is in maintenance (harvesterhci.io/maintain-status): it is never fenced"
                .into(),
        );
    }
    if o.cordoned {
        return held(
            Hold::Cordoned,
            "the Node is cordoned (spec.unschedulable): it is never fenced; uncordon it to let it be fenced".into(),
        );
    }
    let limit = o.max_unhealthy.limit(o.nodes);
    if o.unhealthy > limit {
        return held(
            Hold::PartitionSuspected,
            format!(
                "{} of {} Nodes are NotReady, more than --fencing-max-unhealthy allows ({limit}): a partition is suspected, nothing is fenced",
                o.unhealthy, o.nodes
            ),
        );
    }
    if o.control_plane && o.other_ready_control_planes * 2 <= o.control_planes {
        return held(
            Hold::EtcdQuorum,
            format!(
                "a control-plane Node: only {} of {} control-plane Nodes would stay Ready, not a majority; it is not powered off while that would risk etcd's quorum",
                o.other_ready_control_planes, o.control_planes
            ),
        );
    }
    if !o.inventory {
        return held(
            Hold::NoInventory,
            "not exactly one Inventory with a Machine names this Node: there is no BMC to power it off".into(),
        );
    }
    if o.power == Power::Unknown {
        return held(
            Hold::BmcUnknown,
            "the BMC does not report a power state: the Node is not fenced while its BMC cannot be read".into(),
        );
    }
    Outcome::PowerOff
}

fn powering_off(o: &Observed) -> Outcome {
    match (&o.power_off, o.power) {
        (JobState::Failed(why), _) => Outcome::Held(
            Hold::PowerOffFailed,
            format!(
                "the power-off failed ({why}); nothing is retried on its own and the Node is not tainted: check the BMC, then power the server off by hand or let the Node come back"
            ),
            None,
        ),
        (JobState::Succeeded, Power::Off) => Outcome::Taint,
        (JobState::Succeeded, _) => Outcome::Held(
            Hold::AwaitingPowerOff,
            "the power-off Job completed; the taint waits until the BMC reads the power off".into(),
            Some(POLL),
        ),
        _ => Outcome::Wait(Some(POLL)),
    }
}

fn fenced(o: &Observed) -> Outcome {
    match (o.recovery, &o.power_on) {
        (Recovery::StayOff, _) => Outcome::Wait(None),
        (Recovery::PowerOn, JobState::None) if o.pods_left == 0 => Outcome::PowerOn,
        (Recovery::PowerOn, JobState::None) => Outcome::Wait(Some(POLL)),
        (Recovery::PowerOn, JobState::Failed(why)) => Outcome::Held(
            Hold::PowerOnFailed,
            format!(
                "the power-on failed ({why}); nothing is retried on its own: power the server on by hand"
            ),
            None,
        ),
        // Powering on, or on and waiting for the kubelet.
        (Recovery::PowerOn, _) => Outcome::Wait(None),
    }
}

fn recovered(o: &Observed) -> Outcome {
    if o.released && o.tainted && o.recovery == Recovery::PowerOn {
        // Released while off: the one power-on of the episode first (never a second), and
        // the taint goes once it has ended.
        match o.power_on {
            JobState::None => return Outcome::PowerOn,
            JobState::Running => return Outcome::Wait(Some(POLL)),
            JobState::Succeeded | JobState::Failed(_) => {}
        }
    }
    if o.power_off == JobState::Running && !o.tainted {
        // The power-off still runs: the record stays until it ends, so it is not lost. (Once
        // tainted, the power-off was confirmed: whatever its Job shows now, the taint goes.)
        return Outcome::Wait(Some(POLL));
    }
    Outcome::Recover
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(300);

    /// A Node NotReady past `after`, in a fleet of 5 with one NotReady, with an Inventory
    /// whose BMC reads on.
    fn candidate() -> Observed {
        Observed {
            readiness: Readiness::NotReady(AFTER),
            after: AFTER,
            maintenance: false,
            cordoned: false,
            unhealthy: 1,
            nodes: 5,
            max_unhealthy: MaxUnhealthy::Percent(40),
            control_plane: false,
            control_planes: 3,
            other_ready_control_planes: 3,
            inventory: true,
            power: Power::On,
            power_off: JobState::None,
            tainted: false,
            pods_left: 3,
            recovery: Recovery::PowerOn,
            power_on: JobState::None,
            held_before: false,
            released: false,
        }
    }

    fn held(o: &Observed) -> Option<Hold> {
        match step(o) {
            Outcome::Held(hold, _, _) => Some(hold),
            _ => None,
        }
    }

    #[test]
    fn a_ready_or_unreported_node_is_left_alone() {
        let mut o = candidate();
        o.readiness = Readiness::Ready;
        assert_eq!(phase(&o), Phase::Healthy);
        assert_eq!(step(&o), Outcome::Wait(None));
        o.readiness = Readiness::Unreported;
        assert_eq!(step(&o), Outcome::Wait(None));
    }

    #[test]
    fn a_node_not_ready_for_less_than_after_is_looked_at_again_when_it_would_be_due() {
        let mut o = candidate();
        o.readiness = Readiness::NotReady(Duration::from_secs(280));
        assert_eq!(phase(&o), Phase::Suspect);
        assert_eq!(step(&o), Outcome::Wait(Some(Duration::from_secs(20))));
        o.readiness = Readiness::NotReady(AFTER);
        assert_eq!(phase(&o), Phase::Candidate);
        assert_eq!(step(&o), Outcome::PowerOff);
    }

    #[test]
    fn maintenance_and_a_persons_cordon_are_never_fenced() {
        let mut o = candidate();
        o.maintenance = true;
        assert_eq!(held(&o), Some(Hold::Maintenance));
        o.maintenance = false;
        o.cordoned = true;
        assert_eq!(held(&o), Some(Hold::Cordoned));
        assert!(!Hold::Cordoned.warning());
    }

    #[test]
    fn a_partition_of_most_nodes_fences_nothing() {
        let mut o = candidate();
        // 40% of 5 is 2: two NotReady are fenced, three are a partition.
        o.unhealthy = 2;
        assert_eq!(step(&o), Outcome::PowerOff);
        o.unhealthy = 3;
        assert_eq!(held(&o), Some(Hold::PartitionSuspected));
        o.max_unhealthy = MaxUnhealthy::Count(3);
        assert_eq!(step(&o), Outcome::PowerOff);
        o.max_unhealthy = MaxUnhealthy::Count(0);
        o.unhealthy = 1;
        assert_eq!(held(&o), Some(Hold::PartitionSuspected));
    }

    #[test]
    fn a_control_plane_node_only_while_the_others_keep_a_majority() {
        let mut o = candidate();
        o.control_plane = true;
        o.control_planes = 3;
        o.other_ready_control_planes = 2;
        assert_eq!(step(&o), Outcome::PowerOff);
        o.other_ready_control_planes = 1;
        assert_eq!(held(&o), Some(Hold::EtcdQuorum));
        // Two of four is not a strict majority.
        o.control_planes = 4;
        o.other_ready_control_planes = 2;
        assert_eq!(held(&o), Some(Hold::EtcdQuorum));
        // A worker is not counted against the control plane.
        o.control_plane = false;
        assert_eq!(step(&o), Outcome::PowerOff);
    }

    #[test]
    fn never_without_an_inventory_or_a_bmc_that_reads() {
        let mut o = candidate();
        o.inventory = false;
        assert_eq!(held(&o), Some(Hold::NoInventory));
        o.inventory = true;
        o.power = Power::Unknown;
        assert_eq!(held(&o), Some(Hold::BmcUnknown));
        assert!(Hold::BmcUnknown.warning());
    }

    #[test]
    fn the_checks_are_taken_in_order() {
        let mut o = candidate();
        o.maintenance = true;
        o.unhealthy = 5;
        o.inventory = false;
        assert_eq!(held(&o), Some(Hold::Maintenance));
        o.maintenance = false;
        assert_eq!(held(&o), Some(Hold::PartitionSuspected));
        o.unhealthy = 1;
        assert_eq!(held(&o), Some(Hold::NoInventory));
    }

    #[test]
    fn the_taint_waits_for_the_job_and_the_bmc_to_confirm_off() {
        let mut o = candidate();
        o.power_off = JobState::Running;
        assert_eq!(phase(&o), Phase::PoweringOff);
        assert_eq!(step(&o), Outcome::Wait(Some(POLL)));
        // The Job done is not enough: the Machine must read off.
        o.power_off = JobState::Succeeded;
        assert_eq!(held(&o), Some(Hold::AwaitingPowerOff));
        o.power = Power::Unknown;
        assert_eq!(held(&o), Some(Hold::AwaitingPowerOff));
        // The Machine reading off is not enough: the Job must have completed.
        o.power = Power::Off;
        o.power_off = JobState::Running;
        assert_eq!(step(&o), Outcome::Wait(Some(POLL)));
        o.power_off = JobState::Succeeded;
        assert_eq!(step(&o), Outcome::Taint);
    }

    #[test]
    fn a_failed_power_off_is_reported_and_never_sent_again_nor_tainted() {
        let mut o = candidate();
        o.power_off = JobState::Failed("BMC refused".into());
        o.power = Power::Off;
        assert!(matches!(
            step(&o),
            Outcome::Held(Hold::PowerOffFailed, _, None)
        ));
        assert!(Hold::PowerOffFailed.warning());
    }

    #[test]
    fn a_power_off_under_way_goes_on_whatever_the_checks_say_now() {
        let mut o = candidate();
        o.power_off = JobState::Succeeded;
        o.power = Power::Off;
        o.maintenance = true;
        o.unhealthy = 5;
        assert_eq!(step(&o), Outcome::Taint);
    }

    #[test]
    fn a_fenced_node_is_powered_on_once_its_pods_are_gone_or_stays_off() {
        let mut o = candidate();
        o.power_off = JobState::Succeeded;
        o.power = Power::Off;
        o.tainted = true;
        assert_eq!(phase(&o), Phase::Fenced);
        assert_eq!(step(&o), Outcome::Wait(Some(POLL)));
        o.pods_left = 0;
        assert_eq!(step(&o), Outcome::PowerOn);
        o.power_on = JobState::Running;
        assert_eq!(step(&o), Outcome::Wait(None));
        o.power_on = JobState::Succeeded;
        assert_eq!(step(&o), Outcome::Wait(None));
        o.power_on = JobState::Failed("no answer".into());
        assert!(matches!(
            step(&o),
            Outcome::Held(Hold::PowerOnFailed, _, None)
        ));
        o.power_on = JobState::None;
        o.recovery = Recovery::StayOff;
        assert_eq!(step(&o), Outcome::Wait(None));
    }

    #[test]
    fn a_node_ready_again_loses_the_taint_and_the_record() {
        let mut o = candidate();
        o.readiness = Readiness::Ready;
        o.power_off = JobState::Succeeded;
        o.tainted = true;
        o.power_on = JobState::Succeeded;
        assert_eq!(phase(&o), Phase::Recovered);
        assert_eq!(step(&o), Outcome::Recover);
        // Back before its power-off ended: the record stays until it ends.
        o.tainted = false;
        o.power_on = JobState::None;
        o.power_off = JobState::Running;
        assert_eq!(step(&o), Outcome::Wait(Some(POLL)));
        o.power_off = JobState::Failed("x".into());
        assert_eq!(step(&o), Outcome::Recover);
        // Tainted, then its Job gone (read as still running): the taint goes all the same.
        o.tainted = true;
        o.power_off = JobState::Running;
        assert_eq!(step(&o), Outcome::Recover);
        o.tainted = false;
        // Only a hold recorded: it is cleared too.
        o.power_off = JobState::None;
        o.held_before = true;
        assert_eq!(step(&o), Outcome::Recover);
        o.held_before = false;
        assert_eq!(step(&o), Outcome::Wait(None));
    }

    #[test]
    fn a_released_node_is_powered_on_once_then_untainted() {
        let mut o = candidate();
        o.readiness = Readiness::Ready;
        o.released = true;
        o.power_off = JobState::Succeeded;
        o.tainted = true;
        assert_eq!(step(&o), Outcome::PowerOn);
        o.power_on = JobState::Running;
        assert_eq!(step(&o), Outcome::Wait(Some(POLL)));
        o.power_on = JobState::Succeeded;
        assert_eq!(step(&o), Outcome::Recover);
        o.power_on = JobState::Failed("x".into());
        assert_eq!(step(&o), Outcome::Recover);
        // Left off (powerOnAfterRecovery: false): only the taint goes.
        o.power_on = JobState::None;
        o.recovery = Recovery::StayOff;
        assert_eq!(step(&o), Outcome::Recover);
        // Never powered off (held): nothing to power on.
        o.recovery = Recovery::PowerOn;
        o.tainted = false;
        o.power_off = JobState::None;
        o.held_before = true;
        assert_eq!(step(&o), Outcome::Recover);
    }

    #[test]
    fn max_unhealthy_parses_a_count_or_a_percent() {
        assert_eq!(MaxUnhealthy::parse("40%"), Ok(MaxUnhealthy::Percent(40)));
        assert_eq!(MaxUnhealthy::parse("2"), Ok(MaxUnhealthy::Count(2)));
        for bad in ["", "-1", "101%", "x%", "2.5"] {
            let e = MaxUnhealthy::parse(bad).unwrap_err();
            assert!(e.contains("--fencing-max-unhealthy"), "{e}");
        }
        assert_eq!(MaxUnhealthy::Percent(40).limit(5), 2);
        assert_eq!(MaxUnhealthy::Percent(100).limit(5), 5);
        assert_eq!(MaxUnhealthy::Count(3).limit(5), 3);
    }
}
