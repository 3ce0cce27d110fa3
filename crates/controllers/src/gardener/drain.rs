//! Evicting the pods of a drained Node, as upstream's drain does (`pkg/util/provider/drain`):
//! each pod is evicted through the eviction API; an eviction refused by a PodDisruptionBudget
//! is tried again every 20 s, at most `maxEvictRetries` times, and then the pod is deleted. A
//! budget that allows no disruption although all its pods are healthy ("misconfigured") is not
//! worked around this way: the drain fails and waits for the drain timeout, which forces it.
//!
//! Upstream counts the refusals inside one blocking drain call; ingot drains one pass per
//! reconcile, so the count lives in memory between passes ([`EvictionTracker`]). A restart
//! starts counting again, as a restarted upstream controller does; the drain timeout still
//! bounds the whole drain.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ingot_api::gardener::Machine;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams};
use kube::core::{Selector, SelectorExt};
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::{Error, GardenerContext};
use crate::cluster;

/// Between two evictions of a pod refused by a PodDisruptionBudget (upstream's
/// `PodEvictionRetryInterval`).
pub const EVICTION_RETRY: Duration = Duration::from_secs(20);

/// The evictions tried per pod before it is deleted instead: the Machine's
/// `spec.maxEvictRetries`, else `--machine-max-evict-retries`, capped at one per
/// [`EVICTION_RETRY`] of the drain timeout (upstream `drainNode`). A negative value counts as 0.
pub fn max_evict_retries(machine: &Machine, flag: u32, drain_timeout: Duration) -> u32 {
    let wanted = machine
        .spec
        .extra
        .get("maxEvictRetries")
        .and_then(Value::as_i64)
        .map_or(flag, |v| u32::try_from(v.max(0)).unwrap_or(u32::MAX));
    let by_timeout = drain_timeout.as_secs() / EVICTION_RETRY.as_secs();
    wanted.min(u32::try_from(by_timeout).unwrap_or(u32::MAX))
}

/// Refused evictions of one pod so far.
#[derive(Clone, Copy, Debug)]
pub struct Refusals {
    pub count: u32,
    pub last: Instant,
}

/// What this pass does with a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodAction {
    Evict,
    /// Refused less than [`EVICTION_RETRY`] ago: not yet.
    Wait(Duration),
    /// Evictions exhausted: delete with no grace period.
    Delete,
}

/// Upstream's loop per pod, one step at a time: evict; after a refusal wait 20 s; once
/// `max` evictions were refused (after the last wait), delete. The first step is always an
/// eviction, also with `max` 0 (a `maxEvictRetries: 0`, or a drain timeout under 20 s): a pod
/// whose budget lets it go leaves gracefully, and only a refused one is deleted, 20 s later.
/// Deleting every pod at once is the forced drain's, after the drain timeout or with the
/// `force-deletion` label, as upstream.
pub fn next_action(refusals: Option<Refusals>, max: u32, now: Instant) -> PodAction {
    let Some(refusals) = refusals else {
        return PodAction::Evict;
    };
    let since = now.saturating_duration_since(refusals.last);
    if since < EVICTION_RETRY {
        PodAction::Wait(EVICTION_RETRY - since)
    } else if refusals.count >= max {
        PodAction::Delete
    } else {
        PodAction::Evict
    }
}

/// Refused evictions per Node being drained, then per pod UID.
#[derive(Default)]
pub struct EvictionTracker {
    by_node: Mutex<HashMap<String, HashMap<String, Refusals>>>,
}

impl EvictionTracker {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, HashMap<String, Refusals>>) -> T) -> T {
        let mut map = self.by_node.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut map)
    }

    fn get(&self, node: &str, pod: &str) -> Option<Refusals> {
        self.with(|m| m.get(node).and_then(|pods| pods.get(pod)).copied())
    }

    fn refused(&self, node: &str, pod: &str, now: Instant) {
        self.with(|m| {
            let entry = m
                .entry(node.to_owned())
                .or_default()
                .entry(pod.to_owned())
                .or_insert(Refusals {
                    count: 0,
                    last: now,
                });
            entry.count += 1;
            entry.last = now;
        });
    }

    /// A pod whose refusals no longer count (its budget is misconfigured, or it is gone).
    fn reset(&self, node: &str, pod: &str) {
        self.with(|m| {
            if let Some(pods) = m.get_mut(node) {
                pods.remove(pod);
            }
        });
    }

    /// Keeps the counts of the pods still on the node only.
    fn retain(&self, node: &str, pods: &BTreeSet<String>) {
        self.with(|m| {
            if let Some(counts) = m.get_mut(node) {
                counts.retain(|uid, _| pods.contains(uid));
            }
        });
    }

    /// The drain of this node is over.
    pub fn forget(&self, node: &str) {
        self.with(|m| m.remove(node));
    }
}

/// The outcome of one pass over a node's pods.
#[derive(Debug, Default)]
pub struct Pass {
    /// Why pods are still on the node (refused evictions, misconfigured budgets).
    pub blocked: Vec<String>,
    /// When the earliest refused eviction may be tried again.
    pub next_retry: Option<Duration>,
}

/// One pass over the pods of `node` that [`must_leave`]: with `force` every one is deleted at
/// once, otherwise evicted (or deleted once its evictions are used up).
pub async fn pods(
    ctx: &GardenerContext,
    node: &str,
    force: bool,
    max_retries: u32,
) -> Result<Pass, Error> {
    let on_node: Vec<Pod> = cluster::drain::pods_on(ctx.target(), node)
        .await?
        .into_iter()
        .filter(must_leave)
        .collect();
    let uids: BTreeSet<String> = on_node.iter().filter_map(|p| p.uid()).collect();
    ctx.evictions.retain(node, &uids);
    let mut pass = Pass::default();
    for pod in &on_node {
        if force {
            delete_pod(ctx, pod).await?;
            continue;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let uid = pod.uid().unwrap_or_default();
        let refusals = ctx.evictions.get(node, &uid);
        match next_action(refusals, max_retries, Instant::now()) {
            PodAction::Delete => delete_pod(ctx, pod).await?,
            PodAction::Wait(left) => {
                let tries = refusals.map_or(0, |r| r.count);
                pass.blocked.push(refused(pod, tries, max_retries));
                pass.next_retry = Some(pass.next_retry.map_or(left, |n| n.min(left)));
            }
            PodAction::Evict => match evict(ctx, pod).await? {
                Eviction::Done => {}
                Eviction::Refused => {
                    ctx.evictions.refused(node, &uid, Instant::now());
                    let tries = refusals.map_or(0, |r| r.count) + 1;
                    pass.blocked.push(refused(pod, tries, max_retries));
                    pass.next_retry = Some(EVICTION_RETRY);
                }
                Eviction::Misconfigured(budget) => {
                    // Retrying cannot help and deleting would break the budget: the drain
                    // fails every pass until the drain timeout forces it (as upstream).
                    ctx.evictions.reset(node, &uid);
                    pass.blocked.push(format!(
                        "error while evicting pod {:?}: pod disruption budget {}/{budget} is misconfigured and requires zero voluntary evictions",
                        pod.name_any(),
                        pod.namespace().unwrap_or_default(),
                    ));
                }
            },
        }
    }
    Ok(pass)
}

/// Why a pod whose eviction was refused is still there.
fn refused(pod: &Pod, tries: u32, max: u32) -> String {
    format!(
        "{}: eviction refused by a PodDisruptionBudget ({tries} of {max} tries)",
        cluster::drain::pod_key(pod)
    )
}

/// The Gardener drain policy: whether a pod is evicted (or, forced, deleted) from the Node.
///
/// Skipped, as upstream MCM's drain skips them: DaemonSet pods (their controller puts them on
/// every Node, and they go with it) and mirror pods (the kubelet's static pods: the API cannot
/// evict them). Finished pods (`Succeeded`/`Failed`) are *not* skipped, unlike the pools'
/// drain (`pools::drain::must_leave`): MCM evicts them with the rest, and so does ingot in its
/// place, so that the drain leaves the same Node behind as the Go controller would (their
/// eviction is never refused, a budget counts only running pods). Refused evictions are
/// retried and then turned into deletions ([`next_action`]); the drain timeout forces it.
pub fn must_leave(pod: &Pod) -> bool {
    let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    !(daemon || mirror)
}

/// The answer to an eviction.
enum Eviction {
    /// Evicted, or already gone.
    Done,
    /// Refused by a PodDisruptionBudget (429): try again later.
    Refused,
    /// Refused by this misconfigured budget: trying again cannot help.
    Misconfigured(String),
}

async fn evict(ctx: &GardenerContext, pod: &Pod) -> Result<Eviction, Error> {
    Ok(
        match cluster::drain::evict(&ctx.clusters.target_evictions, pod).await? {
            cluster::drain::Eviction::Evicted | cluster::drain::Eviction::Gone => Eviction::Done,
            cluster::drain::Eviction::Refused => match misconfigured_budget(ctx, pod).await? {
                Some(budget) => Eviction::Misconfigured(budget),
                None => Eviction::Refused,
            },
        },
    )
}

/// Deleted with no grace period, as upstream's forced drain and exhausted evictions do.
async fn delete_pod(ctx: &GardenerContext, pod: &Pod) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.target().clone(), &pod.namespace().unwrap_or_default());
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The name of the pod's budget when it is misconfigured (upstream `isMisconfiguredPdb`).
async fn misconfigured_budget(ctx: &GardenerContext, pod: &Pod) -> Result<Option<String>, Error> {
    let budgets: Api<PodDisruptionBudget> =
        Api::namespaced(ctx.target().clone(), &pod.namespace().unwrap_or_default());
    let list = budgets.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .find(|b| selects(b, pod))
        .filter(|b| is_misconfigured(b))
        .map(ResourceExt::name_any))
}

/// The budget's selector matches the pod; an empty or invalid selector matches nothing (as
/// the PodDisruptionBudget lister has it).
fn selects(budget: &PodDisruptionBudget, pod: &Pod) -> bool {
    let Some(selector) = budget.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return false;
    };
    let empty = selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    !empty && Selector::try_from(selector).is_ok_and(|s| s.matches(pod.labels()))
}

/// Observed, with pods, all of them healthy, none being disrupted, and still no disruption
/// allowed: no eviction will ever pass.
pub fn is_misconfigured(budget: &PodDisruptionBudget) -> bool {
    let Some(status) = budget.status.as_ref() else {
        return false;
    };
    let observed = budget.metadata.generation == status.observed_generation;
    observed
        && status.expected_pods > 0
        && status.current_healthy >= status.expected_pods
        && status.disrupted_pods.as_ref().is_none_or(|d| d.is_empty())
        && status.disruptions_allowed == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(spec: Value) -> Machine {
        serde_json::from_value(
            json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn with_no_retries_a_pod_is_still_evicted_first_and_deleted_only_once_refused() {
        let t0 = Instant::now();
        assert_eq!(next_action(None, 0, t0), PodAction::Evict);
        let once = Refusals { count: 1, last: t0 };
        assert_eq!(
            next_action(Some(once), 0, t0 + Duration::from_secs(1)),
            PodAction::Wait(Duration::from_secs(19))
        );
        assert_eq!(
            next_action(Some(once), 0, t0 + EVICTION_RETRY),
            PodAction::Delete
        );
    }

    #[test]
    fn retries_are_capped_by_the_drain_timeout() {
        let plain = machine(json!({}));
        let hour = Duration::from_secs(3600);
        assert_eq!(
            max_evict_retries(&plain, 360, Duration::from_secs(7200)),
            360
        );
        assert_eq!(max_evict_retries(&plain, 360, hour), 180);
        assert_eq!(max_evict_retries(&plain, 1, hour), 1);
        assert_eq!(max_evict_retries(&plain, 360, Duration::from_secs(39)), 1);
        assert_eq!(max_evict_retries(&plain, 360, Duration::from_secs(19)), 0);
        let own = machine(json!({"maxEvictRetries": 3}));
        assert_eq!(max_evict_retries(&own, 360, hour), 3);
        let negative = machine(json!({"maxEvictRetries": -1}));
        assert_eq!(max_evict_retries(&negative, 360, hour), 0);
    }

    #[test]
    fn a_pod_is_evicted_max_times_20s_apart_then_deleted() {
        let t0 = Instant::now();
        assert_eq!(next_action(None, 2, t0), PodAction::Evict);
        let once = Refusals { count: 1, last: t0 };
        assert_eq!(
            next_action(Some(once), 2, t0 + Duration::from_secs(5)),
            PodAction::Wait(Duration::from_secs(15))
        );
        assert_eq!(
            next_action(Some(once), 2, t0 + EVICTION_RETRY),
            PodAction::Evict
        );
        let twice = Refusals { count: 2, last: t0 };
        assert_eq!(
            next_action(Some(twice), 2, t0 + Duration::from_secs(19)),
            PodAction::Wait(Duration::from_secs(1))
        );
        assert_eq!(
            next_action(Some(twice), 2, t0 + EVICTION_RETRY),
            PodAction::Delete
        );
    }

    #[test]
    fn daemonset_and_mirror_pods_stay_finished_pods_go_as_with_mcm() {
        let pod = |spec: Value| -> Pod { serde_json::from_value(spec).unwrap() };
        let daemon = pod(json!({"metadata": {"name": "d",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]}}));
        let mirror = pod(json!({"metadata": {"name": "m",
            "annotations": {"kubernetes.io/config.mirror": "x"}}}));
        let finished = pod(json!({"metadata": {"name": "f"}, "status": {"phase": "Succeeded"}}));
        let running = pod(json!({"metadata": {"name": "r"}, "status": {"phase": "Running"}}));
        assert!(!must_leave(&daemon));
        assert!(!must_leave(&mirror));
        assert!(
            must_leave(&finished),
            "unlike the pools' drain, a finished pod is evicted"
        );
        assert!(!crate::pools::drain::must_leave(&finished));
        assert!(must_leave(&running));
    }

    #[test]
    fn tracker_counts_per_node_and_forgets() {
        let tracker = EvictionTracker::default();
        let now = Instant::now();
        tracker.refused("n", "a", now);
        tracker.refused("n", "a", now);
        tracker.refused("n", "b", now);
        assert_eq!(tracker.get("n", "a").map(|r| r.count), Some(2));
        tracker.retain("n", &BTreeSet::from(["a".to_owned()]));
        assert!(tracker.get("n", "b").is_none());
        tracker.reset("n", "a");
        assert!(tracker.get("n", "a").is_none());
        tracker.refused("n", "a", now);
        tracker.forget("n");
        assert!(tracker.get("n", "a").is_none());
    }

    #[test]
    fn misconfigured_means_healthy_observed_and_no_disruption() {
        let budget = |generation: i64, status: Value| -> PodDisruptionBudget {
            serde_json::from_value(json!({"metadata": {"name": "b", "generation": generation},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}}, "status": status}))
            .unwrap()
        };
        let healthy = json!({"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1});
        assert!(is_misconfigured(&budget(1, healthy.clone())));
        assert!(!is_misconfigured(&budget(2, healthy)), "not observed yet");
        let one_down = json!({"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 1, "desiredHealthy": 2, "expectedPods": 2});
        assert!(!is_misconfigured(&budget(1, one_down)));
        let disrupted = json!({"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
            "disruptedPods": {"p": "2026-01-01T00:00:00Z"}});
        assert!(!is_misconfigured(&budget(1, disrupted)));
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p", "labels": {"app": "a"}}}))
                .unwrap();
        let other: Pod =
            serde_json::from_value(json!({"metadata": {"name": "q", "labels": {"app": "z"}}}))
                .unwrap();
        let b = budget(1, Value::Null);
        assert!(selects(&b, &pod));
        assert!(!selects(&b, &other));
        let everything: PodDisruptionBudget =
            serde_json::from_value(json!({"metadata": {"name": "e"}, "spec": {"selector": {}}}))
                .unwrap();
        assert!(
            !selects(&everything, &pod),
            "an empty selector selects nothing"
        );
    }
}
