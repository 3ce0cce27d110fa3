//! The Cluster state machine of Seeder's full mode: Seeder's status strings as typed phases,
//! one function per phase, each returning an [`Outcome`] that the executor (`super::execute`)
//! carries out. Pure: it reads what the executor observed and never the API.
//!
//! ```text
//! ""  ──VIP, token──▶  clusterConfigReady  ──every node allocated──▶  clusterNodesPatched
//!      ──install configs written──▶  tinkConfigReady  ──every node a Ready Node──▶  clusterRunning
//! ```
//!
//! A node appended to `spec.nodes` sends a booting or running Cluster back to
//! `clusterConfigReady` (it is allocated as a joining node); a node removed from it is released
//! by the Inventory controller (`provisioning::node`), which shuts it down through its BMC first.

use std::time::Duration;

use ingot_api::seeder::cluster_status;

/// Where a Cluster is, by Seeder's status string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `""`: no VIP, no token yet.
    New,
    /// `clusterConfigReady`: VIP and token ready; nodes are being allocated.
    ConfigReady,
    /// `clusterNodesPatched`: every node has its address; install configs are being written.
    NodesPatched,
    /// `tinkConfigReady`: every node can boot (Seeder's name, kept on the wire; ingot serves
    /// the boot itself unless Tinkerbell mode is on); nodes are booting and installing.
    BootReady,
    /// `clusterRunning`: the new cluster has a Ready Node for every `spec.nodes` entry.
    Running,
}

impl Phase {
    pub fn parse(status: Option<&str>) -> Option<Phase> {
        Some(match status.unwrap_or_default() {
            "" => Phase::New,
            cluster_status::CONFIG_READY => Phase::ConfigReady,
            cluster_status::NODES_PATCHED => Phase::NodesPatched,
            cluster_status::BOOT_READY => Phase::BootReady,
            cluster_status::RUNNING => Phase::Running,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::New => "",
            Phase::ConfigReady => cluster_status::CONFIG_READY,
            Phase::NodesPatched => cluster_status::NODES_PATCHED,
            Phase::BootReady => cluster_status::BOOT_READY,
            Phase::Running => cluster_status::RUNNING,
        }
    }
}

/// What the executor found for one `spec.nodes` entry.
#[derive(Clone, Debug, PartialEq)]
pub enum Member {
    /// No such Inventory.
    Missing,
    /// Its BMC has not answered yet (`status.status` is not `inventoryNodeReady`).
    NotReady,
    /// It cannot be installed: `field` is missing or wrong.
    Invalid { field: &'static str, fix: String },
    /// Another Cluster holds it (`namespace/name`).
    Taken { by: String },
    /// Ready and free: to be allocated.
    Free,
    /// Allocated to this Cluster (`pxeBootConfig` and `ownerCluster` written).
    Allocated,
}

/// The VIP, as far as the executor could tell.
#[derive(Clone, Debug, PartialEq)]
pub enum Vip {
    /// Held by this Cluster at this address.
    Held(String),
    /// Not held yet; the pool can hand one out.
    Free,
    /// The pool cannot hand one out now: why, and the fix.
    Blocked(String),
}

/// What the executor observed, for one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// `None`: an unknown status string (someone wrote it by hand).
    pub phase: Option<Phase>,
    /// Why no node can be rendered with the Cluster's own settings, or handed its files
    /// (reason, message naming the field and the fix).
    pub settings_problem: Option<(&'static str, String)>,
    pub vip: Vip,
    /// The cluster token Secret exists.
    pub token: bool,
    /// One per `spec.nodes` entry, in order: `(inventory namespace/name, what was found)`.
    pub members: Vec<(String, Member)>,
    /// Nodes whose install Secret is missing or stale (to be written).
    pub stale_installs: usize,
    /// Tinkerbell mode: Hardware, Template or Workflow objects missing or stale (to be
    /// written).
    pub stale_tink: usize,
    /// Tinkerbell mode: why the stack's address cannot be read (Service `tink-stack`).
    pub tink_blocked: Option<String>,
    /// A `clusterConfig` this mode cannot install (`streamImageMode` without Tinkerbell): the
    /// field and the fix.
    pub config_refused: Option<String>,
    /// Nodes that reported their install (the installer's SUCCEEDED webhook).
    pub installed: usize,
    /// Ready Nodes of the new cluster whose address is a node's address; `None` when not read
    /// (not yet reachable, or not yet asked).
    pub remote_ready: Option<usize>,
    /// The new cluster's Nodes are watched: a Node turning Ready wakes the Cluster.
    pub watching: bool,
}

/// Why a Cluster waits: its `Ready` condition's reason and message, and when to look again.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    pub reason: &'static str,
    pub message: String,
    pub retry: Duration,
    /// The hold is a problem someone must fix (a Warning Event), not progress.
    pub warning: bool,
}

/// What a phase decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Write nothing but the `Ready` condition; look again.
    Wait(Hold),
    /// Allocate the VIP from `vipConfig`'s pool (reusing this Cluster's allocation).
    AllocateVip,
    /// Create the cluster token Secret (from the operating system's CSPRNG).
    CreateToken,
    /// Allocate these `spec.nodes` entries (indexes): address, OS password, `ownerCluster`.
    AllocateNodes(Vec<usize>),
    /// Write the install Secrets of the allocated nodes (iPXE script and install config).
    WriteInstalls,
    /// Tinkerbell mode: create or update the nodes' Hardware, Template and Workflow, and
    /// Seeder's conditions saying so.
    WriteTinkerbell,
    /// Move to this phase (an Event says so).
    Advance(Phase),
}

/// How often a waiting Cluster looks again when nothing it watches wakes it.
pub const POLL: Duration = Duration::from_secs(10);
/// How often a Cluster whose nodes all reported their install looks at the new cluster's
/// Nodes when they are not watched: its API server does not answer the node reader yet (it
/// comes up with the create node), or it refused or dropped the watch. Nothing else wakes the
/// Cluster then; one request a second while it lasts.
pub const FINISH_POLL: Duration = Duration::from_secs(1);
/// How often a Cluster waiting on a person looks again.
pub const SLOW_POLL: Duration = Duration::from_secs(60);

/// One pass: what to do next.
pub fn step(observed: &Observed) -> Outcome {
    let Some(phase) = observed.phase else {
        return Outcome::Wait(Hold {
            reason: "UnknownStatus",
            message: "status.status is not one of Seeder's (\"\", clusterConfigReady, clusterNodesPatched, tinkConfigReady, clusterRunning): clear it to start again".to_owned(),
            retry: SLOW_POLL,
            warning: true,
        });
    };
    if let Some(why) = &observed.config_refused {
        return Outcome::Wait(Hold {
            reason: "ClusterConfigUnsupported",
            message: why.clone(),
            retry: SLOW_POLL,
            warning: true,
        });
    }
    match phase {
        Phase::New => new(observed),
        Phase::ConfigReady => config_ready(observed),
        Phase::NodesPatched => nodes_patched(observed),
        Phase::BootReady => boot_ready(observed),
        Phase::Running => running(observed),
    }
}

fn new(observed: &Observed) -> Outcome {
    // A setting or a node someone must fix holds the Cluster before it takes anything (its VIP
    // included).
    if let Some(hold) = settings_hold(observed) {
        return Outcome::Wait(hold);
    }
    if let Some(hold) = first_problem(observed).filter(|h| h.warning) {
        return Outcome::Wait(hold);
    }
    match &observed.vip {
        Vip::Blocked(why) => Outcome::Wait(Hold {
            reason: "WaitingForAddressPool",
            message: why.clone(),
            retry: SLOW_POLL,
            warning: false,
        }),
        Vip::Free => Outcome::AllocateVip,
        Vip::Held(_) if !observed.token => Outcome::CreateToken,
        Vip::Held(_) => Outcome::Advance(Phase::ConfigReady),
    }
}

fn config_ready(observed: &Observed) -> Outcome {
    if observed.members.is_empty() {
        return Outcome::Wait(Hold {
            reason: "NoNodes",
            message: "spec.nodes is empty: list the Inventories to install".to_owned(),
            retry: SLOW_POLL,
            warning: false,
        });
    }
    if let Some(hold) = settings_hold(observed).or_else(|| first_problem(observed)) {
        return Outcome::Wait(hold);
    }
    let free: Vec<usize> = observed
        .members
        .iter()
        .enumerate()
        .filter(|(_, (_, m))| *m == Member::Free)
        .map(|(i, _)| i)
        .collect();
    if free.is_empty() {
        Outcome::Advance(Phase::NodesPatched)
    } else {
        Outcome::AllocateNodes(free)
    }
}

fn nodes_patched(observed: &Observed) -> Outcome {
    writes(observed).unwrap_or(Outcome::Advance(Phase::BootReady))
}

/// What the nodes' boot still needs written: in Tinkerbell mode the stack's address first,
/// then the install Secrets, then the Tinkerbell objects made from them.
fn writes(observed: &Observed) -> Option<Outcome> {
    if let Some(why) = &observed.tink_blocked {
        return Some(Outcome::Wait(Hold {
            reason: "WaitingForTinkerbell",
            message: why.clone(),
            // The stack's Service and ConfigMap are watched: their change wakes the Cluster.
            retry: SLOW_POLL,
            warning: true,
        }));
    }
    if observed.stale_installs > 0 {
        Some(Outcome::WriteInstalls)
    } else if observed.stale_tink > 0 {
        Some(Outcome::WriteTinkerbell)
    } else {
        None
    }
}

fn boot_ready(observed: &Observed) -> Outcome {
    if let Some(outcome) = membership_changed(observed) {
        return outcome;
    }
    let wanted = observed.members.len();
    match observed.remote_ready {
        Some(ready) if ready >= wanted => Outcome::Advance(Phase::Running),
        ready => Outcome::Wait(Hold {
            reason: "Installing",
            message: format!(
                "{} of {wanted} nodes installed, {} of {wanted} Ready in the new cluster",
                observed.installed,
                ready.map_or("none yet".to_owned(), |r| r.to_string()),
            ),
            retry: if observed.installed >= wanted && !observed.watching {
                FINISH_POLL
            } else {
                POLL
            },
            warning: false,
        }),
    }
}

fn running(observed: &Observed) -> Outcome {
    if let Some(outcome) = membership_changed(observed) {
        return outcome;
    }
    Outcome::Wait(Hold {
        reason: "Running",
        message: format!("{} nodes", observed.members.len()),
        retry: SLOW_POLL,
        warning: false,
    })
}

/// A node appended to `spec.nodes` goes back through allocation (Seeder's `reconcileNodes`);
/// a changed install config is written again (Seeder never updates its Hardware).
fn membership_changed(observed: &Observed) -> Option<Outcome> {
    if observed
        .members
        .iter()
        .any(|(_, m)| *m != Member::Allocated)
    {
        return Some(Outcome::Advance(Phase::ConfigReady));
    }
    writes(observed)
}

/// The first `spec.nodes` entry that holds the Cluster, as a hold naming it and the fix.
/// A Cluster setting no node can be rendered with.
fn settings_hold(observed: &Observed) -> Option<Hold> {
    observed
        .settings_problem
        .as_ref()
        .map(|(reason, why)| Hold {
            reason,
            message: why.clone(),
            retry: SLOW_POLL,
            warning: true,
        })
}

fn first_problem(observed: &Observed) -> Option<Hold> {
    observed
        .members
        .iter()
        .enumerate()
        .find_map(|(i, (name, member))| {
            let (reason, message, warning) = match member {
                Member::Missing => (
                    "InventoryMissing",
                    format!("spec.nodes[{i}].inventoryReference: Inventory {name} does not exist: create it or fix the reference"),
                    true,
                ),
                Member::NotReady => (
                    "WaitingForInventory",
                    format!("waiting for inventory {name} to be ready (its BMC has not answered yet)"),
                    false,
                ),
                Member::Invalid { field, fix } => (
                    "InventoryInvalid",
                    format!("spec.nodes[{i}]: Inventory {name}: {field}: {fix}"),
                    true,
                ),
                Member::Taken { by } => (
                    "InventoryInAnotherCluster",
                    format!("spec.nodes[{i}].inventoryReference: Inventory {name} belongs to Cluster {by}: remove it there first"),
                    true,
                ),
                Member::Free | Member::Allocated => return None,
            };
            Some(Hold {
                reason,
                message,
                retry: if warning { SLOW_POLL } else { POLL },
                warning,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(phase: Phase, members: &[Member]) -> Observed {
        Observed {
            phase: Some(phase),
            settings_problem: None,
            vip: Vip::Held("10.0.0.10".into()),
            token: true,
            members: members
                .iter()
                .enumerate()
                .map(|(i, m)| (format!("default/node{i}"), m.clone()))
                .collect(),
            stale_installs: 0,
            stale_tink: 0,
            tink_blocked: None,
            config_refused: None,
            installed: 0,
            remote_ready: None,
            watching: false,
        }
    }

    #[test]
    fn statuses_round_trip_with_seeder_s_strings() {
        for phase in [
            Phase::New,
            Phase::ConfigReady,
            Phase::NodesPatched,
            Phase::BootReady,
            Phase::Running,
        ] {
            assert_eq!(Phase::parse(Some(phase.as_str())), Some(phase));
        }
        assert_eq!(Phase::parse(None), Some(Phase::New));
        assert_eq!(Phase::BootReady.as_str(), "tinkConfigReady");
        assert_eq!(Phase::parse(Some("clusterBroken")), None);
    }

    #[test]
    fn a_new_cluster_takes_its_vip_then_its_token_then_is_config_ready() {
        let mut o = observed(Phase::New, &[]);
        o.vip = Vip::Blocked("waiting for address pool default/vip to be ready".into());
        let Outcome::Wait(hold) = step(&o) else {
            panic!()
        };
        assert_eq!(hold.reason, "WaitingForAddressPool");
        o.vip = Vip::Free;
        assert_eq!(step(&o), Outcome::AllocateVip);
        o.vip = Vip::Held("10.0.0.10".into());
        o.token = false;
        assert_eq!(step(&o), Outcome::CreateToken);
        o.token = true;
        assert_eq!(step(&o), Outcome::Advance(Phase::ConfigReady));
    }

    #[test]
    fn a_node_to_fix_holds_a_new_cluster_before_its_vip_is_taken() {
        let mut o = observed(Phase::New, &[Member::Missing]);
        o.vip = Vip::Free;
        assert!(matches!(step(&o), Outcome::Wait(h) if h.reason == "InventoryMissing"));
        // A node whose BMC has not answered yet does not: it is waited for later.
        let mut o = observed(Phase::New, &[Member::NotReady]);
        o.vip = Vip::Free;
        assert_eq!(step(&o), Outcome::AllocateVip);
    }

    #[test]
    fn a_cluster_setting_no_node_can_use_holds_it_before_anything_is_taken() {
        for phase in [Phase::New, Phase::ConfigReady] {
            let mut o = observed(phase, &[Member::Free]);
            o.vip = Vip::Free;
            o.settings_problem = Some(("ClusterInvalid", "the Cluster's spec.version ...".into()));
            assert!(
                matches!(step(&o), Outcome::Wait(h) if h.reason == "ClusterInvalid" && h.warning),
                "{phase:?}"
            );
        }
    }

    #[test]
    fn nodes_are_allocated_together_once_none_holds_the_cluster() {
        let o = observed(
            Phase::ConfigReady,
            &[Member::Free, Member::Allocated, Member::Free],
        );
        assert_eq!(step(&o), Outcome::AllocateNodes(vec![0, 2]));
        let o = observed(Phase::ConfigReady, &[Member::Allocated, Member::Allocated]);
        assert_eq!(step(&o), Outcome::Advance(Phase::NodesPatched));
    }

    #[test]
    fn a_problem_with_any_node_holds_allocation_and_names_the_field() {
        for (member, reason) in [
            (Member::Missing, "InventoryMissing"),
            (Member::NotReady, "WaitingForInventory"),
            (
                Member::Invalid {
                    field: "spec.primaryDisk",
                    fix: "set the install disk".into(),
                },
                "InventoryInvalid",
            ),
            (
                Member::Taken {
                    by: "default/other".into(),
                },
                "InventoryInAnotherCluster",
            ),
        ] {
            let o = observed(Phase::ConfigReady, &[Member::Free, member]);
            let Outcome::Wait(hold) = step(&o) else {
                panic!("{reason}")
            };
            assert_eq!(hold.reason, reason);
            assert!(hold.message.contains("spec.nodes[1]") || reason == "WaitingForInventory");
        }
    }

    #[test]
    fn installs_are_written_before_the_cluster_boots() {
        let mut o = observed(Phase::NodesPatched, &[Member::Allocated]);
        o.stale_installs = 1;
        assert_eq!(step(&o), Outcome::WriteInstalls);
        o.stale_installs = 0;
        assert_eq!(step(&o), Outcome::Advance(Phase::BootReady));
    }

    #[test]
    fn in_tinkerbell_mode_the_objects_are_written_after_the_installs_and_kept_current() {
        let mut o = observed(Phase::NodesPatched, &[Member::Allocated]);
        o.stale_installs = 1;
        o.stale_tink = 3;
        assert_eq!(step(&o), Outcome::WriteInstalls);
        o.stale_installs = 0;
        assert_eq!(step(&o), Outcome::WriteTinkerbell);
        o.phase = Some(Phase::Running);
        assert_eq!(
            step(&o),
            Outcome::WriteTinkerbell,
            "a changed rendering is written"
        );
        o.tink_blocked = Some("Service default/tink-stack does not exist".into());
        assert!(
            matches!(step(&o), Outcome::Wait(h) if h.reason == "WaitingForTinkerbell" && h.warning)
        );
    }

    #[test]
    fn the_cluster_runs_only_when_every_node_is_ready_in_it() {
        let mut o = observed(Phase::BootReady, &[Member::Allocated, Member::Allocated]);
        assert!(matches!(step(&o), Outcome::Wait(h) if h.reason == "Installing"));
        o.remote_ready = Some(1);
        assert!(matches!(step(&o), Outcome::Wait(_)));
        o.remote_ready = Some(2);
        assert_eq!(step(&o), Outcome::Advance(Phase::Running));
    }

    /// Once every node reported its install, unwatched Nodes of the new cluster are looked at
    /// every second (nothing else wakes the Cluster when the last Node registers), before that,
    /// or when watched, every 10 s.
    #[test]
    fn the_new_cluster_is_looked_at_often_once_every_node_reported_its_install() {
        let mut o = observed(Phase::BootReady, &[Member::Allocated, Member::Allocated]);
        o.installed = 1;
        o.remote_ready = Some(0);
        assert!(matches!(step(&o), Outcome::Wait(h) if h.retry == POLL));
        o.installed = 2;
        o.remote_ready = Some(1);
        assert!(matches!(step(&o), Outcome::Wait(h) if h.retry == FINISH_POLL));
        assert!(FINISH_POLL < POLL);
        o.watching = true;
        assert!(matches!(step(&o), Outcome::Wait(h) if h.retry == POLL));
    }

    #[test]
    fn a_node_appended_later_goes_back_to_allocation() {
        let o = observed(Phase::Running, &[Member::Allocated, Member::Free]);
        assert_eq!(step(&o), Outcome::Advance(Phase::ConfigReady));
        let o = observed(Phase::BootReady, &[Member::Allocated, Member::Free]);
        assert_eq!(step(&o), Outcome::Advance(Phase::ConfigReady));
    }

    #[test]
    fn stream_image_mode_without_tinkerbell_holds_the_cluster_before_it_takes_anything() {
        let mut o = observed(Phase::New, &[Member::Free]);
        o.vip = Vip::Free;
        o.config_refused = Some("spec.clusterConfig.streamImageMode: ...".into());
        assert!(
            matches!(step(&o), Outcome::Wait(h) if h.reason == "ClusterConfigUnsupported" && h.warning)
        );
    }

    #[test]
    fn an_unknown_status_is_held_with_the_fix() {
        let mut o = observed(Phase::New, &[]);
        o.phase = None;
        assert!(
            matches!(step(&o), Outcome::Wait(h) if h.warning && h.message.contains("clear it"))
        );
    }
}
