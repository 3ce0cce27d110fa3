//! The Inventory side of provisioning: every Inventory that is not local, once its Cluster
//! allocated it. It observes, asks the pure step ([`phase::step`]) what next, and carries that
//! out ([`execute`]): the one install boot through the BMC, within the operator's budget of
//! concurrent installs; and, once its Cluster no longer wants it, the shutdown, then the
//! address freed and the allocation cleared.

pub mod execute;
pub mod phase;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use ingot_api::rufio::Job;
use ingot_api::seeder::{Cluster, Inventory};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::ObjectRef;

use super::{Error, ProvisioningContext, Stores};
use crate::runtime::{self, Backoff, ControllerRuntime};
use crate::seeder::conditions;
use crate::seeder::inventory::is_local;

const CONTROLLER: &str = "provisioning-inventory";

/// The changes that wake the Inventory controller.
pub struct Triggers<I, C, J> {
    pub inventories: I,
    /// The same Inventories again: an install that ends wakes those waiting for its slot.
    pub slots: I,
    pub clusters: C,
    pub jobs: J,
    /// Tinkerbell mode: the Inventories whose Workflow changed (Workflow `<name>` is
    /// Inventory `<name>`'s).
    pub workflows: Option<futures::channel::mpsc::Receiver<ObjectRef<Inventory>>>,
}

/// Installs booted but not yet seen as such in the store (their `bmcJobSubmitted` written
/// but not watched back yet), counted against the budget with those the store shows.
#[derive(Debug, Default)]
pub struct InFlight {
    pub(crate) submitted: BTreeSet<String>,
}

pub async fn run<I, C, J>(
    ctx: Arc<ProvisioningContext>,
    stores: Stores,
    triggers: Triggers<I, C, J>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) where
    I: Stream<Item = Arc<Inventory>> + Send + 'static,
    C: Stream<Item = Arc<Cluster>> + Send + 'static,
    J: Stream<Item = Arc<Job>> + Send + 'static,
{
    let members = stores.inventories.clone();
    let waiting = stores.inventories.clone();
    let controller =
        Controller::for_shared_stream(triggers.inventories, stores.inventories.clone())
            // A Cluster wakes the Inventories it owns or lists (booting, released, deleted).
            .watches_shared_stream(triggers.clusters, move |cluster| {
                owned_or_listed(&members.state(), &cluster)
            })
            .watches_shared_stream(triggers.slots, move |changed| {
                waiting_for_the_slot_of(&waiting.state(), &changed)
            })
            .watches_shared_stream(triggers.jobs, |job| {
                let inventory = job
                    .labels()
                    .get(ingot_api::seeder::JOB_INVENTORY_LABEL)?
                    .clone();
                Some(ObjectRef::new(&inventory).within(&job.namespace()?))
            })
            .with_config(Config::default().concurrency(64));
    let controller = match triggers.workflows {
        Some(workflows) => {
            let taken = ctx.metrics.provisioning.workflow_wakeups.clone();
            controller.reconcile_on(futures::StreamExt::inspect(workflows, move |_| {
                taken.inc();
            }))
        }
        None => controller,
    };
    let backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(120));
    let runtime = ControllerRuntime::new(CONTROLLER, ctx.metrics.clone(), backoff);
    runtime::run(controller, runtime, ctx, reconcile, shutdown).await;
}

/// When `changed` has ended its install (reported or timed out), the Inventories waiting for an
/// install slot: so they boot as soon as the budget allows, not at their next poll.
fn waiting_for_the_slot_of(
    inventories: &[Arc<Inventory>],
    changed: &Inventory,
) -> Vec<ObjectRef<Inventory>> {
    let ended = changed.status.as_ref().is_some_and(|s| {
        conditions::is_true(&s.conditions, execute::INSTALL_BOOT)
            && (conditions::is_true(&s.conditions, phase::HARVESTER_INSTALLED)
                || conditions::is_true(&s.conditions, phase::INSTALL_TIMED_OUT))
    });
    if !ended {
        return Vec::new();
    }
    inventories
        .iter()
        .filter(|i| {
            i.status.as_ref().is_some_and(|s| {
                conditions::is_true(&s.conditions, phase::WAITING_FOR_INSTALL_SLOT)
            })
        })
        .map(|i| ObjectRef::from(i.as_ref()))
        .collect()
}

fn owned_or_listed(inventories: &[Arc<Inventory>], cluster: &Cluster) -> Vec<ObjectRef<Inventory>> {
    let cluster_ns = cluster.namespace().unwrap_or_default();
    inventories
        .iter()
        .filter(|i| {
            let owned = i.status.as_ref().is_some_and(|s| {
                Some(&s.owner_cluster.name) == cluster.metadata.name.as_ref()
                    && s.owner_cluster.namespace == cluster_ns
            });
            let namespace = i.namespace().unwrap_or_default();
            owned
                || cluster.spec.nodes.iter().any(|n| {
                    n.inventory_reference.name == i.name_any()
                        && super::cluster::reference_namespace(
                            &n.inventory_reference.namespace,
                            cluster,
                        ) == namespace
                })
        })
        .map(|i| ObjectRef::from(i.as_ref()))
        .collect()
}

async fn reconcile(
    inventory: Arc<Inventory>,
    ctx: Arc<ProvisioningContext>,
) -> Result<Action, Error> {
    if is_local(&inventory) {
        return Ok(Action::await_change());
    }
    let stores = ctx.stores().ok_or(Error::NotStarted)?.clone();
    let observed = execute::observe(&inventory, &ctx, &stores).await?;
    let outcome = phase::step(&observed.state);
    execute::execute(&inventory, &ctx, &stores, &observed, outcome).await
}

#[cfg(test)]
mod tests {
    use super::execute::INSTALL_BOOT;
    use super::execute::tests::inventory;
    use super::phase::{HARVESTER_INSTALLED, INSTALL_TIMED_OUT, WAITING_FOR_INSTALL_SLOT};
    use super::*;

    #[test]
    fn an_install_that_ends_wakes_the_servers_waiting_for_its_slot() {
        let store = vec![
            inventory("waits", &[(WAITING_FOR_INSTALL_SLOT, "True")]),
            inventory("waited", &[(WAITING_FOR_INSTALL_SLOT, "False")]),
            inventory("installing", &[(INSTALL_BOOT, "True")]),
        ];
        let woken = |changed: &Inventory| -> Vec<String> {
            waiting_for_the_slot_of(&store, changed)
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        let reported = inventory(
            "a",
            &[(INSTALL_BOOT, "True"), (HARVESTER_INSTALLED, "True")],
        );
        assert_eq!(woken(&reported), vec!["waits"]);
        let timed_out = inventory("b", &[(INSTALL_BOOT, "True"), (INSTALL_TIMED_OUT, "True")]);
        assert_eq!(woken(&timed_out), vec!["waits"]);
        // Still installing, or never booted: no slot came free.
        assert!(woken(&store[2]).is_empty());
        assert!(woken(&inventory("c", &[])).is_empty());
    }
}
