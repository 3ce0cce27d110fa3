//! The Seeder controllers' reads of Machines, Jobs and Nodes, through the watch caches of the
//! Inventory controller.
//!
//! The Inventory controller watches the Machines of its namespace, the Jobs it labels and
//! every Node (their changes wake the Inventories they concern); each watch also fills a
//! store, written before the change wakes anyone, so a pass woken by a change finds that
//! change in the store. A pass reads an object from its store; one the store does not hold
//! (created a moment ago, or the store not listed yet) is read from the API server. A steady
//! fleet's passes therefore read nothing from the API server.
//!
//! The hardware poller is woken by its interval, not by Node changes, and what it writes on a
//! Node (its de-duplication state among the annotations) must be read back as written, or an
//! Event could be recorded twice: it takes a Node from the store only when the store shows the
//! Node's last write by the poller itself (its resourceVersion), else it reads the Node.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::FutureExt;
use ingot_api::rufio::{Job, Machine};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

/// The most Nodes whose last write by the poller is remembered (past it, the table starts
/// again from empty and the next poll of each Node reads it from the API server).
const MAX_NODE_WRITES: usize = 100_000;

/// The stores of the Inventory controller's watches.
pub(crate) struct Caches {
    pub machines: Store<Machine>,
    pub jobs: Store<Job>,
    pub nodes: Store<Node>,
    /// Every Inventory the controller watches (for [`super::bmc_owner`]).
    pub inventories: Store<ingot_api::seeder::Inventory>,
}

/// The resourceVersion of each Node as the hardware poller last wrote it.
#[derive(Default)]
pub(crate) struct NodeWrites(Mutex<HashMap<String, String>>);

impl NodeWrites {
    /// Records a copy of the Node known to include the poller's last write of it: the write's
    /// answer, or a read from the API server after it.
    pub fn known(&self, node: &Node) {
        let (Some(name), Some(version)) = (node.metadata.name.clone(), node.resource_version())
        else {
            return;
        };
        let mut writes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if writes.len() >= MAX_NODE_WRITES && !writes.contains_key(&name) {
            writes.clear();
        }
        writes.insert(name, version);
    }

    /// Whether this copy of the Node shows the poller's last write of it (or it wrote none).
    pub fn shows_last_write(&self, node: &Node) -> bool {
        let writes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        writes
            .get(&node.name_any())
            .is_none_or(|version| node.resource_version().as_ref() == Some(version))
    }

    pub fn forget(&self, node: &str) {
        let mut writes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        writes.remove(node);
    }
}

/// The object of `reference` from `store` once it holds its first list; `None` when it does
/// not hold it (or is not listed yet).
pub(crate) fn cached<K>(store: Option<&Store<K>>, reference: &ObjectRef<K>) -> Option<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let store = store?;
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|ready| ready.is_ok())
        .then(|| store.get(reference))
        .flatten()
        .map(|object| object.as_ref().clone())
}

/// `cached`, else the API server's copy (`None`: the object does not exist).
pub(crate) async fn read_through<K>(
    store: Option<&Store<K>>,
    api: &Api<K>,
    reference: &ObjectRef<K>,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + 'static,
{
    match cached(store, reference) {
        Some(object) => Ok(Some(object)),
        None => api.get_opt(&reference.name).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn node(name: &str, version: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "resourceVersion": version}}))
            .unwrap()
    }

    #[test]
    fn a_store_is_read_only_once_listed_and_only_for_what_it_holds() {
        let (store, mut writer) = reflector::store::<Node>();
        let n1 = ObjectRef::new("n1");
        assert!(cached(None, &n1).is_none());
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(node("n1", "5")));
        // Listing, not listed: an empty or partial store proves nothing.
        assert!(cached(Some(&store), &n1).is_none());
        writer.apply_watcher_event(&Event::InitDone);
        assert_eq!(
            cached(Some(&store), &n1).unwrap().resource_version(),
            Some("5".into())
        );
        assert!(cached(Some(&store), &ObjectRef::new("n2")).is_none());
    }

    #[test]
    fn a_node_copy_is_taken_only_if_it_shows_the_pollers_last_write() {
        let writes = NodeWrites::default();
        assert!(writes.shows_last_write(&node("n1", "5")));
        writes.known(&node("n1", "7"));
        assert!(!writes.shows_last_write(&node("n1", "5")));
        assert!(writes.shows_last_write(&node("n1", "7")));
        assert!(writes.shows_last_write(&node("n2", "1")));
        writes.forget("n1");
        assert!(writes.shows_last_write(&node("n1", "5")));
    }
}
