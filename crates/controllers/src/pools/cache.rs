//! The pools controllers' view of the cluster: one watch per kind, shared by both controllers'
//! triggers and by their reads, so a reconcile pass reads memory instead of the API server.
//!
//! A cache can lag behind a write this process just made. Two reads stay live on purpose: the
//! owning pool right before a server is created (see the Instance reconciler), and an OS-password
//! Secret the cache does not hold yet. The pool's Instance count is guarded by [`Expectations`].

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ingot_api::equinix::{Instance, InstancePool, POOL_LABEL};
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use super::credentials::SecretLocation;

/// Label on the Instances' OS-password Secrets, so that one narrow watch holds them all.
pub const PASSWORD_SECRET_LABEL: &str = "pools.ingot.dev/os-password";
/// Events a lagging subscriber may fall behind before the watch waits for it.
const FEED_BUFFER: usize = 1024;
/// How long an expectation is waited for before the cache is believed again (an object
/// created and deleted by someone else before the cache saw it must not wedge the pool).
const EXPECTATION_TTL: Duration = Duration::from_secs(300);

/// Read-only stores of what the pools controllers look at.
pub struct Caches {
    pub pools: Store<InstancePool>,
    pub instances: Store<Instance>,
    pub nodes: Store<Node>,
    /// The Equinix credentials Secret (watched by name).
    pub credentials: Store<Secret>,
    /// The Instances' OS-password Secrets (watched by [`PASSWORD_SECRET_LABEL`]).
    pub passwords: Store<Secret>,
    /// `kube-system/ingress-expose`, whose load-balancer address is the cluster VIP.
    pub ingress: Store<Service>,
    pub expectations: Expectations,
    writers: Mutex<Option<Writers>>,
}

struct Writers {
    pools: Writer<InstancePool>,
    instances: Writer<Instance>,
    nodes: Writer<Node>,
    credentials: Writer<Secret>,
    passwords: Writer<Secret>,
    ingress: Writer<Service>,
}

/// The change feeds the two controllers are triggered by, all from the watches above.
pub(crate) struct Feeds {
    pub pools: ReflectHandle<InstancePool>,
    pub instances_for_pools: ReflectHandle<Instance>,
    pub nodes_for_pools: ReflectHandle<Node>,
    pub instances: ReflectHandle<Instance>,
    pub nodes_for_instances: ReflectHandle<Node>,
}

impl Caches {
    pub fn new() -> Self {
        let (pools, pools_writer) = reflector::store_shared(FEED_BUFFER);
        let (instances, instances_writer) = reflector::store_shared(FEED_BUFFER);
        let (nodes, nodes_writer) = reflector::store_shared(FEED_BUFFER);
        let (credentials, credentials_writer) = reflector::store();
        let (passwords, passwords_writer) = reflector::store();
        let (ingress, ingress_writer) = reflector::store();
        Self {
            pools,
            instances,
            nodes,
            credentials,
            passwords,
            ingress,
            expectations: Expectations::default(),
            writers: Mutex::new(Some(Writers {
                pools: pools_writer,
                instances: instances_writer,
                nodes: nodes_writer,
                credentials: credentials_writer,
                passwords: passwords_writer,
                ingress: ingress_writer,
            })),
        }
    }

    /// Starts the watches (once) and returns the controllers' feeds; `None` if already started.
    /// The watches end with `shutdown`.
    pub(crate) fn start(
        &self,
        client: &Client,
        secret: &SecretLocation,
        shutdown: impl Future<Output = ()> + Send + Clone + 'static,
    ) -> Option<Feeds> {
        let writers = self.writers.lock().ok()?.take()?;
        let feeds = Feeds {
            pools: writers.pools.subscribe()?,
            instances_for_pools: writers.instances.subscribe()?,
            nodes_for_pools: writers.nodes.subscribe()?,
            instances: writers.instances.subscribe()?,
            nodes_for_instances: writers.nodes.subscribe()?,
        };
        let changes = || watcher::Config::default().any_semantic();
        spawn_watch(
            writers.pools,
            Api::all(client.clone()),
            changes(),
            shutdown.clone(),
        );
        spawn_watch(
            writers.instances,
            Api::all(client.clone()),
            changes(),
            shutdown.clone(),
        );
        spawn_watch(
            writers.nodes,
            Api::all(client.clone()),
            watcher::Config::default(),
            shutdown.clone(),
        );
        spawn_watch(
            writers.credentials,
            Api::namespaced(client.clone(), &secret.namespace),
            watcher::Config::default().fields(&format!("metadata.name={}", secret.name)),
            shutdown.clone(),
        );
        spawn_watch(
            writers.passwords,
            Api::namespaced(client.clone(), &secret.namespace),
            watcher::Config::default().labels(PASSWORD_SECRET_LABEL),
            shutdown.clone(),
        );
        spawn_watch(
            writers.ingress,
            Api::namespaced(client.clone(), "kube-system"),
            watcher::Config::default().fields("metadata.name=ingress-expose"),
            shutdown,
        );
        Some(feeds)
    }

    /// Waits until every store holds its first full list: a decision made on a half-filled
    /// cache could take a present Node for a missing one.
    pub async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pools.wait_until_ready().await?;
        self.instances.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.credentials.wait_until_ready().await?;
        self.passwords.wait_until_ready().await?;
        self.ingress.wait_until_ready().await
    }

    pub fn node(&self, name: &str) -> Option<std::sync::Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    pub fn pool(&self, name: &str) -> Option<std::sync::Arc<InstancePool>> {
        self.pools.get(&ObjectRef::new(name))
    }

    /// Every Instance labelled with this pool, deleting ones included.
    pub fn pool_instances(&self, pool: &str) -> Vec<Instance> {
        self.instances
            .state()
            .iter()
            .filter(|i| i.labels().get(POOL_LABEL).map(String::as_str) == Some(pool))
            .map(|i| Instance::clone(i))
            .collect()
    }
}

impl Default for Caches {
    fn default() -> Self {
        Self::new()
    }
}

/// Feeds one store from one watch until `shutdown`, re-listing with backoff after errors.
fn spawn_watch<K: crate::Watched>(
    writer: Writer<K>,
    api: Api<K>,
    config: watcher::Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    tokio::spawn(async move {
        tokio::select! {
            () = crate::feed_store(writer, api, config) => {}
            () = shutdown => {}
        }
    });
}

/// Instances this process created or deleted that the cache has not shown yet, per pool (the
/// ReplicaSet controller's expectations): until the cache has caught up, the pool does not
/// count from it, so a stale cache never creates a second Instance or removes a second member.
#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, Pending>>,
}

struct Pending {
    created: BTreeSet<String>,
    deleted: BTreeSet<String>,
    since: Instant,
}

impl Expectations {
    pub fn created(&self, pool: &str, instance: &str) {
        self.with(pool, |p| {
            p.created.insert(instance.to_owned());
        });
    }

    pub fn deleted(&self, pool: &str, instance: &str) {
        self.with(pool, |p| {
            p.deleted.insert(instance.to_owned());
        });
    }

    /// Whether the cache shows every create and delete of this pool made here. `members` is the
    /// pool's Instances as the cache holds them.
    pub fn met(&self, pool: &str, members: &[Instance]) -> bool {
        let Ok(mut pending) = self.pending.lock() else {
            return false;
        };
        let Some(entry) = pending.get_mut(pool) else {
            return true;
        };
        let seen = |name: &String| members.iter().find(|i| i.name_any() == *name);
        entry.created.retain(|name| seen(name).is_none());
        entry
            .deleted
            .retain(|name| seen(name).is_some_and(|i| i.metadata.deletion_timestamp.is_none()));
        let met = (entry.created.is_empty() && entry.deleted.is_empty())
            || entry.since.elapsed() > EXPECTATION_TTL;
        if met {
            pending.remove(pool);
        }
        met
    }

    fn with(&self, pool: &str, change: impl FnOnce(&mut Pending)) {
        if let Ok(mut pending) = self.pending.lock() {
            let entry = pending.entry(pool.to_owned()).or_insert_with(|| Pending {
                created: BTreeSet::new(),
                deleted: BTreeSet::new(),
                since: Instant::now(),
            });
            entry.since = Instant::now();
            change(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn instance(name: &str, deleting: bool) -> Instance {
        let mut instance = Instance::new(name, Default::default());
        if deleting {
            instance.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        }
        instance
    }

    #[test]
    fn a_create_is_expected_until_the_cache_shows_it() {
        let expectations = Expectations::default();
        assert!(expectations.met("p", &[]));
        expectations.created("p", "p-aaaaaaaa");
        assert!(!expectations.met("p", &[]));
        assert!(!expectations.met("p", &[instance("p-bbbbbbbb", false)]));
        assert!(expectations.met("p", &[instance("p-aaaaaaaa", false)]));
        // Met once, forgotten: the Instance going away later is the cache's to report.
        assert!(expectations.met("p", &[]));
    }

    #[test]
    fn a_delete_is_expected_until_the_cache_shows_it_deleting_or_gone() {
        let expectations = Expectations::default();
        expectations.deleted("p", "p-aaaaaaaa");
        assert!(!expectations.met("p", &[instance("p-aaaaaaaa", false)]));
        assert!(expectations.met("p", &[instance("p-aaaaaaaa", true)]));
        expectations.deleted("p", "p-aaaaaaaa");
        assert!(expectations.met("p", &[]));
    }

    #[test]
    fn pools_are_expected_apart() {
        let expectations = Expectations::default();
        expectations.created("a", "a-aaaaaaaa");
        assert!(expectations.met("b", &[]));
        assert!(!expectations.met("a", &[]));
    }
}
