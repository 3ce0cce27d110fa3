//! What ingot's boot server (`ingot run --boot-addr`) answers, read from provisioning's stores:
//!
//! - `GET /boot/<mac>`: the iPXE script of the Inventory whose
//!   `spec.managementInterfaceMacAddress` is `<mac>`, while it is allocated, its script is
//!   written and its installer has not reported; otherwise a script that exits, so the
//!   firmware boots the next device (the disk). A MAC no Inventory has: 404 (with the same
//!   script). A site's DHCP points iPXE here; this is the only line it needs.
//!   An Inventory claimed by [`crate::onprem`] (a pool's server, not a Cluster's) is answered,
//!   while its claim holds and its release has not confirmed it off, with a chain to the iPXE
//!   script URL its claim recorded ([`claimed_script`]).
//! - `GET /config/<namespace>/<name>`: the node's Harvester install config, only to the
//!   node's own address (the one its kernel's `ip=` gives it), as Hegel hands out user data by
//!   source address; `--boot-allow-source` adds sources (a NAT or relay in between).
//! - `GET /nocloud/<namespace>/<name>/{meta-data,user-data,vendor-data}`: the cloud-init data
//!   of a Gardener machine's claimed server (`crate::onprem::image`), to its own address only.
//! - `GET /media/<namespace>/<name>.iso`: with `--boot-media-dir`, the boot CD of a Cluster's
//!   node or a claimed server being installed ([`super::media`]), for virtual media.
//! - `PUT /disable/<namespace>/<name>`: the installer's SUCCEEDED webhook (Seeder's path),
//!   from the same sources: the node stops being offered the installer, so its next boot is
//!   from its disk.
//! - `PUT /wiped/<namespace>/<name>`: a released claim's wipe image reporting its wipe
//!   ([`crate::onprem::wipe`]), from the same sources; until then `GET /boot/<mac>` hands
//!   that server its wipe script.
//!
//! With `--provisioning-boot tinkerbell`, Smee and Hegel serve the boot: the first two answer
//! every request as they answer an unknown MAC or node (404), and only the webhook is served.

//!
//! Every replica answers (a standby too): the service keeps its own watches of Inventories and
//! of provisioning's Secrets, apart from the controllers' (which run on the leader only). A
//! request waits (up to [`SYNC_WAIT`]) for their first lists: the stores of a process just
//! started are empty, and an answer from them would send a server being installed to its disk
//! or refuse its installer's webhook. After that wait: 503.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::seeder::Inventory;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::install::{self, ADDRESS_KEY, CONFIG_KEY, SCRIPT_KEY};
use super::media::{MediaFiles, NodeBoot, node_iso};
use super::node::phase::HARVESTER_INSTALLED;
use super::{Error, SECRET_LABEL};
use crate::Metrics;
use crate::runtime::EventRecorder;
use crate::seeder::conditions;
use crate::seeder::inventory::is_local;

/// The script for a server that must boot from its disk.
pub const BOOT_FROM_DISK: &str =
    "#!ipxe\n# no install for this server: boot the next device\nexit\n";

/// The longest recorded script URL a claimed server is chained to (longer: boots its disk).
pub const MAX_CHAIN_URL: usize = 2048;

/// How long a request waits for the service's first lists.
pub const SYNC_WAIT: Duration = Duration::from_secs(10);

/// The answer to `GET /boot/<mac>`.
#[derive(Debug, PartialEq)]
pub enum Script {
    Install(String),
    /// Known, not to be installed now.
    Disk,
    /// No Inventory has this MAC.
    Unknown,
    /// The watches have not listed yet (see [`SYNC_WAIT`]).
    Unavailable,
}

/// The answer to the config and webhook requests.
#[derive(Debug, PartialEq)]
pub enum Answer<T> {
    Ok(T),
    /// Not from the node's address (nor an allowed source).
    Forbidden,
    /// No such allocated node.
    NotFound,
    /// The watches have not listed yet (see [`SYNC_WAIT`]).
    Unavailable,
}

/// A MAC in the one spelling compared: lower case, colons.
pub fn normal_mac(mac: &str) -> String {
    mac.trim().to_ascii_lowercase().replace('-', ":")
}

/// The boot server's side of provisioning: what it reads, and the one write it makes.
pub struct BootService {
    client: Client,
    metrics: Arc<Metrics>,
    events: EventRecorder,
    inventories: Store<Inventory>,
    secrets: Store<Secret>,
    /// Sources allowed besides a node's own address (`--boot-allow-source`).
    allowed: Vec<ipnet::IpNet>,
    crash_point: Option<String>,
    tinkerbell: bool,
    boot_url: Option<url::Url>,
    media: Option<Arc<MediaFiles>>,
}

/// What [`BootService::new`] needs.
pub struct BootSettings {
    pub namespace: Option<String>,
    pub allowed_sources: Vec<ipnet::IpNet>,
    pub crash_point: Option<String>,
    /// Tinkerbell mode: no script or config is served (Smee and Hegel serve them), and the
    /// webhook also turns network boot off on the node's Hardware.
    pub tinkerbell: bool,
    /// Where servers reach this server (`--boot-url`): the boot CDs chain to its `/boot/<mac>`.
    pub boot_url: Option<url::Url>,
    /// The boot CDs' programs (`--boot-media-dir`); `None`: no CD is served.
    pub media: Option<Arc<MediaFiles>>,
}

impl BootService {
    /// The service and the watch that fills its stores (poll it for as long as it serves).
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        identity: String,
        settings: BootSettings,
    ) -> (
        Arc<Self>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        use kube::runtime::reflector;
        use kube::runtime::watcher::Config;
        let (inventories, inventory_writer) = reflector::store();
        let (secrets, secret_writer) = reflector::store();
        let namespace = settings.namespace.as_deref();
        let feed = {
            let inventory_api = crate::api_in::<Inventory>(&client, namespace);
            let secret_api = crate::api_in::<Secret>(&client, namespace);
            async move {
                tokio::join!(
                    crate::feed_store(inventory_writer, inventory_api, Config::default()),
                    crate::feed_store(
                        secret_writer,
                        secret_api,
                        Config::default().labels(SECRET_LABEL)
                    ),
                );
            }
        };
        let service = BootService {
            events: EventRecorder::new(client.clone(), "ingot-provisioning", Some(identity)),
            client,
            metrics,
            inventories,
            secrets,
            allowed: settings.allowed_sources,
            crash_point: settings.crash_point,
            tinkerbell: settings.tinkerbell,
            boot_url: settings.boot_url,
            media: settings.media,
        };
        (Arc::new(service), feed)
    }

    /// Whether both watches have listed once, waiting at most `within`.
    async fn synced(&self, within: Duration) -> bool {
        let both = async {
            self.inventories.wait_until_ready().await.is_ok()
                && self.secrets.wait_until_ready().await.is_ok()
        };
        tokio::time::timeout(within, both).await.unwrap_or(false)
    }

    fn by_mac(&self, mac: &str) -> Option<Arc<Inventory>> {
        let mac = normal_mac(mac);
        self.inventories.state().into_iter().find(|i| {
            !is_local(i)
                && i.spec
                    .management_interface_mac_address
                    .as_deref()
                    .is_some_and(|m| normal_mac(m) == mac)
        })
    }

    /// An Inventory being installed: allocated to a Cluster, or claimed for a pool.
    fn inventory(&self, namespace: &str, name: &str) -> Option<Arc<Inventory>> {
        self.inventories
            .get(&ObjectRef::new(name).within(namespace))
            .filter(|i| allocated(i) || claim_active(i))
    }

    /// The Secret with the node's script, config and address: provisioning's for a Cluster's
    /// node, the claim's for a pool's.
    fn node_secret(&self, inventory: &Inventory) -> Option<Arc<Secret>> {
        let namespace = inventory.namespace().unwrap_or_default();
        let name = if allocated(inventory) {
            install::install_secret_name(&inventory.name_any())
        } else {
            crate::onprem::install::install_secret_name(&inventory.name_any())
        };
        self.secrets.get(&ObjectRef::new(&name).within(&namespace))
    }

    /// `GET /boot/<mac>`.
    pub async fn script(&self, mac: &str) -> Script {
        if self.tinkerbell {
            // Smee serves the script.
            return Script::Unknown;
        }
        if !self.synced(SYNC_WAIT).await {
            return Script::Unavailable;
        }
        let Some(inventory) = self.by_mac(mac) else {
            return Script::Unknown;
        };
        if !allocated(&inventory) {
            return self.claimed(&inventory);
        }
        if installed(&inventory) {
            return Script::Disk;
        }
        self.node_secret(&inventory)
            .and_then(|s| install::value(&s, SCRIPT_KEY).map(str::to_owned))
            // Stream-image mode has no install script.
            .filter(|script| !script.is_empty())
            .map_or(Script::Disk, Script::Install)
    }

    /// Whether `source` may ask for this node's config or report its install.
    fn sent_by_node(&self, secret: &Secret, source: IpAddr) -> bool {
        let own = install::value(secret, ADDRESS_KEY).and_then(|a| a.parse::<IpAddr>().ok());
        own == Some(source) || self.allowed.iter().any(|net| net.contains(&source))
    }

    /// `GET /config/<namespace>/<name>`.
    pub async fn config(&self, namespace: &str, name: &str, source: IpAddr) -> Answer<String> {
        if self.tinkerbell {
            // Hegel serves the config.
            return Answer::NotFound;
        }
        if !self.synced(SYNC_WAIT).await {
            return Answer::Unavailable;
        }
        let Some(secret) = self
            .inventory(namespace, name)
            .and_then(|i| self.node_secret(&i))
        else {
            return Answer::NotFound;
        };
        if !self.sent_by_node(&secret, source) {
            return Answer::Forbidden;
        }
        install::value(&secret, CONFIG_KEY)
            // A machine's image has no install config.
            .filter(|c| !c.is_empty())
            .map_or(Answer::NotFound, |c| Answer::Ok(c.to_owned()))
    }

    /// `GET /media/<namespace>/<name>.iso`: the boot CD of a node of a Cluster being installed
    /// (allocated, its installer not reported), or of a claimed server, for a BMC to insert as
    /// virtual media. It holds
    /// no secret (the node's address, MAC and the boot server's URL), so any source may fetch
    /// it. NotFound without `--boot-media-dir` and `--boot-url`.
    pub async fn media(&self, namespace: &str, file: &str) -> Answer<Vec<u8>> {
        let (Some(files), Some(boot_url)) = (&self.media, &self.boot_url) else {
            return Answer::NotFound;
        };
        if self.tinkerbell {
            return Answer::NotFound;
        }
        let Some(name) = file.strip_suffix(".iso") else {
            return Answer::NotFound;
        };
        if !self.synced(SYNC_WAIT).await {
            return Answer::Unavailable;
        }
        let Some(inventory) = self.inventory(namespace, name) else {
            return Answer::NotFound;
        };
        let Some((address, netmask, gateway)) = self.media_address(&inventory) else {
            return Answer::NotFound;
        };
        let mac = inventory
            .spec
            .management_interface_mac_address
            .as_deref()
            .map(normal_mac)
            .unwrap_or_default();
        let Ok(script_url) = boot_url.join(&format!("boot/{mac}")) else {
            return Answer::NotFound;
        };
        let key = format!("{namespace}/{name}");
        let node = NodeBoot {
            inventory: &key,
            mac: &mac,
            address: &address,
            netmask: &netmask,
            gateway: &gateway,
            script_url: &script_url,
        };
        node_iso(files, &node).map_or(Answer::NotFound, Answer::Ok)
    }

    /// The address, netmask and gateway a boot CD sets, while the server may boot it: a
    /// Cluster's node allocated and not installed (its status), or a claimed server not being
    /// released (its claim's install Secret). A claim's CD is served before its boot is
    /// recorded, since the BMC fetches it as the boot runs; what the CD boots is decided by
    /// `GET /boot/<mac>`.
    fn media_address(&self, inventory: &Inventory) -> Option<(String, String, String)> {
        if allocated(inventory) {
            if installed(inventory) {
                return None;
            }
            let config = inventory.status.as_ref()?.pxe_boot_config.clone();
            return Some((config.address?, config.netmask?, config.gateway?));
        }
        if !claim_active(inventory) {
            return None;
        }
        let secret = self.node_secret(inventory)?;
        let value = |key: &str| install::value(&secret, key).map(str::to_owned);
        use crate::onprem::install::{GATEWAY_KEY, NETMASK_KEY};
        Some((
            value(ADDRESS_KEY)?,
            value(NETMASK_KEY)?,
            value(GATEWAY_KEY)?,
        ))
    }

    /// `GET /nocloud/<namespace>/<name>/<file>`: a Gardener machine's cloud-init NoCloud data
    /// (`meta-data`, `user-data`; `vendor-data` is empty), only to its server's own address,
    /// while its claim holds.
    pub async fn nocloud(
        &self,
        namespace: &str,
        name: &str,
        file: &str,
        source: IpAddr,
    ) -> Answer<String> {
        use crate::onprem::image::{META_DATA_KEY, USER_DATA_KEY};
        if self.tinkerbell {
            return Answer::NotFound;
        }
        if !self.synced(SYNC_WAIT).await {
            return Answer::Unavailable;
        }
        let Some(secret) = self
            .inventory(namespace, name)
            .filter(|i| !allocated(i))
            .and_then(|i| self.node_secret(&i))
        else {
            return Answer::NotFound;
        };
        if install::value(&secret, USER_DATA_KEY).is_none() {
            // A pool's install: no cloud-init data.
            return Answer::NotFound;
        }
        if !self.sent_by_node(&secret, source) {
            return Answer::Forbidden;
        }
        match file {
            "meta-data" | "user-data" => {
                let key = if file == "meta-data" {
                    META_DATA_KEY
                } else {
                    USER_DATA_KEY
                };
                install::value(&secret, key).map_or(Answer::NotFound, |v| Answer::Ok(v.to_owned()))
            }
            "vendor-data" => Answer::Ok(String::new()),
            _ => Answer::NotFound,
        }
    }

    /// `PUT /disable/<namespace>/<name>`: `harvesterInstalled` on the Inventory (a repeat
    /// changes nothing). A write that loses a race is read again and retried, a few times: the
    /// installer calls once.
    pub async fn succeeded(
        &self,
        namespace: &str,
        name: &str,
        source: IpAddr,
    ) -> Result<Answer<()>, Error> {
        if !self.synced(SYNC_WAIT).await {
            return Ok(Answer::Unavailable);
        }
        let Some(inventory) = self.inventory(namespace, name) else {
            return Ok(Answer::NotFound);
        };
        let Some(secret) = self.node_secret(&inventory) else {
            return Ok(Answer::NotFound);
        };
        if !self.sent_by_node(&secret, source) {
            return Ok(Answer::Forbidden);
        }
        if !allocated(&inventory) {
            return self.record_claim_install(&inventory).await;
        }
        if self.tinkerbell {
            // Seeder's endpoint: Smee no longer hands the server the installer.
            super::tinkerbell::disable_netboot(&self.client, namespace, name, false).await?;
        }
        let api: Api<Inventory> = Api::namespaced(self.client.clone(), namespace);
        let mut current = (*inventory).clone();
        for attempt in 0..5 {
            if installed(&current) {
                return Ok(Answer::Ok(()));
            }
            match self.mark_installed(&api, &current).await {
                Ok(()) => break,
                Err(e) if crate::runtime::is_conflict(&e) && attempt < 4 => {
                    match api.get_opt(name).await? {
                        Some(fresh) if allocated(&fresh) => current = fresh,
                        _ => return Ok(Answer::NotFound),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        crate::crash_point(self.crash_point.as_deref(), "provisioning-after-webhook");
        self.metrics.provisioning_installed();
        self.events
            .publish(&current, EventType::Normal, "Installed", "Provision", "the Harvester installer reported SUCCEEDED: the server boots from its disk from now on")
            .await;
        Ok(Answer::Ok(()))
    }

    /// `PUT /wiped/<namespace>/<name>`: the wipe of a released claim reported, recorded on the
    /// Inventory ([`crate::onprem::wipe::WIPED_ANNOTATION`]: the wipe boot's Job), so its
    /// release goes on. Only while that wipe runs, and from the server's own address (or an
    /// allowed source); a repeat changes nothing.
    pub async fn wiped(
        &self,
        namespace: &str,
        name: &str,
        source: IpAddr,
    ) -> Result<Answer<()>, Error> {
        use crate::onprem::wipe::{WIPED_ANNOTATION, wiped, wiping};
        if !self.synced(SYNC_WAIT).await {
            return Ok(Answer::Unavailable);
        }
        let Some(inventory) = self.inventory(namespace, name) else {
            return Ok(Answer::NotFound);
        };
        let Some(secret) = self.node_secret(&inventory) else {
            return Ok(Answer::NotFound);
        };
        if !self.sent_by_node(&secret, source) {
            return Ok(Answer::Forbidden);
        }
        self.record_report(
            &inventory,
            WIPED_ANNOTATION,
            |i| wiping(i).map(str::to_owned),
            wiped,
            |_| {
                "the wipe image reported: the server's disks are erased, and its release goes on"
                    .to_owned()
            },
            "Wiped",
        )
        .await
    }

    /// A claimed server's script: the install its claim wrote while that boot's install has not
    /// reported, else the chain its claim recorded (a URL the owner gave), else its disk.
    fn claimed(&self, inventory: &Inventory) -> Script {
        use crate::onprem::wipe::{WIPE_SCRIPT_KEY, wiping};
        if wiping(inventory).is_some() {
            // Being wiped: the wipe image, or, without its script, nothing (never the install).
            return self
                .node_secret(inventory)
                .and_then(|s| install::value(&s, WIPE_SCRIPT_KEY).map(str::to_owned))
                .filter(|script| !script.is_empty())
                .map_or(Script::Disk, Script::Install);
        }
        if claim_installing(inventory).is_some()
            && let Some(script) = self
                .node_secret(inventory)
                .and_then(|s| install::value(&s, SCRIPT_KEY).map(str::to_owned))
                .filter(|script| !script.is_empty())
        {
            return Script::Install(script);
        }
        if claim_installed(inventory) {
            return Script::Disk;
        }
        claimed_script(inventory).map_or(Script::Disk, Script::Install)
    }

    /// The webhook of a claimed server: the boot whose install reported is recorded on the
    /// Inventory (`onprem.ingot.dev/installed`), so its next boots are from its disk until
    /// the claim sends another install boot. A write that loses a race is read again and
    /// retried, a few times: the installer calls once.
    async fn record_claim_install(&self, inventory: &Inventory) -> Result<Answer<()>, Error> {
        use crate::onprem::cloud::INSTALLED_ANNOTATION;
        self.record_report(
            inventory,
            INSTALLED_ANNOTATION,
            claim_installing,
            claim_installed,
            |boot| format!("the Harvester installer of install boot {boot} reported SUCCEEDED: the server boots from its disk until it is installed again"),
            "Installed",
        )
        .await
    }

    /// A server's report recorded as one annotation of its Inventory, under the
    /// `resourceVersion` read: `pending` gives the value while the report is awaited, `done`
    /// says whether it was recorded already (a repeat). A write that loses a race is read
    /// again and retried, a few times: the server reports once.
    async fn record_report(
        &self,
        inventory: &Inventory,
        key: &str,
        pending: impl Fn(&Inventory) -> Option<String>,
        done: impl Fn(&Inventory) -> bool,
        note: impl Fn(&str) -> String,
        reason: &str,
    ) -> Result<Answer<()>, Error> {
        let name = inventory.name_any();
        let api: Api<Inventory> = Api::namespaced(
            self.client.clone(),
            &inventory.namespace().unwrap_or_default(),
        );
        let mut current = inventory.clone();
        for attempt in 0..5 {
            let Some(value) = pending(&current) else {
                // Already recorded (a repeat), or released meanwhile.
                return Ok(if done(&current) {
                    Answer::Ok(())
                } else {
                    Answer::NotFound
                });
            };
            let patch = json!({"metadata": {
                "resourceVersion": current.resource_version(),
                "annotations": {key: value},
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.events
                        .publish(
                            &current,
                            EventType::Normal,
                            reason,
                            "Provision",
                            note(&value),
                        )
                        .await;
                    return Ok(Answer::Ok(()));
                }
                Err(e) if crate::runtime::is_conflict(&e) && attempt < 4 => {
                    match api.get_opt(&name).await? {
                        Some(fresh) => current = fresh,
                        None => return Ok(Answer::NotFound),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Answer::Unavailable)
    }

    async fn mark_installed(
        &self,
        api: &Api<Inventory>,
        inventory: &Inventory,
    ) -> Result<(), kube::Error> {
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let mut status = inventory.status.clone().unwrap_or_default();
        conditions::set_true(
            &mut status.conditions,
            HARVESTER_INSTALLED,
            Some(
                "the installer reported SUCCEEDED: network boot is off, the server boots from its disk",
            ),
            &now,
        );
        let body = json!({
            "metadata": {"resourceVersion": inventory.resource_version()},
            "status": {"conditions": status.conditions},
        });
        api.patch_status(
            &inventory.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await
        .map(drop)
    }
}

/// The script of an Inventory claimed by [`crate::onprem`]: a chain to the iPXE script URL its
/// claim recorded, while the claim holds and its release has not confirmed it off. `None` (the
/// disk) when it is not claimed, the release is under way, or the recorded value is not an
/// `http`/`https` URL of at most [`MAX_CHAIN_URL`] bytes. The URL is written as the URL parser
/// serializes it, which has no whitespace: nothing recorded can add a line to the script.
pub fn claimed_script(inventory: &Inventory) -> Option<String> {
    use crate::onprem::claims::CLAIMED_LABEL;
    use crate::onprem::cloud::{IPXE_URL_ANNOTATION, OFF_CONFIRMED_ANNOTATION};
    if inventory.labels().get(CLAIMED_LABEL).map(String::as_str) != Some("true") {
        return None;
    }
    let annotations = inventory.annotations();
    if annotations.contains_key(OFF_CONFIRMED_ANNOTATION) {
        return None;
    }
    let recorded = annotations
        .get(IPXE_URL_ANNOTATION)
        .filter(|u| u.len() <= MAX_CHAIN_URL)?;
    let url = url::Url::parse(recorded.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.as_str().len() > MAX_CHAIN_URL {
        return None;
    }
    Some(format!(
        "#!ipxe\n# claimed: the install boot its claim recorded\nchain --autofree {url}\n"
    ))
}

/// The install boot number of a claimed server whose install has not reported yet: claimed,
/// not being released, a boot sent, and the installed record not that boot's.
fn claim_installing(inventory: &Inventory) -> Option<String> {
    use crate::onprem::cloud::{BOOTS_ANNOTATION, INSTALLED_ANNOTATION};
    if !claim_active(inventory) {
        return None;
    }
    let annotations = inventory.annotations();
    let boot = annotations.get(BOOTS_ANNOTATION)?;
    (annotations.get(INSTALLED_ANNOTATION) != Some(boot)).then(|| boot.clone())
}

/// Whether the Inventory is claimed and not being released.
fn claim_active(inventory: &Inventory) -> bool {
    use crate::onprem::claims::CLAIMED_LABEL;
    use crate::onprem::cloud::OFF_CONFIRMED_ANNOTATION;
    inventory.labels().get(CLAIMED_LABEL).map(String::as_str) == Some("true")
        && !inventory
            .annotations()
            .contains_key(OFF_CONFIRMED_ANNOTATION)
}

/// Whether a claimed server's last install boot reported `SUCCEEDED`.
fn claim_installed(inventory: &Inventory) -> bool {
    use crate::onprem::cloud::{BOOTS_ANNOTATION, INSTALLED_ANNOTATION};
    let annotations = inventory.annotations();
    annotations
        .get(INSTALLED_ANNOTATION)
        .is_some_and(|n| annotations.get(BOOTS_ANNOTATION) == Some(n))
}

fn allocated(inventory: &Inventory) -> bool {
    inventory
        .status
        .as_ref()
        .is_some_and(|s| !s.owner_cluster.name.is_empty())
}

fn installed(inventory: &Inventory) -> bool {
    inventory
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, HARVESTER_INSTALLED))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A service whose watches never list (nothing serves the API address).
    fn unsynced() -> Arc<BootService> {
        unsynced_in(false)
    }

    fn unsynced_in(tinkerbell: bool) -> Arc<BootService> {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let (service, _feed) = BootService::new(
            Client::try_from(config).unwrap(),
            Arc::new(Metrics::default()),
            "test".into(),
            BootSettings {
                namespace: None,
                allowed_sources: Vec::new(),
                crash_point: None,
                tinkerbell,
                boot_url: None,
                media: None,
            },
        );
        service
    }

    #[tokio::test]
    async fn nothing_is_answered_from_stores_not_listed_yet() {
        let service = unsynced();
        let source: IpAddr = "127.0.20.2".parse().unwrap();
        assert_eq!(
            service.script("02:00:00:00:00:00").await,
            Script::Unavailable
        );
        assert_eq!(
            service.config("ns", "node0", source).await,
            Answer::Unavailable
        );
        assert_eq!(
            service.succeeded("ns", "node0", source).await.unwrap(),
            Answer::Unavailable
        );
    }

    #[tokio::test]
    async fn in_tinkerbell_mode_no_script_or_config_is_served() {
        let service = unsynced_in(true);
        let source: IpAddr = "127.0.20.2".parse().unwrap();
        // Answered at once, as an unknown MAC or node is: nothing is read for them.
        assert_eq!(service.script("02:00:00:00:00:00").await, Script::Unknown);
        assert_eq!(
            service.config("ns", "node0", source).await,
            Answer::NotFound
        );
    }

    /// An Inventory claimed by a pool, its install URL recorded, with `annotations` added.
    fn claimed(url: &str, extra: &[(&str, &str)]) -> Inventory {
        use crate::onprem::claims::CLAIMED_LABEL;
        use crate::onprem::cloud::IPXE_URL_ANNOTATION;
        let mut inventory = Inventory::new("server-0", Default::default());
        inventory.metadata.labels = Some([(CLAIMED_LABEL.to_owned(), "true".to_owned())].into());
        let mut annotations =
            std::collections::BTreeMap::from([(IPXE_URL_ANNOTATION.to_owned(), url.to_owned())]);
        for (k, v) in extra {
            annotations.insert((*k).to_owned(), (*v).to_owned());
        }
        inventory.metadata.annotations = Some(annotations);
        inventory
    }

    #[test]
    fn a_claimed_install_is_offered_until_that_boot_reports() {
        use crate::onprem::cloud::{
            BOOTS_ANNOTATION, INSTALLED_ANNOTATION, OFF_CONFIRMED_ANNOTATION,
        };
        let url = "http://10.0.0.5:8080/x.ipxe";
        // No boot sent yet: nothing to install.
        assert_eq!(claim_installing(&claimed(url, &[])), None);
        let booted = claimed(url, &[(BOOTS_ANNOTATION, "1")]);
        assert_eq!(claim_installing(&booted).as_deref(), Some("1"));
        assert!(!claim_installed(&booted));
        // Boot 1 reported: its disk, until boot 2 is sent.
        let reported = claimed(url, &[(BOOTS_ANNOTATION, "1"), (INSTALLED_ANNOTATION, "1")]);
        assert_eq!(claim_installing(&reported), None);
        assert!(claim_installed(&reported));
        let again = claimed(url, &[(BOOTS_ANNOTATION, "2"), (INSTALLED_ANNOTATION, "1")]);
        assert_eq!(claim_installing(&again).as_deref(), Some("2"));
        assert!(!claim_installed(&again));
        // Being released, or not claimed: never.
        let releasing = claimed(
            url,
            &[(BOOTS_ANNOTATION, "1"), (OFF_CONFIRMED_ANNOTATION, "true")],
        );
        assert_eq!(claim_installing(&releasing), None);
        let mut unclaimed = booted.clone();
        unclaimed.metadata.labels = None;
        assert_eq!(claim_installing(&unclaimed), None);
    }

    #[test]
    fn a_claimed_server_is_chained_to_its_recorded_script_until_confirmed_off() {
        use crate::onprem::cloud::OFF_CONFIRMED_ANNOTATION;
        let url = "http://10.0.0.5:8080/ipxe/instances/pool-abcdefgh.ipxe";
        assert_eq!(
            claimed_script(&claimed(url, &[])).as_deref(),
            Some(
                "#!ipxe\n# claimed: the install boot its claim recorded\nchain --autofree http://10.0.0.5:8080/ipxe/instances/pool-abcdefgh.ipxe\n"
            )
        );
        // Its release confirmed it off: the disk.
        let releasing = claimed(url, &[(OFF_CONFIRMED_ANNOTATION, "2026-01-01T00:00:00Z")]);
        assert_eq!(claimed_script(&releasing), None);
        // Not claimed (the label is the claim's): the disk.
        let mut unclaimed = claimed(url, &[]);
        unclaimed.metadata.labels = None;
        assert_eq!(claimed_script(&unclaimed), None);
        // No URL recorded yet: the disk.
        let mut no_url = claimed(url, &[]);
        no_url.metadata.annotations = None;
        assert_eq!(claimed_script(&no_url), None);
    }

    #[test]
    fn a_recorded_value_that_is_not_a_short_http_url_is_never_chained() {
        for bad in [
            "tftp://10.0.0.5/boot.ipxe",
            "not a url",
            "",
            &format!("http://10.0.0.5/{}", "a".repeat(MAX_CHAIN_URL)),
        ] {
            assert_eq!(claimed_script(&claimed(bad, &[])), None, "{bad:?}");
        }
        // A line break in the recorded value cannot add a command: the URL parser drops it,
        // and a space is escaped.
        let script = claimed_script(&claimed("http://10.0.0.5/a\nshell b.ipxe", &[])).unwrap();
        assert_eq!(script.lines().count(), 3, "{script}");
        assert!(
            script.ends_with("chain --autofree http://10.0.0.5/ashell%20b.ipxe\n"),
            "{script}"
        );
    }
}
