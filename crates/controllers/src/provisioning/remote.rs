//! Whether the new cluster has its Nodes: `GET https://<VIP>:<port>/api/v1/nodes` with the
//! cluster's node-reader bootstrap token (`<id>.<secret>` from its token Secret), then a watch
//! of them.
//!
//! Seeder mints a `system:masters` client certificate from RKE2's server-bootstrap endpoint
//! with the join token (a cluster-admin credential). ingot asks for less: the create node's
//! install config writes a manifest into RKE2's auto-deploy directory that makes a bootstrap
//! token (which RKE2's API server accepts, as `rke2 token create` tokens) whose only rights
//! are to list and watch Nodes (`render::node_reader_manifest`). The token never leaves the
//! management cluster's Secret and the node's own config.
//!
//! The port is 6443, or the Cluster's `clusterPort.harvesterhci.io` label (Seeder's override).
//! The new cluster's CA is not known to ingot (RKE2 makes it on the first node), so the
//! server's certificate is not verified: someone on the path could only learn a token that
//! reads Nodes, and at worst hold or hasten `clusterRunning`.
//!
//! Each list is followed by a watch from the list's `resourceVersion` ([`NodeWatches`]): a
//! Node turning Ready wakes the Cluster at once instead of at its next poll. It wakes the
//! Cluster only when a Node's readiness changes, not on status heartbeats. It ends after
//! [`WATCH_SECONDS`], and the Cluster, woken, lists and follows again. A new cluster that
//! refuses the watch (a reader role made before it asked for `watch`) or drops it is polled,
//! and asked again after [`RETRY_AFTER`].

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::Stream;
use ingot_api::seeder::Cluster;
use k8s_openapi::List;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::ResourceExt;
use kube::core::WatchEvent;
use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::ProvisioningContext;
use super::cluster::observe::MemberView;
use super::install::{self, NODE_READER_ID_KEY, NODE_READER_SECRET_KEY};

/// Seeder's label overriding the new cluster's port.
pub const CLUSTER_PORT_LABEL: &str = "clusterPort.harvesterhci.io";
const DEFAULT_PORT: u16 = 6443;
/// The most of a Node list read from the new cluster.
const MAX_BODY: usize = 16 << 20;
/// The most of one watch event (one Node).
const MAX_EVENT: usize = 4 << 20;
/// The most Nodes a watch keeps the readiness of; a bigger cluster is polled.
const MAX_NODES: usize = 20_000;
/// At most this many new clusters' Nodes are watched at once; the others are polled.
pub const MAX_WATCHES: usize = 256;
/// How long one watch request lasts (the API server ends it).
pub const WATCH_SECONDS: u64 = 290;
/// A watch refused or dropped is not opened again for this long (the Cluster is polled).
pub const RETRY_AFTER: Duration = Duration::from_secs(60);
/// Wake-ups waiting for the Cluster controller; more are dropped (the poll stays).
const WAKE_QUEUE: usize = 1024;

/// Where the new cluster's API server is, and the node-reader token it takes.
#[derive(Clone)]
pub struct Endpoint {
    /// `https://<host>:<port>`.
    pub base: String,
    pub bearer: String,
}

impl std::fmt::Debug for Endpoint {
    // The token stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base", &self.base)
            .finish()
    }
}

/// The new cluster's endpoint: the Cluster's VIP and port, and its token Secret's node reader.
pub fn endpoint(cluster: &Cluster, token: &Secret) -> Option<Endpoint> {
    let vip = cluster.status.as_ref()?.cluster_address.clone()?;
    let port = cluster
        .labels()
        .get(CLUSTER_PORT_LABEL)
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or(DEFAULT_PORT);
    Some(Endpoint {
        base: format!("https://{}", host_port(&vip, port)),
        bearer: format!(
            "{}.{}",
            install::value(token, NODE_READER_ID_KEY)?,
            install::value(token, NODE_READER_SECRET_KEY)?
        ),
    })
}

/// The new cluster's Ready Nodes whose InternalIP is one of the nodes' addresses; `None` when
/// it does not answer (yet). The list is then followed by a watch ([`NodeWatches::follow`]).
pub async fn ready_nodes(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    token: &Secret,
    members: &[MemberView],
) -> Option<usize> {
    let endpoint = endpoint(cluster, token)?;
    let nodes = match list(&ctx.remote_http, &endpoint).await {
        Ok(nodes) => nodes,
        Err(why) => {
            debug!(cluster = %cluster.name_any(), %why, "the new cluster does not answer yet");
            return None;
        }
    };
    ctx.node_watches.follow(
        ObjectRef::from(cluster),
        &ctx.remote_http,
        &endpoint,
        &nodes,
    );
    let addresses: BTreeSet<String> = members
        .iter()
        .filter_map(|m| {
            m.inventory
                .as_ref()?
                .status
                .as_ref()?
                .pxe_boot_config
                .address
                .clone()
        })
        .collect();
    Some(
        nodes
            .items
            .iter()
            .filter(|n| ready(n) && internal_ips(n).any(|ip| addresses.contains(ip)))
            .count(),
    )
}

fn host_port(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// `GET /api/v1/nodes` of the new cluster.
pub async fn list(http: &reqwest::Client, endpoint: &Endpoint) -> Result<List<Node>, String> {
    let mut response = http
        .get(format!("{}/api/v1/nodes", endpoint.base))
        .bearer_auth(&endpoint.bearer)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| e.without_url().to_string())?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("a Node list over {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn internal_ips(node: &Node) -> impl Iterator<Item = &String> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| &a.address)
}

/// Whether a Node can count for `clusterRunning`: Ready, with an InternalIP.
fn counts(node: &Node) -> bool {
    ready(node) && internal_ips(node).next().is_some()
}

/// The watches of new clusters' Nodes, at most one per Cluster, and the wake-ups they send
/// to the Cluster controller.
pub struct NodeWatches {
    watches: Arc<Mutex<HashMap<String, Watch>>>,
    wake: mpsc::Sender<ObjectRef<Cluster>>,
    wakes: Mutex<Option<mpsc::Receiver<ObjectRef<Cluster>>>>,
    next_id: AtomicU64,
    /// Wake-ups taken by the Cluster controller (`ingot_provisioning_new_cluster_wakeups_total`).
    taken: Counter,
}

enum Watch {
    /// A task follows the Nodes (its id: a task ending removes only its own entry).
    Following(u64, tokio::task::AbortHandle),
    /// Refused or dropped then: polled until [`RETRY_AFTER`] after.
    Failed(Instant),
}

impl Default for NodeWatches {
    fn default() -> Self {
        Self::new(Counter::default())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl NodeWatches {
    /// Counting in `taken` the wake-ups the Cluster controller takes.
    pub fn new(taken: Counter) -> Self {
        let (wake, wakes) = mpsc::channel(WAKE_QUEUE);
        NodeWatches {
            watches: Arc::default(),
            wake,
            wakes: Mutex::new(Some(wakes)),
            next_id: AtomicU64::new(0),
            taken,
        }
    }

    /// The Clusters to reconcile because a Node of their new cluster changed readiness or the
    /// watch ended (the first caller gets them; later ones an empty stream).
    pub fn wakes(&self) -> impl Stream<Item = ObjectRef<Cluster>> + Send + 'static {
        let receiver = lock(&self.wakes).take();
        let taken = self.taken.clone();
        futures::stream::unfold(receiver, move |receiver| {
            let taken = taken.clone();
            async move {
                let mut receiver = receiver?;
                let cluster = receiver.recv().await?;
                taken.inc();
                Some((cluster, Some(receiver)))
            }
        })
    }

    /// Whether the Cluster's new cluster's Nodes are being watched.
    pub fn following(&self, cluster: &ObjectRef<Cluster>) -> bool {
        matches!(
            lock(&self.watches).get(&cluster.to_string()),
            Some(Watch::Following(..))
        )
    }

    /// Watches the new cluster's Nodes from `listed` (its `resourceVersion` and which Nodes
    /// count), unless they are watched already, a watch failed within [`RETRY_AFTER`], or
    /// [`MAX_WATCHES`] are open.
    pub fn follow(
        &self,
        cluster: ObjectRef<Cluster>,
        http: &reqwest::Client,
        endpoint: &Endpoint,
        listed: &List<Node>,
    ) {
        let key = cluster.to_string();
        let mut watches = lock(&self.watches);
        match watches.get(&key) {
            Some(Watch::Following(..)) => return,
            Some(Watch::Failed(at)) if at.elapsed() < RETRY_AFTER => return,
            _ => {}
        }
        let open = watches
            .values()
            .filter(|w| matches!(w, Watch::Following(..)))
            .count();
        if open >= MAX_WATCHES || listed.items.len() > MAX_NODES {
            return;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let follower = Follower {
            http: http.clone(),
            endpoint: endpoint.clone(),
            version: listed.metadata.resource_version.clone(),
            counted: listed
                .items
                .iter()
                .map(|n| (n.name_any(), counts(n)))
                .collect(),
            cluster,
            wake: self.wake.clone(),
        };
        let all = self.watches.clone();
        let own = key.clone();
        let (wake, woken) = (self.wake.clone(), follower.cluster.clone());
        // Spawned under the lock: the task's own bookkeeping waits for its entry.
        debug!(cluster = %key, "watching the new cluster's Nodes");
        let task = tokio::spawn(async move {
            let ended = follower.run().await;
            {
                let mut watches = lock(&all);
                if matches!(watches.get(&own), Some(Watch::Following(i, _)) if *i == id) {
                    match &ended {
                        Ended::Expired => watches.remove(&own),
                        Ended::Failed(why) => {
                            info!(cluster = %own, %why, "the new cluster's Nodes are polled, not watched");
                            watches.insert(own.clone(), Watch::Failed(Instant::now()))
                        }
                    };
                }
            }
            // Woken once the entry is gone, so that its list is followed again.
            if let Ended::Expired = ended {
                let _ = wake.try_send(woken);
            }
        });
        watches.insert(key, Watch::Following(id, task.abort_handle()));
    }

    /// Stops watching the Cluster's new cluster (it runs, or is deleted).
    pub fn stop(&self, cluster: &ObjectRef<Cluster>) {
        if let Some(Watch::Following(_, task)) = lock(&self.watches).remove(&cluster.to_string()) {
            task.abort();
        }
    }
}

/// How a watch ended.
enum Ended {
    /// The API server ended it, or asked for a new list: the Cluster lists and follows again.
    Expired,
    /// Refused, dropped, or not understood: the Cluster is polled for a while.
    Failed(String),
}

/// One watch of a new cluster's Nodes.
struct Follower {
    http: reqwest::Client,
    endpoint: Endpoint,
    version: Option<String>,
    /// Each Node's name, and whether it counts ([`counts`]).
    counted: HashMap<String, bool>,
    cluster: ObjectRef<Cluster>,
    wake: mpsc::Sender<ObjectRef<Cluster>>,
}

impl Follower {
    async fn run(mut self) -> Ended {
        let mut query = vec![
            ("watch", "true".to_owned()),
            ("timeoutSeconds", WATCH_SECONDS.to_string()),
        ];
        if let Some(version) = &self.version {
            query.push(("resourceVersion", version.clone()));
        }
        let response = self
            .http
            .get(format!("{}/api/v1/nodes", self.endpoint.base))
            .query(&query)
            .bearer_auth(&self.endpoint.bearer)
            .timeout(Duration::from_secs(WATCH_SECONDS + 30))
            .send()
            .await;
        let mut response = match response {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => return Ended::Failed(format!("HTTP {}", r.status())),
            Err(e) => return Ended::Failed(e.without_url().to_string()),
        };
        let mut buffer: Vec<u8> = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => buffer.extend_from_slice(&chunk),
                Ok(None) => return Ended::Expired,
                Err(e) => return Ended::Failed(e.without_url().to_string()),
            }
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if let Some(ended) = self.seen(&line) {
                    return ended;
                }
            }
            if buffer.len() > MAX_EVENT {
                return Ended::Failed(format!("a watch event over {MAX_EVENT} bytes"));
            }
        }
    }

    /// One event: the Cluster woken when a Node starts or stops counting; `Some` ends the
    /// watch.
    fn seen(&mut self, line: &[u8]) -> Option<Ended> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let changed = match serde_json::from_slice::<WatchEvent<Node>>(line) {
            Ok(WatchEvent::Added(node) | WatchEvent::Modified(node)) => {
                let now = counts(&node);
                self.counted.insert(node.name_any(), now).unwrap_or(false) != now
            }
            Ok(WatchEvent::Deleted(node)) => self.counted.remove(&node.name_any()) == Some(true),
            Ok(WatchEvent::Bookmark(_)) => false,
            // 410 Gone: the version is too old, list again; any other: polled for a while.
            Ok(WatchEvent::Error(e)) if e.code == 410 => return Some(Ended::Expired),
            Ok(WatchEvent::Error(e)) => return Some(Ended::Failed(format!("a watch error: {e}"))),
            Err(e) => return Some(Ended::Failed(format!("a watch event: {e}"))),
        };
        if self.counted.len() > MAX_NODES {
            return Some(Ended::Failed(format!("over {MAX_NODES} Nodes")));
        }
        if changed {
            debug!(cluster = %self.cluster, "a Node of the new cluster changed readiness");
            match self.wake.try_send(self.cluster.clone()) {
                // The poll stays: a wake-up dropped only comes later.
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return Some(Ended::Failed("the controller stopped".to_owned()));
                }
            }
        }
        None
    }
}
